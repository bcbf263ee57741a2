/* SPDX-License-Identifier: MIT */
/*
 * remote.c: see remote.h. One detached worker thread per request, each with its own curl easy
 * handle; the target keeps the list of calls (for cancel) and a count the free waits on.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "basic/time-util.h"
#include "remote.h"

#define REMOTE_MAX_CREDENTIAL 16384
#define REMOTE_MAX_ERROR_BODY 65536
#define REMOTE_MAX_SSE_LINE (4u << 20) /* one event's data; more is a broken server */
#define REMOTE_COOLDOWN_MIN_NS 1000000000ull
#define REMOTE_COOLDOWN_MAX_NS 60000000000ull


const char *remote_error_name(enum remote_error e)
{
	static const char *const names[] = {
		[REMOTE_ERR_NONE] = "none",         [REMOTE_ERR_DOWN] = "down",
		[REMOTE_ERR_TIMEOUT] = "timeout",   [REMOTE_ERR_SERVER] = "server_error",
		[REMOTE_ERR_CONTEXT] = "context_length_exceeded",
		[REMOTE_ERR_REJECTED] = "rejected", [REMOTE_ERR_CANCELLED] = "cancelled",
		[REMOTE_ERR_INTERNAL] = "internal_error", [REMOTE_ERR_BLOCKED] = "blocked",
		[REMOTE_ERR_REFUSED] = "refused",
	};
	return (unsigned) e < ELEMENTSOF(names) ? names[e] : "internal_error";
}

/* ---- backoff ---- */

uint64_t remote_backoff_ns(uint32_t attempt, uint64_t base_ns, uint64_t max_ns, double jitter01)
{
	uint64_t d = base_ns;

	if (max_ns < base_ns)
		max_ns = base_ns;
	for (uint32_t i = 1; i < attempt && d < max_ns; i++)
		d = d > max_ns / 2 ? max_ns : d * 2;
	d = MIN(d, max_ns);
	if (!(jitter01 >= 0.0))
		jitter01 = 0.0;
	if (jitter01 > 1.0)
		jitter01 = 1.0;
	/* Jitter spreads the retries of many requests that failed together. */
	return d - (uint64_t) ((double) (d / 2) * (1.0 - jitter01));
}

/* ---- credentials ---- */

