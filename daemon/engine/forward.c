/* SPDX-License-Identifier: MIT */
/*
 * forward.c: the forward pass (see forward.h).
 *
 * The arithmetic follows ggml's CPU backend where the order of float operations decides
 * whether our logits can match llama.cpp's reference runs: RMSNorm sums float squares in
 * double and scales by 1/sqrtf(mean + eps) in float; RoPE angles come from repeated float
 * multiplication by base^(-2/n_dims); softmax sums in double; activations are converted to
 * the weight type's dot partner before every matrix product (matmul.h); LoRA deltas are added
 * to the product before the bias, as llama.cpp does.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "sgmv.h"
#include "exp-avx2.h"
#include "forward.h"
#include "matmul.h"
#include "model.h"
#include "quant.h"
#include "threadpool.h"

/* Attention takes up to ATT_Q consecutive rows of one sequence (a prefill's) per task, so
 * each key block is read once for all of them and Q·K runs as wider tiles. */
#define ATT_Q 8

struct forward_ws {
	uint32_t max_rows, max_ctx, max_pairs;
	int max_threads;
	float *x, *h, *q, *k, *v, *attn, *gate, *up;
	float *scores;              /* [max_threads][ATT_Q][max_ctx] */
	uint32_t *att_groups;       /* [max_rows]: first row of each attention row group */
	float *rope_cos, *rope_sin; /* [max_rows][rope_dim/2] */
	float *norm_rows;           /* [max_rows][n_embd] rows that need logits */
	void *mm_scratch;
	struct lora_pair *pairs;    /* [LORA_GROUP][max_pairs] */
	float *lora_tmp;            /* [LORA_GROUP][max_pairs][max_rank] */
	uint32_t lora_tmp_rank;
};

size_t forward_kv_block_bytes(const struct model *m)
{
	const struct model_hparams *hp = &m->hp;

	return (size_t) KV_BLOCK_TOKENS * hp->n_layer * 2 * hp->n_head_kv * hp->head_dim *
	       sizeof(float);
}

static size_t max_scratch(const struct model *m, uint32_t n_rows)
{
	size_t s = matmul_scratch_bytes(&m->output, n_rows);

	for (uint32_t i = 0; i < m->hp.n_layer; i++) {
		const struct model_layer *L = &m->layers[i];
		const struct weight *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo,
					      &L->ffn_gate, &L->ffn_up, &L->ffn_down };

		for (size_t j = 0; j < ELEMENTSOF(ws); j++)
			s = MAX(s, matmul_scratch_bytes(ws[j], n_rows));
	}
	return s;
}

#define LORA_MAX_RANK 512
/* Projections computed in one job (Q, K, V): each needs its own pair list and shrink results. */
#define LORA_GROUP 3

void prefault(void *p, size_t bytes)
{
	memset(p, 0, bytes);
}

