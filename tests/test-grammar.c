/* SPDX-License-Identifier: MIT */
/*
 * test-grammar: the GBNF parser, the matcher and its mask, the JSON Schema compiler (every
 * supported keyword, refusals, hostile schemas), and the guarantee of issue #21: over many
 * generated schemas, seeds and temperatures, every output that finishes "stop" parses and
 * validates, both on a byte-level toy vocabulary and through the scheduler on a random-weight
 * model (constrained and free rows in one batch). The validator below is the test's own.
 */
#include <json-c/json.h>

#include "test.h"

#include "engine/model.h"
#include "engine/vocab.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/schema.h"
#include "lora/adapter.h"
#include "sched/sched.h"

#define ASSERT_FALSE(x) ASSERT_TRUE(!(x))
#define ASSERT_NOT_NULL(x) ASSERT_TRUE((x) != NULL)

/* ---- a small JSON Schema validator for the supported keywords (independent of schema.c) ---- */

static struct json_object *defs_root;

static bool validate(struct json_object *s, struct json_object *v);

static size_t utf8_chars(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += ((unsigned char) *s & 0xC0) != 0x80;
	return n;
}

static bool is_type(struct json_object *v, const char *t)
{
	enum json_type jt = json_object_get_type(v);

	if (!strcmp(t, "integer"))
		return jt == json_type_int ||
		       (jt == json_type_double && json_object_get_double(v) == floor(json_object_get_double(v)));
	if (!strcmp(t, "number"))
		return jt == json_type_int || jt == json_type_double;
	if (!strcmp(t, "string"))
		return jt == json_type_string;
	if (!strcmp(t, "boolean"))
		return jt == json_type_boolean;
	if (!strcmp(t, "null"))
		return jt == json_type_null;
	if (!strcmp(t, "array"))
		return jt == json_type_array;
	if (!strcmp(t, "object"))
		return jt == json_type_object;
	return false;
}

static bool json_equal(struct json_object *a, struct json_object *b)
{
	if ((json_object_get_type(a) == json_type_int || json_object_get_type(a) == json_type_double) &&
	    (json_object_get_type(b) == json_type_int || json_object_get_type(b) == json_type_double))
		return json_object_get_double(a) == json_object_get_double(b);
	return json_object_equal(a, b);
}

static bool validate(struct json_object *s, struct json_object *v)
{
	struct json_object *k;

	if (json_object_get_type(s) == json_type_boolean)
		return json_object_get_boolean(s);
	if (json_object_object_get_ex(s, "$ref", &k)) {
		const char *ref = json_object_get_string(k);
		struct json_object *defs, *t;

		if (!json_object_object_get_ex(defs_root, "$defs", &defs) ||
		    !json_object_object_get_ex(defs, ref + strlen("#/$defs/"), &t))
			return false;
		return validate(t, v);
	}
	if (json_object_object_get_ex(s, "type", &k)) {
		bool ok = false;

		if (json_object_get_type(k) == json_type_string)
			ok = is_type(v, json_object_get_string(k));
		else
			for (size_t i = 0; i < json_object_array_length(k); i++)
				ok |= is_type(v, json_object_get_string(json_object_array_get_idx(k, i)));
		if (!ok)
			return false;
	}
	if (json_object_object_get_ex(s, "enum", &k)) {
		bool ok = false;

		for (size_t i = 0; i < json_object_array_length(k); i++)
			ok |= json_equal(json_object_array_get_idx(k, i), v);
		if (!ok)
			return false;
	}
	if (json_object_object_get_ex(s, "const", &k) && !json_equal(k, v))
		return false;
	if (json_object_object_get_ex(s, "anyOf", &k)) {
		bool ok = false;

		for (size_t i = 0; i < json_object_array_length(k); i++)
			ok |= validate(json_object_array_get_idx(k, i), v);
		if (!ok)
			return false;
	}
	if (json_object_get_type(v) == json_type_string) {
		size_t n = utf8_chars(json_object_get_string(v));

		if (json_object_object_get_ex(s, "minLength", &k) && n < (size_t) json_object_get_int64(k))
			return false;
		if (json_object_object_get_ex(s, "maxLength", &k) && n > (size_t) json_object_get_int64(k))
			return false;
	}
	if (json_object_get_type(v) == json_type_int || json_object_get_type(v) == json_type_double) {
		double x = json_object_get_double(v);

		if (json_object_object_get_ex(s, "minimum", &k) && x < json_object_get_double(k))
			return false;
		if (json_object_object_get_ex(s, "maximum", &k) && x > json_object_get_double(k))
			return false;
	}
	if (json_object_get_type(v) == json_type_array) {
		size_t n = json_object_array_length(v);

		if (json_object_object_get_ex(s, "minItems", &k) && n < (size_t) json_object_get_int64(k))
			return false;
		if (json_object_object_get_ex(s, "maxItems", &k) && n > (size_t) json_object_get_int64(k))
			return false;
		if (json_object_object_get_ex(s, "items", &k))
			for (size_t i = 0; i < n; i++)
				if (!validate(k, json_object_array_get_idx(v, i)))
					return false;
	}
	if (json_object_get_type(v) == json_type_object) {
		struct json_object *props = NULL, *addl = NULL;

		json_object_object_get_ex(s, "properties", &props);
		json_object_object_get_ex(s, "additionalProperties", &addl);
		if (json_object_object_get_ex(s, "required", &k))
			for (size_t i = 0; i < json_object_array_length(k); i++)
				if (!json_object_object_get_ex(
					v, json_object_get_string(json_object_array_get_idx(k, i)), NULL))
					return false;
		json_object_object_foreach(v, key, val) {
			struct json_object *ps;

			if (props && json_object_object_get_ex(props, key, &ps)) {
				if (!validate(ps, val))
					return false;
			} else if (addl && !validate(addl, val)) {
				return false;
			}
		}
	}
	return true;
}