int remote_credential_read(const char *path, char **ret, struct errmsg *e)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	struct stat st;
	size_t n = 0, a = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return errmsg_set(e, -errno, "credential file %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0)
		return errmsg_set(e, -errno, "credential file %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return errmsg_set(e, -EINVAL, "credential file %s is not a regular file", path);
	if (st.st_mode & S_IRWXO)
		return errmsg_set(e, -EPERM,
				  "credential file %s is accessible to other users (mode %04o); "
				  "chmod o-rwx it (0600 or 0400)",
				  path, (unsigned) (st.st_mode & 07777));
	if (st.st_size > REMOTE_MAX_CREDENTIAL)
		return errmsg_set(e, -EFBIG, "credential file %s is larger than %d bytes", path,
				  REMOTE_MAX_CREDENTIAL);
	buf = malloc(REMOTE_MAX_CREDENTIAL + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t k = read(fd, buf + n, REMOTE_MAX_CREDENTIAL + 1 - n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return errmsg_set(e, -errno, "credential file %s: %s", path,
					  strerror(errno));
		}
		if (k == 0)
			break;
		n += (size_t) k;
		if (n > REMOTE_MAX_CREDENTIAL)
			return errmsg_set(e, -EFBIG, "credential file %s is larger than %d bytes",
					  path, REMOTE_MAX_CREDENTIAL);
	}
	while (a < n && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\n' || buf[a] == '\r'))
		a++;
	while (n > a && (buf[n - 1] == ' ' || buf[n - 1] == '\t' || buf[n - 1] == '\n' ||
			 buf[n - 1] == '\r'))
		n--;
	if (n == a)
		return errmsg_set(e, -EINVAL, "credential file %s is empty", path);
	for (size_t i = a; i < n; i++)
		if ((unsigned char) buf[i] < 0x20 || buf[i] == 0x7f) {
			explicit_bzero(buf, REMOTE_MAX_CREDENTIAL + 1);
			/* A header cannot carry it, and a newline would inject one. */
			return errmsg_set(e, -EINVAL,
					  "credential file %s holds control characters or "
					  "several lines",
					  path);
		}
	char *key = strndup(buf + a, n - a);
	explicit_bzero(buf, REMOTE_MAX_CREDENTIAL + 1);
	if (!key)
		return -ENOMEM;
	*ret = key;
	return 0;
}

/* ---- SSE ---- */

struct remote_sse {
	remote_sse_fn fn;
	void *userdata;
	char *line;       /* the current line so far */
	size_t n_line, cap_line;
	char *data;       /* the current event's data */
	size_t n_data, cap_data;
	bool has_data;
	bool skip_lf;     /* the last byte was '\r': a following '\n' belongs to it */
};

int remote_sse_new(remote_sse_fn fn, void *userdata, struct remote_sse **ret)
{
	struct remote_sse *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->fn = fn;
	s->userdata = userdata;
	*ret = s;
	return 0;
}

struct remote_sse *remote_sse_free(struct remote_sse *s)
{
	if (s) {
		free(s->line);
		free(s->data);
		free(s);
	}
	return NULL;
}

static int grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	if (need > REMOTE_MAX_SSE_LINE)
		return -E2BIG;
	size_t c = MAX(*cap * 2, need + 64);
	char *q = realloc(*p, c);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static int sse_dispatch(struct remote_sse *s)
{
	int r = 0;

	if (s->has_data) {
		/* The data buffer always has room for a NUL (grow() asked for it). */
		s->data[s->n_data] = 0;
		r = s->fn(s->data, s->n_data, s->userdata);
	}
	s->n_data = 0;
	s->has_data = false;
	return r;
}

static int sse_line(struct remote_sse *s)
{
	const char *l = s->line;
	size_t n = s->n_line;
	int r;

	if (n == 0)
		return sse_dispatch(s);
	if (l[0] == ':')
		return 0; /* a comment (keep-alive) */
	if (n >= 5 && memcmp(l, "data", 4) == 0 && (n == 4 || l[4] == ':')) {
		size_t off = 5;
		if (off < n && l[off] == ' ')
			off++;
		r = grow(&s->data, &s->cap_data, s->n_data + (n - off) + 2);
		if (r < 0)
			return r;
		if (s->has_data)
			s->data[s->n_data++] = '\n';
		memcpy(s->data + s->n_data, l + off, n - off);
		s->n_data += n - off;
		s->has_data = true;
	} else if (n == 4 && memcmp(l, "data", 4) == 0) {
		r = grow(&s->data, &s->cap_data, s->n_data + 2);
		if (r < 0)
			return r;
		if (s->has_data)
			s->data[s->n_data++] = '\n';
		s->has_data = true;
	}
	/* event:, id:, retry: and unknown fields change nothing for us. */
	return 0;
}

int remote_sse_feed(struct remote_sse *s, const char *buf, size_t len)
{
	int r;

	for (size_t i = 0; i < len; i++) {
		char c = buf[i];

		if (s->skip_lf) {
			s->skip_lf = false;
			if (c == '\n')
				continue;
		}
		if (c == '\r' || c == '\n') {
			s->skip_lf = c == '\r';
			r = sse_line(s);
			s->n_line = 0;
			if (r < 0)
				return r;
			continue;
		}
		r = grow(&s->line, &s->cap_line, s->n_line + 1);
		if (r < 0)
			return r;
		s->line[s->n_line++] = c;
	}
	return 0;
}

int remote_sse_finish(struct remote_sse *s)
{
	int r = 0;

	if (s->n_line > 0) {
		r = sse_line(s);
		s->n_line = 0;
	}
	if (r >= 0)
		r = sse_dispatch(s);
	return r;
}

/* ---- kept-alive connections ----
 *
 * Each target has a libcurl connection cache shared by its calls (a share object), so a call
 * reuses the connection an earlier one left open instead of paying a TCP (and TLS) handshake:
 * on loopback that handshake and the new connection's first round trips were most of what
 * routing through mollyd added to a T1's answer time. The cache is replaced whenever the
 * target's pins change: the egress filter judges connect(), so a connection opened to an
 * address that is no longer pinned (and may no longer be allowed) must not carry another
 * request. A call holds a reference on the cache it started with; the last one frees it.
 */
struct conn_cache {
	atomic_uint refs;
	CURLSH *share;
	pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
};

static void conn_cache_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *userptr)
{
	struct conn_cache *c = userptr;

	(void) h;
	(void) access;
	pthread_mutex_lock(&c->locks[data]);
}

static void conn_cache_unlock(CURL *h, curl_lock_data data, void *userptr)
{
	struct conn_cache *c = userptr;

	(void) h;
	pthread_mutex_unlock(&c->locks[data]);
}

/* NULL when libcurl cannot share connections or memory is short: calls then connect anew. */
static struct conn_cache *conn_cache_new(void)
{
#if LIBCURL_VERSION_NUM >= 0x073900 /* 7.57: CURL_LOCK_DATA_CONNECT */
	struct conn_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->share = curl_share_init();
	if (!c->share) {
		free(c);
		return NULL;
	}
	atomic_init(&c->refs, 1);
	for (size_t i = 0; i < ELEMENTSOF(c->locks); i++)
		pthread_mutex_init(&c->locks[i], NULL);
	curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, conn_cache_lock);
	curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, conn_cache_unlock);
	curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
	if (curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK) {
		curl_share_cleanup(c->share);
		free(c);
		return NULL;
	}
	return c;
#else
	return NULL;
#endif
}

/* Drops a reference; the last closes the cached connections. Every easy handle that used the
 * cache must be cleaned up before. */
static struct conn_cache *conn_cache_unref(struct conn_cache *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
		curl_share_cleanup(c->share);
		for (size_t i = 0; i < ELEMENTSOF(c->locks); i++)
			pthread_mutex_destroy(&c->locks[i]);
		free(c);
	}
	return NULL;
}

/* ---- targets and calls ---- */

struct remote_call;

struct remote_target {
	char *name;
	/* Another transport (remote_target_new_transport): everything else below is unused. */
	const struct remote_transport *tr;
	void *tr_ctx;
	char **resolve;     /* CURLOPT_RESOLVE pins, n_resolve; under lock */
	size_t n_resolve;
	struct conn_cache *conns; /* replaced with the pins; under lock; NULL: no reuse */
	char *url;          /* without a trailing '/' */
	char *model;
	char *auth_header;  /* "Authorization: Bearer …" or NULL; zeroed on free */
	uint64_t timeout_ns;
	uint32_t retries;
	uint64_t backoff_base_ns, backoff_max_ns;

	pthread_mutex_t lock;
	pthread_cond_t idle;
	struct remote_call *calls;
	unsigned n_running;
	uint64_t next_id;
	bool freeing;
	uint64_t down_until_ns;
	uint64_t cooldown_ns;       /* the next cool-down's length */
	unsigned failures;          /* consecutive */
	double latency_ms;          /* EWMA of the time to first byte */
	bool has_latency;
};

