/* SPDX-License-Identifier: MIT */
/*
 * tiers.h: the warm tier of adapter blobs and the thread that fills it.
 *
 *   cold  the registry blob on disk
 *   warm  the whole blob in host memory on the readers' NUMA node, mlock'ed, its SHA-256
 *         checked (this module), at most warm_bytes in all
 *   hot   the adapter's rows in the scheduler's page pool (sched.c: built from the warm copy)
 *
 * A blob asked for while cold is queued for the loader threads (two by default, one blob
 * each at a time; blob-load.h: io_uring, hash overlapped), so the caller never waits for the
 * disk; the scheduler keeps computing other
 * requests and asks again on later steps. Room in the warm tier is made by evict.h's policy
 * among copies nobody is reading and nobody pinned. A blob that fails to load (corrupt,
 * truncated, read error) is marked bad with the reason: every later ask gets TIER_BAD and the
 * message, nothing else is affected.
 *
 * Threading: every call is safe from any thread (one mutex inside; the callbacks run on the
 * loader thread with it released). A blob handle stays valid until tiers_remove().
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "../loader/blob-load.h"
#include "../loader/numa-place.h"
#include "evict.h"

enum tier_state {
	TIER_COLD,
	TIER_LOADING,
	TIER_WARM,
	TIER_BAD,
};

/* "cold", "loading", "warm", "bad" */
const char *tier_state_name(enum tier_state s);

#define TIERS_MAX_LOADERS 4

struct tiers_params {
	uint64_t warm_bytes;           /* the warm tier's size ([Adapters] WarmBytes=) */
	uint32_t loaders;              /* loader threads, each one blob at a time (0: 2) */
	enum evict_policy eviction;
	struct blob_loader_params loader;
	const uint32_t *cpus;          /* the CPUs that read warm copies (NULL: all) */
	size_t n_cpus;
	const struct numa_topology *topology; /* NULL: the system's (libnuma) */
	/* A load finished (warm or bad): the scheduler wakes and admits what waited. */
	void (*on_change)(void *userdata);
	/* A blob failed its load: corrupt (-EBADMSG), truncated or unreadable (-EIO). */
	void (*on_bad)(const char *key, int error, const char *message, void *userdata);
	void *userdata;
};

struct tiers;
struct tier_blob;

int tiers_new(const struct tiers_params *p, struct tiers **ret);
/* Stops the loader thread (a load in progress finishes first) and frees every copy. */
struct tiers *tiers_free(struct tiers *t);
DEFINE_CLEANUP_FUNC(struct tiers *, tiers_free, NULL)

/* A blob the tier may hold: key (e.g. "sha256:HEX") for messages, its file and the SHA-256 it
 * must have. Starts cold. */
int tiers_add(struct tiers *t, const char *key, const char *path, const uint8_t sha256[32],
	      struct tier_blob **ret);
/* Drops the blob and its warm copy (a load in progress is abandoned when it ends). */
void tiers_remove(struct tiers *t, struct tier_blob *b);

/*
 * Asks for the blob warm. Returns its state: WARM (tiers_get() now succeeds), LOADING
 * (queued or being read: ask again later), BAD (tiers_bad() says why). A cold blob is queued.
 * count: this ask is a request's first (hits and misses are counted once per request).
 */
enum tier_state tiers_want(struct tiers *t, struct tier_blob *b, bool count);
/* Blocks until the blob is warm (0) or bad (its -errno and message). For pins. */
int tiers_wait(struct tiers *t, struct tier_blob *b, struct errmsg *e);
/* The warm copy, held against eviction until tiers_put(); NULL when not warm. */
const void *tiers_get(struct tiers *t, struct tier_blob *b, size_t *ret_bytes);
void tiers_put(struct tiers *t, struct tier_blob *b);
/* A pinned blob's warm copy is never evicted. */
void tiers_pin(struct tiers *t, struct tier_blob *b, bool pin);
/* A waiting request needs the blob (need true; false when it no longer does): its warm copy
 * is not evicted while any does, so loads for requests further back cannot evict it before
 * its request runs. Counted. */
void tiers_need(struct tiers *t, struct tier_blob *b, bool need);
/* Why the blob is bad (the error, with the message copied to e). 0 when it is not. */
int tiers_bad(struct tiers *t, struct tier_blob *b, struct errmsg *e);
/* Marks the blob bad without reading it (a mark kept from an earlier run, checked again by
 * the caller): every ask gets TIER_BAD and the message. */
void tiers_mark_bad(struct tiers *t, struct tier_blob *b, int error, const char *message);
/* Forget a bad mark (the blob was repaired): the next ask loads it again. */
void tiers_clear_bad(struct tiers *t, struct tier_blob *b);

struct tier_blob_info {
	enum tier_state state;
	uint64_t bytes;        /* the blob's size (warm copy's when warm) */
	int node;              /* the warm copy's NUMA node (-1: unbound or not warm) */
	bool locked;           /* the warm copy is mlock'ed */
	uint64_t hits, misses; /* warm tier, per request */
	uint64_t load_ns;      /* the last cold → warm load (0: never) */
};
void tiers_blob_info(struct tiers *t, struct tier_blob *b, struct tier_blob_info *ret);

struct tiers_stats {
	uint64_t warm_budget;
	uint64_t warm_bytes;     /* held by warm copies (and loads in progress) */
	uint64_t warm_locked;
	uint32_t warm_blobs;
	uint64_t hits, misses, evictions;
	uint64_t loads, load_failures;
	uint64_t bytes_read[_BLOB_PATH_MAX]; /* per path that really ran */
	uint64_t load_ns, hash_ns;           /* summed over loads */
	uint64_t busy_ns;                    /* wall time with at least one load reading: bytes
					      * read ÷ this is the loaders' bandwidth */
	enum blob_path last_path;
	const char *hash_impl;               /* "sha-ni" or "scalar" */
	char note[320];                      /* loader and warm-memory fallbacks ("" when none) */
};
void tiers_get_stats(struct tiers *t, struct tiers_stats *ret);
/* For tests: warm bytes never above the budget, counts add up. 0 or -EUCLEAN. */
int tiers_check(struct tiers *t);

/* Tests: while held, the loader thread starts no load (makes "still cold" certain). */
void tiers_test_hold_loads(struct tiers *t, bool hold);
