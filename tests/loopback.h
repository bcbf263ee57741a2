/* SPDX-License-Identifier: MIT */
/*
 * loopback.h: a TCP listener on 127.0.0.1 at a port the kernel picks, for the tests' scripted
 * servers.
 */
#pragma once

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

/* The listening socket (its port in *ret_port), or -errno. */
static inline int loopback_listen(uint16_t *ret_port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *) &a, &l) < 0) {
		int k = -errno;

		close(fd);
		return k;
	}
	*ret_port = ntohs(a.sin_port);
	return fd;
}
