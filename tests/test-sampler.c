/* SPDX-License-Identifier: MIT */
/*
 * test-sampler.c: greedy ties, seeded determinism (against a reference xoshiro256** stream),
 * sampled frequencies against the softmax (chi-square), and each filter's exclusions,
 * compared with a naive full-sort implementation of the same chain; argmax and
 * log-probabilities at every SIMD level against plain references.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/quant.h"
#include "engine/sampler.h"
#include "test.h"
#include "simd-levels.h"

/* A test-local generator for inputs (independent of the sampler's own). */
static uint64_t lcg_state = 1;
static double lcg_uniform(void)
{
	lcg_state = lcg_state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
	return (double) (lcg_state >> 11) * 0x1.0p-53;
}

static void random_logits(float *l, uint32_t n, double scale, uint64_t seed)
{
	lcg_state = seed;
	for (uint32_t i = 0; i < n; i++)
		l[i] = (float) ((lcg_uniform() * 2.0 - 1.0) * scale);
}

static struct sampler_params params_plain(float temp, uint64_t seed)
{
	return (struct sampler_params){
		.temperature = temp,
		.top_k = 0,
		.top_p = 1.0f,
		.min_p = 0.0f,
		.repeat_penalty = 1.0f,
		.repeat_last_n = 64,
		.seed = seed,
	};
}

/*
 * The chain done the slow, obvious way: penalties (by the caller), full sort, top-k, top-p and
 * min-p on temperature-1 probabilities, then the temperature softmax. Writes probabilities
 * for every token into prob[n].
 */
struct ref_cand {
	float logit;
	int32_t id;
};

