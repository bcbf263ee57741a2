/* SPDX-License-Identifier: MIT */
/*
 * client.c: see client.h.
 *
 * Locking: c->lock protects the tiers' state, the calls and the deferred errors. It is never
 * held while an event callback runs (the router's callback may submit again) nor while
 * sending (a full socket would block everybody); a connection is reference counted so that a
 * sender never writes to a closed (and maybe reused) fd.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "basic/time-util.h"
#include "client.h"
#include "core/log.h"
#include "policy/policy.h"
#include "proto.h"
#include "worker.h"

#define RESTART_MIN_NS 100000000ull
#define RESTART_MAX_NS 30000000000ull
#define RESTART_RESET_NS 60000000000ull
#define MAX_RESOLVERS 8


struct cconn {
	atomic_uint n_ref;
	int fd;
	struct proto_conn conn;
};

static struct cconn *cconn_ref(struct cconn *k)
{
	if (k)
		atomic_fetch_add(&k->n_ref, 1);
	return k;
}

static void cconn_unref(struct cconn *k)
{
	if (k && atomic_fetch_sub(&k->n_ref, 1) == 1) {
		proto_conn_done(&k->conn);
		close(k->fd);
		free(k);
	}
}

struct ctarget {
	struct proto_target cfg;       /* what the worker gets (key included) */
	char host[256];
	uint16_t port;
	bool available;                /* the worker's last HEALTH */
	bool reported;                 /* a HEALTH named it (else: available once allowed) */
	double latency_ms;
};

struct ctier {
	unsigned tier;
	bool used;                     /* has targets: a worker runs */
	struct ctarget *targets;
	size_t n_targets;
	pid_t pid;
	struct cconn *conn;            /* NULL while not running */
	bool hello;
	bool ready;                    /* an allow-list was set and ALLOWED sent */
	uint64_t generation;           /* the last CONFIGURE sent */
	uint64_t allowed_gen;
	struct egress_dest *prev;      /* the endpoints allowed last (kept one more round) */
	size_t n_prev;
	unsigned starts;
	uint64_t started_ns;
	uint64_t restart_at_ns;        /* 0: none scheduled */
	uint64_t backoff_ns;
	bool config_dirty;             /* send CONFIGURE when running */
};

struct ccall {
	struct ccall *next;
	uint64_t id;
	unsigned tier;
	remote_event_fn fn;
	void *userdata;
};

struct deferred {
	struct deferred *next;
	uint64_t id;
	remote_event_fn fn;
	void *userdata;
	enum remote_error kind;
	char message[600];
};

struct egress_client {
	enum egress_client_mode mode;
	struct egress *eg;
	char *worker_path;
	char *disabled_reason;
	char *status;
	uint64_t resolve_interval_ns;
	char *test_wrong[4];
	void (*on_denial)(const struct egress_denial *d, void *userdata);
	void *userdata;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct ctier tiers[4];         /* [1..3] */
	struct ccall *calls;
	struct deferred *deferred;
	uint64_t next_id;
	uint64_t next_generation;
	bool configured;
	bool stopping;
	struct egress_dest resolvers[MAX_RESOLVERS];
	size_t n_resolvers;

	int wake_fd;
	bool helper_gone;              /* egress_fd() reached its end: stop polling it */
	pthread_t thread;
	bool has_thread;
};

struct cproxy {
	struct egress_client *c;
	unsigned tier;
	char *name;
};

static void wake(struct egress_client *c)
{
	uint64_t one = 1;

	(void) !write(c->wake_fd, &one, sizeof(one));
}

/* ---- deferred errors (delivered on the supervisor thread, never inside submit) ---- */

static int defer_error(struct egress_client *c, remote_event_fn fn, void *userdata, uint64_t id,
		       enum remote_error kind, const char *msg)
{
	struct deferred *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->id = id;
	d->fn = fn;
	d->userdata = userdata;
	d->kind = kind;
	snprintf(d->message, sizeof(d->message), "%s", msg);
	pthread_mutex_lock(&c->lock);
	d->next = c->deferred;
	c->deferred = d;
	pthread_mutex_unlock(&c->lock);
	wake(c);
	return 0;
}

static void deliver_deferred(struct egress_client *c)
{
	struct deferred *l;

	pthread_mutex_lock(&c->lock);
	l = c->deferred;
	c->deferred = NULL;
	pthread_mutex_unlock(&c->lock);
	while (l) {
		struct deferred *d = l;
		struct remote_event ev = { .type = REMOTE_EVENT_ERROR,
					   .id = d->id,
					   .error = d->kind,
					   .message = d->message };
		l = d->next;
		d->fn(&ev, d->userdata);
		free(d);
	}
}

/* ---- the proxies ---- */

