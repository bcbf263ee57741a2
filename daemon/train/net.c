/* SPDX-License-Identifier: MIT */
/*
 * net.c: parameters, forward with saved activations, and backward of a llama/qwen2 model for
 * training (see net.h). The layer order and arithmetic follow the engine's forward pass
 * (forward.c): RMSNorm → Q/K/V (+ biases) → RoPE → causal GQA attention → O → residual →
 * RMSNorm → gate/up → SiLU·up → down → residual; final norm; output (tied or not).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/model.h"
#include "../engine/quant.h"
#include "../engine/sgmv.h"
#include "net.h"
#include "ops.h"

#define HEAD_ROWS 256 /* logits rows made at a time */

/* Saved activations of one layer (n = tokens of the batch). */
struct acts {
	float *x_in;             /* [n][E] the layer's input (always kept) */
	float *xn1, *rs1;        /* [n][E], [n] */
	float *q, *k, *v;        /* [n][Hq·D], [n][Hkv·D] (q, k after RoPE) */
	float *probs;            /* [n_seq][Hq][len][len] */
	float *ao;               /* [n][Hq·D] attention output */
	float *x_mid;            /* [n][E] after the attention residual */
	float *xn2, *rs2;        /* [n][E], [n] */
	float *g, *u, *h;        /* [n][F] gate, up, silu(gate)·up */
	float *lu[LORA_TARGET_COUNT_];  /* [n][r] scale · A·x_dropped, LoRA targets only */
	float *lxd[LORA_TARGET_COUNT_]; /* [n][n_in] the dropped-out input; NULL without dropout */
};

struct lora {
	struct train_param *a, *b; /* NULL when the projection is not a target */
};

struct layer {
	struct weight w[LORA_TARGET_COUNT_]; /* full mode: F32 views of the parameters */
	struct train_param *pw[LORA_TARGET_COUNT_]; /* full mode; NULL in LoRA mode */
	const float *attn_norm, *ffn_norm, *bq, *bk, *bv;
	struct train_param *p_attn_norm, *p_ffn_norm, *p_bq, *p_bk, *p_bv; /* full mode */
	struct lora lora[LORA_TARGET_COUNT_];
};

struct train_net {
	const struct model *m; /* borrowed */
	struct train_net_opts o;
	float lora_scale;
	struct train_param *params; /* owned, n_params */
	size_t n_params, cap_params;
	struct layer *layers;       /* owned, n_layer */
	struct weight tok_embd, output;
	const float *out_norm;
	struct train_param *p_tok_embd, *p_output, *p_out_norm; /* full mode */
	uint64_t stream;
	int err; /* the first failure of an operation in this step (-ENOMEM) */

	/* activations, sized for n_tok tokens and n_seq·len² probabilities */
	int64_t n_tok, n_probs;
	void *arena; /* owned: every activation buffer */
	struct acts *acts; /* n_layer */
	float *x_final, *xf, *rsf;
	float *rope_cos, *rope_sin;
	float *dx, *dtmp, *dq, *dk, *dv, *dao, *dg, *du, *dh, *dlora, *dlora2, *head;
};

static const char *const gguf_names[LORA_TARGET_COUNT_] = {
	"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
	return (double) (splitmix64(s) >> 11) / 9007199254740992.0;
}

static struct train_param *param_add(struct train_net *n, const char *name, int64_t rows,
				     int64_t cols, bool decay)
{
	struct train_param *p;

	if (n->n_params == n->cap_params)
		return NULL; /* sized exactly in train_net_new() */
	p = &n->params[n->n_params];
	*p = (struct train_param){ .rows = rows, .cols = cols, .decay = decay, .target = -1 };
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->w = calloc((size_t) (rows * cols), sizeof(float));
	p->g = calloc((size_t) (rows * cols), sizeof(float));
	if (!p->w || !p->g) {
		free(p->w);
		free(p->g);
		return NULL;
	}
	n->n_params++;
	return p;
}

