/* SPDX-License-Identifier: MIT */
/*
 * test-http: the HTTP front's pure parts: request parsing and response building
 * (http-openai), API keys (keys), and the Prometheus page (metrics). The daemon end to end is
 * tested by tests/integration/http-*.sh.
 */
#include <json-c/json.h>

#include "core/config.h"
#include "front/http-openai.h"
#include "front/keys.h"
#include "front/metrics.h"
#include "test.h"

static int parse(enum openai_endpoint ep, const char *body, struct openai_request *r,
		 struct openai_error *err)
{
	memset(err, 0, sizeof(*err));
	return openai_request_parse(ep, body, strlen(body), r, err);
}

TEST(parse_completion_fields)
{
	struct openai_request r;
	struct openai_error err;

	ASSERT_OK(parse(
	    OPENAI_COMPLETIONS,
	    "{\"model\": \"base:attn\", \"prompt\": [\"Once \\u00e9\"], \"max_tokens\": 16.0,"
	    " \"temperature\": 0, \"top_p\": 0.5, \"seed\": -1, \"stop\": [\"a\", \"\", \"b\"],"
	    " \"stream\": true, \"stream_options\": {\"include_usage\": true},"
	    " \"logprobs\": 2, \"lora\": [{\"name\": \"x\", \"scale\": 0.5}, {\"name\": \"y\"}],"
	    " \"ignore_eos\": true, \"user\": \"u\", \"unknown\": [1, 2], \"n\": 1, \"echo\": "
	    "false}",
	    &r, &err));
	ASSERT_STREQ(r.model, "base:attn");
	ASSERT_STREQ(r.prompt, "Once \xc3\xa9");
	ASSERT_EQ(r.prompt_len, (size_t) 7);
	ASSERT_TRUE(r.has_max_tokens && r.max_tokens == 16);
	ASSERT_TRUE(r.has_temperature && r.temperature == 0);
	ASSERT_TRUE(r.has_top_p && r.top_p == 0.5f);
	ASSERT_TRUE(r.has_seed && r.seed == UINT64_MAX);
	ASSERT_EQ(r.n_stop, (size_t) 2); /* "" stops nothing and is dropped */
	ASSERT_STREQ(r.stop[1], "b");
	ASSERT_TRUE(r.stream && r.include_usage && r.ignore_eos);
	ASSERT_TRUE(r.logprobs && r.top_logprobs == 2);
	ASSERT_EQ(r.n_loras, (size_t) 2);
	ASSERT_STREQ(r.loras[1].name, "y");
	ASSERT_TRUE(r.loras[0].scale == 0.5f && r.loras[1].scale == 1.0f);
	openai_request_done(&r);

	/* a lone surrogate escape becomes U+FFFD (json-c), never invalid UTF-8 */
	ASSERT_OK(parse(OPENAI_COMPLETIONS, "{\"prompt\": \"a\\ud800b\"}", &r, &err));
	ASSERT_STREQ(r.prompt, "a\xef\xbf\xbd"
			       "b");
	openai_request_done(&r);

	/* null means "not given"; "" model is the base */
	ASSERT_OK(
	    parse(OPENAI_COMPLETIONS,
		  "{\"model\": \"\", \"prompt\": \"x\", \"max_tokens\": null, \"stop\": null}", &r,
		  &err));
	ASSERT_TRUE(!r.model && !r.has_max_tokens && r.n_stop == 0 && !r.stream);
	openai_request_done(&r);
	return 0;
}

