/* SPDX-License-Identifier: MIT */
/*
 * proto.c: see proto.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "policy/policy.h"
#include "proto.h"

static const char *const type_names[PROTO_TYPE_COUNT_] = {
	[PROTO_HELLO] = "hello",       [PROTO_CONFIGURE] = "configure", [PROTO_ALLOWED] = "allowed",
	[PROTO_RESOLVE] = "resolve",   [PROTO_SUBMIT] = "submit",       [PROTO_CANCEL] = "cancel",
	[PROTO_ENDPOINTS] = "endpoints", [PROTO_EVENT] = "event",       [PROTO_HEALTH] = "health",
	[PROTO_CHECK] = "check",
};

const char *proto_type_name(enum proto_type t)
{
	return (unsigned) t < PROTO_TYPE_COUNT_ ? type_names[t] : "unknown";
}

static const char *const event_names[] = {
	[REMOTE_EVENT_TEXT] = "text",
	[REMOTE_EVENT_DONE] = "done",
	[REMOTE_EVENT_ERROR] = "error",
};

/* The remote_error names remote_error_name() gives, in enum order. */
static int remote_error_from_name(const char *s, enum remote_error *ret)
{
	for (int i = REMOTE_ERR_NONE; i < REMOTE_ERR_COUNT_; i++)
		if (strcmp(remote_error_name((enum remote_error) i), s) == 0) {
			*ret = (enum remote_error) i;
			return 0;
		}
	return -EINVAL;
}

static void free_secret(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

void proto_msg_done(struct proto_msg *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_targets; i++) {
		free(m->targets[i].name);
		free(m->targets[i].url);
		free(m->targets[i].model);
		free_secret(m->targets[i].key);
	}
	free(m->targets);
	for (size_t i = 0; i < m->n_endpoints; i++)
		free(m->endpoints[i].target);
	free(m->endpoints);
	for (size_t i = 0; i < m->n_unresolved; i++) {
		free(m->unresolved[i].target);
		free(m->unresolved[i].message);
	}
	free(m->unresolved);
	free(m->target);
	free_secret((char *) m->request.prompt);
	for (size_t i = 0; m->request.messages && i < m->request.n_messages; i++) {
		free((char *) m->request.messages[i].role);
		free_secret((char *) m->request.messages[i].content);
	}
	free((void *) m->request.messages);
	for (size_t i = 0; m->request.stop && i < m->request.n_stop; i++)
		free((char *) m->request.stop[i]);
	free((void *) m->request.stop);
	free_secret((char *) m->event.text);
	free((char *) m->event.finish_reason);
	free((char *) m->event.message);
	for (size_t i = 0; i < m->n_health; i++)
		free(m->health[i].name);
	free(m->health);
	*m = (struct proto_msg){ 0 };
}

/* ---- encode ---- */

static bool str_ok(const char *s, size_t max)
{
	return s && strnlen(s, max + 1) <= max;
}

static json_object *jstr(const char *s)
{
	return json_object_new_string(s);
}

static int add(json_object *o, const char *k, json_object *v)
{
	if (!v)
		return -ENOMEM;
	return json_object_object_add(o, k, v) < 0 ? -ENOMEM : 0;
}

static int add_str(json_object *o, const char *k, const char *s, size_t max)
{
	if (!str_ok(s, max))
		return -EINVAL;
	return add(o, k, jstr(s));
}

