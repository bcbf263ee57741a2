/* SPDX-License-Identifier: MIT */
/* sgmv.c: the batched LoRA kernels (see sgmv.h): scalar, AVX2 and AVX-512 (F/BW/VL/DQ), the
 * level chosen with quant's (quant_simd_level()). */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "../basic/macro.h"
#include "kernels.h"
#include "quant.h"
#include "sgmv.h"
#include "threadpool.h"

/* ---- kernels ---- */

#define LORA_EXPAND_MAX_RANK 512

/* Element i of a row; a Q8_0 row's element is d·q, exact in float (an 11-bit fp16 mantissa
 * times an 8-bit integer fits 24 bits). */
static float load_elem(const void *row, uint32_t dtype, size_t i)
{
	switch (dtype) {
	case GGML_TYPE_F16:
		return fp16_to_f32(((const uint16_t *) row)[i]);
	case GGML_TYPE_BF16:
		return bf16_to_f32(((const uint16_t *) row)[i]);
	case GGML_TYPE_Q8_0: {
		const struct block_q8_0 *blk = (const struct block_q8_0 *) row + i / QK8_0;

		return fp16_to_f32(blk->d) * (float) blk->qs[i % QK8_0];
	}
	default:
		return ((const float *) row)[i];
	}
}

/* Elements i..i+7 of an F32, F16 or BF16 row (Q8_0 rows go through expand_val8() and a
 * scale per block). */
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
 * The expand's term for element i with coefficient a: y = fma(coef, val, y). For Q8_0 the
 * block's scale goes with the coefficient, coef = a·d and val = q, so the SIMD loop scales
 * once per block and row; every level computes the same (coef, val), hence the same bits.
 */
static inline float expand_coef(float a, const void *row, uint32_t dtype, size_t i)
{
	if (dtype == GGML_TYPE_Q8_0)
		return a * fp16_to_f32(((const struct block_q8_0 *) row)[i / QK8_0].d);
	return a;
}

static inline float expand_val(const void *row, uint32_t dtype, size_t i)
{
	if (dtype == GGML_TYPE_Q8_0)
		return (float) ((const struct block_q8_0 *) row)[i / QK8_0].qs[i % QK8_0];
	return load_elem(row, dtype, i);
}

static inline float expand_term(float y, float a, const void *row, uint32_t dtype, size_t i)
{
	return fmaf(expand_coef(a, row, dtype, i), expand_val(row, dtype, i), y);
}

/* expand_coef() inside the SIMD loops (F16C's conversion is exact, as fp16_to_f32() is) */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) float
expand_coef_avx2(float a, const void *row, uint32_t dtype, size_t i)
{
	if (dtype == GGML_TYPE_Q8_0)
		return a * _cvtsh_ss(((const struct block_q8_0 *) row)[i / QK8_0].d);
	return a;
}

/* expand_val() of elements i..i+7 (i a multiple of 8) */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) __m256
expand_val8(const void *row, uint32_t dtype, size_t i)
{
	if (dtype == GGML_TYPE_Q8_0) {
		const struct block_q8_0 *blk = (const struct block_q8_0 *) row + i / QK8_0;

		return _mm256_cvtepi32_ps(
			_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *) (blk->qs + i % QK8_0))));
	}
	return load8(row, dtype, i);
}

__attribute__((target("avx2,fma,f16c"))) static void axpy_avx2(float *y, float a, const void *row,
							       uint32_t dtype, size_t b, size_t e)
{
	size_t i = b;

	for (; i + 8 <= e && i % 8; i++)
		y[i] = expand_term(y[i], a, row, dtype, i);
	for (; i + 8 <= e; i += 8) {
		__m256 va = _mm256_set1_ps(expand_coef_avx2(a, row, dtype, i));

		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, expand_val8(row, dtype, i),
							_mm256_loadu_ps(y + i)));
	}
	for (; i < e; i++)
		y[i] = expand_term(y[i], a, row, dtype, i);
}

/*
 * Four rows' dots with x at once, each row with two chains of 8 lanes (per 16 values, or per
 * Q8_0 block, scaled once per block), then summed: x is
 * loaded once for the four, and 4 rows stream together, with the next 4 prefetched, so more
 * cache misses are in flight than a row at a time allows (distinct adapters' rows come from
 * memory in a decode step). next may be NULL.
 */
