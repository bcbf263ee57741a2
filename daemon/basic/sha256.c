/* SPDX-License-Identifier: MIT */
/*
 * sha256.c: SHA-256 as specified in FIPS 180-4, section 6.2 (written from the standard).
 */
#include <errno.h>
#include <string.h>

#include <cpuid.h>
#include <stdbool.h>
#include <stdlib.h>

#include "macro.h"
#include "sha256-private.h"
#include "sha256.h"

const uint32_t sha256_K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t s[8], const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, h;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t) p[4 * i] << 24 | (uint32_t) p[4 * i + 1] << 16 |
		       (uint32_t) p[4 * i + 2] << 8 | (uint32_t) p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
			      sha256_K[i] + w[i];
		uint32_t t2 =
			(rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));

		h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
	}
	s[0] += a, s[1] += b, s[2] += c, s[3] += d, s[4] += e, s[5] += f, s[6] += g, s[7] += h;
}

static void blocks_scalar(uint32_t s[8], const uint8_t *p, size_t n_blocks)
{
	for (; n_blocks > 0; n_blocks--, p += 64)
		compress(s, p);
}

/* Chosen once: the SHA extensions where cpuid has them (and MOLLY_SHA256=scalar does not say
 * otherwise), else the portable compression. Tests compare both on the same inputs. */
static void (*blocks_fn)(uint32_t s[8], const uint8_t *p, size_t n_blocks);

static bool cpu_has_sha_ni(void)
{
	unsigned eax, ebx, ecx, edx;

	if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(ebx & bit_SHA))
		return false;
	/* the schedule also uses SSSE3/SSE4.1 shuffles and blends */
	return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_SSSE3) && (ecx & bit_SSE4_1);
}

static void blocks(uint32_t s[8], const uint8_t *p, size_t n_blocks)
{
	void (*fn)(uint32_t *, const uint8_t *, size_t) = __atomic_load_n(&blocks_fn, __ATOMIC_RELAXED);

	if (_unlikely_(!fn)) {
		const char *force = getenv("MOLLY_SHA256");

		fn = cpu_has_sha_ni() && !(force && strcmp(force, "scalar") == 0) ? sha256_blocks_ni
										 : blocks_scalar;
		__atomic_store_n(&blocks_fn, fn, __ATOMIC_RELAXED);
	}
	fn(s, p, n_blocks);
}

const char *sha256_impl(void)
{
	uint32_t s[8] = { 0 };

	blocks(s, NULL, 0); /* makes the choice */
	return blocks_fn == sha256_blocks_ni ? "sha-ni" : "scalar";
}

bool sha256_have_ni(void)
{
	return cpu_has_sha_ni();
}

int sha256_use(const char *impl)
{
	if (strcmp(impl, "scalar") == 0)
		__atomic_store_n(&blocks_fn, blocks_scalar, __ATOMIC_RELAXED);
	else if (strcmp(impl, "sha-ni") == 0 && cpu_has_sha_ni())
		__atomic_store_n(&blocks_fn, sha256_blocks_ni, __ATOMIC_RELAXED);
	else
		return strcmp(impl, "sha-ni") == 0 ? -EOPNOTSUPP : -EINVAL;
	return 0;
}

void sha256_init(struct sha256_ctx *c)
{
	static const uint32_t H0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };

	memcpy(c->state, H0, sizeof(H0));
	c->n_bytes = 0;
	c->n_buf = 0;
}

void sha256_update(struct sha256_ctx *c, const void *data, size_t n)
{
	const uint8_t *p = data;

	c->n_bytes += n;
	if (c->n_buf > 0) {
		size_t k = (64 - c->n_buf < n ? 64 - c->n_buf : n);

		memcpy(c->buf + c->n_buf, p, k);
		c->n_buf += k;
		p += k;
		n -= k;
		if (c->n_buf < 64)
			return;
		blocks(c->state, c->buf, 1);
		c->n_buf = 0;
	}
	if (n >= 64) {
		blocks(c->state, p, n / 64);
		p += n / 64 * 64;
		n %= 64;
	}
	if (n > 0) {
		memcpy(c->buf, p, n);
		c->n_buf = n;
	}
}

void sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_DIGEST_SIZE])
{
	uint64_t bits = c->n_bytes * 8;
	uint8_t pad[72] = { 0x80 };
	/* 0x80, zeros up to 56 mod 64, then the 64-bit big-endian bit length */
	size_t n_pad = (c->n_buf < 56 ? 56 : 120) - c->n_buf;
	uint8_t len[8];

	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t) (bits >> (56 - 8 * i));
	sha256_update(c, pad, n_pad);
	sha256_update(c, len, 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t) (c->state[i] >> 24);
		out[4 * i + 1] = (uint8_t) (c->state[i] >> 16);
		out[4 * i + 2] = (uint8_t) (c->state[i] >> 8);
		out[4 * i + 3] = (uint8_t) c->state[i];
	}
}

void sha256(const void *data, size_t n, uint8_t out[SHA256_DIGEST_SIZE])
{
	struct sha256_ctx c;

	sha256_init(&c);
	sha256_update(&c, data, n);
	sha256_final(&c, out);
}

void sha256_update_u32(struct sha256_ctx *c, uint32_t v)
{
	uint8_t b[4];

	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t) (v >> (8 * i));
	sha256_update(c, b, sizeof(b));
}

void sha256_update_u64(struct sha256_ctx *c, uint64_t v)
{
	uint8_t b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t) (v >> (8 * i));
	sha256_update(c, b, sizeof(b));
}

void sha256_update_str(struct sha256_ctx *c, const void *s, size_t n)
{
	sha256_update_u64(c, n);
	sha256_update(c, s, n);
}

char *sha256_hex(const uint8_t digest[SHA256_DIGEST_SIZE], char out[SHA256_HEX_SIZE])
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < SHA256_DIGEST_SIZE; i++) {
		out[2 * i] = hex[digest[i] >> 4];
		out[2 * i + 1] = hex[digest[i] & 15];
	}
	out[64] = 0;
	return out;
}

static int hex_digit(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

int sha256_from_hex(const char *hex, uint8_t digest[SHA256_DIGEST_SIZE])
{
	uint8_t d[SHA256_DIGEST_SIZE];

	for (int i = 0; i < SHA256_DIGEST_SIZE; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hi < 0 ? -1 : hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		d[i] = (uint8_t) (hi << 4 | lo);
	}
	if (hex[64] != 0)
		return -EINVAL;
	memcpy(digest, d, sizeof(d));
	return 0;
}
