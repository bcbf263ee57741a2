/* SPDX-License-Identifier: MIT */
/*
 * test-sched: the iteration-level scheduler and the paged pool.
 *
 *  - greedy through the scheduler reproduces llama.cpp's reference ids;
 *  - batch invariance: every sequence of a heterogeneous batch (different prompts, lengths,
 *    adapters, some with none, some with two weighted adapters) gives exactly the ids and
 *    log-probabilities of the same sequence run alone;
 *  - stress: random joins, leaves and cancels over many steps with a pool small enough to
 *    force adapter eviction and preemption; every finished sequence checked against its
 *    solo run; pool accounting checked after every step;
 *  - limits: queue full, context too long, unknown adapter, bad token ids.
 */
#include <errno.h>
#include <stdint.h>

#include "test.h"

#include "engine/model.h"
#include "engine/vocab.h"
#include "lora/adapter.h"
#include "sched/sched.h"

int sched_check_pool(struct sched *s);

#define MAX_REQ 64
#define MAX_GEN 96

struct result {
	uint64_t id;
	int32_t ids[MAX_GEN];
	float logprobs[MAX_GEN];
	uint32_t n;
	bool done;
	int error;
	enum sched_finish finish;
	char text[4096];
	size_t text_len;
};

static void on_event(const struct sched_event *ev, void *userdata)
{
	struct result *r = userdata;

	switch (ev->type) {
	case SCHED_EVENT_TOKEN:
		if (r->n < MAX_GEN) {
			r->ids[r->n] = ev->token;
			r->logprobs[r->n] = ev->logprob;
			r->n++;
		}
		if (r->text_len + ev->text_len < sizeof(r->text)) {
			memcpy(r->text + r->text_len, ev->text, ev->text_len);
			r->text_len += ev->text_len;
		}
		break;
	case SCHED_EVENT_DONE:
		r->done = true;
		r->finish = ev->finish;
		break;
	case SCHED_EVENT_ERROR:
		r->done = true;
		r->error = ev->error;
		break;
	}
}

static struct model *load(const char *rel)
{
	struct model *m = NULL;
	struct errmsg e = {};

	if (model_load(test_shared_path(rel), &m, &e) < 0) {
		fprintf(stderr, "  %s: %s\n", rel, e.text);
		return NULL;
	}
	return m;
}

static int add_gguf_adapter(struct sched *s, struct model *m, const char *rel, const char *name)
{
	struct lora_open_opts o = { .base = m, .name = name, .dtype = 0 };
	struct lora_adapter *a = NULL;
	struct errmsg e = {};
	int r;

	r = lora_adapter_open(test_shared_path(rel), &o, &a, NULL, &e);
	if (r < 0) {
		fprintf(stderr, "  %s: %s\n", rel, e.text);
		return r;
	}
	r = sched_add_adapter(s, a, &e);
	if (r < 0) {
		fprintf(stderr, "  add %s: %s\n", name, e.text);
		lora_adapter_free(a);
	}
	return r;
}

struct spec {
	const char *prompt;
	uint32_t max_tokens;
	const char *lora1;
	float scale1;
	const char *lora2;
	float scale2;
	float temperature;
	uint64_t seed;
};

static int submit(struct sched *s, struct model *m, const struct spec *sp, struct result *res)
{
	int32_t ids[512];
	struct sched_lora loras[2];
	size_t n_loras = 0;
	struct errmsg e = {};
	int64_t n = vocab_tokenize(m->vocab, sp->prompt, strlen(sp->prompt), true, false, ids, 512);
	struct sched_request req = {
		.prompt = ids,
		.n_prompt = (size_t) n,
		.max_tokens = sp->max_tokens,
		.on_event = on_event,
		.userdata = res,
		.ignore_eos = true,
	};
	int r;

	if (sp->lora1)
		loras[n_loras++] = (struct sched_lora){ sp->lora1, sp->scale1 };
	if (sp->lora2)
		loras[n_loras++] = (struct sched_lora){ sp->lora2, sp->scale2 };
	req.loras = loras;
	req.n_loras = n_loras;
	sampler_params_default(&req.sampling);
	req.sampling.temperature = sp->temperature;
	req.sampling.seed = sp->seed;
	memset(res, 0, sizeof(*res));
	r = sched_submit(s, &req, &res->id, &e);
	if (r < 0)
		fprintf(stderr, "  submit: %s\n", e.text);
	return r;
}

