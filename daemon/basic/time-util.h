/* SPDX-License-Identifier: MIT */
/*
 * time-util.h: the monotonic clock in nanoseconds, for timeouts, deadlines and benchmarks.
 */
#pragma once

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}