static int proxy_submit(void *ctx, const struct remote_request *r, remote_event_fn fn,
			void *userdata, uint64_t *ret_id)
{
	struct cproxy *p = ctx;
	struct egress_client *c = p->c;
	struct ctier *t = &c->tiers[p->tier];
	struct proto_msg m = { .type = PROTO_SUBMIT, .target = p->name, .request = *r };
	struct cconn *conn = NULL;
	struct ccall *call;
	char msg[600], tiers[32];
	uint64_t id;
	int k;

	pthread_mutex_lock(&c->lock);
	id = c->next_id++;
	if (c->mode == EGRESS_CLIENT_DISABLED) {
		pthread_mutex_unlock(&c->lock);
		snprintf(msg, sizeof(msg),
			 "remote tiers are disabled: egress enforcement could not start (%s); "
			 "only T0 serves",
			 c->disabled_reason ? c->disabled_reason : "unknown reason");
		*ret_id = id;
		return defer_error(c, fn, userdata, id, REMOTE_ERR_BLOCKED, msg);
	}
	pthread_mutex_unlock(&c->lock);

	/* The hand-off check: the router should never get here with a tier the policy does
	 * not permit, and if it does, the request does not leave. */
	if (!(r->permitted_tiers & POLICY_TIER(p->tier))) {
		snprintf(msg, sizeof(msg),
			 "the core refused to hand this request to the T%u egress worker: its "
			 "permitted tiers are '%s'",
			 p->tier, policy_tiers_format(r->permitted_tiers, tiers, sizeof(tiers)));
		log_warning("egress: %s (target %s)", msg, p->name);
		*ret_id = id;
		return defer_error(c, fn, userdata, id, REMOTE_ERR_REFUSED, msg);
	}
	m.tiers = r->permitted_tiers;
	m.class = r->sensitivity;
	m.id = id;

	call = calloc(1, sizeof(*call));
	if (!call)
		return -ENOMEM;
	call->id = id;
	call->tier = p->tier;
	call->fn = fn;
	call->userdata = userdata;
	pthread_mutex_lock(&c->lock);
	if (!t->ready || !t->conn || c->stopping) {
		bool stopping = c->stopping;
		pthread_mutex_unlock(&c->lock);
		free(call);
		snprintf(msg, sizeof(msg), "the T%u egress worker is %s", p->tier,
			 stopping ? "stopping" : "not running yet (starting or restarting)");
		*ret_id = id;
		return defer_error(c, fn, userdata, id, REMOTE_ERR_DOWN, msg);
	}
	conn = cconn_ref(t->conn);
	call->next = c->calls;
	c->calls = call;
	pthread_mutex_unlock(&c->lock);

	*ret_id = id;
	k = proto_conn_send_msg(&conn->conn, &m);
	cconn_unref(conn);
	if (k < 0) {
		bool found = false;
		pthread_mutex_lock(&c->lock);
		for (struct ccall **q = &c->calls; *q; q = &(*q)->next)
			if (*q == call) {
				*q = call->next;
				found = true;
				break;
			}
		pthread_mutex_unlock(&c->lock);
		if (!found)
			return 0; /* the worker died meanwhile: its calls got their ERROR */
		free(call);
		if (k == -EINVAL || k == -E2BIG)
			/* The request breaks a protocol limit: the worker would refuse it. */
			return k;
		snprintf(msg, sizeof(msg), "sending to the T%u egress worker: %s", p->tier,
			 strerror(-k));
		return defer_error(c, fn, userdata, id, REMOTE_ERR_DOWN, msg);
	}
	return 0;
}

static int proxy_cancel(void *ctx, uint64_t id)
{
	struct cproxy *p = ctx;
	struct egress_client *c = p->c;
	struct proto_msg m = { .type = PROTO_CANCEL, .id = id };
	struct cconn *conn = NULL;
	bool found = false;

	pthread_mutex_lock(&c->lock);
	for (struct ccall *x = c->calls; x; x = x->next)
		if (x->id == id && x->tier == p->tier) {
			found = true;
			break;
		}
	if (found)
		conn = cconn_ref(c->tiers[p->tier].conn);
	pthread_mutex_unlock(&c->lock);
	if (!found)
		return -ENOENT;
	if (conn) {
		(void) proto_conn_send_msg(&conn->conn, &m);
		cconn_unref(conn);
	}
	return 0;
}

static struct ctarget *find_ctarget(struct ctier *t, const char *name)
{
	for (size_t i = 0; i < t->n_targets; i++)
		if (strcmp(t->targets[i].cfg.name, name) == 0)
			return &t->targets[i];
	return NULL;
}

static bool proxy_available(void *ctx)
{
	struct cproxy *p = ctx;
	struct egress_client *c = p->c;
	struct ctier *t = &c->tiers[p->tier];
	struct ctarget *x;
	bool ok;

	pthread_mutex_lock(&c->lock);
	x = find_ctarget(t, p->name);
	ok = c->mode != EGRESS_CLIENT_DISABLED && t->ready && t->conn && x && x->available;
	pthread_mutex_unlock(&c->lock);
	return ok;
}

static double proxy_latency(void *ctx)
{
	struct cproxy *p = ctx;
	struct egress_client *c = p->c;
	struct ctarget *x;
	double l = 0;

	pthread_mutex_lock(&c->lock);
	x = find_ctarget(&c->tiers[p->tier], p->name);
	if (x)
		l = x->latency_ms;
	pthread_mutex_unlock(&c->lock);
	return l;
}

