/* SPDX-License-Identifier: MIT */
/*
 * http.c: the HTTP front: microhttpd glue, routing, authentication, and the bridge between
 * the manager's events (scheduler thread) and microhttpd's connections (see http.h).
 *
 * A request's life (struct http_req, the connection's context):
 *   1. first call of the access handler (headers read): route, authenticate, check
 *      Content-Length against MaxBodyBytes=; early errors are answered at once.
 *   2. body chunks: appended up to MaxBodyBytes= (413 as soon as it is exceeded).
 *   3. final call: dispatch. A generation is parsed (http-openai.c) and submitted; then
 *      - stream: a 200 response whose content reader (stream_reader) drains the request's
 *        queue of released text and suspends the connection when it is empty;
 *      - otherwise the connection is suspended until the final event, and the access handler,
 *        called again after the resume, answers with the whole JSON.
 *   4. microhttpd's completion callback: metrics, cancel a generation still running, drop the
 *      connection's reference.
 *
 * The manager's callback (on_event) copies text and logprobs into the queue under the
 * request's lock and resumes the connection if it is suspended; it never blocks and never
 * formats JSON. The queue is bounded (QUEUE_MAX_BYTES): a stream client that stops reading
 * while generation continues gets its request cancelled rather than growing memory.
 *
 * References: a request is held by its connection (until the completion callback) and by its
 * generation (until the final event). Lock order: a request's lock, then microhttpd's own; the
 * manager is never called with a request's lock held (its callback takes that lock).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "basic/strbuf.h"
#include "basic/time-util.h"
#include "core/config.h"
#include "core/log.h"
#include "engine/chat-tools.h"
#include "front/http-openai.h"
#include "front/http.h"
#include "front/keys.h"
#include "front/metrics.h"
#include "manager.h"

#define QUEUE_MAX_BYTES      (4u << 20)  /* released text waiting for a stream client to read it */
#define RESULT_MAX_BYTES     (64u << 20) /* the whole text of a non-streamed answer */
#define STREAM_BLOCK         16384
#define DISCARD_MAX_BYTES    (16u << 20) /* of a body over MaxBodyBytes=, read before we hang up */
#define FREE_WAIT_NS         (10ull * 1000000000ull) /* http_front_free: generations to end */
#define FLUSH_WAIT_NS        (2ull * 1000000000ull)  /* http_front_free: connections to finish */
#define CONNECTION_TIMEOUT_S 120 /* idle connections (suspended ones never time out) */

enum req_state {
	REQ_BODY,      /* reading the body */
	REQ_WAITING,   /* non-stream generation: suspended until its final event */
	REQ_STREAMING, /* SSE response queued */
	REQ_DONE,      /* a response is queued */
};


struct http_front {
	struct manager *mgr;     /* borrowed: outlives the front */
	struct MHD_Daemon *mhd;  /* owned */
	struct metrics *metrics; /* owned */
	char address[sizeof(((struct sockaddr_un *) 0)->sun_path) + 16];
	char *unix_path;             /* owned: unlinked at free */
	struct config_listen listen; /* a copy of what we serve (host, path owned), for reload */
	bool is_unix;

	atomic_bool stopping; /* new requests get 503 */
	atomic_bool aborting; /* http_front_free gave up waiting: end connections now */

	/* disconnect watcher: EPOLLRDHUP on the sockets of running generations */
	int watch_epfd;
	int watch_wakefd;
	pthread_t watch_thread;
	bool watch_started;

	pthread_mutex_t lock;  /* protects reqs, n_reqs, n_gen */
	pthread_cond_t cond;   /* n_gen or n_reqs dropped */
	struct http_req *reqs; /* every live request (for shutdown) */
	size_t n_reqs;
	size_t n_gen; /* generations whose final event has not come */

	uint64_t id_prefix; /* random: completion ids are unique and unguessable enough */
	atomic_uint_fast64_t id_counter;
};

struct http_req {
	struct http_front *front;
	struct MHD_Connection *conn;
	atomic_uint n_ref;
	struct http_req *prev, *next; /* front->reqs */

	enum metrics_endpoint ep;
	enum req_state state;
	uint64_t start_ns;
	int status;     /* of the response, for metrics and logs */
	char *path_arg; /* owned: the {id} of GET /v1/models/{id} */

	struct config *cfg; /* owned reference: member pointers stay valid */
	const struct config_member *member;
	uid_t peer_uid; /* unix socket peer, or (uid_t) -1 */
	int fd;         /* the connection's socket (borrowed from microhttpd) */

	/* body */
	struct strbuf body;
	uint64_t max_body;
	bool too_large;     /* over max_body: the rest is read and dropped */
	uint64_t discarded; /* bytes dropped so far */

	/* generation (MHD thread, before submit / after the final event) */
	struct openai_request oreq;
	char id[48];
	char *model; /* owned: as echoed in responses */
	int64_t created;
	char **adapters; /* owned: adapters the request uses (metrics) */
	size_t n_adapters;
	uint64_t gen_id;
	bool gen_submitted;

	/* shared with the scheduler thread: under lock */
	pthread_mutex_t lock;
	bool suspended;             /* the connection is suspended, waiting for an event */
	bool conn_closed;           /* microhttpd's completion callback ran */
	bool gen_active;            /* submitted and its final event has not come */
	bool watching;              /* in the watcher's epoll set */
	bool finished;              /* the final event came */
	bool started;               /* the first text came */
	bool overflow;              /* the queue overflowed: cancelled */
	struct strbuf text;            /* stream: released text not yet sent; else all the text */
	struct openai_logprob *lps; /* as text: not yet sent / all */
	size_t n_lps, cap_lps;
	size_t text_offset;        /* bytes of text released so far (logprob offsets) */
	const char *finish_reason; /* static */
	char target[200];           /* routed: the target that answered; "" : not routed */
	bool has_confidence;
	float confidence;
	char uncertainty[400];      /* "" : none */
	uint32_t prompt_tokens;
	uint32_t completion_tokens;
	bool has_error;
	struct openai_error error;

	/* stream output: MHD thread only */
	struct strbuf out;
	size_t out_pos;
	bool role_sent;
	bool final_sent;

	/* tools (chat): the output may be calls, recognised by the family's prefix. A stream
	 * holds text back while it may still be one (tool_held), then sends it as content or,
	 * at the end, as tool_calls deltas. */
	bool tools_on;            /* tools given and tool_choice is not "none" */
	bool tool_forced;         /* required / named: the grammar makes it a call */
	bool tool_released;       /* it is content: stream as usual */
	enum chat_family family;
	struct strbuf tool_held;     /* MHD thread */
	/* a forced call streamed as it comes: its first delta sent, then its arguments from
	 * tool_held[call_args_at] on, call_args_sent bytes of them so far */
	bool call_started;
	size_t call_args_at, call_args_sent;
	/* chatml, auto: content may be followed by calls (Qwen writes a line first); released
	 * text that may be the start of "<tool_call>" waits in tool_pending */
	bool tool_mid;            /* the calls began after content */
	struct strbuf tool_pending;
	char *tool_grammar;       /* owned: the grammar of required / named */
	struct chat_message *msgs;          /* owned (strings borrowed from oreq) */
	struct chat_tool_call **msg_calls;  /* owned: per message */
};



static void logprobs_free(struct openai_logprob *lps, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(lps[i].token);
	free(lps);
}

/* ---- requests: lifetime ---- */

static void req_unref(struct http_req *r)
{
	struct http_front *h;

	if (!r || atomic_fetch_sub(&r->n_ref, 1) != 1)
		return;
	h = r->front;
	pthread_mutex_lock(&h->lock);
	if (r->prev)
		r->prev->next = r->next;
	else
		h->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	h->n_reqs--;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);

	strbuf_done(&r->body);
	strbuf_done(&r->text);
	strbuf_done(&r->out);
	strbuf_done(&r->tool_held);
	strbuf_done(&r->tool_pending);
	free(r->tool_grammar);
	for (size_t i = 0; r->msg_calls && i < r->oreq.n_messages; i++)
		free(r->msg_calls[i]);
	free(r->msg_calls);
	free(r->msgs);
	logprobs_free(r->lps, r->n_lps);
	openai_request_done(&r->oreq);
	for (size_t i = 0; i < r->n_adapters; i++)
		free(r->adapters[i]);
	free(r->adapters);
	free(r->model);
	free(r->path_arg);
	config_unref(r->cfg);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

static struct http_req *req_new(struct http_front *h, struct MHD_Connection *conn)
{
	struct http_req *r = calloc(1, sizeof(*r));
	const union MHD_ConnectionInfo *ci;

