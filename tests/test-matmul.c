/* SPDX-License-Identifier: MIT */
/*
 * test-matmul: matmul() for every weight type against a float64 reference computed from the
 * dequantized weights and the dequantized (converted) activations, for odd shapes (output
 * rows not a multiple of the 4-row chunk, several tokens) and 1..3 threads; and thread-count
 * invariance (bit-identical results).
 *
 * The tile kernels (quant_gemm(), quant_gemm_packed()) at every SIMD level this CPU has,
 * on fresh random inputs each run (MOLLY_TEST_SEED=N replays one): against the float64
 * reference and the scalar level, for row and token counts that are not multiples of the
 * tiles; every (row, token) result bit-identical whatever tile computed it; packed results
 * bit-identical to the scalar packed reference (Q8_0, Q4_0 and F32); packed matmul() like
 * unpacked. And the
 * thread pool's sleeping path (jobs after an idle gap longer than its spin).
 *
 * matmul_group() (several outputs, LoRA deltas and an epilogue in one job): the same bits
 * as matmul() then lora_sgmv() then the epilogue, for every weight layout and 1..3 threads.
 */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "test.h"

#include "engine/kernels.h"
#include "engine/matmul.h"
#include "engine/sgmv.h"
#include "engine/quant.h"
#include "engine/threadpool.h"
#include "lora/resident.h"
#include "simd-levels.h"


static const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
				  GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K };

static int check_type(uint32_t type, int64_t n_in, int64_t n_out, int64_t n_tok)
{
	uint32_t vt = quant_vec_dot_type(type);
	size_t row_bytes = (size_t) quant_row_bytes(type, n_in);
	size_t xrow_bytes = (size_t) quant_row_bytes(vt, n_in);
	_cleanup_free_ float *wf = malloc(sizeof(float) * n_in * n_out);
	_cleanup_free_ float *x = malloc(sizeof(float) * n_in * n_tok);
	_cleanup_free_ char *wq = malloc(row_bytes * n_out);
	_cleanup_free_ char *xq = malloc(xrow_bytes);
	_cleanup_free_ float *wd = malloc(sizeof(float) * n_in);
	_cleanup_free_ float *xd = malloc(sizeof(float) * n_in * n_tok);
	_cleanup_free_ float *y1 = malloc(sizeof(float) * n_out * n_tok);
	_cleanup_free_ float *y2 = malloc(sizeof(float) * n_out * n_tok);
	_cleanup_free_ void *scratch = malloc(matmul_scratch_bytes(&(struct weight){ .type = type,
		.n_in = n_in }, n_tok) + 1);
	struct weight w = { .data = wq, .type = type, .n_in = n_in, .n_out = n_out,
			    .row_bytes = row_bytes };

	ASSERT_TRUE(wf && x && wq && xq && wd && xd && y1 && y2 && scratch);
	for (int64_t i = 0; i < n_in * n_out; i++)
		wf[i] = (float) (test_uniform() * 2 - 1);
	for (int64_t i = 0; i < n_in * n_tok; i++)
		x[i] = (float) ((test_uniform() * 2 - 1) * 3);
	for (int64_t o = 0; o < n_out; o++)
		quant_quantize_row(type, wf + o * n_in, wq + o * row_bytes, n_in);
	/* The activations as the kernel sees them: converted to the dot partner type. */
	for (int64_t t = 0; t < n_tok; t++) {
		quant_quantize_row(vt, x + t * n_in, xq, n_in);
		quant_dequantize_row(vt, xq, xd + t * n_in, n_in);
	}

	for (int nth = 1; nth <= 3; nth++) {
		_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
		float *y = nth == 1 ? y1 : y2;

		ASSERT_OK(threadpool_new(nth, &pool));
		matmul(pool, &w, x, n_tok, y, scratch);
		if (nth > 1)
			ASSERT_TRUE(memcmp(y1, y2, sizeof(float) * n_out * n_tok) == 0);
	}
	for (int64_t o = 0; o < n_out; o++) {
		quant_dequantize_row(type, wq + o * row_bytes, wd, n_in);
		for (int64_t t = 0; t < n_tok; t++) {
			double ref = 0, mag = 0;

			for (int64_t i = 0; i < n_in; i++) {
				ref += (double) wd[i] * xd[t * n_in + i];
				mag += fabs((double) wd[i] * xd[t * n_in + i]);
			}
			/* float accumulation of n terms: error <= ~n * 2^-24 * sum|terms| at worst,
			 * ~sqrt(n) * 2^-24 typically; 1e-5 covers n <= 768 with margin. */
			double tol = 1e-5 * mag + 1e-6;
			if (!(fabs(y1[t * n_out + o] - ref) <= tol))
				TEST_FAIL_("%s n_in %lld row %lld tok %lld: %g vs %g (tol %g)",
					   quant_type_name(type), (long long) n_in, (long long) o,
					   (long long) t, y1[t * n_out + o], ref, tol);
		}
	}
	return 0;
}

TEST(matmul_all_types_against_float64)
{
	test_seed_rng();
	for (size_t i = 0; i < ELEMENTSOF(types); i++) {
		int64_t n_in = quant_block_values(types[i]) >= 256 ? 512 : 96;

		if (check_type(types[i], n_in, 13, 1) || check_type(types[i], n_in, 7, 5) ||
		    check_type(types[i], 768, 33, 3))
			return 1;
	}
	return 0;
}

TEST(threadpool_split_covers_range)
{
	for (long n = 0; n < 50; n++)
		for (int nth = 1; nth <= 5; nth++)
			for (long align = 1; align <= 4; align++) {
				long next = 0;

				for (int i = 0; i < nth; i++) {
					long b, e;

					threadpool_split(n, align, i, nth, &b, &e);
					ASSERT_EQ(b, next);
					ASSERT_TRUE(e >= b);
					next = e;
				}
				ASSERT_EQ(next, n);
			}
	return 0;
}

struct count_job {
	int counts[8];
};

