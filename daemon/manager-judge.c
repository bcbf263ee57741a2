/* SPDX-License-Identifier: MIT */
/*
 * manager-judge.c: see manager-judge.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "basic/time-util.h"
#include "core/config.h"
#include "engine/sampler.h"
#include "engine/vocab.h"
#include "manager-judge.h"
#include "sched/sched.h"

/* Tokens the model may answer with: "yes", "no", perhaps a space or a quote first. */
#define JUDGE_MAX_TOKENS 4
/* The text quoted in the question, at most (bytes): bounds the prefill on a slow machine. */
#define JUDGE_MAX_TEXT 2048
#define JUDGE_ANSWER_MAX 64

/* Short: the question shares the model's context with the text (special categories of GDPR
 * art. 9 and 10 and the other personal topics of docs/policy.md). */
static const char question_head[] =
	"Does this text reveal health, sex life, ethnicity, politics, religion, union "
	"membership, crimes, finances, immigration, work discipline, abuse or a child's details "
	"about its writer or another real person? Answer only yes or no.\nText: \"";
static const char question_tail[] = "\"\nAnswer:";

struct manager_judge {
	struct sched *sched;      /* borrowed */
	const struct vocab *vocab; /* borrowed */
	bool has_family;
	enum chat_family family;
	uint32_t max_context;

	pthread_mutex_t lock;     /* the parameters below */
	bool enabled;
	float band_low, band_high;
	uint32_t timeout_ms;

	/* TEST ONLY (MOLLY_TEST=1): see manager-judge.h */
	bool test_score_set;
	float test_score;
	char *test_answer;
	bool test_hold;

	atomic_uint_fast64_t asked;
	atomic_uint_fast64_t verdicts[JUDGE_VERDICT_COUNT_];
};

/* One question in flight: shared by the asking thread and the scheduler's callback (two
 * references; the last one frees it, so a caller that gave up need not wait for DONE). */
struct judge_call {
	atomic_uint n_ref;
	pthread_mutex_t lock;
	pthread_cond_t cond;      /* CLOCK_MONOTONIC */
	char answer[JUDGE_ANSWER_MAX];
	size_t n;
	bool done;
};

static const char *const verdict_names[JUDGE_VERDICT_COUNT_] = {
	[JUDGE_PERSONAL] = "personal",
	[JUDGE_PUBLIC] = "public",
	[JUDGE_UNCLEAR] = "unclear",
	[JUDGE_TIMEOUT] = "timeout",
};

const char *judge_verdict_name(enum judge_verdict v)
{
	return (unsigned) v < JUDGE_VERDICT_COUNT_ ? verdict_names[v] : "unclear";
}

int manager_judge_new(struct sched *sched, const struct vocab *vocab, bool has_family,
		      enum chat_family family, uint32_t max_context, struct manager_judge **ret)
{
	struct manager_judge *j;
	const char *t = getenv("MOLLY_TEST");

	assert_return(sched && vocab && ret, -EINVAL);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->sched = sched;
	j->vocab = vocab;
	j->has_family = has_family;
	j->family = family;
	j->max_context = max_context;
	j->band_low = 0.3f;
	j->band_high = 0.7f;
	j->timeout_ms = 2000;
	pthread_mutex_init(&j->lock, NULL);
	if (t && strcmp(t, "1") == 0) {
		const char *s = getenv("MOLLY_TEST_JUDGE_SCORE");
		const char *a = getenv("MOLLY_TEST_JUDGE_ANSWER");
		const char *h = getenv("MOLLY_TEST_JUDGE_HOLD");
		char *end;
		if (s && s[0]) {
			double d = strtod(s, &end);
			if (!*end && d >= 0 && d <= 1) {
				j->test_score_set = true;
				j->test_score = (float) d;
			}
		}
		if (a) {
			j->test_answer = strdup(a);
			if (!j->test_answer) {
				manager_judge_free(j);
				return -ENOMEM;
			}
		}
		j->test_hold = h && strcmp(h, "1") == 0;
	}
	*ret = j;
	return 0;
}

struct manager_judge *manager_judge_free(struct manager_judge *j)
{
	if (!j)
		return NULL;
	pthread_mutex_destroy(&j->lock);
	free(j->test_answer);
	free(j);
	return NULL;
}

