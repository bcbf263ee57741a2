/* SPDX-License-Identifier: MIT */
/*
 * evict.h: which cached adapter to drop when a tier is full — the policy alone, as pure
 * functions over per-entry records, so the scheduler's hot and warm tiers and the trace
 * simulator (molly-bench --tier-sim) run the very same code.
 *
 *   lru   priority = the tick of the last use
 *   gdsf  GreedyDual-Size-Frequency: priority = L + frequency × cost ÷ size, where cost is the
 *         measured time to bring the entry back and L (the "inflation") rises to the priority
 *         of each entry evicted, so entries not used for a while age out whatever their value
 * The victim is the evictable entry with the lowest priority (ties: the least recently used).
 * Callers skip pinned and in-use entries themselves: the policy never sees them.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

enum evict_policy {
	EVICT_GDSF,
	EVICT_LRU,
};

/* "gdsf", "lru" */
const char *evict_policy_name(enum evict_policy p);
int evict_policy_from_name(const char *name, enum evict_policy *ret);

/* One tier's clock. */
struct evict_clock {
	uint64_t tick;   /* uses so far */
	double inflation; /* GDSF's L */
};

struct evict_meta {
	uint64_t last_use; /* tick */
	uint64_t freq;     /* uses since it entered the tier */
	uint64_t bytes;
	double cost;       /* seconds to bring it back into the tier (measured; estimate before) */
	double priority;
};

/* The entry entered the tier (freq restarts at 1) or was used while in it. */
void evict_insert(enum evict_policy p, struct evict_clock *c, struct evict_meta *m);
void evict_hit(enum evict_policy p, struct evict_clock *c, struct evict_meta *m);
/* true when a should be evicted before b. */
bool evict_before(const struct evict_meta *a, const struct evict_meta *b);
/* The victim left the tier: GDSF's L rises to its priority. */
void evict_removed(enum evict_policy p, struct evict_clock *c, const struct evict_meta *victim);
