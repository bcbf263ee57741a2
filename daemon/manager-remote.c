/* SPDX-License-Identifier: MIT */
/*
 * manager-remote.c: see manager-remote.h. Routed requests and their legs; the snapshots they
 * route with are built in manager-remote-snap.c.
 *
 * Locking (never held while calling into the scheduler or a client callback):
 *  - rt->lock: the current snapshot pointer, the list of routed requests in flight;
 *  - q->lock: one routed request's legs;
 *  - rt->work_lock: the routing thread's queue (taken inside q->lock, never the other way).
 * A leg's final event marks it ended and queues its request under q->lock; the routing
 * thread decides what comes next. A request is freed only once none of its legs runs and it
 * is off the queue.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/config.h"
#include "lora/adapter.h"
#include "manager-remote-snap.h"
#include "manager-remote.h"
#include "policy/vault.h"
#include "router/classify.h"
#include "router/priors.h"
#include "targets/remote.h"

#define MAX_LEGS 32
/* A mixture leg whose confidence is unknown (a remote answer without log-probabilities). */
#define UNKNOWN_CONFIDENCE 0.5

struct held_token {
	int32_t id;
	float logprob;
	size_t off, len;
};

struct mleg {
	struct mroute *q;
	size_t pos;                 /* in the plan */
	const struct router_target *t;
	bool local;
	uint64_t local_id;
	struct remote_target *remote;
	uint64_t remote_id;
	bool running;               /* started, final event not seen */
	bool buffered;              /* text held back until chosen */
	bool passed;                /* text forwarded to the client */
	char *buf;
	size_t n_buf, cap_buf;
	/* a held-back local answer's tokens, for a client that asked for log-probabilities;
	 * their text is in buf (off, len) */
	struct held_token *toks;
	size_t n_toks, cap_toks;
	bool toks_lost;
	double lp_sum;
	uint32_t n_lp;
	bool ok, failed;
	char finish[24];
	uint32_t prompt_tokens, completion_tokens;
	enum router_trigger trig;   /* why it failed (CONTEXT: the request was too long) */
	char error[300];
	struct vault_stream *vs;
	double cost;
};

enum route_mode {
	MODE_PLAIN,
	MODE_CASCADE,
	MODE_MIXTURE,
};

struct mroute {
	struct mroute *next;        /* rt->active */
	struct mroute *work_next;   /* rt->work_head */
	bool queued;
	struct manager_routing *rt;
	struct rsnap *snap;
	uint64_t id;
	pthread_mutex_t lock;
	bool cancelled, done;
	bool starting;              /* manager_routing_submit() is still starting legs */
	enum route_mode mode;
	bool mixture_round;         /* the parallel legs have not been judged yet */
	bool client_logprobs;

	struct router_plan *plan;
	manager_event_fn fn;
	void *userdata;
	struct audit_record *audit;
	struct mleg *legs[MAX_LEGS];
	size_t n_legs;
	uint32_t escalations;
	double spent;
	unsigned budget_above;      /* the highest tier a target was left out of for the budget */
	double budget;              /* request_budget(): 0 for none */

	/* the request, copied: the caller's is gone once manager_submit() returned */
	struct manager_request req;
	char *prompt;
	struct chat_message *messages;
	char **strings;          /* every string the copies own */
	size_t n_strings, cap_strings;
	char **stop;

	struct policy_finding *findings;
	size_t n_findings;
	struct vault *vault;
	char *red_prompt;
	struct chat_message *red_messages;

	char route[200];         /* why (the audit record's route) */
	char why[512];           /* the failures so far, for the final error */
	uint32_t permitted_tiers; /* the policy's, checked again at the egress hand-off */
	int sensitivity;
};

static void *health_main(void *userdata);
static void *worker_main(void *userdata);

int manager_routing_new(const struct config *c, const char *base,
			const struct manager_routing_hooks *hooks, struct manager_routing **ret,
			struct errmsg *e)
{
	struct manager_routing *rt;
	int k;

	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	pthread_mutex_init(&rt->lock, NULL);
	pthread_mutex_init(&rt->build_lock, NULL);
	pthread_mutex_init(&rt->work_lock, NULL);
	pthread_cond_init(&rt->idle, NULL);
	pthread_cond_init(&rt->work_cond, NULL);
	rt->hooks = *hooks;
	rt->config = config_ref((struct config *) c);
	rt->threshold = c->router_confidence_threshold;
	rt->mixture_entropy = c->router_mixture_entropy;
	rt->mixture_k = c->router_mixture_k;
	rt->budget = c->router_budget;
	rt->health_ns = c->router_health_interval_ns;
	{
		const char *t = getenv("MOLLY_EGRESS_TEST"),
			   *v = getenv("MOLLY_EGRESS_TEST_SKIP_CORE_DETECTORS");
		rt->test_skip_core_detectors = t && strcmp(t, "1") == 0 && v && strcmp(v, "1") == 0;
	}
	rt->base = strdup(base);
	rt->remotes = calloc(MAX(c->n_targets, (size_t) 1), sizeof(*rt->remotes));
	rt->remote_keys = calloc(MAX(c->n_targets, (size_t) 1), sizeof(char *));
	if (!rt->base || !rt->remotes || !rt->remote_keys ||
	    asprintf(&rt->local_name, "local:%s", base) < 0) {
		rt->local_name = NULL;
		k = -ENOMEM;
		goto fail;
	}
	if (c->state_directory) {
		_cleanup_free_ char *dir = NULL;
		if (asprintf(&dir, "%s/priors", c->state_directory) < 0) {
			k = -ENOMEM;
			goto fail;
		}
		k = priors_open(dir, &(struct priors_options){ 0 }, &rt->priors, e);
		if (k < 0)
			goto fail;
	}
	for (size_t i = 0; i < c->n_targets; i++) {
		const struct config_target *t = &c->targets[i];
		struct remote_target_config rc = { .name = t->name,
						   .url = t->url,
						   .model = t->model,
						   .credential_file = t->credential_file,
						   .timeout_ns = t->timeout_ns,
						   .retries = t->retries };

		k = hooks->target_new ? hooks->target_new(hooks->m, t, &rt->remotes[i], e)
				      : remote_target_new(&rc, &rt->remotes[i], e);
		if (k < 0)
			goto fail;
		rt->n_remotes++;
		if (asprintf(&rt->remote_keys[i], "t%d:%s", t->tier, t->name) < 0) {
			rt->remote_keys[i] = NULL;
			k = -ENOMEM;
			goto fail;
		}
		/* The configuration's seeds enter the store (a recorded mean is kept). */
		for (size_t j = 0; rt->priors && j < t->n_quality; j++) {
			k = priors_seed(rt->priors, t->quality[j].domain, rt->remote_keys[i],
					t->quality[j].quality, e);
			if (k < 0)
				goto fail;
		}
	}
	k = manager_routing_adapters_changed(rt);
	if (k < 0) {
		errmsg_set(e, k, "building the router: %s", strerror(-k));
		goto fail;
	}
	k = -pthread_create(&rt->worker, NULL, worker_main, rt);
	if (k < 0) {
		errmsg_set(e, k, "starting the routing thread: %s", strerror(-k));
		goto fail;
	}
	rt->worker_started = true;
	*ret = rt;
	return 0;
fail:
	manager_routing_free(rt);
	return k;
}

