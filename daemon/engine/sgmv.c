/* SPDX-License-Identifier: MIT */
/* sgmv.c: the batched LoRA kernels (see sgmv.h); moved here from lora/resident.c unchanged. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "../basic/macro.h"
#include "quant.h"
#include "sgmv.h"
#include "threadpool.h"

/* ---- kernels ---- */

#define LORA_EXPAND_MAX_RANK 512

static float load_elem(const void *row, uint32_t dtype, size_t i)
{
	switch (dtype) {
	case GGML_TYPE_F16:
		return fp16_to_f32(((const uint16_t *) row)[i]);
	case GGML_TYPE_BF16:
		return bf16_to_f32(((const uint16_t *) row)[i]);
	default:
		return ((const float *) row)[i];
	}
}

__attribute__((target("avx2,fma,f16c"))) static float dot_avx2(const float *x, const void *row,
							      uint32_t dtype, size_t n)
{
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256 w0, w1;

		if (dtype == GGML_TYPE_F16) {
			w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) ((const uint16_t *) row + i)));
			w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) ((const uint16_t *) row + i + 8)));
		} else if (dtype == GGML_TYPE_BF16) {
			__m128i h0 = _mm_loadu_si128((const __m128i *) ((const uint16_t *) row + i));
			__m128i h1 = _mm_loadu_si128((const __m128i *) ((const uint16_t *) row + i + 8));
			w0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h0), 16));
			w1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h1), 16));
		} else {
			w0 = _mm256_loadu_ps((const float *) row + i);
			w1 = _mm256_loadu_ps((const float *) row + i + 8);
		}
		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), w0, acc0);
		acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), w1, acc1);
	}
	acc0 = _mm256_add_ps(acc0, acc1);
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
	s = _mm_hadd_ps(s, s);
	s = _mm_hadd_ps(s, s);
	float sum = _mm_cvtss_f32(s);
	for (; i < n; i++)
		sum += x[i] * load_elem(row, dtype, i);
	return sum;
}

__attribute__((target("avx2,fma,f16c"))) static void axpy_avx2(float *y, float a, const void *row,
							       uint32_t dtype, size_t b, size_t e)
{
	__m256 va = _mm256_set1_ps(a);
	size_t i = b;

	for (; i + 8 <= e; i += 8) {
		__m256 w;

		if (dtype == GGML_TYPE_F16)
			w = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) ((const uint16_t *) row + i)));
		else if (dtype == GGML_TYPE_BF16)
			w = _mm256_castsi256_ps(_mm256_slli_epi32(
				_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) ((const uint16_t *) row + i))),
				16));
		else
			w = _mm256_loadu_ps((const float *) row + i);
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, w, _mm256_loadu_ps(y + i)));
	}
	for (; i < e; i++)
		y[i] = fmaf(a, load_elem(row, dtype, i), y[i]);
}

static float dot_scalar(const float *x, const void *row, uint32_t dtype, size_t n)
{
	float sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += x[i] * load_elem(row, dtype, i);
	return sum;
}

static void axpy_scalar(float *y, float a, const void *row, uint32_t dtype, size_t b, size_t e)
{
	for (size_t i = b; i < e; i++)
		y[i] = fmaf(a, load_elem(row, dtype, i), y[i]);
}

static bool have_avx2(void)
{
	static int cached = -1;

	/* quant's dispatch already checked AVX2 + FMA + F16C for its avx2 level and above (clang
	 * has no "f16c" for __builtin_cpu_supports) */
	if (cached < 0)
		cached = strcmp(quant_simd_level(), "scalar") != 0;
	return cached;
}

void lora_shrink_pair(const float *x, uint32_t n_in, const struct lora_pair *p, float *tmp)
{
	const float *xr = x + (size_t) p->row * n_in;
	bool avx2 = have_avx2();

	for (uint32_t k = 0; k < p->mat->rank; k++)
		tmp[k] = avx2 ? dot_avx2(xr, p->mat->a_rows[k], p->mat->dtype, n_in)
			      : dot_scalar(xr, p->mat->a_rows[k], p->mat->dtype, n_in);
}

static inline __attribute__((always_inline, target("avx2,fma,f16c"))) __m256
load8(const void *row, uint32_t dtype, size_t i)
{
	if (dtype == GGML_TYPE_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) ((const uint16_t *) row + i)));
	if (dtype == GGML_TYPE_BF16)
		return _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) ((const uint16_t *) row + i))),
			16));
	return _mm256_loadu_ps((const float *) row + i);
}

/*
 * y[b..e) = fma(a[k], Bᵀ_k[b..e), y) for k = k0..k1-1 in turn: each y value is the same
 * chain of fmaf() as separate axpy passes, but stays in a register across those k.
 */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
expand_avx2_k(float *y, const void *const *rows, const float *a, uint32_t k0, uint32_t k1,
	      uint32_t dtype, size_t b, size_t e)
{
	size_t i = b;

	for (; i + 32 <= e; i += 32) {
		__m256 y0 = _mm256_loadu_ps(y + i), y1 = _mm256_loadu_ps(y + i + 8);
		__m256 y2 = _mm256_loadu_ps(y + i + 16), y3 = _mm256_loadu_ps(y + i + 24);

		for (uint32_t k = k0; k < k1; k++) {
			const __m256 va = _mm256_set1_ps(a[k]);

			y0 = _mm256_fmadd_ps(va, load8(rows[k], dtype, i), y0);
			y1 = _mm256_fmadd_ps(va, load8(rows[k], dtype, i + 8), y1);
			y2 = _mm256_fmadd_ps(va, load8(rows[k], dtype, i + 16), y2);
			y3 = _mm256_fmadd_ps(va, load8(rows[k], dtype, i + 24), y3);
		}
		_mm256_storeu_ps(y + i, y0);
		_mm256_storeu_ps(y + i + 8, y1);
		_mm256_storeu_ps(y + i + 16, y2);
		_mm256_storeu_ps(y + i + 24, y3);
	}
	for (; i + 8 <= e; i += 8) {
		__m256 y0 = _mm256_loadu_ps(y + i);

		for (uint32_t k = k0; k < k1; k++)
			y0 = _mm256_fmadd_ps(_mm256_set1_ps(a[k]), load8(rows[k], dtype, i), y0);
		_mm256_storeu_ps(y + i, y0);
	}
	for (; i < e; i++) {
		float v = y[i];

		for (uint32_t k = k0; k < k1; k++)
			v = fmaf(a[k], load_elem(rows[k], dtype, i), v);
		y[i] = v;
	}
}

