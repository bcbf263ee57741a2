/* SPDX-License-Identifier: MIT */
/*
 * test-train.c: the trainer's gradients against finite differences (issue #19).
 *
 * Every operation (ops.h) is checked alone on small random shapes: L = Σ r·y for a random r,
 * its backward's input gradients against central differences of the forward. Then the whole
 * model (net.h) on the tiny llama and qwen2 files (F32, and a Q8_0 base for LoRA), in LoRA
 * mode (B non-zero so A's gradient is not zero) and full mode, on a packed batch: sampled
 * entries of every parameter against central differences of the loss. The forward runs in
 * float, so the differences are taken with steps where float rounding stays well below the
 * tolerance (stated with each check); the strict comparison is the PyTorch one
 * (tests/train_reference.py, in double).
 */
#include "test.h"

#include "../daemon/engine/model.h"
#include "../daemon/engine/quant.h"
#include "../daemon/engine/sgmv.h"
#include "../daemon/engine/threadpool.h"
#include "../daemon/train/net.h"
#include "../daemon/train/ops.h"

static void fill(float *x, int64_t n, double amp)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = (float) ((2 * test_uniform() - 1) * amp);
}

static double weighted(const float *y, const float *r, int64_t n)
{
	double s = 0;

	for (int64_t i = 0; i < n; i++)
		s += (double) y[i] * r[i];
	return s;
}

/* max |g - ref| must stay under tol · max |ref| + slack. */
static int compare_within(const char *what, const float *g, const double *ref, int64_t n,
			  double tol, double slack)
{
	double mx = 0, err = 0;

	for (int64_t i = 0; i < n; i++) {
		mx = fmax(mx, fabs(ref[i]));
		err = fmax(err, fabs(g[i] - ref[i]));
	}
	if (!(err <= tol * mx + slack)) {
		fprintf(stderr, "  %s: max|Δ| %.3g vs max|ref| %.3g (tolerance %.1g relative)\n",
			what, err, mx, tol);
		return 1;
	}
	return 0;
}

/* Against finite differences: max |analytic - numeric| over max |numeric| under tol. */
static int compare(const char *what, const float *g, const double *num, int64_t n, double tol)
{
	return compare_within(what, g, num, n, tol, 1e-6);
}

TEST(rmsnorm_gradients)
{
	enum { N = 3, D = 16 };
	float x[N * D], w[D], y[N * D], rs[N], r[N * D], dx[N * D] = { 0 }, dw[D] = { 0 };
	double nx[N * D], nw[D];
	const float h = 1e-2f;

	test_rng_state = 1;
	fill(x, N * D, 1);
	fill(w, D, 1);
	fill(r, N * D, 1);
	train_rmsnorm_fwd(x, w, N, D, 1e-5f, y, rs);
	train_rmsnorm_bwd(x, w, rs, r, N, D, dx, dw);
	for (int i = 0; i < N * D; i++) {
		float s = x[i];
		double lp, lm;

		x[i] = s + h;
		train_rmsnorm_fwd(x, w, N, D, 1e-5f, y, rs);
		lp = weighted(y, r, N * D);
		x[i] = s - h;
		train_rmsnorm_fwd(x, w, N, D, 1e-5f, y, rs);
		lm = weighted(y, r, N * D);
		x[i] = s;
		nx[i] = (lp - lm) / (2 * h);
	}
	for (int i = 0; i < D; i++) {
		float s = w[i];
		double lp, lm;

		w[i] = s + h;
		train_rmsnorm_fwd(x, w, N, D, 1e-5f, y, rs);
		lp = weighted(y, r, N * D);
		w[i] = s - h;
		train_rmsnorm_fwd(x, w, N, D, 1e-5f, y, rs);
		lm = weighted(y, r, N * D);
		w[i] = s;
		nw[i] = (lp - lm) / (2 * h);
	}
	ASSERT_TRUE(compare("dx", dx, nx, N * D, 1e-3) == 0);
	ASSERT_TRUE(compare("dw", dw, nw, D, 1e-3) == 0);
	return 0;
}

