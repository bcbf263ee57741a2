/* SPDX-License-Identifier: MIT */
/*
 * test-chat.c: family names, detection of real templates (the shared ones plus a few
 * embedded), the default and error paths, and each family's rendering against expected text.
 *
 * jinja_cross_check compares chat_render() with real Jinja renderings that
 * tests/tool-chat-jinja.sh produces (tests/chat_jinja_reference.py) into the folder named by
 * $MOLLY_CHAT_JINJA_DIR; without that variable it is skipped.
 */
#include <dirent.h>
#include <stdint.h>

#include "engine/chat.h"
#include "test.h"

/* meta-llama/Llama-2-7b-chat-hf, as its tokenizer_config.json ships it. */
static const char llama2_chat_template[] =
	"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
	"{% set system_message = messages[0]['content'] %}{% else %}"
	"{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
	"{% for message in loop_messages %}"
	"{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
	"{{ raise_exception('Conversation roles must alternate "
	"user/assistant/user/assistant/...') }}"
	"{% endif %}{% if loop.index0 == 0 and system_message != false %}"
	"{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
	"message['content'] %}"
	"{% else %}{% set content = message['content'] %}{% endif %}"
	"{% if message['role'] == 'user' %}"
	"{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
	"{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
	"{% endif %}{% endfor %}";

/* Other real templates of our families (from llama.cpp's tests/test-chat-template.cpp). */
static const struct {
	const char *what;
	const char *jinja;
	enum chat_family family;
} more_templates[] = {
	{ "Meta-Llama-3-8B-Instruct",
	  "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
	  "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
	  "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
	  "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
	  "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
	  CHAT_FAMILY_LLAMA3 },
	{ "OpenHermes-2.5 (ChatML)",
	  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
	  "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
	  "{{ '<|im_start|>assistant\\n' }}{% endif %}",
	  CHAT_FAMILY_CHATML },
	{ "Mistral-7B-Instruct-v0.2 (pre-v1, Llama 2 style)",
	  "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
	  "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
	  "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
	  "{{ '[INST] ' + message['content'] + ' [/INST]' }}"
	  "{% elif message['role'] == 'assistant' %}"
	  "{{ message['content'] + eos_token}}{% else %}"
	  "{{ raise_exception('Only user and assistant "
	  "roles are supported!') }}{% endif %}{% endfor %}",
	  CHAT_FAMILY_LLAMA2 },
	{ "FusionNet (Llama 2 with BOS inside history)",
	  "{%- for idx in range(0, messages|length) -%}\n"
	  "{%- if messages[idx]['role'] == 'user' -%}\n"
	  "{%- if idx > 1 -%}\n"
	  "{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n"
	  "{%- else -%}\n{{- messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n"
	  "{% elif messages[idx]['role'] == 'system' %}\n{{- '[INST] <<SYS>>\\n' + "
	  "messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif messages[idx]['role'] == "
	  "'assistant' -%}\n{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}\n"
	  "{% endif %}\n"
	  "{% endfor %}",
	  CHAT_FAMILY_LLAMA2 },
	{ "Mistral v1 with system prompt",
	  "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = "
	  "messages[0]['content'] %}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n"
	  "    {%- set loop_messages = messages %}\n{%- endif %}\n\n{{- bos_token }}\n{%- for "
	  "message in loop_messages %}\n    {%- if message['role'] == 'user' %}\n        {%- if "
	  "loop.first and system_message is defined %}\n            {{- ' [INST] ' + "
	  "system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n"
	  "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
	  "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + "
	  "eos_token}}\n    {%- endif %}\n{%- endfor %}\n",
	  CHAT_FAMILY_MISTRAL },
	{ "Mistral Small (v7, [SYSTEM_PROMPT])",
	  "{{- bos_token }}{%- for message in messages %}{%- if message['role'] == 'system' %}"
	  "{{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}{%- elif "
	  "message['role'] == 'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}{%- else %}"
	  "{{- message['content'] + eos_token }}{%- endif %}{%- endfor %}",
	  CHAT_FAMILY_MISTRAL },
	{ "Phi-3-mini",
	  "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}"
	  "{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}"
	  "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}"
	  "{% endif %}{% endfor %}",
	  CHAT_FAMILY_PHI3 },
	{ "gemma-7b-it",
	  "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') "
	  "}}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
	  "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
	  "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') "
	  "%}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
	  "'<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
	  "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
	  CHAT_FAMILY_GEMMA },
	{ "a bare family name", "phi3", CHAT_FAMILY_PHI3 },
};

