/* SPDX-License-Identifier: MIT */
/*
 * bpe-train.c: byte-level BPE training (see bpe-train.h for the algorithm and the tie rule).
 *
 * Data: the distinct words (raw bytes, counted in a hash table while text comes in), each
 * turned into a sequence of symbol ids at bpe_train_run(); the pairs in a table keyed by
 * (left, right) with their total count and the list of words they occur in (it may hold
 * words that lost the pair since, and duplicates: a word is processed once per merge by a
 * stamp); a max-heap of (count, pair) entries, lazily corrected: an entry whose count is
 * stale is pushed again with the current count when popped. A merge only lowers the counts
 * of pairs that do not contain the new token (their occurrences can only be consumed), so
 * pushing the new token's pairs after each merge keeps the heap's top right.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../basic/array.h"
#include "bpe-train.h"
#include "gguf-writer.h"
#include "vocab-pre.h"

const char *const bpe_train_special[BPE_TRAIN_N_SPECIAL] = {
	"<|begin_of_text|>",
	"<|end_of_text|>",
	"<|im_start|>",
	"<|im_end|>",
};

/* ChatML, which chat.c renders as its chatml family */
static const char chat_template[] =
	"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
	"message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
	"{{ '<|im_start|>assistant\\n' }}{% endif %}";

#define MAX_WORDS UINT32_MAX

struct word {
	uint64_t count;
	uint64_t off;      /* bytes in t->word_bytes */
	uint32_t len;      /* bytes */
	uint32_t n_syms;   /* symbols left after the merges so far */
	uint64_t sym_off;  /* symbols in t->syms (len of them reserved) */
	uint32_t stamp;    /* last merge that processed this word (+1) */
};

struct token {
	uint64_t off; /* raw bytes in t->tok_bytes */
	uint32_t len;
};

struct pair {
	uint32_t left, right;
	int64_t count;
	uint32_t *words; /* owned: indices of words holding (or having held) the pair */
	uint32_t n_words, cap_words;
	uint32_t stamp;  /* last merge that raised its count (+1) */
};

struct merge {
	uint64_t count; /* the pair's count when it was chosen */
	uint32_t pair;  /* index in pairs[] */
};

struct heap_entry {
	int64_t count;
	uint32_t pair;
};

struct bpe_train {
	struct vocab_pre *pre; /* owned */
	struct vocab_pre_words split;

	/* words: open-addressing table of indices into words[] (UINT32_MAX = empty) */
	struct word *words;
	size_t n_words, cap_words;
	uint32_t *word_slots;
	size_t word_mask;
	uint8_t *word_bytes;
	size_t n_word_bytes, cap_word_bytes;
	uint64_t n_occurrences;

	uint32_t *syms; /* owned: every word's symbols */

	struct token *tokens; /* 256 bytes + merges */
	size_t n_tokens;
	uint8_t *tok_bytes;
	size_t n_tok_bytes, cap_tok_bytes;

	struct pair *pairs;
	size_t n_pairs, cap_pairs;
	uint32_t *pair_slots;
	size_t pair_mask;

	struct heap_entry *heap;
	size_t n_heap, cap_heap;

	struct merge *merges; /* owned: n_merges of them */
	bool ran;

	/* for the GGUF: texts of every token (stand-ins) and merges, built by run */
	char **tok_text;   /* owned strings */
	char **merge_text; /* owned strings */
	uint32_t n_merges;
};

/* ---- small helpers ---- */

static uint64_t hash_bytes(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a finaliser */

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 33);
}

static uint64_t hash_pair(uint32_t l, uint32_t r)
{
	uint64_t h = ((uint64_t) l << 32 | r) * 0x9e3779b97f4a7c15ull;

	return h ^ (h >> 29);
}

static uint32_t *slots_new(size_t n, size_t *ret_mask)
{
	size_t size = 64;
	uint32_t *s;

	while (size < 2 * n)
		size *= 2;
	s = malloc(size * sizeof(*s));
	if (!s)
		return NULL;
	memset(s, 0xff, size * sizeof(*s));
	*ret_mask = size - 1;
	return s;
}

/* ---- lifetime ---- */

