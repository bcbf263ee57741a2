/* SPDX-License-Identifier: MIT */
/*
 * molly-bench-policy: what `molly explain` does per request (policy_evaluate: the detectors,
 * the user rules, character offsets), timed on prompts of up to 2 KiB. Prints p50/p99 in
 * microseconds with the built-in detectors alone and with 10 user regex rules.
 *
 *   molly-bench-policy [ITERATIONS]     (default 20000)
 * Targets (issue 6): built-ins p50 <= 20 us, p99 <= 100 us; with 10 regex rules p50 <= 50 us.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-util.h"
#include "policy/policy.h"

static const char *const parts[] = {
	"Please summarise the attached meeting notes and list the action items. ",
	"Mario can be reached at mario.rossi@example.it or +39 347 123 4567. ",
	"The invoice goes to IBAN IT60 X054 2811 1010 0000 0123 456 by Friday. ",
	"Version 2.14.3 was released on 2024-03-12 after build 4521. ",
	"Calle de Alcal\xc3\xa1 45, 28014 Madrid is the new office; DNI 12345678Z. ",
	"Deploy with token ghp_abcdefghijklmnopqrstuvwxyz0123456789 tonight. ",
	"Il cliente chiede un preventivo per 120 unit\xc3\xa0 entro marzo, grazie mille. ",
	"Server 192.168.10.42 rejects connections from 10.0.0.0/8 since commit 9fceb02. ",
};



static int run(const struct policy *p, const char *label, char **prompts, size_t n_prompts,
	       unsigned iters)
{
	uint64_t *t = malloc(iters * sizeof(*t));
	size_t bytes = 0;

	if (!t)
		return -1;
	for (unsigned i = 0; i < iters; i++) {
		const char *s = prompts[i % n_prompts];
		struct policy_decision d;
		uint64_t t0 = now_ns();
		if (policy_evaluate(p, &(struct policy_request){ .text = s, .len = strlen(s) },
				    &d) < 0) {
			free(t);
			return -1;
		}
		t[i] = now_ns() - t0;
		policy_decision_done(&d);
		bytes += strlen(s);
	}
	qsort(t, iters, sizeof(*t), cmp_u64);
	printf("%-24s p50 %7.2f us   p99 %7.2f us   (%u prompts, mean %zu bytes)\n", label,
	       (double) t[iters / 2] / 1000.0, (double) t[(size_t) iters * 99 / 100] / 1000.0,
	       iters, bytes / iters);
	free(t);
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const rules[10] = {
		"regex:ACME-[0-9]{4,8}",	"regex:(?i)project\\s+nightingale",
		"regex:\\bEMP[0-9]{6}\\b",	"regex:(?i)confidential|riservato|confidencial",
		"regex:\\b[A-Z]{3}-[0-9]{3}-[A-Z]{2}\\b", "regex:(?i)salary\\s+of\\s+\\w+",
		"regex:\\bPX-[a-f0-9]{8}\\b",	"regex:(?i)codename\\s*:\\s*\\w+",
		"regex:\\b(?:internal|interno)\\.example\\.com\\b", "regex:\\$[0-9]{1,3}(?:,[0-9]{3})+",
	};
	unsigned iters = argc > 1 ? (unsigned) strtoul(argv[1], NULL, 10) : 20000;
	char *prompts[64];
	struct policy *p = NULL;
	struct errmsg e = { { 0 } };
	unsigned seed = 1;

	if (iters < 100)
		iters = 100;
	/* 64 prompts of 64 B .. 2 KiB, built from the parts above */
	for (int k = 0; k < 64; k++) {
		size_t want = 64 + (size_t) k * 31, n = 0;
		prompts[k] = malloc(2049);
		if (!prompts[k])
			return 1;
		while (n < want) {
			const char *s = parts[(seed = seed * 1103515245u + 12345u) >> 16 & 7];
			size_t l = strlen(s);
			if (n + l > 2048)
				break;
			memcpy(prompts[k] + n, s, l);
			n += l;
		}
		prompts[k][n] = 0;
	}
	if (policy_new_defaults(&p) < 0)
		return 1;
	if (run(p, "built-in detectors", prompts, 64, iters) < 0)
		return 1;
	for (int i = 0; i < 10; i++)
		if (policy_add_rule(p, "r", rules[i], POLICY_CLASS_SECRET, NULL, &e) < 0) {
			fprintf(stderr, "rule %d: %s\n", i, e.text);
			return 1;
		}
	if (run(p, "+ 10 regex rules", prompts, 64, iters) < 0)
		return 1;
	policy_free(p);
	for (int k = 0; k < 64; k++)
		free(prompts[k]);
	return 0;
}