static int arr_add(json_object *a, json_object *v)
{
	if (!v)
		return -ENOMEM;
	if (json_object_array_add(a, v) < 0) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

static int encode_request(json_object *o, const struct remote_request *r)
{
	json_object *req = json_object_new_object(), *a;
	int k;

	k = add(o, "request", req);
	if (k < 0)
		return k;
	if (!!r->prompt == !!r->messages)
		return -EINVAL;
	if (r->prompt)
		k = add_str(req, "prompt", r->prompt, PROTO_MAX_TEXT);
	else {
		if (r->n_messages == 0 || r->n_messages > PROTO_MAX_CHAT_MESSAGES)
			return -EINVAL;
		a = json_object_new_array();
		k = add(req, "messages", a);
		for (size_t i = 0; k >= 0 && i < r->n_messages; i++) {
			json_object *m = json_object_new_object();
			k = arr_add(a, m);
			if (k >= 0)
				k = add_str(m, "role",
					    r->messages[i].role ? r->messages[i].role : "user",
					    PROTO_MAX_SHORT);
			if (k >= 0)
				k = add_str(m, "content",
					    r->messages[i].content ? r->messages[i].content : "",
					    PROTO_MAX_TEXT);
		}
	}
	if (k < 0)
		return k;
	if (!isfinite(r->temperature) || !isfinite(r->top_p))
		return -EINVAL;
	k = add(req, "max_tokens", json_object_new_int64(r->max_tokens));
	if (k >= 0)
		k = add(req, "temperature", json_object_new_double(r->temperature));
	if (k >= 0)
		k = add(req, "top_p", json_object_new_double(r->top_p));
	if (k >= 0 && r->logprobs)
		k = add(req, "logprobs", json_object_new_boolean(true));
	if (k >= 0 && r->has_seed)
		/* As a string: JSON numbers lose bits above 2^53 in many parsers. */
		k = add(req, "seed", json_object_new_uint64(r->seed));
	if (k >= 0 && r->n_stop > 0) {
		if (r->n_stop > PROTO_MAX_STOP)
			return -EINVAL;
		a = json_object_new_array();
		k = add(req, "stop", a);
		for (size_t i = 0; k >= 0 && i < r->n_stop; i++)
			k = str_ok(r->stop[i], PROTO_MAX_SHORT) ? arr_add(a, jstr(r->stop[i]))
								 : -EINVAL;
	}
	return k;
}

static int encode_event(json_object *o, const struct remote_event *ev)
{
	int k = 0;

	if ((unsigned) ev->type > REMOTE_EVENT_ERROR)
		return -EINVAL;
	k = add(o, "kind", jstr(event_names[ev->type]));
	switch (ev->type) {
	case REMOTE_EVENT_TEXT:
		if (k < 0 || !ev->text || ev->text_len == 0 || ev->text_len > PROTO_MAX_TEXT ||
		    memchr(ev->text, 0, ev->text_len))
			return k < 0 ? k : -EINVAL;
		k = add(o, "text", json_object_new_string_len(ev->text, (int) ev->text_len));
		break;
	case REMOTE_EVENT_DONE:
		if (k >= 0)
			k = add_str(o, "finish_reason", ev->finish_reason ? ev->finish_reason : "stop",
				    PROTO_MAX_SHORT);
		if (k >= 0)
			k = add(o, "prompt_tokens", json_object_new_int64(ev->prompt_tokens));
		if (k >= 0)
			k = add(o, "completion_tokens", json_object_new_int64(ev->completion_tokens));
		if (k >= 0 && ev->n_logprobs > 0) {
			/* The confidence signal of a cascade or mixture: a mean log-probability
			 * is never positive. */
			if (!isfinite(ev->logprob_sum) || ev->logprob_sum > 0)
				return -EINVAL;
			k = add(o, "n_logprobs", json_object_new_int64(ev->n_logprobs));
			if (k >= 0)
				k = add(o, "logprob_sum", json_object_new_double(ev->logprob_sum));
		}
		break;
	case REMOTE_EVENT_ERROR:
		if ((unsigned) ev->error >= REMOTE_ERR_COUNT_ || ev->error == REMOTE_ERR_NONE ||
		    ev->http_status < 0 || ev->http_status > 999)
			return -EINVAL;
		if (k >= 0)
			k = add(o, "error", jstr(remote_error_name(ev->error)));
		if (k >= 0)
			k = add(o, "http_status", json_object_new_int(ev->http_status));
		if (k >= 0) {
			/* A message over the limit is cut, not refused: it only explains. */
			char msg[PROTO_MAX_SHORT + 1];
			snprintf(msg, sizeof(msg), "%s", ev->message ? ev->message : "");
			k = add(o, "message", jstr(msg));
		}
		if (k >= 0)
			k = add(o, "text_sent", json_object_new_boolean(ev->text_sent));
		break;
	}
	return k;
}

static int encode_body(json_object *o, const struct proto_msg *m)
{
	json_object *a;
	char buf[INET6_ADDRSTRLEN];
	int k = 0;

	switch (m->type) {
	case PROTO_HELLO:
		if (m->tier < 1 || m->tier > 3)
			return -EINVAL;
		k = add(o, "tier", json_object_new_int64(m->tier));
		if (k >= 0)
			k = add(o, "pid", json_object_new_int64(m->pid));
		if (k >= 0)
			k = add(o, "version", json_object_new_int64(m->version));
		return k;
	case PROTO_CONFIGURE:
		if (m->n_targets > PROTO_MAX_TARGETS)
			return -EINVAL;
		k = add(o, "generation", json_object_new_uint64(m->generation));
		a = json_object_new_array();
		if (k >= 0)
			k = add(o, "targets", a);
		else
			json_object_put(a);
		for (size_t i = 0; k >= 0 && i < m->n_targets; i++) {
			const struct proto_target *t = &m->targets[i];
			json_object *x = json_object_new_object();
			k = arr_add(a, x);
			if (k >= 0)
				k = add_str(x, "name", t->name, PROTO_MAX_NAME);
			if (k >= 0)
				k = add_str(x, "url", t->url, PROTO_MAX_URL);
			if (k >= 0 && t->model)
				k = add_str(x, "model", t->model, PROTO_MAX_NAME);
			if (k >= 0 && t->key)
				k = add_str(x, "key", t->key, PROTO_MAX_KEY);
			if (k >= 0 && (t->timeout_ms < 1 || t->timeout_ms > 3600000 || t->retries > 100))
				k = -EINVAL;
			if (k >= 0)
				k = add(x, "timeout_ms", json_object_new_int64((int64_t) t->timeout_ms));
			if (k >= 0)
				k = add(x, "retries", json_object_new_int64(t->retries));
			if (k >= 0)
				k = add(x, "user_controlled", json_object_new_boolean(t->user_controlled));
		}
		return k;
	case PROTO_ALLOWED:
		return add(o, "generation", json_object_new_uint64(m->generation));
	case PROTO_RESOLVE:
	case PROTO_CHECK:
		return 0;
	case PROTO_SUBMIT:
		if (m->id == 0 || m->tiers > POLICY_TIERS_ALL || m->class < 0 ||
		    m->class >= POLICY_CLASS_COUNT_)
			return -EINVAL;
		k = add(o, "id", json_object_new_uint64(m->id));
		if (k >= 0)
			k = add_str(o, "target", m->target, PROTO_MAX_NAME);
		if (k >= 0)
			k = add(o, "tiers", json_object_new_int64(m->tiers));
		if (k >= 0)
			k = add(o, "class", jstr(policy_class_name((enum policy_class) m->class)));
		if (k >= 0)
			k = encode_request(o, &m->request);
		return k;
	case PROTO_CANCEL:
		return m->id ? add(o, "id", json_object_new_uint64(m->id)) : -EINVAL;
	case PROTO_ENDPOINTS:
		if (m->n_endpoints > PROTO_MAX_ENDPOINTS || m->n_unresolved > PROTO_MAX_TARGETS)
			return -EINVAL;
		k = add(o, "generation", json_object_new_uint64(m->generation));
		a = json_object_new_array();
		if (k >= 0)
			k = add(o, "endpoints", a);
		else
			json_object_put(a);
		for (size_t i = 0; k >= 0 && i < m->n_endpoints; i++) {
			const struct proto_endpoint *p = &m->endpoints[i];
			json_object *x = json_object_new_object();
			if (p->family != AF_INET && p->family != AF_INET6) {
				json_object_put(x);
				return -EINVAL;
			}
			k = arr_add(a, x);
			if (k >= 0)
				k = add_str(x, "target", p->target, PROTO_MAX_NAME);
			if (k >= 0)
				k = inet_ntop(p->family, p->addr, buf, sizeof(buf)) ? 0 : -EINVAL;
			if (k >= 0)
				k = add(x, "addr", jstr(buf));
			if (k >= 0)
				k = add(x, "port", json_object_new_int(p->port));
		}
		a = json_object_new_array();
		if (k >= 0)
			k = add(o, "unresolved", a);
		else
			json_object_put(a);
		for (size_t i = 0; k >= 0 && i < m->n_unresolved; i++) {
			json_object *x = json_object_new_object();
			k = arr_add(a, x);
			if (k >= 0)
				k = add_str(x, "target", m->unresolved[i].target, PROTO_MAX_NAME);
			if (k >= 0)
				k = add_str(x, "message",
					    m->unresolved[i].message ? m->unresolved[i].message : "",
					    PROTO_MAX_SHORT);
		}
		return k;
	case PROTO_EVENT:
		if (m->id == 0)
			return -EINVAL;
		k = add(o, "id", json_object_new_uint64(m->id));
		return k < 0 ? k : encode_event(o, &m->event);
	case PROTO_HEALTH:
		if (m->n_health > PROTO_MAX_TARGETS)
			return -EINVAL;
		a = json_object_new_array();
		k = add(o, "targets", a);
		for (size_t i = 0; k >= 0 && i < m->n_health; i++) {
			json_object *x = json_object_new_object();
			k = arr_add(a, x);
			if (k >= 0)
				k = add_str(x, "name", m->health[i].name, PROTO_MAX_NAME);
			if (k >= 0)
				k = add(x, "available",
					json_object_new_boolean(m->health[i].available));
			if (k >= 0)
				k = add(x, "latency_ms",
					json_object_new_double(isfinite(m->health[i].latency_ms) &&
								       m->health[i].latency_ms >= 0
							       ? m->health[i].latency_ms
							       : 0.0));
		}
		return k;
	case PROTO_TYPE_COUNT_:
		break;
	}
	return -EINVAL;
}

int proto_encode(const struct proto_msg *m, char **ret, size_t *ret_len)
{
	json_object *o;
	const char *s;
	size_t len;
	int k;

	assert_return(m && ret, -EINVAL);
	if ((unsigned) m->type >= PROTO_TYPE_COUNT_)
		return -EINVAL;
	o = json_object_new_object();
	if (!o)
		return -ENOMEM;
	k = add(o, "type", jstr(type_names[m->type]));
	if (k >= 0)
		k = encode_body(o, m);
	if (k >= 0) {
		s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
		if (!s)
			k = -ENOMEM;
		else if (len > PROTO_MAX_MESSAGE)
			k = -E2BIG;
		else if (!(*ret = strndup(s, len)))
			k = -ENOMEM;
		else if (ret_len)
			*ret_len = len;
	}
	json_object_put(o);
	return k;
}

/* ---- decode ---- */

#define BAD(...) errmsg_set(e, -EBADMSG, __VA_ARGS__)

static json_object *get(json_object *o, const char *k)
{
	json_object *v = NULL;

	return json_object_object_get_ex(o, k, &v) ? v : NULL;
}

/* A string field: *ret malloc'd (NULL when absent and optional). */
static int get_str(json_object *o, const char *k, size_t max, bool required, char **ret,
		   struct errmsg *e)
{
	json_object *v = get(o, k);
	const char *s;
	int n;

	*ret = NULL;
	if (!v) {
		if (required)
			return BAD("field '%s' is missing", k);
		return 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return BAD("field '%s' is not a string", k);
	s = json_object_get_string(v);
	n = json_object_get_string_len(v);
	if (n < 0 || (size_t) n > max)
		return BAD("field '%s' is longer than %zu bytes", k, max);
	if (memchr(s, 0, (size_t) n))
		return BAD("field '%s' holds a NUL byte", k);
	*ret = strndup(s, (size_t) n);
	return *ret ? 0 : -ENOMEM;
}

static int get_uint(json_object *o, const char *k, uint64_t max, bool required, uint64_t *ret,
		    struct errmsg *e)
{
	json_object *v = get(o, k);

	if (!v) {
		if (required)
			return BAD("field '%s' is missing", k);
		*ret = 0;
		return 0;
	}
	if (!json_object_is_type(v, json_type_int))
		return BAD("field '%s' is not an integer", k);
	errno = 0;
	uint64_t x = json_object_get_uint64(v);
	/* json-c gives 0 with EINVAL for a negative number, UINT64_MAX for one too large. */
	if (errno != 0 || json_object_get_int64(v) < 0 || x > max)
		return BAD("field '%s' is out of range (0..%llu)", k, (unsigned long long) max);
	*ret = x;
	return 0;
}

static int get_bool(json_object *o, const char *k, bool *ret, struct errmsg *e)
{
	json_object *v = get(o, k);

	*ret = false;
	if (!v)
		return 0;
	if (!json_object_is_type(v, json_type_boolean))
		return BAD("field '%s' is not a boolean", k);
	*ret = json_object_get_boolean(v);
	return 0;
}

static int get_double(json_object *o, const char *k, double lo, double hi, double *ret,
		      struct errmsg *e)
{
	json_object *v = get(o, k);
	double d;

	*ret = 0;
	if (!v)
		return 0;
	if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
		return BAD("field '%s' is not a number", k);
	d = json_object_get_double(v);
	if (!isfinite(d) || d < lo || d > hi)
		return BAD("field '%s' is out of range", k);
	*ret = d;
	return 0;
}

static int get_array(json_object *o, const char *k, size_t max, bool required, json_object **ret,
		     size_t *ret_n, struct errmsg *e)
{
	json_object *v = get(o, k);
	size_t n;

	*ret = NULL;
	*ret_n = 0;
	if (!v) {
		if (required)
			return BAD("field '%s' is missing", k);
		return 0;
	}
	if (!json_object_is_type(v, json_type_array))
		return BAD("field '%s' is not an array", k);
	n = json_object_array_length(v);
	if (n > max)
		return BAD("field '%s' has %zu elements, more than %zu", k, n, max);
	*ret = v;
	*ret_n = n;
	return 0;
}

static json_object *elem_obj(json_object *a, size_t i)
{
	json_object *x = json_object_array_get_idx(a, i);

	return x && json_object_is_type(x, json_type_object) ? x : NULL;
}

static int decode_target(json_object *x, struct proto_target *t, struct errmsg *e)
{
	uint64_t u = 0;
	int k;

	k = get_str(x, "name", PROTO_MAX_NAME, true, &t->name, e);
	if (k >= 0 && !t->name[0])
		k = BAD("a target without a name");
	if (k >= 0)
		k = get_str(x, "url", PROTO_MAX_URL, true, &t->url, e);
	if (k >= 0 && strncmp(t->url, "http://", 7) != 0 && strncmp(t->url, "https://", 8) != 0)
		k = BAD("target '%s': URL is not http:// or https://", t->name);
	if (k >= 0)
		k = get_str(x, "model", PROTO_MAX_NAME, false, &t->model, e);
	if (k >= 0)
		k = get_str(x, "key", PROTO_MAX_KEY, false, &t->key, e);
	if (k >= 0 && t->key)
		for (const char *p = t->key; *p; p++)
			if ((unsigned char) *p < 0x20 || *p == 0x7f) {
				/* It becomes a header line: no control characters. */
				k = BAD("target '%s': the key holds control characters", t->name);
				break;
			}
	if (k >= 0)
		k = get_uint(x, "timeout_ms", 3600000, true, &t->timeout_ms, e);
	if (k >= 0 && t->timeout_ms == 0)
		k = BAD("target '%s': timeout_ms is 0", t->name);
	if (k >= 0)
		k = get_uint(x, "retries", 100, false, &u, e);
	if (k >= 0)
		t->retries = (uint32_t) u;
	if (k >= 0)
		k = get_bool(x, "user_controlled", &t->user_controlled, e);
	return k;
}

static int decode_request(json_object *o, struct remote_request *r, struct errmsg *e)
{
	json_object *req = get(o, "request"), *a;
	size_t n;
	uint64_t u = 0;
	double d;
	char *s;
	int k;

	if (!req || !json_object_is_type(req, json_type_object))
		return BAD("field 'request' is missing or not an object");
	k = get_str(req, "prompt", PROTO_MAX_TEXT, false, &s, e);
	if (k < 0)
		return k;
	r->prompt = s;
	k = get_array(req, "messages", PROTO_MAX_CHAT_MESSAGES, false, &a, &n, e);
	if (k < 0)
		return k;
	if (!!r->prompt == !!a)
		return BAD("a request needs exactly one of 'prompt' or 'messages'");
	if (a) {
		struct chat_message *msgs;
		if (n == 0)
			return BAD("'messages' is empty");
		msgs = calloc(n, sizeof(*msgs));
		if (!msgs)
			return -ENOMEM;
		r->messages = msgs;
		r->n_messages = n;
		for (size_t i = 0; i < n; i++) {
			json_object *x = elem_obj(a, i);
			if (!x)
				return BAD("messages[%zu] is not an object", i);
			k = get_str(x, "role", PROTO_MAX_SHORT, true, &s, e);
			msgs[i].role = s;
			if (k >= 0) {
				k = get_str(x, "content", PROTO_MAX_TEXT, true, &s, e);
				msgs[i].content = s;
			}
			if (k < 0)
				return k;
		}
	}
	k = get_uint(req, "max_tokens", UINT32_MAX, false, &u, e);
	if (k < 0)
		return k;
	r->max_tokens = (uint32_t) u;
	k = get_double(req, "temperature", 0, 100, &d, e);
	if (k < 0)
		return k;
	r->temperature = (float) d;
	k = get_double(req, "top_p", 0, 1, &d, e);
	if (k < 0)
		return k;
	r->top_p = (float) d;
	k = get_bool(req, "logprobs", &r->logprobs, e);
	if (k < 0)
		return k;
	if (get(req, "seed")) {
		k = get_uint(req, "seed", UINT64_MAX, true, &r->seed, e);
		if (k < 0)
			return k;
		r->has_seed = true;
	}
	k = get_array(req, "stop", PROTO_MAX_STOP, false, &a, &n, e);
	if (k < 0)
		return k;
	if (a && n > 0) {
		const char **stop = calloc(n, sizeof(*stop));
		if (!stop)
			return -ENOMEM;
		r->stop = stop;
		r->n_stop = n;
		for (size_t i = 0; i < n; i++) {
			json_object *x = json_object_array_get_idx(a, i);
			const char *v;
			int len;
			if (!x || !json_object_is_type(x, json_type_string))
				return BAD("stop[%zu] is not a string", i);
			v = json_object_get_string(x);
			len = json_object_get_string_len(x);
			if (len <= 0 || (size_t) len > PROTO_MAX_SHORT || memchr(v, 0, (size_t) len))
				return BAD("stop[%zu] is empty, too long or holds a NUL", i);
			if (!(stop[i] = strndup(v, (size_t) len)))
				return -ENOMEM;
		}
	}
	return 0;
}

static int decode_event(json_object *o, struct remote_event *ev, struct errmsg *e)
{
	json_object *v = get(o, "kind");
	const char *kind;
	char *s;
	uint64_t u = 0;
	int k;

	if (!v || !json_object_is_type(v, json_type_string))
		return BAD("field 'kind' is missing or not a string");
	kind = json_object_get_string(v);
	if (strcmp(kind, "text") == 0) {
		ev->type = REMOTE_EVENT_TEXT;
		k = get_str(o, "text", PROTO_MAX_TEXT, true, &s, e);
		if (k < 0)
			return k;
		ev->text = s;
		ev->text_len = strlen(s);
		if (ev->text_len == 0)
			return BAD("an empty TEXT event");
	} else if (strcmp(kind, "done") == 0) {
		ev->type = REMOTE_EVENT_DONE;
		k = get_str(o, "finish_reason", PROTO_MAX_SHORT, true, &s, e);
		if (k < 0)
			return k;
		ev->finish_reason = s;
		k = get_uint(o, "prompt_tokens", UINT32_MAX, false, &u, e);
		if (k < 0)
			return k;
		ev->prompt_tokens = (uint32_t) u;
		k = get_uint(o, "completion_tokens", UINT32_MAX, false, &u, e);
		if (k < 0)
			return k;
		ev->completion_tokens = (uint32_t) u;
		k = get_uint(o, "n_logprobs", UINT32_MAX, false, &u, e);
		if (k < 0)
			return k;
		ev->n_logprobs = (uint32_t) u;
		/* Bounded by what n tokens can sum to (a log-probability below -1e4 is as good as
		 * zero probability): an untrusted worker cannot push a mean out of range. */
		k = get_double(o, "logprob_sum", -1e4 * (double) MAX(ev->n_logprobs, 1u), 0,
			       &ev->logprob_sum, e);
		if (k < 0)
			return k;
		if (ev->n_logprobs == 0 && ev->logprob_sum != 0)
			return BAD("field 'logprob_sum' without 'n_logprobs'");
	} else if (strcmp(kind, "error") == 0) {
		ev->type = REMOTE_EVENT_ERROR;
		k = get_str(o, "error", 64, true, &s, e);
		if (k < 0)
			return k;
		k = remote_error_from_name(s, &ev->error);
		if (k < 0 || ev->error == REMOTE_ERR_NONE) {
			k = BAD("unknown error kind '%s'", s);
			free(s);
			return k;
		}
		free(s);
		k = get_uint(o, "http_status", 999, false, &u, e);
		if (k < 0)
			return k;
		ev->http_status = (int) u;
		k = get_str(o, "message", PROTO_MAX_SHORT, false, &s, e);
		if (k < 0)
			return k;
		ev->message = s;
		k = get_bool(o, "text_sent", &ev->text_sent, e);
		if (k < 0)
			return k;
	} else
		return BAD("unknown event kind '%.32s'", kind);
	return 0;
}

static int parse_addr(const char *s, int *ret_family, uint8_t addr[16])
{
	memset(addr, 0, 16);
	if (inet_pton(AF_INET, s, addr) == 1) {
		*ret_family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, s, addr) == 1) {
		*ret_family = AF_INET6;
		return 0;
	}
	return -EINVAL;
}

static int decode_body(json_object *o, struct proto_msg *m, struct errmsg *e)
{
	json_object *a;
	size_t n;
	uint64_t u = 0;
	char *s;
	int k = 0;

	switch (m->type) {
	case PROTO_HELLO:
		k = get_uint(o, "tier", 3, true, &u, e);
		if (k >= 0 && u < 1)
			k = BAD("tier %llu is not a remote tier", (unsigned long long) u);
		m->tier = (uint32_t) u;
		if (k >= 0)
			k = get_uint(o, "pid", INT32_MAX, false, &u, e);
		m->pid = (uint32_t) u;
		if (k >= 0)
			k = get_uint(o, "version", UINT32_MAX, true, &u, e);
		m->version = (uint32_t) u;
		return k;
	case PROTO_CONFIGURE:
		k = get_uint(o, "generation", UINT64_MAX, true, &m->generation, e);
		if (k >= 0)
			k = get_array(o, "targets", PROTO_MAX_TARGETS, true, &a, &n, e);
		if (k < 0)
			return k;
		m->targets = calloc(MAX(n, (size_t) 1), sizeof(*m->targets));
		if (!m->targets)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			json_object *x = elem_obj(a, i);
			m->n_targets = i + 1;
			if (!x)
				return BAD("targets[%zu] is not an object", i);
			k = decode_target(x, &m->targets[i], e);
			if (k < 0)
				return k;
			for (size_t j = 0; j < i; j++)
				if (strcmp(m->targets[j].name, m->targets[i].name) == 0)
					return BAD("target '%s' appears twice", m->targets[i].name);
		}
		return 0;
	case PROTO_ALLOWED:
		return get_uint(o, "generation", UINT64_MAX, true, &m->generation, e);
	case PROTO_RESOLVE:
	case PROTO_CHECK:
		return 0;
	case PROTO_SUBMIT:
		k = get_uint(o, "id", UINT64_MAX, true, &m->id, e);
		if (k >= 0 && m->id == 0)
			k = BAD("id 0");
		if (k >= 0)
			k = get_str(o, "target", PROTO_MAX_NAME, true, &m->target, e);
		if (k >= 0)
			k = get_uint(o, "tiers", POLICY_TIERS_ALL, true, &u, e);
		m->tiers = (uint32_t) u;
		if (k >= 0)
			k = get_str(o, "class", 16, true, &s, e);
		if (k >= 0) {
			enum policy_class c;
			if (policy_class_from_name(s, &c) < 0)
				k = BAD("unknown class '%s'", s);
			m->class = (int) c;
			free(s);
		}
		if (k >= 0)
			k = decode_request(o, &m->request, e);
		return k;
	case PROTO_CANCEL:
		k = get_uint(o, "id", UINT64_MAX, true, &m->id, e);
		return k >= 0 && m->id == 0 ? BAD("id 0") : k;
	case PROTO_ENDPOINTS:
		k = get_uint(o, "generation", UINT64_MAX, true, &m->generation, e);
		if (k >= 0)
			k = get_array(o, "endpoints", PROTO_MAX_ENDPOINTS, true, &a, &n, e);
		if (k < 0)
			return k;
		m->endpoints = calloc(MAX(n, (size_t) 1), sizeof(*m->endpoints));
		if (!m->endpoints)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			json_object *x = elem_obj(a, i);
			struct proto_endpoint *p = &m->endpoints[i];
			m->n_endpoints = i + 1;
			if (!x)
				return BAD("endpoints[%zu] is not an object", i);
			k = get_str(x, "target", PROTO_MAX_NAME, true, &p->target, e);
			if (k >= 0)
				k = get_str(x, "addr", INET6_ADDRSTRLEN, true, &s, e);
			if (k < 0)
				return k;
			k = parse_addr(s, &p->family, p->addr);
			free(s);
			if (k < 0)
				return BAD("endpoints[%zu]: the address is not numeric IPv4 or IPv6", i);
			k = get_uint(x, "port", 65535, true, &u, e);
			if (k < 0)
				return k;
			if (u == 0)
				return BAD("endpoints[%zu]: port 0", i);
			p->port = (uint16_t) u;
		}
		k = get_array(o, "unresolved", PROTO_MAX_TARGETS, false, &a, &n, e);
		if (k < 0 || !a)
			return k;
		m->unresolved = calloc(MAX(n, (size_t) 1), sizeof(*m->unresolved));
		if (!m->unresolved)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			json_object *x = elem_obj(a, i);
			m->n_unresolved = i + 1;
			if (!x)
				return BAD("unresolved[%zu] is not an object", i);
			k = get_str(x, "target", PROTO_MAX_NAME, true, &m->unresolved[i].target, e);
			if (k >= 0)
				k = get_str(x, "message", PROTO_MAX_SHORT, false,
					    &m->unresolved[i].message, e);
			if (k < 0)
				return k;
		}
		return 0;
	case PROTO_EVENT:
		k = get_uint(o, "id", UINT64_MAX, true, &m->id, e);
		if (k >= 0 && m->id == 0)
			k = BAD("id 0");
		if (k >= 0)
			k = decode_event(o, &m->event, e);
		m->event.id = m->id;
		return k;
	case PROTO_HEALTH:
		k = get_array(o, "targets", PROTO_MAX_TARGETS, true, &a, &n, e);
		if (k < 0)
			return k;
		m->health = calloc(MAX(n, (size_t) 1), sizeof(*m->health));
		if (!m->health)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			json_object *x = elem_obj(a, i);
			m->n_health = i + 1;
			if (!x)
				return BAD("targets[%zu] is not an object", i);
			k = get_str(x, "name", PROTO_MAX_NAME, true, &m->health[i].name, e);
			if (k >= 0)
				k = get_bool(x, "available", &m->health[i].available, e);
			if (k >= 0)
				k = get_double(x, "latency_ms", 0, 1e9, &m->health[i].latency_ms, e);
			if (k < 0)
				return k;
		}
		return 0;
	case PROTO_TYPE_COUNT_:
		break;
	}
	return BAD("unknown message type");
}

