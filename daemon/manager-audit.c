/* SPDX-License-Identifier: MIT */
/* manager-audit.c: see manager-audit.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/log.h"
#include "manager-audit.h"

#define PRUNE_INTERVAL_NS (3600ull * 1000000000ull)
#define AUDIT_PRUNE_EVERY 1024
#define NS_PER_DAY (86400ull * 1000000000ull)

struct queued {
	struct queued *next;
	struct audit_record r;
};

struct manager_audit {
	struct audit *store;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* work queued, or stop */
	pthread_cond_t idle;       /* the queue drained */
	struct queued *head, *tail;
	bool writing;              /* a batch is being written */
	bool stop;
	uint64_t retention_ns;     /* under lock */
	uint64_t backdate_ns;      /* tests: MOLLY_TEST_AUDIT_BACKDATE */
	unsigned since_prune;
	uint64_t last_prune;       /* CLOCK_MONOTONIC */
};

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static void prune(struct manager_audit *ma, uint64_t retention_ns)
{
	struct errmsg e = { { 0 } };
	uint64_t now = clock_ns(CLOCK_REALTIME), n = 0;
	int r;

	ma->since_prune = 0;
	ma->last_prune = clock_ns(CLOCK_MONOTONIC);
	if (!retention_ns || now <= retention_ns)
		return;
	r = audit_prune(ma->store, now - retention_ns, &n, &e);
	if (r < 0)
		log_full_errno(LOG_WARNING, r, "audit: %s", e.text);
	else if (n > 0)
		log_full_errno(LOG_INFO, 0, "audit: removed %llu records older than the retention",
			       (unsigned long long) n);
}

static void *writer(void *userdata)
{
	struct manager_audit *ma = userdata;

	pthread_mutex_lock(&ma->lock);
	for (;;) {
		struct queued *batch;
		uint64_t retention;

		while (!ma->head && !ma->stop &&
		       clock_ns(CLOCK_MONOTONIC) - ma->last_prune < PRUNE_INTERVAL_NS) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += 60; /* re-checks the hourly prune at least every minute */
			pthread_cond_timedwait(&ma->cond, &ma->lock, &until);
		}
		batch = ma->head;
		ma->head = ma->tail = NULL;
		ma->writing = batch != NULL;
		retention = ma->retention_ns;
		if (!batch && ma->stop)
			break;
		pthread_mutex_unlock(&ma->lock);

		while (batch) {
			struct queued *q = batch;
			struct errmsg e = { { 0 } };
			int r;

			batch = q->next;
			r = audit_append(ma->store, &q->r, &e);
			if (r < 0)
				log_full_errno(LOG_ERR, r, "audit: a record was lost: %s", e.text);
			else if (r > 0)
				log_full_errno(LOG_WARNING, 0,
					       "audit: the store was full: removed the %d oldest "
					       "records (raise [Audit] MapSize= to keep more)",
					       r);
			free(q);
			ma->since_prune++;
		}
		if (ma->since_prune >= AUDIT_PRUNE_EVERY ||
		    clock_ns(CLOCK_MONOTONIC) - ma->last_prune >= PRUNE_INTERVAL_NS)
			prune(ma, retention);

		pthread_mutex_lock(&ma->lock);
		ma->writing = false;
		if (!ma->head)
			pthread_cond_broadcast(&ma->idle);
	}
	ma->writing = false;
	pthread_cond_broadcast(&ma->idle);
	pthread_mutex_unlock(&ma->lock);
	return NULL;
}

int manager_audit_new(const char *state_dir, uint32_t retention_days, uint64_t map_size,
		      struct manager_audit **ret, struct errmsg *e)
{
	_cleanup_free_ char *dir = NULL;
	struct manager_audit *ma;
	const char *bd = secure_getenv("MOLLY_TEST_AUDIT_BACKDATE");
	struct audit_options o = { .map_size = map_size,
				   .retention_ns = (uint64_t) retention_days * NS_PER_DAY };
	int r;

	if (mkdir(state_dir, 0755) < 0 && errno != EEXIST)
		return errmsg_set(e, -errno, "creating the state directory %s: %m", state_dir);
	if (asprintf(&dir, "%s/audit", state_dir) < 0)
		return -ENOMEM;
	ma = calloc(1, sizeof(*ma));
	if (!ma)
		return -ENOMEM;
	ma->retention_ns = o.retention_ns;
	/* Tests only: records written now carry an older time, so retention can be checked
	 * without waiting days. */
	if (bd && bd[0] && audit_parse_duration(bd, &ma->backdate_ns) < 0) {
		free(ma);
		return errmsg_set(e, -EINVAL, "MOLLY_TEST_AUDIT_BACKDATE=%s is not a duration", bd);
	}
	r = audit_open(dir, &o, &ma->store, e);
	if (r < 0) {
		free(ma);
		return r;
	}
	pthread_mutex_init(&ma->lock, NULL);
	pthread_cond_init(&ma->cond, NULL);
	pthread_cond_init(&ma->idle, NULL);
	prune(ma, ma->retention_ns);
	r = -pthread_create(&ma->thread, NULL, writer, ma);
	if (r < 0) {
		audit_close(ma->store);
		free(ma);
		return errmsg_set(e, r, "starting the audit writer: %s", strerror(-r));
	}
	*ret = ma;
	return 0;
}

struct manager_audit *manager_audit_free(struct manager_audit *ma)
{
	if (!ma)
		return NULL;
	pthread_mutex_lock(&ma->lock);
	ma->stop = true;
	pthread_cond_signal(&ma->cond);
	pthread_mutex_unlock(&ma->lock);
	pthread_join(ma->thread, NULL);
	audit_close(ma->store);
	pthread_cond_destroy(&ma->cond);
	pthread_cond_destroy(&ma->idle);
	pthread_mutex_destroy(&ma->lock);
	free(ma);
	return NULL;
}

void manager_audit_set_retention(struct manager_audit *ma, uint32_t retention_days)
{
	if (!ma)
		return;
	pthread_mutex_lock(&ma->lock);
	ma->retention_ns = (uint64_t) retention_days * NS_PER_DAY;
	ma->last_prune = 0; /* apply it now */
	pthread_cond_signal(&ma->cond);
	pthread_mutex_unlock(&ma->lock);
}

void manager_audit_submit(struct manager_audit *ma, const struct audit_record *r)
{
	struct queued *q;

	if (!ma)
		return;
	q = malloc(sizeof(*q));
	if (!q) {
		log_full_errno(LOG_ERR, -ENOMEM, "audit: out of memory: a record was lost");
		return;
	}
	q->next = NULL;
	q->r = *r;
	if (!q->r.time_ns)
		q->r.time_ns = clock_ns(CLOCK_REALTIME);
	if (ma->backdate_ns && q->r.time_ns > ma->backdate_ns)
		q->r.time_ns -= ma->backdate_ns;
	pthread_mutex_lock(&ma->lock);
	if (ma->tail)
		ma->tail->next = q;
	else
		ma->head = q;
	ma->tail = q;
	pthread_cond_signal(&ma->cond);
	pthread_mutex_unlock(&ma->lock);
}

void manager_audit_flush(struct manager_audit *ma)
{
	if (!ma)
		return;
	pthread_mutex_lock(&ma->lock);
	while (ma->head || ma->writing)
		pthread_cond_wait(&ma->idle, &ma->lock);
	pthread_mutex_unlock(&ma->lock);
}