/* A trainable F32 copy of a model matrix, and a weight view of it for the products. */
static struct train_param *param_from_weight(struct train_net *n, const char *name,
					     const struct weight *w, struct weight *view)
{
	struct train_param *p = param_add(n, name, w->n_out, w->n_in, true);

	if (!p)
		return NULL;
	for (int64_t r = 0; r < w->n_out; r++)
		quant_dequantize_row(w->type, (const uint8_t *) w->data + (size_t) r * w->row_bytes,
				     p->w + r * w->n_in, w->n_in);
	*view = (struct weight){ .data = p->w, .type = GGML_TYPE_F32, .n_in = w->n_in,
				 .n_out = w->n_out, .row_bytes = (size_t) w->n_in * 4 };
	return p;
}

static struct train_param *param_from_vector(struct train_net *n, const char *name,
					     const float *v, int64_t len, const float **view)
{
	struct train_param *p = param_add(n, name, 1, len, false);

	if (!p)
		return NULL;
	memcpy(p->w, v, (size_t) len * sizeof(float));
	*view = p->w;
	return p;
}

static const struct weight *model_weight(const struct model_layer *L, int t)
{
	const struct weight *w[LORA_TARGET_COUNT_] = { &L->wq, &L->wk, &L->wv, &L->wo,
						       &L->ffn_gate, &L->ffn_up, &L->ffn_down };
	return w[t];
}

static int setup_full(struct train_net *n, struct errmsg *e)
{
	const struct model *m = n->m;
	char name[96];

	if (!param_from_weight(n, "token_embd.weight", &m->tok_embd, &n->tok_embd))
		return -ENOMEM;
	n->p_tok_embd = &n->params[n->n_params - 1];
	for (uint32_t l = 0; l < m->hp.n_layer; l++) {
		const struct model_layer *ML = &m->layers[l];
		struct layer *L = &n->layers[l];

		snprintf(name, sizeof(name), "blk.%" PRIu32 ".attn_norm.weight", l);
		if (!(L->p_attn_norm = param_from_vector(n, name, ML->attn_norm, m->hp.n_embd,
							 &L->attn_norm)))
			return -ENOMEM;
		for (int t = 0; t < LORA_TARGET_COUNT_; t++) {
			if (t == LORA_TARGET_GATE) {
				snprintf(name, sizeof(name), "blk.%" PRIu32 ".ffn_norm.weight", l);
				if (!(L->p_ffn_norm = param_from_vector(n, name, ML->ffn_norm,
									m->hp.n_embd, &L->ffn_norm)))
					return -ENOMEM;
			}
			snprintf(name, sizeof(name), "blk.%" PRIu32 ".%s.weight", l, gguf_names[t]);
			if (!(L->pw[t] = param_from_weight(n, name, model_weight(ML, t), &L->w[t])))
				return -ENOMEM;
			if (t <= LORA_TARGET_V && ML->bq) {
				const float *src = t == LORA_TARGET_Q ? ML->bq : t == LORA_TARGET_K ? ML->bk : ML->bv;
				const float **dst = t == LORA_TARGET_Q ? &L->bq : t == LORA_TARGET_K ? &L->bk : &L->bv;
				struct train_param **pd = t == LORA_TARGET_Q   ? &L->p_bq
							  : t == LORA_TARGET_K ? &L->p_bk
									       : &L->p_bv;

				snprintf(name, sizeof(name), "blk.%" PRIu32 ".%s.bias", l, gguf_names[t]);
				if (!(*pd = param_from_vector(n, name, src, L->w[t].n_out, dst)))
					return -ENOMEM;
			}
		}
	}
	if (!(n->p_out_norm = param_from_vector(n, "output_norm.weight", m->output_norm,
						m->hp.n_embd, &n->out_norm)))
		return -ENOMEM;
	if (m->hp.tied_output) {
		n->output = n->tok_embd;
		n->p_output = n->p_tok_embd;
	} else {
		if (!(n->p_output = param_from_weight(n, "output.weight", &m->output, &n->output)))
			return -ENOMEM;
	}
	return 0;
}

