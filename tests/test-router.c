/* SPDX-License-Identifier: MIT */
/* Tests for router/router.h: scoring, permitted tiers never violated, fallback ordering and
 * termination, escalation and budgets, and the router with the classifier choosing the domain's
 * adapter on a hand-written labelled set (tests/data/router/labelled.tsv). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "lora/adapter.h"
#include "router/classify.h"
#include "router/router.h"
#include "router-rows.h"
#include "test.h"

static const struct router_quality q_t1[] = { { "general", 0.9 }, { "code", 0.3 } };
static const struct router_quality q_t2[] = { { "general", 0.7 } };
static const struct router_quality q_t3[] = { { "general", 0.95 }, { "code", 0.99 } };
static const char *const law_domains[] = { "law" };

/* 0 base, 1 law adapter, 2 T1, 3 T2 (not user-controlled), 4 T2 user-controlled, 5 T3 */
static const struct router_target targets[] = {
	{ .name = "local:base", .tier = 0 },
	{ .name = "local:base:law", .tier = 0, .adapter = "law", .domains = law_domains,
	  .n_domains = 1 },
	{ .name = "lan", .tier = 1, .quality = q_t1, .n_quality = 2, .context_tokens = 4096 },
	{ .name = "theirs", .tier = 2, .quality = q_t2, .n_quality = 1 },
	{ .name = "mine", .tier = 2, .user_controlled = true, .quality = q_t2, .n_quality = 1,
	  .context_tokens = 32768 },
	{ .name = "api", .tier = 3, .quality = q_t3, .n_quality = 2, .cost_in = 3,
	  .cost_out = 15, .context_tokens = 128000 },
};

static struct router *make(uint32_t max_fallbacks)
{
	struct router_params p = { .max_fallbacks = max_fallbacks, .cost_weight = 1,
				   .latency_weight = 0.05 };
	struct router *r = NULL;
	struct errmsg e = { { 0 } };

	if (router_new(targets, ELEMENTSOF(targets), &p, &r, &e) < 0)
		return NULL;
	return r;
}

static const char *current(const struct router *r, const struct router_plan *p)
{
	const struct router_target *t = router_plan_current(r, p);
	return t ? t->name : "(none)";
}

TEST(scoring_prefers_higher_prior)
{
	_cleanup_(router_freep) struct router *r = make(2);
	struct policy_decision d = { .class = POLICY_CLASS_PUBLIC,
				     .permitted_tiers = POLICY_TIER(0) | POLICY_TIER(1) };
	struct router_plan *plan = calloc(1, sizeof(*plan));

	ASSERT_TRUE(r && plan);
	ASSERT_NEAR(router_expected_quality(r, 2, NULL), 0.9, 1e-9);
	ASSERT_NEAR(router_expected_quality(r, 0, NULL), ROUTER_NEUTRAL_QUALITY, 1e-9);
	ASSERT_OK(router_plan_new(r, &d, NULL, plan));
	ASSERT_STREQ(current(r, plan), "lan");
	ASSERT_EQ(plan->n, 3);

	/* In "code" T1 is poor (0.3): the local base (0.5) wins. */
	struct router_domain code[] = { { "code", 1.0 } };
	struct router_query q = { .posterior = code, .n_posterior = 1 };
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	ASSERT_STREQ(current(r, plan), "local:base");

	/* An adapter tagged "law" is worth more than the base in law. */
	struct router_domain law[] = { { "law", 0.8 }, { "general", 0.2 } };
	q.posterior = law;
	q.n_posterior = 2;
	ASSERT_NEAR(router_expected_quality(r, 1, &q), 0.5 + 0.8 * ROUTER_ADAPTER_BONUS, 1e-9);
	ASSERT_NEAR(router_expected_quality(r, 2, &q), 0.8 * 0.5 + 0.2 * 0.9, 1e-9);
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	ASSERT_STREQ(current(r, plan), "local:base:law");
	free(plan);
	return 0;
}

TEST(cost_counts)
{
	_cleanup_(router_freep) struct router *r = make(2);
	struct policy_decision d = { .class = POLICY_CLASS_PUBLIC,
				     .permitted_tiers = POLICY_TIERS_ALL,
				     .redact_for_t3 = true };
	struct router_plan *plan = calloc(1, sizeof(*plan));
	struct router_query q = { .prompt_tokens = 100, .max_tokens = 100 };

	ASSERT_TRUE(r && plan);
	/* Cheap request: the API's 0.95 beats the LAN's 0.9. */
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	ASSERT_STREQ(current(r, plan), "api");
	ASSERT_NEAR(plan->c[0].cost, (3.0 * 100 + 15.0 * 100) / 1e6, 1e-12);
	/* A long answer costs about 15/M·3900 = 0.059: the LAN wins (3910 tokens fit its 4096). */
	q.prompt_tokens = 10;
	q.max_tokens = 3900;
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	ASSERT_STREQ(current(r, plan), "lan");
	free(plan);
	return 0;
}