static int run_until_done(struct sched *s, struct result *res, size_t n, bool check_pool)
{
	for (int steps = 0; steps < 100000; steps++) {
		bool all = true;

		for (size_t i = 0; i < n; i++)
			all = all && res[i].done;
		if (all)
			return 0;
		if (sched_step(s) < 0)
			return -EIO;
		if (check_pool && sched_check_pool(s) < 0)
			return -EUCLEAN;
	}
	return -ETIMEDOUT;
}

/* The same request alone on a fresh scheduler: the reference for invariance. */
static int solo(struct model *m, const struct spec *sp, bool adapters, struct result *res)
{
	struct sched_params p = { .max_sequences = 1, .n_threads = 1 };
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct errmsg e = {};

	ASSERT_OK(sched_new(m, &p, &s, &e));
	if (adapters) {
		ASSERT_OK(add_gguf_adapter(s, m, "models/stories260K-lora-attn-r8.gguf", "attn"));
		ASSERT_OK(add_gguf_adapter(s, m, "models/stories260K-lora-all-r8.gguf", "all"));
	}
	ASSERT_OK(submit(s, m, sp, res));
	ASSERT_OK(run_until_done(s, res, 1, false));
	return 0;
}

static int same_result(const struct result *a, const struct result *b, const char *what)
{
	if (a->n != b->n || a->error != b->error)
		TEST_FAIL_("%s: %u tokens (error %d) vs %u (error %d) alone", what, a->n, a->error, b->n,
			   b->error);
	for (uint32_t i = 0; i < a->n; i++)
		if (a->ids[i] != b->ids[i] || a->logprobs[i] != b->logprobs[i])
			TEST_FAIL_("%s: step %u: id %d logprob %.9g vs %d %.9g alone", what, i, a->ids[i],
				   a->logprobs[i], b->ids[i], b->logprobs[i]);
	return 0;
}

TEST(greedy_matches_reference)
{
	_cleanup_(model_freep) struct model *m = load("models/stories260K.gguf");
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result res;
	struct spec sp = { .prompt = "Once upon a time", .max_tokens = 64 };
	int32_t ref[64];
	FILE *f;

	if (!m)
		return TEST_SKIP;
	f = fopen(test_shared_path("reference/stories260K/vis_base/gen_ids.txt"), "re");
	ASSERT_TRUE(f);
	for (int i = 0; i < 64; i++)
		ASSERT_TRUE(fscanf(f, "%d", &ref[i]) == 1);
	fclose(f);
	ASSERT_OK(sched_new(m, &(struct sched_params){ .n_threads = 2 }, &s, NULL));
	ASSERT_OK(submit(s, m, &sp, &res));
	ASSERT_OK(run_until_done(s, &res, 1, true));
	ASSERT_EQ(res.n, 64);
	ASSERT_EQ(res.finish, SCHED_FINISH_LENGTH);
	for (int i = 0; i < 64; i++)
		ASSERT_EQ(res.ids[i], ref[i]);
	return 0;
}

static const struct spec mixed[] = {
	{ "Once upon a time", 40, NULL, 0, NULL, 0, 0, 0 },
	{ "Lily wanted to play", 33, "attn", 1.0f, NULL, 0, 0, 0 },
	{ "The cat sat", 50, "all", 0.5f, NULL, 0, 0.8f, 7 },
	{ "Tom and Sue went to the park to see the big tree", 20, "attn", 0.7f, "all", 0.3f, 0, 0 },
	{ "One day", 45, "all", 1.0f, NULL, 0, 1.0f, 99 },
	{ "Once upon a time there was a little dog", 30, NULL, 0, NULL, 0, 0.7f, 3 },
	{ "She", 60, "all", 1.0f, "attn", 1.0f, 0, 0 },
	{ "He was very happy because", 25, "attn", 2.0f, NULL, 0, 0, 0 },
};

