/* SPDX-License-Identifier: MIT */
/*
 * sched.c: the iteration-level scheduler (see sched.h).
 *
 * One step:
 *   1. (locked) apply cancellations; admit waiting requests while there is room, choosing
 *      among the oldest few the one whose adapter has the fewest running sequences (so one
 *      busy adapter or caller cannot starve the others) and making its adapters resident;
 *   2. (locked) build the batch: one row for every decoding sequence first, then prefill
 *      chunks, oldest first, under the step's token budget; every row's KV block is
 *      allocated from the pool — when it is empty, unused adapters are evicted (least
 *      recently used first), then the newest sequence not yet in the batch is preempted;
 *   3. (unlocked) the forward pass;
 *   4. sample for every sequence whose last row produced logits, emit events, finish
 *      sequences (their blocks go back to the pool).
 * Events are delivered with the lock released, so callbacks may call sched_cancel().
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../basic/time-util.h"
#include "../engine/forward.h"
#include "../engine/model.h"
#include "../engine/threadpool.h"
#include "../engine/vocab.h"
#include "../grammar/matcher.h"
#include "../lora/adapter.h"
#include "../lora/resident.h"
#include "page-pool.h"
#include "sched.h"

#define MAX_LORAS_PER_REQUEST 8
#define ADMIT_WINDOW 16 /* how far into the queue admission looks for fairness */
/* how far it looks when everything in the window waits for the disk: a request on a hot or
 * warm adapter further back runs meanwhile rather than leave a slot idle */
#define ADMIT_WINDOW_BLOCKED 256
/* how many waiting requests have their cold adapters queued for the loader ahead of
 * admission, so the disk works while earlier requests compute (at most the blocked window:
 * a warm copy held for a request admission cannot reach would hold its room forever) */
#define LOAD_LOOKAHEAD 64
#define RECENT_ADMISSIONS 32

struct adapter_entry {
	struct lora_adapter *adapter; /* owned */
	struct lora_resident *res;    /* owned when resident */
	uint64_t serial;              /* apply order, stable for the adapter's lifetime */
	bool pinned;
	bool prefetch;
	uint32_t users;               /* waiting + running requests that name it */
	uint32_t running_users;       /* running sequences: while > 0 it cannot be evicted */
	uint64_t requests;
	uint64_t last_used;           /* step number */
	/* tiers */
	struct tier_blob *blob;       /* owned by s->tiers; NULL: not tiered (read directly) */
	struct evict_meta hot_meta;   /* the hot tier's policy record while resident */
	uint64_t hot_hits, hot_misses;
	uint64_t promote_ns;          /* the last warm → hot build */
	/* a warm → hot build on the builder thread: its pages are reserved (they count as
	 * adapter pages) and filled outside the lock, so the batch keeps computing */
	bool building;
	bool build_taken;             /* the builder thread is on it */
	uint32_t *build_pages;        /* owned while building: the reserved page ids */
	size_t n_build_pages, build_next;
	const void *build_image;      /* the warm copy, held (tiers_get) while building */
	size_t build_image_bytes;
	int build_error;              /* the last failed build, for the requests that wait */
};

enum seq_state {
	SEQ_WAITING,
	SEQ_RUNNING,
};

struct seq_lora {
	struct adapter_entry *entry;
	float scale;
	bool needs_warm;      /* it told the warm tier it needs this blob (tiers_need) */
};

struct seq {
	uint64_t id;
	enum seq_state state;
	int32_t *tokens;      /* owned: prompt, then generated */
	uint32_t n_tokens;
	uint32_t n_prompt;
	uint32_t n_computed;  /* tokens whose KV is in the cache */
	uint32_t n_generated;
	uint32_t *blocks;     /* owned: [max_blocks] */
	uint32_t n_blocks;
	struct seq_lora loras[MAX_LORAS_PER_REQUEST];
	uint32_t n_loras;
	struct sampler *sampler; /* owned */
	struct matcher *matcher; /* owned: constrained decoding (NULL: free) */
	bool grammar_fast;       /* sample first, mask only when the draw is refused */
	struct detok detok;
	uint32_t max_tokens;
	bool ignore_eos;
	uint64_t caller;
	sched_event_fn on_event;
	void *userdata;
	bool cancel;
	bool in_batch;
	bool counted;          /* its adapters' hits/misses were counted */
	uint64_t wait_since_ns; /* it first waited for an adapter that was not hot (0: never) */
	uint64_t admitted;    /* admission counter: larger = newer */
	/* this step */
	uint32_t row_first, row_count;
};

struct pending_event {
	struct sched_event ev;
	sched_event_fn fn;
	void *userdata;
	char text[512];
	char message[256];
};

struct sched {
	const struct model *m; /* borrowed */
	struct sched_params p;
	struct page_pool *pool;        /* owned */
	struct threadpool *threads;    /* owned */
	struct forward_ws *ws;         /* owned */
	float *logits;                 /* owned: [max_sequences][n_vocab] */
	/* constrained decoding: the token table (built on the first request with a grammar,
	 * under grammar_lock), the end-of-generation ids, and the per-row scratch of a step */
	pthread_mutex_t grammar_lock;
	struct grammar_vocab *gvocab;  /* owned */
	int32_t *eog_ids;              /* owned */
	uint32_t n_eog;
	uint8_t *mask;                 /* owned: [n_vocab] */
	float *masked;                 /* owned: [n_vocab] */
	struct forward_row *rows;      /* owned: [max_rows] */
	struct forward_seq *fseqs;     /* owned: [max_sequences] */
	struct forward_lora *floras;   /* owned: [max_sequences * MAX_LORAS_PER_REQUEST] */
	uint32_t max_rows;
	uint32_t max_blocks;

	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_cond_t idle;
	pthread_t thread;
	bool thread_started;
	bool stopping;
	bool accepting;
	/* Tests (sched_test_hold): no step computes once this many tokens were generated;
	 * UINT64_MAX when not held. poked: a cancellation to run while held. */
	uint64_t hold_after_tokens;
	bool poked;

	struct seq **waiting; /* FIFO, [queue_length + max_sequences] (preempted go to the front) */
	uint32_t n_waiting;
	struct seq **running; /* [max_sequences], in admission order */
	uint32_t n_running;
	uint64_t next_id;
	uint64_t admit_counter;
	uint64_t recent_callers[RECENT_ADMISSIONS]; /* ring of the callers admitted last */
	uint32_t n_recent;

	struct adapter_entry **adapters; /* owned */
	size_t n_adapters;
	uint64_t adapter_serial;

	struct pending_event *events; /* owned: [max_sequences + queue_length + ...] */
	size_t n_events, cap_events;

	struct sched_stats stats;

	struct tiers *tiers;           /* owned: the warm tier and its loader thread */
	pthread_t builder;             /* warm → hot builds */
	bool builder_started;
	bool hold_builds;              /* tests: sched_test_hold_builds() */
	pthread_cond_t build_cond;     /* a build queued, or stopping */
	struct evict_clock hot_clock;
	uint64_t hot_budget;           /* bytes of adapter pages at most */
};

const double sched_promote_bounds[SCHED_PROMOTE_BUCKETS - 1] = { 0.001, 0.005, 0.01, 0.05,
								 0.1,   0.5,   1,    5 };

const char *sched_finish_name(enum sched_finish f)
{
	switch (f) {
	case SCHED_FINISH_STOP:
		return "stop";
	case SCHED_FINISH_LENGTH:
		return "length";
	case SCHED_FINISH_CANCELLED:
		return "cancelled";
	}
	return "unknown";
}

/* ---- events ---- */

static struct pending_event *event_new(struct sched *s, const struct seq *q, enum sched_event_type t)
{
	struct pending_event *pe;

	if (s->n_events == s->cap_events) {
		size_t cap = s->cap_events ? s->cap_events * 2 : 64;
		struct pending_event *n = realloc(s->events, cap * sizeof(*n));

		if (!n)
			return NULL; /* the event is lost; never happens with the pre-sized array */
		s->events = n;
		s->cap_events = cap;
	}
	pe = &s->events[s->n_events++];
	memset(pe, 0, sizeof(*pe));
	pe->ev.type = t;
	pe->ev.id = q->id;
	pe->ev.prompt_tokens = q->n_prompt;
	pe->ev.completion_tokens = q->n_generated;
	pe->fn = q->on_event;
	pe->userdata = q->userdata;
	return pe;
}

/* Delivers queued events; call without the lock. */
static void events_flush(struct sched *s, struct pending_event *evs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct pending_event *pe = &evs[i];

		if (pe->ev.type == SCHED_EVENT_TOKEN)
			pe->ev.text = pe->text;
		if (pe->ev.type == SCHED_EVENT_ERROR)
			pe->ev.message = pe->message;
		if (pe->fn)
			pe->fn(&pe->ev, pe->userdata);
	}
	(void) s;
}

