/* SPDX-License-Identifier: MIT */
/*
 * ops.h: the trainer's operations, each a forward that saves what its backward needs and a
 * backward that ADDS its input gradients into caller buffers (so a value used twice, like a
 * residual, simply receives both contributions).
 *
 * All activations are F32, row-major, one row per token: x[t * dim + i]. Frozen weights are
 * a struct weight in any type the engine loads (model.h); their products are computed on
 * F32 tiles the engine's dequantization makes (quant_dequantize_row) with the engine's F32
 * tile kernel (quant_gemm), in both directions: y = x·Wᵀ and dx += dy·W. Trainable matrices
 * are F32 and use the same kernels.
 *
 * Determinism: every output element is one fixed chain of operations whatever the thread
 * count (threads split output elements, never a sum), so the same inputs give the same bits
 * with 1 or N threads.
 *
 * Errors: the products and the attention backward take per-thread scratch (a few MiB); when
 * it cannot be had they return -ENOMEM and their outputs are undefined. The rest cannot fail.
 *
 * Threading: pool may be NULL (runs on the caller). Not reentrant on one pool.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../engine/matmul.h"

struct threadpool;

/* ---- products (ops-linear.c) ---- */

/* C[m][n] (row stride ldc) = (accumulate ? C : 0) + sum_k A[m][k] B[n][k]: A is M×K (row
 * stride lda floats), B is N×K (ldb). */
int train_mm_nt(struct threadpool *pool, int64_t M, int64_t N, int64_t K, const float *A,
		 int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate);
/* dst[c][r] = src[r][c] for an R×C matrix src (row stride lds) into dst (row stride ldd). */
void train_transpose(int64_t R, int64_t C, const float *src, int64_t lds, float *dst,
		     int64_t ldd);

/* y[t][o] = x[t]·W[o] for t < n (W: w->n_out × w->n_in, any engine type). */
int train_linear_fwd(struct threadpool *pool, const struct weight *w, const float *x, int64_t n,
		      float *y);
/* dx[t][i] += sum_o dy[t][o] W[o][i]. */
int train_linear_bwd_x(struct threadpool *pool, const struct weight *w, const float *dy,
			int64_t n, float *dx);
/* dW[o][i] += sum_t dy[t][o] x[t][i] (dW: n_out × n_in F32). */
int train_linear_bwd_w(struct threadpool *pool, int64_t n_out, int64_t n_in, const float *dy,
			const float *x, int64_t n, float *dw);

/* ---- elementwise and per-row (ops-norm.c) ---- */

/* y = x / sqrt(mean(x²) + eps) * w per row of dim values; rs[t] = that 1/sqrt(...). */
void train_rmsnorm_fwd(const float *x, const float *w, int64_t n, int64_t dim, float eps,
		       float *y, float *rs);
/* dx += ∂/∂x, dw += ∂/∂w (dw may be NULL: frozen). */
void train_rmsnorm_bwd(const float *x, const float *w, const float *rs, const float *dy,
		       int64_t n, int64_t dim, float *dx, float *dw);

/* The rotation tables of positions pos[0..n): cos/sin[t][rope_dim/2], angles computed as the
 * engine's forward computes them (theta · base^(-2i/rope_dim) by repeated multiplication,
 * times freq_scale, divided by the frequency factors when given). */
void train_rope_tables(const int32_t *pos, int64_t n, uint32_t rope_dim, float base,
		       float freq_scale, const float *freq_factors, float *cos_t, float *sin_t);
/* Rotates, in place, the first rope_dim values of each of n_heads heads (head_dim apart) of
 * each row (row stride n_heads·head_dim): pairs (2i, 2i+1), or (i, i + rope_dim/2) when
 * neox. inverse rotates by -angle: that is the backward (the rotation is orthogonal). */
void train_rope(float *x, int64_t n, uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim,
		bool neox, const float *cos_t, const float *sin_t, bool inverse);

/* h = silu(g) · u */
void train_swiglu_fwd(const float *g, const float *u, int64_t count, float *h);
/* dg += dh · u · silu'(g), du += dh · silu(g) */
void train_swiglu_bwd(const float *g, const float *u, const float *dh, int64_t count, float *dg,
		      float *du);

/* ---- attention (ops-attn.c) ---- */

/* The batch layout attention needs: n_seq rows of len tokens each; seg[t] (t < n_seq·len)
 * is the packed sample a token belongs to: token i attends to j <= i of the same row only
 * when seg[j] == seg[i] (a negative seg is padding: it attends to itself alone). */
struct train_attn_shape {
	int64_t n_seq, len;
	uint32_t n_head, n_head_kv, head_dim;
	const int32_t *seg;
};
/* q: [t][n_head·head_dim], k, v: [t][n_head_kv·head_dim]; out like q; probs (saved) holds
 * n_seq·n_head·len·len floats: row i of head h of sequence s at ((s·n_head + h)·len + i)·len. */
int train_attn_fwd(struct threadpool *pool, const struct train_attn_shape *s, const float *q,
		   const float *k, const float *v, float *probs, float *out);
/* dq, dk, dv += the gradients (dk, dv summed over the query heads that share a KV head). */
int train_attn_bwd(struct threadpool *pool, const struct train_attn_shape *s, const float *q,
		   const float *k, const float *v, const float *probs, const float *dout,
		   float *dq, float *dk, float *dv);

/* ---- loss (ops-loss.c) ---- */

/* For each of n rows of logits (n_vocab values) with target[t] >= 0: loss += -log softmax
 * at target (summed in double, returned), and dlogits[t] = scale · (softmax - onehot); rows
 * with target < 0 get dlogits 0. dlogits may be NULL (loss only) and may alias logits. */
double train_xent(const float *logits, const int32_t *target, int64_t n, int64_t n_vocab,
		  float scale, float *dlogits);
