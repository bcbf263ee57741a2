/* SPDX-License-Identifier: MIT */
/*
 * manager.h: the daemon's request pipeline, shared by every front end (D-Bus, HTTP, later the
 * /dev/molly bridge). It owns the configuration, the base model, the scheduler and the adapter
 * registry, and turns a front's request into scheduler work:
 *
 *   front ──manager_submit(request, caller, callback)──▶ resolve model/adapters, check the
 *   caller's scopes ──▶ chat template (engine/chat.h) or plain prompt ──▶ vocab_tokenize (BOS
 *   rule; parse_special for chat) ──▶ sched_submit ──▶ TOKEN events ──▶ stop strings (text that
 *   may begin a stop string is held back; a match truncates the text, cancels the scheduler
 *   request and finishes with "stop") ──▶ callback(TEXT…, then exactly one DONE or ERROR).
 *
 * Threading:
 *  - manager_submit(), manager_cancel(), manager_get_stats(), manager_foreach_model(),
 *    manager_get_config() and the adapter calls are safe from any thread.
 *  - Events are delivered on the scheduler's thread. The callback must not block and must not
 *    call into the manager except manager_cancel(): a front copies the event (text, logprobs)
 *    and hands it to its own loop (eventfd, pipe, MHD resume...). Pointers inside an event are
 *    valid only during the callback.
 *  - After the DONE or ERROR event of a request, no further event comes for it and its id is
 *    forgotten (manager_cancel() then returns -ENOENT).
 *  - manager_reload() and manager_free() are for the main thread.
 *
 * Usage sketch (a front):
 *
 *	struct manager_request r;
 *	manager_request_init(&r);
 *	r.prompt = "Once upon a time";
 *	r.max_tokens = 32;
 *	struct manager_caller c = { .uid = uid, .front = "dbus" };
 *	struct manager_error err;
 *	uint64_t id;
 *	r = manager_submit(m, &r, &c, on_event, my_state, &id, &err);
 *	if (r < 0) reply_error(manager_err_name(err.kind), err.message);
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "basic/errmsg.h"
#include "basic/macro.h"
#include "engine/chat.h"
#include "policy/policy.h"
#include "sched/sched.h"

struct config;
struct manager;

/* ---- errors every front maps to its own protocol ---- */

enum manager_err {
	MANAGER_ERR_NONE,
	MANAGER_ERR_INVALID_REQUEST,   /* bad parameter, bad UTF-8, empty prompt, bad stop... */
	MANAGER_ERR_MODEL_NOT_FOUND,   /* unknown model name or adapter */
	MANAGER_ERR_CONTEXT_LENGTH,    /* prompt (+ max_tokens) does not fit the context */
	MANAGER_ERR_FORBIDDEN,         /* outside the caller's member scopes (Models=, Admin=) */
	MANAGER_ERR_QUEUE_FULL,        /* QueueLength= requests are already waiting */
	MANAGER_ERR_UNAVAILABLE,       /* loading, reloading the model, or stopping */
	MANAGER_ERR_CANCELLED,         /* cancelled by shutdown (a client's own cancel is DONE) */
	MANAGER_ERR_INTERNAL,
};

/* OpenAI/vLLM-style code: "invalid_request_error", "model_not_found",
 * "context_length_exceeded", "forbidden", "queue_full", "service_unavailable",
 * "cancelled", "internal_error". */
const char *manager_err_name(enum manager_err k);
/* The HTTP status a front answers with: 400, 404, 400, 403, 429, 503, 503, 500. */
int manager_err_http_status(enum manager_err k);
/* The D-Bus error name: org.molly.Error.InvalidRequest, .ModelNotFound,
 * .ContextLengthExceeded, org.freedesktop.DBus.Error.AccessDenied, .QueueFull, .Unavailable,
 * .Cancelled, .Internal. */
const char *manager_err_dbus_name(enum manager_err k);

struct manager_error {
	enum manager_err kind;
	int error;          /* -errno behind it */
	char message[512];  /* human-readable, names the offending value */
};

