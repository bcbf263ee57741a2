/* SPDX-License-Identifier: MIT */
/*
 * policy.h: the sovereignty policy — every request gets a sensitivity class; the class fixes
 * the tiers it may reach (T0 this machine, T1 LAN, T2 self-hosted remote, T3 external API).
 *
 * Classes, in order: public < personal < secret. The strictest finding wins; a caller may
 * declare a stricter class, never a looser one. Findings come from built-in single-pass
 * detectors (detect.h) and user rules ([Rule NAME] sections: keyword:, regex: (PCRE2 + JIT),
 * uid:, member:, app:, path:).
 *
 * Defaults (on-device first): public → T0,T1; personal → T0,T1; secret → T0. T2 only to
 * targets marked user-controlled, T3 only where AllowExternal=yes and then only after
 * redaction ([Policy] PublicTiers= PersonalTiers= SecretTiers= AllowExternal=; per member
 * [Member NAME] MaxTiers=).
 *
 * Threading: a struct policy is immutable after load; evaluate from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

enum policy_class {
	POLICY_CLASS_PUBLIC,
	POLICY_CLASS_PERSONAL,
	POLICY_CLASS_SECRET,
	POLICY_CLASS_COUNT_,
};

/* Tier bit mask: 1 << 0 = T0 ... 1 << 3 = T3 */
#define POLICY_TIER(n) (1u << (n))
#define POLICY_TIERS_ALL 0xfu

const char *policy_class_name(enum policy_class c); /* "public", "personal", "secret" */
int policy_class_from_name(const char *s, enum policy_class *ret);
/* "T0,T1" style; -EINVAL naming the bad element. */
int policy_tiers_parse(const char *s, uint32_t *ret, struct errmsg *e);
/* Writes "T0,T1" (or "" for none) into buf. */
const char *policy_tiers_format(uint32_t tiers, char *buf, size_t size);

struct policy_finding {
	const char *kind;  /* "email", "phone", "iban", "card", "us_ssn", "it_codice_fiscale",
			    * "es_dni", "es_nie", "ip", "address", "api_key", "jwt", "private_key",
			    * "secret", "rule" for user rules, or a special category of
			    * sensitive.h ("health", "sex_life", "politics", ...; class personal) */
	size_t start;      /* character (code point) offsets in the text, [start, end) */
	size_t end;
	size_t byte_start; /* the same span in bytes */
	size_t byte_end;
	enum policy_class class;
	const char *rule;  /* the built-in detector's name, the [Rule NAME], or the layer's name
			    * for a special category */
	float score;       /* 0..1: 1 for exact detectors and user rules; a calibrated probability
			    * for classifier findings */
	const char *layer; /* which layer fired (a static string): POLICY_LAYER_DETECTOR,
			    * _RULE, _LEXICON, _CLASSIFIER or _JUDGE */
};

/* policy_finding.layer: identifier and credential detectors (detect.h), user rules
 * (rules.h), the special-category lexicon and classifier, and the optional judge (the local
 * model asked about an uncertain classifier score; the manager adds its finding). */
#define POLICY_LAYER_DETECTOR   "detector"
#define POLICY_LAYER_RULE       "rule"
#define POLICY_LAYER_LEXICON    "lexicon"
#define POLICY_LAYER_CLASSIFIER "classifier"
#define POLICY_LAYER_JUDGE      "judge"

/* Whether redaction for T3 replaces the finding's span: findings that name a value (an
 * identifier, a credential, a user rule's keyword or regex match; of the special-category
 * kinds the identifiers "gov_id" and "birth_date", whose span is the number or the date) with
 * a non-empty span. The other special-category findings (lexicon, classifier, judge) mark
 * what the request is about, not a value: their spans stay, so the question still makes
 * sense (docs/policy.md). */
bool policy_finding_redactable(const struct policy_finding *f);

struct policy_caller {
	uid_t uid;            /* (uid_t) -1 when unknown */
	const char *member;   /* NULL when none */
	const char *app;      /* the D-Bus caller's unit or executable; NULL when unknown */
};

struct policy_request {
	const char *text;              /* everything that would leave: prompt or messages joined */
	size_t len;
	const struct policy_caller *caller;
	enum policy_class declared;    /* the caller's declaration (only a stricter one counts) */
	const char *const *paths;      /* file paths whose contents the client declares */
	size_t n_paths;
};

struct policy_decision {
	enum policy_class class;
	uint32_t permitted_tiers;
	bool redact_for_t3;            /* T3 permitted only after redaction */
	struct policy_finding *findings; /* owned */
	size_t n_findings;
	float special_score;           /* the special-category layer's highest calibrated
					* probability over the text, 0 when it scored nothing */
};

struct policy;

/* Appends a finding to the decision (the judge's). When it is stricter than d->class, the
 * class becomes the finding's and the permitted tiers that class's under p (with the caller's
 * member), exactly as policy_evaluate() would have decided with the finding among its own. */
int policy_decision_add(const struct policy *p, const struct policy_caller *caller,
			struct policy_decision *d, const struct policy_finding *f);

void policy_decision_done(struct policy_decision *d);

struct policy;
struct config;

/* Builds the policy from the daemon's configuration (NULL: defaults). */
int policy_new(const struct config *cfg, struct policy **ret, struct errmsg *e);
struct policy *policy_free(struct policy *p);
DEFINE_CLEANUP_FUNC(struct policy *, policy_free, NULL)

int policy_evaluate(const struct policy *p, const struct policy_request *req,
		    struct policy_decision *ret);

/* ---- additions (h-policy) ---- */

/* Whether a request under d may go to tier (0..3). T2 only to targets the user controls
 * (user_controlled: the router's flag for the target); T3 only when permitted, which
 * implies redact_for_t3. */
bool policy_tier_allowed(const struct policy_decision *d, unsigned tier, bool user_controlled);
/* Whether the text must pass through the redaction vault (vault.h) before going to tier. */
bool policy_tier_needs_redaction(const struct policy_decision *d, unsigned tier);

/* The defaults without a config, then rules added one by one (tools, tests, benchmarks that
 * do not link the daemon's config parser). where: "FILE:LINE" for messages, or NULL.
 * A policy is immutable once handed to evaluators. */
int policy_new_defaults(struct policy **ret);
int policy_add_rule(struct policy *p, const char *name, const char *match,
		    enum policy_class class, const char *where, struct errmsg *e);
/* A member's MaxTiers= (POLICY_TIERS_ALL when it has none). */
uint32_t policy_member_max_tiers(const struct policy *p, const char *member);

/*
 * Lifetimes: a finding's kind and rule point to static strings (built-in detectors) or into
 * the policy (a [Rule NAME]'s name): use them while the policy lives. A finding for a rule
 * about the caller or the paths (uid:, member:, app:, path:) has the empty span [0, 0).
 */