static int setup_lora(struct train_net *n, struct errmsg *e)
{
	const struct model *m = n->m;
	const struct train_net_opts *o = &n->o;
	char name[96];

	n->tok_embd = m->tok_embd;
	n->output = m->output;
	n->out_norm = m->output_norm;
	for (uint32_t l = 0; l < m->hp.n_layer; l++) {
		const struct model_layer *ML = &m->layers[l];
		struct layer *L = &n->layers[l];

		L->attn_norm = ML->attn_norm;
		L->ffn_norm = ML->ffn_norm;
		L->bq = ML->bq;
		L->bk = ML->bk;
		L->bv = ML->bv;
		for (int t = 0; t < LORA_TARGET_COUNT_; t++) {
			const struct weight *w = model_weight(ML, t);
			struct train_param *a, *b;
			uint64_t s;
			double bound;

			L->w[t] = *w;
			L->w[t].packed = NULL; /* the products read the stored rows */
			if (!(o->targets & (1u << t)))
				continue;
			snprintf(name, sizeof(name), "blk.%" PRIu32 ".%s.weight.lora_a", l, gguf_names[t]);
			if (!(a = param_add(n, name, o->rank, w->n_in, true)))
				return -ENOMEM;
			snprintf(name, sizeof(name), "blk.%" PRIu32 ".%s.weight.lora_b", l, gguf_names[t]);
			if (!(b = param_add(n, name, w->n_out, o->rank, true)))
				return -ENOMEM;
			a->layer = b->layer = l;
			a->target = b->target = t;
			b->lora_b = true;
			/* PEFT: A by kaiming_uniform_(a=√5), i.e. U(-1/√n_in, 1/√n_in); B = 0. One
			 * stream per (seed, layer, target), so a subset of targets keeps its values. */
			s = o->seed ^ ((uint64_t) l << 32 | (uint64_t) t << 8);
			(void) splitmix64(&s);
			bound = 1.0 / sqrt((double) w->n_in);
			for (int64_t i = 0; i < a->rows * a->cols; i++)
				a->w[i] = (float) ((2.0 * uniform01(&s) - 1.0) * bound);
			if (o->init_b_std > 0)
				for (int64_t i = 0; i < b->rows * b->cols; i += 2) {
					double u1 = uniform01(&s) + 1e-300, u2 = uniform01(&s);
					double r = sqrt(-2.0 * log(u1)) * o->init_b_std;

					b->w[i] = (float) (r * cos(2 * M_PI * u2));
					if (i + 1 < b->rows * b->cols)
						b->w[i + 1] = (float) (r * sin(2 * M_PI * u2));
				}
			L->lora[t] = (struct lora){ .a = a, .b = b };
		}
	}
	return 0;
}

int train_net_new(const struct model *m, const struct train_net_opts *o, struct train_net **ret,
		  struct errmsg *e)
{
	_cleanup_(train_net_freep) struct train_net *n = NULL;
	int r;

	assert_return(m && o && ret, -EINVAL);
	if (o->mode == TRAIN_MODE_LORA) {
		if (o->rank == 0)
			return errmsg_set(e, -EINVAL, "LoRA rank must be at least 1");
		if (!(o->targets & ((1u << LORA_TARGET_COUNT_) - 1)))
			return errmsg_set(e, -EINVAL, "no LoRA targets");
		if (!(o->dropout >= 0 && o->dropout < 1))
			return errmsg_set(e, -EINVAL, "dropout must be in [0, 1)");
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->m = m;
	n->o = *o;
	n->lora_scale = o->mode == TRAIN_MODE_LORA ? o->alpha / (float) o->rank : 0.0f;
	n->cap_params = (size_t) m->hp.n_layer * 16 + 8;
	n->params = calloc(n->cap_params, sizeof(*n->params));
	n->layers = calloc(m->hp.n_layer, sizeof(*n->layers));
	if (!n->params || !n->layers)
		return -ENOMEM;
	r = o->mode == TRAIN_MODE_FULL ? setup_full(n, e) : setup_lora(n, e);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(n);
	return 0;
}

struct train_net *train_net_free(struct train_net *n)
{
	if (!n)
		return NULL;
	for (size_t i = 0; i < n->n_params; i++) {
		free(n->params[i].w);
		free(n->params[i].g);
	}
	free(n->params);
	free(n->layers);
	free(n->acts);
	free(n->arena);
	free(n);
	return NULL;
}

size_t train_net_n_params(const struct train_net *n)
{
	return n->n_params;
}

struct train_param *train_net_param(struct train_net *n, size_t i)
{
	return i < n->n_params ? &n->params[i] : NULL;
}

uint64_t train_net_n_values(const struct train_net *n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n->n_params; i++)
		v += (uint64_t) (n->params[i].rows * n->params[i].cols);
	return v;
}

