/* SPDX-License-Identifier: MIT */
/*
 * molly-bench-registry: the adapter registry at scale (issue 16's bounds, measured, not a
 * timed test): N registered adapters (default 10,000) of rank 4 on q and v of the base
 * (the shape: molly-mkmodel --preset 100m), each with its own seed, so N distinct
 * blobs.
 *
 *   molly-bench-registry --base MODEL.gguf --state-dir DIR [-n N] [--lookups K] [--json]
 *
 * Fills DIR/registry up to N names (kept between runs: the first run imports, later runs
 * measure at once), then measures:
 *   start-up   what mollyd does with the registry at start (open, lock, count, an empty drop
 *              folder) and a whole manager_new() on that state directory, with the bytes the
 *              process read meanwhile (/proc/self/io rchar) next to the model's size: no blob
 *              is read at start                              bound: <= 1 s
 *   lookup     registry_resolve("NAME") of random names, p50 / p99 over K  bound: p99 <= 20 us
 *   list       registry_list() over every name, and manager_foreach_adapter()  bound: <= 1 s
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "basic/time-util.h"
#include "core/config.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "lora/adapter.h"
#include "lora/lora-gen.h"
#include "manager.h"
#include "registry/registry.h"

static uint64_t rchar(void)
{
	FILE *f = fopen("/proc/self/io", "re");
	char line[128];
	uint64_t v = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "rchar: %" SCNu64, &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

	return x < y ? -1 : x > y;
}

static int count_one(const struct registry_version *v, void *ud)
{
	(*(size_t *) ud)++;
	return 0;
}

static void count_info(const struct manager_adapter_info *a, void *ud)
{
	(*(size_t *) ud)++;
}

static int fill(struct registry *reg, const struct model *base, const char *dir, size_t n,
		size_t have)
{
	_cleanup_free_ char *desc = lora_base_describe(base);
	char tmp[4200];
	uint64_t t0 = now_ns();

	snprintf(tmp, sizeof(tmp), "%s/bench-src.gguf", dir);
	for (size_t i = have; i < n; i++) {
		struct lora_gen_opts g = { .base = base,
					   .rank = 4,
					   .targets = 1u << LORA_TARGET_Q | 1u << LORA_TARGET_V,
					   .seed = 1000 + i,
					   .dtype = GGML_TYPE_F16,
					   .format = LORA_FORMAT_GGUF };
		struct lora_open_opts o = { .base = base };
		_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
		struct errmsg e = { { 0 } };
		char name[32];
		struct registry_import imp = { .name = name, .base_description = desc,
					       .source = tmp, .importer = "molly-bench-registry" };
		int r;

		snprintf(name, sizeof(name), "spec-%05zu", i);
		r = lora_gen_write(tmp, &g, &e);
		if (r >= 0)
			r = lora_adapter_open(tmp, &o, &a, NULL, &e);
		if (r >= 0)
			r = registry_import(reg, a, &imp, NULL, &e);
		if (r < 0) {
			fprintf(stderr, "molly-bench-registry: %s: %s\n", name, e.text);
			return r;
		}
		if ((i + 1) % 1000 == 0)
			fprintf(stderr, "  %zu adapters registered (%.1f s)\n", i + 1,
				(double) (now_ns() - t0) / 1e9);
	}
	(void) unlink(tmp);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "base", required_argument, NULL, 'b' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "lookups", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{},
	};
	const char *base_path = NULL, *state = NULL;
	size_t n = 10000, lookups = 100000, have = 0, listed = 0, infos = 0;
	_cleanup_(model_freep) struct model *base = NULL;
	_cleanup_(registry_closep) struct registry *reg = NULL;
	_cleanup_free_ uint64_t *lat = NULL;
	struct errmsg e = { { 0 } };
	char regdir[4200], drop[4200];
	bool json = false;
	double t_reg_ms, t_mgr_ms, t_list_ms, t_foreach_ms, p50, p99;
	uint64_t t0, io0, io_mgr, model_bytes;
	struct stat st;
	int c, r;

	while ((c = getopt_long(argc, argv, "n:", options, NULL)) >= 0) {
		switch (c) {
		case 'b':
			base_path = optarg;
			break;
		case 'd':
			state = optarg;
			break;
		case 'n':
			n = strtoull(optarg, NULL, 10);
			break;
		case 'k':
			lookups = strtoull(optarg, NULL, 10);
			break;
		case 'j':
			json = true;
			break;
		default:
			goto usage;
		}
	}
	if (!base_path || !state || n == 0 || lookups == 0)
		goto usage;
	if (stat(base_path, &st) < 0) {
		fprintf(stderr, "molly-bench-registry: %s: %m\n", base_path);
		return 1;
	}
	model_bytes = (uint64_t) st.st_size;
	snprintf(regdir, sizeof(regdir), "%s/registry", state);
	snprintf(drop, sizeof(drop), "%s/adapters", state);
	(void) mkdir(state, 0755);
	(void) mkdir(drop, 0755);

	/* ---- fill (once) ---- */
	{
		struct registry_params p = { .dir = regdir, .keep_versions = 3 };
		r = registry_open(&p, &reg, &e);
		if (r >= 0)
			r = registry_count(reg, &have);
		if (r < 0) {
			fprintf(stderr, "molly-bench-registry: %s\n", e.text);
			return 1;
		}
		if (have < n) {
			fprintf(stderr, "registering %zu adapters (rank 4, q and v) in %s...\n",
				n - have, regdir);
			r = model_load(base_path, &base, &e);
			if (r < 0) {
				fprintf(stderr, "molly-bench-registry: %s\n", e.text);
				return 1;
			}
			if (fill(reg, base, state, n, have) < 0)
				return 1;
			base = model_free(base);
		}
		reg = registry_close(reg);
	}

	/* ---- start-up: the registry part of mollyd's start ---- */
	{
		struct registry_params p = { .dir = regdir, .keep_versions = 3 };
		t0 = now_ns();
		r = registry_open(&p, &reg, &e);
		if (r >= 0)
			r = registry_hold(reg);
		if (r >= 0)
			r = registry_count(reg, &have);
		t_reg_ms = (double) (now_ns() - t0) / 1e6;
		if (r < 0) {
			fprintf(stderr, "molly-bench-registry: %s\n", e.text[0] ? e.text : strerror(-r));
			return 1;
		}
		reg = registry_close(reg);
	}
	/* ...and a whole manager on that state directory (model load included) */
	{
		_cleanup_(config_unrefp) struct config *cfg = NULL;
		_cleanup_(manager_freep) struct manager *m = NULL;
		char text[9000];

		snprintf(text, sizeof(text),
			 "[Model]\nPath=%s\nThreads=2\n[Paths]\nStateDirectory=%s\n[Adapters]\n"
			 "Directory=%s\n",
			 base_path, state, drop);
		r = config_new(&cfg);
		if (r >= 0)
			r = config_parse_text(cfg, text, strlen(text), "bench.conf", &e);
		io0 = rchar();
		t0 = now_ns();
		if (r >= 0)
			r = manager_new(cfg, &m, &e);
		t_mgr_ms = (double) (now_ns() - t0) / 1e6;
		io_mgr = rchar() - io0;
		if (r < 0) {
			fprintf(stderr, "molly-bench-registry: manager: %s\n", e.text);
			return 1;
		}
		t0 = now_ns();
		manager_foreach_adapter(m, count_info, &infos);
		t_foreach_ms = (double) (now_ns() - t0) / 1e6;
	}

	/* ---- lookups and list ---- */
	{
		struct registry_params p = { .dir = regdir, .read_only = true };
		uint64_t x = 88172645463325252ull;

		r = registry_open(&p, &reg, &e);
		if (r < 0) {
			fprintf(stderr, "molly-bench-registry: %s\n", e.text);
			return 1;
		}
		lat = calloc(lookups, sizeof(*lat));
		if (!lat)
			return 1;
		for (size_t i = 0; i < lookups; i++) {
			struct registry_version v;
			char name[32];

			x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
			snprintf(name, sizeof(name), "spec-%05" PRIu64, x % n);
			t0 = now_ns();
			r = registry_resolve(reg, name, &v, &e);
			lat[i] = now_ns() - t0;
			if (r < 0) {
				fprintf(stderr, "molly-bench-registry: %s: %s\n", name, e.text);
				return 1;
			}
			registry_version_done(&v);
		}
		qsort(lat, lookups, sizeof(*lat), cmp_u64);
		p50 = (double) lat[lookups / 2] / 1e3;
		p99 = (double) lat[(size_t) ((double) lookups * 0.99)] / 1e3;
		t0 = now_ns();
		(void) registry_list(reg, count_one, &listed);
		t_list_ms = (double) (now_ns() - t0) / 1e6;
	}

	if (json)
		printf("{\"adapters\":%zu,\"startup_registry_ms\":%.3f,\"startup_manager_ms\":%.1f,"
		       "\"startup_read_bytes\":%" PRIu64 ",\"model_bytes\":%" PRIu64 ","
		       "\"lookup_p50_us\":%.2f,\"lookup_p99_us\":%.2f,\"list_ms\":%.1f,"
		       "\"list_manager_ms\":%.1f,\"listed\":%zu}\n",
		       have, t_reg_ms, t_mgr_ms, io_mgr, model_bytes, p50, p99, t_list_ms,
		       t_foreach_ms, listed);
	else {
		printf("adapters registered          %zu\n", have);
		printf("start-up: registry           %.3f ms   (bound 1000 ms) %s\n", t_reg_ms,
		       t_reg_ms <= 1000 ? "ok" : "OVER");
		printf("start-up: manager_new        %.1f ms (model load included)\n", t_mgr_ms);
		printf("          bytes read         %" PRIu64 " (the model file is %" PRIu64
		       " bytes) %s\n",
		       io_mgr, model_bytes,
		       io_mgr <= model_bytes + (1u << 20) ? "ok: no blob read" : "BLOBS READ?");
		printf("lookup by name               p50 %.2f us, p99 %.2f us  (bound p99 20 us) %s\n",
		       p50, p99, p99 <= 20 ? "ok" : "OVER");
		printf("list: registry_list          %.1f ms for %zu  (bound 1000 ms) %s\n", t_list_ms,
		       listed, t_list_ms <= 1000 ? "ok" : "OVER");
		printf("list: manager_foreach        %.1f ms for %zu  %s\n", t_foreach_ms, infos,
		       t_foreach_ms <= 1000 ? "ok" : "OVER");
	}
	return 0;
usage:
	fprintf(stderr, "Usage: molly-bench-registry --base MODEL.gguf --state-dir DIR [-n N] "
			"[--lookups K] [--json]\n");
	return 2;
}
