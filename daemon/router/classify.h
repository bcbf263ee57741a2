/* SPDX-License-Identifier: MIT */
/*
 * classify.h: the router's capability profile — a lightweight classifier (not the LLM) that
 * maps a prompt to a posterior over the adapters' domains, plus cheap signals the router
 * weighs: expected difficulty, modality (text/code) and context need (a token estimate).
 *
 * Model: multinomial logistic regression over hashed features (lower-cased word unigrams and
 * bigrams, character 4-grams of each word padded with spaces), each occurrence weighted
 * 1/sqrt(number of features in the text). Trained from labelled examples: each adapter's
 * domain tags and exemplars (classify_set_add_adapter) and any extra labelled prompts.
 * Calibrated: a deterministic split of the examples (classify_options.holdout_fraction per
 * domain) is held out of training; a temperature T is fitted on it (minimum negative
 * log-likelihood) and the expected calibration error (ECE, 10 equal-width confidence bins)
 * on it is reported before and after scaling (classify_model_stats). The final weights are
 * then retrained on all examples with the same settings, so the held-out split only
 * calibrates. Training is deterministic: same examples in, same model out.
 *
 * Retraining at run time: build a new model and swap the pointer; a model is immutable after
 * classify_build(), so classify_run() may run from any number of threads on it.
 *
 * Hot path: classify_run() allocates nothing (features are hashed on the fly into a dense
 * weight table); a 2 KiB prompt takes a few to tens of µs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

struct lora_adapter_meta;

#define CLASSIFY_MAX_DOMAINS 64
/* classify_run() takes the domain posterior from at most the first this many bytes of a
 * text (cut back to a space); the signals read all of it. */
#define CLASSIFY_TEXT_MAX 512
#define CLASSIFY_DOMAIN_MAX 64 /* bytes of a domain name, NUL included */

/* ---- the labelled examples a model is built from ---- */

struct classify_set;

int classify_set_new(struct classify_set **ret);
struct classify_set *classify_set_free(struct classify_set *s);
DEFINE_CLEANUP_FUNC(struct classify_set *, classify_set_free, NULL)

/* Adds one labelled text (copied). domain: 1..63 bytes of [A-Za-z0-9._-]; len: bytes of text
 * (text need not be NUL-terminated). -EINVAL with a reason for a bad domain or empty text;
 * -E2BIG past CLASSIFY_MAX_DOMAINS distinct domains. */
int classify_set_add(struct classify_set *s, const char *domain, const char *text, size_t len,
		     struct errmsg *e);
/* Adds an adapter's metadata: every domain tag (as a short example of itself: "cooking",
 * "home_cooking" → "home cooking") and every exemplar, labelled with each of the adapter's
 * domains. An adapter without domains adds nothing (returns 0). */
int classify_set_add_adapter(struct classify_set *s, const struct lora_adapter_meta *meta,
			     struct errmsg *e);
size_t classify_set_size(const struct classify_set *s);

/* ---- the model ---- */

struct classify_options {
	uint32_t feature_bits;    /* hashed feature space 2^bits, 10..20; 0: 16 */
	uint32_t epochs;          /* passes of training; 0: 60 */
	float l2;                 /* L2 regularisation; 0: 1e-4 (negative: none) */
	float holdout_fraction;   /* per domain, for calibration; 0: 0.2; negative: none
				   * (then T = 1 and no ECE is reported) */
	uint64_t seed;            /* shuffling and the split; same seed → same model */
};

struct classify_model;

/* Trains on the examples in s (s may be freed afterwards). At least one domain; -EINVAL with
 * a reason otherwise. With one domain the posterior is always 1 for it. */
int classify_build(const struct classify_set *s, const struct classify_options *o,
		   struct classify_model **ret, struct errmsg *e);
struct classify_model *classify_model_free(struct classify_model *m);
DEFINE_CLEANUP_FUNC(struct classify_model *, classify_model_free, NULL)

size_t classify_n_domains(const struct classify_model *m);
/* Domains are in the order they were first added to the set. NULL when i is out of range. */
const char *classify_domain_name(const struct classify_model *m, size_t i);
/* The index of a domain, or -ENOENT. */
int classify_domain_index(const struct classify_model *m, const char *domain);

struct classify_stats {
	size_t n_train;           /* examples in the calibration fit's training part */
	size_t n_holdout;         /* held-out examples (0: no calibration) */
	float temperature;        /* fitted on the held-out split; 1 without one */
	float holdout_accuracy;   /* argmax correct on the held-out split */
	float ece_raw;            /* ECE on the held-out split before temperature scaling */
	float ece;                /* ... and after (what the router's confidences carry) */
};
void classify_model_stats(const struct classify_model *m, struct classify_stats *ret);

enum classify_modality {
	CLASSIFY_MODALITY_TEXT,
	CLASSIFY_MODALITY_CODE,
};
const char *classify_modality_name(enum classify_modality m); /* "text", "code" */

struct classify_result {
	size_t n_domains;
	float posterior[CLASSIFY_MAX_DOMAINS]; /* by domain index; sums to 1 */
	size_t top;               /* argmax (ties: the lower index) */
	float confidence;         /* posterior[top] */
	float entropy;            /* normalised: H(posterior) / ln(n_domains), 0..1; 0 when
				   * n_domains == 1 */
	bool unknown;             /* nothing in the text was seen in training: posterior
				   * uniform, entropy 1 (n_domains > 1) */
	float difficulty;         /* 0..1 proxy (see classify.c): grows with length, code and
				   * math markers, questions, multi-part instructions */
	enum classify_modality modality;
	uint32_t context_tokens;  /* estimated tokens of the prompt itself */
};

/* Classifies len bytes of text (any bytes; invalid UTF-8 is fine): the domain posterior from
 * its first CLASSIFY_TEXT_MAX bytes, the signals from all of it. Never fails on text: an
 * empty text is "unknown". Allocates nothing. */
void classify_run(const struct classify_model *m, const char *text, size_t len,
		  struct classify_result *ret);

/* Accuracy and ECE (calibrated confidences) of the model on a labelled set; examples whose
 * domain the model does not know count as wrong. -EINVAL for an empty set. */
struct classify_eval {
	size_t n;
	float accuracy;
	float ece;
	float mean_confidence;
};
int classify_evaluate(const struct classify_model *m, const struct classify_set *s,
		      struct classify_eval *ret);

/* The text-only signals without a model (difficulty, modality, context need); the domain
 * part of ret is a single empty domain (n_domains 0). */
void classify_signals(const char *text, size_t len, struct classify_result *ret);