static char *read_file(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rbe");
	char *buf = NULL;
	size_t len = 0, cap = 0, got;

	if (!f)
		return NULL;
	do {
		if (cap - len < 4096) {
			char *p = realloc(buf, cap + 65536);
			if (!p) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = p;
			cap += 65536;
		}
		got = fread(buf + len, 1, cap - len - 1, f);
		len += got;
	} while (got > 0);
	fclose(f);
	buf[len] = '\0';
	if (ret_len)
		*ret_len = len;
	return buf;
}

TEST(family_names)
{
	enum chat_family f;

	for (int i = 0; i < CHAT_FAMILY_COUNT_; i++) {
		const char *name = chat_family_name((enum chat_family) i);

		ASSERT_TRUE(name != NULL);
		ASSERT_OK(chat_family_from_name(name, &f));
		ASSERT_EQ(f, i);
	}
	ASSERT_STREQ(chat_family_name(CHAT_FAMILY_LLAMA2), "llama2");
	ASSERT_STREQ(chat_family_name(CHAT_FAMILY_LLAMA3), "llama3");
	ASSERT_STREQ(chat_family_name(CHAT_FAMILY_CHATML), "chatml");
	ASSERT_STREQ(chat_family_name(CHAT_FAMILY_MISTRAL), "mistral");
	ASSERT_STREQ(chat_family_name(CHAT_FAMILY_PHI3), "phi3");
	ASSERT_STREQ(chat_family_name(CHAT_FAMILY_GEMMA), "gemma");
	ASSERT_TRUE(chat_family_name(CHAT_FAMILY_COUNT_) == NULL);
	ASSERT_TRUE(chat_family_name((enum chat_family) -1) == NULL);

	ASSERT_OK(chat_family_from_name("ChatML", &f));
	ASSERT_EQ(f, CHAT_FAMILY_CHATML);
	ASSERT_ERR(chat_family_from_name("llama4", &f), -EINVAL);
	ASSERT_ERR(chat_family_from_name("", &f), -EINVAL);
	ASSERT_ERR(chat_family_from_name("chatml ", &f), -EINVAL);
	ASSERT_ERR(chat_family_from_name(NULL, &f), -EINVAL);
	return 0;
}

TEST(detect_shared_templates)
{
	static const struct {
		const char *file;
		enum chat_family family;
	} table[] = {
		{ "meta-llama-Llama-3.1-8B-Instruct.jinja", CHAT_FAMILY_LLAMA3 },
		{ "meta-llama-Llama-3.2-3B-Instruct.jinja", CHAT_FAMILY_LLAMA3 },
		{ "Qwen-Qwen2.5-7B-Instruct.jinja", CHAT_FAMILY_CHATML },
		{ "HuggingFaceTB-SmolLM3-3B.jinja", CHAT_FAMILY_CHATML },
		{ "mistralai-Mistral-Nemo-Instruct-2407.jinja", CHAT_FAMILY_MISTRAL },
		{ "microsoft-Phi-3.5-mini-instruct.jinja", CHAT_FAMILY_PHI3 },
		{ "google-gemma-2-2b-it.jinja", CHAT_FAMILY_GEMMA },
	};
	char rel[256];

	for (size_t i = 0; i < ELEMENTSOF(table); i++) {
		_cleanup_free_ char *t = NULL;
		struct errmsg e = {};
		enum chat_family f;

		snprintf(rel, sizeof(rel), "reference/chat-templates/%s", table[i].file);
		t = read_file(test_shared_path(rel), NULL);
		if (!t) {
			fprintf(stderr, "  %s: missing, skipping\n", test_shared_path(rel));
			return TEST_SKIP;
		}
		if (chat_family_detect(t, &f, &e) < 0)
			TEST_FAIL_("%s: %s", table[i].file, e.text);
		if (f != table[i].family)
			TEST_FAIL_("%s: detected %s, expected %s", table[i].file,
				   chat_family_name(f), chat_family_name(table[i].family));
	}
	return 0;
}