int manager_routing_start(struct manager_routing *rt)
{
	if (!rt || rt->health_started)
		return 0;
	if (rt->n_remotes > 0 && rt->health_ns > 0 && rt->health_ns != UINT64_MAX) {
		int k = -pthread_create(&rt->health, NULL, health_main, rt);
		if (k < 0)
			return k;
		rt->health_started = true;
	}
	return 0;
}

static void request_cancel_all(struct manager_routing *rt);

struct manager_routing *manager_routing_free(struct manager_routing *rt)
{
	if (!rt)
		return NULL;
	request_cancel_all(rt);
	pthread_mutex_lock(&rt->lock);
	while (rt->n_active > 0 && rt->worker_started)
		pthread_cond_wait(&rt->idle, &rt->lock);
	pthread_mutex_unlock(&rt->lock);
	pthread_mutex_lock(&rt->work_lock);
	rt->stopping = true;
	pthread_cond_broadcast(&rt->work_cond);
	pthread_mutex_unlock(&rt->work_lock);
	if (rt->worker_started)
		pthread_join(rt->worker, NULL);
	if (rt->health_started)
		pthread_join(rt->health, NULL);
	rsnap_unref(rt->snap);
	rclass_unref(rt->cls);
	for (size_t i = 0; i < rt->n_remotes; i++) {
		remote_target_free(rt->remotes[i]);
		free(rt->remote_keys[i]);
	}
	free(rt->remotes);
	free(rt->remote_keys);
	priors_close(rt->priors);
	free(rt->local_name);
	free(rt->base);
	config_unref(rt->config);
	pthread_mutex_destroy(&rt->lock);
	pthread_mutex_destroy(&rt->build_lock);
	pthread_mutex_destroy(&rt->work_lock);
	pthread_cond_destroy(&rt->idle);
	pthread_cond_destroy(&rt->work_cond);
	free(rt);
	return NULL;
}

bool manager_routing_active(struct manager_routing *rt)
{
	bool a;

	if (!rt)
		return false;
	if (rt->n_remotes > 0)
		return true;
	pthread_mutex_lock(&rt->lock);
	a = rt->snap && rt->snap->has_domain_adapters;
	pthread_mutex_unlock(&rt->lock);
	return a;
}

/* ---- the health thread: a down target is found before a request pays for it ---- */

static void *health_main(void *userdata)
{
	struct manager_routing *rt = userdata;

	for (;;) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += (time_t) (rt->health_ns / 1000000000ull);
		ts.tv_nsec += (long) (rt->health_ns % 1000000000ull);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&rt->work_lock);
		while (!rt->stopping &&
		       pthread_cond_timedwait(&rt->work_cond, &rt->work_lock, &ts) == 0)
			;
		if (rt->stopping) {
			pthread_mutex_unlock(&rt->work_lock);
			return NULL;
		}
		pthread_mutex_unlock(&rt->work_lock);
		for (size_t i = 0; i < rt->n_remotes; i++) {
			struct errmsg e = { { 0 } };
			/* A failure starts the target's cool-down (remote.h): the router ranks it
			 * last until it answers again. */
			(void) remote_health_check(rt->remotes[i], &e);
		}
		(void) manager_routing_refresh(rt);
	}
}

/* ---- one routed request ---- */

static void leg_free(struct mleg *l)
{
	if (!l)
		return;
	if (l->buf)
		explicit_bzero(l->buf, l->n_buf);
	free(l->buf);
	free(l->toks);
	vault_stream_free(l->vs);
	free(l);
}

static void mroute_free(struct mroute *q)
{
	if (!q)
		return;
	for (size_t i = 0; i < q->n_legs; i++)
		leg_free(q->legs[i]);
	for (size_t i = 0; i < q->n_strings; i++)
		if (q->strings[i]) {
			/* The request may hold what the policy found: do not leave it in the
			 * heap. */
			explicit_bzero(q->strings[i], strlen(q->strings[i]));
			free(q->strings[i]);
		}
	free(q->strings);
	free(q->messages);
	free(q->stop);
	free(q->findings);
	free(q->plan);
	vault_free(q->vault);
	free(q->red_messages);
	free(q->audit);
	rsnap_unref(q->snap);
	pthread_mutex_destroy(&q->lock);
	free(q);
}

static char *keep(struct mroute *q, const char *s, size_t n)
{
	char *d;

	if (q->n_strings == q->cap_strings)
		return NULL;
	d = strndup(s ? s : "", n);
	if (!d)
		return NULL;
	q->strings[q->n_strings++] = d;
	return d;
}

static int mroute_copy(struct mroute *q, const struct manager_request *r,
		       const struct policy_decision *d)
{
	q->cap_strings = 2 + 3 * r->n_messages + r->n_stop; /* copies, then redacted copies */
	q->strings = calloc(q->cap_strings, sizeof(char *));
	if (!q->strings)
		return -ENOMEM;
	q->req = *r;
	q->req.model = NULL;
	q->req.loras = NULL;
	q->req.n_loras = 0;
	q->req.declared_class = NULL;
	if (r->prompt) {
		q->prompt = keep(q, r->prompt, strlen(r->prompt));
		if (!q->prompt)
			return -ENOMEM;
		q->req.prompt = q->prompt;
	} else {
		q->messages = calloc(MAX(r->n_messages, (size_t) 1), sizeof(*q->messages));
		if (!q->messages)
			return -ENOMEM;
		for (size_t i = 0; i < r->n_messages; i++) {
			const char *ro = r->messages[i].role, *co = r->messages[i].content;
			q->messages[i].role = keep(q, ro, ro ? strlen(ro) : 0);
			q->messages[i].content = keep(q, co, co ? strlen(co) : 0);
			if (!q->messages[i].role || !q->messages[i].content)
				return -ENOMEM;
		}
		q->req.messages = q->messages;
	}
	if (r->n_stop > 0) {
		q->stop = calloc(r->n_stop, sizeof(char *));
		if (!q->stop)
			return -ENOMEM;
		for (size_t i = 0; i < r->n_stop; i++)
			if (!(q->stop[i] = keep(q, r->stop[i], strlen(r->stop[i]))))
				return -ENOMEM;
		q->req.stop = (const char *const *) q->stop;
	}
	if (d->n_findings > 0) {
		q->findings = calloc(d->n_findings, sizeof(*q->findings));
		if (!q->findings)
			return -ENOMEM;
		memcpy(q->findings, d->findings, d->n_findings * sizeof(*q->findings));
		q->n_findings = d->n_findings;
	}
	return 0;
}

/* The built-in layers without user rules: what the egress worker scans the bytes with
 * (worker_check_payload()). NULL when it could not be built. */
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;
static struct policy *builtin_policy;

static void builtin_init(void)
{
	if (policy_new_defaults(&builtin_policy) < 0)
		builtin_policy = NULL;
}

/* Rounds of redact_again(): a value that shows only once another is replaced is rare; two
 * in a row rarer still. */
#define REDACT_ROUNDS 4

/* Redacts what the built-in layers find in an already redacted text, until they find no
 * value: replacing one value can bring out another (an exact rule that takes the first number
 * after a document word takes the next one once the first is a placeholder). Without this
 * the egress worker, which scans the bytes it sends, would refuse the request. A finding
 * that overlaps a placeholder is left (its value would hold the placeholder, and the answer
 * would get the placeholder back): the worker then refuses, which is the safe side. */