struct remote_call {
	struct remote_call *next;
	struct remote_target *t;
	uint64_t id;
	atomic_bool cancel;
	remote_event_fn fn;
	void *userdata;
	char *body;              /* the JSON request */
	bool chat;

	/* the worker's state for the current attempt */
	struct remote_sse *sse;
	uint64_t start_ns, last_byte_ns, first_byte_ns;
	bool timed_out;
	long status;
	char *err_body;
	size_t n_err_body;
	bool text_sent;
	bool got_done;           /* [DONE] or a finish_reason */
	char finish[32];
	uint32_t prompt_tokens, completion_tokens, chunks;
	uint32_t n_logprobs;     /* token log-probabilities seen in the stream */
	double logprob_sum;
	bool stream_error;
	char stream_message[256];
	enum remote_error stream_kind;
};

static void target_failed(struct remote_target *t)
{
	pthread_mutex_lock(&t->lock);
	t->failures++;
	if (t->cooldown_ns == 0)
		t->cooldown_ns = REMOTE_COOLDOWN_MIN_NS;
	t->down_until_ns = now_ns() + t->cooldown_ns;
	t->cooldown_ns = MIN(t->cooldown_ns * 2, REMOTE_COOLDOWN_MAX_NS);
	pthread_mutex_unlock(&t->lock);
}

static void target_succeeded(struct remote_target *t, double first_byte_ms)
{
	pthread_mutex_lock(&t->lock);
	t->failures = 0;
	t->cooldown_ns = 0;
	t->down_until_ns = 0;
	if (first_byte_ms >= 0) {
		/* α = 0.2: a handful of calls move it, one outlier does not. */
		t->latency_ms = t->has_latency ? 0.8 * t->latency_ms + 0.2 * first_byte_ms
					       : first_byte_ms;
		t->has_latency = true;
	}
	pthread_mutex_unlock(&t->lock);
}

bool remote_target_available(struct remote_target *t)
{
	bool ok;

	if (t->tr)
		return t->tr->available ? t->tr->available(t->tr_ctx) : true;
	pthread_mutex_lock(&t->lock);
	ok = !t->freeing && now_ns() >= t->down_until_ns;
	pthread_mutex_unlock(&t->lock);
	return ok;
}

double remote_target_latency_ms(struct remote_target *t)
{
	double l;

	if (t->tr)
		return t->tr->latency_ms ? t->tr->latency_ms(t->tr_ctx) : 0.0;
	pthread_mutex_lock(&t->lock);
	l = t->has_latency ? t->latency_ms : 0.0;
	pthread_mutex_unlock(&t->lock);
	return l;
}

const char *remote_target_name(const struct remote_target *t)
{
	return t->name;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	(void) curl_global_init(CURL_GLOBAL_DEFAULT);
}

int remote_credential_find(const char *name, const char *credential_file, char **ret,
			   struct errmsg *e)
{
	_cleanup_free_ char *cred_path = NULL;
	int r;

	*ret = NULL;
	if (credential_file) {
		if (credential_file[0] == '/')
			cred_path = strdup(credential_file);
		else {
			const char *dir = getenv("CREDENTIALS_DIRECTORY");
			if (!dir || !dir[0])
				return errmsg_set(e, -ENOENT,
						  "target %s: CredentialFile=%s is a credential "
						  "name, but $CREDENTIALS_DIRECTORY is not set",
						  name, credential_file);
			if (asprintf(&cred_path, "%s/%s", dir, credential_file) < 0)
				cred_path = NULL;
		}
		if (!cred_path)
			return -ENOMEM;
	} else {
		const char *dir = getenv("CREDENTIALS_DIRECTORY");
		if (dir && dir[0]) {
			if (asprintf(&cred_path, "%s/%s", dir, name) < 0)
				return -ENOMEM;
			if (access(cred_path, F_OK) < 0) {
				free(cred_path);
				cred_path = NULL;
			}
		}
	}
	if (cred_path) {
		r = remote_credential_read(cred_path, ret, e);
		if (r < 0)
			return errmsg_prefix(e, r, "target %s", name);
	}
	return 0;
}

int remote_target_new(const struct remote_target_config *cfg, struct remote_target **ret,
		      struct errmsg *e)
{
	struct remote_target *t;
	char *key = NULL;
	size_t ul;
	int r;

	assert_return(cfg && cfg->name && cfg->url && ret, -EINVAL);
	if (strncmp(cfg->url, "http://", 7) != 0 && strncmp(cfg->url, "https://", 8) != 0)
		return errmsg_set(e, -EINVAL, "target %s: URL '%s' is not http:// or https://",
				  cfg->name, cfg->url);
	pthread_once(&curl_once, curl_init_once);

	if (cfg->key) {
		for (const char *p = cfg->key; *p; p++)
			if ((unsigned char) *p < 0x20 || *p == 0x7f)
				return errmsg_set(e, -EINVAL,
						  "target %s: the key holds control characters",
						  cfg->name);
		key = strdup(cfg->key);
		if (!key)
			return -ENOMEM;
	} else {
		r = remote_credential_find(cfg->name, cfg->credential_file, &key, e);
		if (r < 0)
			return r;
	}