TEST(batch_invariance_heterogeneous)
{
	_cleanup_(model_freep) struct model *m = load("models/stories260K.gguf");
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result batch[ELEMENTSOF(mixed)], alone;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 8, .n_threads = 2,
						       .step_tokens = 24 },
			    &s, NULL));
	ASSERT_OK(add_gguf_adapter(s, m, "models/stories260K-lora-attn-r8.gguf", "attn"));
	ASSERT_OK(add_gguf_adapter(s, m, "models/stories260K-lora-all-r8.gguf", "all"));
	for (size_t i = 0; i < ELEMENTSOF(mixed); i++)
		ASSERT_OK(submit(s, m, &mixed[i], &batch[i]));
	ASSERT_OK(run_until_done(s, batch, ELEMENTSOF(mixed), true));
	for (size_t i = 0; i < ELEMENTSOF(mixed); i++) {
		char what[64];

		ASSERT_EQ(solo(m, &mixed[i], true, &alone), 0);
		snprintf(what, sizeof(what), "sequence %zu", i);
		if (same_result(&batch[i], &alone, what))
			return 1;
	}
	return 0;
}

TEST(batch_invariance_q8_0_base)
{
	_cleanup_(model_freep) struct model *m = load("models/stories260K-Q8_0.gguf");
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result batch[ELEMENTSOF(mixed)], alone;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 4, .n_threads = 2,
						       .step_tokens = 16, .max_context = 128 },
			    &s, NULL));
	ASSERT_OK(add_gguf_adapter(s, m, "models/stories260K-lora-attn-r8.gguf", "attn"));
	ASSERT_OK(add_gguf_adapter(s, m, "models/stories260K-lora-all-r8.gguf", "all"));
	for (size_t i = 0; i < ELEMENTSOF(mixed); i++)
		ASSERT_OK(submit(s, m, &mixed[i], &batch[i]));
	ASSERT_OK(run_until_done(s, batch, ELEMENTSOF(mixed), true));
	for (size_t i = 0; i < ELEMENTSOF(mixed); i++) {
		char what[64];

		ASSERT_EQ(solo(m, &mixed[i], true, &alone), 0);
		snprintf(what, sizeof(what), "q8_0 sequence %zu", i);
		if (same_result(&batch[i], &alone, what))
			return 1;
	}
	return 0;
}

static uint64_t rng;
static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t) (rng % n);
}

TEST(stress_joins_cancels_preemption)
{
	_cleanup_(model_freep) struct model *m = load("models/stories260K.gguf");
	_cleanup_(sched_freep) struct sched *s = NULL;
	static struct result res[MAX_REQ];
	static struct spec specs[MAX_REQ];
	bool cancelled[MAX_REQ] = {};
	const char *prompts[] = { "Once upon a time", "Lily", "The big red ball was",
				  "Tom had a friend named Sam who liked to", "One day, a" };
	const char *names[] = { NULL, "attn", "all" };
	struct sched_stats st;
	size_t submitted = 0;
	int steps = 0;

	if (!m)
		return TEST_SKIP;
	rng = 0x9e3779b97f4a7c15ull;
	/* a pool of 14 pages: 8 sequences of up to ~80 positions need far more, and each adapter
	 * takes pages too — so eviction and preemption must happen */
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 6, .n_threads = 2,
						       .step_tokens = 20, .max_context = 128,
						       .pool_bytes = 14 * 20480 },
			    &s, NULL));
	ASSERT_OK(add_gguf_adapter(s, m, "models/stories260K-lora-attn-r8.gguf", "attn"));
	ASSERT_OK(add_gguf_adapter(s, m, "models/stories260K-lora-all-r8.gguf", "all"));
	while (steps < 4000) {
		if (submitted < MAX_REQ && rnd(3) == 0) {
			struct spec *sp = &specs[submitted];

			*sp = (struct spec){ .prompt = prompts[rnd(ELEMENTSOF(prompts))],
					     .max_tokens = 5 + rnd(60),
					     .lora1 = names[rnd(3)],
					     .scale1 = 0.5f + (float) rnd(3) * 0.25f,
					     .temperature = rnd(2) ? 0.0f : 0.9f,
					     .seed = rnd(1000) };
			if (sp->lora1 && rnd(3) == 0) {
				sp->lora2 = sp->lora1 == names[1] ? names[2] : names[1];
				sp->scale2 = 0.5f;
			}
			int r = submit(s, m, sp, &res[submitted]);
			if (r == -EAGAIN)
				continue;
			ASSERT_OK(r);
			submitted++;
		}
		if (submitted && rnd(25) == 0) {
			size_t i = rnd((uint32_t) submitted);

			if (!res[i].done && sched_cancel(s, res[i].id) == 0)
				cancelled[i] = true;
		}
		ASSERT_TRUE(sched_step(s) >= 0);
		ASSERT_OK(sched_check_pool(s));
		steps++;
		if (submitted == MAX_REQ) {
			bool all = true;
			for (size_t i = 0; i < submitted; i++)
				all = all && res[i].done;
			if (all)
				break;
		}
	}
	ASSERT_EQ(submitted, MAX_REQ);
	sched_get_stats(s, &st);
	printf("  %d steps, %llu preemptions, %llu adapter evictions, %llu tokens generated\n", steps,
	       (unsigned long long) st.preemptions, (unsigned long long) st.adapter_evictions,
	       (unsigned long long) st.tokens_generated);
	ASSERT_TRUE(st.preemptions > 0);
	ASSERT_TRUE(st.adapter_evictions > 0);
	ASSERT_EQ(st.running + st.waiting, 0);
	ASSERT_EQ(st.pool_pages_kv, 0);
	for (size_t i = 0; i < submitted; i++) {
		struct result alone;
		char what[64];

		ASSERT_TRUE(res[i].done);
		if (cancelled[i] && res[i].finish == SCHED_FINISH_CANCELLED)
			continue;
		ASSERT_EQ(res[i].error, 0);
		ASSERT_EQ(res[i].n, specs[i].max_tokens);
		ASSERT_EQ(solo(m, &specs[i], true, &alone), 0);
		snprintf(what, sizeof(what), "stress request %zu", i);
		if (same_result(&res[i], &alone, what))
			return 1;
	}
	return 0;
}

