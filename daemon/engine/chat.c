/* SPDX-License-Identifier: MIT */
/*
 * chat.c: chat template families: recognising a Jinja template and rendering a conversation.
 *
 * Each family renders what its reference template (named below) renders through Jinja as
 * Hugging Face transformers runs it, with add_generation_prompt = add_assistant, minus the
 * BOS that the template writes first (the tokenizer adds it). tests/tool-chat-jinja.sh checks
 * this against real Jinja. Where we knowingly differ, it is said here:
 *
 *  llama2   Llama-2-chat: "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
 *           <s>[INST] {user} [/INST]" (newline only for layout). Contents are stripped. The
 *           "</s><s>" between turns is text the template writes, so it stays (llama.cpp's own
 *           C rendering drops the spaces and "<s>"; the template is the model's truth).
 *           add_assistant changes nothing: a user turn already ends with the cue "[/INST]".
 *           A lone system message renders as nothing, as in the template. Differs: a system
 *           message anywhere but first is refused (the template raises at some positions and
 *           silently drops it at others).
 *  llama3   Llama 3 Instruct: "<|start_header_id|>{role}<|end_header_id|>\n\n{content}
 *           <|eot_id|>", contents stripped. Differs from Llama 3.1/3.2: those always open with
 *           a system block holding "Cutting Knowledge Date: December 2023\nToday Date: ..."
 *           (3.2 with today's date, so not even reproducible). We write neither the date lines
 *           nor an empty system block, as llama.cpp's llama3 rendering and the Llama 3.0
 *           template do; a given system message is rendered like any other turn.
 *  chatml   "<|im_start|>{role}\n{content}<|im_end|>\n", nothing stripped. Differs from Qwen2.5
 *           (which injects "You are Qwen, created by Alibaba Cloud..." when there is no system
 *           message) and SmolLM3 (which always writes its own "## Metadata" system block and
 *           thinking markers): those are model-specific defaults, not ChatML, and llama.cpp's
 *           chatml leaves them out too. With a leading system message Qwen2.5 is equal.
 *  mistral  Mistral-Nemo (v3-tekken): "[INST]{user}[/INST]{assistant}</s>", nothing stripped,
 *           add_assistant ignored (as the template). The system message goes in front of the
 *           LAST message when that is a user turn ("[INST]{system}\n\n{user}[/INST]"), so when
 *           the conversation ends with an assistant turn the template drops it, and so do we.
 *           Roles must alternate user/assistant after an optional leading system message.
 *  phi3     Phi-3.5-mini: "<|{role}|>\n{content}<|end|>\n"; a system message with empty
 *           content is skipped; without add_assistant the text ends with the EOS text
 *           "<|endoftext|>" as the template writes it (llama.cpp's C rendering omits it).
 *  gemma    Gemma 2: "<start_of_turn>{user|model}\n{content}<end_of_turn>\n", contents
 *           stripped. Differs: the template refuses a system role; like llama.cpp we fold a
 *           leading system message into the first user turn as "{system}\n\n{user}" (Gemma 3's
 *           own template does the same). Roles must alternate as the template demands.
 *
 * "Stripped" is Python's str.strip(), which Jinja's trim filter and .strip() use: it removes
 * Unicode white space (U+00A0, U+3000, ...) as well as ASCII.
 *
 * Detection follows the order of llama.cpp's llm_chat_detect_template(), so that a template
 * which carries markers of several formats lands where llama.cpp puts it; formats we do not
 * render are recognised only to name them in the error. Template variants that llama.cpp
 * tells apart within our families are mapped to the family (e.g. Mistral v1/v3/v7 → mistral,
 * Llama 2 without <<SYS>> → llama2) and rendered as its reference template above, so their
 * own Jinja would differ in spaces or in where the system prompt goes: close enough to chat
 * with, which beats refusing the model; exact only for the reference templates.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../basic/strbuf.h"
#include "chat.h"

static const char *const family_names[CHAT_FAMILY_COUNT_] = {
	[CHAT_FAMILY_LLAMA2] = "llama2", [CHAT_FAMILY_LLAMA3] = "llama3",
	[CHAT_FAMILY_CHATML] = "chatml", [CHAT_FAMILY_MISTRAL] = "mistral",
	[CHAT_FAMILY_PHI3] = "phi3",	 [CHAT_FAMILY_GEMMA] = "gemma",
};

#define FAMILY_LIST "llama2, llama3, chatml, mistral, phi3, gemma"

const char *chat_family_name(enum chat_family f)
{
	if ((unsigned) f >= CHAT_FAMILY_COUNT_)
		return NULL;
	return family_names[f];
}

int chat_family_from_name(const char *name, enum chat_family *ret)
{
	assert_return(name && ret, -EINVAL);

	for (int f = 0; f < CHAT_FAMILY_COUNT_; f++)
		if (strcasecmp(name, family_names[f]) == 0) {
			*ret = (enum chat_family) f;
			return 0;
		}
	return -EINVAL;
}

/* ---- detection ---- */