TEST(detect_embedded_templates)
{
	struct errmsg e = {};
	enum chat_family f;

	ASSERT_OK(chat_family_detect(llama2_chat_template, &f, &e));
	ASSERT_EQ(f, CHAT_FAMILY_LLAMA2);
	for (size_t i = 0; i < ELEMENTSOF(more_templates); i++) {
		if (chat_family_detect(more_templates[i].jinja, &f, &e) < 0)
			TEST_FAIL_("%s: %s", more_templates[i].what, e.text);
		if (f != more_templates[i].family)
			TEST_FAIL_("%s: detected %s, expected %s", more_templates[i].what,
				   chat_family_name(f), chat_family_name(more_templates[i].family));
	}
	return 0;
}

TEST(detect_unknown)
{
	/* Zephyr: a format we do not render, which must not pass for phi3 */
	static const char zephyr[] =
		"{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
		"{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
		"{% elif message['role'] == 'system' %}\n"
		"{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
		"{% elif message['role'] == 'assistant' %}\n"
		"{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n"
		"{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}"
		"\n{% endfor %}";
	static const char phi4[] = "{% for m in messages %}{{'<|im_start|>' + m['role'] + "
				   "'<|im_sep|>' + m['content'] + '<|im_end|>'}}{% endfor %}";
	struct errmsg e = {};
	enum chat_family f = CHAT_FAMILY_GEMMA;

	ASSERT_ERR(chat_family_detect("{{ messages[0]['content'] }}", &f, &e), -ENOENT);
	ASSERT_TRUE(strstr(e.text, "not recognised") != NULL);
	ASSERT_EQ(f, CHAT_FAMILY_GEMMA); /* untouched on failure */
	ASSERT_ERR(chat_family_detect("", &f, &e), -ENOENT);
	ASSERT_ERR(chat_family_detect(zephyr, &f, &e), -ENOENT);
	ASSERT_TRUE(strstr(e.text, "not supported") != NULL);
	ASSERT_ERR(chat_family_detect(phi4, &f, &e), -ENOENT);
	ASSERT_TRUE(strstr(e.text, "phi4") != NULL);
	ASSERT_ERR(chat_family_detect(NULL, &f, &e), -EINVAL);
	ASSERT_ERR(chat_family_detect("x", &f, NULL), -ENOENT); /* e is optional */
	return 0;
}

TEST(choose)
{
	struct errmsg e = {};
	enum chat_family f;

	/* no template: chatml */
	ASSERT_OK(chat_family_choose(NULL, NULL, &f, &e));
	ASSERT_EQ(f, CHAT_FAMILY_CHATML);
	ASSERT_OK(chat_family_choose(NULL, "", &f, &e));
	ASSERT_EQ(f, CHAT_FAMILY_CHATML);
	/* a name wins over the template, even an unrecognisable one */
	ASSERT_OK(chat_family_choose("gemma", llama2_chat_template, &f, &e));
	ASSERT_EQ(f, CHAT_FAMILY_GEMMA);
	ASSERT_OK(chat_family_choose("mistral", "{{ nonsense }}", &f, &e));
	ASSERT_EQ(f, CHAT_FAMILY_MISTRAL);
	ASSERT_ERR(chat_family_choose("vicuna", NULL, &f, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "vicuna") != NULL);
	/* else the template decides */
	ASSERT_OK(chat_family_choose(NULL, llama2_chat_template, &f, &e));
	ASSERT_EQ(f, CHAT_FAMILY_LLAMA2);
	ASSERT_ERR(chat_family_choose(NULL, "{{ nonsense }}", &f, &e), -ENOENT);
	ASSERT_TRUE(e.text[0] != '\0');
	return 0;
}

#define SYS "You are a helpful assistant."
static const struct chat_message conv[] = {
	{ .role = "system", .content = SYS },
	{ .role = "user", .content = "Hello" },
	{ .role = "assistant", .content = "Hi there!" },
	{ .role = "user", .content = "Who are you?" },
};

static int render_eq(enum chat_family f, const struct chat_message *m, size_t n, bool add,
		     const char *want)
{
	_cleanup_free_ char *text = NULL;
	struct errmsg e = {};
	int r = chat_render(f, m, n, add, &text, &e);

	if (r < 0) {
		fprintf(stderr, "  %s: chat_render failed: %s (%s)\n", chat_family_name(f),
			strerror(-r), e.text);
		return 1;
	}
	if (strcmp(text, want) != 0) {
		fprintf(stderr, "  %s (add_assistant %d):\n  got  \"%s\"\n  want \"%s\"\n",
			chat_family_name(f), add, text, want);
		return 1;
	}
	return 0;
}

