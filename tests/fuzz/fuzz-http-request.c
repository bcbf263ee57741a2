/* SPDX-License-Identifier: MIT */
/*
 * fuzz-http-request: libFuzzer target for the HTTP front's body parser (http-openai.c).
 *
 * The first input byte picks the endpoint (its value modulo 4: /v1/completions,
 * /v1/chat/completions, /v1/load_lora_adapter, /v1/unload_lora_adapter); the rest is the body.
 * A parse that succeeds must give a request that keeps its promises (valid UTF-8 without NUL,
 * limits held), and the responses built from it (whole answer, stream chunks, error bodies)
 * must be valid JSON that gives the text back unchanged: a bug in escaping or in a bound shows
 * up as an abort or an ASan report.
 *
 *   build/fuzz/bin/fuzz-http-request -max_total_time=60 /tmp/scratch tests/fuzz/corpus/http-request
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "front/http-openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                 \
	do {                     \
		if (!(x))        \
			abort(); \
	} while (0)

static void check_text(const char *s, size_t len)
{
	CHECK(s);
	CHECK(!memchr(s, '\0', len));
	CHECK(utf8_is_valid(s, len));
}

/* json (a whole document, or "data: {...}\n\n") must parse; returns it (caller puts it). */
static struct json_object *parse_out(const char *json, bool sse)
{
	struct json_object *o;
	size_t len;

	CHECK(json);
	len = strlen(json);
	CHECK(utf8_is_valid(json, len));
	if (sse) {
		CHECK(len > 8 && strncmp(json, "data: ", 6) == 0);
		CHECK(json[len - 1] == '\n' && json[len - 2] == '\n');
		/* one event: no blank line inside */
		CHECK(!strstr(json, "\n\n") || strstr(json, "\n\n") == json + len - 2);
		json += 6;
	}
	o = json_tokener_parse(json);
	CHECK(o);
	return o;
}

static void check_error_bodies(const struct openai_error *err)
{
	struct json_object *o, *e, *m;
	char *s;

	CHECK(err->status >= 400 && err->status < 600);
	check_text(err->message, strlen(err->message));
	s = openai_error_json(err);
	o = parse_out(s, false);
	CHECK(json_object_object_get_ex(o, "error", &e));
	CHECK(json_object_object_get_ex(e, "message", &m));
	CHECK(strcmp(json_object_get_string(m), err->message) == 0);
	json_object_put(o);
	free(s);
	s = openai_stream_error(err);
	json_object_put(parse_out(s, true));
	free(s);
}

static const char *choice_text(struct json_object *o, bool chat, bool chunk)
{
	struct json_object *choices, *c, *v;

	CHECK(json_object_object_get_ex(o, "choices", &choices));
	c = json_object_array_get_idx(choices, 0);
	CHECK(c);
	if (chat) {
		CHECK(json_object_object_get_ex(c, chunk ? "delta" : "message", &v));
		CHECK(json_object_object_get_ex(v, "content", &v));
	} else {
		CHECK(json_object_object_get_ex(c, "text", &v));
	}
	return json_object_get_string(v);
}

static void check_responses(const struct openai_request *r)
{
	bool chat = r->endpoint == OPENAI_CHAT_COMPLETIONS;
	/* echo the request's strings back as if generated: the prompt, or the last message */
	const char *text = chat ? r->messages[r->n_messages - 1].content : r->prompt;
	struct openai_logprob lps[OPENAI_MAX_STOP + 1];
	struct openai_result res = {
		.id = "cmpl-fuzz",
		.model = r->model ? r->model : "base",
		.created = 1,
		.text = text,
		.text_len = strlen(text),
		.finish_reason = "stop",
		.prompt_tokens = 1,
		.completion_tokens = (uint32_t) r->n_stop,
	};
	struct json_object *o;
	size_t n = 0;
	char *s;

	/* stop strings play the tokens (pieces may be any bytes: cut one in half too) */
	for (size_t i = 0; i < r->n_stop; i++)
		lps[n++] = (struct openai_logprob){ .token = r->stop[i],
						    .token_len = strlen(r->stop[i]),
						    .logprob = -(float) i,
						    .text_offset = i };
	if (r->n_stop && strlen(r->stop[0]) > 1)
		lps[n++] = (struct openai_logprob){ .token = r->stop[0], .token_len = 1 };
	if (r->logprobs) {
		res.logprobs = lps;
		res.n_logprobs = n;
	}

	s = openai_response_json(r->endpoint, &res);
	o = parse_out(s, false);
	CHECK(strcmp(choice_text(o, chat, false), text) == 0);
	json_object_put(o);
	free(s);

	res.finish_reason = NULL; /* a chunk in the middle of the stream */
	s = openai_stream_chunk(r->endpoint, &res, false, false);
	o = parse_out(s, true);
	CHECK(strcmp(choice_text(o, chat, true), text) == 0);
	json_object_put(o);
	free(s);
	res.finish_reason = "length"; /* the last one (chat: an empty delta) */
	s = openai_stream_chunk(r->endpoint, &res, false, false);
	json_object_put(parse_out(s, true));
	free(s);
	if (chat) {
		s = openai_stream_chunk(r->endpoint, &res, true, false);
		json_object_put(parse_out(s, true));
		free(s);
	}
	s = openai_stream_chunk(r->endpoint, &res, false, true);
	json_object_put(parse_out(s, true));
	free(s);
}