/* Parses text as one JSON document (nothing after it but whitespace) and validates it. */
static bool parses_and_validates(struct json_object *schema, const char *text, size_t len)
{
	struct json_tokener *tok = json_tokener_new_ex(64);
	_cleanup_free_ char *copy = malloc(len + 1);
	struct json_object *v;
	bool ok = false;
	size_t used;

	if (!copy)
		return false;
	/* json-c waits for more after a number or literal at the very end: end it with a NUL */
	memcpy(copy, text, len);
	copy[len] = '\0';
	v = json_tokener_parse_ex(tok, copy, (int) len + 1);
	used = (size_t) json_tokener_get_parse_end(tok);
	if (json_tokener_get_error(tok) == json_tokener_success) { /* v is NULL for "null" */
		while (used < len && strchr(" \t\n", text[used]))
			used++;
		defs_root = schema;
		ok = used >= len && validate(schema, v);
	}
	if (!ok)
		fprintf(stderr, "  invalid output: %.*s\n  schema: %s\n", (int) len, text,
			json_object_to_json_string(schema));
	json_object_put(v);
	json_tokener_free(tok);
	return ok;
}

/* ---- GBNF ---- */

static int parse_err(const char *text, const char *want)
{
	struct grammar *g = NULL;
	struct errmsg e = {};
	int r = grammar_parse(text, strlen(text), &g, &e);

	grammar_unref(g);
	if (r >= 0 || !strstr(e.text, want)) {
		fprintf(stderr, "  %s: got %d '%s', want '%s'\n", text, r, e.text, want);
		return 1;
	}
	return 0;
}

static bool matches(const char *gbnf, const char *text)
{
	_cleanup_(grammar_unrefp) struct grammar *g = NULL;
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	struct errmsg e = {};

	if (grammar_parse(gbnf, strlen(gbnf), &g, &e) < 0) {
		fprintf(stderr, "  grammar: %s\n", e.text);
		return false;
	}
	if (matcher_new(g, NULL, &m) < 0)
		return false;
	return matcher_accept_bytes(m, text, strlen(text)) == 0 && matcher_accepting(m);
}

TEST(gbnf_syntax)
{
	const char *arith = "# llama.cpp's arithmetic example\n"
			    "root  ::= (expr \"=\" ws term \"\\n\")+\n"
			    "expr  ::= term ([-+*/] term)*\n"
			    "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
			    "ident ::= [a-z] [a-z0-9_]* ws\n"
			    "num   ::= [0-9]+ ws\n"
			    "ws    ::= [ \\t\\n]*\n";

	ASSERT_TRUE(matches(arith, "a=1\n"));
	ASSERT_TRUE(matches(arith, "(x+2)*y = 42\n"));
	ASSERT_FALSE(matches(arith, "=1\n"));
	ASSERT_TRUE(matches("root ::= \"a\"{2,3}", "aaa"));
	ASSERT_FALSE(matches("root ::= \"a\"{2,3}", "aaaa"));
	ASSERT_FALSE(matches("root ::= \"a\"{2,3}", "a"));
	ASSERT_TRUE(matches("root ::= \"ab\"{2}", "abab"));
	ASSERT_TRUE(matches("root ::= [^x]+", "ÿé€😀"));
	ASSERT_FALSE(matches("root ::= [^x]+", "ax"));
	ASSERT_TRUE(matches("root ::= \"\\u00e9\" . \"\\x41\"", "éZA"));
	ASSERT_TRUE(matches("root ::=\n  \"a\" |\n  \"b\"\n", "b"));
	ASSERT_TRUE(matches("root ::= (\"a\"\n \"b\")?", ""));
	ASSERT_TRUE(matches("root ::= x{0,3}\nx ::= \"\" | \"x\"", "xx")); /* nullable repeat */

	ASSERT_EQ(parse_err("expr ::= \"a\"", "no 'root' rule"), 0);
	ASSERT_EQ(parse_err("root ::= foo", "rule 'foo' is not defined"), 0);
	ASSERT_EQ(parse_err("root ::= root \"a\" | \"b\"", "left-recursive"), 0);
	ASSERT_EQ(parse_err("root ::= x root\nx ::= \"a\"?", "left-recursive"), 0);
	ASSERT_EQ(parse_err("root ::= (\"\")*", "left-recursive"), 0);
	ASSERT_EQ(parse_err("root ::= \"abc", "unterminated"), 0);
	ASSERT_EQ(parse_err("root ::= [a-", "unterminated"), 0);
	ASSERT_EQ(parse_err("root ::= \"a\"{99999}", "repetition count"), 0);
	ASSERT_EQ(parse_err("root ::= \"a\"\nroot ::= \"b\"", "defined twice"), 0);
	ASSERT_EQ(parse_err("root ::= \"a\" root", "no finite text"), 0);
	ASSERT_EQ(parse_err("root ::= \"\\q\"", "unknown escape"), 0);
	ASSERT_EQ(parse_err("root ::= ((((\"a\"){4000}){4000}){4000})", "no finite text"), 0);

	/* 50,000 rules chained in the worst order for a fixpoint (each refers to the next one
	 * defined after it): linear work, so this finishes at once */
	{
		size_t cap = 50000 * 40, at = 0;
		char *t = malloc(cap);
		struct grammar *g = NULL;
		struct errmsg e = {};

		ASSERT_NOT_NULL(t);
		at += (size_t) sprintf(t + at, "root ::= r0\n");
		for (int i = 0; i < 50000; i++)
			at += (size_t) (i + 1 < 50000 ? sprintf(t + at, "r%d ::= r%d \"a\" | \"b\"\n", i, i + 1)
						     : sprintf(t + at, "r%d ::= \"a\"\n", i));
		ASSERT_OK(grammar_parse(t, at, &g, &e));
		grammar_unref(g);
		free(t);
	}
	return 0;
}

