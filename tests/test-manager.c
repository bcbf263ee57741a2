/* SPDX-License-Identifier: MIT */
/* The request pipeline (daemon/manager.c) on the real scheduler and stories260K: greedy text,
 * stop strings (held-back prefixes, matches across tokens), logprobs, every typed error, queue
 * full, cancel, drain, chat, member scopes, adapters (import, load, unload). */
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "manager.h"
#include "manager-judge.h"
#include "registry/registry.h"
#include "test.h"

#define MODEL MOLLY_SHARED_DIR "/models/stories260K.gguf"
#define LORA MOLLY_SHARED_DIR "/models/stories260K-lora-all-r8.gguf"
/* stories260K's greedy continuation of "Once upon a time" (30 tokens) */
#define GREEDY                                                                                     \
	", there was a little girl named Lily. She loved to play outside in the park. One day,"

struct collect {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char text[8192];
	size_t n_text;
	size_t n_chunks;
	size_t n_tokens;        /* logprob tokens */
	char token_text[8192];  /* their texts joined */
	bool bad_logprob;
	bool done;
	enum manager_event_type final;
	char finish[16];
	char model[80];
	uint32_t prompt_tokens, completion_tokens;
	enum manager_err err_kind;
	char message[512];
	struct manager *m;
	uint64_t cancel_id;     /* cancel after the first chunk, when set */
	bool cancel_after_first;
};

static void collect_init(struct collect *c)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
}

static void on_event(const struct manager_event *ev, void *userdata)
{
	struct collect *c = userdata;
	bool cancel = false;

	pthread_mutex_lock(&c->lock);
	switch (ev->type) {
	case MANAGER_EVENT_TEXT:
		if (c->n_text + ev->text_len < sizeof(c->text)) {
			memcpy(c->text + c->n_text, ev->text, ev->text_len);
			c->n_text += ev->text_len;
			c->text[c->n_text] = 0;
		}
		for (size_t i = 0; i < ev->n_tokens; i++) {
			size_t l = strlen(c->token_text);
			if (l + ev->tokens[i].text_len < sizeof(c->token_text))
				memcpy(c->token_text + l, ev->tokens[i].text,
				       ev->tokens[i].text_len);
			if (!(ev->tokens[i].logprob <= 0.0f))
				c->bad_logprob = true;
			c->n_tokens++;
		}
		if (ev->text_len == 0)
			c->bad_logprob = true; /* chunks are never empty */
		c->n_chunks++;
		cancel = c->cancel_after_first && c->n_chunks == 1;
		break;
	case MANAGER_EVENT_DONE:
		snprintf(c->finish, sizeof(c->finish), "%s", ev->finish_reason);
		snprintf(c->model, sizeof(c->model), "%s", ev->model ? ev->model : "");
		c->prompt_tokens = ev->prompt_tokens;
		c->completion_tokens = ev->completion_tokens;
		c->final = ev->type;
		c->done = true;
		break;
	case MANAGER_EVENT_ERROR:
		c->err_kind = ev->error->kind;
		snprintf(c->message, sizeof(c->message), "%s", ev->error->message);
		c->final = ev->type;
		c->done = true;
		break;
	}
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	/* Allowed from the callback (see manager.h). */
	if (cancel)
		(void) manager_cancel(c->m, c->cancel_id);
}

static int collect_wait(struct collect *c)
{
	struct timespec ts;
	int r = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t) (test_wait_deadline_() - test_now_s_()); /* a hang, not a speed bound */
	pthread_mutex_lock(&c->lock);
	while (!c->done && r == 0)
		r = pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	pthread_mutex_unlock(&c->lock);
	return c->done ? 0 : -ETIMEDOUT;
}

static int new_manager(const char *extra, struct manager **ret)
{
	_cleanup_(config_unrefp) struct config *c = NULL;
	char text[2048];
	struct errmsg e = { { 0 } };
	int r;

	if (access(MODEL, R_OK) < 0)
		return TEST_SKIP;
	snprintf(text, sizeof(text), "[Model]\nPath=%s\nThreads=2\n%s", MODEL, extra ? extra : "");
	r = config_new(&c);
	if (r >= 0)
		r = config_parse_text(c, text, strlen(text), "test.conf", &e);
	if (r >= 0)
		r = manager_new(c, ret, &e);
	if (r < 0) {
		fprintf(stderr, "  manager: %s\n", e.text);
		return r;
	}
	return 0;
}