TEST(render_llama2)
{
	static const char want[] = "[INST] <<SYS>>\n" SYS "\n<</SYS>>\n\nHello [/INST] Hi there! "
				   "</s><s>[INST] Who are you? [/INST]";
	const struct chat_message ws[] = {
		{ .role = "user", .content = "  padded \n" },
		{ .role = "assistant", .content = "\xc2\xa0" "answer\xe3\x80\x80" }, /* NBSP, ideographic space */
	};

	/* The template ignores add_generation_prompt: "[/INST]" is the cue either way. */
	ASSERT_EQ(render_eq(CHAT_FAMILY_LLAMA2, conv, 4, true, want), 0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_LLAMA2, conv, 4, false, want), 0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_LLAMA2, conv + 1, 1, true, "[INST] Hello [/INST]"), 0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_LLAMA2, ws, 2, true, "[INST] padded [/INST] answer </s>"),
		  0);
	/* the system block and the first user turn are stripped as one */
	const struct chat_message blank_user[] = { { .role = "system", .content = " S " }, { .role = "user", .content = " \n" } };
	ASSERT_EQ(render_eq(CHAT_FAMILY_LLAMA2, blank_user, 2, true,
			    "[INST] <<SYS>>\n S \n<</SYS>> [/INST]"),
		  0);
	return 0;
}

TEST(render_llama3)
{
	static const char body[] =
		"<|start_header_id|>system<|end_header_id|>\n\n" SYS "<|eot_id|>"
		"<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
		"<|start_header_id|>assistant<|end_header_id|>\n\nHi there!<|eot_id|>"
		"<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>";
	const struct chat_message ws[] = {
		/* U+2028 and U+0085 are white space */
		{ .role = "user", .content = "\t\xe2\x80\xa8 x y \xc2\x85\r\n" },
		{ .role = "assistant", .content = "\xe2\x80\x8b" "z" },	       /* U+200B is not */
	};

	ASSERT_EQ(render_eq(CHAT_FAMILY_LLAMA3, conv, 4, false, body), 0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_LLAMA3, conv, 4, true,
			    "<|start_header_id|>system<|end_header_id|>\n\n" SYS "<|eot_id|>"
			    "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
			    "<|start_header_id|>assistant<|end_header_id|>\n\nHi there!<|eot_id|>"
			    "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
			    "<|start_header_id|>assistant<|end_header_id|>\n\n"),
		  0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_LLAMA3, ws, 2, false,
			    "<|start_header_id|>user<|end_header_id|>\n\nx y<|eot_id|>"
			    "<|start_header_id|>assistant<|end_header_id|>\n\n"
			    "\xe2\x80\x8bz<|eot_id|>"),
		  0);
	/* broken UTF-8 at the edges is not white space and stays */
	const struct chat_message bad[] = { { .role = "user", .content = "\xc2 a \xa0" } };
	ASSERT_EQ(render_eq(CHAT_FAMILY_LLAMA3, bad, 1, false,
			    "<|start_header_id|>user<|end_header_id|>\n\n\xc2 a \xa0<|eot_id|>"),
		  0);
	return 0;
}

TEST(render_chatml)
{
	static const char body[] = "<|im_start|>system\n" SYS "<|im_end|>\n"
				   "<|im_start|>user\nHello<|im_end|>\n"
				   "<|im_start|>assistant\nHi there!<|im_end|>\n"
				   "<|im_start|>user\nWho are you?<|im_end|>\n";
	const struct chat_message ws[] = { { .role = "user", .content = " keep \n" } };

	ASSERT_EQ(render_eq(CHAT_FAMILY_CHATML, conv, 4, false, body), 0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_CHATML, conv, 4, true,
			    "<|im_start|>system\n" SYS "<|im_end|>\n"
			    "<|im_start|>user\nHello<|im_end|>\n"
			    "<|im_start|>assistant\nHi there!<|im_end|>\n"
			    "<|im_start|>user\nWho are you?<|im_end|>\n"
			    "<|im_start|>assistant\n"),
		  0);
	/* nothing stripped, and no default system prompt */
	ASSERT_EQ(render_eq(CHAT_FAMILY_CHATML, ws, 1, true,
			    "<|im_start|>user\n keep \n<|im_end|>\n<|im_start|>assistant\n"),
		  0);
	/* no messages: just the cue */
	ASSERT_EQ(render_eq(CHAT_FAMILY_CHATML, NULL, 0, true, "<|im_start|>assistant\n"), 0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_CHATML, NULL, 0, false, ""), 0);
	return 0;
}

