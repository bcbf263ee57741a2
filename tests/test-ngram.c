/* SPDX-License-Identifier: MIT */
/*
 * test-ngram: the unigram and Kneser-Ney bigram baselines (daemon/engine/ngram.c) against
 * values worked out by hand from the formulas in ngram.h.
 *
 * Toy corpus, vocabulary 4, documents [0 1 2 1] and [0 1 1] (token 0 plays BOS):
 *   targets 1 2 1 1 1 → N = 5, c(1) = 4, c(2) = 1;  unigram P(1) = 5/9, P(2) = 2/9, P(3) = 1/9
 *   pairs (0,1)×2 (1,2) (2,1) (1,1) → 4 distinct, n1 = 3, n2 = 1, D = 3/5
 *   N1+(• 1) = 3, N1+(• 2) = 1 → Pc(1) = 4/8, Pc(2) = 2/8, Pc(0) = Pc(3) = 1/8
 *   P(1|0) = (2-.6)/2 + .6·1/2·.5 = .85     P(2|0) = .3·.25 = .075
 *   P(2|1) = (1-.6)/2 + .6·2/2·.25 = .35    P(1|1) = .2 + .6·.5 = .5   P(0|1) = .075
 *   P(w|3) = Pc(w) (3 is never a context)
 */
#include "engine/ngram.h"
#include "test.h"

static int toy(struct ngram **ret)
{
	static const int32_t d1[] = { 0, 1, 2, 1 }, d2[] = { 0, 1, 1 };
	int r = ngram_new(4, ret);

	if (r >= 0)
		r = ngram_add(*ret, d1, 4);
	if (r >= 0)
		r = ngram_add(*ret, d2, 3);
	if (r >= 0)
		r = ngram_finish(*ret);
	return r;
}

TEST(unigram_add_one)
{
	_cleanup_(ngram_freep) struct ngram *g = NULL;

	ASSERT_OK(toy(&g));
	ASSERT_EQ(ngram_n_targets(g), 5);
	ASSERT_NEAR(exp(ngram_unigram_logp(g, 1)), 5.0 / 9, 1e-15);
	ASSERT_NEAR(exp(ngram_unigram_logp(g, 2)), 2.0 / 9, 1e-15);
	ASSERT_NEAR(exp(ngram_unigram_logp(g, 0)), 1.0 / 9, 1e-15);
	ASSERT_NEAR(exp(ngram_unigram_logp(g, 3)), 1.0 / 9, 1e-15);
	return 0;
}

TEST(bigram_kneser_ney_by_hand)
{
	_cleanup_(ngram_freep) struct ngram *g = NULL;

	ASSERT_OK(toy(&g));
	ASSERT_NEAR(ngram_discount(g), 0.6, 1e-15);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 0, 1)), 0.85, 1e-14);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 0, 2)), 0.075, 1e-14);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 0, 3)), 0.0375, 1e-14);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 1, 2)), 0.35, 1e-14);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 1, 1)), 0.5, 1e-14);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 1, 0)), 0.075, 1e-14);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 3, 1)), 0.5, 1e-14);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 3, 2)), 0.25, 1e-14);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 3, 0)), 0.125, 1e-14);
	return 0;
}

/* Both models are distributions for every context, on a bigger random corpus too. */
TEST(probabilities_sum_to_one)
{
	_cleanup_(ngram_freep) struct ngram *g = NULL;
	int32_t doc[200];
	const int32_t V = 50;

	ASSERT_OK(ngram_new(V, &g));
	test_rng_state = 7;
	for (int d = 0; d < 20; d++) {
		doc[0] = 0;
		for (int i = 1; i < 200; i++) /* skewed: low ids far more frequent */
			doc[i] = (int32_t) (test_uniform() * test_uniform() * (V - 10));
		ASSERT_OK(ngram_add(g, doc, 200));
	}
	ASSERT_OK(ngram_finish(g));
	ASSERT_TRUE(ngram_discount(g) > 0 && ngram_discount(g) <= 1);
	for (int32_t v = -1; v < V; v++) {
		double sum = 0;

		for (int32_t w = 0; w < V; w++)
			sum += exp(v < 0 ? ngram_unigram_logp(g, w) : ngram_bigram_logp(g, v, w));
		ASSERT_NEAR(sum, 1.0, 1e-12);
	}
	return 0;
}

TEST(rejects_bad_ids_and_late_adds)
{
	_cleanup_(ngram_freep) struct ngram *g = NULL;
	static const int32_t bad[] = { 0, 4 }, neg[] = { -1, 0 }, ok[] = { 0, 1 };

	ASSERT_OK(ngram_new(4, &g));
	ASSERT_ERR(ngram_add(g, bad, 2), -EINVAL);
	ASSERT_ERR(ngram_add(g, neg, 2), -EINVAL);
	ASSERT_OK(ngram_add(g, ok, 1)); /* one token: no target */
	ASSERT_EQ(ngram_n_targets(g), 0);
	ASSERT_OK(ngram_finish(g));
	ASSERT_ERR(ngram_add(g, ok, 2), -EBUSY);
	/* nothing counted: uniform unigram, D = 0.5, continuation add-one = uniform */
	ASSERT_NEAR(exp(ngram_unigram_logp(g, 2)), 0.25, 1e-15);
	ASSERT_NEAR(exp(ngram_bigram_logp(g, 1, 2)), 0.25, 1e-15);
	return 0;
}
