/* SPDX-License-Identifier: MIT */
/*
 * ngram.c: unigram (add-one) and bigram (interpolated Kneser-Ney) baselines; the formulas are
 * in ngram.h. Pairs are collected as 64-bit keys (v << 32 | w), sorted once and run-length
 * counted, so any vocabulary size works without a V×V table.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ngram.h"

struct ngram {
	uint32_t n_vocab;
	bool finished;
	uint64_t n_targets;   /* N */
	uint64_t *uni;        /* owned: [n_vocab] c(w) */
	uint64_t *keys;       /* owned: every pair while counting; the distinct ones, sorted, after */
	size_t n_keys, cap_keys;
	uint32_t *key_counts; /* owned: [n_keys] c(v,w), after ngram_finish() */
	uint64_t *ctx_count;  /* owned: [n_vocab] c(v) */
	uint32_t *ctx_types;  /* owned: [n_vocab] N1+(v •) */
	uint32_t *cont;       /* owned: [n_vocab] N1+(• w) */
	double discount;      /* D */
};

int ngram_new(uint32_t n_vocab, struct ngram **ret)
{
	_cleanup_(ngram_freep) struct ngram *g = NULL;

	assert_return(ret && n_vocab > 0, -EINVAL);
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->n_vocab = n_vocab;
	g->uni = calloc(n_vocab, sizeof(*g->uni));
	g->ctx_count = calloc(n_vocab, sizeof(*g->ctx_count));
	g->ctx_types = calloc(n_vocab, sizeof(*g->ctx_types));
	g->cont = calloc(n_vocab, sizeof(*g->cont));
	if (!g->uni || !g->ctx_count || !g->ctx_types || !g->cont)
		return -ENOMEM;
	*ret = TAKE_PTR(g);
	return 0;
}

struct ngram *ngram_free(struct ngram *g)
{
	if (!g)
		return NULL;
	free(g->uni);
	free(g->keys);
	free(g->key_counts);
	free(g->ctx_count);
	free(g->ctx_types);
	free(g->cont);
	free(g);
	return NULL;
}

int ngram_add(struct ngram *g, const int32_t *tokens, size_t n)
{
	assert_return(g && (tokens || n == 0), -EINVAL);
	if (g->finished)
		return -EBUSY;
	for (size_t i = 0; i < n; i++)
		if (tokens[i] < 0 || (uint32_t) tokens[i] >= g->n_vocab)
			return -EINVAL;
	if (n < 2)
		return 0;
	if (g->n_keys + n - 1 > g->cap_keys) {
		size_t cap = MAX(g->cap_keys * 2, g->n_keys + n - 1);
		uint64_t *k = realloc(g->keys, cap * sizeof(*k));

		if (!k)
			return -ENOMEM;
		g->keys = k;
		g->cap_keys = cap;
	}
	for (size_t i = 1; i < n; i++) {
		g->keys[g->n_keys++] = (uint64_t) tokens[i - 1] << 32 | (uint32_t) tokens[i];
		g->uni[tokens[i]]++;
	}
	g->n_targets += n - 1;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

	return x < y ? -1 : x > y;
}

int ngram_finish(struct ngram *g)
{
	uint64_t n1 = 0, n2 = 0;
	size_t n_distinct = 0;

	assert_return(g, -EINVAL);
	if (g->finished)
		return 0;
	if (g->n_keys)
		qsort(g->keys, g->n_keys, sizeof(*g->keys), cmp_u64);
	g->key_counts = malloc(MAX(g->n_keys, (size_t) 1) * sizeof(*g->key_counts));
	if (!g->key_counts)
		return -ENOMEM;
	for (size_t i = 0; i < g->n_keys;) {
		size_t j = i;
		uint32_t v, w;

		while (j < g->n_keys && g->keys[j] == g->keys[i])
			j++;
		v = (uint32_t) (g->keys[i] >> 32);
		w = (uint32_t) g->keys[i];
		g->keys[n_distinct] = g->keys[i];
		g->key_counts[n_distinct] = (uint32_t) MIN(j - i, (size_t) UINT32_MAX);
		g->ctx_count[v] += j - i;
		g->ctx_types[v]++;
		g->cont[w]++;
		n1 += j - i == 1;
		n2 += j - i == 2;
		n_distinct++;
		i = j;
	}
	g->n_keys = n_distinct;
	g->discount = n1 + 2 * n2 > 0 ? (double) n1 / (double) (n1 + 2 * n2) : 0.5;
	g->finished = true;
	return 0;
}

double ngram_unigram_logp(const struct ngram *g, int32_t w)
{
	return log(((double) g->uni[w] + 1.0) / ((double) g->n_targets + g->n_vocab));
}

static uint32_t pair_count(const struct ngram *g, int32_t v, int32_t w)
{
	uint64_t key = (uint64_t) v << 32 | (uint32_t) w;
	size_t lo = 0, hi = g->n_keys;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (g->keys[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < g->n_keys && g->keys[lo] == key ? g->key_counts[lo] : 0;
}

double ngram_bigram_logp(const struct ngram *g, int32_t v, int32_t w)
{
	double pc = ((double) g->cont[w] + 1.0) / ((double) g->n_keys + g->n_vocab);
	double cv = (double) g->ctx_count[v], d = g->discount;

	if (g->ctx_count[v] == 0)
		return log(pc);
	return log(fmax((double) pair_count(g, v, w) - d, 0.0) / cv +
		   d * (double) g->ctx_types[v] / cv * pc);
}

double ngram_discount(const struct ngram *g)
{
	return g->discount;
}

uint64_t ngram_n_targets(const struct ngram *g)
{
	return g->n_targets;
}
