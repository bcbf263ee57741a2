/* SPDX-License-Identifier: MIT */
/*
 * chat.h: chat templates. We do not run Jinja: a model's `tokenizer.chat_template` is
 * recognised into one of a few families by its distinctive markers, and each family is
 * rendered by C code that produces exactly the text its Jinja template would.
 *
 * Families: llama2 ([INST] ... [/INST]), llama3 (<|start_header_id|>), chatml
 * (<|im_start|>), mistral (v7-style [INST] without spaces, as Mistral-Nemo), phi3
 * (<|user|> ... <|end|>), gemma (<start_of_turn>, system folded into the first user turn).
 * A model without a template uses chatml (as llama.cpp does) unless a family is named;
 * an unrecognised template is an error unless a family is named.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "../basic/errmsg.h"

enum chat_family {
	CHAT_FAMILY_LLAMA2,
	CHAT_FAMILY_LLAMA3,
	CHAT_FAMILY_CHATML,
	CHAT_FAMILY_MISTRAL,
	CHAT_FAMILY_PHI3,
	CHAT_FAMILY_GEMMA,
	CHAT_FAMILY_COUNT_,
};

/* A tool call of an assistant message (chat-tools.h). */
struct chat_tool_call {
	const char *id;        /* "call_..." as the client sent it */
	const char *name;      /* the function */
	const char *arguments; /* JSON text of the arguments object */
};

struct chat_message {
	const char *role; /* "system", "user", "assistant"; "tool" only with chat_render_tools() */
	const char *content;
	/* assistant: the calls it made (chat_render_tools() only) */
	const struct chat_tool_call *tool_calls;
	size_t n_tool_calls;
	const char *tool_call_id; /* tool: the call this answers (NULL: none) */
};

const char *chat_family_name(enum chat_family f);
/* -EINVAL when the name is not a family. */
int chat_family_from_name(const char *name, enum chat_family *ret);
/* Recognises a Jinja template's family; -ENOENT (with e) when it fits none. */
int chat_family_detect(const char *jinja, enum chat_family *ret, struct errmsg *e);

/*
 * Chooses the family for a model: `name` (if non-NULL) wins; else the template (if non-NULL)
 * must be recognised; else chatml.
 */
int chat_family_choose(const char *name, const char *jinja, enum chat_family *ret,
		       struct errmsg *e);

/*
 * Renders messages in family f, ending with the assistant header when add_assistant.
 * The text never starts with BOS: the caller tokenizes it with the vocab's add_bos rule and
 * parse_special on (as llama.cpp does). *ret is malloc'd. -EINVAL with e for a role the
 * family cannot express.
 */
int chat_render(enum chat_family f, const struct chat_message *msgs, size_t n_msgs,
		bool add_assistant, char **ret, struct errmsg *e);
