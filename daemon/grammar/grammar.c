/* SPDX-License-Identifier: MIT */
/*
 * grammar.c: the GBNF parser and the compiled form (see grammar.h).
 *
 * Parsing writes each rule's body as elements (alternatives closed by END), then lays the
 * rules out one after the other. Groups and repetitions become anonymous rules: x* is
 * R ::= x R | (empty), x{m,n} is m copies of x then a chain of n-m optional rules, so the
 * matcher only ever sees characters and rule references.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basic/array.h"
#include "basic/sha256.h"
#include "grammar/grammar.h"

struct elem_vec {
	struct grammar_elem *v;
	uint32_t n, cap;
};

struct rule {
	char *name;           /* owned; NULL for anonymous rules */
	bool defined;
	uint32_t first_line;  /* where it was first referenced (for "undefined rule") */
	struct elem_vec body; /* alternatives, each closed by END */
};

struct grammar {
	unsigned n_ref;
	struct grammar_elem *elems;   /* owned [n_elems] */
	uint32_t n_elems;
	struct grammar_range *ranges; /* owned */
	uint32_t n_ranges;
	uint32_t *alts;               /* owned: every alternative's first element, rule by rule */
	uint32_t *rule_alt_first;     /* owned [n_rules + 1]: rule r's alts are alts[first[r]..first[r+1]) */
	uint32_t n_rules;
	uint32_t root;
	uint32_t *min_bytes;          /* owned [n_elems] */
	uint8_t hash[32];
};

struct parser {
	const char *s, *end;
	uint32_t line;
	struct rule *rules;
	uint32_t n_rules, cap_rules;
	uint32_t *names; /* open-addressing table of named rules (index + 1; 0 = empty) */
	uint32_t names_cap;
	struct grammar_range *ranges;
	uint32_t n_ranges, cap_ranges;
	uint64_t total; /* elements emitted, for the size limit */
	struct errmsg *e;
};

/* A byte of the grammar as an error message shows it: itself when printable ASCII, else
 * \xNN (messages are UTF-8, and a lone byte of a multi-byte character is not). */
static const char *shown_byte(char c, char buf[8])
{
	if ((unsigned char) c >= 0x20 && (unsigned char) c < 0x7f)
		snprintf(buf, 8, "%c", c);
	else
		snprintf(buf, 8, "\\x%02x", (unsigned char) c);
	return buf;
}

static int emit(struct parser *p, struct elem_vec *b, struct grammar_elem el)
{
	if (++p->total > GRAMMAR_MAX_ELEMENTS)
		return errmsg_set(p->e, -E2BIG, "the grammar is too big (more than %u elements once "
					       "repetitions are expanded)", GRAMMAR_MAX_ELEMENTS);
	if (ARRAY_RESERVE(b->v, b->cap, b->n + 1, 16) < 0)
		return -ENOMEM;
	b->v[b->n++] = el;
	return 0;
}

static uint32_t name_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t) s[i]) * 16777619u;
	return h;
}

static int rule_new(struct parser *p, const char *name, size_t n, uint32_t *ret)
{
	struct rule *r;

	if (ARRAY_RESERVE(p->rules, p->cap_rules, p->n_rules + 1, 16) < 0)
		return -ENOMEM;
	r = &p->rules[p->n_rules];
	*r = (struct rule){ .first_line = p->line };
	if (name) {
		r->name = strndup(name, n);
		if (!r->name)
			return -ENOMEM;
	}
	*ret = p->n_rules++;
	return 0;
}

/* The named rule, created (undefined) when first seen. */
static int rule_lookup(struct parser *p, const char *name, size_t n, uint32_t *ret)
{
	uint32_t h, slot;
	int r;

	if (p->names_cap < 2 * (p->n_rules + 1)) {
		uint32_t cap = p->names_cap ? p->names_cap * 2 : 64, *t;

		while (cap < 2 * (p->n_rules + 1))
			cap *= 2;
		t = calloc(cap, sizeof(*t));
		if (!t)
			return -ENOMEM;
		for (uint32_t i = 0; i < p->names_cap; i++) {
			uint32_t k = p->names[i];

			if (!k)
				continue;
			slot = name_hash(p->rules[k - 1].name, strlen(p->rules[k - 1].name)) & (cap - 1);
			while (t[slot])
				slot = (slot + 1) & (cap - 1);
			t[slot] = k;
		}
		free(p->names);
		p->names = t;
		p->names_cap = cap;
	}
	h = name_hash(name, n);
	for (slot = h & (p->names_cap - 1); p->names[slot]; slot = (slot + 1) & (p->names_cap - 1)) {
		const char *rn = p->rules[p->names[slot] - 1].name;

		if (strlen(rn) == n && memcmp(rn, name, n) == 0) {
			*ret = p->names[slot] - 1;
			return 0;
		}
	}
	r = rule_new(p, name, n, ret);
	if (r < 0)
		return r;
	p->names[slot] = *ret + 1;
	return 0;
}

