/* SPDX-License-Identifier: MIT */
/*
 * dev.c: the /dev/molly front over kmod-shim's control node (see dev.h).
 *
 * A request (struct devreq) is referenced by the loop until manager_submit() has returned and
 * by the manager until its final event; whichever lets go last frees it. The table of live
 * requests (by the kernel's id) lets a MOLLY_CTL_CANCEL record reach the manager.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include <linux/molly.h>

#include "../core/config.h"
#include "../core/log.h"
#include "../engine/chat.h"
#include "../manager.h"
#include "dev-internal.h"
#include "dev.h"

#define DEV_READ_BYTES (sizeof(struct molly_ctl_msg) + MOLLY_TEXT_MAX + 8)
#define DEV_MESSAGES_MAX 4096
#define DEV_TEXT_CHUNK (MOLLY_EVENT_MAX - sizeof(struct molly_event))
#define DEV_FREE_WAIT_NS (5ull * 1000000000ull)

struct devreq {
	struct devreq *prev, *next;     /* f->reqs, under f->lock */
	struct dev_front *front;
	dev_post_fn post;               /* where its events go: the control node, or a CUSE file */
	void *post_ud;
	uint64_t kid;                   /* the id clients see (the kernel's, or the CUSE server's) */
	uint64_t mid;                   /* the manager's id (valid once submitted) */
	bool submitted;
	int n_ref;                      /* under f->lock */
};

struct dev_front {
	struct manager *manager;        /* borrowed */
	sd_event *event;
	int fd;                         /* the control node, or -EBADF */
	sd_event_source *io;
	sd_event_source *watch;         /* inotify on /dev while the node is missing */
	char path[256];
	char *buf;                      /* DEV_READ_BYTES */
	struct dev_cuse *cuse;          /* the CUSE server when the module is absent, or NULL */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct devreq *reqs;
	size_t n_reqs;
};

static void set_status(struct dev_front *f, const char *fmt, ...) _printf_(2, 3);

static void set_status(struct dev_front *f, const char *fmt, ...)
{
	char s[256];
	va_list ap;

	va_start(ap, fmt);
	(void) vsnprintf(s, sizeof(s), fmt, ap);
	va_end(ap);
	manager_set_device_status(f->manager, s);
}

/* ---- writing events (any thread) ---- */

static void ctl_post(void *userdata, const struct molly_event *ev)
{
	struct dev_front *f = userdata;
	ssize_t n = write(f->fd, ev, ev->size);

	/* -ENOENT: the kernel ended it already (its daemon side was reset); nothing to do. */
	if (n < 0 && errno != ENOENT)
		log_debug("dev: writing an event for request %" PRIu64 ": %m", (uint64_t) ev->id);
}

static uint32_t err_kind_to_molly(enum manager_err k)
{
	switch (k) {
	case MANAGER_ERR_INVALID_REQUEST: return MOLLY_ERR_INVALID_REQUEST;
	case MANAGER_ERR_MODEL_NOT_FOUND: return MOLLY_ERR_MODEL_NOT_FOUND;
	case MANAGER_ERR_CONTEXT_LENGTH: return MOLLY_ERR_CONTEXT_LENGTH;
	case MANAGER_ERR_FORBIDDEN: return MOLLY_ERR_FORBIDDEN;
	case MANAGER_ERR_QUEUE_FULL: return MOLLY_ERR_QUEUE_FULL;
	case MANAGER_ERR_UNAVAILABLE: return MOLLY_ERR_UNAVAILABLE;
	case MANAGER_ERR_CANCELLED: return MOLLY_ERR_CANCELLED;
	default: return MOLLY_ERR_INTERNAL;
	}
}

static void send_error(dev_post_fn post, void *ud, uint64_t kid, enum manager_err kind,
		       int error, const char *message)
{
	struct {
		struct molly_event ev;
		struct molly_error e;
	} rec = { 0 };

	rec.ev.size = sizeof(rec);
	rec.ev.type = MOLLY_EVENT_ERROR;
	rec.ev.id = kid;
	rec.ev.len = sizeof(rec.e);
	rec.e.error = error;
	rec.e.kind = err_kind_to_molly(kind);
	snprintf(rec.e.name, sizeof(rec.e.name), "%s", manager_err_dbus_name(kind));
	snprintf(rec.e.message, sizeof(rec.e.message), "%.*s", (int) sizeof(rec.e.message) - 1,
		 message);
	post(ud, &rec.ev);
}

