/* SPDX-License-Identifier: MIT */
/*
 * test-egress-bpf: the egress filter with its real BPF programs on real cgroups (root only;
 * skips with the reason without root, cgroup2 or BPF). Negative controls throughout: every
 * "denied" check has an "allowed" twin on the same listener, and the same endpoints are
 * reachable from outside the filtered tree.
 *
 * Listeners (TCP + UDP) run in a server process outside the tree, on 127.0.0.1:P1,
 * 127.0.0.2:P1, 127.0.0.1:P2, [::1]:P1, [::1]:P2 (and 127.0.0.1:P3 for replace tests). Each
 * test runs the "daemon" in a forked child (which egress_start() moves into `core`), so this
 * process never enters the tree; workers are tests/egress-probe, driven over their fd 3.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "egress/egress.h"
#include "test.h"

#define PROBE MOLLY_BIN_DIR "/egress-probe"

static int p1, p2, p3;
static pid_t server_pid;
static char unix_path[108];
static int setup_state; /* 0 not yet, 1 ok, TEST_SKIP */
static char skip_reason[600];

/* ---- listeners outside the tree ---- */

/* ss = addr:port of family; returns its length. */
static socklen_t make_addr(int family, const char *addr, int port, struct sockaddr_storage *ss)
{
	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *) ss;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t) port);
		inet_pton(AF_INET, addr, &a->sin_addr);
		return sizeof(*a);
	}
	struct sockaddr_in6 *a = (struct sockaddr_in6 *) ss;

	a->sin6_family = AF_INET6;
	a->sin6_port = htons((uint16_t) port);
	inet_pton(AF_INET6, addr, &a->sin6_addr);
	return sizeof(*a);
}

static int listen_on(int family, const char *addr, int port, int type)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int fd, one = 1;

	len = make_addr(family, addr, port, &ss);
	fd = socket(family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	(void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET6)
		(void) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *) &ss, len) < 0 || (type == SOCK_STREAM && listen(fd, 512) < 0)) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

static int bound_port(int fd)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);

	getsockname(fd, (struct sockaddr *) &a, &l);
	return ntohs(a.sin_port);
}

/* Binds TCP+UDP on every (addr, port) the tests use; picks ports that are free on all. */
static int open_listeners(int *fds, int *n)
{
	static const struct {
		int family;
		const char *addr;
		int which;
	} eps[] = { { AF_INET, "127.0.0.1", 1 }, { AF_INET, "127.0.0.2", 1 }, { AF_INET, "127.0.0.1", 2 },
		    { AF_INET6, "::1", 1 },       { AF_INET6, "::1", 2 },       { AF_INET, "127.0.0.1", 3 },
		    { AF_INET, "127.0.0.2", 2 } };

	for (int attempt = 0; attempt < 20; attempt++) {
		int ports[4] = { 0 }, ok = 1;

		*n = 0;
		for (int w = 1; w <= 3; w++) {
			int fd = listen_on(AF_INET, "127.0.0.1", 0, SOCK_STREAM);

			if (fd < 0)
				return fd;
			ports[w] = bound_port(fd);
			close(fd);
		}
		for (size_t i = 0; ok && i < ELEMENTSOF(eps); i++)
			for (int t = 0; ok && t < 2; t++) {
				int fd = listen_on(eps[i].family, eps[i].addr, ports[eps[i].which],
						   t ? SOCK_DGRAM : SOCK_STREAM);

				if (fd < 0)
					ok = 0;
				else
					fds[(*n)++] = fd;
			}
		if (ok) {
			p1 = ports[1];
			p2 = ports[2];
			p3 = ports[3];
			return 0;
		}
		for (int i = 0; i < *n; i++)
			close(fds[i]);
	}
	return -EADDRINUSE;
}