	t = calloc(1, sizeof(*t));
	if (!t)
		goto oom;
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->idle, NULL);
	t->next_id = 1;
	t->name = strdup(cfg->name);
	t->url = strdup(cfg->url);
	t->model = strdup(cfg->model ? cfg->model : cfg->name);
	if (!t->name || !t->url || !t->model)
		goto oom;
	ul = strlen(t->url);
	while (ul > 0 && t->url[ul - 1] == '/')
		t->url[--ul] = 0;
	/* "…/v1" given: we append "/v1/…" ourselves. */
	if (ul >= 3 && strcmp(t->url + ul - 3, "/v1") == 0)
		t->url[ul - 3] = 0;
	if (key) {
		if (asprintf(&t->auth_header, "Authorization: Bearer %s", key) < 0) {
			t->auth_header = NULL;
			goto oom;
		}
		explicit_bzero(key, strlen(key));
		free(key);
		key = NULL;
	}
	if (cfg->n_resolve > 0 &&
	    remote_target_set_resolve(t, cfg->resolve, cfg->n_resolve) < 0)
		goto oom;
	if (!t->conns) /* set_resolve() made the cache along with the pins */
		t->conns = conn_cache_new();
	t->timeout_ns = cfg->timeout_ns ? cfg->timeout_ns : 30ull * 1000000000ull;
	t->retries = cfg->retries;
	t->backoff_base_ns = cfg->backoff_base_ns ? cfg->backoff_base_ns : 100000000ull;
	t->backoff_max_ns = cfg->backoff_max_ns ? cfg->backoff_max_ns : 2000000000ull;
	*ret = t;
	return 0;
oom:
	if (key) {
		explicit_bzero(key, strlen(key));
		free(key);
	}
	remote_target_free(t);
	return -ENOMEM;
}

static void free_resolve(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

int remote_target_set_resolve(struct remote_target *t, const char *const *resolve, size_t n)
{
	char **v;

	assert_return(t, -EINVAL);
	if (t->tr)
		return -EOPNOTSUPP;
	v = calloc(MAX(n, (size_t) 1), sizeof(char *));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (!(v[i] = strdup(resolve[i]))) {
			free_resolve(v, i);
			return -ENOMEM;
		}
	struct conn_cache *fresh = conn_cache_new(), *old;

	pthread_mutex_lock(&t->lock);
	free_resolve(t->resolve, t->n_resolve);
	t->resolve = v;
	t->n_resolve = n;
	old = t->conns;
	t->conns = fresh; /* connections to the old pins are not reused */
	pthread_mutex_unlock(&t->lock);
	conn_cache_unref(old);
	return 0;
}

/* The target's connection cache with a reference taken, or NULL. */
static struct conn_cache *conns_get(struct remote_target *t)
{
	struct conn_cache *c;

	pthread_mutex_lock(&t->lock);
	c = t->conns;
	if (c)
		atomic_fetch_add(&c->refs, 1);
	pthread_mutex_unlock(&t->lock);
	return c;
}

/* Has h use the cache c (which may be NULL). */
static void use_conns(CURL *h, struct conn_cache *c)
{
	if (c)
		curl_easy_setopt(h, CURLOPT_SHARE, c->share);
}

/* The pins as a list for curl (NULL when none), copied under the lock. */
static struct curl_slist *resolve_list(struct remote_target *t, bool *ret_oom)
{
	struct curl_slist *l = NULL, *x;

	*ret_oom = false;
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n_resolve; i++) {
		x = curl_slist_append(l, t->resolve[i]);
		if (!x) {
			*ret_oom = true;
			break;
		}
		l = x;
	}
	pthread_mutex_unlock(&t->lock);
	return l;
}

bool remote_target_idle(struct remote_target *t)
{
	bool idle;

	if (t->tr)
		return true;
	pthread_mutex_lock(&t->lock);
	idle = t->n_running == 0;
	pthread_mutex_unlock(&t->lock);
	return idle;
}

int remote_target_new_transport(const char *name, const struct remote_transport *tr, void *ctx,
				struct remote_target **ret)
{
	struct remote_target *t;

	assert_return(name && tr && tr->submit && tr->cancel && ret, -EINVAL);
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->idle, NULL);
	t->name = strdup(name);
	if (!t->name) {
		remote_target_free(t);
		return -ENOMEM;
	}
	t->tr = tr;
	t->tr_ctx = ctx;
	*ret = t;
	return 0;
}

struct remote_target *remote_target_free(struct remote_target *t)
{
	if (!t)
		return NULL;
	if (t->tr && t->tr->free_ctx)
		t->tr->free_ctx(t->tr_ctx);
	pthread_mutex_lock(&t->lock);
	t->freeing = true;
	for (struct remote_call *c = t->calls; c; c = c->next)
		atomic_store(&c->cancel, true);
	while (t->n_running > 0)
		pthread_cond_wait(&t->idle, &t->lock);
	pthread_mutex_unlock(&t->lock);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->idle);
	free(t->name);
	free(t->url);
	free(t->model);
	free_resolve(t->resolve, t->n_resolve);
	conn_cache_unref(t->conns);
	if (t->auth_header) {
		explicit_bzero(t->auth_header, strlen(t->auth_header));
		free(t->auth_header);
	}
	free(t);
	return NULL;
}

/* ---- the request body ---- */