int proto_decode(const char *text, size_t len, struct proto_msg *ret, struct errmsg *e)
{
	struct json_tokener *tok;
	json_object *o, *v;
	struct proto_msg m = { 0 };
	const char *t;
	int k;

	assert_return(text && ret, -EINVAL);
	*ret = (struct proto_msg){ 0 };
	if (len == 0 || len > PROTO_MAX_MESSAGE)
		return BAD("a message of %zu bytes", len);
	tok = json_tokener_new_ex(32); /* our messages nest 4 deep */
	if (!tok)
		return -ENOMEM;
	o = json_tokener_parse_ex(tok, text, (int) len);
	if (o && json_tokener_get_parse_end(tok) != len) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	if (!o)
		return BAD("the message is not one JSON value");
	if (!json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return BAD("the message is not a JSON object");
	}
	v = get(o, "type");
	if (!v || !json_object_is_type(v, json_type_string)) {
		json_object_put(o);
		return BAD("the message has no 'type'");
	}
	t = json_object_get_string(v);
	m.type = PROTO_TYPE_COUNT_;
	for (int i = 0; i < PROTO_TYPE_COUNT_; i++)
		if (strcmp(t, type_names[i]) == 0)
			m.type = (enum proto_type) i;
	if (m.type == PROTO_TYPE_COUNT_) {
		k = BAD("unknown message type '%.32s'", t);
		json_object_put(o);
		return k;
	}
	k = decode_body(o, &m, e);
	json_object_put(o);
	if (k < 0) {
		errmsg_prefix(e, k, "%s", type_names[m.type]);
		proto_msg_done(&m);
		return k;
	}
	*ret = m;
	return 0;
}