/* Takes the queued events out (under the lock) for delivery after unlocking. */
static struct pending_event *events_take(struct sched *s, size_t *n)
{
	struct pending_event *evs;

	*n = s->n_events;
	if (s->n_events == 0)
		return NULL;
	evs = malloc(s->n_events * sizeof(*evs));
	if (evs)
		memcpy(evs, s->events, s->n_events * sizeof(*evs));
	else
		*n = 0;
	s->n_events = 0;
	return evs;
}

/* ---- adapters ---- */

static struct adapter_entry *adapter_find(struct sched *s, const char *name)
{
	for (size_t i = 0; i < s->n_adapters; i++)
		if (strcmp(s->adapters[i]->adapter->meta.name, name) == 0)
			return s->adapters[i];
	return NULL;
}

static void *pool_page_for_adapter(void *userdata, uint32_t *ret_id)
{
	struct sched *s = userdata;
	uint32_t pg = page_pool_alloc(s->pool, PAGE_KIND_ADAPTER, 0);

	if (pg == PAGE_NONE)
		return NULL;
	*ret_id = pg;
	return page_pool_addr(s->pool, pg);
}

/* discard: the pages' memory goes back to the kernel (an unload: they may stay free long);
 * an eviction keeps it, since the next promotion or KV block takes the pages soon and would
 * fault every one of them in again (most of a big adapter's build time). */
static void adapter_evict(struct sched *s, struct adapter_entry *a, bool discard)
{
	if (!a->res)
		return;
	evict_removed(s->p.eviction, &s->hot_clock, &a->hot_meta);
	for (size_t i = 0; i < a->res->n_pages; i++)
		if (discard)
			page_pool_release_discard(s->pool, a->res->pages[i]);
		else
			page_pool_release(s->pool, a->res->pages[i]);
	a->res = lora_resident_free(a->res);
	s->stats.adapter_evictions++;
}

/* Evicts the adapter the policy ranks lowest (evict.h: GDSF or LRU) among those no running
 * sequence uses and that are not pinned or `keep`. false when there is none. */
static bool evict_one_adapter(struct sched *s, const struct seq *keep)
{
	struct adapter_entry *victim = NULL;

	for (size_t i = 0; i < s->n_adapters; i++) {
		struct adapter_entry *a = s->adapters[i];
		bool kept = false;

		if (!a->res || a->pinned || a->running_users > 0)
			continue;
		for (uint32_t j = 0; keep && j < keep->n_loras; j++)
			kept = kept || keep->loras[j].entry == a;
		if (kept)
			continue;
		if (!victim || evict_before(&a->hot_meta, &victim->hot_meta))
			victim = a;
	}
	if (!victim)
		return false;
	adapter_evict(s, victim, false);
	return true;
}

static uint64_t hot_used(const struct sched *s)
{
	return (uint64_t) page_pool_n_kind(s->pool, PAGE_KIND_ADAPTER) * page_pool_page_bytes(s->pool);
}

/* Makes a resident (hot), evicting others (never those `keep` needs), within the pool and
 * the hot budget. A tiered adapter is built from its warm copy: -EAGAIN when it has none.
 * -ENOSPC if it cannot fit now, -E2BIG if it never can. */
static int adapter_make_resident(struct sched *s, struct adapter_entry *a, const struct seq *keep)
{
	size_t page_bytes = page_pool_page_bytes(s->pool);
	size_t need = lora_resident_pages_needed(a->adapter, s->p.hot_type, page_bytes);
	struct lora_resident *res = NULL;
	const void *image = NULL;
	size_t image_bytes = 0;
	uint64_t t0;
	int r;

	if (a->res)
		return 0;
	if (need == (size_t) -1 || (uint64_t) need * page_bytes > s->hot_budget)
		return -E2BIG;
	if (a->blob) {
		image = tiers_get(s->tiers, a->blob, &image_bytes);
		if (!image)
			return -EAGAIN;
	}
	while (page_pool_n_free(s->pool) < need ||
	       hot_used(s) + (uint64_t) need * page_bytes > s->hot_budget)
		if (!evict_one_adapter(s, keep)) {
			if (image)
				tiers_put(s->tiers, a->blob);
			return -ENOSPC;
		}
	t0 = now_ns();
	if (image)
		(void) lora_adapter_set_image(a->adapter, image, image_bytes);
	r = lora_resident_new(a->adapter, s->p.hot_type, s->m->hp.n_layer, page_bytes,
			      pool_page_for_adapter, s, &res, NULL);
	if (image) {
		(void) lora_adapter_set_image(a->adapter, NULL, 0);
		tiers_put(s->tiers, a->blob);
	}
	if (r < 0) {
		if (res)
			for (size_t i = 0; i < res->n_pages; i++)
				page_pool_release_discard(s->pool, res->pages[i]);
		lora_resident_free(res);
		return r;
	}
	a->res = res;
	a->promote_ns = now_ns() - t0;
	s->stats.promotions++;
	s->stats.promote_build_ns += a->promote_ns;
	/* what it would cost to bring back: this build, plus the read from disk when the warm
	 * copy is gone by then (its last measured load) */
	a->hot_meta.bytes = (uint64_t) res->n_pages * page_bytes;
	a->hot_meta.cost = (double) a->promote_ns * 1e-9;
	if (a->blob) {
		struct tier_blob_info wi;

		tiers_blob_info(s->tiers, a->blob, &wi);
		a->hot_meta.cost += (double) wi.load_ns * 1e-9;
	}
	evict_insert(s->p.eviction, &s->hot_clock, &a->hot_meta);
	return 0;
}

/* Adapters smaller than this in the pool are made hot on the scheduler thread. */
#define BUILD_THREAD_MIN_BYTES (2u << 20)

static uint64_t adapter_hot_bytes(const struct sched *s, const struct adapter_entry *a)
{
	size_t page_bytes = page_pool_page_bytes(s->pool);

	return (uint64_t) lora_resident_pages_needed(a->adapter, s->p.hot_type, page_bytes) *
	       page_bytes;
}

/* Reserves a's pages (evicting by the policy, never what `keep` needs) and queues its hot
 * build for the builder thread: -EINPROGRESS. -EAGAIN when its warm copy is gone, -ENOSPC
 * when it does not fit now, -E2BIG when it never can. Tiered adapters only. */
static int adapter_start_build(struct sched *s, struct adapter_entry *a, const struct seq *keep)
{
	size_t page_bytes = page_pool_page_bytes(s->pool);
	size_t need = lora_resident_pages_needed(a->adapter, s->p.hot_type, page_bytes);
	const void *image;
	size_t image_bytes = 0;

	if (a->res || a->building)
		return a->res ? 0 : -EINPROGRESS;
	if (need == (size_t) -1 || (uint64_t) need * page_bytes > s->hot_budget)
		return -E2BIG;
	image = tiers_get(s->tiers, a->blob, &image_bytes);
	if (!image)
		return -EAGAIN;
	while (page_pool_n_free(s->pool) < need ||
	       hot_used(s) + (uint64_t) need * page_bytes > s->hot_budget)
		if (!evict_one_adapter(s, keep)) {
			tiers_put(s->tiers, a->blob);
			return -ENOSPC;
		}
	a->build_pages = malloc(MAX(need, (size_t) 1) * sizeof(*a->build_pages));
	if (!a->build_pages) {
		tiers_put(s->tiers, a->blob);
		return -ENOMEM;
	}
	for (size_t i = 0; i < need; i++)
		a->build_pages[i] = page_pool_alloc(s->pool, PAGE_KIND_ADAPTER, 0);
	a->n_build_pages = need;
	a->build_next = 0;
	a->build_image = image;
	a->build_image_bytes = image_bytes;
	a->build_error = 0;
	a->building = true;
	a->build_taken = false;
	pthread_cond_broadcast(&s->build_cond);
	return -EINPROGRESS;
}

/* The builder's page provider: the reserved pages, no lock needed. */
static void *build_page(void *userdata, uint32_t *ret_id)
{
	struct adapter_entry *a = ((void **) userdata)[0];
	struct sched *s = ((void **) userdata)[1];

	if (a->build_next >= a->n_build_pages)
		return NULL;
	*ret_id = a->build_pages[a->build_next++];
	return page_pool_addr(s->pool, *ret_id);
}

/* Ends a build under the lock: the hot form in place (and the unused reservation back), or
 * every page back and the error kept for the requests that wait. */
