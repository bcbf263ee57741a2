/* SPDX-License-Identifier: MIT */
/*
 * worker-main.c: molly-egress — `molly-egress --tier N [--fd FD] [--resolve-interval SEC]`.
 *
 * Not meant to be run by hand: mollyd's privileged helper starts it into the tier's cgroup
 * with the core's socket as fd 3 (see worker.h). Exit status: 0 when the core closed the
 * socket, 1 on a protocol error, 2 on bad arguments.
 *
 * TEST ONLY: --test-wrong-target URL sends every call to URL instead of the configured
 * targets (unpinned). It is honoured only when the environment has MOLLY_EGRESS_TEST=1, so a
 * stray argument in production changes nothing; the negative-control integration test uses
 * it to show the kernel blocking a T3 worker that tries the T1 endpoint.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "worker.h"

static void usage(void)
{
	printf("Usage: molly-egress --tier 1|2|3 [--fd FD] [--resolve-interval SEC]\n"
	       "\n"
	       "The egress worker of one remote tier. mollyd starts it into the tier's cgroup\n"
	       "(whose eBPF allow-list holds only that tier's endpoints) and talks to it over\n"
	       "the SOCK_SEQPACKET socket FD (default 3). Not for interactive use.\n");
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "tier", required_argument, NULL, 't' },
		{ "fd", required_argument, NULL, 'f' },
		{ "resolve-interval", required_argument, NULL, 'r' },
		{ "test-wrong-target", required_argument, NULL, 'W' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	struct worker_options o = { .fd = 3 };
	struct errmsg e = { { 0 } };
	const char *wrong = NULL;
	int c, type = 0, r;
	socklen_t tl = sizeof(type);
	char *end;

	while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
		switch (c) {
		case 't':
			o.tier = (unsigned) strtoul(optarg, &end, 10);
			if (*end || o.tier < 1 || o.tier > 3) {
				fprintf(stderr, "molly-egress: --tier %s: not 1, 2 or 3\n", optarg);
				return 2;
			}
			break;
		case 'f':
			o.fd = (int) strtol(optarg, &end, 10);
			if (*end || o.fd < 0) {
				fprintf(stderr, "molly-egress: --fd %s: not a file descriptor\n",
					optarg);
				return 2;
			}
			break;
		case 'r': {
			unsigned long s = strtoul(optarg, &end, 10);
			if (*end || s == 0 || s > 86400) {
				fprintf(stderr, "molly-egress: --resolve-interval %s: not 1..86400\n",
					optarg);
				return 2;
			}
			o.resolve_interval_ns = (uint64_t) s * 1000000000ull;
			break;
		}
		case 'W':
			wrong = optarg;
			break;
		case 'h':
			usage();
			return 0;
		default:
			return 2;
		}
	}
	if (o.tier == 0 || optind < argc) {
		fprintf(stderr, "molly-egress: --tier is required (and nothing else); see --help\n");
		return 2;
	}
	if (getsockopt(o.fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET) {
		fprintf(stderr,
			"molly-egress: fd %d is not a SOCK_SEQPACKET socket; this program is "
			"started by mollyd\n",
			o.fd);
		return 2;
	}
	if (wrong) {
		const char *t = getenv("MOLLY_EGRESS_TEST");
		if (t && strcmp(t, "1") == 0) {
			o.test_wrong_url = wrong;
			fprintf(stderr, "molly-egress[T%u]: TEST MODE: every call goes to %s\n",
				o.tier, wrong);
		} else
			fprintf(stderr,
				"molly-egress[T%u]: ignoring --test-wrong-target (test only; needs "
				"MOLLY_EGRESS_TEST=1)\n",
				o.tier);
	}
	/* The core runs as the same user: without this it could ptrace us and put bytes on the
	 * wire past worker_check_payload(). Not dumpable: only CAP_SYS_PTRACE may attach. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		fprintf(stderr, "molly-egress[T%u]: PR_SET_DUMPABLE: %m\n", o.tier);
		return 1;
	}
	/* The core hands over the keys; never read credentials of our own. */
	unsetenv("CREDENTIALS_DIRECTORY");
	signal(SIGPIPE, SIG_IGN);
	(void) fcntl(o.fd, F_SETFD, FD_CLOEXEC);

	r = worker_run(&o, &e);
	if (r < 0) {
		fprintf(stderr, "molly-egress[T%u]: %s\n", o.tier, e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	return 0;
}
