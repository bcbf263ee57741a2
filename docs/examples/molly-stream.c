/* SPDX-License-Identifier: MIT */
/*
 * molly-stream.c: ask Molly through libmolly and print the answer as it comes, from your own
 * poll() loop. Uses /dev/molly when it is there, D-Bus otherwise.
 *
 *   cc molly-stream.c $(pkg-config --cflags --libs molly) -o molly-stream
 *   ./molly-stream "Once upon a time" 32
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <molly/molly.h>

int main(int argc, char **argv)
{
	struct molly *h;
	struct molly_params p;
	struct molly_output out;
	uint64_t id;
	int r;

	if (argc < 2) {
		fprintf(stderr, "usage: %s PROMPT [MAX_TOKENS]\n", argv[0]);
		return 2;
	}
	r = molly_open(MOLLY_TRANSPORT_AUTO, &h);
	if (r < 0) {
		fprintf(stderr, "molly_open: %s\n", strerror(-r));
		return 1;
	}
	molly_params_init(&p);
	p.prompt = argv[1];
	p.max_tokens = argc > 2 ? (uint32_t) strtoul(argv[2], NULL, 10) : 32;
	p.temperature = 0; /* greedy: the same answer over every transport */
	r = molly_submit(h, &p, &id);
	if (r < 0) {
		fprintf(stderr, "molly_submit: %s\n", molly_last_error(h));
		molly_close(h);
		return 1;
	}
	fprintf(stderr, "[request %llu via %s]\n", (unsigned long long) id,
		molly_transport_name(h));
	for (;;) {
		/* Your event loop would watch this fd with the rest of its work. */
		struct pollfd pfd = { .fd = molly_fd(h), .events = POLLIN };

		if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
			break;
		/* Drain what is ready without blocking. */
		while ((r = molly_next_event(h, &out, 0)) > 0) {
			if (out.type == MOLLY_OUTPUT_TEXT) {
				fwrite(out.text, 1, out.text_len, stdout);
				fflush(stdout);
				continue;
			}
			if (out.type == MOLLY_OUTPUT_DONE)
				printf("\n[%s: %u prompt + %u completion tokens]\n", out.finish_reason,
				       out.prompt_tokens, out.completion_tokens);
			else
				fprintf(stderr, "\n%s: %s\n", out.error_name, out.error_message);
			molly_close(h);
			return out.type == MOLLY_OUTPUT_DONE ? 0 : 1;
		}
		if (r < 0) {
			fprintf(stderr, "molly_next_event: %s\n", strerror(-r));
			break;
		}
	}
	molly_close(h);
	return 1;
}
