/* SPDX-License-Identifier: MIT */
/*
 * http-openai.c: OpenAI request parsing and response building (see http-openai.h).
 * JSON is read and written with json-c; nothing here touches the network or the engine.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "basic/utf8-prefix.h"
#include "front/http-openai.h"
#include "grammar/grammar.h"
#include "grammar/schema.h"

DEFINE_CLEANUP_FUNC(struct json_object *, json_object_put, NULL)
DEFINE_CLEANUP_FUNC(struct json_tokener *, json_tokener_free, NULL)

int openai_error_set(struct openai_error *err, int r, int status, const char *code,
		     const char *param, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return r;
	err->status = status;
	err->type = openai_error_type(status);
	err->code = code;
	snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return r;
}

const char *openai_error_type(int status)
{
	switch (status) {
	case 400:
	case 404:
	case 413:
		return "invalid_request_error";
	case 401:
		return "authentication_error";
	case 403:
		return "permission_error";
	case 429:
		return "rate_limit_error";
	case 503:
		return "service_unavailable_error";
	default:
		return status >= 500 ? "server_error" : "invalid_request_error";
	}
}

bool utf8_is_valid(const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *) str;
	size_t i = 0;

	while (i < len) {
		unsigned c = s[i];
		size_t n;
		uint32_t cp, min;

		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xe0) == 0xc0) {
			n = 1, cp = c & 0x1f, min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			n = 2, cp = c & 0x0f, min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			n = 3, cp = c & 0x07, min = 0x10000;
		} else {
			return false;
		}
		if (len - i <= n)
			return false;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}

/* ---- parsing helpers: each takes the field's name for the error message ---- */

static const char *json_type_word(struct json_object *o)
{
	switch (json_object_get_type(o)) {
	case json_type_null:
		return "null";
	case json_type_boolean:
		return "a boolean";
	case json_type_double:
	case json_type_int:
		return "a number";
	case json_type_object:
		return "an object";
	case json_type_array:
		return "an array";
	case json_type_string:
		return "a string";
	}
	return "something else";
}

/* The member `key` of obj, or NULL when absent or null (null means "not given"). */
static struct json_object *get_field(struct json_object *obj, const char *key)
{
	struct json_object *v = NULL;

	if (!json_object_object_get_ex(obj, key, &v))
		return NULL;
	if (json_object_get_type(v) == json_type_null)
		return NULL;
	return v;
}

static int get_bool(struct json_object *v, const char *name, bool *ret, struct openai_error *err)
{
	if (json_object_get_type(v) != json_type_boolean)
		return openai_error_set(err, -EINVAL, 400, NULL, name,
					"'%s' must be a boolean, not %s", name, json_type_word(v));
	*ret = json_object_get_boolean(v);
	return 0;
}

/* An integer in [lo, hi]. Numbers with a fraction are refused; 16.0 is accepted (some clients
 * only have doubles). */
static int get_int(struct json_object *v, const char *name, int64_t lo, int64_t hi, int64_t *ret,
		   struct openai_error *err)
{
	int64_t x;

	if (json_object_get_type(v) == json_type_int) {
		errno = 0;
		x = json_object_get_int64(v);
		/* json-c saturates out-of-range integers (and keeps big unsigned ones as uint64) */
		if (x == INT64_MAX && json_object_get_uint64(v) > (uint64_t) INT64_MAX)
			return openai_error_set(
			    err, -EINVAL, 400, NULL, name,
			    "'%s' must be an integer in [%" PRId64 ", %" PRId64 "]", name, lo, hi);
	} else if (json_object_get_type(v) == json_type_double) {
		double d = json_object_get_double(v);

		if (!isfinite(d) || d != floor(d) || d < -9.2e18 || d > 9.2e18)
			return openai_error_set(err, -EINVAL, 400, NULL, name,
						"'%s' must be an integer, not %g", name, d);
		x = (int64_t) d;
	} else {
		return openai_error_set(err, -EINVAL, 400, NULL, name,
					"'%s' must be an integer, not %s", name, json_type_word(v));
	}
	if (x < lo || x > hi)
		return openai_error_set(err, -EINVAL, 400, NULL, name,
					"'%s' must be an integer in [%" PRId64 ", %" PRId64
					"], not %" PRId64,
					name, lo, hi, x);
	*ret = x;
	return 0;
}

static int get_number(struct json_object *v, const char *name, double lo, double hi, float *ret,
		      struct openai_error *err)
{
	double d;

	if (json_object_get_type(v) != json_type_int && json_object_get_type(v) != json_type_double)
		return openai_error_set(err, -EINVAL, 400, NULL, name,
					"'%s' must be a number, not %s", name, json_type_word(v));
	d = json_object_get_double(v);
	if (!isfinite(d) || d < lo || d > hi)
		return openai_error_set(err, -EINVAL, 400, NULL, name,
					"'%s' must be a number in [%g, %g], not %g", name, lo, hi,
					d);
	*ret = (float) d;
	return 0;
}

/* A copy of a JSON string that must be valid UTF-8 without NUL bytes (the engine's text
 * interfaces are C strings). */
static int get_string(struct json_object *v, const char *name, size_t max_len, char **ret,
		      size_t *ret_len, struct openai_error *err)
{
	const char *s;
	size_t len;
	char *copy;

	if (json_object_get_type(v) != json_type_string)
		return openai_error_set(err, -EINVAL, 400, NULL, name,
					"'%s' must be a string, not %s", name, json_type_word(v));
	s = json_object_get_string(v);
	len = (size_t) json_object_get_string_len(v);
	if (max_len && len > max_len)
		return openai_error_set(err, -EINVAL, 400, NULL, name,
					"'%s' is too long (%zu bytes; at most %zu)", name, len,
					max_len);
	if (memchr(s, '\0', len))
		return openai_error_set(err, -EINVAL, 400, NULL, name,
					"'%s' contains a NUL character", name);
	if (!utf8_is_valid(s, len))
		return openai_error_set(err, -EINVAL, 400, "invalid_utf8", name,
					"'%s' is not valid UTF-8", name);
	copy = strndup(s, len);
	if (!copy)
		return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
	*ret = copy;
	if (ret_len)
		*ret_len = len;
	return 0;
}

/* ---- the fields ---- */

static int parse_stop(struct json_object *v, struct openai_request *r, struct openai_error *err)
{
	size_t n;
	int k;

	if (json_object_get_type(v) == json_type_string) {
		r->stop = calloc(1, sizeof(char *));
		if (!r->stop)
			return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
		k = get_string(v, "stop", OPENAI_MAX_STOP_BYTES, &r->stop[0], &n, err);
		if (k < 0)
			return k;
		if (n == 0) {
			free(r->stop[0]);
			r->stop[0] = NULL;
			return 0; /* "" stops nothing: as if absent */
		}
		r->n_stop = 1;
		return 0;
	}
	if (json_object_get_type(v) != json_type_array)
		return openai_error_set(err, -EINVAL, 400, NULL, "stop",
					"'stop' must be a string or an array of strings, not %s",
					json_type_word(v));
	n = json_object_array_length(v);
	if (n > OPENAI_MAX_STOP)
		return openai_error_set(err, -EINVAL, 400, NULL, "stop",
					"'stop' has %zu entries; at most %d are supported", n,
					OPENAI_MAX_STOP);
	r->stop = calloc(n ? n : 1, sizeof(char *));
	if (!r->stop)
		return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct json_object *s = json_object_array_get_idx(v, i);
		size_t len;
		char *str;

		k = get_string(s, "stop", OPENAI_MAX_STOP_BYTES, &str, &len, err);
		if (k < 0)
			return k;
		if (len == 0) {
			free(str);
			continue;
		}
		r->stop[r->n_stop++] = str;
	}
	return 0;
}