int forward_ws_new(const struct model *m, uint32_t max_rows, uint32_t max_ctx, uint32_t max_pairs,
		   int max_threads, struct forward_ws **ret)
{
	const struct model_hparams *hp;
	_cleanup_(forward_ws_freep) struct forward_ws *ws = NULL;
	size_t q_dim, kv_dim, emb;

	assert_return(m && ret && max_rows > 0 && max_ctx > 0 && max_threads > 0, -EINVAL);
	assert_return(max_rows <= 65536 && max_ctx <= (1u << 24) && max_pairs <= (1u << 20), -E2BIG);
	hp = &m->hp;
	q_dim = (size_t) hp->n_head * hp->head_dim;
	kv_dim = (size_t) hp->n_head_kv * hp->head_dim;
	emb = MAX((size_t) hp->n_embd, q_dim);
	ws = calloc(1, sizeof(*ws));
	if (!ws)
		return -ENOMEM;
	*ws = (struct forward_ws){ .max_rows = max_rows, .max_ctx = max_ctx, .max_pairs = max_pairs,
				   .max_threads = max_threads };
	ws->x = malloc((size_t) max_rows * hp->n_embd * sizeof(float));
	ws->h = malloc((size_t) max_rows * emb * sizeof(float));
	ws->q = malloc((size_t) max_rows * q_dim * sizeof(float));
	ws->k = malloc((size_t) max_rows * kv_dim * sizeof(float));
	ws->v = malloc((size_t) max_rows * kv_dim * sizeof(float));
	ws->attn = malloc((size_t) max_rows * q_dim * sizeof(float));
	ws->gate = malloc((size_t) max_rows * hp->n_ff * sizeof(float));
	ws->up = malloc((size_t) max_rows * hp->n_ff * sizeof(float));
	ws->scores = malloc((size_t) max_threads * ATT_Q * max_ctx * sizeof(float));
	ws->att_groups = malloc((size_t) (max_rows + 1) * sizeof(*ws->att_groups));
	ws->rope_cos = malloc((size_t) max_rows * (hp->rope_dim / 2) * sizeof(float));
	ws->rope_sin = malloc((size_t) max_rows * (hp->rope_dim / 2) * sizeof(float));
	ws->norm_rows = malloc((size_t) max_rows * hp->n_embd * sizeof(float));
	ws->mm_scratch = malloc(MAX(max_scratch(m, max_rows), (size_t) 64));
	ws->pairs = malloc(LORA_GROUP * MAX((size_t) max_pairs, (size_t) 1) * sizeof(*ws->pairs));
	if (!ws->x || !ws->h || !ws->q || !ws->k || !ws->v || !ws->attn || !ws->gate || !ws->up ||
	    !ws->scores || !ws->att_groups || !ws->rope_cos || !ws->rope_sin || !ws->norm_rows || !ws->mm_scratch ||
	    !ws->pairs)
		return -ENOMEM;
	/* Touch the row buffers now: a first write costs a page fault per 4 KiB (~5-10 us in
	 * the VMs we measure on, ~15 ms of a 100m model's 128-token prefill), which belongs to
	 * setting up, not to the first batch. (scores is sized for max_threads: left lazy.) */
	prefault(ws->x, (size_t) max_rows * hp->n_embd * sizeof(float));
	prefault(ws->h, (size_t) max_rows * emb * sizeof(float));
	prefault(ws->q, (size_t) max_rows * q_dim * sizeof(float));
	prefault(ws->k, (size_t) max_rows * kv_dim * sizeof(float));
	prefault(ws->v, (size_t) max_rows * kv_dim * sizeof(float));
	prefault(ws->attn, (size_t) max_rows * q_dim * sizeof(float));
	prefault(ws->gate, (size_t) max_rows * hp->n_ff * sizeof(float));
	prefault(ws->up, (size_t) max_rows * hp->n_ff * sizeof(float));
	prefault(ws->norm_rows, (size_t) max_rows * hp->n_embd * sizeof(float));
	prefault(ws->mm_scratch, MAX(max_scratch(m, max_rows), (size_t) 64));
	*ret = TAKE_PTR(ws);
	return 0;
}

struct forward_ws *forward_ws_free(struct forward_ws *ws)
{
	if (!ws)
		return NULL;
	free(ws->x);
	free(ws->h);
	free(ws->q);
	free(ws->k);
	free(ws->v);
	free(ws->attn);
	free(ws->gate);
	free(ws->up);
	free(ws->scores);
	free(ws->att_groups);
	free(ws->rope_cos);
	free(ws->rope_sin);
	free(ws->norm_rows);
	free(ws->mm_scratch);
	free(ws->pairs);
	free(ws->lora_tmp);
	free(ws);
	return NULL;
}

/* y = rmsnorm(x) * w, as ggml: float squares summed in double, scale in float. */
static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
	double sum = 0.0;
	float mean, scale;

	for (int64_t i = 0; i < n; i++)
		sum += (double) (x[i] * x[i]);
	mean = (float) (sum / (double) n);
	scale = 1.0f / sqrtf(mean + eps);
	for (int64_t i = 0; i < n; i++)
		y[i] = (x[i] * scale) * w[i];
}

/* Per-row cos/sin of every rotated pair, angles as ggml computes them. */
static void rope_tables(const struct model *m, struct forward_ws *ws, const struct forward_batch *b)
{
	const struct model_hparams *hp = &m->hp;
	uint32_t half = hp->rope_dim / 2;
	float theta_scale = powf(hp->rope_base, -2.0f / (float) hp->rope_dim);

	for (uint32_t r = 0; r < b->n_rows; r++) {
		float theta = (float) b->rows[r].pos;

		for (uint32_t i = 0; i < half; i++) {
			float ff = m->rope_freq_factors ? m->rope_freq_factors[i] : 1.0f;
			float th = hp->rope_freq_scale * (theta / ff);

			ws->rope_cos[r * half + i] = cosf(th);
			ws->rope_sin[r * half + i] = sinf(th);
			theta *= theta_scale;
		}
	}
}

static void rope_apply(const struct model *m, const struct forward_ws *ws, float *vec,
		       uint32_t n_heads, uint32_t r)
{
	const struct model_hparams *hp = &m->hp;
	uint32_t half = hp->rope_dim / 2;
	const float *cs = ws->rope_cos + (size_t) r * half, *sn = ws->rope_sin + (size_t) r * half;
	bool neox = hp->rope_style == ROPE_STYLE_NEOX;

	for (uint32_t hd = 0; hd < n_heads; hd++) {
		float *v = vec + (size_t) hd * hp->head_dim;

		for (uint32_t i = 0; i < half; i++) {
			uint32_t a = neox ? i : 2 * i, c = neox ? i + half : 2 * i + 1;
			float x0 = v[a], x1 = v[c];

			v[a] = x0 * cs[i] - x1 * sn[i];
			v[c] = x0 * sn[i] + x1 * cs[i];
		}
	}
}

