/* SPDX-License-Identifier: MIT */
/*
 * egress-priv.h: the privileged helper of the egress filter and the messages between it and
 * the core (daemon/egress/egress.c). Not a public interface: egress.h is.
 *
 * Two AF_UNIX SOCK_SEQPACKET socketpairs join core and helper (one message = one packet):
 *   control  core -> helper: struct priv_req + payload; helper -> core: struct priv_reply,
 *            with the worker's socket as SCM_RIGHTS on a PRIV_SPAWN reply. Strictly one
 *            request at a time, answered in order. The first packet on it, unasked, is the
 *            helper's start-up result (struct priv_reply).
 *   events   helper -> core only: struct priv_event (denials, worker exits), never blocking
 *            the helper: a denial that does not fit is counted as lost; an exit waits in a
 *            queue until the core reads.
 * The helper serves until the control socket closes (the core exited or crashed) or a
 * PRIV_SHUTDOWN, then kills the workers, moves the core back to its old cgroup, detaches the
 * programs and removes the subtree. After PRIV_SEAL it does not move the core: it removes the
 * tiers at once, then waits (pidfd) for the core to exit before removing `core` and the root.
 */
#pragma once

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "egress/egress.h"

/* Live workers one helper tracks at most (egress_spawn_worker() returns -EMFILE beyond). */
#define PRIV_MAX_WORKERS 64
/* Arguments of one worker: count and bytes (NUL separators included). */
#define PRIV_MAX_ARGS 64
#define PRIV_MAX_ARG_BYTES (16 * 1024)

enum priv_op {
	PRIV_SET_ALLOWED = 1, /* tier, n; payload: n struct egress_dest */
	PRIV_SPAWN = 2,       /* tier, n = argc; payload: argv strings, each NUL-terminated */
	PRIV_KILL = 3,        /* pid, sig */
	PRIV_SHUTDOWN = 4,    /* no payload; the helper exits after the reply (sealed: after the
			       * core has exited) */
	PRIV_SEAL = 5,        /* no payload; from now on the core is never moved out of `core` */
};

struct priv_req {
	uint32_t op;
	uint32_t tier;
	uint32_t n;
	int32_t pid;
	int32_t sig;
	uint32_t payload_bytes;
};

struct priv_reply {
	int32_t r;   /* >= 0 or -errno */
	int32_t pid; /* PRIV_SPAWN: the worker */
	char msg[512];
};

enum priv_event_kind {
	PRIV_EVENT_DENIAL = 1,
	PRIV_EVENT_EXIT = 2,
};

struct priv_event {
	uint32_t kind;
	int32_t pid;         /* PRIV_EVENT_EXIT: the worker */
	int32_t tier;        /* PRIV_EVENT_EXIT */
	int32_t wait_status; /* PRIV_EVENT_EXIT */
	uint64_t lost;       /* denials lost so far (kernel ring full + not forwarded) */
	struct egress_denial denial; /* PRIV_EVENT_DENIAL */
};

#define PRIV_REQ_MAX (sizeof(struct priv_req) + EGRESS_MAX_DEST * sizeof(struct egress_dest))

/* What the helper needs; filled by egress_start() before the fork. */
struct priv_config {
	int ctl_fd;
	int ev_fd;
	pid_t core_pid;
	uid_t worker_uid;
	gid_t worker_gid;
	char worker_path[PATH_MAX];
	char root_dir[PATH_MAX];                      /* the subtree */
	char tier_dir[_EGRESS_TIER_MAX][PATH_MAX]; /* root_dir/core, /t1, ... */
	char helper_dir[PATH_MAX];                    /* root_dir/helper: the helper itself */
	char orig_dir[PATH_MAX];                      /* the core's cgroup before egress_start() */
};

/* The helper's main: loads and attaches the programs, reports the result on ctl_fd, serves,
 * cleans up, and _exit()s. Runs in the forked child; never returns. */
_Noreturn void egress_priv_main(const struct priv_config *cfg);
