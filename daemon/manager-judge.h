/* SPDX-License-Identifier: MIT */
/*
 * manager-judge.h: the optional policy judge ([Policy] Judge=yes). When the special-category
 * classifier is unsure about a request (policy_decision.special_score within JudgeBand=) and
 * the request is not already personal or secret, the manager asks this machine's own model
 * (T0: the manager's scheduler, never the router, never another tier) a short yes/no
 * question: does the text reveal special categories of personal data about the writer or an
 * identifiable person? "yes" adds a finding {kind "judge", layer "judge", class personal};
 * "no", an unclear answer, an error or no answer within JudgeTimeoutMs= leave the
 * classifier's decision as it is. The judge only ever makes a request stricter.
 *
 * It is only as good as the model: a small local model answers badly, and the judge is off by
 * default (docs/policy.md).
 *
 * The question is asked synchronously: the calling thread (the front that submits the
 * request; for D-Bus the front's one event loop) waits at most JudgeTimeoutMs= for the
 * answer, then cancels it.
 *
 * Test switch (honoured only with MOLLY_TEST=1 in mollyd's environment): MOLLY_TEST_JUDGE_SCORE
 * =X (0..1) stands for the classifier's score of every request, so tests can place requests
 * inside or outside the band; MOLLY_TEST_JUDGE_ANSWER=TEXT replaces the model's answer after
 * the model has answered (the question is still asked); MOLLY_TEST_JUDGE_HOLD=1 ignores the
 * model's answer, so the wait always runs into the budget.
 *
 * Threading: manager_judge_ask() from any thread, concurrently; configure from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "basic/macro.h"
#include "engine/chat.h"

struct sched;
struct vocab;
struct config;

enum judge_verdict {
	JUDGE_PERSONAL, /* "yes" */
	JUDGE_PUBLIC,   /* "no" */
	JUDGE_UNCLEAR,  /* neither, or the question could not be asked (too long, queue full) */
	JUDGE_TIMEOUT,  /* no answer within the budget */
	JUDGE_VERDICT_COUNT_,
};

const char *judge_verdict_name(enum judge_verdict v); /* "personal", "public", ... */

struct manager_judge_stats {
	uint64_t asked;                         /* questions put to the model */
	uint64_t verdicts[JUDGE_VERDICT_COUNT_]; /* by verdict */
};

struct manager_judge;

/* sched, vocab: borrowed (live as long as the judge). family: the chat template to wrap the
 * question in (has_family false: a plain completion prompt). max_context: of the scheduler. */
int manager_judge_new(struct sched *sched, const struct vocab *vocab, bool has_family,
		      enum chat_family family, uint32_t max_context, struct manager_judge **ret);
struct manager_judge *manager_judge_free(struct manager_judge *j);
DEFINE_CLEANUP_FUNC(struct manager_judge *, manager_judge_free, NULL)

/* Takes Judge=, JudgeBand=, JudgeTimeoutMs= (at start and on reload). */
void manager_judge_configure(struct manager_judge *j, const struct config *c);

/* Whether a request with this special-category score (policy_decision.special_score, or the
 * test switch's) is to be judged: Judge=yes and LOW <= score <= HIGH. *ret_score: the score
 * used. */
bool manager_judge_wanted(struct manager_judge *j, float special_score, float *ret_score);

/* Asks the model about text; waits at most JudgeTimeoutMs=. */
enum judge_verdict manager_judge_ask(struct manager_judge *j, const char *text, size_t len);

void manager_judge_get_stats(struct manager_judge *j, struct manager_judge_stats *ret);

/* The verdict of an answer: its first word, "yes" or "no" (case-insensitive, after spaces,
 * quotes and punctuation); anything else is JUDGE_UNCLEAR. For tests. */
enum judge_verdict judge_parse_answer(const char *answer, size_t len);
