/* SPDX-License-Identifier: MIT */
/* mollyd's configuration: syntax, every key's values, errors naming file:line, drop-ins,
 * members and keys, and that the shipped example and docs/config.md cover every key. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/sha256.h"
#include "core/config.h"
#include "loader/blob-load.h"
#include "lora/resident.h"
#include "sched/evict.h"
#include "test.h"

static struct config *parse(const char *text, struct errmsg *e, int *ret)
{
	struct config *c = NULL;

	if (config_new(&c) < 0)
		return NULL;
	*ret = config_parse_text(c, text, strlen(text), "test.conf", e);
	if (*ret >= 0)
		*ret = config_verify(c, e);
	return c;
}

/* Parses text and expects an error whose message contains want. */
static int expect_error(const char *text, const char *want)
{
	struct errmsg e = { { 0 } };
	int r = 0;
	struct config *c = parse(text, &e, &r);

	config_unref(c);
	if (r >= 0) {
		fprintf(stderr, "  accepted: %s\n", text);
		return 1;
	}
	if (!strstr(e.text, want)) {
		fprintf(stderr, "  for: %s\n  expected \"%s\" in \"%s\"\n", text, want, e.text);
		return 1;
	}
	return 0;
}

TEST(defaults)
{
	_cleanup_(config_unrefp) struct config *c = NULL;

	ASSERT_OK(config_new(&c));
	ASSERT_EQ(c->max_sequences, 8);
	ASSERT_EQ(c->queue_length, 64);
	ASSERT_EQ(c->max_body_bytes, 1 << 20);
	ASSERT_EQ(c->bus, CONFIG_BUS_SYSTEM);
	ASSERT_EQ(c->listen.kind, CONFIG_LISTEN_TCP);
	ASSERT_STREQ(c->listen.host, "127.0.0.1");
	ASSERT_EQ(c->listen.port, 8411);
	ASSERT_TRUE(c->listen.loopback);
	ASSERT_EQ(c->stop_timeout_ns, 30000000000ull);
	ASSERT_TRUE(c->model_path == NULL);
	return 0;
}

TEST(every_key)
{
	static const char text[] =
		"# comment\n"
		"; another comment\n"
		"[Model]\n"
		"Path = /models/m.gguf\n"
		"Name=tiny\n"
		"Threads=4\n"
		"ChatTemplate=llama3\n"
		"\n"
		"[Engine]\n"
		"PoolBytes=512M\n"
		"MaxSequences=16\n"
		"QueueLength=100\n"
		"ContextLength=2048\n"
		"StepTokens=128\n"
		"[Adapters]\n"
		"Directory=/var/lib/x/adapters\n"
		"Load=a b\n"
		"Load=c\n"
		"[HTTP]\n"
		"Listen=unix:/run/molly/http.sock\n"
		"MaxBodyBytes=64K\n"
		"AllowNonLoopback=no\n"
		"[DBus]\n"
		"Bus=session\n"
		"StreamBufferBytes=1M\n"
		"[Paths]\n"
		"StateDirectory=/var/lib/x\n"
		"RuntimeDirectory=/run/x\n"
		"[Daemon]\n"
		"User=molly\n"
		"AdminGroup=wheel\n"
		"StopTimeoutSec=1.5min\n"
		"LogLevel=debug\n"
		"[Member alice]\n"
		"KeyHash=sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\n"
		"UIDs=1000 0\n"
		"Models=tiny tiny:legal *\n"
		"Admin=yes\n";
	struct errmsg e = { { 0 } };
	int r = 0;
	_cleanup_(config_unrefp) struct config *c = parse(text, &e, &r);

	if (r < 0)
		TEST_FAIL_("parse: %s", e.text);
	ASSERT_STREQ(c->model_path, "/models/m.gguf");
	ASSERT_STREQ(c->model_name, "tiny");
	ASSERT_EQ(c->threads, 4);
	ASSERT_STREQ(c->chat_template, "llama3");
	ASSERT_EQ(c->pool_bytes, 512ull << 20);
	ASSERT_EQ(c->max_sequences, 16);
	ASSERT_EQ(c->queue_length, 100);
	ASSERT_EQ(c->context_length, 2048);
	ASSERT_EQ(c->step_tokens, 128);
	ASSERT_STREQ(c->adapter_directory, "/var/lib/x/adapters");
	ASSERT_EQ(c->n_adapter_load, 3); /* lists append */
	ASSERT_STREQ(c->adapter_load[2], "c");
	ASSERT_EQ(c->listen.kind, CONFIG_LISTEN_UNIX);
	ASSERT_STREQ(c->listen.path, "/run/molly/http.sock");
	ASSERT_EQ(c->max_body_bytes, 64 << 10);
	ASSERT_EQ(c->bus, CONFIG_BUS_SESSION);
	ASSERT_EQ(c->stream_buffer_bytes, 1 << 20);
	ASSERT_STREQ(c->state_directory, "/var/lib/x");
	ASSERT_STREQ(c->runtime_directory, "/run/x");
	ASSERT_STREQ(c->user, "molly");
	ASSERT_STREQ(c->admin_group, "wheel");
	ASSERT_EQ(c->stop_timeout_ns, 90000000000ull);
	ASSERT_EQ(c->log_level, 7);
	ASSERT_EQ(c->n_members, 1);
	ASSERT_STREQ(c->members[0].name, "alice");
	ASSERT_TRUE(c->members[0].has_key_hash);
	ASSERT_EQ(c->members[0].n_uids, 2);
	ASSERT_EQ(c->members[0].uids[0], 1000);
	ASSERT_EQ(c->members[0].n_models, 3);
	ASSERT_TRUE(c->members[0].admin);
	ASSERT_EQ(c->members[0].line, 34);
	return 0;
}

