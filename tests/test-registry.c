/* SPDX-License-Identifier: MIT */
/* The adapter registry (daemon/registry/registry.c) on real LMDB files and real blobs:
 * deterministic blobs (the same weights from GGUF LoRA and from a Molly file, under any name,
 * give one hash), versions, specs (NAME, NAME@N, NAME@sha256:PREFIX), rollback, pruning
 * (KeepVersions), removal, GC, fsck, a full map, and the crash switch at every step of an
 * import and a removal (a child killed there; the parent reopens the registry like a restart
 * and finds the old state or the new one, and fsck clean after --repair). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/model.h"
#include "engine/quant.h"
#include "lora/adapter.h"
#include "lora/lora-file.h"
#include "lora/lora-gen.h"
#include "registry/registry.h"
#include "test.h"

#define ATTN "models/stories260K-lora-attn-r8.gguf"
#define ALL  "models/stories260K-lora-all-r8.gguf"

static struct model *base;

static int open_adapter(const char *rel, struct lora_adapter **ret)
{
	struct lora_open_opts o = { 0 };
	struct errmsg e = { { 0 } };
	int r;

	if (!base) {
		if (access(test_shared_path("models/stories260K.gguf"), R_OK) < 0)
			return TEST_SKIP;
		r = model_load(test_shared_path("models/stories260K.gguf"), &base, &e);
		if (r < 0) {
			fprintf(stderr, "  %s\n", e.text);
			return r;
		}
	}
	o.base = base;
	r = lora_adapter_open(rel[0] == '/' ? rel : test_shared_path(rel), &o, ret, NULL, &e);
	if (r < 0)
		fprintf(stderr, "  %s: %s\n", rel, e.text);
	return r;
}

#define OPEN(a, rel)                                                                               \
	do {                                                                                       \
		int o_ = open_adapter((rel), &(a));                                                \
		if (o_ == TEST_SKIP)                                                               \
			return TEST_SKIP;                                                          \
		ASSERT_OK(o_);                                                                     \
	} while (0)

static char *new_dir(void)
{
	char *d = strdup("/tmp/test-registry.XXXXXX");

	return d && mkdtemp(d) ? d : NULL;
}

static void rm_rf(const char *d)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	(void) !system(cmd);
}

static int open_reg(const char *dir, uint32_t keep, struct registry **ret)
{
	struct registry_params p = { .dir = dir, .keep_versions = keep };
	struct errmsg e = { { 0 } };
	int r = registry_open(&p, ret, &e);

	if (r < 0)
		fprintf(stderr, "  open: %s\n", e.text);
	return r;
}

static int import(struct registry *reg, struct lora_adapter *a, const char *name,
		  struct registry_version *ret)
{
	struct registry_import imp = { .name = name, .source = "/test", .importer = "test" };
	struct errmsg e = { { 0 } };
	int r = registry_import(reg, a, &imp, ret, &e);

	if (r < 0)
		fprintf(stderr, "  import %s: %s\n", name, e.text);
	return r;
}

static void count_findings(enum registry_finding kind, const char *text, void *ud)
{
	size_t *n = ud;

	(void) text;
	n[kind]++;
}

/* fsck's errors; warnings into *warn */
static int fsck(const char *dir, bool repair, size_t *warn)
{
	size_t n[3] = { 0 };
	struct errmsg e = { { 0 } };
	int r = registry_fsck(dir, repair, count_findings, n, warn, &e);

	if (r < 0)
		fprintf(stderr, "  fsck: %s\n", e.text);
	return r;
}

