/* SPDX-License-Identifier: MIT */
/* bench-tiers.c: molly-bench --cold-ttft (see bench-tiers.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../basic/sha256.h"
#include "../basic/time-util.h"
#include "../engine/model.h"
#include "../lora/adapter.h"
#include "../lora/lora-file.h"
#include "../lora/lora-gen.h"
#include "../lora/resident.h"
#include "bench-tiers.h"
#include "sched.h"

struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t first_ns;
	bool done;
	int error;
};

static void on_event(const struct sched_event *ev, void *userdata)
{
	struct waiter *w = userdata;

	pthread_mutex_lock(&w->lock);
	if (ev->type == SCHED_EVENT_TOKEN && !w->first_ns)
		w->first_ns = now_ns();
	if (ev->type != SCHED_EVENT_TOKEN) {
		w->done = true;
		w->error = ev->error;
	}
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Seconds from submit to the first token of a 1-token request (adapter NULL: none). */
static int ttft(struct sched *s, const char *adapter, double *ret)
{
	static const int32_t prompt[] = { 1, 400, 300, 200, 100, 50, 60, 70 };
	struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false, 0 };
	struct sched_lora lora = { adapter, 1.0f };
	struct sched_request req = { .prompt = prompt, .n_prompt = ELEMENTSOF(prompt),
				     .max_tokens = 1, .loras = &lora, .n_loras = adapter != NULL,
				     .on_event = on_event, .userdata = &w, .ignore_eos = true };
	struct errmsg e = { { 0 } };
	uint64_t id, t0;
	int r;

	sampler_params_default(&req.sampling);
	req.sampling.temperature = 0;
	t0 = now_ns();
	r = sched_submit(s, &req, &id, &e);
	if (r < 0) {
		fprintf(stderr, "molly-bench: submit: %s\n", e.text);
		return r;
	}
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	if (w.error < 0 || !w.first_ns)
		return w.error < 0 ? w.error : -EIO;
	*ret = (double) (w.first_ns - t0) * 1e-9;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;

	return (x > y) - (x < y);
}

static int hash_file(const char *path, uint8_t out[32])
{
	struct sha256_ctx c;
	static uint8_t buf[1 << 16];
	ssize_t k;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	sha256_init(&c);
	while ((k = read(fd, buf, sizeof(buf))) > 0)
		sha256_update(&c, buf, (size_t) k);
	close(fd);
	sha256_final(&c, out);
	return k < 0 ? -EIO : 0;
}

