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
 * a SIMD variant chosen once, on first use (cpuid; no init call needed); the scalar path
 * stays the reference that tests compare against.
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

/* The type an activation row is converted to before a dot product with weights of `type`;
 * GGML_TYPE_COUNT_ for Q8_K and unsupported types (no dot product takes them as weights). */
uint32_t quant_vec_dot_type(uint32_t type);

/* Fills dst (n values of `type`) from x. Supported targets: F32, F16, BF16, Q8_0, Q8_K (the
 * activation types), and Q4_0, Q4_K, Q6_K (weight quantizers, for molly-mkmodel).
 * n must be a multiple of the block size. */
void quant_quantize_row(uint32_t type, const float *x, void *dst, int64_t n);

/* dst[0..n) = the float values of a row of `type` (any supported type, Q8_K included). */
void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Dot product of a weight row of `type` with an activation row already converted to
 * quant_vec_dot_type(type) by quant_quantize_row(); both n values long. (The SIMD kernels
 * rely on that conversion's int8 range, -127..127 for finite input: a hand-made activation
 * byte of -128 with a nonzero scale would be multiplied wrongly.) */
float quant_vec_dot(uint32_t type, int64_t n, const void *w_row, const void *x_row);

/*
 * Tile product: y[c * y_stride + r] = dot(weight row r, activation row c) for r < nr and
 * c < nc; weight rows (n values of `type`) lie w_stride bytes apart, activation rows
 * (converted to quant_vec_dot_type(type)) x_stride bytes apart, strides in bytes, y_stride
 * in floats. This is what matmul() is built on: the SIMD levels compute several rows and
 * tokens per step, loading each weight block once per tile instead of once per token.
 * Every (r, c) result is the same bits whatever nr, nc and the position of the pair in the
 * call are (the forward pass promises per-row results independent of the batch); it may
 * differ from quant_vec_dot() in float summation order.
 */
typedef void (*quant_gemm_fn)(int64_t n, const void *w, size_t w_stride, int64_t nr,
			       const void *x, size_t x_stride, int64_t nc, float *y,
			       size_t y_stride);
void quant_gemm(uint32_t type, int64_t n, const void *w, size_t w_stride, int64_t nr,
		const void *x, size_t x_stride, int64_t nc, float *y, size_t y_stride);

/*
 * Packed weights: Q8_0 and Q4_0 matrices repacked once, at load, so that 8 consecutive rows
 * are interleaved and the kernels compute 8 rows per instruction (one row per vector lane).
 * Rows go in groups of QUANT_PACKED_ROWS (the last group padded with zero rows); group g
 * holds, for each block b of 32 values in turn, QUANT_PACKED_*_BLOCK bytes:
 *   fp16 d[8]                 the 8 rows' scales of block b
 *   Q8_0: int8 q[8][8][4]     q[k][r][i] = value 4k+i of row r
 *   Q4_0: uint8 q[4][8][4]    q[k][r][i] = byte 4k+i of row r's block (low nibble: value
 *                             4k+i, high nibble: value 16+4k+i)
 * That is the original bytes (plus the padding rows) in another order: no memory is lost
 * beyond the copy itself.
 */
#define QUANT_PACKED_ROWS 8
#define QUANT_PACKED_Q8_0_BLOCK (16 + 256)
#define QUANT_PACKED_Q4_0_BLOCK (16 + 128)
/*
 * F32 matrices pack 16 rows to a group, value-major: group g holds, for k = 0..n-1 in turn,
 * float w[k][16] = value k of its 16 rows (pad rows 0). The kernels then multiply a whole
 * register of rows by one broadcast activation value (no horizontal sums), and each row's
 * result is the plain chain acc = fmaf(w_k, x_k, acc) for k = 0..n-1 — the same bits at
 * every SIMD level, in the scalar reference, and whatever nr and nc are. Any n >= 1.
 */
#define QUANT_PACKED_F32_ROWS 16

/* True for the types that have a packed layout (Q8_0, Q4_0, F32). */
bool quant_packed_supported(uint32_t type);
/* Rows per packed group of `type`: QUANT_PACKED_F32_ROWS for F32, QUANT_PACKED_ROWS else. */
int64_t quant_packed_group_rows(uint32_t type);
/* True when this CPU has packed kernels for `type` (a SIMD level); the scalar level computes
 * packed weights correctly, but slower than unpacked ones. */
bool quant_packed_preferred(uint32_t type);
/* Bytes of n_rows rows of n values, packed (whole groups); 0 when unsupported or when n is
 * not a multiple of the block size (32 for Q8_0 and Q4_0, 1 for F32). */
size_t quant_packed_bytes(uint32_t type, int64_t n, int64_t n_rows);
/* Packs n_rows rows of n values (src_stride bytes apart) into dst, quant_packed_bytes() long. */
void quant_pack_rows(uint32_t type, int64_t n, const void *src, size_t src_stride,
		     int64_t n_rows, void *dst);
/* sums[b] = the sum of the 32 int8 of block b of a Q8_0 row of n values (the packed kernels
 * take them, to apply a weight offset once per block). */
void quant_q8_0_block_sums(const void *x_row, int64_t n, int16_t *sums);
/*
 * quant_gemm() on packed weights: w points at the group that holds the tile's first row (nr
 * rows from a group boundary on; the pad rows of a last group are not written); x as for
 * quant_gemm(); for F32, x_sums is ignored (may be NULL) and the result is described above.
 * Otherwise x_sums holds quant_q8_0_block_sums() of each activation row, n/32 per row back
 * to back (the kernels take a weight offset off with them: Q4_0's 8, and the 128 the VNNI
 * kernels add to Q8_0 weights to make them unsigned). Per row, per block: the exact integer sum, then
 * acc = fmaf(sum, d_w * d_x, acc) in block order — the same bits at every SIMD level, in the
 * scalar reference, and whatever nr and nc are.
 */