static int rope_case(bool neox)
{
	enum { N = 5, H = 3, HD = 8, RD = 6 };
	int32_t pos[N] = { 0, 1, 2, 7, 30 };
	float cs[N * RD / 2], sn[N * RD / 2], x[N * H * HD], y[N * H * HD], r[N * H * HD];
	float g[N * H * HD];
	double num[N * H * HD];
	const float h = 1e-2f;

	test_rng_state = 2;
	fill(x, N * H * HD, 1);
	fill(r, N * H * HD, 1);
	train_rope_tables(pos, N, RD, 10000.0f, 1.0f, NULL, cs, sn);
	memcpy(g, r, sizeof(g));
	train_rope(g, N, H, HD, RD, neox, cs, sn, true); /* backward: inverse rotation of dy */
	for (int i = 0; i < N * H * HD; i++) {
		float s = x[i];
		double lp, lm;

		x[i] = s + h;
		memcpy(y, x, sizeof(y));
		train_rope(y, N, H, HD, RD, neox, cs, sn, false);
		lp = weighted(y, r, N * H * HD);
		x[i] = s - h;
		memcpy(y, x, sizeof(y));
		train_rope(y, N, H, HD, RD, neox, cs, sn, false);
		lm = weighted(y, r, N * H * HD);
		x[i] = s;
		num[i] = (lp - lm) / (2 * h);
	}
	return compare(neox ? "rope neox" : "rope norm", g, num, N * H * HD, 1e-3);
}

TEST(rope_gradients_both_styles)
{
	ASSERT_TRUE(rope_case(false) == 0);
	ASSERT_TRUE(rope_case(true) == 0);
	return 0;
}

TEST(swiglu_gradients)
{
	enum { N = 40 };
	float g[N], u[N], hh[N], r[N], dg[N] = { 0 }, du[N] = { 0 };
	double ng[N], nu[N];
	const float h = 1e-2f;

	test_rng_state = 3;
	fill(g, N, 4);
	fill(u, N, 2);
	fill(r, N, 1);
	train_swiglu_bwd(g, u, r, N, dg, du);
	for (int i = 0; i < N; i++) {
		float s = g[i];
		double lp, lm;

		g[i] = s + h;
		train_swiglu_fwd(g, u, N, hh);
		lp = weighted(hh, r, N);
		g[i] = s - h;
		train_swiglu_fwd(g, u, N, hh);
		lm = weighted(hh, r, N);
		g[i] = s;
		ng[i] = (lp - lm) / (2 * h);
		s = u[i];
		u[i] = s + h;
		train_swiglu_fwd(g, u, N, hh);
		lp = weighted(hh, r, N);
		u[i] = s - h;
		train_swiglu_fwd(g, u, N, hh);
		lm = weighted(hh, r, N);
		u[i] = s;
		nu[i] = (lp - lm) / (2 * h);
	}
	ASSERT_TRUE(compare("dgate", dg, ng, N, 1e-3) == 0);
	ASSERT_TRUE(compare("dup", du, nu, N, 1e-3) == 0);
	return 0;
}

