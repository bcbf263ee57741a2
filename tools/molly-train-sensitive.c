/* SPDX-License-Identifier: MIT */
/*
 * molly-train-sensitive: trains the special-category layer's models (daemon/policy/
 * sensitive.h) from the labelled corpus and writes them as C (daemon/policy/sensitive-model.c),
 * so the program carries them and needs nothing at run time.
 *
 *   molly-train-sensitive [-o OUT.c] [-e HELDOUT.tsv] [-v] TRAIN.tsv...
 *
 * Training is deterministic (fixed seed, fixed order; same corpus → same file):
 *  1. every item is cut into chunks the way sensitive_scan() cuts it, with the same features;
 *  2. binary logistic regression, personal vs public, AdaGrad with L2, over the chunks
 *     sensitive_scan() would score. A public item's chunks are all negatives; a special
 *     item is one positive, its highest-scoring chunk (multiple-instance learning: "I have
 *     diabetes. Can you suggest a diet?" is personal because of its first sentence); the
 *     weights are the mean of those after each of the last half of the epochs;
 *  3. calibration: the same training on a deterministic 80 % of the items, then Platt
 *     scaling (a, b) fitted on the other 20 %; the final weights are trained on all items;
 *  4. the category model: multinomial logistic regression over the same features, on each
 *     special item's highest-scoring chunk;
 *  5. the weights are quantised (binary: int16, categories: int8) and written out.
 * With -e it prints precision and recall per category and language on the held-out file,
 * with the quantised model, through sensitive_scan_model() (what the test checks).
 *
 * make: cmake --build build/release --target molly-train-sensitive &&
 *   build/release/bin/molly-train-sensitive -o daemon/policy/sensitive-model.c \
 *     -e tests/data/sensitive-corpus/heldout.tsv tests/data/sensitive-corpus/generated.tsv \
 *     tests/data/sensitive-corpus/handwritten-train.tsv
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/sensitive-corpus.h"
#include "basic/macro.h"
#include "policy/sensitive.h"

#define K SENSITIVE_CATEGORY_COUNT_
#define BIN_N (1u << SENSITIVE_BIN_BITS)
#define CAT_N (1u << SENSITIVE_CAT_BITS)

#define EPOCHS 20
#define CAT_EPOCHS 20
#define LEARNING_RATE 0.3f
#define L2 1e-5f

struct chunk_feats {
	uint32_t *h;
	uint32_t n, n_ngram;
	bool gate;
};

struct item_feats {
	struct chunk_feats *c;
	size_t n;
	int label;
	bool calib; /* in the calibration split */
};

struct collect {
	struct item_feats *it;
	int err;
};

static void collect_chunk(void *userdata, size_t start, size_t end,
			  const struct sensitive_features *f)
{
	struct collect *x = userdata;
	struct item_feats *it = x->it;
	struct chunk_feats *v = realloc(it->c, (it->n + 1) * sizeof(*v));

	if (!v) {
		x->err = -ENOMEM;
		return;
	}
	it->c = v;
	v[it->n] = (struct chunk_feats){ .h = malloc((f->n ? f->n : 1) * sizeof(uint32_t)),
					 .n = (uint32_t) f->n, .n_ngram = (uint32_t) f->n_ngram,
					 .gate = f->gate };
	if (!v[it->n].h) {
		x->err = -ENOMEM;
		return;
	}
	memcpy(v[it->n].h, f->h, f->n * sizeof(uint32_t));
	it->n++;
}

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

/* ---- binary model ---- */

struct bin {
	float w[BIN_N];
	float g2[BIN_N];
	float bias, bias_g2;
	float avg_w[BIN_N]; /* the mean of the weights after each epoch of the second half */
	float avg_bias;
};

static float bin_logit(const struct bin *b, const struct chunk_feats *c)
{
	float a = 0, s = 0;

	for (uint32_t i = 0; i < c->n_ngram; i++)
		a += b->w[c->h[i] & (BIN_N - 1)];
	for (uint32_t i = c->n_ngram; i < c->n; i++)
		s += b->w[c->h[i] & (BIN_N - 1)];
	return b->bias + (c->n_ngram ? a / sqrtf((float) c->n_ngram) : 0) + s;
}

