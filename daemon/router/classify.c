/* SPDX-License-Identifier: MIT */
/*
 * classify.c: hashed n-gram multinomial logistic regression with temperature scaling, and
 * the cheap text signals (difficulty, modality, context need). See classify.h.
 */
#include <endian.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../basic/byte-class.h"
#include "../lora/adapter.h"
#include "classify.h"

/* ---- the labelled set ---- */

struct classify_item {
	uint32_t domain;
	char *text;
	size_t len;
};

struct classify_set {
	char domains[CLASSIFY_MAX_DOMAINS][CLASSIFY_DOMAIN_MAX];
	size_t n_domains;
	struct classify_item *items;
	size_t n_items;
	size_t cap_items;
};

int classify_set_new(struct classify_set **ret)
{
	struct classify_set *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	*ret = s;
	return 0;
}

struct classify_set *classify_set_free(struct classify_set *s)
{
	if (!s)
		return NULL;
	for (size_t i = 0; i < s->n_items; i++)
		free(s->items[i].text);
	free(s->items);
	free(s);
	return NULL;
}

size_t classify_set_size(const struct classify_set *s)
{
	return s ? s->n_items : 0;
}

static int check_domain(const char *domain, struct errmsg *e)
{
	size_t n;

	if (!domain || !domain[0])
		return errmsg_set(e, -EINVAL, "empty domain name");
	n = strlen(domain);
	if (n >= CLASSIFY_DOMAIN_MAX)
		return errmsg_set(e, -EINVAL, "domain name '%.32s...' is longer than %d bytes",
				  domain, CLASSIFY_DOMAIN_MAX - 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char) domain[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return errmsg_set(e, -EINVAL,
					  "domain name '%s': byte %zu is not one of A-Z a-z 0-9 . _ -",
					  domain, i);
	}
	return 0;
}

static int domain_lookup(const char (*domains)[CLASSIFY_DOMAIN_MAX], size_t n,
			 const char *domain)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(domains[i], domain) == 0)
			return (int) i;
	return -ENOENT;
}

int classify_set_add(struct classify_set *s, const char *domain, const char *text, size_t len,
		     struct errmsg *e)
{
	int r, d;

	if (!s)
		return -EINVAL;
	r = check_domain(domain, e);
	if (r < 0)
		return r;
	if (!text || len == 0)
		return errmsg_set(e, -EINVAL, "domain '%s': empty example text", domain);
	d = domain_lookup((const char (*)[CLASSIFY_DOMAIN_MAX]) s->domains, s->n_domains, domain);
	if (d < 0) {
		if (s->n_domains >= CLASSIFY_MAX_DOMAINS)
			return errmsg_set(e, -E2BIG, "more than %d domains (adding '%s')",
					  CLASSIFY_MAX_DOMAINS, domain);
		d = (int) s->n_domains;
		strcpy(s->domains[s->n_domains++], domain);
	}
	if (s->n_items == s->cap_items) {
		size_t cap = s->cap_items ? s->cap_items * 2 : 64;
		struct classify_item *p = realloc(s->items, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		s->items = p;
		s->cap_items = cap;
	}
	char *copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = 0;
	s->items[s->n_items++] = (struct classify_item){ .domain = (uint32_t) d, .text = copy,
							 .len = len };
	return 0;
}

int classify_set_add_adapter(struct classify_set *s, const struct lora_adapter_meta *meta,
			     struct errmsg *e)
{
	int r;

