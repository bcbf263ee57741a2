/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "egress-abi.h" /* bpf/: key and event layout */
#include "egress.skel.h"
#include "egress/egress-bpf.h"

static const enum bpf_attach_type hook_types[4] = {
	BPF_CGROUP_INET4_CONNECT,
	BPF_CGROUP_INET6_CONNECT,
	BPF_CGROUP_UDP4_SENDMSG,
	BPF_CGROUP_UDP6_SENDMSG,
};

struct egress_bpf_set {
	struct egress_bpf *skel[_EGRESS_TIER_MAX]; /* owned */
	int cgroup_fd[_EGRESS_TIER_MAX];          /* owned; -EBADF = not attached */
	bool attached[_EGRESS_TIER_MAX][4];
	int helper_cgroup_fd;    /* owned; the helper's cgroup, with the core's programs */
	bool helper_attached[4];
	uint32_t gen[_EGRESS_TIER_MAX]; /* current generation of each allow-list */
	struct ring_buffer *rb;         /* owned */
	void (*cb)(const struct egress_event *ev, void *userdata);
	void *cb_userdata;
};

static char last_log[512];

/* libbpf prints its reasons (verifier output, "failed to load program") through this; keep
 * the first meaningful line for the error message instead of spraying the daemon's stderr. */
static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	if (level == LIBBPF_DEBUG)
		return 0;
	(void) vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' '))
		line[--n] = 0;
	/* The first warning of an attempt names the cause ("map 'allowed': failed to create");
	 * later ones only repeat that the load failed. Not the memlock one: this kernel
	 * accounts BPF memory to the cgroup, the limit is not why a load fails. */
	if (n > 0 && last_log[0] == 0 && !strstr(line, "RLIMIT_MEMLOCK"))
		snprintf(last_log, sizeof(last_log), "%s",
			 strncmp(line, "libbpf: ", 8) == 0 ? line + 8 : line);
	if (getenv("MOLLY_EGRESS_DEBUG"))
		fprintf(stderr, "libbpf: %s\n", line);
	return 0;
}

const char *egress_bpf_last_log(void)
{
	return last_log;
}

int egress_bpf_key(const struct egress_dest *d, uint32_t gen, void *ret_key)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	struct egress_key k;

	memset(&k, 0, sizeof(k)); /* the hash compares every byte */
	k.gen = gen;
	k.port = d->port;
	if (d->family == AF_INET) {
		k.family = AF_INET;
		memcpy(&k.addr[0], d->addr, 4);
	} else if (d->family == AF_INET6 && memcmp(d->addr, v4mapped, 12) == 0) {
		k.family = AF_INET;
		memcpy(&k.addr[0], d->addr + 12, 4);
	} else if (d->family == AF_INET6) {
		k.family = AF_INET6;
		memcpy(k.addr, d->addr, 16);
	} else {
		return -EINVAL;
	}
	memcpy(ret_key, &k, sizeof(k));
	return 0;
}

int egress_bpf_probe(struct errmsg *e)
{
	/* r0 = 1; exit: the smallest cgroup/connect4 program, allowing everything. */
	static const struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 1 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_CGROUP_INET4_CONNECT);
	int fd;

	fd = bpf_prog_load(BPF_PROG_TYPE_CGROUP_SOCK_ADDR, "molly_probe", "GPL", insns,
			   ELEMENTSOF(insns), &opts);
	if (fd < 0)
		return errmsg_set(e, -errno, "the kernel refuses cgroup sock_addr BPF programs: %s",
				  strerror(errno));
	close(fd);
	return 0;
}

int egress_bpf_set_new(struct egress_bpf_set **ret, struct errmsg *e)
{
	_cleanup_(egress_bpf_set_freep) struct egress_bpf_set *s = NULL;
	int r;

	libbpf_set_print(libbpf_print);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (int t = 0; t < _EGRESS_TIER_MAX; t++)
		s->cgroup_fd[t] = -EBADF;
	s->helper_cgroup_fd = -EBADF;
	for (int t = 0; t < _EGRESS_TIER_MAX; t++) {
		struct egress_bpf *skel = egress_bpf__open();

		if (!skel)
			return errmsg_set(e, -errno, "cannot open the egress BPF object: %s", strerror(errno));
		s->skel[t] = skel;
		skel->rodata->tier = (uint32_t) t;
		if (t > 0) {
			/* One ring buffer and one lost counter for all tiers: one fd to poll. */
			r = bpf_map__reuse_fd(skel->maps.denials, bpf_map__fd(s->skel[0]->maps.denials));
			if (r == 0)
				r = bpf_map__reuse_fd(skel->maps.lost, bpf_map__fd(s->skel[0]->maps.lost));
			if (r < 0)
				return errmsg_set(e, r, "cannot share the denial ring buffer: %s", strerror(-r));
		}
		last_log[0] = 0;
		r = egress_bpf__load(skel);
		if (r < 0)
			return errmsg_set(e, r, "the kernel refused to load the egress BPF programs: %s%s%s",
					  strerror(-r), last_log[0] ? "; libbpf: " : "", last_log);
	}
	*ret = TAKE_PTR(s);
	return 0;
}