static int ref_cmp(const void *a, const void *b)
{
	const struct ref_cand *x = a, *y = b;

	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void ref_probs(const float *logits, uint32_t n, const struct sampler_params *p,
		      double *prob)
{
	struct ref_cand *c = calloc(n, sizeof(*c));
	size_t k = n, keep;
	double z = 0, cum = 0, zt = 0;

	for (uint32_t i = 0; i < n; i++)
		c[i] = (struct ref_cand){ logits[i], (int32_t) i };
	qsort(c, n, sizeof(*c), ref_cmp);
	if (p->top_k > 0 && (size_t) p->top_k < n)
		k = (size_t) p->top_k;
	for (size_t i = 0; i < k; i++)
		z += exp((double) c[i].logit - c[0].logit);
	keep = k;
	if (p->top_p < 1.0f) {
		for (size_t i = 0; i < k; i++) {
			cum += exp((double) c[i].logit - c[0].logit) / z;
			if (cum >= p->top_p) {
				keep = i + 1;
				break;
			}
		}
	}
	if (p->min_p > 0.0f)
		for (size_t i = 1; i < keep; i++)
			if (exp((double) c[i].logit - c[0].logit) < p->min_p) {
				keep = i;
				break;
			}
	for (uint32_t i = 0; i < n; i++)
		prob[i] = 0;
	for (size_t i = 0; i < keep; i++)
		zt += exp(((double) c[i].logit - c[0].logit) / p->temperature);
	for (size_t i = 0; i < keep; i++)
		prob[c[i].id] = exp(((double) c[i].logit - c[0].logit) / p->temperature) / zt;
	free(c);
}

/* Pearson's chi-square of counts against probabilities, pooling cells expected < 5. */
static double chi_square(const unsigned *count, const double *prob, uint32_t n, unsigned draws,
			 int *ret_df, unsigned *ret_impossible)
{
	double chi = 0, pool_e = 0, pool_o = 0;
	int cells = 0;
	unsigned impossible = 0;

	for (uint32_t i = 0; i < n; i++) {
		double e = prob[i] * draws;

		if (prob[i] == 0) {
			impossible += count[i];
			continue;
		}
		if (e < 5) {
			pool_e += e;
			pool_o += count[i];
			continue;
		}
		chi += (count[i] - e) * (count[i] - e) / e;
		cells++;
	}
	if (pool_e > 0) {
		chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
		cells++;
	}
	*ret_df = cells - 1;
	*ret_impossible = impossible;
	return chi;
}

TEST(params_default)
{
	struct sampler_params p;

	sampler_params_default(&p);
	ASSERT_NEAR(p.temperature, 0.8, 1e-6);
	ASSERT_EQ(p.top_k, 40);
	ASSERT_NEAR(p.top_p, 0.95, 1e-6);
	ASSERT_NEAR(p.min_p, 0.05, 1e-6);
	ASSERT_NEAR(p.repeat_penalty, 1.0, 0);
	ASSERT_EQ(p.repeat_last_n, 64);
	ASSERT_EQ(p.seed, 0);
	return 0;
}

TEST(params_invalid)
{
	struct sampler_params p = params_plain(1.0f, 0);
	struct sampler *s = NULL;

	ASSERT_ERR(sampler_new(&p, 0, &s), -EINVAL);
	ASSERT_ERR(sampler_new(NULL, 10, &s), -EINVAL);
	p.temperature = NAN;
	ASSERT_ERR(sampler_new(&p, 10, &s), -EINVAL);
	p = params_plain(1.0f, 0);
	p.min_p = 1.5f;
	ASSERT_ERR(sampler_new(&p, 10, &s), -EINVAL);
	p = params_plain(1.0f, 0);
	p.repeat_penalty = 0.0f;
	ASSERT_ERR(sampler_new(&p, 10, &s), -EINVAL);
	p = params_plain(1.0f, 0);
	p.repeat_last_n = -1;
	ASSERT_ERR(sampler_new(&p, 10, &s), -EINVAL);
	p = params_plain(1.0f, 0);
	p.top_p = NAN;
	ASSERT_ERR(sampler_new(&p, 10, &s), -EINVAL);
	ASSERT_TRUE(s == NULL);
	ASSERT_TRUE(sampler_free(NULL) == NULL);
	return 0;
}

TEST(greedy_ties)
{
	const float l[] = { 1.0f, 3.0f, -2.0f, 3.0f, 2.5f };
	const float nan_first[] = { NAN, -1.0f, -1.0f };
	const float all_nan[] = { NAN, NAN };
	_cleanup_(sampler_freep) struct sampler *s = NULL;
	struct sampler_params p = params_plain(0.0f, 7);

	ASSERT_EQ(sampler_argmax(l, 5), 1);
	ASSERT_EQ(sampler_argmax(l, 1), 0);
	ASSERT_EQ(sampler_argmax(nan_first, 3), 1);
	ASSERT_EQ(sampler_argmax(all_nan, 2), 0);
	ASSERT_TRUE(sampler_argmax(l, 0) < 0);

	/* Greedy ignores the penalty, so it matches plain argmax reference runs. */
	p.repeat_penalty = 5.0f;
	ASSERT_OK(sampler_new(&p, 5, &s));
	sampler_accept(s, 1);
	for (int i = 0; i < 10; i++)
		ASSERT_EQ(sampler_sample(s, l), 1);
	p.temperature = -1.0f;
	sampler_free(s);
	s = NULL;
	ASSERT_OK(sampler_new(&p, 5, &s));
	ASSERT_EQ(sampler_sample(s, l), 1);
	return 0;
}

static int draw_sequence(const struct sampler_params *p, const float *l, uint32_t n, int32_t *out,
			 int count)
{
	_cleanup_(sampler_freep) struct sampler *s = NULL;
	int r = sampler_new(p, n, &s);

	if (r < 0)
		return r;
	for (int i = 0; i < count; i++) {
		out[i] = sampler_sample(s, l);
		if (out[i] < 0 || (uint32_t) out[i] >= n)
			return -ERANGE;
	}
	return 0;
}

TEST(seed_determinism)
{
	enum { N = 1000, COUNT = 200 };
	static float l[N];
	int32_t a[COUNT], b[COUNT], c[COUNT];
	struct sampler_params p;
	int same = 0;

	random_logits(l, N, 2.0, 11);
	sampler_params_default(&p);
	p.top_k = 0;
	p.min_p = 0.0f;
	p.seed = 1234;
	ASSERT_OK(draw_sequence(&p, l, N, a, COUNT));
	ASSERT_OK(draw_sequence(&p, l, N, b, COUNT));
	ASSERT_TRUE(memcmp(a, b, sizeof(a)) == 0);
	p.seed = 1235;
	ASSERT_OK(draw_sequence(&p, l, N, c, COUNT));
	for (int i = 0; i < COUNT; i++)
		same += a[i] == c[i];
	/* With ~900 plausible tokens, two streams agree by chance only now and then. */
	ASSERT_TRUE(same < COUNT / 4);
	return 0;
}

/*
 * With 1024 equal logits and no filters, draw i is floor(u_i * 1024) of the generator's i-th
 * uniform, so this pins the generator: xoshiro256** seeded with splitmix64(seed), 53-bit
 * doubles. The expected values come from a reference implementation of Vigna's algorithms.
 */
TEST(reference_stream)
{
	enum { N = 1024 };
	static float l[N];
	static const int32_t want0[8] = { 615, 765, 105, 426, 750, 1023, 432, 548 };
	static const int32_t want42[8] = { 85, 388, 696, 946, 1015, 788, 736, 870 };
	int32_t got[8];
	struct sampler_params p = params_plain(1.0f, 0);

	for (int i = 0; i < N; i++)
		l[i] = 0.25f;
	ASSERT_OK(draw_sequence(&p, l, N, got, 8));
	for (int i = 0; i < 8; i++)
		ASSERT_EQ(got[i], want0[i]);
	p.seed = 42;
	p.temperature = 0.7f; /* equal logits stay equal at any temperature */
	ASSERT_OK(draw_sequence(&p, l, N, got, 8));
	for (int i = 0; i < 8; i++)
		ASSERT_EQ(got[i], want42[i]);
	return 0;
}

TEST(frequencies_match_softmax)
{
	/* df = 7: P(chi2 > 40) is about 1e-6, so 40 is generous and still catches a wrong
	 * temperature or normalisation by far. */
	static const float l[8] = { 0.0f, 0.5f, 1.0f, 1.5f, -0.5f, 2.0f, 0.25f, -1.0f };
	static const struct {
		float temp;
		int32_t top_k;
		float top_p, min_p;
	} cfg[] = {
		{ 1.0f, 0, 1.0f, 0.0f },
		{ 0.5f, 0, 1.0f, 0.0f },
		{ 2.0f, 0, 1.0f, 0.0f },
		{ 1.0f, 3, 1.0f, 0.0f },
		{ 0.8f, 0, 0.7f, 0.0f },
		{ 1.3f, 0, 1.0f, 0.2f },
	};
	enum { DRAWS = 100000 };

	for (size_t k = 0; k < ELEMENTSOF(cfg); k++) {
		struct sampler_params p = params_plain(cfg[k].temp, 99 + k);
		_cleanup_(sampler_freep) struct sampler *s = NULL;
		unsigned count[8] = {}, impossible;
		double prob[8], chi;
		int df;

		p.top_k = cfg[k].top_k;
		p.top_p = cfg[k].top_p;
		p.min_p = cfg[k].min_p;
		ref_probs(l, 8, &p, prob);
		ASSERT_OK(sampler_new(&p, 8, &s));
		for (int i = 0; i < DRAWS; i++) {
			int32_t t = sampler_sample(s, l);
			ASSERT_TRUE(t >= 0 && t < 8);
			count[t]++;
		}
		chi = chi_square(count, prob, 8, DRAWS, &df, &impossible);
		if (impossible || chi > 40.0)
			fprintf(stderr, "  config %zu: chi2 %.2f (df %d), %u impossible draws\n", k,
				chi, df, impossible);
		ASSERT_EQ(impossible, 0);
		ASSERT_TRUE(chi < 40.0);
	}
	return 0;
}

/* The whole chain at once, with penalties, against the naive implementation. */
TEST(chain_matches_reference)
{
	enum { N = 300, DRAWS = 40000 };
	static float l[N], pen[N];
	static unsigned count[N];
	static double prob[N];
	static const int32_t history[] = { 5, 17, 17, 250, 3, 5, 99 };
	_cleanup_(sampler_freep) struct sampler *s = NULL;
	struct sampler_params p = {
		.temperature = 0.7f,
		.top_k = 50,
		.top_p = 0.9f,
		.min_p = 0.02f,
		.repeat_penalty = 1.3f,
		.repeat_last_n = 6, /* the first 5 falls out of the window; 3 and 99 do not */
		.seed = 2024,
	};
	unsigned impossible;
	double chi;
	int df;

	random_logits(l, N, 3.0, 5);
	/* Make the penalised tokens matter: some of the best, one negative. */
	l[5] = 4.0f;
	l[17] = 3.9f;
	l[250] = -0.5f;
	l[3] = 3.5f;
	l[99] = 3.8f;
	memcpy(pen, l, sizeof(l));
	/* window = the last 6 accepted: 17 17 250 3 5 99 → distinct 17, 250, 3, 5, 99 */
	pen[17] /= 1.3f;
	pen[250] *= 1.3f;
	pen[3] /= 1.3f;
	pen[5] /= 1.3f;
	pen[99] /= 1.3f;
	ref_probs(pen, N, &p, prob);

	ASSERT_OK(sampler_new(&p, N, &s));
	for (size_t i = 0; i < ELEMENTSOF(history); i++)
		sampler_accept(s, history[i]);
	for (int i = 0; i < DRAWS; i++) {
		int32_t t = sampler_sample(s, l);
		ASSERT_TRUE(t >= 0 && t < N);
		count[t]++;
	}
	chi = chi_square(count, prob, N, DRAWS, &df, &impossible);
	fprintf(stderr, "  chi2 %.2f with df %d\n", chi, df);
	ASSERT_EQ(impossible, 0);
	ASSERT_TRUE(df >= 3);
	/* generous: mean df, sd sqrt(2 df) */
	ASSERT_TRUE(chi < df + 8.0 * sqrt(2.0 * df) + 10.0);
	return 0;
}

TEST(top_k1_is_greedy)
{
	enum { N = 5000 };
	static float l[N];
	struct sampler_params p;

	sampler_params_default(&p);
	p.top_k = 1;
	for (int round = 0; round < 30; round++) {
		_cleanup_(sampler_freep) struct sampler *s = NULL;

		random_logits(l, N, 5.0, 1000 + round);
		if (round % 3 == 0) /* coarse values: many ties at the top */
			for (int i = 0; i < N; i++)
				l[i] = floorf(l[i]);
		p.seed = round;
		ASSERT_OK(sampler_new(&p, N, &s));
		for (int i = 0; i < 5; i++)
			ASSERT_EQ(sampler_sample(s, l), sampler_argmax(l, N));
	}
	return 0;
}

static int draw_counts(const struct sampler_params *p, const float *l, uint32_t n, int draws,
		       unsigned *count)
{
	_cleanup_(sampler_freep) struct sampler *s = NULL;
	int r = sampler_new(p, n, &s);

	if (r < 0)
		return r;
	memset(count, 0, n * sizeof(*count));
	for (int i = 0; i < draws; i++) {
		int32_t t = sampler_sample(s, l);
		if (t < 0 || (uint32_t) t >= n)
			return -ERANGE;
		count[t]++;
	}
	return 0;
}

TEST(top_p_excludes)
{
	/* probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1 */
	const float l[4] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f) };
	struct sampler_params p = params_plain(1.0f, 3);
	unsigned count[4];

	p.top_p = 0.75f; /* 0.5 < 0.75 <= 0.8: keep two */
	ASSERT_OK(draw_counts(&p, l, 4, 10000, count));
	ASSERT_EQ(count[2], 0);
	ASSERT_EQ(count[3], 0);
	ASSERT_TRUE(count[0] > 5500 && count[1] > 3000); /* renormalised: 0.625 / 0.375 */

	p.top_p = 0.9f; /* 0.8 < 0.9 <= 0.95: keep three */
	p.temperature = 3.0f; /* a high temperature does not bring the fourth back */
	ASSERT_OK(draw_counts(&p, l, 4, 10000, count));
	ASSERT_EQ(count[3], 0);
	ASSERT_TRUE(count[2] > 1000);

	p.top_p = 0.0f; /* at least one token stays */
	ASSERT_OK(draw_counts(&p, l, 4, 1000, count));
	ASSERT_EQ(count[0], 1000);
	return 0;
}

