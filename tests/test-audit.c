/* SPDX-License-Identifier: MIT */
/* test-audit.c: the audit store (daemon/audit/audit.h): write, scan by time/tier/class,
 * retention, a full map, a reader in another process while the daemon writes. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "audit/audit.h"
#include "test.h"

#define SEC 1000000000ull
#define DAY (86400ull * SEC)

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static char *tmpdir(void)
{
	char tmpl[] = "/tmp/test-audit-XXXXXX";
	char *d = mkdtemp(tmpl);
	char *s = NULL;

	if (d && asprintf(&s, "%s/audit", d) < 0)
		s = NULL;
	return s;
}

static void cleanup_dir(char *store)
{
	char dir[4096];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", store);
	free(store);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t) ts.tv_sec * SEC + (uint64_t) ts.tv_nsec;
}

static void make_record(struct audit_record *r, uint64_t t, const char *cls, int tier)
{
	*r = (struct audit_record){ .time_ns = t, .uid = 1000, .tier = tier,
				    .permitted_tiers = 0x3 };
	snprintf(r->front, sizeof(r->front), "dbus");
	snprintf(r->class_name, sizeof(r->class_name), "%s", cls);
	snprintf(r->target, sizeof(r->target), "local:tiny");
	snprintf(r->finish, sizeof(r->finish), "stop");
}

struct collect {
	size_t n;
	uint64_t last_time, last_seq;
	bool ordered;
	char classes[64][16];
};

static int collect_fn(const struct audit_record *r, void *ud)
{
	struct collect *c = ud;

	if (c->n > 0 && (r->time_ns < c->last_time ||
			 (r->time_ns == c->last_time && r->seq <= c->last_seq)))
		c->ordered = false;
	c->last_time = r->time_ns;
	c->last_seq = r->seq;
	if (c->n < 64)
		snprintf(c->classes[c->n], 16, "%s", r->class_name);
	c->n++;
	return 0;
}

static size_t scan_count(struct audit *a, const struct audit_filter *f)
{
	struct collect c = { .ordered = true };
	struct errmsg e = { { 0 } };

	if (audit_scan(a, f, collect_fn, &c, &e) < 0) {
		fprintf(stderr, "scan: %s\n", e.text);
		return (size_t) -1;
	}
	return c.ordered ? c.n : (size_t) -2;
}

TEST(json_roundtrip)
{
	struct audit_record r, back;
	_cleanup_free_ char *json = NULL, *line = NULL;

	make_record(&r, 1700000000123456789ull, "personal", 0);
	r.seq = 7;
	r.request_id = 42;
	snprintf(r.member, sizeof(r.member), "alice");
	snprintf(r.declared, sizeof(r.declared), "personal");
	audit_record_add_finding(&r, "email", 2);
	audit_record_add_finding(&r, "iban", 1);
	audit_record_add_finding(&r, "email", 1);
	r.prompt_tokens = 12;
	ASSERT_EQ(r.n_findings, 2u);
	ASSERT_OK(audit_record_to_json(&r, &json));
	ASSERT_TRUE(strstr(json, "\"findings\":{\"email\":3,\"iban\":1}"));
	ASSERT_TRUE(strstr(json, "\"permitted_tiers\":[\"T0\",\"T1\"]"));
	ASSERT_TRUE(strstr(json, "\"tier\":\"T0\""));
	ASSERT_TRUE(strstr(json, "\"egress_enforced\":false"));
	ASSERT_TRUE(strstr(json, "\"error\":null"));
	ASSERT_OK(audit_record_from_json(json, strlen(json), &back));
	ASSERT_EQ(back.time_ns, r.time_ns);
	ASSERT_EQ(back.seq, 7u);
	ASSERT_EQ(back.uid, 1000);
	ASSERT_STREQ(back.member, "alice");
	ASSERT_STREQ(back.class_name, "personal");
	ASSERT_EQ(back.n_findings, 2u);
	ASSERT_EQ(back.findings[0].count + back.findings[1].count, 4u);
	ASSERT_EQ(back.permitted_tiers, 0x3u);
	ASSERT_EQ(back.tier, 0);
	ASSERT_EQ(back.prompt_tokens, 12u);
	ASSERT_OK(audit_record_format(&r, &line));
	ASSERT_TRUE(strstr(line, "2023-11-14T22:13:20.123Z dbus uid=1000 member=alice"));
	ASSERT_TRUE(strstr(line, "findings=email:3,iban:1 tiers=T0,T1 target=local:tiny tier=T0"));
	ASSERT_TRUE(strstr(line, "finish=stop egress=off"));
	/* Not JSON, a JSON without time: refused. */
	ASSERT_ERR(audit_record_from_json("nope", 4, &back), -EBADMSG);
	ASSERT_ERR(audit_record_from_json("{\"seq\":1}", 9, &back), -EBADMSG);
	return 0;
}

