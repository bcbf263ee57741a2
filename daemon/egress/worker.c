/* SPDX-License-Identifier: MIT */
/*
 * worker.c: see worker.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "basic/time-util.h"
#include "policy/policy.h"
#include "proto.h"
#include "worker.h"

/* ---- the payload check ---- */

static pthread_once_t policy_once = PTHREAD_ONCE_INIT;
static struct policy *default_policy;

static void policy_init_once(void)
{
	/* The compiled-in defaults: the detectors, no user rules (the core's [Rule]s only make a
	 * class stricter, and the core declares that class). */
	if (policy_new_defaults(&default_policy) < 0)
		default_policy = NULL;
}

struct scan_result {
	enum policy_class worst;
	const char *kind; /* of the first finding of the worst class */
	/* the same over the findings redaction replaces (identifiers, credentials): what T3 may
	 * never see. A special-category finding (lexicon, classifier) marks what a request is
	 * about; its text stays when a personal request goes to T3 redacted (docs/policy.md). */
	enum policy_class worst_value;
	const char *value_kind;
};

static int scan_piece(const char *s, struct scan_result *res)
{
	struct policy_request req = { .text = s, .len = s ? strlen(s) : 0 };
	struct policy_decision d = { 0 };
	int k;

	if (!s || !s[0])
		return 0;
	k = policy_evaluate(default_policy, &req, &d);
	if (k < 0)
		return k;
	for (size_t i = 0; i < d.n_findings; i++) {
		const struct policy_finding *f = &d.findings[i];
		if (f->class > res->worst || (!res->kind && f->class == res->worst)) {
			res->worst = f->class;
			res->kind = f->kind; /* static: a built-in layer's name */
		}
		if (policy_finding_redactable(f) &&
		    (f->class > res->worst_value ||
		     (!res->value_kind && f->class == res->worst_value))) {
			res->worst_value = f->class;
			res->value_kind = f->kind;
		}
	}
	policy_decision_done(&d);
	return 0;
}

int worker_check_payload(unsigned tier, bool user_controlled, uint32_t permitted_tiers,
			 int declared_class, const struct remote_request *r, char *why,
			 size_t why_size)
{
	struct scan_result res = { .worst = POLICY_CLASS_PUBLIC,
				   .worst_value = POLICY_CLASS_PUBLIC };
	char tiers[32];
	int k = 0;

	if (tier < 1 || tier > 3 || !r) {
		snprintf(why, why_size, "not a remote tier");
		return -EPERM;
	}
	if (!(permitted_tiers & POLICY_TIER(tier))) {
		snprintf(why, why_size,
			 "the request's permitted tiers (%s) do not include T%u",
			 policy_tiers_format(permitted_tiers, tiers, sizeof(tiers)), tier);
		return -EPERM;
	}
	pthread_once(&policy_once, policy_init_once);
	if (!default_policy) {
		snprintf(why, why_size, "the detectors could not start");
		return -EPERM; /* fail closed */
	}
	if (r->prompt)
		k = scan_piece(r->prompt, &res);
	for (size_t i = 0; k >= 0 && r->messages && i < r->n_messages; i++) {
		k = scan_piece(r->messages[i].content, &res);
		if (k >= 0)
			k = scan_piece(r->messages[i].role, &res);
	}
	for (size_t i = 0; k >= 0 && i < r->n_stop; i++)
		k = scan_piece(r->stop[i], &res);
	if (k < 0) {
		snprintf(why, why_size, "the detectors failed: %s", strerror(-k));
		return -EPERM;
	}
	if (declared_class < 0 || declared_class >= POLICY_CLASS_COUNT_ ||
	    (int) res.worst > declared_class) {
		snprintf(why, why_size,
			 "the payload holds %s data (%s) but was handed over as %s",
			 policy_class_name(res.worst), res.kind ? res.kind : "?",
			 declared_class >= 0 && declared_class < POLICY_CLASS_COUNT_
				 ? policy_class_name((enum policy_class) declared_class)
				 : "an unknown class");
		return -EPERM;
	}
	if (res.worst_value >= POLICY_CLASS_PERSONAL && tier == 3) {
		snprintf(why, why_size, "T3 may not carry unredacted %s data (%s found)",
			 policy_class_name(res.worst_value), res.value_kind ? res.value_kind : "?");
		return -EPERM;
	}
	if (res.worst >= POLICY_CLASS_PERSONAL && tier == 2 && !user_controlled) {
		snprintf(why, why_size,
			 "T2 may carry %s data (%s found) only to a user-controlled target",
			 policy_class_name(res.worst), res.kind ? res.kind : "?");
		return -EPERM;
	}
	return 0;
}

