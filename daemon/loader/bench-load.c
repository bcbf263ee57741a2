/* SPDX-License-Identifier: MIT */
/* bench-load.c: molly-bench --adapter-load (see bench-load.h). */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../basic/sha256.h"
#include "../basic/time-util.h"
#include "bench-load.h"
#include "blob-load.h"

struct reuse {
	void *buf;
	size_t bytes;
};

/* One destination for every file, faulted in once: the rate is the reads' (and the hash's),
 * not the kernel's page faults, as fio reuses its buffers too. */
static void *reuse_alloc(size_t bytes, void *userdata)
{
	struct reuse *r = userdata;

	return bytes <= r->bytes ? r->buf : NULL;
}

static void usage(FILE *f)
{
	fputs("usage: molly-bench --adapter-load FILE... [--path uring|pread|mmap] [--verify] [--json]\n"
	      "                   [--queue-depth N] [--chunk BYTES] [--jobs N]\n",
	      f);
}

/*
 * --jobs N: N loaders, each on its own thread, ring and destination, taking the next file
 * in turn, as the daemon's warm tier loads with its loader threads. A blob's SHA-256 is one
 * core's work (a hash is sequential); two loads at once hash on two cores. The rate is then
 * the wall clock from the first open to the last byte checked; give each loader
 * --queue-depth (default 8) / N to keep the reads in flight what fio's --iodepth is.
 */
struct job {
	struct blob_loader_params p;
	char **files;
	int n_files;
	atomic_int *next;
	bool verify;
	struct reuse reuse;
	uint64_t bytes, hash_ns;
	enum blob_path ran;
	bool mixed, have_path;
	int r;
	char err[sizeof(((struct errmsg *) 0)->text) + 16];
};

static void *job_run(void *userdata)
{
	struct job *j = userdata;
	_cleanup_(blob_loader_freep) struct blob_loader *l = NULL;
	int i;

	j->r = blob_loader_new(&j->p, &l);
	if (j->r < 0) {
		snprintf(j->err, sizeof(j->err), "loader: %s", strerror(-j->r));
		return NULL;
	}
	while ((i = atomic_fetch_add(j->next, 1)) < j->n_files) {
		struct blob_load_result res;
		struct errmsg e = { { 0 } };

		j->r = blob_load(l, j->files[i], j->verify, NULL, reuse_alloc, &j->reuse, &res, &e);
		if (j->r < 0) {
			snprintf(j->err, sizeof(j->err), "%s", e.text[0] ? e.text : strerror(-j->r));
			return NULL;
		}
		if (j->have_path && res.path != j->ran)
			j->mixed = true;
		j->ran = res.path;
		j->have_path = true;
		j->bytes += res.bytes;
		j->hash_ns += res.hash_ns;
	}
	return NULL;
}

static int run_jobs(const struct blob_loader_params *p, int jobs, char **files, int n_files,
		    bool verify, size_t buf_bytes, bool json)
{
	struct job job[16];
	pthread_t th[16];
	atomic_int next = 0;
	uint64_t t0, ns, bytes = 0, hash_ns = 0;
	enum blob_path ran = BLOB_PATH_URING;
	bool mixed = false, have_path = false;
	int r = 0, started = 0;

	for (int k = 0; k < jobs; k++) {
		job[k] = (struct job){ .p = *p, .files = files, .n_files = n_files, .next = &next,
				       .verify = verify, .reuse = { .bytes = buf_bytes } };
		if (posix_memalign(&job[k].reuse.buf, 4096, buf_bytes) != 0) {
			r = -ENOMEM;
			jobs = k;
			break;
		}
		memset(job[k].reuse.buf, 0, buf_bytes);
	}
	t0 = now_ns();
	for (int k = 0; k < jobs && r == 0; k++) {
		if (pthread_create(&th[k], NULL, job_run, &job[k]) != 0)
			r = -EAGAIN;
		else
			started++;
	}
	for (int k = 0; k < started; k++)
		pthread_join(th[k], NULL);
	ns = now_ns() - t0;
	for (int k = 0; k < jobs; k++) {
		if (job[k].r < 0 && r == 0) {
			fprintf(stderr, "molly-bench: %s\n", job[k].err);
			r = job[k].r;
		}
		if (job[k].have_path) {
			if ((have_path && job[k].ran != ran) || job[k].mixed)
				mixed = true;
			ran = job[k].ran;
			have_path = true;
		}
		bytes += job[k].bytes;
		hash_ns += job[k].hash_ns;
		free(job[k].reuse.buf);
	}
	if (r < 0)
		return 1;
	{
		double sec = (double) ns * 1e-9;
		double gb_s = sec > 0 ? (double) bytes / sec / 1e9 : 0;

		if (json)
			printf("{\"path\":\"%s\",\"bytes\":%llu,\"seconds\":%.6f,\"gb_s\":%.4f,"
			       "\"verify\":%s,\"hash\":\"%s\",\"hash_seconds\":%.6f,\"files\":%d,"
			       "\"queue_depth\":%u,\"chunk_bytes\":%u,\"jobs\":%d}\n",
			       mixed ? "mixed" : blob_path_name(ran), (unsigned long long) bytes, sec,
			       gb_s, verify ? "true" : "false", verify ? sha256_impl() : "",
			       (double) hash_ns * 1e-9, n_files, p->queue_depth ? p->queue_depth : 8,
			       p->chunk_bytes ? p->chunk_bytes : (1u << 20), jobs);
		else
			printf("%s: %llu bytes in %.3f s = %.3f GB/s with %d loaders%s%s\n",
			       mixed ? "mixed" : blob_path_name(ran), (unsigned long long) bytes, sec,
			       gb_s, jobs, verify ? ", hashed with " : "", verify ? sha256_impl() : "");
	}
	return 0;
}

