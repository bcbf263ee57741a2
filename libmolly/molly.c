/* SPDX-License-Identifier: MIT */
/*
 * molly.c: libmolly (include/molly/molly.h). Two transports behind one handle:
 *
 *  dev:  /dev/molly (include/uapi/linux/molly.h): write() the text, MOLLY_IOC_SUBMIT, read()
 *        whole event records into a buffer and hand them out one by one.
 *  dbus: org.molly.Inference1.Stream per request; each reply's pipe joins one epoll set (the
 *        handle's fd) and its JSON lines become the same events.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include <linux/molly.h>
#include <molly/molly.h>

#define MOLLY_EXPORT __attribute__((visibility("default")))
#define READ_BUF (4 * MOLLY_EVENT_MAX)
#define LINE_MAX_BYTES (1u << 20)

struct stream {
	struct stream *next;
	uint64_t id;
	int fd;
	char path[96];
	char *buf;       /* a partial line */
	size_t n, cap;
	bool ended;      /* final line seen */
};

struct molly {
	enum molly_transport transport;
	char error[512];
	/* dev */
	int fd;
	char buf[READ_BUF] __attribute__((aligned(8)));
	size_t off, len;            /* records in buf not yet handed out */
	/* dbus */
	sd_bus *bus;
	int epfd;
	struct stream *streams;
	struct stream *done;        /* the stream whose last event was handed out: freed next call */
	json_object *last;          /* the parsed line behind the last event */
	char *line;                 /* the line being handed out */
};

static int set_error(struct molly *h, int r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int set_error(struct molly *h, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void) vsnprintf(h->error, sizeof(h->error), fmt, ap);
	va_end(ap);
	return r;
}

MOLLY_EXPORT void molly_params_init(struct molly_params *p)
{
	memset(p, 0, sizeof(*p));
	p->temperature = 1.0;
	p->top_p = 1.0;
}

/* ---- dev ---- */

static int dev_open(struct molly *h)
{
	const char *path = getenv("MOLLY_DEVICE");
	struct molly_version v = { .size = sizeof(v) };

	h->fd = open(path && *path ? path : MOLLY_DEVICE_PATH, O_RDWR | O_CLOEXEC | O_NONBLOCK);
	if (h->fd < 0)
		return -errno;
	if (ioctl(h->fd, MOLLY_IOC_VERSION, &v) < 0) {
		int r = -errno;
		close(h->fd);
		h->fd = -1;
		return r;
	}
	if (v.abi_version != MOLLY_ABI_VERSION) {
		close(h->fd);
		h->fd = -1;
		return -EPROTO;
	}
	return 0;
}

static int class_from_name(const char *name, uint32_t *ret)
{
	static const char *const names[] = { "public", "personal", "secret" };

	if (!name || !*name) {
		*ret = MOLLY_CLASS_NONE;
		return 0;
	}
	for (unsigned i = 0; i < 3; i++)
		if (strcmp(name, names[i]) == 0) {
			*ret = MOLLY_CLASS_PUBLIC + i;
			return 0;
		}
	return -EINVAL;
}

static uint32_t milli(double v)
{
	if (!(v > 0))
		return 0;
	if (v > 4000000.0)
		return 4000000000u;
	return (uint32_t) (v * 1000.0 + 0.5);
}