/* ---- URLs ---- */

int worker_url_host_port(const char *url, char host[256], uint16_t *ret_port)
{
	const char *p, *end, *hs, *he;
	unsigned long port;
	bool tls;

	if (strncmp(url, "http://", 7) == 0) {
		p = url + 7;
		tls = false;
	} else if (strncmp(url, "https://", 8) == 0) {
		p = url + 8;
		tls = true;
	} else
		return -EINVAL;
	end = p + strcspn(p, "/?#");
	if (memchr(p, '@', (size_t) (end - p)))
		return -EINVAL; /* no user info: it would only hide where we connect */
	if (*p == '[') {
		hs = p + 1;
		he = memchr(hs, ']', (size_t) (end - hs));
		if (!he)
			return -EINVAL;
		p = he + 1;
	} else {
		hs = p;
		he = memchr(p, ':', (size_t) (end - p));
		if (!he)
			he = end;
		p = he;
	}
	if (he == hs || (size_t) (he - hs) >= 256)
		return -EINVAL;
	memcpy(host, hs, (size_t) (he - hs));
	host[he - hs] = 0;
	if (p < end && *p == ':') {
		char *e;
		p++;
		if (p == end)
			return -EINVAL;
		port = strtoul(p, &e, 10);
		if (e != end || port == 0 || port > 65535)
			return -EINVAL;
	} else if (p == end)
		port = tls ? 443 : 80;
	else
		return -EINVAL;
	*ret_port = (uint16_t) port;
	return 0;
}

/* ---- the worker ---- */

struct wtarget {
	struct wtarget *next;
	struct proto_target cfg;       /* owned copies */
	struct remote_target *rt;
	atomic_uint checking;          /* health-check rounds using it: not freed meanwhile */
};

struct wcall {
	struct wcall *next;
	struct worker *w;
	uint64_t core_id;
	struct remote_target *rt;      /* borrowed: freed only once idle */
	uint64_t rid;
	bool submitted;
	bool cancel_pending;
	char name[PROTO_MAX_NAME + 1];  /* the target's, for the health report at the end */
};

struct outmsg {
	struct outmsg *next;
	char *text;
	size_t len;
};

struct resolved {
	char **pins;                   /* CURLOPT_RESOLVE entries (none for a numeric host) */
	size_t n_pins;
};

struct worker {
	const struct worker_options *o;
	struct proto_conn conn;

	pthread_mutex_t lock;          /* calls, out queue */
	pthread_cond_t out_cond;
	struct outmsg *out_head, *out_tail;
	size_t out_bytes;
	bool out_closed;
	pthread_t writer;
	struct wcall *calls;

	/* main loop only */
	struct wtarget *targets;       /* the applied configuration */
	struct wtarget *retired;       /* replaced, freed once idle */
	uint64_t generation;
	struct proto_target *cfg;      /* the applied configuration, n_cfg */
	size_t n_cfg;
	bool has_pending;              /* ENDPOINTS sent, ALLOWED awaited */
	uint64_t pending_gen;
	struct proto_target *pending_cfg;
	size_t n_pending_cfg;
	struct resolved *pending_res;  /* per pending_cfg entry */
	char *endpoints_sig;           /* what the last ENDPOINTS said, to notice a change */
	char *health_sig;
	atomic_bool health_dirty;      /* a call ended: the next full report goes out anyway */
	uint64_t next_resolve_ns;
	atomic_bool check_running;     /* one health-check round at a time */
};


static void log_line(const struct worker *w, const char *fmt, ...) _printf_(2, 3);
static void log_line(const struct worker *w, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* stderr is the helper's, i.e. the daemon's journal stream. */
	fprintf(stderr, "molly-egress[T%u]: %s\n", w->o->tier, buf);
}

/* ---- the out queue ---- */

/* Takes text. wait: block while the queue is over its bound (libcurl threads); the main
 * loop never waits. */
