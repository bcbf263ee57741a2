/* SPDX-License-Identifier: MIT */
/*
 * egress-probe: a test-only egress worker (tests/test-egress-bpf.c starts it through
 * egress_spawn_worker()). It reads one command per packet on fd 3 (AF_UNIX SOCK_SEQPACKET)
 * and answers one packet of text:
 *
 *   tcp ADDR:PORT | tcp [ADDR6]:PORT   blocking TCP connect        -> "0" or the errno
 *   udp ADDR:PORT | udp [ADDR6]:PORT   unconnected UDP sendto       -> "0" or the errno
 *   udpc ADDR:PORT                     UDP connect (no send)        -> "0" or the errno
 *   tfo ADDR:PORT                      TCP Fast Open sendto()       -> "0" or the errno
 *   mmsg ADDR:PORT                     UDP sendmmsg() of 2 messages -> "0" or the errno
 *   loop N tcp ADDR:PORT               N TCP connects               -> "OK FAILS LAST_ERRNO"
 *   pid | uid | gid | nnp              getpid() / getuid() / getgid() / no_new_privs
 *   cgroup                             its cgroup2 path ("0::" line of /proc/self/cgroup)
 *   move PATH                          writes its pid to PATH/cgroup.procs -> "0" or errno
 *   exit N                             exits with status N (no answer)
 *
 * "[ADDR6]" opens an AF_INET6 socket, so "[::ffff:127.0.0.2]" is an IPv4 destination reached
 * through a dual-stack socket. It exits when fd 3 closes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int parse(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[64];
	const char *colon;
	size_t hl;
	int port;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *) ss;
		const char *br = strchr(s, ']');

		if (!br || br[1] != ':' || (hl = (size_t) (br - s - 1)) >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, hl);
		host[hl] = 0;
		port = atoi(br + 2);
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t) port);
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return -EINVAL;
		*len = sizeof(*a);
		return 0;
	}
	colon = strrchr(s, ':');
	if (!colon || (hl = (size_t) (colon - s)) >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = 0;
	port = atoi(colon + 1);
	struct sockaddr_in *a = (struct sockaddr_in *) ss;
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t) port);
	if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
		return -EINVAL;
	*len = sizeof(*a);
	return 0;
}

/* 0 or errno */
static int attempt(const char *kind, const char *dest)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, r = 0;

	if (parse(dest, &ss, &len) < 0)
		return EINVAL;
	fd = socket(ss.ss_family,
		    (strcmp(kind, "tcp") == 0 || strcmp(kind, "tfo") == 0 ? SOCK_STREAM : SOCK_DGRAM) |
			    SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return errno;
	if (strcmp(kind, "tfo") == 0) {
		/* the connect happens inside sendto(): the connect hook must still run */
		if (sendto(fd, "x", 1, MSG_FASTOPEN, (struct sockaddr *) &ss, len) < 0)
			r = errno;
	} else if (strcmp(kind, "mmsg") == 0) {
		struct iovec iov = { .iov_base = (void *) "x", .iov_len = 1 };
		struct mmsghdr m[2];

		memset(m, 0, sizeof(m));
		for (int i = 0; i < 2; i++)
			m[i].msg_hdr = (struct msghdr){ .msg_name = &ss, .msg_namelen = len,
							.msg_iov = &iov, .msg_iovlen = 1 };
		if (sendmmsg(fd, m, 2, 0) < 0)
			r = errno;
	} else if (strcmp(kind, "udp") == 0) {
		if (sendto(fd, "x", 1, 0, (struct sockaddr *) &ss, len) < 0)
			r = errno;
	} else if (connect(fd, (struct sockaddr *) &ss, len) < 0) {
		r = errno;
	}
	close(fd);
	return r;
}

int main(void)
{
	char cmd[512], out[512];
	ssize_t n;

	for (;;) {
		char kind[16], arg[256];
		int num;

		n = recv(3, cmd, sizeof(cmd) - 1, 0);
		if (n <= 0)
			return 0;
		cmd[n] = 0;
		if (sscanf(cmd, "loop %d %15s %255s", &num, kind, arg) == 3) {
			int ok = 0, fails = 0, last = 0;

			for (int i = 0; i < num; i++) {
				int r = attempt(kind, arg);

				if (r == 0)
					ok++;
				else {
					fails++;
					last = r;
				}
			}
			snprintf(out, sizeof(out), "%d %d %d", ok, fails, last);
		} else if (sscanf(cmd, "exit %d", &num) == 1) {
			_exit(num);
		} else if (sscanf(cmd, "move %255s", arg) == 1) {
			char path[300], pid[32];
			int fd, r = 0;

			snprintf(path, sizeof(path), "%s/cgroup.procs", arg);
			snprintf(pid, sizeof(pid), "%d\n", (int) getpid());
			fd = open(path, O_WRONLY | O_CLOEXEC);
			if (fd < 0 || write(fd, pid, strlen(pid)) < 0)
				r = errno;
			if (fd >= 0)
				close(fd);
			snprintf(out, sizeof(out), "%d", r);
		} else if (sscanf(cmd, "%15s %255s", kind, arg) == 2) {
			snprintf(out, sizeof(out), "%d", attempt(kind, arg));
		} else if (strcmp(cmd, "pid") == 0) {
			snprintf(out, sizeof(out), "%d", (int) getpid());
		} else if (strcmp(cmd, "uid") == 0) {
			snprintf(out, sizeof(out), "%d", (int) getuid());
		} else if (strcmp(cmd, "gid") == 0) {
			snprintf(out, sizeof(out), "%d", (int) getgid());
		} else if (strcmp(cmd, "nnp") == 0) {
			snprintf(out, sizeof(out), "%d", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
		} else if (strcmp(cmd, "cgroup") == 0) {
			FILE *f = fopen("/proc/self/cgroup", "re");
			char line[400];

			snprintf(out, sizeof(out), "?");
			while (f && fgets(line, sizeof(line), f))
				if (strncmp(line, "0::", 3) == 0) {
					line[strcspn(line, "\n")] = 0;
					snprintf(out, sizeof(out), "%s", line + 3);
				}
			if (f)
				fclose(f);
		} else {
			snprintf(out, sizeof(out), "unknown command");
		}
		if (send(3, out, strlen(out), MSG_NOSIGNAL) < 0)
			return 1;
	}
}
