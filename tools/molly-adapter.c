/* SPDX-License-Identifier: MIT */
/*
 * molly-adapter: imports LoRA adapters into Molly's adapter file and shows what an adapter
 * holds.
 *
 *   molly-adapter import SRC OUT --base MODEL.gguf [--name N] [--domains a,b]
 *                 [--exemplars FILE] [--dtype f16|bf16] [--skip-unsupported]
 *                 [--json-sidecar FILE]
 *       SRC: a PEFT directory or a GGUF LoRA file (or a Molly file, to change its metadata).
 *       Metadata comes from the sidecar ({"name": "...", "domains": [...], "exemplars":
 *       [...]}), then the flags, which win; --exemplars FILE holds one prompt per line.
 *       Records the base's fingerprint and the SHA-256 of its weights (which reads the whole
 *       base), writes OUT atomically and opens it again to check it.
 *   molly-adapter inspect FILE [--json] [--base MODEL.gguf]
 *       Identity (hex hashes), metadata, rank, scales, targets and the per-tensor table.
 *       Public formats need --base (their shapes are checked against it).
 *   molly-adapter verify FILE [--base MODEL.gguf]
 *       Reads every tensor (checking the stored SHA-256 of each) and, with --base, checks
 *       that the adapter was made for that base.
 *
 * Exit status: 0, or 1 after "molly-adapter: <reason>".
 */
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "basic/sha256.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "lora/adapter.h"
#include "lora/lora-file.h"

#define MAX_META_ITEMS 4096

static void usage(FILE *f)
{
	fputs("usage: molly-adapter import SRC OUT --base MODEL.gguf [--name N] [--domains a,b]\n"
	      "                     [--exemplars FILE] [--dtype f16|bf16] [--skip-unsupported]\n"
	      "                     [--json-sidecar FILE]\n"
	      "       molly-adapter inspect FILE [--json] [--base MODEL.gguf]\n"
	      "       molly-adapter verify FILE [--base MODEL.gguf]\n",
	      f);
}

_printf_(1, 2) static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs("molly-adapter: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* ---- metadata ---- */

struct meta_build {
	char *name;
	char **domains;
	size_t n_domains;
	char **exemplars;
	size_t n_exemplars;
};

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void meta_build_done(struct meta_build *m)
{
	free(m->name);
	strv_free(m->domains, m->n_domains);
	strv_free(m->exemplars, m->n_exemplars);
	*m = (struct meta_build){ 0 };
}

static int strv_push(char ***v, size_t *n, const char *s, size_t len)
{
	char **nv;

	if (*n >= MAX_META_ITEMS)
		return -E2BIG;
	nv = realloc(*v, (*n + 1) * sizeof(char *));
	if (!nv)
		return -ENOMEM;
	*v = nv;
	nv[*n] = strndup(s, len);
	if (!nv[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

static int read_file(const char *path, char **ret, size_t *ret_len)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f)
		return -errno;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			char *nb;

			if (cap > (64u << 20)) {
				free(buf);
				fclose(f);
				return -EFBIG;
			}
			cap = cap ? 2 * cap : 8192;
			nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				fclose(f);
				return -ENOMEM;
			}
			buf = nb;
		}
		size_t k = fread(buf + n, 1, 4096, f);
		if (k == 0)
			break;
		n += k;
	}
	if (ferror(f)) {
		free(buf);
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[n] = 0;
	*ret = buf;
	*ret_len = n;
	return 0;
}

static int json_string_list(struct json_object *v, const char *key, char ***out, size_t *n,
			    const char *path)
{
	if (!json_object_is_type(v, json_type_array))
		return fail("%s: \"%s\" is not a list of strings", path, key);
	strv_free(*out, *n);
	*out = NULL;
	*n = 0;
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		struct json_object *s = json_object_array_get_idx(v, i);

		if (!json_object_is_type(s, json_type_string) ||
		    strlen(json_object_get_string(s)) != (size_t) json_object_get_string_len(s))
			return fail("%s: \"%s\"[%zu] is not a string", path, key, i);
		if (strv_push(out, n, json_object_get_string(s),
			      (size_t) json_object_get_string_len(s)) < 0)
			return fail("%s: too many \"%s\"", path, key);
	}
	return 0;
}