const struct model *train_net_model(const struct train_net *n)
{
	return n->m;
}

float train_net_lora_scale(const struct train_net *n)
{
	return n->lora_scale;
}

void train_net_zero_grad(struct train_net *n)
{
	for (size_t i = 0; i < n->n_params; i++)
		memset(n->params[i].g, 0, (size_t) (n->params[i].rows * n->params[i].cols) * 4);
}

void train_net_set_stream(struct train_net *n, uint64_t stream)
{
	n->stream = stream;
}

/* ---- activation memory ---- */

struct carve {
	char *base;
	size_t off;
};

static float *take(struct carve *c, int64_t count)
{
	float *p = c->base ? (float *) (c->base + c->off) : NULL;

	c->off += ((size_t) count * sizeof(float) + 63) & ~(size_t) 63;
	return p;
}

static uint32_t lora_in(const struct model_hparams *hp, int t)
{
	return t == LORA_TARGET_O ? hp->n_head * hp->head_dim
	       : t == LORA_TARGET_DOWN ? hp->n_ff : hp->n_embd;
}

/* Lays out (base NULL: measures) the buffers for n tokens and np probabilities. */
static void carve_all(struct train_net *n, struct carve *c, int64_t nt, int64_t np)
{
	const struct model_hparams *hp = &n->m->hp;
	int64_t E = hp->n_embd, Q = (int64_t) hp->n_head * hp->head_dim;
	int64_t KV = (int64_t) hp->n_head_kv * hp->head_dim, F = hp->n_ff;
	int64_t maxw = E > F ? E : F, r = n->o.mode == TRAIN_MODE_LORA ? n->o.rank : 1;
	struct acts shared = { 0 };
	bool drop = n->o.mode == TRAIN_MODE_LORA && n->o.dropout > 0;

	maxw = maxw > Q ? maxw : Q;
	for (uint32_t l = 0; l < hp->n_layer; l++) {
		struct acts *a = &n->acts[l], *s = n->o.recompute && l > 0 ? &shared : a;

		a->x_in = take(c, nt * E);
		if (s != a) { /* recompute: every layer shares layer 0's other buffers */
			struct acts keep = *a;

			*a = n->acts[0];
			a->x_in = keep.x_in;
			continue;
		}
		a->xn1 = take(c, nt * E);
		a->rs1 = take(c, nt);
		a->q = take(c, nt * Q);
		a->k = take(c, nt * KV);
		a->v = take(c, nt * KV);
		a->probs = take(c, np);
		a->ao = take(c, nt * Q);
		a->x_mid = take(c, nt * E);
		a->xn2 = take(c, nt * E);
		a->rs2 = take(c, nt);
		a->g = take(c, nt * F);
		a->u = take(c, nt * F);
		a->h = take(c, nt * F);
		for (int t = 0; t < LORA_TARGET_COUNT_; t++) {
			a->lu[t] = n->layers[l].lora[t].a ? take(c, nt * r) : NULL;
			a->lxd[t] = n->layers[l].lora[t].a && drop ? take(c, nt * lora_in(hp, t)) : NULL;
		}
	}
	n->x_final = take(c, nt * E);
	n->xf = take(c, nt * E);
	n->rsf = take(c, nt);
	n->rope_cos = take(c, nt * (hp->rope_dim / 2));
	n->rope_sin = take(c, nt * (hp->rope_dim / 2));
	n->dx = take(c, nt * E);
	n->dtmp = take(c, nt * maxw);
	n->dq = take(c, nt * Q);
	n->dk = take(c, nt * KV);
	n->dv = take(c, nt * KV);
	n->dao = take(c, nt * Q);
	n->dg = take(c, nt * F);
	n->du = take(c, nt * F);
	n->dh = take(c, nt * F);
	n->dlora = take(c, nt * r);
	n->dlora2 = take(c, nt * maxw);
	n->head = take(c, (int64_t) HEAD_ROWS * hp->n_vocab);
}