/* Submits and waits; returns the submit result. */
static int run(struct manager *m, const struct manager_request *req,
	       const struct manager_caller *caller, struct collect *c, struct manager_error *err)
{
	uint64_t id;
	int r;

	c->m = m;
	r = manager_submit(m, req, caller, on_event, c, &id, err);
	if (r < 0)
		return r;
	return collect_wait(c);
}

#define NEW_MANAGER(m, extra)                                                                      \
	do {                                                                                       \
		int nm_ = new_manager((extra), &(m));                                              \
		if (nm_ == TEST_SKIP)                                                              \
			return TEST_SKIP;                                                          \
		ASSERT_OK(nm_);                                                                    \
		ASSERT_OK(manager_start(m));                                                       \
	} while (0)

TEST(greedy)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	struct manager_request r;
	struct collect c;

	NEW_MANAGER(m, NULL);
	manager_request_init(&r);
	r.prompt = "Once upon a time";
	r.max_tokens = 30;
	r.temperature = 0;
	collect_init(&c);
	ASSERT_OK(run(m, &r, NULL, &c, NULL));
	ASSERT_STREQ(c.text, GREEDY);
	ASSERT_STREQ(c.finish, "length");
	ASSERT_STREQ(c.model, "stories260K");
	ASSERT_EQ(c.completion_tokens, 30);
	ASSERT_EQ(c.prompt_tokens, 5); /* BOS + 4 */
	ASSERT_STREQ(manager_model_name(m), "stories260K");
	ASSERT_EQ(manager_context_length(m), 512);
	return 0;
}

static int run_stop(struct manager *m, const char *const *stop, size_t n, const char *want,
		    const char *finish)
{
	struct manager_request r;
	struct collect c;

	manager_request_init(&r);
	r.prompt = "Once upon a time";
	r.max_tokens = 30;
	r.temperature = 0;
	r.stop = stop;
	r.n_stop = n;
	r.logprobs = true;
	collect_init(&c);
	ASSERT_OK(run(m, &r, NULL, &c, NULL));
	ASSERT_STREQ(c.text, want);
	ASSERT_STREQ(c.finish, finish);
	ASSERT_TRUE(!c.bad_logprob);
	return 0;
}

TEST(stop_strings)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	const char *lily[] = { "Lily" };
	const char *across[] = { "girl na" };        /* spans two tokens */
	const char *two[] = { "zzz", "She loved" }; /* the second matches */
	const char *earliest[] = { "park", "little" }; /* the earlier match wins */
	const char *near[] = { " parkour" };         /* a prefix matches, then not: all text out */
	const char *first[] = { ", there" };          /* at the very start */

	NEW_MANAGER(m, NULL);
	ASSERT_OK(run_stop(m, lily, 1, ", there was a little girl named ", "stop"));
	ASSERT_OK(run_stop(m, across, 1, ", there was a little ", "stop"));
	ASSERT_OK(run_stop(m, two, 2, ", there was a little girl named Lily. ", "stop"));
	ASSERT_OK(run_stop(m, earliest, 2, ", there was a ", "stop"));
	ASSERT_OK(run_stop(m, near, 1, GREEDY, "length"));
	{
		/* "stop" with nothing before it: no text at all. */
		struct manager_request r;
		struct collect c;

		manager_request_init(&r);
		r.prompt = "Once upon a time";
		r.max_tokens = 30;
		r.temperature = 0;
		r.stop = first;
		r.n_stop = 1;
		collect_init(&c);
		ASSERT_OK(run(m, &r, NULL, &c, NULL));
		ASSERT_EQ(c.n_text, 0);
		ASSERT_EQ(c.n_chunks, 0);
		ASSERT_STREQ(c.finish, "stop");
		ASSERT_TRUE(c.completion_tokens >= 1 && c.completion_tokens <= 2);
	}
	return 0;
}

TEST(logprobs)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	struct manager_request r;
	struct collect c;

	NEW_MANAGER(m, NULL);
	manager_request_init(&r);
	r.prompt = "Once upon a time";
	r.max_tokens = 12;
	r.temperature = 0;
	r.logprobs = true;
	collect_init(&c);
	ASSERT_OK(run(m, &r, NULL, &c, NULL));
	ASSERT_EQ(c.n_tokens, 12);
	ASSERT_STREQ(c.token_text, c.text);
	ASSERT_TRUE(!c.bad_logprob);
	return 0;
}

