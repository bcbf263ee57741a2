/* SPDX-License-Identifier: MIT */
/*
 * vocab.c: SentencePiece-style and byte-level BPE tokenizers, as llama.cpp (build 10587,
 * src/llama-vocab.cpp) implements them, so that the same text gives the same ids.
 *
 * Layout: all token texts live in one pool (NUL-terminated, so vocab_token_text() can hand
 * them out); an open-addressing table maps text → id; for BPE a second table maps a merge
 * pair (left, right) → rank. Tokenizing first cuts the text around special tokens
 * (partition()), then runs the SPM or BPE algorithm over each remaining piece.
 *
 * Where this differs from llama.cpp, on purpose:
 *  - a special-token id key that is present but out of range (4294967295 is how converters
 *    write "none") means no such token; llama.cpp keeps its default (1/2 for SPM, 11 for BPE).
 *  - vocab_tokenize()'s add_bos adds BOS only; llama.cpp's add_special also appends EOS when
 *    tokenizer.ggml.add_eos_token is set (no generative model we know of sets it).
 *  - llama.cpp aborts on input that decodes past U+10FFFF; here it is one more invalid
 *    sequence (U+FFFD).
 *  - detokenizing does not apply llama_detokenize()'s clean_spaces pass (" ," → ","): the
 *    stream is the concatenation of the pieces, as llama.cpp's generation loops print it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "vocab-pre.h"
#include "vocab.h"

/* llama.cpp's token attributes (llama_token_attr); a token can carry several. */
enum {
	ATTR_UNKNOWN = 1u << 0,
	ATTR_UNUSED = 1u << 1,
	ATTR_NORMAL = 1u << 2,
	ATTR_CONTROL = 1u << 3,
	ATTR_USER_DEFINED = 1u << 4,
	ATTR_BYTE = 1u << 5,
	ATTR_LSTRIP = 1u << 7,
	ATTR_RSTRIP = 1u << 8,
};

#define ATTR_SPECIAL (ATTR_UNKNOWN | ATTR_CONTROL)

/* Token texts and merge strings are addressed with 32-bit offsets into their pools. */
#define POOL_MAX ((size_t) UINT32_MAX)

struct vtoken {
	uint32_t off; /* into pool */
	uint32_t len;
	float score;
	uint32_t attr;
};

struct merge {
	uint32_t a_off, a_len; /* into merge_pool */
	uint32_t b_off, b_len;
};

struct vocab {
	enum vocab_kind kind;
	uint32_t n_tokens;
	struct vtoken *tok; /* owned: n_tokens */
	char *pool;         /* owned: token texts, each followed by a NUL */
	uint32_t *tok_slots; /* owned: text hash table, id + 1 (0 = empty) */
	size_t tok_mask;

	uint32_t n_merges;
	struct merge *merges; /* owned: index = rank */
	char *merge_pool;     /* owned */
	uint32_t *merge_slots; /* owned: pair hash table, rank + 1 */
	size_t merge_mask;

	int32_t bos, eos, eot, eom, unk, sep, pad;
	int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
	bool add_bos, add_eos, add_space_prefix, ignore_merges;

	uint8_t *eog;      /* owned: n_tokens flags */
	int32_t *special;  /* owned: control/user-defined/unknown ids, longest text first */
	uint32_t n_special;

	/* SPM: the <0xXX> token of each byte (else the one-byte token), -1 if none.
	 * BPE: the token whose text is that single byte (llama.cpp's last resort). */
	int32_t byte_token[256];
	/* GPT-2's byte → printable code point map, UTF-8 encoded, and its inverse. */
	char byte_enc[256][3];
	uint8_t byte_enc_len[256];
	int16_t cp_byte[0x144]; /* code point → byte, -1 if not in the map */

	struct vocab_pre *pre; /* owned: BPE only */
};

/* ---- hashing ---- */

static uint64_t hash_mem(const void *p, size_t n, uint64_t h)
{
	const uint8_t *s = p;

	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= 0x100000001b3ULL; /* FNV-1a */
	}
	return h;
}

