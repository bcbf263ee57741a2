/* SPDX-License-Identifier: MIT */
/*
 * molly-bench-route: the in-process routing decision's latency — capability classification
 * (router/classify.h), the policy's detectors and rules (policy/policy.h) and the router's
 * scoring and ranking (router/router.h: a plan over T0 = the base plus one adapter per
 * domain, and a T1, a T2 and a T3 target with quality seeds) — over prompts of 64 B to
 * 2 KiB, p50/p99 per size and over all.
 *
 *   molly-bench-route [--set EXEMPLARS.tsv] [--iters N]
 * The set defaults to tests/data/router/exemplars.tsv (run from the source tree).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-util.h"
#include "policy/policy.h"
#include "router/classify.h"
#include "router/router.h"



int main(int argc, char **argv)
{
	const char *set_path = "tests/data/router/exemplars.tsv";
	static const size_t sizes[] = { 64, 256, 1024, 2048 };
	long iters = 20000;
	struct errmsg e = { 0 };
	_cleanup_(classify_set_freep) struct classify_set *s = NULL;
	_cleanup_(classify_model_freep) struct classify_model *m = NULL;
	_cleanup_(policy_freep) struct policy *pol = NULL;
	_cleanup_free_ char *corpus = NULL;
	size_t corpus_len = 0, cap = 0;
	char line[4096];
	FILE *f;
	int c, r;

	static const struct option opts[] = {
		{ "set", required_argument, NULL, 's' },
		{ "iters", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	while ((c = getopt_long(argc, argv, "s:n:h", opts, NULL)) >= 0) {
		switch (c) {
		case 's':
			set_path = optarg;
			break;
		case 'n':
			iters = strtol(optarg, NULL, 10);
			if (iters < 100 || iters > 100000000) {
				fprintf(stderr, "--iters %s: give 100..100000000\n", optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr, "Usage: molly-bench-route [--set EXEMPLARS.tsv] "
					"[--iters N]\n");
			return c == 'h' ? 0 : 2;
		}
	}

	f = fopen(set_path, "re");
	if (!f) {
		fprintf(stderr, "molly-bench-route: %s: %m (pass --set FILE)\n", set_path);
		return 1;
	}
	if (classify_set_new(&s) < 0)
		return 1;
	while (fgets(line, sizeof(line), f)) {
		char *tab = strchr(line, '\t');
		if (line[0] == '#' || !tab)
			continue;
		*tab++ = 0;
		tab[strcspn(tab, "\n")] = 0;
		r = classify_set_add(s, line, tab, strlen(tab), &e);
		if (r < 0) {
			fprintf(stderr, "molly-bench-route: %s: %s\n", set_path, e.text);
			fclose(f);
			return 1;
		}
		/* the prompts: the exemplars joined, cut to each size below */
		size_t l = strlen(tab);
		if (corpus_len + l + 2 > cap) {
			cap = (corpus_len + l + 2) * 2;
			char *n = realloc(corpus, cap);
			if (!n) {
				fclose(f);
				return 1;
			}
			corpus = n;
		}
		memcpy(corpus + corpus_len, tab, l);
		corpus_len += l;
		corpus[corpus_len++] = ' ';
	}
	fclose(f);
	if (corpus_len < 2048) {
		fprintf(stderr, "molly-bench-route: %s: under 2 KiB of prompts\n", set_path);
		return 1;
	}
	uint64_t t0 = now_ns();
	r = classify_build(s, getenv("BITS") ? &(struct classify_options){ .feature_bits = (uint32_t) atoi(getenv("BITS")) } : NULL, &m, &e);
	if (r < 0) {
		fprintf(stderr, "molly-bench-route: %s\n", e.text);
		return 1;
	}
	printf("classifier: %zu domains, %zu examples, built in %.1f ms\n", classify_n_domains(m),
	       classify_set_size(s), (double) (now_ns() - t0) / 1e6);
	if (policy_new_defaults(&pol) < 0)
		return 1;

	/* The candidates: T0 base + one adapter per domain (seeded 0.85 in it), T1..T3. */
	size_t nd = classify_n_domains(m), nt = 0;
	struct router_target *tg = calloc(nd + 4, sizeof(*tg));
	struct router_quality *aq = calloc(nd + 1, sizeof(*aq));
	char (*tn)[80] = calloc(nd + 1, sizeof(*tn));
	const char **dn = calloc(nd + 1, sizeof(char *));
	static const struct router_quality q1[] = { { "general", 0.6 } }, q2[] = { { "general", 0.7 } },
					   q3[] = { { "general", 0.9 } };
	_cleanup_(router_freep) struct router *rt = NULL;
	struct router_plan *plan = calloc(1, sizeof(*plan));
	if (!tg || !aq || !tn || !dn || !plan)
		return 1;
	tg[nt++] = (struct router_target){ .name = "local:base", .tier = 0 };
	for (size_t i = 0; i < nd; i++) {
		dn[i] = classify_domain_name(m, i);
		snprintf(tn[i], sizeof(tn[i]), "local:base:%s", dn[i]);
		aq[i] = (struct router_quality){ dn[i], 0.85 };
		tg[nt++] = (struct router_target){ .name = tn[i], .tier = 0, .adapter = dn[i],
						   .domains = &dn[i], .n_domains = 1,
						   .quality = &aq[i], .n_quality = 1 };
	}
	tg[nt++] = (struct router_target){ .name = "lan", .tier = 1, .quality = q1, .n_quality = 1 };
	tg[nt++] = (struct router_target){ .name = "mine", .tier = 2, .user_controlled = true,
					   .quality = q2, .n_quality = 1, .cost_out = 0.5 };
	tg[nt++] = (struct router_target){ .name = "api", .tier = 3, .quality = q3, .n_quality = 1,
					   .cost_in = 3, .cost_out = 15 };
	struct router_params rp = { .max_fallbacks = 2, .cost_weight = 1, .latency_weight = 0.05,
				    .domains = dn, .n_domains = nd };
	if (router_new(tg, nt, &rp, &rt, &e) < 0) {
		fprintf(stderr, "molly-bench-route: %s\n", e.text);
		return 1;
	}
	printf("router: %zu candidates (base, %zu adapters, T1, T2, T3)\n", nt, nd);

	uint64_t *all = malloc((size_t) iters * ELEMENTSOF(sizes) * sizeof(uint64_t));
	uint64_t *one = malloc((size_t) iters * sizeof(uint64_t));
	uint64_t *cls = malloc((size_t) iters * sizeof(uint64_t));
	if (!all || !one || !cls)
		return 1;
	size_t n_all = 0;
	float sink = 0; /* consumed below, so the classification is not optimised away */
	for (size_t si = 0; si < ELEMENTSOF(sizes); si++) {
		size_t len = sizes[si];
		for (long it = 0; it < iters; it++) {
			/* a different window of the corpus each time, so caches see variety */
			size_t off = (size_t) (it * 131) % (corpus_len - len + 1);
			const char *text = corpus + off;
			struct classify_result cr;
			struct policy_decision d;
			struct policy_request req = { .text = text, .len = len,
						      .declared = POLICY_CLASS_PUBLIC };
			uint64_t a = now_ns();
			classify_run(m, text, len, &cr);
			uint64_t mid = now_ns();
			r = policy_evaluate(pol, &req, &d);
			if (r >= 0) {
				struct router_query q = { .posterior_idx = cr.posterior,
							  .prompt_tokens = (uint32_t) len / 4,
							  .max_tokens = 256 };
				if (router_plan_new(rt, &d, &q, plan) >= 0)
					sink += (float) plan->c[0].score;
				policy_decision_done(&d);
			}
			uint64_t b = now_ns();
			sink += cr.confidence;
			one[it] = b - a;
			cls[it] = mid - a;
			all[n_all++] = b - a;
		}
		qsort(one, (size_t) iters, sizeof(*one), cmp_u64);
		qsort(cls, (size_t) iters, sizeof(*cls), cmp_u64);
		double s50 = (double) one[iters / 2] / 1e3, s99 = (double) one[iters * 99 / 100] / 1e3;
		/* the targets hold for each size alone, not only over the mix */
		printf("%5zu B: p50 %6.2f us  p99 %6.2f us  %s  (classification alone: p50 %.2f us, "
		       "p99 %.2f us; %ld runs; classification + detectors + policy + plan)\n",
		       len, s50, s99, s50 <= 20 && s99 <= 100 ? "ok  " : "OVER",
		       (double) cls[iters / 2] / 1e3, (double) cls[iters * 99 / 100] / 1e3, iters);
	}
	qsort(all, n_all, sizeof(*all), cmp_u64);
	double p50 = (double) all[n_all / 2] / 1e3, p99 = (double) all[n_all * 99 / 100] / 1e3;
	printf("all sizes: p50 %.2f us (target <= 20), p99 %.2f us (target <= 100): %s\n", p50,
	       p99, p50 <= 20 && p99 <= 100 ? "within target" : "OVER TARGET");
	free(all);
	free(one);
	free(cls);
	free(plan);
	free(tg);
	free(aq);
	free(tn);
	free(dn);
	if (sink < 0)
		fprintf(stderr, "(%g)\n", (double) sink);
	return 0;
}
