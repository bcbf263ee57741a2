/* SPDX-License-Identifier: MIT */
/*
 * blob-load.c: cold → warm reads of whole blobs (see blob-load.h).
 *
 * The io_uring path keeps queue_depth reads in flight over the file, each into its place in
 * the destination, which is registered with the ring for the duration of the load (one fixed
 * buffer: the kernel pins it once instead of per read; kept across loads only when the caller
 * reuses one destination, see reuse_destination). SHA-256 runs on a thread of its own where
 * there is more than one CPU. Completions arrive in any order; a
 * bitmap of finished chunks lets the hash advance over the in-order prefix while the rest is
 * still being read, so hashing overlaps the disk rather than following it.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../basic/sha256.h"
#include "../basic/time-util.h"
#include "blob-load.h"

#define BLOB_ALIGN 4096u
#define MAX_QUEUE_DEPTH 64u
/* Below this a blob is hashed on the reading thread: handing it to the hashing thread costs
 * wake-ups (milliseconds on a busy machine) for less than a millisecond of hashing. */
#define HASH_THREAD_MIN_BYTES (8u << 20)

/* The hashing thread: it hashes what the reading thread says has arrived in order, so the
 * SHA-256 (one core's worth of work, about the disk's rate) runs beside the reads rather than
 * between their completions. */
struct hasher {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool started, stop;
	struct sha256_ctx *ctx;  /* the load's, while one runs */
	const uint8_t *base;
	uint64_t avail;          /* bytes that may be hashed */
	uint64_t done;           /* bytes hashed */
	uint64_t busy_ns;
};

struct blob_loader {
	struct blob_loader_params p;
	struct io_uring ring;
	bool have_ring;
	struct iovec registered; /* the destination registered last (kept while it is reused) */
	struct hasher h;
	char note[160];
};

static void *hasher_thread(void *arg)
{
	struct hasher *h = arg;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->stop && (!h->ctx || h->done >= h->avail))
			pthread_cond_wait(&h->cond, &h->lock);
		if (h->stop)
			break;
		/* a slice at a time, so new data and the end are seen promptly */
		uint64_t from = h->done, to = MIN(h->avail, from + (1u << 20));
		struct sha256_ctx *ctx = h->ctx;
		const uint8_t *base = h->base;

		pthread_mutex_unlock(&h->lock);
		uint64_t t0 = now_ns();
		sha256_update(ctx, base + from, to - from);
		uint64_t dt = now_ns() - t0;
		pthread_mutex_lock(&h->lock);
		h->done = to;
		h->busy_ns += dt;
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static const char *const path_names[_BLOB_PATH_MAX] = {
	[BLOB_PATH_URING] = "uring",
	[BLOB_PATH_URING_BUFFERED] = "uring-buffered",
	[BLOB_PATH_PREAD] = "pread",
	[BLOB_PATH_MMAP] = "mmap",
};

const char *blob_path_name(enum blob_path p)
{
	return p < _BLOB_PATH_MAX ? path_names[p] : "?";
}

int blob_path_from_name(const char *name, enum blob_path *ret)
{
	for (int i = 0; i < _BLOB_PATH_MAX; i++)
		if (strcmp(name, path_names[i]) == 0) {
			*ret = (enum blob_path) i;
			return 0;
		}
	return -EINVAL;
}

int blob_loader_new(const struct blob_loader_params *p, struct blob_loader **ret)
{
	struct blob_loader *l;
	int r;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	if (p)
		l->p = *p;
	if (!l->p.queue_depth)
		l->p.queue_depth = 8;
	if (!l->p.chunk_bytes)
		l->p.chunk_bytes = 1u << 20;
	if (!l->p.hash_thread_min_bytes)
		l->p.hash_thread_min_bytes = HASH_THREAD_MIN_BYTES;
	if (l->p.queue_depth > MAX_QUEUE_DEPTH || l->p.chunk_bytes % BLOB_ALIGN != 0 ||
	    l->p.path >= _BLOB_PATH_MAX) {
		free(l);
		return -EINVAL;
	}
	pthread_mutex_init(&l->h.lock, NULL);
	pthread_cond_init(&l->h.cond, NULL);
	/* one core hashes while another reads; alone on one core it would only add switches */
	if (!l->p.hash_inline && sysconf(_SC_NPROCESSORS_ONLN) > 1)
		l->h.started = pthread_create(&l->h.thread, NULL, hasher_thread, &l->h) == 0;
	if (l->p.path == BLOB_PATH_URING || l->p.path == BLOB_PATH_URING_BUFFERED) {
		r = io_uring_queue_init(l->p.queue_depth, &l->ring, 0);
		if (r < 0) {
			/* seccomp (EPERM/ENOSYS), kernel.io_uring_disabled (EPERM), no memory for
			 * the rings: the loader still works, through pread */
			snprintf(l->note, sizeof(l->note), "io_uring refused (%s): pread",
				 strerror(-r));
			l->p.path = BLOB_PATH_PREAD;
		} else
			l->have_ring = true;
	}
	*ret = l;
	return 0;
}

