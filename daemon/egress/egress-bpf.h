/* SPDX-License-Identifier: MIT */
/*
 * egress-bpf.h: the BPF side of the egress filter as the privileged helper sees it: load
 * bpf/egress.bpf.c once per tier (its own `allowed` map, `tier` in rodata) with one ring
 * buffer of denials shared by all, attach a tier's four programs to a cgroup, replace a
 * tier's allow-list atomically, and read the denials.
 *
 * Attachment uses BPF_PROG_ATTACH with BPF_F_ALLOW_MULTI, not BPF links: an attachment stays
 * until it is detached or its cgroup is removed, so if the helper dies the filter stays in
 * force (fail closed), while a link would vanish with the last fd. Detaching needs
 * CAP_NET_ADMIN, which the core does not have.
 *
 * Needs root (CAP_BPF + CAP_NET_ADMIN + CAP_PERFMON on this kernel, unprivileged BPF is off).
 * Not thread-safe; the helper's one thread uses it.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "basic/errmsg.h"
#include "egress/egress.h"

struct egress_bpf_set;
struct egress_event;

/* Loads (and unloads) a trivial cgroup/connect4 program: 0 when the kernel accepts BPF
 * programs of this kind from us, else -errno (-EPERM: no privilege / BPF disabled). */
int egress_bpf_probe(struct errmsg *e);

/* Opens and loads the four per-tier objects. Nothing is attached yet; every allow-list is
 * empty (generation 0). -EPERM / -EINVAL etc. from the kernel with the libbpf reason. */
int egress_bpf_set_new(struct egress_bpf_set **ret, struct errmsg *e);

/* Attaches the tier's connect4/connect6/sendmsg4/sendmsg6 programs to the cgroup directory. */
int egress_bpf_set_attach(struct egress_bpf_set *s, enum egress_tier tier, const char *cgroup_dir,
			  struct errmsg *e);

/* Attaches the core's programs (its empty allow-list) to one more cgroup: the privileged
 * helper's own, so that the one process of the tree that keeps root has no route out either.
 * Once per set; detached by egress_bpf_set_free(). */
int egress_bpf_set_attach_helper(struct egress_bpf_set *s, const char *cgroup_dir,
				 struct errmsg *e);

/* Replaces the tier's allow-list (see the generation scheme in bpf/egress-abi.h). On failure the
 * old list stays in force. */
int egress_bpf_set_allow(struct egress_bpf_set *s, enum egress_tier tier,
			 const struct egress_dest *d, size_t n, struct errmsg *e);

/* An fd that polls readable when denial records wait in the ring buffer. */
int egress_bpf_set_fd(struct egress_bpf_set *s);

/* Calls cb for each waiting denial record; returns how many, or -errno. */
int egress_bpf_set_consume(struct egress_bpf_set *s,
			   void (*cb)(const struct egress_event *ev, void *userdata), void *userdata);

/* Denials the programs could not put into the full ring buffer. */
uint64_t egress_bpf_set_lost(struct egress_bpf_set *s);

/* The tier's program fds in hook order connect4, connect6, sendmsg4, sendmsg6 (borrowed). */
void egress_bpf_set_prog_fds(struct egress_bpf_set *s, enum egress_tier tier, int ret_fds[4]);

/* Detaches whatever is attached and frees everything. NULL-safe; returns NULL. */
struct egress_bpf_set *egress_bpf_set_free(struct egress_bpf_set *s);
DEFINE_CLEANUP_FUNC(struct egress_bpf_set *, egress_bpf_set_free, NULL)

/* Converts a destination to the map key (an IPv4-mapped IPv6 address becomes IPv4, as the
 * programs judge it). -EINVAL for an unknown family. */
int egress_bpf_key(const struct egress_dest *d, uint32_t gen, void *ret_key);

/* The first warning libbpf printed during the last load attempt (the cause of a load or
 * verifier error), for error messages; "" if none. */
const char *egress_bpf_last_log(void);
