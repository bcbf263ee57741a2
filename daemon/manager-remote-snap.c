/* SPDX-License-Identifier: MIT */
/*
 * manager-remote-snap.c: the routing snapshots (see manager-remote-snap.h): the candidate
 * targets (the base, one per loaded adapter, one per [Target]) with their qualities from the
 * priors store or the configuration's seeds, the classifier trained on the adapters' domain
 * tags and exemplars, and the router over them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "lora/adapter.h"
#include "manager-remote-snap.h"
#include "router/priors.h"

struct rclass *rclass_unref(struct rclass *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
		classify_model_free(c->model);
		free(c);
	}
	return NULL;
}

static void local_adapters_free(struct local_adapter *a, size_t n)
{
	for (size_t i = 0; a && i < n; i++) {
		free(a[i].adapter);
		free(a[i].target);
		for (size_t k = 0; k < a[i].n_domains; k++)
			free(a[i].domains[k]);
		free(a[i].domains);
	}
	free(a);
}

struct rsnap *rsnap_unref(struct rsnap *s)
{
	if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
		router_free(s->router);
		for (size_t i = 0; s->qual && i < s->n; i++)
			free(s->qual[i]);
		free(s->qual);
		free(s->targets);
		local_adapters_free(s->ads, s->n_ads);
		rclass_unref(s->cls);
		free(s);
	}
	return NULL;
}

struct rsnap *snap_get(struct manager_routing *rt)
{
	struct rsnap *s;

	pthread_mutex_lock(&rt->lock);
	s = rt->snap;
	if (s)
		atomic_fetch_add(&s->refs, 1);
	pthread_mutex_unlock(&rt->lock);
	return s;
}

/* ---- building ---- */

struct ad_collect {
	struct local_adapter *v;
	size_t n, cap;
	const char *base;
	struct classify_set *set;  /* when rebuilding the classifier */
	int error;
};

static void collect_adapter(const struct manager_adapter_info *a, void *userdata)
{
	struct ad_collect *c = userdata;
	struct local_adapter *x;

	if (!a->loaded || c->error < 0)
		return;
	if (c->n == c->cap) {
		size_t cap = MAX((size_t) 8, c->cap * 2);
		struct local_adapter *v = realloc(c->v, cap * sizeof(*v));
		if (!v) {
			c->error = -ENOMEM;
			return;
		}
		c->v = v;
		c->cap = cap;
	}
	x = &c->v[c->n];
	*x = (struct local_adapter){ 0 };
	x->adapter = strdup(a->name);
	if (asprintf(&x->target, "local:%s:%s", c->base, a->name) < 0)
		x->target = NULL;
	x->domains = calloc(MAX(a->n_domains, (size_t) 1), sizeof(char *));
	c->n++;
	if (!x->adapter || !x->target || !x->domains) {
		c->error = -ENOMEM;
		return;
	}
	for (size_t i = 0; i < a->n_domains; i++) {
		x->domains[i] = strdup(a->domains[i]);
		if (!x->domains[i]) {
			c->error = -ENOMEM;
			return;
		}
		x->n_domains++;
	}
	if (c->set && a->n_domains > 0) {
		/* The classifier learns each domain from the adapter's tags and exemplars; an
		 * adapter it cannot take (a tag that is not a domain name) is left out of the
		 * classifier only. */
		struct lora_adapter_meta meta = { .name = (char *) a->name,
						  .domains = (char **) a->domains,
						  .n_domains = a->n_domains,
						  .exemplars = (char **) a->exemplars,
						  .n_exemplars = a->n_exemplars };
		struct errmsg e = { { 0 } };
		(void) classify_set_add_adapter(c->set, &meta, &e);
	}
}

/* The quality entries of a target: for every classifier domain and "general", the priors
 * store's estimate, else the configuration's seed. */