TEST(limits_and_errors)
{
	_cleanup_(model_freep) struct model *m = load("models/stories260K.gguf");
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result res[4];
	struct errmsg e = {};
	int32_t ids[200], bad = 9999;
	struct sched_lora unknown = { "nosuch", 1.0f };
	struct sched_request req = { .prompt = ids, .n_prompt = 4, .on_event = on_event };
	uint64_t id;

	if (!m)
		return TEST_SKIP;
	for (int i = 0; i < 200; i++)
		ids[i] = 1 + i % 300;
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 1, .queue_length = 2,
						       .max_context = 64, .n_threads = 1 },
			    &s, &e));
	sampler_params_default(&req.sampling);
	req.userdata = &res[0];
	memset(res, 0, sizeof(res));
	/* context: prompt + max_tokens over 64 */
	req.max_tokens = 61;
	ASSERT_ERR(sched_submit(s, &req, &id, &e), -E2BIG);
	ASSERT_TRUE(strstr(e.text, "context") != NULL);
	req.max_tokens = 8;
	/* bad ids, unknown adapter */
	req.prompt = &bad;
	req.n_prompt = 1;
	ASSERT_ERR(sched_submit(s, &req, &id, &e), -EINVAL);
	req.prompt = ids;
	req.n_prompt = 4;
	req.loras = &unknown;
	req.n_loras = 1;
	ASSERT_ERR(sched_submit(s, &req, &id, &e), -ENOENT);
	ASSERT_TRUE(strstr(e.text, "nosuch") != NULL);
	req.n_loras = 0;
	/* one running slot + a queue of 2: the fourth request is refused */
	ASSERT_OK(sched_submit(s, &req, &id, &e));
	req.userdata = &res[1];
	ASSERT_OK(sched_submit(s, &req, &id, &e));
	req.userdata = &res[2];
	ASSERT_OK(sched_submit(s, &req, &id, &e));
	req.userdata = &res[3];
	ASSERT_ERR(sched_submit(s, &req, &id, &e), -EAGAIN);
	ASSERT_TRUE(strstr(e.text, "queue") != NULL);
	/* cancel a waiting one */
	req.userdata = &res[2];
	ASSERT_OK(sched_cancel(s, id));
	ASSERT_OK(run_until_done(s, res, 3, true));
	ASSERT_EQ(res[0].n, 8);
	ASSERT_EQ(res[1].n, 8);
	ASSERT_EQ(res[2].finish, SCHED_FINISH_CANCELLED);
	ASSERT_EQ(res[2].n, 0);
	ASSERT_ERR(sched_cancel(s, id), -ENOENT);
	return 0;
}

/* The test-only hold: after N generated tokens no step computes, requests stay where they are,
 * cancellations still finish theirs; lifting the hold lets the rest finish exactly as before. */
