/* SPDX-License-Identifier: MIT */
/* sha256-private.h: what sha256.c shares with its SHA-NI compression (sha256-ni.c). */
#pragma once

#include <stddef.h>
#include <stdint.h>

extern const uint32_t sha256_K[64];

/* n_blocks 64-byte blocks into the state, with the SHA extensions (only where cpuid has them). */
void sha256_blocks_ni(uint32_t s[8], const uint8_t *p, size_t n_blocks);
