/* SPDX-License-Identifier: MIT */
/*
 * molly-mkmodel: writes a llama- (or qwen2-) architecture GGUF with seeded random weights,
 * for benchmarks and tests at sizes the shared models do not cover.
 *
 *   molly-mkmodel [--preset 100m|1b|mini] [--type f32|f16|bf16|q8_0|q4_0|q4_k|q6_k] [--seed S]
 *                 [--vocab VOCAB.gguf] [--hidden N] [--layers N] [--heads N] [--kv-heads N]
 *                 [--ffn N] [--vocab-size N] [--context N] [--arch llama|qwen2]
 *                 [--rope-base F] [--tied] [--name NAME] --out FILE
 *
 * Weights are N(0, 0.02²) from a splitmix64 stream per tensor (so one tensor's values do not
 * depend on the shapes of the others), through Box-Muller; norm weights are 1.0. --type applies
 * to every 2-D matrix, token_embd and output included; norms and biases stay F32. The data is
 * generated and written one row at a time: memory use does not depend on the model size.
 *
 * Tensor names, shapes and order follow models/tiny/README.md (the F32 files' order). With
 * --vocab, every tokenizer.* key is copied from that GGUF and the vocabulary size is its token
 * count; otherwise a SentencePiece-style ("llama") vocabulary is generated: <unk> <s> </s>,
 * the 256 byte tokens <0x00>..<0xFF>, then unique letter pieces.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/gguf-writer.h"
#include "engine/gguf.h"
#include "engine/quant.h"

#define WEIGHT_SCALE 0.02
#define MAX_DIM      (1u << 20)

struct shape {
	const char *arch;
	uint32_t hidden, layers, heads, kv_heads, ffn, vocab, context;
	float rope_base;
	bool tied;
};

struct preset {
	const char *name;
	struct shape shape;
};

static const struct preset presets[] = {
	{ "100m", { "llama", 768, 12, 12, 12, 2048, 32000, 2048, 10000.0f, false } },
	{ "1b", { "llama", 2048, 16, 32, 8, 8192, 32000, 2048, 10000.0f, false } },
	/* Molly's own small model (docs/model.md, tools/train-default-model.sh): 11.2M
	 * parameters with the 4096-token tokenizer of molly-bpe-train, embeddings tied */
	{ "mini", { "llama", 320, 8, 8, 8, 864, 4096, 256, 10000.0f, true } },
};

/* ---- random numbers ---- */

struct rng {
	uint64_t state;
	bool have_spare;
	double spare;
};

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static struct rng rng_for_tensor(uint64_t seed, uint64_t index)
{
	uint64_t s = seed ^ (index * 0xd1b54a32d192ed03ull);

	return (struct rng){ .state = splitmix64(&s) };
}

/* Standard normal via Box-Muller, both values used. */
static double rng_normal(struct rng *r)
{
	double u1, u2, radius;

	if (r->have_spare) {
		r->have_spare = false;
		return r->spare;
	}
	u1 = ((splitmix64(&r->state) >> 11) + 1) * 0x1.0p-53; /* (0, 1]: log() stays finite */
	u2 = (splitmix64(&r->state) >> 11) * 0x1.0p-53;
	radius = sqrt(-2.0 * log(u1));
	r->spare = radius * sin(2.0 * M_PI * u2);
	r->have_spare = true;
	return radius * cos(2.0 * M_PI * u2);
}

/* ---- the tensor list ---- */

enum fill { FILL_RANDOM, FILL_ONES };

struct tensor_spec {
	char name[64];
	uint32_t type, n_dims;
	uint64_t ne[2];
	enum fill fill;
};

struct model_spec {
	struct tensor_spec *tensors; /* owned */
	size_t n;
};

static int spec_add(struct model_spec *m, size_t cap, uint32_t type, uint32_t n_dims, uint64_t ne0,
		    uint64_t ne1, enum fill fill, const char *fmt, ...) _printf_(8, 9);

