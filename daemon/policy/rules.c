/* SPDX-License-Identifier: MIT */
/*
 * rules.c: see rules.h.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rules.h"

/* Findings one rule may add to one request: enough to redact, bounded against a pattern
 * that matches everywhere. */
#define RULE_MAX_MATCHES 4096

struct rule {
	char *name;
	enum rule_match kind;
	enum policy_class class;
	char *value;     /* keyword (lower case), name, glob */
	size_t value_len;
	uid_t uid;
	pcre2_code *re;
	bool jit;
};

static const char *const match_names[RULE_MATCH_COUNT_] = {
	[RULE_MATCH_KEYWORD] = "keyword", [RULE_MATCH_REGEX] = "regex", [RULE_MATCH_UID] = "uid",
	[RULE_MATCH_MEMBER] = "member",   [RULE_MATCH_APP] = "app",     [RULE_MATCH_PATH] = "path",
};

int rule_match_parse(const char *s, enum rule_match *ret_kind, const char **ret_value,
		     struct errmsg *e)
{
	const char *colon = s ? strchr(s, ':') : NULL;

	if (!colon)
		return errmsg_set(e, -EINVAL,
				  "'%.80s' is not KIND:VALUE (keyword:, regex:, uid:, member:, app:, "
				  "path:)",
				  s ? s : "");
	for (int k = 0; k < RULE_MATCH_COUNT_; k++)
		if (strlen(match_names[k]) == (size_t) (colon - s) &&
		    memcmp(match_names[k], s, (size_t) (colon - s)) == 0) {
			if (!colon[1])
				return errmsg_set(e, -EINVAL, "%s: needs a value", match_names[k]);
			*ret_kind = (enum rule_match) k;
			*ret_value = colon + 1;
			return 0;
		}
	return errmsg_set(e, -EINVAL,
			  "unknown match kind '%.*s' (keyword, regex, uid, member, app, path)",
			  (int) MIN((size_t) (colon - s), (size_t) 40), s);
}

struct rule *rule_free(struct rule *r)
{
	if (!r)
		return NULL;
	free(r->name);
	free(r->value);
	pcre2_code_free(r->re);
	free(r);
	return NULL;
}

int rule_new(const char *name, const char *match, enum policy_class class, const char *where,
	     struct rule **ret, struct errmsg *e)
{
	struct rule *r;
	const char *value = NULL;
	enum rule_match kind;
	int rc;

	rc = rule_match_parse(match, &kind, &value, e);
	if (rc < 0)
		return where ? errmsg_prefix(e, rc, "%s: [Rule %s] Match=", where, name) : rc;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->kind = kind;
	r->class = class;
	r->name = strdup(name);
	r->value = strdup(value);
	if (!r->name || !r->value) {
		rule_free(r);
		return -ENOMEM;
	}
	r->value_len = strlen(value);
	switch (kind) {
	case RULE_MATCH_KEYWORD:
		for (char *p = r->value; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char) (*p + 32);
		break;
	case RULE_MATCH_UID: {
		char *end;
		unsigned long long u;
		errno = 0;
		u = strtoull(value, &end, 10);
		if (errno || *end || value[0] < '0' || value[0] > '9' || u >= UINT32_MAX) {
			rule_free(r);
			return errmsg_set(e, -EINVAL, "%s%s[Rule %s] Match=uid:%.40s: not a uid",
					  where ? where : "", where ? ": " : "", name, value);
		}
		r->uid = (uid_t) u;
		break;
	}
	case RULE_MATCH_REGEX: {
		int err = 0;
		PCRE2_SIZE off = 0;
		r->re = pcre2_compile((PCRE2_SPTR) value, PCRE2_ZERO_TERMINATED,
				      PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
		if (!r->re) {
			PCRE2_UCHAR msg[160];
			pcre2_get_error_message(err, msg, sizeof(msg));
			rule_free(r);
			return errmsg_set(e, -EINVAL,
					  "%s%s[Rule %s] Match=regex: %s at offset %zu of '%.80s'",
					  where ? where : "", where ? ": " : "", name, (char *) msg,
					  (size_t) off, value);
		}
		/* Without JIT (e.g. a W^X system) the interpreter is slower but correct. */
		r->jit = pcre2_jit_compile(r->re, PCRE2_JIT_COMPLETE) == 0;
		break;
	}
	default:
		break;
	}
	*ret = r;
	return 0;
}

static int add(struct policy_finding **v, size_t *n, size_t *cap, const struct rule *r,
	       size_t s, size_t e)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		struct policy_finding *nv = realloc(*v, nc * sizeof(**v));
		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = (struct policy_finding){
		.kind = "rule", .byte_start = s, .byte_end = e, .class = r->class, .rule = r->name,
		.score = 1.0f, .layer = POLICY_LAYER_RULE,
	};
	return 0;
}