static void queue_push(struct worker *w, char *text, size_t len, bool wait)
{
	struct outmsg *o = calloc(1, sizeof(*o));

	if (!o) {
		explicit_bzero(text, len);
		free(text);
		return;
	}
	o->text = text;
	o->len = len;
	pthread_mutex_lock(&w->lock);
	while (wait && !w->out_closed && w->out_bytes > WORKER_MAX_QUEUED)
		pthread_cond_wait(&w->out_cond, &w->lock);
	if (w->out_closed) {
		pthread_mutex_unlock(&w->lock);
		explicit_bzero(text, len);
		free(text);
		free(o);
		return;
	}
	if (w->out_tail)
		w->out_tail->next = o;
	else
		w->out_head = o;
	w->out_tail = o;
	w->out_bytes += len;
	pthread_cond_broadcast(&w->out_cond);
	pthread_mutex_unlock(&w->lock);
}

static int send_msg(struct worker *w, const struct proto_msg *m, bool wait)
{
	char *s = NULL;
	size_t n = 0;
	int k;

	k = proto_encode(m, &s, &n);
	if (k < 0)
		return k;
	queue_push(w, s, n, wait);
	return 0;
}

static void *writer_main(void *arg)
{
	struct worker *w = arg;

	for (;;) {
		struct outmsg *o;

		pthread_mutex_lock(&w->lock);
		while (!w->out_head && !w->out_closed)
			pthread_cond_wait(&w->out_cond, &w->lock);
		o = w->out_head;
		if (!o) {
			pthread_mutex_unlock(&w->lock);
			return NULL;
		}
		w->out_head = o->next;
		if (!w->out_head)
			w->out_tail = NULL;
		w->out_bytes -= o->len;
		pthread_cond_broadcast(&w->out_cond);
		pthread_mutex_unlock(&w->lock);

		if (proto_conn_send(&w->conn, o->text, o->len) < 0) {
			/* The core is gone: drop the rest; the main loop sees the end too. */
			pthread_mutex_lock(&w->lock);
			w->out_closed = true;
			pthread_cond_broadcast(&w->out_cond);
			pthread_mutex_unlock(&w->lock);
		}
		explicit_bzero(o->text, o->len);
		free(o->text);
		free(o);
	}
}

/* ---- calls ---- */

static void send_error(struct worker *w, uint64_t id, enum remote_error kind, const char *msg)
{
	struct proto_msg m = { .type = PROTO_EVENT,
			       .id = id,
			       .event = { .type = REMOTE_EVENT_ERROR,
					  .id = id,
					  .error = kind,
					  .message = msg } };

	(void) send_msg(w, &m, false);
}

