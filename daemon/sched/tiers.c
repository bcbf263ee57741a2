/* SPDX-License-Identifier: MIT */
/*
 * tiers.c: the warm tier and its loader thread (see tiers.h).
 *
 * A blob moves COLD → LOADING (queued, then taken by the thread) → WARM, or → BAD. The room a
 * load needs is reserved (evicting warm copies by the policy) before the read starts, so the
 * tier's bytes never exceed the budget, not even while reading.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../basic/sha256.h"
#include "../basic/time-util.h"
#include "../loader/warm.h"
#include "tiers.h"

struct tier_blob {
	char *key, *path;           /* owned */
	uint8_t sha256[32];
	enum tier_state state;
	bool taken;                 /* the loader thread is reading it */
	bool removed;               /* tiers_remove() while taken: freed when the load ends */
	bool pinned;
	uint32_t needed;            /* waiting requests that need it (tiers_need) */
	uint32_t readers;           /* tiers_get() without tiers_put() */
	uint64_t queued_seq;        /* FIFO order of loads */
	uint64_t size_hint;         /* the file's size when added or last seen */
	struct warm_buf buf;
	struct evict_meta meta;
	uint64_t hits, misses, load_ns;
	int error;
	char message[256];
};

struct tiers {
	struct tiers_params p;
	struct numa_topology topo;
	bool have_topo;
	uint32_t *cpus;                    /* owned: the readers when p.cpus is NULL */
	struct warm *warm;                 /* owned */
	/* the loader threads, each with its own loader (ring): small blobs are bound by the
	 * latency of a few reads and the setup around them, so two overlap well */
	struct loader_slot {
		struct tiers *t;
		struct blob_loader *loader; /* owned */
		pthread_t thread;
		bool started;
	} slots[TIERS_MAX_LOADERS];
	uint32_t n_slots;
	pthread_mutex_t lock;
	pthread_cond_t cond;               /* loads queued or finished, room freed, stopping */
	bool stopping, hold;
	struct tier_blob **blobs;          /* owned */
	size_t n_blobs;
	uint64_t queue_seq;
	uint64_t reserved;                 /* bytes of warm copies and loads in progress */
	uint32_t active;                   /* loads reading now */
	uint64_t busy_since;               /* when active went from 0 to 1 */
	struct evict_clock clock;
	struct tiers_stats stats;
};

const char *tier_state_name(enum tier_state s)
{
	static const char *const names[] = { "cold", "loading", "warm", "bad" };

	return s <= TIER_BAD ? names[s] : "?";
}

static void blob_free(struct tiers *t, struct tier_blob *b)
{
	if (!b)
		return;
	if (b->buf.data)
		warm_release(t->warm, &b->buf);
	free(b->key);
	free(b->path);
	free(b);
}

static void drop_copy(struct tiers *t, struct tier_blob *b)
{
	t->reserved -= b->buf.bytes;
	warm_release(t->warm, &b->buf);
	b->state = TIER_COLD;
}

/* Evicts one warm copy that nobody reads or pinned, by the policy. false when none. */
static bool evict_one(struct tiers *t)
{
	struct tier_blob *victim = NULL;

	for (size_t i = 0; i < t->n_blobs; i++) {
		struct tier_blob *b = t->blobs[i];

		if (b->state != TIER_WARM || b->pinned || b->readers > 0 || b->needed > 0)
			continue;
		if (!victim || evict_before(&b->meta, &victim->meta))
			victim = b;
	}
	if (!victim)
		return false;
	evict_removed(t->p.eviction, &t->clock, &victim->meta);
	drop_copy(t, victim);
	t->stats.evictions++;
	return true;
}

static struct tier_blob *next_queued(struct tiers *t)
{
	struct tier_blob *next = NULL;

	for (size_t i = 0; i < t->n_blobs; i++) {
		struct tier_blob *b = t->blobs[i];

		if (b->state == TIER_LOADING && !b->taken && (!next || b->queued_seq < next->queued_seq))
			next = b;
	}
	return next;
}

static void mark_bad(struct tier_blob *b, int error, const char *text)
{
	b->state = TIER_BAD;
	b->error = error;
	snprintf(b->message, sizeof(b->message), "%.255s", text);
}

struct alloc_ctx {
	struct tiers *t;
	int node;
	struct warm_buf *buf;
	uint64_t reserved;
};

static void *alloc_warm(size_t bytes, void *userdata)
{
	struct alloc_ctx *c = userdata;

	/* the file grew since it was sized: it is not the blob any more (the hash will say so) */
	if (bytes > c->reserved)
		return NULL;
	return warm_alloc(c->t->warm, bytes, c->node, c->buf) < 0 ? NULL : c->buf->data;
}

