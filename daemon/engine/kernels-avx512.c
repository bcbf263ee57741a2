/* SPDX-License-Identifier: MIT */
/*
 * kernels-avx512.c: AVX-512 kernels, in two tables: "avx512" (F, BW, VL, DQ) and
 * "avx512vnni" (the same plus VNNI dot-product instructions for the integer sums). The file
 * is compiled with all those -m flags; quant.c calls a table only when cpuid reports every
 * feature it uses.
 *
 * The two tables share one implementation per kernel, an always-inline function with a
 * constant `vnni` argument, so the "avx512" copies contain no VNNI instruction. Everything
 * here is intrinsics: a plain C loop could be auto-vectorized into VNNI code (the file has
 * -mavx512vnni), which a CPU without VNNI would fault on.
 *
 * Results: activation conversions are bit-identical to the scalar ones (same float
 * products, round-half-even, no fused multiply-add on that path); integer sums per block
 * are exact and identical with and without VNNI (no 16-bit saturation can occur: see
 * kernels-avx2.c for the byte-product ranges); only the float accumulation order differs.
 *
 * Tile products (issue 15, first run on a Zen 5): packed Q8_0/Q4_0 16 rows to a register
 * (VNNI: vpdpbusd; decode 32 rows per pass), packed F32 in broadcast form, F32/F16 on the
 * GGUF layout in dot form with a transpose-and-add reduction, attention's scores on
 * transposed keys and its V sums. The GGUF-layout Q8_0/Q4_0 tiles and the softmax are the
 * AVX2 ones (an AVX-512 CPU runs AVX2; models repack those types anyway).
 */
#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "../basic/macro.h"
#include "kernels.h"

#define INLINE static inline __attribute__((always_inline))
#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

INLINE float fp16(uint16_t h)
{
	return _cvtsh_ss(h);
}

/* [lo | hi] from two 256-bit halves */
INLINE __m512i join_i256(__m256i lo, __m256i hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

INLINE __m512 join_f256(__m256 lo, __m256 hi)
{
	return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/* Mask of the first k (0..16) lanes. */
INLINE __mmask16 first_lanes(int64_t k)
{
	return (__mmask16) ((1u << k) - 1);
}

/* Unsigned bytes u times signed bytes s, summed in groups of 4 into 16 int32 lanes. */
INLINE __m512i dot_u8i8(__m512i u, __m512i s, bool vnni)
{
	if (vnni)
		return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
	return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}

/* Signed bytes w times signed bytes y (never -128, see kernels-avx2.c): |w| * (y * sign w). */
INLINE __m512i dot_i8i8(__m512i w, __m512i y, bool vnni)
{
	const __mmask64 neg = _mm512_movepi8_mask(w);
	const __m512i sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);

	return dot_u8i8(_mm512_abs_epi8(w), sy, vnni);
}

/* Hides v from the optimizer: clang fuses a madd followed by an add into the VNNI
 * instruction vpdpwssd when the file is compiled with -mavx512vnni, which the "avx512"
 * kernels must not contain. */
/* An empty asm that "changes" v (any vector register, zmm16-31 too): the compiler must
 * materialise v here and cannot move the arithmetic across it. */
#define REG_BARRIER(v) __asm__("" : "+v"(v))

INLINE __m512i opaque(__m512i v)
{
	__asm__("" : "+v"(v));
	return v;
}

/* acc + the int16 pair products p16 * scale16, summed in pairs. */
INLINE __m512i madd_acc(__m512i acc, __m512i p16, __m512i scale16, bool vnni)
{
	if (vnni)
		return _mm512_dpwssd_epi32(acc, p16, scale16);
	return _mm512_add_epi32(acc, opaque(_mm512_madd_epi16(p16, scale16)));
}

/* ---- activation conversions ---- */

static void quantize_f16_avx512(const float *x, void *dst, int64_t n)
{
	uint16_t *y = dst;
	int64_t i = 0;

	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256((__m256i *) (y + i),
				    _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
	if (i < n) {
		const __mmask16 k = first_lanes(n - i);
		const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, x + i),
						  _MM_FROUND_TO_NEAREST_INT);
		_mm256_mask_storeu_epi16(y + i, k, h);
	}
}

/* f32_to_bf16() on 16 lanes: round to nearest even, NaN stays NaN (quieted). */
INLINE __m256i f32x16_to_bf16(__m512 v)
{
	const __m512i u = _mm512_castps_si512(v);
	const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	const __m512i rounded = _mm512_srli_epi32(
		_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
	const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
	const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(
		_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));

	return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, nan));
}

static void quantize_bf16_avx512(const float *x, void *dst, int64_t n)
{
	uint16_t *y = dst;
	int64_t i = 0;

	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256((__m256i *) (y + i), f32x16_to_bf16(_mm512_loadu_ps(x + i)));
	if (i < n) {
		const __mmask16 k = first_lanes(n - i);
		_mm256_mask_storeu_epi16(y + i, k, f32x16_to_bf16(_mm512_maskz_loadu_ps(k, x + i)));
	}
}

INLINE __m512 abs_ps(__m512 v)
{
	return _mm512_castsi512_ps(
		_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}

/* round_half_even(v * s) as int32, then saturated to int8 (values are within -128..127). */
INLINE __m128i round_to_i8(__m512 v, __m512 s)
{
	const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v, s), ROUND_NEAREST);

	return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(r));
}

static void quantize_q8_0_avx512(const float *x, void *dst, int64_t n)
{
	struct block_q8_0 *y = dst;

	for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
		const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
		/* max_ps returns its second operand when either is NaN: NaNs drop out */
		const __m512 m1 = _mm512_max_ps(abs_ps(v1), _mm512_setzero_ps());
		const float max = _mm512_reduce_max_ps(_mm512_max_ps(abs_ps(v0), m1));

		y[i].d = _cvtss_sh(max / 127.f, _MM_FROUND_TO_NEAREST_INT);
		const __m512 id = _mm512_set1_ps(max != 0.f ? 127.f / max : 0.f);
		_mm_storeu_si128((__m128i *) y[i].qs, round_to_i8(v0, id));
		_mm_storeu_si128((__m128i *) (y[i].qs + 16), round_to_i8(v1, id));
	}
}

static void quantize_q8_K_avx512(const float *x, void *dst, int64_t n)
{
	struct block_q8_K *y = dst;

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		__m512 amax16 = _mm512_setzero_ps();

		for (int j = 0; j < QK_K; j += 16)
			amax16 = _mm512_max_ps(abs_ps(_mm512_loadu_ps(x + j)), amax16); /* NaN: dropped */
		const float amax = _mm512_reduce_max_ps(amax16);
		if (amax == 0.f) {
			memset(&y[i], 0, sizeof(y[i]));
			continue;
		}

		/* the scale comes from the first value of that magnitude, with its sign */
		int first = 0;
		const __m512 vamax = _mm512_set1_ps(amax);
		for (int j = 0; j < QK_K; j += 16) {
			const __mmask16 eq = _mm512_cmp_ps_mask(abs_ps(_mm512_loadu_ps(x + j)), vamax,
								_CMP_EQ_OQ);
			if (eq) {
				first = j + __builtin_ctz((unsigned) eq);
				break;
			}
		}
		const float iscale = -127.f / x[first];
		const __m512 vscale = _mm512_set1_ps(iscale);

		for (int j = 0; j < QK_K; j += 16) {
			const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + j), vscale),
							      ROUND_NEAREST);
			/* saturate before bsums, so they sum the stored bytes */
			const __m512i q = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(r),
									    _mm512_set1_epi32(127)),
							   _mm512_set1_epi32(-128));

			y[i].bsums[j / 16] = (int16_t) _mm512_reduce_add_epi32(q);
			_mm_storeu_si128((__m128i *) (y[i].qs + j), _mm512_cvtsepi32_epi8(q));
		}
		y[i].d = 1.f / iscale;
	}
}

