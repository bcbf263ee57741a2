/* SPDX-License-Identifier: MIT */
/*
 * dev-client.c: a raw /dev/molly client for the guest tests (tests/guest/guest.sh). It speaks
 * the ABI with bare syscalls, not libmolly, so that it can also call it wrongly. Built 64-bit
 * and, where gcc-multilib is installed, 32-bit (-m32 -static): the same checks must pass.
 *
 *   dev-client version                  prints the server's struct molly_version
 *   dev-client stream PROMPT N          greedy completion of N tokens; the text on stdout
 *   dev-client hostile                  wrong sizes, bad and unmapped buffers, huge lengths,
 *                                       reserved fields, unknown ioctls, limits
 *   dev-client close-mid                closes the file after the first text of a long request
 *   dev-client wait-death [kernel|cuse] prints STARTED after the first text, then expects the
 *                                       request to end with ERROR Unavailable (daemon killed)
 *   dev-client slow                     a client that does not read: ERROR CLIENT_SLOW at last
 *   dev-client many N                   N clients at once (threads, one open file each)
 *   dev-client fuzz SECONDS SEED        random ioctls, writes, reads, cancels and closes
 *
 * Exit: 0 all checks passed, 1 a check failed (each failure printed), 77 no device.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <linux/molly.h>

static const char *dev_path = MOLLY_DEVICE_PATH;
static int failures;

#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (cond) {                                       \
			printf("ok - ");                          \
		} else {                                          \
			printf("not ok - ");                      \
			failures++;                               \
		}                                                 \
		printf(__VA_ARGS__);                              \
		printf("\n");                                     \
		fflush(stdout);                                   \
	} while (0)

static int dev_open(void)
{
	int fd = open(dev_path, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "open %s: %s\n", dev_path, strerror(errno));
		exit(errno == ENOENT ? 77 : 1);
	}
	return fd;
}

/* The errno of a call that is expected to fail, or 0 when it succeeded. */
static int err_of(long r)
{
	return r < 0 ? errno : 0;
}

static void submit_init(struct molly_submit *s, uint32_t text_len, uint32_t max_tokens)
{
	memset(s, 0, sizeof(*s));
	s->size = sizeof(*s);
	s->text_len = text_len;
	s->max_tokens = max_tokens;
	s->temperature_milli = 0; /* greedy */
}

/* write + SUBMIT; returns 0 and the id, or -errno. */
static int submit_text(int fd, const char *text, uint32_t max_tokens, uint32_t flags,
		       uint64_t *ret_id)
{
	struct molly_submit s;
	size_t len = strlen(text);

	if (write(fd, text, len) != (ssize_t) len)
		return -errno;
	submit_init(&s, (uint32_t) len, max_tokens);
	s.flags = flags;
	if (ioctl(fd, MOLLY_IOC_SUBMIT, &s) < 0)
		return -errno;
	*ret_id = s.id;
	return 0;
}

struct ev_result {
	int type;                 /* final type: DONE or ERROR, 0: none */
	uint32_t error_kind;
	char error_name[64];
	char finish[16];
	uint32_t completion_tokens;
	size_t n_text_events;
};

/*
 * Reads events until the final one of id (others are ignored); text goes to out (may be NULL).
 * stop_after_text: return after the first TEXT event. -errno on a read error.
 */
static int read_until_final(int fd, uint64_t id, FILE *out, bool stop_after_text,
			    struct ev_result *res)
{
	static __thread uint64_t buf[MOLLY_EVENT_MAX * 2 / 8];