TEST(attention_gradients_gqa_packed)
{
	/* 2 rows of 6 tokens, 4 query heads on 2 KV heads; row 0 packs two samples and a pad. */
	enum { S = 2, T = 6, HQ = 4, HKV = 2, D = 4, NQ = S * T * HQ * D, NK = S * T * HKV * D };
	int32_t seg[S * T] = { 0, 0, 0, 1, 1, -1, 2, 2, 2, 2, 2, 2 };
	struct train_attn_shape sh = { .n_seq = S, .len = T, .n_head = HQ, .n_head_kv = HKV,
				       .head_dim = D, .seg = seg };
	float q[NQ], k[NK], v[NK], out[NQ], r[NQ], probs[S * HQ * T * T];
	float dq[NQ] = { 0 }, dk[NK] = { 0 }, dv[NK] = { 0 };
	double nq[NQ], nk[NK], nv[NK];
	float *xs[3] = { q, k, v };
	double *ns[3] = { nq, nk, nv };
	int64_t cnt[3] = { NQ, NK, NK };
	const float h = 1e-2f;

	test_rng_state = 4;
	fill(q, NQ, 1.5);
	fill(k, NK, 1.5);
	fill(v, NK, 1);
	fill(r, NQ, 1);
	train_attn_fwd(NULL, &sh, q, k, v, probs, out);
	/* the boundary: token 3 (a new sample) sees only itself and token 4 */
	ASSERT_TRUE(probs[3 * T + 0] == 0 && probs[3 * T + 2] == 0 && probs[3 * T + 3] == 1.0f);
	train_attn_bwd(NULL, &sh, q, k, v, probs, r, dq, dk, dv);
	for (int a = 0; a < 3; a++)
		for (int64_t i = 0; i < cnt[a]; i++) {
			float s = xs[a][i];
			double lp, lm;

			xs[a][i] = s + h;
			train_attn_fwd(NULL, &sh, q, k, v, probs, out);
			lp = weighted(out, r, NQ);
			xs[a][i] = s - h;
			train_attn_fwd(NULL, &sh, q, k, v, probs, out);
			lm = weighted(out, r, NQ);
			xs[a][i] = s;
			ns[a][i] = (lp - lm) / (2 * h);
		}
	ASSERT_TRUE(compare("dq", dq, nq, NQ, 2e-3) == 0);
	ASSERT_TRUE(compare("dk", dk, nk, NK, 2e-3) == 0);
	ASSERT_TRUE(compare("dv", dv, nv, NK, 2e-3) == 0);
	return 0;
}

/* Attention in double, directly from the definition: the reference for the blocked products
 * at a size where the causal blocks (64 rows) matter and packed samples cross them. */
static void attn_ref(const struct train_attn_shape *s, const float *q, const float *k,
		     const float *v, const float *dout, double *out, double *dq, double *dk,
		     double *dv)
{
	int64_t L = s->len, D = s->head_dim, qs = s->n_head * D, ks = s->n_head_kv * D;
	uint32_t group = s->n_head / s->n_head_kv;
	double *p = malloc((size_t) L * sizeof(double)), *dp = malloc((size_t) L * sizeof(double));
	double scale = 1.0 / sqrt((double) D);

	for (int64_t sq = 0; sq < s->n_seq; sq++)
		for (uint32_t h = 0; h < s->n_head; h++)
			for (int64_t i = 0; i < L; i++) {
				int64_t b = sq * L, hk = h / group;
				const int32_t *seg = s->seg + b;
				const float *qi = q + (b + i) * qs + h * D, *di = dout + (b + i) * qs + h * D;
				double mx = -INFINITY, sum = 0, pdp = 0;

				for (int64_t t = 0; t <= i; t++) {
					bool vis = t == i || (seg[i] >= 0 && seg[t] == seg[i]);

					p[t] = -INFINITY;
					if (!vis)
						continue;
					p[t] = 0;
					for (int64_t d = 0; d < D; d++)
						p[t] += (double) qi[d] * k[(b + t) * ks + hk * D + d];
					p[t] *= scale;
					mx = fmax(mx, p[t]);
				}
				for (int64_t t = 0; t <= i; t++)
					sum += p[t] = exp(p[t] - mx);
				for (int64_t t = 0; t <= i; t++) {
					p[t] /= sum;
					dp[t] = 0;
					for (int64_t d = 0; d < D; d++) {
						out[(b + i) * qs + h * D + d] += p[t] * v[(b + t) * ks + hk * D + d];
						dp[t] += (double) di[d] * v[(b + t) * ks + hk * D + d];
					}
					pdp += p[t] * dp[t];
				}
				for (int64_t t = 0; t <= i; t++) {
					double ds = p[t] * (dp[t] - pdp) * scale;

					for (int64_t d = 0; d < D; d++) {
						dq[(b + i) * qs + h * D + d] += ds * k[(b + t) * ks + hk * D + d];
						dk[(b + t) * ks + hk * D + d] += ds * qi[d];
						dv[(b + t) * ks + hk * D + d] += p[t] * di[d];
					}
				}
			}
	free(p);
	free(dp);
}

