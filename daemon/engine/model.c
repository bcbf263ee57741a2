/* SPDX-License-Identifier: MIT */
/*
 * model.c: loading a Llama-family GGUF and the forward pass.
 *
 * The arithmetic follows ggml's CPU backend where the order of float operations decides
 * whether our logits can match llama.cpp's reference runs: RMSNorm sums float squares in
 * double and scales by 1/sqrtf(mean + eps) in float; RoPE angles come from repeated float
 * multiplication by base^(-2/n_dims); softmax sums in double; activations are converted to
 * the weight type's dot partner before every matrix product (see matmul.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "threadpool.h"
#include "vocab.h"

const char *model_arch_name(enum model_arch a)
{
	switch (a) {
	case MODEL_ARCH_LLAMA:
		return "llama";
	case MODEL_ARCH_QWEN2:
		return "qwen2";
	}
	return "unknown";
}

/* ---- loading ---- */

struct loader {
	const struct gguf *g;
	const char *arch;
	struct errmsg *e;
	float *f32_next; /* bump allocator inside model->owned_f32 */
	float *f32_end;
};

static int arch_u32(struct loader *l, const char *suffix, bool required, uint32_t def,
		    uint32_t *ret)
{
	char key[128];
	int r;

	snprintf(key, sizeof(key), "%s.%s", l->arch, suffix);
	r = gguf_get_u32(l->g, key, ret);
	if (r == -ENOENT && !required) {
		*ret = def;
		return 0;
	}
	if (r == -ENOENT)
		return errmsg_set(l->e, -EBADMSG, "missing metadata key '%s'", key);
	if (r < 0)
		return errmsg_set(l->e, -EBADMSG, "metadata key '%s' is not an unsigned 32-bit integer",
				  key);
	return 0;
}

static int arch_f32(struct loader *l, const char *suffix, float def, float *ret)
{
	char key[128];
	int r;

	snprintf(key, sizeof(key), "%s.%s", l->arch, suffix);
	r = gguf_get_f32(l->g, key, ret);
	if (r == -ENOENT) {
		*ret = def;
		return 0;
	}
	if (r < 0)
		return errmsg_set(l->e, -EBADMSG, "metadata key '%s' is not a number", key);
	return 0;
}

static const struct gguf_tensor *find_tensor(struct loader *l, const char *name, bool required,
					     int *r)
{
	const struct gguf_tensor *t = gguf_find_tensor(l->g, name);

	*r = 0;
	if (!t && required)
		*r = errmsg_set(l->e, -EBADMSG, "missing tensor '%s'", name);
	return t;
}

static int load_weight(struct loader *l, const char *name, int64_t n_in, int64_t n_out,
		       bool required, struct weight *w)
{
	const struct gguf_tensor *t;
	int64_t row_bytes;
	int r;

	t = find_tensor(l, name, required, &r);
	if (!t)
		return r;
	if (t->n_dims != 2 || (int64_t) t->ne[0] != n_in || (int64_t) t->ne[1] != n_out)
		return errmsg_set(l->e, -EBADMSG,
				  "tensor '%s' has shape [%llu, %llu] (%u dims), expected [%lld, %lld]",
				  name, (unsigned long long) t->ne[0], (unsigned long long) t->ne[1],
				  t->n_dims, (long long) n_in, (long long) n_out);
	if (!quant_type_supported(t->type) || t->type == GGML_TYPE_Q8_K)
		return errmsg_set(l->e, -EOPNOTSUPP,
				  "tensor '%s' has type %s (%u), which this engine does not compute "
				  "with (supported: f32 f16 bf16 q8_0 q4_0 q4_k q6_k)",
				  name, quant_type_name(t->type) ?: "unknown", t->type);
	row_bytes = quant_row_bytes(t->type, n_in);
	if (row_bytes < 0)
		return errmsg_set(l->e, -EBADMSG, "tensor '%s': row of %lld values does not fit type %s",
				  name, (long long) n_in, quant_type_name(t->type));
	*w = (struct weight){
		.data = t->data,
		.type = t->type,
		.n_in = n_in,
		.n_out = n_out,
		.row_bytes = (size_t) row_bytes,
	};
	return 0;
}

