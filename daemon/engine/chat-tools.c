/* SPDX-License-Identifier: MIT */
/*
 * chat-tools.c: tools in the chatml, llama3 and mistral families (see chat-tools.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "engine/chat-tools.h"
#include "grammar/schema.h"

DEFINE_CLEANUP_FUNC(struct json_object *, json_object_put, NULL)

struct tbuf {
	char *p;
	size_t len, cap;
};

static int add(struct tbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 512;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

static int cat(struct tbuf *b, ...)
{
	va_list ap;
	const char *s;
	int r = 0;

	va_start(ap, b);
	while (r >= 0 && (s = va_arg(ap, const char *)))
		r = add(b, s, strlen(s));
	va_end(ap);
	return r;
}
#define CAT(b, ...) cat(b, __VA_ARGS__, (const char *) NULL)

/* Python's str.strip() for ASCII white space (what the templates' trim does to these). */
static int add_trimmed(struct tbuf *b, const char *s)
{
	size_t n = strlen(s);

	while (n && strchr(" \t\n\r\f\v", s[n - 1]))
		n--;
	while (n && strchr(" \t\n\r\f\v", *s))
		s++, n--;
	return add(b, s, n);
}

/* ---- JSON as Python's json.dumps(ensure_ascii=False) writes it ---- */

static int py_string(struct tbuf *b, const char *s, size_t n)
{
	int r = add(b, "\"", 1);

	for (size_t i = 0; i < n && r >= 0; i++) {
		unsigned char c = (unsigned char) s[i];
		char esc[8];

		switch (c) {
		case '"':
			r = add(b, "\\\"", 2);
			break;
		case '\\':
			r = add(b, "\\\\", 2);
			break;
		case '\n':
			r = add(b, "\\n", 2);
			break;
		case '\r':
			r = add(b, "\\r", 2);
			break;
		case '\t':
			r = add(b, "\\t", 2);
			break;
		case '\b':
			r = add(b, "\\b", 2);
			break;
		case '\f':
			r = add(b, "\\f", 2);
			break;
		default:
			if (c < 0x20) {
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				r = add(b, esc, 6);
			} else {
				r = add(b, (const char *) &c, 1);
			}
		}
	}
	return r < 0 ? r : add(b, "\"", 1);
}

static int py_indent(struct tbuf *b, int indent, int level)
{
	int r = add(b, "\n", 1);

	for (int i = 0; i < indent * level && r >= 0; i++)
		r = add(b, " ", 1);
	return r;
}

