/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR MIT) */
/*
 * molly.h: the /dev/molly ABI, shared by kmod-shim (the kernel module), mollyd (its control
 * node and its CUSE server) and clients (libmolly). docs/uapi.md is the manual.
 *
 * A client opens /dev/molly and, for each request:
 *   write(fd, text, n)           the request's text (a prompt, or the messages as a JSON array
 *                                with MOLLY_SUBMIT_CHAT), staged in the open file; several
 *                                writes append; at most MOLLY_TEXT_MAX bytes
 *   ioctl(fd, MOLLY_IOC_SUBMIT)  the fixed part (model, sampling, limits, flags, class); the
 *                                staged text must be exactly text_len bytes; returns its id
 *   poll/read(fd)                whole struct molly_event records: TEXT chunks, then exactly
 *                                one DONE or ERROR per request
 *   ioctl(fd, MOLLY_IOC_CANCEL)  ends a request early (its DONE says "cancelled")
 * Several requests may be in flight on one open file; each belongs to the file that submitted
 * it. No ioctl struct holds a user pointer, so the same ABI works through CUSE's restricted
 * ioctls, and every struct has the same layout for 32- and 64-bit callers.
 *
 * Versioning: every ioctl struct begins with its size (__u32), which must equal
 * _IOC_SIZE(cmd). A larger struct from a newer caller is accepted when the bytes beyond what
 * the server knows are zero (else -E2BIG); reserved fields must be zero (else -EINVAL).
 */
#ifndef _UAPI_LINUX_MOLLY_H
#define _UAPI_LINUX_MOLLY_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define MOLLY_ABI_VERSION 1

#define MOLLY_DEVICE_PATH  "/dev/molly"
#define MOLLY_CONTROL_PATH "/dev/molly-control"

/* Limits (the server reports its own in struct molly_version). */
#define MOLLY_TEXT_MAX    (1U << 20) /* bytes of a request's text */
#define MOLLY_EVENT_MAX   4096       /* bytes of one struct molly_event record, header included */
#define MOLLY_NAME_MAX    128        /* bytes of a model name, NUL included */
#define MOLLY_IOC_SIZE_MAX 1024      /* the largest ioctl struct a server reads */

/* ---- ioctls on /dev/molly (and /dev/molly-control: VERSION only) ---- */

/* Features in struct molly_version.features */
#define MOLLY_FEATURE_KERNEL (1U << 0) /* served by kmod-shim */
#define MOLLY_FEATURE_CUSE   (1U << 1) /* served by mollyd through CUSE */

struct molly_version {
	__u32 size;               /* in: sizeof(struct molly_version) */
	__u32 abi_version;        /* out: MOLLY_ABI_VERSION */
	__u32 features;           /* out: MOLLY_FEATURE_* */
	__u32 text_max;           /* out: the server's MOLLY_TEXT_MAX */
	__u32 event_max;          /* out: the largest event record; read() buffers at least this */
	__u32 max_inflight_file;  /* out: requests one open file may have in flight */
	__u32 max_inflight_total; /* out: requests all clients may have in flight */
	__u32 reserved0;          /* zero */
	__u64 reserved[2];        /* zero in and out */
};

/* Flags in struct molly_submit.flags; any other bit is -EINVAL. */
#define MOLLY_SUBMIT_CHAT       (1U << 0) /* the text is a JSON array of {role, content} */
#define MOLLY_SUBMIT_SEED       (1U << 1) /* seed is set (else a random seed) */
#define MOLLY_SUBMIT_IGNORE_EOS (1U << 2) /* generate max_tokens even past end of generation */
#define MOLLY_SUBMIT_FLAGS_ALL  0x7U

/* Declared sensitivity classes (struct molly_submit.declared_class): only a class stricter
 * than what the policy finds counts. */
#define MOLLY_CLASS_NONE     0
#define MOLLY_CLASS_PUBLIC   1
#define MOLLY_CLASS_PERSONAL 2
#define MOLLY_CLASS_SECRET   3

struct molly_submit {
	__u32 size;               /* in: sizeof(struct molly_submit) */
	__u32 flags;              /* in: MOLLY_SUBMIT_* */
	__u64 id;                 /* out: the request's id (never 0) */
	__u32 text_len;           /* in: bytes staged with write(); 1..MOLLY_TEXT_MAX */
	__u32 max_tokens;         /* in: 0: until end of generation or a full context */
	__u32 temperature_milli;  /* in: temperature x 1000; 0: greedy */
	__u32 top_p_milli;        /* in: top_p x 1000; 0 or >= 1000: off */
	__u64 seed;               /* in: with MOLLY_SUBMIT_SEED */
	__u32 declared_class;     /* in: MOLLY_CLASS_* */
	__u32 reserved0;          /* zero */
	char model[MOLLY_NAME_MAX]; /* in: NUL-terminated; "" is the base; "NAME", "NAME@N",
				     * "base:adapter" as on D-Bus */
	__u64 reserved[4];        /* zero */
};

struct molly_cancel {
	__u32 size;               /* in: sizeof(struct molly_cancel) */
	__u32 reserved0;          /* zero */
	__u64 id;                 /* in: a request of this open file */
};

