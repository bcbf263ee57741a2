/* SPDX-License-Identifier: MIT */
/*
 * lora-gen.c: seeded random adapters in PEFT and GGUF LoRA form (see lora-gen.h).
 */
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/gguf-writer.h"
#include "../engine/model.h"
#include "../engine/quant.h"
#include "atomic-file.h"
#include "lora-gen.h"
#include "safetensors.h"

static const char *const peft_names[LORA_TARGET_COUNT_] = {
	"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	"mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",
};
static const char *const peft_short[LORA_TARGET_COUNT_] = {
	"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
};
static const char *const gguf_names[LORA_TARGET_COUNT_] = {
	"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

int lora_gen_peft_key(uint32_t layer, enum lora_target t, char *buf, size_t size)
{
	if ((unsigned) t >= LORA_TARGET_COUNT_)
		return -EINVAL;
	return snprintf(buf, size, "model.layers.%" PRIu32 ".%s", layer, peft_names[t]);
}

int lora_gen_gguf_name(uint32_t layer, enum lora_target t, char *buf, size_t size)
{
	if ((unsigned) t >= LORA_TARGET_COUNT_)
		return -EINVAL;
	return snprintf(buf, size, "blk.%" PRIu32 ".%s.weight", layer, gguf_names[t]);
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void lora_gen_values(uint64_t seed, uint32_t layer, enum lora_target t, bool b_matrix, float std,
		     float *out, size_t n)
{
	/* One stream per matrix, so formats and subsets of targets agree on the values. */
	uint64_t s = seed ^ ((uint64_t) layer << 32 | (uint64_t) t << 8 | (uint64_t) b_matrix);

	(void) splitmix64(&s);
	for (size_t i = 0; i < n; i += 2) {
		/* Box-Muller on two uniforms in (0, 1]. */
		double u1 = ((double) (splitmix64(&s) >> 11) + 1.0) / 9007199254740992.0;
		double u2 = (double) (splitmix64(&s) >> 11) / 9007199254740992.0;
		double r = sqrt(-2.0 * log(u1));

		out[i] = (float) (std * r * cos(2 * M_PI * u2));
		if (i + 1 < n)
			out[i + 1] = (float) (std * r * sin(2 * M_PI * u2));
	}
}

struct gen_mat {
	uint32_t layer;
	enum lora_target target;
	uint32_t n_in, n_out;
	void *a, *b; /* owned, in dtype */
};

static size_t type_size(uint32_t dtype)
{
	return dtype == GGML_TYPE_F32 ? 4 : 2;
}

static void *convert_values(const struct lora_gen_opts *o, const float *src, size_t n)
{
	_cleanup_free_ float *v = malloc(n * sizeof(float));
	void *out;

	if (!v)
		return NULL;
	memcpy(v, src, n * sizeof(float));
	if (o->dtype == GGML_TYPE_F32)
		return TAKE_PTR(v);
	out = malloc(n * 2);
	if (!out)
		return NULL;
	/* Scalar round-to-nearest-even, the same function readers use to check the values. */
	for (size_t i = 0; i < n; i++)
		((uint16_t *) out)[i] =
			o->dtype == GGML_TYPE_F16 ? f32_to_fp16(v[i]) : f32_to_bf16(v[i]);
	return out;
}

static void *make_values(const struct lora_gen_opts *o, uint32_t layer, enum lora_target t, bool b,
			 size_t n, float std)
{
	_cleanup_free_ float *v = malloc(n * sizeof(float));

	if (!v)
		return NULL;
	lora_gen_values(o->seed, layer, t, b, std, v, n);
	return convert_values(o, v, n);
}

static int write_peft_config(const char *path, const struct lora_gen_opts *o, float alpha,
			     struct errmsg *e)
{
	_cleanup_(atomic_file_freep) struct atomic_file *f = NULL;
	struct json_object *root = json_object_new_object(), *targets = json_object_new_array();
	const char *text;
	int r;

	if (!root || !targets) {
		json_object_put(root);
		json_object_put(targets);
		return -ENOMEM;
	}
	for (int t = 0; t < LORA_TARGET_COUNT_; t++)
		if (o->targets & (1u << t))
			json_object_array_add(targets, json_object_new_string(peft_short[t]));
	json_object_object_add(root, "peft_type", json_object_new_string("LORA"));
	json_object_object_add(root, "task_type", json_object_new_string("CAUSAL_LM"));
	json_object_object_add(root, "base_model_name_or_path",
			       json_object_new_string(o->base->name ? o->base->name : ""));
	json_object_object_add(root, "r", json_object_new_int64(o->rank));
	json_object_object_add(root, "lora_alpha", json_object_new_double(alpha));
	json_object_object_add(root, "lora_dropout", json_object_new_double(0.0));
	json_object_object_add(root, "target_modules", targets);
	json_object_object_add(root, "bias", json_object_new_string("none"));
	json_object_object_add(root, "fan_in_fan_out", json_object_new_boolean(0));
	json_object_object_add(root, "use_rslora", json_object_new_boolean(0));
	json_object_object_add(root, "use_dora", json_object_new_boolean(0));
	json_object_object_add(root, "rank_pattern", json_object_new_object());
	json_object_object_add(root, "alpha_pattern", json_object_new_object());
	json_object_object_add(root, "modules_to_save", NULL);
	json_object_object_add(root, "inference_mode", json_object_new_boolean(1));
	text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
							    JSON_C_TO_STRING_SPACED |
							    JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!text) {
		json_object_put(root);
		return -ENOMEM;
	}
	r = atomic_file_new(path, &f, e);
	if (r >= 0)
		r = atomic_file_write(f, text, strlen(text), e);
	if (r >= 0)
		r = atomic_file_write(f, "\n", 1, e);
	if (r >= 0)
		r = atomic_file_finish(f, e);
	json_object_put(root);
	return r;
}

static int write_peft(const char *dir, const struct lora_gen_opts *o, struct gen_mat *m, size_t n,
		      float alpha, struct errmsg *e)
{
	static const char *const meta[] = { "format", "pt" };
	_cleanup_free_ struct safetensors_tensor *t = NULL;
	_cleanup_free_ char *st_path = NULL, *cfg_path = NULL;
	enum safetensors_dtype dt = o->dtype == GGML_TYPE_F32   ? SAFETENSORS_F32
				    : o->dtype == GGML_TYPE_F16 ? SAFETENSORS_F16
								: SAFETENSORS_BF16;
	size_t k = 0;
	int r;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return errmsg_set(e, -errno, "%s: cannot create directory: %s", dir,
				  strerror(errno));
	if (asprintf(&st_path, "%s/adapter_model.safetensors", dir) < 0) {
		st_path = NULL;
		return -ENOMEM;
	}
	if (asprintf(&cfg_path, "%s/adapter_config.json", dir) < 0) {
		cfg_path = NULL;
		return -ENOMEM;
	}
	t = calloc(2 * n, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 2; b++) {
			char key[128];

			(void) lora_gen_peft_key(m[i].layer, m[i].target, key, sizeof(key));
			if (asprintf(&t[k].name, "base_model.model.%s.lora_%c.weight", key,
				     b ? 'B' : 'A') < 0) {
				t[k].name = NULL;
				r = -ENOMEM;
				goto out;
			}
			t[k].dtype = dt;
			t[k].n_dims = 2;
			t[k].shape[0] = b ? m[i].n_out : o->rank;
			t[k].shape[1] = b ? o->rank : m[i].n_in;
			t[k].data = b ? m[i].b : m[i].a;
			k++;
		}
	r = safetensors_write(st_path, t, k, meta, 1, e);
	if (r >= 0)
		r = write_peft_config(cfg_path, o, alpha, e);
out:
	for (size_t i = 0; i < 2 * n; i++)
		free(t[i].name);
	return r;
}

static int write_gguf(const char *path, const struct lora_gen_opts *o, struct gen_mat *m, size_t n,
		      float alpha, struct errmsg *e)
{
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
	_cleanup_free_ char *arch = NULL;
	size_t es = type_size(o->dtype);
	int r;

	if (gguf_get_string(o->base->gguf, "general.architecture", &arch) < 0)
		return errmsg_set(e, -EBADMSG, "base has no general.architecture");
	r = gguf_writer_new(path, &w, e);
	if (r < 0)
		return r;
	if ((r = gguf_writer_add_str(w, "general.architecture", arch, e)) < 0 ||
	    (r = gguf_writer_add_str(w, "general.type", "adapter", e)) < 0 ||
	    (r = gguf_writer_add_str(w, "adapter.type", "lora", e)) < 0 ||
	    (r = gguf_writer_add_f32(w, "adapter.lora.alpha", alpha, e)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		char base[128], name[160];
		uint64_t ne_a[2] = { m[i].n_in, o->rank }, ne_b[2] = { o->rank, m[i].n_out };

		(void) lora_gen_gguf_name(m[i].layer, m[i].target, base, sizeof(base));
		(void) snprintf(name, sizeof(name), "%s.lora_a", base);
		r = gguf_writer_add_tensor(w, name, o->dtype, 2, ne_a, e);
		if (r < 0)
			return r;
		(void) snprintf(name, sizeof(name), "%s.lora_b", base);
		r = gguf_writer_add_tensor(w, name, o->dtype, 2, ne_b, e);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < n; i++) {
		if ((r = gguf_writer_write(w, m[i].a, (size_t) o->rank * m[i].n_in * es, e)) < 0 ||
		    (r = gguf_writer_write(w, m[i].b, (size_t) o->rank * m[i].n_out * es, e)) < 0)
			return r;
	}
	return gguf_writer_finish(w, e);
}

/* The matrices in the format o asks for. */
static int write_mats(const char *path, const struct lora_gen_opts *o, struct gen_mat *m,
		      size_t n, float alpha, struct errmsg *e)
{
	return o->format == LORA_FORMAT_PEFT ? write_peft(path, o, m, n, alpha, e)
					     : write_gguf(path, o, m, n, alpha, e);
}

static void gen_mats_free(struct gen_mat *m, size_t n)
{
	for (size_t i = 0; m && i < n; i++) {
		free(m[i].a);
		free(m[i].b);
	}
	free(m);
}

int lora_gen_write(const char *path, const struct lora_gen_opts *o, struct errmsg *e)
{
	struct gen_mat *m = NULL;
	uint32_t targets;
	size_t n = 0;
	float alpha, b_std;
	int r = 0;

	assert_return(path && o && o->base, -EINVAL);
	if (o->rank == 0)
		return errmsg_set(e, -EINVAL, "rank must be at least 1");
	if (o->dtype != GGML_TYPE_F32 && o->dtype != GGML_TYPE_F16 && o->dtype != GGML_TYPE_BF16)
		return errmsg_set(e, -EINVAL, "dtype must be f32, f16 or bf16");
	if (o->format != LORA_FORMAT_PEFT && o->format != LORA_FORMAT_GGUF)
		return errmsg_set(e, -EINVAL, "format must be peft or gguf");
	if (!isfinite(o->alpha) || o->alpha < 0)
		return errmsg_set(e, -EINVAL, "alpha must be a finite number >= 0");
	targets = o->targets ? o->targets : (1u << LORA_TARGET_COUNT_) - 1;
	alpha = o->alpha > 0 ? o->alpha : (float) o->rank;
	b_std = o->b_std > 0 ? o->b_std : 0.02f;

	m = calloc((size_t) o->base->hp.n_layer * LORA_TARGET_COUNT_ + 1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	for (uint32_t l = 0; l < o->base->hp.n_layer; l++)
		for (int t = 0; t < LORA_TARGET_COUNT_; t++) {
			struct gen_mat *g;
			const struct model_layer *L = &o->base->layers[l];
			const struct weight *w[LORA_TARGET_COUNT_] = { &L->wq,       &L->wk,
								       &L->wv,       &L->wo,
								       &L->ffn_gate, &L->ffn_up,
								       &L->ffn_down };

			if (!(targets & (1u << t)))
				continue;
			g = &m[n++];
			*g = (struct gen_mat){ .layer = l,
					       .target = (enum lora_target) t,
					       .n_in = (uint32_t) w[t]->n_in,
					       .n_out = (uint32_t) w[t]->n_out };
			g->a = make_values(o, l, g->target, false, (size_t) o->rank * g->n_in,
					   1.0f / sqrtf((float) g->n_in));
			g->b = make_values(o, l, g->target, true, (size_t) o->rank * g->n_out,
					   b_std);
			if (!g->a || !g->b) {
				r = -ENOMEM;
				goto out;
			}
		}
	struct lora_gen_opts resolved = *o;

	resolved.targets = targets;
	r = write_mats(path, &resolved, m, n, alpha, e);
out:
	gen_mats_free(m, n);
	return r;
}

int lora_gen_write_mats(const char *path, const struct lora_gen_opts *o,
			const struct lora_gen_mat *mats, size_t n, struct errmsg *e)
{
	struct gen_mat *m = NULL;
	struct lora_gen_opts resolved;
	float alpha;
	int r = 0;

	assert_return(path && o && o->base && (mats || n == 0), -EINVAL);
	if (o->rank == 0 || n == 0)
		return errmsg_set(e, -EINVAL, "rank and the number of matrices must be at least 1");
	if (o->dtype != GGML_TYPE_F32 && o->dtype != GGML_TYPE_F16 && o->dtype != GGML_TYPE_BF16)
		return errmsg_set(e, -EINVAL, "dtype must be f32, f16 or bf16");
	if (o->format != LORA_FORMAT_PEFT && o->format != LORA_FORMAT_GGUF)
		return errmsg_set(e, -EINVAL, "format must be peft or gguf");
	alpha = o->alpha > 0 ? o->alpha : (float) o->rank;
	resolved = *o;
	resolved.targets = 0;
	m = calloc(n, sizeof(*m));
	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		m[i] = (struct gen_mat){ .layer = mats[i].layer, .target = mats[i].target,
					 .n_in = mats[i].n_in, .n_out = mats[i].n_out };
		resolved.targets |= 1u << mats[i].target;
		m[i].a = convert_values(o, mats[i].a, (size_t) o->rank * m[i].n_in);
		m[i].b = convert_values(o, mats[i].b, (size_t) o->rank * m[i].n_out);
		if (!m[i].a || !m[i].b) {
			r = -ENOMEM;
			goto out;
		}
	}
	r = write_mats(path, &resolved, m, n, alpha, e);
out:
	gen_mats_free(m, n);
	return r;
}
