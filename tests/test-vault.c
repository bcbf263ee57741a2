/* SPDX-License-Identifier: MIT */
/*
 * test-vault: reversible redaction. A property test plants generated values in 10,000
 * requests: after redaction none survives in any normalised form (spaces and dashes removed,
 * case folded, JSON-unescaped), and answers that echo the placeholders (whole, split at
 * random chunk boundaries, with altered spacing and case) come back with the originals.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "policy/vault.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned) (rng % n);
}

static void digits(char *o, int n)
{
	for (int i = 0; i < n; i++)
		o[i] = (char) ('0' + rnd(10));
	o[n] = 0;
}

static void luhn_complete(char *d, int n)
{
	unsigned sum = 0;
	for (int k = 0; k < n - 1; k++) {
		unsigned v = (unsigned) (d[n - 2 - k] - '0');
		if (!(k & 1)) {
			v *= 2;
			if (v > 9)
				v -= 9;
		}
		sum += v;
	}
	d[n - 1] = (char) ('0' + (10 - sum % 10) % 10);
}

/* One planted value of a random kind into buf. */
static void plant(char *buf, size_t size)
{
	char d[32];
	static const char *const names[] = { "anna", "luca", "pepe", "jo", "maria" };
	static const char *const dni = "TRWAGMYFPDXBNJZSQVHLCKE";

	switch (rnd(8)) {
	case 0:
		snprintf(buf, size, "%s.%u@example.%s", names[rnd(5)], rnd(1000),
			 rnd(2) ? "com" : "it");
		break;
	case 1:
		digits(d, 7);
		snprintf(buf, size, "+39 34%c %.3s %.4s", d[0], d + 1, d + 3);
		break;
	case 2:
		d[0] = '4';
		digits(d + 1, 15);
		luhn_complete(d, 16);
		snprintf(buf, size, "%.4s %.4s %.4s %.4s", d, d + 4, d + 8, d + 12);
		break;
	case 3: {
		unsigned long n = 10000000ul + rnd(89999999);
		snprintf(buf, size, "%lu%c", n, dni[n % 23]);
		break;
	}
	case 4:
		snprintf(buf, size, "10.%u.%u.%u", rnd(256), rnd(256), 1 + rnd(254));
		break;
	case 5: {
		static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
		char k[41];
		for (int i = 0; i < 40; i++)
			k[i] = a[rnd(sizeof(a) - 1)];
		k[40] = 0;
		k[3] = '7';
		snprintf(buf, size, "sk-proj-%s", k);
		break;
	}
	case 6:
		/* US SSN: area 100..599, group 10..98, serial not 0000 */
		digits(d, 4);
		if (memcmp(d, "0000", 4) == 0)
			d[3] = '1';
		snprintf(buf, size, "%03u-%02u-%.4s", 100 + rnd(500), 10 + rnd(89), d);
		break;
	default:
		snprintf(buf, size, "Via Roma %u, 00184 Roma", 1 + rnd(200));
		break;
	}
}

/* Spaces and dashes removed, ASCII case folded, JSON escapes (\uXXXX ASCII, \") undone. */
static void normalise(const char *s, char *out, size_t size)
{
	size_t o = 0;

	for (size_t i = 0; s[i] && o + 1 < size; i++) {
		char c = s[i];
		if (c == '\\' && s[i + 1] == 'u' && strlen(s + i) >= 6) {
			char hex[5] = { s[i + 2], s[i + 3], s[i + 4], s[i + 5], 0 };
			c = (char) strtol(hex, NULL, 16);
			i += 5;
		} else if (c == '\\' && s[i + 1]) {
			c = s[++i];
		}
		if (c == ' ' || c == '-')
			continue;
		out[o++] = (char) (c >= 'A' && c <= 'Z' ? c + 32 : c);
	}
	out[o] = 0;
}

/* Rewrites every "⟨TYPE_N⟩" the way a remote model might. */
static void alter(const char *s, char *out, size_t size)
{
	size_t o = 0;

	while (*s && o + 32 < size) {
		if (strncmp(s, "\xe2\x9f\xa8", 3) == 0) {
			const char *end = strstr(s, "\xe2\x9f\xa9");
			const char *us = strrchr(s, '_');
			if (end && us && us < end) {
				int style = (int) rnd(4);
				o += (size_t) snprintf(out + o, size - o, "%s",
						       style == 0   ? "< "
						       : style == 1 ? "\xe2\x9f\xa8 "
						       : style == 2 ? "["
								    : "\xe3\x80\x88");
				for (const char *p = s + 3; p < us; p++)
					out[o++] = style == 1 && *p >= 'A' && *p <= 'Z' ? (char) (*p + 32)
						   : *p == '_' && style == 2			 ? ' '
												 : *p;
				out[o++] = style == 2 ? ' ' : '_';
				for (const char *p = us + 1; p < end; p++)
					out[o++] = *p;
				o += (size_t) snprintf(out + o, size - o, "%s",
						       style == 0   ? " >"
						       : style == 1 ? " \xe2\x9f\xa9"
						       : style == 2 ? "]"
								    : "\xe3\x80\x89");
				s = end + 3;
				continue;
			}
		}
		out[o++] = *s++;
	}
	out[o] = 0;
}