static int parse_lora(struct json_object *v, struct openai_request *r, struct openai_error *err)
{
	size_t n;
	int k;

	if (json_object_get_type(v) != json_type_array)
		return openai_error_set(err, -EINVAL, 400, NULL, "lora",
					"'lora' must be an array of {\"name\", \"scale\"}, not %s",
					json_type_word(v));
	n = json_object_array_length(v);
	if (n > OPENAI_MAX_LORAS)
		return openai_error_set(err, -EINVAL, 400, NULL, "lora",
					"'lora' has %zu entries; at most %d are supported", n,
					OPENAI_MAX_LORAS);
	r->loras = calloc(n ? n : 1, sizeof(*r->loras));
	if (!r->loras)
		return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(v, i), *f;
		struct openai_lora *l = &r->loras[i];

		if (json_object_get_type(e) != json_type_object)
			return openai_error_set(err, -EINVAL, 400, NULL, "lora",
						"'lora[%zu]' must be an object, not %s", i,
						json_type_word(e));
		f = get_field(e, "name");
		if (!f)
			return openai_error_set(err, -EINVAL, 400, NULL, "lora.name",
						"'lora[%zu]' lacks 'name'", i);
		k = get_string(f, "lora.name", 256, &l->name, NULL, err);
		if (k < 0)
			return k;
		r->n_loras++;
		l->scale = 1.0f;
		f = get_field(e, "scale");
		if (f) {
			k = get_number(f, "lora.scale", -100, 100, &l->scale, err);
			if (k < 0)
				return k;
		}
		for (size_t j = 0; j < i; j++)
			if (strcmp(r->loras[j].name, l->name) == 0)
				return openai_error_set(err, -EINVAL, 400, NULL, "lora",
							"'lora' names adapter '%s' twice", l->name);
	}
	return 0;
}

/* A completions prompt: a string, or an array holding exactly one string (batches of prompts
 * and token-id prompts are not supported: one request, one choice). */
static int parse_prompt(struct json_object *v, struct openai_request *r, struct openai_error *err)
{
	if (json_object_get_type(v) == json_type_array) {
		if (json_object_array_length(v) != 1)
			return openai_error_set(err, -EINVAL, 400, NULL, "prompt",
						"'prompt' as an array must hold exactly one string "
						"(it holds %zu entries; batched prompts are not "
						"supported)",
						json_object_array_length(v));
		v = json_object_array_get_idx(v, 0);
		if (json_object_get_type(v) != json_type_string)
			return openai_error_set(err, -EINVAL, 400, NULL, "prompt",
						"'prompt' must be a string or [string], not [%s] "
						"(token-id prompts are not supported)",
						json_type_word(v));
	}
	return get_string(v, "prompt", 0, &r->prompt, &r->prompt_len, err);
}

/* A message's content: a string, or an array of {"type":"text","text":...} parts, joined. */
static int parse_content(struct json_object *v, size_t i, char **ret, struct openai_error *err)
{
	size_t n, total = 0;
	char *out;

	if (!v) {
		/* an assistant turn with only tool calls has null content; we have no tools */
		*ret = strdup("");
		return *ret ? 0 : openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
	}
	if (json_object_get_type(v) == json_type_string)
		return get_string(v, "messages.content", 0, ret, NULL, err);
	if (json_object_get_type(v) != json_type_array)
		return openai_error_set(err, -EINVAL, 400, NULL, "messages.content",
					"'messages[%zu].content' must be a string or an array of "
					"text parts, not %s",
					i, json_type_word(v));
	n = json_object_array_length(v);
	for (size_t j = 0; j < n; j++) {
		struct json_object *part = json_object_array_get_idx(v, j), *t, *text;

		if (json_object_get_type(part) != json_type_object)
			return openai_error_set(err, -EINVAL, 400, NULL, "messages.content",
						"'messages[%zu].content[%zu]' must be an object", i,
						j);
		t = get_field(part, "type");
		if (!t || json_object_get_type(t) != json_type_string ||
		    strcmp(json_object_get_string(t), "text") != 0)
			return openai_error_set(err, -EINVAL, 400, NULL, "messages.content",
						"'messages[%zu].content[%zu]': only parts of type "
						"\"text\" are supported",
						i, j);
		text = get_field(part, "text");
		if (!text || json_object_get_type(text) != json_type_string)
			return openai_error_set(
			    err, -EINVAL, 400, NULL, "messages.content",
			    "'messages[%zu].content[%zu].text' must be a string", i, j);
		total += (size_t) json_object_get_string_len(text);
	}
	out = malloc(total + 1);
	if (!out)
		return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
	total = 0;
	for (size_t j = 0; j < n; j++) {
		struct json_object *text = get_field(json_object_array_get_idx(v, j), "text");
		size_t len = (size_t) json_object_get_string_len(text);

		memcpy(out + total, json_object_get_string(text), len);
		total += len;
	}
	out[total] = '\0';
	if (memchr(out, '\0', total)) {
		free(out);
		return openai_error_set(err, -EINVAL, 400, NULL, "messages.content",
					"'messages[%zu].content' contains a NUL character", i);
	}
	if (!utf8_is_valid(out, total)) {
		free(out);
		return openai_error_set(err, -EINVAL, 400, "invalid_utf8", "messages.content",
					"'messages[%zu].content' is not valid UTF-8", i);
	}
	*ret = out;
	return 0;
}

/* An assistant message's "tool_calls": [{"id", "type": "function", "function": {"name",
 * "arguments"}}]. */
static int parse_tool_calls(struct json_object *v, size_t i, struct openai_message *msg,
			    struct openai_error *err)
{
	size_t n;
	int k;

