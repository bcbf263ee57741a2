/* SPDX-License-Identifier: MIT */
/*
 * audit.h: the audit store — one record per request the daemon handled, in LMDB under
 * <StateDirectory>/audit (a directory holding data.mdb and lock.mdb).
 *
 * A record says who asked (uid, member, front), what the policy decided (class, findings by
 * kind with counts, permitted tiers), where the request went (target, tier), what happened
 * on the way (redactions, escalations, fallbacks), how it ended (finish reason or error) and
 * whether kernel egress enforcement was active. It never holds a finding's value or offsets:
 * the store must be safe to read by anyone who may read the audit.
 *
 * Keys are 16 bytes: the record's CLOCK_REALTIME time in ns, then a sequence number, both
 * big-endian, so LMDB's byte order is time order and a range scan by time is a cursor seek.
 * Values are the record as one compact JSON object (docs/audit.md), the same text
 * `molly audit --json` prints.
 *
 * Every append is its own write transaction (durable when it returns, unless no_sync). When
 * the map is full, records older than the retention go first, then the oldest eighth of what
 * is left, and the append is retried.
 *
 * Threading: one struct audit per process per store (LMDB's rule); appends and prunes from
 * one thread at a time; scans may run from any thread meanwhile. Other processes may read
 * (`molly audit`) while the daemon writes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

#define AUDIT_MAX_KINDS 32
#define AUDIT_DEFAULT_MAP_SIZE (256ull << 20)
#define AUDIT_DEFAULT_RETENTION_DAYS 90

struct audit_kind_count {
	char kind[32];       /* a finding's kind ("email", "secret", "health", ...), "rule" or
			      * "judge": never its value */
	uint32_t count;
};

struct audit_record {
	uint64_t time_ns;          /* CLOCK_REALTIME; 0 in audit_append: now */
	uint64_t seq;              /* set by audit_append */
	uint64_t request_id;       /* the manager's id (0: rejected before it had one) */
	char front[16];            /* "dbus", "http" */
	int64_t uid;               /* -1: unknown (HTTP over TCP) */
	char member[72];           /* "" : none */
	char class_name[16];       /* "public", "personal", "secret" */
	char declared[16];         /* the caller's declared class, "" : none */
	struct audit_kind_count findings[AUDIT_MAX_KINDS];
	size_t n_findings;
	uint32_t permitted_tiers;  /* bit n = Tn */
	char target[200];          /* "local:<base>[:adapter]"; "" : none chosen */
	int tier;                  /* 0..3; -1: none chosen */
	uint32_t redactions;
	uint32_t escalations;
	uint32_t fallbacks;
	char route[200];           /* why the router chose target ("" : no routing decision) */
	char finish[24];           /* "stop", "length", "cancelled"; "" when error is set */
	char error[40];            /* the manager's error code name; "" : none */
	uint32_t prompt_tokens;
	uint32_t completion_tokens;
	bool egress_enforced;
};

/* Adds n findings of kind to r (merging with an existing entry; the last slot takes
 * "other" when more than AUDIT_MAX_KINDS kinds appear). */
void audit_record_add_finding(struct audit_record *r, const char *kind, uint32_t n);

struct audit_options {
	uint64_t map_size;     /* 0: AUDIT_DEFAULT_MAP_SIZE */
	uint64_t retention_ns; /* what MAP_FULL prunes first; 0: no retention */
	bool read_only;        /* readers (`molly audit`): never creates anything */
	bool no_sync;          /* tests only: no fsync per append */
};

struct audit;

/* Opens (creating unless read_only) the store directory dir. -ENOENT when read_only and
 * there is no store; errors in e name the path. */
int audit_open(const char *dir, const struct audit_options *o, struct audit **ret,
	       struct errmsg *e);
struct audit *audit_close(struct audit *a);
DEFINE_CLEANUP_FUNC(struct audit *, audit_close, NULL)

/* Writes r in its own transaction (time_ns 0: now); sets r->seq. Returns 0, or the number
 * of records dropped to make room (> 0: the map was full), or -errno (-ENOSPC: still full). */
int audit_append(struct audit *a, struct audit_record *r, struct errmsg *e);

/* Deletes every record older than before_ns. *ret_removed (may be NULL): how many. */
int audit_prune(struct audit *a, uint64_t before_ns, uint64_t *ret_removed, struct errmsg *e);

struct audit_filter {
	uint64_t since_ns;       /* records at or after; 0: all */
	uint64_t until_ns;       /* records before; 0: no bound */
	int tier;                /* the chosen tier; -1: any */
	const char *class_name;  /* NULL: any */
};

/* Calls fn for each matching record in time order inside one read transaction (a
 * consistent snapshot); fn returns < 0 to stop (returned), else 0. A record that does not
 * parse fails the scan with -EBADMSG naming its key. */
int audit_scan(struct audit *a, const struct audit_filter *f,
	       int (*fn)(const struct audit_record *r, void *userdata), void *userdata,
	       struct errmsg *e);

/* One line of JSON (no newline), malloc'd; the store's value format. */
int audit_record_to_json(const struct audit_record *r, char **ret);
int audit_record_from_json(const char *text, size_t len, struct audit_record *ret);
/* One human-readable line (no newline), malloc'd: time in UTC, caller, decision, outcome. */
int audit_record_format(const struct audit_record *r, char **ret);

/* "30d", "12h", "15m", "3600s", "2w" (and combinations like "1d12h") into ns. -EINVAL. */
int audit_parse_duration(const char *s, uint64_t *ret);
/* "T0".."T3" (or "0".."3") into 0..3; -EINVAL. */
int audit_parse_tier(const char *s, int *ret);