TEST(render_mistral)
{
	static const char want[] = "[INST]Hello[/INST]Hi there!</s>[INST]" SYS
				   "\n\nWho are you?[/INST]";

	ASSERT_EQ(render_eq(CHAT_FAMILY_MISTRAL, conv, 4, true, want), 0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_MISTRAL, conv, 4, false, want), 0);
	/* the system prompt rides on the last message only if that is a user turn */
	ASSERT_EQ(render_eq(CHAT_FAMILY_MISTRAL, conv, 3, false, "[INST]Hello[/INST]Hi there!</s>"),
		  0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_MISTRAL, conv, 2, true, "[INST]" SYS "\n\nHello[/INST]"),
		  0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_MISTRAL, conv + 1, 3, true,
			    "[INST]Hello[/INST]Hi there!</s>[INST]Who are you?[/INST]"),
		  0);
	const struct chat_message ws[] = { { .role = "user", .content = " a " }, { .role = "assistant", .content = " b " } };
	ASSERT_EQ(render_eq(CHAT_FAMILY_MISTRAL, ws, 2, false, "[INST] a [/INST] b </s>"), 0);
	return 0;
}

TEST(render_phi3)
{
	const struct chat_message empty_sys[] = { { .role = "system", .content = "" }, { .role = "user", .content = "hi" } };

	ASSERT_EQ(render_eq(CHAT_FAMILY_PHI3, conv, 4, true,
			    "<|system|>\n" SYS "<|end|>\n<|user|>\nHello<|end|>\n"
			    "<|assistant|>\nHi there!<|end|>\n<|user|>\nWho are you?<|end|>\n"
			    "<|assistant|>\n"),
		  0);
	/* without the cue the template closes the text with its EOS */
	ASSERT_EQ(render_eq(CHAT_FAMILY_PHI3, conv, 4, false,
			    "<|system|>\n" SYS "<|end|>\n<|user|>\nHello<|end|>\n"
			    "<|assistant|>\nHi there!<|end|>\n<|user|>\nWho are you?<|end|>\n"
			    "<|endoftext|>"),
		  0);
	/* an empty system message is left out */
	ASSERT_EQ(render_eq(CHAT_FAMILY_PHI3, empty_sys, 2, true,
			    "<|user|>\nhi<|end|>\n<|assistant|>\n"),
		  0);
	return 0;
}

TEST(render_gemma)
{
	const struct chat_message ws[] = {
		{ .role = "system", .content = " Be brief. " },
		{ .role = "user", .content = "\nQ " },
		{ .role = "assistant", .content = " A\n" },
	};
	const struct chat_message blank_sys[] = { { .role = "system", .content = " \n" }, { .role = "user", .content = "Q" } };

	ASSERT_EQ(render_eq(CHAT_FAMILY_GEMMA, conv, 4, true,
			    "<start_of_turn>user\n" SYS "\n\nHello<end_of_turn>\n"
			    "<start_of_turn>model\nHi there!<end_of_turn>\n"
			    "<start_of_turn>user\nWho are you?<end_of_turn>\n"
			    "<start_of_turn>model\n"),
		  0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_GEMMA, conv, 4, false,
			    "<start_of_turn>user\n" SYS "\n\nHello<end_of_turn>\n"
			    "<start_of_turn>model\nHi there!<end_of_turn>\n"
			    "<start_of_turn>user\nWho are you?<end_of_turn>\n"),
		  0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_GEMMA, ws, 3, false,
			    "<start_of_turn>user\nBe brief.\n\nQ<end_of_turn>\n"
			    "<start_of_turn>model\nA<end_of_turn>\n"),
		  0);
	ASSERT_EQ(render_eq(CHAT_FAMILY_GEMMA, blank_sys, 2, true,
			    "<start_of_turn>user\nQ<end_of_turn>\n<start_of_turn>model\n"),
		  0);
	return 0;
}

