/* SPDX-License-Identifier: MIT */
/*
 * dbus.c: the D-Bus connection, org.molly.Inference1 and org.molly.Daemon1 (see dbus.h).
 *
 * A request (struct dreq) lives from the call until its final event has been handled on the
 * loop and, for a stream, its output has been written or the reader has gone. The manager's
 * events are copied on the scheduler thread (dreq_event) and applied on the loop (post_event).
 *
 * Streams: the client gets the read end of a pipe; we keep the write end non-blocking. Lines
 * that do not fit the pipe wait in a buffer of at most [DBus] StreamBufferBytes= (the pipe itself
 * is sized to a quarter of that, 4 to 64 KiB); a client that lets more pile up has its request
 * cancelled ("the client does not read") so that it can never hold the scheduler or our
 * memory. Closing the read end cancels (the write end reports
 * EPOLLERR, which epoll watches even with no events asked for).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <json-c/json.h>

#include "../basic/utf8-prefix.h"
#include "../core/config.h"
#include "../core/log.h"
#include "../grammar/schema.h"
#include "dbus-internal.h"

#ifndef MOLLY_VERSION
#define MOLLY_VERSION "0.1.0"
#endif

#define STREAM_LINGER_USEC (30ull * 1000000ull) /* after the final line, for a slow reader */
#define PROMPT_MAX_BYTES (4u << 20)
#define MESSAGES_MAX 4096

enum dreq_kind {
	DREQ_GENERATE,
	DREQ_STREAM,
};

struct dreq;

/* A copied manager event. */
struct dreq_post {
	struct dbus_post post;
	struct dreq *req;
	enum manager_event_type type;
	char *text;
	size_t text_len;
	float *logprobs;          /* logprobs on: one per token in the chunk */
	size_t n_logprobs;
	char finish_reason[16];
	uint32_t prompt_tokens, completion_tokens;
	char model[72];
	char target[200];         /* routed: the target that answered */
	bool has_confidence;
	double confidence;
	char uncertainty[400];
	enum manager_err err_kind;
	char message[512];
};

struct dreq {
	struct dreq *prev, *next;
	struct dbus_front *front;
	enum dreq_kind kind;
	uint64_t id;              /* the manager's */
	bool finished;            /* final event handled on the loop */
	bool cancelled;           /* we asked the manager to cancel */
	char path[96];            /* stream handle */
	char *sender;             /* unique name of the caller */
	uid_t uid;

	/* Generate */
	sd_bus_message *call;
	char *text;
	size_t n_text, cap_text;

	/* Stream */
	int fd;                   /* write end, or -EBADF once closed */
	sd_event_source *io;
	sd_event_source *linger;
	char *out;                /* unwritten bytes */
	size_t n_out, cap_out;
	bool overflow;
	bool logprobs;
	size_t max_out;           /* [DBus] StreamBufferBytes= when the stream began */

	/* The final event's copy, allocated up front so that it can never be lost to a failed
	 * allocation on the scheduler thread. Posted (and then owned by the queue) or freed. */
	struct dreq_post *final;
};

static void dreq_free(struct dreq *r);
static void stream_flush(struct dreq *r);

static uint64_t now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000ull + (uint64_t) ts.tv_nsec / 1000;
}

/* ---- the cross-thread queue ---- */

void dbus_front_post(struct dbus_front *f, struct dbus_post *p)
{
	uint64_t one = 1;
	bool wake;

	p->next = NULL;
	pthread_mutex_lock(&f->lock);
	wake = !f->post_head;
	if (f->post_tail)
		f->post_tail->next = p;
	else
		f->post_head = p;
	f->post_tail = p;
	pthread_mutex_unlock(&f->lock);
	if (wake)
		(void) !write(f->post_fd, &one, sizeof(one));
}

static int on_post(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct dbus_front *f = userdata;
	struct dbus_post *p;
	uint64_t n;

	(void) !read(fd, &n, sizeof(n));
	pthread_mutex_lock(&f->lock);
	p = f->post_head;
	f->post_head = f->post_tail = NULL;
	pthread_mutex_unlock(&f->lock);
	while (p) {
		struct dbus_post *next = p->next;
		p->run(f, p);
		p = next;
	}
	return 0;
}

/* ---- requests ---- */

static struct dreq *dreq_new(struct dbus_front *f, enum dreq_kind kind, sd_bus_message *m)
{
	struct dreq *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->front = f;
	r->kind = kind;
	r->fd = -EBADF;
	r->sender = strdup(sd_bus_message_get_sender(m) ?: "");
	r->final = calloc(1, sizeof(*r->final));
	if (!r->sender || !r->final) {
		free(r->sender);
		free(r->final);
		free(r);
		return NULL;
	}
	r->uid = (uid_t) -1;
	(void) dbus_caller_uid(m, &r->uid);
	r->next = f->requests;
	if (f->requests)
		f->requests->prev = r;
	f->requests = r;
	f->n_requests++;
	return r;
}

static void dreq_free(struct dreq *r)
{
	struct dbus_front *f;

	if (!r)
		return;
	f = r->front;
	if (r->prev)
		r->prev->next = r->next;
	else if (f->requests == r)
		f->requests = r->next;
	if (r->next)
		r->next->prev = r->prev;
	f->n_requests--;
	sd_event_source_disable_unref(r->io);
	sd_event_source_disable_unref(r->linger);
	if (r->fd >= 0)
		close(r->fd);
	sd_bus_message_unref(r->call);
	free(r->final);
	free(r->sender);
	free(r->text);
	free(r->out);
	free(r);
}

static void dreq_cancel(struct dreq *r)
{
	if (r->finished || r->cancelled)
		return;
	r->cancelled = true;
	(void) manager_cancel(r->front->manager, r->id);
}

/* Scheduler thread: copy and post. */
static void post_event(struct dbus_front *f, struct dbus_post *p);

