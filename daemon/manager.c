/* SPDX-License-Identifier: MIT */
/*
 * manager.c: see manager.h.
 *
 * Locking: m->lock protects the request list, the adapter registry, the counters and the
 * config pointer. It is never held while calling into the scheduler, because the scheduler
 * delivers events (which take m->lock) from its own thread and may hold its own lock meanwhile:
 * holding ours while waiting for its lock could deadlock.
 *
 * A request (struct mreq) has two references: the submitter's (dropped when manager_submit
 * returns) and the scheduler's (dropped after the final event). Its event-side state (text held
 * back for stop strings, tokens for logprobs) is touched only on the scheduler's thread.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "basic/sha256.h"
#include "basic/time-util.h"
#include "core/config.h"
#include "core/lmdb-util.h"
#include "core/log.h"
#include "egress/client.h"
#include "engine/chat-tools.h"
#include "engine/model.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "engine/quant.h"
#include "engine/vocab.h"
#include "lora/adapter.h"
#include "core/log.h"
#include "manager-audit.h"
#include "manager-judge.h"
#include "manager-remote.h"
#include "manager.h"
#include "registry/registry.h"
#include "loader/blob-load.h"
#include "sched/sched.h"

#define DEFAULT_MAX_CONTEXT 8192

static inline void closedirp_(DIR **d)
{
	if (*d)
		(void) closedir(*d);
}

/* A loaded adapter name: usable in requests. Its versions live in the registry; the ones the
 * scheduler holds are keyed by content ("sha256:HEX"), never by name, so replacing what a
 * name means can never serve the old weights. */
#define HOT_KEY_SIZE (7 + SHA256_HEX_SIZE) /* "sha256:" + hex + NUL */
struct hot_ref {
	char key[HOT_KEY_SIZE];
	uint32_t version;
	uint64_t uses, flushed; /* requests on this version; of them, added to its record */
	uint64_t last_use_ns;   /* CLOCK_REALTIME */
};
struct adapter_entry {
	struct adapter_entry *next;
	char *name;
	uint32_t version;      /* the name's active version (follows import and rollback) */
	char key[HOT_KEY_SIZE]; /* the scheduler's key for that version */
	char hash[SHA256_HEX_SIZE];
	char *path;            /* the version's blob */
	char *base;            /* base description */
	char **domains;
	size_t n_domains;
	char **exemplars;      /* for the router's classifier */
	size_t n_exemplars;
	uint32_t rank;
	uint64_t bytes;        /* the blob's size */
	uint64_t requests;     /* the registry's count at load, plus this run's */
	uint32_t running;
	/* every version registered with the scheduler for this name: the active one and those
	 * asked for as NAME@N or NAME@sha256:... (released at unload), with their uses */
	struct hot_ref *refs;
	size_t n_refs;
};

struct mtoken {
	int32_t id;
	char *text;
	size_t text_len;
	float logprob;
	uint64_t start, end;   /* absolute byte offsets in the request's output */
};

struct mreq {
	struct mreq *prev, *next;
	atomic_uint n_ref;
	struct manager *manager;
	uint64_t id;
	uint64_t sched_id;      /* valid once submitted (under m->lock) */
	bool submitted;         /* sched_id is valid */
	bool cancel_requested;  /* manager_cancel() before sched_id was known */
	bool client_cancel;     /* manager_cancel() was called */
	manager_event_fn fn;
	void *userdata;
	char *model;            /* resolved model id */
	char **adapters;        /* names whose running count we hold */
	size_t n_adapters;
	uint32_t n_prompt;
	bool logprobs;
	bool leg;               /* an attempt of a routed request: not counted on its own */
	bool routed;            /* the router chose T0 for it: DONE names the target */
	struct audit_record *audit; /* owned; written when the request ends (NULL: no store) */

	/* scheduler thread only */
	char **stop;
	size_t *stop_len;
	size_t n_stop;
	size_t max_stop_len;
	char *pending;          /* text not yet released */
	size_t n_pending, cap_pending;
	uint64_t released;      /* bytes released so far (absolute offset of pending[0]) */
	struct mtoken *tokens;  /* logprobs: tokens not yet released */
	size_t n_tokens, cap_tokens;
	uint32_t n_completion;
	bool stopped;           /* a stop string matched: ignore further tokens */
};

struct manager {
	pthread_mutex_t lock;
	/* The /dev/molly front's state for Status (manager_set_device_status), under lock. */
	char device_status[256];
	struct config *config;        /* owned reference */
	struct model *model;          /* owned */
	struct sched *sched;          /* owned */
	char *model_name;             /* owned */
	enum chat_family family;
	bool has_family;
	struct errmsg chat_error;     /* why chat is unavailable, when !has_family */
	uint32_t max_context;
	uint32_t max_sequences, queue_length;
	atomic_bool stopping;
	bool started;

	struct mreq *requests;        /* in flight */
	uint64_t next_id;
	struct adapter_entry *adapters; /* loaded names */
	/* The adapter library (registry/registry.h): every name and version; owned. */
	struct registry *registry;
	char *registry_tmp;           /* owned: a private registry's directory, removed at free */

	uint64_t requests_total, requests_rejected, requests_finished, requests_failed;
	atomic_uint_fast64_t adapters_bad; /* blobs that failed their load (sched on_adapter_bad) */
	uint64_t prompt_tokens, completion_tokens;

	/* The sovereignty policy: immutable once built; a reload swaps it under policy_lock. */
	pthread_rwlock_t policy_lock;
	struct policy *policy;        /* owned */
	struct manager_audit *audit;  /* owned; NULL without a state directory */
	struct manager_judge *judge;  /* owned: [Policy] Judge= (asks m->sched, T0 only) */
	/* Routing to [Target] endpoints (T1..T3): NULL when none is configured. Built at start;
	 * [Target] and [Router] changes need a restart. */
	struct manager_routing *routing;
	/* Egress enforcement (egress/client.h), borrowed from main: NULL with Enforce=no or
	 * without remote targets (remote calls then run in this process, as audited). */
	struct egress_client *egress;
	/* TEST ONLY (MOLLY_EGRESS_TEST=1 MOLLY_EGRESS_TEST_SKIP_CORE_DETECTORS=1): the core's
	 * policy sees an empty text, so a personal payload is "public" for the router; the
	 * egress worker's own check must catch it. */
	bool test_skip_core_detectors;
};

/* ---- errors ---- */

static const struct {
	const char *name;
	int http;
	const char *dbus;
} err_table[] = {
	[MANAGER_ERR_NONE] = { "ok", 200, "org.molly.Error.Internal" },
	[MANAGER_ERR_INVALID_REQUEST] = { "invalid_request_error", 400,
					  "org.molly.Error.InvalidRequest" },
	[MANAGER_ERR_MODEL_NOT_FOUND] = { "model_not_found", 404, "org.molly.Error.ModelNotFound" },
	[MANAGER_ERR_CONTEXT_LENGTH] = { "context_length_exceeded", 400,
					 "org.molly.Error.ContextLengthExceeded" },
	[MANAGER_ERR_FORBIDDEN] = { "forbidden", 403, "org.freedesktop.DBus.Error.AccessDenied" },
	[MANAGER_ERR_QUEUE_FULL] = { "queue_full", 429, "org.molly.Error.QueueFull" },
	[MANAGER_ERR_UNAVAILABLE] = { "service_unavailable", 503, "org.molly.Error.Unavailable" },
	[MANAGER_ERR_CANCELLED] = { "cancelled", 503, "org.molly.Error.Cancelled" },
	[MANAGER_ERR_INTERNAL] = { "internal_error", 500, "org.molly.Error.Internal" },
};

const char *manager_err_name(enum manager_err k)
{
	return (unsigned) k < ELEMENTSOF(err_table) ? err_table[k].name : "internal_error";
}

int manager_err_http_status(enum manager_err k)
{
	return (unsigned) k < ELEMENTSOF(err_table) ? err_table[k].http : 500;
}

const char *manager_err_dbus_name(enum manager_err k)
{
	return (unsigned) k < ELEMENTSOF(err_table) ? err_table[k].dbus
						    : "org.molly.Error.Internal";
}

_printf_(4, 5) static int set_err(struct manager_error *err, enum manager_err kind, int r,
				  const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return r;
	err->kind = kind;
	err->error = r;
	va_start(ap, fmt);
	(void) vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return r;
}

