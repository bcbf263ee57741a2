/* SPDX-License-Identifier: MIT */
/*
 * kernels-avx2.c: AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c, called only
 * when cpuid says the CPU has all three; see quant.c).
 *
 * Activation conversions are bit-identical to the scalar ones in quant.c: same float
 * products, rounding with _mm256_round_ps (ties to even, like rintf()), no fused
 * multiply-adds on their path. Dot products compute the same exact integer sums per
 * block; only the float accumulation order differs (8 lanes, then a horizontal sum).
 *
 * Signed x signed byte products use _mm256_maddubs_epi16 (unsigned x signed) with the
 * sign of the weight moved onto the activation: |w| * (y * sign(w)). That is exact as
 * long as the activation is never -128 (negating it would wrap), which holds because
 * every activation quantizer here produces -127..127 (-128 only for NaN input, or in a
 * block whose scale underflowed to 0, where the products do not matter); weights may be
 * -128 (|w| = 128 is a valid unsigned byte). Pair sums stay below 2 * 128 * 127 < 32767, so
 * no saturation.
 *
 * Besides the per-row kernels of the table, the file holds what matmul() runs (quant.h):
 * tile products on the GGUF layout (quant_gemm(): R rows x C tokens per step), tile products
 * on weights repacked 8 rows to a register (quant_gemm_packed(); F32 in 16-row groups, two
 * registers), and attention's scores, weighted sum and softmax. The AVX-512 tables use some
 * of these too (kernels-avx512.c says which), the "avxvnni" one all but the packed Q tiles.
 */
#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "../basic/macro.h"
#include "exp-avx2.h"
#include "kernels.h"

static inline float hsum_f32x8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static inline int hsum_i32x8(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));

	s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(s);
}

static inline float hmax_f32x8(__m256 v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

static inline float fp16(uint16_t h)
{
	return _cvtsh_ss(h);
}

/* Signed bytes w . y summed in pairs twice: 8 int32 lanes. See the file comment. */
static inline __m256i dot_i8x32(__m256i w, __m256i y)
{
	const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));

	return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* Four vectors of 8 int32 (already within int8 range) into 32 bytes in order. */
static inline __m256i pack_i32x32_i8(__m256i a, __m256i b, __m256i c, __m256i d)
{
	/* packs works per 128-bit lane: the result holds 4-byte groups a0 b0 c0 d0 a1 b1 c1 d1
	 * (x0 = elements 0-3 of x, x1 = 4-7); the permute restores a0 a1 b0 b1 ... */
	const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));

	return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ---- activation conversions ---- */

static void quantize_f16_avx2(const float *x, void *dst, int64_t n)
{
	uint16_t *y = dst;
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *) (y + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

/* bf16 with round to nearest even, NaN kept NaN: the scalar f32_to_bf16() on 8 lanes. */
static inline __m256i f32x8_to_bf16(__m256 v)
{
	const __m256i u = _mm256_castps_si256(v);
	const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	const __m256i rounded = _mm256_srli_epi32(
		_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
	const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
	const __m256i is_nan = _mm256_cmpgt_epi32(
		_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));

	return _mm256_blendv_epi8(rounded, nan, is_nan);
}

static void quantize_bf16_avx2(const float *x, void *dst, int64_t n)
{
	uint16_t *y = dst;
	int64_t i = 0;

	for (; i + 16 <= n; i += 16) {
		const __m256i a = f32x8_to_bf16(_mm256_loadu_ps(x + i));
		const __m256i b = f32x8_to_bf16(_mm256_loadu_ps(x + i + 8));
		/* packus per 128-bit lane gives a0 b0 a1 b1 (4 values each); 0xd8 = 0 2 1 3 */
		const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);

		_mm256_storeu_si256((__m256i *) (y + i), p);
	}
	for (; i < n; i++)
		y[i] = f32_to_bf16(x[i]);
}

static void quantize_q8_0_avx2(const float *x, void *dst, int64_t n)
{
	struct block_q8_0 *y = dst;
	const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));

	for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
		__m256 v[4], amax = _mm256_setzero_ps();

		for (int k = 0; k < 4; k++) {
			v[k] = _mm256_loadu_ps(x + 8 * k);
			amax = _mm256_max_ps(_mm256_and_ps(v[k], abs_mask), amax); /* NaN: keeps amax */
		}
		const float max = hmax_f32x8(amax);
		y[i].d = _cvtss_sh(max / 127.f, _MM_FROUND_TO_NEAREST_INT);
		const __m256 id = _mm256_set1_ps(max != 0.f ? 127.f / max : 0.f);

		__m256i q[4];
		for (int k = 0; k < 4; k++)
			q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], id), ROUND_NEAREST));
		_mm256_storeu_si256((__m256i *) y[i].qs, pack_i32x32_i8(q[0], q[1], q[2], q[3]));
	}
}

static void quantize_q8_K_avx2(const float *x, void *dst, int64_t n)
{
	struct block_q8_K *y = dst;
	const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		__m256 amax8 = _mm256_setzero_ps();

		for (int j = 0; j < QK_K; j += 8)
			amax8 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask), amax8);
		const float amax = hmax_f32x8(amax8);
		if (amax == 0.f) {
			memset(&y[i], 0, sizeof(y[i]));
			continue;
		}

		/* the scale comes from the first value of that magnitude, with its sign */
		int first = 0;
		const __m256 vamax = _mm256_set1_ps(amax);
		for (int j = 0; j < QK_K; j += 8) {
			const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask);
			const int mask = _mm256_movemask_ps(_mm256_cmp_ps(a, vamax, _CMP_EQ_OQ));
			if (mask) {
				first = j + __builtin_ctz((unsigned) mask);
				break;
			}
		}
		const float iscale = -127.f / x[first];
		const __m256 vscale = _mm256_set1_ps(iscale);
		const __m256i max127 = _mm256_set1_epi32(127), min128 = _mm256_set1_epi32(-128);

		for (int j = 0; j < QK_K; j += 32) {
			__m256i q[4];

			for (int k = 0; k < 4; k++) {
				const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vscale);
				const __m256i r = _mm256_cvtps_epi32(_mm256_round_ps(v, ROUND_NEAREST));
				/* saturate now (not only in the pack), so bsums sum the stored bytes */
				q[k] = _mm256_max_epi32(_mm256_min_epi32(r, max127), min128);
			}
			y[i].bsums[j / 16] = (int16_t) hsum_i32x8(_mm256_add_epi32(q[0], q[1]));
			y[i].bsums[j / 16 + 1] = (int16_t) hsum_i32x8(_mm256_add_epi32(q[2], q[3]));
			_mm256_storeu_si256((__m256i *) (y[i].qs + j), pack_i32x32_i8(q[0], q[1], q[2], q[3]));
		}
		y[i].d = 1.f / iscale;
	}
}

/* ---- float dot products ---- */

