/* SPDX-License-Identifier: MIT */
/*
 * egress.c: the core's side of the egress filter: egress_start() builds the cgroup subtree
 * and forks the privileged helper (egress-priv.c), which loads and attaches the BPF programs;
 * every later privileged act is a request to the helper over a socketpair.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "egress/cgroup.h"
#include "egress/egress-bpf.h"
#include "egress/egress-priv.h"
#include "egress/egress.h"

static const char *const tier_names[_EGRESS_TIER_MAX] = { "core", "t1", "t2", "t3" };

struct egress {
	pthread_mutex_t lock; /* one request/reply on ctl_fd at a time, whichever thread */
	bool sealed;  /* egress_seal() done: the helper outlives us, do not wait for it */
	int ctl_fd;   /* owned: requests and replies */
	int ev_fd;    /* owned: denials and worker exits; nonblocking */
	pid_t helper; /* our child */
	char root_dir[PATH_MAX];
	char tier_dir[_EGRESS_TIER_MAX][PATH_MAX];
	char helper_dir[PATH_MAX];
	uint64_t lost;
	void (*on_exit)(pid_t pid, enum egress_tier tier, int wait_status, void *userdata);
	void *exit_userdata;
};

/* ---- destinations ---- */

int egress_dest_format(const struct egress_dest *d, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];
	int n;

	assert_return(d && buf, -EINVAL);
	if (d->family != AF_INET && d->family != AF_INET6)
		return -EINVAL;
	if (!inet_ntop(d->family, d->addr, a, sizeof(a)))
		return -errno;
	n = snprintf(buf, len, d->family == AF_INET6 ? "[%s]:%u" : "%s:%u", a, (unsigned) d->port);
	return n < 0 || (size_t) n >= len ? -ENOBUFS : n;
}

int egress_dest_parse(const char *s, struct egress_dest *ret, struct errmsg *e)
{
	struct egress_dest d = { 0 };
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon, *h = s;
	size_t hl;
	char *end;
	unsigned long port;

	assert_return(s && ret, -EINVAL);
	if (s[0] == '[') {
		const char *close_br = strchr(s, ']');

		if (!close_br || close_br[1] != ':')
			return errmsg_set(e, -EINVAL, "destination '%s': expected [IPv6]:port", s);
		h = s + 1;
		hl = (size_t) (close_br - h);
		colon = close_br + 1;
		d.family = AF_INET6;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return errmsg_set(e, -EINVAL, "destination '%s': expected address:port", s);
		hl = (size_t) (colon - s);
		d.family = AF_INET;
	}
	if (hl == 0 || hl >= sizeof(host))
		return errmsg_set(e, -EINVAL, "destination '%s': bad address", s);
	memcpy(host, h, hl);
	host[hl] = 0;
	if (inet_pton(d.family, host, d.addr) != 1)
		return errmsg_set(e, -EINVAL, "destination '%s': '%s' is not a numeric %s address", s,
				  host, d.family == AF_INET ? "IPv4" : "IPv6");
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (colon[1] == 0 || *end || errno || port > 65535 || colon[1] == '-' || colon[1] == '+')
		return errmsg_set(e, -EINVAL, "destination '%s': port '%s' is not 0..65535", s, colon + 1);
	d.port = (uint16_t) port;
	*ret = d;
	return 0;
}

/* ---- talking to the helper ---- */

static int recv_reply(int fd, struct priv_reply *rep, int *ret_fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = { .iov_base = rep, .iov_len = sizeof(*rep) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	ssize_t n;

	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int got;

			memcpy(&got, CMSG_DATA(c), sizeof(got));
			if (ret_fd && *ret_fd < 0)
				*ret_fd = got;
			else
				close(got);
		}
	if (n != sizeof(*rep))
		return -ENOTCONN; /* 0: the helper closed its end */
	rep->msg[sizeof(rep->msg) - 1] = 0;
	return 0;
}

static int request(struct egress *eg, const struct priv_req *req, const void *payload,
		   struct priv_reply *rep, int *ret_fd, struct errmsg *e)
{
	struct iovec iov[2] = { { .iov_base = (void *) req, .iov_len = sizeof(*req) },
				{ .iov_base = (void *) payload, .iov_len = req->payload_bytes } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = payload ? 2 : 1 };
	ssize_t n;
	int r;

