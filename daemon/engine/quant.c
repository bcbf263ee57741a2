/* SPDX-License-Identifier: MIT */
/*
 * quant.c: the type table, fp16/bf16 conversions, the portable scalar reference kernels
 * and the run-time choice of SIMD kernels (kernels.h).
 *
 * The scalar kernels are the reference the SIMD ones are tested against, so they are plain
 * C without intrinsics. Their arithmetic follows ggml's CPU backend where it matters for
 * matching llama.cpp's logits: activation conversions are bit-identical to ggml's x86 ones,
 * dot products use the same integer sums per block and the same per-block float scaling;
 * blocks are then summed in double here (more accurate than any SIMD order, and the
 * difference to ggml's float lanes is far below the tolerances anyone compares with).
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "../basic/macro.h"
#include "kernels.h"
#include "quant.h"

/* ---- fp16 / bf16 ---- */

float fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t) (h & 0x8000) << 16;
	uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
	float f;

	if (e == 0x1f) {
		x = sign | 0x7f800000 | (m << 13); /* inf, or NaN keeping its payload */
	} else if (e == 0) {
		if (m == 0) {
			x = sign;
		} else {
			/* subnormal half m * 2^-24: normalize into an f32 exponent */
			e = 113;
			while (!(m & 0x400)) {
				m <<= 1;
				e--;
			}
			x = sign | (e << 23) | ((m & 0x3ff) << 13);
		}
	} else {
		x = sign | ((e + 112) << 23) | (m << 13);
	}
	memcpy(&f, &x, sizeof(f));
	return f;
}

uint16_t f32_to_fp16(float f)
{
	uint32_t x, ax, sign;

	memcpy(&x, &f, sizeof(x));
	sign = (x >> 16) & 0x8000;
	ax = x & 0x7fffffff;

	if (ax > 0x7f800000) /* NaN: quiet it, keep the top payload bits (as F16C does) */
		return (uint16_t) (sign | 0x7e00 | ((ax >> 13) & 0x3ff));
	if (ax >= 0x477ff000) /* >= 65520, halfway between 65504 and 2^16: rounds to inf */
		return (uint16_t) (sign | 0x7c00);
	if (ax < 0x38800000) { /* below 2^-14: a subnormal half or zero */
		uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
		uint32_t shift = 126 - e; /* value = m * 2^(e-150) = (m >> shift) units of 2^-24 */

		if (e == 0 || shift > 24)
			return (uint16_t) sign; /* below 2^-25 (or exactly it: ties to even 0) */
		uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (q & 1)))
			q++;
		return (uint16_t) (sign | q);
	}
	/* normal: rebias the exponent, round the 23-bit mantissa to 10 bits (a carry into the
	 * exponent is the right answer, up to 0x7bff -> 0x7c00 handled above) */
	ax -= (uint32_t) (127 - 15) << 23;
	ax += 0xfff + ((ax >> 13) & 1);
	return (uint16_t) (sign | (ax >> 13));
}

float bf16_to_f32(uint16_t h)
{
	uint32_t x = (uint32_t) h << 16;
	float f;

	memcpy(&f, &x, sizeof(f));
	return f;
}