static int spec_add(struct model_spec *m, size_t cap, uint32_t type, uint32_t n_dims, uint64_t ne0,
		    uint64_t ne1, enum fill fill, const char *fmt, ...)
{
	struct tensor_spec *t;
	va_list ap;

	if (m->n >= cap)
		return -ENOBUFS;
	t = &m->tensors[m->n++];
	*t = (struct tensor_spec){
		.type = type, .n_dims = n_dims, .ne = { ne0, ne1 }, .fill = fill
	};
	va_start(ap, fmt);
	(void) vsnprintf(t->name, sizeof(t->name), fmt, ap);
	va_end(ap);
	return 0;
}

static int build_spec(const struct shape *s, uint32_t type, struct model_spec *m)
{
	uint32_t head_dim = s->hidden / s->heads, kv_dim = head_dim * s->kv_heads;
	bool qwen2 = strcmp(s->arch, "qwen2") == 0;
	size_t cap = 3 + (size_t) s->layers * 12;
	int r = 0;

	m->tensors = calloc(cap, sizeof(*m->tensors));
	if (!m->tensors)
		return -ENOMEM;
	m->n = 0;
	r |= spec_add(m, cap, type, 2, s->hidden, s->vocab, FILL_RANDOM, "token_embd.weight");
	for (uint32_t l = 0; l < s->layers; l++) {
		r |= spec_add(m, cap, GGML_TYPE_F32, 1, s->hidden, 1, FILL_ONES,
			      "blk.%u.attn_norm.weight", l);
		r |= spec_add(m, cap, type, 2, s->hidden, s->hidden, FILL_RANDOM,
			      "blk.%u.attn_q.weight", l);
		if (qwen2)
			r |= spec_add(m, cap, GGML_TYPE_F32, 1, s->hidden, 1, FILL_RANDOM,
				      "blk.%u.attn_q.bias", l);
		r |= spec_add(m, cap, type, 2, s->hidden, kv_dim, FILL_RANDOM,
			      "blk.%u.attn_k.weight", l);
		if (qwen2)
			r |= spec_add(m, cap, GGML_TYPE_F32, 1, kv_dim, 1, FILL_RANDOM,
				      "blk.%u.attn_k.bias", l);
		r |= spec_add(m, cap, type, 2, s->hidden, kv_dim, FILL_RANDOM,
			      "blk.%u.attn_v.weight", l);
		if (qwen2)
			r |= spec_add(m, cap, GGML_TYPE_F32, 1, kv_dim, 1, FILL_RANDOM,
				      "blk.%u.attn_v.bias", l);
		r |= spec_add(m, cap, type, 2, s->hidden, s->hidden, FILL_RANDOM,
			      "blk.%u.attn_output.weight", l);
		r |= spec_add(m, cap, GGML_TYPE_F32, 1, s->hidden, 1, FILL_ONES,
			      "blk.%u.ffn_norm.weight", l);
		r |= spec_add(m, cap, type, 2, s->hidden, s->ffn, FILL_RANDOM,
			      "blk.%u.ffn_gate.weight", l);
		r |= spec_add(m, cap, type, 2, s->hidden, s->ffn, FILL_RANDOM,
			      "blk.%u.ffn_up.weight", l);
		r |= spec_add(m, cap, type, 2, s->ffn, s->hidden, FILL_RANDOM,
			      "blk.%u.ffn_down.weight", l);
	}
	r |= spec_add(m, cap, GGML_TYPE_F32, 1, s->hidden, 1, FILL_ONES, "output_norm.weight");
	if (!s->tied)
		r |= spec_add(m, cap, type, 2, s->hidden, s->vocab, FILL_RANDOM, "output.weight");
	return r ? -ENOBUFS : 0;
}

/* ---- metadata ---- */

static uint32_t file_type_of(uint32_t type)
{
	switch (type) {
	case GGML_TYPE_F32:
		return 0; /* ALL_F32 */
	case GGML_TYPE_F16:
		return 1; /* MOSTLY_F16 */
	case GGML_TYPE_Q4_0:
		return 2;
	case GGML_TYPE_Q8_0:
		return 7;
	case GGML_TYPE_Q4_K:
		return 15; /* MOSTLY_Q4_K_M, as llama-quantize --pure records it */
	case GGML_TYPE_Q6_K:
		return 18;
	case GGML_TYPE_BF16:
		return 32;
	default:
		return 0;
	}
}