	if (eg->ctl_fd < 0)
		return errmsg_set(e, -ENOTCONN, "the egress helper is gone");
	pthread_mutex_lock(&eg->lock);
	do
		n = sendmsg(eg->ctl_fd, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		r = errno == EPIPE ? -ENOTCONN : -errno;
		pthread_mutex_unlock(&eg->lock);
		return errmsg_set(e, r, "cannot reach the egress helper: %s", strerror(-r));
	}
	r = recv_reply(eg->ctl_fd, rep, ret_fd);
	pthread_mutex_unlock(&eg->lock);
	if (r < 0)
		return errmsg_set(e, r, "no answer from the egress helper: %s", strerror(-r));
	if (rep->r < 0)
		return errmsg_set(e, rep->r, "%s", rep->msg[0] ? rep->msg : strerror(-rep->r));
	return rep->r;
}

int egress_set_allowed(struct egress *eg, enum egress_tier tier, const struct egress_dest *d,
		       size_t n, struct errmsg *e)
{
	struct priv_req req = { .op = PRIV_SET_ALLOWED, .tier = (uint32_t) tier };
	struct priv_reply rep;
	int r;

	assert_return(eg, -EINVAL);
	if (tier < 0 || tier >= _EGRESS_TIER_MAX)
		return errmsg_set(e, -EINVAL, "egress tier %d out of range", (int) tier);
	if (n > EGRESS_MAX_DEST)
		return errmsg_set(e, -E2BIG, "%zu destinations for tier %s; at most %d", n,
				  tier_names[tier], EGRESS_MAX_DEST);
	if (n > 0 && !d)
		return errmsg_set(e, -EINVAL, "no destination array");
	for (size_t i = 0; i < n; i++)
		if (d[i].family != AF_INET && d[i].family != AF_INET6)
			return errmsg_set(e, -EINVAL, "destination %zu: address family %d is neither "
					  "AF_INET nor AF_INET6", i, d[i].family);
	req.n = (uint32_t) n;
	req.payload_bytes = (uint32_t) (n * sizeof(*d));
	r = request(eg, &req, n ? d : NULL, &rep, NULL, e);
	return r < 0 ? r : 0;
}

int egress_spawn_worker(struct egress *eg, enum egress_tier tier, char *const argv[],
			pid_t *ret_pid, int *ret_fd, struct errmsg *e)
{
	struct priv_req req = { .op = PRIV_SPAWN, .tier = (uint32_t) tier };
	_cleanup_free_ char *buf = NULL;
	struct priv_reply rep;
	size_t bytes = 0, argc = 0;
	int fd = -EBADF, r;

	assert_return(eg && argv && argv[0] && ret_pid && ret_fd, -EINVAL);
	if (tier < EGRESS_T1 || tier >= _EGRESS_TIER_MAX)
		return errmsg_set(e, -EINVAL, "egress workers run in tiers t1..t3, not %d", (int) tier);
	for (; argv[argc]; argc++) {
		bytes += strlen(argv[argc]) + 1;
		if (argc >= PRIV_MAX_ARGS || bytes > PRIV_MAX_ARG_BYTES)
			return errmsg_set(e, -E2BIG, "worker arguments exceed %d arguments or %d bytes",
					  PRIV_MAX_ARGS, PRIV_MAX_ARG_BYTES);
	}
	buf = malloc(bytes);
	if (!buf)
		return -ENOMEM;
	bytes = 0;
	for (size_t i = 0; i < argc; i++) {
		size_t l = strlen(argv[i]) + 1;

		memcpy(buf + bytes, argv[i], l);
		bytes += l;
	}
	req.n = (uint32_t) argc;
	req.payload_bytes = (uint32_t) bytes;
	r = request(eg, &req, buf, &rep, &fd, e);
	if (r < 0) {
		if (fd >= 0)
			close(fd);
		return r;
	}
	if (fd < 0)
		return errmsg_set(e, -EBADMSG, "the egress helper started worker %d without a socket",
				  (int) rep.pid);
	*ret_pid = rep.pid;
	*ret_fd = fd;
	return 0;
}

int egress_seal(struct egress *eg, struct errmsg *e)
{
	struct priv_req req = { .op = PRIV_SEAL };
	struct priv_reply rep;
	int r;

	assert_return(eg, -EINVAL);
	r = request(eg, &req, NULL, &rep, NULL, e);
	if (r < 0)
		return r;
	eg->sealed = true;
	return 0;
}

int egress_kill_worker(struct egress *eg, pid_t pid, int sig, struct errmsg *e)
{
	struct priv_req req = { .op = PRIV_KILL, .pid = pid, .sig = sig };
	struct priv_reply rep;
	int r;

	assert_return(eg && pid > 0, -EINVAL);
	r = request(eg, &req, NULL, &rep, NULL, e);
	return r < 0 ? r : 0;
}

