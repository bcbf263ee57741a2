/* SPDX-License-Identifier: MIT */
/*
 * blob-load.h: reading a whole adapter blob from disk into memory as fast as the disk allows,
 * and checking its SHA-256 while it streams in (the cold → warm step of the adapter tiers).
 *
 * Paths, best first (the loader falls back by itself and says which one ran):
 *   uring           io_uring, O_DIRECT, the destination registered as a fixed buffer, the
 *                   file as a fixed file, queue_depth reads of chunk_bytes in flight
 *   uring-buffered  the same through the page cache: the file system refused O_DIRECT (at
 *                   open, or in its reads: the load starts again without it)
 *   pread           plain buffered pread(): io_uring was refused (seccomp, io_uring_disabled,
 *                   old kernel) or asked for
 *   mmap            map and copy (benchmarks only: never chosen by fallback)
 * Short reads are continued, EINTR/EAGAIN completions resubmitted; a read that hits the end of
 * the file before the size seen at open is -EIO ("truncated"); a hash that differs from the
 * expected one is -EBADMSG. Every read in flight is reaped before any return.
 *
 * Hashing: chunks are hashed in file order as soon as they and all before them have arrived,
 * while the later reads are still in flight (sha256.h picks SHA-NI where the CPU has it), on
 * a hashing thread of the loader's where there is more than one CPU.
 *
 * Threading: a loader is used by one thread at a time (the scheduler's loader thread, or a
 * benchmark); separate loaders may run concurrently.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

enum blob_path {
	BLOB_PATH_URING,
	BLOB_PATH_URING_BUFFERED,
	BLOB_PATH_PREAD,
	BLOB_PATH_MMAP,
	_BLOB_PATH_MAX,
};

/* "uring", "uring-buffered", "pread", "mmap" */
const char *blob_path_name(enum blob_path p);
/* Parses those names; -EINVAL otherwise. */
int blob_path_from_name(const char *name, enum blob_path *ret);

/* Test-only faults, applied to completions as if the kernel had returned them. */
struct blob_fault {
	uint64_t error_at;      /* a read covering this file offset fails with -error_errno */
	int error_errno;        /* 0: none */
	uint64_t short_at;      /* the first read covering this offset returns short_bytes */
	uint32_t short_bytes;   /* 0: none (multiple of 4096 for O_DIRECT reads) */
	uint32_t eagain_reads;  /* the first N completions come back -EAGAIN (resubmitted) */
	bool refuse_direct;     /* open(O_DIRECT) fails with EINVAL, as on file systems without it */
	bool refuse_direct_reads; /* O_DIRECT opens, its reads fail with EINVAL (FUSE, NFS...) */
	/* called with the open file after its size was taken (e.g. to truncate it for real) */
	void (*after_open)(int fd, void *userdata);
	void *userdata;
};

struct blob_loader_params {
	enum blob_path path;    /* wanted (default uring); uring falls back as above */
	uint32_t queue_depth;   /* reads in flight (default 8, at most 64) */
	uint32_t chunk_bytes;   /* bytes a read at most (default 1 MiB; a multiple of 4096); a
				 * blob smaller than queue_depth of them is read in queue_depth
				 * pieces of at least 64 KiB */
	const struct blob_fault *fault; /* tests: NULL */
	bool hash_inline;       /* hash on the reading thread (default: a hashing thread when
				 * there is more than one CPU, for blobs of hash_thread_min_bytes) */
	uint32_t hash_thread_min_bytes; /* 0: 8 MiB (smaller: cheaper inline than a hand-off) */
	/* Every load goes into the same memory, which outlives the loader: its fixed-buffer
	 * registration is kept between loads instead of pinned anew (benchmarks). Never when
	 * destinations are freed: a registration keeps the old pages. */
	bool reuse_destination;
};

struct blob_loader;

/* Never fails for want of io_uring: the loader then uses pread and blob_loader_note() says
 * why. -EINVAL for bad parameters, -ENOMEM. */
int blob_loader_new(const struct blob_loader_params *p, struct blob_loader **ret);
struct blob_loader *blob_loader_free(struct blob_loader *l);
DEFINE_CLEANUP_FUNC(struct blob_loader *, blob_loader_free, NULL)

/* Why the loader runs a lesser path than asked ("" when it does not); valid while it lives. */
const char *blob_loader_note(const struct blob_loader *l);

/* Where the bytes go: at least `bytes` (rounded up to 4096) of 4096-aligned memory, or NULL
 * (the load then fails with -ENOMEM). The memory belongs to the caller on return, even on
 * failure (ret->data says where it is). */
typedef void *(*blob_alloc_fn)(size_t bytes, void *userdata);

struct blob_load_result {
	enum blob_path path;    /* the path that really ran */
	void *data;             /* from alloc (NULL when alloc was not reached) */
	uint64_t bytes;         /* the blob's size */
	uint64_t ns;            /* open to last byte checked */
	uint64_t hash_ns;       /* of which hashing on this thread */
	uint64_t resubmits;     /* short reads continued, EINTR/EAGAIN resubmitted */
	uint8_t sha256[32];     /* of what was read (when verify) */
};

/*
 * Reads the file at path whole into memory from alloc. verify: hash it; expect (if not NULL):
 * the SHA-256 it must have, else -EBADMSG. -ENOENT, -EIO (read error, truncated), -ENOMEM;
 * e names the file, the offset and what went wrong.
 */
int blob_load(struct blob_loader *l, const char *path, bool verify, const uint8_t expect[32],
	      blob_alloc_fn alloc, void *userdata, struct blob_load_result *ret, struct errmsg *e);