/* A 1-D tensor of n values, converted to F32 into the model's own storage. */
static int load_vector(struct loader *l, const char *name, int64_t n, bool required,
		       const float **ret)
{
	const struct gguf_tensor *t;
	int r;

	*ret = NULL;
	t = find_tensor(l, name, required, &r);
	if (!t)
		return r;
	if (t->n_dims != 1 || (int64_t) t->ne[0] != n)
		return errmsg_set(l->e, -EBADMSG, "tensor '%s' has shape [%llu] (%u dims), expected [%lld]",
				  name, (unsigned long long) t->ne[0], t->n_dims, (long long) n);
	if (!quant_type_supported(t->type) || quant_row_bytes(t->type, n) < 0)
		return errmsg_set(l->e, -EOPNOTSUPP, "tensor '%s' has unsupported type %u", name,
				  t->type);
	if (l->f32_end - l->f32_next < n)
		return errmsg_set(l->e, -EBADMSG, "internal: vector storage exhausted at '%s'", name);
	quant_dequantize_row(t->type, t->data, l->f32_next, n);
	*ret = l->f32_next;
	l->f32_next += n;
	return 0;
}

static int load_hparams(struct loader *l, struct model *m)
{
	struct model_hparams *hp = &m->hp;
	_cleanup_free_ char *scaling = NULL;
	char key[128];
	float factor;
	int r;

	if ((r = arch_u32(l, "embedding_length", true, 0, &hp->n_embd)) < 0 ||
	    (r = arch_u32(l, "block_count", true, 0, &hp->n_layer)) < 0 ||
	    (r = arch_u32(l, "attention.head_count", true, 0, &hp->n_head)) < 0 ||
	    (r = arch_u32(l, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv)) < 0 ||
	    (r = arch_u32(l, "feed_forward_length", true, 0, &hp->n_ff)) < 0 ||
	    (r = arch_u32(l, "context_length", false, 2048, &hp->n_ctx_train)) < 0)
		return r;
	if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_head == 0 || hp->n_head_kv == 0 ||
	    hp->n_ff == 0 || hp->n_embd > (1u << 20) || hp->n_layer > 4096 || hp->n_ff > (1u << 22))
		return errmsg_set(l->e, -EBADMSG,
				  "implausible shape: embedding %u, layers %u, heads %u/%u, ffn %u",
				  hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->n_ff);
	if (hp->n_head % hp->n_head_kv != 0)
		return errmsg_set(l->e, -EBADMSG, "%u query heads are not a multiple of %u KV heads",
				  hp->n_head, hp->n_head_kv);
	if ((r = arch_u32(l, "attention.key_length", false, hp->n_embd / hp->n_head, &hp->head_dim)) < 0)
		return r;
	if (hp->head_dim == 0 || hp->head_dim % 2 != 0 || hp->head_dim > 1024)
		return errmsg_set(l->e, -EBADMSG, "unsupported head dimension %u", hp->head_dim);
	if ((r = arch_u32(l, "rope.dimension_count", false, hp->head_dim, &hp->rope_dim)) < 0)
		return r;
	if (hp->rope_dim == 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
		return errmsg_set(l->e, -EBADMSG, "rope.dimension_count %u does not fit head dimension %u",
				  hp->rope_dim, hp->head_dim);
	if ((r = arch_f32(l, "rope.freq_base", 10000.0f, &hp->rope_base)) < 0 ||
	    (r = arch_f32(l, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps)) < 0)
		return r;
	if (!(hp->rope_base > 0) || !(hp->rms_eps >= 0) || !isfinite(hp->rope_base))
		return errmsg_set(l->e, -EBADMSG, "bad rope.freq_base %g or RMS epsilon %g",
				  hp->rope_base, hp->rms_eps);

	/* RoPE scaling: none or linear (positions divided by the factor); YaRN and the like
	 * change attention itself and are refused rather than run wrongly. */
	hp->rope_freq_scale = 1.0f;
	snprintf(key, sizeof(key), "%s.rope.scaling.type", l->arch);
	r = gguf_get_string(l->g, key, &scaling);
	if (r < 0 && r != -ENOENT)
		return errmsg_set(l->e, -EBADMSG, "metadata key '%s' is not a string", key);
	if (scaling && strcmp(scaling, "none") != 0 && strcmp(scaling, "linear") != 0)
		return errmsg_set(l->e, -EOPNOTSUPP, "RoPE scaling '%s' is not supported (none, linear)",
				  scaling);
	if ((r = arch_f32(l, "rope.scaling.factor", 0.0f, &factor)) < 0)
		return r;
	if (factor == 0.0f && (r = arch_f32(l, "rope.scale_linear", 0.0f, &factor)) < 0)
		return r;
	if (factor != 0.0f && (!scaling || strcmp(scaling, "none") != 0)) {
		if (!(factor > 0) || !isfinite(factor))
			return errmsg_set(l->e, -EBADMSG, "bad RoPE scaling factor %g", factor);
		hp->rope_freq_scale = 1.0f / factor;
	}
	hp->rope_style = hp->arch == MODEL_ARCH_QWEN2 ? ROPE_STYLE_NEOX : ROPE_STYLE_NORM;
	return 0;
}

