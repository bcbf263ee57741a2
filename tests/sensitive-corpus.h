/* SPDX-License-Identifier: MIT */
/*
 * sensitive-corpus.h: the labelled corpus of the special-category layer
 * (the .tsv files of tests/data/sensitive-corpus: LABEL<TAB>LANG<TAB>TEXT, '#' comments, "\n" for a
 * newline in TEXT) and its evaluation, shared by test-sensitive and
 * tools/molly-train-sensitive.
 *
 * An item counts as flagged when the layer reports any finding for it. Per category:
 * recall = items of the category with a finding of that category / items of the category;
 * precision = of the items with a finding of category c, those labelled c. "personal
 * recall" counts a special item flagged with any category (the class is what the policy
 * acts on); "kept public" is the share of public items with no finding.
 */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/sensitive.h"

#define CORPUS_PUBLIC (-1)
/* "personal": special, its category not given (trains the personal/public model only) */
#define CORPUS_PERSONAL (-2)
#define CORPUS_LANGS 3
static const char *const corpus_lang_names[CORPUS_LANGS] = { "en", "it", "es" };

struct corpus_item {
	int label; /* a category, CORPUS_PUBLIC or CORPUS_PERSONAL */
	int lang;  /* index in corpus_lang_names */
	char *text;
	size_t len;
};

struct corpus {
	struct corpus_item *v;
	size_t n, cap;
};

static inline void corpus_done(struct corpus *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i].text);
	free(c->v);
	*c = (struct corpus){ 0 };
}

/* Appends the items of path to c. -errno, with a message on stderr for a bad line. */
static inline int corpus_load(struct corpus *c, const char *path)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t n;
	int r = 0;

	if (!f)
		return -errno;
	while ((n = getline(&line, &cap, f)) >= 0) {
		char *lab, *lang, *text, *t;
		enum sensitive_category cat;
		struct corpus_item it = { 0 };

		lineno++;
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		if (n == 0 || line[0] == '#')
			continue;
		lab = line;
		lang = strchr(lab, '\t');
		text = lang ? strchr(lang + 1, '\t') : NULL;
		if (!text) {
			fprintf(stderr, "%s:%zu: expected LABEL<TAB>LANG<TAB>TEXT\n", path, lineno);
			r = -EINVAL;
			break;
		}
		*lang++ = 0;
		*text++ = 0;
		if (strcmp(lab, "public") == 0)
			it.label = CORPUS_PUBLIC;
		else if (strcmp(lab, "personal") == 0)
			it.label = CORPUS_PERSONAL;
		else if (sensitive_category_from_name(lab, &cat) == 0)
			it.label = (int) cat;
		else {
			fprintf(stderr, "%s:%zu: unknown label '%s'\n", path, lineno, lab);
			r = -EINVAL;
			break;
		}
		it.lang = -1;
		for (int k = 0; k < CORPUS_LANGS; k++)
			if (strcmp(lang, corpus_lang_names[k]) == 0)
				it.lang = k;
		if (it.lang < 0) {
			fprintf(stderr, "%s:%zu: unknown language '%s'\n", path, lineno, lang);
			r = -EINVAL;
			break;
		}
		it.text = malloc(strlen(text) + 1);
		if (!it.text) {
			r = -ENOMEM;
			break;
		}
		/* "\n" stands for a newline */
		t = it.text;
		for (const char *s = text; *s; s++) {
			if (s[0] == '\\' && s[1] == 'n') {
				*t++ = '\n';
				s++;
			} else
				*t++ = *s;
		}
		*t = 0;
		it.len = (size_t) (t - it.text);
		if (c->n == c->cap) {
			size_t nc = c->cap ? c->cap * 2 : 1024;
			struct corpus_item *v = realloc(c->v, nc * sizeof(*v));
			if (!v) {
				free(it.text);
				r = -ENOMEM;
				break;
			}
			c->v = v;
			c->cap = nc;
		}
		c->v[c->n++] = it;
	}
	free(line);
	fclose(f);
	return r;
}

struct corpus_counts {
	size_t n, hit; /* items; items counted as right (flagged, or kept public) */
};

struct corpus_eval {
	/* per category: labelled, found with the category, flagged with the category */
	size_t cat_n[SENSITIVE_CATEGORY_COUNT_], cat_tp[SENSITIVE_CATEGORY_COUNT_],
		cat_flagged[SENSITIVE_CATEGORY_COUNT_];
	struct corpus_counts personal[CORPUS_LANGS + 1]; /* special items flagged (any cat) */
	struct corpus_counts cat_ok[CORPUS_LANGS + 1];   /* ... with their own category */
	struct corpus_counts kept[CORPUS_LANGS + 1];     /* public items with no finding */
	size_t lang_tp[CORPUS_LANGS], lang_flagged[CORPUS_LANGS];
};

