/* SPDX-License-Identifier: MIT */
/*
 * bpe-train.h: trains a byte-level BPE vocabulary (GPT-2 style, `tokenizer.ggml.model` =
 * gpt2) and writes it as GGUF tokenizer keys that vocab.c and llama.cpp load.
 *
 * Usage:
 *
 *   _cleanup_(bpe_train_freep) struct bpe_train *t = NULL;
 *   r = bpe_train_new("llama-bpe", &t, &e);     the pre-tokenizer the vocabulary will name
 *   r = bpe_train_add_text(t, text, len);       once per document: split, words counted
 *   r = bpe_train_run(t, n_merges, min_count);  the merges
 *   r = bpe_train_write_gguf(t, w, &e);         tokenizer.* keys into a gguf_writer
 *
 * The algorithm is the classic one (Sennrich et al., as GPT-2 trained it): the text is split
 * into words by the pre-tokenizer (vocab-pre.c, the same code and patterns the tokenizer uses
 * at run time), every word starts as its bytes, and each round merges the adjacent pair of
 * symbols with the highest count over all words (a word counts as often as it occurs), until
 * n_merges merges are made or no pair occurs min_count times. Within a word a pair is merged
 * left to right, so "aaa" with the merge (a, a) becomes "aa a", as the tokenizer does it.
 *
 * Ties are broken by a fixed rule, so the result depends only on the text (not on hash
 * order, insertion order or the thread count): among pairs of equal count the one whose left
 * token's bytes sort first (memcmp, a prefix before its extensions) wins, then the one whose
 * right token's bytes sort first.
 *
 * The vocabulary: ids 0..255 are the bytes 0x00..0xFF (as GPT-2's printable stand-ins:
 * "Ġ" for a space), ids 256.. the merges in the order they were made, then the special tokens
 * (CONTROL type): <|begin_of_text|> (BOS), <|end_of_text|> (EOS), <|im_start|>, <|im_end|>
 * (ChatML turn markers; llama.cpp and vocab.c take <|im_end|> as an end of generation).
 * Every byte is a token, so any input tokenizes and decodes back to itself.
 *
 * Memory: the distinct words and their counts (a few hundred MB for a few GB of text), plus
 * the pairs' occurrence lists. Threading: one thread per trainer.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

struct bpe_train;
struct gguf_writer;

#define BPE_TRAIN_N_SPECIAL 4

/* The special tokens' texts, in id order after the merges. */
extern const char *const bpe_train_special[BPE_TRAIN_N_SPECIAL];

/* A trainer for the pre-tokenizer called pre (a vocab-pre.c name, e.g. "llama-bpe"): 0, or
 * -EOPNOTSUPP (unknown name, with e), -ENOMEM. */
int bpe_train_new(const char *pre, struct bpe_train **ret, struct errmsg *e);
struct bpe_train *bpe_train_free(struct bpe_train *t);
DEFINE_CLEANUP_FUNC(struct bpe_train *, bpe_train_free, NULL)

/* Splits len bytes of text with the pre-tokenizer and counts its words. 0, -ENOMEM, -E2BIG
 * (over 2^32 distinct words or a word count past 2^62), -EIO (regex engine), -EBUSY after
 * bpe_train_run(). */
int bpe_train_add_text(struct bpe_train *t, const char *text, size_t len);

/* Number of distinct words and of words counted so far. */
size_t bpe_train_n_words(const struct bpe_train *t);
uint64_t bpe_train_n_word_occurrences(const struct bpe_train *t);

/* Makes up to n_merges merges, stopping early when no pair occurs min_count (>= 1) times.
 * Returns the number of merges made (>= 0) or -ENOMEM, -EINVAL (min_count 0), -EBUSY when
 * already run. */
int64_t bpe_train_run(struct bpe_train *t, uint32_t n_merges, uint64_t min_count);

/* After bpe_train_run(): tokens in the vocabulary (256 + merges + specials). */
uint32_t bpe_train_n_tokens(const struct bpe_train *t);
/* Token id's text as stored in the GGUF (GPT-2 byte stand-ins; the special tokens as they
 * are), NUL-terminated, valid until the trainer is freed; NULL when out of range. */
const char *bpe_train_token_text(const struct bpe_train *t, uint32_t id);
/* The bytes token id stands for (raw, not the stand-ins); *ret_len set; NULL out of range
 * or for a special token. */
const uint8_t *bpe_train_token_bytes(const struct bpe_train *t, uint32_t id, size_t *ret_len);
/* Merge i (0-based) as "LEFT RIGHT" in stand-in text, as tokenizer.ggml.merges holds it;
 * NULL when out of range. Valid until the trainer is freed. */
const char *bpe_train_merge_text(const struct bpe_train *t, uint32_t i);
/* Count of merge i's pair when it was chosen; 0 when out of range. */
uint64_t bpe_train_merge_count(const struct bpe_train *t, uint32_t i);

/*
 * Adds the tokenizer keys to w: tokenizer.ggml.model "gpt2", .pre, .tokens, .token_type,
 * .merges, bos/eos ids, add_bos_token true, add_eos_token false, and a ChatML
 * tokenizer.chat_template. 0 or -errno with e (from the writer); -EBUSY before
 * bpe_train_run().
 */
int bpe_train_write_gguf(const struct bpe_train *t, struct gguf_writer *w, struct errmsg *e);