	if (json_object_get_type(v) != json_type_array)
		return openai_error_set(err, -EINVAL, 400, NULL, "messages.tool_calls",
					"'messages[%zu].tool_calls' must be an array", i);
	n = json_object_array_length(v);
	if (n > OPENAI_MAX_TOOL_CALLS)
		return openai_error_set(err, -EINVAL, 400, NULL, "messages.tool_calls",
					"'messages[%zu].tool_calls' has %zu calls (at most %d)", i, n,
					OPENAI_MAX_TOOL_CALLS);
	msg->tool_calls = calloc(n ? n : 1, sizeof(*msg->tool_calls));
	if (!msg->tool_calls)
		return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
	for (size_t j = 0; j < n; j++) {
		struct json_object *c = json_object_array_get_idx(v, j), *fn, *args;
		struct openai_tool_call *t = &msg->tool_calls[j];

		msg->n_tool_calls++;
		fn = get_field(c, "function");
		if (json_object_get_type(c) != json_type_object || !fn ||
		    json_object_get_type(fn) != json_type_object)
			return openai_error_set(err, -EINVAL, 400, NULL, "messages.tool_calls",
						"'messages[%zu].tool_calls[%zu]' must be an object with "
						"a \"function\" object", i, j);
		k = get_string(get_field(fn, "name"), "messages.tool_calls.function.name", 256,
			       &t->name, NULL, err);
		if (k >= 0 && get_field(c, "id"))
			k = get_string(get_field(c, "id"), "messages.tool_calls.id", 256, &t->id, NULL,
				       err);
		if (k < 0)
			return k;
		args = get_field(fn, "arguments");
		if (args && json_object_get_type(args) == json_type_string)
			k = get_string(args, "messages.tool_calls.function.arguments", 0,
				       &t->arguments, NULL, err);
		else
			t->arguments = strdup(args ? json_object_to_json_string_ext(
							 args, JSON_C_TO_STRING_PLAIN)
						   : "{}");
		if (k < 0)
			return k;
		if (!t->arguments || (!t->id && !(t->id = strdup(""))))
			return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
		if (!utf8_is_valid(t->arguments, strlen(t->arguments)))
			return openai_error_set(err, -EINVAL, 400, "invalid_utf8",
						"messages.tool_calls.function.arguments",
						"'messages[%zu].tool_calls[%zu].function.arguments' is "
						"not valid UTF-8", i, j);
	}
	return 0;
}

static int parse_messages(struct json_object *v, struct openai_request *r, struct openai_error *err)
{
	size_t n;
	int k;

	if (json_object_get_type(v) != json_type_array)
		return openai_error_set(err, -EINVAL, 400, NULL, "messages",
					"'messages' must be an array, not %s", json_type_word(v));
	n = json_object_array_length(v);
	if (n == 0)
		return openai_error_set(err, -EINVAL, 400, NULL, "messages",
					"'messages' must not be empty");
	if (n > OPENAI_MAX_MESSAGES)
		return openai_error_set(err, -EINVAL, 400, NULL, "messages",
					"'messages' has %zu entries; at most %d are supported", n,
					OPENAI_MAX_MESSAGES);
	r->messages = calloc(n, sizeof(*r->messages));
	if (!r->messages)
		return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct json_object *m = json_object_array_get_idx(v, i), *role;
		struct openai_message *msg = &r->messages[i];
		const char *rs;

		if (json_object_get_type(m) != json_type_object)
			return openai_error_set(err, -EINVAL, 400, NULL, "messages",
						"'messages[%zu]' must be an object, not %s", i,
						json_type_word(m));
		role = get_field(m, "role");
		if (!role || json_object_get_type(role) != json_type_string)
			return openai_error_set(err, -EINVAL, 400, NULL, "messages.role",
						"'messages[%zu].role' must be a string", i);
		rs = json_object_get_string(role);
		if (strcmp(rs, "developer") == 0)
			rs = "system"; /* OpenAI's newer name for the system role */
		if (strcmp(rs, "system") != 0 && strcmp(rs, "user") != 0 &&
		    strcmp(rs, "assistant") != 0 && strcmp(rs, "tool") != 0)
			return openai_error_set(
			    err, -EINVAL, 400, NULL, "messages.role",
			    "'messages[%zu].role' must be \"system\", \"user\", \"assistant\" "
			    "or \"tool\"",
			    i);
		msg->role = strdup(rs);
		if (!msg->role)
			return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
		r->n_messages++;
		if (!get_field(m, "content") && strcmp(rs, "assistant") != 0)
			return openai_error_set(err, -EINVAL, 400, NULL, "messages.content",
						"'messages[%zu].content' is required", i);
		k = parse_content(get_field(m, "content"), i, &msg->content, err);
		if (k < 0)
			return k;
		if (strcmp(rs, "assistant") == 0 && get_field(m, "tool_calls")) {
			k = parse_tool_calls(get_field(m, "tool_calls"), i, msg, err);
			if (k < 0)
				return k;
		}
		if (strcmp(rs, "tool") == 0 && get_field(m, "tool_call_id")) {
			k = get_string(get_field(m, "tool_call_id"), "messages.tool_call_id", 256,
				       &msg->tool_call_id, NULL, err);
			if (k < 0)
				return k;
		}
	}
	return 0;
}

/* Fields with which we would silently return something else than asked: refuse them unless
 * they hold the default. */
static int check_unsupported(struct json_object *root, const struct openai_request *r,
			     struct openai_error *err)
{
	struct json_object *v;
	int64_t x;
	float f;
	int k;

	v = get_field(root, "n");
	if (v) {
		k = get_int(v, "n", 1, 1, &x, err);
		if (k < 0)
			return openai_error_set(err, k, 400, NULL, "n", "only n = 1 is supported");
	}
	v = get_field(root, "best_of");
	if (v) {
		k = get_int(v, "best_of", 1, 1, &x, err);
		if (k < 0)
			return openai_error_set(err, k, 400, NULL, "best_of",
						"only best_of = 1 is supported");
	}
	v = get_field(root, "echo");
	if (v && (json_object_get_type(v) != json_type_boolean || json_object_get_boolean(v)))
		return openai_error_set(err, -EINVAL, 400, NULL, "echo", "'echo' is not supported");
	v = get_field(root, "suffix");
	if (v)
		return openai_error_set(err, -EINVAL, 400, NULL, "suffix",
					"'suffix' is not supported");
	for (size_t i = 0; i < 2; i++) {
		const char *name = i == 0 ? "presence_penalty" : "frequency_penalty";

		v = get_field(root, name);
		if (!v)
			continue;
		k = get_number(v, name, -2, 2, &f, err);
		if (k < 0)
			return k;
		if (f != 0)
			return openai_error_set(err, -EINVAL, 400, NULL, name,
						"'%s' is not supported (only 0)", name);
	}
	/* vLLM's sampling extensions: only their neutral values (the pipeline has no such knobs) */
	v = get_field(root, "top_k");
	if (v) {
		k = get_int(v, "top_k", -1, INT32_MAX, &x, err);
		if (k < 0)
			return k;
		if (x > 0)
			return openai_error_set(err, -EINVAL, 400, NULL, "top_k",
						"'top_k' is not supported (only -1 or 0: off)");
	}
	v = get_field(root, "min_p");
	if (v) {
		k = get_number(v, "min_p", 0, 1, &f, err);
		if (k < 0)
			return k;
		if (f != 0)
			return openai_error_set(err, -EINVAL, 400, NULL, "min_p",
						"'min_p' is not supported (only 0: off)");
	}
	v = get_field(root, "repetition_penalty");
	if (v) {
		k = get_number(v, "repetition_penalty", 0, 100, &f, err);
		if (k < 0)
			return k;
		if (f != 1)
			return openai_error_set(
			    err, -EINVAL, 400, NULL, "repetition_penalty",
			    "'repetition_penalty' is not supported (only 1: off)");
	}
	v = get_field(root, "logit_bias");
	if (v && (json_object_get_type(v) != json_type_object || json_object_object_length(v) > 0))
		return openai_error_set(err, -EINVAL, 400, NULL, "logit_bias",
					"'logit_bias' is not supported");
	return 0;
}

