/* SPDX-License-Identifier: MIT */
/*
 * molly-bench: prompt-processing and generation speed of the engine, and how close decode
 * comes to the memory-bandwidth bound.
 *
 *   molly-bench --model M [--threads T] [--pp N] [--tg N] [--reps R] [--json] [--progress]
 *
 * pp: N prompt tokens decoded as one batch from an empty context. tg: N tokens decoded one
 * at a time from an empty context (as llama-bench's tg). Each is repeated R times; median,
 * min and max are reported. In the same run, interleaved with the reps, it measures memory
 * read bandwidth: all threads, widest vector loads the CPU has, a 2 GiB buffer, best of 5.
 *
 * roofline_frac = tg_tok_s × bytes_per_token / bandwidth, where bytes_per_token is the bytes
 * of every weight tensor read for one token (all matrices and norms, `output` included; one
 * row of `token_embd`), KV cache excluded; GB = 1e9.
 *
 * cpu_util (pp and tg): CPU time the process got during the timed runs over wall time ×
 * threads. Our threads spin while they wait, so on a quiet machine it is ~1.0; less means
 * other processes took the cores and the tok/s figures of that run are not the engine's.
 * repacked_bytes: weights repacked at load (model.h; MOLLY_REPACK=0 turns it off), included
 * in load_s.
 *
 * --progress writes "molly-bench: pp run I/R" (or tg) to stderr right before each timed run
 * (after its context is made: creating one faults its memory in, one thread, untimed) and
 * "... done" right after it, as llama-bench --progress announces its runs, so that a
 * program watching both (tools/bench-vs-llama.py) can measure each timed run's CPU from
 * outside the same way for either.
 *
 * The program is one mode (model_bench()) behind the option parser: other modes (e.g. a
 * server load test) belong in their own function beside it.
 *
 *   molly-bench --serve --model M --adapters DIR|N --concurrency C [--prompt-tokens P]
 *               [--tokens T] [--sequential] [--threads T] [--hot-type stored|q8_0] [--rounds R]
 *               [--paired] [--json]
 *
 * --serve: C sequences (prompt P = 16 and T = 64 generated tokens by default), each on one of
 * the adapters (DIR: every adapter file or PEFT directory in it; N: N generated ones, rank 16
 * on all seven projections, F16; all made resident first), through the real scheduler; the
 * aggregate generated tokens per second of wall time, prefill included: the median of R timed
 * rounds (default 1), after one untimed round that touches the pool and caches first, as a
 * running daemon has. --sequential runs the same C sequences one after another (max one
 * running) for the unbatched comparison. --paired runs every round (the untimed one too) a
 * second time without adapters, right before or after it (alternating), and adds
 * base_tok_s (that rate's median) and paired_ratio (the median of the rounds' ratios, with
 * adapters / without): the host's rate drifts by ±5-10 % from one minute to the next, which a
 * ratio of two separate runs carries whole and a ratio within a pair mostly cancels. steps
 * then counts both runs' steps.
 *
 *   molly-bench --kernels [--reps R] [--simd LEVEL] [--json]
 *   molly-bench --sgmv [--reps R] [--simd LEVEL] [--cold] [--json]   (8 rows on 8 adapters: the
 *               LoRA part of a step; LEVEL: a SIMD level to force; --cold: caches emptied first)
 *   molly-bench --adapter-load FILE... [--path uring|pread|mmap] [--verify] [--json]
 *               (daemon/loader/bench-load.h)
 *   molly-bench --tier-sim [--adapters N] [--hot N] [--requests N] [--zipf S] ...
 *               (daemon/sched/tier-sim.h)
 *   molly-bench --cold-ttft --model M --adapter FILE [--reps R]   (daemon/sched/bench-tiers.h)
 *   molly-bench --tier-serve --model M [--adapters 64,...,1000]   (daemon/sched/bench-tiers.h)
 *
 * --kernels: the packed Q8_0, Q4_0 and F32 tile kernels (quant_gemm_packed(); F32 packs since
 * issue 15) and the F16, BF16, Q4_K and Q6_K ones on the GGUF layout (quant_gemm()) on one thread, from
 * cache-sized random data: 256 rows × 2048 values
 * against 64 tokens (prefill-like) and 1 token (decode-like); GMAC/s of thread CPU time
 * (CLOCK_THREAD_CPUTIME_ID), best of R (default 5). Thread CPU time is what the kernel
 * consumed whatever else the host ran, so it compares builds on a shared machine.
 */
