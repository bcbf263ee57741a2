/* SPDX-License-Identifier: MIT */
/*
 * sched.h: the iteration-level scheduler — the C API the daemon (and molly-bench --serve)
 * uses to run many sequences with different adapters on one base model at once.
 *
 * Every step the scheduler builds one batch: one token for each running (decoding)
 * sequence, plus prefill chunks of waiting sequences under a per-step token budget, so
 * decoding keeps flowing while long prompts are read. Sequences join and leave the batch at
 * every step. The batch's rows are grouped by adapter for the LoRA shrink/expand (SGMV).
 *
 * Memory: one paged pool (struct page_pool) holds the KV blocks of every sequence (a block
 * table each) and the weights of resident adapters. When a sequence needs a KV block and the
 * pool has none, unused adapters are evicted first, then a victim sequence is preempted
 * (its blocks freed, its tokens recomputed when it resumes), so progress is guaranteed.
 *
 * Adapters given a blob (sched_set_adapter_source) are tiered (tiers.h): a cold one is read by
 * the loader thread while the batch goes on, a big one is made hot on the builder thread; only
 * the requests that need it wait.
 *
 * Threading: sched_submit(), sched_cancel(), sched_stats() and the adapter calls are safe from
 * any thread. Events are delivered on the scheduler's own thread (started by sched_start(), or
 * the caller's thread with sched_step() for tests): callbacks must not block and must not call
 * back into the scheduler except sched_cancel(). After the DONE or ERROR event of a request
 * no further event comes for it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "../engine/sampler.h"
#include "../grammar/grammar.h"
#include "../lora/resident.h"
#include "tiers.h"

struct model;
struct lora_adapter;
struct sched;

#define SCHED_HOT_BYTES_HALF UINT64_MAX

struct sched_params {
	uint32_t max_sequences;  /* running at once (default 8) */
	uint32_t queue_length;   /* requests waiting beyond the running slots before -EAGAIN
				  * (default 64) */
	uint32_t max_context;    /* per sequence, prompt + generated (default: model's, <= 8192) */
	uint32_t step_tokens;    /* token budget of one step (default 256) */
	size_t pool_bytes;       /* the paged pool (default: enough for max_sequences full contexts) */
	int n_threads;           /* compute threads (default: online CPUs) */
	/* Adapter tiers (tiers.h). hot_bytes: adapter weights in the pool at most (0: the whole
	 * pool; the daemon's default is half, [Adapters] HotBytes=); warm_bytes: warm copies of
	 * blobs (0: 2 GiB); eviction: the policy of both tiers (default GDSF). */
	uint64_t hot_bytes;      /* SCHED_HOT_BYTES_HALF: half the pool */
	uint64_t warm_bytes;
	enum evict_policy eviction;
	enum lora_hot_type hot_type; /* the hot form's rows: as stored (default) or Q8_0 */
	struct blob_loader_params loader;
	const struct numa_topology *topology; /* tests: NULL = the system's */
	/* warm → hot builds of adapters at least this big in the pool run on the builder thread
	 * (the batch goes on meanwhile); smaller ones on the scheduler thread. 0: 2 MiB */
	uint64_t build_thread_min_bytes;
	/* An adapter's blob failed to load (corrupt, truncated, unreadable): called on the loader
	 * thread; the daemon marks the version bad. May be NULL. */
	void (*on_adapter_bad)(const char *name, int error, const char *message, void *userdata);
	void *userdata;
};

enum sched_finish {
	SCHED_FINISH_STOP,      /* end-of-generation token */
	SCHED_FINISH_LENGTH,    /* max_tokens or context reached */
	SCHED_FINISH_CANCELLED, /* sched_cancel() */
};

const char *sched_finish_name(enum sched_finish f); /* "stop", "length", "cancelled" */

enum sched_event_type {
	SCHED_EVENT_TOKEN,
	SCHED_EVENT_DONE,
	SCHED_EVENT_ERROR,
};

