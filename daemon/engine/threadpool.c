/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "threadpool.h"

/* Spin this many rounds on the job counter before sleeping on the condition variable. */
#define SPIN_ROUNDS 20000

struct threadpool {
	int n_threads;
	pthread_t *threads; /* n_threads - 1 workers; the caller is thread 0 */

	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_cond_t done;

	/* Job state: generation counts jobs; workers wait for it to change. */
	_Atomic unsigned long generation;
	_Atomic int n_pending; /* workers still running the current job */
	bool stopping;
	threadpool_fn fn;
	void *arg;
};

struct worker_start {
	struct threadpool *pool;
	int ith;
};

static void *worker_main(void *data)
{
	struct worker_start start = *(struct worker_start *) data;
	struct threadpool *p = start.pool;
	unsigned long seen = 0;

	free(data);
	for (;;) {
		unsigned long gen;
		int spins = 0;

		/* Spin first: consecutive matmuls of one forward pass come microseconds apart. */
		while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
		       spins < SPIN_ROUNDS) {
			__builtin_ia32_pause();
			spins++;
		}
		if (gen == seen) {
			pthread_mutex_lock(&p->lock);
			while ((gen = atomic_load(&p->generation)) == seen && !p->stopping)
				pthread_cond_wait(&p->wake, &p->lock);
			pthread_mutex_unlock(&p->lock);
		}
		if (gen == seen)
			return NULL; /* stopping */
		seen = gen;
		if (!p->fn)
			return NULL;
		p->fn(p->arg, start.ith, p->n_threads);
		if (atomic_fetch_sub_explicit(&p->n_pending, 1, memory_order_acq_rel) == 1) {
			pthread_mutex_lock(&p->lock);
			pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->lock);
		}
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
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	p->threads = calloc(n_threads, sizeof(*p->threads));
	if (!p->threads) {
		threadpool_free(p);
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
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	p->fn = NULL;
	atomic_fetch_add(&p->generation, 1);
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	for (int i = 1; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->wake);
	pthread_cond_destroy(&p->done);
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
	if (p->n_threads == 1) {
		fn(arg, 0, 1);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	atomic_store(&p->n_pending, p->n_threads - 1);
	pthread_mutex_lock(&p->lock);
	atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);

	fn(arg, 0, p->n_threads);

	/* Wait for the workers: spin, then sleep. */
	for (int spins = 0; atomic_load_explicit(&p->n_pending, memory_order_acquire) > 0; spins++) {
		if (spins < SPIN_ROUNDS) {
			__builtin_ia32_pause();
			continue;
		}
		pthread_mutex_lock(&p->lock);
		while (atomic_load(&p->n_pending) > 0)
			pthread_cond_wait(&p->done, &p->lock);
		pthread_mutex_unlock(&p->lock);
	}
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