	if (!s || !meta)
		return -EINVAL;
	for (size_t i = 0; i < meta->n_domains; i++) {
		const char *dom = meta->domains[i];
		char tag[CLASSIFY_DOMAIN_MAX];

		r = check_domain(dom, e);
		if (r < 0)
			return errmsg_prefix(e, r, "adapter '%s'", meta->name ? meta->name : "?");
		/* The tag itself is a (weak) example: "home_cooking" reads as "home cooking". */
		size_t n = strlen(dom);
		for (size_t j = 0; j <= n; j++)
			tag[j] = (dom[j] == '_' || dom[j] == '-' || dom[j] == '.') ? ' ' : dom[j];
		r = classify_set_add(s, dom, tag, n, e);
		if (r < 0)
			return r;
		for (size_t j = 0; j < meta->n_exemplars; j++) {
			const char *x = meta->exemplars[j];
			if (!x || !x[0])
				continue;
			r = classify_set_add(s, dom, x, strlen(x), e);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

/* ---- features ---- */

static inline uint32_t mix32(uint32_t h)
{
	/* murmur3's finaliser: every input bit reaches every output bit */
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

static inline bool is_word_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c >= 0x80;
}

/* ASCII lower case as a table: one load a byte where the feature hashing lowers every byte of
 * a word (a compare and a conditional move otherwise). */
#define LOWER1(c) ((unsigned char) ((c) >= 'A' && (c) <= 'Z' ? (c) + 32 : (c)))
#define LOWER4(c) LOWER1(c), LOWER1((c) + 1), LOWER1((c) + 2), LOWER1((c) + 3)
#define LOWER16(c) LOWER4(c), LOWER4((c) + 4), LOWER4((c) + 8), LOWER4((c) + 12)
#define LOWER64(c) LOWER16(c), LOWER16((c) + 16), LOWER16((c) + 32), LOWER16((c) + 48)
static const unsigned char lower_table[256] = { LOWER64(0), LOWER64(64), LOWER64(128),
						LOWER64(192) };
#undef LOWER1
/* The feature hashing's view of a byte, also one load: a word byte (is_word_byte()) lower-cased,
 * 0 for any other (no word byte lowers to 0). */
#define LOWER1(c)                                                                                  \
	((unsigned char) ((c) >= 'A' && (c) <= 'Z'                          ? (c) + 32           \
			  : ((c) >= 'a' && (c) <= 'z') || ((c) >= '0' && (c) <= '9') || (c) >= 0x80 \
				  ? (c)                                                              \
				  : 0))
static const unsigned char feature_byte[256] = { LOWER64(0), LOWER64(64), LOWER64(128),
						 LOWER64(192) };
#undef LOWER64
#undef LOWER16
#undef LOWER4
#undef LOWER1

static inline unsigned char lower(unsigned char c)
{
	return lower_table[c];
}

/* What the feature hashing and the signals pass need to know of a byte, one table load
 * instead of a chain of compares. S_WORD: is_word_byte(); S_RUN: continues a word in the
 * signals pass (a word byte or '_'); S_CJK: lead byte >= 0xE3; S_SPACE: ' ', '\t', '\r';
 * S_NL: '\n'; 0: anything else (classify_signals()' switch). */
#define S_WORD 1u
#define S_RUN 2u
#define S_CJK 4u
#define S_SPACE 8u
#define S_NL 16u
static const uint8_t sig_class[256] = {
	['\t'] = S_SPACE, ['\r'] = S_SPACE, [' '] = S_SPACE, ['\n'] = S_NL,
	['0' ... '9'] = S_WORD | S_RUN, ['A' ... 'Z'] = S_WORD | S_RUN,
	['a' ... 'z'] = S_WORD | S_RUN, ['_'] = S_RUN,
	[0x80 ... 0xe2] = S_WORD | S_RUN, [0xe3 ... 0xff] = S_WORD | S_RUN | S_CJK,
};

/* Character 4-grams per word are capped so a long token (base64, a hash) costs no more than
 * a long word. */
#define MAX_GRAMS_PER_WORD 16
#define MAX_WORD 64

/*
 * Calls emit(h) for every feature of the text: word unigrams, word bigrams and the 4-grams of
 * " word " (words shorter than 3 bytes give their padded whole). Inline with a function
 * pointer argument known at each call site, so the compiler specialises it.
 */
#define FOREACH_FEATURE(text, len, EMIT)                                                           \
	do {                                                                                       \
		const unsigned char *p_ = (const unsigned char *) (text);                           \
		size_t n_ = (len), i_ = 0;                                                         \
		uint32_t prev_ = 0;                                                                \
		bool have_prev_ = false;                                                           \
		while (i_ < n_) {                                                                  \
			while (i_ < n_ && !feature_byte[p_[i_]])                                   \
				i_++;                                                              \
			if (i_ >= n_)                                                              \
				break;                                                             \
			unsigned char w_[MAX_WORD + 2];                                            \
			size_t wl_ = 0;                                                            \
			uint32_t wh_ = 0x811c9dc5u;                                                \
			w_[wl_++] = ' ';                                                           \
			unsigned char c_;                                                          \
			while (i_ < n_ && (c_ = feature_byte[p_[i_]]) != 0) {                      \
				i_++;                                                              \
				wh_ = (wh_ ^ c_) * 0x01000193u;                                    \
				if (wl_ < MAX_WORD + 1)                                            \
					w_[wl_++] = c_;                                            \
			}                                                                          \
			w_[wl_++] = ' ';                                                           \
			uint32_t uni_ = mix32(wh_ ^ 0x9e3779b9u);                                  \
			EMIT(uni_);                                                                \
			if (have_prev_)                                                            \
				EMIT(mix32(prev_ * 0x2545f491u + wh_ + 0x51ed27u));                 \
			prev_ = wh_;                                                               \
			have_prev_ = true;                                                         \
			if (wl_ < 4) {                                                             \
				uint32_t g_ = 0x3c6ef372u;                                         \
				for (size_t k_ = 0; k_ < wl_; k_++)                                \
					g_ = (g_ ^ w_[k_]) * 0x01000193u;                          \
				EMIT(mix32(g_));                                                   \
			} else {                                                                   \
				size_t ng_ = MIN(wl_ - 3, (size_t) MAX_GRAMS_PER_WORD);            \
				for (size_t k_ = 0; k_ < ng_; k_++) {                              \
					/* w_[k_] | w_[k_ + 1] << 8 | ... << 24: one load */       \
					uint32_t g_;                                               \
					memcpy(&g_, w_ + k_, sizeof(g_));                          \
					EMIT(mix32(le32toh(g_) ^ 0xa54ff53au));                    \
				}                                                                  \
			}                                                                          \
		}                                                                                  \
	} while (0)

/* ---- the model ---- */

struct classify_model {
	char domains[CLASSIFY_MAX_DOMAINS][CLASSIFY_DOMAIN_MAX];
	size_t n_domains;
	uint32_t bits;
	uint32_t mask;
	size_t stride;         /* floats per feature row: n_domains */
	float *w;              /* [1 << bits][stride] */
	float bias[CLASSIFY_MAX_DOMAINS];
	uint64_t *seen;        /* bit per feature: seen in training */
	float inv_temperature;
	struct classify_stats stats;
};

size_t classify_n_domains(const struct classify_model *m)
{
	return m ? m->n_domains : 0;
}

const char *classify_domain_name(const struct classify_model *m, size_t i)
{
	return m && i < m->n_domains ? m->domains[i] : NULL;
}

int classify_domain_index(const struct classify_model *m, const char *domain)
{
	if (!m || !domain)
		return -ENOENT;
	return domain_lookup((const char (*)[CLASSIFY_DOMAIN_MAX]) m->domains, m->n_domains,
			     domain);
}

void classify_model_stats(const struct classify_model *m, struct classify_stats *ret)
{
	*ret = m->stats;
}

struct classify_model *classify_model_free(struct classify_model *m)
{
	if (!m)
		return NULL;
	free(m->w);
	free(m->seen);
	free(m);
	return NULL;
}

const char *classify_modality_name(enum classify_modality m)
{
	return m == CLASSIFY_MODALITY_CODE ? "code" : "text";
}

/* Four floats, one SSE register (or NEON's): the accumulator below is two of these, not one
 * 8-float vector, which a build without AVX splits and keeps in memory, every add then
 * waiting on a store and a load. */
typedef float v4f __attribute__((vector_size(16)));

/* Raw (temperature 1) logits; returns the number of features and, in *n_seen, whether any
 * of them was seen in training (1) or none (0): only that is used, so the seen bits stop
 * being read once one is found. */
static size_t model_logits(const struct classify_model *m, const char *text, size_t len,
			   float *z, size_t *n_seen)
{
	const size_t K = m->stride;
	const uint32_t mask = m->mask;
	const float *w = m->w;
	const uint64_t *seen = m->seen;
	float acc[CLASSIFY_MAX_DOMAINS] = { 0 };
	size_t nf = 0, ns = 0;
	/* The weight table is larger than L2: the features are hashed in batches and their rows
	 * prefetched before they are added, so the cache misses overlap instead of queueing
	 * behind the hashing. A batch holds the rows' offsets in w (under 2^26: bits <= 20,
	 * K <= 64). */
	uint32_t batch[64];
	size_t nb = 0;
	v4f acc_lo = { 0 }, acc_hi = { 0 };

#define FLUSH_BATCH()                                                                              \
	do {                                                                                       \
		if (K <= 8) {                                                                      \
			/* One 8-wide add a feature in registers, not K adds through memory;  \
			 * the lanes past K read the next row (or the slack) and are dropped. */  \
			for (size_t b_ = 0; b_ < nb; b_++) {                                       \
				v4f lo_, hi_;                                                      \
				memcpy(&lo_, w + batch[b_], sizeof(lo_));                          \
				memcpy(&hi_, w + batch[b_] + 4, sizeof(hi_));                      \
				acc_lo += lo_;                                                     \
				acc_hi += hi_;                                                     \
			}                                                                          \
		} else                                                                             \
			for (size_t b_ = 0; b_ < nb; b_++) {                                       \
				const float *row_ = w + batch[b_];                                 \
				for (size_t k = 0; k < K; k++)                                     \
					acc[k] += row_[k];                                         \
			}                                                                          \
		nf += nb;                                                                          \
		nb = 0;                                                                            \
	} while (0)
#define EMIT_RUN(h)                                                                                \
	do {                                                                                       \
		uint32_t f_ = (h) & mask;                                                          \
		batch[nb] = f_ * (uint32_t) K;                                                     \
		__builtin_prefetch(w + batch[nb]);                                                 \
		if (!ns)                                                                           \
			ns = (seen[f_ >> 6] >> (f_ & 63)) & 1;                                     \
		if (++nb == ELEMENTSOF(batch))                                                     \
			FLUSH_BATCH();                                                             \
	} while (0)
	FOREACH_FEATURE(text, len, EMIT_RUN);
	FLUSH_BATCH();
#undef EMIT_RUN
#undef FLUSH_BATCH
	if (K <= 8)
		for (size_t k = 0; k < K; k++)
			acc[k] = k < 4 ? acc_lo[k] : acc_hi[k - 4];

	float s = nf ? 1.0f / sqrtf((float) nf) : 0.0f;
	for (size_t k = 0; k < K; k++)
		z[k] = m->bias[k] + acc[k] * s;
	*n_seen = ns;
	return nf;
}

static void softmax(const float *z, size_t K, float inv_t, float *p)
{
	float mx = -INFINITY, sum = 0;

	for (size_t k = 0; k < K; k++)
		mx = MAX(mx, z[k] * inv_t);
	for (size_t k = 0; k < K; k++) {
		p[k] = expf(z[k] * inv_t - mx);
		sum += p[k];
	}
	for (size_t k = 0; k < K; k++)
		p[k] /= sum;
}

void classify_run(const struct classify_model *m, const char *text, size_t len,
		  struct classify_result *ret)
{
	float z[CLASSIFY_MAX_DOMAINS];
	size_t K = m->n_domains, n_seen = 0;

	classify_signals(text, len, ret);
	ret->n_domains = K;
	if (!text)
		len = 0;
	/* What a request is about shows in its first hundred words; the rest would only add
	 * cost (the signals above still read all of it). Cut at a space so no word is split. */
	if (len > CLASSIFY_TEXT_MAX) {
		size_t cut = CLASSIFY_TEXT_MAX;
		while (cut > CLASSIFY_TEXT_MAX / 2 && text[cut] != ' ' && text[cut] != '\n')
			cut--;
		len = cut;
	}
	model_logits(m, text, len, z, &n_seen);
	ret->unknown = n_seen == 0;
	if (ret->unknown) {
		for (size_t k = 0; k < K; k++)
			ret->posterior[k] = 1.0f / (float) K;
	} else {
		softmax(z, K, m->inv_temperature, ret->posterior);
	}
	ret->top = 0;
	double h = 0;
	for (size_t k = 0; k < K; k++) {
		if (ret->posterior[k] > ret->posterior[ret->top])
			ret->top = k;
		if (ret->posterior[k] > 0)
			h -= ret->posterior[k] * log(ret->posterior[k]);
	}
	ret->confidence = ret->posterior[ret->top];
	ret->entropy = K > 1 ? (float) MIN(1.0, h / log((double) K)) : 0.0f;
	if (ret->unknown && K > 1)
		ret->entropy = 1.0f;
}

/* ---- training ---- */

struct example_feats {
	uint32_t *f;
	size_t n;
	uint32_t domain;
};

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void shuffle(size_t *idx, size_t n, uint64_t *rng)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t) (splitmix64(rng) % i);
		size_t t = idx[i - 1];
		idx[i - 1] = idx[j];
		idx[j] = t;
	}
}

static int extract(const struct classify_item *it, uint32_t mask, struct example_feats *ret)
{
	size_t n = 0, cap = 0;
	uint32_t *f = NULL;

#define EMIT_COUNT(h) (void) (h), n++
	FOREACH_FEATURE(it->text, it->len, EMIT_COUNT);
#undef EMIT_COUNT
	cap = n ? n : 1;
	f = malloc(cap * sizeof(*f));
	if (!f)
		return -ENOMEM;
	n = 0;
#define EMIT_STORE(h) f[n++] = (h) & mask
	FOREACH_FEATURE(it->text, it->len, EMIT_STORE);
#undef EMIT_STORE
	*ret = (struct example_feats){ .f = f, .n = n, .domain = it->domain };
	return 0;
}

struct trainer {
	size_t K;
	uint32_t mask;
	float *w;
	float *g2;   /* AdaGrad accumulators, per weight */
	float bias[CLASSIFY_MAX_DOMAINS];
	float bias_g2[CLASSIFY_MAX_DOMAINS];
};

static void ex_logits(const struct trainer *t, const struct example_feats *x, float *z)
{
	float s = x->n ? 1.0f / sqrtf((float) x->n) : 0.0f;

	for (size_t k = 0; k < t->K; k++)
		z[k] = 0;
	for (size_t i = 0; i < x->n; i++) {
		const float *row = t->w + (size_t) x->f[i] * t->K;
		for (size_t k = 0; k < t->K; k++)
			z[k] += row[k];
	}
	for (size_t k = 0; k < t->K; k++)
		z[k] = t->bias[k] + z[k] * s;
}

#define LEARNING_RATE 0.5f

static void train(struct trainer *t, const struct example_feats *xs, const size_t *which,
		  size_t n, uint32_t epochs, float l2, uint64_t seed)
{
	size_t *order = malloc(n * sizeof(*order));
	uint64_t rng = seed ^ 0x6a09e667f3bcc909ull;
	float z[CLASSIFY_MAX_DOMAINS], p[CLASSIFY_MAX_DOMAINS];

	if (!order)
		return; /* the caller checks t->w only; training without memory leaves zeros */
	memcpy(order, which, n * sizeof(*order));
	for (uint32_t ep = 0; ep < epochs; ep++) {
		shuffle(order, n, &rng);
		for (size_t ii = 0; ii < n; ii++) {
			const struct example_feats *x = &xs[order[ii]];
			float s = x->n ? 1.0f / sqrtf((float) x->n) : 0.0f;

			ex_logits(t, x, z);
			softmax(z, t->K, 1.0f, p);
			for (size_t k = 0; k < t->K; k++) {
				float g = p[k] - (k == x->domain ? 1.0f : 0.0f);
				t->bias_g2[k] += g * g;
				t->bias[k] -= LEARNING_RATE * g / sqrtf(t->bias_g2[k] + 1e-8f);
			}
			for (size_t i = 0; i < x->n; i++) {
				size_t base = (size_t) x->f[i] * t->K;
				for (size_t k = 0; k < t->K; k++) {
					float g = (p[k] - (k == x->domain ? 1.0f : 0.0f)) * s +
						  l2 * t->w[base + k];
					t->g2[base + k] += g * g;
					t->w[base + k] -= LEARNING_RATE * g /
							  sqrtf(t->g2[base + k] + 1e-8f);
				}
			}
		}
	}
	free(order);
}

static int trainer_init(struct trainer *t, size_t K, uint32_t bits)
{
	size_t n = ((size_t) 1 << bits) * K;

	*t = (struct trainer){ .K = K, .mask = (1u << bits) - 1 };
	/* 8 floats of slack: model_logits() reads rows 8 floats wide when K <= 8. */
	t->w = calloc(n + 8, sizeof(float));
	t->g2 = calloc(n, sizeof(float));
	if (!t->w || !t->g2) {
		free(t->w);
		free(t->g2);
		return -ENOMEM;
	}
	return 0;
}

static void trainer_done(struct trainer *t)
{
	free(t->w);
	free(t->g2);
	t->w = t->g2 = NULL;
}

/* 10 equal-width bins over the confidence. */
static float ece_of(const float *conf, const bool *correct, size_t n)
{
	double c_sum[10] = { 0 }, a_sum[10] = { 0 };
	size_t cnt[10] = { 0 };
	double ece = 0;

	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		int b = (int) (conf[i] * 10.0f);
		b = b < 0 ? 0 : b > 9 ? 9 : b;
		c_sum[b] += conf[i];
		a_sum[b] += correct[i] ? 1 : 0;
		cnt[b]++;
	}
	for (int b = 0; b < 10; b++)
		if (cnt[b])
			ece += fabs(a_sum[b] - c_sum[b]) / (double) n;
	return (float) ece;
}