TEST(min_p_excludes)
{
	/* p_max = 0.4; min_p 0.05 → threshold 0.02: 0.021 stays, 0.019 goes */
	const float l[5] = { logf(0.4f), logf(0.3f), logf(0.021f), logf(0.019f), logf(0.26f) };
	struct sampler_params p = params_plain(1.5f, 8);
	unsigned count[5];

	p.min_p = 0.05f;
	ASSERT_OK(draw_counts(&p, l, 5, 10000, count));
	ASSERT_EQ(count[3], 0);
	ASSERT_TRUE(count[2] > 50);

	/* combined with top-k: the filters intersect */
	p.top_k = 2;
	ASSERT_OK(draw_counts(&p, l, 5, 10000, count));
	ASSERT_EQ(count[2] + count[3] + count[4], 0);
	ASSERT_TRUE(count[0] > 0 && count[1] > 0);

	p.top_k = 0;
	p.min_p = 1.0f; /* only the maximum */
	ASSERT_OK(draw_counts(&p, l, 5, 1000, count));
	ASSERT_EQ(count[0], 1000);
	return 0;
}

TEST(repetition_penalty)
{
	struct sampler_params p = params_plain(1.0f, 0);
	_cleanup_(sampler_freep) struct sampler *s = NULL;
	const float l[4] = { 2.0f, 0.9f, -1.0f, -1.5f };

	p.top_k = 1; /* a deterministic view of the penalised logits */
	p.repeat_penalty = 2.0f;
	p.repeat_last_n = 3;
	ASSERT_OK(sampler_new(&p, 4, &s));
	ASSERT_EQ(sampler_sample(s, l), 0);
	/* Counted once however often it repeats: 2.0 / 2 = 1.0 > 0.9 (not 2 / 8). */
	sampler_accept(s, 0);
	sampler_accept(s, 0);
	sampler_accept(s, 0);
	ASSERT_EQ(sampler_sample(s, l), 0);
	/* out-of-range ids are ignored rather than recorded */
	sampler_accept(s, -3);
	sampler_accept(s, 4);
	ASSERT_EQ(sampler_sample(s, l), 0);
	/* 1 joins the window: 0.9 / 2 = 0.45 < 1.0 → 0 still */
	sampler_accept(s, 1);
	ASSERT_EQ(sampler_sample(s, l), 0);
	sampler_free(s);
	s = NULL;

	/* A stronger penalty flips the order; negative logits are multiplied. */
	const float l2[3] = { 1.0f, 0.3f, -0.2f };
	p.repeat_penalty = 4.0f;
	ASSERT_OK(sampler_new(&p, 3, &s));
	sampler_accept(s, 0); /* 0.25 < 0.3 */
	ASSERT_EQ(sampler_sample(s, l2), 1);
	sampler_accept(s, 1); /* 0.075 vs 0.25: 0 again */
	ASSERT_EQ(sampler_sample(s, l2), 0);
	sampler_accept(s, 2); /* window 0 1 2: -0.8 stays last */
	ASSERT_EQ(sampler_sample(s, l2), 0);
	sampler_free(s);
	s = NULL;

	/* The window holds the last 3 accepted tokens: 0 is penalised until it falls out. */
	ASSERT_OK(sampler_new(&p, 3, &s));
	sampler_accept(s, 0);
	ASSERT_EQ(sampler_sample(s, l2), 1);
	sampler_accept(s, 2);
	sampler_accept(s, 2);
	ASSERT_EQ(sampler_sample(s, l2), 1);
	sampler_accept(s, 2);
	ASSERT_EQ(sampler_sample(s, l2), 0);
	sampler_free(s);
	s = NULL;

	/* A penalty below 1 boosts; with repeat_last_n 0 nothing changes. */
	const float l3[2] = { 1.0f, 0.8f };
	p.repeat_penalty = 0.5f;
	ASSERT_OK(sampler_new(&p, 2, &s));
	sampler_accept(s, 1); /* 1.6 > 1.0 */
	ASSERT_EQ(sampler_sample(s, l3), 1);
	sampler_free(s);
	s = NULL;
	p.repeat_last_n = 0;
	ASSERT_OK(sampler_new(&p, 2, &s));
	sampler_accept(s, 1);
	ASSERT_EQ(sampler_sample(s, l3), 0);
	return 0;
}

