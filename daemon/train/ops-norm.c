/* SPDX-License-Identifier: MIT */
/*
 * ops-norm.c: the trainer's per-row and elementwise operations: RMSNorm, RoPE and SwiGLU,
 * forward and backward (see ops.h). RMSNorm and RoPE compute their forward as the engine's
 * forward pass does (sum of squares in double, scale in float; angles by repeated float
 * multiplication), so a trained model means at inference what it meant in training.
 */
#include <math.h>

#include "ops.h"

void train_rmsnorm_fwd(const float *x, const float *w, int64_t n, int64_t dim, float eps,
		       float *y, float *rs)
{
	for (int64_t t = 0; t < n; t++) {
		const float *xr = x + t * dim;
		float *yr = y + t * dim;
		double sum = 0.0;
		float scale;

		for (int64_t i = 0; i < dim; i++)
			sum += (double) (xr[i] * xr[i]);
		scale = 1.0f / sqrtf((float) (sum / (double) dim) + eps);
		rs[t] = scale;
		for (int64_t i = 0; i < dim; i++)
			yr[i] = (xr[i] * scale) * w[i];
	}
}

void train_rmsnorm_bwd(const float *x, const float *w, const float *rs, const float *dy,
		       int64_t n, int64_t dim, float *dx, float *dw)
{
	/* y_i = x_i r w_i, r = (mean x² + eps)^-1/2, so with g_i = dy_i w_i:
	 * dx_i = r g_i - x_i r³ (Σ g_j x_j) / dim */
	for (int64_t t = 0; t < n; t++) {
		const float *xr = x + t * dim, *dyr = dy + t * dim;
		float *dxr = dx + t * dim;
		float r = rs[t];
		double dot = 0.0;
		float c;

		for (int64_t i = 0; i < dim; i++)
			dot += (double) dyr[i] * w[i] * xr[i];
		c = (float) (dot * r * r * r / (double) dim);
		for (int64_t i = 0; i < dim; i++)
			dxr[i] += r * dyr[i] * w[i] - xr[i] * c;
		if (dw)
			for (int64_t i = 0; i < dim; i++)
				dw[i] += dyr[i] * xr[i] * r;
	}
}

void train_rope_tables(const int32_t *pos, int64_t n, uint32_t rope_dim, float base,
		       float freq_scale, const float *freq_factors, float *cos_t, float *sin_t)
{
	uint32_t half = rope_dim / 2;
	float theta_scale = powf(base, -2.0f / (float) rope_dim);

	for (int64_t t = 0; t < n; t++) {
		float theta = (float) pos[t];

		for (uint32_t i = 0; i < half; i++) {
			float ff = freq_factors ? freq_factors[i] : 1.0f;
			float th = freq_scale * (theta / ff);

			cos_t[t * half + i] = cosf(th);
			sin_t[t * half + i] = sinf(th);
			theta *= theta_scale;
		}
	}
}

void train_rope(float *x, int64_t n, uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim,
		bool neox, const float *cos_t, const float *sin_t, bool inverse)
{
	uint32_t half = rope_dim / 2;

	for (int64_t t = 0; t < n; t++) {
		const float *cs = cos_t + t * half, *sn = sin_t + t * half;

		for (uint32_t h = 0; h < n_heads; h++) {
			float *v = x + (t * n_heads + h) * (int64_t) head_dim;

			for (uint32_t i = 0; i < half; i++) {
				uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
				float x0 = v[a], x1 = v[b], s = inverse ? -sn[i] : sn[i];

				v[a] = x0 * cs[i] - x1 * s;
				v[b] = x0 * s + x1 * cs[i];
			}
		}
	}
}

void train_swiglu_fwd(const float *g, const float *u, int64_t count, float *h)
{
	for (int64_t i = 0; i < count; i++)
		h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void train_swiglu_bwd(const float *g, const float *u, const float *dh, int64_t count, float *dg,
		      float *du)
{
	for (int64_t i = 0; i < count; i++) {
		float s = 1.0f / (1.0f + expf(-g[i]));
		float silu = g[i] * s;

		dg[i] += dh[i] * u[i] * (s * (1.0f + g[i] * (1.0f - s)));
		du[i] += dh[i] * silu;
	}
}