/* Flags in struct molly_status.flags */
#define MOLLY_STATUS_DAEMON (1U << 0) /* a daemon takes requests now */
#define MOLLY_STATUS_CUSE   (1U << 1) /* served through CUSE */

struct molly_status {
	__u32 size;               /* in: sizeof(struct molly_status) */
	__u32 flags;              /* out: MOLLY_STATUS_* */
	__u32 inflight;           /* out: this file's requests without their final event read */
	__u32 queued_bytes;       /* out: event bytes waiting for read() on this file */
	__u32 inflight_total;     /* out: every client's requests in flight */
	__u32 staged_bytes;       /* out: text written and not yet submitted */
	__u64 reserved[2];        /* zero in and out */
};

#define MOLLY_IOC_MAGIC 0xB7
#define MOLLY_IOC_VERSION _IOWR(MOLLY_IOC_MAGIC, 0x00, struct molly_version)
#define MOLLY_IOC_SUBMIT  _IOWR(MOLLY_IOC_MAGIC, 0x01, struct molly_submit)
#define MOLLY_IOC_CANCEL  _IOW(MOLLY_IOC_MAGIC, 0x02, struct molly_cancel)
#define MOLLY_IOC_STATUS  _IOWR(MOLLY_IOC_MAGIC, 0x03, struct molly_status)

/* ---- events: read() on /dev/molly, write() on /dev/molly-control ---- */

#define MOLLY_EVENT_TEXT  1 /* payload: UTF-8 text (whole characters), len bytes */
#define MOLLY_EVENT_DONE  2 /* payload: struct molly_done; the request's last event */
#define MOLLY_EVENT_ERROR 3 /* payload: struct molly_error; the request's last event */

struct molly_event {
	__u32 size;               /* the whole record: header + payload, rounded up to 8 */
	__u16 type;               /* MOLLY_EVENT_* */
	__u16 flags;              /* zero */
	__u64 id;                 /* the request */
	__u32 len;                /* payload bytes following the header */
	__u32 reserved;           /* zero */
};

#define MOLLY_DONE_CONFIDENCE (1U << 0) /* confidence_micro is set */

struct molly_done {
	__u32 prompt_tokens;
	__u32 completion_tokens;
	__u32 flags;              /* MOLLY_DONE_* */
	__u32 confidence_micro;   /* routed answers: exp(mean logprob) x 1e6 */
	char finish_reason[16];   /* "stop", "length", "cancelled" */
	char model[MOLLY_NAME_MAX]; /* the resolved model: base or adapter name */
	char target[MOLLY_NAME_MAX]; /* the routing target that answered, or "" */
};

/* Error kinds, named as on D-Bus (struct molly_error.name). */
#define MOLLY_ERR_INVALID_REQUEST  1 /* org.molly.Error.InvalidRequest */
#define MOLLY_ERR_MODEL_NOT_FOUND  2 /* org.molly.Error.ModelNotFound */
#define MOLLY_ERR_CONTEXT_LENGTH   3 /* org.molly.Error.ContextLengthExceeded */
#define MOLLY_ERR_FORBIDDEN        4 /* org.freedesktop.DBus.Error.AccessDenied */
#define MOLLY_ERR_QUEUE_FULL       5 /* org.molly.Error.QueueFull */
#define MOLLY_ERR_UNAVAILABLE      6 /* org.molly.Error.Unavailable (no daemon, or it died) */
#define MOLLY_ERR_CANCELLED        7 /* org.molly.Error.Cancelled */
#define MOLLY_ERR_INTERNAL         8 /* org.molly.Error.Internal */
#define MOLLY_ERR_CLIENT_SLOW      9 /* org.molly.Error.Cancelled: the client did not read */

struct molly_error {
	__s32 error;              /* -errno behind it */
	__u32 kind;               /* MOLLY_ERR_* */
	char name[64];            /* the D-Bus error name */
	char message[256];        /* human-readable, NUL-terminated */
};

/* ---- /dev/molly-control: the daemon's side (kmod-shim only) ---- */

/* read() on the control node returns whole records, oldest first. */
#define MOLLY_CTL_SUBMIT 1 /* a new request; struct molly_submit, then text_len bytes */
#define MOLLY_CTL_CANCEL 2 /* the client cancelled or closed: end the request */

struct molly_ctl_msg {
	__u32 size;               /* the whole record: header + text, rounded up to 8 */
	__u16 type;               /* MOLLY_CTL_* */
	__u16 flags;              /* zero */
	__u64 id;                 /* the request */
	/* MOLLY_CTL_SUBMIT: the submitter as the kernel saw it at MOLLY_IOC_SUBMIT (initial
	 * namespaces) */
	__u32 uid;
	__u32 gid;
	__u32 pid;                /* thread group id */
	__u32 reserved0;
	__u64 cgroup_id;          /* the cgroup v2 id (0: unknown) */
	char comm[16];            /* the submitter's task name (a hint: the task may set it) */
	struct molly_submit submit;
	/* text: submit.text_len bytes */
};

#endif /* _UAPI_LINUX_MOLLY_H */
