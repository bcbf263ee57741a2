/* SPDX-License-Identifier: MIT */
/*
 * test-policy: classes, permitted tiers, [Policy]/[Rule NAME]/[Member NAME] MaxTiers=, user
 * rules, and the errors for malformed configuration (naming file and line).
 */
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "policy/policy.h"
#include "test.h"

static int load(const char *text, struct config **ret, struct errmsg *e)
{
	struct config *c = NULL;
	int r = config_new(&c);

	if (r < 0)
		return r;
	r = config_parse_text(c, text, strlen(text), "test.conf", e);
	if (r >= 0)
		r = config_verify(c, e);
	if (r < 0) {
		config_unref(c);
		return r;
	}
	*ret = c;
	return 0;
}

static int eval(const struct policy *p, const char *text, const struct policy_caller *caller,
		struct policy_decision *d)
{
	return policy_evaluate(p, &(struct policy_request){ .text = text, .len = strlen(text),
							    .caller = caller },
			       d);
}

TEST(tiers_parse)
{
	uint32_t t = 0;
	char buf[32];
	struct errmsg e = { { 0 } };

	ASSERT_OK(policy_tiers_parse("T0, t1 T3", &t, &e));
	ASSERT_EQ(t, POLICY_TIER(0) | POLICY_TIER(1) | POLICY_TIER(3));
	ASSERT_STREQ(policy_tiers_format(t, buf, sizeof(buf)), "T0,T1,T3");
	ASSERT_OK(policy_tiers_parse("", &t, &e));
	ASSERT_EQ(t, 0);
	ASSERT_ERR(policy_tiers_parse("T0,T4", &t, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "'T4'") != NULL);
	return 0;
}

TEST(defaults)
{
	_cleanup_(policy_freep) struct policy *p = NULL;
	struct policy_decision d;
	struct errmsg e = { { 0 } };

	ASSERT_OK(policy_new(NULL, &p, &e));
	ASSERT_OK(eval(p, "What is the capital of Spain?", NULL, &d));
	ASSERT_EQ(d.class, POLICY_CLASS_PUBLIC);
	ASSERT_EQ(d.permitted_tiers, POLICY_TIER(0) | POLICY_TIER(1));
	ASSERT_TRUE(policy_tier_allowed(&d, 1, false));
	ASSERT_TRUE(!policy_tier_allowed(&d, 2, true));
	policy_decision_done(&d);

	ASSERT_OK(eval(p, "mail me: ana@example.es", NULL, &d));
	ASSERT_EQ(d.class, POLICY_CLASS_PERSONAL);
	ASSERT_EQ(d.n_findings, 1);
	ASSERT_STREQ(d.findings[0].kind, "email");
	ASSERT_EQ(d.findings[0].start, 9);
	policy_decision_done(&d);

	ASSERT_OK(eval(p, "città è ana@example.es", NULL, &d)); /* character offsets */
	ASSERT_EQ(d.findings[0].start, 8);
	ASSERT_EQ(d.findings[0].byte_start, 10);
	ASSERT_EQ(d.findings[0].end, 22);
	policy_decision_done(&d);

	ASSERT_OK(eval(p, "deploy with AKIAIOSFODNN7EXAMPLE", NULL, &d));
	ASSERT_EQ(d.class, POLICY_CLASS_SECRET);
	ASSERT_EQ(d.permitted_tiers, POLICY_TIER(0));
	policy_decision_done(&d);

	/* a caller may declare a stricter class, never a looser one */
	ASSERT_OK(policy_evaluate(p, &(struct policy_request){ .text = "hi", .len = 2,
							     .declared = POLICY_CLASS_SECRET },
				  &d));
	ASSERT_EQ(d.class, POLICY_CLASS_SECRET);
	policy_decision_done(&d);
	ASSERT_OK(policy_evaluate(p, &(struct policy_request){ .text = "ana@example.es", .len = 14,
							     .declared = POLICY_CLASS_PUBLIC },
				  &d));
	ASSERT_EQ(d.class, POLICY_CLASS_PERSONAL);
	policy_decision_done(&d);
	return 0;
}