static void build_finish(struct sched *s, struct adapter_entry *a, struct lora_resident *res,
			 int r, uint64_t ns)
{
	size_t page_bytes = page_pool_page_bytes(s->pool);

	for (size_t i = r < 0 ? 0 : a->build_next; i < a->n_build_pages; i++)
		page_pool_release_discard(s->pool, a->build_pages[i]);
	free(a->build_pages);
	a->build_pages = NULL;
	a->n_build_pages = a->build_next = 0;
	tiers_put(s->tiers, a->blob);
	a->build_image = NULL;
	a->building = a->build_taken = false;
	if (r < 0) {
		lora_resident_free(res); /* its pages were the reservation's, released above */
		a->build_error = r;
		return;
	}
	a->res = res;
	a->promote_ns = ns;
	s->stats.promotions++;
	s->stats.promote_build_ns += ns;
	a->hot_meta.bytes = (uint64_t) res->n_pages * page_bytes;
	a->hot_meta.cost = (double) ns * 1e-9;
	{
		struct tier_blob_info wi;

		tiers_blob_info(s->tiers, a->blob, &wi);
		a->hot_meta.cost += (double) wi.load_ns * 1e-9;
	}
	evict_insert(s->p.eviction, &s->hot_clock, &a->hot_meta);
}

static void *builder_thread(void *arg)
{
	struct sched *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct adapter_entry *a = NULL;

		for (size_t i = 0; !s->stopping && !s->hold_builds && i < s->n_adapters && !a; i++)
			if (s->adapters[i]->building && !s->adapters[i]->build_taken)
				a = s->adapters[i];
		if (s->stopping)
			break;
		if (!a) {
			pthread_cond_wait(&s->build_cond, &s->lock);
			continue;
		}
		a->build_taken = true;
		pthread_mutex_unlock(&s->lock);

		/* the adapter is only read here while building (sched_remove_adapter refuses) */
		struct lora_resident *res = NULL;
		void *ud[2] = { a, s };
		uint64_t t0 = now_ns();
		int r;

		(void) lora_adapter_set_image(a->adapter, a->build_image, a->build_image_bytes);
		r = lora_resident_new(a->adapter, s->p.hot_type, s->m->hp.n_layer,
				      page_pool_page_bytes(s->pool), build_page, ud, &res, NULL);
		(void) lora_adapter_set_image(a->adapter, NULL, 0);

		pthread_mutex_lock(&s->lock);
		build_finish(s, a, res, r, now_ns() - t0);
		pthread_cond_broadcast(&s->wake);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* The adapter leaves the tiers (its blob does not fit the warm tier): from now on it is read
 * from its file when made hot. Requests that said they need the blob forget it. */
static void adapter_untier(struct sched *s, struct adapter_entry *a)
{
	struct seq **lists[2] = { s->waiting, s->running };
	uint32_t counts[2] = { s->n_waiting, s->n_running };

	for (int l = 0; l < 2; l++)
		for (uint32_t i = 0; i < counts[l]; i++)
			for (uint32_t k = 0; k < lists[l][i]->n_loras; k++)
				if (lists[l][i]->loras[k].entry == a)
					lists[l][i]->loras[k].needs_warm = false;
	tiers_remove(s->tiers, a->blob);
	a->blob = NULL;
}

/* Makes a hot: a big tiered adapter on the builder thread (-EINPROGRESS; the batch goes
 * on), a small one here, at once (its build is shorter than a thread hand-off). keep: the
 * sequence whose adapters eviction must spare, or NULL. */
static int adapter_promote(struct sched *s, struct adapter_entry *a, const struct seq *keep)
{
	if (a->blob && adapter_hot_bytes(s, a) >= s->p.build_thread_min_bytes)
		return adapter_start_build(s, a, keep);
	return adapter_make_resident(s, a, keep);
}

/* Whether q's adapters can be made hot now: 1 yes (hot, warm, or not tiered), 0 not yet (a
 * cold one is being read: the loader thread was asked), -errno when one is bad (message in
 * msg). Counts hits and misses once per request. */
static int seq_adapters_ready(struct sched *s, struct seq *q, char *msg, size_t msg_size)
{
	int ready = 1;

	for (uint32_t i = 0; i < q->n_loras; i++) {
		struct adapter_entry *a = q->loras[i].entry;
		enum tier_state st;

		if (!q->counted) {
			if (a->res)
				a->hot_hits++, s->stats.hot_hits++;
			else {
				a->hot_misses++, s->stats.hot_misses++;
				if (!q->wait_since_ns)
					q->wait_since_ns = now_ns();
			}
		}
		if (a->res || !a->blob) {
			/* hot already: its warm copy may go (see below) */
			if (q->loras[i].needs_warm) {
				tiers_need(s->tiers, a->blob, false);
				q->loras[i].needs_warm = false;
			}
			continue;
		}
		if (a->build_error < 0) {
			int r = a->build_error;

			a->build_error = 0;
			snprintf(msg, msg_size, "adapter '%.64s' could not be made hot: %s",
				 a->adapter->meta.name, strerror(-r));
			q->counted = true;
			return r;
		}
		if (a->building) {
			ready = 0;
			continue;
		}
		st = tiers_want(s->tiers, a->blob, !q->counted);
		if (!q->loras[i].needs_warm && st != TIER_BAD) {
			tiers_need(s->tiers, a->blob, true);
			q->loras[i].needs_warm = true;
		}
		if (st == TIER_BAD) {
			struct errmsg e = { { 0 } };
			int r = tiers_bad(s->tiers, a->blob, &e);

			if (r == -E2BIG) {
				/* bigger than the whole warm tier: served as before the tiers,
				 * read from its file (per-matrix hashes checked) into the pool */
				adapter_untier(s, a);
				continue;
			}
			snprintf(msg, msg_size, "adapter '%.64s' is unusable: %.220s",
				 a->adapter->meta.name, e.text);
			q->counted = true;
			return r < 0 ? r : -EIO;
		}
		if (st != TIER_WARM)
			ready = 0;
	}
	q->counted = true;
	/* Several adapters, some still being read: the warm ones are made hot now, so that their
	 * warm copies can make room for the rest. Otherwise a request whose adapters fit the warm
	 * tier one at a time but not together would hold one copy while waiting for room that
	 * only that copy takes. (Built with q's other hot adapters kept.) */
	if (ready == 0 && q->n_loras > 1)
		for (uint32_t i = 0; i < q->n_loras; i++) {
			struct adapter_entry *a = q->loras[i].entry;

			if (a->res || !a->blob || a->building ||
			    tiers_want(s->tiers, a->blob, false) != TIER_WARM)
				continue;
			(void) adapter_promote(s, a, q);
		}
	return ready;
}

static void promote_observe(struct sched *s, struct seq *q)
{
	double sec;
	size_t b = 0;

	if (!q->wait_since_ns)
		return;
	sec = (double) (now_ns() - q->wait_since_ns) * 1e-9;
	while (b < SCHED_PROMOTE_BUCKETS - 1 && sec > sched_promote_bounds[b])
		b++;
	s->stats.promote_hist[b]++;
	s->stats.promote_seconds += sec;
	q->wait_since_ns = 0;
}

/* Prefetched adapters whose warm copy arrived become hot, if there is room without evicting
 * anything a request uses. */
static void prefetch_promote(struct sched *s)
{
	for (size_t i = 0; i < s->n_adapters; i++) {
		struct adapter_entry *a = s->adapters[i];

		if (!a->prefetch || a->res)
			continue;
		if (a->blob && tiers_want(s->tiers, a->blob, false) == TIER_LOADING)
			continue;
		if (a->building)
			continue;
		a->prefetch = false;
		if (adapter_promote(s, a, NULL) == 0) /* -EINPROGRESS: hot when the builder is done */
			a->last_used = s->stats.steps;
	}
}

/* ---- sequences ---- */

static void seq_free(struct seq *q)
{
	if (!q)
		return;
	free(q->tokens);
	free(q->blocks);
	sampler_free(q->sampler);
	matcher_free(q->matcher);
	free(q);
}

static void seq_release_blocks(struct sched *s, struct seq *q)
{
	for (uint32_t i = 0; i < q->n_blocks; i++)
		page_pool_release(s->pool, q->blocks[i]);
	q->n_blocks = 0;
	q->n_computed = 0;
}

/* q no longer waits for its adapters' warm copies (admitted or finished). */
static void seq_release_warm(struct sched *s, struct seq *q)
{
	for (uint32_t i = 0; i < q->n_loras; i++)
		if (q->loras[i].needs_warm) {
			tiers_need(s->tiers, q->loras[i].entry->blob, false);
			q->loras[i].needs_warm = false;
		}
}

static void seq_drop_adapter_refs(struct seq *q, bool running)
{
	for (uint32_t i = 0; i < q->n_loras; i++) {
		if (running)
			q->loras[i].entry->running_users--;
		q->loras[i].entry->users--;
	}
}

static void running_remove(struct sched *s, struct seq *q)
{
	for (uint32_t i = 0; i < s->n_running; i++)
		if (s->running[i] == q) {
			memmove(&s->running[i], &s->running[i + 1],
				(s->n_running - i - 1) * sizeof(*s->running));
			s->n_running--;
			return;
		}
}

static void waiting_remove_at(struct sched *s, uint32_t i)
{
	memmove(&s->waiting[i], &s->waiting[i + 1], (s->n_waiting - i - 1) * sizeof(*s->waiting));
	s->n_waiting--;
}

/* Ends a sequence: DONE event (or ERROR when error < 0), blocks back, adapters released. */
static void seq_finish(struct sched *s, struct seq *q, enum sched_finish why, int error,
		       const char *message)
{
	struct pending_event *pe;
	bool running = q->state == SEQ_RUNNING;

	if (running) {
		seq_release_blocks(s, q);
		running_remove(s, q);
	}
	seq_release_warm(s, q);
	seq_drop_adapter_refs(q, running);
	pe = event_new(s, q, error < 0 ? SCHED_EVENT_ERROR : SCHED_EVENT_DONE);
	if (pe) {
		pe->ev.finish = why;
		pe->ev.error = error;
		if (message)
			snprintf(pe->message, sizeof(pe->message), "%s", message);
	}
	seq_free(q);
}

/* Preemption: the sequence gives its blocks back and waits at the front of the queue; its
 * tokens (prompt and generated so far) are recomputed when it is admitted again. */
static void seq_preempt(struct sched *s, struct seq *q)
{
	seq_release_blocks(s, q);
	running_remove(s, q);
	for (uint32_t i = 0; i < q->n_loras; i++)
		q->loras[i].entry->running_users--;
	q->state = SEQ_WAITING;
	memmove(&s->waiting[1], &s->waiting[0], s->n_waiting * sizeof(*s->waiting));
	s->waiting[0] = q;
	s->n_waiting++;
	s->stats.preemptions++;
}

/* A free page for a KV block of q: evicts unused adapters, then preempts the newest running
 * sequence that has no rows in this batch. PAGE_NONE when nothing can give way. */
static uint32_t kv_page_for(struct sched *s, struct seq *q)
{
	for (;;) {
		uint32_t pg = page_pool_alloc(s->pool, PAGE_KIND_KV, q->id);
		struct seq *victim = NULL;

		if (pg != PAGE_NONE)
			return pg;
		if (evict_one_adapter(s, NULL))
			continue;
		for (uint32_t i = 0; i < s->n_running; i++) {
			struct seq *c = s->running[i];

			if (c != q && !c->in_batch && (!victim || c->admitted > victim->admitted))
				victim = c;
		}
		if (!victim)
			return PAGE_NONE;
		seq_preempt(s, victim);
	}
}

/* Ensures blocks for positions [0, upto) of q. false when the pool cannot give them. */
static bool seq_reserve(struct sched *s, struct seq *q, uint32_t upto)
{
	uint32_t need = (upto + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;

	while (q->n_blocks < need) {
		uint32_t pg = kv_page_for(s, q);

		if (pg == PAGE_NONE)
			return false;
		q->blocks[q->n_blocks++] = pg;
	}
	return true;
}

/* ---- admission ---- */

static uint32_t running_users_of_first_adapter(const struct seq *q)
{
	return q->n_loras ? q->loras[0].entry->running_users : 0;
}

/* How much of the machine a caller has had lately: its running sequences plus its share of
 * the last RECENT_ADMISSIONS admissions (so callers alternate even with one slot). */
static uint32_t caller_load(const struct sched *s, uint64_t caller)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n_running; i++)
		n += s->running[i]->caller == caller;
	for (uint32_t i = 0; i < MIN(s->n_recent, (uint32_t) RECENT_ADMISSIONS); i++)
		n += s->recent_callers[i] == caller;
	return n;
}

