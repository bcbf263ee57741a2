/* SPDX-License-Identifier: MIT */
/*
 * sampler.c: repetition penalty, top-k, top-p, min-p, temperature and a seeded draw.
 *
 * The work per token is O(n_vocab) and nothing is ever sorted. top-k reads the logits once
 * into a k-entry heap (one well-predicted comparison per token, no copy of the vocabulary);
 * min-p is a linear filter, and top-p a weighted quickselect that finds the smallest set of
 * best candidates whose mass reaches p without ordering them. So even a flat distribution
 * over a 150k vocabulary with top-k off costs a few linear passes, not a sort.
 *
 * top-p and min-p compare probabilities at temperature 1 (temperature comes after them, as in
 * llama.cpp's chain). Both keep a prefix of the candidates in descending order, and min-p's
 * test (p >= min_p * p_max) does not depend on the normalisation, so applying the min-p
 * filter before walking the top-p prefix gives the same set as the other order, as long as
 * top-p normalises over the candidates that top-k left, which it does.
 *
 * Ties are broken towards the lower token id everywhere, so every step is a function of the
 * input alone and results do not depend on the platform's sort.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "sampler.h"
#include "exp-avx2.h"

/* A window longer than this is refused: it costs 4 bytes a token for nothing measurable. */
#define REPEAT_LAST_N_MAX (1 << 20)

struct cand {
	float logit;
	int32_t id;
	float w; /* a weight: exp(logit - max) for top-p, then with temperature */
};

struct sampler {
	struct sampler_params p;
	uint32_t n_vocab;
	uint64_t rng[4];      /* xoshiro256** state */
	struct cand *cand;    /* owned: n_vocab scratch candidates */
	uint32_t *stamp;      /* owned: n_vocab; == round when penalised this round */
	uint32_t round;
	struct cand *pen;     /* owned: the penalised tokens of this round, distinct */
	size_t n_pen;
	int32_t *ring;        /* owned: the last repeat_last_n accepted tokens */
	uint32_t ring_len;    /* filled entries */
	uint32_t ring_pos;    /* next write */
};

void sampler_params_default(struct sampler_params *p)
{
	if (!p)
		return;
	*p = (struct sampler_params){
		.temperature = 0.8f,
		.top_k = 40,
		.top_p = 0.95f,
		.min_p = 0.05f,
		.repeat_penalty = 1.0f,
		.repeat_last_n = 64,
		.seed = 0,
	};
}

/* ---- random numbers: xoshiro256** seeded by splitmix64 (Vigna's reference algorithms) ---- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t s[4])
{
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4])
{
	return (double) (xoshiro_next(s) >> 11) * 0x1.0p-53;
}

/* ---- construction ---- */

int sampler_new(const struct sampler_params *p, uint32_t n_vocab, struct sampler **ret)
{
	_cleanup_(sampler_freep) struct sampler *s = NULL;
	uint64_t x;

	assert_return(p && ret, -EINVAL);
	assert_return(n_vocab > 0 && n_vocab <= INT32_MAX, -EINVAL);
	assert_return(!isnan(p->temperature) && !isinf(p->temperature), -EINVAL);
	assert_return(!isnan(p->top_p), -EINVAL);
	assert_return(!isnan(p->min_p) && p->min_p <= 1.0f, -EINVAL);
	assert_return(isfinite(p->repeat_penalty) && p->repeat_penalty > 0.0f, -EINVAL);
	assert_return(p->repeat_last_n >= 0 && p->repeat_last_n <= REPEAT_LAST_N_MAX, -EINVAL);

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->p = *p;
	s->n_vocab = n_vocab;
	s->cand = malloc((size_t) n_vocab * sizeof(*s->cand));
	if (!s->cand)
		return -ENOMEM;
	if (p->repeat_penalty != 1.0f && p->repeat_last_n > 0) {
		s->stamp = calloc(n_vocab, sizeof(*s->stamp));
		s->ring = calloc((size_t) p->repeat_last_n, sizeof(*s->ring));
		s->pen = calloc((size_t) p->repeat_last_n, sizeof(*s->pen));
		if (!s->stamp || !s->ring || !s->pen)
			return -ENOMEM;
	}
	x = p->seed;
	for (int i = 0; i < 4; i++)
		s->rng[i] = splitmix64(&x);

	*ret = TAKE_PTR(s);
	return 0;
}