static void dreq_event(const struct manager_event *ev, void *userdata)
{
	struct dreq *r = userdata;
	struct dreq_post *p;

	if (ev->type == MANAGER_EVENT_TEXT) {
		p = calloc(1, sizeof(*p));
		if (p)
			p->text = malloc(ev->text_len + 1);
		if (!p || !p->text) {
			/* A lost chunk would corrupt the answer: end the request instead. */
			free(p);
			(void) manager_cancel(r->front->manager, r->id);
			return;
		}
		memcpy(p->text, ev->text, ev->text_len);
		p->text[ev->text_len] = 0;
		p->text_len = ev->text_len;
		if (ev->n_tokens > 0) {
			p->logprobs = calloc(ev->n_tokens, sizeof(float));
			if (p->logprobs) {
				for (size_t i = 0; i < ev->n_tokens; i++)
					p->logprobs[i] = ev->tokens[i].logprob;
				p->n_logprobs = ev->n_tokens;
			}
		}
	} else {
		p = TAKE_PTR(r->final);
		if (!p)
			return; /* cannot happen: one final event per request */
		p->prompt_tokens = ev->prompt_tokens;
		p->completion_tokens = ev->completion_tokens;
		if (ev->type == MANAGER_EVENT_DONE) {
			snprintf(p->finish_reason, sizeof(p->finish_reason), "%s",
				 ev->finish_reason);
			snprintf(p->model, sizeof(p->model), "%s", ev->model ?: "");
			snprintf(p->target, sizeof(p->target), "%s", ev->target ?: "");
			p->has_confidence = ev->has_confidence;
			p->confidence = ev->confidence;
			snprintf(p->uncertainty, sizeof(p->uncertainty), "%s",
				 ev->uncertainty ?: "");
		} else {
			p->err_kind = ev->error ? ev->error->kind : MANAGER_ERR_INTERNAL;
			snprintf(p->message, sizeof(p->message), "%s",
				 ev->error ? ev->error->message : "generation failed");
		}
	}
	p->post.run = post_event;
	p->req = r;
	p->type = ev->type;
	dbus_front_post(r->front, &p->post);
}

/* ---- JSON lines ---- */

static char *json_line(struct json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE);
	char *line = NULL;

	if (s && asprintf(&line, "%s\n", s) < 0)
		line = NULL;
	json_object_put(o);
	return line;
}

static char *json_token_line(const struct dreq_post *p)
{
	struct json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	json_object_object_add(o, "type", json_object_new_string("token"));
	json_object_object_add(o, "text", json_object_new_string_len(p->text, (int) p->text_len));
	if (p->n_logprobs > 0) {
		struct json_object *a = json_object_new_array();
		for (size_t i = 0; a && i < p->n_logprobs; i++)
			json_object_array_add(a, json_object_new_double(p->logprobs[i]));
		json_object_object_add(o, "logprobs", a);
	}
	return json_line(o);
}

static char *json_done_line(const struct dreq_post *p)
{
	struct json_object *o = json_object_new_object(), *u = json_object_new_object();

	if (!o || !u) {
		json_object_put(o);
		json_object_put(u);
		return NULL;
	}
	json_object_object_add(o, "type", json_object_new_string("done"));
	json_object_object_add(o, "finish_reason", json_object_new_string(p->finish_reason));
	json_object_object_add(o, "model", json_object_new_string(p->model));
	json_object_object_add(u, "prompt_tokens", json_object_new_int64(p->prompt_tokens));
	json_object_object_add(u, "completion_tokens", json_object_new_int64(p->completion_tokens));
	json_object_object_add(
		u, "total_tokens",
		json_object_new_int64((int64_t) p->prompt_tokens + p->completion_tokens));
	json_object_object_add(o, "usage", u);
	if (p->target[0])
		json_object_object_add(o, "target", json_object_new_string(p->target));
	if (p->has_confidence)
		json_object_object_add(o, "confidence", json_object_new_double(p->confidence));
	if (p->uncertainty[0])
		json_object_object_add(o, "uncertainty", json_object_new_string(p->uncertainty));
	return json_line(o);
}

static char *json_error_line(const char *code, const char *message)
{
	struct json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	json_object_object_add(o, "type", json_object_new_string("error"));
	json_object_object_add(o, "code", json_object_new_string(code));
	json_object_object_add(o, "message", json_object_new_string(message));
	return json_line(o);
}

/* ---- streams ---- */

static int on_stream_io(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct dreq *r = userdata;

	if (revents & (EPOLLERR | EPOLLHUP)) {
		/* The reader is gone: stop generating for it. */
		log_debug("stream %s: reader closed, cancelling", r->path);
		dreq_cancel(r);
		r->io = sd_event_source_disable_unref(r->io);
		close(r->fd);
		r->fd = -EBADF;
		r->n_out = 0;
		if (r->finished)
			dreq_free(r);
		return 0;
	}
	stream_flush(r);
	return 0;
}

static int on_stream_linger(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct dreq *r = userdata;

	log_debug("stream %s: reader did not take the last %zu bytes, closing", r->path, r->n_out);
	dreq_free(r);
	return 0;
}

/* Writes what the pipe takes; watches for EPOLLOUT while something is left. Frees r when it is
 * finished and empty. */
static void stream_flush(struct dreq *r)
{
	while (r->fd >= 0 && r->n_out > 0) {
		ssize_t n = write(r->fd, r->out, r->n_out);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			/* EPIPE: the reader is gone. */
			dreq_cancel(r);
			r->io = sd_event_source_disable_unref(r->io);
			close(r->fd);
			r->fd = -EBADF;
			r->n_out = 0;
			break;
		}
		memmove(r->out, r->out + n, r->n_out - (size_t) n);
		r->n_out -= (size_t) n;
	}
	if (r->io)
		(void) sd_event_source_set_io_events(r->io, r->n_out > 0 ? EPOLLOUT : 0);
	if (r->finished && (r->n_out == 0 || r->fd < 0))
		dreq_free(r);
}

