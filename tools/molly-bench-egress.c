/* SPDX-License-Identifier: MIT */
/*
 * molly-bench-egress: what the egress filter costs a connect(). TCP connect() latency on
 * loopback to a listener outside the filtered tree, from a process in a filtered tier cgroup
 * (t1 with a one-entry allow-list: the allowed path, the one every real request takes) and
 * from an unfiltered cgroup (the one the benchmark was started in, no programs). It is the
 * same worker process for both: between rounds it moves itself from one cgroup to the other
 * (a socket is judged by the cgroup it was created in), rounds alternate ABBA so that drift
 * on a shared machine hits both sides alike; p50/p99 of each and the p50 overhead. Then a second pass
 * with BPF run-time statistics on (BPF_ENABLE_STATS, i.e. kernel.bpf_stats_enabled=1 for as
 * long as the fd is open, restored by the kernel when it closes) gives the programs' own
 * run time, run_time_ns / run_cnt from bpf_obj_get_info_by_fd() (libbpf 1.1's name for bpf_prog_get_info_by_fd()). Root only.
 *
 *   molly-bench-egress [--connects N] [--round N] [--aa] [--json]
 *
 * --aa: the A/A control: both series unfiltered, so the "overhead" it prints is the noise
 * floor of this machine at this moment.
 *
 * It starts itself as the worker (--worker T1_DIR PLAIN_DIR, through egress_spawn_worker(),
 * as root so that it may move between the two cgroups, which a real worker cannot); only the
 * connect() call is timed, not socket() or close() (SO_LINGER 0: no TIME_WAIT pile-up).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bench-util.h"
#include "egress/cgroup.h"
#include "egress/egress.h"

#define MAX_ROUND 4096



static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return x < y ? -1 : x > y;
}

/* p50 of one round, without reordering it. */
static uint64_t round_p50(const uint64_t *ns, int n)
{
	static uint64_t tmp[MAX_ROUND];

	memcpy(tmp, ns, (size_t) n * sizeof(tmp[0]));
	qsort(tmp, (size_t) n, sizeof(tmp[0]), cmp_u64);
	return tmp[n / 2];
}

/* n timed connects to 127.0.0.1:port; 0 or -errno of the first failure. */
static int connects(int port, int n, uint64_t *ns)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int i = 0; i < n; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), r;
		uint64_t t0;

		if (fd < 0)
			return -errno;
		t0 = now_ns();
		r = connect(fd, (struct sockaddr *) &a, sizeof(a));
		ns[i] = now_ns() - t0;
		if (r < 0) {
			r = -errno;
			close(fd);
			return r;
		}
		(void) setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(fd);
	}
	return 0;
}

static int move_self(const char *dir)
{
	struct errmsg e;

	return cgroup2_move(dir, getpid(), &e);
}

/* --worker T1 PLAIN: "PORT N ORDER" on fd 3, ORDER "fu", "uf", "au", "ua" or "f" (f:
 * filtered, in T1; u: unfiltered, in PLAIN; a: unfiltered, reported as the first series) -> N latencies (uint64 ns) per letter, filtered first; or one
 * int64 -errno. It always returns to T1 before answering. */
static int worker_main(const char *t1, const char *plain)
{
	static uint64_t ns[2 * MAX_ROUND];
	char cmd[64], order[4];
	ssize_t got;
	int port, n, r = 0;

	while ((got = recv(3, cmd, sizeof(cmd) - 1, 0)) > 0) {
		cmd[got] = 0;
		if (sscanf(cmd, "%d %d %3s", &port, &n, order) != 3 || n < 1 || n > MAX_ROUND)
			return 2;
		r = 0;
		for (const char *o = order; *o && r == 0; o++) {
			/* 'a' (--aa): the "filtered" slot, measured unfiltered */
			bool first = *o != 'u';

			r = move_self(*o == 'f' ? t1 : plain);
			if (r == 0)
				r = connects(port, n, ns + (first ? 0 : n));
		}
		if (r == 0)
			r = move_self(t1);
		if (r < 0) {
			int64_t err = r;

			(void) send(3, &err, sizeof(err), 0);
			continue;
		}
		if (send(3, ns, (size_t) n * strlen(order) * sizeof(ns[0]), 0) < 0)
			return 1;
	}
	return 0;
}

/* ---- the listener, outside the tree ---- */

