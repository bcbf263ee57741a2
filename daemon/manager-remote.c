/* SPDX-License-Identifier: MIT */
/*
 * manager-remote.c: see manager-remote.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "manager-remote.h"
#include "policy/vault.h"
#include "targets/remote.h"

struct mremote;

struct manager_routing {
	struct router *router;
	struct router_target *rtargets;    /* n_targets; strings point into c's copy below */
	struct router_quality **qualities; /* per target */
	struct remote_target **remotes;    /* per target; NULL for T0 */
	size_t n_targets;
	char *local_name;
	struct config *config;             /* a reference: the targets' strings live in it */
	struct manager_routing_hooks hooks;

	pthread_mutex_t lock;
	pthread_cond_t idle;
	struct mremote *active;
	unsigned n_active;
};

struct mremote {
	struct mremote *next;
	struct manager_routing *rt;
	uint64_t id;
	pthread_mutex_t lock;
	bool cancelled;
	uint64_t remote_id;
	struct remote_target *remote;

	struct router_plan *plan;
	manager_event_fn fn;
	void *userdata;
	struct audit_record *audit;

	/* the request, copied: the caller's is gone once manager_submit() returned */
	struct manager_request req;
	char *prompt;
	struct chat_message *messages;
	char **strings;          /* every string the copies own */
	size_t n_strings;
	char **stop;

	/* what the policy found, for redaction (byte spans into the policy text) */
	struct policy_finding *findings;
	size_t n_findings;
	struct vault *vault;
	struct vault_stream *vstream;
	char *red_prompt;
	struct chat_message *red_messages;

	bool text_sent;
	char why[512];           /* the failures so far, for the final error */
	uint32_t permitted_tiers; /* the policy's, checked again at the egress hand-off */
	int sensitivity;
};

/* ---- building ---- */

int manager_routing_new(const struct config *c, const char *base,
			const struct manager_routing_hooks *hooks, struct manager_routing **ret,
			struct errmsg *e)
{
	struct manager_routing *rt;
	struct router_params p;
	size_t n = c->n_targets + 1;
	int k;

	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	pthread_mutex_init(&rt->lock, NULL);
	pthread_cond_init(&rt->idle, NULL);
	rt->hooks = *hooks;
	rt->config = config_ref((struct config *) c);
	rt->rtargets = calloc(n, sizeof(*rt->rtargets));
	rt->qualities = calloc(n, sizeof(*rt->qualities));
	rt->remotes = calloc(n, sizeof(*rt->remotes));
	if (!rt->rtargets || !rt->qualities || !rt->remotes ||
	    asprintf(&rt->local_name, "local:%s", base) < 0) {
		rt->local_name = NULL;
		k = -ENOMEM;
		goto fail;
	}
	rt->n_targets = n;
	rt->rtargets[0] = (struct router_target){ .name = rt->local_name,
						  .tier = 0,
						  .user_controlled = true,
						  .modalities = CONFIG_MODALITY_TEXT };
	for (size_t i = 0; i < c->n_targets; i++) {
		const struct config_target *t = &c->targets[i];
		struct remote_target_config rc = { .name = t->name,
						   .url = t->url,
						   .model = t->model,
						   .credential_file = t->credential_file,
						   .timeout_ns = t->timeout_ns,
						   .retries = t->retries };
		struct router_target *x = &rt->rtargets[i + 1];

		k = hooks->target_new ? hooks->target_new(hooks->m, t, &rt->remotes[i + 1], e)
				      : remote_target_new(&rc, &rt->remotes[i + 1], e);
		if (k < 0)
			goto fail;
		if (t->n_quality > 0) {
			rt->qualities[i + 1] = calloc(t->n_quality, sizeof(struct router_quality));
			if (!rt->qualities[i + 1]) {
				k = -ENOMEM;
				goto fail;
			}
			for (size_t j = 0; j < t->n_quality; j++)
				rt->qualities[i + 1][j] = (struct router_quality){
					.domain = t->quality[j].domain,
					.quality = t->quality[j].quality
				};
		}
		*x = (struct router_target){ .name = t->name,
					     .tier = (unsigned) t->tier,
					     .user_controlled = t->user_controlled,
					     .cost_in = t->cost_in,
					     .cost_out = t->cost_out,
					     .context_tokens = t->context_tokens,
					     .modalities = t->modalities,
					     .quality = rt->qualities[i + 1],
					     .n_quality = t->n_quality,
					     .remote = rt->remotes[i + 1] };
	}
	p = (struct router_params){ .max_fallbacks = c->router_max_fallbacks,
				    .cost_weight = c->router_cost_weight,
				    .latency_weight = c->router_latency_weight };
	k = router_new(rt->rtargets, n, &p, &rt->router, e);
	if (k < 0)
		goto fail;
	*ret = rt;
	return 0;
fail:
	manager_routing_free(rt);
	return k;
}