/* The check itself runs in the tier's worker (GET /v1/models from inside its cgroup, a failure
 * starts the target's cool-down there); its result comes back as a HEALTH message. Here: ask
 * for one, and answer from what is known now. */
static int proxy_health_check(void *ctx, struct errmsg *e)
{
	struct cproxy *p = ctx;
	struct egress_client *c = p->c;
	struct proto_msg m = { .type = PROTO_CHECK };
	struct cconn *conn;
	int k;

	pthread_mutex_lock(&c->lock);
	conn = c->tiers[p->tier].ready ? cconn_ref(c->tiers[p->tier].conn) : NULL;
	pthread_mutex_unlock(&c->lock);
	if (!conn)
		return errmsg_set(e, -EHOSTDOWN, "target %s: the T%u egress worker is not ready",
				  p->name, p->tier);
	k = proto_conn_send_msg(&conn->conn, &m);
	cconn_unref(conn);
	if (k < 0)
		return errmsg_set(e, k, "target %s: asking the T%u egress worker for a health check: %s",
				  p->name, p->tier, strerror(-k));
	if (!proxy_available(ctx))
		return errmsg_set(e, -EHOSTDOWN, "target %s: down or cooling down (T%u worker's report)",
				  p->name, p->tier);
	return 0;
}

static void proxy_free(void *ctx)
{
	struct cproxy *p = ctx;

	if (p) {
		free(p->name);
		free(p);
	}
}

static const struct remote_transport proxy_transport = {
	.submit = proxy_submit,
	.cancel = proxy_cancel,
	.available = proxy_available,
	.latency_ms = proxy_latency,
	.health_check = proxy_health_check,
	.free_ctx = proxy_free,
};

int egress_client_target_new(struct egress_client *c, const struct config_target *t,
			     struct remote_target **ret, struct errmsg *e)
{
	struct cproxy *p;
	int k;

	assert_return(c && t && ret, -EINVAL);
	if (t->tier < 1 || t->tier > 3)
		return errmsg_set(e, -EINVAL, "target %s: tier %d is not remote", t->name, t->tier);
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->c = c;
	p->tier = (unsigned) t->tier;
	p->name = strdup(t->name);
	if (!p->name) {
		free(p);
		return -ENOMEM;
	}
	k = remote_target_new_transport(t->name, &proxy_transport, p, ret);
	if (k < 0)
		proxy_free(p);
	return k;
}

/* ---- workers ---- */

static void fail_calls(struct egress_client *c, unsigned tier, const char *why)
{
	struct ccall *mine = NULL;

	pthread_mutex_lock(&c->lock);
	for (struct ccall **q = &c->calls; *q;) {
		struct ccall *x = *q;
		if (x->tier == tier) {
			*q = x->next;
			x->next = mine;
			mine = x;
		} else
			q = &x->next;
	}
	pthread_mutex_unlock(&c->lock);
	while (mine) {
		struct ccall *x = mine;
		struct remote_event ev = { .type = REMOTE_EVENT_ERROR,
					   .id = x->id,
					   .error = REMOTE_ERR_DOWN,
					   .message = why };
		mine = x->next;
		x->fn(&ev, x->userdata);
		free(x);
	}
}

/* The worker is gone (or broken): drop its connection, end its calls, schedule a restart. */
static void worker_lost(struct egress_client *c, struct ctier *t, const char *why)
{
	struct cconn *conn;
	char msg[400];
	uint64_t now = now_ns();
	pid_t pid;

	pthread_mutex_lock(&c->lock);
	conn = t->conn;
	t->conn = NULL;
	t->ready = false;
	t->hello = false;
	pid = t->pid;
	t->pid = 0;
	if (t->started_ns && now - t->started_ns > RESTART_RESET_NS)
		t->backoff_ns = 0;
	t->backoff_ns = t->backoff_ns ? MIN(t->backoff_ns * 2, RESTART_MAX_NS) : RESTART_MIN_NS;
	t->restart_at_ns = c->stopping ? 0 : now + t->backoff_ns;
	pthread_mutex_unlock(&c->lock);
	if (c->mode == EGRESS_CLIENT_ENFORCED && pid > 0)
		(void) egress_kill_worker(c->eg, pid, SIGKILL, NULL);
	else if (c->mode == EGRESS_CLIENT_PLAIN && pid > 0) {
		(void) kill(pid, SIGKILL);
		(void) waitpid(pid, NULL, 0);
	}
	cconn_unref(conn);
	if (!c->stopping)
		log_warning("egress: the T%u worker (pid %d) is gone: %s; restarting it in %llu ms",
			    t->tier, (int) pid, why,
			    (unsigned long long) (t->backoff_ns / 1000000ull));
	snprintf(msg, sizeof(msg), "the T%u egress worker %s (%s)", t->tier,
		 c->stopping ? "stopped" : "died", why);
	fail_calls(c, t->tier, msg);
}