TEST(findings_overflow)
{
	struct audit_record r = { 0 };
	char kind[16];
	uint32_t sum = 0;

	for (int i = 0; i < AUDIT_MAX_KINDS + 5; i++) {
		snprintf(kind, sizeof(kind), "k%d", i);
		audit_record_add_finding(&r, kind, 1);
	}
	ASSERT_EQ(r.n_findings, (size_t) AUDIT_MAX_KINDS);
	for (size_t i = 0; i < r.n_findings; i++)
		sum += r.findings[i].count;
	ASSERT_EQ(sum, (uint32_t) AUDIT_MAX_KINDS + 5);
	ASSERT_STREQ(r.findings[AUDIT_MAX_KINDS - 1].kind, "other");
	return 0;
}

TEST(durations)
{
	uint64_t ns;
	int t;

	ASSERT_OK(audit_parse_duration("30d", &ns));
	ASSERT_EQ(ns, 30 * DAY);
	ASSERT_OK(audit_parse_duration("12h", &ns));
	ASSERT_EQ(ns, 12 * 3600 * SEC);
	ASSERT_OK(audit_parse_duration("15m", &ns));
	ASSERT_EQ(ns, 15 * 60 * SEC);
	ASSERT_OK(audit_parse_duration("3600s", &ns));
	ASSERT_EQ(ns, 3600 * SEC);
	ASSERT_OK(audit_parse_duration("1d12h", &ns));
	ASSERT_EQ(ns, DAY + 12 * 3600 * SEC);
	ASSERT_OK(audit_parse_duration("2w", &ns));
	ASSERT_EQ(ns, 14 * DAY);
	ASSERT_ERR(audit_parse_duration("", &ns), -EINVAL);
	ASSERT_ERR(audit_parse_duration("30", &ns), -EINVAL);
	ASSERT_ERR(audit_parse_duration("d", &ns), -EINVAL);
	ASSERT_ERR(audit_parse_duration("3x", &ns), -EINVAL);
	ASSERT_ERR(audit_parse_duration("-3d", &ns), -EINVAL);
	ASSERT_ERR(audit_parse_duration("99999999999999999999d", &ns), -ERANGE);
	ASSERT_OK(audit_parse_tier("T3", &t));
	ASSERT_EQ(t, 3);
	ASSERT_OK(audit_parse_tier("0", &t));
	ASSERT_EQ(t, 0);
	ASSERT_ERR(audit_parse_tier("T4", &t), -EINVAL);
	ASSERT_ERR(audit_parse_tier("T", &t), -EINVAL);
	return 0;
}

