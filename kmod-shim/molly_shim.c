// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * molly_shim.c: /dev/molly for clients and /dev/molly-control for mollyd.
 *
 * The ABI is include/uapi/linux/molly.h (manual: docs/uapi.md). A client stages a request's
 * text with write(), submits it with MOLLY_IOC_SUBMIT and reads its events; the kernel stamps
 * the submitter's uid, gid, pid and cgroup id, so the daemon can trust them. The daemon reads
 * MOLLY_CTL_SUBMIT / MOLLY_CTL_CANCEL records from the control node and writes struct
 * molly_event records back, which go to the request's owner.
 *
 * Locking: one mutex (molly_lock) guards the request table, every client's request list and
 * event queue, and the control queue. Requests are few and every critical section is short,
 * so a single lock keeps the lifetimes simple to check. User copies under it are fine: no
 * fault path takes it.
 *
 * Lifetimes: a request is owned by the table from submit until its final event is queued to
 * its client (or, when the client has gone, until the daemon's final event arrives, or the
 * daemon goes). Each request allocates its final event at submit, so a final event is never
 * lost to a failed allocation: a closing daemon turns every pending request into an ERROR for
 * its client with no allocation at all.
 */
#include <linux/cgroup.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/hashtable.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include <uapi/linux/molly.h>

#define MOLLY_MAX_INFLIGHT_FILE   64
#define MOLLY_MAX_INFLIGHT_TOTAL  1024
#define MOLLY_TEXT_BYTES_MAX      (64UL << 20)   /* staged + undelivered text, all clients */

#define MOLLY_FINAL_SIZE \
	ALIGN(sizeof(struct molly_event) + sizeof(struct molly_error), 8)

/* An event queued for a client's read(). */
struct molly_kev {
	struct list_head node;
	bool final;             /* the request's last event: read() releases its slot */
	u32 size;               /* bytes of data: a whole record */
	u8 data[];              /* struct molly_event + payload */
};

struct molly_client;

struct molly_req {
	struct hlist_node hnode;        /* molly_reqs */
	struct list_head client_node;   /* client->reqs, while client != NULL */
	struct list_head ctl_node;      /* molly_ctl_queue, while on_ctl */
	struct molly_client *client;    /* borrowed: NULL once the client closed */
	u64 id;
	bool on_ctl;                    /* something for the daemon to read */
	bool delivered;                 /* the daemon has read the submit record */
	bool cancel;                    /* the daemon must be told to end it */
	bool cancel_sent;
	bool overflow;                  /* the client did not read: its text is dropped */
	struct molly_ctl_msg *msg;      /* owned: submit record + text, until delivered */
	u32 msg_size;
	size_t text_bytes;              /* accounted in molly_text_bytes while msg lives */
	struct molly_kev *final;        /* owned: preallocated final event */
};

struct molly_client {
	wait_queue_head_t wq;
	struct list_head events;        /* struct molly_kev, oldest first */
	u32 queued_bytes;
	struct list_head reqs;          /* requests without a queued final event */
	u32 inflight;                   /* requests whose final event is not yet read */
	struct mutex stage_lock;        /* the staged text (write + SUBMIT) */
	struct mutex read_lock;         /* one reader at a time keeps records in order */
	char *staged;                   /* owned: kvmalloc'd text */
	size_t staged_len;
	size_t staged_cap;
};

/* Event bytes queued per open file before its request is cancelled (tests lower it). */
static unsigned int client_queue_bytes = 256 * 1024;
module_param(client_queue_bytes, uint, 0644);
MODULE_PARM_DESC(client_queue_bytes,
		 "event bytes queued for one open file before the request that overflows it is cancelled (default 262144; at least 4096)");

static DEFINE_MUTEX(molly_lock);
static DEFINE_HASHTABLE(molly_reqs, 8);
static LIST_HEAD(molly_ctl_queue);
static DECLARE_WAIT_QUEUE_HEAD(molly_ctl_wq);
static bool molly_ctl_open;           /* one daemon at a time */
static atomic64_t molly_next_id = ATOMIC64_INIT(0);
static u32 molly_inflight_total;
static atomic_long_t molly_text_bytes = ATOMIC_LONG_INIT(0);