static bool is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

/* Skips blanks and comments; newlines only when nested. */
static void skip_space(struct parser *p, bool nested)
{
	while (p->s < p->end) {
		char c = *p->s;

		if (c == '#') {
			while (p->s < p->end && *p->s != '\n')
				p->s++;
		} else if (c == ' ' || c == '\t' || c == '\r') {
			p->s++;
		} else if (c == '\n' && nested) {
			p->line++;
			p->s++;
		} else {
			break;
		}
	}
}

static int decode_utf8(struct parser *p, uint32_t *ret)
{
	const unsigned char *s = (const unsigned char *) p->s;
	size_t left = (size_t) (p->end - p->s);
	uint32_t cp, n;

	if (s[0] < 0x80)
		cp = s[0], n = 1;
	else if ((s[0] & 0xE0) == 0xC0)
		cp = s[0] & 0x1F, n = 2;
	else if ((s[0] & 0xF0) == 0xE0)
		cp = s[0] & 0x0F, n = 3;
	else if ((s[0] & 0xF8) == 0xF0)
		cp = s[0] & 0x07, n = 4;
	else
		return errmsg_set(p->e, -EINVAL, "line %u: invalid UTF-8", p->line);
	if (left < n)
		return errmsg_set(p->e, -EINVAL, "line %u: truncated UTF-8", p->line);
	for (uint32_t i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return errmsg_set(p->e, -EINVAL, "line %u: invalid UTF-8", p->line);
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	p->s += n;
	*ret = cp;
	return 0;
}

static int parse_hex(struct parser *p, int digits, uint32_t *ret)
{
	uint32_t v = 0;

	for (int i = 0; i < digits; i++, p->s++) {
		char c = p->s < p->end ? *p->s : 0;

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t) (c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t) (c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t) (c - 'A' + 10);
		else
			return errmsg_set(p->e, -EINVAL, "line %u: expected %d hex digits", p->line,
					  digits);
	}
	if (v > 0x10FFFF)
		return errmsg_set(p->e, -EINVAL, "line %u: code point U+%X is out of range", p->line, v);
	*ret = v;
	return 0;
}

/* One character of a literal or class, escapes decoded. */
static int parse_char(struct parser *p, uint32_t *ret)
{
	if (p->s >= p->end)
		return errmsg_set(p->e, -EINVAL, "line %u: unexpected end of grammar", p->line);
	if (*p->s != '\\')
		return decode_utf8(p, ret);
	p->s++;
	if (p->s >= p->end)
		return errmsg_set(p->e, -EINVAL, "line %u: unexpected end after '\\'", p->line);
	switch (*p->s++) {
	case 'x':
		return parse_hex(p, 2, ret);
	case 'u':
		return parse_hex(p, 4, ret);
	case 'U':
		return parse_hex(p, 8, ret);
	case 't':
		*ret = '\t';
		return 0;
	case 'r':
		*ret = '\r';
		return 0;
	case 'n':
		*ret = '\n';
		return 0;
	case '\\':
	case '"':
	case '[':
	case ']':
	case '-':
	case '^':
	case '/':
		*ret = (uint32_t) (unsigned char) p->s[-1];
		return 0;
	default:
		return errmsg_set(p->e, -EINVAL, "line %u: unknown escape '\\%s'", p->line,
				  shown_byte(p->s[-1], (char[8]){ 0 }));
	}
}

static int add_range(struct parser *p, uint32_t lo, uint32_t hi)
{
	if (ARRAY_RESERVE(p->ranges, p->cap_ranges, p->n_ranges + 1, 16) < 0)
		return -ENOMEM;
	p->ranges[p->n_ranges++] = (struct grammar_range){ lo, hi };
	return 0;
}

static struct grammar_elem char_elem(uint32_t first, uint32_t n, bool negate)
{
	return (struct grammar_elem){ .type = GRAMMAR_CHAR, .value = first, .n = n, .negate = negate };
}

static int parse_alternatives(struct parser *p, uint32_t rule, bool nested, unsigned depth);

/* Replaces the elements of rule owner's body from start on by x{min,max} (max UINT32_MAX:
 * unbounded). Rules are added meanwhile (p->rules moves): the body is looked up each time. */
