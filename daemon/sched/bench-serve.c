/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../engine/model.h"
#include "../engine/quant.h"
#include "../lora/adapter.h"
#include "../lora/lora-gen.h"
#include "../lora/resident.h"
#include "bench-serve.h"
#include "sched.h"

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

struct counter {
	uint64_t tokens;
	uint32_t done;
};

static void on_event(const struct sched_event *ev, void *userdata)
{
	struct counter *c = userdata;

	if (ev->type == SCHED_EVENT_TOKEN)
		__atomic_fetch_add(&c->tokens, 1, __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(&c->done, 1, __ATOMIC_RELEASE);
}

#define MAX_ADAPTERS 1024

/* Adapters are opened before the scheduler exists, so the pool can be sized for them. */
struct opened {
	struct lora_adapter *a[MAX_ADAPTERS];
	uint32_t n;
};

static int add_adapter(struct opened *op, const struct model *m, const char *path, const char *name,
		       struct errmsg *e)
{
	struct lora_open_opts lo = { .base = m, .name = name };
	int r;

	if (op->n == MAX_ADAPTERS)
		return errmsg_set(e, -E2BIG, "more than %d adapters", MAX_ADAPTERS);
	r = lora_adapter_open(path, &lo, &op->a[op->n], NULL, e);
	if (r < 0)
		return errmsg_prefix(e, r, "%s", path);
	op->n++;
	return 0;
}

/* Generates n GGUF LoRA files in a fresh temporary folder and registers them. */
static int add_generated(struct opened *op, const struct model *m, uint32_t n, uint64_t seed,
			 char names[][32], struct errmsg *e)
{
	char dir[] = "/tmp/molly-bench-serve-XXXXXX", path[256];
	int r = 0;

	if (!mkdtemp(dir))
		return errmsg_set(e, -errno, "mkdtemp: %s", strerror(errno));
	for (uint32_t i = 0; i < n && r == 0; i++) {
		struct lora_gen_opts g = { .base = m, .rank = 16, .alpha = 16, .seed = seed + i,
					   .dtype = GGML_TYPE_F16, .format = LORA_FORMAT_GGUF };

		snprintf(names[i], 32, "bench-%u", i);
		snprintf(path, sizeof(path), "%s/%.31s.gguf", dir, names[i]);
		r = lora_gen_write(path, &g, e);
		if (r == 0)
			r = add_adapter(op, m, path, names[i], e);
		unlink(path);
	}
	rmdir(dir);
	return r;
}

static int add_dir(struct opened *op, const struct model *m, const char *dirpath,
		   char names[][32], uint32_t max, uint32_t *n, struct errmsg *e)
{
	DIR *d = opendir(dirpath);
	struct dirent *de;
	int r = 0;

	if (!d)
		return errmsg_set(e, -errno, "%s: %s", dirpath, strerror(errno));
	*n = 0;
	while ((de = readdir(d)) && *n < max && r == 0) {
		char path[4096];

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dirpath, de->d_name);
		snprintf(names[*n], 32, "a%u", *n);
		r = add_adapter(op, m, path, names[*n], e);
		if (r == 0)
			(*n)++;
	}
	closedir(d);
	return r;
}

static void count_resident(const struct sched_adapter_info *info, void *userdata)
{
	uint32_t *n = userdata;

	*n += info->resident;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;

	return (x > y) - (x < y);
}

