/* SPDX-License-Identifier: MIT */
/*
 * schema.c: JSON Schema → GBNF (see schema.h). One rule per schema object, named by a
 * counter; the shared rules (whitespace, strings, numbers, any value) are added once.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "basic/strbuf.h"
#include "basic/sha256.h"
#include "grammar/grammar.h"
#include "grammar/schema.h"

#define INT_LIMIT 1000000000000000LL /* |bounds| of integers we write digit grammars for */

struct ref_entry {
	struct json_object *target; /* borrowed: the $defs entry */
	char rule[32];
	bool done;
};

/* Rules are written whole into `rules`; a rule being built goes into its own line buffer
 * (`out` points to it) so that the rules its parts add land in `rules` before it. */
struct schema_gbnf {
	struct strbuf rules;
	struct strbuf *out;
	unsigned next_rule;
	unsigned n_nodes;
	bool have_common, have_any;
	struct ref_entry *refs;
	size_t n_refs;
	char **names; /* owned rule names handed out */
	size_t n_names;
	struct json_object *root; /* borrowed, during add */
	struct errmsg *e;
};

static int sb_append(struct schema_gbnf *b, struct strbuf *sb, const char *s, size_t n)
{
	if (b->rules.len + sb->len + n + 1 > GRAMMAR_MAX_TEXT)
		return errmsg_set(b->e, -E2BIG, "the schema's grammar is too big (more than %u bytes)",
				  GRAMMAR_MAX_TEXT);
	return strbuf_add(sb, s, n);
}

static int append_len(struct schema_gbnf *b, const char *s, size_t n)
{
	return sb_append(b, b->out, s, n);
}

/* Starts a rule: what is appended goes to line until rule_close(). */
static void rule_open(struct schema_gbnf *b, struct strbuf *line, struct strbuf **saved)
{
	*line = (struct strbuf){ 0 };
	*saved = b->out;
	b->out = line;
}

/* Writes "name ::= LINE\n" into the rules (on success) and restores the output. */
static int rule_close(struct schema_gbnf *b, const char *name, struct strbuf *line,
		      struct strbuf *saved, int k)
{
	b->out = saved;
	if (k >= 0)
		k = sb_append(b, &b->rules, name, strlen(name));
	if (k >= 0)
		k = sb_append(b, &b->rules, " ::= ", 5);
	if (k >= 0)
		k = sb_append(b, &b->rules, line->s ? line->s : "", line->len);
	if (k >= 0)
		k = sb_append(b, &b->rules, "\n", 1);
	free(line->s);
	return k;
}

/* Whole rule lines, straight into the rules. */
static int rules_append(struct schema_gbnf *b, const char *s)
{
	return sb_append(b, &b->rules, s, strlen(s));
}

int schema_gbnf_append(struct schema_gbnf *b, const char *s)
{
	return append_len(b, s, strlen(s));
}

_printf_(2, 3) static int appendf(struct schema_gbnf *b, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(buf))
		return -EINVAL;
	return append_len(b, buf, (size_t) n);
}

/* A whole rule "name ::= TEXT" from a format. */
_printf_(3, 4) static int rulef(struct schema_gbnf *b, const char *name, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n, k;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(buf))
		return -EINVAL;
	k = sb_append(b, &b->rules, name, strlen(name));
	if (k >= 0)
		k = sb_append(b, &b->rules, " ::= ", 5);
	if (k >= 0)
		k = sb_append(b, &b->rules, buf, (size_t) n);
	return k < 0 ? k : sb_append(b, &b->rules, "\n", 1);
}

/* Whole UTF-8 characters only (no overlongs, surrogates or code points past U+10FFFF): the
 * grammar matches characters, and json-c passes invalid bytes in strings through. */
static bool utf8_ok(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp, len;

		if (s[i] < 0x80) {
			i++;
			continue;
		}
		if (s[i] >= 0xC2 && s[i] <= 0xDF)
			cp = s[i] & 0x1F, len = 2;
		else if (s[i] >= 0xE0 && s[i] <= 0xEF)
			cp = s[i] & 0x0F, len = 3;
		else if (s[i] >= 0xF0 && s[i] <= 0xF4)
			cp = s[i] & 0x07, len = 4;
		else
			return false;
		if (n - i < len)
			return false;
		for (uint32_t j = 1; j < len; j++) {
			if ((s[i + j] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + j] & 0x3F);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		i += len;
	}
	return true;
}

int schema_gbnf_literal(struct schema_gbnf *b, const char *s, size_t n)
{
	int k;

	if (!utf8_ok((const unsigned char *) s, n))
		return errmsg_set(b->e, -EINVAL, "a name or value in the schema is not valid UTF-8");
	k = append_len(b, "\"", 1);

	for (size_t i = 0; i < n && k >= 0; i++) {
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\') {
			char esc[2] = { '\\', (char) c };

			k = append_len(b, esc, 2);
		} else if (c < 0x20 || c == 0x7F) {
			k = appendf(b, "\\x%02X", c);
		} else {
			k = append_len(b, (const char *) &c, 1);
		}
	}
	return k < 0 ? k : append_len(b, "\"", 1);
}

int schema_gbnf_new(struct schema_gbnf **ret)
{
	struct schema_gbnf *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	b->out = &b->rules;
	*ret = b;
	return 0;
}

struct schema_gbnf *schema_gbnf_free(struct schema_gbnf *b)
{
	if (!b)
		return NULL;
	for (size_t i = 0; i < b->n_names; i++)
		free(b->names[i]);
	free(b->names);
	free(b->refs);
	free(b->rules.s);
	free(b);
	return NULL;
}