static int expect_reject(struct manager *m, const struct manager_request *r,
			 const struct manager_caller *caller, enum manager_err kind,
			 const char *msg)
{
	struct manager_error err;
	struct collect c;
	uint64_t id;
	int k;

	collect_init(&c);
	k = manager_submit(m, r, caller, on_event, &c, &id, &err);
	if (k >= 0) {
		collect_wait(&c);
		TEST_FAIL_("accepted a request that should fail with %s", manager_err_name(kind));
	}
	if (err.kind != kind)
		TEST_FAIL_("expected %s, got %s: %s", manager_err_name(kind),
			   manager_err_name(err.kind), err.message);
	if (msg && !strstr(err.message, msg))
		TEST_FAIL_("expected '%s' in '%s'", msg, err.message);
	if (c.done || c.n_chunks)
		TEST_FAIL_("a rejected request got events");
	return 0;
}

TEST(errors)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	struct manager_request r;
	struct chat_message msgs[1] = { { .role = "user", .content = "hi" } };
	struct manager_lora loras[9];
	const char *empty_stop[] = { "" };
	char *long_prompt;

	NEW_MANAGER(m, NULL);

	manager_request_init(&r);
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "prompt or messages"));
	r.prompt = "x";
	r.messages = msgs;
	r.n_messages = 1;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "not both"));

	manager_request_init(&r);
	r.prompt = "Once";
	r.model = "no-such";
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_MODEL_NOT_FOUND,
				"`no-such` does not exist"));
	r.model = "other:adapter";
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_MODEL_NOT_FOUND,
				"base model is `stories260K`"));
	r.model = "stories260K:";
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_MODEL_NOT_FOUND, NULL));
	r.model = "stories260K:ghost";
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_MODEL_NOT_FOUND, "no adapter `ghost`"));
	r.model = NULL;
	loras[0] = (struct manager_lora){ "ghost", 1.0f };
	r.loras = loras;
	r.n_loras = 1;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_MODEL_NOT_FOUND, "ghost"));
	for (int i = 0; i < 9; i++)
		loras[i] = (struct manager_lora){ "x", 1.0f };
	r.n_loras = 9;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "too many adapters"));
	loras[0] = (struct manager_lora){ "x", NAN };
	r.n_loras = 1;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "finite scale"));

	manager_request_init(&r);
	r.prompt = "Once \xff\xfe";
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "UTF-8"));
	r.prompt = "\xed\xa0\x80"; /* a surrogate */
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "UTF-8"));
	r.prompt = "\xc0\xaf"; /* overlong */
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "UTF-8"));
	r.prompt = "Once";
	r.temperature = -0.5f;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "temperature"));
	r.temperature = 1;
	r.top_p = 0;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "top_p"));
	r.top_p = 1;
	r.stop = empty_stop;
	r.n_stop = 1;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "stop[0]"));
	r.n_stop = 0;
	r.max_tokens = 100000;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_CONTEXT_LENGTH,
				"maximum context length is 512"));
	r.max_tokens = 510; /* 2 prompt tokens + 510 = 512: fits */
	r.max_tokens = 511;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_CONTEXT_LENGTH,
				"(2 in the prompt, 511 for"));

	long_prompt = malloc(8000);
	ASSERT_TRUE(long_prompt != NULL);
	for (int i = 0; i < 7999; i++)
		long_prompt[i] = "abc "[i % 4];
	long_prompt[7999] = 0;
	manager_request_init(&r);
	r.prompt = long_prompt;
	int k = expect_reject(m, &r, NULL, MANAGER_ERR_CONTEXT_LENGTH, "leaves no room");
	free(long_prompt);
	ASSERT_OK(k);

	manager_request_init(&r);
	msgs[0].role = "robot";
	r.messages = msgs;
	r.n_messages = 1;
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "messages[0].role"));

	ASSERT_STREQ(manager_err_name(MANAGER_ERR_CONTEXT_LENGTH), "context_length_exceeded");
	ASSERT_EQ(manager_err_http_status(MANAGER_ERR_MODEL_NOT_FOUND), 404);
	ASSERT_EQ(manager_err_http_status(MANAGER_ERR_QUEUE_FULL), 429);
	ASSERT_EQ(manager_err_http_status(MANAGER_ERR_UNAVAILABLE), 503);
	ASSERT_STREQ(manager_err_dbus_name(MANAGER_ERR_QUEUE_FULL), "org.molly.Error.QueueFull");
	return 0;
}