/* V: the address of KV head `head`'s vector of position pos in layer il of a sequence (the
 * block's next positions of that head follow at head_dim floats each). K, stored transposed
 * (forward.h): for a block-aligned pos, the address of that head's block of keys. */
_Static_assert(KV_BLOCK_TOKENS == QUANT_KEY_BLOCK, "quant_attn_scores_f32() takes KV blocks");
static float *kv_at(const struct model *m, const struct kv_store *kv, const struct forward_seq *s,
		    uint32_t il, bool value, uint32_t pos, uint32_t head)
{
	const struct model_hparams *hp = &m->hp;
	char *page = kv->base + (size_t) s->blocks[pos / KV_BLOCK_TOKENS] * kv->page_bytes;
	size_t off = ((((size_t) il * 2 + value) * hp->n_head_kv + head) * KV_BLOCK_TOKENS +
		      pos % KV_BLOCK_TOKENS) * hp->head_dim;

	return (float *) page + off;
}

/* Asks for bytes at p to be brought into cache (a block of one head's keys or values: the
 * next one is in another page, where the hardware prefetcher does not follow). */
static void prefetch_bytes(const void *p, size_t bytes)
{
	for (size_t o = 0; o < bytes; o += 64)
		__builtin_prefetch((const char *) p + o);
}

struct attn_job {
	const struct model *m;
	struct forward_ws *ws;
	const struct kv_store *kv;
	const struct forward_batch *b;
	uint32_t layer;
	_Atomic long next_task; /* tasks are claimed from the last (the longest rows) down */
};

/* The (row group, head) of attention task t, and the positions its last row attends to. */
static void attn_task(const struct attn_job *j, long t, uint32_t *r0, uint32_t *nq, uint32_t *hd,
		      uint32_t *n_kv_max)
{
	const struct model_hparams *hp = &j->m->hp;
	uint32_t g = (uint32_t) (t / hp->n_head);

	*hd = (uint32_t) (t % hp->n_head);
	*r0 = j->ws->att_groups[g];
	*nq = j->ws->att_groups[g + 1] - *r0;
	*n_kv_max = j->b->rows[*r0 + *nq - 1].pos + 1;
}

/*
 * Lookahead for attention's reads. A task reads a few 4 KiB blocks (one head's keys or values
 * of 16 positions, each in another page, where the hardware prefetcher stops), and computes
 * little on each; fetched one block ahead, a decode step's attention waits on memory most of
 * its time. So a thread claims its next task when it starts one, and asks for the next
 * task's blocks while it works on this one, a slice before each of its own blocks: spread
 * over the work, not one burst that would fill the miss queues, and only blocks this thread
 * reads next (prefetching the next unclaimed tasks instead, which the other threads may
 * take, measured slower: the same lines fetched twice). Holding one claimed task can leave a
 * thread one task behind the others at the end, a few microseconds. Only prefetches: what
 * is read, and the arithmetic, are the same without them.
 */
#define PF_BLOCKS 64 /* blocks planned per task (1024 positions' keys, or 512 positions' K and
			 * V); beyond them the one-block-ahead prefetch in attention() remains */

struct kv_prefetch {
	const char *blk[PF_BLOCKS];
	uint32_t n_blk, lines_per_blk, per_step;
	uint32_t b, line; /* the next line: line of block b (counters: no division per line) */
};

/* Plans the prefetch of task u's blocks (none when u < 0) over `steps` steps. */
static void kv_prefetch_plan(struct kv_prefetch *pf, const struct attn_job *j, long u,
			     uint32_t steps)
{
	const struct model_hparams *hp = &j->m->hp;
	uint32_t group = hp->n_head / hp->n_head_kv;

	pf->n_blk = pf->b = pf->line = 0;
	pf->lines_per_blk = (uint32_t) (KV_BLOCK_TOKENS * hp->head_dim * sizeof(float) / 64);
	if (u >= 0) {
		uint32_t r0, nq, hd, n_kv;
		const struct forward_seq *s;

		attn_task(j, u, &r0, &nq, &hd, &n_kv);
		s = &j->b->seqs[j->b->rows[r0].seq];
		for (int value = 0; value <= 1; value++)
			for (uint32_t p0 = 0; p0 < n_kv && pf->n_blk < PF_BLOCKS; p0 += KV_BLOCK_TOKENS)
				pf->blk[pf->n_blk++] = (const char *) kv_at(j->m, j->kv, s, j->layer,
									    value, p0, hd / group);
	}
	pf->per_step = (pf->n_blk * pf->lines_per_blk + steps - 1) / MAX(steps, 1u);
}