static float dot_f32_avx2(int64_t n, const void *w, const void *x)
{
	const float *a = w, *b = x;
	__m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			  _mm256_setzero_ps() };
	int64_t i = 0;

	for (; i + 32 <= n; i += 32)
		for (int k = 0; k < 4; k++)
			acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k),
						 _mm256_loadu_ps(b + i + 8 * k), acc[k]);
	for (; i + 8 <= n; i += 8)
		acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
	float sum = hsum_f32x8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
					     _mm256_add_ps(acc[2], acc[3])));
	for (; i < n; i++)
		sum += a[i] * b[i];
	return sum;
}

static inline __m256 load_f16x8(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p));
}

static float dot_f16_avx2(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w, *b = x;
	__m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			  _mm256_setzero_ps() };
	int64_t i = 0;

	for (; i + 32 <= n; i += 32)
		for (int k = 0; k < 4; k++)
			acc[k] = _mm256_fmadd_ps(load_f16x8(a + i + 8 * k), load_f16x8(b + i + 8 * k),
						 acc[k]);
	for (; i + 8 <= n; i += 8)
		acc[0] = _mm256_fmadd_ps(load_f16x8(a + i), load_f16x8(b + i), acc[0]);
	float sum = hsum_f32x8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
					     _mm256_add_ps(acc[2], acc[3])));
	for (; i < n; i++)
		sum += fp16(a[i]) * fp16(b[i]);
	return sum;
}

static inline __m256 load_bf16x8(const uint16_t *p)
{
	const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) p));

	return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

static float dot_bf16_avx2(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w, *b = x;
	__m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			  _mm256_setzero_ps() };
	int64_t i = 0;

	for (; i + 32 <= n; i += 32)
		for (int k = 0; k < 4; k++)
			acc[k] = _mm256_fmadd_ps(load_bf16x8(a + i + 8 * k), load_bf16x8(b + i + 8 * k),
						 acc[k]);
	for (; i + 8 <= n; i += 8)
		acc[0] = _mm256_fmadd_ps(load_bf16x8(a + i), load_bf16x8(b + i), acc[0]);
	float sum = hsum_f32x8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
					     _mm256_add_ps(acc[2], acc[3])));
	for (; i < n; i++)
		sum += bf16_to_f32(a[i]) * bf16_to_f32(b[i]);
	return sum;
}

/* ---- quantized dot products ---- */

static float dot_q8_0_avx2(int64_t n, const void *w, const void *x)
{
	const struct block_q8_0 *a = w, *b = x;
	const int64_t nb = n / QK8_0;
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	int64_t i = 0;

	/* two blocks per step into two accumulators, to overlap the FMA latency */
	for (; i + 2 <= nb; i += 2) {
		const __m256i p0 = dot_i8x32(_mm256_loadu_si256((const __m256i *) a[i].qs),
					     _mm256_loadu_si256((const __m256i *) b[i].qs));
		const __m256i p1 = dot_i8x32(_mm256_loadu_si256((const __m256i *) a[i + 1].qs),
					     _mm256_loadu_si256((const __m256i *) b[i + 1].qs));
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(a[i].d) * fp16(b[i].d)),
				       _mm256_cvtepi32_ps(p0), acc0);
		acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(a[i + 1].d) * fp16(b[i + 1].d)),
				       _mm256_cvtepi32_ps(p1), acc1);
	}
	if (i < nb) {
		const __m256i p0 = dot_i8x32(_mm256_loadu_si256((const __m256i *) a[i].qs),
					     _mm256_loadu_si256((const __m256i *) b[i].qs));
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(a[i].d) * fp16(b[i].d)),
				       _mm256_cvtepi32_ps(p0), acc0);
	}
	return hsum_f32x8(_mm256_add_ps(acc0, acc1));
}

/* 16 bytes of nibbles into 32 signed levels -8..7: low nibbles first, then high ones. */
static inline __m256i unpack_q4_0(const uint8_t *qs)
{
	const __m128i t = _mm_loadu_si128((const __m128i *) qs);
	const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t),
					     _mm256_set1_epi8(0xf));

	return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
}

static float dot_q4_0_avx2(int64_t n, const void *w, const void *x)
{
	const struct block_q4_0 *a = w;
	const struct block_q8_0 *b = x;
	const int64_t nb = n / QK4_0;
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	int64_t i = 0;

	for (; i + 2 <= nb; i += 2) {
		const __m256i p0 = dot_i8x32(unpack_q4_0(a[i].qs),
					     _mm256_loadu_si256((const __m256i *) b[i].qs));
		const __m256i p1 = dot_i8x32(unpack_q4_0(a[i + 1].qs),
					     _mm256_loadu_si256((const __m256i *) b[i + 1].qs));
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(a[i].d) * fp16(b[i].d)),
				       _mm256_cvtepi32_ps(p0), acc0);
		acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(a[i + 1].d) * fp16(b[i + 1].d)),
				       _mm256_cvtepi32_ps(p1), acc1);
	}
	if (i < nb) {
		const __m256i p0 = dot_i8x32(unpack_q4_0(a[i].qs),
					     _mm256_loadu_si256((const __m256i *) b[i].qs));
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(a[i].d) * fp16(b[i].d)),
				       _mm256_cvtepi32_ps(p0), acc0);
	}
	return hsum_f32x8(_mm256_add_ps(acc0, acc1));
}

/* pshufb patterns over 16-bit lanes: PICK(a, b) repeats int16 a of the low 128-bit lane 8
 * times there and int16 b of the high lane 8 times there. */
#define PICK2(a) (2 * (a)), (2 * (a) + 1)
#define PICK8(a) PICK2(a), PICK2(a), PICK2(a), PICK2(a), PICK2(a), PICK2(a), PICK2(a), PICK2(a)
#define PICK(a, b) { PICK8(a), PICK8(b) }

/* An empty asm that "changes" v: the compiler must materialise v here and cannot reorder
 * the arithmetic across it. */
#define REG_BARRIER(v) __asm__("" : "+x"(v))

/* Tokens per K-quant row tile (the tables below hold tiles of 1..KQ_TILE_C tokens). */
#define KQ_TILE_C 4

/*
 * Q4_K: per 64 values, 32 bytes of nibbles (low = sub-block 2j, high = 2j+1) against 64
 * activation bytes. Nibbles are unsigned, so maddubs takes them directly; the 16-bit pair
 * sums (at most 2 * 15 * 128) are scaled by the 6-bit sub-block scale in the madd. The
 * mins term uses the activation's bsums: sum_j m_j * (bsums[2j] + bsums[2j+1]).
 *
 * One weight row against C tokens (out[c]), as kernels-avx512.c does: each 64-value step's
 * nibbles and scale vectors are made once for the C tokens, whose integer sums stay in
 * registers through the super-block (16 ymm registers: 4 tokens). Per token the float
 * operations are the dot's, in its order, and integer sums do not depend on the order they
 * are added in, so a pair's result is the same in any tile; the dot is the one-token tile.
 */