	memset(res, 0, sizeof(*res));
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		size_t off = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		while (off + sizeof(struct molly_event) <= (size_t) n) {
			const struct molly_event *ev = (const void *) ((char *) buf + off);

			if (ev->size < sizeof(*ev) || ev->size > (size_t) n - off)
				return -EPROTO;
			off += ev->size;
			if (ev->id != id)
				continue;
			if (ev->type == MOLLY_EVENT_TEXT) {
				res->n_text_events++;
				if (out)
					fwrite(ev + 1, 1, ev->len, out);
				if (stop_after_text)
					return 0;
			} else if (ev->type == MOLLY_EVENT_DONE) {
				const struct molly_done *d = (const void *) (ev + 1);
				res->type = MOLLY_EVENT_DONE;
				memcpy(res->finish, d->finish_reason, sizeof(res->finish));
				res->completion_tokens = d->completion_tokens;
				return 0;
			} else if (ev->type == MOLLY_EVENT_ERROR) {
				const struct molly_error *e = (const void *) (ev + 1);
				res->type = MOLLY_EVENT_ERROR;
				res->error_kind = e->kind;
				memcpy(res->error_name, e->name, sizeof(res->error_name));
				return 0;
			} else {
				return -EPROTO;
			}
		}
	}
}

static int cmd_version(void)
{
	struct molly_version v = { .size = sizeof(v) };
	int fd = dev_open();

	if (ioctl(fd, MOLLY_IOC_VERSION, &v) < 0) {
		perror("MOLLY_IOC_VERSION");
		return 1;
	}
	printf("abi %u features %#x text_max %u event_max %u inflight %u/%u (%zu-bit caller)\n",
	       v.abi_version, v.features, v.text_max, v.event_max, v.max_inflight_file,
	       v.max_inflight_total, sizeof(void *) * 8);
	close(fd);
	return 0;
}

static int cmd_stream(const char *prompt, uint32_t n)
{
	struct ev_result res;
	uint64_t id;
	int fd = dev_open(), r;

	r = submit_text(fd, prompt, n, 0, &id);
	if (r < 0) {
		fprintf(stderr, "submit: %s\n", strerror(-r));
		return 1;
	}
	r = read_until_final(fd, id, stdout, false, &res);
	fflush(stdout);
	if (r < 0 || res.type != MOLLY_EVENT_DONE) {
		fprintf(stderr, "stream: %s %s\n", r < 0 ? strerror(-r) : "", res.error_name);
		return 1;
	}
	close(fd);
	return 0;
}

/* An ioctl number with another size but the same type, number and direction. */
static unsigned long resized(unsigned long cmd, unsigned size)
{
	return (cmd & ~((unsigned long) _IOC_SIZEMASK << _IOC_SIZESHIFT)) |
	       ((unsigned long) size << _IOC_SIZESHIFT);
}