static void kv_prefetch_step(struct kv_prefetch *pf)
{
	for (uint32_t k = 0; k < pf->per_step && pf->b < pf->n_blk; k++) {
		__builtin_prefetch(pf->blk[pf->b] + (size_t) pf->line * 64);
		if (++pf->line == pf->lines_per_blk) {
			pf->line = 0;
			pf->b++;
		}
	}
}

/*
 * Causal attention: one task per (row group, head); a group is up to ATT_Q consecutive rows
 * of one sequence at consecutive positions (a prefill chunk's; a decode row is a group of
 * one). Each reads its own sequence's blocks. Tasks are claimed one ahead, longest
 * first (a prefill's last rows attend to the most positions), so the threads finish
 * together; a task's arithmetic does not depend on who runs it. Q·K runs per KV block
 * on its transposed keys (quant_attn_scores_f32(): one vector lane per key, the group's
 * queries broadcast value by value, so every (key, query) pair is one fma chain over d, the
 * same bits whatever the group): the group's later rows also get scores for positions its earlier rows do not
 * see, which their softmax never reads. Then per row: softmax over its positions
 * (quant_softmax_f32(): its result depends only on the row's scores); then the weighted sums
 * of V, block by block for all the group's rows at once (quant_axpy_f32_rows(): each row's
 * sum the same bits as alone). Meanwhile the thread prefetches its next task's blocks (struct kv_prefetch).
 */
