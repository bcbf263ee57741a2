/* SPDX-License-Identifier: MIT */
/*
 * molly-bench-sensitive: the special-category layer alone (sensitive_scan(), what
 * policy_evaluate() adds for it), and the whole policy_evaluate(), on 2 KiB prompts. Prints
 * p50/p99 in microseconds for prompts made of molly-bench-policy's parts (ordinary requests,
 * identifiers) and for prompts that also carry personal sentences about someone (every chunk
 * gets scored, the layer's worst case).
 *
 *   molly-bench-sensitive [ITERATIONS]     (default 20000)
 * Budget (issue 14): the whole policy p50 <= 50 us at 2 KiB, the layer <= ~25 us.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-util.h"
#include "policy/policy.h"
#include "policy/sensitive.h"

static const char *const plain[] = {
	"Please summarise the attached meeting notes and list the action items. ",
	"Mario can be reached at mario.rossi@example.it or +39 347 123 4567. ",
	"The invoice goes to IBAN IT60 X054 2811 1010 0000 0123 456 by Friday. ",
	"Version 2.14.3 was released on 2024-03-12 after build 4521. ",
	"Calle de Alcal\xc3\xa1 45, 28014 Madrid is the new office; DNI 12345678Z. ",
	"Deploy with token ghp_abcdefghijklmnopqrstuvwxyz0123456789 tonight. ",
	"Il cliente chiede un preventivo per 120 unit\xc3\xa0 entro marzo, grazie mille. ",
	"Server 192.168.10.42 rejects connections from 10.0.0.0/8 since commit 9fceb02. ",
};
static const char *const personal[] = {
	"My wife was diagnosed with breast cancer last month and starts chemo on Monday. ",
	"Sono omosessuale e i miei genitori non lo sanno ancora, ho paura di dirlo. ",
	"Vot\xc3\xa9 al PSOE en las \xc3\xbaltimas elecciones y mi familia no lo sabe. ",
	"I was arrested for drunk driving in 2019 and I have a hearing next week. ",
	"Mio figlio di 8 anni va alla scuola Manzoni e ha difficolt\xc3\xa0 a leggere. ",
	"Gano 1.200 euros al mes y debo 8.000 a la tarjeta de cr\xc3\xa9" "dito. ",
	"My manager put me on a performance plan after my sick leave for depression. ",
	"Mi marido est\xc3\xa1 sin papeles y tenemos miedo de ir al m\xc3\xa9" "dico. ",
};

static void build(char *out, const char *const *a, const char *const *b, unsigned *seed)
{
	size_t n = 0;

	for (;;) {
		*seed = *seed * 1103515245u + 12345u;
		const char *s = (b && (*seed >> 20) % 2) ? b[*seed >> 16 & 7] : a[*seed >> 16 & 7];
		size_t l = strlen(s);
		if (n + l > 2048)
			break;
		memcpy(out + n, s, l);
		n += l;
	}
	out[n] = 0;
}

static void report(const char *label, uint64_t *t, unsigned iters)
{
	qsort(t, iters, sizeof(*t), cmp_u64);
	printf("%-34s p50 %7.2f us   p99 %7.2f us\n", label, (double) t[iters / 2] / 1000.0,
	       (double) t[(size_t) iters * 99 / 100] / 1000.0);
}

int main(int argc, char **argv)
{
	unsigned iters = argc > 1 ? (unsigned) strtoul(argv[1], NULL, 10) : 20000, seed = 7;
	static char prompts[2][16][2049];
	struct policy *p = NULL;
	uint64_t *t;

	if (iters < 100)
		iters = 100;
	t = malloc(iters * sizeof(*t));
	if (!t || policy_new_defaults(&p) < 0)
		return 1;
	for (int k = 0; k < 16; k++) {
		build(prompts[0][k], plain, NULL, &seed);
		build(prompts[1][k], plain, personal, &seed);
	}
	for (int set = 0; set < 2; set++) {
		const char *name = set ? "with personal sentences" : "ordinary";
		char label[64];
		for (unsigned i = 0; i < iters; i++) {
			const char *s = prompts[set][i % 16];
			struct sensitive_result r;
			uint64_t t0 = now_ns();
			sensitive_scan(s, strlen(s), &r);
			t[i] = now_ns() - t0;
		}
		snprintf(label, sizeof(label), "layer, 2 KiB %s", name);
		report(label, t, iters);
		for (unsigned i = 0; i < iters; i++) {
			const char *s = prompts[set][i % 16];
			struct policy_decision d;
			uint64_t t0 = now_ns();
			if (policy_evaluate(p, &(struct policy_request){ .text = s, .len = strlen(s) },
					    &d) < 0)
				return 1;
			t[i] = now_ns() - t0;
			policy_decision_done(&d);
		}
		snprintf(label, sizeof(label), "policy, 2 KiB %s", name);
		report(label, t, iters);
	}
	policy_free(p);
	free(t);
	return 0;
}