TEST(syntax)
{
	struct errmsg e = { { 0 } };
	int r = 0;
	_cleanup_(config_unrefp) struct config *c = parse(
		"  [Model]  \r\n"
		"Path=\"/models/with space.gguf\"\n"
		"Name = a\\\n"
		"\n"
		"[Adapters]\n"
		"Load=x y \\\n"
		"  z\n"
		"Load=\n"
		"Load=w\n"
		"[Member \"bob\"]\n"
		"UIDs=root\n",
		&e, &r);

	if (r < 0)
		TEST_FAIL_("parse: %s", e.text);
	ASSERT_STREQ(c->model_path, "/models/with space.gguf");
	/* "a\" continued by an empty line: the backslash became a space, trimmed away */
	ASSERT_STREQ(c->model_name, "a");
	/* an empty assignment resets a list */
	ASSERT_EQ(c->n_adapter_load, 1);
	ASSERT_STREQ(c->adapter_load[0], "w");
	ASSERT_STREQ(c->members[0].name, "bob");
	ASSERT_EQ(c->members[0].uids[0], 0);
	return 0;
}

TEST(errors_name_file_and_line)
{
	int fails = 0;

	fails += expect_error("[Model]\nPath=/a\nBogus=1\n",
			      "test.conf:3: unknown key 'Bogus' in [Model]");
	fails += expect_error("[Modle]\n", "test.conf:1: unknown section [Modle]");
	fails += expect_error("Path=/a\n", "test.conf:1: 'Path=' is outside any section");
	fails += expect_error("[Model]\nno equals sign\n", "test.conf:2: expected Key=Value");
	fails += expect_error("[Model\n", "test.conf:1: malformed section header");
	fails += expect_error("[Model]\n=x\n", "missing key");
	fails +=
		expect_error("[Model]\nPath=relative.gguf\n",
			     "test.conf:2: [Model] Path=: 'relative.gguf' is not an absolute path");
	fails += expect_error("[Model]\nThreads=-1\n", "[Model] Threads=");
	fails += expect_error("[Model]\nThreads=many\n", "is not a thread count");
	fails += expect_error("[Model]\nChatTemplate=jinja\n", "is not a template family");
	fails += expect_error("[Model]\nName=a:b\n", "is not a model id");
	fails += expect_error("[Engine]\nMaxSequences=0\n", "not a whole number in [1, 1024]");
	fails += expect_error("[Engine]\nQueueLength=1e3\n", "QueueLength=: '1e3'");
	fails += expect_error("[Engine]\nQueueLength=99999999999999999999999\n", "QueueLength=");
	fails += expect_error("[Engine]\nPoolBytes=12X\n", "is not a size");
	fails += expect_error("[Engine]\nPoolBytes=99999999999T\n", "too large");
	fails += expect_error("[HTTP]\nListen=8080\n", "expected ADDRESS:PORT");
	fails += expect_error("[HTTP]\nListen=127.0.0.1:70000\n", "is not a port number");
	fails += expect_error("[HTTP]\nListen=example.com:80\n", "is not a numeric IPv4 address");
	fails += expect_error("[HTTP]\nListen=[::1:80\n", "expected [IPv6]:PORT");
	fails += expect_error("[HTTP]\nListen=unix:relative\n", "absolute path");
	fails += expect_error("[HTTP]\nAllowNonLoopback=maybe\n", "is not a boolean");
	fails += expect_error("[HTTP]\nListen=0.0.0.0:8411\n", "AllowNonLoopback=yes");
	fails += expect_error("[HTTP]\nListen=[::]:8411\n", "is not a loopback address");
	fails += expect_error("[HTTP]\nListen=192.168.1.5:80\n", "is not a loopback address");
	fails += expect_error("[DBus]\nBus=user\n", "is not one of system, session, none");
	fails += expect_error("[DBus]\nStreamBufferBytes=100\n", "outside [4K, 1G]");
	fails += expect_error("[Daemon]\nStopTimeoutSec=soon\n", "is not a time span");
	fails += expect_error("[Daemon]\nLogLevel=loud\n", "is not a level");
	fails += expect_error("[Daemon]\nUser=bad user\n", "is not a user or group name");
	fails += expect_error("[Member]\nAdmin=yes\n", "[Member] needs a name");
	fails += expect_error("[Model x]\n", "[Model] takes no name");
	fails += expect_error("[Member a/b]\nUIDs=0\n", "a member name is");
	fails += expect_error("[Member a]\nKeyHash=md5:00\n", "expected sha256:<64 hex digits>");
	fails += expect_error("[Member a]\nKeyHash=sha256:xyz\n", "molly key new");
	fails +=
		expect_error("[Member a]\nUIDs=no-such-user-here\n", "no user 'no-such-user-here'");
	fails += expect_error("[Member a]\nModels=a:b:c\n", "is not a model name");
	fails += expect_error("[Member a]\nAdmin=yes\n", "has neither KeyHash= nor UIDs=");
	fails += expect_error("[Member "
			      "a]\nKeyHash=sha256:"
			      "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\n"
			      "[Member "
			      "b]\nKeyHash=sha256:"
			      "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\n",
			      "same KeyHash= as [Member a]");
	fails += expect_error("[Policy]\nJudge=sometimes\n", "is not a boolean");
	fails += expect_error("[Policy]\nJudgeBand=0.7,0.3\n", "'0.7,0.3' is not LOW,HIGH");
	fails += expect_error("[Policy]\nJudgeBand=0.5\n", "is not LOW,HIGH");
	fails += expect_error("[Policy]\nJudgeBand=0.2,1.5\n", "is not LOW,HIGH");
	fails += expect_error("[Policy]\nJudgeBand=0.2,0.4x\n", "is not LOW,HIGH");
	fails += expect_error("[Policy]\nJudgeTimeoutMs=0\n", "not a whole number in [1, 60000]");
	ASSERT_EQ(fails, 0);
	return 0;
}