__attribute__((target("avx2,fma,f16c"))) static void dot4_avx2(const float *x,
								const void *const *rows,
								const void *const *next,
								uint32_t dtype, size_t n, float *out)
{
	__m256 acc[4][2];
	size_t i = 0, eb = dtype == GGML_TYPE_F32 ? 4 : 2;

	for (int r = 0; r < 4; r++)
		acc[r][0] = acc[r][1] = _mm256_setzero_ps();
	/* Q8_0: a block's products summed unscaled, then times its scale once */
	for (; dtype == GGML_TYPE_Q8_0 && i + QK8_0 <= n; i += QK8_0) {
		const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
		const __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);

		if (next)
			for (int r = 0; r < 4; r++)
				_mm_prefetch((const char *) next[r] + i / QK8_0 * sizeof(struct block_q8_0),
					     _MM_HINT_T0);
		for (int r = 0; r < 4; r++) {
			__m256 t0 = _mm256_mul_ps(x0, expand_val8(rows[r], dtype, i));
			__m256 t1 = _mm256_mul_ps(x1, expand_val8(rows[r], dtype, i + 8));

			t0 = _mm256_fmadd_ps(x2, expand_val8(rows[r], dtype, i + 16), t0);
			t1 = _mm256_fmadd_ps(x3, expand_val8(rows[r], dtype, i + 24), t1);
			acc[r][i / QK8_0 % 2] = _mm256_fmadd_ps(
				_mm256_add_ps(t0, t1),
				_mm256_set1_ps(_cvtsh_ss(((const struct block_q8_0 *) rows[r])[i / QK8_0].d)),
				acc[r][i / QK8_0 % 2]);
		}
	}
	/* the other types (a Q8_0 row that is not whole blocks: its tail, through load_elem) */
	for (; dtype != GGML_TYPE_Q8_0 && i + 16 <= n; i += 16) {
		const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);

		if (next && (i * eb) % 64 == 0)
			for (int r = 0; r < 4; r++)
				_mm_prefetch((const char *) next[r] + i * eb, _MM_HINT_T0);
		for (int r = 0; r < 4; r++) {
			acc[r][0] = _mm256_fmadd_ps(x0, load8(rows[r], dtype, i), acc[r][0]);
			acc[r][1] = _mm256_fmadd_ps(x1, load8(rows[r], dtype, i + 8), acc[r][1]);
		}
	}
	for (int r = 0; r < 4; r++) {
		__m256 a = _mm256_add_ps(acc[r][0], acc[r][1]);
		__m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
		s = _mm_hadd_ps(s, s);
		s = _mm_hadd_ps(s, s);
		float sum = _mm_cvtss_f32(s);
		for (size_t j = i; j < n; j++)
			sum += x[j] * load_elem(rows[r], dtype, j);
		out[r] = sum;
	}
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
		y[i] = expand_term(y[i], a, row, dtype, i);
}

enum sgmv_isa { SGMV_SCALAR, SGMV_AVX2, SGMV_AVX512 };

static enum sgmv_isa sgmv_isa(void)
{
	/* quant's dispatch already checked the instruction sets of its level (and that the level
	 * was proven on such a CPU, quant.c); asked each time, so that a level forced by
	 * quant_force_simd_level() (the tests) holds here too. The AVX-512 kernels below were
	 * proven with the avx512* levels' other kernels (test-matmul: sgmv_all_types_all_levels)
	 * on AMD EPYC Zen 5 (family 26 model 2), 2026-12-02. */
	if (quant_simd_level_avx512())
		return SGMV_AVX512;
	return quant_simd_level_avx2() ? SGMV_AVX2 : SGMV_SCALAR;
}

static void dot4_avx512(const float *x, const void *const *rows, const void *const *next,
			uint32_t dtype, size_t n, float *out);

