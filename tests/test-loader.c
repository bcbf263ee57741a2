/* SPDX-License-Identifier: MIT */
/*
 * test-loader.c: the cold → warm loader (daemon/loader/blob-load.h) on real files with real
 * io_uring: every path against the file's bytes and hash, faults (read errors, short reads,
 * EAGAIN, a file truncated or changed behind the loader's back, O_DIRECT refused, io_uring
 * refused by seccomp in a child), and SHA-NI against the portable SHA-256.
 */
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "test.h"

#include "basic/sha256.h"
#include "loader/blob-load.h"

static char dir_[] = "/tmp/molly-test-loader-XXXXXX";

static void remove_dir(void)
{
	char path[300];

	snprintf(path, sizeof(path), "%s/blob", dir_);
	unlink(path);
	rmdir(dir_);
}

/* The test's directory on /tmp (ext4 here: O_DIRECT works), made on first use. */
static const char *tdir(void)
{
	static bool made;

	if (!made && mkdtemp(dir_)) {
		made = true;
		atexit(remove_dir);
	}
	return dir_;
}

static void *alloc_aligned(size_t bytes, void *userdata)
{
	void *p = NULL;

	(void) userdata;
	return posix_memalign(&p, 4096, bytes) == 0 ? p : NULL;
}

/* A file of n seeded bytes in d; its path in path, its bytes in *ret (caller frees). */
static int make_file(const char *d, const char *name, size_t n, uint64_t seed, char *path,
		     uint8_t **ret)
{
	uint8_t *b = malloc(n ? n : 1);
	int fd;

	if (!b)
		return -ENOMEM;
	test_rng_state = seed;
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t) (test_uniform() * 256);
	snprintf(path, 256, "%s/%s", d, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, b, n) != (ssize_t) n) {
		free(b);
		if (fd >= 0)
			close(fd);
		return -EIO;
	}
	close(fd);
	*ret = b;
	return 0;
}

static int load_and_check(const struct blob_loader_params *p, const char *path,
			  const uint8_t *want, size_t n, enum blob_path want_path)
{
	_cleanup_(blob_loader_freep) struct blob_loader *l = NULL;
	struct blob_load_result res;
	struct errmsg e = { { 0 } };
	uint8_t sha[32];

	sha256(want, n, sha);
	ASSERT_OK(blob_loader_new(p, &l));
	ASSERT_OK(blob_load(l, path, true, sha, alloc_aligned, NULL, &res, &e));
	ASSERT_TRUE(res.path == want_path);
	ASSERT_TRUE(res.bytes == n);
	ASSERT_TRUE(n == 0 || memcmp(res.data, want, n) == 0);
	ASSERT_TRUE(memcmp(res.sha256, sha, 32) == 0);
	free(res.data);
	return 0;
}

/* the last one is above the size hashed on the hashing thread (8 MiB) */
static const size_t sizes[] = { 0, 1, 4095, 4096, 4097, (1u << 20) + 123, (5u << 20) + 7,
				(9u << 20) + 5 };

TEST(every_path_reads_the_file)
{
	static const enum blob_path paths[] = { BLOB_PATH_URING, BLOB_PATH_PREAD, BLOB_PATH_MMAP };

	for (size_t i = 0; i < ELEMENTSOF(sizes); i++) {
		char path[256];
		_cleanup_free_ uint8_t *b = NULL;

		ASSERT_OK(make_file(tdir(), "blob", sizes[i], 1000 + i, path, &b));
		for (size_t k = 0; k < ELEMENTSOF(paths); k++) {
			/* small chunks and a shallow queue too: many reads, out-of-order
			 * completions, the hash advancing over the in-order prefix (on the
			 * reading thread there; on the hashing thread by default) */
			struct blob_loader_params p = { .path = paths[k] };
			struct blob_loader_params q = { .path = paths[k], .queue_depth = 3,
							.chunk_bytes = 8192, .hash_inline = true };

			ASSERT_OK(load_and_check(&p, path, b, sizes[i], paths[k]));
			ASSERT_OK(load_and_check(&q, path, b, sizes[i], paths[k]));
		}
	}
	return 0;
}