TEST(render_errors)
{
	const struct chat_message bad_role[] = { { .role = "user", .content = "a" }, { .role = "tool", .content = "b" } };
	const struct chat_message no_content[] = { { .role = "user", .content = NULL } };
	const struct chat_message two_users[] = { { .role = "user", .content = "a" }, { .role = "user", .content = "b" } };
	const struct chat_message late_sys[] = {
		{ .role = "user", .content = "a" }, { .role = "assistant", .content = "b" }, { .role = "system", .content = "c" }, { .role = "user", .content = "d" }
	};
	const struct chat_message starts_assistant[] = { { .role = "assistant", .content = "a" }, { .role = "user", .content = "b" } };
	const struct chat_message sys_only[] = { { .role = "system", .content = "s" } };
	_cleanup_free_ char *text = NULL;
	struct errmsg e = {};

	for (int f = 0; f < CHAT_FAMILY_COUNT_; f++) {
		ASSERT_ERR(chat_render(f, bad_role, 2, true, &text, &e), -EINVAL);
		ASSERT_TRUE(strstr(e.text, "tool") != NULL);
		ASSERT_ERR(chat_render(f, no_content, 1, true, &text, &e), -EINVAL);
		ASSERT_TRUE(text == NULL);
	}
	ASSERT_ERR(chat_render(CHAT_FAMILY_COUNT_, conv, 4, true, &text, &e), -EINVAL);
	ASSERT_ERR(chat_render(CHAT_FAMILY_CHATML, NULL, 2, true, &text, &e), -EINVAL);
	ASSERT_ERR(chat_render(CHAT_FAMILY_CHATML, conv, 4, true, NULL, &e), -EINVAL);

	/* the families whose templates demand alternating turns */
	static const enum chat_family strict[] = { CHAT_FAMILY_LLAMA2, CHAT_FAMILY_MISTRAL,
						   CHAT_FAMILY_GEMMA };
	for (size_t i = 0; i < ELEMENTSOF(strict); i++) {
		ASSERT_ERR(chat_render(strict[i], two_users, 2, true, &text, &e), -EINVAL);
		ASSERT_TRUE(strstr(e.text, "alternate") != NULL);
		ASSERT_ERR(chat_render(strict[i], late_sys, 4, true, &text, &e), -EINVAL);
		ASSERT_TRUE(strstr(e.text, "system") != NULL);
		ASSERT_ERR(chat_render(strict[i], starts_assistant, 2, true, &text, &e), -EINVAL);
	}
	/* the others write what they are given */
	ASSERT_OK(chat_render(CHAT_FAMILY_CHATML, late_sys, 4, true, &text, &e));
	free(text);
	text = NULL;
	ASSERT_OK(chat_render(CHAT_FAMILY_LLAMA3, two_users, 2, true, &text, &e));
	free(text);
	text = NULL;

	/* Gemma has nowhere to fold a lone system message; Llama 2 and Mistral drop it, as
	 * their templates do. */
	ASSERT_ERR(chat_render(CHAT_FAMILY_GEMMA, sys_only, 1, true, &text, &e), -EINVAL);
	ASSERT_OK(chat_render(CHAT_FAMILY_LLAMA2, sys_only, 1, true, &text, &e));
	ASSERT_STREQ(text, "");
	free(text);
	text = NULL;
	ASSERT_OK(chat_render(CHAT_FAMILY_MISTRAL, sys_only, 1, true, &text, &e));
	ASSERT_STREQ(text, "");
	return 0;
}

/* ---- the cross-check against Jinja (see tests/chat_jinja_reference.py) ---- */

struct cursor {
	const char *p, *end;
};

/* Reads "<key> <value>\n"; the value is the rest of the line. */
static bool read_line(struct cursor *c, const char *key, char *val, size_t val_size)
{
	size_t klen = strlen(key);
	const char *nl = memchr(c->p, '\n', (size_t) (c->end - c->p));
	size_t vlen;

	if (!nl || (size_t) (nl - c->p) <= klen || memcmp(c->p, key, klen) != 0 ||
	    c->p[klen] != ' ')
		return false;
	vlen = (size_t) (nl - c->p) - klen - 1;
	if (vlen >= val_size)
		return false;
	memcpy(val, c->p + klen + 1, vlen);
	val[vlen] = '\0';
	c->p = nl + 1;
	return true;
}