/* The server: accepts and closes, drains UDP, accepts on the AF_UNIX path. */
_Noreturn static void serve(int *fds, int n)
{
	struct pollfd pfd[32];
	char buf[64];

	for (int i = 0; i < n; i++)
		pfd[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	for (;;) {
		if (poll(pfd, (nfds_t) n, -1) < 0)
			continue;
		for (int i = 0; i < n; i++) {
			int c;

			if (!(pfd[i].revents & POLLIN))
				continue;
			while ((c = accept4(pfd[i].fd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
				close(c);
			while (recv(pfd[i].fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
				;
		}
	}
}

__attribute__((destructor)) static void stop_server(void)
{
	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
		server_pid = 0;
	}
	if (unix_path[0])
		unlink(unix_path);
}

static int setup(void)
{
	struct errmsg e = { { 0 } };
	int fds[32], n = 0, r, ufd;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (setup_state)
		return setup_state;
	setup_state = TEST_SKIP;
	r = egress_supported(&e);
	if (r < 0) {
		snprintf(skip_reason, sizeof(skip_reason), "%s", e.text);
		fprintf(stderr, "  skip: %s\n", skip_reason);
		return setup_state;
	}
	if (access(PROBE, X_OK) < 0) {
		fprintf(stderr, "  %s missing: %s\n", PROBE, strerror(errno));
		return setup_state = 1 + 100; /* fail, below */
	}
	r = open_listeners(fds, &n);
	if (r < 0) {
		fprintf(stderr, "  skip: cannot listen on 127.0.0.1/127.0.0.2/::1: %s\n", strerror(-r));
		return setup_state;
	}
	snprintf(unix_path, sizeof(unix_path), "/tmp/molly-egress-test-%d.sock", (int) getpid());
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", unix_path);
	unlink(unix_path);
	ufd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (ufd < 0 || bind(ufd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || listen(ufd, 64) < 0)
		return setup_state = 101;
	fds[n++] = ufd;
	server_pid = fork();
	if (server_pid == 0)
		serve(fds, n);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return setup_state = 1;
}

#define SETUP()                                                                                    \
	do {                                                                                       \
		int s_ = setup();                                                                  \
		if (s_ == TEST_SKIP)                                                               \
			return TEST_SKIP;                                                          \
		if (s_ != 1)                                                                       \
			TEST_FAIL_("test setup failed");                                           \
	} while (0)

/* Runs fn in a forked child (the "daemon"; egress_start() moves it into the tree) and
 * returns its result. */
static int in_child(int (*fn)(void))
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(fn());
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 1;
	if (WIFSIGNALED(status)) {
		fprintf(stderr, "  child killed by signal %d\n", WTERMSIG(status));
		return 1;
	}
	return WEXITSTATUS(status);
}

/* ---- helpers for the children ---- */

static int dest(const char *s, struct egress_dest *d)
{
	struct errmsg e = { { 0 } };
	int r = egress_dest_parse(s, d, &e);

	if (r < 0)
		fprintf(stderr, "  %s\n", e.text);
	return r;
}

static int allow(struct egress *eg, enum egress_tier tier, const char *const *list, size_t n)
{
	struct egress_dest d[8];
	struct errmsg e = { { 0 } };
	int r;

	for (size_t i = 0; i < n; i++)
		if (dest(list[i], &d[i]) < 0)
			return -EINVAL;
	r = egress_set_allowed(eg, tier, d, n, &e);
	if (r < 0)
		fprintf(stderr, "  egress_set_allowed: %s\n", e.text);
	return r;
}

/* Sends a command to a probe and returns its answer as a number (or -1 on a broken pipe). */
static long ask(int fd, const char *fmt, ...)
{
	char cmd[512], out[512];
	va_list ap;
	ssize_t n;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (send(fd, cmd, strlen(cmd), MSG_NOSIGNAL) < 0)
		return -1;
	n = recv(fd, out, sizeof(out) - 1, 0);
	if (n <= 0)
		return -1;
	out[n] = 0;
	return strtol(out, NULL, 10);
}

static int ask_str(int fd, const char *cmd, char *out, size_t len)
{
	ssize_t n;

	if (send(fd, cmd, strlen(cmd), MSG_NOSIGNAL) < 0)
		return -1;
	n = recv(fd, out, len - 1, 0);
	if (n <= 0)
		return -1;
	out[n] = 0;
	return 0;
}

/* 0 or errno, from this process. */
static int try_here(const char *kind, int family, const char *addr, int port)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int fd, r = 0;

	len = make_addr(family, addr, port, &ss);
	fd = socket(family, (strcmp(kind, "tcp") == 0 ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	if (strcmp(kind, "udp") == 0)
		r = sendto(fd, "x", 1, 0, (struct sockaddr *) &ss, len) < 0 ? errno : 0;
	else
		r = connect(fd, (struct sockaddr *) &ss, len) < 0 ? errno : 0;
	close(fd);
	return r;
}

struct seen {
	struct egress_denial d[64];
	int n;
};

static void collect(const struct egress_denial *d, void *userdata)
{
	struct seen *s = userdata;

	if (s->n < (int) ELEMENTSOF(s->d))
		s->d[s->n++] = *d;
}

/* Waits until at least want denials arrived (or the generous test deadline passed). */
static int wait_denials(struct egress *eg, struct seen *s, int want)
{
	double deadline = test_wait_deadline_();

	while (s->n < want && test_now_s_() < deadline) {
		struct pollfd p = { .fd = egress_fd(eg), .events = POLLIN };

		if (poll(&p, 1, 10) > 0 && egress_process(eg, collect, s) < 0)
			return -1;
	}
	return s->n;
}

static bool seen_denial(const struct seen *s, const char *dst, uint32_t pid, enum egress_tier tier,
			int protocol)
{
	char buf[64];

	for (int i = 0; i < s->n; i++) {
		if (egress_dest_format(&s->d[i].dest, buf, sizeof(buf)) < 0)
			continue;
		if (strcmp(buf, dst) == 0 && s->d[i].pid == pid && s->d[i].tier == tier &&
		    s->d[i].protocol == protocol)
			return true;
	}
	return false;
}

/* Waits until that denial has been reported (denials come through the helper, and one left
 * over from an earlier ask may arrive first: counting them is not enough). */
static bool wait_denial(struct egress *eg, struct seen *s, const char *dst, uint32_t pid,
			enum egress_tier tier, int protocol)
{
	double deadline = test_wait_deadline_();

	while (!seen_denial(s, dst, pid, tier, protocol) && test_now_s_() < deadline)
		(void) wait_denials(eg, s, s->n + 1);
	return seen_denial(s, dst, pid, tier, protocol);
}

static int start(const char *instance, uid_t uid, gid_t gid, struct egress **ret)
{
	struct errmsg e = { { 0 } };
	int r = egress_start(instance, PROBE, uid, gid, ret, &e);

	if (r < 0)
		fprintf(stderr, "  egress_start: %s\n", e.text);
	return r;
}

static int spawn(struct egress *eg, enum egress_tier tier, pid_t *pid, int *fd)
{
	char *argv[] = { (char *) "egress-probe", NULL };
	struct errmsg e = { { 0 } };
	int r = egress_spawn_worker(eg, tier, argv, pid, fd, &e);

	if (r < 0)
		fprintf(stderr, "  egress_spawn_worker: %s\n", e.text);
	return r;
}

/* ---- tests ---- */

TEST(dest_parse_and_format)
{
	struct egress_dest d;
	char buf[64];

	ASSERT_OK(egress_dest_parse("127.0.0.1:8080", &d, NULL));
	ASSERT_EQ(d.family, AF_INET);
	ASSERT_EQ(d.port, 8080);
	ASSERT_EQ(d.addr[0], 127);
	ASSERT_EQ(d.addr[3], 1);
	ASSERT_OK(egress_dest_format(&d, buf, sizeof(buf)));
	ASSERT_STREQ(buf, "127.0.0.1:8080");
	ASSERT_OK(egress_dest_parse("[::1]:53", &d, NULL));
	ASSERT_EQ(d.family, AF_INET6);
	ASSERT_EQ(d.addr[15], 1);
	ASSERT_OK(egress_dest_format(&d, buf, sizeof(buf)));
	ASSERT_STREQ(buf, "[::1]:53");
	ASSERT_ERR(egress_dest_format(&d, buf, 5), -ENOBUFS);
	ASSERT_ERR(egress_dest_parse("localhost:80", &d, NULL), -EINVAL);
	ASSERT_ERR(egress_dest_parse("127.0.0.1", &d, NULL), -EINVAL);
	ASSERT_ERR(egress_dest_parse("127.0.0.1:65536", &d, NULL), -EINVAL);
	ASSERT_ERR(egress_dest_parse("127.0.0.1:-1", &d, NULL), -EINVAL);
	ASSERT_ERR(egress_dest_parse("::1:80", &d, NULL), -EINVAL);
	ASSERT_ERR(egress_dest_parse("[::1]80", &d, NULL), -EINVAL);
	d.family = AF_UNIX;
	ASSERT_ERR(egress_dest_format(&d, buf, sizeof(buf)), -EINVAL);
	return 0;
}

/* The list {127.0.0.1:P1, [::1]:P1} in tier t1. */
static int allow_p1(struct egress *eg, enum egress_tier tier)
{
	char a[64], b[64];
	const char *list[] = { a, b };

	snprintf(a, sizeof(a), "127.0.0.1:%d", p1);
	snprintf(b, sizeof(b), "[::1]:%d", p1);
	return allow(eg, tier, list, 2);
}

static int child_tier_filter(void)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	struct seen seen = { .n = 0 };
	char want[64], cg[512];
	uint64_t t1_id;
	struct stat st;
	pid_t pid, pid2;
	int fd, fd2;

	ASSERT_OK(start("test", 0, 0, &eg));
	ASSERT_OK(allow_p1(eg, EGRESS_T1));
	ASSERT_OK(spawn(eg, EGRESS_T1, &pid, &fd));
	/* the worker runs in t1 */
	ASSERT_OK(ask_str(fd, "cgroup", cg, sizeof(cg)));
	ASSERT_TRUE(strlen(cg) > 3 && strcmp(cg + strlen(cg) - 3, "/t1") == 0);
	ASSERT_EQ(ask(fd, "pid"), pid);

	/* allowed: TCP connect and UDP sendto, IPv4 and IPv6, and IPv4 through a v6 socket */
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p1), 0);
	ASSERT_EQ(ask(fd, "udp 127.0.0.1:%d", p1), 0);
	ASSERT_EQ(ask(fd, "udpc 127.0.0.1:%d", p1), 0);
	ASSERT_EQ(ask(fd, "tcp [::1]:%d", p1), 0);
	ASSERT_EQ(ask(fd, "udp [::1]:%d", p1), 0);
	ASSERT_EQ(ask(fd, "tcp [::ffff:127.0.0.1]:%d", p1), 0);
	/* denied: another loopback address, another port, IPv6 another port */
	ASSERT_EQ(ask(fd, "tcp 127.0.0.2:%d", p1), EPERM);
	ASSERT_EQ(ask(fd, "udp 127.0.0.2:%d", p1), EPERM);
	ASSERT_EQ(ask(fd, "udpc 127.0.0.2:%d", p1), EPERM);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p2), EPERM);
	ASSERT_EQ(ask(fd, "udp 127.0.0.1:%d", p2), EPERM);
	ASSERT_EQ(ask(fd, "tcp [::1]:%d", p2), EPERM);
	ASSERT_EQ(ask(fd, "udp [::1]:%d", p2), EPERM);
	/* the other ways to connect or send: TCP Fast Open, sendmmsg() */
	ASSERT_EQ(ask(fd, "tfo 127.0.0.1:%d", p1), 0);
	ASSERT_EQ(ask(fd, "tfo 127.0.0.2:%d", p1), EPERM);
	ASSERT_EQ(ask(fd, "mmsg 127.0.0.1:%d", p1), 0);
	ASSERT_EQ(ask(fd, "mmsg 127.0.0.2:%d", p1), EPERM);
	/* the dual-stack way around the IPv4 rule is closed too */
	ASSERT_EQ(ask(fd, "tcp [::ffff:127.0.0.2]:%d", p1), EPERM);
	ASSERT_EQ(ask(fd, "udp [::ffff:127.0.0.2]:%d", p1), EPERM);

	/* every denial reported with the worker's pid, tier, destination and protocol */
	ASSERT_TRUE(wait_denials(eg, &seen, 9) >= 9);
	snprintf(want, sizeof(want), "127.0.0.2:%d", p1);
	ASSERT_TRUE(seen_denial(&seen, want, (uint32_t) pid, EGRESS_T1, IPPROTO_TCP));
	ASSERT_TRUE(seen_denial(&seen, want, (uint32_t) pid, EGRESS_T1, IPPROTO_UDP));
	snprintf(want, sizeof(want), "127.0.0.1:%d", p2);
	ASSERT_TRUE(seen_denial(&seen, want, (uint32_t) pid, EGRESS_T1, IPPROTO_TCP));
	ASSERT_TRUE(seen_denial(&seen, want, (uint32_t) pid, EGRESS_T1, IPPROTO_UDP));
	snprintf(want, sizeof(want), "[::1]:%d", p2);
	ASSERT_TRUE(seen_denial(&seen, want, (uint32_t) pid, EGRESS_T1, IPPROTO_TCP));
	ASSERT_TRUE(seen_denial(&seen, want, (uint32_t) pid, EGRESS_T1, IPPROTO_UDP));
	ASSERT_EQ(stat(egress_cgroup_path(eg, EGRESS_T1), &st), 0);
	t1_id = st.st_ino;
	for (int i = 0; i < seen.n; i++) {
		ASSERT_EQ(seen.d[i].cgroup_id, t1_id);
		ASSERT_TRUE(seen.d[i].realtime_ns > (uint64_t) (time(NULL) - 60) * 1000000000ull);
	}
	/* nothing allowed was reported */
	snprintf(want, sizeof(want), "127.0.0.1:%d", p1);
	ASSERT_TRUE(!seen_denial(&seen, want, (uint32_t) pid, EGRESS_T1, IPPROTO_TCP));

	/* t2 has its own (empty) list: t1's endpoint is closed there */
	ASSERT_OK(spawn(eg, EGRESS_T2, &pid2, &fd2));
	ASSERT_EQ(ask(fd2, "tcp 127.0.0.1:%d", p1), EPERM);
	ASSERT_EQ(ask(fd2, "udp [::1]:%d", p1), EPERM);
	ASSERT_TRUE(wait_denial(eg, &seen, want, (uint32_t) pid2, EGRESS_T2, IPPROTO_TCP));
	close(fd);
	close(fd2);
	return 0;
}

TEST(tier_reaches_only_its_allow_list)
{
	SETUP();
	return in_child(child_tier_filter);
}

static int child_core(void)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct seen seen = { .n = 0 };
	char want[64];
	int sv[2], fd;

	ASSERT_OK(start("test", 0, 0, &eg));
	/* the core: no inet destination at all, loopback included */
	ASSERT_EQ(try_here("tcp", AF_INET, "127.0.0.1", p1), EPERM);
	ASSERT_EQ(try_here("udp", AF_INET, "127.0.0.1", p1), EPERM);
	ASSERT_EQ(try_here("tcp", AF_INET6, "::1", p1), EPERM);
	ASSERT_EQ(try_here("udp", AF_INET6, "::1", p1), EPERM);
	/* ... even after t1 got a list: the core's stays empty */
	ASSERT_OK(allow_p1(eg, EGRESS_T1));
	ASSERT_EQ(try_here("tcp", AF_INET, "127.0.0.1", p1), EPERM);
	/* AF_UNIX is untouched: a socketpair and a connect to a path */
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ASSERT_EQ(write(sv[0], "x", 1), 1);
	close(sv[0]);
	close(sv[1]);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", unix_path);
	ASSERT_EQ(connect(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
	close(fd);

	ASSERT_TRUE(wait_denials(eg, &seen, 5) >= 5);
	snprintf(want, sizeof(want), "127.0.0.1:%d", p1);
	ASSERT_TRUE(seen_denial(&seen, want, (uint32_t) getpid(), EGRESS_CORE, IPPROTO_TCP));
	ASSERT_TRUE(seen_denial(&seen, want, (uint32_t) getpid(), EGRESS_CORE, IPPROTO_UDP));
	snprintf(want, sizeof(want), "[::1]:%d", p1);
	ASSERT_TRUE(seen_denial(&seen, want, (uint32_t) getpid(), EGRESS_CORE, IPPROTO_TCP));
	return 0;
}

TEST(core_connects_nowhere_unix_works)
{
	SETUP();
	return in_child(child_core);
}

/* The privileged helper keeps root, so it sits in its own cgroup with the core's (empty)
 * list. Negative control: a process moved into that cgroup gets EPERM for loopback TCP and
 * UDP, as the helper itself would; the same connects from outside the tree succeed (the
 * TEST below). After egress_free() the helper has left and its cgroup is gone. */
static int child_helper(void)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	char path[PATH_MAX], own[PATH_MAX], line[PATH_MAX + 8], helper_dir[PATH_MAX];
	struct seen seen = { .n = 0 };
	FILE *f;
	int status;
	pid_t helper, pid;

	ASSERT_OK(start("test", 0, 0, &eg));
	helper = egress_helper_pid(eg);
	ASSERT_TRUE(helper > 0);
	snprintf(helper_dir, sizeof(helper_dir), "%s", egress_helper_cgroup_path(eg));
	/* the helper is in <root>/helper (as /proc/PID/cgroup names it, relative to the mount) */
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int) helper);
	f = fopen(path, "re");
	ASSERT_TRUE(f != NULL);
	own[0] = 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "0::", 3) == 0)
			snprintf(own, sizeof(own), "%.*s", (int) sizeof(own) - 1, line + 3);
	fclose(f);
	own[strcspn(own, "\n")] = 0;
	ASSERT_TRUE(own[0] != 0);
	ASSERT_TRUE(strlen(helper_dir) > strlen(own) &&
		    strcmp(helper_dir + strlen(helper_dir) - strlen(own), own) == 0);
	ASSERT_TRUE(strcmp(own + strlen(own) - strlen("/helper"), "/helper") == 0);

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		char procs[PATH_MAX + 16], me[16];
		int fd, n;

		snprintf(procs, sizeof(procs), "%s/cgroup.procs", helper_dir);
		n = snprintf(me, sizeof(me), "%d", (int) getpid());
		fd = open(procs, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, me, (size_t) n) != n)
			_exit(10);
		close(fd);
		if (try_here("tcp", AF_INET, "127.0.0.1", p1) != EPERM)
			_exit(11);
		if (try_here("udp", AF_INET, "127.0.0.1", p1) != EPERM)
			_exit(12);
		if (try_here("tcp", AF_INET6, "::1", p1) != EPERM)
			_exit(13);
		_exit(0);
	}
	ASSERT_TRUE(pid > 0);
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fprintf(stderr, "  in the helper's cgroup: exit %d (10: move, 11: tcp, 12: udp, 13: tcp6 "
				"not EPERM)\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* reported like any denial, as the core's list */
	ASSERT_TRUE(wait_denials(eg, &seen, 3) >= 3);
	snprintf(line, sizeof(line), "127.0.0.1:%d", p1);
	ASSERT_TRUE(seen_denial(&seen, line, (uint32_t) pid, EGRESS_CORE, IPPROTO_TCP));

	eg = egress_free(eg);
	ASSERT_TRUE(access(helper_dir, F_OK) < 0 && errno == ENOENT);
	return 0;
}