/* ---- float dot products ---- */

INLINE __m512 load_f32(const float *p, __mmask16 k)
{
	return _mm512_maskz_loadu_ps(k, p);
}

INLINE __m512 load_f16(const uint16_t *p, __mmask16 k)
{
	return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
}

INLINE __m512 load_bf16(const uint16_t *p, __mmask16 k)
{
	const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p));

	return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

/* The three float dot products differ only in how 16 values are loaded. */
#define DEFINE_FLOAT_DOT(name, elem_t, load)                                                       \
	static float name(int64_t n, const void *w, const void *x)                                 \
	{                                                                                          \
		const elem_t *a = w, *b = x;                                                       \
		__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();                     \
		int64_t i = 0;                                                                     \
                                                                                                   \
		for (; i + 32 <= n; i += 32) {                                                     \
			acc0 = _mm512_fmadd_ps(load(a + i, 0xffff), load(b + i, 0xffff), acc0);    \
			acc1 = _mm512_fmadd_ps(load(a + i + 16, 0xffff), load(b + i + 16, 0xffff), \
					       acc1);                                              \
		}                                                                                  \
		for (; i < n; i += 16) {                                                           \
			const __mmask16 k = n - i >= 16 ? 0xffff : first_lanes(n - i);             \
			acc0 = _mm512_fmadd_ps(load(a + i, k), load(b + i, k), acc0);              \
		}                                                                                  \
		return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));                           \
	}

DEFINE_FLOAT_DOT(dot_f32_avx512, float, load_f32)
DEFINE_FLOAT_DOT(dot_f16_avx512, uint16_t, load_f16)
DEFINE_FLOAT_DOT(dot_bf16_avx512, uint16_t, load_bf16)

/* ---- quantized dot products ---- */

/* Two 32-value blocks per step: int32 lanes 0-7 belong to the first, 8-15 to the second,
 * and the scale vector carries each block's d_w * d_x on its half. An odd last block is
 * paired with zeros. */
INLINE float dot_q8_0_impl(int64_t n, const void *w, const void *x, bool vnni)
{
	const struct block_q8_0 *a = w, *b = x;
	const int64_t nb = n / QK8_0;
	__m512 acc = _mm512_setzero_ps();

	for (int64_t i = 0; i < nb; i += 2) {
		const bool pair = i + 1 < nb;
		const __m256i w0 = _mm256_loadu_si256((const __m256i *) a[i].qs);
		const __m256i x0 = _mm256_loadu_si256((const __m256i *) b[i].qs);
		const __m256i w1 = pair ? _mm256_loadu_si256((const __m256i *) a[i + 1].qs)
					: _mm256_setzero_si256();
		const __m256i x1 = pair ? _mm256_loadu_si256((const __m256i *) b[i + 1].qs)
					: _mm256_setzero_si256();
		const float d0 = fp16(a[i].d) * fp16(b[i].d);
		const float d1 = pair ? fp16(a[i + 1].d) * fp16(b[i + 1].d) : 0.f;
		const __m512i p = dot_i8i8(join_i256(w0, w1), join_i256(x0, x1), vnni);
		const __m512 d = join_f256(_mm256_set1_ps(d0), _mm256_set1_ps(d1));

		acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
	}
	return _mm512_reduce_add_ps(acc);
}

/* 16 bytes of nibbles into 32 levels -8..7 (low nibbles first), as a 256-bit half. */
INLINE __m256i unpack_q4_0(const uint8_t *qs)
{
	const __m128i t = _mm_loadu_si128((const __m128i *) qs);
	const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t),
					     _mm256_set1_epi8(0xf));

	return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
}

INLINE float dot_q4_0_impl(int64_t n, const void *w, const void *x, bool vnni)
{
	const struct block_q4_0 *a = w;
	const struct block_q8_0 *b = x;
	const int64_t nb = n / QK4_0;
	__m512 acc = _mm512_setzero_ps();

	for (int64_t i = 0; i < nb; i += 2) {
		const bool pair = i + 1 < nb;
		const __m256i w0 = unpack_q4_0(a[i].qs);
		const __m256i x0 = _mm256_loadu_si256((const __m256i *) b[i].qs);
		const __m256i w1 = pair ? unpack_q4_0(a[i + 1].qs) : _mm256_setzero_si256();
		const __m256i x1 = pair ? _mm256_loadu_si256((const __m256i *) b[i + 1].qs)
					: _mm256_setzero_si256();
		const float d0 = fp16(a[i].d) * fp16(b[i].d);
		const float d1 = pair ? fp16(a[i + 1].d) * fp16(b[i + 1].d) : 0.f;
		const __m512i p = dot_i8i8(join_i256(w0, w1), join_i256(x0, x1), vnni);
		const __m512 d = join_f256(_mm256_set1_ps(d0), _mm256_set1_ps(d1));

		acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
	}
	return _mm512_reduce_add_ps(acc);
}

/* [16 x lo | 16 x hi] as int16 */
INLINE __m512i two_scales16(int lo, int hi)
{
	return join_i256(_mm256_set1_epi16((short) lo), _mm256_set1_epi16((short) hi));
}

/*
 * Q4_K, 128 values per step: 64 bytes of nibbles hold sub-blocks [4j | 4j+2] in their low
 * nibbles and [4j+1 | 4j+3] in their high ones (256-bit halves); the activations are
 * regrouped to match with 128-bit-lane shuffles. The mins term is an integer sum over the
 * 8 sub-blocks from bsums.
 *
 * One weight row against C tokens (out[c]): per super-block the row's side (its scales and
 * mins unpacked, the nibbles split, the scale vectors) is made once and serves the C
 * tokens, where pair-by-pair dots redid it for every token (a prefill of 128 tokens ran at
 * a third of llama.cpp's repacked Q4_K). Per token the instructions are the dot's, in its
 * order, so a pair's result is the same in any tile; the dot is the tile of one token.
 */
/* Tokens per K-quant row tile (the tables below hold tiles of 1..KQ_TILE_C tokens). */
#define KQ_TILE_C 8

INLINE void q4_K_tile(const int C, int64_t n, const void *w, const char *x, size_t xs,
		      float *out, bool vnni)
{
	const struct block_q4_K *a = w;
	const __m512i m4 = _mm512_set1_epi8(0xf);
	__m512 acc[KQ_TILE_C];
	float acc_m[KQ_TILE_C];

	for (int c = 0; c < C; c++) {
		acc[c] = _mm512_setzero_ps();
		acc_m[c] = 0.f;
	}
	for (int64_t i = 0; i < n / QK_K; i++) {
		uint8_t sc[8], m[8];
		int64_t m8;
		__m512i lo[2], hi[2], s_lo[2], s_hi[2];
		const float dw = fp16(a[i].d), dmin = fp16(a[i].dmin);

		q4_K_unpack_scales(a[i].scales, sc, m);
		memcpy(&m8, m, sizeof(m8));
		const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(m8));

		for (int j = 0; j < 2; j++) {
			const __m512i bits = _mm512_loadu_si512(a[i].qs + 64 * j);

			lo[j] = _mm512_and_si512(bits, m4);
			hi[j] = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
			s_lo[j] = two_scales16(sc[4 * j], sc[4 * j + 2]);
			s_hi[j] = two_scales16(sc[4 * j + 1], sc[4 * j + 3]);
		}
		for (int c = 0; c < C; c++) {
			const struct block_q8_K *b = (const struct block_q8_K *) (x + (size_t) c * xs) + i;

			/* mins: sum_j m_j * (bsums[2j] + bsums[2j+1]) */
			const __m128i ysum32 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *) b->bsums),
							      _mm_loadu_si128((const __m128i *) (b->bsums + 8)));
			__m128i pm = _mm_madd_epi16(m16, ysum32);
			pm = _mm_add_epi32(pm, _mm_unpackhi_epi64(pm, pm));
			pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, _MM_SHUFFLE(2, 3, 0, 1)));
			const int summ = _mm_cvtsi128_si32(pm);

			__m512i sumi = _mm512_setzero_si512();
			for (int j = 0; j < 2; j++) {
				const __m512i ya = _mm512_loadu_si512(b->qs + 128 * j);      /* 4j | 4j+1 */
				const __m512i yb = _mm512_loadu_si512(b->qs + 128 * j + 64); /* 4j+2 | 4j+3 */
				const __m512i ylo = _mm512_shuffle_i64x2(ya, yb, 0x44); /* 4j | 4j+2 */
				const __m512i yhi = _mm512_shuffle_i64x2(ya, yb, 0xee); /* 4j+1 | 4j+3 */

				sumi = madd_acc(sumi, _mm512_maddubs_epi16(lo[j], ylo), s_lo[j], vnni);
				sumi = madd_acc(sumi, _mm512_maddubs_epi16(hi[j], yhi), s_hi[j], vnni);
			}
			acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * b->d), _mm512_cvtepi32_ps(sumi), acc[c]);
			acc_m[c] += (dmin * b->d) * (float) summ;
		}
	}
	for (int c = 0; c < C; c++)
		out[c] = _mm512_reduce_add_ps(acc[c]) - acc_m[c];
}

