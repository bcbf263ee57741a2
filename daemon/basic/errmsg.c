/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>

#include "errmsg.h"

int errmsg_set(struct errmsg *e, int r, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return r;
	va_start(ap, fmt);
	(void) vsnprintf(e->text, sizeof(e->text), fmt, ap);
	va_end(ap);
	return r;
}

int errmsg_prefix(struct errmsg *e, int r, const char *fmt, ...)
{
	char prefix[256], old[sizeof(e->text)];
	va_list ap;

	if (!e)
		return r;
	va_start(ap, fmt);
	(void) vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, e->text, sizeof(old));
	/* Bounded precisions: the result is cut at the buffer's end by design. */
	(void) snprintf(e->text, sizeof(e->text), "%.255s: %.*s", prefix,
			(int) (sizeof(e->text) - 258), old);
	return r;
}