/* Queues a line (owned). Token lines beyond the bound cancel the request instead. */
static void stream_push(struct dreq *r, char *line, bool final)
{
	size_t n;

	if (!line || r->fd < 0) {
		free(line);
		return;
	}
	n = strlen(line);
	if (!final && r->n_out + n > r->max_out) {
		free(line);
		if (!r->overflow) {
			r->overflow = true;
			log_notice("stream %s: the client does not read (over %zu bytes waiting); "
				   "cancelling",
				   r->path, r->max_out);
			dreq_cancel(r);
		}
		return;
	}
	if (r->n_out + n > r->cap_out) {
		size_t cap = MAX(r->cap_out * 2, r->n_out + n);
		char *o = realloc(r->out, cap);
		if (!o) {
			free(line);
			dreq_cancel(r);
			return;
		}
		r->out = o;
		r->cap_out = cap;
	}
	memcpy(r->out + r->n_out, line, n);
	r->n_out += n;
	free(line);
}

/* ---- applying events on the loop ---- */

static void generate_reply(struct dreq *r, const struct dreq_post *p)
{
	int k;

	if (p->type == MANAGER_EVENT_DONE) {
		_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;

		k = sd_bus_message_new_method_return(r->call, &m);
		if (k >= 0)
			k = sd_bus_message_append(m, "s", r->text ? r->text : "");
		if (k >= 0)
			k = sd_bus_message_open_container(m, 'a', "{sv}");
		if (k >= 0)
			k = sd_bus_message_append(m, "{sv}{sv}{sv}{sv}", "prompt_tokens", "u",
						  p->prompt_tokens, "completion_tokens", "u",
						  p->completion_tokens, "finish_reason", "s",
						  p->finish_reason, "model", "s", p->model);
		/* Routed requests (docs/dbus.md): the target, and the cascade's signals. */
		if (k >= 0 && p->target[0])
			k = sd_bus_message_append(m, "{sv}", "target", "s", p->target);
		if (k >= 0 && p->has_confidence)
			k = sd_bus_message_append(m, "{sv}", "confidence", "d", p->confidence);
		if (k >= 0 && p->uncertainty[0])
			k = sd_bus_message_append(m, "{sv}", "uncertainty", "s", p->uncertainty);
		if (k >= 0)
			k = sd_bus_message_close_container(m);
		if (k >= 0)
			k = sd_bus_send(NULL, m, NULL);
	} else
		k = sd_bus_reply_method_errorf(r->call, manager_err_dbus_name(p->err_kind), "%s",
					       p->message);
	if (k < 0)
		log_debug_errno(k, "Generate: cannot reply (the caller may have left): %m");
}

static void post_event(struct dbus_front *f, struct dbus_post *pp)
{
	struct dreq_post *p = (struct dreq_post *) pp;
	struct dreq *r = p->req;

	switch (p->type) {
	case MANAGER_EVENT_TEXT:
		if (r->kind == DREQ_GENERATE) {
			if (r->n_text + p->text_len + 1 > r->cap_text) {
				size_t cap = MAX(r->cap_text * 2, r->n_text + p->text_len + 64);
				char *t = realloc(r->text, cap);
				if (!t) {
					dreq_cancel(r);
					break;
				}
				r->text = t;
				r->cap_text = cap;
			}
			memcpy(r->text + r->n_text, p->text, p->text_len);
			r->n_text += p->text_len;
			r->text[r->n_text] = 0;
		} else if (!r->overflow) {
			stream_push(r, json_token_line(p), false);
			stream_flush(r);
		}
		break;
	case MANAGER_EVENT_DONE:
	case MANAGER_EVENT_ERROR:
		r->finished = true;
		if (r->kind == DREQ_GENERATE) {
			generate_reply(r, p);
			dreq_free(r);
			break;
		}
		if (p->type == MANAGER_EVENT_DONE && r->overflow)
			stream_push(r, json_error_line("client_too_slow",
						       "the client did not read its stream; the "
						       "request was cancelled"),
				    true);
		else if (p->type == MANAGER_EVENT_DONE)
			stream_push(r, json_done_line(p), true);
		else
			stream_push(r, json_error_line(manager_err_name(p->err_kind), p->message),
				    true);
		if (r->n_out > 0 && r->fd >= 0)
			(void) sd_event_add_time_relative(f->event, &r->linger, CLOCK_MONOTONIC,
							  STREAM_LINGER_USEC, 0, on_stream_linger,
							  r);
		stream_flush(r); /* frees r when all is written */
		break;
	}
	free(p->text);
	free(p->logprobs);
	free(p);
}

/* ---- reading a request a{sv} ---- */

struct parsed_request {
	struct manager_request req;
	struct chat_message *messages;
	const char **stop;
	struct manager_lora *loras;
	char *grammar; /* owned: compiled from response_format */
};

static void parsed_request_done(struct parsed_request *p)
{
	free(p->grammar);
	free(p->messages);
	free(p->stop);
	free(p->loras);
}

static bool is_integer_type(const char *sig)
{
	return sig && strlen(sig) == 1 && strchr("ynqiuxt", sig[0]);
}