static int spawn_plain(struct egress_client *c, char *const argv[], pid_t *ret_pid, int *ret_fd)
{
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int k = -errno;
		close(sv[0]);
		close(sv[1]);
		return k;
	}
	if (pid == 0) {
		/* fd 3 is the worker's socket (dup2 clears CLOEXEC on the copy). */
		if (dup2(sv[1], 3) < 0)
			_exit(127);
		execv(c->worker_path, argv);
		_exit(127);
	}
	close(sv[1]);
	*ret_pid = pid;
	*ret_fd = sv[0];
	return 0;
}

static int send_configure(struct egress_client *c, struct ctier *t);

static void start_worker(struct egress_client *c, struct ctier *t)
{
	char tier[4], interval[24];
	char *argv[8];
	size_t n = 0;
	struct errmsg e = { { 0 } };
	struct cconn *conn;
	pid_t pid = 0;
	int fd = -1, k;

	snprintf(tier, sizeof(tier), "%u", t->tier);
	argv[n++] = (char *) "molly-egress";
	argv[n++] = (char *) "--tier";
	argv[n++] = tier;
	if (c->resolve_interval_ns) {
		snprintf(interval, sizeof(interval), "%llu",
			 (unsigned long long) MAX(1ull, c->resolve_interval_ns / 1000000000ull));
		argv[n++] = (char *) "--resolve-interval";
		argv[n++] = interval;
	}
	if (c->test_wrong[t->tier]) {
		argv[n++] = (char *) "--test-wrong-target";
		argv[n++] = c->test_wrong[t->tier];
	}
	argv[n] = NULL;

	if (c->mode == EGRESS_CLIENT_ENFORCED)
		k = egress_spawn_worker(c->eg, (enum egress_tier) t->tier, argv, &pid, &fd, &e);
	else
		k = spawn_plain(c, argv, &pid, &fd);
	if (k < 0) {
		pthread_mutex_lock(&c->lock);
		t->backoff_ns = t->backoff_ns ? MIN(t->backoff_ns * 2, RESTART_MAX_NS)
					      : RESTART_MIN_NS;
		t->restart_at_ns = now_ns() + t->backoff_ns;
		pthread_mutex_unlock(&c->lock);
		log_error("egress: starting the T%u worker failed: %s; retrying in %llu ms", t->tier,
			  e.text[0] ? e.text : strerror(-k),
			  (unsigned long long) (t->backoff_ns / 1000000ull));
		return;
	}
	conn = calloc(1, sizeof(*conn));
	if (!conn) {
		close(fd);
		return;
	}
	atomic_init(&conn->n_ref, 1);
	conn->fd = fd;
	proto_conn_init(&conn->conn, fd);
	pthread_mutex_lock(&c->lock);
	t->conn = conn;
	t->pid = pid;
	t->starts++;
	t->started_ns = now_ns();
	t->restart_at_ns = 0;
	t->config_dirty = true;
	pthread_mutex_unlock(&c->lock);
	log_info("egress: T%u worker started (pid %d%s)", t->tier, (int) pid,
		 c->mode == EGRESS_CLIENT_ENFORCED ? ", in its cgroup" : ", TEST: plain child");
	(void) send_configure(c, t);
}

static int send_configure(struct egress_client *c, struct ctier *t)
{
	struct proto_msg m = { .type = PROTO_CONFIGURE };
	struct cconn *conn;
	int k;

	pthread_mutex_lock(&c->lock);
	conn = cconn_ref(t->conn);
	if (!conn) {
		pthread_mutex_unlock(&c->lock);
		return -ENOTCONN;
	}
	t->config_dirty = false;
	t->generation = ++c->next_generation;
	m.generation = t->generation;
	m.targets = calloc(MAX(t->n_targets, (size_t) 1), sizeof(*m.targets));
	if (m.targets) {
		for (size_t i = 0; i < t->n_targets; i++)
			m.targets[i] = t->targets[i].cfg; /* borrowed */
		m.n_targets = t->n_targets;
	}
	pthread_mutex_unlock(&c->lock);
	k = m.targets ? proto_conn_send_msg(&conn->conn, &m) : -ENOMEM;
	free(m.targets);
	cconn_unref(conn);
	return k;
}

/* ---- what a worker says ---- */

static bool same_dest(const struct egress_dest *a, const struct egress_dest *b)
{
	return a->family == b->family && a->port == b->port &&
	       memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) == 0;
}

static void add_dest(struct egress_dest *v, size_t *n, size_t cap, const struct egress_dest *d)
{
	for (size_t i = 0; i < *n; i++)
		if (same_dest(&v[i], d))
			return;
	if (*n < cap)
		v[(*n)++] = *d;
}