/* ---- requests ---- */

struct manager_lora {
	const char *name; /* a loaded adapter */
	float scale;      /* multiplies the adapter's alpha/rank */
};

#define MANAGER_MAX_STOP 16        /* stop strings per request */
#define MANAGER_MAX_STOP_BYTES 256 /* bytes per stop string */
#define MANAGER_MAX_LORAS 8        /* adapters per request */

struct manager_request {
	/* Exactly one of prompt (a completion) or messages (a chat). */
	const char *prompt;                   /* UTF-8, NUL-terminated */
	const struct chat_message *messages;  /* roles "system", "user", "assistant", "tool" */
	size_t n_messages;
	/* NULL or "": the base. Else the base's name, an adapter's name, or "base:adapter". */
	const char *model;
	const struct manager_lora *loras;     /* added to the adapter named by model, if any */
	size_t n_loras;
	uint32_t max_tokens;                  /* 0: until end of generation or context full */
	float temperature;                    /* <= 0: greedy. Default 1.0 (OpenAI) */
	float top_p;                          /* >= 1: off. Default 1.0 */
	bool has_seed;                        /* false: a random seed */
	uint64_t seed;
	const char *const *stop;              /* NULL-free array, up to MANAGER_MAX_STOP */
	size_t n_stop;
	bool logprobs;                        /* TEXT events carry per-token log-probabilities */
	bool ignore_eos;
	/* The caller's sensitivity class ("public", "personal", "secret"), or NULL: only a
	 * stricter class than the detectors find counts. */
	const char *declared_class;
	/* The request's own cost ceiling for routing, in the [Target] CostPerMTok units (what the
	 * candidates' estimated costs add up to), or 0: [Router] Budget= alone. It can only
	 * tighten the operator's budget, never widen it. */
	double budget;
	/* Constrained decoding: GBNF (grammar.h; response formats are compiled to it by the
	 * fronts, schema.h), compiled once per text (cached). NULL: free. */
	const char *grammar;
	/* chat: the tools as a JSON array of OpenAI tools (chat-tools.h), rendered into the
	 * prompt by the family's template; NULL: none. The family must define tool use. */
	const char *tools_json;
	/* Requests with a grammar, tools or tool messages run on this machine (T0): the remote
	 * targets' interface carries neither. */
};

/* Sets the defaults: temperature 1, top_p 1, everything else zero/NULL. */
void manager_request_init(struct manager_request *r);

struct manager_caller {
	uid_t uid;           /* (uid_t) -1 when unknown (HTTP over TCP) */
	const char *member;  /* [Member NAME] the caller authenticated as (API key or UIDs=), or
	                      * NULL: no member scopes apply */
	const char *front;   /* "dbus", "http", "dev": for logs and per-front counters */
};

/* ---- events (scheduler thread) ---- */

enum manager_event_type {
	MANAGER_EVENT_TEXT,
	MANAGER_EVENT_DONE,
	MANAGER_EVENT_ERROR,
};

/* One generated token whose text is complete inside a TEXT event (logprobs on). */
struct manager_token {
	int32_t id;
	const char *text;   /* the token's text (whole UTF-8 characters; may be "") */
	size_t text_len;
	float logprob;      /* natural log, under the unmodified distribution */
};

struct manager_event {
	enum manager_event_type type;
	uint64_t id;
	/* TEXT: a chunk of released text (stop-string prefixes are held back, so a chunk may
	 * cover several tokens, and a token's text may be empty). Never empty when emitted. */
	const char *text;
	size_t text_len;
	const struct manager_token *tokens; /* logprobs only: tokens ending in this chunk */
	size_t n_tokens;
	/* DONE */
	const char *finish_reason;  /* "stop" (EOG or a stop string), "length", "cancelled" */
	uint32_t prompt_tokens;
	uint32_t completion_tokens;
	const char *model;          /* the resolved model id: base name or adapter name */
	/* DONE, routed requests under a cascade or mixture ([Router] ConfidenceThreshold= > 0 or
	 * a mixture): the chosen answer's confidence, exp(mean token log-probability) in (0, 1]
	 * (has_confidence false: unknown — a remote answer without log-probabilities), and,
	 * when the answer stayed below the threshold with no higher tier left to ask, a note
	 * saying so (NULL otherwise). */
	bool has_confidence;
	float confidence;
	const char *uncertainty;
	/* DONE: the routing target that answered ("local:<base>[:<adapter>]" or a [Target]
	 * name) when the router chose one; NULL otherwise. */
	const char *target;
	/* ERROR (e.g. shutdown cancelled it, or the engine failed) */
	const struct manager_error *error;
};