static int load_tensors(struct loader *l, struct model *m)
{
	const struct model_hparams *hp = &m->hp;
	int64_t q_dim = (int64_t) hp->n_head * hp->head_dim;
	int64_t kv_dim = (int64_t) hp->n_head_kv * hp->head_dim;
	bool bias = hp->arch == MODEL_ARCH_QWEN2;
	size_t n_f32;
	char name[128];
	int r;

	/* Every 1-D tensor we copy: norms, biases, RoPE frequency factors. */
	n_f32 = (size_t) hp->n_layer * (2 * hp->n_embd + (bias ? q_dim + 2 * kv_dim : 0)) +
		hp->n_embd + hp->rope_dim / 2;
	m->owned_f32 = malloc(n_f32 * sizeof(float));
	if (!m->owned_f32)
		return -ENOMEM;
	l->f32_next = m->owned_f32;
	l->f32_end = m->owned_f32 + n_f32;

	if ((r = load_weight(l, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &m->tok_embd)) < 0 ||
	    (r = load_vector(l, "output_norm.weight", hp->n_embd, true, &m->output_norm)) < 0 ||
	    (r = load_weight(l, "output.weight", hp->n_embd, hp->n_vocab, false, &m->output)) < 0)
		return r;
	if (!m->output.data) {
		m->output = m->tok_embd; /* tied embeddings */
		m->hp.tied_output = true;
	}
	if ((r = load_vector(l, "rope_freqs.weight", hp->rope_dim / 2, false, &m->rope_freq_factors)) < 0)
		return r;

	m->layers = calloc(hp->n_layer, sizeof(*m->layers));
	if (!m->layers)
		return -ENOMEM;
	for (uint32_t i = 0; i < hp->n_layer; i++) {
		struct model_layer *L = &m->layers[i];
#define T(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, i), name)
		if ((r = load_vector(l, T("attn_norm.weight"), hp->n_embd, true, &L->attn_norm)) < 0 ||
		    (r = load_weight(l, T("attn_q.weight"), hp->n_embd, q_dim, true, &L->wq)) < 0 ||
		    (r = load_weight(l, T("attn_k.weight"), hp->n_embd, kv_dim, true, &L->wk)) < 0 ||
		    (r = load_weight(l, T("attn_v.weight"), hp->n_embd, kv_dim, true, &L->wv)) < 0 ||
		    (r = load_weight(l, T("attn_output.weight"), q_dim, hp->n_embd, true, &L->wo)) < 0 ||
		    (r = load_vector(l, T("ffn_norm.weight"), hp->n_embd, true, &L->ffn_norm)) < 0 ||
		    (r = load_weight(l, T("ffn_gate.weight"), hp->n_embd, hp->n_ff, true, &L->ffn_gate)) < 0 ||
		    (r = load_weight(l, T("ffn_up.weight"), hp->n_embd, hp->n_ff, true, &L->ffn_up)) < 0 ||
		    (r = load_weight(l, T("ffn_down.weight"), hp->n_ff, hp->n_embd, true, &L->ffn_down)) < 0)
			return r;
		if (bias && ((r = load_vector(l, T("attn_q.bias"), q_dim, true, &L->bq)) < 0 ||
			     (r = load_vector(l, T("attn_k.bias"), kv_dim, true, &L->bk)) < 0 ||
			     (r = load_vector(l, T("attn_v.bias"), kv_dim, true, &L->bv)) < 0))
			return r;
#undef T
	}
	return 0;
}