struct sched_event {
	enum sched_event_type type;
	uint64_t id;
	/* TOKEN */
	int32_t token;
	const char *text; /* whole UTF-8 characters completed by this token (may be empty) */
	size_t text_len;
	float logprob;    /* log-probability of the token under the unmodified distribution */
	/* DONE and ERROR */
	enum sched_finish finish;
	uint32_t prompt_tokens;
	uint32_t completion_tokens;
	int error;        /* ERROR: -errno */
	const char *message; /* ERROR: human-readable */
};

typedef void (*sched_event_fn)(const struct sched_event *ev, void *userdata);

struct sched_lora {
	const char *name; /* a registered adapter */
	float scale;
};

struct sched_request {
	const int32_t *prompt; /* token ids (BOS included if wanted); copied by submit */
	size_t n_prompt;
	const struct sched_lora *loras; /* copied by submit; may be empty */
	size_t n_loras;
	struct sampler_params sampling;
	uint32_t max_tokens;   /* 0: until EOG or the context is full */
	bool ignore_eos;
	/* Constrained decoding (grammar.h, matcher.h): every generated token stays inside this
	 * grammar (the sequence takes its own reference; NULL: free). It finishes STOP once the
	 * text is complete and nothing may follow, or on an end-of-generation token where the
	 * text is complete; the mask makes it close within max_tokens when it can, else it ends
	 * LENGTH with a valid prefix. Constrained and free rows share one batched step. */
	struct grammar *grammar;
	uint64_t caller;       /* who asked (uid, member id...): admission is fair across callers */
	sched_event_fn on_event;
	void *userdata;
};

int sched_new(const struct model *m, const struct sched_params *p, struct sched **ret,
	      struct errmsg *e);
/* The pool's page size for this model: one KV block, and at least the longest adapter row.
 * Use it to size pool_bytes for a known set of adapters (lora_resident_pages_needed()). */
size_t sched_page_bytes(const struct model *m);
/* Stops the thread (cancelling everything in flight: each gets a CANCELLED DONE event). */
struct sched *sched_free(struct sched *s);
DEFINE_CLEANUP_FUNC(struct sched *, sched_free, NULL)

/* Starts the scheduler thread. Without it, drive the scheduler with sched_step(). */
int sched_start(struct sched *s);
/* Runs one iteration on the caller's thread; returns the number of tokens computed
 * (0 when idle). Only without sched_start(). */
int sched_step(struct sched *s);

/*
 * Queues a request. 0 and its id in *ret_id; -EAGAIN when the queue is full, -E2BIG when the
 * prompt does not fit max_context (e names the sizes), -ENOENT for an unknown adapter,
 * -EINVAL for bad sampling settings or token ids, -ESHUTDOWN when stopping.
 */
int sched_submit(struct sched *s, const struct sched_request *req, uint64_t *ret_id,
		 struct errmsg *e);
/* Cancels a waiting or running request (its DONE event says CANCELLED). -ENOENT if unknown
 * or already finished. */
int sched_cancel(struct sched *s, uint64_t id);
/* Stops accepting requests (-ESHUTDOWN) and waits until in-flight work is done or
 * timeout_ns has passed, then cancels what is left. */
void sched_drain(struct sched *s, uint64_t timeout_ns);

/*
 * Tests only: once after_tokens more tokens have been generated (counted from now; 0: at once),
 * the scheduler computes nothing more from the next step on; requests stay waiting or running,
 * and cancellations (sched_cancel, sched_drain's timeout) still finish theirs. UINT64_MAX
 * lifts the hold. It makes "still queued" and "still streaming" certain instead of likely.
 */
void sched_test_hold(struct sched *s, uint64_t after_tokens);

#define SCHED_PROMOTE_BUCKETS 9
extern const double sched_promote_bounds[SCHED_PROMOTE_BUCKETS - 1]; /* seconds */