static int dev_submit(struct molly *h, const struct molly_params *p, uint64_t *ret_id)
{
	struct molly_submit s = { .size = sizeof(s) };
	const char *text = p->prompt ? p->prompt : p->messages_json;
	size_t len = strlen(text), done = 0;

	if (len == 0 || len > MOLLY_TEXT_MAX)
		return set_error(h, -EINVAL, "the text must be 1 to %u bytes", MOLLY_TEXT_MAX);
	if (p->model && strlen(p->model) >= sizeof(s.model))
		return set_error(h, -EINVAL, "the model name is longer than %zu bytes",
				 sizeof(s.model) - 1);
	if (class_from_name(p->declared_class, &s.declared_class) < 0)
		return set_error(h, -EINVAL, "class: '%s' is not public, personal or secret",
				 p->declared_class);
	if (p->model)
		memcpy(s.model, p->model, strlen(p->model));
	s.flags = (p->messages_json && !p->prompt ? MOLLY_SUBMIT_CHAT : 0) |
		  (p->has_seed ? MOLLY_SUBMIT_SEED : 0) |
		  (p->ignore_eos ? MOLLY_SUBMIT_IGNORE_EOS : 0);
	s.text_len = (uint32_t) len;
	s.max_tokens = p->max_tokens;
	s.temperature_milli = milli(p->temperature);
	s.top_p_milli = p->top_p >= 1.0 ? 0 : milli(p->top_p);
	s.seed = p->seed;
	while (done < len) {
		ssize_t n = write(h->fd, text + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return set_error(h, -errno, "writing the request: %s", strerror(errno));
		}
		done += (size_t) n;
	}
	if (ioctl(h->fd, MOLLY_IOC_SUBMIT, &s) < 0) {
		int r = -errno;
		return set_error(h, r, "%s", r == -ENOTCONN ? "no daemon serves /dev/molly"
				 : r == -EAGAIN ? "too many requests in flight"
						: strerror(-r));
	}
	*ret_id = s.id;
	return 0;
}

static int dev_next(struct molly *h, struct molly_output *o, int timeout_ms)
{
	const struct molly_event *ev;

	while (h->off >= h->len) {
		ssize_t n = read(h->fd, h->buf, sizeof(h->buf));
		if (n > 0) {
			h->off = 0;
			h->len = (size_t) n;
			break;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = h->fd, .events = POLLIN };
			int k = poll(&pfd, 1, timeout_ms);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				return -errno;
			if (k == 0)
				return 0;
			continue;
		}
		return n == 0 ? -EPIPE : -errno;
	}
	ev = (const struct molly_event *) (h->buf + h->off);
	if (h->len - h->off < sizeof(*ev) || ev->size < sizeof(*ev) || ev->size > h->len - h->off ||
	    ev->len > ev->size - sizeof(*ev))
		return set_error(h, -EPROTO, "a malformed event record");
	h->off += ev->size;
	memset(o, 0, sizeof(*o));
	o->id = ev->id;
	o->type = (enum molly_output_type) ev->type;
	switch (ev->type) {
	case MOLLY_EVENT_TEXT:
		o->text = (const char *) (ev + 1);
		o->text_len = ev->len;
		return 1;
	case MOLLY_EVENT_DONE: {
		struct molly_done *d = (struct molly_done *) (ev + 1);
		if (ev->len < sizeof(*d))
			return set_error(h, -EPROTO, "a short DONE record");
		d->finish_reason[sizeof(d->finish_reason) - 1] = 0;
		d->model[sizeof(d->model) - 1] = 0;
		d->target[sizeof(d->target) - 1] = 0;
		o->finish_reason = d->finish_reason;
		o->prompt_tokens = d->prompt_tokens;
		o->completion_tokens = d->completion_tokens;
		o->model = d->model;
		o->target = d->target;
		return 1;
	}
	case MOLLY_EVENT_ERROR: {
		struct molly_error *e = (struct molly_error *) (ev + 1);
		if (ev->len < sizeof(*e))
			return set_error(h, -EPROTO, "a short ERROR record");
		e->name[sizeof(e->name) - 1] = 0;
		e->message[sizeof(e->message) - 1] = 0;
		o->error_name = e->name;
		o->error_message = e->message;
		return 1;
	}
	default:
		return set_error(h, -EPROTO, "an event of unknown type %u", ev->type);
	}
}

/* ---- dbus ---- */

static int errno_from_bus_error(const sd_bus_error *e, int r)
{
	if (!e->name)
		return r;
	if (strcmp(e->name, "org.molly.Error.QueueFull") == 0)
		return -EAGAIN;
	if (strcmp(e->name, "org.molly.Error.ModelNotFound") == 0)
		return -ENOENT;
	if (strcmp(e->name, "org.freedesktop.DBus.Error.AccessDenied") == 0)
		return -EACCES;
	if (strcmp(e->name, "org.molly.Error.Unavailable") == 0)
		return -ENOTCONN;
	if (strcmp(e->name, "org.molly.Error.InvalidRequest") == 0 ||
	    strcmp(e->name, "org.molly.Error.ContextLengthExceeded") == 0)
		return -EINVAL;
	return r < 0 ? r : -EIO;
}

