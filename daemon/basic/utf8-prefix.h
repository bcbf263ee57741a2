/* SPDX-License-Identifier: MIT */
/*
 * utf8-prefix.h: how much of a string to quote in a message. A piece of a request quoted with
 * "%.*s" must not end inside a UTF-8 character: the message would not be UTF-8, and neither
 * the JSON of an HTTP error nor a D-Bus error may carry it.
 */
#pragma once

/* The bytes of s's first characters that fit in max bytes (all of s when it is shorter). */
static inline int utf8_prefix(const char *s, int max)
{
	int n = 0;

	while (n < max && s[n])
		n++;
	if (s[n])
		while (n > 0 && ((unsigned char) s[n] & 0xC0) == 0x80)
			n--;
	return n;
}
