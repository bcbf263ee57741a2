/* SPDX-License-Identifier: MIT */
/*
 * ngram.h: unigram and bigram language models over token ids, the baselines a trained model's
 * held-out perplexity is compared with (molly-perplexity --baselines, docs/model.md).
 *
 * Counted on documents already tokenized by the model's own tokenizer: token 0 of each
 * document is its first context only (BOS), tokens 1..n-1 are the targets, each with the
 * token before it as its bigram context. The same targets are what the model is scored on.
 *
 * Smoothing (V = the vocabulary size, every id < V gets a nonzero probability):
 *   unigram, add-one:   P(w) = (c(w) + 1) / (N + V)          c(w): w as a target, N = Σ c
 *   bigram, interpolated Kneser-Ney with one absolute discount D:
 *     P(w | v) = max(c(v,w) - D, 0) / c(v)  +  D · N1+(v •) / c(v) · Pc(w)    when c(v) > 0
 *     P(w | v) = Pc(w)                                                          when c(v) = 0
 *     Pc(w)    = (N1+(• w) + 1) / (N1+(• •) + V)   continuation probability, add-one
 *   where c(v,w) counts the pair, c(v) = Σ_w c(v,w), N1+(v •) the distinct w after v,
 *   N1+(• w) the distinct v before w, N1+(• •) the distinct pairs, and
 *   D = n1 / (n1 + 2·n2) from the numbers of pairs seen exactly once (n1) and twice (n2)
 *   (Ney, Essen and Kneser's estimate; 0.5 when n1 + 2·n2 = 0).
 *
 * Memory: 8 bytes per target while counting, then 12 per distinct pair and 16 per vocabulary
 * entry. Threading: one thread at a time; after ngram_finish() the model is only read.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "../basic/macro.h"

struct ngram;

/* 0 and an empty model for ids 0..n_vocab-1 in *ret, or -errno. */
int ngram_new(uint32_t n_vocab, struct ngram **ret);
struct ngram *ngram_free(struct ngram *g); /* NULL-safe, returns NULL */
DEFINE_CLEANUP_FUNC(struct ngram *, ngram_free, NULL)

/* Counts one document (n tokens, n - 1 targets). -EINVAL for an id out of range, -EBUSY after
 * ngram_finish(). */
int ngram_add(struct ngram *g, const int32_t *tokens, size_t n);
/* Ends counting: builds the pair table and the discount. 0 or -ENOMEM. */
int ngram_finish(struct ngram *g);

/* Natural-log probabilities (finite: every id has mass). Valid after ngram_finish(); ids must
 * be < n_vocab. */
double ngram_unigram_logp(const struct ngram *g, int32_t w);
double ngram_bigram_logp(const struct ngram *g, int32_t v, int32_t w);

/* The bigram discount D, and the number of targets counted (N). */
double ngram_discount(const struct ngram *g);
uint64_t ngram_n_targets(const struct ngram *g);