int bpe_train_new(const char *pre, struct bpe_train **ret, struct errmsg *e)
{
	_cleanup_(bpe_train_freep) struct bpe_train *t = NULL;
	int r;

	assert_return(pre && ret, -EINVAL);
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	r = vocab_pre_new(pre, &t->pre, e);
	if (r < 0)
		return r;
	t->word_slots = slots_new(1 << 16, &t->word_mask);
	if (!t->word_slots)
		return -ENOMEM;
	*ret = TAKE_PTR(t);
	return 0;
}

struct bpe_train *bpe_train_free(struct bpe_train *t)
{
	if (!t)
		return NULL;
	vocab_pre_free(t->pre);
	vocab_pre_words_done(&t->split);
	free(t->words);
	free(t->word_slots);
	free(t->word_bytes);
	free(t->syms);
	free(t->tokens);
	free(t->tok_bytes);
	for (size_t i = 0; i < t->n_pairs; i++)
		free(t->pairs[i].words);
	free(t->pairs);
	free(t->pair_slots);
	free(t->heap);
	free(t->merges);
	for (size_t i = 0; t->tok_text && i < t->n_tokens + BPE_TRAIN_N_SPECIAL; i++)
		free(t->tok_text[i]);
	free(t->tok_text);
	for (size_t i = 0; t->merge_text && i < t->n_merges; i++)
		free(t->merge_text[i]);
	free(t->merge_text);
	free(t);
	return NULL;
}

/* ---- counting words ---- */

static int word_rehash(struct bpe_train *t)
{
	size_t mask;
	uint32_t *s = slots_new(t->n_words * 2, &mask);

	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < t->n_words; i++) {
		const struct word *w = &t->words[i];
		size_t j = hash_bytes(t->word_bytes + w->off, w->len) & mask;

		while (s[j] != UINT32_MAX)
			j = (j + 1) & mask;
		s[j] = (uint32_t) i;
	}
	free(t->word_slots);
	t->word_slots = s;
	t->word_mask = mask;
	return 0;
}

static int word_count(struct bpe_train *t, const char *s, size_t n)
{
	size_t j = hash_bytes(s, n) & t->word_mask;
	struct word *w;
	int r;

	if (n > UINT32_MAX)
		return -E2BIG;
	for (; t->word_slots[j] != UINT32_MAX; j = (j + 1) & t->word_mask) {
		w = &t->words[t->word_slots[j]];
		if (w->len == n && memcmp(t->word_bytes + w->off, s, n) == 0) {
			w->count++;
			return 0;
		}
	}
	if (t->n_words >= MAX_WORDS - 1)
		return -E2BIG;
	if ((r = ARRAY_RESERVE(t->words, t->cap_words, t->n_words + 1, 16)) < 0 ||
	    (r = ARRAY_RESERVE(t->word_bytes, t->cap_word_bytes, t->n_word_bytes + n, 16)) < 0)
		return r;
	memcpy(t->word_bytes + t->n_word_bytes, s, n);
	t->words[t->n_words] = (struct word){ .count = 1, .off = t->n_word_bytes,
					      .len = (uint32_t) n };
	t->word_slots[j] = (uint32_t) t->n_words;
	t->n_words++;
	t->n_word_bytes += n;
	if (t->n_words * 2 > t->word_mask)
		return word_rehash(t);
	return 0;
}

int bpe_train_add_text(struct bpe_train *t, const char *text, size_t len)
{
	int r;

	assert_return(t && (text || len == 0), -EINVAL);
	if (t->ran)
		return -EBUSY;
	r = vocab_pre_split(t->pre, text, len, &t->split);
	if (r < 0)
		return r;
	for (size_t i = 0; i < t->split.n; i++) {
		r = word_count(t, t->split.text + t->split.offs[i],
			       t->split.offs[i + 1] - t->split.offs[i]);
		if (r < 0)
			return r;
		t->n_occurrences++;
	}
	return 0;
}

size_t bpe_train_n_words(const struct bpe_train *t)
{
	return t ? t->n_words : 0;
}

uint64_t bpe_train_n_word_occurrences(const struct bpe_train *t)
{
	return t ? t->n_occurrences : 0;
}

/* ---- pairs ---- */

