/* SPDX-License-Identifier: MIT */
/*
 * threadpool.h: a fixed set of worker threads that run one parallel job at a time.
 *
 * threadpool_run(pool, fn, arg) calls fn(arg, ith, nth) once for every ith in [0, nth)
 * — the calling thread takes ith 0 — and returns when all have finished. Jobs are short
 * (one matrix product), so workers spin briefly before sleeping: the wake-up cost is paid
 * only when the pool was idle.
 *
 * Threading: threadpool_run() must not be called concurrently on one pool, nor from inside
 * a job. The pool itself is owned by one engine context.
 */
#pragma once

#include "../basic/macro.h"

struct threadpool;

typedef void (*threadpool_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 (1 = run everything on the caller). */
int threadpool_new(int n_threads, struct threadpool **ret);
struct threadpool *threadpool_free(struct threadpool *p);
DEFINE_CLEANUP_FUNC(struct threadpool *, threadpool_free, NULL)

int threadpool_n_threads(const struct threadpool *p);
void threadpool_run(struct threadpool *p, threadpool_fn fn, void *arg);

/* Splits [0, n) into nth nearly equal chunks (multiples of `align` where possible);
 * chunk ith is [*begin, *end). */
void threadpool_split(long n, long align, int ith, int nth, long *begin, long *end);
