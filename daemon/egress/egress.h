/* SPDX-License-Identifier: MIT */
/*
 * egress.h: structural egress enforcement. The kernel, not the daemon, decides which inet
 * destinations a process may reach: eBPF programs on the cgroup/connect4, connect6, sendmsg4
 * and sendmsg6 hooks (bpf/egress.bpf.c) check every connect() and unconnected sendto() of the
 * sockets created in a filtered cgroup against that cgroup's allow-list, and a denied attempt
 * fails with EPERM and is reported.
 *
 * Layout, created by egress_start() as root:
 *
 *   <base>/molly-<instance>-<pid>/        <base>: the daemon's own cgroup when it is delegated
 *                                         (systemd Delegate=yes), else the cgroup2 mount root
 *       core/   the daemon itself: EMPTY allow-list, so no inet connection at all, loopback
 *               included (AF_UNIX, D-Bus and its own listening sockets are unaffected)
 *       t1/ t2/ t3/   one per remote tier: the molly-egress workers, each allowed only what
 *               egress_set_allowed() gave its tier
 *       helper/ the privileged helper: the core's programs and list (empty), so the process
 *               that keeps root has no route out either
 *
 * A privileged helper process (forked by egress_start(), keeps root) owns the BPF objects and
 * does everything that needs privileges later: allow-list updates, starting workers into their
 * cgroup, reading the ring buffer of denials, reaping workers, and removing the subtree at the
 * end. The calling process keeps only two AF_UNIX sockets to it, so it may drop every
 * capability afterwards; it holds no BPF map or link fd (a map fd would let it widen its own
 * allow-list without any capability, see docs/ARCHITECTURE.md "Egress").
 *
 * Threading: the requests to the helper (egress_set_allowed(), egress_spawn_worker(),
 * egress_kill_worker(), egress_seal()) may come from any thread; they are serialized on one
 * lock. egress_process() and egress_set_exit_handler() belong to one thread at a time (the
 * one polling egress_fd()); egress_free() to the last user. Call egress_start() before
 * creating threads (it forks) and before opening any inet socket (a socket stays in the
 * cgroup it was created in, so one opened earlier is not filtered).
 *
 * Errors: every int function returns >= 0 on success or -errno, and fills the optional
 * struct errmsg with a sentence naming what failed.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "basic/errmsg.h"
#include "basic/macro.h"

enum egress_tier {
	EGRESS_CORE = 0, /* the daemon itself: nothing allowed unless set */
	EGRESS_T1 = 1,
	EGRESS_T2 = 2,
	EGRESS_T3 = 3,
	_EGRESS_TIER_MAX
};

/* Most destinations one tier's allow-list holds (egress_set_allowed() returns -E2BIG above). */
#define EGRESS_MAX_DEST 1024

/* One allowed (or denied) destination. Any protocol (TCP and UDP alike) to it is allowed. */
struct egress_dest {
	int family;       /* AF_INET / AF_INET6 */
	uint8_t addr[16]; /* network order; IPv4 in addr[0..3], the rest zero */
	uint16_t port;    /* host order; 0 is a port like any other (no wildcard) */
};

/* One denied attempt, as the kernel saw it. */
struct egress_denial {
	uint64_t realtime_ns;   /* CLOCK_REALTIME of the attempt (converted from the BPF clock) */
	uint32_t pid;           /* process (thread group) that called connect()/sendmsg() */
	uint64_t cgroup_id;     /* cgroup id of that process (the cgroup2 directory's inode) */
	enum egress_tier tier;  /* whose allow-list refused it */
	struct egress_dest dest;
	int protocol;           /* IPPROTO_TCP / IPPROTO_UDP (as the socket says) */
};

struct egress;

/*
 * As root, before dropping privileges: find cgroup2 (/proc/self/mountinfo); create a subtree
 * whose name is unique to this instance ("molly-<instance>-<pid>", so two daemons on one host
 * never collide) — under the process's own cgroup when that is a delegated one (systemd
 * Delegate=yes: marked with the trusted.delegate / user.delegate xattr, not the root), else
 * under the cgroup2 mount root — with children core, t1, t2, t3; load the programs and attach
 * them to each child with an EMPTY allow-list; fork the privileged helper process (keeps root,
 * serves the core over a socketpair); then move the calling process into `core`.
 * Stale subtrees of the same instance name whose pid is gone are removed first.
 *
 * instance: [A-Za-z0-9_-], 1..32 characters. worker_path: the molly-egress executable the
 * helper starts (absolute). worker_uid/worker_gid: the user workers run as (0/0 = stay root);
 * the helper drops them to it after moving them into their cgroup and before exec.
 *
 * Fails closed: any failure returns -errno with a message naming what failed (not root, no
 * cgroup2, BPF load/attach refused, ...) and leaves nothing behind (no subtree, no helper).
 * On success *ret owns the helper; free it with egress_free().
 */
int egress_start(const char *instance, const char *worker_path, uid_t worker_uid,
		 gid_t worker_gid, struct egress **ret, struct errmsg *e);
/* (-EALREADY: the caller already sits in an egress `core` cgroup, see egress_seal().) */