struct manager_routing *manager_routing_free(struct manager_routing *rt)
{
	if (!rt)
		return NULL;
	pthread_mutex_lock(&rt->lock);
	for (struct mremote *q = rt->active; q; q = q->next) {
		pthread_mutex_lock(&q->lock);
		q->cancelled = true;
		if (q->remote)
			(void) remote_cancel(q->remote, q->remote_id);
		pthread_mutex_unlock(&q->lock);
	}
	while (rt->n_active > 0)
		pthread_cond_wait(&rt->idle, &rt->lock);
	pthread_mutex_unlock(&rt->lock);
	for (size_t i = 0; i < rt->n_targets; i++) {
		if (rt->remotes)
			remote_target_free(rt->remotes[i]);
		if (rt->qualities)
			free(rt->qualities[i]);
	}
	router_free(rt->router);
	free(rt->remotes);
	free(rt->qualities);
	free(rt->rtargets);
	free(rt->local_name);
	config_unref(rt->config);
	pthread_mutex_destroy(&rt->lock);
	pthread_cond_destroy(&rt->idle);
	free(rt);
	return NULL;
}

bool manager_routing_has_remote(const struct manager_routing *rt)
{
	return rt && rt->n_targets > 1;
}

/* ---- one routed request ---- */

static void mremote_free(struct mremote *q)
{
	if (!q)
		return;
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
	vault_stream_free(q->vstream);
	vault_free(q->vault);
	free(q->red_messages);
	free(q->audit);
	pthread_mutex_destroy(&q->lock);
	free(q);
}

static char *keep(struct mremote *q, const char *s, size_t n)
{
	char *d = strndup(s ? s : "", n);

	if (!d)
		return NULL;
	q->strings[q->n_strings++] = d;
	return d;
}

static int mremote_copy(struct mremote *q, const struct manager_request *r,
			const struct policy_decision *d)
{
	size_t cap = 2 + 3 * r->n_messages + r->n_stop; /* copies, then redacted copies */

	q->strings = calloc(cap, sizeof(char *));
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

/* The findings within [off, off + len) of the policy text, shifted to the piece. */
static int redact_piece(struct mremote *q, const char *text, size_t off, char **ret)
{
	size_t len = strlen(text), n = 0, out_len;
	_cleanup_free_ struct policy_finding *f = calloc(MAX(q->n_findings, (size_t) 1),
							 sizeof(*f));

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
	/* Every finding, whatever its class: T3 sees no value the detectors found. */
	return vault_redact(q->vault, text, len, f, n, POLICY_CLASS_PUBLIC, ret, &out_len);
}

/* Builds the redacted copy of the request (once) for T3. */
static int mremote_redact(struct mremote *q)
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
	return vault_stream_new(q->vault, &q->vstream);
}

static void routing_release(struct manager_routing *rt, struct mremote *q)
{
	pthread_mutex_lock(&rt->lock);
	for (struct mremote **p = &rt->active; *p; p = &(*p)->next)
		if (*p == q) {
			*p = q->next;
			break;
		}
	if (--rt->n_active == 0)
		pthread_cond_broadcast(&rt->idle);
	pthread_mutex_unlock(&rt->lock);
}