TEST(permitted_tiers_never_violated)
{
	_cleanup_(router_freep) struct router *r = make(16);
	struct router_plan *plan = calloc(1, sizeof(*plan));
	unsigned seed = 12345;

	ASSERT_TRUE(r && plan);
	/* Every tier set, class and redaction flag; walk every plan to its end. */
	for (int iter = 0; iter < 2000; iter++) {
		struct policy_decision d = { .class = (enum policy_class) (rand_r(&seed) % 3),
					     .permitted_tiers = (uint32_t) (rand_r(&seed) % 16),
					     .redact_for_t3 = rand_r(&seed) % 2 };
		struct router_domain dom[] = { { "general", 0.5 }, { "code", 0.5 } };
		struct router_query q = { .posterior = dom, .n_posterior = 2,
					  .prompt_tokens = (uint32_t) (rand_r(&seed) % 50000) };
		int k = router_plan_new(r, &d, &q, plan), steps = 0;

		if (d.permitted_tiers == 0)
			ASSERT_ERR(k, -ENOENT);
		if (k < 0)
			continue;
		do {
			const struct router_target *t = router_plan_current(r, plan);
			ASSERT_TRUE(t);
			ASSERT_TRUE(d.permitted_tiers & POLICY_TIER(t->tier));
			if (t->tier == 2)
				ASSERT_TRUE(t->user_controlled);
			if (t->tier == 3 && d.class != POLICY_CLASS_PUBLIC)
				ASSERT_TRUE(d.redact_for_t3);
			ASSERT_TRUE(++steps <= (int) ELEMENTSOF(targets));
		} while (router_plan_next(r, plan, (enum router_trigger) (rand_r(&seed) % 3)) == 0);
	}
	free(plan);
	return 0;
}

TEST(fallback_order_and_bound)
{
	_cleanup_(router_freep) struct router *r = make(2);
	struct policy_decision d = { .class = POLICY_CLASS_PUBLIC,
				     .permitted_tiers = POLICY_TIERS_ALL,
				     .redact_for_t3 = true };
	struct router_plan *plan = calloc(1, sizeof(*plan));
	struct router_query q = { .prompt_tokens = 10, .max_tokens = 10 };

	ASSERT_TRUE(r && plan);
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	/* api 0.95, lan 0.9, mine 0.7, base 0.5, law 0.5 (tie: config order) */
	ASSERT_STREQ(current(r, plan), "api");
	ASSERT_OK(router_plan_next(r, plan, ROUTER_TRIGGER_ERROR));
	ASSERT_STREQ(current(r, plan), "lan");
	ASSERT_OK(router_plan_next(r, plan, ROUTER_TRIGGER_ERROR));
	ASSERT_STREQ(current(r, plan), "mine");
	ASSERT_EQ(plan->fallbacks, 2);
	/* MaxFallbacks=2: no third. */
	ASSERT_ERR(router_plan_next(r, plan, ROUTER_TRIGGER_ERROR), -ELOOP);
	ASSERT_STREQ(current(r, plan), "mine");
	free(plan);
	return 0;
}

TEST(fallback_triggers)
{
	_cleanup_(router_freep) struct router *r = make(10);
	struct policy_decision d = { .class = POLICY_CLASS_PUBLIC,
				     .permitted_tiers = POLICY_TIER(0) | POLICY_TIER(1) |
							POLICY_TIER(2) };
	struct router_plan *plan = calloc(1, sizeof(*plan));

	ASSERT_TRUE(r && plan);
	ASSERT_OK(router_plan_new(r, &d, NULL, plan));
	ASSERT_STREQ(current(r, plan), "lan"); /* 4096 tokens */
	/* Too long for the LAN: only a larger (or unknown) context is worth a try: "mine"
	 * (32768), then the local ones (unknown). */
	ASSERT_OK(router_plan_next(r, plan, ROUTER_TRIGGER_CONTEXT));
	ASSERT_STREQ(current(r, plan), "mine");
	/* "mine" refused it (policy): skip the rest of T2, go to T0. */
	ASSERT_OK(router_plan_next(r, plan, ROUTER_TRIGGER_POLICY));
	ASSERT_STREQ(current(r, plan), "local:base");
	ASSERT_OK(router_plan_next(r, plan, ROUTER_TRIGGER_ERROR));
	ASSERT_STREQ(current(r, plan), "local:base:law");
	/* Nothing left: the walk ends. */
	ASSERT_ERR(router_plan_next(r, plan, ROUTER_TRIGGER_ERROR), -ENOENT);
	free(plan);
	return 0;
}