static inline __attribute__((always_inline)) void
q4_K_tile(const int C, int64_t n, const void *w, const char *x, size_t xs, float *out)
{
	static const uint8_t pick[8][32] = { PICK(0, 0), PICK(1, 1), PICK(2, 2), PICK(3, 3),
					     PICK(4, 4), PICK(5, 5), PICK(6, 6), PICK(7, 7) };
	const struct block_q4_K *a = w;
	const __m256i m4 = _mm256_set1_epi8(0xf);
	__m256 acc[KQ_TILE_C];
	__m128 acc_m[KQ_TILE_C];

	for (int c = 0; c < C; c++) {
		acc[c] = _mm256_setzero_ps();
		acc_m[c] = _mm_setzero_ps();
	}
	for (int64_t i = 0; i < n / QK_K; i++) {
		uint32_t words[4];
		__m256i sumi[KQ_TILE_C];

		q4_K_scales_words(a[i].scales, words);
		const __m128i scm = _mm_loadu_si128((const __m128i *) words); /* 8 scales, 8 mins */
		const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
		const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(scm, 8));
		const float dmin = fp16(a[i].dmin);

		for (int c = 0; c < C; c++) {
			const struct block_q8_K *b = (const struct block_q8_K *) (x + (size_t) c * xs) + i;
			/* mins: 8 int16 mins times the 8 sums of 32 activations */
			const __m128i bs_lo = _mm_loadu_si128((const __m128i *) b->bsums);
			const __m128i bs_hi = _mm_loadu_si128((const __m128i *) (b->bsums + 8));
			const __m128i ysum32 = _mm_hadd_epi16(bs_lo, bs_hi); /* |.| <= 32 * 127 */
			const __m128i pm = _mm_madd_epi16(mins, ysum32);

			acc_m[c] = _mm_fmadd_ps(_mm_set1_ps(dmin * b->d), _mm_cvtepi32_ps(pm), acc_m[c]);
			sumi[c] = _mm256_setzero_si256();
		}
		for (int j = 0; j < QK_K / 64; j++) {
			const __m256i bits = _mm256_loadu_si256((const __m256i *) (a[i].qs + 32 * j));
			const __m256i lo = _mm256_and_si256(bits, m4);
			const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
			const __m256i sc_lo = _mm256_shuffle_epi8(
				scales, _mm256_loadu_si256((const __m256i *) pick[2 * j]));
			const __m256i sc_hi = _mm256_shuffle_epi8(
				scales, _mm256_loadu_si256((const __m256i *) pick[2 * j + 1]));

			for (int c = 0; c < C; c++) {
				const int8_t *q8 = ((const struct block_q8_K *) (x + (size_t) c * xs) + i)->qs + 64 * j;
				const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *) q8));
				const __m256i phi = _mm256_maddubs_epi16(hi,
									 _mm256_loadu_si256((const __m256i *) (q8 + 32)));

				sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(plo, sc_lo));
				sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(phi, sc_hi));
				/* otherwise gcc loads the super-block's activations ahead for every
				 * token and spills them (REG_BARRIER, as in ptile_q4_0) */
				if (C > 1)
					REG_BARRIER(sumi[c]);
			}
		}
		const float dw = fp16(a[i].d);

		for (int c = 0; c < C; c++) {
			const struct block_q8_K *b = (const struct block_q8_K *) (x + (size_t) c * xs) + i;

			acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * b->d), _mm256_cvtepi32_ps(sumi[c]),
						 acc[c]);
		}
	}
	for (int c = 0; c < C; c++) {
		__m128 m = _mm_add_ps(acc_m[c], _mm_movehl_ps(acc_m[c], acc_m[c]));

		m = _mm_add_ss(m, _mm_movehdup_ps(m));
		out[c] = hsum_f32x8(acc[c]) - _mm_cvtss_f32(m);
	}
}

static float dot_q4_K_avx2(int64_t n, const void *w, const void *x)
{
	float out;

	q4_K_tile(1, n, w, (const char *) x, 0, &out);
	return out;
}

/* A K-quant row tile: one row against C tokens (C from the table index), out[c]. */
typedef void (*kq_tile_fn)(int64_t n, const void *w, const char *x, size_t xs, float *out);

/* kind: q4_K or q6_K (its kind##_tile()) */
#define KQ_TILE_DEFINE(kind, C)                                                                   \
	static void kind##_tile_##C(int64_t n, const void *w, const char *x, size_t xs, float *out) \
	{                                                                                         \
		kind##_tile(C, n, w, x, xs, out);                                                 \
	}
#define KQ_TILE_TABLE(kind)                                                                       \
	KQ_TILE_DEFINE(kind, 1)                                                                   \
	KQ_TILE_DEFINE(kind, 2)                                                                   \
	KQ_TILE_DEFINE(kind, 3)                                                                   \
	KQ_TILE_DEFINE(kind, 4)                                                                   \
	static const kq_tile_fn kind##_tiles[KQ_TILE_C] = { kind##_tile_1, kind##_tile_2,       \
							    kind##_tile_3, kind##_tile_4 };

KQ_TILE_TABLE(q4_K)

/* Rows outermost: a row stays in L1 while its token tiles sweep the activations. */
static void kq_drive(const kq_tile_fn *t, int64_t n, const void *w, size_t ws, int64_t nr,
		     const void *x, size_t xs, int64_t nc, float *y, size_t ys)
{
	for (int64_t r = 0; r < nr; r++)
		for (int64_t c = 0; c < nc; c += KQ_TILE_C) {
			const int C = (int) MIN((int64_t) KQ_TILE_C, nc - c);
			float out[KQ_TILE_C];

			t[C - 1](n, (const char *) w + (size_t) r * ws, (const char *) x + (size_t) c * xs,
				 xs, out);
			for (int k = 0; k < C; k++)
				y[(size_t) (c + k) * ys + (size_t) r] = out[k];
		}
}

void quant_gemm_q4_K_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			  size_t xs, int64_t nc, float *y, size_t ys)
{
	kq_drive(q4_K_tiles, n, w, ws, nr, x, xs, nc, y, ys);
}

/*
 * Q6_K: per 128 values, 64 bytes ql + 32 bytes qh give four runs of 32 unsigned levels
 * 0..63 (values l, l+32, l+64, l+96 share qh[l]). maddubs takes them unsigned (pair sums
 * at most 2 * 63 * 128); the -32 offset is applied once per block through bsums:
 * sum_g sc_g * sum((q - 32) y) = sum_g sc_g * (q . y)_g - 32 * sum_g sc_g * bsums[g].
 */
/* One row against C tokens, as q4_K_tile(): each run's 6-bit levels and scale vector made
 * once for the C tokens; per token the dot's float operations in its order. */