static void attention(void *arg, int ith, int nth)
{
	struct attn_job *j = arg;
	const struct model *m = j->m;
	const struct model_hparams *hp = &m->hp;
	size_t q_dim = (size_t) hp->n_head * hp->head_dim;
	size_t kv_stride = (size_t) hp->head_dim * sizeof(float);
	size_t block_bytes = KV_BLOCK_TOKENS * kv_stride;
	uint32_t group = hp->n_head / hp->n_head_kv, hdim = hp->head_dim, max_ctx = j->ws->max_ctx;
	float scale = 1.0f / sqrtf((float) hdim);
	float *scores = j->ws->scores + (size_t) ith * ATT_Q * max_ctx;
	struct kv_prefetch pf;
	long t, next = atomic_fetch_sub_explicit(&j->next_task, 1, memory_order_relaxed) - 1;

	(void) nth;
	while ((t = next) >= 0) {
		uint32_t r0, nq, hd, n_kv_max, n_blocks;
		const struct forward_seq *s;
		uint32_t kvh;

		/* the task after this one, claimed now so that its blocks can be on their way */
		next = atomic_fetch_sub_explicit(&j->next_task, 1, memory_order_relaxed) - 1;
		attn_task(j, t, &r0, &nq, &hd, &n_kv_max);
		s = &j->b->seqs[j->b->rows[r0].seq];
		kvh = hd / group; /* query head i reads KV head i / group */
		n_blocks = (n_kv_max + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
		kv_prefetch_plan(&pf, j, next, 2 * n_blocks);
		for (uint32_t p0 = 0; p0 < n_kv_max; p0 += KV_BLOCK_TOKENS) {
			const float *k = kv_at(m, j->kv, s, j->layer, false, p0, kvh);
			uint32_t np = MIN((uint32_t) KV_BLOCK_TOKENS, n_kv_max - p0);

			if (p0 + KV_BLOCK_TOKENS < n_kv_max)
				prefetch_bytes(kv_at(m, j->kv, s, j->layer, false, p0 + KV_BLOCK_TOKENS, kvh),
					       block_bytes);
			else
				prefetch_bytes(kv_at(m, j->kv, s, j->layer, true, 0, kvh), block_bytes);
			kv_prefetch_step(&pf);
			quant_attn_scores_f32(hdim, k, np, j->ws->q + (size_t) r0 * q_dim + (size_t) hd * hdim,
					      q_dim, nq, scores + p0, max_ctx);
		}
		/* softmax per row, then the weighted sums of V for all the group's rows block by
		 * block (quant_axpy_f32_rows(): each row's sum in its own key order, as alone) */
		float *out0 = j->ws->attn + (size_t) r0 * q_dim + (size_t) hd * hdim;
		int64_t counts[ATT_Q];

		for (uint32_t i = 0; i < nq; i++) {
			quant_softmax_f32(scores + (size_t) i * max_ctx, j->b->rows[r0 + i].pos + 1, scale);
			memset(out0 + (size_t) i * q_dim, 0, hdim * sizeof(float));
		}
		for (uint32_t p0 = 0; p0 < n_kv_max; p0 += KV_BLOCK_TOKENS) {
			const float *v = kv_at(m, j->kv, s, j->layer, true, p0, kvh);

			if (p0 + KV_BLOCK_TOKENS < n_kv_max)
				prefetch_bytes(kv_at(m, j->kv, s, j->layer, true, p0 + KV_BLOCK_TOKENS, kvh),
					       block_bytes);
			kv_prefetch_step(&pf);
			for (uint32_t i = 0; i < nq; i++) {
				int64_t left = (int64_t) j->b->rows[r0 + i].pos + 1 - p0;

				counts[i] = MAX(MIN(left, (int64_t) KV_BLOCK_TOKENS), (int64_t) 0);
			}
			quant_axpy_f32_rows(hdim, scores + p0, max_ctx, counts, nq, v,
					    kv_stride / sizeof(float), out0, q_dim);
		}
	}
}

/* Claims the next [*b, *e) of `step` units out of n from a shared counter; false when none is
 * left. Parts of a job claimed this way, rather than split evenly up front, let a thread that
 * is late or descheduled (another process took its CPU) do less, instead of the others
 * waiting for its fixed half. */
static bool claim_range(_Atomic long *next, long n, long step, long *b, long *e)
{
	long i = atomic_fetch_add_explicit(next, step, memory_order_relaxed);

	if (i >= n)
		return false;
	*b = i;
	*e = MIN(i + step, n);
	return true;
}

/* Biases, RoPE and the K/V store of the batch's rows (of one layer), claimed by the threads
 * in runs of a KV block's worth (16 rows) so that two threads rarely write the same
 * transposed key block. */
struct rope_kv_job {
	_Atomic long next; /* claim_range(), 16 rows at a time */
	const struct model *m;
	struct forward_ws *ws;
	const struct kv_store *kv;
	const struct forward_batch *b;
	uint32_t layer;
};

static void rope_kv_part(void *arg, int ith, int nth)
{
	struct rope_kv_job *j = arg;
	const struct model *m = j->m;
	const struct model_hparams *hp = &m->hp;
	const struct model_layer *L = &m->layers[j->layer];
	size_t kv_dim = (size_t) hp->n_head_kv * hp->head_dim;
	size_t q_dim = (size_t) hp->n_head * hp->head_dim;
	long tb, te;

	(void) ith;
	(void) nth;
	while (claim_range(&j->next, (long) j->b->n_rows, KV_BLOCK_TOKENS, &tb, &te))
		for (uint32_t t = (uint32_t) tb; t < (uint32_t) te; t++) {
			const struct forward_row *row = &j->b->rows[t];
			const struct forward_seq *s = &j->b->seqs[row->seq];
			float *q = j->ws->q + t * q_dim, *k = j->ws->k + t * kv_dim;
			float *v = j->ws->v + t * kv_dim;

			if (L->bq) {
				for (size_t i = 0; i < q_dim; i++)
					q[i] += L->bq[i];
				for (size_t i = 0; i < kv_dim; i++) {
					k[i] += L->bk[i];
					v[i] += L->bv[i];
				}
			}
			rope_apply(m, j->ws, q, hp->n_head, t);
			rope_apply(m, j->ws, k, hp->n_head_kv, t);
			for (uint32_t hd = 0; hd < hp->n_head_kv; hd++) {
				size_t o = (size_t) hd * hp->head_dim;
				/* K goes in transposed: value d of the block's token i at d * 16 + i */
				float *kt = kv_at(m, j->kv, s, j->layer, false,
						  row->pos / KV_BLOCK_TOKENS * KV_BLOCK_TOKENS, hd);

				for (uint32_t d = 0; d < hp->head_dim; d++)
					kt[(size_t) d * KV_BLOCK_TOKENS + row->pos % KV_BLOCK_TOKENS] = k[o + d];
				memcpy(kv_at(m, j->kv, s, j->layer, true, row->pos, hd), v + o,
				       hp->head_dim * sizeof(float));
			}
		}
}

/* Splits the batch's rows into attention groups (see attention()); returns their count. */
static uint32_t attention_groups(struct forward_ws *ws, const struct forward_batch *b)
{
	uint32_t n = 0;

	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t first = n ? ws->att_groups[n - 1] : 0;

		if (n && r - first < ATT_Q && b->rows[r].seq == b->rows[r - 1].seq &&
		    b->rows[r].pos == b->rows[r - 1].pos + 1)
			continue;
		ws->att_groups[n++] = r;
	}
	ws->att_groups[n] = b->n_rows;
	return n;
}

static float silu(float x)
{
	return x / (1.0f + expf(-x));
}

#if defined(__x86_64__)
/* SiLU(g)·u for 8 lanes: g / (1 + exp(-g)) · u with exp8_avx2() (exp-avx2.h): within
 * 2.1e-7 relative (~3.5 ulp) of the double-precision value over [-100, 100] (beyond ±87 SiLU
 * is g or 0 to float precision anyway). */