/* ENDPOINTS: check, set the allow-list, answer ALLOWED. -EBADMSG: the worker lies. */
static int handle_endpoints(struct egress_client *c, struct ctier *t, const struct proto_msg *m)
{
	_cleanup_free_ struct egress_dest *set = NULL, *mine = NULL;
	size_t n = 0, n_mine = 0, cap = EGRESS_MAX_DEST;
	struct errmsg e = { { 0 } };
	struct proto_msg ok = { .type = PROTO_ALLOWED, .generation = m->generation };
	struct cconn *conn;
	int k;

	set = calloc(cap, sizeof(*set));
	mine = calloc(cap, sizeof(*mine));
	if (!set || !mine)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	if (m->generation != t->generation) {
		pthread_mutex_unlock(&c->lock);
		return 0; /* an answer to an older CONFIGURE: the newer one follows */
	}
	for (size_t i = 0; i < m->n_endpoints; i++) {
		const struct proto_endpoint *p = &m->endpoints[i];
		struct ctarget *x = find_ctarget(t, p->target);
		struct egress_dest d = { .family = p->family, .port = p->port };
		uint8_t numeric[16] = { 0 };

		memcpy(d.addr, p->addr, 16);
		if (!x || p->port != x->port) {
			pthread_mutex_unlock(&c->lock);
			log_error("egress: the T%u worker reported endpoint %zu for '%s' that is not "
				  "one of its targets' (or another port)",
				  t->tier, i, p->target);
			return -EBADMSG;
		}
		if ((inet_pton(AF_INET, x->host, numeric) == 1 &&
		     (d.family != AF_INET || memcmp(numeric, d.addr, 4) != 0)) ||
		    (inet_pton(AF_INET6, x->host, numeric) == 1 &&
		     (d.family != AF_INET6 || memcmp(numeric, d.addr, 16) != 0))) {
			pthread_mutex_unlock(&c->lock);
			log_error("egress: the T%u worker reported an address for '%s' other than "
				  "its URL's own",
				  t->tier, p->target);
			return -EBADMSG;
		}
		add_dest(mine, &n_mine, cap, &d);
	}
	for (size_t i = 0; i < n_mine; i++)
		add_dest(set, &n, cap, &mine[i]);
	/* The previous answer stays allowed one more round: calls that started before the
	 * worker switches its pins still connect. */
	for (size_t i = 0; i < t->n_prev; i++)
		add_dest(set, &n, cap, &t->prev[i]);
	for (size_t i = 0; i < c->n_resolvers; i++)
		add_dest(set, &n, cap, &c->resolvers[i]);
	pthread_mutex_unlock(&c->lock);

	for (size_t i = 0; i < m->n_unresolved; i++)
		log_warning("egress: T%u target %s: %s", t->tier, m->unresolved[i].target,
			    m->unresolved[i].message ? m->unresolved[i].message : "not resolved");

	if (c->mode == EGRESS_CLIENT_ENFORCED) {
		k = egress_set_allowed(c->eg, (enum egress_tier) t->tier, set, n, &e);
		if (k < 0) {
			log_error("egress: setting the T%u allow-list failed: %s", t->tier,
				  e.text[0] ? e.text : strerror(-k));
			return 0; /* the worker keeps its old targets; the next round retries */
		}
	}
	for (size_t i = 0; i < n; i++) {
		char buf[64];
		if (egress_dest_format(&set[i], buf, sizeof(buf)) >= 0)
			log_debug("egress: T%u allows %s", t->tier, buf);
	}
	pthread_mutex_lock(&c->lock);
	free(t->prev);
	t->prev = TAKE_PTR(mine);
	t->n_prev = n_mine;
	conn = cconn_ref(t->conn);
	pthread_mutex_unlock(&c->lock);
	if (!conn)
		return 0;
	k = proto_conn_send_msg(&conn->conn, &ok);
	cconn_unref(conn);
	if (k < 0)
		return 0; /* it died: the read side notices */
	pthread_mutex_lock(&c->lock);
	t->allowed_gen = m->generation;
	t->ready = true;
	/* A target the worker has not reported on yet is as available as a new one is; its
	 * HEALTH follows at once and corrects it. */
	for (size_t i = 0; i < t->n_targets; i++)
		if (!t->targets[i].reported)
			t->targets[i].available = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	log_info("egress: T%u allow-list set: %zu destination(s) for %zu target(s)", t->tier, n,
		 t->n_targets);
	return 0;
}

