/* SPDX-License-Identifier: MIT */
/*
 * molly-train: trains a LoRA adapter (or, with --full, every weight) of a llama/qwen2 GGUF
 * model on JSONL data, on the CPU. See docs/training.md.
 *
 *   molly-train --model M.gguf --data F.jsonl --out PATH [--format molly|peft|gguf]
 *               [--rank R] [--alpha A] [--targets q,k,v,o,gate,up,down|all] [--full]
 *               [--steps N | --epochs E] [--lr X] [--warmup N] [--batch B] [--seq-len L]
 *               [--seed S] [--threads T] [--json] ...
 *
 * Ctrl-C stops after the step in progress (a checkpoint and the output are written; run
 * again with --resume to continue); a second Ctrl-C kills.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../daemon/lora/adapter.h"
#include "../daemon/train/trainer.h"

static volatile sig_atomic_t stop_flag;

static void on_sigint(int sig)
{
	stop_flag = 1;
	signal(sig, SIG_DFL); /* a second Ctrl-C kills */
}

struct ui {
	bool json, bar;
};

static void on_info(void *ud, const struct train_info *i)
{
	struct ui *u = ud;

	if (u->json)
		printf("{\"event\": \"start\", \"samples\": %" PRIu64 ", \"truncated\": %" PRIu64
		       ", \"split\": %" PRIu64 ", \"tokens\": %" PRIu64 ", \"trainable\": %" PRIu64
		       ", \"total_steps\": %" PRIu64 ", \"start_step\": %" PRIu64 "}\n",
		       i->n_samples, i->n_truncated, i->n_split, i->n_tokens, i->n_trainable,
		       i->total_steps, i->start_step);
	else
		fprintf(stderr,
			"molly-train: %" PRIu64 " samples (%" PRIu64 " cut to --seq-len, %" PRIu64
			" texts split into windows), %" PRIu64 " tokens; %" PRIu64
			" trainable values; steps %" PRIu64 "..%" PRIu64 "\n",
			i->n_samples, i->n_truncated, i->n_split, i->n_tokens, i->n_trainable,
			i->start_step + 1, i->total_steps);
	fflush(stdout);
}

static void on_progress(void *ud, const struct train_progress *p)
{
	struct ui *u = ud;

	if (u->json) {
		printf("{\"step\": %" PRIu64 ", \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
		       "\"tokens\": %" PRIu64 ", \"labeled\": %" PRIu64 ", \"tokens_per_s\": %.1f}\n",
		       p->step, p->loss, p->lr, p->grad_norm, p->tokens, p->labeled,
		       p->tokens_per_s);
		fflush(stdout);
	}
	if (u->bar) {
		int w = 30, fill = (int) ((double) w * (double) p->step / (double) p->total_steps);
		unsigned eta = (unsigned) p->eta_s;

		fprintf(stderr, "\r[%.*s%*s] step %" PRIu64 "/%" PRIu64 " loss %.4f %.0f tok/s "
			"ETA %um%02us ",
			fill, "##############################", w - fill, "", p->step,
			p->total_steps, p->loss, p->tokens_per_s, eta / 60, eta % 60);
		if (p->step == p->total_steps)
			fputc('\n', stderr);
	} else if (!u->json) {
		fprintf(stderr, "step %" PRIu64 "/%" PRIu64 " loss %.4f lr %.3g %.0f tok/s\n",
			p->step, p->total_steps, p->loss, p->lr, p->tokens_per_s);
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: molly-train --model M.gguf --data F.jsonl --out PATH [options]\n"
		"  --format molly|peft|gguf   adapter output (default molly; --full writes GGUF)\n"
		"  --rank R (8)  --alpha A (rank)  --dropout P (0)\n"
		"  --targets q,k,v,o,gate,up,down|all   (default q,k,v,o)\n"
		"  --full                     train every weight (F32) instead of LoRA\n"
		"  --steps N | --epochs E     (default 1 epoch)\n"
		"  --lr X (1e-4)  --warmup N (0)  --schedule cosine|linear|constant (cosine)\n"
		"  --weight-decay W (0)  --clip C (1.0; 0 = off)  --grad-accum K (1)\n"
		"  --batch B (4)  --seq-len L (512)  --no-pack  --recompute\n"
		"  --split-long               a text longer than --seq-len becomes windows of it\n"
		"                             (overlapping by one token) instead of being cut\n"
		"  --seed S (0)  --threads T (all CPUs)\n"
		"  --checkpoint PATH (OUT.ckpt)  --checkpoint-every N (100; 0: at the end only)\n"
		"  --resume                   continue from the checkpoint (from the start if none)\n"
		"  --json                     one JSON object per step on stdout\n"
		"  --dump DIR                 files for tests/train_reference.py\n");
}