/* One load, the lock released around the read. Called with the lock held. */
static void load_one(struct tiers *t, struct blob_loader *loader, struct tier_blob *b)
{
	struct warm_buf buf = { .node = -1 };
	struct alloc_ctx ac = { .t = t, .node = -1, .buf = &buf };
	struct blob_load_result res;
	struct errmsg e = { { 0 } };
	struct stat st;
	uint64_t need;
	int r;

	/* size and room first: the budget holds during the read too */
	if (stat(b->path, &st) < 0) {
		b->taken = false;
		mark_bad(b, -errno, b->path);
		snprintf(b->message + strlen(b->message), sizeof(b->message) - strlen(b->message),
			 ": %s", strerror(-b->error));
		return;
	}
	need = ALIGN_UP((uint64_t) MAX(st.st_size, 1), 4096);
	if (need > t->p.warm_bytes) {
		b->taken = false;
		b->state = TIER_BAD;
		b->error = -E2BIG;
		snprintf(b->message, sizeof(b->message),
			 "%s is %llu bytes, more than the warm tier's %llu (WarmBytes=)", b->key,
			 (unsigned long long) need, (unsigned long long) t->p.warm_bytes);
		return;
	}
	while (t->reserved + need > t->p.warm_bytes)
		if (!evict_one(t)) {
			/* every copy is read or pinned: wait for a tiers_put() or unpin (still
			 * taken, so a tiers_remove() meanwhile leaves the freeing to the thread) */
			pthread_cond_wait(&t->cond, &t->lock);
			b->taken = false;
			return;
		}
	t->reserved += need;
	ac.reserved = need;
	if (t->have_topo) {
		int node = numa_place(&t->topo, t->p.cpus, t->p.n_cpus, need);

		ac.node = node >= 0 ? node : -1;
	}
	if (t->active++ == 0)
		t->busy_since = now_ns();
	pthread_mutex_unlock(&t->lock);

	r = blob_load(loader, b->path, true, b->sha256, alloc_warm, &ac, &res, &e);

	pthread_mutex_lock(&t->lock);
	if (--t->active == 0)
		t->stats.busy_ns += now_ns() - t->busy_since;
	t->stats.bytes_read[res.path] += r < 0 ? 0 : res.bytes;
	t->stats.last_path = res.path;
	t->stats.load_ns += res.ns;
	t->stats.hash_ns += res.hash_ns;
	b->taken = false;
	if (r < 0) {
		t->reserved -= need;
		if (buf.data)
			warm_release(t->warm, &buf);
		t->stats.load_failures++;
		mark_bad(b, r, e.text[0] ? e.text : strerror(-r));
		return;
	}
	/* the reservation becomes the copy's size (at most what was reserved) */
	t->reserved -= need - buf.bytes;
	b->buf = buf;
	b->state = TIER_WARM;
	b->load_ns = res.ns;
	b->size_hint = res.bytes;
	t->stats.loads++;
	b->meta.bytes = buf.bytes;
	b->meta.cost = (double) res.ns * 1e-9;
	evict_insert(t->p.eviction, &t->clock, &b->meta);
}