/* ---- small helpers ---- */

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
static bool utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *) s;
	size_t i = 0;

	while (i < n) {
		unsigned c = p[i];
		size_t len;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			len = 2;
			cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			len = 3;
			cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			len = 4;
			cp = c & 0x07;
		} else
			return false;
		if (n - i < len)
			return false;
		for (size_t k = 1; k < len; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (p[i + k] & 0x3f);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
		    (len == 4 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

static void strv_free(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}


/* ---- loaded adapters (m->lock held) ---- */

static struct adapter_entry *adapter_find(struct manager *m, const char *name)
{
	for (struct adapter_entry *a = m->adapters; a; a = a->next)
		if (strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

/* Like adapter_find(), for the name part of a spec ("NAME", "NAME@2", "NAME@sha256:..."). */
static struct adapter_entry *adapter_find_spec(struct manager *m, const char *spec)
{
	size_t n = registry_spec_name_len(spec);

	for (struct adapter_entry *a = m->adapters; a; a = a->next)
		if (strlen(a->name) == n && memcmp(a->name, spec, n) == 0)
			return a;
	return NULL;
}

static struct hot_ref *entry_ref(const struct adapter_entry *a, const char *key)
{
	for (size_t i = 0; i < a->n_refs; i++)
		if (strcmp(a->refs[i].key, key) == 0)
			return &a->refs[i];
	return NULL;
}

static bool entry_has_key(const struct adapter_entry *a, const char *key)
{
	return entry_ref(a, key) != NULL;
}

static int entry_add_key(struct adapter_entry *a, const char *key, uint32_t version)
{
	struct hot_ref *k;

	if (entry_has_key(a, key))
		return 0;
	k = realloc(a->refs, (a->n_refs + 1) * sizeof(*k));
	if (!k)
		return -ENOMEM;
	a->refs = k;
	k = &a->refs[a->n_refs++];
	*k = (struct hot_ref){ .version = version };
	snprintf(k->key, sizeof(k->key), "%s", key);
	return 0;
}

/* Whether a loaded name other than except holds key. */
static bool key_held(struct manager *m, const char *key, const struct adapter_entry *except)
{
	for (struct adapter_entry *a = m->adapters; a; a = a->next)
		if (a != except && entry_has_key(a, key))
			return true;
	return false;
}

static void entry_clear_meta(struct adapter_entry *a)
{
	free(a->path);
	free(a->base);
	strv_free(a->domains, a->n_domains);
	strv_free(a->exemplars, a->n_exemplars);
	a->path = a->base = NULL;
	a->domains = a->exemplars = NULL;
	a->n_domains = a->n_exemplars = 0;
}

static struct adapter_entry *adapter_entry_free(struct adapter_entry *a)
{
	if (!a)
		return NULL;
	entry_clear_meta(a);
	free(a->name);
	free(a->refs);
	free(a);
	return NULL;
}

static int strv_copy(char *const *src, size_t n, char ***ret, size_t *ret_n)
{
	*ret = NULL;
	*ret_n = 0;
	if (n == 0)
		return 0;
	*ret = calloc(n, sizeof(char *));
	if (!*ret)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++, (*ret_n)++)
		if (!((*ret)[i] = strdup(src[i])))
			return -ENOMEM;
	return 0;
}

static void hot_key(const char *hash_hex, char key[HOT_KEY_SIZE])
{
	snprintf(key, HOT_KEY_SIZE, "sha256:%s", hash_hex);
}

/* Points an entry at version v (its active version): metadata, key; the key is added to the
 * entry's keys. -ENOMEM leaves the entry without metadata but consistent. */
static int entry_set_version(struct manager *m, struct adapter_entry *a,
			     const struct registry_version *v)
{
	char path[4200];
	int r;

	entry_clear_meta(a);
	a->version = v->version;
	snprintf(a->hash, sizeof(a->hash), "%s", v->hash_hex);
	hot_key(v->hash_hex, a->key);
	a->rank = v->rank;
	a->bytes = v->bytes;
	registry_blob_path(m->registry, v->hash, path, sizeof(path));
	a->path = strdup(path);
	a->base = strdup(v->base ? v->base : "");
	if (!a->path || !a->base)
		return -ENOMEM;
	if ((r = strv_copy(v->domains, v->n_domains, &a->domains, &a->n_domains)) < 0 ||
	    (r = strv_copy(v->exemplars, v->n_exemplars, &a->exemplars, &a->n_exemplars)) < 0)
		return r;
	return entry_add_key(a, a->key, a->version);
}

/* A name usable as a model id and a file name: [A-Za-z0-9._-], not starting with '.',
 * at most 64 bytes, without ':' (which separates base and adapter) or '@' (a version). */
static bool adapter_name_valid(const char *name)
{
	return registry_name_valid(name);
}

/* The suffixes an adapter file in Directory= may have; a directory has none. */
static const char *const adapter_suffixes[] = { ".molly", ".gguf" };

/* The adapter's name for a directory entry: the entry without a known suffix. NULL if the
 * entry is not an adapter (hidden, temporary, unknown suffix on a regular file). st gets the
 * entry's (for a PEFT directory: its weights file's) status. */
static char *adapter_name_of_entry(const char *dir, const char *entry, struct stat *st)
{
	_cleanup_free_ char *p = NULL;

	if (entry[0] == '.')
		return NULL;
	if (asprintf(&p, "%s/%s", dir, entry) < 0)
		return NULL;
	if (stat(p, st) < 0)
		return NULL;
	if (S_ISDIR(st->st_mode)) {
		_cleanup_free_ char *cfg = NULL, *w = NULL;
		if (asprintf(&cfg, "%s/adapter_config.json", p) < 0 || access(cfg, F_OK) < 0)
			return NULL;
		if (asprintf(&w, "%s/adapter_model.safetensors", p) < 0 || stat(w, st) < 0)
			return NULL;
		return adapter_name_valid(entry) ? strdup(entry) : NULL;
	}
	if (!S_ISREG(st->st_mode))
		return NULL;
	for (size_t i = 0; i < ELEMENTSOF(adapter_suffixes); i++) {
		size_t n = strlen(entry), k = strlen(adapter_suffixes[i]);
		if (n > k && strcmp(entry + n - k, adapter_suffixes[i]) == 0) {
			char *name = strndup(entry, n - k);
			if (name && !adapter_name_valid(name)) {
				free(name);
				return NULL;
			}
			return name;
		}
	}
	return NULL;
}

/* ---- lifetime ---- */

static uint32_t pick_max_context(const struct config *c, const struct model *mdl)
{
	uint32_t n = mdl->hp.n_ctx_train ? mdl->hp.n_ctx_train : 2048;

	if (c->context_length)
		return c->context_length;
	return MIN(n, DEFAULT_MAX_CONTEXT);
}

static int routing_new(struct manager *m, const struct config *c, struct errmsg *e);
static int registry_setup(struct manager *m, const struct config *c, struct errmsg *e);
static void registry_teardown(struct manager *m);
static int hot_register(struct manager *m, const struct registry_version *v,
			struct manager_error *err);
static int hot_release(struct manager *m, const char *key, const struct adapter_entry *except);

int manager_new(struct config *config, struct manager **ret, struct errmsg *e)
{
	return manager_new_with_egress(config, NULL, ret, e);
}

static bool test_switch(const char *name)
{
	const char *t = getenv("MOLLY_EGRESS_TEST"), *v = getenv(name);

	return t && strcmp(t, "1") == 0 && v && strcmp(v, "1") == 0;
}

/* TEST ONLY (MOLLY_TEST=1 MOLLY_TEST_HOLD_AFTER_TOKENS=N): the scheduler stops computing after
 * N generated tokens (sched_test_hold), so the tests of queueing, cancellation and shutdown
 * see requests that are certainly still waiting or streaming, on a fast machine as on a slow
 * one. Without MOLLY_TEST=1 the variable is ignored, with a warning. mollyd's SIGUSR1 and
 * SIGUSR2 lift and set the hold later (daemon/main.c). */
static int apply_test_hold(struct sched *s, struct errmsg *e)
{
	const char *t = getenv("MOLLY_TEST"), *v = getenv("MOLLY_TEST_HOLD_AFTER_TOKENS");
	unsigned long long n;
	char *end;

	if (!v)
		return 0;
	if (!t || strcmp(t, "1") != 0) {
		log_warning("MOLLY_TEST_HOLD_AFTER_TOKENS is set without MOLLY_TEST=1: ignored");
		return 0;
	}
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-')
		return errmsg_set(e, -EINVAL, "MOLLY_TEST_HOLD_AFTER_TOKENS=%s is not a token count", v);
	log_warning("TEST ONLY: the scheduler holds after %llu generated tokens "
		    "(MOLLY_TEST_HOLD_AFTER_TOKENS); requests will not finish", n);
	sched_test_hold(s, n);
	return 0;
}

void manager_test_hold(struct manager *m, uint64_t after_tokens)
{
	sched_test_hold(m->sched, after_tokens);
}

/* A blob's bad mark, kept in the registry's notes ("bad/HEX") so that it outlives the run:
 * the reason, NUL-padded (notes are read back at their exact size). */
#define BAD_NOTE_BYTES 256

static void bad_note_key(const char *hex, char key[8 + SHA256_HEX_SIZE])
{
	snprintf(key, 8 + SHA256_HEX_SIZE, "bad/%s", hex);
}

/* The loader found a blob corrupt, truncated or unreadable (loader thread): its content key
 * is marked bad in the scheduler (every request on it fails at once with the reason) until
 * it is unloaded, and in the registry, where the next load of the version checks the blob
 * again before it is used (hot_register); `molly adapters fsck` says more. */
static void adapter_blob_bad(const char *key, int error, const char *message, void *userdata)
{
	struct manager *m = userdata;
	char note_key[8 + SHA256_HEX_SIZE], note[BAD_NOTE_BYTES] = { 0 };

	atomic_fetch_add(&m->adapters_bad, 1);
	log_error("adapter %s marked bad: %s (run: molly adapters fsck)", key, message);
	if (strncmp(key, "sha256:", 7) == 0 && m->registry) {
		bad_note_key(key + 7, note_key);
		snprintf(note, sizeof(note), "%.255s", message);
		(void) registry_note_put(m->registry, note_key, note, sizeof(note));
	}
	(void) error;
}

static void *bad_check_alloc(size_t bytes, void *userdata)
{
	void **p = userdata;

	return posix_memalign(p, 4096, bytes) == 0 ? *p : NULL;
}

/* A version marked bad in an earlier run: its blob is read and checked now (a job thread,
 * not the scheduler's). Still bad: the scheduler refuses it at once, with both reasons.
 * Good again (repaired): the mark goes. */
static void bad_mark_recheck(struct manager *m, const struct registry_version *v, const char *key,
			     const char *path)
{
	_cleanup_(blob_loader_freep) struct blob_loader *l = NULL;
	char note_key[8 + SHA256_HEX_SIZE], note[BAD_NOTE_BYTES];
	struct blob_loader_params lp = { .path = BLOB_PATH_PREAD };
	struct blob_load_result res;
	struct errmsg e = { { 0 } };
	void *buf = NULL;
	int r;

	bad_note_key(v->hash_hex, note_key);
	if (registry_note_get(m->registry, note_key, note, sizeof(note)) < 0 || !note[0])
		return;
	note[sizeof(note) - 1] = 0;
	r = blob_loader_new(&lp, &l);
	if (r >= 0)
		r = blob_load(l, path, true, v->hash, bad_check_alloc, &buf, &res, &e);
	free(buf);
	if (r >= 0) {
		char empty[BAD_NOTE_BYTES] = { 0 };

		(void) registry_note_put(m->registry, note_key, empty, sizeof(empty));
		log_info("%s@%u: its blob checks out again; the bad mark (%s) is cleared", v->name,
			 v->version, note);
		return;
	}
	log_error("%s@%u is still bad: %s (marked bad earlier: %s)", v->name, v->version, e.text,
		  note);
	{
		char msg[600];

		/* short first: the request's error message is cut at 256 bytes */
		snprintf(msg, sizeof(msg), "marked bad earlier, still: %.500s", e.text);
		(void) sched_mark_adapter_bad(m->sched, key, r, msg);
	}
}

int manager_new_with_egress(struct config *config, struct egress_client *egress,
			    struct manager **ret, struct errmsg *e)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	struct sched_params sp = { 0 };
	int r;

	assert_return(config && ret, -EINVAL);
	if (!config->model_path)
		return errmsg_set(e, -EINVAL,
				  "no model configured and the default model (molly-mini.gguf) is "
				  "not installed: set [Model] Path= in %s",
				  config->n_files ? config->files[0] : CONFIG_DEFAULT_PATH);

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->lock, NULL);
	m->config = config_ref(config);
	m->next_id = 1;
	m->egress = egress;
	m->test_skip_core_detectors = test_switch("MOLLY_EGRESS_TEST_SKIP_CORE_DETECTORS");
	pthread_rwlock_init(&m->policy_lock, NULL);

	r = policy_new(config, &m->policy, e);
	if (r < 0)
		return r;
	if (config->state_directory) {
		r = manager_audit_new(config->state_directory, config->audit_retention_days,
				      config->audit_map_size, &m->audit, e);
		if (r < 0)
			return r;
	}

	r = model_load(config->model_path, &m->model, e);
	if (r < 0)
		return errmsg_prefix(e, r, "%s", config->model_path);
	m->model_name = config_model_name(config);
	if (!m->model_name)
		return -ENOMEM;

	r = chat_family_choose(config->chat_template, m->model->chat_template, &m->family,
			       &m->chat_error);
	m->has_family = r >= 0;
	if (r < 0 && config->chat_template)
		/* A named family that does not exist is a configuration error, not a model quirk.
		 */
		return errmsg_set(e, r, "[Model] ChatTemplate=%s: %s", config->chat_template,
				  m->chat_error.text);
	if (r < 0)
		errmsg_prefix(&m->chat_error, r,
			      "set [Model] ChatTemplate= to one of chatml, llama2, llama3, "
			      "mistral, phi3, "
			      "gemma instead of the model's template");

	m->max_context = pick_max_context(config, m->model);
	m->max_sequences = config->max_sequences;
	m->queue_length = config->queue_length;
	sp.max_sequences = config->max_sequences;
	sp.queue_length = config->queue_length;
	sp.max_context = m->max_context;
	sp.step_tokens = config->step_tokens;
	sp.pool_bytes = config->pool_bytes;
	sp.n_threads = config->threads;
	/* adapter tiers: HotBytes= defaults to half the pool, whatever its size turns out */
	sp.hot_bytes = config->hot_bytes ? config->hot_bytes : SCHED_HOT_BYTES_HALF;
	sp.warm_bytes = config->warm_bytes;
	sp.eviction = (enum evict_policy) config->eviction;
	sp.hot_type = (enum lora_hot_type) config->hot_type;
	sp.loader.path = (enum blob_path) config->load_path;
	sp.loader.queue_depth = config->load_queue_depth;
	sp.on_adapter_bad = adapter_blob_bad;
	sp.userdata = m;
	r = sched_new(m->model, &sp, &m->sched, e);
	if (r < 0)
		return errmsg_prefix(e, r, "scheduler");
	r = apply_test_hold(m->sched, e);
	if (r < 0)
		return r;
	r = manager_judge_new(m->sched, m->model->vocab, m->has_family, m->family, m->max_context,
			      &m->judge);
	if (r < 0)
		return errmsg_set(e, r, "the policy judge: %s", strerror(-r));
	manager_judge_configure(m->judge, config);

	r = registry_setup(m, config, e);
	if (r < 0)
		return errmsg_prefix(e, r, "the adapter registry");
	for (size_t i = 0; i < config->n_adapter_load; i++) {
		struct manager_error err = { 0 };
		r = manager_adapter_load(m, config->adapter_load[i], NULL, &err);
		if (r < 0)
			return errmsg_set(e, r, "[Adapters] Load=%s: %s", config->adapter_load[i],
					  err.message);
	}

	/* The router: remote targets, and the adapters with domains as T0 candidates. */
	r = routing_new(m, config, e);
	if (r < 0)
		return r;

	*ret = TAKE_PTR(m);
	return 0;
}

struct manager *manager_free(struct manager *m)
{
	if (!m)
		return NULL;
	atomic_store(&m->stopping, true);
	/* First: a routed request that fails over to T0 needs the scheduler. */
	m->routing = manager_routing_free(m->routing);
	/* Cancels what is left; the events (ERROR "cancelled") still reach the fronts. */
	m->sched = sched_free(m->sched);
	/* No question is in flight once the fronts are gone; its calls own their state. */
	m->judge = manager_judge_free(m->judge);
	/* After the scheduler: its last events wrote their records into the queue. */
	m->audit = manager_audit_free(m->audit);
	m->policy = policy_free(m->policy);
	pthread_rwlock_destroy(&m->policy_lock);
	registry_teardown(m);
	while (m->adapters) {
		struct adapter_entry *a = m->adapters;
		m->adapters = a->next;
		adapter_entry_free(a);
	}
	model_free(m->model);
	free(m->model_name);
	config_unref(m->config);
	pthread_mutex_destroy(&m->lock);
	free(m);
	return NULL;
}

int manager_start(struct manager *m)
{
	int r;

	assert_return(m, -EINVAL);
	if (m->started)
		return 0;
	r = sched_start(m->sched);
	if (r >= 0)
		m->started = true;
	if (r >= 0)
		r = manager_routing_start(m->routing);
	return r;
}

void manager_drain(struct manager *m, uint64_t timeout_ns)
{
	atomic_store(&m->stopping, true);
	sched_drain(m->sched, timeout_ns);
}

bool manager_is_stopping(struct manager *m)
{
	return atomic_load(&m->stopping);
}

struct config *manager_get_config(struct manager *m)
{
	struct config *c;

	pthread_mutex_lock(&m->lock);
	c = config_ref(m->config);
	pthread_mutex_unlock(&m->lock);
	return c;
}

int manager_chat_family(struct manager *m, enum chat_family *ret)
{
	if (!m->has_family)
		return -EOPNOTSUPP;
	*ret = m->family;
	return 0;
}

const char *manager_model_name(struct manager *m)
{
	return m->model_name;
}

uint32_t manager_context_length(struct manager *m)
{
	return m->max_context;
}

static bool strv_contains(char *const *v, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i], s) == 0)
			return true;
	return false;
}