/* Reads an integer of any D-Bus integer type t; -ERANGE for a 't' beyond INT64_MAX. */
static int read_integer(sd_bus_message *m, char t, int64_t *ret)
{
	union {
		uint8_t y;
		int16_t n;
		uint16_t q;
		int32_t i;
		uint32_t u;
		int64_t x;
		uint64_t t;
	} v;
	int r = sd_bus_message_read_basic(m, t, &v);

	if (r < 0)
		return r;
	switch (t) {
	case 'y':
		*ret = v.y;
		break;
	case 'n':
		*ret = v.n;
		break;
	case 'q':
		*ret = v.q;
		break;
	case 'i':
		*ret = v.i;
		break;
	case 'u':
		*ret = v.u;
		break;
	case 'x':
		*ret = v.x;
		break;
	case 't':
		if (v.t > INT64_MAX)
			return -ERANGE;
		*ret = (int64_t) v.t;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static int read_number(sd_bus_message *m, const char *sig, double *ret)
{
	if (strcmp(sig, "d") == 0)
		return sd_bus_message_read_basic(m, 'd', ret);
	if (is_integer_type(sig)) {
		int64_t v;
		int r = read_integer(m, sig[0], &v);
		if (r < 0)
			return r;
		*ret = (double) v;
		return 0;
	}
	return -EINVAL;
}

#define BAD_TYPE(key, want)                                                                        \
	sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,                                        \
			  "key '%s': expected %s, got a variant of type '%s'", key, want, contents)

static int read_messages(sd_bus_message *m, struct parsed_request *p, sd_bus_error *error)
{
	size_t cap = 0;
	int r;

	r = sd_bus_message_enter_container(m, 'a', "a{ss}");
	if (r < 0)
		return r;
	while ((r = sd_bus_message_enter_container(m, 'a', "{ss}")) > 0) {
		struct chat_message msg = { 0 };
		const char *k, *v;

		if (p->req.n_messages >= MESSAGES_MAX)
			return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
						 "key 'messages': more than %d messages",
						 MESSAGES_MAX);
		while ((r = sd_bus_message_read(m, "{ss}", &k, &v)) > 0) {
			if (strcmp(k, "role") == 0)
				msg.role = v;
			else if (strcmp(k, "content") == 0)
				msg.content = v;
			else
				return sd_bus_error_setf(
					error, SD_BUS_ERROR_INVALID_ARGS,
					"key 'messages': message %zu has unknown key "
					"'%.*s' (only role and content)",
					p->req.n_messages, utf8_prefix(k, 64), k);
		}
		if (r < 0)
			return r;
		r = sd_bus_message_exit_container(m);
		if (r < 0)
			return r;
		if (!msg.role || !msg.content)
			return sd_bus_error_setf(
				error, SD_BUS_ERROR_INVALID_ARGS,
				"key 'messages': message %zu needs role and content",
				p->req.n_messages);
		if (p->req.n_messages == cap) {
			cap = MAX(8, cap * 2);
			struct chat_message *n = realloc(p->messages, cap * sizeof(*n));
			if (!n)
				return -ENOMEM;
			p->messages = n;
		}
		p->messages[p->req.n_messages++] = msg;
	}
	if (r < 0)
		return r;
	if (p->req.n_messages == 0)
		return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
					 "key 'messages': the list is empty");
	p->req.messages = p->messages;
	return sd_bus_message_exit_container(m);
}

static int read_stop(sd_bus_message *m, const char *contents, struct parsed_request *p,
		     sd_bus_error *error)
{
	const char *s;
	int r;

	p->stop = calloc(MANAGER_MAX_STOP, sizeof(char *));
	if (!p->stop)
		return -ENOMEM;
	if (strcmp(contents, "s") == 0) {
		r = sd_bus_message_read(m, "s", &s);
		if (r < 0)
			return r;
		p->stop[0] = s;
		p->req.n_stop = 1;
	} else {
		r = sd_bus_message_enter_container(m, 'a', "s");
		if (r < 0)
			return r;
		while ((r = sd_bus_message_read(m, "s", &s)) > 0) {
			if (p->req.n_stop >= MANAGER_MAX_STOP)
				return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
							 "key 'stop': at most %d strings",
							 MANAGER_MAX_STOP);
			p->stop[p->req.n_stop++] = s;
		}
		if (r < 0)
			return r;
		r = sd_bus_message_exit_container(m);
		if (r < 0)
			return r;
	}
	p->req.stop = p->stop;
	return 0;
}

static int read_lora(sd_bus_message *m, struct parsed_request *p, sd_bus_error *error)
{
	const char *name;
	double scale;
	int r;

	p->loras = calloc(MANAGER_MAX_LORAS, sizeof(*p->loras));
	if (!p->loras)
		return -ENOMEM;
	r = sd_bus_message_enter_container(m, 'a', "(sd)");
	if (r < 0)
		return r;
	while ((r = sd_bus_message_read(m, "(sd)", &name, &scale)) > 0) {
		if (p->req.n_loras >= MANAGER_MAX_LORAS)
			return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
						 "key 'lora': at most %d adapters",
						 MANAGER_MAX_LORAS);
		p->loras[p->req.n_loras++] = (struct manager_lora){ .name = name,
								     .scale = (float) scale };
	}
	if (r < 0)
		return r;
	p->req.loras = p->loras;
	return sd_bus_message_exit_container(m);
}

/* Reads the request dictionary. Errors are InvalidArgs naming the key (in error) or -errno. */
/* response_format (JSON text) → p->grammar. */
static int read_response_format(const char *text, struct parsed_request *p, sd_bus_error *error)
{
	struct json_object *v = json_tokener_parse(text), *t = NULL, *js = NULL, *schema = NULL;
	struct errmsg e = { { 0 } };
	const char *type;
	size_t len;
	int r = 0;

	if (!v || !json_object_object_get_ex(v, "type", &t) ||
	    json_object_get_type(t) != json_type_string) {
		json_object_put(v);
		return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
					 "key 'response_format': a JSON object with a \"type\"");
	}
	type = json_object_get_string(t);
	if (strcmp(type, "json_object") == 0)
		r = schema_json_object_gbnf(&p->grammar, &len);
	else if (strcmp(type, "json_schema") == 0 &&
		 json_object_object_get_ex(v, "json_schema", &js) &&
		 json_object_object_get_ex(js, "schema", &schema))
		r = schema_to_gbnf_cached(schema, &p->grammar, &len, &e);
	else if (strcmp(type, "text") != 0)
		r = errmsg_set(&e, -EINVAL, "type must be text, json_object or json_schema (with "
					    "json_schema.schema)");
	json_object_put(v);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "key 'response_format': %s",
					 e.text);
	return 0;
}