/* A Qwen-sized vocabulary: the result stays in the naive set and it is fast. */
TEST(large_vocab)
{
	enum { N = 151936, DRAWS = 100 };
	_cleanup_free_ float *l = malloc(N * sizeof(*l));
	_cleanup_free_ double *prob = malloc(N * sizeof(*prob));
	struct sampler_params p;
	struct timespec t0, t1;
	double secs;
	unsigned distinct = 0;
	static unsigned char seen[N];

	ASSERT_TRUE(l && prob);
	for (int cfg = 0; cfg < 2; cfg++) {
		_cleanup_(sampler_freep) struct sampler *s = NULL;

		sampler_params_default(&p);
		if (cfg == 0) {
			random_logits(l, N, 12.0, 77); /* peaked: default chain */
		} else {
			/* flat, no top-k, no min-p: top-p must walk a long sorted prefix */
			random_logits(l, N, 1.0, 78);
			p.top_k = 0;
			p.min_p = 0.0f;
			p.top_p = 0.5f;
		}
		ref_probs(l, N, &p, prob);
		ASSERT_OK(sampler_new(&p, N, &s));
		memset(seen, 0, sizeof(seen));
		distinct = 0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int i = 0; i < DRAWS; i++) {
			int32_t t = sampler_sample(s, l);
			ASSERT_TRUE(t >= 0 && t < N);
			if (prob[t] == 0)
				TEST_FAIL_("config %d: token %d drawn outside the allowed set",
					   cfg, t);
			distinct += !seen[t];
			seen[t] = 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
		fprintf(stderr, "  config %d: %.2f ms per token, %u distinct\n", cfg,
			secs * 1000 / DRAWS, distinct);
		/* the time is printed, not asserted: speed is the benchmarks' business */
		ASSERT_TRUE(distinct > (cfg == 0 ? 2u : 80u));
	}
	return 0;
}

