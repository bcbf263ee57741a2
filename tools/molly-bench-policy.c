/* SPDX-License-Identifier: MIT */
/*
 * molly-bench-policy: what `molly explain` does per request (policy_evaluate: the detectors,
 * the user rules, the special-category layers, character offsets), timed on prompts of up to
 * 2 KiB. Prints p50/p99 in microseconds:
 *
 *  1. the mix of 64 prompts (64 B .. 2 KiB) with the built-in policy alone and with 10 user
 *     regex rules (issue 6: built-ins p50 <= 20 us, p99 <= 100 us; + 10 rules p50 <= 50 us);
 *  2. per size (64 B, 256 B, 1 KiB, 2 KiB), three measurements alternated in the same run
 *     (their order rotates every iteration, so none always runs with warmer caches):
 *       detectors  detect_scan() alone: the built-in detectors of before issue 14;
 *       policy     the whole policy_evaluate() (every layer the build has);
 *       route      the routing decision with it: the domain classifier (router/classify.h),
 *                  policy_evaluate() and the router's plan (router/router.h) over T0 (the
 *                  base and one adapter per domain), T1, T2 and T3.
 *     Targets (issue 14), at 2 KiB: policy p50 <= 50 us, route p50 <= 60 us.
 *
 *   molly-bench-policy [--iters N] [--set EXEMPLARS.tsv] [--no-route] [N]
 * N: iterations per measurement (default 20000). The router's classifier is built from
 * --set (default tests/data/router/exemplars.tsv: run from the source tree); without it, or
 * with --no-route, the route column is left out.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-util.h"
#include "policy/detect.h"
#include "policy/policy.h"
#include "router/classify.h"
#include "router/router.h"

static const char *const parts[] = {
	"Please summarise the attached meeting notes and list the action items. ",
	"Mario can be reached at mario.rossi@example.it or +39 347 123 4567. ",
	"The invoice goes to IBAN IT60 X054 2811 1010 0000 0123 456 by Friday. ",
	"Version 2.14.3 was released on 2024-03-12 after build 4521. ",
	"Calle de Alcal\xc3\xa1 45, 28014 Madrid is the new office; DNI 12345678Z. ",
	"Deploy with token ghp_abcdefghijklmnopqrstuvwxyz0123456789 tonight. ",
	"Il cliente chiede un preventivo per 120 unit\xc3\xa0 entro marzo, grazie mille. ",
	"Server 192.168.10.42 rejects connections from 10.0.0.0/8 since commit 9fceb02. ",
};
/* For the sizes' table: the parts above and a few special-category sentences (personal and
 * general), so the special-category layers have something to read. */
static const char *const special_parts[] = {
	"My therapist says my depression got better since I started sertraline in May. ",
	"Vorrei sapere se il sindacato pu\xc3\xb2 aiutarmi: mi hanno licenziato dopo la malattia. ",
	"How does the immune system respond to a vaccine against measles? ",
	"Mi hermano vot\xc3\xb3 a otro partido y ahora no nos hablamos en casa. ",
};


static int run(const struct policy *p, const char *label, char **prompts, size_t n_prompts,
	       unsigned iters)
{
	uint64_t *t = malloc(iters * sizeof(*t));
	size_t bytes = 0;

	if (!t)
		return -1;
	for (unsigned i = 0; i < iters; i++) {
		const char *s = prompts[i % n_prompts];
		struct policy_decision d;
		uint64_t t0 = now_ns();
		if (policy_evaluate(p, &(struct policy_request){ .text = s, .len = strlen(s) },
				    &d) < 0) {
			free(t);
			return -1;
		}
		t[i] = now_ns() - t0;
		policy_decision_done(&d);
		bytes += strlen(s);
	}
	qsort(t, iters, sizeof(*t), cmp_u64);
	printf("%-24s p50 %7.2f us   p99 %7.2f us   (%u prompts, mean %zu bytes)\n", label,
	       (double) t[iters / 2] / 1000.0, (double) t[(size_t) iters * 99 / 100] / 1000.0,
	       iters, bytes / iters);
	free(t);
	return 0;
}