/* response_format: text, json_object or json_schema → r->grammar (GBNF). */
static int parse_response_format(struct json_object *root, struct openai_request *r,
				 struct openai_error *err)
{
	struct json_object *v = get_field(root, "response_format"), *t, *js, *schema;
	struct errmsg e = { { 0 } };
	const char *type;
	size_t len;
	int k;

	if (!v)
		return 0;
	t = get_field(v, "type");
	if (json_object_get_type(v) != json_type_object || !t ||
	    json_object_get_type(t) != json_type_string)
		return openai_error_set(err, -EINVAL, 400, NULL, "response_format",
					"'response_format' must be an object with a \"type\"");
	type = json_object_get_string(t);
	if (strcmp(type, "text") == 0)
		return 0;
	if (r->grammar)
		return openai_error_set(err, -EINVAL, 400, NULL, "response_format",
					"give 'response_format' or 'molly.grammar', not both");
	if (strcmp(type, "json_object") == 0) {
		k = schema_json_object_gbnf(&r->grammar, &len);
		return k < 0 ? openai_error_set(err, k, 500, NULL, NULL, "out of memory") : 0;
	}
	if (strcmp(type, "json_schema") != 0)
		return openai_error_set(err, -EINVAL, 400, NULL, "response_format.type",
					"'response_format.type' must be \"text\", \"json_object\" "
					"or \"json_schema\", not \"%.*s\"", utf8_prefix(type, 32), type);
	js = get_field(v, "json_schema");
	if (!js || json_object_get_type(js) != json_type_object)
		return openai_error_set(err, -EINVAL, 400, NULL, "response_format.json_schema",
					"'response_format.json_schema' must be an object with "
					"\"name\" and \"schema\"");
	schema = get_field(js, "schema");
	if (!schema)
		return openai_error_set(err, -EINVAL, 400, NULL, "response_format.json_schema.schema",
					"'response_format.json_schema.schema' is required");
	/* "strict" changes nothing here: the output is always held to the schema */
	k = schema_to_gbnf_cached(schema, &r->grammar, &len, &e);
	if (k == -ENOMEM)
		return openai_error_set(err, k, 500, NULL, NULL, "out of memory");
	if (k < 0)
		return openai_error_set(err, -EINVAL, 400, "invalid_schema",
					"response_format.json_schema.schema",
					"response_format.json_schema.schema: %s", e.text);
	return 0;
}

static bool tool_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		      *s == '_' || *s == '-'))
			return false;
	return true;
}

/* tools: [{"type": "function", "function": {"name", "description", "parameters"}}] and
 * tool_choice. */
static int parse_tools(struct json_object *root, struct openai_request *r,
		       struct openai_error *err)
{
	struct json_object *v = get_field(root, "tools"), *c = get_field(root, "tool_choice");
	size_t n = 0;