static int load_sidecar(const char *path, struct meta_build *m)
{
	_cleanup_free_ char *text = NULL;
	struct json_tokener *tok;
	struct json_object *root;
	size_t len = 0;
	int r;

	r = read_file(path, &text, &len);
	if (r < 0)
		return fail("%s: %s", path, strerror(-r));
	tok = json_tokener_new();
	if (!tok)
		return fail("out of memory");
	root = json_tokener_parse_ex(tok, text, (int) len + 1);
	if (!root || json_tokener_get_error(tok) != json_tokener_success) {
		fail("%s: not valid JSON: %s", path,
		     json_tokener_error_desc(json_tokener_get_error(tok)));
		json_tokener_free(tok);
		json_object_put(root);
		return 1;
	}
	json_tokener_free(tok);
	if (!json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		return fail("%s: not a JSON object", path);
	}
	r = 0;
	json_object_object_foreach(root, key, val)
	{
		if (strcmp(key, "name") == 0) {
			if (!json_object_is_type(val, json_type_string)) {
				r = fail("%s: \"name\" is not a string", path);
				break;
			}
			free(m->name);
			m->name = strdup(json_object_get_string(val));
		} else if (strcmp(key, "domains") == 0) {
			r = json_string_list(val, key, &m->domains, &m->n_domains, path);
		} else if (strcmp(key, "exemplars") == 0) {
			r = json_string_list(val, key, &m->exemplars, &m->n_exemplars, path);
		} else {
			r = fail("%s: unknown key \"%s\" (expected name, domains, exemplars)", path,
				 key);
		}
		if (r)
			break;
	}
	json_object_put(root);
	return r;
}

static int load_exemplars(const char *path, struct meta_build *m)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r;

	r = read_file(path, &text, &len);
	if (r < 0)
		return fail("%s: %s", path, strerror(-r));
	if (strlen(text) != len)
		return fail("%s: contains a NUL byte", path);
	strv_free(m->exemplars, m->n_exemplars);
	m->exemplars = NULL;
	m->n_exemplars = 0;
	for (char *p = text; *p;) {
		size_t n = strcspn(p, "\n");
		size_t k = n;

		if (k > 0 && p[k - 1] == '\r')
			k--;
		if (k > 0 && strv_push(&m->exemplars, &m->n_exemplars, p, k) < 0)
			return fail("%s: too many exemplars (at most %d)", path, MAX_META_ITEMS);
		p += n;
		if (*p == '\n')
			p++;
	}
	return 0;
}

static int parse_domains(const char *s, struct meta_build *m)
{
	strv_free(m->domains, m->n_domains);
	m->domains = NULL;
	m->n_domains = 0;
	while (*s) {
		size_t n = strcspn(s, ",");

		if (n > 0 && strv_push(&m->domains, &m->n_domains, s, n) < 0)
			return fail("--domains: too many domains");
		s += n;
		if (*s == ',')
			s++;
	}
	return 0;
}

/* ---- printing ---- */

static const char *hex(const uint8_t d[32], char buf[SHA256_HEX_SIZE])
{
	return sha256_hex(d, buf);
}

static int print_text(const char *path, const struct lora_adapter *a)
{
	char h[SHA256_HEX_SIZE], targets[64];

	printf("%s: %s adapter\n", path, lora_format_name(lora_adapter_format(a)));
	printf("name:              %s\n", a->meta.name ? a->meta.name : "");
	printf("domains:           ");
	for (size_t i = 0; i < a->meta.n_domains; i++)
		printf("%s%s", i ? ", " : "", a->meta.domains[i]);
	printf("\nexemplars:         %zu\n", a->meta.n_exemplars);
	for (size_t i = 0; i < a->meta.n_exemplars; i++)
		printf("  %s\n", a->meta.exemplars[i]);
	printf("content sha256:    %s\n", hex(a->content_hash, h));
	printf("base:              %s\n", a->base_description ? a->base_description : "");
	printf("base fingerprint:  %s\n", hex(a->base_fingerprint, h));
	printf("base weights:      %s\n",
	       a->has_base_weights_hash ? hex(a->base_weights_hash, h) : "unknown");
	printf("max rank:          %" PRIu32 "\n", a->max_rank);
	printf("targets:           %s\n",
	       lora_targets_format(lora_adapter_targets(a), targets, sizeof(targets)));
	printf("matrices:          %zu\n", a->n_mats);
	printf("\n    #  layer  target  rank   n_in  n_out       scale  dtype      A offset"
	       "   A bytes      B offset   B bytes  A sha256          B sha256\n");
	for (size_t i = 0; i < a->n_mats; i++) {
		const struct lora_mat *m = &a->mats[i];
		uint64_t ao = 0, bo = 0;
		uint8_t as[32], bs[32];
		char ah[SHA256_HEX_SIZE] = "-", bh[SHA256_HEX_SIZE] = "-", aoff[24] = "-",
		     boff[24] = "-";

		if (lora_file_tensor_info(a, i, false, &ao, as) == 0 &&
		    lora_file_tensor_info(a, i, true, &bo, bs) == 0) {
			hex(as, ah);
			hex(bs, bh);
			(void) snprintf(aoff, sizeof(aoff), "%" PRIu64, ao);
			(void) snprintf(boff, sizeof(boff), "%" PRIu64, bo);
		}
		printf("%5zu  %5" PRIu32 "  %-6s  %4" PRIu32 "  %5" PRIu32 "  %5" PRIu32
		       "  %10.6g  %-5s  %12s  %8zu  %12s  %8zu  %.16s  %.16s\n",
		       i, m->layer, lora_target_name(m->target), m->rank, m->n_in, m->n_out,
		       (double) m->scale, quant_type_name(m->dtype), aoff, lora_mat_bytes(m, false),
		       boff, lora_mat_bytes(m, true), ah, bh);
	}
	return 0;
}

