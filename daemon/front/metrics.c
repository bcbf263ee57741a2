/* SPDX-License-Identifier: MIT */
/*
 * metrics.c: counters and histograms of the HTTP front, rendered in Prometheus text format
 * (see metrics.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front/metrics.h"

/* Latency buckets in seconds: fine at the low end, where a small model on loopback lives. */
static const double latency_buckets[] = {
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
};
#define N_BUCKETS ELEMENTSOF(latency_buckets)
#define N_STATUS  600 /* HTTP statuses 0..599 are counted each; others land on 599 */

struct histogram {
	uint64_t buckets[N_BUCKETS]; /* non-cumulative; the render sums them */
	uint64_t count;
	uint64_t sum_ns;
};

struct adapter_activity {
	char *name; /* owned */
	uint32_t waiting;
	uint32_t running;
};

struct metrics {
	uint64_t requests[METRICS_EP_COUNT_][N_STATUS];
	struct histogram duration[METRICS_EP_COUNT_];
	struct histogram ttft;
	uint64_t prompt_tokens;
	uint64_t completion_tokens;
	uint64_t client_cancels;

	pthread_mutex_t lock; /* protects adapters */
	struct adapter_activity *adapters;
	size_t n_adapters;
	size_t cap_adapters;
};

static const char *const endpoint_paths[METRICS_EP_COUNT_] = {
	[METRICS_EP_MODELS] = "/v1/models",
	[METRICS_EP_COMPLETIONS] = "/v1/completions",
	[METRICS_EP_CHAT_COMPLETIONS] = "/v1/chat/completions",
	[METRICS_EP_LOAD_LORA] = "/v1/load_lora_adapter",
	[METRICS_EP_UNLOAD_LORA] = "/v1/unload_lora_adapter",
	[METRICS_EP_METRICS] = "/metrics",
	[METRICS_EP_HEALTH] = "/health",
	[METRICS_EP_OTHER] = "other",
};

const char *metrics_endpoint_path(enum metrics_endpoint ep)
{
	return ep < METRICS_EP_COUNT_ ? endpoint_paths[ep] : "other";
}

int metrics_new(struct metrics **ret)
{
	struct metrics *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->lock, NULL);
	*ret = m;
	return 0;
}

struct metrics *metrics_free(struct metrics *m)
{
	if (!m)
		return NULL;
	for (size_t i = 0; i < m->n_adapters; i++)
		free(m->adapters[i].name);
	free(m->adapters);
	pthread_mutex_destroy(&m->lock);
	free(m);
	return NULL;
}

