/* SPDX-License-Identifier: MIT */
/*
 * test-forward-attention: attention's kernels and its invariance.
 *
 *   softmax_all_levels: quant_softmax_f32() at every SIMD level this CPU runs against a
 *     float64 softmax (lengths with and without an 8-lane tail, wide and narrow score
 *     ranges), the scalar level bit for bit against quant_softmax_f32_ref(), every level
 *     deterministic, and a value's result the same whatever else the caller does.
 *   prefill_groups_same_bits_as_steps: a prompt decoded in batches of 1, 3, 4 and 7 rows
 *     (attention groups of 1 to 7 rows, tasks prefetching each other's blocks) gives the
 *     same logits, bit for bit, at every level and with 1 and 2 threads; a sequence long
 *     enough to span several KV blocks.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "engine/model.h"
#include "engine/quant.h"
#include "engine/threadpool.h"
#include "simd-levels.h"


/* The softmax of x · scale in float64. */
static void softmax_f64(const float *x, int n, float scale, double *out)
{
	double m = -INFINITY, sum = 0.0;

	for (int i = 0; i < n; i++)
		m = fmax(m, (double) (x[i] * scale));
	for (int i = 0; i < n; i++) {
		out[i] = exp((double) (x[i] * scale) - m);
		sum += out[i];
	}
	for (int i = 0; i < n; i++)
		out[i] /= sum;
}

static int check_softmax(const char *level, const float *x, int n, float scale)
{
	float a[300], b[300], c[300];
	double ref[300];
	double total = 0.0;

	ASSERT_TRUE(n <= 300);
	softmax_f64(x, n, scale, ref);
	memcpy(a, x, n * sizeof(float));
	memcpy(b, x, n * sizeof(float));
	memcpy(c, x, n * sizeof(float));
	quant_softmax_f32(a, n, scale);
	quant_softmax_f32(b, n, scale);
	ASSERT_TRUE(memcmp(a, b, n * sizeof(float)) == 0); /* deterministic */
	quant_softmax_f32_ref(c, n, scale);
	if (strcmp(level, "scalar") == 0)
		ASSERT_TRUE(memcmp(a, c, n * sizeof(float)) == 0);
	for (int i = 0; i < n; i++) {
		/* ~3.5 ulp of exp, a few of the float scaling and of the sum */
		double tol = 1e-6 * ref[i] + 1e-30;

		if (!(fabs(a[i] - ref[i]) <= tol) || !(fabs(c[i] - ref[i]) <= tol)) {
			fprintf(stderr, "  %s n=%d i=%d: %.9g (scalar %.9g), float64 %.9g\n", level, n,
				i, (double) a[i], (double) c[i], ref[i]);
			return 1;
		}
		total += a[i];
	}
	ASSERT_NEAR(total, 1.0, 1e-5);
	return 0;
}

TEST(softmax_all_levels)
{
	char orig[32];
	int tested = 0;

	snprintf(orig, sizeof(orig), "%s", quant_simd_level());
	for (size_t l = 0; l < n_levels; l++) {
		if (quant_force_simd_level(levels[l]) < 0)
			continue;
		tested++;
		for (int n = 1; n <= 300; n += (n < 40 ? 1 : 37)) {
			float x[300];

			/* attention-like: raw Q·K dots, scaled by 1/sqrt(head_dim) */
			for (int i = 0; i < n; i++)
				x[i] = (float) ((test_uniform() * 2 - 1) * 40);
			if (check_softmax(levels[l], x, n, 0.125f))
				return 1;
			/* wide: most weights underflow (below e^-87), one or two dominate */
			for (int i = 0; i < n; i++)
				x[i] = (float) ((test_uniform() * 2 - 1) * 3000);
			if (check_softmax(levels[l], x, n, 1.0f))
				return 1;
			/* all equal: exactly uniform */
			for (int i = 0; i < n; i++)
				x[i] = 2.5f;
			if (check_softmax(levels[l], x, n, 0.125f))
				return 1;
		}
		/* a value's result depends only on the n scores: the same scores at another
		 * address (another 8-lane alignment) give the same bits */
		{
			float x[64], a[64], b[72];

			for (int i = 0; i < 64; i++)
				x[i] = (float) ((test_uniform() * 2 - 1) * 20);
			for (int n = 1; n <= 64; n++) {
				memcpy(a, x, n * sizeof(float));
				memcpy(b + 5, x, n * sizeof(float));
				quant_softmax_f32(a, n, 0.125f);
				quant_softmax_f32(b + 5, n, 0.125f);
				ASSERT_TRUE(memcmp(a, b + 5, n * sizeof(float)) == 0);
			}
		}
	}
	ASSERT_OK(quant_force_simd_level(orig));
	ASSERT_TRUE(tested >= 1);
	return 0;
}

/* Decodes ids in batches of `batch` rows; the last row's logits into out. */
static int decode_in_batches(const struct model *m, struct threadpool *pool, const int32_t *ids,
			     size_t n, uint32_t batch, float *out)
{
	_cleanup_(model_ctx_freep) struct model_ctx *c = NULL;

	ASSERT_OK(model_ctx_new(m, 128, batch, &c));
	for (size_t i = 0; i < n; i += batch) {
		size_t k = n - i < batch ? n - i : batch;

		ASSERT_OK(model_decode(c, pool, ids + i, k, i + k == n ? out : NULL));
	}
	return 0;
}

TEST(prefill_groups_same_bits_as_steps)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_free_ float *ref = NULL, *got = NULL;
	struct errmsg e = {};
	static const uint32_t batches[] = { 3, 4, 7 };
	char orig[32];
	int32_t ids[53];

	if (model_load(test_shared_path("models/tiny/tiny-llama-f32.gguf"), &m, &e) < 0) {
		fprintf(stderr, "  models/tiny/tiny-llama-f32.gguf: %s, skipping\n", e.text);
		return TEST_SKIP;
	}
	for (size_t i = 0; i < ELEMENTSOF(ids); i++)
		ids[i] = (int32_t) (1 + (i * 37) % (m->hp.n_vocab - 1));
	ref = malloc(m->hp.n_vocab * sizeof(float));
	got = malloc(m->hp.n_vocab * sizeof(float));
	ASSERT_TRUE(ref && got);
	snprintf(orig, sizeof(orig), "%s", quant_simd_level());
	for (size_t l = 0; l < n_levels; l++) {
		if (quant_force_simd_level(levels[l]) < 0)
			continue;
		for (int threads = 1; threads <= 2; threads++) {
			_cleanup_(threadpool_freep) struct threadpool *pool = NULL;

			ASSERT_OK(threadpool_new(threads, &pool));
			if (threads == 1)
				ASSERT_OK(decode_in_batches(m, pool, ids, ELEMENTSOF(ids), 1, ref));
			for (size_t b = 0; b < ELEMENTSOF(batches); b++) {
				ASSERT_OK(decode_in_batches(m, pool, ids, ELEMENTSOF(ids), batches[b], got));
				if (memcmp(ref, got, m->hp.n_vocab * sizeof(float)) != 0) {
					fprintf(stderr, "  %s, %d threads, batches of %u: logits differ\n",
						levels[l], threads, batches[b]);
					return 1;
				}
			}
		}
	}
	ASSERT_OK(quant_force_simd_level(orig));
	return 0;
}