static void count_fn(void *arg, int ith, int nth)
{
	struct count_job *j = arg;

	(void) nth;
	__atomic_fetch_add(&j->counts[ith], 1, __ATOMIC_RELAXED);
}

TEST(threadpool_runs_every_thread_once_per_job)
{
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	struct count_job j = {};

	ASSERT_OK(threadpool_new(4, &pool));
	for (int r = 0; r < 2000; r++)
		threadpool_run(pool, count_fn, &j);
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(j.counts[i], 2000);
	ASSERT_ERR(threadpool_new(0, &(struct threadpool *){ NULL }), -EINVAL);
	return 0;
}

/* ---- tile kernels ---- */


struct tile_case {
	uint32_t type, vt;
	int64_t n, nr, nc;
	size_t row_bytes, xrow_bytes;
	char *w, *xq;
	double *ref, *mag; /* [nc][nr] float64 dot and sum of |terms| */
};

static void tile_case_free(struct tile_case *c)
{
	free(c->w);
	free(c->xq);
	free(c->ref);
	free(c->mag);
}

/* Random weights (quantized from uniform floats) and activations (converted as matmul does),
 * and the float64 reference of every pair. */
static int tile_case_new(struct tile_case *c, uint32_t type, int64_t n, int64_t nr, int64_t nc)
{
	_cleanup_free_ float *f = malloc(sizeof(float) * (size_t) n);
	_cleanup_free_ float *wd = malloc(sizeof(float) * (size_t) n * (size_t) nr);
	_cleanup_free_ float *xd = malloc(sizeof(float) * (size_t) n * (size_t) nc);

	*c = (struct tile_case){ .type = type, .vt = quant_vec_dot_type(type), .n = n, .nr = nr,
				 .nc = nc };
	c->row_bytes = (size_t) quant_row_bytes(type, n);
	c->xrow_bytes = (size_t) quant_row_bytes(c->vt, n);
	c->w = malloc(c->row_bytes * (size_t) nr);
	c->xq = malloc(c->xrow_bytes * (size_t) nc);
	c->ref = malloc(sizeof(double) * (size_t) (nr * nc));
	c->mag = malloc(sizeof(double) * (size_t) (nr * nc));
	ASSERT_TRUE(f && wd && xd && c->w && c->xq && c->ref && c->mag);
	for (int64_t r = 0; r < nr; r++) {
		for (int64_t i = 0; i < n; i++)
			f[i] = (float) (test_uniform() * 2 - 1);
		quant_quantize_row(type, f, c->w + (size_t) r * c->row_bytes, n);
		quant_dequantize_row(type, c->w + (size_t) r * c->row_bytes, wd + r * n, n);
	}
	for (int64_t t = 0; t < nc; t++) {
		for (int64_t i = 0; i < n; i++)
			f[i] = (float) ((test_uniform() * 2 - 1) * 3);
		quant_quantize_row(c->vt, f, c->xq + (size_t) t * c->xrow_bytes, n);
		quant_dequantize_row(c->vt, c->xq + (size_t) t * c->xrow_bytes, xd + t * n, n);
	}
	for (int64_t t = 0; t < nc; t++)
		for (int64_t r = 0; r < nr; r++) {
			double ref = 0, mag = 0;

			for (int64_t i = 0; i < n; i++) {
				ref += (double) wd[r * n + i] * xd[t * n + i];
				mag += fabs((double) wd[r * n + i] * xd[t * n + i]);
			}
			c->ref[t * nr + r] = ref;
			c->mag[t * nr + r] = mag;
		}
	return 0;
}

/* y[nc][nr] against the float64 reference: float accumulation of n terms errs by at most
 * ~n * 2^-24 * sum|terms|; 1e-5 covers n <= ~1000 with margin. */
static int check_against_ref(const struct tile_case *c, const float *y, const char *what)
{
	for (int64_t t = 0; t < c->nc; t++)
		for (int64_t r = 0; r < c->nr; r++) {
			double ref = c->ref[t * c->nr + r], tol = 1e-5 * c->mag[t * c->nr + r] + 1e-6;
			float v = y[t * c->nr + r];

			if (!(fabs(v - ref) <= tol))
				TEST_FAIL_("%s %s n %lld row %lld tok %lld: %.9g vs %.9g (tol %g)", what,
					   quant_type_name(c->type), (long long) c->n, (long long) r,
					   (long long) t, v, ref, tol);
		}
	return 0;
}

/* One pair, or a sub-rectangle, computed alone must give the same bits as in the full call. */
static int check_subtiles(const struct tile_case *c, const float *full)
{
	for (int k = 0; k < 12; k++) {
		int64_t r0 = (int64_t) (test_uniform() * (double) c->nr);
		int64_t c0 = (int64_t) (test_uniform() * (double) c->nc);
		int64_t nr = 1 + (int64_t) (test_uniform() * (double) (c->nr - r0));
		int64_t nc = 1 + (int64_t) (test_uniform() * (double) (c->nc - c0));
		_cleanup_free_ float *y = malloc(sizeof(float) * (size_t) (nr * nc));

		ASSERT_TRUE(y);
		quant_gemm(c->type, c->n, c->w + (size_t) r0 * c->row_bytes, c->row_bytes, nr,
			   c->xq + (size_t) c0 * c->xrow_bytes, c->xrow_bytes, nc, y, (size_t) nr);
		for (int64_t t = 0; t < nc; t++)
			for (int64_t r = 0; r < nr; r++)
				if (memcmp(&y[t * nr + r], &full[(c0 + t) * c->nr + r0 + r], sizeof(float)))
					TEST_FAIL_("%s: pair (%lld, %lld) in a %lldx%lld tile at (%lld, %lld) "
						   "differs from the full call: %.9g vs %.9g",
						   quant_type_name(c->type), (long long) (r0 + r),
						   (long long) (c0 + t), (long long) nr, (long long) nc,
						   (long long) r0, (long long) c0, y[t * nr + r],
						   full[(c0 + t) * c->nr + r0 + r]);
	}
	return 0;
}

