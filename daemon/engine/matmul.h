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

#include <stdbool.h>
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

struct lora_pair;

/* One output of matmul_group(): y = W·x, plus the LoRA deltas of `pairs` (sorted as
 * lora_sgmv() wants; n_pairs may be 0), computed with lora_tmp (n_pairs × the pairs' largest
 * rank floats) as lora_sgmv() computes them: the same bits. */
struct matmul_out {
	const struct weight *w;
	float *y;
	const struct lora_pair *pairs;
	size_t n_pairs;
	float *lora_tmp;
};

/* Runs after a claim's rows [r0, r0 + nr) of every output are final (base and deltas). */
typedef void (*matmul_epilogue_fn)(void *arg, int64_t r0, int64_t nr);

/* True when these weights can share one matmul_group() job: the same stored type, input
 * width and layout (packed or not), so one conversion of x serves all. */
bool matmul_group_ok(const struct weight *const *ws, int n);

/*
 * Several products of the same input in ONE pool job (the Q/K/V projections; gate and up):
 * x is converted once and the LoRA shrinks run first, split over the threads; then the
 * threads claim chunks of output rows across all outputs and add each chunk's LoRA expand
 * right after its base rows (while they are in cache). With an epilogue, all outputs must
 * have the same n_out: a claim covers the same rows of every output, and the epilogue runs
 * on them. Every y value is the same bits as matmul() followed by lora_sgmv().
 * scratch holds matmul_scratch_bytes() of the first weight.
 */
void matmul_group(struct threadpool *pool, const struct matmul_out *outs, int n_outs,
		  const float *x, int64_t n_tokens, void *scratch, matmul_epilogue_fn epilogue,
		  void *epilogue_arg);