static bool streq_null(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int manager_reload(struct manager *m, struct config *c, struct errmsg *e)
{
	_cleanup_(config_unrefp) struct config *old = NULL;
	char restart[256] = "";
	char failed[2048] = "";
	int ret = 0;

	assert_return(m && c, -EINVAL);

	/* The new policy first: a configuration whose rules do not build changes nothing. */
	{
		struct policy *np = NULL, *op;
		int k = policy_new(c, &np, e);
		if (k < 0)
			return k;
		pthread_rwlock_wrlock(&m->policy_lock);
		op = m->policy;
		m->policy = np;
		pthread_rwlock_unlock(&m->policy_lock);
		policy_free(op);
		manager_audit_set_retention(m->audit, c->audit_retention_days);
		manager_judge_configure(m->judge, c);
	}

#define CHANGED(cond, key)                                                                         \
	do {                                                                                       \
		if (cond)                                                                          \
			snprintf(restart + strlen(restart), sizeof(restart) - strlen(restart),     \
				 "%s%s", restart[0] ? ", " : "", key);                             \
	} while (0)
	pthread_mutex_lock(&m->lock);
	old = m->config;
	CHANGED(!streq_null(old->model_path, c->model_path), "[Model] Path=");
	CHANGED(!streq_null(old->model_name, c->model_name), "[Model] Name=");
	CHANGED(old->threads != c->threads, "[Model] Threads=");
	CHANGED(!streq_null(old->chat_template, c->chat_template), "[Model] ChatTemplate=");
	CHANGED(old->pool_bytes != c->pool_bytes || old->max_sequences != c->max_sequences ||
			old->queue_length != c->queue_length ||
			old->context_length != c->context_length ||
			old->step_tokens != c->step_tokens,
		"[Engine]");
	CHANGED(old->bus != c->bus, "[DBus] Bus=");
	CHANGED(!streq_null(old->user, c->user), "[Daemon] User=");
	CHANGED(old->warm_bytes != c->warm_bytes || old->hot_bytes != c->hot_bytes ||
			old->eviction != c->eviction || old->hot_type != c->hot_type ||
			old->load_path != c->load_path || old->load_queue_depth != c->load_queue_depth,
		"[Adapters] WarmBytes=, HotBytes=, Eviction=, HotType=, LoadPath=, LoadQueueDepth=");
	CHANGED(old->registry_map_bytes != c->registry_map_bytes ||
			!streq_null(old->state_directory, c->state_directory),
		"[Adapters] RegistryMapBytes=, [Paths] StateDirectory=");
	registry_set_keep_versions(m->registry, c->keep_versions);
	/* Everything else (members, adapters, admin group, HTTP limits, timeouts) applies now. */
	m->config = config_ref(c);
	pthread_mutex_unlock(&m->lock);
#undef CHANGED

	/* Adapters: load the newly listed, unload the no longer listed (if idle). */
	for (size_t i = 0; i < c->n_adapter_load; i++) {
		struct manager_error err = { 0 };
		int r;

		if (strv_contains(old->adapter_load, old->n_adapter_load, c->adapter_load[i]))
			continue;
		r = manager_adapter_load(m, c->adapter_load[i], NULL, &err);
		if (r < 0 && r != -EEXIST) {
			ret = ret ?: r;
			snprintf(failed + strlen(failed), sizeof(failed) - strlen(failed),
				 "%sload %.200s: %.200s", failed[0] ? "; " : "", c->adapter_load[i],
				 err.message);
		}
	}
	for (size_t i = 0; i < old->n_adapter_load; i++) {
		struct manager_error err = { 0 };
		int r;

		if (strv_contains(c->adapter_load, c->n_adapter_load, old->adapter_load[i]))
			continue;
		r = manager_adapter_unload(m, old->adapter_load[i], &err);
		if (r < 0 && r != -ENOENT) {
			ret = ret ?: r;
			snprintf(failed + strlen(failed), sizeof(failed) - strlen(failed),
				 "%sunload %.200s: %.200s", failed[0] ? "; " : "", old->adapter_load[i],
				 err.message);
		}
	}

	if (ret < 0)
		return errmsg_set(e, ret, "%s%s%s%s", failed,
				  restart[0] ? "; changes that need a restart: " : "", restart, "");
	if (restart[0]) {
		errmsg_set(e, 1, "changes that need a restart were not applied: %s", restart);
		return 1;
	}
	return 0;
}

/* ---- scopes ---- */

bool manager_caller_may_use(struct manager *m, const struct manager_caller *caller,
			    const char *model)
{
	const struct config_member *mem;
	bool ok;

	char plain[256];

	if (!caller || !caller->member)
		return true;
	/* Scopes name adapters, not versions: "tale@2" is within a scope that allows "tale". */
	if (model && strchr(model, '@') && strlen(model) < sizeof(plain)) {
		snprintf(plain, sizeof(plain), "%s", model);
		*strchr(plain, '@') = 0;
		model = plain;
	}
	pthread_mutex_lock(&m->lock);
	mem = config_find_member(m->config, caller->member);
	/* A member that a reload removed has no scopes left. */
	ok = mem && config_member_may_use(mem, m->model_name,
					  model && model[0] ? model : m->model_name);
	pthread_mutex_unlock(&m->lock);
	return ok;
}

/* ---- requests ---- */

static void mreq_free(struct mreq *q)
{
	strv_free(q->stop, q->n_stop);
	free(q->stop_len);
	free(q->pending);
	for (size_t i = 0; i < q->n_tokens; i++)
		free(q->tokens[i].text);
	free(q->tokens);
	free(q->model);
	strv_free(q->adapters, q->n_adapters);
	free(q->audit);
	free(q);
}

static void mreq_unref(struct mreq *q)
{
	if (q && atomic_fetch_sub(&q->n_ref, 1) == 1)
		mreq_free(q);
}

/* m->lock held */
static void mreq_unlink(struct manager *m, struct mreq *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else if (m->requests == q)
		m->requests = q->next;
	if (q->next)
		q->next->prev = q->prev;
	q->prev = q->next = NULL;
}

/* m->lock held: the adapters' running counts go down when a request ends. */
static void mreq_release_adapters(struct manager *m, struct mreq *q)
{
	for (size_t i = 0; i < q->n_adapters; i++) {
		struct adapter_entry *a = adapter_find(m, q->adapters[i]);
		if (a && a->running > 0)
			a->running--;
	}
}

static int pending_append(struct mreq *q, const char *s, size_t n)
{
	if (q->n_pending + n + 1 > q->cap_pending) {
		size_t cap = MAX(q->cap_pending * 2, q->n_pending + n + 64);
		char *p = realloc(q->pending, cap);
		if (!p)
			return -ENOMEM;
		q->pending = p;
		q->cap_pending = cap;
	}
	memcpy(q->pending + q->n_pending, s, n);
	q->n_pending += n;
	q->pending[q->n_pending] = 0;
	return 0;
}

/* Releases the first n bytes of pending as one TEXT event, with the tokens that end in them
 * (or every held token when all_tokens). */
static void release(struct mreq *q, size_t n, bool all_tokens)
{
	struct manager_event ev = { .type = MANAGER_EVENT_TEXT, .id = q->id };
	_cleanup_free_ struct manager_token *toks = NULL;
	uint64_t cut = q->released + n;
	size_t n_out = 0;

	while (n_out < q->n_tokens && (all_tokens || q->tokens[n_out].end <= cut))
		n_out++;
	if (n > 0) {
		if (q->logprobs && n_out > 0) {
			toks = calloc(n_out, sizeof(*toks));
			/* Without memory for the list the text still goes out. */
			for (size_t i = 0; toks && i < n_out; i++)
				toks[i] = (struct manager_token){ .id = q->tokens[i].id,
								  .text = q->tokens[i].text,
								  .text_len = q->tokens[i].text_len,
								  .logprob = q->tokens[i].logprob };
		}
		ev.text = q->pending;
		ev.text_len = n;
		ev.tokens = toks;
		ev.n_tokens = toks ? n_out : 0;
		q->fn(&ev, q->userdata);
	}
	/* Tokens without text of their own (a trailing control token) go with no chunk. */
	for (size_t i = 0; i < n_out; i++)
		free(q->tokens[i].text);
	if (n_out > 0 && q->tokens) {
		memmove(q->tokens, q->tokens + n_out, (q->n_tokens - n_out) * sizeof(*q->tokens));
		q->n_tokens -= n_out;
	}
	if (n > 0) {
		memmove(q->pending, q->pending + n, q->n_pending - n + 1);
		q->n_pending -= n;
		q->released += n;
	}
}

/* How many trailing bytes of pending could be the start of a stop string. */
static size_t stop_holdback(const struct mreq *q)
{
	size_t best = 0;

	for (size_t i = 0; i < q->n_stop; i++) {
		size_t k = MIN(q->stop_len[i] - 1, q->n_pending);
		for (; k > best; k--)
			if (memcmp(q->pending + q->n_pending - k, q->stop[i], k) == 0) {
				best = k;
				break;
			}
	}
	return best;
}

/* The earliest stop-string match in pending, or -1. */
static ssize_t stop_find(const struct mreq *q)
{
	ssize_t best = -1;

	for (size_t i = 0; i < q->n_stop; i++) {
		const char *p = memmem(q->pending, q->n_pending, q->stop[i], q->stop_len[i]);
		if (p && (best < 0 || p - q->pending < best))
			best = p - q->pending;
	}
	return best;
}

static void deliver_final(struct mreq *q, const struct manager_event *ev)
{
	struct manager *m = q->manager;

	pthread_mutex_lock(&m->lock);
	mreq_unlink(m, q);
	mreq_release_adapters(m, q);
	if (q->leg)
		; /* counted when the routed request ends */
	else if (ev->type == MANAGER_EVENT_DONE) {
		m->requests_finished++;
		m->prompt_tokens += ev->prompt_tokens;
		m->completion_tokens += ev->completion_tokens;
	} else
		m->requests_failed++;
	pthread_mutex_unlock(&m->lock);

	if (q->audit) {
		struct audit_record *a = q->audit;
		a->time_ns = 0; /* the end */
		a->prompt_tokens = ev->prompt_tokens;
		a->completion_tokens = ev->completion_tokens;
		if (ev->type == MANAGER_EVENT_DONE)
			snprintf(a->finish, sizeof(a->finish), "%s",
				 ev->finish_reason ? ev->finish_reason : "");
		else
			snprintf(a->error, sizeof(a->error), "%s",
				 manager_err_name(ev->error ? ev->error->kind
							    : MANAGER_ERR_INTERNAL));
		manager_audit_submit(m->audit, a);
	}

	if (q->routed && ev->type == MANAGER_EVENT_DONE) {
		char target[300];
		struct manager_event e2 = *ev;

		if (strcmp(q->model, m->model_name) == 0)
			snprintf(target, sizeof(target), "local:%s", m->model_name);
		else
			snprintf(target, sizeof(target), "local:%s:%s", m->model_name, q->model);
		e2.target = target;
		q->fn(&e2, q->userdata);
	} else
		q->fn(ev, q->userdata);
	mreq_unref(q);
}

static void on_sched_event(const struct sched_event *sev, void *userdata)
{
	struct mreq *q = userdata;
	struct manager *m = q->manager;

	switch (sev->type) {
	case SCHED_EVENT_TOKEN: {
		ssize_t at;

		if (q->stopped)
			return;
		q->n_completion++;
		if (q->logprobs) {
			if (q->n_tokens == q->cap_tokens) {
				size_t cap = MAX(16, q->cap_tokens * 2);
				struct mtoken *t = realloc(q->tokens, cap * sizeof(*t));
				if (!t)
					goto oom;
				q->tokens = t;
				q->cap_tokens = cap;
			}
			struct mtoken *t = &q->tokens[q->n_tokens];
			t->text = strndup(sev->text ? sev->text : "", sev->text_len);
			if (!t->text)
				goto oom;
			t->id = sev->token;
			t->text_len = sev->text_len;
			t->logprob = sev->logprob;
			t->start = q->released + q->n_pending;
			t->end = t->start + sev->text_len;
			q->n_tokens++;
		}
		if (sev->text_len > 0 && pending_append(q, sev->text, sev->text_len) < 0)
			goto oom;

		if (q->n_stop == 0) {
			release(q, q->n_pending, false);
			return;
		}
		at = stop_find(q);
		if (at >= 0) {
			/* Tokens that began before the cut count as released with it. */
			for (size_t i = 0; i < q->n_tokens; i++)
				if (q->tokens[i].start < q->released + (uint64_t) at)
					q->tokens[i].end = MIN(q->tokens[i].end,
							       q->released + (uint64_t) at);
			release(q, (size_t) at, false);
			q->stopped = true;
			/* The DONE event that follows says "cancelled": we turn it into "stop". */
			(void) sched_cancel(m->sched, sev->id);
			return;
		}
		release(q, q->n_pending - stop_holdback(q), false);
		return;
	}
	case SCHED_EVENT_DONE: {
		struct manager_event ev = { .type = MANAGER_EVENT_DONE,
					    .id = q->id,
					    .model = q->model };
		struct manager_error err = { 0 };

		if (!q->stopped)
			/* No stop string matched: what was held back is plain output. */
			release(q, q->n_pending, true);
		else
			release(q, 0, true);
		ev.prompt_tokens = sev->prompt_tokens ? sev->prompt_tokens : q->n_prompt;
		ev.completion_tokens = q->stopped ? q->n_completion : sev->completion_tokens;
		if (q->stopped)
			ev.finish_reason = "stop";
		else if (sev->finish == SCHED_FINISH_CANCELLED && !q->client_cancel &&
			 atomic_load(&m->stopping)) {
			/* Cut short by shutdown, not by the client: that is an error for it. */
			set_err(&err, MANAGER_ERR_CANCELLED, -ESHUTDOWN,
				"the daemon is stopping; the request was cancelled after %u tokens",
				sev->completion_tokens);
			ev.type = MANAGER_EVENT_ERROR;
			ev.error = &err;
		} else
			ev.finish_reason = sched_finish_name(sev->finish);
		deliver_final(q, &ev);
		return;
	}
	case SCHED_EVENT_ERROR: {
		struct manager_event ev = { .type = MANAGER_EVENT_ERROR,
					    .id = q->id,
					    .model = q->model };
		struct manager_error err = { 0 };
		enum manager_err kind = MANAGER_ERR_INTERNAL;

		if (sev->error == -E2BIG)
			kind = MANAGER_ERR_CONTEXT_LENGTH;
		else if (sev->error == -ESHUTDOWN || sev->error == -ECANCELED)
			kind = MANAGER_ERR_CANCELLED;
		else if (sev->error == -ENOENT)
			kind = MANAGER_ERR_MODEL_NOT_FOUND;
		release(q, q->stopped ? 0 : q->n_pending, true);
		set_err(&err, kind, sev->error ? sev->error : -EIO, "%s",
			sev->message ? sev->message : "generation failed");
		ev.error = &err;
		ev.prompt_tokens = sev->prompt_tokens;
		ev.completion_tokens = sev->completion_tokens;
		deliver_final(q, &ev);
		return;
	}
	}
	return;

oom:
	/* Out of memory on the event path: stop the request; its DONE follows. */
	q->stopped = true;
	(void) sched_cancel(m->sched, sev->id);
}

/* One adapter spec of a request ("NAME", "NAME@N", "NAME@sha256:PREFIX") of a loaded name:
 * the scheduler key of that version into key (registered on demand), the name into name. */
static int resolve_adapter(struct manager *m, const char *spec, const char *model,
			   char key[HOT_KEY_SIZE], char name[REGISTRY_NAME_MAX + 1],
			   struct manager_error *err)
{
	_cleanup_(registry_version_done) struct registry_version v = { 0 };
	size_t nl = registry_spec_name_len(spec);
	struct adapter_entry *a;
	struct errmsg e = { { 0 } };
	int r;

	pthread_mutex_lock(&m->lock);
	a = adapter_find_spec(m, spec);
	if (a) {
		snprintf(name, REGISTRY_NAME_MAX + 1, "%s", a->name);
		snprintf(key, HOT_KEY_SIZE, "%s", a->key);
	}
	pthread_mutex_unlock(&m->lock);
	if (!a)
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, -ENOENT,
			       "The model `%s` does not exist: no adapter `%.*s` is loaded "
			       "(see `molly adapters list`)",
			       model, (int) MIN(nl, 80), spec);
	if (!spec[nl])
		return 0; /* the active version */

	r = registry_resolve(m->registry, spec, &v, &e);
	if (r == -ENOENT)
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, r, "The model `%s` does not exist: %s",
			       model, e.text);
	if (r < 0)
		return set_err(err, r == -EINVAL || r == -ENOTUNIQ ? MANAGER_ERR_INVALID_REQUEST
								   : MANAGER_ERR_INTERNAL,
			       r, "%s", e.text);
	r = hot_register(m, &v, err);
	if (r < 0)
		return r;
	hot_key(v.hash_hex, key);
	pthread_mutex_lock(&m->lock);
	a = adapter_find(m, name);
	r = a ? entry_add_key(a, key, v.version) : -ENOENT;
	pthread_mutex_unlock(&m->lock);
	if (r == -ENOENT) {
		/* unloaded meanwhile: give the version back unless someone holds it */
		(void) hot_release(m, key, NULL);
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, r,
			       "The model `%s` does not exist: adapter `%s` was unloaded", model,
			       name);
	}
	if (r < 0)
		return set_err(err, MANAGER_ERR_INTERNAL, r, "out of memory");
	return 0;
}