static void uncache(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		(void) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

int bench_cold_ttft(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "cold-ttft", no_argument, NULL, 'C' }, { "model", required_argument, NULL, 'm' },
		{ "adapter", required_argument, NULL, 'a' }, { "reps", required_argument, NULL, 'r' },
		{ "threads", required_argument, NULL, 't' }, { "json", no_argument, NULL, 'j' },
		{},
	};
	const char *model_path = NULL, *adapter_path = NULL;
	int reps = 5, threads = 0, c, r = 0;
	bool json = false;
	_cleanup_(model_freep) struct model *m = NULL;
	char blob[] = "/var/tmp/molly-bench-ttft-XXXXXX";
	uint8_t sha[32];
	double cold[64], hot[64], base[64], load[64], build[64];
	struct errmsg e = { { 0 } };
	struct stat st;
	int fd;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) >= 0) {
		switch (c) {
		case 'C':
			break;
		case 'm':
			model_path = optarg;
			break;
		case 'a':
			adapter_path = optarg;
			break;
		case 'r':
			reps = atoi(optarg);
			break;
		case 't':
			threads = atoi(optarg);
			break;
		case 'j':
			json = true;
			break;
		default:
			goto usage;
		}
	}
	if (!model_path || !adapter_path || reps < 1 || reps > 64)
		goto usage;
	r = model_load(model_path, &m, &e);
	if (r < 0) {
		fprintf(stderr, "molly-bench: %s: %s\n", model_path, e.text);
		return 1;
	}
	{
		struct lora_open_opts oo = { .base = m };
		_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;

		fd = mkstemp(blob);
		if (fd < 0)
			return 1;
		close(fd);
		r = lora_adapter_open(adapter_path, &oo, &a, NULL, &e);
		if (r >= 0)
			r = lora_file_write(a, blob, NULL, &e);
		if (r >= 0)
			r = hash_file(blob, sha);
		if (r < 0) {
			fprintf(stderr, "molly-bench: %s: %s\n", adapter_path, e.text);
			unlink(blob);
			return 1;
		}
	}
	for (int i = 0; i < reps && r >= 0; i++) {
		_cleanup_(sched_freep) struct sched *s = NULL;
		struct lora_open_opts oo = { .base = m, .name = "bench" };
		struct lora_adapter *a = NULL;

		r = sched_new(m, &(struct sched_params){ .max_sequences = 2, .n_threads = threads,
							 .max_context = 64, .pool_bytes = 256u << 20 },
			      &s, &e);
		if (r >= 0)
			r = lora_adapter_open(blob, &oo, &a, NULL, &e);
		if (r >= 0 && (r = sched_add_adapter(s, a, &e)) < 0)
			lora_adapter_free(a);
		if (r >= 0)
			r = sched_set_adapter_source(s, "bench", blob, sha);
		if (r >= 0)
			r = sched_start(s);
		if (r >= 0)
			r = ttft(s, NULL, &base[i]); /* warms the engine's buffers too */
		if (r >= 0) {
			struct sched_stats ss;

			uncache(blob);
			r = ttft(s, "bench", &cold[i]);
			sched_get_stats(s, &ss);
			load[i] = (double) ss.tiers.load_ns * 1e-9;
			build[i] = (double) ss.promote_build_ns * 1e-9;
		}
		if (r >= 0)
			r = ttft(s, "bench", &hot[i]);
		if (r >= 0)
			r = ttft(s, NULL, &base[i]);
	}
	stat(blob, &st);
	unlink(blob);
	if (r < 0) {
		fprintf(stderr, "molly-bench: %s\n", e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	qsort(cold, (size_t) reps, sizeof(double), cmp_double);
	qsort(hot, (size_t) reps, sizeof(double), cmp_double);
	qsort(base, (size_t) reps, sizeof(double), cmp_double);
	qsort(load, (size_t) reps, sizeof(double), cmp_double);
	qsort(build, (size_t) reps, sizeof(double), cmp_double);
	if (json)
		printf("{\"adapter_bytes\":%lld,\"reps\":%d,\"cold_ttft_s\":%.6f,\"hot_ttft_s\":%.6f,"
		       "\"base_ttft_s\":%.6f,\"load_s\":%.6f,\"build_s\":%.6f}\n",
		       (long long) st.st_size, reps, cold[reps / 2], hot[reps / 2], base[reps / 2],
		       load[reps / 2], build[reps / 2]);
	else
		printf("adapter blob %lld bytes, %d reps (medians): first token cold %.3f ms, hot "
		       "%.3f ms, no adapter %.3f ms; cold - hot = %.3f ms, of which the read and "
		       "hash %.3f ms, the hot build %.3f ms\n",
		       (long long) st.st_size, reps, cold[reps / 2] * 1e3, hot[reps / 2] * 1e3,
		       base[reps / 2] * 1e3, (cold[reps / 2] - hot[reps / 2]) * 1e3,
		       load[reps / 2] * 1e3, build[reps / 2] * 1e3);
	return 0;
usage:
	fputs("usage: molly-bench --cold-ttft --model M --adapter FILE [--reps R] [--threads T] "
	      "[--json]\n",
	      stderr);
	return 2;
}

/* ---- --tier-serve ---- */

struct trace_run {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint32_t left;
	int error;
};

static void on_trace_event(const struct sched_event *ev, void *userdata)
{
	struct trace_run *t = userdata;

	if (ev->type == SCHED_EVENT_TOKEN)
		return;
	pthread_mutex_lock(&t->lock);
	t->left--;
	if (ev->error < 0 && !t->error)
		t->error = ev->error;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

struct serve_set {
	uint32_t n;
	char (*names)[16];
	char (*paths)[96];
	uint8_t (*sha)[32];
	size_t max_pages, sum_pages;
};

/* Runs the trace (adapter index per request) on s; seconds of wall time. */
static int run_trace(struct sched *s, const uint32_t *trace, uint32_t n_req, const char (*names)[16],
		     double *ret)
{
	static const int32_t prompt[] = { 1, 400, 300, 200, 100, 50, 60, 70 };
	struct trace_run t = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, n_req, 0 };
	uint64_t t0 = now_ns();

	for (uint32_t i = 0; i < n_req; i++) {
		struct sched_lora lora = { names[trace[i]], 1.0f };
		struct sched_request req = { .prompt = prompt, .n_prompt = ELEMENTSOF(prompt),
					     .max_tokens = 4, .loras = &lora, .n_loras = 1,
					     .on_event = on_trace_event, .userdata = &t,
					     .ignore_eos = true };
		struct errmsg e = { { 0 } };
		uint64_t id;
		int r;

		sampler_params_default(&req.sampling);
		req.sampling.temperature = 0;
		r = sched_submit(s, &req, &id, &e);
		if (r < 0) {
			fprintf(stderr, "molly-bench: submit: %s\n", e.text);
			return r;
		}
	}
	pthread_mutex_lock(&t.lock);
	while (t.left > 0)
		pthread_cond_wait(&t.cond, &t.lock);
	pthread_mutex_unlock(&t.lock);
	*ret = (double) (now_ns() - t0) * 1e-9;
	return t.error;
}

static int add_all(struct sched *s, const struct model *m, const struct serve_set *set,
		   uint32_t n, bool tiered)
{
	for (uint32_t i = 0; i < n; i++) {
		struct lora_open_opts oo = { .base = m, .name = set->names[i] };
		struct lora_adapter *a = NULL;
		struct errmsg e = { { 0 } };
		int r = lora_adapter_open(set->paths[i], &oo, &a, NULL, &e);

		if (r >= 0 && (r = sched_add_adapter(s, a, &e)) < 0)
			lora_adapter_free(a);
		if (r >= 0 && tiered)
			r = sched_set_adapter_source(s, set->names[i], set->paths[i], set->sha[i]);
		if (r < 0) {
			fprintf(stderr, "molly-bench: %s: %s\n", set->paths[i], e.text);
			return r;
		}
	}
	return 0;
}

int bench_tier_serve(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "tier-serve", no_argument, NULL, 'S' },
		{ "model", required_argument, NULL, 'm' },
		{ "adapters", required_argument, NULL, 'a' },
		{ "hot-slots", required_argument, NULL, 'H' },
		{ "requests", required_argument, NULL, 'r' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "threads", required_argument, NULL, 't' },
		{ "seed", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{},
	};
	static const uint32_t ranks[] = { 4, 8, 16, 32, 64 };
	const char *model_path = NULL, *sets_arg = "64,128,256,512,1000";
	uint32_t hot_slots = 64, n_req = 2000, conc = 8, max_n = 0, sets[16], n_sets = 0;
	uint64_t seed = 1;
	int threads = 0, c, r = 0;
	bool json = false;
	_cleanup_(model_freep) struct model *m = NULL;
	struct serve_set set = { 0 };
	char dir[] = "/var/tmp/molly-bench-tiers-XXXXXX";
	struct errmsg e = { { 0 } };
	size_t page_bytes;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) >= 0) {
		switch (c) {
		case 'S':
			break;
		case 'm':
			model_path = optarg;
			break;
		case 'a':
			sets_arg = optarg;
			break;
		case 'H':
			hot_slots = (uint32_t) atoi(optarg);
			break;
		case 'r':
			n_req = (uint32_t) atoi(optarg);
			break;
		case 'c':
			conc = (uint32_t) atoi(optarg);
			break;
		case 't':
			threads = atoi(optarg);
			break;
		case 's':
			seed = strtoull(optarg, NULL, 10);
			break;
		case 'j':
			json = true;
			break;
		default:
			goto usage;
		}
	}
	for (const char *p = sets_arg; *p && n_sets < ELEMENTSOF(sets); p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
		sets[n_sets] = (uint32_t) atoi(p);
		if (sets[n_sets] == 0)
			goto usage;
		max_n = MAX(max_n, sets[n_sets]);
		n_sets++;
	}
	if (!model_path || n_sets == 0 || hot_slots == 0 || n_req == 0 || conc == 0)
		goto usage;
	if (model_load(model_path, &m, &e) < 0) {
		fprintf(stderr, "molly-bench: %s: %s\n", model_path, e.text);
		return 1;
	}
	page_bytes = sched_page_bytes(m);
	if (!mkdtemp(dir))
		return 1;
	set.n = max_n;
	set.names = calloc(max_n, sizeof(*set.names));
	set.paths = calloc(max_n, sizeof(*set.paths));
	set.sha = calloc(max_n, sizeof(*set.sha));
	if (!set.names || !set.paths || !set.sha)
		return 1;
	/* the adapters: seeded ranks, written as the registry would */
	for (uint32_t i = 0; i < max_n && r >= 0; i++) {
		uint64_t z = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
		struct lora_gen_opts go = { .base = m, .rank = ranks[(z >> 33) % ELEMENTSOF(ranks)],
					    .seed = seed * 100000 + i, .format = LORA_FORMAT_GGUF };
		struct lora_open_opts oo = { .base = m };
		_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
		char gguf[128];

		snprintf(set.names[i], sizeof(set.names[i]), "a%u", i);
		snprintf(gguf, sizeof(gguf), "%s/gen.gguf", dir);
		snprintf(set.paths[i], sizeof(set.paths[i]), "%s/%u.molly", dir, i);
		r = lora_gen_write(gguf, &go, &e);
		if (r >= 0)
			r = lora_adapter_open(gguf, &oo, &a, NULL, &e);
		if (r >= 0)
			r = lora_file_write(a, set.paths[i], NULL, &e);
		if (r >= 0)
			r = hash_file(set.paths[i], set.sha[i]);
		if (r >= 0) {
			size_t pages = lora_resident_pages_needed(a, LORA_HOT_STORED, page_bytes);

			set.max_pages = MAX(set.max_pages, pages);
			set.sum_pages += pages;
		}
		unlink(gguf);
	}
	if (r < 0) {
		fprintf(stderr, "molly-bench: generating adapters: %s\n", e.text);
		goto out;
	}
	if (!json)
		printf("%u requests (8 prompt + 4 generated tokens), Zipf(1.0), %u at once; hot room "
		       "for %u mean adapters\n",
		       n_req, conc, hot_slots);
	for (uint32_t k = 0; k < n_sets && r >= 0; k++) {
		uint32_t n = sets[k];
		_cleanup_free_ uint32_t *trace = calloc(n_req, sizeof(*trace));
		_cleanup_free_ double *cdf = calloc(n, sizeof(*cdf));
		size_t sum_pages = 0, max_pages = 0, kv_pages = (size_t) conc * 8 + 64;
		double total = 0, t_hot = 0, t_run = 0;
		uint64_t steps_hot = 0;
		uint64_t rs = seed + n;
		struct sched_stats st;

		if (!trace || !cdf) {
			r = -ENOMEM;
			break;
		}
		for (uint32_t i = 0; i < n; i++) {
			total += 1.0 / (double) (i + 1);
			cdf[i] = total;
		}
		for (uint32_t i = 0; i < n_req; i++) {
			double u;
			uint32_t lo = 0, hi = n - 1;

			rs += 0x9e3779b97f4a7c15ull;
			u = (double) ((rs ^ (rs >> 29)) * 0xbf58476d1ce4e5b9ull >> 11) / 9007199254740992.0 * total;
			while (lo < hi) {
				uint32_t mid = (lo + hi) / 2;

				if (cdf[mid] < u)
					lo = mid + 1;
				else
					hi = mid;
			}
			trace[i] = (lo * 7919u) % n; /* popularity independent of index (rank) */
		}
		/* per-set sizes (the first n adapters) */
		for (uint32_t i = 0; i < n; i++) {
			struct lora_open_opts oo = { .base = m };
			_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;

			if (lora_adapter_open(set.paths[i], &oo, &a, NULL, NULL) >= 0) {
				size_t pg = lora_resident_pages_needed(a, LORA_HOT_STORED, page_bytes);

				sum_pages += pg;
				max_pages = MAX(max_pages, pg);
			}
		}
		/* 1: every adapter hot before the trace */
		{
			_cleanup_(sched_freep) struct sched *s = NULL;

			r = sched_new(m, &(struct sched_params){ .max_sequences = conc,
								 .queue_length = n_req,
								 .max_context = 64,
								 .n_threads = threads,
								 .pool_bytes = (sum_pages + kv_pages) * page_bytes },
				      &s, &e);
			if (r >= 0)
				r = add_all(s, m, &set, n, false);
			for (uint32_t i = 0; i < n && r >= 0; i++)
				r = sched_pin_adapter(s, set.names[i], true);
			if (r >= 0)
				r = sched_start(s);
			if (r >= 0)
				r = run_trace(s, trace, n_req, set.names, &t_hot);
			if (r >= 0) {
				struct sched_stats hs;

				sched_get_stats(s, &hs);
				steps_hot = hs.steps;
			}
		}
		/* 2: tiered: room for hot_slots mean adapters hot and as many warm */
		if (r >= 0) {
			_cleanup_(sched_freep) struct sched *s = NULL;
			uint64_t hot = (uint64_t) MAX(sum_pages * hot_slots / n, max_pages) * page_bytes;
			uint64_t bytes_read = 0;
			double predicted, bw;

			r = sched_new(m, &(struct sched_params){ .max_sequences = conc,
								 .queue_length = n_req,
								 .max_context = 64,
								 .n_threads = threads,
								 .pool_bytes = hot + kv_pages * page_bytes,
								 .hot_bytes = hot,
								 .warm_bytes = hot },
				      &s, &e);
			if (r >= 0)
				r = add_all(s, m, &set, n, true);
			for (uint32_t i = 0; i < n && r >= 0; i++)
				uncache(set.paths[i]);
			if (r >= 0)
				r = sched_start(s);
			if (r >= 0)
				r = run_trace(s, trace, n_req, set.names, &t_run);
			if (r < 0)
				break;
			sched_get_stats(s, &st);
			for (int p = 0; p < _BLOB_PATH_MAX; p++)
				bytes_read += st.tiers.bytes_read[p];
			/* the loaders' bandwidth: bytes over the wall time any load was reading
			 * (two loaders overlap: their summed durations would flatter it) */
			bw = st.tiers.busy_ns ? (double) bytes_read / ((double) st.tiers.busy_ns * 1e-9) : 0;
			predicted = t_hot + (bw > 0 ? (double) bytes_read / bw : 0);
			if (json)
				printf("{\"adapters\":%u,\"requests\":%u,\"all_hot_s\":%.4f,\"measured_s\":%.4f,"
				       "\"predicted_s\":%.4f,\"ratio\":%.3f,\"steps_all_hot\":%llu,\"steps\":%llu,\"hot_hit_rate\":%.4f,"
				       "\"missed_bytes\":%llu,\"loader_gb_s\":%.4f,\"loads\":%llu,"
				       "\"path\":\"%s\"}\n",
				       n, n_req, t_hot, t_run, predicted, t_run / predicted,
				       (unsigned long long) steps_hot, (unsigned long long) st.steps,
				       (double) st.hot_hits / (double) MAX(st.hot_hits + st.hot_misses, 1),
				       (unsigned long long) bytes_read, bw / 1e9,
				       (unsigned long long) st.tiers.loads,
				       blob_path_name(st.tiers.last_path));
			else
				printf("%5u adapters: all hot %.3f s (%llu steps), tiered %.3f s (%llu "
				       "steps), predicted %.3f s (ratio %.3f); hot hit rate %.3f, %llu loads, "
				       "%.1f MB read at %.2f GB/s (%s); hot builds %.3f s\n",
				       n, t_hot, (unsigned long long) steps_hot, t_run,
				       (unsigned long long) st.steps, predicted, t_run / predicted,
				       (double) st.hot_hits / (double) MAX(st.hot_hits + st.hot_misses, 1),
				       (unsigned long long) st.tiers.loads, (double) bytes_read / 1e6,
				       bw / 1e9, blob_path_name(st.tiers.last_path),
				       (double) st.promote_build_ns * 1e-9);
		}
	}
	if (r < 0)
		fprintf(stderr, "molly-bench: %s\n", e.text[0] ? e.text : strerror(-r));
out:
	for (uint32_t i = 0; i < max_n; i++)
		if (set.paths && set.paths[i][0])
			unlink(set.paths[i]);
	rmdir(dir);
	free(set.names);
	free(set.paths);
	free(set.sha);
	return r < 0 ? 1 : 0;
usage:
	fputs("usage: molly-bench --tier-serve --model M [--adapters N,N,...] [--hot-slots N] "
	      "[--requests R] [--concurrency C] [--threads T] [--seed S] [--json]\n",
	      stderr);
	return 2;
}
