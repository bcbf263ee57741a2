/* SPDX-License-Identifier: MIT */
/*
 * test-lora: LoRA numerics.
 *
 *  - llama.cpp's reference runs with adapters (stories260K + GGUF LoRA, scales 1 and 0.5):
 *    prompt ids exact, last-position logits within 1e-4 (adapters kept in F32, as the files
 *    store them), greedy ids up to the first near-tie; and the same ids through the scheduler
 *    with the adapter in F16 (the form the daemon serves), whose logits are bounded by the
 *    F16 rounding of A and B (2^-11 relative per element): 1e-2, measured ~3.5e-3.
 *  - Merged reference: W' = W + s·B·A merged (in double) into F32 weights gives the logits of
 *    the unmerged computation within 1e-4 and the same greedy ids, on stories260K, the tiny
 *    llama/qwen2 F32 models and a small explicit molly-mkmodel shape with a random PEFT
 *    adapter from molly-mkadapter (rank 4, all seven targets, two weighted adapters at once).
 */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>

#include "test.h"

#include "engine/forward.h"
#include "engine/kernels.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/sampler.h"
#include "engine/threadpool.h"
#include "engine/vocab.h"
#include "lora/adapter.h"
#include "lora/resident.h"
#include "sched/sched.h"

struct pages {
	void *p[4096];
	size_t n;
	size_t bytes;
};

static void *page_alloc(void *userdata, uint32_t *ret_id)
{
	struct pages *pg = userdata;
	void *p;

	if (pg->n == ELEMENTSOF(pg->p) || posix_memalign(&p, 64, pg->bytes) != 0)
		return NULL;
	pg->p[pg->n] = p;
	*ret_id = (uint32_t) pg->n++;
	return p;
}

static void pages_done(struct pages *pg)
{
	for (size_t i = 0; i < pg->n; i++)
		free(pg->p[i]);
	pg->n = 0;
}

static struct lora_adapter *open_adapter(const char *path, const struct model *m, uint32_t dtype)
{
	/* F32 sources stay F32 only when asked (keep_f32): the daemon serves F16/BF16 */
	struct lora_open_opts o = { .base = m, .dtype = dtype == GGML_TYPE_F32 ? 0 : dtype,
				    .keep_f32 = dtype == GGML_TYPE_F32 };
	struct lora_adapter *a = NULL;
	struct errmsg e = {};

	if (lora_adapter_open(path, &o, &a, NULL, &e) < 0) {
		fprintf(stderr, "  %s: %s\n", path, e.text);
		return NULL;
	}
	return a;
}

static int read_ints(const char *path, int32_t *out, size_t max)
{
	FILE *f = fopen(path, "re");
	int n = 0;

	if (!f)
		return -errno;
	while ((size_t) n < max && fscanf(f, "%d", &out[n]) == 1)
		n++;
	fclose(f);
	return n;
}

/* logits of the last prompt position with the given adapters applied unmerged */
static int run_logits(const struct model *m, const struct lora_resident *const *res,
		      const float *scales, size_t n_res, const int32_t *ids, size_t n, float *logits,
		      int32_t *greedy, size_t n_greedy)
{
	_cleanup_(model_ctx_freep) struct model_ctx *c = NULL;
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	struct forward_lora fl[4];

	for (size_t i = 0; i < n_res; i++)
		fl[i] = (struct forward_lora){ .res = res[i], .scale = scales[i], .order = i };
	ASSERT_OK(threadpool_new(2, &pool));
	ASSERT_OK(model_ctx_new(m, 256, 64, &c));
	ASSERT_OK(model_ctx_set_loras(c, fl, n_res));
	ASSERT_OK(model_decode(c, pool, ids, n, logits));
	if (greedy) {
		_cleanup_free_ float *l = malloc(m->hp.n_vocab * sizeof(float));

		memcpy(l, logits, m->hp.n_vocab * sizeof(float));
		for (size_t i = 0; i < n_greedy; i++) {
			greedy[i] = sampler_argmax(l, m->hp.n_vocab);
			if (i + 1 < n_greedy)
				ASSERT_OK(model_decode(c, pool, &greedy[i], 1, l));
		}
	}
	return 0;
}

struct ref_case {
	const char *dir;
	const char *adapter;
	float scale;
};