INLINE float dot_q4_K_impl(int64_t n, const void *w, const void *x, bool vnni)
{
	float out;

	q4_K_tile(1, n, w, (const char *) x, 0, &out, vnni);
	return out;
}

/*
 * Q6_K, 128 values per step: ql's 64 bytes give the low nibbles of values [0..32 | 32..64]
 * (low nibbles) and [64..96 | 96..128] (high nibbles); qh's 32 bytes hold the top two bits
 * of values l, l+32, l+64, l+96 in bit pairs 0, 2, 4, 6. The levels 0..63 go to maddubs
 * unsigned and the -32 offset comes in once per block through bsums, as in kernels-avx2.c.
 */
/* One row against C tokens, as q4_K_tile(): the row's levels and scale vectors of each
 * super-block made once; per token the dot's instructions in its order. */
INLINE void q6_K_tile(const int C, int64_t n, const void *w, const char *x, size_t xs,
		      float *out, bool vnni)
{
	const struct block_q6_K *a = w;
	const __m512i m4 = _mm512_set1_epi8(0xf), m2 = _mm512_set1_epi8(3);
	/* pshufb, per 128-bit lane: bytes 0..3 (of 8 scales) repeated 8 times each */
	const __m256i pick_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
						 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i pick_hi = _mm256_add_epi8(pick_lo, _mm256_set1_epi8(4));
	__m512 acc[KQ_TILE_C];

	for (int c = 0; c < C; c++)
		acc[c] = _mm512_setzero_ps();
	for (int64_t i = 0; i < n / QK_K; i++) {
		const __m256i scales16 = _mm256_cvtepi8_epi16(
			_mm_loadu_si128((const __m128i *) a[i].scales));
		const float dw = fp16(a[i].d);
		__m512i q01[2], q23[2], sc01[2], sc23[2];

		for (int h = 0; h < QK_K / 128; h++) {
			const __m512i l = _mm512_loadu_si512(a[i].ql + 64 * h);
			const __m256i hb = _mm256_loadu_si256((const __m256i *) (a[i].qh + 32 * h));
			const __m512i h01 = join_i256(hb, _mm256_srli_epi16(hb, 2));
			const __m512i h23 = join_i256(_mm256_srli_epi16(hb, 4), _mm256_srli_epi16(hb, 6));
			int64_t sc8;

			q01[h] = _mm512_or_si512(_mm512_and_si512(l, m4),
						 _mm512_slli_epi16(_mm512_and_si512(h01, m2), 4));
			q23[h] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
						 _mm512_slli_epi16(_mm512_and_si512(h23, m2), 4));
			memcpy(&sc8, a[i].scales + 8 * h, sizeof(sc8));
			const __m256i s = _mm256_set1_epi64x(sc8);
			sc01[h] = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(s, pick_lo));
			sc23[h] = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(s, pick_hi));
		}
		for (int c = 0; c < C; c++) {
			const struct block_q8_K *b = (const struct block_q8_K *) (x + (size_t) c * xs) + i;
			const __m256i bsums = _mm256_loadu_si256((const __m256i *) b->bsums);
			const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(scales16, bsums), 5);
			__m512i sumi = join_i256(_mm256_sub_epi32(_mm256_setzero_si256(), corr),
						 _mm256_setzero_si256());

			for (int h = 0; h < QK_K / 128; h++) {
				const __m512i y01 = _mm512_loadu_si512(b->qs + 128 * h);
				const __m512i y23 = _mm512_loadu_si512(b->qs + 128 * h + 64);

				sumi = madd_acc(sumi, _mm512_maddubs_epi16(q01[h], y01), sc01[h], vnni);
				sumi = madd_acc(sumi, _mm512_maddubs_epi16(q23[h], y23), sc23[h], vnni);
			}
			acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * b->d), _mm512_cvtepi32_ps(sumi), acc[c]);
		}
	}
	for (int c = 0; c < C; c++)
		out[c] = _mm512_reduce_add_ps(acc[c]);
}

INLINE float dot_q6_K_impl(int64_t n, const void *w, const void *x, bool vnni)
{
	float out;

	q6_K_tile(1, n, w, (const char *) x, 0, &out, vnni);
	return out;
}

#define DEFINE_INT_DOTS(kind)                                                                      \
	static float dot_##kind##_avx512(int64_t n, const void *w, const void *x)                  \
	{                                                                                          \
		return dot_##kind##_impl(n, w, x, false);                                          \
	}                                                                                          \
	static float dot_##kind##_avx512vnni(int64_t n, const void *w, const void *x)              \
	{                                                                                          \
		return dot_##kind##_impl(n, w, x, true);                                           \
	}

DEFINE_INT_DOTS(q8_0)
DEFINE_INT_DOTS(q4_0)
DEFINE_INT_DOTS(q4_K)
DEFINE_INT_DOTS(q6_K)

/* A K-quant row tile: one row against C tokens (C from the table index), out[c]. */
typedef void (*kq_tile_fn)(int64_t n, const void *w, const char *x, size_t xs, float *out);

/* kind: q4_K or q6_K (its kind##_tile()); suffix: the level */
#define KQ_TILE_DEFINE(kind, suffix, vnni, C)                                                     \
	static void kind##_tile_##suffix##_##C(int64_t n, const void *w, const char *x, size_t xs, \
					       float *out)                                          \
	{                                                                                         \
		kind##_tile(C, n, w, x, xs, out, vnni);                                           \
	}
#define KQ_TILE_TABLE(kind, suffix, vnni)                                                         \
	KQ_TILE_DEFINE(kind, suffix, vnni, 1)                                                     \
	KQ_TILE_DEFINE(kind, suffix, vnni, 2)                                                     \
	KQ_TILE_DEFINE(kind, suffix, vnni, 3)                                                     \
	KQ_TILE_DEFINE(kind, suffix, vnni, 4)                                                     \
	KQ_TILE_DEFINE(kind, suffix, vnni, 5)                                                     \
	KQ_TILE_DEFINE(kind, suffix, vnni, 6)                                                     \
	KQ_TILE_DEFINE(kind, suffix, vnni, 7)                                                     \
	KQ_TILE_DEFINE(kind, suffix, vnni, 8)                                                     \
	static const kq_tile_fn kind##_tiles_##suffix[KQ_TILE_C] = {                              \
		kind##_tile_##suffix##_1, kind##_tile_##suffix##_2, kind##_tile_##suffix##_3,     \
		kind##_tile_##suffix##_4, kind##_tile_##suffix##_5, kind##_tile_##suffix##_6,     \
		kind##_tile_##suffix##_7, kind##_tile_##suffix##_8,                               \
	};