struct sampler *sampler_free(struct sampler *s)
{
	if (!s)
		return NULL;
	free(s->cand);
	free(s->stamp);
	free(s->ring);
	free(s->pen);
	free(s);
	return NULL;
}

void sampler_accept(struct sampler *s, int32_t id)
{
	if (!s || !s->ring || id < 0 || (uint32_t) id >= s->n_vocab)
		return;
	s->ring[s->ring_pos] = id;
	s->ring_pos = (s->ring_pos + 1) % (uint32_t) s->p.repeat_last_n;
	if (s->ring_len < (uint32_t) s->p.repeat_last_n)
		s->ring_len++;
}

/* The largest non-NaN logit, or -inf when there is none. */
static float logits_max_scalar(const float *logits, uint32_t n)
{
	float m = -INFINITY;

	for (uint32_t i = 0; i < n; i++)
		if (logits[i] > m) /* NaN fails the test */
			m = logits[i];
	return m;
}

/* Σ e^(l - m) over the non-NaN logits, in double. */
static double logits_expsum_scalar(const float *logits, uint32_t n, float m)
{
	double sum = 0.0;

	for (uint32_t i = 0; i < n; i++)
		if (!isnan(logits[i]))
			sum += exp((double) logits[i] - (double) m);
	return sum;
}

#if defined(__x86_64__)
/*
 * The scheduler asks for the argmax and the log-probability of every token it generates:
 * two passes over a 32k-150k vocabulary per sequence per step, on the scheduler's thread
 * while the pool waits, so they are vectorized. max_ps(v, acc) returns acc when v is NaN,
 * so NaN never wins, as in the scalar test.
 */
__attribute__((target("avx2,fma"))) static float logits_max_avx2(const float *logits, uint32_t n)
{
	__m256 acc = _mm256_set1_ps(-INFINITY);
	float lanes[8], m;
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8)
		acc = _mm256_max_ps(_mm256_loadu_ps(logits + i), acc);
	_mm256_storeu_ps(lanes, acc);
	m = logits_max_scalar(lanes, 8);
	for (; i < n; i++)
		if (logits[i] > m)
			m = logits[i];
	return m;
}

/* The first i with logits[i] == m, or -1. */
__attribute__((target("avx2,fma"))) static int32_t logits_find_avx2(const float *logits,
								       uint32_t n, float m)
{
	const __m256 mv = _mm256_set1_ps(m);
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8) {
		int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + i), mv, _CMP_EQ_OQ));

		if (hit)
			return (int32_t) (i + (uint32_t) __builtin_ctz((unsigned) hit));
	}
	for (; i < n; i++)
		if (logits[i] == m)
			return (int32_t) i;
	return -1;
}

/* Lanes summed in double (8 floats a step into two 4-double accumulators), so 150k terms
 * lose nothing to float rounding; e^x from exp-avx2.h (NaN and far-below terms are 0). */
__attribute__((target("avx2,fma"))) static double logits_expsum_avx2(const float *logits,
								       uint32_t n, float m)
{
	const __m256 mv = _mm256_set1_ps(m);
	__m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
	double lanes[4];
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 e = exp8_avx2_or_zero(_mm256_sub_ps(_mm256_loadu_ps(logits + i), mv));

		lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
		hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
	}
	_mm256_storeu_pd(lanes, _mm256_add_pd(lo, hi));
	return lanes[0] + lanes[1] + lanes[2] + lanes[3] + logits_expsum_scalar(logits + i, n - i, m);
}

static bool logits_simd(void)
{
	return strcmp(quant_simd_level(), "scalar") != 0;
}
#endif

static float logits_max(const float *logits, uint32_t n)
{
#if defined(__x86_64__)
	if (logits_simd())
		return logits_max_avx2(logits, n);
#endif
	return logits_max_scalar(logits, n);
}

int32_t sampler_argmax(const float *logits, uint32_t n)
{
	float m;

	assert_return(logits && n > 0 && n <= INT32_MAX, -EINVAL);

	/* The lowest id among those equal to the maximum, NaN skipped: the scalar rule "strictly
	 * greater wins", in two passes. All NaN: 0. */
	m = logits_max(logits, n);
#if defined(__x86_64__)
	if (logits_simd()) {
		int32_t id = logits_find_avx2(logits, n, m);

		return id < 0 ? 0 : id;
	}
#endif
	for (uint32_t i = 0; i < n; i++)
		if (logits[i] == m)
			return (int32_t) i;
	return 0;
}

