/* SPDX-License-Identifier: MIT */
/*
 * policy.c: see policy.h. The policy is a few tier masks, the compiled user rules and the
 * members' MaxTiers=; evaluating is one detector walk, the rules, and a max over classes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/config.h"
#include "detect.h"
#include "policy.h"
#include "rules.h"
#include "sensitive.h"

struct policy_member {
	char *name;
	uint32_t max_tiers;
};

struct policy {
	uint32_t tiers[POLICY_CLASS_COUNT_];
	bool allow_external;
	struct rule **rules;
	size_t n_rules;
	struct policy_member *members; /* only those with MaxTiers= */
	size_t n_members;
};

static const char *const class_names[POLICY_CLASS_COUNT_] = { "public", "personal", "secret" };

const char *policy_class_name(enum policy_class c)
{
	return c < POLICY_CLASS_COUNT_ ? class_names[c] : NULL;
}

int policy_class_from_name(const char *s, enum policy_class *ret)
{
	for (int c = 0; c < POLICY_CLASS_COUNT_; c++)
		if (s && strcmp(s, class_names[c]) == 0) {
			*ret = (enum policy_class) c;
			return 0;
		}
	return -EINVAL;
}

int policy_tiers_parse(const char *s, uint32_t *ret, struct errmsg *e)
{
	uint32_t t = 0;
	const char *p = s;

	assert_return(s && ret, -EINVAL);
	/* "T0,T1", "T0 T1", "t0, t1"; "" is no tier at all */
	while (*p) {
		size_t n;
		while (*p == ' ' || *p == ',' || *p == '\t')
			p++;
		if (!*p)
			break;
		n = strcspn(p, " ,\t");
		if (n != 2 || (p[0] != 'T' && p[0] != 't') || p[1] < '0' || p[1] > '3')
			return errmsg_set(e, -EINVAL, "'%.*s' is not a tier (T0, T1, T2, T3)",
					  (int) MIN(n, (size_t) 40), p);
		t |= POLICY_TIER(p[1] - '0');
		p += n;
	}
	*ret = t;
	return 0;
}

const char *policy_tiers_format(uint32_t tiers, char *buf, size_t size)
{
	size_t o = 0;

	if (!buf || size == 0)
		return buf;
	buf[0] = 0;
	for (int k = 0; k < 4; k++)
		if (tiers & POLICY_TIER(k)) {
			int w = snprintf(buf + o, size - o, "%sT%d", o ? "," : "", k);
			if (w < 0 || (size_t) w >= size - o)
				break;
			o += (size_t) w;
		}
	return buf;
}

void policy_decision_done(struct policy_decision *d)
{
	if (!d)
		return;
	free(d->findings);
	d->findings = NULL;
	d->n_findings = 0;
}

struct policy *policy_free(struct policy *p)
{
	if (!p)
		return NULL;
	for (size_t i = 0; i < p->n_rules; i++)
		rule_free(p->rules[i]);
	free(p->rules);
	for (size_t i = 0; i < p->n_members; i++)
		free(p->members[i].name);
	free(p->members);
	free(p);
	return NULL;
}

int policy_new_defaults(struct policy **ret)
{
	struct policy *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->tiers[POLICY_CLASS_PUBLIC] = POLICY_TIER(0) | POLICY_TIER(1);
	p->tiers[POLICY_CLASS_PERSONAL] = POLICY_TIER(0) | POLICY_TIER(1);
	p->tiers[POLICY_CLASS_SECRET] = POLICY_TIER(0);
	*ret = p;
	return 0;
}

int policy_add_rule(struct policy *p, const char *name, const char *match,
		    enum policy_class class, const char *where, struct errmsg *e)
{
	struct rule *r = NULL, **v;
	int rc;

	assert_return(p && name && match && class < POLICY_CLASS_COUNT_, -EINVAL);
	rc = rule_new(name, match, class, where, &r, e);
	if (rc < 0)
		return rc;
	v = realloc(p->rules, (p->n_rules + 1) * sizeof(*v));
	if (!v) {
		rule_free(r);
		return -ENOMEM;
	}
	p->rules = v;
	p->rules[p->n_rules++] = r;
	return 0;
}