/* Mean negative log-likelihood of the held-out logits at inverse temperature inv_t. */
static double nll_at(const float *z, const uint32_t *label, size_t n, size_t K, float inv_t)
{
	double nll = 0;
	float p[CLASSIFY_MAX_DOMAINS];

	for (size_t i = 0; i < n; i++) {
		softmax(z + i * K, K, inv_t, p);
		nll -= log(MAX(p[label[i]], 1e-12f));
	}
	return nll / (double) n;
}

/* Golden-section search of ln T in [ln 0.05, ln 20]: the NLL is unimodal in T in practice
 * and this needs no gradient. */
static float fit_temperature(const float *z, const uint32_t *label, size_t n, size_t K)
{
	const double g = 0.6180339887498949;
	double a = log(0.05), b = log(20.0);
	double c = b - g * (b - a), d = a + g * (b - a);
	double fc = nll_at(z, label, n, K, (float) exp(-c));
	double fd = nll_at(z, label, n, K, (float) exp(-d));

	for (int it = 0; it < 60; it++) {
		if (fc < fd) {
			b = d;
			d = c;
			fd = fc;
			c = b - g * (b - a);
			fc = nll_at(z, label, n, K, (float) exp(-c));
		} else {
			a = c;
			c = d;
			fc = fd;
			d = a + g * (b - a);
			fd = nll_at(z, label, n, K, (float) exp(-d));
		}
	}
	return (float) exp((a + b) / 2);
}