/* [Policy] Judge=: off by default; the band and the budget. */
TEST(policy_judge_keys)
{
	_cleanup_(config_unrefp) struct config *c = NULL, *d = NULL;
	static const char text[] =
		"[Policy]\nJudge=yes\nJudgeBand= 0.25 , 0.8\nJudgeTimeoutMs=500\n";
	struct errmsg e = { { 0 } };

	ASSERT_OK(config_new(&d));
	ASSERT_TRUE(!d->policy_judge);
	ASSERT_TRUE(d->policy_judge_band[0] == 0.3f && d->policy_judge_band[1] == 0.7f);
	ASSERT_EQ(d->policy_judge_timeout_ms, 2000);
	ASSERT_OK(config_new(&c));
	ASSERT_OK(config_parse_text(c, text, strlen(text), "test.conf", &e));
	ASSERT_TRUE(c->policy_judge);
	ASSERT_TRUE(c->policy_judge_band[0] == 0.25f && c->policy_judge_band[1] == 0.8f);
	ASSERT_EQ(c->policy_judge_timeout_ms, 500);
	return 0;
}

TEST(adapter_tier_keys)
{
	_cleanup_(config_unrefp) struct config *c = NULL, *d = NULL;
	static const char text[] = "[Adapters]\nWarmBytes=512M\nHotBytes=64M\nEviction=lru\n"
				   "LoadPath=pread\nLoadQueueDepth=32\nHotType=q8_0\n";
	struct errmsg e = { { 0 } };

	ASSERT_OK(config_new(&d));
	ASSERT_EQ(d->warm_bytes, 2ull << 30);
	ASSERT_EQ(d->hot_bytes, 0);
	ASSERT_EQ(d->eviction, EVICT_GDSF);
	ASSERT_EQ(d->load_path, BLOB_PATH_URING);
	ASSERT_EQ(d->load_queue_depth, 8);
	ASSERT_EQ(d->hot_type, LORA_HOT_STORED);
	ASSERT_OK(config_new(&c));
	ASSERT_OK(config_parse_text(c, text, strlen(text), "test.conf", &e));
	ASSERT_EQ(c->warm_bytes, 512ull << 20);
	ASSERT_EQ(c->hot_bytes, 64ull << 20);
	ASSERT_EQ(c->eviction, EVICT_LRU);
	ASSERT_EQ(c->load_path, BLOB_PATH_PREAD);
	ASSERT_EQ(c->load_queue_depth, 32);
	ASSERT_EQ(c->hot_type, LORA_HOT_Q8_0);
	ASSERT_OK(expect_error("[Adapters]\nHotType=q4_0\n", "not one of stored, q8_0"));
	ASSERT_OK(expect_error("[Adapters]\nEviction=lfu\n", "not one of gdsf, lru"));
	ASSERT_OK(expect_error("[Adapters]\nLoadPath=mmap\n", "not one of uring, pread"));
	ASSERT_OK(expect_error("[Adapters]\nLoadQueueDepth=0\n", "LoadQueueDepth"));
	return 0;
}

