/* SPDX-License-Identifier: MIT */
/*
 * proto.h: the protocol between the daemon's core and its egress workers (molly-egress), one
 * per remote tier, over the AF_UNIX SOCK_SEQPACKET socketpair that egress_spawn_worker()
 * makes (the worker's fd 3).
 *
 * Framing: a message is one JSON object (UTF-8, at most PROTO_MAX_MESSAGE bytes), cut into
 * datagrams of at most PROTO_FRAGMENT bytes of payload; each datagram starts with one byte,
 * PROTO_FRAG_MORE when another fragment of the same message follows, PROTO_FRAG_LAST on the
 * last one. A sender holds its lock over all fragments of a message (proto_conn_send), so
 * messages never interleave. Anything else (a bad header byte, an empty datagram, a message
 * over the limit, bytes that are not a JSON object) is a protocol error: the peer is broken
 * and the connection is dropped.
 *
 * Trust: neither side trusts the other. proto_decode() checks every field: the type, required
 * fields present and of the right JSON type, strings without NUL and within their limits,
 * numbers within range, counts within limits. A message with an unknown field is accepted
 * (a newer peer may add one); an unknown type is not.
 *
 *   core → worker                             worker → core
 *   CONFIGURE  generation, targets[]          HELLO      tier, pid, version
 *   ALLOWED    generation (the allow-list     ENDPOINTS  generation, resolved addresses per
 *              now holds the endpoints)                  target, names that failed
 *   RESOLVE    (re-resolve now)               EVENT      id, TEXT / DONE / ERROR (remote.h)
 *   SUBMIT     id, target, tiers, class,      HEALTH     per target: available, latency
 *              the request
 *   CANCEL     id
 *
 * A worker answers CONFIGURE with ENDPOINTS of the same generation, and switches to the new
 * targets (with libcurl pinned to the addresses it reported) only when ALLOWED for that
 * generation comes back: the allow-list holds the addresses before the worker connects.
 *
 * Threading: encode/decode are pure. A struct proto_conn may be sent on from many threads.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "basic/errmsg.h"
#include "basic/macro.h"
#include "targets/remote.h"

#define PROTO_VERSION 1
#define PROTO_FRAGMENT 32768u                /* payload bytes per datagram */
#define PROTO_FRAG_MORE 0x4d                 /* 'M' */
#define PROTO_FRAG_LAST 0x4c                 /* 'L' */
#define PROTO_MAX_MESSAGE (16u << 20)        /* one whole message */
#define PROTO_MAX_TARGETS 64
#define PROTO_MAX_NAME 128
#define PROTO_MAX_URL 2048
#define PROTO_MAX_KEY 16384
#define PROTO_MAX_ENDPOINTS 1024             /* = EGRESS_MAX_DEST */
#define PROTO_MAX_CHAT_MESSAGES 4096
#define PROTO_MAX_STOP 16
#define PROTO_MAX_TEXT (8u << 20)            /* a prompt, a message's content, a TEXT chunk */
#define PROTO_MAX_SHORT 1024                 /* messages, finish reasons, roles */

enum proto_type {
	PROTO_HELLO,
	PROTO_CONFIGURE,
	PROTO_ALLOWED,
	PROTO_RESOLVE,
	PROTO_SUBMIT,
	PROTO_CANCEL,
	PROTO_ENDPOINTS,
	PROTO_EVENT,
	PROTO_HEALTH,
	PROTO_CHECK,           /* core → worker: run a health check on every target now */
	PROTO_TYPE_COUNT_,
};
const char *proto_type_name(enum proto_type t);

struct proto_target {
	char *name;
	char *url;             /* http:// or https:// */
	char *model;           /* NULL: name */
	char *key;             /* the API key itself, NULL: none (zeroed on free) */
	uint64_t timeout_ms;   /* 1 .. 3600000 */
	uint32_t retries;      /* 0 .. 100 */
	bool user_controlled;
};

struct proto_endpoint {
	char *target;
	int family;            /* AF_INET / AF_INET6 */
	uint8_t addr[16];      /* network order; IPv4 in addr[0..3] */
	uint16_t port;
};

struct proto_unresolved {
	char *target;
	char *message;
};

struct proto_health {
	char *name;
	bool available;
	double latency_ms;
};

struct proto_msg {
	enum proto_type type;
	uint64_t generation;                  /* CONFIGURE, ALLOWED, ENDPOINTS */
	uint64_t id;                          /* SUBMIT, CANCEL, EVENT (> 0) */

	/* HELLO */
	uint32_t tier;                        /* 1..3 */
	uint32_t pid;
	uint32_t version;

	/* CONFIGURE */
	struct proto_target *targets;
	size_t n_targets;

	/* ENDPOINTS */
	struct proto_endpoint *endpoints;
	size_t n_endpoints;
	struct proto_unresolved *unresolved;
	size_t n_unresolved;

	/* SUBMIT */
	char *target;
	uint32_t tiers;                       /* the request's permitted tiers, POLICY_TIER() bits */
	int class;                            /* enum policy_class */
	struct remote_request request;        /* strings owned by the message */

	/* EVENT: the remote_event fields; strings owned by the message */
	struct remote_event event;

	/* HEALTH */
	struct proto_health *health;
	size_t n_health;
};

/* Frees what the message owns (zeroing keys and request text) and resets it. */
void proto_msg_done(struct proto_msg *m);

/* JSON text (malloc'd, NUL-terminated) for m. -EINVAL when m breaks a limit decode would
 * enforce (so a peer never receives what it must refuse), -ENOMEM. */
int proto_encode(const struct proto_msg *m, char **ret, size_t *ret_len);
/* Parses and checks one message. -EBADMSG with the reason in e. On failure *ret is empty. */
int proto_decode(const char *text, size_t len, struct proto_msg *ret, struct errmsg *e);

/* ---- the connection ---- */

struct proto_conn {
	int fd;                 /* borrowed */
	pthread_mutex_t send_lock;
	/* receive side: one reader at a time */
	char *buf;
	size_t n_buf, cap_buf;
};

void proto_conn_init(struct proto_conn *c, int fd);
void proto_conn_done(struct proto_conn *c);
/* Sends one whole message (fragments under the lock). Blocks while the peer's buffer is
 * full. -EPIPE or -ECONNRESET when the peer is gone. */
int proto_conn_send(struct proto_conn *c, const char *text, size_t len);
/* Encodes and sends. */
int proto_conn_send_msg(struct proto_conn *c, const struct proto_msg *m);
/*
 * Reads one datagram. Returns 1 with a whole message in *ret_text and *ret_len (valid until the
 * next call), 0 when the message is incomplete or the socket had nothing (EAGAIN on a
 * non-blocking fd), -EPIPE at end of stream, -EBADMSG for a framing error, or -errno.
 */
int proto_conn_recv(struct proto_conn *c, const char **ret_text, size_t *ret_len);