static int pair_rehash(struct bpe_train *t)
{
	size_t mask;
	uint32_t *s = slots_new(t->n_pairs * 2, &mask);

	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < t->n_pairs; i++) {
		size_t j = hash_pair(t->pairs[i].left, t->pairs[i].right) & mask;

		while (s[j] != UINT32_MAX)
			j = (j + 1) & mask;
		s[j] = (uint32_t) i;
	}
	free(t->pair_slots);
	t->pair_slots = s;
	t->pair_mask = mask;
	return 0;
}

/* Index of pair (l, r), created when absent; -ENOMEM. */
static int64_t pair_get(struct bpe_train *t, uint32_t l, uint32_t r)
{
	size_t j = hash_pair(l, r) & t->pair_mask;
	int rr;

	for (; t->pair_slots[j] != UINT32_MAX; j = (j + 1) & t->pair_mask) {
		const struct pair *p = &t->pairs[t->pair_slots[j]];

		if (p->left == l && p->right == r)
			return t->pair_slots[j];
	}
	if (t->n_pairs >= UINT32_MAX - 1)
		return -ENOMEM;
	rr = ARRAY_RESERVE(t->pairs, t->cap_pairs, t->n_pairs + 1, 16);
	if (rr < 0)
		return rr;
	t->pairs[t->n_pairs] = (struct pair){ .left = l, .right = r };
	t->pair_slots[j] = (uint32_t) t->n_pairs;
	t->n_pairs++;
	if (t->n_pairs * 2 > t->pair_mask && (rr = pair_rehash(t)) < 0)
		return rr;
	return (int64_t) t->n_pairs - 1;
}

static int pair_add_word(struct pair *p, uint32_t w)
{
	int r;

	if (p->n_words > 0 && p->words[p->n_words - 1] == w)
		return 0;
	if (p->n_words == UINT32_MAX)
		return -ENOMEM;
	r = ARRAY_RESERVE(p->words, p->cap_words, (size_t) p->n_words + 1, 16);
	if (r < 0)
		return r;
	p->words[p->n_words++] = w;
	return 0;
}

/* Adds delta × (each adjacent pair of word wi); with delta > 0 the word joins the pairs'
 * lists and pairs that rise are stamped with stamp. */
static int word_pairs(struct bpe_train *t, uint32_t wi, int64_t delta, uint32_t stamp,
		      uint32_t **rise, size_t *n_rise, size_t *cap_rise)
{
	const struct word *w = &t->words[wi];
	const uint32_t *s = t->syms + w->sym_off;
	int r;

	for (uint32_t i = 1; i < w->n_syms; i++) {
		int64_t pi = pair_get(t, s[i - 1], s[i]);
		struct pair *p;

		if (pi < 0)
			return (int) pi;
		p = &t->pairs[pi];
		p->count += delta;
		if (delta > 0) {
			if ((r = pair_add_word(p, wi)) < 0)
				return r;
			if (rise && p->stamp != stamp) {
				p->stamp = stamp;
				r = ARRAY_RESERVE(*rise, *cap_rise, *n_rise + 1, 16);
				if (r < 0)
					return r;
				(*rise)[(*n_rise)++] = (uint32_t) pi;
			}
		}
	}
	return 0;
}

/* ---- the heap: highest count first, then the tie rule ---- */