/* indent < 0: one line */
static int py_json(struct tbuf *b, struct json_object *o, int indent, int level)
{
	int r = 0;
	bool first = true;

	switch (json_object_get_type(o)) {
	case json_type_null:
		return add(b, "null", 4);
	case json_type_boolean:
		return json_object_get_boolean(o) ? add(b, "true", 4) : add(b, "false", 5);
	case json_type_string:
		return py_string(b, json_object_get_string(o), (size_t) json_object_get_string_len(o));
	case json_type_int:
	case json_type_double: {
		const char *t = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);

		return add(b, t, strlen(t));
	}
	case json_type_array: {
		size_t n = json_object_array_length(o);

		if (n == 0)
			return add(b, "[]", 2);
		r = add(b, "[", 1);
		for (size_t i = 0; i < n && r >= 0; i++) {
			if (i)
				r = add(b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
			if (r >= 0 && indent >= 0)
				r = py_indent(b, indent, level + 1);
			if (r >= 0)
				r = py_json(b, json_object_array_get_idx(o, i), indent, level + 1);
		}
		if (r >= 0 && indent >= 0)
			r = py_indent(b, indent, level);
		return r < 0 ? r : add(b, "]", 1);
	}
	case json_type_object:
		if (json_object_object_length(o) == 0)
			return add(b, "{}", 2);
		r = add(b, "{", 1);
		json_object_object_foreach(o, key, val) {
			if (r < 0)
				break;
			if (!first)
				r = add(b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
			first = false;
			if (r >= 0 && indent >= 0)
				r = py_indent(b, indent, level + 1);
			if (r >= 0)
				r = py_string(b, key, strlen(key));
			if (r >= 0)
				r = add(b, ": ", 2);
			if (r >= 0)
				r = py_json(b, val, indent, level + 1);
		}
		if (r >= 0 && indent >= 0)
			r = py_indent(b, indent, level);
		return r < 0 ? r : add(b, "}", 1);
	}
	return -EINVAL;
}

/* The arguments as an object: clients send a JSON string; an unparsable one stays a string. */
static int py_arguments(struct tbuf *b, const char *args)
{
	_cleanup_(json_object_putp) struct json_object *o = args ? json_tokener_parse(args) : NULL;

	if (!o && args && strcmp(args, "null") != 0)
		return py_string(b, args, strlen(args));
	if (!o)
		return add(b, "{}", 2);
	return py_json(b, o, -1, 0);
}

/* ---- rendering ---- */

bool chat_family_has_tools(enum chat_family f)
{
	return f == CHAT_FAMILY_CHATML || f == CHAT_FAMILY_LLAMA3 || f == CHAT_FAMILY_MISTRAL;
}

static bool is(const struct chat_message *m, const char *role)
{
	return m->role && strcmp(m->role, role) == 0;
}

static int render_chatml(struct tbuf *b, const struct chat_message *m, size_t n,
			 struct json_object *tools, bool add_asst)
{
	size_t first = n && is(&m[0], "system") ? 1 : 0;
	int r = 0;

	if (tools) {
		r = CAT(b, "<|im_start|>system\n", first ? m[0].content : "",
			"\n\n# Tools\n\nYou may call one or more functions to assist with the user "
			"query.\n\nYou are provided with function signatures within <tools></tools> "
			"XML tags:\n<tools>");
		for (size_t i = 0; r >= 0 && i < json_object_array_length(tools); i++) {
			r = add(b, "\n", 1);
			if (r >= 0)
				r = py_json(b, json_object_array_get_idx(tools, i), -1, 0);
		}
		if (r >= 0)
			r = CAT(b, "\n</tools>\n\nFor each function call, return a json object with "
				   "function name and arguments within <tool_call></tool_call> XML "
				   "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
				   "<args-json-object>}\n</tool_call><|im_end|>\n");
	} else if (first) {
		r = CAT(b, "<|im_start|>system\n", m[0].content, "<|im_end|>\n");
	}
	for (size_t i = first; i < n && r >= 0; i++) {
		if (is(&m[i], "tool")) {
			if (i == 0 || !is(&m[i - 1], "tool"))
				r = CAT(b, "<|im_start|>user");
			if (r >= 0)
				r = CAT(b, "\n<tool_response>\n", m[i].content, "\n</tool_response>");
			if (r >= 0 && (i + 1 == n || !is(&m[i + 1], "tool")))
				r = CAT(b, "<|im_end|>\n");
		} else if (is(&m[i], "assistant") && m[i].n_tool_calls) {
			r = CAT(b, "<|im_start|>assistant");
			if (r >= 0 && m[i].content[0])
				r = CAT(b, "\n", m[i].content);
			for (size_t j = 0; j < m[i].n_tool_calls && r >= 0; j++) {
				r = CAT(b, "\n<tool_call>\n{\"name\": \"", m[i].tool_calls[j].name,
					"\", \"arguments\": ");
				if (r >= 0)
					r = py_arguments(b, m[i].tool_calls[j].arguments);
				if (r >= 0)
					r = CAT(b, "}\n</tool_call>");
			}
			if (r >= 0)
				r = CAT(b, "<|im_end|>\n");
		} else {
			r = CAT(b, "<|im_start|>", m[i].role, "\n", m[i].content, "<|im_end|>\n");
		}
	}
	if (r >= 0 && add_asst)
		r = CAT(b, "<|im_start|>assistant\n");
	return r;
}

static int render_llama3(struct tbuf *b, const struct chat_message *m, size_t n,
			 struct json_object *tools, bool add_asst, struct errmsg *e)
{
	size_t i = 0;
	int r = 0;

	if (tools) {
		r = CAT(b, "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n");
		if (r >= 0 && n && is(&m[0], "system")) {
			r = add_trimmed(b, m[0].content);
			i = 1;
		}
		if (r >= 0)
			r = CAT(b, "<|eot_id|>");
		if (i >= n)
			return errmsg_set(e, -EINVAL, "the llama3 template puts the tools in the first "
						      "user message, and there is none");
		if (r >= 0)
			r = CAT(b, "<|start_header_id|>user<|end_header_id|>\n\nGiven the following "
				   "functions, please respond with a JSON for a function call with its "
				   "proper arguments that best answers the given prompt.\n\nRespond in "
				   "the format {\"name\": function name, \"parameters\": dictionary of "
				   "argument name and its value}.Do not use variables.\n\n");
		for (size_t t = 0; r >= 0 && t < json_object_array_length(tools); t++) {
			r = py_json(b, json_object_array_get_idx(tools, t), 4, 0);
			if (r >= 0)
				r = add(b, "\n\n", 2);
		}
		if (r >= 0)
			r = add_trimmed(b, m[i].content);
		if (r >= 0)
			r = CAT(b, "<|eot_id|>");
		i++;
	}
	for (; i < n && r >= 0; i++) {
		if (is(&m[i], "tool")) {
			/* the template writes a string result through tojson (a string is
			 * "iterable" to Jinja): quoted and escaped */
			r = CAT(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
			if (r >= 0)
				r = py_string(b, m[i].content, strlen(m[i].content));
			if (r >= 0)
				r = CAT(b, "<|eot_id|>");
		} else if (is(&m[i], "assistant") && m[i].n_tool_calls) {
			if (m[i].n_tool_calls != 1)
				return errmsg_set(e, -EINVAL, "message %zu: the llama3 template takes one "
							      "tool call per assistant message", i);
			r = CAT(b, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"",
				m[i].tool_calls[0].name, "\", \"parameters\": ");
			if (r >= 0)
				r = py_arguments(b, m[i].tool_calls[0].arguments);
			if (r >= 0)
				r = CAT(b, "}<|eot_id|>");
		} else {
			r = CAT(b, "<|start_header_id|>", m[i].role, "<|end_header_id|>\n\n");
			if (r >= 0)
				r = add_trimmed(b, m[i].content);
			if (r >= 0)
				r = CAT(b, "<|eot_id|>");
		}
	}
	if (r >= 0 && add_asst)
		r = CAT(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	return r;
}

static int render_mistral(struct tbuf *b, const struct chat_message *m, size_t n,
			  struct json_object *tools, struct errmsg *e)
{
	size_t first = n && is(&m[0], "system") ? 1 : 0, last_user = SIZE_MAX, k = 0;
	int r = 0;

	for (size_t i = first; i < n; i++) {
		if (is(&m[i], "tool") || (is(&m[i], "assistant") && m[i].n_tool_calls))
			continue;
		if (is(&m[i], "user") != (k % 2 == 0))
			return errmsg_set(e, -EINVAL, "message %zu: the mistral template needs user and "
						      "assistant turns to alternate after the "
						      "optional system message (tool calls and "
						      "results aside)", i);
		if (!is(&m[i], "user") && !is(&m[i], "assistant"))
			return errmsg_set(e, -EINVAL, "message %zu: the mistral template takes a "
						      "system message only first", i);
		k++;
	}
	for (size_t i = first; i < n; i++)
		if (is(&m[i], "user"))
			last_user = i;
	for (size_t i = first; i < n && r >= 0; i++) {
		if (is(&m[i], "user")) {
			if (tools && i == last_user) {
				r = CAT(b, "[AVAILABLE_TOOLS][");
				for (size_t t = 0; r >= 0 && t < json_object_array_length(tools); t++) {
					struct json_object *fn = NULL;
					bool one = true;

					json_object_object_get_ex(json_object_array_get_idx(tools, t),
								  "function", &fn);
					r = CAT(b, t ? ", " : "", "{\"type\": \"function\", \"function\": {");
					json_object_object_foreach(fn, key, val) {
						if (r < 0 || strcmp(key, "return") == 0)
							continue;
						r = CAT(b, one ? "" : ", ", "\"", key, "\": ");
						one = false;
						if (r >= 0 && json_object_get_type(val) == json_type_string)
							r = CAT(b, "\"", json_object_get_string(val), "\"");
						else if (r >= 0)
							r = py_json(b, val, -1, 0);
					}
					if (r >= 0)
						r = CAT(b, "}}");
				}
				if (r >= 0)
					r = CAT(b, "][/AVAILABLE_TOOLS]");
			}
			if (r >= 0 && i + 1 == n && first)
				r = CAT(b, "[INST]", m[0].content, "\n\n", m[i].content, "[/INST]");
			else if (r >= 0)
				r = CAT(b, "[INST]", m[i].content, "[/INST]");
		} else if (is(&m[i], "assistant") && m[i].n_tool_calls) {
			r = CAT(b, "[TOOL_CALLS][");
			for (size_t j = 0; j < m[i].n_tool_calls && r >= 0; j++) {
				const struct chat_tool_call *c = &m[i].tool_calls[j];

				r = CAT(b, j ? ", " : "", "{\"name\": ");
				if (r >= 0)
					r = py_string(b, c->name, strlen(c->name));
				if (r >= 0)
					r = CAT(b, ", \"arguments\": ");
				if (r >= 0)
					r = py_arguments(b, c->arguments);
				if (r >= 0)
					r = CAT(b, ", \"id\": \"", c->id ? c->id : "", "\"}");
			}
			if (r >= 0)
				r = CAT(b, "]</s>");
		} else if (is(&m[i], "assistant")) {
			r = CAT(b, m[i].content, "</s>");
		} else {
			r = CAT(b, "[TOOL_RESULTS]{\"content\": ", m[i].content, ", \"call_id\": \"",
				m[i].tool_call_id ? m[i].tool_call_id : "", "\"}[/TOOL_RESULTS]");
		}
	}
	return r;
}

int chat_render_tools(enum chat_family f, const struct chat_message *msgs, size_t n_msgs,
		      const char *tools_json, bool add_assistant, char **ret, struct errmsg *e)
{
	_cleanup_(json_object_putp) struct json_object *tools = NULL;
	struct tbuf b = { 0 };
	int r;

	assert_return(ret && (msgs || n_msgs == 0), -EINVAL);
	if (!chat_family_has_tools(f))
		return errmsg_set(e, -EOPNOTSUPP, "the model's chat template (%s) does not define "
						   "tool use (chatml, llama3 and mistral do)",
				  chat_family_name(f));
	if (tools_json) {
		tools = json_tokener_parse(tools_json);
		if (json_object_get_type(tools) != json_type_array)
			return errmsg_set(e, -EINVAL, "tools must be a JSON array");
	}
	for (size_t i = 0; i < n_msgs; i++) {
		if (!msgs[i].role || !msgs[i].content)
			return errmsg_set(e, -EINVAL, "message %zu: role or content is missing", i);
		if (!is(&msgs[i], "system") && !is(&msgs[i], "user") && !is(&msgs[i], "assistant") &&
		    !is(&msgs[i], "tool"))
			return errmsg_set(e, -EINVAL, "message %zu: role '%.64s' is not supported", i,
					  msgs[i].role);
	}
	r = add(&b, "", 0);
	if (r >= 0 && f == CHAT_FAMILY_CHATML)
		r = render_chatml(&b, msgs, n_msgs, tools, add_assistant);
	else if (r >= 0 && f == CHAT_FAMILY_LLAMA3)
		r = render_llama3(&b, msgs, n_msgs, tools, add_assistant, e);
	else if (r >= 0)
		r = render_mistral(&b, msgs, n_msgs, tools, e);
	if (r < 0) {
		free(b.p);
		return r == -ENOMEM ? errmsg_set(e, r, "out of memory rendering the chat") : r;
	}
	*ret = b.p;
	return 0;
}

/* ---- the model's calls ---- */

const char *chat_tool_call_prefix(enum chat_family f)
{
	switch (f) {
	case CHAT_FAMILY_CHATML:
		return "<tool_call>";
	case CHAT_FAMILY_LLAMA3:
		return "{";
	case CHAT_FAMILY_MISTRAL:
		return "[";
	default:
		return NULL;
	}
}

void chat_parsed_calls_free(struct chat_parsed_call *c, size_t n)
{
	for (size_t i = 0; c && i < n; i++) {
		free(c[i].name);
		free(c[i].arguments);
	}
	free(c);
}

static bool tool_known(struct json_object *tools, const char *name)
{
	for (size_t i = 0; i < json_object_array_length(tools); i++) {
		struct json_object *fn, *n;

		if (json_object_object_get_ex(json_object_array_get_idx(tools, i), "function", &fn) &&
		    json_object_object_get_ex(fn, "name", &n) &&
		    strcmp(json_object_get_string(n), name) == 0)
			return true;
	}
	return false;
}

/* {"name": ..., "<args_key>": {...}} into c */
static int call_from_json(struct json_object *o, const char *args_key, struct json_object *tools,
			  struct chat_parsed_call *c)
{
	struct json_object *name, *args;
	const char *t;

	if (json_object_get_type(o) != json_type_object ||
	    !json_object_object_get_ex(o, "name", &name) ||
	    json_object_get_type(name) != json_type_string ||
	    !tool_known(tools, json_object_get_string(name)))
		return -ENOMSG;
	if (!json_object_object_get_ex(o, args_key, &args) &&
	    !json_object_object_get_ex(o, "arguments", &args))
		args = NULL;
	if (args && json_object_get_type(args) == json_type_string)
		t = json_object_get_string(args); /* already text */
	else if (args)
		t = json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN |
								 JSON_C_TO_STRING_NOSLASHESCAPE);
	else
		t = "{}";
	c->name = strdup(json_object_get_string(name));
	c->arguments = strdup(t);
	return c->name && c->arguments ? 0 : -ENOMEM;
}

/* Parses one JSON value at s (after white space); *ret_end after it. */
static struct json_object *parse_at(const char *s, const char *end, const char **ret_end)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o;

	while (s < end && strchr(" \t\n\r", *s))
		s++;
	if (!tok || s >= end)
		return json_tokener_free(tok), NULL;
	o = json_tokener_parse_ex(tok, s, (int) (end - s));
	if (!o && json_tokener_get_error(tok) == json_tokener_continue)
		o = json_tokener_parse_ex(tok, "", 1); /* a number or literal at the very end */
	if (o && json_tokener_get_error(tok) == json_tokener_success)
		*ret_end = s + json_tokener_get_parse_end(tok);
	else {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	return o;
}

static const char *skip_ws(const char *s, const char *end)
{
	while (s < end && strchr(" \t\n\r", *s))
		s++;
	return s;
}

int chat_tool_calls_parse(enum chat_family f, const char *text, size_t len,
			  const char *tools_json, struct chat_parsed_call **ret, size_t *ret_n)
{
	_cleanup_(json_object_putp) struct json_object *tools = json_tokener_parse(tools_json);
	const char *s = text, *end = text + len;
	struct chat_parsed_call *calls = NULL;
	size_t n = 0;
	int r = -ENOMSG;

	if (json_object_get_type(tools) != json_type_array)
		return -EINVAL;
	s = skip_ws(s, end);
	if (f == CHAT_FAMILY_CHATML) {
		while (s < end) {
			static const char open[] = "<tool_call>", close[] = "</tool_call>";
			struct json_object *o;
			const char *after;
			struct chat_parsed_call *t;

			if ((size_t) (end - s) < strlen(open) || memcmp(s, open, strlen(open)) != 0)
				goto fail;
			o = parse_at(s + strlen(open), end, &after);
			if (!o)
				goto fail;
			t = realloc(calls, sizeof(*calls) * (n + 1));
			if (!t) {
				json_object_put(o);
				r = -ENOMEM;
				goto fail;
			}
			calls = t;
			calls[n] = (struct chat_parsed_call){ 0 };
			r = call_from_json(o, "arguments", tools, &calls[n++]);
			json_object_put(o);
			if (r < 0)
				goto fail;
			r = -ENOMSG;
			s = skip_ws(after, end);
			if ((size_t) (end - s) < strlen(close) || memcmp(s, close, strlen(close)) != 0)
				goto fail;
			s = skip_ws(s + strlen(close), end);
		}
	} else if (f == CHAT_FAMILY_LLAMA3 || f == CHAT_FAMILY_MISTRAL) {
		const char *after;
		struct json_object *o;
		bool list;

		if (f == CHAT_FAMILY_MISTRAL && (size_t) (end - s) >= 12 && memcmp(s, "[TOOL_CALLS]", 12) == 0)
			s += 12;
		o = parse_at(s, end, &after);
		if (!o || skip_ws(after, end) != end) {
			json_object_put(o);
			goto fail;
		}
		list = json_object_get_type(o) == json_type_array;
		if (f == CHAT_FAMILY_MISTRAL && !list) {
			json_object_put(o);
			goto fail;
		}
		n = list ? json_object_array_length(o) : 1;
		calls = n ? calloc(n, sizeof(*calls)) : NULL;
		if (!calls) {
			json_object_put(o);
			n = 0;
			goto fail;
		}
		for (size_t i = 0; i < n && r != -ENOMEM; i++) {
			r = call_from_json(list ? json_object_array_get_idx(o, i) : o,
					   f == CHAT_FAMILY_LLAMA3 ? "parameters" : "arguments", tools,
					   &calls[i]);
			if (r < 0)
				break;
		}
		json_object_put(o);
		if (r < 0)
			goto fail;
	} else {
		return -EOPNOTSUPP;
	}
	if (n == 0)
		goto fail;
	*ret = calls;
	*ret_n = n;
	return 0;
fail:
	chat_parsed_calls_free(calls, n);
	return r == -ENOMEM ? r : -ENOMSG;
}

/* ---- the grammar of a call ---- */

int chat_tool_call_frame(enum chat_family f, const char **ret_open, const char **ret_args_key,
			 const char **ret_close)
{
	switch (f) {
	case CHAT_FAMILY_CHATML:
		*ret_open = "<tool_call>\n{\"name\": ", *ret_close = "}\n</tool_call>";
		*ret_args_key = "arguments";
		return 0;
	case CHAT_FAMILY_LLAMA3:
		*ret_open = "{\"name\": ", *ret_close = "}", *ret_args_key = "parameters";
		return 0;
	case CHAT_FAMILY_MISTRAL:
		*ret_open = "[{\"name\": ", *ret_close = "}]", *ret_args_key = "arguments";
		return 0;
	default:
		return -EOPNOTSUPP;
	}
}

int chat_tools_grammar(enum chat_family f, const char *tools_json, const char *only_name,
		       char **ret, size_t *ret_len, struct errmsg *e)
{
	_cleanup_(json_object_putp) struct json_object *tools = json_tokener_parse(tools_json);
	_cleanup_(schema_gbnf_freep) struct schema_gbnf *b = NULL;
	const char *open, *close, *args_key;
	size_t n_out = 0, len;
	int r;

	if (json_object_get_type(tools) != json_type_array)
		return errmsg_set(e, -EINVAL, "tools must be a JSON array");
	if (chat_tool_call_frame(f, &open, &args_key, &close) < 0)
		return errmsg_set(e, -EOPNOTSUPP, "the %s chat template does not define tool use",
				  chat_family_name(f));
	r = schema_gbnf_new(&b);
	if (r < 0)
		return r;
	/* one rule per tool: "NAME", "args": ARGS */
	char (*names)[32] = calloc(json_object_array_length(tools) + 1, 32);

	if (!names)
		return -ENOMEM;
	for (size_t i = 0; i < json_object_array_length(tools) && r >= 0; i++) {
		struct json_object *fn = NULL, *name = NULL, *params = NULL, *nj;
		const char *rule = NULL;
		struct tbuf lit = { 0 };

		json_object_object_get_ex(json_object_array_get_idx(tools, i), "function", &fn);
		json_object_object_get_ex(fn, "name", &name);
		if (!name || (only_name && strcmp(json_object_get_string(name), only_name) != 0))
			continue;
		if (json_object_object_get_ex(fn, "parameters", &params) && params) {
			r = schema_gbnf_add(b, params, &rule, e);
			if (r < 0) {
				errmsg_prefix(e, r, "tools[%zu].function.parameters", i);
				break;
			}
		} else {
			rule = schema_gbnf_any(b, true);
		}
		snprintf(names[n_out], 32, "tool%zu", n_out);
		nj = json_object_new_string(json_object_get_string(name));
		r = nj ? py_json(&lit, nj, -1, 0) : -ENOMEM;
		json_object_put(nj);
		if (r >= 0)
			r = CAT(&lit, ", \"", args_key, "\": ");
		if (r >= 0)
			r = schema_gbnf_append(b, names[n_out]);
		if (r >= 0)
			r = schema_gbnf_append(b, " ::= ");
		if (r >= 0)
			r = schema_gbnf_literal(b, lit.p, lit.len);
		if (r >= 0)
			r = schema_gbnf_append(b, " ");
		if (r >= 0)
			r = schema_gbnf_append(b, rule);
		if (r >= 0)
			r = schema_gbnf_append(b, "\n");
		free(lit.p);
		n_out++;
	}
	if (r >= 0 && n_out == 0)
		r = errmsg_set(e, -EINVAL, only_name ? "tool_choice names '%s', which is not among "
						       "the tools"
						     : "no tools%s",
			       only_name ? only_name : "");
	if (r >= 0)
		r = schema_gbnf_append(b, "root ::= ");
	if (r >= 0)
		r = schema_gbnf_literal(b, open, strlen(open));
	if (r >= 0)
		r = schema_gbnf_append(b, " (");
	for (size_t i = 0; i < n_out && r >= 0; i++) {
		if (i)
			r = schema_gbnf_append(b, " | ");
		if (r >= 0)
			r = schema_gbnf_append(b, names[i]);
	}
	if (r >= 0)
		r = schema_gbnf_append(b, ") ");
	if (r >= 0)
		r = schema_gbnf_literal(b, close, strlen(close));
	if (r >= 0)
		r = schema_gbnf_append(b, "\n");
	free(names);
	if (r < 0)
		return r;
	{
		const char *t = schema_gbnf_text(b, &len);

		*ret = strndup(t, len);
		if (!*ret)
			return -ENOMEM;
		*ret_len = len;
	}
	return 0;
}
