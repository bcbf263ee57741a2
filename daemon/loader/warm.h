/* SPDX-License-Identifier: MIT */
/*
 * warm.h: memory for warm adapter copies — on a chosen NUMA node (numa_alloc_onnode, i.e.
 * mbind) and locked (mlock) so a warm adapter is never paged out, within a budget of locked
 * bytes. Where mlock is refused (RLIMIT_MEMLOCK without CAP_IPC_LOCK) the copy stays unlocked
 * and warm_note() says so; the daemon shows it in Status.
 *
 * Threading: warm_alloc/warm_release may be called from any thread (a mutex inside).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/macro.h"

struct warm;

struct warm_buf {
	void *data;    /* 4096-aligned */
	size_t bytes;  /* allocated (rounded up to 4096) */
	int node;      /* -1: not bound to a node */
	bool locked;
};

/* lock_bytes: how much may be mlock'ed at once (WarmBytes=). */
int warm_new(uint64_t lock_bytes, struct warm **ret);
struct warm *warm_free(struct warm *w);
DEFINE_CLEANUP_FUNC(struct warm *, warm_free, NULL)

/* node < 0 or NUMA unavailable: ordinary anonymous memory. -ENOMEM. */
int warm_alloc(struct warm *w, size_t bytes, int node, struct warm_buf *ret);
void warm_release(struct warm *w, struct warm_buf *b);

/* "" or why warm memory is not as asked ("mlock refused: ...; warm copies unlocked"). Copied
 * into buf. */
void warm_note(struct warm *w, char *buf, size_t size);
uint64_t warm_locked_bytes(struct warm *w);
uint64_t warm_bytes(struct warm *w);