KQ_TILE_TABLE(q4_K, avx512, false)
KQ_TILE_TABLE(q4_K, avx512vnni, true)
KQ_TILE_TABLE(q6_K, avx512, false)
KQ_TILE_TABLE(q6_K, avx512vnni, true)

/* Rows outermost: a row (144 or 210 bytes per 256 values) stays in L1 while its token
 * tiles sweep the activations (L1/L2 for the token chunks matmul() passes). */
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

static void gemm_q4_K_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			     size_t xs, int64_t nc, float *y, size_t ys)
{
	kq_drive(q4_K_tiles_avx512, n, w, ws, nr, x, xs, nc, y, ys);
}

static void gemm_q4_K_avx512vnni(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
				 size_t xs, int64_t nc, float *y, size_t ys)
{
	kq_drive(q4_K_tiles_avx512vnni, n, w, ws, nr, x, xs, nc, y, ys);
}

static void gemm_q6_K_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			     size_t xs, int64_t nc, float *y, size_t ys)
{
	kq_drive(q6_K_tiles_avx512, n, w, ws, nr, x, xs, nc, y, ys);
}

static void gemm_q6_K_avx512vnni(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
				 size_t xs, int64_t nc, float *y, size_t ys)
{
	kq_drive(q6_K_tiles_avx512vnni, n, w, ws, nr, x, xs, nc, y, ys);
}

/* ---- tile products on the GGUF layout: F32 and F16 (quant_gemm()) ----
 *
 * The dot-product form of kernels-avx2.c at 16 lanes: R weight rows x C tokens, one 16-lane
 * accumulator per (row, token) pair, updated per 16 values by the same instructions whatever
 * R and C are, then the same horizontal sum and scalar tail, so a pair's result never depends on the tile that computed it. 4 x 6 keeps
 * 24 accumulators and 10 loads per 24 multiply-adds in registers (llamafile's sgemm makes the
 * same choice for AVX-512; 4 x 4 and 3 x 8 measured slower on Zen 5).
 */
#define FTILE_R 4
#define FTILE_C 6

typedef void (*ftile_fn)(int64_t n, const char *w, size_t ws, const char *x, size_t xs, float *y,
			 size_t ys);

/* The element types of the float tiles (weights and converted activations alike). */
enum flt { FLT_F32, FLT_F16, FLT_BF16 };

INLINE __m512 load_flt(const enum flt t, const char *p, __mmask16 k)
{
	if (t == FLT_F16)
		return load_f16((const uint16_t *) p, k);
	if (t == FLT_BF16)
		return load_bf16((const uint16_t *) p, k);
	return load_f32((const float *) p, k);
}

INLINE float flt_elem(const enum flt t, const char *p, int64_t k)
{
	if (t == FLT_F16)
		return fp16(((const uint16_t *) p)[k]);
	if (t == FLT_BF16) {
		uint32_t u = (uint32_t) ((const uint16_t *) p)[k] << 16;
		float f;

		memcpy(&f, &u, sizeof(f));
		return f;
	}
	return ((const float *) p)[k];
}

/*
 * The horizontal sums of v[0..m) (m <= 16) into out[0..m), all at once: a transpose-and-add
 * tree, ~3 instructions per sum where a lone horizontal sum takes 8. Every vector's lanes are
 * summed in the same order whatever m and the other vectors are (the missing ones are
 * zeros, and no sum mixes vectors): within each 128-bit quarter (l0 + l2) + (l1 + l3), then
 * (q0 + q1) + (q2 + q3) over the quarters.
 */
INLINE void reduce16(const __m512 *v, const int m, float *out)
{
	__m512 u[8], w[4];

#pragma GCC unroll 8
	for (int k = 0; k < 8; k++) {
		const __m512 a = 2 * k < m ? v[2 * k] : _mm512_setzero_ps();
		const __m512 b = 2 * k + 1 < m ? v[2 * k + 1] : _mm512_setzero_ps();

		/* per quarter [a0+a2, b0+b2, a1+a3, b1+b3] */
		u[k] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
	}
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) /* per quarter: the quarter sums of v[4k..4k+3] */
		w[k] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
				     _mm512_shuffle_ps(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
	/* quarters 0+1 and 2+3 of w0, w1 (then w2, w3), then those halves: quarter k of the
	 * result holds the sums of v[4k..4k+3] */
	const __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
					 _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
	const __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(2, 0, 2, 0)),
					 _mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(3, 1, 3, 1)));
	const __m512 r = _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0)),
				       _mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1)));

	_mm512_mask_storeu_ps(out, first_lanes(m), r);
}

/* 16 values (k: the lanes loaded) of every pair of the tile. */
INLINE void ftile_step(const int R, const int C, const enum flt t, const char *w, size_t ws,
		       const char *x, size_t xs, __mmask16 k, __m512 acc[FTILE_R * FTILE_C])
{
	__m512 wv[FTILE_R];

	for (int r = 0; r < R; r++)
		wv[r] = load_flt(t, w + (size_t) r * ws, k);
	for (int c = 0; c < C; c++) {
		const __m512 xv = load_flt(t, x + (size_t) c * xs, k);

		for (int r = 0; r < R; r++)
			acc[r * C + c] = _mm512_fmadd_ps(wv[r], xv, acc[r * C + c]);
	}
}

INLINE void ftile(const int R, const int C, const enum flt t, int64_t n, const char *w, size_t ws,
		  const char *x, size_t xs, float *y, size_t ys)
{
	const size_t vb = t == FLT_F32 ? 4 : 2;
	__m512 acc[FTILE_R * FTILE_C]; /* flat: gcc 12 keeps a 2-D one in memory */
	int64_t i = 0;

	for (int r = 0; r < R * C; r++)
		acc[r] = _mm512_setzero_ps();
	for (; i + 16 <= n; i += 16)
		ftile_step(R, C, t, w + (size_t) i * vb, ws, x + (size_t) i * vb, xs, 0xffff, acc);
	/* the last n % 16 values one by one after the sum, as kernels-avx2.c does: a masked
	 * vector step here makes gcc 12 keep every accumulator in memory through the loop, and
	 * so does a loop here that it does not unroll */
	float sums[32];

	reduce16(acc, R * C < 16 ? R * C : 16, sums);
	if (R * C > 16)
		reduce16(acc + 16, R * C - 16, sums + 16);
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			const char *wr = w + (size_t) r * ws, *xc = x + (size_t) c * xs;
			float sum = sums[r * C + c];

			for (int64_t k = i; k < n; k++)
				sum = fmaf(flt_elem(t, wr, k), flt_elem(t, xc, k), sum);
			y[(size_t) c * ys + r] = sum;
		}
}

#define FTILE_DEFINE(name, t, R, C)                                                             \
	static void name##_##R##x##C(int64_t n, const char *w, size_t ws, const char *x, size_t xs, \
				     float *y, size_t ys)                                           \
	{                                                                                         \
		ftile(R, C, t, n, w, ws, x, xs, y, ys);                                         \
	}
#define FTILE_ROW(name, t, R)                                                                   \
	FTILE_DEFINE(name, t, R, 1)                                                             \
	FTILE_DEFINE(name, t, R, 2)                                                             \
	FTILE_DEFINE(name, t, R, 3)                                                             \
	FTILE_DEFINE(name, t, R, 4)                                                             \
	FTILE_DEFINE(name, t, R, 5)                                                             \
	FTILE_DEFINE(name, t, R, 6)