static int listener(int *ret_port, pid_t *ret_pid)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	pid_t pid;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return -errno;
	(void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(fd, 4096) < 0 ||
	    getsockname(fd, (struct sockaddr *) &a, &l) < 0) {
		close(fd);
		return -errno;
	}
	pid = fork();
	if (pid == 0) {
		for (;;) {
			int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

			if (c >= 0)
				close(c);
		}
	}
	close(fd);
	if (pid < 0)
		return -errno;
	*ret_port = ntohs(a.sin_port);
	*ret_pid = pid;
	return 0;
}

/* ---- the "daemon": egress instance in a child, worker fd handed to us ---- */

static int send_fd(int sock, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u = { 0 };
	char b = 'f';
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };

	CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
	CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
	CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), &fd, sizeof(int));
	return sendmsg(sock, &mh, 0) < 0 ? -errno : 0;
}

static int recv_fd(int sock, int *ret)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	char b;
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c;

	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) <= 0)
		return -EIO;
	c = CMSG_FIRSTHDR(&mh);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		return -EIO;
	memcpy(ret, CMSG_DATA(c), sizeof(int));
	return 0;
}

/* Runs in the child: start, allow 127.0.0.1:port in t1, spawn ourselves as the worker, pass
 * its socket and the t1 path up, then wait for EOF and clean up. */
static int daemon_main(int sock, const char *self, int port)
{
	_cleanup_(egress_freep) struct egress *eg = NULL;
	char mount[4096], plain[4096], t1[4096];
	char *argv[] = { (char *) "molly-bench-egress", (char *) "--worker", t1, plain, NULL };
	struct egress_dest d = { .family = AF_INET, .addr = { 127, 0, 0, 1 }, .port = (uint16_t) port };
	struct errmsg e = { { 0 } };
	const char *path;
	pid_t pid;
	int fd, r;
	char c;

	/* the unfiltered side: where we are now (outside the tree the instance will make) */
	r = cgroup2_mount(mount, sizeof(mount), &e);
	if (r >= 0)
		r = cgroup2_path_of(0, mount, plain, sizeof(plain), &e);
	if (r >= 0)
		r = egress_start("bench", self, 0, 0, &eg, &e);
	if (r >= 0) {
		snprintf(t1, sizeof(t1), "%s", egress_cgroup_path(eg, EGRESS_T1));
		r = egress_set_allowed(eg, EGRESS_T1, &d, 1, &e);
	}
	if (r >= 0)
		r = egress_spawn_worker(eg, EGRESS_T1, argv, &pid, &fd, &e);
	if (r < 0) {
		fprintf(stderr, "molly-bench-egress: %s\n", e.text);
		return 1;
	}
	path = egress_cgroup_path(eg, EGRESS_T1);
	if (send_fd(sock, fd) < 0 || send(sock, path, strlen(path) + 1, 0) < 0)
		return 1;
	(void) !read(sock, &c, 1); /* until the parent is done */
	return 0;
}

/* ---- BPF statistics of the programs attached to the t1 cgroup ---- */

struct prog_stat {
	char name[32];
	uint64_t run_time_ns, run_cnt;
};

static int prog_stats(const char *cgroup, struct prog_stat *out, int max)
{
	static const enum bpf_attach_type types[] = { BPF_CGROUP_INET4_CONNECT, BPF_CGROUP_INET6_CONNECT,
						      BPF_CGROUP_UDP4_SENDMSG, BPF_CGROUP_UDP6_SENDMSG };
	int cg = open(cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC), n = 0;

	if (cg < 0)
		return -errno;
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]) && n < max; t++) {
		uint32_t ids[8], cnt = 8, flags = 0;

		if (bpf_prog_query(cg, types[t], 0, &flags, ids, &cnt) < 0)
			continue;
		for (uint32_t i = 0; i < cnt && n < max; i++) {
			struct bpf_prog_info info;
			uint32_t len = sizeof(info);
			int fd = bpf_prog_get_fd_by_id(ids[i]);

			if (fd < 0)
				continue;
			memset(&info, 0, sizeof(info));
			if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
				snprintf(out[n].name, sizeof(out[n].name), "%s", info.name);
				out[n].run_time_ns = info.run_time_ns;
				out[n].run_cnt = info.run_cnt;
				n++;
			}
			close(fd);
		}
	}
	close(cg);
	return n;
}

