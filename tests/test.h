/* SPDX-License-Identifier: MIT */
/*
 * test.h: the tiny test runner every tests/test-<module>.c uses (after systemd's TEST()
 * and redis' testhelp.h). TEST(name) registers a case; main() runs them all (or those
 * named on the command line) and prints one line per case, then
 * "N passed, N failed, N skipped". Exit: 0 all passed, 1 any failed, 77 all skipped.
 *
 * A case returns 0 (pass), 1 (fail) or TEST_SKIP; ASSERT_* print file:line and return 1.
 * Include this in exactly one .c file per binary.
 */
#pragma once

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define TEST_SKIP 77

/* A seeded generator for test inputs (splitmix64): set test_rng_state, then test_uniform()
 * gives doubles in [0, 1), the same sequence on every machine. */
static uint64_t test_rng_state;

static inline double test_uniform(void)
{
	test_rng_state += 0x9e3779b97f4a7c15ull;
	uint64_t z = test_rng_state;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double) (z >> 11) / 9007199254740992.0;
}

/* Seeds test_uniform() from MOLLY_TEST_SEED, or from getrandom() (printed once, so that a
 * failing run can be repeated); every call restarts the same sequence. */
static inline void test_seed_rng(void)
{
	static uint64_t seed;
	const char *env = getenv("MOLLY_TEST_SEED");

	if (!seed) {
		if (env)
			seed = strtoull(env, NULL, 0);
		if (!seed && getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
			seed = 42;
		printf("  seed %llu (MOLLY_TEST_SEED)\n", (unsigned long long) seed);
	}
	test_rng_state = seed;
}

/*
 * Waiting for an event the test caused (a process exits, a worker restarts): poll with
 * TEST_WAIT_UNTIL(cond); the bound (MOLLY_TEST_WAIT_S, default 120 s, wall clock) only turns a
 * hang into a failure and never stands for "long enough for the work". True when cond held.
 */
static inline double test_now_s_(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static inline double test_wait_deadline_(void)
{
	const char *v = getenv("MOLLY_TEST_WAIT_S");
	double s = v ? atof(v) : 0;

	return test_now_s_() + (s > 0 ? s : 120.0);
}

#define TEST_WAIT_UNTIL(cond)                                                                      	({                                                                                         		double deadline_ = test_wait_deadline_();                                          		bool ok_;                                                                          		while (!(ok_ = (cond)) && test_now_s_() < deadline_) {                             			struct timespec ts_ = { 0, 5000000 };                                      			nanosleep(&ts_, NULL);                                                     		}                                                                                  		ok_;                                                                               	})

struct test_case {
	const char *name;
	int (*fn)(void);
};

#define TEST_MAX 256
static struct test_case test_cases_[TEST_MAX];
static int test_n_cases_;

#define TEST(name)                                                                                 \
	static int test_##name(void);                                                              \
	__attribute__((constructor)) static void test_register_##name(void)                        \
	{                                                                                          \
		if (test_n_cases_ < TEST_MAX)                                                      \
			test_cases_[test_n_cases_++] = (struct test_case){ #name, test_##name };   \
	}                                                                                          \
	static int test_##name(void)

#define TEST_FAIL_(...)                                                                            \
	do {                                                                                       \
		fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                                   \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fputc('\n', stderr);                                                               \
		return 1;                                                                          \
	} while (0)

#define ASSERT_TRUE(x)                                                                             \
	do {                                                                                       \
		if (!(x))                                                                          \
			TEST_FAIL_("assertion failed: %s", #x);                                    \
	} while (0)
#define ASSERT_OK(x)                                                                               \
	do {                                                                                       \
		long long r_ = (long long) (x);                                                    \
		if (r_ < 0)                                                                        \
			TEST_FAIL_("%s failed: %lld (%s)", #x, r_, strerror((int) -r_));           \
	} while (0)
#define ASSERT_ERR(x, err)                                                                         \
	do {                                                                                       \
		long long r_ = (long long) (x);                                                    \
		if (r_ != (long long) (err))                                                       \
			TEST_FAIL_("%s: expected %lld, got %lld", #x, (long long) (err), r_);      \
	} while (0)
#define ASSERT_EQ(a, b)                                                                            \
	do {                                                                                       \
		long long a_ = (long long) (a), b_ = (long long) (b);                              \
		if (a_ != b_)                                                                      \
			TEST_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_);                      \
	} while (0)
#define ASSERT_STREQ(a, b)                                                                         \
	do {                                                                                       \
		const char *a_ = (a), *b_ = (b);                                                   \
		if (!a_ || !b_ || strcmp(a_, b_) != 0)                                             \
			TEST_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",       \
				   b_ ? b_ : "(null)");                                            \
	} while (0)
#define ASSERT_NEAR(a, b, tol)                                                                     \
	do {                                                                                       \
		double a_ = (a), b_ = (b);                                                         \
		if (!(fabs(a_ - b_) <= (tol)))                                                     \
			TEST_FAIL_("|%s - %s| = |%g - %g| = %g > %g", #a, #b, a_, b_,              \
				   fabs(a_ - b_), (double) (tol));                                 \
	} while (0)

/* Path of a file under the shared models/reference tree ($MOLLY_SHARED_DIR overrides). */
static inline const char *test_shared_path(const char *rel)
{
	static char buf[8][4096];
	static int slot;
	const char *base = getenv("MOLLY_SHARED_DIR");
	char *out = buf[slot++ % 8];

#ifdef MOLLY_SHARED_DIR
	if (!base)
		base = MOLLY_SHARED_DIR;
#endif
	snprintf(out, sizeof(buf[0]), "%s/%s", base ? base : "../shared", rel);
	return out;
}

static inline const char *test_source_path(const char *rel)
{
	static char buf[8][4096];
	static int slot;
	char *out = buf[slot++ % 8];

#ifdef MOLLY_SOURCE_DIR
	snprintf(out, sizeof(buf[0]), "%s/%s", MOLLY_SOURCE_DIR, rel);
#else
	snprintf(out, sizeof(buf[0]), "%s", rel);
#endif
	return out;
}

int main(int argc, char **argv)
{
	int passed = 0, failed = 0, skipped = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < test_n_cases_; i++) {
		bool selected = argc < 2;
		for (int a = 1; a < argc; a++)
			if (strcmp(argv[a], test_cases_[i].name) == 0)
				selected = true;
		if (!selected)
			continue;
		int r = test_cases_[i].fn();
		if (r == 0) {
			printf("%s ok\n", test_cases_[i].name);
			passed++;
		} else if (r == TEST_SKIP) {
			printf("%s skipped\n", test_cases_[i].name);
			skipped++;
		} else {
			printf("%s FAILED\n", test_cases_[i].name);
			failed++;
		}
	}
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	if (failed)
		return 1;
	if (passed == 0 && skipped > 0) {
		/* the reason run-tests.sh lists beside the skip */
		const char *shared = test_shared_path("models");

		if (access(shared, F_OK) < 0)
			printf("SKIP: every case skipped; the shared models are missing (%s)\n", shared);
		else
			printf("SKIP: every case skipped (their reasons are above)\n");
		return TEST_SKIP;
	}
	return 0;
}
