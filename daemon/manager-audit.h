/* SPDX-License-Identifier: MIT */
/*
 * manager-audit.h: the manager's audit writer (internal to manager.c). Records are queued
 * from any thread (the scheduler's thread must never wait for an fsync) and written by one
 * thread, each in its own LMDB transaction; the same thread applies the retention at start,
 * every hour and after every AUDIT_PRUNE_EVERY writes.
 */
#pragma once

#include <stdint.h>

#include "audit/audit.h"
#include "basic/errmsg.h"

struct manager_audit;

/* Opens <state_dir>/audit (creating state_dir's last component if needed), prunes what is
 * older than retention_days (0: keep forever) and starts the writer. */
int manager_audit_new(const char *state_dir, uint32_t retention_days, uint64_t map_size,
		      struct manager_audit **ret, struct errmsg *e);
/* Writes what is queued, then stops. NULL-safe. */
struct manager_audit *manager_audit_free(struct manager_audit *ma);
void manager_audit_set_retention(struct manager_audit *ma, uint32_t retention_days);
/* Queues a copy of r (time_ns 0: now). Never blocks on I/O. */
void manager_audit_submit(struct manager_audit *ma, const struct audit_record *r);
/* Waits until everything queued so far is written (tests, Status). */
void manager_audit_flush(struct manager_audit *ma);