static inline __attribute__((always_inline)) void
q6_K_tile(const int C, int64_t n, const void *w, const char *x, size_t xs, float *out)
{
	/* run k of a half covers scale groups 2k (low 128-bit lane) and 2k+1 (high lane) */
	static const uint8_t pick[4][32] = { PICK(0, 1), PICK(2, 3), PICK(4, 5), PICK(6, 7) };
	const struct block_q6_K *a = w;
	const __m256i m4 = _mm256_set1_epi8(0xf), m2 = _mm256_set1_epi8(3);
	__m256 acc[KQ_TILE_C];

	for (int c = 0; c < C; c++)
		acc[c] = _mm256_setzero_ps();
	for (int64_t i = 0; i < n / QK_K; i++) {
		const __m128i scales8 = _mm_loadu_si128((const __m128i *) a[i].scales);
		const __m256i scales16 = _mm256_cvtepi8_epi16(scales8);
		__m256i sumi[KQ_TILE_C];

		for (int c = 0; c < C; c++) {
			const struct block_q8_K *b = (const struct block_q8_K *) (x + (size_t) c * xs) + i;
			const __m256i bsums = _mm256_loadu_si256((const __m256i *) b->bsums);

			/* 32 * sum_g sc_g * bsums[g], spread over 8 lanes */
			sumi[c] = _mm256_sub_epi32(_mm256_setzero_si256(),
						   _mm256_slli_epi32(_mm256_madd_epi16(scales16, bsums), 5));
		}
		for (int h = 0; h < QK_K / 128; h++) {
			const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
			/* this half's 8 scales as int16, in both 128-bit lanes */
			const __m256i sc16 = _mm256_broadcastsi128_si256(
				_mm_cvtepi8_epi16(h ? _mm_srli_si128(scales8, 8) : scales8));
			const __m256i l0 = _mm256_loadu_si256((const __m256i *) ql);
			const __m256i l1 = _mm256_loadu_si256((const __m256i *) (ql + 32));
			const __m256i hb = _mm256_loadu_si256((const __m256i *) qh);

			for (int k = 0; k < 4; k++) {
				const __m256i l = k & 1 ? l1 : l0;
				const __m256i q = _mm256_or_si256(
					_mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), m4),
					_mm256_slli_epi16(_mm256_and_si256(k ? _mm256_srli_epi16(hb, 2 * k) : hb, m2), 4));
				const __m256i sc = _mm256_shuffle_epi8(
					sc16, _mm256_loadu_si256((const __m256i *) pick[k]));

				for (int c = 0; c < C; c++) {
					const int8_t *q8 = ((const struct block_q8_K *) (x + (size_t) c * xs) + i)->qs +
							   128 * h + 32 * k;
					const __m256i p16 = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *) q8));

					sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p16, sc));
					if (C > 1)
						REG_BARRIER(sumi[c]);
				}
			}
		}
		const float dw = fp16(a[i].d);

		for (int c = 0; c < C; c++) {
			const struct block_q8_K *b = (const struct block_q8_K *) (x + (size_t) c * xs) + i;

			acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * b->d), _mm256_cvtepi32_ps(sumi[c]),
						 acc[c]);
		}
	}
	for (int c = 0; c < C; c++)
		out[c] = hsum_f32x8(acc[c]);
}

static float dot_q6_K_avx2(int64_t n, const void *w, const void *x)
{
	float out;

	q6_K_tile(1, n, w, (const char *) x, 0, &out);
	return out;
}

KQ_TILE_TABLE(q6_K)

void quant_gemm_q6_K_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			  size_t xs, int64_t nc, float *y, size_t ys)
{
	kq_drive(q6_K_tiles, n, w, ws, nr, x, xs, nc, y, ys);
}

/* ---- tile products (matmul) ----
 *
 * A tile is R weight rows x C activation rows (tokens). Every (row, token) pair has its own
 * 8-lane float accumulator, updated once per block (Q8_0, Q4_0) or per 8 values (F32, F16)
 * by the same instructions in the same order whatever R and C are, then reduced by the same
 * horizontal sum: a pair's result does not depend on which tile computed it (matmul.h
 * promises results independent of the batch and the thread count). What a tile saves is
 * the per-row and per-token work — loads, |w| for the sign trick, fp16 scale conversions —
 * done once per block for the tile instead of once per pair.
 *
 * Each shape R x C (1..TILE_MAX each) is its own function, generated from one always-inline
 * body with constant R and C, so the accumulators live in registers.
 */
#define INLINE static inline __attribute__((always_inline))
#define TILE_MAX 4

typedef void (*tile_fn)(int64_t n, const char *w, size_t ws, const char *x, size_t xs, float *y,
			size_t ys);

/* An fp16 scale, converted and broadcast to 8 lanes. */
INLINE __m256 fp16_bcast(uint16_t h)
{
	return _mm256_cvtph_ps(_mm_set1_epi16((short) h));
}

/* One block of a Q8_0 or Q4_0 (q4) tile into the accumulators acc. */
INLINE void tile_q8_block(const int R, const int C, const bool q4, int64_t b, const char *w,
			  size_t ws, const char *x, size_t xs, __m256 acc[TILE_MAX][TILE_MAX])
{
	const size_t wbytes = q4 ? sizeof(struct block_q4_0) : sizeof(struct block_q8_0);
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i wv[TILE_MAX], aw[TILE_MAX];
	__m256 dw[TILE_MAX];

	for (int r = 0; r < R; r++) {
		const char *blk = w + (size_t) r * ws + (size_t) b * wbytes;

		if (q4) {
			const struct block_q4_0 *a = (const struct block_q4_0 *) blk;
			wv[r] = unpack_q4_0(a->qs);
			dw[r] = fp16_bcast(a->d);
		} else {
			const struct block_q8_0 *a = (const struct block_q8_0 *) blk;
			wv[r] = _mm256_loadu_si256((const __m256i *) a->qs);
			dw[r] = fp16_bcast(a->d);
		}
		aw[r] = _mm256_sign_epi8(wv[r], wv[r]);
	}
	for (int c = 0; c < C; c++) {
		const struct block_q8_0 *bx = (const struct block_q8_0 *) (x + (size_t) c * xs) + b;
		const __m256i yv = _mm256_loadu_si256((const __m256i *) bx->qs);
		const __m256 dx = fp16_bcast(bx->d);

		for (int r = 0; r < R; r++) {
			const __m256i p = _mm256_madd_epi16(
				_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(yv, wv[r])), ones);

			acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p),
						    acc[r][c]);
		}
	}
}

/*
 * Q8_0 or Q4_0 weights (q4) against Q8_0 activations. Per pair this is exactly
 * dot_q8_0_avx2() / dot_q4_0_avx2(): even blocks into one accumulator, odd ones into another,
 * then hsum(acc0 + acc1) — the order whose logits the reference tests were tuned on (a
 * different order moves some activations across a Q8_0 rounding boundary in the next layer,
 * which on the tiny Q4_0 model shifts the logits by 3e-2).
 */
INLINE void tile_q8(const int R, const int C, const bool q4, int64_t n, const char *w, size_t ws,
		    const char *x, size_t xs, float *y, size_t ys)
{
	const int64_t nb = n / QK8_0;
	__m256 acc0[TILE_MAX][TILE_MAX], acc1[TILE_MAX][TILE_MAX];
	int64_t b = 0;

	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc0[r][c] = acc1[r][c] = _mm256_setzero_ps();
	for (; b + 2 <= nb; b += 2) {
		tile_q8_block(R, C, q4, b, w, ws, x, xs, acc0);
		tile_q8_block(R, C, q4, b + 1, w, ws, x, xs, acc1);
	}
	if (b < nb)
		tile_q8_block(R, C, q4, b, w, ws, x, xs, acc0);
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			y[(size_t) c * ys + r] = hsum_f32x8(_mm256_add_ps(acc0[r][c], acc1[r][c]));
}

