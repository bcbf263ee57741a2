/* SPDX-License-Identifier: MIT */
/*
 * ops-linear.c: the trainer's matrix products (see ops.h), all on the engine's packed F32
 * kernel, quant_gemm_packed(GGML_TYPE_F32): the right-hand matrix is packed 16 rows to a
 * group, value-major (quant.h), and every output is the chain acc = fmaf(w_k, x_k, acc) over
 * k in order, whatever the tile, so splitting the output across threads never changes a bit.
 *
 * Packing is done per call, CHUNK columns of the output at a time, from any layout: a
 * trainable F32 matrix read along rows or columns (W for y = x·Wᵀ, Wᵀ for dx = dy·W, the
 * input for dW), or a frozen weight in a quantized type, dequantized by the engine's
 * quant_dequantize_row() row by row (forward) or block-aligned column range by range
 * (backward): no full F32 copy of a quantized base is ever made (QLoRA). Packing costs
 * O(N·K) against the product's O(M·N·K).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/quant.h"
#include "../engine/threadpool.h"
#include "ops.h"

#define G16 QUANT_PACKED_F32_ROWS

/* Where the right-hand matrix's element (n, k) comes from. */
struct src {
	const float *f;      /* F32: f[n * sn + k * sk] */
	int64_t sn, sk;
	const struct weight *w; /* or a stored weight: (n, k) = W[n][k] (!transposed) or W[k][n] */
	bool transposed;
};

struct gemm_job {
	int64_t M, N, K, lda, ldc, chunk;
	const float *A;
	struct src B;
	float *C;
	bool accumulate;
	atomic_int err; /* -ENOMEM when a thread could not get its scratch */
};

static void run(struct threadpool *pool, threadpool_fn fn, void *arg)
{
	if (pool)
		threadpool_run(pool, fn, arg);
	else
		fn(arg, 0, 1);
}

void train_transpose(int64_t R, int64_t C, const float *src, int64_t lds, float *dst,
		     int64_t ldd)
{
	/* 16×16 tiles through a local copy: each source row's 16 values are read in one go and
	 * each destination row's 16 written in one go. Written straight through, a tile touches
	 * 16 source and 16 destination lines at once, and with strides that are multiples of
	 * 4 KiB (a 2048-token batch, a 4096 vocabulary) all of them fall into one L1 set. */
	float tile[16][16];

	for (int64_t r0 = 0; r0 < R; r0 += 16)
		for (int64_t c0 = 0; c0 < C; c0 += 16) {
			int64_t nr = R - r0 < 16 ? R - r0 : 16, nc = C - c0 < 16 ? C - c0 : 16;

			for (int64_t r = 0; r < nr; r++)
				memcpy(tile[r], src + (r0 + r) * lds + c0, (size_t) nc * sizeof(float));
			for (int64_t c = 0; c < nc; c++) {
				float *d = dst + (c0 + c) * ldd + r0;

				for (int64_t r = 0; r < nr; r++)
					d[r] = tile[r][c];
			}
		}
}

/* Packs rows [n0, n0 + nr) of B (K values each) into dst: groups of 16, value-major, pad
 * rows zero. tmp holds max(16·K, chunk·K) floats for dequantized weights. */
static void pack(const struct gemm_job *j, int64_t n0, int64_t nr, float *dst, float *tmp)
{
	const struct src *s = &j->B;
	int64_t K = j->K, groups = (nr + G16 - 1) / G16;

	if (nr % G16) /* the last group's pad rows */
		memset(dst + (groups - 1) * G16 * K, 0, (size_t) (G16 * K) * sizeof(float));
	if (s->f) {
		for (int64_t r = 0; r < nr; r++) {
			const float *p = s->f + (n0 + r) * s->sn;
			float *d = dst + (r / G16) * G16 * K + r % G16;

			if (s->sk == 1)
				for (int64_t k = 0; k < K; k++)
					d[k * G16] = p[k];
			else
				for (int64_t k = 0; k < K; k++)
					d[k * G16] = p[k * s->sk];
		}
		return;
	}
	if (!s->transposed) { /* rows n of W, dequantized 16 at a time */
		for (int64_t r0 = 0; r0 < nr; r0 += G16) {
			int64_t rows = nr - r0 < G16 ? nr - r0 : G16;
			float *d = dst + (r0 / G16) * G16 * K;

			for (int64_t r = 0; r < rows; r++)
				quant_dequantize_row(s->w->type,
						     (const uint8_t *) s->w->data +
							     (size_t) (n0 + r0 + r) * s->w->row_bytes,
						     tmp + r * K, K);
			for (int64_t k = 0; k < K; k++)
				for (int64_t r = 0; r < rows; r++)
					d[k * G16 + r] = tmp[r * K + k];
		}
		return;
	}
	/* columns [n0, n0 + nr) of W (block-aligned: n0 is a multiple of the block size): row k
	 * of W contributes value k of each of them */
	{
		int64_t bv = (int64_t) quant_block_values(s->w->type);
		size_t bb = quant_block_bytes(s->w->type);
		int64_t span = (nr + bv - 1) / bv * bv;

		for (int64_t k = 0; k < K; k++) {
			const uint8_t *row = (const uint8_t *) s->w->data + (size_t) k * s->w->row_bytes;

			quant_dequantize_row(s->w->type, row + (size_t) (n0 / bv) * bb, tmp, span);
			for (int64_t r = 0; r < nr; r++)
				dst[(r / G16) * G16 * K + k * G16 + r % G16] = tmp[r];
		}
	}
}