TEST(nul_and_size_limits)
{
	_cleanup_(config_unrefp) struct config *c = NULL;
	struct errmsg e = { { 0 } };
	static const char with_nul[] = "[Model]\nPath=/a\0b\n";
	char *big;

	ASSERT_OK(config_new(&c));
	ASSERT_ERR(config_parse_text(c, with_nul, sizeof(with_nul) - 1, "n.conf", &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "NUL") != NULL);
	big = calloc(1, (2u << 20) + 1);
	ASSERT_TRUE(big != NULL);
	memset(big, '#', 2u << 20);
	ASSERT_ERR(config_parse_text(c, big, 2u << 20, "big.conf", &e), -EFBIG);
	free(big);
	return 0;
}

TEST(listen_forms)
{
	static const struct {
		const char *value;
		enum config_listen_kind kind;
		const char *host;
		unsigned port;
		bool loopback;
	} cases[] = {
		{ "127.0.0.1:8080", CONFIG_LISTEN_TCP, "127.0.0.1", 8080, true },
		{ "127.1.2.3:1", CONFIG_LISTEN_TCP, "127.1.2.3", 1, true },
		{ "localhost:0", CONFIG_LISTEN_TCP, "127.0.0.1", 0, true },
		{ "[::1]:8411", CONFIG_LISTEN_TCP, "::1", 8411, true },
		{ "", CONFIG_LISTEN_NONE, NULL, 0, false },
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		char text[128];
		struct errmsg e = { { 0 } };
		int r = 0;
		struct config *c;

		snprintf(text, sizeof(text), "[HTTP]\nListen=%s\n", cases[i].value);
		c = parse(text, &e, &r);
		if (r < 0) {
			config_unref(c);
			TEST_FAIL_("%s: %s", cases[i].value, e.text);
		}
		ASSERT_EQ(c->listen.kind, cases[i].kind);
		if (cases[i].host)
			ASSERT_STREQ(c->listen.host, cases[i].host);
		ASSERT_EQ(c->listen.port, cases[i].port);
		ASSERT_EQ(c->listen.loopback, cases[i].loopback);
		config_unref(c);
	}
	/* A public address is fine once allowed. */
	{
		struct errmsg e = { { 0 } };
		int r = 0;
		struct config *c =
			parse("[HTTP]\nListen=0.0.0.0:80\nAllowNonLoopback=yes\n", &e, &r);
		config_unref(c);
		ASSERT_OK(r);
	}
	return 0;
}

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");

	if (!f)
		return -errno;
	fputs(text, f);
	return fclose(f) == 0 ? 0 : -errno;
}