static int read_request(sd_bus_message *m, struct parsed_request *p, sd_bus_error *error)
{
	int r;

	manager_request_init(&p->req);
	r = sd_bus_message_enter_container(m, 'a', "{sv}");
	if (r < 0)
		return r;
	while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
		const char *key, *contents;
		char type;

		r = sd_bus_message_read(m, "s", &key);
		if (r < 0)
			return r;
		r = sd_bus_message_peek_type(m, &type, &contents);
		if (r < 0)
			return r;
		r = sd_bus_message_enter_container(m, 'v', contents);
		if (r < 0)
			return r;

		if (strcmp(key, "prompt") == 0) {
			if (strcmp(contents, "s") != 0)
				return BAD_TYPE(key, "a string (s)");
			r = sd_bus_message_read(m, "s", &p->req.prompt);
			if (r >= 0 && strlen(p->req.prompt) > PROMPT_MAX_BYTES)
				return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
							 "key 'prompt': longer than %u bytes",
							 PROMPT_MAX_BYTES);
		} else if (strcmp(key, "messages") == 0) {
			if (strcmp(contents, "aa{ss}") != 0)
				return BAD_TYPE(key, "an array of dictionaries (aa{ss})");
			r = read_messages(m, p, error);
		} else if (strcmp(key, "max_tokens") == 0) {
			int64_t v;
			if (!is_integer_type(contents))
				return BAD_TYPE(key, "an integer");
			r = read_integer(m, contents[0], &v);
			if (r == -ERANGE || (r >= 0 && (v < 0 || v > UINT32_MAX)))
				return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
							 "key 'max_tokens': out of range");
			if (r >= 0)
				p->req.max_tokens = (uint32_t) v;
		} else if (strcmp(key, "temperature") == 0 || strcmp(key, "top_p") == 0) {
			double d;
			if (strcmp(contents, "d") != 0 && !is_integer_type(contents))
				return BAD_TYPE(key, "a number (d, or an integer)");
			r = read_number(m, contents, &d);
			if (r >= 0 && key[0] == 't' && key[1] == 'e')
				p->req.temperature = (float) d;
			else if (r >= 0)
				p->req.top_p = (float) d;
		} else if (strcmp(key, "seed") == 0) {
			int64_t v;
			if (!is_integer_type(contents))
				return BAD_TYPE(key, "an integer");
			if (contents[0] == 't') {
				r = sd_bus_message_read_basic(m, 't', &p->req.seed);
			} else {
				r = read_integer(m, contents[0], &v);
				/* Negative seeds wrap, as numpy and vLLM take them. */
				p->req.seed = (uint64_t) v;
			}
			p->req.has_seed = true;
		} else if (strcmp(key, "stop") == 0) {
			if (strcmp(contents, "s") != 0 && strcmp(contents, "as") != 0)
				return BAD_TYPE(key, "a string or an array of strings (s or as)");
			r = read_stop(m, contents, p, error);
		} else if (strcmp(key, "adapter") == 0 || strcmp(key, "model") == 0) {
			if (strcmp(contents, "s") != 0)
				return BAD_TYPE(key, "a string (s)");
			if (p->req.model)
				return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
							 "key '%s': give either adapter or model",
							 key);
			r = sd_bus_message_read(m, "s", &p->req.model);
		} else if (strcmp(key, "lora") == 0) {
			if (strcmp(contents, "a(sd)") != 0)
				return BAD_TYPE(key, "an array of (name, scale) (a(sd))");
			r = read_lora(m, p, error);
		} else if (strcmp(key, "logprobs") == 0) {
			int b;
			if (strcmp(contents, "b") != 0)
				return BAD_TYPE(key, "a boolean (b)");
			r = sd_bus_message_read(m, "b", &b);
			p->req.logprobs = b;
		} else if (strcmp(key, "ignore_eos") == 0) {
			int b;
			if (strcmp(contents, "b") != 0)
				return BAD_TYPE(key, "a boolean (b)");
			r = sd_bus_message_read(m, "b", &b);
			p->req.ignore_eos = b;
		} else if (strcmp(key, "budget") == 0) {
			/* The request's own routing budget (manager_request.budget). */
			if (strcmp(contents, "d") != 0)
				return BAD_TYPE(key, "a number (d)");
			r = sd_bus_message_read(m, "d", &p->req.budget);
		} else if (strcmp(key, "grammar") == 0) {
			/* GBNF as llama.cpp writes it (grammar.h) */
			if (strcmp(contents, "s") != 0)
				return BAD_TYPE(key, "a string (s)");
			if (p->req.grammar)
				return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
							 "give either grammar or response_format");
			r = sd_bus_message_read(m, "s", &p->req.grammar);
		} else if (strcmp(key, "response_format") == 0) {
			/* OpenAI's response_format object as JSON text: {"type": "json_object"} or
			 * {"type": "json_schema", "json_schema": {"schema": {...}}} */
			const char *text;

			if (strcmp(contents, "s") != 0)
				return BAD_TYPE(key, "a string of JSON (s)");
			if (p->req.grammar)
				return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
							 "give either grammar or response_format");
			r = sd_bus_message_read(m, "s", &text);
			if (r >= 0) {
				r = read_response_format(text, p, error);
				p->req.grammar = p->grammar;
			}
		} else if (strcmp(key, "class") == 0) {
			/* The caller's declared sensitivity class (the manager checks the name). */
			if (strcmp(contents, "s") != 0)
				return BAD_TYPE(key, "a string (s)");
			r = sd_bus_message_read(m, "s", &p->req.declared_class);
		} else
			return sd_bus_error_setf(
				error, SD_BUS_ERROR_INVALID_ARGS,
				"unknown key '%.*s' (known: prompt, messages, "
				"max_tokens, temperature, top_p, seed, stop, adapter, "
				"lora, logprobs, ignore_eos, class, budget, grammar, "
				"response_format)",
				utf8_prefix(key, 64), key);
		if (sd_bus_error_is_set(error))
			return -EINVAL;
		if (r < 0)
			return r;
		r = sd_bus_message_exit_container(m); /* v */
		if (r < 0)
			return r;
		r = sd_bus_message_exit_container(m); /* e */
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	r = sd_bus_message_exit_container(m);
	if (r < 0)
		return r;
	if (!p->req.prompt && !p->req.messages)
		return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
					 "the request needs 'prompt' (s) or 'messages' (aa{ss})");
	if (p->req.prompt && p->req.messages)
		return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
					 "give either 'prompt' or 'messages', not both");
	return 0;
}