static uint64_t hash_fin(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

#define HASH_SEED 0xcbf29ce484222325ULL

static int table_new(size_t n, uint32_t **ret, size_t *ret_mask)
{
	size_t cap = 16;

	while (cap < n * 2) {
		if (cap > SIZE_MAX / 4 / sizeof(uint32_t))
			return -ENOMEM;
		cap *= 2;
	}
	*ret = calloc(cap, sizeof(uint32_t));
	if (!*ret)
		return -ENOMEM;
	*ret_mask = cap - 1;
	return 0;
}

static int32_t find_token(const struct vocab *v, const char *s, size_t n)
{
	size_t i = hash_fin(hash_mem(s, n, HASH_SEED)) & v->tok_mask;

	for (uint32_t slot; (slot = v->tok_slots[i]); i = (i + 1) & v->tok_mask) {
		const struct vtoken *t = &v->tok[slot - 1];

		if (t->len == n && memcmp(v->pool + t->off, s, n) == 0)
			return (int32_t) (slot - 1);
	}
	return -1;
}

static uint64_t hash_pair(const char *a, size_t an, const char *b, size_t bn)
{
	uint64_t h = hash_mem(a, an, HASH_SEED);

	h = hash_mem("\xff", 1, h); /* keeps ("ab","c") and ("a","bc") apart */
	return hash_fin(hash_mem(b, bn, h));
}

/* The rank of merging a then b, or -1. */
static int32_t find_merge(const struct vocab *v, const char *a, size_t an, const char *b,
			  size_t bn)
{
	size_t i = hash_pair(a, an, b, bn) & v->merge_mask;

	for (uint32_t slot; (slot = v->merge_slots[i]); i = (i + 1) & v->merge_mask) {
		const struct merge *m = &v->merges[slot - 1];

		if (m->a_len == an && m->b_len == bn &&
		    memcmp(v->merge_pool + m->a_off, a, an) == 0 &&
		    memcmp(v->merge_pool + m->b_off, b, bn) == 0)
			return (int32_t) (slot - 1);
	}
	return -1;
}

/* ---- small helpers ---- */

static const char *tok_text(const struct vocab *v, int32_t id)
{
	return v->pool + v->tok[id].off;
}

static bool is_c_space(char c)
{
	/* isspace() in the C locale, which llama.cpp's LSTRIP/RSTRIP use */
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* llama.cpp's unicode_len_utf8(): sequence length from the lead byte alone. */
static size_t utf8_len_lead(char c)
{
	static const uint8_t lookup[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };

	return lookup[(uint8_t) c >> 4];
}

struct idbuf {
	int32_t *v;
	size_t n, cap;
};

static int idbuf_push(struct idbuf *b, int32_t id)
{
	if (b->n == b->cap) {
		size_t ncap = b->cap ? b->cap * 2 : 64;
		int32_t *nv = realloc(b->v, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		b->v = nv;
		b->cap = ncap;
	}
	b->v[b->n++] = id;
	return 0;
}

/* ---- loading ---- */

struct vocab *vocab_free(struct vocab *v)
{
	if (!v)
		return NULL;
	free(v->tok);
	free(v->pool);
	free(v->tok_slots);
	free(v->merges);
	free(v->merge_pool);
	free(v->merge_slots);
	free(v->eog);
	free(v->special);
	vocab_pre_free(v->pre);
	free(v);
	return NULL;
}

/* An optional string key; *ret NULL when absent. */
static int get_opt_string(const struct gguf *g, const char *key, char **ret, struct errmsg *e)
{
	int r = gguf_get_string(g, key, ret);

	if (r == -ENOENT) {
		*ret = NULL;
		return 0;
	}
	if (r == -EINVAL)
		return errmsg_set(e, r, "%s: expected a string", key);
	return r;
}

static int get_opt_bool(const struct gguf *g, const char *key, bool *val, struct errmsg *e)
{
	int r = gguf_get_bool(g, key, val);

	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return errmsg_set(e, r, "%s: expected a bool", key);
	return 0;
}

/*
 * An optional token id key. Absent: *id keeps its default. Present but negative or out of
 * range (e.g. 4294967295, how converters write "none"): no such token. llama.cpp keeps the
 * default in that case; a file that says "none" means none.
 */
static int get_opt_id(const struct vocab *v, const struct gguf *g, const char *key, int32_t *id,
		      struct errmsg *e)
{
	const struct gguf_value *val = gguf_get(g, key);
	int64_t x;

	if (!val)
		return 0;
	switch (val->type) {
	case GGUF_TYPE_UINT8:
	case GGUF_TYPE_UINT16:
	case GGUF_TYPE_UINT32:
	case GGUF_TYPE_UINT64:
		*id = val->u64 < v->n_tokens ? (int32_t) val->u64 : -1;
		return 0;
	case GGUF_TYPE_INT8:
	case GGUF_TYPE_INT16:
	case GGUF_TYPE_INT32:
	case GGUF_TYPE_INT64:
		x = val->i64;
		*id = x >= 0 && x < (int64_t) v->n_tokens ? (int32_t) x : -1;
		return 0;
	default:
		return errmsg_set(e, -EINVAL, "%s: expected an integer token id, got %s", key,
				  gguf_type_name(val->type));
	}
}

static bool is_numeric_type(enum gguf_type t)
{
	return t != GGUF_TYPE_STRING && t != GGUF_TYPE_ARRAY && t != GGUF_TYPE_BOOL &&
	       gguf_type_size(t) > 0;
}

static bool is_integer_type(enum gguf_type t)
{
	return is_numeric_type(t) && t != GGUF_TYPE_FLOAT32 && t != GGUF_TYPE_FLOAT64;
}

static uint32_t attr_of_type(int64_t type)
{
	switch (type) {
	case VOCAB_TOKEN_TYPE_NORMAL:
		return ATTR_NORMAL;
	case VOCAB_TOKEN_TYPE_UNKNOWN:
		return ATTR_UNKNOWN;
	case VOCAB_TOKEN_TYPE_CONTROL:
		return ATTR_CONTROL;
	case VOCAB_TOKEN_TYPE_USER_DEFINED:
		return ATTR_USER_DEFINED;
	case VOCAB_TOKEN_TYPE_UNUSED:
		return ATTR_UNUSED;
	case VOCAB_TOKEN_TYPE_BYTE:
		return ATTR_BYTE;
	default:
		return 0; /* UNDEFINED and unknown values */
	}
}

static int load_tokens(struct vocab *v, const struct gguf *g, struct errmsg *e)
{
	static const char k_tokens[] = "tokenizer.ggml.tokens";
	static const char k_scores[] = "tokenizer.ggml.scores";
	static const char k_types[] = "tokenizer.ggml.token_type";
	const struct gguf_value *toks, *scores, *types;
	size_t pool_size = 0, n;
	char empty[32];
	int r;

	toks = gguf_get(g, k_tokens);
	if (!toks)
		return errmsg_set(e, -EBADMSG, "%s: missing (the file has no vocabulary)",
				  k_tokens);
	if (toks->type != GGUF_TYPE_ARRAY || toks->arr.elem_type != GGUF_TYPE_STRING)
		return errmsg_set(e, -EBADMSG, "%s: expected an array of strings", k_tokens);
	if (toks->arr.n == 0)
		return errmsg_set(e, -EBADMSG, "%s: the vocabulary is empty", k_tokens);
	if (toks->arr.n >= INT32_MAX)
		return errmsg_set(e, -EBADMSG, "%s: %" PRIu64 " tokens is too many", k_tokens,
				  toks->arr.n);
	n = (size_t) toks->arr.n;
	v->n_tokens = (uint32_t) n;

	scores = gguf_get(g, k_scores);
	if (scores) {
		if (scores->type != GGUF_TYPE_ARRAY || !is_numeric_type(scores->arr.elem_type))
			return errmsg_set(e, -EBADMSG, "%s: expected an array of numbers",
					  k_scores);
		if (scores->arr.n != n)
			return errmsg_set(e, -EBADMSG, "%s: %" PRIu64 " entries for %zu tokens",
					  k_scores, scores->arr.n, n);
	}
	types = gguf_get(g, k_types);
	if (types) {
		if (types->type != GGUF_TYPE_ARRAY || !is_integer_type(types->arr.elem_type))
			return errmsg_set(e, -EBADMSG, "%s: expected an array of integers",
					  k_types);
		if (types->arr.n != n)
			return errmsg_set(e, -EBADMSG, "%s: %" PRIu64 " entries for %zu tokens",
					  k_types, types->arr.n, n);
	}

	for (size_t i = 0; i < n; i++) {
		uint64_t len = toks->arr.strs[i].len;

		if (len == 0) /* becomes "[EMPTY_<id>]", as in llama.cpp */
			len = (uint64_t) snprintf(empty, sizeof(empty), "[EMPTY_%zu]", i);
		if (len > POOL_MAX - pool_size - 1)
			return errmsg_set(e, -EBADMSG, "%s: the token texts are too large",
					  k_tokens);
		pool_size += (size_t) len + 1;
	}

	v->tok = calloc(n, sizeof(*v->tok));
	v->pool = malloc(pool_size);
	if (!v->tok || !v->pool)
		return -ENOMEM;
	r = table_new(n, &v->tok_slots, &v->tok_mask);
	if (r < 0)
		return r;

	pool_size = 0;
	for (size_t i = 0; i < n; i++) {
		const struct gguf_str *s = &toks->arr.strs[i];
		struct vtoken *t = &v->tok[i];
		size_t len = (size_t) s->len, h;

		t->off = (uint32_t) pool_size;
		if (len == 0) {
			len = (size_t) snprintf(v->pool + pool_size, sizeof(empty), "[EMPTY_%zu]",
						i);
		} else {
			memcpy(v->pool + pool_size, s->data, len);
			v->pool[pool_size + len] = 0;
		}
		t->len = (uint32_t) len;
		pool_size += len + 1;
		t->score = scores ? (float) gguf_arr_f64(scores, i) : 0.0f;
		t->attr = types ? attr_of_type(gguf_arr_i64(types, i)) : ATTR_NORMAL;

		h = hash_fin(hash_mem(v->pool + t->off, len, HASH_SEED)) & v->tok_mask;
		for (uint32_t slot; (slot = v->tok_slots[h]); h = (h + 1) & v->tok_mask) {
			const struct vtoken *o = &v->tok[slot - 1];

			if (o->len == len && memcmp(v->pool + o->off, v->pool + t->off, len) == 0)
				return errmsg_set(e, -EBADMSG,
						  "%s: duplicate token '%.*s' has ids %u and %zu",
						  k_tokens, (int) MIN(len, 64), v->pool + t->off,
						  slot - 1, i);
		}
		v->tok_slots[h] = (uint32_t) i + 1;
	}
	return 0;
}

static int load_merges(struct vocab *v, const struct gguf *g, struct errmsg *e)
{
	static const char k_merges[] = "tokenizer.ggml.merges";
	const struct gguf_value *m = gguf_get(g, k_merges);
	size_t pool_size = 0, n;
	int r;

	if (!m)
		return errmsg_set(e, -EBADMSG, "%s: missing (a gpt2 tokenizer needs its merges)",
				  k_merges);
	if (m->type != GGUF_TYPE_ARRAY || m->arr.elem_type != GGUF_TYPE_STRING)
		return errmsg_set(e, -EBADMSG, "%s: expected an array of strings", k_merges);
	if (m->arr.n >= INT32_MAX)
		return errmsg_set(e, -EBADMSG, "%s: %" PRIu64 " merges is too many", k_merges,
				  m->arr.n);
	n = (size_t) m->arr.n;
	for (size_t i = 0; i < n; i++) {
		if (m->arr.strs[i].len > POOL_MAX - pool_size)
			return errmsg_set(e, -EBADMSG, "%s: the merges are too large", k_merges);
		pool_size += (size_t) m->arr.strs[i].len;
	}
	v->merges = calloc(MAX(n, 1), sizeof(*v->merges));
	v->merge_pool = malloc(MAX(pool_size, 1));
	if (!v->merges || !v->merge_pool)
		return -ENOMEM;
	r = table_new(n, &v->merge_slots, &v->merge_mask);
	if (r < 0)
		return r;

	pool_size = 0;
	for (size_t i = 0; i < n; i++) {
		const struct gguf_str *s = &m->arr.strs[i];
		struct merge *mg = &v->merges[i];
		const char *sp = NULL;
		size_t h;

		/* "left right", split at the first space after the first byte (llama.cpp:
		 * word.find(' ', 1)); a line without one is the pair ("", ""). */
		if (s->len > 1)
			sp = memchr(s->data + 1, ' ', (size_t) s->len - 1);
		if (s->len)
			memcpy(v->merge_pool + pool_size, s->data, (size_t) s->len);
		mg->a_off = (uint32_t) pool_size;
		if (sp) {
			mg->a_len = (uint32_t) (sp - s->data);
			mg->b_off = mg->a_off + mg->a_len + 1;
			mg->b_len = (uint32_t) (s->len - mg->a_len - 1);
		} else {
			mg->a_len = 0;
			mg->b_off = mg->a_off;
			mg->b_len = 0;
		}
		pool_size += (size_t) s->len;

		/* The first occurrence of a pair keeps its rank (std::unordered_map::emplace). */
		if (find_merge(v, v->merge_pool + mg->a_off, mg->a_len, v->merge_pool + mg->b_off,
			       mg->b_len) >= 0)
			continue;
		h = hash_pair(v->merge_pool + mg->a_off, mg->a_len, v->merge_pool + mg->b_off,
			      mg->b_len) & v->merge_mask;
		while (v->merge_slots[h])
			h = (h + 1) & v->merge_mask;
		v->merge_slots[h] = (uint32_t) i + 1;
	}
	v->n_merges = (uint32_t) n; /* the rank of a merge is its index in merges[] */
	return 0;
}

#define FULLWIDTH_BAR "\xef\xbd\x9c" /* U+FF5C, DeepSeek's special token brackets */
#define SPIECE "\xe2\x96\x81"         /* U+2581, SentencePiece's escaped space */

/* Texts llama.cpp recognises as these specials when the file does not name them. */
#define LIST(...) ((const char *const[]){ __VA_ARGS__, NULL })
static const char *const eot_texts[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
	"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
	"<" FULLWIDTH_BAR "end" SPIECE "of" SPIECE "sentence" FULLWIDTH_BAR ">",
	"<end_of_utterance>", NULL,
};
static const char *const eog_texts[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
	"[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<" FULLWIDTH_BAR "end" SPIECE "of" SPIECE "sentence" FULLWIDTH_BAR ">", "[e~[", NULL,
};

struct special_key {
	const char *key;
	size_t field; /* offsetof(struct vocab, ...) */
	const char *const *texts; /* auto-detected by text when the key is absent */
};

static const struct special_key special_keys[] = {
	{ "tokenizer.ggml.bos_token_id", offsetof(struct vocab, bos), NULL },
	{ "tokenizer.ggml.eos_token_id", offsetof(struct vocab, eos), NULL },
	{ "tokenizer.ggml.eot_token_id", offsetof(struct vocab, eot), eot_texts },
	{ "tokenizer.ggml.eom_token_id", offsetof(struct vocab, eom), LIST("<|eom_id|>") },
	{ "tokenizer.ggml.unknown_token_id", offsetof(struct vocab, unk), NULL },
	{ "tokenizer.ggml.seperator_token_id", offsetof(struct vocab, sep), NULL },
	{ "tokenizer.ggml.padding_token_id", offsetof(struct vocab, pad), NULL },
	{ "tokenizer.ggml.fim_pre_token_id", offsetof(struct vocab, fim_pre),
	  LIST("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
	       "<" FULLWIDTH_BAR "fim" SPIECE "begin" FULLWIDTH_BAR ">", "<PRE>", SPIECE "<PRE>",
	       "<|code_prefix|>", "<|prefix|>") },
	{ "tokenizer.ggml.fim_suf_token_id", offsetof(struct vocab, fim_suf),
	  LIST("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
	       "<" FULLWIDTH_BAR "fim" SPIECE "hole" FULLWIDTH_BAR ">", "<SUF>", SPIECE "<SUF>",
	       "<|code_suffix|>", "<|suffix|>") },
	{ "tokenizer.ggml.fim_mid_token_id", offsetof(struct vocab, fim_mid),
	  LIST("<|fim_middle|>", "<fim-middle>", "<fim_middle>",
	       "<" FULLWIDTH_BAR "fim" SPIECE "end" FULLWIDTH_BAR ">", "<MID>", SPIECE "<MID>",
	       "<|code_middle|>", "<|middle|>") },
	{ "tokenizer.ggml.fim_pad_token_id", offsetof(struct vocab, fim_pad),
	  LIST("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]") },
	{ "tokenizer.ggml.fim_rep_token_id", offsetof(struct vocab, fim_rep),
	  LIST("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>") },
	{ "tokenizer.ggml.fim_sep_token_id", offsetof(struct vocab, fim_sep),
	  LIST("<|file_sep|>") },
	/* deprecated spellings of the first three FIM ids */
	{ "tokenizer.ggml.prefix_token_id", offsetof(struct vocab, fim_pre), NULL },
	{ "tokenizer.ggml.suffix_token_id", offsetof(struct vocab, fim_suf), NULL },
	{ "tokenizer.ggml.middle_token_id", offsetof(struct vocab, fim_mid), NULL },
};

static int32_t *special_field(struct vocab *v, size_t off)
{
	return (int32_t *) ((char *) v + off);
}

static int find_text(const struct vocab *v, const char *s)
{
	return find_token(v, s, strlen(s));
}

static int load_specials(struct vocab *v, const struct gguf *g, const struct vocab_pre_traits *tr,
			 struct errmsg *e)
{
	int r;

	/* llama.cpp's defaults, dropped when they do not fit the vocabulary */
	v->bos = v->eos = v->eot = v->eom = v->unk = v->sep = v->pad = -1;
	v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;
	if (v->kind == VOCAB_KIND_SPM) {
		v->bos = 1;
		v->eos = 2;
		v->unk = 0;
	} else {
		v->bos = tr->no_bos ? -1 : 11;
		v->eos = 11;
	}
	for (size_t i = 0; i < ELEMENTSOF(special_keys); i++) {
		int32_t *id = special_field(v, special_keys[i].field);

		if (*id >= (int32_t) v->n_tokens)
			*id = -1;
		r = get_opt_id(v, g, special_keys[i].key, id, e);
		if (r < 0)
			return r;
	}

	v->add_space_prefix = v->kind == VOCAB_KIND_SPM;
	v->add_bos = v->kind == VOCAB_KIND_SPM || tr->add_bos;
	v->add_eos = false;
	v->ignore_merges = tr->ignore_merges;
	if ((r = get_opt_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, e)) < 0 ||
	    (r = get_opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, e)) < 0 ||
	    (r = get_opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, e)) < 0)
		return r;

	/* Specials the file does not name are found by their text, and are made CONTROL
	 * whatever their stored type. Several candidates: the lowest id wins. */
	for (size_t i = 0; i < ELEMENTSOF(special_keys); i++) {
		int32_t *id = special_field(v, special_keys[i].field);

		if (*id >= 0 || !special_keys[i].texts)
			continue;
		for (const char *const *s = special_keys[i].texts; *s; s++) {
			int32_t t = find_text(v, *s);

			if (t >= 0 && (*id < 0 || t < *id))
				*id = t;
		}
		if (*id >= 0)
			v->tok[*id].attr |= ATTR_CONTROL;
	}
	return 0;
}