static const struct ref_case ref_cases[] = {
	{ "vis_lora_attn_r8", "models/stories260K-lora-attn-r8.gguf", 1.0f },
	{ "vis_lora_all_r8", "models/stories260K-lora-all-r8.gguf", 1.0f },
	{ "vis_lora_all_r8_s05", "models/stories260K-lora-all-r8.gguf", 0.5f },
};

static int check_ref(const struct ref_case *rc, uint32_t dtype, double bound)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
	_cleanup_(lora_resident_freep) struct lora_resident *res = NULL;
	struct pages pg = { .bytes = 65536 };
	struct errmsg e = {};
	char path[256], prompt[256] = "";
	int32_t ids[64], ref_ids[64], ref_gen[64], gen[64];
	float logits[512];
	double max_diff = 0;
	FILE *f;
	int n, n_ref, n_gen;

	if (model_load(test_shared_path("models/stories260K.gguf"), &m, &e) < 0)
		return TEST_SKIP;
	a = open_adapter(test_shared_path(rc->adapter), m, dtype);
	ASSERT_TRUE(a);
	ASSERT_OK(lora_resident_new(a, LORA_HOT_STORED, m->hp.n_layer, pg.bytes, page_alloc, &pg, &res, &e));
	snprintf(path, sizeof(path), "reference/stories260K/%s/prompt_text.txt", rc->dir);
	f = fopen(test_shared_path(path), "re");
	ASSERT_TRUE(f && fgets(prompt, sizeof(prompt), f));
	fclose(f);
	snprintf(path, sizeof(path), "reference/stories260K/%s/prompt_ids.txt", rc->dir);
	n_ref = read_ints(test_shared_path(path), ref_ids, 64);
	snprintf(path, sizeof(path), "reference/stories260K/%s/gen_ids.txt", rc->dir);
	n_gen = read_ints(test_shared_path(path), ref_gen, 64);
	n = (int) vocab_tokenize(m->vocab, prompt, strlen(prompt), true, false, ids, 64);
	ASSERT_EQ(n, n_ref);
	for (int i = 0; i < n; i++)
		ASSERT_EQ(ids[i], ref_ids[i]);

	const struct lora_resident *rs[1] = { res };
	ASSERT_EQ(run_logits(m, rs, &rc->scale, 1, ids, (size_t) n, logits, gen, (size_t) n_gen), 0);
	snprintf(path, sizeof(path), "reference/stories260K/%s/logits_last_prompt.txt", rc->dir);
	f = fopen(test_shared_path(path), "re");
	ASSERT_TRUE(f);
	for (int i = 0; i < 512; i++) {
		int id;
		double v;

		ASSERT_TRUE(fscanf(f, "%d %lf", &id, &v) == 2 && id == i);
		max_diff = fmax(max_diff, fabs(logits[i] - v));
	}
	fclose(f);
	pages_done(&pg);
	printf("  %s (%s adapter): max |logit diff| %.3g (bound %.0e)\n", rc->dir,
	       quant_type_name(dtype), max_diff, bound);
	if (!(max_diff <= bound))
		TEST_FAIL_("%s: logits differ by %g", rc->dir, max_diff);
	/* the stories reference has no near-tie closer than 2·bound in these runs: all ids */
	for (int i = 0; i < n_gen; i++)
		if (gen[i] != ref_gen[i])
			TEST_FAIL_("%s: greedy step %d: %d vs reference %d", rc->dir, i, gen[i], ref_gen[i]);
	return 0;
}

TEST(reference_adapters_f32)
{
	for (size_t i = 0; i < ELEMENTSOF(ref_cases); i++) {
		int r = check_ref(&ref_cases[i], GGML_TYPE_F32, 1e-4);
		if (r)
			return r;
	}
	return 0;
}

TEST(reference_adapters_f16)
{
	for (size_t i = 0; i < ELEMENTSOF(ref_cases); i++) {
		int r = check_ref(&ref_cases[i], GGML_TYPE_F16, 1e-2);
		if (r)
			return r;
	}
	return 0;
}

struct sched_result {
	int32_t ids[64];
	int n;
	bool done;
};

static void collect(const struct sched_event *ev, void *userdata)
{
	struct sched_result *r = userdata;

	if (ev->type == SCHED_EVENT_TOKEN && r->n < 64)
		r->ids[r->n++] = ev->token;
	if (ev->type != SCHED_EVENT_TOKEN)
		r->done = true;
}

