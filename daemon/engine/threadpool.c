/* SPDX-License-Identifier: MIT */
/*
 * threadpool.c: workers that spin briefly on a job counter and then sleep on it (futex).
 *
 * What it costs: a forward pass runs ~8 jobs per layer, from microseconds to milliseconds
 * each, back to back. Starting a job is one atomic increment while the workers spin, plus a
 * futex wake only when some worker went to sleep; ending it is one atomic decrement per
 * worker. The spin is bounded in time (SPIN_NS), not in pause instructions, whose cost
 * varies between CPUs (30 ns on the Zen 3 VM we measure on, ~140 cycles on Intel since
 * Skylake). A sleeping worker costs
 * ~10-50 us to wake, which a job pays only after an idle gap longer than the spin.
 *
 * On a machine with more runnable threads than cores (other processes), a spinning thread
 * can hold the core a descheduled worker needs: after SPIN_HOT_NS the spin yields the CPU
 * (sched_yield) between rounds. The old pool (20000 pause rounds, then a mutex/condvar
 * handshake on every job) paid the mutex even when nobody slept.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../basic/time-util.h"
#include "threadpool.h"

/* Spin this long for a job (or for the end of one) before sleeping on the futex. */
#define SPIN_NS 200000
/* Pure spinning (no sched_yield) for this long first. */
#define SPIN_HOT_NS 30000

struct threadpool {
	int n_threads;
	pthread_t *threads; /* n_threads - 1 workers; the caller is thread 0 */

	/* A job starts when generation is bumped (and futex-woken if anyone sleeps). */
	_Atomic uint32_t generation;
	_Atomic int n_sleeping;      /* workers in (or entering) a futex wait on generation */
	_Atomic uint32_t n_pending;  /* workers still running the current job; a futex word */
	_Atomic int caller_sleeping; /* the caller sleeps on n_pending */
	_Atomic bool stopping;
	threadpool_fn fn;
	void *arg;
};

struct worker_start {
	struct threadpool *pool;
	int ith;
};

static void futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
	/* EAGAIN (the word changed) and EINTR both mean "look again", as the callers do */
	(void) syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word)
{
	(void) syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}


struct spin {
	uint64_t start;
	unsigned round;
};

/* One round of a bounded spin: false once the caller should stop spinning and sleep. The
 * clock is read every 32 rounds only. */
static bool spin_round(struct spin *s)
{
	uint64_t t;

	cpu_relax();
	if (++s->round % 32)
		return true;
	t = now_ns();
	if (!s->start)
		s->start = t;
	if (t - s->start >= SPIN_NS)
		return false;
	if (t - s->start >= SPIN_HOT_NS)
		sched_yield();
	return true;
}

/* Waits until the generation differs from seen; returns the new one. */
static uint32_t wait_job(struct threadpool *p, uint32_t seen)
{
	struct spin s = {};
	uint32_t gen;

	while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen)
		if (!spin_round(&s))
			break;
	if (gen != seen)
		return gen;
	/* Announce the sleep, then look again (both sides seq_cst): either the caller sees
	 * n_sleeping > 0 and wakes us, or the futex sees the new generation and returns. */
	atomic_fetch_add(&p->n_sleeping, 1);
	while ((gen = atomic_load(&p->generation)) == seen)
		futex_wait(&p->generation, seen);
	atomic_fetch_sub(&p->n_sleeping, 1);
	return gen;
}

static void *worker_main(void *data)
{
	struct worker_start start = *(struct worker_start *) data;
	struct threadpool *p = start.pool;
	uint32_t seen = 0;

	free(data);
	for (;;) {
		seen = wait_job(p, seen);
		if (atomic_load(&p->stopping))
			return NULL;
		p->fn(p->arg, start.ith, p->n_threads);
		/* the last one out wakes the caller if it went to sleep (same Dekker pairing) */
		if (atomic_fetch_sub(&p->n_pending, 1) == 1 && atomic_load(&p->caller_sleeping))
			futex_wake_all(&p->n_pending);
	}
}

int threadpool_new(int n_threads, struct threadpool **ret)
{
	struct threadpool *p;

	assert_return(n_threads >= 1 && n_threads <= 1024 && ret, -EINVAL);
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->n_threads = n_threads;
	p->threads = calloc(n_threads, sizeof(*p->threads));
	if (!p->threads) {
		free(p);
		return -ENOMEM;
	}
	for (int i = 1; i < n_threads; i++) {
		struct worker_start *s = malloc(sizeof(*s));
		int r;

		if (!s) {
			p->n_threads = i;
			threadpool_free(p);
			return -ENOMEM;
		}
		*s = (struct worker_start){ .pool = p, .ith = i };
		r = pthread_create(&p->threads[i], NULL, worker_main, s);
		if (r != 0) {
			free(s);
			p->n_threads = i;
			threadpool_free(p);
			return -r;
		}
	}
	*ret = p;
	return 0;
}

struct threadpool *threadpool_free(struct threadpool *p)
{
	if (!p)
		return NULL;
	atomic_store(&p->stopping, true);
	atomic_fetch_add(&p->generation, 1);
	futex_wake_all(&p->generation);
	for (int i = 1; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	free(p);
	return NULL;
}

int threadpool_n_threads(const struct threadpool *p)
{
	return p->n_threads;
}

void threadpool_run(struct threadpool *p, threadpool_fn fn, void *arg)
{
	struct spin s = {};
	uint32_t v;

	if (p->n_threads == 1) {
		fn(arg, 0, 1);
		return;
	}
	/* Workers read fn and arg after they see the new generation (the increment is
	 * seq_cst, so it also releases these stores). */
	p->fn = fn;
	p->arg = arg;
	atomic_store_explicit(&p->n_pending, (uint32_t) p->n_threads - 1, memory_order_relaxed);
	atomic_fetch_add(&p->generation, 1);
	if (atomic_load(&p->n_sleeping) > 0)
		futex_wake_all(&p->generation);

	fn(arg, 0, p->n_threads);

	while (atomic_load_explicit(&p->n_pending, memory_order_acquire) > 0)
		if (!spin_round(&s))
			break;
	if (atomic_load(&p->n_pending) == 0)
		return;
	atomic_store(&p->caller_sleeping, 1);
	while ((v = atomic_load(&p->n_pending)) > 0)
		futex_wait(&p->n_pending, v);
	atomic_store(&p->caller_sleeping, 0);
}

void threadpool_split(long n, long align, int ith, int nth, long *begin, long *end)
{
	long units, per, extra, b, e;

	if (align < 1)
		align = 1;
	units = (n + align - 1) / align;
	per = units / nth;
	extra = units % nth;
	b = ith * per + MIN(ith, extra);
	e = b + per + (ith < extra ? 1 : 0);
	*begin = MIN(b * align, n);
	*end = MIN(e * align, n);
}