static const char *const molly_err_names[] = {
	[MOLLY_ERR_INVALID_REQUEST] = "org.molly.Error.InvalidRequest",
	[MOLLY_ERR_MODEL_NOT_FOUND] = "org.molly.Error.ModelNotFound",
	[MOLLY_ERR_CONTEXT_LENGTH] = "org.molly.Error.ContextLengthExceeded",
	[MOLLY_ERR_FORBIDDEN] = "org.freedesktop.DBus.Error.AccessDenied",
	[MOLLY_ERR_QUEUE_FULL] = "org.molly.Error.QueueFull",
	[MOLLY_ERR_UNAVAILABLE] = "org.molly.Error.Unavailable",
	[MOLLY_ERR_CANCELLED] = "org.molly.Error.Cancelled",
	[MOLLY_ERR_INTERNAL] = "org.molly.Error.Internal",
	[MOLLY_ERR_CLIENT_SLOW] = "org.molly.Error.Cancelled",
};

/* ---- helpers ---- */

/*
 * Reads an extensible ioctl struct: its size field must equal _IOC_SIZE(cmd), which may be
 * larger than ours when the bytes we do not know are zero (copy_struct_from_user: -E2BIG).
 */
static int molly_copy_in(void *k, size_t ksize, unsigned int cmd, unsigned long arg)
{
	size_t usize = _IOC_SIZE(cmd);
	int ret;

	if (usize < sizeof(u32) || usize > MOLLY_IOC_SIZE_MAX)
		return -EINVAL;
	ret = copy_struct_from_user(k, ksize, (void __user *)arg, usize);
	if (ret)
		return ret;
	if (*(u32 *)k != usize)
		return -EINVAL;
	if (usize < ksize)
		return -EINVAL; /* an older, smaller struct: none exists yet */
	return 0;
}

static int molly_copy_out(unsigned long arg, const void *k, size_t ksize)
{
	return copy_to_user((void __user *)arg, k, ksize) ? -EFAULT : 0;
}

static bool molly_zero(const void *p, size_t n)
{
	return !memchr_inv(p, 0, n);
}

static struct molly_req *molly_req_find(u64 id)
{
	struct molly_req *req;

	hash_for_each_possible(molly_reqs, req, hnode, id)
		if (req->id == id)
			return req;
	return NULL;
}

static void molly_req_drop_msg(struct molly_req *req)
{
	if (!req->msg)
		return;
	kvfree(req->msg);
	req->msg = NULL;
	atomic_long_sub(req->text_bytes, &molly_text_bytes);
	req->text_bytes = 0;
}

/* Frees a request that left every list it was on. Caller holds molly_lock. */
static void molly_req_free(struct molly_req *req)
{
	molly_req_drop_msg(req);
	kfree(req->final);
	kfree(req);
}

static void molly_ctl_enqueue(struct molly_req *req)
{
	if (req->on_ctl)
		return;
	list_add_tail(&req->ctl_node, &molly_ctl_queue);
	req->on_ctl = true;
	wake_up_interruptible(&molly_ctl_wq);
}

static void molly_ctl_dequeue(struct molly_req *req)
{
	if (!req->on_ctl)
		return;
	list_del(&req->ctl_node);
	req->on_ctl = false;
}

/* Removes a request from the table and the queues. Caller holds molly_lock. */
static void molly_req_unlink(struct molly_req *req)
{
	hash_del(&req->hnode);
	molly_ctl_dequeue(req);
	if (req->client)
		list_del(&req->client_node);
	molly_inflight_total--;
}

/*
 * Fills the preallocated final event as an ERROR, queues it to the request's client and frees
 * the request. Caller holds molly_lock; req->client is not NULL.
 */
static void molly_req_fail(struct molly_req *req, u32 kind, int err, const char *message)
{
	struct molly_client *client = req->client;
	struct molly_kev *kev = req->final;
	struct molly_event *ev = (struct molly_event *)kev->data;
	struct molly_error *e = (struct molly_error *)(ev + 1);

	memset(kev->data, 0, MOLLY_FINAL_SIZE);
	ev->size = MOLLY_FINAL_SIZE;
	ev->type = MOLLY_EVENT_ERROR;
	ev->id = req->id;
	ev->len = sizeof(*e);
	e->error = err;
	e->kind = kind;
	strscpy(e->name, molly_err_names[kind], sizeof(e->name));
	strscpy(e->message, message, sizeof(e->message));
	kev->size = MOLLY_FINAL_SIZE;
	kev->final = true;
	list_add_tail(&kev->node, &client->events);
	client->queued_bytes += kev->size;
	req->final = NULL;
	molly_req_unlink(req);
	molly_req_free(req);
	wake_up_interruptible(&client->wq);
}