/* Resolves r->model and r->loras into scheduler loras (names point into keys: the content
 * keys of the versions asked for), the adapters' names (for their counters) and the model
 * id. */
static int resolve_model(struct manager *m, const struct manager_request *r,
			 const struct manager_caller *caller, struct sched_lora *loras,
			 char (*keys)[HOT_KEY_SIZE], char (*names)[REGISTRY_NAME_MAX + 1],
			 size_t *n_loras, char **ret_model, struct manager_error *err)
{
	const char *model = r->model && r->model[0] ? r->model : NULL;
	const char *adapter = NULL;
	size_t n = 0;
	int k;

	if (model && strcmp(model, m->model_name) != 0) {
		const char *colon = strchr(model, ':'), *at = strchr(model, '@');

		if (colon && at && at < colon)
			colon = NULL; /* "NAME@sha256:HEX": no base part */
		if (colon) {
			size_t bl = (size_t) (colon - model);
			/* The adapter part of "base:adapter" must be on this base. */
			if (bl != strlen(m->model_name) || memcmp(model, m->model_name, bl) != 0)
				return set_err(
					err, MANAGER_ERR_MODEL_NOT_FOUND, -ENOENT,
					"The model `%s` does not exist: the base model is `%s`",
					model, m->model_name);
			adapter = colon + 1;
		} else
			adapter = model;
		if (!adapter[0])
			return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, -ENOENT,
				       "The model `%s` does not exist.", model);
	}

	if (r->n_loras > MANAGER_MAX_LORAS)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -E2BIG,
			       "too many adapters in lora: %zu (at most %d)", r->n_loras,
			       MANAGER_MAX_LORAS);

	if (adapter) {
		k = resolve_adapter(m, adapter, model, keys[n], names[n], err);
		if (k < 0)
			return k;
		loras[n] = (struct sched_lora){ .name = keys[n], .scale = 1.0f };
		n++;
	}
	for (size_t i = 0; i < r->n_loras; i++) {
		const struct manager_lora *l = &r->loras[i];

		if (!l->name || !l->name[0] || !isfinite(l->scale) || fabsf(l->scale) > 100.0f)
			return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
				       "lora[%zu]: needs a name and a finite scale in [-100, 100]",
				       i);
		k = resolve_adapter(m, l->name, l->name, keys[n], names[n], err);
		if (k < 0)
			return k;
		for (size_t j = 0; j < n; j++)
			if (strcmp(keys[j], keys[n]) == 0)
				return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
					       "adapter `%s` is named twice in the request",
					       l->name);
		loras[n] = (struct sched_lora){ .name = keys[n], .scale = l->scale };
		n++;
	}

	/* Scopes: the model as named, and every extra adapter. */
	if (!manager_caller_may_use(m, caller, model))
		return set_err(err, MANAGER_ERR_FORBIDDEN, -EPERM,
			       "member `%s` may not use model `%s` (see its Models=)",
			       caller->member, model ? model : m->model_name);
	for (size_t i = 0; i < r->n_loras; i++)
		if (!manager_caller_may_use(m, caller, r->loras[i].name))
			return set_err(err, MANAGER_ERR_FORBIDDEN, -EPERM,
				       "member `%s` may not use adapter `%s` (see its Models=)",
				       caller->member, r->loras[i].name);

	*ret_model = strdup(adapter ? adapter : m->model_name);
	if (!*ret_model)
		return set_err(err, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
	*n_loras = n;
	return 0;
}

/* Tools, or tool calls and results in the conversation: the family's tool rendering. */
static bool uses_tools(const struct manager_request *r)
{
	if (r->tools_json)
		return true;
	for (size_t i = 0; r->messages && i < r->n_messages; i++)
		if (r->messages[i].n_tool_calls ||
		    (r->messages[i].role && strcmp(r->messages[i].role, "tool") == 0))
			return true;
	return false;
}

static int tokenize_request(struct manager *m, const struct manager_request *r, int32_t **ret,
			    size_t *ret_n, struct manager_error *err)
{
	const struct vocab *v = m->model->vocab;
	_cleanup_free_ char *text = NULL;
	_cleanup_free_ int32_t *ids = NULL;
	const char *src;
	bool special = false;
	int64_t n;
	size_t cap;

	if (r->messages) {
		struct errmsg e = { { 0 } };
		int k;

		if (!m->has_family)
			return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EOPNOTSUPP,
				       "chat is not available: %s", m->chat_error.text);
		for (size_t i = 0; i < r->n_messages; i++) {
			if (!r->messages[i].role || !r->messages[i].content)
				return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
					       "messages[%zu]: needs a role and a content", i);
			if (!utf8_valid(r->messages[i].content, strlen(r->messages[i].content)))
				return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EILSEQ,
					       "messages[%zu].content is not valid UTF-8", i);
			if (strcmp(r->messages[i].role, "system") != 0 &&
			    strcmp(r->messages[i].role, "user") != 0 &&
			    strcmp(r->messages[i].role, "assistant") != 0 &&
			    strcmp(r->messages[i].role, "tool") != 0)
				return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
					       "messages[%zu].role: '%.64s' is not one of system, "
					       "user, assistant, tool",
					       i, r->messages[i].role);
		}
		if (uses_tools(r))
			k = chat_render_tools(m->family, r->messages, r->n_messages, r->tools_json,
					      true, &text, &e);
		else
			k = chat_render(m->family, r->messages, r->n_messages, true, &text, &e);
		if (k < 0)
			return set_err(err, MANAGER_ERR_INVALID_REQUEST, k, "messages: %s", e.text);
		src = text;
		special = true; /* the template's markers are special tokens */
	} else {
		if (!utf8_valid(r->prompt, strlen(r->prompt)))
			return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EILSEQ,
				       "the prompt is not valid UTF-8");
		src = r->prompt;
	}

	/* A first guess; the tokenizer says how many it needs when that is too small. */
	cap = strlen(src) + 8;
	for (int attempt = 0; attempt < 2; attempt++) {
		free(ids);
		ids = malloc(MAX(cap, 1) * sizeof(int32_t));
		if (!ids)
			return set_err(err, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
		n = vocab_tokenize(v, src, strlen(src), vocab_add_bos(v), special, ids, cap);
		if (n < 0)
			return set_err(err, MANAGER_ERR_INVALID_REQUEST, (int) n,
				       "the prompt cannot be tokenized: %s", strerror((int) -n));
		if ((size_t) n <= cap)
			break;
		cap = (size_t) n;
	}
	if (n == 0)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       "the prompt is empty (and the model adds no BOS token)");
	*ret = TAKE_PTR(ids);
	*ret_n = (size_t) n;
	return 0;
}

void manager_request_init(struct manager_request *r)
{
	*r = (struct manager_request){ .temperature = 1.0f, .top_p = 1.0f };
}

static int validate_request(struct manager *m, const struct manager_request *r,
			    struct manager_error *err)
{
	if (!!r->prompt == !!r->messages)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       r->prompt ? "give either a prompt or messages, not both"
					 : "a prompt or messages are required");
	if (!isfinite(r->budget) || r->budget < 0)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       "budget must be a finite number >= 0, not %g", r->budget);
	if (r->messages && r->n_messages == 0)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL, "messages is empty");
	if (r->grammar && r->n_stop > 0)
		/* a stop string could cut the document short, and "stop" promises a whole one */
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       "stop strings cannot be combined with a grammar, a schema or a "
			       "required tool call (they could cut the output short)");
	if (!isfinite(r->temperature) || r->temperature < 0 || r->temperature > 100)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       "temperature must be between 0 and 100, not %g",
			       (double) r->temperature);
	if (!isfinite(r->top_p) || r->top_p <= 0 || r->top_p > 1)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       "top_p must be in (0, 1], not %g", (double) r->top_p);
	if (r->n_stop > MANAGER_MAX_STOP)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -E2BIG,
			       "too many stop strings: %zu (at most %d)", r->n_stop,
			       MANAGER_MAX_STOP);
	for (size_t i = 0; i < r->n_stop; i++) {
		size_t n = r->stop[i] ? strlen(r->stop[i]) : 0;
		if (n == 0 || n > MANAGER_MAX_STOP_BYTES || !utf8_valid(r->stop[i], n))
			return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
				       "stop[%zu]: must be 1 to %d bytes of valid UTF-8", i,
				       MANAGER_MAX_STOP_BYTES);
	}
	if (r->model && !utf8_valid(r->model, strlen(r->model)))
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EILSEQ,
			       "the model name is not valid UTF-8");
	if (r->max_tokens > m->max_context)
		return set_err(err, MANAGER_ERR_CONTEXT_LENGTH, -E2BIG,
			       "This model's maximum context length is %u tokens. However, you "
			       "requested %u tokens for the completion (max_tokens).",
			       m->max_context, r->max_tokens);
	return 0;
}