static int build_body(const struct remote_target *t, const struct remote_request *r, char **ret,
		      bool *ret_chat)
{
	json_object *o = json_object_new_object(), *a;
	int k = -ENOMEM;

	if (!o)
		return -ENOMEM;
	json_object_object_add(o, "model", json_object_new_string(t->model));
	if (r->messages) {
		a = json_object_new_array();
		if (!a)
			goto out;
		json_object_object_add(o, "messages", a);
		for (size_t i = 0; i < r->n_messages; i++) {
			json_object *m = json_object_new_object();
			if (!m)
				goto out;
			json_object_object_add(
				m, "role",
				json_object_new_string(r->messages[i].role ? r->messages[i].role
									   : "user"));
			json_object_object_add(m, "content",
					       json_object_new_string(r->messages[i].content
									      ? r->messages[i].content
									      : ""));
			json_object_array_add(a, m);
		}
	} else
		json_object_object_add(o, "prompt",
				       json_object_new_string(r->prompt ? r->prompt : ""));
	json_object_object_add(o, "stream", json_object_new_boolean(true));
	if (r->logprobs)
		/* chat: a boolean; completions: how many alternatives (the sampled one) */
		json_object_object_add(o, "logprobs", r->messages ? json_object_new_boolean(true)
								  : json_object_new_int(1));
	if (r->max_tokens > 0)
		json_object_object_add(o, "max_tokens", json_object_new_int64(r->max_tokens));
	json_object_object_add(o, "temperature", json_object_new_double(r->temperature));
	json_object_object_add(o, "top_p", json_object_new_double(r->top_p));
	if (r->has_seed)
		json_object_object_add(o, "seed", json_object_new_int64((int64_t) r->seed));
	if (r->n_stop > 0) {
		a = json_object_new_array();
		if (!a)
			goto out;
		json_object_object_add(o, "stop", a);
		for (size_t i = 0; i < r->n_stop; i++)
			json_object_array_add(a, json_object_new_string(r->stop[i]));
	}
	{
		json_object *so = json_object_new_object();
		if (!so)
			goto out;
		/* Ask for usage in the stream (vLLM, OpenAI); servers that do not know it
		 * ignore it. */
		json_object_object_add(so, "include_usage", json_object_new_boolean(true));
		json_object_object_add(o, "stream_options", so);
	}
	{
		const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
		*ret = s ? strdup(s) : NULL;
		k = *ret ? 0 : -ENOMEM;
	}
	*ret_chat = r->messages != NULL;
out:
	json_object_put(o);
	return k;
}

/* ---- the worker ---- */

static void emit_text(struct remote_call *c, const char *s, size_t n)
{
	struct remote_event ev = { .type = REMOTE_EVENT_TEXT, .id = c->id, .text = s,
				   .text_len = n };

	if (n == 0 || atomic_load(&c->cancel))
		return;
	c->text_sent = true;
	c->fn(&ev, c->userdata);
}

static enum remote_error classify_error_json(json_object *err, long status, char *msg,
					     size_t size)
{
	json_object *m = NULL, *code = NULL, *type = NULL;
	const char *cs = NULL, *ts = NULL, *ms = NULL;

	if (err && json_object_is_type(err, json_type_object)) {
		if (json_object_object_get_ex(err, "message", &m))
			ms = json_object_get_string(m);
		if (json_object_object_get_ex(err, "code", &code))
			cs = json_object_get_string(code);
		if (json_object_object_get_ex(err, "type", &type))
			ts = json_object_get_string(type);
	} else if (err && json_object_is_type(err, json_type_string))
		ms = json_object_get_string(err);
	if (ms)
		snprintf(msg, size, "%s", ms);
	if ((cs && strcmp(cs, "context_length_exceeded") == 0) ||
	    (ts && strcmp(ts, "context_length_exceeded") == 0) ||
	    (ms && (strstr(ms, "context length") || strstr(ms, "context_length") ||
		    strstr(ms, "maximum context"))))
		return REMOTE_ERR_CONTEXT;
	if (status == 429 || status >= 500)
		return REMOTE_ERR_SERVER;
	if (status >= 400)
		return REMOTE_ERR_REJECTED;
	return REMOTE_ERR_SERVER;
}

/* A chunk's "logprobs": chat's {"content": [{"logprob": x}, ...]} or completions'
 * {"token_logprobs": [x, ...]}; anything else is ignored. */
static void add_logprobs(struct remote_call *c, json_object *lp)
{
	json_object *a, *x;

	if (json_object_object_get_ex(lp, "content", &a) &&
	    json_object_is_type(a, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(a); i++)
			if (json_object_object_get_ex(json_object_array_get_idx(a, i), "logprob",
						      &x) &&
			    (json_object_is_type(x, json_type_double) ||
			     json_object_is_type(x, json_type_int))) {
				c->logprob_sum += json_object_get_double(x);
				c->n_logprobs++;
			}
	} else if (json_object_object_get_ex(lp, "token_logprobs", &a) &&
		   json_object_is_type(a, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(a); i++) {
			x = json_object_array_get_idx(a, i);
			if (json_object_is_type(x, json_type_double) ||
			    json_object_is_type(x, json_type_int)) {
				c->logprob_sum += json_object_get_double(x);
				c->n_logprobs++;
			}
		}
	}
}