/* ---- /dev/molly ---- */

static int molly_open(struct inode *inode, struct file *file)
{
	struct molly_client *client;

	client = kzalloc(sizeof(*client), GFP_KERNEL);
	if (!client)
		return -ENOMEM;
	init_waitqueue_head(&client->wq);
	INIT_LIST_HEAD(&client->events);
	INIT_LIST_HEAD(&client->reqs);
	mutex_init(&client->stage_lock);
	mutex_init(&client->read_lock);
	file->private_data = client;
	return stream_open(inode, file);
}

static void molly_stage_clear(struct molly_client *client)
{
	atomic_long_sub(client->staged_cap, &molly_text_bytes);
	kvfree(client->staged);
	client->staged = NULL;
	client->staged_len = 0;
	client->staged_cap = 0;
}

static int molly_release(struct inode *inode, struct file *file)
{
	struct molly_client *client = file->private_data;
	struct molly_req *req, *tmp;
	struct molly_kev *kev, *ktmp;

	mutex_lock(&molly_lock);
	list_for_each_entry_safe(req, tmp, &client->reqs, client_node) {
		list_del(&req->client_node);
		req->client = NULL;
		if (!req->delivered) {
			/* The daemon never saw it: nothing to tell. */
			req->client = NULL;
			hash_del(&req->hnode);
			molly_ctl_dequeue(req);
			molly_inflight_total--;
			molly_req_free(req);
			continue;
		}
		/* The daemon ends it; its final event then frees it (molly_ctl_write). */
		if (!req->cancel) {
			req->cancel = true;
			molly_ctl_enqueue(req);
		}
	}
	list_for_each_entry_safe(kev, ktmp, &client->events, node) {
		list_del(&kev->node);
		kfree(kev);
	}
	mutex_unlock(&molly_lock);

	molly_stage_clear(client);
	mutex_destroy(&client->stage_lock);
	mutex_destroy(&client->read_lock);
	kfree(client);
	return 0;
}

/* write(): appends to the staged text of the next MOLLY_IOC_SUBMIT. */
static ssize_t molly_write(struct file *file, const char __user *buf, size_t len, loff_t *ppos)
{
	struct molly_client *client = file->private_data;
	ssize_t ret;

	if (len == 0)
		return 0;
	if (len > MOLLY_TEXT_MAX)
		return -EFBIG;
	mutex_lock(&client->stage_lock);
	if (client->staged_len + len > MOLLY_TEXT_MAX) {
		ret = -EFBIG;
		goto out_unlock;
	}
	if (client->staged_len + len > client->staged_cap) {
		size_t cap = max_t(size_t, 4096, client->staged_cap);
		char *p;

		while (cap < client->staged_len + len)
			cap *= 2;
		cap = min_t(size_t, cap, MOLLY_TEXT_MAX);
		if (atomic_long_add_return(cap - client->staged_cap, &molly_text_bytes) >
		    MOLLY_TEXT_BYTES_MAX) {
			atomic_long_sub(cap - client->staged_cap, &molly_text_bytes);
			ret = -EAGAIN;
			goto out_unlock;
		}
		p = kvmalloc(cap, GFP_KERNEL_ACCOUNT);
		if (!p) {
			atomic_long_sub(cap - client->staged_cap, &molly_text_bytes);
			ret = -ENOMEM;
			goto out_unlock;
		}
		if (client->staged_len)
			memcpy(p, client->staged, client->staged_len);
		kvfree(client->staged);
		client->staged = p;
		client->staged_cap = cap;
	}
	if (copy_from_user(client->staged + client->staged_len, buf, len)) {
		ret = -EFAULT;
		goto out_unlock;
	}
	client->staged_len += len;
	ret = len;
out_unlock:
	mutex_unlock(&client->stage_lock);
	return ret;
}

