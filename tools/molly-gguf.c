/* SPDX-License-Identifier: MIT */
/*
 * molly-gguf: prints what a GGUF file holds: version, alignment, every metadata key with its
 * type and value, and the tensor table. Long strings and arrays are abbreviated unless
 * --full is given.
 *
 *   molly-gguf [--full] FILE...
 *
 * Exit status: 0, or 1 after "molly-gguf: FILE: <reason>" when a file does not parse.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/quant.h"

#define ARRAY_HEAD  8   /* array elements shown before "..." */
#define STRING_HEAD 200 /* string bytes shown before "..." */

static bool arg_full;

static void print_str(const char *p, uint64_t len)
{
	uint64_t shown = arg_full ? len : MIN(len, (uint64_t) STRING_HEAD);

	putchar('"');
	for (uint64_t i = 0; i < shown; i++) {
		unsigned char c = (unsigned char) p[i];

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\t')
			fputs("\\t", stdout);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c); /* UTF-8 passes through */
	}
	putchar('"');
	if (shown < len)
		printf("...(%" PRIu64 " bytes)", len);
}

static void print_scalar(enum gguf_type t, const struct gguf_value *v)
{
	switch (t) {
	case GGUF_TYPE_INT8:
	case GGUF_TYPE_INT16:
	case GGUF_TYPE_INT32:
	case GGUF_TYPE_INT64:
		printf("%" PRId64, v->i64);
		break;
	case GGUF_TYPE_FLOAT32:
	case GGUF_TYPE_FLOAT64:
		printf("%g", v->f64);
		break;
	case GGUF_TYPE_BOOL:
		fputs(v->u64 ? "true" : "false", stdout);
		break;
	default:
		printf("%" PRIu64, v->u64);
		break;
	}
}

static void print_type(const struct gguf_value *v)
{
	if (v->type != GGUF_TYPE_ARRAY) {
		fputs(gguf_type_name(v->type), stdout);
		return;
	}
	printf("arr[%s,%" PRIu64 "]", gguf_type_name(v->arr.elem_type), v->arr.n);
}

static void print_value(const struct gguf_value *v)
{
	uint64_t shown;

	switch (v->type) {
	case GGUF_TYPE_STRING:
		print_str(v->str.data, v->str.len);
		return;
	case GGUF_TYPE_ARRAY:
		break;
	default:
		print_scalar(v->type, v);
		return;
	}

	shown = arg_full ? v->arr.n : MIN(v->arr.n, (uint64_t) ARRAY_HEAD);
	putchar('[');
	for (uint64_t i = 0; i < shown; i++) {
		if (i)
			fputs(", ", stdout);
		if (v->arr.elem_type == GGUF_TYPE_STRING) {
			print_str(v->arr.strs[i].data, v->arr.strs[i].len);
		} else if (v->arr.elem_type == GGUF_TYPE_ARRAY) {
			print_value(&v->arr.values[i]);
		} else {
			struct gguf_value x = { .type = v->arr.elem_type };

			if (v->arr.elem_type == GGUF_TYPE_FLOAT32 ||
			    v->arr.elem_type == GGUF_TYPE_FLOAT64)
				x.f64 = gguf_arr_f64(v, i);
			else if (v->arr.elem_type == GGUF_TYPE_INT8 ||
				 v->arr.elem_type == GGUF_TYPE_INT16 ||
				 v->arr.elem_type == GGUF_TYPE_INT32 ||
				 v->arr.elem_type == GGUF_TYPE_INT64)
				x.i64 = gguf_arr_i64(v, i);
			else
				x.u64 = gguf_arr_u64(v, i);
			print_scalar(v->arr.elem_type, &x);
		}
	}
	if (shown < v->arr.n)
		printf(", ... (%" PRIu64 " total)", v->arr.n);
	putchar(']');
}

static void print_file(const char *path, const struct gguf *g)
{
	size_t n_kv = gguf_n_kv(g), n_tensors = gguf_n_tensors(g);
	uint64_t data_start = UINT64_MAX, total = 0;

	for (size_t i = 0; i < n_tensors; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		uint64_t at =
		    (uint64_t) ((const char *) t->data - (const char *) gguf_file_data(g));

		data_start = MIN(data_start, at - t->offset);
		total += t->n_bytes;
	}

	printf("%s: GGUF version %" PRIu32 ", alignment %" PRIu32 ", %zu bytes\n", path,
	       gguf_version(g), gguf_alignment(g), gguf_file_size(g));

	printf("\n%zu metadata keys:\n", n_kv);
	for (size_t i = 0; i < n_kv; i++) {
		const struct gguf_kv *kv = gguf_kv_at(g, i);

		printf("  %-44.*s ", (int) MIN(kv->key.len, (uint64_t) INT32_MAX), kv->key.data);
		print_type(&kv->value);
		fputs(" = ", stdout);
		print_value(&kv->value);
		putchar('\n');
	}

	printf("\n%zu tensors", n_tensors);
	if (n_tensors)
		printf(" (%" PRIu64 " bytes of data at file offset %" PRIu64 ")", total,
		       data_start);
	printf(":\n");
	if (n_tensors)
		printf("  %5s  %-36s %-7s %-24s %12s %12s\n", "#", "name", "type", "shape",
		       "offset", "bytes");
	for (size_t i = 0; i < n_tensors; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		const char *tname = gguf_ggml_type_name(t->type);
		char shape[96];
		size_t o = 0;

		o += (size_t) snprintf(shape + o, sizeof(shape) - o, "[");
		for (uint32_t d = 0; d < t->n_dims && o < sizeof(shape); d++)
			o += (size_t) snprintf(shape + o, sizeof(shape) - o, "%s%" PRIu64,
					       d ? ", " : "", t->ne[d]);
		if (o < sizeof(shape))
			snprintf(shape + o, sizeof(shape) - o, "]");
		printf("  %5zu  %-36s %-7s %-24s %12" PRIu64 " %12" PRIu64 "\n", i, t->name,
		       tname ? tname : "?", shape, t->offset, t->n_bytes);
	}
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "full", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	int c, ret = 0;

	while ((c = getopt_long(argc, argv, "fh", options, NULL)) >= 0) {
		switch (c) {
		case 'f':
			arg_full = true;
			break;
		case 'h':
			printf("Usage: %s [--full] FILE...\n"
			       "Prints the metadata and tensor table of GGUF files.\n"
			       "  -f, --full   print long strings and arrays in full\n",
			       argv[0]);
			return 0;
		default:
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "Usage: %s [--full] FILE...\n", argv[0]);
		return 2;
	}

	for (int i = optind; i < argc; i++) {
		_cleanup_(gguf_freep) struct gguf *g = NULL;
		struct errmsg e = {};
		int r;

		r = gguf_open(argv[i], &g, &e);
		if (r < 0) {
			fflush(stdout);
			fprintf(stderr, "molly-gguf: %s: %s\n", argv[i],
				e.text[0] ? e.text : strerror(-r));
			ret = 1;
			continue;
		}
		if (i > optind)
			putchar('\n');
		print_file(argv[i], g);
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		perror("molly-gguf: stdout");
		return 1;
	}
	return ret;
}