int egress_bpf_set_attach(struct egress_bpf_set *s, enum egress_tier tier, const char *cgroup_dir,
			  struct errmsg *e)
{
	struct bpf_program *progs[4];
	int r;

	assert_return(s && tier >= 0 && tier < _EGRESS_TIER_MAX && s->cgroup_fd[tier] < 0, -EINVAL);
	progs[0] = s->skel[tier]->progs.egress_connect4;
	progs[1] = s->skel[tier]->progs.egress_connect6;
	progs[2] = s->skel[tier]->progs.egress_sendmsg4;
	progs[3] = s->skel[tier]->progs.egress_sendmsg6;
	s->cgroup_fd[tier] = open(cgroup_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->cgroup_fd[tier] < 0)
		return errmsg_set(e, -errno, "cannot open cgroup %s: %s", cgroup_dir, strerror(errno));
	for (int h = 0; h < 4; h++) {
		/* ALLOW_MULTI: programs a parent cgroup has (systemd's IPAddressDeny=, ...) keep
		 * running too; a connect must pass all of them. */
		r = bpf_prog_attach(bpf_program__fd(progs[h]), s->cgroup_fd[tier], hook_types[h],
				    BPF_F_ALLOW_MULTI);
		if (r < 0)
			return errmsg_set(e, -errno, "the kernel refused to attach %s to %s: %s",
					  bpf_program__name(progs[h]), cgroup_dir, strerror(errno));
		s->attached[tier][h] = true;
	}
	return 0;
}

int egress_bpf_set_attach_helper(struct egress_bpf_set *s, const char *cgroup_dir,
				 struct errmsg *e)
{
	int fds[4];

	assert_return(s && s->skel[EGRESS_CORE] && s->helper_cgroup_fd < 0, -EINVAL);
	s->helper_cgroup_fd = open(cgroup_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->helper_cgroup_fd < 0)
		return errmsg_set(e, -errno, "cannot open cgroup %s: %s", cgroup_dir, strerror(errno));
	egress_bpf_set_prog_fds(s, EGRESS_CORE, fds);
	for (int h = 0; h < 4; h++) {
		if (bpf_prog_attach(fds[h], s->helper_cgroup_fd, hook_types[h], BPF_F_ALLOW_MULTI) < 0)
			return errmsg_set(e, -errno, "the kernel refused to attach the core's programs "
					  "to %s: %s", cgroup_dir, strerror(errno));
		s->helper_attached[h] = true;
	}
	return 0;
}

static int delete_other_generations(int map_fd, uint32_t keep)
{
	struct egress_key k, next, *doomed = NULL;
	size_t n = 0, cap = 0;
	void *prev = NULL;
	int r = 0;

	/* Collect first: deleting while walking would restart the walk. */
	while (bpf_map_get_next_key(map_fd, prev, &next) == 0) {
		k = next;
		prev = &k;
		if (k.gen == keep)
			continue;
		if (n == cap) {
			struct egress_key *m = realloc(doomed, (cap ? cap * 2 : 64) * sizeof(*m));

			if (!m) {
				free(doomed);
				return -ENOMEM;
			}
			doomed = m;
			cap = cap ? cap * 2 : 64;
		}
		doomed[n++] = k;
	}
	for (size_t i = 0; i < n; i++)
		if (bpf_map_delete_elem(map_fd, &doomed[i]) < 0 && errno != ENOENT)
			r = -errno;
	free(doomed);
	return r;
}