/* Fairness key: the caller's recent load first, then its adapter's running sequences. */
static uint64_t admit_key(const struct sched *s, const struct seq *q)
{
	return ((uint64_t) caller_load(s, q->caller) << 32) | running_users_of_first_adapter(q);
}

static void admit(struct sched *s)
{
	char ahead_msg[320];

	prefetch_promote(s);
	/* queue the loads of the requests coming up (errors are dealt with at admission) */
	for (uint32_t i = 0; i < MIN(s->n_waiting, (uint32_t) LOAD_LOOKAHEAD); i++)
		(void) seq_adapters_ready(s, s->waiting[i], ahead_msg, sizeof(ahead_msg));
	while (s->n_running < s->p.max_sequences && s->n_waiting > 0) {
		uint32_t best = UINT32_MAX, window = MIN(s->n_waiting, (uint32_t) ADMIT_WINDOW);
		struct seq *q;
		bool ok = true, bad = false;

		/* Only sequences whose adapters are at least warm are candidates: one waiting
		 * for the disk waits alone while the rest are admitted and keep decoding. A bad
		 * adapter's requests end at once. */
		for (uint32_t i = 0; i < window; i++) {
			if (i == window - 1 && best == UINT32_MAX)
				window = MIN(s->n_waiting, (uint32_t) ADMIT_WINDOW_BLOCKED);
			char msg[320];
			int r = seq_adapters_ready(s, s->waiting[i], msg, sizeof(msg));

			if (r < 0) {
				q = s->waiting[i];
				waiting_remove_at(s, i);
				seq_finish(s, q, SCHED_FINISH_STOP, r, msg);
				bad = true;
				break;
			}
			if (r == 0)
				continue;
			/* preempted sequences (at the front) go first; otherwise fairness by
			 * caller, then adapter, among the oldest few (ties: the oldest) */
			if (best == UINT32_MAX)
				best = i;
			else if (s->waiting[best]->n_tokens == s->waiting[best]->n_prompt &&
				 admit_key(s, s->waiting[i]) < admit_key(s, s->waiting[best]))
				best = i;
			if (i == 0 && s->waiting[0]->n_tokens != s->waiting[0]->n_prompt)
				break;
		}
		if (bad)
			continue;
		if (best == UINT32_MAX)
			break; /* everything in the window waits for the loader */
		q = s->waiting[best];
		/* Admit only with room for its first chunk, unless nothing runs: otherwise it would
		 * be preempted again at once. */
		if (s->n_running > 0) {
			uint32_t first = MIN(q->n_tokens, s->p.step_tokens);

			if (page_pool_n_free(s->pool) < (first + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS)
				break;
		}
		bool started = false;

		for (uint32_t i = 0; ok && i < q->n_loras; i++) { /* q is freed on failure */
			struct adapter_entry *a = q->loras[i].entry;
			int r = adapter_promote(s, a, q);

			if (r == -EINPROGRESS) {
				/* built off this thread: q waits for it, the others go on */
				started = true;
				continue;
			}
			if (r == -EAGAIN) {
				/* its warm copy went meanwhile: asked for again on the next look */
				started = true;
				continue;
			}
			if (r == -ENOSPC) {
				ok = false; /* wait for memory */
			} else if (r < 0) {
				char msg[160];

				snprintf(msg, sizeof(msg), "adapter '%s' could not be loaded: %s",
					 q->loras[i].entry->adapter->meta.name, strerror(-r));
				waiting_remove_at(s, best);
				seq_finish(s, q, SCHED_FINISH_STOP, r, msg);
				ok = false;
				q = NULL;
			}
		}
		if (!q)
			continue;
		if (!ok)
			break;
		if (started)
			continue; /* not ready any more (building): the next candidate */
		waiting_remove_at(s, best);
		seq_release_warm(s, q);
		promote_observe(s, q);
		q->state = SEQ_RUNNING;
		q->admitted = ++s->admit_counter;
		s->recent_callers[s->n_recent++ % RECENT_ADMISSIONS] = q->caller;
		for (uint32_t i = 0; i < q->n_loras; i++) {
			struct adapter_entry *a = q->loras[i].entry;

			a->running_users++;
			a->last_used = s->stats.steps;
			evict_hit(s->p.eviction, &s->hot_clock, &a->hot_meta);
		}
		s->running[s->n_running++] = q;
	}
}

/* ---- one step ---- */

static void add_rows(struct sched *s, struct seq *q, uint32_t count, uint32_t *n_rows)
{
	q->in_batch = true;
	q->row_first = *n_rows;
	q->row_count = count;
	for (uint32_t i = 0; i < count; i++)
		s->rows[(*n_rows)++] = (struct forward_row){
			.token = q->tokens[q->n_computed + i],
			.pos = q->n_computed + i,
			.logits_index = -1,
		};
}

static bool held_locked(const struct sched *s)
{
	return s->stats.tokens_generated >= s->hold_after_tokens;
}

static int step_locked_build(struct sched *s, uint32_t *ret_rows, uint32_t *ret_logits)
{
	uint32_t n_rows = 0, budget = s->p.step_tokens, n_logits = 0, n_loras = 0;

	/* cancellations */
	for (uint32_t i = 0; i < s->n_running;) {
		struct seq *q = s->running[i];

		if (q->cancel)
			seq_finish(s, q, SCHED_FINISH_CANCELLED, 0, NULL);
		else
			i++;
	}
	for (uint32_t i = 0; i < s->n_waiting;) {
		struct seq *q = s->waiting[i];

		if (q->cancel) {
			waiting_remove_at(s, i);
			seq_finish(s, q, SCHED_FINISH_CANCELLED, 0, NULL);
		} else {
			i++;
		}
	}
	s->poked = false;
	if (held_locked(s)) {
		*ret_rows = 0;
		*ret_logits = 0;
		return 0;
	}
	admit(s);

	for (uint32_t i = 0; i < s->n_running; i++)
		s->running[i]->in_batch = false;
	/* pass 1: decoding sequences, one row each; pass 2: prefill chunks — oldest first */
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < s->n_running && budget > 0; i++) {
			struct seq *q = s->running[i];
			uint32_t left = q->n_tokens - q->n_computed, count;

			if (q->in_batch || (pass == 0) != (left == 1))
				continue;
			count = MIN(left, budget);
			if (!seq_reserve(s, q, q->n_computed + count)) {
				/* nothing could give way: q is the only one left holding memory */
				if (n_rows == 0 && s->n_running == 1) {
					char msg[160];

					snprintf(msg, sizeof(msg),
						 "the KV pool (%zu pages) cannot hold %u positions",
						 page_pool_n_pages(s->pool), q->n_computed + count);
					seq_finish(s, q, SCHED_FINISH_LENGTH, -ENOSPC, msg);
					return step_locked_build(s, ret_rows, ret_logits);
				}
				seq_preempt(s, q);
				i--; /* running[] shifted */
				continue;
			}
			add_rows(s, q, count, &n_rows);
			budget -= count;
		}
	}

	/* forward descriptors: sequences, adapters, logits rows */
	uint32_t n_seqs = 0;
	for (uint32_t i = 0; i < s->n_running; i++) {
		struct seq *q = s->running[i];

		if (!q->in_batch)
			continue;
		s->fseqs[n_seqs] = (struct forward_seq){ .blocks = q->blocks, .n_blocks = q->n_blocks };
		for (uint32_t k = 0; k < q->n_loras; k++)
			s->floras[n_loras + k] = (struct forward_lora){
				.res = q->loras[k].entry->res,
				.scale = q->loras[k].scale,
				.order = q->loras[k].entry->serial,
			};
		for (uint32_t r = q->row_first; r < q->row_first + q->row_count; r++) {
			s->rows[r].seq = n_seqs;
			s->rows[r].lora_first = n_loras;
			s->rows[r].n_loras = q->n_loras;
		}
		if (q->n_computed + q->row_count == q->n_tokens)
			s->rows[q->row_first + q->row_count - 1].logits_index = (int32_t) n_logits++;
		n_loras += q->n_loras;
		n_seqs++;
	}
	*ret_rows = n_rows;
	*ret_logits = n_logits;
	return 0;
}