TEST(gemm_all_levels_all_types)
{
	static const int64_t shapes[][3] = {
		/* n (multiples of 256 for the K types), rows, tokens */
		{ 256, 13, 7 }, { 512, 1, 1 }, { 256, 9, 1 }, { 768, 6, 11 }, { 256, 4, 4 },
	};
	const char *orig = quant_simd_level();

	test_seed_rng();
	for (size_t l = 0; l < n_levels; l++) {
		if (quant_force_simd_level(levels[l]) < 0)
			continue;
		printf("  level %s\n", levels[l]);
		for (size_t i = 0; i < ELEMENTSOF(types); i++)
			for (size_t s = 0; s < ELEMENTSOF(shapes); s++) {
				struct tile_case c;
				_cleanup_free_ float *y = NULL, *yref = NULL;
				int r;

				if (tile_case_new(&c, types[i], shapes[s][0], shapes[s][1], shapes[s][2]))
					return 1;
				y = malloc(sizeof(float) * (size_t) (c.nr * c.nc));
				yref = malloc(sizeof(float) * (size_t) (c.nr * c.nc));
				ASSERT_TRUE(y && yref);
				quant_gemm(c.type, c.n, c.w, c.row_bytes, c.nr, c.xq, c.xrow_bytes, c.nc, y,
					   (size_t) c.nr);
				quant_gemm_ref(c.type, c.n, c.w, c.row_bytes, c.nr, c.xq, c.xrow_bytes, c.nc,
					       yref, (size_t) c.nr);
				r = check_against_ref(&c, y, levels[l]) || check_against_ref(&c, yref, "scalar") ||
				    check_subtiles(&c, y);
				tile_case_free(&c);
				if (r)
					return 1;
			}
	}
	ASSERT_OK(quant_force_simd_level(orig));
	return 0;
}

/* F32 and F16 take any n (a scalar tail after the 8-wide steps). */
TEST(gemm_float_odd_lengths)
{
	const char *orig = quant_simd_level();

	test_seed_rng();
	for (size_t l = 0; l < n_levels; l++) {
		if (quant_force_simd_level(levels[l]) < 0)
			continue;
		for (int64_t n = 1; n <= 41; n += 4)
			for (size_t t = 0; t < 3; t++) {
				static const uint32_t float_types[] = { GGML_TYPE_F32, GGML_TYPE_F16,
									GGML_TYPE_BF16 };
				const uint32_t type = float_types[t];
				struct tile_case c;
				_cleanup_free_ float *y = NULL;
				int r;

				if (tile_case_new(&c, type, n, 5, 6))
					return 1;
				y = malloc(sizeof(float) * 30);
				ASSERT_TRUE(y);
				quant_gemm(type, n, c.w, c.row_bytes, 5, c.xq, c.xrow_bytes, 6, y, 5);
				r = check_against_ref(&c, y, levels[l]) || check_subtiles(&c, y);
				tile_case_free(&c);
				if (r)
					return 1;
			}
	}
	ASSERT_OK(quant_force_simd_level(orig));
	return 0;
}

/* Packed tile products: exact against the scalar packed reference at every level, within
 * the float64 bound, the same bits in any sub-tile, and the padding rows never written. */
TEST(gemm_packed_all_levels)
{
	static const uint32_t ptypes[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_F32 };
	static const int64_t shapes[][3] = {
		{ 96, 13, 7 }, { 32, 1, 1 }, { 256, 8, 1 }, { 768, 21, 9 }, { 64, 16, 6 }, { 160, 3, 13 },
		{ 64, 70, 1 }, { 32, 40, 27 },
		{ 96, 24, 70 }, /* the amx level: tiles of 16 tokens, a partial one, two passes of 64 */
	};
	const char *orig = quant_simd_level();

	test_seed_rng();
	for (size_t i = 0; i < ELEMENTSOF(ptypes); i++)
		for (size_t s = 0; s < ELEMENTSOF(shapes); s++) {
			struct tile_case c;
			const int64_t nb = shapes[s][0] / 32, gr = quant_packed_group_rows(ptypes[i]);
			size_t pbytes = quant_packed_bytes(ptypes[i], shapes[s][0], shapes[s][1]);
			_cleanup_free_ void *wp = NULL;
			_cleanup_free_ int16_t *sums = NULL;
			_cleanup_free_ float *yref = NULL, *y = NULL;

			ASSERT_TRUE(quant_packed_supported(ptypes[i]) && pbytes > 0);
			if (tile_case_new(&c, ptypes[i], shapes[s][0], shapes[s][1], shapes[s][2]))
				return 1;
			wp = malloc(pbytes);
			sums = malloc(sizeof(int16_t) * (size_t) (nb * c.nc));
			yref = malloc(sizeof(float) * (size_t) (c.nr * c.nc));
			y = malloc(sizeof(float) * (size_t) (c.nr * c.nc + 16));
			ASSERT_TRUE(wp && sums && yref && y);
			quant_pack_rows(c.type, c.n, c.w, c.row_bytes, c.nr, wp);
			for (int64_t t = 0; t < c.nc && c.type != GGML_TYPE_F32; t++) {
				const int8_t *q = (const int8_t *) (c.xq + (size_t) t * c.xrow_bytes);

				quant_q8_0_block_sums(q, c.n, sums + t * nb);
				for (int64_t b = 0; b < nb; b++) {
					int sum = 0;

					for (int j = 0; j < 32; j++)
						sum += q[b * 34 + 2 + j];
					ASSERT_EQ(sums[t * nb + b], sum);
				}
			}
			quant_gemm_packed_ref(c.type, c.n, wp, c.nr, c.xq, c.xrow_bytes, sums, c.nc, yref,
					      (size_t) c.nr);
			if (check_against_ref(&c, yref, "packed scalar")) {
				tile_case_free(&c);
				return 1;
			}
			for (size_t l = 0; l < n_levels; l++) {
				if (quant_force_simd_level(levels[l]) < 0)
					continue;
				for (int k = 0; k < 16; k++)
					y[c.nr * c.nc + k] = -12345.f;
				quant_gemm_packed(c.type, c.n, wp, c.nr, c.xq, c.xrow_bytes, sums, c.nc, y,
						  (size_t) c.nr);
				for (int k = 0; k < 16; k++)
					ASSERT_TRUE(y[c.nr * c.nc + k] == -12345.f);
				if (memcmp(y, yref, sizeof(float) * (size_t) (c.nr * c.nc)))
					TEST_FAIL_("packed %s at level %s differs from the scalar reference",
						   quant_type_name(c.type), levels[l]);
				/* sub-tiles from group boundaries */
				for (int k = 0; k < 8; k++) {
					int64_t groups = (c.nr + gr - 1) / gr;
					int64_t g0 = (int64_t) (test_uniform() * (double) groups);
					int64_t c0 = (int64_t) (test_uniform() * (double) c.nc);
					int64_t nr = 1 + (int64_t) (test_uniform() * (double) (c.nr - gr * g0));
					int64_t nc = 1 + (int64_t) (test_uniform() * (double) (c.nc - c0));
					float sub[16 * 64];

					if (nr * nc > 16 * 64)
						continue;
					quant_gemm_packed(c.type, c.n,
							  (const char *) wp + (size_t) g0 *
										  quant_packed_bytes(c.type, c.n, gr),
							  nr, c.xq + (size_t) c0 * c.xrow_bytes, c.xrow_bytes,
							  sums + c0 * nb, nc, sub, (size_t) nr);
					for (int64_t t = 0; t < nc; t++)
						for (int64_t r = 0; r < nr; r++)
							if (memcmp(&sub[t * nr + r],
								   &yref[(c0 + t) * c.nr + gr * g0 + r], sizeof(float)))
								TEST_FAIL_("packed %s: pair (%lld, %lld) differs in a "
									   "%lldx%lld sub-tile",
									   quant_type_name(c.type),
									   (long long) (gr * g0 + r),
									   (long long) (c0 + t), (long long) nr,
									   (long long) nc);
				}
			}
			ASSERT_OK(quant_force_simd_level(orig));
			tile_case_free(&c);
		}
	ASSERT_TRUE(quant_packed_supported(GGML_TYPE_F32) && !quant_packed_supported(GGML_TYPE_Q4_K) &&
		    !quant_packed_supported(GGML_TYPE_F16));
	ASSERT_EQ(quant_packed_bytes(GGML_TYPE_F32, 3, 17), (size_t) 2 * 3 * 16 * sizeof(float));
	ASSERT_EQ(quant_packed_bytes(GGML_TYPE_Q8_0, 33, 8), (size_t) 0);
	ASSERT_EQ(quant_packed_bytes(GGML_TYPE_Q8_0, 64, 9), (size_t) 2 * 2 * QUANT_PACKED_Q8_0_BLOCK);
	return 0;
}

