/* SPDX-License-Identifier: MIT */
/*
 * test-model: the engine against llama.cpp's reference runs in ../shared/reference/.
 *
 * For every case without an adapter: the prompt tokenizes to exactly the reference ids; the
 * last-position logits are within the type's bound (below); greedy decoding reproduces the
 * reference ids up to the reference's first near-tie (a step whose top-2 logits are closer
 * than twice the bound: there a correct engine may pick the other token).
 *
 * Bounds on |logit - reference|:
 *   F32 weights: 1e-4 (the bound; llama.cpp agrees with a float64 pass to 1e-6).
 *   F16/BF16: 1e-2 (the bound). llama.cpp accumulates F16 dots in half precision on
 *     AVX512-FP16 CPUs; we accumulate in F32, which the shared README measures at 2.5e-3.
 *   Q8_0, Q4_0, Q4_K, Q6_K: we convert activations exactly as ggml does (Q8_0 / Q8_K), so the
 *     only differences are float summation order (~1e-6 relative) and the occasional
 *     activation that lands within rounding of a quantization boundary and rounds the other
 *     way. One such flip moves one activation by one quantum d = amax/127, i.e. <= 0.8% of
 *     the row's largest value; propagated through these 2-layer models the README measured
 *     flips of 3e-4..1.3e-2 in the logits. Bound: 2e-2 — tighter than the 0.08 an engine
 *     with F32 activations would show, so a wrong activation conversion fails this test.
 *   stories260K-Q8_0: its reference ran llama.cpp's flash attention on an F16 KV cache,
 *     which on that CPU (AVX512-FP16) also accumulates Q·K and the V sums in half precision;
 *     we keep F32 and plain attention. Half precision carries 2^-11 relative error per
 *     operation; with logits up to ~18 and 5 layers of it, ~1% (0.18) is the expected scale —
 *     measured 0.155 here, while our Q8_0 path matches the tiny Q8_0 reference (F32 KV) to
 *     3e-7. Bound: 0.25.
 *
 * Greedy ids are compared at every step while they agree; a disagreement is accepted only
 * at or after a step where the reference's top-2 gap was below twice the bound (a near-tie:
 * there a correct engine may pick the other token, and the sequences part).
 */
#include <errno.h>
#include <stdint.h>

#include "test.h"

#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/threadpool.h"
#include "engine/vocab.h"

struct ref_case {
	const char *model; /* under shared/ */
	const char *ref;   /* folder under shared/reference/ */
	double bound;
};

static const struct ref_case cases[] = {
	{ "models/stories260K.gguf", "stories260K/vis_base", 1e-4 },
	{ "models/stories260K-Q8_0.gguf", "stories260K/vis_q8_0_base", 0.25 },
	{ "models/tiny/tiny-llama-f32.gguf", "tiny/tiny-llama-f32", 1e-4 },
	{ "models/tiny/tiny-llama-f16.gguf", "tiny/tiny-llama-f16", 1e-2 },
	{ "models/tiny/tiny-llama-bf16.gguf", "tiny/tiny-llama-bf16", 1e-2 },
	{ "models/tiny/tiny-llama-q8_0.gguf", "tiny/tiny-llama-q8_0", 2e-2 },
	{ "models/tiny/tiny-llama-q4_0.gguf", "tiny/tiny-llama-q4_0", 2e-2 },
	{ "models/tiny/tiny-llama-q4_k.gguf", "tiny/tiny-llama-q4_k", 2e-2 },
	{ "models/tiny/tiny-llama-q6_k.gguf", "tiny/tiny-llama-q6_k", 2e-2 },
	{ "models/tiny/tiny-qwen2-f32.gguf", "tiny/tiny-qwen2-f32", 1e-4 },
	{ "models/tiny/tiny-qwen2-q8_0.gguf", "tiny/tiny-qwen2-q8_0", 2e-2 },
};

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t cap = 0, n = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap = (n + 4096 + 1) * 2;
			char *nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		size_t got = fread(buf + n, 1, 4096, f);
		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	buf[n] = 0;
	if (len)
		*len = n;
	return buf;
}

static size_t read_ints(const char *path, int32_t *out, size_t max)
{
	char *s = read_file(path, NULL), *p, *end;
	size_t n = 0;

	if (!s)
		return 0;
	for (p = s; n < max; p = end) {
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		out[n++] = (int32_t) v;
	}
	free(s);
	return n;
}