static int append_messages(sd_bus_message *m, const char *json)
{
	json_object *root = json_tokener_parse(json);
	int r;

	if (!root || !json_object_is_type(root, json_type_array)) {
		json_object_put(root);
		return -EINVAL;
	}
	r = sd_bus_message_append(m, "s", "messages");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'v', "aa{ss}");
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "a{ss}");
	for (size_t i = 0; r >= 0 && i < json_object_array_length(root); i++) {
		json_object *msg = json_object_array_get_idx(root, i), *role, *content;
		if (!json_object_object_get_ex(msg, "role", &role) ||
		    !json_object_object_get_ex(msg, "content", &content)) {
			r = -EINVAL;
			break;
		}
		r = sd_bus_message_append(m, "a{ss}", 2, "role", json_object_get_string(role),
					  "content", json_object_get_string(content));
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	json_object_put(root);
	return r;
}

static int dbus_append_request(sd_bus_message *m, const struct molly_params *p)
{
	int r = sd_bus_message_open_container(m, 'a', "{sv}");

#define ENTRY(sig, key, ...)                                                              \
	do {                                                                              \
		if (r >= 0)                                                               \
			r = sd_bus_message_append(m, "{sv}", key, sig, __VA_ARGS__);      \
	} while (0)
	if (p->prompt)
		ENTRY("s", "prompt", p->prompt);
	else if (r >= 0) {
		r = sd_bus_message_open_container(m, 'e', "sv");
		if (r >= 0)
			r = append_messages(m, p->messages_json);
		if (r >= 0)
			r = sd_bus_message_close_container(m);
	}
	if (p->model && *p->model)
		ENTRY("s", "model", p->model);
	if (p->max_tokens)
		ENTRY("u", "max_tokens", p->max_tokens);
	ENTRY("d", "temperature", p->temperature);
	if (p->top_p < 1.0)
		ENTRY("d", "top_p", p->top_p);
	if (p->has_seed)
		ENTRY("t", "seed", p->seed);
	if (p->ignore_eos)
		ENTRY("b", "ignore_eos", 1);
	if (p->declared_class)
		ENTRY("s", "class", p->declared_class);
#undef ENTRY
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r;
}

static int dbus_submit(struct molly *h, const struct molly_params *p, uint64_t *ret_id)
{
	sd_bus_message *m = NULL, *reply = NULL;
	sd_bus_error error = SD_BUS_ERROR_NULL;
	struct stream *s = NULL;
	const char *path, *slash;
	int fd, r;

	r = sd_bus_message_new_method_call(h->bus, &m, "org.molly.Daemon1", "/org/molly/Daemon1",
					   "org.molly.Inference1", "Stream");
	if (r >= 0)
		r = dbus_append_request(m, p);
	if (r < 0) {
		r = set_error(h, r, "building the request: %s", strerror(-r));
		goto out;
	}
	r = sd_bus_call(h->bus, m, 0, &error, &reply);
	if (r < 0) {
		r = set_error(h, errno_from_bus_error(&error, r), "%s: %s",
			      error.name ? error.name : "D-Bus",
			      error.message ? error.message : strerror(-r));
		goto out;
	}
	r = sd_bus_message_read(reply, "ho", &fd, &path);
	if (r < 0)
		goto out;
	slash = strrchr(path, '/');
	s = calloc(1, sizeof(*s));
	if (!s) {
		r = -ENOMEM;
		goto out;
	}
	s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (s->fd < 0) {
		r = -errno;
		free(s);
		goto out;
	}
	s->id = slash ? strtoull(slash + 1, NULL, 10) : 0;
	snprintf(s->path, sizeof(s->path), "%s", path);
	r = epoll_ctl(h->epfd, EPOLL_CTL_ADD, s->fd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.ptr = s });
	if (r < 0) {
		r = -errno;
		close(s->fd);
		free(s);
		goto out;
	}
	s->next = h->streams;
	h->streams = s;
	*ret_id = s->id;
	r = 0;
out:
	sd_bus_error_free(&error);
	sd_bus_message_unref(reply);
	sd_bus_message_unref(m);
	return r;
}