int policy_new(const struct config *cfg, struct policy **ret, struct errmsg *e)
{
	struct policy *p = NULL;
	int r;

	assert_return(ret, -EINVAL);
	r = policy_new_defaults(&p);
	if (r < 0)
		return r;
	if (!cfg) {
		*ret = p;
		return 0;
	}
	for (int c = 0; c < POLICY_CLASS_COUNT_; c++)
		p->tiers[c] = cfg->policy_tiers[c];
	p->allow_external = cfg->policy_allow_external;
	for (size_t i = 0; i < cfg->n_rules; i++) {
		const struct config_rule *cr = &cfg->rules[i];
		char where[4096 + 16];

		snprintf(where, sizeof(where), "%s:%u", cr->file ? cr->file : "(config)",
			 cr->match_line ? cr->match_line : cr->line);
		if (!cr->match || cr->class < 0) {
			r = errmsg_set(e, -EINVAL, "%s: [Rule %s] needs Match= and Class=", where,
				       cr->name);
			goto fail;
		}
		r = policy_add_rule(p, cr->name, cr->match, (enum policy_class) cr->class, where, e);
		if (r < 0)
			goto fail;
	}
	for (size_t i = 0; i < cfg->n_members; i++) {
		const struct config_member *m = &cfg->members[i];
		struct policy_member *v;

		if (!m->has_max_tiers)
			continue;
		v = realloc(p->members, (p->n_members + 1) * sizeof(*v));
		if (!v) {
			r = -ENOMEM;
			goto fail;
		}
		p->members = v;
		v[p->n_members] = (struct policy_member){ .name = strdup(m->name),
							  .max_tiers = m->max_tiers };
		if (!v[p->n_members].name) {
			r = -ENOMEM;
			goto fail;
		}
		p->n_members++;
	}
	*ret = p;
	return 0;
fail:
	policy_free(p);
	return r;
}

static int cmp_finding(const void *a, const void *b)
{
	const struct policy_finding *x = a, *y = b;

	if (x->byte_start != y->byte_start)
		return x->byte_start < y->byte_start ? -1 : 1;
	if (x->byte_end != y->byte_end)
		return x->byte_end > y->byte_end ? -1 : 1;
	return 0;
}

uint32_t policy_member_max_tiers(const struct policy *p, const char *member)
{
	if (p && member)
		for (size_t i = 0; i < p->n_members; i++)
			if (strcmp(p->members[i].name, member) == 0)
				return p->members[i].max_tiers;
	return POLICY_TIERS_ALL;
}

/* The tiers a request of class may reach: the class's list, within the member's MaxTiers=,
 * without T3 unless AllowExternal=yes. */
static uint32_t class_tiers(const struct policy *p, const struct policy_caller *caller,
			    enum policy_class class)
{
	uint32_t tiers = p->tiers[class];

	if (caller)
		tiers &= policy_member_max_tiers(p, caller->member);
	if (!p->allow_external)
		tiers &= ~POLICY_TIER(3);
	return tiers;
}

int policy_evaluate(const struct policy *p, const struct policy_request *req,
		    struct policy_decision *ret)
{
	struct detect_matches m = { 0 };
	struct sensitive_result sr;
	struct policy_finding *f = NULL;
	size_t n = 0, cap = 0;
	enum policy_class class;
	uint32_t tiers;
	int r;

	assert_return(p && req && ret, -EINVAL);
	assert_return(req->text || req->len == 0, -EINVAL);
	assert_return(req->n_paths == 0 || req->paths, -EINVAL);

	class = req->declared < POLICY_CLASS_COUNT_ ? req->declared : POLICY_CLASS_SECRET;
	r = detect_scan(req->text, req->len, &m);
	if (r < 0)
		goto fail;
	if (m.n) {
		cap = m.n + 8;
		f = malloc(cap * sizeof(*f));
		if (!f) {
			r = -ENOMEM;
			goto fail;
		}
		for (size_t i = 0; i < m.n; i++)
			f[n++] = (struct policy_finding){ .kind = detect_kind_name(m.v[i].kind),
							  .byte_start = m.v[i].start,
							  .byte_end = m.v[i].end,
							  .class = detect_kind_class(m.v[i].kind),
							  .rule = detect_kind_name(m.v[i].kind),
							  .score = 1.0f,
							  .layer = POLICY_LAYER_DETECTOR };
	}
	detect_matches_done(&m);
	for (size_t i = 0; i < p->n_rules; i++) {
		size_t n0 = n;
		r = rule_apply(p->rules[i], req, &f, &n, &cap);
		if (r < 0)
			goto fail;
		for (size_t k = n0; k < n; k++) {
			f[k].score = 1.0f;
			f[k].layer = POLICY_LAYER_RULE;
		}
	}
	/* the special categories (sensitive.h): class personal, about the user or someone */
	sensitive_scan(req->text, req->len, &sr);
	if (sr.n && n + sr.n > cap) {
		struct policy_finding *v = realloc(f, (n + sr.n) * sizeof(*f));
		if (!v) {
			r = -ENOMEM;
			goto fail;
		}
		f = v;
		cap = n + sr.n;
	}
	for (size_t i = 0, n_before = n; i < sr.n; i++) {
		const char *layer = sensitive_layer_name(sr.v[i].layer);
		bool in_secret = false;

		/* A credential's words can look like a category to the classifier ("my password
		 * is Zq9!vL2#" as a document number). The request is secret already, so such a
		 * finding adds nothing but an overlapping span. */
		for (size_t k = 0; k < n_before && !in_secret; k++)
			in_secret = f[k].class == POLICY_CLASS_SECRET &&
				    f[k].byte_start < sr.v[i].end && sr.v[i].start < f[k].byte_end;
		if (in_secret)
			continue;
		f[n++] = (struct policy_finding){ .kind = sensitive_category_name(sr.v[i].category),
						  .byte_start = sr.v[i].start,
						  .byte_end = sr.v[i].end,
						  .class = POLICY_CLASS_PERSONAL, .rule = layer,
						  .score = sr.v[i].score, .layer = layer };
	}
	if ((p->n_rules || sr.n) && n > 1)
		qsort(f, n, sizeof(*f), cmp_finding);