static char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *b = slash ? slash + 1 : path;
	size_t n = strlen(b);

	if (n > 5 && strcmp(b + n - 5, ".gguf") == 0)
		n -= 5;
	return strndup(b, n);
}

int model_load(const char *path, struct model **ret, struct errmsg *e)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_free_ char *arch = NULL;
	struct loader l = { .e = e };
	int r;

	assert_return(path && ret, -EINVAL);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	r = gguf_open(path, &m->gguf, e);
	if (r < 0)
		return r;
	l.g = m->gguf;

	r = gguf_get_string(m->gguf, "general.architecture", &arch);
	if (r < 0)
		return errmsg_set(e, -EBADMSG, "missing or malformed 'general.architecture'");
	if (strcmp(arch, "llama") == 0)
		m->hp.arch = MODEL_ARCH_LLAMA;
	else if (strcmp(arch, "qwen2") == 0)
		m->hp.arch = MODEL_ARCH_QWEN2;
	else
		return errmsg_set(e, -EOPNOTSUPP,
				  "architecture '%s' is not supported (supported: llama, qwen2)", arch);
	l.arch = arch;

	r = vocab_load(m->gguf, &m->vocab, e);
	if (r < 0)
		return errmsg_prefix(e, r, "tokenizer");
	m->hp.n_vocab = vocab_n_tokens(m->vocab);

	if ((r = load_hparams(&l, m)) < 0 || (r = load_tensors(&l, m)) < 0)
		return r;

	r = gguf_get_string(m->gguf, "tokenizer.chat_template", &m->chat_template);
	if (r < 0 && r != -ENOENT)
		return errmsg_set(e, -EBADMSG, "'tokenizer.chat_template' is not a string");
	if (gguf_get_string(m->gguf, "general.name", &m->name) < 0)
		m->name = base_name(path);
	if (!m->name)
		return -ENOMEM;

	*ret = TAKE_PTR(m);
	return 0;
}

struct model *model_free(struct model *m)
{
	if (!m)
		return NULL;
	free(m->layers);
	free(m->owned_f32);
	free(m->chat_template);
	free(m->name);
	vocab_free(m->vocab);
	gguf_free(m->gguf);
	free(m);
	return NULL;
}

/* ---- per-sequence context ---- */

struct model_ctx {
	const struct model *m; /* borrowed: must outlive the context */
	uint32_t n_ctx;
	uint32_t n_batch;
	uint32_t n_past;

	float *k_cache; /* owned: [n_layer][n_ctx][kv_dim] */
	float *v_cache; /* owned: [n_layer][n_ctx][kv_dim] */

	/* scratch, owned, sized for n_batch tokens */
	float *x, *h, *q, *k, *v, *attn, *gate, *up;
	float *scores; /* [n_head][n_ctx] */
	float *logits_norm;
	void *mm_scratch;
	float *rope_cos, *rope_sin; /* [n_batch][rope_dim/2] */
};

uint32_t model_ctx_n_ctx(const struct model_ctx *c)
{
	return c->n_ctx;
}

uint32_t model_ctx_n_past(const struct model_ctx *c)
{
	return c->n_past;
}

void model_ctx_truncate(struct model_ctx *c, uint32_t n_past)
{
	if (n_past < c->n_past)
		c->n_past = n_past;
}

static size_t max_scratch(const struct model *m, uint32_t n_batch)
{
	size_t s = matmul_scratch_bytes(&m->output, 1);

	for (uint32_t i = 0; i < m->hp.n_layer; i++) {
		const struct model_layer *L = &m->layers[i];
		const struct weight *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo,
					      &L->ffn_gate, &L->ffn_up, &L->ffn_down };

		for (size_t j = 0; j < ELEMENTSOF(ws); j++)
			s = MAX(s, matmul_scratch_bytes(ws[j], n_batch));
	}
	return s;
}