/* Checks the fixed part of a submit; the text is checked against the staged bytes later. */
static int molly_submit_check(const struct molly_submit *s)
{
	if (s->flags & ~MOLLY_SUBMIT_FLAGS_ALL)
		return -EINVAL;
	if (s->declared_class > MOLLY_CLASS_SECRET)
		return -EINVAL;
	if (s->reserved0 || !molly_zero(s->reserved, sizeof(s->reserved)) || s->id)
		return -EINVAL;
	if (!memchr(s->model, 0, sizeof(s->model)))
		return -EINVAL;
	if (s->text_len == 0 || s->text_len > MOLLY_TEXT_MAX)
		return -EINVAL;
	return 0;
}

static u64 molly_current_cgroup_id(void)
{
	u64 id;

	rcu_read_lock();
	id = cgroup_id(task_dfl_cgroup(current));
	rcu_read_unlock();
	return id;
}

static long molly_ioc_submit(struct molly_client *client, unsigned int cmd, unsigned long arg)
{
	struct molly_submit s;
	struct molly_req *req;
	struct molly_ctl_msg *msg;
	size_t size;
	long ret;

	/* Every SUBMIT consumes the staged text, whatever its result: one simple rule. */
	mutex_lock(&client->stage_lock);
	ret = molly_copy_in(&s, sizeof(s), cmd, arg);
	if (!ret)
		ret = molly_submit_check(&s);
	if (!ret && s.text_len != client->staged_len)
		ret = -EINVAL;
	if (ret) {
		molly_stage_clear(client);
		goto out_unlock_stage;
	}
	req = kzalloc(sizeof(*req), GFP_KERNEL_ACCOUNT);
	if (!req) {
		ret = -ENOMEM;
		molly_stage_clear(client);
		goto out_unlock_stage;
	}
	req->final = kzalloc(sizeof(*req->final) + MOLLY_FINAL_SIZE, GFP_KERNEL_ACCOUNT);
	size = ALIGN(sizeof(*msg) + s.text_len, 8);
	msg = kvzalloc(size, GFP_KERNEL_ACCOUNT);
	if (!req->final || !msg) {
		ret = -ENOMEM;
		goto out_free;
	}
	msg->size = size;
	msg->type = MOLLY_CTL_SUBMIT;
	msg->uid = from_kuid_munged(&init_user_ns, current_uid());
	msg->gid = from_kgid_munged(&init_user_ns, current_gid());
	msg->pid = task_tgid_nr(current);
	msg->cgroup_id = molly_current_cgroup_id();
	get_task_comm(msg->comm, current);
	msg->submit = s;
	memcpy(msg + 1, client->staged, s.text_len);

	/*
	 * The id goes out first, outside molly_lock (a fault must stall no one else): a caller
	 * that cannot learn it must not have a request.
	 */
	req->id = atomic64_inc_return(&molly_next_id);
	if (put_user(req->id, (u64 __user *)(arg + offsetof(struct molly_submit, id)))) {
		ret = -EFAULT;
		goto out_free;
	}
	mutex_lock(&molly_lock);
	if (!molly_ctl_open) {
		ret = -ENOTCONN;
		goto out_unlock;
	}
	if (client->inflight >= MOLLY_MAX_INFLIGHT_FILE ||
	    molly_inflight_total >= MOLLY_MAX_INFLIGHT_TOTAL) {
		ret = -EAGAIN;
		goto out_unlock;
	}
	msg->id = req->id;
	msg->submit.id = req->id;
	req->msg = msg;
	req->msg_size = size;
	/* The staged buffer's accounting moves to the message. */
	req->text_bytes = client->staged_cap;
	kvfree(client->staged);
	client->staged = NULL;
	client->staged_len = 0;
	client->staged_cap = 0;
	req->client = client;
	hash_add(molly_reqs, &req->hnode, req->id);
	list_add_tail(&req->client_node, &client->reqs);
	client->inflight++;
	molly_inflight_total++;
	molly_ctl_enqueue(req);
	mutex_unlock(&molly_lock);
	mutex_unlock(&client->stage_lock);
	return 0;

out_unlock:
	mutex_unlock(&molly_lock);
out_free:
	kvfree(msg);
	kfree(req->final);
	kfree(req);
	molly_stage_clear(client);
out_unlock_stage:
	mutex_unlock(&client->stage_lock);
	return ret;
}