	if (v && json_object_get_type(v) != json_type_array)
		return openai_error_set(err, -EINVAL, 400, NULL, "tools", "'tools' must be an array");
	n = v ? json_object_array_length(v) : 0;
	if (n > OPENAI_MAX_TOOLS)
		return openai_error_set(err, -EINVAL, 400, NULL, "tools",
					"'tools' has %zu entries (at most %d)", n, OPENAI_MAX_TOOLS);
	for (size_t i = 0; i < n; i++) {
		struct json_object *t = json_object_array_get_idx(v, i), *type, *fn, *name, *params;

		type = get_field(t, "type");
		fn = get_field(t, "function");
		if (json_object_get_type(t) != json_type_object || !type ||
		    json_object_get_type(type) != json_type_string ||
		    strcmp(json_object_get_string(type), "function") != 0 || !fn ||
		    json_object_get_type(fn) != json_type_object)
			return openai_error_set(err, -EINVAL, 400, NULL, "tools",
						"'tools[%zu]' must be {\"type\": \"function\", "
						"\"function\": {...}}", i);
		name = get_field(fn, "name");
		if (!name || json_object_get_type(name) != json_type_string ||
		    !tool_name_ok(json_object_get_string(name)))
			return openai_error_set(err, -EINVAL, 400, NULL, "tools.function.name",
						"'tools[%zu].function.name' must be 1 to 64 letters, "
						"digits, '_' or '-'", i);
		params = get_field(fn, "parameters");
		if (params && json_object_get_type(params) != json_type_object)
			return openai_error_set(err, -EINVAL, 400, NULL, "tools.function.parameters",
						"'tools[%zu].function.parameters' must be a JSON "
						"Schema object", i);
		if (params) {
			/* refuse what we cannot hold a call to, before any work */
			_cleanup_free_ char *g = NULL;
			struct errmsg e = { { 0 } };
			size_t len;
			int k = schema_to_gbnf_cached(params, &g, &len, &e);

			if (k == -ENOMEM)
				return openai_error_set(err, k, 500, NULL, NULL, "out of memory");
			if (k < 0)
				return openai_error_set(err, -EINVAL, 400, "invalid_schema",
							"tools.function.parameters",
							"tools[%zu].function.parameters: %s", i, e.text);
		}
	}
	if (n > 0) {
		r->tools_json = strdup(json_object_to_json_string_ext(
		    v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
		if (!r->tools_json)
			return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
		/* json-c passes invalid bytes in strings through; the prompt must be text */
		if (!utf8_is_valid(r->tools_json, strlen(r->tools_json)))
			return openai_error_set(err, -EINVAL, 400, "invalid_utf8", "tools",
						"'tools' is not valid UTF-8");
	}
	r->tool_choice = OPENAI_TOOL_CHOICE_AUTO;
	if (!c)
		return 0;
	if (json_object_get_type(c) == json_type_string) {
		const char *s = json_object_get_string(c);

		if (strcmp(s, "none") == 0)
			r->tool_choice = OPENAI_TOOL_CHOICE_NONE;
		else if (strcmp(s, "required") == 0)
			r->tool_choice = OPENAI_TOOL_CHOICE_REQUIRED;
		else if (strcmp(s, "auto") != 0)
			return openai_error_set(err, -EINVAL, 400, NULL, "tool_choice",
						"'tool_choice' must be \"none\", \"auto\", "
						"\"required\" or {\"type\": \"function\", "
						"\"function\": {\"name\": ...}}");
	} else {
		struct json_object *fn = get_field(c, "function"), *name = fn ? get_field(fn, "name") : NULL;

		if (!name || json_object_get_type(name) != json_type_string)
			return openai_error_set(err, -EINVAL, 400, NULL, "tool_choice",
						"'tool_choice' must be a string or {\"type\": "
						"\"function\", \"function\": {\"name\": ...}}");
		r->tool_choice = OPENAI_TOOL_CHOICE_NAMED;
		r->tool_choice_name = strdup(json_object_get_string(name));
		if (!r->tool_choice_name)
			return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
	}
	if (n == 0 && (r->tool_choice == OPENAI_TOOL_CHOICE_REQUIRED ||
		       r->tool_choice == OPENAI_TOOL_CHOICE_NAMED))
		return openai_error_set(err, -EINVAL, 400, NULL, "tool_choice",
					"'tool_choice' needs 'tools'");
	if ((r->tool_choice == OPENAI_TOOL_CHOICE_REQUIRED ||
	     r->tool_choice == OPENAI_TOOL_CHOICE_NAMED) && r->grammar)
		return openai_error_set(err, -EINVAL, 400, NULL, "tool_choice",
					"a required tool call and 'response_format' or "
					"'molly.grammar' exclude each other");
	return 0;
}

static int parse_root(struct json_object *root, struct openai_request *r, struct openai_error *err)
{
	struct json_object *v;
	int64_t x;
	int k;

	if (json_object_get_type(root) != json_type_object)
		return openai_error_set(err, -EINVAL, 400, NULL, NULL,
					"the request body must be a JSON object, not %s",
					json_type_word(root));

	v = get_field(root, "model");
	if (v) {
		k = get_string(v, "model", 512, &r->model, NULL, err);
		if (k < 0)
			return k;
		if (!r->model[0]) {
			free(r->model);
			r->model = NULL; /* "" picks the base, as an absent model does */
		}
	}

	if (r->endpoint == OPENAI_COMPLETIONS) {
		v = get_field(root, "prompt");
		if (!v)
			return openai_error_set(err, -EINVAL, 400, NULL, "prompt",
						"'prompt' is required");
		k = parse_prompt(v, r, err);
	} else {
		v = get_field(root, "messages");
		if (!v)
			return openai_error_set(err, -EINVAL, 400, NULL, "messages",
						"'messages' is required");
		k = parse_messages(v, r, err);
	}
	if (k < 0)
		return k;

	/* max_completion_tokens is the newer name (chat); it wins when both are given */
	v = get_field(root, "max_completion_tokens");
	if (v) {
		k = get_int(v, "max_completion_tokens", 1, UINT32_MAX, &x, err);
		if (k < 0)
			return k;
		r->has_max_tokens = true, r->max_tokens = (uint32_t) x;
	} else if ((v = get_field(root, "max_tokens"))) {
		k = get_int(v, "max_tokens", 1, UINT32_MAX, &x, err);
		if (k < 0)
			return k;
		r->has_max_tokens = true, r->max_tokens = (uint32_t) x;
	}

	if ((v = get_field(root, "temperature"))) {
		k = get_number(v, "temperature", 0, 100, &r->temperature, err);
		if (k < 0)
			return k;
		r->has_temperature = true;
	}
	if ((v = get_field(root, "top_p"))) {
		k = get_number(v, "top_p", 0, 1, &r->top_p, err);
		if (k < 0)
			return k;
		if (r->top_p <= 0)
			return openai_error_set(err, -EINVAL, 400, NULL, "top_p",
						"'top_p' must be in (0, 1]");
		r->has_top_p = true;
	}
	if ((v = get_field(root, "seed"))) {
		k = get_int(v, "seed", INT64_MIN, INT64_MAX, &x, err);
		if (k < 0 && json_object_get_type(v) == json_type_int) {
			/* a seed in (INT64_MAX, UINT64_MAX] */
			r->seed = json_object_get_uint64(v);
		} else if (k < 0) {
			return k;
		} else {
			r->seed = (uint64_t) x;
		}
		r->has_seed = true;
	}
	if ((v = get_field(root, "ignore_eos"))) {
		k = get_bool(v, "ignore_eos", &r->ignore_eos, err);
		if (k < 0)
			return k;
	}
	if ((v = get_field(root, "molly"))) {
		/* Molly's own request options, in one object so that they never collide with a
		 * future OpenAI field. */
		struct json_object *u;

		if (json_object_get_type(v) != json_type_object)
			return openai_error_set(err, -EINVAL, 400, NULL, "molly",
						"'molly' must be an object, not %s",
						json_type_word(v));
		json_object_object_foreach(v, key, val) {
			(void) val;
			if (strcmp(key, "budget") != 0 && strcmp(key, "grammar") != 0)
				return openai_error_set(err, -EINVAL, 400, NULL, "molly",
							"unknown key 'molly.%.*s' (known: budget, "
							"grammar)",
							utf8_prefix(key, 64), key);
		}
		if ((u = get_field(v, "budget"))) {
			k = get_number(u, "molly.budget", 0, 1e12, &r->budget, err);
			if (k < 0)
				return k;
		}
		if ((u = get_field(v, "grammar"))) {
			k = get_string(u, "molly.grammar", GRAMMAR_MAX_TEXT, &r->grammar, NULL, err);
			if (k < 0)
				return k;
		}
	}
	if ((v = get_field(root, "stop"))) {
		k = parse_stop(v, r, err);
		if (k < 0)
			return k;
	}
	if ((v = get_field(root, "lora"))) {
		k = parse_lora(v, r, err);
		if (k < 0)
			return k;
	}
	if ((v = get_field(root, "stream"))) {
		k = get_bool(v, "stream", &r->stream, err);
		if (k < 0)
			return k;
	}
	if ((v = get_field(root, "stream_options"))) {
		struct json_object *u;

		if (json_object_get_type(v) != json_type_object)
			return openai_error_set(err, -EINVAL, 400, NULL, "stream_options",
						"'stream_options' must be an object, not %s",
						json_type_word(v));
		if (!r->stream)
			return openai_error_set(err, -EINVAL, 400, NULL, "stream_options",
						"'stream_options' needs \"stream\": true");
		u = get_field(v, "include_usage");
		if (u) {
			k = get_bool(u, "stream_options.include_usage", &r->include_usage, err);
			if (k < 0)
				return k;
		}
	}

	if (r->endpoint == OPENAI_COMPLETIONS) {
		if ((v = get_field(root, "logprobs"))) {
			k = get_int(v, "logprobs", 0, OPENAI_MAX_TOP_LOGPROBS, &x, err);
			if (k < 0)
				return k;
			r->logprobs = true, r->top_logprobs = (uint32_t) x;
		}
	} else {
		if ((v = get_field(root, "logprobs"))) {
			k = get_bool(v, "logprobs", &r->logprobs, err);
			if (k < 0)
				return k;
		}
		if ((v = get_field(root, "top_logprobs"))) {
			k = get_int(v, "top_logprobs", 0, OPENAI_MAX_TOP_LOGPROBS, &x, err);
			if (k < 0)
				return k;
			if (!r->logprobs)
				return openai_error_set(err, -EINVAL, 400, NULL, "top_logprobs",
							"'top_logprobs' needs \"logprobs\": true");
			r->top_logprobs = (uint32_t) x;
		}
	}
	k = parse_response_format(root, r, err);
	if (k >= 0 && r->endpoint == OPENAI_CHAT_COMPLETIONS)
		k = parse_tools(root, r, err);
	if (k >= 0 && r->grammar) {
		/* compiled now (and cached) so that a bad one is a 400 naming the field */
		struct grammar *g = NULL;
		struct errmsg e = { { 0 } };

		k = grammar_parse_cached(r->grammar, strlen(r->grammar), &g, &e);
		grammar_unref(g);
		if (k < 0)
			return openai_error_set(err, k == -ENOMEM ? -ENOMEM : -EINVAL,
						k == -ENOMEM ? 500 : 400, NULL,
						get_field(root, "response_format") ? "response_format"
										  : "molly.grammar",
						"the grammar is not usable: %s", e.text);
	}
	if (k < 0)
		return k;
	return check_unsupported(root, r, err);
}

static int openai_parse_json(const char *body, size_t len, struct json_object **ret,
			     struct openai_error *err);

int openai_request_parse(enum openai_endpoint endpoint, const char *body, size_t len,
			 struct openai_request *ret, struct openai_error *err)
{
	_cleanup_(json_object_putp) struct json_object *root = NULL;
	struct openai_request r = { .endpoint = endpoint };
	int k;

	k = openai_parse_json(body, len, &root, err);
	if (k < 0)
		return k;
	k = parse_root(root, &r, err);
	if (k < 0) {
		openai_request_done(&r);
		return k;
	}
	*ret = r;
	return 0;
}

static int openai_parse_json(const char *body, size_t len, struct json_object **ret,
			     struct openai_error *err)
{
	_cleanup_(json_tokener_freep) struct json_tokener *tok = NULL;
	struct json_object *root;
	enum json_tokener_error jerr;

	if (len == 0)
		return openai_error_set(err, -EINVAL, 400, "invalid_json", NULL,
					"the request body is empty; expected a JSON object");
	if (len > INT32_MAX)
		return openai_error_set(err, -EINVAL, 413, "request_too_large", NULL,
					"the request body is too large");
	/* Invalid UTF-8 is its own error: json-c would call it a parse error at some offset */
	if (!utf8_is_valid(body, len))
		return openai_error_set(err, -EINVAL, 400, "invalid_utf8", NULL,
					"the request body is not valid UTF-8");
	tok = json_tokener_new_ex(JSON_TOKENER_DEFAULT_DEPTH);
	if (!tok)
		return openai_error_set(err, -ENOMEM, 500, NULL, NULL, "out of memory");
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, body, (int) len);
	jerr = json_tokener_get_error(tok);
	if (!root && jerr == json_tokener_continue)
		return openai_error_set(err, -EINVAL, 400, "invalid_json", NULL,
					"the request body is not valid JSON: it ends early");
	if (jerr != json_tokener_success) {
		json_object_put(root);
		return openai_error_set(err, -EINVAL, 400, "invalid_json", NULL,
					"the request body is not valid JSON: %s at byte %zu",
					json_tokener_error_desc(jerr),
					json_tokener_get_parse_end(tok));
	}
	if (json_tokener_get_parse_end(tok) < len) {
		size_t end = json_tokener_get_parse_end(tok);

		/* trailing whitespace is fine, anything else is a second value or garbage */
		while (end < len && strchr(" \t\r\n", body[end]))
			end++;
		if (end < len) {
			json_object_put(root);
			return openai_error_set(err, -EINVAL, 400, "invalid_json", NULL,
						"the request body is not valid JSON: unexpected "
						"data at byte %zu after the value",
						end);
		}
	}
	*ret = root;
	return 0;
}

void openai_request_done(struct openai_request *r)
{
	if (!r)
		return;
	free(r->model);
	free(r->prompt);
	for (size_t i = 0; i < r->n_messages; i++) {
		free(r->messages[i].role);
		free(r->messages[i].content);
		for (size_t j = 0; j < r->messages[i].n_tool_calls; j++) {
			free(r->messages[i].tool_calls[j].id);
			free(r->messages[i].tool_calls[j].name);
			free(r->messages[i].tool_calls[j].arguments);
		}
		free(r->messages[i].tool_calls);
		free(r->messages[i].tool_call_id);
	}
	free(r->grammar);
	free(r->tools_json);
	free(r->tool_choice_name);
	free(r->messages);
	for (size_t i = 0; i < r->n_loras; i++)
		free(r->loras[i].name);
	free(r->loras);
	for (size_t i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	free(r->stop);
	*r = (struct openai_request){ 0 };
}

int openai_parse_lora_admin(const char *body, size_t len, bool want_path, char **ret_name,
			    char **ret_path, struct openai_error *err)
{
	_cleanup_(json_object_putp) struct json_object *root = NULL;
	_cleanup_free_ char *name = NULL, *path = NULL;
	struct json_object *v;
	int k;

	k = openai_parse_json(body, len, &root, err);
	if (k < 0)
		return k;
	if (json_object_get_type(root) != json_type_object)
		return openai_error_set(err, -EINVAL, 400, NULL, NULL,
					"the request body must be a JSON object, not %s",
					json_type_word(root));
	v = get_field(root, "lora_name");
	if (!v)
		return openai_error_set(err, -EINVAL, 400, NULL, "lora_name",
					"'lora_name' is required");
	k = get_string(v, "lora_name", 256, &name, NULL, err);
	if (k < 0)
		return k;
	if (!name[0])
		return openai_error_set(err, -EINVAL, 400, NULL, "lora_name",
					"'lora_name' must not be empty");
	if (want_path) {
		v = get_field(root, "lora_path");
		if (!v)
			return openai_error_set(err, -EINVAL, 400, NULL, "lora_path",
						"'lora_path' is required");
		k = get_string(v, "lora_path", 4096, &path, NULL, err);
		if (k < 0)
			return k;
		if (!path[0])
			return openai_error_set(err, -EINVAL, 400, NULL, "lora_path",
						"'lora_path' must not be empty");
	}
	*ret_name = TAKE_PTR(name);
	if (ret_path)
		*ret_path = TAKE_PTR(path);
	return 0;
}

/* ---- building ---- */

/* Serialises and frees obj; NULL on OOM (or when obj is NULL). */
static char *json_finish(struct json_object *obj, const char *prefix, const char *suffix)
{
	const char *s;
	char *out = NULL;

	if (!obj)
		return NULL;
	s = json_object_to_json_string_ext(obj,
					   JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (s && asprintf(&out, "%s%s%s", prefix, s, suffix) < 0)
		out = NULL;
	json_object_put(obj);
	return out;
}

/* json-c's adders fail only on OOM; collect that in *ok instead of checking every call. */
static void add(struct json_object *obj, const char *key, struct json_object *v, bool *ok)
{
	if (!v || !obj || json_object_object_add(obj, key, v) < 0) {
		json_object_put(v);
		*ok = false;
	}
}

static void push(struct json_object *arr, struct json_object *v, bool *ok)
{
	if (!v || !arr || json_object_array_add(arr, v) < 0) {
		json_object_put(v);
		*ok = false;
	}
}

static struct json_object *new_string_len(const char *s, size_t len)
{
	return json_object_new_string_len(s ? s : "", (int) MIN(len, (size_t) INT32_MAX));
}

/* Token pieces can be a part of a UTF-8 character; JSON strings must be whole ones, so
 * invalid bytes become U+FFFD in "token" (the exact bytes are in "bytes", as OpenAI does). */
static struct json_object *new_token_string(const char *s, size_t len)
{
	char *buf;
	size_t n = 0, i = 0;
	struct json_object *o;

	if (utf8_is_valid(s, len))
		return new_string_len(s, len);
	buf = malloc(len * 3 + 1);
	if (!buf)
		return NULL;
	while (i < len) {
		size_t step;

		for (step = 1; step <= 4 && i + step <= len; step++)
			if (utf8_is_valid(s + i, step))
				break;
		if (step <= 4 && i + step <= len) {
			memcpy(buf + n, s + i, step);
			n += step;
			i += step;
		} else {
			memcpy(buf + n, "\xef\xbf\xbd", 3);
			n += 3;
			i++;
		}
	}
	o = new_string_len(buf, n);
	free(buf);
	return o;
}

/* {"target": s, "confidence": d (when known), "uncertainty": s (when there is a note)} */
static struct json_object *molly_json(const struct openai_result *r)
{
	struct json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	json_object_object_add(o, "target", json_object_new_string(r->target));
	if (r->has_confidence)
		json_object_object_add(o, "confidence", json_object_new_double(r->confidence));
	if (r->uncertainty)
		json_object_object_add(o, "uncertainty", json_object_new_string(r->uncertainty));
	return o;
}

static struct json_object *usage_json(const struct openai_result *r)
{
	struct json_object *u = json_object_new_object();
	bool ok = true;

	add(u, "prompt_tokens", json_object_new_int64(r->prompt_tokens), &ok);
	add(u, "completion_tokens", json_object_new_int64(r->completion_tokens), &ok);
	add(u, "total_tokens",
	    json_object_new_int64((int64_t) r->prompt_tokens + r->completion_tokens), &ok);
	if (!ok) {
		json_object_put(u);
		return NULL;
	}
	return u;
}

static struct json_object *completion_logprobs_json(const struct openai_result *r)
{
	struct json_object *o = json_object_new_object();
	struct json_object *tokens = json_object_new_array(), *lps = json_object_new_array();
	struct json_object *tops = json_object_new_array(), *offs = json_object_new_array();
	bool ok = true;

	for (size_t i = 0; i < r->n_logprobs && ok; i++) {
		const struct openai_logprob *l = &r->logprobs[i];
		struct json_object *top = json_object_new_object();

		push(tokens, new_token_string(l->token, l->token_len), &ok);
		push(lps, json_object_new_double(l->logprob), &ok);
		/* only the sampled token: alternatives are not available */
		if (top && l->token)
			add(top, l->token, json_object_new_double(l->logprob), &ok);
		push(tops, top, &ok);
		push(offs, json_object_new_int64((int64_t) l->text_offset), &ok);
	}
	add(o, "tokens", tokens, &ok);
	add(o, "token_logprobs", lps, &ok);
	add(o, "top_logprobs", tops, &ok);
	add(o, "text_offset", offs, &ok);
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

static struct json_object *token_bytes_json(const char *s, size_t len)
{
	struct json_object *b = json_object_new_array_ext((int) MIN(len, (size_t) INT32_MAX));
	bool ok = true;

	for (size_t i = 0; i < len && ok; i++)
		push(b, json_object_new_int((unsigned char) s[i]), &ok);
	if (!ok) {
		json_object_put(b);
		return NULL;
	}
	return b;
}

static struct json_object *chat_logprobs_json(const struct openai_result *r)
{
	struct json_object *o = json_object_new_object(), *content = json_object_new_array();
	bool ok = true;

	for (size_t i = 0; i < r->n_logprobs && ok; i++) {
		const struct openai_logprob *l = &r->logprobs[i];
		struct json_object *e = json_object_new_object(), *tops = json_object_new_array();
		struct json_object *top = json_object_new_object();

		add(e, "token", new_token_string(l->token, l->token_len), &ok);
		add(e, "logprob", json_object_new_double(l->logprob), &ok);
		add(e, "bytes", token_bytes_json(l->token, l->token_len), &ok);
		add(top, "token", new_token_string(l->token, l->token_len), &ok);
		add(top, "logprob", json_object_new_double(l->logprob), &ok);
		add(top, "bytes", token_bytes_json(l->token, l->token_len), &ok);
		push(tops, top, &ok);
		add(e, "top_logprobs", tops, &ok);
		push(content, e, &ok);
	}
	add(o, "content", content, &ok);
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

static void add_null(struct json_object *obj, const char *key, bool *ok)
{
	if (!obj || json_object_object_add(obj, key, NULL) < 0)
		*ok = false;
}

static struct json_object *head_json(enum openai_endpoint endpoint, const struct openai_result *r,
				     bool chunk, bool *ok)
{
	struct json_object *o = json_object_new_object();
	const char *object;

	if (endpoint == OPENAI_COMPLETIONS)
		object = "text_completion";
	else
		object = chunk ? "chat.completion.chunk" : "chat.completion";
	add(o, "id", json_object_new_string(r->id ? r->id : ""), ok);
	add(o, "object", json_object_new_string(object), ok);
	add(o, "created", json_object_new_int64(r->created), ok);
	add(o, "model", json_object_new_string(r->model ? r->model : ""), ok);
	add_null(o, "system_fingerprint", ok);
	return o;
}

/* [{"id", "type": "function", "function": {"name", "arguments"}}]; with index for streams */
static struct json_object *tool_calls_json(const struct openai_result *r, bool with_index)
{
	struct json_object *a = json_object_new_array();
	bool ok = true;

	for (size_t i = 0; i < r->n_tool_calls; i++) {
		struct json_object *c = json_object_new_object(), *fn = json_object_new_object();

		if (with_index)
			add(c, "index", json_object_new_int((int) i), &ok);
		add(c, "id", json_object_new_string(r->tool_calls[i].id), &ok);
		add(c, "type", json_object_new_string("function"), &ok);
		add(fn, "name", json_object_new_string(r->tool_calls[i].name), &ok);
		add(fn, "arguments", json_object_new_string(r->tool_calls[i].arguments), &ok);
		add(c, "function", fn, &ok);
		push(a, c, &ok);
	}
	if (!ok) {
		json_object_put(a);
		return NULL;
	}
	return a;
}

char *openai_stream_tool_call_delta(const struct openai_result *r, size_t index, const char *id,
				    const char *name, const char *args, size_t args_len)
{
	bool ok = true;
	struct json_object *o = head_json(OPENAI_CHAT_COMPLETIONS, r, true, &ok);
	struct json_object *choices = json_object_new_array(), *c = json_object_new_object(),
			   *delta = json_object_new_object(), *calls = json_object_new_array(),
			   *call = json_object_new_object(), *fn = json_object_new_object();

	add(call, "index", json_object_new_int((int) index), &ok);
	if (id) {
		add(call, "id", json_object_new_string(id), &ok);
		add(call, "type", json_object_new_string("function"), &ok);
		add(fn, "name", json_object_new_string(name ? name : ""), &ok);
	}
	add(fn, "arguments", new_string_len(args ? args : "", args ? args_len : 0), &ok);
	add(call, "function", fn, &ok);
	push(calls, call, &ok);
	add(delta, "tool_calls", calls, &ok);
	add(c, "index", json_object_new_int(0), &ok);
	add(c, "delta", delta, &ok);
	add_null(c, "logprobs", &ok);
	add_null(c, "finish_reason", &ok);
	push(choices, c, &ok);
	add(o, "choices", choices, &ok);
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return json_finish(o, "data: ", "\n\n");
}

char *openai_stream_tool_calls(const struct openai_result *r)
{
	_cleanup_free_ char *out = NULL;
	size_t len = 0;

	for (size_t i = 0; i < r->n_tool_calls; i++)
		for (int part = 0; part < 2; part++) {
			const struct openai_tool_call *t = &r->tool_calls[i];
			char *chunk = part == 0 ? openai_stream_tool_call_delta(r, i, t->id, t->name,
										 "", 0)
						: openai_stream_tool_call_delta(
							  r, i, NULL, NULL, t->arguments,
							  strlen(t->arguments));
			char *n;

			if (!chunk)
				return NULL;
			n = realloc(out, len + strlen(chunk) + 1);
			if (!n) {
				free(chunk);
				return NULL;
			}
			out = n;
			memcpy(out + len, chunk, strlen(chunk) + 1);
			len += strlen(chunk);
			free(chunk);
		}
	return out ? TAKE_PTR(out) : strdup("");
}

char *openai_response_json(enum openai_endpoint endpoint, const struct openai_result *r)
{
	bool ok = true;
	struct json_object *o = head_json(endpoint, r, false, &ok);
	struct json_object *choices = json_object_new_array(), *c = json_object_new_object();

	add(c, "index", json_object_new_int(0), &ok);
	if (endpoint == OPENAI_COMPLETIONS) {
		add(c, "text", new_string_len(r->text, r->text_len), &ok);
		if (r->logprobs)
			add(c, "logprobs", completion_logprobs_json(r), &ok);
		else
			add_null(c, "logprobs", &ok);
	} else {
		struct json_object *msg = json_object_new_object();

		add(msg, "role", json_object_new_string("assistant"), &ok);
		if (r->n_tool_calls) {
			if (r->text_len) /* what the model wrote before its calls */
				add(msg, "content", new_string_len(r->text, r->text_len), &ok);
			else
				add_null(msg, "content", &ok);
			add(msg, "tool_calls", tool_calls_json(r, false), &ok);
		} else {
			add(msg, "content", new_string_len(r->text, r->text_len), &ok);
		}
		add(c, "message", msg, &ok);
		if (r->logprobs)
			add(c, "logprobs", chat_logprobs_json(r), &ok);
		else
			add_null(c, "logprobs", &ok);
	}
	add(c, "finish_reason",
	    json_object_new_string(r->finish_reason ? r->finish_reason : "stop"), &ok);
	push(choices, c, &ok);
	add(o, "choices", choices, &ok);
	add(o, "usage", usage_json(r), &ok);
	if (r->target)
		add(o, "molly", molly_json(r), &ok);
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return json_finish(o, "", "");
}

char *openai_stream_chunk(enum openai_endpoint endpoint, const struct openai_result *r,
			  bool role_chunk, bool usage_chunk)
{
	bool ok = true;
	struct json_object *o = head_json(endpoint, r, true, &ok);
	struct json_object *choices = json_object_new_array();

	if (usage_chunk) {
		add(o, "choices", choices, &ok);
		add(o, "usage", usage_json(r), &ok);
	} else {
		struct json_object *c = json_object_new_object();

		add(c, "index", json_object_new_int(0), &ok);
		if (endpoint == OPENAI_COMPLETIONS) {
			add(c, "text", new_string_len(r->text, r->text_len), &ok);
			if (r->logprobs)
				add(c, "logprobs", completion_logprobs_json(r), &ok);
			else
				add_null(c, "logprobs", &ok);
		} else {
			struct json_object *delta = json_object_new_object();

			if (role_chunk) {
				add(delta, "role", json_object_new_string("assistant"), &ok);
				add(delta, "content", json_object_new_string(""), &ok);
			} else if (r->text_len || !r->finish_reason) {
				add(delta, "content", new_string_len(r->text, r->text_len), &ok);
			}
			add(c, "delta", delta, &ok);
			if (r->logprobs && !role_chunk)
				add(c, "logprobs", chat_logprobs_json(r), &ok);
			else
				add_null(c, "logprobs", &ok);
		}
		if (r->finish_reason && !role_chunk)
			add(c, "finish_reason", json_object_new_string(r->finish_reason), &ok);
		else
			add_null(c, "finish_reason", &ok);
		push(choices, c, &ok);
		add(o, "choices", choices, &ok);
		if (r->target && r->finish_reason && !role_chunk)
			add(o, "molly", molly_json(r), &ok);
	}
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return json_finish(o, "data: ", "\n\n");
}

static struct json_object *error_object(const struct openai_error *err)
{
	struct json_object *o = json_object_new_object(), *e = json_object_new_object();
	bool ok = true;

	add(e, "message", json_object_new_string(err->message), &ok);
	add(e, "type",
	    json_object_new_string(err->type ? err->type : openai_error_type(err->status)), &ok);
	if (e)
		json_object_object_add(e, "param",
				       err->param[0] ? json_object_new_string(err->param) : NULL);
	if (e)
		json_object_object_add(e, "code",
				       err->code ? json_object_new_string(err->code) : NULL);
	add(o, "error", e, &ok);
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

char *openai_error_json(const struct openai_error *err)
{
	return json_finish(error_object(err), "", "");
}

char *openai_stream_error(const struct openai_error *err)
{
	return json_finish(error_object(err), "data: ", "\n\n");
}

static struct json_object *model_entry_json(const struct openai_model_entry *e, int64_t created)
{
	struct json_object *m = json_object_new_object();
	bool ok = true;

	add(m, "id", json_object_new_string(e->id), &ok);
	add(m, "object", json_object_new_string("model"), &ok);
	add(m, "created", json_object_new_int64(created), &ok);
	add(m, "owned_by", json_object_new_string("molly"), &ok);
	add(m, "root", json_object_new_string(e->id), &ok);
	if (e->parent)
		add(m, "parent", json_object_new_string(e->parent), &ok);
	else
		add_null(m, "parent", &ok);
	if (!ok) {
		json_object_put(m);
		return NULL;
	}
	return m;
}

char *openai_models_json(const struct openai_model_entry *models, size_t n, int64_t created)
{
	struct json_object *o = json_object_new_object(), *data = json_object_new_array();
	bool ok = true;

	add(o, "object", json_object_new_string("list"), &ok);
	for (size_t i = 0; i < n && ok; i++)
		push(data, model_entry_json(&models[i], created), &ok);
	add(o, "data", data, &ok);
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return json_finish(o, "", "");
}

char *openai_model_json(const struct openai_model_entry *model, int64_t created)
{
	return json_finish(model_entry_json(model, created), "", "");
}
