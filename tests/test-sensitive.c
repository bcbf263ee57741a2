/* SPDX-License-Identifier: MIT */
/*
 * test-sensitive: the special-category layer (daemon/policy/sensitive.h) and its place in
 * policy_evaluate(). The built-in model is measured on the hand-written held-out split of
 * tests/data/sensitive-corpus (never trained on) against issue 14's targets: special items
 * classed personal >= 0.90, hard negatives kept public >= 0.95; the issue's examples go
 * through the whole policy.
 */
#include "test.h"

#include "policy/policy.h"
#include "policy/sensitive.h"
#include "policy/vault.h"
#include "sensitive-corpus.h"

#define CORPUS_DIR MOLLY_SOURCE_DIR "/tests/data/sensitive-corpus/"

static int eval_file(const char *path, struct corpus_eval *e, bool verbose)
{
	struct corpus c = { 0 };
	int r = corpus_load(&c, path);

	if (r < 0) {
		fprintf(stderr, "  %s: %s\n", path, strerror(-r));
		return r;
	}
	corpus_evaluate(&c, NULL, e, verbose ? stderr : NULL);
	corpus_done(&c);
	return 0;
}

TEST(heldout_meets_targets)
{
	struct corpus_eval e;

	ASSERT_OK(eval_file(CORPUS_DIR "heldout.tsv", &e, true));
	corpus_print(&e, stderr);
	/* issue 14's targets, on sentences the model never saw */
	ASSERT_TRUE(ratio(e.personal[CORPUS_LANGS].hit, e.personal[CORPUS_LANGS].n) >= 0.90);
	ASSERT_TRUE(ratio(e.kept[CORPUS_LANGS].hit, e.kept[CORPUS_LANGS].n) >= 0.95);
	/* and no language far behind the others */
	for (int L = 0; L < CORPUS_LANGS; L++) {
		ASSERT_TRUE(ratio(e.personal[L].hit, e.personal[L].n) >= 0.85);
		ASSERT_TRUE(ratio(e.kept[L].hit, e.kept[L].n) >= 0.90);
	}
	/* the category named is mostly the right one */
	ASSERT_TRUE(ratio(e.cat_ok[CORPUS_LANGS].hit, e.cat_ok[CORPUS_LANGS].n) >= 0.80);
	return 0;
}

TEST(training_corpus_fits)
{
	struct corpus_eval g, h;

	ASSERT_OK(eval_file(CORPUS_DIR "generated.tsv", &g, false));
	ASSERT_OK(eval_file(CORPUS_DIR "handwritten-train.tsv", &h, false));
	fprintf(stderr, "  generated: personal %.3f, kept public %.3f; hand-written: %.3f, %.3f\n",
		ratio(g.personal[CORPUS_LANGS].hit, g.personal[CORPUS_LANGS].n),
		ratio(g.kept[CORPUS_LANGS].hit, g.kept[CORPUS_LANGS].n),
		ratio(h.personal[CORPUS_LANGS].hit, h.personal[CORPUS_LANGS].n),
		ratio(h.kept[CORPUS_LANGS].hit, h.kept[CORPUS_LANGS].n));
	ASSERT_TRUE(ratio(g.personal[CORPUS_LANGS].hit, g.personal[CORPUS_LANGS].n) >= 0.97);
	ASSERT_TRUE(ratio(g.kept[CORPUS_LANGS].hit, g.kept[CORPUS_LANGS].n) >= 0.97);
	ASSERT_TRUE(ratio(h.personal[CORPUS_LANGS].hit, h.personal[CORPUS_LANGS].n) >= 0.90);
	ASSERT_TRUE(ratio(h.kept[CORPUS_LANGS].hit, h.kept[CORPUS_LANGS].n) >= 0.90);
	return 0;
}

static int evaluate(const struct policy *p, const char *text, struct policy_decision *d)
{
	return policy_evaluate(p, &(struct policy_request){ .text = text, .len = strlen(text) }, d);
}