	/* Character offsets: one walk counting the bytes that start a UTF-8 sequence. The
	 * findings are sorted by start; ends are looked up the same way from the start. */
	{
		size_t pos = 0, chars = 0;
		for (size_t i = 0; i < n; i++) {
			size_t q, qc;
			/* eight bytes at a time: continuation bytes are 10xxxxxx */
			while (pos + 8 <= f[i].byte_start && pos + 8 <= req->len) {
				uint64_t x;
				memcpy(&x, req->text + pos, 8);
				/* one bit per continuation byte, summed into the top byte (no
				 * popcount instruction in the baseline x86-64 ISA) */
				x = (x & ~(x << 1) & 0x8080808080808080ull) >> 7;
				chars += 8 - (size_t) ((x * 0x0101010101010101ull) >> 56);
				pos += 8;
			}
			while (pos < f[i].byte_start && pos < req->len) {
				chars += ((unsigned char) req->text[pos] & 0xc0) != 0x80;
				pos++;
			}
			f[i].start = chars;
			for (q = pos, qc = chars; q < f[i].byte_end && q < req->len; q++)
				qc += ((unsigned char) req->text[q] & 0xc0) != 0x80;
			f[i].end = qc;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (f[i].class > class)
			class = f[i].class;

	tiers = class_tiers(p, req->caller, class);
	*ret = (struct policy_decision){
		.class = class,
		.permitted_tiers = tiers,
		.redact_for_t3 = (tiers & POLICY_TIER(3)) != 0,
		.findings = f,
		.n_findings = n,
		.special_score = sr.max_score,
	};
	return 0;
fail:
	detect_matches_done(&m);
	free(f);
	return r;
}

int policy_decision_add(const struct policy *p, const struct policy_caller *caller,
			struct policy_decision *d, const struct policy_finding *f)
{
	struct policy_finding *v;

	assert_return(p && d && f && f->class < POLICY_CLASS_COUNT_, -EINVAL);
	v = realloc(d->findings, (d->n_findings + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	d->findings = v;
	v[d->n_findings++] = *f;
	if (f->class > d->class) {
		/* only ever stricter; the tiers are the new class's, as policy_evaluate() would
		 * have given had this finding been among its own */
		d->class = f->class;
		d->permitted_tiers = class_tiers(p, caller, d->class);
		d->redact_for_t3 = (d->permitted_tiers & POLICY_TIER(3)) != 0;
	}
	return 0;
}

bool policy_finding_redactable(const struct policy_finding *f)
{
	/* the identifiers among the special-category kinds, found by that layer's exact rules
	 * with the value as the span (a document's number, a date of birth) */
	static const char *const value_kinds[] = { "gov_id", "birth_date" };

	if (!f || f->byte_end <= f->byte_start)
		return false;
	/* no layer: a finding built by hand (tests, older callers) names a value */
	if (!f->layer || strcmp(f->layer, POLICY_LAYER_DETECTOR) == 0 ||
	    strcmp(f->layer, POLICY_LAYER_RULE) == 0)
		return true;
	/* (the exact rules' layer only: the classifier's finding of the same category spans a
	 * word of the statement, not a value, and is kept like any special-category statement) */
	if (strcmp(f->layer, "lexicon") != 0)
		return false;
	for (size_t i = 0; f->kind && i < ELEMENTSOF(value_kinds); i++)
		if (strcmp(f->kind, value_kinds[i]) == 0)
			return true;
	return false;
}

bool policy_tier_allowed(const struct policy_decision *d, unsigned tier, bool user_controlled)
{
	if (!d || tier > 3 || !(d->permitted_tiers & POLICY_TIER(tier)))
		return false;
	/* T2 is someone's server: only one the user controls (the router knows which). */
	if (tier == 2 && !user_controlled)
		return false;
	return true;
}

bool policy_tier_needs_redaction(const struct policy_decision *d, unsigned tier)
{
	return d && tier == 3 && d->redact_for_t3;
}