static int ensure_acts(struct train_net *n, int64_t nt, int64_t np)
{
	struct carve c = { 0 };

	if (n->arena && nt <= n->n_tok && np <= n->n_probs)
		return 0;
	free(n->arena);
	n->arena = NULL;
	if (!n->acts && !(n->acts = calloc(n->m->hp.n_layer, sizeof(*n->acts))))
		return -ENOMEM;
	carve_all(n, &c, nt, np);
	n->arena = aligned_alloc(64, c.off);
	if (!n->arena)
		return -ENOMEM;
	c = (struct carve){ .base = n->arena };
	carve_all(n, &c, nt, np);
	n->n_tok = nt;
	n->n_probs = np;
	return 0;
}

/* Keeps the first error of the step's operations; the step returns it at its end. */
static void note(struct train_net *n, int r)
{
	if (r < 0 && n->err == 0)
		n->err = r;
}

/* ---- projections with LoRA ---- */

static bool dropped(uint64_t key, float p)
{
	uint64_t s = key;

	return (double) (splitmix64(&s) >> 11) / 9007199254740992.0 < p;
}

static uint64_t drop_key(const struct train_net *n, uint32_t l, int t)
{
	uint64_t s = n->o.seed ^ 0x5eedd20b0b5eedull;

	s ^= n->stream * 0x9e3779b97f4a7c15ull;
	s ^= ((uint64_t) l << 40) ^ ((uint64_t) t << 56);
	return splitmix64(&s);
}

/* y = W·x (+ LoRA): saves the LoRA's scaled A·x (and dropped input) in a. */
static void proj_fwd(struct train_net *n, struct threadpool *pool, uint32_t l, int t,
		     struct acts *a, const float *x, int64_t nt, float *y)
{
	struct layer *L = &n->layers[l];
	const struct lora *lo = &L->lora[t];
	const struct weight *w = &L->w[t];
	const float *xin = x;

	note(n, train_linear_fwd(pool, w, x, nt, y));
	if (!lo->a)
		return;
	if (a->lxd[t]) {
		uint64_t key = drop_key(n, l, t);
		float keep = 1.0f / (1.0f - n->o.dropout);

		for (int64_t i = 0; i < nt * w->n_in; i++)
			a->lxd[t][i] = dropped(key + (uint64_t) i, n->o.dropout) ? 0.0f : x[i] * keep;
		xin = a->lxd[t];
	}
	/* lu = scale · x A^T, then y += lu B^T */
	note(n, train_mm_nt(pool, nt, lo->a->rows, w->n_in, xin, w->n_in, lo->a->w, w->n_in,
			    a->lu[t], lo->a->rows, false));
	for (int64_t i = 0; i < nt * lo->a->rows; i++)
		a->lu[t][i] *= n->lora_scale;
	note(n, train_mm_nt(pool, nt, w->n_out, lo->a->rows, a->lu[t], lo->a->rows, lo->b->w,
			    lo->a->rows, y, w->n_out, true));
}