/* ---- the mask on a toy vocabulary ---- */

/* every single byte, plus some multi-byte JSON-ish pieces */
static struct grammar_vocab *toy_vocab(void)
{
	static const char *multi[] = { "{\"", "\":", "\",", "\"}", "true", "false", "null", "12",
				       "000", "abc", " \"", "é", "\xc3", "\xa9", "},", "]}", "[\"",
				       ", \"", "\": \"", "\"]" };
	const size_t n = 256 + ELEMENTSOF(multi);
	const char *piece[256 + ELEMENTSOF(multi)];
	size_t len[256 + ELEMENTSOF(multi)];
	static char bytes[256];
	struct grammar_vocab *tv = NULL;

	for (size_t i = 0; i < 256; i++) {
		bytes[i] = (char) i;
		piece[i] = &bytes[i];
		len[i] = 1;
	}
	for (size_t i = 0; i < ELEMENTSOF(multi); i++) {
		piece[256 + i] = multi[i];
		len[256 + i] = strlen(multi[i]);
	}
	if (grammar_vocab_new_pieces(piece, len, (uint32_t) n, &tv) < 0)
		return NULL;
	return tv;
}

TEST(mask_and_budget)
{
	_cleanup_(grammar_vocab_freep) struct grammar_vocab *tv = toy_vocab();
	_cleanup_(grammar_unrefp) struct grammar *g = NULL;
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	const char *gbnf = "root ::= \"{\" [a-z]* \"}\"";
	uint8_t allowed[512];
	struct errmsg e = {};

	ASSERT_NOT_NULL(tv);
	ASSERT_OK(grammar_parse(gbnf, strlen(gbnf), &g, &e));
	ASSERT_OK(matcher_new(g, tv, &m));
	{
		int64_t n = matcher_mask(m, UINT32_MAX, allowed);

		for (uint32_t i = 0; n != 1 && i < 276; i++)
			if (allowed[i])
				fprintf(stderr, "  allowed %u\n", i);
		ASSERT_EQ(n, 1);
	}
	ASSERT_TRUE(allowed['{']);
	ASSERT_OK(matcher_accept_token(m, '{'));
	ASSERT_EQ(matcher_min_bytes(m), 1u);
	/* a-z, "}", "abc", "true", "false", "null" */
	ASSERT_EQ(matcher_mask(m, UINT32_MAX, allowed), 31);
	/* one token left: only "}" closes in time */
	ASSERT_EQ(matcher_mask(m, 1, allowed), 1);
	ASSERT_TRUE(allowed['}']);
	/* two left: one letter then "}", or "}" now */
	ASSERT_EQ(matcher_mask(m, 2, allowed), 31); /* anything, then "}" */
	ASSERT_ERR(matcher_accept_token(m, '{'), -EINVAL);
	ASSERT_OK(matcher_accept_token(m, 256 + 4)); /* "true" */
	ASSERT_OK(matcher_accept_token(m, '}'));
	ASSERT_TRUE(matcher_done(m));

	/* a character split across tokens */
	const char *utf = "root ::= \"é\"+";
	_cleanup_(grammar_unrefp) struct grammar *g2 = NULL;
	_cleanup_(matcher_freep) struct matcher *m2 = NULL;

	ASSERT_OK(grammar_parse(utf, strlen(utf), &g2, &e));
	ASSERT_OK(matcher_new(g2, tv, &m2));
	ASSERT_EQ(matcher_mask(m2, UINT32_MAX, allowed), 3); /* 0xC3, "é", "\xc3" */
	ASSERT_OK(matcher_accept_token(m2, 0xC3));
	ASSERT_FALSE(matcher_accepting(m2));
	ASSERT_ERR(matcher_accept_token(m2, 'a'), -EINVAL);
	ASSERT_OK(matcher_accept_token(m2, 0xA9));
	ASSERT_TRUE(matcher_accepting(m2));
	ASSERT_FALSE(matcher_done(m2));
	return 0;
}

/* A state one matcher walked is a lookup for the next matcher of the same grammar and
 * vocabulary (the sequences of a batch that share a schema), and only for it: another grammar
 * whose states have the same shape walks its own. */
TEST(mask_walks_shared_between_matchers)
{
	_cleanup_(grammar_vocab_freep) struct grammar_vocab *tv = toy_vocab();
	_cleanup_(grammar_unrefp) struct grammar *g = NULL, *same = NULL, *other = NULL;
	_cleanup_(matcher_freep) struct matcher *a = NULL, *b = NULL, *c = NULL;
	const char *gbnf = "root ::= \"{\" [a-z]* \"}\"", *gbnf2 = "root ::= \"{\" [0-9]* \"}\"";
	uint8_t ma[512], mb[512], mc[512];
	uint64_t hits, misses;
	struct errmsg e = {};

	ASSERT_NOT_NULL(tv);
	ASSERT_OK(grammar_parse(gbnf, strlen(gbnf), &g, &e));
	ASSERT_OK(grammar_parse(gbnf, strlen(gbnf), &same, &e)); /* compiled twice: equal */
	ASSERT_OK(grammar_parse(gbnf2, strlen(gbnf2), &other, &e));
	ASSERT_OK(matcher_new(g, tv, &a));
	ASSERT_OK(matcher_new(same, tv, &b));
	ASSERT_OK(matcher_new(other, tv, &c));
	for (int i = 0; i < 3; i++) {
		ASSERT_OK(matcher_accept_token(i == 0 ? a : i == 1 ? b : c, '{'));
	}
	ASSERT_EQ(matcher_mask(a, UINT32_MAX, ma), 31);
	grammar_vocab_shared_stats(tv, &hits, &misses);
	ASSERT_EQ(hits, 0u);
	ASSERT_EQ(misses, 1u);
	ASSERT_EQ(matcher_mask(b, UINT32_MAX, mb), 31);
	grammar_vocab_shared_stats(tv, &hits, &misses);
	ASSERT_EQ(hits, 1u);
	ASSERT_TRUE(memcmp(ma, mb, 276) == 0);
	/* the budget still applies to a shared walk */
	ASSERT_EQ(matcher_mask(b, 1, mb), 1);
	ASSERT_TRUE(mb['}']);
	ASSERT_EQ(matcher_mask(c, UINT32_MAX, mc), 13); /* 0-9, "12", "000" and "}" */
	grammar_vocab_shared_stats(tv, &hits, &misses);
	ASSERT_EQ(hits, 1u);
	ASSERT_EQ(misses, 2u);
	ASSERT_TRUE(mc['5'] && !mc['a']);
	return 0;
}

