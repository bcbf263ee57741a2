/* SPDX-License-Identifier: MIT */
/*
 * tier-sim.h: a trace simulation of the hot tier — which adapters stay hot under a request
 * stream, with the scheduler's own eviction code (evict.h) against Belady's farthest-next-use.
 *
 * Adapters have ranks drawn from {4, 8, 16, 32, 64} (or one rank for an equal-size run) and
 * bytes = rank × bytes_per_rank; popularity is Zipf(s) over a random permutation (independent
 * of size). The hot tier holds hot_slots × the mean adapter's bytes. A miss stalls its
 * request for latency + bytes ÷ bandwidth (the loader's measured rate) and inserts the
 * adapter, evicting by the policy until it fits. Belady is the optimum of the miss count when
 * all adapters have the same size; with mixed sizes it is a reference only.
 *
 *   molly-bench --tier-sim [--adapters 1000] [--hot 64] [--requests 200000] [--zipf 1.0]
 *               [--bandwidth GB/s] [--latency-ms 0.1] [--bytes-per-rank B] [--seed S] [--json]
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

enum tier_sim_policy {
	TIER_SIM_GDSF,
	TIER_SIM_LRU,
	TIER_SIM_BELADY,
};

struct tier_sim_params {
	uint32_t n_adapters;
	uint32_t hot_slots;      /* the tier holds this many mean-sized adapters */
	uint64_t n_requests;
	double zipf_s;
	uint64_t seed;
	double bytes_per_rank;   /* adapter bytes per unit of rank */
	double bandwidth;        /* bytes/s of a cold load */
	double latency_s;        /* fixed cost of a load */
	uint32_t equal_rank;     /* > 0: every adapter has this rank */
};

struct tier_sim_result {
	uint64_t hits, misses;
	uint64_t missed_bytes;
	double stall_s;          /* summed over requests */
};

int tier_sim_run(const struct tier_sim_params *p, enum tier_sim_policy pol,
		 struct tier_sim_result *ret);
/* molly-bench --tier-sim: exit status. */
int tier_sim_main(int argc, char **argv);