TEST(queue_full_then_served)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	struct manager_request r;
	struct manager_stats st;
	struct collect c[4];
	uint64_t id;
	int k;

	k = new_manager("[Engine]\nMaxSequences=1\nQueueLength=2\n", &m);
	if (k == TEST_SKIP)
		return TEST_SKIP;
	ASSERT_OK(k);
	/* Not started yet: requests wait. One running slot plus a queue of two hold three; the
	 * fourth finds the queue full. */
	manager_request_init(&r);
	r.prompt = "Once upon a time";
	r.max_tokens = 4;
	for (int i = 0; i < 3; i++) {
		collect_init(&c[i]);
		ASSERT_OK(manager_submit(m, &r, NULL, on_event, &c[i], &id, NULL));
	}
	collect_init(&c[3]);
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_QUEUE_FULL, "the queue is full"));
	manager_get_stats(m, &st);
	ASSERT_EQ(st.waiting, 3);
	ASSERT_EQ(st.requests_rejected, 1);
	ASSERT_OK(manager_start(m));
	for (int i = 0; i < 3; i++) {
		ASSERT_OK(collect_wait(&c[i]));
		ASSERT_STREQ(c[i].finish, "length");
	}
	manager_get_stats(m, &st);
	ASSERT_EQ(st.requests_total, 3);
	ASSERT_EQ(st.requests_finished, 3);
	ASSERT_EQ(st.completion_tokens, 12);
	return 0;
}

TEST(cancel)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	struct manager_request r;
	struct collect c;
	uint64_t id;

	NEW_MANAGER(m, NULL);
	manager_request_init(&r);
	r.prompt = "Once upon a time";
	r.max_tokens = 400;
	r.ignore_eos = true;
	collect_init(&c);
	c.m = m;
	c.cancel_after_first = true;
	/* The id is known before the first chunk can be handled: the lock orders them. */
	pthread_mutex_lock(&c.lock);
	ASSERT_OK(manager_submit(m, &r, NULL, on_event, &c, &id, NULL));
	c.cancel_id = id;
	pthread_mutex_unlock(&c.lock);
	ASSERT_OK(collect_wait(&c));
	ASSERT_STREQ(c.finish, "cancelled");
	ASSERT_TRUE(c.completion_tokens < 400);
	ASSERT_ERR(manager_cancel(m, id), -ENOENT);
	ASSERT_ERR(manager_cancel(m, 987654), -ENOENT);
	return 0;
}

TEST(drain_cancels_and_refuses)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	struct manager_request r;
	struct collect c;
	uint64_t id;

	NEW_MANAGER(m, NULL);
	manager_request_init(&r);
	r.prompt = "Once upon a time";
	r.max_tokens = 450;
	r.ignore_eos = true;
	collect_init(&c);
	ASSERT_OK(manager_submit(m, &r, NULL, on_event, &c, &id, NULL));
	manager_drain(m, 0);
	ASSERT_TRUE(manager_is_stopping(m));
	ASSERT_OK(collect_wait(&c));
	ASSERT_EQ(c.final, MANAGER_EVENT_ERROR);
	ASSERT_EQ(c.err_kind, MANAGER_ERR_CANCELLED);
	ASSERT_TRUE(strstr(c.message, "stopping") != NULL);
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_UNAVAILABLE, "stopping"));
	return 0;
}

TEST(chat)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	struct chat_message msgs[2] = { { .role = "system", .content = "Be kind." }, { .role = "user", .content = "Tell a story." } };
	struct manager_request r;
	struct collect c;

	/* stories260K has no template: chatml by default, here named explicitly. */
	NEW_MANAGER(m, "ChatTemplate=chatml\n");
	manager_request_init(&r);
	r.messages = msgs;
	r.n_messages = 2;
	r.max_tokens = 8;
	collect_init(&c);
	ASSERT_OK(run(m, &r, NULL, &c, NULL));
	ASSERT_EQ(c.final, MANAGER_EVENT_DONE);
	/* the rendered chatml prompt is far longer than the two messages */
	ASSERT_TRUE(c.prompt_tokens > 20);
	return 0;
}

