/* SPDX-License-Identifier: MIT */
#include "matmul.h"
#include "quant.h"
#include "threadpool.h"

size_t matmul_scratch_bytes(const struct weight *w, int64_t n_tokens)
{
	uint32_t vt = quant_vec_dot_type(w->type);

	if (vt == GGML_TYPE_F32)
		return 0;
	return (size_t) quant_row_bytes(vt, w->n_in) * (size_t) n_tokens;
}

struct matmul_job {
	const struct weight *w;
	const float *x;
	int64_t n_tokens;
	float *y;
	const char *xq; /* converted activations, or x itself for F32 */
	size_t xq_row_bytes;
	char *scratch;
	uint32_t vec_type;
};

static void quantize_rows(void *arg, int ith, int nth)
{
	struct matmul_job *j = arg;
	long b, e;

	threadpool_split(j->n_tokens, 1, ith, nth, &b, &e);
	for (long t = b; t < e; t++)
		quant_quantize_row(j->vec_type, j->x + t * j->w->n_in, j->scratch + t * j->xq_row_bytes,
				   j->w->n_in);
}

static void dot_rows(void *arg, int ith, int nth)
{
	struct matmul_job *j = arg;
	const struct weight *w = j->w;
	long b, e;

	/* Chunks of 4 rows keep neighbouring threads off each other's cache lines of y. */
	threadpool_split(w->n_out, 4, ith, nth, &b, &e);
	for (long o = b; o < e; o++) {
		const char *row = (const char *) w->data + (size_t) o * w->row_bytes;

		for (int64_t t = 0; t < j->n_tokens; t++)
			j->y[t * w->n_out + o] =
				quant_vec_dot(w->type, w->n_in, row, j->xq + t * j->xq_row_bytes);
	}
}

void matmul(struct threadpool *pool, const struct weight *w, const float *x, int64_t n_tokens,
	    float *y, void *scratch)
{
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
		if (n_tokens > 1)
			threadpool_run(pool, quantize_rows, &j);
		else
			quantize_rows(&j, 0, 1);
	}
	threadpool_run(pool, dot_rows, &j);
}
