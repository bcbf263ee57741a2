/* SPDX-License-Identifier: MIT */
/*
 * egress-priv.c: the privileged helper. It is the only process that holds the BPF objects:
 * a map fd lets its holder rewrite the allow-list with no capability at all (verified on
 * 6.18 with unprivileged_bpf_disabled=2, see docs/ARCHITECTURE.md), so the core must not have
 * one. One thread, one poll() loop over the control socket, the ring buffer and a signalfd
 * for SIGCHLD.
 */
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "egress-abi.h"
#include "egress/cgroup.h"
#include "egress/egress-bpf.h"
#include "egress/egress-priv.h"

struct worker {
	pid_t pid; /* 0 = free slot */
	enum egress_tier tier;
};

struct priv {
	const struct priv_config *cfg;
	struct egress_bpf_set *bpf;
	int sig_fd;
	struct worker workers[PRIV_MAX_WORKERS];
	struct priv_event exits[PRIV_MAX_WORKERS * 2]; /* exit events the core has not taken yet */
	size_t n_exits;
	uint64_t lost_forward; /* denials dropped because the core's socket was full */
	bool sealed;           /* egress_seal(): the core never leaves `core` alive */
	int core_pidfd;        /* sealed: readable when the core has exited */
	int64_t mono_to_real_ns;
};

static int64_t now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void reply(int fd, int r, pid_t pid, int pass_fd, const char *msg)
{
	struct priv_reply rep = { .r = r, .pid = pid };
	struct iovec iov = { .iov_base = &rep, .iov_len = sizeof(rep) };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (msg)
		snprintf(rep.msg, sizeof(rep.msg), "%s", msg);
	if (pass_fd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
		CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
		CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), &pass_fd, sizeof(int));
	}
	while (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

/* ---- denials: ring buffer -> events socket ---- */

static void on_event(const struct egress_event *ev, void *userdata)
{
	struct priv *p = userdata;
	struct priv_event out = { .kind = PRIV_EVENT_DENIAL };
	struct egress_denial *d = &out.denial;

	d->realtime_ns = (uint64_t) ((int64_t) ev->mono_ns + p->mono_to_real_ns);
	d->pid = ev->pid;
	d->cgroup_id = ev->cgroup_id;
	d->tier = ev->tier < _EGRESS_TIER_MAX ? (enum egress_tier) ev->tier : EGRESS_CORE;
	d->protocol = (int) ev->protocol;
	d->dest.family = (int) ev->family;
	d->dest.port = (uint16_t) ev->port;
	memcpy(d->dest.addr, ev->addr, ev->family == AF_INET ? 4 : 16);
	out.lost = egress_bpf_set_lost(p->bpf) + p->lost_forward;
	if (send(p->cfg->ev_fd, &out, sizeof(out), MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		p->lost_forward++;
}

static void flush_exits(struct priv *p)
{
	size_t done = 0;

	while (done < p->n_exits) {
		p->exits[done].lost = egress_bpf_set_lost(p->bpf) + p->lost_forward;
		if (send(p->cfg->ev_fd, &p->exits[done], sizeof(p->exits[done]),
			 MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			break; /* full (or the core is gone): keep the rest for POLLOUT */
		done++;
	}
	memmove(p->exits, p->exits + done, (p->n_exits - done) * sizeof(p->exits[0]));
	p->n_exits -= done;
}

/* ---- workers ---- */

static struct worker *worker_find(struct priv *p, pid_t pid)
{
	for (size_t i = 0; i < PRIV_MAX_WORKERS; i++)
		if (p->workers[i].pid == pid && pid > 0)
			return &p->workers[i];
	return NULL;
}

static void reap(struct priv *p)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	while (read(p->sig_fd, &si, sizeof(si)) == sizeof(si))
		;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct worker *w = worker_find(p, pid);

		if (!w)
			continue;
		if (p->n_exits < ELEMENTSOF(p->exits))
			p->exits[p->n_exits++] = (struct priv_event){ .kind = PRIV_EVENT_EXIT,
								      .pid = pid,
								      .tier = (int32_t) w->tier,
								      .wait_status = status };
		w->pid = 0;
	}
	flush_exits(p);
}

/* In the forked child: everything between fork and exec. Reports a failure as an errno on
 * err_fd and exits; success is the close-on-exec of err_fd. */
_Noreturn static void worker_exec(struct priv *p, enum egress_tier tier, int sock, int err_fd,
				  char **argv)
{
	const struct priv_config *cfg = p->cfg;
	pid_t helper = getppid();
	sigset_t none;
	int e2, s2, null_fd, r;

	/* First of all, before anything can open a socket: into the tier's cgroup. */
	r = cgroup2_move(cfg->tier_dir[tier], getpid(), NULL);
	if (r < 0)
		goto fail;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < _NSIG; sig++)
		(void) signal(sig, SIG_DFL);
	(void) setsid(); /* no terminal signals from the daemon's session */

	/* fd layout: 0 /dev/null, 1 2 inherited, 3 the socket, err pipe kept (cloexec). */
	e2 = fcntl(err_fd, F_DUPFD_CLOEXEC, 10);
	s2 = fcntl(sock, F_DUPFD, 10);
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (e2 < 0 || s2 < 0 || null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(s2, 3) < 0) {
		r = -errno;
		goto fail_errno_known;
	}
	if (null_fd == 0)
		(void) fcntl(0, F_SETFD, 0); /* stdin was closed: keep /dev/null across exec */
	err_fd = e2;
	(void) close_range(4, (unsigned) err_fd - 1, 0);
	(void) close_range((unsigned) err_fd + 1, ~0U, 0);

	if (cfg->worker_uid != 0 || cfg->worker_gid != 0) {
		if (setgroups(0, NULL) < 0 || setresgid(cfg->worker_gid, cfg->worker_gid, cfg->worker_gid) < 0 ||
		    setresuid(cfg->worker_uid, cfg->worker_uid, cfg->worker_uid) < 0) {
			r = -errno;
			goto fail_errno_known;
		}
		if (getuid() != cfg->worker_uid || geteuid() != cfg->worker_uid) {
			r = -EPERM;
			goto fail_errno_known;
		}
	}
	/* A worker does not outlive its helper (set after the uid change, which clears it). */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_PDEATHSIG, SIGTERM) < 0) {
		r = -errno;
		goto fail_errno_known;
	}
	if (getppid() != helper) {
		r = -ESRCH;
		goto fail_errno_known;
	}
	execv(cfg->worker_path, argv);
	r = -errno;
fail_errno_known:
fail:
	(void) !write(err_fd, &r, sizeof(r));
	_exit(127);
}