/* matmul() on packed weights: like unpacked within the float64 bound, the same bits for any
 * thread count and any batch around a token. */
TEST(matmul_packed)
{
	static const uint32_t ptypes[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_F32 };

	test_seed_rng();
	for (size_t i = 0; i < ELEMENTSOF(ptypes); i++) {
		const int64_t n = 320, n_out = 45, n_tok = 11;
		struct tile_case c;
		_cleanup_free_ float *x = malloc(sizeof(float) * n * n_tok);
		_cleanup_free_ float *y0 = malloc(sizeof(float) * n_out * n_tok);
		_cleanup_free_ float *y1 = malloc(sizeof(float) * n_out * n_tok);
		_cleanup_free_ float *y2 = malloc(sizeof(float) * n_out);
		float *y[3] = { y0, y1, y2 };
		_cleanup_free_ void *wp = NULL, *scratch = NULL;
		struct weight w;

		if (tile_case_new(&c, ptypes[i], n, n_out, 1))
			return 1;
		w = (struct weight){ .data = c.w, .type = c.type, .n_in = n, .n_out = n_out,
				     .row_bytes = c.row_bytes };
		wp = malloc(quant_packed_bytes(c.type, n, n_out));
		scratch = malloc(matmul_scratch_bytes(&w, n_tok));
		ASSERT_TRUE(x && y[0] && y[1] && y[2] && wp && scratch);
		quant_pack_rows(c.type, n, c.w, c.row_bytes, n_out, wp);
		w.packed = wp;
		for (int64_t k = 0; k < n * n_tok; k++)
			x[k] = (float) ((test_uniform() * 2 - 1) * 3);
		for (int nth = 1; nth <= 3; nth++) {
			_cleanup_(threadpool_freep) struct threadpool *pool = NULL;

			ASSERT_OK(threadpool_new(nth, &pool));
			matmul(pool, &w, x, n_tok, y[nth > 1], scratch);
			if (nth > 1)
				ASSERT_TRUE(memcmp(y[0], y[1], sizeof(float) * n_out * n_tok) == 0);
			/* token 5 alone: the same bits as inside the batch */
			matmul(pool, &w, x + 5 * n, 1, y[2], scratch);
			ASSERT_TRUE(memcmp(y[2], y[0] + 5 * n_out, sizeof(float) * n_out) == 0);
		}
		/* against the unpacked kernels, through the float64 bound of each token */
		for (int64_t t = 0; t < n_tok; t++) {
			_cleanup_free_ char *xq = malloc(c.xrow_bytes);
			_cleanup_free_ float *xd = malloc(sizeof(float) * n), *wd = malloc(sizeof(float) * n);

			ASSERT_TRUE(xq && xd && wd);
			quant_quantize_row(c.vt, x + t * n, xq, n);
			quant_dequantize_row(c.vt, xq, xd, n);
			for (int64_t o = 0; o < n_out; o++) {
				double ref = 0, mag = 0;

				quant_dequantize_row(c.type, c.w + o * c.row_bytes, wd, n);
				for (int64_t k = 0; k < n; k++) {
					ref += (double) wd[k] * xd[k];
					mag += fabs((double) wd[k] * xd[k]);
				}
				if (!(fabs(y[0][t * n_out + o] - ref) <= 1e-5 * mag + 1e-6))
					TEST_FAIL_("packed matmul %s row %lld tok %lld: %g vs %g",
						   quant_type_name(c.type), (long long) o, (long long) t,
						   y[0][t * n_out + o], ref);
			}
		}
		tile_case_free(&c);
	}
	return 0;
}