static void set_target(struct mremote *q, const struct router_target *t)
{
	if (!q->audit)
		return;
	snprintf(q->audit->target, sizeof(q->audit->target), "%s", t->name);
	q->audit->tier = (int) t->tier;
	q->audit->fallbacks = q->plan->fallbacks;
	q->audit->redactions = q->vault ? (uint32_t) vault_size(q->vault) : 0;
}

static void finish_error(struct mremote *q, enum manager_err kind, int error, const char *msg)
{
	struct manager_routing *rt = q->rt;
	struct manager_error err = { .kind = kind, .error = error };
	struct manager_event ev = { .type = MANAGER_EVENT_ERROR, .id = q->id, .error = &err };

	snprintf(err.message, sizeof(err.message), "%s", msg);
	if (q->audit)
		snprintf(q->audit->error, sizeof(q->audit->error), "%s", manager_err_name(kind));
	q->fn(&ev, q->userdata);
	rt->hooks.final(rt->hooks.m, &ev, TAKE_PTR(q->audit));
	routing_release(rt, q);
	mremote_free(q);
}

static void on_remote_event(const struct remote_event *rev, void *userdata);

/*
 * Starts the plan's current candidate; on a synchronous failure walks on. Ends the request
 * (final event) when nothing is left. Called with nothing locked.
 */
static void mremote_run(struct mremote *q)
{
	struct manager_routing *rt = q->rt;

	for (;;) {
		const struct router_target *t = router_plan_current(rt->router, q->plan);
		struct manager_error err = { 0 };
		enum router_trigger trig = ROUTER_TRIGGER_ERROR;
		char buf[300];
		int k;

		pthread_mutex_lock(&q->lock);
		if (q->cancelled) {
			pthread_mutex_unlock(&q->lock);
			struct manager_event ev = { .type = MANAGER_EVENT_DONE,
						    .id = q->id,
						    .finish_reason = "cancelled",
						    .model = t ? t->name : NULL };
			if (q->audit)
				snprintf(q->audit->finish, sizeof(q->audit->finish), "cancelled");
			q->fn(&ev, q->userdata);
			rt->hooks.final(rt->hooks.m, &ev, TAKE_PTR(q->audit));
			routing_release(rt, q);
			mremote_free(q);
			return;
		}
		pthread_mutex_unlock(&q->lock);
		set_target(q, t);

		if (t->tier == 0) {
			/* This machine's engine: the manager's path writes the audit record and
			 * sends the events from here on. */
			routing_release(rt, q);
			k = rt->hooks.local_submit(rt->hooks.m, q->id, &q->req, TAKE_PTR(q->audit),
						   q->fn, q->userdata, &err);
			if (k < 0) {
				struct manager_event ev = { .type = MANAGER_EVENT_ERROR,
							    .id = q->id,
							    .error = &err };
				q->fn(&ev, q->userdata);
			}
			mremote_free(q);
			return;
		}

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
					     .sensitivity = q->sensitivity };
		k = 0;
		if (t->tier == 3) {
			/* The router only ranks T3 where the policy permits it, and then the
			 * text leaves redacted, always. */
			k = mremote_redact(q);
			if (k >= 0) {
				if (q->red_prompt)
					rr.prompt = q->red_prompt;
				else
					rr.messages = q->red_messages;
				set_target(q, t);
			}
		}
		if (k >= 0) {
			pthread_mutex_lock(&q->lock);
			q->remote = t->remote;
			k = remote_submit(t->remote, &rr, on_remote_event, q, &q->remote_id);
			if (k < 0)
				q->remote = NULL;
			pthread_mutex_unlock(&q->lock);
		}
		if (k >= 0)
			return; /* its events go on in on_remote_event() */

		snprintf(buf, sizeof(buf), "%s%s: %s", q->why[0] ? "; " : "", t->name,
			 k == -EHOSTDOWN ? "cooling down after failures" : strerror(-k));
		strncat(q->why, buf, sizeof(q->why) - strlen(q->why) - 1);
		k = router_plan_next(rt->router, q->plan, trig);
		if (k < 0) {
			char msg[600];
			snprintf(msg, sizeof(msg), "no permitted target could answer (%s)",
				 q->why);
			finish_error(q, MANAGER_ERR_UNAVAILABLE, -EHOSTDOWN, msg);
			return;
		}
	}
}