static void stream_free(struct molly *h, struct stream *s)
{
	for (struct stream **p = &h->streams; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	(void) epoll_ctl(h->epfd, EPOLL_CTL_DEL, s->fd, NULL);
	close(s->fd);
	free(s->buf);
	free(s);
}

/* Turns one JSON line into an event (pointers into h->last). */
static int dbus_line(struct molly *h, struct stream *s, char *line, struct molly_output *o)
{
	json_object *j = json_tokener_parse(line), *v, *u;
	const char *type;

	json_object_put(h->last);
	h->last = j;
	memset(o, 0, sizeof(*o));
	o->id = s->id;
	if (!j || !json_object_object_get_ex(j, "type", &v))
		return set_error(h, -EPROTO, "the daemon sent a line that is not an event");
	type = json_object_get_string(v);
	if (strcmp(type, "token") == 0) {
		o->type = MOLLY_OUTPUT_TEXT;
		if (json_object_object_get_ex(j, "text", &v)) {
			o->text = json_object_get_string(v);
			o->text_len = (size_t) json_object_get_string_len(v);
		} else {
			o->text = "";
		}
		return 1;
	}
	s->ended = true;
	if (strcmp(type, "done") == 0) {
		o->type = MOLLY_OUTPUT_DONE;
		o->finish_reason = json_object_object_get_ex(j, "finish_reason", &v)
					   ? json_object_get_string(v) : "";
		o->model = json_object_object_get_ex(j, "model", &v) ? json_object_get_string(v)
								     : "";
		o->target = json_object_object_get_ex(j, "target", &v) ? json_object_get_string(v)
								       : "";
		if (json_object_object_get_ex(j, "usage", &u)) {
			if (json_object_object_get_ex(u, "prompt_tokens", &v))
				o->prompt_tokens = (uint32_t) json_object_get_int64(v);
			if (json_object_object_get_ex(u, "completion_tokens", &v))
				o->completion_tokens = (uint32_t) json_object_get_int64(v);
		}
		return 1;
	}
	o->type = MOLLY_OUTPUT_ERROR;
	o->error_name = json_object_object_get_ex(j, "code", &v) ? json_object_get_string(v)
								 : "error";
	o->error_message = json_object_object_get_ex(j, "message", &v) ? json_object_get_string(v)
								       : "";
	return 1;
}

/* The next complete line of s (malloc'd; consumed from s->buf), or NULL. */
static char *stream_take_line(struct stream *s)
{
	char *nl = s->n ? memchr(s->buf, '\n', s->n) : NULL;
	size_t used;

	if (!nl)
		return NULL;
	*nl = 0;
	used = (size_t) (nl + 1 - s->buf);
	char *line = strdup(s->buf); /* NULL on ENOMEM: the line waits for the next call */
	if (!line) {
		*nl = '\n';
		return NULL;
	}
	memmove(s->buf, nl + 1, s->n - used);
	s->n -= used;
	return line;
}

static int dbus_next(struct molly *h, struct molly_output *o, int timeout_ms)
{
	if (h->done) {
		stream_free(h, h->done);
		h->done = NULL;
	}
	for (;;) {
		struct epoll_event ev;
		struct stream *s;
		int k;

		/* A line already buffered comes first. */
		for (s = h->streams; s; s = s->next) {
			char *line = s->ended ? NULL : stream_take_line(s);
			if (line) {
				free(h->line);
				h->line = line;
				k = dbus_line(h, s, line, o);
				if (s->ended)
					h->done = s;
				return k;
			}
		}
		k = epoll_wait(h->epfd, &ev, 1, timeout_ms);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return 0;
		s = ev.data.ptr;
		if (s->n + 4096 > s->cap) {
			size_t cap = s->cap ? s->cap * 2 : 8192;
			char *b;
			if (cap > LINE_MAX_BYTES)
				return set_error(h, -EPROTO, "a stream line is too long");
			b = realloc(s->buf, cap);
			if (!b)
				return -ENOMEM;
			s->buf = b;
			s->cap = cap;
		}
		ssize_t n = read(s->fd, s->buf + s->n, s->cap - s->n);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			/* The daemon closed it without a final line: report that as an error. */
			static const char line[] =
				"{\"type\":\"error\",\"code\":\"org.molly.Error.Unavailable\","
				"\"message\":\"the stream ended without a final event\"}";
			free(h->line);
			h->line = strdup(line);
			if (!h->line)
				return -ENOMEM;
			k = dbus_line(h, s, h->line, o);
			h->done = s;
			return k;
		}
		s->n += (size_t) n;
	}
}