TEST(config_policy)
{
	_cleanup_(config_unrefp) struct config *c = NULL;
	_cleanup_(policy_freep) struct policy *p = NULL;
	struct errmsg e = { { 0 } };
	struct policy_decision d;
	struct policy_caller bob = { .uid = 1000, .member = "bob" };
	struct policy_caller eve = { .uid = 1001, .member = "eve", .app = "/usr/bin/leaky" };

	ASSERT_OK(load("[Policy]\n"
		       "PublicTiers=T0,T1,T2,T3\n"
		       "PersonalTiers=T0 T1 T2 T3\n"
		       "SecretTiers=T0\n"
		       "AllowExternal=yes\n"
		       "[Rule acme]\n"
		       "Match=regex:ACME-[0-9]{4}\n"
		       "Class=secret\n"
		       "[Rule project]\n"
		       "Match=keyword:Nightingale\n"
		       "Class=personal\n"
		       "[Rule bob-uid]\n"
		       "Match=uid:1000\n"
		       "Class=personal\n"
		       "[Rule leaky]\n"
		       "Match=app:leaky\n"
		       "Class=secret\n"
		       "[Rule hr]\n"
		       "Match=path:/srv/hr/*\n"
		       "Class=secret\n"
		       "[Member bob]\n"
		       "UIDs=1000\n"
		       "MaxTiers=T0,T1,T3\n"
		       "[Member eve]\n"
		       "UIDs=1001\n",
		       &c, &e));
	ASSERT_OK(policy_new(c, &p, &e));

	ASSERT_OK(eval(p, "weather in Rome", NULL, &d));
	ASSERT_EQ(d.permitted_tiers, POLICY_TIERS_ALL);
	ASSERT_TRUE(d.redact_for_t3);
	ASSERT_TRUE(policy_tier_allowed(&d, 2, true));
	ASSERT_TRUE(!policy_tier_allowed(&d, 2, false));
	ASSERT_TRUE(policy_tier_needs_redaction(&d, 3));
	policy_decision_done(&d);

	/* the uid rule makes bob's requests personal; MaxTiers= drops T2 */
	ASSERT_OK(eval(p, "weather in Rome", &bob, &d));
	ASSERT_EQ(d.class, POLICY_CLASS_PERSONAL);
	ASSERT_EQ(d.permitted_tiers, POLICY_TIER(0) | POLICY_TIER(1) | POLICY_TIER(3));
	ASSERT_STREQ(d.findings[0].rule, "bob-uid");
	ASSERT_EQ(d.findings[0].start, 0);
	ASSERT_EQ(d.findings[0].end, 0);
	policy_decision_done(&d);

	ASSERT_OK(eval(p, "the nightingale budget for ACME-1234", NULL, &d));
	ASSERT_EQ(d.class, POLICY_CLASS_SECRET);
	ASSERT_EQ(d.n_findings, 2);
	ASSERT_STREQ(d.findings[0].rule, "project");
	ASSERT_EQ(d.findings[0].start, 4);
	ASSERT_EQ(d.findings[0].end, 15);
	ASSERT_STREQ(d.findings[1].rule, "acme");
	ASSERT_STREQ(d.findings[1].kind, "rule");
	ASSERT_EQ(d.permitted_tiers, POLICY_TIER(0));
	policy_decision_done(&d);

	ASSERT_OK(eval(p, "hi", &eve, &d));
	ASSERT_EQ(d.class, POLICY_CLASS_SECRET);
	policy_decision_done(&d);

	{
		const char *paths[] = { "/home/x/notes.txt", "/srv/hr/salaries.csv" };
		ASSERT_OK(policy_evaluate(p, &(struct policy_request){ .text = "sum it", .len = 6,
								     .paths = paths, .n_paths = 2 },
					  &d));
		ASSERT_EQ(d.class, POLICY_CLASS_SECRET);
		policy_decision_done(&d);
	}
	return 0;
}