static void on_remote_event(const struct remote_event *rev, void *userdata)
{
	struct mremote *q = userdata;
	struct manager_routing *rt = q->rt;
	const struct router_target *t = router_plan_current(rt->router, q->plan);

	switch (rev->type) {
	case REMOTE_EVENT_TEXT: {
		_cleanup_free_ char *out = NULL;
		size_t n = rev->text_len;
		const char *s = rev->text;

		if (q->vstream) {
			if (vault_stream_feed(q->vstream, rev->text, rev->text_len, &out, &n) < 0)
				return;
			s = out;
		}
		q->text_sent = true;
		if (n > 0) {
			struct manager_event ev = { .type = MANAGER_EVENT_TEXT,
						    .id = q->id,
						    .text = s,
						    .text_len = n };
			q->fn(&ev, q->userdata);
		}
		return;
	}
	case REMOTE_EVENT_DONE: {
		struct manager_event ev = { .type = MANAGER_EVENT_DONE,
					    .id = q->id,
					    .finish_reason = rev->finish_reason,
					    .prompt_tokens = rev->prompt_tokens,
					    .completion_tokens = rev->completion_tokens,
					    .model = t->name };
		if (q->vstream) {
			_cleanup_free_ char *out = NULL;
			size_t n = 0;
			if (vault_stream_finish(q->vstream, &out, &n) >= 0 && n > 0) {
				struct manager_event tev = { .type = MANAGER_EVENT_TEXT,
							     .id = q->id,
							     .text = out,
							     .text_len = n };
				q->fn(&tev, q->userdata);
			}
		}
		pthread_mutex_lock(&q->lock);
		q->remote = NULL;
		pthread_mutex_unlock(&q->lock);
		if (q->audit) {
			set_target(q, t);
			q->audit->prompt_tokens = ev.prompt_tokens;
			q->audit->completion_tokens = ev.completion_tokens;
			snprintf(q->audit->finish, sizeof(q->audit->finish), "%s",
				 ev.finish_reason ? ev.finish_reason : "");
		}
		q->fn(&ev, q->userdata);
		rt->hooks.final(rt->hooks.m, &ev, TAKE_PTR(q->audit));
		routing_release(rt, q);
		mremote_free(q);
		return;
	}
	case REMOTE_EVENT_ERROR: {
		enum router_trigger trig = ROUTER_TRIGGER_ERROR;
		char buf[300], msg[700];
		int k;

		pthread_mutex_lock(&q->lock);
		q->remote = NULL;
		pthread_mutex_unlock(&q->lock);
		snprintf(buf, sizeof(buf), "%s%s: %s: %s", q->why[0] ? "; " : "", t->name,
			 remote_error_name(rev->error), rev->message ? rev->message : "");
		strncat(q->why, buf, sizeof(q->why) - strlen(q->why) - 1);
		if (rev->text_sent || q->text_sent) {
			snprintf(msg, sizeof(msg), "target %s failed in the middle of its answer (%s)",
				 t->name, q->why);
			finish_error(q, MANAGER_ERR_UNAVAILABLE, -EIO, msg);
			return;
		}
		if (rev->error == REMOTE_ERR_CONTEXT)
			trig = ROUTER_TRIGGER_CONTEXT;
		else if (rev->error == REMOTE_ERR_REJECTED || rev->error == REMOTE_ERR_REFUSED)
			trig = ROUTER_TRIGGER_POLICY;
		k = router_plan_next(rt->router, q->plan, trig);
		if (k < 0) {
			snprintf(msg, sizeof(msg), "no permitted target could answer after %u "
				 "fallbacks (%s)", q->plan->fallbacks, q->why);
			finish_error(q,
				     rev->error == REMOTE_ERR_CONTEXT ? MANAGER_ERR_CONTEXT_LENGTH
								     : MANAGER_ERR_UNAVAILABLE,
				     rev->error == REMOTE_ERR_CONTEXT ? -E2BIG : -EHOSTDOWN, msg);
			return;
		}
		/* The vault (if any) stays: a later T3 reuses the same placeholders. */
		mremote_run(q);
		return;
	}
	}
}

