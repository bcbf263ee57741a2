/* SPDX-License-Identifier: MIT */
/* test-priors.c: the router's (domain, target) quality priors in LMDB: EWMA math, seeds,
 * persistence across reopen, a reader thread while a writer records, bad input. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "router/priors.h"
#include "test.h"

static char *make_dir(void)
{
	char tmpl[] = "/tmp/test-priors-XXXXXX";
	char *d = mkdtemp(tmpl);
	char *path;

	if (!d || asprintf(&path, "%s/priors", d) < 0)
		return NULL;
	return path;
}

static void remove_store(char *path)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "%s/data.mdb", path);
	unlink(buf);
	snprintf(buf, sizeof(buf), "%s/lock.mdb", path);
	unlink(buf);
	rmdir(path);
	*strrchr(path, '/') = 0;
	rmdir(path);
	free(path);
}

TEST(ewma_math)
{
	char *dir = make_dir();
	_cleanup_(priors_closep) struct priors *p = NULL;
	struct errmsg e = { 0 };
	double mean, ref;
	uint64_t n;

	ASSERT_TRUE(dir);
	ASSERT_OK(priors_open(dir, &(struct priors_options){ .alpha = 0.25, .no_sync = true }, &p,
			      &e));
	ASSERT_ERR(priors_get(p, "law", "t1:lan", &mean, &n), -ENOENT);
	/* unseeded: the first score is the mean, then plain averages until 1/k < alpha */
	ASSERT_OK(priors_record(p, "law", "t1:lan", 0.8, &mean, &e));
	ASSERT_NEAR(mean, 0.8, 1e-12);
	ASSERT_OK(priors_record(p, "law", "t1:lan", 0.4, &mean, &e));
	ASSERT_NEAR(mean, 0.6, 1e-12);
	ASSERT_OK(priors_record(p, "law", "t1:lan", 0.3, &mean, &e));
	ASSERT_NEAR(mean, 0.5, 1e-12);
	ref = 0.5;
	for (int i = 0; i < 5; i++) { /* k = 4..8: 1/k <= 0.25, so alpha */
		ASSERT_OK(priors_record(p, "law", "t1:lan", 1.0, &mean, &e));
		ref += 0.25 * (1.0 - ref);
		ASSERT_NEAR(mean, ref, 1e-12);
	}
	ASSERT_OK(priors_get(p, "law", "t1:lan", &mean, &n));
	ASSERT_EQ(n, 8);
	ASSERT_NEAR(mean, ref, 1e-12);

	/* seeded: the seed counts as one observation */
	ASSERT_OK(priors_seed(p, "cooking", "local:base:chef", 0.9, &e));
	ASSERT_OK(priors_get(p, "cooking", "local:base:chef", &mean, &n));
	ASSERT_NEAR(mean, 0.9, 1e-12);
	ASSERT_EQ(n, 0);
	ASSERT_OK(priors_seed(p, "cooking", "local:base:chef", 0.7, &e)); /* no scores: moves */
	ASSERT_OK(priors_record(p, "cooking", "local:base:chef", 0.3, &mean, &e));
	ASSERT_NEAR(mean, 0.5, 1e-12);
	ASSERT_OK(priors_seed(p, "cooking", "local:base:chef", 0.1, &e)); /* scores: keeps */
	ASSERT_OK(priors_get(p, "cooking", "local:base:chef", &mean, &n));
	ASSERT_NEAR(mean, 0.5, 1e-12);
	ASSERT_EQ(n, 1);
	/* scores stay in [0, 1] */
	for (int i = 0; i < 100; i++)
		ASSERT_OK(priors_record(p, "cooking", "local:base:chef", 1.0, &mean, &e));
	ASSERT_TRUE(mean <= 1.0 && mean > 0.999);
	p = priors_close(p);
	remove_store(dir);
	return 0;
}

static int collect(const struct priors_entry *en, void *userdata)
{
	char *out = userdata;
	size_t l = strlen(out);

	snprintf(out + l, 1024 - l, "%s|%s|%.3f|%llu|%d;", en->domain, en->target, en->mean,
		 (unsigned long long) en->count, en->seeded);
	return 0;
}

