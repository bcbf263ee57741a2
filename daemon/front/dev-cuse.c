/* SPDX-License-Identifier: MIT */
/*
 * dev-cuse.c: /dev/molly served by mollyd itself through CUSE (libfuse3's lowlevel API), for
 * machines without kmod-shim. The same ABI (include/uapi/linux/molly.h): the kernel's CUSE
 * driver passes restricted ioctls (their size from _IOC_SIZE, which is why no ioctl struct
 * holds a pointer), write() stages text, read() and poll() deliver records. The caller's uid,
 * gid and pid come from the FUSE request (the kernel fills them); there is no cgroup id.
 *
 * Threading: one thread runs the FUSE session (poll on the /dev/cuse fd and a stop eventfd);
 * events arrive on the scheduler's thread through cuse_post(). One mutex (c->lock) guards
 * every file's queue, its parked reads and poll handle; replies to parked reads are sent from
 * whichever thread completes them (libfuse replies are thread-safe).
 *
 * Lifetimes: a file (struct cfile) has one reference for the open file and one per request
 * whose final event has not been posted; the last reference frees it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../basic/macro.h"
#include "../core/log.h"
#include "../manager.h"
#include "dev-internal.h"

#ifdef MOLLY_HAVE_CUSE

#define FUSE_USE_VERSION 35
#include <fuse3/cuse_lowlevel.h>
#include <fuse3/fuse_lowlevel.h>

#define CUSE_MAX_INFLIGHT_FILE 64
#define CUSE_MAX_INFLIGHT_TOTAL 1024
#define CUSE_FINAL_SIZE (sizeof(struct molly_event) + sizeof(struct molly_error))

struct qev {
	struct qev *next;
	bool final;
	uint32_t size;
	uint64_t data[];            /* a whole record */
};

struct parked_read {
	struct parked_read *next;
	fuse_req_t req;
	size_t size;
	struct cfile *file;
};

struct creq {
	struct creq *next;          /* file->reqs */
	struct cfile *file;
	struct qev *final;          /* owned: the final record's slot, allocated at submit */
	uint64_t kid;
	bool overflow;              /* the client did not read: text dropped, then an error */
};

struct cfile {
	struct dev_cuse *server;
	int n_ref;
	bool released;
	struct qev *head, *tail;
	uint32_t queued_bytes;
	uint32_t inflight;          /* requests whose final event is not yet read */
	struct creq *reqs;
	struct parked_read *reads;
	struct fuse_pollhandle *ph;
	char *staged;
	size_t staged_len;
};

struct dev_cuse {
	struct dev_front *front;    /* borrowed */
	struct fuse_session *se;
	int stop_fd;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	uint64_t next_id;
	uint32_t inflight_total;
	uint32_t queue_max;         /* event bytes per file (256 KiB; MOLLY_TEST=1 may lower it) */
	char name[64];
};

static void cfile_unref_locked(struct cfile *f)
{
	if (--f->n_ref > 0)
		return;
	while (f->head) {
		struct qev *q = f->head;
		f->head = q->next;
		free(q);
	}
	free(f->staged);
	free(f);
}

/* Takes whole records off the queue into one reply of at most size bytes. Locked. */
static void reply_events_locked(struct cfile *f, fuse_req_t req, size_t size)
{
	char buf[4 * MOLLY_EVENT_MAX] __attribute__((aligned(8)));
	size_t n = 0;

	if (size > sizeof(buf))
		size = sizeof(buf);
	while (f->head && f->head->size <= size - n) {
		struct qev *q = f->head;
		memcpy(buf + n, q->data, q->size);
		n += q->size;
		f->head = q->next;
		if (!f->head)
			f->tail = NULL;
		f->queued_bytes -= q->size;
		if (q->final) {
			f->inflight--;
			f->server->inflight_total--;
		}
		free(q);
	}
	if (n == 0)
		fuse_reply_err(req, EINVAL); /* the buffer cannot hold the next record */
	else
		fuse_reply_buf(req, buf, n);
}

static void wake_locked(struct cfile *f)
{
	while (f->head && f->reads) {
		struct parked_read *p = f->reads;
		f->reads = p->next;
		reply_events_locked(f, p->req, p->size);
		free(p);
	}
	if (f->ph && f->head) {
		(void) fuse_lowlevel_notify_poll(f->ph);
		fuse_pollhandle_destroy(f->ph);
		f->ph = NULL;
	}
}