/* Queues a DONE "cancelled" for a request the daemon never saw, and frees it. */
static void molly_req_cancel_undelivered(struct molly_req *req)
{
	struct molly_client *client = req->client;
	struct molly_kev *kev = req->final;
	struct molly_event *ev = (struct molly_event *)kev->data;
	struct molly_done *d = (struct molly_done *)(ev + 1);

	memset(kev->data, 0, MOLLY_FINAL_SIZE);
	ev->size = ALIGN(sizeof(*ev) + sizeof(*d), 8);
	ev->type = MOLLY_EVENT_DONE;
	ev->id = req->id;
	ev->len = sizeof(*d);
	strscpy(d->finish_reason, "cancelled", sizeof(d->finish_reason));
	kev->size = ev->size;
	kev->final = true;
	list_add_tail(&kev->node, &client->events);
	client->queued_bytes += kev->size;
	req->final = NULL;
	molly_req_unlink(req);
	molly_req_free(req);
	wake_up_interruptible(&client->wq);
}

static long molly_ioc_cancel(struct molly_client *client, unsigned int cmd, unsigned long arg)
{
	struct molly_cancel c;
	struct molly_req *req;
	long ret;

	ret = molly_copy_in(&c, sizeof(c), cmd, arg);
	if (ret)
		return ret;
	if (c.reserved0)
		return -EINVAL;
	mutex_lock(&molly_lock);
	req = molly_req_find(c.id);
	if (!req || req->client != client) {
		ret = -ENOENT; /* unknown, finished, or another file's */
	} else if (!req->delivered) {
		molly_req_cancel_undelivered(req);
	} else if (!req->cancel) {
		req->cancel = true;
		molly_ctl_enqueue(req);
	}
	mutex_unlock(&molly_lock);
	return ret;
}

static void molly_fill_version(struct molly_version *v)
{
	memset(v, 0, sizeof(*v));
	v->size = sizeof(*v);
	v->abi_version = MOLLY_ABI_VERSION;
	v->features = MOLLY_FEATURE_KERNEL;
	v->text_max = MOLLY_TEXT_MAX;
	v->event_max = MOLLY_EVENT_MAX;
	v->max_inflight_file = MOLLY_MAX_INFLIGHT_FILE;
	v->max_inflight_total = MOLLY_MAX_INFLIGHT_TOTAL;
}

static long molly_ioc_version(unsigned int cmd, unsigned long arg)
{
	struct molly_version v;
	long ret;

	ret = molly_copy_in(&v, sizeof(v), cmd, arg);
	if (ret)
		return ret;
	if (v.abi_version || v.features || v.text_max || v.event_max || v.max_inflight_file ||
	    v.max_inflight_total || v.reserved0 || !molly_zero(v.reserved, sizeof(v.reserved)))
		return -EINVAL;
	molly_fill_version(&v);
	return molly_copy_out(arg, &v, sizeof(v));
}

static long molly_ioc_status(struct molly_client *client, unsigned int cmd, unsigned long arg)
{
	struct molly_status st;
	long ret;

	ret = molly_copy_in(&st, sizeof(st), cmd, arg);
	if (ret)
		return ret;
	if (st.flags || st.inflight || st.queued_bytes || st.inflight_total || st.staged_bytes ||
	    !molly_zero(st.reserved, sizeof(st.reserved)))
		return -EINVAL;
	mutex_lock(&client->stage_lock);
	st.staged_bytes = client->staged_len;
	mutex_unlock(&client->stage_lock);
	mutex_lock(&molly_lock);
	st.flags = molly_ctl_open ? MOLLY_STATUS_DAEMON : 0;
	st.inflight = client->inflight;
	st.queued_bytes = client->queued_bytes;
	st.inflight_total = molly_inflight_total;
	mutex_unlock(&molly_lock);
	return molly_copy_out(arg, &st, sizeof(st));
}

static bool molly_ioc_is(unsigned int cmd, unsigned int want)
{
	/* Same type, number and direction; the size is checked by molly_copy_in(). */
	return _IOC_TYPE(cmd) == _IOC_TYPE(want) && _IOC_NR(cmd) == _IOC_NR(want) &&
	       _IOC_DIR(cmd) == _IOC_DIR(want);
}