/* ---- the connection ---- */

void proto_conn_init(struct proto_conn *c, int fd)
{
	*c = (struct proto_conn){ .fd = fd };
	pthread_mutex_init(&c->send_lock, NULL);
}

void proto_conn_done(struct proto_conn *c)
{
	if (!c)
		return;
	if (c->buf) {
		explicit_bzero(c->buf, c->cap_buf);
		free(c->buf);
	}
	pthread_mutex_destroy(&c->send_lock);
	c->buf = NULL;
	c->n_buf = c->cap_buf = 0;
}

static int send_frag(int fd, uint8_t head, const char *p, size_t n)
{
	struct iovec iov[2] = { { .iov_base = &head, .iov_len = 1 },
				{ .iov_base = (void *) p, .iov_len = n } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = n ? 2 : 1 };

	for (;;) {
		ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (k >= 0)
			return 0;
		if (errno == EINTR)
			continue;
		return -errno;
	}
}

int proto_conn_send(struct proto_conn *c, const char *text, size_t len)
{
	int k = 0;

	assert_return(c && text, -EINVAL);
	if (len == 0 || len > PROTO_MAX_MESSAGE)
		return -EINVAL;
	pthread_mutex_lock(&c->send_lock);
	for (size_t off = 0; off < len && k >= 0;) {
		size_t n = MIN((size_t) PROTO_FRAGMENT, len - off);
		k = send_frag(c->fd, off + n < len ? PROTO_FRAG_MORE : PROTO_FRAG_LAST, text + off,
			      n);
		off += n;
	}
	pthread_mutex_unlock(&c->send_lock);
	return k;
}