TEST(parse_chat_fields)
{
	struct openai_request r;
	struct openai_error err;

	ASSERT_OK(
	    parse(OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"developer\", \"content\": \"Be kind.\"},"
		  " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hel\"},"
		  " {\"type\": \"text\", \"text\": \"lo\"}]},"
		  " {\"role\": \"assistant\", \"content\": null}],"
		  " \"max_tokens\": 5, \"max_completion_tokens\": 7, \"logprobs\": true,"
		  " \"top_logprobs\": 3, \"tools\": [], \"response_format\": {\"type\": \"text\"}}",
		  &r, &err));
	ASSERT_EQ(r.n_messages, (size_t) 3);
	ASSERT_STREQ(r.messages[0].role, "system");
	ASSERT_STREQ(r.messages[1].content, "Hello");
	ASSERT_STREQ(r.messages[2].role, "assistant");
	ASSERT_STREQ(r.messages[2].content, "");
	ASSERT_EQ(r.max_tokens, (uint32_t) 7);
	ASSERT_TRUE(r.logprobs && r.top_logprobs == 3);
	ASSERT_TRUE(!r.prompt);
	openai_request_done(&r);
	return 0;
}

/* issue #21: response_format, molly.grammar, tools, tool_choice and tool messages */
TEST(parse_structured_and_tools)
{
	struct openai_request r;
	struct openai_error err;

	ASSERT_OK(parse(OPENAI_COMPLETIONS,
			"{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", "
			"\"json_schema\": {\"name\": \"n\", \"strict\": true, \"schema\": {\"type\": "
			"\"object\", \"properties\": {\"a\": {\"enum\": [1, 2]}}, \"required\": [\"a\"]}}}}",
			&r, &err));
	ASSERT_TRUE(r.grammar && strstr(r.grammar, "root ::= ") != NULL);
	openai_request_done(&r);
	ASSERT_OK(parse(OPENAI_COMPLETIONS,
			"{\"prompt\": \"x\", \"molly\": {\"grammar\": \"root ::= [a-z]+\"}}", &r, &err));
	ASSERT_STREQ(r.grammar, "root ::= [a-z]+");
	openai_request_done(&r);
	ASSERT_OK(parse(OPENAI_CHAT_COMPLETIONS,
			"{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"},"
			" {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\","
			" \"type\": \"function\", \"function\": {\"name\": \"get\", \"arguments\":"
			" \"{\\\"q\\\": 1}\"}}]},"
			" {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"sunny\"}],"
			" \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\","
			" \"parameters\": {\"type\": \"object\"}}}],"
			" \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"get\"}}}",
			&r, &err));
	ASSERT_EQ(r.messages[1].n_tool_calls, (size_t) 1);
	ASSERT_STREQ(r.messages[1].tool_calls[0].name, "get");
	ASSERT_STREQ(r.messages[1].tool_calls[0].arguments, "{\"q\": 1}");
	ASSERT_STREQ(r.messages[2].role, "tool");
	ASSERT_STREQ(r.messages[2].tool_call_id, "c1");
	ASSERT_TRUE(r.tools_json && strstr(r.tools_json, "\"get\"") != NULL);
	ASSERT_EQ(r.tool_choice, OPENAI_TOOL_CHOICE_NAMED);
	ASSERT_STREQ(r.tool_choice_name, "get");
	openai_request_done(&r);
	return 0;
}

TEST(build_tool_calls)
{
	struct openai_tool_call calls[] = { { .id = "abc", .name = "get", .arguments = "{\"q\":1}" } };
	struct openai_result res = { .id = "chatcmpl-1", .model = "m", .created = 1,
				     .finish_reason = "tool_calls", .tool_calls = calls,
				     .n_tool_calls = 1 };
	char *s = openai_response_json(OPENAI_CHAT_COMPLETIONS, &res);
	struct json_object *o, *msg, *v;

	ASSERT_TRUE(s != NULL);
	o = json_tokener_parse(s);
	free(s);
	msg = json_object_object_get(
	    json_object_array_get_idx(json_object_object_get(o, "choices"), 0), "message");
	ASSERT_TRUE(json_object_object_get_ex(msg, "content", &v) && v == NULL);
	v = json_object_array_get_idx(json_object_object_get(msg, "tool_calls"), 0);
	ASSERT_STREQ(json_object_get_string(json_object_object_get(v, "type")), "function");
	ASSERT_STREQ(json_object_get_string(json_object_object_get(
			 json_object_object_get(v, "function"), "arguments")),
		     "{\"q\":1}");
	json_object_put(o);

	s = openai_stream_tool_calls(&res);
	ASSERT_TRUE(s != NULL);
	/* two events: name (arguments "") then the arguments, each with index 0 */
	ASSERT_TRUE(strstr(s, "\"index\":0,\"id\":\"abc\",\"type\":\"function\","
			      "\"function\":{\"name\":\"get\",\"arguments\":\"\"}") != NULL);
	ASSERT_TRUE(strstr(s, "\"index\":0,\"function\":{\"arguments\":\"{\\\"q\\\":1}\"}") != NULL);
	free(s);
	return 0;
}

