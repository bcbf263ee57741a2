/* SPDX-License-Identifier: MIT */
/* warm.c: NUMA-placed, locked memory for warm adapter copies (see warm.h). */
#include <errno.h>
#include <numa.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "warm.h"

struct warm {
	pthread_mutex_t lock;
	uint64_t lock_budget;
	uint64_t locked;  /* bytes mlock'ed now */
	uint64_t total;   /* bytes allocated now */
	bool numa;
	bool lock_refused; /* once refused, do not ask again for every copy */
	char note[160];
};

int warm_new(uint64_t lock_bytes, struct warm **ret)
{
	struct warm *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	pthread_mutex_init(&w->lock, NULL);
	w->lock_budget = lock_bytes;
	w->numa = numa_available() >= 0;
	*ret = w;
	return 0;
}

struct warm *warm_free(struct warm *w)
{
	if (!w)
		return NULL;
	pthread_mutex_destroy(&w->lock);
	free(w);
	return NULL;
}

int warm_alloc(struct warm *w, size_t bytes, int node, struct warm_buf *ret)
{
	size_t n = ALIGN_UP(bytes ? bytes : 1, 4096);
	bool try_lock;
	void *p;

	memset(ret, 0, sizeof(*ret));
	ret->node = -1;
	if (w->numa && node >= 0 && node <= numa_max_node()) {
		p = numa_alloc_onnode(n, node); /* mmap + mbind(MPOL_BIND): page-aligned */
		if (!p)
			return -ENOMEM;
		ret->node = node;
	} else {
		p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return -ENOMEM;
	}
	ret->data = p;
	ret->bytes = n;
	pthread_mutex_lock(&w->lock);
	w->total += n;
	try_lock = !w->lock_refused && w->locked + n <= w->lock_budget;
	if (try_lock)
		w->locked += n; /* reserved while we try */
	pthread_mutex_unlock(&w->lock);
	if (try_lock) {
		/* mlock also faults the pages in, on the node mbind chose */
		/* the system call itself: AddressSanitizer's mlock() interceptor does nothing
		 * and reports success, which would make Status claim locked memory */
		int r = syscall(SYS_mlock, p, n) < 0 ? -errno : 0;

		pthread_mutex_lock(&w->lock);
		if (r < 0) {
			w->locked -= n;
			w->lock_refused = true;
			snprintf(w->note, sizeof(w->note),
				 "mlock refused (%s): warm copies are not locked", strerror(-r));
		} else
			ret->locked = true;
		pthread_mutex_unlock(&w->lock);
	}
	return 0;
}

void warm_release(struct warm *w, struct warm_buf *b)
{
	if (!b->data)
		return;
	if (b->locked)
		(void) syscall(SYS_munlock, b->data, b->bytes);
	if (b->node >= 0)
		numa_free(b->data, b->bytes);
	else
		munmap(b->data, b->bytes);
	pthread_mutex_lock(&w->lock);
	w->total -= b->bytes;
	if (b->locked)
		w->locked -= b->bytes;
	pthread_mutex_unlock(&w->lock);
	memset(b, 0, sizeof(*b));
	b->node = -1;
}

void warm_note(struct warm *w, char *buf, size_t size)
{
	pthread_mutex_lock(&w->lock);
	snprintf(buf, size, "%s", w->note);
	pthread_mutex_unlock(&w->lock);
}

uint64_t warm_locked_bytes(struct warm *w)
{
	uint64_t v;

	pthread_mutex_lock(&w->lock);
	v = w->locked;
	pthread_mutex_unlock(&w->lock);
	return v;
}

uint64_t warm_bytes(struct warm *w)
{
	uint64_t v;

	pthread_mutex_lock(&w->lock);
	v = w->total;
	pthread_mutex_unlock(&w->lock);
	return v;
}
