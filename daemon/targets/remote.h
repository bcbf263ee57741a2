/* SPDX-License-Identifier: MIT */
/*
 * remote.h: an OpenAI-compatible endpoint (another mollyd, llama.cpp's server, vLLM, Ollama, a
 * public API) as a routing target in T1..T3. The one narrow interface every remote call goes
 * through: a request in, a stream of events out —
 *
 *   remote_submit(target, request, callback) ──▶ TEXT…, then exactly one DONE or ERROR
 *   remote_cancel(target, id)                ──▶ the final event says "cancelled"
 *
 * so that the egress work can move the calls into one worker process per tier without touching
 * the router.
 *
 * Transport: libcurl, one worker thread per request (a blocking easy handle): POST
 * <URL>/v1/chat/completions (messages) or <URL>/v1/completions (prompt) with "stream": true,
 * the answer parsed as Server-Sent Events. Errors are typed (remote_error) so the router can
 * fall back on a dead target and not on a request that is simply too long.
 *
 * Retries: a connection failure, a timeout, HTTP 429 or 5xx before the first byte of the
 * answer is retried up to Retries= times after remote_backoff_ns() (exponential, bounded, with
 * jitter); once text went out, never (the client saw it). Timeouts: TimeoutSec= without a byte
 * (connect, first byte, or between chunks).
 *
 * Health: a failed request (after its retries) or health check puts the target in a cool-down
 * that doubles with each consecutive failure (1 s … 60 s); remote_target_available() is false
 * meanwhile. remote_health_check() does GET <URL>/v1/models. The time to the first byte of
 * successful calls is kept as a moving average (remote_target_latency_ms()).
 *
 * Credentials: an API key read once, at remote_target_new(), from CredentialFile= (absolute;
 * or a name in $CREDENTIALS_DIRECTORY, systemd's LoadCredential=); a file that others can
 * read is refused. Sent as "Authorization: Bearer KEY".
 *
 * Threading: every function is safe from any thread. Events come on the request's worker
 * thread; the callback must not block for long and must not call remote_target_free().
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "basic/errmsg.h"
#include "basic/macro.h"
#include "engine/chat.h"

enum remote_error {
	REMOTE_ERR_NONE,
	REMOTE_ERR_DOWN,       /* could not connect, or the target is cooling down */
	REMOTE_ERR_TIMEOUT,    /* no byte for TimeoutSec= */
	REMOTE_ERR_SERVER,     /* HTTP 429/5xx, or a broken answer */
	REMOTE_ERR_CONTEXT,    /* the target says the request is too long for it */
	REMOTE_ERR_REJECTED,   /* other 4xx: the target refuses this request */
	REMOTE_ERR_CANCELLED,  /* remote_cancel() or remote_target_free() */
	REMOTE_ERR_INTERNAL,
	REMOTE_ERR_BLOCKED,    /* the kernel's egress filter refused the connection (EPERM), or
				* remote tiers are disabled because enforcement could not start */
	REMOTE_ERR_REFUSED,    /* the egress worker's own check refused the payload for its tier */
	REMOTE_ERR_COUNT_,
};
const char *remote_error_name(enum remote_error e); /* "down", "timeout", ... */

struct remote_target_config {
	const char *name;
	const char *url;             /* http(s)://HOST[:PORT][/PREFIX]; "/v1/..." is appended */
	const char *model;           /* the "model" field sent; NULL: name */
	const char *credential_file; /* NULL: $CREDENTIALS_DIRECTORY/<name> if it exists */
	const char *key;             /* the API key itself (the egress worker gets it from the
				      * core, which read the credential); overrides the file */
	uint64_t timeout_ns;         /* 0: 30 s */
	uint32_t retries;            /* extra attempts before the first byte */
	uint64_t backoff_base_ns;    /* 0: 100 ms */
	uint64_t backoff_max_ns;     /* 0: 2 s */
	/* Pins for the URL's host, in CURLOPT_RESOLVE's form "HOST:PORT:ADDR[,ADDR...]" (an
	 * IPv6 ADDR in brackets): libcurl connects only there and never asks DNS. NULL/0: none.
	 * The egress worker sets them from its own resolution (the addresses its allow-list
	 * holds); remote_target_set_resolve() replaces them later. */
	const char *const *resolve;
	size_t n_resolve;
};

struct remote_target;

int remote_target_new(const struct remote_target_config *cfg, struct remote_target **ret,
		       struct errmsg *e);
/* Cancels what is in flight and waits for every final event. NULL-safe. */
struct remote_target *remote_target_free(struct remote_target *t);
DEFINE_CLEANUP_FUNC(struct remote_target *, remote_target_free, NULL)

const char *remote_target_name(const struct remote_target *t);
/* False while cooling down after failures. */
bool remote_target_available(struct remote_target *t);
/* Moving average of the time to the first byte; 0 before any success. */
double remote_target_latency_ms(struct remote_target *t);
/* GET /v1/models within the timeout: 0, or -errno with the reason in e (and a cool-down). */
int remote_health_check(struct remote_target *t, struct errmsg *e);

