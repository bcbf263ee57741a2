/* SPDX-License-Identifier: MIT */
/*
 * bench-util.h: what the molly-bench-* tools share: the monotonic clock and the order of
 * samples for percentiles.
 */
#pragma once

#include <stdint.h>

#include "basic/time-util.h"

/* qsort() order of uint64_t samples. */
static inline int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

	return x < y ? -1 : x > y;
}