const char *schema_gbnf_text(struct schema_gbnf *b, size_t *ret_len)
{
	if (ret_len)
		*ret_len = b->rules.len;
	return b->rules.s ? b->rules.s : "";
}

static void new_rule(struct schema_gbnf *b, char name[static 32])
{
	snprintf(name, 32, "s%u", b->next_rule++);
}

/* The rules every schema shares. Documents are compact: at most one space where JSON allows
 * white space, none around the whole (a model that wanders into white space would otherwise
 * spend its tokens there, and clients parse either). \u escapes exclude surrogates, so one escape is one
 * character (minLength/maxLength count characters). */
static int add_common(struct schema_gbnf *b)
{
	if (b->have_common)
		return 0;
	b->have_common = true;
	return rules_append(
	    b, "ws ::= \" \"?\n"
	       "json-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" json-hex4)\n"
	       "json-hex4 ::= ([0-9a-cA-CeEfF] [0-9a-fA-F]{3}) | ([dD] [0-7] [0-9a-fA-F]{2})\n"
	       "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
	       "json-int ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
	       "json-number ::= json-int (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n"
	       "json-bool ::= \"true\" | \"false\"\n"
	       "json-null ::= \"null\"\n");
}

const char *schema_gbnf_any(struct schema_gbnf *b, bool object_only)
{
	if (add_common(b) < 0)
		return NULL;
	if (!b->have_any) {
		b->have_any = true;
		if (rules_append(
			b, "json-value ::= json-object | json-array | json-string | json-number | "
			   "json-bool | json-null\n"
			   "json-object ::= \"{\" ws (json-kv (\",\" ws json-kv)*)? \"}\"\n"
			   "json-kv ::= json-string ws \":\" ws json-value ws\n"
			   "json-array ::= \"[\" ws (json-value ws (\",\" ws json-value ws)*)? \"]\"\n") < 0)
			return NULL;
	}
	return object_only ? "json-object" : "json-value";
}

/* ---- integer ranges as digit patterns ---- */

static int digits_of(int64_t v)
{
	int d = 1;

	while (v >= 10)
		v /= 10, d++;
	return d;
}

static int64_t pow10i(int d)
{
	int64_t p = 1;

	while (d-- > 0)
		p *= 10;
	return p;
}

/* Equal-length digit strings a <= b: a pattern for every string between them. */
static int same_len(struct schema_gbnf *b, const char *a, const char *z, size_t n)
{
	bool zeros = true, nines = true;
	int k;

	if (n == 0)
		return 0;
	if (memcmp(a, z, n) == 0)
		return schema_gbnf_literal(b, a, n);
	for (size_t i = 1; i < n; i++)
		zeros &= a[i] == '0', nines &= z[i] == '9';
	if (zeros && nines)
		return n > 1 ? appendf(b, "[%c-%c] [0-9]{%zu}", a[0], z[0], n - 1)
			     : appendf(b, "[%c-%c]", a[0], z[0]);
	if (a[0] == z[0]) {
		k = appendf(b, "\"%c\" (", a[0]);
		if (k >= 0)
			k = same_len(b, a + 1, z + 1, n - 1);
		return k < 0 ? k : append_len(b, ")", 1);
	}
	char nn[24], oo[24];

	memset(nn, '9', n - 1), memset(oo, '0', n - 1);
	k = appendf(b, "(\"%c\" (", a[0]);
	if (k >= 0)
		k = same_len(b, a + 1, nn, n - 1);
	if (k >= 0 && a[0] + 1 <= z[0] - 1)
		k = appendf(b, ") | [%c-%c] [0-9]{%zu} | (", a[0] + 1, z[0] - 1, n - 1);
	else if (k >= 0)
		k = append_len(b, ") | (", 5);
	if (k >= 0)
		k = appendf(b, "\"%c\" (", z[0]);
	if (k >= 0)
		k = same_len(b, oo, z + 1, n - 1);
	return k < 0 ? k : append_len(b, ")))", 3);
}

/* 0 <= lo <= hi: every decimal in between, no leading zeros. */
static int uint_range(struct schema_gbnf *b, int64_t lo, int64_t hi)
{
	bool first = true;
	int k = append_len(b, "(", 1);

	for (int d = digits_of(lo); k >= 0 && d <= digits_of(hi); d++) {
		int64_t a = MAX(lo, d == 1 ? 0 : pow10i(d - 1)), z = MIN(hi, pow10i(d) - 1);
		char as[24], zs[24];

		snprintf(as, sizeof(as), "%" PRId64, a);
		snprintf(zs, sizeof(zs), "%" PRId64, z);
		k = append_len(b, first ? "(" : " | (", first ? 1 : 4);
		if (k >= 0)
			k = same_len(b, as, zs, strlen(as));
		if (k >= 0)
			k = append_len(b, ")", 1);
		first = false;
	}
	return k < 0 ? k : append_len(b, ")", 1);
}

/* Every integer >= lo (lo >= 0), up to 16 digits. */
static int uint_at_least(struct schema_gbnf *b, int64_t lo)
{
	int d = digits_of(lo), k;

	if (lo == 0)
		return schema_gbnf_append(b, "(\"0\" | [1-9] [0-9]{0,15})");
	k = append_len(b, "(", 1);
	if (k >= 0)
		k = uint_range(b, lo, pow10i(d) - 1);
	if (k >= 0 && d < 16)
		k = appendf(b, " | [1-9] [0-9]{%d,15}", d);
	return k < 0 ? k : append_len(b, ")", 1);
}