static int repeat(struct parser *p, uint32_t owner, uint32_t start, uint32_t min, uint32_t max)
{
#define B (&p->rules[owner].body)
	struct grammar_elem x;
	uint32_t prev, r;
	int k;

	if (B->n - start != 1) {
		/* several elements (a literal): one rule for them first */
		uint32_t n = B->n - start;

		k = rule_new(p, NULL, 0, &r);
		if (k < 0)
			return k;
		for (uint32_t i = 0; i < n; i++) {
			k = emit(p, &p->rules[r].body, B->v[start + i]);
			if (k < 0)
				return k;
		}
		k = emit(p, &p->rules[r].body, (struct grammar_elem){ .type = GRAMMAR_END });
		if (k < 0)
			return k;
		p->rules[r].defined = true;
		x = (struct grammar_elem){ .type = GRAMMAR_RULE_REF, .value = r };
	} else {
		x = B->v[start];
	}
	B->n = start;
	for (uint32_t i = 0; i < min; i++) {
		k = emit(p, B, x);
		if (k < 0)
			return k;
	}
	if (max == min)
		return 0;
	if (max == UINT32_MAX) {
		/* R ::= x R | (empty) */
		k = rule_new(p, NULL, 0, &r);
		if (k < 0)
			return k;
		struct elem_vec *rb = &p->rules[r].body;
		struct grammar_elem els[] = { x, { .type = GRAMMAR_RULE_REF, .value = r },
					      { .type = GRAMMAR_END }, { .type = GRAMMAR_END } };
		for (size_t i = 0; i < ELEMENTSOF(els); i++) {
			k = emit(p, rb, els[i]);
			if (k < 0)
				return k;
			rb = &p->rules[r].body;
		}
		p->rules[r].defined = true;
		return emit(p, B, (struct grammar_elem){ .type = GRAMMAR_RULE_REF, .value = r });
	}
	/* a chain of max - min optional copies, built from the innermost out:
	 * R_last ::= x | (empty); R_i ::= x R_{i+1} | (empty) */
	prev = UINT32_MAX;
	for (uint32_t i = 0; i < max - min; i++) {
		k = rule_new(p, NULL, 0, &r);
		if (k < 0)
			return k;
		k = emit(p, &p->rules[r].body, x);
		if (k >= 0 && prev != UINT32_MAX)
			k = emit(p, &p->rules[r].body,
				 (struct grammar_elem){ .type = GRAMMAR_RULE_REF, .value = prev });
		if (k >= 0)
			k = emit(p, &p->rules[r].body, (struct grammar_elem){ .type = GRAMMAR_END });
		if (k >= 0)
			k = emit(p, &p->rules[r].body, (struct grammar_elem){ .type = GRAMMAR_END });
		if (k < 0)
			return k;
		p->rules[r].defined = true;
		prev = r;
	}
	return emit(p, B, (struct grammar_elem){ .type = GRAMMAR_RULE_REF, .value = prev });
}
#undef B

static int parse_count(struct parser *p, uint32_t *ret)
{
	uint64_t v = 0;

	if (p->s >= p->end || *p->s < '0' || *p->s > '9')
		return errmsg_set(p->e, -EINVAL, "line %u: expected a number in {}", p->line);
	while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
		v = v * 10 + (uint64_t) (*p->s++ - '0');
		if (v > GRAMMAR_MAX_REPEAT)
			return errmsg_set(p->e, -E2BIG, "line %u: repetition count above %d", p->line,
					  GRAMMAR_MAX_REPEAT);
	}
	*ret = (uint32_t) v;
	return 0;
}