TEST(helper_has_no_route_out)
{
	SETUP();
	ASSERT_EQ(in_child(child_helper), 0);
	/* control: from outside the tree the same destinations answer */
	ASSERT_EQ(try_here("tcp", AF_INET, "127.0.0.1", p1), 0);
	ASSERT_EQ(try_here("udp", AF_INET, "127.0.0.1", p1), 0);
	ASSERT_EQ(try_here("tcp", AF_INET6, "::1", p1), 0);
	return 0;
}

static int sync_rd[2], sync_wr[2];

static int child_hold(void)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	char c;

	close(sync_rd[0]);
	close(sync_wr[1]);
	ASSERT_OK(start("test", 0, 0, &eg));
	ASSERT_OK(allow_p1(eg, EGRESS_T1));
	ASSERT_EQ(write(sync_rd[1], "r", 1), 1);
	ASSERT_EQ(read(sync_wr[0], &c, 1), 1);
	return 0;
}

TEST(outside_the_tree_is_unaffected)
{
	char c;
	pid_t pid;
	int status, r = 0;

	SETUP();
	ASSERT_EQ(pipe2(sync_rd, O_CLOEXEC), 0);
	ASSERT_EQ(pipe2(sync_wr, O_CLOEXEC), 0);
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(child_hold());
	close(sync_rd[1]);
	close(sync_wr[0]);
	if (read(sync_rd[0], &c, 1) != 1)
		r = 1;
	/* while an instance filters its tree, this process (outside) reaches everything */
	if (r == 0 && (try_here("tcp", AF_INET, "127.0.0.2", p1) != 0 ||
		       try_here("udp", AF_INET, "127.0.0.2", p1) != 0 ||
		       try_here("tcp", AF_INET, "127.0.0.1", p2) != 0 ||
		       try_here("tcp", AF_INET6, "::1", p2) != 0 ||
		       try_here("udp", AF_INET6, "::1", p2) != 0 ||
		       try_here("tcp", AF_INET, "127.0.0.1", p1) != 0)) {
		fprintf(stderr, "  a process outside the tree was filtered\n");
		r = 1;
	}
	(void) !write(sync_wr[1], "g", 1);
	close(sync_wr[1]);
	close(sync_rd[0]);
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return r;
}