static int cmd_hostile(void)
{
	long page = sysconf(_SC_PAGESIZE);
	char *none = mmap(NULL, (size_t) page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *ro = mmap(NULL, (size_t) page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct molly_version v;
	struct molly_submit s;
	struct molly_cancel c;
	struct molly_status st;
	struct ev_result res;
	unsigned char big[4096]; /* room for every size the checks claim */
	uint64_t id, ids[80];
	int fd = dev_open(), e, n_ok;
	bool cuse;
	char *huge;

	/* VERSION: right, and with the size field wrong */
	memset(&v, 0, sizeof(v));
	v.size = sizeof(v);
	CHECK(ioctl(fd, MOLLY_IOC_VERSION, &v) == 0 && v.abi_version == MOLLY_ABI_VERSION,
	      "VERSION answers ABI %u", v.abi_version);
	cuse = v.features & MOLLY_FEATURE_CUSE;
	memset(&v, 0, sizeof(v));
	v.size = sizeof(v) - 8;
	CHECK(err_of(ioctl(fd, MOLLY_IOC_VERSION, &v)) == EINVAL, "VERSION size field wrong: EINVAL");
	memset(&v, 0, sizeof(v));
	v.size = sizeof(v);
	v.reserved[1] = 1;
	CHECK(err_of(ioctl(fd, MOLLY_IOC_VERSION, &v)) == EINVAL, "VERSION reserved set: EINVAL");

	/* a bigger struct from a "newer" caller: zero tail accepted, non-zero tail E2BIG */
	memset(big, 0, sizeof(big));
	*(uint32_t *) big = 256;
	CHECK(ioctl(fd, resized(MOLLY_IOC_VERSION, 256), big) == 0, "VERSION, 256-byte struct with a zero tail: accepted");
	big[200] = 1;
	CHECK(err_of(ioctl(fd, resized(MOLLY_IOC_VERSION, 256), big)) == E2BIG, "VERSION, non-zero tail: E2BIG");
	memset(big, 0, sizeof(big));
	*(uint32_t *) big = 16;
	CHECK(err_of(ioctl(fd, resized(MOLLY_IOC_VERSION, 16), big)) == EINVAL, "VERSION, 16-byte struct: EINVAL");
	CHECK(err_of(ioctl(fd, resized(MOLLY_IOC_VERSION, 0), big)) == EINVAL, "VERSION, size 0: EINVAL");
	CHECK(err_of(ioctl(fd, resized(MOLLY_IOC_SUBMIT, 4000), big)) == EINVAL, "SUBMIT, _IOC_SIZE 4000: EINVAL");

	/* bad and unmapped buffers */
	CHECK(err_of(ioctl(fd, MOLLY_IOC_VERSION, NULL)) == EFAULT, "VERSION(NULL): EFAULT");
	CHECK(err_of(ioctl(fd, MOLLY_IOC_VERSION, none)) == EFAULT, "VERSION(unmapped page): EFAULT");
	memcpy(&v, &(struct molly_version){ .size = sizeof(v) }, sizeof(v));
	CHECK(err_of(ioctl(fd, MOLLY_IOC_VERSION, ro)) != 0, "VERSION into a read-only page fails");
	CHECK(err_of(ioctl(fd, MOLLY_IOC_SUBMIT, none)) == EFAULT, "SUBMIT(unmapped): EFAULT");
	CHECK(err_of(ioctl(fd, MOLLY_IOC_STATUS, (void *) 1)) == EFAULT, "STATUS((void *) 1): EFAULT");
	CHECK(err_of(write(fd, none, 100)) == EFAULT, "write from an unmapped page: EFAULT");
	{
		void *volatile null = NULL; /* hidden from the compiler's nonnull check */
		CHECK(err_of(write(fd, null, 100)) == EFAULT, "write from NULL: EFAULT");
	}

	/* unknown ioctls */
	CHECK(err_of(ioctl(fd, _IO(MOLLY_IOC_MAGIC, 0x7f))) == ENOTTY, "unknown number: ENOTTY");
	CHECK(err_of(ioctl(fd, _IOR(MOLLY_IOC_MAGIC, 0x00, struct molly_version), &v)) == ENOTTY,
	      "VERSION with the wrong direction: ENOTTY");
	CHECK(err_of(ioctl(fd, _IOWR('T', 0x01, struct molly_submit), &s)) == ENOTTY,
	      "another driver's magic: ENOTTY");
	CHECK(err_of(ioctl(fd, 0, 0)) == ENOTTY, "ioctl 0: ENOTTY");

	/* huge lengths */
	huge = malloc(MOLLY_TEXT_MAX + 2);
	memset(huge, 'a', MOLLY_TEXT_MAX + 1);
	{
		/* Through CUSE the kernel splits a big write into FUSE writes of max_write bytes:
		 * those that fit are taken (a short count), the one past the limit fails. */
		ssize_t n = write(fd, huge, MOLLY_TEXT_MAX + 1);
		if (cuse)
			CHECK((n < 0 && errno == EFBIG) || (n >= 0 && (size_t) n <= MOLLY_TEXT_MAX),
			      "write of TEXT_MAX+1: EFBIG or a short count (%zd)", n);
		else
			CHECK(n < 0 && errno == EFBIG, "write of TEXT_MAX+1: EFBIG");
		submit_init(&s, 1, 1); /* any SUBMIT drops the staged text */
		(void) ioctl(fd, MOLLY_IOC_SUBMIT, &s);
	}
	CHECK(write(fd, huge, MOLLY_TEXT_MAX) == MOLLY_TEXT_MAX, "write of TEXT_MAX bytes: taken");
	CHECK(err_of(write(fd, huge, 1)) == EFBIG, "one more byte: EFBIG");
	submit_init(&s, 5, 1);
	CHECK(err_of(ioctl(fd, MOLLY_IOC_SUBMIT, &s)) == EINVAL, "SUBMIT text_len != staged: EINVAL");
	memset(&st, 0, sizeof(st));
	st.size = sizeof(st);
	CHECK(ioctl(fd, MOLLY_IOC_STATUS, &st) == 0 && st.staged_bytes == 0,
	      "a failed SUBMIT drops the staged text (%u bytes staged)", st.staged_bytes);
	(void) write(fd, "abc", 3);
	submit_init(&s, 0xffffffffu, 1);
	CHECK(err_of(ioctl(fd, MOLLY_IOC_SUBMIT, &s)) == EINVAL, "SUBMIT text_len 4 GiB: EINVAL");
	free(huge);

	/* reserved fields and bad values */
	(void) write(fd, "abc", 3);
	submit_init(&s, 3, 1);
	s.reserved[3] = 1;
	CHECK(err_of(ioctl(fd, MOLLY_IOC_SUBMIT, &s)) == EINVAL, "SUBMIT reserved[3] set: EINVAL");
	(void) write(fd, "abc", 3);
	submit_init(&s, 3, 1);
	s.reserved0 = 1;
	CHECK(err_of(ioctl(fd, MOLLY_IOC_SUBMIT, &s)) == EINVAL, "SUBMIT reserved0 set: EINVAL");
	(void) write(fd, "abc", 3);
	submit_init(&s, 3, 1);
	s.flags = 0x80;
	CHECK(err_of(ioctl(fd, MOLLY_IOC_SUBMIT, &s)) == EINVAL, "SUBMIT unknown flag: EINVAL");
	(void) write(fd, "abc", 3);
	submit_init(&s, 3, 1);
	s.declared_class = 9;
	CHECK(err_of(ioctl(fd, MOLLY_IOC_SUBMIT, &s)) == EINVAL, "SUBMIT class 9: EINVAL");
	(void) write(fd, "abc", 3);
	submit_init(&s, 3, 1);
	memset(s.model, 'x', sizeof(s.model));
	CHECK(err_of(ioctl(fd, MOLLY_IOC_SUBMIT, &s)) == EINVAL, "SUBMIT model without NUL: EINVAL");
	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	c.reserved0 = 1;
	CHECK(err_of(ioctl(fd, MOLLY_IOC_CANCEL, &c)) == EINVAL, "CANCEL reserved0 set: EINVAL");
	c.reserved0 = 0;
	c.id = 0xdeadbeefull;
	CHECK(err_of(ioctl(fd, MOLLY_IOC_CANCEL, &c)) == ENOENT, "CANCEL unknown id: ENOENT");

	/* the daemon's answers to what the kernel cannot judge */
	(void) write(fd, "[1, 2", 5);
	submit_init(&s, 5, 1);
	s.flags = MOLLY_SUBMIT_CHAT;
	CHECK(ioctl(fd, MOLLY_IOC_SUBMIT, &s) == 0, "a chat request with broken JSON is submitted");
	id = s.id;
	CHECK(read_until_final(fd, id, NULL, false, &res) == 0 && res.type == MOLLY_EVENT_ERROR &&
		      res.error_kind == MOLLY_ERR_INVALID_REQUEST,
	      "... and ends with ERROR %s", res.error_name);
	(void) write(fd, "Hello", 5);
	submit_init(&s, 5, 1);
	strcpy(s.model, "no-such-adapter");
	CHECK(ioctl(fd, MOLLY_IOC_SUBMIT, &s) == 0 &&
		      read_until_final(fd, s.id, NULL, false, &res) == 0 &&
		      res.type == MOLLY_EVENT_ERROR && res.error_kind == MOLLY_ERR_MODEL_NOT_FOUND,
	      "an unknown model ends with ERROR %s", res.error_name);

	/* another file's request cannot be cancelled from here */
	{
		int fd2 = dev_open();
		uint64_t other;
		CHECK(submit_text(fd2, "Once upon a time", 4, 0, &other) == 0, "second file submits");
		c.id = other;
		CHECK(err_of(ioctl(fd, MOLLY_IOC_CANCEL, &c)) == ENOENT,
		      "CANCEL of another file's request: ENOENT");
		CHECK(read_until_final(fd2, other, NULL, false, &res) == 0 &&
			      res.type == MOLLY_EVENT_DONE,
		      "... which still completes (%s)", res.finish);
		close(fd2);
	}

	/* a read buffer too small for the next record, then a bad one: nothing is lost */
	CHECK(submit_text(fd, "Once upon a time", 2, 0, &id) == 0, "submit for the read checks");
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char small[8];
		CHECK(poll(&p, 1, -1) == 1 && (p.revents & POLLIN), "poll says readable");
		CHECK(err_of(read(fd, small, sizeof(small))) == EINVAL, "read into 8 bytes: EINVAL");
		CHECK(err_of(read(fd, none, 4096)) == EFAULT, "read into an unmapped page: EFAULT");
		CHECK(read_until_final(fd, id, NULL, false, &res) == 0 && res.type == MOLLY_EVENT_DONE,
		      "the events are all still there (%zu text events, %s)", res.n_text_events,
		      res.finish);
	}

	/* cancel */
	CHECK(submit_text(fd, "Once upon a time", 0, MOLLY_SUBMIT_IGNORE_EOS, &id) == 0,
	      "a long request");
	c.id = id;
	CHECK(ioctl(fd, MOLLY_IOC_CANCEL, &c) == 0, "CANCEL it");
	CHECK(read_until_final(fd, id, NULL, false, &res) == 0 && res.type == MOLLY_EVENT_DONE &&
		      strcmp(res.finish, "cancelled") == 0,
	      "it ends DONE \"%s\"", res.finish);
	CHECK(err_of(ioctl(fd, MOLLY_IOC_CANCEL, &c)) == ENOENT, "CANCEL after the end: ENOENT");

	/* bounded queue per file: MAX in flight, then EAGAIN (nothing is read meanwhile) */
	memset(&v, 0, sizeof(v));
	v.size = sizeof(v);
	(void) ioctl(fd, MOLLY_IOC_VERSION, &v);
	n_ok = 0;
	e = 0;
	for (unsigned i = 0; i < v.max_inflight_file + 1 && i < 80; i++) {
		int r = submit_text(fd, "Hi", 1, 0, &ids[i]);
		if (r == 0)
			n_ok++;
		else
			e = -r;
	}
	CHECK(n_ok == (int) v.max_inflight_file && e == EAGAIN,
	      "%d requests in flight, then EAGAIN (%s)", n_ok, strerror(e));
	close(fd); /* with all of them in flight or unread: the kernel tidies up */
	fd = dev_open();
	CHECK(submit_text(fd, "Once upon a time", 2, 0, &id) == 0 &&
		      read_until_final(fd, id, NULL, false, &res) == 0 && res.type == MOLLY_EVENT_DONE,
	      "a new file works after that close");
	close(fd);
	return failures ? 1 : 0;
}

static int cmd_close_mid(void)
{
	struct ev_result res;
	uint64_t id;
	int fd = dev_open();

	CHECK(submit_text(fd, "Once upon a time", 0, MOLLY_SUBMIT_IGNORE_EOS, &id) == 0,
	      "a long request (until the context is full)");
	CHECK(read_until_final(fd, id, NULL, true, &res) == 0 && res.n_text_events == 1,
	      "its first text came (final: %d %s)", res.type, res.error_name);
	close(fd);
	return failures ? 1 : 0;
}

/*
 * kernel: kmod-shim ends the request with ERROR Unavailable and refuses new ones (ENOTCONN).
 * cuse: the server was the daemon: the kernel aborts the connection, so the read fails (or
 * a final ERROR came first) and so does the next call; either way, no hang.
 */
static int cmd_wait_death(bool cuse)
{
	struct ev_result res;
	uint64_t id, id2;
	int fd = dev_open(), r;

	if (submit_text(fd, "Once upon a time", 0, MOLLY_SUBMIT_IGNORE_EOS, &id) < 0 ||
	    read_until_final(fd, id, NULL, true, &res) < 0 || res.n_text_events != 1) {
		printf("not ok - the request did not start (%s)\n", res.error_name);
		return 1;
	}
	printf("STARTED\n");
	fflush(stdout);
	r = read_until_final(fd, id, NULL, false, &res);
	if (cuse) {
		CHECK(r < 0 || res.type == MOLLY_EVENT_ERROR,
		      "the request ends when the daemon dies (read: %s, final %s)",
		      r < 0 ? strerror(-r) : "ok", res.error_name);
		r = submit_text(fd, "Hi", 1, 0, &id2);
		CHECK(r < 0, "the dead server's file refuses SUBMIT (%s)", strerror(-r));
	} else {
		CHECK(r == 0 && res.type == MOLLY_EVENT_ERROR &&
			      res.error_kind == MOLLY_ERR_UNAVAILABLE,
		      "the request ends with ERROR %s when the daemon dies", res.error_name);
		r = submit_text(fd, "Hi", 1, 0, &id2);
		CHECK(r == -ENOTCONN, "with no daemon, SUBMIT fails with ENOTCONN (%s)",
		      strerror(-r));
	}
	close(fd);
	return failures ? 1 : 0;
}

/*
 * A client that does not read: submits a request that fills the context, says SUBMITTED, waits
 * for a line on stdin (the script sends it once the request has ended), then reads: some text,
 * then ERROR MOLLY_ERR_CLIENT_SLOW (its queue bound was passed, the request was cancelled).
 */
static int cmd_slow(void)
{
	struct ev_result res;
	char line[16];
	uint64_t id;
	int fd = dev_open();

	CHECK(submit_text(fd, "Once upon a time", 0, MOLLY_SUBMIT_IGNORE_EOS, &id) == 0,
	      "a long request, and no reading");
	printf("SUBMITTED %llu\n", (unsigned long long) id);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	CHECK(read_until_final(fd, id, NULL, false, &res) == 0 && res.type == MOLLY_EVENT_ERROR &&
		      res.error_kind == MOLLY_ERR_CLIENT_SLOW,
	      "after %zu text events it ended with ERROR %s (kind %u)", res.n_text_events,
	      res.error_name, res.error_kind);
	close(fd);
	return failures ? 1 : 0;
}

struct many_arg {
	int index;
	int ok;
};

static void *many_thread(void *p)
{
	struct many_arg *a = p;
	struct ev_result res;
	uint64_t id;
	int fd = open(dev_path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	a->ok = submit_text(fd, "Once upon a time", 4, 0, &id) == 0 &&
		read_until_final(fd, id, NULL, false, &res) == 0 && res.type == MOLLY_EVENT_DONE;
	close(fd);
	return NULL;
}

static int cmd_many(int n)
{
	pthread_t *t = calloc((size_t) n, sizeof(*t));
	struct many_arg *a = calloc((size_t) n, sizeof(*a));
	int ok = 0;

	for (int i = 0; i < n; i++) {
		a[i].index = i;
		pthread_create(&t[i], NULL, many_thread, &a[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		ok += a[i].ok;
	}
	CHECK(ok == n, "%d of %d clients at once got their DONE", ok, n);
	return failures ? 1 : 0;
}

/* ---- fuzz ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static int cmd_fuzz(int seconds, uint64_t seed)
{
	static const unsigned long cmds[] = { MOLLY_IOC_VERSION, MOLLY_IOC_SUBMIT, MOLLY_IOC_CANCEL,
					      MOLLY_IOC_STATUS };
	long page = sysconf(_SC_PAGESIZE);
	char *none = mmap(NULL, (size_t) page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t buf[MOLLY_EVENT_MAX / 8 * 2];
	unsigned char arg[MOLLY_IOC_SIZE_MAX + 64];
	uint64_t ids[16] = { 0 };
	time_t end = time(NULL) + seconds;
	unsigned long n_calls = 0, n_submitted = 0;
	int fds[4];

	rng_state = seed ? seed : 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 4; i++) {
		fds[i] = dev_open();
		fcntl(fds[i], F_SETFL, O_NONBLOCK);
	}
	while (time(NULL) < end) {
		int fd = fds[rnd() % 4];
		unsigned long cmd;

		n_calls++;
		for (size_t i = 0; i < sizeof(arg); i++)
			arg[i] = (rnd() % 4 == 0) ? (unsigned char) rnd() : 0;
		switch (rnd() % 10) {
		case 0: case 1: case 2: /* a known ioctl with a random or right size */
			cmd = cmds[rnd() % 4];
			if (rnd() % 2)
				cmd = resized(cmd, (unsigned) (rnd() % (MOLLY_IOC_SIZE_MAX + 64)));
			*(uint32_t *) arg = (rnd() % 2) ? _IOC_SIZE(cmd) : (uint32_t) rnd();
			if (cmd == MOLLY_IOC_SUBMIT && rnd() % 2) {
				struct molly_submit *s = (void *) arg;
				submit_init(s, (uint32_t) (rnd() % 16), (uint32_t) (rnd() % 4));
				s->flags = (uint32_t) (rnd() % 8);
			}
			if (cmd == MOLLY_IOC_CANCEL && rnd() % 2) {
				struct molly_cancel *c = (void *) arg;
				memset(c, 0, sizeof(*c));
				c->size = sizeof(*c);
				c->id = ids[rnd() % 16];
			}
			if (ioctl(fd, cmd, rnd() % 16 == 0 ? (void *) none : (void *) arg) == 0 &&
			    _IOC_NR(cmd) == _IOC_NR(MOLLY_IOC_SUBMIT)) {
				ids[rnd() % 16] = ((struct molly_submit *) arg)->id;
				n_submitted++;
			}
			break;
		case 3: /* a random ioctl number */
			cmd = (unsigned long) (uint32_t) rnd();
			if (rnd() % 2)
				cmd = (cmd & ~(0xffUL << _IOC_TYPESHIFT)) |
				      ((unsigned long) MOLLY_IOC_MAGIC << _IOC_TYPESHIFT);
			(void) ioctl(fd, cmd, arg);
			break;
		case 4: case 5: /* stage some text */
			(void) write(fd, rnd() % 16 == 0 ? (void *) none : (void *) "Once upon",
				     (size_t) (rnd() % 10));
			break;
		case 6: case 7: /* read events, sometimes into a bad or small buffer */
			(void) read(fd, rnd() % 16 == 0 ? (void *) none : (void *) buf,
				    (size_t) (rnd() % sizeof(buf)));
			break;
		case 8: { /* poll */
			struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };
			(void) poll(&p, 1, 0);
			break;
		}
		case 9: /* close and reopen, with whatever is in flight */
			if (rnd() % 8 == 0) {
				int i = (int) (rnd() % 4);
				close(fds[i]);
				fds[i] = dev_open();
				fcntl(fds[i], F_SETFL, O_NONBLOCK);
			}
			break;
		}
	}
	for (int i = 0; i < 4; i++)
		close(fds[i]);
	CHECK(true, "fuzz: %lu calls in %d s, %lu requests submitted", n_calls, seconds,
	      n_submitted);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *p = getenv("MOLLY_DEVICE");

	if (p && *p)
		dev_path = p;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && strcmp(argv[1], "version") == 0)
		return cmd_version();
	if (argc == 4 && strcmp(argv[1], "stream") == 0)
		return cmd_stream(argv[2], (uint32_t) strtoul(argv[3], NULL, 10));
	if (argc == 2 && strcmp(argv[1], "hostile") == 0)
		return cmd_hostile();
	if (argc == 2 && strcmp(argv[1], "close-mid") == 0)
		return cmd_close_mid();
	if (argc >= 2 && strcmp(argv[1], "wait-death") == 0)
		return cmd_wait_death(argc == 3 && strcmp(argv[2], "cuse") == 0);
	if (argc == 2 && strcmp(argv[1], "slow") == 0)
		return cmd_slow();
	if (argc == 3 && strcmp(argv[1], "many") == 0)
		return cmd_many(atoi(argv[2]));
	if (argc == 4 && strcmp(argv[1], "fuzz") == 0)
		return cmd_fuzz(atoi(argv[2]), strtoull(argv[3], NULL, 0));
	fprintf(stderr, "usage: dev-client version|stream P N|hostile|close-mid|wait-death|"
			"many N|fuzz SECONDS SEED\n");
	return 2;
}