/* Policy1.Explain (dbus-policy.c) reads the same dictionary as Generate. */
int dbus_read_request(sd_bus_message *m, struct dbus_parsed_request **ret, sd_bus_error *error)
{
	struct parsed_request *p = calloc(1, sizeof(*p));
	int k;

	if (!p)
		return -ENOMEM;
	k = read_request(m, p, error);
	if (k < 0 || sd_bus_error_is_set(error)) {
		parsed_request_done(p);
		free(p);
		return k < 0 ? k : -EINVAL;
	}
	*ret = (struct dbus_parsed_request *) p;
	return 0;
}

const struct manager_request *dbus_parsed_request_get(const struct dbus_parsed_request *p)
{
	return &((const struct parsed_request *) p)->req;
}

struct dbus_parsed_request *dbus_parsed_request_free(struct dbus_parsed_request *p)
{
	if (p) {
		parsed_request_done((struct parsed_request *) p);
		free(p);
	}
	return NULL;
}

/* ---- Inference1 ---- */

static int submit(sd_bus_message *m, struct dbus_front *f, struct dreq *r, sd_bus_error *error)
{
	_cleanup_(config_unrefp) struct config *cfg = manager_get_config(f->manager);
	struct parsed_request p = { 0 };
	struct manager_caller caller = { .uid = r->uid, .front = "dbus" };
	struct manager_error err = { 0 };
	const struct config_member *mem;
	int k;

	k = read_request(m, &p, error);
	if (k < 0 || sd_bus_error_is_set(error)) {
		parsed_request_done(&p);
		if (!sd_bus_error_is_set(error))
			sd_bus_error_set_errnof(error, -k, "cannot read the request: %s",
						strerror(-k));
		return -EINVAL;
	}
	r->logprobs = p.req.logprobs;
	/* A local user listed in a member's UIDs= gets that member's scopes. */
	mem = r->uid != (uid_t) -1 ? config_find_member_by_uid(cfg, r->uid) : NULL;
	caller.member = mem ? mem->name : NULL;
	k = manager_submit(f->manager, &p.req, &caller, dreq_event, r, &r->id, &err);
	parsed_request_done(&p);
	if (k < 0) {
		sd_bus_error_set(error, manager_err_dbus_name(err.kind), err.message);
		return k;
	}
	return 0;
}

static int method_generate(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct dbus_front *f = userdata;
	struct dreq *r;

	if (!f->accepting || manager_is_stopping(f->manager))
		return sd_bus_error_set(error, "org.molly.Error.Unavailable",
					"the daemon is stopping; retry when it is back");
	r = dreq_new(f, DREQ_GENERATE, m);
	if (!r)
		return -ENOMEM;
	r->call = sd_bus_message_ref(m);
	if (submit(m, f, r, error) < 0) {
		dreq_free(r);
		return sd_bus_error_is_set(error) ? -EINVAL : -EIO;
	}
	/* The reply goes out when the final event arrives (post_event). */
	return 1;
}

static int method_stream(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct dbus_front *f = userdata;
	_cleanup_close_ int rfd = -EBADF;
	struct dreq *r;
	int fds[2], k;

	if (!f->accepting || manager_is_stopping(f->manager))
		return sd_bus_error_set(error, "org.molly.Error.Unavailable",
					"the daemon is stopping; retry when it is back");
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	rfd = fds[0];
	r = dreq_new(f, DREQ_STREAM, m);
	if (!r) {
		close(fds[1]);
		return -ENOMEM;
	}
	r->fd = fds[1];
	{
		_cleanup_(config_unrefp) struct config *cfg = manager_get_config(f->manager);
		r->max_out = (size_t) cfg->stream_buffer_bytes;
	}
	/* A small pipe keeps the bound meaningful; failure leaves the default size. */
	(void) fcntl(r->fd, F_SETPIPE_SZ, (int) MIN(MAX(r->max_out / 4, 4096u), 65536u));
	/* Only our end is non-blocking: the client's end shares nothing with it. */
	if (fcntl(r->fd, F_SETFL, O_NONBLOCK) < 0) {
		k = -errno;
		dreq_free(r);
		return k;
	}
	k = sd_event_add_io(f->event, &r->io, r->fd, 0, on_stream_io, r);
	if (k < 0) {
		dreq_free(r);
		return k;
	}
	if (submit(m, f, r, error) < 0) {
		dreq_free(r);
		return sd_bus_error_is_set(error) ? -EINVAL : -EIO;
	}
	snprintf(r->path, sizeof(r->path), DBUS_REQUEST_PREFIX "%" PRIu64, r->id);
	k = sd_bus_reply_method_return(m, "ho", rfd, r->path);
	if (k < 0) {
		/* The caller will never see the fd: nobody would read it. */
		dreq_cancel(r);
		return k;
	}
	return 1;
}

