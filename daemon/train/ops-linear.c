/* SPDX-License-Identifier: MIT */
/*
 * ops-linear.c: the trainer's matrix products (see ops.h). Everything ends in the engine's
 * F32 tile kernel, quant_gemm(GGML_TYPE_F32): y[c][r] = dot(w row r, x row c), whose result
 * per (r, c) is the same bits whatever the tile size, so splitting the output across threads
 * never changes a value. Frozen weights in quantized types are turned into F32 tiles by the
 * engine's quant_dequantize_row(), a few rows (forward) or a column range of a row block
 * (backward) at a time, so no full F32 copy of a quantized base is ever made (QLoRA).
 */
#include <stdlib.h>
#include <string.h>

#include "../engine/quant.h"
#include "../engine/threadpool.h"
#include "ops.h"

#define TILE_N 64 /* output columns per kernel call in train_mm_nt() */
#define FWD_ROWS 16 /* weight rows dequantized at a time, forward */
#define BWD_ROWS 64 /* weight rows per block, backward */

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
	/* 32×32 blocks keep both sides in cache. */
	for (int64_t r0 = 0; r0 < R; r0 += 32)
		for (int64_t c0 = 0; c0 < C; c0 += 32) {
			int64_t r1 = r0 + 32 < R ? r0 + 32 : R, c1 = c0 + 32 < C ? c0 + 32 : C;

			for (int64_t r = r0; r < r1; r++)
				for (int64_t c = c0; c < c1; c++)
					dst[c * ldd + r] = src[r * lds + c];
		}
}

struct mm_job {
	int64_t M, N, K, lda, ldb, ldc;
	const float *A, *B;
	float *C;
	bool accumulate;
};

static void mm_part(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	long n0, n1;
	float *tmp = NULL;

	threadpool_split(j->N, 16, ith, nth, &n0, &n1);
	if (n0 >= n1)
		return;
	if (j->accumulate) {
		tmp = malloc((size_t) j->M * TILE_N * sizeof(float));
		if (!tmp)
			abort(); /* a few KiB..MiB; the trainer cannot go on without it */
	}
	for (int64_t n = n0; n < n1; n += TILE_N) {
		int64_t nr = n1 - n < TILE_N ? n1 - n : TILE_N;

		if (!j->accumulate) {
			quant_gemm(GGML_TYPE_F32, j->K, j->B + n * j->ldb, j->ldb * sizeof(float), nr,
				   j->A, j->lda * sizeof(float), j->M, j->C + n,
				   j->ldc);
			continue;
		}
		quant_gemm(GGML_TYPE_F32, j->K, j->B + n * j->ldb, j->ldb * sizeof(float), nr, j->A,
			   j->lda * sizeof(float), j->M, tmp, nr);
		for (int64_t m = 0; m < j->M; m++)
			for (int64_t c = 0; c < nr; c++)
				j->C[m * j->ldc + n + c] += tmp[m * nr + c];
	}
	free(tmp);
}

void train_mm_nt(struct threadpool *pool, int64_t M, int64_t N, int64_t K, const float *A,
		 int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate)
{
	struct mm_job j = { .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
			    .A = A, .B = B, .C = C, .accumulate = accumulate };

	if (M <= 0 || N <= 0)
		return;
	if (K <= 0) {
		if (!accumulate)
			for (int64_t m = 0; m < M; m++)
				memset(C + m * ldc, 0, (size_t) N * sizeof(float));
		return;
	}
	run(pool, mm_part, &j);
}

/* ---- frozen weights in any type ---- */

struct lin_job {
	const struct weight *w;
	const float *x; /* forward: x; backward: dy */
	int64_t n;
	float *y; /* forward: y; backward: dx */
};

/* Row o of w as F32: the stored row itself for F32 weights, else dequantized into buf. */
static const float *weight_rows(const struct weight *w, int64_t o, int64_t nr, float *buf)
{
	const uint8_t *src = (const uint8_t *) w->data + (size_t) o * w->row_bytes;

	if (w->type == GGML_TYPE_F32)
		return (const float *) src;
	for (int64_t r = 0; r < nr; r++)
		quant_dequantize_row(w->type, src + (size_t) r * w->row_bytes, buf + r * w->n_in,
				     w->n_in);
	return buf;
}