/* "a".."z", "aa".. (bijective base 26), so pieces never repeat. */
static void letters(uint64_t k, char *out, size_t size)
{
	char tmp[32];
	size_t n = 0;

	k++;
	while (k > 0 && n < sizeof(tmp)) {
		k--;
		tmp[n++] = (char) ('a' + k % 26);
		k /= 26;
	}
	for (size_t i = 0; i < n && i + 1 < size; i++)
		out[i] = tmp[n - 1 - i];
	out[MIN(n, size - 1)] = 0;
}

static int add_generated_vocab(struct gguf_writer *w, uint32_t n_vocab, struct errmsg *e)
{
	_cleanup_free_ char **tokens = NULL;
	_cleanup_free_ char *storage = NULL;
	_cleanup_free_ float *scores = NULL;
	_cleanup_free_ int32_t *types = NULL;
	size_t used = 0, storage_size = (size_t) n_vocab * 16;
	int r;

	tokens = calloc(n_vocab, sizeof(*tokens));
	storage = malloc(storage_size);
	scores = calloc(n_vocab, sizeof(*scores));
	types = calloc(n_vocab, sizeof(*types));
	if (!tokens || !storage || !scores || !types)
		return errmsg_set(e, -ENOMEM, "out of memory for the vocabulary");

	for (uint32_t i = 0; i < n_vocab; i++) {
		char piece[32];

		if (i == 0) {
			strcpy(piece, "<unk>");
			types[i] = 2; /* UNKNOWN */
		} else if (i == 1 || i == 2) {
			strcpy(piece, i == 1 ? "<s>" : "</s>");
			types[i] = 3; /* CONTROL */
		} else if (i < 3 + 256) {
			snprintf(piece, sizeof(piece), "<0x%02X>", i - 3);
			types[i] = 6; /* BYTE */
		} else {
			uint32_t j = i - 259;
			char word[24];

			letters(j / 2, word, sizeof(word));
			/* "▁" (U+2581) marks a word start in SentencePiece */
			snprintf(piece, sizeof(piece), "%s%s", j % 2 == 0 ? "\xe2\x96\x81" : "",
				 word);
			types[i] = 1; /* NORMAL */
			scores[i] = -(float) j;
		}
		size_t len = strlen(piece) + 1;
		if (used + len > storage_size)
			return errmsg_set(e, -ENOBUFS, "vocabulary storage overflow");
		memcpy(storage + used, piece, len);
		tokens[i] = storage + used;
		used += len;
	}

	r = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", e);
	if (r >= 0)
		r = gguf_writer_add_str_array(w, "tokenizer.ggml.tokens",
					      (const char *const *) tokens, n_vocab, e);
	if (r >= 0)
		r = gguf_writer_add_array(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores,
					  n_vocab, e);
	if (r >= 0)
		r = gguf_writer_add_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types,
					  n_vocab, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2, e);
	return r;
}

static int copy_vocab(struct gguf_writer *w, const struct gguf *src, struct errmsg *e)
{
	for (size_t i = 0; i < gguf_n_kv(src); i++) {
		const struct gguf_kv *kv = gguf_kv_at(src, i);
		char key[512];
		int r;

		if (kv->key.len < 10 || memcmp(kv->key.data, "tokenizer.", 10) != 0)
			continue;
		if (kv->key.len >= sizeof(key))
			return errmsg_set(e, -EINVAL, "key of %" PRIu64 " bytes is too long",
					  kv->key.len);
		memcpy(key, kv->key.data, kv->key.len);
		key[kv->key.len] = 0;
		r = gguf_writer_add_value(w, key, &kv->value, e);
		if (r < 0)
			return r;
	}
	return 0;
}

