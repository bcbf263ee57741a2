/* SPDX-License-Identifier: MIT */
/*
 * bench-serve.h: the serving benchmark behind `molly-bench --serve`: C concurrent sequences,
 * each on one of the adapters, through the real scheduler; aggregate generated tokens per
 * second of wall time, prefill included: the median over the timed rounds, each after an
 * untimed warm-up round.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../lora/resident.h"

struct model;

struct bench_serve_opts {
	const struct model *m;
	const char *adapters_dir; /* load every adapter in it; or */
	uint32_t n_adapters;      /* generate this many (rank 16, all seven targets, F16); 0: none */
	uint32_t concurrency;     /* sequences at once (and in total) */
	uint32_t prompt_tokens;   /* default 16 */
	uint32_t gen_tokens;      /* default 64 */
	uint32_t rounds;          /* timed rounds of the C sequences, after one untimed; default 1 */
	bool sequential;          /* one after another instead of together */
	/* each timed round also run without adapters, next to it (the order alternating), and
	 * the ratio taken per pair: the adapters' cost free of the host's slow drift */
	bool paired;
	int n_threads;
	uint64_t seed;
	enum lora_hot_type hot_type; /* the adapters' hot form (--hot-type) */
};

struct bench_serve_result {
	double wall_s;          /* of the timed rounds together */
	double aggregate_tok_s; /* the median round's */
	/* CPU time the process got over wall × threads: near 1 when no other load took the
	 * cores (the pool's threads spin between jobs), so a lower figure flags a busy host */
	double cpu_util;
	uint64_t generated;     /* in the timed rounds */
	uint32_t adapters_loaded;
	uint32_t adapters_resident;
	uint32_t adapters_used;
	uint64_t steps;
	/* paired: the same rounds' rate without adapters (median), and the median over the
	 * rounds of (with adapters / without) */
	double base_tok_s;
	double paired_ratio;
};

int bench_serve_run(const struct bench_serve_opts *o, struct bench_serve_result *ret,
		    struct errmsg *e);
