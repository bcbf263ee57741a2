/* SPDX-License-Identifier: MIT */
/*
 * molly-quantize: rewrites a GGUF model with its weight matrices converted to another type,
 * as llama.cpp's llama-quantize does with --pure (no per-tensor mixtures), so a model trained
 * in F32 can be shipped smaller.
 *
 *   molly-quantize IN.gguf OUT.gguf --type f16|bf16|q8_0|q4_0
 *                  [--embed-type T] [--output-type T] [--keep-f32 PATTERN]... [--verbose]
 *
 * Which tensors change: those with 2 or more dimensions. 1-D tensors (RMSNorm weights,
 * biases, rope_freqs) are copied as they are, as llama-quantize keeps them. token_embd.weight
 * takes --embed-type and output.weight --output-type (both default to --type; f32 allowed);
 * a tensor whose name matches a --keep-f32 glob (fnmatch, repeatable) is written as F32.
 *
 * Every metadata key is copied in its order (the tokenizer included), except that
 * general.file_type is set to --type's LLAMA_FTYPE value and general.quantization_version = 2
 * is added, as llama-quantize does. Tensors keep their order and names. The converted data is
 * byte-identical to llama-quantize --pure's for these four types (checked on the tiny models). The file is written through gguf_writer: OUT.gguf appears only when complete.
 *
 * Sources: a converted tensor must be F32, F16 or BF16 (all exact in float); a tensor that is
 * already quantized (Q8_0, Q4_K ...) is refused, as quantizing twice compounds the error —
 * quantize from the F32 file. A row length that is not a multiple of the target's block (32
 * for q8_0/q4_0) is refused with the tensor's name; --keep-f32 or a 16-bit type avoids it.
 *
 * Exit status: 0; 1 on an error (message "molly-quantize: ..." on stderr); 2 on usage.
 */
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf-writer.h"
#include "engine/gguf.h"
#include "engine/quant.h"

#define MAX_KEEP 32

struct options {
	const char *in, *out;
	uint32_t type, embed_type, output_type;
	bool embed_given, output_given;
	const char *keep[MAX_KEEP];
	size_t n_keep;
	bool verbose;
};

/* The target types offered: the ones llama.cpp and this engine both compute with and that
 * quant_quantize_row() writes. (Q4_K/Q6_K quantizers exist, but without llama.cpp's
 * importance-weighted search their error is larger than ggml's; not offered yet.) */
static bool target_ok(uint32_t t, bool allow_f32)
{
	return t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_Q8_0 ||
	       t == GGML_TYPE_Q4_0 || (allow_f32 && t == GGML_TYPE_F32);
}

/* llama.cpp's LLAMA_FTYPE for a file whose matrices are mostly of type t. */
static uint32_t file_type_of(uint32_t t)
{
	switch (t) {
	case GGML_TYPE_F16:
		return 1; /* MOSTLY_F16 */
	case GGML_TYPE_Q4_0:
		return 2;
	case GGML_TYPE_Q8_0:
		return 7;
	case GGML_TYPE_BF16:
		return 32;
	default:
		return 0; /* ALL_F32 */
	}
}

static bool is_quantized(uint32_t t)
{
	return t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16;
}

/* The type tensor t is written as. */
static uint32_t target_of(const struct options *o, const struct gguf_tensor *t)
{
	if (t->n_dims < 2)
		return t->type; /* norms, biases: copied */
	for (size_t i = 0; i < o->n_keep; i++)
		if (fnmatch(o->keep[i], t->name, 0) == 0)
			return GGML_TYPE_F32;
	if (strcmp(t->name, "token_embd.weight") == 0)
		return o->embed_type;
	if (strcmp(t->name, "output.weight") == 0)
		return o->output_type;
	return o->type;
}

static uint64_t n_rows_of(const struct gguf_tensor *t)
{
	uint64_t n = 1;

	for (uint32_t d = 1; d < t->n_dims; d++)
		n *= t->ne[d];
	return n;
}

/* Refuses what cannot be converted, naming the tensor, before anything is written. */
static int check_tensor(const struct gguf_tensor *t, uint32_t to, struct errmsg *e)
{
	if (to == t->type)
		return 0; /* copied byte for byte */
	if (is_quantized(t->type))
		return errmsg_set(e, -EINVAL,
				  "tensor '%s' is already %s: quantize from the F32 (or F16/BF16) "
				  "model, quantizing twice adds the errors",
				  t->name, gguf_ggml_type_name(t->type) ?: "an unknown type");
	if (t->ne[0] % quant_block_values(to) != 0)
		return errmsg_set(e, -EINVAL,
				  "tensor '%s': rows of %" PRIu64 " values are not a multiple of "
				  "%s's %zu-value blocks (use --keep-f32 '%s' or a 16-bit type)",
				  t->name, t->ne[0], quant_type_name(to), quant_block_values(to),
				  t->name);
	return 0;
}

