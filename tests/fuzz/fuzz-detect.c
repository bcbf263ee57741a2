/* SPDX-License-Identifier: MIT */
/*
 * fuzz-detect: the built-in detectors, policy evaluation and the redaction vault on arbitrary
 * text: no crash, no read past the input, spans inside the text, and redact + restore gives
 * the text back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/detect.h"
#include "policy/policy.h"
#include "policy/vault.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct policy *p;
	struct policy_decision d;
	struct vault *v = NULL;
	char *text = malloc(size ? size : 1), *red = NULL, *back = NULL;
	size_t n_red = 0, n_back = 0;

	if (!text)
		return 0;
	memcpy(text, data, size);
	if (!p && policy_new_defaults(&p) < 0)
		abort();
	if (policy_evaluate(p, &(struct policy_request){ .text = text, .len = size }, &d) < 0) {
		free(text);
		return 0;
	}
	for (size_t i = 0; i < d.n_findings; i++)
		if (d.findings[i].byte_end > size || d.findings[i].byte_start >= d.findings[i].byte_end)
			abort();
	if (vault_new(&v) >= 0 &&
	    vault_redact(v, text, size, d.findings, d.n_findings, POLICY_CLASS_PERSONAL, &red,
			 &n_red) >= 0 &&
	    vault_restore(v, red, n_red, &back, &n_back) >= 0) {
		/* the input may hold its own placeholder-like text; only then may it differ */
		if (vault_n_unrestorable(v) == 0 && !memmem(text, size, "\xe2\x9f\xa8", 3) &&
		    !memchr(text, '<', size) && !memchr(text, '[', size) && !memchr(text, '&', size) &&
		    !memmem(text, size, "\xe2\x8c\xa9", 3) && !memmem(text, size, "\xe3\x80\x88", 3) &&
		    !memmem(text, size, "\xe2\x80\xb9", 3) && !memmem(text, size, "\xc2\xab", 2) &&
		    (n_back != size || memcmp(back, text, size) != 0))
			abort();
	}
	free(red);
	free(back);
	vault_free(v);
	policy_decision_done(&d);
	free(text);
	return 0;
}