	if (!r)
		return NULL;
	r->front = h;
	r->conn = conn;
	atomic_init(&r->n_ref, 1);
	r->start_ns = now_ns();
	r->peer_uid = (uid_t) -1;
	r->fd = -1;
	r->ep = METRICS_EP_OTHER;
	pthread_mutex_init(&r->lock, NULL);
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci)
		r->fd = ci->connect_fd;
	if (h->is_unix && r->fd >= 0) {
		struct ucred cred;
		socklen_t len = sizeof(cred);

		if (getsockopt(r->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
			r->peer_uid = cred.uid;
	}

	pthread_mutex_lock(&h->lock);
	r->next = h->reqs;
	if (h->reqs)
		h->reqs->prev = r;
	h->reqs = r;
	h->n_reqs++;
	pthread_mutex_unlock(&h->lock);
	return r;
}

/* ---- responses ---- */

static enum MHD_Result respond(struct http_req *r, int status, const char *content_type, char *body,
			       size_t len)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	if (status == 429 || status == 503)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	if (status == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (status == 405)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
					r->ep == METRICS_EP_MODELS || r->ep == METRICS_EP_METRICS ||
						r->ep == METRICS_EP_HEALTH
					    ? "GET"
					    : "POST");
	ret = MHD_queue_response(r->conn, (unsigned) status, resp);
	MHD_destroy_response(resp);
	r->status = status;
	r->state = REQ_DONE;
	return ret;
}

static enum MHD_Result respond_json(struct http_req *r, int status, char *json)
{
	if (!json)
		return MHD_NO; /* out of memory: close the connection */
	return respond(r, status, "application/json", json, strlen(json));
}

static enum MHD_Result respond_error(struct http_req *r, const struct openai_error *err)
{
	int status = err->status ? err->status : 500;

	if (status >= 500)
		log_warning("HTTP %s: %d %s", metrics_endpoint_path(r->ep), status, err->message);
	else
		log_debug("HTTP %s: %d %s", metrics_endpoint_path(r->ep), status, err->message);
	return respond_json(r, status, openai_error_json(err));
}

_printf_(5, 6) static enum MHD_Result respond_errorf(struct http_req *r, int status,
						     const char *code, const char *param,
						     const char *fmt, ...);

static enum MHD_Result respond_errorf(struct http_req *r, int status, const char *code,
				      const char *param, const char *fmt, ...)
{
	struct openai_error err = { .status = status,
				    .type = openai_error_type(status),
				    .code = code };
	va_list ap;

	snprintf(err.param, sizeof(err.param), "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	return respond_error(r, &err);
}

static void manager_error_to_openai(const struct manager_error *me, struct openai_error *err)
{
	int status = manager_err_http_status(me->kind);

	*err = (struct openai_error){ .status = status, .type = openai_error_type(status) };
	if (me->kind != MANAGER_ERR_INVALID_REQUEST && me->kind != MANAGER_ERR_NONE)
		err->code = manager_err_name(me->kind);
	if (me->kind == MANAGER_ERR_NONE) {
		err->status = 500;
		err->type = openai_error_type(500);
		err->code = "internal_error";
	}
	snprintf(err->message, sizeof(err->message), "%s",
		 me->message[0] ? me->message : strerror(me->error < 0 ? -me->error : EIO));
}

/* ---- the disconnect watcher ---- */

static void *watch_main(void *userdata)
{
	struct http_front *h = userdata;
	struct epoll_event evs[32];

	for (;;) {
		int n = epoll_wait(h->watch_epfd, evs, ELEMENTSOF(evs), -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return NULL;
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u64 == 0)
				return NULL; /* the wake eventfd: http_front_free */
			/* The peer closed its end: nobody will read the answer. Cancelling an id
			 * that just finished is harmless (-ENOENT). */
			if (manager_cancel(h->mgr, evs[i].data.u64) >= 0) {
				log_debug("HTTP: the client of request %" PRIu64
					  " disconnected; cancelled",
					  evs[i].data.u64);
				metrics_client_cancelled(h->metrics);
			}
		}
	}
}

/* Under r->lock. */
static void watch_add(struct http_req *r)
{
	struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLONESHOT, .data.u64 = r->gen_id };

	if (r->fd < 0 || r->front->watch_epfd < 0 || r->watching || r->gen_id == 0)
		return;
	if (epoll_ctl(r->front->watch_epfd, EPOLL_CTL_ADD, r->fd, &ev) == 0)
		r->watching = true;
}

/* Under r->lock, while the socket is still open (before or inside the completion callback,
 * or while the connection is suspended). */
static void watch_del(struct http_req *r)
{
	if (!r->watching)
		return;
	(void) epoll_ctl(r->front->watch_epfd, EPOLL_CTL_DEL, r->fd, NULL);
	r->watching = false;
}

/* ---- manager events (scheduler thread) ---- */

static const char *finish_reason_static(const char *s)
{
	if (!s)
		return "stop";
	if (strcmp(s, "length") == 0)
		return "length";
	if (strcmp(s, "cancelled") == 0)
		return "cancelled";
	return "stop";
}

/* Under r->lock. */
static int queue_tokens(struct http_req *r, const struct manager_event *ev)
{
	for (size_t i = 0; i < ev->n_tokens; i++) {
		const struct manager_token *t = &ev->tokens[i];
		struct openai_logprob *l;

		if (r->n_lps == r->cap_lps) {
			size_t cap = MAX((size_t) 16, r->cap_lps * 2);
			struct openai_logprob *n = realloc(r->lps, cap * sizeof(*n));

			if (!n)
				return -ENOMEM;
			r->lps = n;
			r->cap_lps = cap;
		}
		l = &r->lps[r->n_lps];
		*l = (struct openai_logprob){ .token_len = t->text_len,
					      .logprob = t->logprob,
					      .text_offset = r->text_offset };
		l->token = strndup(t->text ? t->text : "", t->text_len);
		if (!l->token)
			return -ENOMEM;
		r->n_lps++;
		r->text_offset += t->text_len;
	}
	return 0;
}

static void on_event(const struct manager_event *ev, void *userdata)
{
	struct http_req *r = userdata;
	struct http_front *h = r->front;
	bool final = ev->type != MANAGER_EVENT_TEXT, first = false, cancel = false, was_started;

	pthread_mutex_lock(&r->lock);
	was_started = r->started;
	if (ev->type == MANAGER_EVENT_TEXT) {
		if (!r->started)
			first = r->started = true;
		if (!r->conn_closed && !r->overflow) {
			bool full = r->oreq.stream ? r->text.len + ev->text_len > QUEUE_MAX_BYTES
						   : r->text.len + ev->text_len > RESULT_MAX_BYTES;

			if (full || strbuf_add(&r->text, ev->text, ev->text_len) < 0 ||
			    (r->oreq.logprobs && queue_tokens(r, ev) < 0)) {
				/* the client does not read (or we are out of memory): give up on
				 * it rather than buffer without bound */
				r->overflow = true;
				cancel = true;
			}
			if (!r->oreq.logprobs)
				r->text_offset += ev->text_len;
		}
	} else if (ev->type == MANAGER_EVENT_DONE) {
		r->finish_reason = finish_reason_static(ev->finish_reason);
		snprintf(r->target, sizeof(r->target), "%s", ev->target ? ev->target : "");
		r->has_confidence = ev->has_confidence;
		r->confidence = ev->confidence;
		snprintf(r->uncertainty, sizeof(r->uncertainty), "%s",
			 ev->uncertainty ? ev->uncertainty : "");
		r->prompt_tokens = ev->prompt_tokens;
		r->completion_tokens = ev->completion_tokens;
		if (r->overflow) {
			r->has_error = true;
			openai_error_set(&r->error, 0, 500, "internal_error", NULL,
					 "the client did not read the stream fast enough; the "
					 "request was cancelled");
		}
	} else {
		r->has_error = true;
		if (ev->error)
			manager_error_to_openai(ev->error, &r->error);
		else
			openai_error_set(&r->error, 0, 500, "internal_error", NULL,
					 "generation failed");
		r->prompt_tokens = ev->prompt_tokens;
		r->completion_tokens = ev->completion_tokens;
	}
	if (final) {
		r->finished = true;
		r->gen_active = false;
		if (!r->conn_closed)
			watch_del(r); /* the socket is still open: the connection holds it */
	}
	if (r->suspended && !r->conn_closed) {
		r->suspended = false;
		MHD_resume_connection(r->conn);
	}
	pthread_mutex_unlock(&r->lock);

	if (first)
		metrics_first_token(h->metrics, now_ns() - r->start_ns);
	if (first)
		for (size_t i = 0; i < r->n_adapters; i++)
			metrics_adapter_started(h->metrics, r->adapters[i]);
	if (cancel)
		(void) manager_cancel(h->mgr, ev->id);
	if (final) {
		if (ev->type == MANAGER_EVENT_DONE)
			metrics_tokens(h->metrics, ev->prompt_tokens, ev->completion_tokens);
		for (size_t i = 0; i < r->n_adapters; i++)
			metrics_adapter_ended(h->metrics, r->adapters[i], was_started || first);
		pthread_mutex_lock(&h->lock);
		h->n_gen--;
		pthread_cond_broadcast(&h->cond);
		pthread_mutex_unlock(&h->lock);
		req_unref(r); /* the generation's reference */
	}
}

