/* SPDX-License-Identifier: MIT */
/*
 * manager-remote.h: the manager's routing (internal to manager.c). Builds the router from the
 * configuration, the loaded adapters and the priors store — T0 "local:<base>" plus one
 * "local:<base>:<adapter>" per loaded adapter, and every [Target NAME] — and runs the
 * requests the router sends anywhere but "plain T0":
 *
 *   classify (domain posterior from the adapters' tags and exemplars) ──▶ plan
 *   (router_plan_new: quality from priors − cost − latency, within the permitted tiers and
 *   the budget) ──▶ prefetch hints for the likely adapters ──▶ one of
 *     plain     the best candidate; T0 goes back to the manager (return 0), a remote target
 *               runs here with the fallback walk (router_plan_next) on errors before text;
 *     cascade   ([Router] ConfidenceThreshold= > 0) the answer of a leg is held back until its
 *               confidence (exp of the mean token log-probability: the local engine's, or
 *               what a remote target reports when asked for logprobs) is known; below the
 *               threshold the next permitted tier is asked (router_plan_escalate, within the
 *               budget); the best answer goes out, with an uncertainty note when it stayed
 *               below the threshold. When no higher tier can be asked the leg streams through
 *               and only the note waits for the end;
 *     mixture   (posterior entropy > MixtureEntropy=) the top-k candidates answer in parallel
 *               (held back) and the one with the highest routing weight × quality ×
 *               confidence goes out.
 *
 * A leg is one attempt on one target. A failure after text went out to the client ends the
 * request with an error. Every walk is bounded by MaxFallbacks=, the candidates and the
 * tiers, so it always ends. Decisions after a leg ends run on the routing thread (never on
 * the scheduler's). A health thread checks the remote targets every HealthCheckSec= (a down
 * target cools down before a request pays for it) and re-reads the priors.
 *
 * [Target] and [Router] are read at start; a reload keeps them (restart to change them).
 * The classifier is rebuilt when adapters are loaded or unloaded.
 */
#pragma once

#include "audit/audit.h"
#include "manager.h"
#include "router/router.h"
#include "targets/remote.h"

struct manager_routing;

struct manager_routing_hooks {
	/* Runs r on this machine's engine (T0) as request id, writing audit a (taken; may be
	 * NULL) when it ends. Events carry id. Returns -errno with err filled; a is then still
	 * the caller's. Never called from the scheduler's thread. */
	int (*local_submit)(void *m, uint64_t id, const struct manager_request *r,
			    struct audit_record *a, manager_event_fn fn, void *userdata,
			    struct manager_error *err);
	int (*local_cancel)(void *m, uint64_t id);
	/* A routed request's final event (stats, audit a: taken, may be NULL). */
	void (*final)(void *m, const struct manager_event *ev, struct audit_record *a);
	/* Makes the remote_target for [Target] t (egress enforcement: a proxy through its
	 * tier's worker); NULL: remote_target_new() in this process. */
	int (*target_new)(void *m, const struct config_target *t, struct remote_target **ret,
			  struct errmsg *e);
	/* A fresh request id (for the legs of a cascade or mixture). */
	uint64_t (*new_id)(void *m);
	/* A hint: bring the adapter's weights in soon. */
	void (*prefetch)(void *m, const char *adapter);
	/* The loaded adapters (manager_foreach_adapter). */
	void (*foreach_adapter)(void *m,
				void (*fn)(const struct manager_adapter_info *a, void *userdata),
				void *userdata);
	/* Whether the caller may use the model (an adapter's name). */
	bool (*may_use)(void *m, const struct manager_caller *caller, const char *model);
	void *m;
};

/* base: the base model's name (T0's target is "local:<base>"). Opens the priors store at
 * <StateDirectory>/priors when the configuration has a state directory, and seeds it from
 * the [Target] Quality.DOMAIN= keys. */
int manager_routing_new(const struct config *c, const char *base,
			const struct manager_routing_hooks *hooks, struct manager_routing **ret,
			struct errmsg *e);
/* Starts the routing and health threads. */
int manager_routing_start(struct manager_routing *rt);
/* Cancels the routed requests in flight and waits for their final events. NULL-safe. */
struct manager_routing *manager_routing_free(struct manager_routing *rt);

/* Whether the router has anything to choose (remote targets, or adapters with domains). */
bool manager_routing_active(struct manager_routing *rt);
/* Rebuilds the classifier and the T0 candidates from the loaded adapters. */
int manager_routing_adapters_changed(struct manager_routing *rt);
/* Re-reads the priors store into the router. */
int manager_routing_refresh(struct manager_routing *rt);

/*
 * Chooses for r under d (r names no model, or the base: base_only). Returns 0 when the plain
 * choice is T0: the caller runs it, on *ret_adapter (malloc'd; NULL: the base), with audit
 * target/tier/route filled; 1 when the request was started here (the callback gets its
 * events as id; a taken), or -errno with err (FORBIDDEN when no permitted target exists).
 */
int manager_routing_submit(struct manager_routing *rt, uint64_t id,
			   const struct manager_request *r, const struct manager_caller *caller,
			   bool base_only, const struct policy_decision *d, struct audit_record **a,
			   manager_event_fn fn, void *userdata, char **ret_adapter,
			   struct manager_error *err);
/* -ENOENT when id is not a routed request in flight. */
int manager_routing_cancel(struct manager_routing *rt, uint64_t id);

int manager_routing_explain(struct manager_routing *rt, const struct manager_request *r,
			    const struct manager_caller *caller, bool base_only,
			    const struct policy_decision *d, struct manager_route_explain *ret);