struct blob_loader *blob_loader_free(struct blob_loader *l)
{
	if (!l)
		return NULL;
	if (l->h.started) {
		pthread_mutex_lock(&l->h.lock);
		l->h.stop = true;
		pthread_cond_broadcast(&l->h.cond);
		pthread_mutex_unlock(&l->h.lock);
		pthread_join(l->h.thread, NULL);
	}
	pthread_cond_destroy(&l->h.cond);
	pthread_mutex_destroy(&l->h.lock);
	if (l->have_ring)
		io_uring_queue_exit(&l->ring);
	free(l);
	return NULL;
}

const char *blob_loader_note(const struct blob_loader *l)
{
	return l->note;
}

/* ---- one load ---- */

struct load {
	struct blob_loader *l;
	const char *path;
	int fd;
	uint64_t size;           /* seen at open */
	uint8_t *dst;
	bool verify;
	bool direct;             /* fd is O_DIRECT */
	uint64_t chunk;          /* bytes a read: chunk_bytes, smaller for small blobs */
	struct sha256_ctx sha;
	uint64_t hashed;         /* bytes hashed so far: a prefix of the file */
	uint64_t hash_ns;
	uint64_t resubmits;
	uint32_t eagain_left;    /* fault: completions still to turn into -EAGAIN */
	bool short_done;         /* fault: the short read happened */
	struct errmsg *e;
};

/* Waits until the hashing thread has hashed everything it was given and detaches it from
 * the load (also on errors: it must not read the destination after we return). */
static void hash_wait(struct load *ld)
{
	struct hasher *h = &ld->l->h;

	if (!h->started)
		return;
	pthread_mutex_lock(&h->lock);
	while (h->ctx && h->done < h->avail)
		pthread_cond_wait(&h->cond, &h->lock);
	if (h->ctx)
		ld->hash_ns += h->busy_ns;
	h->ctx = NULL;
	pthread_mutex_unlock(&h->lock);
}

static const struct blob_fault no_fault;

static const struct blob_fault *fault_of(const struct load *ld)
{
	return ld->l->p.fault ? ld->l->p.fault : &no_fault;
}

/* Hashes what arrived in order: up to `upto` bytes of the file (on the hashing thread when
 * there is one: then this only says how far it may go). */
static void hash_upto(struct load *ld, uint64_t upto)
{
	struct hasher *h = &ld->l->h;
	uint64_t t0;

	if (!ld->verify || upto <= ld->hashed)
		return;
	if (h->started && ld->size >= ld->l->p.hash_thread_min_bytes) {
		pthread_mutex_lock(&h->lock);
		if (!h->ctx) {
			h->ctx = &ld->sha;
			h->base = ld->dst;
			h->avail = h->done = 0;
			h->busy_ns = 0;
		}
		h->avail = upto;
		pthread_cond_broadcast(&h->cond);
		pthread_mutex_unlock(&h->lock);
		ld->hashed = upto;
		return;
	}
	t0 = now_ns();
	sha256_update(&ld->sha, ld->dst + ld->hashed, upto - ld->hashed);
	ld->hashed = upto;
	ld->hash_ns += now_ns() - t0;
}

/* What the kernel said, with the test faults applied. */
static ssize_t faulted(struct load *ld, uint64_t off, size_t len, ssize_t res)
{
	const struct blob_fault *f = fault_of(ld);

	if (ld->eagain_left > 0) {
		ld->eagain_left--;
		return -EAGAIN;
	}
	if (f->refuse_direct_reads && ld->direct)
		return -EINVAL;
	if (f->error_errno && res >= 0 && f->error_at >= off && f->error_at < off + len)
		return -f->error_errno;
	if (f->short_bytes && !ld->short_done && f->short_at >= off && f->short_at < off + len &&
	    res > (ssize_t) f->short_bytes) {
		ld->short_done = true;
		return f->short_bytes;
	}
	return res;
}

