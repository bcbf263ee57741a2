/* SPDX-License-Identifier: MIT */
/*
 * matmul.c: y = W·x as tile products (quant_gemm()) over chunks of output rows that the
 * threads claim one at a time.
 *
 * Claiming chunks from a shared counter, rather than splitting the rows evenly up front,
 * makes the threads finish together even when one core is slower (a busy neighbour, a
 * frequency change, a late wake-up): the fast one just takes more chunks. Results do not
 * depend on who computes a chunk: quant_gemm() gives every (row, token) pair the same bits
 * whatever tile it lands in.
 */
#include <assert.h>
#include <sched.h>
#include <stdatomic.h>

#include "sgmv.h"
#include "matmul.h"
#include "quant.h"
#include "threadpool.h"

/* What one pass over a chunk keeps in L2 (512 KiB per core on the machines we measure, 2 MiB
 * on Sapphire Rapids; half of the smaller): for unpacked weights, which sweep the tokens once
 * per row tile, the activations of a token chunk; for packed weights, which sweep the chunk's
 * rows once per few-token tile, the chunk's weight rows. */
#define TOKEN_CHUNK_BYTES (256 * 1024)
#define PACKED_CHUNK_BYTES (256 * 1024)
/* Chunks per thread: enough to even out a slower core, few enough to keep the claims cheap. */
#define CHUNKS_PER_THREAD 8

/* Bytes of the converted activations, and where the Q8_0 block sums (packed weights) start. */
static size_t xq_bytes(const struct weight *w, int64_t n_tokens)
{
	size_t b = (size_t) quant_row_bytes(quant_vec_dot_type(w->type), w->n_in) * (size_t) n_tokens;

	return (b + 15) & ~(size_t) 15;
}

size_t matmul_scratch_bytes(const struct weight *w, int64_t n_tokens)
{
	uint32_t vt = quant_vec_dot_type(w->type);

	if (vt == GGML_TYPE_F32)
		return 0;
	if (quant_packed_supported(w->type)) /* room for the block sums of packed Q kernels */
		return xq_bytes(w, n_tokens) +
		       (size_t) (w->n_in / QK8_0) * (size_t) n_tokens * sizeof(int16_t);
	return xq_bytes(w, n_tokens);
}

#define GROUP_MAX 4

/* One output's share of a group job. */
struct group_out {
	const struct weight *w;
	float *y;
	const struct lora_pair *pairs;
	size_t n_pairs;
	float *tmp;
	uint32_t max_rank;
	int64_t chunk_rows; /* rows per claim: a multiple of 4 (the row tile), of 16 when packed */
	int64_t n_chunks;
	int64_t group_rows; /* packed: rows per group (quant_packed_group_rows()) */
	size_t group_bytes; /* packed: bytes of a group */
	int64_t tok_chunk;  /* tokens per pass over a chunk */
	_Atomic int64_t chunks_done;
	_Atomic int64_t shrinks_done;
};

/*
 * The items of a group job. Phase 0: the conversion of the activations (the base chunks
 * wait for all of it: at most one item's time). Then, from one counter (`next1`), in this
 * order:
 *   LoRA shrinks: one per pair (they read x itself, not the conversion, so they start while
 *     the last conversions run, and nothing waits for them but the expands);
 *   base chunks: output rows of one output (with an epilogue: the same rows of every output,
 *     then the epilogue on them, unless LoRA deltas must come first);
 *   expands: one per (output with pairs, token row): that row's deltas over ALL columns, so
 *     every Bᵀ row streams whole; waits for that output's shrinks and base chunks (claimed
 *     long before, so the wait is usually nil);
 *   epilogue ranges (only when deltas deferred the epilogue): wait for everything before.
 * (The shrinks were phase-0 items once: every thread then waited at the phase boundary for
 * the slowest shrink, whose A rows come from memory in a decode step, before any base chunk
 * could start.)
 */