/* ---- streaming (MHD thread) ---- */

static void result_head(const struct http_req *r, struct openai_result *res)
{
	*res = (struct openai_result){ .id = r->id, .model = r->model, .created = r->created };
}

/* The routing fields of the final event (read once it came). */
static void result_route(const struct http_req *r, struct openai_result *res)
{
	res->target = r->target[0] ? r->target : NULL;
	res->has_confidence = r->has_confidence;
	res->confidence = r->confidence;
	res->uncertainty = r->uncertainty[0] ? r->uncertainty : NULL;
}

/* Appends a chunk (NULL: out of memory) to r->out. */
static int out_take(struct http_req *r, char *chunk)
{
	int k;

	if (!chunk)
		return -ENOMEM;
	k = strbuf_add(&r->out, chunk, strlen(chunk));
	free(chunk);
	return k;
}

/* Tool call ids: 9 letters and digits (what Mistral's template demands; any client takes
 * them). */
static void tool_call_id(char out[static 16])
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	uint8_t rnd[9];

	if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
		for (size_t i = 0; i < sizeof(rnd); i++)
			rnd[i] = (uint8_t) (now_ns() >> (i * 3));
	for (size_t i = 0; i < sizeof(rnd); i++)
		out[i] = abc[rnd[i] % (sizeof(abc) - 1)];
	out[9] = '\0';
}

/* The calls in text (NULL when it is not calls); free with tool_calls_free(). */
struct tool_calls {
	struct openai_tool_call *c;
	size_t n;
	char ids[OPENAI_MAX_TOOL_CALLS][16];
};

static void tool_calls_free(struct tool_calls *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++) {
		free(t->c[i].name);
		free(t->c[i].arguments);
	}
	free(t->c);
	free(t);
}

/* The calls in text: all of it, or (chatml) what follows the first "<tool_call>", the text
 * before it being content (its length in *ret_content_len, trailing white space left out). */
static struct tool_calls *tool_calls_find(const struct http_req *r, const char *text, size_t len,
					  size_t *ret_content_len)
{
	struct chat_parsed_call *pc = NULL;
	struct tool_calls *t;
	size_t n = 0, content = 0;

	if (chat_tool_calls_parse(r->family, text, len, r->oreq.tools_json, &pc, &n) < 0) {
		const char *hit = r->family == CHAT_FAMILY_CHATML
					  ? memmem(text, len, "<tool_call>", strlen("<tool_call>"))
					  : NULL;

		if (!hit || chat_tool_calls_parse(r->family, hit, len - (size_t) (hit - text),
						  r->oreq.tools_json, &pc, &n) < 0)
			return NULL;
		content = (size_t) (hit - text);
		while (content > 0 && strchr(" \t\n\r", text[content - 1]))
			content--;
	}
	if (ret_content_len)
		*ret_content_len = content;
	t = calloc(1, sizeof(*t));
	if (t)
		t->c = calloc(MIN(n, (size_t) OPENAI_MAX_TOOL_CALLS), sizeof(*t->c));
	if (!t || !t->c) {
		free(t);
		chat_parsed_calls_free(pc, n);
		return NULL;
	}
	for (size_t i = 0; i < n && i < OPENAI_MAX_TOOL_CALLS; i++) {
		tool_call_id(t->ids[i]);
		t->c[i] = (struct openai_tool_call){ .id = t->ids[i], .name = TAKE_PTR(pc[i].name),
						     .arguments = TAKE_PTR(pc[i].arguments) };
		t->n++;
	}
	chat_parsed_calls_free(pc, n);
	return t;
}

/* Streams with tools: takes the new text into tool_held while the output may still be calls.
 * 1: held back; 0: *text is what to send now (held text first); -ENOMEM. */
static int tool_hold(struct http_req *r, struct strbuf *text)
{
	const char *prefix = chat_tool_call_prefix(r->family);
	size_t plen = prefix ? strlen(prefix) : 0, at = 0;

	if (!r->tools_on)
		return 0;
	if (r->tool_released) {
		struct strbuf *pd = &r->tool_pending;
		const char *hit;
		size_t send, keep = 0;

		if (r->family != CHAT_FAMILY_CHATML || r->tool_forced)
			return 0;
		/* content so far; a call may still begin: send all but a possible start of one */
		if (strbuf_add(pd, text->s ? text->s : "", text->len) < 0)
			return -ENOMEM;
		strbuf_done(text);
		hit = memmem(pd->s, pd->len, prefix, plen);
		if (hit) {
			send = (size_t) (hit - pd->s);
			if (strbuf_add(&r->tool_held, hit, pd->len - send) < 0)
				return -ENOMEM;
			r->tool_released = false;
			r->tool_mid = true;
			keep = pd->len - send; /* moved to tool_held */
		} else {
			for (size_t k = MIN(plen - 1, pd->len); k > 0; k--)
				if (memcmp(pd->s + pd->len - k, prefix, k) == 0) {
					keep = k;
					break;
				}
			send = pd->len - keep;
		}
		if (send && strbuf_add(text, pd->s, send) < 0)
			return -ENOMEM;
		memmove(pd->s, pd->s + send + (hit ? keep : 0), hit ? 0 : keep);
		pd->len = hit ? 0 : keep;
		return send ? 0 : 1;
	}
	if (strbuf_add(&r->tool_held, text->s ? text->s : "", text->len) < 0)
		return -ENOMEM;
	if (r->tool_forced || r->tool_mid)
		return 1;
	while (at < r->tool_held.len && strchr(" \t\n\r", r->tool_held.s[at]))
		at++;
	{
		size_t n = MIN(plen, r->tool_held.len - at);

		if (at == r->tool_held.len || memcmp(r->tool_held.s + at, prefix, n) == 0)
			return 1; /* a call, or may still become one: decided at the end */
	}
	/* content after all: what was held goes through the released path, which still finds a
	 * call that begins later in it (several tokens may arrive in one piece: "Sure.\n<tool_call>") */
	r->tool_released = true;
	strbuf_done(text);
	*text = r->tool_held;
	r->tool_held = (struct strbuf){ 0 };
	return tool_hold(r, text);
}

/* A forced call (required / named) as it comes: the grammar writes the family's frame, so
 * once the name is whole the first delta goes out, then the arguments as they grow, holding
 * back as many bytes as the frame's close has (and never splitting a character). final: the
 * answer is complete; the rest of the arguments go out. */