typedef void (*manager_event_fn)(const struct manager_event *ev, void *userdata);

/* ---- lifetime ---- */

/*
 * Loads the model named by config ([Model] Path=), creates the scheduler and loads the
 * [Adapters] Load= adapters. Takes a reference on config. Does not start the scheduler thread.
 * Errors in e name the file and what was wrong.
 */
int manager_new(struct config *config, struct manager **ret, struct errmsg *e);
/* The same, with remote targets reached through egress workers (egress NULL: in-process).
 * egress is borrowed: free the manager first. */
struct egress_client;
int manager_new_with_egress(struct config *config, struct egress_client *egress,
			    struct manager **ret, struct errmsg *e);
/* An audit record for a connection the kernel's egress filter refused (any thread). */
struct egress_denial;
void manager_audit_denial(struct manager *m, const struct egress_denial *d);
/* The /dev/molly front's state for Status ("kernel (/dev/molly-control)", "cuse",
 * "off: <why>"); set by that front, read by any thread (copied into buf). */
void manager_set_device_status(struct manager *m, const char *status);
void manager_device_status(struct manager *m, char *buf, size_t size);
/* "enforced", "disabled: <why>", "off (Enforce=no)...", for Status. */
const char *manager_egress_status(struct manager *m);
/* Stops the scheduler (cancelling what is left: each request gets an ERROR "cancelled"). */
struct manager *manager_free(struct manager *m);
DEFINE_CLEANUP_FUNC(struct manager *, manager_free, NULL)

int manager_start(struct manager *m);
/* Stops accepting (new submits fail with MANAGER_ERR_UNAVAILABLE) and waits up to timeout_ns
 * for in-flight work, then cancels what is left; every request still gets its final event. */
void manager_drain(struct manager *m, uint64_t timeout_ns);
/* TEST ONLY: holds the scheduler after after_tokens more generated tokens; UINT64_MAX lifts the
 * hold (sched_test_hold). mollyd: MOLLY_TEST_HOLD_AFTER_TOKENS, SIGUSR1, SIGUSR2. */
void manager_test_hold(struct manager *m, uint64_t after_tokens);
bool manager_is_stopping(struct manager *m);

/*
 * Applies a new configuration without dropping requests: member scopes, adapter set
 * ([Adapters] Load=: new ones loaded, ones no longer listed unloaded once idle), limits that can
 * change at run time. Keys that need a restart ([Model] Path=, [Engine] *) are reported in e as
 * a warning-like message but do not fail the reload (returns 1 then). Takes a reference.
 */
int manager_reload(struct manager *m, struct config *config, struct errmsg *e);

/* A new reference to the current configuration (it may be replaced by a reload at any time);
 * release it with config_unref(). */
struct config *manager_get_config(struct manager *m);

/* ---- requests ---- */

/*
 * Validates, resolves and queues a request. On success returns 0 with its id in *ret_id; the
 * callback may run (on the scheduler thread) before manager_submit() returns. On failure
 * returns -errno, fills err, and the callback is never called.
 */
int manager_submit(struct manager *m, const struct manager_request *r,
		   const struct manager_caller *caller, manager_event_fn fn, void *userdata,
		   uint64_t *ret_id, struct manager_error *err);
/* Cancels a request: its DONE event says "cancelled" (text released so far stays released).
 * -ENOENT when unknown or already finished. */
