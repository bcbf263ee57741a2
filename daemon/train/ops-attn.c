/* SPDX-License-Identifier: MIT */
/*
 * ops-attn.c: causal grouped-query attention over packed rows, forward and backward (see
 * ops.h), as matrix products on the engine's packed F32 kernel (train_mm_nt) with the mask and
 * the softmax between them. Per (row, head) with Q, K, V, dO the head's L×D slices:
 *
 *   S = Q·Kᵀ·scale, masked   P = softmax(S) (saved)   O = P·V
 *   dP = dO·Vᵀ   dS = P ∘ (dP − rowsum(P ∘ dP))·scale
 *   dQ += dS·K   dK += dSᵀ·Q   dV += Pᵀ·dO
 *
 * A token's row only reaches the keys up to itself, so the products that run along the keys
 * go in blocks of BLOCK query rows that stop at the block's last key (an eighth of the square
 * is computed and masked, not half). One task per (row, KV head) in the backward: it handles
 * that KV head's query heads in order, so the KV gradients are summed in a fixed order by one
 * thread (deterministic, no atomics); the forward has one task per (row, head).
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/threadpool.h"
#include "ops.h"

#define BLOCK 64

struct attn_job {
	const struct train_attn_shape *s;
	const float *q, *k, *v, *dout;
	const float *probs_in;
	float *probs, *out, *dq, *dk, *dv;
	atomic_long next;
	atomic_int err;
};

static bool visible(const int32_t *seg, int64_t i, int64_t j)
{
	return j == i || (seg[i] >= 0 && seg[j] == seg[i]);
}

/* C[i][0..i] = A[i]·B[t] for the rows i of each block, up to the block's last key; the
 * entries past i are left for the caller to overwrite. */
static int causal_nt(int64_t L, int64_t D, const float *A, int64_t lda, const float *B,
		     int64_t ldb, float *C)
{
	for (int64_t i0 = 0; i0 < L; i0 += BLOCK) {
		int64_t i1 = i0 + BLOCK < L ? i0 + BLOCK : L;
		int r = train_mm_nt(NULL, i1 - i0, i1, D, A + i0 * lda, lda, B, ldb, C + i0 * L, L,
				    false);

		if (r < 0)
			return r;
	}
	return 0;
}

/* C (L×D, row stride ldc) (+)= P·X where P is L×L lower-triangular (zero past the diagonal)
 * and Xt = Xᵀ (D×L): each block of rows stops at its last key. */
static int causal_nn(int64_t L, int64_t D, const float *P, const float *Xt, float *C,
		     int64_t ldc, bool accumulate)
{
	for (int64_t i0 = 0; i0 < L; i0 += BLOCK) {
		int64_t i1 = i0 + BLOCK < L ? i0 + BLOCK : L;
		int r = train_mm_nt(NULL, i1 - i0, D, i1, P + i0 * L, L, Xt, L, C + i0 * ldc, ldc,
				    accumulate);

		if (r < 0)
			return r;
	}
	return 0;
}

/* C (L×D) += Mᵀ·X for M lower-triangular (L×L): Mt = Mᵀ is upper-triangular, so row t of C
 * only reads Mt[t][t..L): the blocks of rows start their keys at the block's first row. */
static int anticausal_nn(int64_t L, int64_t D, const float *Mt, const float *Xt, float *C,
			 int64_t ldc)
{
	for (int64_t t0 = 0; t0 < L; t0 += BLOCK) {
		int64_t t1 = t0 + BLOCK < L ? t0 + BLOCK : L;
		int r = train_mm_nt(NULL, t1 - t0, D, L - t0, Mt + t0 * L + t0, L, Xt + t0, L,
				    C + t0 * ldc, ldc, true);

		if (r < 0)
			return r;
	}
	return 0;
}

static int fwd_task(struct attn_job *j, int64_t sq, uint32_t h, float *vt)
{
	const struct train_attn_shape *s = j->s;
	uint32_t D = s->head_dim, hkv = h / (s->n_head / s->n_head_kv);
	int64_t L = s->len, qs = (int64_t) s->n_head * D, ks = (int64_t) s->n_head_kv * D;
	int64_t base = sq * L;
	const int32_t *seg = s->seg + base;
	const float *qh = j->q + base * qs + h * D, *kh = j->k + base * ks + hkv * D;
	float *p = j->probs + (sq * s->n_head + h) * L * L;
	float scale = 1.0f / sqrtf((float) D);
	int r;

	if ((r = causal_nt(L, D, qh, qs, kh, ks, p)) < 0)
		return r;
	for (int64_t i = 0; i < L; i++) {
		float *pi = p + i * L, mx = -INFINITY;
		double sum = 0.0;

		for (int64_t t = 0; t <= i; t++)
			if (visible(seg, i, t)) {
				pi[t] *= scale;
				if (pi[t] > mx)
					mx = pi[t];
			}
		for (int64_t t = 0; t <= i; t++)
			if (visible(seg, i, t)) {
				pi[t] = expf(pi[t] - mx);
				sum += pi[t];
			} else {
				pi[t] = 0.0f;
			}
		for (int64_t t = 0; t <= i; t++)
			pi[t] = (float) (pi[t] / sum);
		memset(pi + i + 1, 0, (size_t) (L - i - 1) * sizeof(float));
	}
	train_transpose(L, D, j->v + base * ks + hkv * D, ks, vt, L);
	return causal_nn(L, D, p, vt, j->out + base * qs + h * D, qs, false);
}

