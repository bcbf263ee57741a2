/* SPDX-License-Identifier: MIT */
/*
 * lora-gen.h: seeded random LoRA adapters in the public formats, for tests and benchmarks
 * (molly-mkadapter is a thin front end).
 *
 * Every layer of the base gets a pair for each selected target. A ~ N(0, 1/n_in) (the
 * Kaiming-style scale PEFT's init uses, so A·x has unit-order entries) and B ~ N(0, b_std²),
 * B non-zero unlike a fresh PEFT adapter, so the adapter changes the logits visibly; with
 * b_std 0.02 and scale alpha/rank around 1-2 the change is noticeable but not absurd.
 * The values depend only on (seed, layer, target, A/B), so lora_gen_values() reproduces what
 * any format holds (before its rounding to F16/BF16).
 *
 *   PEFT: PATH is a directory (created if needed) with adapter_config.json and
 *         adapter_model.safetensors (tensor names as PEFT writes them for Llama models).
 *   GGUF: PATH is a llama.cpp GGUF LoRA file (general.type adapter, adapter.lora.alpha).
 * Files are written atomically (tmp + fsync + rename).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "adapter.h"

struct lora_gen_opts {
	const struct model *base; /* borrowed: shapes and architecture */
	uint32_t rank;            /* >= 1 */
	float alpha;              /* 0: rank (scale 1) */
	uint32_t targets;         /* mask of 1 << enum lora_target; 0: all seven */
	uint64_t seed;
	uint32_t dtype;          /* GGML_TYPE_F32 (0), GGML_TYPE_F16 or GGML_TYPE_BF16 */
	enum lora_format format; /* LORA_FORMAT_PEFT or LORA_FORMAT_GGUF */
	float b_std;             /* 0: 0.02 */
};

int lora_gen_write(const char *path, const struct lora_gen_opts *o, struct errmsg *e);

/* A matrix pair with given values (the trainer's): A [rank][n_in], B [n_out][rank] F32. */
struct lora_gen_mat {
	uint32_t layer;
	enum lora_target target;
	uint32_t n_in, n_out;
	const float *a, *b; /* borrowed */
};
/* Writes the n pairs (o->rank, o->alpha, o->dtype, o->format as for lora_gen_write(); seed,
 * b_std and targets ignored: the targets are those of the pairs) in the same layouts. */
int lora_gen_write_mats(const char *path, const struct lora_gen_opts *o,
			const struct lora_gen_mat *mats, size_t n, struct errmsg *e);

/* The n float values of one matrix: A ([rank][n_in], std 1/sqrt(n_in)) when !b_matrix,
 * else B ([n_out][rank], std b_std). */
void lora_gen_values(uint64_t seed, uint32_t layer, enum lora_target t, bool b_matrix, float std,
		     float *out, size_t n);

/* The PEFT module key and GGUF tensor base name of a target in a layer, e.g.
 * "model.layers.3.self_attn.q_proj" and "blk.3.attn_q.weight". */
int lora_gen_peft_key(uint32_t layer, enum lora_target t, char *buf, size_t size);
int lora_gen_gguf_name(uint32_t layer, enum lora_target t, char *buf, size_t size);
