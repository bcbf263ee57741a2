/* SPDX-License-Identifier: MIT */
/*
 * router.h: chooses where a request runs, inside the tiers its policy decision permits.
 *
 * Candidates: T0, this machine's engine — one candidate per (base, adapter) — and the
 * [Target NAME] endpoints in T1..T3 (targets/remote.h). A candidate outside the permitted
 * tiers is never ranked: policy_tier_allowed() decides (T2 only to user-controlled targets,
 * T3 only when the policy permits it, and then redact_for_t3 holds).
 *
 * Score = expected quality − CostWeight·cost − LatencyWeight·latency, where
 *  - expected quality = Σ_d p(d)·q(target, d) over the request's domain posterior (without a
 *    classifier: {"general": 1}); q is the prior for (domain, target): a [Target]
 *    Quality.DOMAIN= seed, else 0.5 (neutral). A local adapter tagged with the domain is worth
 *    ROUTER_ADAPTER_BONUS more than the base;
 *  - cost = (CostPerMTokIn·prompt tokens + CostPerMTokOut·max tokens) / 10^6;
 *  - latency = the target's measured time to first byte, in seconds.
 * A quality entry for (target, domain) — an LMDB prior (router/priors.h) or a config seed —
 * replaces the neutral value and the adapter bonus (it measured the adapter itself).
 * Candidates that cannot take the request (cooling down, context too small, modality missing)
 * are ranked last, not dropped: a fallback may still reach them after the others failed.
 * Candidates whose estimated cost is over the request's budget are not ranked at all.
 * Ties go to the lower tier (on-device first), then to the configuration's order.
 *
 * Domains: router_params.domains names the classifier's domains; router_new() turns every
 * target's quality entries into a dense (target × domain) table so that a query's posterior
 * by index (router_query.posterior_idx, straight from classify_run()) costs one multiply-add
 * per (target, domain) and no string compare.
 *
 * Cascade and mixture (the manager runs them; the router picks): router_plan_escalate()
 * selects the best untried candidate of the next permitted tier above a given one within a
 * budget; router_plan_topk() lists the k best usable candidates for a mixture.
 *
 * Fallback: a plan walks the ranking. router_plan_next() after a failure with a typed trigger
 * (error/down/timeout, context too long, policy) skips what the trigger rules out and returns
 * the next candidate; at most MaxFallbacks= times and never past the end: the walk always
 * terminates.
 *
 * Threading: a router is immutable after router_new(); rank from any thread. A plan belongs
 * to one request.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "basic/errmsg.h"
#include "basic/macro.h"
#include "policy/policy.h"

#define ROUTER_NEUTRAL_QUALITY 0.5
#define ROUTER_ADAPTER_BONUS 0.2
#define ROUTER_MAX_CANDIDATES 512
#define ROUTER_DEFAULT_DOMAIN "general"
/* router_explained.excluded for a target whose cost is over the request's budget. */
#define ROUTER_EXCLUDED_BUDGET "over the request's budget"

struct router_quality {
	const char *domain;
	double quality;
};

/* A candidate as the router sees it; the caller owns the strings (they must outlive the
 * router). */
struct router_target {
	const char *name;          /* "local:<base>[:<adapter>]" or the [Target] name */
	unsigned tier;             /* 0..3 */
	bool user_controlled;      /* T0 always is */
	const char *adapter;       /* T0: the adapter's name, NULL for the base */
	const char *const *domains;/* T0 adapters: their domain tags */
	size_t n_domains;
	double cost_in, cost_out;  /* per million tokens */
	uint32_t context_tokens;   /* 0: unknown (no check) */
	uint32_t modalities;       /* CONFIG_MODALITY_* bits; 0: text */
	const struct router_quality *quality;
	size_t n_quality;
	void *remote;              /* struct remote_target * for T1..T3 (health, latency) */
};

struct router_params {
	uint32_t max_fallbacks;
	double cost_weight;
	double latency_weight;
	/* The classifier's domains, in its index order (copied); NULL/0: none. */
	const char *const *domains;
	size_t n_domains;
};

struct router;

int router_new(const struct router_target *targets, size_t n, const struct router_params *p,
	       struct router **ret, struct errmsg *e);
