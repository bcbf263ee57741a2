/* SPDX-License-Identifier: MIT */
/*
 * vocab-pre.c: BPE pre-tokenizers: llama.cpp's split patterns, run through PCRE2.
 *
 * The patterns below are copied from llama.cpp (build 10587, src/llama-vocab.cpp,
 * llm_tokenizer_bpe), as were the name → pattern and name → flag tables. Non-ASCII literals
 * are written as \x{...} so the file stays ASCII.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <errno.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "../basic/strbuf.h"
#include "vocab-pre.h"

#define PRE_MAX_REGEX 6

/* GPT-2's pattern; llama.cpp's default list and several others reuse it. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* Llama 3's (?i:'s|'t|...) spelled out, as llama.cpp adapted it */
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                                  \
	RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"                              \
			" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
	RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"                                   \
			" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* " ?[^(\s|.,!?…。，、।۔،)]+" */
#define RE_PORO                                                                                    \
	" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"
/* Tekken's and GPT-4o's ways of splitting CamelCase words */
#define RE_UPPER_LOWER "((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
#define RE_LOWER_UPPER "((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"

struct pre_def {
	const char *const *names; /* names[0] is the canonical one */
	const char *const *regexes;
	struct vocab_pre_traits traits;
};

#define LIST(...) ((const char *const[]){ __VA_ARGS__, NULL })

