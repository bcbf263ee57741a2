/* SPDX-License-Identifier: MIT */
/*
 * kernels.h: private to quant.c and the per-ISA kernel files (kernels-avx2.c,
 * kernels-avx512.c). It holds the block structs and the table of kernels one SIMD level
 * provides; quant.c picks a table once (cpuid) and dispatches through it.
 *
 * The block structs are packed: GGUF places tensor data at 32-byte offsets, but rows and
 * blocks inside a tensor follow each other without padding (a Q8_0 block is 34 bytes), so
 * a block's fp16 and int16 fields are routinely misaligned. Packed structs make the
 * compiler emit unaligned-safe accesses (no UB, UBSan-clean), and SIMD code uses loadu.
 *
 * Every kernel takes n = the number of values, a multiple of the type's block size, and
 * pointers to rows of n values; none of them allocates or fails.
 */
#pragma once

#include <stdint.h>
#include <string.h>

#include "quant.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF block layouts are little-endian; a big-endian port needs byte swaps"
#endif

struct block_q8_0 {
	uint16_t d; /* fp16 */
	int8_t qs[QK8_0];
} __attribute__((packed));

struct block_q4_0 {
	uint16_t d;              /* fp16 */
	uint8_t qs[QK4_0 / 2];   /* value j in the low nibble of qs[j], j + 16 in its high one */
} __attribute__((packed));

struct block_q4_K {
	uint16_t d;            /* fp16, scale of the 6-bit sub-block scales */
	uint16_t dmin;         /* fp16, scale of the 6-bit sub-block mins */
	uint8_t scales[12];    /* 8 scales + 8 mins, 6 bits each; see q4_K_scale_min() */
	uint8_t qs[QK_K / 2];  /* per 64 values: 32 bytes, low nibbles the first 32 values */
} __attribute__((packed));

struct block_q6_K {
	uint8_t ql[QK_K / 2];      /* low 4 bits */
	uint8_t qh[QK_K / 4];      /* high 2 bits */
	int8_t scales[QK_K / 16];  /* one per 16 values */
	uint16_t d;                /* fp16 */
} __attribute__((packed));

struct block_q8_K {
	float d;
	int8_t qs[QK_K];
	int16_t bsums[QK_K / 16]; /* sums of qs in groups of 16 */
} __attribute__((packed));

_Static_assert(sizeof(struct block_q8_0) == 34, "block_q8_0 must match ggml");
_Static_assert(sizeof(struct block_q4_0) == 18, "block_q4_0 must match ggml");
_Static_assert(sizeof(struct block_q4_K) == 144, "block_q4_K must match ggml");
_Static_assert(sizeof(struct block_q6_K) == 210, "block_q6_K must match ggml");
_Static_assert(sizeof(struct block_q8_K) == 292, "block_q8_K must match ggml");

/*
 * Q4_K packs 8 six-bit scales and 8 six-bit mins into 12 bytes (ggml's get_scale_min_k4):
 *   bytes 0-3:  scale j (j < 4) in the low 6 bits; the top 2 bits are bits 4-5 of scale j+4
 *   bytes 4-7:  min j (j < 4) in the low 6 bits; the top 2 bits are bits 4-5 of min j+4
 *   bytes 8-11: low nibble = bits 0-3 of scale j+4, high nibble = bits 0-3 of min j+4
 * q4_K_scales_words() unpacks them four bytes at a time: words 0-1 are scales 0-7, words 2-3
 * mins 0-7 (little-endian, so byte j of the 8 is sub-block j = values 32j..32j+31).
 */
