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
#include <stdatomic.h>

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

/* Bytes of the converted activations, and where the Q8_0 block sums (packed Q4_0) start. */
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
	if (w->type == GGML_TYPE_Q4_0)
		return xq_bytes(w, n_tokens) +
		       (size_t) (w->n_in / QK8_0) * (size_t) n_tokens * sizeof(int16_t);
	return xq_bytes(w, n_tokens);
}

struct matmul_job {
	const struct weight *w;
	const float *x;
	int64_t n_tokens;
	float *y;
	const char *xq; /* converted activations, or x itself for F32 */
	size_t xq_row_bytes;
	char *scratch;
	int16_t *sums; /* packed Q4_0: the block sums of each converted row */
	uint32_t vec_type;
	int64_t chunk_rows; /* rows per claim: a multiple of 4 (the row tile), 8 when packed */
	size_t group_bytes; /* packed: bytes of 8 rows */
	int64_t tok_chunk;  /* tokens per pass over a chunk */
	_Atomic int64_t next_row;
};

static void quantize_rows(void *arg, int ith, int nth)
{
	struct matmul_job *j = arg;
	long b, e;

	threadpool_split(j->n_tokens, 1, ith, nth, &b, &e);
	for (long t = b; t < e; t++) {
		quant_quantize_row(j->vec_type, j->x + t * j->w->n_in, j->scratch + t * j->xq_row_bytes,
				   j->w->n_in);
		if (j->sums)
			quant_q8_0_block_sums(j->scratch + t * j->xq_row_bytes, j->w->n_in,
					      j->sums + t * (j->w->n_in / QK8_0));
	}
}

static void dot_rows(void *arg, int ith, int nth)
{
	struct matmul_job *j = arg;
	const struct weight *w = j->w;

	(void) ith;
	(void) nth;
	for (;;) {
		int64_t r0 = atomic_fetch_add_explicit(&j->next_row, j->chunk_rows, memory_order_relaxed);
		int64_t nr;

		if (r0 >= w->n_out)
			break;
		nr = MIN(j->chunk_rows, w->n_out - r0);
		for (int64_t t0 = 0; t0 < j->n_tokens; t0 += j->tok_chunk) {
			const char *xq = j->xq + (size_t) t0 * j->xq_row_bytes;
			const int64_t nc = MIN(j->tok_chunk, j->n_tokens - t0);
			float *y = j->y + t0 * w->n_out + r0;

			if (w->packed)
				quant_gemm_packed(w->type, w->n_in,
						  (const char *) w->packed + (size_t) (r0 / QUANT_PACKED_ROWS) *
										  j->group_bytes,
						  nr, xq, j->xq_row_bytes,
						  j->sums ? j->sums + t0 * (w->n_in / QK8_0) : NULL, nc, y,
						  (size_t) w->n_out);
			else
				quant_gemm(w->type, w->n_in,
					   (const char *) w->data + (size_t) r0 * w->row_bytes, w->row_bytes,
					   nr, xq, j->xq_row_bytes, nc, y, (size_t) w->n_out);
		}
	}
}

void matmul(struct threadpool *pool, const struct weight *w, const float *x, int64_t n_tokens,
	    float *y, void *scratch)
{
	int nth = threadpool_n_threads(pool);
	struct matmul_job j = {
		.w = w,
		.x = x,
		.n_tokens = n_tokens,
		.y = y,
		.scratch = scratch,
		.vec_type = quant_vec_dot_type(w->type),
	};

	if (j.vec_type == GGML_TYPE_F32) {
		j.xq = (const char *) x;
		j.xq_row_bytes = (size_t) w->n_in * sizeof(float);
	} else {
		j.xq = scratch;
		j.xq_row_bytes = (size_t) quant_row_bytes(j.vec_type, w->n_in);
		if (w->packed && w->type == GGML_TYPE_Q4_0)
			j.sums = (int16_t *) ((char *) scratch + xq_bytes(w, n_tokens));
		if (n_tokens > 1)
			threadpool_run(pool, quantize_rows, &j);
		else
			quantize_rows(&j, 0, 1);
	}
	j.chunk_rows = (w->n_out + (int64_t) nth * CHUNKS_PER_THREAD - 1) /
		       ((int64_t) nth * CHUNKS_PER_THREAD);
	if (w->packed) {
		j.group_bytes = quant_packed_bytes(w->type, w->n_in, QUANT_PACKED_ROWS);
		j.chunk_rows = MIN(j.chunk_rows, (int64_t) (PACKED_CHUNK_BYTES / w->row_bytes));
		j.chunk_rows = MAX((j.chunk_rows + 7) / 8 * 8, (int64_t) 8);
	} else {
		j.chunk_rows = MAX((j.chunk_rows + 3) / 4 * 4, (int64_t) 4);
	}
	/* the packed kernels sweep a chunk's rows once per few-token tile (quant_gemm_packed()),
	 * so only the unpacked ones, which sweep the tokens per row tile, need token chunks */
	if (w->packed)
		j.tok_chunk = MAX(n_tokens, (int64_t) 1);
	else
		j.tok_chunk = MAX((int64_t) (TOKEN_CHUNK_BYTES / MAX(j.xq_row_bytes, (size_t) 1)) /
					  4 * 4,
				  (int64_t) 4);
	atomic_init(&j.next_row, 0);
	threadpool_run(pool, dot_rows, &j);
}
