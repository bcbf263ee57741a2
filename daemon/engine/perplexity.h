/* SPDX-License-Identifier: MIT */
/*
 * perplexity.h: the negative log-likelihood a model gives each token of a document, with a
 * sliding window of the model's context (molly-perplexity; docs/model.md).
 *
 * A document is ids[0..n) (ids[0] normally BOS); its targets are ids[1..n), each scored with
 * -ln softmax(logits)[target] from the logits of the token before it. Windows of ctx tokens
 * each start from an empty cache at position 0; window k covers ids[k·stride .. k·stride +
 * ctx) (cut at the last input, ids[n-2]) and scores only the targets no earlier window
 * scored. So a target t <= ctx sees ids[0..t), all of its past; a later one sees at least
 * ctx - stride tokens (ids[a..t) for its window's start a). stride == ctx: disjoint chunks.
 * Only the first window starts with BOS.
 *
 * Each window runs as batches of up to 256 rows through model_forward(), logits for every
 * scored row; a row's result does not depend on its batch (forward.h), so the figures do not
 * depend on the batch size or thread count.
 *
 * Threading: one ppl at a time per struct; the model is only read.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "../basic/macro.h"

struct model;
struct threadpool;
struct ppl;

/* Scratch for windows of ctx tokens advanced by stride (1 <= stride <= ctx) on pool (borrowed,
 * as is m: both must outlive the ppl). 0 or -EINVAL, -ENOMEM, -E2BIG. */
int ppl_new(const struct model *m, struct threadpool *pool, uint32_t ctx, uint32_t stride,
	    struct ppl **ret);
struct ppl *ppl_free(struct ppl *p); /* NULL-safe, returns NULL */
DEFINE_CLEANUP_FUNC(struct ppl *, ppl_free, NULL)

/* nll[t] for t = 1..n-1 (nll[0] is left alone); n < 2 does nothing. -EINVAL for an id out of
 * range; model_forward()'s errors. */
int ppl_doc_nll(struct ppl *p, const int32_t *ids, size_t n, double *nll);

/* -ln softmax(z)[y] over n logits, computed in double. */
double ppl_nll_of_logits(const float *z, uint32_t n, int32_t y);