/* q: a preallocated slot (final records), or NULL to allocate one (text). */
static void enqueue_locked(struct cfile *f, const struct molly_event *ev, bool final,
			   struct qev *q)
{
	if (!q)
		q = malloc(sizeof(*q) + ev->size);
	if (!q)
		return; /* text lost to ENOMEM; final records have their slot from submit */
	q->next = NULL;
	q->final = final;
	q->size = ev->size;
	memcpy(q->data, ev, ev->size);
	if (f->tail)
		f->tail->next = q;
	else
		f->head = q;
	f->tail = q;
	f->queued_bytes += ev->size;
	wake_locked(f);
}

/* Any thread (the scheduler's for events): a record for request r. */
static void cuse_post(void *userdata, const struct molly_event *ev)
{
	struct creq *r = userdata;
	struct cfile *f = r->file;
	struct dev_cuse *c = f->server;
	bool final = ev->type != MOLLY_EVENT_TEXT, cancel = false;

	pthread_mutex_lock(&c->lock);
	if (!final) {
		if (!f->released && !r->overflow) {
			if (f->queued_bytes + ev->size > c->queue_max) {
				r->overflow = true;
				cancel = true;
			} else {
				enqueue_locked(f, ev, false, NULL);
			}
		}
		pthread_mutex_unlock(&c->lock);
		if (cancel)
			dev_front_cancel(c->front, r->kid); /* manager_cancel: allowed from here */
		return;
	}
	/* the final record: unlink the request, queue the record, drop the request's ref */
	for (struct creq **p = &f->reqs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	if (f->released) {
		c->inflight_total--;
	} else if (r->overflow) {
		struct {
			struct molly_event ev;
			struct molly_error e;
		} rec = { 0 };
		rec.ev.size = sizeof(rec);
		rec.ev.type = MOLLY_EVENT_ERROR;
		rec.ev.id = r->kid;
		rec.ev.len = sizeof(rec.e);
		rec.e.error = -ENOBUFS;
		rec.e.kind = MOLLY_ERR_CLIENT_SLOW;
		snprintf(rec.e.name, sizeof(rec.e.name), "org.molly.Error.Cancelled");
		snprintf(rec.e.message, sizeof(rec.e.message), "the client did not read its events");
		enqueue_locked(f, &rec.ev, true, TAKE_PTR(r->final));
	} else if (ev->size <= CUSE_FINAL_SIZE) {
		enqueue_locked(f, ev, true, TAKE_PTR(r->final));
	} else {
		log_warning("dev: a final record of %u bytes does not fit its slot", ev->size);
	}
	free(r->final);
	free(r);
	cfile_unref_locked(f);
	pthread_mutex_unlock(&c->lock);
}

/* ---- the CUSE operations (session thread) ---- */

static struct dev_cuse *server_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void cuse_open(fuse_req_t req, struct fuse_file_info *fi)
{
	struct cfile *f = calloc(1, sizeof(*f));

	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	f->server = server_of(req);
	f->n_ref = 1;
	fi->fh = (uintptr_t) f;
	fi->direct_io = 1;
	fi->nonseekable = 1;
	if (fuse_reply_open(req, fi) != 0) {
		pthread_mutex_lock(&f->server->lock);
		cfile_unref_locked(f);
		pthread_mutex_unlock(&f->server->lock);
	}
}

static void cuse_release(fuse_req_t req, struct fuse_file_info *fi)
{
	struct cfile *f = (struct cfile *) (uintptr_t) fi->fh;
	struct dev_cuse *c = f->server;
	uint64_t kids[CUSE_MAX_INFLIGHT_FILE];
	size_t n = 0;

	pthread_mutex_lock(&c->lock);
	f->released = true;
	for (struct creq *r = f->reqs; r && n < ELEMENTSOF(kids); r = r->next)
		kids[n++] = r->kid;
	/* events nobody will read: their slots go back */
	while (f->head) {
		struct qev *q = f->head;
		f->head = q->next;
		if (q->final)
			c->inflight_total--;
		free(q);
	}
	f->tail = NULL;
	f->queued_bytes = 0;
	if (f->ph) {
		fuse_pollhandle_destroy(f->ph);
		f->ph = NULL;
	}
	cfile_unref_locked(f);
	pthread_mutex_unlock(&c->lock);
	/* the requests end (their final events free them) */
	for (size_t i = 0; i < n; i++)
		dev_front_cancel(c->front, kids[i]);
	fuse_reply_err(req, 0);
}

static void cuse_write(fuse_req_t req, const char *buf, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct cfile *f = (struct cfile *) (uintptr_t) fi->fh;
	char *p;

	if (size > MOLLY_TEXT_MAX || f->staged_len + size > MOLLY_TEXT_MAX) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	p = realloc(f->staged, f->staged_len + size);
	if (!p && f->staged_len + size > 0) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(p + f->staged_len, buf, size);
	f->staged = p;
	f->staged_len += size;
	fuse_reply_write(req, size);
}

static void on_read_interrupt(fuse_req_t req, void *data)
{
	struct parked_read *p = data;
	struct cfile *f = p->file;
	struct dev_cuse *c = f->server;
	bool found = false;

	pthread_mutex_lock(&c->lock);
	for (struct parked_read **q = &f->reads; *q; q = &(*q)->next)
		if (*q == p) {
			*q = p->next;
			found = true;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	if (found) {
		fuse_reply_err(req, EINTR);
		free(p);
	}
}

static void cuse_read(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct cfile *f = (struct cfile *) (uintptr_t) fi->fh;
	struct dev_cuse *c = f->server;
	struct parked_read *p;

	pthread_mutex_lock(&c->lock);
	if (f->head) {
		reply_events_locked(f, req, size);
		pthread_mutex_unlock(&c->lock);
		return;
	}
	if (fi->flags & O_NONBLOCK) {
		pthread_mutex_unlock(&c->lock);
		fuse_reply_err(req, EAGAIN);
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		pthread_mutex_unlock(&c->lock);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* parked: the next event answers it (wake_locked), or an interrupt does */
	p->req = req;
	p->size = size;
	p->file = f;
	p->next = f->reads;
	f->reads = p;
	pthread_mutex_unlock(&c->lock);
	fuse_req_interrupt_func(req, on_read_interrupt, p);
}

static void cuse_poll(fuse_req_t req, struct fuse_file_info *fi, struct fuse_pollhandle *ph)
{
	struct cfile *f = (struct cfile *) (uintptr_t) fi->fh;
	struct dev_cuse *c = f->server;
	unsigned mask = POLLOUT | POLLWRNORM;

	pthread_mutex_lock(&c->lock);
	if (f->head)
		mask |= POLLIN | POLLRDNORM;
	if (ph) {
		if (f->ph)
			fuse_pollhandle_destroy(f->ph);
		f->ph = ph;
	}
	pthread_mutex_unlock(&c->lock);
	fuse_reply_poll(req, mask);
}

static bool zero(const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* As kmod-shim's molly_copy_in: size field == in_bufsz, a longer struct only with a zero tail. */
static int copy_in(void *k, size_t ksize, unsigned cmd, const void *in, size_t in_size)
{
	size_t usize = _IOC_SIZE(cmd);

	if (usize < sizeof(uint32_t) || usize > MOLLY_IOC_SIZE_MAX || in_size != usize || !in)
		return -EINVAL;
	if (usize > ksize && !zero((const char *) in + ksize, usize - ksize))
		return -E2BIG;
	if (usize < ksize)
		return -EINVAL;
	memcpy(k, in, ksize);
	if (*(const uint32_t *) k != usize)
		return -EINVAL;
	return 0;
}

static bool ioc_is(unsigned cmd, unsigned want)
{
	return _IOC_TYPE(cmd) == _IOC_TYPE(want) && _IOC_NR(cmd) == _IOC_NR(want) &&
	       _IOC_DIR(cmd) == _IOC_DIR(want);
}

static void reply_struct(fuse_req_t req, const void *k, size_t ksize, size_t out_bufsz)
{
	char out[MOLLY_IOC_SIZE_MAX] = { 0 };
	size_t n = out_bufsz < sizeof(out) ? out_bufsz : sizeof(out);

	memcpy(out, k, ksize < n ? ksize : n);
	fuse_reply_ioctl(req, 0, out, n);
}

static void read_comm(uint32_t pid, char *buf, size_t size)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	snprintf(buf, size, "?");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n > 0) {
		buf[n] = 0;
		buf[strcspn(buf, "\n")] = 0;
	}
}

static void ioc_submit(fuse_req_t req, struct cfile *f, unsigned cmd, const void *in,
		       size_t in_size, size_t out_size)
{
	struct dev_cuse *c = f->server;
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	_cleanup_free_ char *text = TAKE_PTR(f->staged); /* every SUBMIT consumes it */
	size_t text_len = f->staged_len;
	struct molly_submit s;
	struct dev_origin o;
	struct creq *r;
	char comm[32];
	int k;

	f->staged_len = 0;
	k = copy_in(&s, sizeof(s), cmd, in, in_size);
	if (k == 0 && ((s.flags & ~MOLLY_SUBMIT_FLAGS_ALL) || s.declared_class > MOLLY_CLASS_SECRET ||
		       s.reserved0 || !zero(s.reserved, sizeof(s.reserved)) || s.id ||
		       !memchr(s.model, 0, sizeof(s.model)) || s.text_len == 0 ||
		       s.text_len > MOLLY_TEXT_MAX || s.text_len != text_len))
		k = -EINVAL;
	if (k < 0) {
		fuse_reply_err(req, -k);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (r)
		r->final = malloc(sizeof(struct qev) + CUSE_FINAL_SIZE);
	if (!r || !r->final) {
		free(r);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&c->lock);
	if (f->inflight >= CUSE_MAX_INFLIGHT_FILE || c->inflight_total >= CUSE_MAX_INFLIGHT_TOTAL) {
		pthread_mutex_unlock(&c->lock);
		free(r->final);
		free(r);
		fuse_reply_err(req, EAGAIN);
		return;
	}
	r->file = f;
	r->kid = ++c->next_id;
	r->next = f->reqs;
	f->reqs = r;
	f->n_ref++;
	f->inflight++;
	c->inflight_total++;
	pthread_mutex_unlock(&c->lock);

	/* the id first: the events may come before this function returns */
	s.id = r->kid;
	reply_struct(req, &s, sizeof(s), out_size);
	read_comm((uint32_t) ctx->pid, comm, sizeof(comm));
	o = (struct dev_origin){ .uid = (uint32_t) ctx->uid, .gid = (uint32_t) ctx->gid,
				 .pid = (uint32_t) ctx->pid, .cgroup_id = 0, .comm = comm };
	dev_front_submit(c->front, &s, text, text_len, &o, s.id, cuse_post, r);
}

static void cuse_ioctl(fuse_req_t req, int cmd_signed, void *arg, struct fuse_file_info *fi,
		       unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	struct cfile *f = (struct cfile *) (uintptr_t) fi->fh;
	struct dev_cuse *c = f->server;
	unsigned cmd = (unsigned) cmd_signed;
	int k;

	if (ioc_is(cmd, MOLLY_IOC_VERSION)) {
		struct molly_version v;
		k = copy_in(&v, sizeof(v), cmd, in_buf, in_bufsz);
		if (k == 0 && !zero((const char *) &v + 4, sizeof(v) - 4))
			k = -EINVAL;
		if (k < 0) {
			fuse_reply_err(req, -k);
			return;
		}
		v = (struct molly_version){ .size = sizeof(v), .abi_version = MOLLY_ABI_VERSION,
					    .features = MOLLY_FEATURE_CUSE,
					    .text_max = MOLLY_TEXT_MAX,
					    .event_max = MOLLY_EVENT_MAX,
					    .max_inflight_file = CUSE_MAX_INFLIGHT_FILE,
					    .max_inflight_total = CUSE_MAX_INFLIGHT_TOTAL };
		reply_struct(req, &v, sizeof(v), out_bufsz);
	} else if (ioc_is(cmd, MOLLY_IOC_SUBMIT)) {
		ioc_submit(req, f, cmd, in_buf, in_bufsz, out_bufsz);
	} else if (ioc_is(cmd, MOLLY_IOC_CANCEL)) {
		struct molly_cancel cn;
		bool mine = false;
		k = copy_in(&cn, sizeof(cn), cmd, in_buf, in_bufsz);
		if (k == 0 && cn.reserved0)
			k = -EINVAL;
		if (k < 0) {
			fuse_reply_err(req, -k);
			return;
		}
		pthread_mutex_lock(&c->lock);
		for (struct creq *r = f->reqs; r; r = r->next)
			if (r->kid == cn.id)
				mine = true;
		pthread_mutex_unlock(&c->lock);
		if (!mine) {
			fuse_reply_err(req, ENOENT);
			return;
		}
		dev_front_cancel(c->front, cn.id);
		fuse_reply_ioctl(req, 0, NULL, 0);
	} else if (ioc_is(cmd, MOLLY_IOC_STATUS)) {
		struct molly_status st;
		k = copy_in(&st, sizeof(st), cmd, in_buf, in_bufsz);
		if (k == 0 && !zero((const char *) &st + 4, sizeof(st) - 4))
			k = -EINVAL;
		if (k < 0) {
			fuse_reply_err(req, -k);
			return;
		}
		pthread_mutex_lock(&c->lock);
		st.flags = MOLLY_STATUS_DAEMON | MOLLY_STATUS_CUSE;
		st.inflight = f->inflight;
		st.queued_bytes = f->queued_bytes;
		st.inflight_total = c->inflight_total;
		st.staged_bytes = (uint32_t) f->staged_len;
		pthread_mutex_unlock(&c->lock);
		reply_struct(req, &st, sizeof(st), out_bufsz);
	} else {
		fuse_reply_err(req, ENOTTY);
	}
}

static void cuse_init_done(void *userdata)
{
	struct dev_cuse *c = userdata;
	char s[128];

	snprintf(s, sizeof(s), "cuse (/dev/%s)", c->name);
	manager_set_device_status(dev_front_manager(c->front), s);
	log_info("dev: serving /dev/%s through CUSE (kmod-shim is not loaded)", c->name);
}

static const struct cuse_lowlevel_ops cuse_ops = {
	.init_done = cuse_init_done,
	.open = cuse_open,
	.release = cuse_release,
	.read = cuse_read,
	.write = cuse_write,
	.ioctl = cuse_ioctl,
	.poll = cuse_poll,
};

static void *session_thread(void *userdata)
{
	struct dev_cuse *c = userdata;
	struct fuse_buf buf = { 0 };

	for (;;) {
		struct pollfd p[2] = { { .fd = fuse_session_fd(c->se), .events = POLLIN },
				       { .fd = c->stop_fd, .events = POLLIN } };
		int k = poll(p, 2, -1);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 || p[1].revents)
			break;
		k = fuse_session_receive_buf(c->se, &buf);
		if (k == -EINTR || k == -EAGAIN)
			continue;
		if (k <= 0) {
			if (k < 0)
				log_warning("dev: the CUSE session ended: %s", strerror(-k));
			break;
		}
		fuse_session_process_buf(c->se, &buf);
	}
	free(buf.mem);
	return NULL;
}

int dev_cuse_start(struct dev_front *f, int cuse_fd, const char *name, struct dev_cuse **ret)
{
	char devname[96], mnt[32];
	const char *dev_info[] = { devname };
	struct cuse_info ci = { .dev_info_argc = 1, .dev_info_argv = dev_info };
	char *argv[] = { (char *) "mollyd", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(1, argv);
	struct dev_cuse *c;
	int k;

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(cuse_fd);
		return -ENOMEM;
	}
	c->front = f;
	c->stop_fd = -EBADF;
	c->queue_max = 256u * 1024u;
	{
		/* TEST ONLY: a small bound lets a test overflow it with a small model */
		const char *t = getenv("MOLLY_TEST"), *q = getenv("MOLLY_TEST_DEV_QUEUE_BYTES");
		if (t && strcmp(t, "1") == 0 && q && atoi(q) >= MOLLY_EVENT_MAX)
			c->queue_max = (uint32_t) atoi(q);
	}
	pthread_mutex_init(&c->lock, NULL);
	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(devname, sizeof(devname), "DEVNAME=%s", name);
	c->se = cuse_lowlevel_new(&args, &ci, &cuse_ops, c);
	fuse_opt_free_args(&args);
	if (!c->se) {
		close(cuse_fd);
		k = -EIO;
		goto fail;
	}
	/* libfuse takes an fd opened earlier (as root) by this name */
	snprintf(mnt, sizeof(mnt), "/dev/fd/%d", cuse_fd);
	if (fuse_session_mount(c->se, mnt) != 0) {
		close(cuse_fd);
		k = -EIO;
		goto fail;
	}
	c->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->stop_fd < 0) {
		k = -errno;
		goto fail;
	}
	k = -pthread_create(&c->thread, NULL, session_thread, c);
	if (k < 0)
		goto fail;
	c->started = true;
	*ret = c;
	return 0;
fail:
	if (c->se)
		fuse_session_destroy(c->se);
	if (c->stop_fd >= 0)
		close(c->stop_fd);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return k;
}

struct dev_cuse *dev_cuse_stop(struct dev_cuse *c)
{
	uint64_t one = 1;

	if (!c)
		return NULL;
	if (c->started) {
		(void) write(c->stop_fd, &one, sizeof(one));
		pthread_join(c->thread, NULL);
		c->started = false;
	}
	return c;
}

struct dev_cuse *dev_cuse_free(struct dev_cuse *c)
{
	if (!c)
		return NULL;
	(void) dev_cuse_stop(c);
	/* Closing the session removes the device: the kernel fails its clients' calls. Files
	 * still open stay allocated (no release will come for them): a bounded leak at exit. */
	fuse_session_destroy(c->se);
	close(c->stop_fd);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return NULL;
}

#else /* !MOLLY_HAVE_CUSE */

int dev_cuse_start(struct dev_front *f, int cuse_fd, const char *name, struct dev_cuse **ret)
{
	close(cuse_fd);
	return -EOPNOTSUPP;
}

struct dev_cuse *dev_cuse_stop(struct dev_cuse *c)
{
	return c;
}

struct dev_cuse *dev_cuse_free(struct dev_cuse *c)
{
	return NULL;
}

#endif
