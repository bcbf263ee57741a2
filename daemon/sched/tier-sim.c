/* SPDX-License-Identifier: MIT */
/* tier-sim.c: the hot tier under a Zipf trace (see tier-sim.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../basic/macro.h"
#include "evict.h"
#include "tier-sim.h"

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
	return (double) (splitmix(s) >> 11) / 9007199254740992.0;
}

struct sim_item {
	uint64_t bytes;
	bool hot;
	uint64_t next_use;   /* Belady: the index of its next request (UINT64_MAX: none) */
	struct evict_meta meta;
};

int tier_sim_run(const struct tier_sim_params *p, enum tier_sim_policy pol,
		 struct tier_sim_result *ret)
{
	static const uint32_t ranks[] = { 4, 8, 16, 32, 64 };
	uint32_t n = p->n_adapters;
	_cleanup_free_ struct sim_item *items = calloc(n, sizeof(*items));
	_cleanup_free_ double *cdf = calloc(n, sizeof(*cdf));
	_cleanup_free_ uint32_t *perm = calloc(n, sizeof(*perm));
	_cleanup_free_ uint32_t *trace = calloc(p->n_requests, sizeof(*trace));
	_cleanup_free_ uint64_t *next = calloc(p->n_requests, sizeof(*next));
	_cleanup_free_ uint64_t *last_seen = calloc(n, sizeof(*last_seen));
	_cleanup_free_ uint32_t *hot = calloc(n, sizeof(*hot));
	struct evict_clock clock = { 0 };
	enum evict_policy ep = pol == TIER_SIM_LRU ? EVICT_LRU : EVICT_GDSF;
	uint64_t seed = p->seed, capacity, used = 0, total = 0;
	uint32_t n_hot = 0;
	double sum = 0;

	memset(ret, 0, sizeof(*ret));
	if (!items || !cdf || !perm || !trace || !next || !last_seen || !hot || n == 0)
		return -ENOMEM;
	/* sizes, then popularity by a permutation independent of size */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t r = p->equal_rank ? p->equal_rank : ranks[splitmix(&seed) % ELEMENTSOF(ranks)];

		items[i].bytes = (uint64_t) (r * p->bytes_per_rank);
		total += items[i].bytes;
		perm[i] = i;
	}
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = (uint32_t) (splitmix(&seed) % (i + 1)), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	capacity = total / n * p->hot_slots;
	for (uint32_t k = 0; k < n; k++) {
		sum += 1.0 / pow((double) (k + 1), p->zipf_s);
		cdf[k] = sum;
	}
	for (uint64_t t = 0; t < p->n_requests; t++) {
		double u = uniform(&seed) * sum;
		uint32_t lo = 0, hi = n - 1;

		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;

			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		trace[t] = perm[lo];
	}
	/* next use of each request's adapter, from the back */
	for (uint32_t i = 0; i < n; i++)
		last_seen[i] = UINT64_MAX;
	for (uint64_t t = p->n_requests; t-- > 0;) {
		next[t] = last_seen[trace[t]];
		last_seen[trace[t]] = t;
	}

	for (uint64_t t = 0; t < p->n_requests; t++) {
		struct sim_item *it = &items[trace[t]];

		it->next_use = next[t];
		if (it->hot) {
			ret->hits++;
			evict_hit(ep, &clock, &it->meta);
			continue;
		}
		ret->misses++;
		ret->missed_bytes += it->bytes;
		ret->stall_s += p->latency_s + (double) it->bytes / p->bandwidth;
		if (it->bytes > capacity)
			continue; /* never fits: served from a cold read each time */
		while (used + it->bytes > capacity) {
			uint32_t v = 0;

			for (uint32_t k = 1; k < n_hot; k++) {
				struct sim_item *a = &items[hot[k]], *b = &items[hot[v]];

				if (pol == TIER_SIM_BELADY ? a->next_use > b->next_use
							   : evict_before(&a->meta, &b->meta))
					v = k;
			}
			if (pol != TIER_SIM_BELADY)
				evict_removed(ep, &clock, &items[hot[v]].meta);
			items[hot[v]].hot = false;
			used -= items[hot[v]].bytes;
			hot[v] = hot[--n_hot];
		}
		it->hot = true;
		used += it->bytes;
		hot[n_hot++] = (uint32_t) (it - items);
		it->meta.bytes = it->bytes;
		it->meta.cost = p->latency_s + (double) it->bytes / p->bandwidth;
		evict_insert(ep, &clock, &it->meta);
	}
	return 0;
}