/* A format we do not render, or our family (name == NULL). */
struct detected {
	int family;	  /* enum chat_family, or -1 */
	const char *name; /* the format's name when family < 0 */
};

static bool has(const char *t, const char *needle)
{
	return strstr(t, needle) != NULL;
}

static struct detected detect(const char *t)
{
#define OURS(f) ((struct detected){ .family = (f) })
#define OTHER(n) ((struct detected){ .family = -1, .name = (n) })
	/* Same order as llama.cpp: the first matching rule wins. */
	if (has(t, "<|im_start|>")) {
		if (has(t, "<|im_sep|>"))
			return OTHER("phi4");
		/* SmolVLM: <|im_start|> is its BOS, but the turns are not ChatML */
		if (has(t, "<end_of_utterance>"))
			return OTHER("smolvlm");
		return OURS(CHAT_FAMILY_CHATML);
	}
	if (has(t, "[INST]")) {
		/* Mistral's own templates (v7 [SYSTEM_PROMPT], v1 " [INST] " + system, v3 tools)
		 * come before the Llama 2 family, which every other [INST] template falls into. */
		if (has(t, "[SYSTEM_PROMPT]") || has(t, "' [INST] ' + system_message") ||
		    has(t, "[AVAILABLE_TOOLS]"))
			return OURS(CHAT_FAMILY_MISTRAL);
		return OURS(CHAT_FAMILY_LLAMA2);
	}
	if (has(t, "<|assistant|>") && has(t, "<|end|>"))
		return OURS(CHAT_FAMILY_PHI3);
	if (has(t, "[gMASK]<sop>"))
		return OTHER("chatglm4");
	if (has(t, "<|assistant|>") && has(t, "<|user|>"))
		return OTHER(has(t, "</s>") ? "falcon3" : "glmedge");
	if (has(t, "<|{{ item['role'] }}|>") && has(t, "<|begin_of_image|>"))
		return OTHER("glmedge");
	if (has(t, "<|user|>") && has(t, "<|endoftext|>"))
		return OTHER("zephyr");
	if (has(t, "bos_token + message['role']"))
		return OTHER("monarch");
	if (has(t, "<start_of_turn>"))
		return OURS(CHAT_FAMILY_GEMMA);
	if (has(t, "'\\n\\nAssistant: ' + eos_token"))
		return OTHER("orion");
	if (has(t, "GPT4 Correct "))
		return OTHER("openchat");
	if (has(t, "USER: ") && has(t, "ASSISTANT: "))
		return OTHER("vicuna");
	if (has(t, "### Instruction:") && has(t, "<|EOT|>"))
		return OTHER("deepseek");
	if (has(t, "<|START_OF_TURN_TOKEN|>") && has(t, "<|USER_TOKEN|>"))
		return OTHER("command-r");
	if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>"))
		return OURS(CHAT_FAMILY_LLAMA3);
	if (has(t, "[gMASK]sop"))
		return OTHER("chatglm3");
	if (has(t, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>")) /* <｜Assistant｜> */
		return OTHER("deepseek3");
	if (has(t, "[|system|]") && has(t, "[|endofturn|]"))
		return OTHER("exaone");
	if (has(t, "<|start_of_role|>"))
		return OTHER("granite");
	if (has(t, "<|header_start|>") && has(t, "<|header_end|>"))
		return OTHER("llama4");
	return OTHER(NULL);
#undef OURS
#undef OTHER
}

int chat_family_detect(const char *jinja, enum chat_family *ret, struct errmsg *e)
{
	struct detected d;

	assert_return(jinja && ret, -EINVAL);

	/* As llama.cpp: a "template" that is just a family's name selects it. */
	if (chat_family_from_name(jinja, ret) == 0)
		return 0;

	d = detect(jinja);
	if (d.family >= 0) {
		*ret = (enum chat_family) d.family;
		return 0;
	}
	if (d.name)
		return errmsg_set(e, -ENOENT,
				  "chat template looks like the '%s' format, which is not "
				  "supported; name a family (" FAMILY_LIST ") to use one anyway",
				  d.name);
	return errmsg_set(e, -ENOENT,
			  "chat template not recognised (%zu bytes, none of the markers of "
			  FAMILY_LIST "); name a family to use one",
			  strlen(jinja));
}

int chat_family_choose(const char *name, const char *jinja, enum chat_family *ret,
		       struct errmsg *e)
{
	assert_return(ret, -EINVAL);

	if (name) {
		if (chat_family_from_name(name, ret) < 0)
			return errmsg_set(e, -EINVAL,
					  "unknown chat template family '%s' (known: %s)", name,
					  FAMILY_LIST);
		return 0;
	}
	/* A model without a template (or with an empty one) gets ChatML, as in llama.cpp. */
	if (!jinja || !*jinja) {
		*ret = CHAT_FAMILY_CHATML;
		return 0;
	}
	return chat_family_detect(jinja, ret, e);
}

/* ---- rendering helpers ---- */

#define CAT(b, ...) strbuf_cat(b, __VA_ARGS__)

/* Whether code point c is white space for Python's str.isspace() (what str.strip() removes). */
static bool py_isspace(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/*
 * Decodes the UTF-8 sequence at s[0..n) (n >= 1); returns its length, or 0 when it is not a
 * well-formed sequence (such bytes are never white space).
 */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *ret)
{
	uint32_t c;
	size_t len;

	if (s[0] < 0x80) {
		*ret = s[0];
		return 1;
	}
	if ((s[0] & 0xe0) == 0xc0) {
		c = s[0] & 0x1f;
		len = 2;
	} else if ((s[0] & 0xf0) == 0xe0) {
		c = s[0] & 0x0f;
		len = 3;
	} else if ((s[0] & 0xf8) == 0xf0) {
		c = s[0] & 0x07;
		len = 4;
	} else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	/* Overlong forms and surrogates are not characters Python would have decoded. */
	if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
	    (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
		return 0;
	*ret = c;
	return len;
}

/* Python's str.strip() on the UTF-8 text s[0..n): the kept range is [*ret_begin, *ret_end). */
static void py_strip(const char *s, size_t n, size_t *ret_begin, size_t *ret_end)
{
	const unsigned char *u = (const unsigned char *) s;
	size_t begin = 0, end = n;
	uint32_t c;

	while (begin < end) {
		size_t len = utf8_decode(u + begin, end - begin, &c);
		if (len == 0 || !py_isspace(c))
			break;
		begin += len;
	}
	while (end > begin) {
		/* The last sequence starts at the last byte that is not a continuation byte. */
		size_t start = end - 1, len;
		while (start > begin && end - start < 4 && (u[start] & 0xc0) == 0x80)
			start--;
		len = utf8_decode(u + start, end - start, &c);
		if (len != end - start || !py_isspace(c))
			break;
		end = start;
	}
	*ret_begin = begin;
	*ret_end = end;
}

static int buf_stripped(struct strbuf *b, const char *s)
{
	size_t begin, end;

	py_strip(s, strlen(s), &begin, &end);
	return strbuf_add(b, s + begin, end - begin);
}

enum role {
	ROLE_SYSTEM,
	ROLE_USER,
	ROLE_ASSISTANT,
};

static int parse_roles(const struct chat_message *msgs, size_t n, enum role *roles,
		       struct errmsg *e)
{
	for (size_t i = 0; i < n; i++) {
		const char *r = msgs[i].role;

		if (!r || !msgs[i].content)
			return errmsg_set(e, -EINVAL, "message %zu: %s is missing", i,
					  r ? "content" : "role");
		if (strcmp(r, "system") == 0)
			roles[i] = ROLE_SYSTEM;
		else if (strcmp(r, "user") == 0)
			roles[i] = ROLE_USER;
		else if (strcmp(r, "assistant") == 0)
			roles[i] = ROLE_ASSISTANT;
		else
			return errmsg_set(e, -EINVAL,
					  "message %zu: role '%.64s' is not supported (system, "
					  "user or assistant)",
					  i, r);
	}
	return 0;
}

static const char *role_name(enum role r)
{
	return r == ROLE_SYSTEM ? "system" : r == ROLE_USER ? "user" : "assistant";
}

/*
 * The rule of the Llama 2, Mistral and Gemma templates: after an optional leading system
 * message, user and assistant alternate, starting with user. Returns the index of the first
 * message after the system message.
 */
static int check_alternation(enum chat_family f, const enum role *roles, size_t n,
			     size_t *ret_first, struct errmsg *e)
{
	size_t first = n > 0 && roles[0] == ROLE_SYSTEM ? 1 : 0;

	for (size_t i = first; i < n; i++) {
		enum role want = (i - first) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;

		if (roles[i] == ROLE_SYSTEM)
			return errmsg_set(e, -EINVAL,
					  "message %zu: the %s template takes a system message "
					  "only as the first message",
					  i, family_names[f]);
		if (roles[i] != want)
			return errmsg_set(e, -EINVAL,
					  "message %zu: the %s template needs user and assistant "
					  "turns to alternate, starting with user (got %s, "
					  "expected %s)",
					  i, family_names[f], role_name(roles[i]), role_name(want));
	}
	*ret_first = first;
	return 0;
}

/* ---- the families ---- */

static int render_chatml(struct strbuf *b, const struct chat_message *m, size_t n, bool add)
{
	int r = 0;

	for (size_t i = 0; i < n && r >= 0; i++)
		r = CAT(b, "<|im_start|>", m[i].role, "\n", m[i].content, "<|im_end|>\n");
	if (r >= 0 && add)
		r = strbuf_adds(b, "<|im_start|>assistant\n");
	return r;
}

static int render_llama3(struct strbuf *b, const struct chat_message *m, size_t n, bool add)
{
	int r = 0;

	for (size_t i = 0; i < n && r >= 0; i++) {
		r = CAT(b, "<|start_header_id|>", m[i].role, "<|end_header_id|>\n\n");
		if (r >= 0)
			r = buf_stripped(b, m[i].content);
		if (r >= 0)
			r = strbuf_adds(b, "<|eot_id|>");
	}
	if (r >= 0 && add)
		r = strbuf_adds(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	return r;
}

static int render_phi3(struct strbuf *b, const struct chat_message *m, const enum role *roles,
		       size_t n, bool add)
{
	int r = 0;

	for (size_t i = 0; i < n && r >= 0; i++) {
		if (roles[i] == ROLE_SYSTEM && !*m[i].content)
			continue; /* the template tests the content's truth */
		r = CAT(b, "<|", m[i].role, "|>\n", m[i].content, "<|end|>\n");
	}
	if (r >= 0)
		r = strbuf_adds(b, add ? "<|assistant|>\n" : "<|endoftext|>");
	return r;
}

static int render_gemma(struct strbuf *b, const struct chat_message *m, const enum role *roles,
			size_t n, bool add, struct errmsg *e)
{
	size_t first;
	int r;

	r = check_alternation(CHAT_FAMILY_GEMMA, roles, n, &first, e);
	if (r < 0)
		return r;
	if (first == 1 && n == 1)
		return errmsg_set(e, -EINVAL,
				  "the gemma template has no system role; a system message is "
				  "folded into the first user turn, and there is none");
	for (size_t i = first; i < n && r >= 0; i++) {
		r = CAT(b, "<start_of_turn>", roles[i] == ROLE_USER ? "user" : "model", "\n");
		if (r >= 0 && i == 1 && first == 1) {
			size_t begin, end;

			py_strip(m[0].content, strlen(m[0].content), &begin, &end);
			if (end > begin) {
				r = strbuf_add(b, m[0].content + begin, end - begin);
				if (r >= 0)
					r = strbuf_adds(b, "\n\n");
			}
		}
		if (r >= 0)
			r = buf_stripped(b, m[i].content);
		if (r >= 0)
			r = strbuf_adds(b, "<end_of_turn>\n");
	}
	if (r >= 0 && add)
		r = strbuf_adds(b, "<start_of_turn>model\n");
	return r;
}

static int render_llama2(struct strbuf *b, const struct chat_message *m, const enum role *roles,
			 size_t n, struct errmsg *e)
{
	_cleanup_free_ char *first_content = NULL;
	size_t first;
	int r;

	r = check_alternation(CHAT_FAMILY_LLAMA2, roles, n, &first, e);
	if (r < 0)
		return r;
	for (size_t i = first; i < n && r >= 0; i++) {
		const char *content = m[i].content;

		if (i == 1 && first == 1) {
			/* The system prompt is wrapped into the first user turn, and the whole
			 * is stripped together. */
			struct strbuf t = {};

			r = CAT(&t, "<<SYS>>\n", m[0].content, "\n<</SYS>>\n\n", content);
			first_content = strbuf_steal(&t);
			if (r < 0)
				return r;
			content = first_content;
		}
		if (roles[i] == ROLE_USER) {
			/* Each user turn opens with BOS; the first one is the tokenizer's. */
			r = strbuf_adds(b, i == first ? "[INST] " : "<s>[INST] ");
			if (r >= 0)
				r = buf_stripped(b, content);
			if (r >= 0)
				r = strbuf_adds(b, " [/INST]");
		} else {
			r = strbuf_adds(b, " ");
			if (r >= 0)
				r = buf_stripped(b, content);
			if (r >= 0)
				r = strbuf_adds(b, " </s>");
		}
	}
	return r;
}

static int render_mistral(struct strbuf *b, const struct chat_message *m, const enum role *roles,
			  size_t n, struct errmsg *e)
{
	size_t first;
	int r;

	r = check_alternation(CHAT_FAMILY_MISTRAL, roles, n, &first, e);
	if (r < 0)
		return r;
	for (size_t i = first; i < n && r >= 0; i++) {
		if (roles[i] == ROLE_USER) {
			if (i == n - 1 && first == 1)
				r = CAT(b, "[INST]", m[0].content, "\n\n", m[i].content, "[/INST]");
			else
				r = CAT(b, "[INST]", m[i].content, "[/INST]");
		} else
			r = CAT(b, m[i].content, "</s>");
	}
	return r;
}

int chat_render(enum chat_family f, const struct chat_message *msgs, size_t n_msgs,
		bool add_assistant, char **ret, struct errmsg *e)
{
	_cleanup_free_ enum role *roles = NULL;
	_cleanup_free_ char *text = NULL;
	struct strbuf b = {};
	int r;

	assert_return(ret, -EINVAL);
	assert_return(msgs || n_msgs == 0, -EINVAL);
	if ((unsigned) f >= CHAT_FAMILY_COUNT_)
		return errmsg_set(e, -EINVAL, "chat family %d does not exist", (int) f);

	if (n_msgs > 0) {
		roles = calloc(n_msgs, sizeof(*roles));
		if (!roles)
			return -ENOMEM;
	}
	r = parse_roles(msgs, n_msgs, roles, e);
	if (r < 0)
		return r;

	/* So that an empty rendering still returns a string. */
	r = strbuf_add(&b, "", 0);
	if (r >= 0) {
		switch (f) {
		case CHAT_FAMILY_LLAMA2:
			r = render_llama2(&b, msgs, roles, n_msgs, e);
			break;
		case CHAT_FAMILY_LLAMA3:
			r = render_llama3(&b, msgs, n_msgs, add_assistant);
			break;
		case CHAT_FAMILY_CHATML:
			r = render_chatml(&b, msgs, n_msgs, add_assistant);
			break;
		case CHAT_FAMILY_MISTRAL:
			r = render_mistral(&b, msgs, roles, n_msgs, e);
			break;
		case CHAT_FAMILY_PHI3:
			r = render_phi3(&b, msgs, roles, n_msgs, add_assistant);
			break;
		case CHAT_FAMILY_GEMMA:
			r = render_gemma(&b, msgs, roles, n_msgs, add_assistant, e);
			break;
		default:
			r = -EINVAL;
		}
	}
	text = strbuf_steal(&b);
	if (r == -ENOMEM)
		return errmsg_set(e, r, "out of memory rendering %zu chat messages", n_msgs);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(text);
	return 0;
}