uint16_t f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	if ((x & 0x7fffffff) > 0x7f800000) /* NaN: truncate, force quiet so it stays NaN */
		return (uint16_t) ((x >> 16) | 64);
	/* round to nearest even; like ggml, subnormals are kept (not flushed) */
	return (uint16_t) ((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* ---- the type table ---- */

struct type_info {
	const char *name;
	uint32_t block_values; /* 0: known id, not supported */
	uint32_t block_bytes;
	uint32_t vec_dot_type;
};

static const struct type_info type_table[GGML_TYPE_COUNT_] = {
	[GGML_TYPE_F32] = { "f32", 1, 4, GGML_TYPE_F32 },
	[GGML_TYPE_F16] = { "f16", 1, 2, GGML_TYPE_F16 },
	[GGML_TYPE_Q4_0] = { "q4_0", QK4_0, sizeof(struct block_q4_0), GGML_TYPE_Q8_0 },
	[GGML_TYPE_Q4_1] = { "q4_1", 0, 0, 0 },
	[GGML_TYPE_Q5_0] = { "q5_0", 0, 0, 0 },
	[GGML_TYPE_Q5_1] = { "q5_1", 0, 0, 0 },
	[GGML_TYPE_Q8_0] = { "q8_0", QK8_0, sizeof(struct block_q8_0), GGML_TYPE_Q8_0 },
	[GGML_TYPE_Q8_1] = { "q8_1", 0, 0, 0 },
	[GGML_TYPE_Q2_K] = { "q2_k", 0, 0, 0 },
	[GGML_TYPE_Q3_K] = { "q3_k", 0, 0, 0 },
	[GGML_TYPE_Q4_K] = { "q4_k", QK_K, sizeof(struct block_q4_K), GGML_TYPE_Q8_K },
	[GGML_TYPE_Q5_K] = { "q5_k", 0, 0, 0 },
	[GGML_TYPE_Q6_K] = { "q6_k", QK_K, sizeof(struct block_q6_K), GGML_TYPE_Q8_K },
	/* activations only: no dot product takes Q8_K weights */
	[GGML_TYPE_Q8_K] = { "q8_k", QK_K, sizeof(struct block_q8_K), GGML_TYPE_COUNT_ },
	[16] = { "iq2_xxs", 0, 0, 0 },
	[17] = { "iq2_xs", 0, 0, 0 },
	[18] = { "iq3_xxs", 0, 0, 0 },
	[19] = { "iq1_s", 0, 0, 0 },
	[20] = { "iq4_nl", 0, 0, 0 },
	[21] = { "iq3_s", 0, 0, 0 },
	[22] = { "iq2_s", 0, 0, 0 },
	[23] = { "iq4_xs", 0, 0, 0 },
	[24] = { "i8", 0, 0, 0 },
	[25] = { "i16", 0, 0, 0 },
	[26] = { "i32", 0, 0, 0 },
	[27] = { "i64", 0, 0, 0 },
	[28] = { "f64", 0, 0, 0 },
	[29] = { "iq1_m", 0, 0, 0 },
	[GGML_TYPE_BF16] = { "bf16", 1, 2, GGML_TYPE_BF16 },
	[34] = { "tq1_0", 0, 0, 0 },
	[35] = { "tq2_0", 0, 0, 0 },
	[39] = { "mxfp4", 0, 0, 0 },
};

static const struct type_info *type_info(uint32_t type)
{
	if (type >= GGML_TYPE_COUNT_ || !type_table[type].name)
		return NULL;
	return &type_table[type];
}

bool quant_type_supported(uint32_t type)
{
	const struct type_info *t = type_info(type);

	return t && t->block_values > 0;
}

const char *quant_type_name(uint32_t type)
{
	const struct type_info *t = type_info(type);

	return t ? t->name : NULL;
}

int quant_type_from_name(const char *name, uint32_t *ret)
{
	assert_return(name && ret, -EINVAL);

	for (uint32_t i = 0; i < GGML_TYPE_COUNT_; i++)
		if (type_table[i].name && strcasecmp(type_table[i].name, name) == 0) {
			*ret = i;
			return 0;
		}
	return -EINVAL;
}

size_t quant_block_values(uint32_t type)
{
	return quant_type_supported(type) ? type_table[type].block_values : 0;
}

size_t quant_block_bytes(uint32_t type)
{
	return quant_type_supported(type) ? type_table[type].block_bytes : 0;
}

int64_t quant_row_bytes(uint32_t type, int64_t n)
{
	int64_t bytes;

	if (!quant_type_supported(type) || n < 0 || n % type_table[type].block_values != 0)
		return -EINVAL;
	if (__builtin_mul_overflow(n / type_table[type].block_values,
				   (int64_t) type_table[type].block_bytes, &bytes))
		return -EOVERFLOW;
	return bytes;
}

uint32_t quant_vec_dot_type(uint32_t type)
{
	return quant_type_supported(type) ? type_table[type].vec_dot_type : GGML_TYPE_COUNT_;
}

/* ---- scalar activation conversions ---- */

/* Round to nearest, ties to even: ggml's nearest_int() for the |v| < 2^22 it is used on
 * (larger values saturate here instead of wrapping). rintf() rather than ggml's
 * add-a-magic-constant trick, which a compiler may fuse with the multiply before it (FMA
 * contraction) and so round differently. */
static inline int nearest_int(float v)
{
	if (!(fabsf(v) < 4194304.f))
		return isnan(v) ? 0 : v > 0 ? 4194304 : -4194304;
	return (int) rintf(v);
}

/* What x86's round-then-convert (cvtps2dq after roundps) gives, so the SIMD quantizers
 * stay bit-identical even on degenerate input: ties to even, and INT32_MIN for NaN or
 * anything out of int32 range (e.g. x * 127/amax when 127/amax overflowed to inf). The
 * packing that follows saturates to int8. */
static inline int32_t round_like_cvtps(float v)
{
	if (!(v >= -2147483648.f && v < 2147483648.f))
		return INT32_MIN;
	return (int32_t) rintf(v);
}

static inline int8_t saturate_i8(int32_t v)
{
	return (int8_t) (v > 127 ? 127 : v < -128 ? -128 : v);
}

static void quantize_f16_scalar(const float *x, void *dst, int64_t n)
{
	uint16_t *y = dst;

	for (int64_t i = 0; i < n; i++)
		y[i] = f32_to_fp16(x[i]);
}

static void quantize_bf16_scalar(const float *x, void *dst, int64_t n)
{
	uint16_t *y = dst;

	for (int64_t i = 0; i < n; i++)
		y[i] = f32_to_bf16(x[i]);
}

/* ggml's x86 quantize_row_q8_0 (the one llama.cpp's activations go through): d =
 * fp16(amax/127), q = round_half_even(x * (127/amax)). Not its scalar _ref, which rounds
 * half away from zero and multiplies by 1/d. NaNs are left out of amax, as the SIMD
 * versions do. */
static void quantize_q8_0_scalar(const float *x, void *dst, int64_t n)
{
	struct block_q8_0 *y = dst;

	for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
		float amax = 0.f;

		for (int j = 0; j < QK8_0; j++)
			if (fabsf(x[j]) > amax) /* not fmaxf(): glibc's returns NaN for a signalling one */
				amax = fabsf(x[j]);
		y[i].d = f32_to_fp16(amax / 127.f);
		const float id = amax != 0.f ? 127.f / amax : 0.f;
		for (int j = 0; j < QK8_0; j++)
			y[i].qs[j] = saturate_i8(round_like_cvtps(x[j] * id));
	}
}

/* ggml's quantize_row_q8_K_ref: the scale comes from the first value of largest
 * magnitude, m, with iscale = -127/m, so that value maps to -127 exactly. */
static void quantize_q8_K_scalar(const float *x, void *dst, int64_t n)
{
	struct block_q8_K *y = dst;

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float amax = 0.f, m = 0.f;

		for (int j = 0; j < QK_K; j++)
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				m = x[j];
			}
		if (amax == 0.f) {
			memset(&y[i], 0, sizeof(y[i]));
			continue;
		}
		const float iscale = -127.f / m;
		for (int j = 0; j < QK_K; j++)
			y[i].qs[j] = saturate_i8(round_like_cvtps(iscale * x[j]));
		for (int g = 0; g < QK_K / 16; g++) {
			int sum = 0;
			for (int j = 0; j < 16; j++)
				sum += y[i].qs[16 * g + j];
			y[i].bsums[g] = (int16_t) sum;
		}
		y[i].d = 1.f / iscale;
	}
}

/* ---- scalar dot products ---- */

static float dot_f32_scalar(int64_t n, const void *w, const void *x)
{
	const float *a = w, *b = x;
	double sum = 0.0;

	for (int64_t i = 0; i < n; i++)
		sum += (double) (a[i] * b[i]);
	return (float) sum;
}

static float dot_f16_scalar(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w, *b = x;
	double sum = 0.0;

	/* the product of two halves is exact in float */
	for (int64_t i = 0; i < n; i++)
		sum += (double) (fp16_to_f32(a[i]) * fp16_to_f32(b[i]));
	return (float) sum;
}

static float dot_bf16_scalar(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w, *b = x;
	double sum = 0.0;

	for (int64_t i = 0; i < n; i++)
		sum += (double) (bf16_to_f32(a[i]) * bf16_to_f32(b[i]));
	return (float) sum;
}

static float dot_q8_0_scalar(int64_t n, const void *w, const void *x)
{
	const struct block_q8_0 *a = w, *b = x;
	double sum = 0.0;

	for (int64_t i = 0; i < n / QK8_0; i++) {
		int sumi = 0;

		for (int j = 0; j < QK8_0; j++)
			sumi += a[i].qs[j] * b[i].qs[j];
		sum += (double) ((float) sumi * (fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d)));
	}
	return (float) sum;
}

static float dot_q4_0_scalar(int64_t n, const void *w, const void *x)
{
	const struct block_q4_0 *a = w;
	const struct block_q8_0 *b = x;
	double sum = 0.0;

	for (int64_t i = 0; i < n / QK4_0; i++) {
		int sumi = 0;

		for (int j = 0; j < QK4_0 / 2; j++) {
			sumi += ((a[i].qs[j] & 0xf) - 8) * b[i].qs[j];
			sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + QK4_0 / 2];
		}
		sum += (double) ((float) sumi * (fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d)));
	}
	return (float) sum;
}

/*
 * Per block: d * sum_j sc_j * (q . y)_j - dmin * sum_j m_j * (sum of y)_j, both integer
 * sums exact; the sums of y are recomputed from qs rather than taken from bsums, so that
 * tests comparing the SIMD kernels (which use bsums) with this one also check bsums.
 */
static float dot_q4_K_scalar(int64_t n, const void *w, const void *x)
{
	const struct block_q4_K *a = w;
	const struct block_q8_K *b = x;
	double sum = 0.0;

	for (int64_t i = 0; i < n / QK_K; i++) {
		const uint8_t *q = a[i].qs;
		const int8_t *y = b[i].qs;
		uint8_t sc[8], m[8];
		int sumi = 0, summ = 0;

		q4_K_unpack_scales(a[i].scales, sc, m);
		for (int j = 0; j < QK_K / 64; j++, q += 32, y += 64) {
			int lo = 0, hi = 0, ylo = 0, yhi = 0;

			for (int l = 0; l < 32; l++) {
				lo += (q[l] & 0xf) * y[l];
				hi += (q[l] >> 4) * y[l + 32];
				ylo += y[l];
				yhi += y[l + 32];
			}
			sumi += sc[2 * j] * lo + sc[2 * j + 1] * hi;
			summ += m[2 * j] * ylo + m[2 * j + 1] * yhi;
		}
		const float d = fp16_to_f32(a[i].d) * b[i].d;
		const float dmin = fp16_to_f32(a[i].dmin) * b[i].d;
		sum += (double) (d * (float) sumi) - (double) (dmin * (float) summ);
	}
	return (float) sum;
}