TEST(nonfinite_logits)
{
	const float l[5] = { NAN, -INFINITY, INFINITY, 1.0f, NAN };
	const float none[3] = { -INFINITY, NAN, -INFINITY };
	static float sparse[100];
	struct sampler_params p = params_plain(1.0f, 5);
	unsigned count[100];

	ASSERT_OK(draw_counts(&p, l, 5, 200, count));
	ASSERT_EQ(count[2], 200); /* +inf outweighs everything */
	p.top_k = 2;
	ASSERT_OK(draw_counts(&p, l, 5, 200, count));
	ASSERT_EQ(count[2], 200);
	ASSERT_OK(draw_counts(&p, none, 3, 10, count));
	ASSERT_EQ(count[0], 10); /* nothing possible: the lowest id, as argmax */

	/* fewer finite logits than top-k: only they are drawn */
	for (int i = 0; i < 100; i++)
		sparse[i] = i % 2 ? NAN : -INFINITY;
	sparse[10] = 0.0f;
	sparse[77] = 0.5f;
	sparse[93] = -0.5f;
	p.top_k = 40;
	p.top_p = 0.99f;
	ASSERT_OK(draw_counts(&p, sparse, 100, 3000, count));
	ASSERT_EQ(count[10] + count[77] + count[93], 3000);
	ASSERT_TRUE(count[10] > 0 && count[77] > 0 && count[93] > 0);
	return 0;
}