static int method_cancel(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct dbus_front *f = userdata;
	const char *path, *sender = sd_bus_message_get_sender(m);
	uid_t uid = (uid_t) -1;
	int k;

	k = sd_bus_message_read(m, "o", &path);
	if (k < 0)
		return k;
	(void) dbus_caller_uid(m, &uid);
	for (struct dreq *r = f->requests; r; r = r->next) {
		if (r->kind != DREQ_STREAM || strcmp(r->path, path) != 0)
			continue;
		/* Only its caller (same connection or user) or root may cancel a request. */
		if (uid != 0 && (!sender || strcmp(sender, r->sender) != 0) &&
		    (uid == (uid_t) -1 || uid != r->uid))
			return sd_bus_error_setf(error, SD_BUS_ERROR_ACCESS_DENIED,
						 "request %s belongs to another caller", path);
		if (r->finished)
			break;
		dreq_cancel(r);
		return sd_bus_reply_method_return(m, "");
	}
	return sd_bus_error_setf(error, "org.molly.Error.NoSuchRequest",
				 "no request %s in flight (it may have finished)", path);
}

/* ---- Daemon1 ---- */

static int method_status(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct dbus_front *f = userdata;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	struct manager_stats st;
	char device[256];
	int k;

	manager_get_stats(f->manager, &st);
	manager_device_status(f->manager, device, sizeof(device));
	k = sd_bus_message_new_method_return(m, &reply);
	if (k < 0)
		return k;
	k = sd_bus_message_open_container(reply, 'a', "{sv}");
	if (k < 0)
		return k;
	k = sd_bus_message_append(
		reply,
		"{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}",
		"version", "s", MOLLY_VERSION, "egress", "s",
		manager_egress_status(f->manager), "device", "s", device, "model", "s",
		manager_model_name(f->manager), "state", "s",
		manager_is_stopping(f->manager) ? "stopping" : "running", "context_length", "u",
		manager_context_length(f->manager), "queue_depth", "u", st.waiting,
		"running_sequences", "u", st.running, "max_sequences", "u", st.max_sequences,
		"queue_length", "u", st.queue_length, "requests_total", "t", st.requests_total,
		"requests_rejected", "t", st.requests_rejected, "requests_finished", "t",
		st.requests_finished, "requests_failed", "t", st.requests_failed, "prompt_tokens",
		"t", st.prompt_tokens, "completion_tokens", "t", st.completion_tokens,
		"pool_pages_free", "t", (uint64_t) st.pool_pages_free, "judge_asked", "t",
		st.judge_asked, "judge_personal", "t", st.judge_personal, "judge_public", "t",
		st.judge_public, "judge_unclear", "t", st.judge_unclear, "judge_timeout", "t",
		st.judge_timeout);
	if (k >= 0)
		k = dbus_tiers_append_status(reply, &st);
	if (k >= 0)
		k = sd_bus_message_close_container(reply);
	if (k < 0)
		return k;
	return sd_bus_send(NULL, reply, NULL);
}

static int property_get(sd_bus *bus, const char *path, const char *interface, const char *property,
			sd_bus_message *reply, void *userdata, sd_bus_error *error)
{
	struct dbus_front *f = userdata;
	struct manager_stats st;

	if (strcmp(property, "Version") == 0)
		return sd_bus_message_append(reply, "s", MOLLY_VERSION);
	if (strcmp(property, "Model") == 0)
		return sd_bus_message_append(reply, "s", manager_model_name(f->manager));
	manager_get_stats(f->manager, &st);
	if (strcmp(property, "QueueDepth") == 0)
		return sd_bus_message_append(reply, "u", st.waiting);
	if (strcmp(property, "RunningSequences") == 0)
		return sd_bus_message_append(reply, "u", st.running);
	if (strncmp(property, "Adapter", 7) == 0) {
		int k = dbus_tiers_property(property, reply, &st);

		if (k != -ENOENT)
			return k;
	}
	return sd_bus_error_setf(error, SD_BUS_ERROR_UNKNOWN_PROPERTY, "no property %s", property);
}

static const sd_bus_vtable inference_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_METHOD_WITH_NAMES("Generate", "a{sv}", SD_BUS_PARAM(request), "sa{sv}",
				 SD_BUS_PARAM(text) SD_BUS_PARAM(info), method_generate,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Stream", "a{sv}", SD_BUS_PARAM(request), "ho",
				 SD_BUS_PARAM(fd) SD_BUS_PARAM(handle), method_stream,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Cancel", "o", SD_BUS_PARAM(handle), "", , method_cancel,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END,
};