TEST(unusable_ranked_last)
{
	_cleanup_(router_freep) struct router *r = make(5);
	struct policy_decision d = { .class = POLICY_CLASS_PUBLIC,
				     .permitted_tiers = POLICY_TIER(0) | POLICY_TIER(1) };
	struct router_plan *plan = calloc(1, sizeof(*plan));
	/* 5000 tokens do not fit the LAN's 4096. */
	struct router_query q = { .prompt_tokens = 4000, .max_tokens = 1000 };

	ASSERT_TRUE(r && plan);
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	ASSERT_STREQ(current(r, plan), "local:base");
	ASSERT_STREQ(router_get_target(r, plan->c[plan->n - 1].target)->name, "lan");
	ASSERT_TRUE(!plan->c[plan->n - 1].usable);
	/* An image request: no target declares images, so all are unusable, but the order
	 * still holds. */
	q.modalities = CONFIG_MODALITY_IMAGE;
	q.prompt_tokens = 0;
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	for (size_t i = 0; i < plan->n; i++)
		ASSERT_TRUE(!plan->c[i].usable);
	/* A request naming a local adapter stays on it. */
	q = (struct router_query){ .local_only = true, .require_adapter = "law" };
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	ASSERT_EQ(plan->n, 1);
	ASSERT_STREQ(current(r, plan), "local:base:law");
	ASSERT_ERR(router_plan_next(r, plan, ROUTER_TRIGGER_ERROR), -ENOENT);
	free(plan);
	return 0;
}

TEST(bad_targets)
{
	struct router_params p = { 0 };
	struct router *r = NULL;
	struct errmsg e = { { 0 } };
	struct router_target t = { .name = "x", .tier = 4 };

	ASSERT_ERR(router_new(&t, 1, &p, &r, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "T4") != NULL);
	t.tier = 1;
	t.cost_in = -1;
	ASSERT_ERR(router_new(&t, 1, &p, &r, &e), -EINVAL);
	t.cost_in = NAN;
	ASSERT_ERR(router_new(&t, 1, &p, &r, &e), -EINVAL);
	t.name = NULL;
	ASSERT_ERR(router_new(&t, 1, &p, &r, &e), -EINVAL);
	return 0;
}

/* ---- [Target NAME] and [Router] in the configuration ---- */

static int parse(const char *text, struct config **ret, struct errmsg *e)
{
	struct config *c = NULL;
	int k = config_new(&c);

	if (k < 0)
		return k;
	k = config_parse_text(c, text, strlen(text), "t.conf", e);
	if (k >= 0)
		k = config_verify(c, e);
	if (k < 0) {
		config_unref(c);
		return k;
	}
	*ret = c;
	return 0;
}