static int tool_stream_forced(struct http_req *r, const struct openai_result *res, bool final)
{
	const char *open, *key, *close, *held = r->tool_held.s;
	size_t len = r->tool_held.len, end;

	if (!r->tool_forced || chat_tool_call_frame(r->family, &open, &key, &close) < 0 || !held)
		return 0;
	if (!r->call_started) {
		size_t ol = strlen(open);
		const char *q;
		char sep[80], id[16];
		int k;

		if (len < ol + 1 || memcmp(held, open, ol) != 0 || held[ol] != '"')
			return 0;
		q = memchr(held + ol + 1, '"', len - ol - 1);
		snprintf(sep, sizeof(sep), "\", \"%s\": ", key);
		if (!q || (size_t) (held + len - q) < strlen(sep) || memcmp(q, sep, strlen(sep)) != 0)
			return 0;
		{
			_cleanup_free_ char *name = strndup(held + ol + 1, (size_t) (q - held - ol - 1));

			if (!name)
				return -ENOMEM;
			tool_call_id(id);
			k = out_take(r, openai_stream_tool_call_delta(res, 0, id, name, "", 0));
			if (k < 0)
				return k;
		}
		r->call_started = true;
		r->call_args_at = (size_t) (q - held) + strlen(sep);
	}
	end = len;
	if (final && len >= strlen(close) && memcmp(held + len - strlen(close), close, strlen(close)) == 0)
		end = len - strlen(close);
	else if (!final)
		end = len > strlen(close) ? len - strlen(close) : 0;
	while (!final && end > r->call_args_at && ((unsigned char) held[end] & 0xC0) == 0x80)
		end--; /* whole characters only */
	if (end <= r->call_args_at + r->call_args_sent)
		return 0;
	{
		size_t from = r->call_args_at + r->call_args_sent;
		int k = out_take(r, openai_stream_tool_call_delta(res, 0, NULL, NULL, held + from,
								   end - from));

		if (k < 0)
			return k;
		r->call_args_sent = end - r->call_args_at;
	}
	return 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *dst, size_t max)
{
	struct http_req *r = cls;
	enum openai_endpoint ep = r->oreq.endpoint;
	struct openai_result res;

	for (;;) {
		if (r->out_pos < r->out.len) {
			size_t n = MIN(max, r->out.len - r->out_pos);

			memcpy(dst, r->out.s + r->out_pos, n);
			r->out_pos += n;
			return (ssize_t) n;
		}
		r->out.len = r->out_pos = 0;
		if (r->final_sent)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (atomic_load(&r->front->aborting))
			return MHD_CONTENT_READER_END_WITH_ERROR;

		result_head(r, &res);
		if (ep == OPENAI_CHAT_COMPLETIONS && !r->role_sent) {
			r->role_sent = true;
			if (out_take(r, openai_stream_chunk(ep, &res, true, false)) < 0)
				return MHD_CONTENT_READER_END_WITH_ERROR;
			continue;
		}

		pthread_mutex_lock(&r->lock);
		if (r->text.len > 0 || r->n_lps > 0) {
			/* take the queue, format it without the lock */
			struct strbuf text = r->text;
			struct openai_logprob *lps = r->lps;
			size_t n_lps = r->n_lps;
			bool held;
			int k;

			r->text = (struct strbuf){ 0 };
			r->lps = NULL;
			r->n_lps = r->cap_lps = 0;
			pthread_mutex_unlock(&r->lock);

			k = tool_hold(r, &text);
			held = k > 0;
			if (held)
				k = tool_stream_forced(r, &res, false);
			if (k < 0 || held) {
				/* held (logprobs of held text are not sent) */
				strbuf_done(&text);
				logprobs_free(lps, n_lps);
				if (k < 0)
					return MHD_CONTENT_READER_END_WITH_ERROR;
				continue;
			}
			res.text = text.s;
			res.text_len = text.len;
			if (r->oreq.logprobs) {
				res.logprobs = lps ? lps : (const struct openai_logprob *) "";
				res.n_logprobs = n_lps;
			}
			k = out_take(r, openai_stream_chunk(ep, &res, false, false));
			strbuf_done(&text);
			logprobs_free(lps, n_lps);
			if (k < 0)
				return MHD_CONTENT_READER_END_WITH_ERROR;
			continue;
		}
		if (r->finished) {
			bool has_error = r->has_error;
			struct openai_error err = r->error;
			const char *finish = r->finish_reason;
			int k = 0;

			res.prompt_tokens = r->prompt_tokens;
			res.completion_tokens = r->completion_tokens;
			result_route(r, &res);
			pthread_mutex_unlock(&r->lock);

			if (!has_error && finish && strcmp(finish, "cancelled") == 0) {
				has_error = true;
				openai_error_set(&err, 0, 503, "cancelled", NULL,
						 "the request was cancelled");
			}
			if (!has_error && r->tool_pending.len) {
				/* released content held back as a possible call start: it was not */
				res.text = r->tool_pending.s;
				res.text_len = r->tool_pending.len;
				k = out_take(r, openai_stream_chunk(ep, &res, false, false));
				res.text = NULL;
				res.text_len = 0;
				r->tool_pending.len = 0;
			}
			if (k < 0) {
				return MHD_CONTENT_READER_END_WITH_ERROR;
			} else if (!has_error && r->call_started) {
				/* a forced call streamed as it came: the rest of its arguments */
				k = tool_stream_forced(r, &res, true);
				if (strcmp(finish, "stop") == 0)
					finish = "tool_calls";
			} else if (!has_error && r->tools_on && !r->tool_released && r->tool_held.len) {
				/* the held text: calls, or content after all */
				struct tool_calls *tc = strcmp(finish, "stop") == 0
								? tool_calls_find(r, r->tool_held.s,
										  r->tool_held.len, NULL)
								: NULL;

				if (tc) {
					res.tool_calls = tc->c;
					res.n_tool_calls = tc->n;
					k = out_take(r, openai_stream_tool_calls(&res));
					res.tool_calls = NULL;
					res.n_tool_calls = 0;
					finish = "tool_calls";
				} else {
					res.text = r->tool_held.s;
					res.text_len = r->tool_held.len;
					k = out_take(r, openai_stream_chunk(ep, &res, false, false));
					res.text = NULL;
					res.text_len = 0;
				}
				tool_calls_free(tc);
			}
			if (k < 0) {
				return MHD_CONTENT_READER_END_WITH_ERROR;
			} else if (has_error) {
				k = out_take(r, openai_stream_error(&err));
			} else {
				res.finish_reason = finish;
				k = out_take(r, openai_stream_chunk(ep, &res, false, false));
				if (k >= 0 && r->oreq.include_usage)
					k = out_take(r, openai_stream_chunk(ep, &res, false, true));
			}
			if (k >= 0)
				k = strbuf_add(&r->out, OPENAI_STREAM_DONE,
					       strlen(OPENAI_STREAM_DONE));
			if (k < 0)
				return MHD_CONTENT_READER_END_WITH_ERROR;
			r->final_sent = true;
			continue;
		}
		/* nothing to send: sleep until on_event() resumes us */
		r->suspended = true;
		MHD_suspend_connection(r->conn);
		pthread_mutex_unlock(&r->lock);
		return 0;
	}
}

static enum MHD_Result start_stream(struct http_req *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_reader, r,
						 NULL);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	ret = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	r->status = 200;
	r->state = REQ_STREAMING;
	return ret;
}

/* ---- non-streamed answers (MHD thread, after the final event) ---- */

static enum MHD_Result respond_result(struct http_req *r)
{
	struct openai_result res;
	struct openai_error err;
	bool has_error;

	/* the final event came: the scheduler thread no longer touches r's queue */
	pthread_mutex_lock(&r->lock);
	has_error = r->has_error;
	err = r->error;
	pthread_mutex_unlock(&r->lock);

	if (!has_error && strcmp(r->finish_reason, "cancelled") == 0) {
		has_error = true;
		openai_error_set(&err, 0, 503, "cancelled", NULL, "the request was cancelled");
	}
	if (has_error)
		return respond_error(r, &err);
	result_head(r, &res);
	res.text = r->text.s ? r->text.s : "";
	res.text_len = r->text.len;
	res.finish_reason = r->finish_reason;
	if (r->tools_on && strcmp(r->finish_reason, "stop") == 0) {
		size_t content_len = 0;
		struct tool_calls *tc = tool_calls_find(r, res.text, res.text_len, &content_len);

		if (tc) {
			enum MHD_Result ret;

			res.text_len = content_len; /* content before the calls, if any */
			res.tool_calls = tc->c;
			res.n_tool_calls = tc->n;
			res.finish_reason = "tool_calls";
			res.prompt_tokens = r->prompt_tokens;
			res.completion_tokens = r->completion_tokens;
			result_route(r, &res);
			ret = respond_json(r, 200, openai_response_json(r->oreq.endpoint, &res));
			tool_calls_free(tc);
			return ret;
		}
	}
	res.prompt_tokens = r->prompt_tokens;
	res.completion_tokens = r->completion_tokens;
	result_route(r, &res);
	if (r->oreq.logprobs) {
		res.logprobs = r->lps ? r->lps : (const struct openai_logprob *) "";
		res.n_logprobs = r->n_lps;
	}
	return respond_json(r, 200, openai_response_json(r->oreq.endpoint, &res));
}

/* ---- generation ---- */

