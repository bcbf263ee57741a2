/* SPDX-License-Identifier: MIT */
/*
 * ascii-class.h: the byte tests the policy's scanners share (detect.c, credential.c). ASCII
 * only on purpose: bytes >= 0x80 are UTF-8 and count as word bytes, never as letters.
 */
#pragma once

#include <stdbool.h>

static inline bool is_digit(int c)
{
	return c >= '0' && c <= '9';
}
static inline bool is_upper(int c)
{
	return c >= 'A' && c <= 'Z';
}
static inline bool is_lower(int c)
{
	return c >= 'a' && c <= 'z';
}
static inline bool is_alpha(int c)
{
	return is_upper(c) || is_lower(c);
}
static inline bool is_alnum(int c)
{
	return is_alpha(c) || is_digit(c);
}
static inline bool is_hex(int c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
static inline int to_upper(int c)
{
	return is_lower(c) ? c - 32 : c;
}
static inline int to_lower(int c)
{
	return is_upper(c) ? c + 32 : c;
}
/* Part of a word: ASCII alnum, '_' or a UTF-8 byte (accented letters). */
static inline bool is_word(int c)
{
	return is_alnum(c) || c == '_' || c >= 0x80;
}
static inline bool is_b64url(int c)
{
	return is_alnum(c) || c == '-' || c == '_';
}
static inline bool is_space(int c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}