/* Integers in [lo, hi] (has_lo/has_hi: which bounds exist), as one parenthesised pattern. */
static int int_range(struct schema_gbnf *b, bool has_lo, int64_t lo, bool has_hi, int64_t hi)
{
	bool any = false;
	int k = append_len(b, "(", 1);

	if (k >= 0 && (!has_lo || lo < 0) && (!has_hi || hi >= -INT_LIMIT)) {
		int64_t kmin = has_hi && hi < 0 ? -hi : 1;

		if (!has_lo || -lo >= kmin) {
			k = append_len(b, "\"-\" ", 4);
			if (k >= 0)
				k = has_lo ? uint_range(b, kmin, -lo) : uint_at_least(b, kmin);
			any = true;
		}
	}
	if (k >= 0 && (!has_hi || hi >= 0)) {
		int64_t a = has_lo && lo > 0 ? lo : 0;

		if (any)
			k = append_len(b, " | ", 3);
		if (k >= 0)
			k = has_hi ? uint_range(b, a, hi) : uint_at_least(b, a);
	}
	return k < 0 ? k : append_len(b, ")", 1);
}

/* ---- the walk over the schema ---- */

static const char *const annotations[] = {
	"title", "description", "default", "examples", "$schema", "$id", "$comment",
	"deprecated", "readOnly", "writeOnly", "$defs", "definitions",
};
static const char *const keywords[] = {
	"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
	"enum", "const", "anyOf", "minLength", "maxLength", "minimum", "maximum", "$ref",
};

static bool in_list(const char *k, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(k, list[i]) == 0)
			return true;
	return false;
}

static int gen(struct schema_gbnf *b, struct json_object *s, const char *path, unsigned depth,
	       char rule[static 32]);

static int path_child(char out[static 256], const char *path, const char *a, const char *key)
{
	snprintf(out, 256, "%s/%s%s%.64s", path, a, key ? "/" : "", key ? key : "");
	return 0;
}

static int get_count(struct schema_gbnf *b, struct json_object *s, const char *key,
		     const char *path, int64_t *ret)
{
	struct json_object *v;
	int64_t x;

	if (!json_object_object_get_ex(s, key, &v))
		return 0;
	if (json_object_get_type(v) == json_type_double) {
		double d = json_object_get_double(v);

		if (d != floor(d)) /* NaN too (the infinities are whole: clamped below) */
			return errmsg_set(b->e, -EINVAL, "'%s' at '%s' must be a whole number", key,
					  path);
		/* out of int64_t's range the cast is undefined: a count that large is as good
		 * as unbounded, the signs as they are */
		x = d >= 0x1p62 ? INT64_C(1) << 62 : d <= -0x1p62 ? -1 : (int64_t) d;
	} else if (json_object_get_type(v) == json_type_int) {
		x = json_object_get_int64(v);
	} else {
		return errmsg_set(b->e, -EINVAL, "'%s' at '%s' must be a number", key, path);
	}
	if (x < 0)
		return errmsg_set(b->e, -EINVAL, "'%s' at '%s' must not be negative", key, path);
	*ret = x;
	return 1;
}

static int get_bound(struct schema_gbnf *b, struct json_object *s, const char *key,
		     const char *path, double *ret)
{
	struct json_object *v;

	if (!json_object_object_get_ex(s, key, &v))
		return 0;
	if (json_object_get_type(v) != json_type_double && json_object_get_type(v) != json_type_int)
		return errmsg_set(b->e, -EINVAL, "'%s' at '%s' must be a number", key, path);
	*ret = json_object_get_double(v);
	if (!isfinite(*ret))
		return errmsg_set(b->e, -EINVAL, "'%s' at '%s' must be finite", key, path);
	return 1;
}

/* "\"name\"" as the JSON text of a string, then as a GBNF literal */
static int json_literal(struct schema_gbnf *b, struct json_object *v)
{
	const char *t = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE);

	return t ? schema_gbnf_literal(b, t, strlen(t)) : -ENOMEM;
}

static int gen_string(struct schema_gbnf *b, struct json_object *s, const char *path)
{
	int64_t min = 0, max = -1;
	int k;

	k = get_count(b, s, "minLength", path, &min);
	if (k >= 0)
		k = get_count(b, s, "maxLength", path, &max);
	if (k < 0)
		return k;
	if (max >= 0 && max < min)
		return errmsg_set(b->e, -EINVAL, "'maxLength' is below 'minLength' at '%s'", path);
	if (min > GRAMMAR_MAX_REPEAT)
		return errmsg_set(b->e, -E2BIG, "'minLength' %" PRId64 " at '%s' is above %d", min,
				  path, GRAMMAR_MAX_REPEAT);
	if (max > GRAMMAR_MAX_REPEAT)
		max = GRAMMAR_MAX_REPEAT; /* a subset: still valid */
	if (min == 0 && max < 0)
		return schema_gbnf_append(b, "json-string");
	if (max < 0)
		return appendf(b, "\"\\\"\" json-char{%" PRId64 ",} \"\\\"\"", min);
	return appendf(b, "\"\\\"\" json-char{%" PRId64 ",%" PRId64 "} \"\\\"\"", min, max);
}