TEST(config_target_and_router)
{
	struct config *c = NULL;
	struct errmsg e = { { 0 } };

	ASSERT_OK(parse("[Target lan]\nTier=T1\nURL=http://127.0.0.2:8411\nModel=llama 3\n"
			"UserControlled=yes\nCostPerMTokIn=0.5\nCostPerMTokOut=1.5\n"
			"CredentialFile=/etc/molly/key\nModalities=text, image\nContextTokens=8192\n"
			"TimeoutSec=500ms\nRetries=0\nQuality.general=0.8\nQuality.code=0.9\n"
			"Quality.general=0.7\n"
			"[Router]\nMixtureEntropy=0.6\nMixtureK=3\nConfidenceThreshold=0.4\n"
			"MaxFallbacks=1\nBudget=0.25\nHealthCheckSec=2500ms\n",
			&c, &e));
	ASSERT_EQ(c->n_targets, 1);
	ASSERT_STREQ(c->targets[0].name, "lan");
	ASSERT_EQ(c->targets[0].tier, 1);
	ASSERT_STREQ(c->targets[0].url, "http://127.0.0.2:8411");
	ASSERT_STREQ(c->targets[0].model, "llama 3");
	ASSERT_TRUE(c->targets[0].user_controlled);
	ASSERT_NEAR(c->targets[0].cost_in, 0.5, 1e-12);
	ASSERT_NEAR(c->targets[0].cost_out, 1.5, 1e-12);
	ASSERT_STREQ(c->targets[0].credential_file, "/etc/molly/key");
	ASSERT_EQ(c->targets[0].modalities, CONFIG_MODALITY_TEXT | CONFIG_MODALITY_IMAGE);
	ASSERT_EQ(c->targets[0].context_tokens, 8192);
	ASSERT_EQ(c->targets[0].timeout_ns, 500000000ull);
	ASSERT_EQ(c->targets[0].retries, 0);
	ASSERT_EQ(c->targets[0].n_quality, 2);
	ASSERT_STREQ(c->targets[0].quality[0].domain, "general");
	ASSERT_NEAR(c->targets[0].quality[0].quality, 0.7, 1e-12); /* the later one wins */
	ASSERT_STREQ(c->targets[0].quality[1].domain, "code");
	ASSERT_NEAR(c->router_mixture_entropy, 0.6, 1e-12);
	ASSERT_EQ(c->router_mixture_k, 3);
	ASSERT_NEAR(c->router_confidence_threshold, 0.4, 1e-12);
	ASSERT_EQ(c->router_max_fallbacks, 1);
	ASSERT_NEAR(c->router_budget, 0.25, 1e-12);
	ASSERT_EQ(c->router_health_interval_ns, 2500000000ull);
	config_unref(c);
	ASSERT_OK(parse("[Router]\nMixtureTopK=4\nHealthCheckSec=0\n", &c, &e));
	ASSERT_EQ(c->router_mixture_k, 4);
	ASSERT_EQ(c->router_health_interval_ns, 0);
	config_unref(c);

	/* Defaults. */
	ASSERT_OK(parse("[Target x]\nTier=3\nURL=https://api.example.com/v1\n", &c, &e));
	ASSERT_EQ(c->targets[0].tier, 3);
	ASSERT_EQ(c->targets[0].retries, 2);
	ASSERT_EQ(c->targets[0].modalities, CONFIG_MODALITY_TEXT);
	ASSERT_EQ(c->router_max_fallbacks, 2);
	ASSERT_NEAR(c->router_budget, 0, 1e-12);
	ASSERT_EQ(c->router_health_interval_ns, 10000000000ull);
	ASSERT_EQ(c->router_mixture_k, 2);
	config_unref(c);
	return 0;
}

TEST(config_target_errors)
{
	static const struct {
		const char *text, *needle;
	} bad[] = {
		{ "[Target a]\nTier=T0\nURL=http://x\n", "T0 is this machine" },
		{ "[Target a]\nTier=T4\nURL=http://x\n", "not a remote tier" },
		{ "[Target a]\nTier=T1\nURL=ftp://x\n", "not an http" },
		{ "[Target a]\nTier=T1\nURL=http://\n", "no host" },
		{ "[Target a]\nTier=T1\n", "needs both Tier= and URL=" },
		{ "[Target a]\nURL=http://x\n", "needs both Tier= and URL=" },
		{ "[Target a]\nTier=T1\nURL=http://x\nQuality.general=1.5\n", "[0, 1]" },
		{ "[Target a]\nTier=T1\nURL=http://x\nQuality.=0.5\n", "not a domain" },
		{ "[Target a]\nTier=T1\nURL=http://x\nQuality.a/b=0.5\n", "not a domain" },
		{ "[Target a]\nTier=T1\nURL=http://x\nCostPerMTokIn=-1\n", "not a number" },
		{ "[Target a]\nTier=T1\nURL=http://x\nModalities=smell\n", "not a modality" },
		{ "[Target a]\nTier=T1\nURL=http://x\nCredentialFile=a/b\n", "credential name" },
		{ "[Target a]\nTier=T1\nURL=http://x\nRetries=11\n", "[0, 10]" },
		{ "[Target a b]\nTier=T1\n", "target name" },
		{ "[Router]\nMaxFallbacks=17\n", "[0, 16]" },
		{ "[Router]\nMixtureEntropy=2\n", "[0, 1]" },
		{ "[Router]\nBogus=1\n", "unknown key" },
		{ "[Router]\nBudget=-1\n", "not a number" },
		{ "[Router]\nHealthCheckSec=soon\n", "Router" },
	};

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		struct config *c = NULL;
		struct errmsg e = { { 0 } };
		int k = parse(bad[i].text, &c, &e);
		if (k >= 0) {
			config_unref(c);
			TEST_FAIL_("accepted: %s", bad[i].text);
		}
		if (!strstr(e.text, bad[i].needle))
			TEST_FAIL_("'%s': message '%s' lacks '%s'", bad[i].text, e.text,
				   bad[i].needle);
		if (!strstr(e.text, "t.conf"))
			TEST_FAIL_("'%s': message '%s' lacks the file", bad[i].text, e.text);
	}
	return 0;
}