int egress_fd(struct egress *eg)
{
	assert_return(eg, -EINVAL);
	return eg->ev_fd;
}

void egress_set_exit_handler(struct egress *eg,
			     void (*cb)(pid_t pid, enum egress_tier tier, int wait_status, void *userdata),
			     void *userdata)
{
	if (!eg)
		return;
	eg->on_exit = cb;
	eg->exit_userdata = userdata;
}

int egress_process(struct egress *eg, void (*on_denial)(const struct egress_denial *d, void *userdata),
		   void *userdata)
{
	struct priv_event ev;
	int handled = 0;
	ssize_t n;

	assert_return(eg, -EINVAL);
	if (eg->ev_fd < 0)
		return -ENOTCONN;
	/* At most a batch per call: a flood of denials must not hold the caller's loop; the fd
	 * stays readable for the rest. */
	while (handled < 256) {
		n = recv(eg->ev_fd, &ev, sizeof(ev), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return handled;
		if (n < 0)
			return -errno;
		if (n == 0)
			return handled > 0 ? handled : -ENOTCONN;
		if (n != sizeof(ev))
			continue;
		eg->lost = ev.lost;
		if (ev.kind == PRIV_EVENT_DENIAL && on_denial)
			on_denial(&ev.denial, userdata);
		else if (ev.kind == PRIV_EVENT_EXIT && eg->on_exit && ev.tier >= 0 && ev.tier < _EGRESS_TIER_MAX)
			eg->on_exit(ev.pid, (enum egress_tier) ev.tier, ev.wait_status, eg->exit_userdata);
		handled++;
	}
	return handled;
}

pid_t egress_helper_pid(struct egress *eg)
{
	return eg ? eg->helper : 0;
}

uint64_t egress_lost_denials(struct egress *eg)
{
	return eg ? eg->lost : 0;
}

const char *egress_cgroup_path(struct egress *eg, enum egress_tier tier)
{
	if (!eg || tier < 0 || tier >= _EGRESS_TIER_MAX)
		return NULL;
	return eg->tier_dir[tier];
}

const char *egress_helper_cgroup_path(struct egress *eg)
{
	return eg ? eg->helper_dir : NULL;
}

/* ---- start and end ---- */

int egress_supported(struct errmsg *e)
{
	char mount[PATH_MAX];
	int r;

	if (geteuid() != 0)
		return errmsg_set(e, -EPERM, "egress enforcement needs root at start (to create "
					     "cgroups and load BPF programs); running as uid %d",
				  (int) geteuid());
	r = cgroup2_mount(mount, sizeof(mount), e);
	if (r < 0)
		return r;
	if (access(mount, W_OK) < 0)
		return errmsg_set(e, -errno, "the cgroup2 mount %s is not writable: %s", mount,
				  strerror(errno));
	return egress_bpf_probe(e);
}

static bool instance_valid(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!(s[n] >= 'a' && s[n] <= 'z') && !(s[n] >= 'A' && s[n] <= 'Z') &&
		    !(s[n] >= '0' && s[n] <= '9') && s[n] != '_' && s[n] != '-')
			return false;
	return n >= 1 && n <= 32;
}

/* Whether dir is ".../molly-*-<pid>/core". */
static bool inside_egress_core(const char *dir)
{
	const char *last = strrchr(dir, '/'), *parent;

	if (!last || strcmp(last, "/core") != 0)
		return false;
	for (parent = last - 1; parent > dir && *parent != '/'; parent--)
		;
	return strncmp(parent, "/molly-", 7) == 0;
}

/* Removes base/molly-<instance>-<pid> subtrees whose pid no longer exists: what a daemon
 * killed with its helper (SIGKILL to both) leaves behind. A live pid's tree is never
 * touched, so a second daemon of the same instance name is safe. */
static void remove_stale(const char *base, const char *instance)
{
	char prefix[64], path[PATH_MAX];
	DIR *d = opendir(base);
	size_t pl;

	if (!d)
		return;
	pl = (size_t) snprintf(prefix, sizeof(prefix), "molly-%s-", instance);
	for (struct dirent *de; (de = readdir(d));) {
		char *end;
		long pid;

		if (de->d_type != DT_DIR || strncmp(de->d_name, prefix, pl) != 0)
			continue;
		errno = 0;
		pid = strtol(de->d_name + pl, &end, 10);
		if (*end || errno || pid <= 0 || de->d_name[pl] == 0)
			continue;
		if (pid != getpid() && (kill((pid_t) pid, 0) == 0 || errno != ESRCH))
			continue;
		if ((size_t) snprintf(path, sizeof(path), "%s/%s", base, de->d_name) >= sizeof(path))
			continue;
		(void) cgroup2_kill_all(path);
		(void) cgroup2_remove_tree(path, NULL);
	}
	closedir(d);
}