static int on_sse_event(const char *data, size_t len, void *userdata)
{
	struct remote_call *c = userdata;
	json_object *o, *choices, *ch, *x, *usage, *err;
	struct json_tokener *tok;

	if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
		c->got_done = true;
		return 0;
	}
	tok = json_tokener_new();
	if (!tok)
		return -ENOMEM;
	o = json_tokener_parse_ex(tok, data, (int) MIN(len, (size_t) INT32_MAX));
	json_tokener_free(tok);
	if (!o || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		c->stream_error = true;
		c->stream_kind = REMOTE_ERR_SERVER;
		snprintf(c->stream_message, sizeof(c->stream_message),
			 "the target sent an event that is not a JSON object");
		return -EBADMSG;
	}
	if (json_object_object_get_ex(o, "error", &err)) {
		c->stream_error = true;
		c->stream_kind = classify_error_json(err, 500, c->stream_message,
						     sizeof(c->stream_message));
		if (!c->stream_message[0])
			snprintf(c->stream_message, sizeof(c->stream_message),
				 "the target reported an error in its stream");
		json_object_put(o);
		return -EBADMSG;
	}
	if (json_object_object_get_ex(o, "usage", &usage) &&
	    json_object_is_type(usage, json_type_object)) {
		if (json_object_object_get_ex(usage, "prompt_tokens", &x))
			c->prompt_tokens = (uint32_t) MAX(0, json_object_get_int(x));
		if (json_object_object_get_ex(usage, "completion_tokens", &x))
			c->completion_tokens = (uint32_t) MAX(0, json_object_get_int(x));
	}
	if (json_object_object_get_ex(o, "choices", &choices) &&
	    json_object_is_type(choices, json_type_array) &&
	    json_object_array_length(choices) > 0) {
		const char *s = NULL;
		ch = json_object_array_get_idx(choices, 0);
		if (c->chat) {
			json_object *delta;
			if (json_object_object_get_ex(ch, "delta", &delta) &&
			    json_object_object_get_ex(delta, "content", &x) &&
			    json_object_is_type(x, json_type_string))
				s = json_object_get_string(x);
		} else if (json_object_object_get_ex(ch, "text", &x) &&
			   json_object_is_type(x, json_type_string))
			s = json_object_get_string(x);
		if (json_object_object_get_ex(ch, "logprobs", &x) &&
		    json_object_is_type(x, json_type_object))
			add_logprobs(c, x);
		if (s && s[0]) {
			c->chunks++;
			emit_text(c, s, strlen(s));
		}
		if (json_object_object_get_ex(ch, "finish_reason", &x) &&
		    json_object_is_type(x, json_type_string)) {
			snprintf(c->finish, sizeof(c->finish), "%s", json_object_get_string(x));
			c->got_done = true;
		}
	}
	json_object_put(o);
	return 0;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct remote_call *c = userdata;
	size_t n = size * nmemb;

	c->last_byte_ns = now_ns();
	if (!c->first_byte_ns)
		c->first_byte_ns = c->last_byte_ns;
	if (atomic_load(&c->cancel))
		return 0;
	if (c->status != 200) {
		size_t keep = MIN(n, REMOTE_MAX_ERROR_BODY - c->n_err_body);
		char *b = realloc(c->err_body, c->n_err_body + keep + 1);
		if (!b)
			return 0;
		c->err_body = b;
		memcpy(b + c->n_err_body, ptr, keep);
		c->n_err_body += keep;
		b[c->n_err_body] = 0;
		return n;
	}
	if (remote_sse_feed(c->sse, ptr, n) < 0)
		return 0;
	return n;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *userdata)
{
	struct remote_call *c = userdata;
	size_t n = size * nitems;
	int st;

	c->last_byte_ns = now_ns();
	/* The last status line wins (100 Continue, redirects are not followed). */
	if (n > 9 && memcmp(buf, "HTTP/", 5) == 0) {
		const char *sp = memchr(buf, ' ', n);
		if (sp && sscanf(sp + 1, "%3d", &st) == 1)
			c->status = st;
	}
	return n;
}

static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct remote_call *c = userdata;

	if (atomic_load(&c->cancel))
		return 1;
	if (now_ns() - c->last_byte_ns > c->t->timeout_ns) {
		c->timed_out = true;
		return 1;
	}
	return 0;
}

static CURL *make_handle(struct remote_target *t, const char *url, struct curl_slist *headers,
			 void *userdata)
{
	CURL *h = curl_easy_init();

	if (!h)
		return NULL;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long) MAX(1, t->timeout_ns / 1000000));
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, userdata);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, userdata);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, userdata);
	/* Only http(s), never a redirect elsewhere: a target is where the policy let it go. */
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	return h;
}

/* One attempt. Returns NONE when the answer ended well. */
static enum remote_error attempt(struct remote_call *c, char *msg, size_t size, long *ret_status)
{
	struct remote_target *t = c->t;
	struct curl_slist *headers = NULL, *hh, *pins;
	_cleanup_free_ char *url = NULL;
	struct conn_cache *conns;
	enum remote_error kind = REMOTE_ERR_NONE;
	long os_errno = 0;
	bool oom;
	CURLcode cc;
	CURL *h;