TEST(attention_blocked_against_double_reference)
{
	/* 2 rows of 150 tokens (blocks of 64: two full, one partial), 6 query heads on 2 KV heads
	 * of 40 values; row 0 packs samples of 70 and 60 tokens and 20 pads, row 1 is one sample */
	enum { S = 2, T = 150, HQ = 6, HKV = 2, D = 40 };
	int64_t nq = S * T * HQ * D, nk = S * T * HKV * D;
	_cleanup_free_ float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4),
			     *r = malloc(nq * 4), *out = malloc(nq * 4), *dq = calloc(nq, 4),
			     *dk = calloc(nk, 4), *dv = calloc(nk, 4),
			     *probs = malloc((size_t) S * HQ * T * T * 4);
	_cleanup_free_ double *ro = calloc(nq, 8), *rq = calloc(nq, 8), *rk = calloc(nk, 8),
			      *rv = calloc(nk, 8);
	int32_t seg[S * T];
	struct train_attn_shape sh = { .n_seq = S, .len = T, .n_head = HQ, .n_head_kv = HKV,
				       .head_dim = D, .seg = seg };
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;

	ASSERT_TRUE(q && k && v && r && out && dq && dk && dv && probs && ro && rq && rk && rv);
	for (int64_t t = 0; t < S * T; t++)
		seg[t] = t < 70 ? 0 : t < 130 ? 1 : t < T ? -1 : 2;
	test_rng_state = 11;
	fill(q, nq, 2);
	fill(k, nk, 2);
	fill(v, nk, 1);
	fill(r, nq, 1);
	attn_ref(&sh, q, k, v, r, ro, rq, rk, rv);
	ASSERT_OK(threadpool_new(2, &pool));
	for (int pass = 0; pass < 2; pass++) { /* one thread, then the pool */
		struct threadpool *p = pass ? pool : NULL;

		memset(dq, 0, nq * 4);
		memset(dk, 0, nk * 4);
		memset(dv, 0, nk * 4);
		ASSERT_OK(train_attn_fwd(p, &sh, q, k, v, probs, out));
		ASSERT_OK(train_attn_bwd(p, &sh, q, k, v, probs, r, dq, dk, dv));
		ASSERT_TRUE(compare_within("out", out, ro, nq, 1e-5, 0) == 0);
		ASSERT_TRUE(compare_within("dq", dq, rq, nq, 1e-5, 0) == 0);
		ASSERT_TRUE(compare_within("dk", dk, rk, nk, 1e-5, 0) == 0);
		ASSERT_TRUE(compare_within("dv", dv, rv, nk, 1e-5, 0) == 0);
	}
	/* a pad sees itself alone; nothing past a row's own position */
	ASSERT_TRUE(probs[140 * T + 140] == 1.0f && probs[140 * T + 139] == 0.0f);
	ASSERT_TRUE(probs[10 * T + 11] == 0.0f && probs[80 * T + 69] == 0.0f);
	return 0;
}