/* The float types of tile_flt(): weights and activations are of the same one. */
enum flt { FLT_F32, FLT_F16, FLT_BF16 };

INLINE __m256 load_flt8(const enum flt t, const char *p)
{
	return t == FLT_F16    ? load_f16x8((const uint16_t *) p)
	       : t == FLT_BF16 ? load_bf16x8((const uint16_t *) p)
			       : _mm256_loadu_ps((const float *) p);
}

INLINE float load_flt(const enum flt t, const char *p, int64_t k)
{
	return t == FLT_F16    ? fp16(((const uint16_t *) p)[k])
	       : t == FLT_BF16 ? bf16_to_f32(((const uint16_t *) p)[k])
			       : ((const float *) p)[k];
}

/* F32, F16 or BF16 weights against activations of the same type; any n (a scalar tail). */
INLINE void tile_flt(const int R, const int C, const enum flt t, int64_t n, const char *w,
		     size_t ws, const char *x, size_t xs, float *y, size_t ys)
{
	const size_t vb = t == FLT_F32 ? 4 : 2;
	__m256 acc[TILE_MAX][TILE_MAX];
	int64_t i = 0;

	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm256_setzero_ps();
	for (; i + 8 <= n; i += 8) {
		__m256 wv[TILE_MAX];

		for (int r = 0; r < R; r++)
			wv[r] = load_flt8(t, w + (size_t) r * ws + (size_t) i * vb);
		for (int c = 0; c < C; c++) {
			const __m256 xv = load_flt8(t, x + (size_t) c * xs + (size_t) i * vb);

			for (int r = 0; r < R; r++)
				acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
		}
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			const char *wr = w + (size_t) r * ws, *xc = x + (size_t) c * xs;
			float s = hsum_f32x8(acc[r][c]);

			for (int64_t k = i; k < n; k++)
				s = fmaf(load_flt(t, wr, k), load_flt(t, xc, k), s);
			y[(size_t) c * ys + r] = s;
		}
}

#define TILE_DEFINE(name, body, arg, R, C)                                                        \
	static void name##_##R##x##C(int64_t n, const char *w, size_t ws, const char *x, size_t xs, \
				     float *y, size_t ys)                                           \
	{                                                                                         \
		body(R, C, arg, n, w, ws, x, xs, y, ys);                                          \
	}
#define TILE_ROW(name, body, arg, R)                                                              \
	TILE_DEFINE(name, body, arg, R, 1)                                                        \
	TILE_DEFINE(name, body, arg, R, 2)                                                        \
	TILE_DEFINE(name, body, arg, R, 3)                                                        \
	TILE_DEFINE(name, body, arg, R, 4)
#define TILE_TABLE(name, body, arg)                                                               \
	TILE_ROW(name, body, arg, 1)                                                              \
	TILE_ROW(name, body, arg, 2)                                                              \
	TILE_ROW(name, body, arg, 3)                                                              \
	TILE_ROW(name, body, arg, 4)                                                              \
	static const tile_fn name[TILE_MAX][TILE_MAX] = {                                         \
		{ name##_1x1, name##_1x2, name##_1x3, name##_1x4 },                               \
		{ name##_2x1, name##_2x2, name##_2x3, name##_2x4 },                               \
		{ name##_3x1, name##_3x2, name##_3x3, name##_3x4 },                               \
		{ name##_4x1, name##_4x2, name##_4x3, name##_4x4 },                               \
	};

TILE_TABLE(tiles_q8_0, tile_q8, false)
TILE_TABLE(tiles_q4_0, tile_q8, true)
TILE_TABLE(tiles_f32, tile_flt, FLT_F32)
TILE_TABLE(tiles_f16, tile_flt, FLT_F16)
TILE_TABLE(tiles_bf16, tile_flt, FLT_BF16)

/* Covers nr x nc with tiles of rt x ct (smaller ones at the edges), row tiles outermost: a
 * tile's weight rows stay in L1 while it sweeps the tokens. */
INLINE void tile_drive(const tile_fn t[TILE_MAX][TILE_MAX], int rt, int ct, int64_t n,
		       const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
		       float *y, size_t ys)
{
	for (int64_t r = 0; r < nr; r += rt) {
		const int R = (int) MIN((int64_t) rt, nr - r);

		for (int64_t c = 0; c < nc; c += ct) {
			const int C = (int) MIN((int64_t) ct, nc - c);

			t[R - 1][C - 1](n, (const char *) w + (size_t) r * ws, ws,
					(const char *) x + (size_t) c * xs, xs, y + (size_t) c * ys + r, ys);
		}
	}
}

/* Tile shapes, measured on Zen 3 (single core, 2048-value rows, 256 rows x 64 tokens; see
 * docs/PERFORMANCE.md): one token (decode) takes 4 rows at a time; batches take 4 rows x 4
 * tokens for Q8_0/Q4_0 (Q8_0: 24.6 GMAC/s against 16.1 for quant_vec_dot() pair by pair) and
 * 3 x 4 for F32/F16 (31 GMAC/s, 66% of the core's FMA peak; 4 x 4 runs out of registers). */
void quant_gemm_q8_0_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			  size_t xs, int64_t nc, float *y, size_t ys)
{
	if (nc == 1)
		tile_drive(tiles_q8_0, 4, 1, n, w, ws, nr, x, xs, nc, y, ys);
	else
		tile_drive(tiles_q8_0, 4, 4, n, w, ws, nr, x, xs, nc, y, ys);
}

void quant_gemm_q4_0_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			  size_t xs, int64_t nc, float *y, size_t ys)
{
	if (nc == 1)
		tile_drive(tiles_q4_0, 4, 1, n, w, ws, nr, x, xs, nc, y, ys);
	else
		tile_drive(tiles_q4_0, 4, 4, n, w, ws, nr, x, xs, nc, y, ys);
}

void quant_gemm_f32_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			 size_t xs, int64_t nc, float *y, size_t ys)
{
	if (nc == 1)
		tile_drive(tiles_f32, 4, 1, n, w, ws, nr, x, xs, nc, y, ys);
	else
		tile_drive(tiles_f32, 3, 4, n, w, ws, nr, x, xs, nc, y, ys);
}

void quant_gemm_f16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			 size_t xs, int64_t nc, float *y, size_t ys)
{
	if (nc == 1)
		tile_drive(tiles_f16, 4, 1, n, w, ws, nr, x, xs, nc, y, ys);
	else
		tile_drive(tiles_f16, 3, 4, n, w, ws, nr, x, xs, nc, y, ys);
}