static void holdout_metrics(const float *z, const uint32_t *label, size_t n, size_t K,
			    float inv_t, float *conf, bool *correct, float *acc, float *ece)
{
	float p[CLASSIFY_MAX_DOMAINS];
	size_t good = 0;

	for (size_t i = 0; i < n; i++) {
		size_t top = 0;
		softmax(z + i * K, K, inv_t, p);
		for (size_t k = 1; k < K; k++)
			if (p[k] > p[top])
				top = k;
		conf[i] = p[top];
		correct[i] = top == label[i];
		good += correct[i];
	}
	*acc = n ? (float) good / (float) n : 0;
	*ece = ece_of(conf, correct, n);
}

/* Fits the temperature on a held-out split of xs (per domain, deterministic) with a model
 * trained on the rest; fills m->stats and m->inv_temperature. */
static int calibrate(struct classify_model *m, const struct example_feats *xs, size_t n,
		     const struct classify_options *o, uint32_t epochs, float l2, float frac)
{
	const size_t K = m->n_domains;
	_cleanup_free_ size_t *train_idx = malloc(n * sizeof(size_t));
	_cleanup_free_ size_t *hold_idx = malloc(n * sizeof(size_t));
	_cleanup_free_ size_t *dom_idx = malloc(n * sizeof(size_t));
	size_t n_train = 0, n_hold = 0;
	uint64_t rng = o->seed ^ 0xbb67ae8584caa73bull;
	struct trainer t;
	int r;

	m->inv_temperature = 1.0f;
	m->stats = (struct classify_stats){ .n_train = n, .temperature = 1.0f };
	if (!train_idx || !hold_idx || !dom_idx)
		return -ENOMEM;
	for (size_t d = 0; d < K; d++) {
		size_t nd = 0, nh;
		for (size_t i = 0; i < n; i++)
			if (xs[i].domain == d)
				dom_idx[nd++] = i;
		shuffle(dom_idx, nd, &rng);
		/* Always leave at least one example of the domain to train on. */
		nh = (size_t) lroundf(frac * (float) nd);
		if (nh >= nd)
			nh = nd ? nd - 1 : 0;
		for (size_t i = 0; i < nd; i++) {
			if (i < nh)
				hold_idx[n_hold++] = dom_idx[i];
			else
				train_idx[n_train++] = dom_idx[i];
		}
	}
	if (n_hold == 0)
		return 0;

	r = trainer_init(&t, K, m->bits);
	if (r < 0)
		return r;
	train(&t, xs, train_idx, n_train, epochs, l2, o->seed);
	_cleanup_free_ float *z = malloc(n_hold * K * sizeof(float));
	_cleanup_free_ uint32_t *label = malloc(n_hold * sizeof(uint32_t));
	_cleanup_free_ float *conf = malloc(n_hold * sizeof(float));
	_cleanup_free_ bool *correct = malloc(n_hold * sizeof(bool));
	if (!z || !label || !conf || !correct) {
		trainer_done(&t);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_hold; i++) {
		ex_logits(&t, &xs[hold_idx[i]], z + i * K);
		label[i] = xs[hold_idx[i]].domain;
	}
	trainer_done(&t);

	float acc, ece_raw, ece;
	holdout_metrics(z, label, n_hold, K, 1.0f, conf, correct, &acc, &ece_raw);
	float temp = fit_temperature(z, label, n_hold, K);
	holdout_metrics(z, label, n_hold, K, 1.0f / temp, conf, correct, &acc, &ece);
	m->inv_temperature = 1.0f / temp;
	m->stats = (struct classify_stats){
		.n_train = n_train,
		.n_holdout = n_hold,
		.temperature = temp,
		.holdout_accuracy = acc,
		.ece_raw = ece_raw,
		.ece = ece,
	};
	return 0;
}