/* The routing decision's parts (as molly-bench-route builds them). */
struct route {
	struct classify_set *set;
	struct classify_model *model;
	struct router *router;
	struct router_target *tg;
	struct router_quality *aq;
	char (*tn)[80];
	const char **dn;
	struct router_plan *plan;
};

static void route_done(struct route *r)
{
	router_free(r->router);
	classify_model_free(r->model);
	classify_set_free(r->set);
	free(r->tg);
	free(r->aq);
	free(r->tn);
	free(r->dn);
	free(r->plan);
	*r = (struct route){ 0 };
}

static int route_init(struct route *rt, const char *path)
{
	static const struct router_quality q1[] = { { "general", 0.6 } },
					   q2[] = { { "general", 0.7 } },
					   q3[] = { { "general", 0.9 } };
	struct errmsg e = { { 0 } };
	char line[4096];
	size_t nd, nt = 0;
	FILE *f = fopen(path, "re");

	if (!f) {
		fprintf(stderr, "molly-bench-policy: %s: %m (--set FILE, or --no-route)\n", path);
		return -1;
	}
	if (classify_set_new(&rt->set) < 0) {
		fclose(f);
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *tab = strchr(line, '\t');
		if (line[0] == '#' || !tab)
			continue;
		*tab++ = 0;
		tab[strcspn(tab, "\n")] = 0;
		if (classify_set_add(rt->set, line, tab, strlen(tab), &e) < 0) {
			fprintf(stderr, "molly-bench-policy: %s: %s\n", path, e.text);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	if (classify_build(rt->set, NULL, &rt->model, &e) < 0) {
		fprintf(stderr, "molly-bench-policy: %s\n", e.text);
		return -1;
	}
	nd = classify_n_domains(rt->model);
	rt->tg = calloc(nd + 4, sizeof(*rt->tg));
	rt->aq = calloc(nd + 1, sizeof(*rt->aq));
	rt->tn = calloc(nd + 1, sizeof(*rt->tn));
	rt->dn = calloc(nd + 1, sizeof(char *));
	rt->plan = calloc(1, sizeof(*rt->plan));
	if (!rt->tg || !rt->aq || !rt->tn || !rt->dn || !rt->plan)
		return -1;
	rt->tg[nt++] = (struct router_target){ .name = "local:base", .tier = 0 };
	for (size_t i = 0; i < nd; i++) {
		rt->dn[i] = classify_domain_name(rt->model, i);
		snprintf(rt->tn[i], sizeof(rt->tn[i]), "local:base:%s", rt->dn[i]);
		rt->aq[i] = (struct router_quality){ rt->dn[i], 0.85 };
		rt->tg[nt++] = (struct router_target){ .name = rt->tn[i], .tier = 0,
						       .adapter = rt->dn[i], .domains = &rt->dn[i],
						       .n_domains = 1, .quality = &rt->aq[i],
						       .n_quality = 1 };
	}
	rt->tg[nt++] = (struct router_target){ .name = "lan", .tier = 1, .quality = q1,
					       .n_quality = 1 };
	rt->tg[nt++] = (struct router_target){ .name = "mine", .tier = 2, .user_controlled = true,
					       .quality = q2, .n_quality = 1, .cost_out = 0.5 };
	rt->tg[nt++] = (struct router_target){ .name = "api", .tier = 3, .quality = q3,
					       .n_quality = 1, .cost_in = 3, .cost_out = 15 };
	struct router_params rp = { .max_fallbacks = 2, .cost_weight = 1, .latency_weight = 0.05,
				    .domains = rt->dn, .n_domains = nd };
	if (router_new(rt->tg, nt, &rp, &rt->router, &e) < 0) {
		fprintf(stderr, "molly-bench-policy: %s\n", e.text);
		return -1;
	}
	return 0;
}

enum { M_DETECT, M_POLICY, M_ROUTE, M_COUNT_ };

static double pct(uint64_t *t, size_t n, unsigned p)
{
	return (double) t[n * p / 100 < n ? n * p / 100 : n - 1] / 1000.0;
}

/* One size: the three measurements alternated over windows of the corpus. */
static int run_size(const struct policy *p, struct route *rt, const char *corpus,
		    size_t corpus_len, size_t len, unsigned iters, double *ret_p50)
{
	uint64_t *t[M_COUNT_] = { NULL };
	struct detect_matches dm = { 0 };
	unsigned n_m = rt ? M_COUNT_ : M_ROUTE;
	float sink = 0;
	int r = -1;

	for (unsigned k = 0; k < n_m; k++)
		if (!(t[k] = malloc(iters * sizeof(uint64_t))))
			goto out;
	for (unsigned it = 0; it < iters; it++) {
		size_t off = (size_t) it * 131 % (corpus_len - len + 1);
		const char *text = corpus + off;
		for (unsigned j = 0; j < n_m; j++) {
			unsigned k = (it + j) % n_m; /* the order rotates */
			struct policy_request req = { .text = text, .len = len };
			struct policy_decision d;
			struct classify_result cr;
			uint64_t a = now_ns();
			switch (k) {
			case M_DETECT:
				dm.n = 0;
				if (detect_scan(text, len, &dm) < 0)
					goto out;
				sink += (float) dm.n;
				break;
			case M_POLICY:
				if (policy_evaluate(p, &req, &d) < 0)
					goto out;
				sink += (float) d.n_findings;
				policy_decision_done(&d);
				break;
			case M_ROUTE:
				classify_run(rt->model, text, len, &cr);
				if (policy_evaluate(p, &req, &d) < 0)
					goto out;
				{
					struct router_query q = {
						.posterior_idx = cr.posterior,
						.prompt_tokens = (uint32_t) len / 4,
						.max_tokens = 256,
					};
					if (router_plan_new(rt->router, &d, &q, rt->plan) >= 0)
						sink += (float) rt->plan->c[0].score;
				}
				policy_decision_done(&d);
				sink += cr.confidence;
				break;
			}
			t[k][it] = now_ns() - a;
		}
	}
	for (unsigned k = 0; k < n_m; k++) {
		qsort(t[k], iters, sizeof(uint64_t), cmp_u64);
		ret_p50[k] = pct(t[k], iters, 50);
	}
	printf("%5zu B  detectors p50 %6.2f p99 %6.2f | policy p50 %6.2f p99 %6.2f", len,
	       pct(t[M_DETECT], iters, 50), pct(t[M_DETECT], iters, 99),
	       pct(t[M_POLICY], iters, 50), pct(t[M_POLICY], iters, 99));
	if (rt)
		printf(" | route p50 %6.2f p99 %6.2f", pct(t[M_ROUTE], iters, 50),
		       pct(t[M_ROUTE], iters, 99));
	printf("  (us, %u runs each)\n", iters);
	if (sink < 0)
		fprintf(stderr, "(%g)\n", (double) sink);
	r = 0;
out:
	detect_matches_done(&dm);
	for (unsigned k = 0; k < M_COUNT_; k++)
		free(t[k]);
	return r;
}

int main(int argc, char **argv)
{
	static const char *const rules[10] = {
		"regex:ACME-[0-9]{4,8}",	"regex:(?i)project\\s+nightingale",
		"regex:\\bEMP[0-9]{6}\\b",	"regex:(?i)confidential|riservato|confidencial",
		"regex:\\b[A-Z]{3}-[0-9]{3}-[A-Z]{2}\\b", "regex:(?i)salary\\s+of\\s+\\w+",
		"regex:\\bPX-[a-f0-9]{8}\\b",	"regex:(?i)codename\\s*:\\s*\\w+",
		"regex:\\b(?:internal|interno)\\.example\\.com\\b", "regex:\\$[0-9]{1,3}(?:,[0-9]{3})+",
	};
	static const size_t sizes[] = { 64, 256, 1024, 2048 };
	static const struct option opts[] = {
		{ "iters", required_argument, NULL, 'n' },
		{ "set", required_argument, NULL, 's' },
		{ "no-route", no_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	const char *set_path = "tests/data/router/exemplars.tsv";
	unsigned iters = 20000;
	bool route = true;
	char *prompts[64], *corpus = NULL;
	size_t corpus_len = 0;
	struct policy *p = NULL;
	struct route rt = { 0 };
	struct errmsg e = { { 0 } };
	double p50[M_COUNT_] = { 0 };
	unsigned seed = 1;
	int c;

	while ((c = getopt_long(argc, argv, "n:s:h", opts, NULL)) >= 0)
		switch (c) {
		case 'n':
			iters = (unsigned) strtoul(optarg, NULL, 10);
			break;
		case 's':
			set_path = optarg;
			break;
		case 'R':
			route = false;
			break;
		default:
			fprintf(stderr, "Usage: molly-bench-policy [--iters N] "
					"[--set EXEMPLARS.tsv] [--no-route] [N]\n");
			return c == 'h' ? 0 : 2;
		}
	if (optind < argc)
		iters = (unsigned) strtoul(argv[optind], NULL, 10);
	if (iters < 100)
		iters = 100;
	/* 64 prompts of 64 B .. 2 KiB, built from the parts above */
	for (int k = 0; k < 64; k++) {
		size_t want = 64 + (size_t) k * 31, n = 0;
		prompts[k] = malloc(2049);
		if (!prompts[k])
			return 1;
		while (n < want) {
			const char *s = parts[(seed = seed * 1103515245u + 12345u) >> 16 & 7];
			size_t l = strlen(s);
			if (n + l > 2048)
				break;
			memcpy(prompts[k] + n, s, l);
			n += l;
		}
		prompts[k][n] = 0;
	}
	/* the sizes' corpus: 16 KiB of all the parts, in a pseudo-random order; windows are cut
	 * at any byte (a cut UTF-8 character is what a real prompt may hold too) */
	corpus = malloc(16384 + 256);
	if (!corpus)
		return 1;
	while (corpus_len < 16384) {
		unsigned k = ((seed = seed * 1103515245u + 12345u) >> 16) % 1024;
		const char *s = k % 3 == 0 ? special_parts[k / 3 % ELEMENTSOF(special_parts)]
					   : parts[k % ELEMENTSOF(parts)];
		memcpy(corpus + corpus_len, s, strlen(s));
		corpus_len += strlen(s);
	}
	corpus[corpus_len] = 0;

	if (policy_new_defaults(&p) < 0)
		return 1;
	if (route && route_init(&rt, set_path) < 0)
		return 1;
	if (run(p, "built-in policy", prompts, 64, iters) < 0)
		return 1;
	printf("\nper size, alternated in one run: detectors = detect_scan() alone; policy = the "
	       "whole policy_evaluate(); route = classification + policy + the router's plan\n");
	for (size_t i = 0; i < ELEMENTSOF(sizes); i++)
		if (run_size(p, route ? &rt : NULL, corpus, corpus_len, sizes[i], iters, p50) < 0)
			return 1;
	printf("2 KiB: policy p50 %.2f us (target <= 50): %s", p50[M_POLICY],
	       p50[M_POLICY] <= 50 ? "within target" : "OVER TARGET");
	if (route)
		printf("; route p50 %.2f us (target <= 60): %s", p50[M_ROUTE],
		       p50[M_ROUTE] <= 60 ? "within target" : "OVER TARGET");
	printf("\n\n");
	for (int i = 0; i < 10; i++)
		if (policy_add_rule(p, "r", rules[i], POLICY_CLASS_SECRET, NULL, &e) < 0) {
			fprintf(stderr, "rule %d: %s\n", i, e.text);
			return 1;
		}
	if (run(p, "+ 10 regex rules", prompts, 64, iters) < 0)
		return 1;
	policy_free(p);
	route_done(&rt);
	free(corpus);
	for (int k = 0; k < 64; k++)
		free(prompts[k]);
	return 0;
}