TEST(parse_errors_name_the_field)
{
	static const struct {
		enum openai_endpoint ep;
		const char *body;
		int status;
		const char *param; /* "" for none */
		const char *code;  /* NULL for none */
	} cases[] = {
		{ OPENAI_COMPLETIONS, "", 400, "", "invalid_json" },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\"", 400, "", "invalid_json" },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\"} {}", 400, "", "invalid_json" },
		{ OPENAI_COMPLETIONS, "{\"prompt\": 'x'}", 400, "", "invalid_json" },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"\xc3\x28\"}", 400, "", "invalid_utf8" },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"\xed\xa0\x80\"}", 400, "", "invalid_utf8" },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"a\\u0000b\"}", 400, "prompt", NULL },
		{ OPENAI_COMPLETIONS, "[]", 400, "", NULL },
		{ OPENAI_COMPLETIONS, "{}", 400, "prompt", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": [1, 2]}", 400, "prompt", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": [\"a\", \"b\"]}", 400, "prompt", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"max_tokens\": \"5\"}", 400,
		  "max_tokens", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"max_tokens\": 0}", 400, "max_tokens",
		  NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"max_tokens\": 1.5}", 400, "max_tokens",
		  NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"max_tokens\": 99999999999}", 400,
		  "max_tokens", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"temperature\": -1}", 400,
		  "temperature", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"top_p\": 0}", 400, "top_p", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"seed\": \"1\"}", 400, "seed", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"stream\": 1}", 400, "stream", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"stream_options\": {}}", 400,
		  "stream_options", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"stop\": [1]}", 400, "stop", NULL },
		{ OPENAI_COMPLETIONS,
		  "{\"prompt\": \"x\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\","
		  "\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
		  400, "stop", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"lora\": [{\"scale\": 1}]}", 400,
		  "lora.name", NULL },
		{ OPENAI_COMPLETIONS,
		  "{\"prompt\": \"x\", \"lora\": [{\"name\": \"a\"}, {\"name\": \"a\"}]}", 400,
		  "lora", NULL },
		{ OPENAI_COMPLETIONS,
		  "{\"prompt\": \"x\", \"lora\": [{\"name\": \"a\", \"scale\": \"1\"}]}", 400,
		  "lora.scale", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"logprobs\": true}", 400, "logprobs",
		  NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"n\": 2}", 400, "n", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"echo\": true}", 400, "echo", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"suffix\": \"y\"}", 400, "suffix",
		  NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"presence_penalty\": 1}", 400,
		  "presence_penalty", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"top_k\": 5}", 400, "top_k", NULL },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"logit_bias\": {\"1\": 2}}", 400,
		  "logit_bias", NULL },
		{ OPENAI_CHAT_COMPLETIONS, "{\"messages\": {}}", 400, "messages", NULL },
		{ OPENAI_CHAT_COMPLETIONS, "{\"messages\": []}", 400, "messages", NULL },
		{ OPENAI_CHAT_COMPLETIONS, "{\"messages\": [{\"content\": \"x\"}]}", 400,
		  "messages.role", NULL },
		{ OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", 400,
		  "messages.role", NULL },
		{ OPENAI_CHAT_COMPLETIONS, "{\"messages\": [{\"role\": \"user\"}]}", 400,
		  "messages.content", NULL },
		{ OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
		  "\"image_url\"}]}]}",
		  400, "messages.content", NULL },
		{ OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}",
		  400, "top_logprobs", NULL },
		{ OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{}]}",
		  400, "tools", NULL },
		{ OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": "
		  "{\"type\": \"xml\"}}",
		  400, "response_format.type", NULL },
		/* issue #21: structured outputs and tools */
		{ OPENAI_COMPLETIONS,
		  "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", "
		  "\"json_schema\": {\"name\": \"a\", \"schema\": {\"type\": \"string\", "
		  "\"format\": \"email\"}}}}",
		  400, "response_format.json_schema.schema", "invalid_schema" },
		{ OPENAI_COMPLETIONS,
		  "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", "
		  "\"json_schema\": {\"name\": \"a\", \"schema\": {\"$defs\": {\"a\": {\"$ref\": "
		  "\"#/$defs/a\"}}, \"$ref\": \"#/$defs/a\"}}}}",
		  400, "response_format.json_schema.schema", "invalid_schema" },
		{ OPENAI_COMPLETIONS, "{\"prompt\": \"x\", \"molly\": {\"grammar\": \"root ::= foo\"}}",
		  400, "molly.grammar", NULL },
		{ OPENAI_COMPLETIONS,
		  "{\"prompt\": \"x\", \"molly\": {\"grammar\": \"root ::= \\\"a\\\"\"}, "
		  "\"response_format\": {\"type\": \"json_object\"}}",
		  400, "response_format", NULL },
		{ OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": "
		  "\"required\"}",
		  400, "tool_choice", NULL },
		{ OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
		  "[{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}",
		  400, "tools.function.name", NULL },
		{ OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
		  "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
		  "{\"type\": \"object\", \"patternProperties\": {}}}}]}",
		  400, "tools.function.parameters", "invalid_schema" },
		{ OPENAI_CHAT_COMPLETIONS,
		  "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c\"}]}]}",
		  400, "messages.tool_calls", NULL },
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		struct openai_request r;
		struct openai_error err;
		int k = parse(cases[i].ep, cases[i].body, &r, &err);

		if (k >= 0) {
			fprintf(stderr, "case %zu (%s) parsed\n", i, cases[i].body);
			openai_request_done(&r);
			return 1;
		}
		if (err.status != cases[i].status || strcmp(err.param, cases[i].param) != 0 ||
		    (cases[i].code ? !err.code || strcmp(err.code, cases[i].code) != 0
				   : !!err.code) ||
		    !err.message[0]) {
			fprintf(stderr, "case %zu (%s): status %d param '%s' code %s: %s\n", i,
				cases[i].body, err.status, err.param, err.code ? err.code : "null",
				err.message);
			return 1;
		}
	}
	return 0;
}

