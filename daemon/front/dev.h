/* SPDX-License-Identifier: MIT */
/*
 * dev.h: mollyd's /dev/molly front. kmod-shim (kmod-shim/molly_shim.c) gives native clients
 * /dev/molly and the daemon /dev/molly-control; this front reads the kernel's request records
 * from the control node (each stamped with the submitter's uid, gid, pid and cgroup id), runs
 * them through manager_submit() like D-Bus and HTTP (policy, routing, audit with front "dev",
 * the member whose UIDs= has the uid), and writes the events back as struct molly_event
 * records (include/uapi/linux/molly.h, docs/uapi.md).
 *
 * When the control node is absent at start, the front watches /dev (inotify) and opens it
 * when the module is loaded later. When the module is absent at start and /dev/cuse could be
 * opened, dev-cuse.c serves the same ABI through CUSE instead (then a module loaded later is
 * not picked up: its /dev/molly would clash). With neither, the device is off and its status
 * says why; nothing else changes.
 *
 * Threading: reads and submits on the sd-event loop (main thread); the manager's events are
 * written to the control node from the scheduler thread (a write there never blocks: the
 * kernel drops text for a client that does not read and ends its request with an error).
 */
#pragma once

#include <systemd/sd-event.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

struct manager;
struct dev_front;

/* Opens /dev/molly-control (or $MOLLY_DEV_CONTROL), or starts watching for it. When it is
 * absent and cuse_fd is an open /dev/cuse (opened as root before the privileges were dropped;
 * taken over, -EBADF: none), serves /dev/molly through CUSE instead. Never fails the daemon
 * for a missing or busy node: *ret is a front whose status says why it is off. -errno only for
 * allocation failures. The manager must outlive the front. */
int dev_front_new(sd_event *event, struct manager *m, int cuse_fd, struct dev_front **ret,
		  struct errmsg *e);
/* Cancels what is in flight, waits (bounded) for the final events, closes the node: clients
 * of requests still pending get ERROR Unavailable from the kernel. NULL-safe. */
struct dev_front *dev_front_free(struct dev_front *f);
DEFINE_CLEANUP_FUNC(struct dev_front *, dev_front_free, NULL)