TEST(reference_adapters_through_scheduler)
{
	for (size_t c = 0; c < ELEMENTSOF(ref_cases); c++) {
		const struct ref_case *rc = &ref_cases[c];
		_cleanup_(model_freep) struct model *m = NULL;
		_cleanup_(sched_freep) struct sched *s = NULL;
		struct sched_result res = {};
		struct errmsg e = {};
		char path[256];
		int32_t ids[64], ref_gen[64];
		struct lora_adapter *a;
		struct sched_lora sl = { "x", rc->scale };
		struct sched_request req = { .on_event = collect, .userdata = &res, .max_tokens = 64,
					     .loras = &sl, .n_loras = 1, .ignore_eos = true };
		uint64_t id;
		int n_ids;

		if (model_load(test_shared_path("models/stories260K.gguf"), &m, &e) < 0)
			return TEST_SKIP;
		struct lora_open_opts o = { .base = m, .name = "x" };
		ASSERT_OK(lora_adapter_open(test_shared_path(rc->adapter), &o, &a, NULL, &e));
		ASSERT_OK(sched_new(m, &(struct sched_params){ .n_threads = 2 }, &s, &e));
		ASSERT_OK(sched_add_adapter(s, a, &e));
		snprintf(path, sizeof(path), "reference/stories260K/%s/prompt_ids.txt", rc->dir);
		n_ids = read_ints(test_shared_path(path), ids, 64);
		snprintf(path, sizeof(path), "reference/stories260K/%s/gen_ids.txt", rc->dir);
		ASSERT_EQ(read_ints(test_shared_path(path), ref_gen, 64), 64);
		req.prompt = ids;
		req.n_prompt = (size_t) n_ids;
		sampler_params_default(&req.sampling);
		req.sampling.temperature = 0;
		ASSERT_OK(sched_submit(s, &req, &id, &e));
		while (!res.done)
			ASSERT_TRUE(sched_step(s) >= 0);
		ASSERT_EQ(res.n, 64);
		for (int i = 0; i < 64; i++)
			if (res.ids[i] != ref_gen[i])
				TEST_FAIL_("%s via scheduler: step %d: %d vs %d", rc->dir, i, res.ids[i],
					   ref_gen[i]);
	}
	return 0;
}

/* v[0..n) (element i at v[i * stride]) through Q8_0 and back, as the hot form holds a row */
static void q8_0_round_trip(float *v, size_t n, size_t stride)
{
	float row[4096] = { 0 };
	struct block_q8_0 q[4096 / QK8_0];

	if (n > 4096 || n % QK8_0) /* the callers check; a test model never has wider rows */
		abort();
	for (size_t i = 0; i < n; i++)
		row[i] = v[i * stride];
	quant_quantize_row_ref(GGML_TYPE_Q8_0, row, q, (int64_t) n);
	quant_dequantize_row(GGML_TYPE_Q8_0, q, row, (int64_t) n);
	for (size_t i = 0; i < n; i++)
		v[i * stride] = row[i];
}

/* Merges scale · s · B·A into the F32 weight of (layer, target), in double; with hot Q8_0 the
 * adapter's values as the hot form rounds them (A's rows and Bᵀ's rows through Q8_0). */
static int merge_into(struct model *m, const struct lora_adapter *a, float user_scale,
		      enum lora_hot_type hot, float **owned, size_t *n_owned)
{
	for (size_t i = 0; i < a->n_mats; i++) {
		const struct lora_mat *mt = &a->mats[i];
		struct model_layer *L = &m->layers[mt->layer];
		struct weight *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up,
					&L->ffn_down };
		struct weight *w = ws[mt->target];
		_cleanup_free_ uint16_t *A = malloc(lora_mat_bytes(mt, false));
		_cleanup_free_ uint16_t *B = malloc(lora_mat_bytes(mt, true));
		float *W = malloc(sizeof(float) * w->n_in * w->n_out);