static const sd_bus_vtable daemon_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_PROPERTY("Version", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	SD_BUS_PROPERTY("Model", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
	/* Change all the time: read them, no signals. */
	SD_BUS_PROPERTY("QueueDepth", "u", property_get, 0, 0),
	SD_BUS_PROPERTY("RunningSequences", "u", property_get, 0, 0),
	DBUS_TIERS_PROPERTIES(property_get),
	SD_BUS_METHOD_WITH_NAMES("Status", "", , "a{sv}", SD_BUS_PARAM(status), method_status,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD("Reload", "", "", dbus_method_reload, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END,
};

/* ---- lifetime ---- */

int dbus_front_new(sd_event *event, struct manager *m, const struct dbus_front_hooks *hooks,
		   struct dbus_front **ret, struct errmsg *e)
{
	_cleanup_(config_unrefp) struct config *cfg = manager_get_config(m);
	_cleanup_(dbus_front_freep) struct dbus_front *f = NULL;
	const char *which;
	int k;

	assert_return(event && m && ret, -EINVAL);
	if (cfg->bus == CONFIG_BUS_NONE) {
		*ret = NULL;
		return 0;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	pthread_mutex_init(&f->lock, NULL);
	f->post_fd = -EBADF;
	f->event = sd_event_ref(event);
	f->manager = m;
	f->accepting = true;
	if (hooks)
		f->hooks = *hooks;

	f->post_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (f->post_fd < 0)
		return errmsg_set(e, -errno, "eventfd: %s", strerror(errno));
	k = sd_event_add_io(event, &f->post_source, f->post_fd, EPOLLIN, on_post, f);
	if (k < 0)
		return errmsg_set(e, k, "event source: %s", strerror(-k));

	if (cfg->bus == CONFIG_BUS_SESSION) {
		which = "session bus ($DBUS_SESSION_BUS_ADDRESS)";
		k = sd_bus_open_user_with_description(&f->bus, "mollyd");
	} else {
		which = "system bus ($DBUS_SYSTEM_BUS_ADDRESS or /run/dbus/system_bus_socket)";
		k = sd_bus_open_system_with_description(&f->bus, "mollyd");
	}
	if (k < 0)
		return errmsg_set(e, k, "cannot connect to the %s: %s", which, strerror(-k));

	k = sd_bus_add_object_vtable(f->bus, NULL, DBUS_PATH, DBUS_IFACE_INFERENCE,
				     inference_vtable, f);
	if (k >= 0)
		k = sd_bus_add_object_vtable(f->bus, NULL, DBUS_PATH, DBUS_IFACE_ADAPTERS,
					     dbus_adapters_vtable, f);
	if (k >= 0)
		k = sd_bus_add_object_vtable(f->bus, NULL, DBUS_PATH, DBUS_IFACE_DAEMON,
					     daemon_vtable, f);
	if (k >= 0)
		k = sd_bus_add_object_vtable(f->bus, NULL, DBUS_PATH, DBUS_IFACE_POLICY,
					     dbus_policy_vtable, f);
	if (k < 0)
		return errmsg_set(e, k, "registering %s: %s", DBUS_PATH, strerror(-k));
	k = sd_bus_attach_event(f->bus, event, SD_EVENT_PRIORITY_NORMAL);
	if (k < 0)
		return errmsg_set(e, k, "attaching the bus: %s", strerror(-k));
	k = sd_bus_request_name(f->bus, DBUS_NAME, 0);
	if (k < 0)
		return errmsg_set(
			e, k,
			"cannot own %s on the %s: %s (is another mollyd running, or is the "
			"D-Bus policy packaging/dbus/org.molly.Daemon1.conf not installed "
			"for this user?)",
			DBUS_NAME, which, strerror(-k));
	*ret = TAKE_PTR(f);
	return 0;
}

/* Waits (bounded) for the final events of what is in flight, applying them as they come. */
static bool wait_finished(struct dbus_front *f, uint64_t timeout_usec)
{
	uint64_t deadline = 0, now;
	bool pending;

	(void) sd_event_now(f->event, CLOCK_MONOTONIC, &deadline);
	deadline += timeout_usec;
	for (;;) {
		struct pollfd pfd = { .fd = f->post_fd, .events = POLLIN };

		(void) on_post(NULL, f->post_fd, EPOLLIN, f);
		pending = f->n_jobs > 0;
		for (struct dreq *r = f->requests; r; r = r->next)
			if (!r->finished)
				pending = true;
		if (!pending)
			return true;
		now = now_usec();
		if (now >= deadline)
			return false;
		(void) poll(&pfd, 1, (int) MIN((deadline - now) / 1000 + 1, 100));
	}
}

struct dbus_front *dbus_front_free(struct dbus_front *f)
{
	struct dbus_post *p;
	bool all_finished = true;

	if (!f)
		return NULL;
	if (f->post_fd >= 0) {
		for (struct dreq *r = f->requests; r; r = r->next)
			dreq_cancel(r);
		/* The scheduler still runs (the manager outlives us): the final events come. */
		all_finished = wait_finished(f, 5ull * 1000000ull);
	}
	if (!all_finished)
		log_warning("D-Bus front: %u requests did not finish in time", f->n_requests);
	while (f->requests) {
		struct dreq *r = f->requests;
		if (!r->finished) {
			/* Its events could still arrive: leave it to the process's end rather than
			 * free what the scheduler may touch. */
			if (r->prev)
				r->prev->next = r->next;
			else
				f->requests = r->next;
			if (r->next)
				r->next->prev = r->prev;
			continue;
		}
		/* A finished stream still flushing: the last lines go if the pipe takes them. */
		dreq_free(r);
	}
	/* Posts still queued here belong to requests that did not finish (a stuck scheduler):
	 * they are left alone, like those requests, for the process's end. */
	pthread_mutex_lock(&f->lock);
	p = f->post_head;
	f->post_head = f->post_tail = NULL;
	pthread_mutex_unlock(&f->lock);
	(void) p;
	dbus_admin_cancel_auths(f);
	if (f->bus) {
		(void) sd_bus_flush(f->bus);
		f->bus = sd_bus_flush_close_unref(f->bus);
	}
	sd_event_source_disable_unref(f->post_source);
	if (f->post_fd >= 0)
		close(f->post_fd);
	sd_event_unref(f->event);
	pthread_mutex_destroy(&f->lock);
	free(f);
	return NULL;
}

void dbus_front_stop_accepting(struct dbus_front *f)
{
	if (f)
		f->accepting = false;
}

bool dbus_front_idle(struct dbus_front *f)
{
	bool empty;

	if (!f)
		return true;
	pthread_mutex_lock(&f->lock);
	empty = !f->post_head;
	pthread_mutex_unlock(&f->lock);
	return empty && f->n_requests == 0 && f->n_jobs == 0 && f->n_auth == 0;
}

const char *dbus_front_unique_name(struct dbus_front *f)
{
	const char *u = NULL;

	if (f && f->bus)
		(void) sd_bus_get_unique_name(f->bus, &u);
	return u;
}