void lora_shrink_pair(const float *x, uint32_t n_in, const struct lora_pair *p, float *tmp)
{
	const float *xr = x + (size_t) p->row * n_in;
	enum sgmv_isa isa = sgmv_isa();
	void (*dot4)(const float *, const void *const *, const void *const *, uint32_t, size_t,
		     float *) = isa == SGMV_AVX512 ? dot4_avx512 : dot4_avx2;
	uint32_t k = 0, rank = p->mat->rank;

	if (isa == SGMV_SCALAR) {
		for (; k < rank; k++)
			tmp[k] = dot_scalar(xr, p->mat->a_rows[k], p->mat->dtype, n_in);
		return;
	}
	for (; k + 4 <= rank; k += 4)
		dot4(xr, p->mat->a_rows + k, k + 8 <= rank ? p->mat->a_rows + k + 4 : NULL,
		     p->mat->dtype, n_in, tmp + k);
	if (k < rank) { /* the last 1-3 rows, padded with copies of the last (same bits per row) */
		const void *rows[4];
		float out[4];

		for (uint32_t r = 0; r < 4; r++)
			rows[r] = p->mat->a_rows[MIN(k + r, rank - 1)];
		dot4(xr, rows, NULL, p->mat->dtype, n_in, out);
		memcpy(tmp + k, out, (rank - k) * sizeof(float));
	}
}

/*
 * y[b..e) = fma(a[k], Bᵀ_k[b..e), y) for k = k0..k1-1 in turn: each y value is the same
 * chain of fmaf() as separate axpy passes, but stays in a register across those k.
 */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
expand_avx2_k(float *y, const void *const *rows, const float *a, uint32_t k0, uint32_t k1,
	      uint32_t dtype, size_t b, size_t e, const void *const *next, uint32_t n_next)
{
	size_t i = b;

	/* to a multiple of 32 (8 for the 2-byte types), where a pass of 32 is one Q8_0 block (the
	 * same chain per value) */
	for (; i < e && i % (dtype == GGML_TYPE_Q8_0 ? QK8_0 : 8); i++) {
		float v = y[i];

		for (uint32_t k = k0; k < k1; k++)
			v = expand_term(v, a[k], rows[k], dtype, i);
		y[i] = v;
	}
	for (; i + 32 <= e; i += 32) {
		__m256 y0 = _mm256_loadu_ps(y + i), y1 = _mm256_loadu_ps(y + i + 8);
		__m256 y2 = _mm256_loadu_ps(y + i + 16), y3 = _mm256_loadu_ps(y + i + 24);

		/* the rows after these, as far ahead as these are (short rows end before the
		 * hardware prefetcher has ramped up) */
		for (uint32_t j = 0; j < n_next; j++) {
			const char *nr = next[j];

			if (dtype == GGML_TYPE_Q8_0)
				_mm_prefetch(nr + i / QK8_0 * sizeof(struct block_q8_0), _MM_HINT_T0);
			else if (dtype == GGML_TYPE_F32) {
				_mm_prefetch(nr + i * 4, _MM_HINT_T0);
				_mm_prefetch(nr + i * 4 + 64, _MM_HINT_T0);
			} else
				_mm_prefetch(nr + i * 2, _MM_HINT_T0);
		}
		for (uint32_t k = k0; k < k1; k++) {
			const __m256 va = _mm256_set1_ps(expand_coef_avx2(a[k], rows[k], dtype, i));

			y0 = _mm256_fmadd_ps(va, expand_val8(rows[k], dtype, i), y0);
			y1 = _mm256_fmadd_ps(va, expand_val8(rows[k], dtype, i + 8), y1);
			y2 = _mm256_fmadd_ps(va, expand_val8(rows[k], dtype, i + 16), y2);
			y3 = _mm256_fmadd_ps(va, expand_val8(rows[k], dtype, i + 24), y3);
		}
		_mm256_storeu_ps(y + i, y0);
		_mm256_storeu_ps(y + i + 8, y1);
		_mm256_storeu_ps(y + i + 16, y2);
		_mm256_storeu_ps(y + i + 24, y3);
	}
	for (; i + 8 <= e; i += 8) {
		__m256 y0 = _mm256_loadu_ps(y + i);

		for (uint32_t k = k0; k < k1; k++)
			y0 = _mm256_fmadd_ps(_mm256_set1_ps(expand_coef_avx2(a[k], rows[k], dtype, i)),
					     expand_val8(rows[k], dtype, i), y0);
		_mm256_storeu_ps(y + i, y0);
	}
	for (; i < e; i++) {
		float v = y[i];

		for (uint32_t k = k0; k < k1; k++)
			v = expand_term(v, a[k], rows[k], dtype, i);
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
	      size_t b, size_t e, const void *const *after, uint32_t n_after)
{
	for (uint32_t k0 = 0; k0 < rank; k0 += EXPAND_K_GROUP) {
		uint32_t k1 = MIN(k0 + EXPAND_K_GROUP, rank);

		if (k1 < rank)
			expand_avx2_k(y, rows, a, k0, k1, dtype, b, e, rows + k1,
				      MIN(rank - k1, (uint32_t) EXPAND_K_GROUP));
		else
			expand_avx2_k(y, rows, a, k0, k1, dtype, b, e, after,
				      MIN(n_after, (uint32_t) EXPAND_K_GROUP));
	}
}

/* after: the rows the caller expands next (n_after of them), to prefetch during the last group */
__attribute__((target("avx2,fma,f16c"))) static void
expand_avx2(float *y, const void *const *rows, const float *a, uint32_t rank, uint32_t dtype,
	    size_t b, size_t e, const void *const *after, uint32_t n_after)
{
	switch (dtype) {
	case GGML_TYPE_F16:
		expand_avx2_t(y, rows, a, rank, GGML_TYPE_F16, b, e, after, n_after);
		break;
	case GGML_TYPE_BF16:
		expand_avx2_t(y, rows, a, rank, GGML_TYPE_BF16, b, e, after, n_after);
		break;
	case GGML_TYPE_Q8_0:
		expand_avx2_t(y, rows, a, rank, GGML_TYPE_Q8_0, b, e, after, n_after);
		break;
	default:
		expand_avx2_t(y, rows, a, rank, GGML_TYPE_F32, b, e, after, n_after);
		break;
	}
}

/* ---- AVX-512 (F/BW/VL/DQ): the same kernels 16 lanes wide ---- */

#define AVX512_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"

/* expand_val() of elements i..i+15 (i a multiple of 16: inside one Q8_0 block) */
static inline __attribute__((always_inline, target(AVX512_TARGET))) __m512
val16(const void *row, uint32_t dtype, size_t i)
{
	switch (dtype) {
	case GGML_TYPE_F16:
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) ((const uint16_t *) row + i)));
	case GGML_TYPE_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
			_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *) ((const uint16_t *) row + i))),
			16));
	case GGML_TYPE_Q8_0: {
		const struct block_q8_0 *blk = (const struct block_q8_0 *) row + i / QK8_0;

		return _mm512_cvtepi32_ps(
			_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *) (blk->qs + i % QK8_0))));
	}
	default:
		return _mm512_loadu_ps((const float *) row + i);
	}
}