/* Reads "<len>\n<len bytes>\n" after the key already consumed by the caller. */
static char *read_blob(struct cursor *c, const char *lenstr)
{
	char *end;
	unsigned long long len = strtoull(lenstr, &end, 10);
	char *out;

	if (*end || len > (unsigned long long) (c->end - c->p) - 1 || c->p[len] != '\n')
		return NULL;
	out = malloc(len + 1);
	if (!out)
		return NULL;
	memcpy(out, c->p, len);
	out[len] = '\0';
	c->p += len + 1;
	return out;
}

static int check_case(const char *path, int *ret_checked)
{
	_cleanup_free_ char *data = NULL, *expected = NULL, *text = NULL;
	char tmpl[256], family[32], add[8], expect[16], count[16], val[32];
	struct chat_message msgs[32] = {};
	char *owned[32] = {};
	size_t len, n;
	struct cursor c;
	enum chat_family f;
	struct errmsg e = {};
	int r, fail = 0;

	data = read_file(path, &len);
	if (!data)
		TEST_FAIL_("%s: cannot read", path);
	c = (struct cursor){ data, data + len };
	if (!read_line(&c, "template", tmpl, sizeof(tmpl)) ||
	    !read_line(&c, "family", family, sizeof(family)) ||
	    !read_line(&c, "add_assistant", add, sizeof(add)) ||
	    !read_line(&c, "expect", expect, sizeof(expect)) ||
	    !read_line(&c, "messages", count, sizeof(count)))
		TEST_FAIL_("%s: bad header", path);
	n = strtoul(count, NULL, 10);
	if (n > ELEMENTSOF(msgs))
		TEST_FAIL_("%s: too many messages", path);
	ASSERT_OK(chat_family_from_name(family, &f));
	for (size_t i = 0; i < n && !fail; i++) {
		static const char *const roles[] = { "system", "user", "assistant" };

		msgs[i].role = NULL;
		for (size_t k = 0; k < ELEMENTSOF(roles); k++)
			if (read_line(&c, roles[k], val, sizeof(val))) {
				msgs[i].role = roles[k];
				break;
			}
		owned[i] = msgs[i].role ? read_blob(&c, val) : NULL;
		msgs[i].content = owned[i];
		if (!owned[i])
			fail = 1;
	}
	if (!fail && strcmp(expect, "ok") == 0) {
		if (!read_line(&c, "expected", val, sizeof(val)))
			fail = 1;
		else if (!(expected = read_blob(&c, val)))
			fail = 1;
	}
	if (fail) {
		for (size_t i = 0; i < n; i++)
			free(owned[i]);
		TEST_FAIL_("%s: bad message list", path);
	}

	r = chat_render(f, msgs, n, strcmp(add, "1") == 0, &text, &e);
	if (strcmp(expect, "ok") == 0) {
		if (r < 0) {
			fprintf(stderr, "  %s (%s): Jinja renders, we fail: %s\n", path, tmpl,
				e.text);
			fail = 1;
		} else if (strcmp(text, expected) != 0) {
			fprintf(stderr,
				"  %s (%s, add_assistant %s):\n  ours  \"%s\"\n  jinja \"%s\"\n",
				path, tmpl, add, text, expected);
			fail = 1;
		}
	} else if (r >= 0) {
		fprintf(stderr, "  %s (%s): Jinja refuses, we render \"%s\"\n", path, tmpl, text);
		fail = 1;
	}
	for (size_t i = 0; i < n; i++)
		free(owned[i]);
	(*ret_checked)++;
	return fail;
}

static int case_filter(const struct dirent *d)
{
	size_t len = strlen(d->d_name);

	return len > 5 && strcmp(d->d_name + len - 5, ".case") == 0;
}

TEST(jinja_cross_check)
{
	const char *dir = getenv("MOLLY_CHAT_JINJA_DIR");
	struct dirent **list = NULL;
	int n, failed = 0, checked = 0;
	char path[4096];

	if (!dir) {
		fprintf(stderr,
			"  MOLLY_CHAT_JINJA_DIR not set (tests/tool-chat-jinja.sh sets it)\n");
		return TEST_SKIP;
	}
	n = scandir(dir, &list, case_filter, alphasort);
	if (n < 0)
		TEST_FAIL_("%s: %s", dir, strerror(errno));
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
		failed += check_case(path, &checked);
		free(list[i]);
	}
	free(list);
	fprintf(stderr, "  %d cases compared with Jinja, %d differ\n", checked, failed);
	ASSERT_TRUE(checked > 0);
	ASSERT_EQ(failed, 0);
	return 0;
}