int manager_routing_submit(struct manager_routing *rt, uint64_t id,
			   const struct manager_request *r, const struct policy_decision *d,
			   struct audit_record **a, manager_event_fn fn, void *userdata,
			   struct manager_error *err)
{
	struct router_query query = { .prompt_tokens = 0, .max_tokens = r->max_tokens };
	struct mremote *q;
	const struct router_target *t;
	size_t chars = 0;
	int k;

	/* A rough token estimate (4 bytes a token) is enough for the cost term and the
	 * context check; the local path counts exactly. */
	if (r->prompt)
		chars = strlen(r->prompt);
	for (size_t i = 0; !r->prompt && i < r->n_messages; i++)
		chars += r->messages[i].content ? strlen(r->messages[i].content) : 0;
	query.prompt_tokens = (uint32_t) MIN(chars / 4 + 1, (size_t) UINT32_MAX);

	q = calloc(1, sizeof(*q));
	if (!q)
		goto oom;
	pthread_mutex_init(&q->lock, NULL);
	q->plan = calloc(1, sizeof(*q->plan));
	if (!q->plan)
		goto oom;
	k = router_plan_new(rt->router, d, &query, q->plan);
	if (k < 0) {
		char tiers[32];
		mremote_free(q);
		err->kind = MANAGER_ERR_FORBIDDEN;
		err->error = -EPERM;
		snprintf(err->message, sizeof(err->message),
			 "the policy permits this %s request only the tiers '%s', and no "
			 "configured target is in them",
			 policy_class_name(d->class),
			 policy_tiers_format(d->permitted_tiers, tiers, sizeof(tiers)));
		return -EPERM;
	}
	t = router_plan_current(rt->router, q->plan);
	if (t->tier == 0) {
		if (*a) {
			snprintf((*a)->target, sizeof((*a)->target), "%s", t->name);
			(*a)->tier = 0;
		}
		mremote_free(q);
		return 0;
	}
	if (mremote_copy(q, r, d) < 0)
		goto oom;
	q->permitted_tiers = d->permitted_tiers;
	q->sensitivity = (int) d->class;
	q->rt = rt;
	q->id = id;
	q->fn = fn;
	q->userdata = userdata;
	q->audit = TAKE_PTR(*a);
	if (q->audit)
		q->audit->request_id = id;
	pthread_mutex_lock(&rt->lock);
	q->next = rt->active;
	rt->active = q;
	rt->n_active++;
	pthread_mutex_unlock(&rt->lock);
	mremote_run(q);
	return 1;
oom:
	mremote_free(q);
	err->kind = MANAGER_ERR_INTERNAL;
	err->error = -ENOMEM;
	snprintf(err->message, sizeof(err->message), "out of memory");
	return -ENOMEM;
}

int manager_routing_cancel(struct manager_routing *rt, uint64_t id)
{
	int k = -ENOENT;

	if (!rt)
		return -ENOENT;
	pthread_mutex_lock(&rt->lock);
	for (struct mremote *q = rt->active; q; q = q->next)
		if (q->id == id) {
			pthread_mutex_lock(&q->lock);
			q->cancelled = true;
			if (q->remote)
				(void) remote_cancel(q->remote, q->remote_id);
			pthread_mutex_unlock(&q->lock);
			k = 0;
			break;
		}
	pthread_mutex_unlock(&rt->lock);
	return k;
}