#include <errno.h>
#include <getopt.h>
#include <immintrin.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/sgmv.h"
#include "engine/threadpool.h"
#include "loader/bench-load.h"
#include "sched/bench-serve.h"
#include "sched/bench-tiers.h"
#include "sched/tier-sim.h"

#define BW_BYTES (2ull << 30)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One timed run: tok/s and the share of threads × wall the process got. */
struct sample {
	double tok_s, util;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;

	return (x > y) - (x < y);
}

/* ---- bandwidth ---- */

struct bw_job {
	const char *buf;
	size_t bytes;
	uint64_t sink[64];
};

__attribute__((target("avx512f"))) static uint64_t read_avx512(const char *p, size_t n)
{
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;

	for (size_t i = 0; i + 256 <= n; i += 256) {
		a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *) (p + i)));
		a1 = _mm512_xor_si512(a1, _mm512_load_si512((const void *) (p + i + 64)));
		a2 = _mm512_xor_si512(a2, _mm512_load_si512((const void *) (p + i + 128)));
		a3 = _mm512_xor_si512(a3, _mm512_load_si512((const void *) (p + i + 192)));
	}
	a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
	return (uint64_t) _mm512_reduce_add_epi64(a0);
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const char *p, size_t n)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;

	for (size_t i = 0; i + 128 <= n; i += 128) {
		a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *) (p + i)));
		a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *) (p + i + 32)));
		a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *) (p + i + 64)));
		a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *) (p + i + 96)));
	}
	a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
	return (uint64_t) _mm256_extract_epi64(a0, 0) ^ (uint64_t) _mm256_extract_epi64(a0, 3);
}

static uint64_t read_scalar(const char *p, size_t n)
{
	uint64_t acc = 0;

	for (size_t i = 0; i + 8 <= n; i += 8)
		acc ^= *(const uint64_t *) (p + i);
	return acc;
}

static const char *bw_isa(void)
{
	if (__builtin_cpu_supports("avx512f"))
		return "avx512";
	if (__builtin_cpu_supports("avx2"))
		return "avx2";
	return "scalar";
}

static void bw_read(void *arg, int ith, int nth)
{
	struct bw_job *j = arg;
	long b, e;

	threadpool_split((long) j->bytes, 4096, ith, nth, &b, &e);
	if (__builtin_cpu_supports("avx512f"))
		j->sink[ith % 64] += read_avx512(j->buf + b, (size_t) (e - b));
	else if (__builtin_cpu_supports("avx2"))
		j->sink[ith % 64] += read_avx2(j->buf + b, (size_t) (e - b));
	else
		j->sink[ith % 64] += read_scalar(j->buf + b, (size_t) (e - b));
}

static void bw_touch(void *arg, int ith, int nth)
{
	struct bw_job *j = arg;
	long b, e;

	/* Each thread faults in its own part, so pages land near the thread that reads them. */
	threadpool_split((long) j->bytes, 4096, ith, nth, &b, &e);
	memset((char *) j->buf + b, ith + 1, (size_t) (e - b));
}

/* One measurement: GB/s of one pass over the buffer. */
static double bw_measure(struct threadpool *pool, struct bw_job *j)
{
	double t0 = now_s();

	threadpool_run(pool, bw_read, j);
	return (double) j->bytes / (now_s() - t0) / 1e9;
}

/* ---- model bytes ---- */

static uint64_t bytes_per_token(const struct model *m)
{
	const struct gguf *g = m->gguf;
	uint64_t total = 0;

	for (size_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);

		if (strcmp(t->name, "token_embd.weight") == 0)
			total += t->ne[1] ? t->n_bytes / t->ne[1] : 0; /* one row */
		else
			total += t->n_bytes;
	}
	if (m->hp.tied_output) /* output reuses token_embd: all of it is read per token */
		total += m->output.row_bytes * (uint64_t) m->output.n_out;
	return total;
}

/* ---- runs ---- */

struct bench_opts;
static void progress(const struct bench_opts *o, const char *what, int i, bool start);

/* The context is made (and its memory faulted in) before the run is announced, so that a
 * watcher's CPU figures (--progress) cover the timed decode only. o may be NULL (no
 * announcement). */