/* ---- the router with the classifier: choices on the hand-written labelled set ---- */

/* What the daemon builds from the exemplars of adapters.tsv (classify_build()'s seed 1). */
static int build_classifier(struct classify_model **ret)
{
	return build_domain_classifier("adapters.tsv", &(struct classify_options){ .seed = 1 }, ret);
}

/* Candidates: the base, one adapter per domain with a seeded prior of 0.85 in its own
 * domain, and a LAN target that is decent everywhere (0.6). */
static char names[ELEMENTSOF(router_domains)][64];
static const char *adomains[ELEMENTSOF(router_domains)][1];
static struct router_quality aqual[ELEMENTSOF(router_domains)][1];
static const struct router_quality lanq[] = { { "general", 0.6 }, { "cooking", 0.6 },
					      { "law", 0.6 },     { "medicine", 0.6 },
					      { "code", 0.6 },    { "finance", 0.6 } };

static struct router *make_domain_router(const struct classify_model *m)
{
	struct router_target t[2 + ELEMENTSOF(router_domains)];
	const char *dn[CLASSIFY_MAX_DOMAINS];
	size_t n = 0;
	struct router *r = NULL;
	struct errmsg e = { { 0 } };

	t[n++] = (struct router_target){ .name = "local:base", .tier = 0 };
	for (size_t d = 0; d < ELEMENTSOF(router_domains); d++) {
		snprintf(names[d], sizeof(names[d]), "local:base:%s", router_domains[d]);
		adomains[d][0] = router_domains[d];
		aqual[d][0] = (struct router_quality){ router_domains[d], 0.85 };
		t[n++] = (struct router_target){ .name = names[d],
						 .tier = 0,
						 .adapter = router_domains[d],
						 .domains = adomains[d],
						 .n_domains = 1,
						 .quality = aqual[d],
						 .n_quality = 1 };
	}
	t[n++] = (struct router_target){ .name = "lan", .tier = 1, .quality = lanq,
					 .n_quality = ELEMENTSOF(lanq) };
	for (size_t i = 0; i < classify_n_domains(m); i++)
		dn[i] = classify_domain_name(m, i);
	struct router_params p = { .max_fallbacks = 2,
				   .cost_weight = 1,
				   .latency_weight = 0.05,
				   .domains = dn,
				   .n_domains = classify_n_domains(m) };
	if (router_new(t, n, &p, &r, &e) < 0)
		return NULL;
	return r;
}

TEST(labelled_set_picks_the_domain_adapter)
{
	_cleanup_(classify_model_freep) struct classify_model *m = NULL;
	_cleanup_(router_freep) struct router *r = NULL;
	struct policy_decision d = { .class = POLICY_CLASS_PUBLIC,
				     .permitted_tiers = POLICY_TIER(0) | POLICY_TIER(1) };
	struct router_plan *plan = calloc(1, sizeof(*plan));
	struct rows l = { 0 };
	size_t right = 0;

	ASSERT_TRUE(plan);
	ASSERT_OK(build_classifier(&m));
	r = make_domain_router(m);
	ASSERT_TRUE(r);
	ASSERT_OK(read_rows("labelled.tsv", &l));
	ASSERT_TRUE(l.n >= 50);
	for (size_t i = 0; i < l.n; i++) {
		struct classify_result res;
		classify_run(m, l.text[i], strlen(l.text[i]), &res);
		struct router_query q = { .posterior_idx = res.posterior, .prompt_tokens = 20 };
		ASSERT_OK(router_plan_new(r, &d, &q, plan));
		const struct router_target *t = router_plan_current(r, plan);
		if (t->adapter && strcmp(t->adapter, l.dom[i]) == 0)
			right++;
		else
			fprintf(stderr, "  %s: %s → %s\n", l.dom[i], l.text[i], t->name);
	}
	fprintf(stderr, "  labelled set: %zu/%zu chose the domain's adapter\n", right, l.n);
	ASSERT_TRUE(right * 10 >= l.n * 9);
	/* The table and the string posterior agree. */
	struct router_domain law[] = { { "law", 1.0 } };
	struct router_query q = { .posterior = law, .n_posterior = 1 };
	ASSERT_NEAR(router_expected_quality(r, 2, &q), 0.85, 1e-9);
	rows_free(&l);
	free(plan);
	return 0;
}