/* Value l of a 128-value half: ql holds the low nibbles of l (l < 64) or l - 64 (high
 * nibbles), qh bits 2*(l/32)..+1 the top two bits; q - 32 is the signed level. */
static inline int q6_K_value(const uint8_t *ql, const uint8_t *qh, int l)
{
	int lo = l < 64 ? ql[l] & 0xf : ql[l - 64] >> 4;
	int hi = (qh[l % 32] >> (2 * (l / 32))) & 3;

	return (lo | hi << 4) - 32;
}

static float dot_q6_K_scalar(int64_t n, const void *w, const void *x)
{
	const struct block_q6_K *a = w;
	const struct block_q8_K *b = x;
	double sum = 0.0;

	for (int64_t i = 0; i < n / QK_K; i++) {
		int sumi = 0;

		for (int h = 0; h < QK_K / 128; h++) {
			const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
			const int8_t *y = b[i].qs + 128 * h;

			for (int g = 0; g < 8; g++) {
				int s = 0;

				for (int l = 16 * g; l < 16 * g + 16; l++)
					s += q6_K_value(ql, qh, l) * y[l];
				sumi += a[i].scales[8 * h + g] * s;
			}
		}
		sum += (double) ((fp16_to_f32(a[i].d) * b[i].d) * (float) sumi);
	}
	return (float) sum;
}

static void axpy_f32_scalar(int64_t n, const float *a, int64_t count, const float *x,
			    size_t x_stride, float *y)
{
	for (int64_t j = 0; j < count; j++)
		for (int64_t i = 0; i < n; i++)
			y[i] = fmaf(a[j], x[(size_t) j * x_stride + (size_t) i], y[i]);
}

/* the order of the scalar code attention had before the kernel table held a softmax */
static void softmax_f32_scalar(float *x, int64_t n, float scale)
{
	float maxv = -INFINITY, inv;
	double sum = 0.0;

	for (int64_t i = 0; i < n; i++) {
		x[i] *= scale;
		maxv = MAX(maxv, x[i]);
	}
	for (int64_t i = 0; i < n; i++) {
		x[i] = expf(x[i] - maxv);
		sum += x[i];
	}
	inv = (float) (1.0 / sum);
	for (int64_t i = 0; i < n; i++)
		x[i] *= inv;
}

const struct quant_kernels quant_kernels_scalar = {
	.name = "scalar",
	.quantize_f16 = quantize_f16_scalar,
	.quantize_bf16 = quantize_bf16_scalar,
	.quantize_q8_0 = quantize_q8_0_scalar,
	.quantize_q8_K = quantize_q8_K_scalar,
	.dot_f32 = dot_f32_scalar,
	.dot_f16 = dot_f16_scalar,
	.dot_bf16 = dot_bf16_scalar,
	.dot_q8_0 = dot_q8_0_scalar,
	.dot_q4_0 = dot_q4_0_scalar,
	.dot_q4_K = dot_q4_K_scalar,
	.dot_q6_K = dot_q6_K_scalar,
	.axpy_f32 = axpy_f32_scalar,
	.softmax_f32 = softmax_f32_scalar,
};

/* ---- weight quantizers (molly-mkmodel); ggml's reference algorithms, so a model we
 * quantize from F32 matches llama-quantize's (without an imatrix) ---- */

/* ggml's quantize_row_q4_0_ref: the value of largest magnitude maps to level -8. */
static void quantize_q4_0_weights(const float *x, void *dst, int64_t n)
{
	struct block_q4_0 *y = dst;

	for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
		float amax = 0.f, max = 0.f;

		for (int j = 0; j < QK4_0; j++)
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		const float d = max / -8.f;
		const float id = d != 0.f ? 1.f / d : 0.f;
		y[i].d = f32_to_fp16(d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			/* x*id is in [-8, 8]; +8.5 and truncation round half up, 16 clamps to 15 */
			int lo = (int) (x[j] * id + 8.5f), hi = (int) (x[j + QK4_0 / 2] * id + 8.5f);
			lo = MIN(15, MAX(0, lo));
			hi = MIN(15, MAX(0, hi));
			y[i].qs[j] = (uint8_t) (lo | hi << 4);
		}
	}
}

/*
 * ggml's make_qkx2_quants(): fits x ~ scale * L - min with L in 0..nmax and min >= 0
 * (min is returned negated in *the_min), minimizing the weighted squared error over
 * a few candidate scales around (max - min) / nmax.
 */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
			      float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep)
{
	float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];

	for (int i = 1; i < n; i++) {
		if (x[i] < min)
			min = x[i];
		if (x[i] > max)
			max = x[i];
		sum_w += weights[i];
		sum_x += weights[i] * x[i];
	}
	if (min > 0)
		min = 0;
	if (max == min) {
		memset(L, 0, (size_t) n);
		*the_min = -min;
		return 0.f;
	}
	float iscale = nmax / (max - min);
	float scale = 1 / iscale;
	float best_error = 0;
	for (int i = 0; i < n; i++) {
		int l = nearest_int(iscale * (x[i] - min));
		L[i] = (uint8_t) MAX(0, MIN(nmax, l));
		float diff = scale * L[i] + min - x[i];
		best_error += weights[i] * (diff * diff);
	}
	for (int is = 0; is <= nstep; is++) {
		float sum_l = 0, sum_l2 = 0, sum_xl = 0;

		iscale = (rmin + rdelta * is + nmax) / (max - min);
		for (int i = 0; i < n; i++) {
			int l = nearest_int(iscale * (x[i] - min));
			l = MAX(0, MIN(nmax, l));
			Laux[i] = (uint8_t) l;
			sum_l += weights[i] * l;
			sum_l2 += weights[i] * l * l;
			sum_xl += weights[i] * l * x[i];
		}
		float D = sum_w * sum_l2 - sum_l * sum_l;
		if (D > 0) {
			float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
			float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
			if (this_min > 0) {
				this_min = 0;
				this_scale = sum_xl / sum_l2;
			}
			float cur_error = 0;
			for (int i = 0; i < n; i++) {
				float diff = this_scale * Laux[i] + this_min - x[i];
				cur_error += weights[i] * (diff * diff);
			}
			if (cur_error < best_error) {
				memcpy(L, Laux, (size_t) n);
				best_error = cur_error;
				scale = this_scale;
				min = this_min;
			}
		}
	}
	*the_min = -min;
	return scale;
}

