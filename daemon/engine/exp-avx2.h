/* SPDX-License-Identifier: MIT */
/*
 * exp-avx2.h: e^x on 8 float lanes, for the AVX2 code of forward.c (SiLU), kernels-avx2.c
 * (attention's softmax) and sampler.c (log-probabilities); private to the engine.
 *
 * e^x = 2^n · e^r with n = round(x·log2 e) and r = x - n·ln 2 (ln 2 in two parts, so r keeps
 * its low bits), e^r by Cephes' polynomial for expf: within 2.1e-7 relative (~3.5 ulp) of the
 * double-precision value. x is clamped to ±87 first (e^87 is still a normal float): below
 * -87 the result is e^-87 ≈ 1.6e-38 instead of a smaller number or 0, which no caller here
 * can tell from 0. Lane-wise, no reductions: a value gets the same bits in any lane.
 * ggml computes SiLU and softmax with its own vector exp too, not libm's.
 */
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static inline __m256 exp8_avx2(__m256 x)
{
	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(87.0f));
	const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
					 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
							     _mm256_set1_epi32(127)), 23);

	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* e^x, but 0 where x < -87 (e^x is then below the normal floats) or x is NaN: for sums over
 * many terms far below the largest (a log-probability's normaliser). */
__attribute__((target("avx2,fma"))) static inline __m256 exp8_avx2_or_zero(__m256 x)
{
	const __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);

	return _mm256_and_ps(exp8_avx2(x), in_range);
}
#endif