/* Samples q's next token inside its grammar: the mask over the logits (end-of-generation only
 * where the text is complete), the budget of tokens left, then the grammar advances. 1 and
 * the token in *ret_id; 0 when no token can continue; -errno. */
static int sample_constrained(struct sched *s, struct seq *q, const float *logits, int32_t *ret_id)
{
	uint32_t n_vocab = s->m->hp.n_vocab, left = s->p.max_context - q->n_tokens;
	bool accepting = matcher_accepting(q->matcher);
	int64_t n;
	int32_t id;
	int r;

	if (q->max_tokens)
		left = MIN(left, q->max_tokens - q->n_generated);
	left = MAX(left, 1u);
	s->stats.grammar_tokens++;
	if (q->grammar_fast) {
		/* Draw from the whole distribution first and keep the token if the grammar (and
		 * the budget) allows it; else draw again from the masked one. Without truncation
		 * (top-k, top-p, min-p) that is exactly a draw from the masked distribution
		 * (rejection sampling), and greedy picks the same argmax; it spares the mask on
		 * most steps of a model that mostly keeps to the format. */
		id = sampler_sample(q->sampler, logits);
		if (id >= 0 && (uint32_t) id < n_vocab && vocab_is_eog(s->m->vocab, id)) {
			if (accepting && !q->ignore_eos) {
				*ret_id = id;
				return 1;
			}
		} else if (matcher_try_token(q->matcher, id, left) == 0) {
			*ret_id = id;
			return 1;
		}
	}
	s->stats.grammar_masks++;
	n = matcher_mask(q->matcher, left, s->mask);
	if (n < 0)
		return (int) n;
	if (accepting && !q->ignore_eos)
		for (uint32_t j = 0; j < s->n_eog; j++)
			s->mask[s->eog_ids[j]] = 1, n++;
	if (n == 0)
		return 0;
	for (uint32_t j = 0; j < n_vocab; j++)
		s->masked[j] = s->mask[j] ? logits[j] : -INFINITY;
	id = sampler_sample(q->sampler, s->masked);
	if (id < 0 || (uint32_t) id >= n_vocab || !s->mask[id]) {
		/* every allowed logit is -inf or NaN: take the first allowed token */
		for (id = 0; (uint32_t) id < n_vocab && !s->mask[id]; id++)
			;
	}
	if (!vocab_is_eog(s->m->vocab, id)) {
		r = matcher_accept_token(q->matcher, id);
		if (r < 0)
			return r;
	}
	*ret_id = id;
	return 1;
}

/* The token table and scratch constrained decoding needs, once per scheduler. */
static int grammar_setup(struct sched *s)
{
	uint32_t n_vocab = s->m->hp.n_vocab;
	int r = 0;

	pthread_mutex_lock(&s->grammar_lock);
	if (!s->gvocab) {
		struct grammar_vocab *tv = NULL;

		s->mask = s->mask ? s->mask : malloc(n_vocab);
		s->masked = s->masked ? s->masked : malloc(sizeof(float) * n_vocab);
		s->eog_ids = s->eog_ids ? s->eog_ids : malloc(sizeof(int32_t) * 64);
		if (!s->mask || !s->masked || !s->eog_ids)
			r = -ENOMEM;
		s->n_eog = 0;
		for (uint32_t j = 0; r == 0 && j < n_vocab && s->n_eog < 64; j++)
			if (vocab_is_eog(s->m->vocab, (int32_t) j))
				s->eog_ids[s->n_eog++] = (int32_t) j;
		if (r == 0)
			r = grammar_vocab_new(s->m->vocab, &tv);
		if (r == 0)
			s->gvocab = tv;
	}
	pthread_mutex_unlock(&s->grammar_lock);
	return r;
}

/* After the forward pass: advance, sample, emit, finish. Locked. */
static void step_locked_finish(struct sched *s)
{
	uint32_t n_vocab = s->m->hp.n_vocab, li = 0;

	for (uint32_t i = 0; i < s->n_running;) {
		struct seq *q = s->running[i];
		struct pending_event *pe;
		const float *logits;
		int64_t len;
		int32_t id = 0; /* set by either sampler below (gcc -O3 cannot tell) */

		if (!q->in_batch) {
			i++;
			continue;
		}
		q->in_batch = false;
		q->n_computed += q->row_count;
		if (q->n_computed < q->n_tokens) {
			s->stats.tokens_prefilled += q->row_count;
			i++;
			continue;
		}
		s->stats.tokens_prefilled += q->row_count - (q->n_generated > 0 && q->row_count == 1);
		logits = s->logits + (size_t) li++ * n_vocab;
		if (q->matcher) {
			int r = sample_constrained(s, q, logits, &id);

			if (r < 0) {
				seq_finish(s, q, SCHED_FINISH_STOP, r,
					   r == -E2BIG ? "the grammar became too ambiguous (more than "
							 "4096 parses at once)"
						       : "constrained decoding failed");
				continue;
			}
			if (r == 0) {
				/* no token can continue the grammar: a valid prefix, cut short */
				seq_finish(s, q, SCHED_FINISH_LENGTH, 0, NULL);
				continue;
			}
		} else {
			id = sampler_sample(q->sampler, logits);
		}
		sampler_accept(q->sampler, id);
		q->tokens[q->n_tokens++] = id;
		q->n_generated++;
		s->stats.tokens_generated++;

		bool eog = vocab_is_eog(s->m->vocab, id) && (!q->ignore_eos || q->matcher);
		/* the grammar is complete and nothing may follow: stop after this token's text */
		bool closed = q->matcher && !eog && matcher_done(q->matcher);
		pe = event_new(s, q, SCHED_EVENT_TOKEN);
		if (pe) {
			pe->ev.token = id;
			pe->ev.logprob = sampler_logprob(logits, n_vocab, id);
			len = eog ? 0 : detok_push(&q->detok, id, pe->text, sizeof(pe->text) - 1);
			/* events carry UTF-8 (JSON, D-Bus): a lone byte token becomes U+FFFD */
			pe->ev.text_len = len > 0 ? utf8_make_valid(pe->text, (size_t) len,
								     sizeof(pe->text) - 1)
						  : 0;
		}
		if (eog) {
			seq_finish(s, q, SCHED_FINISH_STOP, 0, NULL);
			continue; /* running[i] is now the next sequence */
		}
		if (closed || (q->max_tokens && q->n_generated >= q->max_tokens) ||
		    q->n_tokens >= s->p.max_context) {
			char tail[16];
			int64_t n = detok_flush(&q->detok, tail, sizeof(tail));

			if (n > 0 && pe && pe->ev.text_len + (size_t) n < sizeof(pe->text)) {
				memcpy(pe->text + pe->ev.text_len, tail, (size_t) n);
				/* a character cut short by the end is not UTF-8 either */
				pe->ev.text_len += utf8_make_valid(pe->text + pe->ev.text_len, (size_t) n,
								   sizeof(pe->text) - 1 - pe->ev.text_len);
			}
			/* a constrained output that is whole when the budget ends is a stop: it
			 * parses (docs/http.md) */
			seq_finish(s, q,
				   closed || (q->matcher && matcher_accepting(q->matcher))
				       ? SCHED_FINISH_STOP
				       : SCHED_FINISH_LENGTH,
				   0, NULL);
			continue;
		}
		i++;
	}
}