int classify_build(const struct classify_set *s, const struct classify_options *opts,
		   struct classify_model **ret, struct errmsg *e)
{
	struct classify_options o = opts ? *opts : (struct classify_options){ 0 };
	uint32_t bits = o.feature_bits ? o.feature_bits : 16;
	uint32_t epochs = o.epochs ? o.epochs : 60;
	float l2 = o.l2 == 0 ? 1e-4f : o.l2 < 0 ? 0 : o.l2;
	float frac = o.holdout_fraction == 0 ? 0.2f : o.holdout_fraction;
	struct example_feats *xs = NULL;
	struct classify_model *m = NULL;
	struct trainer t = { 0 };
	size_t n_x = 0;
	int r;

	if (!s || s->n_domains == 0 || s->n_items == 0)
		return errmsg_set(e, -EINVAL, "no labelled examples to build a classifier from");
	if (bits < 10 || bits > 20)
		return errmsg_set(e, -EINVAL, "feature_bits %u: give 10..20", bits);
	if (!(frac < 1.0f) || isnan(frac))
		return errmsg_set(e, -EINVAL, "holdout_fraction %g: give less than 1",
				  (double) frac);
	if (isnan(l2) || l2 > 1.0f)
		return errmsg_set(e, -EINVAL, "l2 %g: give at most 1", (double) l2);

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	memcpy(m->domains, s->domains, sizeof(m->domains));
	m->n_domains = s->n_domains;
	m->bits = bits;
	m->mask = (1u << bits) - 1;
	m->stride = s->n_domains;
	m->inv_temperature = 1.0f;
	m->seen = calloc(((size_t) 1 << bits) / 64, sizeof(uint64_t));
	xs = calloc(s->n_items, sizeof(*xs));
	if (!m->seen || !xs) {
		r = -ENOMEM;
		goto fail;
	}
	for (n_x = 0; n_x < s->n_items; n_x++) {
		r = extract(&s->items[n_x], m->mask, &xs[n_x]);
		if (r < 0)
			goto fail;
		for (size_t i = 0; i < xs[n_x].n; i++)
			m->seen[xs[n_x].f[i] >> 6] |= 1ull << (xs[n_x].f[i] & 63);
	}