TEST(same_weights_same_hash_whatever_the_format_and_name)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *g = NULL, *f = NULL;
	_cleanup_(registry_closep) struct registry *reg = NULL;
	struct registry_version v1 = { 0 }, v2 = { 0 }, v3 = { 0 };
	_cleanup_free_ char *dir = new_dir();
	char molly[4200], path[4200];
	struct lora_adapter_meta meta = { .name = (char *) "other-name" };
	char *doms[] = { (char *) "stories" };
	struct lora_write_opts wo = { .meta = &meta };
	struct errmsg e = { { 0 } };
	struct stat st;

	ASSERT_TRUE(dir);
	OPEN(g, ATTN);
	ASSERT_OK(open_reg(dir, 3, &reg));
	ASSERT_EQ(import(reg, g, "tale", &v1), 0);
	ASSERT_EQ(v1.version, 1);
	ASSERT_TRUE(v1.active);
	ASSERT_STREQ(v1.format, "gguf");
	ASSERT_EQ(v1.rank, 8);
	ASSERT_TRUE(v1.bytes > 0 && v1.bytes % 4096 == 0);
	registry_blob_path(reg, v1.hash, path, sizeof(path));
	ASSERT_OK(stat(path, &st));
	ASSERT_EQ((uint64_t) st.st_size, v1.bytes);

	/* The same weights as a Molly file with another name and a domain inside. */
	meta.domains = doms;
	meta.n_domains = 1;
	snprintf(molly, sizeof(molly), "%s/x.molly", dir);
	ASSERT_OK(lora_file_write(g, molly, &wo, &e));
	OPEN(f, molly);
	ASSERT_EQ(import(reg, f, "copy", &v2), 0);
	ASSERT_STREQ(v2.hash_hex, v1.hash_hex);
	ASSERT_STREQ(v2.format, "molly");
	ASSERT_EQ(v2.n_domains, 1); /* metadata goes to the record, not the blob */
	ASSERT_STREQ(v2.domains[0], "stories");

	/* A PEFT directory and a GGUF LoRA file of the same generated weights, too. */
	for (int fi = 0; fi < 2; fi++) {
		struct lora_gen_opts go = { .base = base, .rank = 4,
					    .targets = 1u << LORA_TARGET_Q | 1u << LORA_TARGET_V,
					    .seed = 7, .dtype = GGML_TYPE_F16,
					    .format = fi ? LORA_FORMAT_GGUF : LORA_FORMAT_PEFT };
		_cleanup_(lora_adapter_freep) struct lora_adapter *x = NULL;
		static char peft_hash[SHA256_HEX_SIZE];
		struct registry_version pv;

		snprintf(path, sizeof(path), "%s/gen-%d%s", dir, fi, fi ? ".gguf" : "");
		ASSERT_OK(lora_gen_write(path, &go, &e));
		OPEN(x, path);
		ASSERT_EQ(import(reg, x, fi ? "gen-gguf" : "gen-peft", &pv), 0);
		ASSERT_STREQ(pv.format, fi ? "gguf" : "peft");
		if (fi == 0)
			snprintf(peft_hash, sizeof(peft_hash), "%s", pv.hash_hex);
		else
			ASSERT_STREQ(pv.hash_hex, peft_hash);
		registry_version_done(&pv);
	}

	/* Importing the same content and metadata under the same name adds nothing. */
	ASSERT_EQ(import(reg, g, "tale", &v3), 1);
	ASSERT_EQ(v3.version, 1);
	registry_version_done(&v1);
	registry_version_done(&v2);
	registry_version_done(&v3);
	reg = registry_close(reg);
	rm_rf(dir);
	return 0;
}

struct hist {
	int n;
	uint32_t versions[8];
	uint32_t active;
};

static int hist_cb(const struct registry_version *v, void *ud)
{
	struct hist *h = ud;

	if (h->n < 8)
		h->versions[h->n] = v->version;
	h->n++;
	if (v->active)
		h->active = v->version;
	return 0;
}