static void do_spawn(struct priv *p, const struct priv_req *req, char *payload, size_t len)
{
	char *argv[PRIV_MAX_ARGS + 1], *s = payload, msg[512];
	int sv[2], ep[2], err = 0;
	struct worker *slot;
	ssize_t n;
	pid_t pid;

	if (req->tier < EGRESS_T1 || req->tier >= _EGRESS_TIER_MAX)
		return reply(p->cfg->ctl_fd, -EINVAL, 0, -1, "workers run in tiers t1..t3 only");
	if (req->n < 1 || req->n > PRIV_MAX_ARGS || len == 0 || payload[len - 1] != 0)
		return reply(p->cfg->ctl_fd, -EINVAL, 0, -1, "malformed worker argument vector");
	for (uint32_t i = 0; i < req->n; i++) {
		if (s >= payload + len)
			return reply(p->cfg->ctl_fd, -EINVAL, 0, -1, "malformed worker argument vector");
		argv[i] = s;
		s += strlen(s) + 1;
	}
	argv[req->n] = NULL;
	slot = NULL;
	for (size_t i = 0; !slot && i < PRIV_MAX_WORKERS; i++)
		if (p->workers[i].pid == 0)
			slot = &p->workers[i];
	if (!slot)
		return reply(p->cfg->ctl_fd, -EMFILE, 0, -1, "too many live egress workers");

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		err = -errno;
		snprintf(msg, sizeof(msg), "socketpair: %s", strerror(-err));
		return reply(p->cfg->ctl_fd, err, 0, -1, msg);
	}
	if (pipe2(ep, O_CLOEXEC) < 0) {
		err = -errno;
		close(sv[0]);
		close(sv[1]);
		return reply(p->cfg->ctl_fd, err, 0, -1, "pipe2 failed");
	}
	pid = fork();
	if (pid == 0) {
		close(ep[0]);
		close(sv[0]);
		worker_exec(p, (enum egress_tier) req->tier, sv[1], ep[1], argv);
	}
	err = pid < 0 ? -errno : 0;
	close(ep[1]);
	close(sv[1]);
	if (pid > 0) {
		slot->pid = pid;
		slot->tier = (enum egress_tier) req->tier;
		do
			n = read(ep[0], &err, sizeof(err));
		while (n < 0 && errno == EINTR);
		if (n != sizeof(err))
			err = 0; /* closed on exec: it runs */
	}
	close(ep[0]);
	if (err < 0) {
		snprintf(msg, sizeof(msg), "cannot start worker %.200s in %.200s: %.80s", p->cfg->worker_path,
			 p->cfg->tier_dir[req->tier], strerror(-err));
		/* Never a worker: collect it here, so no exit is reported for it. */
		if (pid > 0) {
			(void) waitpid(pid, NULL, 0);
			slot->pid = 0;
		}
		close(sv[0]);
		return reply(p->cfg->ctl_fd, err, 0, -1, msg);
	}
	reply(p->cfg->ctl_fd, 0, pid, sv[0], NULL);
	close(sv[0]);
}

