/* SPDX-License-Identifier: MIT */
/*
 * sha256.h: SHA-256 (FIPS 180-4), streaming and one-shot, plus hex formatting.
 *
 * Used for identities (adapter content hashes, base fingerprints) and integrity checks of
 * Molly's adapter files, so it must be exactly the standard function: tests check it against
 * the FIPS 180 example vectors. Portable C, and the x86 SHA extensions (SHA-NI, sha256-ni.c)
 * chosen at run time where cpuid reports them: adapter blobs are hashed while they stream in
 * from disk (daemon/loader/), at gigabytes a second.
 *
 * Threading: a context is used by one thread at a time; there is no shared state.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32
#define SHA256_HEX_SIZE    65 /* 64 hex digits and a NUL */

struct sha256_ctx {
	uint32_t state[8];
	uint64_t n_bytes; /* total bytes fed so far */
	uint8_t buf[64];  /* pending partial block */
	size_t n_buf;
};

void sha256_init(struct sha256_ctx *c);
void sha256_update(struct sha256_ctx *c, const void *data, size_t n);
/* Writes the digest; the context must be initialised again before reuse. */
void sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_DIGEST_SIZE]);

/* The compression in use: "sha-ni" or "scalar" (MOLLY_SHA256=scalar forces the latter). */
const char *sha256_impl(void);
bool sha256_have_ni(void);
/* Tests and benchmarks: switch to "scalar" or "sha-ni" for the whole process (not while
 * another thread hashes). -EOPNOTSUPP when the CPU lacks SHA-NI, -EINVAL for another name. */
int sha256_use(const char *impl);

/* One shot: out = SHA-256(data[0..n)). */
void sha256(const void *data, size_t n, uint8_t out[SHA256_DIGEST_SIZE]);

/* Little-endian fixed-width integers and length-prefixed byte strings, for hashing
 * structured values unambiguously. */
void sha256_update_u32(struct sha256_ctx *c, uint32_t v);
void sha256_update_u64(struct sha256_ctx *c, uint64_t v);
void sha256_update_str(struct sha256_ctx *c, const void *s, size_t n); /* u64 n, then bytes */

/* Lower-case hex of a digest into out (SHA256_HEX_SIZE bytes); returns out. */
char *sha256_hex(const uint8_t digest[SHA256_DIGEST_SIZE], char out[SHA256_HEX_SIZE]);
/* Parses 64 hex digits (either case); -EINVAL otherwise. */
int sha256_from_hex(const char *hex, uint8_t digest[SHA256_DIGEST_SIZE]);