static void build_eog(struct vocab *v)
{
	const int32_t by_id[] = { v->fim_pad, v->fim_rep, v->fim_sep };
	int32_t end = find_text(v, "<|end|>"), s = find_text(v, "</s>");
	bool has_return, has_call, has_flush, has_tool_response;

	for (size_t i = 0; i < ELEMENTSOF(by_id); i++)
		if (by_id[i] >= 0)
			v->eog[by_id[i]] = 1;
	for (const char *const *t = eog_texts; *t; t++) {
		int32_t id = find_text(v, *t);

		if (id >= 0) {
			v->eog[id] = 1;
			v->tok[id].attr |= ATTR_CONTROL;
		}
	}
	/* gpt-oss: always rendered, so printed even without render_special */
	for (const char *const *t =
		     LIST("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>");
	     *t; t++) {
		int32_t id = find_text(v, *t);

		if (id >= 0)
			v->tok[id].attr = ATTR_USER_DEFINED;
	}
	if (v->eos >= 0)
		v->eog[v->eos] = 1;
	if (v->eot >= 0)
		v->eog[v->eot] = 1;
	if (v->eom >= 0)
		v->eog[v->eom] = 1;

#define IN_EOG(text) ({ int32_t id_ = find_text(v, text); id_ >= 0 && v->eog[id_]; })
	/* o200k_harmony and solar-open: <|end|> ends a message, not the generation */
	has_return = IN_EOG("<|return|>");
	has_call = IN_EOG("<|call|>") || IN_EOG("<|calls|>");
	has_flush = IN_EOG("<|flush|>");
	if (end >= 0 && v->eog[end] && ((has_return && has_call) || (has_call && has_flush))) {
		v->eog[end] = 0;
		v->tok[end].attr = ATTR_USER_DEFINED;
	}
	/* gemma4, paddleocr: </s> is not an end of generation there */
	has_tool_response = IN_EOG("<|tool_response>");
	if (s >= 0 && v->eog[s] && has_tool_response) {
		v->eog[s] = 0;
		v->tok[s].attr = ATTR_NORMAL;
	}
#undef IN_EOG
}

