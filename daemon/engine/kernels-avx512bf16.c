/* SPDX-License-Identifier: MIT */
/*
 * kernels-avx512bf16.c: the "avx512bf16" level: the "avx512vnni" one plus AVX512-BF16's
 * vdpbf16ps for BF16 weights (their activations are BF16 too, quant_vec_dot_type()): one
 * instruction multiplies 32 pairs and adds them, two per lane, into 16 float sums, where the
 * level below converts both sides to float and needs two multiply-adds per 16. Compiled with
 * the AVX-512 flags plus -mavx512bf16; quant.c builds the table at start-up (a copy of
 * "avx512vnni" with these two kernels) and calls it only when cpuid reports AVX512-BF16.
 *
 * Results: a product of two bf16 values is exact in float; vdpbf16ps adds a lane's two
 * products to its sum with round-to-nearest-even, treating denormal inputs and results as
 * zero. So a BF16 dot differs from the level below in its summation order (and in values
 * under 2^-126, which do not occur in weights or activations that matter), within the same
 * float64 bounds (test-matmul, test-quant), and every (row, token) pair of a tile product is
 * the same bits whatever the tile (the same steps per pair, then the same reduction).
 */
#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "../basic/macro.h"
#include "kernels.h"

#define INLINE static inline __attribute__((always_inline))

INLINE float bf16f(uint16_t h)
{
	uint32_t u = (uint32_t) h << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

INLINE __m512bh load_bh(const uint16_t *p)
{
	return (__m512bh) _mm512_loadu_si512(p);
}

/* Horizontal sum in a fixed order (halves, then quarters, then pairs). */
INLINE float hsum16(__m512 v)
{
	__m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));

	s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
	s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
	return _mm_cvtss_f32(s4);
}

/* The scalar tail after the 32-value steps, in order. */
INLINE float tail(float sum, const uint16_t *a, const uint16_t *b, int64_t i, int64_t n)
{
	for (; i < n; i++)
		sum = fmaf(bf16f(a[i]), bf16f(b[i]), sum);
	return sum;
}

float quant_dot_bf16_avx512bf16(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w, *b = x;
	__m512 acc = _mm512_setzero_ps();
	int64_t i = 0;

	for (; i + 32 <= n; i += 32)
		acc = _mm512_dpbf16_ps(acc, load_bh(a + i), load_bh(b + i));
	return tail(hsum16(acc), a, b, i, n);
}

/* R rows x C tokens, one accumulator per pair (as kernels-avx512.c's float tiles). */
#define BT_R 4
#define BT_C 4

typedef void (*bt_fn)(int64_t n, const char *w, size_t ws, const char *x, size_t xs, float *y,
		      size_t ys);

INLINE void btile(const int R, const int C, int64_t n, const char *w, size_t ws, const char *x,
		  size_t xs, float *y, size_t ys)
{
	__m512 acc[BT_R * BT_C];
	int64_t i = 0;

	for (int k = 0; k < R * C; k++)
		acc[k] = _mm512_setzero_ps();
	for (; i + 32 <= n; i += 32) {
		__m512bh wv[BT_R];

		for (int r = 0; r < R; r++)
			wv[r] = load_bh((const uint16_t *) (w + (size_t) r * ws) + i);
		for (int c = 0; c < C; c++) {
			const __m512bh xv = load_bh((const uint16_t *) (x + (size_t) c * xs) + i);

			for (int r = 0; r < R; r++)
				acc[r * C + c] = _mm512_dpbf16_ps(acc[r * C + c], wv[r], xv);
		}
	}
	/* unrolled, or gcc keeps the accumulators in memory through the loop */
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			y[(size_t) c * ys + r] = tail(hsum16(acc[r * C + c]),
						      (const uint16_t *) (w + (size_t) r * ws),
						      (const uint16_t *) (x + (size_t) c * xs), i, n);
}

#define BT_DEFINE(R, C)                                                                           \
	static void bt_##R##x##C(int64_t n, const char *w, size_t ws, const char *x, size_t xs,     \
				 float *y, size_t ys)                                               \
	{                                                                                         \
		btile(R, C, n, w, ws, x, xs, y, ys);                                              \
	}
#define BT_ROW(R) BT_DEFINE(R, 1) BT_DEFINE(R, 2) BT_DEFINE(R, 3) BT_DEFINE(R, 4)
BT_ROW(1)
BT_ROW(2)
BT_ROW(3)
BT_ROW(4)

static const bt_fn bt_tiles[BT_R][BT_C] = {
	{ bt_1x1, bt_1x2, bt_1x3, bt_1x4 },
	{ bt_2x1, bt_2x2, bt_2x3, bt_2x4 },
	{ bt_3x1, bt_3x2, bt_3x3, bt_3x4 },
	{ bt_4x1, bt_4x2, bt_4x3, bt_4x4 },
};

void quant_gemm_bf16_avx512bf16(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
				size_t xs, int64_t nc, float *y, size_t ys)
{
	for (int64_t r = 0; r < nr; r += BT_R) {
		const int R = (int) MIN((int64_t) BT_R, nr - r);

		for (int64_t c = 0; c < nc; c += BT_C) {
			const int C = (int) MIN((int64_t) BT_C, nc - c);

			bt_tiles[R - 1][C - 1](n, (const char *) w + (size_t) r * ws, ws,
					       (const char *) x + (size_t) c * xs, xs, y + (size_t) c * ys + r, ys);
		}
	}
}

#endif /* __x86_64__ */