float sampler_logprob(const float *logits, uint32_t n, int32_t id)
{
	float m, v;
	double sum, lp;

	assert_return(logits && n > 0 && id >= 0 && (uint32_t) id < n, NAN);

	v = logits[id];
	m = logits_max(logits, n);
	if (isnan(v) || v == -INFINITY || m == -INFINITY)
		return -FLT_MAX; /* impossible; finite so it survives JSON */
	if (m == INFINITY)
		return v == INFINITY ? 0.0f : -FLT_MAX;
#if defined(__x86_64__)
	if (logits_simd())
		sum = logits_expsum_avx2(logits, n, m);
	else
#endif
		sum = logits_expsum_scalar(logits, n, m);
	lp = (double) v - (double) m - log(sum);
	return lp < -FLT_MAX ? -FLT_MAX : (float) lp;
}

/* ---- candidate ordering ---- */

/* The total order of candidates: higher logit first, lower id on ties. */
static inline bool cand_before(const struct cand *a, const struct cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static inline void cand_swap(struct cand *a, struct cand *b)
{
	struct cand t = *a;

	*a = *b;
	*b = t;
}

/* Picks a pivot in [lo, hi) from a fixed pseudo-random sequence and moves it to hi - 1. */
static void pick_pivot(struct cand *c, size_t lo, size_t hi, uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	cand_swap(&c[lo + *x % (hi - lo)], &c[hi - 1]);
}

/*
 * top-p: rearranges c[0..n) so that c[0..ret) is the smallest set of first candidates (in the
 * order) whose weights sum to at least `want`, at least one. Weighted quickselect: expected
 * O(n), no sort.
 */
static size_t select_mass(struct cand *c, size_t n, double want)
{
	size_t lo = 0, hi = n; /* c[0..lo) is taken; the boundary lies in [lo, hi) */
	uint64_t x = UINT64_C(0x9e3779b97f4a7c15);

	while (hi - lo > 1) {
		size_t store = lo;
		double better = 0.0;

		pick_pivot(c, lo, hi, &x);
		for (size_t i = lo; i < hi - 1; i++)
			if (cand_before(&c[i], &c[hi - 1])) {
				better += c[i].w;
				cand_swap(&c[i], &c[store++]);
			}
		cand_swap(&c[store], &c[hi - 1]);
		if (better >= want && store > lo) {
			hi = store; /* the boundary lies among the better ones */
		} else if (better + c[store].w >= want) {
			return store + 1; /* exactly at the pivot */
		} else {
			want -= better + c[store].w;
			lo = store + 1;
		}
	}
	/* One left: it is the boundary. None left: rounding kept the sum just short; take all. */
	return lo < hi ? lo + 1 : lo;
}

/* ---- the chain ---- */

/* The heap of top-k keeps its worst candidate at the root. */
static inline bool heap_worse(const struct cand *a, const struct cand *b)
{
	return cand_before(b, a);
}

static void heap_sift_down(struct cand *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, w = i;

		if (l < n && heap_worse(&h[l], &h[w]))
			w = l;
		if (r < n && heap_worse(&h[r], &h[w]))
			w = r;
		if (w == i)
			return;
		cand_swap(&h[i], &h[w]);
		i = w;
	}
}