int manager_cancel(struct manager *m, uint64_t id);

/* ---- introspection ---- */

const char *manager_model_name(struct manager *m);
/* The model's chat family: 0, or -EOPNOTSUPP when chat is not available. */
int manager_chat_family(struct manager *m, enum chat_family *ret);  /* [Model] Name=; valid until free */
uint32_t manager_context_length(struct manager *m);

struct manager_stats {
	uint32_t waiting;             /* queue depth */
	uint32_t running;             /* running sequences */
	uint32_t max_sequences;
	uint32_t queue_length;
	uint64_t requests_total;      /* accepted by manager_submit */
	uint64_t requests_rejected;   /* failed in manager_submit */
	uint64_t requests_finished;   /* DONE events */
	uint64_t requests_failed;     /* ERROR events */
	uint64_t prompt_tokens;       /* of finished requests */
	uint64_t completion_tokens;
	size_t pool_pages_total;
	size_t pool_pages_free;
	/* [Policy] Judge= (manager-judge.h): questions put to the local model, and the verdicts
	 * (unclear: neither yes nor no, or the question could not be asked; timeout: no answer
	 * within JudgeTimeoutMs=) */
	uint64_t judge_asked;
	uint64_t judge_personal, judge_public, judge_unclear, judge_timeout;
	/* adapter tiers: the scheduler's view (hot pool, warm tier, loader), and blobs marked
	 * bad since start */
	struct sched_stats sched;
	uint64_t adapters_bad;
};
void manager_get_stats(struct manager *m, struct manager_stats *ret);

struct manager_adapter_info {
	const char *name;
	uint32_t version;           /* the version a request naming NAME gets (the active one) */
	const char *content_hash;   /* 64 hex digits: SHA-256 of the version's blob (its identity) */
	const char *path;           /* the version's blob in the registry */
	const char *base;           /* the base it was made for (description) */
	const char *const *domains;
	size_t n_domains;
	const char *const *exemplars; /* example prompts for the router's classifier */
	size_t n_exemplars;
	uint32_t rank;
	bool loaded;                /* registered with the scheduler (usable in requests) */
	bool resident;              /* weights in the pool */
	bool pinned;
	uint64_t requests;          /* requests that used it (the registry's count, plus this run's) */
	uint32_t running;           /* requests using it now (waiting or running) */
	uint64_t bytes;             /* the blob's size */
	/* "hot" (in the pool), "warm" (whole blob in host memory), "loading", "cold" (the blob
	 * on disk) or "bad" (its blob failed its check) */
	const char *tier;
	uint64_t hot_hits, hot_misses;   /* per request, since it was loaded */
	uint64_t warm_hits, warm_misses;
	uint64_t load_ns;                /* its last cold → warm read (0: never) */
	int numa_node;                   /* its warm copy's node (-1: none or unbound) */
	bool warm_locked;
	const char *base_quant;     /* the base's weight type it was imported against ("q8_0") */
};
/* Calls fn for every adapter name in the registry (at its active version; loaded or not), in
 * name order, reading no blob. Under a lock: fn must not call into the manager. */
void manager_foreach_adapter(struct manager *m,
			     void (*fn)(const struct manager_adapter_info *a, void *userdata),
			     void *userdata);

/* ---- adapters (administrative: fronts check the caller first) ---- */

/*
 * Imports the adapter at path (a PEFT directory, a GGUF LoRA file or a Molly adapter file) into
 * the registry (registry/registry.h) as a new version of NAME (default: the source's name),
 * after checking that it opens and fits the base, and makes it the active version; a loaded
 * NAME serves the new version from then on (content the name's active version has already:
 * nothing changes). progress (may be NULL) is called with bytes done and the total, from the
 * calling thread. *ret_name is malloc'd.
 * Errors: -EXDEV (other base), -EINVAL (bad name or file), -ENOSPC (registry or disk full)...
 */
int manager_adapter_import(struct manager *m, const char *path, const char *name,
			   void (*progress)(uint64_t done, uint64_t total, void *userdata),
			   void *userdata, char **ret_name, struct manager_error *err);