static int child_replace(void)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	struct egress_dest many[EGRESS_MAX_DEST + 1];
	struct errmsg e = { { 0 } };
	char a[64], b[64], c[64];
	const char *l_p2[] = { a }, *l_p1p2[] = { b, a }, *l_p1p3[] = { b, c };
	pid_t pid;
	int fd;

	snprintf(a, sizeof(a), "127.0.0.1:%d", p2);
	snprintf(b, sizeof(b), "127.0.0.1:%d", p1);
	snprintf(c, sizeof(c), "127.0.0.1:%d", p3);
	ASSERT_OK(start("test", 0, 0, &eg));
	ASSERT_OK(allow_p1(eg, EGRESS_T1));
	ASSERT_OK(spawn(eg, EGRESS_T1, &pid, &fd));
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p1), 0);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p2), EPERM);
	/* replace: the old entry is denied now, the new one allowed */
	ASSERT_OK(allow(eg, EGRESS_T1, l_p2, 1));
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p1), EPERM);
	ASSERT_EQ(ask(fd, "tcp [::1]:%d", p1), EPERM);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p2), 0);
	ASSERT_EQ(ask(fd, "udp 127.0.0.1:%d", p2), 0);
	/* empty: everything denied */
	ASSERT_OK(allow(eg, EGRESS_T1, NULL, 0));
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p2), EPERM);
	/* many replaces in a row leave exactly the last list ({P1, P3} for odd i, and i ends at 49) */
	for (int i = 0; i < 50; i++)
		ASSERT_OK(allow(eg, EGRESS_T1, i % 2 ? l_p1p3 : l_p1p2, 2));
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p1), 0);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p3), 0);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p2), EPERM);

	/* an entry in both lists is never denied while lists switch under a connect loop: the
	 * core replaces the list (each replace deletes the old entries right after the switch and
	 * a grace period) for as long as the worker connects */
	{
		char cmd[128], out[128];
		int ok = -1, fails = -1, last = -1, replaces = 0;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		snprintf(cmd, sizeof(cmd), "loop 20000 tcp 127.0.0.1:%d", p1);
		ASSERT_TRUE(send(fd, cmd, strlen(cmd), MSG_NOSIGNAL) > 0);
		while (poll(&pfd, 1, 0) == 0) {
			ASSERT_OK(allow(eg, EGRESS_T1, replaces % 2 ? l_p1p2 : l_p1p3, 2));
			replaces++;
		}
		n = recv(fd, out, sizeof(out) - 1, 0);
		ASSERT_TRUE(n > 0);
		out[n] = 0;
		ASSERT_EQ(sscanf(out, "%d %d %d", &ok, &fails, &last), 3);
		if (fails)
			fprintf(stderr, "  %d of 20000 connects to an always-allowed endpoint failed (errno %d)\n",
				fails, last);
		ASSERT_EQ(fails, 0);
		ASSERT_EQ(ok, 20000);
		ASSERT_TRUE(replaces >= 5); /* they did overlap */
		if (getenv("MOLLY_TEST_VERBOSE"))
			fprintf(stderr, "  %d replaces during 20000 connects\n", replaces);
	}

	/* bad input is refused and leaves the list in force */
	memset(many, 0, sizeof(many));
	for (size_t i = 0; i < ELEMENTSOF(many); i++)
		many[i].family = AF_INET;
	ASSERT_ERR(egress_set_allowed(eg, EGRESS_T1, many, ELEMENTSOF(many), &e), -E2BIG);
	many[3].family = AF_UNIX;
	ASSERT_ERR(egress_set_allowed(eg, EGRESS_T1, many, 4, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "destination 3") != NULL);
	ASSERT_ERR(egress_set_allowed(eg, (enum egress_tier) 7, many, 1, &e), -EINVAL);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p1), 0);
	/* the largest list fits */
	for (size_t i = 0; i < EGRESS_MAX_DEST; i++) {
		many[i].family = AF_INET;
		many[i].addr[0] = 10;
		many[i].addr[2] = (uint8_t) (i >> 8);
		many[i].addr[3] = (uint8_t) i;
		many[i].port = 443;
	}
	ASSERT_OK(dest(b, &many[EGRESS_MAX_DEST - 1]));
	ASSERT_OK(egress_set_allowed(eg, EGRESS_T1, many, EGRESS_MAX_DEST, &e));
	ASSERT_OK(egress_set_allowed(eg, EGRESS_T1, many, EGRESS_MAX_DEST, &e));
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p1), 0);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p3), EPERM);
	close(fd);
	return 0;
}