/* Jobs that start after the workers fell asleep (an idle gap longer than the spin) still run
 * on every thread exactly once; and back-to-back jobs after that. */
TEST(threadpool_wakes_sleeping_workers)
{
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	struct count_job j = {};

	ASSERT_OK(threadpool_new(3, &pool));
	for (int r = 0; r < 10; r++) {
		usleep(2000);
		threadpool_run(pool, count_fn, &j);
		threadpool_run(pool, count_fn, &j);
	}
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(j.counts[i], 20);
	return 0;
}

/* Attention's weighted sum: the same bits as the scalar reference at every level, for
 * lengths with and without a tail, and close to float64. */
TEST(axpy_all_levels)
{
	const char *orig = quant_simd_level();

	test_seed_rng();
	for (size_t l = 0; l < n_levels; l++) {
		if (quant_force_simd_level(levels[l]) < 0)
			continue;
		for (int64_t n = 1; n <= 80; n += 13)
			for (int64_t count = 1; count <= 17; count += 8) {
				const size_t stride = (size_t) n + 3;
				float a[17], x[17 * 83], y[80], yref[80];
				double d[80];

				for (int64_t j = 0; j < count; j++)
					a[j] = (float) test_uniform();
				for (size_t k = 0; k < ELEMENTSOF(x); k++)
					x[k] = (float) (test_uniform() * 2 - 1);
				for (int64_t i = 0; i < n; i++) {
					y[i] = yref[i] = (float) test_uniform();
					d[i] = y[i];
					for (int64_t j = 0; j < count; j++)
						d[i] += (double) a[j] * x[(size_t) j * stride + (size_t) i];
				}
				quant_axpy_f32(n, a, count, x, stride, y);
				quant_axpy_f32_ref(n, a, count, x, stride, yref);
				ASSERT_TRUE(memcmp(y, yref, sizeof(float) * (size_t) n) == 0);
				for (int64_t i = 0; i < n; i++)
					ASSERT_TRUE(fabs(y[i] - d[i]) <= 1e-5 * (1 + (double) count));
			}
	}
	ASSERT_OK(quant_force_simd_level(orig));
	return 0;
}

/* The rows variant (attention's V sums for a row group): the same bits as one
 * quant_axpy_f32_ref() per row, for row counts around the 4-row passes, lengths with and
 * without whole 64-value passes, and per-row counts from 0 to 16. */
TEST(axpy_rows_all_levels)
{
	static const int64_t lengths[] = { 64, 128, 48, 7 };
	const char *orig = quant_simd_level();

	test_seed_rng();
	for (size_t l = 0; l < n_levels; l++) {
		if (quant_force_simd_level(levels[l]) < 0)
			continue;
		for (size_t li = 0; li < ELEMENTSOF(lengths); li++)
			for (int64_t nq = 1; nq <= 9; nq++) {
				const int64_t n = lengths[li];
				const size_t a_stride = 21, x_stride = (size_t) n + 5, y_stride = (size_t) n + 2;
				float a[9 * 21], x[16 * 133], y[9 * 130], yref[9 * 130];
				int64_t count[9];

				for (size_t k = 0; k < ELEMENTSOF(a); k++)
					a[k] = (float) test_uniform();
				for (size_t k = 0; k < ELEMENTSOF(x); k++)
					x[k] = (float) (test_uniform() * 2 - 1);
				for (size_t k = 0; k < ELEMENTSOF(y); k++)
					y[k] = yref[k] = (float) test_uniform();
				for (int64_t q = 0; q < nq; q++)
					count[q] = (int64_t) (test_uniform() * 17);
				quant_axpy_f32_rows(n, a, a_stride, count, nq, x, x_stride, y, y_stride);
				for (int64_t q = 0; q < nq; q++)
					quant_axpy_f32_ref(n, a + (size_t) q * a_stride, count[q], x, x_stride,
							   yref + (size_t) q * y_stride);
				ASSERT_TRUE(memcmp(y, yref, sizeof(y)) == 0);
			}
	}
	ASSERT_OK(quant_force_simd_level(orig));
	return 0;
}

/* Attention scores on transposed keys: the same bits as the scalar reference at every level
 * (one chain per pair), for 1..11 queries and 1..16 keys, lanes past np never written, and
 * within the float64 bound. */
TEST(attn_scores_all_levels)
{
	static const int64_t dims[] = { 64, 128, 5 };
	const char *orig = quant_simd_level();

	test_seed_rng();
	for (size_t l = 0; l < n_levels; l++) {
		if (quant_force_simd_level(levels[l]) < 0)
			continue;
		for (size_t di = 0; di < ELEMENTSOF(dims); di++)
			for (int64_t nq = 1; nq <= 11; nq += 5)
				for (int64_t np = 1; np <= 16; np += 5) {
					const int64_t n = dims[di];
					const size_t q_stride = (size_t) n + 3, s_stride = 21;
					float kt[128 * 16], q[11 * 131], sc[11 * 21], ref[11 * 21];

					for (size_t k = 0; k < ELEMENTSOF(kt); k++)
						kt[k] = (float) (test_uniform() * 2 - 1);
					for (size_t k = 0; k < ELEMENTSOF(q); k++)
						q[k] = (float) (test_uniform() * 2 - 1);
					for (size_t k = 0; k < ELEMENTSOF(sc); k++)
						sc[k] = ref[k] = -7.f;
					quant_attn_scores_f32(n, kt, np, q, q_stride, nq, sc, s_stride);
					quant_attn_scores_f32_ref(n, kt, np, q, q_stride, nq, ref, s_stride);
					ASSERT_TRUE(memcmp(sc, ref, sizeof(sc)) == 0);
					for (int64_t i = 0; i < nq; i++)
						for (int64_t p = 0; p < 21; p++) {
							double d = 0, mag = 0;

							if (p >= np) {
								ASSERT_TRUE(sc[i * 21 + p] == -7.f);
								continue;
							}
							for (int64_t k = 0; k < n; k++) {
								d += (double) kt[k * 16 + p] * q[(size_t) i * q_stride + (size_t) k];
								mag += fabs((double) kt[k * 16 + p] * q[(size_t) i * q_stride + (size_t) k]);
							}
							ASSERT_TRUE(fabs(sc[i * 21 + p] - d) <= 1e-5 * mag + 1e-7);
						}
				}
	}
	ASSERT_OK(quant_force_simd_level(orig));
	return 0;
}