TEST(versions_specs_rollback_prune_remove)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL, *b = NULL, *c = NULL;
	_cleanup_(registry_closep) struct registry *reg = NULL;
	struct registry_version v[4], got = { 0 };
	_cleanup_free_ char *dir = new_dir();
	char spec[128], path[4200], bf16[4200];
	struct lora_write_opts wo = { .dtype = GGML_TYPE_BF16 };
	struct errmsg e = { { 0 } };
	struct hist h = { 0 };
	size_t n;

	memset(v, 0, sizeof(v));
	ASSERT_TRUE(dir);
	OPEN(a, ATTN);
	OPEN(b, ALL);
	snprintf(bf16, sizeof(bf16), "%s/bf16.molly", dir);
	ASSERT_OK(lora_file_write(a, bf16, &wo, &e));
	OPEN(c, bf16); /* other stored bytes: a third content */
	ASSERT_OK(open_reg(dir, 2, &reg));
	ASSERT_EQ(import(reg, a, "x", &v[1]), 0);
	ASSERT_EQ(import(reg, b, "x", &v[2]), 0);
	ASSERT_EQ(v[2].version, 2);
	ASSERT_EQ(v[2].parent, 1);
	ASSERT_TRUE(strcmp(v[1].hash_hex, v[2].hash_hex) != 0);

	/* NAME, NAME@N, NAME@sha256:PREFIX */
	ASSERT_OK(registry_resolve(reg, "x", &got, &e));
	ASSERT_EQ(got.version, 2);
	registry_version_done(&got);
	ASSERT_OK(registry_resolve(reg, "x@1", &got, &e));
	ASSERT_STREQ(got.hash_hex, v[1].hash_hex);
	ASSERT_TRUE(!got.active);
	registry_version_done(&got);
	snprintf(spec, sizeof(spec), "x@sha256:%.8s", v[1].hash_hex);
	ASSERT_OK(registry_resolve(reg, spec, &got, &e));
	ASSERT_EQ(got.version, 1);
	registry_version_done(&got);
	snprintf(spec, sizeof(spec), "x@sha256:%.8s", v[2].hash_hex);
	spec[strlen(spec) - 1] = 0; /* 7 digits */
	ASSERT_ERR(registry_resolve(reg, spec, &got, &e), -EINVAL);
	ASSERT_ERR(registry_resolve(reg, "x@sha256:0000000000", &got, &e),
		   strncmp(v[1].hash_hex, "0000000000", 10) && strncmp(v[2].hash_hex, "0000000000", 10)
			   ? -ENOENT
			   : 0);
	ASSERT_ERR(registry_resolve(reg, "x@3", &got, &e), -ENOENT);
	ASSERT_ERR(registry_resolve(reg, "x@0", &got, &e), -EINVAL);
	ASSERT_ERR(registry_resolve(reg, "x@two", &got, &e), -EINVAL);
	ASSERT_ERR(registry_resolve(reg, "nobody", &got, &e), -ENOENT);

	/* rollback */
	ASSERT_OK(registry_rollback(reg, "x", 1, &e));
	ASSERT_OK(registry_resolve(reg, "x", &got, &e));
	ASSERT_EQ(got.version, 1);
	registry_version_done(&got);
	ASSERT_ERR(registry_rollback(reg, "x", 7, &e), -ENOENT);
	ASSERT_OK(registry_rollback(reg, "x", 2, &e));

	/* KeepVersions=2: a third version prunes version 1 (not active, not pinned) and its
	 * blob, which nothing else refers to. */
	ASSERT_EQ(import(reg, c, "x", &v[3]), 0);
	ASSERT_OK(registry_history(reg, "x", hist_cb, &h));
	ASSERT_EQ(h.n, 2);
	ASSERT_EQ(h.versions[0], 2);
	ASSERT_EQ(h.versions[1], 3);
	ASSERT_EQ(h.active, 3);
	registry_blob_path(reg, v[1].hash, path, sizeof(path));
	ASSERT_TRUE(access(path, F_OK) < 0);
	/* a pinned version survives */
	ASSERT_OK(registry_set_pinned(reg, "x", 2, true, &e));
	ASSERT_EQ(import(reg, a, "x", NULL), 0); /* version 4 */
	h = (struct hist){ 0 };
	ASSERT_OK(registry_history(reg, "x", hist_cb, &h));
	ASSERT_EQ(h.n, 2);
	ASSERT_EQ(h.versions[0], 2);
	ASSERT_EQ(h.versions[1], 4);

	/* stats */
	ASSERT_OK(registry_add_uses(reg, "x", 4, 5, 1234));
	ASSERT_OK(registry_resolve(reg, "x@4", &got, &e));
	ASSERT_EQ(got.uses, 5);
	ASSERT_EQ(got.last_use_ns, 1234);
	registry_version_done(&got);

	/* persistence: a reopen sees the same */
	reg = registry_close(reg);
	ASSERT_OK(open_reg(dir, 2, &reg));
	ASSERT_OK(registry_count(reg, &n));
	ASSERT_EQ(n, 1);
	ASSERT_OK(registry_resolve(reg, "x", &got, &e));
	ASSERT_EQ(got.version, 4);
	registry_version_done(&got);

	/* remove: every version and the blobs */
	ASSERT_OK(registry_remove(reg, "x", &e));
	ASSERT_ERR(registry_resolve(reg, "x", &got, &e), -ENOENT);
	ASSERT_ERR(registry_remove(reg, "x", &e), -ENOENT);
	registry_blob_path(reg, v[2].hash, path, sizeof(path));
	ASSERT_TRUE(access(path, F_OK) < 0);
	reg = registry_close(reg);
	ASSERT_EQ(fsck(dir, false, &n), 0);
	ASSERT_EQ(n, 0);
	for (int i = 1; i < 4; i++)
		registry_version_done(&v[i]);
	rm_rf(dir);
	return 0;
}

