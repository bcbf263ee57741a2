/* SPDX-License-Identifier: MIT */
/*
 * trainer.c: the training loop (see trainer.h), and the files of the PyTorch comparison
 * (--dump: config.json, base.safetensors, init.safetensors, batch-N, params-N and grads-N for
 * the first steps, final.safetensors), which tests/train_reference.py reads.
 */
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../basic/sha256.h"
#include "../basic/time-util.h"
#include "../engine/gguf.h"
#include "../engine/model.h"
#include "../engine/quant.h"
#include "../engine/threadpool.h"
#include "../lora/safetensors.h"
#include "checkpoint.h"
#include "data.h"
#include "trainer.h"

#define DUMP_GRAD_STEPS 3

static int hash_file(const char *path, struct sha256_ctx *h, struct errmsg *e)
{
	char buf[65536];
	size_t n;
	FILE *f = fopen(path, "re");

	if (!f)
		return errmsg_set(e, -errno, "%s: %m", path);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		sha256_update(h, buf, n);
	fclose(f);
	return 0;
}

/* What the run computes: model and data bytes, every option that changes the bits. */
static int run_hash(const struct train_config *c, uint8_t out[32], struct errmsg *e)
{
	struct sha256_ctx h;
	char opts[1024];
	int r;

	sha256_init(&h);
	if ((r = hash_file(c->model_path, &h, e)) < 0 || (r = hash_file(c->data_path, &h, e)) < 0)
		return r;
	snprintf(opts, sizeof(opts),
		 "mode=%d rank=%u alpha=%a dropout=%a targets=%u seed=%" PRIu64 " initb=%a "
		 "lr=%a b1=%a b2=%a eps=%a wd=%a clip=%a warmup=%u total=%" PRIu64 " sched=%d "
		 "batch=%u len=%u accum=%u pack=%d",
		 c->net.mode, c->net.rank, c->net.alpha, c->net.dropout, c->net.targets, c->net.seed,
		 c->net.init_b_std, c->optim.lr, c->optim.beta1, c->optim.beta2, c->optim.eps,
		 c->optim.weight_decay, c->optim.clip, c->optim.warmup, c->optim.total_steps,
		 c->optim.sched, c->batch, c->seq_len, c->accum, c->pack);
	sha256_update(&h, opts, strlen(opts));
	if (c->split_long) /* appended only when set: earlier runs' hashes stay as they were */
		sha256_update(&h, " split=1", 8);
	sha256_final(&h, out);
	return 0;
}

/* ---- the reference comparison's files ---- */

static int dump_params(struct train_net *net, const char *dir, const char *file, bool grads,
		       struct errmsg *e)
{
	size_t n = train_net_n_params(net);
	_cleanup_free_ struct safetensors_tensor *t = calloc(n, sizeof(*t));
	char path[4096];

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct train_param *p = train_net_param(net, i);

		t[i] = (struct safetensors_tensor){ .name = p->name, .dtype = SAFETENSORS_F32,
						    .n_dims = 2, .shape = { p->rows, p->cols },
						    .data = grads ? p->g : p->w };
	}
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	return safetensors_write(path, t, n, NULL, 0, e);
}

static int dump_base(const struct model *m, const char *dir, struct errmsg *e)
{
	const struct gguf *g = m->gguf;
	size_t n = gguf_n_tensors(g);
	_cleanup_free_ struct safetensors_tensor *t = calloc(n, sizeof(*t));
	float **vals = calloc(n, sizeof(*vals));
	char path[4096];
	int r = 0;

	if (!t || !vals) {
		free(vals);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n && r >= 0; i++) {
		const struct gguf_tensor *gt = gguf_tensor_at(g, i);
		uint64_t rows = gt->n_dims > 1 ? gt->ne[1] : 1, cols = gt->ne[0];

		vals[i] = malloc(rows * cols * sizeof(float));
		if (!vals[i]) {
			r = -ENOMEM;
			break;
		}
		for (uint64_t k = 0; k < rows; k++)
			quant_dequantize_row(gt->type,
					     (const uint8_t *) gt->data +
						     k * (uint64_t) gguf_ggml_row_bytes(gt->type, cols),
					     vals[i] + k * cols, (int64_t) cols);
		t[i] = (struct safetensors_tensor){ .name = gt->name, .dtype = SAFETENSORS_F32,
						    .n_dims = 2, .shape = { rows, cols },
						    .data = vals[i] };
	}
	if (r >= 0) {
		snprintf(path, sizeof(path), "%s/base.safetensors", dir);
		r = safetensors_write(path, t, n, NULL, 0, e);
	}
	for (size_t i = 0; i < n; i++)
		free(vals[i]);
	free(vals);
	return r;
}

