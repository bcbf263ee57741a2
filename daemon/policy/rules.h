/* SPDX-License-Identifier: MIT */
/*
 * rules.h: user rules ([Rule NAME] Match= Class=), compiled once when the policy is built.
 *
 *   keyword:WORD   WORD as a whole word, ASCII case folded; every occurrence is a finding
 *   regex:PCRE     a PCRE2 pattern (UTF, JIT compiled); every match is a finding
 *   uid:N          the caller's uid is N
 *   member:NAME    the caller acts as [Member NAME]
 *   app:NAME       the D-Bus caller's unit or executable: NAME exactly, or its last path
 *                  component ("app:firefox" matches "/usr/bin/firefox"); shell globs allowed
 *   path:GLOB      one of the file paths the client declares matches GLOB (fnmatch, with
 *                  FNM_PATHNAME off so "*" crosses '/': "path:/home/ * /secret/ *")
 *
 * Rules about the caller or the paths (uid:, member:, app:, path:) have no span in the text:
 * their finding covers [0, 0).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../basic/errmsg.h"
#include "policy.h"

enum rule_match {
	RULE_MATCH_KEYWORD,
	RULE_MATCH_REGEX,
	RULE_MATCH_UID,
	RULE_MATCH_MEMBER,
	RULE_MATCH_APP,
	RULE_MATCH_PATH,
	RULE_MATCH_COUNT_,
};

/* Splits "kind:value"; *ret_value points into s. -EINVAL with a reason in e. */
int rule_match_parse(const char *s, enum rule_match *ret_kind, const char **ret_value,
		     struct errmsg *e);

struct rule;
/* Compiles one rule (the regex with JIT). where: "FILE:LINE" for messages, or NULL. */
int rule_new(const char *name, const char *match, enum policy_class class, const char *where,
	     struct rule **ret, struct errmsg *e);
struct rule *rule_free(struct rule *r);

/* Appends the rule's findings for req (findings grow by realloc; *n updated). */
int rule_apply(const struct rule *r, const struct policy_request *req,
	       struct policy_finding **findings, size_t *n, size_t *cap);
