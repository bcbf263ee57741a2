/* SPDX-License-Identifier: MIT */
/*
 * vocab-pre.h: the BPE pre-tokenizers (internal to vocab.c; tests use it directly).
 *
 * A byte-level BPE vocabulary names its pre-tokenizer in `tokenizer.ggml.pre`. Each one is a
 * list of regular expressions, taken verbatim from llama.cpp (src/llama-vocab.cpp), applied
 * one after the other: the first splits the text, every later one splits each piece again,
 * and the text between matches is kept as pieces of its own, so the pieces always cover the
 * whole input. llama.cpp runs hand-written matchers for the GPT-2 and Llama 3 patterns and
 * std::regex over a category-collapsed copy of the text for the rest; both agree with a real
 * Unicode regex engine, so we run every pattern through PCRE2 (UTF, JIT when available).
 * `\s` is rewritten to the exact White_Space set llama.cpp's tables use (PCRE2's \s adds
 * U+180E).
 *
 * The input need not be valid UTF-8: it is decoded as llama.cpp's unicode_cpts_from_utf8()
 * does (each byte that does not start a well-formed sequence becomes U+FFFD; overlong forms
 * decode to their value) and the pieces are re-encoded from those code points, so invalid
 * bytes come out as EF BF BD, as they do in llama.cpp.
 *
 * Threading: a vocab_pre is immutable after vocab_pre_new(); vocab_pre_split() may run from
 * any number of threads at once (each call has its own match state).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

struct vocab_pre;

/* What llama.cpp changes besides the regexes when it sees a pre-tokenizer name. */
struct vocab_pre_traits {
	bool ignore_merges; /* a piece that is a whole token is taken as is (Llama 3, ...) */
	bool add_bos;       /* default for tokenizer.ggml.add_bos_token (Llama 3, Tekken, ...) */
	bool no_bos;        /* no default BOS id (ChatGLM 4) */
};

/*
 * Looks up the pre-tokenizer called name (NULL or "" mean llama.cpp's "default", which it
 * uses when the key is missing) and compiles its patterns. -EOPNOTSUPP with e naming the
 * pre-tokenizer when it is unknown or not supported here; -ENOMEM; -EINVAL if a pattern does
 * not compile (a bug).
 */
int vocab_pre_new(const char *name, struct vocab_pre **ret, struct errmsg *e);
struct vocab_pre *vocab_pre_free(struct vocab_pre *p);
DEFINE_CLEANUP_FUNC(struct vocab_pre *, vocab_pre_free, NULL)

/* The canonical name given to vocab_pre_new() ("default" for NULL/""). */
const char *vocab_pre_name(const struct vocab_pre *p);
struct vocab_pre_traits vocab_pre_traits(const struct vocab_pre *p);

/*
 * The pieces of one split: piece i is text[offs[i] .. offs[i + 1]), i < n. They are never
 * empty and cover text, which is the input re-encoded as described above (so text_len may
 * differ from the input length when the input is not valid UTF-8).
 */
struct vocab_pre_words {
	char *text;   /* owned */
	size_t text_len;
	size_t *offs; /* owned: n + 1 entries */
	size_t n;
};

/* Splits len bytes of s into w (whose old contents are freed). 0, -ENOMEM, -E2BIG for 1 GiB
 * or more, or -EIO when the regex engine fails (match or JIT stack limit). */
int vocab_pre_split(const struct vocab_pre *p, const char *s, size_t len,
		    struct vocab_pre_words *w);
void vocab_pre_words_done(struct vocab_pre_words *w);

/*
 * Decodes one code point the way llama.cpp does (no overlong/surrogate checks, values up to
 * 0x1FFFFF). Returns the number of bytes used (1..4), or 0 for an invalid sequence, in which
 * case llama.cpp substitutes U+FFFD and skips one byte.
 */
size_t vocab_utf8_decode(const char *s, size_t len, uint32_t *ret_cp);
/* Encodes cp (<= 0x10FFFF) into out (4 bytes); returns the length. */
size_t vocab_utf8_encode(uint32_t cp, char *out);