/* dx += dy·W (+ the LoRA path); parameter gradients of W (full) or A, B (LoRA). */
static void proj_bwd(struct train_net *n, struct threadpool *pool, uint32_t l, int t,
		     const struct acts *a, const float *x, int64_t nt, const float *dy, float *dx)
{
	struct layer *L = &n->layers[l];
	const struct lora *lo = &L->lora[t];
	const struct weight *w = &L->w[t];
	int64_t r;

	note(n, train_linear_bwd_x(pool, w, dy, nt, dx));
	if (L->pw[t])
		note(n, train_linear_bwd_w(pool, w->n_out, w->n_in, dy, x, nt, L->pw[t]->g));
	if (!lo->a)
		return;
	r = lo->a->rows;
	/* dB += dyᵀ·lu;  d(lu) = dy·B;  dA += scale · d(lu)ᵀ·x_dropped;  dx += scale · d(lu)·A */
	note(n, train_linear_bwd_w(pool, w->n_out, r, dy, a->lu[t], nt, lo->b->g));
	{
		struct weight bw = { .data = lo->b->w, .type = GGML_TYPE_F32, .n_in = r,
				     .n_out = w->n_out, .row_bytes = (size_t) r * 4 };
		struct weight aw = { .data = lo->a->w, .type = GGML_TYPE_F32, .n_in = w->n_in,
				     .n_out = r, .row_bytes = (size_t) w->n_in * 4 };

		memset(n->dlora, 0, (size_t) (nt * r) * sizeof(float));
		note(n, train_linear_bwd_x(pool, &bw, dy, nt, n->dlora));
		for (int64_t i = 0; i < nt * r; i++)
			n->dlora[i] *= n->lora_scale;
		note(n, train_linear_bwd_w(pool, r, w->n_in, n->dlora, a->lxd[t] ? a->lxd[t] : x, nt,
				   lo->a->g));
		if (!a->lxd[t]) {
			note(n, train_linear_bwd_x(pool, &aw, n->dlora, nt, dx));
			return;
		}
		uint64_t key = drop_key(n, l, t);
		float keep = 1.0f / (1.0f - n->o.dropout);

		memset(n->dlora2, 0, (size_t) (nt * w->n_in) * sizeof(float));
		note(n, train_linear_bwd_x(pool, &aw, n->dlora, nt, n->dlora2));
		for (int64_t i = 0; i < nt * w->n_in; i++)
			if (!dropped(key + (uint64_t) i, n->o.dropout))
				dx[i] += n->dlora2[i] * keep;
	}
}

static void add_bias(float *y, const float *b, int64_t nt, int64_t dim)
{
	if (b)
		for (int64_t t = 0; t < nt; t++)
			for (int64_t i = 0; i < dim; i++)
				y[t * dim + i] += b[i];
}

static void bias_grad(struct train_param *p, const float *dy, int64_t nt)
{
	if (p)
		for (int64_t t = 0; t < nt; t++)
			for (int64_t i = 0; i < p->cols; i++)
				p->g[i] += dy[t * p->cols + i];
}

/* ---- one layer ---- */

static void layer_fwd(struct train_net *n, struct threadpool *pool, uint32_t l,
		      const struct train_batch *b, const struct train_attn_shape *as, float *x_out)
{
	const struct model_hparams *hp = &n->m->hp;
	struct layer *L = &n->layers[l];
	struct acts *a = &n->acts[l];
	int64_t nt = b->n_seq * b->len, E = hp->n_embd, F = hp->n_ff;
	int64_t Q = (int64_t) hp->n_head * hp->head_dim, KV = (int64_t) hp->n_head_kv * hp->head_dim;
	bool neox = hp->rope_style == ROPE_STYLE_NEOX;

	train_rmsnorm_fwd(a->x_in, L->attn_norm, nt, E, hp->rms_eps, a->xn1, a->rs1);
	proj_fwd(n, pool, l, LORA_TARGET_Q, a, a->xn1, nt, a->q);
	proj_fwd(n, pool, l, LORA_TARGET_K, a, a->xn1, nt, a->k);
	proj_fwd(n, pool, l, LORA_TARGET_V, a, a->xn1, nt, a->v);
	add_bias(a->q, L->bq, nt, Q);
	add_bias(a->k, L->bk, nt, KV);
	add_bias(a->v, L->bv, nt, KV);
	train_rope(a->q, nt, hp->n_head, hp->head_dim, hp->rope_dim, neox, n->rope_cos,
		   n->rope_sin, false);
	train_rope(a->k, nt, hp->n_head_kv, hp->head_dim, hp->rope_dim, neox, n->rope_cos,
		   n->rope_sin, false);
	note(n, train_attn_fwd(pool, as, a->q, a->k, a->v, a->probs, a->ao));
	proj_fwd(n, pool, l, LORA_TARGET_O, a, a->ao, nt, n->dtmp);
	for (int64_t i = 0; i < nt * E; i++)
		a->x_mid[i] = a->x_in[i] + n->dtmp[i];
	train_rmsnorm_fwd(a->x_mid, L->ffn_norm, nt, E, hp->rms_eps, a->xn2, a->rs2);
	proj_fwd(n, pool, l, LORA_TARGET_GATE, a, a->xn2, nt, a->g);
	proj_fwd(n, pool, l, LORA_TARGET_UP, a, a->xn2, nt, a->u);
	train_swiglu_fwd(a->g, a->u, nt * F, a->h);
	proj_fwd(n, pool, l, LORA_TARGET_DOWN, a, a->h, nt, n->dtmp);
	for (int64_t i = 0; i < nt * E; i++)
		x_out[i] = a->x_mid[i] + n->dtmp[i];
}