TEST(member_scopes)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	struct manager_request r;
	struct manager_caller alice = { .uid = 1000, .member = "alice", .front = "test" };
	struct manager_caller ghost = { .uid = 1001, .member = "ghost", .front = "test" };
	struct manager_error err;
	struct collect c;

	NEW_MANAGER(m, "[Member alice]\nUIDs=1000\nModels=stories260K\n");
	manager_request_init(&r);
	r.prompt = "Once";
	r.max_tokens = 2;
	collect_init(&c);
	ASSERT_OK(run(m, &r, &alice, &c, &err));
	ASSERT_OK(expect_reject(m, &r, &ghost, MANAGER_ERR_FORBIDDEN, "member `ghost`"));
	ASSERT_OK(manager_adapter_load(m, "tale", LORA, &err));
	r.model = "tale";
	ASSERT_OK(expect_reject(m, &r, &alice, MANAGER_ERR_FORBIDDEN, "may not use model `tale`"));
	r.model = NULL;
	struct manager_lora l = { "tale", 0.5f };
	r.loras = &l;
	r.n_loras = 1;
	ASSERT_OK(
		expect_reject(m, &r, &alice, MANAGER_ERR_FORBIDDEN, "may not use adapter `tale`"));
	ASSERT_TRUE(manager_caller_may_use(m, &alice, "stories260K"));
	ASSERT_TRUE(!manager_caller_may_use(m, &alice, "tale"));
	ASSERT_TRUE(manager_caller_may_use(m, NULL, "tale"));
	return 0;
}

struct list_state {
	int n;
	bool tale_loaded;
	bool copy_listed;
	uint32_t rank;
	uint32_t version, copy_version;
	char tier[8];
	char hash[65];
};

static void list_cb(const struct manager_adapter_info *a, void *userdata)
{
	struct list_state *s = userdata;

	s->n++;
	if (strcmp(a->name, "tale") == 0) {
		s->tale_loaded = a->loaded;
		s->rank = a->rank;
		s->version = a->version;
		snprintf(s->tier, sizeof(s->tier), "%s", a->tier);
		snprintf(s->hash, sizeof(s->hash), "%s", a->content_hash);
	}
	if (strcmp(a->name, "copy") == 0 && !a->loaded) {
		s->copy_listed = true;
		s->copy_version = a->version;
	}
}

static void progress_cb(uint64_t done, uint64_t total, void *userdata)
{
	uint64_t *last = userdata;

	if (done < *last || done > total)
		*last = UINT64_MAX; /* progress must grow up to the total */
	else
		*last = done;
}

TEST(adapters)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	char dir[] = "/tmp/test-manager.XXXXXX", extra[256], cmd[300];
	struct manager_request r;
	struct manager_error err;
	struct list_state ls = { 0 };
	struct collect c, base;
	_cleanup_free_ char *name = NULL;
	uint64_t last = 0;

	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(extra, sizeof(extra), "[Adapters]\nDirectory=%s\n", dir);
	NEW_MANAGER(m, extra);

	ASSERT_OK(manager_adapter_import(m, LORA, "copy", progress_cb, &last, &name, &err));
	ASSERT_STREQ(name, "copy");
	ASSERT_TRUE(last != UINT64_MAX && last > 0);
	/* the same content again under the same name: no new version, no error */
	free(name);
	name = NULL;
	ASSERT_OK(manager_adapter_import(m, LORA, "copy", NULL, NULL, &name, &err));
	ASSERT_ERR(manager_adapter_import(m, "relative.gguf", NULL, NULL, NULL, &name, &err),
		   -EINVAL);
	ASSERT_TRUE(manager_adapter_import(m, MODEL, "notalora", NULL, NULL, &name, &err) < 0);
	ASSERT_ERR(manager_adapter_import(m, LORA, "stories260K", NULL, NULL, &name, &err),
		   -EINVAL);

	ASSERT_OK(manager_adapter_load(m, "tale", LORA, &err));
	ASSERT_ERR(manager_adapter_load(m, "tale", LORA, &err), -EEXIST);
	ASSERT_ERR(manager_adapter_load(m, "../x", NULL, &err), -EINVAL);
	ASSERT_ERR(manager_adapter_load(m, "absent", NULL, &err), -ENOENT);
	ASSERT_EQ(err.kind, MANAGER_ERR_MODEL_NOT_FOUND);
	manager_foreach_adapter(m, list_cb, &ls);
	ASSERT_EQ(ls.n, 2);
	ASSERT_TRUE(ls.tale_loaded);
	ASSERT_TRUE(ls.copy_listed);
	ASSERT_EQ(ls.rank, 8);
	ASSERT_EQ(strlen(ls.hash), 64);

	ASSERT_EQ(ls.version, 1);
	ASSERT_EQ(ls.copy_version, 1);
	ASSERT_STREQ(ls.tier, "cold");

	manager_request_init(&r);
	r.prompt = "Once upon a time";
	r.max_tokens = 12;
	r.temperature = 0;
	collect_init(&base);
	ASSERT_OK(run(m, &r, NULL, &base, NULL));
	r.model = "stories260K:tale";
	collect_init(&c);
	ASSERT_OK(run(m, &r, NULL, &c, NULL));
	ASSERT_STREQ(c.model, "tale");
	ASSERT_TRUE(strcmp(c.text, base.text) != 0);

	ASSERT_OK(manager_adapter_pin(m, "tale", true, &err));
	ASSERT_OK(manager_adapter_pin(m, "tale", false, &err));
	ASSERT_ERR(manager_adapter_pin(m, "absent", true, &err), -ENOENT);
	ASSERT_OK(manager_adapter_unload(m, "tale", &err));
	ASSERT_ERR(manager_adapter_unload(m, "tale", &err), -ENOENT);
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_MODEL_NOT_FOUND, "tale"));

	/* By name from Directory= */
	ASSERT_OK(manager_adapter_load(m, "copy", NULL, &err));
	r.model = "copy";
	collect_init(&c);
	ASSERT_OK(run(m, &r, NULL, &c, NULL));
	ASSERT_STREQ(c.model, "copy");

	m = manager_free(m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ASSERT_EQ(system(cmd), 0);
	return 0;
}