struct remote_request {
	const char *prompt;                  /* exactly one of prompt or messages */
	const struct chat_message *messages;
	size_t n_messages;
	uint32_t max_tokens;                 /* 0: not sent */
	float temperature;
	float top_p;
	bool has_seed;
	uint64_t seed;
	const char *const *stop;
	size_t n_stop;
	/* What the policy decided, for the egress hand-off (the core hands a request to a tier's
	 * worker only when these include the tier; the worker checks again). The in-process
	 * transport ignores them. permitted_tiers 0: not given (refused by the egress client). */
	uint32_t permitted_tiers;            /* POLICY_TIER() bits */
	int sensitivity;                     /* enum policy_class */
	bool logprobs;                       /* ask for the tokens' log-probabilities (the
					      * DONE event sums what the answer carried) */
};

enum remote_event_type {
	REMOTE_EVENT_TEXT,
	REMOTE_EVENT_DONE,
	REMOTE_EVENT_ERROR,
};

struct remote_event {
	enum remote_event_type type;
	uint64_t id;
	const char *text;             /* TEXT: never empty */
	size_t text_len;
	const char *finish_reason;    /* DONE: "stop", "length", "cancelled" */
	uint32_t prompt_tokens;       /* DONE: from the answer's usage, when it has one */
	uint32_t completion_tokens;   /* DONE: usage, else the number of chunks */
	uint32_t n_logprobs;          /* DONE: token log-probabilities the answer carried (0:
				       * none: the target does not report them) */
	double logprob_sum;           /* DONE: their sum (natural log) */
	enum remote_error error;      /* ERROR */
	int http_status;              /* ERROR: 0 when none came */
	const char *message;          /* ERROR: human-readable */
	bool text_sent;               /* ERROR: whether TEXT events went out before it */
};

typedef void (*remote_event_fn)(const struct remote_event *ev, void *userdata);

/* Copies r, starts the worker and returns its id (> 0) in *ret_id. Events may come before it
 * returns. -EHOSTDOWN while the target cools down (no event then). */
int remote_submit(struct remote_target *t, const struct remote_request *r, remote_event_fn fn,
		  void *userdata, uint64_t *ret_id);
/* -ENOENT when unknown or already finished. */
int remote_cancel(struct remote_target *t, uint64_t id);

/* Replaces the CURLOPT_RESOLVE pins (see remote_target_config); calls that start after it use
 * the new ones. In-process transport only (-EOPNOTSUPP otherwise). */
int remote_target_set_resolve(struct remote_target *t, const char *const *resolve, size_t n);
/* Whether no call is in flight (a replaced target is freed once it is idle). */
bool remote_target_idle(struct remote_target *t);

/*
 * Another transport behind the same interface: the egress client (daemon/egress/client.h)
 * runs the calls in the tier's worker process instead of in this one. remote_submit(),
 * remote_cancel(), remote_target_available() and remote_target_latency_ms() go to these
 * hooks (remote_health_check() to health_check: it asks for a check and answers from what is
 * known now; the result arrives later); remote_target_free() calls free_ctx. Same contract as above: events on another
 * thread, exactly one final event per accepted call.
 */
struct remote_transport {
	int (*submit)(void *ctx, const struct remote_request *r, remote_event_fn fn, void *userdata,
		      uint64_t *ret_id);
	int (*cancel)(void *ctx, uint64_t id);
	bool (*available)(void *ctx);
	double (*latency_ms)(void *ctx);
	int (*health_check)(void *ctx, struct errmsg *e);
	void (*free_ctx)(void *ctx);
};
/* A target named name whose calls go through tr (ctx: taken; freed by free_ctx). */
int remote_target_new_transport(const char *name, const struct remote_transport *tr, void *ctx,
				struct remote_target **ret);

/* ---- parts, exposed for tests ---- */

/* The delay before retry number attempt (1-based): base·2^(attempt-1), capped at max, then
 * scaled by a jitter in [0.5, 1] (jitter01 in [0, 1]). Always in [base/2, max]. */
uint64_t remote_backoff_ns(uint32_t attempt, uint64_t base_ns, uint64_t max_ns, double jitter01);

/* Reads an API key: the file's content without surrounding whitespace. Refuses a file that is
 * not a regular file, is readable or writable by others (-EPERM), is empty or over 16 KiB. */
int remote_credential_read(const char *path, char **ret, struct errmsg *e);
/* The key for target name as remote_target_new() finds it: credential_file (absolute, or a
 * name in $CREDENTIALS_DIRECTORY), else $CREDENTIALS_DIRECTORY/<name> when it exists. 0 with
 * *ret NULL when there is none. */
int remote_credential_find(const char *name, const char *credential_file, char **ret,
			   struct errmsg *e);

/* Server-Sent Events: bytes in, each event's data (the "data:" lines joined by '\n') out,
 * however the bytes are split. Lines end in "\n", "\r\n" or "\r"; comments and other fields
 * are ignored. The callback returns < 0 to stop (remote_sse_feed() returns it). */
struct remote_sse;
typedef int (*remote_sse_fn)(const char *data, size_t len, void *userdata);
int remote_sse_new(remote_sse_fn fn, void *userdata, struct remote_sse **ret);
struct remote_sse *remote_sse_free(struct remote_sse *s);
DEFINE_CLEANUP_FUNC(struct remote_sse *, remote_sse_free, NULL)
int remote_sse_feed(struct remote_sse *s, const char *buf, size_t len);
/* The end of the stream: an event not yet terminated by a blank line is dispatched. */
int remote_sse_finish(struct remote_sse *s);