/* Sorts v[0..n) and returns its median. */
static double median(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Submits conc sequences (sequence i on adapter i mod n_ad) and steps until all are done. */
static int run_round(struct sched *s, const struct bench_serve_opts *o, uint32_t conc,
		     uint32_t n_ad, char names[][32], int32_t *prompt, uint32_t P, uint32_t T,
		     struct counter *c, struct errmsg *e)
{
	int r;

	for (uint32_t i = 0; i < conc; i++) {
		struct sched_lora sl = { n_ad ? names[i % n_ad] : NULL, 1.0f };
		struct sched_request req = {
			.prompt = prompt,
			.n_prompt = P,
			.loras = &sl,
			.n_loras = n_ad ? 1 : 0,
			.max_tokens = T,
			.ignore_eos = true,
			.on_event = on_event,
			.userdata = c,
		};
		uint64_t id;

		sampler_params_default(&req.sampling);
		req.sampling.temperature = 0;
		prompt[0] = (int32_t) ((i + 1) % o->m->hp.n_vocab); /* distinct sequences */
		r = sched_submit(s, &req, &id, e);
		if (r < 0)
			return r;
	}
	while (__atomic_load_n(&c->done, __ATOMIC_ACQUIRE) < conc)
		if ((r = sched_step(s)) < 0)
			return errmsg_set(e, r, "scheduler step failed");
	return 0;
}

/* The same round without adapters (--paired): its rate in *rate. */
static int run_paired_base(struct sched *s, const struct bench_serve_opts *o, uint32_t conc,
			   char names[][32], int32_t *prompt, uint32_t P, uint32_t T, double *rate,
			   struct errmsg *e)
{
	struct counter c = {};
	double t0 = now_s();
	int r = run_round(s, o, conc, 0, names, prompt, P, T, &c, e);

	if (r < 0)
		return r;
	*rate = (double) c.tokens / (now_s() - t0);
	return 0;
}

int bench_serve_run(const struct bench_serve_opts *o, struct bench_serve_result *ret,
		    struct errmsg *e)
{
	uint32_t conc = o->concurrency ? o->concurrency : 4;
	uint32_t P = o->prompt_tokens ? o->prompt_tokens : 16, T = o->gen_tokens ? o->gen_tokens : 64;
	struct sched_params sp = {
		.max_sequences = o->sequential ? 1 : conc,
		.queue_length = conc + 1,
		.max_context = P + T + 1,
		.n_threads = o->n_threads,
		.hot_type = o->hot_type,
	};
	_cleanup_(sched_freep) struct sched *s = NULL;
	static char names[MAX_ADAPTERS][32];
	struct counter c = {};
	struct sched_stats st;
	uint32_t n_ad = 0, rounds = o->rounds ? o->rounds : 1;
	int32_t *prompt;
	double *rates, *base_rates, *ratios, wall = 0, cpu = 0;
	uint64_t tokens = 0, warmup_steps = 0;
	int r;

	static struct opened op;
	size_t page_bytes = sched_page_bytes(o->m), pages;

	op.n = 0;
	if (o->adapters_dir)
		r = add_dir(&op, o->m, o->adapters_dir, names, MAX_ADAPTERS, &n_ad, e);
	else if (o->n_adapters) {
		n_ad = MIN(o->n_adapters, (uint32_t) MAX_ADAPTERS);
		r = add_generated(&op, o->m, n_ad, o->seed, names, e);
	} else
		r = 0;
	/* The pool holds every sequence's whole context and every adapter: the benchmark
	 * measures serving with the adapters resident, not eviction. */
	pages = (size_t) sp.max_sequences * ((sp.max_context + 15) / 16) + 4;
	for (uint32_t i = 0; i < op.n; i++)
		pages += lora_resident_pages_needed(op.a[i], o->hot_type, page_bytes);
	sp.pool_bytes = pages * page_bytes;
	if (r == 0)
		r = sched_new(o->m, &sp, &s, e);
	for (uint32_t i = 0; i < op.n; i++) {
		if (r == 0) {
			r = sched_add_adapter(s, op.a[i], e);
			if (r == 0)
				op.a[i] = NULL; /* the scheduler owns it */
		}
		op.a[i] = lora_adapter_free(op.a[i]);
	}
	if (r < 0)
		return r;
	/* make every adapter resident first: the benchmark measures serving, not loading */
	for (uint32_t i = 0; i < n_ad; i++)
		(void) sched_prefetch_adapter(s, names[i]);

	prompt = malloc(P * sizeof(*prompt));
	if (!prompt)
		return -ENOMEM;
	for (uint32_t i = 0; i < P; i++)
		prompt[i] = (int32_t) ((i * 7919u + 17) % o->m->hp.n_vocab);
	rates = calloc(3 * (size_t) rounds, sizeof(*rates));
	if (!rates) {
		free(prompt);
		return -ENOMEM;
	}
	base_rates = rates + rounds;
	ratios = base_rates + rounds;
	/* Round 0 is not timed: it touches the pool's KV pages and the caches for the first
	 * time, which a running daemon did long before (in a 64-token round that first touch
	 * is a large and unsteady part of the time). */
	for (uint32_t round = 0; round <= rounds && r >= 0; round++) {
		const bool paired = o->paired && n_ad > 0; /* without adapters there is no pair */
		double t0, cpu0, dt, dcpu, base = 0;

		/* paired: the no-adapter run first in odd rounds, second in even ones */
		if (paired && round % 2 == 1 &&
		    (r = run_paired_base(s, o, conc, names, prompt, P, T, &base, e)) < 0)
			continue;
		t0 = now_s();
		cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
		c = (struct counter){};
		r = run_round(s, o, conc, n_ad, names, prompt, P, T, &c, e);
		if (r < 0)
			continue;
		dt = now_s() - t0;
		dcpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
		if (paired && round % 2 == 0 &&
		    (r = run_paired_base(s, o, conc, names, prompt, P, T, &base, e)) < 0)
			continue;
		if (round == 0) {
			sched_get_stats(s, &st);
			warmup_steps = st.steps;
			continue;
		}
		wall += dt;
		cpu += dcpu;
		tokens += c.tokens;
		rates[round - 1] = (double) c.tokens / dt;
		base_rates[round - 1] = base;
		ratios[round - 1] = base > 0 ? rates[round - 1] / base : 0;
	}
	free(prompt);
	if (r < 0) {
		free(rates);
		return r;
	}
	ret->wall_s = wall;
	ret->cpu_util = cpu / (wall * MAX(o->n_threads, 1));
	ret->generated = tokens;
	ret->aggregate_tok_s = median(rates, rounds);
	if (o->paired && n_ad) {
		ret->base_tok_s = median(base_rates, rounds);
		ret->paired_ratio = median(ratios, rounds);
	}
	free(rates);
	sched_get_stats(s, &st);
	ret->steps = st.steps - warmup_steps; /* of the timed rounds */
	ret->adapters_loaded = n_ad;
	ret->adapters_used = MIN(n_ad, conc);
	ret->adapters_resident = 0;
	sched_foreach_adapter(s, count_resident, &ret->adapters_resident);
	return 0;
}