static void shutdown_helper(struct egress *eg)
{
	struct priv_req req = { .op = PRIV_SHUTDOWN };
	struct priv_reply rep;

	if (eg->ctl_fd >= 0) {
		(void) request(eg, &req, NULL, &rep, NULL, NULL);
		close(eg->ctl_fd);
		eg->ctl_fd = -EBADF;
	}
	if (eg->helper > 0 && eg->sealed) {
		/* Sealed: it removes `core` after we exit; only collect it if it died earlier. */
		(void) waitpid(eg->helper, NULL, WNOHANG);
		eg->helper = 0;
	}
	if (eg->helper > 0) {
		/* The helper exits after its reply (or on EOF); a helper stuck for any reason must
		 * not hang the daemon's exit. */
		for (int i = 0; i < 500; i++) {
			pid_t w = waitpid(eg->helper, NULL, WNOHANG);

			if (w == eg->helper || (w < 0 && errno != EINTR))
				break;
			if (i == 499) {
				(void) kill(eg->helper, SIGKILL);
				(void) waitpid(eg->helper, NULL, 0);
			}
			usleep(10 * 1000);
		}
		eg->helper = 0;
	}
}

struct egress *egress_free(struct egress *eg)
{
	if (!eg)
		return NULL;
	shutdown_helper(eg);
	if (eg->ev_fd >= 0)
		close(eg->ev_fd);
	pthread_mutex_destroy(&eg->lock);
	free(eg);
	return NULL;
}

