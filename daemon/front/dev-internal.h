/* SPDX-License-Identifier: MIT */
/*
 * dev-internal.h: what dev.c (kmod-shim's control node) and dev-cuse.c (the CUSE server) share:
 * one request path into the manager, whose events come back as struct molly_event records
 * through a post function (the control node's write(), or a CUSE file's queue).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <linux/molly.h>

struct dev_front;
struct manager;

/* Receives one whole record (any thread: the scheduler's for events). A final record (DONE or
 * ERROR) is the request's last. Must not block. */
typedef void (*dev_post_fn)(void *userdata, const struct molly_event *ev);

/* Who asked: stamped by the kernel (kmod-shim) or taken from the FUSE request (CUSE). */
struct dev_origin {
	uint32_t uid, gid, pid;
	uint64_t cgroup_id;   /* 0: unknown */
	const char *comm;
};

/* Runs one request through manager_submit() (front "dev", the member whose UIDs= has the uid).
 * Every outcome reaches post: the events, or one ERROR record when it is refused. */
void dev_front_submit(struct dev_front *f, const struct molly_submit *s, const char *text,
		      size_t text_len, const struct dev_origin *o, uint64_t kid, dev_post_fn post,
		      void *post_ud);
/* Cancels request kid if it is in flight (its DONE says "cancelled"). */
void dev_front_cancel(struct dev_front *f, uint64_t kid);
/* The front's manager (borrowed). */
struct manager *dev_front_manager(struct dev_front *f);

/* ---- dev-cuse.c ---- */

struct dev_cuse;
/* Serves /dev/NAME through CUSE on cuse_fd (an open /dev/cuse, taken over: closed on failure
 * too). Its own thread runs the FUSE session. -errno, or -EOPNOTSUPP when built without
 * libfuse3. */
int dev_cuse_start(struct dev_front *f, int cuse_fd, const char *name, struct dev_cuse **ret);
/* Stops taking calls (the session thread ends); events of requests in flight still reach
 * their files. Returns c. NULL-safe. */
struct dev_cuse *dev_cuse_stop(struct dev_cuse *c);
/* After the requests' final events: removes the device and frees the server. NULL-safe. */
struct dev_cuse *dev_cuse_free(struct dev_cuse *c);