/* ggml's quantize_row_q4_K_ref. */
static void quantize_q4_K_weights(const float *x, void *dst, int64_t n)
{
	struct block_q4_K *y = dst;
	uint8_t L[QK_K], Laux[32];
	float weights[32], mins[QK_K / 32], scales[QK_K / 32];

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float max_scale = 0, max_min = 0;

		for (int j = 0; j < QK_K / 32; j++) {
			float sum_x2 = 0;

			for (int l = 0; l < 32; l++)
				sum_x2 += x[32 * j + l] * x[32 * j + l];
			float av_x = sqrtf(sum_x2 / 32);
			for (int l = 0; l < 32; l++)
				weights[l] = av_x + fabsf(x[32 * j + l]);
			scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j],
						     Laux, -1.f, 0.1f, 20);
			if (scales[j] > max_scale)
				max_scale = scales[j];
			if (mins[j] > max_min)
				max_min = mins[j];
		}

		float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
		float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
		memset(y[i].scales, 0, sizeof(y[i].scales));
		for (int j = 0; j < QK_K / 32; j++) {
			uint8_t ls = (uint8_t) MIN(63, nearest_int(inv_scale * scales[j]));
			uint8_t lm = (uint8_t) MIN(63, nearest_int(inv_min * mins[j]));

			if (j < 4) {
				y[i].scales[j] |= ls;
				y[i].scales[j + 4] |= lm;
			} else {
				y[i].scales[j + 4] = (uint8_t) ((ls & 0xf) | (lm & 0xf) << 4);
				y[i].scales[j - 4] |= (uint8_t) ((ls >> 4) << 6);
				y[i].scales[j] |= (uint8_t) ((lm >> 4) << 6);
			}
		}
		y[i].d = f32_to_fp16(max_scale / 63.f);
		y[i].dmin = f32_to_fp16(max_min / 63.f);

		/* requantize against the scales as stored */
		uint8_t sc[8], m[8];
		q4_K_unpack_scales(y[i].scales, sc, m);
		for (int j = 0; j < QK_K / 32; j++) {
			const float d = fp16_to_f32(y[i].d) * sc[j];
			if (d == 0.f)
				continue;
			const float dm = fp16_to_f32(y[i].dmin) * m[j];
			for (int l = 0; l < 32; l++) {
				int q = nearest_int((x[32 * j + l] + dm) / d);
				L[32 * j + l] = (uint8_t) MAX(0, MIN(15, q));
			}
		}
		for (int j = 0; j < QK_K / 64; j++)
			for (int l = 0; l < 32; l++)
				y[i].qs[32 * j + l] = (uint8_t) (L[64 * j + l] | L[64 * j + l + 32] << 4);
	}
}

/* ggml's make_qx_quants() with rmse_type 1 and no importance weights: symmetric levels
 * -nmax..nmax-1, weighted by x^2, trying scales around nmax/max. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L)
{
	float max = 0, amax = 0;

	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	if (amax < 1e-15f) {
		memset(L, 0, (size_t) n);
		return 0.f;
	}
	float iscale = -nmax / max;
	float sumlx = 0, suml2 = 0;
	for (int i = 0; i < n; i++) {
		int l = nearest_int(iscale * x[i]);
		l = MAX(-nmax, MIN(nmax - 1, l));
		L[i] = (int8_t) (l + nmax);
		float w = x[i] * x[i];
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	float scale = suml2 ? sumlx / suml2 : 0.0f;
	float best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0)
			continue;
		iscale = -(nmax + 0.1f * is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; i++) {
			int l = nearest_int(iscale * x[i]);
			l = MAX(-nmax, MIN(nmax - 1, l));
			float w = x[i] * x[i];
			sumlx += w * x[i] * l;
			suml2 += w * l * l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; i++) {
				int l = nearest_int(iscale * x[i]);
				L[i] = (int8_t) (nmax + MAX(-nmax, MIN(nmax - 1, l)));
			}
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

/* ggml's quantize_row_q6_K_ref. */
static void quantize_q6_K_weights(const float *x, void *dst, int64_t n)
{
	struct block_q6_K *y = dst;
	int8_t L[QK_K];
	float scales[QK_K / 16];

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float max_scale = 0, max_abs_scale = 0;

		for (int g = 0; g < QK_K / 16; g++) {
			scales[g] = make_qx_quants(16, 32, x + 16 * g, L + 16 * g);
			if (fabsf(scales[g]) > max_abs_scale) {
				max_abs_scale = fabsf(scales[g]);
				max_scale = scales[g];
			}
		}
		memset(&y[i], 0, sizeof(y[i]));
		if (max_abs_scale < 1e-15f)
			continue; /* all (near) zero: d = 0 */

		const float iscale = -128.f / max_scale;
		y[i].d = f32_to_fp16(1 / iscale);
		for (int g = 0; g < QK_K / 16; g++)
			y[i].scales[g] = (int8_t) MIN(127, nearest_int(iscale * scales[g]));

		for (int g = 0; g < QK_K / 16; g++) {
			const float d = fp16_to_f32(y[i].d) * y[i].scales[g];
			if (d == 0.f)
				continue;
			for (int l = 0; l < 16; l++) {
				int q = nearest_int(x[16 * g + l] / d);
				L[16 * g + l] = (int8_t) (MAX(-32, MIN(31, q)) + 32);
			}
		}
		for (int h = 0; h < QK_K / 128; h++) {
			const int8_t *l = L + 128 * h;
			uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;

			for (int k = 0; k < 32; k++) {
				ql[k] = (uint8_t) ((l[k] & 0xf) | (l[k + 64] & 0xf) << 4);
				ql[k + 32] = (uint8_t) ((l[k + 32] & 0xf) | (l[k + 96] & 0xf) << 4);
				qh[k] = (uint8_t) ((l[k] >> 4) | (l[k + 32] >> 4) << 2 |
						   (l[k + 64] >> 4) << 4 | (l[k + 96] >> 4) << 6);
			}
		}
	}
}

/* ---- dequantization ---- */

static void dequantize_scalar(uint32_t type, const void *src, float *dst, int64_t n)
{
	switch (type) {
	case GGML_TYPE_F32:
		memcpy(dst, src, (size_t) n * sizeof(float));
		break;
	case GGML_TYPE_F16: {
		const uint16_t *h = src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = fp16_to_f32(h[i]);
		break;
	}
	case GGML_TYPE_BF16: {
		const uint16_t *h = src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = bf16_to_f32(h[i]);
		break;
	}
	case GGML_TYPE_Q8_0: {
		const struct block_q8_0 *b = src;
		for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
			const float d = fp16_to_f32(b[i].d);
			for (int j = 0; j < QK8_0; j++)
				dst[j] = b[i].qs[j] * d;
		}
		break;
	}
	case GGML_TYPE_Q4_0: {
		const struct block_q4_0 *b = src;
		for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
			const float d = fp16_to_f32(b[i].d);
			for (int j = 0; j < QK4_0 / 2; j++) {
				dst[j] = ((b[i].qs[j] & 0xf) - 8) * d;
				dst[j + QK4_0 / 2] = ((b[i].qs[j] >> 4) - 8) * d;
			}
		}
		break;
	}
	case GGML_TYPE_Q4_K: {
		const struct block_q4_K *b = src;
		for (int64_t i = 0; i < n / QK_K; i++) {
			const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
			const uint8_t *q = b[i].qs;
			uint8_t sc[8], m[8];

			q4_K_unpack_scales(b[i].scales, sc, m);
			for (int j = 0; j < QK_K / 64; j++, q += 32) {
				const float d1 = d * sc[2 * j], m1 = dmin * m[2 * j];
				const float d2 = d * sc[2 * j + 1], m2 = dmin * m[2 * j + 1];
				for (int l = 0; l < 32; l++)
					*dst++ = d1 * (q[l] & 0xf) - m1;
				for (int l = 0; l < 32; l++)
					*dst++ = d2 * (q[l] >> 4) - m2;
			}
		}
		break;
	}
	case GGML_TYPE_Q6_K: {
		const struct block_q6_K *b = src;
		for (int64_t i = 0; i < n / QK_K; i++) {
			const float d = fp16_to_f32(b[i].d);
			for (int h = 0; h < QK_K / 128; h++)
				for (int l = 0; l < 128; l++)
					*dst++ = d * b[i].scales[8 * h + l / 16] *
						 q6_K_value(b[i].ql + 64 * h, b[i].qh + 32 * h, l);
		}
		break;
	}
	case GGML_TYPE_Q8_K: {
		const struct block_q8_K *b = src;
		for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
			const float d = b[i].d;
			for (int j = 0; j < QK_K; j++)
				dst[j] = b[i].qs[j] * d;
		}
		break;
	}
	default:
		assert(!"quant_dequantize_row: unsupported type");
	}
}