int sched_step(struct sched *s)
{
	struct pending_event *evs;
	uint32_t n_rows = 0, n_logits = 0;
	size_t n_evs;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	step_locked_build(s, &n_rows, &n_logits);
	pthread_mutex_unlock(&s->lock);

	if (n_rows > 0) {
		struct forward_batch b = {
			.rows = s->rows,
			.n_rows = n_rows,
			.seqs = s->fseqs,
			.loras = s->floras,
			.logits = s->logits,
		};
		struct kv_store kv = { .base = page_pool_base(s->pool),
				       .page_bytes = page_pool_page_bytes(s->pool) };

		r = model_forward(s->m, s->ws, s->threads, &kv, &b);
	}

	pthread_mutex_lock(&s->lock);
	if (r < 0) {
		/* should not happen (the batch was built within limits): fail what ran */
		char msg[128];

		snprintf(msg, sizeof(msg), "forward pass failed: %s", strerror(-r));
		while (s->n_running)
			seq_finish(s, s->running[0], SCHED_FINISH_STOP, r, msg);
	} else if (n_rows > 0) {
		step_locked_finish(s);
		s->stats.steps++;
	}
	evs = events_take(s, &n_evs);
	if (s->n_running == 0 && s->n_waiting == 0)
		pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&s->lock);

	events_flush(s, evs, n_evs);
	free(evs);
	return r < 0 ? r : (int) n_rows;
}

/* ---- thread ---- */

/* A prefetched adapter whose warm copy is there (or that needs no copy) waits to be made
 * hot by a step. */
static bool prefetch_ready(struct sched *s)
{
	for (size_t i = 0; i < s->n_adapters; i++) {
		struct adapter_entry *a = s->adapters[i];

		if (a->prefetch && !a->res && !a->building &&
		    (!a->blob || tiers_want(s->tiers, a->blob, false) != TIER_LOADING))
			return true;
	}
	return false;
}

static void *sched_thread(void *arg)
{
	struct sched *s = arg;

	for (;;) {
		pthread_mutex_lock(&s->lock);
		/* Held (tests), the thread wakes only to run cancellations. */
		while (!s->stopping &&
		       ((s->n_waiting == 0 && s->n_running == 0 && !prefetch_ready(s)) ||
					(held_locked(s) && !s->poked)))
			pthread_cond_wait(&s->wake, &s->lock);
		bool stop = s->stopping;
		pthread_mutex_unlock(&s->lock);
		if (stop)
			return NULL;
		if (sched_step(s) == 0) {
			/* waiting requests that cannot be admitted yet (memory, or a cold adapter
			 * being read): do not spin hot; a finished load wakes us at once */
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_mutex_lock(&s->lock);
			if (!s->stopping)
				(void) pthread_cond_timedwait(&s->wake, &s->lock, &ts);
			pthread_mutex_unlock(&s->lock);
		}
	}
}

int sched_start(struct sched *s)
{
	int r;

	assert_return(s && !s->thread_started, -EINVAL);
	r = pthread_create(&s->thread, NULL, sched_thread, s);
	if (r != 0)
		return -r;
	s->thread_started = true;
	return 0;
}

/* ---- construction ---- */

/* The loader thread finished a load: what waited for it may be admitted now. */
static void tiers_changed(void *userdata)
{
	struct sched *s = userdata;

	pthread_mutex_lock(&s->lock);
	pthread_cond_broadcast(&s->wake);
	pthread_mutex_unlock(&s->lock);
}

static void tiers_bad_blob(const char *key, int error, const char *message, void *userdata)
{
	struct sched *s = userdata;

	if (s->p.on_adapter_bad)
		s->p.on_adapter_bad(key, error, message, s->p.userdata);
}

size_t sched_page_bytes(const struct model *m)
{
	/* adapter rows are at most max(n_embd, n_ff, q_dim) values of F32 */
	size_t row_max = MAX(MAX((size_t) m->hp.n_embd, (size_t) m->hp.n_ff),
			     (size_t) m->hp.n_head * m->hp.head_dim) * sizeof(float);

	return ALIGN_UP(MAX(forward_kv_block_bytes(m), ALIGN_UP(row_max, 64)), 4096);
}

int sched_new(const struct model *m, const struct sched_params *params, struct sched **ret,
	      struct errmsg *e)
{
	struct sched_params p = params ? *params : (struct sched_params){};
	struct sched *s;
	size_t page_bytes, n_pages;
	int r;

	assert_return(m && ret, -EINVAL);
	if (p.max_sequences == 0)
		p.max_sequences = 8;
	if (p.queue_length == 0)
		p.queue_length = 64;
	if (p.max_context == 0)
		p.max_context = MIN(m->hp.n_ctx_train, 8192u);
	if (p.step_tokens == 0)
		p.step_tokens = 256;
	if (p.n_threads <= 0)
		p.n_threads = (int) MAX(sysconf(_SC_NPROCESSORS_ONLN), 1L);
	if (p.max_sequences > 1024 || p.queue_length > 65536 || p.max_context > (1u << 20) ||
	    p.step_tokens > 16384 || p.n_threads > 256)
		return errmsg_set(e, -EINVAL, "scheduler limits out of range");
	page_bytes = sched_page_bytes(m);
	if (p.pool_bytes == 0) {
		size_t blocks = (p.max_context + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;

		p.pool_bytes = (blocks * p.max_sequences + blocks / 4 + 16) * page_bytes;
	}
	n_pages = p.pool_bytes / page_bytes;
	if (n_pages < 2)
		return errmsg_set(e, -EINVAL, "pool of %zu bytes holds fewer than 2 pages of %zu bytes",
				  p.pool_bytes, page_bytes);

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->m = m;
	s->p = p;
	s->accepting = true;
	s->hold_after_tokens = UINT64_MAX;
	s->max_rows = p.step_tokens + p.max_sequences;
	s->max_blocks = (p.max_context + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, NULL);
	pthread_cond_init(&s->build_cond, NULL);
	pthread_cond_init(&s->idle, NULL);
	s->hot_budget = p.hot_bytes == SCHED_HOT_BYTES_HALF ? (uint64_t) n_pages * page_bytes / 2
			: p.hot_bytes ? MIN(p.hot_bytes, (uint64_t) n_pages * page_bytes)
				      : (uint64_t) n_pages * page_bytes;
	s->p.warm_bytes = p.warm_bytes ? p.warm_bytes : 2ull << 30;
	if (!s->p.build_thread_min_bytes)
		s->p.build_thread_min_bytes = BUILD_THREAD_MIN_BYTES;
	r = page_pool_new(page_bytes, n_pages, &s->pool);
	if (r >= 0) {
		struct tiers_params tp = {
			.warm_bytes = s->p.warm_bytes,
			.eviction = p.eviction,
			.loader = p.loader,
			.topology = p.topology,
			.on_change = tiers_changed,
			.on_bad = tiers_bad_blob,
			.userdata = s,
		};

		r = tiers_new(&tp, &s->tiers);
	}
	if (r >= 0) {
		r = -pthread_create(&s->builder, NULL, builder_thread, s);
		s->builder_started = r == 0;
	}
	if (r >= 0)
		r = threadpool_new(p.n_threads, &s->threads);
	if (r >= 0)
		r = forward_ws_new(m, s->max_rows, p.max_context,
				   s->max_rows * MAX_LORAS_PER_REQUEST, p.n_threads, &s->ws);
	if (r < 0) {
		sched_free(s);
		return errmsg_set(e, r, "setting up the scheduler: %s", strerror(-r));
	}
	s->logits = malloc((size_t) p.max_sequences * m->hp.n_vocab * sizeof(float));
	pthread_mutex_init(&s->grammar_lock, NULL);
	s->rows = malloc(s->max_rows * sizeof(*s->rows));
	s->fseqs = malloc(p.max_sequences * sizeof(*s->fseqs));
	s->floras = malloc((size_t) p.max_sequences * MAX_LORAS_PER_REQUEST * sizeof(*s->floras));
	s->waiting = malloc(((size_t) p.queue_length + p.max_sequences) * sizeof(*s->waiting));
	s->running = malloc(p.max_sequences * sizeof(*s->running));
	s->cap_events = (size_t) p.max_sequences * 2 + p.queue_length + 16;
	s->events = malloc(s->cap_events * sizeof(*s->events));
	if (!s->logits || !s->rows || !s->fseqs || !s->floras || !s->waiting || !s->running ||
	    !s->events) {
		sched_free(s);
		return -ENOMEM;
	}
	s->stats.page_bytes = page_bytes;
	*ret = s;
	return 0;
}

struct sched *sched_free(struct sched *s)
{
	struct pending_event *evs;
	size_t n_evs;