static void heap_push(struct cand *h, size_t *n, size_t k, struct cand x)
{
	size_t i;

	if (*n == k) {
		/* full: x replaces the worst if it is better */
		if (!cand_before(&x, &h[0]))
			return;
		h[0] = x;
		heap_sift_down(h, k, 0);
		return;
	}
	i = (*n)++;
	h[i] = x;
	while (i > 0 && heap_worse(&h[i], &h[(i - 1) / 2])) {
		cand_swap(&h[i], &h[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
}

/* NaN can never win; +inf would turn every exp() below into NaN. */
static inline float sanitize(float v)
{
	if (isnan(v))
		return -INFINITY;
	return v > FLT_MAX ? FLT_MAX : v;
}

/*
 * Collects the penalised logits of this round into s->pen, each distinct token of the window
 * once however often it occurs (llama.cpp's rule), and stamps them.
 */
static void collect_penalties(struct sampler *s, const float *logits)
{
	float pen = s->p.repeat_penalty;

	s->n_pen = 0;
	if (!s->ring || s->ring_len == 0)
		return;
	if (++s->round == 0) {
		memset(s->stamp, 0, (size_t) s->n_vocab * sizeof(*s->stamp));
		s->round = 1;
	}
	for (uint32_t i = 0; i < s->ring_len; i++) {
		int32_t id = s->ring[i];
		float l = sanitize(logits[id]);

		if (s->stamp[id] == s->round)
			continue;
		s->stamp[id] = s->round;
		l = l <= 0.0f ? l * pen : l / pen;
		s->pen[s->n_pen++] = (struct cand){ .logit = sanitize(l), .id = id };
	}
}

/* The k best candidates into c[0..k), from one pass over the logits; k < n_vocab. */
static void gather_top_k(struct sampler *s, const float *logits, size_t k)
{
	struct cand *c = s->cand;
	size_t n = 0;
	float worst = 0.0f; /* the root's logit once the heap is full */

	for (size_t i = 0; i < s->n_vocab; i++) {
		/* Ids rise, so a tie with the root loses: plain > is the order's test. NaN fails
		 * it too. */
		if (n == k && !(logits[i] > worst))
			continue;
		if (s->n_pen > 0 && s->stamp[i] == s->round)
			continue; /* added below with its penalised logit */
		heap_push(c, &n, k,
			  (struct cand){ .logit = sanitize(logits[i]), .id = (int32_t) i });
		if (n == k)
			worst = c[0].logit;
	}
	for (size_t i = 0; i < s->n_pen; i++)
		heap_push(c, &n, k, s->pen[i]);
}

int32_t sampler_sample(struct sampler *s, const float *logits)
{
	struct cand *c;
	size_t n;
	double max, total, target, acc;
	double inv_temp;

	assert_return(s && logits, -EINVAL);

	if (s->p.temperature <= 0.0f)
		return sampler_argmax(logits, s->n_vocab);

	c = s->cand;
	n = s->n_vocab;
	collect_penalties(s, logits);
	if (s->p.top_k > 0 && (size_t) s->p.top_k < n) {
		n = (size_t) s->p.top_k;
		gather_top_k(s, logits, n);
	} else {
		for (size_t i = 0; i < n; i++)
			c[i] = (struct cand){ .logit = sanitize(logits[i]), .id = (int32_t) i };
		for (size_t i = 0; i < s->n_pen; i++)
			c[s->pen[i].id].logit = s->pen[i].logit;
	}

	max = -INFINITY;
	for (size_t i = 0; i < n; i++)
		max = MAX(max, (double) c[i].logit);

	/* One draw per call whatever happens, so the stream position is simple to reason about. */
	target = rng_uniform(s->rng);

	if (max == -INFINITY) /* every token impossible: nothing to weigh */
		return 0;

	/* top-p normalises over what top-k left; min-p filters before its walk (see above). */
	total = 0.0;
	if (s->p.top_p < 1.0f)
		for (size_t i = 0; i < n; i++) {
			c[i].w = (float) exp((double) c[i].logit - max);
			total += c[i].w;
		}

	if (s->p.min_p > 0.0f) {
		double min_rel = log((double) s->p.min_p);
		size_t kept = 0;

		for (size_t i = 0; i < n; i++)
			if ((double) c[i].logit - max >= min_rel)
				c[kept++] = c[i];
		n = kept; /* >= 1: the maximum always passes (min_p <= 1) */
	}

	if (s->p.top_p < 1.0f)
		n = select_mass(c, n, (double) s->p.top_p * total);

	/* temperature, softmax, draw (the weights are kept so both passes see the same ones) */
	inv_temp = 1.0 / (double) s->p.temperature;
	total = 0.0;
	for (size_t i = 0; i < n; i++) {
		c[i].w = (float) exp(((double) c[i].logit - max) * inv_temp);
		total += c[i].w;
	}
	target *= total;
	acc = 0.0;
	for (size_t i = 0; i < n; i++) {
		acc += c[i].w;
		if (acc > target)
			return c[i].id;
	}
	/* Rounding left target at the very top: the last candidate with any weight. */
	for (size_t i = n; i-- > 0;)
		if (c[i].w > 0.0f)
			return c[i].id;
	return c[0].id;
}