TEST(allow_list_replace_is_atomic_and_takes_effect)
{
	SETUP();
	return in_child(child_replace);
}

/* Two instances side by side: same instance name, different pids, different lists. */
static int pipes[2][2][2]; /* [instance][ready/go][rd/wr] */

static int child_side(int k)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	char path[600], a[64], c;
	const char *list[] = { a };
	pid_t pid;
	int fd, mine = k == 0 ? p1 : p2, other = k == 0 ? p2 : p1;

	snprintf(a, sizeof(a), "127.0.0.1:%d", mine);
	ASSERT_OK(start("side", 0, 0, &eg));
	ASSERT_OK(allow(eg, EGRESS_T1, list, 1));
	ASSERT_OK(spawn(eg, EGRESS_T1, &pid, &fd));
	snprintf(path, sizeof(path), "%s", egress_cgroup_path(eg, EGRESS_T1));
	ASSERT_EQ(write(pipes[k][0][1], path, strlen(path) + 1), (ssize_t) strlen(path) + 1);
	ASSERT_EQ(read(pipes[k][1][0], &c, 1), 1); /* both are up */
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", mine), 0);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", other), EPERM);
	ASSERT_EQ(ask(fd, "udp 127.0.0.1:%d", mine), 0);
	ASSERT_EQ(ask(fd, "udp 127.0.0.1:%d", other), EPERM);
	close(fd);
	return 0;
}

static int child_side0(void)
{
	return child_side(0);
}

static int child_side1(void)
{
	return child_side(1);
}

