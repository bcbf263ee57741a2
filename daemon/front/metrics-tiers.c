/* SPDX-License-Identifier: MIT */
/*
 * metrics-tiers.c: the adapter tiers on /metrics (Prometheus text): residency and budget per
 * tier, hits and misses, evictions, promotions, the time requests waited for an adapter that
 * was not hot (a histogram), bytes read per loader path, loads and failures, the hashing rate
 * and which path and hash ran.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "front/metrics.h"
#include "sched/sched.h"

static void counter2(FILE *f, const char *name, const char *help, const char *type,
		     const char *label, const char *v1, uint64_t n1, const char *v2, uint64_t n2)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s{%s=\"%s\"} %" PRIu64 "\n%s{%s=\"%s\"} %" PRIu64 "\n",
		name, help, name, type, name, label, v1, n1, name, label, v2, n2);
}

void metrics_put_tiers(FILE *f, const struct metrics_gauges *g)
{
	const struct sched_stats *s = g->sched;
	const struct tiers_stats *t;
	uint64_t cum = 0, read = 0, n_tier[5] = { 0 };
	static const char *const tiers[5] = { "hot", "warm", "loading", "cold", "bad" };

	if (!s)
		return;
	t = &s->tiers;
	counter2(f, "molly_adapter_tier_bytes", "Bytes held by adapters per tier.", "gauge", "tier",
		 "hot", s->hot_bytes, "warm", t->warm_bytes);
	counter2(f, "molly_adapter_tier_budget_bytes",
		 "Bytes each tier may hold (HotBytes=, WarmBytes=).", "gauge", "tier", "hot",
		 s->hot_budget_bytes, "warm", t->warm_budget);
	fprintf(f, "# HELP molly_adapter_warm_locked_bytes Warm bytes locked in memory (mlock).\n"
		   "# TYPE molly_adapter_warm_locked_bytes gauge\nmolly_adapter_warm_locked_bytes "
		   "%" PRIu64 "\n",
		t->warm_locked);
	for (size_t i = 0; i < g->n_adapters; i++)
		for (int k = 0; k < 5; k++)
			if (g->adapters[i].loaded && g->adapters[i].tier &&
			    strcmp(g->adapters[i].tier, tiers[k]) == 0)
				n_tier[k]++;
	fputs("# HELP molly_adapter_tier_adapters Loaded adapters by the tier they are in.\n"
	      "# TYPE molly_adapter_tier_adapters gauge\n",
	      f);
	for (int k = 0; k < 5; k++)
		fprintf(f, "molly_adapter_tier_adapters{tier=\"%s\"} %" PRIu64 "\n", tiers[k],
			n_tier[k]);
	counter2(f, "molly_adapter_tier_hits_total",
		 "Requests whose adapter was in the tier (hot: in the pool; warm: in memory).",
		 "counter", "tier", "hot", s->hot_hits, "warm", t->hits);
	counter2(f, "molly_adapter_tier_misses_total", "Requests whose adapter was not in the tier.",
		 "counter", "tier", "hot", s->hot_misses, "warm", t->misses);
	counter2(f, "molly_adapter_evictions_total", "Adapters evicted from a tier.", "counter",
		 "tier", "hot", s->adapter_evictions, "warm", t->evictions);
	fprintf(f, "# HELP molly_adapter_promotions_total Adapters made hot from their warm copy.\n"
		   "# TYPE molly_adapter_promotions_total counter\nmolly_adapter_promotions_total "
		   "%" PRIu64 "\n",
		s->promotions);
	fputs("# HELP molly_adapter_promotion_seconds How long requests waited for an adapter "
	      "that was not hot.\n# TYPE molly_adapter_promotion_seconds histogram\n",
	      f);
	for (int b = 0; b < SCHED_PROMOTE_BUCKETS; b++) {
		cum += s->promote_hist[b];
		if (b < SCHED_PROMOTE_BUCKETS - 1)
			fprintf(f, "molly_adapter_promotion_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
				sched_promote_bounds[b], cum);
		else
			fprintf(f, "molly_adapter_promotion_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n",
				cum);
	}
	fprintf(f, "molly_adapter_promotion_seconds_sum %.9f\nmolly_adapter_promotion_seconds_count "
		   "%" PRIu64 "\n",
		s->promote_seconds, cum);
	fputs("# HELP molly_adapter_load_bytes_total Bytes of adapter blobs read, per loader path "
	      "that really ran.\n# TYPE molly_adapter_load_bytes_total counter\n",
	      f);
	for (int p = 0; p < _BLOB_PATH_MAX; p++) {
		read += t->bytes_read[p];
		if (p != BLOB_PATH_MMAP)
			fprintf(f, "molly_adapter_load_bytes_total{path=\"%s\"} %" PRIu64 "\n",
				blob_path_name((enum blob_path) p), t->bytes_read[p]);
	}
	counter2(f, "molly_adapter_loads_total", "Blob loads, cold to warm, by outcome.", "counter",
		 "result", "ok", t->loads, "failed", t->load_failures);
	fprintf(f,
		"# HELP molly_adapter_load_seconds_total Time spent loading blobs.\n"
		"# TYPE molly_adapter_load_seconds_total counter\nmolly_adapter_load_seconds_total "
		"%.9f\n"
		"# HELP molly_adapter_hash_bytes_per_second SHA-256 rate while loading (bytes hashed "
		"over time spent hashing).\n"
		"# TYPE molly_adapter_hash_bytes_per_second gauge\n"
		"molly_adapter_hash_bytes_per_second{impl=\"%s\"} %.6g\n"
		"# HELP molly_adapter_loader_info The loader path that ran last and the eviction "
		"policy.\n# TYPE molly_adapter_loader_info gauge\n"
		"molly_adapter_loader_info{path=\"%s\",eviction=\"%s\"} 1\n"
		"# HELP molly_adapters_bad_total Blobs that failed their check or read since start.\n"
		"# TYPE molly_adapters_bad_total counter\nmolly_adapters_bad_total %" PRIu64 "\n",
		(double) t->load_ns * 1e-9, t->hash_impl ? t->hash_impl : "",
		t->hash_ns ? (double) read / ((double) t->hash_ns * 1e-9) : 0.0,
		blob_path_name(t->last_path), s->eviction ? s->eviction : "gdsf", g->adapters_bad);
}