static void print_row(const char *run, const char *pol, const struct tier_sim_result *r,
		      uint64_t n, bool json)
{
	if (json)
		printf("{\"run\":\"%s\",\"policy\":\"%s\",\"hit_rate\":%.5f,\"misses\":%llu,"
		       "\"missed_bytes\":%llu,\"stall_seconds\":%.3f}\n",
		       run, pol, (double) r->hits / (double) n, (unsigned long long) r->misses,
		       (unsigned long long) r->missed_bytes, r->stall_s);
	else
		printf("%-6s %-7s hit rate %.4f  misses %8llu  missed %8.2f GB  stall %9.2f s\n", run,
		       pol, (double) r->hits / (double) n, (unsigned long long) r->misses,
		       (double) r->missed_bytes / 1e9, r->stall_s);
}

int tier_sim_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "tier-sim", no_argument, NULL, 'T' },
		{ "adapters", required_argument, NULL, 'n' },
		{ "hot", required_argument, NULL, 'H' },
		{ "requests", required_argument, NULL, 'r' },
		{ "zipf", required_argument, NULL, 'z' },
		{ "bandwidth", required_argument, NULL, 'b' },
		{ "latency-ms", required_argument, NULL, 'l' },
		{ "bytes-per-rank", required_argument, NULL, 'B' },
		{ "seed", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{},
	};
	/* Llama-7B shapes, all seven targets in 32 layers, F16: 78,080 values a layer per rank */
	struct tier_sim_params p = { .n_adapters = 1000, .hot_slots = 64, .n_requests = 200000,
				     .zipf_s = 1.0, .seed = 1, .bytes_per_rank = 78080.0 * 32 * 2,
				     .bandwidth = 2e9, .latency_s = 1e-4 };
	static const char *const names[] = { "gdsf", "lru", "belady" };
	bool json = false;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) >= 0) {
		switch (c) {
		case 'T':
			break;
		case 'n':
			p.n_adapters = (uint32_t) atoi(optarg);
			break;
		case 'H':
			p.hot_slots = (uint32_t) atoi(optarg);
			break;
		case 'r':
			p.n_requests = strtoull(optarg, NULL, 10);
			break;
		case 'z':
			p.zipf_s = atof(optarg);
			break;
		case 'b':
			p.bandwidth = atof(optarg) * 1e9;
			break;
		case 'l':
			p.latency_s = atof(optarg) * 1e-3;
			break;
		case 'B':
			p.bytes_per_rank = atof(optarg);
			break;
		case 's':
			p.seed = strtoull(optarg, NULL, 10);
			break;
		case 'j':
			json = true;
			break;
		default:
			fputs("usage: molly-bench --tier-sim [--adapters N] [--hot N] [--requests N] "
			      "[--zipf S] [--bandwidth GB/s] [--latency-ms MS] [--bytes-per-rank B] "
			      "[--seed S] [--json]\n",
			      stderr);
			return 2;
		}
	}
	if (p.n_adapters < 1 || p.hot_slots < 1 || p.n_requests < 1 || p.bandwidth <= 0) {
		fputs("molly-bench --tier-sim: adapters, hot, requests and bandwidth must be positive\n",
		      stderr);
		return 2;
	}
	if (!json)
		printf("%u adapters, room for %u mean-sized hot, %llu requests, Zipf(%.2f), "
		       "%.2f GB/s + %.3f ms a load\n",
		       p.n_adapters, p.hot_slots, (unsigned long long) p.n_requests, p.zipf_s,
		       p.bandwidth / 1e9, p.latency_s * 1e3);
	for (int run = 0; run < 2; run++) {
		p.equal_rank = run ? 16 : 0;
		for (int pol = 0; pol < 3; pol++) {
			struct tier_sim_result r;

			if (tier_sim_run(&p, (enum tier_sim_policy) pol, &r) < 0)
				return 1;
			print_row(run ? "equal" : "mixed", names[pol], &r, p.n_requests, json);
		}
	}
	return 0;
}