/* Findings say which layer fired and how sure it is: detectors and rules are exact (1). */
TEST(layers_and_scores)
{
	_cleanup_(policy_freep) struct policy *p = NULL;
	struct policy_decision d;
	struct errmsg e = { { 0 } };

	ASSERT_OK(policy_new_defaults(&p));
	ASSERT_OK(policy_add_rule(p, "proj", "keyword:bluebird", POLICY_CLASS_PERSONAL, NULL, &e));
	ASSERT_OK(policy_add_rule(p, "me", "uid:1000", POLICY_CLASS_PERSONAL, NULL, &e));
	ASSERT_OK(policy_evaluate(p, &(struct policy_request){
					     .text = "bluebird: ana@example.es",
					     .len = 24,
					     .caller = &(struct policy_caller){ .uid = 1000 } },
				  &d));
	ASSERT_EQ(d.n_findings, 3);
	for (size_t i = 0; i < d.n_findings; i++) {
		const struct policy_finding *f = &d.findings[i];
		ASSERT_TRUE(f->score == 1.0f);
		ASSERT_STREQ(f->layer, strcmp(f->kind, "rule") == 0 ? POLICY_LAYER_RULE
								   : POLICY_LAYER_DETECTOR);
		/* a caller rule has no span: nothing to redact */
		ASSERT_TRUE(policy_finding_redactable(f) == (f->byte_end > f->byte_start));
	}
	/* a probability (the special-category layer may score the sentence) */
	ASSERT_TRUE(d.special_score >= 0 && d.special_score <= 1);
	policy_decision_done(&d);
	return 0;
}

/* policy_decision_add (the judge's finding): only ever stricter, tiers follow the class. */
TEST(decision_add)
{
	_cleanup_(config_unrefp) struct config *c = NULL;
	_cleanup_(policy_freep) struct policy *p = NULL;
	struct policy_decision d;
	struct errmsg e = { { 0 } };
	const struct policy_finding judge = { .kind = "judge", .rule = "judge",
					      .class = POLICY_CLASS_PERSONAL, .score = 1,
					      .layer = POLICY_LAYER_JUDGE };

	ASSERT_OK(config_new(&c));
	c->policy_tiers[POLICY_CLASS_PUBLIC] = POLICY_TIERS_ALL;
	c->policy_tiers[POLICY_CLASS_PERSONAL] = POLICY_TIER(0) | POLICY_TIER(1);
	c->policy_allow_external = true;
	ASSERT_OK(policy_new(c, &p, &e));
	ASSERT_OK(eval(p, "How do vaccines work?", NULL, &d));
	ASSERT_EQ(d.class, POLICY_CLASS_PUBLIC);
	ASSERT_TRUE(d.redact_for_t3);
	ASSERT_OK(policy_decision_add(p, NULL, &d, &judge));
	ASSERT_EQ(d.class, POLICY_CLASS_PERSONAL);
	ASSERT_EQ(d.permitted_tiers, POLICY_TIER(0) | POLICY_TIER(1));
	ASSERT_TRUE(!d.redact_for_t3);
	ASSERT_EQ(d.n_findings, 1);
	ASSERT_STREQ(d.findings[0].layer, POLICY_LAYER_JUDGE);
	ASSERT_TRUE(!policy_finding_redactable(&d.findings[0]));
	policy_decision_done(&d);
	/* a secret request stays secret */
	ASSERT_OK(eval(p, "deploy with AKIAIOSFODNN7EXAMPLE", NULL, &d));
	ASSERT_OK(policy_decision_add(p, NULL, &d, &judge));
	ASSERT_EQ(d.class, POLICY_CLASS_SECRET);
	ASSERT_EQ(d.permitted_tiers, POLICY_TIER(0));
	policy_decision_done(&d);
	return 0;
}