static int cmp_special(const void *a, const void *b, void *userdata)
{
	const struct vocab *v = userdata;
	int32_t x = *(const int32_t *) a, y = *(const int32_t *) b;

	if (v->tok[x].len != v->tok[y].len)
		return v->tok[x].len > v->tok[y].len ? -1 : 1;
	return x < y ? -1 : x > y;
}

static int build_special_cache(struct vocab *v, const struct gguf *g)
{
	_cleanup_free_ char *name = NULL;

	v->special = malloc(v->n_tokens * sizeof(*v->special));
	if (!v->special)
		return -ENOMEM;
	for (uint32_t id = 0; id < v->n_tokens; id++)
		if (v->tok[id].attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))
			v->special[v->n_special++] = (int32_t) id;
	qsort_r(v->special, v->n_special, sizeof(*v->special), cmp_special, v);

	/* Phi-3 models: spaces after special tokens (except these) are swallowed. llama.cpp
	 * decides by the model's name. */
	if (gguf_get_string(g, "general.name", &name) >= 0) {
		for (char *c = name; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char) (*c - 'A' + 'a');
		if (strstr(name, "phi-3") || strstr(name, "phi3")) {
			int32_t id;

			for (uint32_t i = 0; i < v->n_special; i++)
				v->tok[v->special[i]].attr |= ATTR_RSTRIP;
			if ((id = find_text(v, "</s>")) >= 0)
				v->tok[id].attr |= ATTR_RSTRIP;
			for (const char *const *t = LIST("<unk>", "<s>", "<|endoftext|>"); *t; t++)
				if ((id = find_text(v, *t)) >= 0)
					v->tok[id].attr &= ~ATTR_RSTRIP;
		}
	}
	return 0;
}

static void build_byte_tables(struct vocab *v)
{
	int n = 0;

	for (int b = 0; b < 256; b++) {
		char hex[8];
		char c = (char) b;
		int32_t id;

		if (v->kind == VOCAB_KIND_SPM) {
			(void) snprintf(hex, sizeof(hex), "<0x%02X>", b);
			id = find_text(v, hex);
			if (id < 0)
				id = find_token(v, &c, 1);
		} else {
			id = find_token(v, &c, 1);
		}
		v->byte_token[b] = id;
	}

	/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the others
	 * get U+0100 onwards in byte order. */
	for (size_t i = 0; i < ELEMENTSOF(v->cp_byte); i++)
		v->cp_byte[i] = -1;
	for (int b = 0; b < 256; b++) {
		bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
				 (b >= 0xae && b <= 0xff);
		uint32_t cp = printable ? (uint32_t) b : 256u + (uint32_t) n++;

		v->byte_enc_len[b] = (uint8_t) vocab_utf8_encode(cp, v->byte_enc[b]);
		v->cp_byte[cp] = (int16_t) b;
	}
}