TEST(cross_entropy_gradients)
{
	enum { N = 3, V = 11 };
	float z[N * V], dz[N * V];
	int32_t tgt[N] = { 4, -1, 10 };
	double num[N * V];
	const float h = 1e-2f;

	test_rng_state = 5;
	fill(z, N * V, 3);
	train_xent(z, tgt, N, V, 0.5f, dz);
	for (int i = 0; i < N * V; i++) {
		float s = z[i];
		double lp, lm;

		z[i] = s + h;
		lp = train_xent(z, tgt, N, V, 1, NULL);
		z[i] = s - h;
		lm = train_xent(z, tgt, N, V, 1, NULL);
		z[i] = s;
		num[i] = 0.5 * (lp - lm) / (2 * h);
	}
	ASSERT_TRUE(compare("dlogits", dz, num, N * V, 1e-3) == 0);
	return 0;
}

/* Products with a stored weight of each type: forward against a plain F32 product on the
 * dequantized rows; backward dx against finite differences of the forward (the forward is
 * linear in x, so differences are exact up to rounding); dW against its definition. */
static int linear_case(uint32_t type, struct threadpool *pool)
{
	enum { NI = 256, NO = 40, N = 5 };
	int64_t rb = quant_row_bytes(type, NI);
	uint8_t *data = malloc((size_t) rb * NO);
	float *wf = malloc(sizeof(float) * NI * NO), x[N * NI], y[N * NO], r[N * NO];
	float dx[N * NI] = { 0 }, *dw = calloc(NI * NO, sizeof(float));
	double *ref = malloc(sizeof(double) * NI * NO);
	struct weight w = { .data = data, .type = type, .n_in = NI, .n_out = NO,
			    .row_bytes = (size_t) rb };
	int fail = 0;

	test_rng_state = 6 + type;
	fill(wf, NI * NO, 0.5);
	for (int o = 0; o < NO; o++) {
		quant_quantize_row(type, wf + o * NI, data + (size_t) o * rb, NI);
		quant_dequantize_row(type, data + (size_t) o * rb, wf + o * NI, NI);
	}
	fill(x, N * NI, 1);
	fill(r, N * NO, 1);
	train_linear_fwd(pool, &w, x, N, y);
	for (int t = 0; t < N; t++)
		for (int o = 0; o < NO; o++) {
			double s = 0;

			for (int i = 0; i < NI; i++)
				s += (double) x[t * NI + i] * wf[o * NI + i];
			ref[t * NO + o] = s;
		}
	fail |= compare("forward", y, ref, N * NO, 1e-5);
	train_linear_bwd_x(pool, &w, r, N, dx);
	for (int t = 0; t < N; t++)
		for (int i = 0; i < NI; i++) {
			double s = 0;

			for (int o = 0; o < NO; o++)
				s += (double) r[t * NO + o] * wf[o * NI + i];
			ref[t * NI + i] = s;
		}
	fail |= compare("dx", dx, ref, N * NI, 1e-5);
	train_linear_bwd_w(pool, NO, NI, r, x, N, dw);
	for (int o = 0; o < NO; o++)
		for (int i = 0; i < NI; i++) {
			double s = 0;

			for (int t = 0; t < N; t++)
				s += (double) r[t * NO + o] * x[t * NI + i];
			ref[o * NI + i] = s;
		}
	fail |= compare("dW", dw, ref, NI * NO, 1e-5);
	if (fail)
		fprintf(stderr, "  (type %s)\n", quant_type_name(type));
	free(data);
	free(wf);
	free(dw);
	free(ref);
	return fail;
}

TEST(linear_every_type_both_directions)
{
	static const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16,
					  GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
					  GGML_TYPE_Q6_K };
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;

	ASSERT_OK(threadpool_new(2, &pool));
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		ASSERT_TRUE(linear_case(types[i], NULL) == 0);
		ASSERT_TRUE(linear_case(types[i], pool) == 0);
	}
	return 0;
}

/* ---- the whole model ---- */

enum { BS = 2, BL = 12 };
static int32_t b_tokens[BS * BL], b_targets[BS * BL], b_pos[BS * BL], b_seg[BS * BL];

/* Row 0: two packed samples (7 + 4 tokens) and one pad; row 1: one sample of 12. Loss on the
 * "completion" half of each sample only. */
