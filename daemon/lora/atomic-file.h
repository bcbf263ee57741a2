/* SPDX-License-Identifier: MIT */
/*
 * atomic-file.h: writes a file so that it appears complete or not at all.
 *
 * The data goes to PATH.tmp (created 0644, truncated if present); atomic_file_finish() fsyncs
 * it, renames it over PATH and fsyncs the directory. atomic_file_free() on an unfinished file
 * removes PATH.tmp, so a failed write never leaves a half file under the final name (a crash
 * may leave PATH.tmp behind). atomic_file_reserve() allocates the whole size up front so a
 * full disk is reported (-ENOSPC, "no space left ... (N bytes needed)") before the work.
 *
 * Errors: -errno with a message naming the file; after a failed write later calls fail too.
 * Threading: one thread at a time.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

struct atomic_file;

int atomic_file_new(const char *path, struct atomic_file **ret, struct errmsg *e);
/* NULL-safe, returns NULL. Unless finished, closes and removes PATH.tmp. */
struct atomic_file *atomic_file_free(struct atomic_file *f);
DEFINE_CLEANUP_FUNC(struct atomic_file *, atomic_file_free, NULL)

/* Reserves size bytes (fallocate; ignored where the filesystem cannot). */
int atomic_file_reserve(struct atomic_file *f, uint64_t size, struct errmsg *e);
/* Appends n bytes at the current end. */
int atomic_file_write(struct atomic_file *f, const void *data, size_t n, struct errmsg *e);
/* Writes n bytes at offset (does not move the append position). */
int atomic_file_pwrite(struct atomic_file *f, const void *data, size_t n, uint64_t offset,
		       struct errmsg *e);
/* Appends zeros up to the next multiple of align. */
int atomic_file_pad(struct atomic_file *f, uint64_t align, struct errmsg *e);
/* Bytes appended so far. */
uint64_t atomic_file_offset(const struct atomic_file *f);
/* fsync, rename to the final path, fsync the directory. */
int atomic_file_finish(struct atomic_file *f, struct errmsg *e);