void quant_gemm_packed(uint32_t type, int64_t n, const void *w, int64_t nr, const void *x,
		       size_t x_stride, const int16_t *x_sums, int64_t nc, float *y,
		       size_t y_stride);

/* y[i] = fmaf(a[j], x_j[i], y[i]) for j = 0..count-1 in turn, i < n, where x_j = x + j *
 * x_stride floats: attention's weighted sum of value vectors. The same bits at every level
 * (one fused multiply-add per term, in j order). */
void quant_axpy_f32(int64_t n, const float *a, int64_t count, const float *x, size_t x_stride,
		    float *y);

/* Attention scores against a block of keys stored transposed: kt holds QUANT_KEY_BLOCK keys
 * as [d][QUANT_KEY_BLOCK] floats (value d of key p at kt[d * 16 + p]); for each query i < nq (q_i =
 * q + i * q_stride floats, n values) and key p < np: s_i[p] = the chain acc = fmaf(kt[d][p],
 * q_i[d], acc) over d = 0..n-1, written to s + i * s_stride + p. The same bits at every
 * level (one lane per key, no horizontal sums), whatever nq and np are. */
#define QUANT_KEY_BLOCK 16
void quant_attn_scores_f32(int64_t n, const float *kt, int64_t np, const float *q,
			   size_t q_stride, int64_t nq, float *s, size_t s_stride);

/* quant_axpy_f32() for nq rows sharing x: y_q += a_q[j] x_j for j < count[q], where
 * a_q = a + q * a_stride and y_q = y + q * y_stride floats: the same bits as nq separate
 * calls (each element's chain runs over its own j in order), computed several rows per pass
 * where the level can (x_j is loaded once for them). */
void quant_axpy_f32_rows(int64_t n, const float *a, size_t a_stride, const int64_t *count,
			 int64_t nq, const float *x, size_t x_stride, float *y, size_t y_stride);

/* Attention's softmax in place: x[i] = e^(s_i - m) / sum_j e^(s_j - m) for i < n (n >= 1),
 * where s_i = x[i] · scale and m = max s_i; the sum in double. The scalar level takes libm's
 * expf() and sums in index order; the SIMD levels a vector exp (~3.5 ulp, exp-avx2.h) and 8
 * partial sums: within a few ulp of each other, and at each level a value's result depends
 * only on the n scores (never on how the caller's work is split or grouped). */
void quant_softmax_f32(float *x, int64_t n, float scale);

/* The scalar reference kernels, always available (tests compare the SIMD ones with them). */
void quant_quantize_row_ref(uint32_t type, const float *x, void *dst, int64_t n);
float quant_vec_dot_ref(uint32_t type, int64_t n, const void *w_row, const void *x_row);
void quant_gemm_ref(uint32_t type, int64_t n, const void *w, size_t w_stride, int64_t nr,
		    const void *x, size_t x_stride, int64_t nc, float *y, size_t y_stride);
void quant_gemm_packed_ref(uint32_t type, int64_t n, const void *w, int64_t nr, const void *x,
			   size_t x_stride, const int16_t *x_sums, int64_t nc, float *y,
			   size_t y_stride);
void quant_attn_scores_f32_ref(int64_t n, const float *kt, int64_t np, const float *q,
			       size_t q_stride, int64_t nq, float *s, size_t s_stride);
void quant_axpy_f32_ref(int64_t n, const float *a, int64_t count, const float *x,
			size_t x_stride, float *y);
void quant_softmax_f32_ref(float *x, int64_t n, float scale);

/*
 * SIMD levels (quant.c has the table): "amx", "avx512bf16", "avx512vnni", "avx512",
 * "avxvnni", "avx2", "scalar", best first. The default is the best one that runs here: the CPU has its instruction sets
 * and the level is proven (its tests have passed on a CPU that has them; a level not yet
 * proven is held back unless the environment has MOLLY_CPU_UNPROVEN=1).
 */
/* The level quant_vec_dot() and the rest dispatch to now. */
const char *quant_simd_level(void);
/* The instruction sets the level in use may run, for kernels outside quant (the LoRA ones)
 * that follow its choice: AVX2 + FMA + F16C; AVX-512 F/BW/VL/DQ. */
bool quant_simd_level_avx2(void);
bool quant_simd_level_avx512(void);
/* Up to max level names, best first; returns how many. */
size_t quant_simd_levels(const char **names, size_t max);
enum quant_level_state {
	QUANT_LEVEL_RUNS,     /* the CPU has it and it is proven (or MOLLY_CPU_UNPROVEN=1) */
	QUANT_LEVEL_NO_ISA,   /* the CPU lacks an instruction set it needs */
	QUANT_LEVEL_UNPROVEN, /* the CPU has it, but it never ran its tests on such a CPU */
	QUANT_LEVEL_UNKNOWN,  /* no level of that name */
};
enum quant_level_state quant_simd_level_state(const char *name);
/* Where and when the level was proven ("AMD EPYC Zen 5 ..., 2026-12-01"), or NULL. */
const char *quant_simd_level_proven(const char *name);
/* Switches to a level (tests, benchmarks): 0; -ENOTSUP when the CPU lacks it or the name is
 * unknown; -EPERM when it is held back as unproven. "scalar" always works. */
int quant_force_simd_level(const char *name);

/* Half and bfloat16 conversions (round to nearest even, as ggml). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