TEST(write_scan_filter)
{
	char *dir = tmpdir();
	struct audit_options o = { .no_sync = true };
	struct errmsg e = { { 0 } };
	struct audit *a = NULL;
	struct audit_record r;
	uint64_t base = now_ns() - 10 * DAY;
	const char *cls[] = { "public", "personal", "secret" };

	ASSERT_TRUE(dir);
	/* Read-only on a store that does not exist: -ENOENT, and the message says what to do. */
	ASSERT_ERR(audit_open(dir, &(struct audit_options){ .read_only = true }, &a, &e), -ENOENT);
	ASSERT_TRUE(strstr(e.text, "--state-dir"));

	ASSERT_OK(audit_open(dir, &o, &a, &e));
	for (int i = 0; i < 30; i++) {
		make_record(&r, base + (uint64_t) i * DAY / 3, cls[i % 3], i % 2 ? 3 : 0);
		ASSERT_EQ(audit_append(a, &r, &e), 0);
		ASSERT_EQ(r.seq, (uint64_t) i);
	}
	/* Two records at the same nanosecond are both kept (the sequence tells them apart). */
	make_record(&r, base, "public", 0);
	ASSERT_EQ(audit_append(a, &r, &e), 0);
	ASSERT_EQ(scan_count(a, NULL), 31u);
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = 3 }), 15u);
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = 0 }), 16u);
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = 1 }), 0u);
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = -1, .class_name = "secret" }),
		  10u);
	/* personal is i = 1, 4, 7, ...: odd i is T3 -> 1, 7, 13, 19, 25 */
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = 3, .class_name = "personal" }),
		  5u);
	/* By time: the last 5 days hold i >= 15 (i*1/3 day >= 5 days). */
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = -1, .since_ns = base + 5 * DAY }),
		  15u);
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = -1,
							.since_ns = base + DAY,
							.until_ns = base + 2 * DAY }),
		  3u);
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = -1, .since_ns = now_ns() }), 0u);
	a = audit_close(a);

	/* Reopen: the records are there, and sequence numbers continue. */
	ASSERT_OK(audit_open(dir, &o, &a, &e));
	make_record(&r, 0, "public", 0);
	ASSERT_EQ(audit_append(a, &r, &e), 0);
	ASSERT_TRUE(r.seq >= 30u); /* after the newest key's */
	ASSERT_TRUE(r.time_ns > base);
	ASSERT_EQ(scan_count(a, NULL), 32u);
	a = audit_close(a);

	/* A reader sees the same. */
	ASSERT_OK(audit_open(dir, &(struct audit_options){ .read_only = true }, &a, &e));
	ASSERT_EQ(scan_count(a, NULL), 32u);
	ASSERT_ERR(audit_append(a, &r, &e), -EROFS);
	a = audit_close(a);
	cleanup_dir(dir);
	return 0;
}

TEST(retention)
{
	char *dir = tmpdir();
	struct audit_options o = { .no_sync = true };
	struct errmsg e = { { 0 } };
	struct audit *a = NULL;
	struct audit_record r;
	uint64_t now = now_ns(), removed = 99;

	ASSERT_OK(audit_open(dir, &o, &a, &e));
	/* 100 days of records, one per day, plus 10000 older ones (several prune batches). */
	for (int i = 0; i < 10000; i++) {
		make_record(&r, now - 200 * DAY + (uint64_t) i * SEC, "public", 0);
		ASSERT_EQ(audit_append(a, &r, &e), 0);
	}
	for (int i = 0; i < 100; i++) {
		make_record(&r, now - (uint64_t) i * DAY - SEC, "personal", 0);
		ASSERT_EQ(audit_append(a, &r, &e), 0);
	}
	ASSERT_OK(audit_prune(a, now - 90 * DAY, &removed, &e));
	ASSERT_EQ(removed, 10000u + 10u);
	ASSERT_EQ(scan_count(a, NULL), 90u);
	ASSERT_OK(audit_prune(a, now - 90 * DAY, &removed, &e));
	ASSERT_EQ(removed, 0u);
	ASSERT_OK(audit_prune(a, now, &removed, &e));
	ASSERT_EQ(removed, 90u);
	ASSERT_EQ(scan_count(a, NULL), 0u);
	a = audit_close(a);
	cleanup_dir(dir);
	return 0;
}