static long molly_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct molly_client *client = file->private_data;

	if (molly_ioc_is(cmd, MOLLY_IOC_VERSION))
		return molly_ioc_version(cmd, arg);
	if (molly_ioc_is(cmd, MOLLY_IOC_SUBMIT))
		return molly_ioc_submit(client, cmd, arg);
	if (molly_ioc_is(cmd, MOLLY_IOC_CANCEL))
		return molly_ioc_cancel(client, cmd, arg);
	if (molly_ioc_is(cmd, MOLLY_IOC_STATUS))
		return molly_ioc_status(client, cmd, arg);
	return -ENOTTY;
}

/*
 * read(): whole event records, as many as fit; -EINVAL when the first does not. The records
 * are taken off the queue under molly_lock and copied without it (a user buffer may fault on
 * a slow file system: no client may stall the others); on a fault they go back, in order.
 */
static ssize_t molly_read(struct file *file, char __user *buf, size_t len, loff_t *ppos)
{
	struct molly_client *client = file->private_data;
	struct molly_kev *kev, *tmp;
	LIST_HEAD(taken);
	size_t want = 0, done = 0;
	ssize_t ret;

	if (mutex_lock_interruptible(&client->read_lock))
		return -ERESTARTSYS;
	for (;;) {
		mutex_lock(&molly_lock);
		if (!list_empty(&client->events))
			break;
		mutex_unlock(&molly_lock);
		if (file->f_flags & O_NONBLOCK) {
			ret = -EAGAIN;
			goto out_unlock_read;
		}
		ret = wait_event_interruptible(client->wq,
					       !list_empty_careful(&client->events));
		if (ret)
			goto out_unlock_read;
	}
	list_for_each_entry_safe(kev, tmp, &client->events, node) {
		if (kev->size > len - want)
			break;
		want += kev->size;
		list_move_tail(&kev->node, &taken);
	}
	mutex_unlock(&molly_lock);
	if (list_empty(&taken)) {
		ret = -EINVAL; /* the buffer cannot hold the next record */
		goto out_unlock_read;
	}
	list_for_each_entry(kev, &taken, node) {
		if (copy_to_user(buf + done, kev->data, kev->size))
			break;
		done += kev->size;
	}
	ret = 0;
	mutex_lock(&molly_lock);
	list_for_each_entry_safe(kev, tmp, &taken, node) {
		if (!done)
			break;
		done -= kev->size;
		list_del(&kev->node);
		client->queued_bytes -= kev->size;
		if (kev->final)
			client->inflight--;
		ret += kev->size;
		kfree(kev);
	}
	/* What was not copied goes back to the head of the queue, in order. */
	list_splice(&taken, &client->events);
	mutex_unlock(&molly_lock);
	ret = ret ? ret : -EFAULT;
out_unlock_read:
	mutex_unlock(&client->read_lock);
	return ret;
}

static __poll_t molly_poll(struct file *file, poll_table *wait)
{
	struct molly_client *client = file->private_data;
	__poll_t mask = EPOLLOUT | EPOLLWRNORM;

	poll_wait(file, &client->wq, wait);
	mutex_lock(&molly_lock);
	if (!list_empty(&client->events))
		mask |= EPOLLIN | EPOLLRDNORM;
	mutex_unlock(&molly_lock);
	return mask;
}

static const struct file_operations molly_fops = {
	.owner		= THIS_MODULE,
	.open		= molly_open,
	.release	= molly_release,
	.read		= molly_read,
	.write		= molly_write,
	.poll		= molly_poll,
	.unlocked_ioctl	= molly_ioctl,
	.compat_ioctl	= compat_ptr_ioctl, /* one layout for 32- and 64-bit callers */
	.llseek		= no_llseek,
};

static struct miscdevice molly_misc = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= "molly",
	.fops	= &molly_fops,
	.mode	= 0660, /* udev gives it group molly */
};

/* ---- /dev/molly-control ---- */

static int molly_ctl_open_fn(struct inode *inode, struct file *file)
{
	int ret = 0;

	mutex_lock(&molly_lock);
	if (molly_ctl_open)
		ret = -EBUSY;
	else
		molly_ctl_open = true;
	mutex_unlock(&molly_lock);
	if (ret)
		return ret;
	return stream_open(inode, file);
}