static int mreq_set_stops(struct mreq *q, const struct manager_request *r)
{
	if (r->n_stop == 0)
		return 0;
	q->stop = calloc(r->n_stop, sizeof(char *));
	q->stop_len = calloc(r->n_stop, sizeof(size_t));
	if (!q->stop || !q->stop_len)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_stop; i++) {
		q->stop[i] = strdup(r->stop[i]);
		if (!q->stop[i])
			return -ENOMEM;
		q->stop_len[i] = strlen(r->stop[i]);
		q->max_stop_len = MAX(q->max_stop_len, q->stop_len[i]);
		q->n_stop++;
	}
	return 0;
}

/* ---- policy and audit ---- */

/* The text the policy sees: the prompt, or the messages' contents joined by "\n" (everything
 * that would leave this machine). */
static int policy_text(const struct manager_request *r, char **ret, size_t *ret_len)
{
	size_t n = 0, off = 0;
	char *t;

	if (r->prompt) {
		n = strlen(r->prompt);
		t = strdup(r->prompt);
	} else {
		/* tool results are contents like any other; the arguments of earlier tool calls
		 * follow their message's content, one per line */
		for (size_t i = 0; i < r->n_messages; i++) {
			n += (r->messages[i].content ? strlen(r->messages[i].content) : 0) + 1;
			for (size_t j = 0; j < r->messages[i].n_tool_calls; j++)
				n += strlen(r->messages[i].tool_calls[j].arguments ?: "") + 1;
		}
		t = malloc(n + 1);
		for (size_t i = 0; t && i < r->n_messages; i++) {
			const char *c = r->messages[i].content ? r->messages[i].content : "";
			size_t l = strlen(c);
			memcpy(t + off, c, l);
			off += l;
			for (size_t j = 0; j < r->messages[i].n_tool_calls; j++) {
				const char *a = r->messages[i].tool_calls[j].arguments ?: "";

				t[off++] = '\n';
				memcpy(t + off, a, strlen(a));
				off += strlen(a);
			}
			if (i + 1 < r->n_messages)
				t[off++] = '\n';
		}
		if (t)
			t[off] = 0;
		n = off;
	}
	if (!t)
		return -ENOMEM;
	*ret = t;
	*ret_len = n;
	return 0;
}

/* The optional judge (manager-judge.h): only for a request the layers left below personal
 * whose special-category score is in the uncertain band; only ever stricter. */
static int judge(struct manager *m, const struct policy_caller *pc, const char *text, size_t len,
		 struct policy_decision *d, struct manager_error *err)
{
	static const struct policy_finding yes = {
		.kind = "judge", .rule = "judge", .class = POLICY_CLASS_PERSONAL,
		.score = 1.0f, .layer = POLICY_LAYER_JUDGE, /* the whole request: no span */
	};
	enum judge_verdict v;
	float score;
	int k;

	if (d->class >= POLICY_CLASS_PERSONAL || !manager_judge_wanted(m->judge, d->special_score,
								      &score))
		return 0;
	v = manager_judge_ask(m->judge, text, len);
	/* The verdict, never the text. */
	log_info("policy judge: special-category score %.2f in the band, the local model says %s%s",
		 score, judge_verdict_name(v),
		 v == JUDGE_PERSONAL ? " (class personal)"
		 : v == JUDGE_PUBLIC ? ""
				     : " (the classifier's decision stands)");
	if (v != JUDGE_PERSONAL)
		return 0;
	pthread_rwlock_rdlock(&m->policy_lock);
	k = policy_decision_add(m->policy, pc, d, &yes);
	pthread_rwlock_unlock(&m->policy_lock);
	if (k < 0) {
		policy_decision_done(d);
		return set_err(err, MANAGER_ERR_INTERNAL, k, "the policy judge: %s", strerror(-k));
	}
	return 0;
}

/* strict: an unknown declared class is an error; else it counts as none (for the audit
 * record of a request rejected for it). judge: the judge may be asked (not for a request
 * that is rejected anyway: its record needs only what the deterministic layers found). */
static int evaluate(struct manager *m, const struct manager_request *r,
		    const struct manager_caller *caller, bool strict, bool judge_it,
		    struct policy_decision *d, struct manager_error *err)
{
	_cleanup_free_ char *text = NULL;
	enum policy_class declared = POLICY_CLASS_PUBLIC;
	struct policy_caller pc = { .uid = caller ? caller->uid : (uid_t) -1,
				    .member = caller ? caller->member : NULL };
	struct policy_request pr = { .caller = &pc };
	int k;

	if (r->declared_class && policy_class_from_name(r->declared_class, &declared) < 0 &&
	    strict)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       "class: '%.64s' is not one of public, personal, secret",
			       r->declared_class);
	if (policy_text(r, &text, &pr.len) < 0)
		return set_err(err, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
	pr.text = text;
	pr.declared = declared;
	if (m->test_skip_core_detectors) {
		pr.text = "";
		pr.len = 0;
	}
	pthread_rwlock_rdlock(&m->policy_lock);
	k = policy_evaluate(m->policy, &pr, d);
	pthread_rwlock_unlock(&m->policy_lock);
	if (k < 0)
		return set_err(err, MANAGER_ERR_INTERNAL, k, "evaluating the policy: %s",
			       strerror(-k));
	return judge_it ? judge(m, &pc, pr.text, pr.len, d, err) : 0;
}

int manager_explain(struct manager *m, const struct manager_request *r,
		    const struct manager_caller *caller, struct policy_decision *ret,
		    struct manager_error *err)
{
	assert_return(m && r && ret, -EINVAL);
	if (!!r->prompt == !!r->messages)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       r->prompt ? "give either a prompt or messages, not both"
					 : "a prompt or messages are required");
	return evaluate(m, r, caller, true, true, ret, err);
}

void manager_audit_sync(struct manager *m)
{
	manager_audit_flush(m->audit);
}

/* A record with who asked and what the policy decided (d NULL: it could not be evaluated);
 * NULL without a store. Never holds a finding's text. */
static struct audit_record *audit_begin(struct manager *m, const struct manager_caller *caller,
					const struct manager_request *r,
					const struct policy_decision *d)
{
	struct audit_record *a;

	if (!m->audit)
		return NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->uid = caller && caller->uid != (uid_t) -1 ? (int64_t) caller->uid : -1;
	a->tier = -1;
	snprintf(a->front, sizeof(a->front), "%s", caller && caller->front ? caller->front : "");
	snprintf(a->member, sizeof(a->member), "%s",
		 caller && caller->member ? caller->member : "");
	snprintf(a->declared, sizeof(a->declared), "%s",
		 r->declared_class ? r->declared_class : "");
	if (d) {
		snprintf(a->class_name, sizeof(a->class_name), "%s", policy_class_name(d->class));
		a->permitted_tiers = d->permitted_tiers;
		for (size_t i = 0; i < d->n_findings; i++)
			audit_record_add_finding(a, d->findings[i].kind, 1);
	}
	/* Whether the kernel enforces where this daemon's processes may connect (egress/):
	 * false with Enforce=no, without remote targets, or when enforcement failed to start. */
	a->egress_enforced = m->egress && egress_client_mode(m->egress) == EGRESS_CLIENT_ENFORCED;
	return a;
}

/* A request that was rejected before it ran still leaves its record. */
static void audit_reject(struct manager *m, struct audit_record *a, const struct manager_error *err)
{
	if (!a)
		return;
	snprintf(a->error, sizeof(a->error), "%s", manager_err_name(err->kind));
	manager_audit_submit(m->audit, a);
	free(a);
}

static int submit_local(struct manager *m, const struct manager_request *r,
			const struct manager_caller *caller, uint64_t id, struct audit_record *arec,
			manager_event_fn fn, void *userdata, uint64_t *ret_id,
			struct manager_error *err, int k, bool leg, bool routed_here);

/* Whether the router chooses for r: only when targets beyond T0 exist and the request does
 * not name a local adapter (a named adapter runs where it is loaded: here). */
static bool routed(struct manager *m, const struct manager_request *r)
{
	/* a grammar or tools only hold here: the remote interface carries neither */
	return (!r->model || !r->model[0] || strcmp(r->model, m->model_name) == 0) &&
	       r->n_loras == 0 && !r->grammar && !uses_tools(r) &&
	       manager_routing_active(m->routing);
}

/* A request that names the base runs on the base when it runs here (no adapter chosen). */
static bool names_base(struct manager *m, const struct manager_request *r)
{
	return r->model && r->model[0] && strcmp(r->model, m->model_name) == 0;
}

int manager_explain_route(struct manager *m, const struct manager_request *r,
			  const struct manager_caller *caller, const struct policy_decision *d,
			  struct manager_route_explain *ret)
{
	assert_return(m && r && d && ret, -EINVAL);
	*ret = (struct manager_route_explain){ 0 };
	if (!routed(m, r)) {
		snprintf(ret->action, sizeof(ret->action), "none (runs on %s)",
			 r->model && r->model[0] ? r->model : m->model_name);
		return 0;
	}
	return manager_routing_explain(m->routing, r, caller, names_base(m, r), d, ret);
}

void manager_route_explain_done(struct manager_route_explain *x)
{
	if (x) {
		free(x->c);
		x->c = NULL;
		x->n = 0;
	}
}

int manager_submit(struct manager *m, const struct manager_request *r,
		   const struct manager_caller *caller, manager_event_fn fn, void *userdata,
		   uint64_t *ret_id, struct manager_error *err)
{
	struct manager_error local_err;
	struct policy_decision dec = { 0 };
	struct audit_record *arec = NULL;
	uint64_t id = 0;
	bool evaluated = false;
	int k;

	assert_return(m && r && fn && ret_id, -EINVAL);
	if (!err)
		err = &local_err;
	*err = (struct manager_error){ 0 };

	k = validate_request(m, r, err);
	/* The policy sees every request it can read, even one rejected for another reason: its
	 * audit record then still says what it held. */
	if (!!r->prompt != !!r->messages) {
		struct manager_error perr = { 0 };
		int p = evaluate(m, r, caller, true, k >= 0, &dec, k >= 0 ? err : &perr);
		if (p < 0 && k >= 0)
			k = p;
		if (p < 0)
			p = evaluate(m, r, caller, false, false, &dec, &perr);
		evaluated = p >= 0;
		arec = audit_begin(m, caller, r, p >= 0 ? &dec : NULL);
		/* With targets the router keeps to the permitted tiers; without, only T0 is. */
		if (p >= 0 && k >= 0 && !routed(m, r) && !(dec.permitted_tiers & POLICY_TIER(0))) {
			char tiers[32];
			k = set_err(err, MANAGER_ERR_FORBIDDEN, -EPERM,
				    "the policy permits this %s request only the tiers '%s'; this "
				    "daemon serves T0 (this machine) alone",
				    policy_class_name(dec.class),
				    policy_tiers_format(dec.permitted_tiers, tiers, sizeof(tiers)));
		}
	} else
		arec = audit_begin(m, caller, r, NULL);
	if (k >= 0 && atomic_load(&m->stopping))
		k = set_err(err, MANAGER_ERR_UNAVAILABLE, -ESHUTDOWN,
			    "the daemon is stopping; retry when it is back");
	if (k >= 0 && evaluated && routed(m, r)) {
		_cleanup_free_ char *adapter = NULL;

		pthread_mutex_lock(&m->lock);
		id = m->next_id++;
		pthread_mutex_unlock(&m->lock);
		k = manager_routing_submit(m->routing, id, r, caller, names_base(m, r), &dec, &arec,
					   fn, userdata, &adapter, err);
		if (k == 0 && adapter) {
			/* The router chose a local adapter for this request. */
			struct manager_request ra = *r;
			ra.model = adapter;
			policy_decision_done(&dec);
			return submit_local(m, &ra, caller, id, arec, fn, userdata, ret_id, err, 0,
					    false, true);
		}
		if (k == 0) {
			policy_decision_done(&dec);
			return submit_local(m, r, caller, id, arec, fn, userdata, ret_id, err, 0,
					    false, true);
		}
		if (k > 0) {
			/* Started on a remote target; its events come as id. */
			pthread_mutex_lock(&m->lock);
			m->requests_total++;
			pthread_mutex_unlock(&m->lock);
			policy_decision_done(&dec);
			*ret_id = id;
			return 0;
		}
	}
	policy_decision_done(&dec);
	return submit_local(m, r, caller, id, arec, fn, userdata, ret_id, err, k, false, false);
}

/* The T0 path: resolves, tokenizes and queues r on this machine's scheduler as id (0: a new
 * one). arec is taken (written when the request ends, or now when it is rejected); k < 0: the
 * request was rejected already (err is filled), only the bookkeeping is left. leg: one
 * attempt of a routed request (manager-remote.c counts the request itself). */
static int submit_local(struct manager *m, const struct manager_request *r,
			const struct manager_caller *caller, uint64_t id, struct audit_record *arec,
			manager_event_fn fn, void *userdata, uint64_t *ret_id,
			struct manager_error *err, int k, bool leg, bool routed_here)
{
	struct sched_lora loras[MANAGER_MAX_LORAS + 1];
	char keys[MANAGER_MAX_LORAS + 1][HOT_KEY_SIZE];
	char names[MANAGER_MAX_LORAS + 1][REGISTRY_NAME_MAX + 1];
	size_t n_loras = 0;
	_cleanup_free_ int32_t *ids = NULL;
	_cleanup_free_ char *model = NULL;
	size_t n_ids = 0;
	struct sched_request sr = { 0 };
	struct errmsg e = { { 0 } };
	_cleanup_(grammar_unrefp) struct grammar *grammar = NULL;
	struct mreq *q;
	uint64_t sid;
	bool cancel;