/* ---- JSON Schema ---- */

static int compile(const char *schema_text, struct grammar **ret, struct errmsg *e)
{
	struct json_object *s = json_tokener_parse(schema_text);
	_cleanup_free_ char *gbnf = NULL;
	size_t len;
	int r;

	if (!s)
		return errmsg_set(e, -EINVAL, "bad test JSON");
	r = schema_to_gbnf(s, &gbnf, &len, e);
	json_object_put(s);
	if (r < 0)
		return r;
	r = grammar_parse(gbnf, len, ret, e);
	if (r < 0)
		fprintf(stderr, "  grammar of %s:\n%s\n", schema_text, gbnf);
	return r;
}

static bool schema_accepts(const char *schema, const char *doc)
{
	_cleanup_(grammar_unrefp) struct grammar *g = NULL;
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	struct errmsg e = {};

	if (compile(schema, &g, &e) < 0) {
		fprintf(stderr, "  %s: %s\n", schema, e.text);
		return false;
	}
	if (matcher_new(g, NULL, &m) < 0)
		return false;
	return matcher_accept_bytes(m, doc, strlen(doc)) == 0 && matcher_accepting(m);
}

static int schema_err(const char *schema, int want_r, const char *want)
{
	_cleanup_(grammar_unrefp) struct grammar *g = NULL;
	struct errmsg e = {};
	int r = compile(schema, &g, &e);

	if (r != want_r || !strstr(e.text, want)) {
		fprintf(stderr, "  %.80s: got %d '%s', want %d '%s'\n", schema, r, e.text, want_r,
			want);
		return 1;
	}
	return 0;
}