static int qualities_for(struct manager_routing *rt, const char *key,
			 const struct config_target *ct, const struct classify_model *cls,
			 struct router_quality **ret, size_t *ret_n)
{
	size_t nd = cls ? classify_n_domains(cls) : 0;
	size_t cap = nd + 1 + (ct ? ct->n_quality : 0), n = 0;
	struct router_quality *q = calloc(MAX(cap, (size_t) 1), sizeof(*q));

	if (!q)
		return -ENOMEM;
	for (size_t i = 0; i <= nd + (ct ? ct->n_quality : 0); i++) {
		const char *dom;
		double mean = 0;
		bool have = false, dup = false;

		if (i < nd)
			dom = classify_domain_name(cls, i);
		else if (i == nd)
			dom = ROUTER_DEFAULT_DOMAIN;
		else
			dom = ct->quality[i - nd - 1].domain;
		for (size_t k = 0; k < n; k++)
			if (strcmp(q[k].domain, dom) == 0)
				dup = true;
		if (dup)
			continue;
		if (rt->priors && priors_get(rt->priors, dom, key, &mean, NULL) >= 0)
			have = true;
		for (size_t k = 0; !have && ct && k < ct->n_quality; k++)
			if (strcmp(ct->quality[k].domain, dom) == 0) {
				mean = ct->quality[k].quality;
				have = true;
			}
		if (have)
			q[n++] = (struct router_quality){ .domain = dom, .quality = mean };
	}
	*ret = q;
	*ret_n = n;
	return 0;
}

/* A new snapshot from the loaded adapters, the priors and cls (a reference is taken). */
static int snapshot_build(struct manager_routing *rt, struct rclass *cls, struct rsnap **ret,
			  struct classify_set *set)
{
	struct ad_collect ac = { .base = rt->base, .set = set };
	struct rsnap *s;
	struct router_params p;
	const char **dnames = NULL;
	size_t n, nd;
	struct errmsg e = { { 0 } };
	int k;

	rt->hooks.foreach_adapter(rt->hooks.m, collect_adapter, &ac);
	if (ac.error < 0) {
		local_adapters_free(ac.v, ac.n);
		return ac.error;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		local_adapters_free(ac.v, ac.n);
		return -ENOMEM;
	}
	atomic_init(&s->refs, 1);
	s->ads = ac.v;
	s->n_ads = ac.n;
	if (cls) {
		atomic_fetch_add(&cls->refs, 1);
		s->cls = cls;
	}
	n = 1 + s->n_ads + rt->n_remotes;
	if (n > ROUTER_MAX_CANDIDATES)
		/* Past the router's bound the adapters last loaded are not candidates. */
		n = ROUTER_MAX_CANDIDATES;
	s->targets = calloc(n, sizeof(*s->targets));
	s->qual = calloc(n, sizeof(*s->qual));
	if (!s->targets || !s->qual) {
		rsnap_unref(s);
		return -ENOMEM;
	}
	s->n = n;
	for (size_t i = 0; i < n; i++) {
		struct router_target *t = &s->targets[i];
		const struct config_target *ct = NULL;
		const char *key;
		size_t nq = 0;

		if (i == 0) {
			*t = (struct router_target){ .name = rt->local_name, .tier = 0,
						     .user_controlled = true };
			key = rt->local_name;
		} else if (i <= s->n_ads) {
			struct local_adapter *a = &s->ads[i - 1];
			*t = (struct router_target){ .name = a->target,
						     .tier = 0,
						     .user_controlled = true,
						     .adapter = a->adapter,
						     .domains = (const char *const *) a->domains,
						     .n_domains = a->n_domains };
			key = a->target;
			if (a->n_domains > 0)
				s->has_domain_adapters = true;
		} else {
			size_t r = i - 1 - s->n_ads;
			ct = &rt->config->targets[r];
			*t = (struct router_target){ .name = ct->name,
						     .tier = (unsigned) ct->tier,
						     .user_controlled = ct->user_controlled,
						     .cost_in = ct->cost_in,
						     .cost_out = ct->cost_out,
						     .context_tokens = ct->context_tokens,
						     .modalities = ct->modalities,
						     .remote = rt->remotes[r] };
			key = rt->remote_keys[r];
		}
		k = qualities_for(rt, key, ct, s->cls ? s->cls->model : NULL, &s->qual[i], &nq);
		if (k < 0) {
			rsnap_unref(s);
			return k;
		}
		t->quality = s->qual[i];
		t->n_quality = nq;
	}
	nd = s->cls ? classify_n_domains(s->cls->model) : 0;
	if (nd > 0) {
		dnames = calloc(nd, sizeof(char *));
		if (!dnames) {
			rsnap_unref(s);
			return -ENOMEM;
		}
		for (size_t i = 0; i < nd; i++)
			dnames[i] = classify_domain_name(s->cls->model, i);
	}
	p = (struct router_params){ .max_fallbacks = rt->config->router_max_fallbacks,
				    .cost_weight = rt->config->router_cost_weight,
				    .latency_weight = rt->config->router_latency_weight,
				    .domains = dnames,
				    .n_domains = nd };
	k = router_new(s->targets, s->n, &p, &s->router, &e);
	free(dnames);
	if (k < 0) {
		rsnap_unref(s);
		return k;
	}
	*ret = s;
	return 0;
}