static int run_pp(const struct model *m, struct threadpool *pool, int n, struct sample *out,
		  const struct bench_opts *o, int rep)
{
	_cleanup_(model_ctx_freep) struct model_ctx *c = NULL;
	_cleanup_free_ int32_t *ids = malloc(sizeof(int32_t) * n);
	_cleanup_free_ float *logits = malloc(sizeof(float) * m->hp.n_vocab);
	double t0, c0, dt;
	int r;

	if (!ids || !logits)
		return -ENOMEM;
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t) ((i * 7919u + 13) % m->hp.n_vocab);
	r = model_ctx_new(m, (uint32_t) n + 1, (uint32_t) n, &c);
	if (r < 0)
		return r;
	if (o)
		progress(o, "pp", rep, true);
	t0 = now_s();
	c0 = cpu_s();
	r = model_decode(c, pool, ids, (size_t) n, logits);
	if (r < 0)
		return r;
	dt = now_s() - t0;
	if (o)
		progress(o, "pp", rep, false);
	*out = (struct sample){ n / dt, (cpu_s() - c0) / (dt * threadpool_n_threads(pool)) };
	return 0;
}

static int run_tg(const struct model *m, struct threadpool *pool, int n, struct sample *out,
		  const struct bench_opts *o, int rep)
{
	_cleanup_(model_ctx_freep) struct model_ctx *c = NULL;
	_cleanup_free_ float *logits = malloc(sizeof(float) * m->hp.n_vocab);
	int32_t id = 1;
	double t0, c0, dt;
	int r;

	if (!logits)
		return -ENOMEM;
	r = model_ctx_new(m, (uint32_t) n + 1, 1, &c);
	if (r < 0)
		return r;
	if (o)
		progress(o, "tg", rep, true);
	t0 = now_s();
	c0 = cpu_s();
	for (int i = 0; i < n; i++) {
		r = model_decode(c, pool, &id, 1, logits);
		if (r < 0)
			return r;
		id = (int32_t) ((id * 7919u + 13) % m->hp.n_vocab);
	}
	dt = now_s() - t0;
	if (o)
		progress(o, "tg", rep, false);
	*out = (struct sample){ n / dt, (cpu_s() - c0) / (dt * threadpool_n_threads(pool)) };
	return 0;
}

struct stats {
	double median, min, max, util; /* tok/s; util: the median cpu_util */
};

static double median_sorted(const double *v, int n)
{
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct stats summarize(const struct sample *s, int n)
{
	_cleanup_free_ double *v = malloc(sizeof(double) * (size_t) n);
	_cleanup_free_ double *u = malloc(sizeof(double) * (size_t) n);

	if (!v || !u)
		return (struct stats){};
	for (int i = 0; i < n; i++) {
		v[i] = s[i].tok_s;
		u[i] = s[i].util;
	}
	qsort(v, (size_t) n, sizeof(*v), cmp_double);
	qsort(u, (size_t) n, sizeof(*u), cmp_double);
	return (struct stats){
		.median = median_sorted(v, n),
		.min = v[0],
		.max = v[n - 1],
		.util = median_sorted(u, n),
	};
}

static void usage(FILE *f)
{
	fputs("usage: molly-bench --model M [--threads T] [--pp N] [--tg N] [--reps R] [--json]\n"
	      "                   [--progress]\n",
	      f);
}

struct bench_opts {
	const char *path;
	int threads, pp, tg, reps;
	bool json, progress;
};

static int model_bench(const struct bench_opts *o);

static int run(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' }, { "threads", required_argument, NULL, 't' },
		{ "pp", required_argument, NULL, 'p' },    { "tg", required_argument, NULL, 'g' },
		{ "reps", required_argument, NULL, 'r' },  { "json", no_argument, NULL, 'j' },
		{ "progress", no_argument, NULL, 'P' },    { "help", no_argument, NULL, 'h' },
		{}
	};
	struct bench_opts o = { .threads = (int) sysconf(_SC_NPROCESSORS_ONLN), .pp = 128, .tg = 64,
				.reps = 5 };
	int c;

	while ((c = getopt_long(argc, argv, "m:t:h", longopts, NULL)) >= 0) {
		long v = 0;
		char *end = NULL;

		if (c != 'm' && c != 'j' && c != 'P' && c != 'h' && optarg) {
			v = strtol(optarg, &end, 10);
			if (*end || v < 0 || v > 1000000) {
				fprintf(stderr, "molly-bench: bad number '%s'\n", optarg);
				return -EINVAL;
			}
		}
		switch (c) {
		case 'm': o.path = optarg; break;
		case 't': o.threads = (int) v; break;
		case 'p': o.pp = (int) v; break;
		case 'g': o.tg = (int) v; break;
		case 'r': o.reps = (int) v; break;
		case 'j': o.json = true; break;
		case 'P': o.progress = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return -EINVAL;
		}
	}
	if (!o.path || o.threads < 1 || o.reps < 1) {
		usage(stderr);
		return -EINVAL;
	}
	return model_bench(&o);
}