#define FTILE_TABLE(name, t)                                                                    \
	FTILE_ROW(name, t, 1)                                                                   \
	FTILE_ROW(name, t, 2)                                                                   \
	FTILE_ROW(name, t, 3)                                                                   \
	FTILE_ROW(name, t, 4)                                                                   \
	static const ftile_fn name[FTILE_R][FTILE_C] = {                                          \
		{ name##_1x1, name##_1x2, name##_1x3, name##_1x4, name##_1x5, name##_1x6 },       \
		{ name##_2x1, name##_2x2, name##_2x3, name##_2x4, name##_2x5, name##_2x6 },       \
		{ name##_3x1, name##_3x2, name##_3x3, name##_3x4, name##_3x5, name##_3x6 },       \
		{ name##_4x1, name##_4x2, name##_4x3, name##_4x4, name##_4x5, name##_4x6 },       \
	};

FTILE_TABLE(ftiles_f32, FLT_F32)
FTILE_TABLE(ftiles_f16, FLT_F16)
FTILE_TABLE(ftiles_bf16, FLT_BF16)

/* Row tiles outermost: a tile's weight rows stay in L1 while it sweeps the tokens. */
static void ftile_drive(const ftile_fn t[FTILE_R][FTILE_C], int64_t n, const void *w, size_t ws,
			int64_t nr, const void *x, size_t xs, int64_t nc, float *y, size_t ys)
{
	for (int64_t r = 0; r < nr; r += FTILE_R) {
		const int R = (int) MIN((int64_t) FTILE_R, nr - r);

		for (int64_t c = 0; c < nc; c += FTILE_C) {
			const int C = (int) MIN((int64_t) FTILE_C, nc - c);

			t[R - 1][C - 1](n, (const char *) w + (size_t) r * ws, ws,
					(const char *) x + (size_t) c * xs, xs, y + (size_t) c * ys + r, ys);
		}
	}
}

static void gemm_f32_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			    size_t xs, int64_t nc, float *y, size_t ys)
{
	ftile_drive(ftiles_f32, n, w, ws, nr, x, xs, nc, y, ys);
}

static void gemm_f16_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			    size_t xs, int64_t nc, float *y, size_t ys)
{
	ftile_drive(ftiles_f16, n, w, ws, nr, x, xs, nc, y, ys);
}

/* For CPUs without AVX512-BF16 (its level has its own, kernels-avx512bf16.c): a BF16 value
 * widens to F32 with a shift, so these are the F16 tiles with another load (the pair-by-pair
 * fallback they replace ran below the AVX2 level's BF16 tiles). */
static void gemm_bf16_avx512(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
			     size_t xs, int64_t nc, float *y, size_t ys)
{
	ftile_drive(ftiles_bf16, n, w, ws, nr, x, xs, nc, y, ys);
}

/* ---- packed Q8_0 and Q4_0 (quant_gemm_packed()): 16 rows to a register ----
 *
 * Two 8-row groups of the packed layout (quant.h) side by side in one 512-bit register: lanes
 * 0-7 are the rows of group g, lanes 8-15 those of group g + 1 (for a last odd group, g again,
 * and its upper lanes are dropped). A token's 4 activation bytes are broadcast to all 16
 * lanes, so one instruction adds 4 products to each of 16 rows.
 *
 * With VNNI, vpdpbusd (unsigned x signed bytes, summed in fours into int32, no saturation):
 *   Q4_0: the nibbles 0..15 are the unsigned side as they are; the -8 offset comes off once
 *     per block as the start value -8 * sum(y);
 *   Q8_0: the weights become unsigned by flipping their top bit (w ^ 0x80 = w + 128), and the
 *     start value is -128 * sum(y).
 * Both are exact integer identities, so each row's block sum is the same integer as the
 * scalar reference's; then acc = fma(float(sum), d_w * d_x, acc) per block in block order:
 * the same bits as quant_gemm_packed_ref() and the AVX2 kernels.
 * Without VNNI (AVX-512 BW): Q4_0 as in kernels-avx2.c (maddubs pair sums added in 16 bits
 * over the block, then one madd); Q8_0 with the sign trick (|w| and y negated where w < 0,
 * through a byte mask: AVX-512 has no vpsignb), a madd per chunk.
 */
#define QTILE_C 8

INLINE __m512i load_2groups(const uint8_t *g0, const uint8_t *g1)
{
	return join_i256(_mm256_loadu_si256((const __m256i *) g0),
			 _mm256_loadu_si256((const __m256i *) g1));
}

INLINE __m512 load_2scales(const uint8_t *g0, const uint8_t *g1)
{
	return _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const __m128i *) g1),
						_mm_loadu_si128((const __m128i *) g0)));
}

INLINE __m512i bcast4(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

INLINE void prefetch_block(const uint8_t *g, size_t block_bytes)
{
	for (size_t l = 0; l < block_bytes; l += 64)
		_mm_prefetch((const char *) g + 1024 + l, _MM_HINT_T0);
}

/* Stores lanes [0, rows) of v at y (rows <= 16). */
INLINE void store_rows(float *y, __m512 v, int rows)
{
	if (rows == 16)
		_mm512_storeu_ps(y, v);
	else
		_mm512_mask_storeu_ps(y, first_lanes(rows), v);
}

INLINE void qtile(const int C, const bool q4, const bool vnni, int64_t nb, const uint8_t *g0,
		  const uint8_t *g1, const char *x, size_t xs, const int16_t *sums, float *y,
		  size_t ys, int rows)
{
	const size_t bb = q4 ? QUANT_PACKED_Q4_0_BLOCK : QUANT_PACKED_Q8_0_BLOCK;
	const __m512i m4 = _mm512_set1_epi8(0xf), top = _mm512_set1_epi8((char) 0x80);
	const __m512i ones = _mm512_set1_epi16(1);
	__m512 acc[QTILE_C];

	for (int c = 0; c < C; c++)
		acc[c] = _mm512_setzero_ps();
	for (int64_t b = 0; b < nb; b++, g0 += bb, g1 += bb) {
		const __m512 dw = load_2scales(g0, g1);
		__m512i isum[QTILE_C];

		prefetch_block(g0, bb);
		if (g1 != g0)
			prefetch_block(g1, bb);
		/* the start values (the nibble or sign offset times sum(y)); without VNNI, Q4_0
		 * adds its offset after the nibble loop instead, where 8 tokens' sums would
		 * otherwise hold 8 more registers through it (24 live with acc and s16: spilled) */
		for (int c = 0; c < C; c++) {
			const int s = sums ? sums[(size_t) c * nb + b] : 0;

			isum[c] = vnni ? _mm512_set1_epi32((q4 ? -8 : -128) * s) : _mm512_setzero_si512();
		}
		if (q4) {
			/* with VNNI, two chains per token (low and high nibbles), so that 8 tokens keep
			 * 16 multiply-adds in flight (one chain of 8 per block is latency-bound) */
			__m512i s16[QTILE_C];

			for (int c = 0; c < C; c++)
				s16[c] = _mm512_setzero_si512();
			for (int k = 0; k < 4; k++) {
				const __m512i raw = load_2groups(g0 + 16 + 32 * k, g1 + 16 + 32 * k);
				const __m512i lo = _mm512_and_si512(raw, m4);
				const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);

				for (int c = 0; c < C; c++) {
					const int8_t *q = ((const struct block_q8_0 *) (x + (size_t) c * xs))[b].qs;

					if (vnni) {
						isum[c] = _mm512_dpbusd_epi32(isum[c], lo, bcast4(q + 4 * k));
						s16[c] = _mm512_dpbusd_epi32(s16[c], hi, bcast4(q + 16 + 4 * k));
					} else {
						s16[c] = _mm512_add_epi16(s16[c], _mm512_maddubs_epi16(lo, bcast4(q + 4 * k)));
						s16[c] = _mm512_add_epi16(s16[c],
									  _mm512_maddubs_epi16(hi, bcast4(q + 16 + 4 * k)));
						/* as in kernels-avx2.c: otherwise gcc hoists the block's 64
						 * broadcasts (8 tokens) out of the unrolled loop and spills them */
						if (C > 2)
							REG_BARRIER(s16[c]);
					}
				}
			}
			for (int c = 0; c < C; c++)
				if (vnni)
					isum[c] = _mm512_add_epi32(isum[c], s16[c]);
				else
					isum[c] = _mm512_add_epi32(
						_mm512_set1_epi32(-8 * (sums ? sums[(size_t) c * nb + b] : 0)),
						opaque(_mm512_madd_epi16(s16[c], ones)));
		} else {
			for (int k = 0; k < 8; k++) {
				const __m512i raw = load_2groups(g0 + 16 + 32 * k, g1 + 16 + 32 * k);

				if (vnni) {
					const __m512i u = _mm512_xor_si512(raw, top);

					for (int c = 0; c < C; c++) {
						const int8_t *q = ((const struct block_q8_0 *) (x + (size_t) c * xs))[b].qs;

						isum[c] = _mm512_dpbusd_epi32(isum[c], u, bcast4(q + 4 * k));
					}
				} else {
					const __mmask64 neg = _mm512_movepi8_mask(raw);
					const __m512i aw = _mm512_abs_epi8(raw);

					for (int c = 0; c < C; c++) {
						const int8_t *q = ((const struct block_q8_0 *) (x + (size_t) c * xs))[b].qs;
						const __m512i yv = bcast4(q + 4 * k);
						const __m512i sy = _mm512_mask_sub_epi8(yv, neg, _mm512_setzero_si512(), yv);

						isum[c] = _mm512_add_epi32(
							isum[c], opaque(_mm512_madd_epi16(_mm512_maddubs_epi16(aw, sy), ones)));
						if (C > 2)
							REG_BARRIER(isum[c]);
					}
				}
			}
		}
		for (int c = 0; c < C; c++) {
			const struct block_q8_0 *bx = (const struct block_q8_0 *) (x + (size_t) c * xs) + b;

			acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]),
						 _mm512_mul_ps(dw, _mm512_set1_ps(fp16(bx->d))), acc[c]);
		}
	}
	for (int c = 0; c < C; c++)
		store_rows(y + (size_t) c * ys, acc[c], rows);
}