static void bin_step(struct bin *b, const struct chunk_feats *c, float y, float weight)
{
	float p = 1.0f / (1.0f + expf(-bin_logit(b, c)));
	float g = (p - y) * weight, sc = c->n_ngram ? 1.0f / sqrtf((float) c->n_ngram) : 0;

	b->bias_g2 += g * g;
	b->bias -= LEARNING_RATE * g / sqrtf(b->bias_g2 + 1e-8f);
	for (uint32_t i = 0; i < c->n; i++) {
		uint32_t f = c->h[i] & (BIN_N - 1);
		float gi = g * (i < c->n_ngram ? sc : 1.0f) + L2 * b->w[f];
		b->g2[f] += gi * gi;
		b->w[f] -= LEARNING_RATE * gi / sqrtf(b->g2[f] + 1e-8f);
	}
}

/* The chunk of a special item to train on: the gated one scoring highest (any chunk when
 * none is gated). */
static const struct chunk_feats *best_chunk(const struct bin *b, const struct item_feats *it)
{
	const struct chunk_feats *best = NULL;
	float bl = -INFINITY;

	for (int pass = 0; pass < 2 && !best; pass++)
		for (size_t k = 0; k < it->n; k++) {
			if (pass == 0 && !it->c[k].gate)
				continue;
			float l = bin_logit(b, &it->c[k]);
			if (!best || l > bl) {
				best = &it->c[k];
				bl = l;
			}
		}
	return best;
}

static void bin_train(struct bin *b, const struct item_feats *items, size_t n, bool use_calib)
{
	size_t *order = malloc(n * sizeof(*order)), m = 0, n_pos = 0, n_neg = 0;
	uint64_t rng = 0x5eed5eedull;
	float w_pos, w_neg;

	memset(b, 0, sizeof(*b));
	if (!order)
		return;
	for (size_t i = 0; i < n; i++)
		if (use_calib || !items[i].calib) {
			order[m++] = i;
			if (items[i].label == CORPUS_PUBLIC)
				for (size_t k = 0; k < items[i].n; k++)
					n_neg += items[i].c[k].gate;
			else
				n_pos++;
		}
	/* balance the classes: each side weighs as much as the other in total */
	w_pos = n_pos ? 0.5f * (float) (n_pos + n_neg) / (float) n_pos : 1;
	w_neg = n_neg ? 0.5f * (float) (n_pos + n_neg) / (float) n_neg : 1;
	for (int ep = 0; ep < EPOCHS; ep++) {
		shuffle(order, m, &rng);
		for (size_t ii = 0; ii < m; ii++) {
			const struct item_feats *it = &items[order[ii]];
			if (it->label == CORPUS_PUBLIC) {
				for (size_t k = 0; k < it->n; k++)
					if (it->c[k].gate)
						bin_step(b, &it->c[k], 0.0f, w_neg);
			} else {
				const struct chunk_feats *c = best_chunk(b, it);
				if (c)
					bin_step(b, c, 1.0f, w_pos);
			}
		}
		/* Averaging the second half's epochs: the last epoch alone swings with the order
		 * of the last few hundred examples. */
		if (ep >= EPOCHS / 2) {
			for (size_t i = 0; i < BIN_N; i++)
				b->avg_w[i] += b->w[i] / (float) (EPOCHS - EPOCHS / 2);
			b->avg_bias += b->bias / (float) (EPOCHS - EPOCHS / 2);
		}
	}
	memcpy(b->w, b->avg_w, sizeof(b->w));
	b->bias = b->avg_bias;
	free(order);
}

/* Platt scaling on the calibration split: minimise the log loss of sigmoid(a z + b) by
 * gradient descent (two parameters, convex). */
static void platt_fit(const struct bin *b, const struct item_feats *items, size_t n, float *ra,
		      float *rb)
{
	size_t m = 0, cap = 1024;
	float *z = malloc(cap * sizeof(float)), *y = malloc(cap * sizeof(float));
	double a = 1, bb = 0;

	for (size_t i = 0; i < n && z && y; i++) {
		const struct item_feats *it = &items[i];
		if (!it->calib)
			continue;
		for (size_t k = 0; k < it->n; k++) {
			const struct chunk_feats *c = &it->c[k];
			if (it->label != CORPUS_PUBLIC && c != best_chunk(b, it))
				continue;
			if (it->label == CORPUS_PUBLIC && !c->gate)
				continue;
			if (m == cap) {
				cap *= 2;
				z = realloc(z, cap * sizeof(float));
				y = realloc(y, cap * sizeof(float));
				if (!z || !y)
					break;
			}
			z[m] = bin_logit(b, c);
			y[m] = it->label != CORPUS_PUBLIC;
			m++;
		}
	}
	for (int it = 0; it < 3000 && m && z && y; it++) {
		double ga = 0, gb = 0;
		for (size_t i = 0; i < m; i++) {
			double p = 1.0 / (1.0 + exp(-(a * z[i] + bb)));
			ga += (p - y[i]) * z[i];
			gb += p - y[i];
		}
		a -= 0.5 * ga / (double) m;
		bb -= 0.5 * gb / (double) m;
	}
	*ra = (float) a;
	*rb = (float) bb;
	free(z);
	free(y);
}