/* Loads NAME (its active version) from the registry, so that requests may name it (NAME,
 * NAME@N, NAME@sha256:PREFIX). path (vLLM's load_lora_adapter) is imported as a version of NAME
 * first. A name not in the registry but in [Adapters] Directory= (the drop folder) is imported
 * from there. -EEXIST when loaded already, -ENOENT when not found. */
int manager_adapter_load(struct manager *m, const char *name, const char *path,
			 struct manager_error *err);
/* -EBUSY while requests use it; -ENOENT when not loaded. Every version the name made
 * computable leaves the scheduler (unless another loaded name has the same content). */
int manager_adapter_unload(struct manager *m, const char *name, struct manager_error *err);
/* Pins the loaded name's active version in the pool, and keeps it from garbage collection. */
int manager_adapter_pin(struct manager *m, const char *name, bool pin, struct manager_error *err);
/* Starts reading a loaded adapter toward the hot tier now (returns at once). */
int manager_adapter_prefetch(struct manager *m, const char *name, struct manager_error *err);

/* The registry's versions of name, oldest first (fn gets a borrowed record). */
struct registry_version;
int manager_adapter_history(struct manager *m, const char *name,
			    int (*fn)(const struct registry_version *v, void *ud), void *ud,
			    struct manager_error *err);
/* Makes version the active one (a loaded name follows). */
int manager_adapter_rollback(struct manager *m, const char *name, uint32_t version,
			     struct manager_error *err);
/* Unloads name (when loaded) and removes every version of it and their blobs. */
int manager_adapter_remove(struct manager *m, const char *name, struct manager_error *err);
/* Prunes versions beyond [Adapters] KeepVersions= and removes unreferenced blobs. */
int manager_adapter_gc(struct manager *m, uint32_t *ret_blobs, uint64_t *ret_bytes,
		       struct manager_error *err);

/* ---- policy and audit ---- */

/*
 * The sovereignty policy's decision for a request, without generating (Policy1.Explain):
 * class, findings (offsets into the text the policy sees: the prompt, or the messages'
 * contents joined by "\n") and permitted tiers. Every submitted request is evaluated the
 * same way, and one audit record ([Paths] StateDirectory=/audit, docs/audit.md) is written
 * when it ends or is rejected. *ret is released with policy_decision_done().
 */
int manager_explain(struct manager *m, const struct manager_request *r,
		    const struct manager_caller *caller, struct policy_decision *ret,
		    struct manager_error *err);
/*
 * The router's view of a request (Policy1.Explain with routing): every candidate target with
 * its score terms and why it is excluded, the domain posterior's top domain, and what the
 * router would do. Needs the policy decision d from manager_explain(). Release with
 * manager_route_explain_done().
 */
struct manager_route_candidate {
	char name[200];
	unsigned tier;
	double quality, cost, latency_s, score;
	bool usable;            /* false: ranked last (why_unusable) */
	const char *excluded;   /* static text; NULL: ranked */
	const char *why_unusable;
	bool chosen;
};
struct manager_route_explain {
	bool routed;            /* false: no routing (no targets, no adapters with domains) */
	struct manager_route_candidate *c; /* malloc'd, n */
	size_t n;
	char top_domain[64];    /* "" without a classifier */
	double top_p;
	double entropy;         /* normalised, 0..1 */
	char action[64];        /* "single", "cascade", "mixture of N" */
};
int manager_explain_route(struct manager *m, const struct manager_request *r,
			  const struct manager_caller *caller, const struct policy_decision *d,
			  struct manager_route_explain *ret);
void manager_route_explain_done(struct manager_route_explain *x);

/* Waits until the audit records of the requests finished so far are written. */
void manager_audit_sync(struct manager *m);

/* Whether the caller's member (if any) may use model (a base/adapter/"base:adapter" name). */
bool manager_caller_may_use(struct manager *m, const struct manager_caller *caller,
			    const char *model);
