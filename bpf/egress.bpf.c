// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * bpf/egress.bpf.c: the kernel half of Molly's egress enforcement. Four cgroup sock_addr
 * programs check every inet connect() (TCP, and UDP connect) and every unconnected UDP
 * sendto()/sendmsg() of the sockets created in the cgroup they are attached to: the
 * destination (family, address, port) must be in the `allowed` map under the current
 * generation, else the call fails with EPERM and a record goes to the `denials` ring buffer.
 * connect4/6 alone would miss unconnected UDP, hence the sendmsg4/6 pair.
 *
 * Nothing is special: loopback, the unspecified address and port 0 are destinations like any
 * other, so an empty map denies every inet destination. AF_UNIX never reaches these hooks.
 *
 * The loader (daemon/egress/egress-bpf.c) loads this object once per tier, with `tier` set in
 * rodata and its own `allowed`/`generation` maps, and the `denials` ring buffer and `lost`
 * counter shared across the four (bpf_map__reuse_fd). The programs run for the cgroup of the
 * SOCKET (the one it was created in), whoever calls connect() on it.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "egress-abi.h"

#define AF_INET 2
#define AF_INET6 10

const volatile __u32 tier = 0; /* set through the skeleton's rodata before load */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGRESS_BPF_MAP_ENTRIES);
	__type(key, struct egress_key);
	__type(value, __u8);
} allowed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} generation SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, EGRESS_BPF_RINGBUF_BYTES);
} denials SEC(".maps");

/* Denials that found the ring buffer full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

static __always_inline int check(struct bpf_sock_addr *ctx, struct egress_key *k, __u32 hook)
{
	struct egress_event *ev;
	__u32 zero = 0, *gen;
	__u64 *n_lost;

	gen = bpf_map_lookup_elem(&generation, &zero);
	if (!gen)
		return 0; /* cannot happen for an array map; deny rather than guess */
	k->gen = *gen;
	if (k->gen != 0 && bpf_map_lookup_elem(&allowed, k))
		return 1;

	ev = bpf_ringbuf_reserve(&denials, sizeof(*ev), 0);
	if (!ev) {
		n_lost = bpf_map_lookup_elem(&lost, &zero);
		if (n_lost)
			__sync_fetch_and_add(n_lost, 1);
		return 0;
	}
	ev->mono_ns = bpf_ktime_get_ns();
	ev->cgroup_id = bpf_get_current_cgroup_id();
	ev->pid = bpf_get_current_pid_tgid() >> 32;
	ev->tier = tier;
	ev->family = k->family;
	ev->addr[0] = k->addr[0];
	ev->addr[1] = k->addr[1];
	ev->addr[2] = k->addr[2];
	ev->addr[3] = k->addr[3];
	ev->port = k->port;
	ev->protocol = ctx->protocol;
	ev->hook = hook;
	ev->_pad = 0;
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

static __always_inline int check4(struct bpf_sock_addr *ctx, __u32 hook)
{
	struct egress_key k = {
		.family = AF_INET,
		.addr = { ctx->user_ip4, 0, 0, 0 },
		.port = bpf_ntohs((__u16) ctx->user_port),
	};

	return check(ctx, &k, hook);
}

static __always_inline int check6(struct bpf_sock_addr *ctx, __u32 hook)
{
	struct egress_key k = {
		.family = AF_INET6,
		.addr = { ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3] },
		.port = bpf_ntohs((__u16) ctx->user_port),
	};

	/* A dual-stack socket reaches an IPv4 host through ::ffff:a.b.c.d, and the kernel then
	 * runs only this hook, not connect4: judge it as the IPv4 destination it is. */
	if (k.addr[0] == 0 && k.addr[1] == 0 && k.addr[2] == bpf_htonl(0xffff)) {
		k.family = AF_INET;
		k.addr[0] = k.addr[3];
		k.addr[2] = 0;
		k.addr[3] = 0;
	}
	return check(ctx, &k, hook);
}

SEC("cgroup/connect4")
int egress_connect4(struct bpf_sock_addr *ctx)
{
	return check4(ctx, EGRESS_HOOK_CONNECT4);
}

SEC("cgroup/connect6")
int egress_connect6(struct bpf_sock_addr *ctx)
{
	return check6(ctx, EGRESS_HOOK_CONNECT6);
}

SEC("cgroup/sendmsg4")
int egress_sendmsg4(struct bpf_sock_addr *ctx)
{
	return check4(ctx, EGRESS_HOOK_SENDMSG4);
}

SEC("cgroup/sendmsg6")
int egress_sendmsg6(struct bpf_sock_addr *ctx)
{
	return check6(ctx, EGRESS_HOOK_SENDMSG6);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