struct group_job {
	struct group_out out[GROUP_MAX];
	int n_outs;
	const float *x;
	int64_t n_in, n_tokens;
	const char *xq; /* converted activations, or x itself for F32 */
	size_t xq_row_bytes;
	char *scratch;
	int16_t *sums; /* packed weights: the block sums of each converted row */
	uint32_t vec_type;
	matmul_epilogue_fn epilogue;
	void *epilogue_arg;
	bool epilogue_deferred;
	/* phase 0: conversion items (tokens tok_per_item at a time) */
	int64_t n_conv_items, tok_per_item, n_items0;
	_Atomic int64_t next0, done0;
	/* phase 1 (see above) */
	int64_t n_shrink_items, n_chunk_items, n_expand_items, n_epi_items, epi_cols;
	_Atomic int64_t next1, expands_done;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Waits until *counter >= target. The items counted are running on other threads (a thread
 * only claims while it runs), so this is at most one item's time, unless the host
 * deschedules that thread: then give the CPU up now and then. */
static void wait_count(_Atomic int64_t *counter, int64_t target)
{
	unsigned spins = 0;

	while (atomic_load_explicit(counter, memory_order_acquire) < target)
		if (++spins % 256 == 0)
			sched_yield();
		else
			cpu_relax();
}

static void convert_tokens(struct group_job *j, int64_t b, int64_t e)
{
	for (int64_t t = b; t < e; t++) {
		quant_quantize_row(j->vec_type, j->x + t * j->n_in, j->scratch + t * j->xq_row_bytes,
				   j->n_in);
		if (j->sums)
			quant_q8_0_block_sums(j->scratch + t * j->xq_row_bytes, j->n_in,
					      j->sums + t * (j->n_in / QK8_0));
	}
}

static void phase0_item(struct group_job *j, int64_t i)
{
	int64_t b = i * j->tok_per_item;

	convert_tokens(j, b, MIN(b + j->tok_per_item, j->n_tokens));
}

/* The LoRA shrink of pair i (counted across the outputs in order). */
static void shrink_item(struct group_job *j, int64_t i)
{
	for (int o = 0; o < j->n_outs; o++) {
		struct group_out *g = &j->out[o];

		if (i < (int64_t) g->n_pairs) {
			lora_shrink_pair(j->x, (uint32_t) j->n_in, &g->pairs[i],
					 g->tmp + (size_t) i * g->max_rank);
			atomic_fetch_add_explicit(&g->shrinks_done, 1, memory_order_release);
			return;
		}
		i -= (int64_t) g->n_pairs;
	}
}

/* Rows [r0, r0 + nr) of one output: the base product. */
static void chunk_rows(struct group_job *j, const struct group_out *g, int64_t r0, int64_t nr)
{
	const struct weight *w = g->w;

	for (int64_t t0 = 0; t0 < j->n_tokens; t0 += g->tok_chunk) {
		const char *xq = j->xq + (size_t) t0 * j->xq_row_bytes;
		const int64_t nc = MIN(g->tok_chunk, j->n_tokens - t0);
		float *y = g->y + t0 * w->n_out + r0;

		if (w->packed)
			quant_gemm_packed(w->type, w->n_in,
					  (const char *) w->packed + (size_t) (r0 / g->group_rows) * g->group_bytes,
					  nr, xq, j->xq_row_bytes,
					  j->sums ? j->sums + t0 * (w->n_in / QK8_0) : NULL, nc, y,
					  (size_t) w->n_out);
		else
			quant_gemm(w->type, w->n_in, (const char *) w->data + (size_t) r0 * w->row_bytes,
				   w->row_bytes, nr, xq, j->xq_row_bytes, nc, y, (size_t) w->n_out);
	}
}

static void chunk_item(struct group_job *j, int64_t i)
{
	if (j->epilogue) {
		struct group_out *g0 = &j->out[0];
		int64_t r0 = i * g0->chunk_rows, nr = MIN(g0->chunk_rows, g0->w->n_out - r0);

		for (int o = 0; o < j->n_outs; o++)
			chunk_rows(j, &j->out[o], r0, nr);
		if (!j->epilogue_deferred)
			j->epilogue(j->epilogue_arg, r0, nr);
		for (int o = 0; o < j->n_outs; o++)
			atomic_fetch_add_explicit(&j->out[o].chunks_done, 1, memory_order_release);
		return;
	}
	for (int o = 0; o < j->n_outs; o++) {
		struct group_out *g = &j->out[o];

		if (i < g->n_chunks) {
			int64_t r0 = i * g->chunk_rows;

			chunk_rows(j, g, r0, MIN(g->chunk_rows, g->w->n_out - r0));
			atomic_fetch_add_explicit(&g->chunks_done, 1, memory_order_release);
			return;
		}
		i -= g->n_chunks;
	}
}

/* Token row t's LoRA deltas of output o over all its columns, its pairs in list order. */
static void expand_item(struct group_job *j, int64_t i)
{
	for (int o = 0; o < j->n_outs; o++) {
		struct group_out *g = &j->out[o];

		if (!g->n_pairs)
			continue;
		if (i < j->n_tokens) {
			wait_count(&g->shrinks_done, (int64_t) g->n_pairs);
			wait_count(&g->chunks_done, g->n_chunks);
			for (size_t pi = 0; pi < g->n_pairs; pi++)
				if (g->pairs[pi].row == (uint32_t) i)
					lora_expand_range(g->y, (uint32_t) g->w->n_out, &g->pairs[pi], 1,
							  g->tmp + pi * g->max_rank, g->max_rank, 0,
							  (size_t) g->w->n_out);
			break;
		}
		i -= j->n_tokens;
	}
	atomic_fetch_add_explicit(&j->expands_done, 1, memory_order_release);
}

static void group_run(void *arg, int ith, int nth)
{
	struct group_job *j = arg;
	int64_t i;

	(void) ith;
	(void) nth;
	while ((i = atomic_fetch_add_explicit(&j->next0, 1, memory_order_relaxed)) < j->n_items0) {
		phase0_item(j, i);
		atomic_fetch_add_explicit(&j->done0, 1, memory_order_release);
	}
	while ((i = atomic_fetch_add_explicit(&j->next1, 1, memory_order_relaxed)) <
	       j->n_shrink_items + j->n_chunk_items + j->n_expand_items + j->n_epi_items) {
		if (i < j->n_shrink_items) {
			shrink_item(j, i);
			continue;
		}
		i -= j->n_shrink_items;
		if (i < j->n_chunk_items) {
			/* base chunks read the converted x */
			wait_count(&j->done0, j->n_items0);
			chunk_item(j, i);
			continue;
		}
		i -= j->n_chunk_items;
		if (i < j->n_expand_items) {
			expand_item(j, i);
			continue;
		}
		i -= j->n_expand_items;
		/* deferred epilogue: after every output's base and deltas */
		for (int o = 0; o < j->n_outs; o++)
			wait_count(&j->out[o].chunks_done, j->out[o].n_chunks);
		wait_count(&j->expands_done, j->n_expand_items);
		int64_t c0 = i * j->epi_cols;
		j->epilogue(j->epilogue_arg, c0, MIN(j->epi_cols, j->out[0].w->n_out - c0));
	}
}

bool matmul_group_ok(const struct weight *const *ws, int n)
{
	if (n < 1 || n > GROUP_MAX)
		return false;
	for (int i = 1; i < n; i++)
		if (ws[i]->type != ws[0]->type || ws[i]->n_in != ws[0]->n_in ||
		    !ws[i]->packed != !ws[0]->packed)
			return false;
	return true;
}

static void plan_out(struct group_out *g, int nth, int64_t n_tokens, size_t xq_row_bytes)
{
	const struct weight *w = g->w;

	g->chunk_rows = (w->n_out + (int64_t) nth * CHUNKS_PER_THREAD - 1) /
			((int64_t) nth * CHUNKS_PER_THREAD);
	if (w->packed) {
		g->group_rows = quant_packed_group_rows(w->type);
		g->group_bytes = quant_packed_bytes(w->type, w->n_in, g->group_rows);
		g->chunk_rows = MIN(g->chunk_rows, (int64_t) (PACKED_CHUNK_BYTES / w->row_bytes));
		/* whole 16-row register tiles: two 8-row groups or one F32 group (the AVX-512
		 * kernels; an odd 8-row group runs at half speed) */
		g->chunk_rows = MAX((g->chunk_rows + 15) / 16 * 16, (int64_t) 16);
	} else {
		g->chunk_rows = MAX((g->chunk_rows + 3) / 4 * 4, (int64_t) 4);
	}
	g->n_chunks = (w->n_out + g->chunk_rows - 1) / g->chunk_rows;
	/* the packed kernels sweep a chunk's rows once per few-token tile (quant_gemm_packed()),
	 * so only the unpacked ones, which sweep the tokens per row tile, need token chunks */
	if (w->packed)
		g->tok_chunk = MAX(n_tokens, (int64_t) 1);
	else
		g->tok_chunk = MAX((int64_t) (TOKEN_CHUNK_BYTES / MAX(xq_row_bytes, (size_t) 1)) / 4 * 4,
				   (int64_t) 4);
	g->max_rank = g->n_pairs ? lora_pairs_max_rank(g->pairs, g->n_pairs) : 0;
}

void matmul_group(struct threadpool *pool, const struct matmul_out *outs, int n_outs,
		  const float *x, int64_t n_tokens, void *scratch, matmul_epilogue_fn epilogue,
		  void *epilogue_arg)
{
	int nth = threadpool_n_threads(pool);
	const struct weight *w0 = outs[0].w;
	struct group_job j = {
		.n_outs = n_outs,
		.x = x,
		.n_in = w0->n_in,
		.n_tokens = n_tokens,
		.scratch = scratch,
		.vec_type = quant_vec_dot_type(w0->type),
		.epilogue = epilogue,
		.epilogue_arg = epilogue_arg,
	};
	size_t n_pairs = 0;

	assert(n_outs >= 1 && n_outs <= GROUP_MAX);
	if (j.vec_type == GGML_TYPE_F32) { /* no conversion, no block sums (packed F32 too) */
		j.xq = (const char *) x;
		j.xq_row_bytes = (size_t) w0->n_in * sizeof(float);
	} else {
		j.xq = scratch;
		j.xq_row_bytes = (size_t) quant_row_bytes(j.vec_type, w0->n_in);
		if (quant_packed_supported(w0->type))
			for (int o = 0; o < n_outs; o++)
				if (outs[o].w->packed)
					j.sums = (int16_t *) ((char *) scratch + xq_bytes(w0, n_tokens));
		/* a few conversion items per thread: enough to share a prefill's rows */
		j.tok_per_item = MAX((n_tokens + (int64_t) nth * 4 - 1) / ((int64_t) nth * 4), (int64_t) 1);
		j.n_conv_items = (n_tokens + j.tok_per_item - 1) / j.tok_per_item;
	}
	for (int o = 0; o < n_outs; o++) {
		struct group_out *g = &j.out[o];

		*g = (struct group_out){ .w = outs[o].w, .y = outs[o].y, .pairs = outs[o].pairs,
					 .n_pairs = outs[o].pairs ? outs[o].n_pairs : 0,
					 .tmp = outs[o].lora_tmp };
		plan_out(g, nth, n_tokens, j.xq_row_bytes);
		n_pairs += g->n_pairs;
		j.n_chunk_items += g->n_chunks;
		if (g->n_pairs)
			j.n_expand_items += n_tokens;
		atomic_init(&g->chunks_done, 0);
		atomic_init(&g->shrinks_done, 0);
	}
	if (epilogue) {
		for (int o = 1; o < n_outs; o++)
			assert(j.out[o].w->n_out == w0->n_out && j.out[o].chunk_rows == j.out[0].chunk_rows);
		j.n_chunk_items = j.out[0].n_chunks;
		if (n_pairs) {
			/* the deltas must be in before the epilogue: a few column ranges after them */
			j.epilogue_deferred = true;
			j.epi_cols = MAX((w0->n_out + (int64_t) nth * 2 - 1) / ((int64_t) nth * 2),
					 (int64_t) 1);
			j.n_epi_items = (w0->n_out + j.epi_cols - 1) / j.epi_cols;
		}
	}
	j.n_items0 = j.n_conv_items;
	j.n_shrink_items = (int64_t) n_pairs;
	atomic_init(&j.next0, 0);
	atomic_init(&j.done0, 0);
	atomic_init(&j.next1, 0);
	atomic_init(&j.expands_done, 0);
	threadpool_run(pool, group_run, &j);
}

void matmul(struct threadpool *pool, const struct weight *w, const float *x, int64_t n_tokens,
	    float *y, void *scratch)
{
	struct matmul_out o = { .w = w, .y = y };

	matmul_group(pool, &o, 1, x, n_tokens, scratch, NULL, NULL);
}