/* --progress: one line before and one after each timed run (unbuffered stderr). */
static void progress(const struct bench_opts *o, const char *what, int i, bool start)
{
	if (o->progress)
		fprintf(stderr, "molly-bench: %s run %d/%d%s\n", what, i + 1, o->reps,
			start ? "" : " done");
}

/* pp, tg and the bandwidth roofline of one model (the default mode). */
static int model_bench(const struct bench_opts *o)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	_cleanup_free_ struct sample *pp_v = NULL, *tg_v = NULL;
	const char *path = o->path;
	int threads = o->threads, pp = o->pp, tg = o->tg, reps = o->reps;
	struct errmsg e = {};
	struct bw_job bw = { .bytes = BW_BYTES };
	double bw_best = 0, t_load;
	int r;

	t_load = now_s();
	r = model_load(path, &m, &e);
	if (r < 0) {
		fprintf(stderr, "molly-bench: %s: %s\n", path, e.text[0] ? e.text : strerror(-r));
		return r;
	}
	t_load = now_s() - t_load;
	r = threadpool_new(threads, &pool);
	if (r < 0)
		return r;
	bw.buf = mmap(NULL, BW_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (bw.buf == MAP_FAILED) {
		fprintf(stderr, "molly-bench: cannot map the 2 GiB bandwidth buffer: %m\n");
		return -ENOMEM;
	}
	threadpool_run(pool, bw_touch, &bw);

	pp_v = calloc((size_t) reps, sizeof(*pp_v));
	tg_v = calloc((size_t) reps, sizeof(*tg_v));
	if (!pp_v || !tg_v)
		return -ENOMEM;
	/* warm-up: fault the weights in */
	if (tg > 0 && (r = run_tg(m, pool, 2, &tg_v[0], NULL, 0)) < 0)
		return r;
	for (int i = 0; i < reps; i++) {
		if (pp > 0 && (r = run_pp(m, pool, pp, &pp_v[i], o, i)) < 0)
			return r;
		if (i < 5)
			bw_best = MAX(bw_best, bw_measure(pool, &bw));
		if (tg > 0 && (r = run_tg(m, pool, tg, &tg_v[i], o, i)) < 0)
			return r;
	}
	for (int i = reps; i < 5; i++)
		bw_best = MAX(bw_best, bw_measure(pool, &bw));
	munmap((void *) bw.buf, BW_BYTES);

	struct stats sp = summarize(pp_v, reps), st = summarize(tg_v, reps);
	uint64_t bpt = bytes_per_token(m);
	double frac = st.median * (double) bpt / (bw_best * 1e9);

	if (o->json) {
		printf("{\"model\":\"%s\",\"threads\":%d,\"simd\":\"%s\",\"bandwidth_isa\":\"%s\","
		       "\"pp\":%d,\"tg\":%d,\"reps\":%d,\"pp_tok_s\":%.3f,\"pp_tok_s_min\":%.3f,"
		       "\"pp_tok_s_max\":%.3f,\"pp_cpu_util\":%.3f,\"tg_tok_s\":%.3f,\"tg_tok_s_min\":%.3f,"
		       "\"tg_tok_s_max\":%.3f,\"tg_cpu_util\":%.3f,\"bytes_per_token\":%" PRIu64
		       ",\"bandwidth_gb_s\":%.3f,\"roofline_frac\":%.4f,\"load_s\":%.3f,"
		       "\"repacked_bytes\":%zu}\n",
		       m->name, threads, quant_simd_level(), bw_isa(), pp, tg, reps, sp.median, sp.min,
		       sp.max, sp.util, st.median, st.min, st.max, st.util, bpt, bw_best, frac, t_load,
		       m->packed_bytes);
	} else {
		printf("model %s: %s, %u layers, %.1f MB read per token\n", path,
		       model_arch_name(m->hp.arch), m->hp.n_layer, bpt / 1e6);
		printf("threads %d, kernels %s, bandwidth loads %s\n", threads, quant_simd_level(), bw_isa());
		printf("load %.2f s, %.1f MB of weights repacked\n", t_load, m->packed_bytes / 1e6);
		if (pp > 0)
			printf("pp%-4d %9.2f tok/s  (min %.2f, max %.2f, %d reps; cpu_util %.2f)\n", pp,
			       sp.median, sp.min, sp.max, reps, sp.util);
		if (tg > 0)
			printf("tg%-4d %9.2f tok/s  (min %.2f, max %.2f, %d reps; cpu_util %.2f)\n", tg,
			       st.median, st.min, st.max, reps, st.util);
		printf("bandwidth %.2f GB/s (best of 5, 2 GiB)\n", bw_best);
		printf("roofline_frac %.3f\n", frac);
	}
	return 0;
}