static int copy_metadata(struct gguf_writer *w, const struct gguf *src, uint32_t type,
			 struct errmsg *e)
{
	bool have_qv = false;
	int r;

	for (size_t i = 0; i < gguf_n_kv(src); i++) {
		const struct gguf_kv *kv = gguf_kv_at(src, i);
		_cleanup_free_ char *key = strndup(kv->key.data, kv->key.len);

		if (!key)
			return errmsg_set(e, -ENOMEM, "out of memory");
		if (strcmp(key, "general.file_type") == 0) {
			r = gguf_writer_add_u32(w, key, file_type_of(type), e);
		} else if (strcmp(key, "general.quantization_version") == 0) {
			have_qv = true;
			r = gguf_writer_add_value(w, key, &kv->value, e);
		} else {
			r = gguf_writer_add_value(w, key, &kv->value, e);
		}
		if (r < 0)
			return r;
	}
	if (!gguf_get(src, "general.file_type")) {
		r = gguf_writer_add_u32(w, "general.file_type", file_type_of(type), e);
		if (r < 0)
			return r;
	}
	if (!have_qv) { /* llama-quantize records it for every target type */
		r = gguf_writer_add_u32(w, "general.quantization_version", 2, e);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * Q8_0 for weights as llama-quantize writes it (ggml's reference quantizer): d = amax/127
 * stored as fp16, q = roundf(x / d) with the float d (halves away from zero). The engine's
 * quant_quantize_row() Q8_0 is the activation form (q = round-half-even(x · 127/amax)), which
 * differs in the last bit of a few values; this one makes the same bytes as llama.cpp.
 */
static void quantize_q8_0_weights(const float *x, uint8_t *dst, int64_t n)
{
	for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0, dst += 2 + QK8_0) {
		float amax = 0.f, d, id;
		uint16_t h;

		for (int j = 0; j < QK8_0; j++)
			amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
		d = amax / 127.f;
		id = d != 0.f ? 1.f / d : 0.f;
		h = f32_to_fp16(d);
		memcpy(dst, &h, 2); /* little-endian host, as quant.c assumes */
		for (int j = 0; j < QK8_0; j++)
			dst[2 + j] = (uint8_t) (int8_t) roundf(x[j] * id);
	}
}

/* Converts tensor t row by row (float is exact for every accepted source type). */
static int convert_tensor(struct gguf_writer *w, const struct gguf_tensor *t, uint32_t to,
			  struct errmsg *e)
{
	int64_t n = (int64_t) t->ne[0];
	int64_t src_row = gguf_ggml_row_bytes(t->type, t->ne[0]), dst_row = quant_row_bytes(to, n);
	_cleanup_free_ float *row = malloc((size_t) n * sizeof(float));
	_cleanup_free_ void *q = dst_row > 0 ? malloc((size_t) dst_row) : NULL;
	uint64_t rows = n_rows_of(t);

	if (src_row <= 0 || dst_row <= 0)
		return errmsg_set(e, -EINVAL, "tensor '%s': cannot convert %s to %s", t->name,
				  gguf_ggml_type_name(t->type) ?: "?", quant_type_name(to));
	if (!row || !q)
		return errmsg_set(e, -ENOMEM, "out of memory");
	for (uint64_t i = 0; i < rows; i++) {
		const char *src = (const char *) t->data + i * (uint64_t) src_row;
		int r;

		quant_dequantize_row(t->type, src, row, n);
		if (to == GGML_TYPE_Q8_0)
			quantize_q8_0_weights(row, q, n);
		else
			quant_quantize_row(to, row, q, n);
		r = gguf_writer_write(w, q, (size_t) dst_row, e);
		if (r < 0)
			return r;
	}
	return 0;
}

static int quantize(const struct options *o, struct errmsg *e)
{
	_cleanup_(gguf_freep) struct gguf *src = NULL;
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
	size_t n_tensors, n_converted = 0;
	int r;

	r = gguf_open(o->in, &src, e);
	if (r < 0)
		return errmsg_prefix(e, r, "%s", o->in);
	n_tensors = gguf_n_tensors(src);
	if (n_tensors == 0)
		return errmsg_set(e, -EINVAL, "%s: no tensors (a vocabulary-only file?)", o->in);
	for (size_t i = 0; i < n_tensors; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(src, i);
		uint32_t to = target_of(o, t);

		r = check_tensor(t, to, e);
		if (r < 0)
			return errmsg_prefix(e, r, "%s", o->in);
	}

	r = gguf_writer_new(o->out, &w, e);
	if (r < 0)
		return r;
	if (!gguf_get(src, "general.alignment") && gguf_alignment(src) != 32) {
		r = gguf_writer_set_alignment(w, gguf_alignment(src), e);
		if (r < 0)
			return r;
	}
	r = copy_metadata(w, src, o->type, e);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n_tensors; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(src, i);

		r = gguf_writer_add_tensor(w, t->name, target_of(o, t), t->n_dims, t->ne, e);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < n_tensors; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(src, i);
		uint32_t to = target_of(o, t);

		if (to == t->type) {
			r = gguf_writer_write(w, t->data, t->n_bytes, e);
		} else {
			r = convert_tensor(w, t, to, e);
			n_converted++;
		}
		if (r < 0)
			return r;
		if (o->verbose)
			fprintf(stderr, "  %-36s %-5s -> %-5s\n", t->name,
				gguf_ggml_type_name(t->type) ?: "?", gguf_ggml_type_name(to) ?: "?");
	}
	r = gguf_writer_finish(w, e);
	if (r < 0)
		return r;
	fprintf(stderr, "molly-quantize: %s: %zu of %zu tensors converted (%s), %zu -> %" PRIu64
			" bytes\n",
		o->out, n_converted, n_tensors, quant_type_name(o->type), gguf_file_size(src),
		gguf_writer_size(w));
	return 0;
}

static void usage(FILE *f)
{
	fputs("Usage: molly-quantize IN.gguf OUT.gguf --type f16|bf16|q8_0|q4_0\n"
	      "                      [--embed-type T] [--output-type T] [--keep-f32 GLOB]...\n"
	      "Converts the 2-D weight matrices of a GGUF model; 1-D tensors stay as they are.\n"
	      "  --type T          type of the weight matrices\n"
	      "  --embed-type T    type of token_embd.weight (default: --type; f32 allowed)\n"
	      "  --output-type T   type of output.weight (default: --type; f32 allowed)\n"
	      "  --keep-f32 GLOB   write the matrices whose name matches GLOB as F32\n"
	      "  -v, --verbose     one line per tensor on stderr\n",
	      f);
}

static int parse_type(const char *opt, const char *s, bool allow_f32, uint32_t *ret)
{
	uint32_t t;

	if (quant_type_from_name(s, &t) < 0 || !target_ok(t, allow_f32)) {
		fprintf(stderr, "molly-quantize: %s '%s': expected f16, bf16, q8_0 or q4_0%s\n", opt,
			s, allow_f32 ? " (or f32)" : "");
		return -EINVAL;
	}
	*ret = t;
	return 0;
}

int main(int argc, char **argv)
{
	enum { OPT_EMBED = 0x100, OPT_OUTPUT, OPT_KEEP };
	static const struct option options[] = {
		{ "type", required_argument, NULL, 't' },
		{ "embed-type", required_argument, NULL, OPT_EMBED },
		{ "output-type", required_argument, NULL, OPT_OUTPUT },
		{ "keep-f32", required_argument, NULL, OPT_KEEP },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	struct options o = { .type = GGML_TYPE_COUNT_ };
	struct errmsg e = {};
	int c, r;

	while ((c = getopt_long(argc, argv, "t:vh", options, NULL)) >= 0) {
		switch (c) {
		case 't':
			if (parse_type("--type", optarg, false, &o.type) < 0)
				return 2;
			break;
		case OPT_EMBED:
			if (parse_type("--embed-type", optarg, true, &o.embed_type) < 0)
				return 2;
			o.embed_given = true;
			break;
		case OPT_OUTPUT:
			if (parse_type("--output-type", optarg, true, &o.output_type) < 0)
				return 2;
			o.output_given = true;
			break;
		case OPT_KEEP:
			if (o.n_keep == MAX_KEEP) {
				fprintf(stderr, "molly-quantize: at most %d --keep-f32\n", MAX_KEEP);
				return 2;
			}
			o.keep[o.n_keep++] = optarg;
			break;
		case 'v':
			o.verbose = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2 || o.type == GGML_TYPE_COUNT_) {
		usage(stderr);
		return 2;
	}
	o.in = argv[optind];
	o.out = argv[optind + 1];
	if (!o.embed_given)
		o.embed_type = o.type;
	if (!o.output_given)
		o.output_type = o.type;

	r = quantize(&o, &e);
	if (r < 0) {
		fprintf(stderr, "molly-quantize: %s\n", e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	return 0;
}