int proto_conn_send_msg(struct proto_conn *c, const struct proto_msg *m)
{
	_cleanup_free_ char *s = NULL;
	size_t n = 0;
	int k;

	k = proto_encode(m, &s, &n);
	if (k < 0)
		return k;
	k = proto_conn_send(c, s, n);
	/* Requests carry prompts: leave no copy behind. */
	explicit_bzero(s, n);
	return k;
}

int proto_conn_recv(struct proto_conn *c, const char **ret_text, size_t *ret_len)
{
	ssize_t k;
	uint8_t head;

	assert_return(c && ret_text && ret_len, -EINVAL);
	if (c->cap_buf < c->n_buf + PROTO_FRAGMENT + 2) {
		size_t cap = MAX(c->cap_buf * 2, c->n_buf + PROTO_FRAGMENT + 2);
		char *b = malloc(cap);
		if (!b)
			return -ENOMEM;
		if (c->buf) {
			memcpy(b, c->buf, c->n_buf);
			explicit_bzero(c->buf, c->cap_buf);
			free(c->buf);
		}
		c->buf = b;
		c->cap_buf = cap;
	}
	{
		struct iovec iov[2] = { { .iov_base = &head, .iov_len = 1 },
					{ .iov_base = c->buf + c->n_buf,
					  .iov_len = PROTO_FRAGMENT + 1 } };
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
		do
			k = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
		while (k < 0 && errno == EINTR);
		if (k < 0)
			return errno == EAGAIN ? 0 : -errno;
		if (k == 0)
			return -EPIPE;
		if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
			return -EBADMSG;
	}
	if (k < 1 || (head != PROTO_FRAG_MORE && head != PROTO_FRAG_LAST))
		return -EBADMSG;
	if (k - 1 > (ssize_t) PROTO_FRAGMENT || (k == 1 && head == PROTO_FRAG_MORE))
		return -EBADMSG;
	c->n_buf += (size_t) (k - 1);
	if (c->n_buf > PROTO_MAX_MESSAGE)
		return -EMSGSIZE;
	if (head == PROTO_FRAG_MORE)
		return 0;
	c->buf[c->n_buf] = 0;
	*ret_text = c->buf;
	*ret_len = c->n_buf;
	/* The next call starts a new message over this one. */
	c->n_buf = 0;
	return 1;
}
