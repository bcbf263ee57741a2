/* SPDX-License-Identifier: MIT */
/*
 * dbus-admin.c: who may administer, org.molly.Adapters1, Daemon1.Reload, and the worker
 * threads behind the slow methods (Import, Load).
 *
 * Authorization of an administrative call: root; a caller whose groups include [Daemon]
 * AdminGroup= (or who is listed in that group); a [Member] with Admin=yes whose UIDs= has the
 * caller; else polkit's CheckAuthorization for org.molly.admin, asked asynchronously (the call
 * is answered when polkit answers). When polkit is not on the bus the call is refused with a
 * message that says what would allow it.
 */
#include <errno.h>
#include <inttypes.h>
#include <time.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../basic/utf8-prefix.h"
#include "../core/config.h"
#include "../core/log.h"
#include "../registry/registry.h"
#include "dbus-internal.h"

#define MAX_JOBS 4
#define POLKIT_ACTION "org.molly.admin"

typedef int (*admin_fn)(struct dbus_front *f, sd_bus_message *call, sd_bus_error *error);

/* ---- identity ---- */

/*
 * Asking the bus for a sender's uid is a synchronous round trip to the bus daemon, on every
 * call. A bus never reuses a unique name, so a name's uid cannot change: remember the last few
 * (the loop's thread only).
 */
#define UID_CACHE_SIZE 64

static struct {
	char name[32];
	uid_t uid;
} uid_cache[UID_CACHE_SIZE];
static unsigned uid_cache_next;

int dbus_caller_uid(sd_bus_message *m, uid_t *ret)
{
	_cleanup_(sd_bus_creds_unrefp) sd_bus_creds *c = NULL;
	const char *sender = sd_bus_message_get_sender(m);
	bool cacheable = sender && sender[0] == ':' && strlen(sender) < sizeof(uid_cache[0].name);
	int r;

	if (cacheable)
		for (unsigned i = 0; i < UID_CACHE_SIZE; i++)
			if (strcmp(uid_cache[i].name, sender) == 0) {
				*ret = uid_cache[i].uid;
				return 0;
			}
	r = sd_bus_query_sender_creds(m, SD_BUS_CREDS_EUID | SD_BUS_CREDS_UID, &c);
	if (r < 0)
		return r;
	r = sd_bus_creds_get_euid(c, ret);
	if (r < 0)
		r = sd_bus_creds_get_uid(c, ret);
	if (r >= 0 && cacheable) {
		unsigned i = uid_cache_next++ % UID_CACHE_SIZE;
		snprintf(uid_cache[i].name, sizeof(uid_cache[i].name), "%s", sender);
		uid_cache[i].uid = *ret;
	}
	return r;
}

static bool user_in_group(uid_t uid, gid_t gid)
{
	struct passwd pw, *pres = NULL;
	struct group gr, *gres = NULL;
	char pbuf[4096], gbuf[16384];

	if (getpwuid_r(uid, &pw, pbuf, sizeof(pbuf), &pres) != 0 || !pres)
		return false;
	if (pres->pw_gid == gid)
		return true;
	if (getgrgid_r(gid, &gr, gbuf, sizeof(gbuf), &gres) != 0 || !gres)
		return false;
	for (char **mem = gres->gr_mem; mem && *mem; mem++)
		if (strcmp(*mem, pres->pw_name) == 0)
			return true;
	return false;
}

