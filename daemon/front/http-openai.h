/* SPDX-License-Identifier: MIT */
/*
 * http-openai.h: the OpenAI-compatible wire format, without any networking: parsing a
 * request body of POST /v1/completions or /v1/chat/completions into a struct openai_request,
 * and building the JSON of responses, stream chunks, errors and the model list.
 *
 * Parsing is strict where a silent misreading would surprise the client (wrong types,
 * values out of range, invalid UTF-8, trailing garbage, features we do not implement such as
 * n > 1 or tools), and lenient where OpenAI clients differ (unknown fields are ignored, null
 * means "not given"). Every error names the field it is about (openai_error.param).
 * See docs/http.md for the fields and what each does.
 *
 * Threading: no shared state; every function is safe from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/macro.h"

enum openai_endpoint {
	OPENAI_COMPLETIONS,      /* POST /v1/completions */
	OPENAI_CHAT_COMPLETIONS, /* POST /v1/chat/completions */
};

/* Limits on what a client controls (the body size is limited before parsing). */
#define OPENAI_MAX_STOP         16  /* stop strings */
#define OPENAI_MAX_STOP_BYTES   256 /* bytes of one stop string */
#define OPENAI_MAX_LORAS        8   /* entries of "lora" */
#define OPENAI_MAX_MESSAGES     4096
#define OPENAI_MAX_TOP_LOGPROBS 20

#define OPENAI_MAX_TOOLS      128
#define OPENAI_MAX_TOOL_CALLS 64 /* in one assistant message */

struct openai_tool_call {
	char *id;        /* owned */
	char *name;      /* owned */
	char *arguments; /* owned: JSON text, as the client sent it */
};

struct openai_message {
	char *role;    /* owned: "system", "user", "assistant" or "tool" ("developer" becomes
			* "system") */
	char *content; /* owned: text parts joined; never NULL */
	struct openai_tool_call *tool_calls; /* owned: assistant */
	size_t n_tool_calls;
	char *tool_call_id; /* owned: tool (NULL when not given) */
};

enum openai_tool_choice {
	OPENAI_TOOL_CHOICE_AUTO,     /* the default with tools */
	OPENAI_TOOL_CHOICE_NONE,
	OPENAI_TOOL_CHOICE_REQUIRED,
	OPENAI_TOOL_CHOICE_NAMED,    /* tool_choice_name */
};

struct openai_lora {
	char *name; /* owned */
	float scale;
};

struct openai_request {
	enum openai_endpoint endpoint;
	char *model; /* owned; NULL when not given (the base model) */

	/* completions: the prompt (a string, or an array holding one string) */
	char *prompt; /* owned, NUL-free */
	size_t prompt_len;
	/* chat completions */
	struct openai_message *messages; /* owned, n_messages >= 1 */
	size_t n_messages;

	struct openai_lora *loras; /* owned, "lora": [{"name", "scale"}] */
	size_t n_loras;
	char **stop; /* owned, n_stop non-empty strings */
	size_t n_stop;

	bool has_max_tokens;
	uint32_t max_tokens; /* max_tokens or max_completion_tokens */
	bool has_temperature;
	float temperature;
	bool has_top_p;
	float top_p;
	bool has_seed;
	uint64_t seed;   /* negative seeds are taken modulo 2^64 */
	bool ignore_eos; /* vLLM extension */
	float budget;    /* Molly extension "molly": {"budget": X}; 0: [Router] Budget= alone */

	bool stream;
	bool include_usage; /* stream_options.include_usage */

	/* Constrained decoding: GBNF from response_format (json_object, json_schema; compiled
	 * by schema.h) or "molly": {"grammar"}; checked by grammar_parse_cached(). NULL: free. */
	char *grammar; /* owned */
	/* chat: "tools" (the array as JSON text; NULL: none) and "tool_choice" */
	char *tools_json; /* owned */
	enum openai_tool_choice tool_choice;
	char *tool_choice_name; /* owned: NAMED */

	/* completions: "logprobs": N (0..20) → logprobs on, top_logprobs = N;
	 * chat: "logprobs": true, "top_logprobs": N. Only the sampled token is reported in
	 * top_logprobs (the scheduler does not expose alternatives). */
	bool logprobs;
	uint32_t top_logprobs;
};

struct openai_error {
	int status;       /* HTTP status */
	const char *type; /* static: "invalid_request_error", ... */
	const char *code; /* static or NULL: "model_not_found", "context_length_exceeded", ... */
	char param[64];   /* the offending field ("" when none) */
	char message[512];
};