static int read_error(struct load *ld, int r, uint64_t off)
{
	if (r == 0)
		return errmsg_set(ld->e, -EIO,
				  "%s: truncated: the file ends at byte %llu, %llu bytes were there "
				  "when it was opened",
				  ld->path, (unsigned long long) off, (unsigned long long) ld->size);
	return errmsg_set(ld->e, r, "%s: read error at byte %llu: %s", ld->path,
			  (unsigned long long) off, strerror(-r));
}

static int load_pread(struct load *ld)
{
	uint64_t off = 0;
	size_t chunk = ld->l->p.chunk_bytes;

	while (off < ld->size) {
		size_t len = (size_t) MIN((uint64_t) chunk, ld->size - off);
		ssize_t k = pread(ld->fd, ld->dst + off, len, (off_t) off);

		k = faulted(ld, off, len, k < 0 ? -errno : k);
		if (k == -EINTR || k == -EAGAIN) {
			ld->resubmits++;
			continue;
		}
		if (k <= 0)
			return read_error(ld, (int) k, off);
		if ((size_t) k < len)
			ld->resubmits++;
		off += (uint64_t) k;
		hash_upto(ld, off);
	}
	return 0;
}

static int load_mmap(struct load *ld)
{
	void *map;

	if (ld->size == 0)
		return 0;
	map = mmap(NULL, ld->size, PROT_READ, MAP_PRIVATE, ld->fd, 0);
	if (map == MAP_FAILED)
		return errmsg_set(ld->e, -errno, "%s: mmap: %m", ld->path);
	(void) madvise(map, ld->size, MADV_SEQUENTIAL);
	/* Copy and hash chunk by chunk: the copy is still in the cache when it is hashed. A
	 * file truncated under the map would raise SIGBUS here: mmap is a benchmark path. */
	for (uint64_t off = 0; off < ld->size; off += ld->l->p.chunk_bytes) {
		size_t len = (size_t) MIN((uint64_t) ld->l->p.chunk_bytes, ld->size - off);

		memcpy(ld->dst + off, (const uint8_t *) map + off, len);
		hash_upto(ld, off + len);
	}
	munmap(map, ld->size);
	return 0;
}

/* The io_uring path: chunk i covers [i*chunk, min((i+1)*chunk, size)); its read asks for the
 * chunk rounded up to 4096 (O_DIRECT's rule; the destination has the room) and is complete
 * when it has the file's bytes of the chunk. */
struct chunk_state {
	uint64_t got;   /* bytes of this chunk read so far */
	bool done;
};

static int submit_chunk(struct load *ld, struct chunk_state *cs, uint64_t i, bool fixed_buf)
{
	uint64_t chunk = ld->chunk;
	uint64_t off = i * chunk + cs[i].got;
	uint64_t end = MIN((i + 1) * chunk, ld->size);
	size_t len = (size_t) ALIGN_UP(end - off, BLOB_ALIGN);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ld->l->ring);

	if (!sqe)
		return -EBUSY; /* cannot happen: at most queue_depth in flight */
	if (fixed_buf)
		io_uring_prep_read_fixed(sqe, 0, ld->dst + off, len, off, 0);
	else
		io_uring_prep_read(sqe, 0, ld->dst + off, len, off);
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, i);
	return 0;
}