/* Whether the caller is an administrator without asking polkit. */
static bool caller_is_local_admin(struct dbus_front *f, sd_bus_message *m)
{
	_cleanup_(sd_bus_creds_unrefp) sd_bus_creds *c = NULL;
	_cleanup_(config_unrefp) struct config *cfg = manager_get_config(f->manager);
	const struct config_member *mem;
	uid_t uid;
	int r;

	/* The bus tells the uid (and, with dbus-daemon >= 1.11, the groups: UnixGroupIDs, from
	 * SO_PEERGROUPS); AUGMENT fills what it did not tell from /proc. */
	r = sd_bus_query_sender_creds(m,
				      SD_BUS_CREDS_EUID | SD_BUS_CREDS_UID | SD_BUS_CREDS_EGID |
					      SD_BUS_CREDS_GID | SD_BUS_CREDS_SUPPLEMENTARY_GIDS |
					      SD_BUS_CREDS_AUGMENT,
				      &c);
	if (r < 0)
		return false;
	if (sd_bus_creds_get_euid(c, &uid) < 0 && sd_bus_creds_get_uid(c, &uid) < 0)
		return false;
	if (uid == 0)
		return true;

	mem = config_find_member_by_uid(cfg, uid);
	if (mem && mem->admin)
		return true;

	if (cfg->admin_group) {
		struct group gr, *gres = NULL;
		char buf[16384];
		const gid_t *gids = NULL;
		gid_t g;
		int n;

		if (getgrnam_r(cfg->admin_group, &gr, buf, sizeof(buf), &gres) != 0 || !gres) {
			log_warning("[Daemon] AdminGroup=%s: no such group", cfg->admin_group);
			return false;
		}
		if ((sd_bus_creds_get_egid(c, &g) >= 0 && g == gres->gr_gid) ||
		    (sd_bus_creds_get_gid(c, &g) >= 0 && g == gres->gr_gid))
			return true;
		n = sd_bus_creds_get_supplementary_gids(c, &gids);
		for (int i = 0; i < n; i++)
			if (gids[i] == gres->gr_gid)
				return true;
		/* The group database counts too (a login that predates the group). */
		if (user_in_group(uid, gres->gr_gid))
			return true;
	}
	return false;
}

/* ---- polkit ---- */

struct auth {
	struct auth *next;
	struct dbus_front *front;
	sd_bus_message *call;
	sd_bus_slot *slot;
	admin_fn fn;
};

static struct auth *auths; /* polkit checks in flight (the loop's thread only) */

static void auth_free(struct auth *a)
{
	for (struct auth **p = &auths; *p; p = &(*p)->next)
		if (*p == a) {
			*p = a->next;
			break;
		}
	a->front->n_auth--;
	sd_bus_slot_unref(a->slot);
	sd_bus_message_unref(a->call);
	free(a);
}

static void reply_denied(sd_bus_message *call, const char *why)
{
	(void) sd_bus_reply_method_errorf(
		call, SD_BUS_ERROR_ACCESS_DENIED,
		"%s needs an administrator: root, a member of the group named by [Daemon] "
		"AdminGroup=, a [Member] with Admin=yes listing your uid in UIDs=, or polkit "
		"authorization for " POLKIT_ACTION " (%s)",
		sd_bus_message_get_member(call), why);
}

static void run_admin(struct dbus_front *f, sd_bus_message *call, admin_fn fn)
{
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	int r;

	r = fn(f, call, &error);
	if (r < 0) {
		if (!sd_bus_error_is_set(&error))
			sd_bus_error_set_errnof(&error, -r, "%s: %s",
						sd_bus_message_get_member(call), strerror(-r));
		(void) sd_bus_reply_method_error(call, &error);
	}
}

static int on_polkit_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error)
{
	struct auth *a = userdata;
	const sd_bus_error *e = sd_bus_message_get_error(reply);
	int authorized = 0, challenge = 0, r;

	if (e) {
		log_debug("polkit: %s: %s", e->name, e->message);
		reply_denied(a->call, "polkit is not available here");
		auth_free(a);
		return 0;
	}
	r = sd_bus_message_enter_container(reply, 'r', "bba{ss}");
	if (r >= 0)
		r = sd_bus_message_read(reply, "bb", &authorized, &challenge);
	if (r < 0) {
		reply_denied(a->call, "polkit's answer was malformed");
		auth_free(a);
		return 0;
	}
	if (authorized)
		run_admin(a->front, a->call, a->fn);
	else
		reply_denied(a->call, challenge ? "polkit wants an authentication agent"
						: "polkit said no");
	auth_free(a);
	return 0;
}

/* Runs fn for an administrator (now, or when polkit answers); refuses everyone else. */
static int authorize(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error, admin_fn fn)
{
	struct auth *a;
	const char *sender = sd_bus_message_get_sender(m);
	int r;

	if (caller_is_local_admin(f, m))
		return fn(f, m, error);
	if (!sender)
		return sd_bus_error_set(error, SD_BUS_ERROR_ACCESS_DENIED, "no sender");

	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->front = f;
	a->call = sd_bus_message_ref(m);
	a->fn = fn;
	/* subject: the caller's bus name; flags 1: AllowUserInteraction. */
	r = sd_bus_call_method_async(f->bus, &a->slot, "org.freedesktop.PolicyKit1",
				     "/org/freedesktop/PolicyKit1/Authority",
				     "org.freedesktop.PolicyKit1.Authority", "CheckAuthorization",
				     on_polkit_reply, a, "(sa{sv})sa{ss}us", "system-bus-name", 1,
				     "name", "s", sender, POLKIT_ACTION, 0, (uint32_t) 1, "");
	if (r < 0) {
		sd_bus_message_unref(a->call);
		free(a);
		return sd_bus_error_setf(error, SD_BUS_ERROR_ACCESS_DENIED,
					 "%s needs an administrator (root, AdminGroup=, or polkit, "
					 "which cannot be asked: %s)",
					 sd_bus_message_get_member(m), strerror(-r));
	}
	a->next = auths;
	auths = a;
	f->n_auth++;
	return 1;
}