static int bytes_cmp(const struct bpe_train *t, uint32_t a, uint32_t b)
{
	const struct token *x = &t->tokens[a], *y = &t->tokens[b];
	int c = memcmp(t->tok_bytes + x->off, t->tok_bytes + y->off, MIN(x->len, y->len));

	if (c)
		return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

/* true when a must be chosen before b */
static bool entry_before(const struct bpe_train *t, const struct heap_entry *a,
			 const struct heap_entry *b)
{
	const struct pair *pa = &t->pairs[a->pair], *pb = &t->pairs[b->pair];
	int c;

	if (a->count != b->count)
		return a->count > b->count;
	c = bytes_cmp(t, pa->left, pb->left);
	if (c)
		return c < 0;
	c = bytes_cmp(t, pa->right, pb->right);
	if (c)
		return c < 0;
	return a->pair < b->pair; /* the same pair twice: either */
}

static int heap_push(struct bpe_train *t, int64_t count, uint32_t pair)
{
	size_t i;
	int r;

	r = ARRAY_RESERVE(t->heap, t->cap_heap, t->n_heap + 1, 16);
	if (r < 0)
		return r;
	i = t->n_heap++;
	t->heap[i] = (struct heap_entry){ .count = count, .pair = pair };
	while (i > 0) {
		size_t up = (i - 1) / 2;

		if (!entry_before(t, &t->heap[i], &t->heap[up]))
			break;
		struct heap_entry tmp = t->heap[up];
		t->heap[up] = t->heap[i];
		t->heap[i] = tmp;
		i = up;
	}
	return 0;
}

static struct heap_entry heap_pop(struct bpe_train *t)
{
	struct heap_entry top = t->heap[0];
	size_t i = 0;

	t->heap[0] = t->heap[--t->n_heap];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < t->n_heap && entry_before(t, &t->heap[l], &t->heap[m]))
			m = l;
		if (r < t->n_heap && entry_before(t, &t->heap[r], &t->heap[m]))
			m = r;
		if (m == i)
			break;
		struct heap_entry tmp = t->heap[m];
		t->heap[m] = t->heap[i];
		t->heap[i] = tmp;
		i = m;
	}
	return top;
}

/* ---- training ---- */

/* Appends a token of n bytes (which must not point into tok_bytes: it may move). */
static int token_append(struct bpe_train *t, size_t *cap_tokens, const uint8_t *bytes, size_t n)
{
	size_t off = t->n_tok_bytes;
	int r;

	if (n > UINT32_MAX)
		return -E2BIG;
	if ((r = ARRAY_RESERVE(t->tokens, *cap_tokens, t->n_tokens + 1, 16)) < 0 ||
	    (r = ARRAY_RESERVE(t->tok_bytes, t->cap_tok_bytes, t->n_tok_bytes + n, 16)) < 0)
		return r;
	memcpy(t->tok_bytes + off, bytes, n);
	t->tokens[t->n_tokens++] = (struct token){ .off = off, .len = (uint32_t) n };
	t->n_tok_bytes += n;
	return 0;
}

/* Replaces every (left, right) in word wi by id, left to right. */
static void word_merge(struct bpe_train *t, uint32_t wi, uint32_t left, uint32_t right,
		       uint32_t id)
{
	struct word *w = &t->words[wi];
	uint32_t *s = t->syms + w->sym_off, n = 0;

	for (uint32_t i = 0; i < w->n_syms; i++) {
		if (i + 1 < w->n_syms && s[i] == left && s[i + 1] == right) {
			s[n++] = id;
			i++;
		} else {
			s[n++] = s[i];
		}
	}
	w->n_syms = n;
}

static bool word_has(const struct bpe_train *t, uint32_t wi, uint32_t left, uint32_t right)
{
	const struct word *w = &t->words[wi];
	const uint32_t *s = t->syms + w->sym_off;

	for (uint32_t i = 1; i < w->n_syms; i++)
		if (s[i - 1] == left && s[i] == right)
			return true;
	return false;
}

static int init_symbols(struct bpe_train *t)
{
	uint64_t n_syms = 0;
	int r;

	for (size_t i = 0; i < t->n_words; i++)
		n_syms += t->words[i].len;
	t->syms = malloc(MAX(n_syms, 1) * sizeof(*t->syms));
	if (!t->syms)
		return -ENOMEM;
	n_syms = 0;
	for (size_t i = 0; i < t->n_words; i++) {
		struct word *w = &t->words[i];

		w->sym_off = n_syms;
		w->n_syms = w->len;
		for (uint32_t j = 0; j < w->len; j++)
			t->syms[n_syms++] = t->word_bytes[w->off + j];
	}
	t->pair_slots = slots_new(1 << 16, &t->pair_mask);
	if (!t->pair_slots)
		return -ENOMEM;
	for (size_t i = 0; i < t->n_words; i++) {
		r = word_pairs(t, (uint32_t) i, (int64_t) t->words[i].count, 0, NULL, NULL, NULL);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < t->n_pairs; i++)
		if (t->pairs[i].count > 0 && (r = heap_push(t, t->pairs[i].count, (uint32_t) i)) < 0)
			return r;
	return 0;
}