	if (m->n_domains > 1 && frac > 0) {
		r = calibrate(m, xs, n_x, &o, epochs, l2, frac);
		if (r < 0)
			goto fail;
	} else {
		m->stats = (struct classify_stats){ .n_train = n_x, .temperature = 1.0f };
	}

	r = trainer_init(&t, m->n_domains, bits);
	if (r < 0)
		goto fail;
	{
		_cleanup_free_ size_t *all = malloc(n_x * sizeof(size_t));
		if (!all) {
			r = -ENOMEM;
			goto fail;
		}
		for (size_t i = 0; i < n_x; i++)
			all[i] = i;
		if (m->n_domains > 1)
			train(&t, xs, all, n_x, epochs, l2, o.seed);
	}
	m->w = TAKE_PTR(t.w);
	memcpy(m->bias, t.bias, sizeof(m->bias));
	trainer_done(&t);
	for (size_t i = 0; i < n_x; i++)
		free(xs[i].f);
	free(xs);
	*ret = m;
	return 0;
fail:
	trainer_done(&t);
	for (size_t i = 0; xs && i < n_x; i++)
		free(xs[i].f);
	free(xs);
	classify_model_free(m);
	return r == -ENOMEM ? errmsg_set(e, r, "out of memory building the classifier") : r;
}

int classify_evaluate(const struct classify_model *m, const struct classify_set *s,
		      struct classify_eval *ret)
{
	size_t good = 0;
	double conf_sum = 0;