/* ---- jobs: slow work off the loop ---- */

enum job_kind {
	JOB_IMPORT,
	JOB_LOAD,
	JOB_PIN,  /* may wait for a cold adapter's blob: never on the bus loop */
};

struct job {
	struct dbus_post post;
	struct dbus_front *front;
	enum job_kind kind;
	sd_bus_message *call;  /* touched on the loop only */
	char *path;
	char *name;
	bool load_after;
	int progress_fd;
	/* results */
	int r;
	char *result_name;
	struct manager_error err;
	struct manager_error load_err;
	int load_r;
};

static void job_free(struct job *j)
{
	if (j->progress_fd >= 0)
		close(j->progress_fd);
	sd_bus_message_unref(j->call);
	free(j->path);
	free(j->name);
	free(j->result_name);
	free(j);
}

static void job_progress(uint64_t done, uint64_t total, void *userdata)
{
	struct job *j = userdata;
	char line[64];
	int n;

	if (j->progress_fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%llu %llu\n", (unsigned long long) done,
		     (unsigned long long) total);
	/* Non-blocking: a reader that does not keep up just misses some lines. */
	if (write(j->progress_fd, line, (size_t) n) < 0 && errno == EPIPE) {
		close(j->progress_fd);
		j->progress_fd = -EBADF;
	}
}

static void job_done(struct dbus_front *f, struct dbus_post *p)
{
	struct job *j = (struct job *) p;

	f->n_jobs--;
	if (j->r < 0)
		(void) sd_bus_reply_method_errorf(j->call, manager_err_dbus_name(j->err.kind), "%s",
						  j->err.message);
	else if (j->kind == JOB_IMPORT && j->load_after && j->load_r < 0)
		(void) sd_bus_reply_method_errorf(j->call, manager_err_dbus_name(j->load_err.kind),
						  "imported as '%s', but loading failed: %s",
						  j->result_name, j->load_err.message);
	else if (j->kind == JOB_IMPORT)
		(void) sd_bus_reply_method_return(j->call, "s", j->result_name);
	else
		(void) sd_bus_reply_method_return(j->call, "");
	if (j->r >= 0)
		log_info("adapter %s: %s",
			 j->kind == JOB_IMPORT ? "imported" : j->kind == JOB_PIN ? "pinned" : "loaded",
			 j->result_name ? j->result_name : j->name);
	job_free(j);
}

static void *job_thread(void *arg)
{
	struct job *j = arg;
	struct manager *m = j->front->manager;

	if (j->kind == JOB_IMPORT) {
		j->r = manager_adapter_import(m, j->path, j->name, job_progress, j, &j->result_name,
					      &j->err);
		if (j->r >= 0 && j->load_after) {
			j->load_r = manager_adapter_load(m, j->result_name, NULL, &j->load_err);
			/* a new version of a loaded name: it serves the new version already */
			if (j->load_r == -EEXIST)
				j->load_r = 0;
		}
	} else if (j->kind == JOB_PIN)
		j->r = manager_adapter_pin(m, j->name, true, &j->err);
	else
		j->r = manager_adapter_load(m, j->name, NULL, &j->err);
	if (j->progress_fd >= 0) {
		close(j->progress_fd); /* EOF tells the client the copy is over */
		j->progress_fd = -EBADF;
	}
	j->post.run = job_done;
	dbus_front_post(j->front, &j->post);
	return NULL;
}

static int job_start(struct dbus_front *f, struct job *j, sd_bus_error *error)
{
	pthread_attr_t attr;
	pthread_t t;
	int r;

	if (f->n_jobs >= MAX_JOBS) {
		job_free(j);
		return sd_bus_error_setf(
			error, "org.molly.Error.Busy",
			"%d adapter operations are running; retry when one is done", MAX_JOBS);
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, job_thread, j);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		job_free(j);
		return -r;
	}
	f->n_jobs++;
	return 1;
}

