/* SPDX-License-Identifier: MIT */
/*
 * worker.h: the egress worker (molly-egress), one process per remote tier, started by the
 * daemon's privileged helper into the tier's cgroup, whose BPF allow-list holds only that
 * tier's endpoints and the system resolvers on port 53. It is the only process that talks to
 * the tier's targets: the daemon's core cannot open an inet connection at all.
 *
 * It speaks proto.h with the core over one SOCK_SEQPACKET socket (fd 3) and runs the calls
 * with the in-process libcurl client (targets/remote.h):
 *
 *   CONFIGURE g ─▶ getaddrinfo() each target's host ─▶ ENDPOINTS g (numeric addresses)
 *   ALLOWED g   ─▶ targets (re)built with CURLOPT_RESOLVE pinned to exactly those addresses,
 *                  so a later DNS answer cannot lead libcurl anywhere the allow-list lacks
 *   SUBMIT      ─▶ worker_check_payload() ─▶ remote_submit ─▶ EVENT TEXT… DONE | ERROR
 *   CANCEL      ─▶ remote_cancel
 *   every ResolveIntervalSec= and on RESOLVE: resolve again; a changed answer goes out as
 *   ENDPOINTS and is pinned after ALLOWED, like a new configuration.
 *
 * Its own check, on the exact strings it is about to send (worker_check_payload): the tier
 * must be among the request's permitted tiers; the built-in detectors (the policy's defaults,
 * no user rules) run again and the request is refused (ERROR "refused") when they find
 * something stricter than the class the core declared, or any personal or secret value on
 * T3, or on T2 to a target that is not user-controlled. So a bug in the core's router or
 * redaction cannot make the t3 worker carry a personal value.
 *
 * Threads: the main loop (reads the socket, runs CONFIGURE/SUBMIT/CANCEL, the resolve timer,
 * the health reports; getaddrinfo() runs here); a writer thread that alone writes to the
 * socket, from a queue, so the main loop never blocks on a full socket; libcurl's one thread
 * per call (remote.c), which queues EVENTs and waits while the queue holds more than
 * WORKER_MAX_QUEUED bytes.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "basic/errmsg.h"
#include "targets/remote.h"

#define WORKER_MAX_QUEUED (16u << 20)
#define WORKER_DEFAULT_RESOLVE_INTERVAL_NS (300ull * 1000000000ull)

struct worker_options {
	unsigned tier;                 /* 1..3 */
	int fd;                        /* the core's SOCK_SEQPACKET socket */
	uint64_t resolve_interval_ns;  /* 0: WORKER_DEFAULT_RESOLVE_INTERVAL_NS */
	/* TEST ONLY (molly-egress --test-wrong-target, honoured only with MOLLY_EGRESS_TEST=1):
	 * every target's calls go to this URL instead, unpinned, so the negative-control test
	 * can show the kernel blocking a worker that tries another tier's endpoint. */
	const char *test_wrong_url;
};

/* Runs until the core closes the socket (0) or the protocol breaks (-EBADMSG, with e). */
int worker_run(const struct worker_options *o, struct errmsg *e);

/*
 * The worker's own check of a request for tier (1..3) to a target (user_controlled: its
 * UserControlled=) under the core's decision (permitted tiers, declared class). Returns 0 to
 * send, or -EPERM with the reason in why (never the value found, only its kind).
 */
int worker_check_payload(unsigned tier, bool user_controlled, uint32_t permitted_tiers,
			 int declared_class, const struct remote_request *r, char *why,
			 size_t why_size);

/*
 * Splits an http(s) URL into its host (without brackets) and port (the scheme's default when
 * absent). -EINVAL for anything else. host must hold 256 bytes.
 */
int worker_url_host_port(const char *url, char host[256], uint16_t *ret_port);