/* ---- dispatch ----
 *
 * The levels, best first. A level is chosen (by default, or by quant_force_simd_level())
 * only when the CPU has every instruction set its file is compiled with, AND it has been
 * proven: its tests (test-quant, test-matmul, test-forward-attention, test-sampler, which
 * compare it with the scalar reference) have passed on a CPU that has it. A level never run
 * on such a CPU stays compiled but held back unless MOLLY_CPU_UNPROVEN=1 is set: no emulator
 * here runs AVX-512 or AMX, so a real CPU is the only proof. A session that runs the tests of
 * a held-back level on a CPU that has it (MOLLY_CPU_UNPROVEN=1, all passing) records where
 * and when in `proven` below; the tests print which levels ran, which were skipped for want
 * of an instruction set, and which were held back.
 *
 * "amx" (kernels-amx.c: packed Q8_0 / Q4_0 prefill on AMX tiles, the rest as avx512bf16) is
 * written but held back: no CPU here has had AMX yet. Its kernel was checked on CPUs without
 * AMX through a C model of the tile instructions (tests/test-amx-emulated.c: the same source,
 * bit for bit against the scalar reference); a session on a Sapphire Rapids (or later) CPU
 * proves it by running test-quant and test-matmul with MOLLY_CPU_UNPROVEN=1 and recording
 * the CPU and date in `proven`.
 */
enum {
	CPU_AVX2 = 1 << 0,       /* AVX2 + FMA + F16C */
	CPU_AVX512 = 1 << 1,     /* AVX-512 F + BW + VL + DQ */
	CPU_AVX512VNNI = 1 << 2, /* AVX-512 VNNI */
	CPU_AVXVNNI = 1 << 3,    /* AVX-VNNI (VEX-encoded vpdpbusd) */
	CPU_AVX512BF16 = 1 << 4, /* AVX512-BF16 */
	CPU_AMX = 1 << 5,        /* AMX-TILE + AMX-INT8, tile state granted by the kernel */
};

#if defined(__x86_64__)
static struct quant_kernels kernels_avxvnni, kernels_avx512bf16, kernels_amx; /* kernels_init() */
#endif

static const struct simd_level {
	const struct quant_kernels *k;
	unsigned needs;     /* CPU_* bits */
	const char *proven; /* where and when its tests first passed on a CPU that has it */
} simd_levels[] = {
#if defined(__x86_64__)
	{ &kernels_amx, CPU_AVX2 | CPU_AVX512 | CPU_AVX512VNNI | CPU_AVX512BF16 | CPU_AMX, NULL },
	/* "and 2026-12-02": again after that day's kernel changes (K-quant row tiles on every
	 * level; AVX-512 BF16 tiles and packed tiles without spills on avx512) */
	{ &kernels_avx512bf16, CPU_AVX2 | CPU_AVX512 | CPU_AVX512VNNI | CPU_AVX512BF16,
	  "AMD EPYC Zen 5 (family 26 model 2), 2026-12-01 and 2026-12-02" },
	{ &quant_kernels_avx512vnni, CPU_AVX2 | CPU_AVX512 | CPU_AVX512VNNI,
	  "AMD EPYC Zen 5 (family 26 model 2), 2026-12-01 and 2026-12-02" },
	{ &quant_kernels_avx512, CPU_AVX2 | CPU_AVX512,
	  "AMD EPYC Zen 5 (family 26 model 2), 2026-12-01 and 2026-12-02" },
	{ &kernels_avxvnni, CPU_AVX2 | CPU_AVXVNNI,
	  "AMD EPYC Zen 5 (family 26 model 2), 2026-12-01 and 2026-12-02" },
	{ &quant_kernels_avx2, CPU_AVX2,
	  "AMD EPYC Zen 3 (family 25 model 1), 2026-11-30 and 2026-12-02 (before the K-quant "
	  "tiles); AMD EPYC Zen 5 (family 26 model 2), 2026-12-01 and 2026-12-02" },
#endif
	{ &quant_kernels_scalar, 0, "every CPU (portable C)" },
};

static const struct quant_kernels *kernels_cpu = &quant_kernels_scalar; /* default level */
static const struct quant_kernels *kernels_active = &quant_kernels_scalar;
static unsigned cpu_features;
static bool allow_unproven;
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
#define ARCH_REQ_XCOMP_PERM_ 0x1023 /* <asm/prctl.h>, absent from older headers */
#define XFEATURE_XTILEDATA_ 18

/* XCR0: the state components the OS saves (only asked after cpuid reports OSXSAVE, which
 * AMX-TILE implies) */
static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t) hi << 32) | lo;
}
#endif

/* The CPU_* sets this CPU (and OS) runs. __builtin_cpu_supports() also checks that the OS
 * saves the vector state (XCR0); AVX-VNNI is VEX-encoded, so AVX2's check covers it. */
static unsigned detect_features(void)
{
	unsigned f = 0;
#if defined(__x86_64__)
	unsigned int eax, ebx, ecx = 0, edx;

	__builtin_cpu_init();
	/* clang's __builtin_cpu_supports() does not know "f16c": ask cpuid (leaf 1) */
	bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);

	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)
		f |= CPU_AVX2;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
		f |= CPU_AVX512;
	if (__builtin_cpu_supports("avx512vnni"))
		f |= CPU_AVX512VNNI;
	/* leaf 7 subleaf 1, EAX bit 4 (older compilers' cpu_supports lacks "avxvnni"), bit 5 */
	if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
		if (eax & (1u << 4))
			f |= CPU_AVXVNNI;
		if (eax & (1u << 5))
			f |= CPU_AVX512BF16;
	}
	/* AMX: leaf 7 EDX bit 24 (AMX-TILE) and 25 (AMX-INT8), the OS saving the tile state
	 * (XCR0 bits 17 and 18), and this process allowed to use it: Linux hands the 8 KiB tile
	 * state out on request only (arch_prctl ARCH_REQ_XCOMP_PERM, 5.16 and later), for every
	 * thread of the process. */
	if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 24)) &&
	    (edx & (1u << 25)) && (xgetbv0() & (3u << 17)) == (3u << 17) &&
	    syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) == 0)
		f |= CPU_AMX;