/* top-k must rank tokens by their penalised logits, not the raw ones. */
TEST(penalty_moves_top_k)
{
	enum { N = 1000 };
	static float l[N];
	struct sampler_params p = params_plain(1.0f, 9);
	_cleanup_(sampler_freep) struct sampler *s = NULL;
	int32_t best;

	random_logits(l, N, 1.0, 31);
	l[321] = 0.5f;
	l[654] = 10.0f; /* the raw best */
	p.top_k = 1;
	p.repeat_penalty = 0.25f; /* boosts positive logits: 0.5 → 2.0 */
	ASSERT_OK(sampler_new(&p, N, &s));
	ASSERT_EQ(sampler_sample(s, l), 654);
	l[654] = 1.0f;
	ASSERT_EQ(sampler_sample(s, l), sampler_argmax(l, N));
	sampler_accept(s, 321);
	ASSERT_EQ(sampler_sample(s, l), 321);
	sampler_free(s);
	s = NULL;

	l[654] = 10.0f;
	p.repeat_penalty = 100.0f; /* 10 → 0.1: out of the top */
	ASSERT_OK(sampler_new(&p, N, &s));
	sampler_accept(s, 654);
	l[654] = -INFINITY;
	best = sampler_argmax(l, N);
	l[654] = 10.0f;
	ASSERT_EQ(sampler_sample(s, l), best);
	return 0;
}