static int gen_number(struct schema_gbnf *b, struct json_object *s, const char *path,
		      bool integer)
{
	double lo = 0, hi = 0;
	int has_lo, has_hi, k;
	int64_t ilo, ihi;

	has_lo = get_bound(b, s, "minimum", path, &lo);
	if (has_lo < 0)
		return has_lo;
	has_hi = get_bound(b, s, "maximum", path, &hi);
	if (has_hi < 0)
		return has_hi;
	if (!has_lo && !has_hi)
		return schema_gbnf_append(b, integer ? "json-int" : "json-number");
	if ((has_lo && fabs(lo) > (double) INT_LIMIT) || (has_hi && fabs(hi) > (double) INT_LIMIT))
		return errmsg_set(b->e, -EINVAL, "bounds beyond ±1e15 at '%s' are not supported",
				  path);
	ilo = (int64_t) ceil(lo), ihi = (int64_t) floor(hi);
	if (has_lo && has_hi && ilo > ihi && (integer || lo > hi))
		return errmsg_set(b->e, -EINVAL, "no %s lies between 'minimum' and 'maximum' at '%s'",
				  integer ? "integer" : "number", path);
	if (has_lo && has_hi && ilo > ihi)
		return errmsg_set(b->e, -EINVAL, "bounds at '%s' without an integer between them "
						 "are not supported",
				  path);
	k = append_len(b, "(", 1);
	if (k >= 0)
		k = int_range(b, has_lo, ilo, has_hi, ihi);
	if (k >= 0 && !integer) {
		/* i.f for i >= 0 with lo <= i and i + 1 <= hi */
		int64_t pa = has_lo ? MAX(ilo, 0) : 0, pz = has_hi ? ihi - 1 : INT64_MAX;
		/* -k.f for k >= 0 with -(k+1) >= lo and -k <= hi */
		int64_t na = has_hi && hi < 0 ? (int64_t) ceil(-hi) : 0,
			nz = has_lo ? (int64_t) floor(-lo) - 1 : INT64_MAX;

		if (pa <= pz) {
			k = append_len(b, " | ", 3);
			if (k >= 0)
				k = pz == INT64_MAX ? uint_at_least(b, pa) : uint_range(b, pa, pz);
			if (k >= 0)
				k = schema_gbnf_append(b, " \".\" [0-9]{1,15}");
		}
		if (k >= 0 && na <= nz) {
			k = append_len(b, " | \"-\" ", 7);
			if (k >= 0)
				k = nz == INT64_MAX ? uint_at_least(b, na) : uint_range(b, na, nz);
			if (k >= 0)
				k = schema_gbnf_append(b, " \".\" [0-9]{1,15}");
		}
	}
	return k < 0 ? k : append_len(b, ")", 1);
}

static int gen_array(struct schema_gbnf *b, struct json_object *s, const char *path,
		     unsigned depth)
{
	struct json_object *items;
	char item[32], sub[256];
	int64_t min = 0, max = -1;
	int k;

	k = get_count(b, s, "minItems", path, &min);
	if (k >= 0)
		k = get_count(b, s, "maxItems", path, &max);
	if (k < 0)
		return k;
	if (max >= 0 && max < min)
		return errmsg_set(b->e, -EINVAL, "'maxItems' is below 'minItems' at '%s'", path);
	if (min > 256)
		return errmsg_set(b->e, -E2BIG, "'minItems' %" PRId64 " at '%s' is above 256", min,
				  path);
	if (max > 256)
		max = -1; /* unbounded is a superset... so keep the bound by the grammar's limit */
	if (json_object_object_get_ex(s, "items", &items)) {
		if (json_object_get_type(items) == json_type_boolean && !json_object_get_boolean(items)) {
			if (min > 0)
				return errmsg_set(b->e, -EINVAL, "'items': false with 'minItems' at '%s' "
								 "matches nothing", path);
			return schema_gbnf_append(b, "\"[\" ws \"]\"");
		}
		path_child(sub, path, "items", NULL);
		k = gen(b, items, sub, depth + 1, item);
		if (k < 0)
			return k;
	} else {
		snprintf(item, sizeof(item), "%s", schema_gbnf_any(b, false));
	}
	/* "[" ws ( item ws ("," ws item ws){min-1, max-1} )? "]" */
	if (max == 0)
		return schema_gbnf_append(b, "\"[\" ws \"]\"");
	k = appendf(b, "\"[\" ws %s%s ws", min == 0 ? "(" : "", item);
	if (k < 0)
		return k;
	if (max < 0 && max != -1)
		return -EINVAL;
	if (max < 0 || max > 1) {
		int64_t lo = min > 0 ? min - 1 : 0;

		if (max < 0)
			k = appendf(b, " (\",\" ws %s ws){%" PRId64 ",}", item, lo);
		else
			k = appendf(b, " (\",\" ws %s ws){%" PRId64 ",%" PRId64 "}", item, lo, max - 1);
		if (k < 0)
			return k;
	}
	return schema_gbnf_append(b, min == 0 ? ")? \"]\"" : " \"]\"");
}