TEST(read_error_is_reported_with_offset)
{
	static const enum blob_path paths[] = { BLOB_PATH_URING, BLOB_PATH_PREAD };
	char path[256];
	_cleanup_free_ uint8_t *b = NULL;

	ASSERT_OK(make_file(tdir(), "blob", 3u << 20, 7, path, &b));
	for (size_t k = 0; k < ELEMENTSOF(paths); k++) {
		struct blob_fault f = { .error_at = (2u << 20) + 5, .error_errno = EIO };
		struct blob_loader_params p = { .path = paths[k], .fault = &f };
		_cleanup_(blob_loader_freep) struct blob_loader *l = NULL;
		struct blob_load_result res;
		struct errmsg e = { { 0 } };

		ASSERT_OK(blob_loader_new(&p, &l));
		ASSERT_ERR(blob_load(l, path, true, NULL, alloc_aligned, NULL, &res, &e), -EIO);
		free(res.data);
		/* the message names the failed read's offset: at or before the bad byte, within
		 * one read of it */
		{
			const char *at = strstr(e.text, "read error at byte ");
			unsigned long long off = at ? strtoull(at + 19, NULL, 10) : ~0ull;

			ASSERT_TRUE(at != NULL);
			ASSERT_TRUE(off <= (2u << 20) + 5 && off + (1u << 20) > (2u << 20) + 5);
		}
		/* the same loader works again afterwards: everything in flight was reaped */
		f.error_errno = 0;
		ASSERT_OK(blob_load(l, path, true, NULL, alloc_aligned, NULL, &res, &e));
		ASSERT_TRUE(memcmp(res.data, b, 3u << 20) == 0);
		free(res.data);
	}
	return 0;
}

TEST(short_reads_and_eagain_are_continued)
{
	static const enum blob_path paths[] = { BLOB_PATH_URING, BLOB_PATH_PREAD };
	char path[256];
	_cleanup_free_ uint8_t *b = NULL;

	ASSERT_OK(make_file(tdir(), "blob", (3u << 20) + 999, 8, path, &b));
	for (size_t k = 0; k < ELEMENTSOF(paths); k++) {
		struct blob_fault f = { .short_at = (1u << 20) + 100, .short_bytes = 8192,
					.eagain_reads = 2 };
		struct blob_loader_params p = { .path = paths[k], .fault = &f };
		_cleanup_(blob_loader_freep) struct blob_loader *l = NULL;
		struct blob_load_result res;
		struct errmsg e = { { 0 } };
		uint8_t sha[32];

		sha256(b, (3u << 20) + 999, sha);
		ASSERT_OK(blob_loader_new(&p, &l));
		ASSERT_OK(blob_load(l, path, true, sha, alloc_aligned, NULL, &res, &e));
		ASSERT_TRUE(res.resubmits >= 3);
		ASSERT_TRUE(memcmp(res.data, b, (3u << 20) + 999) == 0);
		free(res.data);
	}
	return 0;
}

static void truncate_half(int fd, void *userdata)
{
	char path[64];

	/* the fd may be O_DIRECT and read-only: truncate through the path */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	(void) truncate(path, *(off_t *) userdata);
}

TEST(truncated_behind_the_loader)
{
	static const enum blob_path paths[] = { BLOB_PATH_URING, BLOB_PATH_PREAD };

	for (size_t k = 0; k < ELEMENTSOF(paths); k++) {
		char path[256];
		_cleanup_free_ uint8_t *b = NULL;
		off_t half = 3u << 19;
		struct blob_fault f = { .after_open = truncate_half, .userdata = &half };
		struct blob_loader_params p = { .path = paths[k], .fault = &f };
		_cleanup_(blob_loader_freep) struct blob_loader *l = NULL;
		struct blob_load_result res;
		struct errmsg e = { { 0 } };

		ASSERT_OK(make_file(tdir(), "blob", 3u << 20, 9, path, &b));
		ASSERT_OK(blob_loader_new(&p, &l));
		ASSERT_ERR(blob_load(l, path, true, NULL, alloc_aligned, NULL, &res, &e), -EIO);
		ASSERT_TRUE(strstr(e.text, "truncated") != NULL);
		free(res.data);
	}
	return 0;
}

TEST(changed_on_disk_is_corrupt)
{
	char path[256];
	_cleanup_free_ uint8_t *b = NULL;
	uint8_t sha[32], x = 0x5a;
	struct blob_loader_params p = { .path = BLOB_PATH_URING };
	_cleanup_(blob_loader_freep) struct blob_loader *l = NULL;
	struct blob_load_result res;
	struct errmsg e = { { 0 } };
	int fd;

	ASSERT_OK(make_file(tdir(), "blob", (2u << 20) + 17, 10, path, &b));
	sha256(b, (2u << 20) + 17, sha);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	ASSERT_TRUE(fd >= 0);
	ASSERT_TRUE(pwrite(fd, &x, 1, 1234567) == 1);
	close(fd);
	ASSERT_OK(blob_loader_new(&p, &l));
	ASSERT_ERR(blob_load(l, path, true, sha, alloc_aligned, NULL, &res, &e), -EBADMSG);
	ASSERT_TRUE(strstr(e.text, "corrupt") != NULL);
	free(res.data);
	return 0;
}