void manager_judge_configure(struct manager_judge *j, const struct config *c)
{
	if (!j || !c)
		return;
	pthread_mutex_lock(&j->lock);
	j->enabled = c->policy_judge;
	j->band_low = c->policy_judge_band[0];
	j->band_high = c->policy_judge_band[1];
	j->timeout_ms = c->policy_judge_timeout_ms ? c->policy_judge_timeout_ms : 2000;
	pthread_mutex_unlock(&j->lock);
}

bool manager_judge_wanted(struct manager_judge *j, float special_score, float *ret_score)
{
	bool want;

	if (!j)
		return false;
	if (j->test_score_set)
		special_score = j->test_score;
	pthread_mutex_lock(&j->lock);
	want = j->enabled && special_score >= j->band_low && special_score <= j->band_high;
	pthread_mutex_unlock(&j->lock);
	if (ret_score)
		*ret_score = special_score;
	return want;
}

void manager_judge_get_stats(struct manager_judge *j, struct manager_judge_stats *ret)
{
	*ret = (struct manager_judge_stats){ 0 };
	if (!j)
		return;
	ret->asked = atomic_load(&j->asked);
	for (int v = 0; v < JUDGE_VERDICT_COUNT_; v++)
		ret->verdicts[v] = atomic_load(&j->verdicts[v]);
}

static bool word_is(const char *w, size_t n, const char *s)
{
	return strlen(s) == n && strncasecmp(w, s, n) == 0;
}

enum judge_verdict judge_parse_answer(const char *answer, size_t len)
{
	size_t p = 0, q;

	if (!answer)
		return JUDGE_UNCLEAR;
	/* spaces, quotes, brackets, '*' and the like before the word */
	while (p < len && !((answer[p] | 32) >= 'a' && (answer[p] | 32) <= 'z')) {
		if ((unsigned char) answer[p] >= 0x80 || (answer[p] >= '0' && answer[p] <= '9'))
			return JUDGE_UNCLEAR;
		p++;
	}
	q = p;
	while (q < len && (answer[q] | 32) >= 'a' && (answer[q] | 32) <= 'z')
		q++;
	if (word_is(answer + p, q - p, "yes"))
		return JUDGE_PERSONAL;
	if (word_is(answer + p, q - p, "no"))
		return JUDGE_PUBLIC;
	return JUDGE_UNCLEAR;
}

static void call_unref(struct judge_call *c)
{
	if (atomic_fetch_sub(&c->n_ref, 1) != 1)
		return;
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	explicit_bzero(c->answer, sizeof(c->answer));
	free(c);
}

/* The scheduler's thread: must not block (a short mutex only). */
static void on_event(const struct sched_event *ev, void *userdata)
{
	struct judge_call *c = userdata;

	pthread_mutex_lock(&c->lock);
	if (ev->type == SCHED_EVENT_TOKEN) {
		size_t k = MIN(ev->text_len, sizeof(c->answer) - 1 - c->n);
		if (ev->text && k) {
			memcpy(c->answer + c->n, ev->text, k);
			c->n += k;
		}
		pthread_mutex_unlock(&c->lock);
		return;
	}
	c->done = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	call_unref(c);
}

/* The question's token ids for the first len bytes of text (0, or -E2BIG when they do not
 * fit the context with room for the answer). */
static int tokenize_question(struct manager_judge *j, const char *text, size_t len, int32_t **ret,
			     size_t *ret_n)
{
	_cleanup_free_ char *q = NULL, *rendered = NULL;
	_cleanup_free_ int32_t *ids = NULL;
	const char *src;
	size_t n_src;
	int64_t n;

	if (asprintf(&q, "%s%.*s%s", question_head, (int) len, text, question_tail) < 0)
		return -ENOMEM;
	src = q;
	if (j->has_family) {
		struct chat_message msg = { .role = "user", .content = q };
		struct errmsg e = { { 0 } };
		int k = chat_render(j->family, &msg, 1, true, &rendered, &e);
		if (k < 0)
			return k;
		src = rendered;
	}
	n_src = strlen(src);
	/* a token covers one byte at least, plus BOS */
	ids = malloc((n_src + 8) * sizeof(int32_t));
	if (!ids)
		return -ENOMEM;
	n = vocab_tokenize(j->vocab, src, n_src, vocab_add_bos(j->vocab), j->has_family, ids,
			   n_src + 8);
	if (n < 0)
		return (int) n;
	if (n == 0 || (size_t) n > n_src + 8 || (size_t) n + JUDGE_MAX_TOKENS + 1 > j->max_context)
		return -E2BIG;
	*ret = TAKE_PTR(ids);
	*ret_n = (size_t) n;
	return 0;
}