static int redact_again(struct mroute *q, char **text)
{
	if (q->rt->test_skip_core_detectors)
		return 0;
	pthread_once(&builtin_once, builtin_init);
	if (!builtin_policy)
		return 0; /* the worker fails closed too */
	for (int round = 0; round < REDACT_ROUNDS; round++) {
		struct policy_decision d = { 0 };
		size_t len = strlen(*text), n = 0, out_len;
		char *out = NULL;
		int k;

		k = policy_evaluate(builtin_policy,
				    &(struct policy_request){ .text = *text, .len = len }, &d);
		if (k < 0)
			return k;
		for (size_t i = 0; i < d.n_findings; i++) {
			const struct policy_finding *f = &d.findings[i];
			if (policy_finding_redactable(f) &&
			    !memmem(*text + f->byte_start, f->byte_end - f->byte_start,
				    "\xe2\x9f\xa8", 3) &&
			    !memmem(*text + f->byte_start, f->byte_end - f->byte_start,
				    "\xe2\x9f\xa9", 3))
				d.findings[n++] = *f;
		}
		if (n == 0) {
			policy_decision_done(&d);
			return 0;
		}
		k = vault_redact(q->vault, *text, len, d.findings, n, POLICY_CLASS_PUBLIC, &out,
				 &out_len);
		policy_decision_done(&d);
		if (k < 0)
			return k;
		explicit_bzero(*text, len);
		free(*text);
		*text = out;
	}
	return 0;
}

/* The findings within [off, off + len) of the policy text, shifted to the piece. */
static int redact_piece(struct mroute *q, const char *text, size_t off, char **ret)
{
	size_t len = strlen(text), n = 0, out_len;
	_cleanup_free_ struct policy_finding *f = calloc(MAX(q->n_findings, (size_t) 1),
							 sizeof(*f));
	char *out = NULL;
	int k;

	if (!f)
		return -ENOMEM;
	for (size_t i = 0; i < q->n_findings; i++) {
		size_t s = q->findings[i].byte_start, e = q->findings[i].byte_end;
		if (e <= off || s >= off + len)
			continue;
		f[n] = q->findings[i];
		f[n].byte_start = s > off ? s - off : 0;
		f[n].byte_end = MIN(e - off, len);
		n++;
	}
	/* Every value, whatever its class: T3 sees no value the layers found (the vault keeps
	 * the special-category statements, policy_finding_redactable()). */
	k = vault_redact(q->vault, text, len, f, n, POLICY_CLASS_PUBLIC, &out, &out_len);
	if (k >= 0)
		k = redact_again(q, &out);
	if (k < 0) {
		if (out) {
			explicit_bzero(out, strlen(out));
			free(out);
		}
		return k;
	}
	*ret = out;
	return 0;
}

/* Builds the redacted copy of the request (once) for T3. */
static int mroute_redact(struct mroute *q)
{
	int k;

	if (q->vault)
		return 0;
	k = vault_new(&q->vault);
	if (k < 0)
		return k;
	if (q->prompt) {
		char *s = NULL;
		k = redact_piece(q, q->prompt, 0, &s);
		if (k < 0)
			return k;
		q->strings[q->n_strings++] = s;
		q->red_prompt = s;
	} else {
		size_t off = 0;
		q->red_messages = calloc(MAX(q->req.n_messages, (size_t) 1),
					 sizeof(*q->red_messages));
		if (!q->red_messages)
			return -ENOMEM;
		for (size_t i = 0; i < q->req.n_messages; i++) {
			char *s = NULL;
			k = redact_piece(q, q->messages[i].content, off, &s);
			if (k < 0)
				return k;
			q->strings[q->n_strings++] = s;
			q->red_messages[i].role = q->messages[i].role;
			q->red_messages[i].content = s;
			/* policy_text() joins the contents with "\n". */
			off += strlen(q->messages[i].content) + 1;
		}
	}
	return 0;
}

/* Queues q for the routing thread; called with q->lock held. */
static void enqueue_locked(struct mroute *q)
{
	struct manager_routing *rt = q->rt;

	pthread_mutex_lock(&rt->work_lock);
	if (!q->queued) {
		q->queued = true;
		q->work_next = NULL;
		struct mroute **p = &rt->work_head;
		while (*p)
			p = &(*p)->work_next;
		*p = q;
		pthread_cond_broadcast(&rt->work_cond);
	}
	pthread_mutex_unlock(&rt->work_lock);
}

static void routing_release(struct manager_routing *rt, struct mroute *q)
{
	pthread_mutex_lock(&rt->work_lock);
	if (q->queued) {
		for (struct mroute **p = &rt->work_head; *p; p = &(*p)->work_next)
			if (*p == q) {
				*p = q->work_next;
				break;
			}
		q->queued = false;
	}
	pthread_mutex_unlock(&rt->work_lock);
	pthread_mutex_lock(&rt->lock);
	for (struct mroute **p = &rt->active; *p; p = &(*p)->next)
		if (*p == q) {
			*p = q->next;
			break;
		}
	if (--rt->n_active == 0)
		pthread_cond_broadcast(&rt->idle);
	pthread_mutex_unlock(&rt->lock);
}

static double leg_confidence(const struct mleg *l, bool *known)
{
	*known = l->n_lp > 0;
	return l->n_lp > 0 ? exp(l->lp_sum / l->n_lp) : 0;
}

static int buf_append(struct mleg *l, const char *s, size_t n)
{
	if (l->n_buf + n + 1 > l->cap_buf) {
		size_t cap = MAX(l->cap_buf * 2, l->n_buf + n + 256);
		char *b = realloc(l->buf, cap);
		if (!b)
			return -ENOMEM;
		l->buf = b;
		l->cap_buf = cap;
	}
	memcpy(l->buf + l->n_buf, s, n);
	l->n_buf += n;
	l->buf[l->n_buf] = 0;
	return 0;
}

/* Holds back toks[0..n_toks) with their text, the n bytes that buf_append() is about to add
 * at the end of buf. Tokens that do not spell exactly that text are not kept, and the
 * answer then goes without any (toks_lost): no offset can point past the text. */
static int hold_tokens(struct mleg *l, const struct manager_token *toks, size_t n_toks, size_t n)
{
	size_t off = l->n_buf, total = 0;

	for (size_t i = 0; i < n_toks; i++)
		total += toks[i].text_len;
	if (total != n || l->toks_lost) {
		l->toks_lost = true;
		return 0;
	}

	if (l->n_toks + n_toks > l->cap_toks) {
		size_t cap = MAX(l->cap_toks * 2, l->n_toks + n_toks + 16);
		struct held_token *t = reallocarray(l->toks, cap, sizeof(*t));

		if (!t)
			return -ENOMEM;
		l->toks = t;
		l->cap_toks = cap;
	}
	for (size_t i = 0; i < n_toks; i++) {
		l->toks[l->n_toks++] = (struct held_token){ .id = toks[i].id,
							    .logprob = toks[i].logprob,
							    .off = off,
							    .len = toks[i].text_len };
		off += toks[i].text_len;
	}
	return 0;
}

