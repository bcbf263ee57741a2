/* SPDX-License-Identifier: MIT */
/*
 * trainer.h: a whole training run: the model and data loaded, steps of gradient
 * accumulation and AdamW, checkpoints, resume, the output written (molly-train is a thin
 * front end; the daemon can run the same).
 *
 * A step takes `accum` micro-batches of `batch` rows (of at most seq_len tokens); its loss
 * is the mean over every labeled token of the step (Σ token losses / their count), and so
 * is the gradient. Micro-batch g (= step·accum + k) is batch g mod B of epoch g div B, B
 * the batches per epoch. With the same seed and thread count two runs give the same bits;
 * a run resumed from a checkpoint gives the same bits as one never stopped.
 *
 * Stop: when *stop becomes non-zero (a signal handler sets it) the run ends after the step
 * in progress, writes a checkpoint and the output, and returns -EINTR.
 */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "export.h"
#include "net.h"
#include "optim.h"

struct train_config {
	const char *model_path, *data_path, *out_path;
	enum train_format format;
	struct train_net_opts net;
	struct train_optim_opts optim; /* total_steps is filled in by the run */
	uint64_t steps;         /* 0: from epochs */
	double epochs;          /* used when steps is 0 */
	uint32_t batch, seq_len, accum, threads;
	bool pack;
	bool split_long;             /* long texts become windows of seq_len (data.h) */
	const char *checkpoint_path; /* NULL: OUT.ckpt */
	uint32_t checkpoint_every;   /* steps; 0: only at the end or on stop */
	bool resume;                 /* continue from checkpoint_path (from the start if none) */
	const char *dump_dir;        /* NULL, or where the reference comparison's files go */
	uint64_t stop_after;         /* tests: stop as on a signal after this step (0: never) */
};

struct train_progress {
	uint64_t step, total_steps;
	double loss;          /* mean over the step's labeled tokens, nats */
	float lr;
	double grad_norm;     /* before clipping */
	uint64_t tokens;      /* tokens computed in this step (padding excluded) */
	uint64_t labeled;
	double tokens_per_s;  /* over the run so far */
	double eta_s;
};

/* What a run will do, known after loading (for the progress bar and --json). */
struct train_info {
	uint64_t n_samples, n_truncated, n_split, n_tokens, n_trainable, total_steps, start_step;
};

typedef void (*train_progress_fn)(void *userdata, const struct train_progress *p);
typedef void (*train_info_fn)(void *userdata, const struct train_info *i);

int train_run(const struct train_config *c, train_info_fn info, train_progress_fn progress,
	      void *userdata, volatile sig_atomic_t *stop, struct errmsg *e);
