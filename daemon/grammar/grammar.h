/* SPDX-License-Identifier: MIT */
/*
 * grammar.h: context-free grammars for constrained decoding, written in GBNF as llama.cpp
 * writes it (so existing grammars work), parsed into a compiled, immutable form.
 *
 * The syntax: `name ::= alternatives` rules (names [A-Za-z0-9_-]+, `root` is the start),
 * `|` between alternatives, "literals" and [character classes] (`^` negates, `a-z` ranges)
 * with the escapes \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH, `.` for any character,
 * ( groups ), and the postfix operators `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`. `#` starts a
 * comment. A rule ends at a newline outside parentheses (a newline right after `::=` or `|`
 * continues it). Matching is on Unicode code points of UTF-8 text.
 *
 * Refused with a reason naming the place: undefined or missing rules (`root` included), left
 * recursion (also through rules that can match nothing, which would loop), repetition counts
 * above GRAMMAR_MAX_REPEAT, and grammars bigger than GRAMMAR_MAX_ELEMENTS once repetitions
 * are expanded, so hostile input fails fast with bounded memory.
 *
 * Compiled form: rules → alternatives → elements (a character class or a rule reference),
 * each alternative closed by an END element. grammar_min_bytes() gives, for every element, the
 * fewest bytes that finish its alternative from there: the matcher uses it to force the output
 * to close within a token budget.
 *
 * Threading: a compiled grammar is immutable and reference-counted; share it freely.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

#define GRAMMAR_MAX_ELEMENTS  (1u << 18) /* elements after expanding repetitions */
#define GRAMMAR_MAX_REPEAT    4096       /* m and n of {m,n} */
#define GRAMMAR_MAX_TEXT      (4u << 20) /* bytes of GBNF source */
#define GRAMMAR_MIN_INF       UINT32_MAX /* "cannot finish" in the min-bytes tables */

enum grammar_elem_type {
	GRAMMAR_END,      /* end of an alternative */
	GRAMMAR_CHAR,     /* one code point in ranges[first .. first+n) (negate: outside them) */
	GRAMMAR_RULE_REF, /* value: the rule */
};

struct grammar_elem {
	uint8_t type;   /* enum grammar_elem_type */
	bool negate;    /* CHAR */
	uint32_t value; /* CHAR: index of the first range; RULE_REF: rule index */
	uint32_t n;     /* CHAR: number of ranges */
};

struct grammar_range {
	uint32_t lo, hi; /* inclusive code points */
};

struct grammar;

/* Parses GBNF text (len bytes, need not be NUL-terminated). 0 and *ret (one reference), or
 * -EINVAL with e naming the line and the problem, -E2BIG past the limits, -ENOMEM. */
int grammar_parse(const char *text, size_t len, struct grammar **ret, struct errmsg *e);

struct grammar *grammar_ref(struct grammar *g);
struct grammar *grammar_unref(struct grammar *g); /* NULL-safe; returns NULL */
DEFINE_CLEANUP_FUNC(struct grammar *, grammar_unref, NULL)

/* The compiled form (valid as long as g): elements, and per rule the indices of its
 * alternatives' first elements. */
const struct grammar_elem *grammar_elems(const struct grammar *g, uint32_t *ret_n);
const struct grammar_range *grammar_ranges(const struct grammar *g);
uint32_t grammar_root(const struct grammar *g);
/* alternatives of rule r: *ret_n of them, each an element index */
const uint32_t *grammar_alts(const struct grammar *g, uint32_t r, uint32_t *ret_n);
/* fewest bytes from element i to the end of its alternative (GRAMMAR_MIN_INF: never) */
uint32_t grammar_min_bytes(const struct grammar *g, uint32_t i);
/* true when the code point is matched by CHAR element el */
bool grammar_char_match(const struct grammar *g, const struct grammar_elem *el, uint32_t cp);
/* SHA-256 of the source text: the cache key */
const uint8_t *grammar_hash(const struct grammar *g);

/*
 * A process-wide cache of compiled grammars by the hash of their source (bounded: the least
 * recently used leave first). grammar_parse_cached() is grammar_parse() through it.
 */
int grammar_parse_cached(const char *text, size_t len, struct grammar **ret, struct errmsg *e);
