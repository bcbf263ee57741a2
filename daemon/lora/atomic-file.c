/* SPDX-License-Identifier: MIT */
/*
 * atomic-file.c: tmp file + fsync + rename (see atomic-file.h).
 */
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "atomic-file.h"

struct atomic_file {
	int fd;
	char *path;     /* owned */
	char *tmp_path; /* owned */
	uint64_t offset;
	int error; /* sticky: the first failure */
	bool finished;
};

static int io_error(struct atomic_file *f, int r, const char *what, uint64_t bytes,
		    struct errmsg *e)
{
	f->error = r;
	if (r == -ENOSPC || r == -EDQUOT)
		return errmsg_set(e, r, "%s: %s (%s; the file needs %llu bytes)", f->path,
				  r == -ENOSPC ? "no space left on device" : "disk quota exceeded",
				  what, (unsigned long long) bytes);
	return errmsg_set(e, r, "%s: %s: %s", f->path, what, strerror(-r));
}

int atomic_file_new(const char *path, struct atomic_file **ret, struct errmsg *e)
{
	_cleanup_(atomic_file_freep) struct atomic_file *f = NULL;

	assert_return(path && *path && ret, -EINVAL);
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = -EBADF;
	f->path = strdup(path);
	if (!f->path || asprintf(&f->tmp_path, "%s.tmp", path) < 0) {
		f->tmp_path = NULL;
		return -ENOMEM;
	}
	f->fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (f->fd < 0) {
		int r = -errno;

		f->finished = true; /* nothing of ours to remove */
		return errmsg_set(e, r, "%s: cannot create: %s", f->tmp_path, strerror(-r));
	}
	*ret = TAKE_PTR(f);
	return 0;
}

struct atomic_file *atomic_file_free(struct atomic_file *f)
{
	if (!f)
		return NULL;
	if (f->fd >= 0)
		(void) close(f->fd);
	if (!f->finished && f->tmp_path)
		(void) unlink(f->tmp_path);
	free(f->path);
	free(f->tmp_path);
	free(f);
	return NULL;
}

int atomic_file_reserve(struct atomic_file *f, uint64_t size, struct errmsg *e)
{
	int r;

	assert_return(f, -EINVAL);
	if (f->error)
		return errmsg_set(e, f->error, "%s: an earlier write failed", f->path);
	if (size == 0 || size > (uint64_t) INT64_MAX)
		return 0;
	r = posix_fallocate(f->fd, 0, (off_t) size);
	/* Filesystems without fallocate: write on and let the writes report a full disk. */
	if (r == EOPNOTSUPP || r == ENOSYS || r == EINVAL)
		return 0;
	if (r != 0)
		return io_error(f, -r, "reserving space", size, e);
	return 0;
}

static int write_all(int fd, const void *data, size_t n, uint64_t offset)
{
	const uint8_t *p = data;

	while (n > 0) {
		ssize_t k = pwrite(fd, p, MIN(n, (size_t) 1 << 30), (off_t) offset);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			return -EIO;
		p += k;
		n -= (size_t) k;
		offset += (uint64_t) k;
	}
	return 0;
}

int atomic_file_pwrite(struct atomic_file *f, const void *data, size_t n, uint64_t offset,
		       struct errmsg *e)
{
	int r;

	assert_return(f && (data || n == 0), -EINVAL);
	if (f->error)
		return errmsg_set(e, f->error, "%s: an earlier write failed", f->path);
	r = write_all(f->fd, data, n, offset);
	if (r < 0)
		return io_error(f, r, "writing", offset + n, e);
	return 0;
}

int atomic_file_write(struct atomic_file *f, const void *data, size_t n, struct errmsg *e)
{
	int r;

	assert_return(f, -EINVAL);
	r = atomic_file_pwrite(f, data, n, f->offset, e);
	if (r < 0)
		return r;
	f->offset += n;
	return 0;
}

int atomic_file_pad(struct atomic_file *f, uint64_t align, struct errmsg *e)
{
	static const uint8_t zeros[4096];
	uint64_t n;

	assert_return(f && align > 0, -EINVAL);
	n = ALIGN_UP(f->offset, align) - f->offset;
	while (n > 0) {
		size_t k = (size_t) MIN(n, (uint64_t) sizeof(zeros));
		int r = atomic_file_write(f, zeros, k, e);

		if (r < 0)
			return r;
		n -= k;
	}
	return 0;
}

uint64_t atomic_file_offset(const struct atomic_file *f)
{
	return f ? f->offset : 0;
}

int atomic_file_finish(struct atomic_file *f, struct errmsg *e)
{
	_cleanup_free_ char *dir = NULL;
	int r, dfd;

	assert_return(f && !f->finished, -EINVAL);
	if (f->error)
		return errmsg_set(e, f->error, "%s: an earlier write failed", f->path);
	/* fallocate may have reserved more than was written (a size estimate). */
	if (ftruncate(f->fd, (off_t) f->offset) < 0)
		return io_error(f, -errno, "truncating", f->offset, e);
	if (fsync(f->fd) < 0)
		return io_error(f, -errno, "fsync", f->offset, e);
	if (close(f->fd) < 0) {
		f->fd = -EBADF;
		return io_error(f, -errno, "close", f->offset, e);
	}
	f->fd = -EBADF;
	if (rename(f->tmp_path, f->path) < 0) {
		r = -errno;
		f->error = r;
		return errmsg_set(e, r, "%s: cannot rename %s into place: %s", f->path, f->tmp_path,
				  strerror(-r));
	}
	f->finished = true;
	/* Make the rename itself durable. */
	dir = strdup(f->path);
	if (!dir)
		return -ENOMEM;
	dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void) fsync(dfd);
		(void) close(dfd);
	}
	return 0;
}
