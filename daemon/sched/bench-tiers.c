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
	double cold[64], hot[64], base[64];
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
			uncache(blob);
			r = ttft(s, "bench", &cold[i]);
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
	if (json)
		printf("{\"adapter_bytes\":%lld,\"reps\":%d,\"cold_ttft_s\":%.6f,\"hot_ttft_s\":%.6f,"
		       "\"base_ttft_s\":%.6f}\n",
		       (long long) st.st_size, reps, cold[reps / 2], hot[reps / 2], base[reps / 2]);
	else
		printf("adapter blob %lld bytes, %d reps (medians): first token cold %.3f ms, hot "
		       "%.3f ms, no adapter %.3f ms; cold - hot = %.3f ms\n",
		       (long long) st.st_size, reps, cold[reps / 2] * 1e3, hot[reps / 2] * 1e3,
		       base[reps / 2] * 1e3, (cold[reps / 2] - hot[reps / 2]) * 1e3);
	return 0;
usage:
	fputs("usage: molly-bench --cold-ttft --model M --adapter FILE [--reps R] [--threads T] "
	      "[--json]\n",
	      stderr);
	return 2;
}