static struct json_object *jhex(const uint8_t d[32])
{
	char h[SHA256_HEX_SIZE];

	return json_object_new_string(sha256_hex(d, h));
}

static int print_json(const char *path, const struct lora_adapter *a)
{
	struct json_object *root = json_object_new_object(), *arr, *mats;

	if (!root)
		return fail("out of memory");
	json_object_object_add(root, "path", json_object_new_string(path));
	json_object_object_add(root, "format",
			       json_object_new_string(lora_format_name(lora_adapter_format(a))));
	json_object_object_add(root, "name",
			       json_object_new_string(a->meta.name ? a->meta.name : ""));
	arr = json_object_new_array();
	for (size_t i = 0; i < a->meta.n_domains; i++)
		json_object_array_add(arr, json_object_new_string(a->meta.domains[i]));
	json_object_object_add(root, "domains", arr);
	arr = json_object_new_array();
	for (size_t i = 0; i < a->meta.n_exemplars; i++)
		json_object_array_add(arr, json_object_new_string(a->meta.exemplars[i]));
	json_object_object_add(root, "exemplars", arr);
	json_object_object_add(root, "content_hash", jhex(a->content_hash));
	json_object_object_add(
		root, "base_description",
		json_object_new_string(a->base_description ? a->base_description : ""));
	json_object_object_add(root, "base_fingerprint", jhex(a->base_fingerprint));
	json_object_object_add(root, "base_weights_hash",
			       a->has_base_weights_hash ? jhex(a->base_weights_hash) : NULL);
	json_object_object_add(root, "max_rank", json_object_new_int64(a->max_rank));
	arr = json_object_new_array();
	for (int t = 0; t < LORA_TARGET_COUNT_; t++)
		if (lora_adapter_targets(a) & (1u << t))
			json_object_array_add(arr, json_object_new_string(lora_target_name(t)));
	json_object_object_add(root, "targets", arr);
	mats = json_object_new_array();
	for (size_t i = 0; i < a->n_mats; i++) {
		const struct lora_mat *m = &a->mats[i];
		struct json_object *o = json_object_new_object();
		uint64_t off;
		uint8_t sha[32];

		json_object_object_add(o, "layer", json_object_new_int64(m->layer));
		json_object_object_add(o, "target",
				       json_object_new_string(lora_target_name(m->target)));
		json_object_object_add(o, "rank", json_object_new_int64(m->rank));
		json_object_object_add(o, "n_in", json_object_new_int64(m->n_in));
		json_object_object_add(o, "n_out", json_object_new_int64(m->n_out));
		json_object_object_add(o, "scale", json_object_new_double(m->scale));
		json_object_object_add(o, "dtype",
				       json_object_new_string(quant_type_name(m->dtype)));
		json_object_object_add(o, "a_bytes",
				       json_object_new_int64((int64_t) lora_mat_bytes(m, false)));
		json_object_object_add(o, "b_bytes",
				       json_object_new_int64((int64_t) lora_mat_bytes(m, true)));
		if (lora_file_tensor_info(a, i, false, &off, sha) == 0) {
			json_object_object_add(o, "a_offset", json_object_new_int64((int64_t) off));
			json_object_object_add(o, "a_sha256", jhex(sha));
		}
		if (lora_file_tensor_info(a, i, true, &off, sha) == 0) {
			json_object_object_add(o, "b_offset", json_object_new_int64((int64_t) off));
			json_object_object_add(o, "b_sha256", jhex(sha));
		}
		json_object_array_add(mats, o);
	}
	json_object_object_add(root, "matrices", mats);
	puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
							  JSON_C_TO_STRING_SPACED |
							  JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(root);
	return 0;
}