/* Prefetches the bytes of elements [i, i + 64) of a row. */
static inline __attribute__((always_inline)) void prefetch64(const void *row, uint32_t dtype,
							     size_t i)
{
	const char *p = row;

	if (dtype == GGML_TYPE_Q8_0) {
		/* two blocks, 68 bytes */
		_mm_prefetch(p + i / QK8_0 * sizeof(struct block_q8_0), _MM_HINT_T0);
		_mm_prefetch(p + i / QK8_0 * sizeof(struct block_q8_0) + 64, _MM_HINT_T0);
	} else if (dtype == GGML_TYPE_F32) {
		for (int l = 0; l < 4; l++)
			_mm_prefetch(p + i * 4 + 64 * l, _MM_HINT_T0);
	} else {
		_mm_prefetch(p + i * 2, _MM_HINT_T0);
		_mm_prefetch(p + i * 2 + 64, _MM_HINT_T0);
	}
}

/* expand_avx2_k() 16 lanes wide: per value the same fma chain over k, so the same bits. */
static inline __attribute__((always_inline, target(AVX512_TARGET))) void
expand_avx512_k(float *y, const void *const *rows, const float *a, uint32_t k0, uint32_t k1,
		uint32_t dtype, size_t b, size_t e, const void *const *next, uint32_t n_next)
{
	size_t i = b;

	/* to a multiple of 32 (16 for the other types): a pass of 64 is two whole Q8_0 blocks */
	for (; i < e && i % (dtype == GGML_TYPE_Q8_0 ? QK8_0 : 16); i++) {
		float v = y[i];

		for (uint32_t k = k0; k < k1; k++)
			v = expand_term(v, a[k], rows[k], dtype, i);
		y[i] = v;
	}
	for (; i + 64 <= e; i += 64) {
		__m512 y0 = _mm512_loadu_ps(y + i), y1 = _mm512_loadu_ps(y + i + 16);
		__m512 y2 = _mm512_loadu_ps(y + i + 32), y3 = _mm512_loadu_ps(y + i + 48);

		for (uint32_t j = 0; j < n_next; j++)
			prefetch64(next[j], dtype, i);
		for (uint32_t k = k0; k < k1; k++) {
			/* a Q8_0 block's scale goes with the coefficient: blocks i/32 and i/32 + 1 */
			const __m512 c0 = _mm512_set1_ps(expand_coef_avx2(a[k], rows[k], dtype, i));
			const __m512 c1 = _mm512_set1_ps(expand_coef_avx2(a[k], rows[k], dtype, i + 32));

			y0 = _mm512_fmadd_ps(c0, val16(rows[k], dtype, i), y0);
			y1 = _mm512_fmadd_ps(c0, val16(rows[k], dtype, i + 16), y1);
			y2 = _mm512_fmadd_ps(c1, val16(rows[k], dtype, i + 32), y2);
			y3 = _mm512_fmadd_ps(c1, val16(rows[k], dtype, i + 48), y3);
		}
		_mm512_storeu_ps(y + i, y0);
		_mm512_storeu_ps(y + i + 16, y1);
		_mm512_storeu_ps(y + i + 32, y2);
		_mm512_storeu_ps(y + i + 48, y3);
	}
	for (; i + 16 <= e; i += 16) {
		__m512 y0 = _mm512_loadu_ps(y + i);

		for (uint32_t k = k0; k < k1; k++)
			y0 = _mm512_fmadd_ps(_mm512_set1_ps(expand_coef_avx2(a[k], rows[k], dtype, i)),
					     val16(rows[k], dtype, i), y0);
		_mm512_storeu_ps(y + i, y0);
	}
	for (; i < e; i++) {
		float v = y[i];

		for (uint32_t k = k0; k < k1; k++)
			v = expand_term(v, a[k], rows[k], dtype, i);
		y[i] = v;
	}
}