static inline double ratio(size_t a, size_t b)
{
	return b ? (double) a / (double) b : 1.0;
}

/* verbose: print the misses to f (NULL: none). */
static inline void corpus_evaluate(const struct corpus *c, const struct sensitive_model *m,
				   struct corpus_eval *e, FILE *verbose)
{
	*e = (struct corpus_eval){ 0 };
	for (size_t i = 0; i < c->n; i++) {
		const struct corpus_item *it = &c->v[i];
		struct sensitive_result r;
		bool seen[SENSITIVE_CATEGORY_COUNT_] = { false };
		int L = it->lang;

		if (m)
			sensitive_scan_model(m, it->text, it->len, &r);
		else
			sensitive_scan(it->text, it->len, &r);
		for (size_t k = 0; k < r.n; k++)
			seen[r.v[k].category] = true;
		for (int k = 0; k < SENSITIVE_CATEGORY_COUNT_; k++)
			if (seen[k]) {
				e->cat_flagged[k]++;
				e->lang_flagged[L]++;
			}
		if (it->label == CORPUS_PUBLIC) {
			bool ok = r.n == 0;
			e->kept[L].n++;
			e->kept[CORPUS_LANGS].n++;
			e->kept[L].hit += ok;
			e->kept[CORPUS_LANGS].hit += ok;
			if (!ok && verbose)
				fprintf(verbose, "  FP  %-10s %s %.2f  %s\n",
					sensitive_category_name(r.v[0].category),
					corpus_lang_names[L], r.v[0].score, it->text);
			continue;
		}
		bool any = r.n > 0, own;
		if (it->label == CORPUS_PERSONAL) {
			/* no category given: classed personal or not */
			e->personal[L].n++;
			e->personal[CORPUS_LANGS].n++;
			e->personal[L].hit += any;
			e->personal[CORPUS_LANGS].hit += any;
			continue;
		}
		own = seen[it->label];
		e->cat_n[it->label]++;
		e->cat_tp[it->label] += own;
		e->lang_tp[L] += own;
		e->personal[L].n++;
		e->personal[CORPUS_LANGS].n++;
		e->personal[L].hit += any;
		e->personal[CORPUS_LANGS].hit += any;
		e->cat_ok[L].n++;
		e->cat_ok[CORPUS_LANGS].n++;
		e->cat_ok[L].hit += own;
		e->cat_ok[CORPUS_LANGS].hit += own;
		if (!own && verbose)
			fprintf(verbose, "  %-3s %-10s %s %.2f  %s\n", any ? "CAT" : "FN",
				any ? sensitive_category_name(r.v[0].category) : "-",
				corpus_lang_names[L], r.max_score, it->text);
	}
}

static inline void corpus_print(const struct corpus_eval *e, FILE *f)
{
	fprintf(f, "%-12s %6s %9s %7s\n", "category", "items", "precision", "recall");
	for (int k = 0; k < SENSITIVE_CATEGORY_COUNT_; k++)
		fprintf(f, "%-12s %6zu %9.3f %7.3f\n", sensitive_category_name(k), e->cat_n[k],
			ratio(e->cat_tp[k], e->cat_flagged[k]), ratio(e->cat_tp[k], e->cat_n[k]));
	fprintf(f, "%-6s %8s %16s %10s %12s %11s\n", "lang", "special", "personal-recall",
		"cat-recall", "precision", "kept-public");
	for (int L = 0; L <= CORPUS_LANGS; L++) {
		size_t tp = 0, fl = 0;
		if (L < CORPUS_LANGS) {
			tp = e->lang_tp[L];
			fl = e->lang_flagged[L];
		} else
			for (int k = 0; k < CORPUS_LANGS; k++) {
				tp += e->lang_tp[k];
				fl += e->lang_flagged[k];
			}
		fprintf(f, "%-6s %8zu %16.3f %10.3f %12.3f %6.3f (%zu)\n",
			L < CORPUS_LANGS ? corpus_lang_names[L] : "all", e->personal[L].n,
			ratio(e->personal[L].hit, e->personal[L].n),
			ratio(e->cat_ok[L].hit, e->cat_ok[L].n), ratio(tp, fl),
			ratio(e->kept[L].hit, e->kept[L].n), e->kept[L].n);
	}
}