/* ---- commands ---- */

static void print_warnings(const struct errmsg *w)
{
	const char *p = w->text;

	while (*p) {
		size_t n = strcspn(p, "\n");

		fprintf(stderr, "molly-adapter: warning: %.*s\n", (int) n, p);
		p += n;
		if (*p)
			p++;
	}
}

static int load_base(const char *path, struct model **ret)
{
	struct errmsg e = { "" };

	if (model_load(path, ret, &e) < 0)
		return fail("%s: %s", path, e.text);
	return 0;
}

static int open_adapter(const char *path, const struct lora_open_opts *opts,
			struct lora_adapter **ret)
{
	struct errmsg e = { "" }, w = { "" };
	int r = lora_adapter_open(path, opts, ret, &w, &e);

	print_warnings(&w);
	if (r < 0)
		return fail("%s", e.text[0] ? e.text : strerror(-r));
	return 0;
}

enum {
	OPT_BASE = 0x100,
	OPT_NAME,
	OPT_DOMAINS,
	OPT_EXEMPLARS,
	OPT_DTYPE,
	OPT_SKIP,
	OPT_SIDECAR,
	OPT_JSON,
};

static const struct option options[] = {
	{ "base", required_argument, NULL, OPT_BASE },
	{ "name", required_argument, NULL, OPT_NAME },
	{ "domains", required_argument, NULL, OPT_DOMAINS },
	{ "exemplars", required_argument, NULL, OPT_EXEMPLARS },
	{ "dtype", required_argument, NULL, OPT_DTYPE },
	{ "skip-unsupported", no_argument, NULL, OPT_SKIP },
	{ "json-sidecar", required_argument, NULL, OPT_SIDECAR },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "help", no_argument, NULL, 'h' },
	{},
};

struct args {
	const char *base, *name, *domains, *exemplars, *sidecar;
	uint32_t dtype;
	bool skip, json;
	const char *pos[2];
	int n_pos;
};

static int parse_args(int argc, char **argv, struct args *a, const char *allowed)
{
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
		const char *name = NULL;

		for (const struct option *o = options; o->name; o++)
			if (o->val == c)
				name = o->name;
		if (c != 'h' && c != '?' && name && !strstr(allowed, name))
			return fail("%s: --%s does not apply here", argv[0], name);
		switch (c) {
		case OPT_BASE:
			a->base = optarg;
			break;
		case OPT_NAME:
			a->name = optarg;
			break;
		case OPT_DOMAINS:
			a->domains = optarg;
			break;
		case OPT_EXEMPLARS:
			a->exemplars = optarg;
			break;
		case OPT_SIDECAR:
			a->sidecar = optarg;
			break;
		case OPT_DTYPE:
			if (strcmp(optarg, "f16") == 0)
				a->dtype = GGML_TYPE_F16;
			else if (strcmp(optarg, "bf16") == 0)
				a->dtype = GGML_TYPE_BF16;
			else
				return fail("--dtype: '%s' is not f16 or bf16", optarg);
			break;
		case OPT_SKIP:
			a->skip = true;
			break;
		case OPT_JSON:
			a->json = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return 1;
		}
	}
	for (; optind < argc; optind++) {
		if (a->n_pos == 2)
			return fail("%s: unexpected argument '%s'", argv[0], argv[optind]);
		a->pos[a->n_pos++] = argv[optind];
	}
	return 0;
}