/* molly-bench --serve ... (see the top of the file) */
static int run_serve(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "serve", no_argument, NULL, 's' },
		{ "model", required_argument, NULL, 'm' },
		{ "adapters", required_argument, NULL, 'a' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "prompt-tokens", required_argument, NULL, 'p' },
		{ "tokens", required_argument, NULL, 'n' },
		{ "sequential", no_argument, NULL, 'q' },
		{ "threads", required_argument, NULL, 't' },
		{ "hot-type", required_argument, NULL, 'H' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "paired", no_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 'j' },
		{}
	};
	_cleanup_(model_freep) struct model *m = NULL;
	struct bench_serve_opts o = { .seed = 1 };
	struct bench_serve_result res = {};
	struct errmsg e = {};
	const char *path = NULL, *adapters = NULL;
	bool json = false;
	int c, r;

	o.n_threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) >= 0) {
		char *end = NULL;
		long v = 0;

		if (optarg && (c == 'c' || c == 'p' || c == 'n' || c == 't' || c == 'r')) {
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 100000) {
				fprintf(stderr, "molly-bench: bad number '%s'\n", optarg);
				return -EINVAL;
			}
		}
		switch (c) {
		case 's': break;
		case 'm': path = optarg; break;
		case 'a': adapters = optarg; break;
		case 'c': o.concurrency = (uint32_t) v; break;
		case 'p': o.prompt_tokens = (uint32_t) v; break;
		case 'n': o.gen_tokens = (uint32_t) v; break;
		case 'q': o.sequential = true; break;
		case 'r': o.rounds = (uint32_t) v; break;
		case 'P': o.paired = true; break;
		case 't': o.n_threads = (int) v; break;
		case 'H':
			if (strcmp(optarg, "q8_0") == 0)
				o.hot_type = LORA_HOT_Q8_0;
			else if (strcmp(optarg, "stored") != 0) {
				fprintf(stderr, "molly-bench: --hot-type is stored or q8_0\n");
				return -EINVAL;
			}
			break;
		case 'j': json = true; break;
		default:
			fprintf(stderr, "usage: molly-bench --serve --model M --adapters DIR|N "
					"--concurrency C [--prompt-tokens P] [--tokens T] [--sequential] "
					"[--threads T] [--hot-type stored|q8_0] [--rounds R] [--paired] "
					"[--json]\n");
			return -EINVAL;
		}
	}
	if (!path || !o.concurrency) {
		fprintf(stderr, "molly-bench --serve: --model and --concurrency are required\n");
		return -EINVAL;
	}
	if (adapters) {
		char *end;
		long n = strtol(adapters, &end, 10);

		if (*end == 0 && n >= 0 && n <= 1024)
			o.n_adapters = (uint32_t) n;
		else
			o.adapters_dir = adapters;
	}
	r = model_load(path, &m, &e);
	if (r < 0) {
		fprintf(stderr, "molly-bench: %s: %s\n", path, e.text[0] ? e.text : strerror(-r));
		return r;
	}
	o.m = m;
	r = bench_serve_run(&o, &res, &e);
	if (r < 0) {
		fprintf(stderr, "molly-bench --serve: %s\n", e.text[0] ? e.text : strerror(-r));
		return r;
	}
	if (json)
		printf("{\"model\":\"%s\",\"threads\":%d,\"concurrency\":%u,\"sequential\":%s,"
		       "\"adapters_loaded\":%u,\"adapters_resident\":%u,\"adapters_used\":%u,"
		       "\"prompt_tokens\":%u,\"tokens\":%u,\"generated\":%llu,\"wall_s\":%.3f,"
		       "\"steps\":%llu,\"aggregate_tok_s\":%.2f,\"cpu_util\":%.3f",
		       m->name, o.n_threads, o.concurrency, o.sequential ? "true" : "false",
		       res.adapters_loaded, res.adapters_resident, res.adapters_used,
		       o.prompt_tokens ? o.prompt_tokens : 16, o.gen_tokens ? o.gen_tokens : 64,
		       (unsigned long long) res.generated, res.wall_s, (unsigned long long) res.steps,
		       res.aggregate_tok_s, res.cpu_util);
	if (json && res.paired_ratio > 0)
		printf(",\"base_tok_s\":%.2f,\"paired_ratio\":%.3f", res.base_tok_s, res.paired_ratio);
	if (json)
		printf("}\n");
	else
		printf("serve %s: %u sequences%s, %u adapters loaded (%u resident, %u in use): "
		       "%llu tokens in %.2f s = %.1f tok/s aggregate (%llu steps; cpu_util %.2f)\n",
		       m->name, o.concurrency, o.sequential ? " one after another" : " at once",
		       res.adapters_loaded, res.adapters_resident, res.adapters_used,
		       (unsigned long long) res.generated, res.wall_s, res.aggregate_tok_s,
		       (unsigned long long) res.steps, res.cpu_util);
	if (!json && res.paired_ratio > 0)
		printf("paired: %.1f tok/s without adapters; with / without, median of the rounds' "
		       "ratios: %.3f\n", res.base_tok_s, res.paired_ratio);
	return 0;
}

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* molly-bench --kernels ... (see the top of the file) */
static int run_kernels(int argc, char **argv)
{
	static const uint32_t types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_F32,
					  GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_K,
					  GGML_TYPE_Q6_K };
	const int64_t n = 2048, nr = 256;
	int reps = 5;
	bool json = false;
	uint64_t rng = 0x9e3779b97f4a7c15ull;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (strcmp(argv[i], "--simd") == 0 && i + 1 < argc) {
			/* another level's tiles, for an A/B in one run (as --sgmv) */
			if (quant_force_simd_level(argv[++i]) < 0) {
				fprintf(stderr, "molly-bench: SIMD level '%s' does not run here\n", argv[i]);
				return -EINVAL;
			}
		} else if (strcmp(argv[i], "--kernels") != 0) {
			fprintf(stderr, "usage: molly-bench --kernels [--reps R] [--simd LEVEL] [--json]\n");
			return -EINVAL;
		}
	}
	if (reps < 1) {
		fprintf(stderr, "molly-bench --kernels: --reps must be at least 1\n");
		return -EINVAL;
	}
	if (json)
		printf("[");
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		uint32_t type = types[ti], vt = quant_vec_dot_type(type);
		bool packed = quant_packed_supported(type);
		size_t row_bytes = (size_t) quant_row_bytes(type, n), xrb = (size_t) quant_row_bytes(vt, n);
		int64_t toks[2] = { 64, 1 };
		float *f = malloc(sizeof(float) * (size_t) n);
		char *w = malloc(row_bytes * nr), *x = malloc(xrb * 64);
		void *wp = packed ? malloc(quant_packed_bytes(type, n, nr)) : NULL;
		int16_t *sums = malloc(sizeof(int16_t) * (size_t) (n / 32) * 64);
		float *y = malloc(sizeof(float) * (size_t) (nr * 64));

		if (!f || !w || !x || (packed && !wp) || !sums || !y) {
			free(f), free(w), free(x), free(wp), free(sums), free(y);
			return -ENOMEM;
		}
		for (int64_t r = 0; r < nr + 64; r++) {
			for (int64_t i = 0; i < n; i++) {
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				f[i] = (float) ((double) (rng >> 11) / 9007199254740992.0 * 2 - 1);
			}
			if (r < nr)
				quant_quantize_row(type, f, w + (size_t) r * row_bytes, n);
			else
				quant_quantize_row(vt, f, x + (size_t) (r - nr) * xrb, n);
		}
		if (packed)
			quant_pack_rows(type, n, w, row_bytes, nr, wp);
		for (int64_t t = 0; t < 64; t++)
			if (packed)
				quant_q8_0_block_sums(x + (size_t) t * xrb, n, sums + t * (n / 32));
		for (int k = 0; k < 2; k++) {
			int64_t nc = toks[k];
			/* enough calls for ~50 ms at ~50 GMAC/s */
			int calls = (int) (2.5e9 / ((double) n * nr * nc)) + 1;
			double best = 1e30;

			for (int rep = 0; rep < reps; rep++) {
				double t0 = thread_cpu_s();

				for (int c = 0; c < calls; c++) {
					if (packed)
						quant_gemm_packed(type, n, wp, nr, x, xrb, sums, nc, y, nr);
					else
						quant_gemm(type, n, w, row_bytes, nr, x, xrb, nc, y, nr);
				}
				best = MIN(best, thread_cpu_s() - t0);
			}
			double gmacs = (double) n * nr * nc * calls / best * 1e-9;

			if (json)
				printf("%s{\"type\":\"%s\",\"layout\":\"%s\",\"rows\":%lld,\"n\":%lld,"
				       "\"tokens\":%lld,\"gmac_per_cpu_s\":%.2f,\"simd\":\"%s\"}",
				       ti || k ? "," : "", quant_type_name(type), packed ? "packed" : "gguf",
				       (long long) nr, (long long) n, (long long) nc, gmacs, quant_simd_level());
			else
				printf("%-5s %-6s %lld rows x %lld x %2lld tokens: %6.2f GMAC per CPU-second "
				       "(best of %d, %s)\n",
				       quant_type_name(type), packed ? "packed" : "gguf", (long long) nr,
				       (long long) n, (long long) nc, gmacs, reps, quant_simd_level());
		}
		free(f), free(w), free(x), free(wp), free(sums), free(y);
	}
	if (json)
		printf("]\n");
	return 0;
}