static int add_adapter_name(struct http_req *r, const char *name, size_t len)
{
	char **n;

	for (size_t i = 0; i < r->n_adapters; i++)
		if (strlen(r->adapters[i]) == len && memcmp(r->adapters[i], name, len) == 0)
			return 0;
	n = realloc(r->adapters, (r->n_adapters + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	r->adapters = n;
	n[r->n_adapters] = strndup(name, len);
	if (!n[r->n_adapters])
		return -ENOMEM;
	r->n_adapters++;
	return 0;
}

/* The adapters a request names (for metrics): "adapter", "base:adapter", and the lora list. */
static int collect_adapters(struct http_req *r, const char *base)
{
	const char *model = r->oreq.model;
	int k;

	if (model && strcmp(model, base) != 0) {
		const char *colon = strchr(model, ':'), *at = strchr(model, '@');
		const char *name;

		if (colon && at && at < colon)
			colon = NULL; /* "NAME@sha256:HEX" */
		name = colon ? colon + 1 : model;
		/* metrics count per name, whatever version ("NAME@2") was asked for */
		if (*name) {
			k = add_adapter_name(r, name, strcspn(name, "@"));
			if (k < 0)
				return k;
		}
	}
	for (size_t i = 0; i < r->oreq.n_loras; i++) {
		k = add_adapter_name(r, r->oreq.loras[i].name, strcspn(r->oreq.loras[i].name, "@"));
		if (k < 0)
			return k;
	}
	return 0;
}

static enum MHD_Result start_generation(struct http_req *r, enum openai_endpoint endpoint)
{
	struct http_front *h = r->front;
	struct openai_request *o = &r->oreq;
	struct openai_error oerr = { 0 };
	struct manager_error merr = { 0 };
	struct manager_request mr;
	struct manager_caller caller = { .uid = r->peer_uid, .front = "http" };
	_cleanup_free_ struct manager_lora *loras = NULL;
	const char *base = manager_model_name(h->mgr);
	uint64_t seq;
	int k;

	k = openai_request_parse(endpoint, r->body.s ? r->body.s : "", r->body.len, o, &oerr);
	if (k < 0)
		return respond_error(r, &oerr);
	strbuf_done(&r->body);

	manager_request_init(&mr);
	if (endpoint == OPENAI_COMPLETIONS) {
		mr.prompt = o->prompt;
	} else {
		r->msgs = calloc(o->n_messages, sizeof(*r->msgs));
		r->msg_calls = calloc(o->n_messages, sizeof(*r->msg_calls));
		if (!r->msgs || !r->msg_calls)
			return MHD_NO;
		for (size_t i = 0; i < o->n_messages; i++) {
			const struct openai_message *om = &o->messages[i];

			r->msgs[i] = (struct chat_message){ .role = om->role, .content = om->content,
							    .tool_call_id = om->tool_call_id };
			if (om->n_tool_calls) {
				r->msg_calls[i] = calloc(om->n_tool_calls, sizeof(*r->msg_calls[i]));
				if (!r->msg_calls[i])
					return MHD_NO;
				for (size_t j = 0; j < om->n_tool_calls; j++)
					r->msg_calls[i][j] = (struct chat_tool_call){
						.id = om->tool_calls[j].id, .name = om->tool_calls[j].name,
						.arguments = om->tool_calls[j].arguments
					};
				r->msgs[i].tool_calls = r->msg_calls[i];
				r->msgs[i].n_tool_calls = om->n_tool_calls;
			}
		}
		mr.messages = r->msgs;
		mr.n_messages = o->n_messages;
		mr.tools_json = o->tools_json;
		if (o->tools_json && o->tool_choice != OPENAI_TOOL_CHOICE_NONE) {
			struct errmsg e = { { 0 } };
			size_t len;

			if (manager_chat_family(h->mgr, &r->family) < 0 ||
			    !chat_family_has_tools(r->family)) {
				openai_error_set(&oerr, -EINVAL, 400, NULL, "tools",
						 "this model's chat template does not define tool use "
						 "(chatml, llama3 and mistral do)");
				return respond_error(r, &oerr);
			}
			r->tools_on = true;
			if (o->tool_choice == OPENAI_TOOL_CHOICE_REQUIRED ||
			    o->tool_choice == OPENAI_TOOL_CHOICE_NAMED) {
				k = chat_tools_grammar(r->family, o->tools_json,
						       o->tool_choice == OPENAI_TOOL_CHOICE_NAMED
							   ? o->tool_choice_name
							   : NULL,
						       &r->tool_grammar, &len, &e);
				if (k < 0) {
					openai_error_set(&oerr, k, k == -ENOMEM ? 500 : 400, NULL,
							 "tool_choice", "%s", e.text);
					return respond_error(r, &oerr);
				}
				r->tool_forced = true;
			}
		}
	}
	mr.grammar = r->tool_grammar ? r->tool_grammar : o->grammar;
	mr.model = o->model;
	if (o->n_loras) {
		loras = calloc(o->n_loras, sizeof(*loras));
		if (!loras)
			return MHD_NO;
		for (size_t i = 0; i < o->n_loras; i++)
			loras[i] = (struct manager_lora){ .name = o->loras[i].name,
							  .scale = o->loras[i].scale };
		mr.loras = loras;
		mr.n_loras = o->n_loras;
	}
	/* OpenAI's defaults: 16 tokens for completions, as many as fit for chat */
	mr.max_tokens = o->has_max_tokens ? o->max_tokens : endpoint == OPENAI_COMPLETIONS ? 16 : 0;
	if (o->has_temperature)
		mr.temperature = o->temperature;
	if (o->has_top_p)
		mr.top_p = o->top_p;
	mr.has_seed = o->has_seed;
	mr.seed = o->seed;
	mr.stop = (const char *const *) o->stop;
	mr.n_stop = o->n_stop;
	mr.logprobs = o->logprobs;
	mr.ignore_eos = o->ignore_eos;
	mr.budget = o->budget;
	caller.member = r->member ? r->member->name : NULL;

	r->model = strdup(o->model ? o->model : base);
	if (!r->model || collect_adapters(r, base) < 0)
		return MHD_NO;
	seq = atomic_fetch_add(&h->id_counter, 1);
	snprintf(r->id, sizeof(r->id), "%s-%016" PRIx64 "%08" PRIx64,
		 endpoint == OPENAI_COMPLETIONS ? "cmpl" : "chatcmpl", h->id_prefix,
		 seq & 0xffffffffu);
	r->created = (int64_t) time(NULL);

	/* the generation's reference, taken before the callback can run */
	atomic_fetch_add(&r->n_ref, 1);
	pthread_mutex_lock(&h->lock);
	h->n_gen++;
	pthread_mutex_unlock(&h->lock);
	pthread_mutex_lock(&r->lock);
	r->gen_active = true;
	pthread_mutex_unlock(&r->lock);
	for (size_t i = 0; i < r->n_adapters; i++)
		metrics_adapter_queued(h->metrics, r->adapters[i]);

	k = manager_submit(h->mgr, &mr, &caller, on_event, r, &r->gen_id, &merr);
	if (k < 0) {
		pthread_mutex_lock(&r->lock);
		r->gen_active = false;
		pthread_mutex_unlock(&r->lock);
		for (size_t i = 0; i < r->n_adapters; i++)
			metrics_adapter_ended(h->metrics, r->adapters[i], false);
		pthread_mutex_lock(&h->lock);
		h->n_gen--;
		pthread_cond_broadcast(&h->cond);
		pthread_mutex_unlock(&h->lock);
		atomic_fetch_sub(&r->n_ref, 1); /* the connection still holds one */
		if (merr.kind == MANAGER_ERR_NONE && !merr.message[0])
			snprintf(merr.message, sizeof(merr.message), "%s", strerror(-k));
		if (merr.kind == MANAGER_ERR_NONE)
			merr.kind = k == -EAGAIN ? MANAGER_ERR_QUEUE_FULL : MANAGER_ERR_INTERNAL;
		manager_error_to_openai(&merr, &oerr);
		return respond_error(r, &oerr);
	}
	r->gen_submitted = true;

	pthread_mutex_lock(&r->lock);
	if (!r->finished)
		watch_add(r);
	if (o->stream) {
		pthread_mutex_unlock(&r->lock);
		return start_stream(r);
	}
	if (r->finished) {
		pthread_mutex_unlock(&r->lock);
		return respond_result(r);
	}
	r->state = REQ_WAITING;
	r->suspended = true;
	MHD_suspend_connection(r->conn);
	pthread_mutex_unlock(&r->lock);
	return MHD_YES;
}

/* ---- other endpoints ---- */

struct models_ctx {
	struct http_front *front;
	const struct http_req *req;
	struct openai_model_entry *entries;
	size_t n, cap;
	char **names; /* owned copies: the adapter list is read under the manager's lock */
	const char *base;
	bool oom;
};

static bool req_may_use(const struct http_req *r, const char *model)
{
	struct manager_caller caller = { .uid = r->peer_uid,
					 .front = "http",
					 .member = r->member ? r->member->name : NULL };

	return manager_caller_may_use(r->front->mgr, &caller, model);
}

static void models_collect(const struct manager_adapter_info *a, void *userdata)
{
	struct models_ctx *c = userdata;

	if (!a->loaded || c->oom)
		return;
	if (c->n == c->cap) {
		size_t cap = MAX((size_t) 8, c->cap * 2);
		struct openai_model_entry *e = realloc(c->entries, cap * sizeof(*e));
		char **names = realloc(c->names, cap * sizeof(*names));

		if (e)
			c->entries = e;
		if (names)
			c->names = names;
		if (!e || !names) {
			c->oom = true;
			return;
		}
		c->cap = cap;
	}
	c->names[c->n] = strdup(a->name);
	if (!c->names[c->n]) {
		c->oom = true;
		return;
	}
	c->entries[c->n] = (struct openai_model_entry){ .id = c->names[c->n], .parent = c->base };
	c->n++;
}

static enum MHD_Result handle_models(struct http_req *r)
{
	struct models_ctx c = { .front = r->front,
				.req = r,
				.base = manager_model_name(r->front->mgr) };
	struct openai_model_entry *list;
	size_t n = 0;
	char *json = NULL;
	bool found = false;

	/* the base first */
	c.cap = 8;
	c.entries = calloc(c.cap, sizeof(*c.entries));
	c.names = calloc(c.cap, sizeof(*c.names));
	if (!c.entries || !c.names) {
		free(c.entries);
		free(c.names);
		return MHD_NO;
	}
	c.names[0] = strdup(c.base);
	c.entries[0] = (struct openai_model_entry){ .id = c.names[0] };
	c.n = 1;
	if (!c.names[0])
		c.oom = true;
	manager_foreach_adapter(r->front->mgr, models_collect, &c);

	list = calloc(c.n ? c.n : 1, sizeof(*list));
	if (list && !c.oom) {
		for (size_t i = 0; i < c.n; i++) {
			if (r->path_arg && strcmp(r->path_arg, c.entries[i].id) != 0)
				continue;
			found = true;
			/* a key sees the models it may use */
			if (!req_may_use(r, c.entries[i].id))
				continue;
			list[n++] = c.entries[i];
		}
		if (!r->path_arg)
			json = openai_models_json(list, n, r->created);
		else if (n == 1)
			json = openai_model_json(&list[0], r->created); /* GET /v1/models/{id} */
	}
	for (size_t i = 0; i < c.n; i++)
		free(c.names[i]);
	free(c.names);
	free(c.entries);
	free(list);
	if (c.oom)
		return MHD_NO;
	if (r->path_arg && !json)
		return respond_errorf(r, found ? 403 : 404, found ? "forbidden" : "model_not_found",
				      "model",
				      found ? "this API key may not use the model '%s'"
					    : "The model '%s' does not exist.",
				      r->path_arg);
	return respond_json(r, 200, json);
}

struct gauges_ctx {
	struct metrics_adapter_gauge *a;
	char **names;
	size_t n, cap;
	bool oom;
};

static void gauges_collect(const struct manager_adapter_info *a, void *userdata)
{
	struct gauges_ctx *c = userdata;

	if (!a->loaded || c->oom)
		return;
	if (c->n == c->cap) {
		size_t cap = MAX((size_t) 8, c->cap * 2);
		struct metrics_adapter_gauge *g = realloc(c->a, cap * sizeof(*g));
		char **names = realloc(c->names, cap * sizeof(*names));

		if (g)
			c->a = g;
		if (names)
			c->names = names;
		if (!g || !names) {
			c->oom = true;
			return;
		}
		c->cap = cap;
	}
	c->names[c->n] = strdup(a->name);
	if (!c->names[c->n]) {
		c->oom = true;
		return;
	}
	c->a[c->n] = (struct metrics_adapter_gauge){ .name = c->names[c->n],
						     .loaded = a->loaded,
						     .resident = a->resident,
						     .requests = a->requests,
						     .active = a->running,
						     .tier = a->tier };
	c->n++;
}

static enum MHD_Result handle_metrics(struct http_req *r)
{
	struct http_front *h = r->front;
	struct manager_stats st = { 0 };
	struct gauges_ctx c = { 0 };
	struct metrics_gauges g;
	struct timespec ts;
	char *page = NULL;
	size_t len = 0;
	int k;

	manager_get_stats(h->mgr, &st);
	manager_foreach_adapter(h->mgr, gauges_collect, &c);
	clock_gettime(CLOCK_REALTIME, &ts);
	g = (struct metrics_gauges){
		.model_name = manager_model_name(h->mgr),
		.waiting = st.waiting,
		.running = st.running,
		.max_sequences = st.max_sequences,
		.queue_length = st.queue_length,
		.pool_pages_total = st.pool_pages_total,
		.pool_pages_free = st.pool_pages_free,
		.prompt_tokens = st.prompt_tokens,
		.completion_tokens = st.completion_tokens,
		.requests_finished = st.requests_finished,
		.requests_failed = st.requests_failed,
		.requests_rejected = st.requests_rejected,
		.judge_asked = st.judge_asked,
		.judge_personal = st.judge_personal,
		.judge_public = st.judge_public,
		.judge_unclear = st.judge_unclear,
		.judge_timeout = st.judge_timeout,
		.adapters = c.a,
		.n_adapters = c.n,
		.sched = &st.sched,
		.adapters_bad = st.adapters_bad,
		.now_unix = (double) ts.tv_sec + (double) ts.tv_nsec / 1e9,
	};
	k = c.oom ? -ENOMEM : metrics_render(h->metrics, &g, &page, &len);
	for (size_t i = 0; i < c.n; i++)
		free(c.names[i]);
	free(c.names);
	free(c.a);
	if (k < 0)
		return MHD_NO;
	return respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", page, len);
}

static enum MHD_Result handle_lora_admin(struct http_req *r, bool load)
{
	struct openai_error oerr;
	struct manager_error merr = { 0 };
	_cleanup_free_ char *name = NULL, *path = NULL;
	char *msg = NULL;
	int k;

	k = openai_parse_lora_admin(r->body.s ? r->body.s : "", r->body.len, load, &name,
				    load ? &path : NULL, &oerr);
	if (k < 0)
		return respond_error(r, &oerr);
	if (load)
		k = manager_adapter_load(r->front->mgr, name, path, &merr);
	else
		k = manager_adapter_unload(r->front->mgr, name, &merr);
	if (k < 0) {
		if (merr.kind == MANAGER_ERR_NONE || merr.kind == MANAGER_ERR_INTERNAL) {
			/* map what the manager left untyped by its errno */
			int status = k == -ENOENT ? 404 : k == -ENOMEM || k == -EIO ? 500 : 400;

			merr.kind = status == 404   ? MANAGER_ERR_MODEL_NOT_FOUND
				    : status == 400 ? MANAGER_ERR_INVALID_REQUEST
						    : MANAGER_ERR_INTERNAL;
		}
		if (!merr.message[0])
			snprintf(merr.message, sizeof(merr.message), "adapter '%s': %s", name,
				 strerror(-k));
		manager_error_to_openai(&merr, &oerr);
		snprintf(oerr.param, sizeof(oerr.param), "%s", load ? "lora_path" : "lora_name");
		if (k == -EEXIST || k == -EBUSY || k == -ENOENT)
			snprintf(oerr.param, sizeof(oerr.param), "lora_name");
		return respond_error(r, &oerr);
	}
	log_info("HTTP: adapter '%s' %s by %s", name, load ? "loaded" : "unloaded",
		 r->member ? r->member->name : "?");
	/* vLLM answers with plain text */
	if (asprintf(&msg, "Success: LoRA adapter '%s' %s successfully.", name,
		     load ? "added" : "removed") < 0)
		return MHD_NO;
	return respond(r, 200, "text/plain; charset=utf-8", msg, strlen(msg));
}

static enum MHD_Result dispatch(struct http_req *r)
{
	switch (r->ep) {
	case METRICS_EP_MODELS:
		r->created = (int64_t) time(NULL);
		return handle_models(r);
	case METRICS_EP_COMPLETIONS:
		return start_generation(r, OPENAI_COMPLETIONS);
	case METRICS_EP_CHAT_COMPLETIONS:
		return start_generation(r, OPENAI_CHAT_COMPLETIONS);
	case METRICS_EP_LOAD_LORA:
		return handle_lora_admin(r, true);
	case METRICS_EP_UNLOAD_LORA:
		return handle_lora_admin(r, false);
	case METRICS_EP_METRICS:
		return handle_metrics(r);
	case METRICS_EP_HEALTH:
		return respond(r, 200, "application/json", strdup("{}"), 2);
	default:
		return respond_errorf(r, 404, "not_found", NULL, "no such endpoint");
	}
}

/* ---- first call: routing, limits, authentication ---- */

struct route {
	const char *path;
	enum metrics_endpoint ep;
	bool post;
	bool api; /* under /v1: needs a key when members are configured */
	bool admin;
};

static const struct route routes[] = {
	{ "/v1/models", METRICS_EP_MODELS, false, true, false },
	{ "/v1/completions", METRICS_EP_COMPLETIONS, true, true, false },
	{ "/v1/chat/completions", METRICS_EP_CHAT_COMPLETIONS, true, true, false },
	{ "/v1/load_lora_adapter", METRICS_EP_LOAD_LORA, true, true, true },
	{ "/v1/unload_lora_adapter", METRICS_EP_UNLOAD_LORA, true, true, true },
	{ "/metrics", METRICS_EP_METRICS, false, false, false },
	{ "/health", METRICS_EP_HEALTH, false, false, false },
};

static enum MHD_Result on_headers(struct http_req *r, const char *url, const char *method)
{
	struct http_front *h = r->front;
	const struct route *rt = NULL;
	const char *auth, *cl;
	bool is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
	bool is_get =
	    strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;

	for (size_t i = 0; i < ELEMENTSOF(routes); i++)
		if (strcmp(url, routes[i].path) == 0)
			rt = &routes[i];
	if (!rt && strncmp(url, "/v1/models/", 11) == 0 && url[11]) {
		rt = &routes[0];
		r->path_arg = strdup(url + 11);
		if (!r->path_arg)
			return MHD_NO;
	}
	r->state = REQ_BODY;
	if (!rt)
		return respond_errorf(r, 404, "not_found", NULL, "no such endpoint: %s %s", method,
				      url);
	r->ep = rt->ep;
	if (rt->post ? !is_post : !is_get)
		return respond_errorf(r, 405, "method_not_allowed", NULL,
				      "%s needs the %s method, not %s", url,
				      rt->post ? "POST" : "GET", method);
	if (atomic_load(&h->stopping) || manager_is_stopping(h->mgr))
		return respond_errorf(r, 503, "service_unavailable", NULL,
				      "the daemon is stopping");

	r->cfg = manager_get_config(h->mgr);
	r->max_body = r->cfg && r->cfg->max_body_bytes ? r->cfg->max_body_bytes : 1u << 20;

	if (rt->api && keys_required(r->cfg)) {
		const char *key;
		size_t len;

		auth = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
						   MHD_HTTP_HEADER_AUTHORIZATION);
		if (auth) {
			if (keys_parse_bearer(auth, &key, &len) < 0)
				return respond_errorf(r, 401, "invalid_api_key", NULL,
						      "the Authorization header must be "
						      "\"Bearer KEY\"");
			r->member = keys_find_member(r->cfg, key, len);
			if (!r->member)
				return respond_errorf(r, 401, "invalid_api_key", NULL,
						      "invalid API key");
		} else if (r->peer_uid != (uid_t) -1) {
			r->member = config_find_member_by_uid(r->cfg, r->peer_uid);
		}
		if (!r->member)
			return respond_errorf(r, 401, "invalid_api_key", NULL,
					      "an API key is required: send \"Authorization: "
					      "Bearer KEY\" (`molly key new NAME` makes one)");
	}
	if (rt->admin && !(r->member && r->member->admin))
		return respond_errorf(r, 403, "admin_required", NULL,
				      r->member
					  ? "member '%s' is not an administrator (Admin=yes)"
					  : "%sadapter administration over HTTP needs the key "
					    "of a member with Admin=yes",
				      r->member ? r->member->name : "");

	cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		unsigned long long n;

		errno = 0;
		n = strtoull(cl, &end, 10);
		if (!errno && end != cl && n > r->max_body)
			return respond_errorf(r, 413, "request_too_large", NULL,
					      "the request body is %llu bytes; MaxBodyBytes= "
					      "allows %" PRIu64,
					      n, r->max_body);
		if (!errno && end != cl && n > 0 && n <= r->max_body) {
			r->body.s = malloc((size_t) n + 1);
			if (!r->body.s)
				return MHD_NO;
			r->body.cap = (size_t) n + 1;
		}
	}
	return MHD_YES;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version, const char *upload_data,
				 size_t *upload_data_size, void **con_cls)
{
	struct http_front *h = cls;
	struct http_req *r = *con_cls;

	if (!r) {
		r = req_new(h, conn);
		if (!r)
			return MHD_NO;
		*con_cls = r;
		return on_headers(r, url, method);
	}
	switch (r->state) {
	case REQ_BODY:
		if (*upload_data_size) {
			size_t n = *upload_data_size;

			*upload_data_size = 0;
			if (r->too_large || r->body.len + n > r->max_body) {
				/* chunked, or longer than its Content-Length said: read and drop
				 * the rest, so the client can read our 413 (a response queued
				 * mid-upload would be lost in a reset), up to a point */
				if (!r->too_large)
					r->discarded = r->body.len;
				r->too_large = true;
				strbuf_done(&r->body);
				r->discarded += n;
				if (r->discarded > r->max_body + DISCARD_MAX_BYTES)
					return MHD_NO;
				return MHD_YES;
			}
			if (strbuf_add(&r->body, upload_data, n) < 0)
				return MHD_NO;
			return MHD_YES;
		}
		if (r->too_large)
			return respond_errorf(r, 413, "request_too_large", NULL,
					      "the request body is over %" PRIu64
					      " bytes (MaxBodyBytes=)",
					      r->max_body);
		return dispatch(r);
	case REQ_WAITING:
		if (atomic_load(&h->aborting))
			return MHD_NO;
		pthread_mutex_lock(&r->lock);
		if (!r->finished) {
			/* a spurious resume: wait on */
			r->suspended = true;
			MHD_suspend_connection(conn);
			pthread_mutex_unlock(&r->lock);
			return MHD_YES;
		}
		pthread_mutex_unlock(&r->lock);
		return respond_result(r);
	case REQ_STREAMING:
	case REQ_DONE:
		return MHD_YES;
	}
	return MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_front *h = cls;
	struct http_req *r = *con_cls;
	bool cancel;
	uint64_t dur;

	if (!r)
		return;
	*con_cls = NULL;
	dur = now_ns() - r->start_ns;
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && r->status == 0)
		r->status = 499; /* the client went away before an answer (nginx's convention) */
	metrics_request_done(h->metrics, r->ep, r->status, dur);
	log_debug("HTTP %s: %d in %.3f ms%s", metrics_endpoint_path(r->ep), r->status,
		  (double) dur / 1e6,
		  toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (aborted)");

	pthread_mutex_lock(&r->lock);
	r->conn_closed = true;
	r->suspended = false;
	watch_del(r);
	cancel = r->gen_active;
	pthread_mutex_unlock(&r->lock);
	if (cancel && manager_cancel(h->mgr, r->gen_id) >= 0)
		metrics_client_cancelled(h->metrics);
	req_unref(r); /* the connection's reference */
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	log_debug("microhttpd: %s", buf);
}