static void lin_fwd_part(void *arg, int ith, int nth)
{
	struct lin_job *j = arg;
	const struct weight *w = j->w;
	long o0, o1;
	float *buf = NULL;

	threadpool_split(w->n_out, FWD_ROWS, ith, nth, &o0, &o1);
	if (o0 >= o1)
		return;
	if (w->type != GGML_TYPE_F32 && !(buf = malloc((size_t) FWD_ROWS * w->n_in * 4)))
		abort();
	for (int64_t o = o0; o < o1; o += FWD_ROWS) {
		int64_t nr = o1 - o < FWD_ROWS ? o1 - o : FWD_ROWS;
		const float *rows = weight_rows(w, o, nr, buf);

		quant_gemm(GGML_TYPE_F32, w->n_in, rows, w->n_in * sizeof(float), nr, j->x,
			   w->n_in * sizeof(float), j->n, j->y + o, w->n_out);
	}
	free(buf);
}

void train_linear_fwd(struct threadpool *pool, const struct weight *w, const float *x, int64_t n,
		      float *y)
{
	struct lin_job j = { .w = w, .x = x, .n = n, .y = y };

	if (n > 0)
		run(pool, lin_fwd_part, &j);
}

static void lin_bwd_part(void *arg, int ith, int nth)
{
	struct lin_job *j = arg;
	const struct weight *w = j->w;
	int64_t bv = (int64_t) quant_block_values(w->type), bb = (int64_t) quant_block_bytes(w->type);
	long i0, i1;
	int64_t il;
	float *rows, *wt, *tmp;

	/* Column ranges start at block boundaries, so each row's piece dequantizes alone. */
	threadpool_split(w->n_in, bv > 16 ? bv : 16, ith, nth, &i0, &i1);
	if (i0 >= i1)
		return;
	il = i1 - i0;
	rows = malloc((size_t) BWD_ROWS * il * sizeof(float));
	wt = malloc((size_t) BWD_ROWS * il * sizeof(float));
	tmp = malloc((size_t) j->n * il * sizeof(float));
	if (!rows || !wt || !tmp)
		abort();
	for (int64_t o0 = 0; o0 < w->n_out; o0 += BWD_ROWS) {
		int64_t ob = w->n_out - o0 < BWD_ROWS ? w->n_out - o0 : BWD_ROWS;

		for (int64_t r = 0; r < ob; r++) {
			const uint8_t *src = (const uint8_t *) w->data + (size_t) (o0 + r) * w->row_bytes;

			if (w->type == GGML_TYPE_F32)
				memcpy(rows + r * il, (const float *) src + i0, (size_t) il * 4);
			else
				quant_dequantize_row(w->type, src + (size_t) (i0 / bv) * bb,
						     rows + r * il, il);
		}
		train_transpose(ob, il, rows, il, wt, ob);
		/* tmp[t][i] = sum over this row block of dy[t][o] W[o][i0 + i] */
		quant_gemm(GGML_TYPE_F32, ob, wt, ob * sizeof(float), il, j->x + o0,
			   w->n_out * sizeof(float), j->n, tmp, il);
		for (int64_t t = 0; t < j->n; t++)
			for (int64_t i = 0; i < il; i++)
				j->y[t * w->n_in + i0 + i] += tmp[t * il + i];
	}
	free(rows);
	free(wt);
	free(tmp);
}

void train_linear_bwd_x(struct threadpool *pool, const struct weight *w, const float *dy,
			int64_t n, float *dx)
{
	struct lin_job j = { .w = w, .x = dy, .n = n, .y = dx };

	if (n > 0)
		run(pool, lin_bwd_part, &j);
}

void train_linear_bwd_w(struct threadpool *pool, int64_t n_out, int64_t n_in, const float *dy,
			const float *x, int64_t n, float *dw)
{
	float *dyt = malloc((size_t) n_out * n * sizeof(float));
	float *xt = malloc((size_t) n_in * n * sizeof(float));

	if (!dyt || !xt)
		abort();
	train_transpose(n, n_out, dy, n_out, dyt, n);
	train_transpose(n, n_in, x, n_in, xt, n);
	train_mm_nt(pool, n_out, n_in, n, dyt, n, xt, n, dw, n_in, true);
	free(dyt);
	free(xt);
}