#endif
	return f;
}

static enum quant_level_state level_state(const struct simd_level *l)
{
	if ((cpu_features & l->needs) != l->needs)
		return QUANT_LEVEL_NO_ISA;
	if (!l->proven && !allow_unproven)
		return QUANT_LEVEL_UNPROVEN;
	return QUANT_LEVEL_RUNS;
}

static void kernels_init(void)
{
	const char *env = getenv("MOLLY_CPU_UNPROVEN");

#if defined(__x86_64__)
	/* Made here, in generic code (see kernels.h): the AVX2 table with the AVX-VNNI packed
	 * kernels, the AVX-512 VNNI one with the BF16 kernels. */
	kernels_avxvnni = quant_kernels_avx2;
	kernels_avxvnni.name = "avxvnni";
	kernels_avxvnni.gemm_packed_q8_0 = quant_gemm_packed_q8_0_avxvnni;
	kernels_avxvnni.gemm_packed_q4_0 = quant_gemm_packed_q4_0_avxvnni;
	kernels_avx512bf16 = quant_kernels_avx512vnni;
	kernels_avx512bf16.name = "avx512bf16";
	kernels_avx512bf16.dot_bf16 = quant_dot_bf16_avx512bf16;
	kernels_avx512bf16.gemm_bf16 = quant_gemm_bf16_avx512bf16;
	kernels_amx = kernels_avx512bf16;
	kernels_amx.name = "amx";
	kernels_amx.gemm_packed_q8_0 = quant_gemm_packed_q8_0_amx;
	kernels_amx.gemm_packed_q4_0 = quant_gemm_packed_q4_0_amx;
#endif
	cpu_features = detect_features();
	allow_unproven = env && strcmp(env, "1") == 0;
	for (size_t i = 0; i < ELEMENTSOF(simd_levels); i++)
		if (level_state(&simd_levels[i]) == QUANT_LEVEL_RUNS) {
			kernels_cpu = simd_levels[i].k;
			break;
		}
	__atomic_store_n(&kernels_active, kernels_cpu, __ATOMIC_RELEASE);
}

static const struct quant_kernels *kernels(void)
{
	(void) pthread_once(&kernels_once, kernels_init);
	return __atomic_load_n(&kernels_active, __ATOMIC_ACQUIRE);
}

static const struct simd_level *find_level(const char *name)
{
	(void) kernels();
	for (size_t i = 0; name && i < ELEMENTSOF(simd_levels); i++)
		if (strcmp(simd_levels[i].k->name, name) == 0)
			return &simd_levels[i];
	return NULL;
}

const char *quant_simd_level(void)
{
	return kernels()->name;
}

/* The needs (CPU_* bits) of the level in use. */
static unsigned active_needs(void)
{
	const struct quant_kernels *k = kernels();

	for (size_t i = 0; i < ELEMENTSOF(simd_levels); i++)
		if (simd_levels[i].k == k)
			return simd_levels[i].needs;
	return 0;
}

bool quant_simd_level_avx2(void)
{
	return active_needs() & CPU_AVX2;
}

bool quant_simd_level_avx512(void)
{
	return active_needs() & CPU_AVX512;
}

size_t quant_simd_levels(const char **names, size_t max)
{
	size_t n = 0;

	(void) kernels();
	for (size_t i = 0; i < ELEMENTSOF(simd_levels) && n < max; i++)
		names[n++] = simd_levels[i].k->name;
	return n;
}

enum quant_level_state quant_simd_level_state(const char *name)
{
	const struct simd_level *l = find_level(name);

	return l ? level_state(l) : QUANT_LEVEL_UNKNOWN;
}

const char *quant_simd_level_proven(const char *name)
{
	const struct simd_level *l = find_level(name);

	return l ? l->proven : NULL;
}

int quant_force_simd_level(const char *name)
{
	const struct simd_level *l;

	assert_return(name, -EINVAL);
	l = find_level(name);
	if (!l)
		return -ENOTSUP;
	switch (level_state(l)) {
	case QUANT_LEVEL_RUNS:
		__atomic_store_n(&kernels_active, l->k, __ATOMIC_RELEASE);
		return 0;
	case QUANT_LEVEL_UNPROVEN:
		return -EPERM;
	default:
		return -ENOTSUP;
	}
}

/* ---- the public entry points ---- */

static void quantize_row(const struct quant_kernels *k, uint32_t type, const float *x, void *dst,
			 int64_t n)
{
	assert(quant_type_supported(type) && n >= 0 && n % type_table[type].block_values == 0);
	switch (type) {
	case GGML_TYPE_F32:
		memcpy(dst, x, (size_t) n * sizeof(float));
		break;
	case GGML_TYPE_F16:
		k->quantize_f16(x, dst, n);
		break;
	case GGML_TYPE_BF16:
		k->quantize_bf16(x, dst, n);
		break;
	case GGML_TYPE_Q8_0:
		k->quantize_q8_0(x, dst, n);
		break;
	case GGML_TYPE_Q8_K:
		k->quantize_q8_K(x, dst, n);
		break;
	case GGML_TYPE_Q4_0:
		quantize_q4_0_weights(x, dst, n);
		break;
	case GGML_TYPE_Q4_K:
		quantize_q4_K_weights(x, dst, n);
		break;
	case GGML_TYPE_Q6_K:
		quantize_q6_K_weights(x, dst, n);
		break;
	default:
		assert(!"quant_quantize_row: unsupported type");
	}
}

static float vec_dot(const struct quant_kernels *k, uint32_t type, int64_t n, const void *w,
		     const void *x)
{
	assert(quant_type_supported(type) && n >= 0 && n % type_table[type].block_values == 0);
	switch (type) {
	case GGML_TYPE_F32:
		return k->dot_f32(n, w, x);
	case GGML_TYPE_F16:
		return k->dot_f16(n, w, x);
	case GGML_TYPE_BF16:
		return k->dot_bf16(n, w, x);
	case GGML_TYPE_Q8_0:
		return k->dot_q8_0(n, w, x);
	case GGML_TYPE_Q4_0:
		return k->dot_q4_0(n, w, x);
	case GGML_TYPE_Q4_K:
		return k->dot_q4_K(n, w, x);
	case GGML_TYPE_Q6_K:
		return k->dot_q6_K(n, w, x);
	default:
		assert(!"quant_vec_dot: no dot product for this type");
		return NAN;
	}
}

void quant_quantize_row(uint32_t type, const float *x, void *dst, int64_t n)
{
	quantize_row(kernels(), type, x, dst, n);
}

void quant_quantize_row_ref(uint32_t type, const float *x, void *dst, int64_t n)
{
	quantize_row(&quant_kernels_scalar, type, x, dst, n);
}

void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
	assert(quant_type_supported(type) && n >= 0 && n % type_table[type].block_values == 0);
	dequantize_scalar(type, src, dst, n);
}

float quant_vec_dot(uint32_t type, int64_t n, const void *w_row, const void *x_row)
{
	return vec_dot(kernels(), type, n, w_row, x_row);
}

float quant_vec_dot_ref(uint32_t type, int64_t n, const void *w_row, const void *x_row)
{
	return vec_dot(&quant_kernels_scalar, type, n, w_row, x_row);
}