/* One sequence (up to '|', ')' or the end of the rule) into rule's body. */
static int parse_sequence(struct parser *p, uint32_t rule, bool nested, unsigned depth)
{
	uint32_t last = UINT32_MAX; /* where the last symbol starts in the body */
	int k;

	for (;;) {
		struct elem_vec *b = &p->rules[rule].body;
		char c;

		skip_space(p, nested);
		if (p->s >= p->end)
			return 0;
		c = *p->s;
		if (c == '"') {
			p->s++;
			last = b->n;
			while (p->s < p->end && *p->s != '"') {
				uint32_t cp;

				if (*p->s == '\n')
					return errmsg_set(p->e, -EINVAL, "line %u: unterminated literal",
							  p->line);
				k = parse_char(p, &cp);
				if (k >= 0)
					k = add_range(p, cp, cp);
				if (k >= 0)
					k = emit(p, &p->rules[rule].body, char_elem(p->n_ranges - 1, 1, false));
				if (k < 0)
					return k;
			}
			if (p->s >= p->end)
				return errmsg_set(p->e, -EINVAL, "line %u: unterminated literal", p->line);
			p->s++;
			if (p->rules[rule].body.n == last)
				last = UINT32_MAX; /* "" matches nothing: no symbol to repeat */
		} else if (c == '[') {
			uint32_t first = p->n_ranges;
			bool negate = false;

			p->s++;
			if (p->s < p->end && *p->s == '^')
				negate = true, p->s++;
			while (p->s < p->end && *p->s != ']') {
				uint32_t lo, hi;

				if (*p->s == '\n')
					return errmsg_set(p->e, -EINVAL,
							  "line %u: unterminated character class", p->line);
				k = parse_char(p, &lo);
				if (k < 0)
					return k;
				hi = lo;
				if (p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
					p->s++;
					k = parse_char(p, &hi);
					if (k < 0)
						return k;
					if (hi < lo)
						return errmsg_set(p->e, -EINVAL,
								  "line %u: range U+%X-U+%X is backwards",
								  p->line, lo, hi);
				}
				k = add_range(p, lo, hi);
				if (k < 0)
					return k;
			}
			if (p->s >= p->end)
				return errmsg_set(p->e, -EINVAL, "line %u: unterminated character class",
						  p->line);
			p->s++;
			if (p->n_ranges == first && !negate)
				return errmsg_set(p->e, -EINVAL, "line %u: empty character class [] "
								 "matches nothing", p->line);
			last = b->n;
			k = emit(p, b, char_elem(first, p->n_ranges - first, negate));
			if (k < 0)
				return k;
		} else if (c == '.') {
			p->s++;
			k = add_range(p, 0, 0x10FFFF);
			if (k < 0)
				return k;
			last = p->rules[rule].body.n;
			k = emit(p, &p->rules[rule].body, char_elem(p->n_ranges - 1, 1, false));
			if (k < 0)
				return k;
		} else if (is_name_char(c)) {
			const char *name = p->s;
			uint32_t ref;

			while (p->s < p->end && is_name_char(*p->s))
				p->s++;
			k = rule_lookup(p, name, (size_t) (p->s - name), &ref);
			if (k < 0)
				return k;
			last = p->rules[rule].body.n;
			k = emit(p, &p->rules[rule].body,
				 (struct grammar_elem){ .type = GRAMMAR_RULE_REF, .value = ref });
			if (k < 0)
				return k;
		} else if (c == '(') {
			uint32_t sub;

			if (depth > 64)
				return errmsg_set(p->e, -E2BIG, "line %u: parentheses nested too deep",
						  p->line);
			p->s++;
			k = rule_new(p, NULL, 0, &sub);
			if (k < 0)
				return k;
			k = parse_alternatives(p, sub, true, depth + 1);
			if (k < 0)
				return k;
			skip_space(p, true);
			if (p->s >= p->end || *p->s != ')')
				return errmsg_set(p->e, -EINVAL, "line %u: expected ')'", p->line);
			p->s++;
			p->rules[sub].defined = true;
			last = p->rules[rule].body.n;
			k = emit(p, &p->rules[rule].body,
				 (struct grammar_elem){ .type = GRAMMAR_RULE_REF, .value = sub });
			if (k < 0)
				return k;
		} else if (c == '*' || c == '+' || c == '?' || c == '{') {
			uint32_t min = 0, max = UINT32_MAX;

			if (last == UINT32_MAX)
				return errmsg_set(p->e, -EINVAL, "line %u: '%c' follows nothing", p->line, c);
			p->s++;
			if (c == '+')
				min = 1;
			else if (c == '?')
				max = 1;
			else if (c == '{') {
				skip_space(p, true);
				k = parse_count(p, &min);
				if (k < 0)
					return k;
				skip_space(p, true);
				if (p->s < p->end && *p->s == ',') {
					p->s++;
					skip_space(p, true);
					if (p->s < p->end && *p->s != '}') {
						k = parse_count(p, &max);
						if (k < 0)
							return k;
						if (max < min)
							return errmsg_set(p->e, -EINVAL,
									  "line %u: {%u,%u} is backwards",
									  p->line, min, max);
					}
				} else {
					max = min;
				}
				skip_space(p, true);
				if (p->s >= p->end || *p->s != '}')
					return errmsg_set(p->e, -EINVAL, "line %u: expected '}'", p->line);
				p->s++;
			}
			k = repeat(p, rule, last, min, max);
			if (k < 0)
				return k;
			last = UINT32_MAX; /* x** is refused, as llama.cpp does */
		} else {
			return 0; /* '|', ')', newline or something the caller judges */
		}
	}
}