/* BF16 as F16 (the conversion is a widening and a shift), 3 x 4 the best tile: 10 -> 24 GMAC/s
 * on one Zen 3 core against the pair-by-pair dots (molly-bench --kernels; 3 x 3, 2 x 4 and
 * 4 x 2: 19-21; docs/PERFORMANCE.md, session 10). */
static void gemm_bf16_avx2(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			   size_t xs, int64_t nc, float *y, size_t ys)
{
	if (nc == 1)
		tile_drive(tiles_bf16, 4, 1, n, w, ws, nr, x, xs, nc, y, ys);
	else
		tile_drive(tiles_bf16, 3, 4, n, w, ws, nr, x, xs, nc, y, ys);
}

/* ---- packed (repacked at load) Q8_0 and Q4_0: 8 rows interleaved (quant.h) ----
 *
 * One 256-bit register holds 4 consecutive values of each of 8 rows; a token's 4 matching
 * activation bytes are broadcast to all 8 lanes, so the integer sums land with one row per
 * lane: no horizontal sums, and one float multiply-add per block serves 8 rows. A block's
 * integer sums are exact, and each row's lane then takes acc = fma(isum, dw * dx, acc) in
 * block order, which the scalar reference (quant.c) reproduces bit for bit.
 *
 * Q8_0: per 4-value chunk and token, sign + maddubs + madd + add (the sign trick, as above).
 * Q4_0: the nibbles stay unsigned (0..15): maddubs(q, y) needs no sign trick, and its pair
 * sums (at most 2*15*127) can be added in 16 bits over a whole block (8 chunks: 30480 <
 * 32767) before one madd; the -8 offset is taken off once per block as 8 * sum(y).
 */
#define PTILE_C 6

/*
 * Software prefetch PREFETCH_BYTES ahead of the weight stream. A group is one sequential
 * stream that the hardware prefetcher follows, but on the Zen 3 VM we measure, decode (one
 * token: memory-bound) reached ~0.78 of the machine's plain read bandwidth without it and
 * ~0.9 with it (interleaved runs, median; 512-4096 bytes tried, 1024 best).
 */
#define PREFETCH_BYTES 1024

INLINE void prefetch_ahead(const uint8_t *g, size_t block_bytes)
{
	for (size_t l = 0; l < block_bytes; l += 64)
		_mm_prefetch((const char *) g + PREFETCH_BYTES + l, _MM_HINT_T0);
}

INLINE void ptile_q8_0(const int C, int64_t nb, const uint8_t *g, const char *x, size_t xs,
		       float *y, size_t ys, int rows)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256 acc[PTILE_C];

	for (int c = 0; c < C; c++)
		acc[c] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++, g += QUANT_PACKED_Q8_0_BLOCK) {
		prefetch_ahead(g, QUANT_PACKED_Q8_0_BLOCK);
		const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) g));
		__m256i isum[PTILE_C];

		for (int c = 0; c < C; c++)
			isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++) {
			const __m256i w = _mm256_loadu_si256((const __m256i *) (g + 16 + 32 * k));
			const __m256i aw = _mm256_sign_epi8(w, w);

			for (int c = 0; c < C; c++) {
				const struct block_q8_0 *bx = (const struct block_q8_0 *) (x + (size_t) c * xs) + b;
				int32_t y4;

				memcpy(&y4, bx->qs + 4 * k, 4);
				const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(y4), w));
				isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, ones));
				if (C > 2)
					REG_BARRIER(isum[c]); /* as in ptile_q4_0 */
			}
		}
		for (int c = 0; c < C; c++) {
			const struct block_q8_0 *bx = (const struct block_q8_0 *) (x + (size_t) c * xs) + b;

			acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]),
						 _mm256_mul_ps(dw, fp16_bcast(bx->d)), acc[c]);
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

INLINE void ptile_q4_0(const int C, int64_t nb, const uint8_t *g, const char *x, size_t xs,
		       const int16_t *sums, float *y, size_t ys, int rows)
{
	const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0xf);
	__m256 acc[PTILE_C];

	for (int c = 0; c < C; c++)
		acc[c] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++, g += QUANT_PACKED_Q4_0_BLOCK) {
		prefetch_ahead(g, QUANT_PACKED_Q4_0_BLOCK);
		const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) g));
		__m256i s16[PTILE_C];

		for (int c = 0; c < C; c++)
			s16[c] = _mm256_setzero_si256();
		for (int k = 0; k < 4; k++) {
			const __m256i raw = _mm256_loadu_si256((const __m256i *) (g + 16 + 32 * k));
			const __m256i lo = _mm256_and_si256(raw, m4);
			const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);

			for (int c = 0; c < C; c++) {
				const struct block_q8_0 *bx = (const struct block_q8_0 *) (x + (size_t) c * xs) + b;
				int32_t ylo, yhi;

				memcpy(&ylo, bx->qs + 4 * k, 4);
				memcpy(&yhi, bx->qs + 16 + 4 * k, 4);
				s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(ylo)));
				s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(yhi)));
				/* keep the sum in its register: without this gcc 12 reassociates the
				 * block's 48 products (6 tokens) into a tree and spills them to the
				 * stack; a 1-2 token tile fits and gains from the tree */
				if (C > 2)
					REG_BARRIER(s16[c]);
			}
		}
		for (int c = 0; c < C; c++) {
			const struct block_q8_0 *bx = (const struct block_q8_0 *) (x + (size_t) c * xs) + b;
			const __m256i isum = _mm256_sub_epi32(_mm256_madd_epi16(s16[c], ones),
							      _mm256_set1_epi32(8 * sums[(size_t) c * nb + b]));

			acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
						 _mm256_mul_ps(dw, fp16_bcast(bx->d)), acc[c]);
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

typedef void (*ptile_fn)(int64_t nb, const uint8_t *g, const char *x, size_t xs,
			 const int16_t *sums, float *y, size_t ys, int rows);

#define PTILE_DEFINE(C)                                                                           \
	static void ptile_q8_0_##C(int64_t nb, const uint8_t *g, const char *x, size_t xs,          \
				   const int16_t *sums, float *y, size_t ys, int rows)              \
	{                                                                                         \
		(void) sums;                                                                      \
		ptile_q8_0(C, nb, g, x, xs, y, ys, rows);                                         \
	}                                                                                         \
	static void ptile_q4_0_##C(int64_t nb, const uint8_t *g, const char *x, size_t xs,          \
				   const int16_t *sums, float *y, size_t ys, int rows)              \
	{                                                                                         \
		ptile_q4_0(C, nb, g, x, xs, sums, y, ys, rows);                                   \
	}
PTILE_DEFINE(1)
PTILE_DEFINE(2)
PTILE_DEFINE(3)
PTILE_DEFINE(4)
PTILE_DEFINE(5)
PTILE_DEFINE(6)

static const ptile_fn ptiles_q8_0[PTILE_C] = { ptile_q8_0_1, ptile_q8_0_2, ptile_q8_0_3,
					       ptile_q8_0_4, ptile_q8_0_5, ptile_q8_0_6 };