static int load_uring(struct load *ld)
{
	struct io_uring *ring = &ld->l->ring;
	uint64_t chunk = ld->chunk;
	uint64_t n_chunks = (ld->size + chunk - 1) / chunk, next = 0, in_order = 0;
	uint32_t in_flight = 0;
	_cleanup_free_ struct chunk_state *cs = NULL;
	struct iovec iov = { ld->dst, ALIGN_UP(ld->size, BLOB_ALIGN) };
	bool fixed_buf, ok = true;
	int r, err = 0;
	uint64_t err_off = 0;

	if (n_chunks == 0)
		return 0;
	cs = calloc(n_chunks, sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	r = io_uring_register_files(ring, &ld->fd, 1);
	if (r < 0)
		return errmsg_set(ld->e, r, "%s: io_uring_register_files: %s", ld->path, strerror(-r));
	/* Registration pins the pages (charged to RLIMIT_MEMLOCK without CAP_IPC_LOCK); where
	 * that is refused the reads still go straight into place, unregistered. A single fixed
	 * buffer is at most 1 GiB. */
	if (ld->l->registered.iov_base == iov.iov_base && ld->l->registered.iov_len >= iov.iov_len)
		fixed_buf = true; /* the same destination as last time: still registered */
	else {
		if (ld->l->registered.iov_base)
			(void) io_uring_unregister_buffers(ring);
		ld->l->registered = (struct iovec){ 0 };
		fixed_buf = iov.iov_len <= (1ull << 30) && io_uring_register_buffers(ring, &iov, 1) == 0;
		if (fixed_buf)
			ld->l->registered = iov;
	}

	while (ok && (in_order < n_chunks || in_flight > 0)) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		while (err == 0 && next < n_chunks && in_flight < ld->l->p.queue_depth) {
			r = submit_chunk(ld, cs, next, fixed_buf);
			if (r < 0) {
				err = r;
				break;
			}
			next++;
			in_flight++;
		}
		if (in_flight == 0)
			break;
		r = io_uring_submit_and_wait(ring, 1);
		if (r == -EINTR)
			continue;
		if (r < 0) {
			/* nothing is known about what is in flight: the ring cannot be trusted */
			err = r;
			ok = false;
			break;
		}
		io_uring_for_each_cqe(ring, head, cqe) {
			uint64_t i = io_uring_cqe_get_data64(cqe);
			uint64_t off = i * chunk + cs[i].got;
			uint64_t want = MIN((i + 1) * chunk, ld->size) - i * chunk - cs[i].got;
			ssize_t res = faulted(ld, off, (size_t) want, cqe->res);

			seen++;
			in_flight--;
			if (err != 0)
				continue; /* failing: only reap */
			if (res == -EINTR || res == -EAGAIN || (res > 0 && (uint64_t) res < want)) {
				/* resubmit the rest (a short O_DIRECT read ends on a block boundary) */
				if (res > 0)
					cs[i].got += (uint64_t) res;
				ld->resubmits++;
				if ((r = submit_chunk(ld, cs, i, fixed_buf)) < 0)
					err = r, err_off = off;
				else
					in_flight++;
				continue;
			}
			if (res <= 0) {
				err = res == 0 ? -ENODATA : (int) res;
				err_off = off;
				continue;
			}
			cs[i].got += (uint64_t) res;
			cs[i].done = true;
		}
		io_uring_cq_advance(ring, seen);
		/* hash the in-order prefix while the later chunks are still being read */
		while (err == 0 && in_order < n_chunks && cs[in_order].done)
			in_order++;
		if (err == 0)
			hash_upto(ld, MIN(in_order * chunk, ld->size));
		if (err != 0 && in_flight == 0)
			break;
	}
	/* The registration holds the pages: it must go before the memory may be freed, unless
	 * the caller said it reuses this very memory for every load (a benchmark's buffer). */
	if (fixed_buf && !ld->l->p.reuse_destination) {
		(void) io_uring_unregister_buffers(ring);
		ld->l->registered = (struct iovec){ 0 };
	}
	(void) io_uring_unregister_files(ring);
	if (!ok)
		return errmsg_set(ld->e, err, "%s: io_uring_submit_and_wait: %s", ld->path,
				  strerror(-err));
	if (err == -ENODATA)
		return read_error(ld, 0, err_off);
	if (err < 0)
		return read_error(ld, err, err_off);
	return 0;
}

