/* SPDX-License-Identifier: MIT */
/*
 * chat-tools.h: tool use in the chat families that define it: rendering the tools, the
 * assistant's earlier calls and the tool results into the prompt; finding the model's calls
 * in its output; and the grammar that makes the output a call (tool_choice "required" or a
 * named function).
 *
 * Formats (the reference templates in shared/reference/chat-templates):
 *  chatml   Qwen2.5: the tools as JSON lines inside <tools></tools> in the system turn, calls
 *           as "<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>", results in a
 *           user turn as "<tool_response>\n...\n</tool_response>". Differs: without a system
 *           message no "You are Qwen..." line is invented (as chat.c's chatml).
 *  llama3   Llama 3.1: the tools (JSON, indent 4) and the instructions in the first user
 *           turn, "Environment: ipython" in a system block, a call as {"name": ...,
 *           "parameters": {...}}, results in an "ipython" turn (as a JSON string, as the
 *           template's tojson writes it). Differs: no date lines (as chat.c's llama3). One
 *           call per assistant turn, as the template demands.
 *  mistral  Mistral-Nemo: [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS] before the last user
 *           turn, calls as [TOOL_CALLS][{"name", "arguments", "id"}]</s>, results as
 *           [TOOL_RESULTS]{"content": ..., "call_id": ...}[/TOOL_RESULTS]. [TOOL_CALLS] is a
 *           control token: it is not part of the text the model's output shows, so a call is
 *           recognised by the JSON list alone.
 * Other families answer -EOPNOTSUPP. Arguments are rendered as JSON objects (clients send
 * them as strings; the templates' models were trained on objects).
 *
 * JSON is written as Python's json.dumps writes it (", " and ": ", non-ASCII kept), which is
 * what the templates' tojson produces.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "../basic/errmsg.h"
#include "chat.h"

struct json_object;

bool chat_family_has_tools(enum chat_family f);

/* chat_render() with tools (a JSON array of OpenAI tools {"type":"function","function":
 * {"name","description","parameters"}}, or NULL) and tool/tool_calls messages. */
int chat_render_tools(enum chat_family f, const struct chat_message *msgs, size_t n_msgs,
		      const char *tools_json, bool add_assistant, char **ret, struct errmsg *e);

/* The text a call starts with in family f's output ("<tool_call>", "{", "["). */
const char *chat_tool_call_prefix(enum chat_family f);

/* The frame chat_tools_grammar() writes around one call: open, then the JSON name, then
 * ", \"ARGS_KEY\": ", then the arguments, then close. -EOPNOTSUPP for other families. */
int chat_tool_call_frame(enum chat_family f, const char **ret_open, const char **ret_args_key,
			 const char **ret_close);

struct chat_parsed_call {
	char *name;      /* owned */
	char *arguments; /* owned: compact JSON text of the arguments object */
};

/*
 * Finds the calls in a whole output: the text (after leading white space) must be nothing
 * but calls in f's format, each naming one of the tools (a JSON array as above). 0 and the
 * calls (free with chat_parsed_calls_free), or -ENOMSG when the text is not calls.
 */
int chat_tool_calls_parse(enum chat_family f, const char *text, size_t len,
			  const char *tools_json, struct chat_parsed_call **ret, size_t *ret_n);
void chat_parsed_calls_free(struct chat_parsed_call *c, size_t n);

/*
 * GBNF for exactly one call in f's format to one of the tools (only_name non-NULL: that one),
 * its arguments constrained by the tool's "parameters" schema (schema.h). *ret malloc'd.
 * -EINVAL with e when a schema is refused or only_name is not among the tools.
 */
int chat_tools_grammar(enum chat_family f, const char *tools_json, const char *only_name,
		       char **ret, size_t *ret_len, struct errmsg *e);