static void inc(uint64_t *p, uint64_t v)
{
	__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void observe(struct histogram *h, uint64_t ns)
{
	double s = (double) ns / 1e9;
	size_t b = 0;

	while (b < N_BUCKETS && s > latency_buckets[b])
		b++;
	if (b < N_BUCKETS)
		inc(&h->buckets[b], 1);
	inc(&h->sum_ns, ns);
	inc(&h->count, 1); /* +Inf bucket = count */
}

void metrics_request_done(struct metrics *m, enum metrics_endpoint ep, int status,
			  uint64_t duration_ns)
{
	if (!m)
		return;
	if (ep >= METRICS_EP_COUNT_)
		ep = METRICS_EP_OTHER;
	if (status < 0 || status >= N_STATUS)
		status = N_STATUS - 1;
	inc(&m->requests[ep][status], 1);
	observe(&m->duration[ep], duration_ns);
}

void metrics_client_cancelled(struct metrics *m)
{
	if (m)
		inc(&m->client_cancels, 1);
}

void metrics_first_token(struct metrics *m, uint64_t ttft_ns)
{
	if (m)
		observe(&m->ttft, ttft_ns);
}

void metrics_tokens(struct metrics *m, uint32_t prompt_tokens, uint32_t completion_tokens)
{
	if (!m)
		return;
	inc(&m->prompt_tokens, prompt_tokens);
	inc(&m->completion_tokens, completion_tokens);
}

/* Under m->lock. NULL when absent and !create, or on OOM. */
static struct adapter_activity *find_adapter(struct metrics *m, const char *name, bool create)
{
	struct adapter_activity *a;

	for (size_t i = 0; i < m->n_adapters; i++)
		if (strcmp(m->adapters[i].name, name) == 0)
			return &m->adapters[i];
	if (!create)
		return NULL;
	if (m->n_adapters == m->cap_adapters) {
		size_t cap = m->cap_adapters ? m->cap_adapters * 2 : 8;
		struct adapter_activity *n = realloc(m->adapters, cap * sizeof(*n));

		if (!n)
			return NULL;
		m->adapters = n;
		m->cap_adapters = cap;
	}
	a = &m->adapters[m->n_adapters];
	*a = (struct adapter_activity){ .name = strdup(name) };
	if (!a->name)
		return NULL;
	m->n_adapters++;
	return a;
}

/* Under m->lock: forget an entry that counts nothing, so the table holds only adapters in use
 * (its size is bounded by the requests in flight, not by every name ever seen). */
static void drop_if_idle(struct metrics *m, struct adapter_activity *a)
{
	if (a->waiting || a->running)
		return;
	free(a->name);
	*a = m->adapters[--m->n_adapters];
}

void metrics_adapter_queued(struct metrics *m, const char *name)
{
	struct adapter_activity *a;

	if (!m || !name)
		return;
	pthread_mutex_lock(&m->lock);
	a = find_adapter(m, name, true);
	if (a)
		a->waiting++;
	pthread_mutex_unlock(&m->lock);
}

void metrics_adapter_started(struct metrics *m, const char *name)
{
	struct adapter_activity *a;

	if (!m || !name)
		return;
	pthread_mutex_lock(&m->lock);
	a = find_adapter(m, name, false);
	if (a && a->waiting) {
		a->waiting--;
		a->running++;
	}
	pthread_mutex_unlock(&m->lock);
}

void metrics_adapter_ended(struct metrics *m, const char *name, bool was_running)
{
	struct adapter_activity *a;

	if (!m || !name)
		return;
	pthread_mutex_lock(&m->lock);
	a = find_adapter(m, name, false);
	if (a) {
		if (was_running && a->running)
			a->running--;
		else if (!was_running && a->waiting)
			a->waiting--;
		drop_if_idle(m, a);
	}
	pthread_mutex_unlock(&m->lock);
}

/* A label value with \, " and newline escaped, as the text format wants. */
static void put_label(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void put_histogram(FILE *f, const char *name, const char *label_key, const char *label_value,
			  const struct histogram *h)
{
	uint64_t cum = 0, count = get(&h->count);

	for (size_t b = 0; b < N_BUCKETS; b++) {
		cum += get(&h->buckets[b]);
		fprintf(f, "%s_bucket{", name);
		if (label_key) {
			fprintf(f, "%s=\"", label_key);
			put_label(f, label_value);
			fputs("\",", f);
		}
		fprintf(f, "le=\"%g\"} %" PRIu64 "\n", latency_buckets[b], cum);
	}
	/* count is read last, so +Inf >= every bucket even while requests finish meanwhile */
	count = MAX(count, cum);
	fprintf(f, "%s_bucket{", name);
	if (label_key) {
		fprintf(f, "%s=\"", label_key);
		put_label(f, label_value);
		fputs("\",", f);
	}
	fprintf(f, "le=\"+Inf\"} %" PRIu64 "\n", count);
	if (label_key) {
		fprintf(f, "%s_sum{%s=\"", name, label_key);
		put_label(f, label_value);
		fprintf(f, "\"} %.9f\n%s_count{%s=\"", (double) get(&h->sum_ns) / 1e9, name,
			label_key);
		put_label(f, label_value);
		fprintf(f, "\"} %" PRIu64 "\n", count);
	} else {
		fprintf(f, "%s_sum %.9f\n%s_count %" PRIu64 "\n", name,
			(double) get(&h->sum_ns) / 1e9, name, count);
	}
}

static void put_gauge_model(FILE *f, const char *name, const char *help, const char *type,
			    const char *model, double v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=\"", name, help, name, type, name);
	put_label(f, model);
	fprintf(f, "\"} %.17g\n", v);
}

/* Comma-separated names of the adapters the front sees waiting (want_running false) or
 * running, plus (for running) adapters the manager counts active beyond the front's own. */
static void put_lora_list(FILE *f, struct metrics *m, const struct metrics_gauges *g,
			  bool want_running)
{
	bool first = true;

	for (size_t i = 0; i < m->n_adapters; i++) {
		const struct adapter_activity *a = &m->adapters[i];

		if (want_running ? a->running == 0 : a->waiting == 0)
			continue;
		if (!first)
			fputc(',', f);
		put_label(f, a->name);
		first = false;
	}
	if (!want_running)
		return;
	/* requests of other fronts (D-Bus): the manager only says "active", call them running */
	for (size_t i = 0; i < g->n_adapters; i++) {
		const struct metrics_adapter_gauge *ga = &g->adapters[i];
		const struct adapter_activity *a = NULL;

		for (size_t k = 0; k < m->n_adapters; k++)
			if (strcmp(m->adapters[k].name, ga->name) == 0)
				a = &m->adapters[k];
		if (ga->active == 0 || (a && (a->running || ga->active <= a->waiting)))
			continue;
		if (!first)
			fputc(',', f);
		put_label(f, ga->name);
		first = false;
	}
}

int metrics_render(struct metrics *m, const struct metrics_gauges *g, char **ret, size_t *ret_len)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	const char *model = g->model_name ? g->model_name : "";
	double kv_usage = 0;

	f = open_memstream(&buf, &len);
	if (!f)
		return -ENOMEM;

	fputs("# HELP molly_http_requests_total HTTP requests by endpoint and status.\n"
	      "# TYPE molly_http_requests_total counter\n",
	      f);
	for (int ep = 0; ep < METRICS_EP_COUNT_; ep++)
		for (int st = 0; st < N_STATUS; st++) {
			uint64_t v = get(&m->requests[ep][st]);

			if (v)
				fprintf(f,
					"molly_http_requests_total{endpoint=\"%s\",status=\"%d\"} "
					"%" PRIu64 "\n",
					endpoint_paths[ep], st, v);
		}

	fputs("# HELP molly_http_request_duration_seconds Time from a request's arrival to its "
	      "last byte.\n# TYPE molly_http_request_duration_seconds histogram\n",
	      f);
	for (int ep = 0; ep < METRICS_EP_COUNT_; ep++)
		if (get(&m->duration[ep].count))
			put_histogram(f, "molly_http_request_duration_seconds", "endpoint",
				      endpoint_paths[ep], &m->duration[ep]);

	fputs("# HELP molly_http_time_to_first_token_seconds Time from a generation request's "
	      "arrival to its first text.\n"
	      "# TYPE molly_http_time_to_first_token_seconds histogram\n",
	      f);
	put_histogram(f, "molly_http_time_to_first_token_seconds", NULL, NULL, &m->ttft);

	fprintf(f,
		"# HELP molly_http_prompt_tokens_total Prompt tokens of finished HTTP requests.\n"
		"# TYPE molly_http_prompt_tokens_total counter\n"
		"molly_http_prompt_tokens_total %" PRIu64 "\n"
		"# HELP molly_http_generation_tokens_total Generated tokens of finished HTTP "
		"requests.\n"
		"# TYPE molly_http_generation_tokens_total counter\n"
		"molly_http_generation_tokens_total %" PRIu64 "\n"
		"# HELP molly_http_client_disconnects_total Generations cancelled because their "
		"client went away.\n"
		"# TYPE molly_http_client_disconnects_total counter\n"
		"molly_http_client_disconnects_total %" PRIu64 "\n",
		get(&m->prompt_tokens), get(&m->completion_tokens), get(&m->client_cancels));

	fprintf(
	    f,
	    "# HELP molly_queue_depth Requests waiting for a sequence slot.\n"
	    "# TYPE molly_queue_depth gauge\nmolly_queue_depth %" PRIu32 "\n"
	    "# HELP molly_queue_length Requests that may wait before new ones get 429.\n"
	    "# TYPE molly_queue_length gauge\nmolly_queue_length %" PRIu32 "\n"
	    "# HELP molly_running_sequences Sequences being generated.\n"
	    "# TYPE molly_running_sequences gauge\nmolly_running_sequences %" PRIu32 "\n"
	    "# HELP molly_max_sequences Sequences that may run at once.\n"
	    "# TYPE molly_max_sequences gauge\nmolly_max_sequences %" PRIu32 "\n"
	    "# HELP molly_requests_finished_total Requests that finished (every front).\n"
	    "# TYPE molly_requests_finished_total counter\n"
	    "molly_requests_finished_total %" PRIu64 "\n"
	    "# HELP molly_requests_failed_total Requests that ended in an error (every front).\n"
	    "# TYPE molly_requests_failed_total counter\n"
	    "molly_requests_failed_total %" PRIu64 "\n"
	    "# HELP molly_requests_rejected_total Requests refused at submission (every front).\n"
	    "# TYPE molly_requests_rejected_total counter\n"
	    "molly_requests_rejected_total %" PRIu64 "\n"
	    "# HELP molly_pool_pages Pages of the KV/adapter pool.\n"
	    "# TYPE molly_pool_pages gauge\nmolly_pool_pages{state=\"total\"} %zu\n"
	    "molly_pool_pages{state=\"free\"} %zu\n",
	    g->waiting, g->queue_length, g->running, g->max_sequences, g->requests_finished,
	    g->requests_failed, g->requests_rejected, g->pool_pages_total, g->pool_pages_free);
	fprintf(f,
		"# HELP molly_policy_judge_asked_total Requests the policy judge asked the local "
		"model about ([Policy] Judge=).\n"
		"# TYPE molly_policy_judge_asked_total counter\n"
		"molly_policy_judge_asked_total %" PRIu64 "\n"
		"# HELP molly_policy_judge_verdicts_total The policy judge's verdicts.\n"
		"# TYPE molly_policy_judge_verdicts_total counter\n"
		"molly_policy_judge_verdicts_total{verdict=\"personal\"} %" PRIu64 "\n"
		"molly_policy_judge_verdicts_total{verdict=\"public\"} %" PRIu64 "\n"
		"molly_policy_judge_verdicts_total{verdict=\"unclear\"} %" PRIu64 "\n"
		"molly_policy_judge_verdicts_total{verdict=\"timeout\"} %" PRIu64 "\n",
		g->judge_asked, g->judge_personal, g->judge_public, g->judge_unclear,
		g->judge_timeout);

	if (g->n_adapters) {
		fputs("# HELP molly_adapter_requests_total Requests that used an adapter since it "
		      "was loaded (every front).\n"
		      "# TYPE molly_adapter_requests_total counter\n",
		      f);
		for (size_t i = 0; i < g->n_adapters; i++) {
			if (!g->adapters[i].loaded)
				continue;
			fputs("molly_adapter_requests_total{adapter=\"", f);
			put_label(f, g->adapters[i].name);
			fprintf(f, "\"} %" PRIu64 "\n", g->adapters[i].requests);
		}
		fputs("# HELP molly_adapter_active_requests Requests using an adapter now.\n"
		      "# TYPE molly_adapter_active_requests gauge\n",
		      f);
		for (size_t i = 0; i < g->n_adapters; i++) {
			if (!g->adapters[i].loaded)
				continue;
			fputs("molly_adapter_active_requests{adapter=\"", f);
			put_label(f, g->adapters[i].name);
			fprintf(f, "\"} %" PRIu32 "\n", g->adapters[i].active);
		}
		fputs(
		    "# HELP molly_adapter_resident Whether an adapter's weights are in the pool.\n"
		    "# TYPE molly_adapter_resident gauge\n",
		    f);
		for (size_t i = 0; i < g->n_adapters; i++) {
			if (!g->adapters[i].loaded)
				continue;
			fputs("molly_adapter_resident{adapter=\"", f);
			put_label(f, g->adapters[i].name);
			fprintf(f, "\"} %d\n", g->adapters[i].resident ? 1 : 0);
		}
	}
	metrics_put_tiers(f, g);

	/* vLLM's names, for gateways that route by them */
	if (g->pool_pages_total)
		kv_usage = 1.0 - (double) g->pool_pages_free / (double) g->pool_pages_total;
	put_gauge_model(f, "vllm:num_requests_running",
			"Number of requests in model execution "
			"batches.",
			"gauge", model, g->running);
	put_gauge_model(f, "vllm:num_requests_waiting",
			"Number of requests waiting to be "
			"processed.",
			"gauge", model, g->waiting);
	put_gauge_model(f, "vllm:kv_cache_usage_perc",
			"KV-cache usage. 1 means 100 percent "
			"usage.",
			"gauge", model, kv_usage);
	put_gauge_model(f, "vllm:gpu_cache_usage_perc",
			"GPU KV-cache usage. 1 means 100 percent "
			"usage.",
			"gauge", model, kv_usage);
	put_gauge_model(f, "vllm:prompt_tokens_total", "Number of prefill tokens processed.",
			"counter", model, (double) g->prompt_tokens);
	put_gauge_model(f, "vllm:generation_tokens_total",
			"Number of generation tokens "
			"processed.",
			"counter", model, (double) g->completion_tokens);

	fprintf(f,
		"# HELP vllm:lora_requests_info Running stats on lora requests.\n"
		"# TYPE vllm:lora_requests_info gauge\n"
		"vllm:lora_requests_info{max_lora=\"%" PRIu32 "\",waiting_lora_adapters=\"",
		g->max_sequences);
	pthread_mutex_lock(&m->lock);
	put_lora_list(f, m, g, false);
	fputs("\",running_lora_adapters=\"", f);
	put_lora_list(f, m, g, true);
	pthread_mutex_unlock(&m->lock);
	fprintf(f, "\"} %.17g\n", g->now_unix);

	if (fclose(f) != 0 || !buf) {
		free(buf);
		return -ENOMEM;
	}
	*ret = buf;
	if (ret_len)
		*ret_len = len;
	return 0;
}