TEST(two_instances_side_by_side)
{
	char path[2][600];
	pid_t pid[2];
	int status;

	SETUP();
	for (int k = 0; k < 2; k++) {
		ASSERT_EQ(pipe2(pipes[k][0], O_CLOEXEC), 0);
		ASSERT_EQ(pipe2(pipes[k][1], O_CLOEXEC), 0);
	}
	fflush(NULL);
	for (int k = 0; k < 2; k++) {
		pid[k] = fork();
		if (pid[k] == 0)
			_exit(k == 0 ? child_side0() : child_side1());
	}
	for (int k = 0; k < 2; k++) {
		ssize_t n = read(pipes[k][0][0], path[k], sizeof(path[k]));

		ASSERT_TRUE(n > 0);
		path[k][n - 1] = 0;
	}
	ASSERT_TRUE(strcmp(path[0], path[1]) != 0);
	ASSERT_TRUE(strstr(path[0], "/molly-side-") != NULL);
	for (int k = 0; k < 2; k++)
		ASSERT_EQ(write(pipes[k][1][1], "g", 1), 1);
	for (int k = 0; k < 2; k++) {
		ASSERT_EQ(waitpid(pid[k], &status, 0), pid[k]);
		ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	/* and both cleaned up after themselves */
	for (int k = 0; k < 2; k++) {
		char *slash = strrchr(path[k], '/');

		*slash = 0;
		ASSERT_TRUE(access(path[k], F_OK) < 0 && errno == ENOENT);
	}
	return 0;
}

static int child_free(void)
{
	struct egress *eg = NULL;
	char root[600], cg_before[600], cg_after[600];
	FILE *f;
	pid_t pid;
	int fd;

	f = fopen("/proc/self/cgroup", "re");
	ASSERT_TRUE(f);
	while (fgets(cg_before, sizeof(cg_before), f) && strncmp(cg_before, "0::", 3) != 0)
		;
	fclose(f);
	ASSERT_OK(start("test", 0, 0, &eg));
	snprintf(root, sizeof(root), "%s", egress_cgroup_path(eg, EGRESS_CORE));
	*strrchr(root, '/') = 0;
	ASSERT_OK(spawn(eg, EGRESS_T2, &pid, &fd));
	ASSERT_EQ(access(root, F_OK), 0);
	ASSERT_EQ(try_here("tcp", AF_INET, "127.0.0.1", p1), EPERM);
	eg = egress_free(eg);
	ASSERT_TRUE(eg == NULL);
	/* no cgroup directory left, the worker is gone, we are back where we were */
	ASSERT_TRUE(access(root, F_OK) < 0 && errno == ENOENT);
	ASSERT_TRUE(kill(pid, 0) < 0 && errno == ESRCH);
	f = fopen("/proc/self/cgroup", "re");
	ASSERT_TRUE(f);
	while (fgets(cg_after, sizeof(cg_after), f) && strncmp(cg_after, "0::", 3) != 0)
		;
	fclose(f);
	ASSERT_STREQ(cg_after, cg_before);
	ASSERT_EQ(try_here("tcp", AF_INET, "127.0.0.1", p1), 0);
	ASSERT_TRUE(egress_free(NULL) == NULL);
	close(fd);
	return 0;
}

TEST(free_leaves_no_cgroup_behind)
{
	SETUP();
	return in_child(child_free);
}

struct exit_seen {
	pid_t pid;
	enum egress_tier tier;
	int status;
	int n;
};

static void on_exit_cb(pid_t pid, enum egress_tier tier, int status, void *userdata)
{
	struct exit_seen *x = userdata;

	x->pid = pid;
	x->tier = tier;
	x->status = status;
	x->n++;
}

static int wait_exit(struct egress *eg, struct exit_seen *x, int want)
{
	double deadline = test_wait_deadline_();

	while (x->n < want && test_now_s_() < deadline) {
		struct pollfd p = { .fd = egress_fd(eg), .events = POLLIN };

		if (poll(&p, 1, 10) > 0)
			(void) egress_process(eg, NULL, NULL);
	}
	return x->n;
}

static int child_reap(void)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	struct exit_seen x = { 0 };
	struct errmsg e = { { 0 } };
	char *bad_argv[] = { (char *) "x", NULL };
	char proc[64];
	pid_t pid, dummy;
	int fd, dfd = -1;

	ASSERT_OK(start("test", 0, 0, &eg));
	egress_set_exit_handler(eg, on_exit_cb, &x);
	ASSERT_OK(spawn(eg, EGRESS_T3, &pid, &fd));
	ASSERT_EQ(ask(fd, "pid"), pid);
	ASSERT_OK(egress_kill_worker(eg, pid, SIGKILL, &e));
	ASSERT_EQ(wait_exit(eg, &x, 1), 1);
	ASSERT_EQ(x.pid, pid);
	ASSERT_EQ(x.tier, EGRESS_T3);
	ASSERT_TRUE(WIFSIGNALED(x.status) && WTERMSIG(x.status) == SIGKILL);
	/* reaped: no zombie left in /proc */
	snprintf(proc, sizeof(proc), "/proc/%d", (int) pid);
	ASSERT_TRUE(access(proc, F_OK) < 0);
	ASSERT_ERR(egress_kill_worker(eg, pid, SIGTERM, &e), -ESRCH);
	ASSERT_ERR(egress_kill_worker(eg, getpid(), SIGTERM, &e), -ESRCH);
	close(fd);

	/* a worker that exits by itself */
	ASSERT_OK(spawn(eg, EGRESS_T1, &pid, &fd));
	ASSERT_TRUE(send(fd, "exit 3", 6, MSG_NOSIGNAL) == 6);
	ASSERT_EQ(wait_exit(eg, &x, 2), 2);
	ASSERT_EQ(x.pid, pid);
	ASSERT_TRUE(WIFEXITED(x.status) && WEXITSTATUS(x.status) == 3);
	close(fd);

	/* and one whose socket we close */
	ASSERT_OK(spawn(eg, EGRESS_T2, &pid, &fd));
	close(fd);
	ASSERT_EQ(wait_exit(eg, &x, 3), 3);
	ASSERT_TRUE(WIFEXITED(x.status) && WEXITSTATUS(x.status) == 0);

	/* bad spawns */
	ASSERT_ERR(egress_spawn_worker(eg, EGRESS_CORE, bad_argv, &dummy, &dfd, &e), -EINVAL);
	ASSERT_TRUE(dfd == -1);
	return 0;
}

TEST(killed_worker_is_reaped_and_reported)
{
	SETUP();
	return in_child(child_reap);
}

static int child_uid(void)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	char cg[512], orig[600], *slash;
	pid_t pid;
	int fd;

	ASSERT_OK(start("test", 65534, 65534, &eg));
	ASSERT_OK(allow_p1(eg, EGRESS_T1));
	ASSERT_OK(spawn(eg, EGRESS_T1, &pid, &fd));
	ASSERT_EQ(ask(fd, "uid"), 65534);
	ASSERT_EQ(ask(fd, "gid"), 65534);
	ASSERT_EQ(ask(fd, "nnp"), 1);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p1), 0);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.2:%d", p1), EPERM);
	/* an unprivileged worker cannot leave its cgroup: not for its sibling, not for the top */
	ASSERT_OK(ask_str(fd, "cgroup", cg, sizeof(cg)));
	ASSERT_EQ(ask(fd, "move %s", egress_cgroup_path(eg, EGRESS_T3)) != 0, 1);
	snprintf(orig, sizeof(orig), "%s", egress_cgroup_path(eg, EGRESS_CORE));
	slash = strrchr(orig, '/');
	*slash = 0;
	slash = strrchr(orig, '/');
	*slash = 0;
	ASSERT_EQ(ask(fd, "move %s", orig) != 0, 1);
	ASSERT_EQ(ask(fd, "tcp 127.0.0.2:%d", p1), EPERM);
	close(fd);
	return 0;
}