/* 17 contents under one name: by pigeonhole two share their first hex digit, so a 1-digit
 * prefix (the test lowers the minimum) is ambiguous for them, and the error lists both. */
TEST(ambiguous_prefix_lists_the_candidates)
{
	_cleanup_(registry_closep) struct registry *reg = NULL;
	_cleanup_free_ char *dir = new_dir();
	char hex[17][SHA256_HEX_SIZE], spec[80], src[4200];
	struct errmsg e = { { 0 } };
	struct registry_version got;
	int a = -1, b = -1;

	ASSERT_TRUE(dir);
	{
		_cleanup_(lora_adapter_freep) struct lora_adapter *first = NULL;
		OPEN(first, ATTN); /* loads the base */
	}
	ASSERT_OK(open_reg(dir, 0, &reg));
	for (int i = 0; i < 17; i++) {
		struct lora_gen_opts g = { .base = base, .rank = 2,
					   .targets = 1u << LORA_TARGET_Q, .seed = 100 + (uint64_t) i,
					   .dtype = GGML_TYPE_F16, .format = LORA_FORMAT_GGUF };
		_cleanup_(lora_adapter_freep) struct lora_adapter *x = NULL;
		struct registry_version v;

		snprintf(src, sizeof(src), "%s/src.gguf", dir);
		ASSERT_OK(lora_gen_write(src, &g, &e));
		OPEN(x, src);
		ASSERT_EQ(import(reg, x, "many", &v), 0);
		snprintf(hex[i], sizeof(hex[i]), "%s", v.hash_hex);
		registry_version_done(&v);
	}
	for (int i = 0; i < 17 && a < 0; i++)
		for (int j = i + 1; j < 17 && a < 0; j++)
			if (hex[i][0] == hex[j][0])
				a = i, b = j;
	ASSERT_TRUE(a >= 0);
	snprintf(spec, sizeof(spec), "many@sha256:%c", hex[a][0]);
	ASSERT_ERR(registry_resolve(reg, spec, &got, &e), -EINVAL); /* below the minimum */
	registry_test_set_min_prefix(reg, 1);
	ASSERT_ERR(registry_resolve(reg, spec, &got, &e), -ENOTUNIQ);
	snprintf(spec, sizeof(spec), "many@%d", a + 1);
	ASSERT_TRUE(strstr(e.text, spec) != NULL);
	snprintf(spec, sizeof(spec), "many@%d", b + 1);
	ASSERT_TRUE(strstr(e.text, spec) != NULL);
	/* the whole hash is never ambiguous */
	snprintf(spec, sizeof(spec), "many@sha256:%s", hex[a]);
	ASSERT_OK(registry_resolve(reg, spec, &got, &e));
	ASSERT_EQ(got.version, (uint32_t) a + 1);
	registry_version_done(&got);
	reg = registry_close(reg);
	rm_rf(dir);
	return 0;
}

