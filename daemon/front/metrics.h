/* SPDX-License-Identifier: MIT */
/*
 * metrics.h: the HTTP front's Prometheus metrics (GET /metrics, text format 0.0.4).
 *
 * The front records what it sees (requests by endpoint and status, latencies, time to first
 * token, tokens, which adapters its requests are waiting for or running with); the rest
 * (queue depth, running sequences, pool use, per-adapter totals over every front) is read
 * from the manager when the page is rendered and handed in as struct metrics_gauges.
 *
 * Besides molly_* names, the page carries the vLLM series that LoRA-aware gateways (the
 * Gateway API Inference Extension's endpoint picker and others) read: vllm:num_requests_running,
 * vllm:num_requests_waiting, vllm:kv_cache_usage_perc (and its old name
 * vllm:gpu_cache_usage_perc), vllm:prompt_tokens_total, vllm:generation_tokens_total, and
 * vllm:lora_requests_info{max_lora, waiting_lora_adapters, running_lora_adapters} whose value
 * is the current Unix time (as vLLM's set_to_current_time()) and whose adapter labels are
 * comma-separated names.
 *
 * Threading: every function is safe from any thread (atomics; a mutex for the adapter table).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../basic/macro.h"

struct sched_stats;

enum metrics_endpoint {
	METRICS_EP_MODELS,
	METRICS_EP_COMPLETIONS,
	METRICS_EP_CHAT_COMPLETIONS,
	METRICS_EP_LOAD_LORA,
	METRICS_EP_UNLOAD_LORA,
	METRICS_EP_METRICS,
	METRICS_EP_HEALTH,
	METRICS_EP_OTHER, /* unknown paths (404) */
	METRICS_EP_COUNT_,
};

/* The path label of an endpoint ("/v1/completions", ..., "other"). */
const char *metrics_endpoint_path(enum metrics_endpoint ep);

struct metrics;

int metrics_new(struct metrics **ret);
struct metrics *metrics_free(struct metrics *m);
DEFINE_CLEANUP_FUNC(struct metrics *, metrics_free, NULL)

/* A request finished with HTTP status `status` after duration_ns (from its first byte to its
 * last). */
void metrics_request_done(struct metrics *m, enum metrics_endpoint ep, int status,
			  uint64_t duration_ns);
/* A generation was cancelled because its client went away before the end. */
void metrics_client_cancelled(struct metrics *m);
/* A generation produced its first text after ttft_ns. */
void metrics_first_token(struct metrics *m, uint64_t ttft_ns);
/* A generation finished with these token counts. */
void metrics_tokens(struct metrics *m, uint32_t prompt_tokens, uint32_t completion_tokens);

/* Adapter activity of the front's own requests: a request using adapter `name` was queued
 * (waiting), started producing (running), or ended (was_running says which count to drop). */
void metrics_adapter_queued(struct metrics *m, const char *name);
void metrics_adapter_started(struct metrics *m, const char *name);
void metrics_adapter_ended(struct metrics *m, const char *name, bool was_running);

struct metrics_adapter_gauge {
	const char *name;
	bool loaded;
	bool resident;
	uint64_t requests; /* since load, over every front */
	uint32_t active;   /* waiting or running now, over every front */
	const char *tier;  /* "hot", "warm", "loading", "cold", "bad" */
};

struct metrics_gauges {
	const char *model_name;
	uint32_t waiting;
	uint32_t running;
	uint32_t max_sequences;
	uint32_t queue_length;
	size_t pool_pages_total;
	size_t pool_pages_free;
	uint64_t prompt_tokens; /* finished requests, every front */
	uint64_t completion_tokens;
	uint64_t requests_finished;
	uint64_t requests_failed;
	uint64_t requests_rejected;
	uint64_t judge_asked; /* the policy judge (manager_stats) */
	uint64_t judge_personal, judge_public, judge_unclear, judge_timeout;
	const struct metrics_adapter_gauge *adapters;
	size_t n_adapters;
	double now_unix; /* the value of vllm:lora_requests_info */
	/* adapter tiers (metrics-tiers.c); NULL: none rendered */
	const struct sched_stats *sched;
	uint64_t adapters_bad;
};

/* The whole page (malloc'd, NUL-terminated) in *ret. -ENOMEM. */
int metrics_render(struct metrics *m, const struct metrics_gauges *g, char **ret, size_t *ret_len);
/* The adapter tiers' series (metrics-tiers.c), from g->sched; nothing when it is NULL. */
void metrics_put_tiers(FILE *f, const struct metrics_gauges *g);