int bench_adapter_load(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "adapter-load", no_argument, NULL, 'A' }, { "path", required_argument, NULL, 'p' },
		{ "verify", no_argument, NULL, 'v' },       { "json", no_argument, NULL, 'j' },
		{ "queue-depth", required_argument, NULL, 'q' },
		{ "chunk", required_argument, NULL, 'c' },  { "help", no_argument, NULL, 'h' },
		{ "jobs", required_argument, NULL, 'J' },
		{},
	};
	/* one destination for all files, alive until the loader is gone */
	struct blob_loader_params p = { .path = BLOB_PATH_URING, .reuse_destination = true };
	_cleanup_(blob_loader_freep) struct blob_loader *l = NULL;
	struct reuse reuse = { 0 };
	bool verify = false, json = false, mixed = false, have_path = false;
	int jobs = 1;
	enum blob_path ran = BLOB_PATH_URING;
	uint64_t bytes = 0, ns = 0, hash_ns = 0;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		switch (c) {
		case 'A':
			break;
		case 'p':
			if (blob_path_from_name(optarg, &p.path) < 0 ||
			    p.path == BLOB_PATH_URING_BUFFERED) {
				fprintf(stderr, "molly-bench: --path is uring, pread or mmap\n");
				return 2;
			}
			break;
		case 'v':
			verify = true;
			break;
		case 'j':
			json = true;
			break;
		case 'q':
			p.queue_depth = (uint32_t) atoi(optarg);
			break;
		case 'c':
			p.chunk_bytes = (uint32_t) strtoul(optarg, NULL, 0);
			break;
		case 'J':
			jobs = atoi(optarg);
			if (jobs < 1 || jobs > 16) {
				fprintf(stderr, "molly-bench: --jobs is 1 to 16\n");
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	for (int i = optind; i < argc; i++) {
		struct stat st;

		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "molly-bench: %s: %m\n", argv[i]);
			return 1;
		}
		reuse.bytes = MAX(reuse.bytes, ALIGN_UP((size_t) st.st_size + 1, 4096));
	}
	if (jobs > 1)
		return run_jobs(&p, jobs, argv + optind, argc - optind, verify, reuse.bytes, json);
	if (posix_memalign(&reuse.buf, 4096, reuse.bytes) != 0)
		return 1;
	memset(reuse.buf, 0, reuse.bytes);
	r = blob_loader_new(&p, &l);
	if (r < 0) {
		fprintf(stderr, "molly-bench: loader: %s\n", strerror(-r));
		free(reuse.buf);
		return 1;
	}
	if (blob_loader_note(l)[0])
		fprintf(stderr, "molly-bench: %s\n", blob_loader_note(l));
	for (int i = optind; i < argc; i++) {
		struct blob_load_result res;
		struct errmsg e = { { 0 } };
		char hex[SHA256_HEX_SIZE];

		r = blob_load(l, argv[i], verify, NULL, reuse_alloc, &reuse, &res, &e);
		if (r < 0) {
			fprintf(stderr, "molly-bench: %s\n", e.text[0] ? e.text : strerror(-r));
			l = blob_loader_free(l);
			free(reuse.buf);
			return 1;
		}
		if (have_path && res.path != ran)
			mixed = true;
		ran = res.path;
		have_path = true;
		bytes += res.bytes;
		ns += res.ns;
		hash_ns += res.hash_ns;
		if (!json)
			printf("%s: %llu bytes in %.3f ms (%s)%s%s\n", argv[i],
			       (unsigned long long) res.bytes, (double) res.ns * 1e-6,
			       blob_path_name(res.path), verify ? " sha256 " : "",
			       verify ? sha256_hex(res.sha256, hex) : "");
	}
	l = blob_loader_free(l); /* its registration of reuse.buf first */
	free(reuse.buf);
	{
		double sec = (double) ns * 1e-9;
		double gb_s = sec > 0 ? (double) bytes / sec / 1e9 : 0;

		if (json)
			printf("{\"path\":\"%s\",\"bytes\":%llu,\"seconds\":%.6f,\"gb_s\":%.4f,"
			       "\"verify\":%s,\"hash\":\"%s\",\"hash_seconds\":%.6f,\"files\":%d,"
			       "\"queue_depth\":%u,\"chunk_bytes\":%u}\n",
			       mixed ? "mixed" : blob_path_name(ran), (unsigned long long) bytes, sec,
			       gb_s, verify ? "true" : "false", verify ? sha256_impl() : "",
			       (double) hash_ns * 1e-9, argc - optind,
			       p.queue_depth ? p.queue_depth : 8,
			       p.chunk_bytes ? p.chunk_bytes : (1u << 20));
		else
			printf("%s: %llu bytes in %.3f s = %.3f GB/s%s%s\n",
			       mixed ? "mixed" : blob_path_name(ran), (unsigned long long) bytes, sec,
			       gb_s, verify ? ", hashed with " : "", verify ? sha256_impl() : "");
	}
	return 0;
}
