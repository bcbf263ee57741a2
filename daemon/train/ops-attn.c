/* SPDX-License-Identifier: MIT */
/*
 * ops-attn.c: causal grouped-query attention over packed rows, forward and backward (see
 * ops.h). One task per (row, KV head): it handles that KV head's query heads in order, so
 * the KV gradients are summed in a fixed order by one thread (deterministic, no atomics).
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/threadpool.h"
#include "ops.h"

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

static float dot(const float *a, const float *b, uint32_t n)
{
	float acc = 0.0f;

	for (uint32_t d = 0; d < n; d++)
		acc += a[d] * b[d];
	return acc;
}

static void fwd_task(struct attn_job *j, int64_t sq, uint32_t hkv)
{
	const struct train_attn_shape *s = j->s;
	uint32_t D = s->head_dim, group = s->n_head / s->n_head_kv;
	int64_t qs = (int64_t) s->n_head * D, ks = (int64_t) s->n_head_kv * D, base = sq * s->len;
	const int32_t *seg = s->seg + base;
	float scale = 1.0f / sqrtf((float) D);

	for (uint32_t h = hkv * group; h < (hkv + 1) * group; h++) {
		for (int64_t i = 0; i < s->len; i++) {
			const float *qi = j->q + (base + i) * qs + h * D;
			float *p = j->probs + ((sq * s->n_head + h) * s->len + i) * s->len;
			float *o = j->out + (base + i) * qs + h * D;
			float mx = -INFINITY;
			double sum = 0.0;

			memset(p, 0, (size_t) s->len * sizeof(float));
			for (int64_t t = 0; t <= i; t++)
				if (visible(seg, i, t)) {
					p[t] = dot(qi, j->k + (base + t) * ks + hkv * D, D) * scale;
					if (p[t] > mx)
						mx = p[t];
				}
			for (int64_t t = 0; t <= i; t++)
				if (visible(seg, i, t)) {
					p[t] = expf(p[t] - mx);
					sum += p[t];
				}
			memset(o, 0, D * sizeof(float));
			for (int64_t t = 0; t <= i; t++) {
				const float *vt = j->v + (base + t) * ks + hkv * D;

				if (!visible(seg, i, t))
					continue;
				p[t] = (float) (p[t] / sum);
				for (uint32_t d = 0; d < D; d++)
					o[d] += p[t] * vt[d];
			}
		}
	}
}

static void bwd_task(struct attn_job *j, int64_t sq, uint32_t hkv, float *dp)
{
	const struct train_attn_shape *s = j->s;
	uint32_t D = s->head_dim, group = s->n_head / s->n_head_kv;
	int64_t qs = (int64_t) s->n_head * D, ks = (int64_t) s->n_head_kv * D, base = sq * s->len;
	const int32_t *seg = s->seg + base;
	float scale = 1.0f / sqrtf((float) D);

	for (uint32_t h = hkv * group; h < (hkv + 1) * group; h++) {
		for (int64_t i = 0; i < s->len; i++) {
			const float *qi = j->q + (base + i) * qs + h * D;
			const float *doi = j->dout + (base + i) * qs + h * D;
			const float *p = j->probs_in + ((sq * s->n_head + h) * s->len + i) * s->len;
			float *dqi = j->dq + (base + i) * qs + h * D;
			double pdp = 0.0;

			for (int64_t t = 0; t <= i; t++) {
				dp[t] = 0.0f;
				if (!visible(seg, i, t))
					continue;
				dp[t] = dot(doi, j->v + (base + t) * ks + hkv * D, D);
				pdp += (double) p[t] * dp[t];
			}
			for (int64_t t = 0; t <= i; t++) {
				const float *kt = j->k + (base + t) * ks + hkv * D;
				float *dkt = j->dk + (base + t) * ks + hkv * D;
				float *dvt = j->dv + (base + t) * ks + hkv * D;
				float ds;

				if (!visible(seg, i, t))
					continue;
				ds = p[t] * (dp[t] - (float) pdp) * scale;
				for (uint32_t d = 0; d < D; d++) {
					dqi[d] += ds * kt[d];
					dkt[d] += ds * qi[d];
					dvt[d] += p[t] * doi[d];
				}
			}
		}
	}
}

static void attn_part(void *arg, int ith, int nth, bool backward)
{
	struct attn_job *j = arg;
	int64_t n_tasks = j->s->n_seq * j->s->n_head_kv;
	float *dp = NULL;

	if (backward && !(dp = malloc((size_t) j->s->len * sizeof(float)))) {
		atomic_store(&j->err, -ENOMEM);
		return;
	}
	for (;;) {
		long t = atomic_fetch_add(&j->next, 1);

		if (t >= n_tasks)
			break;
		if (backward)
			bwd_task(j, t / j->s->n_head_kv, (uint32_t) (t % j->s->n_head_kv), dp);
		else
			fwd_task(j, t / j->s->n_head_kv, (uint32_t) (t % j->s->n_head_kv));
	}
	free(dp);
}

static void fwd_part(void *arg, int ith, int nth)
{
	attn_part(arg, ith, nth, false);
}

static void bwd_part(void *arg, int ith, int nth)
{
	attn_part(arg, ith, nth, true);
}

void train_attn_fwd(struct threadpool *pool, const struct train_attn_shape *s, const float *q,
		    const float *k, const float *v, float *probs, float *out)
{
	struct attn_job j = { .s = s, .q = q, .k = k, .v = v, .probs = probs, .out = out };

	atomic_init(&j.next, 0);
	atomic_init(&j.err, 0);
	if (pool)
		threadpool_run(pool, fwd_part, &j);
	else
		fwd_part(&j, 0, 1);
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
