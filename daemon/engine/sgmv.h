/* SPDX-License-Identifier: MIT */
/*
 * sgmv.h: the batched LoRA compute (SGMV on the CPU) and the form of an adapter it computes
 * with (the "hot" form). The engine knows no adapter file: lora/resident.h builds these
 * structures from an opened adapter (any format), the forward pass only reads them.
 *
 * Layout: for every (layer, target) the adapter covers, A as `rank` rows of n_in values and
 * B transposed (Bᵀ) as `rank` rows of n_out values, rows in F32, F16, BF16 or Q8_0 (blocks of
 * 32 values along the row; a Q8_0 row computes as the F32 row of its dequantized values
 * would, at half the bytes of F16: a decode step streams every distinct adapter's rows). Rows are
 * packed into fixed-size pages handed out by a page provider (the scheduler's page pool, or
 * plain malloc for single-sequence use), never straddling a page, so an adapter's memory is
 * a set of pool pages like a sequence's KV blocks. Bᵀ makes the expand step an axpy over
 * contiguous rows.
 *
 * Threading: immutable once built; the kernels only read it.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct threadpool;

/* The projections of a layer an adapter may adapt. */
enum lora_target {
	LORA_TARGET_Q,
	LORA_TARGET_K,
	LORA_TARGET_V,
	LORA_TARGET_O,
	LORA_TARGET_GATE,
	LORA_TARGET_UP,
	LORA_TARGET_DOWN,
	LORA_TARGET_COUNT_,
};

struct lora_resident_mat {
	uint32_t rank;
	uint32_t n_in;
	uint32_t n_out;
	uint32_t dtype;     /* row type: GGML_TYPE_F32, F16, BF16 or Q8_0 */
	float scale;        /* alpha/rank etc. (user scale applied per request) */
	const void **a_rows; /* [rank] → n_in values */
	const void **bt_rows; /* [rank] → n_out values */
};

struct lora_resident {
	char *name;              /* owned */
	uint32_t n_layer;
	uint32_t max_rank;
	/* [n_layer][LORA_TARGET_COUNT_]; NULL where the adapter does not touch that projection */
	struct lora_resident_mat **mats; /* owned (the matrices and pointer arrays) */
	size_t n_pages;
	uint32_t *pages;         /* owned: the page ids given by the provider, to give back */
	size_t bytes;            /* weight bytes held */
};

/* One (row, adapter, scale) pair of a batch: row `row` of the projection's input gets
 * scale · B·(A·x) from `mat` added to its output. */
struct lora_pair {
	const struct lora_resident_mat *mat;
	uint32_t row;
	float scale;
};

/*
 * SGMV: for a projection with input x [n_rows][n_in] and output y [n_rows][n_out] (already
 * holding W·x), adds every pair's delta. pairs must be sorted so that pairs of one adapter
 * matrix are adjacent (segments); tmp holds n_pairs × max_rank floats. Threaded: the shrink
 * splits the segments' rank rows, the expand splits the output columns. The result for a row
 * does not depend on the other rows of the batch.
 */
void lora_sgmv(struct threadpool *pool, const float *x, float *y, const struct lora_pair *pairs,
	       size_t n_pairs, float *tmp);

/*
 * The two halves of SGMV, for callers that schedule them themselves (matmul_group() runs
 * them inside its matrix product job):
 * lora_shrink_pair(): tmp[k] = A_k · x[p->row] for k < rank (x rows n_in apart).
 * lora_expand_range(): y[row][b..e) += scale · tmp[pi][k] · Bᵀ_k[b..e) for every pair pi
 *   (tmp rows max_rank apart) and k, in list order: a row's result does not depend on the
 *   column split nor on the other pairs' rows.
 */
void lora_shrink_pair(const float *x, uint32_t n_in, const struct lora_pair *p, float *tmp);
void lora_expand_range(float *y, uint32_t n_out, const struct lora_pair *pairs, size_t n_pairs,
		       const float *tmp, uint32_t max_rank, size_t b, size_t e);
/* The largest rank among the pairs' matrices. */
uint32_t lora_pairs_max_rank(const struct lora_pair *pairs, size_t n_pairs);