TEST(gc_and_fsck)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
	_cleanup_(registry_closep) struct registry *reg = NULL;
	struct registry_version v = { 0 };
	_cleanup_free_ char *dir = new_dir();
	char path[4200], orphan[4200], tmp[4200];
	struct errmsg e = { { 0 } };
	uint32_t blobs;
	uint64_t bytes;
	size_t warn;
	int fd;

	ASSERT_TRUE(dir);
	OPEN(a, ATTN);
	ASSERT_OK(open_reg(dir, 3, &reg));
	ASSERT_EQ(import(reg, a, "g", &v), 0);
	/* fsck is another process's job (molly adapters fsck): LMDB must not be open twice in
	 * one process, so the registry is closed around each fsck here */
	reg = registry_close(reg);
	ASSERT_EQ(fsck(dir, false, &warn), 0);
	ASSERT_EQ(warn, 0);

	/* an orphan blob and a leftover temp file of a dead importer (pid 1 is alive, so use a
	 * pid that cannot exist) */
	snprintf(orphan, sizeof(orphan), "%s/blobs/sha256/ab/ab%062d", dir, 0);
	snprintf(path, sizeof(path), "%s/blobs/sha256/ab", dir);
	(void) mkdir(path, 0755);
	fd = open(orphan, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	ASSERT_TRUE(fd >= 0);
	ASSERT_EQ(write(fd, "orphan", 6), 6);
	close(fd);
	snprintf(tmp, sizeof(tmp), "%s/tmp/import-2147483646-0.molly", dir);
	fd = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	ASSERT_TRUE(fd >= 0);
	close(fd);
	ASSERT_EQ(fsck(dir, false, &warn), 0);
	ASSERT_EQ(warn, 2);
	ASSERT_OK(open_reg(dir, 3, &reg));
	ASSERT_OK(registry_gc(reg, &blobs, &bytes, &e));
	ASSERT_EQ(blobs, 1);
	ASSERT_EQ(bytes, 6);
	ASSERT_TRUE(access(orphan, F_OK) < 0 && access(tmp, F_OK) < 0);

	/* --repair refuses while a daemon holds the registry (checked before LMDB is opened) */
	ASSERT_OK(registry_hold(reg));
	ASSERT_ERR(registry_fsck(dir, true, count_findings, (size_t[3]){ 0 }, &warn, &e), -EBUSY);
	reg = registry_close(reg);
	ASSERT_EQ(fsck(dir, false, &warn), 0);
	ASSERT_EQ(warn, 0);

	/* a corrupt blob and a missing one are errors */
	snprintf(path, sizeof(path), "%s/blobs/sha256/%.2s/%s", dir, v.hash_hex, v.hash_hex);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	ASSERT_TRUE(fd >= 0);
	ASSERT_EQ(pwrite(fd, "X", 1, 5000), 1);
	close(fd);
	ASSERT_EQ(fsck(dir, false, &warn), 1);
	ASSERT_OK(unlink(path));
	ASSERT_EQ(fsck(dir, false, &warn), 1);
	registry_version_done(&v);
	rm_rf(dir);
	return 0;
}

TEST(full_map_is_a_clear_error)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
	_cleanup_(registry_closep) struct registry *reg = NULL;
	struct registry_params p = { .map_bytes = 64 << 10 };
	_cleanup_free_ char *dir = new_dir();
	struct errmsg e = { { 0 } };
	int r = 0;

	ASSERT_TRUE(dir);
	OPEN(a, ATTN);
	p.dir = dir;
	ASSERT_OK(registry_open(&p, &reg, &e));
	for (int i = 0; i < 2000 && r >= 0; i++) {
		char name[32];
		struct registry_import imp = { .name = name, .source = "/a/long/source/path/to/fill",
					       .importer = "test" };
		snprintf(name, sizeof(name), "n%d", i);
		r = registry_import(reg, a, &imp, NULL, &e);
	}
	ASSERT_ERR(r, -ENOSPC);
	ASSERT_TRUE(strstr(e.text, "RegistryMapBytes=") != NULL);
	reg = registry_close(reg);
	rm_rf(dir);
	return 0;
}

/* ---- crash safety ---- */

