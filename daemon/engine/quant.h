/* SPDX-License-Identifier: MIT */
/*
 * quant.h: tensor element types (ggml's numbering, as stored in GGUF), their block
 * layouts, conversion to and from float, and the dot products the matmul is built on.
 *
 * Block layouts (bytes, little-endian, identical to ggml so GGUF data is used in place):
 *   F32   4 per value              F16  IEEE half           BF16  top half of an F32
 *   Q8_0  32 values: f16 d, i8 q[32]                  (34 B)   x = d*q
 *   Q4_0  32 values: f16 d, u8 qs[16]                 (18 B)   x = d*(nibble-8); low nibbles
 *         hold values 0..15, high nibbles 16..31
 *   Q4_K  256 values: f16 d, f16 dmin, u8 scales[12], u8 qs[128]   (144 B)
 *         8 sub-blocks of 32 with 6-bit scale/min; x = d*sc*q - dmin*m
 *   Q6_K  256 values: u8 ql[128], u8 qh[64], i8 scales[16], f16 d   (210 B)
 *         16 sub-blocks of 16 with 8-bit scale; x = d*sc*(q-32)
 *   Q8_K  256 values: f32 d, i8 qs[256], i16 bsums[16]  (292 B)  activations only
 *
 * Dot products pair a weight type with the type its activation row is converted to first
 * (quant_vec_dot_type()), exactly as ggml's CPU backend does, so our logits can match
 * llama.cpp's reference outputs bit-for-bit in most places:
 *   F32→F32, F16→F16, BF16→BF16, Q8_0→Q8_0, Q4_0→Q8_0, Q4_K→Q8_K, Q6_K→Q8_K.
 *
 * Every kernel exists as a portable scalar reference (`_ref`) and, where the CPU has it,
 * a SIMD variant chosen once at start-up by quant_init() (cpuid); the scalar path stays the
 * reference that tests compare against.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ggml_type {
	GGML_TYPE_F32 = 0,
	GGML_TYPE_F16 = 1,
	GGML_TYPE_Q4_0 = 2,
	GGML_TYPE_Q4_1 = 3,
	GGML_TYPE_Q5_0 = 6,
	GGML_TYPE_Q5_1 = 7,
	GGML_TYPE_Q8_0 = 8,
	GGML_TYPE_Q8_1 = 9,
	GGML_TYPE_Q2_K = 10,
	GGML_TYPE_Q3_K = 11,
	GGML_TYPE_Q4_K = 12,
	GGML_TYPE_Q5_K = 13,
	GGML_TYPE_Q6_K = 14,
	GGML_TYPE_Q8_K = 15,
	GGML_TYPE_BF16 = 30,
	GGML_TYPE_COUNT_ = 40,
};

#define QK8_0 32
#define QK4_0 32
#define QK_K 256

/* true for the types this engine can compute with (F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K; Q8_K
 * only as an activation type). */
bool quant_type_supported(uint32_t type);
/* "f32", "q4_k", ... or NULL for an unknown id. Names are ggml's, lower case. */
const char *quant_type_name(uint32_t type);
/* Parses a name as above (case-insensitive); -EINVAL when unknown. */
int quant_type_from_name(const char *name, uint32_t *ret);
/* Values per block (1 for F32/F16/BF16), 0 for unsupported types. */
size_t quant_block_values(uint32_t type);
/* Bytes per block, 0 for unsupported types. */
size_t quant_block_bytes(uint32_t type);
/* Bytes of a row of n values; -EINVAL (as a negative value) if n is not a multiple of the
 * block size or the type is unsupported. */
int64_t quant_row_bytes(uint32_t type, int64_t n);

/* The type an activation row is converted to before a dot product with weights of `type`. */
uint32_t quant_vec_dot_type(uint32_t type);

/* Fills dst (n values of `type`) from x. Supported targets: F32, F16, BF16, Q8_0, Q8_K (the
 * activation types), and Q4_0, Q4_K, Q6_K (weight quantizers, for molly-mkmodel).
 * n must be a multiple of the block size. */
void quant_quantize_row(uint32_t type, const float *x, void *dst, int64_t n);

/* dst[0..n) = the float values of a row of `type` (any supported type, Q8_K included). */
void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Dot product of a weight row of `type` with an activation row already converted to
 * quant_vec_dot_type(type); both n values long. */
float quant_vec_dot(uint32_t type, int64_t n, const void *w_row, const void *x_row);

/* The scalar reference kernels, always available (tests compare the SIMD ones with them). */
void quant_quantize_row_ref(uint32_t type, const float *x, void *dst, int64_t n);
float quant_vec_dot_ref(uint32_t type, int64_t n, const void *w_row, const void *x_row);

/* Which SIMD level quant_vec_dot() dispatches to: "avx512vnni", "avx512", "avx2", "scalar". */
const char *quant_simd_level(void);
/* Forces a level no higher than the CPU's (tests); "scalar" always works. -ENOTSUP otherwise. */
int quant_force_simd_level(const char *name);

/* Half and bfloat16 conversions (round to nearest even, as ggml). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