TEST(schema_keywords)
{
	const char *obj = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
			  "\"b\":{\"type\":\"string\",\"maxLength\":3},\"c\":{\"type\":\"boolean\"}},"
			  "\"required\":[\"b\"],\"additionalProperties\":false}";

	ASSERT_TRUE(schema_accepts(obj, "{\"b\":\"xyz\"}"));
	ASSERT_TRUE(schema_accepts(obj, "{\"a\": -12, \"b\": \"\", \"c\": true}"));
	ASSERT_TRUE(schema_accepts(obj, "{\"b\":\"x\",\"c\":false}"));
	ASSERT_FALSE(schema_accepts(obj, "{\"a\":1}"));         /* b is required */
	ASSERT_FALSE(schema_accepts(obj, "{\"b\":\"wxyz\"}"));  /* maxLength */
	ASSERT_FALSE(schema_accepts(obj, "{\"b\":\"x\",\"d\":1}"));
	ASSERT_TRUE(schema_accepts("{\"type\":\"array\",\"items\":{\"type\":\"null\"},"
				   "\"minItems\":1,\"maxItems\":2}", "[null, null]"));
	ASSERT_FALSE(schema_accepts("{\"type\":\"array\",\"items\":{\"type\":\"null\"},"
				    "\"minItems\":1,\"maxItems\":2}", "[]"));
	ASSERT_FALSE(schema_accepts("{\"type\":\"array\",\"items\":{\"type\":\"null\"},"
				    "\"minItems\":1,\"maxItems\":2}", "[null,null,null]"));
	ASSERT_TRUE(schema_accepts("{\"enum\":[\"red\",1.5,null,{\"x\":[1]}]}", "{\"x\":[1]}"));
	ASSERT_FALSE(schema_accepts("{\"enum\":[\"red\",1.5,null]}", "\"blue\""));
	ASSERT_TRUE(schema_accepts("{\"const\":\"a\\\"b\"}", "\"a\\\"b\""));
	ASSERT_TRUE(schema_accepts("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"number\"}]}",
				   "-1.5e3"));
	ASSERT_TRUE(schema_accepts("{\"type\":[\"string\",\"null\"]}", "null"));
	ASSERT_TRUE(schema_accepts("{\"type\":\"string\",\"minLength\":2}", "\"é\\n\""));
	ASSERT_FALSE(schema_accepts("{\"type\":\"string\",\"minLength\":2}", "\"é\""));
	ASSERT_FALSE(schema_accepts("{\"type\":\"string\"}", "\"\\ud800\""));
	ASSERT_TRUE(schema_accepts("{\"$defs\":{\"p\":{\"type\":\"integer\",\"minimum\":1}},"
				   "\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/p\"}}", "[1,2,30]"));
	ASSERT_FALSE(schema_accepts("{\"$defs\":{\"p\":{\"type\":\"integer\",\"minimum\":1}},"
				    "\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/p\"}}", "[0]"));
	ASSERT_TRUE(schema_accepts("{\"type\":\"object\"}", "{\"any\": [1, {\"x\": null}]}"));
	ASSERT_TRUE(schema_accepts("{}", "\"anything\""));

	/* the cached compile gives the same grammar, from the cache the second time */
	{
		struct json_object *sch = json_tokener_parse("{\"type\":\"array\",\"items\":{}}");
		_cleanup_free_ char *a = NULL, *b = NULL, *c = NULL;
		struct errmsg e = {};
		size_t la, lb, lc;

		ASSERT_OK(schema_to_gbnf(sch, &a, &la, &e));
		ASSERT_OK(schema_to_gbnf_cached(sch, &b, &lb, &e));
		ASSERT_OK(schema_to_gbnf_cached(sch, &c, &lc, &e));
		ASSERT_TRUE(la == lb && lb == lc && !memcmp(a, b, la) && !memcmp(b, c, lb));
		json_object_put(sch);
	}

	/* integer ranges: every value inside, none outside */
	static const struct {
		const char *schema;
		int lo, hi;
	} ranges[] = {
		{ "{\"type\":\"integer\",\"minimum\":-37,\"maximum\":1234}", -37, 1234 },
		{ "{\"type\":\"integer\",\"minimum\":7,\"maximum\":7}", 7, 7 },
		{ "{\"type\":\"integer\",\"minimum\":-500,\"maximum\":-12}", -500, -12 },
		{ "{\"type\":\"integer\",\"minimum\":95}", 95, 20000 },
		{ "{\"type\":\"integer\",\"maximum\":-3}", -20000, -3 },
		{ "{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":10}", -2, 10 },
	};
	for (size_t i = 0; i < ELEMENTSOF(ranges); i++) {
		_cleanup_(grammar_unrefp) struct grammar *g = NULL;
		struct errmsg e = {};

		ASSERT_OK(compile(ranges[i].schema, &g, &e));
		for (int x = -2100; x <= 2100; x++) {
			_cleanup_(matcher_freep) struct matcher *m = NULL;
			char buf[32];
			bool in = x >= ranges[i].lo && x <= ranges[i].hi, got;

			snprintf(buf, sizeof(buf), "%d", x);
			ASSERT_OK(matcher_new(g, NULL, &m));
			got = matcher_accept_bytes(m, buf, strlen(buf)) == 0 && matcher_accepting(m);
			if (got != in)
				fprintf(stderr, "  %s: %d %s\n", ranges[i].schema, x, got ? "taken" : "refused");
			ASSERT_EQ(got, in);
		}
	}
	ASSERT_TRUE(schema_accepts("{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":10}", "9.75"));
	ASSERT_TRUE(schema_accepts("{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":10}", "-1.5"));
	ASSERT_FALSE(schema_accepts("{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":10}", "10.5"));
	return 0;
}

TEST(schema_refusals_and_hostile)
{
	char *deep, *big;
	size_t n;

	ASSERT_EQ(schema_err("{\"type\":\"string\",\"pattern\":\"a+\"}", -EINVAL,
			     "unsupported JSON Schema keyword 'pattern' at '#'"), 0);
	ASSERT_EQ(schema_err("{\"type\":\"object\",\"properties\":{\"x\":{\"format\":\"date\"}}}",
			     -EINVAL, "'format' at '#/properties/x'"), 0);
	ASSERT_EQ(schema_err("{\"oneOf\":[{}]}", -EINVAL, "'oneOf'"), 0);
	ASSERT_EQ(schema_err("{\"type\":\"strin\"}", -EINVAL, "unknown type 'strin'"), 0);
	ASSERT_EQ(schema_err("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"type\":\"array\","
			     "\"items\":{\"$ref\":\"#/$defs/a\"}}},\"$ref\":\"#/$defs/a\"}",
			     -EINVAL, "'$ref' loop"), 0);
	ASSERT_EQ(schema_err("{\"$ref\":\"#/$defs/none\"}", -EINVAL, "points to nothing"), 0);
	ASSERT_EQ(schema_err("{\"$ref\":\"http://x/y\"}", -EINVAL, "only"), 0);
	ASSERT_EQ(schema_err("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", -EINVAL,
			     "no integer"), 0);

	/* 10,000 levels of nesting: refused at SCHEMA_MAX_DEPTH, quickly */
	n = 10000;
	deep = malloc(n * 40 + 64);
	ASSERT_NOT_NULL(deep);
	deep[0] = '\0';
	for (size_t i = 0; i < n; i++)
		strcat(deep + (i ? strlen(deep) : 0), "{\"type\":\"array\",\"items\":");
	strcat(deep, "{}");
	for (size_t i = 0; i < n; i++)
		strcat(deep + strlen(deep), "}");
	{
		struct json_tokener *tok = json_tokener_new_ex(n + 10);
		struct json_object *s = json_tokener_parse_ex(tok, deep, (int) strlen(deep));
		_cleanup_free_ char *gbnf = NULL;
		struct errmsg e = {};
		size_t len;

		ASSERT_NOT_NULL(s);
		ASSERT_ERR(schema_to_gbnf(s, &gbnf, &len, &e), -E2BIG);
		ASSERT_NOT_NULL(strstr(e.text, "nested deeper"));
		json_object_put(s);
		json_tokener_free(tok);
	}
	free(deep);

	/* a 100,000-value enum */
	big = malloc(100000 * 12 + 32);
	ASSERT_NOT_NULL(big);
	strcpy(big, "{\"enum\":[");
	for (size_t i = 0, at = strlen(big); i < 100000; i++)
		at += (size_t) sprintf(big + at, "%s%zu", i ? "," : "", i);
	strcat(big, "]}");
	ASSERT_EQ(schema_err(big, -E2BIG, "at most 1024"), 0);
	free(big);

	/* exponential $ref fan-out: each level refers to the previous twice */
	{
		char buf[8192];
		size_t at = (size_t) sprintf(buf, "{\"$defs\":{\"d0\":{\"type\":\"string\"}");

		for (int i = 1; i < 10; i++)
			at += (size_t) sprintf(buf + at, ",\"d%d\":{\"type\":\"array\",\"items\":{\"anyOf\":"
							 "[{\"$ref\":\"#/$defs/d%d\"},{\"$ref\":\"#/$defs/d%d\"}]}}",
					       i, i - 1, i - 1);
		sprintf(buf + at, "},\"$ref\":\"#/$defs/d9\"}");
		/* compiled once per definition: fine, and small */
		_cleanup_(grammar_unrefp) struct grammar *g = NULL;
		struct errmsg e = {};

		ASSERT_OK(compile(buf, &g, &e));
	}
	/* huge repetition counts are lowered, not expanded without bound */
	ASSERT_TRUE(schema_accepts("{\"type\":\"string\",\"maxLength\":1000000000}", "\"ok\""));
	ASSERT_EQ(schema_err("{\"type\":\"string\",\"minLength\":1000000000}", -E2BIG, "minLength"), 0);
	ASSERT_EQ(schema_err("{\"type\":\"array\",\"minItems\":100000}", -E2BIG, "minItems"), 0);
	return 0;
}

/* ---- random schemas ---- */

static void rand_schema(struct json_object **ret, int depth);

static int rnd(int n)
{
	return (int) (test_uniform() * n);
}

static void rand_schema(struct json_object **ret, int depth)
{
	struct json_object *s = json_object_new_object();
	int kind = rnd(depth > 2 ? 6 : 9);

	switch (kind) {
	case 0: {
		json_object_object_add(s, "type", json_object_new_string("string"));
		if (rnd(2))
			json_object_object_add(s, "minLength", json_object_new_int(rnd(3)));
		if (rnd(2))
			json_object_object_add(s, "maxLength", json_object_new_int(3 + rnd(5)));
		break;
	}
	case 1: {
		int lo = rnd(200) - 100;

		json_object_object_add(s, "type", json_object_new_string(rnd(2) ? "integer" : "number"));
		if (rnd(2))
			json_object_object_add(s, "minimum", json_object_new_int(lo));
		if (rnd(2))
			json_object_object_add(s, "maximum", json_object_new_int(lo + 1 + rnd(5000)));
		break;
	}
	case 2:
		json_object_object_add(s, "type", json_object_new_string(rnd(2) ? "boolean" : "null"));
		break;
	case 3: {
		struct json_object *e = json_object_new_array();

		for (int i = 0, n = 1 + rnd(4); i < n; i++)
			json_object_array_add(e, rnd(2) ? json_object_new_int(rnd(100))
							 : json_object_new_string(i % 2 ? "x y" : "é\"q"));
		json_object_object_add(s, "enum", e);
		break;
	}
	case 4:
		json_object_object_add(s, "const", json_object_new_string("fixed"));
		break;
	case 5:
		json_object_object_add(s, "type", json_object_new_array());
		json_object_array_add(json_object_object_get(s, "type"), json_object_new_string("string"));
		json_object_array_add(json_object_object_get(s, "type"), json_object_new_string("null"));
		break;
	case 6: {
		struct json_object *props = json_object_new_object(), *req = json_object_new_array();

		json_object_object_add(s, "type", json_object_new_string("object"));
		for (int i = 0, n = 1 + rnd(4); i < n; i++) {
			char name[16];
			struct json_object *sub;

			snprintf(name, sizeof(name), "k%d", i);
			rand_schema(&sub, depth + 1);
			json_object_object_add(props, name, sub);
			if (rnd(2))
				json_object_array_add(req, json_object_new_string(name));
		}
		json_object_object_add(s, "properties", props);
		json_object_object_add(s, "required", req);
		json_object_object_add(s, "additionalProperties", json_object_new_boolean(0));
		break;
	}
	case 7: {
		struct json_object *sub;

		json_object_object_add(s, "type", json_object_new_string("array"));
		rand_schema(&sub, depth + 1);
		json_object_object_add(s, "items", sub);
		if (rnd(2))
			json_object_object_add(s, "minItems", json_object_new_int(rnd(2)));
		if (rnd(2))
			json_object_object_add(s, "maxItems", json_object_new_int(1 + rnd(3)));
		break;
	}
	default: {
		struct json_object *a = json_object_new_array(), *x, *y;

		rand_schema(&x, depth + 1);
		rand_schema(&y, depth + 1);
		json_object_array_add(a, x);
		json_object_array_add(a, y);
		json_object_object_add(s, "anyOf", a);
		break;
	}
	}
	*ret = s;
}

/* Random walks through the mask on the toy vocabulary. */
TEST(property_toy_vocab)
{
	_cleanup_(grammar_vocab_freep) struct grammar_vocab *tv = toy_vocab();
	uint32_t n_tokens = grammar_vocab_n_tokens(tv);
	uint8_t *allowed = malloc(n_tokens);
	int n_stop = 0, n_length = 0;

	ASSERT_NOT_NULL(allowed);
	for (int seed = 0; seed < 300; seed++) {
		struct json_object *schema;
		_cleanup_free_ char *gbnf = NULL;
		_cleanup_(grammar_unrefp) struct grammar *g = NULL;
		_cleanup_(matcher_freep) struct matcher *m = NULL;
		struct errmsg e = {};
		char out[4096];
		size_t len = 0, gl;
		uint32_t budget, min_bytes;
		bool stop = false;

		test_rng_state = (uint64_t) seed * 7919;
		rand_schema(&schema, 0);
		budget = 8 + (uint32_t) rnd(120);
		ASSERT_OK(schema_to_gbnf(schema, &gbnf, &gl, &e));
		if (grammar_parse(gbnf, gl, &g, &e) < 0) {
			fprintf(stderr, "  %s\n%s\n", e.text, gbnf);
			return 1;
		}
		ASSERT_OK(matcher_new(g, tv, &m));
		min_bytes = matcher_min_bytes(m);
		for (uint32_t t = 0; t < budget; t++) {
			int64_t n = matcher_mask(m, budget - t, allowed);
			uint32_t pick, id = 0;

			ASSERT_TRUE(n >= 0);
			/* stop on an "end" token with some probability where complete */
			if (matcher_accepting(m) && (n == 0 || rnd(4) == 0)) {
				stop = true;
				break;
			}
			if (n == 0)
				break;
			pick = (uint32_t) rnd((int) n);
			for (id = 0; id < n_tokens; id++)
				if (allowed[id] && pick-- == 0)
					break;
			ASSERT_OK(matcher_accept_token(m, (int32_t) id));
			if (id < 256)
				out[len++] = (char) id;
			else {
				static const char *multi[] = { "{\"", "\":", "\",", "\"}", "true", "false",
							       "null", "12", "000", "abc", " \"", "é",
							       "\xc3", "\xa9", "},", "]}", "[\"", ", \"",
							       "\": \"", "\"]" };
				size_t l = strlen(multi[id - 256]);

				memcpy(out + len, multi[id - 256], l);
				len += l;
			}
			if (matcher_done(m)) {
				stop = true;
				break;
			}
		}
		if (!stop && matcher_accepting(m))
			stop = true; /* whole at the end of the budget: a stop (docs/http.md) */
		if (stop) {
			n_stop++;
			ASSERT_TRUE(parses_and_validates(schema, out, len));
		} else {
			/* every byte is a token: only a budget below the shortest document fails */
			n_length++;
			if (min_bytes <= budget)
				fprintf(stderr, "  unfinished (%u bytes, budget %u, %u to go): %.*s\n  %s\n",
					min_bytes, budget, matcher_min_bytes(m), (int) len, out,
					json_object_to_json_string(schema));
			ASSERT_TRUE(min_bytes > budget);
			ASSERT_TRUE(len > 0 || budget == 0);
		}
		json_object_put(schema);
	}
	free(allowed);
	printf("  %d stop (all valid), %d length (budget below the shortest document)\n", n_stop,
	       n_length);
	return 0;
}

/* ---- through the scheduler on a random-weight model ---- */

struct row {
	char text[8192];
	size_t len;
	bool done;
	enum sched_finish finish;
	int error;
};

static void on_event(const struct sched_event *ev, void *userdata)
{
	struct row *r = userdata;

	if (ev->type == SCHED_EVENT_TOKEN) {
		if (r->len + ev->text_len < sizeof(r->text)) {
			memcpy(r->text + r->len, ev->text, ev->text_len);
			r->len += ev->text_len;
		}
	} else {
		r->done = true;
		r->finish = ev->finish;
		r->error = ev->type == SCHED_EVENT_ERROR ? ev->error : 0;
	}
}

TEST(property_random_model)
{
	char path[4096];
	struct model *m = NULL;
	struct errmsg e = {};
	int n_stop = 0, n_length = 0, n_free = 0;
	uint64_t n_tokens = 0, n_masks = 0;

	snprintf(path, sizeof(path), "%s/models/tiny/tiny-llama-q8_0.gguf", MOLLY_SHARED_DIR);
	if (access(path, R_OK) != 0) {
		fprintf(stderr, "  %s is missing\n", path);
		return TEST_SKIP;
	}
	ASSERT_OK(model_load(path, &m, &e));
	for (int round = 0; round < 12; round++) {
		_cleanup_(sched_freep) struct sched *s = NULL;
		struct sched_params sp = { .max_sequences = 8, .n_threads = 2 };
		struct json_object *schemas[8];
		struct grammar *grammars[8];
		static struct row rows[8];
		uint32_t max_tokens[8];
		int32_t prompt[8];
		int64_t np;

		ASSERT_OK(sched_new(m, &sp, &s, &e));
		np = vocab_tokenize(m->vocab, "Once", 4, true, false, prompt, 8);
		ASSERT_TRUE(np > 0);
		for (int i = 0; i < 8; i++) {
			struct sched_request req = { .prompt = prompt, .n_prompt = (size_t) np,
						     .on_event = on_event, .userdata = &rows[i] };
			_cleanup_free_ char *gbnf = NULL;
			size_t gl;
			uint64_t id;

			memset(&rows[i], 0, sizeof(rows[i]));
			test_rng_state = (uint64_t) (round * 8 + i) * 104729 + 1;
			rand_schema(&schemas[i], 0);
			grammars[i] = NULL;
			ASSERT_OK(schema_to_gbnf(schemas[i], &gbnf, &gl, &e));
			ASSERT_OK(grammar_parse(gbnf, gl, &grammars[i], &e));
			sampler_params_default(&req.sampling);
			req.sampling.temperature = (float) (round % 4) * 0.5f; /* 0 (greedy) .. 1.5 */
			req.sampling.seed = (uint64_t) (round * 8 + i);
			if (round % 2) {
				/* untruncated sampling: the draw-then-check path of the scheduler */
				req.sampling.top_k = 0;
				req.sampling.top_p = 1;
				req.sampling.min_p = 0;
			}
			req.max_tokens = max_tokens[i] = 16 + (uint32_t) rnd(100);
			/* every fourth row free: constrained and free rows in one batch */
			req.grammar = i % 4 == 3 ? NULL : grammars[i];
			ASSERT_OK(sched_submit(s, &req, &id, &e));
		}
		while (sched_step(s) > 0)
			;
		{
			struct sched_stats st;

			sched_get_stats(s, &st);
			n_tokens += st.grammar_tokens;
			n_masks += st.grammar_masks;
		}
		for (int i = 0; i < 8; i++) {
			ASSERT_TRUE(rows[i].done);
			ASSERT_EQ(rows[i].error, 0);
			if (i % 4 == 3) {
				n_free++;
			} else if (rows[i].finish == SCHED_FINISH_STOP) {
				n_stop++;
				ASSERT_TRUE(parses_and_validates(schemas[i], rows[i].text, rows[i].len));
			} else {
				/* a valid prefix */
				_cleanup_(matcher_freep) struct matcher *mt = NULL;

				n_length++;
				ASSERT_OK(matcher_new(grammars[i], NULL, &mt));
				/* only when even the shortest document is longer than the budget */
				if (matcher_min_bytes(mt) <= max_tokens[i])
					fprintf(stderr, "  length within reach (%u bytes, %u tokens): '%.*s'\n",
						matcher_min_bytes(mt), max_tokens[i], (int) rows[i].len,
						rows[i].text);
				ASSERT_TRUE(matcher_min_bytes(mt) > max_tokens[i]);
				ASSERT_OK(matcher_accept_bytes(mt, rows[i].text, rows[i].len));
			}
			grammar_unref(grammars[i]);
			json_object_put(schemas[i]);
		}
	}
	printf("  %d stop (all valid), %d length (valid prefixes, budget below the shortest "
	       "document), %d free rows; %llu constrained tokens, %llu whole masks\n", n_stop,
	       n_length, n_free, (unsigned long long) n_tokens, (unsigned long long) n_masks);
	ASSERT_TRUE(n_masks < n_tokens); /* some draws were kept without the mask */
	model_free(m);
	return 0;
}

/* Constrained and free rows in one batch, on LoRA adapters: a free row's tokens are the same
 * whether constrained rows share its steps or not, and constrained rows on an adapter keep
 * their guarantee. */
struct ids_row {
	int32_t ids[256];
	uint32_t n;
	struct row text;
};

static void on_ids(const struct sched_event *ev, void *userdata)
{
	struct ids_row *r = userdata;

	if (ev->type == SCHED_EVENT_TOKEN && r->n < ELEMENTSOF(r->ids))
		r->ids[r->n++] = ev->token;
	on_event(ev, &r->text);
}

TEST(batch_with_adapters)
{
	static const char *schema_text = "{\"type\":\"object\",\"properties\":{\"who\":{\"type\":"
					 "\"string\",\"maxLength\":8},\"n\":{\"type\":\"integer\","
					 "\"minimum\":0,\"maximum\":99}},\"required\":[\"who\",\"n\"]}";
	char path[4096], apath[4096];
	struct model *m = NULL;
	struct lora_adapter *a = NULL;
	struct errmsg e = {};
	struct json_object *schema = json_tokener_parse(schema_text);
	_cleanup_free_ char *gbnf = NULL;
	_cleanup_(grammar_unrefp) struct grammar *g = NULL;
	static struct ids_row alone, rows[4];
	int32_t prompt[16];
	int64_t np;
	size_t gl;

	snprintf(path, sizeof(path), "%s/models/stories260K.gguf", MOLLY_SHARED_DIR);
	snprintf(apath, sizeof(apath), "%s/models/stories260K-lora-all-r8.gguf", MOLLY_SHARED_DIR);
	if (access(path, R_OK) != 0 || access(apath, R_OK) != 0) {
		fprintf(stderr, "  %s or %s is missing\n", path, apath);
		json_object_put(schema);
		return TEST_SKIP;
	}
	ASSERT_OK(schema_to_gbnf(schema, &gbnf, &gl, &e));
	ASSERT_OK(grammar_parse(gbnf, gl, &g, &e));
	ASSERT_OK(model_load(path, &m, &e));
	np = vocab_tokenize(m->vocab, "Once upon a time", 16, true, false, prompt, 16);
	ASSERT_TRUE(np > 0);
	for (int pass = 0; pass < 2; pass++) {
		_cleanup_(sched_freep) struct sched *s = NULL;
		struct sched_params sp = { .max_sequences = 8, .n_threads = 2 };
		struct sched_lora lora = { .name = "all", .scale = 1.0f };
		struct lora_open_opts o = { .base = m, .name = "all" };
		uint64_t id;

		ASSERT_OK(sched_new(m, &sp, &s, &e));
		ASSERT_OK(lora_adapter_open(apath, &o, &a, NULL, &e));
		ASSERT_OK(sched_add_adapter(s, a, &e));
		/* pass 0: the free row alone; pass 1: with three constrained rows (two on the
		 * adapter) */
		for (int i = 0; i < (pass ? 4 : 1); i++) {
			struct ids_row *r = pass ? &rows[i] : &alone;
			struct sched_request req = { .prompt = prompt, .n_prompt = (size_t) np,
						     .on_event = on_ids, .userdata = r,
						     .max_tokens = 48, .ignore_eos = i == 0 };

			memset(r, 0, sizeof(*r));
			sampler_params_default(&req.sampling);
			req.sampling.temperature = i == 0 ? 0.7f : 0.9f;
			req.sampling.seed = 11 + (uint64_t) i;
			req.loras = i != 2 ? &lora : NULL;
			req.n_loras = i != 2;
			req.grammar = i == 0 ? NULL : g;
			ASSERT_OK(sched_submit(s, &req, &id, &e));
		}
		while (sched_step(s) > 0)
			;
	}
	ASSERT_EQ(rows[0].n, alone.n);
	ASSERT_TRUE(memcmp(rows[0].ids, alone.ids, sizeof(int32_t) * alone.n) == 0);
	for (int i = 1; i < 4; i++) {
		ASSERT_TRUE(rows[i].text.done && rows[i].text.error == 0);
		if (rows[i].text.finish == SCHED_FINISH_STOP)
			ASSERT_TRUE(parses_and_validates(schema, rows[i].text.text, rows[i].text.len));
	}
	printf("  the free row's %u tokens are the same beside constrained rows\n", alone.n);
	json_object_put(schema);
	model_free(m);
	return 0;
}