/* TEXT records of at most MOLLY_EVENT_MAX bytes, cut between UTF-8 characters. */
static void send_text(dev_post_fn post, void *ud, uint64_t kid, const char *text, size_t len)
{
	union {
		struct molly_event ev;
		char bytes[MOLLY_EVENT_MAX];
	} rec;

	while (len > 0) {
		size_t n = len < DEV_TEXT_CHUNK ? len : DEV_TEXT_CHUNK;

		/* Back off to a character boundary (continuation bytes are 10xxxxxx). */
		while (n < len && n > 1 && ((unsigned char) text[n] & 0xC0) == 0x80)
			n--;
		memset(&rec.ev, 0, sizeof(rec.ev));
		rec.ev.type = MOLLY_EVENT_TEXT;
		rec.ev.id = kid;
		rec.ev.len = (uint32_t) n;
		rec.ev.size = (uint32_t) ((sizeof(rec.ev) + n + 7) & ~(size_t) 7);
		memcpy(rec.bytes + sizeof(rec.ev), text, n);
		memset(rec.bytes + sizeof(rec.ev) + n, 0, rec.ev.size - sizeof(rec.ev) - n);
		post(ud, &rec.ev);
		text += n;
		len -= n;
	}
}

static void send_done(dev_post_fn post, void *ud, uint64_t kid, const struct manager_event *mev)
{
	struct {
		struct molly_event ev;
		struct molly_done d;
	} rec = { 0 };

	rec.ev.size = sizeof(rec);
	rec.ev.type = MOLLY_EVENT_DONE;
	rec.ev.id = kid;
	rec.ev.len = sizeof(rec.d);
	rec.d.prompt_tokens = mev->prompt_tokens;
	rec.d.completion_tokens = mev->completion_tokens;
	if (mev->has_confidence) {
		rec.d.flags |= MOLLY_DONE_CONFIDENCE;
		rec.d.confidence_micro = (uint32_t) (mev->confidence * 1e6f);
	}
	snprintf(rec.d.finish_reason, sizeof(rec.d.finish_reason), "%s",
		 mev->finish_reason ? mev->finish_reason : "");
	snprintf(rec.d.model, sizeof(rec.d.model), "%s", mev->model ? mev->model : "");
	snprintf(rec.d.target, sizeof(rec.d.target), "%s", mev->target ? mev->target : "");
	post(ud, &rec.ev);
}

/* ---- the request table ---- */

static void devreq_unref(struct devreq *r)
{
	struct dev_front *f = r->front;
	bool last;

	pthread_mutex_lock(&f->lock);
	last = --r->n_ref == 0;
	if (last) {
		if (r->prev)
			r->prev->next = r->next;
		else
			f->reqs = r->next;
		if (r->next)
			r->next->prev = r->prev;
		f->n_reqs--;
		pthread_cond_broadcast(&f->cond);
	}
	pthread_mutex_unlock(&f->lock);
	if (last)
		free(r);
}

/* Scheduler thread: copy out and let go; the final event drops the manager's reference. */
static void dev_event(const struct manager_event *ev, void *userdata)
{
	struct devreq *r = userdata;

	switch (ev->type) {
	case MANAGER_EVENT_TEXT:
		send_text(r->post, r->post_ud, r->kid, ev->text, ev->text_len);
		return;
	case MANAGER_EVENT_DONE:
		send_done(r->post, r->post_ud, r->kid, ev);
		break;
	case MANAGER_EVENT_ERROR:
		send_error(r->post, r->post_ud, r->kid,
			   ev->error ? ev->error->kind : MANAGER_ERR_INTERNAL,
			   ev->error ? ev->error->error : -EIO,
			   ev->error ? ev->error->message : "the request failed");
		break;
	}
	devreq_unref(r);
}

/* ---- reading requests (loop) ---- */

static const char *const class_names[] = {
	[MOLLY_CLASS_NONE] = NULL,
	[MOLLY_CLASS_PUBLIC] = "public",
	[MOLLY_CLASS_PERSONAL] = "personal",
	[MOLLY_CLASS_SECRET] = "secret",
};