TEST(issue_examples)
{
	static const struct {
		const char *text, *kind;
	} personal[] = {
		{ "I am HIV positive and need advice on medication", "health" },
		{ "Sono omosessuale e i miei genitori non lo sanno", "sex_life" },
		{ "Vot\xc3\xa9 al PSOE en las \xc3\xbaltimas elecciones", "politics" },
	};
	static const char *const public[] = {
		"What are the symptoms of HIV?",
		"Explain the history of the PSOE",
		"Che cos'\xc3\xa8 il diabete di tipo 2?",
		"def parse(record): return record['diagnosis']",
		"Please summarise the attached meeting notes and list the action items.",
	};
	_cleanup_(policy_freep) struct policy *p = NULL;

	ASSERT_OK(policy_new_defaults(&p));
	for (size_t i = 0; i < ELEMENTSOF(personal); i++) {
		struct policy_decision d;
		bool found = false;

		ASSERT_OK(evaluate(p, personal[i].text, &d));
		for (size_t k = 0; k < d.n_findings; k++) {
			const struct policy_finding *f = &d.findings[k];
			if (strcmp(f->kind, personal[i].kind) != 0)
				continue;
			found = true;
			ASSERT_EQ(f->class, POLICY_CLASS_PERSONAL);
			ASSERT_TRUE(f->score >= SENSITIVE_THRESHOLD && f->score <= 1.0f);
			ASSERT_TRUE(strcmp(f->layer, "classifier") == 0 ||
				    strcmp(f->layer, "lexicon") == 0);
			ASSERT_TRUE(f->end > f->start && f->byte_end <= strlen(personal[i].text));
		}
		if (!found)
			TEST_FAIL_("no %s finding in '%s'", personal[i].kind, personal[i].text);
		ASSERT_EQ(d.class, POLICY_CLASS_PERSONAL);
		ASSERT_TRUE(d.special_score >= SENSITIVE_THRESHOLD);
		policy_decision_done(&d);
	}
	for (size_t i = 0; i < ELEMENTSOF(public); i++) {
		struct policy_decision d;

		ASSERT_OK(evaluate(p, public[i], &d));
		if (d.class != POLICY_CLASS_PUBLIC)
			TEST_FAIL_("'%s' classed %s (%s)", public[i], policy_class_name(d.class),
				   d.n_findings ? d.findings[0].kind : "-");
		ASSERT_TRUE(d.special_score < SENSITIVE_THRESHOLD);
		policy_decision_done(&d);
	}
	return 0;
}

TEST(detector_findings_carry_layer_and_score)
{
	_cleanup_(policy_freep) struct policy *p = NULL;
	struct policy_decision d;

	ASSERT_OK(policy_new_defaults(&p));
	ASSERT_OK(evaluate(p, "Mail anna@example.com please", &d));
	ASSERT_EQ(d.n_findings, 1);
	ASSERT_STREQ(d.findings[0].layer, "detector");
	ASSERT_TRUE(d.findings[0].score == 1.0f);
	policy_decision_done(&d);
	return 0;
}

/* For T3 (docs/policy.md, "A special-category request allowed to T3") the vault replaces the
 * identifying values and keeps the special-category statement, which is the question; the
 * answer's placeholders come back as the values. A document number found by the exact rule is
 * a value too. */
TEST(vault_round_trip)
{
	_cleanup_(policy_freep) struct policy *p = NULL;
	_cleanup_(vault_freep) struct vault *v = NULL;
	const char *text = "I am HIV positive and need advice on medication, write to "
			   "anna.rossi@example.com; my passport number is YA1234567";
	struct policy_decision d;
	char *red = NULL, *back = NULL;
	size_t n;
	bool health = false;

	ASSERT_OK(policy_new_defaults(&p));
	ASSERT_OK(vault_new(&v));
	ASSERT_OK(evaluate(p, text, &d));
	for (size_t i = 0; i < d.n_findings; i++)
		health |= strcmp(d.findings[i].kind, "health") == 0;
	ASSERT_TRUE(health);
	ASSERT_OK(vault_redact(v, text, strlen(text), d.findings, d.n_findings,
			       POLICY_CLASS_PERSONAL, &red, &n));
	ASSERT_STREQ(red, "I am HIV positive and need advice on medication, write to "
			  "\xe2\x9f\xa8" "EMAIL_1\xe2\x9f\xa9; my passport number is "
			  "\xe2\x9f\xa8" "GOV_ID_1\xe2\x9f\xa9");
	ASSERT_OK(vault_restore(v, red, n, &back, &n));
	ASSERT_STREQ(back, text);
	free(red);
	free(back);
	policy_decision_done(&d);
	return 0;
}