static bool byte_printable(unsigned b)
{
	return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the others get
 * U+0100 onwards in byte order. Only used to write the vocabulary, so counting is fine. */
static size_t byte_stand_in(uint8_t b, char out[2])
{
	uint32_t cp = b;

	if (!byte_printable(b)) {
		cp = 256;
		for (unsigned i = 0; i < b; i++)
			cp += !byte_printable(i);
	}
	if (cp < 0x80) {
		out[0] = (char) cp;
		return 1;
	}
	out[0] = (char) (0xc0 | (cp >> 6));
	out[1] = (char) (0x80 | (cp & 0x3f));
	return 2;
}

static char *stand_in_text(const uint8_t *b, size_t n)
{
	char *s = malloc(2 * n + 1);
	size_t len = 0;

	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i++)
		len += byte_stand_in(b[i], s + len);
	s[len] = 0;
	return s;
}

static int build_texts(struct bpe_train *t)
{
	size_t n = t->n_tokens + BPE_TRAIN_N_SPECIAL;

	t->tok_text = calloc(n, sizeof(*t->tok_text));
	t->merge_text = calloc(MAX(t->n_merges, 1), sizeof(*t->merge_text));
	if (!t->tok_text || !t->merge_text)
		return -ENOMEM;
	for (size_t i = 0; i < t->n_tokens; i++) {
		t->tok_text[i] = stand_in_text(t->tok_bytes + t->tokens[i].off, t->tokens[i].len);
		if (!t->tok_text[i])
			return -ENOMEM;
	}
	for (size_t i = 0; i < BPE_TRAIN_N_SPECIAL; i++)
		if (!(t->tok_text[t->n_tokens + i] = strdup(bpe_train_special[i])))
			return -ENOMEM;
	for (uint32_t i = 0; i < t->n_merges; i++) {
		/* merge i made token 256 + i */
		const struct pair *p = &t->pairs[t->merges[i].pair];

		if (asprintf(&t->merge_text[i], "%s %s", t->tok_text[p->left],
			     t->tok_text[p->right]) < 0) {
			t->merge_text[i] = NULL;
			return -ENOMEM;
		}
	}
	return 0;
}

int64_t bpe_train_run(struct bpe_train *t, uint32_t n_merges, uint64_t min_count)
{
	_cleanup_free_ uint32_t *rise = NULL;
	size_t n_rise = 0, cap_rise = 0, cap_tokens = 0;
	int r;

	assert_return(t, -EINVAL);
	if (min_count == 0)
		return -EINVAL;
	if (t->ran)
		return -EBUSY;
	t->ran = true;
	if (n_merges > UINT32_MAX - 256 - BPE_TRAIN_N_SPECIAL)
		return -EINVAL;

	t->merges = calloc(MAX(n_merges, 1), sizeof(*t->merges));
	if (!t->merges)
		return -ENOMEM;
	for (int b = 0; b < 256; b++) {
		uint8_t byte = (uint8_t) b;

		if ((r = token_append(t, &cap_tokens, &byte, 1)) < 0)
			return r;
	}
	r = init_symbols(t);
	if (r < 0)
		return r;

	while (t->n_merges < n_merges && t->n_heap > 0) {
		struct heap_entry top = heap_pop(t);
		struct pair *p = &t->pairs[top.pair];
		uint32_t left = p->left, right = p->right, id = (uint32_t) t->n_tokens;
		uint32_t stamp = t->n_merges + 1;
		size_t loff, lrlen;

		if (p->count != top.count) {
			if (p->count >= (int64_t) min_count &&
			    (r = heap_push(t, p->count, top.pair)) < 0)
				return r;
			continue;
		}
		if (p->count < (int64_t) min_count)
			break; /* the best pair left is too rare */

		/* the new token's bytes: left's then right's, copied out first (tok_bytes may
		 * move while it grows) */
		loff = t->tokens[left].off;
		lrlen = (size_t) t->tokens[left].len + t->tokens[right].len;
		{
			_cleanup_free_ uint8_t *tmp = malloc(lrlen);

			if (!tmp)
				return -ENOMEM;
			memcpy(tmp, t->tok_bytes + loff, t->tokens[left].len);
			memcpy(tmp + t->tokens[left].len, t->tok_bytes + t->tokens[right].off,
			       t->tokens[right].len);
			if ((r = token_append(t, &cap_tokens, tmp, lrlen)) < 0)
				return r;
		}
		t->merges[t->n_merges++] = (struct merge){ .count = (uint64_t) top.count,
							   .pair = top.pair };

		/* every word that may hold the pair: take its pairs out, merge, put them back */
		n_rise = 0;
		for (uint32_t k = 0; k < t->pairs[top.pair].n_words; k++) {
			uint32_t wi = t->pairs[top.pair].words[k];
			int64_t c = (int64_t) t->words[wi].count;

			if (t->words[wi].stamp == stamp || !word_has(t, wi, left, right))
				continue;
			t->words[wi].stamp = stamp;
			if ((r = word_pairs(t, wi, -c, stamp, NULL, NULL, NULL)) < 0)
				return r;
			word_merge(t, wi, left, right, id);
			/* t->pairs may move in here: index again on every round */
			if ((r = word_pairs(t, wi, c, stamp, &rise, &n_rise, &cap_rise)) < 0)
				return r;
		}
		p = &t->pairs[top.pair];
		free(p->words); /* the pair is gone from every word */
		p->words = NULL;
		p->n_words = p->cap_words = 0;
		for (size_t k = 0; k < n_rise; k++) {
			const struct pair *q = &t->pairs[rise[k]];

			if (q->count >= (int64_t) min_count &&
			    (r = heap_push(t, q->count, rise[k])) < 0)
				return r;
		}
	}

	r = build_texts(t);
	if (r < 0)
		return r;
	return t->n_merges;
}