TEST(odirect_refused_falls_back_to_buffered)
{
	char path[256];
	_cleanup_free_ uint8_t *b = NULL;
	struct blob_fault f = { .refuse_direct = true };
	struct blob_loader_params p = { .path = BLOB_PATH_URING, .fault = &f };
	char shm[] = "/dev/shm/molly-test-loader-XXXXXX";
	int fd;

	ASSERT_OK(make_file(tdir(), "blob", (1u << 20) + 5, 11, path, &b));
	ASSERT_OK(load_and_check(&p, path, b, (1u << 20) + 5, BLOB_PATH_URING_BUFFERED));
	/* O_DIRECT taken at open, its reads refused: the load starts again buffered */
	{
		struct blob_fault g = { .refuse_direct_reads = true };
		struct blob_loader_params q = { .path = BLOB_PATH_URING, .fault = &g };

		ASSERT_OK(load_and_check(&q, path, b, (1u << 20) + 5, BLOB_PATH_URING_BUFFERED));
	}
	/* and a real tmpfs: some kernels refuse O_DIRECT there, 6.x accepts it; either way the
	 * bytes and the hash must come out right, on the path the file system allows */
	if (!mkdtemp(shm)) {
		printf("  (no /dev/shm: tmpfs case not run)\n");
		return 0;
	}
	free(b);
	b = NULL;
	ASSERT_OK(make_file(shm, "blob", (1u << 20) + 5, 12, path, &b));
	fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	p.fault = NULL;
	ASSERT_OK(load_and_check(&p, path, b, (1u << 20) + 5,
				 fd >= 0 ? BLOB_PATH_URING : BLOB_PATH_URING_BUFFERED));
	printf("  tmpfs %s O_DIRECT\n", fd >= 0 ? "accepts" : "refuses");
	if (fd >= 0)
		close(fd);
	unlink(path);
	rmdir(shm);
	return 0;
}

/* io_uring_setup fails with EPERM for this process from now on (and its children). */
static int deny_io_uring(void)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { ELEMENTSOF(filter), filter };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0 ? -errno : 0;
}

TEST(io_uring_refused_by_seccomp_falls_back_to_pread)
{
	char path[256];
	_cleanup_free_ uint8_t *b = NULL;
	int status;
	pid_t pid;

	ASSERT_OK(make_file(tdir(), "blob", (2u << 20) + 3, 13, path, &b));
	fflush(stdout);
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		struct blob_loader_params p = { .path = BLOB_PATH_URING };
		struct blob_loader *l = NULL;

		if (deny_io_uring() < 0)
			_exit(77);
		if (blob_loader_new(&p, &l) < 0 || !strstr(blob_loader_note(l), "io_uring refused"))
			_exit(2);
		printf("  child: %s\n", blob_loader_note(l));
		fflush(stdout);
		blob_loader_free(l);
		_exit(load_and_check(&p, path, b, (2u << 20) + 3, BLOB_PATH_PREAD) == 0 ? 0 : 3);
	}
	ASSERT_TRUE(waitpid(pid, &status, 0) == pid);
	ASSERT_TRUE(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		return TEST_SKIP;
	ASSERT_TRUE(WEXITSTATUS(status) == 0);
	return 0;
}

TEST(sha_ni_equals_scalar)
{
	_cleanup_free_ uint8_t *buf = malloc(1u << 20);
	uint8_t a[32], b[32];

	if (!sha256_have_ni()) {
		printf("  (no SHA extensions on this CPU: the portable path is the only one)\n");
		return TEST_SKIP;
	}
	ASSERT_TRUE(buf != NULL);
	test_rng_state = 42;
	for (size_t i = 0; i < (1u << 20); i++)
		buf[i] = (uint8_t) (test_uniform() * 256);
	/* lengths around block and padding boundaries, and a large one, in uneven pieces */
	for (size_t n = 0; n < 300; n++) {
		ASSERT_OK(sha256_use("scalar"));
		sha256(buf + n, n, a);
		ASSERT_OK(sha256_use("sha-ni"));
		sha256(buf + n, n, b);
		ASSERT_TRUE(memcmp(a, b, 32) == 0);
	}
	for (size_t pass = 0; pass < 2; pass++) {
		struct sha256_ctx c;

		ASSERT_OK(sha256_use(pass ? "sha-ni" : "scalar"));
		sha256_init(&c);
		for (size_t i = 0, k = 1; i < (1u << 20); i += k, k = k * 7 % 9001 + 1)
			sha256_update(&c, buf + i, MIN(k, (1u << 20) - i));
		sha256_final(&c, pass ? b : a);
	}
	ASSERT_TRUE(memcmp(a, b, 32) == 0);
	/* the FIPS 180 vector through SHA-NI */
	{
		char hex[SHA256_HEX_SIZE];

		sha256("abc", 3, b);
		ASSERT_STREQ(sha256_hex(b, hex),
			     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	}
	ASSERT_STREQ(sha256_impl(), "sha-ni");
	return 0;
}