/* Parses a chat request's JSON array of {"role", "content"} into msgs (borrowing from root). */
static int parse_messages(json_object *root, struct chat_message **ret, size_t *ret_n,
			  char *why, size_t why_len)
{
	struct chat_message *msgs;
	size_t n;

	if (!json_object_is_type(root, json_type_array)) {
		snprintf(why, why_len, "a chat request's text must be a JSON array of messages");
		return -EINVAL;
	}
	n = json_object_array_length(root);
	if (n == 0 || n > DEV_MESSAGES_MAX) {
		snprintf(why, why_len, "messages: 1 to %d entries", DEV_MESSAGES_MAX);
		return -EINVAL;
	}
	msgs = calloc(n, sizeof(*msgs));
	if (!msgs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		json_object *m = json_object_array_get_idx(root, i), *role, *content;

		if (!json_object_is_type(m, json_type_object) ||
		    !json_object_object_get_ex(m, "role", &role) ||
		    !json_object_object_get_ex(m, "content", &content) ||
		    !json_object_is_type(role, json_type_string) ||
		    !json_object_is_type(content, json_type_string)) {
			snprintf(why, why_len,
				 "messages[%zu]: an object with string 'role' and 'content'", i);
			free(msgs);
			return -EINVAL;
		}
		msgs[i].role = json_object_get_string(role);
		msgs[i].content = json_object_get_string(content);
	}
	*ret = msgs;
	*ret_n = n;
	return 0;
}

void dev_front_submit(struct dev_front *f, const struct molly_submit *s, const char *text,
		      size_t text_len, const struct dev_origin *o, uint64_t kid, dev_post_fn post,
		      void *post_ud)
{
	_cleanup_(config_unrefp) struct config *cfg = manager_get_config(f->manager);
	struct manager_caller caller = { .uid = o->uid, .front = "dev" };
	struct manager_error err = { 0 };
	struct manager_request req;
	const struct config_member *mem;
	json_object *root = NULL;
	struct chat_message *msgs = NULL;
	_cleanup_free_ char *prompt = NULL;
	struct devreq *r;
	char why[200];
	int k;

	/* The server checked the fixed part; what it cannot know is checked here. */
	if (text_len != s->text_len || s->text_len == 0 ||
	    memchr(s->model, 0, sizeof(s->model)) == NULL) {
		send_error(post, post_ud, kid, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			   "malformed request record");
		return;
	}
	manager_request_init(&req);
	if (memchr(text, 0, s->text_len)) {
		send_error(post, post_ud, kid, MANAGER_ERR_INVALID_REQUEST, -EINVAL,
			   "the text holds a NUL byte");
		return;
	}
	prompt = strndup(text, s->text_len);
	if (!prompt) {
		send_error(post, post_ud, kid, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
		return;
	}
	if (s->flags & MOLLY_SUBMIT_CHAT) {
		enum json_tokener_error jerr;

		root = json_tokener_parse_verbose(prompt, &jerr);
		if (!root) {
			snprintf(why, sizeof(why), "messages: not JSON (%s)",
				 json_tokener_error_desc(jerr));
			send_error(post, post_ud, kid, MANAGER_ERR_INVALID_REQUEST, -EINVAL, why);
			return;
		}
		k = parse_messages(root, &msgs, &req.n_messages, why, sizeof(why));
		if (k < 0) {
			send_error(post, post_ud, kid, k == -ENOMEM ? MANAGER_ERR_INTERNAL
							    : MANAGER_ERR_INVALID_REQUEST,
				   k, k == -ENOMEM ? "out of memory" : why);
			json_object_put(root);
			return;
		}
		req.messages = msgs;
	} else {
		req.prompt = prompt;
	}
	req.model = s->model[0] ? s->model : NULL;
	req.max_tokens = s->max_tokens;
	req.temperature = (float) s->temperature_milli / 1000.0f;
	req.top_p = s->top_p_milli == 0 ? 1.0f : (float) s->top_p_milli / 1000.0f;
	req.has_seed = s->flags & MOLLY_SUBMIT_SEED;
	req.seed = s->seed;
	req.ignore_eos = s->flags & MOLLY_SUBMIT_IGNORE_EOS;
	req.declared_class = s->declared_class < ELEMENTSOF(class_names)
				     ? class_names[s->declared_class]
				     : NULL;
	/* The uid is the kernel's: a local user listed in a member's UIDs= gets its scopes. */
	mem = config_find_member_by_uid(cfg, o->uid);
	caller.member = mem ? mem->name : NULL;

	r = calloc(1, sizeof(*r));
	if (!r) {
		send_error(post, post_ud, kid, MANAGER_ERR_INTERNAL, -ENOMEM, "out of memory");
		goto out;
	}
	r->front = f;
	r->kid = kid;
	r->post = post;
	r->post_ud = post_ud;
	r->n_ref = 2; /* this function, and the manager until the final event */
	pthread_mutex_lock(&f->lock);
	r->next = f->reqs;
	if (f->reqs)
		f->reqs->prev = r;
	f->reqs = r;
	f->n_reqs++;
	pthread_mutex_unlock(&f->lock);

	log_debug("dev: request %" PRIu64 " from uid %u pid %u (%s), cgroup %" PRIu64, kid,
		  o->uid, o->pid, o->comm, o->cgroup_id);
	k = manager_submit(f->manager, &req, &caller, dev_event, r, &r->mid, &err);
	if (k < 0) {
		send_error(post, post_ud, kid, err.kind, k, err.message);
		pthread_mutex_lock(&f->lock);
		r->n_ref--; /* the manager never took its reference */
		pthread_mutex_unlock(&f->lock);
	} else {
		pthread_mutex_lock(&f->lock);
		r->submitted = true;
		pthread_mutex_unlock(&f->lock);
	}
	devreq_unref(r);
out:
	free(msgs);
	if (root)
		json_object_put(root);
}

void dev_front_cancel(struct dev_front *f, uint64_t kid)
{
	uint64_t mid = 0;

	pthread_mutex_lock(&f->lock);
	for (struct devreq *r = f->reqs; r; r = r->next)
		if (r->kid == kid && r->submitted) {
			mid = r->mid;
			break;
		}
	pthread_mutex_unlock(&f->lock);
	/* Not found: it ended already, its final event is on its way. */
	if (mid)
		(void) manager_cancel(f->manager, mid);
}

static void close_node(struct dev_front *f);
static int watch_dev(struct dev_front *f);

static int on_ctl_io(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct dev_front *f = userdata;
	char comm[sizeof(((struct molly_ctl_msg *) 0)->comm) + 1];
	ssize_t n;

	if (revents & (EPOLLERR | EPOLLHUP)) {
		log_warning("dev: %s reports an error; closing it", f->path);
		close_node(f);
		return 0;
	}
	n = read(fd, f->buf, DEV_READ_BYTES);
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		log_warning("dev: reading %s: %m; closing it", f->path);
		close_node(f);
		return 0;
	}
	for (size_t off = 0; off + sizeof(struct molly_ctl_msg) <= (size_t) n ||
			     off + 16 <= (size_t) n;) {
		const struct molly_ctl_msg *msg = (const void *) (f->buf + off);

		if (msg->size < 16 || msg->size > (size_t) n - off)
			break; /* the kernel writes whole records; stop at anything else */
		if (msg->type == MOLLY_CTL_SUBMIT && msg->size >= sizeof(*msg)) {
			struct dev_origin o = { .uid = msg->uid, .gid = msg->gid, .pid = msg->pid,
						.cgroup_id = msg->cgroup_id, .comm = comm };
			size_t text_len = msg->size - sizeof(*msg);

			memcpy(comm, msg->comm, sizeof(msg->comm));
			comm[sizeof(msg->comm)] = 0;
			/* the record is padded to 8 bytes: the text is what submit says */
			if (msg->submit.text_len <= text_len)
				text_len = msg->submit.text_len;
			dev_front_submit(f, &msg->submit, (const char *) (msg + 1), text_len, &o,
					 msg->id, ctl_post, f);
		} else if (msg->type == MOLLY_CTL_CANCEL) {
			dev_front_cancel(f, msg->id);
		}
		off += msg->size;
	}
	return 0;
}