static int dump_config(const struct train_config *c, const struct model *m, uint64_t total,
		       const char *dir, struct errmsg *e)
{
	const struct model_hparams *hp = &m->hp;
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "we");
	if (!f)
		return errmsg_set(e, -errno, "%s: %m", path);
	fprintf(f,
		"{\"arch\": \"%s\", \"n_embd\": %u, \"n_layer\": %u, \"n_head\": %u, "
		"\"n_head_kv\": %u, \"head_dim\": %u, \"n_ff\": %u, \"n_vocab\": %u, "
		"\"rope_dim\": %u, \"rope_base\": %.9g, \"rope_freq_scale\": %.9g, "
		"\"rope_neox\": %s, \"rms_eps\": %.9g, \"tied_output\": %s, "
		"\"mode\": \"%s\", \"rank\": %u, \"alpha\": %.9g, \"targets\": %u, "
		"\"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, "
		"\"weight_decay\": %.9g, \"clip\": %.9g, \"warmup\": %u, \"sched\": %d, "
		"\"total_steps\": %" PRIu64 ", \"accum\": %u, \"grad_steps\": %d}\n",
		model_arch_name(hp->arch), hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv,
		hp->head_dim, hp->n_ff, hp->n_vocab, hp->rope_dim, hp->rope_base,
		hp->rope_freq_scale, hp->rope_style == ROPE_STYLE_NEOX ? "true" : "false",
		hp->rms_eps, hp->tied_output ? "true" : "false",
		c->net.mode == TRAIN_MODE_FULL ? "full" : "lora", c->net.rank, c->net.alpha,
		c->net.targets, c->optim.lr, c->optim.beta1, c->optim.beta2, c->optim.eps,
		c->optim.weight_decay, c->optim.clip, c->optim.warmup, c->optim.sched, total,
		c->accum, DUMP_GRAD_STEPS);
	if (fclose(f) != 0)
		return errmsg_set(e, -EIO, "%s: write failed", path);
	return 0;
}

static int dump_batch(const struct train_batch *b, const char *dir, uint64_t step, uint32_t k,
		      struct errmsg *e)
{
	const int32_t *arrs[4] = { b->tokens, b->targets, b->pos, b->seg };
	static const char *const names[4] = { "tokens", "targets", "pos", "seg" };
	struct safetensors_tensor t[4];
	char path[4096];

	for (int i = 0; i < 4; i++)
		t[i] = (struct safetensors_tensor){ .name = (char *) names[i],
						    .dtype = SAFETENSORS_I32, .n_dims = 2,
						    .shape = { (uint64_t) b->n_seq, (uint64_t) b->len },
						    .data = arrs[i] };
	snprintf(path, sizeof(path), "%s/batch-%06" PRIu64 "-%u.safetensors", dir, step, k);
	return safetensors_write(path, t, 4, NULL, 0, e);
}

/* ---- the run ---- */