		ASSERT_TRUE(A && B && W && w->type == GGML_TYPE_F32);
		ASSERT_OK(lora_adapter_read(a, i, false, A, lora_mat_bytes(mt, false)));
		ASSERT_OK(lora_adapter_read(a, i, true, B, lora_mat_bytes(mt, true)));
		_cleanup_free_ float *Af = malloc(sizeof(float) * mt->rank * mt->n_in);
		_cleanup_free_ float *Bf = malloc(sizeof(float) * mt->rank * mt->n_out);

		ASSERT_TRUE(Af && Bf);
		for (size_t j = 0; j < (size_t) mt->rank * mt->n_in; j++)
			Af[j] = fp16_to_f32(A[j]);
		for (size_t j = 0; j < (size_t) mt->rank * mt->n_out; j++)
			Bf[j] = fp16_to_f32(B[j]);
		if (hot == LORA_HOT_Q8_0 && mt->n_in % QK8_0 == 0 && mt->n_out % QK8_0 == 0)
			for (uint32_t k = 0; k < mt->rank; k++) {
				q8_0_round_trip(Af + (size_t) k * mt->n_in, mt->n_in, 1);
				q8_0_round_trip(Bf + k, mt->n_out, mt->rank); /* B's column k */
			}
		memcpy(W, w->data, sizeof(float) * w->n_in * w->n_out);
		for (int64_t o = 0; o < w->n_out; o++)
			for (int64_t c = 0; c < w->n_in; c++) {
				double d = 0;

				for (uint32_t k = 0; k < mt->rank; k++)
					d += (double) Bf[o * mt->rank + k] * Af[k * mt->n_in + c];
				W[o * w->n_in + c] = (float) (W[o * w->n_in + c] +
							      (double) user_scale * mt->scale * d);
			}
		w->data = W;
		w->packed = NULL; /* the copy repacked at load still holds the unmerged rows */
		owned[(*n_owned)++] = W;
	}
	return 0;
}

static int check_merged(const char *model_path, const char *const *adapter_paths,
			const float *scales, size_t n_ad, enum lora_hot_type hot)
{
	_cleanup_(model_freep) struct model *m = NULL, *merged = NULL;
	struct lora_adapter *ad[4] = {};
	struct lora_resident *res[4] = {};
	struct pages pg = { .bytes = 1 << 17 };
	struct errmsg e = {};
	float *owned[4096];
	size_t n_owned = 0;
	int32_t ids[] = { 1, 403, 407, 261, 378, 383, 286, 300, 20 }, g1[24], g2[24];
	_cleanup_free_ float *l1 = NULL, *l2 = NULL;
	double max_diff = 0;
	int ret = 0;

	if (model_load(model_path, &m, &e) < 0 || model_load(model_path, &merged, &e) < 0)
		TEST_FAIL_("%s: %s", model_path, e.text);
	for (size_t i = 0; i < n_ad; i++) {
		ad[i] = open_adapter(adapter_paths[i], m, GGML_TYPE_F16);
		ASSERT_TRUE(ad[i]);
		ASSERT_OK(lora_resident_new(ad[i], hot, m->hp.n_layer, pg.bytes, page_alloc, &pg,
					    &res[i], &e));
		ASSERT_EQ(merge_into(merged, ad[i], scales[i], hot, owned, &n_owned), 0);
	}
	for (size_t i = 0; i < ELEMENTSOF(ids); i++)
		ids[i] %= (int32_t) m->hp.n_vocab;
	l1 = malloc(m->hp.n_vocab * sizeof(float));
	l2 = malloc(m->hp.n_vocab * sizeof(float));
	ASSERT_EQ(run_logits(m, (const struct lora_resident *const *) res, scales, n_ad, ids,
			     ELEMENTSOF(ids), l1, g1, 24), 0);
	ASSERT_EQ(run_logits(merged, NULL, NULL, 0, ids, ELEMENTSOF(ids), l2, g2, 24), 0);
	for (uint32_t i = 0; i < m->hp.n_vocab; i++)
		max_diff = fmax(max_diff, fabs(l1[i] - l2[i]));
	{
		/* the adapters must matter, or this comparison could not fail */
		_cleanup_free_ float *l0 = malloc(m->hp.n_vocab * sizeof(float));
		double effect = 0;

		ASSERT_EQ(run_logits(m, NULL, NULL, 0, ids, ELEMENTSOF(ids), l0, NULL, 0), 0);
		for (uint32_t i = 0; i < m->hp.n_vocab; i++)
			effect = fmax(effect, fabs(l1[i] - l0[i]));
		printf("  adapter effect on the logits: %.3g\n", effect);
		ASSERT_TRUE(effect > 1e-2);
	}
	printf("  %s + %zu adapter(s), hot %s: unmerged vs merged max |logit diff| %.3g\n",
	       model_path, n_ad, hot == LORA_HOT_Q8_0 ? "q8_0" : "as stored", max_diff);
	if (!(max_diff <= 1e-4))
		ret = 1;
	for (int i = 0; i < 24 && !ret; i++)
		if (g1[i] != g2[i]) {
			fprintf(stderr, "  greedy step %d: %d vs merged %d\n", i, g1[i], g2[i]);
			ret = 1; /* margins here are far above 1e-4; a mismatch is a real bug */
		}
	for (size_t i = 0; i < n_ad; i++) {
		lora_resident_free(res[i]);
		lora_adapter_free(ad[i]);
	}
	for (size_t i = 0; i < n_owned; i++)
		free(owned[i]);
	pages_done(&pg);
	return ret;
}