TEST(placeholders)
{
	_cleanup_(policy_freep) struct policy *p = NULL;
	_cleanup_(vault_freep) struct vault *v = NULL;
	struct policy_decision d;
	const char *text = "Mail anna@example.com and anna@example.com, IBAN DE89370400440532013000.";
	char *red = NULL, *back = NULL;
	size_t n;

	ASSERT_OK(policy_new_defaults(&p));
	ASSERT_OK(vault_new(&v));
	ASSERT_OK(policy_evaluate(p, &(struct policy_request){ .text = text, .len = strlen(text) },
				  &d));
	ASSERT_OK(vault_redact(v, text, strlen(text), d.findings, d.n_findings,
			       POLICY_CLASS_PERSONAL, &red, &n));
	ASSERT_STREQ(red, "Mail \xe2\x9f\xa8" "EMAIL_1\xe2\x9f\xa9 and \xe2\x9f\xa8" "EMAIL_1\xe2\x9f\xa9, "
			  "IBAN \xe2\x9f\xa8IBAN_1\xe2\x9f\xa9.");
	ASSERT_EQ(vault_size(v), 2);
	{
		const char *ans = "<email_1> ok \xe2\x9f\xa8 Email 1 \xe2\x9f\xa9 [IBAN-1] "
				  "\xe2\x9f\xa8" "EMAIL_7\xe2\x9f\xa9 <h1> \xe2\x9f\xa8PHONE_2\xe2\x9f\xa9";
		ASSERT_OK(vault_restore(v, ans, strlen(ans), &back, &n));
	}
	ASSERT_STREQ(back, "anna@example.com ok anna@example.com DE89370400440532013000 "
			   "\xe2\x9f\xa8" "EMAIL_7\xe2\x9f\xa9 <h1> \xe2\x9f\xa8PHONE_2\xe2\x9f\xa9");
	ASSERT_EQ(vault_n_unrestorable(v), 2);
	ASSERT_STREQ(vault_unrestorable(v, 0), "\xe2\x9f\xa8" "EMAIL_7\xe2\x9f\xa9");
	free(red);
	free(back);
	policy_decision_done(&d);
	return 0;
}

TEST(property)
{
	_cleanup_(policy_freep) struct policy *p = NULL;
	unsigned leaks = 0, wrong = 0;

	ASSERT_OK(policy_new_defaults(&p));
	for (int iter = 0; iter < 10000; iter++) {
		_cleanup_(vault_freep) struct vault *v = NULL;
		_cleanup_(vault_stream_freep) struct vault_stream *s = NULL;
		char planted[4][128], text[1024], norm[1024], pv[160], alt[2048];
		struct policy_decision d;
		char *red = NULL, *back = NULL, *streamed = NULL;
		size_t n_red = 0, o = 0, n_planted = 1 + rnd(4), sl = 0;
		static const char *const fill[] = { "Please check ", " and also ", "; then mail ",
						     " — gracias, ", "\n{\"v\":\"" };

		ASSERT_OK(vault_new(&v));
		for (size_t k = 0; k < n_planted; k++) {
			plant(planted[k], sizeof(planted[k]));
			o += (size_t) snprintf(text + o, sizeof(text) - o, "%s%s%s", fill[rnd(5)],
					       planted[k], rnd(2) ? "\"} " : " ok. ");
		}
		ASSERT_OK(policy_evaluate(p, &(struct policy_request){ .text = text, .len = o }, &d));
		ASSERT_OK(vault_redact(v, text, o, d.findings, d.n_findings, POLICY_CLASS_PERSONAL,
				       &red, &n_red));
		normalise(red, norm, sizeof(norm));
		for (size_t k = 0; k < n_planted; k++) {
			normalise(planted[k], pv, sizeof(pv));
			if (strstr(norm, pv)) {
				if (leaks++ < 5)
					fprintf(stderr, "  leak: %s -> %s\n", planted[k], red);
			}
		}
		/* echo, whole and altered, then streamed in random chunks */
		alter(red, alt, sizeof(alt));
		ASSERT_OK(vault_restore(v, alt, strlen(alt), &back, NULL));
		if (strcmp(back, text) != 0 && wrong++ < 5)
			fprintf(stderr, "  not restored:\n    %s\n    %s\n", alt, back);
		ASSERT_OK(vault_stream_new(v, &s));
		for (size_t pos = 0, len = strlen(alt); pos < len;) {
			size_t c = MIN((size_t) 1 + rnd(7), len - pos);
			char *out = NULL;
			size_t ol = 0;
			ASSERT_OK(vault_stream_feed(s, alt + pos, c, &out, &ol));
			streamed = realloc(streamed, sl + ol + 1);
			memcpy(streamed + sl, out, ol);
			sl += ol;
			free(out);
			pos += c;
		}
		{
			char *out = NULL;
			size_t ol = 0;
			ASSERT_OK(vault_stream_finish(s, &out, &ol));
			streamed = realloc(streamed, sl + ol + 1);
			memcpy(streamed + sl, out, ol);
			sl += ol;
			streamed[sl] = 0;
			free(out);
		}
		if (strcmp(streamed, text) != 0 && wrong++ < 5)
			fprintf(stderr, "  stream not restored:\n    %s\n    %s\n", alt, streamed);
		ASSERT_EQ(vault_n_unrestorable(v), 0);
		free(red);
		free(back);
		free(streamed);
		policy_decision_done(&d);
	}
	ASSERT_EQ(leaks, 0);
	ASSERT_EQ(wrong, 0);
	return 0;
}