static const ptile_fn ptiles_q4_0[PTILE_C] = { ptile_q4_0_1, ptile_q4_0_2, ptile_q4_0_3,
					       ptile_q4_0_4, ptile_q4_0_5, ptile_q4_0_6 };

/* Token tiles outermost: a tile's activations stay in L1 while it sweeps the row groups,
 * whose weights (one matmul chunk) stay in L2. */
static void ptile_drive(const ptile_fn *t, size_t block_bytes, int64_t n, const void *w,
			int64_t nr, const void *x, size_t xs, const int16_t *sums, int64_t nc,
			float *y, size_t ys)
{
	const int64_t nb = n / QK8_0;
	const size_t group_bytes = (size_t) nb * block_bytes;

	for (int64_t c = 0; c < nc; c += PTILE_C) {
		const int C = (int) MIN((int64_t) PTILE_C, nc - c);

		for (int64_t r = 0; r < nr; r += 8)
			t[C - 1](nb, (const uint8_t *) w + (size_t) (r / 8) * group_bytes,
				 (const char *) x + (size_t) c * xs, xs, sums ? sums + (size_t) c * nb : NULL,
				 y + (size_t) c * ys + r, ys, (int) MIN((int64_t) 8, nr - r));
	}
}

void quant_gemm_packed_q8_0_avx2(int64_t n, const void *w, int64_t nr, const void *x, size_t xs,
				 const int16_t *sums, int64_t nc, float *y, size_t ys)
{
	ptile_drive(ptiles_q8_0, QUANT_PACKED_Q8_0_BLOCK, n, w, nr, x, xs, NULL, nc, y, ys);
	(void) sums;
}

void quant_gemm_packed_q4_0_avx2(int64_t n, const void *w, int64_t nr, const void *x, size_t xs,
				 const int16_t *sums, int64_t nc, float *y, size_t ys)
{
	ptile_drive(ptiles_q4_0, QUANT_PACKED_Q4_0_BLOCK, n, w, nr, x, xs, sums, nc, y, ys);
}

/* ---- packed F32 (quant_gemm_packed()): a 16-row group in two registers ----
 *
 * As in kernels-avx512.c: per value k, the group's 16 weights in two loads, each token's x_k
 * broadcast, one multiply-add per 8 rows; each lane is one row's chain acc = fma(w_k, x_k,
 * acc) in k order, the scalar reference's bits. Prefill: 1 group x 6 tokens (12
 * accumulators of the 16 registers); decode: 2 groups x 1 token.
 */
#define PF32_C 6

typedef void (*pf32_fn)(int64_t n, const float *g, size_t gs, const char *x, size_t xs, float *y,
			size_t ys, int rows);

INLINE void pf32_store(float *y, __m256 v, int rows)
{
	if (rows >= 8) {
		_mm256_storeu_ps(y, v);
	} else if (rows > 0) {
		float t[8];

		_mm256_storeu_ps(t, v);
		memcpy(y, t, (size_t) rows * sizeof(float));
	}
}

INLINE void pf32_tile(const int G, const int C, int64_t n, const float *g, size_t gs,
		      const char *x, size_t xs, float *y, size_t ys, int rows)
{
	__m256 acc[2 * 2 * PF32_C];

#pragma GCC unroll 24
	for (int i = 0; i < 2 * G * C; i++)
		acc[i] = _mm256_setzero_ps();
	for (int64_t k = 0; k < n; k++) {
		__m256 wv[4];

#pragma GCC unroll 4
		for (int h = 0; h < 2 * G; h++)
			wv[h] = _mm256_loadu_ps(g + (size_t) (h / 2) * gs + (size_t) k * 16 + (size_t) (h % 2) * 8);
#pragma GCC unroll 6
		for (int c = 0; c < C; c++) {
			const __m256 xb = _mm256_broadcast_ss((const float *) (x + (size_t) c * xs) + k);

#pragma GCC unroll 4
			for (int h = 0; h < 2 * G; h++)
				acc[h * C + c] = _mm256_fmadd_ps(wv[h], xb, acc[h * C + c]);
		}
	}
#pragma GCC unroll 4
	for (int h = 0; h < 2 * G; h++)
#pragma GCC unroll 6
		for (int c = 0; c < C; c++)
			pf32_store(y + (size_t) c * ys + (size_t) h * 8, acc[h * C + c], rows - 8 * h);
}

#define PF32_DEFINE(G, C)                                                                         \
	static void pf32_##G##x##C(int64_t n, const float *g, size_t gs, const char *x, size_t xs,  \
				   float *y, size_t ys, int rows)                                   \
	{                                                                                         \
		pf32_tile(G, C, n, g, gs, x, xs, y, ys, rows);                                    \
	}
PF32_DEFINE(1, 1) PF32_DEFINE(1, 2) PF32_DEFINE(1, 3) PF32_DEFINE(1, 4) PF32_DEFINE(1, 5)
PF32_DEFINE(1, 6) PF32_DEFINE(2, 1)

static const pf32_fn pf32_tiles[PF32_C] = { pf32_1x1, pf32_1x2, pf32_1x3,
					    pf32_1x4, pf32_1x5, pf32_1x6 };

void quant_gemm_packed_f32_avx2(int64_t n, const void *w, int64_t nr, const void *x, size_t xs,
				const int16_t *sums, int64_t nc, float *y, size_t ys)
{
	const size_t gs = (size_t) n * 16; /* floats per group */

	(void) sums;
	if (nc == 1) {
		for (int64_t r = 0; r < nr; r += 32)
			(nr - r > 16 ? pf32_2x1 : pf32_1x1)(n, (const float *) w + (size_t) (r / 16) * gs, gs,
							    x, xs, y + r, ys, (int) MIN((int64_t) 32, nr - r));
		return;
	}
	for (int64_t c = 0; c < nc; c += PF32_C) {
		const int C = (int) MIN((int64_t) PF32_C, nc - c);

		for (int64_t r = 0; r < nr; r += 16)
			pf32_tiles[C - 1](n, (const float *) w + (size_t) (r / 16) * gs, gs,
					  (const char *) x + (size_t) c * xs, xs, y + (size_t) c * ys + r, ys,
					  (int) MIN((int64_t) 16, nr - r));
	}
}

/* ---- attention scores against transposed keys (quant_attn_scores_f32()) ----
 * 16 keys in two registers, M (1-4) queries per pass (2M chains), x_i[d] broadcast: each lane
 * is one key's chain over d, the scalar reference's bits. Lanes past np compute on whatever
 * the block holds there (a finished block's other keys, or zeros) and are not stored. M is a
 * constant in each call, so the accumulators stay in registers (with a run-time count gcc 12
 * kept them on the stack and every multiply-add went through memory). */