#define ATTN MOLLY_SHARED_DIR "/models/stories260K-lora-attn-r8.gguf"

struct hist_state {
	int n;
	uint32_t active;
};

static int hist_cb(const struct registry_version *v, void *ud)
{
	struct hist_state *h = ud;

	h->n++;
	if (v->active)
		h->active = v->version;
	return 0;
}

static int uses_by_version(const struct registry_version *v, void *ud)
{
	if (v->version < 3)
		((uint64_t *) ud)[v->version] = v->uses;
	return 0;
}

static int v1_hash(const struct registry_version *v, void *ud)
{
	if (v->version == 1)
		snprintf(ud, 65, "%s", v->hash_hex);
	return 0;
}

static int text_of(struct manager *m, const char *model, char *out, size_t size)
{
	struct manager_request r;
	struct collect c;
	int k;

	manager_request_init(&r);
	r.prompt = "Once upon a time";
	r.max_tokens = 16;
	r.temperature = 0;
	r.model = model;
	collect_init(&c);
	k = run(m, &r, NULL, &c, NULL);
	if (k < 0)
		return k;
	if (c.final != MANAGER_EVENT_DONE)
		return -EIO;
	snprintf(out, size, "%s", c.text);
	return 0;
}

/* Issue 16: the scheduler keys adapters by content, so replacing what a name means (a new
 * version, a rollback) can never serve the old weights, even while the old ones are resident
 * and pinned; NAME@N and NAME@sha256:PREFIX reach the older versions. */