/*
 * Decode (one token) with VNNI: 32 rows (four groups) per pass, two independent 16-row
 * halves, so that four weight streams are in flight per thread instead of two (a single
 * token is bound by how fast the weights arrive, not by the arithmetic). Per row the same
 * integer sums and the same fma per block as qtile(): the same bits.
 */
INLINE void qtile_dec(const bool q4, int64_t nb, const uint8_t *const g[4], const char *x,
		      const int16_t *sums, float *y, int rows)
{
	const size_t bb = q4 ? QUANT_PACKED_Q4_0_BLOCK : QUANT_PACKED_Q8_0_BLOCK;
	const __m512i m4 = _mm512_set1_epi8(0xf), top = _mm512_set1_epi8((char) 0x80);
	const struct block_q8_0 *bx = (const struct block_q8_0 *) x;
	__m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };

	for (int64_t b = 0; b < nb; b++) {
		const size_t o = (size_t) b * bb;
		const __m512 dx = _mm512_set1_ps(fp16(bx[b].d));
		__m512i isum[2], hsum[2];

		for (int gi = 0; gi < 4; gi++)
			prefetch_block(g[gi] + o, bb);
		for (int h = 0; h < 2; h++) {
			isum[h] = _mm512_set1_epi32((q4 ? -8 : -128) * sums[b]);
			hsum[h] = _mm512_setzero_si512();
		}
		for (int k = 0; k < (q4 ? 4 : 8); k++) {
			const __m512i ylo = bcast4(bx[b].qs + 4 * k);
			const __m512i yhi = q4 ? bcast4(bx[b].qs + 16 + 4 * k) : ylo;

			for (int h = 0; h < 2; h++) {
				const __m512i raw = load_2groups(g[2 * h] + o + 16 + 32 * k,
								 g[2 * h + 1] + o + 16 + 32 * k);

				if (q4) {
					isum[h] = _mm512_dpbusd_epi32(isum[h], _mm512_and_si512(raw, m4), ylo);
					hsum[h] = _mm512_dpbusd_epi32(
						hsum[h], _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4), yhi);
				} else if (k % 2) {
					hsum[h] = _mm512_dpbusd_epi32(hsum[h], _mm512_xor_si512(raw, top), ylo);
				} else {
					isum[h] = _mm512_dpbusd_epi32(isum[h], _mm512_xor_si512(raw, top), ylo);
				}
			}
		}
		for (int h = 0; h < 2; h++) {
			const __m512 dw = load_2scales(g[2 * h] + o, g[2 * h + 1] + o);

			acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(isum[h], hsum[h])),
						 _mm512_mul_ps(dw, dx), acc[h]);
		}
	}
	store_rows(y, acc[0], MIN(16, rows));
	if (rows > 16)
		store_rows(y + 16, acc[1], rows - 16);
}

static void qtile_dec_q8_0(int64_t nb, const uint8_t *const g[4], const char *x,
			   const int16_t *sums, float *y, int rows)
{
	qtile_dec(false, nb, g, x, sums, y, rows);
}

static void qtile_dec_q4_0(int64_t nb, const uint8_t *const g[4], const char *x,
			   const int16_t *sums, float *y, int rows)
{
	qtile_dec(true, nb, g, x, sums, y, rows);
}

typedef void (*qtile_fn)(int64_t nb, const uint8_t *g0, const uint8_t *g1, const char *x,
			 size_t xs, const int16_t *sums, float *y, size_t ys, int rows);
typedef void (*qtile_dec_fn)(int64_t nb, const uint8_t *const g[4], const char *x,
			     const int16_t *sums, float *y, int rows);

#define QTILE_DEFINE(name, q4, vnni, C)                                                           \
	static void name##_##C(int64_t nb, const uint8_t *g0, const uint8_t *g1, const char *x,     \
			       size_t xs, const int16_t *sums, float *y, size_t ys, int rows)       \
	{                                                                                         \
		qtile(C, q4, vnni, nb, g0, g1, x, xs, sums, y, ys, rows);                         \
	}
#define QTILE_TABLE(name, q4, vnni)                                                               \
	QTILE_DEFINE(name, q4, vnni, 1)                                                           \
	QTILE_DEFINE(name, q4, vnni, 2)                                                           \
	QTILE_DEFINE(name, q4, vnni, 3)                                                           \
	QTILE_DEFINE(name, q4, vnni, 4)                                                           \
	QTILE_DEFINE(name, q4, vnni, 5)                                                           \
	QTILE_DEFINE(name, q4, vnni, 6)                                                           \
	QTILE_DEFINE(name, q4, vnni, 7)                                                           \
	QTILE_DEFINE(name, q4, vnni, 8)                                                           \
	static const qtile_fn name[QTILE_C] = { name##_1, name##_2, name##_3, name##_4,           \
						name##_5, name##_6, name##_7, name##_8 };

QTILE_TABLE(qtiles_q8_0, false, false)
QTILE_TABLE(qtiles_q4_0, true, false)
QTILE_TABLE(qtiles_q8_0_vnni, false, true)
QTILE_TABLE(qtiles_q4_0_vnni, true, true)

/* Token tiles outermost: a tile's activations stay in L1 while it sweeps the row groups,
 * whose weights (one matmul chunk) stay in L2. */
static void qtile_drive(const qtile_fn *t, qtile_dec_fn dec, size_t block_bytes, int64_t n,
			const void *w, int64_t nr, const void *x, size_t xs, const int16_t *sums,
			int64_t nc, float *y, size_t ys)
{
	const int64_t nb = n / QK8_0;
	const size_t group_bytes = (size_t) nb * block_bytes;

	if (nc == 1 && dec) {
		int64_t r = 0;

		for (; r + 24 < nr; r += 32) { /* more than three groups: the four-group pass */
			const uint8_t *g0 = (const uint8_t *) w + (size_t) (r / 8) * group_bytes;
			const uint8_t *const g[4] = { g0, g0 + group_bytes, g0 + 2 * group_bytes,
						      g0 + 3 * group_bytes };

			dec(nb, g, x, sums, y + r, (int) MIN((int64_t) 32, nr - r));
		}
		w = (const uint8_t *) w + (size_t) (r / 8) * group_bytes;
		y += r;
		nr -= r;
	}

	for (int64_t c = 0; c < nc; c += QTILE_C) {
		const int C = (int) MIN((int64_t) QTILE_C, nc - c);

		for (int64_t r = 0; r < nr; r += 16) {
			const uint8_t *g0 = (const uint8_t *) w + (size_t) (r / 8) * group_bytes;

			t[C - 1](nb, g0, nr - r > 8 ? g0 + group_bytes : g0, (const char *) x + (size_t) c * xs,
				 xs, sums ? sums + (size_t) c * nb : NULL, y + (size_t) c * ys + r, ys,
				 (int) MIN((int64_t) 16, nr - r));
		}
	}
}

#define DEFINE_PACKED(kind, suffix, table, dec, bytes)                                            \
	static void gemm_packed_##kind##_##suffix(int64_t n, const void *w, int64_t nr,            \
						  const void *x, size_t xs, const int16_t *sums,    \
						  int64_t nc, float *y, size_t ys)                  \
	{                                                                                         \
		qtile_drive(table, dec, bytes, n, w, nr, x, xs, sums, nc, y, ys);                 \
	}