static struct train_batch make_batch(uint32_t n_vocab)
{
	static const int lens[] = { 7, 4, -1, 12 };
	int64_t t = 0;
	int seg = 0;

	test_rng_state = 77;
	for (int s = 0; s < 4; s++) {
		int len = lens[s] < 0 ? 1 : lens[s];

		for (int i = 0; i < len; i++, t++) {
			b_tokens[t] = 1 + (int32_t) (test_uniform() * (n_vocab - 1));
			b_pos[t] = lens[s] < 0 ? 0 : i;
			b_seg[t] = lens[s] < 0 ? -1 : seg;
			b_targets[t] = -1;
		}
		for (int i = len / 2; i + 1 < len && lens[s] > 0; i++)
			b_targets[t - len + i] = b_tokens[t - len + i + 1];
		seg++;
	}
	return (struct train_batch){ .n_seq = BS, .len = BL, .tokens = b_tokens,
				     .targets = b_targets, .pos = b_pos, .seg = b_seg };
}

static int net_case(const char *file, enum train_mode mode, bool recompute)
{
	char path[512];
	struct errmsg e = { 0 };
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(train_net_freep) struct train_net *net = NULL;
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	struct train_net_opts o = { .mode = mode, .rank = 3, .alpha = 6, .targets = 0x7f,
				    .seed = 9, .init_b_std = 0.05f, .recompute = recompute };
	struct train_batch b;
	double loss, lp, lm;
	int n_lab = 0, fail = 0;

	snprintf(path, sizeof(path), "%s/models/tiny/%s", MOLLY_SHARED_DIR, file);
	if (access(path, R_OK) < 0) {
		printf("  %s missing\n", path);
		return TEST_SKIP;
	}
	if (model_load(path, &m, &e) < 0 || threadpool_new(2, &pool) < 0 ||
	    train_net_new(m, &o, &net, &e) < 0) {
		fprintf(stderr, "  %s: %s\n", file, e.text);
		return 1;
	}
	b = make_batch(m->hp.n_vocab);
	for (int i = 0; i < BS * BL; i++)
		n_lab += b.targets[i] >= 0;
	train_net_zero_grad(net);
	if (train_net_step(net, pool, &b, 1.0f / n_lab, true, &loss) < 0)
		return 1;
	for (size_t p = 0; p < train_net_n_params(net); p++) {
		struct train_param *tp = train_net_param(net, p);
		int64_t count = tp->rows * tp->cols;
		double gmax = 0, err = 0;
		enum { K = 2 }; /* the largest gradient and a random entry, per tensor */
		float g[K];
		double num[K];
		float h = mode == TRAIN_MODE_FULL ? 2e-2f : 2e-2f;

		for (int64_t i = 0; i < count; i++)
			gmax = fmax(gmax, fabs(tp->g[i]));
		for (int k = 0; k < K; k++) {
			/* the largest-gradient entry first, then random ones */
			int64_t i = 0;
			float s;

			if (k == 0) {
				for (int64_t j = 0; j < count; j++)
					if (fabs(tp->g[j]) == gmax)
						i = j;
			} else {
				i = (int64_t) (test_uniform() * count);
			}
			s = tp->w[i];
			tp->w[i] = s + h;
			train_net_step(net, pool, &b, 1, false, &lp);
			tp->w[i] = s - h;
			train_net_step(net, pool, &b, 1, false, &lm);
			tp->w[i] = s;
			g[k] = tp->g[i];
			num[k] = (lp - lm) / (2 * h) / n_lab;
			err = fmax(err, fabs(g[k] - num[k]));
		}
		/* float loss sums of ~40 tokens: rounding ~1e-5 / (2h) ≈ 3e-4 absolute at most */
		if (err > 0.03 * gmax + 5e-4) {
			fprintf(stderr, "  %s %s: max|Δ| %.3g, max|g| %.3g (g %.4g vs %.4g)\n", file,
				tp->name, err, gmax, g[0], num[0]);
			fail = 1;
		}
	}
	return fail;
}

