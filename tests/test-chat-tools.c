/* SPDX-License-Identifier: MIT */
/*
 * test-chat-tools: tool use in the chat families (chat-tools.h): the rendered prompt of each
 * family against its reference template's text (rendered by Jinja2 configured as Hugging Face
 * transformers does, from shared/reference/chat-templates, with the conversation below; the
 * llama3 text without the template's date lines, as chat-tools.h says), the parser of the
 * model's calls, and the call grammar: it accepts the family's call and nothing else.
 */
#include "test.h"

#include "engine/chat-tools.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

#define ASSERT_FALSE(x) ASSERT_TRUE(!(x))

static const char tools[] =
	"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
	"\"Weather now\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
	"{\"type\": \"string\"}}, \"required\": [\"city\"]}}}]";

static const struct chat_tool_call call = { .id = "abcdefghi", .name = "get_weather",
					    .arguments = "{\"city\":\"Rome\"}" };

static const struct chat_message conv[] = {
	{ .role = "system", .content = "Be brief." },
	{ .role = "user", .content = "Weather in Rome?" },
	{ .role = "assistant", .content = "", .tool_calls = &call, .n_tool_calls = 1 },
	{ .role = "tool", .content = "sunny", .tool_call_id = "abcdefghi" },
};

static int render(enum chat_family f, size_t n, const char *t, const char *want)
{
	_cleanup_free_ char *text = NULL;
	struct errmsg e = {};
	int r = chat_render_tools(f, conv, n, t, true, &text, &e);

	if (r < 0) {
		fprintf(stderr, "  %s: %s\n", chat_family_name(f), e.text);
		return 1;
	}
	if (strcmp(text, want) != 0) {
		fprintf(stderr, "  %s:\n  got:  %s\n  want: %s\n", chat_family_name(f), text, want);
		return 1;
	}
	return 0;
}

TEST(render_chatml_qwen)
{
	ASSERT_EQ(render(CHAT_FAMILY_CHATML, 4, tools,
			 "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more "
			 "functions to assist with the user query.\n\nYou are provided with function "
			 "signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": "
			 "\"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
			 "\"Weather now\", \"parameters\": {\"type\": \"object\", \"properties\": "
			 "{\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\n"
			 "For each function call, return a json object with function name and "
			 "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
			 "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
			 "<|im_start|>user\nWeather in Rome?<|im_end|>\n<|im_start|>assistant\n"
			 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
			 "\"Rome\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
			 "sunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
		  0);
	return 0;
}

TEST(render_llama3)
{
	ASSERT_EQ(render(CHAT_FAMILY_LLAMA3, 4, tools,
			 "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
			 "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the "
			 "following functions, please respond with a JSON for a function call with its "
			 "proper arguments that best answers the given prompt.\n\nRespond in the format "
			 "{\"name\": function name, \"parameters\": dictionary of argument name and its "
			 "value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    "
			 "\"function\": {\n        \"name\": \"get_weather\",\n        \"description\": "
			 "\"Weather now\",\n        \"parameters\": {\n            \"type\": \"object\",\n"
			 "            \"properties\": {\n                \"city\": {\n                    "
			 "\"type\": \"string\"\n                }\n            },\n            "
			 "\"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\n"
			 "Weather in Rome?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
			 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}<|eot_id|>"
			 "<|start_header_id|>ipython<|end_header_id|>\n\n\"sunny\"<|eot_id|>"
			 "<|start_header_id|>assistant<|end_header_id|>\n\n"),
		  0);
	return 0;
}

TEST(render_mistral)
{
	/* the system message goes before the last user turn only when it is the last message */
	ASSERT_EQ(render(CHAT_FAMILY_MISTRAL, 2, tools,
			 "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": "
			 "\"get_weather\", \"description\": \"Weather now\", \"parameters\": {\"type\": "
			 "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
			 "[\"city\"]}}}][/AVAILABLE_TOOLS][INST]Be brief.\n\nWeather in Rome?[/INST]"),
		  0);
	ASSERT_EQ(render(CHAT_FAMILY_MISTRAL, 4, NULL,
			 "[INST]Weather in Rome?[/INST][TOOL_CALLS][{\"name\": \"get_weather\", "
			 "\"arguments\": {\"city\": \"Rome\"}, \"id\": \"abcdefghi\"}]</s>"
			 "[TOOL_RESULTS]{\"content\": sunny, \"call_id\": \"abcdefghi\"}"
			 "[/TOOL_RESULTS]"),
		  0);
	return 0;
}