TEST(stream_split_everywhere)
{
	_cleanup_(vault_freep) struct vault *v = NULL;
	struct policy_finding f = { .kind = "email", .byte_start = 0, .byte_end = 9,
				    .class = POLICY_CLASS_PERSONAL };
	char *red = NULL;
	const char *answer = "x \xe2\x9f\xa8 email_1 \xe2\x9f\xa9 y <EMAIL";

	ASSERT_OK(vault_new(&v));
	ASSERT_OK(vault_redact(v, "a@b.co.uk", 9, &f, 1, POLICY_CLASS_PERSONAL, &red, NULL));
	free(red);
	/* every split point of the answer, two chunks */
	for (size_t cut = 0; cut <= strlen(answer); cut++) {
		_cleanup_(vault_stream_freep) struct vault_stream *s = NULL;
		char *a = NULL, *b = NULL, *c = NULL, all[128];
		ASSERT_OK(vault_stream_new(v, &s));
		ASSERT_OK(vault_stream_feed(s, answer, cut, &a, NULL));
		ASSERT_OK(vault_stream_feed(s, answer + cut, strlen(answer) - cut, &b, NULL));
		ASSERT_OK(vault_stream_finish(s, &c, NULL));
		snprintf(all, sizeof(all), "%s%s%s", a, b, c);
		ASSERT_STREQ(all, "x a@b.co.uk y <EMAIL");
		free(a);
		free(b);
		free(c);
	}
	return 0;
}

#define PH(t) "\xe2\x9f\xa8" t "\xe2\x9f\xa9"

/* Kinds the other layers add (new credential detectors, anything with a span) get a placeholder
 * TYPE from their name, and it round-trips in the forms remote models write. */