struct bwd_scratch {
	float *ds, *dst, *pt, *kt, *qt, *dot, *vt; /* L×L: ds, dst, pt; D×L: the rest */
};

static int bwd_task(struct attn_job *j, int64_t sq, uint32_t hkv, struct bwd_scratch *w)
{
	const struct train_attn_shape *s = j->s;
	uint32_t D = s->head_dim, group = s->n_head / s->n_head_kv;
	int64_t L = s->len, qs = (int64_t) s->n_head * D, ks = (int64_t) s->n_head_kv * D;
	int64_t base = sq * L;
	const float *kh = j->k + base * ks + hkv * D, *vh = j->v + base * ks + hkv * D;
	float *dkh = j->dk + base * ks + hkv * D, *dvh = j->dv + base * ks + hkv * D;
	float scale = 1.0f / sqrtf((float) D);
	int r;

	train_transpose(L, D, kh, ks, w->kt, L);
	for (uint32_t h = hkv * group; h < (hkv + 1) * group; h++) {
		const float *qh = j->q + base * qs + h * D, *doh = j->dout + base * qs + h * D;
		const float *p = j->probs_in + (sq * s->n_head + h) * L * L;

		/* dP = dO·Vᵀ, then dS in place (zero where P is: masked or past the diagonal) */
		if ((r = causal_nt(L, D, doh, qs, vh, ks, w->ds)) < 0)
			return r;
		for (int64_t i = 0; i < L; i++) {
			const float *pi = p + i * L;
			float *di = w->ds + i * L;
			double pdp = 0.0;

			for (int64_t t = 0; t <= i; t++)
				pdp += (double) pi[t] * di[t];
			for (int64_t t = 0; t <= i; t++)
				di[t] = pi[t] * (di[t] - (float) pdp) * scale;
			memset(di + i + 1, 0, (size_t) (L - i - 1) * sizeof(float));
		}
		if ((r = causal_nn(L, D, w->ds, w->kt, j->dq + base * qs + h * D, qs, true)) < 0)
			return r;
		train_transpose(L, L, w->ds, L, w->dst, L);
		train_transpose(L, D, qh, qs, w->qt, L);
		if ((r = anticausal_nn(L, D, w->dst, w->qt, dkh, ks)) < 0)
			return r;
		train_transpose(L, L, p, L, w->pt, L);
		train_transpose(L, D, doh, qs, w->dot, L);
		if ((r = anticausal_nn(L, D, w->pt, w->dot, dvh, ks)) < 0)
			return r;
	}
	return 0;
}

static void attn_part(void *arg, int ith, int nth, bool backward)
{
	struct attn_job *j = arg;
	const struct train_attn_shape *s = j->s;
	int64_t L = s->len, D = s->head_dim;
	int64_t n_tasks = s->n_seq * (backward ? s->n_head_kv : s->n_head);
	size_t sq_bytes = (size_t) (L * L) * sizeof(float), hd_bytes = (size_t) (D * L) * sizeof(float);
	struct bwd_scratch w = { 0 };
	float *buf;

	(void) ith;
	(void) nth;
	buf = malloc(backward ? 3 * sq_bytes + 4 * hd_bytes : hd_bytes);
	if (!buf) {
		atomic_store(&j->err, -ENOMEM);
		return;
	}
	if (backward) {
		w.ds = buf;
		w.dst = w.ds + L * L;
		w.pt = w.dst + L * L;
		w.kt = w.pt + L * L;
		w.qt = w.kt + D * L;
		w.dot = w.qt + D * L;
		w.vt = w.dot + D * L;
	}
	for (;;) {
		long t = atomic_fetch_add(&j->next, 1);
		int r;

		if (t >= n_tasks || atomic_load(&j->err) < 0)
			break;
		if (backward)
			r = bwd_task(j, t / s->n_head_kv, (uint32_t) (t % s->n_head_kv), &w);
		else
			r = fwd_task(j, t / s->n_head, (uint32_t) (t % s->n_head), buf);
		if (r < 0)
			atomic_store(&j->err, r);
	}
	free(buf);
}

static void fwd_part(void *arg, int ith, int nth)
{
	attn_part(arg, ith, nth, false);
}

static void bwd_part(void *arg, int ith, int nth)
{
	attn_part(arg, ith, nth, true);
}

int train_attn_fwd(struct threadpool *pool, const struct train_attn_shape *s, const float *q,
		   const float *k, const float *v, float *probs, float *out)
{
	struct attn_job j = { .s = s, .q = q, .k = k, .v = v, .probs = probs, .out = out };

	atomic_init(&j.next, 0);
	atomic_init(&j.err, 0);
	if (pool)
		threadpool_run(pool, fwd_part, &j);
	else
		fwd_part(&j, 0, 1);
	return atomic_load(&j.err);
}

int train_attn_bwd(struct threadpool *pool, const struct train_attn_shape *s, const float *q,
		   const float *k, const float *v, const float *probs, const float *dout,
		   float *dq, float *dk, float *dv)
{
	struct attn_job j = { .s = s, .q = q, .k = k, .v = v, .probs_in = probs, .dout = dout,
			      .dq = dq, .dk = dk, .dv = dv };

	atomic_init(&j.next, 0);
	atomic_init(&j.err, 0);
	if (pool)
		threadpool_run(pool, bwd_part, &j);
	else
		bwd_part(&j, 0, 1);
	return atomic_load(&j.err);
}