/* ---- matmul_group() ---- */

#define G_RANKS 2
struct g_lora {
	struct lora_resident_mat mat;
	const void *a[8], *bt[8];
	void *mem;
};

/* A random adapter matrix of rank r (<= 8) for [n_out][n_in], rows in dtype (F32 or F16). */
static int g_lora_new(struct g_lora *l, uint32_t dtype, uint32_t rank, int64_t n_in, int64_t n_out)
{
	size_t eb = dtype == GGML_TYPE_F32 ? 4 : 2;
	char *p;

	l->mem = p = malloc(eb * rank * (size_t) (n_in + n_out));
	ASSERT_TRUE(p && rank <= 8);
	l->mat = (struct lora_resident_mat){ .rank = rank, .n_in = (uint32_t) n_in,
					     .n_out = (uint32_t) n_out, .dtype = dtype,
					     .scale = 0.75f, .a_rows = l->a, .bt_rows = l->bt };
	for (uint32_t k = 0; k < rank; k++) {
		l->a[k] = p;
		p += eb * (size_t) n_in;
		l->bt[k] = p;
		p += eb * (size_t) n_out;
	}
	for (uint32_t k = 0; k < rank; k++)
		for (int w = 0; w < 2; w++) {
			int64_t n = w ? n_out : n_in;
			void *row = (void *) (w ? l->bt[k] : l->a[k]);

			for (int64_t i = 0; i < n; i++) {
				float v = (float) (test_uniform() * 2 - 1) * 0.1f;

				if (dtype == GGML_TYPE_F32)
					((float *) row)[i] = v;
				else
					((uint16_t *) row)[i] = f32_to_fp16(v);
			}
		}
	return 0;
}

struct g_epi {
	float *a;
	const float *b;
	int64_t n_tok, n_out;
};

/* a = a * 0.5 + b * b on columns [c0, c0 + nc) of every token */
static void g_epilogue(void *arg, int64_t c0, int64_t nc)
{
	struct g_epi *e = arg;

	for (int64_t t = 0; t < e->n_tok; t++)
		for (int64_t c = c0; c < c0 + nc; c++)
			e->a[t * e->n_out + c] = e->a[t * e->n_out + c] * 0.5f +
						 e->b[t * e->n_out + c] * e->b[t * e->n_out + c];
}