/* ---- listening ---- */

static int listen_socket(const struct config_listen *l, char *address, size_t address_size,
			 struct errmsg *e)
{
	_cleanup_close_ int fd = -EBADF;
	int one = 1;

	if (l->kind == CONFIG_LISTEN_UNIX) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		struct stat st;

		if (!l->path || strlen(l->path) >= sizeof(sa.sun_path))
			return errmsg_set(e, -ENAMETOOLONG, "Listen=unix:%s: the path is too long",
					  l->path ? l->path : "");
		memcpy(sa.sun_path, l->path, strlen(l->path) + 1);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			return errmsg_set(e, -errno, "socket(AF_UNIX): %s", strerror(errno));
		/* a stale socket from an earlier run (not any other file) is replaced */
		if (lstat(l->path, &st) == 0 && S_ISSOCK(st.st_mode))
			(void) unlink(l->path);
		if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
			return errmsg_set(e, -errno, "Listen=unix:%s: bind: %s", l->path,
					  strerror(errno));
		/* who may connect is decided by the directory's permissions and by members */
		(void) chmod(l->path, 0666);
		snprintf(address, address_size, "unix:%s", l->path);
	} else {
		struct sockaddr_storage ss = { 0 };
		socklen_t len;
		char host[INET6_ADDRSTRLEN] = "";

		if (l->family == AF_INET6) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &ss;

			s6->sin6_family = AF_INET6;
			s6->sin6_port = htons(l->port);
			if (inet_pton(AF_INET6, l->host, &s6->sin6_addr) != 1)
				return errmsg_set(e, -EINVAL,
						  "Listen=: '%s' is not an IPv6 address", l->host);
			len = sizeof(*s6);
		} else {
			struct sockaddr_in *s4 = (struct sockaddr_in *) &ss;

			s4->sin_family = AF_INET;
			s4->sin_port = htons(l->port);
			if (inet_pton(AF_INET, l->host ? l->host : "127.0.0.1", &s4->sin_addr) != 1)
				return errmsg_set(e, -EINVAL,
						  "Listen=: '%s' is not an IPv4 address", l->host);
			len = sizeof(*s4);
		}
		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			return errmsg_set(e, -errno, "socket: %s", strerror(errno));
		(void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ss.ss_family == AF_INET6)
			(void) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *) &ss, len) < 0)
			return errmsg_set(e, -errno, "Listen=%s%s%s:%u: bind: %s",
					  l->family == AF_INET6 ? "[" : "", l->host ? l->host : "",
					  l->family == AF_INET6 ? "]" : "", l->port,
					  strerror(errno));
		len = sizeof(ss);
		if (getsockname(fd, (struct sockaddr *) &ss, &len) < 0)
			return errmsg_set(e, -errno, "getsockname: %s", strerror(errno));
		if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &ss;

			inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
			snprintf(address, address_size, "[%s]:%u", host, ntohs(s6->sin6_port));
		} else {
			struct sockaddr_in *s4 = (struct sockaddr_in *) &ss;

			inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
			snprintf(address, address_size, "%s:%u", host, ntohs(s4->sin_port));
		}
	}
	if (listen(fd, 512) < 0)
		return errmsg_set(e, -errno, "listen: %s", strerror(errno));
	return TAKE_FD(fd);
}