	if (!s)
		return NULL;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	s->accepting = false;
	pthread_cond_broadcast(&s->wake);
	pthread_mutex_unlock(&s->lock);
	if (s->thread_started)
		pthread_join(s->thread, NULL);
	/* the builder (a build in progress ends first), then the loader thread, which calls back
	 * into s; builds never started give their reservations back */
	pthread_mutex_lock(&s->lock);
	pthread_cond_broadcast(&s->build_cond);
	pthread_mutex_unlock(&s->lock);
	if (s->builder_started)
		pthread_join(s->builder, NULL);
	for (size_t i = 0; i < s->n_adapters; i++)
		if (s->adapters[i]->building)
			build_finish(s, s->adapters[i], NULL, -ECANCELED, 0);

	pthread_mutex_lock(&s->lock);
	while (s->running && s->n_running)
		seq_finish(s, s->running[0], SCHED_FINISH_CANCELLED, 0, NULL);
	while (s->waiting && s->n_waiting) {
		struct seq *q = s->waiting[0];

		waiting_remove_at(s, 0);
		seq_finish(s, q, SCHED_FINISH_CANCELLED, 0, NULL); /* lets go of its warm copies */
	}
	evs = events_take(s, &n_evs);
	pthread_mutex_unlock(&s->lock);
	events_flush(s, evs, n_evs);
	free(evs);
	/* last: the requests above still told it what they no longer need */
	s->tiers = tiers_free(s->tiers);

	for (size_t i = 0; i < s->n_adapters; i++) {
		adapter_evict(s, s->adapters[i], true);
		lora_adapter_free(s->adapters[i]->adapter);
		free(s->adapters[i]);
	}
	free(s->adapters);
	page_pool_free(s->pool);
	threadpool_free(s->threads);
	forward_ws_free(s->ws);
	free(s->logits);
	grammar_vocab_free(s->gvocab);
	free(s->eog_ids);
	free(s->mask);
	free(s->masked);
	pthread_mutex_destroy(&s->grammar_lock);
	free(s->rows);
	free(s->fseqs);
	free(s->floras);
	free(s->waiting);
	free(s->running);
	free(s->events);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->wake);
	pthread_cond_destroy(&s->idle);
	free(s);
	return NULL;
}

/* ---- requests ---- */

int sched_submit(struct sched *s, const struct sched_request *req, uint64_t *ret_id,
		 struct errmsg *e)
{
	struct seq *q;
	uint64_t total;
	int r;

	assert_return(s && req && (req->prompt || req->n_prompt == 0), -EINVAL);
	if (req->n_prompt == 0)
		return errmsg_set(e, -EINVAL, "the prompt is empty");
	if (req->n_loras > MAX_LORAS_PER_REQUEST)
		return errmsg_set(e, -EINVAL, "%zu adapters on one request (at most %d)", req->n_loras,
				  MAX_LORAS_PER_REQUEST);
	total = (uint64_t) req->n_prompt + (req->max_tokens ? req->max_tokens : 1);
	if (req->n_prompt >= s->p.max_context || total > s->p.max_context)
		return errmsg_set(e, -E2BIG,
				  "this request needs %llu tokens (%zu in the prompt, %u to generate); "
				  "the context holds %u",
				  (unsigned long long) total, req->n_prompt, req->max_tokens,
				  s->p.max_context);
	for (size_t i = 0; i < req->n_prompt; i++)
		if (req->prompt[i] < 0 || (uint32_t) req->prompt[i] >= s->m->hp.n_vocab)
			return errmsg_set(e, -EINVAL, "token id %d at prompt position %zu is not in the "
						      "vocabulary (%u tokens)",
					  req->prompt[i], i, s->m->hp.n_vocab);

	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->tokens = malloc((size_t) s->p.max_context * sizeof(*q->tokens));
	q->blocks = malloc((size_t) s->max_blocks * sizeof(*q->blocks));
	if (!q->tokens || !q->blocks) {
		seq_free(q);
		return -ENOMEM;
	}
	r = sampler_new(&req->sampling, s->m->hp.n_vocab, &q->sampler);
	if (r < 0) {
		seq_free(q);
		return errmsg_set(e, r, "invalid sampling settings");
	}
	if (req->grammar) {
		r = grammar_setup(s);
		if (r >= 0)
			r = matcher_new(req->grammar, s->gvocab, &q->matcher);
		q->grammar_fast = req->sampling.temperature <= 0 ||
				  (req->sampling.top_k <= 0 && req->sampling.top_p >= 1 &&
				   req->sampling.min_p <= 0);
		if (r < 0) {
			seq_free(q);
			return errmsg_set(e, r, "cannot start the grammar: %s", strerror(-r));
		}
	}
	memcpy(q->tokens, req->prompt, req->n_prompt * sizeof(*q->tokens));
	q->n_tokens = q->n_prompt = (uint32_t) req->n_prompt;
	for (uint32_t i = 0; i < q->n_prompt; i++)
		sampler_accept(q->sampler, q->tokens[i]);
	detok_init(&q->detok, s->m->vocab, false);
	q->detok.first = false; /* the caller has the prompt; keep the continuation's spaces */
	q->max_tokens = req->max_tokens;
	q->ignore_eos = req->ignore_eos;
	q->caller = req->caller;
	q->on_event = req->on_event;
	q->userdata = req->userdata;

