/* SPDX-License-Identifier: MIT */
/*
 * bench-client.c: one greedy request of N tokens (ignore_eos) through libmolly over the
 * transport named, timed with CLOCK_MONOTONIC: submit → first text byte, and the time per
 * token after it. Prints "transport=T tokens=N first_byte_us=F per_token_us=P".
 * The counts that TCG does not distort (syscalls, context switches, bytes copied) are
 * measured around it by tests/guest/guest.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <molly/molly.h>

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	enum molly_transport t;
	struct molly *h;
	struct molly_params p;
	struct molly_output o;
	double t0, t_first = 0, t_end;
	uint32_t tokens = 0;
	uint64_t id;
	int r;

	if (argc != 3) {
		fprintf(stderr, "usage: bench-client dev|dbus N\n");
		return 2;
	}
	t = strcmp(argv[1], "dev") == 0 ? MOLLY_TRANSPORT_DEV : MOLLY_TRANSPORT_DBUS;
	if (molly_open(t, &h) < 0)
		return 77;
	molly_params_init(&p);
	p.prompt = "Once upon a time";
	p.max_tokens = (uint32_t) atoi(argv[2]);
	p.temperature = 0;
	p.ignore_eos = true;
	t0 = now_us();
	if (molly_submit(h, &p, &id) < 0) {
		fprintf(stderr, "submit: %s\n", molly_last_error(h));
		return 1;
	}
	while ((r = molly_next_event(h, &o, -1)) > 0) {
		if (o.type == MOLLY_OUTPUT_TEXT) {
			if (!t_first)
				t_first = now_us();
			continue;
		}
		if (o.type == MOLLY_OUTPUT_ERROR) {
			fprintf(stderr, "%s: %s\n", o.error_name, o.error_message);
			return 1;
		}
		tokens = o.completion_tokens;
		break;
	}
	t_end = now_us();
	molly_close(h);
	if (r <= 0 || tokens < 2)
		return 1;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("transport=%s tokens=%u first_byte_us=%.0f per_token_us=%.0f client_cs=%ld\n",
	       argv[1], tokens, t_first - t0, (t_end - t_first) / (tokens - 1),
	       ru.ru_nvcsw + ru.ru_nivcsw);
	return 0;
}