static bool word_byte(unsigned char c)
{
	return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z') || c == '_' ||
	       c >= 0x80;
}

static bool app_matches(const char *glob, const char *app)
{
	const char *base;

	if (!app)
		return false;
	if (fnmatch(glob, app, 0) == 0)
		return true;
	base = strrchr(app, '/');
	return base && fnmatch(glob, base + 1, 0) == 0;
}

int rule_apply(const struct rule *r, const struct policy_request *req,
	       struct policy_finding **findings, size_t *n, size_t *cap)
{
	const struct policy_caller *c = req->caller;
	const char *t = req->text;
	size_t len = t ? req->len : 0, count = 0;

	switch (r->kind) {
	case RULE_MATCH_KEYWORD:
		for (size_t i = 0; i + r->value_len <= len && count < RULE_MAX_MATCHES; i++) {
			if ((i > 0 && word_byte((unsigned char) t[i - 1])) ||
			    strncasecmp(t + i, r->value, r->value_len) != 0 ||
			    (i + r->value_len < len && word_byte((unsigned char) t[i + r->value_len])))
				continue;
			if (add(findings, n, cap, r, i, i + r->value_len) < 0)
				return -ENOMEM;
			count++;
			i += r->value_len - 1;
		}
		return 0;
	case RULE_MATCH_REGEX: {
		pcre2_match_data *md = pcre2_match_data_create(1, NULL);
		PCRE2_SIZE start = 0;
		int rc = 0;

		if (!md)
			return -ENOMEM;
		while (start <= len && count < RULE_MAX_MATCHES) {
			PCRE2_SIZE *ov;
			int m = r->jit ? pcre2_jit_match(r->re, (PCRE2_SPTR) (t ? t : ""), len, start,
							 0, md, NULL)
				       : pcre2_match(r->re, (PCRE2_SPTR) (t ? t : ""), len, start, 0,
						     md, NULL);
			if (m < 0)
				break; /* no match, or a limit: a rule that cannot decide adds nothing */
			ov = pcre2_get_ovector_pointer(md);
			if (ov[1] < ov[0] || ov[1] > len)
				break; /* \K tricks */
			if (ov[1] > ov[0]) {
				if ((rc = add(findings, n, cap, r, ov[0], ov[1])) < 0)
					break;
				count++;
				start = ov[1];
			} else {
				/* an empty match: step over one character */
				start = ov[0] + 1;
				while (start < len && ((unsigned char) t[start] & 0xc0) == 0x80)
					start++;
			}
		}
		pcre2_match_data_free(md);
		return rc;
	}
	case RULE_MATCH_UID:
		if (c && c->uid != (uid_t) -1 && c->uid == r->uid)
			return add(findings, n, cap, r, 0, 0);
		return 0;
	case RULE_MATCH_MEMBER:
		if (c && c->member && strcmp(c->member, r->value) == 0)
			return add(findings, n, cap, r, 0, 0);
		return 0;
	case RULE_MATCH_APP:
		if (c && app_matches(r->value, c->app))
			return add(findings, n, cap, r, 0, 0);
		return 0;
	case RULE_MATCH_PATH:
		for (size_t i = 0; i < req->n_paths; i++)
			if (req->paths[i] && fnmatch(r->value, req->paths[i], 0) == 0)
				return add(findings, n, cap, r, 0, 0);
		return 0;
	default:
		return 0;
	}
}