TEST(persistence_and_listing)
{
	char *dir = make_dir();
	struct priors *p = NULL;
	struct errmsg e = { 0 };
	char out[1024] = "";
	double mean;
	uint64_t n;

	ASSERT_TRUE(dir);
	ASSERT_ERR(priors_open(dir, &(struct priors_options){ .read_only = true }, &p, &e),
		   -ENOENT);
	ASSERT_OK(priors_open(dir, NULL, &p, &e));
	ASSERT_OK(priors_seed(p, "medicine", "t2:clinic", 0.6, &e));
	ASSERT_OK(priors_record(p, "code", "local:qwen:coder", 0.75, NULL, &e));
	ASSERT_OK(priors_record(p, "code", "local:qwen:coder", 0.25, NULL, &e));
	p = priors_close(p);

	ASSERT_OK(priors_open(dir, &(struct priors_options){ .read_only = true }, &p, &e));
	ASSERT_OK(priors_get(p, "code", "local:qwen:coder", &mean, &n));
	ASSERT_NEAR(mean, 0.5, 1e-12);
	ASSERT_EQ(n, 2);
	ASSERT_ERR(priors_record(p, "code", "x", 0.5, NULL, &e), -EROFS);
	ASSERT_OK(priors_foreach(p, collect, out, &e));
	ASSERT_STREQ(out, "code|local:qwen:coder|0.500|2|0;medicine|t2:clinic|0.600|0|1;");
	p = priors_close(p);

	ASSERT_OK(priors_open(dir, NULL, &p, &e));
	ASSERT_OK(priors_forget(p, "medicine", "t2:clinic", &e));
	ASSERT_ERR(priors_forget(p, "medicine", "t2:clinic", &e), -ENOENT);
	ASSERT_ERR(priors_get(p, "medicine", "t2:clinic", NULL, NULL), -ENOENT);
	p = priors_close(p);
	remove_store(dir);
	return 0;
}

struct reader_arg {
	struct priors *p;
	volatile bool stop;
	int bad;
	long reads;
};

static void *reader(void *userdata)
{
	struct reader_arg *a = userdata;
	double last = -1;

	while (!a->stop) {
		double mean;
		uint64_t n;
		int r = priors_get(a->p, "finance", "t1:lan", &mean, &n);
		if (r == -ENOENT)
			continue;
		/* the writer only records 1.0 after a 0 seed: the mean never goes down */
		if (r < 0 || mean < last || mean < 0 || mean > 1)
			a->bad++;
		last = mean;
		a->reads++;
	}
	return NULL;
}

TEST(concurrent_reader)
{
	char *dir = make_dir();
	_cleanup_(priors_closep) struct priors *p = NULL;
	struct errmsg e = { 0 };
	struct reader_arg a = { 0 };
	pthread_t t;

	ASSERT_TRUE(dir);
	ASSERT_OK(priors_open(dir, &(struct priors_options){ .no_sync = true }, &p, &e));
	ASSERT_OK(priors_seed(p, "finance", "t1:lan", 0.0, &e));
	a.p = p;
	ASSERT_EQ(pthread_create(&t, NULL, reader, &a), 0);
	for (int i = 0; i < 300; i++)
		ASSERT_OK(priors_record(p, "finance", "t1:lan", 1.0, NULL, &e));
	a.stop = true;
	pthread_join(t, NULL);
	printf("  reader: %ld reads during 300 writes, %d bad\n", a.reads, a.bad);
	ASSERT_EQ(a.bad, 0);
	p = priors_close(p);
	remove_store(dir);
	return 0;
}

TEST(bad_input)
{
	char *dir = make_dir();
	_cleanup_(priors_closep) struct priors *p = NULL;
	struct errmsg e = { 0 };
	char longname[PRIORS_NAME_MAX + 8];

	ASSERT_TRUE(dir);
	ASSERT_ERR(priors_open("", NULL, &p, &e), -EINVAL);
	ASSERT_ERR(priors_open(dir, &(struct priors_options){ .alpha = 1.5 }, &p, &e), -EINVAL);
	ASSERT_OK(priors_open(dir, &(struct priors_options){ .no_sync = true }, &p, &e));
	ASSERT_ERR(priors_record(p, "law", "t1:x", NAN, NULL, &e), -EINVAL);
	ASSERT_ERR(priors_record(p, "law", "t1:x", 1.01, NULL, &e), -EINVAL);
	ASSERT_ERR(priors_record(p, "law", "t1:x", -0.1, NULL, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "between 0 and 1") != NULL);
	ASSERT_ERR(priors_seed(p, "law", "t1:x", 2, &e), -EINVAL);
	ASSERT_ERR(priors_record(p, "", "t1:x", 0.5, NULL, &e), -EINVAL);
	ASSERT_ERR(priors_record(p, "law", "t1 x", 0.5, NULL, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "target") != NULL);
	ASSERT_ERR(priors_record(p, "la\nw", "t1:x", 0.5, NULL, &e), -EINVAL);
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	ASSERT_ERR(priors_record(p, longname, "t1:x", 0.5, NULL, &e), -EINVAL);
	ASSERT_ERR(priors_get(p, NULL, "t1:x", NULL, NULL), -EINVAL);
	ASSERT_ERR(priors_get(p, "law", "t1:x", NULL, NULL), -ENOENT);
	p = priors_close(p);
	remove_store(dir);
	return 0;
}