/* One round: n connects per letter of order; filtered results to filt, unfiltered to unf. */
static int ask_round(int wfd, int port, int n, const char *order, uint64_t *filt, uint64_t *unf)
{
	static uint64_t buf[2 * MAX_ROUND];
	size_t k = strlen(order);
	char cmd[64];
	ssize_t got;

	snprintf(cmd, sizeof(cmd), "%d %d %s", port, n, order);
	if (send(wfd, cmd, strlen(cmd), 0) < 0)
		return -errno;
	got = recv(wfd, buf, sizeof(buf), 0);
	if (got == sizeof(int64_t))
		return (int) ((int64_t *) buf)[0];
	if (got != (ssize_t) ((size_t) n * k * sizeof(buf[0])))
		return -EIO;
	memcpy(filt, buf, (size_t) n * sizeof(buf[0]));
	if (k == 2)
		memcpy(unf, buf + n, (size_t) n * sizeof(buf[0]));
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = { { "connects", required_argument, NULL, 'n' },
					      { "round", required_argument, NULL, 'r' },
					      { "json", no_argument, NULL, 'j' },
					      { "aa", no_argument, NULL, 'a' },
					      { "worker", no_argument, NULL, 'w' },
					      { "help", no_argument, NULL, 'h' },
					      {} };
	int n_total = 20000, round = 250, json = 0, aa = 0, c, port = 0, sv[2], wfd = -1, r, status;
	double *paired = NULL, paired_med = 0;
	uint64_t *filt = NULL, *unf = NULL, before_rt = 0, before_cnt = 0, stat_rt = 0, stat_cnt = 0;
	struct prog_stat st[16], st2[16];
	char self[4096], t1[4096];
	struct errmsg e = { { 0 } };
	pid_t server = 0, daemon = 0;
	int n_st, stats_fd, stat_n = 2000;
	ssize_t l;

	while ((c = getopt_long(argc, argv, "n:r:jawh", opts, NULL)) >= 0) {
		switch (c) {
		case 'a':
			aa = 1;
			break;
		case 'n':
			n_total = atoi(optarg);
			break;
		case 'r':
			round = atoi(optarg);
			break;
		case 'j':
			json = 1;
			break;
		case 'w':
			if (optind + 2 > argc)
				return 2;
			return worker_main(argv[optind], argv[optind + 1]);
		default:
			fprintf(stderr, "usage: molly-bench-egress [--connects N] [--round N] [--aa] [--json]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (n_total < 100 || round < 10 || round > MAX_ROUND || n_total % round) {
		fprintf(stderr, "molly-bench-egress: --connects must be >= 100 and a multiple of "
				"--round (10..%d)\n", MAX_ROUND);
		return 2;
	}
	if (egress_supported(&e) < 0) {
		fprintf(stderr, "molly-bench-egress: %s\n", e.text);
		return 77;
	}
	l = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (l <= 0)
		return 1;
	self[l] = 0;
	filt = calloc((size_t) n_total, sizeof(*filt));
	unf = calloc((size_t) n_total, sizeof(*unf));
	paired = calloc((size_t) (n_total / round), sizeof(*paired));
	if (!filt || !unf || !paired)
		return 1;
	r = listener(&port, &server);
	if (r < 0) {
		fprintf(stderr, "molly-bench-egress: cannot listen on 127.0.0.1: %s\n", strerror(-r));
		return 1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return 1;
	fflush(NULL);
	daemon = fork();
	if (daemon == 0) {
		close(sv[0]);
		_exit(daemon_main(sv[1], self, port));
	}
	close(sv[1]);
	if (recv_fd(sv[0], &wfd) < 0 || recv(sv[0], t1, sizeof(t1), 0) <= 0) {
		fprintf(stderr, "molly-bench-egress: the egress instance did not start\n");
		r = 1;
		goto out;
	}

	/* warm-up both sides, then interleaved rounds, ABBA */
	if ((r = ask_round(wfd, port, round, aa ? "au" : "fu", filt, unf)) < 0) {
		fprintf(stderr, "molly-bench-egress: warm-up connect failed: %s\n", strerror(-r));
		r = 1;
		goto out;
	}
	for (int i = 0, k = 0; i < n_total; i += round, k++) {
		r = ask_round(wfd, port, round, k % 2 ? (aa ? "ua" : "uf") : (aa ? "au" : "fu"),
			      filt + i, unf + i);
		if (r < 0) {
			fprintf(stderr, "molly-bench-egress: connect failed: %s\n", strerror(-r));
			r = 1;
			goto out;
		}
		paired[k] = (double) round_p50(filt + i, round) - (double) round_p50(unf + i, round);
	}
	/* The paired estimate: the median over rounds of (filtered p50 - unfiltered p50) of
	 * adjacent rounds, which cancels drift slower than a round. */
	qsort(paired, (size_t) (n_total / round), sizeof(paired[0]), cmp_double);
	paired_med = paired[n_total / round / 2];
	qsort(filt, (size_t) n_total, sizeof(*filt), cmp_u64);
	qsort(unf, (size_t) n_total, sizeof(*unf), cmp_u64);

	/* the programs' own run time: statistics on only for this pass */
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	n_st = prog_stats(t1, st, 16);
	for (int i = 0; i < n_st; i++)
		if (strstr(st[i].name, "connect4")) {
			before_rt = st[i].run_time_ns;
			before_cnt = st[i].run_cnt;
		}
	if (stats_fd >= 0) {
		uint64_t tmp[MAX_ROUND];

		for (int i = 0; i < stat_n; i += round < stat_n ? round : stat_n)
			(void) ask_round(wfd, port, round < stat_n ? round : stat_n, "f", tmp, NULL);
		n_st = prog_stats(t1, st2, 16);
		for (int i = 0; i < n_st; i++)
			if (strstr(st2[i].name, "connect4")) {
				stat_rt = st2[i].run_time_ns - before_rt;
				stat_cnt = st2[i].run_cnt - before_cnt;
			}
		close(stats_fd);
	}

	{
		uint64_t f50 = filt[n_total / 2], f99 = filt[(size_t) n_total * 99 / 100];
		uint64_t u50 = unf[n_total / 2], u99 = unf[(size_t) n_total * 99 / 100];
		double over = (double) f50 - (double) u50;
		double prog = stat_cnt ? (double) stat_rt / (double) stat_cnt : -1;

		if (json) {
			printf("{\"connects\":%d,\"round\":%d,\"aa_control\":%s,\"filtered_p50_ns\":%llu,\"filtered_p99_ns\":%llu,"
			       "\"unfiltered_p50_ns\":%llu,\"unfiltered_p99_ns\":%llu,\"overhead_p50_ns\":%.0f,\"overhead_p50_paired_ns\":%.0f,"
			       "\"prog_connect4_runs\":%llu,\"prog_connect4_ns_per_run\":%.1f}\n",
			       n_total, round, aa ? "true" : "false", (unsigned long long) f50, (unsigned long long) f99,
			       (unsigned long long) u50, (unsigned long long) u99, over, paired_med,
			       (unsigned long long) stat_cnt, prog);
		} else {
			printf("TCP connect() on loopback, %d each side, interleaved in rounds of %d\n",
			       n_total, round);
			if (aa)
				printf("  A/A CONTROL: the \"filtered\" series below ran unfiltered too\n");
			printf("  filtered (t1, 1-entry allow-list): p50 %8.2f us  p99 %8.2f us\n",
			       f50 / 1e3, f99 / 1e3);
			printf("  unfiltered (outside the tree):     p50 %8.2f us  p99 %8.2f us\n",
			       u50 / 1e3, u99 / 1e3);
			printf("  overhead p50: %+.2f us (target <= 1 us); paired by round: %+.2f us\n",
			       over / 1e3, paired_med / 1e3);
			if (stat_cnt)
				printf("  egress_connect4 own run time: %.1f ns per run (%llu runs, "
				       "bpf stats)\n", prog, (unsigned long long) stat_cnt);
			else
				printf("  egress_connect4 own run time: unavailable (BPF_ENABLE_STATS "
				       "refused)\n");
		}
	}
	r = 0;
out:
	if (wfd >= 0)
		close(wfd);
	close(sv[0]); /* the daemon child frees its instance and exits */
	if (daemon > 0)
		waitpid(daemon, &status, 0);
	if (server > 0) {
		kill(server, SIGKILL);
		waitpid(server, NULL, 0);
	}
	free(filt);
	free(unf);
	free(paired);
	return r;
}