int model_ctx_new(const struct model *m, uint32_t n_ctx, uint32_t n_batch, struct model_ctx **ret)
{
	const struct model_hparams *hp;
	_cleanup_(model_ctx_freep) struct model_ctx *c = NULL;
	size_t kv_dim, q_dim, cache_floats;

	assert_return(m && ret && n_ctx > 0 && n_batch > 0, -EINVAL);
	hp = &m->hp;
	assert_return(n_ctx <= (1u << 24) && n_batch <= 65536, -E2BIG);
	kv_dim = (size_t) hp->n_head_kv * hp->head_dim;
	q_dim = (size_t) hp->n_head * hp->head_dim;
	if (__builtin_mul_overflow((size_t) hp->n_layer * n_ctx, kv_dim, &cache_floats))
		return -E2BIG;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = (struct model_ctx){ .m = m, .n_ctx = n_ctx, .n_batch = n_batch };
	c->k_cache = malloc(cache_floats * sizeof(float));
	c->v_cache = malloc(cache_floats * sizeof(float));
	c->x = malloc((size_t) n_batch * hp->n_embd * sizeof(float));
	c->h = malloc((size_t) n_batch * MAX(hp->n_embd, q_dim) * sizeof(float));
	c->q = malloc((size_t) n_batch * q_dim * sizeof(float));
	c->k = malloc((size_t) n_batch * kv_dim * sizeof(float));
	c->v = malloc((size_t) n_batch * kv_dim * sizeof(float));
	c->attn = malloc((size_t) n_batch * q_dim * sizeof(float));
	c->gate = malloc((size_t) n_batch * hp->n_ff * sizeof(float));
	c->up = malloc((size_t) n_batch * hp->n_ff * sizeof(float));
	c->scores = malloc((size_t) hp->n_head * n_ctx * sizeof(float));
	c->logits_norm = malloc(hp->n_embd * sizeof(float));
	c->mm_scratch = malloc(MAX(max_scratch(m, n_batch), (size_t) 64));
	c->rope_cos = malloc((size_t) n_batch * (hp->rope_dim / 2) * sizeof(float));
	c->rope_sin = malloc((size_t) n_batch * (hp->rope_dim / 2) * sizeof(float));
	if (!c->k_cache || !c->v_cache || !c->x || !c->h || !c->q || !c->k || !c->v || !c->attn ||
	    !c->gate || !c->up || !c->scores || !c->logits_norm || !c->mm_scratch || !c->rope_cos ||
	    !c->rope_sin)
		return -ENOMEM;
	*ret = TAKE_PTR(c);
	return 0;
}

struct model_ctx *model_ctx_free(struct model_ctx *c)
{
	if (!c)
		return NULL;
	free(c->k_cache);
	free(c->v_cache);
	free(c->x);
	free(c->h);
	free(c->q);
	free(c->k);
	free(c->v);
	free(c->attn);
	free(c->gate);
	free(c->up);
	free(c->scores);
	free(c->logits_norm);
	free(c->mm_scratch);
	free(c->rope_cos);
	free(c->rope_sin);
	free(c);
	return NULL;
}

/* ---- forward pass ---- */

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

/* Per-token cos/sin of every rotated pair, angles as ggml computes them. */
static void rope_tables(struct model_ctx *c, uint32_t pos0, uint32_t n)
{
	const struct model_hparams *hp = &c->m->hp;
	uint32_t half = hp->rope_dim / 2;
	float theta_scale = powf(hp->rope_base, -2.0f / (float) hp->rope_dim);

	for (uint32_t t = 0; t < n; t++) {
		float theta = (float) (pos0 + t);

		for (uint32_t i = 0; i < half; i++) {
			float ff = c->m->rope_freq_factors ? c->m->rope_freq_factors[i] : 1.0f;
			float th = hp->rope_freq_scale * (theta / ff);

			c->rope_cos[t * half + i] = cosf(th);
			c->rope_sin[t * half + i] = sinf(th);
			theta *= theta_scale;
		}
	}
}

