/* SPDX-License-Identifier: MIT */
/*
 * vocab.h: tokenizers read from GGUF metadata (`tokenizer.ggml.*`).
 *
 *  - `llama`: SentencePiece-style. Spaces become U+2581, a leading U+2581 is added
 *    (add_space_prefix, default true), pieces merge greedily by score, unknown bytes fall
 *    back to the <0xXX> byte tokens.
 *  - `gpt2`: byte-level BPE. Text is split by the pre-tokenizer named in
 *    `tokenizer.ggml.pre` (gpt-2, llama-bpe (Llama 3), qwen2, deepseek-coder, ...), each
 *    piece is mapped byte→unicode as GPT-2 does, then merged by `tokenizer.ggml.merges` rank.
 *
 * Special tokens (token_type CONTROL / USER_DEFINED) are matched in the text first when the
 * caller asks for it (parse_special), as llama.cpp does for chat prompts.
 *
 * Lifetime: a vocab owns copies of everything it needs; the gguf may be freed after load.
 * Threading: immutable after load; tokenize/detokenize are safe from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

struct gguf;
struct vocab;

enum vocab_kind {
	VOCAB_KIND_SPM,  /* tokenizer.ggml.model = llama */
	VOCAB_KIND_BPE,  /* tokenizer.ggml.model = gpt2 */
};

/* token_type values as stored in tokenizer.ggml.token_type */
enum vocab_token_type {
	VOCAB_TOKEN_TYPE_UNDEFINED = 0,
	VOCAB_TOKEN_TYPE_NORMAL = 1,
	VOCAB_TOKEN_TYPE_UNKNOWN = 2,
	VOCAB_TOKEN_TYPE_CONTROL = 3,
	VOCAB_TOKEN_TYPE_USER_DEFINED = 4,
	VOCAB_TOKEN_TYPE_UNUSED = 5,
	VOCAB_TOKEN_TYPE_BYTE = 6,
};

int vocab_load(const struct gguf *g, struct vocab **ret, struct errmsg *e);
struct vocab *vocab_free(struct vocab *v);
DEFINE_CLEANUP_FUNC(struct vocab *, vocab_free, NULL)

enum vocab_kind vocab_kind(const struct vocab *v);
uint32_t vocab_n_tokens(const struct vocab *v);
/* -1 when the model has none. */
int32_t vocab_bos(const struct vocab *v);
int32_t vocab_eos(const struct vocab *v);
/* Whether BOS is added by default (tokenizer.ggml.add_bos_token, else the kind's default). */
bool vocab_add_bos(const struct vocab *v);
/* End of generation: EOS, EOT (<|eot_id|>, <|im_end|>, <end_of_turn>, ...). */
bool vocab_is_eog(const struct vocab *v, int32_t id);
bool vocab_is_control(const struct vocab *v, int32_t id);
/* The token's text as stored (NUL-terminated), or NULL for an out-of-range id. */
const char *vocab_token_text(const struct vocab *v, int32_t id);
/* Finds a token by its exact stored text; -1 when absent. */
int32_t vocab_find(const struct vocab *v, const char *text);

/*
 * Tokenizes len bytes of text (need not be valid UTF-8). add_bos: prepend BOS if the
 * model has one. parse_special: recognise control/user-defined token texts in the input.
 * On success returns the number of ids; if that exceeds max_ids, only max_ids are written
 * and the full count is still returned (call again with a bigger buffer). -errno on error.
 */
int64_t vocab_tokenize(const struct vocab *v, const char *text, size_t len, bool add_bos,
		       bool parse_special, int32_t *ids, size_t max_ids);

/*
 * The bytes a token stands for when printed: SPM turns U+2581 into spaces and <0xXX> into
 * the byte; BPE undoes the byte→unicode map. Control tokens render as "" unless
 * render_special. Writes up to cap bytes to buf, returns the full length (or -errno).
 */
int64_t vocab_token_to_piece(const struct vocab *v, int32_t id, bool render_special, char *buf,
			     size_t cap);

/*
 * Streaming detokenizer: feed ids one by one, get back only whole UTF-8 characters; bytes of
 * a character split across tokens are held until it completes (invalid sequences are passed
 * through once it is clear they cannot complete). As llama.cpp, SPM drops the leading space
 * of the first piece only when the stream does not start with BOS (after BOS it stays:
 * [BOS, ▁Once] prints " Once"). `first` means "no token pushed yet".
 */
struct detok {
	const struct vocab *vocab; /* borrowed */
	bool render_special;
	bool first;                /* no token pushed yet */
	size_t n_pending;
	char pending[8];
};

void detok_init(struct detok *d, const struct vocab *v, bool render_special);
/* Appends the text that id completes to out (cap bytes); returns bytes written or -ENOBUFS. */
int64_t detok_push(struct detok *d, int32_t id, char *out, size_t cap);
/* Flushes what is still held (an incomplete character at the end). */
int64_t detok_flush(struct detok *d, char *out, size_t cap);

/*
 * Model output is bytes: a byte token (<0xB2>) alone, or a character cut short at the end, is
 * not UTF-8, and JSON and D-Bus strings must be. Rewrites s[0, n) in place (cap bytes of room)
 * with every byte that is not part of a well-formed sequence (RFC 3629: lone continuation
 * bytes, C0/C1/F5..FF, overlong, surrogate and truncated forms) replaced by U+FFFD; what does
 * not fit in cap is dropped, whole characters only. Returns the new length (n when s was valid).
 */
size_t utf8_make_valid(char *s, size_t n, size_t cap);
