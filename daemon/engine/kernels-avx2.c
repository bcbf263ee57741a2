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
 * every activation quantizer here produces -127..127; weights may be -128 (|w| = 128 is
 * a valid unsigned byte). Pair sums stay below 2 * 128 * 127 < 32767, so no saturation.
 */
#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

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

/*
 * Q4_K: per 64 values, 32 bytes of nibbles (low = sub-block 2j, high = 2j+1) against 64
 * activation bytes. Nibbles are unsigned, so maddubs takes them directly; the 16-bit pair
 * sums (at most 2 * 15 * 128) are scaled by the 6-bit sub-block scale in the madd. The
 * mins term uses the activation's bsums: sum_j m_j * (bsums[2j] + bsums[2j+1]).
 */
static float dot_q4_K_avx2(int64_t n, const void *w, const void *x)
{
	static const uint8_t pick[8][32] = { PICK(0, 0), PICK(1, 1), PICK(2, 2), PICK(3, 3),
					     PICK(4, 4), PICK(5, 5), PICK(6, 6), PICK(7, 7) };
	const struct block_q4_K *a = w;
	const struct block_q8_K *b = x;
	const __m256i m4 = _mm256_set1_epi8(0xf);
	__m256 acc = _mm256_setzero_ps();
	__m128 acc_m = _mm_setzero_ps();

	for (int64_t i = 0; i < n / QK_K; i++) {
		uint32_t words[4];

		q4_K_scales_words(a[i].scales, words);
		const __m128i scm = _mm_loadu_si128((const __m128i *) words); /* 8 scales, 8 mins */
		const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));

		/* mins: 8 int16 mins times the 8 sums of 32 activations */
		const __m128i bs_lo = _mm_loadu_si128((const __m128i *) b[i].bsums);
		const __m128i bs_hi = _mm_loadu_si128((const __m128i *) (b[i].bsums + 8));
		const __m128i ysum32 = _mm_hadd_epi16(bs_lo, bs_hi); /* |.| <= 32 * 127 */
		const __m128i pm = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(scm, 8)), ysum32);
		acc_m = _mm_fmadd_ps(_mm_set1_ps(fp16(a[i].dmin) * b[i].d), _mm_cvtepi32_ps(pm), acc_m);

		const uint8_t *q4 = a[i].qs;
		const int8_t *q8 = b[i].qs;
		__m256i sumi = _mm256_setzero_si256();
		for (int j = 0; j < QK_K / 64; j++, q4 += 32, q8 += 64) {
			const __m256i bits = _mm256_loadu_si256((const __m256i *) q4);
			const __m256i lo = _mm256_and_si256(bits, m4);
			const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
			const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *) q8));
			const __m256i phi = _mm256_maddubs_epi16(hi,
								 _mm256_loadu_si256((const __m256i *) (q8 + 32)));
			const __m256i sc_lo = _mm256_shuffle_epi8(
				scales, _mm256_loadu_si256((const __m256i *) pick[2 * j]));
			const __m256i sc_hi = _mm256_shuffle_epi8(
				scales, _mm256_loadu_si256((const __m256i *) pick[2 * j + 1]));

			sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, sc_lo));
			sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, sc_hi));
		}
		acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi),
				      acc);
	}
	acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
	acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
	return hsum_f32x8(acc) - _mm_cvtss_f32(acc_m);
}

/*
 * Q6_K: per 128 values, 64 bytes ql + 32 bytes qh give four runs of 32 unsigned levels
 * 0..63 (values l, l+32, l+64, l+96 share qh[l]). maddubs takes them unsigned (pair sums
 * at most 2 * 63 * 128); the -32 offset is applied once per block through bsums:
 * sum_g sc_g * sum((q - 32) y) = sum_g sc_g * (q . y)_g - 32 * sum_g sc_g * bsums[g].
 */
static float dot_q6_K_avx2(int64_t n, const void *w, const void *x)
{
	/* run k of a half covers scale groups 2k (low 128-bit lane) and 2k+1 (high lane) */
	static const uint8_t pick[4][32] = { PICK(0, 1), PICK(2, 3), PICK(4, 5), PICK(6, 7) };
	const struct block_q6_K *a = w;
	const struct block_q8_K *b = x;
	const __m256i m4 = _mm256_set1_epi8(0xf), m2 = _mm256_set1_epi8(3);
	__m256 acc = _mm256_setzero_ps();

	for (int64_t i = 0; i < n / QK_K; i++) {
		const __m128i scales8 = _mm_loadu_si128((const __m128i *) a[i].scales);
		const __m256i bsums = _mm256_loadu_si256((const __m256i *) b[i].bsums);
		/* 32 * sum_g sc_g * bsums[g], spread over 8 lanes */
		__m256i sumi = _mm256_sub_epi32(
			_mm256_setzero_si256(),
			_mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(scales8), bsums), 5));

		for (int h = 0; h < QK_K / 128; h++) {
			const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
			const int8_t *q8 = b[i].qs + 128 * h;
			/* this half's 8 scales as int16, in both 128-bit lanes */
			const __m256i sc16 = _mm256_broadcastsi128_si256(
				_mm_cvtepi8_epi16(h ? _mm_srli_si128(scales8, 8) : scales8));
			const __m256i l0 = _mm256_loadu_si256((const __m256i *) ql);
			const __m256i l1 = _mm256_loadu_si256((const __m256i *) (ql + 32));
			const __m256i hb = _mm256_loadu_si256((const __m256i *) qh);
			__m256i q[4];

			q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
					       _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
			q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
			q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
			q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
			for (int k = 0; k < 4; k++) {
				const __m256i p16 = _mm256_maddubs_epi16(
					q[k], _mm256_loadu_si256((const __m256i *) (q8 + 32 * k)));
				const __m256i sc = _mm256_shuffle_epi8(
					sc16, _mm256_loadu_si256((const __m256i *) pick[k]));

				sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, sc));
			}
		}
		acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi),
				      acc);
	}
	return hsum_f32x8(acc);
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
};

#endif /* __x86_64__ */