static int parse_alternatives(struct parser *p, uint32_t rule, bool nested, unsigned depth)
{
	int k;

	for (;;) {
		k = parse_sequence(p, rule, nested, depth);
		if (k >= 0)
			k = emit(p, &p->rules[rule].body, (struct grammar_elem){ .type = GRAMMAR_END });
		if (k < 0)
			return k;
		skip_space(p, nested);
		if (p->s < p->end && *p->s == '|') {
			p->s++;
			skip_space(p, true);
			continue;
		}
		return 0;
	}
}

static int parse_rules(struct parser *p)
{
	for (;;) {
		const char *name;
		uint32_t r;
		int k;

		skip_space(p, true);
		if (p->s >= p->end)
			return 0;
		name = p->s;
		while (p->s < p->end && is_name_char(*p->s))
			p->s++;
		if (p->s == name)
			return p->s < p->end
				       ? errmsg_set(p->e, -EINVAL,
						    "line %u: expected a rule name, found '%s'", p->line,
						    shown_byte(*p->s, (char[8]){ 0 }))
				       : errmsg_set(p->e, -EINVAL,
						    "line %u: expected a rule name, found the end",
						    p->line);
		k = rule_lookup(p, name, (size_t) (p->s - name), &r);
		if (k < 0)
			return k;
		if (p->rules[r].defined)
			return errmsg_set(p->e, -EINVAL, "line %u: rule '%s' is defined twice", p->line,
					  p->rules[r].name);
		p->rules[r].defined = true;
		skip_space(p, false);
		if (p->end - p->s < 3 || memcmp(p->s, "::=", 3) != 0)
			return errmsg_set(p->e, -EINVAL, "line %u: expected '::=' after '%s'", p->line,
					  p->rules[r].name);
		p->s += 3;
		skip_space(p, true);
		k = parse_alternatives(p, r, false, 0);
		if (k < 0)
			return k;
		if (p->s < p->end && *p->s != '\n')
			return errmsg_set(p->e, -EINVAL, "line %u: unexpected '%s'", p->line,
					  shown_byte(*p->s, (char[8]){ 0 }));
	}
}

/* ---- checks and tables on the laid-out grammar ---- */

static uint32_t alt_count(const struct grammar *g, uint32_t r)
{
	return g->rule_alt_first[r + 1] - g->rule_alt_first[r];
}

/* Left recursion: rule r reaches itself through leftmost references (past nullable ones).
 * Iterative DFS with colours over the "leftmost reference" graph; a frame is (rule,
 * alternative, offset in it). */
static int check_left_recursion(const struct grammar *g, const bool *nullable, char **names,
				struct errmsg *e)
{
	_cleanup_free_ uint8_t *colour = calloc(g->n_rules, 1);
	_cleanup_free_ uint32_t *stack = malloc(sizeof(uint32_t) * 3 * (g->n_rules + 1));
	uint32_t sp;

	if (!colour || !stack)
		return -ENOMEM;
	for (uint32_t start = 0; start < g->n_rules; start++) {
		if (colour[start])
			continue;
		sp = 0;
		stack[sp++] = start, stack[sp++] = 0, stack[sp++] = 0;
		colour[start] = 1;
		while (sp) {
			uint32_t r = stack[sp - 3], a = stack[sp - 2], off = stack[sp - 1];
			uint32_t n_alts = alt_count(g, r);
			bool pushed = false;

			while (a < n_alts && !pushed) {
				const struct grammar_elem *el =
				    &g->elems[g->alts[g->rule_alt_first[r] + a] + off];

				if (el->type != GRAMMAR_RULE_REF) {
					a++, off = 0;
					continue;
				}
				/* next time: the element after this one if this one is nullable */
				if (nullable[el->value])
					off++;
				else
					a++, off = 0;
				stack[sp - 2] = a, stack[sp - 1] = off;
				if (colour[el->value] == 1) {
					const char *n = names[el->value];

					return errmsg_set(e, -EINVAL,
							  "the grammar is left-recursive%s%s%s (a rule "
							  "reaches itself before matching anything)",
							  n ? " at rule '" : "", n ? n : "", n ? "'" : "");
				}
				if (colour[el->value] == 0) {
					colour[el->value] = 1;
					stack[sp++] = el->value, stack[sp++] = 0, stack[sp++] = 0;
					pushed = true;
				}
			}
			if (!pushed) {
				colour[r] = 2;
				sp -= 3;
			}
		}
	}
	return 0;
}

