/* SPDX-License-Identifier: MIT */
/* evict.c: LRU and GreedyDual-Size-Frequency priorities (see evict.h). */
#include <errno.h>
#include <string.h>

#include "evict.h"

const char *evict_policy_name(enum evict_policy p)
{
	return p == EVICT_LRU ? "lru" : "gdsf";
}

int evict_policy_from_name(const char *name, enum evict_policy *ret)
{
	if (strcmp(name, "gdsf") == 0)
		*ret = EVICT_GDSF;
	else if (strcmp(name, "lru") == 0)
		*ret = EVICT_LRU;
	else
		return -EINVAL;
	return 0;
}

static void reprioritize(enum evict_policy p, const struct evict_clock *c, struct evict_meta *m)
{
	if (p == EVICT_LRU)
		m->priority = (double) m->last_use;
	else
		/* cost per byte: a small adapter that is slow to bring back per byte it holds
		 * (fixed latency dominates) is worth more of the tier than a big cheap one */
		m->priority = c->inflation + (double) m->freq * m->cost /
						     (double) (m->bytes ? m->bytes : 1);
}

void evict_insert(enum evict_policy p, struct evict_clock *c, struct evict_meta *m)
{
	m->last_use = ++c->tick;
	m->freq = 1;
	reprioritize(p, c, m);
}

void evict_hit(enum evict_policy p, struct evict_clock *c, struct evict_meta *m)
{
	m->last_use = ++c->tick;
	m->freq++;
	reprioritize(p, c, m);
}

bool evict_before(const struct evict_meta *a, const struct evict_meta *b)
{
	if (a->priority != b->priority)
		return a->priority < b->priority;
	return a->last_use < b->last_use;
}

void evict_removed(enum evict_policy p, struct evict_clock *c, const struct evict_meta *victim)
{
	if (p == EVICT_GDSF && victim->priority > c->inflation)
		c->inflation = victim->priority;
}