TEST(worker_runs_unprivileged_and_stays_in_its_cgroup)
{
	SETUP();
	return in_child(child_uid);
}

static int child_errors(void)
{
	struct egress *eg = NULL;
	struct errmsg e = { { 0 } };

	ASSERT_ERR(egress_start("bad/name", PROBE, 0, 0, &eg, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "instance name") != NULL);
	ASSERT_ERR(egress_start("", PROBE, 0, 0, &eg, &e), -EINVAL);
	ASSERT_ERR(egress_start("ok", "relative/path", 0, 0, &eg, &e), -EINVAL);
	ASSERT_TRUE(eg == NULL);
	/* a worker that does not exist: the exec's error comes back */
	{
		_cleanup_(egress_freep) struct egress *eg2 = NULL;
		char *argv[] = { (char *) "nope", NULL };
		pid_t pid;
		int fd = -1;

		ASSERT_OK(egress_start("test", "/nonexistent/molly-egress", 0, 0, &eg2, &e));
		ASSERT_ERR(egress_spawn_worker(eg2, EGRESS_T1, argv, &pid, &fd, &e), -ENOENT);
		ASSERT_TRUE(strstr(e.text, "/nonexistent/molly-egress") != NULL);
		ASSERT_TRUE(fd == -1);
	}
	/* not root: refused with the reason, nothing created */
	ASSERT_EQ(setresgid(65534, 65534, 65534), 0);
	ASSERT_EQ(setresuid(65534, 65534, 65534), 0);
	ASSERT_ERR(egress_start("test", PROBE, 0, 0, &eg, &e), -EPERM);
	ASSERT_TRUE(strstr(e.text, "root") != NULL);
	ASSERT_ERR(egress_supported(&e), -EPERM);
	return 0;
}

TEST(start_errors_are_clear)
{
	SETUP();
	return in_child(child_errors);
}

static int child_stale(void)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	char stale[700], root[600];
	pid_t dead;
	int status;

	dead = fork();
	if (dead == 0)
		_exit(0);
	ASSERT_EQ(waitpid(dead, &status, 0), dead);
	/* what a SIGKILLed daemon + helper leave: the subtree of a pid that is gone */
	ASSERT_OK(start("stale", 0, 0, &eg));
	snprintf(root, sizeof(root), "%s", egress_cgroup_path(eg, EGRESS_CORE));
	*strrchr(root, '/') = 0;
	*strrchr(root, '/') = 0; /* the base */
	eg = egress_free(eg);
	snprintf(stale, sizeof(stale), "%s/molly-stale-%d", root, (int) dead);
	ASSERT_EQ(mkdir(stale, 0755), 0);
	snprintf(stale, sizeof(stale), "%s/molly-stale-%d/t1", root, (int) dead);
	ASSERT_EQ(mkdir(stale, 0755), 0);
	ASSERT_OK(start("stale", 0, 0, &eg));
	*strrchr(stale, '/') = 0;
	ASSERT_TRUE(access(stale, F_OK) < 0 && errno == ENOENT);
	return 0;
}

TEST(stale_subtree_of_a_dead_daemon_is_removed)
{
	SETUP();
	return in_child(child_stale);
}

static int child_helper_dies(void)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	struct errmsg e = { { 0 } };
	pid_t helper, pid, dummy;
	int fd, dfd = -1, status;
	char *argv[] = { (char *) "egress-probe", NULL };

	ASSERT_OK(start("dies", 0, 0, &eg));
	ASSERT_OK(allow_p1(eg, EGRESS_T1));
	ASSERT_OK(spawn(eg, EGRESS_T1, &pid, &fd));
	helper = egress_helper_pid(eg);
	ASSERT_TRUE(helper > 0);
	ASSERT_EQ(kill(helper, SIGKILL), 0);
	ASSERT_EQ(waitpid(helper, &status, 0), helper);
	/* fail closed: the attachments outlive the helper */
	ASSERT_EQ(try_here("tcp", AF_INET, "127.0.0.1", p1), EPERM);
	ASSERT_EQ(try_here("udp", AF_INET6, "::1", p1), EPERM);
	/* the worker was told (PR_SET_PDEATHSIG) and is gone with it */
	ASSERT_TRUE(TEST_WAIT_UNTIL(kill(pid, 0) < 0));
	/* nothing more can be changed, and the API says so */
	ASSERT_ERR(egress_set_allowed(eg, EGRESS_CORE, NULL, 0, &e), -ENOTCONN);
	ASSERT_ERR(egress_spawn_worker(eg, EGRESS_T1, argv, &dummy, &dfd, &e), -ENOTCONN);
	ASSERT_ERR(egress_process(eg, NULL, NULL), -ENOTCONN);
	ASSERT_ERR(egress_seal(eg, &e), -ENOTCONN);
	close(fd);
	return 0;
}