static void gemm(const struct quant_kernels *k, uint32_t type, int64_t n, const void *w,
		 size_t w_stride, int64_t nr, const void *x, size_t x_stride, int64_t nc, float *y,
		 size_t y_stride)
{
	quant_gemm_fn fn = NULL;

	assert(quant_type_supported(type) && n >= 0 && n % type_table[type].block_values == 0);
	switch (type) {
	case GGML_TYPE_F32:
		fn = k->gemm_f32;
		break;
	case GGML_TYPE_F16:
		fn = k->gemm_f16;
		break;
	case GGML_TYPE_BF16:
		fn = k->gemm_bf16;
		break;
	case GGML_TYPE_Q8_0:
		fn = k->gemm_q8_0;
		break;
	case GGML_TYPE_Q4_0:
		fn = k->gemm_q4_0;
		break;
	case GGML_TYPE_Q4_K:
		fn = k->gemm_q4_K;
		break;
	case GGML_TYPE_Q6_K:
		fn = k->gemm_q6_K;
		break;
	}
	if (fn) {
		fn(n, w, w_stride, nr, x, x_stride, nc, y, y_stride);
		return;
	}
	/* no tile kernel: pair by pair, each row against every token while it is in cache */
	for (int64_t r = 0; r < nr; r++)
		for (int64_t c = 0; c < nc; c++)
			y[(size_t) c * y_stride + (size_t) r] =
				vec_dot(k, type, n, (const char *) w + (size_t) r * w_stride,
					(const char *) x + (size_t) c * x_stride);
}

void quant_gemm(uint32_t type, int64_t n, const void *w, size_t w_stride, int64_t nr,
		const void *x, size_t x_stride, int64_t nc, float *y, size_t y_stride)
{
	gemm(kernels(), type, n, w, w_stride, nr, x, x_stride, nc, y, y_stride);
}

void quant_gemm_ref(uint32_t type, int64_t n, const void *w, size_t w_stride, int64_t nr,
		    const void *x, size_t x_stride, int64_t nc, float *y, size_t y_stride)
{
	gemm(&quant_kernels_scalar, type, n, w, w_stride, nr, x, x_stride, nc, y, y_stride);
}

void quant_axpy_f32(int64_t n, const float *a, int64_t count, const float *x, size_t x_stride,
		    float *y)
{
	kernels()->axpy_f32(n, a, count, x, x_stride, y);
}

void quant_axpy_f32_ref(int64_t n, const float *a, int64_t count, const float *x,
			size_t x_stride, float *y)
{
	axpy_f32_scalar(n, a, count, x, x_stride, y);
}

static void attn_scores_scalar(int64_t n, const float *kt, int64_t np, const float *q,
			       size_t q_stride, int64_t nq, float *s, size_t s_stride)
{
	for (int64_t i = 0; i < nq; i++)
		for (int64_t p = 0; p < np; p++) {
			const float *qi = q + (size_t) i * q_stride;
			float acc = 0.f;

			for (int64_t d = 0; d < n; d++)
				acc = fmaf(kt[(size_t) d * QUANT_KEY_BLOCK + (size_t) p], qi[d], acc);
			s[(size_t) i * s_stride + (size_t) p] = acc;
		}
}

void quant_attn_scores_f32(int64_t n, const float *kt, int64_t np, const float *q,
			   size_t q_stride, int64_t nq, float *s, size_t s_stride)
{
	const struct quant_kernels *k = kernels();

	assert(np >= 0 && np <= QUANT_KEY_BLOCK);
	if (k->attn_scores_f32)
		k->attn_scores_f32(n, kt, np, q, q_stride, nq, s, s_stride);
	else
		attn_scores_scalar(n, kt, np, q, q_stride, nq, s, s_stride);
}

void quant_attn_scores_f32_ref(int64_t n, const float *kt, int64_t np, const float *q,
			       size_t q_stride, int64_t nq, float *s, size_t s_stride)
{
	attn_scores_scalar(n, kt, np, q, q_stride, nq, s, s_stride);
}

void quant_axpy_f32_rows(int64_t n, const float *a, size_t a_stride, const int64_t *count,
			 int64_t nq, const float *x, size_t x_stride, float *y, size_t y_stride)
{
	const struct quant_kernels *k = kernels();

	if (k->axpy_f32_rows) {
		k->axpy_f32_rows(n, a, a_stride, count, nq, x, x_stride, y, y_stride);
		return;
	}
	for (int64_t q = 0; q < nq; q++)
		if (count[q] > 0)
			k->axpy_f32(n, a + (size_t) q * a_stride, count[q], x, x_stride,
				    y + (size_t) q * y_stride);
}

void quant_softmax_f32(float *x, int64_t n, float scale)
{
	assert(n >= 1);
	kernels()->softmax_f32(x, n, scale);
}

void quant_softmax_f32_ref(float *x, int64_t n, float scale)
{
	assert(n >= 1);
	softmax_f32_scalar(x, n, scale);
}

/* ---- packed weights ---- */

bool quant_packed_supported(uint32_t type)
{
	return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_F32;
}

int64_t quant_packed_group_rows(uint32_t type)
{
	return type == GGML_TYPE_F32 ? QUANT_PACKED_F32_ROWS : QUANT_PACKED_ROWS;
}

static quant_gemm_packed_fn packed_kernel(const struct quant_kernels *k, uint32_t type)
{
	return type == GGML_TYPE_Q8_0 ? k->gemm_packed_q8_0
	       : type == GGML_TYPE_Q4_0 ? k->gemm_packed_q4_0
	       : type == GGML_TYPE_F32 ? k->gemm_packed_f32 : NULL;
}

bool quant_packed_preferred(uint32_t type)
{
	return quant_packed_supported(type) && packed_kernel(kernels(), type);
}

static size_t packed_block_bytes(uint32_t type)
{
	return type == GGML_TYPE_Q8_0 ? QUANT_PACKED_Q8_0_BLOCK : QUANT_PACKED_Q4_0_BLOCK;
}

size_t quant_packed_bytes(uint32_t type, int64_t n, int64_t n_rows)
{
	size_t groups, bytes;

	if (type == GGML_TYPE_F32) {
		if (n < 1 || n_rows < 0)
			return 0;
		groups = (size_t) (n_rows + QUANT_PACKED_F32_ROWS - 1) / QUANT_PACKED_F32_ROWS;
		if (__builtin_mul_overflow(groups, (size_t) n * QUANT_PACKED_F32_ROWS * sizeof(float),
					   &bytes))
			return 0;
		return bytes;
	}
	if (!quant_packed_supported(type) || n < 0 || n % QK8_0 || n_rows < 0)
		return 0;
	groups = (size_t) (n_rows + QUANT_PACKED_ROWS - 1) / QUANT_PACKED_ROWS;
	if (__builtin_mul_overflow(groups, (size_t) (n / QK8_0) * packed_block_bytes(type), &bytes))
		return 0;
	return bytes;
}