/* "step id:logit id:logit ..." → top-1 minus top-2 gap of each step. */
static size_t read_gaps(const char *path, double *gaps, size_t max)
{
	char *s = read_file(path, NULL), *line, *save = NULL;
	size_t n = 0;

	if (!s)
		return 0;
	for (line = strtok_r(s, "\n", &save); line && n < max; line = strtok_r(NULL, "\n", &save)) {
		double l1 = 0, l2 = 0;
		int id;
		char *c1 = strchr(line, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c1 || !c2 || sscanf(c1 + 1, "%lf", &l1) != 1 || sscanf(c2 + 1, "%lf", &l2) != 1)
			break;
		(void) id;
		gaps[n++] = l1 - l2;
	}
	free(s);
	return n;
}

static int run_case(const struct ref_case *rc, int n_threads)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(model_ctx_freep) struct model_ctx *ctx = NULL;
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	_cleanup_free_ char *prompt = NULL, *logit_text = NULL;
	_cleanup_free_ float *logits = NULL;
	int32_t ref_prompt[256], ids[256], ref_gen[256];
	double gaps[256], max_diff = 0;
	struct errmsg e = {};
	char path[512];
	size_t n_ref_prompt, n_ref_gen, n_gaps;
	int64_t n;

	if (access(test_shared_path(rc->model), R_OK) != 0) {
		fprintf(stderr, "  %s: not found, skipping\n", test_shared_path(rc->model));
		return TEST_SKIP;
	}
	if (model_load(test_shared_path(rc->model), &m, &e) < 0)
		TEST_FAIL_("loading %s: %s", rc->model, e.text);

	snprintf(path, sizeof(path), "reference/%s/prompt_text.txt", rc->ref);
	prompt = read_file(test_shared_path(path), NULL);
	ASSERT_TRUE(prompt);
	snprintf(path, sizeof(path), "reference/%s/prompt_ids.txt", rc->ref);
	n_ref_prompt = read_ints(test_shared_path(path), ref_prompt, 256);
	snprintf(path, sizeof(path), "reference/%s/gen_ids.txt", rc->ref);
	n_ref_gen = read_ints(test_shared_path(path), ref_gen, 256);
	snprintf(path, sizeof(path), "reference/%s/gen_top5.txt", rc->ref);
	n_gaps = read_gaps(test_shared_path(path), gaps, 256);
	ASSERT_TRUE(n_ref_prompt > 0 && n_ref_gen > 0 && n_gaps == n_ref_gen);

	/* prompt ids: exact */
	n = vocab_tokenize(m->vocab, prompt, strlen(prompt), vocab_add_bos(m->vocab), false, ids, 256);
	ASSERT_EQ(n, (int64_t) n_ref_prompt);
	for (size_t i = 0; i < n_ref_prompt; i++)
		ASSERT_EQ(ids[i], ref_prompt[i]);

	/* last-position logits */
	ASSERT_OK(threadpool_new(n_threads, &pool));
	ASSERT_OK(model_ctx_new(m, 256, 64, &ctx));
	logits = malloc(m->hp.n_vocab * sizeof(float));
	ASSERT_TRUE(logits);
	ASSERT_OK(model_decode(ctx, pool, ids, (size_t) n, logits));
	snprintf(path, sizeof(path), "reference/%s/logits_last_prompt.txt", rc->ref);
	logit_text = read_file(test_shared_path(path), NULL);
	ASSERT_TRUE(logit_text);
	{
		char *p = logit_text, *end;
		uint32_t count = 0;

		for (;;) {
			long id = strtol(p, &end, 10);
			if (end == p)
				break;
			p = end;
			double ref = strtod(p, &end);
			ASSERT_TRUE(end != p && id >= 0 && (uint32_t) id < m->hp.n_vocab);
			p = end;
			max_diff = fmax(max_diff, fabs(logits[id] - ref));
			count++;
		}
		ASSERT_EQ(count, m->hp.n_vocab);
	}
	printf("  %-34s threads %d: max |logit diff| %.3g (bound %.0e)\n", rc->model, n_threads,
	       max_diff, rc->bound);
	if (!(max_diff <= rc->bound))
		TEST_FAIL_("%s: logits differ by %g > %g", rc->model, max_diff, rc->bound);

	/* greedy ids: equal until the sequences part at or after a near-tie */
	size_t matched = 0;
	bool tie_seen = false;
	for (size_t step = 0; step < n_ref_gen; step++) {
		int32_t id = sampler_argmax(logits, m->hp.n_vocab);

		tie_seen = tie_seen || gaps[step] < 2 * rc->bound;
		if (id != ref_gen[step]) {
			if (!tie_seen)
				TEST_FAIL_("%s: greedy step %zu gave %d, reference %d (gap %g, no near-tie "
					   "before)", rc->model, step, id, ref_gen[step], gaps[step]);
			printf("  parted at step %zu after a near-tie\n", step);
			break;
		}
		matched++;
		if (step + 1 < n_ref_gen)
			ASSERT_OK(model_decode(ctx, pool, &id, 1, logits));
	}
	printf("  %zu of %zu greedy steps match\n", matched, n_ref_gen);
	return 0;
}