TEST(model_lora_gradients_llama_qwen2_q8_0)
{
	int r;

	if ((r = net_case("tiny-llama-f32.gguf", TRAIN_MODE_LORA, false)) != 0)
		return r;
	if ((r = net_case("tiny-qwen2-f32.gguf", TRAIN_MODE_LORA, true)) != 0)
		return r;
	return net_case("tiny-llama-q8_0.gguf", TRAIN_MODE_LORA, false);
}

TEST(model_full_gradients_llama_qwen2)
{
	int r;

	if ((r = net_case("tiny-llama-f32.gguf", TRAIN_MODE_FULL, true)) != 0)
		return r;
	return net_case("tiny-qwen2-f32.gguf", TRAIN_MODE_FULL, false);
}

/* ---- data: labels and packing ---- */

#include "../daemon/engine/vocab.h"
#include "../daemon/train/data.h"

/* The text of the labeled tokens of sample i. */
static void labeled_text(const struct model *m, const struct train_sample *s, char *buf,
			 size_t cap)
{
	size_t n = 0;

	buf[0] = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		int64_t k;

		if (!s->label[i])
			continue;
		k = vocab_token_to_piece(m->vocab, s->ids[i], true, buf + n, cap - n - 1);
		if (k > 0 && (size_t) k < cap - n - 1)
			n += (size_t) k;
		buf[n] = 0;
	}
}

TEST(data_labels_and_packing)
{
	char path[512], dir[] = "/tmp/test-train-XXXXXX", text[1024];
	struct errmsg e = { 0 };
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(train_data_freep) struct train_data *d = NULL;
	struct train_epoch ep = { 0 };
	struct train_batch_buf bb = { 0 };
	FILE *f;
	uint64_t lab;

	snprintf(path, sizeof(path), "%s/models/tiny/tiny-llama-f32.gguf", MOLLY_SHARED_DIR);
	if (access(path, R_OK) < 0)
		return TEST_SKIP;
	ASSERT_OK(model_load(path, &m, &e));
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/d.jsonl", dir);
	f = fopen(path, "w");
	ASSERT_TRUE(f != NULL);
	fputs("{\"prompt\": \"Once upon a time\", \"completion\": \" there was a dog.\"}\n"
	      "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi cat\"}, "
	      "{\"role\": \"assistant\", \"content\": \"Hello dog\"}, "
	      "{\"role\": \"user\", \"content\": \"More\"}, "
	      "{\"role\": \"assistant\", \"content\": \"Sun\"}]}\n"
	      "{\"text\": \"The end.\"}\n",
	      f);
	fclose(f);
	ASSERT_OK(train_data_load(path, m, 256, false, &d, &e));
	unlink(path);
	rmdir(dir);
	ASSERT_EQ(d->n_samples, 3);
	/* prompt/completion: the completion and EOS only */
	labeled_text(m, &d->samples[0], text, sizeof(text));
	ASSERT_TRUE(strstr(text, "there was a dog.") != NULL);
	ASSERT_TRUE(strstr(text, "Once") == NULL);
	ASSERT_TRUE(d->samples[0].label[d->samples[0].n - 1] == 1 &&
		    d->samples[0].ids[d->samples[0].n - 1] == vocab_eos(m->vocab));
	/* messages (chatml: the tiny model has no template): both assistant turns, no user text */
	labeled_text(m, &d->samples[1], text, sizeof(text));
	ASSERT_TRUE(strstr(text, "Hello dog") != NULL && strstr(text, "Sun") != NULL);
	ASSERT_TRUE(strstr(text, "Hi cat") == NULL && strstr(text, "More") == NULL &&
		    strstr(text, "user") == NULL);
	/* text: everything but BOS */
	ASSERT_TRUE(d->samples[2].label[0] == 0 && d->samples[2].label[1] == 1);
	/* packing: all three in one row of 256, positions restart, segments differ */
	ASSERT_OK(train_epoch_plan(d, 1, 0, 256, true, &ep));
	ASSERT_EQ(ep.n_rows, 1);
	ASSERT_OK(train_batch_buf_init(&bb, 1, 256));
	lab = train_batch_fill(&bb, d, &ep, 0, 1, 256);
	ASSERT_EQ(bb.b.len, (int64_t) d->n_tokens);
	ASSERT_EQ(lab, d->n_labeled);
	{
		uint32_t first = d->samples[ep.order[0]].n;

		ASSERT_TRUE(bb.b.pos[first] == 0 && bb.b.seg[first] == bb.b.seg[0] + 1);
		ASSERT_TRUE(bb.b.pos[first - 1] == (int32_t) first - 1);
		/* the last token of a sample predicts nothing (no target across samples) */
		ASSERT_TRUE(bb.b.targets[first - 1] == -1);
	}
	train_batch_buf_done(&bb);
	train_epoch_done(&ep);
	/* without packing: one sample per row */
	ASSERT_OK(train_epoch_plan(d, 1, 0, 256, false, &ep));
	ASSERT_EQ(ep.n_rows, 3);
	train_epoch_done(&ep);
	return 0;
}

