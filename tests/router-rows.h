/* SPDX-License-Identifier: MIT */
/*
 * router-rows.h: the labelled router data of tests/data/router (DOMAIN<TAB>TEXT per line,
 * '#' comments), read by test-classify and test-router.
 */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
