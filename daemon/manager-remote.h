/* SPDX-License-Identifier: MIT */
/*
 * manager-remote.h: the manager's routing (internal to manager.c). Builds the router from the
 * configuration — T0 "local:<base>" and every [Target NAME] — and runs the requests the
 * router sends to T1..T3 through targets/remote.h, with the fallback walk:
 *
 *   plan (router_plan_new) ──▶ remote_submit ──▶ TEXT (restored from the vault when the
 *   request was redacted for T3) … DONE
 *                            └─ ERROR before any text ──▶ router_plan_next(trigger) ──▶ the
 *                               next remote target, or T0 through the manager's local path
 *
 * A failure after text went out ends the request with an error (the client saw part of an
 * answer; another target would start a different one). The walk is bounded by MaxFallbacks=
 * and the number of candidates, so it always ends.
 *
 * [Target] and [Router] are read at start; a reload keeps them (restart to change them).
 */
#pragma once

#include "audit/audit.h"
#include "manager.h"
#include "router/router.h"
#include "targets/remote.h"

struct manager_routing;

struct manager_routing_hooks {
	/* Runs r on this machine's engine (T0) as request id, writing audit a (taken) when it
	 * ends. Events carry id. Returns -errno with err filled; a is then still the caller's. */
	int (*local_submit)(void *m, uint64_t id, const struct manager_request *r,
			    struct audit_record *a, manager_event_fn fn, void *userdata,
			    struct manager_error *err);
	int (*local_cancel)(void *m, uint64_t id);
	/* A remote request's final event (stats, audit a: taken, may be NULL). */
	void (*final)(void *m, const struct manager_event *ev, struct audit_record *a);
	/* Makes the remote_target for [Target] t (egress enforcement: a proxy through its
	 * tier's worker); NULL: remote_target_new() in this process. */
	int (*target_new)(void *m, const struct config_target *t, struct remote_target **ret,
			  struct errmsg *e);
	void *m;
};

/* base: the base model's name (T0's target is "local:<base>"). */
int manager_routing_new(const struct config *c, const char *base,
			const struct manager_routing_hooks *hooks, struct manager_routing **ret,
			struct errmsg *e);
/* Cancels the remote requests in flight and waits for their final events. NULL-safe. */
struct manager_routing *manager_routing_free(struct manager_routing *rt);

/* Whether any target beyond T0 is configured (else the manager skips routing). */
bool manager_routing_has_remote(const struct manager_routing *rt);

/*
 * Chooses for r under d. Returns 0 when the best permitted target is T0 (the caller runs it;
 * fills audit target/tier), 1 when the request was started remotely (the callback gets its
 * events as id; a taken), or -errno with err (FORBIDDEN when no permitted target exists).
 */
int manager_routing_submit(struct manager_routing *rt, uint64_t id,
			   const struct manager_request *r, const struct policy_decision *d,
			   struct audit_record **a, manager_event_fn fn, void *userdata,
			   struct manager_error *err);
/* -ENOENT when id is not a routed request in flight. */
int manager_routing_cancel(struct manager_routing *rt, uint64_t id);