static void *loader_thread(void *arg)
{
	struct loader_slot *slot = arg;
	struct tiers *t = slot->t;

	pthread_mutex_lock(&t->lock);
	for (;;) {
		struct tier_blob *b;

		while (!t->stopping && (t->hold || !(b = next_queued(t))))
			pthread_cond_wait(&t->cond, &t->lock);
		if (t->stopping)
			break;
		b->taken = true;
		load_one(t, slot->loader, b);
		if (b->removed) {
			if (b->buf.data)
				drop_copy(t, b);
			blob_free(t, b);
		} else if (b->state == TIER_WARM || b->state == TIER_BAD) {
			bool bad = b->state == TIER_BAD && b->error != -E2BIG;
			char key[128], msg[256];
			int err = b->error;

			snprintf(key, sizeof(key), "%s", b->key);
			snprintf(msg, sizeof(msg), "%s", b->message);
			pthread_cond_broadcast(&t->cond);
			pthread_mutex_unlock(&t->lock);
			if (bad && t->p.on_bad)
				t->p.on_bad(key, err, msg, t->p.userdata);
			if (t->p.on_change)
				t->p.on_change(t->p.userdata);
			pthread_mutex_lock(&t->lock);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

int tiers_new(const struct tiers_params *p, struct tiers **ret)
{
	struct tiers *t;
	int r;

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->p = *p;
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cond, NULL);
	if (p->topology) {
		t->topo = *p->topology;
		t->have_topo = true;
	} else
		t->have_topo = numa_topology_read(&t->topo) == 0;
	if (!p->cpus && !p->topology) {
		/* the compute threads run where the process may run (CPUAffinity=, numactl):
		 * those CPUs are the readers */
		cpu_set_t set;

		if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0 &&
		    (t->cpus = calloc((size_t) CPU_COUNT(&set), sizeof(*t->cpus)))) {
			for (int c = 0; c < CPU_SETSIZE && c < (int) t->topo.n_cpus; c++)
				if (CPU_ISSET(c, &set))
					t->cpus[t->p.n_cpus++] = (uint32_t) c;
			t->p.cpus = t->p.n_cpus ? t->cpus : NULL;
		}
	}
	r = warm_new(p->warm_bytes, &t->warm);
	if (r >= 0)
		t->n_slots = p->loaders ? MIN(p->loaders, (uint32_t) TIERS_MAX_LOADERS) : 2;
	for (uint32_t i = 0; r >= 0 && i < t->n_slots; i++) {
		t->slots[i].t = t;
		r = blob_loader_new(&p->loader, &t->slots[i].loader);
		if (r >= 0) {
			r = -pthread_create(&t->slots[i].thread, NULL, loader_thread, &t->slots[i]);
			t->slots[i].started = r == 0;
		}
	}
	if (r < 0) {
		tiers_free(t);
		return r;
	}
	t->stats.last_path = p->loader.path;
	*ret = t;
	return 0;
}

struct tiers *tiers_free(struct tiers *t)
{
	if (!t)
		return NULL;
	pthread_mutex_lock(&t->lock);
	t->stopping = true;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	for (uint32_t i = 0; i < t->n_slots; i++)
		if (t->slots[i].started)
			pthread_join(t->slots[i].thread, NULL);
	for (size_t i = 0; i < t->n_blobs; i++)
		blob_free(t, t->blobs[i]);
	free(t->blobs);
	for (uint32_t i = 0; i < t->n_slots; i++)
		blob_loader_free(t->slots[i].loader);
	warm_free(t->warm);
	free(t->cpus);
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->lock);
	free(t);
	return NULL;
}

int tiers_add(struct tiers *t, const char *key, const char *path, const uint8_t sha256[32],
	      struct tier_blob **ret)
{
	struct tier_blob *b, **n;
	struct stat st;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->key = strdup(key);
	b->path = strdup(path);
	b->buf.node = -1;
	memcpy(b->sha256, sha256, 32);
	if (stat(path, &st) == 0)
		b->size_hint = (uint64_t) st.st_size;
	pthread_mutex_lock(&t->lock);
	n = b->key && b->path ? realloc(t->blobs, (t->n_blobs + 1) * sizeof(*n)) : NULL;
	if (!n) {
		pthread_mutex_unlock(&t->lock);
		blob_free(t, b);
		return -ENOMEM;
	}
	t->blobs = n;
	t->blobs[t->n_blobs++] = b;
	pthread_mutex_unlock(&t->lock);
	*ret = b;
	return 0;
}

void tiers_remove(struct tiers *t, struct tier_blob *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n_blobs; i++)
		if (t->blobs[i] == b) {
			memmove(&t->blobs[i], &t->blobs[i + 1], (t->n_blobs - i - 1) * sizeof(*t->blobs));
			t->n_blobs--;
			break;
		}
	if (b->taken)
		b->removed = true; /* the loader thread frees it */
	else {
		if (b->buf.data)
			drop_copy(t, b);
		blob_free(t, b);
	}
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

enum tier_state tiers_want(struct tiers *t, struct tier_blob *b, bool count)
{
	enum tier_state s;

	pthread_mutex_lock(&t->lock);
	if (b->state == TIER_COLD) {
		b->state = TIER_LOADING;
		b->queued_seq = ++t->queue_seq;
		pthread_cond_broadcast(&t->cond);
		if (count)
			b->misses++, t->stats.misses++;
	} else if (b->state == TIER_WARM && count) {
		b->hits++, t->stats.hits++;
		evict_hit(t->p.eviction, &t->clock, &b->meta);
	} else if (b->state == TIER_LOADING && count)
		b->misses++, t->stats.misses++;
	s = b->state;
	pthread_mutex_unlock(&t->lock);
	return s;
}

int tiers_wait(struct tiers *t, struct tier_blob *b, struct errmsg *e)
{
	int r = 0;

	(void) tiers_want(t, b, false);
	pthread_mutex_lock(&t->lock);
	while (b->state == TIER_LOADING && !t->stopping)
		pthread_cond_wait(&t->cond, &t->lock);
	if (b->state == TIER_BAD)
		r = errmsg_set(e, b->error, "%s", b->message);
	else if (b->state != TIER_WARM)
		r = errmsg_set(e, -ESHUTDOWN, "stopping");
	pthread_mutex_unlock(&t->lock);
	return r;
}