/* The confidence signal: the tokens' log-probabilities summed. Under q->lock. */
static void leg_add_logprobs_locked(struct mleg *l, const struct manager_token *toks, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (isfinite(toks[i].logprob)) {
			l->lp_sum += toks[i].logprob;
			l->n_lp++;
		}
}

/* Text of a leg (restored already): held back or sent on. Called without q->lock. */
static void leg_text(struct mleg *l, const char *s, size_t n, const struct manager_token *toks,
		     size_t n_toks)
{
	struct mroute *q = l->q;
	bool forward;

	pthread_mutex_lock(&q->lock);
	leg_add_logprobs_locked(l, toks, n_toks);
	forward = !l->buffered && !q->done && !q->cancelled;
	if (l->buffered &&
	    ((q->client_logprobs && n_toks > 0 && hold_tokens(l, toks, n_toks, n) < 0) ||
	     (n > 0 && buf_append(l, s, n) < 0))) {
		l->failed = true;
		snprintf(l->error, sizeof(l->error), "out of memory");
	}
	if (forward && n > 0)
		l->passed = true;
	pthread_mutex_unlock(&q->lock);
	if (forward && n > 0) {
		struct manager_event ev = { .type = MANAGER_EVENT_TEXT,
					    .id = q->id,
					    .text = s,
					    .text_len = n,
					    .tokens = q->client_logprobs ? toks : NULL,
					    .n_tokens = q->client_logprobs ? n_toks : 0 };
		q->fn(&ev, q->userdata);
	}
}

static void leg_end_locked(struct mleg *l)
{
	l->running = false;
	enqueue_locked(l->q);
}

/* The leg's final event said it ended well (unless a failure was seen before). */
static void leg_done_locked(struct mleg *l, const char *finish_reason, uint32_t prompt_tokens,
			    uint32_t completion_tokens)
{
	if (!l->failed) {
		l->ok = true;
		snprintf(l->finish, sizeof(l->finish), "%s", finish_reason ? finish_reason : "stop");
	}
	l->prompt_tokens = prompt_tokens;
	l->completion_tokens = completion_tokens;
	leg_end_locked(l);
}

/* The leg failed; the caller writes l->error and ends it. */
static void leg_fail_locked(struct mleg *l, enum router_trigger trig)
{
	l->failed = true;
	l->trig = trig;
}

static void on_local_leg(const struct manager_event *ev, void *userdata)
{
	struct mleg *l = userdata;
	struct mroute *q = l->q;

	switch (ev->type) {
	case MANAGER_EVENT_TEXT:
		leg_text(l, ev->text, ev->text_len, ev->tokens, ev->n_tokens);
		return;
	case MANAGER_EVENT_DONE:
		pthread_mutex_lock(&q->lock);
		leg_add_logprobs_locked(l, ev->tokens, ev->n_tokens);
		leg_done_locked(l, ev->finish_reason, ev->prompt_tokens, ev->completion_tokens);
		pthread_mutex_unlock(&q->lock);
		return;
	case MANAGER_EVENT_ERROR:
		pthread_mutex_lock(&q->lock);
		leg_fail_locked(l, ev->error && ev->error->kind == MANAGER_ERR_CONTEXT_LENGTH
					   ? ROUTER_TRIGGER_CONTEXT
					   : ROUTER_TRIGGER_ERROR);
		snprintf(l->error, sizeof(l->error), "%.290s",
			 ev->error ? ev->error->message : "generation failed");
		leg_end_locked(l);
		pthread_mutex_unlock(&q->lock);
		return;
	}
}

static void on_remote_leg(const struct remote_event *rev, void *userdata)
{
	struct mleg *l = userdata;
	struct mroute *q = l->q;

	switch (rev->type) {
	case REMOTE_EVENT_TEXT: {
		_cleanup_free_ char *out = NULL;
		size_t n = rev->text_len;
		const char *s = rev->text;

		if (l->vs) {
			pthread_mutex_lock(&q->lock);
			int k = vault_stream_feed(l->vs, rev->text, rev->text_len, &out, &n);
			pthread_mutex_unlock(&q->lock);
			if (k < 0)
				return;
			s = out;
		}
		leg_text(l, s, n, NULL, 0);
		return;
	}
	case REMOTE_EVENT_DONE: {
		if (l->vs) {
			_cleanup_free_ char *out = NULL;
			size_t n = 0;
			pthread_mutex_lock(&q->lock);
			int k = vault_stream_finish(l->vs, &out, &n);
			pthread_mutex_unlock(&q->lock);
			if (k >= 0 && n > 0)
				leg_text(l, out, n, NULL, 0);
		}
		pthread_mutex_lock(&q->lock);
		/* A target that reports log-probabilities gives its answer a confidence;
		 * without them it stays unknown. */
		l->lp_sum += rev->logprob_sum;
		l->n_lp += rev->n_logprobs;
		l->remote = NULL;
		leg_done_locked(l, rev->finish_reason, rev->prompt_tokens, rev->completion_tokens);
		pthread_mutex_unlock(&q->lock);
		return;
	}
	case REMOTE_EVENT_ERROR:
		pthread_mutex_lock(&q->lock);
		l->remote = NULL;
		leg_fail_locked(l, rev->error == REMOTE_ERR_CONTEXT ? ROUTER_TRIGGER_CONTEXT
				   : rev->error == REMOTE_ERR_REJECTED || rev->error == REMOTE_ERR_REFUSED
					   ? ROUTER_TRIGGER_POLICY
					   : ROUTER_TRIGGER_ERROR);
		if (rev->text_sent)
			l->passed = l->passed || !l->buffered;
		snprintf(l->error, sizeof(l->error), "%s: %s", remote_error_name(rev->error),
			 rev->message ? rev->message : "");
		leg_end_locked(l);
		pthread_mutex_unlock(&q->lock);
		return;
	}
}

/* Whether an answer from a leg at tier could still be replaced (so it must be held back). */
static bool must_buffer(struct mroute *q, unsigned tier)
{
	if (q->mode == MODE_MIXTURE)
		return true;
	if (q->mode != MODE_CASCADE)
		return false;
	for (size_t i = 0; i < q->n_legs; i++)
		if (q->legs[i]->ok)
			return true; /* an earlier answer may still be the best */
	return router_plan_can_escalate(q->snap->router, q->plan, tier,
					q->budget > 0 ? q->budget - q->spent : -1);
}

/*
 * Starts a leg on the plan's candidate at pos. A failure to start is a failed leg (queued
 * like any other end). Called without q->lock; never on the scheduler's thread.
 */