static int gen_object(struct schema_gbnf *b, struct json_object *s, const char *path,
		      unsigned depth)
{
	struct json_object *props = NULL, *req = NULL, *addl = NULL;
	/* properties, then required names not among them: at most 2 × the limit */
	struct prop {
		const char *name;
		struct json_object *schema;
		bool required;
		char kv[32], tail[32], first[32];
	};
	_cleanup_free_ struct prop *P = calloc(2 * SCHEMA_MAX_PROPERTIES, sizeof(*P));
	char sub[256];
	size_t n = 0;
	bool addl_false = false;
	int k;

	json_object_object_get_ex(s, "properties", &props);
	json_object_object_get_ex(s, "required", &req);
	json_object_object_get_ex(s, "additionalProperties", &addl);
	if (!P)
		return -ENOMEM;
	if (props && json_object_get_type(props) != json_type_object)
		return errmsg_set(b->e, -EINVAL, "'properties' at '%s' must be an object", path);
	if (req && json_object_get_type(req) != json_type_array)
		return errmsg_set(b->e, -EINVAL, "'required' at '%s' must be an array", path);
	if (addl && json_object_get_type(addl) == json_type_boolean)
		addl_false = !json_object_get_boolean(addl), addl = NULL;
	else if (addl && json_object_get_type(addl) != json_type_object)
		return errmsg_set(b->e, -EINVAL, "'additionalProperties' at '%s' must be a boolean or "
						 "a schema", path);
	if (props && json_object_object_length(props) > SCHEMA_MAX_PROPERTIES)
		return errmsg_set(b->e, -E2BIG, "%d properties at '%s' (at most %d)",
				  json_object_object_length(props), path, SCHEMA_MAX_PROPERTIES);
	if (req && json_object_array_length(req) > SCHEMA_MAX_PROPERTIES)
		return errmsg_set(b->e, -E2BIG, "%zu required names at '%s' (at most %d)",
				  json_object_array_length(req), path, SCHEMA_MAX_PROPERTIES);
	if (props) {
		json_object_object_foreach(props, key, val) {
			P[n].name = key, P[n].schema = val;
			n++;
		}
	}
	for (size_t i = 0; req && i < json_object_array_length(req); i++) {
		struct json_object *r = json_object_array_get_idx(req, i);
		const char *name;
		size_t j;

		if (json_object_get_type(r) != json_type_string)
			return errmsg_set(b->e, -EINVAL, "'required' at '%s' must hold strings", path);
		name = json_object_get_string(r);
		for (j = 0; j < n && strcmp(P[j].name, name) != 0; j++)
			;
		if (j == n) {
			if (addl_false)
				return errmsg_set(b->e, -EINVAL, "required property '%.64s' at '%s' is "
								 "not in 'properties' and "
								 "additionalProperties is false",
						  name, path);
			P[n].name = name, P[n].schema = addl;
			n++;
		}
		P[j].required = true;
	}
	if (n == 0) {
		if (addl_false)
			return schema_gbnf_append(b, "\"{\" ws \"}\"");
		if (!addl)
			return schema_gbnf_append(b, schema_gbnf_any(b, true));
		/* any keys, values of one schema */
		char val[32], r[32];

		path_child(sub, path, "additionalProperties", NULL);
		k = gen(b, addl, sub, depth + 1, val);
		if (k < 0)
			return k;
		new_rule(b, r);
		k = rulef(b, r, "json-string ws \":\" ws %s ws", val);
		if (k < 0)
			return k;
		return appendf(b, "\"{\" ws (%s (\",\" ws %s)*)? \"}\"", r, r);
	}
	/* kv_i ::= "\"name\"" ws ":" ws value_i ws */
	for (size_t i = 0; i < n; i++) {
		char val[32];
		struct json_object *key = json_object_new_string(P[i].name);

		if (!key)
			return -ENOMEM;
		path_child(sub, path, "properties", P[i].name);
		if (P[i].schema)
			k = gen(b, P[i].schema, sub, depth + 1, val);
		else
			k = (snprintf(val, sizeof(val), "%s", schema_gbnf_any(b, false)), 0);
		if (k >= 0) {
			struct strbuf line, *saved;

			new_rule(b, P[i].kv);
			rule_open(b, &line, &saved);
			k = json_literal(b, key);
			if (k >= 0)
				k = appendf(b, " ws \":\" ws %s ws", val);
			k = rule_close(b, P[i].kv, &line, saved, k);
		}
		json_object_put(key);
		if (k < 0)
			return k;
	}
	/* tail_i: what may follow property i: tail_i ::= ("," ws kv_{i+1})? tail_{i+1} (no "?"
	 * when i+1 is required); first_i: the first property present is i or a later one, never
	 * skipping a required one. Built from the end. */
	for (size_t i = n; i-- > 0;) {
		/* P[i].tail: after kv_i */
		new_rule(b, P[i].tail);
		if (i + 1 == n)
			k = rulef(b, P[i].tail, "\"\"");
		else
			k = rulef(b, P[i].tail, "(\",\" ws %s)%s %s", P[i + 1].kv,
				    P[i + 1].required ? "" : "?", P[i + 1].tail);
		if (k < 0)
			return k;
	}
	for (size_t i = n; i-- > 0;) {
		new_rule(b, P[i].first);
		if (P[i].required || i + 1 == n)
			k = rulef(b, P[i].first, "%s %s%s", P[i].kv, P[i].tail,
				    P[i].required ? "" : " | \"\"");
		else
			k = rulef(b, P[i].first, "%s %s | %s", P[i].kv, P[i].tail, P[i + 1].first);
		if (k < 0)
			return k;
	}
	return appendf(b, "\"{\" ws %s \"}\"", P[0].first);
}

static int gen_typed(struct schema_gbnf *b, struct json_object *s, const char *type,
		     const char *path, unsigned depth)
{
	if (strcmp(type, "string") == 0)
		return gen_string(b, s, path);
	if (strcmp(type, "integer") == 0)
		return gen_number(b, s, path, true);
	if (strcmp(type, "number") == 0)
		return gen_number(b, s, path, false);
	if (strcmp(type, "boolean") == 0)
		return schema_gbnf_append(b, "json-bool");
	if (strcmp(type, "null") == 0)
		return schema_gbnf_append(b, "json-null");
	if (strcmp(type, "array") == 0)
		return gen_array(b, s, path, depth);
	if (strcmp(type, "object") == 0)
		return gen_object(b, s, path, depth);
	return errmsg_set(b->e, -EINVAL, "unknown type '%.32s' at '%s'", type, path);
}