	if (k >= 0)
		k = resolve_model(m, r, caller, loras, keys, names, &n_loras, &model, err);
	if (k >= 0 && r->grammar) {
		/* compiled once per text: the fronts have usually compiled it already */
		k = grammar_parse_cached(r->grammar, strlen(r->grammar), &grammar, &e);
		if (k < 0)
			k = set_err(err, k == -ENOMEM ? MANAGER_ERR_INTERNAL : MANAGER_ERR_INVALID_REQUEST,
				    k, "grammar: %s", e.text);
		if (k >= 0) {
			/* its start must be within the matcher's bounds (a grammar can be ambiguous
			 * enough to need more parses at once than it keeps) */
			struct matcher *probe = NULL;

			k = matcher_new(grammar, NULL, &probe);
			matcher_free(probe);
			if (k < 0)
				k = set_err(err,
					    k == -ENOMEM ? MANAGER_ERR_INTERNAL
							 : MANAGER_ERR_INVALID_REQUEST,
					    k, "grammar: too ambiguous (more than %d parses at once)",
					    MATCHER_MAX_STACKS);
		}
		e = (struct errmsg){ { 0 } };
	}
	if (k >= 0)
		k = tokenize_request(m, r, &ids, &n_ids, err);
	if (k >= 0 && n_ids >= m->max_context)
		k = set_err(err, MANAGER_ERR_CONTEXT_LENGTH, -E2BIG,
			    "This model's maximum context length is %u tokens. However, your "
			    "prompt has %zu tokens, which leaves no room for a completion.",
			    m->max_context, n_ids);
	if (k >= 0 && r->max_tokens > 0 && n_ids + r->max_tokens > m->max_context)
		k = set_err(
			err, MANAGER_ERR_CONTEXT_LENGTH, -E2BIG,
			"This model's maximum context length is %u tokens. However, you "
			"requested %zu tokens (%zu in the prompt, %u for the completion). Please "
			"reduce the prompt or max_tokens.",
			m->max_context, n_ids + r->max_tokens, n_ids, r->max_tokens);
	if (k < 0) {
		pthread_mutex_lock(&m->lock);
		m->requests_rejected += !leg;
		pthread_mutex_unlock(&m->lock);
		audit_reject(m, arec, err);
		return k;
	}
	if (arec) {
		/* This machine's engine (the router chose T0, or there is nothing else). */
		if (strcmp(model, m->model_name) == 0)
			snprintf(arec->target, sizeof(arec->target), "local:%s", m->model_name);
		else
			snprintf(arec->target, sizeof(arec->target), "local:%s:%s", m->model_name,
				 model);
		arec->tier = 0;
	}

	q = calloc(1, sizeof(*q));
	if (!q) {
		set_err(err, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
		audit_reject(m, arec, err);
		return -ENOMEM;
	}
	q->audit = TAKE_PTR(arec); /* before sched_submit: the final event may come first */
	atomic_init(&q->n_ref, 2);
	q->manager = m;
	q->fn = fn;
	q->userdata = userdata;
	q->logprobs = r->logprobs;
	q->leg = leg;
	q->routed = routed_here;
	q->n_prompt = (uint32_t) n_ids;
	q->model = TAKE_PTR(model);
	if (mreq_set_stops(q, r) < 0)
		goto oom;
	if (n_loras > 0) {
		q->adapters = calloc(n_loras, sizeof(char *));
		if (!q->adapters)
			goto oom;
		for (size_t i = 0; i < n_loras; i++) {
			q->adapters[i] = strdup(names[i]);
			if (!q->adapters[i])
				goto oom;
			q->n_adapters++;
		}
	}

	sr.prompt = ids;
	sr.n_prompt = n_ids;
	sr.loras = n_loras ? loras : NULL;
	sr.n_loras = n_loras;
	sampler_params_default(&sr.sampling);
	sr.sampling.temperature = r->temperature;
	sr.sampling.top_k = 0;
	sr.sampling.top_p = r->top_p;
	sr.sampling.min_p = 0;
	sr.sampling.repeat_penalty = 1.0f;
	if (r->has_seed)
		sr.sampling.seed = r->seed;
	else if (getrandom(&sr.sampling.seed, sizeof(sr.sampling.seed), GRND_NONBLOCK) !=
		 sizeof(sr.sampling.seed))
		sr.sampling.seed = now_ns();
	sr.max_tokens = r->max_tokens;
	sr.ignore_eos = r->ignore_eos;
	sr.grammar = grammar; /* the sequence takes its own reference */
	sr.on_event = on_sched_event;
	sr.userdata = q;

	pthread_mutex_lock(&m->lock);
	q->id = id ? id : m->next_id++;
	if (q->audit)
		q->audit->request_id = q->id;
	q->next = m->requests;
	if (m->requests)
		m->requests->prev = q;
	m->requests = q;
	for (size_t i = 0; i < q->n_adapters; i++) {
		struct adapter_entry *a = adapter_find(m, q->adapters[i]);
		struct hot_ref *ref = a ? entry_ref(a, keys[i]) : NULL;
		if (a) {
			a->running++;
			a->requests++;
		}
		if (ref) {
			ref->uses++;
			ref->last_use_ns = lmdb_realtime_ns();
		}
	}
	pthread_mutex_unlock(&m->lock);

	k = sched_submit(m->sched, &sr, &sid, &e);
	if (k < 0) {
		enum manager_err kind = MANAGER_ERR_INTERNAL;

		switch (k) {
		case -EAGAIN:
			kind = MANAGER_ERR_QUEUE_FULL;
			break;
		case -E2BIG:
			kind = MANAGER_ERR_CONTEXT_LENGTH;
			break;
		case -ENOENT:
			kind = MANAGER_ERR_MODEL_NOT_FOUND;
			break;
		case -EINVAL:
			kind = MANAGER_ERR_INVALID_REQUEST;
			break;
		case -ESHUTDOWN:
			kind = MANAGER_ERR_UNAVAILABLE;
			break;
		}
		if (kind == MANAGER_ERR_QUEUE_FULL)
			set_err(err, kind, k,
				"the queue is full (%u requests waiting); retry later",
				m->queue_length);
		else
			set_err(err, kind, k, "%s", e.text[0] ? e.text : strerror(-k));
		pthread_mutex_lock(&m->lock);
		mreq_unlink(m, q);
		mreq_release_adapters(m, q);
		m->requests_rejected += !leg;
		pthread_mutex_unlock(&m->lock);
		arec = TAKE_PTR(q->audit);
		mreq_free(q);
		audit_reject(m, arec, err);
		return k;
	}

	pthread_mutex_lock(&m->lock);
	q->sched_id = sid;
	q->submitted = true;
	cancel = q->cancel_requested;
	m->requests_total += !leg;
	*ret_id = q->id;
	pthread_mutex_unlock(&m->lock);
	if (cancel)
		(void) sched_cancel(m->sched, sid);
	mreq_unref(q);
	return 0;

oom:
	arec = TAKE_PTR(q->audit);
	mreq_free(q);
	set_err(err, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
	audit_reject(m, arec, err);
	return -ENOMEM;
}

/* ---- routing (manager-remote.h): the manager's side ---- */

static int hook_local_submit(void *userdata, uint64_t id, const struct manager_request *r,
			     struct audit_record *a, manager_event_fn fn, void *fn_userdata,
			     struct manager_error *err)
{
	struct manager *m = userdata;
	uint64_t ret_id;

	*err = (struct manager_error){ 0 };
	/* The caller's scopes were checked when the request came in (and the router offers
	 * only the adapters the caller may use). */
	return submit_local(m, r, NULL, id, a, fn, fn_userdata, &ret_id, err, 0, true, false);
}

static uint64_t hook_new_id(void *userdata)
{
	struct manager *m = userdata;
	uint64_t id;

	pthread_mutex_lock(&m->lock);
	id = m->next_id++;
	pthread_mutex_unlock(&m->lock);
	return id;
}

static void hook_prefetch(void *userdata, const char *adapter)
{
	struct manager *m = userdata;

	char key[HOT_KEY_SIZE] = "";
	struct adapter_entry *a;

	/* the router names adapters; the scheduler knows contents */
	pthread_mutex_lock(&m->lock);
	a = adapter_find_spec(m, adapter);
	if (a)
		snprintf(key, sizeof(key), "%s", a->key);
	pthread_mutex_unlock(&m->lock);
	if (key[0])
		(void) sched_prefetch_adapter(m->sched, key);
}

static void hook_foreach_adapter(void *userdata,
				 void (*fn)(const struct manager_adapter_info *a, void *ud),
				 void *ud)
{
	manager_foreach_adapter(userdata, fn, ud);
}

static bool hook_may_use(void *userdata, const struct manager_caller *caller, const char *model)
{
	return manager_caller_may_use(userdata, caller, model);
}

static int hook_local_cancel(void *userdata, uint64_t id)
{
	return manager_cancel(userdata, id);
}

static void hook_final(void *userdata, const struct manager_event *ev, struct audit_record *a)
{
	struct manager *m = userdata;

	pthread_mutex_lock(&m->lock);
	if (ev->type == MANAGER_EVENT_DONE) {
		m->requests_finished++;
		m->prompt_tokens += ev->prompt_tokens;
		m->completion_tokens += ev->completion_tokens;
	} else
		m->requests_failed++;
	pthread_mutex_unlock(&m->lock);
	if (a) {
		a->time_ns = 0; /* the end */
		manager_audit_submit(m->audit, a);
		free(a);
	}
}

static int hook_target_new(void *userdata, const struct config_target *t,
			   struct remote_target **ret, struct errmsg *e)
{
	struct manager *m = userdata;

	return egress_client_target_new(m->egress, t, ret, e);
}

static int routing_new(struct manager *m, const struct config *c, struct errmsg *e)
{
	struct manager_routing_hooks h = { .local_submit = hook_local_submit,
					   .local_cancel = hook_local_cancel,
					   .final = hook_final,
					   .target_new = m->egress ? hook_target_new : NULL,
					   .new_id = hook_new_id,
					   .prefetch = hook_prefetch,
					   .foreach_adapter = hook_foreach_adapter,
					   .may_use = hook_may_use,
					   .m = m };

	return manager_routing_new(c, m->model_name, &h, &m->routing, e);
}

int manager_cancel(struct manager *m, uint64_t id)
{
	uint64_t sid = 0;
	bool found = false, submitted = false;

	assert_return(m, -EINVAL);
	pthread_mutex_lock(&m->lock);
	for (struct mreq *q = m->requests; q; q = q->next)
		if (q->id == id) {
			found = true;
			q->client_cancel = true;
			submitted = q->submitted;
			sid = q->sched_id;
			if (!submitted)
				q->cancel_requested = true;
			break;
		}
	pthread_mutex_unlock(&m->lock);
	if (!found)
		return manager_routing_cancel(m->routing, id);
	if (!submitted)
		return 0;
	/* -ENOENT here means it finished meanwhile: its final event is on its way. */
	(void) sched_cancel(m->sched, sid);
	return 0;
}

/* ---- introspection ---- */

void manager_get_stats(struct manager *m, struct manager_stats *ret)
{
	struct sched_stats s;

	sched_get_stats(m->sched, &s);
	pthread_mutex_lock(&m->lock);
	*ret = (struct manager_stats){
		.waiting = s.waiting,
		.running = s.running,
		.max_sequences = m->max_sequences,
		.queue_length = m->queue_length,
		.requests_total = m->requests_total,
		.requests_rejected = m->requests_rejected,
		.requests_finished = m->requests_finished,
		.requests_failed = m->requests_failed,
		.prompt_tokens = m->prompt_tokens,
		.completion_tokens = m->completion_tokens,
		.pool_pages_total = s.pool_pages_total,
		.pool_pages_free = s.pool_pages_free,
		.sched = s,
		.adapters_bad = atomic_load(&m->adapters_bad),
	};
	pthread_mutex_unlock(&m->lock);
	{
		struct manager_judge_stats js;
		manager_judge_get_stats(m->judge, &js);
		ret->judge_asked = js.asked;
		ret->judge_personal = js.verdicts[JUDGE_PERSONAL];
		ret->judge_public = js.verdicts[JUDGE_PUBLIC];
		ret->judge_unclear = js.verdicts[JUDGE_UNCLEAR];
		ret->judge_timeout = js.verdicts[JUDGE_TIMEOUT];
	}
}

struct sched_snapshot {
	char key[HOT_KEY_SIZE];
	bool resident, pinned;
	const char *tier; /* static strings */
	uint64_t hot_hits, hot_misses, warm_hits, warm_misses, load_ns;
	int node;
	bool locked;
};

struct snapshot_list {
	struct sched_snapshot *v;
	size_t n, cap;
};

static void snapshot_one(const struct sched_adapter_info *info, void *userdata)
{
	struct snapshot_list *l = userdata;

	if (l->n == l->cap) {
		size_t cap = MAX(8, l->cap * 2);
		struct sched_snapshot *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return;
		l->v = v;
		l->cap = cap;
	}
	snprintf(l->v[l->n].key, sizeof(l->v[l->n].key), "%s", info->name);
	l->v[l->n].resident = info->resident;
	l->v[l->n].pinned = info->pinned;
	l->v[l->n].tier = info->tier;
	l->v[l->n].hot_hits = info->hot_hits;
	l->v[l->n].hot_misses = info->hot_misses;
	l->v[l->n].warm_hits = info->warm.hits;
	l->v[l->n].warm_misses = info->warm.misses;
	l->v[l->n].load_ns = info->warm.load_ns;
	l->v[l->n].node = info->warm.node;
	l->v[l->n].locked = info->warm.locked;
	l->n++;
}

struct list_walk {
	struct manager *m;
	const struct snapshot_list *snap;
	void (*fn)(const struct manager_adapter_info *a, void *userdata);
	void *userdata;
};

static int list_one_version(const struct registry_version *v, void *ud)
{
	struct list_walk *w = ud;
	struct adapter_entry *a = adapter_find(w->m, v->name);
	char path[4200], key[HOT_KEY_SIZE];
	struct manager_adapter_info info = {
		.name = v->name,
		.version = v->version,
		.content_hash = v->hash_hex,
		.path = registry_blob_path(w->m->registry, v->hash, path, sizeof(path)),
		.base = v->base,
		.domains = (const char *const *) v->domains,
		.n_domains = v->n_domains,
		.exemplars = (const char *const *) v->exemplars,
		.n_exemplars = v->n_exemplars,
		.rank = v->rank,
		.bytes = v->bytes,
		.requests = v->uses,
		.base_quant = quant_type_name(v->base_quant),
	};

	if (a) {
		/* A loaded name shows what it serves now (its entry follows the active version). */
		info.loaded = true;
		info.version = a->version;
		info.content_hash = a->hash;
		info.path = a->path;
		info.base = a->base;
		info.domains = (const char *const *) a->domains;
		info.n_domains = a->n_domains;
		info.exemplars = (const char *const *) a->exemplars;
		info.n_exemplars = a->n_exemplars;
		info.rank = a->rank;
		info.bytes = a->bytes;
		info.requests = a->requests;
		info.running = a->running;
	}
	hot_key(info.content_hash, key);
	info.tier = "cold";
	info.numa_node = -1;
	for (size_t i = 0; i < w->snap->n; i++)
		if (strcmp(w->snap->v[i].key, key) == 0) {
			const struct sched_snapshot *sn = &w->snap->v[i];

			info.resident = sn->resident;
			info.pinned = sn->pinned;
			info.tier = sn->tier ? sn->tier : info.resident ? "hot" : "cold";
			info.hot_hits = sn->hot_hits;
			info.hot_misses = sn->hot_misses;
			info.warm_hits = sn->warm_hits;
			info.warm_misses = sn->warm_misses;
			info.load_ns = sn->load_ns;
			info.numa_node = sn->node;
			info.warm_locked = sn->locked;
		}
	info.pinned = info.pinned || v->pinned;
	w->fn(&info, w->userdata);
	return 0;
}

void manager_foreach_adapter(struct manager *m,
			     void (*fn)(const struct manager_adapter_info *a, void *userdata),
			     void *userdata)
{
	struct snapshot_list snap = { 0 };
	struct list_walk w = { .m = m, .snap = &snap, .fn = fn, .userdata = userdata };

	/* The scheduler's view first, without our lock (see the top of this file). */
	sched_foreach_adapter(m->sched, snapshot_one, &snap);

	/* Every name in the registry, in name order, at its active version (a read transaction:
	 * no blob is read). */
	pthread_mutex_lock(&m->lock);
	(void) registry_list(m->registry, list_one_version, &w);
	pthread_mutex_unlock(&m->lock);
	free(snap.v);
}

/* ---- adapter administration ---- */

static int registry_err(struct manager_error *err, int r, const struct errmsg *e)
{
	enum manager_err kind = MANAGER_ERR_INTERNAL;

	switch (r) {
	case -ENOENT:
		kind = MANAGER_ERR_MODEL_NOT_FOUND;
		break;
	case -EINVAL:
	case -ENOTUNIQ:
	case -EEXIST:
	case -EXDEV:
	case -EBUSY:
	case -EBADMSG:
		kind = MANAGER_ERR_INVALID_REQUEST;
		break;
	}
	return set_err(err, kind, r, "%s", e->text[0] ? e->text : strerror(-r));
}

/* Makes version v computable: its blob opened (checked against the base) and registered
 * with the scheduler under its content key, unless some loaded name holds it already. */
static int hot_register(struct manager *m, const struct registry_version *v,
			struct manager_error *err)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *la = NULL;
	char key[HOT_KEY_SIZE], path[4200];
	struct lora_open_opts opts = { .base = m->model, .name = key };
	struct errmsg e = { { 0 } };
	bool have;
	int r;

	hot_key(v->hash_hex, key);
	pthread_mutex_lock(&m->lock);
	have = key_held(m, key, NULL);
	pthread_mutex_unlock(&m->lock);
	if (have)
		return 0;
	registry_blob_path(m->registry, v->hash, path, sizeof(path));
	r = lora_adapter_open(path, &opts, &la, NULL, &e);
	if (r < 0)
		return set_err(err, MANAGER_ERR_INTERNAL, r, "%s@%u: blob %s: %s", v->name,
			       v->version, path, e.text);
	r = lora_adapter_check_base(la, m->model, &e);
	if (r < 0)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, r, "%s", e.text);
	r = sched_add_adapter(m->sched, la, &e);
	if (r == -EEXIST)
		return 0; /* registered meanwhile by another name of the same content */
	if (r < 0)
		return set_err(err, MANAGER_ERR_INTERNAL, r, "%s", e.text);
	TAKE_PTR(la); /* the scheduler owns it now */
	/* tiered: read whole (io_uring) and checked against the version's hash when first needed */
	r = sched_set_adapter_source(m->sched, key, path, v->hash);
	if (r < 0 && r != -EEXIST)
		return set_err(err, MANAGER_ERR_INTERNAL, r, "%s@%u: %s", v->name, v->version,
			       strerror(-r));
	bad_mark_recheck(m, v, key, path);
	return 0;
}