static int handle_event(struct egress_client *c, struct ctier *t, struct proto_msg *m)
{
	struct ccall *x = NULL;
	bool final = m->event.type != REMOTE_EVENT_TEXT;

	pthread_mutex_lock(&c->lock);
	for (struct ccall **q = &c->calls; *q; q = &(*q)->next)
		if ((*q)->id == m->id) {
			x = *q;
			if (x->tier != t->tier) {
				pthread_mutex_unlock(&c->lock);
				log_error("egress: the T%u worker sent an event for a T%u call",
					  t->tier, x->tier);
				return -EBADMSG;
			}
			if (final)
				*q = x->next;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	if (!x)
		return 0; /* a call that ended already (the worker raced its death) */
	m->event.id = m->id;
	x->fn(&m->event, x->userdata);
	if (final)
		free(x);
	return 0;
}

static int handle_health(struct egress_client *c, struct ctier *t, const struct proto_msg *m)
{
	/* A report may name one target (after a call) or all of them. */
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < m->n_health; i++) {
		struct ctarget *x = find_ctarget(t, m->health[i].name);
		if (x) {
			x->reported = true;
			x->available = m->health[i].available;
			x->latency_ms = m->health[i].latency_ms;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* One readable worker socket. */
static void read_worker(struct egress_client *c, struct ctier *t)
{
	struct cconn *conn;
	struct proto_msg m = { 0 };
	struct errmsg e = { { 0 } };
	const char *text;
	size_t len;
	int k;

	pthread_mutex_lock(&c->lock);
	conn = cconn_ref(t->conn);
	pthread_mutex_unlock(&c->lock);
	if (!conn)
		return;
	k = proto_conn_recv(&conn->conn, &text, &len);
	if (k <= 0) {
		cconn_unref(conn);
		if (k < 0)
			worker_lost(c, t, k == -EPIPE ? "its socket closed" : strerror(-k));
		return;
	}
	k = proto_decode(text, len, &m, &e);
	cconn_unref(conn);
	if (k < 0) {
		log_error("egress: the T%u worker sent a bad message: %s", t->tier, e.text);
		worker_lost(c, t, "protocol error");
		return;
	}
	switch (m.type) {
	case PROTO_HELLO:
		if (m.tier != t->tier || m.version != PROTO_VERSION)
			k = -EBADMSG;
		pthread_mutex_lock(&c->lock);
		t->hello = true;
		pthread_mutex_unlock(&c->lock);
		break;
	case PROTO_ENDPOINTS:
		k = handle_endpoints(c, t, &m);
		break;
	case PROTO_EVENT:
		k = handle_event(c, t, &m);
		break;
	case PROTO_HEALTH:
		k = handle_health(c, t, &m);
		break;
	default:
		log_error("egress: the T%u worker sent a '%s' message, which only the core sends",
			  t->tier, proto_type_name(m.type));
		k = -EBADMSG;
		break;
	}
	proto_msg_done(&m);
	if (k == -EBADMSG)
		worker_lost(c, t, "protocol error");
}

static void on_exit_cb(pid_t pid, enum egress_tier tier, int status, void *userdata)
{
	if (WIFSIGNALED(status))
		log_warning("egress: T%d worker %d was killed by signal %d", (int) tier, (int) pid,
			    WTERMSIG(status));
	else
		log_info("egress: T%d worker %d exited with status %d", (int) tier, (int) pid,
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static void *supervisor_main(void *arg)
{
	struct egress_client *c = arg;

	for (;;) {
		struct pollfd p[6];
		struct ctier *who[6];
		size_t n = 0;
		int timeout = 1000;
		uint64_t now = now_ns();
		bool stopping;

		pthread_mutex_lock(&c->lock);
		stopping = c->stopping;
		p[n] = (struct pollfd){ .fd = c->wake_fd, .events = POLLIN };
		who[n++] = NULL;
		if (c->eg && !c->helper_gone) {
			p[n] = (struct pollfd){ .fd = egress_fd(c->eg), .events = POLLIN };
			who[n++] = NULL;
		}
		for (unsigned i = 1; i <= 3; i++) {
			struct ctier *t = &c->tiers[i];
			if (t->conn) {
				p[n] = (struct pollfd){ .fd = t->conn->fd, .events = POLLIN };
				who[n++] = t;
			} else if (t->restart_at_ns) {
				uint64_t d = t->restart_at_ns > now ? t->restart_at_ns - now : 0;
				timeout = MIN(timeout, (int) (d / 1000000ull));
			}
		}
		pthread_mutex_unlock(&c->lock);
		if (stopping)
			break;
		if (poll(p, n, timeout) < 0 && errno != EINTR)
			break;
		for (size_t i = 0; i < n; i++) {
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (p[i].fd == c->wake_fd) {
				uint64_t x;
				(void) !read(c->wake_fd, &x, sizeof(x));
			} else if (!who[i]) {
				int k = egress_process(c->eg, c->on_denial, c->userdata);
				if (k == -ENOTCONN) {
					log_error("egress: the privileged helper is gone: the filters "
						  "stay (fail closed), but allow-lists cannot change "
						  "and workers cannot restart");
					c->helper_gone = true;
				}
			} else
				read_worker(c, who[i]);
		}
		deliver_deferred(c);
		now = now_ns();
		for (unsigned i = 1; i <= 3; i++) {
			struct ctier *t = &c->tiers[i];
			bool start, dirty;
			pthread_mutex_lock(&c->lock);
			start = t->used && !t->conn && !c->stopping && t->restart_at_ns &&
				t->restart_at_ns <= now;
			dirty = t->conn && t->config_dirty;
			pthread_mutex_unlock(&c->lock);
			if (start)
				start_worker(c, t);
			else if (dirty)
				(void) send_configure(c, t);
		}
	}
	/* Stopping: close the sockets (the workers exit), end their calls. */
	for (unsigned i = 1; i <= 3; i++)
		if (c->tiers[i].conn)
			worker_lost(c, &c->tiers[i], "the daemon is stopping");
	deliver_deferred(c);
	return NULL;
}

/* ---- life cycle ---- */

static void load_resolvers(struct egress_client *c)
{
	FILE *f = fopen("/etc/resolv.conf", "re");
	char line[512];

	c->n_resolvers = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f) && c->n_resolvers < MAX_RESOLVERS) {
		char addr[128];
		struct egress_dest d = { .port = 53 };
		char *pct;

		if (sscanf(line, " nameserver %127s", addr) != 1)
			continue;
		pct = strchr(addr, '%'); /* fe80::1%eth0: the scope does not matter here */
		if (pct)
			*pct = 0;
		if (inet_pton(AF_INET, addr, d.addr) == 1)
			d.family = AF_INET;
		else if (inet_pton(AF_INET6, addr, d.addr) == 1)
			d.family = AF_INET6;
		else
			continue;
		add_dest(c->resolvers, &c->n_resolvers, MAX_RESOLVERS, &d);
	}
	fclose(f);
}

int egress_client_new(const struct egress_client_options *o, struct egress_client **ret,
		      struct errmsg *e)
{
	struct egress_client *c;
	int k;

	assert_return(o && ret, -EINVAL);
	assert_return(o->mode != EGRESS_CLIENT_ENFORCED || o->eg, -EINVAL);
	assert_return(o->mode != EGRESS_CLIENT_PLAIN || o->worker_path, -EINVAL);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->wake_fd = -1;
	c->mode = o->mode;
	c->next_id = 1;
	c->resolve_interval_ns = o->resolve_interval_ns;
	c->on_denial = o->on_denial;
	c->userdata = o->userdata;
	for (unsigned i = 1; i <= 3; i++)
		c->tiers[i].tier = i;
	if (o->worker_path && !(c->worker_path = strdup(o->worker_path)))
		goto oom;
	if (o->disabled_reason && !(c->disabled_reason = strdup(o->disabled_reason)))
		goto oom;
	for (unsigned i = 1; i <= 3; i++)
		if (o->test_wrong_target[i] && !(c->test_wrong[i] = strdup(o->test_wrong_target[i])))
			goto oom;
	if (c->mode == EGRESS_CLIENT_ENFORCED)
		k = asprintf(&c->status, "enforced");
	else if (c->mode == EGRESS_CLIENT_PLAIN)
		k = asprintf(&c->status, "plain (test: workers without cgroup or filter)");
	else
		k = asprintf(&c->status, "disabled: %s",
			     c->disabled_reason ? c->disabled_reason : "unknown reason");
	if (k < 0) {
		c->status = NULL;
		goto oom;
	}
	load_resolvers(c);
	c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->wake_fd < 0) {
		k = errmsg_set(e, -errno, "eventfd: %s", strerror(errno));
		egress_client_free(c);
		return k;
	}
	if (o->eg) {
		c->eg = o->eg;
		egress_set_exit_handler(c->eg, on_exit_cb, c);
	}
	k = -pthread_create(&c->thread, NULL, supervisor_main, c);
	if (k < 0) {
		errmsg_set(e, k, "starting the egress supervisor thread: %s", strerror(-k));
		c->eg = NULL; /* the caller keeps it on failure */
		egress_client_free(c);
		return k;
	}
	c->has_thread = true;
	*ret = c;
	return 0;
oom:
	egress_client_free(c);
	return -ENOMEM;
}

static void ctargets_free(struct ctarget *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].cfg.name);
		free(v[i].cfg.url);
		free(v[i].cfg.model);
		if (v[i].cfg.key) {
			explicit_bzero(v[i].cfg.key, strlen(v[i].cfg.key));
			free(v[i].cfg.key);
		}
	}
	free(v);
}