TEST(escalation_goes_up_the_permitted_tiers_within_budget)
{
	_cleanup_(router_freep) struct router *r = make(4);
	struct policy_decision d = { .class = POLICY_CLASS_PUBLIC,
				     .permitted_tiers = POLICY_TIER(0) | POLICY_TIER(1) |
							POLICY_TIER(3),
				     .redact_for_t3 = true };
	struct router_plan *plan = calloc(1, sizeof(*plan));
	struct router_domain law[] = { { "law", 1.0 } };
	struct router_query q = { .posterior = law, .n_posterior = 1, .prompt_tokens = 100,
				  .max_tokens = 100 };

	ASSERT_TRUE(plan);
	/* In "law" the law adapter (0.5 + bonus) is best; lan and api are neutral (0.5). */
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	ASSERT_STREQ(current(r, plan), "local:base:law");
	/* From T0 the next permitted tier is T1 (not T3, not T2 which is not permitted). */
	ASSERT_TRUE(router_plan_can_escalate(r, plan, 0, -1));
	ASSERT_OK(router_plan_escalate(r, plan, 0, -1));
	ASSERT_STREQ(current(r, plan), "lan");
	ASSERT_EQ(plan->fallbacks, 0);
	/* From T1: T3, unless the budget is too small for its cost (0.0018). */
	ASSERT_TRUE(!router_plan_can_escalate(r, plan, 1, 0.001));
	ASSERT_ERR(router_plan_escalate(r, plan, 1, 0.001), -ENOENT);
	ASSERT_OK(router_plan_escalate(r, plan, 1, 0.01));
	ASSERT_STREQ(current(r, plan), "api");
	/* Nothing above T3. */
	ASSERT_ERR(router_plan_escalate(r, plan, 3, -1), -ENOENT);
	/* Without T1 and T3 permitted: no escalation from T0 at all. */
	d.permitted_tiers = POLICY_TIER(0);
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	ASSERT_TRUE(!router_plan_can_escalate(r, plan, 0, -1));
	free(plan);
	return 0;
}

TEST(budget_excludes_and_topk_lists)
{
	_cleanup_(router_freep) struct router *r = make(4);
	struct policy_decision d = { .class = POLICY_CLASS_PUBLIC,
				     .permitted_tiers = POLICY_TIERS_ALL,
				     .redact_for_t3 = true };
	struct router_plan *plan = calloc(1, sizeof(*plan));
	struct router_query q = { .prompt_tokens = 100, .max_tokens = 100, .budget = 0.001 };
	struct router_explained x[ELEMENTSOF(targets)];
	size_t pos[4];

	ASSERT_TRUE(plan);
	/* The API costs 0.0018 > 0.001: not ranked; explain says why. */
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	ASSERT_STREQ(current(r, plan), "lan");
	for (size_t i = 0; i < plan->n; i++)
		ASSERT_TRUE(strcmp(router_get_target(r, plan->c[i].target)->name, "api") != 0);
	ASSERT_EQ(router_explain(r, &d, &q, x, ELEMENTSOF(x)), ELEMENTSOF(targets));
	ASSERT_STREQ(x[5].excluded, "over the request's budget");
	ASSERT_STREQ(x[3].excluded, "T2 needs a user-controlled target");
	ASSERT_TRUE(x[2].excluded == NULL && x[2].c.usable);
	ASSERT_NEAR(x[2].c.quality, 0.9, 1e-9);
	/* base_only drops the adapter; the top 2 are lan and mine. */
	q.base_only = true;
	ASSERT_OK(router_plan_new(r, &d, &q, plan));
	for (size_t i = 0; i < plan->n; i++)
		ASSERT_TRUE(router_get_target(r, plan->c[i].target)->adapter == NULL);
	ASSERT_EQ(router_plan_topk(plan, 2, pos), 2);
	ASSERT_STREQ(router_get_target(r, plan->c[pos[0]].target)->name, "lan");
	ASSERT_STREQ(router_get_target(r, plan->c[pos[1]].target)->name, "mine");
	free(plan);
	return 0;
}