static void rope_apply(const struct model_ctx *c, float *vec, uint32_t n_heads, uint32_t t)
{
	const struct model_hparams *hp = &c->m->hp;
	uint32_t half = hp->rope_dim / 2;
	const float *cs = c->rope_cos + (size_t) t * half, *sn = c->rope_sin + (size_t) t * half;

	for (uint32_t hd = 0; hd < n_heads; hd++) {
		float *v = vec + (size_t) hd * hp->head_dim;

		for (uint32_t i = 0; i < half; i++) {
			uint32_t a = hp->rope_style == ROPE_STYLE_NEOX ? i : 2 * i;
			uint32_t b = hp->rope_style == ROPE_STYLE_NEOX ? i + half : 2 * i + 1;
			float x0 = v[a], x1 = v[b];

			v[a] = x0 * cs[i] - x1 * sn[i];
			v[b] = x0 * sn[i] + x1 * cs[i];
		}
	}
}

struct attn_job {
	struct model_ctx *c;
	uint32_t layer;
	uint32_t pos0;
	uint32_t n;
};

/* Causal attention of the batch's queries over the cache, one head per task. */
static void attention_heads(void *arg, int ith, int nth)
{
	struct attn_job *j = arg;
	struct model_ctx *c = j->c;
	const struct model_hparams *hp = &c->m->hp;
	size_t kv_dim = (size_t) hp->n_head_kv * hp->head_dim;
	size_t q_dim = (size_t) hp->n_head * hp->head_dim;
	uint32_t group = hp->n_head / hp->n_head_kv;
	const float *kc = c->k_cache + (size_t) j->layer * c->n_ctx * kv_dim;
	const float *vc = c->v_cache + (size_t) j->layer * c->n_ctx * kv_dim;
	float scale = 1.0f / sqrtf((float) hp->head_dim);
	long hb, he;

	threadpool_split(hp->n_head, 1, ith, nth, &hb, &he);
	for (long hd = hb; hd < he; hd++) {
		uint32_t kvh = (uint32_t) hd / group; /* query head i reads KV head i / group */
		float *sc = c->scores + (size_t) hd * c->n_ctx;

		for (uint32_t t = 0; t < j->n; t++) {
			const float *q = c->q + t * q_dim + hd * hp->head_dim;
			float *out = c->attn + t * q_dim + hd * hp->head_dim;
			uint32_t n_kv = j->pos0 + t + 1;
			float maxv = -INFINITY;
			double sum = 0.0;

			for (uint32_t p = 0; p < n_kv; p++) {
				const float *k = kc + p * kv_dim + kvh * hp->head_dim;
				float d = 0.0f;

				for (uint32_t i = 0; i < hp->head_dim; i++)
					d += q[i] * k[i];
				sc[p] = d * scale;
				maxv = MAX(maxv, sc[p]);
			}
			for (uint32_t p = 0; p < n_kv; p++) {
				sc[p] = expf(sc[p] - maxv);
				sum += sc[p];
			}
			float inv = (float) (1.0 / sum);

			memset(out, 0, hp->head_dim * sizeof(float));
			for (uint32_t p = 0; p < n_kv; p++) {
				const float *v = vc + p * kv_dim + kvh * hp->head_dim;
				float w = sc[p] * inv;

				for (uint32_t i = 0; i < hp->head_dim; i++)
					out[i] += w * v[i];
			}
		}
	}
}

static float silu(float x)
{
	return x / (1.0f + expf(-x));
}

