/* SPDX-License-Identifier: MIT */
/*
 * perplexity.c: per-token NLL with a sliding window (perplexity.h), on the batched forward
 * pass with a private KV cache (an identity block table, as model_ctx has), so that logits
 * come out for every scored row rather than the last one only (model_decode()).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "forward.h"
#include "model.h"
#include "perplexity.h"
#include "threadpool.h"

#define PPL_BATCH 256 /* rows per model_forward() call */

struct ppl {
	const struct model *m;     /* borrowed */
	struct threadpool *pool;   /* borrowed */
	uint32_t ctx, stride, n_vocab;
	struct forward_ws *ws;     /* owned */
	struct kv_store kv;        /* owned base */
	uint32_t *blocks;          /* owned: identity block table */
	uint32_t n_blocks;
	struct forward_row *rows;  /* owned: [PPL_BATCH] */
	float *logits;             /* owned: [PPL_BATCH][n_vocab] */
};

double ppl_nll_of_logits(const float *z, uint32_t n, int32_t y)
{
	double max = z[0], sum = 0.0;

	for (uint32_t i = 1; i < n; i++)
		max = fmax(max, z[i]);
	for (uint32_t i = 0; i < n; i++)
		sum += exp((double) z[i] - max);
	return log(sum) + max - (double) z[y];
}

int ppl_new(const struct model *m, struct threadpool *pool, uint32_t ctx, uint32_t stride,
	    struct ppl **ret)
{
	_cleanup_(ppl_freep) struct ppl *p = NULL;
	int r;

	assert_return(m && pool && ret, -EINVAL);
	assert_return(ctx >= 1 && stride >= 1 && stride <= ctx, -EINVAL);
	assert_return(ctx <= (1u << 24), -E2BIG);
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	*p = (struct ppl){ .m = m, .pool = pool, .ctx = ctx, .stride = stride,
			   .n_vocab = m->hp.n_vocab };
	p->n_blocks = (ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
	p->kv.page_bytes = forward_kv_block_bytes(m);
	p->kv.base = malloc((size_t) p->n_blocks * p->kv.page_bytes);
	p->blocks = malloc(p->n_blocks * sizeof(*p->blocks));
	p->rows = malloc(PPL_BATCH * sizeof(*p->rows));
	p->logits = malloc((size_t) PPL_BATCH * p->n_vocab * sizeof(*p->logits));
	if (!p->kv.base || !p->blocks || !p->rows || !p->logits)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_blocks; i++)
		p->blocks[i] = i;
	r = forward_ws_new(m, PPL_BATCH, ctx, 1, threadpool_n_threads(pool), &p->ws);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(p);
	return 0;
}

struct ppl *ppl_free(struct ppl *p)
{
	if (!p)
		return NULL;
	free(p->kv.base);
	free(p->blocks);
	free(p->rows);
	free(p->logits);
	forward_ws_free(p->ws);
	free(p);
	return NULL;
}

/* Runs ids[a..b) as one window from an empty cache; nll[j + 1] for every j in [from, b). */
static int run_window(struct ppl *p, const int32_t *ids, size_t a, size_t b, size_t from,
		      double *nll)
{
	struct forward_seq seq = { .blocks = p->blocks, .n_blocks = p->n_blocks };

	for (size_t done = a; done < b;) {
		uint32_t chunk = (uint32_t) MIN((size_t) PPL_BATCH, b - done), k = 0;
		struct forward_batch batch = {
			.rows = p->rows,
			.n_rows = chunk,
			.seqs = &seq,
			.logits = p->logits,
		};
		int r;

		for (uint32_t i = 0; i < chunk; i++) {
			size_t j = done + i;

			p->rows[i] = (struct forward_row){
				.token = ids[j],
				.pos = (uint32_t) (j - a),
				.logits_index = j >= from ? (int32_t) k++ : -1,
			};
		}
		r = model_forward(p->m, p->ws, p->pool, &p->kv, &batch);
		if (r < 0)
			return r;
		k = 0;
		for (uint32_t i = 0; i < chunk; i++) {
			size_t j = done + i;

			if (j >= from)
				nll[j + 1] = ppl_nll_of_logits(p->logits + (size_t) k++ * p->n_vocab,
							       p->n_vocab, ids[j + 1]);
		}
		done += chunk;
	}
	return 0;
}

int ppl_doc_nll(struct ppl *p, const int32_t *ids, size_t n, double *nll)
{
	size_t m, a = 0, scored = 0;

	assert_return(p && (ids || n == 0) && (nll || n < 2), -EINVAL);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (uint32_t) ids[i] >= p->n_vocab)
			return -EINVAL;
	if (n < 2)
		return 0;
	m = n - 1; /* inputs that predict a target: ids[0..n-2] */
	for (;;) {
		size_t b = MIN(a + p->ctx, m);
		int r = run_window(p, ids, a, b, scored, nll);

		if (r < 0)
			return r;
		if (b == m)
			return 0;
		scored = b;
		a += p->stride;
	}
}