	pthread_mutex_lock(&s->lock);
	if (!s->accepting) {
		pthread_mutex_unlock(&s->lock);
		seq_free(q);
		return errmsg_set(e, -ESHUTDOWN, "the scheduler is stopping");
	}
	/* QueueLength counts requests waiting beyond the free running slots: a burst that arrives
	 * before the scheduler thread admits anything still fills every slot, and
	 * n_waiting + n_running never exceeds queue_length + max_sequences (the arrays' size). */
	if (s->n_waiting + s->n_running >= s->p.queue_length + s->p.max_sequences) {
		pthread_mutex_unlock(&s->lock);
		seq_free(q);
		return errmsg_set(e, -EAGAIN, "the queue is full (%u waiting)", s->p.queue_length);
	}
	for (size_t i = 0; i < req->n_loras; i++) {
		struct adapter_entry *a = adapter_find(s, req->loras[i].name ? req->loras[i].name : "");

		if (!a || !isfinite(req->loras[i].scale)) {
			for (uint32_t k = 0; k < q->n_loras; k++)
				q->loras[k].entry->users--;
			pthread_mutex_unlock(&s->lock);
			seq_free(q);
			if (!a)
				return errmsg_set(e, -ENOENT, "no adapter named '%s'",
						  req->loras[i].name ? req->loras[i].name : "");
			return errmsg_set(e, -EINVAL, "adapter scale is not a finite number");
		}
		a->users++;
		a->requests++;
		q->loras[q->n_loras++] = (struct seq_lora){ .entry = a, .scale = req->loras[i].scale };
	}
	q->id = ++s->next_id;
	q->state = SEQ_WAITING;
	s->waiting[s->n_waiting++] = q;
	*ret_id = q->id;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int sched_cancel(struct sched *s, uint64_t id)
{
	int r = -ENOENT;

	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->n_running && r < 0; i++)
		if (s->running[i]->id == id) {
			s->running[i]->cancel = true;
			r = 0;
		}
	for (uint32_t i = 0; i < s->n_waiting && r < 0; i++)
		if (s->waiting[i]->id == id) {
			s->waiting[i]->cancel = true;
			r = 0;
		}
	if (r == 0) {
		s->poked = true;
		pthread_cond_signal(&s->wake);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

void sched_drain(struct sched *s, uint64_t timeout_ns)
{
	struct timespec deadline;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += (time_t) (timeout_ns / 1000000000ull);
	deadline.tv_nsec += (long) (timeout_ns % 1000000000ull);
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&s->lock);
	s->accepting = false;
	while ((s->n_running || s->n_waiting) && s->thread_started)
		if (pthread_cond_timedwait(&s->idle, &s->lock, &deadline) != 0)
			break;
	for (uint32_t i = 0; i < s->n_running; i++)
		s->running[i]->cancel = true;
	for (uint32_t i = 0; i < s->n_waiting; i++)
		s->waiting[i]->cancel = true;
	s->poked = true;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
}

void sched_test_hold(struct sched *s, uint64_t after_tokens)
{
	pthread_mutex_lock(&s->lock);
	s->hold_after_tokens = after_tokens > UINT64_MAX - s->stats.tokens_generated
				       ? UINT64_MAX
				       : s->stats.tokens_generated + after_tokens;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
}

void sched_get_stats(struct sched *s, struct sched_stats *ret)
{
	pthread_mutex_lock(&s->lock);
	*ret = s->stats;
	ret->waiting = s->n_waiting;
	ret->running = s->n_running;
	ret->pool_pages_total = page_pool_n_pages(s->pool);
	ret->pool_pages_free = page_pool_n_free(s->pool);
	ret->pool_pages_kv = page_pool_n_kind(s->pool, PAGE_KIND_KV);
	ret->pool_pages_adapters = page_pool_n_kind(s->pool, PAGE_KIND_ADAPTER);
	ret->eviction = evict_policy_name(s->p.eviction);
	ret->hot_budget_bytes = s->hot_budget;
	ret->hot_bytes = hot_used(s);
	pthread_mutex_unlock(&s->lock);
	tiers_get_stats(s->tiers, &ret->tiers);
}

/* ---- adapter registry ---- */

int sched_add_adapter(struct sched *s, struct lora_adapter *a, struct errmsg *e)
{
	struct adapter_entry *entry, **n;
	int r;

	assert_return(s && a && a->meta.name, -EINVAL);
	r = lora_adapter_check_base(a, s->m, e);
	if (r < 0)
		return r;
	entry = calloc(1, sizeof(*entry));
	if (!entry)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	if (adapter_find(s, a->meta.name)) {
		pthread_mutex_unlock(&s->lock);
		free(entry);
		return errmsg_set(e, -EEXIST, "an adapter named '%s' is already loaded", a->meta.name);
	}
	n = realloc(s->adapters, (s->n_adapters + 1) * sizeof(*n));
	if (!n) {
		pthread_mutex_unlock(&s->lock);
		free(entry);
		return -ENOMEM;
	}
	s->adapters = n;
	entry->adapter = a;
	entry->serial = ++s->adapter_serial;
	s->adapters[s->n_adapters++] = entry;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int sched_remove_adapter(struct sched *s, const char *name)
{
	struct adapter_entry *a;

	pthread_mutex_lock(&s->lock);
	a = adapter_find(s, name);
	if (!a) {
		pthread_mutex_unlock(&s->lock);
		return -ENOENT;
	}
	if (a->users > 0 || a->building) {
		pthread_mutex_unlock(&s->lock);
		return -EBUSY;
	}
	for (size_t i = 0; i < s->n_adapters; i++)
		if (s->adapters[i] == a) {
			memmove(&s->adapters[i], &s->adapters[i + 1],
				(s->n_adapters - i - 1) * sizeof(*s->adapters));
			s->n_adapters--;
			break;
		}
	if (a->res) {
		adapter_evict(s, a, true);
		s->stats.adapter_evictions--; /* an unload is not an eviction */
	}
	tiers_remove(s->tiers, a->blob);
	lora_adapter_free(a->adapter);
	free(a);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int sched_pin_adapter(struct sched *s, const char *name, bool pin)
{
	struct adapter_entry *a;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	a = adapter_find(s, name);
	if (!a) {
		pthread_mutex_unlock(&s->lock);
		return -ENOENT;
	}
	if (pin && a->blob && !a->res) {
		/* a pin makes it hot now: wait for the disk without the lock, the adapter held
		 * against removal meanwhile (users > 0) */
		a->users++;
		pthread_mutex_unlock(&s->lock);
		r = tiers_wait(s->tiers, a->blob, NULL);
		pthread_mutex_lock(&s->lock);
		a->users--;
		if (r == -E2BIG && a->blob) {
			adapter_untier(s, a); /* read from its file below */
			r = 0;
		}
	}
	while (r >= 0 && pin && a->building)
		pthread_cond_wait(&s->wake, &s->lock); /* the builder broadcasts when done */
	if (r < 0)
		;
	else if (pin && (r = adapter_make_resident(s, a, NULL)) == 0) {
		a->pinned = true;
		if (a->blob)
			tiers_pin(s->tiers, a->blob, true);
	} else if (!pin) {
		a->pinned = false;
		if (a->blob)
			tiers_pin(s->tiers, a->blob, false);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int sched_prefetch_adapter(struct sched *s, const char *name)
{
	struct adapter_entry *a;
	int r;

	pthread_mutex_lock(&s->lock);
	a = adapter_find(s, name);
	if (!a)
		r = -ENOENT;
	else if (a->blob && !a->res) {
		/* the loader thread reads it; a later step makes it hot (prefetch_promote) */
		enum tier_state st = tiers_want(s->tiers, a->blob, false);

		a->prefetch = true;
		pthread_cond_broadcast(&s->wake);
		r = st == TIER_BAD ? tiers_bad(s->tiers, a->blob, NULL) : 0;
	} else {
		r = adapter_make_resident(s, a, NULL);
		if (r == 0)
			a->last_used = s->stats.steps;
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int sched_set_adapter_source(struct sched *s, const char *name, const char *path,
			     const uint8_t sha256[32])
{
	struct adapter_entry *a;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	a = adapter_find(s, name);
	if (!a)
		r = -ENOENT;
	else if (a->blob)
		r = -EEXIST;
	else
		r = tiers_add(s->tiers, name, path, sha256, &a->blob);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int sched_mark_adapter_bad(struct sched *s, const char *name, int error, const char *message)
{
	struct adapter_entry *a;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	a = adapter_find(s, name);
	if (!a)
		r = -ENOENT;
	else if (!a->blob)
		r = -EINVAL;
	else
		tiers_mark_bad(s->tiers, a->blob, error, message);
	pthread_mutex_unlock(&s->lock);
	return r;
}

void sched_test_hold_builds(struct sched *s, bool hold)
{
	pthread_mutex_lock(&s->lock);
	s->hold_builds = hold;
	pthread_cond_broadcast(&s->build_cond);
	pthread_mutex_unlock(&s->lock);
}

void sched_test_hold_loads(struct sched *s, bool hold)
{
	tiers_test_hold_loads(s->tiers, hold);
}

void sched_foreach_adapter(struct sched *s,
			   void (*fn)(const struct sched_adapter_info *info, void *userdata),
			   void *userdata)
{
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n_adapters; i++) {
		struct adapter_entry *a = s->adapters[i];
		struct sched_adapter_info info = {
			.name = a->adapter->meta.name,
			.resident = a->res != NULL,
			.pinned = a->pinned,
			.rank = a->adapter->max_rank,
			.requests = a->requests,
			.bytes = a->res ? a->res->bytes : 0,
			.hot_hits = a->hot_hits,
			.hot_misses = a->hot_misses,
			.has_blob = a->blob != NULL,
			.warm = { .state = TIER_COLD, .node = -1 },
		};

		if (a->blob)
			tiers_blob_info(s->tiers, a->blob, &info.warm);
		info.tier = a->res ? "hot"
			    : !a->blob ? "cold"
				       : tier_state_name(info.warm.state);
		fn(&info, userdata);
	}
	pthread_mutex_unlock(&s->lock);
}

/* For tests: the pool's own check plus the scheduler's accounting of who holds pages. */
int sched_check_pool(struct sched *s);
int sched_check_pool(struct sched *s)
{
	size_t kv = 0, ad = 0;
	int r;

	pthread_mutex_lock(&s->lock);
	r = page_pool_check(s->pool);
	for (uint32_t i = 0; i < s->n_running; i++)
		kv += s->running[i]->n_blocks;
	for (uint32_t i = 0; i < s->n_waiting; i++)
		if (s->waiting[i]->n_blocks)
			r = -EUCLEAN; /* waiting sequences hold no memory */
	for (size_t i = 0; i < s->n_adapters; i++)
		ad += (s->adapters[i]->res ? s->adapters[i]->res->n_pages : 0) +
		      s->adapters[i]->n_build_pages;
	if (r == 0 && (kv != page_pool_n_kind(s->pool, PAGE_KIND_KV) ||
		       ad != page_pool_n_kind(s->pool, PAGE_KIND_ADAPTER)))
		r = -EUCLEAN;
	/* the tiers' budgets: hot adapter pages, warm copies */
	if (r == 0 && hot_used(s) > s->hot_budget)
		r = -EUCLEAN;
	if (r == 0)
		r = tiers_check(s->tiers);
	pthread_mutex_unlock(&s->lock);
	return r;
}