TEST(any_kind_gets_a_placeholder)
{
	_cleanup_(vault_freep) struct vault *v = NULL;
	const char *text = "db postgres://u:pw@h/x pass 4711 pwd Zq9!kLm2 again Zq9!kLm2 id 12";
	/* spans: the connection string, the pin's value, the password's value (twice) */
	struct policy_finding f[] = {
		{ .kind = "connection_string", .byte_start = 3, .byte_end = 22,
		  .class = POLICY_CLASS_SECRET, .layer = POLICY_LAYER_DETECTOR, .score = 1 },
		{ .kind = "pin", .byte_start = 28, .byte_end = 32, .class = POLICY_CLASS_SECRET,
		  .layer = POLICY_LAYER_DETECTOR, .score = 1 },
		{ .kind = "password", .byte_start = 37, .byte_end = 45,
		  .class = POLICY_CLASS_SECRET, .layer = POLICY_LAYER_DETECTOR, .score = 1 },
		{ .kind = "password", .byte_start = 52, .byte_end = 60,
		  .class = POLICY_CLASS_SECRET, .layer = POLICY_LAYER_DETECTOR, .score = 1 },
		/* digits and odd bytes in a kind are dropped from the TYPE */
		{ .kind = "x9-doc.number", .byte_start = 64, .byte_end = 66,
		  .class = POLICY_CLASS_PERSONAL, .layer = POLICY_LAYER_DETECTOR, .score = 1 },
	};
	char *red = NULL, *back = NULL;
	size_t n;

	ASSERT_OK(vault_new(&v));
	ASSERT_OK(vault_redact(v, text, strlen(text), f, ELEMENTSOF(f), POLICY_CLASS_PUBLIC, &red,
			       &n));
	ASSERT_STREQ(red, "db " PH("CONNECTION_STRING_1") " pass " PH("PIN_1") " pwd "
			  PH("PASSWORD_1") " again " PH("PASSWORD_1") " id " PH("X_DOCNUMBER_1"));
	ASSERT_EQ(vault_size(v), 4);
	{
		const char *ans = "[connection string 1] <PIN_1> "
				  "\xe2\x9f\xa8 password-1 \xe2\x9f\xa9 "
				  "&lt;x_docnumber_1&gt; " PH("PASSWORD_2");
		ASSERT_OK(vault_restore(v, ans, strlen(ans), &back, &n));
	}
	ASSERT_STREQ(back, "postgres://u:pw@h/x 4711 Zq9!kLm2 12 " PH("PASSWORD_2"));
	ASSERT_EQ(vault_n_restored(v), 4);
	ASSERT_EQ(vault_n_unrestorable(v), 1);
	free(red);
	free(back);
	return 0;
}

/* A secret's span is its value: the words around it ("password is") stay, so the remote model
 * still reads what the value was. */
TEST(secret_span_is_the_value)
{
	_cleanup_(policy_freep) struct policy *p = NULL;
	_cleanup_(vault_freep) struct vault *v = NULL;
	const char *text = "the wifi password is Tr0ub4dor&3x, remember it";
	struct policy_decision d;
	char *red = NULL, *back = NULL;

	ASSERT_OK(policy_new_defaults(&p));
	ASSERT_OK(vault_new(&v));
	ASSERT_OK(policy_evaluate(p, &(struct policy_request){ .text = text, .len = strlen(text) },
				  &d));
	ASSERT_EQ(d.n_findings, 1);
	ASSERT_STREQ(d.findings[0].layer, POLICY_LAYER_DETECTOR);
	ASSERT_TRUE(d.findings[0].score == 1.0f);
	ASSERT_OK(vault_redact(v, text, strlen(text), d.findings, d.n_findings,
			       POLICY_CLASS_PUBLIC, &red, NULL));
	ASSERT_STREQ(red, "the wifi password is " PH("SECRET_1") ", remember it");
	ASSERT_OK(vault_restore(v, red, strlen(red), &back, NULL));
	ASSERT_STREQ(back, text);
	free(red);
	free(back);
	policy_decision_done(&d);
	return 0;
}

/*
 * A special-category request allowed to T3 (docs/policy.md): the identifying values (what the
 * detectors and user rules found) become placeholders; the special-category statement (the
 * lexicon's and classifier's spans) stays, since it is the question; the judge's finding has
 * no span. The answer gets the values back.
 */
TEST(special_category_keeps_the_statement)
{
	_cleanup_(vault_freep) struct vault *v = NULL;
	const char *text = "I am anna@example.com, +39 347 123 4567. I was diagnosed with HIV "
			   "last year: what should I ask my doctor?";
	const char *stmt = "I was diagnosed with HIV";
	size_t s_at = (size_t) (strstr(text, stmt) - text);
	struct policy_finding f[] = {
		{ .kind = "email", .byte_start = 5, .byte_end = 21, .class = POLICY_CLASS_PERSONAL,
		  .layer = POLICY_LAYER_DETECTOR, .score = 1 },
		{ .kind = "phone", .byte_start = 23, .byte_end = 39, .class = POLICY_CLASS_PERSONAL,
		  .layer = POLICY_LAYER_DETECTOR, .score = 1 },
		{ .kind = "health", .byte_start = s_at + 6, .byte_end = s_at + strlen(stmt),
		  .class = POLICY_CLASS_PERSONAL, .layer = POLICY_LAYER_LEXICON, .score = 1 },
		{ .kind = "health", .byte_start = 0, .byte_end = strlen(text),
		  .class = POLICY_CLASS_PERSONAL, .layer = POLICY_LAYER_CLASSIFIER,
		  .score = 0.93f },
		{ .kind = "judge", .class = POLICY_CLASS_PERSONAL, .layer = POLICY_LAYER_JUDGE,
		  .score = 1 },
	};
	const struct policy_finding id = { .kind = "gov_id", .byte_start = 3, .byte_end = 9,
					   .class = POLICY_CLASS_PERSONAL,
					   .layer = POLICY_LAYER_LEXICON, .score = 1 };
	char *red = NULL, *back = NULL;

	/* identifiers the special-category layer finds by exact rules are values */
	ASSERT_TRUE(policy_finding_redactable(&id));
	ASSERT_TRUE(policy_finding_redactable(&f[0]));
	ASSERT_TRUE(!policy_finding_redactable(&f[2]));
	ASSERT_TRUE(!policy_finding_redactable(&f[3]));
	ASSERT_TRUE(!policy_finding_redactable(&f[4]));
	ASSERT_OK(vault_new(&v));
	ASSERT_OK(vault_redact(v, text, strlen(text), f, ELEMENTSOF(f), POLICY_CLASS_PUBLIC, &red,
			       NULL));
	ASSERT_STREQ(red, "I am " PH("EMAIL_1") ", " PH("PHONE_1") ". I was diagnosed with HIV "
			  "last year: what should I ask my doctor?");
	{
		const char *ans = "Dear <EMAIL_1>: HIV care is routine; call " PH("PHONE_1") ".";
		ASSERT_OK(vault_restore(v, ans, strlen(ans), &back, NULL));
	}
	ASSERT_STREQ(back, "Dear anna@example.com: HIV care is routine; call +39 347 123 4567.");
	free(red);
	free(back);
	return 0;
}

