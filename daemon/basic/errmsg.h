/* SPDX-License-Identifier: MIT */
/*
 * errmsg.h: a caller-owned buffer that library code fills with a human-readable
 * reason next to its -errno return, so the edge (a tool's main, a bus handler) can
 * say *what* was wrong ("tensor 'blk.0.attn_q.weight': data offset 123 past end of
 * file (size 100)") without the library logging anything itself.
 */
#pragma once

#include <stdarg.h>
#include <stddef.h>

#include "macro.h"

struct errmsg {
	char text[512];
};

/* Formats into e (if non-NULL) and returns r, so callers can write
 * `return errmsg_set(e, -EINVAL, "...", ...);`. */
_printf_(3, 4) int errmsg_set(struct errmsg *e, int r, const char *fmt, ...);

/* Prepends "prefix: " to the message already in e (if any). Returns r. */
_printf_(3, 4) int errmsg_prefix(struct errmsg *e, int r, const char *fmt, ...);