TEST(helper_death_fails_closed)
{
	char base[600];
	int r;

	SETUP();
	r = in_child(child_helper_dies);
	ASSERT_EQ(r, 0);
	/* its subtree stayed (fail closed) and the next start of the same name removes it */
	{
		struct errmsg e = { { 0 } };
		pid_t pid;
		int status;

		fflush(NULL);
		pid = fork();
		if (pid == 0) {
			struct egress *eg2 = NULL;

			if (egress_start("dies", PROBE, 0, 0, &eg2, &e) < 0) {
				fprintf(stderr, "  %s\n", e.text);
				_exit(1);
			}
			snprintf(base, sizeof(base), "%s", egress_cgroup_path(eg2, EGRESS_CORE));
			*strrchr(base, '/') = 0;
			*strrchr(base, '/') = 0;
			eg2 = egress_free(eg2);
			/* nothing named molly-dies-* is left under the base */
			DIR *d = opendir(base);
			struct dirent *de;

			while (d && (de = readdir(d)))
				if (strncmp(de->d_name, "molly-dies-", 11) == 0) {
					fprintf(stderr, "  left behind: %s/%s\n", base, de->d_name);
					_exit(1);
				}
			if (d)
				closedir(d);
			_exit(0);
		}
		ASSERT_EQ(waitpid(pid, &status, 0), pid);
		ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	return 0;
}

static int seal_pipe[2];

static int child_sealed(void)
{
	struct egress *eg = NULL;
	struct errmsg e = { { 0 } };
	char root[600], t1[600];
	pid_t pid;
	int fd;

	ASSERT_OK(start("seal", 0, 0, &eg));
	ASSERT_OK(allow_p1(eg, EGRESS_T1));
	ASSERT_OK(egress_seal(eg, &e));
	ASSERT_OK(egress_seal(eg, &e)); /* idempotent */
	ASSERT_OK(spawn(eg, EGRESS_T1, &pid, &fd));
	ASSERT_EQ(ask(fd, "tcp 127.0.0.1:%d", p1), 0);
	snprintf(t1, sizeof(t1), "%s", egress_cgroup_path(eg, EGRESS_T1));
	snprintf(root, sizeof(root), "%s", t1);
	*strrchr(root, '/') = 0;
	eg = egress_free(eg);
	/* the workers and their cgroups are gone at once ... */
	ASSERT_TRUE(kill(pid, 0) < 0 && errno == ESRCH);
	ASSERT_TRUE(access(t1, F_OK) < 0 && errno == ENOENT);
	/* ... but the core is still confined: no way out through the helper */
	ASSERT_EQ(try_here("tcp", AF_INET, "127.0.0.1", p1), EPERM);
	ASSERT_EQ(try_here("udp", AF_INET6, "::1", p1), EPERM);
	ASSERT_ERR(egress_start("seal", PROBE, 0, 0, &eg, &e), -EALREADY);
	ASSERT_TRUE(strstr(e.text, "confined") != NULL);
	ASSERT_EQ(access(root, F_OK), 0);
	ASSERT_EQ(write(seal_pipe[1], root, strlen(root) + 1), (ssize_t) strlen(root) + 1);
	close(fd);
	return 0;
}

TEST(sealed_core_stays_filtered_until_exit)
{
	char root[600];
	ssize_t n;
	int r;

	SETUP();
	ASSERT_EQ(pipe2(seal_pipe, O_CLOEXEC), 0);
	r = in_child(child_sealed);
	close(seal_pipe[1]);
	n = read(seal_pipe[0], root, sizeof(root));
	close(seal_pipe[0]);
	ASSERT_EQ(r, 0);
	ASSERT_TRUE(n > 0);
	/* once the core has exited, the helper removes the rest */
	ASSERT_TRUE(TEST_WAIT_UNTIL(access(root, F_OK) < 0 && errno == ENOENT));
	return 0;
}

static int crash_pipe[2];

static int child_crash(void)
{
	struct egress *eg = NULL;
	char msg[700];
	pid_t pid;
	int fd;

	ASSERT_OK(start("crash", 0, 0, &eg));
	ASSERT_OK(spawn(eg, EGRESS_T2, &pid, &fd));
	snprintf(msg, sizeof(msg), "%d %s", (int) pid, egress_cgroup_path(eg, EGRESS_CORE));
	ASSERT_EQ(write(crash_pipe[1], msg, strlen(msg) + 1), (ssize_t) strlen(msg) + 1);
	_exit(0); /* no egress_free(): as if the daemon crashed */
}

TEST(core_crash_cleans_up)
{
	char msg[700], *root;
	int worker = 0, r;
	ssize_t n;

	SETUP();
	ASSERT_EQ(pipe2(crash_pipe, O_CLOEXEC), 0);
	r = in_child(child_crash);
	close(crash_pipe[1]);
	n = read(crash_pipe[0], msg, sizeof(msg));
	close(crash_pipe[0]);
	ASSERT_EQ(r, 0);
	ASSERT_TRUE(n > 0);
	root = strchr(msg, ' ');
	ASSERT_TRUE(root);
	*root++ = 0;
	worker = atoi(msg);
	*strrchr(root, '/') = 0;
	/* the helper saw the control socket close: workers killed, subtree removed */
	ASSERT_TRUE(TEST_WAIT_UNTIL(access(root, F_OK) < 0 && errno == ENOENT));
	ASSERT_TRUE(worker > 0 && kill(worker, 0) < 0 && errno == ESRCH);
	return 0;
}

/* Root, but without CAP_BPF / CAP_SYS_ADMIN / CAP_PERFMON: the load is refused. */
static int child_no_bpf(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
	struct egress *eg = NULL;
	struct errmsg e = { { 0 } };
	char own[600], base[600];
	FILE *f;
	DIR *dir;

	ASSERT_EQ(syscall(SYS_capget, &h, d), 0);
	for (int i = 0; i < 2; i++) {
		uint32_t drop = 0;

		for (int cap = 0; cap < 64; cap++)
			if ((cap == 21 /* SYS_ADMIN */ || cap == 38 /* PERFMON */ || cap == 39 /* BPF */) &&
			    cap / 32 == i)
				drop |= 1u << (cap % 32);
		d[i].effective &= ~drop;
		d[i].permitted &= ~drop;
		d[i].inheritable &= ~drop;
	}
	ASSERT_EQ(syscall(SYS_capset, &h, d), 0);
	ASSERT_ERR(egress_supported(&e), -EPERM);
	ASSERT_ERR(egress_start("nobpf", PROBE, 0, 0, &eg, &e), -EPERM);
	ASSERT_TRUE(strstr(e.text, "refused to load") != NULL);
	ASSERT_TRUE(eg == NULL);
	/* fail closed and clean: still in our own cgroup, nothing named molly-nobpf-* left */
	f = fopen("/proc/self/cgroup", "re");
	ASSERT_TRUE(f);
	while (fgets(own, sizeof(own), f) && strncmp(own, "0::", 3) != 0)
		;
	fclose(f);
	ASSERT_TRUE(strstr(own, "molly-") == NULL);
	f = fopen("/proc/self/mountinfo", "re");
	ASSERT_TRUE(f);
	base[0] = 0;
	while (fgets(own, sizeof(own), f))
		if (strstr(own, " - cgroup2 ")) {
			sscanf(own, "%*s %*s %*s %*s %599s", base);
			break;
		}
	fclose(f);
	dir = opendir(base);
	ASSERT_TRUE(dir);
	for (struct dirent *de; (de = readdir(dir));)
		ASSERT_TRUE(strncmp(de->d_name, "molly-nobpf-", 12) != 0);
	closedir(dir);
	return 0;
}

TEST(bpf_refused_fails_closed_and_clean)
{
	SETUP();
	return in_child(child_no_bpf);
}
