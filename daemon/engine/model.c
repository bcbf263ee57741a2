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
#include <sys/mman.h>

#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "threadpool.h"
#include "vocab.h"
#include "forward.h"

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

/* Repacks the Q8_0/Q4_0 matrices the kernels prefer packed into one owned buffer (model.h). */
static int repack_weights(struct model *m)
{
	const char *env = getenv("MOLLY_REPACK");
	size_t n = 0, total = 0;
	struct weight **ws;
	char *p;

	if (env && strcmp(env, "0") == 0)
		return 0;
	ws = calloc((size_t) m->hp.n_layer * 7 + 1, sizeof(*ws));
	if (!ws)
		return -ENOMEM;
	for (uint32_t i = 0; i < m->hp.n_layer; i++) {
		struct model_layer *L = &m->layers[i];
		struct weight *lw[] = { &L->wq, &L->wk, &L->wv, &L->wo,
					&L->ffn_gate, &L->ffn_up, &L->ffn_down };

		for (size_t k = 0; k < ELEMENTSOF(lw); k++)
			ws[n++] = lw[k];
	}
	ws[n++] = &m->output;
	for (size_t i = 0; i < n; i++)
		if (quant_packed_preferred(ws[i]->type))
			total += ALIGN_UP(quant_packed_bytes(ws[i]->type, ws[i]->n_in, ws[i]->n_out), 64);
	/* 2 MiB-aligned and marked for transparent huge pages: decode streams every byte of it
	 * per token, and 4 KiB pages would cost a TLB miss every 4 KiB (where THP is "madvise",
	 * as on Debian, nothing else gives huge pages; failure only costs speed) */
	if (total && posix_memalign(&m->packed, 2u << 20, total) != 0) {
		m->packed = NULL;
		free(ws);
		return -ENOMEM;
	}
	if (total)
		(void) madvise(m->packed, total, MADV_HUGEPAGE);
	p = m->packed;
	for (size_t i = 0; i < n && total; i++) {
		struct weight *w = ws[i];

		if (!quant_packed_preferred(w->type))
			continue;
		quant_pack_rows(w->type, w->n_in, w->data, w->row_bytes, w->n_out, p);
		w->packed = p;
		p += ALIGN_UP(quant_packed_bytes(w->type, w->n_in, w->n_out), 64);
	}
	m->packed_bytes = total;
	free(ws);
	return 0;
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
	r = repack_weights(m);
	if (r < 0)
		return errmsg_set(e, r, "cannot allocate the repacked weights (MOLLY_REPACK=0 avoids it)");

	*ret = TAKE_PTR(m);
	return 0;
}

struct model *model_free(struct model *m)
{
	if (!m)
		return NULL;
	free(m->layers);
	free(m->owned_f32);
	free(m->packed);
	free(m->chat_template);
	free(m->name);
	vocab_free(m->vocab);
	gguf_free(m->gguf);
	free(m);
	return NULL;
}

/* ---- per-sequence context: one sequence on the batched forward pass ---- */

struct model_ctx {
	const struct model *m; /* borrowed: must outlive the context */
	uint32_t n_ctx;
	uint32_t n_batch;
	uint32_t n_past;

	struct kv_store kv;     /* owned: base is a private array of blocks */
	uint32_t *blocks;       /* owned: identity block table */
	uint32_t n_blocks;
	struct forward_ws *ws;  /* owned */
	struct forward_row *rows; /* owned: [n_batch] */
	struct forward_lora *loras; /* owned copy */
	size_t n_loras;
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

#define CTX_MAX_LORAS 64

int model_ctx_new(const struct model *m, uint32_t n_ctx, uint32_t n_batch, struct model_ctx **ret)
{
	_cleanup_(model_ctx_freep) struct model_ctx *c = NULL;
	size_t block_bytes;
	int r;

	assert_return(m && ret && n_ctx > 0 && n_batch > 0, -EINVAL);
	assert_return(n_ctx <= (1u << 24) && n_batch <= 65536, -E2BIG);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->m = m;
	c->n_ctx = n_ctx;
	c->n_batch = n_batch;
	c->n_blocks = (n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
	block_bytes = forward_kv_block_bytes(m);
	c->kv.page_bytes = block_bytes;
	c->kv.base = malloc((size_t) c->n_blocks * block_bytes);
	c->blocks = malloc(c->n_blocks * sizeof(*c->blocks));
	c->rows = malloc((size_t) n_batch * sizeof(*c->rows));
	if (!c->kv.base || !c->blocks || !c->rows)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->n_blocks; i++)
		c->blocks[i] = i;
	/* the whole cache is this context's: fault it in now, not in the first batches */
	prefault(c->kv.base, (size_t) c->n_blocks * block_bytes);
	r = forward_ws_new(m, n_batch, n_ctx, n_batch * CTX_MAX_LORAS, 64, &c->ws);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(c);
	return 0;
}

struct model_ctx *model_ctx_free(struct model_ctx *c)
{
	if (!c)
		return NULL;
	free(c->kv.base);
	free(c->blocks);
	free(c->rows);
	free(c->loras);
	forward_ws_free(c->ws);
	free(c);
	return NULL;
}

int model_ctx_set_loras(struct model_ctx *c, const struct forward_lora *loras, size_t n)
{
	struct forward_lora *copy = NULL;

	assert_return(c && (loras || n == 0), -EINVAL);
	assert_return(n <= CTX_MAX_LORAS, -E2BIG);
	if (n) {
		copy = malloc(n * sizeof(*copy));
		if (!copy)
			return -ENOMEM;
		memcpy(copy, loras, n * sizeof(*copy));
	}
	free(c->loras);
	c->loras = copy;
	c->n_loras = n;
	return 0;
}

int model_decode(struct model_ctx *c, struct threadpool *pool, const int32_t *tokens, size_t n,
		 float *logits)
{
	struct forward_seq seq;

	assert_return(c && pool && (tokens || n == 0), -EINVAL);
	if (n == 0)
		return -EINVAL;
	if (n > c->n_ctx - c->n_past)
		return -ENOSPC;
	if (threadpool_n_threads(pool) > 64)
		return -E2BIG;
	for (size_t i = 0; i < n; i++)
		if (tokens[i] < 0 || (uint32_t) tokens[i] >= c->m->hp.n_vocab)
			return -EINVAL;
	seq = (struct forward_seq){ .blocks = c->blocks, .n_blocks = c->n_blocks };
	for (size_t done = 0; done < n;) {
		uint32_t chunk = (uint32_t) MIN((size_t) c->n_batch, n - done);
		bool last = done + chunk == n;
		struct forward_batch b = {
			.rows = c->rows,
			.n_rows = chunk,
			.seqs = &seq,
			.loras = c->loras,
			.logits = logits,
		};
		int r;

		for (uint32_t i = 0; i < chunk; i++)
			c->rows[i] = (struct forward_row){
				.token = tokens[done + i],
				.pos = c->n_past + i,
				.seq = 0,
				.lora_first = 0,
				.n_loras = (uint32_t) c->n_loras,
				.logits_index = last && logits && i + 1 == chunk ? 0 : -1,
			};
		r = model_forward(c->m, c->ws, pool, &c->kv, &b);
		if (r < 0)
			return r;
		c->n_past += chunk;
		done += chunk;
	}
	return 0;
}