static int check_group(uint32_t type, bool packed, int64_t n_in, int64_t n_tok)
{
	enum { NO = 3 };
	const int64_t n_out[NO] = { 45, 45, 24 };
	struct tile_case c[NO];
	struct weight w[NO];
	struct g_lora l[NO][G_RANKS];
	struct lora_pair pairs[NO][64];
	size_t n_pairs = 0;
	_cleanup_free_ float *x = malloc(sizeof(float) * (size_t) (n_in * n_tok));
	_cleanup_free_ float *tmp = malloc(sizeof(float) * 64 * 8 * NO);
	_cleanup_free_ void *scratch = NULL;
	float *yref[NO], *y[NO];
	void *wp[NO] = {};

	ASSERT_TRUE(x && tmp);
	for (int o = 0; o < NO; o++) {
		if (tile_case_new(&c[o], type, n_in, n_out[o], 1))
			return 1;
		w[o] = (struct weight){ .data = c[o].w, .type = type, .n_in = n_in, .n_out = n_out[o],
					.row_bytes = c[o].row_bytes };
		if (packed) {
			wp[o] = malloc(quant_packed_bytes(type, n_in, n_out[o]));
			ASSERT_TRUE(wp[o]);
			quant_pack_rows(type, n_in, c[o].w, c[o].row_bytes, n_out[o], wp[o]);
			w[o].packed = wp[o];
		}
		yref[o] = malloc(sizeof(float) * (size_t) (n_out[o] * n_tok));
		y[o] = malloc(sizeof(float) * (size_t) (n_out[o] * n_tok));
		ASSERT_TRUE(yref[o] && y[o]);
		/* odd ranks, one F32 and one F16 adapter */
		if (g_lora_new(&l[o][0], GGML_TYPE_F32, 3, n_in, n_out[o]) ||
		    g_lora_new(&l[o][1], GGML_TYPE_F16, 5, n_in, n_out[o]))
			return 1;
	}
	scratch = malloc(matmul_scratch_bytes(&w[0], n_tok) + 1);
	ASSERT_TRUE(scratch);
	for (int64_t k = 0; k < n_in * n_tok; k++)
		x[k] = (float) ((test_uniform() * 2 - 1) * 3);
	/* segments by adapter; token t uses adapter 0 when t % 3 != 2 and adapter 1 when t % 2 == 0
	 * (some tokens both, some neither) */
	for (int o = 0; o < NO; o++) {
		n_pairs = 0;
		for (int a = 0; a < G_RANKS; a++)
			for (int64_t t = 0; t < n_tok; t++)
				if (a == 0 ? t % 3 != 2 : t % 2 == 0)
					pairs[o][n_pairs++] = (struct lora_pair){ .mat = &l[o][a].mat,
										  .row = (uint32_t) t,
										  .scale = a ? 1.5f : 0.5f };
	}
	/* reference: matmul, then every pair's delta as a scalar fmaf chain over (pair, k) in
	 * list order (what the SIMD expand must reproduce bit for bit), then the epilogue; and
	 * lora_sgmv() on top of matmul() must give the same bits too */
	{
		_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
		struct g_epi e = { .a = yref[0], .b = yref[1], .n_tok = n_tok, .n_out = n_out[0] };

		ASSERT_OK(threadpool_new(2, &pool));
		for (int o = 0; o < NO; o++) {
			matmul(pool, &w[o], x, n_tok, yref[o], scratch);
			memcpy(y[o], yref[o], sizeof(float) * (size_t) (n_out[o] * n_tok));
			lora_sgmv(pool, x, y[o], pairs[o], n_pairs, tmp);
			for (size_t pi = 0; pi < n_pairs; pi++) {
				const struct lora_resident_mat *mt = pairs[o][pi].mat;
				float t[8];

				lora_shrink_pair(x, (uint32_t) n_in, &pairs[o][pi], t);
				for (uint32_t k = 0; k < mt->rank; k++)
					for (int64_t col = 0; col < n_out[o]; col++) {
						float bv = mt->dtype == GGML_TYPE_F32
								   ? ((const float *) mt->bt_rows[k])[col]
								   : fp16_to_f32(((const uint16_t *) mt->bt_rows[k])[col]);
						float *yv = &yref[o][pairs[o][pi].row * n_out[o] + col];

						*yv = fmaf(pairs[o][pi].scale * t[k], bv, *yv);
					}
			}
			if (memcmp(y[o], yref[o], sizeof(float) * (size_t) (n_out[o] * n_tok)))
				TEST_FAIL_("%s: lora_sgmv differs from the scalar expand",
					   quant_type_name(type));
		}
		g_epilogue(&e, 0, n_out[0]);
	}
	for (int nth = 1; nth <= 3; nth++) {
		_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
		struct matmul_out outs[NO];
		struct g_epi e = { .a = y[0], .b = y[1], .n_tok = n_tok, .n_out = n_out[0] };
		const struct weight *ws[NO] = { &w[0], &w[1], &w[2] };

		ASSERT_OK(threadpool_new(nth, &pool));
		ASSERT_TRUE(matmul_group_ok(ws, NO));
		for (int o = 0; o < NO; o++)
			outs[o] = (struct matmul_out){ .w = &w[o], .y = y[o], .pairs = pairs[o],
						       .n_pairs = n_pairs, .lora_tmp = tmp + o * 64 * 8 };
		/* all three outputs, no epilogue: outputs 1, 2 are final */
		matmul_group(pool, outs, NO, x, n_tok, scratch, NULL, NULL);
		for (int o = 1; o < NO; o++)
			if (memcmp(y[o], yref[o], sizeof(float) * (size_t) (n_out[o] * n_tok)))
				TEST_FAIL_("%s%s n_tok %lld nth %d: output %d differs from matmul + sgmv",
					   quant_type_name(type), packed ? " packed" : "",
					   (long long) n_tok, nth, o);
		/* outputs 0 and 1 (same n_out) with the epilogue */
		matmul_group(pool, outs, 2, x, n_tok, scratch, g_epilogue, &e);
		for (int o = 0; o < 2; o++)
			if (memcmp(y[o], yref[o], sizeof(float) * (size_t) (n_out[o] * n_tok)))
				TEST_FAIL_("%s%s n_tok %lld nth %d: output %d (epilogue) differs",
					   quant_type_name(type), packed ? " packed" : "",
					   (long long) n_tok, nth, o);
	}
	for (int o = 0; o < NO; o++) {
		tile_case_free(&c[o]);
		free(wp[o]);
		free(yref[o]);
		free(y[o]);
		for (int a = 0; a < G_RANKS; a++)
			free(l[o][a].mem);
	}
	return 0;
}

TEST(matmul_group_same_bits_as_matmul_then_sgmv)
{
	test_seed_rng();
	for (int64_t n_tok = 1; n_tok <= 13; n_tok += 12) {
		if (check_group(GGML_TYPE_Q8_0, true, 320, n_tok) ||
		    check_group(GGML_TYPE_Q4_0, true, 320, n_tok) ||
		    check_group(GGML_TYPE_Q8_0, false, 320, n_tok) ||
		    check_group(GGML_TYPE_F32, false, 200, n_tok) ||
		    check_group(GGML_TYPE_Q4_K, false, 512, n_tok))
			return 1;
	}
	return 0;
}

/* Q8_0 rows for sgmv: n values (a multiple of 32) at dst, random in ±0.1, via the scalar
 * quantizer as lora/resident.c makes them */
static void q8_0_row(void *dst, int64_t n)
{
	float v[4096];

	for (int64_t i = 0; i < n; i++)
		v[i] = (float) (test_uniform() * 2 - 1) * 0.1f;
	quant_quantize_row_ref(GGML_TYPE_Q8_0, v, dst, n);
}

static float q8_0_at(const void *row, int64_t i)
{
	const struct block_q8_0 *b = (const struct block_q8_0 *) row + i / QK8_0;

	return fp16_to_f32(b->d) * (float) b->qs[i % QK8_0];
}

/* Value i of an sgmv row of any hot type, as the kernels define it. */
static float sgmv_at(const void *row, uint32_t dtype, int64_t i)
{
	switch (dtype) {
	case GGML_TYPE_Q8_0:
		return q8_0_at(row, i);
	case GGML_TYPE_F16:
		return fp16_to_f32(((const uint16_t *) row)[i]);
	case GGML_TYPE_BF16:
		return bf16_to_f32(((const uint16_t *) row)[i]);
	default:
		return ((const float *) row)[i];
	}
}

/* An sgmv row of n random values in ±0.1 in dtype (Q8_0: n a multiple of 32). */
static void sgmv_row(void *dst, uint32_t dtype, int64_t n)
{
	if (dtype == GGML_TYPE_Q8_0) {
		q8_0_row(dst, n);
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		float v = (float) (test_uniform() * 2 - 1) * 0.1f;

		if (dtype == GGML_TYPE_F16)
			((uint16_t *) dst)[i] = f32_to_fp16(v);
		else if (dtype == GGML_TYPE_BF16)
			((uint16_t *) dst)[i] = f32_to_bf16(v);
		else
			((float *) dst)[i] = v;
	}
}