DEFINE_PACKED(q8_0, avx512, qtiles_q8_0, NULL, QUANT_PACKED_Q8_0_BLOCK)
DEFINE_PACKED(q4_0, avx512, qtiles_q4_0, NULL, QUANT_PACKED_Q4_0_BLOCK)
DEFINE_PACKED(q8_0, avx512vnni, qtiles_q8_0_vnni, qtile_dec_q8_0, QUANT_PACKED_Q8_0_BLOCK)
DEFINE_PACKED(q4_0, avx512vnni, qtiles_q4_0_vnni, qtile_dec_q4_0, QUANT_PACKED_Q4_0_BLOCK)

/* ---- packed F32 (quant_gemm_packed()): 16 rows to a register ----
 *
 * The layout (quant.h) holds value k of a group's 16 rows in 64 consecutive bytes: one load
 * is a register of rows, and a token's value k is broadcast against it, so a tile of G groups
 * x C tokens needs G loads and C broadcasts per G*C multiply-adds, and no horizontal sum: each
 * lane is one row's chain acc = fma(w_k, x_k, acc), k = 0..n-1, as in the scalar reference.
 * Prefill runs 2 groups x 12 tokens (24 accumulators); decode 4 groups x 1 token (four
 * independent chains to hide the multiply-add latency while the weights stream in).
 */
#define PF32_G 4
#define PF32_C 12

typedef void (*pf32_fn)(int64_t n, const float *g, size_t gs, const char *x, size_t xs, float *y,
			size_t ys, int rows);

INLINE void pf32_tile(const int G, const int C, int64_t n, const float *g, size_t gs,
		      const char *x, size_t xs, float *y, size_t ys, int rows)
{
	__m512 acc[PF32_G * PF32_C];

	for (int i = 0; i < G * C; i++)
		acc[i] = _mm512_setzero_ps();
	for (int64_t k = 0; k < n; k++) {
		__m512 wv[PF32_G];

		for (int gi = 0; gi < G; gi++)
			wv[gi] = _mm512_loadu_ps(g + (size_t) gi * gs + (size_t) k * 16);
		for (int c = 0; c < C; c++) {
			const __m512 xb = _mm512_set1_ps(((const float *) (x + (size_t) c * xs))[k]);

			for (int gi = 0; gi < G; gi++)
				acc[gi * C + c] = _mm512_fmadd_ps(wv[gi], xb, acc[gi * C + c]);
		}
	}
#pragma GCC unroll 4
	for (int gi = 0; gi < G; gi++)
#pragma GCC unroll 12
		for (int c = 0; c < C; c++)
			store_rows(y + (size_t) c * ys + (size_t) gi * 16, acc[gi * C + c],
				   (int) MIN(16, rows - 16 * gi));
}

#define PF32_DEFINE(G, C)                                                                         \
	static void pf32_##G##x##C(int64_t n, const float *g, size_t gs, const char *x, size_t xs,  \
				   float *y, size_t ys, int rows)                                   \
	{                                                                                         \
		pf32_tile(G, C, n, g, gs, x, xs, y, ys, rows);                                    \
	}
PF32_DEFINE(1, 1) PF32_DEFINE(2, 1) PF32_DEFINE(3, 1) PF32_DEFINE(4, 1)
PF32_DEFINE(1, 2) PF32_DEFINE(1, 3) PF32_DEFINE(1, 4) PF32_DEFINE(1, 5) PF32_DEFINE(1, 6)
PF32_DEFINE(1, 7) PF32_DEFINE(1, 8) PF32_DEFINE(1, 9) PF32_DEFINE(1, 10) PF32_DEFINE(1, 11)
PF32_DEFINE(1, 12)
PF32_DEFINE(2, 2) PF32_DEFINE(2, 3) PF32_DEFINE(2, 4) PF32_DEFINE(2, 5) PF32_DEFINE(2, 6)
PF32_DEFINE(2, 7) PF32_DEFINE(2, 8) PF32_DEFINE(2, 9) PF32_DEFINE(2, 10) PF32_DEFINE(2, 11)
PF32_DEFINE(2, 12)

/* [groups - 1][tokens - 1]: 4 groups only for one token, up to 2 otherwise */
static const pf32_fn pf32_tiles[PF32_G][PF32_C] = {
	{ pf32_1x1, pf32_1x2, pf32_1x3, pf32_1x4, pf32_1x5, pf32_1x6, pf32_1x7, pf32_1x8, pf32_1x9,
	  pf32_1x10, pf32_1x11, pf32_1x12 },
	{ pf32_2x1, pf32_2x2, pf32_2x3, pf32_2x4, pf32_2x5, pf32_2x6, pf32_2x7, pf32_2x8, pf32_2x9,
	  pf32_2x10, pf32_2x11, pf32_2x12 },
	{ pf32_3x1 },
	{ pf32_4x1 },
};

/* Token tiles outermost: a tile's activations stay in L1 (or stream from L2 for wide rows)
 * while it sweeps the row groups of the matmul chunk. */
static void gemm_packed_f32_avx512(int64_t n, const void *w, int64_t nr, const void *x,
				   size_t xs, const int16_t *sums, int64_t nc, float *y, size_t ys)
{
	const size_t gs = (size_t) n * 16; /* floats per group */
	const int64_t ct = nc == 1 ? 1 : PF32_C, gt = nc == 1 ? 4 : 2;

	(void) sums;
	for (int64_t c = 0; c < nc; c += ct) {
		const int C = (int) MIN(ct, nc - c);

		for (int64_t r = 0; r < nr; r += 16 * gt) {
			const int G = (int) MIN(gt, (nr - r + 15) / 16);

			pf32_tiles[G - 1][C - 1](n, (const float *) w + (size_t) (r / 16) * gs, gs,
						 (const char *) x + (size_t) c * xs, xs,
						 y + (size_t) c * ys + r, ys, (int) MIN(16 * gt, nr - r));
		}
	}
}

/* ---- attention's weighted sum (quant_axpy_f32()): the AVX2 kernel at 16 lanes ----
 * Every element is its own chain y = fma(a_j, x_j, y) in j order, so the width does not
 * change a bit; 64 values per pass keep four chains in flight. */
