/* SPDX-License-Identifier: MIT */
/*
 * array.h: room in a growable array. ARRAY_RESERVE(p, cap, need, first) makes p (any pointer
 * to its items, realloc'd) hold at least need items, doubling its capacity cap from first;
 * cap may be any unsigned integer type, and a capacity beyond what it can count fails with
 * -E2BIG, one whose bytes would not fit size_t with -ENOMEM, as does realloc. On failure p and
 * cap are as they were. Returns 0 or that negative errno.
 */
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* limit: the largest capacity the caller's counter can hold. */
static inline int array_reserve(void **p, size_t *cap, size_t need, size_t elem, size_t first,
				size_t limit)
{
	size_t c = *cap ? *cap : first;
	void *q;

	if (need <= *cap)
		return 0;
	if (need > limit)
		return -E2BIG;
	while (c < need)
		c = c > limit / 2 ? limit : c * 2;
	if (c > SIZE_MAX / elem)
		return -ENOMEM;
	q = realloc(*p, c * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

#define ARRAY_RESERVE(p, cap, need, first)                                                         \
	({                                                                                         \
		size_t cap_ = (cap);                                                               \
		int r_ = array_reserve((void **) &(p), &cap_, (need), sizeof(*(p)), (first),       \
				       (size_t) (__typeof__(cap)) -1);                             \
		if (r_ == 0)                                                                       \
			(cap) = (__typeof__(cap)) cap_;                                            \
		r_;                                                                                \
	})