void quant_pack_rows(uint32_t type, int64_t n, const void *src, size_t src_stride,
		     int64_t n_rows, void *dst)
{
	const int64_t nb = n / QK8_0;
	const bool q4 = type == GGML_TYPE_Q4_0;
	const size_t row_block = q4 ? sizeof(struct block_q4_0) : sizeof(struct block_q8_0);
	const int chunks = q4 ? 4 : 8;
	uint8_t *out = dst;

	if (type == GGML_TYPE_F32) {
		for (int64_t r0 = 0; r0 < n_rows; r0 += QUANT_PACKED_F32_ROWS) {
			float *o = (float *) dst + (size_t) (r0 / QUANT_PACKED_F32_ROWS) * (size_t) n *
							    QUANT_PACKED_F32_ROWS;

			for (int64_t r = 0; r < QUANT_PACKED_F32_ROWS; r++) {
				const float *row = r0 + r < n_rows ? (const float *) ((const char *) src +
								      (size_t) (r0 + r) * src_stride)
								   : NULL; /* a pad row: zeros */

				for (int64_t k = 0; k < n; k++)
					o[(size_t) k * QUANT_PACKED_F32_ROWS + (size_t) r] = row ? row[k] : 0.f;
			}
		}
		return;
	}
	assert(quant_packed_supported(type) && n % QK8_0 == 0);
	for (int64_t r0 = 0; r0 < n_rows; r0 += QUANT_PACKED_ROWS)
		for (int64_t b = 0; b < nb; b++, out += packed_block_bytes(type)) {
			/* pad rows: scale 0 and level 0 (Q4_0 nibble 8) */
			memset(out, 0, 16);
			memset(out + 16, q4 ? 0x88 : 0, (size_t) chunks * 32);
			for (int r = 0; r < QUANT_PACKED_ROWS && r0 + r < n_rows; r++) {
				const uint8_t *blk = (const uint8_t *) src +
						     (size_t) (r0 + r) * src_stride + (size_t) b * row_block;
				const uint8_t *qs = blk + 2; /* both block types start with fp16 d */

				memcpy(out + 2 * r, blk, 2);
				for (int k = 0; k < chunks; k++)
					memcpy(out + 16 + 32 * k + 4 * r, qs + 4 * k, 4);
			}
		}
}

void quant_q8_0_block_sums(const void *x_row, int64_t n, int16_t *sums)
{
	const struct block_q8_0 *x = x_row;

	for (int64_t b = 0; b < n / QK8_0; b++) {
		int s = 0;

		for (int j = 0; j < QK8_0; j++)
			s += x[b].qs[j];
		sums[b] = (int16_t) s; /* |s| <= 32 * 128 */
	}
}

/* The reference: per row, per block, the exact integer sum, then one fmaf(), which is what
 * the SIMD lanes do (cvt + multiply-add), so results are the same bits. */
static void gemm_packed_scalar(uint32_t type, int64_t n, const void *w, int64_t nr,
			       const void *x, size_t x_stride, int64_t nc, float *y,
			       size_t y_stride)
{
	const bool q4 = type == GGML_TYPE_Q4_0;
	const size_t bb = packed_block_bytes(type);
	const int64_t nb = n / QK8_0;

	for (int64_t r0 = 0; r0 < nr; r0 += QUANT_PACKED_ROWS) {
		const uint8_t *g = (const uint8_t *) w + (size_t) (r0 / QUANT_PACKED_ROWS) * nb * bb;

		for (int64_t c = 0; c < nc; c++) {
			const struct block_q8_0 *bx =
				(const struct block_q8_0 *) ((const char *) x + (size_t) c * x_stride);
			float acc[QUANT_PACKED_ROWS] = { 0 };

			for (int64_t b = 0; b < nb; b++) {
				const uint8_t *gb = g + (size_t) b * bb;
				const int8_t *yq = bx[b].qs;
				const float dx = fp16_to_f32(bx[b].d);

				for (int r = 0; r < QUANT_PACKED_ROWS; r++) {
					const uint8_t *q = gb + 16 + 4 * r;
					uint16_t d;
					int sum = 0;

					memcpy(&d, gb + 2 * r, 2);
					for (int k = 0; k < (q4 ? 4 : 8); k++)
						for (int i = 0; i < 4; i++) {
							const uint8_t v = q[32 * k + i];

							if (q4)
								sum += ((v & 0xf) - 8) * yq[4 * k + i] +
								       ((v >> 4) - 8) * yq[16 + 4 * k + i];
							else
								sum += (int8_t) v * yq[4 * k + i];
						}
					acc[r] = fmaf((float) sum, fp16_to_f32(d) * dx, acc[r]);
				}
			}
			for (int r = 0; r < QUANT_PACKED_ROWS && r0 + r < nr; r++)
				y[(size_t) c * y_stride + (size_t) (r0 + r)] = acc[r];
		}
	}
}

/* F32: per row, the chain acc = fmaf(w_k, x_k, acc) in k order (quant.h). */
static void gemm_packed_f32_scalar(int64_t n, const void *w, int64_t nr, const void *x,
				   size_t x_stride, int64_t nc, float *y, size_t y_stride)
{
	const size_t gr = QUANT_PACKED_F32_ROWS;

	for (int64_t r0 = 0; r0 < nr; r0 += (int64_t) gr) {
		const float *g = (const float *) w + (size_t) (r0 / (int64_t) gr) * (size_t) n * gr;

		for (int64_t c = 0; c < nc; c++) {
			const float *xc = (const float *) ((const char *) x + (size_t) c * x_stride);
			float acc[QUANT_PACKED_F32_ROWS] = { 0 };

			for (int64_t k = 0; k < n; k++)
				for (size_t r = 0; r < gr; r++)
					acc[r] = fmaf(g[(size_t) k * gr + r], xc[k], acc[r]);
			for (int64_t r = 0; r < (int64_t) gr && r0 + r < nr; r++)
				y[(size_t) c * y_stride + (size_t) (r0 + r)] = acc[r];
		}
	}
}

static void gemm_packed(const struct quant_kernels *k, uint32_t type, int64_t n, const void *w,
			int64_t nr, const void *x, size_t x_stride, const int16_t *x_sums,
			int64_t nc, float *y, size_t y_stride)
{
	quant_gemm_packed_fn fn = packed_kernel(k, type);

	assert(quant_packed_supported(type));
	if (type == GGML_TYPE_F32) {
		if (fn)
			fn(n, w, nr, x, x_stride, NULL, nc, y, y_stride);
		else
			gemm_packed_f32_scalar(n, w, nr, x, x_stride, nc, y, y_stride);
		return;
	}
	assert(n % QK8_0 == 0);
	assert(x_sums || !fn);
	if (fn)
		fn(n, w, nr, x, x_stride, x_sums, nc, y, y_stride);
	else
		gemm_packed_scalar(type, n, w, nr, x, x_stride, nc, y, y_stride);
}

void quant_gemm_packed(uint32_t type, int64_t n, const void *w, int64_t nr, const void *x,
		       size_t x_stride, const int16_t *x_sums, int64_t nc, float *y,
		       size_t y_stride)
{
	gemm_packed(kernels(), type, n, w, nr, x, x_stride, x_sums, nc, y, y_stride);
}

void quant_gemm_packed_ref(uint32_t type, int64_t n, const void *w, int64_t nr, const void *x,
			   size_t x_stride, const int16_t *x_sums, int64_t nc, float *y,
			   size_t y_stride)
{
	gemm_packed(&quant_kernels_scalar, type, n, w, nr, x, x_stride, x_sums, nc, y, y_stride);
}