static int add_metadata(struct gguf_writer *w, const struct shape *s, uint32_t type,
			const char *name, struct errmsg *e)
{
	char key[128];
	int r;

#define ARCH_KEY(suffix) (snprintf(key, sizeof(key), "%s." suffix, s->arch), key)
	r = gguf_writer_add_str(w, "general.architecture", s->arch, e);
	if (r >= 0)
		r = gguf_writer_add_str(w, "general.name", name, e);
	if (r >= 0)
		r = gguf_writer_set_alignment(w, 32, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, ARCH_KEY("context_length"), s->context, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, ARCH_KEY("embedding_length"), s->hidden, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, ARCH_KEY("block_count"), s->layers, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, ARCH_KEY("feed_forward_length"), s->ffn, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, ARCH_KEY("attention.head_count"), s->heads, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, ARCH_KEY("attention.head_count_kv"), s->kv_heads, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, ARCH_KEY("rope.dimension_count"), s->hidden / s->heads,
					e);
	if (r >= 0)
		r = gguf_writer_add_f32(w, ARCH_KEY("rope.freq_base"), s->rope_base, e);
	if (r >= 0)
		r = gguf_writer_add_f32(w, ARCH_KEY("attention.layer_norm_rms_epsilon"), 1e-5f, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, ARCH_KEY("vocab_size"), s->vocab, e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, "general.file_type", file_type_of(type), e);
#undef ARCH_KEY
	return r;
}

/* ---- the data ---- */