int train_run(const struct train_config *c0, train_info_fn info, train_progress_fn progress,
	      void *ud, volatile sig_atomic_t *stop, struct errmsg *e)
{
	struct train_config c = *c0;
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(train_data_freep) struct train_data *d = NULL;
	_cleanup_(train_net_freep) struct train_net *net = NULL;
	_cleanup_(train_optim_freep) struct train_optim *opt = NULL;
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	_cleanup_free_ char *ckpt_default = NULL;
	struct train_epoch ep = { 0 };
	struct train_batch_buf bb = { 0 };
	struct train_epoch probe = { 0 };
	uint64_t cur_epoch = UINT64_MAX, bpe, total, t_tokens = 0;
	uint8_t rh[32];
	uint64_t t0, start;
	int r;

	if ((r = model_load(c.model_path, &m, e)) < 0)
		return r;
	if ((r = train_data_load(c.data_path, m, c.seq_len, c.split_long, &d, e)) < 0)
		return r;
	if ((r = train_epoch_plan(d, c.net.seed, 0, c.seq_len, c.pack, &probe)) < 0)
		return r;
	bpe = (probe.n_rows + c.batch - 1) / c.batch;
	train_epoch_done(&probe);
	total = c.steps ? c.steps : (uint64_t) ceil(c.epochs * (double) bpe / c.accum);
	if (total == 0)
		total = 1;
	c.optim.total_steps = total;
	if ((r = train_net_new(m, &c.net, &net, e)) < 0 ||
	    (r = train_optim_new(net, &c.optim, &opt)) < 0 ||
	    (r = threadpool_new((int) c.threads, &pool)) < 0 ||
	    (r = train_batch_buf_init(&bb, c.batch, c.seq_len)) < 0)
		goto out;
	if (!c.checkpoint_path) {
		if (asprintf(&ckpt_default, "%s.ckpt", c.out_path) < 0) {
			ckpt_default = NULL;
			r = -ENOMEM;
			goto out;
		}
		c.checkpoint_path = ckpt_default;
	}
	if ((r = run_hash(&c, rh, e)) < 0)
		goto out;
	/* --resume without a checkpoint yet (stopped or crashed before the first one) starts
	 * from the beginning: what a resume of that run would do. */
	if (c.resume && access(c.checkpoint_path, F_OK) == 0 &&
	    (r = train_checkpoint_load(c.checkpoint_path, net, opt, rh, e)) < 0)
		goto out;
	if (c.dump_dir) {
		(void) mkdir(c.dump_dir, 0755);
		if ((r = dump_config(&c, m, total, c.dump_dir, e)) < 0 ||
		    (r = dump_base(m, c.dump_dir, e)) < 0 ||
		    (r = dump_params(net, c.dump_dir, "init.safetensors", false, e)) < 0)
			goto out;
	}
	if (info)
		info(ud, &(struct train_info){ .n_samples = d->n_samples,
					       .n_truncated = d->n_truncated,
					       .n_split = d->n_split,
					       .n_tokens = d->n_tokens,
					       .n_trainable = train_net_n_values(net),
					       .total_steps = total,
					       .start_step = train_optim_steps(opt) });
	t0 = now_ns();
	start = train_optim_steps(opt);
	for (uint64_t step = train_optim_steps(opt); step < total; step = train_optim_steps(opt)) {
		uint64_t labeled = 0, tokens = 0;
		double loss = 0, norm;
		float lr;

		if ((stop && *stop) || (c.stop_after && step >= c.stop_after)) {
			r = -EINTR;
			break;
		}
		if (c.dump_dir && step < DUMP_GRAD_STEPS) {
			char name[64];

			snprintf(name, sizeof(name), "params-%06" PRIu64 ".safetensors", step);
			if ((r = dump_params(net, c.dump_dir, name, false, e)) < 0)
				goto out;
		}
		/* count the step's labeled tokens first: the loss is their mean */
		for (int pass = 0; pass < 2; pass++) {
			for (uint32_t k = 0; k < c.accum; k++) {
				uint64_t g = step * c.accum + k, epoch = g / bpe, idx = g % bpe;
				size_t r0 = idx * c.batch, nr;
				double l;

				if (epoch != cur_epoch) {
					train_epoch_done(&ep);
					if ((r = train_epoch_plan(d, c.net.seed, epoch, c.seq_len, c.pack,
								  &ep)) < 0)
						goto out;
					cur_epoch = epoch;
				}
				nr = ep.n_rows - r0 < c.batch ? ep.n_rows - r0 : c.batch;
				if (pass == 0) {
					labeled += train_batch_fill(&bb, d, &ep, r0, nr, c.seq_len);
					continue;
				}
				(void) train_batch_fill(&bb, d, &ep, r0, nr, c.seq_len);
				for (int64_t t = 0; t < bb.b.n_seq * bb.b.len; t++)
					tokens += bb.b.seg[t] >= 0;
				if (c.dump_dir && (r = dump_batch(&bb.b, c.dump_dir, step, k, e)) < 0)
					goto out;
				train_net_set_stream(net, g);
				r = train_net_step(net, pool, &bb.b, 1.0f / (float) labeled, true, &l);
				if (r < 0) {
					errmsg_set(e, r, "step %" PRIu64 ": %s", step + 1, strerror(-r));
					goto out;
				}
				loss += l;
			}
			if (pass == 0) {
				if (labeled == 0)
					labeled = 1; /* a step of prompts only: zero gradient */
				train_net_zero_grad(net);
			}
		}
		if (c.dump_dir && step < DUMP_GRAD_STEPS) {
			char name[64];

			snprintf(name, sizeof(name), "grads-%06" PRIu64 ".safetensors", step);
			if ((r = dump_params(net, c.dump_dir, name, true, e)) < 0)
				goto out;
		}
		train_optim_step(opt, &norm, &lr);
		t_tokens += tokens;
		if (progress) {
			double el = (double) (now_ns() - t0) / 1e9;
			uint64_t done = train_optim_steps(opt);

			progress(ud, &(struct train_progress){
					     .step = done, .total_steps = total,
					     .loss = loss / (double) labeled, .lr = lr,
					     .grad_norm = norm, .tokens = tokens, .labeled = labeled,
					     .tokens_per_s = el > 0 ? (double) t_tokens / el : 0,
					     .eta_s = el / (double) (done - start) * (double) (total - done) });
		}
		if (c.checkpoint_every && train_optim_steps(opt) % c.checkpoint_every == 0 &&
		    train_optim_steps(opt) < total &&
		    (r = train_checkpoint_save(c.checkpoint_path, net, opt, rh, e)) < 0)
			goto out;
	}
	{
		int r2 = train_checkpoint_save(c.checkpoint_path, net, opt, rh, e);

		if (r2 >= 0)
			r2 = train_export(net, c.format, c.out_path, e);
		if (r2 >= 0 && c.dump_dir)
			r2 = dump_params(net, c.dump_dir, "final.safetensors", false, e);
		if (r2 < 0)
			r = r2;
	}
out:
	train_epoch_done(&ep);
	train_batch_buf_done(&bb);
	return r;
}