struct egress_client *egress_client_free(struct egress_client *c)
{
	if (!c)
		return NULL;
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	if (c->has_thread) {
		wake(c);
		pthread_join(c->thread, NULL);
	}
	deliver_deferred(c);
	/* Calls no worker will answer (none normally: the router frees its requests first). */
	for (unsigned i = 1; i <= 3; i++)
		fail_calls(c, i, "the daemon is stopping");
	c->eg = egress_free(c->eg);
	for (unsigned i = 1; i <= 3; i++) {
		ctargets_free(c->tiers[i].targets, c->tiers[i].n_targets);
		free(c->tiers[i].prev);
	}
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	free(c->worker_path);
	free(c->disabled_reason);
	free(c->status);
	for (unsigned i = 1; i <= 3; i++)
		free(c->test_wrong[i]);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c);
	return NULL;
}

enum egress_client_mode egress_client_mode(const struct egress_client *c)
{
	return c->mode;
}

const char *egress_client_status(const struct egress_client *c)
{
	return c->status;
}

pid_t egress_client_worker_pid(struct egress_client *c, unsigned tier)
{
	pid_t p;

	if (tier < 1 || tier > 3)
		return 0;
	pthread_mutex_lock(&c->lock);
	p = c->tiers[tier].pid;
	pthread_mutex_unlock(&c->lock);
	return p;
}

unsigned egress_client_worker_starts(struct egress_client *c, unsigned tier)
{
	unsigned n;

	if (tier < 1 || tier > 3)
		return 0;
	pthread_mutex_lock(&c->lock);
	n = c->tiers[tier].starts;
	pthread_mutex_unlock(&c->lock);
	return n;
}

static int ctarget_from_config(const struct config_target *t, struct ctarget *x,
			       struct errmsg *e)
{
	char *key = NULL;
	int k;