static uint32_t char_min_bytes(const struct grammar *g, const struct grammar_elem *el)
{
	uint32_t lo = UINT32_MAX;

	if (el->negate)
		return 1; /* some ASCII character is outside any negated class we meet in practice */
	for (uint32_t j = 0; j < el->n; j++)
		lo = MIN(lo, g->ranges[el->value + j].lo);
	return lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
}

static uint32_t add_sat(uint32_t a, uint32_t b)
{
	return (a == GRAMMAR_MIN_INF || b == GRAMMAR_MIN_INF || a + b < a) ? GRAMMAR_MIN_INF : a + b;
}

/* A binary min-heap of (value, rule) for compute_min_bytes(). */
struct heap_item {
	uint32_t value, rule;
};

static void heap_push(struct heap_item *h, uint32_t *n, struct heap_item x)
{
	uint32_t i = (*n)++;

	while (i > 0 && h[(i - 1) / 2].value > x.value) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = x;
}

static struct heap_item heap_pop(struct heap_item *h, uint32_t *n)
{
	struct heap_item top = h[0], x = h[--*n];
	uint32_t i = 0;

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1].value < h[c].value)
			c++;
		if (h[c].value >= x.value)
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = x;
	return top;
}

/*
 * The fewest bytes each rule matches, then min_bytes[i] for every element. Knuth's
 * generalisation of Dijkstra's algorithm to grammars: an alternative's value is known once
 * every rule it refers to is; a rule is final when it is the smallest candidate left. Linear
 * up to the heap, whatever order the rules come in (a fixpoint over passes would be
 * quadratic in a hostile chain of rules).
 */
static int compute_min_bytes(struct grammar *g)
{
	uint32_t n_alts = g->rule_alt_first[g->n_rules], n_heap = 0, n_refs = 0;
	_cleanup_free_ uint32_t *rule_min = malloc(sizeof(uint32_t) * (g->n_rules + 1));
	_cleanup_free_ uint32_t *pending = calloc(n_alts + 1, sizeof(uint32_t));
	_cleanup_free_ uint32_t *sum = calloc(n_alts + 1, sizeof(uint32_t));
	_cleanup_free_ uint32_t *owner = malloc(sizeof(uint32_t) * (n_alts + 1));
	_cleanup_free_ uint32_t *users_first = calloc(g->n_rules + 2, sizeof(uint32_t));
	_cleanup_free_ uint32_t *users = NULL;
	_cleanup_free_ struct heap_item *heap = NULL;
	_cleanup_free_ bool *final = calloc(g->n_rules + 1, sizeof(bool));

	g->min_bytes = malloc(sizeof(uint32_t) * (g->n_elems + 1));
	if (!rule_min || !pending || !sum || !owner || !users_first || !final || !g->min_bytes)
		return -ENOMEM;
	/* per alternative: its rule, its references still unknown, the bytes known so far; per
	 * rule: the alternatives that refer to it (once per reference) */
	for (uint32_t r = 0; r < g->n_rules; r++) {
		rule_min[r] = GRAMMAR_MIN_INF;
		for (uint32_t a = g->rule_alt_first[r]; a < g->rule_alt_first[r + 1]; a++) {
			owner[a] = r;
			for (uint32_t i = g->alts[a]; g->elems[i].type != GRAMMAR_END; i++)
				if (g->elems[i].type == GRAMMAR_RULE_REF) {
					pending[a]++;
					users_first[g->elems[i].value + 1]++;
					n_refs++;
				} else {
					sum[a] = add_sat(sum[a], char_min_bytes(g, &g->elems[i]));
				}
		}
	}
	for (uint32_t r = 0; r < g->n_rules; r++)
		users_first[r + 1] += users_first[r];
	users = malloc(sizeof(uint32_t) * (n_refs + 1));
	heap = malloc(sizeof(*heap) * (n_alts + 1));
	if (!users || !heap)
		return -ENOMEM;
	{
		_cleanup_free_ uint32_t *fill = calloc(g->n_rules + 1, sizeof(uint32_t));

		if (!fill)
			return -ENOMEM;
		for (uint32_t a = 0; a < n_alts; a++)
			for (uint32_t i = g->alts[a]; g->elems[i].type != GRAMMAR_END; i++)
				if (g->elems[i].type == GRAMMAR_RULE_REF) {
					uint32_t r = g->elems[i].value;

					users[users_first[r] + fill[r]++] = a;
				}
	}
	/* each alternative enters the heap once, when its last reference becomes known */
	for (uint32_t a = 0; a < n_alts; a++)
		if (pending[a] == 0 && sum[a] != GRAMMAR_MIN_INF)
			heap_push(heap, &n_heap, (struct heap_item){ sum[a], owner[a] });
	while (n_heap) {
		struct heap_item x = heap_pop(heap, &n_heap);

		if (final[x.rule])
			continue;
		final[x.rule] = true;
		rule_min[x.rule] = x.value;
		for (uint32_t u = users_first[x.rule]; u < users_first[x.rule + 1]; u++) {
			uint32_t a = users[u];

			sum[a] = add_sat(sum[a], x.value);
			if (--pending[a] == 0 && sum[a] != GRAMMAR_MIN_INF && !final[owner[a]])
				heap_push(heap, &n_heap, (struct heap_item){ sum[a], owner[a] });
		}
	}
	/* each alternative backwards: min_bytes[i] = cost(i) + min_bytes[i + 1] */
	for (uint32_t i = g->n_elems; i-- > 0;) {
		const struct grammar_elem *el = &g->elems[i];

		if (el->type == GRAMMAR_END)
			g->min_bytes[i] = 0;
		else if (el->type == GRAMMAR_CHAR)
			g->min_bytes[i] = add_sat(char_min_bytes(g, el), g->min_bytes[i + 1]);
		else
			g->min_bytes[i] = add_sat(rule_min[el->value], g->min_bytes[i + 1]);
	}
	return 0;
}