TEST(map_full)
{
	char *dir = tmpdir();
	/* 64 pages: a few hundred records fit. */
	struct audit_options o = { .no_sync = true, .map_size = 64 * 4096,
				   .retention_ns = 30 * DAY };
	struct errmsg e = { { 0 } };
	struct audit *a = NULL;
	struct audit_record r;
	uint64_t now = now_ns();
	size_t dropped_total = 0, n;
	int k;

	ASSERT_OK(audit_open(dir, &o, &a, &e));
	/* Old records first: when the map fills, they go before any recent one. */
	for (int i = 0; i < 50; i++) {
		make_record(&r, now - 60 * DAY + (uint64_t) i, "public", 0);
		ASSERT_EQ(audit_append(a, &r, &e), 0);
	}
	for (int i = 0; i < 3000; i++) {
		make_record(&r, now - DAY + (uint64_t) i * SEC, "secret", 0);
		audit_record_add_finding(&r, "api_key", 1);
		k = audit_append(a, &r, &e);
		if (k < 0)
			fprintf(stderr, "append %d: %s\n", i, e.text);
		ASSERT_TRUE(k >= 0);
		dropped_total += (size_t) k;
	}
	ASSERT_TRUE(dropped_total > 0);
	n = scan_count(a, NULL);
	ASSERT_EQ(n + dropped_total, 3050u);
	/* The old ones went first, and the newest record is there. */
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = -1, .class_name = "public" }), 0u);
	ASSERT_EQ(scan_count(a, &(struct audit_filter){ .tier = -1,
							.since_ns = now - DAY + 2999 * SEC }),
		  1u);
	a = audit_close(a);

	/* A record that cannot fit at all: -ENOSPC, with advice. */
	cleanup_dir(dir);
	dir = tmpdir();
	ASSERT_OK(audit_open(dir, &o, &a, &e));
	{
		struct audit_record big;
		char kind[32];
		make_record(&big, 0, "public", 0);
		for (int i = 0; i < AUDIT_MAX_KINDS; i++) {
			snprintf(kind, sizeof(kind), "kind-%026d", i);
			audit_record_add_finding(&big, kind, 1);
		}
		/* Fill the store with big records until it prunes; still never fails. */
		for (int i = 0; i < 400; i++) {
			big.time_ns = 0;
			ASSERT_TRUE(audit_append(a, &big, &e) >= 0);
		}
	}
	a = audit_close(a);
	cleanup_dir(dir);
	return 0;
}

/* A reader in another process scans while this one writes: every scan sees a consistent
 * snapshot (no torn record, count never goes down). */
TEST(concurrent_reader)
{
	char *dir = tmpdir();
	struct audit_options o = { .no_sync = true };
	struct errmsg e = { { 0 } };
	struct audit *a = NULL;
	struct audit_record r;
	int status = 0;
	pid_t pid;
	volatile int *go;

	go = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(go != MAP_FAILED);
	ASSERT_OK(audit_open(dir, &o, &a, &e));
	make_record(&r, 0, "public", 0);
	ASSERT_EQ(audit_append(a, &r, &e), 0);

	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		struct audit *ra = NULL;
		size_t last = 0, scans = 0;
		/* LMDB: a child must not use the parent's environment; it opens its own. */
		if (audit_open(dir, &(struct audit_options){ .read_only = true }, &ra, &e) < 0)
			_exit(2);
		while (!*go || scans < 5) {
			size_t n = scan_count(ra, NULL);
			if (n == (size_t) -1 || n == (size_t) -2 || n < last)
				_exit(3);
			last = n;
			scans++;
			if (*go && n == 501)
				break;
		}
		/* After the writer finished, the reader sees everything. */
		if (scan_count(ra, NULL) != 501)
			_exit(4);
		audit_close(ra);
		_exit(0);
	}
	for (int i = 0; i < 500; i++) {
		make_record(&r, 0, i % 2 ? "personal" : "secret", 0);
		ASSERT_EQ(audit_append(a, &r, &e), 0);
	}
	*go = 1;
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(WEXITSTATUS(status), 0);
	a = audit_close(a);
	munmap((void *) go, 4096);
	cleanup_dir(dir);
	return 0;
}
