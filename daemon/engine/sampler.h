/* SPDX-License-Identifier: MIT */
/*
 * sampler.h: turning logits into the next token.
 *
 * Order of the chain (as llama.cpp's common sampler): repetition penalty over the last
 * `repeat_last_n` tokens, then top-k, top-p, min-p, temperature, then a draw from the
 * softmax. temperature <= 0 is greedy: plain argmax over the raw logits, lowest id on ties
 * (no penalty either, so greedy output matches the reference runs).
 *
 * Determinism: the generator is our own (xoshiro256**), seeded from `seed`, so the same
 * input, seed and thread count give the same output on every machine.
 * Threading: one sampler per sequence; not shared.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/macro.h"

struct sampler_params {
	float temperature;    /* <= 0: greedy */
	int32_t top_k;        /* <= 0: off */
	float top_p;          /* >= 1: off */
	float min_p;          /* <= 0: off */
	float repeat_penalty; /* 1: off */
	int32_t repeat_last_n;
	uint64_t seed;
};

/* The defaults llama.cpp's CLI uses: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, penalty 1.0
 * over the last 64 tokens, seed 0. */
void sampler_params_default(struct sampler_params *p);

struct sampler;

int sampler_new(const struct sampler_params *p, uint32_t n_vocab, struct sampler **ret);
struct sampler *sampler_free(struct sampler *s);
DEFINE_CLEANUP_FUNC(struct sampler *, sampler_free, NULL)

/* Picks a token from logits[n_vocab] (not modified). */
int32_t sampler_sample(struct sampler *s, const float *logits);
/* Records a token (prompt or generated) for the repetition penalty. */
void sampler_accept(struct sampler *s, int32_t id);

/* argmax with the lowest id winning ties; NaN never wins (all NaN: 0). */
int32_t sampler_argmax(const float *logits, uint32_t n);
/* log softmax(logits)[id] at temperature 1, NaN logits weighing nothing; an impossible token
 * (-inf or NaN logit) gives -FLT_MAX, not -inf, so it can be printed as JSON. */
float sampler_logprob(const float *logits, uint32_t n, int32_t id);