TEST(files_and_dropins)
{
	char dir[] = "/tmp/test-config.XXXXXX", path[256], dropins[256], p[300];
	_cleanup_(config_unrefp) struct config *c = NULL;
	struct errmsg e = { { 0 } };

	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/mollyd.conf", dir);
	snprintf(dropins, sizeof(dropins), "%s/mollyd.conf.d", dir);
	ASSERT_OK(write_file(path, "[Model]\nPath=/m/a.gguf\n[Engine]\nMaxSequences=2\n"
				   "[Adapters]\nLoad=x\n[Paths]\nStateDirectory=/s\n"));
	ASSERT_OK(mkdir(dropins, 0755) < 0 ? -errno : 0);
	snprintf(p, sizeof(p), "%s/20-b.conf", dropins);
	ASSERT_OK(write_file(p, "[Engine]\nMaxSequences=4\n[Adapters]\nLoad=z\n"));
	snprintf(p, sizeof(p), "%s/10-a.conf", dropins);
	ASSERT_OK(write_file(p, "[Engine]\nMaxSequences=3\nQueueLength=5\n[Adapters]\nLoad=y\n"));
	snprintf(p, sizeof(p), "%s/30-ignored.conf.disabled", dropins);
	ASSERT_OK(write_file(p, "garbage\n"));

	ASSERT_OK(config_load(path, &c, &e));
	ASSERT_EQ(c->n_files, 3);
	ASSERT_TRUE(strstr(c->files[1], "10-a.conf") != NULL); /* lexical order */
	ASSERT_EQ(c->max_sequences, 4);                        /* later wins */
	ASSERT_EQ(c->queue_length, 5);
	ASSERT_EQ(c->n_adapter_load, 3);
	ASSERT_STREQ(c->adapter_load[2], "z");
	ASSERT_STREQ(c->adapter_directory, "/s/adapters"); /* derived default */
	c = config_unref(c);

	/* An error in a drop-in names the drop-in and its line. */
	snprintf(p, sizeof(p), "%s/40-bad.conf", dropins);
	ASSERT_OK(write_file(p, "\n\n[Engine]\nQueueLength=-1\n"));
	ASSERT_ERR(config_load(path, &c, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "40-bad.conf:4: [Engine] QueueLength=") != NULL);
	unlink(p);

	/* A named file must exist; the default one may be missing. */
	snprintf(p, sizeof(p), "%s/missing.conf", dir);
	ASSERT_ERR(config_load(p, &c, &e), -ENOENT);
	ASSERT_TRUE(strstr(e.text, "missing.conf") != NULL);

	snprintf(p, sizeof(p), "rm -rf '%s'", dir);
	ASSERT_EQ(system(p), 0);
	return 0;
}