const void *tiers_get(struct tiers *t, struct tier_blob *b, size_t *ret_bytes)
{
	const void *p = NULL;

	pthread_mutex_lock(&t->lock);
	if (b->state == TIER_WARM) {
		b->readers++;
		p = b->buf.data;
		*ret_bytes = b->size_hint;
	}
	pthread_mutex_unlock(&t->lock);
	return p;
}

void tiers_put(struct tiers *t, struct tier_blob *b)
{
	pthread_mutex_lock(&t->lock);
	if (b->readers > 0)
		b->readers--;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

void tiers_pin(struct tiers *t, struct tier_blob *b, bool pin)
{
	pthread_mutex_lock(&t->lock);
	b->pinned = pin;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

void tiers_need(struct tiers *t, struct tier_blob *b, bool need)
{
	pthread_mutex_lock(&t->lock);
	if (need)
		b->needed++;
	else if (b->needed > 0)
		b->needed--;
	if (!need)
		pthread_cond_broadcast(&t->cond); /* room may be made now */
	pthread_mutex_unlock(&t->lock);
}

int tiers_bad(struct tiers *t, struct tier_blob *b, struct errmsg *e)
{
	int r = 0;

	pthread_mutex_lock(&t->lock);
	if (b->state == TIER_BAD)
		r = errmsg_set(e, b->error, "%s", b->message);
	pthread_mutex_unlock(&t->lock);
	return r;
}

void tiers_mark_bad(struct tiers *t, struct tier_blob *b, int error, const char *message)
{
	pthread_mutex_lock(&t->lock);
	if (b->state == TIER_COLD)
		mark_bad(b, error, message);
	pthread_mutex_unlock(&t->lock);
}

void tiers_clear_bad(struct tiers *t, struct tier_blob *b)
{
	pthread_mutex_lock(&t->lock);
	if (b->state == TIER_BAD) {
		b->state = TIER_COLD;
		b->error = 0;
		b->message[0] = 0;
	}
	pthread_mutex_unlock(&t->lock);
}

void tiers_blob_info(struct tiers *t, struct tier_blob *b, struct tier_blob_info *ret)
{
	pthread_mutex_lock(&t->lock);
	*ret = (struct tier_blob_info){
		.state = b->state,
		.bytes = b->state == TIER_WARM ? b->buf.bytes : b->size_hint,
		.node = b->state == TIER_WARM ? b->buf.node : -1,
		.locked = b->state == TIER_WARM && b->buf.locked,
		.hits = b->hits,
		.misses = b->misses,
		.load_ns = b->load_ns,
	};
	pthread_mutex_unlock(&t->lock);
}

void tiers_get_stats(struct tiers *t, struct tiers_stats *ret)
{
	char wnote[160];

	warm_note(t->warm, wnote, sizeof(wnote));
	pthread_mutex_lock(&t->lock);
	*ret = t->stats;
	ret->warm_budget = t->p.warm_bytes;
	ret->warm_bytes = t->reserved;
	ret->warm_locked = warm_locked_bytes(t->warm);
	ret->warm_blobs = 0;
	for (size_t i = 0; i < t->n_blobs; i++)
		ret->warm_blobs += t->blobs[i]->state == TIER_WARM;
	ret->hash_impl = sha256_impl();
	snprintf(ret->note, sizeof(ret->note), "%s%s%s",
		 t->n_slots ? blob_loader_note(t->slots[0].loader) : "",
		 t->n_slots && blob_loader_note(t->slots[0].loader)[0] && wnote[0] ? "; " : "",
		 wnote);
	pthread_mutex_unlock(&t->lock);
}

int tiers_check(struct tiers *t)
{
	uint64_t held = 0;
	bool loading = false;
	int r = 0;

	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n_blobs; i++) {
		held += t->blobs[i]->buf.bytes;
		loading = loading || t->blobs[i]->taken;
		if ((t->blobs[i]->state == TIER_WARM) != (t->blobs[i]->buf.data != NULL))
			r = -EUCLEAN;
	}
	if (t->reserved > t->p.warm_bytes || (!loading && held != t->reserved) || held > t->reserved)
		r = -EUCLEAN;
	pthread_mutex_unlock(&t->lock);
	return r;
}

void tiers_test_hold_loads(struct tiers *t, bool hold)
{
	pthread_mutex_lock(&t->lock);
	t->hold = hold;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}