static inline __attribute__((always_inline, target(AVX512_TARGET))) void
expand_avx512_t(float *y, const void *const *rows, const float *a, uint32_t rank,
		uint32_t dtype, size_t b, size_t e, const void *const *after, uint32_t n_after)
{
	for (uint32_t k0 = 0; k0 < rank; k0 += EXPAND_K_GROUP) {
		uint32_t k1 = MIN(k0 + EXPAND_K_GROUP, rank);

		if (k1 < rank)
			expand_avx512_k(y, rows, a, k0, k1, dtype, b, e, rows + k1,
					MIN(rank - k1, (uint32_t) EXPAND_K_GROUP));
		else
			expand_avx512_k(y, rows, a, k0, k1, dtype, b, e, after,
					MIN(n_after, (uint32_t) EXPAND_K_GROUP));
	}
}

__attribute__((target(AVX512_TARGET))) static void
expand_avx512(float *y, const void *const *rows, const float *a, uint32_t rank, uint32_t dtype,
	      size_t b, size_t e, const void *const *after, uint32_t n_after)
{
	switch (dtype) {
	case GGML_TYPE_F16:
		expand_avx512_t(y, rows, a, rank, GGML_TYPE_F16, b, e, after, n_after);
		break;
	case GGML_TYPE_BF16:
		expand_avx512_t(y, rows, a, rank, GGML_TYPE_BF16, b, e, after, n_after);
		break;
	case GGML_TYPE_Q8_0:
		expand_avx512_t(y, rows, a, rank, GGML_TYPE_Q8_0, b, e, after, n_after);
		break;
	default:
		expand_avx512_t(y, rows, a, rank, GGML_TYPE_F32, b, e, after, n_after);
		break;
	}
}

