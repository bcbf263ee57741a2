/* SPDX-License-Identifier: MIT */
/*
 * keys.h: API keys of the HTTP front.
 *
 * A key is "molly-" followed by the unpadded base64url of 32 random bytes (getrandom), 49
 * characters in all. Only its hash is stored: KeyHash=sha256:<64 hex digits> in the member's
 * [Member NAME] section. A presented key is hashed and compared with every member's hash in
 * constant time, without stopping at the first match, so the time taken says nothing about
 * which member (if any) matched.
 *
 * Scopes come from the member: Models= (names, "base:adapter" pairs or "*": checked by the
 * manager on submit) and Admin= (the adapter endpoints).
 *
 * Threading: no shared state; safe from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/macro.h"

struct config;
struct config_member;

#define KEYS_PREFIX           "molly-"
#define KEYS_RANDOM_BYTES     32
#define KEYS_KEY_SIZE         50 /* "molly-" + 43 base64url characters + NUL */
#define KEYS_HASH_STRING_SIZE 72 /* "sha256:" + 64 hex + NUL */

/* A new random key into ret (KEYS_KEY_SIZE bytes). -errno when getrandom fails. */
int keys_generate(char ret[KEYS_KEY_SIZE]);

/* "sha256:<hex>" of key, as KeyHash= holds it. */
void keys_hash_string(const char *key, size_t len, char ret[KEYS_HASH_STRING_SIZE]);

/* Compares n bytes in time that depends only on n. */
bool keys_equal_ct(const void *a, const void *b, size_t n);

/*
 * The key in an "Authorization: Bearer KEY" header value (the scheme is case-insensitive,
 * surrounding blanks are ignored). 0 with *ret_key pointing into header and *ret_len, or
 * -EINVAL when the header is not a Bearer credential.
 */
int keys_parse_bearer(const char *header, const char **ret_key, size_t *ret_len);

/* The member whose KeyHash= matches key, or NULL. Every member with a key is compared. */
const struct config_member *keys_find_member(const struct config *c, const char *key, size_t len);

/* Whether any member is configured (then requests need a key or a member's uid). */
bool keys_required(const struct config *c);