/* ---- Adapters1 ---- */

struct list_ctx {
	sd_bus_message *reply;
	int r;
};

static void list_one(const struct manager_adapter_info *a, void *userdata)
{
	struct list_ctx *c = userdata;
	sd_bus_message *m = c->reply;
	int r;

	if (c->r < 0)
		return;
	r = sd_bus_message_open_container(m, 'r', "ssa{sv}");
	if (r >= 0)
		r = sd_bus_message_append(m, "ss", a->name, a->content_hash ?: "");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0)
		r = sd_bus_message_append(m, "{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}", "loaded", "b",
					  (int) a->loaded, "resident", "b", (int) a->resident,
					  "pinned", "b", (int) a->pinned, "rank", "u", a->rank,
					  "path", "s", a->path ?: "", "base", "s", a->base ?: "",
					  "requests", "t", a->requests, "running", "u", a->running);
	if (r >= 0)
		r = sd_bus_message_append(m, "{sv}{sv}{sv}{sv}", "version", "u", a->version,
					  "bytes", "t", a->bytes, "tier", "s", a->tier ?: "cold",
					  "base_quant", "s", a->base_quant ?: "");
	if (r >= 0)
		r = sd_bus_message_append(m, "{sv}{sv}{sv}{sv}{sv}{sv}{sv}", "hot_hits", "t",
					  a->hot_hits, "hot_misses", "t", a->hot_misses,
					  "warm_hits", "t", a->warm_hits, "warm_misses", "t",
					  a->warm_misses, "load_ns", "t", a->load_ns, "numa_node",
					  "i", (int32_t) a->numa_node, "warm_locked", "b",
					  (int) a->warm_locked);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'e', "sv");
	if (r >= 0)
		r = sd_bus_message_append(m, "s", "domains");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', "as");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "s");
	for (size_t i = 0; r >= 0 && i < a->n_domains; i++)
		r = sd_bus_message_append(m, "s", a->domains[i]);
	for (int k = 0; r >= 0 && k < 5; k++) /* a, v, e, a{sv}, r */
		r = sd_bus_message_close_container(m);
	c->r = r;
}

static int method_list(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct dbus_front *f = userdata;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	struct list_ctx c = { 0 };
	int r;

	r = sd_bus_message_new_method_return(m, &reply);
	if (r < 0)
		return r;
	r = sd_bus_message_open_container(reply, 'a', "(ssa{sv})");
	if (r < 0)
		return r;
	c.reply = reply;
	manager_foreach_adapter(f->manager, list_one, &c);
	if (c.r < 0)
		return c.r;
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int do_import(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	struct job *j;
	const char *path;
	int r;

	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->front = f;
	j->kind = JOB_IMPORT;
	j->progress_fd = -EBADF;
	r = sd_bus_message_read(m, "s", &path);
	if (r < 0)
		goto fail;
	j->path = strdup(path);
	if (!j->path) {
		r = -ENOMEM;
		goto fail;
	}
	r = sd_bus_message_enter_container(m, 'a', "{sv}");
	if (r < 0)
		goto fail;
	while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
		const char *key, *contents;
		char type;

		r = sd_bus_message_read(m, "s", &key);
		if (r >= 0)
			r = sd_bus_message_peek_type(m, &type, &contents);
		if (r < 0)
			goto fail;
		if (strcmp(key, "name") == 0 && strcmp(contents, "s") == 0) {
			const char *name;
			r = sd_bus_message_read(m, "v", "s", &name);
			if (r >= 0 && !(j->name = strdup(name)))
				r = -ENOMEM;
		} else if (strcmp(key, "progress_fd") == 0 && strcmp(contents, "h") == 0) {
			int fd;
			r = sd_bus_message_read(m, "v", "h", &fd);
			if (r >= 0) {
				j->progress_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
				if (j->progress_fd < 0)
					r = -errno;
				else
					(void) fcntl(j->progress_fd, F_SETFL, O_NONBLOCK);
			}
		} else if (strcmp(key, "load") == 0 && strcmp(contents, "b") == 0) {
			int b;
			r = sd_bus_message_read(m, "v", "b", &b);
			j->load_after = b;
		} else {
			sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
					  "option '%.*s' of type '%s' is unknown (known: name s, "
					  "progress_fd h, load b)",
					  utf8_prefix(key, 64), key, contents);
			r = -EINVAL;
		}
		if (r < 0)
			goto fail;
		r = sd_bus_message_exit_container(m);
		if (r < 0)
			goto fail;
	}
	if (r < 0)
		goto fail;
	j->call = sd_bus_message_ref(m);
	return job_start(f, j, error);
