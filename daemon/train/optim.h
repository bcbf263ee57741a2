/* SPDX-License-Identifier: MIT */
/*
 * optim.h: AdamW with decoupled weight decay, a warmup + cosine/linear/constant learning-rate
 * schedule, and gradient clipping by global norm, over a net's parameters (net.h).
 *
 * Arithmetic as PyTorch's torch.optim.AdamW (single-tensor path) in float:
 *   w *= 1 - lr·wd  (matrices only: train_param.decay)
 *   m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²
 *   w -= lr/(1-β1^t) · m / (√v / √(1-β2^t) + ε)
 * clip: total = √Σ g² (double); when total > max, g *= max / (total + 1e-6), as
 * torch.nn.utils.clip_grad_norm_.
 * Schedule at step s (0-based), as transformers' get_{cosine,linear}_schedule_with_warmup:
 *   s < warmup: lr·s/warmup; after: cosine lr·½(1+cos(π·p)) or linear lr·(1-p), p = (s -
 *   warmup)/(total - warmup).
 */
#pragma once

#include <stdint.h>

#include "../basic/macro.h"

struct train_net;

enum train_sched {
	TRAIN_SCHED_COSINE,
	TRAIN_SCHED_LINEAR,
	TRAIN_SCHED_CONSTANT,
};

struct train_optim_opts {
	float lr, beta1, beta2, eps, weight_decay;
	float clip;      /* max global norm; 0 = no clipping */
	uint32_t warmup; /* steps */
	uint64_t total_steps;
	enum train_sched sched;
};

struct train_optim;

int train_optim_new(struct train_net *net, const struct train_optim_opts *o,
		    struct train_optim **ret);
struct train_optim *train_optim_free(struct train_optim *o);
DEFINE_CLEANUP_FUNC(struct train_optim *, train_optim_free, NULL)

float train_lr_at(const struct train_optim_opts *o, uint64_t step);
/* Clips the gradients, updates the parameters, counts the step. The gradient norm before
 * clipping and the learning rate used come back in the out parameters (may be NULL). */
void train_optim_step(struct train_optim *o, double *ret_norm, float *ret_lr);
/* Steps taken. */
uint64_t train_optim_steps(const struct train_optim *o);
void train_optim_set_steps(struct train_optim *o, uint64_t steps);
/* The moments of parameter i (rows·cols floats each), for checkpoints. */
float *train_optim_m(struct train_optim *o, size_t i);
float *train_optim_v(struct train_optim *o, size_t i);