static void parser_done(struct parser *p)
{
	for (uint32_t i = 0; i < p->n_rules; i++) {
		free(p->rules[i].name);
		free(p->rules[i].body.v);
	}
	free(p->rules);
	free(p->names);
	free(p->ranges);
}

struct grammar *grammar_unref(struct grammar *g)
{
	if (!g || __atomic_sub_fetch(&g->n_ref, 1, __ATOMIC_ACQ_REL) > 0)
		return NULL;
	free(g->elems);
	free(g->ranges);
	free(g->alts);
	free(g->rule_alt_first);
	free(g->min_bytes);
	free(g);
	return NULL;
}

struct grammar *grammar_ref(struct grammar *g)
{
	if (g)
		__atomic_add_fetch(&g->n_ref, 1, __ATOMIC_RELAXED);
	return g;
}

int grammar_parse(const char *text, size_t len, struct grammar **ret, struct errmsg *e)
{
	_cleanup_(grammar_unrefp) struct grammar *g = NULL;
	_cleanup_free_ bool *nullable = NULL;
	_cleanup_free_ char **names = NULL;
	struct parser p = { .s = text, .end = text + len, .line = 1, .e = e };
	uint32_t root = UINT32_MAX, n_alts = 0, at = 0;
	int k;

	assert_return(text && ret, -EINVAL);
	if (len > GRAMMAR_MAX_TEXT)
		return errmsg_set(e, -E2BIG, "the grammar is %zu bytes (at most %u)", len,
				  GRAMMAR_MAX_TEXT);
	if (memchr(text, '\0', len))
		return errmsg_set(e, -EINVAL, "the grammar contains a NUL byte");
	k = parse_rules(&p);
	if (k < 0)
		goto out;
	for (uint32_t r = 0; r < p.n_rules; r++) {
		if (!p.rules[r].defined) {
			k = errmsg_set(e, -EINVAL, "line %u: rule '%s' is not defined",
				       p.rules[r].first_line, p.rules[r].name);
			goto out;
		}
		if (p.rules[r].name && strcmp(p.rules[r].name, "root") == 0)
			root = r;
		for (uint32_t i = 0; i < p.rules[r].body.n; i++)
			n_alts += p.rules[r].body.v[i].type == GRAMMAR_END;
	}
	if (root == UINT32_MAX) {
		k = errmsg_set(e, -EINVAL, "the grammar has no 'root' rule");
		goto out;
	}

	k = -ENOMEM;
	g = calloc(1, sizeof(*g));
	if (!g)
		goto out;
	g->n_ref = 1;
	g->n_rules = p.n_rules;
	g->root = root;
	g->elems = malloc(sizeof(*g->elems) * (p.total + 1));
	g->alts = malloc(sizeof(*g->alts) * (n_alts + 1));
	g->rule_alt_first = malloc(sizeof(*g->rule_alt_first) * (p.n_rules + 1));
	nullable = calloc(p.n_rules + 1, sizeof(*nullable));
	names = calloc(p.n_rules + 1, sizeof(*names));
	if (!g->elems || !g->alts || !g->rule_alt_first || !nullable || !names)
		goto out;
	n_alts = 0;
	for (uint32_t r = 0; r < p.n_rules; r++) {
		const struct elem_vec *b = &p.rules[r].body;

		names[r] = p.rules[r].name;
		g->rule_alt_first[r] = n_alts;
		for (uint32_t i = 0; i < b->n; i++) {
			if (i == 0 || b->v[i - 1].type == GRAMMAR_END)
				g->alts[n_alts++] = at;
			g->elems[at++] = b->v[i];
		}
	}
	g->rule_alt_first[p.n_rules] = n_alts;
	g->n_elems = at;
	g->ranges = TAKE_PTR(p.ranges);
	g->n_ranges = p.n_ranges;

	k = compute_min_bytes(g);
	if (k < 0)
		goto out;
	/* a rule is nullable when it can match zero bytes (characters cost at least one) */
	for (uint32_t r = 0; r < g->n_rules; r++)
		for (uint32_t a = 0; a < alt_count(g, r) && !nullable[r]; a++)
			nullable[r] = g->min_bytes[g->alts[g->rule_alt_first[r] + a]] == 0;
	k = check_left_recursion(g, nullable, names, e);
	if (k < 0)
		goto out;
	if (g->min_bytes[g->alts[g->rule_alt_first[root]]] == GRAMMAR_MIN_INF) {
		uint32_t best = GRAMMAR_MIN_INF;

		for (uint32_t a = 0; a < alt_count(g, root); a++)
			best = MIN(best, g->min_bytes[g->alts[g->rule_alt_first[root] + a]]);
		if (best == GRAMMAR_MIN_INF) {
			k = errmsg_set(e, -EINVAL, "the grammar matches no finite text shorter "
						   "than 4 GiB (its rules never end)");
			goto out;
		}
	}
	sha256(text, len, g->hash);
	*ret = TAKE_PTR(g);
	k = 0;
out:
	parser_done(&p);
	return k;
}