TEST(data_long_text_cut_or_split)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(train_data_freep) struct train_data *cut = NULL, *win = NULL, *whole = NULL;
	struct errmsg e = { 0 };
	char path[512], dir[] = "/tmp/test-train-XXXXXX";
	const struct train_sample *w;
	uint32_t at = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/models/tiny/tiny-llama-f32.gguf", MOLLY_SHARED_DIR);
	if (access(path, R_OK) < 0)
		return TEST_SKIP;
	ASSERT_OK(model_load(path, &m, &e));
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/d.jsonl", dir);
	f = fopen(path, "w");
	ASSERT_TRUE(f != NULL);
	fputs("{\"text\": \"Once upon a time there was a little dog who liked the sun. "
	      "Every day the dog ran to the park and played with a red ball until night came.\"}\n"
	      "{\"text\": \"Hi.\"}\n",
	      f);
	fclose(f);
	ASSERT_OK(train_data_load(path, m, 1024, false, &whole, &e));
	ASSERT_OK(train_data_load(path, m, 16, false, &cut, &e));
	ASSERT_OK(train_data_load(path, m, 16, true, &win, &e));
	unlink(path);
	rmdir(dir);
	ASSERT_TRUE(whole->samples[0].n > 40); /* long enough for three windows */
	/* cut: the first 16 tokens */
	ASSERT_EQ(cut->n_samples, 2);
	ASSERT_EQ(cut->n_truncated, 1);
	ASSERT_EQ(cut->samples[0].n, 16);
	/* split: windows of at most 16 that overlap by one, every target once, the short text
	 * as it was */
	ASSERT_EQ(win->n_split, 1);
	ASSERT_EQ(win->n_truncated, 0);
	ASSERT_EQ(win->n_samples, (whole->samples[0].n - 1 + 14) / 15 + 1);
	ASSERT_EQ(win->n_labeled, whole->n_labeled);
	for (size_t i = 0; i + 1 < win->n_samples; i++) {
		w = &win->samples[i];
		ASSERT_TRUE(w->n >= 2 && w->n <= 16);
		ASSERT_TRUE(memcmp(w->ids, whole->samples[0].ids + at, w->n * sizeof(int32_t)) == 0);
		ASSERT_TRUE(memcmp(w->label, whole->samples[0].label + at, w->n) == 0);
		at += w->n - 1;
	}
	ASSERT_EQ(at + 1, whole->samples[0].n);
	w = &win->samples[win->n_samples - 1];
	ASSERT_EQ(w->n, whole->samples[1].n);
	return 0;
}
