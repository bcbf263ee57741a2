/* SPDX-License-Identifier: MIT */
/*
 * manager-remote-snap.h: the routing state that manager-remote.c (routed requests) and
 * manager-remote-snap.c (the snapshots it routes with) share. Private to those two files.
 *
 * A snapshot holds the router, its candidate targets with their quality entries, the local
 * adapters and the classifier: rebuilt as a whole when adapters or priors change and swapped
 * under rt->lock, so a request routes with one consistent view from start to end.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "manager-remote.h"
#include "router/classify.h"
#include "router/router.h"

struct mroute;

struct rclass {
	atomic_uint refs;
	struct classify_model *model;
};

struct local_adapter {
	char *adapter;
	char *target;   /* "local:BASE:ADAPTER" */
	char **domains;
	size_t n_domains;
};

struct rsnap {
	atomic_uint refs;
	struct router *router;
	struct router_target *targets;
	struct router_quality **qual; /* per target */
	size_t n;
	struct local_adapter *ads;
	size_t n_ads;
	struct rclass *cls;           /* may be NULL */
	bool has_domain_adapters;
};

struct manager_routing {
	struct config *config;             /* a reference: the targets' strings live in it */
	struct manager_routing_hooks hooks;
	char *base;
	char *local_name;                  /* "local:<base>" */
	struct remote_target **remotes;    /* per [Target], in config order */
	char **remote_keys;                /* "tN:NAME": the priors' target names */
	size_t n_remotes;
	struct priors *priors;             /* NULL without a state directory */

	double threshold, mixture_entropy, budget;
	uint32_t mixture_k;
	uint64_t health_ns;
	/* TEST ONLY (MOLLY_EGRESS_TEST=1 MOLLY_EGRESS_TEST_SKIP_CORE_DETECTORS=1): the core runs
	 * no detector, the T3 redaction's second look included, so the egress worker's own
	 * check is all that stands (tests/integration/egress-negative.sh). */
	bool test_skip_core_detectors;

	pthread_mutex_t lock;
	pthread_cond_t idle;
	struct rsnap *snap;
	struct rclass *cls;
	struct mroute *active;
	unsigned n_active;
	pthread_mutex_t build_lock;        /* one rebuild at a time */

	pthread_mutex_t work_lock;
	pthread_cond_t work_cond;
	struct mroute *work_head;
	bool stopping;
	pthread_t worker, health;
	bool worker_started, health_started;
};

/* Drop a reference; the last frees. Return NULL. */
struct rclass *rclass_unref(struct rclass *c);
struct rsnap *rsnap_unref(struct rsnap *s);
/* The current snapshot with a reference taken, or NULL before the first build. */
struct rsnap *snap_get(struct manager_routing *rt);
