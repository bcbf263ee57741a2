/* SPDX-License-Identifier: MIT */
/*
 * matcher.h: running a compiled grammar (grammar.h) over generated tokens, and the token mask
 * that keeps a sequence inside it.
 *
 * The state is a set of parse stacks (each a chain of "next element to match" positions, the
 * top always a character element, or empty = the text so far is complete), plus the bytes of
 * a UTF-8 character a token left unfinished. Tokens are fed by their bytes (the pieces the
 * detokenizer prints), so any tokenizer works.
 *
 * The mask walks a trie of every token's bytes once per step, advancing the state along each
 * path and cutting a subtree as soon as no stack survives, so shared prefixes are matched once.
 *
 * Closing in time: matcher_mask() takes the number of tokens that may still be generated,
 * counting the one being chosen. A token is allowed only when, after it, the fewest bytes
 * that complete the grammar (grammar_min_bytes() summed along the stack) fit in the tokens
 * left, one byte per token. That holds whenever the vocabulary has a token for each single
 * byte the shortest completion needs (byte-level BPE and SentencePiece with byte fallback
 * do), so the output closes before max_tokens whenever it still can. When no token passes
 * that test, every token the grammar allows is offered instead: the output is then a valid
 * prefix and ends with finish reason "length".
 *
 * Threading: a grammar_vocab may be shared by any threads (its token table is immutable; the
 * walks it shares between matchers are locked); a matcher belongs to one sequence (one thread
 * at a time).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "grammar.h"

struct vocab;
struct grammar_vocab;
struct matcher;

/* The token table of a vocabulary: every token's printed bytes (control tokens and empty
 * pieces are never offered) in a byte trie. */
int grammar_vocab_new(const struct vocab *v, struct grammar_vocab **ret);
/* The same from explicit pieces (tests): piece[i] of len[i] bytes for token i. */
int grammar_vocab_new_pieces(const char *const *piece, const size_t *len, uint32_t n_tokens,
			     struct grammar_vocab **ret);
struct grammar_vocab *grammar_vocab_free(struct grammar_vocab *tv);
DEFINE_CLEANUP_FUNC(struct grammar_vocab *, grammar_vocab_free, NULL)
uint32_t grammar_vocab_n_tokens(const struct grammar_vocab *tv);
/* How often a matcher's first visit of a state found the walk another matcher of this
 * vocabulary made for the same grammar (hits) or walked the trie itself (misses). The table
 * is immutable but for these shared walks, which are locked. */
void grammar_vocab_shared_stats(const struct grammar_vocab *tv, uint64_t *hits,
				uint64_t *misses);

/* A matcher at the start of g (it takes a reference); tv is borrowed and must outlive it. */
int matcher_new(struct grammar *g, const struct grammar_vocab *tv, struct matcher **ret);
struct matcher *matcher_free(struct matcher *m);
DEFINE_CLEANUP_FUNC(struct matcher *, matcher_free, NULL)

/*
 * Fills allowed[n_tokens] (1 = allowed) for the next token, given tokens_left >= 1 (this one
 * included; UINT32_MAX: no limit). Returns how many are allowed, 0 when none is (the caller
 * ends the sequence: "length", a valid prefix), or -ENOMEM / -E2BIG (the grammar is too
 * ambiguous: more than MATCHER_MAX_STACKS parses at once). End-of-generation tokens are the
 * caller's: allow them when matcher_accepting().
 */
#define MATCHER_MAX_STACKS 4096
int64_t matcher_mask(struct matcher *m, uint32_t tokens_left, uint8_t *allowed);

/* Advances by one token. -EINVAL (state unchanged) if the grammar does not allow it. */
int matcher_accept_token(struct matcher *m, int32_t id);
/* The same, and only if the mask with tokens_left (this one included) would allow it: the
 * check of one sampled token, without computing the whole mask. */
int matcher_try_token(struct matcher *m, int32_t id, uint32_t tokens_left);
/* Advances by bytes (tests, prompts). -EINVAL (state unchanged) if not allowed. */
int matcher_accept_bytes(struct matcher *m, const char *s, size_t n);

/* The text so far is a whole sentence of the grammar (it may still go on). */
bool matcher_accepting(const struct matcher *m);
/* ... and nothing may follow: the sequence is finished. */
bool matcher_done(const struct matcher *m);
/* Fewest bytes that complete the grammar from here (0 when accepting). */
uint32_t matcher_min_bytes(const struct matcher *m);