/*
 * molly-bench --sgmv [--reps R] [--simd LEVEL] [--json]: the LoRA part of one decode step of 8 sequences on
 * 8 adapters, on one thread: rank 16 on all seven projections of the 100m shape (768 wide,
 * FFN 2048, 12 layers), every pair's shrink, then its expand, pair by pair as the matrix
 * product job runs them. "distinct": 8 different adapters (45 MB of F16, more than the caches:
 * what a step streams from memory); "same": one adapter 8 times (in cache: the arithmetic
 * alone). Thread CPU time, best of R; also the adapter bytes one step reads per second.
 * --cold writes 256 MiB of other memory before each rep, as a serving step's base weights
 * (more than the caches) pass between two steps' adapter rows: without it, part of the 45 MB
 * can still be in a large L3 from the rep before.
 */
enum { SG_ADAPTERS = 8, SG_LAYERS = 12, SG_RANK = 16, SG_TARGETS = 7 };

struct sg_set {
	struct lora_resident_mat mats[SG_ADAPTERS][SG_LAYERS][SG_TARGETS];
	const void *rows[SG_ADAPTERS][SG_LAYERS][SG_TARGETS][2 * SG_RANK];
	char *mem;
	size_t bytes; /* of distinct adapters */
};

static size_t sg_row_bytes(uint32_t type, uint32_t n)
{
	return ALIGN_UP(type == GGML_TYPE_Q8_0 ? (size_t) n / 32 * 34 : (size_t) n * 2, 64);
}