struct router *router_free(struct router *r);
DEFINE_CLEANUP_FUNC(struct router *, router_free, NULL)
size_t router_n_targets(const struct router *r);
size_t router_n_domains(const struct router *r);
/* The quality table entry for (target i, domain index d); d == router_n_domains(): the
 * "general" column used without a posterior. */
double router_quality_of(const struct router *r, size_t i, size_t d);
const struct router_target *router_get_target(const struct router *r, size_t i);

struct router_domain {
	const char *domain;
	double p;
};

struct router_query {
	const struct router_domain *posterior; /* NULL: {"general": 1} */
	size_t n_posterior;
	/* Instead of posterior: probabilities by the router's domain index (router_n_domains()
	 * of them), e.g. classify_result.posterior. Used when not NULL. */
	const float *posterior_idx;
	uint32_t prompt_tokens;                /* an estimate is fine */
	uint32_t max_tokens;                   /* 0: assume 256 for the cost */
	uint32_t modalities;                   /* 0: text */
	const char *require_adapter;           /* T0 only this adapter (a request naming a model);
						* NULL: any */
	bool local_only;                       /* the request named a local model: T0 only */
	bool base_only;                        /* T0: the base only (the request named it) */
	double budget;                         /* cost units; 0: no bound */
	/* Optional: false excludes a target (e.g. an adapter the caller may not use). */
	bool (*allow)(const struct router_target *t, void *userdata);
	void *allow_userdata;
};

struct router_candidate {
	size_t target;      /* index into the router's targets */
	double quality, cost, latency_s, score;
	bool usable;        /* available and fits (context, modality) */
	const char *why_unusable; /* static text when !usable */
};

/* A target as explain shows it: scored, and why it is not ranked when excluded. */
struct router_explained {
	struct router_candidate c;
	const char *excluded; /* static text; NULL: ranked */
};
/* Fills out[0..min(n, cap)) with every target in configuration order; returns the number of
 * targets. */
size_t router_explain(const struct router *r, const struct policy_decision *d,
		      const struct router_query *q, struct router_explained *out, size_t cap);

/* The expected quality of target i for a posterior (exposed for tests and explain). */
double router_expected_quality(const struct router *r, size_t i, const struct router_query *q);

enum router_trigger {
	ROUTER_TRIGGER_ERROR,    /* down, timeout, server error */
	ROUTER_TRIGGER_CONTEXT,  /* the request is too long for the target */
	ROUTER_TRIGGER_POLICY,   /* the target refused it (4xx), or policy forbade the tier */
};
const char *router_trigger_name(enum router_trigger t);

struct router_plan {
	struct router_candidate c[ROUTER_MAX_CANDIDATES];
	size_t n;             /* ranked candidates, best first */
	size_t pos;           /* the current one */
	uint32_t fallbacks;   /* taken so far */
	uint32_t max_fallbacks;
	bool tried[ROUTER_MAX_CANDIDATES];
};

/*
 * Ranks the targets d permits for q into plan (best first) and selects the best. -ENOENT when
 * no target is permitted (none in the permitted tiers).
 */
int router_plan_new(const struct router *r, const struct policy_decision *d,
		    const struct router_query *q, struct router_plan *plan);
/* The current candidate's target. */
const struct router_target *router_plan_current(const struct router *r,
						const struct router_plan *plan);
/*
 * The current candidate failed with trigger: selects the next one it does not rule out
 * (CONTEXT: one with a larger or unknown context; POLICY: one in another tier).
 * -ELOOP when MaxFallbacks= are used up, -ENOENT when no candidate is left.
 */
int router_plan_next(const struct router *r, struct router_plan *plan, enum router_trigger t);
/*
 * Cascade: selects the best untried usable candidate in the lowest permitted tier above
 * from_tier whose cost fits in budget_left (budget_left < 0: no bound). -ENOENT when none.
 * Does not count as a fallback.
 */
int router_plan_escalate(const struct router *r, struct router_plan *plan, unsigned from_tier,
			 double budget_left);
/* Whether router_plan_escalate() would find one (does not change the plan). */
bool router_plan_can_escalate(const struct router *r, const struct router_plan *plan,
			      unsigned from_tier, double budget_left);
/* Mixture: the positions (into plan->c) of up to k best usable candidates; marks them tried.
 * Returns how many. */
size_t router_plan_topk(struct router_plan *plan, size_t k, size_t *ret_pos);