static int open_node(struct dev_front *f)
{
	struct molly_version v = { .size = sizeof(v) };
	int fd, k;

	fd = open(f->path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, MOLLY_IOC_VERSION, &v) < 0) {
		k = -errno;
		close(fd);
		set_status(f, "off: %s is not a molly control node (%s)", f->path, strerror(-k));
		return k;
	}
	if (v.abi_version != MOLLY_ABI_VERSION) {
		close(fd);
		set_status(f, "off: %s speaks ABI %u, this daemon %u", f->path, v.abi_version,
			   MOLLY_ABI_VERSION);
		return -EPROTO;
	}
	k = sd_event_add_io(f->event, &f->io, fd, EPOLLIN, on_ctl_io, f);
	if (k < 0) {
		close(fd);
		return k;
	}
	f->fd = fd;
	set_status(f, "kernel (%s)", f->path);
	log_info("dev: serving /dev/molly through %s (kmod-shim, ABI %u)", f->path,
		 v.abi_version);
	return 0;
}

static void close_node(struct dev_front *f)
{
	f->io = sd_event_source_disable_unref(f->io);
	if (f->fd >= 0) {
		/* The kernel ends what is pending with an error for its clients. */
		close(f->fd);
		f->fd = -EBADF;
	}
	set_status(f, "off: %s was closed; waiting for it to come back", f->path);
	(void) watch_dev(f);
}