TEST(reference_cases_one_thread)
{
	int skipped = 0;

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		int r = run_case(&cases[i], 1);
		if (r == TEST_SKIP)
			skipped++;
		else if (r != 0)
			return r;
	}
	return skipped == (int) ELEMENTSOF(cases) ? TEST_SKIP : 0;
}

TEST(reference_cases_two_threads)
{
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		int r = run_case(&cases[i], 2);
		if (r != 0)
			return r;
	}
	return 0;
}

/* Prefill in one batch and token by token must agree: the batch path is not a different
 * computation. */
TEST(batched_prefill_equals_stepwise)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(model_ctx_freep) struct model_ctx *a = NULL, *b = NULL;
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	_cleanup_free_ float *la = NULL, *lb = NULL;
	struct errmsg e = {};
	int32_t ids[] = { 1, 403, 407, 261, 378, 383, 286, 300, 20, 400 };

	if (model_load(test_shared_path("models/tiny/tiny-llama-q4_k.gguf"), &m, &e) < 0)
		return TEST_SKIP;
	ASSERT_OK(threadpool_new(2, &pool));
	ASSERT_OK(model_ctx_new(m, 64, 4, &a)); /* batches of 4: exercises the split */
	ASSERT_OK(model_ctx_new(m, 64, 1, &b));
	la = malloc(m->hp.n_vocab * sizeof(float));
	lb = malloc(m->hp.n_vocab * sizeof(float));
	ASSERT_OK(model_decode(a, pool, ids, ELEMENTSOF(ids), la));
	for (size_t i = 0; i < ELEMENTSOF(ids); i++)
		ASSERT_OK(model_decode(b, pool, &ids[i], 1, lb));
	for (uint32_t i = 0; i < m->hp.n_vocab; i++)
		ASSERT_NEAR(la[i], lb[i], 1e-6);
	return 0;
}

TEST(decode_rejects_bad_tokens_and_full_context)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(model_ctx_freep) struct model_ctx *c = NULL;
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	struct errmsg e = {};
	int32_t bad = 512, neg = -1, ok[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

	if (model_load(test_shared_path("models/stories260K.gguf"), &m, &e) < 0)
		return TEST_SKIP;
	ASSERT_OK(threadpool_new(1, &pool));
	ASSERT_OK(model_ctx_new(m, 8, 8, &c));
	ASSERT_ERR(model_decode(c, pool, &bad, 1, NULL), -EINVAL);
	ASSERT_ERR(model_decode(c, pool, &neg, 1, NULL), -EINVAL);
	ASSERT_EQ(model_ctx_n_past(c), 0);
	ASSERT_OK(model_decode(c, pool, ok, 8, NULL));
	ASSERT_ERR(model_decode(c, pool, ok, 1, NULL), -ENOSPC);
	model_ctx_truncate(c, 4);
	ASSERT_OK(model_decode(c, pool, ok, 4, NULL));
	return 0;
}

TEST(load_errors_name_the_problem)
{
	struct model *m = NULL;
	struct errmsg e = {};

	/* A vocabulary-only file has no tensors: loading it as a model must say what is missing. */
	ASSERT_TRUE(model_load(test_shared_path("reference/tokenizers/ggml-vocab-llama-spm.gguf"), &m,
			       &e) < 0);
	ASSERT_TRUE(m == NULL);
	ASSERT_TRUE(strlen(e.text) > 0);
	printf("  vocab-only file: %s\n", e.text);
	ASSERT_TRUE(model_load("/nonexistent/model.gguf", &m, &e) < 0);
	/* An adapter file is not a model. */
	ASSERT_TRUE(model_load(test_shared_path("models/stories260K-lora-all-r8.gguf"), &m, &e) < 0);
	printf("  adapter file: %s\n", e.text);
	return 0;
}