static int write_tensor(struct gguf_writer *w, const struct tensor_spec *t, uint64_t seed,
			size_t index, float *row, void *qrow, struct errmsg *e)
{
	struct rng rng = rng_for_tensor(seed, index);
	int64_t row_bytes = quant_row_bytes(t->type, (int64_t) t->ne[0]);

	if (row_bytes <= 0)
		return errmsg_set(e, -EINVAL, "tensor '%s': cannot make %s rows of %" PRIu64,
				  t->name, quant_type_name(t->type), t->ne[0]);
	for (uint64_t r1 = 0; r1 < t->ne[1]; r1++) {
		int r;

		for (uint64_t i = 0; i < t->ne[0]; i++)
			row[i] =
			    t->fill == FILL_ONES ? 1.0f : (float) (WEIGHT_SCALE * rng_normal(&rng));
		if (t->type == GGML_TYPE_F32) {
			r = gguf_writer_write(w, row, t->ne[0] * sizeof(float), e);
		} else {
			quant_quantize_row(t->type, row, qrow, (int64_t) t->ne[0]);
			r = gguf_writer_write(w, qrow, (size_t) row_bytes, e);
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- command line ---- */

static int parse_u32(const char *opt, const char *s, uint32_t max, uint32_t *ret)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v == 0 || v > max) {
		fprintf(stderr, "molly-mkmodel: --%s: '%s' is not a number in 1..%" PRIu32 "\n",
			opt, s, max);
		return -EINVAL;
	}
	*ret = (uint32_t) v;
	return 0;
}

static void usage(FILE *f)
{
	fputs("Usage: molly-mkmodel [--preset 100m|1b|mini] [--type TYPE] [--seed S] [--vocab V.gguf]\n"
	      "                     [shape options] --out FILE\n"
	      "Writes a GGUF model with seeded random weights.\n"
	      "  --preset P        100m (768 hidden, 12 layers), 1b (2048, 16 layers, GQA 32/8)\n"
	      "                    or mini (320, 8 layers, ffn 864, context 256, tied; with the\n"
	      "                    tokenizer of molly-bpe-train: docs/model.md)\n"
	      "  --type T          f32 f16 bf16 q8_0 q4_0 q4_k q6_k, for every 2-D matrix (f32)\n"
	      "  --seed S          random seed (0)\n"
	      "  --vocab V.gguf    copy tokenizer.* keys from V; the vocabulary size follows it\n"
	      "  --hidden N --layers N --heads N --kv-heads N --ffn N --vocab-size N\n"
	      "  --context N --arch llama|qwen2 --rope-base F --tied   override the preset\n"
	      "  --name NAME       general.name\n"
	      "  --out FILE        output (written as FILE.tmp, renamed when complete)\n",
	      f);
}

int main(int argc, char **argv)
{
	enum {
		OPT_PRESET = 0x100,
		OPT_TYPE,
		OPT_SEED,
		OPT_VOCAB,
		OPT_OUT,
		OPT_HIDDEN,
		OPT_LAYERS,
		OPT_HEADS,
		OPT_KV_HEADS,
		OPT_FFN,
		OPT_VOCAB_SIZE,
		OPT_CONTEXT,
		OPT_ARCH,
		OPT_ROPE_BASE,
		OPT_TIED,
		OPT_NAME,
	};
	static const struct option options[] = {
		{ "preset", required_argument, NULL, OPT_PRESET },
		{ "type", required_argument, NULL, OPT_TYPE },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "vocab", required_argument, NULL, OPT_VOCAB },
		{ "out", required_argument, NULL, OPT_OUT },
		{ "hidden", required_argument, NULL, OPT_HIDDEN },
		{ "layers", required_argument, NULL, OPT_LAYERS },
		{ "heads", required_argument, NULL, OPT_HEADS },
		{ "kv-heads", required_argument, NULL, OPT_KV_HEADS },
		{ "ffn", required_argument, NULL, OPT_FFN },
		{ "vocab-size", required_argument, NULL, OPT_VOCAB_SIZE },
		{ "context", required_argument, NULL, OPT_CONTEXT },
		{ "arch", required_argument, NULL, OPT_ARCH },
		{ "rope-base", required_argument, NULL, OPT_ROPE_BASE },
		{ "tied", no_argument, NULL, OPT_TIED },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	/* shape overrides, applied on top of the preset; 0 = not given */
	uint32_t o_hidden = 0, o_layers = 0, o_heads = 0, o_kv_heads = 0, o_ffn = 0, o_vocab = 0,
		 o_context = 0;
	const char *preset = "100m", *o_arch = NULL, *vocab_path = NULL, *out = NULL, *name = NULL;
	float o_rope_base = 0;
	bool o_tied = false;
	uint32_t type = GGML_TYPE_F32;
	uint64_t seed = 0;
	struct shape s;
	int c;

	while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
		char *end;
		int r = 0;

		switch (c) {
		case OPT_PRESET:
			preset = optarg;
			break;
		case OPT_TYPE:
			if (quant_type_from_name(optarg, &type) < 0 ||
			    !quant_type_supported(type) || type == GGML_TYPE_Q8_K) {
				fprintf(stderr,
					"molly-mkmodel: --type: unknown or unsupported "
					"type '%s'\n",
					optarg);
				return 2;
			}
			break;
		case OPT_SEED:
			errno = 0;
			seed = strtoull(optarg, &end, 0);
			if (errno || end == optarg || *end) {
				fprintf(stderr, "molly-mkmodel: --seed: bad number '%s'\n", optarg);
				return 2;
			}
			break;
		case OPT_VOCAB:
			vocab_path = optarg;
			break;
		case OPT_OUT:
			out = optarg;
			break;
		case OPT_HIDDEN:
			r = parse_u32("hidden", optarg, MAX_DIM, &o_hidden);
			break;
		case OPT_LAYERS:
			r = parse_u32("layers", optarg, 4096, &o_layers);
			break;
		case OPT_HEADS:
			r = parse_u32("heads", optarg, 4096, &o_heads);
			break;
		case OPT_KV_HEADS:
			r = parse_u32("kv-heads", optarg, 4096, &o_kv_heads);
			break;
		case OPT_FFN:
			r = parse_u32("ffn", optarg, MAX_DIM, &o_ffn);
			break;
		case OPT_VOCAB_SIZE:
			r = parse_u32("vocab-size", optarg, 1u << 24, &o_vocab);
			break;
		case OPT_CONTEXT:
			r = parse_u32("context", optarg, 1u << 24, &o_context);
			break;
		case OPT_ARCH:
			if (strcmp(optarg, "llama") != 0 && strcmp(optarg, "qwen2") != 0) {
				fprintf(stderr,
					"molly-mkmodel: --arch: '%s' is not llama or qwen2\n",
					optarg);
				return 2;
			}
			o_arch = optarg;
			break;
		case OPT_ROPE_BASE:
			errno = 0;
			o_rope_base = strtof(optarg, &end);
			if (errno || end == optarg || *end || !(o_rope_base > 0) ||
			    !isfinite(o_rope_base)) {
				fprintf(stderr, "molly-mkmodel: --rope-base: bad value '%s'\n",
					optarg);
				return 2;
			}
			break;
		case OPT_TIED:
			o_tied = true;
			break;
		case OPT_NAME:
			name = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		if (r < 0)
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "molly-mkmodel: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!out) {
		fprintf(stderr, "molly-mkmodel: --out FILE is required\n");
		usage(stderr);
		return 2;
	}

	/* resolve the shape */
	{
		const struct preset *p = NULL;

		for (size_t i = 0; i < ELEMENTSOF(presets); i++)
			if (strcmp(presets[i].name, preset) == 0)
				p = &presets[i];
		if (!p) {
			fprintf(stderr,
				"molly-mkmodel: --preset: unknown preset '%s' (100m, 1b, mini)\n",
				preset);
			return 2;
		}
		s = p->shape;
		if (o_hidden)
			s.hidden = o_hidden;
		if (o_layers)
			s.layers = o_layers;
		if (o_heads)
			s.heads = o_heads;
		if (o_kv_heads)
			s.kv_heads = o_kv_heads;
		else if (o_heads && s.kv_heads > s.heads)
			s.kv_heads = s.heads;
		if (o_ffn)
			s.ffn = o_ffn;
		if (o_vocab)
			s.vocab = o_vocab;
		if (o_context)
			s.context = o_context;
		if (o_arch)
			s.arch = o_arch;
		if (o_rope_base > 0)
			s.rope_base = o_rope_base;
		if (o_tied)
			s.tied = true;
	}

	_cleanup_(gguf_freep) struct gguf *vocab = NULL;
	struct errmsg e = {};
	int r;

	if (vocab_path) {
		const struct gguf_value *tokens;

		r = gguf_open(vocab_path, &vocab, &e);
		if (r < 0) {
			fprintf(stderr, "molly-mkmodel: %s: %s\n", vocab_path, e.text);
			return 1;
		}
		tokens = gguf_get_array(vocab, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
		if (!tokens || tokens->arr.n == 0 || tokens->arr.n > (1u << 24)) {
			fprintf(stderr,
				"molly-mkmodel: %s: no usable tokenizer.ggml.tokens array\n",
				vocab_path);
			return 1;
		}
		if (o_vocab && o_vocab != tokens->arr.n) {
			fprintf(stderr,
				"molly-mkmodel: --vocab-size %" PRIu32 " contradicts the %" PRIu64
				" tokens of %s\n",
				o_vocab, tokens->arr.n, vocab_path);
			return 2;
		}
		s.vocab = (uint32_t) tokens->arr.n;
	} else if (s.vocab < 3 + 256) {
		fprintf(
		    stderr,
		    "molly-mkmodel: a generated vocabulary needs at least 259 tokens (3 special "
		    "+ 256 bytes), not %" PRIu32 "\n",
		    s.vocab);
		return 2;
	}

	/* check the shape */
	{
		size_t block = quant_block_values(type);

		if (s.hidden % s.heads != 0 || (s.hidden / s.heads) % 2 != 0) {
			fprintf(stderr,
				"molly-mkmodel: hidden %" PRIu32 " / %" PRIu32 " heads must give a "
				"whole, even head size (RoPE rotates pairs)\n",
				s.hidden, s.heads);
			return 2;
		}
		if (s.kv_heads > s.heads || s.heads % s.kv_heads != 0) {
			fprintf(stderr,
				"molly-mkmodel: %" PRIu32 " heads are not a multiple of %" PRIu32
				" KV heads\n",
				s.heads, s.kv_heads);
			return 2;
		}
		if (block == 0 || s.hidden % block != 0 || s.ffn % block != 0) {
			fprintf(stderr,
				"molly-mkmodel: %s needs hidden (%" PRIu32 ") and ffn (%" PRIu32
				") to be multiples of its block size %zu\n",
				quant_type_name(type), s.hidden, s.ffn, block);
			return 2;
		}
	}

	_cleanup_free_ char *default_name = NULL;
	if (!name) {
		if (asprintf(&default_name,
			     "molly-mkmodel %s %" PRIu32 "x%" PRIu32 " %s seed %" PRIu64, s.arch,
			     s.hidden, s.layers, quant_type_name(type), seed) < 0) {
			fprintf(stderr, "molly-mkmodel: out of memory\n");
			return 1;
		}
		name = default_name;
	}

	struct model_spec m = {};
	_cleanup_free_ struct tensor_spec *tensors_owner = NULL;
	r = build_spec(&s, type, &m);
	tensors_owner = m.tensors;
	if (r < 0) {
		fprintf(stderr, "molly-mkmodel: %s\n", strerror(-r));
		return 1;
	}

	struct timespec t0, t1;
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
	_cleanup_free_ float *row = NULL;
	_cleanup_free_ void *qrow = NULL;
	uint64_t max_ne0 = MAX(s.hidden, s.ffn), n_params = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	row = malloc(max_ne0 * sizeof(float));
	qrow = malloc(max_ne0 * sizeof(float)); /* no type is larger than F32 per value */
	if (!row || !qrow) {
		fprintf(stderr, "molly-mkmodel: out of memory\n");
		return 1;
	}

	r = gguf_writer_new(out, &w, &e);
	if (r >= 0)
		r = add_metadata(w, &s, type, name, &e);
	if (r >= 0)
		r = vocab ? copy_vocab(w, vocab, &e) : add_generated_vocab(w, s.vocab, &e);
	for (size_t i = 0; r >= 0 && i < m.n; i++) {
		const struct tensor_spec *t = &m.tensors[i];

		r = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, &e);
		n_params += t->ne[0] * t->ne[1];
	}
	for (size_t i = 0; r >= 0 && i < m.n; i++) {
		r = write_tensor(w, &m.tensors[i], seed, i, row, qrow, &e);
		if (r >= 0 && isatty(STDERR_FILENO))
			fprintf(stderr, "\rmolly-mkmodel: %zu/%zu tensors", i + 1, m.n);
	}
	if (isatty(STDERR_FILENO))
		fputc('\n', stderr);
	if (r >= 0)
		r = gguf_writer_finish(w, &e);
	if (r < 0) {
		fprintf(stderr, "molly-mkmodel: %s: %s\n", out, e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	w = gguf_writer_free(w);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	/* read it back: the file must load */
	{
		_cleanup_(gguf_freep) struct gguf *g = NULL;

		r = gguf_open(out, &g, &e);
		if (r < 0) {
			fprintf(stderr, "molly-mkmodel: %s: written but does not load: %s\n", out,
				e.text);
			return 1;
		}
		if (gguf_n_tensors(g) != m.n) {
			fprintf(stderr, "molly-mkmodel: %s: %zu tensors read back, %zu written\n",
				out, gguf_n_tensors(g), m.n);
			return 1;
		}
		printf("%s: %s, %s, %" PRIu32 " hidden, %" PRIu32 " layers, %" PRIu32 "/%" PRIu32
		       " heads, ffn %" PRIu32 ", vocab %" PRIu32 "%s: %.1fM parameters, %zu "
		       "tensors, %zu bytes (%.1f MiB) in %.2f s\n",
		       out, s.arch, quant_type_name(type), s.hidden, s.layers, s.heads, s.kv_heads,
		       s.ffn, s.vocab, s.tied ? ", tied" : "", (double) n_params / 1e6, m.n,
		       gguf_file_size(g), (double) gguf_file_size(g) / (1 << 20),
		       (double) (t1.tv_sec - t0.tv_sec) +
			   (double) (t1.tv_nsec - t0.tv_nsec) * 1e-9);
	}
	return 0;
}
