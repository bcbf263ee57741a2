/* SPDX-License-Identifier: MIT */
/*
 * model.h: a Llama-family transformer loaded from GGUF, and its forward pass on the CPU.
 *
 * Architectures: `llama` (Llama 2/3, TinyLlama, SmolLM, Mistral: RoPE on adjacent pairs)
 * and `qwen2` (Q/K/V biases, NeoX RoPE on half-split pairs). Grouped-query attention,
 * RoPE base, linear scaling and per-dimension frequency factors (`rope_freqs.weight`, as
 * Llama 3.1 ships) from the metadata; tied or untied output; RMSNorm epsilon from metadata.
 *
 * Weights stay in the mmap'd file in their stored type (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
 * Q6_K); only 1-D tensors (norms, biases) are copied out as F32. Where the CPU has kernels for
 * it (quant_packed_preferred()), Q8_0 and Q4_0 matrices are also repacked at load into the
 * kernels' interleaved layout (weight.packed): that costs their size again in anonymous
 * memory (the file's pages are then only page cache) and ~1 s per GB of load time (one
 * thread; docs/PERFORMANCE.md); MOLLY_REPACK=0 in the environment keeps every matrix mmap'd
 * only.
 *
 * A model is immutable after load and may be shared by many contexts (one per sequence).
 * A model_ctx owns a sequence's KV cache and scratch; use it from one thread at a time.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "matmul.h"

struct gguf;
struct vocab;
struct threadpool;

enum model_arch {
	MODEL_ARCH_LLAMA,
	MODEL_ARCH_QWEN2,
};

enum rope_style {
	ROPE_STYLE_NORM, /* rotate (2i, 2i+1) */
	ROPE_STYLE_NEOX, /* rotate (i, i + rope_dim/2) */
};

struct model_hparams {
	enum model_arch arch;
	uint32_t n_embd;
	uint32_t n_layer;
	uint32_t n_head;
	uint32_t n_head_kv;
	uint32_t head_dim;
	uint32_t n_ff;
	uint32_t n_vocab;
	uint32_t n_ctx_train;
	uint32_t rope_dim;     /* leading dims of each head that are rotated */
	float rope_base;
	float rope_freq_scale; /* positions are multiplied by this (1/linear factor) */
	float rms_eps;
	enum rope_style rope_style;
	bool tied_output;
};

struct model_layer {
	const float *attn_norm; /* [n_embd], owned by the model */
	struct weight wq, wk, wv, wo;
	const float *bq, *bk, *bv; /* qwen2 only; NULL otherwise */
	const float *ffn_norm;
	struct weight ffn_gate, ffn_up, ffn_down;
};

struct model {
	struct gguf *gguf;   /* owned */
	struct vocab *vocab; /* owned */
	struct model_hparams hp;
	struct weight tok_embd;
	const float *output_norm;
	struct weight output;
	const float *rope_freq_factors; /* [rope_dim/2] or NULL */
	struct model_layer *layers;     /* owned, n_layer */
	char *chat_template;            /* owned; NULL when the file has none */
	char *name;                     /* general.name or the file's base name */
	float *owned_f32;               /* owned storage behind the const float * above */
	void *packed;                   /* owned: every weight.packed; NULL when none */
	size_t packed_bytes;
};

/* Loads path. Errors name the key or tensor that is missing or malformed. */
int model_load(const char *path, struct model **ret, struct errmsg *e);
struct model *model_free(struct model *m);
DEFINE_CLEANUP_FUNC(struct model *, model_free, NULL)

const char *model_arch_name(enum model_arch a);

/* One sequence's state: KV cache for up to n_ctx positions, and scratch for batches of up to
 * n_batch tokens. */
struct model_ctx;

int model_ctx_new(const struct model *m, uint32_t n_ctx, uint32_t n_batch,
		  struct model_ctx **ret);
struct model_ctx *model_ctx_free(struct model_ctx *c);
DEFINE_CLEANUP_FUNC(struct model_ctx *, model_ctx_free, NULL)

uint32_t model_ctx_n_ctx(const struct model_ctx *c);
/* Positions already in the cache. */
uint32_t model_ctx_n_past(const struct model_ctx *c);
/* Forgets everything from position n_past on. */
void model_ctx_truncate(struct model_ctx *c, uint32_t n_past);

/* The adapters applied to every token of this context from now on (copied; the residents
 * must outlive their use). At most 64. */
struct forward_lora;
int model_ctx_set_loras(struct model_ctx *c, const struct forward_lora *loras, size_t n);

/*
 * Runs n tokens (any n >= 1: split internally into batches of n_batch) at positions
 * n_past .. n_past+n-1, appending to the cache. When logits is non-NULL it receives the
 * n_vocab logits of the last token. -ENOSPC (cache full), -EINVAL (bad token id).
 */
int model_decode(struct model_ctx *c, struct threadpool *pool, const int32_t *tokens, size_t n,
		 float *logits);