static int decode_batch(struct model_ctx *c, struct threadpool *pool, const int32_t *tokens,
			uint32_t n, float *logits)
{
	const struct model *m = c->m;
	const struct model_hparams *hp = &m->hp;
	size_t kv_dim = (size_t) hp->n_head_kv * hp->head_dim;
	size_t q_dim = (size_t) hp->n_head * hp->head_dim;
	uint32_t pos0 = c->n_past;

	for (uint32_t t = 0; t < n; t++) {
		const char *row = (const char *) m->tok_embd.data +
				  (size_t) tokens[t] * m->tok_embd.row_bytes;

		quant_dequantize_row(m->tok_embd.type, row, c->x + (size_t) t * hp->n_embd, hp->n_embd);
	}
	rope_tables(c, pos0, n);

	for (uint32_t il = 0; il < hp->n_layer; il++) {
		const struct model_layer *L = &m->layers[il];
		float *kc = c->k_cache + ((size_t) il * c->n_ctx + pos0) * kv_dim;
		float *vc = c->v_cache + ((size_t) il * c->n_ctx + pos0) * kv_dim;
		struct attn_job aj = { .c = c, .layer = il, .pos0 = pos0, .n = n };

		for (uint32_t t = 0; t < n; t++)
			rmsnorm(c->h + (size_t) t * hp->n_embd, c->x + (size_t) t * hp->n_embd,
				L->attn_norm, hp->n_embd, hp->rms_eps);
		matmul(pool, &L->wq, c->h, n, c->q, c->mm_scratch);
		matmul(pool, &L->wk, c->h, n, c->k, c->mm_scratch);
		matmul(pool, &L->wv, c->h, n, c->v, c->mm_scratch);
		for (uint32_t t = 0; t < n; t++) {
			float *q = c->q + t * q_dim, *k = c->k + t * kv_dim, *v = c->v + t * kv_dim;

			if (L->bq) {
				for (size_t i = 0; i < q_dim; i++)
					q[i] += L->bq[i];
				for (size_t i = 0; i < kv_dim; i++) {
					k[i] += L->bk[i];
					v[i] += L->bv[i];
				}
			}
			rope_apply(c, q, hp->n_head, t);
			rope_apply(c, k, hp->n_head_kv, t);
		}
		memcpy(kc, c->k, (size_t) n * kv_dim * sizeof(float));
		memcpy(vc, c->v, (size_t) n * kv_dim * sizeof(float));
		threadpool_run(pool, attention_heads, &aj);

		/* x += Wo·attn */
		matmul(pool, &L->wo, c->attn, n, c->h, c->mm_scratch);
		for (size_t i = 0; i < (size_t) n * hp->n_embd; i++)
			c->x[i] += c->h[i];

		for (uint32_t t = 0; t < n; t++)
			rmsnorm(c->h + (size_t) t * hp->n_embd, c->x + (size_t) t * hp->n_embd,
				L->ffn_norm, hp->n_embd, hp->rms_eps);
		matmul(pool, &L->ffn_gate, c->h, n, c->gate, c->mm_scratch);
		matmul(pool, &L->ffn_up, c->h, n, c->up, c->mm_scratch);
		for (size_t i = 0; i < (size_t) n * hp->n_ff; i++)
			c->gate[i] = silu(c->gate[i]) * c->up[i];
		matmul(pool, &L->ffn_down, c->gate, n, c->h, c->mm_scratch);
		for (size_t i = 0; i < (size_t) n * hp->n_embd; i++)
			c->x[i] += c->h[i];
	}
	c->n_past += n;

	if (logits) {
		rmsnorm(c->logits_norm, c->x + (size_t) (n - 1) * hp->n_embd, m->output_norm,
			hp->n_embd, hp->rms_eps);
		matmul(pool, &m->output, c->logits_norm, 1, logits, c->mm_scratch);
	}
	return 0;
}

int model_decode(struct model_ctx *c, struct threadpool *pool, const int32_t *tokens, size_t n,
		 float *logits)
{
	assert_return(c && pool && (tokens || n == 0), -EINVAL);
	if (n == 0)
		return -EINVAL;
	if (n > c->n_ctx - c->n_past)
		return -ENOSPC;
	for (size_t i = 0; i < n; i++)
		if (tokens[i] < 0 || (uint32_t) tokens[i] >= c->m->hp.n_vocab)
			return -EINVAL;
	for (size_t done = 0; done < n;) {
		uint32_t chunk = (uint32_t) MIN((size_t) c->n_batch, n - done);
		bool last = done + chunk == n;
		int r = decode_batch(c, pool, tokens + done, chunk, last ? logits : NULL);

		if (r < 0)
			return r;
		done += chunk;
	}
	return 0;
}
