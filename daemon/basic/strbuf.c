/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

/* Room for n more bytes and the NUL after them. */
static int reserve(struct strbuf *b, size_t n)
{
	if (n > SIZE_MAX / 2 - b->len) /* the doubling below must not overflow */
		return -ENOMEM;
	if (b->len + n + 1 > b->cap) {
		size_t cap = MAX(MAX(b->cap * 2, b->len + n + 1), (size_t) 64);
		char *p = realloc(b->s, cap);

		if (!p)
			return -ENOMEM;
		b->s = p;
		b->cap = cap;
	}
	return 0;
}

int strbuf_add(struct strbuf *b, const void *s, size_t n)
{
	int r = reserve(b, n);

	if (r < 0)
		return r;
	if (n)
		memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
	return 0;
}

int strbuf_adds(struct strbuf *b, const char *s)
{
	return strbuf_add(b, s, strlen(s));
}

int strbuf_cat_(struct strbuf *b, ...)
{
	va_list ap;
	const char *s;
	int r = 0;

	va_start(ap, b);
	while (r >= 0 && (s = va_arg(ap, const char *)))
		r = strbuf_adds(b, s);
	va_end(ap);
	return r;
}

int strbuf_addf(struct strbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if (reserve(b, (size_t) n) < 0)
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t) n;
	return 0;
}

char *strbuf_steal(struct strbuf *b)
{
	char *s = b->s;

	*b = (struct strbuf){ 0 };
	return s;
}

void strbuf_done(struct strbuf *b)
{
	free(b->s);
	*b = (struct strbuf){ 0 };
}