static void do_set_allowed(struct priv *p, const struct priv_req *req, const void *payload, size_t len)
{
	struct errmsg e = { { 0 } };
	int r;

	if (req->tier >= _EGRESS_TIER_MAX || req->n > EGRESS_MAX_DEST ||
	    len != req->n * sizeof(struct egress_dest))
		return reply(p->cfg->ctl_fd, -EINVAL, 0, -1, "malformed allow-list request");
	r = egress_bpf_set_allow(p->bpf, (enum egress_tier) req->tier, payload, req->n, &e);
	reply(p->cfg->ctl_fd, r, 0, -1, r < 0 ? e.text : NULL);
}

static void do_kill(struct priv *p, const struct priv_req *req)
{
	if (!worker_find(p, req->pid))
		return reply(p->cfg->ctl_fd, -ESRCH, 0, -1, "no such worker of this instance");
	reply(p->cfg->ctl_fd, kill(req->pid, req->sig) < 0 ? -errno : 0, 0, -1, NULL);
}

/* ---- start and end ---- */

static void close_other_fds(const struct priv_config *cfg)
{
	DIR *d = opendir("/proc/self/fd");
	int keep = -1;

	if (!d)
		return;
	keep = dirfd(d);
	for (struct dirent *de; (de = readdir(d));) {
		int fd = atoi(de->d_name);

		if (de->d_name[0] == '.' || fd <= 2 || fd == keep || fd == cfg->ctl_fd || fd == cfg->ev_fd)
			continue;
		(void) close(fd);
	}
	closedir(d);
}