/*
 * The rank's Bᵀ rows 4 at a time: y[b..e) (a few KiB, in L1) is read and written rank/4
 * times, and only 4 rows stream at once, which the hardware prefetcher follows (all 16 at
 * once read 16 scattered lines per 32 columns and ran slower than 16 plain axpy passes).
 * Per value the k order is unchanged, so the bits are too.
 */
#define EXPAND_K_GROUP 4

static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
expand_avx2_t(float *y, const void *const *rows, const float *a, uint32_t rank, uint32_t dtype,
	      size_t b, size_t e)
{
	for (uint32_t k0 = 0; k0 < rank; k0 += EXPAND_K_GROUP)
		expand_avx2_k(y, rows, a, k0, MIN(k0 + EXPAND_K_GROUP, rank), dtype, b, e);
}

__attribute__((target("avx2,fma,f16c"))) static void expand_avx2(float *y, const void *const *rows,
								 const float *a, uint32_t rank,
								 uint32_t dtype, size_t b, size_t e)
{
	switch (dtype) {
	case GGML_TYPE_F16:
		expand_avx2_t(y, rows, a, rank, GGML_TYPE_F16, b, e);
		break;
	case GGML_TYPE_BF16:
		expand_avx2_t(y, rows, a, rank, GGML_TYPE_BF16, b, e);
		break;
	default:
		expand_avx2_t(y, rows, a, rank, GGML_TYPE_F32, b, e);
		break;
	}
}

void lora_expand_range(float *y, uint32_t n_out, const struct lora_pair *pairs, size_t n_pairs,
		       const float *tmp, uint32_t max_rank, size_t b, size_t e)
{
	bool avx2 = have_avx2();
	float a[LORA_EXPAND_MAX_RANK];

	/* within [b, e) every pair and k is applied in list order, so a row's result is the
	 * same whatever the batch, the thread count and the column split */
	for (size_t pi = 0; pi < n_pairs; pi++) {
		const struct lora_pair *p = &pairs[pi];
		float *yr = y + (size_t) p->row * n_out;
		uint32_t rank = p->mat->rank;

		if (avx2 && rank <= LORA_EXPAND_MAX_RANK) {
			for (uint32_t k = 0; k < rank; k++)
				a[k] = p->scale * tmp[pi * max_rank + k];
			expand_avx2(yr, p->mat->bt_rows, a, rank, p->mat->dtype, b, e);
			continue;
		}
		for (uint32_t k = 0; k < rank; k++) {
			float ak = p->scale * tmp[pi * max_rank + k];

			if (avx2)
				axpy_avx2(yr, ak, p->mat->bt_rows[k], p->mat->dtype, b, e);
			else
				axpy_scalar(yr, ak, p->mat->bt_rows[k], p->mat->dtype, b, e);
		}
	}
}

uint32_t lora_pairs_max_rank(const struct lora_pair *pairs, size_t n_pairs)
{
	uint32_t r = 0;

	for (size_t i = 0; i < n_pairs; i++)
		r = MAX(r, pairs[i].mat->rank);
	return r;
}

struct sgmv_job {
	const float *x;
	float *y;
	const struct lora_pair *pairs;
	size_t n_pairs;
	float *tmp;
	uint32_t max_rank;
	uint32_t n_in;  /* of the projection: every pair shares it */
	uint32_t n_out;
};

static void sgmv_shrink(void *arg, int ith, int nth)
{
	struct sgmv_job *j = arg;
	long b, e;

	threadpool_split((long) j->n_pairs, 1, ith, nth, &b, &e);
	for (long t = b; t < e; t++)
		lora_shrink_pair(j->x, j->n_in, &j->pairs[t], j->tmp + (size_t) t * j->max_rank);
}

static void sgmv_expand(void *arg, int ith, int nth)
{
	struct sgmv_job *j = arg;
	long b, e;

	threadpool_split(j->n_out, 16, ith, nth, &b, &e);
	if (b < e)
		lora_expand_range(j->y, j->n_out, j->pairs, j->n_pairs, j->tmp, j->max_rank,
				  (size_t) b, (size_t) e);
}

void lora_sgmv(struct threadpool *pool, const float *x, float *y, const struct lora_pair *pairs,
	       size_t n_pairs, float *tmp)
{
	struct sgmv_job j = { .x = x, .y = y, .pairs = pairs, .n_pairs = n_pairs, .tmp = tmp };

	if (n_pairs == 0)
		return;
	j.n_in = pairs[0].mat->n_in;
	j.n_out = pairs[0].mat->n_out;
	j.max_rank = lora_pairs_max_rank(pairs, n_pairs);
	threadpool_run(pool, sgmv_shrink, &j);
	threadpool_run(pool, sgmv_expand, &j);
}