static unsigned connection_limit(void)
{
	struct rlimit rl;

	/* leave room for the model, adapters, the bus and the journal */
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1024;
	if (rl.rlim_cur <= 160)
		return 32;
	return (unsigned) MIN(rl.rlim_cur - 128, (rlim_t) 8192);
}

static void front_destroy(struct http_front *h)
{
	if (h->watch_started) {
		uint64_t one = 1;

		(void) !write(h->watch_wakefd, &one, sizeof(one));
		pthread_join(h->watch_thread, NULL);
	}
	if (h->watch_epfd >= 0)
		close(h->watch_epfd);
	if (h->watch_wakefd >= 0)
		close(h->watch_wakefd);
	if (h->unix_path) {
		(void) unlink(h->unix_path);
		free(h->unix_path);
	}
	free(h->listen.host);
	free(h->listen.path);
	metrics_free(h->metrics);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

int http_front_new(struct manager *m, const struct config *cfg, struct http_front **ret,
		   struct errmsg *e)
{
	struct http_front *h;
	struct epoll_event wev = { .events = EPOLLIN, .data.u64 = 0 };
	unsigned threads;
	int fd, k;
	long ncpu;

	assert_return(m && cfg && ret, -EINVAL);
	if (cfg->listen.kind == CONFIG_LISTEN_NONE) {
		*ret = NULL;
		return 0;
	}
	if (cfg->listen.kind == CONFIG_LISTEN_TCP && !cfg->listen.loopback &&
	    !cfg->allow_non_loopback)
		return errmsg_set(
		    e, -EPERM,
		    "Listen=%s is not a loopback address; set AllowNonLoopback=yes in "
		    "[HTTP] to serve other machines",
		    cfg->listen.host ? cfg->listen.host : "");

	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->mgr = m;
	h->watch_epfd = h->watch_wakefd = -1;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	h->listen = (struct config_listen){ .kind = cfg->listen.kind,
					    .port = cfg->listen.port,
					    .family = cfg->listen.family,
					    .loopback = cfg->listen.loopback };
	h->listen.host = cfg->listen.host ? strdup(cfg->listen.host) : NULL;
	h->listen.path = cfg->listen.path ? strdup(cfg->listen.path) : NULL;
	if ((cfg->listen.host && !h->listen.host) || (cfg->listen.path && !h->listen.path)) {
		front_destroy(h);
		return -ENOMEM;
	}
	k = metrics_new(&h->metrics);
	if (k < 0) {
		front_destroy(h);
		return k;
	}
	if (getrandom(&h->id_prefix, sizeof(h->id_prefix), 0) != sizeof(h->id_prefix))
		h->id_prefix = now_ns() * 0x9e3779b97f4a7c15ull;
	atomic_init(&h->id_counter, 1);
	atomic_init(&h->stopping, false);
	atomic_init(&h->aborting, false);

	/* the watcher: optional (a failure only loses early cancellation of idle waits) */
	h->watch_epfd = epoll_create1(EPOLL_CLOEXEC);
	h->watch_wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (h->watch_epfd >= 0 && h->watch_wakefd >= 0 &&
	    epoll_ctl(h->watch_epfd, EPOLL_CTL_ADD, h->watch_wakefd, &wev) == 0 &&
	    pthread_create(&h->watch_thread, NULL, watch_main, h) == 0)
		h->watch_started = true;
	else
		log_warning("HTTP: no disconnect watcher; idle waits are cancelled only on write");

	fd = listen_socket(&cfg->listen, h->address, sizeof(h->address), e);
	if (fd < 0) {
		front_destroy(h);
		return fd;
	}
	if (cfg->listen.kind == CONFIG_LISTEN_UNIX) {
		h->is_unix = true;
		h->unix_path = strdup(cfg->listen.path);
	}

	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	threads = (unsigned) MAX(2L, MIN(4L, ncpu));
	h->mhd = MHD_start_daemon(
	    MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL,
	    NULL, on_access, h,
	    /* first, so that every message goes to our log */
	    MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_LISTEN_SOCKET, (MHD_socket) fd,
	    MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT, connection_limit(),
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) CONNECTION_TIMEOUT_S,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
	if (!h->mhd) {
		close(fd);
		front_destroy(h);
		return errmsg_set(e, -EIO, "HTTP: cannot start microhttpd on %s", h->address);
	}
	log_info("HTTP: listening on %s", h->address);
	*ret = h;
	return 0;
}

void http_front_stop_accepting(struct http_front *h)
{
	if (h)
		atomic_store(&h->stopping, true);
}

const char *http_front_address(const struct http_front *h)
{
	return h ? h->address : NULL;
}

int http_front_reload(struct http_front *h, const struct config *cfg, struct errmsg *e)
{
	const struct config_listen *a, *b;

	if (!h || !cfg)
		return 0;
	a = &h->listen;
	b = &cfg->listen;
	if (a->kind != b->kind || a->port != b->port || a->family != b->family ||
	    (a->host && b->host ? strcmp(a->host, b->host) != 0 : a->host != b->host) ||
	    (a->path && b->path ? strcmp(a->path, b->path) != 0 : a->path != b->path)) {
		errmsg_set(e, 1,
			   "[HTTP] Listen= changed; it applies after a restart (still serving "
			   "on %s)",
			   h->address);
		return 1;
	}
	return 0;
}

/* Waits (h->lock held) until *count is 0 or the deadline passes; true when it is 0. */
static bool wait_until(struct http_front *h, const size_t *count, uint64_t deadline_ns)
{
	while (*count > 0) {
		struct timespec ts;
		uint64_t now = now_ns(), slice;

		if (now >= deadline_ns)
			return false;
		/* the condition variable uses CLOCK_REALTIME: wait in short slices and check the
		 * monotonic deadline, so a clock step cannot stretch the wait */
		slice = MIN(deadline_ns - now, (uint64_t) 100000000);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long) slice;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&h->cond, &h->lock, &ts);
	}
	return true;
}

