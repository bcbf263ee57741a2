/* SPDX-License-Identifier: MIT */
/*
 * router-rows.h: the labelled router data of tests/data/router (DOMAIN<TAB>TEXT per line,
 * '#' comments), read by test-classify and test-router, and the classifier the daemon would
 * build from it.
 */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lora/adapter.h"
#include "router/classify.h"

#define MAX_ROWS 512

struct rows {
	char *dom[MAX_ROWS];
	char *text[MAX_ROWS];
	size_t n;
};

static inline void rows_free(struct rows *r)
{
	for (size_t i = 0; i < r->n; i++) {
		free(r->dom[i]);
		free(r->text[i]);
	}
	r->n = 0;
}

/* The rows of tests/data/router/NAME; -ENODATA when it has none. */
static inline int read_rows(const char *name, struct rows *r)
{
	char path[512], line[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/tests/data/router/%s", MOLLY_SOURCE_DIR, name);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	r->n = 0;
	while (fgets(line, sizeof(line), f) && r->n < MAX_ROWS) {
		char *tab = strchr(line, '\t');

		if (line[0] == '#' || !tab)
			continue;
		*tab = 0;
		tab[1 + strcspn(tab + 1, "\n")] = 0;
		r->dom[r->n] = strdup(line);
		r->text[r->n] = strdup(tab + 1);
		r->n++;
	}
	fclose(f);
	return r->n > 0 ? 0 : -ENODATA;
}

static const char *const router_domains[] = { "cooking", "law", "medicine", "code", "finance" };

/* What the daemon builds: one adapter per domain whose metadata carries the domain tag and
 * the exemplars of tests/data/router/FILE. o NULL: the defaults. */
static inline int build_domain_classifier(const char *file, const struct classify_options *o,
					  struct classify_model **ret)
{
	struct rows ex = { 0 };
	_cleanup_(classify_set_freep) struct classify_set *s = NULL;
	struct errmsg e = { { 0 } };
	int r = read_rows(file, &ex);

	if (r < 0)
		return r;
	r = classify_set_new(&s);
	for (size_t d = 0; r >= 0 && d < ELEMENTSOF(router_domains); d++) {
		char *dl[1] = { (char *) router_domains[d] };
		char *exs[MAX_ROWS];
		size_t n = 0;

		for (size_t i = 0; i < ex.n; i++)
			if (strcmp(ex.dom[i], router_domains[d]) == 0)
				exs[n++] = ex.text[i];
		struct lora_adapter_meta meta = { .name = (char *) router_domains[d], .domains = dl,
						  .n_domains = 1, .exemplars = exs,
						  .n_exemplars = n };
		r = classify_set_add_adapter(s, &meta, &e);
	}
	if (r >= 0)
		r = classify_build(s, o, ret, &e);
	if (r < 0)
		fprintf(stderr, "  build: %s\n", e.text);
	rows_free(&ex);
	return r;
}