static void leg_start(struct mroute *q, size_t pos, bool buffered)
{
	struct manager_routing *rt = q->rt;
	const struct router_target *t = router_get_target(q->snap->router, q->plan->c[pos].target);
	struct mleg *l;
	int k = 0;

	l = calloc(1, sizeof(*l));
	pthread_mutex_lock(&q->lock);
	if (!l || q->n_legs == MAX_LEGS) {
		free(l);
		snprintf(q->why + strlen(q->why), sizeof(q->why) - strlen(q->why), "%s%s",
			 q->why[0] ? "; " : "", "no memory or too many attempts");
		/* Nothing runs: judge what there is. */
		enqueue_locked(q);
		pthread_mutex_unlock(&q->lock);
		return;
	}
	l->q = q;
	l->pos = pos;
	l->t = t;
	l->buffered = buffered;
	l->cost = q->plan->c[pos].cost;
	l->running = true;
	q->spent += l->cost;
	q->legs[q->n_legs++] = l;
	pthread_mutex_unlock(&q->lock);

	if (t->tier == 0) {
		struct manager_request r = q->req;
		struct manager_error err = { 0 };

		r.model = t->adapter;
		r.logprobs = true; /* the confidence signal */
		l->local = true;
		l->local_id = rt->hooks.new_id(rt->hooks.m);
		k = rt->hooks.local_submit(rt->hooks.m, l->local_id, &r, NULL, on_local_leg, l,
					   &err);
		if (k < 0)
			snprintf(l->error, sizeof(l->error), "%.290s", err.message);
	} else {
		struct remote_request rr = { .prompt = q->req.prompt,
					     .messages = q->req.messages,
					     .n_messages = q->req.n_messages,
					     .max_tokens = q->req.max_tokens,
					     .temperature = q->req.temperature,
					     .top_p = q->req.top_p,
					     .has_seed = q->req.has_seed,
					     .seed = q->req.seed,
					     .stop = q->req.stop,
					     .n_stop = q->req.n_stop,
					     .permitted_tiers = q->permitted_tiers,
					     .sensitivity = q->sensitivity,
					     /* the confidence signal, when a cascade or mixture
					      * needs it */
					     .logprobs = q->mode != MODE_PLAIN };
		if (t->tier == 3) {
			/* The router only ranks T3 where the policy permits it, and then the
			 * text leaves redacted, always. */
			pthread_mutex_lock(&q->lock);
			k = mroute_redact(q);
			if (k >= 0)
				k = vault_stream_new(q->vault, &l->vs);
			pthread_mutex_unlock(&q->lock);
			if (k >= 0) {
				if (q->red_prompt)
					rr.prompt = q->red_prompt;
				else
					rr.messages = q->red_messages;
			}
		}
		if (k >= 0) {
			/* Under q->lock: the leg's events (on the request's worker thread) wait
			 * until its id is known. */
			pthread_mutex_lock(&q->lock);
			l->remote = t->remote;
			k = remote_submit(t->remote, &rr, on_remote_leg, l, &l->remote_id);
			if (k < 0)
				l->remote = NULL;
			pthread_mutex_unlock(&q->lock);
		}
		if (k < 0)
			snprintf(l->error, sizeof(l->error), "%s",
				 k == -EHOSTDOWN ? "cooling down after failures" : strerror(-k));
	}
	if (k < 0) {
		pthread_mutex_lock(&q->lock);
		l->remote = NULL;
		leg_fail_locked(l, ROUTER_TRIGGER_ERROR);
		leg_end_locked(l);
		pthread_mutex_unlock(&q->lock);
	}
}

static void set_audit(struct mroute *q, const struct mleg *l)
{
	if (!q->audit)
		return;
	if (l) {
		snprintf(q->audit->target, sizeof(q->audit->target), "%s", l->t->name);
		q->audit->tier = (int) l->t->tier;
		q->audit->prompt_tokens = l->prompt_tokens;
		q->audit->completion_tokens = l->completion_tokens;
	}
	q->audit->fallbacks = q->plan->fallbacks;
	q->audit->escalations = q->escalations;
	q->audit->redactions = q->vault ? (uint32_t) vault_size(q->vault) : 0;
	snprintf(q->audit->route, sizeof(q->audit->route), "%s", q->route);
}

/* Ends q with leg l's answer (sending its held-back text). Called without q->lock. */
static void deliver(struct mroute *q, struct mleg *l, const char *note)
{
	struct manager_routing *rt = q->rt;
	struct manager_event ev = { .type = MANAGER_EVENT_DONE,
				    .id = q->id,
				    .finish_reason = l->finish[0] ? l->finish : "stop",
				    .prompt_tokens = l->prompt_tokens,
				    .completion_tokens = l->completion_tokens,
				    .model = l->t->name,
				    .uncertainty = note,
				    .target = l->t->name };
	bool known;
	double conf = leg_confidence(l, &known);

	if (l->buffered && l->n_buf > 0) {
		_cleanup_free_ struct manager_token *toks = NULL;
		struct manager_event tev = { .type = MANAGER_EVENT_TEXT,
					     .id = q->id,
					     .text = l->buf,
					     .text_len = l->n_buf };

		/* the held tokens with the text they spell, as a streamed answer has them */
		if (l->n_toks > 0 && !l->toks_lost && (toks = calloc(l->n_toks, sizeof(*toks)))) {
			for (size_t i = 0; i < l->n_toks; i++)
				toks[i] = (struct manager_token){ .id = l->toks[i].id,
								  .text = l->buf + l->toks[i].off,
								  .text_len = l->toks[i].len,
								  .logprob = l->toks[i].logprob };
			tev.tokens = toks;
			tev.n_tokens = l->n_toks;
		}
		q->fn(&tev, q->userdata);
	}
	ev.has_confidence = known;
	ev.confidence = (float) conf;
	set_audit(q, l);
	if (q->audit)
		snprintf(q->audit->finish, sizeof(q->audit->finish), "%s", ev.finish_reason);
	q->fn(&ev, q->userdata);
	rt->hooks.final(rt->hooks.m, &ev, TAKE_PTR(q->audit));
	routing_release(rt, q);
	mroute_free(q);
}

static void finish_error(struct mroute *q, enum manager_err kind, int error, const char *msg)
{
	struct manager_routing *rt = q->rt;
	struct manager_error err = { .kind = kind, .error = error };
	struct manager_event ev = { .type = MANAGER_EVENT_ERROR, .id = q->id, .error = &err };

	snprintf(err.message, sizeof(err.message), "%s", msg);
	set_audit(q, q->n_legs ? q->legs[q->n_legs - 1] : NULL);
	if (q->audit)
		snprintf(q->audit->error, sizeof(q->audit->error), "%s", manager_err_name(kind));
	q->fn(&ev, q->userdata);
	rt->hooks.final(rt->hooks.m, &ev, TAKE_PTR(q->audit));
	routing_release(rt, q);
	mroute_free(q);
}

static void finish_cancelled(struct mroute *q)
{
	struct manager_routing *rt = q->rt;
	struct mleg *l = q->n_legs ? q->legs[q->n_legs - 1] : NULL;
	struct manager_event ev = { .type = MANAGER_EVENT_DONE,
				    .id = q->id,
				    .finish_reason = "cancelled",
				    .model = l ? l->t->name : NULL };

	set_audit(q, l);
	if (q->audit)
		snprintf(q->audit->finish, sizeof(q->audit->finish), "cancelled");
	q->fn(&ev, q->userdata);
	rt->hooks.final(rt->hooks.m, &ev, TAKE_PTR(q->audit));
	routing_release(rt, q);
	mroute_free(q);
}

static void add_why(struct mroute *q, const struct mleg *l)
{
	snprintf(q->why + strlen(q->why), sizeof(q->why) - strlen(q->why), "%s%s: %s",
		 q->why[0] ? "; " : "", l->t->name, l->error[0] ? l->error : "failed");
}