fail:
	job_free(j);
	return r;
}

/* Load and Pin: the name in m, the work on a job thread, the reply when it is done. */
static int start_name_job(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error,
			  enum job_kind kind)
{
	struct job *j;
	const char *name;
	int r;

	r = sd_bus_message_read(m, "s", &name);
	if (r < 0)
		return r;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->front = f;
	j->kind = kind;
	j->progress_fd = -EBADF;
	j->name = strdup(name);
	if (!j->name) {
		job_free(j);
		return -ENOMEM;
	}
	j->call = sd_bus_message_ref(m);
	return job_start(f, j, error);
}

static int do_load(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	return start_name_job(f, m, error, JOB_LOAD);
}

static int do_unload(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	struct manager_error err = { 0 };
	const char *name;
	int r;

	r = sd_bus_message_read(m, "s", &name);
	if (r < 0)
		return r;
	r = manager_adapter_unload(f->manager, name, &err);
	if (r < 0)
		return sd_bus_error_set(error,
					r == -EBUSY ? "org.molly.Error.Busy"
						    : manager_err_dbus_name(err.kind),
					err.message);
	log_info("adapter unloaded: %s", name);
	return sd_bus_reply_method_return(m, "");
}

static int do_pin_false(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	struct manager_error err = { 0 };
	const char *name;
	int r;

	r = sd_bus_message_read(m, "s", &name);
	if (r < 0)
		return r;
	r = manager_adapter_pin(f->manager, name, false, &err);
	if (r < 0)
		return sd_bus_error_set(error, manager_err_dbus_name(err.kind), err.message);
	return sd_bus_reply_method_return(m, "");
}

/* Pin makes a cold adapter hot first, which reads its blob from disk: a job thread waits for
 * that and the reply comes when it is done, while the loop serves everyone else. */
static int do_pin_true(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	return start_name_job(f, m, error, JOB_PIN);
}

/* Prefetch: read a loaded adapter toward the hot tier now (the call returns at once). */
static int do_prefetch(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	struct manager_error err = { 0 };
	const char *name;
	int r;

	r = sd_bus_message_read(m, "s", &name);
	if (r < 0)
		return r;
	r = manager_adapter_prefetch(f->manager, name, &err);
	if (r < 0)
		return sd_bus_error_set(error, manager_err_dbus_name(err.kind), err.message);
	return sd_bus_reply_method_return(m, "");
}

static int do_rollback(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	struct manager_error err = { 0 };
	const char *name;
	uint32_t version;
	int r;

	r = sd_bus_message_read(m, "su", &name, &version);
	if (r < 0)
		return r;
	r = manager_adapter_rollback(f->manager, name, version, &err);
	if (r < 0)
		return sd_bus_error_set(error, manager_err_dbus_name(err.kind), err.message);
	log_info("adapter %s rolled back to version %u", name, version);
	return sd_bus_reply_method_return(m, "");
}

static int do_remove(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	struct manager_error err = { 0 };
	const char *name;
	int r;

	r = sd_bus_message_read(m, "s", &name);
	if (r < 0)
		return r;
	r = manager_adapter_remove(f->manager, name, &err);
	if (r < 0)
		return sd_bus_error_set(error,
					r == -EBUSY ? "org.molly.Error.Busy"
						    : manager_err_dbus_name(err.kind),
					err.message);
	log_info("adapter removed: %s", name);
	return sd_bus_reply_method_return(m, "");
}

static int do_gc(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	struct manager_error err = { 0 };
	uint32_t blobs = 0;
	uint64_t bytes = 0;
	int r;

	r = manager_adapter_gc(f->manager, &blobs, &bytes, &err);
	if (r < 0)
		return sd_bus_error_set(error, manager_err_dbus_name(err.kind), err.message);
	log_info("adapter gc: %u blobs, %" PRIu64 " bytes removed", blobs, bytes);
	return sd_bus_reply_method_return(m, "ut", blobs, bytes);
}