/* Drops a content key from the scheduler unless a loaded name still holds it. -EBUSY while
 * requests use it. */
static int hot_release(struct manager *m, const char *key, const struct adapter_entry *except)
{
	bool held;
	int r;

	pthread_mutex_lock(&m->lock);
	held = key_held(m, key, except);
	pthread_mutex_unlock(&m->lock);
	if (held)
		return 0;
	r = sched_remove_adapter(m->sched, key);
	return r == -ENOENT ? 0 : r;
}

/* Adds a loaded entry's request count to the registry's statistics (m->lock held). */
static void flush_uses(struct manager *m, struct adapter_entry *a)
{
	for (size_t i = 0; i < a->n_refs; i++) {
		struct hot_ref *k = &a->refs[i];
		if (k->uses != k->flushed &&
		    registry_add_uses(m->registry, a->name, k->version, k->uses - k->flushed,
				      k->last_use_ns) >= 0)
			k->flushed = k->uses;
	}
}

/* After an import or rollback: a loaded name follows its new active version. */
static int follow_active(struct manager *m, const char *name, struct manager_error *err)
{
	_cleanup_(registry_version_done) struct registry_version v = { 0 };
	struct errmsg e = { { 0 } };
	struct adapter_entry *a;
	bool loaded;
	int r;

	pthread_mutex_lock(&m->lock);
	loaded = adapter_find(m, name) != NULL;
	pthread_mutex_unlock(&m->lock);
	if (!loaded)
		return 0;
	r = registry_resolve(m->registry, name, &v, &e);
	if (r < 0)
		return registry_err(err, r, &e);
	r = hot_register(m, &v, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&m->lock);
	a = adapter_find(m, name);
	if (a && (strcmp(a->hash, v.hash_hex) != 0 || a->version != v.version)) {
		flush_uses(m, a);
		r = entry_set_version(m, a, &v);
	}
	pthread_mutex_unlock(&m->lock);
	if (r < 0)
		return set_err(err, MANAGER_ERR_INTERNAL, r, "out of memory");
	/* The old version stays registered (in the entry's keys) until unload: requests in
	 * flight may still use it. */
	(void) manager_routing_adapters_changed(m->routing);
	return 0;
}

/* Imports an adapter from path into the registry under name (the caller checked both). */
static int import_into_registry(struct manager *m, const char *path, const char *name,
				const char *importer, struct registry_version *ret,
				struct manager_error *err)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *la = NULL;
	_cleanup_free_ char *desc = NULL;
	struct lora_open_opts opts = { .base = m->model, .name = name };
	struct registry_import imp = { .name = name, .source = path, .importer = importer };
	struct errmsg e = { { 0 } };
	int r;

	r = lora_adapter_open(path, &opts, &la, NULL, &e);
	if (r < 0)
		return set_err(err, r == -ENOENT ? MANAGER_ERR_MODEL_NOT_FOUND
						 : MANAGER_ERR_INVALID_REQUEST,
			       r, "%s", e.text);
	r = lora_adapter_check_base(la, m->model, &e);
	if (r < 0)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, r, "%s", e.text);
	desc = lora_base_describe(m->model);
	if (!desc)
		return set_err(err, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
	imp.base_description = desc;
	imp.base_quant = m->model->hp.n_layer ? m->model->layers[0].wq.type : 0;
	r = registry_import(m->registry, la, &imp, ret, &e);
	if (r < 0)
		return set_err(err, r == -EINVAL ? MANAGER_ERR_INVALID_REQUEST : MANAGER_ERR_INTERNAL,
			       r, "importing %s as '%s': %s", path, name, e.text);
	return r;
}

/* The drop folder ([Adapters] Directory=): what is new or changed since it was last seen
 * becomes a version of its name (on first start: version 1). Failures are logged, never
 * fatal: a broken file in the folder must not stop the daemon. */
static void drop_folder_sync(struct manager *m, const char *only_name)
{
	_cleanup_(closedirp_) DIR *d = NULL;
	struct dirent *de;
	const char *dir = m->config->adapter_directory;

	if (!dir || !(d = opendir(dir)))
		return;
	while ((de = readdir(d))) {
		struct stat st;
		_cleanup_free_ char *name = adapter_name_of_entry(dir, de->d_name, &st);
		_cleanup_free_ char *path = NULL, *note = NULL;
		struct manager_error err = { 0 };
		uint64_t seen[2], now[2];
		int r;

		if (!name || (only_name && strcmp(name, only_name) != 0))
			continue;
		if (strcmp(name, m->model_name) == 0)
			continue;
		now[0] = (uint64_t) st.st_size;
		now[1] = (uint64_t) st.st_mtim.tv_sec * 1000000000ull + (uint64_t) st.st_mtim.tv_nsec;
		if (asprintf(&note, "drop/%s", de->d_name) < 0 ||
		    asprintf(&path, "%s/%s", dir, de->d_name) < 0)
			return;
		if (registry_note_get(m->registry, note, seen, sizeof(seen)) == 0 &&
		    memcmp(seen, now, sizeof(seen)) == 0)
			continue;
		r = import_into_registry(m, path, name, "drop folder", NULL, &err);
		if (r < 0) {
			log_warning("adapter %s in the drop folder: %s", path, err.message);
			continue;
		}
		log_info("adapter %s: %s into the registry as '%s'", path,
			 r == 1 ? "already" : "imported", name);
		(void) registry_note_put(m->registry, note, now, sizeof(now));
		(void) follow_active(m, name, &err);
	}
}

int manager_adapter_load(struct manager *m, const char *name, const char *path,
			 struct manager_error *err)
{
	_cleanup_(registry_version_done) struct registry_version v = { 0 };
	struct adapter_entry *a = NULL;
	struct errmsg e = { { 0 } };
	bool exists;
	int r;

	assert_return(m && name, -EINVAL);
	if (!adapter_name_valid(name))
		return set_err(
			err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			"'%.80s' is not a valid adapter name (letters, digits, '.', '_', '-'; "
			"at most 64)",
			name);
	if (strcmp(name, m->model_name) == 0)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EEXIST,
			       "'%s' is the base model's name", name);

	pthread_mutex_lock(&m->lock);
	exists = adapter_find(m, name) != NULL;
	pthread_mutex_unlock(&m->lock);
	if (exists)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EEXIST,
			       "adapter '%s' is already loaded", name);

	if (path) {
		/* vLLM's load_lora_adapter: the file becomes a version of name first. */
		r = import_into_registry(m, path, name, "load", NULL, err);
		if (r < 0)
			return r;
	}
	r = registry_resolve(m->registry, name, &v, &e);
	if (r == -ENOENT) {
		/* dropped into Directory= while running */
		drop_folder_sync(m, name);
		r = registry_resolve(m->registry, name, &v, &e);
	}
	if (r == -ENOENT)
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, -ENOENT,
			       "no adapter '%s' in the registry (import it with `molly adapters "
			       "import PATH`)",
			       name);
	if (r < 0)
		return registry_err(err, r, &e);
	r = hot_register(m, &v, err);
	if (r < 0)
		return r;

	a = calloc(1, sizeof(*a));
	if (!a || !(a->name = strdup(name)) || entry_set_version(m, a, &v) < 0) {
		adapter_entry_free(a);
		return set_err(err, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
	}
	a->requests = v.uses;
	pthread_mutex_lock(&m->lock);
	if (adapter_find(m, name)) {
		pthread_mutex_unlock(&m->lock);
		adapter_entry_free(a);
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EEXIST,
			       "adapter '%s' is already loaded", name);
	}
	a->next = m->adapters;
	m->adapters = a;
	pthread_mutex_unlock(&m->lock);
	/* The router's T0 candidates and classifier follow the adapter set (at start the
	 * router is built after the [Adapters] Load= ones). A failure keeps the old router. */
	(void) manager_routing_adapters_changed(m->routing);
	return 0;
}