/*
 * dot4_avx2() 16 lanes wide: four rows at once, two chains of 16 lanes each (per 32 values,
 * or per Q8_0 block, scaled once per block), next four rows prefetched. Its own summation
 * order (a row's dot does not depend on the batch, but differs from the AVX2 level's in the
 * last bits, as AVX2's differs from the scalar one's).
 */
static inline __attribute__((always_inline, target(AVX512_TARGET))) void
dot4_avx512_t(const float *x, const void *const *rows, const void *const *next, uint32_t dtype,
	      size_t n, float *out)
{
	__m512 acc[4][2];
	size_t i = 0;

	for (int r = 0; r < 4; r++)
		acc[r][0] = acc[r][1] = _mm512_setzero_ps();
	if (dtype == GGML_TYPE_Q8_0) {
		for (; i + QK8_0 <= n; i += QK8_0) {
			const __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);

			if (next && i % 64 == 0)
				for (int r = 0; r < 4; r++)
					prefetch64(next[r], dtype, i);
			for (int r = 0; r < 4; r++) {
				__m512 t = _mm512_mul_ps(x0, val16(rows[r], dtype, i));

				t = _mm512_fmadd_ps(x1, val16(rows[r], dtype, i + 16), t);
				acc[r][i / QK8_0 % 2] = _mm512_fmadd_ps(
					t,
					_mm512_set1_ps(_cvtsh_ss(((const struct block_q8_0 *) rows[r])[i / QK8_0].d)),
					acc[r][i / QK8_0 % 2]);
			}
		}
	} else {
		for (; i + 32 <= n; i += 32) {
			const __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);

			if (next && i % 64 == 0)
				for (int r = 0; r < 4; r++)
					prefetch64(next[r], dtype, i);
			for (int r = 0; r < 4; r++) {
				acc[r][0] = _mm512_fmadd_ps(x0, val16(rows[r], dtype, i), acc[r][0]);
				acc[r][1] = _mm512_fmadd_ps(x1, val16(rows[r], dtype, i + 16), acc[r][1]);
			}
		}
		if (i + 16 <= n) {
			const __m512 x0 = _mm512_loadu_ps(x + i);

			for (int r = 0; r < 4; r++)
				acc[r][0] = _mm512_fmadd_ps(x0, val16(rows[r], dtype, i), acc[r][0]);
			i += 16;
		}
	}
	for (int r = 0; r < 4; r++) {
		float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));

		for (size_t j = i; j < n; j++)
			sum += x[j] * load_elem(rows[r], dtype, j);
		out[r] = sum;
	}
}

__attribute__((target(AVX512_TARGET))) static void dot4_avx512(const float *x,
								const void *const *rows,
								const void *const *next,
								uint32_t dtype, size_t n, float *out)
{
	switch (dtype) {
	case GGML_TYPE_F16:
		dot4_avx512_t(x, rows, next, GGML_TYPE_F16, n, out);
		break;
	case GGML_TYPE_BF16:
		dot4_avx512_t(x, rows, next, GGML_TYPE_BF16, n, out);
		break;
	case GGML_TYPE_Q8_0:
		dot4_avx512_t(x, rows, next, GGML_TYPE_Q8_0, n, out);
		break;
	default:
		dot4_avx512_t(x, rows, next, GGML_TYPE_F32, n, out);
		break;
	}
}

void lora_expand_range(float *y, uint32_t n_out, const struct lora_pair *pairs, size_t n_pairs,
		       const float *tmp, uint32_t max_rank, size_t b, size_t e)
{
	enum sgmv_isa isa = sgmv_isa();
	bool avx2 = isa != SGMV_SCALAR;
	void (*expand)(float *, const void *const *, const float *, uint32_t, uint32_t, size_t,
		       size_t, const void *const *, uint32_t) =
		isa == SGMV_AVX512 ? expand_avx512 : expand_avx2;
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
			if (pi + 1 < n_pairs && pairs[pi + 1].mat != p->mat)
				expand(yr, p->mat->bt_rows, a, rank, p->mat->dtype, b, e,
				       pairs[pi + 1].mat->bt_rows, pairs[pi + 1].mat->rank);
			else
				expand(yr, p->mat->bt_rows, a, rank, p->mat->dtype, b, e, NULL, 0);
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