/* Fills err and returns -EINVAL (or whatever r is) so callers can `return openai_error_set(...)`.
 */
_printf_(6, 7) int openai_error_set(struct openai_error *err, int r, int status, const char *code,
				    const char *param, const char *fmt, ...);
/* The OpenAI error "type" for an HTTP status. */
const char *openai_error_type(int status);

/*
 * Parses a request body. 0 and *ret filled (free with openai_request_done()), or -EINVAL /
 * -ENOMEM with err filled (status 400 or 500). body need not be NUL-terminated.
 */
int openai_request_parse(enum openai_endpoint endpoint, const char *body, size_t len,
			 struct openai_request *ret, struct openai_error *err);
void openai_request_done(struct openai_request *r);

/* Parses the bodies of vLLM's POST /v1/load_lora_adapter ({"lora_name", "lora_path"}) and
 * /v1/unload_lora_adapter ({"lora_name"}; want_path false). Strings are malloc'd. */
int openai_parse_lora_admin(const char *body, size_t len, bool want_path, char **ret_name,
			    char **ret_path, struct openai_error *err);

/* true when s[0..len) is valid UTF-8 (no overlongs, surrogates or code points > U+10FFFF). */
bool utf8_is_valid(const char *s, size_t len);

/* ---- building responses: each returns a malloc'd NUL-terminated string, or NULL on OOM ---- */

/* {"error":{"message","type","param","code"}} */
char *openai_error_json(const struct openai_error *err);

/* One generated token's logprob, as reported with logprobs on. */
struct openai_logprob {
	char *token; /* owned: the token's piece (may be invalid UTF-8 alone: see bytes) */
	size_t token_len;
	float logprob;
	size_t text_offset; /* completions: byte offset of the token in the whole text */
};

struct openai_result {
	const char *id;    /* "cmpl-..." or "chatcmpl-..." */
	const char *model; /* the model as the client named it (or the base) */
	int64_t created;   /* unix seconds */
	const char *text;
	size_t text_len;
	const char *finish_reason; /* "stop", "length"; NULL in a stream chunk that does not end */
	uint32_t prompt_tokens;
	uint32_t completion_tokens;
	const struct openai_logprob *logprobs; /* NULL when logprobs are off */
	size_t n_logprobs;
	/* Routed requests (docs/http.md): "molly": {"target", "confidence", "uncertainty"} in
	 * the response and the final stream chunk. target NULL: no "molly" object. */
	const char *target;
	bool has_confidence;
	double confidence;
	const char *uncertainty;
	/* chat: the model's tool calls (then finish_reason is "tool_calls" and content null) */
	const struct openai_tool_call *tool_calls;
	size_t n_tool_calls;
};

/* The whole (non-streamed) response of a completion or chat completion. */
char *openai_response_json(enum openai_endpoint endpoint, const struct openai_result *r);

/*
 * One server-sent event "data: {...}\n\n" of a stream. For chat, role_chunk makes the first
 * chunk ({"delta":{"role":"assistant","content":""}}); otherwise the chunk carries r->text
 * (and r->logprobs) and, when r->finish_reason is set, the finish reason. usage_chunk makes
 * the final {"choices":[],"usage":{...}} chunk of stream_options.include_usage.
 */
char *openai_stream_chunk(enum openai_endpoint endpoint, const struct openai_result *r,
			  bool role_chunk, bool usage_chunk);
/* The chunks of a stream that carry tool calls, as OpenAI sends them: per call one delta with
 * index, id, type and the name (arguments ""), then one with the arguments. */
char *openai_stream_tool_calls(const struct openai_result *r);
/* One such delta: with id (and name) the call's first, else a fragment of its arguments. */
char *openai_stream_tool_call_delta(const struct openai_result *r, size_t index, const char *id,
				    const char *name, const char *args, size_t args_len);
/* "data: {"error":{...}}\n\n" */
char *openai_stream_error(const struct openai_error *err);
#define OPENAI_STREAM_DONE "data: [DONE]\n\n"

struct openai_model_entry {
	const char *id;
	const char *parent; /* NULL for the base */
};
/* {"object":"list","data":[{"id","object":"model","created","owned_by":"molly","root",
 * "parent"}, ...]} */
char *openai_models_json(const struct openai_model_entry *models, size_t n, int64_t created);
/* One entry of that list alone (GET /v1/models/{id}). */
char *openai_model_json(const struct openai_model_entry *model, int64_t created);
