/* SPDX-License-Identifier: MIT */
/*
 * forward.h: the transformer forward pass over a batch of rows that may belong to different
 * sequences, each with its own paged KV cache (a block table) and its own LoRA adapters.
 *
 * KV layout: the cache is a set of pages (struct kv_store: page p at base + p·page_bytes);
 * a block holds KV_BLOCK_TOKENS consecutive positions of one sequence for every layer:
 *   [layer][K | V][KV head][KV_BLOCK_TOKENS x head_dim floats]
 * where a head's V is [token in block][head_dim] and its K is transposed, [head_dim][token
 * in block]
 * (head-major: attention reads one head's keys of a block as one contiguous 4 KiB run for a
 * 64-wide head, which the hardware prefetcher follows, instead of 16 pieces 3 KiB apart; K
 * transposed so that Q·K takes the block's 16 keys as one vector per value d, with no
 * horizontal sums: quant_attn_scores_f32()).
 * Position pos of a sequence lives in page blocks[pos / KV_BLOCK_TOKENS].
 *
 * Rows: every row is one token of one sequence at one position. Rows of one sequence appear
 * in increasing position order; a row attends to positions 0..pos of its sequence, including
 * positions written by earlier rows of the same batch (a prefill chunk). Logits are computed
 * only for rows that ask for them.
 *
 * Invariance: a row's result depends only on its own token, position, cache and adapters,
 * never on the other rows or on the thread count — matmuls convert and dot each row alone,
 * attention and LoRA work per row in a fixed order.
 *
 * Threading: one forward at a time per workspace; the model and adapters are only read.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/macro.h"

struct model;
struct threadpool;
struct lora_resident;

#define KV_BLOCK_TOKENS 16

struct kv_store {
	char *base;
	size_t page_bytes;
};

/* Bytes of one KV block of this model (a page must hold at least this). */
size_t forward_kv_block_bytes(const struct model *m);

struct forward_seq {
	const uint32_t *blocks; /* page ids, one per KV_BLOCK_TOKENS positions */
	uint32_t n_blocks;
};

struct forward_lora {
	const struct lora_resident *res;
	float scale;     /* user scale */
	uint64_t order;  /* sort key: adapters apply in increasing order (stable across batches) */
};

struct forward_row {
	int32_t token;
	uint32_t pos;
	uint32_t seq;         /* index into batch->seqs */
	uint32_t lora_first;  /* this row's adapters: batch->loras[lora_first .. +n_loras) */
	uint32_t n_loras;
	int32_t logits_index; /* -1: none; else the row of batch->logits to fill */
};

struct forward_batch {
	const struct forward_row *rows;
	uint32_t n_rows;
	const struct forward_seq *seqs;
	const struct forward_lora *loras;
	float *logits; /* [number of rows with logits][n_vocab] */
};

struct forward_ws;

/* Writes zeros over [p, p + bytes): fresh heap memory faulted in up front, so that the first
 * batches do not pay a page fault per 4 KiB (forward_ws_new() and model_ctx_new() call it). */
void prefault(void *p, size_t bytes);

/* Scratch for batches of up to max_rows rows, sequences of up to max_ctx positions, up to
 * max_pairs (row, adapter) pairs per batch, and pools of up to max_threads threads. */
int forward_ws_new(const struct model *m, uint32_t max_rows, uint32_t max_ctx, uint32_t max_pairs,
		   int max_threads, struct forward_ws **ret);
struct forward_ws *forward_ws_free(struct forward_ws *ws);
DEFINE_CLEANUP_FUNC(struct forward_ws *, forward_ws_free, NULL)

/* -EINVAL for a bad token, position or block table; -E2BIG beyond the workspace's limits. */
int model_forward(const struct model *m, struct forward_ws *ws, struct threadpool *pool,
		  const struct kv_store *kv, const struct forward_batch *b);