int egress_bpf_set_allow(struct egress_bpf_set *s, enum egress_tier tier,
			 const struct egress_dest *d, size_t n, struct errmsg *e)
{
	int map_fd, gen_fd, r;
	uint32_t zero = 0, next;
	uint8_t one = 1;

	assert_return(s && tier >= 0 && tier < _EGRESS_TIER_MAX, -EINVAL);
	assert_return(d || n == 0, -EINVAL);
	if (n > EGRESS_MAX_DEST)
		return errmsg_set(e, -E2BIG, "%zu destinations for one tier; at most %d", n,
				  EGRESS_MAX_DEST);
	map_fd = bpf_map__fd(s->skel[tier]->maps.allowed);
	gen_fd = bpf_map__fd(s->skel[tier]->maps.generation);
	next = s->gen[tier] + 1;
	if (next == 0)
		next = 1; /* 0 means "never set" (empty); skip it on wrap */

	/* 1. Leftovers: a half-written generation a failed replace left, or the previous list
	 * when step 4 could not wait for a grace period. Out of force since the previous
	 * replace; remove them to make room. */
	r = delete_other_generations(map_fd, s->gen[tier]);
	if (r < 0)
		return errmsg_set(e, r, "cannot clear old allow-list entries: %s", strerror(-r));
	/* 2. The new list under its own generation: not consulted yet. */
	for (size_t i = 0; i < n; i++) {
		struct egress_key k;

		r = egress_bpf_key(&d[i], next, &k);
		if (r < 0)
			return errmsg_set(e, r, "destination %zu: address family %d is neither AF_INET nor AF_INET6",
					  i, d[i].family);
		if (bpf_map_update_elem(map_fd, &k, &one, BPF_ANY) < 0) {
			r = -errno;
			(void) delete_other_generations(map_fd, s->gen[tier]);
			return errmsg_set(e, r, "cannot write allow-list entry %zu: %s", i, strerror(-r));
		}
	}
	/* 3. One write switches every program to the whole new list. */
	if (bpf_map_update_elem(gen_fd, &zero, &next, BPF_ANY) < 0) {
		r = -errno;
		(void) delete_other_generations(map_fd, s->gen[tier]);
		return errmsg_set(e, r, "cannot switch the allow-list generation: %s", strerror(-r));
	}
	s->gen[tier] = next;
	/* 4. The old list goes once no program can still be using the old number: the programs
	 * run inside an RCU read-side section, and MEMBARRIER_CMD_GLOBAL is synchronize_rcu()
	 * (a few ms). Where it is refused (nohz_full), the old entries stay until step 1 of
	 * the next replace, by when any program that read the old number has long finished. */
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
		(void) delete_other_generations(map_fd, next);
	return 0;
}

static int on_sample(void *ctx, void *data, size_t size)
{
	struct egress_bpf_set *s = ctx;

	if (size >= sizeof(struct egress_event) && s->cb)
		s->cb(data, s->cb_userdata);
	return 0;
}

static int ensure_ringbuf(struct egress_bpf_set *s)
{
	if (s->rb)
		return 0;
	s->rb = ring_buffer__new(bpf_map__fd(s->skel[0]->maps.denials), on_sample, s, NULL);
	return s->rb ? 0 : -errno;
}

int egress_bpf_set_fd(struct egress_bpf_set *s)
{
	int r = ensure_ringbuf(s);

	return r < 0 ? r : ring_buffer__epoll_fd(s->rb);
}

int egress_bpf_set_consume(struct egress_bpf_set *s,
			   void (*cb)(const struct egress_event *ev, void *userdata), void *userdata)
{
	int r = ensure_ringbuf(s);

	if (r < 0)
		return r;
	s->cb = cb;
	s->cb_userdata = userdata;
	r = ring_buffer__consume(s->rb);
	s->cb = NULL;
	return r;
}

uint64_t egress_bpf_set_lost(struct egress_bpf_set *s)
{
	uint32_t zero = 0;
	uint64_t v = 0;

	if (bpf_map_lookup_elem(bpf_map__fd(s->skel[0]->maps.lost), &zero, &v) < 0)
		return 0;
	return v;
}

void egress_bpf_set_prog_fds(struct egress_bpf_set *s, enum egress_tier tier, int ret_fds[4])
{
	ret_fds[0] = bpf_program__fd(s->skel[tier]->progs.egress_connect4);
	ret_fds[1] = bpf_program__fd(s->skel[tier]->progs.egress_connect6);
	ret_fds[2] = bpf_program__fd(s->skel[tier]->progs.egress_sendmsg4);
	ret_fds[3] = bpf_program__fd(s->skel[tier]->progs.egress_sendmsg6);
}

struct egress_bpf_set *egress_bpf_set_free(struct egress_bpf_set *s)
{
	if (!s)
		return NULL;
	ring_buffer__free(s->rb);
	if (s->helper_cgroup_fd >= 0) {
		int fds[4];

		egress_bpf_set_prog_fds(s, EGRESS_CORE, fds);
		for (int h = 0; h < 4; h++)
			if (s->helper_attached[h])
				(void) bpf_prog_detach2(fds[h], s->helper_cgroup_fd, hook_types[h]);
		(void) close(s->helper_cgroup_fd);
	}
	for (int t = 0; t < _EGRESS_TIER_MAX; t++) {
		int fds[4];

		if (s->skel[t] && s->cgroup_fd[t] >= 0) {
			egress_bpf_set_prog_fds(s, t, fds);
			for (int h = 0; h < 4; h++)
				if (s->attached[t][h])
					(void) bpf_prog_detach2(fds[h], s->cgroup_fd[t], hook_types[h]);
		}
		if (s->cgroup_fd[t] >= 0)
			(void) close(s->cgroup_fd[t]);
		egress_bpf__destroy(s->skel[t]);
	}
	free(s);
	return NULL;
}