	*x = (struct ctarget){ 0 };
	if (worker_url_host_port(t->url, x->host, &x->port) < 0)
		return errmsg_set(e, -EINVAL,
				  "target %s: URL '%s' has no host the egress worker can resolve",
				  t->name, t->url);
	k = remote_credential_find(t->name, t->credential_file, &key, e);
	if (k < 0)
		return k;
	x->cfg = (struct proto_target){
		.name = strdup(t->name),
		.url = strdup(t->url),
		.model = t->model ? strdup(t->model) : NULL,
		.key = key,
		.timeout_ms = t->timeout_ns ? MAX(1ull, MIN(t->timeout_ns / 1000000ull, 3600000ull))
					    : 30000,
		.retries = MIN(t->retries, 100u),
		.user_controlled = t->user_controlled,
	};
	if (!x->cfg.name || !x->cfg.url || (t->model && !x->cfg.model)) {
		free(x->cfg.name);
		free(x->cfg.url);
		free(x->cfg.model);
		if (key) {
			explicit_bzero(key, strlen(key));
			free(key);
		}
		return -ENOMEM;
	}
	return 0;
}

int egress_client_configure(struct egress_client *c, const struct config *cfg, uint64_t wait_ns,
			    struct errmsg *e)
{
	struct ctarget *next[4] = { NULL };
	size_t n_next[4] = { 0 };
	struct errmsg e2 = { { 0 } };
	int warn = 0, k = 0;
	bool first;

	assert_return(c && cfg, -EINVAL);
	load_resolvers(c);
	pthread_mutex_lock(&c->lock);
	first = !c->configured;
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 1; i <= 3; i++) {
		next[i] = calloc(MAX(cfg->n_targets, (size_t) 1), sizeof(struct ctarget));
		if (!next[i]) {
			k = -ENOMEM;
			goto out;
		}
	}
	for (size_t i = 0; i < cfg->n_targets; i++) {
		const struct config_target *t = &cfg->targets[i];
		unsigned tier = (unsigned) t->tier;
		bool known = first;

		if (tier < 1 || tier > 3)
			continue;
		if (!first) {
			pthread_mutex_lock(&c->lock);
			known = c->tiers[tier].used && find_ctarget(&c->tiers[tier], t->name);
			pthread_mutex_unlock(&c->lock);
		}
		if (!known) {
			errmsg_set(e, 1, "target %s is new or moved to another tier: restart to use it",
				   t->name);
			warn = 1;
			continue;
		}
		k = ctarget_from_config(t, &next[tier][n_next[tier]], &e2);
		if (k < 0) {
			errmsg_set(e, k, "%s", e2.text);
			goto out;
		}
		n_next[tier]++;
	}
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 1; i <= 3; i++) {
		struct ctier *t = &c->tiers[i];
		if (first)
			t->used = n_next[i] > 0;
		if (!t->used)
			continue;
		if (!first && n_next[i] == 0) {
			/* Every target of the tier is gone from the file: keep the worker with
			 * none, calls to it fail and the router falls back. */
		}
		/* What the worker said about a target stays until it says otherwise. */
		for (size_t j = 0; j < n_next[i]; j++) {
			struct ctarget *old = find_ctarget(t, next[i][j].cfg.name);
			if (old) {
				next[i][j].available = old->available;
				next[i][j].reported = old->reported;
				next[i][j].latency_ms = old->latency_ms;
			}
		}
		ctargets_free(t->targets, t->n_targets);
		t->targets = TAKE_PTR(next[i]);
		t->n_targets = n_next[i];
		if (c->mode != EGRESS_CLIENT_DISABLED) {
			if (t->conn)
				t->config_dirty = true;
			else if (!t->restart_at_ns)
				t->restart_at_ns = 1; /* start now */
		}
	}
	c->configured = true;
	pthread_mutex_unlock(&c->lock);
	wake(c);

	if (c->mode != EGRESS_CLIENT_DISABLED && wait_ns > 0) {
		/* Wait until every used tier's worker allowed the configuration just sent. */
		struct timespec ts;
		uint64_t deadline;
		clock_gettime(CLOCK_REALTIME, &ts);
		deadline = (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec + wait_ns;
		pthread_mutex_lock(&c->lock);
		for (;;) {
			bool all = true;
			for (unsigned i = 1; i <= 3; i++) {
				struct ctier *t = &c->tiers[i];
				if (t->used && (t->config_dirty || !t->ready || !t->generation ||
						t->allowed_gen != t->generation))
					all = false;
			}
			if (all || c->stopping)
				break;
			ts.tv_sec = (time_t) (deadline / 1000000000ull);
			ts.tv_nsec = (long) (deadline % 1000000000ull);
			if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT) {
				errmsg_set(e, 1,
					   "an egress worker did not confirm its targets within "
					   "%llu ms (it keeps trying)",
					   (unsigned long long) (wait_ns / 1000000ull));
				warn = 1;
				break;
			}
		}
		pthread_mutex_unlock(&c->lock);
	}
	k = warn;
out:
	for (unsigned i = 1; i <= 3; i++)
		if (next[i])
			ctargets_free(next[i], n_next[i]);
	return k;
}