static void gemm_part(void *arg, int ith, int nth)
{
	struct gemm_job *j = arg;
	int64_t K = j->K, ch = j->chunk, tmp_n = (ch > G16 ? ch : G16) * K;
	long n0, n1;
	float *packed, *tmp, *out = NULL;

	threadpool_split(j->N, ch, ith, nth, &n0, &n1);
	if (n0 >= n1)
		return;
	packed = malloc((size_t) ((ch + G16 - 1) / G16 * G16 * K) * sizeof(float));
	tmp = j->B.f ? NULL : malloc((size_t) tmp_n * sizeof(float));
	if (j->accumulate)
		out = malloc((size_t) (j->M * ch) * sizeof(float));
	if (!packed || (!j->B.f && !tmp) || (j->accumulate && !out)) {
		atomic_store(&j->err, -ENOMEM); /* the caller returns it; the outputs are void */
		goto out;
	}
	for (int64_t n = n0; n < n1; n += ch) {
		int64_t nr = n1 - n < ch ? n1 - n : ch;

		pack(j, n, nr, packed, tmp);
		if (!j->accumulate) {
			quant_gemm_packed(GGML_TYPE_F32, K, packed, nr, j->A,
					  (size_t) j->lda * sizeof(float), NULL, j->M, j->C + n,
					  (size_t) j->ldc);
			continue;
		}
		quant_gemm_packed(GGML_TYPE_F32, K, packed, nr, j->A, (size_t) j->lda * sizeof(float),
				  NULL, j->M, out, (size_t) nr);
		for (int64_t m = 0; m < j->M; m++) {
			float *c = j->C + m * j->ldc + n;
			const float *o = out + m * nr;

			for (int64_t r = 0; r < nr; r++)
				c[r] += o[r];
		}
	}
out:
	free(packed);
	free(tmp);
	free(out);
}

static int gemm(struct threadpool *pool, int64_t M, int64_t N, int64_t K, const float *A,
		int64_t lda, const struct src *B, float *C, int64_t ldc, bool accumulate)
{
	struct gemm_job j = { .M = M, .N = N, .K = K, .lda = lda, .ldc = ldc, .A = A, .B = *B,
			      .C = C, .accumulate = accumulate, .chunk = 128 };

	atomic_init(&j.err, 0);
	if (M <= 0 || N <= 0)
		return 0;
	if (K <= 0) {
		if (!accumulate)
			for (int64_t m = 0; m < M; m++)
				memset(C + m * ldc, 0, (size_t) N * sizeof(float));
		return 0;
	}
	/* column ranges of a stored matrix start at its blocks (256 values for K-quants) */
	if (B->w && B->transposed && quant_block_values(B->w->type) > (size_t) j.chunk)
		j.chunk = (int64_t) quant_block_values(B->w->type);
	run(pool, gemm_part, &j);
	return atomic_load(&j.err);
}

int train_mm_nt(struct threadpool *pool, int64_t M, int64_t N, int64_t K, const float *A,
		 int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate)
{
	struct src s = { .f = B, .sn = ldb, .sk = 1 };

	return gemm(pool, M, N, K, A, lda, &s, C, ldc, accumulate);
}

int train_linear_fwd(struct threadpool *pool, const struct weight *w, const float *x, int64_t n,
		      float *y)
{
	struct src s = { .w = w };

	if (w->type == GGML_TYPE_F32)
		s = (struct src){ .f = w->data, .sn = (int64_t) (w->row_bytes / 4), .sk = 1 };
	return gemm(pool, n, w->n_out, w->n_in, x, w->n_in, &s, y, w->n_out, false);
}

int train_linear_bwd_x(struct threadpool *pool, const struct weight *w, const float *dy,
			int64_t n, float *dx)
{
	struct src s = { .w = w, .transposed = true };

	if (w->type == GGML_TYPE_F32)
		s = (struct src){ .f = w->data, .sn = 1, .sk = (int64_t) (w->row_bytes / 4) };
	return gemm(pool, n, w->n_in, w->n_out, dy, w->n_out, &s, dx, w->n_in, true);
}

int train_linear_bwd_w(struct threadpool *pool, int64_t n_out, int64_t n_in, const float *dy,
			const float *x, int64_t n, float *dw)
{
	/* dW[o][i] = Σ_t dyᵀ[o][t] x[t][i]: the left side is dy transposed, the right x read
	 * down its columns */
	float *dyt = malloc((size_t) (n_out * n) * sizeof(float));
	struct src s = { .f = x, .sn = 1, .sk = n_in };
	int r;

	if (!dyt)
		return -ENOMEM;
	train_transpose(n, n_out, dy, n_out, dyt, n);
	r = gemm(pool, n_out, n_in, n, dyt, n, &s, dw, n_in, true);
	free(dyt);
	return r;
}