const struct grammar_elem *grammar_elems(const struct grammar *g, uint32_t *ret_n)
{
	if (ret_n)
		*ret_n = g->n_elems;
	return g->elems;
}

const struct grammar_range *grammar_ranges(const struct grammar *g)
{
	return g->ranges;
}

uint32_t grammar_root(const struct grammar *g)
{
	return g->root;
}

const uint32_t *grammar_alts(const struct grammar *g, uint32_t r, uint32_t *ret_n)
{
	*ret_n = alt_count(g, r);
	return g->alts + g->rule_alt_first[r];
}

uint32_t grammar_min_bytes(const struct grammar *g, uint32_t i)
{
	return g->min_bytes[i];
}

bool grammar_char_match(const struct grammar *g, const struct grammar_elem *el, uint32_t cp)
{
	const struct grammar_range *r = g->ranges + el->value;

	for (uint32_t j = 0; j < el->n; j++)
		if (cp >= r[j].lo && cp <= r[j].hi)
			return !el->negate;
	return el->negate;
}

const uint8_t *grammar_hash(const struct grammar *g)
{
	return g->hash;
}

/* ---- the cache ---- */

#define CACHE_SLOTS 64

static struct {
	pthread_mutex_t lock;
	struct grammar *g[CACHE_SLOTS]; /* owned references */
	uint64_t used[CACHE_SLOTS];
	uint64_t clock;
} cache = { .lock = PTHREAD_MUTEX_INITIALIZER };

int grammar_parse_cached(const char *text, size_t len, struct grammar **ret, struct errmsg *e)
{
	struct grammar *g;
	uint8_t h[32];
	uint32_t victim = 0;
	int k;

	assert_return(text && ret, -EINVAL);
	sha256(text, len, h);
	pthread_mutex_lock(&cache.lock);
	for (uint32_t i = 0; i < CACHE_SLOTS; i++)
		if (cache.g[i] && memcmp(cache.g[i]->hash, h, 32) == 0) {
			cache.used[i] = ++cache.clock;
			*ret = grammar_ref(cache.g[i]);
			pthread_mutex_unlock(&cache.lock);
			return 0;
		}
	pthread_mutex_unlock(&cache.lock);

	k = grammar_parse(text, len, &g, e); /* outside the lock: it may take a while */
	if (k < 0)
		return k;
	pthread_mutex_lock(&cache.lock);
	for (uint32_t i = 0; i < CACHE_SLOTS; i++)
		if (!cache.g[i] || cache.used[i] < cache.used[victim])
			victim = i;
	grammar_unref(cache.g[victim]);
	cache.g[victim] = grammar_ref(g);
	cache.used[victim] = ++cache.clock;
	pthread_mutex_unlock(&cache.lock);
	*ret = g;
	return 0;
}
