/* SPDX-License-Identifier: MIT */
/*
 * strbuf.h: a growable byte string, NUL-terminated after every successful append (s is NULL
 * until the first one). Appends fail with -ENOMEM (no memory, or a length that would not fit
 * size_t) and leave the buffer as it was.
 */
#pragma once

#include <stddef.h>

#include "macro.h"

struct strbuf {
	char *s;
	size_t len, cap;
};

int strbuf_add(struct strbuf *b, const void *s, size_t n);
int strbuf_adds(struct strbuf *b, const char *s);
/* Appends each string argument in turn, up to a NULL; stops at the first error. */
int strbuf_cat_(struct strbuf *b, ...);
#define strbuf_cat(b, ...) strbuf_cat_(b, __VA_ARGS__, (const char *) NULL)
_printf_(2, 3) int strbuf_addf(struct strbuf *b, const char *fmt, ...);
/* The string (the caller frees it; NULL if nothing was ever appended); b is empty again. */
char *strbuf_steal(struct strbuf *b);
void strbuf_done(struct strbuf *b);