struct sched_stats {
	uint32_t waiting;
	uint32_t running;
	uint64_t steps;
	uint64_t tokens_prefilled;
	uint64_t tokens_generated;
	uint64_t grammar_tokens;    /* tokens generated under a grammar */
	uint64_t grammar_masks;     /* of those, the steps that computed the whole mask */
	uint64_t preemptions;
	uint64_t adapter_evictions;
	size_t pool_pages_total;
	size_t pool_pages_kv;
	size_t pool_pages_adapters;
	size_t pool_pages_free;
	size_t page_bytes;
	/* adapter tiers */
	const char *eviction;       /* "gdsf" or "lru" */
	uint64_t hot_budget_bytes;
	uint64_t hot_bytes;         /* adapter pages × page bytes */
	uint64_t hot_hits, hot_misses; /* per request and adapter, at admission */
	uint64_t promotions;        /* warm → hot */
	uint64_t promote_build_ns;  /* summed time building hot forms (on the scheduler thread) */
	/* how long requests waited for an adapter that was not hot: counts per bucket
	 * (upper bounds sched_promote_bounds[], the last +Inf), and the sum */
	uint64_t promote_hist[SCHED_PROMOTE_BUCKETS];
	double promote_seconds;
	struct tiers_stats tiers;   /* warm tier and loader */
};
void sched_get_stats(struct sched *s, struct sched_stats *ret);

/* Adapters: registering checks the base (lora_adapter_check_base) and takes ownership of a
 * on success. Weights are brought into the pool when first used (or on prefetch/pin) and
 * evicted when the pool needs the room and no running sequence uses them. */
int sched_add_adapter(struct sched *s, struct lora_adapter *a, struct errmsg *e);
/* -EBUSY while a waiting or running request uses it. */
int sched_remove_adapter(struct sched *s, const char *name);
int sched_pin_adapter(struct sched *s, const char *name, bool pin);
/* A hint: make the adapter resident soon (before a request needs it). Returns at once: a
 * cold adapter is read by the loader thread, then made hot on a later step. */
int sched_prefetch_adapter(struct sched *s, const char *name);
/* The adapter's weights live in the blob at path with this SHA-256 (a registry blob): it
 * becomes tiered — cold until asked for, read and checked by the loader thread into the warm
 * tier, made hot from there. A corrupt blob fails the requests that need it, with the reason,
 * and calls on_adapter_bad. -ENOENT unknown adapter, -EEXIST already set. */
int sched_set_adapter_source(struct sched *s, const char *name, const char *path,
			     const uint8_t sha256[32]);
/* Marks a tiered adapter bad without reading its blob (a mark the daemon kept from an earlier
 * run and found still true): its requests fail at once with message. -ENOENT, -EINVAL when it
 * has no blob. */
int sched_mark_adapter_bad(struct sched *s, const char *name, int error, const char *message);
/* Tests: while held, no cold adapter starts loading (see tiers_test_hold_loads). */
void sched_test_hold_loads(struct sched *s, bool hold);
/* Tests: while held, the builder thread starts no warm → hot build. */
void sched_test_hold_builds(struct sched *s, bool hold);

struct sched_adapter_info {
	const char *name;    /* valid until the adapter is removed */
	bool resident;
	bool pinned;
	uint32_t rank;
	uint64_t requests;   /* requests that used it */
	size_t bytes;        /* weight bytes when resident */
	/* tiers */
	const char *tier;    /* "hot", "warm", "loading", "cold", "bad" */
	uint64_t hot_hits, hot_misses;
	bool has_blob;       /* tiered through its registry blob (sched_set_adapter_source) */
	struct tier_blob_info warm; /* when has_blob */
};
/* Calls fn for every registered adapter (under the scheduler's lock: fn must not call in). */
void sched_foreach_adapter(struct sched *s,
			   void (*fn)(const struct sched_adapter_info *info, void *userdata),
			   void *userdata);