static int cmd_import(int argc, char **argv)
{
	_cleanup_(model_freep) struct model *base = NULL;
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL, *check = NULL;
	struct meta_build mb = { 0 };
	struct lora_adapter_meta meta;
	struct errmsg e = { "" };
	struct args args = { 0 };
	uint8_t weights_hash[32];
	char h[SHA256_HEX_SIZE], targets[64];
	int r;

	r = parse_args(argc, argv, &args,
		       "base name domains exemplars dtype skip-unsupported json-sidecar");
	if (r)
		return r;
	if (args.n_pos != 2)
		return fail("import: need SRC and OUT (molly-adapter import SRC OUT --base "
			    "MODEL.gguf)");
	if (!args.base)
		return fail("import: --base MODEL.gguf is required (the model the adapter is for)");
	if ((args.sidecar && (r = load_sidecar(args.sidecar, &mb))) ||
	    (args.exemplars && (r = load_exemplars(args.exemplars, &mb))) ||
	    (args.domains && (r = parse_domains(args.domains, &mb)))) {
		meta_build_done(&mb);
		return r;
	}
	if (args.name) {
		free(mb.name);
		mb.name = strdup(args.name);
	}
	r = load_base(args.base, &base);
	if (!r)
		r = open_adapter(args.pos[0],
				 &(struct lora_open_opts){ .base = base,
							   .skip_unsupported = args.skip,
							   .dtype = args.dtype,
							   .name = mb.name },
				 &a);
	if (r) {
		meta_build_done(&mb);
		return r;
	}
	meta = (struct lora_adapter_meta){
		.name = a->meta.name,
		.domains = mb.domains ? mb.domains : a->meta.domains,
		.n_domains = mb.domains ? mb.n_domains : a->meta.n_domains,
		.exemplars = mb.exemplars ? mb.exemplars : a->meta.exemplars,
		.n_exemplars = mb.exemplars ? mb.n_exemplars : a->meta.n_exemplars,
	};
	/* Information only, and the slow part on big models: every base weight is read. */
	lora_base_weights_hash(base, weights_hash);
	r = lora_file_write(a, args.pos[1],
			    &(struct lora_write_opts){ .dtype = args.dtype,
						       .meta = &meta,
						       .base_weights_hash = weights_hash },
			    &e);
	meta_build_done(&mb);
	if (r < 0)
		return fail("%s", e.text[0] ? e.text : strerror(-r));
	r = open_adapter(args.pos[1], &(struct lora_open_opts){ .base = base }, &check);
	if (r)
		return r;
	printf("%s: %zu matrices (max rank %" PRIu32
	       ", targets %s, %s) for %s, content sha256 %s\n",
	       args.pos[1], check->n_mats, check->max_rank,
	       lora_targets_format(lora_adapter_targets(check), targets, sizeof(targets)),
	       quant_type_name(check->mats[0].dtype), check->base_description,
	       sha256_hex(check->content_hash, h));
	return 0;
}

static int cmd_inspect(int argc, char **argv, bool verify)
{
	_cleanup_(model_freep) struct model *base = NULL;
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
	struct args args = { 0 };
	int r;

	r = parse_args(argc, argv, &args, verify ? "base" : "base json");
	if (r)
		return r;
	if (args.n_pos != 1)
		return fail("%s: need one adapter FILE", argv[0]);
	if (args.base && (r = load_base(args.base, &base)))
		return r;
	r = open_adapter(args.pos[0], &(struct lora_open_opts){ .base = base }, &a);
	if (r)
		return r;
	if (!verify)
		return args.json ? print_json(args.pos[0], a) : print_text(args.pos[0], a);
	for (size_t i = 0; i < a->n_mats; i++)
		for (int b = 0; b < 2; b++) {
			size_t n = lora_mat_bytes(&a->mats[i], b);
			_cleanup_free_ void *buf = malloc(n);

			if (!buf)
				return fail("out of memory");
			r = lora_adapter_read(a, i, b, buf, n);
			if (r < 0)
				return fail("%s: matrix %zu (layer %" PRIu32 " %s) %s: %s",
					    args.pos[0], i, a->mats[i].layer,
					    lora_target_name(a->mats[i].target), b ? "B" : "A",
					    r == -EBADMSG ? "checksum mismatch (corrupt data)"
							  : strerror(-r));
		}
	printf("%s: ok (%zu matrices verified%s)\n", args.pos[0], a->n_mats,
	       base ? ", made for this base" : "");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 1;
	}
	if (strcmp(argv[1], "import") == 0)
		return cmd_import(argc - 1, argv + 1);
	if (strcmp(argv[1], "inspect") == 0)
		return cmd_inspect(argc - 1, argv + 1, false);
	if (strcmp(argv[1], "verify") == 0)
		return cmd_inspect(argc - 1, argv + 1, true);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(stdout);
		return 0;
	}
	usage(stderr);
	return fail("unknown command '%s'", argv[1]);
}