static void on_remote_event(const struct remote_event *ev, void *userdata)
{
	struct wcall *c = userdata;
	struct worker *w = c->w;
	struct proto_msg m = { .type = PROTO_EVENT, .id = c->core_id, .event = *ev };

	m.event.id = c->core_id;
	if (ev->type != REMOTE_EVENT_TEXT) {
		/* The target's health first (a failure starts its cool-down): the core must
		 * not route the next request to it before it knows. */
		struct proto_health h = { .name = c->name,
					  .available = remote_target_available(c->rt),
					  .latency_ms = remote_target_latency_ms(c->rt) };
		struct proto_msg hm = { .type = PROTO_HEALTH, .health = &h, .n_health = 1 };
		(void) send_msg(w, &hm, true);
		atomic_store(&w->health_dirty, true);
	}
	if (send_msg(w, &m, true) < 0 && ev->type == REMOTE_EVENT_TEXT) {
		/* Could not encode a chunk (a NUL in it): the client must not miss it silently. */
		(void) remote_cancel(c->rt, c->rid);
	}
	if (ev->type == REMOTE_EVENT_TEXT)
		return;
	pthread_mutex_lock(&w->lock);
	for (struct wcall **p = &w->calls; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	pthread_mutex_unlock(&w->lock);
	free(c);
}

static struct wtarget *find_target(struct wtarget *l, const char *name)
{
	for (; l; l = l->next)
		if (strcmp(l->cfg.name, name) == 0)
			return l;
	return NULL;
}

static void handle_submit(struct worker *w, struct proto_msg *m)
{
	struct wtarget *t = find_target(w->targets, m->target);
	struct wcall *c;
	char why[512];
	int k;

	if (!t) {
		snprintf(why, sizeof(why), "target '%s' is not configured in the T%u worker%s",
			 m->target, w->o->tier, w->has_pending ? " yet" : "");
		send_error(w, m->id, REMOTE_ERR_DOWN, why);
		return;
	}
	if (worker_check_payload(w->o->tier, t->cfg.user_controlled, m->tiers, m->class,
				 &m->request, why, sizeof(why)) < 0) {
		char msg[600];
		snprintf(msg, sizeof(msg), "the T%u egress worker refused the request: %s",
			 w->o->tier, why);
		log_line(w, "request %llu to %s refused: %s", (unsigned long long) m->id,
			 t->cfg.name, why);
		send_error(w, m->id, REMOTE_ERR_REFUSED, msg);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		send_error(w, m->id, REMOTE_ERR_INTERNAL, "out of memory");
		return;
	}
	c->w = w;
	c->core_id = m->id;
	c->rt = t->rt;
	snprintf(c->name, sizeof(c->name), "%s", t->cfg.name);
	/* Held across remote_submit: its first event may come before it returns, and the
	 * callback must find c complete. */
	pthread_mutex_lock(&w->lock);
	for (struct wcall *x = w->calls; x; x = x->next)
		if (x->core_id == m->id) {
			pthread_mutex_unlock(&w->lock);
			free(c);
			send_error(w, m->id, REMOTE_ERR_INTERNAL, "duplicate request id");
			return;
		}
	k = remote_submit(t->rt, &m->request, on_remote_event, c, &c->rid);
	if (k < 0) {
		pthread_mutex_unlock(&w->lock);
		free(c);
		snprintf(why, sizeof(why), "%s: %s", t->cfg.name,
			 k == -EHOSTDOWN ? "cooling down after failures" : strerror(-k));
		send_error(w, m->id, REMOTE_ERR_DOWN, why);
		return;
	}
	c->submitted = true;
	c->next = w->calls;
	w->calls = c;
	pthread_mutex_unlock(&w->lock);
}

static void handle_cancel(struct worker *w, uint64_t id)
{
	pthread_mutex_lock(&w->lock);
	for (struct wcall *c = w->calls; c; c = c->next)
		if (c->core_id == id) {
			(void) remote_cancel(c->rt, c->rid);
			break;
		}
	pthread_mutex_unlock(&w->lock);
}

/* ---- configuration and resolution ---- */

static void target_cfg_done(struct proto_target *t)
{
	free(t->name);
	free(t->url);
	free(t->model);
	if (t->key) {
		explicit_bzero(t->key, strlen(t->key));
		free(t->key);
	}
	*t = (struct proto_target){ 0 };
}

static void cfgs_free(struct proto_target *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		target_cfg_done(&v[i]);
	free(v);
}

static int target_cfg_copy(const struct proto_target *s, struct proto_target *d)
{
	*d = *s;
	d->name = strdup(s->name);
	d->url = strdup(s->url);
	d->model = s->model ? strdup(s->model) : NULL;
	d->key = s->key ? strdup(s->key) : NULL;
	if (!d->name || !d->url || (s->model && !d->model) || (s->key && !d->key)) {
		target_cfg_done(d);
		return -ENOMEM;
	}
	return 0;
}

static int cfgs_copy(const struct proto_target *s, size_t n, struct proto_target **ret)
{
	struct proto_target *v = calloc(MAX(n, (size_t) 1), sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (target_cfg_copy(&s[i], &v[i]) < 0) {
			cfgs_free(v, i);
			return -ENOMEM;
		}
	*ret = v;
	return 0;
}

static bool streq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool cfg_same(const struct proto_target *a, const struct proto_target *b)
{
	return streq(a->url, b->url) && streq(a->model, b->model) && streq(a->key, b->key) &&
	       a->timeout_ms == b->timeout_ms && a->retries == b->retries;
}

static void resolved_free(struct resolved *r, size_t n)
{
	for (size_t i = 0; r && i < n; i++) {
		for (size_t j = 0; j < r[i].n_pins; j++)
			free(r[i].pins[j]);
		free(r[i].pins);
	}
	free(r);
}

static void pending_clear(struct worker *w)
{
	resolved_free(w->pending_res, w->n_pending_cfg);
	cfgs_free(w->pending_cfg, w->n_pending_cfg);
	w->pending_res = NULL;
	w->pending_cfg = NULL;
	w->n_pending_cfg = 0;
	w->has_pending = false;
}

static int str_append(char **s, size_t *len, const char *add)
{
	size_t n = strlen(add);
	char *x = realloc(*s, *len + n + 1);

	if (!x)
		return -ENOMEM;
	memcpy(x + *len, add, n + 1);
	*s = x;
	*len += n;
	return 0;
}

/*
 * Resolves every target of cfg: endpoints for the core (into m), pins for libcurl (into
 * *ret_res), and a signature of the answer. A name that does not resolve goes into
 * m->unresolved (its target then has no pins and no endpoint: calls to it fail).
 */
static int resolve_all(struct worker *w, const struct proto_target *cfg, size_t n,
		       struct proto_msg *m, struct resolved **ret_res, char **ret_sig)
{
	struct resolved *res = calloc(MAX(n, (size_t) 1), sizeof(*res));
	_cleanup_free_ char *sig = NULL;
	size_t sig_len = 0;
	int k = 0;

	if (!res)
		return -ENOMEM;
	m->endpoints = calloc(PROTO_MAX_ENDPOINTS, sizeof(*m->endpoints));
	m->unresolved = calloc(MAX(n, (size_t) 1), sizeof(*m->unresolved));
	if (!m->endpoints || !m->unresolved) {
		resolved_free(res, n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n && k >= 0; i++) {
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
		struct addrinfo *ai = NULL;
		char host[256], portstr[8], addrs[2048] = "", one[INET6_ADDRSTRLEN + 4];
		uint8_t probe[16];
		uint16_t port;
		bool numeric;
		int g;

		if (worker_url_host_port(cfg[i].url, host, &port) < 0) {
			m->unresolved[m->n_unresolved].target = strdup(cfg[i].name);
			m->unresolved[m->n_unresolved].message = strdup("the URL has no valid host");
			m->n_unresolved++;
			continue;
		}
		numeric = inet_pton(AF_INET, host, probe) == 1 || inet_pton(AF_INET6, host, probe) == 1;
		snprintf(portstr, sizeof(portstr), "%u", port);
		g = getaddrinfo(host, portstr, &hints, &ai);
		if (g != 0) {
			char msg[300];
			snprintf(msg, sizeof(msg), "%s: %s", host, gai_strerror(g));
			m->unresolved[m->n_unresolved].target = strdup(cfg[i].name);
			m->unresolved[m->n_unresolved].message = strdup(msg);
			m->n_unresolved++;
			continue;
		}
		for (struct addrinfo *a = ai; a; a = a->ai_next) {
			struct proto_endpoint p = { .port = port };
			bool dup = false;

			if (a->ai_family == AF_INET) {
				p.family = AF_INET;
				memcpy(p.addr, &((struct sockaddr_in *) a->ai_addr)->sin_addr, 4);
			} else if (a->ai_family == AF_INET6) {
				p.family = AF_INET6;
				memcpy(p.addr, &((struct sockaddr_in6 *) a->ai_addr)->sin6_addr, 16);
			} else
				continue;
			for (size_t j = 0; j < m->n_endpoints; j++)
				if (m->endpoints[j].family == p.family &&
				    m->endpoints[j].port == p.port &&
				    memcmp(m->endpoints[j].addr, p.addr, 16) == 0 &&
				    strcmp(m->endpoints[j].target, cfg[i].name) == 0)
					dup = true;
			if (dup || m->n_endpoints >= PROTO_MAX_ENDPOINTS)
				continue;
			p.target = strdup(cfg[i].name);
			if (!p.target) {
				k = -ENOMEM;
				break;
			}
			m->endpoints[m->n_endpoints++] = p;
			inet_ntop(p.family, p.addr, one + 1, sizeof(one) - 2);
			if (p.family == AF_INET6) {
				one[0] = '[';
				strcat(one, "]");
			}
			if (strlen(addrs) + strlen(one) + 2 < sizeof(addrs)) {
				if (addrs[0])
					strcat(addrs, ",");
				strcat(addrs, p.family == AF_INET6 ? one : one + 1);
			}
			if (k >= 0)
				k = str_append(&sig, &sig_len, cfg[i].name);
			if (k >= 0)
				k = str_append(&sig, &sig_len, p.family == AF_INET6 ? one : one + 1);
			if (k >= 0)
				k = str_append(&sig, &sig_len, ";");
		}
		freeaddrinfo(ai);
		if (k >= 0 && addrs[0] && !numeric) {
			res[i].pins = calloc(1, sizeof(char *));
			if (!res[i].pins ||
			    asprintf(&res[i].pins[0], "%s:%u:%s", host, port, addrs) < 0) {
				k = -ENOMEM;
				break;
			}
			res[i].n_pins = 1;
		}
	}
	if (k >= 0 && !sig)
		k = str_append(&sig, &sig_len, "");
	if (k < 0) {
		resolved_free(res, n);
		return k;
	}
	*ret_res = res;
	*ret_sig = TAKE_PTR(sig);
	return 0;
}

/* Resolves cfg and sends ENDPOINTS generation g; cfg becomes the pending configuration. */
static int resolve_and_report(struct worker *w, const struct proto_target *cfg, size_t n,
			      uint64_t g, bool only_if_changed)
{
	struct proto_msg m = { .type = PROTO_ENDPOINTS, .generation = g };
	struct resolved *res = NULL;
	char *sig = NULL;
	int k;

	k = resolve_all(w, cfg, n, &m, &res, &sig);
	if (k < 0) {
		proto_msg_done(&m);
		return k;
	}
	for (size_t i = 0; i < m.n_unresolved; i++)
		log_line(w, "target %s: cannot resolve: %s", m.unresolved[i].target,
			 m.unresolved[i].message ? m.unresolved[i].message : "?");
	if (only_if_changed && w->endpoints_sig && strcmp(sig, w->endpoints_sig) == 0) {
		free(sig);
		resolved_free(res, n);
		proto_msg_done(&m);
		return 0;
	}
	pending_clear(w);
	k = cfgs_copy(cfg, n, &w->pending_cfg);
	if (k < 0) {
		free(sig);
		resolved_free(res, n);
		proto_msg_done(&m);
		return k;
	}
	w->n_pending_cfg = n;
	w->pending_res = res;
	w->pending_gen = g;
	w->has_pending = true;
	free(w->endpoints_sig);
	w->endpoints_sig = sig;
	k = send_msg(w, &m, false);
	proto_msg_done(&m);
	return k;
}

static void wtarget_free(struct wtarget *t)
{
	remote_target_free(t->rt);
	target_cfg_done(&t->cfg);
	free(t);
}

static void retire(struct worker *w, struct wtarget *t)
{
	t->next = w->retired;
	w->retired = t;
}

static void free_idle_retired(struct worker *w)
{
	for (struct wtarget **p = &w->retired; *p;) {
		struct wtarget *t = *p;
		if (remote_target_idle(t->rt) && atomic_load(&t->checking) == 0) {
			*p = t->next;
			wtarget_free(t);
		} else
			p = &t->next;
	}
}

static int make_target(struct worker *w, const struct proto_target *cfg, const struct resolved *r,
		       struct wtarget **ret)
{
	struct wtarget *t = calloc(1, sizeof(*t));
	struct errmsg e = { { 0 } };
	struct remote_target_config rc;
	int k;

	if (!t)
		return -ENOMEM;
	k = target_cfg_copy(cfg, &t->cfg);
	if (k < 0) {
		free(t);
		return k;
	}
	rc = (struct remote_target_config){
		.name = cfg->name,
		.url = w->o->test_wrong_url ? w->o->test_wrong_url : cfg->url,
		.model = cfg->model,
		.key = cfg->key,
		.timeout_ns = cfg->timeout_ms * 1000000ull,
		.retries = cfg->retries,
		/* The test switch goes where the allow-list does not: no pins for it. */
		.resolve = w->o->test_wrong_url ? NULL : (const char *const *) r->pins,
		.n_resolve = w->o->test_wrong_url ? 0 : r->n_pins,
	};
	k = remote_target_new(&rc, &t->rt, &e);
	if (k < 0) {
		log_line(w, "target %s: %s", cfg->name, e.text);
		target_cfg_done(&t->cfg);
		free(t);
		return k;
	}
	*ret = t;
	return 0;
}

/* ALLOWED for the pending generation: the allow-list holds its endpoints now. */
static void apply_pending(struct worker *w)
{
	struct wtarget *next = NULL, **tail = &next;

	for (size_t i = 0; i < w->n_pending_cfg; i++) {
		const struct proto_target *c = &w->pending_cfg[i];
		const struct resolved *r = &w->pending_res[i];
		struct wtarget *old = NULL;

		for (struct wtarget **p = &w->targets; *p; p = &(*p)->next)
			if (strcmp((*p)->cfg.name, c->name) == 0) {
				old = *p;
				*p = old->next;
				old->next = NULL;
				break;
			}
		if (old && cfg_same(&old->cfg, c) &&
		    (w->o->test_wrong_url ||
		     remote_target_set_resolve(old->rt, (const char *const *) r->pins, r->n_pins) >=
			     0)) {
			old->cfg.user_controlled = c->user_controlled;
			*tail = old;
			tail = &old->next;
			continue;
		}
		if (old)
			retire(w, old); /* its calls in flight finish on the old settings */
		struct wtarget *t = NULL;
		if (make_target(w, c, r, &t) < 0)
			continue; /* logged; calls to it fail as "not configured" */
		*tail = t;
		tail = &t->next;
	}
	while (w->targets) {
		struct wtarget *t = w->targets;
		w->targets = t->next;
		retire(w, t);
	}
	w->targets = next;
	cfgs_free(w->cfg, w->n_cfg);
	w->cfg = TAKE_PTR(w->pending_cfg);
	w->n_cfg = w->n_pending_cfg;
	w->generation = w->pending_gen;
	resolved_free(w->pending_res, w->n_pending_cfg);
	w->pending_res = NULL;
	w->n_pending_cfg = 0;
	w->has_pending = false;
	log_line(w, "configuration %llu applied: %zu target(s)%s",
		 (unsigned long long) w->generation, w->n_cfg,
		 w->o->test_wrong_url ? " (TEST: every call goes to --test-wrong-target)" : "");
}

/* ---- health checks (PROTO_CHECK) ---- */

struct check_round {
	struct worker *w;
	struct wtarget **targets;      /* each with ->checking held */
	size_t n;
};

/* GET /v1/models on every target, from inside this tier's cgroup, on a thread of its own so the
 * main loop keeps serving (a check can take up to the target's timeout). The result is the
 * target's availability (a failure starts its cool-down); the main loop's next report_health()
 * carries it to the core. */
static void *check_main(void *arg)
{
	struct check_round *r = arg;

	for (size_t i = 0; i < r->n; i++) {
		struct errmsg e = { { 0 } };
		if (remote_health_check(r->targets[i]->rt, &e) < 0)
			log_line(r->w, "health check: %s", e.text);
		atomic_fetch_sub(&r->targets[i]->checking, 1);
	}
	atomic_store(&r->w->health_dirty, true);
	atomic_store(&r->w->check_running, false);
	free(r->targets);
	free(r);
	return NULL;
}

static void start_checks(struct worker *w)
{
	struct check_round *r;
	pthread_attr_t attr;
	pthread_t th;
	size_t n = 0;
	int k;

	for (struct wtarget *t = w->targets; t; t = t->next)
		n++;
	if (n == 0 || atomic_exchange(&w->check_running, true))
		return; /* nothing to check, or a round under way whose answer serves this too */
	r = calloc(1, sizeof(*r));
	if (r && !(r->targets = calloc(n, sizeof(*r->targets)))) {
		free(r);
		r = NULL;
	}
	if (!r) {
		atomic_store(&w->check_running, false);
		return;
	}
	r->w = w;
	for (struct wtarget *t = w->targets; t; t = t->next) {
		atomic_fetch_add(&t->checking, 1);
		r->targets[r->n++] = t;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	k = pthread_create(&th, &attr, check_main, r);
	pthread_attr_destroy(&attr);
	if (k != 0) {
		/* As if the round had run and found nothing new. */
		for (size_t i = 0; i < r->n; i++)
			atomic_fetch_sub(&r->targets[i]->checking, 1);
		free(r->targets);
		free(r);
		atomic_store(&w->check_running, false);
	}
}

static void report_health(struct worker *w)
{
	struct proto_health h[PROTO_MAX_TARGETS];
	struct proto_msg m = { .type = PROTO_HEALTH, .health = h };
	char sig[PROTO_MAX_TARGETS * 8 + 1] = "";

	for (struct wtarget *t = w->targets; t && m.n_health < PROTO_MAX_TARGETS; t = t->next) {
		h[m.n_health] = (struct proto_health){ .name = t->cfg.name,
						       .available = remote_target_available(t->rt),
						       .latency_ms = remote_target_latency_ms(t->rt) };
		/* Latency changes alone are not worth a message each time; availability is. */
		strcat(sig, h[m.n_health].available ? "1" : "0");
		m.n_health++;
	}
	if (w->health_sig && strcmp(w->health_sig, sig) == 0 &&
	    !atomic_exchange(&w->health_dirty, false))
		return;
	free(w->health_sig);
	w->health_sig = strdup(sig);
	(void) send_msg(w, &m, false);
}

static int handle(struct worker *w, const char *text, size_t len, struct errmsg *e)
{
	struct proto_msg m = { 0 };
	int k;

	k = proto_decode(text, len, &m, e);
	if (k < 0)
		return k;
	switch (m.type) {
	case PROTO_CONFIGURE:
		k = resolve_and_report(w, m.targets, m.n_targets, m.generation, false);
		if (k < 0)
			log_line(w, "configuration %llu: %s", (unsigned long long) m.generation,
				 strerror(-k));
		w->next_resolve_ns = now_ns() + w->o->resolve_interval_ns;
		break;
	case PROTO_ALLOWED:
		if (w->has_pending && m.generation == w->pending_gen) {
			apply_pending(w);
			free(w->health_sig);
			w->health_sig = NULL;
			report_health(w);
		}
		break;
	case PROTO_RESOLVE:
		if (!w->has_pending && w->n_cfg > 0)
			(void) resolve_and_report(w, w->cfg, w->n_cfg, w->generation, true);
		w->next_resolve_ns = now_ns() + w->o->resolve_interval_ns;
		break;
	case PROTO_SUBMIT:
		handle_submit(w, &m);
		break;
	case PROTO_CANCEL:
		handle_cancel(w, m.id);
		break;
	case PROTO_CHECK:
		start_checks(w);
		break;
	default:
		k = errmsg_set(e, -EBADMSG, "the core sent a '%s' message, which only a worker sends",
			       proto_type_name(m.type));
		break;
	}
	proto_msg_done(&m);
	return k;
}

int worker_run(const struct worker_options *o, struct errmsg *e)
{
	struct worker_options opts = *o;
	struct worker w = { .o = &opts };
	int k = 0;

	assert_return(o && o->tier >= 1 && o->tier <= 3 && o->fd >= 0, -EINVAL);
	if (!opts.resolve_interval_ns)
		opts.resolve_interval_ns = WORKER_DEFAULT_RESOLVE_INTERVAL_NS;
	proto_conn_init(&w.conn, o->fd);
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.out_cond, NULL);
	k = -pthread_create(&w.writer, NULL, writer_main, &w);
	if (k < 0) {
		errmsg_set(e, k, "starting the writer thread: %s", strerror(-k));
		goto out_nothread;
	}
	{
		struct proto_msg hello = { .type = PROTO_HELLO,
					   .tier = o->tier,
					   .pid = (uint32_t) getpid(),
					   .version = PROTO_VERSION };
		(void) send_msg(&w, &hello, false);
	}
	w.next_resolve_ns = now_ns() + opts.resolve_interval_ns;
	for (;;) {
		struct pollfd p = { .fd = o->fd, .events = POLLIN };
		const char *text;
		size_t len;
		uint64_t now = now_ns();
		int timeout = 1000;

		if (w.next_resolve_ns > now && (w.next_resolve_ns - now) / 1000000 < 1000)
			timeout = (int) ((w.next_resolve_ns - now) / 1000000);
		k = poll(&p, 1, timeout);
		if (k < 0 && errno != EINTR) {
			k = errmsg_set(e, -errno, "poll: %s", strerror(errno));
			break;
		}
		if (k > 0) {
			k = proto_conn_recv(&w.conn, &text, &len);
			if (k == -EPIPE || k == -ECONNRESET) {
				k = 0; /* the core closed: we are done */
				break;
			}
			if (k < 0) {
				errmsg_set(e, k, "reading from the core: %s", strerror(-k));
				break;
			}
			if (k > 0) {
				k = handle(&w, text, len, e);
				if (k < 0)
					break;
			}
		}
		now = now_ns();
		if (now >= w.next_resolve_ns) {
			if (!w.has_pending && w.n_cfg > 0)
				(void) resolve_and_report(&w, w.cfg, w.n_cfg, w.generation, true);
			w.next_resolve_ns = now + opts.resolve_interval_ns;
		}
		free_idle_retired(&w);
		report_health(&w);
	}

	/* A health-check round holds targets: let it end (bounded by the targets' timeouts). */
	while (atomic_load(&w.check_running))
		(void) usleep(10000);
	/* Cancel everything and wait for the final events (queued, maybe unsent). */
	while (w.targets) {
		struct wtarget *t = w.targets;
		w.targets = t->next;
		wtarget_free(t);
	}
	while (w.retired) {
		struct wtarget *t = w.retired;
		w.retired = t->next;
		wtarget_free(t);
	}
	pthread_mutex_lock(&w.lock);
	w.out_closed = true;
	pthread_cond_broadcast(&w.out_cond);
	pthread_mutex_unlock(&w.lock);
	pthread_join(w.writer, NULL);
out_nothread:
	while (w.out_head) {
		struct outmsg *x = w.out_head;
		w.out_head = x->next;
		explicit_bzero(x->text, x->len);
		free(x->text);
		free(x);
	}
	pending_clear(&w);
	cfgs_free(w.cfg, w.n_cfg);
	free(w.endpoints_sig);
	free(w.health_sig);
	proto_conn_done(&w.conn);
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.out_cond);
	return k;
}