static const uint32_t sg_in[SG_TARGETS] = { 768, 768, 768, 768, 768, 768, 2048 };
static const uint32_t sg_out[SG_TARGETS] = { 768, 768, 768, 768, 2048, 2048, 768 };

static int sg_set_make(struct sg_set *st, uint32_t type, bool same, uint64_t *rng)
{
	size_t per = 0, off = 0;
	float v[2048];

	for (int t = 0; t < SG_TARGETS; t++)
		per += SG_RANK * (sg_row_bytes(type, sg_in[t]) + sg_row_bytes(type, sg_out[t]));
	per *= SG_LAYERS;
	st->bytes = per * (same ? 1 : SG_ADAPTERS);
	st->mem = aligned_alloc(64, st->bytes);
	if (!st->mem)
		return -ENOMEM;
	for (int a = 0; a < SG_ADAPTERS; a++)
		for (int l = 0; l < SG_LAYERS; l++)
			for (int t = 0; t < SG_TARGETS; t++) {
				struct lora_resident_mat *m = &st->mats[a][l][t];
				const void **rows = st->rows[a][l][t];

				*m = (struct lora_resident_mat){ .rank = SG_RANK, .n_in = sg_in[t],
								 .n_out = sg_out[t], .dtype = type,
								 .scale = 1.0f, .a_rows = rows,
								 .bt_rows = rows + SG_RANK };
				if (same && a > 0) {
					memcpy(rows, st->rows[0][l][t], sizeof(st->rows[0][l][t]));
					continue;
				}
				/* a matrix's rows contiguous, as lora/resident.c packs them */
				for (int k = 0; k < 2 * SG_RANK; k++) {
					uint32_t n = k < SG_RANK ? sg_in[t] : sg_out[t];

					for (uint32_t i = 0; i < n; i++) {
						*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
						v[i] = (float) ((double) (*rng >> 11) / 9007199254740992.0 - 0.5) * 0.02f;
					}
					quant_quantize_row(type, v, st->mem + off, n);
					rows[k] = st->mem + off;
					off += sg_row_bytes(type, n);
				}
			}
	return 0;
}

