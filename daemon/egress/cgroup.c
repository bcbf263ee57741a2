/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>

#include "cgroup.h"

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
	char *w = s;

	for (const char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char) ((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = 0;
}

static void fclosep(FILE **f)
{
	if (*f)
		(void) fclose(*f);
}

int cgroup2_mount(char *buf, size_t len, struct errmsg *e)
{
	_cleanup_(fclosep) FILE *f = fopen("/proc/self/mountinfo", "re");
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;

	if (!f)
		return errmsg_set(e, -errno, "cannot read /proc/self/mountinfo: %s", strerror(errno));
	while (getline(&line, &cap, f) > 0) {
		/* id parent major:minor root mountpoint options [optional...] - fstype source ... */
		char *sep = strstr(line, " - "), *save = NULL, *tok, *mnt = NULL, *root = NULL;
		int field = 0;

		if (!sep || strncmp(sep + 3, "cgroup2 ", 8) != 0)
			continue;
		*sep = 0;
		for (tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save), field++) {
			if (field == 3)
				root = tok;
			else if (field == 4)
				mnt = tok;
		}
		if (!mnt || !root)
			continue;
		/* A bind mount of a sub-tree (root != "/") would shift every path; skip it and
		 * keep looking for the real one. */
		if (strcmp(root, "/") != 0)
			continue;
		unescape_octal(mnt);
		if ((size_t) snprintf(buf, len, "%s", mnt) >= len)
			return errmsg_set(e, -ENAMETOOLONG, "cgroup2 mount path too long: %s", mnt);
		return 0;
	}
	return errmsg_set(e, -ENOENT,
			  "no cgroup2 file system is mounted (none in /proc/self/mountinfo); egress "
			  "enforcement needs the unified cgroup hierarchy");
}

int cgroup2_path_of(pid_t pid, const char *mount, char *buf, size_t len, struct errmsg *e)
{
	char path[64];
	_cleanup_(fclosep) FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	if (pid == 0)
		snprintf(path, sizeof(path), "/proc/self/cgroup");
	else
		snprintf(path, sizeof(path), "/proc/%d/cgroup", (int) pid);
	f = fopen(path, "re");
	if (!f)
		return errmsg_set(e, -errno, "cannot read %s: %s", path, strerror(errno));
	while ((n = getline(&line, &cap, f)) > 0) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		if (line[n - 1] == '\n')
			line[n - 1] = 0;
		/* "0::/" is the root: no trailing slash wanted. */
		if ((size_t) snprintf(buf, len, "%s%s", mount, strcmp(line + 3, "/") == 0 ? "" : line + 3) >= len)
			return errmsg_set(e, -ENAMETOOLONG, "cgroup path too long: %s", line + 3);
		return 0;
	}
	return errmsg_set(e, -ENOENT, "%s has no cgroup2 (\"0::\") line", path);
}

bool cgroup2_is_delegated(const char *dir)
{
	static const char *const names[] = { "trusted.delegate", "user.delegate" };

	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		char v[8] = { 0 };
		ssize_t n = getxattr(dir, names[i], v, sizeof(v) - 1);

		if (n > 0 && v[0] == '1')
			return true;
	}
	return false;
}

int cgroup2_id(const char *dir, uint64_t *ret, struct errmsg *e)
{
	struct stat st;

	/* On cgroup2 (kernfs) the inode number is the cgroup id the BPF helpers report. */
	if (stat(dir, &st) < 0)
		return errmsg_set(e, -errno, "cannot stat cgroup %s: %s", dir, strerror(errno));
	*ret = st.st_ino;
	return 0;
}

static int write_file(const char *path, const char *s)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	size_t n = strlen(s);

	if (fd < 0)
		return -errno;
	if (write(fd, s, n) != (ssize_t) n)
		return -errno;
	return 0;
}

int cgroup2_move(const char *dir, pid_t pid, struct errmsg *e)
{
	char path[4096], s[32];
	int r;

	if ((size_t) snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path))
		return errmsg_set(e, -ENAMETOOLONG, "cgroup path too long: %s", dir);
	snprintf(s, sizeof(s), "%d\n", (int) pid);
	r = write_file(path, s);
	if (r < 0)
		return errmsg_set(e, r, "cannot move process %d into %s: %s", (int) pid, dir, strerror(-r));
	return 0;
}

static bool populated(const char *dir)
{
	char path[4096], buf[256];
	_cleanup_close_ int fd = -EBADF;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/cgroup.events", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false; /* gone: nothing lives there */
	n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return false;
	buf[n] = 0;
	return strstr(buf, "populated 1") != NULL;
}

/* SIGKILL to every pid listed in dir/cgroup.procs and, recursively, its children: the
 * fallback for kernels before 5.14, which lack cgroup.kill. */
static void kill_listed(const char *dir)
{
	char path[4096];
	_cleanup_(fclosep) FILE *f = NULL;
	DIR *d;
	int pid;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "re");
	while (f && fscanf(f, "%d", &pid) == 1)
		(void) kill(pid, SIGKILL);
	d = opendir(dir);
	if (!d)
		return;
	for (struct dirent *de; (de = readdir(d));) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		kill_listed(path);
	}
	closedir(d);
}

int cgroup2_kill_all(const char *dir)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/cgroup.kill", dir);
	for (int i = 0; i < 200 && populated(dir); i++) {
		if (i % 20 == 0 && write_file(path, "1") < 0)
			kill_listed(dir);
		nanosleep(&(struct timespec){ .tv_nsec = 5 * 1000 * 1000 }, NULL);
	}
	return populated(dir) ? -EBUSY : 0;
}

int cgroup2_remove_tree(const char *dir, struct errmsg *e)
{
	char path[4096];
	DIR *d = opendir(dir);

	if (!d)
		return errno == ENOENT ? 0 : errmsg_set(e, -errno, "cannot open %s: %s", dir, strerror(errno));
	for (struct dirent *de; (de = readdir(d));) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path))
			continue;
		(void) cgroup2_remove_tree(path, e);
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT)
		return errmsg_set(e, -errno, "cannot remove cgroup %s: %s", dir, strerror(errno));
	return 0;
}