static const struct pre_def pre_defs[] = {
	{
		.names = LIST("default"),
		.regexes = LIST("[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+",
				"[0-9][0-9][0-9]"),
	},
	{
		.names = LIST("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
			      "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "jina-v1-en",
			      "jina-v2-code", "roberta-bpe", "exaone4", "mpt", "olmo", "jais",
			      "trillion", "granite-docling"),
		.regexes = LIST(RE_GPT2),
	},
	{
		.names = LIST("llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral",
			      "midm-2.0", "lfm2", "jina-v5-nano"),
		.regexes = LIST(RE_LLAMA3),
		.traits = { .ignore_merges = true, .add_bos = true },
	},
	{
		.names = LIST("dbrx", "smaug-bpe"),
		.regexes = LIST(RE_LLAMA3),
	},
	{
		.names = LIST("chatglm-bpe", "glm4"),
		.regexes = LIST(RE_LLAMA3),
		.traits = { .no_bos = true },
	},
	{
		.names = LIST("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez",
			      "stablelm2", "hunyuan", "solar-open", "grok-2"),
		.regexes = LIST(RE_QWEN2),
	},
	{
		.names = LIST("qwen35"),
		.regexes = LIST(RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|"
						" ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
						"\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
	},
	{
		.names = LIST("deepseek-coder"),
		/* [一-龥ࠀ-一가-퟿]+ */
		.regexes = LIST("[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
				"[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
				"\\p{N}"),
	},
	{
		.names = LIST("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"),
		/* [一-龥぀-ゟ゠-ヿ]+ */
		.regexes = LIST("\\p{N}{1,3}",
				"[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
				"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
				"[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
				" ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
	},
	{
		.names = LIST("falcon"),
		.regexes = LIST("[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"),
	},
	{
		.names = LIST("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
			      "minerva-7b", "mellum2"),
		.regexes = LIST("\\p{N}", RE_GPT2),
	},
	{
		.names = LIST("poro-chat", "bloom", "gpt3-finnish"),
		.regexes = LIST(RE_PORO),
	},
	{
		.names = LIST("viking"),
		.regexes = LIST(RE_PORO, "\\p{N}"),
	},
	{
		.names = LIST("tekken"),
		.regexes = LIST("[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER_LOWER "|"
				"[^\\r\\n\\p{L}\\p{N}]?" RE_LOWER_UPPER "|\\p{N}|"
				" ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
		.traits = { .ignore_merges = true, .add_bos = true },
	},
	{
		.names = LIST("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"),
		.regexes = LIST("[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER_LOWER RE_CONTRACTIONS "?|"
				"[^\\r\\n\\p{L}\\p{N}]?" RE_LOWER_UPPER RE_CONTRACTIONS "?|"
				"\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
				"\\s+(?!\\S)|\\s+"),
	},
	{
		.names = LIST("seed-coder"),
		.regexes = LIST(RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}|"
						" ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|"
						"\\s+(?!\\S)|\\s+"),
	},
	{
		.names = LIST("bailingmoe", "bailingmoe2", "llada-moe"),
		.regexes = LIST("'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|"
				"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
				" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"),
	},
	{
		.names = LIST("ufakzeka"),
		.regexes = LIST("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
				" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
	},
	{
		.names = LIST("laguna"),
		.regexes = LIST("[^\\n]+|[\\n]+", RE_QWEN2),
	},
	{
		.names = LIST("minicpm5"),
		.regexes = LIST("\\p{N}{1,3}",
				RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+|"
						" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
						"\\s+(?!\\S)|\\s+"),
		.traits = { .ignore_merges = true },
	},
	{
		.names = LIST("exaone-moe"),
		.regexes = LIST(RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?"
						"(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}|"
						" ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|"
						"\\s+(?!\\S)|\\s+"),
	},
};

struct vocab_pre {
	const struct pre_def *def;
	size_t n_re;
	pcre2_code *re[PRE_MAX_REGEX];
};

/* Unicode White_Space, which is what llama.cpp's \s means (its table comes from Python's
 * `regex` module); PCRE2's own \s also matches U+180E. */
#define WS_INNER                                                                                   \
	"\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"     \
	"\\x{205F}\\x{3000}"

/*
 * Turns one of llama.cpp's patterns into the PCRE2 pattern that matches the same way:
 *
 *  - \s becomes the explicit White_Space set (see WS_INNER);
 *  - \p{S} no longer matches '~'. llama.cpp runs every pattern that uses a \p{...} category
 *    (except the GPT-2 and Llama 3 ones, which have hand-written matchers and use no \p{S})
 *    through std::regex over a copy of the text where each non-ASCII code point stands for
 *    its category, and spells the categories' ASCII members out by hand; its list of ASCII
 *    symbols lacks '~'. A class with \p{S} is wrapped to exclude (or, negated, include) it.
 */
static int rewrite_pattern(const char *re, char **ret)
{
	struct strbuf out = {}, c = {};
	int r = 0;

	for (size_t i = 0; re[i] && r >= 0; i++) {
		bool negated = false, has_sym = false;

		if (strncmp(re + i, "\\p{S}", 5) == 0) {
			r = strbuf_adds(&out, "(?:(?!~)\\p{S})");
			i += 4;
			continue;
		}
		if (re[i] == '\\' && re[i + 1]) {
			if (re[i + 1] == 's')
				r = strbuf_adds(&out, "[" WS_INNER "]");
			else if (re[i + 1] == 'S')
				r = strbuf_adds(&out, "[^" WS_INNER "]");
			else
				r = strbuf_add(&out, re + i, 2);
			i++;
			continue;
		}
		if (re[i] != '[') {
			r = strbuf_add(&out, re + i, 1);
			continue;
		}

		/* a bracket class: collect it, then decide how to emit it */
		c.len = 0;
		i++;
		if (re[i] == '^') {
			negated = true;
			i++;
		}
		if (re[i] == ']') /* a leading ] is a literal */
			r = strbuf_add(&c, re + i++, 1);
		for (; re[i] && re[i] != ']' && r >= 0; i++) {
			if (re[i] == '\\' && re[i + 1]) {
				if (re[i + 1] == 's')
					r = strbuf_adds(&c, WS_INNER);
				else
					r = strbuf_add(&c, re + i, 2);
				has_sym |= strncmp(re + i, "\\p{S}", 5) == 0;
				i++;
			} else {
				r = strbuf_add(&c, re + i, 1);
			}
		}
		if (r < 0)
			break;
		if (re[i] != ']') {
			r = -EINVAL; /* unterminated class */
			break;
		}
		if ((r = strbuf_adds(&out, has_sym ? (negated ? "(?:~|[^" : "(?:(?!~)[")
					       : (negated ? "[^" : "["))) < 0 ||
		    (r = strbuf_add(&out, c.s ? c.s : "", c.len)) < 0 ||
		    (r = strbuf_adds(&out, has_sym ? "])" : "]")) < 0)
			break;
	}
	strbuf_done(&c);
	if (r >= 0 && !out.s)
		r = -EINVAL;
	if (r < 0) {
		strbuf_done(&out);
		return r;
	}
	*ret = strbuf_steal(&out);
	return 0;
}

static const struct pre_def *pre_def_find(const char *name)
{
	for (size_t i = 0; i < ELEMENTSOF(pre_defs); i++)
		for (const char *const *n = pre_defs[i].names; *n; n++)
			if (strcmp(*n, name) == 0)
				return &pre_defs[i];
	return NULL;
}

struct vocab_pre *vocab_pre_free(struct vocab_pre *p)
{
	if (!p)
		return NULL;
	for (size_t i = 0; i < p->n_re; i++)
		pcre2_code_free(p->re[i]);
	free(p);
	return NULL;
}

int vocab_pre_new(const char *name, struct vocab_pre **ret, struct errmsg *e)
{
	_cleanup_(vocab_pre_freep) struct vocab_pre *p = NULL;
	const struct pre_def *def;

	assert_return(ret, -EINVAL);
	if (!name || !*name)
		name = "default";
	def = pre_def_find(name);
	if (!def)
		return errmsg_set(e, -EOPNOTSUPP,
				  "tokenizer.ggml.pre: pre-tokenizer '%s' is not supported", name);

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->def = def;
	for (const char *const *re = def->regexes; *re; re++) {
		_cleanup_free_ char *pattern = NULL;
		PCRE2_SIZE err_off;
		int err, r;

		if (p->n_re == PRE_MAX_REGEX)
			return errmsg_set(e, -EINVAL, "pre-tokenizer '%s': too many patterns",
					  name);
		r = rewrite_pattern(*re, &pattern);
		if (r < 0)
			return r;
		p->re[p->n_re] = pcre2_compile((PCRE2_SPTR) pattern, PCRE2_ZERO_TERMINATED,
					       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err,
					       &err_off, NULL);
		if (!p->re[p->n_re]) {
			PCRE2_UCHAR msg[160];

			(void) pcre2_get_error_message(err, msg, sizeof(msg));
			return errmsg_set(e, err == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EINVAL,
					  "pre-tokenizer '%s': pattern %zu at offset %zu: %s", name,
					  p->n_re, (size_t) err_off, (const char *) msg);
		}
		/* The interpreter is the fallback when JIT is not available on this CPU. */
		(void) pcre2_jit_compile(p->re[p->n_re], PCRE2_JIT_COMPLETE);
		p->n_re++;
	}
	*ret = TAKE_PTR(p);
	return 0;
}

const char *vocab_pre_name(const struct vocab_pre *p)
{
	return p ? p->def->names[0] : NULL;
}

struct vocab_pre_traits vocab_pre_traits(const struct vocab_pre *p)
{
	return p ? p->def->traits : (struct vocab_pre_traits){};
}

size_t vocab_utf8_decode(const char *s, size_t len, uint32_t *ret_cp)
{
	const uint8_t *u = (const uint8_t *) s;
	size_t n;
	uint32_t cp;

	if (len == 0)
		return 0;
	if (!(u[0] & 0x80)) {
		*ret_cp = u[0];
		return 1;
	}
	if (!(u[0] & 0x40))
		return 0;
	if (!(u[0] & 0x20)) {
		n = 2;
		cp = u[0] & 0x1f;
	} else if (!(u[0] & 0x10)) {
		n = 3;
		cp = u[0] & 0x0f;
	} else if (!(u[0] & 0x08)) {
		n = 4;
		cp = u[0] & 0x07;
	} else {
		return 0;
	}
	if (len < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (u[i] & 0x3f);
	}
	*ret_cp = cp;
	return n;
}

size_t vocab_utf8_encode(uint32_t cp, char *out)
{
	uint8_t *o = (uint8_t *) out;

	if (cp <= 0x7f) {
		o[0] = (uint8_t) cp;
		return 1;
	}
	if (cp <= 0x7ff) {
		o[0] = (uint8_t) (0xc0 | (cp >> 6));
		o[1] = (uint8_t) (0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp <= 0xffff) {
		o[0] = (uint8_t) (0xe0 | (cp >> 12));
		o[1] = (uint8_t) (0x80 | ((cp >> 6) & 0x3f));
		o[2] = (uint8_t) (0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (uint8_t) (0xf0 | ((cp >> 18) & 0x07));
	o[1] = (uint8_t) (0x80 | ((cp >> 12) & 0x3f));
	o[2] = (uint8_t) (0x80 | ((cp >> 6) & 0x3f));
	o[3] = (uint8_t) (0x80 | (cp & 0x3f));
	return 4;
}

void vocab_pre_words_done(struct vocab_pre_words *w)
{
	if (!w)
		return;
	free(w->text);
	free(w->offs);
	*w = (struct vocab_pre_words){};
}

/* A growing list of piece boundaries, in code point indices. */
struct bounds {
	size_t *v;
	size_t n, cap;
};

static int bounds_push(struct bounds *b, size_t x)
{
	if (b->n == b->cap) {
		size_t ncap = b->cap ? b->cap * 2 : 64;
		size_t *nv = realloc(b->v, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		b->v = nv;
		b->cap = ncap;
	}
	b->v[b->n++] = x;
	return 0;
}

/* The per-call state of a split: the decoded text in both encodings and the match state.
 * Offsets are 32-bit: vocab_pre_split() refuses inputs of 1 GiB and more. */
struct split {
	uint32_t n_cp;
	char *subj;         /* what PCRE2 sees: always valid UTF-8 */
	uint32_t *subj_off; /* n_cp + 1: byte offset of each code point in subj */
	uint32_t *cp_of;    /* subj_len + 1: code point index at each code point's offset */
	char *out;          /* what the pieces are made of: llama.cpp's re-encoding */
	uint32_t out_len;
	uint32_t *out_off;  /* n_cp + 1 */
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jit_stack;
};

static void split_done(struct split *sp)
{
	free(sp->subj);
	free(sp->subj_off);
	free(sp->cp_of);
	free(sp->out);
	free(sp->out_off);
	pcre2_match_data_free(sp->md);
	pcre2_match_context_free(sp->mctx);
	pcre2_jit_stack_free(sp->jit_stack);
}

/* One code point as llama.cpp's unicode_cpts_from_utf8() reads it; returns bytes used. */
static size_t decode_cp(const char *s, size_t len, uint32_t *cp)
{
	size_t k = vocab_utf8_decode(s, len, cp);

	if (k == 0) {
		/* llama.cpp: "Silently ignore invalid UTF-8 input", one byte at a time */
		*cp = 0xfffd;
		k = 1;
	}
	/* Past U+10FFFF llama.cpp's encoder throws (and the process aborts); we carry on as
	 * for any other invalid sequence. */
	if (*cp > 0x10ffff)
		*cp = 0xfffd;
	return k;
}

/* Surrogates round-trip as their 3-byte forms, but PCRE2 only takes valid UTF-8: it sees a
 * private-use code point instead, which is in the same classes (a "C" category: no letter,
 * number, mark, punctuation, symbol or space). */
static uint32_t subject_cp(uint32_t cp)
{
	return cp >= 0xd800 && cp <= 0xdfff ? 0xe000 : cp;
}

static uint32_t utf8_len_cp(uint32_t cp)
{
	return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

static int split_decode(struct split *sp, const char *s, size_t len)
{
	uint32_t subj_len = 0, out_len = 0, n = 0, cp;

	if (len >= UINT32_MAX / 4)
		return -E2BIG;
	for (size_t i = 0; i < len; n++) {
		i += decode_cp(s + i, len - i, &cp);
		subj_len += utf8_len_cp(subject_cp(cp));
		out_len += utf8_len_cp(cp);
	}
	sp->subj = malloc((size_t) subj_len + 1);
	sp->out = malloc((size_t) out_len + 1);
	sp->subj_off = malloc(((size_t) n + 1) * sizeof(uint32_t));
	sp->out_off = malloc(((size_t) n + 1) * sizeof(uint32_t));
	sp->cp_of = malloc(((size_t) subj_len + 1) * sizeof(uint32_t));
	if (!sp->subj || !sp->out || !sp->subj_off || !sp->out_off || !sp->cp_of)
		return -ENOMEM;

	subj_len = out_len = n = 0;
	for (size_t i = 0; i < len; n++) {
		i += decode_cp(s + i, len - i, &cp);
		sp->subj_off[n] = subj_len;
		sp->out_off[n] = out_len;
		sp->cp_of[subj_len] = n;
		subj_len += (uint32_t) vocab_utf8_encode(subject_cp(cp), sp->subj + subj_len);
		out_len += (uint32_t) vocab_utf8_encode(cp, sp->out + out_len);
	}
	sp->subj_off[n] = subj_len;
	sp->out_off[n] = out_len;
	sp->cp_of[subj_len] = n;
	sp->subj[subj_len] = 0;
	sp->out[out_len] = 0;
	sp->out_len = out_len;
	sp->n_cp = n;
	return 0;
}

/* Finds the next match at or after start; 1 and [*ms, *me) if found, 0 if not, -errno. */
static int next_match(struct split *sp, const pcre2_code *re, const char *subj, size_t len,
		      size_t start, uint32_t opts, size_t *ms, size_t *me)
{
	int rc = pcre2_match(re, (PCRE2_SPTR) subj, len, start, opts | PCRE2_NO_UTF_CHECK, sp->md,
			     sp->mctx);
	PCRE2_SIZE *ov;

	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	if (rc == PCRE2_ERROR_NOMEMORY)
		return -ENOMEM;
	if (rc < 0)
		return -EIO;
	/* rc == 0 only says the ovector has no room for the groups; the whole match is there */
	ov = pcre2_get_ovector_pointer(sp->md);
	*ms = ov[0];
	*me = ov[1];
	return 1;
}

/* Splits the code points [a, b) with re, appending the end of each piece to out. */
static int split_segment(struct split *sp, const pcre2_code *re, size_t a, size_t b,
			 struct bounds *out)
{
	const size_t base = sp->subj_off[a];
	const size_t len = sp->subj_off[b] - base;
	const char *subj = sp->subj + base;
	size_t start = 0, last = 0;
	int r;

	while (start <= len) {
		size_t ms, me;

		r = next_match(sp, re, subj, len, start, 0, &ms, &me);
		if (r < 0)
			return r;
		if (r == 0)
			break;
		if (me == ms) {
			/* As std::regex_iterator does after an empty match: try for a non-empty
			 * one at the same place, else move on by one character. */
			r = next_match(sp, re, subj, len, ms,
				       PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED, &ms, &me);
			if (r < 0)
				return r;
			if (r == 0) {
				if (ms >= len)
					break;
				start = sp->subj_off[sp->cp_of[base + ms] + 1] - base;
				continue;
			}
		}
		if (ms > last && (r = bounds_push(out, sp->cp_of[base + ms])) < 0)
			return r;
		if ((r = bounds_push(out, sp->cp_of[base + me])) < 0)
			return r;
		last = start = me;
	}
	if (last < len)
		return bounds_push(out, b);
	return 0;
}

int vocab_pre_split(const struct vocab_pre *p, const char *s, size_t len,
		    struct vocab_pre_words *w)
{
	struct split sp = {};
	struct bounds cur = {}, next = {};
	int r;

	assert_return(p && w && (s || len == 0), -EINVAL);
	vocab_pre_words_done(w);

	r = split_decode(&sp, s, len);
	if (r < 0)
		goto out;
	sp.md = pcre2_match_data_create(1, NULL);
	sp.mctx = pcre2_match_context_create(NULL);
	if (!sp.md || !sp.mctx) {
		r = -ENOMEM;
		goto out;
	}
	/* The default JIT stack (32 KiB) is too small for long runs of some patterns. */
	sp.jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
	if (sp.jit_stack)
		pcre2_jit_stack_assign(sp.mctx, NULL, sp.jit_stack);

	if ((r = bounds_push(&cur, 0)) < 0)
		goto out;
	if (sp.n_cp > 0 && (r = bounds_push(&cur, sp.n_cp)) < 0)
		goto out;
	for (size_t k = 0; k < p->n_re; k++) {
		struct bounds tmp;

		next.n = 0;
		if ((r = bounds_push(&next, 0)) < 0)
			goto out;
		for (size_t i = 0; i + 1 < cur.n; i++)
			if ((r = split_segment(&sp, p->re[k], cur.v[i], cur.v[i + 1], &next)) < 0)
				goto out;
		tmp = cur;
		cur = next;
		next = tmp;
	}

	/* Boundaries in code points → byte offsets into the re-encoded text. */
	for (size_t i = 0; i < cur.n; i++)
		cur.v[i] = sp.out_off[cur.v[i]];
	w->text = TAKE_PTR(sp.out);
	w->text_len = sp.out_len;
	w->offs = TAKE_PTR(cur.v);
	w->n = cur.n - 1;
	r = 0;
out:
	split_done(&sp);
	free(cur.v);
	free(next.v);
	return r;
}
