/* SPDX-License-Identifier: MIT */
/*
 * router.c: see router.h.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "core/config.h"
#include "router.h"
#include "targets/remote.h"

struct router {
	struct router_target *targets; /* owned array; the strings are the caller's */
	size_t n;
	struct router_params p;
	size_t n_domains;
	double *qtab;                  /* n × (n_domains + 1); the last column: "general" */
};

static double prior(const struct router_target *t, const char *domain);

int router_new(const struct router_target *targets, size_t n, const struct router_params *p,
	       struct router **ret, struct errmsg *e)
{
	struct router *r;

	assert_return((targets || n == 0) && p && ret, -EINVAL);
	if (n > ROUTER_MAX_CANDIDATES)
		return errmsg_set(e, -E2BIG, "%zu routing targets; at most %d", n,
				  ROUTER_MAX_CANDIDATES);
	for (size_t i = 0; i < n; i++) {
		if (!targets[i].name)
			return errmsg_set(e, -EINVAL, "routing target %zu has no name", i);
		if (targets[i].tier > 3)
			return errmsg_set(e, -EINVAL, "routing target %s: tier T%u does not exist",
					  targets[i].name, targets[i].tier);
		if (!(targets[i].cost_in >= 0) || !(targets[i].cost_out >= 0))
			return errmsg_set(e, -EINVAL, "routing target %s: negative cost",
					  targets[i].name);
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	if (n > 0) {
		r->targets = calloc(n, sizeof(*r->targets));
		if (!r->targets) {
			free(r);
			return -ENOMEM;
		}
		memcpy(r->targets, targets, n * sizeof(*targets));
	}
	r->n = n;
	r->p = *p;
	r->p.domains = NULL;
	r->n_domains = p->domains ? p->n_domains : 0;
	r->qtab = calloc(MAX(n, (size_t) 1) * (r->n_domains + 1), sizeof(double));
	if (!r->qtab) {
		free(r->targets);
		free(r);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		double *row = &r->qtab[i * (r->n_domains + 1)];
		for (size_t d = 0; d < r->n_domains; d++)
			row[d] = prior(&r->targets[i], p->domains[d] ? p->domains[d] : "");
		row[r->n_domains] = prior(&r->targets[i], ROUTER_DEFAULT_DOMAIN);
	}
	*ret = r;
	return 0;
}

size_t router_n_domains(const struct router *r)
{
	return r ? r->n_domains : 0;
}

double router_quality_of(const struct router *r, size_t i, size_t d)
{
	if (!r || i >= r->n || d > r->n_domains)
		return 0;
	return r->qtab[i * (r->n_domains + 1) + d];
}

struct router *router_free(struct router *r)
{
	if (r) {
		free(r->qtab);
		free(r->targets);
		free(r);
	}
	return NULL;
}

size_t router_n_targets(const struct router *r)
{
	return r ? r->n : 0;
}

const struct router_target *router_get_target(const struct router *r, size_t i)
{
	return r && i < r->n ? &r->targets[i] : NULL;
}

const char *router_trigger_name(enum router_trigger t)
{
	switch (t) {
	case ROUTER_TRIGGER_ERROR:
		return "error";
	case ROUTER_TRIGGER_CONTEXT:
		return "context";
	case ROUTER_TRIGGER_POLICY:
		return "policy";
	}
	return "error";
}

static double prior(const struct router_target *t, const char *domain)
{
	double q = ROUTER_NEUTRAL_QUALITY;

	/* A measured (or seeded) quality for the target itself says it all. */
	for (size_t i = 0; i < t->n_quality; i++)
		if (strcmp(t->quality[i].domain, domain) == 0)
			return t->quality[i].quality;
	/* Else a local adapter made for the domain beats the bare base there. */
	if (t->tier == 0 && t->adapter)
		for (size_t i = 0; i < t->n_domains; i++)
			if (t->domains[i] && strcmp(t->domains[i], domain) == 0) {
				q += ROUTER_ADAPTER_BONUS;
				break;
			}
	return q;
}

double router_expected_quality(const struct router *r, size_t i, const struct router_query *q)
{
	const struct router_target *t;
	double sum = 0, mass = 0;

	if (!r || i >= r->n)
		return 0;
	t = &r->targets[i];
	if (q && q->posterior_idx) {
		const double *row = &r->qtab[i * (r->n_domains + 1)];
		for (size_t d = 0; d < r->n_domains; d++) {
			double p = q->posterior_idx[d];
			if (p > 0) {
				sum += p * row[d];
				mass += p;
			}
		}
		return mass > 0 ? sum / mass : row[r->n_domains];
	}
	if (!q || !q->posterior || q->n_posterior == 0)
		return prior(t, ROUTER_DEFAULT_DOMAIN);
	for (size_t k = 0; k < q->n_posterior; k++) {
		double p = q->posterior[k].p;
		if (!(p > 0) || !q->posterior[k].domain)
			continue;
		sum += p * prior(t, q->posterior[k].domain);
		mass += p;
	}
	/* A posterior that does not sum to one is normalised; an empty one is neutral. */
	return mass > 0 ? sum / mass : prior(t, ROUTER_DEFAULT_DOMAIN);
}

static int cmp_candidates(const void *a, const void *b, void *userdata)
{
	const struct router_candidate *x = a, *y = b;
	const struct router *r = userdata;

	if (x->usable != y->usable)
		return x->usable ? -1 : 1;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	if (r->targets[x->target].tier != r->targets[y->target].tier)
		return r->targets[x->target].tier < r->targets[y->target].tier ? -1 : 1;
	return x->target < y->target ? -1 : x->target > y->target;
}

/* Scores target i for q into c; returns why it is excluded (static text) or NULL. */
static const char *score(const struct router *r, size_t i, const struct policy_decision *d,
			 const struct router_query *q, struct router_candidate *c)
{
	const struct router_target *t = &r->targets[i];
	uint32_t need_mod = q->modalities ? q->modalities : CONFIG_MODALITY_TEXT;
	uint32_t has_mod = t->modalities ? t->modalities : CONFIG_MODALITY_TEXT;
	double out_tokens = q->max_tokens ? q->max_tokens : 256;

	*c = (struct router_candidate){ .target = i };
	c->quality = router_expected_quality(r, i, q);
	c->cost = (t->cost_in * q->prompt_tokens + t->cost_out * out_tokens) / 1e6;
	c->latency_s = t->remote ? remote_target_latency_ms(t->remote) / 1000.0 : 0.0;
	c->score = c->quality - r->p.cost_weight * c->cost - r->p.latency_weight * c->latency_s;
	if ((need_mod & has_mod) != need_mod)
		c->why_unusable = "lacks the request's modality";
	else if (t->context_tokens != 0 &&
		 (uint64_t) q->prompt_tokens + q->max_tokens > t->context_tokens)
		c->why_unusable = "context too small";
	else if (t->remote && !remote_target_available(t->remote))
		c->why_unusable = "down (cooling down after failures)";
	c->usable = !c->why_unusable;

	if (!policy_tier_allowed(d, t->tier, t->tier == 0 || t->user_controlled))
		return t->tier == 2 && !t->user_controlled && (d->permitted_tiers & POLICY_TIER(2))
			       ? "T2 needs a user-controlled target"
			       : "tier not permitted by the policy";
	/* T3 without redaction would hand a personal value to someone else's server. */
	if (t->tier == 3 && d->class != POLICY_CLASS_PUBLIC && !d->redact_for_t3)
		return "T3 needs redaction, which the policy does not allow";
	if (q->local_only && t->tier != 0)
		return "the request named a local model";
	if (t->tier == 0 && q->require_adapter &&
	    !(t->adapter && strcmp(t->adapter, q->require_adapter) == 0))
		return "the request named another adapter";
	if (t->tier == 0 && t->adapter && (q->base_only || (!q->require_adapter && q->local_only)))
		return "the request named the base model";
	if (q->allow && !q->allow(t, q->allow_userdata))
		return "the caller may not use it";
	if (q->budget > 0 && c->cost > q->budget)
		return ROUTER_EXCLUDED_BUDGET;
	return NULL;
}

size_t router_explain(const struct router *r, const struct policy_decision *d,
		      const struct router_query *q, struct router_explained *out, size_t cap)
{
	struct router_query dq = { 0 };

	if (!r || !d)
		return 0;
	if (!q)
		q = &dq;
	for (size_t i = 0; i < r->n && i < cap; i++)
		out[i].excluded = score(r, i, d, q, &out[i].c);
	return r->n;
}

int router_plan_new(const struct router *r, const struct policy_decision *d,
		    const struct router_query *q, struct router_plan *plan)
{
	struct router_query dq = { 0 };

	assert_return(r && d && plan, -EINVAL);
	if (!q)
		q = &dq;
	plan->n = 0;
	plan->pos = 0;
	plan->fallbacks = 0;
	plan->max_fallbacks = r->p.max_fallbacks;
	for (size_t i = 0; i < r->n; i++) {
		if (score(r, i, d, q, &plan->c[plan->n]))
			continue;
		plan->tried[plan->n] = false;
		plan->n++;
	}
	if (plan->n == 0)
		return -ENOENT;
	qsort_r(plan->c, plan->n, sizeof(plan->c[0]), cmp_candidates, (void *) r);
	plan->tried[0] = true;
	return 0;
}

const struct router_target *router_plan_current(const struct router *r,
						const struct router_plan *plan)
{
	if (!r || !plan || plan->pos >= plan->n)
		return NULL;
	return &r->targets[plan->c[plan->pos].target];
}

int router_plan_next(const struct router *r, struct router_plan *plan, enum router_trigger t)
{
	const struct router_target *cur;

	assert_return(r && plan && plan->pos < plan->n, -EINVAL);
	if (plan->fallbacks >= plan->max_fallbacks)
		return -ELOOP;
	cur = &r->targets[plan->c[plan->pos].target];
	for (size_t i = 0; i < plan->n; i++) {
		const struct router_target *x = &r->targets[plan->c[i].target];

		if (plan->tried[i])
			continue;
		if (t == ROUTER_TRIGGER_CONTEXT && cur->context_tokens > 0 &&
		    x->context_tokens > 0 && x->context_tokens <= cur->context_tokens)
			continue;
		if (t == ROUTER_TRIGGER_POLICY && x->tier == cur->tier)
			continue;
		/* Another adapter of the same engine fails the same way when it is down. */
		if (t == ROUTER_TRIGGER_ERROR && cur->remote && x->remote == cur->remote)
			continue;
		plan->tried[i] = true;
		plan->pos = i;
		plan->fallbacks++;
		return 0;
	}
	return -ENOENT;
}

/* The position router_plan_escalate() would take, or -1. */
static ssize_t escalation(const struct router *r, const struct router_plan *plan,
			  unsigned from_tier, double budget_left)
{
	unsigned best_tier = 4;
	ssize_t best = -1;

	/* The plan is ranked best first: the first fit of the lowest tier above wins. */
	for (size_t i = 0; i < plan->n; i++) {
		unsigned tier = r->targets[plan->c[i].target].tier;

		if (plan->tried[i] || !plan->c[i].usable || tier <= from_tier || tier >= best_tier)
			continue;
		if (budget_left >= 0 && plan->c[i].cost > budget_left)
			continue;
		best_tier = tier;
		best = (ssize_t) i;
	}
	return best;
}

int router_plan_escalate(const struct router *r, struct router_plan *plan, unsigned from_tier,
			 double budget_left)
{
	ssize_t i;

	assert_return(r && plan, -EINVAL);
	i = escalation(r, plan, from_tier, budget_left);
	if (i < 0)
		return -ENOENT;
	plan->tried[i] = true;
	plan->pos = (size_t) i;
	return 0;
}

bool router_plan_can_escalate(const struct router *r, const struct router_plan *plan,
			      unsigned from_tier, double budget_left)
{
	return r && plan && escalation(r, plan, from_tier, budget_left) >= 0;
}

size_t router_plan_topk(struct router_plan *plan, size_t k, size_t *ret_pos)
{
	size_t n = 0;

	for (size_t i = 0; plan && i < plan->n && n < k; i++) {
		if (!plan->c[i].usable)
			continue;
		plan->tried[i] = true;
		ret_pos[n++] = i;
	}
	return n;
}