	if (!m || !s || s->n_items == 0)
		return -EINVAL;
	_cleanup_free_ float *conf = malloc(s->n_items * sizeof(float));
	_cleanup_free_ bool *correct = malloc(s->n_items * sizeof(bool));
	if (!conf || !correct)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_items; i++) {
		struct classify_result res;
		const struct classify_item *it = &s->items[i];
		int want = classify_domain_index(m, s->domains[it->domain]);

		classify_run(m, it->text, it->len, &res);
		conf[i] = res.confidence;
		correct[i] = want >= 0 && res.top == (size_t) want && !res.unknown;
		good += correct[i];
		conf_sum += res.confidence;
	}
	*ret = (struct classify_eval){
		.n = s->n_items,
		.accuracy = (float) good / (float) s->n_items,
		.ece = ece_of(conf, correct, s->n_items),
		.mean_confidence = (float) (conf_sum / (double) s->n_items),
	};
	return 0;
}

/* ---- text signals ---- */

static const char *const code_words[] = {
	"def", "return", "include", "import", "function", "class", "struct", "const", "let",
	"var", "printf", "fn", "void", "int", "public", "static", "elif", "lambda", "select",
	"async", "await", "std", "println",
};
static const char *const math_words[] = {
	"integral", "derivative", "equation", "prove", "theorem", "matrix", "solve", "sqrt",
	"probability", "lemma", "eigenvalue", "polynomial", "frac", "sum", "limit",
};
static const char *const multi_words[] = {
	"then", "also", "step", "compare", "explain", "analyze", "analyse", "design",
	"implement", "optimize", "optimise", "why", "derive", "evaluate",
};

/*
 * The three lists in one open-addressing table keyed by the word's FNV-1a hash, built once:
 * a word costs one hash and (almost always) one probe, not a walk over every entry.
 */
#define WORDS_SLOTS 256 /* a power of two, over 4x the entries */
#define IN_CODE 1u
#define IN_MATH 2u
#define IN_MULTI 4u

struct word_slot {
	const char *word; /* NULL: empty */
	uint32_t hash;
	uint8_t len;
	uint8_t lists;
};
static struct word_slot word_table[WORDS_SLOTS];
static pthread_once_t word_table_once = PTHREAD_ONCE_INIT;
/* Bit n of word_len_mask[a][b]: some list holds a word of n bytes starting with the letters
 * a b (letter_index(): 1..26, either case; 0 for anything else, where no bit is set as the
 * lists are lower-case letters only). Most words fail this test and are never hashed. */
static uint32_t word_len_mask[27][27];

#define L26(a) [a] = 1, [a + 1] = 2, [a + 2] = 3, [a + 3] = 4, [a + 4] = 5, [a + 5] = 6,     \
	[a + 6] = 7, [a + 7] = 8, [a + 8] = 9, [a + 9] = 10, [a + 10] = 11, [a + 11] = 12,         \
	[a + 12] = 13, [a + 13] = 14, [a + 14] = 15, [a + 15] = 16, [a + 16] = 17, [a + 17] = 18,  \
	[a + 18] = 19, [a + 19] = 20, [a + 20] = 21, [a + 21] = 22, [a + 22] = 23, [a + 23] = 24,  \
	[a + 24] = 25, [a + 25] = 26
static const uint8_t letter_idx[256] = { L26('A'), L26('a') };
#undef L26

static inline unsigned letter_index(unsigned char c)
{
	return letter_idx[c];
}

static uint32_t word_hash(const unsigned char *w, size_t n)
{
	uint32_t h = 0x811c9dc5u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ w[i]) * 0x01000193u;
	return h;
}

static void word_table_add(const char *const *list, size_t n, uint8_t bit)
{
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(list[i]);
		uint32_t h = word_hash((const unsigned char *) list[i], l);
		word_len_mask[letter_index((unsigned char) list[i][0])]
			     [letter_index((unsigned char) list[i][1])] |= 1u << l;
		for (size_t k = h & (WORDS_SLOTS - 1);; k = (k + 1) & (WORDS_SLOTS - 1)) {
			struct word_slot *sl = &word_table[k];
			if (!sl->word) {
				*sl = (struct word_slot){ list[i], h, (uint8_t) l, bit };
				break;
			}
			if (sl->hash == h && sl->len == l && memcmp(sl->word, list[i], l) == 0) {
				sl->lists |= bit;
				break;
			}
		}
	}
}

static void word_table_build(void)
{
	word_table_add(code_words, ELEMENTSOF(code_words), IN_CODE);
	word_table_add(math_words, ELEMENTSOF(math_words), IN_MATH);
	word_table_add(multi_words, ELEMENTSOF(multi_words), IN_MULTI);
}

/* Which lists hold the (lower-cased) word: IN_* bits. */
static unsigned word_lists(const unsigned char *w, size_t n)
{
	uint32_t h = word_hash(w, n);

	for (size_t k = h & (WORDS_SLOTS - 1);; k = (k + 1) & (WORDS_SLOTS - 1)) {
		const struct word_slot *sl = &word_table[k];
		if (!sl->word)
			return 0;
		if (sl->hash == h && sl->len == n && memcmp(sl->word, w, n) == 0)
			return sl->lists;
	}
}