static bool type_fits(struct json_object *v, const char *type)
{
	enum json_type t = json_object_get_type(v);

	if (strcmp(type, "string") == 0)
		return t == json_type_string;
	if (strcmp(type, "integer") == 0)
		return t == json_type_int ||
		       (t == json_type_double && json_object_get_double(v) == floor(json_object_get_double(v)));
	if (strcmp(type, "number") == 0)
		return t == json_type_int || t == json_type_double;
	if (strcmp(type, "boolean") == 0)
		return t == json_type_boolean;
	if (strcmp(type, "null") == 0)
		return t == json_type_null;
	if (strcmp(type, "array") == 0)
		return t == json_type_array;
	if (strcmp(type, "object") == 0)
		return t == json_type_object;
	return false;
}

/* Resolves "#/$defs/NAME" or "#/definitions/NAME" against the root. */
static int resolve_ref(struct schema_gbnf *b, const char *ref, const char *path, unsigned depth,
		       char rule[static 32])
{
	struct json_object *defs, *target;
	const char *name;
	char sub[256];
	size_t i;
	int k;

	if (strncmp(ref, "#/$defs/", 8) == 0)
		name = ref + 8, k = json_object_object_get_ex(b->root, "$defs", &defs);
	else if (strncmp(ref, "#/definitions/", 14) == 0)
		name = ref + 14, k = json_object_object_get_ex(b->root, "definitions", &defs);
	else
		return errmsg_set(b->e, -EINVAL, "'$ref' '%.64s' at '%s': only \"#/$defs/NAME\" and "
						 "\"#/definitions/NAME\" are supported", ref, path);
	if (!k || !json_object_object_get_ex(defs, name, &target))
		return errmsg_set(b->e, -EINVAL, "'$ref' '%.64s' at '%s' points to nothing", ref, path);
	for (i = 0; i < b->n_refs; i++)
		if (b->refs[i].target == target) {
			if (!b->refs[i].done)
				return errmsg_set(b->e, -EINVAL, "'$ref' loop through '%.64s' at '%s' "
								 "(recursive schemas are not "
								 "supported)", ref, path);
			memcpy(rule, b->refs[i].rule, 32);
			return 0;
		}
	struct ref_entry *t = realloc(b->refs, sizeof(*t) * (b->n_refs + 1));

	if (!t)
		return -ENOMEM;
	b->refs = t;
	i = b->n_refs++;
	b->refs[i] = (struct ref_entry){ .target = target };
	snprintf(sub, sizeof(sub), "%.200s", ref);
	k = gen(b, target, sub, depth + 1, rule); /* b->refs may move meanwhile */
	if (k < 0)
		return k;
	memcpy(b->refs[i].rule, rule, 32);
	b->refs[i].done = true;
	memcpy(rule, b->refs[i].rule, 32);
	return 0;
}