static void snap_swap(struct manager_routing *rt, struct rsnap *s, struct rclass *cls)
{
	struct rsnap *old;
	struct rclass *oldc = NULL;

	pthread_mutex_lock(&rt->lock);
	old = rt->snap;
	rt->snap = s;
	if (cls) {
		oldc = rt->cls;
		rt->cls = cls;
	}
	pthread_mutex_unlock(&rt->lock);
	rsnap_unref(old);
	rclass_unref(oldc);
}

int manager_routing_refresh(struct manager_routing *rt)
{
	struct rsnap *s = NULL;
	struct rclass *cls;
	int k;

	pthread_mutex_lock(&rt->build_lock);
	pthread_mutex_lock(&rt->lock);
	cls = rt->cls;
	if (cls)
		atomic_fetch_add(&cls->refs, 1);
	pthread_mutex_unlock(&rt->lock);
	k = snapshot_build(rt, cls, &s, NULL);
	rclass_unref(cls);
	if (k >= 0)
		snap_swap(rt, s, NULL);
	pthread_mutex_unlock(&rt->build_lock);
	return k;
}

int manager_routing_adapters_changed(struct manager_routing *rt)
{
	_cleanup_(classify_set_freep) struct classify_set *set = NULL;
	struct classify_options o = { .seed = 1 };
	struct rclass *cls = NULL;
	struct rsnap *s = NULL;
	struct errmsg e = { { 0 } };
	int k;

	if (!rt)
		return 0;
	k = classify_set_new(&set);
	if (k < 0)
		return k;
	pthread_mutex_lock(&rt->build_lock);
	/* Collects the adapters (and their examples into set) and builds the T0 candidates;
	 * the classifier follows from the same list. */
	k = snapshot_build(rt, NULL, &s, set);
	if (k >= 0 && classify_set_size(set) > 0) {
		cls = calloc(1, sizeof(*cls));
		if (!cls)
			k = -ENOMEM;
		else {
			atomic_init(&cls->refs, 1);
			/* A set the classifier cannot learn from (too few examples) leaves the
			 * router without a posterior ({general: 1}) rather than without a
			 * router. */
			if (classify_build(set, &o, &cls->model, &e) < 0) {
				free(cls);
				cls = NULL;
			}
		}
		rsnap_unref(s);
		s = NULL;
		if (k >= 0)
			k = snapshot_build(rt, cls, &s, NULL);
	}
	if (k >= 0) {
		/* Without adapters with domains there is no classifier: an empty one replaces
		 * the old. */
		if (!cls) {
			pthread_mutex_lock(&rt->lock);
			struct rclass *oldc = rt->cls;
			rt->cls = NULL;
			pthread_mutex_unlock(&rt->lock);
			rclass_unref(oldc);
		}
		snap_swap(rt, s, cls);
	} else
		rclass_unref(cls);
	pthread_mutex_unlock(&rt->build_lock);
	return k;
}