static int open_blob(struct load *ld, enum blob_path *path)
{
	const struct blob_fault *f = fault_of(ld);

	if (*path == BLOB_PATH_URING) {
		ld->fd = f->refuse_direct ? (errno = EINVAL, -1)
					  : open(ld->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
		ld->direct = ld->fd >= 0;
		if (ld->fd >= 0)
			return 0;
		if (errno != EINVAL)
			return errmsg_set(ld->e, -errno, "%s: %m", ld->path);
		/* the file system does not do O_DIRECT */
		snprintf(ld->l->note, sizeof(ld->l->note),
			 "O_DIRECT refused on %s's file system: buffered io_uring", ld->path);
		*path = BLOB_PATH_URING_BUFFERED;
	}
	ld->fd = open(ld->path, O_RDONLY | O_CLOEXEC);
	if (ld->fd < 0)
		return errmsg_set(ld->e, -errno, "%s: %m", ld->path);
	if (*path != BLOB_PATH_URING_BUFFERED)
		(void) posix_fadvise(ld->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	return 0;
}

int blob_load(struct blob_loader *l, const char *path, bool verify, const uint8_t expect[32],
	      blob_alloc_fn alloc, void *userdata, struct blob_load_result *ret, struct errmsg *e)
{
	struct load ld = { .l = l, .path = path, .fd = -1, .verify = verify || expect, .e = e };
	enum blob_path p = l->p.path;
	uint64_t t0 = now_ns();
	struct stat st;
	int r;

	memset(ret, 0, sizeof(*ret));
	ld.eagain_left = fault_of(&ld)->eagain_reads;
	r = open_blob(&ld, &p);
	if (r < 0)
		return r;
	if (fstat(ld.fd, &st) < 0) {
		r = errmsg_set(e, -errno, "%s: fstat: %m", path);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = errmsg_set(e, -EINVAL, "%s: not a regular file", path);
		goto out;
	}
	ld.size = (uint64_t) st.st_size;
	if (fault_of(&ld)->after_open)
		fault_of(&ld)->after_open(ld.fd, fault_of(&ld)->userdata);
	ret->path = p;
	ret->bytes = ld.size;
	ld.dst = alloc(ALIGN_UP(MAX(ld.size, 1), BLOB_ALIGN), userdata);
	ret->data = ld.dst;
	if (!ld.dst) {
		r = errmsg_set(e, -ENOMEM, "%s: no memory for %llu bytes", path,
			       (unsigned long long) ld.size);
		goto out;
	}
	if ((uintptr_t) ld.dst % BLOB_ALIGN != 0) {
		r = errmsg_set(e, -EINVAL, "%s: destination not 4096-aligned", path);
		goto out;
	}
	if (ld.verify)
		sha256_init(&ld.sha);
	/* a blob smaller than queue_depth chunks is split so that every slot has a read: one
	 * 1 MiB read of a 400 KiB blob would leave the queue (and the device) one deep */
	ld.chunk = MIN((uint64_t) l->p.chunk_bytes,
		       MAX(ALIGN_UP(ld.size / l->p.queue_depth, (uint64_t) 65536), (uint64_t) 65536));
	switch (p) {
	case BLOB_PATH_URING:
	case BLOB_PATH_URING_BUFFERED:
		r = load_uring(&ld);
		if (r == -EINVAL && ld.direct) {
			/* the file system took O_DIRECT at open but refuses the reads (some
			 * FUSE and network file systems): again, through the page cache */
			struct stat st2;

			hash_wait(&ld);
			close(ld.fd);
			ld.fd = open(path, O_RDONLY | O_CLOEXEC);
			ld.direct = false;
			if (ld.fd < 0 || fstat(ld.fd, &st2) < 0 || (uint64_t) st2.st_size != ld.size) {
				r = errmsg_set(e, -EIO, "%s: changed while reopened without O_DIRECT", path);
				goto out;
			}
			snprintf(l->note, sizeof(l->note),
				 "O_DIRECT reads refused on %s's file system: buffered io_uring", path);
			p = ret->path = BLOB_PATH_URING_BUFFERED;
			if (ld.verify)
				sha256_init(&ld.sha);
			ld.hashed = 0;
			r = load_uring(&ld);
		}
		break;
	case BLOB_PATH_MMAP:
		r = load_mmap(&ld);
		break;
	default:
		r = load_pread(&ld);
		break;
	}
	if (r < 0)
		goto out;
	if (ld.verify) {
		uint64_t h0;

		hash_upto(&ld, ld.size);
		hash_wait(&ld);
		h0 = now_ns();
		sha256_final(&ld.sha, ret->sha256);
		ld.hash_ns += now_ns() - h0;
		if (expect && memcmp(expect, ret->sha256, 32) != 0) {
			char want[SHA256_HEX_SIZE], got[SHA256_HEX_SIZE];

			r = errmsg_set(e, -EBADMSG,
				       "%s: corrupt: its SHA-256 is %s, the registry recorded %s",
				       path, sha256_hex(ret->sha256, got), sha256_hex(expect, want));
			goto out;
		}
	}
	r = 0;
out:
	hash_wait(&ld);
	ret->hash_ns = ld.hash_ns;
	ret->resubmits = ld.resubmits;
	ret->ns = now_ns() - t0;
	if (ld.fd >= 0)
		close(ld.fd);
	return r;
}