static void check_request(const struct openai_request *r)
{
	if (r->endpoint == OPENAI_COMPLETIONS) {
		CHECK(r->prompt && r->prompt_len == strlen(r->prompt));
		check_text(r->prompt, r->prompt_len);
		CHECK(!r->messages && r->n_messages == 0);
	} else {
		CHECK(!r->prompt);
		CHECK(r->n_messages >= 1 && r->n_messages <= OPENAI_MAX_MESSAGES);
		for (size_t i = 0; i < r->n_messages; i++) {
			const char *role = r->messages[i].role;

			CHECK(!strcmp(role, "system") || !strcmp(role, "user") ||
			      !strcmp(role, "assistant") || !strcmp(role, "tool"));
			check_text(r->messages[i].content, strlen(r->messages[i].content));
			for (size_t j = 0; j < r->messages[i].n_tool_calls; j++) {
				const struct openai_tool_call *c = &r->messages[i].tool_calls[j];

				CHECK(!strcmp(role, "assistant"));
				check_text(c->name, strlen(c->name));
				check_text(c->arguments, strlen(c->arguments));
			}
			if (r->messages[i].tool_call_id)
				check_text(r->messages[i].tool_call_id,
					   strlen(r->messages[i].tool_call_id));
		}
	}
	if (r->model)
		check_text(r->model, strlen(r->model));
	if (r->tools_json)
		check_text(r->tools_json, strlen(r->tools_json));
	if (r->grammar)
		check_text(r->grammar, strlen(r->grammar));
	CHECK(r->n_stop <= OPENAI_MAX_STOP);
	for (size_t i = 0; i < r->n_stop; i++) {
		size_t len = strlen(r->stop[i]);

		CHECK(len > 0 && len <= OPENAI_MAX_STOP_BYTES);
		check_text(r->stop[i], len);
	}
	CHECK(r->n_loras <= OPENAI_MAX_LORAS);
	for (size_t i = 0; i < r->n_loras; i++) {
		check_text(r->loras[i].name, strlen(r->loras[i].name));
		CHECK(r->loras[i].scale >= -100 && r->loras[i].scale <= 100);
	}
	CHECK(!r->has_temperature || (r->temperature >= 0 && r->temperature <= 100));
	CHECK(!r->has_top_p || (r->top_p > 0 && r->top_p <= 1));
	CHECK(r->top_logprobs <= OPENAI_MAX_TOP_LOGPROBS);
	CHECK(!r->include_usage || r->stream);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct openai_error err = { 0 };
	const char *body;
	size_t len;
	int k;

	if (size < 1)
		return 0;
	body = (const char *) data + 1;
	len = size - 1;
	switch (data[0] % 4) {
	case 0:
	case 1: {
		struct openai_request r;
		enum openai_endpoint ep =
		    data[0] % 4 ? OPENAI_CHAT_COMPLETIONS : OPENAI_COMPLETIONS;

		k = openai_request_parse(ep, body, len, &r, &err);
		if (k < 0) {
			check_error_bodies(&err);
			return 0;
		}
		CHECK(r.endpoint == ep);
		check_request(&r);
		check_responses(&r);
		openai_request_done(&r);
		return 0;
	}
	default: {
		char *name = NULL, *path = NULL;
		bool want_path = data[0] % 4 == 2;

		k = openai_parse_lora_admin(body, len, want_path, &name, want_path ? &path : NULL,
					    &err);
		if (k < 0) {
			check_error_bodies(&err);
			return 0;
		}
		CHECK(name && name[0]);
		check_text(name, strlen(name));
		CHECK(!want_path || (path && path[0]));
		free(name);
		free(path);
		return 0;
	}
	}
}