static void axpy_f32_avx512(int64_t n, const float *a, int64_t count, const float *x,
			    size_t x_stride, float *y)
{
	int64_t i = 0;

	for (; i + 64 <= n; i += 64) {
		__m512 acc[4];

		for (int k = 0; k < 4; k++)
			acc[k] = _mm512_loadu_ps(y + i + 16 * k);
		for (int64_t j = 0; j < count; j++) {
			const __m512 aj = _mm512_set1_ps(a[j]);
			const float *xj = x + (size_t) j * x_stride + (size_t) i;

			for (int k = 0; k < 4; k++)
				acc[k] = _mm512_fmadd_ps(aj, _mm512_loadu_ps(xj + 16 * k), acc[k]);
		}
		for (int k = 0; k < 4; k++)
			_mm512_storeu_ps(y + i + 16 * k, acc[k]);
	}
	for (; i < n; i += 16) {
		const __mmask16 m = n - i >= 16 ? 0xffff : first_lanes(n - i);
		__m512 acc = _mm512_maskz_loadu_ps(m, y + i);

		for (int64_t j = 0; j < count; j++)
			acc = _mm512_fmadd_ps(_mm512_set1_ps(a[j]),
					      _mm512_maskz_loadu_ps(m, x + (size_t) j * x_stride + (size_t) i), acc);
		_mm512_mask_storeu_ps(y + i, m, acc);
	}
}

/* Attention scores against transposed keys (quant_attn_scores_f32()): the 16 keys in one
 * register, 8 queries per pass (8 chains), each lane one key's chain over d: the scalar
 * reference's bits. Lanes past np are not stored. */
static void attn_scores_f32_avx512(int64_t n, const float *kt, int64_t np, const float *q,
				   size_t q_stride, int64_t nq, float *s, size_t s_stride)
{
	for (int64_t i0 = 0; i0 < nq; i0 += 8) {
		const int m = (int) MIN((int64_t) 8, nq - i0);
		__m512 acc[8];

		for (int i = 0; i < 8; i++)
			acc[i] = _mm512_setzero_ps();
		for (int64_t d = 0; d < n; d++) {
			const __m512 kv = _mm512_loadu_ps(kt + (size_t) d * 16);

			for (int i = 0; i < 8; i++) {
				if (i >= m)
					break;
				acc[i] = _mm512_fmadd_ps(kv, _mm512_set1_ps(q[(size_t) (i0 + i) * q_stride + (size_t) d]),
							 acc[i]);
			}
		}
#pragma GCC unroll 8
		for (int i = 0; i < 8; i++)
			if (i < m)
				_mm512_mask_storeu_ps(s + (size_t) (i0 + i) * s_stride, first_lanes(np), acc[i]);
	}
}

/* Four rows at a time on 64 values (16 chains in flight; x_j loaded once for the four); the
 * rest row by row. A row's chain skips the j at or past its count, so each element still
 * takes exactly its own terms in j order. */
static void axpy_f32_rows_avx512(int64_t n, const float *a, size_t a_stride, const int64_t *count,
				 int64_t nq, const float *x, size_t x_stride, float *y,
				 size_t y_stride)
{
	int64_t q = 0;

	for (; q + 4 <= nq && n % 64 == 0; q += 4) {
		int64_t cmax = 0;

		for (int k = 0; k < 4; k++)
			cmax = MAX(cmax, count[q + k]);
		for (int64_t i = 0; i < n; i += 64) {
			__m512 acc[4][4];

			for (int k = 0; k < 4; k++)
				for (int v = 0; v < 4; v++)
					acc[k][v] = _mm512_loadu_ps(y + (size_t) (q + k) * y_stride + (size_t) i + 16 * v);
			for (int64_t j = 0; j < cmax; j++) {
				const float *xj = x + (size_t) j * x_stride + (size_t) i;
				__m512 xv[4];

				for (int v = 0; v < 4; v++)
					xv[v] = _mm512_loadu_ps(xj + 16 * v);
				for (int k = 0; k < 4; k++) {
					if (j >= count[q + k])
						continue;
					const __m512 aj = _mm512_set1_ps(a[(size_t) (q + k) * a_stride + (size_t) j]);

					for (int v = 0; v < 4; v++)
						acc[k][v] = _mm512_fmadd_ps(aj, xv[v], acc[k][v]);
				}
			}
			for (int k = 0; k < 4; k++)
				for (int v = 0; v < 4; v++)
					_mm512_storeu_ps(y + (size_t) (q + k) * y_stride + (size_t) i + 16 * v, acc[k][v]);
		}
	}
	for (; q < nq; q++)
		if (count[q] > 0)
			axpy_f32_avx512(n, a + (size_t) q * a_stride, count[q], x, x_stride,
					y + (size_t) q * y_stride);
}

const struct quant_kernels quant_kernels_avx512 = {
	.name = "avx512",
	.quantize_f16 = quantize_f16_avx512,
	.quantize_bf16 = quantize_bf16_avx512,
	.quantize_q8_0 = quantize_q8_0_avx512,
	.quantize_q8_K = quantize_q8_K_avx512,
	.dot_f32 = dot_f32_avx512,
	.dot_f16 = dot_f16_avx512,
	.dot_bf16 = dot_bf16_avx512,
	.dot_q8_0 = dot_q8_0_avx512,
	.dot_q4_0 = dot_q4_0_avx512,
	.dot_q4_K = dot_q4_K_avx512,
	.dot_q6_K = dot_q6_K_avx512,
	/* the GGUF-layout Q8_0/Q4_0 tiles are the AVX2 ones (models repack those types) */
	.gemm_f32 = gemm_f32_avx512,
	.gemm_f16 = gemm_f16_avx512,
	.gemm_bf16 = gemm_bf16_avx512,
	.gemm_q8_0 = quant_gemm_q8_0_avx2,
	.gemm_q4_0 = quant_gemm_q4_0_avx2,
	.gemm_q4_K = gemm_q4_K_avx512,
	.gemm_q6_K = gemm_q6_K_avx512,
	.gemm_packed_q8_0 = gemm_packed_q8_0_avx512,
	.gemm_packed_q4_0 = gemm_packed_q4_0_avx512,
	.gemm_packed_f32 = gemm_packed_f32_avx512,
	.attn_scores_f32 = attn_scores_f32_avx512,
	.axpy_f32 = axpy_f32_avx512,
	.axpy_f32_rows = axpy_f32_rows_avx512,
	.softmax_f32 = quant_softmax_f32_avx2,
};

/* Conversions and float dots have no VNNI variant: shared with the table above. */
const struct quant_kernels quant_kernels_avx512vnni = {
	.name = "avx512vnni",
	.quantize_f16 = quantize_f16_avx512,
	.quantize_bf16 = quantize_bf16_avx512,
	.quantize_q8_0 = quantize_q8_0_avx512,
	.quantize_q8_K = quantize_q8_K_avx512,
	.dot_f32 = dot_f32_avx512,
	.dot_f16 = dot_f16_avx512,
	.dot_bf16 = dot_bf16_avx512,
	.dot_q8_0 = dot_q8_0_avx512vnni,
	.dot_q4_0 = dot_q4_0_avx512vnni,
	.dot_q4_K = dot_q4_K_avx512vnni,
	.dot_q6_K = dot_q6_K_avx512vnni,
	.gemm_f32 = gemm_f32_avx512,
	.gemm_f16 = gemm_f16_avx512,
	.gemm_bf16 = gemm_bf16_avx512,
	.gemm_q8_0 = quant_gemm_q8_0_avx2,
	.gemm_q4_0 = quant_gemm_q4_0_avx2,
	.gemm_q4_K = gemm_q4_K_avx512vnni,
	.gemm_q6_K = gemm_q6_K_avx512vnni,
	.gemm_packed_q8_0 = gemm_packed_q8_0_avx512vnni,
	.gemm_packed_q4_0 = gemm_packed_q4_0_avx512vnni,
	.gemm_packed_f32 = gemm_packed_f32_avx512,
	.attn_scores_f32 = attn_scores_f32_avx512,
	.axpy_f32 = axpy_f32_avx512,
	.axpy_f32_rows = axpy_f32_rows_avx512,
	.softmax_f32 = quant_softmax_f32_avx2,
};

#endif /* __x86_64__ */