TEST(no_external)
{
	_cleanup_(config_unrefp) struct config *c = NULL;
	_cleanup_(policy_freep) struct policy *p = NULL;
	struct errmsg e = { { 0 } };
	struct policy_decision d;

	/* T3 listed but AllowExternal= not set: no T3 */
	ASSERT_OK(load("[Policy]\nPublicTiers=T0,T3\n", &c, &e));
	ASSERT_OK(policy_new(c, &p, &e));
	ASSERT_OK(eval(p, "hello", NULL, &d));
	ASSERT_EQ(d.permitted_tiers, POLICY_TIER(0));
	ASSERT_TRUE(!d.redact_for_t3);
	ASSERT_TRUE(!policy_tier_allowed(&d, 3, true));
	policy_decision_done(&d);
	return 0;
}

TEST(errors)
{
	static const struct {
		const char *text;
		const char *want; /* a substring of the message */
	} bad[] = {
		{ "[Policy]\nPublicTiers=T0,T9\n", "test.conf:2: [Policy] PublicTiers=: 'T9'" },
		{ "[Policy]\nAllowExternal=maybe\n", "test.conf:2:" },
		{ "[Policy]\nSecretTier=T0\n", "test.conf:2: unknown key 'SecretTier'" },
		{ "[Rule r]\nMatch=regex:(unclosed\nClass=secret\n", "test.conf:2: [Rule r] Match=" },
		{ "[Rule r]\nMatch=regex:(unclosed\n", "missing closing parenthesis" },
		{ "[Rule r]\nMatch=colour:red\n", "test.conf:2: [Rule r] Match=: unknown match kind" },
		{ "[Rule r]\nMatch=nocolon\n", "test.conf:2:" },
		{ "[Rule r]\nMatch=uid:bob\n", "test.conf:2:" },
		{ "[Rule r]\nMatch=keyword:x\nClass=top-secret\n",
		  "test.conf:3: [Rule r] Class=: 'top-secret' is not a class" },
		{ "[Rule r]\nMatch=keyword:x\n", "test.conf:1: [Rule r] needs both Match= and Class=" },
		{ "\n[Rule]\n", "test.conf:2: [Rule] needs a name" },
		{ "[Rule a b]\n", "test.conf:1:" },
		{ "[Member m]\nUIDs=5\nMaxTiers=T5\n", "test.conf:3: [Member m] MaxTiers=: 'T5'" },
	};
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		struct config *c = NULL;
		struct errmsg e = { { 0 } };
		int r = load(bad[i].text, &c, &e);
		if (r >= 0) {
			config_unref(c);
			TEST_FAIL_("accepted: %s", bad[i].text);
		}
		if (!strstr(e.text, bad[i].want))
			TEST_FAIL_("for %s: got '%s', want '%s'", bad[i].text, e.text, bad[i].want);
	}
	return 0;
}

TEST(add_rule_errors)
{
	_cleanup_(policy_freep) struct policy *p = NULL;
	struct errmsg e = { { 0 } };

	ASSERT_OK(policy_new_defaults(&p));
	ASSERT_ERR(policy_add_rule(p, "x", "regex:[a-", POLICY_CLASS_SECRET, "f.conf:7", &e),
		   -EINVAL);
	ASSERT_TRUE(strstr(e.text, "f.conf:7") != NULL);
	ASSERT_OK(policy_add_rule(p, "empty", "regex:x*", POLICY_CLASS_PERSONAL, NULL, &e));
	{
		struct policy_decision d;
		ASSERT_OK(eval(p, "aaaa", NULL, &d)); /* empty matches: no findings, no hang */
		ASSERT_EQ(d.n_findings, 0);
		policy_decision_done(&d);
	}
	return 0;
}