struct http_front *http_front_free(struct http_front *h)
{
	uint64_t *ids = NULL;
	size_t n_ids = 0;
	bool gens_done, conns_done;
	MHD_socket lfd;

	if (!h)
		return NULL;
	atomic_store(&h->stopping, true);
	lfd = MHD_quiesce_daemon(h->mhd); /* no new connections */
	if (lfd != MHD_INVALID_SOCKET)
		close(lfd);

	/* cancel generations in flight: their clients get a final error event or response */
	pthread_mutex_lock(&h->lock);
	ids = calloc(h->n_reqs ? h->n_reqs : 1, sizeof(*ids));
	for (struct http_req *r = h->reqs; r && ids; r = r->next) {
		pthread_mutex_lock(&r->lock);
		if (r->gen_active && r->gen_submitted)
			ids[n_ids++] = r->gen_id;
		pthread_mutex_unlock(&r->lock);
	}
	pthread_mutex_unlock(&h->lock);
	for (size_t i = 0; i < n_ids; i++)
		(void) manager_cancel(h->mgr, ids[i]);
	free(ids);

	pthread_mutex_lock(&h->lock);
	gens_done = wait_until(h, &h->n_gen, now_ns() + FREE_WAIT_NS);
	conns_done = wait_until(h, &h->n_reqs, now_ns() + FLUSH_WAIT_NS);
	pthread_mutex_unlock(&h->lock);

	if (!conns_done) {
		/* clients that do not read: end their connections */
		atomic_store(&h->aborting, true);
		pthread_mutex_lock(&h->lock);
		for (struct http_req *r = h->reqs; r; r = r->next) {
			pthread_mutex_lock(&r->lock);
			if (r->suspended && !r->conn_closed) {
				r->suspended = false;
				MHD_resume_connection(r->conn);
			}
			pthread_mutex_unlock(&r->lock);
		}
		pthread_mutex_unlock(&h->lock);
	}
	MHD_stop_daemon(h->mhd);
	h->mhd = NULL;
	if (!gens_done) {
		/* an event may still come for a request that points at h: keep h alive (leak)
		 * rather than let the scheduler thread touch freed memory */
		log_warning("HTTP: %zu generations did not end in time; leaving the front behind",
			    h->n_gen);
		return NULL;
	}
	front_destroy(h);
	return NULL;
}