static size_t sgmv_row_bytes(uint32_t dtype, int64_t n)
{
	if (dtype == GGML_TYPE_Q8_0)
		return (size_t) n / QK8_0 * sizeof(struct block_q8_0);
	return (size_t) n * (dtype == GGML_TYPE_F32 ? 4 : 2);
}

/*
 * The LoRA kernels for every hot type (F32, F16, BF16 as stored; Q8_0 for [Adapters]
 * HotType=q8_0) at every level: the shrink against a double reference of the rows' values,
 * the expand bit for bit against its scalar definition (y = fma(scale·tmp_k·d_block, q, y) for
 * Q8_0, fma(scale·tmp_k, v, y) otherwise, over k in order), over column ranges that start
 * and end inside blocks and vector widths (the threads' split), for ranks that are and are
 * not multiples of 4, with widths that leave tails after the widest passes (not for Q8_0,
 * whose hot form needs whole blocks).
 */
TEST(sgmv_all_types_all_levels)
{
	static const uint32_t ranks[] = { 16, 5, 1 };
	static const uint32_t hot_types[] = { GGML_TYPE_Q8_0, GGML_TYPE_F16, GGML_TYPE_BF16,
					  GGML_TYPE_F32 };
	enum { N_ROWS = 3, MAX_IN = 224, MAX_OUT = 160 };
	const char *orig = quant_simd_level();
	float x[N_ROWS * MAX_IN];

	test_seed_rng();
	for (size_t i = 0; i < ELEMENTSOF(x); i++)
		x[i] = (float) ((test_uniform() * 2 - 1) * 3);
	for (size_t ti = 0; ti < ELEMENTSOF(hot_types); ti++)
		for (size_t ri = 0; ri < ELEMENTSOF(ranks); ri++) {
			const uint32_t dtype = hot_types[ti], rank = ranks[ri];
			const int64_t n_in = dtype == GGML_TYPE_Q8_0 ? MAX_IN : 203;
			const int64_t n_out = dtype == GGML_TYPE_Q8_0 ? MAX_OUT : 157;
			const size_t row_in = sgmv_row_bytes(dtype, n_in);
			const size_t row_out = sgmv_row_bytes(dtype, n_out);
			_cleanup_free_ char *mem = malloc(rank * (row_in + row_out));
			const void *a_rows[16], *bt_rows[16];
			struct lora_resident_mat mat = { .rank = rank, .n_in = (uint32_t) n_in,
							 .n_out = (uint32_t) n_out, .dtype = dtype,
							 .scale = 0.75f, .a_rows = a_rows,
							 .bt_rows = bt_rows };
			struct lora_pair pairs[2] = { { .mat = &mat, .row = 0, .scale = 1.5f },
						      { .mat = &mat, .row = 2, .scale = -0.5f } };

			ASSERT_TRUE(mem);
			for (uint32_t k = 0; k < rank; k++) {
				a_rows[k] = mem + k * row_in;
				bt_rows[k] = mem + rank * row_in + k * row_out;
				sgmv_row(mem + k * row_in, dtype, n_in);
				sgmv_row(mem + rank * row_in + k * row_out, dtype, n_out);
			}
			for (size_t l = 0; l < n_levels; l++) {
				float tmp[2][16], y[N_ROWS * MAX_OUT], yref[N_ROWS * MAX_OUT];

				if (quant_force_simd_level(levels[l]) < 0)
					continue;
				for (int pi = 0; pi < 2; pi++) {
					lora_shrink_pair(x, (uint32_t) n_in, &pairs[pi], tmp[pi]);
					for (uint32_t k = 0; k < rank; k++) {
						double d = 0;

						for (int64_t i = 0; i < n_in; i++)
							d += (double) x[pairs[pi].row * n_in + i] *
							     sgmv_at(a_rows[k], dtype, i);
						if (fabs(tmp[pi][k] - d) > 1e-5 * (1 + fabs(d)))
							TEST_FAIL_("%s %s rank %u: shrink row %u: %g vs %g",
								   levels[l], quant_type_name(dtype), rank, k,
								   tmp[pi][k], d);
					}
				}
				for (int64_t i = 0; i < N_ROWS * n_out; i++)
					y[i] = yref[i] = (float) (i % 7) * 0.25f;
				/* three column ranges, as three threads would split them */
				lora_expand_range(y, (uint32_t) n_out, pairs, 2, &tmp[0][0], 16, 0, 37);
				lora_expand_range(y, (uint32_t) n_out, pairs, 2, &tmp[0][0], 16, 37, 41);
				lora_expand_range(y, (uint32_t) n_out, pairs, 2, &tmp[0][0], 16, 41,
						  (size_t) n_out);
				for (int pi = 0; pi < 2; pi++)
					for (int64_t c = 0; c < n_out; c++) {
						float *v = &yref[pairs[pi].row * n_out + c];

						for (uint32_t k = 0; k < rank; k++) {
							float a = pairs[pi].scale * tmp[pi][k];

							if (dtype == GGML_TYPE_Q8_0) {
								const struct block_q8_0 *b =
									(const struct block_q8_0 *) bt_rows[k] +
									c / QK8_0;

								*v = fmaf(a * fp16_to_f32(b->d),
									  (float) b->qs[c % QK8_0], *v);
							} else {
								*v = fmaf(a, sgmv_at(bt_rows[k], dtype, c), *v);
							}
						}
					}
				if (memcmp(y, yref, sizeof(float) * (size_t) (N_ROWS * n_out)))
					TEST_FAIL_("%s %s rank %u: expand differs from its scalar definition",
						   levels[l], quant_type_name(dtype), rank);
			}
		}
	ASSERT_OK(quant_force_simd_level(orig));
	return 0;
}