INLINE void attn_scores_tile(const int M, int64_t n, const float *kt, int64_t np, const float *q,
			     size_t q_stride, float *s, size_t s_stride)
{
	__m256 acc[4][2];

#pragma GCC unroll 4
	for (int i = 0; i < M; i++)
		acc[i][0] = acc[i][1] = _mm256_setzero_ps();
	for (int64_t d = 0; d < n; d++) {
		const __m256 k0 = _mm256_loadu_ps(kt + (size_t) d * 16);
		const __m256 k1 = _mm256_loadu_ps(kt + (size_t) d * 16 + 8);

#pragma GCC unroll 4
		for (int i = 0; i < M; i++) {
			const __m256 qv = _mm256_broadcast_ss(q + (size_t) i * q_stride + (size_t) d);

			acc[i][0] = _mm256_fmadd_ps(k0, qv, acc[i][0]);
			acc[i][1] = _mm256_fmadd_ps(k1, qv, acc[i][1]);
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < M; i++) {
		float t[16];

		_mm256_storeu_ps(t, acc[i][0]);
		_mm256_storeu_ps(t + 8, acc[i][1]);
		memcpy(s + (size_t) i * s_stride, t, (size_t) np * sizeof(float));
	}
}

void quant_attn_scores_f32_avx2(int64_t n, const float *kt, int64_t np, const float *q,
				size_t q_stride, int64_t nq, float *s, size_t s_stride)
{
	for (; nq >= 4; nq -= 4, q += 4 * q_stride, s += 4 * s_stride)
		attn_scores_tile(4, n, kt, np, q, q_stride, s, s_stride);
	if (nq == 3)
		attn_scores_tile(3, n, kt, np, q, q_stride, s, s_stride);
	else if (nq == 2)
		attn_scores_tile(2, n, kt, np, q, q_stride, s, s_stride);
	else if (nq == 1)
		attn_scores_tile(1, n, kt, np, q, q_stride, s, s_stride);
}

/* ---- attention's weighted sum: y += sum_j a[j] * x_j, one FMA per term in j order (the
 * scalar reference's order, so the same bits), 32 outputs per pass over the x_j ---- */

void quant_axpy_f32_avx2(int64_t n, const float *a, int64_t count, const float *x,
			 size_t x_stride, float *y)
{
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m256 acc[4];

		for (int k = 0; k < 4; k++)
			acc[k] = _mm256_loadu_ps(y + i + 8 * k);
		for (int64_t j = 0; j < count; j++) {
			const __m256 aj = _mm256_set1_ps(a[j]);
			const float *xj = x + (size_t) j * x_stride + (size_t) i;

			for (int k = 0; k < 4; k++)
				acc[k] = _mm256_fmadd_ps(aj, _mm256_loadu_ps(xj + 8 * k), acc[k]);
		}
		for (int k = 0; k < 4; k++)
			_mm256_storeu_ps(y + i + 8 * k, acc[k]);
	}
	for (; i + 8 <= n; i += 8) {
		__m256 acc = _mm256_loadu_ps(y + i);

		for (int64_t j = 0; j < count; j++)
			acc = _mm256_fmadd_ps(_mm256_set1_ps(a[j]),
					      _mm256_loadu_ps(x + (size_t) j * x_stride + (size_t) i), acc);
		_mm256_storeu_ps(y + i, acc);
	}
	for (; i < n; i++)
		for (int64_t j = 0; j < count; j++)
			y[i] = fmaf(a[j], x[(size_t) j * x_stride + (size_t) i], y[i]);
}

/* ---- attention's softmax (quant_softmax_f32()) ---- */

/* Partial sums of e in double: lanes 0-3 into s0, 4-7 into s1. */
static inline void sum8_pd(__m256d *s0, __m256d *s1, __m256 e)
{
	*s0 = _mm256_add_pd(*s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
	*s1 = _mm256_add_pd(*s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}

void quant_softmax_f32_avx2(float *x, int64_t n, float scale)
{
	const __m256 vs = _mm256_set1_ps(scale);
	__m256 vmax = _mm256_set1_ps(-INFINITY);
	__m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd(); /* not an array: kept in registers */
	float maxv, inv, t[8] = { 0 };
	int64_t i = 0, rem = n % 8;
	double sum;

	/* scaling is exact per value and the maximum order-free: the scalar level's bits */
	for (; i + 8 <= n; i += 8) {
		const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);

		_mm256_storeu_ps(x + i, v);
		vmax = _mm256_max_ps(vmax, v);
	}
	maxv = hmax_f32x8(vmax);
	for (; i < n; i++) {
		x[i] *= scale;
		maxv = MAX(maxv, x[i]);
	}
	const __m256 vm = _mm256_set1_ps(maxv);

	for (i = 0; i + 8 <= n; i += 8) {
		const __m256 e = exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));

		_mm256_storeu_ps(x + i, e);
		sum8_pd(&s0, &s1, e);
	}
	if (rem) {
		/* the tail through the same lanes; the pad lanes are zeroed before the sum */
		memcpy(t, x + i, (size_t) rem * sizeof(float));
		_mm256_storeu_ps(t, exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(t), vm)));
		memset(t + rem, 0, (size_t) (8 - rem) * sizeof(float));
		memcpy(x + i, t, (size_t) rem * sizeof(float));
		sum8_pd(&s0, &s1, _mm256_loadu_ps(t));
	}
	{
		const __m256d s4 = _mm256_add_pd(s0, s1);
		const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));

		sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
	}
	inv = (float) (1.0 / sum);
	const __m256 vi = _mm256_set1_ps(inv);

	for (i = 0; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vi));
	for (; i < n; i++)
		x[i] *= inv;
}

const struct quant_kernels quant_kernels_avx2 = {
	.name = "avx2",
	.quantize_f16 = quantize_f16_avx2,
	.quantize_bf16 = quantize_bf16_avx2,
	.quantize_q8_0 = quantize_q8_0_avx2,
	.quantize_q8_K = quantize_q8_K_avx2,
	.dot_f32 = dot_f32_avx2,
	.dot_f16 = dot_f16_avx2,
	.dot_bf16 = dot_bf16_avx2,
	.dot_q8_0 = dot_q8_0_avx2,
	.dot_q4_0 = dot_q4_0_avx2,
	.dot_q4_K = dot_q4_K_avx2,
	.dot_q6_K = dot_q6_K_avx2,
	.gemm_f32 = quant_gemm_f32_avx2,
	.gemm_f16 = quant_gemm_f16_avx2,
	.gemm_bf16 = gemm_bf16_avx2,
	.gemm_q8_0 = quant_gemm_q8_0_avx2,
	.gemm_q4_0 = quant_gemm_q4_0_avx2,
	.gemm_q4_K = quant_gemm_q4_K_avx2,
	.gemm_q6_K = quant_gemm_q6_K_avx2,
	.gemm_packed_q8_0 = quant_gemm_packed_q8_0_avx2,
	.gemm_packed_q4_0 = quant_gemm_packed_q4_0_avx2,
	.gemm_packed_f32 = quant_gemm_packed_f32_avx2,
	.attn_scores_f32 = quant_attn_scores_f32_avx2,
	.axpy_f32 = quant_axpy_f32_avx2,
	.softmax_f32 = quant_softmax_f32_avx2,
};

#endif /* __x86_64__ */