/* Workers and the tier cgroups: everything but the core. */
static void cleanup_tiers(struct priv *p)
{
	const struct priv_config *cfg = p->cfg;

	for (size_t i = 0; i < PRIV_MAX_WORKERS; i++)
		if (p->workers[i].pid > 0) {
			(void) kill(p->workers[i].pid, SIGKILL);
			(void) waitpid(p->workers[i].pid, NULL, 0);
			p->workers[i].pid = 0;
		}
	/* Anything else left in the tier cgroups (a worker's children) dies too. */
	for (int t = EGRESS_T1; t < _EGRESS_TIER_MAX; t++)
		(void) cgroup2_kill_all(cfg->tier_dir[t]);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

static void cleanup(struct priv *p)
{
	const struct priv_config *cfg = p->cfg;
	struct errmsg e;

	cleanup_tiers(p);
	/* Unsealed: the core, if still alive, goes back where it came from (a cgroup with
	 * processes cannot be removed). Sealed: the core has exited already. Whatever else is
	 * left in `core` (children the daemon forked) dies, but never a core we could not
	 * move: then `core` stays as it is, filtered (fail closed), for a later start to
	 * remove once that pid is gone. */
	if (!p->sealed && cgroup2_move(cfg->orig_dir, cfg->core_pid, &e) < 0 &&
	    kill(cfg->core_pid, 0) == 0) {
		fprintf(stderr, "molly egress helper: %s; leaving %s in place\n", e.text, cfg->root_dir);
		return;
	}
	if (cgroup2_kill_all(cfg->tier_dir[EGRESS_CORE]) < 0)
		(void) cgroup2_kill_all(cfg->tier_dir[EGRESS_CORE]);
	/* We leave our own cgroup last (a cgroup with a process cannot be removed); what is
	 * left of our work here is detaching and rmdir. */
	if (cgroup2_move(cfg->orig_dir, getpid(), &e) < 0)
		fprintf(stderr, "molly egress helper: %s\n", e.text);
	p->bpf = egress_bpf_set_free(p->bpf);
	if (cgroup2_remove_tree(cfg->root_dir, &e) < 0)
		fprintf(stderr, "molly egress helper: %s\n", e.text);
}

/* Sealed end: the tiers go now; the core keeps its filter until it exits, then the rest. */
_Noreturn static void finish_sealed(struct priv *p, bool answer)
{
	struct pollfd pfd = { .fd = p->core_pidfd, .events = POLLIN };

	cleanup_tiers(p);
	for (int t = EGRESS_T1; t < _EGRESS_TIER_MAX; t++)
		(void) rmdir(p->cfg->tier_dir[t]);
	if (answer)
		reply(p->cfg->ctl_fd, 0, 0, -1, NULL);
	close(p->cfg->ctl_fd);
	close(p->cfg->ev_fd);
	while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
		;
	cleanup(p);
	_exit(0);
}

static void do_seal(struct priv *p)
{
	if (p->core_pidfd < 0) {
		/* The core is our parent and alive (it is waiting for this answer), so its pid
		 * cannot have been reused yet. */
		p->core_pidfd = (int) syscall(SYS_pidfd_open, p->cfg->core_pid, 0);
		if (p->core_pidfd < 0)
			return reply(p->cfg->ctl_fd, -errno, 0, -1, "pidfd_open of the core failed");
	}
	p->sealed = true;
	reply(p->cfg->ctl_fd, 0, 0, -1, NULL);
}

_Noreturn void egress_priv_main(const struct priv_config *cfg)
{
	static _Alignas(8) char buf[PRIV_REQ_MAX];
	struct priv p = { .cfg = cfg, .sig_fd = -EBADF, .core_pidfd = -EBADF };
	struct errmsg e = { { 0 } };
	sigset_t mask;
	int r;

	(void) prctl(PR_SET_NAME, "molly-egresspriv");
	close_other_fds(cfg);
	/* It ends when the core closes the control socket (exit, crash, egress_free()), not
	 * on the signals a terminal or a service manager sends to the whole group. */
	(void) signal(SIGINT, SIG_IGN);
	(void) signal(SIGTERM, SIG_IGN);
	(void) signal(SIGHUP, SIG_IGN);
	(void) signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	p.sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (p.sig_fd < 0)
		r = errmsg_set(&e, -errno, "signalfd: %s", strerror(errno));
	else
		r = egress_bpf_set_new(&p.bpf, &e);
	for (int t = 0; r >= 0 && t < _EGRESS_TIER_MAX; t++)
		r = egress_bpf_set_attach(p.bpf, (enum egress_tier) t, cfg->tier_dir[t], &e);
	/* Our own cgroup, filtered like the core (we open no inet socket, ever: a connect from
	 * here is EPERM and a denial). Before the reply, so no request is served unfiltered. */
	if (r >= 0)
		r = egress_bpf_set_attach_helper(p.bpf, cfg->helper_dir, &e);
	if (r >= 0)
		r = cgroup2_move(cfg->helper_dir, getpid(), &e);
	if (r >= 0 && (r = egress_bpf_set_fd(p.bpf)) < 0)
		errmsg_set(&e, r, "cannot map the denial ring buffer: %s", strerror(-r));
	reply(cfg->ctl_fd, r < 0 ? r : 0, getpid(), -1, r < 0 ? e.text : NULL);
	if (r < 0) {
		p.bpf = egress_bpf_set_free(p.bpf);
		_exit(1); /* the core removes the subtree it made */
	}

	for (;;) {
		struct pollfd pfd[3] = {
			{ .fd = cfg->ctl_fd, .events = POLLIN },
			{ .fd = egress_bpf_set_fd(p.bpf), .events = POLLIN },
			{ .fd = p.sig_fd, .events = POLLIN },
		};
		struct pollfd evp = { .fd = cfg->ev_fd, .events = POLLOUT };
		struct priv_req req;
		ssize_t n;

		if (poll(pfd, 3, p.n_exits > 0 ? 100 : -1) < 0 && errno != EINTR)
			break;
		if (pfd[2].revents)
			reap(&p);
		if (pfd[1].revents) {
			p.mono_to_real_ns = now_ns(CLOCK_REALTIME) - now_ns(CLOCK_MONOTONIC);
			(void) egress_bpf_set_consume(p.bpf, on_event, &p);
		}
		if (p.n_exits > 0 && poll(&evp, 1, 0) == 1)
			flush_exits(&p);
		if (!pfd[0].revents)
			continue;
		n = recv(cfg->ctl_fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* the core is gone */
		if ((size_t) n < sizeof(req)) {
			reply(cfg->ctl_fd, -EBADMSG, 0, -1, "short request");
			continue;
		}
		memcpy(&req, buf, sizeof(req));
		if (req.payload_bytes != (size_t) n - sizeof(req)) {
			reply(cfg->ctl_fd, -EBADMSG, 0, -1, "request length mismatch");
			continue;
		}
		switch (req.op) {
		case PRIV_SET_ALLOWED:
			do_set_allowed(&p, &req, buf + sizeof(req), req.payload_bytes);
			break;
		case PRIV_SPAWN:
			do_spawn(&p, &req, buf + sizeof(req), req.payload_bytes);
			break;
		case PRIV_KILL:
			do_kill(&p, &req);
			break;
		case PRIV_SEAL:
			do_seal(&p);
			break;
		case PRIV_SHUTDOWN:
			if (p.sealed)
				finish_sealed(&p, true);
			cleanup(&p);
			reply(cfg->ctl_fd, 0, 0, -1, NULL);
			_exit(0);
		default:
			reply(cfg->ctl_fd, -EOPNOTSUPP, 0, -1, "unknown request");
		}
	}
	if (p.sealed)
		finish_sealed(&p, false);
	cleanup(&p);
	_exit(0);
}