static int on_dev_change(sd_event_source *s, const struct inotify_event *ev, void *userdata)
{
	struct dev_front *f = userdata;
	int k;

	if (f->fd >= 0)
		return 0;
	k = open_node(f);
	if (k == 0)
		f->watch = sd_event_source_disable_unref(f->watch);
	else if (k != -ENOENT)
		log_debug("dev: %s appeared but does not open yet: %s", f->path, strerror(-k));
	return 0;
}

/* Watches the node's directory for its creation (the module loaded after the daemon). */
static int watch_dev(struct dev_front *f)
{
	_cleanup_free_ char *dir = strdup(f->path);
	char *slash;
	int k;

	if (f->watch)
		return 0;
	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return -EINVAL;
	*slash = 0;
	k = sd_event_add_inotify(f->event, &f->watch, dir, IN_CREATE | IN_ATTRIB | IN_ONLYDIR,
				 on_dev_change, f);
	if (k < 0)
		return k;
	/* It may have appeared between the failed open and the watch. */
	if (open_node(f) == 0)
		f->watch = sd_event_source_disable_unref(f->watch);
	return 0;
}

struct manager *dev_front_manager(struct dev_front *f)
{
	return f->manager;
}

int dev_front_new(sd_event *event, struct manager *m, int cuse_fd, struct dev_front **ret,
		  struct errmsg *e)
{
	struct dev_front *f;
	const char *path = getenv("MOLLY_DEV_CONTROL");
	int k;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->buf = malloc(DEV_READ_BYTES);
	if (!f->buf) {
		free(f);
		return -ENOMEM;
	}
	f->manager = m;
	f->event = sd_event_ref(event);
	f->fd = -EBADF;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	snprintf(f->path, sizeof(f->path), "%s", path && *path ? path : MOLLY_CONTROL_PATH);

	k = open_node(f);
	if (k == -ENOENT && cuse_fd >= 0) {
		set_status(f, "cuse: starting (%s is absent)", f->path);
		k = dev_cuse_start(f, TAKE_FD(cuse_fd), "molly", &f->cuse);
		if (k < 0) {
			set_status(f, "off: %s is absent and CUSE failed: %s", f->path,
				    strerror(-k));
			log_warning("dev: %s is absent and CUSE failed: %s; the device is off",
				    f->path, strerror(-k));
		}
	} else if (k == -ENOENT) {
		set_status(f, "off: %s is absent (kmod-shim not loaded); watching for it", f->path);
		log_info("dev: %s is absent (kmod-shim not loaded); watching for it", f->path);
		k = watch_dev(f);
		if (k < 0)
			log_warning("dev: cannot watch for %s: %s", f->path, strerror(-k));
	} else if (k < 0) {
		set_status(f, "off: %s: %s", f->path, strerror(-k));
		log_warning("dev: %s: %s; the device is off", f->path, strerror(-k));
	}
	if (cuse_fd >= 0)
		close(cuse_fd); /* the module is there (or its node is busy): CUSE is not needed */
	*ret = f;
	return 0;
}

struct dev_front *dev_front_free(struct dev_front *f)
{
	struct timespec deadline;
	bool timed_out = false;
	uint64_t *mids = NULL;
	size_t n = 0;

	if (!f)
		return NULL;
	f->watch = sd_event_source_disable_unref(f->watch);
	f->io = sd_event_source_disable_unref(f->io);
	(void) dev_cuse_stop(f->cuse); /* no new calls; events still reach the files */
	/* Cancel what is in flight (outside our lock: the events take it) and wait for the final
	 * events, which still go to the node. */
	pthread_mutex_lock(&f->lock);
	mids = calloc(f->n_reqs + 1, sizeof(*mids));
	for (struct devreq *r = f->reqs; r && mids; r = r->next)
		if (r->submitted)
			mids[n++] = r->mid;
	pthread_mutex_unlock(&f->lock);
	for (size_t i = 0; i < n; i++)
		(void) manager_cancel(f->manager, mids[i]);
	free(mids);
	pthread_mutex_lock(&f->lock);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += DEV_FREE_WAIT_NS / 1000000000ull;
	while (f->n_reqs > 0 && !timed_out)
		timed_out = pthread_cond_timedwait(&f->cond, &f->lock, &deadline) == ETIMEDOUT;
	pthread_mutex_unlock(&f->lock);
	if (timed_out) {
		/* Events may still come for them: keep the front (a leak, never a use after free). */
		log_warning("dev: %zu requests did not finish; leaving them", f->n_reqs);
		return NULL;
	}
	f->cuse = dev_cuse_free(f->cuse);
	if (f->fd >= 0)
		close(f->fd);
	sd_event_unref(f->event);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f->buf);
	free(f);
	return NULL;
}