/* n->dx holds ∂L/∂(layer output) on entry and ∂L/∂(layer input) on return. */
static void layer_bwd(struct train_net *n, struct threadpool *pool, uint32_t l,
		      const struct train_batch *b, const struct train_attn_shape *as)
{
	const struct model_hparams *hp = &n->m->hp;
	struct layer *L = &n->layers[l];
	struct acts *a = &n->acts[l];
	int64_t nt = b->n_seq * b->len, E = hp->n_embd, F = hp->n_ff;
	int64_t Q = (int64_t) hp->n_head * hp->head_dim, KV = (int64_t) hp->n_head_kv * hp->head_dim;
	bool neox = hp->rope_style == ROPE_STYLE_NEOX;

	/* FFN: x_out = x_mid + down(swiglu(gate(xn2), up(xn2))) */
	memset(n->dh, 0, (size_t) (nt * F) * 4);
	proj_bwd(n, pool, l, LORA_TARGET_DOWN, a, a->h, nt, n->dx, n->dh);
	memset(n->dg, 0, (size_t) (nt * F) * 4);
	memset(n->du, 0, (size_t) (nt * F) * 4);
	train_swiglu_bwd(a->g, a->u, n->dh, nt * F, n->dg, n->du);
	memset(n->dtmp, 0, (size_t) (nt * E) * 4);
	proj_bwd(n, pool, l, LORA_TARGET_GATE, a, a->xn2, nt, n->dg, n->dtmp);
	proj_bwd(n, pool, l, LORA_TARGET_UP, a, a->xn2, nt, n->du, n->dtmp);
	train_rmsnorm_bwd(a->x_mid, L->ffn_norm, a->rs2, n->dtmp, nt, E, n->dx,
			  L->p_ffn_norm ? L->p_ffn_norm->g : NULL);
	/* attention: x_mid = x_in + o(attn(rope(q(xn1)), rope(k(xn1)), v(xn1))) */
	memset(n->dao, 0, (size_t) (nt * Q) * 4);
	proj_bwd(n, pool, l, LORA_TARGET_O, a, a->ao, nt, n->dx, n->dao);
	memset(n->dq, 0, (size_t) (nt * Q) * 4);
	memset(n->dk, 0, (size_t) (nt * KV) * 4);
	memset(n->dv, 0, (size_t) (nt * KV) * 4);
	note(n, train_attn_bwd(pool, as, a->q, a->k, a->v, a->probs, n->dao, n->dq, n->dk, n->dv));
	train_rope(n->dq, nt, hp->n_head, hp->head_dim, hp->rope_dim, neox, n->rope_cos,
		   n->rope_sin, true);
	train_rope(n->dk, nt, hp->n_head_kv, hp->head_dim, hp->rope_dim, neox, n->rope_cos,
		   n->rope_sin, true);
	bias_grad(L->p_bq, n->dq, nt);
	bias_grad(L->p_bk, n->dk, nt);
	bias_grad(L->p_bv, n->dv, nt);
	memset(n->dtmp, 0, (size_t) (nt * E) * 4);
	proj_bwd(n, pool, l, LORA_TARGET_Q, a, a->xn1, nt, n->dq, n->dtmp);
	proj_bwd(n, pool, l, LORA_TARGET_K, a, a->xn1, nt, n->dk, n->dtmp);
	proj_bwd(n, pool, l, LORA_TARGET_V, a, a->xn1, nt, n->dv, n->dtmp);
	train_rmsnorm_bwd(a->x_in, L->attn_norm, a->rs1, n->dtmp, nt, E, n->dx,
			  L->p_attn_norm ? L->p_attn_norm->g : NULL);
}