/* ---- the API ---- */

MOLLY_EXPORT int molly_open(enum molly_transport transport, struct molly **ret)
{
	struct molly *h = calloc(1, sizeof(*h));
	int r = -ENOENT;

	if (!h)
		return -ENOMEM;
	h->fd = -1;
	h->epfd = -1;
	if (transport == MOLLY_TRANSPORT_AUTO || transport == MOLLY_TRANSPORT_DEV) {
		r = dev_open(h);
		if (r == 0) {
			h->transport = MOLLY_TRANSPORT_DEV;
			*ret = h;
			return 0;
		}
		if (transport == MOLLY_TRANSPORT_DEV) {
			free(h);
			return r;
		}
	}
	h->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (h->epfd < 0) {
		r = -errno;
		free(h);
		return r;
	}
	r = sd_bus_open_system(&h->bus);
	if (r < 0) {
		close(h->epfd);
		free(h);
		return r;
	}
	h->transport = MOLLY_TRANSPORT_DBUS;
	*ret = h;
	return 0;
}

MOLLY_EXPORT const char *molly_transport_name(const struct molly *h)
{
	return h->transport == MOLLY_TRANSPORT_DEV ? "dev" : "dbus";
}

MOLLY_EXPORT int molly_submit(struct molly *h, const struct molly_params *p, uint64_t *ret_id)
{
	if (!h || !p || !ret_id || !p->prompt == !p->messages_json)
		return -EINVAL;
	h->error[0] = 0;
	return h->transport == MOLLY_TRANSPORT_DEV ? dev_submit(h, p, ret_id)
						   : dbus_submit(h, p, ret_id);
}

MOLLY_EXPORT int molly_next_event(struct molly *h, struct molly_output *ret, int timeout_ms)
{
	if (!h || !ret)
		return -EINVAL;
	return h->transport == MOLLY_TRANSPORT_DEV ? dev_next(h, ret, timeout_ms)
						   : dbus_next(h, ret, timeout_ms);
}

MOLLY_EXPORT int molly_cancel(struct molly *h, uint64_t id)
{
	if (!h)
		return -EINVAL;
	if (h->transport == MOLLY_TRANSPORT_DEV) {
		struct molly_cancel c = { .size = sizeof(c), .id = id };
		return ioctl(h->fd, MOLLY_IOC_CANCEL, &c) < 0 ? -errno : 0;
	}
	for (struct stream *s = h->streams; s; s = s->next)
		if (s->id == id && !s->ended) {
			sd_bus_error error = SD_BUS_ERROR_NULL;
			int r = sd_bus_call_method(h->bus, "org.molly.Daemon1", "/org/molly/Daemon1",
						   "org.molly.Inference1", "Cancel", &error, NULL,
						   "o", s->path);
			if (r < 0)
				r = errno_from_bus_error(&error, r);
			sd_bus_error_free(&error);
			return r < 0 ? r : 0;
		}
	return -ENOENT;
}

MOLLY_EXPORT int molly_fd(const struct molly *h)
{
	return h->transport == MOLLY_TRANSPORT_DEV ? h->fd : h->epfd;
}

MOLLY_EXPORT const char *molly_last_error(const struct molly *h)
{
	return h ? h->error : "";
}

MOLLY_EXPORT struct molly *molly_close(struct molly *h)
{
	if (!h)
		return NULL;
	/* dev: closing the file cancels its requests (the kernel tells the daemon);
	 * dbus: closing a stream's pipe cancels its request. */
	if (h->fd >= 0)
		close(h->fd);
	while (h->streams)
		stream_free(h, h->streams);
	if (h->epfd >= 0)
		close(h->epfd);
	sd_bus_flush_close_unref(h->bus);
	json_object_put(h->last);
	free(h->line);
	free(h);
	return NULL;
}