/* ---- results ---- */

uint32_t bpe_train_n_tokens(const struct bpe_train *t)
{
	return t && t->tok_text ? (uint32_t) t->n_tokens + BPE_TRAIN_N_SPECIAL : 0;
}

const char *bpe_train_token_text(const struct bpe_train *t, uint32_t id)
{
	if (!t || !t->tok_text || id >= t->n_tokens + BPE_TRAIN_N_SPECIAL)
		return NULL;
	return t->tok_text[id];
}

const uint8_t *bpe_train_token_bytes(const struct bpe_train *t, uint32_t id, size_t *ret_len)
{
	if (!t || !t->tok_text || id >= t->n_tokens)
		return NULL;
	*ret_len = t->tokens[id].len;
	return t->tok_bytes + t->tokens[id].off;
}

const char *bpe_train_merge_text(const struct bpe_train *t, uint32_t i)
{
	if (!t || !t->merge_text || i >= t->n_merges)
		return NULL;
	return t->merge_text[i];
}

uint64_t bpe_train_merge_count(const struct bpe_train *t, uint32_t i)
{
	if (!t || !t->merges || i >= t->n_merges)
		return 0;
	return t->merges[i].count;
}

int bpe_train_write_gguf(const struct bpe_train *t, struct gguf_writer *w, struct errmsg *e)
{
	uint32_t n = bpe_train_n_tokens(t);
	_cleanup_free_ int32_t *types = NULL;
	int r;

	assert_return(t && w, -EINVAL);
	if (n == 0)
		return errmsg_set(e, -EBUSY, "the tokenizer is not trained yet");
	types = malloc(n * sizeof(*types));
	if (!types)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		types[i] = i < t->n_tokens ? 1 /* NORMAL */ : 3 /* CONTROL */;

	r = gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", e);
	if (r >= 0)
		r = gguf_writer_add_str(w, "tokenizer.ggml.pre", vocab_pre_name(t->pre), e);
	if (r >= 0)
		r = gguf_writer_add_str_array(w, "tokenizer.ggml.tokens",
					      (const char *const *) t->tok_text, n, e);
	if (r >= 0)
		r = gguf_writer_add_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types,
					  n, e);
	if (r >= 0)
		r = gguf_writer_add_str_array(w, "tokenizer.ggml.merges",
					      (const char *const *) t->merge_text, t->n_merges,
					      e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t) t->n_tokens,
					e);
	if (r >= 0)
		r = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id",
					(uint32_t) t->n_tokens + 1, e);
	if (r >= 0)
		r = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true, e);
	if (r >= 0)
		r = gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", false, e);
	if (r >= 0)
		r = gguf_writer_add_str(w, "tokenizer.chat_template", chat_template, e);
	return r;
}