/* ---- the whole model ---- */

int train_net_step(struct train_net *n, struct threadpool *pool, const struct train_batch *b,
		   float scale, bool backward, double *ret_loss)
{
	const struct model_hparams *hp = &n->m->hp;
	int64_t nt = b->n_seq * b->len, E = hp->n_embd, V = hp->n_vocab;
	struct train_attn_shape as = { .n_seq = b->n_seq, .len = b->len, .n_head = hp->n_head,
				       .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
				       .seg = b->seg };
	double loss = 0.0;
	int r;

	assert_return(n && b && ret_loss && nt > 0, -EINVAL);
	for (int64_t t = 0; t < nt; t++)
		if (b->tokens[t] < 0 || (uint32_t) b->tokens[t] >= hp->n_vocab ||
		    b->targets[t] >= (int32_t) hp->n_vocab)
			return -EINVAL;
	r = ensure_acts(n, nt, b->n_seq * hp->n_head * b->len * b->len);
	if (r < 0)
		return r;
	n->err = 0;
	train_rope_tables(b->pos, nt, hp->rope_dim, hp->rope_base, hp->rope_freq_scale,
			  n->m->rope_freq_factors, n->rope_cos, n->rope_sin);
	for (int64_t t = 0; t < nt; t++)
		quant_dequantize_row(n->tok_embd.type,
				     (const uint8_t *) n->tok_embd.data +
					     (size_t) b->tokens[t] * n->tok_embd.row_bytes,
				     n->acts[0].x_in + t * E, E);
	for (uint32_t l = 0; l < hp->n_layer; l++)
		layer_fwd(n, pool, l, b, &as, l + 1 < hp->n_layer ? n->acts[l + 1].x_in : n->x_final);
	train_rmsnorm_fwd(n->x_final, n->out_norm, nt, E, hp->rms_eps, n->xf, n->rsf);

	/* the head, HEAD_ROWS rows at a time: logits → loss and ∂loss/∂logits → ∂/∂xf */
	if (backward)
		memset(n->dtmp, 0, (size_t) (nt * E) * 4);
	for (int64_t t0 = 0; t0 < nt; t0 += HEAD_ROWS) {
		int64_t c = nt - t0 < HEAD_ROWS ? nt - t0 : HEAD_ROWS;
		bool any = false;

		for (int64_t t = t0; t < t0 + c; t++)
			any |= b->targets[t] >= 0;
		if (!any)
			continue;
		note(n, train_linear_fwd(pool, &n->output, n->xf + t0 * E, c, n->head));
		loss += train_xent(n->head, b->targets + t0, c, V, scale, backward ? n->head : NULL);
		if (!backward)
			continue;
		note(n, train_linear_bwd_x(pool, &n->output, n->head, c, n->dtmp + t0 * E));
		if (n->p_output)
			note(n, train_linear_bwd_w(pool, V, E, n->head, n->xf + t0 * E, c, n->p_output->g));
	}
	*ret_loss = loss;
	if (!backward || n->err < 0)
		return n->err;
	memset(n->dx, 0, (size_t) (nt * E) * 4);
	train_rmsnorm_bwd(n->x_final, n->out_norm, n->rsf, n->dtmp, nt, E, n->dx,
			  n->p_out_norm ? n->p_out_norm->g : NULL);
	for (uint32_t l = hp->n_layer; l-- > 0;) {
		if (n->o.recompute)
			layer_fwd(n, pool, l, b, &as, n->dlora2); /* the output is not needed again */
		layer_bwd(n, pool, l, b, &as);
	}
	if (n->p_tok_embd)
		for (int64_t t = 0; t < nt; t++)
			for (int64_t i = 0; i < E; i++)
				n->p_tok_embd->g[(int64_t) b->tokens[t] * E + i] += n->dx[t * E + i];
	return n->err;
}