TEST(parse_lora_admin)
{
	struct openai_error err;
	char *name = NULL, *path = NULL;
	const char *b = "{\"lora_name\": \"attn\", \"lora_path\": \"/a/b.gguf\"}";

	ASSERT_OK(openai_parse_lora_admin(b, strlen(b), true, &name, &path, &err));
	ASSERT_STREQ(name, "attn");
	ASSERT_STREQ(path, "/a/b.gguf");
	free(name);
	free(path);
	b = "{\"lora_name\": \"attn\"}";
	ASSERT_ERR(openai_parse_lora_admin(b, strlen(b), true, &name, &path, &err), -EINVAL);
	ASSERT_STREQ(err.param, "lora_path");
	ASSERT_OK(openai_parse_lora_admin(b, strlen(b), false, &name, NULL, &err));
	ASSERT_STREQ(name, "attn");
	free(name);
	b = "{\"lora_name\": \"\"}";
	ASSERT_ERR(openai_parse_lora_admin(b, strlen(b), false, &name, NULL, &err), -EINVAL);
	return 0;
}

TEST(utf8_validation)
{
	ASSERT_TRUE(utf8_is_valid("", 0));
	ASSERT_TRUE(utf8_is_valid("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10));
	ASSERT_TRUE(!utf8_is_valid("\xc3", 1));             /* truncated */
	ASSERT_TRUE(!utf8_is_valid("\xc0\xaf", 2));         /* overlong */
	ASSERT_TRUE(!utf8_is_valid("\xe0\x80\xaf", 3));     /* overlong */
	ASSERT_TRUE(!utf8_is_valid("\xed\xa0\x80", 3));     /* surrogate */
	ASSERT_TRUE(!utf8_is_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	ASSERT_TRUE(!utf8_is_valid("\x80", 1));
	ASSERT_TRUE(!utf8_is_valid("\xff", 1));
	return 0;
}

static struct json_object *parse_json(const char *s, bool sse)
{
	if (!s)
		return NULL;
	if (sse) {
		size_t n = strlen(s);

		if (strncmp(s, "data: ", 6) != 0 || n < 8 || strcmp(s + n - 2, "\n\n") != 0)
			return NULL;
		s += 6;
	}
	return json_tokener_parse(s);
}

static const char *get_path(struct json_object *o, const char *path)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *t = strtok_r(buf, ".", &save); t && o; t = strtok_r(NULL, ".", &save)) {
		if (t[0] >= '0' && t[0] <= '9')
			o = json_object_array_get_idx(o, (size_t) atoi(t));
		else if (!json_object_object_get_ex(o, t, &o))
			return NULL;
	}
	return o ? json_object_get_string(o) : "null";
}

TEST(build_responses)
{
	struct openai_logprob lps[] = {
		{ .token = (char *) "\"a", .token_len = 2, .logprob = -0.5f, .text_offset = 0 },
		{ .token = (char *) "\xe2\x82",
		  .token_len = 2,
		  .logprob = -1.0f,
		  .text_offset = 2 },
	};
	struct openai_result res = { .id = "cmpl-1",
				     .model = "m/1",
				     .created = 42,
				     .text = "\"a\n\xe2\x82\xac",
				     .text_len = 6,
				     .finish_reason = "length",
				     .prompt_tokens = 3,
				     .completion_tokens = 2,
				     .logprobs = lps,
				     .n_logprobs = 2 };
	struct json_object *o;
	char *s;

	s = openai_response_json(OPENAI_COMPLETIONS, &res);
	o = parse_json(s, false);
	ASSERT_TRUE(o);
	ASSERT_STREQ(get_path(o, "object"), "text_completion");
	ASSERT_STREQ(get_path(o, "model"), "m/1");
	ASSERT_TRUE(strstr(s, "\"m/1\"")); /* no needless \/ */
	ASSERT_STREQ(get_path(o, "choices.0.text"), "\"a\n\xe2\x82\xac");
	ASSERT_STREQ(get_path(o, "choices.0.finish_reason"), "length");
	ASSERT_STREQ(get_path(o, "choices.0.logprobs.tokens.0"), "\"a");
	/* half a character is shown as U+FFFD */
	ASSERT_STREQ(get_path(o, "choices.0.logprobs.tokens.1"), "\xef\xbf\xbd\xef\xbf\xbd");
	ASSERT_STREQ(get_path(o, "choices.0.logprobs.text_offset.1"), "2");
	ASSERT_STREQ(get_path(o, "usage.total_tokens"), "5");
	json_object_put(o);
	free(s);

	s = openai_response_json(OPENAI_CHAT_COMPLETIONS, &res);
	o = parse_json(s, false);
	ASSERT_TRUE(o);
	ASSERT_STREQ(get_path(o, "object"), "chat.completion");
	ASSERT_STREQ(get_path(o, "choices.0.message.role"), "assistant");
	ASSERT_STREQ(get_path(o, "choices.0.message.content"), "\"a\n\xe2\x82\xac");
	ASSERT_STREQ(get_path(o, "choices.0.logprobs.content.1.bytes.0"), "226");
	ASSERT_STREQ(get_path(o, "choices.0.logprobs.content.0.top_logprobs.0.token"), "\"a");
	json_object_put(o);
	free(s);

	res.finish_reason = NULL;
	res.logprobs = NULL;
	s = openai_stream_chunk(OPENAI_CHAT_COMPLETIONS, &res, true, false);
	o = parse_json(s, true);
	ASSERT_TRUE(o);
	ASSERT_STREQ(get_path(o, "object"), "chat.completion.chunk");
	ASSERT_STREQ(get_path(o, "choices.0.delta.role"), "assistant");
	ASSERT_STREQ(get_path(o, "choices.0.finish_reason"), "null");
	json_object_put(o);
	free(s);
	s = openai_stream_chunk(OPENAI_CHAT_COMPLETIONS, &res, false, false);
	o = parse_json(s, true);
	ASSERT_STREQ(get_path(o, "choices.0.delta.content"), "\"a\n\xe2\x82\xac");
	ASSERT_TRUE(!strchr(s + 6, '\n') || strchr(s + 6, '\n') == s + strlen(s) - 2);
	json_object_put(o);
	free(s);
	res.finish_reason = "stop";
	res.text_len = 0;
	s = openai_stream_chunk(OPENAI_CHAT_COMPLETIONS, &res, false, false);
	o = parse_json(s, true);
	ASSERT_STREQ(get_path(o, "choices.0.finish_reason"), "stop");
	ASSERT_TRUE(!get_path(o, "choices.0.delta.content")); /* an empty delta */
	json_object_put(o);
	free(s);
	s = openai_stream_chunk(OPENAI_COMPLETIONS, &res, false, true);
	o = parse_json(s, true);
	ASSERT_EQ(json_object_array_length(json_object_object_get(o, "choices")), (size_t) 0);
	ASSERT_STREQ(get_path(o, "usage.completion_tokens"), "2");
	json_object_put(o);
	free(s);
	return 0;
}

TEST(build_errors_and_models)
{
	struct openai_error err;
	struct openai_model_entry models[] = { { "base", NULL }, { "attn", "base" } };
	struct json_object *o;
	char *s;

	openai_error_set(&err, -EINVAL, 404, "model_not_found", "model",
			 "The model `%s` is \"gone\"", "x");
	s = openai_error_json(&err);
	o = parse_json(s, false);
	ASSERT_TRUE(o);
	ASSERT_STREQ(get_path(o, "error.message"), "The model `x` is \"gone\"");
	ASSERT_STREQ(get_path(o, "error.type"), "invalid_request_error");
	ASSERT_STREQ(get_path(o, "error.code"), "model_not_found");
	ASSERT_STREQ(get_path(o, "error.param"), "model");
	json_object_put(o);
	free(s);
	openai_error_set(&err, -EINVAL, 429, NULL, NULL, "full");
	s = openai_stream_error(&err);
	o = parse_json(s, true);
	ASSERT_STREQ(get_path(o, "error.type"), "rate_limit_error");
	ASSERT_STREQ(get_path(o, "error.code"), "null");
	ASSERT_STREQ(get_path(o, "error.param"), "null");
	json_object_put(o);
	free(s);

	s = openai_models_json(models, 2, 7);
	o = parse_json(s, false);
	ASSERT_STREQ(get_path(o, "object"), "list");
	ASSERT_STREQ(get_path(o, "data.0.id"), "base");
	ASSERT_STREQ(get_path(o, "data.0.parent"), "null");
	ASSERT_STREQ(get_path(o, "data.1.parent"), "base");
	ASSERT_STREQ(get_path(o, "data.1.owned_by"), "molly");
	json_object_put(o);
	free(s);
	return 0;
}

TEST(keys_generate_and_hash)
{
	char a[KEYS_KEY_SIZE], b[KEYS_KEY_SIZE], h[KEYS_HASH_STRING_SIZE];

	ASSERT_OK(keys_generate(a));
	ASSERT_OK(keys_generate(b));
	ASSERT_EQ(strlen(a), (size_t) 49);
	ASSERT_TRUE(strncmp(a, "molly-", 6) == 0);
	ASSERT_EQ(strspn(a + 6, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
		  (size_t) 43);
	ASSERT_TRUE(strcmp(a, b) != 0);
	keys_hash_string("abc", 3, h);
	ASSERT_STREQ(h, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	ASSERT_TRUE(keys_equal_ct("abcd", "abcd", 4));
	ASSERT_TRUE(!keys_equal_ct("abcd", "abce", 4));
	return 0;
}

TEST(keys_parse_bearer)
{
	const char *key;
	size_t len;

	ASSERT_OK(keys_parse_bearer("Bearer molly-x", &key, &len));
	ASSERT_TRUE(len == 7 && memcmp(key, "molly-x", 7) == 0);
	ASSERT_OK(keys_parse_bearer("  bearer\t molly-y  ", &key, &len));
	ASSERT_TRUE(len == 7 && memcmp(key, "molly-y", 7) == 0);
	ASSERT_ERR(keys_parse_bearer("Basic abc", &key, &len), -EINVAL);
	ASSERT_ERR(keys_parse_bearer("Bearer", &key, &len), -EINVAL);
	ASSERT_ERR(keys_parse_bearer("Bearer   ", &key, &len), -EINVAL);
	ASSERT_ERR(keys_parse_bearer("Bearerx y", &key, &len), -EINVAL);
	ASSERT_ERR(keys_parse_bearer(NULL, &key, &len), -EINVAL);
	return 0;
}

TEST(keys_find_member)
{
	_cleanup_(config_unrefp) struct config *c = NULL;
	struct errmsg e = { "" };
	char ka[KEYS_KEY_SIZE], kb[KEYS_KEY_SIZE], ha[KEYS_HASH_STRING_SIZE],
	    hb[KEYS_HASH_STRING_SIZE], text[1024];
	const struct config_member *m;

	ASSERT_OK(keys_generate(ka));
	ASSERT_OK(keys_generate(kb));
	keys_hash_string(ka, strlen(ka), ha);
	keys_hash_string(kb, strlen(kb), hb);
	snprintf(text, sizeof(text),
		 "[Member alice]\nKeyHash=%s\nModels=base\n\n"
		 "[Member bob]\nKeyHash=%s\nModels=*\nAdmin=yes\n\n"
		 "[Member carol]\nUIDs=0\nModels=*\n",
		 ha, hb);
	ASSERT_OK(config_new(&c));
	ASSERT_TRUE(!keys_required(c));
	if (config_parse_text(c, text, strlen(text), "test.conf", &e) < 0) {
		fprintf(stderr, "config: %s\n", e.text);
		return 1;
	}
	ASSERT_TRUE(keys_required(c));
	m = keys_find_member(c, ka, strlen(ka));
	ASSERT_TRUE(m && strcmp(m->name, "alice") == 0 && !m->admin);
	m = keys_find_member(c, kb, strlen(kb));
	ASSERT_TRUE(m && strcmp(m->name, "bob") == 0 && m->admin);
	ASSERT_TRUE(!keys_find_member(c, ka, strlen(ka) - 1));
	ASSERT_TRUE(!keys_find_member(c, "", 0));
	ka[10] ^= 1;
	ASSERT_TRUE(!keys_find_member(c, ka, strlen(ka)));
	return 0;
}

TEST(metrics_page)
{
	_cleanup_(metrics_freep) struct metrics *m = NULL;
	struct metrics_adapter_gauge ads[] = {
		{ .name = "a\"b", .loaded = true, .resident = true, .requests = 5, .active = 0 },
		{ .name = "dbus-only", .loaded = true, .requests = 1, .active = 1 },
	};
	struct metrics_gauges g = { .model_name = "base",
				    .waiting = 3,
				    .running = 2,
				    .max_sequences = 8,
				    .queue_length = 64,
				    .pool_pages_total = 100,
				    .pool_pages_free = 25,
				    .adapters = ads,
				    .n_adapters = 2,
				    .now_unix = 1700000000.5 };
	char *page = NULL;
	size_t len;

	ASSERT_OK(metrics_new(&m));
	metrics_request_done(m, METRICS_EP_COMPLETIONS, 200, 300000);     /* 0.3 ms */
	metrics_request_done(m, METRICS_EP_COMPLETIONS, 200, 2000000000); /* 2 s */
	metrics_request_done(m, METRICS_EP_COMPLETIONS, 429, 100000);
	metrics_request_done(m, METRICS_EP_COUNT_, 404, 1000);
	metrics_first_token(m, 1000000);
	metrics_tokens(m, 10, 20);
	metrics_client_cancelled(m);
	metrics_adapter_queued(m, "w");
	metrics_adapter_queued(m, "r");
	metrics_adapter_started(m, "r");
	metrics_adapter_queued(m, "gone");
	metrics_adapter_ended(m, "gone", false);
	ASSERT_OK(metrics_render(m, &g, &page, &len));
	ASSERT_EQ(len, strlen(page));
#define HAS(s)                                                       \
	do {                                                         \
		if (!strstr(page, s)) {                              \
			fprintf(stderr, "missing: %s\n%s", s, page); \
			free(page);                                  \
			return 1;                                    \
		}                                                    \
	} while (0)
	HAS("molly_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n");
	HAS("molly_http_requests_total{endpoint=\"/v1/completions\",status=\"429\"} 1\n");
	HAS("molly_http_requests_total{endpoint=\"other\",status=\"404\"} 1\n");
	HAS("molly_http_request_duration_seconds_bucket{endpoint=\"/v1/"
	    "completions\",le=\"0.0005\"} 2\n");
	HAS("molly_http_request_duration_seconds_bucket{endpoint=\"/v1/completions\",le=\"1\"} "
	    "2\n");
	HAS("molly_http_request_duration_seconds_bucket{endpoint=\"/v1/completions\",le=\"2.5\"} "
	    "3\n");
	HAS("molly_http_request_duration_seconds_bucket{endpoint=\"/v1/completions\",le=\"+Inf\"} "
	    "3\n");
	HAS("molly_http_request_duration_seconds_count{endpoint=\"/v1/completions\"} 3\n");
	HAS("molly_http_time_to_first_token_seconds_count 1\n");
	HAS("molly_http_generation_tokens_total 20\n");
	HAS("molly_http_client_disconnects_total 1\n");
	HAS("molly_queue_depth 3\n");
	HAS("molly_adapter_requests_total{adapter=\"a\\\"b\"} 5\n");
	HAS("molly_adapter_resident{adapter=\"a\\\"b\"} 1\n");
	HAS("vllm:num_requests_waiting{model_name=\"base\"} 3\n");
	HAS("vllm:kv_cache_usage_perc{model_name=\"base\"} 0.75\n");
	HAS("# TYPE vllm:lora_requests_info gauge\n");
	HAS("vllm:lora_requests_info{max_lora=\"8\",waiting_lora_adapters=\"w\","
	    "running_lora_adapters=\"r,dbus-only\"} 1700000000.5\n");
	free(page);

	/* every adapter finished: empty lists, and the table forgot them */
	metrics_adapter_ended(m, "w", false);
	metrics_adapter_ended(m, "r", true);
	g.n_adapters = 0;
	ASSERT_OK(metrics_render(m, &g, &page, &len));
	HAS("vllm:lora_requests_info{max_lora=\"8\",waiting_lora_adapters=\"\","
	    "running_lora_adapters=\"\"}");
	free(page);
	return 0;
}