int vocab_load(const struct gguf *g, struct vocab **ret, struct errmsg *e)
{
	_cleanup_(vocab_freep) struct vocab *v = NULL;
	_cleanup_free_ char *model = NULL, *pre = NULL;
	struct vocab_pre_traits traits = {};
	int r;

	assert_return(g && ret, -EINVAL);

	r = get_opt_string(g, "tokenizer.ggml.model", &model, e);
	if (r < 0)
		return r;
	if (!model)
		return errmsg_set(e, -EBADMSG, "tokenizer.ggml.model: missing (the file has no "
				  "tokenizer)");
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (strcmp(model, "llama") == 0)
		v->kind = VOCAB_KIND_SPM;
	else if (strcmp(model, "gpt2") == 0)
		v->kind = VOCAB_KIND_BPE;
	else
		return errmsg_set(e, -EOPNOTSUPP, "tokenizer.ggml.model: tokenizer '%s' is not "
				  "supported (only 'llama' and 'gpt2')", model);

	if (v->kind == VOCAB_KIND_BPE) {
		r = get_opt_string(g, "tokenizer.ggml.pre", &pre, e);
		if (r < 0)
			return r;
		r = vocab_pre_new(pre, &v->pre, e);
		if (r < 0)
			return r;
		traits = vocab_pre_traits(v->pre);
	}

	r = load_tokens(v, g, e);
	if (r < 0)
		return r;
	if (v->kind == VOCAB_KIND_BPE && (r = load_merges(v, g, e)) < 0)
		return r;
	r = load_specials(v, g, &traits, e);
	if (r < 0)
		return r;
	v->eog = calloc(v->n_tokens, 1);
	if (!v->eog)
		return -ENOMEM;
	build_eog(v);
	r = build_special_cache(v, g);
	if (r < 0)
		return r;
	build_byte_tables(v);

	*ret = TAKE_PTR(v);
	return 0;
}

/* ---- queries ---- */

enum vocab_kind vocab_kind(const struct vocab *v)
{
	return v ? v->kind : VOCAB_KIND_SPM;
}

uint32_t vocab_n_tokens(const struct vocab *v)
{
	return v ? v->n_tokens : 0;
}

int32_t vocab_bos(const struct vocab *v)
{
	return v ? v->bos : -1;
}

int32_t vocab_eos(const struct vocab *v)
{
	return v ? v->eos : -1;
}

bool vocab_add_bos(const struct vocab *v)
{
	return v && v->add_bos && v->bos >= 0;
}

bool vocab_is_eog(const struct vocab *v, int32_t id)
{
	return v && id >= 0 && (uint32_t) id < v->n_tokens && v->eog[id];
}

bool vocab_is_control(const struct vocab *v, int32_t id)
{
	return v && id >= 0 && (uint32_t) id < v->n_tokens && (v->tok[id].attr & ATTR_CONTROL);
}

const char *vocab_token_text(const struct vocab *v, int32_t id)
{
	if (!v || id < 0 || (uint32_t) id >= v->n_tokens)
		return NULL;
	return tok_text(v, id);
}

int32_t vocab_find(const struct vocab *v, const char *text)
{
	if (!v || !text)
		return -1;
	return find_text(v, text);
}

/* ---- special-token partition ---- */

/* A piece of the input: raw text still to tokenize, or a special token found in it. */
struct frag {
	int32_t id; /* -1 for raw text */
	size_t off, len;
};

struct frags {
	struct frag *v;
	size_t n, cap;
};

static int frags_push(struct frags *f, int32_t id, size_t off, size_t len)
{
	if (f->n == f->cap) {
		size_t ncap = f->cap ? f->cap * 2 : 16;
		struct frag *nv = realloc(f->v, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		f->v = nv;
		f->cap = ncap;
	}
	f->v[f->n++] = (struct frag){ .id = id, .off = off, .len = len };
	return 0;
}

/*
 * Splits the text around special tokens as llama.cpp's tokenizer_st_partition() does: the
 * specials are taken longest first, and each one cuts every raw piece at all of its
 * (non-overlapping, leftmost first) occurrences. User-defined tokens are always matched,
 * control and unknown ones only with parse_special.
 */
static int partition(const struct vocab *v, const char *text, size_t len, bool parse_special,
		     struct frags *out)
{
	_cleanup_free_ uint64_t *pairs = NULL; /* which byte pairs occur in text */
	uint64_t singles[4] = {};
	struct frags tmp = {};
	int r = 0;

	out->n = 0;
	if (len == 0)
		return 0;
	r = frags_push(out, -1, 0, len);
	if (r < 0)
		return r;

	/* Most special tokens do not occur at all; a bitmap of the byte pairs present lets
	 * us skip them without searching. */
	pairs = calloc(65536 / 64, sizeof(*pairs));
	if (!pairs)
		return -ENOMEM;
	for (size_t i = 0; i < len; i++) {
		uint8_t c = (uint8_t) text[i];

		singles[c / 64] |= 1ull << (c % 64);
		if (i + 1 < len) {
			unsigned p = (unsigned) c << 8 | (uint8_t) text[i + 1];

			pairs[p / 64] |= 1ull << (p % 64);
		}
	}

	for (uint32_t k = 0; k < v->n_special; k++) {
		const int32_t id = v->special[k];
		const struct vtoken *t = &v->tok[id];
		const char *s = tok_text(v, id);

		if (!parse_special && (t->attr & ATTR_SPECIAL))
			continue;
		if (t->len > len)
			continue;
		if (t->len == 1 &&
		    !(singles[(uint8_t) s[0] / 64] & (1ull << ((uint8_t) s[0] % 64))))
			continue;
		if (t->len >= 2) {
			unsigned p = (unsigned) (uint8_t) s[0] << 8 | (uint8_t) s[1];

			if (!(pairs[p / 64] & (1ull << (p % 64))))
				continue;
		}

		tmp.n = 0;
		for (size_t i = 0; i < out->n && r >= 0; i++) {
			const struct frag f = out->v[i];
			size_t pos = f.off, end = f.off + f.len;

			if (f.id >= 0) {
				r = frags_push(&tmp, f.id, 0, 0);
				continue;
			}
			while (r >= 0) {
				const char *m = memmem(text + pos, end - pos, s, t->len);
				size_t left;

				if (!m) {
					if (end > pos)
						r = frags_push(&tmp, -1, pos, end - pos);
					break;
				}
				left = (size_t) (m - text) - pos;
				if (t->attr & ATTR_LSTRIP)
					while (left > 0 && is_c_space(text[pos + left - 1]))
						left--;
				if (left > 0 && (r = frags_push(&tmp, -1, pos, left)) < 0)
					break;
				if ((r = frags_push(&tmp, id, 0, 0)) < 0)
					break;
				pos = (size_t) (m - text) + t->len;
				if (t->attr & ATTR_RSTRIP)
					while (pos < end && is_c_space(text[pos]))
						pos++;
				if (pos >= end)
					break;
			}
		}
		if (r < 0)
			break;
		/* swap: tmp becomes the current list */
		{
			struct frags x = *out;

			*out = tmp;
			tmp = x;
		}
	}
	free(tmp.v);
	return r;
}

/* ---- SentencePiece (llm_tokenizer_spm) ---- */

struct sym {
	int32_t prev, next;
	size_t off, n; /* bytes of the text */
};

struct bigram {
	int32_t left, right;
	uint32_t ln, rn; /* the symbols' lengths when queued: a later change makes it stale */
	float score;     /* SPM: higher first */
	int32_t rank;    /* BPE: lower first */
};

struct heap {
	struct bigram *v;
	size_t n, cap;
	bool spm;
};

/* Which of a, b comes out first: llama.cpp's priority_queue order, ties to the left. */
static bool bigram_before(const struct heap *h, const struct bigram *a, const struct bigram *b)
{
	if (h->spm) {
		if (a->score != b->score)
			return a->score > b->score;
	} else if (a->rank != b->rank) {
		return a->rank < b->rank;
	}
	return a->left < b->left;
}

static int heap_push(struct heap *h, struct bigram b)
{
	size_t i;

	if (h->n == h->cap) {
		size_t ncap = h->cap ? h->cap * 2 : 64;
		struct bigram *nv = realloc(h->v, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		h->v = nv;
		h->cap = ncap;
	}
	i = h->n++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;

		if (!bigram_before(h, &b, &h->v[parent]))
			break;
		h->v[i] = h->v[parent];
		i = parent;
	}
	h->v[i] = b;
	return 0;
}

static struct bigram heap_pop(struct heap *h)
{
	struct bigram top = h->v[0], last = h->v[--h->n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && bigram_before(h, &h->v[c + 1], &h->v[c]))
			c++;
		if (!bigram_before(h, &h->v[c], &last))
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n > 0)
		h->v[i] = last;
	return top;
}

