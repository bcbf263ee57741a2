/* SPDX-License-Identifier: MIT */
/*
 * bpf/egress-abi.h: what bpf/egress.bpf.c and its loader (daemon/egress/egress-bpf.c) share: the
 * allow-list key and the record of a denied attempt. UAPI types only, so the file compiles for
 * the BPF target and for the host alike; every field is 4- or 8-byte aligned, without holes,
 * because the hash map compares keys byte for byte.
 */
#pragma once

#include <linux/types.h>

/* Entries of one tier's `allowed` hash map: two generations of the largest list
 * (EGRESS_MAX_DEST in daemon/egress/egress.h) live during a replace. */
#define EGRESS_BPF_MAP_ENTRIES 2048
/* Bytes of the ring buffer of denials (shared by the four tiers; a power of two, >= a page). */
#define EGRESS_BPF_RINGBUF_BYTES (256 * 1024)

/* The allow-list key. A replace writes the new list under gen + 1, then flips the one-element
 * `generation` map to gen + 1 with one write, so a program sees either list whole; the old
 * entries are deleted after an RCU grace period (daemon/egress/egress-bpf.c). */
struct egress_key {
	__u32 gen;     /* generation the entry belongs to (0 is never used: empty at load) */
	__u32 family;  /* AF_INET (2) / AF_INET6 (10) */
	__u32 addr[4]; /* network order; IPv4 in addr[0], addr[1..3] zero */
	__u32 port;    /* host order */
};

enum egress_hook {
	EGRESS_HOOK_CONNECT4 = 1,
	EGRESS_HOOK_CONNECT6 = 2,
	EGRESS_HOOK_SENDMSG4 = 3,
	EGRESS_HOOK_SENDMSG6 = 4,
};

/* One denied attempt, written to the `denials` ring buffer. */
struct egress_event {
	__u64 mono_ns;   /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 cgroup_id; /* bpf_get_current_cgroup_id() of the calling task */
	__u32 pid;       /* tgid of the calling task */
	__u32 tier;      /* the program instance's tier (enum egress_tier) */
	__u32 family;    /* as in the key: an IPv4-mapped IPv6 destination is reported as IPv4 */
	__u32 addr[4];   /* network order */
	__u32 port;      /* host order */
	__u32 protocol;  /* IPPROTO_TCP / IPPROTO_UDP / ... (ctx->protocol) */
	__u32 hook;      /* enum egress_hook */
	__u32 _pad;
};
