/* SPDX-License-Identifier: MIT */
/*
 * client.h: the core's side of the egress workers. One molly-egress process per remote tier
 * that has [Target]s, started into the tier's cgroup by the privileged helper (egress.h), and
 * given that tier's targets; the router's remote targets for those tiers are proxies
 * (remote_target_new_transport) whose calls go to the worker over proto.h:
 *
 *   remote_submit(proxy) ── permitted tiers include the worker's tier? ──▶ SUBMIT ──▶ worker
 *        events ◀── EVENT (only for calls this tier's worker was given) ◀──┘
 *   ENDPOINTS g from a worker ──▶ checked (its targets, their ports, a numeric host's own
 *        address) ──▶ egress_set_allowed(tier, endpoints ∪ previous ∪ resolvers:53) ──▶ ALLOWED g
 *   a worker's socket closes ──▶ its calls end with ERROR "down" (the router falls back) ──▶
 *        restarted into its cgroup after a backoff (100 ms doubling to 30 s; reset after a
 *        minute up) ──▶ CONFIGURE again
 *   egress_fd readable ──▶ egress_process ──▶ on_denial (audit record, journal warning)
 *
 * Modes: ENFORCED (egress_start() succeeded), DISABLED (Enforce=yes but the start failed:
 * every remote call ends with ERROR "blocked" saying why, T0 keeps serving), and PLAIN, for
 * tests only: the workers are plain children without a cgroup or filter (never chosen by the
 * daemon). With Enforce=no the daemon makes no client at all and calls run in-process.
 *
 * What a worker says is checked like any untrusted input: a message that does not decode, an
 * event for a call it was not given, or an endpoint that is not one of its targets' gets the
 * worker killed and restarted.
 *
 * Threading: one supervisor thread owns the workers' sockets (reads), the egress handle, the
 * restarts and the timers; events and denials are delivered on it. The proxies' submit and
 * cancel may be called from any thread (they write to the socket under its lock).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "basic/errmsg.h"
#include "core/config.h"
#include "egress/egress.h"
#include "targets/remote.h"

enum egress_client_mode {
	EGRESS_CLIENT_ENFORCED,
	EGRESS_CLIENT_DISABLED,
	EGRESS_CLIENT_PLAIN, /* tests only */
};

struct egress_client_options {
	enum egress_client_mode mode;
	struct egress *eg;             /* ENFORCED: taken (freed by egress_client_free) */
	const char *worker_path;       /* PLAIN: the molly-egress to fork+exec; else argv[0] */
	const char *disabled_reason;   /* DISABLED: why (said in every refusal and in Status) */
	uint64_t resolve_interval_ns;  /* passed to the workers; 0: their default */
	/* TEST ONLY (MOLLY_EGRESS_TEST=1): per tier, --test-wrong-target for its worker. */
	const char *test_wrong_target[4];
	void (*on_denial)(const struct egress_denial *d, void *userdata);
	void *userdata;
};

struct egress_client;

int egress_client_new(const struct egress_client_options *o, struct egress_client **ret,
		      struct errmsg *e);
/* Stops the workers (their calls end with ERROR), then the helper. NULL-safe. */
struct egress_client *egress_client_free(struct egress_client *c);
DEFINE_CLEANUP_FUNC(struct egress_client *, egress_client_free, NULL)

enum egress_client_mode egress_client_mode(const struct egress_client *c);
/* "enforced", "disabled: <reason>", "plain (test)". */
const char *egress_client_status(const struct egress_client *c);

/*
 * Gives every tier its [Target]s from cfg (start and reload) and waits up to wait_ns until
 * each configured tier's worker runs with an allow-list for them. At the first call the
 * tiers that have targets are fixed (the router's proxies exist for them); on a reload a
 * target that is new or moved to another tier is ignored with a warning in the return
 * (> 0, reason in e). Returns 0, > 0 (warnings or a tier not ready in time), or -errno.
 */
int egress_client_configure(struct egress_client *c, const struct config *cfg, uint64_t wait_ns,
			    struct errmsg *e);

/* The router's remote_target for [Target] t: a proxy through t's tier's worker. */
int egress_client_target_new(struct egress_client *c, const struct config_target *t,
			     struct remote_target **ret, struct errmsg *e);

/* The pid of a tier's worker (0 when not running), for tests and Status. */
pid_t egress_client_worker_pid(struct egress_client *c, unsigned tier);
/* How many times a tier's worker was (re)started. */
unsigned egress_client_worker_starts(struct egress_client *c, unsigned tier);
