/* SPDX-License-Identifier: MIT */
/*
 * test-matmul: matmul() for every weight type against a float64 reference computed from the
 * dequantized weights and the dequantized (converted) activations, for odd shapes (output
 * rows not a multiple of the 4-row chunk, several tokens) and 1..3 threads; and thread-count
 * invariance (bit-identical results).
 */
#include <stdint.h>
#include <sys/random.h>

#include "test.h"

#include "engine/matmul.h"
#include "engine/quant.h"
#include "engine/threadpool.h"

static uint64_t rng_state;

static double uniform(void)
{
	rng_state += 0x9e3779b97f4a7c15ull;
	uint64_t z = rng_state;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double) (z >> 11) / 9007199254740992.0;
}

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
		wf[i] = (float) (uniform() * 2 - 1);
	for (int64_t i = 0; i < n_in * n_tok; i++)
		x[i] = (float) ((uniform() * 2 - 1) * 3);
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
	if (getrandom(&rng_state, sizeof(rng_state), 0) != sizeof(rng_state))
		rng_state = 42;
	printf("  seed %llu\n", (unsigned long long) rng_state);
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
