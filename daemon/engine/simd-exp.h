/* SPDX-License-Identifier: MIT */
/*
 * simd-exp.h: e^x for 8 floats with AVX2 + FMA, for the engine's elementwise loops (SiLU,
 * log-probabilities). Include only from code that checked the CPU (quant_simd_level() is not
 * "scalar") and whose caller carries the same target attribute.
 *
 * e^x as 2^n · e^r: n = round(x·log2 e), r = x - n·ln 2 in two parts (Cody-Waite), e^r by
 * Cephes' polynomial for expf. Within ~2 ulp of the double-precision value where the result is
 * a normal float; x is clamped to ±87, so callers that need e^x = 0 far below must mask it
 * themselves (exp8_avx2_or_zero()).
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

/* e^x, but 0 where x < -87 (e^x is then below the normal floats) or x is NaN. */
__attribute__((target("avx2,fma"))) static inline __m256 exp8_avx2_or_zero(__m256 x)
{
	const __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);

	return _mm256_and_ps(exp8_avx2(x), in_range);
}
#endif
