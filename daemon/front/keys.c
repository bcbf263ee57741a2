/* SPDX-License-Identifier: MIT */
/*
 * keys.c: API key generation, hashing and constant-time lookup (see keys.h).
 */
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "basic/sha256.h"
#include "core/config.h"
#include "front/keys.h"

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int keys_generate(char ret[KEYS_KEY_SIZE])
{
	uint8_t rnd[KEYS_RANDOM_BYTES + 1] = { 0 }; /* +1: the last 3-byte group reads a zero pad */
	size_t got = 0, o;

	while (got < KEYS_RANDOM_BYTES) {
		ssize_t n = getrandom(rnd + got, KEYS_RANDOM_BYTES - got, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t) n;
	}
	memcpy(ret, KEYS_PREFIX, strlen(KEYS_PREFIX));
	o = strlen(KEYS_PREFIX);
	/* 32 bytes: 10 whole groups of 3 bytes (4 characters each), then 2 bytes (3 characters,
	 * the last one holding 2 zero bits), without padding */
	for (size_t i = 0; i < KEYS_RANDOM_BYTES; i += 3) {
		size_t left = KEYS_RANDOM_BYTES - i;
		uint32_t v = (uint32_t) rnd[i] << 16 | (uint32_t) rnd[i + 1] << 8 |
			     (uint32_t) rnd[i + 2]; /* rnd[32] is the zero pad */
		size_t chars = left >= 3 ? 4 : left + 1;

		for (size_t k = 0; k < chars; k++)
			ret[o++] = b64url[(v >> (18 - 6 * k)) & 63];
	}
	ret[o] = '\0';
	explicit_bzero(rnd, sizeof(rnd));
	return 0;
}

void keys_hash_string(const char *key, size_t len, char ret[KEYS_HASH_STRING_SIZE])
{
	uint8_t d[SHA256_DIGEST_SIZE];
	char hex[SHA256_HEX_SIZE];

	sha256(key, len, d);
	sha256_hex(d, hex);
	memcpy(ret, "sha256:", 7);
	memcpy(ret + 7, hex, SHA256_HEX_SIZE);
}

bool keys_equal_ct(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t diff = 0;

	for (size_t i = 0; i < n; i++)
		diff |= x[i] ^ y[i];
	return diff == 0;
}

int keys_parse_bearer(const char *header, const char **ret_key, size_t *ret_len)
{
	const char *p = header, *end;

	if (!header)
		return -EINVAL;
	p += strspn(p, " \t");
	if (strncasecmp(p, "Bearer", 6) != 0 || (p[6] != ' ' && p[6] != '\t'))
		return -EINVAL;
	p += 6;
	p += strspn(p, " \t");
	end = p + strlen(p);
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if (end == p)
		return -EINVAL;
	*ret_key = p;
	*ret_len = (size_t) (end - p);
	return 0;
}

const struct config_member *keys_find_member(const struct config *c, const char *key, size_t len)
{
	const struct config_member *found = NULL;
	uint8_t d[SHA256_DIGEST_SIZE];

	if (!c || !key)
		return NULL;
	sha256(key, len, d);
	for (size_t i = 0; i < c->n_members; i++) {
		const struct config_member *m = &c->members[i];
		/* no early exit and no branch on the comparison's result except the select */
		bool eq = m->has_key_hash && keys_equal_ct(d, m->key_hash, sizeof(d));

		if (eq && !found)
			found = m;
	}
	explicit_bzero(d, sizeof(d));
	return found;
}

bool keys_required(const struct config *c)
{
	return c && c->n_members > 0;
}