	c->status = 0;
	c->timed_out = false;
	c->first_byte_ns = 0;
	c->start_ns = c->last_byte_ns = now_ns();
	free(c->err_body);
	c->err_body = NULL;
	c->n_err_body = 0;
	c->got_done = false;
	c->stream_error = false;
	c->stream_message[0] = 0;
	c->sse = remote_sse_free(c->sse);
	if (remote_sse_new(on_sse_event, c, &c->sse) < 0)
		return REMOTE_ERR_INTERNAL;
	if (asprintf(&url, "%s/v1/%s", t->url, c->chat ? "chat/completions" : "completions") < 0) {
		url = NULL;
		return REMOTE_ERR_INTERNAL;
	}
	hh = curl_slist_append(headers, "Content-Type: application/json");
	if (hh)
		headers = hh;
	hh = curl_slist_append(headers, "Accept: text/event-stream");
	if (hh)
		headers = hh;
	if (t->auth_header) {
		hh = curl_slist_append(headers, t->auth_header);
		if (!hh) {
			curl_slist_free_all(headers);
			return REMOTE_ERR_INTERNAL;
		}
		headers = hh;
	}
	h = make_handle(t, url, headers, c);
	if (!h) {
		curl_slist_free_all(headers);
		return REMOTE_ERR_INTERNAL;
	}
	pins = resolve_list(t, &oom);
	if (oom) {
		curl_easy_cleanup(h);
		curl_slist_free_all(headers);
		curl_slist_free_all(pins);
		return REMOTE_ERR_INTERNAL;
	}
	if (pins)
		curl_easy_setopt(h, CURLOPT_RESOLVE, pins);
	conns = conns_get(t);
	use_conns(h, conns);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
	cc = curl_easy_perform(h);
	*ret_status = c->status;
	if (cc == CURLE_COULDNT_CONNECT)
		(void) curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
	if (cc == CURLE_OK && c->status == 200 && remote_sse_finish(c->sse) < 0 && !c->stream_error)
		c->stream_error = true;
	if (atomic_load(&c->cancel))
		kind = REMOTE_ERR_CANCELLED;
	else if (c->timed_out || cc == CURLE_OPERATION_TIMEDOUT) {
		kind = REMOTE_ERR_TIMEOUT;
		snprintf(msg, size, "no answer from %s for %.1f s", t->url,
			 (double) t->timeout_ns / 1e9);
	} else if (c->stream_error) {
		kind = c->stream_kind ? c->stream_kind : REMOTE_ERR_SERVER;
		snprintf(msg, size, "%s", c->stream_message[0] ? c->stream_message
							       : "the target's stream was broken");
	} else if (cc == CURLE_COULDNT_CONNECT && os_errno == EPERM) {
		/* The cgroup's connect filter said no: this address is not on the tier's
		 * allow-list. Never retried (it would say no again). */
		kind = REMOTE_ERR_BLOCKED;
		snprintf(msg, size, "%s: the connection was blocked by the egress filter (EPERM)",
			 t->url);
	} else if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
		   (cc == CURLE_GOT_NOTHING && !c->text_sent) ||
		   (cc == CURLE_RECV_ERROR && c->status == 0) ||
		   (cc == CURLE_SEND_ERROR && c->status == 0)) {
		kind = REMOTE_ERR_DOWN;
		snprintf(msg, size, "%s: %s", t->url, curl_easy_strerror(cc));
	} else if (c->status >= 400) {
		/* An error status, whether or not its body arrived whole. */
		json_object *o = c->err_body ? json_tokener_parse(c->err_body) : NULL, *err = NULL;
		msg[0] = 0;
		if (o && json_object_is_type(o, json_type_object))
			json_object_object_get_ex(o, "error", &err);
		kind = classify_error_json(err, c->status, msg, size);
		if (!msg[0])
			snprintf(msg, size, "%s answered HTTP %ld", t->url, c->status);
		json_object_put(o);
	} else if (cc != CURLE_OK && c->status == 200) {
		kind = REMOTE_ERR_SERVER;
		snprintf(msg, size, "%s: the answer broke off: %s", t->url, curl_easy_strerror(cc));
	} else if (cc != CURLE_OK) {
		kind = REMOTE_ERR_DOWN;
		snprintf(msg, size, "%s: %s", t->url, curl_easy_strerror(cc));
	} else if (c->status != 200) {
		kind = REMOTE_ERR_SERVER;
		snprintf(msg, size, "%s answered HTTP %ld", t->url, c->status);
	} else if (!c->got_done) {
		kind = REMOTE_ERR_SERVER;
		snprintf(msg, size, "%s: the stream ended without a finish", t->url);
	}
	curl_easy_cleanup(h);
	conn_cache_unref(conns);
	curl_slist_free_all(headers);
	curl_slist_free_all(pins);
	return kind;
}

static bool retryable(enum remote_error k, long status)
{
	return k == REMOTE_ERR_DOWN || k == REMOTE_ERR_TIMEOUT ||
	       (k == REMOTE_ERR_SERVER && (status == 429 || status >= 500 || status == 0));
}