static const char *const import_steps[] = {
	"import-temp-written", "import-temp-synced", "import-renamed", "import-before-commit",
	"import-after-commit",
};
static const char *const remove_steps[] = {
	"remove-before-commit", "remove-after-commit", "remove-after-unlink",
};

/* Runs fn in a child with the crash switch at step; 0 when the child died of SIGKILL. */
static int crash_child(const char *dir, const char *step, bool remove, struct lora_adapter *a)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		struct registry *reg = NULL;
		struct errmsg e = { { 0 } };
		setenv("MOLLY_TEST", "1", 1);
		setenv("MOLLY_TEST_CRASH_AT", step, 1);
		if (open_reg(dir, 3, &reg) < 0)
			_exit(2);
		if (remove)
			(void) registry_remove(reg, "c", &e);
		else
			(void) import(reg, a, "c", NULL);
		_exit(3); /* the switch did not fire */
	}
	if (waitpid(pid, &st, 0) != pid)
		return -errno;
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : -ECHILD;
}

TEST(crash_at_every_step_leaves_old_or_new)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL, *b = NULL;
	struct errmsg e = { { 0 } };

	OPEN(a, ATTN);
	OPEN(b, ALL);
	for (size_t i = 0; i < ELEMENTSOF(import_steps) + ELEMENTSOF(remove_steps); i++) {
		bool remove = i >= ELEMENTSOF(import_steps);
		const char *step = remove ? remove_steps[i - ELEMENTSOF(import_steps)]
					  : import_steps[i];
		_cleanup_free_ char *dir = new_dir();
		struct registry *reg = NULL;
		struct registry_version old = { 0 }, now = { 0 };
		char path[4200];
		size_t warn;
		int r;

		ASSERT_TRUE(dir);
		/* the old state: c@1 */
		ASSERT_OK(open_reg(dir, 3, &reg));
		ASSERT_EQ(import(reg, a, "c", &old), 0);
		reg = registry_close(reg);

		/* the crash: importing c@2 (other content), or removing c */
		if (crash_child(dir, step, remove, b) < 0)
			TEST_FAIL_("%s: the child was not killed by the crash switch", step);

		/* the restart */
		ASSERT_OK(open_reg(dir, 3, &reg));
		r = registry_resolve(reg, "c", &now, &e);
		if (remove) {
			/* old (c@1 with its blob) or new (no c) */
			if (r == 0 && strcmp(now.hash_hex, old.hash_hex) != 0)
				TEST_FAIL_("%s: c changed content", step);
			if (r < 0 && r != -ENOENT)
				TEST_FAIL_("%s: resolve: %d", step, r);
		} else {
			ASSERT_OK(r);
			if (now.version != 1 && now.version != 2)
				TEST_FAIL_("%s: version %u", step, now.version);
			if (now.version == 1 && strcmp(now.hash_hex, old.hash_hex) != 0)
				TEST_FAIL_("%s: c@1 changed", step);
		}
		if (r == 0) {
			registry_blob_path(reg, now.hash, path, sizeof(path));
			if (access(path, R_OK) < 0)
				TEST_FAIL_("%s: a record without its blob", step);
		}
		/* never an error; warnings (orphans, temp files) gone after --repair */
		reg = registry_close(reg);
		if (fsck(dir, false, &warn) != 0)
			TEST_FAIL_("%s: fsck finds errors", step);
		ASSERT_EQ(fsck(dir, true, &warn), 0);
		ASSERT_EQ(fsck(dir, false, &warn), 0);
		if (warn != 0)
			TEST_FAIL_("%s: %zu warnings after --repair", step, warn);
		registry_version_done(&old);
		registry_version_done(&now);
		rm_rf(dir);
	}
	return 0;
}

TEST(crash_switch_needs_molly_test)
{
	/* Without MOLLY_TEST=1 the switch is ignored: this process survives. */
	unsetenv("MOLLY_TEST");
	setenv("MOLLY_TEST_CRASH_AT", "import-renamed", 1);
	registry_crash_point("import-renamed");
	unsetenv("MOLLY_TEST_CRASH_AT");
	return 0;
}
