/* SPDX-License-Identifier: MIT */
/*
 * net.h: a llama/qwen2 model (model.h) made trainable: its parameters (LoRA A and B on chosen
 * projections over a frozen base in any engine type, or every weight as F32), one forward
 * pass over a batch that saves the activations the backward needs, and the backward that
 * accumulates parameter gradients.
 *
 * Usage:
 *   train_net_new(model, &opts, &net, &e);
 *   for each step: train_net_zero_grad(net);
 *       for each micro-batch: train_net_step(net, pool, &batch, 1.0f / labeled_in_step, &loss);
 *       optimizer on train_net_params(net)
 *
 * A batch is n_seq rows of len tokens: tokens, targets (the next token to predict, -1 for
 * no loss), positions (restarting at 0 for each packed sample) and segment ids (attention
 * never crosses a segment; -1 = padding). See data.h for how samples become batches.
 *
 * Memory: the activations of every layer are kept for the backward (about
 * n·(8·n_embd + 4·n_ff) floats + n_seq·n_head·len² for the attention probabilities per
 * layer, n = n_seq·len); with recompute only each layer's input is kept and the layer is run
 * again during the backward. Logits are made 256 rows at a time, never for the whole batch.
 *
 * Threading: one thread drives a net; the pool's threads run inside its products.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

struct model;
struct threadpool;

enum train_mode {
	TRAIN_MODE_LORA,
	TRAIN_MODE_FULL,
};

struct train_net_opts {
	enum train_mode mode;
	uint32_t rank;       /* LoRA rank >= 1 */
	float alpha;         /* LoRA alpha; scale = alpha / rank */
	float dropout;       /* LoRA dropout on the adapter's input, [0, 1) */
	uint32_t targets;    /* mask of 1 << enum lora_target */
	uint64_t seed;       /* A's init and the dropout masks */
	float init_b_std;    /* 0 (PEFT: B = 0); tests set B ~ N(0, std²) to see every gradient */
	bool recompute;      /* keep layer inputs only; recompute each layer in the backward */
};

/* One trainable tensor: F32 values and their gradient, rows × cols row-major. */
struct train_param {
	char name[96];  /* full mode: the GGUF tensor name; LoRA: "blk.L.attn_q.weight.lora_a" */
	float *w, *g;   /* owned by the net */
	int64_t rows, cols;
	bool decay;     /* weight decay applies (matrices, not norms or biases) */
	/* LoRA: which matrix of which projection */
	uint32_t layer;
	int target;     /* enum lora_target, or -1 */
	bool lora_b;
};

struct train_batch {
	int64_t n_seq, len;
	const int32_t *tokens, *targets, *pos, *seg; /* n_seq·len each */
};

struct train_net;

int train_net_new(const struct model *m, const struct train_net_opts *o, struct train_net **ret,
		  struct errmsg *e);
struct train_net *train_net_free(struct train_net *n);
DEFINE_CLEANUP_FUNC(struct train_net *, train_net_free, NULL)

size_t train_net_n_params(const struct train_net *n);
struct train_param *train_net_param(struct train_net *n, size_t i);
/* Number of trainable values. */
uint64_t train_net_n_values(const struct train_net *n);
const struct model *train_net_model(const struct train_net *n);
float train_net_lora_scale(const struct train_net *n);

void train_net_zero_grad(struct train_net *n);
/* The dropout masks of the next train_net_step() come from (seed, stream): set it per
 * micro-batch (e.g. step · accumulation + micro) so a resumed run draws the same masks. */
void train_net_set_stream(struct train_net *n, uint64_t stream);
/*
 * Forward and backward over one batch: gradients += scale · ∂(Σ token losses)/∂θ, *ret_loss
 * = Σ over the batch's labeled tokens of -log p(target) (natural log; not scaled).
 * With backward false only the loss is computed (no gradients, nothing saved).
 * -ENOMEM, -EINVAL (a token out of range).
 */
int train_net_step(struct train_net *n, struct threadpool *pool, const struct train_batch *b,
		   float scale, bool backward, double *ret_loss);