/* ---- category model ---- */

struct cat {
	float w[CAT_N * K];
	float g2[CAT_N * K];
	float bias[K], bias_g2[K];
};

static void cat_train(struct cat *cm, const struct bin *b, const struct item_feats *items,
		      size_t n)
{
	size_t *order = malloc(n * sizeof(*order)), m = 0;
	uint64_t rng = 0xca7ca7ull;

	memset(cm, 0, sizeof(*cm));
	if (!order)
		return;
	for (size_t i = 0; i < n; i++)
		if (items[i].label >= 0) /* (CORPUS_PERSONAL: no category to learn) */
			order[m++] = i;
	for (int ep = 0; ep < CAT_EPOCHS; ep++) {
		shuffle(order, m, &rng);
		for (size_t ii = 0; ii < m; ii++) {
			const struct item_feats *it = &items[order[ii]];
			const struct chunk_feats *c = best_chunk(b, it);
			float z[K], p[K], mx = -INFINITY, sum = 0;
			float sc = c->n_ngram ? 1.0f / sqrtf((float) c->n_ngram) : 0;

			for (int k = 0; k < K; k++)
				z[k] = 0;
			for (uint32_t i = 0; i < c->n; i++) {
				const float *row = cm->w + (size_t) (c->h[i] & (CAT_N - 1)) * K;
				float s = i < c->n_ngram ? sc : 1.0f;
				for (int k = 0; k < K; k++)
					z[k] += row[k] * s;
			}
			for (int k = 0; k < K; k++) {
				z[k] += cm->bias[k];
				mx = MAX(mx, z[k]);
			}
			for (int k = 0; k < K; k++) {
				p[k] = expf(z[k] - mx);
				sum += p[k];
			}
			for (int k = 0; k < K; k++) {
				float g = p[k] / sum - (k == it->label ? 1.0f : 0.0f);
				cm->bias_g2[k] += g * g;
				cm->bias[k] -= LEARNING_RATE * g / sqrtf(cm->bias_g2[k] + 1e-8f);
				for (uint32_t i = 0; i < c->n; i++) {
					size_t f = (size_t) (c->h[i] & (CAT_N - 1)) * K + (size_t) k;
					float gi = g * (i < c->n_ngram ? sc : 1.0f) + L2 * cm->w[f];
					cm->g2[f] += gi * gi;
					cm->w[f] -= LEARNING_RATE * gi / sqrtf(cm->g2[f] + 1e-8f);
				}
			}
		}
	}
	free(order);
}

/* ---- output ---- */

static int16_t q_bin[BIN_N];
static int8_t q_cat[CAT_N * K];

static void quantise(const struct bin *b, const struct cat *cm, struct sensitive_model *m,
		     float pa, float pb)
{
	float mb = 0, mc = 0;

	for (size_t i = 0; i < BIN_N; i++)
		mb = MAX(mb, fabsf(b->w[i]));
	for (size_t i = 0; i < (size_t) CAT_N * K; i++)
		mc = MAX(mc, fabsf(cm->w[i]));
	mb = mb > 0 ? mb / 32767.0f : 1;
	mc = mc > 0 ? mc / 127.0f : 1;
	for (size_t i = 0; i < BIN_N; i++)
		q_bin[i] = (int16_t) lrintf(b->w[i] / mb);
	for (size_t i = 0; i < (size_t) CAT_N * K; i++)
		q_cat[i] = (int8_t) lrintf(cm->w[i] / mc);
	*m = (struct sensitive_model){ .bin_w = q_bin, .bin_scale = mb, .bin_bias = b->bias,
				       .platt_a = pa, .platt_b = pb, .cat_w = q_cat,
				       .cat_scale = mc };
	for (int k = 0; k < K; k++)
		m->cat_bias[k] = cm->bias[k];
}