/* The question with as much of the text as fits (at most JUDGE_MAX_TEXT bytes), cut at a
 * character boundary: the text is shortened until the tokens fit the context. */
static int build_prompt(struct manager_judge *j, const char *text, size_t len, int32_t **ret,
			size_t *ret_n)
{
	size_t total = len;
	int k = -E2BIG;

	len = MIN(len, (size_t) JUDGE_MAX_TEXT);
	for (int attempt = 0; attempt < 8; attempt++) {
		while (len > 0 && len < total && ((unsigned char) text[len] & 0xc0) == 0x80)
			len--;
		k = tokenize_question(j, text, len, ret, ret_n);
		if (k != -E2BIG || len == 0)
			return k;
		len = len * 2 / 3;
	}
	return k;
}

static enum judge_verdict count(struct manager_judge *j, enum judge_verdict v)
{
	atomic_fetch_add(&j->verdicts[v], 1);
	return v;
}

enum judge_verdict manager_judge_ask(struct manager_judge *j, const char *text, size_t len)
{
	_cleanup_free_ int32_t *ids = NULL;
	struct sched_request sr = { 0 };
	struct errmsg e = { { 0 } };
	pthread_condattr_t ca;
	struct judge_call *c;
	struct timespec deadline;
	uint64_t sid, deadline_ns;
	uint32_t timeout_ms;
	size_t n_ids = 0;
	enum judge_verdict v;
	int k;

	if (!j || (!text && len))
		return JUDGE_UNCLEAR;
	pthread_mutex_lock(&j->lock);
	timeout_ms = j->timeout_ms;
	pthread_mutex_unlock(&j->lock);
	deadline_ns = now_ns() + (uint64_t) timeout_ms * 1000000ull;

	if (build_prompt(j, text ? text : "", len, &ids, &n_ids) < 0)
		return count(j, JUDGE_UNCLEAR);
	c = calloc(1, sizeof(*c));
	if (!c)
		return count(j, JUDGE_UNCLEAR);
	atomic_init(&c->n_ref, 2);
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);

	sr.prompt = ids;
	sr.n_prompt = n_ids;
	sampler_params_default(&sr.sampling);
	sr.sampling.temperature = 0; /* the most likely answer */
	sr.sampling.top_k = 0;
	sr.sampling.top_p = 1;
	sr.sampling.min_p = 0;
	sr.sampling.repeat_penalty = 1.0f;
	sr.max_tokens = JUDGE_MAX_TOKENS;
	sr.on_event = on_event;
	sr.userdata = c;
	/* This machine's scheduler and nothing else: the judge never leaves T0. */
	k = sched_submit(j->sched, &sr, &sid, &e);
	if (k < 0) {
		atomic_store(&c->n_ref, 1); /* no event will come */
		call_unref(c);
		return count(j, JUDGE_UNCLEAR);
	}
	atomic_fetch_add(&j->asked, 1);

	deadline.tv_sec = (time_t) (deadline_ns / 1000000000ull);
	deadline.tv_nsec = (long) (deadline_ns % 1000000000ull);
	pthread_mutex_lock(&c->lock);
	/* TEST ONLY: with MOLLY_TEST_JUDGE_HOLD=1 the answer is never taken, so the wait runs
	 * into the budget whatever the machine's speed. */
	while ((!c->done || j->test_hold) && k != ETIMEDOUT)
		k = pthread_cond_timedwait(&c->cond, &c->lock, &deadline);
	if (c->done && !j->test_hold)
		v = judge_parse_answer(j->test_answer ? j->test_answer : c->answer,
				       j->test_answer ? strlen(j->test_answer) : c->n);
	else
		v = JUDGE_TIMEOUT;
	pthread_mutex_unlock(&c->lock);
	if (v == JUDGE_TIMEOUT)
		(void) sched_cancel(j->sched, sid); /* its DONE drops the callback's reference */
	call_unref(c);
	return count(j, v);
}