TEST(merged_reference_shared_models)
{
	const char *all[] = { test_shared_path("models/stories260K-lora-all-r8.gguf"),
			      test_shared_path("models/stories260K-lora-attn-r8.gguf") };
	float one = 1.0f, two[] = { 0.7f, 1.3f };

	if (access(all[0], R_OK) != 0)
		return TEST_SKIP;
	if (check_merged(test_shared_path("models/stories260K.gguf"), all, &one, 1, LORA_HOT_STORED))
		return 1;
	if (check_merged(test_shared_path("models/stories260K.gguf"), all, two, 2, LORA_HOT_STORED))
		return 1;
	return 0;
}

/* Random adapters from molly-mkadapter (PEFT and GGUF) on tiny and explicit shapes. */
TEST(merged_reference_generated)
{
	char dir[] = "/tmp/test-lora-XXXXXX", cmd[8192], a1[512], a2[512], model[512];
	const char *bin = getenv("MOLLY_BIN_DIR");
	const char *bases[] = { "models/tiny/tiny-llama-f32.gguf", "models/tiny/tiny-qwen2-f32.gguf",
				NULL };
	float scales[] = { 1.0f, 0.5f };
	int ret = 0;

#ifdef MOLLY_BIN_DIR
	if (!bin)
		bin = MOLLY_BIN_DIR;
#endif
	ASSERT_TRUE(bin && mkdtemp(dir));
	snprintf(model, sizeof(model), "%s/small.gguf", dir);
	snprintf(cmd, sizeof(cmd),
		 "%s/molly-mkmodel --preset 100m --hidden 96 --layers 3 --heads 6 --kv-heads 2 --ffn 160 "
		 "--vocab-size 300 --context 128 --type f32 --seed 5 --out %s >/dev/null",
		 bin, model);
	ASSERT_EQ(system(cmd), 0);
	for (size_t b = 0; b < ELEMENTSOF(bases) && !ret; b++) {
		const char *base = bases[b] ? test_shared_path(bases[b]) : model;
		const char *paths[2] = { a1, a2 };

		if (access(base, R_OK) != 0) { /* a shared model missing: the generated one still runs */
			printf("  %s: not found, skipped\n", base);
			continue;
		}

		snprintf(a1, sizeof(a1), "%s/peft-%zu", dir, b);
		snprintf(a2, sizeof(a2), "%s/gguf-%zu.gguf", dir, b);
		snprintf(cmd, sizeof(cmd),
			 "%s/molly-mkadapter --base %s --rank 4 --alpha 8 --targets all --seed %zu "
			 "--format peft --out %s >/dev/null && "
			 "%s/molly-mkadapter --base %s --rank 6 --targets q,v,down --seed %zu "
			 "--format gguf --out %s >/dev/null",
			 bin, base, 11 + b, a1, bin, base, 21 + b, a2);
		ASSERT_EQ(system(cmd), 0);
		ret = check_merged(base, paths, scales, 2, LORA_HOT_STORED);
		/* the generated base's widths (96, 32, 160) are whole Q8_0 blocks: every matrix */
		if (!ret && !bases[b])
			ret = check_merged(base, paths, scales, 2, LORA_HOT_Q8_0);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	(void) system(cmd);
	return ret;
}