/* Scratch reused across the pieces of one vocab_tokenize() call. */
struct work {
	struct sym *syms;
	size_t n_syms, cap_syms;
	struct heap heap;
	char *buf; /* the escaped or byte-encoded text of the current piece */
	size_t buf_cap;
	struct vocab_pre_words words;
};

static void work_done(struct work *w)
{
	free(w->syms);
	free(w->heap.v);
	free(w->buf);
	vocab_pre_words_done(&w->words);
}

static int work_reserve_buf(struct work *w, size_t n)
{
	if (n > w->buf_cap) {
		char *nb = realloc(w->buf, n);

		if (!nb)
			return -ENOMEM;
		w->buf = nb;
		w->buf_cap = n;
	}
	return 0;
}

/* Splits text into one symbol per UTF-8 sequence (by the lead byte only, as llama.cpp). */
static int split_symbols(struct work *w, size_t len)
{
	w->n_syms = 0;
	if (len > w->cap_syms) {
		struct sym *ns = realloc(w->syms, len * sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		w->syms = ns;
		w->cap_syms = len;
	}
	for (size_t off = 0; off < len;) {
		size_t n = MIN(utf8_len_lead(w->buf[off]), len - off);
		struct sym *s = &w->syms[w->n_syms];

		s->off = off;
		s->n = n;
		s->prev = (int32_t) w->n_syms - 1;
		off += n;
		s->next = off == len ? -1 : (int32_t) w->n_syms + 1;
		w->n_syms++;
	}
	return 0;
}

static int spm_try_bigram(const struct vocab *v, struct work *w, int32_t left, int32_t right)
{
	const struct sym *l, *rs;
	int32_t id;

	if (left < 0 || right < 0)
		return 0;
	l = &w->syms[left];
	rs = &w->syms[right];
	id = find_token(v, w->buf + l->off, l->n + rs->n);
	if (id < 0)
		return 0;
	return heap_push(&w->heap, (struct bigram){ .left = left, .right = right,
						    .ln = (uint32_t) l->n, .rn = (uint32_t) rs->n,
						    .score = v->tok[id].score });
}

static int spm_piece(const struct vocab *v, struct work *w, size_t len, struct idbuf *out)
{
	int r;

	r = split_symbols(w, len);
	if (r < 0)
		return r;
	w->heap.n = 0;
	w->heap.spm = true;
	for (size_t i = 1; i < w->n_syms; i++)
		if ((r = spm_try_bigram(v, w, (int32_t) i - 1, (int32_t) i)) < 0)
			return r;

	/* keep merging the best-scoring pair that still exists */
	while (w->heap.n > 0) {
		struct bigram b = heap_pop(&w->heap);
		struct sym *l = &w->syms[b.left], *rs = &w->syms[b.right];

		if (l->n == 0 || rs->n == 0 || l->n + rs->n != (size_t) b.ln + b.rn)
			continue;
		l->n += rs->n;
		rs->n = 0;
		l->next = rs->next;
		if (rs->next >= 0)
			w->syms[rs->next].prev = b.left;
		if ((r = spm_try_bigram(v, w, l->prev, b.left)) < 0 ||
		    (r = spm_try_bigram(v, w, b.left, l->next)) < 0)
			return r;
	}

	for (int32_t i = w->n_syms ? 0 : -1; i >= 0; i = w->syms[i].next) {
		const struct sym *s = &w->syms[i];
		int32_t id = find_token(v, w->buf + s->off, s->n);

		if (id >= 0) {
			if ((r = idbuf_push(out, id)) < 0)
				return r;
			continue;
		}
		/* not a token: byte fallback, <0xXX> (or the byte itself), else <unk> */
		for (size_t j = 0; j < s->n; j++) {
			int32_t bt = v->byte_token[(uint8_t) w->buf[s->off + j]];

			if (bt < 0)
				bt = v->unk;
			if (bt >= 0 && (r = idbuf_push(out, bt)) < 0)
				return r;
		}
	}
	return 0;
}

static int spm_tokenize(const struct vocab *v, const char *text, const struct frags *fr,
			struct work *w, struct idbuf *out)
{
	bool prev_special = true; /* the first piece gets the space prefix too */
	int r;

	for (size_t i = 0; i < fr->n; i++) {
		const struct frag *f = &fr->v[i];
		size_t n = 0;

		if (f->id >= 0) {
			if ((r = idbuf_push(out, f->id)) < 0)
				return r;
			prev_special = true;
			continue;
		}
		/* a space before text that follows a special token (or starts the input),
		 * then every space escaped to U+2581 */
		if (f->len > (SIZE_MAX - 3) / 3)
			return -ENOMEM;
		r = work_reserve_buf(w, 3 * f->len + 3);
		if (r < 0)
			return r;
		if (v->add_space_prefix && prev_special) {
			memcpy(w->buf, SPIECE, 3);
			n = 3;
		}
		for (size_t j = 0; j < f->len; j++) {
			char c = text[f->off + j];

			if (c == ' ') {
				memcpy(w->buf + n, SPIECE, 3);
				n += 3;
			} else {
				w->buf[n++] = c;
			}
		}
		r = spm_piece(v, w, n, out);
		if (r < 0)
			return r;
		prev_special = false;
	}
	return 0;
}

/* ---- byte-level BPE (llm_tokenizer_bpe) ---- */

static int bpe_try_bigram(const struct vocab *v, struct work *w, int32_t left, int32_t right)
{
	const struct sym *l, *rs;
	int32_t rank;

	if (left < 0 || right < 0)
		return 0;
	l = &w->syms[left];
	rs = &w->syms[right];
	rank = find_merge(v, w->buf + l->off, l->n, w->buf + rs->off, rs->n);
	if (rank < 0)
		return 0;
	return heap_push(&w->heap, (struct bigram){ .left = left, .right = right,
						    .ln = (uint32_t) l->n, .rn = (uint32_t) rs->n,
						    .rank = rank });
}

/* Merges one pre-tokenized, byte-encoded word (in w->buf) and emits its tokens. */
static int bpe_word(const struct vocab *v, struct work *w, size_t len, struct idbuf *out)
{
	int32_t id;
	int r;

	if (v->ignore_merges && (id = find_token(v, w->buf, len)) >= 0)
		return idbuf_push(out, id);

	r = split_symbols(w, len);
	if (r < 0)
		return r;
	w->heap.n = 0;
	w->heap.spm = false;
	for (size_t i = 1; i < w->n_syms; i++)
		if ((r = bpe_try_bigram(v, w, (int32_t) i - 1, (int32_t) i)) < 0)
			return r;

	/* apply the lowest-ranked merge that still applies */
	while (w->heap.n > 0) {
		struct bigram b = heap_pop(&w->heap);
		struct sym *l = &w->syms[b.left], *rs = &w->syms[b.right];

		if (l->n == 0 || rs->n == 0 || l->n != b.ln || rs->n != b.rn)
			continue;
		l->n += rs->n;
		rs->n = 0;
		l->next = rs->next;
		if (rs->next >= 0)
			w->syms[rs->next].prev = b.left;
		if ((r = bpe_try_bigram(v, w, l->prev, b.left)) < 0 ||
		    (r = bpe_try_bigram(v, w, b.left, l->next)) < 0)
			return r;
	}

	for (int32_t i = w->n_syms ? 0 : -1; i >= 0; i = w->syms[i].next) {
		const struct sym *s = &w->syms[i];

		id = find_token(v, w->buf + s->off, s->n);
		if (id >= 0) {
			if ((r = idbuf_push(out, id)) < 0)
				return r;
			continue;
		}
		/* llama.cpp's last resort: each byte of the encoded text that is a token by
		 * itself; the others are dropped */
		for (size_t j = 0; j < s->n; j++) {
			int32_t bt = v->byte_token[(uint8_t) w->buf[s->off + j]];

			if (bt >= 0 && (r = idbuf_push(out, bt)) < 0)
				return r;
		}
	}
	return 0;
}

static int bpe_tokenize(const struct vocab *v, const char *text, const struct frags *fr,
			struct work *w, struct idbuf *out)
{
	int r;

	for (size_t i = 0; i < fr->n; i++) {
		const struct frag *f = &fr->v[i];
		const struct vocab_pre_words *wd = &w->words;

		if (f->id >= 0) {
			if ((r = idbuf_push(out, f->id)) < 0)
				return r;
			continue;
		}
		r = vocab_pre_split(v->pre, text + f->off, f->len, &w->words);
		if (r < 0)
			return r;
		for (size_t k = 0; k < wd->n; k++) {
			const char *s = wd->text + wd->offs[k];
			size_t n = wd->offs[k + 1] - wd->offs[k], len = 0;

			/* every byte becomes its printable stand-in (at most 2 bytes of UTF-8) */
			r = work_reserve_buf(w, 2 * n + 1);
			if (r < 0)
				return r;
			for (size_t j = 0; j < n; j++) {
				uint8_t b = (uint8_t) s[j];

				memcpy(w->buf + len, v->byte_enc[b], v->byte_enc_len[b]);
				len += v->byte_enc_len[b];
			}
			r = bpe_word(v, w, len, out);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int64_t vocab_tokenize(const struct vocab *v, const char *text, size_t len, bool add_bos,
		       bool parse_special, int32_t *ids, size_t max_ids)
{
	struct frags fr = {};
	struct work w = {};
	struct idbuf out = {};
	int r;

	assert_return(v && (text || len == 0) && (ids || max_ids == 0), -EINVAL);

	r = partition(v, text, len, parse_special, &fr);
	if (r < 0)
		goto out;
	if (add_bos && v->bos >= 0 && (r = idbuf_push(&out, v->bos)) < 0)
		goto out;
	if (v->kind == VOCAB_KIND_SPM)
		r = spm_tokenize(v, text, &fr, &w, &out);
	else
		r = bpe_tokenize(v, text, &fr, &w, &out);
	if (r < 0)
		goto out;
	if (out.n > (size_t) INT64_MAX) {
		r = -EOVERFLOW;
		goto out;
	}
	if (out.n && max_ids)
		memcpy(ids, out.v, MIN(out.n, max_ids) * sizeof(*ids));
out:
	free(fr.v);
	work_done(&w);
	free(out.v);
	return r < 0 ? r : (int64_t) out.n;
}

/* ---- detokenizing ---- */

/* Writes at most cap bytes but counts them all; lstrip drops one leading space. */
struct writer {
	char *buf;
	size_t cap, len;
	bool lstrip;
};

static void put(struct writer *wr, const char *s, size_t n)
{
	if (wr->lstrip && n > 0) {
		wr->lstrip = false;
		if (s[0] == ' ') {
			s++;
			n--;
		}
	}
	if (wr->len < wr->cap)
		memcpy(wr->buf + wr->len, s, MIN(n, wr->cap - wr->len));
	wr->len += n;
}

/* The hex value at text[3..4] of a <0xXX> token, as strtol(substr(3, 2), 16) reads it. */
static uint8_t byte_of_token(const char *text, size_t len)
{
	unsigned v = 0;

	for (size_t i = 3; i < 5 && i < len; i++) {
		char c = text[i];
		unsigned d;

		if (c >= '0' && c <= '9')
			d = (unsigned) (c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned) (c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned) (c - 'A' + 10);
		else
			break;
		v = v * 16 + d;
	}
	return (uint8_t) v;
}

/* GPT-2's byte-level text back to bytes (llama.cpp's llama_decode_text()). */
static void bpe_decode(const struct vocab *v, const char *s, size_t n, struct writer *wr)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp = 0xfffd;
		size_t k = vocab_utf8_decode(s + i, n - i, &cp);
		char enc[4];
		size_t en;

		if (k == 0) {
			cp = 0xfffd;
			k = 1;
		}
		i += k;
		if (cp < ELEMENTSOF(v->cp_byte) && v->cp_byte[cp] >= 0) {
			char b = (char) v->cp_byte[cp];

			put(wr, &b, 1);
			continue;
		}
		/* not a byte stand-in: llama.cpp writes this marker, whole token text included */
		en = vocab_utf8_encode(cp > 0x10ffff ? 0xfffd : cp, enc);
		put(wr, "[UNK_BYTE_0x", 12);
		for (size_t j = 0; j < en; j++) {
			char hex[3];

			(void) snprintf(hex, sizeof(hex), "%02x", (uint8_t) enc[j]);
			put(wr, hex, 2);
		}
		put(wr, s, n);
		put(wr, "]", 1);
	}
}

static int64_t token_to_piece(const struct vocab *v, int32_t id, bool special, bool lstrip,
			      char *buf, size_t cap)
{
	struct writer wr = { .buf = buf, .cap = cap, .lstrip = lstrip };
	const struct vtoken *t;
	const char *s;

	if (id < 0 || (uint32_t) id >= v->n_tokens)
		return -EINVAL;
	t = &v->tok[id];
	s = tok_text(v, id);
	if (!special && (t->attr & ATTR_SPECIAL))
		return 0;
	if (t->attr & (ATTR_SPECIAL | ATTR_USER_DEFINED)) {
		put(&wr, s, t->len);
	} else if (t->attr & ATTR_NORMAL) {
		if (v->kind == VOCAB_KIND_BPE) {
			bpe_decode(v, s, t->len, &wr);
		} else {
			/* U+2581 → ' ' */
			size_t start = 0;

			for (size_t i = 0; i + 3 <= t->len; i++)
				if (memcmp(s + i, SPIECE, 3) == 0) {
					put(&wr, s + start, i - start);
					put(&wr, " ", 1);
					start = i + 3;
					i += 2;
				}
			put(&wr, s + start, t->len - start);
		}
	} else if (t->attr & ATTR_BYTE) {
		char b = (char) byte_of_token(s, t->len);

		put(&wr, &b, 1);
	}
	/* UNUSED and UNDEFINED tokens print as nothing */
	return (int64_t) wr.len;
}

int64_t vocab_token_to_piece(const struct vocab *v, int32_t id, bool render_special, char *buf,
			     size_t cap)
{
	assert_return(v && (buf || cap == 0), -EINVAL);
	return token_to_piece(v, id, render_special, false, buf, cap);
}

void detok_init(struct detok *d, const struct vocab *v, bool render_special)
{
	*d = (struct detok){ .vocab = v, .render_special = render_special, .first = true };
}

/*
 * How many bytes at the end of s[0..n) are the start of a UTF-8 sequence that the next bytes
 * could still complete (0..3). Anything else, including invalid bytes, can be emitted.
 */
static size_t utf8_incomplete_tail(const uint8_t *s, size_t n)
{
	for (size_t back = 1; back <= 3 && back <= n; back++) {
		const uint8_t *p = s + n - back;
		size_t need;
		uint8_t lo = 0x80, hi = 0xbf;

		if ((p[0] & 0xc0) == 0x80)
			continue; /* a continuation byte: look further back for the lead */
		if (p[0] >= 0xc2 && p[0] <= 0xdf)
			need = 2;
		else if (p[0] >= 0xe0 && p[0] <= 0xef)
			need = 3;
		else if (p[0] >= 0xf0 && p[0] <= 0xf4)
			need = 4;
		else
			return 0; /* ASCII or a byte that never starts a sequence */
		if (back >= need)
			return 0; /* complete (or overlong: then invalid anyway) */
		/* the second byte's range is narrower for some leads (RFC 3629) */
		if (p[0] == 0xe0)
			lo = 0xa0;
		else if (p[0] == 0xed)
			hi = 0x9f;
		else if (p[0] == 0xf0)
			lo = 0x90;
		else if (p[0] == 0xf4)
			hi = 0x8f;
		if (back >= 2 && (p[1] < lo || p[1] > hi))
			return 0;
		return back;
	}
	return 0;
}

/* Byte i of the concatenation pending + piece. */
static char joined_at(const struct detok *d, const char *piece, size_t i)
{
	return i < d->n_pending ? d->pending[i] : piece[i - d->n_pending];
}

int64_t detok_push(struct detok *d, int32_t id, char *out, size_t cap)
{
	const struct vocab *v;
	_cleanup_free_ char *big = NULL;
	char local[256], *piece = local, keep[4];
	uint8_t tail[4];
	size_t total, tn, hold, emit;
	bool lstrip;
	int64_t n;

	assert_return(d && d->vocab && (out || cap == 0), -EINVAL);
	v = d->vocab;

	/* llama.cpp (llama_detokenize): the leading space that add_space_prefix put on the
	 * first token is removed, unless that first token is BOS (which prints nothing but
	 * still counts as the first). */
	lstrip = d->first && v->add_space_prefix;
	n = token_to_piece(v, id, d->render_special, lstrip, local, sizeof(local));
	if (n < 0)
		return n;
	if ((size_t) n > sizeof(local)) {
		big = malloc((size_t) n);
		if (!big)
			return -ENOMEM;
		(void) token_to_piece(v, id, d->render_special, lstrip, big, (size_t) n);
		piece = big;
	}

	/* Only the last few bytes of pending + piece can be a character still incomplete. */
	total = d->n_pending + (size_t) n;
	tn = MIN(total, sizeof(tail));
	for (size_t i = 0; i < tn; i++)
		tail[i] = (uint8_t) joined_at(d, piece, total - tn + i);
	hold = utf8_incomplete_tail(tail, tn);
	emit = total - hold;
	if (emit > cap)
		return -ENOBUFS; /* nothing changed: the caller may retry with more room */

	for (size_t i = 0; i < hold; i++)
		keep[i] = joined_at(d, piece, emit + i);
	if (emit > 0) {
		size_t from_pending = MIN(d->n_pending, emit);

		memcpy(out, d->pending, from_pending);
		memcpy(out + from_pending, piece, emit - from_pending);
	}
	memcpy(d->pending, keep, hold);
	d->n_pending = hold;
	d->first = false;
	return (int64_t) emit;
}

/* The length of the well-formed UTF-8 sequence at s[0, n), or 0 when s[0] does not start one. */
static size_t utf8_valid_at(const uint8_t *s, size_t n)
{
	size_t need;
	uint8_t lo = 0x80, hi = 0xbf;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		need = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		need = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		need = 4;
	else
		return 0;
	if (n < need)
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < need; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return need;
}

size_t utf8_make_valid(char *s, size_t n, size_t cap)
{
	static const char replacement[] = "\xef\xbf\xbd";
	const uint8_t *u = (const uint8_t *) s;
	size_t i = 0, k, out;
	char *copy;

	while (i < n && (k = utf8_valid_at(u + i, n - i)) > 0)
		i += k;
	if (i == n)
		return n; /* the common case: nothing to copy */
	/* rebuild from the first bad byte, reading from a copy of the rest */
	copy = malloc(n - i);
	if (!copy)
		return i; /* keep the valid prefix rather than invalid bytes */
	memcpy(copy, s + i, n - i);
	u = (const uint8_t *) copy;
	out = i;
	for (size_t j = 0; j < n - i;) {
		k = utf8_valid_at(u + j, n - i - j);
		if (k == 0) {
			if (out + 3 > cap)
				break;
			memcpy(s + out, replacement, 3);
			out += 3;
			j++;
		} else {
			if (out + k > cap)
				break;
			memcpy(s + out, u + j, k);
			out += k;
			j += k;
		}
	}
	free(copy);
	return out;
}

int64_t detok_flush(struct detok *d, char *out, size_t cap)
{
	size_t n;

	assert_return(d && (out || cap == 0), -EINVAL);
	n = d->n_pending;
	if (n > cap)
		return -ENOBUFS;
	if (n)
		memcpy(out, d->pending, n);
	d->n_pending = 0;
	return (int64_t) n;
}