/* The end of the run of S_RUN bytes from j. */
static inline size_t run_end(const unsigned char *p, size_t len, size_t j)
{
	return byte_class_run_end(p, len, j, sig_class, S_RUN);
}

/*
 * One pass over the bytes. Difficulty is a logistic of a few counted signals: the weights
 * make a one-line factual question about 0.1-0.2, a paragraph with several questions or a
 * multi-step instruction about 0.5, and long code or maths with several asks above 0.8.
 * Context need: about one token per 4-5 bytes of an English word (one per started 5 bytes),
 * one per punctuation byte, one per CJK-range code point (lead byte >= 0xE3).
 */
void classify_signals(const char *text, size_t len, struct classify_result *ret)
{
	const unsigned char *p = (const unsigned char *) text;
	size_t words = 0, questions = 0, code = 0, math = 0, multi = 0, lines = 1, tokens = 0;
	size_t i = 0;
	bool line_start = true;

	memset(ret, 0, offsetof(struct classify_result, difficulty));
	(void) pthread_once(&word_table_once, word_table_build);
	if (!p)
		len = 0;
	while (i < len) {
		unsigned char c = p[i];
		unsigned cl = sig_class[c];

		/* a word first, the commonest case (a CJK lead byte is S_WORD too but counts
		 * as a character, below) */
		if ((cl & (S_WORD | S_CJK)) == S_WORD) {
			/* a numbered item: a multi-part ask */
			if (line_start) {
				line_start = false;
				if (c >= '0' && c <= '9' && i + 1 < len &&
				    (p[i + 1] == '.' || p[i + 1] == ')'))
					multi++;
			}
			size_t j = run_end(p, len, i + 1);
			size_t wl = j - i;
			words++;
			tokens += 1 + (wl - 1) / 5;
			/* only a word whose first two letters and length fit some list entry is
			 * looked up (every entry has two bytes or more) */
			if (wl >= 2 && wl <= 16 &&
			    (word_len_mask[letter_index(c)][letter_index(p[i + 1])] >> wl & 1)) {
				unsigned char w[16];
				for (size_t k = 0; k < wl; k++)
					w[k] = lower(p[i + k]);
				unsigned in = word_lists(w, wl);
				code += (in & IN_CODE) != 0;
				math += (in & IN_MATH) != 0;
				multi += (in & IN_MULTI) != 0;
			}
			/* the space after a word is passed here, not by another turn of the loop */
			i = j < len && p[j] == ' ' ? j + 1 : j;
			continue;
		}
		if (cl & S_SPACE) {
			i++;
			continue;
		}
		if (cl & S_NL) {
			/* a line ending in ; { or } reads as code */
			size_t j = i;
			while (j > 0 && (p[j - 1] == ' ' || p[j - 1] == '\t' || p[j - 1] == '\r'))
				j--;
			if (j > 0 && (p[j - 1] == ';' || p[j - 1] == '{' || p[j - 1] == '}'))
				code++;
			lines++;
			line_start = true;
			i++;
			continue;
		}
		if (line_start) {
			line_start = false;
			/* a bulleted item: a multi-part ask */
			if ((c == '-' || c == '*') && i + 1 < len && p[i + 1] == ' ')
				multi++;
		}
		if (cl & S_CJK) {
			/* CJK and beyond: about a token per code point */
			tokens++;
			i++;
			while (i < len && (p[i] & 0xc0) == 0x80)
				i++;
			continue;
		}
		tokens++;
		switch (c) {
		case '?':
			questions++;
			break;
		case '`':
			if (i + 2 < len && p[i + 1] == '`' && p[i + 2] == '`') {
				code += 3;
				i += 3;
				continue;
			}
			break;
		case '=':
		case '^':
		case '+':
		case '*':
		case '/':
		case '<':
		case '>':
			/* an operator between digits or single letters: maths */
			if (i > 0 && i + 1 < len && (is_word_byte(p[i - 1]) || p[i - 1] == ' ') &&
			    (is_word_byte(p[i + 1]) || p[i + 1] == ' '))
				math++;
			if (c == '=' && i + 1 < len && p[i + 1] == '>')
				code++;
			break;
		case '(':
			if (i + 1 < len && p[i + 1] == ')')
				code++;
			break;
		case '#':
			/* (line_start was cleared above for this byte: only the text's or a line's
			 * very first byte counts) */
			if (i == 0 || p[i - 1] == '\n')
				code++;
			break;
		case '\\':
			math++;
			break;
		default:
			break;
		}
		i++;
	}

	ret->context_tokens = (uint32_t) MIN(tokens, (size_t) UINT32_MAX);
	ret->modality = (code >= 3 && code * 8 >= lines) || code >= 6 ? CLASSIFY_MODALITY_CODE
								  : CLASSIFY_MODALITY_TEXT;
	double len_s = log1p((double) words) / log1p(400.0);
	double z = -2.6 + 2.2 * MIN(len_s, 1.5) + 0.25 * (double) MIN(code, (size_t) 8) +
		   0.3 * (double) MIN(math, (size_t) 6) + 0.35 * (double) MIN(questions, (size_t) 4) +
		   0.25 * (double) MIN(multi, (size_t) 6);
	ret->difficulty = (float) (1.0 / (1.0 + exp(-z)));
}
