/* SPDX-License-Identifier: MIT */
/*
 * byte-class.h: scanning text with a 256-entry class table (one bit per property of a byte),
 * as the policy's detectors and the router's signals pass do.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* The end of the run of bytes from i whose class has a bit of mask: four bytes a step with
 * one bounds test (words are short: the common case ends within the first four), then byte
 * by byte within four bytes of len. */
static inline size_t byte_class_run_end(const unsigned char *p, size_t len, size_t i,
					const uint8_t cls[256], uint8_t mask)
{
	for (; i + 4 <= len; i += 4) {
		if (!(cls[p[i]] & mask))
			return i;
		if (!(cls[p[i + 1]] & mask))
			return i + 1;
		if (!(cls[p[i + 2]] & mask))
			return i + 2;
		if (!(cls[p[i + 3]] & mask))
			return i + 3;
	}
	while (i < len && (cls[p[i]] & mask))
		i++;
	return i;
}