/* History(s name) → a(ussxs): version, hash, created (RFC 3339, UTC), bytes, provenance
 * ("FORMAT SOURCE (IMPORTER)"). Readable like List. */
static int history_one(const struct registry_version *v, void *ud)
{
	sd_bus_message *reply = ud;
	char created[40], prov[4500];
	time_t t = (time_t) (v->created_ns / 1000000000ull);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(prov, sizeof(prov), "%s %s (%s)", v->format ?: "?", v->source ?: "",
		 v->importer ?: "");
	int r = sd_bus_message_append(reply, "(ussxs)", v->version, v->hash_hex, created,
				      (int64_t) v->bytes, prov);

	return r < 0 ? r : 0; /* non-zero stops the walk */
}

static int method_history(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	struct dbus_front *f = userdata;
	struct manager_error err = { 0 };
	const char *name;
	int r;

	r = sd_bus_message_read(m, "s", &name);
	if (r < 0)
		return r;
	r = sd_bus_message_new_method_return(m, &reply);
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "(ussxs)");
	if (r < 0)
		return r;
	r = manager_adapter_history(f->manager, name, history_one, reply, &err);
	if (r < 0 && err.kind != MANAGER_ERR_NONE)
		return sd_bus_error_set(error, manager_err_dbus_name(err.kind), err.message);
	if (r < 0)
		return r;
	r = sd_bus_message_close_container(reply);
	if (r < 0)
		return r;
	return sd_bus_send(NULL, reply, NULL);
}

static int do_reload(struct dbus_front *f, sd_bus_message *m, sd_bus_error *error)
{
	struct errmsg e = { { 0 } };
	int r;

	if (!f->hooks.reload)
		return sd_bus_error_set(error, SD_BUS_ERROR_NOT_SUPPORTED,
					"reload is not available");
	r = f->hooks.reload(f->hooks.userdata, &e);
	if (r < 0)
		return sd_bus_error_setf(error, "org.molly.Error.ReloadFailed",
					 "the configuration was not reloaded: %s", e.text);
	return sd_bus_reply_method_return(m, "");
}

#define ADMIN_METHOD(name, fn)                                                                     \
	static int method_##name(sd_bus_message *m, void *userdata, sd_bus_error *error)           \
	{                                                                                          \
		return authorize(userdata, m, error, fn);                                          \
	}
ADMIN_METHOD(import, do_import)
ADMIN_METHOD(load, do_load)
ADMIN_METHOD(unload, do_unload)
ADMIN_METHOD(pin, do_pin_true)
ADMIN_METHOD(unpin, do_pin_false)
ADMIN_METHOD(prefetch, do_prefetch)
ADMIN_METHOD(rollback, do_rollback)
ADMIN_METHOD(remove, do_remove)
ADMIN_METHOD(gc, do_gc)

int dbus_method_reload(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	return authorize(userdata, m, error, do_reload);
}

const sd_bus_vtable dbus_adapters_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_METHOD_WITH_NAMES("List", "", , "a(ssa{sv})", SD_BUS_PARAM(adapters), method_list,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Import", "sa{sv}", SD_BUS_PARAM(path) SD_BUS_PARAM(options), "s",
				 SD_BUS_PARAM(name), method_import, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Load", "s", SD_BUS_PARAM(name), "", , method_load,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Unload", "s", SD_BUS_PARAM(name), "", , method_unload,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Pin", "s", SD_BUS_PARAM(name), "", , method_pin,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Unpin", "s", SD_BUS_PARAM(name), "", , method_unpin,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Prefetch", "s", SD_BUS_PARAM(name), "", , method_prefetch,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("History", "s", SD_BUS_PARAM(name), "a(ussxs)",
				 SD_BUS_PARAM(versions), method_history, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Rollback", "su", SD_BUS_PARAM(name) SD_BUS_PARAM(version), "",
				 , method_rollback, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Remove", "s", SD_BUS_PARAM(name), "", , method_remove,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD_WITH_NAMES("Gc", "", , "ut", SD_BUS_PARAM(blobs) SD_BUS_PARAM(bytes),
				 method_gc, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END,
};

void dbus_admin_cancel_auths(struct dbus_front *f)
{
	struct auth *a = auths, *next;

	for (; a; a = next) {
		next = a->next;
		if (a->front != f)
			continue;
		(void) sd_bus_reply_method_errorf(a->call, "org.molly.Error.Cancelled",
						  "the daemon is stopping");
		auth_free(a);
	}
}