TEST(members_and_keys)
{
	static const char text[] =
		"[Member alice]\n"
		"KeyHash=sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\n"
		"Models=legal tiny:medical\n"
		"[Member ops]\n"
		"UIDs=4242\n"
		"Models=*\n"
		"Admin=yes\n";
	struct errmsg e = { { 0 } };
	char hs[72];
	int r = 0;
	_cleanup_(config_unrefp) struct config *c = parse(text, &e, &r);
	const struct config_member *a, *o;

	if (r < 0)
		TEST_FAIL_("parse: %s", e.text);
	/* sha256("hello") is the KeyHash above. */
	a = config_find_member_by_key(c, "hello");
	ASSERT_TRUE(a && strcmp(a->name, "alice") == 0);
	ASSERT_TRUE(config_find_member_by_key(c, "hellO") == NULL);
	ASSERT_TRUE(config_find_member_by_key(c, "") == NULL);
	o = config_find_member_by_uid(c, 4242);
	ASSERT_TRUE(o && strcmp(o->name, "ops") == 0 && o->admin);
	ASSERT_TRUE(config_find_member_by_uid(c, 4243) == NULL);
	ASSERT_TRUE(config_find_member(c, "alice") == a);

	/* Models=legal tiny:medical, base "tiny" */
	ASSERT_TRUE(config_member_may_use(a, "tiny", "legal"));
	ASSERT_TRUE(config_member_may_use(a, "tiny", "tiny:legal"));
	ASSERT_TRUE(config_member_may_use(a, "tiny", "medical"));
	ASSERT_TRUE(config_member_may_use(a, "tiny", "tiny:medical"));
	ASSERT_TRUE(!config_member_may_use(a, "tiny", "tiny"));
	ASSERT_TRUE(!config_member_may_use(a, "tiny", NULL));
	ASSERT_TRUE(!config_member_may_use(a, "tiny", "finance"));
	ASSERT_TRUE(!config_member_may_use(a, "tiny", "other:medical"));
	ASSERT_TRUE(config_member_may_use(o, "tiny", "anything"));
	ASSERT_TRUE(!config_member_may_use(NULL, "tiny", "tiny"));

	config_key_hash_string("hello", hs);
	ASSERT_STREQ(hs, "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
	return 0;
}

TEST(model_name_default)
{
	struct errmsg e = { { 0 } };
	int r = 0;
	_cleanup_(config_unrefp) struct config *c =
		parse("[Model]\nPath=/x/y/stories260K.gguf\n", &e, &r);
	_cleanup_free_ char *n = NULL;

	ASSERT_OK(r);
	n = config_model_name(c);
	ASSERT_STREQ(n, "stories260K");
	return 0;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t cap = 0, n;

	if (!f)
		return NULL;
	buf = malloc(1 << 20);
	if (buf) {
		n = fread(buf, 1, (1 << 20) - 1, f);
		buf[n] = 0;
	}
	(void) cap;
	fclose(f);
	return buf;
}

/* The example parses, and every key it sets (or shows commented out) is in docs/config.md. */
TEST(example_and_docs_cover_every_key)
{
	_cleanup_free_ char *example = slurp(MOLLY_SOURCE_DIR "/packaging/mollyd.conf.example");
	_cleanup_free_ char *docs = slurp(MOLLY_SOURCE_DIR "/docs/config.md");
	_cleanup_(config_unrefp) struct config *c = NULL;
	struct errmsg e = { { 0 } };
	static const char *const keys[] = {
		"Path=", "Name=", "Threads=", "ChatTemplate=", "PoolBytes=", "MaxSequences=",
		"QueueLength=", "ContextLength=", "StepTokens=", "Directory=", "Load=", "Listen=",
		"AllowNonLoopback=", "MaxBodyBytes=", "Bus=", "StreamBufferBytes=",
		"StateDirectory=", "RuntimeDirectory=", "User=", "AdminGroup=", "StopTimeoutSec=",
		"LogLevel=", "KeyHash=", "UIDs=", "Models=", "Admin=", "Judge=", "JudgeBand=",
		"JudgeTimeoutMs=", "KeepVersions=", "RegistryMapBytes=", "WarmBytes=", "HotBytes=",
		"Eviction=", "HotType=", "LoadPath=", "LoadQueueDepth=",
	};

	ASSERT_TRUE(example != NULL);
	ASSERT_TRUE(docs != NULL);
	ASSERT_OK(config_new(&c));
	if (config_parse_text(c, example, strlen(example), "mollyd.conf.example", &e) < 0)
		TEST_FAIL_("the example does not parse: %s", e.text);
	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		if (!strstr(example, keys[i]))
			TEST_FAIL_("the example lacks %s", keys[i]);
		if (!strstr(docs, keys[i]))
			TEST_FAIL_("docs/config.md lacks %s", keys[i]);
	}
	return 0;
}