static void add_route(struct mroute *q, const char *fmt, ...) _printf_(2, 3);
static void add_route(struct mroute *q, const char *fmt, ...)
{
	size_t n = strlen(q->route);
	va_list ap;

	if (n + 3 >= sizeof(q->route))
		return;
	if (n > 0) {
		q->route[n++] = ';';
		q->route[n++] = ' ';
		q->route[n] = 0;
	}
	va_start(ap, fmt);
	vsnprintf(q->route + n, sizeof(q->route) - n, fmt, ap);
	va_end(ap);
}

/* The routing thread's judgement once no leg of q runs. */
static void decide(struct mroute *q)
{
	struct manager_routing *rt = q->rt;
	struct router *router = q->snap->router;
	struct mleg *last, *best = NULL;
	double budget_left;
	char note[400];
	bool known, cancelled;
	double conf;

	pthread_mutex_lock(&q->lock);
	if (q->starting) {
		pthread_mutex_unlock(&q->lock);
		return; /* the submitter queues it once every leg started */
	}
	for (size_t i = 0; i < q->n_legs; i++)
		if (q->legs[i]->running) {
			pthread_mutex_unlock(&q->lock);
			return; /* the last leg's end queues it again */
		}
	q->done = true; /* no leg runs: nothing else touches q until a new leg starts */
	cancelled = q->cancelled;
	pthread_mutex_unlock(&q->lock);

	if (cancelled) {
		finish_cancelled(q);
		return;
	}
	last = q->n_legs ? q->legs[q->n_legs - 1] : NULL;
	budget_left = q->budget > 0 ? q->budget - q->spent : -1;

	if (q->mode == MODE_MIXTURE && q->mixture_round) {
		double best_v = -1, wsum = 0;

		q->mixture_round = false;
		for (size_t i = 0; i < q->n_legs; i++)
			wsum += MAX(q->plan->c[q->legs[i]->pos].score, 0.0);
		for (size_t i = 0; i < q->n_legs; i++) {
			struct mleg *l = q->legs[i];
			const struct router_candidate *c = &q->plan->c[l->pos];
			double w = wsum > 0 ? MAX(c->score, 0.0) / wsum : 1.0 / (double) q->n_legs;
			double v;

			if (!l->ok) {
				add_why(q, l);
				continue;
			}
			conf = leg_confidence(l, &known);
			v = w * c->quality * (known ? conf : UNKNOWN_CONFIDENCE);
			if (v > best_v) {
				best_v = v;
				best = l;
			}
		}
		if (best) {
			conf = leg_confidence(best, &known);
			add_route(q, "mixture of %zu: %s won (weight x quality x confidence %.3f)",
				  q->n_legs, best->t->name, best_v);
			note[0] = 0;
			if (rt->threshold > 0 && known && conf < rt->threshold)
				snprintf(note, sizeof(note),
					 "low confidence: %.2f is below the threshold %.2f",
					 conf, rt->threshold);
			deliver(q, best, note[0] ? note : NULL);
			return;
		}
		/* Every specialist failed: walk on as a cascade from the plan's rest. */
		q->mode = MODE_CASCADE;
		if (router_plan_next(router, q->plan, ROUTER_TRIGGER_ERROR) >= 0) {
			pthread_mutex_lock(&q->lock);
			q->done = false;
			pthread_mutex_unlock(&q->lock);
			leg_start(q, q->plan->pos,
				  must_buffer(q, router_plan_current(router, q->plan)->tier));
			return;
		}
		char msg[700];
		snprintf(msg, sizeof(msg), "no target of the mixture could answer (%s)", q->why);
		finish_error(q, MANAGER_ERR_UNAVAILABLE, -EHOSTDOWN, msg);
		return;
	}

	if (!last) {
		finish_error(q, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
		return;
	}
	if (last->failed || !last->ok) {
		int k;

		add_why(q, last);
		if (last->passed) {
			char msg[700];
			snprintf(msg, sizeof(msg), "target %s failed in the middle of its answer (%s)",
				 last->t->name, q->why);
			finish_error(q, MANAGER_ERR_UNAVAILABLE, -EIO, msg);
			return;
		}
		/* The plan's current candidate is the failed leg's. */
		q->plan->pos = last->pos;
		k = router_plan_next(router, q->plan, last->trig);
		if (k >= 0) {
			add_route(q, "fallback after %s (%s)", last->t->name,
				  router_trigger_name(last->trig));
			pthread_mutex_lock(&q->lock);
			q->done = false;
			pthread_mutex_unlock(&q->lock);
			leg_start(q, q->plan->pos,
				  must_buffer(q, router_plan_current(router, q->plan)->tier));
			return;
		}
		/* Nothing left to try: an earlier answer of the cascade, if any, is the best. */
		for (size_t i = 0; i < q->n_legs; i++)
			if (q->legs[i]->ok &&
			    (!best || leg_confidence(q->legs[i], &known) >
					      leg_confidence(best, &known)))
				best = q->legs[i];
		if (best) {
			conf = leg_confidence(best, &known);
			snprintf(note, sizeof(note),
				 "low confidence: %.2f is below the threshold %.2f, and escalating "
				 "failed (%.200s)",
				 conf, rt->threshold, q->why);
			deliver(q, best, note);
			return;
		}
		char msg[700];
		snprintf(msg, sizeof(msg), "no permitted target could answer after %u fallbacks (%s)",
			 q->plan->fallbacks, q->why);
		bool too_long = last->trig == ROUTER_TRIGGER_CONTEXT;

		finish_error(q, too_long ? MANAGER_ERR_CONTEXT_LENGTH : MANAGER_ERR_UNAVAILABLE,
			     too_long ? -E2BIG : -EHOSTDOWN, msg);
		return;
	}

	/* The last leg answered. */
	conf = leg_confidence(last, &known);
	if (q->mode == MODE_CASCADE && known && conf < rt->threshold && !last->passed) {
		q->plan->pos = last->pos;
		if (router_plan_escalate(router, q->plan, last->t->tier, budget_left) >= 0) {
			q->escalations++;
			add_route(q, "escalated: %s confidence %.2f < %.2f", last->t->name, conf,
				  rt->threshold);
			pthread_mutex_lock(&q->lock);
			q->done = false;
			pthread_mutex_unlock(&q->lock);
			leg_start(q, q->plan->pos,
				  must_buffer(q, router_plan_current(router, q->plan)->tier));
			return;
		}
	}
	/* The best answer: the last unless it is below the threshold and an earlier one was
	 * more confident. An unknown confidence (a remote answer without log-probabilities)
	 * is taken as it is. */
	best = last;
	if (q->mode == MODE_CASCADE && known && conf < rt->threshold && !last->passed) {
		double best_c = conf;
		for (size_t i = 0; i < q->n_legs; i++) {
			bool kn;
			double c = leg_confidence(q->legs[i], &kn);
			if (q->legs[i]->ok && kn && c > best_c) {
				best = q->legs[i];
				best_c = c;
			}
		}
	}
	conf = leg_confidence(best, &known);
	note[0] = 0;
	if (rt->threshold > 0 && known && conf < rt->threshold) {
		bool higher = false;
		for (size_t i = 0; i < q->plan->n; i++)
			if (router_get_target(router, q->plan->c[i].target)->tier > best->t->tier)
				higher = true;
		snprintf(note, sizeof(note), "low confidence: %.2f is below the threshold %.2f; %s%s%s",
			 conf, rt->threshold,
			 higher ? "a higher tier's target is unavailable" : "",
			 higher && q->budget_above > best->t->tier ? " and " : "",
			 q->budget_above > best->t->tier
				 ? "the request's budget excludes the higher tiers' targets"
			 : higher ? ""
				  : "no higher tier is permitted for this request");
	}
	if (best != last)
		add_route(q, "answer of %s kept (more confident)", best->t->name);
	deliver(q, best, note[0] ? note : NULL);
}

static void *worker_main(void *userdata)
{
	struct manager_routing *rt = userdata;

	for (;;) {
		struct mroute *q;

		pthread_mutex_lock(&rt->work_lock);
		while (!rt->work_head && !rt->stopping)
			pthread_cond_wait(&rt->work_cond, &rt->work_lock);
		if (!rt->work_head) {
			pthread_mutex_unlock(&rt->work_lock);
			return NULL;
		}
		q = rt->work_head;
		rt->work_head = q->work_next;
		q->queued = false;
		pthread_mutex_unlock(&rt->work_lock);
		decide(q);
	}
}

static void request_cancel_all(struct manager_routing *rt)
{
	uint64_t *local = NULL;
	size_t n_local = 0, cap = 0;

	pthread_mutex_lock(&rt->lock);
	for (struct mroute *q = rt->active; q; q = q->next) {
		pthread_mutex_lock(&q->lock);
		q->cancelled = true;
		for (size_t i = 0; i < q->n_legs; i++) {
			struct mleg *l = q->legs[i];
			if (!l->running)
				continue;
			if (l->remote)
				(void) remote_cancel(l->remote, l->remote_id);
			if (l->local) {
				if (n_local == cap) {
					size_t nc = MAX((size_t) 16, cap * 2);
					uint64_t *v = realloc(local, nc * sizeof(*v));
					if (!v)
						continue;
					local = v;
					cap = nc;
				}
				local[n_local++] = l->local_id;
			}
		}
		pthread_mutex_unlock(&q->lock);
	}
	for (size_t i = 0; i < n_local; i++)
		(void) rt->hooks.local_cancel(rt->hooks.m, local[i]);
	pthread_mutex_unlock(&rt->lock);
	free(local);
}

/* ---- the query: classification and the plan ---- */

struct allow_ctx {
	struct manager_routing *rt;
	const struct manager_caller *caller;
};

static bool allow_target(const struct router_target *t, void *userdata)
{
	struct allow_ctx *a = userdata;

	if (t->tier != 0 || !t->adapter || !a->caller || !a->caller->member)
		return true;
	return a->rt->hooks.may_use(a->rt->hooks.m, a->caller, t->adapter);
}

/* The text the classifier reads: the prompt, or the messages' contents. */
static void classify_request(const struct rsnap *s, const struct manager_request *r,
			     struct classify_result *res)
{
	if (!s->cls) {
		res->n_domains = 0;
		return;
	}
	if (r->prompt)
		classify_run(s->cls->model, r->prompt, strlen(r->prompt), res);
	else {
		/* The user's words say what the request is about; the last user message most. */
		const char *t = "";
		for (size_t i = 0; i < r->n_messages; i++)
			if (r->messages[i].content &&
			    (!r->messages[i].role || strcmp(r->messages[i].role, "user") == 0))
				t = r->messages[i].content;
		classify_run(s->cls->model, t, strlen(t), res);
	}
}

/* The budget a request is routed under: the tighter of [Router] Budget= and the request's
 * own (a caller may spend less than the operator allows, never more); 0: no bound. */
static double request_budget(const struct manager_routing *rt, const struct manager_request *r)
{
	if (r->budget > 0 && (rt->budget <= 0 || r->budget < rt->budget))
		return r->budget;
	return rt->budget > 0 ? rt->budget : 0;
}

static void query_for(struct manager_routing *rt, const struct manager_request *r,
		      bool base_only, const struct classify_result *res, struct allow_ctx *ac,
		      struct router_query *q)
{
	size_t chars = 0;

	/* A rough token estimate (4 bytes a token) is enough for the cost term and the
	 * context check; the local path counts exactly. */
	if (r->prompt)
		chars = strlen(r->prompt);
	for (size_t i = 0; !r->prompt && i < r->n_messages; i++)
		chars += r->messages[i].content ? strlen(r->messages[i].content) : 0;
	*q = (struct router_query){ .prompt_tokens = (uint32_t) MIN(chars / 4 + 1,
								    (size_t) UINT32_MAX),
				    .max_tokens = r->max_tokens,
				    .posterior_idx = res->n_domains > 0 ? res->posterior : NULL,
				    .base_only = base_only,
				    .budget = request_budget(rt, r),
				    .allow = allow_target,
				    .allow_userdata = ac };
}

static enum route_mode mode_for(struct manager_routing *rt, const struct classify_result *res,
				const struct router_plan *plan)
{
	size_t usable = 0;

	for (size_t i = 0; i < plan->n; i++)
		usable += plan->c[i].usable;
	if (res->n_domains > 1 && res->entropy > rt->mixture_entropy && rt->mixture_k >= 2 &&
	    usable >= 2)
		return MODE_MIXTURE;
	if (rt->threshold > 0)
		return MODE_CASCADE;
	return MODE_PLAIN;
}

int manager_routing_submit(struct manager_routing *rt, uint64_t id,
			   const struct manager_request *r, const struct manager_caller *caller,
			   bool base_only, const struct policy_decision *d, struct audit_record **a,
			   manager_event_fn fn, void *userdata, char **ret_adapter,
			   struct manager_error *err)
{
	struct allow_ctx ac = { .rt = rt, .caller = caller };
	struct classify_result res;
	struct router_query query;
	struct mroute *q;
	const struct router_target *t;
	const struct router_candidate *c0;
	size_t pos[ROUTER_MAX_CANDIDATES], n_pos = 0, prefetched = 0;
	int k;

	*ret_adapter = NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		goto oom;
	pthread_mutex_init(&q->lock, NULL);
	q->snap = snap_get(rt);
	q->budget = request_budget(rt, r);
	q->plan = calloc(1, sizeof(*q->plan));
	if (!q->plan || !q->snap)
		goto oom;
	classify_request(q->snap, r, &res);
	query_for(rt, r, base_only, &res, &ac, &query);
	k = router_plan_new(q->snap->router, d, &query, q->plan);
	if (k < 0) {
		char tiers[32];
		mroute_free(q);
		err->kind = MANAGER_ERR_FORBIDDEN;
		err->error = -EPERM;
		snprintf(err->message, sizeof(err->message),
			 "the policy permits this %s request only the tiers '%s', and no "
			 "configured target in them is available to it%s",
			 policy_class_name(d->class),
			 policy_tiers_format(d->permitted_tiers, tiers, sizeof(tiers)),
			 request_budget(rt, r) > 0 ? " within the request's budget" : "");
		return -EPERM;
	}
	/* Prefetch hints: the likely local adapters come into the pool while the request is
	 * tokenized and queued. */
	for (size_t i = 0; i < q->plan->n && prefetched < MAX(rt->mixture_k, 2u); i++) {
		const struct router_target *x = router_get_target(q->snap->router,
								  q->plan->c[i].target);
		if (x->tier == 0 && x->adapter && q->plan->c[i].usable) {
			rt->hooks.prefetch(rt->hooks.m, x->adapter);
			prefetched++;
		}
	}
	c0 = &q->plan->c[0];
	t = router_plan_current(q->snap->router, q->plan);
	q->mode = mode_for(rt, &res, q->plan);
	if (q->mode == MODE_CASCADE && q->budget > 0) {
		/* For the note: which tiers the budget (and nothing else) kept out. */
		size_t n = router_n_targets(q->snap->router);
		_cleanup_free_ struct router_explained *x = calloc(MAX(n, (size_t) 1), sizeof(*x));
		if (x) {
			router_explain(q->snap->router, d, &query, x, n);
			for (size_t i = 0; i < n; i++)
				if (x[i].excluded &&
				    strcmp(x[i].excluded, ROUTER_EXCLUDED_BUDGET) == 0)
					q->budget_above = MAX(q->budget_above,
							      router_get_target(q->snap->router, i)->tier);
		}
	}
	snprintf(q->route, sizeof(q->route),
		 "best score %.3f (quality %.3f, cost %.4f, latency %.3f s) of %zu candidates",
		 c0->score, c0->quality, c0->cost, c0->latency_s, q->plan->n);
	if (res.n_domains > 0)
		add_route(q, "domain %s p=%.2f", classify_domain_name(q->snap->cls->model, res.top),
			  (double) res.confidence);

	if (q->mode == MODE_PLAIN && t->tier == 0) {
		if (*a) {
			snprintf((*a)->target, sizeof((*a)->target), "%s", t->name);
			(*a)->tier = 0;
			snprintf((*a)->route, sizeof((*a)->route), "%s", q->route);
		}
		if (t->adapter) {
			*ret_adapter = strdup(t->adapter);
			if (!*ret_adapter)
				goto oom;
		}
		mroute_free(q);
		return 0;
	}
	if (mroute_copy(q, r, d) < 0)
		goto oom;
	q->permitted_tiers = d->permitted_tiers;
	q->sensitivity = (int) d->class;
	q->rt = rt;
	q->id = id;
	q->fn = fn;
	q->userdata = userdata;
	q->client_logprobs = r->logprobs;
	q->audit = TAKE_PTR(*a);
	if (q->audit)
		q->audit->request_id = id;
	pthread_mutex_lock(&rt->lock);
	q->next = rt->active;
	rt->active = q;
	rt->n_active++;
	pthread_mutex_unlock(&rt->lock);

	q->starting = true;
	if (q->mode == MODE_MIXTURE) {
		n_pos = router_plan_topk(q->plan, rt->mixture_k, pos);
		q->mixture_round = true;
		for (size_t i = 0; i < n_pos; i++)
			leg_start(q, pos[i], true);
	} else
		leg_start(q, 0, must_buffer(q, t->tier));
	/* A leg that ended meanwhile (or failed to start) found q still starting. */
	pthread_mutex_lock(&q->lock);
	q->starting = false;
	enqueue_locked(q);
	pthread_mutex_unlock(&q->lock);
	return 1;
oom:
	mroute_free(q);
	err->kind = MANAGER_ERR_INTERNAL;
	err->error = -ENOMEM;
	snprintf(err->message, sizeof(err->message), "out of memory");
	return -ENOMEM;
}

int manager_routing_cancel(struct manager_routing *rt, uint64_t id)
{
	uint64_t local[MAX_LEGS];
	size_t n_local = 0;
	int k = -ENOENT;

	if (!rt)
		return -ENOENT;
	pthread_mutex_lock(&rt->lock);
	for (struct mroute *q = rt->active; q; q = q->next)
		if (q->id == id) {
			pthread_mutex_lock(&q->lock);
			q->cancelled = true;
			for (size_t i = 0; i < q->n_legs; i++) {
				struct mleg *l = q->legs[i];
				if (!l->running)
					continue;
				if (l->local)
					local[n_local++] = l->local_id;
				else if (l->remote)
					(void) remote_cancel(l->remote, l->remote_id);
			}
			pthread_mutex_unlock(&q->lock);
			k = 0;
			break;
		}
	/* Still under rt->lock (q stays alive); the scheduler's events take only q->lock and
	 * the queue's lock, so waiting for its lock here cannot deadlock. */
	for (size_t i = 0; i < n_local; i++)
		(void) rt->hooks.local_cancel(rt->hooks.m, local[i]);
	pthread_mutex_unlock(&rt->lock);
	return k;
}

/* ---- explain ---- */

int manager_routing_explain(struct manager_routing *rt, const struct manager_request *r,
			    const struct manager_caller *caller, bool base_only,
			    const struct policy_decision *d, struct manager_route_explain *ret)
{
	struct allow_ctx ac = { .rt = rt, .caller = caller };
	struct classify_result res;
	struct router_query query;
	_cleanup_free_ struct router_explained *x = NULL;
	_cleanup_free_ struct router_plan *plan = NULL;
	struct rsnap *s = snap_get(rt);
	size_t n;
	int k;

	*ret = (struct manager_route_explain){ 0 };
	if (!s)
		return -ENOMEM;
	classify_request(s, r, &res);
	query_for(rt, r, base_only, &res, &ac, &query);
	n = router_n_targets(s->router);
	x = calloc(MAX(n, (size_t) 1), sizeof(*x));
	plan = calloc(1, sizeof(*plan));
	ret->c = calloc(MAX(n, (size_t) 1), sizeof(*ret->c));
	if (!x || !plan || !ret->c) {
		free(ret->c);
		ret->c = NULL;
		rsnap_unref(s);
		return -ENOMEM;
	}
	router_explain(s->router, d, &query, x, n);
	k = router_plan_new(s->router, d, &query, plan);
	for (size_t i = 0; i < n; i++) {
		struct manager_route_candidate *c = &ret->c[i];
		const struct router_target *t = router_get_target(s->router, i);
		snprintf(c->name, sizeof(c->name), "%s", t->name);
		c->tier = t->tier;
		c->quality = x[i].c.quality;
		c->cost = x[i].c.cost;
		c->latency_s = x[i].c.latency_s;
		c->score = x[i].c.score;
		c->usable = x[i].c.usable;
		c->why_unusable = x[i].c.why_unusable;
		c->excluded = x[i].excluded;
		c->chosen = k >= 0 && plan->c[0].target == i;
	}
	ret->n = n;
	ret->routed = true;
	if (res.n_domains > 0) {
		snprintf(ret->top_domain, sizeof(ret->top_domain), "%s",
			 classify_domain_name(s->cls->model, res.top));
		ret->top_p = res.confidence;
		ret->entropy = res.entropy;
	}
	if (k < 0)
		snprintf(ret->action, sizeof(ret->action), "none (no permitted target)");
	else
		switch (mode_for(rt, &res, plan)) {
		case MODE_MIXTURE:
			snprintf(ret->action, sizeof(ret->action), "mixture of %u",
				 (unsigned) MIN((size_t) rt->mixture_k, plan->n));
			break;
		case MODE_CASCADE:
			snprintf(ret->action, sizeof(ret->action), "cascade");
			break;
		case MODE_PLAIN:
			snprintf(ret->action, sizeof(ret->action), "single");
			break;
		}
	rsnap_unref(s);
	return 0;
}