/* The daemon went away: every pending request ends with an error, none hangs. */
static int molly_ctl_release(struct inode *inode, struct file *file)
{
	struct molly_req *req;
	struct hlist_node *tmp;
	int bkt;

	mutex_lock(&molly_lock);
	hash_for_each_safe(molly_reqs, bkt, tmp, req, hnode) {
		if (req->client) {
			molly_req_fail(req, MOLLY_ERR_UNAVAILABLE, -ECONNRESET,
				       "the daemon went away");
		} else {
			molly_req_unlink(req);
			molly_req_free(req);
		}
	}
	WARN_ON_ONCE(!list_empty(&molly_ctl_queue));
	molly_ctl_open = false;
	mutex_unlock(&molly_lock);
	return 0;
}

static ssize_t molly_ctl_read(struct file *file, char __user *buf, size_t len, loff_t *ppos)
{
	struct molly_ctl_msg cancel;
	struct molly_req *req;
	ssize_t done = 0;
	int ret;

	for (;;) {
		mutex_lock(&molly_lock);
		if (!list_empty(&molly_ctl_queue))
			break;
		mutex_unlock(&molly_lock);
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		ret = wait_event_interruptible(molly_ctl_wq,
					       !list_empty_careful(&molly_ctl_queue));
		if (ret)
			return ret;
	}
	while (!list_empty(&molly_ctl_queue)) {
		const void *rec;
		u32 size;

		req = list_first_entry(&molly_ctl_queue, struct molly_req, ctl_node);
		if (!req->delivered) {
			rec = req->msg;
			size = req->msg_size;
		} else {
			memset(&cancel, 0, sizeof(cancel));
			cancel.size = sizeof(cancel);
			cancel.type = MOLLY_CTL_CANCEL;
			cancel.id = req->id;
			rec = &cancel;
			size = sizeof(cancel);
		}
		if (size > len - (size_t)done) {
			if (!done)
				done = -EINVAL;
			break;
		}
		if (copy_to_user(buf + done, rec, size)) {
			if (!done)
				done = -EFAULT;
			break;
		}
		done += size;
		molly_ctl_dequeue(req);
		if (!req->delivered) {
			req->delivered = true;
			molly_req_drop_msg(req);
			/* Cancelled before the daemon saw it? Tell it right after. */
			if (req->cancel)
				molly_ctl_enqueue(req);
		} else {
			req->cancel_sent = true;
		}
	}
	mutex_unlock(&molly_lock);
	return done;
}

/* Checks one event record from the daemon; the payload must match its type. */
static int molly_event_check(const struct molly_event *ev, size_t len)
{
	if (len < sizeof(*ev) || ev->size != len || len > MOLLY_EVENT_MAX)
		return -EINVAL;
	if (ev->flags || ev->reserved || ev->len > len - sizeof(*ev))
		return -EINVAL;
	if (ALIGN(sizeof(*ev) + ev->len, 8) != len)
		return -EINVAL;
	switch (ev->type) {
	case MOLLY_EVENT_TEXT:
		return ev->len ? 0 : -EINVAL;
	case MOLLY_EVENT_DONE:
		return ev->len == sizeof(struct molly_done) ? 0 : -EINVAL;
	case MOLLY_EVENT_ERROR: {
		const struct molly_error *e = (const void *)(ev + 1);

		if (ev->len != sizeof(*e) || !e->kind || e->kind >= ARRAY_SIZE(molly_err_names))
			return -EINVAL;
		return 0;
	}
	default:
		return -EINVAL;
	}
}

/*
 * write() on the control node: exactly one struct molly_event record for a request. -ENOENT
 * when the request is unknown (it ended already). Never blocks: a client that does not read
 * loses its text and gets an error instead.
 */