/* A user rule's keyword is a value: it is redacted (REDACTED_N), also inside a statement. */
TEST(rule_spans_are_redacted)
{
	_cleanup_(policy_freep) struct policy *p = NULL;
	_cleanup_(vault_freep) struct vault *v = NULL;
	const char *text = "Is Zoloft safe with alcohol?";
	struct policy_decision d;
	struct errmsg e = { { 0 } };
	char *red = NULL;

	ASSERT_OK(policy_new_defaults(&p));
	ASSERT_OK(policy_add_rule(p, "drug", "keyword:zoloft", POLICY_CLASS_PERSONAL, NULL, &e));
	ASSERT_OK(policy_evaluate(p, &(struct policy_request){ .text = text, .len = strlen(text) },
				  &d));
	ASSERT_EQ(d.n_findings, 1);
	ASSERT_STREQ(d.findings[0].layer, POLICY_LAYER_RULE);
	ASSERT_OK(vault_new(&v));
	ASSERT_OK(vault_redact(v, text, strlen(text), d.findings, d.n_findings,
			       POLICY_CLASS_PUBLIC, &red, NULL));
	ASSERT_STREQ(red, "Is " PH("REDACTED_1") " safe with alcohol?");
	free(red);
	policy_decision_done(&d);
	return 0;
}

/* Every credential kind the detectors report round-trips through the vault: the value is
 * gone from what leaves, the key phrase stays, the answer gets the value back. */
TEST(credential_kinds_round_trip)
{
	static const struct {
		const char *text, *value, *redacted;
	} cases[] = {
		{ "my PIN is 4821, thanks", "4821", "my PIN is " PH("CODE_1") ", thanks" },
		{ "connect to postgres://admin:S3cr3t!pw@db.local:5432/app now", "S3cr3t!pw",
		  "connect to postgres://admin:" PH("URL_PASSWORD_1") "@db.local:5432/app now" },
		{ "DB_PASSWORD=Zq9!kLm2xx", "Zq9!kLm2xx", "DB_PASSWORD=" PH("SECRET_1") },
	};
	_cleanup_(policy_freep) struct policy *p = NULL;

	ASSERT_OK(policy_new_defaults(&p));
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		_cleanup_(vault_freep) struct vault *v = NULL;
		const char *t = cases[i].text;
		struct policy_decision d;
		char *red = NULL, *back = NULL;

		ASSERT_OK(vault_new(&v));
		ASSERT_OK(policy_evaluate(p, &(struct policy_request){ .text = t, .len = strlen(t) },
					  &d));
		ASSERT_EQ(d.class, POLICY_CLASS_SECRET);
		ASSERT_OK(vault_redact(v, t, strlen(t), d.findings, d.n_findings,
				       POLICY_CLASS_PUBLIC, &red, NULL));
		policy_decision_done(&d);
		if (strstr(red, cases[i].value) || strcmp(red, cases[i].redacted) != 0) {
			fprintf(stderr, "  '%s' -> '%s'\n", t, red);
			free(red);
			return 1;
		}
		ASSERT_OK(vault_restore(v, red, strlen(red), &back, NULL));
		ASSERT_STREQ(back, t);
		free(red);
		free(back);
	}
	return 0;
}