/* log softmax in long double over the non-NaN logits: the reference for sampler_logprob(). */
static double logprob_ref(const float *l, uint32_t n, int32_t id)
{
	long double m = -INFINITY, sum = 0.0L;

	for (uint32_t i = 0; i < n; i++)
		if (!isnan(l[i]) && l[i] > m)
			m = l[i];
	for (uint32_t i = 0; i < n; i++)
		if (!isnan(l[i]))
			sum += expl((long double) l[i] - m);
	return (double) ((long double) l[id] - m - logl(sum));
}

/* The first index of the largest non-NaN value: sampler_argmax()'s rule, written plainly. */
static int32_t argmax_ref(const float *l, uint32_t n)
{
	int32_t best = -1;

	for (uint32_t i = 0; i < n; i++)
		if (!isnan(l[i]) && (best < 0 || l[i] > l[best]))
			best = (int32_t) i;
	return best < 0 ? 0 : best;
}

/* argmax and log-probabilities at every SIMD level against plain references: sizes around the
 * 8-wide steps, ties, NaN, ±inf and values far below the maximum (e^x under the floats). */
TEST(argmax_logprob_all_levels)
{
		static const uint32_t sizes[] = { 1, 7, 8, 9, 15, 16, 17, 31, 1000, 32000, 32003 };
	const char *orig = quant_simd_level();
	_cleanup_free_ float *l = malloc(32003 * sizeof(float));

	ASSERT_TRUE(l != NULL);
	for (size_t lv = 0; lv < n_levels; lv++) {
		if (quant_force_simd_level(levels[lv]) < 0)
			continue;
		for (size_t si = 0; si < ELEMENTSOF(sizes); si++)
			for (int variant = 0; variant < 5; variant++) {
				uint32_t n = sizes[si];

				random_logits(l, n, variant == 4 ? 200.0 : 8.0, 17 * si + (uint64_t) variant);
				if (variant == 1 && n > 2) { /* a tie for the maximum, late */
					l[n - 1] = 50.0f;
					l[n / 2] = 50.0f;
				}
				if (variant == 2) /* NaN and -inf scattered */
					for (uint32_t i = 0; i < n; i += 3)
						l[i] = i % 2 ? NAN : -INFINITY;
				if (variant == 3 && n > 1)
					l[0] = NAN;
				ASSERT_EQ(sampler_argmax(l, n), argmax_ref(l, n));
				for (uint32_t id = 0; id < n; id += n / 7 + 1) {
					float got = sampler_logprob(l, n, id);
					double want = logprob_ref(l, n, id);

					if (isnan(l[id]) || l[id] == -INFINITY || isnan(want) || isinf(want) ||
					    want < -FLT_MAX) {
						ASSERT_TRUE(got == -FLT_MAX);
						continue;
					}
					if (fabs(got - want) > 1e-5 * fmax(1.0, fabs(want))) {
						fprintf(stderr, "level %s n %u variant %d id %u: %.9g want %.9g\n",
							levels[lv], n, variant, id, got, want);
						return 1;
					}
				}
			}
	}
	/* an infinite logit takes all the mass */
	l[0] = 1.0f;
	l[1] = INFINITY;
	l[2] = 3.0f;
	ASSERT_TRUE(sampler_logprob(l, 3, 1) == 0.0f);
	ASSERT_TRUE(sampler_logprob(l, 3, 2) == -FLT_MAX);
	ASSERT_OK(quant_force_simd_level(orig));
	return 0;
}