static int run_sgmv(int argc, char **argv)
{
	static const uint32_t types[] = { GGML_TYPE_F16, GGML_TYPE_Q8_0 };
	int reps = 10;
	bool json = false, first = true;
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	float *x = malloc(sizeof(float) * SG_ADAPTERS * 2048), *y = malloc(sizeof(float) * SG_ADAPTERS * 2048);
	float tmp[SG_ADAPTERS * SG_RANK];
	const size_t evict_bytes = (size_t) 256 << 20;
	char *evict = NULL;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (strcmp(argv[i], "--cold") == 0 && !evict) {
			evict = malloc(evict_bytes);
			if (!evict) {
				free(x), free(y);
				return -ENOMEM;
			}
		} else if (strcmp(argv[i], "--simd") == 0 && i + 1 < argc) {
			/* the same kernels at another level, for an A/B in one run */
			if (quant_force_simd_level(argv[++i]) < 0) {
				fprintf(stderr, "molly-bench: SIMD level '%s' does not run here\n", argv[i]);
				free(x), free(y);
				return -EINVAL;
			}
		} else if (strcmp(argv[i], "--sgmv") != 0) {
			fprintf(stderr, "usage: molly-bench --sgmv [--reps R] [--simd LEVEL] [--cold] [--json]\n");
			free(x), free(y), free(evict);
			return -EINVAL;
		}
	}
	if (!x || !y || reps < 1) {
		free(x), free(y);
		return reps < 1 ? -EINVAL : -ENOMEM;
	}
	for (int i = 0; i < SG_ADAPTERS * 2048; i++)
		x[i] = (float) (i % 97) * 0.01f, y[i] = 0;
	if (json)
		printf("[");
	for (size_t ti = 0; ti < ELEMENTSOF(types); ti++)
		for (int same = 0; same < 2; same++) {
			struct sg_set *st = calloc(1, sizeof(*st));
			double best = 1e30;
			int r;

			if (!st)
				return -ENOMEM;
			r = sg_set_make(st, types[ti], same, &rng);
			if (r < 0) {
				free(st);
				return r;
			}
			for (int rep = 0; rep < reps; rep++) {
				double t0;

				if (evict)
					memset(evict, rep + 1, evict_bytes);
				t0 = thread_cpu_s();

				for (int l = 0; l < SG_LAYERS; l++)
					for (int t = 0; t < SG_TARGETS; t++) {
						struct lora_pair p[SG_ADAPTERS];

						for (int a = 0; a < SG_ADAPTERS; a++) {
							p[a] = (struct lora_pair){ .mat = &st->mats[a][l][t],
										   .row = (uint32_t) a,
										   .scale = 1.0f };
							lora_shrink_pair(x, sg_in[t], &p[a], tmp + a * SG_RANK);
						}
						for (int a = 0; a < SG_ADAPTERS; a++)
							lora_expand_range(y, sg_out[t], &p[a], 1, tmp + a * SG_RANK,
									  SG_RANK, 0, sg_out[t]);
					}
				best = MIN(best, thread_cpu_s() - t0);
			}
			/* bytes one step reads: every pair's rows (the same adapter's only once in
			 * memory, but read 8 times from the caches) */
			double step_bytes = (double) st->bytes * (same ? SG_ADAPTERS : 1);

			if (json)
				printf("%s{\"type\":\"%s\",\"adapters\":\"%s\",\"ms_per_step\":%.3f,"
				       "\"gb_per_cpu_s\":%.2f,\"simd\":\"%s\",\"cold\":%s}",
				       first ? "" : ",", quant_type_name(types[ti]), same ? "same" : "distinct",
				       best * 1e3, step_bytes / best * 1e-9, quant_simd_level(),
				       evict ? "true" : "false");
			else
				printf("sgmv %-4s %-8s adapters: %.3f ms per step (8 rows, rank 16, 100m "
				       "shape; %.1f GB of adapter rows per CPU-second; best of %d; %s)\n",
				       quant_type_name(types[ti]), same ? "same" : "distinct", best * 1e3,
				       step_bytes / best * 1e-9, reps, quant_simd_level());
			first = false;
			free(st->mem);
			free(st);
		}
	if (json)
		printf("]\n");
	free(x), free(y), free(evict);
	return 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--serve") == 0)
			return run_serve(argc, argv) < 0 ? 1 : 0;
		if (strcmp(argv[i], "--kernels") == 0)
			return run_kernels(argc, argv) < 0 ? 1 : 0;
		if (strcmp(argv[i], "--sgmv") == 0)
			return run_sgmv(argc, argv) < 0 ? 1 : 0;
		if (strcmp(argv[i], "--adapter-load") == 0)
			return bench_adapter_load(argc, argv);
		if (strcmp(argv[i], "--tier-sim") == 0)
			return tier_sim_main(argc, argv);
		if (strcmp(argv[i], "--cold-ttft") == 0)
			return bench_cold_ttft(argc, argv);
		if (strcmp(argv[i], "--tier-serve") == 0)
			return bench_tier_serve(argc, argv);
	}
	return run(argc, argv) < 0 ? 1 : 0;
}