TEST(exact_rules)
{
	struct sensitive_result r;
	const char *t = "Sure. My passport number is YA7654321 and I was born on 3 March 1985.";
	const char *pub = "Albert Einstein was born on 14 March 1879 in Ulm.";

	sensitive_scan(t, strlen(t), &r);
	ASSERT_TRUE(r.n >= 2);
	bool id = false, birth = false;
	for (size_t i = 0; i < r.n; i++) {
		if (r.v[i].layer != SENSITIVE_LAYER_LEXICON)
			continue;
		if (r.v[i].category == SENSITIVE_GOV_ID) {
			id = true;
			ASSERT_TRUE(strncmp(t + r.v[i].start, "YA7654321", 9) == 0);
		}
		if (r.v[i].category == SENSITIVE_BIRTH_DATE) {
			birth = true;
			ASSERT_TRUE(strncmp(t + r.v[i].start, "3 March 1985", 12) == 0);
		}
	}
	ASSERT_TRUE(id && birth);
	ASSERT_TRUE(r.max_score == 1.0f);
	sensitive_scan(pub, strlen(pub), &r);
	ASSERT_EQ(r.n, 0);
	return 0;
}

/* Context carries one sentence: the person named in the first makes the second personal. */
TEST(findings_in_text_order_with_spans)
{
	const char *t = "Here are the meeting notes for Monday. The budget is fine.\n"
			"Also, my wife was diagnosed with breast cancer last month, so I'll be "
			"out on Friday. Thanks!";
	struct sensitive_result r;

	sensitive_scan(t, strlen(t), &r);
	ASSERT_TRUE(r.n >= 1);
	ASSERT_EQ(r.v[0].category, SENSITIVE_HEALTH);
	ASSERT_TRUE(r.v[0].start >= (size_t) (strstr(t, "Also") - t));
	ASSERT_TRUE(r.v[0].end <= (size_t) (strstr(t, "Thanks") - t));
	for (size_t i = 1; i < r.n; i++)
		ASSERT_TRUE(r.v[i].start >= r.v[i - 1].start);
	return 0;
}

TEST(any_bytes)
{
	char buf[4096];
	struct sensitive_result r;

	test_rng_state = 14;
	for (int it = 0; it < 200; it++) {
		size_t n = (size_t) (test_uniform() * sizeof(buf));
		for (size_t i = 0; i < n; i++)
			buf[i] = (char) (test_uniform() * 256);
		sensitive_scan(buf, n, &r);
		ASSERT_TRUE(r.n <= SENSITIVE_MAX_FINDINGS);
		for (size_t i = 0; i < r.n; i++)
			ASSERT_TRUE(r.v[i].start < r.v[i].end && r.v[i].end <= n);
		ASSERT_TRUE(r.max_score >= 0 && r.max_score <= 1);
	}
	sensitive_scan(NULL, 0, &r);
	ASSERT_EQ(r.n, 0);
	sensitive_scan("", 0, &r);
	ASSERT_EQ(r.n, 0);
	return 0;
}

TEST(category_names)
{
	enum sensitive_category c;

	for (int k = 0; k < SENSITIVE_CATEGORY_COUNT_; k++) {
		ASSERT_OK(sensitive_category_from_name(sensitive_category_name(k), &c));
		ASSERT_EQ((int) c, k);
	}
	ASSERT_ERR(sensitive_category_from_name("email", &c), -EINVAL);
	return 0;
}