TEST(test_hold)
{
	_cleanup_(model_freep) struct model *m = load("models/stories260K.gguf");
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result res[3], ref;
	struct errmsg e = {};
	struct sched_stats st;
	const struct spec sp = { .prompt = "Once upon a time", .max_tokens = 12 };

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(solo(m, &sp, false, &ref));
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 1, .n_threads = 1 }, &s,
			    &e));
	sched_test_hold(s, 3);
	for (int i = 0; i < 3; i++)
		ASSERT_OK(submit(s, m, &sp, &res[i]));
	/* the first runs until 3 tokens exist, then nothing moves however often we step */
	for (int i = 0; i < 50; i++)
		ASSERT_TRUE(sched_step(s) >= 0);
	ASSERT_EQ(sched_step(s), 0);
	sched_get_stats(s, &st);
	ASSERT_EQ(st.tokens_generated, 3u);
	ASSERT_EQ(st.running, 1u);
	ASSERT_EQ(st.waiting, 2u);
	ASSERT_EQ(res[0].n, 3u);
	ASSERT_TRUE(!res[0].done && !res[1].done && !res[2].done);
	/* held, a cancellation of a running and of a waiting request still completes */
	ASSERT_OK(sched_cancel(s, res[0].id));
	ASSERT_OK(sched_cancel(s, res[2].id));
	ASSERT_EQ(sched_step(s), 0);
	ASSERT_TRUE(res[0].done && res[0].finish == SCHED_FINISH_CANCELLED);
	ASSERT_TRUE(res[2].done && res[2].finish == SCHED_FINISH_CANCELLED && res[2].n == 0);
	ASSERT_TRUE(!res[1].done && res[1].n == 0);
	/* lifted: the one left finishes, the same as alone */
	sched_test_hold(s, UINT64_MAX);
	ASSERT_OK(run_until_done(s, &res[1], 1, true));
	ASSERT_OK(same_result(&res[1], &ref, "after the hold"));

	/* on the scheduler's own thread: held at once, sched_drain's timeout cancels what waits */
	s = sched_free(s);
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 1, .n_threads = 1 }, &s,
			    &e));
	sched_test_hold(s, 0);
	ASSERT_OK(sched_start(s));
	ASSERT_OK(submit(s, m, &sp, &res[0]));
	ASSERT_OK(submit(s, m, &sp, &res[1]));
	sched_drain(s, 1000000); /* 1 ms: nothing can finish while held */
	s = sched_free(s);       /* joins the thread: every event has been delivered */
	for (int i = 0; i < 2; i++) {
		ASSERT_TRUE(res[i].done && res[i].finish == SCHED_FINISH_CANCELLED);
		ASSERT_EQ(res[i].n, 0u);
	}
	return 0;
}

static int first_token_clock;

struct fair_result {
	int first_token_at;
	bool done;
};

static void on_fair_event(const struct sched_event *ev, void *userdata)
{
	struct fair_result *r = userdata;

	if (ev->type == SCHED_EVENT_TOKEN && r->first_token_at == 0)
		r->first_token_at = ++first_token_clock;
	if (ev->type != SCHED_EVENT_TOKEN)
		r->done = true;
}

/* A caller that queued many requests does not make a later caller wait for all of them. */
TEST(admission_fair_across_callers)
{
	_cleanup_(model_freep) struct model *m = load("models/stories260K.gguf");
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct fair_result a[5] = {}, b = {};
	int32_t ids[] = { 1, 403, 407 };
	struct sched_request req = { .prompt = ids, .n_prompt = 3, .max_tokens = 4,
				     .on_event = on_fair_event, .ignore_eos = true };
	uint64_t id;

	if (!m)
		return TEST_SKIP;
	first_token_clock = 0;
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 1, .n_threads = 1 }, &s, NULL));
	sampler_params_default(&req.sampling);
	req.sampling.temperature = 0;
	req.caller = 1000;
	for (int i = 0; i < 5; i++) {
		req.userdata = &a[i];
		ASSERT_OK(sched_submit(s, &req, &id, NULL));
	}
	req.caller = 2000;
	req.userdata = &b;
	ASSERT_OK(sched_submit(s, &req, &id, NULL));
	while (!b.done || !a[4].done)
		ASSERT_TRUE(sched_step(s) >= 0);
	/* caller 1000's first request runs first; the next slot goes to caller 2000, whose
	 * count of running sequences is lower, not to caller 1000's second */
	ASSERT_EQ(a[0].first_token_at, 1);
	ASSERT_EQ(b.first_token_at, 2);
	return 0;
}