TEST(replaced_adapter_never_serves_old_weights)
{
	_cleanup_(manager_freep) struct manager *m = NULL;
	char all[8192], attn[8192], got[8192], spec[128];
	_cleanup_free_ char *name = NULL;
	struct manager_error err;
	struct list_state ls = { 0 };
	struct hist_state h = { 0 };
	struct manager_request r;
	uint32_t blobs;
	uint64_t bytes;

	NEW_MANAGER(m, NULL);
	ASSERT_OK(manager_adapter_import(m, LORA, "x", NULL, NULL, &name, &err));
	free(name);
	name = NULL;
	ASSERT_OK(manager_adapter_import(m, ATTN, "y", NULL, NULL, &name, &err));
	ASSERT_OK(manager_adapter_load(m, "x", NULL, &err));
	ASSERT_OK(manager_adapter_load(m, "y", NULL, &err));
	ASSERT_OK(manager_adapter_pin(m, "x", true, &err)); /* x@1 stays resident */
	ASSERT_OK(text_of(m, "x", all, sizeof(all)));
	ASSERT_OK(text_of(m, "y", attn, sizeof(attn)));
	ASSERT_TRUE(strcmp(all, attn) != 0);
	manager_foreach_adapter(m, list_cb, &ls); /* (tale absent: ls.hash stays empty) */

	/* x becomes the attn weights while loaded, resident and pinned */
	free(name);
	name = NULL;
	ASSERT_OK(manager_adapter_import(m, ATTN, "x", NULL, NULL, &name, &err));
	ASSERT_OK(text_of(m, "x", got, sizeof(got)));
	ASSERT_STREQ(got, attn);
	ASSERT_OK(text_of(m, "x@1", got, sizeof(got)));
	ASSERT_STREQ(got, all);
	ASSERT_OK(text_of(m, "stories260K:x@2", got, sizeof(got)));
	ASSERT_STREQ(got, attn);
	ASSERT_OK(manager_adapter_history(m, "x", hist_cb, &h, &err));
	ASSERT_EQ(h.n, 2);
	ASSERT_EQ(h.active, 2);

	/* by hash prefix (x@1's hash: y's differs, so look it up through history) */
	{
		char hex[65] = "";
		ASSERT_OK(manager_adapter_history(m, "x", v1_hash, hex, &err));
		snprintf(spec, sizeof(spec), "x@sha256:%.10s", hex);
	}
	ASSERT_OK(text_of(m, spec, got, sizeof(got)));
	ASSERT_STREQ(got, all);

	manager_request_init(&r);
	r.prompt = "Once";
	r.model = "x@9";
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_MODEL_NOT_FOUND, "no version 9"));
	r.model = "x@sha256:zz";
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_INVALID_REQUEST, "hex"));
	r.model = "ghost@1";
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_MODEL_NOT_FOUND, "no adapter `ghost`"));

	/* rollback: x is the all-targets adapter again */
	ASSERT_OK(manager_adapter_rollback(m, "x", 1, &err));
	ASSERT_OK(text_of(m, "x", got, sizeof(got)));
	ASSERT_STREQ(got, all);
	ASSERT_ERR(manager_adapter_rollback(m, "x", 5, &err), -ENOENT);

	/* remove y; gc finds nothing to do (y's blob is x@2's too) */
	ASSERT_OK(manager_adapter_remove(m, "y", &err));
	r.model = "y";
	ASSERT_OK(expect_reject(m, &r, NULL, MANAGER_ERR_MODEL_NOT_FOUND, "y"));
	ASSERT_ERR(manager_adapter_remove(m, "y", &err), -ENOENT);
	ASSERT_OK(manager_adapter_gc(m, &blobs, &bytes, &err));
	ASSERT_EQ(blobs, 0);

	/* statistics reach the registry at unload, per version: x@1 served "x" before the
	 * import, "x@1", the hash prefix and "x" after the rollback; x@2 "x" and "x@2" */
	{
		uint64_t uses[3] = { 0 };
		ASSERT_OK(manager_adapter_unload(m, "x", &err));
		ASSERT_OK(manager_adapter_history(m, "x", uses_by_version, uses, &err));
		ASSERT_EQ(uses[1], 4);
		ASSERT_EQ(uses[2], 2);
	}
	return 0;
}

/* The policy judge's verdict from the model's answer: the first word only. */
TEST(judge_answers)
{
	static const struct {
		const char *answer;
		enum judge_verdict v;
	} cases[] = {
		{ " Yes", JUDGE_PERSONAL },      { "yes.", JUDGE_PERSONAL },
		{ "\"YES\" it does", JUDGE_PERSONAL }, { "**No**", JUDGE_PUBLIC },
		{ " no, it is general", JUDGE_PUBLIC }, { "Not really", JUDGE_UNCLEAR },
		{ "yesterday", JUDGE_UNCLEAR },   { "", JUDGE_UNCLEAR },
		{ "   ", JUDGE_UNCLEAR },         { "1. yes", JUDGE_UNCLEAR },
		{ "\xc3\xa9 yes", JUDGE_UNCLEAR }, { "Once upon a time", JUDGE_UNCLEAR },
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		if (judge_parse_answer(cases[i].answer, strlen(cases[i].answer)) != cases[i].v)
			TEST_FAIL_("'%s': %s", cases[i].answer,
				   judge_verdict_name(judge_parse_answer(cases[i].answer,
									 strlen(cases[i].answer))));
	ASSERT_EQ(judge_parse_answer(NULL, 0), JUDGE_UNCLEAR);
	return 0;
}