int egress_start(const char *instance, const char *worker_path, uid_t worker_uid,
		 gid_t worker_gid, struct egress **ret, struct errmsg *e)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	_cleanup_free_ struct priv_config *cfg = NULL;
	char mount[PATH_MAX], own[PATH_MAX];
	const char *base;
	struct priv_reply rep;
	int ctl[2], ev[2], r;
	pid_t pid;

	assert_return(ret, -EINVAL);
	if (!instance || !instance_valid(instance))
		return errmsg_set(e, -EINVAL, "egress: instance name '%s' must be 1..32 of [A-Za-z0-9_-]",
				  instance ? instance : "(null)");
	if (!worker_path || worker_path[0] != '/' || strlen(worker_path) >= PATH_MAX)
		return errmsg_set(e, -EINVAL, "egress: worker path '%s' must be absolute",
				  worker_path ? worker_path : "(null)");
	if (geteuid() != 0)
		return errmsg_set(e, -EPERM, "egress: enforcement needs root at start (to create "
					     "cgroups and load BPF programs); running as uid %d",
				  (int) geteuid());
	eg = calloc(1, sizeof(*eg));
	if (!eg)
		return -ENOMEM;
	eg->ctl_fd = eg->ev_fd = -EBADF; /* before anything can hand eg to egress_free() */
	pthread_mutex_init(&eg->lock, NULL);
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;

	r = cgroup2_mount(mount, sizeof(mount), e);
	if (r < 0)
		return errmsg_prefix(e, r, "egress");
	r = cgroup2_path_of(0, mount, own, sizeof(own), e);
	if (r < 0)
		return errmsg_prefix(e, r, "egress");
	if (inside_egress_core(own))
		return errmsg_set(e, -EALREADY, "egress: this process is confined to %s by an earlier "
				  "egress_start() (sealed, or not freed) and stays there until it exits", own);
	/* Under systemd with Delegate=yes the subtree belongs inside the service's own cgroup
	 * (systemd then still sees, and stops, everything); otherwise at the top. */
	base = strcmp(own, mount) != 0 && cgroup2_is_delegated(own) ? own : mount;
	remove_stale(base, instance);
	if ((size_t) snprintf(eg->root_dir, sizeof(eg->root_dir), "%s/molly-%s-%d", base, instance,
			      (int) getpid()) >= sizeof(eg->root_dir) - 8)
		return errmsg_set(e, -ENAMETOOLONG, "egress: cgroup path too long under %s", base);
	if (mkdir(eg->root_dir, 0755) < 0)
		return errmsg_set(e, -errno, "egress: cannot create cgroup %s: %s", eg->root_dir,
				  strerror(errno));
	for (int t = 0; t < _EGRESS_TIER_MAX; t++) {
		/* root_dir is at least 8 bytes shorter than the buffer (checked above). */
		if ((size_t) snprintf(eg->tier_dir[t], sizeof(eg->tier_dir[t]), "%s/%s", eg->root_dir,
				      tier_names[t]) >= sizeof(eg->tier_dir[t]))
			return -ENAMETOOLONG;
		if (mkdir(eg->tier_dir[t], 0755) < 0) {
			r = -errno;
			(void) cgroup2_remove_tree(eg->root_dir, NULL);
			return errmsg_set(e, r, "egress: cannot create cgroup %s: %s", eg->tier_dir[t],
					  strerror(-r));
		}
	}
	/* The helper's own: it keeps root, so it gets the core's empty list too (no route out
	 * for the one process of the tree that could still do harm with one). */
	if ((size_t) snprintf(eg->helper_dir, sizeof(eg->helper_dir), "%s/helper", eg->root_dir) >=
	    sizeof(eg->helper_dir))
		return -ENAMETOOLONG;
	if (mkdir(eg->helper_dir, 0755) < 0) {
		r = -errno;
		(void) cgroup2_remove_tree(eg->root_dir, NULL);
		return errmsg_set(e, r, "egress: cannot create cgroup %s: %s", eg->helper_dir,
				  strerror(-r));
	}

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) {
		r = -errno;
		(void) cgroup2_remove_tree(eg->root_dir, NULL);
		return errmsg_set(e, r, "egress: socketpair: %s", strerror(-r));
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ev) < 0) {
		r = -errno;
		close(ctl[0]);
		close(ctl[1]);
		(void) cgroup2_remove_tree(eg->root_dir, NULL);
		return errmsg_set(e, r, "egress: socketpair: %s", strerror(-r));
	}
	*cfg = (struct priv_config){ .ctl_fd = ctl[1], .ev_fd = ev[1], .core_pid = getpid(),
				     .worker_uid = worker_uid, .worker_gid = worker_gid };
	snprintf(cfg->worker_path, sizeof(cfg->worker_path), "%s", worker_path);
	snprintf(cfg->root_dir, sizeof(cfg->root_dir), "%s", eg->root_dir);
	for (int t = 0; t < _EGRESS_TIER_MAX; t++)
		snprintf(cfg->tier_dir[t], sizeof(cfg->tier_dir[t]), "%s", eg->tier_dir[t]);
	snprintf(cfg->helper_dir, sizeof(cfg->helper_dir), "%s", eg->helper_dir);
	snprintf(cfg->orig_dir, sizeof(cfg->orig_dir), "%s", own);

	fflush(NULL); /* nothing buffered twice */
	pid = fork();
	if (pid < 0) {
		r = -errno;
		close(ctl[0]);
		close(ctl[1]);
		close(ev[0]);
		close(ev[1]);
		(void) cgroup2_remove_tree(eg->root_dir, NULL);
		return errmsg_set(e, r, "egress: cannot fork the privileged helper: %s", strerror(-r));
	}
	if (pid == 0) {
		close(ctl[0]);
		close(ev[0]);
		egress_priv_main(cfg);
	}
	close(ctl[1]);
	close(ev[1]);
	eg->helper = pid;
	eg->ctl_fd = ctl[0];
	eg->ev_fd = ev[0];
	(void) fcntl(eg->ev_fd, F_SETFL, O_NONBLOCK);

	/* The helper's first word: programs loaded and attached, or why not. From here on a
	 * failure goes through egress_free() (via _cleanup_), which has the helper undo it all. */
	r = recv_reply(eg->ctl_fd, &rep, NULL);
	if (r < 0 || rep.r < 0) {
		close(eg->ctl_fd);
		eg->ctl_fd = -EBADF;
		(void) waitpid(pid, NULL, 0);
		eg->helper = 0;
		(void) cgroup2_remove_tree(eg->root_dir, NULL);
		if (r < 0)
			return errmsg_set(e, r, "egress: the privileged helper died at start");
		return errmsg_set(e, rep.r, "egress: %s", rep.msg);
	}
	/* Last: the core goes in. Every socket it creates from now on is filtered. */
	r = cgroup2_move(eg->tier_dir[EGRESS_CORE], getpid(), e);
	if (r < 0)
		return errmsg_prefix(e, r, "egress");
	*ret = TAKE_PTR(eg);
	return 0;
}
