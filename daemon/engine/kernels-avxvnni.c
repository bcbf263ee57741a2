/* SPDX-License-Identifier: MIT */
/*
 * kernels-avxvnni.c: the "avxvnni" level: the AVX2 level plus AVX-VNNI (vpdpbusd on 256-bit
 * registers, VEX-encoded: Alder Lake and later Intel cores, Zen 5; also CPUs with AVX-512
 * VNNI but without AVX-512 enabled). Compiled with -mavx2 -mfma -mf16c -mavxvnni; quant.c
 * calls it only when cpuid reports all of them (and the level is proven, see there).
 *
 * It differs from the AVX2 table only in the packed Q8_0/Q4_0 tile products (quant.h), the
 * kernels prefill spends its time in: one 8-row group per register, a token's 4 activation
 * bytes broadcast to the 8 lanes, and one vpdpbusd adds 4 products to each row, where AVX2
 * needs maddubs + madd + add (and the sign trick for Q8_0). Unsigned x signed bytes:
 *   Q4_0: the nibbles are unsigned as they are; the start value -8 * sum(y) takes Q4_0's
 *     offset off (sum(y): the block sums matmul() passes);
 *   Q8_0: w ^ 0x80 = w + 128 is unsigned; the start value is -128 * sum(y).
 * Exact integer identities: each row's block sum is the scalar reference's integer, then
 * acc = fma(float(sum), d_w * d_x, acc) per block in block order: the reference's bits.
 * Everything here is intrinsics (the file has -mavxvnni: compiler-vectorized C could use
 * VNNI where the AVX2 level must not — it has its own file).
 */
#if defined(__x86_64__)

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "../basic/macro.h"
#include "kernels.h"

#define INLINE static inline __attribute__((always_inline))
#define VTILE_C 6 /* 6 sums + 6 accumulators + weights + scales: the 16 ymm registers */

INLINE __m256i bcast4(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

INLINE void vtile(const int C, const bool q4, int64_t nb, const uint8_t *g, const char *x,
		  size_t xs, const int16_t *sums, float *y, size_t ys, int rows)
{
	const size_t bb = q4 ? QUANT_PACKED_Q4_0_BLOCK : QUANT_PACKED_Q8_0_BLOCK;
	const __m256i m4 = _mm256_set1_epi8(0xf), top = _mm256_set1_epi8((char) 0x80);
	__m256 acc[VTILE_C];

	for (int c = 0; c < C; c++)
		acc[c] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++, g += bb) {
		const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) g));
		__m256i isum[VTILE_C];

		for (size_t l = 0; l < bb; l += 64)
			_mm_prefetch((const char *) g + 1024 + l, _MM_HINT_T0);
		for (int c = 0; c < C; c++)
			isum[c] = _mm256_set1_epi32((q4 ? -8 : -128) * sums[(size_t) c * nb + b]);
		for (int k = 0; k < (q4 ? 4 : 8); k++) {
			const __m256i raw = _mm256_loadu_si256((const __m256i *) (g + 16 + 32 * k));
			const __m256i lo = q4 ? _mm256_and_si256(raw, m4) : _mm256_xor_si256(raw, top);
			const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);

			for (int c = 0; c < C; c++) {
				const int8_t *q = ((const struct block_q8_0 *) (x + (size_t) c * xs))[b].qs;

				isum[c] = _mm256_dpbusd_avx_epi32(isum[c], lo, bcast4(q + 4 * k));
				if (q4)
					isum[c] = _mm256_dpbusd_avx_epi32(isum[c], hi, bcast4(q + 16 + 4 * k));
			}
		}
		for (int c = 0; c < C; c++) {
			const struct block_q8_0 *bx = (const struct block_q8_0 *) (x + (size_t) c * xs) + b;
			const __m256 dx = _mm256_set1_ps(_cvtsh_ss(bx->d));

			acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(dw, dx), acc[c]);
		}
	}
	for (int c = 0; c < C; c++) {
		if (rows == 8) {
			_mm256_storeu_ps(y + (size_t) c * ys, acc[c]);
		} else {
			float t[8];

			_mm256_storeu_ps(t, acc[c]);
			memcpy(y + (size_t) c * ys, t, (size_t) rows * sizeof(float));
		}
	}
}

typedef void (*vtile_fn)(int64_t nb, const uint8_t *g, const char *x, size_t xs,
			 const int16_t *sums, float *y, size_t ys, int rows);

#define VTILE_DEFINE(C)                                                                           \
	static void vtile_q8_0_##C(int64_t nb, const uint8_t *g, const char *x, size_t xs,          \
				   const int16_t *sums, float *y, size_t ys, int rows)              \
	{                                                                                         \
		vtile(C, false, nb, g, x, xs, sums, y, ys, rows);                                 \
	}                                                                                         \
	static void vtile_q4_0_##C(int64_t nb, const uint8_t *g, const char *x, size_t xs,          \
				   const int16_t *sums, float *y, size_t ys, int rows)              \
	{                                                                                         \
		vtile(C, true, nb, g, x, xs, sums, y, ys, rows);                                  \
	}
VTILE_DEFINE(1)
VTILE_DEFINE(2)
VTILE_DEFINE(3)
VTILE_DEFINE(4)
VTILE_DEFINE(5)
VTILE_DEFINE(6)

static const vtile_fn vtiles_q8_0[VTILE_C] = { vtile_q8_0_1, vtile_q8_0_2, vtile_q8_0_3,
					       vtile_q8_0_4, vtile_q8_0_5, vtile_q8_0_6 };
static const vtile_fn vtiles_q4_0[VTILE_C] = { vtile_q4_0_1, vtile_q4_0_2, vtile_q4_0_3,
					       vtile_q4_0_4, vtile_q4_0_5, vtile_q4_0_6 };

/* Token tiles outermost: a tile's activations stay in L1 while it sweeps the row groups. */
static void vtile_drive(const vtile_fn *t, size_t block_bytes, int64_t n, const void *w,
			int64_t nr, const void *x, size_t xs, const int16_t *sums, int64_t nc,
			float *y, size_t ys)
{
	const int64_t nb = n / QK8_0;
	const size_t group_bytes = (size_t) nb * block_bytes;

	for (int64_t c = 0; c < nc; c += VTILE_C) {
		const int C = (int) MIN((int64_t) VTILE_C, nc - c);

		for (int64_t r = 0; r < nr; r += 8)
			t[C - 1](nb, (const uint8_t *) w + (size_t) (r / 8) * group_bytes,
				 (const char *) x + (size_t) c * xs, xs, sums + (size_t) c * nb,
				 y + (size_t) c * ys + r, ys, (int) MIN((int64_t) 8, nr - r));
	}
}

void quant_gemm_packed_q8_0_avxvnni(int64_t n, const void *w, int64_t nr, const void *x,
				     size_t xs, const int16_t *sums, int64_t nc, float *y, size_t ys)
{
	vtile_drive(vtiles_q8_0, QUANT_PACKED_Q8_0_BLOCK, n, w, nr, x, xs, sums, nc, y, ys);
}

void quant_gemm_packed_q4_0_avxvnni(int64_t n, const void *w, int64_t nr, const void *x,
				     size_t xs, const int16_t *sums, int64_t nc, float *y, size_t ys)
{
	vtile_drive(vtiles_q4_0, QUANT_PACKED_Q4_0_BLOCK, n, w, nr, x, xs, sums, nc, y, ys);
}

#endif /* __x86_64__ */