int manager_adapter_unload(struct manager *m, const char *name, struct manager_error *err)
{
	struct adapter_entry **p, *a = NULL;
	bool unlinked = false;
	size_t done = 0;
	int r = 0;

	assert_return(m && name, -EINVAL);
	/* Out of the list first, so that no new request resolves the name while its versions
	 * leave the scheduler. */
	pthread_mutex_lock(&m->lock);
	for (p = &m->adapters; *p; p = &(*p)->next)
		if (strcmp((*p)->name, name) == 0) {
			a = *p;
			if (a->running > 0)
				r = -EBUSY;
			else {
				*p = a->next;
				unlinked = true;
			}
			break;
		}
	pthread_mutex_unlock(&m->lock);
	if (!a)
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, -ENOENT,
			       "adapter '%.80s' is not loaded", name);
	/* Every version this name made computable leaves the scheduler (its pool pages go
	 * back), unless another loaded name holds the same content. -EBUSY: a request that
	 * resolved it just before is still queued or running. */
	while (unlinked && done < a->n_refs) {
		r = hot_release(m, a->refs[done].key, NULL);
		if (r < 0)
			break;
		done++;
	}
	if (r < 0 && unlinked) {
		/* Back in the list with what is still registered, and with its active version
		 * registered again if it went already. */
		_cleanup_(registry_version_done) struct registry_version v = { 0 };
		struct manager_error e2 = { 0 };
		char spec[REGISTRY_NAME_MAX + 16];

		/* what was released is counted now; the rest stays with the entry */
		pthread_mutex_lock(&m->lock);
		flush_uses(m, a);
		pthread_mutex_unlock(&m->lock);
		memmove(a->refs, a->refs + done, (a->n_refs - done) * sizeof(*a->refs));
		a->n_refs -= done;
		snprintf(spec, sizeof(spec), "%s@%u", a->name, a->version);
		if (!entry_has_key(a, a->key) && registry_resolve(m->registry, spec, &v, NULL) >= 0 &&
		    hot_register(m, &v, &e2) >= 0)
			(void) entry_add_key(a, a->key, a->version);
		pthread_mutex_lock(&m->lock);
		a->next = m->adapters;
		m->adapters = a;
		pthread_mutex_unlock(&m->lock);
	}
	if (r == -EBUSY)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, r,
			       "adapter '%s' is in use by running or waiting requests; retry when "
			       "they are done",
			       name);
	if (r < 0)
		return set_err(err, MANAGER_ERR_INTERNAL, r, "unloading '%s': %s", name,
			       strerror(-r));
	pthread_mutex_lock(&m->lock);
	flush_uses(m, a);
	pthread_mutex_unlock(&m->lock);
	adapter_entry_free(a);
	(void) manager_routing_adapters_changed(m->routing);
	return 0;
}

int manager_adapter_prefetch(struct manager *m, const char *name, struct manager_error *err)
{
	char key[HOT_KEY_SIZE] = "";
	struct adapter_entry *a;
	int r;

	assert_return(m && name, -EINVAL);
	pthread_mutex_lock(&m->lock);
	a = adapter_find(m, name);
	if (a)
		snprintf(key, sizeof(key), "%s", a->key);
	pthread_mutex_unlock(&m->lock);
	if (!key[0])
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, -ENOENT,
			       "adapter '%.80s' is not loaded (load it first)", name);
	r = sched_prefetch_adapter(m->sched, key);
	if (r == -ENOENT)
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, r,
			       "adapter '%.80s' is not loaded (load it first)", name);
	if (r < 0)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, r, "prefetching '%s': %s", name,
			       strerror(-r));
	return 0;
}

int manager_adapter_pin(struct manager *m, const char *name, bool pin, struct manager_error *err)
{
	struct adapter_entry *a;
	char key[HOT_KEY_SIZE] = "";
	struct errmsg e = { { 0 } };
	uint32_t version = 0;
	int r;

	assert_return(m && name, -EINVAL);
	pthread_mutex_lock(&m->lock);
	a = adapter_find(m, name);
	if (a) {
		snprintf(key, sizeof(key), "%s", a->key);
		version = a->version;
	}
	pthread_mutex_unlock(&m->lock);
	if (!a)
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, -ENOENT,
			       "adapter '%.80s' is not loaded (load it first)", name);
	r = sched_pin_adapter(m->sched, key, pin);
	if (r == -ENOENT)
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, r,
			       "adapter '%.80s' is not loaded (load it first)", name);
	if (r < 0)
		return set_err(err,
			       r == -ENOSPC ? MANAGER_ERR_INVALID_REQUEST : MANAGER_ERR_INTERNAL, r,
			       "%s '%s': %s", pin ? "pinning" : "unpinning", name, strerror(-r));
	/* A pinned version is also kept by garbage collection. */
	r = registry_set_pinned(m->registry, name, version, pin, &e);
	if (r < 0)
		return registry_err(err, r, &e);
	return 0;
}

/* ---- import and the registry's own operations ---- */

int manager_adapter_import(struct manager *m, const char *path, const char *name,
			   void (*progress)(uint64_t done, uint64_t total, void *userdata),
			   void *userdata, char **ret_name, struct manager_error *err)
{
	_cleanup_(registry_version_done) struct registry_version v = { 0 };
	_cleanup_free_ char *nm = NULL;
	struct stat st;
	int r;

	assert_return(m && path && ret_name, -EINVAL);
	if (path[0] != '/')
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       "'%.200s': give an absolute path (the daemon does not share your "
			       "working directory)",
			       path);
	if (stat(path, &st) < 0)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -errno, "%.200s: %s", path,
			       strerror(errno));
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       "%.200s is neither a file nor a PEFT directory", path);
	if (name)
		nm = strdup(name);
	else {
		/* The source's own name: the file or directory name without a known suffix. */
		const char *slash = strrchr(path, '/');
		size_t n;
		nm = strdup(slash && slash[1] ? slash + 1 : path);
		if (nm && (n = strlen(nm)) > 1 && nm[n - 1] == '/')
			nm[n - 1] = 0;
		for (size_t i = 0; nm && i < ELEMENTSOF(adapter_suffixes); i++) {
			size_t k = strlen(adapter_suffixes[i]);
			n = strlen(nm);
			if (n > k && strcmp(nm + n - k, adapter_suffixes[i]) == 0)
				nm[n - k] = 0;
		}
	}
	if (!nm)
		return set_err(err, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
	if (!adapter_name_valid(nm) || strcmp(nm, m->model_name) == 0)
		return set_err(err, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			       "'%.80s' is not a usable adapter name (letters, digits, '.', '_', "
			       "'-', at most 64, not the base's name); pass name= to choose one",
			       nm);
	if (progress)
		progress(0, (uint64_t) st.st_size, userdata);
	r = import_into_registry(m, path, nm, "import", &v, err);
	if (r < 0)
		return r;
	if (progress)
		progress((uint64_t) st.st_size, (uint64_t) st.st_size, userdata);
	/* A loaded name serves its new version from now on. */
	r = follow_active(m, nm, err);
	if (r < 0)
		return r;
	*ret_name = TAKE_PTR(nm);
	return 0;
}

int manager_adapter_history(struct manager *m, const char *name,
			    int (*fn)(const struct registry_version *v, void *ud), void *ud,
			    struct manager_error *err)
{
	int r = registry_history(m->registry, name, fn, ud);

	if (r == -ENOENT)
		return set_err(err, MANAGER_ERR_MODEL_NOT_FOUND, r,
			       "no adapter '%.80s' in the registry", name);
	if (r < 0)
		return set_err(err, MANAGER_ERR_INTERNAL, r, "history of '%.80s': %s", name,
			       strerror(-r));
	return 0;
}

int manager_adapter_rollback(struct manager *m, const char *name, uint32_t version,
			     struct manager_error *err)
{
	struct errmsg e = { { 0 } };
	int r = registry_rollback(m->registry, name, version, &e);

	if (r < 0)
		return registry_err(err, r, &e);
	return follow_active(m, name, err);
}

int manager_adapter_remove(struct manager *m, const char *name, struct manager_error *err)
{
	struct errmsg e = { { 0 } };
	bool loaded;
	int r;

	pthread_mutex_lock(&m->lock);
	loaded = adapter_find(m, name) != NULL;
	pthread_mutex_unlock(&m->lock);
	if (loaded) {
		r = manager_adapter_unload(m, name, err);
		if (r < 0)
			return r;
	}
	r = registry_remove(m->registry, name, &e);
	if (r < 0)
		return registry_err(err, r, &e);
	return 0;
}

int manager_adapter_gc(struct manager *m, uint32_t *ret_blobs, uint64_t *ret_bytes,
		       struct manager_error *err)
{
	struct errmsg e = { { 0 } };
	int r = registry_gc(m->registry, ret_blobs, ret_bytes, &e);

	if (r < 0)
		return registry_err(err, r, &e);
	return 0;
}

/* ---- the registry at start and stop ---- */

static void remove_tree(const char *path)
{
	_cleanup_(closedirp_) DIR *d = opendir(path);
	struct dirent *de;

	if (!d) {
		(void) unlink(path);
		return;
	}
	while ((de = readdir(d))) {
		_cleanup_free_ char *p = NULL;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (asprintf(&p, "%s/%s", path, de->d_name) >= 0)
			remove_tree(p);
	}
	(void) rmdir(path);
}

/* <StateDirectory>/registry; without a state directory (tests, tools), a private one that
 * goes away with the manager. */
static int registry_setup(struct manager *m, const struct config *c, struct errmsg *e)
{
	struct registry_params p = { .map_bytes = c->registry_map_bytes,
				     .keep_versions = c->keep_versions };
	_cleanup_free_ char *dir = NULL;
	int r;

	if (c->state_directory) {
		if (asprintf(&dir, "%s/registry", c->state_directory) < 0)
			return -ENOMEM;
		if (mkdir(c->state_directory, 0755) < 0 && errno != EEXIST)
			return errmsg_set(e, -errno, "creating %s: %m", c->state_directory);
	} else {
		const char *t = getenv("TMPDIR");
		if (asprintf(&m->registry_tmp, "%s/molly-registry.XXXXXX", t && t[0] ? t : "/tmp") < 0)
			return -ENOMEM;
		if (!mkdtemp(m->registry_tmp)) {
			r = -errno;
			free(m->registry_tmp);
			m->registry_tmp = NULL;
			return errmsg_set(e, r, "a private adapter registry: %s", strerror(-r));
		}
		dir = strdup(m->registry_tmp);
		if (!dir)
			return -ENOMEM;
	}
	p.dir = dir;
	r = registry_open(&p, &m->registry, e);
	if (r < 0)
		return r;
	/* `molly adapters fsck --repair` refuses while we hold it */
	r = registry_hold(m->registry);
	if (r < 0)
		return errmsg_set(e, r, "locking the registry in %s: %s", dir, strerror(-r));
	drop_folder_sync(m, NULL);
	return 0;
}

static void registry_teardown(struct manager *m)
{
	for (struct adapter_entry *a = m->adapters; a && m->registry; a = a->next)
		flush_uses(m, a);
	m->registry = registry_close(m->registry);
	if (m->registry_tmp) {
		remove_tree(m->registry_tmp);
		free(m->registry_tmp);
		m->registry_tmp = NULL;
	}
}

/* ---- egress (egress/client.h) ---- */

void manager_audit_denial(struct manager *m, const struct egress_denial *d)
{
	struct audit_record a = { .tier = (int) d->tier, .uid = -1, .egress_enforced = true };
	char dest[64] = "?";

	if (!m || !m->audit)
		return;
	(void) egress_dest_format(&d->dest, dest, sizeof(dest));
	a.time_ns = d->realtime_ns;
	snprintf(a.front, sizeof(a.front), "egress");
	snprintf(a.target, sizeof(a.target), "%s %s pid %u", dest,
		 d->protocol == 17 ? "udp" : "tcp", (unsigned) d->pid);
	snprintf(a.error, sizeof(a.error), "egress_denied");
	manager_audit_submit(m->audit, &a);
}

const char *manager_egress_status(struct manager *m)
{
	const struct config *c = m->config;

	if (m->egress)
		return egress_client_status(m->egress);
	if (!c->egress_enforce)
		return "off (Enforce=no): remote calls run in the daemon's process";
	return c->n_targets ? "off" : "not needed: no remote targets";
}

void manager_set_device_status(struct manager *m, const char *status)
{
	pthread_mutex_lock(&m->lock);
	snprintf(m->device_status, sizeof(m->device_status), "%s", status ? status : "");
	pthread_mutex_unlock(&m->lock);
}

void manager_device_status(struct manager *m, char *buf, size_t size)
{
	pthread_mutex_lock(&m->lock);
	snprintf(buf, size, "%s", m->device_status[0] ? m->device_status : "off");
	pthread_mutex_unlock(&m->lock);
}
