/* SPDX-License-Identifier: MIT */
/*
 * matmul.h: y = W·x for a batch of activation rows, W in any supported stored type.
 *
 * Each activation row is converted once to the weight type's dot partner
 * (quant_vec_dot_type(): Q8_0, Q8_K, F16, BF16 or F32, as ggml does); then the pool's threads
 * claim chunks of output rows from a shared counter and compute each chunk against the
 * batch's tokens as tile products (quant_gemm(), or quant_gemm_packed() for weights repacked
 * at load), so a weight row is read from memory once per batch (once per ~256 KiB of
 * activations for wide batches).
 *
 * Results: every output (row, token) is the same bits whatever the batch around it and the
 * thread count (the tile kernels guarantee it per pair); packed and unpacked weights of the
 * same matrix differ in float summation order only.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct threadpool;

/* A weight matrix [n_out rows][n_in values] in its stored type. */
struct weight {
	const void *data; /* borrowed: inside the mapping */
	uint32_t type;
	int64_t n_in;
	int64_t n_out;
	size_t row_bytes;
	/* NULL, or the same rows packed by quant_pack_rows() (the kernels' preferred layout;
	 * see quant.h), which matmul() then reads instead of data. Owned by whoever packed
	 * them (the model). */
	const void *packed;
};

/* Bytes of scratch matmul() needs for n_tokens rows of w's input. */
size_t matmul_scratch_bytes(const struct weight *w, int64_t n_tokens);

/*
 * y[t][o] (row stride n_out) = dot(W row o, x[t]) (row stride n_in), for t < n_tokens.
 * scratch holds matmul_scratch_bytes(); it may be NULL when w->type is F32.
 */
void matmul(struct threadpool *pool, const struct weight *w, const float *x, int64_t n_tokens,
	    float *y, void *scratch);