static inline void q4_K_scales_words(const uint8_t *s, uint32_t out[4])
{
	uint32_t u[3];

	memcpy(u, s, sizeof(u));
	out[0] = u[0] & 0x3f3f3f3f;
	out[1] = (u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030); /* bits 6-7 -> 4-5 */
	out[2] = u[1] & 0x3f3f3f3f;
	out[3] = ((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030);
}

static inline void q4_K_unpack_scales(const uint8_t *s, uint8_t sc[8], uint8_t m[8])
{
	uint32_t w[4];

	q4_K_scales_words(s, w);
	memcpy(sc, w, 8);
	memcpy(m, w + 2, 8);
}

typedef void (*quant_gemm_packed_fn)(int64_t n, const void *w, int64_t nr, const void *x,
				     size_t x_stride, const int16_t *x_sums, int64_t nc, float *y,
				     size_t y_stride);

struct quant_kernels {
	const char *name; /* the level's name, as quant_simd_level() reports it */

	/* Activation conversions: n floats into a row of the target type. Every level gives
	 * bit-identical output to the scalar one (tests check it). */
	void (*quantize_f16)(const float *x, void *dst, int64_t n);
	void (*quantize_bf16)(const float *x, void *dst, int64_t n);
	void (*quantize_q8_0)(const float *x, void *dst, int64_t n);
	void (*quantize_q8_K)(const float *x, void *dst, int64_t n);

	/* Dot products of a weight row with an activation row of its vec_dot type. */
	float (*dot_f32)(int64_t n, const void *w, const void *x);
	float (*dot_f16)(int64_t n, const void *w, const void *x);
	float (*dot_bf16)(int64_t n, const void *w, const void *x);
	float (*dot_q8_0)(int64_t n, const void *w, const void *x);
	float (*dot_q4_0)(int64_t n, const void *w, const void *x);
	float (*dot_q4_K)(int64_t n, const void *w, const void *x);
	float (*dot_q6_K)(int64_t n, const void *w, const void *x);

	/* Tile products (quant_gemm() in quant.h); NULL where the level has none for a type,
	 * and quant.c then loops over the level's dot product, pair by pair. */
	quant_gemm_fn gemm_f32;
	quant_gemm_fn gemm_f16;
	quant_gemm_fn gemm_bf16;
	quant_gemm_fn gemm_q8_0;
	quant_gemm_fn gemm_q4_0;
	quant_gemm_fn gemm_q4_K;
	quant_gemm_fn gemm_q6_K;
	/* Packed tile products (quant_gemm_packed()); NULL: the scalar reference. */
	quant_gemm_packed_fn gemm_packed_q8_0;
	quant_gemm_packed_fn gemm_packed_q4_0;
	quant_gemm_packed_fn gemm_packed_f32;
	/* quant_axpy_f32() */
	void (*axpy_f32)(int64_t n, const float *a, int64_t count, const float *x, size_t x_stride,
			 float *y);
	/* quant_attn_scores_f32(); NULL: the scalar loop */
	void (*attn_scores_f32)(int64_t n, const float *kt, int64_t np, const float *q,
				size_t q_stride, int64_t nq, float *s, size_t s_stride);
	/* quant_axpy_f32_rows(); NULL: quant_axpy_f32() row by row */
	void (*axpy_f32_rows)(int64_t n, const float *a, size_t a_stride, const int64_t *count,
			      int64_t nq, const float *x, size_t x_stride, float *y, size_t y_stride);
	/* quant_softmax_f32() */
	void (*softmax_f32)(float *x, int64_t n, float scale);
};

extern const struct quant_kernels quant_kernels_scalar; /* quant.c */
#if defined(__x86_64__)
extern const struct quant_kernels quant_kernels_avx2;       /* kernels-avx2.c */
extern const struct quant_kernels quant_kernels_avx512;     /* kernels-avx512.c */
extern const struct quant_kernels quant_kernels_avx512vnni; /* kernels-avx512.c */
/* The AVX-VNNI packed kernels of the "avxvnni" table (kernels-avxvnni.c) and the vdpbf16ps
 * BF16 kernels of the "avx512bf16" table (kernels-avx512bf16.c). quant.c builds both tables:
 * it runs on any CPU before cpuid is read, so the tables are never made in files built with
 * -mavx512f, where the compiler may copy a struct with a zmm move (SIGILL without AVX-512). */
void quant_gemm_packed_q8_0_avxvnni(int64_t n, const void *w, int64_t nr, const void *x,
				    size_t xs, const int16_t *sums, int64_t nc, float *y, size_t ys);
void quant_gemm_packed_q4_0_avxvnni(int64_t n, const void *w, int64_t nr, const void *x,
				    size_t xs, const int16_t *sums, int64_t nc, float *y, size_t ys);
/* The "amx" table's packed products (kernels-amx.c): AMX tiles from AMX_MIN_TOKENS tokens on,
 * the avx512vnni kernels below. */
void quant_gemm_packed_q8_0_amx(int64_t n, const void *w, int64_t nr, const void *x, size_t xs,
				const int16_t *sums, int64_t nc, float *y, size_t ys);
void quant_gemm_packed_q4_0_amx(int64_t n, const void *w, int64_t nr, const void *x, size_t xs,
				const int16_t *sums, int64_t nc, float *y, size_t ys);
float quant_dot_bf16_avx512bf16(int64_t n, const void *w, const void *x);
void quant_gemm_bf16_avx512bf16(int64_t n, const void *w, size_t ws, int64_t nr, const void *x,
				size_t xs, int64_t nc, float *y, size_t ys);

/* The AVX2 tile products, which the AVX-512 tables share (kernels-avx2.c). */
void quant_gemm_f32_avx2(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *x,
			 size_t x_stride, int64_t nc, float *y, size_t y_stride);
void quant_gemm_f16_avx2(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *x,
			 size_t x_stride, int64_t nc, float *y, size_t y_stride);
void quant_gemm_q8_0_avx2(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *x,
			  size_t x_stride, int64_t nc, float *y, size_t y_stride);
void quant_gemm_q4_0_avx2(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *x,
			  size_t x_stride, int64_t nc, float *y, size_t y_stride);
void quant_gemm_q4_K_avx2(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *x,
			  size_t x_stride, int64_t nc, float *y, size_t y_stride);
void quant_gemm_q6_K_avx2(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *x,
			  size_t x_stride, int64_t nc, float *y, size_t y_stride);
void quant_gemm_packed_q8_0_avx2(int64_t n, const void *w, int64_t nr, const void *x,
				 size_t x_stride, const int16_t *x_sums, int64_t nc, float *y,
				 size_t y_stride);
void quant_gemm_packed_q4_0_avx2(int64_t n, const void *w, int64_t nr, const void *x,
				 size_t x_stride, const int16_t *x_sums, int64_t nc, float *y,
				 size_t y_stride);
void quant_gemm_packed_f32_avx2(int64_t n, const void *w, int64_t nr, const void *x,
				size_t x_stride, const int16_t *x_sums, int64_t nc, float *y,
				size_t y_stride);
void quant_attn_scores_f32_avx2(int64_t n, const float *kt, int64_t np, const float *q,
				size_t q_stride, int64_t nq, float *s, size_t s_stride);
void quant_axpy_f32_avx2(int64_t n, const float *a, int64_t count, const float *x,
			 size_t x_stride, float *y);
void quant_softmax_f32_avx2(float *x, int64_t n, float scale);
#endif