/* Writes "RULE ::= ..." for schema s; its name in rule. */
static int gen(struct schema_gbnf *b, struct json_object *s, const char *path, unsigned depth,
	       char rule[static 32])
{
	struct json_object *v, *type = NULL;
	const char *sole = NULL; /* enum, const, anyOf or $ref: they stand alone */
	char sub[256];
	int k;

	if (depth > SCHEMA_MAX_DEPTH)
		return errmsg_set(b->e, -E2BIG, "the schema is nested deeper than %d levels (at '%s')",
				  SCHEMA_MAX_DEPTH, path);
	if (++b->n_nodes > SCHEMA_MAX_NODES)
		return errmsg_set(b->e, -E2BIG, "the schema has more than %d parts", SCHEMA_MAX_NODES);
	k = add_common(b);
	if (k < 0)
		return k;
	if (json_object_get_type(s) == json_type_boolean) {
		if (!json_object_get_boolean(s))
			return errmsg_set(b->e, -EINVAL, "the schema 'false' at '%s' matches nothing",
					  path);
		snprintf(rule, 32, "%s", schema_gbnf_any(b, false));
		return 0;
	}
	if (json_object_get_type(s) != json_type_object)
		return errmsg_set(b->e, -EINVAL, "the schema at '%s' must be an object", path);
	json_object_object_foreach(s, key, val) {
		(void) val;
		if (in_list(key, annotations, ELEMENTSOF(annotations)))
			continue;
		if (!in_list(key, keywords, ELEMENTSOF(keywords)))
			return errmsg_set(b->e, -EINVAL,
					  "unsupported JSON Schema keyword '%.64s' at '%s'", key, path);
		if (strcmp(key, "enum") == 0 || strcmp(key, "const") == 0 ||
		    strcmp(key, "anyOf") == 0 || strcmp(key, "$ref") == 0) {
			if (sole)
				return errmsg_set(b->e, -EINVAL, "'%s' and '%s' together at '%s' are not "
								 "supported", sole, key, path);
			sole = key;
		}
	}
	json_object_object_get_ex(s, "type", &type);
	if (sole) {
		/* only "type" may come with enum/const (to filter by); nothing with anyOf/$ref */
		json_object_object_foreach(s, key2, val2) {
			(void) val2;
			if (strcmp(key2, sole) == 0 || in_list(key2, annotations, ELEMENTSOF(annotations)))
				continue;
			if (strcmp(key2, "type") == 0 && sole[0] != 'a' && sole[0] != '$')
				continue;
			return errmsg_set(b->e, -EINVAL, "'%s' together with '%s' at '%s' is not "
							 "supported", key2, sole, path);
		}
	}
	if (sole && strcmp(sole, "$ref") == 0) {
		json_object_object_get_ex(s, "$ref", &v);
		if (json_object_get_type(v) != json_type_string)
			return errmsg_set(b->e, -EINVAL, "'$ref' at '%s' must be a string", path);
		return resolve_ref(b, json_object_get_string(v), path, depth, rule);
	}
	if (type && json_object_get_type(type) != json_type_string &&
	    json_object_get_type(type) != json_type_array)
		return errmsg_set(b->e, -EINVAL, "'type' at '%s' must be a string or an array", path);

	if (sole && strcmp(sole, "anyOf") == 0) {
		char (*alts)[32];
		size_t n;

		json_object_object_get_ex(s, "anyOf", &v);
		if (json_object_get_type(v) != json_type_array || json_object_array_length(v) == 0)
			return errmsg_set(b->e, -EINVAL, "'anyOf' at '%s' must be a non-empty array",
					  path);
		n = json_object_array_length(v);
		if (n > SCHEMA_MAX_ENUM)
			return errmsg_set(b->e, -E2BIG, "'anyOf' at '%s' has %zu entries (at most %d)",
					  path, n, SCHEMA_MAX_ENUM);
		alts = calloc(n, sizeof(*alts));
		if (!alts)
			return -ENOMEM;
		for (size_t i = 0; i < n && k >= 0; i++) {
			snprintf(sub, sizeof(sub), "%.200s/anyOf/%zu", path, i);
			k = gen(b, json_object_array_get_idx(v, i), sub, depth + 1, alts[i]);
		}
		if (k >= 0) {
			struct strbuf line, *saved;

			new_rule(b, rule);
			rule_open(b, &line, &saved);
			k = append_len(b, alts[0], strlen(alts[0]));
			for (size_t i = 1; i < n && k >= 0; i++)
				k = appendf(b, " | %s", alts[i]);
			k = rule_close(b, rule, &line, saved, k);
		}
		free(alts);
		return k;
	}
	if (sole) {
		/* enum / const: the literal JSON texts, filtered by type if given */
		size_t n, n_out = 0;
		bool is_enum = strcmp(sole, "enum") == 0;

		json_object_object_get_ex(s, sole, &v);
		if (is_enum && json_object_get_type(v) != json_type_array)
			return errmsg_set(b->e, -EINVAL, "'enum' at '%s' must be an array", path);
		n = is_enum ? json_object_array_length(v) : 1;
		if (n > SCHEMA_MAX_ENUM)
			return errmsg_set(b->e, -E2BIG, "'enum' at '%s' has %zu values (at most %d)", path,
					  n, SCHEMA_MAX_ENUM);
		struct strbuf line, *saved;

		new_rule(b, rule);
		rule_open(b, &line, &saved);
		for (size_t i = 0; i < n && k >= 0; i++) {
			struct json_object *x = is_enum ? json_object_array_get_idx(v, i) : v;
			bool fits = true;

			if (type && json_object_get_type(type) == json_type_string)
				fits = type_fits(x, json_object_get_string(type));
			else if (type) {
				fits = false;
				for (size_t j = 0; j < json_object_array_length(type); j++) {
					struct json_object *t = json_object_array_get_idx(type, j);

					fits |= json_object_get_type(t) == json_type_string &&
						type_fits(x, json_object_get_string(t));
				}
			}
			if (!fits)
				continue;
			if (n_out++)
				k = append_len(b, " | ", 3);
			if (k >= 0)
				k = json_literal(b, x);
		}
		if (k >= 0 && n_out == 0)
			k = errmsg_set(b->e, -EINVAL, "'%s' at '%s' allows no value", sole, path);
		return rule_close(b, rule, &line, saved, k);
	}

	/* typed: one type, several, or inferred from the keywords present */
	const char *types[8];
	size_t n_types = 0;

	if (type && json_object_get_type(type) == json_type_string) {
		types[n_types++] = json_object_get_string(type);
	} else if (type) {
		size_t n = json_object_array_length(type);

		if (n == 0 || n > 7)
			return errmsg_set(b->e, -EINVAL, "'type' at '%s' must list 1 to 7 types", path);
		for (size_t i = 0; i < n; i++) {
			struct json_object *t = json_object_array_get_idx(type, i);

			if (json_object_get_type(t) != json_type_string)
				return errmsg_set(b->e, -EINVAL, "'type' at '%s' must list strings", path);
			types[n_types++] = json_object_get_string(t);
		}
	} else {
		/* no type: a keyword of one type implies it (a document of another type would
		 * be valid too, but we generate the one the schema describes) */
		if (json_object_object_get_ex(s, "properties", NULL) ||
		    json_object_object_get_ex(s, "required", NULL) ||
		    json_object_object_get_ex(s, "additionalProperties", NULL))
			types[n_types++] = "object";
		else if (json_object_object_get_ex(s, "items", NULL) ||
			 json_object_object_get_ex(s, "minItems", NULL) ||
			 json_object_object_get_ex(s, "maxItems", NULL))
			types[n_types++] = "array";
		else if (json_object_object_get_ex(s, "minLength", NULL) ||
			 json_object_object_get_ex(s, "maxLength", NULL))
			types[n_types++] = "string";
		else if (json_object_object_get_ex(s, "minimum", NULL) ||
			 json_object_object_get_ex(s, "maximum", NULL))
			types[n_types++] = "number";
		else {
			snprintf(rule, 32, "%s", schema_gbnf_any(b, false));
			return rule[0] ? 0 : -ENOMEM;
		}
	}
	/* one rule per type (each body may add rules of its own first), then their union */
	char names[8][32];

	for (size_t i = 0; i < n_types && k >= 0; i++) {
		struct strbuf line, *saved;

		new_rule(b, names[i]);
		rule_open(b, &line, &saved);
		k = gen_typed(b, s, types[i], path, depth);
		k = rule_close(b, names[i], &line, saved, k);
	}
	if (k < 0)
		return k;
	if (n_types == 1) {
		memcpy(rule, names[0], 32);
		return 0;
	}
	{
		struct strbuf line, *saved;

		new_rule(b, rule);
		rule_open(b, &line, &saved);
		k = append_len(b, names[0], strlen(names[0]));
		for (size_t i = 1; i < n_types && k >= 0; i++)
			k = appendf(b, " | %s", names[i]);
		return rule_close(b, rule, &line, saved, k);
	}
}