TEST(other_families_refuse_tools)
{
	_cleanup_free_ char *text = NULL;
	struct errmsg e = {};

	ASSERT_ERR(chat_render_tools(CHAT_FAMILY_GEMMA, conv, 2, tools, true, &text, &e),
		   -EOPNOTSUPP);
	ASSERT_TRUE(strstr(e.text, "gemma") != NULL);
	ASSERT_FALSE(chat_family_has_tools(CHAT_FAMILY_PHI3));
	ASSERT_FALSE(chat_family_has_tools(CHAT_FAMILY_LLAMA2));
	return 0;
}

static int parse_ok(enum chat_family f, const char *text, const char *name, const char *args)
{
	struct chat_parsed_call *c = NULL;
	size_t n = 0;
	int r = chat_tool_calls_parse(f, text, strlen(text), tools, &c, &n);
	bool ok = r == 0 && n == 1 && strcmp(c[0].name, name) == 0 &&
		  strcmp(c[0].arguments, args) == 0;

	if (!ok)
		fprintf(stderr, "  %s: %s → %d %s %s\n", chat_family_name(f), text, r,
			n ? c[0].name : "-", n ? c[0].arguments : "-");
	chat_parsed_calls_free(c, n);
	return ok ? 0 : 1;
}

static int parse_not(enum chat_family f, const char *text)
{
	struct chat_parsed_call *c = NULL;
	size_t n = 0;
	int r = chat_tool_calls_parse(f, text, strlen(text), tools, &c, &n);

	chat_parsed_calls_free(c, n);
	return r == -ENOMSG ? 0 : 1;
}

TEST(parse_calls)
{
	ASSERT_EQ(parse_ok(CHAT_FAMILY_CHATML,
			   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
			   "\"Rome\"}}\n</tool_call>",
			   "get_weather", "{\"city\":\"Rome\"}"),
		  0);
	ASSERT_EQ(parse_ok(CHAT_FAMILY_LLAMA3,
			   " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
			   "get_weather", "{\"city\":\"Oslo\"}"),
		  0);
	ASSERT_EQ(parse_ok(CHAT_FAMILY_MISTRAL,
			   "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"X\"}}]",
			   "get_weather", "{\"city\":\"X\"}"),
		  0);
	ASSERT_EQ(parse_ok(CHAT_FAMILY_MISTRAL,
			   "[{\"name\": \"get_weather\", \"arguments\": {}}]", "get_weather", "{}"),
		  0);
	/* not calls: prose, an unknown function, trailing text, a cut-off call */
	ASSERT_EQ(parse_not(CHAT_FAMILY_CHATML, "It is sunny."), 0);
	ASSERT_EQ(parse_not(CHAT_FAMILY_LLAMA3, "{\"name\": \"rm_rf\", \"parameters\": {}}"), 0);
	ASSERT_EQ(parse_not(CHAT_FAMILY_LLAMA3,
			    "{\"name\": \"get_weather\", \"parameters\": {}} and more"), 0);
	ASSERT_EQ(parse_not(CHAT_FAMILY_CHATML, "<tool_call>\n{\"name\": \"get_weather\""), 0);
	return 0;
}

static bool grammar_takes(enum chat_family f, const char *only, const char *text)
{
	_cleanup_free_ char *gbnf = NULL;
	_cleanup_(grammar_unrefp) struct grammar *g = NULL;
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	struct errmsg e = {};
	size_t len;

	if (chat_tools_grammar(f, tools, only, &gbnf, &len, &e) < 0 ||
	    grammar_parse(gbnf, len, &g, &e) < 0 || matcher_new(g, NULL, &m) < 0) {
		fprintf(stderr, "  %s\n", e.text);
		return false;
	}
	return matcher_accept_bytes(m, text, strlen(text)) == 0 && matcher_done(m);
}

TEST(call_grammar)
{
	_cleanup_free_ char *gbnf = NULL;
	struct errmsg e = {};
	size_t len;

	ASSERT_TRUE(grammar_takes(CHAT_FAMILY_CHATML, NULL,
				  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
				  "{\"city\": \"Rome\"}}\n</tool_call>"));
	ASSERT_FALSE(grammar_takes(CHAT_FAMILY_CHATML, NULL,
				   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
				   "{}}\n</tool_call>")); /* city is required */
	ASSERT_TRUE(grammar_takes(CHAT_FAMILY_LLAMA3, "get_weather",
				  "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"\"}}"));
	ASSERT_TRUE(grammar_takes(CHAT_FAMILY_MISTRAL, NULL,
				  "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\"}}]"));
	ASSERT_ERR(chat_tools_grammar(CHAT_FAMILY_CHATML, tools, "nope", &gbnf, &len, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "'nope'") != NULL);
	return 0;
}