/*
 * Atomic replace of a tier's allow-list (n may be 0: deny everything). Callable from the
 * unprivileged core (goes through the helper). A connect() racing the replace sees either the
 * whole old list or the whole new one, never a mix. -EINVAL for a bad family or tier, -E2BIG
 * for n > EGRESS_MAX_DEST, -ENOTCONN if the helper is gone.
 */
int egress_set_allowed(struct egress *eg, enum egress_tier tier, const struct egress_dest *d,
		       size_t n, struct errmsg *e);

/*
 * The helper forks, moves the child into the tier's cgroup BEFORE exec (so before any socket),
 * drops to the worker uid/gid (supplementary groups cleared), sets no_new_privs, and execs
 * worker_path with argv (argv[0] included; at most 64 arguments, 16 KiB in all); the worker's
 * fd 3 is one end of a fresh AF_UNIX SOCK_SEQPACKET socketpair whose other end is returned in
 * *ret_fd (passed over SCM_RIGHTS; O_CLOEXEC, blocking). stdin is /dev/null; stdout/stderr
 * are the helper's (the daemon's journal stream). The helper reaps its workers and reports
 * their exit through egress_process() (see egress_set_exit_handler()). An exec failure is
 * returned here as the exec's -errno. EGRESS_CORE is not a worker tier (-EINVAL).
 */
int egress_spawn_worker(struct egress *eg, enum egress_tier tier, char *const argv[],
			pid_t *ret_pid, int *ret_fd, struct errmsg *e);

/* For the event loop: readable (POLLIN) when denial records or worker exits are pending. */
int egress_fd(struct egress *eg);

/*
 * Delivers pending denials to on_denial (may be NULL) and pending worker exits to the exit
 * handler (if set), at most 256 per call (the fd stays readable for the rest); never blocks. Returns the number of records handled, or -errno
 * (-ENOTCONN: the helper is gone; the filters stay attached, enforcement continues, but no
 * more updates or workers are possible).
 */
int egress_process(struct egress *eg, void (*on_denial)(const struct egress_denial *d, void *userdata),
		   void *userdata);

/* Absolute path of a tier's cgroup directory; valid until egress_free(). NULL for a bad tier. */
const char *egress_cgroup_path(struct egress *eg, enum egress_tier tier);

/* The privileged helper's cgroup (<root>/helper, with the core's programs: no inet destination
 * at all); valid until egress_free(). */
const char *egress_helper_cgroup_path(struct egress *eg);

/*
 * Kills workers, detaches programs, removes the subtree (the helper first moves the calling
 * process back to the cgroup it was in before egress_start()). NULL-safe; returns NULL.
 * After egress_seal(): kills the workers and removes t1..t3 at once, but the calling process
 * stays in `core`, filtered, until it exits; the helper then removes `core` and the subtree
 * (a few milliseconds after the exit, not before egress_free() returns).
 */
struct egress *egress_free(struct egress *eg);
DEFINE_CLEANUP_FUNC(struct egress *, egress_free, NULL)

/* Formats a dest as "127.0.0.1:8080" / "[::1]:8080". Returns the length, or -EINVAL for a
 * bad family, -ENOBUFS when buf is too small (64 bytes always suffice). */
int egress_dest_format(const struct egress_dest *d, char *buf, size_t len);

/* ---- additions to the first contract ---- */

/*
 * Called from egress_process() for each worker the helper reaped: its pid, tier, and the
 * wait status (WIFEXITED()/WIFSIGNALED() apply). Restarting it is the caller's decision
 * (egress_spawn_worker() again). cb NULL removes the handler.
 */
void egress_set_exit_handler(struct egress *eg,
			     void (*cb)(pid_t pid, enum egress_tier tier, int wait_status, void *userdata),
			     void *userdata);

/* Sends sig to one of this instance's workers (through the helper, which only signals its own
 * children). -ESRCH if pid is not a live worker of this instance. */
int egress_kill_worker(struct egress *eg, pid_t pid, int sig, struct errmsg *e);

/* Parses "127.0.0.1:8080", "[::1]:8080" (numeric only, no names) into *ret. -EINVAL with a
 * message otherwise. */
int egress_dest_parse(const char *s, struct egress_dest *ret, struct errmsg *e);

/* Whether egress_start() can work here, without changing anything: root, a writable cgroup2
 * mount, and a kernel that loads a cgroup sock_addr BPF program. 0, or -errno with the reason
 * (-EPERM not root or BPF refused, -ENOENT no cgroup2). For tests (skip) and the daemon's
 * status line. */
int egress_supported(struct errmsg *e);

/* The privileged helper's pid (a child of the egress_start() caller), for status output and
 * tests; 0 once it is gone. */
pid_t egress_helper_pid(struct egress *eg);

/*
 * Seals the core in: from now on nothing moves the calling process out of `core` while it
 * lives — neither egress_free() nor a closed control socket — so a core taken over by an
 * attacker cannot lift its own filter through the helper. Unsealed, egress_free() moves the
 * core back out (that is what lets it remove the subtree synchronously). Call it once the
 * daemon no longer needs to leave (after start); cannot be undone. A later egress_start() in
 * the same process returns -EALREADY. -ENOTCONN if the helper is gone.
 */
int egress_seal(struct egress *eg, struct errmsg *e);

/* Count of denials the kernel could not report (ring buffer full) or the helper could not
 * forward (core not reading), as last reported by the helper. */
uint64_t egress_lost_denials(struct egress *eg);