static ssize_t molly_ctl_write(struct file *file, const char __user *buf, size_t len,
			       loff_t *ppos)
{
	struct molly_event *ev;
	struct molly_kev *kev;
	struct molly_client *client;
	struct molly_req *req;
	ssize_t ret = len;

	if (len < sizeof(*ev) || len > MOLLY_EVENT_MAX)
		return -EINVAL;
	kev = kmalloc(sizeof(*kev) + len, GFP_KERNEL_ACCOUNT);
	if (!kev)
		return -ENOMEM;
	if (copy_from_user(kev->data, buf, len)) {
		kfree(kev);
		return -EFAULT;
	}
	ev = (struct molly_event *)kev->data;
	if (molly_event_check(ev, len)) {
		kfree(kev);
		return -EINVAL;
	}
	kev->size = len;
	kev->final = ev->type != MOLLY_EVENT_TEXT;

	mutex_lock(&molly_lock);
	req = molly_req_find(ev->id);
	if (!req || !req->delivered) {
		ret = -ENOENT;
		goto out_free;
	}
	client = req->client;
	if (!kev->final) {
		if (!client || req->overflow)
			goto out_free; /* nobody to read it */
		if (client->queued_bytes + len >
		    max_t(unsigned int, READ_ONCE(client_queue_bytes), MOLLY_EVENT_MAX)) {
			/* The client does not read: stop generating for it. */
			req->overflow = true;
			if (!req->cancel) {
				req->cancel = true;
				molly_ctl_enqueue(req);
			}
			goto out_free;
		}
		list_add_tail(&kev->node, &client->events);
		client->queued_bytes += len;
		wake_up_interruptible(&client->wq);
		mutex_unlock(&molly_lock);
		return ret;
	}
	if (!client) {
		molly_req_unlink(req);
		molly_req_free(req);
		goto out_free;
	}
	if (req->overflow) {
		molly_req_fail(req, MOLLY_ERR_CLIENT_SLOW, -ENOBUFS,
			       "the client did not read its events");
		goto out_free;
	}
	/* The final record fits the preallocated one (molly_event_check bounds its size). */
	memcpy(req->final->data, kev->data, len);
	req->final->size = len;
	req->final->final = true;
	list_add_tail(&req->final->node, &client->events);
	client->queued_bytes += len;
	req->final = NULL;
	molly_req_unlink(req);
	molly_req_free(req);
	wake_up_interruptible(&client->wq);
out_free:
	mutex_unlock(&molly_lock);
	kfree(kev);
	return ret;
}

static __poll_t molly_ctl_poll(struct file *file, poll_table *wait)
{
	__poll_t mask = EPOLLOUT | EPOLLWRNORM;

	poll_wait(file, &molly_ctl_wq, wait);
	mutex_lock(&molly_lock);
	if (!list_empty(&molly_ctl_queue))
		mask |= EPOLLIN | EPOLLRDNORM;
	mutex_unlock(&molly_lock);
	return mask;
}

static long molly_ctl_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	if (molly_ioc_is(cmd, MOLLY_IOC_VERSION))
		return molly_ioc_version(cmd, arg);
	return -ENOTTY;
}

static const struct file_operations molly_ctl_fops = {
	.owner		= THIS_MODULE,
	.open		= molly_ctl_open_fn,
	.release	= molly_ctl_release,
	.read		= molly_ctl_read,
	.write		= molly_ctl_write,
	.poll		= molly_ctl_poll,
	.unlocked_ioctl	= molly_ctl_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
	.llseek		= no_llseek,
};

static struct miscdevice molly_ctl_misc = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= "molly-control",
	.fops	= &molly_ctl_fops,
	.mode	= 0600, /* udev gives it to the daemon's user */
};

static int __init molly_init(void)
{
	int ret;

	BUILD_BUG_ON(sizeof(struct molly_event) + sizeof(struct molly_done) > MOLLY_FINAL_SIZE);
	ret = misc_register(&molly_ctl_misc);
	if (ret)
		return ret;
	ret = misc_register(&molly_misc);
	if (ret)
		goto out_deregister_ctl;
	return 0;

out_deregister_ctl:
	misc_deregister(&molly_ctl_misc);
	return ret;
}

static void __exit molly_exit(void)
{
	/* Both nodes hold a module reference while open, so nothing is pending here. */
	misc_deregister(&molly_misc);
	misc_deregister(&molly_ctl_misc);
	WARN_ON_ONCE(!hash_empty(molly_reqs));
}

module_init(molly_init);
module_exit(molly_exit);

MODULE_DESCRIPTION("Molly: /dev/molly for native clients of the local inference service");
MODULE_AUTHOR("The Molly authors");
MODULE_LICENSE("Dual MIT/GPL");
