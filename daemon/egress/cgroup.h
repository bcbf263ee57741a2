/* SPDX-License-Identifier: MIT */
/*
 * cgroup.h: the few cgroup2 operations the egress filter needs: find the cgroup2 mount and
 * the process's own cgroup, tell whether that cgroup was delegated to us (systemd
 * Delegate=yes), move a process, and create / empty / remove a small subtree.
 *
 * Paths are absolute file system paths (e.g. /sys/fs/cgroup/unified/molly-a-42/core), except
 * where a name says "rel" (a cgroup path as /proc/PID/cgroup prints it, relative to the mount).
 * All functions return >= 0 or -errno and fill the optional errmsg.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "basic/errmsg.h"

/* The first cgroup2 mount point in /proc/self/mountinfo, e.g. "/sys/fs/cgroup" or
 * "/sys/fs/cgroup/unified" (hybrid hierarchy), into buf. -ENOENT when there is none. */
int cgroup2_mount(char *buf, size_t len, struct errmsg *e);

/* The cgroup2 directory of pid (0 = self): mount + the "0::" line of /proc/PID/cgroup. */
int cgroup2_path_of(pid_t pid, const char *mount, char *buf, size_t len, struct errmsg *e);

/* True when dir is a delegated cgroup (systemd marks it with the xattr trusted.delegate or
 * user.delegate = "1"). */
bool cgroup2_is_delegated(const char *dir);

/* The cgroup id (the kernel's, as bpf_get_current_cgroup_id() reports it) of a directory. */
int cgroup2_id(const char *dir, uint64_t *ret, struct errmsg *e);

/* Writes pid into dir/cgroup.procs (the whole process moves). */
int cgroup2_move(const char *dir, pid_t pid, struct errmsg *e);

/* Kills (SIGKILL) every process in dir and its descendants and waits, up to about a second,
 * until dir reports itself unpopulated. Uses cgroup.kill where the kernel has it. */
int cgroup2_kill_all(const char *dir);

/* Removes dir and every cgroup below it (depth first). Processes must be gone; -EBUSY else. */
int cgroup2_remove_tree(const char *dir, struct errmsg *e);