__attribute__((target("avx2,fma"))) static inline __m256 silu_mul8(__m256 g, __m256 u)
{
	const __m256 ex = exp8_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));

	return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), ex)), u);
}

/* g[i] = SiLU(g[i])·u[i]; a tail shorter than 8 goes through the same lanes (padded), so
 * every value gets the same bits whatever span it is part of. */
__attribute__((target("avx2,fma"))) static void silu_mul_avx2(float *g, const float *u, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(g + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
	if (i < n) {
		float tg[8] = { 0 }, tu[8] = { 0 };

		memcpy(tg, g + i, (n - i) * sizeof(float));
		memcpy(tu, u + i, (n - i) * sizeof(float));
		_mm256_storeu_ps(tg, silu_mul8(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu)));
		memcpy(g + i, tg, (n - i) * sizeof(float));
	}
}

static bool simd_silu(void)
{
	static int cached = -1;

	/* quant's dispatch checked AVX2 + FMA for every level but scalar */
	if (cached < 0)
		cached = strcmp(quant_simd_level(), "scalar") != 0;
	return cached;
}
#endif

/* g[i] = SiLU(g[i])·u[i] for i < n */
static void silu_mul_span(float *g, const float *u, size_t n)
{
#if defined(__x86_64__)
	if (simd_silu()) {
		silu_mul_avx2(g, u, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		g[i] = silu(g[i]) * u[i];
}

/* Elementwise and per-row work spread over the pool when there is enough of it to pay for a
 * job (a few microseconds): the same arithmetic per element or row whoever runs it. */
#define PARALLEL_MIN_ELEMENTS 4096

struct ew_job {
	_Atomic long next; /* claim_range() */
	float *gate;
	const float *up;
	size_t n;
	/* rmsnorm rows */
	float *y;
	const float *x, *w;
	uint32_t n_rows, dim;
	float eps;
};

static void silu_mul_part(void *arg, int ith, int nth)
{
	struct ew_job *j = arg;
	long b, e, step = MAX(((long) j->n / (nth * 4) + 15) / 16 * 16, 16L);

	(void) ith;
	while (claim_range(&j->next, (long) j->n, step, &b, &e))
		silu_mul_span(j->gate + b, j->up + b, (size_t) (e - b));
}

/* gate = silu(gate) * up over n values */
static void silu_mul(struct threadpool *pool, float *gate, const float *up, size_t n)
{
	struct ew_job j = { .gate = gate, .up = up, .n = n };

	if (n >= PARALLEL_MIN_ELEMENTS)
		threadpool_run(pool, silu_mul_part, &j);
	else
		silu_mul_part(&j, 0, 1);
}

static void rmsnorm_part(void *arg, int ith, int nth)
{
	struct ew_job *j = arg;
	long b, e, step = MAX((long) j->n_rows / (nth * 4), 1L);

	(void) ith;
	while (claim_range(&j->next, (long) j->n_rows, step, &b, &e))
		for (long t = b; t < e; t++)
			rmsnorm(j->y + (size_t) t * j->dim, j->x + (size_t) t * j->dim, j->w, j->dim,
				j->eps);
}

/* rmsnorm of n_rows rows of dim values each */
static void rmsnorm_rows(struct threadpool *pool, float *y, const float *x, const float *w,
			 uint32_t n_rows, uint32_t dim, float eps)
{
	struct ew_job j = { .y = y, .x = x, .w = w, .n_rows = n_rows, .dim = dim, .eps = eps };

	if (n_rows > 1 && (size_t) n_rows * dim >= PARALLEL_MIN_ELEMENTS)
		threadpool_run(pool, rmsnorm_part, &j);
	else
		rmsnorm_part(&j, 0, 1);
}

struct keyed_pair {
	uint64_t order;
	uint32_t row;
	uint32_t slot;
	struct lora_pair pair;
};

static int cmp_keyed_pair(const void *a, const void *b)
{
	const struct keyed_pair *x = a, *y = b;

	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	if (x->row != y->row)
		return x->row < y->row ? -1 : 1;
	return (x->slot > y->slot) - (x->slot < y->slot);
}

/* Collects the (row, adapter matrix, scale) pairs of one projection into dst, grouped by
 * adapter (segments, in `order`) and by row within a segment. Returns the count. */
static size_t collect_pairs(struct forward_ws *ws, struct keyed_pair *keyed,
			    const struct forward_batch *b, uint32_t layer, enum lora_target target,
			    struct lora_pair *dst)
{
	size_t n = 0;

	for (uint32_t r = 0; r < b->n_rows; r++) {
		const struct forward_row *row = &b->rows[r];

		for (uint32_t i = 0; i < row->n_loras && n < ws->max_pairs; i++) {
			const struct forward_lora *l = &b->loras[row->lora_first + i];
			const struct lora_resident_mat *mat;

			if (layer >= l->res->n_layer)
				continue;
			mat = l->res->mats[(size_t) layer * LORA_TARGET_COUNT_ + target];
			if (!mat)
				continue;
			keyed[n++] = (struct keyed_pair){
				.order = l->order,
				.row = r,
				.slot = i,
				.pair = { .mat = mat, .row = r, .scale = l->scale * mat->scale },
			};
		}
	}
	qsort(keyed, n, sizeof(*keyed), cmp_keyed_pair);
	for (size_t i = 0; i < n; i++)
		dst[i] = keyed[i].pair;
	return n;
}

struct lora_ctx {
	struct forward_ws *ws;
	struct keyed_pair *keyed;
	const struct forward_batch *b;
	bool any;
};

/* Fills outs[i] for weights ws[i] (LoRA target targets[i]) of layer `layer`, writing to ys[i]. */
static void fill_outs(struct lora_ctx *lc, uint32_t layer, const struct weight *const *ws,
		      const enum lora_target *targets, float *const *ys, int n, struct matmul_out *outs)
{
	struct forward_ws *w = lc->ws;

	for (int i = 0; i < n; i++) {
		outs[i] = (struct matmul_out){ .w = ws[i], .y = ys[i] };
		if (!lc->any)
			continue;
		outs[i].pairs = w->pairs + (size_t) i * w->max_pairs;
		outs[i].lora_tmp = w->lora_tmp + (size_t) i * w->max_pairs * w->lora_tmp_rank;
		outs[i].n_pairs = collect_pairs(w, lc->keyed, lc->b, layer, targets[i],
						(struct lora_pair *) outs[i].pairs);
	}
}

/* ys[i] = ws[i]·x plus the batch's LoRA deltas, in one job when the weights allow it (then
 * with the epilogue, if any, and true: the caller runs what the epilogue does otherwise). */
static bool project(struct lora_ctx *lc, struct threadpool *pool, uint32_t layer,
		    const struct weight *const *ws, const enum lora_target *targets,
		    float *const *ys, int n, const float *x, uint32_t n_rows,
		    matmul_epilogue_fn epilogue, void *epilogue_arg)
{
	struct matmul_out outs[LORA_GROUP];

	assert(n <= LORA_GROUP);
	fill_outs(lc, layer, ws, targets, ys, n, outs);
	if (matmul_group_ok(ws, n) && (!epilogue || ws[0]->n_out == ws[n - 1]->n_out)) {
		matmul_group(pool, outs, n, x, n_rows, lc->ws->mm_scratch, epilogue, epilogue_arg);
		return true;
	}
	for (int i = 0; i < n; i++)
		matmul_group(pool, &outs[i], 1, x, n_rows, lc->ws->mm_scratch, NULL, NULL);
	return !epilogue;
}

/* gate = silu(gate) * up on columns [c0, c0 + nc) of every row (the gate/up epilogue). */
struct silu_cols {
	float *gate;
	const float *up;
	uint32_t n_rows, n_ff;
};

static void silu_cols(void *arg, int64_t c0, int64_t nc)
{
	struct silu_cols *s = arg;

	for (uint32_t t = 0; t < s->n_rows; t++) {
		silu_mul_span(s->gate + (size_t) t * s->n_ff + c0, s->up + (size_t) t * s->n_ff + c0,
			      (size_t) nc);
	}
}

static int check_batch(const struct model *m, struct forward_ws *ws, const struct forward_batch *b,
		       bool *any_lora, uint32_t *max_rank)
{
	size_t n_pairs = 0;

	if (b->n_rows == 0 || b->n_rows > ws->max_rows)
		return -E2BIG;
	*any_lora = false;
	*max_rank = 0;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		const struct forward_row *row = &b->rows[r];
		const struct forward_seq *s = &b->seqs[row->seq];

		if (row->token < 0 || (uint32_t) row->token >= m->hp.n_vocab)
			return -EINVAL;
		if (row->pos >= ws->max_ctx)
			return -E2BIG;
		if (row->pos / KV_BLOCK_TOKENS >= s->n_blocks)
			return -EINVAL;
		if (row->logits_index >= (int32_t) ws->max_rows)
			return -EINVAL;
		for (uint32_t i = 0; i < row->n_loras; i++) {
			const struct lora_resident *res = b->loras[row->lora_first + i].res;

			*any_lora = true;
			*max_rank = MAX(*max_rank, res->max_rank);
			n_pairs++;
		}
	}
	if (n_pairs > ws->max_pairs || *max_rank > LORA_MAX_RANK)
		return -E2BIG;
	return 0;
}

int model_forward(const struct model *m, struct forward_ws *ws, struct threadpool *pool,
		  const struct kv_store *kv, const struct forward_batch *b)
{
	const struct model_hparams *hp = &m->hp;
	uint32_t n = b->n_rows, max_rank, n_logits = 0, n_groups;
	_cleanup_free_ struct keyed_pair *keyed = NULL;
	struct lora_ctx lc = { .ws = ws, .b = b };
	int r;

	assert_return(m && ws && pool && kv && b, -EINVAL);
	r = check_batch(m, ws, b, &lc.any, &max_rank);
	if (r < 0)
		return r;
	if (lc.any) {
		if (ws->lora_tmp_rank < max_rank) {
			float *t = realloc(ws->lora_tmp, (size_t) LORA_GROUP * ws->max_pairs * max_rank *
							       sizeof(float));
			if (!t)
				return -ENOMEM;
			ws->lora_tmp = t;
			ws->lora_tmp_rank = max_rank;
		}
		keyed = malloc((size_t) ws->max_pairs * sizeof(*keyed));
		if (!keyed)
			return -ENOMEM;
		lc.keyed = keyed;
	}

	for (uint32_t t = 0; t < n; t++) {
		const char *row = (const char *) m->tok_embd.data +
				  (size_t) b->rows[t].token * m->tok_embd.row_bytes;

		quant_dequantize_row(m->tok_embd.type, row, ws->x + (size_t) t * hp->n_embd, hp->n_embd);
	}
	rope_tables(m, ws, b);
	n_groups = attention_groups(ws, b);

	for (uint32_t il = 0; il < hp->n_layer; il++) {
		const struct model_layer *L = &m->layers[il];
		struct attn_job aj = { .m = m, .ws = ws, .kv = kv, .b = b, .layer = il,
				       .next_task = (long) n_groups * hp->n_head };

		rmsnorm_rows(pool, ws->h, ws->x, L->attn_norm, n, hp->n_embd, hp->rms_eps);
		{
			const struct weight *w3[] = { &L->wq, &L->wk, &L->wv };
			static const enum lora_target t3[] = { LORA_TARGET_Q, LORA_TARGET_K, LORA_TARGET_V };
			float *y3[] = { ws->q, ws->k, ws->v };

			project(&lc, pool, il, w3, t3, y3, 3, ws->h, n, NULL, NULL);
		}
		{
			struct rope_kv_job rj = { .m = m, .ws = ws, .kv = kv, .b = b, .layer = il };

			/* in the pool too: a serial stretch here would leave the workers spinning, then
			 * yielding their CPUs, right before attention needs them */
			if (n > 1)
				threadpool_run(pool, rope_kv_part, &rj);
			else
				rope_kv_part(&rj, 0, 1);
		}
		threadpool_run(pool, attention, &aj);

		/* x += Wo·attn */
		{
			const struct weight *w1[] = { &L->wo };
			static const enum lora_target t1[] = { LORA_TARGET_O };
			float *y1[] = { ws->h };

			project(&lc, pool, il, w1, t1, y1, 1, ws->attn, n, NULL, NULL);
		}
		for (size_t i = 0; i < (size_t) n * hp->n_embd; i++)
			ws->x[i] += ws->h[i];

		rmsnorm_rows(pool, ws->h, ws->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps);
		{
			const struct weight *w2[] = { &L->ffn_gate, &L->ffn_up };
			static const enum lora_target t2[] = { LORA_TARGET_GATE, LORA_TARGET_UP };
			float *y2[] = { ws->gate, ws->up };
			struct silu_cols sc = { .gate = ws->gate, .up = ws->up, .n_rows = n,
						.n_ff = hp->n_ff };

			/* SiLU(gate)·up as each chunk of columns is done, in the same job */
			if (!project(&lc, pool, il, w2, t2, y2, 2, ws->h, n, silu_cols, &sc))
				silu_mul(pool, ws->gate, ws->up, (size_t) n * hp->n_ff);
		}
		{
			const struct weight *w1[] = { &L->ffn_down };
			static const enum lora_target t1[] = { LORA_TARGET_DOWN };
			float *y1[] = { ws->h };

			project(&lc, pool, il, w1, t1, y1, 1, ws->gate, n, NULL, NULL);
		}
		for (size_t i = 0; i < (size_t) n * hp->n_embd; i++)
			ws->x[i] += ws->h[i];
	}

	/* final norm of the rows that want logits, then one output matmul over them */
	for (uint32_t t = 0; t < n; t++) {
		int32_t li = b->rows[t].logits_index;

		if (li < 0)
			continue;
		rmsnorm(ws->norm_rows + (size_t) li * hp->n_embd, ws->x + (size_t) t * hp->n_embd,
			m->output_norm, hp->n_embd, hp->rms_eps);
		n_logits = MAX(n_logits, (uint32_t) li + 1);
	}
	if (n_logits)
		matmul(pool, &m->output, ws->norm_rows, n_logits, b->logits, ws->mm_scratch);
	return 0;
}