static void call_finish(struct remote_call *c)
{
	struct remote_target *t = c->t;

	pthread_mutex_lock(&t->lock);
	for (struct remote_call **p = &t->calls; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	pthread_mutex_unlock(&t->lock);
}

static void call_free(struct remote_call *c)
{
	remote_sse_free(c->sse);
	free(c->err_body);
	if (c->body) {
		explicit_bzero(c->body, strlen(c->body));
		free(c->body);
	}
	free(c);
}

static void sleep_cancellable(struct remote_call *c, uint64_t ns)
{
	uint64_t end = now_ns() + ns;

	while (!atomic_load(&c->cancel) && now_ns() < end) {
		uint64_t left = end - now_ns();
		struct timespec ts = { .tv_sec = 0,
				       .tv_nsec = (long) MIN(left, (uint64_t) 20000000ull) };
		nanosleep(&ts, NULL);
	}
}

static void *worker(void *userdata)
{
	struct remote_call *c = userdata;
	struct remote_target *t = c->t;
	struct remote_event ev = { .id = c->id };
	enum remote_error kind = REMOTE_ERR_NONE;
	char msg[384] = "";
	long status = 0;

	for (uint32_t a = 0;; a++) {
		msg[0] = 0;
		kind = attempt(c, msg, sizeof(msg), &status);
		if (kind == REMOTE_ERR_NONE || kind == REMOTE_ERR_CANCELLED || c->text_sent ||
		    !retryable(kind, status) || a >= t->retries)
			break;
		uint64_t j = 0;
		(void) getrandom(&j, sizeof(j), GRND_NONBLOCK);
		sleep_cancellable(c, remote_backoff_ns(a + 1, t->backoff_base_ns, t->backoff_max_ns,
						       (double) (j >> 11) / 9007199254740992.0));
		if (atomic_load(&c->cancel)) {
			kind = REMOTE_ERR_CANCELLED;
			break;
		}
	}

	if (kind == REMOTE_ERR_NONE)
		target_succeeded(t, c->first_byte_ns ? (double) (c->first_byte_ns - c->start_ns) /
							       1e6
						     : -1.0);
	else if (kind == REMOTE_ERR_DOWN || kind == REMOTE_ERR_TIMEOUT ||
		 kind == REMOTE_ERR_SERVER)
		target_failed(t);

	call_finish(c);
	if (kind == REMOTE_ERR_NONE || kind == REMOTE_ERR_CANCELLED) {
		ev.type = REMOTE_EVENT_DONE;
		ev.finish_reason = kind == REMOTE_ERR_CANCELLED ? "cancelled"
				   : c->finish[0]               ? c->finish
								: "stop";
		ev.prompt_tokens = c->prompt_tokens;
		ev.completion_tokens = c->completion_tokens ? c->completion_tokens : c->chunks;
		ev.n_logprobs = c->n_logprobs;
		ev.logprob_sum = c->logprob_sum;
	} else {
		ev.type = REMOTE_EVENT_ERROR;
		ev.error = kind;
		ev.http_status = (int) status;
		ev.message = msg;
		ev.text_sent = c->text_sent;
	}
	c->fn(&ev, c->userdata);
	call_free(c);

	pthread_mutex_lock(&t->lock);
	if (--t->n_running == 0)
		pthread_cond_broadcast(&t->idle);
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

int remote_submit(struct remote_target *t, const struct remote_request *r, remote_event_fn fn,
		  void *userdata, uint64_t *ret_id)
{
	struct remote_call *c;
	pthread_attr_t attr;
	pthread_t th;
	int k;

	assert_return(t && r && fn && ret_id, -EINVAL);
	assert_return(!!r->prompt != !!r->messages, -EINVAL);
	if (t->tr)
		return t->tr->submit(t->tr_ctx, r, fn, userdata, ret_id);
	if (!remote_target_available(t))
		return -EHOSTDOWN;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->t = t;
	c->fn = fn;
	c->userdata = userdata;
	k = build_body(t, r, &c->body, &c->chat);
	if (k < 0) {
		call_free(c);
		return k;
	}
	pthread_mutex_lock(&t->lock);
	if (t->freeing) {
		pthread_mutex_unlock(&t->lock);
		call_free(c);
		return -ESHUTDOWN;
	}
	c->id = t->next_id++;
	c->next = t->calls;
	t->calls = c;
	t->n_running++;
	*ret_id = c->id;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	k = -pthread_create(&th, &attr, worker, c);
	pthread_attr_destroy(&attr);
	if (k < 0) {
		t->calls = c->next;
		t->n_running--;
		pthread_mutex_unlock(&t->lock);
		call_free(c);
		return k;
	}
	pthread_mutex_unlock(&t->lock);
	return 0;
}

int remote_cancel(struct remote_target *t, uint64_t id)
{
	int r = -ENOENT;

	assert_return(t, -EINVAL);
	if (t->tr)
		return t->tr->cancel(t->tr_ctx, id);
	pthread_mutex_lock(&t->lock);
	for (struct remote_call *c = t->calls; c; c = c->next)
		if (c->id == id) {
			atomic_store(&c->cancel, true);
			r = 0;
			break;
		}
	pthread_mutex_unlock(&t->lock);
	return r;
}

/* ---- health ---- */

struct health {
	struct remote_target *t;
	uint64_t last_byte_ns;
	size_t n;
};

static size_t health_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct health *hs = userdata;

	hs->last_byte_ns = now_ns();
	hs->n += size * nmemb;
	return hs->n > REMOTE_MAX_ERROR_BODY * 16 ? 0 : size * nmemb;
}

int remote_health_check(struct remote_target *t, struct errmsg *e)
{
	_cleanup_free_ char *url = NULL;
	struct curl_slist *headers = NULL;
	struct health hs = { .t = t };
	long status = 0;
	CURLcode cc;
	CURL *h;

	assert_return(t, -EINVAL);
	if (t->tr)
		return t->tr->health_check ? t->tr->health_check(t->tr_ctx, e)
					   : errmsg_set(e, -EOPNOTSUPP,
							"target %s: no health checks here", t->name);
	if (asprintf(&url, "%s/v1/models", t->url) < 0)
		return -ENOMEM;
	if (t->auth_header) {
		headers = curl_slist_append(NULL, t->auth_header);
		if (!headers)
			return -ENOMEM;
	}
	h = curl_easy_init();
	if (!h) {
		curl_slist_free_all(headers);
		return -ENOMEM;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long) MAX(1, t->timeout_ns / 1000000));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, health_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &hs);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	{
		bool oom;
		struct curl_slist *pins = resolve_list(t, &oom);
		/* through the calls' cache: the check also keeps a connection warm for them */
		struct conn_cache *conns = conns_get(t);

		if (pins)
			curl_easy_setopt(h, CURLOPT_RESOLVE, pins);
		use_conns(h, conns);
		cc = oom ? CURLE_OUT_OF_MEMORY : curl_easy_perform(h);
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
		curl_easy_cleanup(h);
		conn_cache_unref(conns);
		curl_slist_free_all(pins);
	}
	curl_slist_free_all(headers);
	if (cc != CURLE_OK) {
		target_failed(t);
		return errmsg_set(e, cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EHOSTDOWN,
				  "target %s (%s): %s", t->name, t->url, curl_easy_strerror(cc));
	}
	if (status != 200) {
		target_failed(t);
		return errmsg_set(e, -EIO, "target %s: GET %s answered HTTP %ld", t->name, url,
				  status);
	}
	target_succeeded(t, -1.0);
	return 0;
}