int schema_gbnf_add(struct schema_gbnf *b, struct json_object *schema, const char **ret_rule,
		    struct errmsg *e)
{
	char rule[32], *name;
	char **t;
	int k;

	b->e = e;
	b->root = schema;
	b->n_refs = 0; /* $defs are per schema */
	k = gen(b, schema, "#", 0, rule);
	b->root = NULL;
	if (k < 0)
		return k;
	name = strdup(rule);
	t = name ? realloc(b->names, sizeof(*t) * (b->n_names + 1)) : NULL;
	if (!t) {
		free(name);
		return -ENOMEM;
	}
	b->names = t;
	b->names[b->n_names++] = name;
	*ret_rule = name;
	return 0;
}

int schema_to_gbnf(struct json_object *schema, char **ret, size_t *ret_len, struct errmsg *e)
{
	_cleanup_(schema_gbnf_freep) struct schema_gbnf *b = NULL;
	const char *rule;
	int k;

	k = schema_gbnf_new(&b);
	if (k >= 0)
		k = schema_gbnf_add(b, schema, &rule, e);
	if (k >= 0)
		k = rulef(b, "root", "%s", rule);
	if (k < 0)
		return k;
	*ret_len = b->rules.len;
	*ret = TAKE_PTR(b->rules.s);
	return 0;
}

int schema_json_object_gbnf(char **ret, size_t *ret_len)
{
	_cleanup_(schema_gbnf_freep) struct schema_gbnf *b = NULL;
	int k;

	k = schema_gbnf_new(&b);
	if (k < 0)
		return k;
	if (!schema_gbnf_any(b, true))
		return -ENOMEM;
	k = schema_gbnf_append(b, "root ::= json-object\n");
	if (k < 0)
		return k;
	*ret_len = b->rules.len;
	*ret = TAKE_PTR(b->rules.s);
	return 0;
}

/* ---- the cache: schema text → GBNF ---- */

#define SCHEMA_CACHE_SLOTS 64

static struct {
	pthread_mutex_t lock;
	uint8_t key[SCHEMA_CACHE_SLOTS][32]; /* SHA-256 of the schema's compact JSON text */
	char *gbnf[SCHEMA_CACHE_SLOTS];      /* owned */
	size_t len[SCHEMA_CACHE_SLOTS];
	uint64_t used[SCHEMA_CACHE_SLOTS];
	uint64_t clock;
} schema_cache = { .lock = PTHREAD_MUTEX_INITIALIZER };

int schema_to_gbnf_cached(struct json_object *schema, char **ret, size_t *ret_len,
			  struct errmsg *e)
{
	const char *text = json_object_to_json_string_ext(schema, JSON_C_TO_STRING_PLAIN |
								  JSON_C_TO_STRING_NOSLASHESCAPE);
	uint8_t key[32];
	uint32_t victim = 0;
	char *copy;
	int k;

	if (!text)
		return -ENOMEM;
	sha256(text, strlen(text), key);
	pthread_mutex_lock(&schema_cache.lock);
	for (uint32_t i = 0; i < SCHEMA_CACHE_SLOTS; i++) {
		if (schema_cache.gbnf[i] && memcmp(schema_cache.key[i], key, 32) == 0) {
			copy = strndup(schema_cache.gbnf[i], schema_cache.len[i]);
			*ret_len = schema_cache.len[i];
			schema_cache.used[i] = ++schema_cache.clock;
			pthread_mutex_unlock(&schema_cache.lock);
			if (!copy)
				return -ENOMEM;
			*ret = copy;
			return 0;
		}
		if (!schema_cache.gbnf[i] || schema_cache.used[i] < schema_cache.used[victim])
			victim = i;
	}
	pthread_mutex_unlock(&schema_cache.lock);

	k = schema_to_gbnf(schema, ret, ret_len, e); /* outside the lock */
	if (k < 0)
		return k;
	copy = strndup(*ret, *ret_len);
	if (!copy)
		return 0; /* not cached: still an answer */
	pthread_mutex_lock(&schema_cache.lock);
	free(schema_cache.gbnf[victim]);
	memcpy(schema_cache.key[victim], key, 32);
	schema_cache.gbnf[victim] = copy;
	schema_cache.len[victim] = *ret_len;
	schema_cache.used[victim] = ++schema_cache.clock;
	pthread_mutex_unlock(&schema_cache.lock);
	return 0;
}