static int write_model(const char *path, const struct sensitive_model *m, size_t n_items,
		       char **inputs, int n_inputs)
{
	FILE *f = fopen(path, "we");

	if (!f)
		return -errno;
	fprintf(f, "/* SPDX-License-Identifier: MIT */\n"
		   "/* Generated by tools/molly-train-sensitive from %zu items of", n_items);
	for (int i = 0; i < n_inputs; i++) {
		const char *b = strstr(inputs[i], "tests/data/");
		fprintf(f, " %s", b ? b : inputs[i]);
	}
	fprintf(f, "; do not edit. */\n#include \"sensitive.h\"\n\n");
	fprintf(f, "static const int16_t bin_w[%u] = {", BIN_N);
	for (size_t i = 0; i < BIN_N; i++)
		fprintf(f, "%s%d,", i % 16 ? "" : "\n", q_bin[i]);
	fprintf(f, "\n};\n\nstatic const int8_t cat_w[%u] = {", CAT_N * K);
	for (size_t i = 0; i < (size_t) CAT_N * K; i++)
		fprintf(f, "%s%d,", i % 32 ? "" : "\n", q_cat[i]);
	fprintf(f, "\n};\n\nconst struct sensitive_model sensitive_builtin_model = {\n"
		   "\t.bin_w = bin_w,\n\t.bin_scale = %.9gf,\n\t.bin_bias = %.9gf,\n"
		   "\t.platt_a = %.9gf,\n\t.platt_b = %.9gf,\n\t.cat_w = cat_w,\n"
		   "\t.cat_scale = %.9gf,\n\t.cat_bias = {",
		m->bin_scale, m->bin_bias, m->platt_a, m->platt_b, m->cat_scale);
	for (int k = 0; k < K; k++)
		fprintf(f, "%s%.9gf", k ? ", " : " ", m->cat_bias[k]);
	fprintf(f, " },\n};\n");
	if (fclose(f) != 0)
		return -errno;
	return 0;
}

static uint32_t fnv(const char *s, size_t n)
{
	uint32_t h = 0x811c9dc5u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char) s[i]) * 0x01000193u;
	return h;
}

int main(int argc, char **argv)
{
	const char *out = NULL, *heldout = NULL;
	bool verbose = false;
	struct corpus c = { 0 };
	static struct bin b;
	static struct cat cm;
	struct item_feats *items;
	struct sensitive_model m;
	float pa, pb;
	int opt, r;

	while ((opt = getopt(argc, argv, "o:e:v")) != -1) {
		switch (opt) {
		case 'o':
			out = optarg;
			break;
		case 'e':
			heldout = optarg;
			break;
		case 'v':
			verbose = true;
			break;
		default:
			fprintf(stderr, "usage: %s [-o OUT.c] [-e HELDOUT.tsv] [-v] TRAIN.tsv...\n",
				argv[0]);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "%s: no training files\n", argv[0]);
		return 2;
	}
	for (int i = optind; i < argc; i++)
		if ((r = corpus_load(&c, argv[i])) < 0) {
			fprintf(stderr, "%s: %s: %s\n", argv[0], argv[i], strerror(-r));
			return 1;
		}
	items = calloc(c.n, sizeof(*items));
	if (!items)
		return 1;
	for (size_t i = 0; i < c.n; i++) {
		struct collect x = { &items[i], 0 };
		items[i].label = c.v[i].label;
		/* a fixed fifth of the items, by a hash of the text */
		items[i].calib = fnv(c.v[i].text, c.v[i].len) % 5 == 0;
		sensitive_foreach_chunk(c.v[i].text, c.v[i].len, collect_chunk, &x);
		if (x.err < 0)
			return 1;
	}
	bin_train(&b, items, c.n, false);
	platt_fit(&b, items, c.n, &pa, &pb);
	bin_train(&b, items, c.n, true);
	cat_train(&cm, &b, items, c.n);
	quantise(&b, &cm, &m, pa, pb);
	fprintf(stderr, "%zu training items; Platt a=%.3f b=%.3f\n", c.n, pa, pb);
	{
		struct corpus_eval e;
		corpus_evaluate(&c, &m, &e, NULL);
		fprintf(stderr, "on the training items:\n");
		corpus_print(&e, stderr);
	}
	if (heldout) {
		struct corpus h = { 0 };
		struct corpus_eval e;
		if ((r = corpus_load(&h, heldout)) < 0) {
			fprintf(stderr, "%s: %s: %s\n", argv[0], heldout, strerror(-r));
			return 1;
		}
		corpus_evaluate(&h, &m, &e, verbose ? stderr : NULL);
		fprintf(stderr, "held out (%s, %zu items):\n", heldout, h.n);
		corpus_print(&e, stderr);
		corpus_done(&h);
	}
	if (out && (r = write_model(out, &m, c.n, argv + optind, argc - optind)) < 0) {
		fprintf(stderr, "%s: %s: %s\n", argv[0], out, strerror(-r));
		return 1;
	}
	for (size_t i = 0; i < c.n; i++) {
		for (size_t k = 0; k < items[i].n; k++)
			free(items[i].c[k].h);
		free(items[i].c);
	}
	free(items);
	corpus_done(&c);
	return 0;
}
