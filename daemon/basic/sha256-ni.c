/* SPDX-License-Identifier: MIT */
/*
 * sha256-ni.c: the SHA-256 compression function with the x86 SHA extensions (SHA-NI).
 * Compiled with -msha -msse4.1 on its own; sha256.c calls it only when cpuid says the CPU has
 * them. The message schedule runs four words at a time (sha256msg1/msg2), two rounds per
 * sha256rnds2; the state lives as ABEF and CDGH, the order sha256rnds2 wants.
 */
#include <immintrin.h>

#include "sha256-private.h"

void sha256_blocks_ni(uint32_t s[8], const uint8_t *p, size_t n_blocks)
{
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
	__m128i t = _mm_loadu_si128((const __m128i *) &s[0]);     /* lanes 0..3: A B C D */
	__m128i st1 = _mm_loadu_si128((const __m128i *) &s[4]);   /* lanes 0..3: E F G H */
	__m128i st0;

	t = _mm_shuffle_epi32(t, 0xB1);
	st1 = _mm_shuffle_epi32(st1, 0x1B);
	st0 = _mm_alignr_epi8(t, st1, 8);                /* high to low: A B E F */
	st1 = _mm_blend_epi16(st1, t, 0xF0);             /* high to low: C D G H */

	for (; n_blocks > 0; n_blocks--, p += 64) {
		__m128i abef = st0, cdgh = st1, kw;
		__m128i m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (p + 0)), bswap);
		__m128i m1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (p + 16)), bswap);
		__m128i m2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (p + 32)), bswap);
		__m128i m3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (p + 48)), bswap);

/* four rounds on message words msg (W[4g..4g+3]) */
#define QROUND(msg, g)                                                                             \
	kw = _mm_add_epi32(msg, _mm_loadu_si128((const __m128i *) &sha256_K[4 * (g)]));          \
	st1 = _mm_sha256rnds2_epu32(st1, st0, kw);                                                 \
	st0 = _mm_sha256rnds2_epu32(st0, st1, _mm_shuffle_epi32(kw, 0x0E))
/* the next four schedule words into a (which held the oldest): W[t] = σ1(W[t-2]) + W[t-7] +
 * σ0(W[t-15]) + W[t-16], with b, c, d the three newer groups */
#define SCHED(a, b, c, d)                                                                          \
	a = _mm_sha256msg2_epu32(                                                                  \
		_mm_add_epi32(_mm_sha256msg1_epu32(a, b), _mm_alignr_epi8(d, c, 4)), d)

		/* fully unrolled: the schedule of the next group runs beside the rounds of
		 * this one (a loop over an array of four kept them apart: ~30% slower) */
		QROUND(m0, 0);
		QROUND(m1, 1);
		QROUND(m2, 2);
		QROUND(m3, 3);
		for (int g = 4; g < 16; g += 4) {
			SCHED(m0, m1, m2, m3);
			QROUND(m0, g);
			SCHED(m1, m2, m3, m0);
			QROUND(m1, g + 1);
			SCHED(m2, m3, m0, m1);
			QROUND(m2, g + 2);
			SCHED(m3, m0, m1, m2);
			QROUND(m3, g + 3);
		}
#undef QROUND
#undef SCHED
		st0 = _mm_add_epi32(st0, abef);
		st1 = _mm_add_epi32(st1, cdgh);
	}

	t = _mm_shuffle_epi32(st0, 0x1B);
	st1 = _mm_shuffle_epi32(st1, 0xB1);
	st0 = _mm_blend_epi16(t, st1, 0xF0);             /* lanes 0..3: A B C D */
	st1 = _mm_alignr_epi8(st1, t, 8);                /* lanes 0..3: E F G H */
	_mm_storeu_si128((__m128i *) &s[0], st0);
	_mm_storeu_si128((__m128i *) &s[4], st1);
}