static int parse_u64(const char *s, uint64_t *ret)
{
	char *end;

	errno = 0;
	*ret = strtoull(s, &end, 10);
	return errno || end == s || *end || s[0] == '-' ? -EINVAL : 0;
}

static int parse_f(const char *s, double *ret)
{
	char *end;

	errno = 0;
	*ret = strtod(s, &end);
	return errno || end == s || *end ? -EINVAL : 0;
}

int main(int argc, char **argv)
{
	enum { O_FORMAT = 256, O_RANK, O_ALPHA, O_DROPOUT, O_TARGETS, O_FULL, O_STEPS, O_EPOCHS,
	       O_LR, O_WARMUP, O_SCHED, O_WD, O_CLIP, O_ACCUM, O_BATCH, O_SEQ, O_NOPACK, O_SPLIT, O_RECOMP,
	       O_SEED, O_THREADS, O_CKPT, O_CKPT_EVERY, O_RESUME, O_JSON, O_DUMP, O_INITB,
	       O_MODEL, O_DATA, O_OUT, O_HELP, O_STOP_AFTER };
	static const struct option opts[] = {
		{ "model", 1, 0, O_MODEL },     { "data", 1, 0, O_DATA },
		{ "out", 1, 0, O_OUT },         { "format", 1, 0, O_FORMAT },
		{ "rank", 1, 0, O_RANK },       { "alpha", 1, 0, O_ALPHA },
		{ "dropout", 1, 0, O_DROPOUT }, { "targets", 1, 0, O_TARGETS },
		{ "full", 0, 0, O_FULL },       { "steps", 1, 0, O_STEPS },
		{ "epochs", 1, 0, O_EPOCHS },   { "lr", 1, 0, O_LR },
		{ "warmup", 1, 0, O_WARMUP },   { "schedule", 1, 0, O_SCHED },
		{ "weight-decay", 1, 0, O_WD }, { "clip", 1, 0, O_CLIP },
		{ "grad-accum", 1, 0, O_ACCUM }, { "batch", 1, 0, O_BATCH },
		{ "seq-len", 1, 0, O_SEQ },     { "no-pack", 0, 0, O_NOPACK },
		{ "recompute", 0, 0, O_RECOMP }, { "seed", 1, 0, O_SEED },
		{ "threads", 1, 0, O_THREADS }, { "checkpoint", 1, 0, O_CKPT },
		{ "checkpoint-every", 1, 0, O_CKPT_EVERY }, { "resume", 0, 0, O_RESUME },
		{ "json", 0, 0, O_JSON },       { "dump", 1, 0, O_DUMP },
		{ "init-b-std", 1, 0, O_INITB }, { "help", 0, 0, O_HELP },
		{ "stop-after", 1, 0, O_STOP_AFTER }, { "split-long", 0, 0, O_SPLIT },
		{ 0 },
	};
	struct train_config c = {
		.format = TRAIN_FORMAT_MOLLY,
		.net = { .mode = TRAIN_MODE_LORA, .rank = 8, .seed = 0,
			 .targets = 1u << LORA_TARGET_Q | 1u << LORA_TARGET_K |
				    1u << LORA_TARGET_V | 1u << LORA_TARGET_O },
		.optim = { .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .clip = 1.0f,
			   .sched = TRAIN_SCHED_COSINE },
		.epochs = 1, .batch = 4, .seq_len = 512, .accum = 1, .pack = true,
		.checkpoint_every = 100,
	};
	struct ui ui = { 0 };
	struct errmsg e = { 0 };
	bool have_alpha = false, have_format = false;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int opt, r;

	c.threads = ncpu > 0 ? (uint32_t) ncpu : 1;
	/* The products take and give back scratch of a few MiB per call, thousands of times a
	 * step: kept in the heap (not mmap'd and unmapped each time), its pages are faulted in
	 * once instead of on every call. */
	(void) mallopt(M_MMAP_THRESHOLD, 32 << 20); /* glibc's maximum */
	(void) mallopt(M_TRIM_THRESHOLD, 256 << 20);
	/* The trainer reads weights in their stored layout (it packs its own tiles per
	 * product): the inference repack at load would only cost time and a copy of the model. */
	(void) setenv("MOLLY_REPACK", "0", 0);
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		uint64_t u = 0;
		double f = 0;
		int bad = 0;

		switch (opt) {
		case O_MODEL: c.model_path = optarg; break;
		case O_DATA: c.data_path = optarg; break;
		case O_OUT: c.out_path = optarg; break;
		case O_FORMAT:
			bad = train_format_from_name(optarg, &c.format);
			have_format = true;
			break;
		case O_RANK: bad = parse_u64(optarg, &u) || u == 0 || u > 4096; c.net.rank = (uint32_t) u; break;
		case O_ALPHA: bad = parse_f(optarg, &f) || !(f > 0); c.net.alpha = (float) f; have_alpha = true; break;
		case O_DROPOUT: bad = parse_f(optarg, &f) || !(f >= 0 && f < 1); c.net.dropout = (float) f; break;
		case O_TARGETS:
			if (lora_targets_parse(optarg, &c.net.targets, &e) < 0) {
				fprintf(stderr, "molly-train: --targets: %s\n", e.text);
				return 2;
			}
			break;
		case O_FULL: c.net.mode = TRAIN_MODE_FULL; break;
		case O_STEPS: bad = parse_u64(optarg, &c.steps) || c.steps == 0; break;
		case O_EPOCHS: bad = parse_f(optarg, &c.epochs) || !(c.epochs > 0); break;
		case O_LR: bad = parse_f(optarg, &f) || !(f > 0); c.optim.lr = (float) f; break;
		case O_WARMUP: bad = parse_u64(optarg, &u) || u > UINT32_MAX; c.optim.warmup = (uint32_t) u; break;
		case O_SCHED:
			if (!strcmp(optarg, "cosine"))
				c.optim.sched = TRAIN_SCHED_COSINE;
			else if (!strcmp(optarg, "linear"))
				c.optim.sched = TRAIN_SCHED_LINEAR;
			else if (!strcmp(optarg, "constant"))
				c.optim.sched = TRAIN_SCHED_CONSTANT;
			else
				bad = 1;
			break;
		case O_WD: bad = parse_f(optarg, &f) || !(f >= 0); c.optim.weight_decay = (float) f; break;
		case O_CLIP: bad = parse_f(optarg, &f) || !(f >= 0); c.optim.clip = (float) f; break;
		case O_ACCUM: bad = parse_u64(optarg, &u) || u == 0 || u > 65536; c.accum = (uint32_t) u; break;
		case O_BATCH: bad = parse_u64(optarg, &u) || u == 0 || u > 65536; c.batch = (uint32_t) u; break;
		case O_SEQ: bad = parse_u64(optarg, &u) || u < 2 || u > 1u << 20; c.seq_len = (uint32_t) u; break;
		case O_NOPACK: c.pack = false; break;
		case O_SPLIT: c.split_long = true; break;
		case O_RECOMP: c.net.recompute = true; break;
		case O_SEED: bad = parse_u64(optarg, &c.net.seed); break;
		case O_THREADS: bad = parse_u64(optarg, &u) || u == 0 || u > 1024; c.threads = (uint32_t) u; break;
		case O_CKPT: c.checkpoint_path = optarg; break;
		case O_CKPT_EVERY: bad = parse_u64(optarg, &u) || u > UINT32_MAX; c.checkpoint_every = (uint32_t) u; break;
		case O_RESUME: c.resume = true; break;
		case O_JSON: ui.json = true; break;
		case O_DUMP: c.dump_dir = optarg; break;
		case O_INITB: bad = parse_f(optarg, &f) || !(f >= 0); c.net.init_b_std = (float) f; break;
		case O_STOP_AFTER: bad = parse_u64(optarg, &c.stop_after); break;
		case O_HELP: case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (bad) {
			const char *name = "?";

			for (const struct option *o = opts; o->name; o++)
				if (o->val == opt)
					name = o->name;
			fprintf(stderr, "molly-train: bad value for --%s: '%s'\n", name, optarg);
			return 2;
		}
	}
	if (optind < argc || !c.model_path || !c.data_path || !c.out_path) {
		usage(stderr);
		return 2;
	}
	if (c.net.mode == TRAIN_MODE_FULL && have_format && c.format != TRAIN_FORMAT_GGUF) {
		fprintf(stderr, "molly-train: --full writes a GGUF model (--format gguf)\n");
		return 2;
	}
	if (!have_alpha)
		c.net.alpha = (float) c.net.rank;
	ui.bar = !ui.json && isatty(STDERR_FILENO);
	{
		struct sigaction sa = { .sa_handler = on_sigint };

		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	r = train_run(&c, on_info, on_progress, &ui, &stop_flag, &e);
	if (r == -EINTR) {
		fprintf(stderr, "molly-train: stopped at a step boundary; checkpoint and %s written "
			"(--resume continues)\n", c.out_path);
		return 130;
	}
	if (r < 0) {
		fprintf(stderr, "molly-train: %s\n", e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	if (ui.json)
		printf("{\"event\": \"done\", \"out\": \"%s\"}\n", c.out_path);
	else
		fprintf(stderr, "molly-train: wrote %s\n", c.out_path);
	return 0;
}
