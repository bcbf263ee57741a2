/* SPDX-License-Identifier: MIT */
/*
 * priors.h: capability priors — the router's running estimate of answer quality per
 * (domain, target), kept in LMDB under <StateDirectory>/priors (data.mdb + lock.mdb).
 *
 * Targets are named "local:BASE[:ADAPTER]" (T0: the engine with that adapter) or "tN:NAME"
 * (a [Target NAME] on tier N); domains are the adapters' domain tags. Any printable name
 * without spaces up to PRIORS_NAME_MAX-1 bytes is accepted; the router owns the naming.
 *
 * Estimate: an exponentially weighted moving average with a count. A seed (from config,
 * [Target NAME] Quality.DOMAIN=) counts as one observation; the k-th recorded score enters
 * with weight a = max(alpha, 1/(k + seeded)), so the first scores average plainly and later
 * ones decay at alpha (default 0.1). Without a seed the first score is the mean.
 * Scores and seeds are quality in [0, 1].
 *
 * Threading/processes: one struct priors per store per process (LMDB's rule); reads from
 * any thread, writes serialised by LMDB's writer lock, also across processes (`molly priors
 * record` while the daemon runs).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

#define PRIORS_NAME_MAX 200        /* bytes of a domain or target name, NUL included */
#define PRIORS_DEFAULT_ALPHA 0.1
#define PRIORS_DEFAULT_MAP_SIZE (16ull << 20)

struct priors_options {
	double alpha;          /* EWMA floor weight in (0, 1]; 0: PRIORS_DEFAULT_ALPHA */
	uint64_t map_size;     /* 0: PRIORS_DEFAULT_MAP_SIZE */
	bool read_only;        /* never creates anything; -ENOENT when there is no store */
	bool no_sync;          /* tests only */
};

struct priors;

/* dir: the store directory itself (e.g. <StateDirectory>/priors); created (0700) unless
 * read_only. */
int priors_open(const char *dir, const struct priors_options *o, struct priors **ret,
		struct errmsg *e);
struct priors *priors_close(struct priors *p);
DEFINE_CLEANUP_FUNC(struct priors *, priors_close, NULL)

/* Validates a domain or target name: -EINVAL with a reason. */
int priors_check_name(const char *what, const char *name, struct errmsg *e);

/* Sets the seed of (domain, target). A new entry starts at the seed with count 0; an entry
 * with no recorded scores moves to the new seed; one with scores keeps its mean (the seed is
 * stored for `molly priors list`). -EINVAL: bad name or seed outside [0, 1]. */
int priors_seed(struct priors *p, const char *domain, const char *target, double seed,
		struct errmsg *e);
/* Records one evaluation score in [0, 1] (see the EWMA above); ret_mean (may be NULL): the
 * new mean. -EINVAL: bad name, NaN or out of range; -EROFS on a read-only store. */
int priors_record(struct priors *p, const char *domain, const char *target, double score,
		  double *ret_mean, struct errmsg *e);
/* The estimate for (domain, target): 0 and *mean, *count (scores recorded; 0 when only
 * seeded); -ENOENT when neither seeded nor recorded. mean/count may be NULL. */
int priors_get(struct priors *p, const char *domain, const char *target, double *mean,
	       uint64_t *count);

struct priors_entry {
	const char *domain;
	const char *target;
	double mean;
	uint64_t count;
	bool seeded;
	double seed;           /* valid when seeded */
	uint64_t updated_ns;   /* CLOCK_REALTIME of the last change */
};
/* Calls fn for every entry in (domain, target) byte order; fn returning < 0 stops and is
 * returned. Strings are valid during the call only. */
int priors_foreach(struct priors *p, int (*fn)(const struct priors_entry *en, void *userdata),
		   void *userdata, struct errmsg *e);
/* Removes (domain, target); -ENOENT when absent. */
int priors_forget(struct priors *p, const char *domain, const char *target, struct errmsg *e);
