/* SPDX-License-Identifier: MIT */
/*
 * lora-gguf.c: llama.cpp's GGUF LoRA files (convert_lora_to_gguf.py, read by
 * src/llama-adapter.cpp):
 *
 *   general.architecture  the base's architecture      general.type = "adapter"
 *   adapter.type = "lora"  adapter.lora.alpha (f32; absent or 0: scale 1, as llama.cpp)
 *   blk.N.<attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down>.weight.lora_a
 *       ggml shape [n_in, rank]: rank rows of n_in values, i.e. A [rank][n_in]
 *   ... .weight.lora_b  ggml shape [rank, n_out]: B [n_out][rank]
 *
 * Types: F32, F16, BF16 and the quant types quant.h reads (converted like F32). Anything else
 * (token_embd, output, fused attn_qkv, ...) is an unsupported target.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../engine/gguf.h"
#include "../engine/model.h"
#include "../engine/quant.h"
#include "adapter-private.h"

static const char *const gguf_names[LORA_TARGET_COUNT_] = {
	"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

struct pair {
	uint32_t layer;
	enum lora_target target;
	const struct gguf_tensor *a, *b;
};

/* "blk.N.attn_q.weight" → layer, target; -EINVAL when it is not one of ours. */
static int parse_base_name(const char *s, size_t len, uint32_t *layer, enum lora_target *t)
{
	unsigned long long l = 0;
	size_t i = 4, digits = 0;

	if (len < 4 || strncmp(s, "blk.", 4) != 0)
		return -EINVAL;
	for (; i < len && s[i] >= '0' && s[i] <= '9' && digits < 9; i++, digits++)
		l = l * 10 + (unsigned long long) (s[i] - '0');
	if (digits == 0 || (digits > 1 && s[4] == '0') || i >= len || s[i] != '.')
		return -EINVAL;
	i++;
	for (int k = 0; k < LORA_TARGET_COUNT_; k++) {
		size_t n = strlen(gguf_names[k]);

		if (len - i == n + 7 && strncmp(s + i, gguf_names[k], n) == 0 &&
		    strncmp(s + i + n, ".weight", 7) == 0) {
			*layer = (uint32_t) l;
			*t = (enum lora_target) k;
			return 0;
		}
	}
	return -EINVAL;
}

static int check_header(const struct gguf *g, const struct model *base, float *alpha,
			struct errmsg *e)
{
	_cleanup_free_ char *type = NULL, *atype = NULL, *arch = NULL, *base_arch = NULL;
	int r;

	r = gguf_get_string(g, "general.type", &type);
	if (r == -ENOENT)
		return errmsg_set(e, -EMEDIUMTYPE,
				  "no general.type: a model, not a LoRA adapter (adapters have "
				  "general.type = \"adapter\")");
	if (r < 0)
		return errmsg_set(e, -EBADMSG, "general.type is not a string");
	if (strcmp(type, "adapter") != 0)
		return errmsg_set(e, -EMEDIUMTYPE,
				  "general.type is '%.64s', not 'adapter': not a LoRA adapter",
				  type);
	r = gguf_get_string(g, "adapter.type", &atype);
	if (r < 0)
		return errmsg_set(e, -EBADMSG, "adapter.type is missing or not a string");
	if (strcmp(atype, "lora") != 0)
		return errmsg_set(e, -EOPNOTSUPP,
				  "adapter.type '%.64s' is not supported (only lora)", atype);
	if (gguf_get(g, "adapter.alora.invocation_tokens"))
		return errmsg_set(
			e, -EOPNOTSUPP,
			"adapter.alora.invocation_tokens: activated LoRA is not supported");
	r = gguf_get_string(g, "general.architecture", &arch);
	if (r < 0)
		return errmsg_set(e, -EBADMSG, "general.architecture is missing or not a string");
	if (gguf_get_string(base->gguf, "general.architecture", &base_arch) < 0)
		return -ENOMEM;
	if (strcmp(arch, base_arch) != 0)
		return errmsg_set(e, -EXDEV,
				  "adapter architecture '%.64s' does not match the base's '%.64s'",
				  arch, base_arch);
	*alpha = 0;
	r = gguf_get_f32(g, "adapter.lora.alpha", alpha);
	if (r < 0 && r != -ENOENT)
		return errmsg_set(e, -EBADMSG, "adapter.lora.alpha is not a number");
	if (!(*alpha >= 0) || *alpha > 1e30f)
		return errmsg_set(e, -EBADMSG, "adapter.lora.alpha %g is not a finite number >= 0",
				  (double) *alpha);
	return 0;
}

static int check_pair(const struct pair *p, const struct model *base, float alpha,
		      struct lora_src_mat *out, struct errmsg *e)
{
	_cleanup_free_ char *desc = NULL;
	const struct gguf_tensor *a = p->a, *b = p->b;
	uint32_t n_in, n_out;
	int r;

	if (a->n_dims != 2 || b->n_dims != 2)
		return errmsg_set(e, -EBADMSG, "tensor '%s': expected 2 dimensions, has %" PRIu32,
				  a->n_dims != 2 ? a->name : b->name,
				  a->n_dims != 2 ? a->n_dims : b->n_dims);
	if (a->ne[1] == 0 || b->ne[0] == 0)
		return errmsg_set(e, -EBADMSG, "tensor '%s': rank 0",
				  a->ne[1] == 0 ? a->name : b->name);
	if (a->ne[1] != b->ne[0])
		return errmsg_set(e, -EBADMSG,
				  "rank mismatch: '%s' has rank %" PRIu64
				  " ([n_in, rank] = [%" PRIu64 ", %" PRIu64
				  "]), '%s' has rank %" PRIu64 " ([rank, n_out] = [%" PRIu64
				  ", %" PRIu64 "])",
				  a->name, a->ne[1], a->ne[0], a->ne[1], b->name, b->ne[0],
				  b->ne[0], b->ne[1]);
	r = lora_base_dims(base, p->layer, p->target, &n_in, &n_out, e);
	if (r < 0)
		return errmsg_prefix(e, r, "tensor '%s'", a->name);
	if (a->ne[0] != n_in || b->ne[1] != n_out || a->ne[1] > UINT32_MAX) {
		desc = lora_base_describe(base);
		return errmsg_set(e, -EXDEV,
				  "'%.*s': lora_a [%" PRIu64 ", %" PRIu64 "] and lora_b [%" PRIu64
				  ", %" PRIu64 "] do not fit base '%s', where %s is %" PRIu32
				  " -> %" PRIu32 " (expected lora_a [%" PRIu32
				  ", rank], lora_b [rank, %" PRIu32 "]; made for another base?)",
				  (int) strlen(a->name) - 7, a->name, a->ne[0], a->ne[1], b->ne[0],
				  b->ne[1], desc ? desc : "?", gguf_names[p->target], n_in, n_out,
				  n_in, n_out);
	}
	*out = (struct lora_src_mat){
		.mat = { .layer = p->layer,
			 .target = p->target,
			 .rank = (uint32_t) a->ne[1],
			 .n_in = n_in,
			 .n_out = n_out },
		.a = a->data,
		.b = b->data,
		.a_type = a->type,
		.b_type = b->type,
		.a_name = a->name,
		.b_name = b->name,
	};
	/* llama.cpp: scale = alpha ? alpha / rank : 1 */
	out->mat.scale = alpha > 0 ? alpha / (float) a->ne[1] : 1.0f;
	return 0;
}

static char *default_name(const char *path)
{
	const char *s = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t n = strlen(s);

	if (n > 5 && strcmp(s + n - 5, ".gguf") == 0)
		n -= 5;
	return strndup(s, n);
}

int lora_gguf_open(const char *path, const struct lora_open_opts *opts, struct lora_adapter **ret,
		   struct errmsg *warn, struct errmsg *e)
{
	_cleanup_(gguf_freep) struct gguf *g = NULL;
	_cleanup_free_ struct pair *pairs = NULL;
	_cleanup_free_ struct lora_src_mat *src = NULL;
	_cleanup_free_ char *name = NULL;
	size_t n_t, n_pairs = 0, n_src = 0;
	float alpha;
	int r;

	if (!opts->base)
		return errmsg_set(e, -EINVAL,
				  "a GGUF LoRA file needs its base model to be loaded "
				  "(it does not record the base's shapes)");
	r = gguf_open(path, &g, e);
	if (r < 0)
		return r;
	r = check_header(g, opts->base, &alpha, e);
	if (r < 0)
		return r;
	n_t = gguf_n_tensors(g);
	pairs = calloc(n_t ? n_t : 1, sizeof(*pairs));
	if (!pairs)
		return -ENOMEM;
	for (size_t i = 0; i < n_t; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		size_t len = strlen(t->name);
		bool is_b;
		uint32_t layer;
		enum lora_target target;
		struct pair *p = NULL;

		if (len > 7 && strcmp(t->name + len - 7, ".lora_a") == 0)
			is_b = false;
		else if (len > 7 && strcmp(t->name + len - 7, ".lora_b") == 0)
			is_b = true;
		else {
			if (!opts->skip_unsupported)
				return errmsg_set(
					e, -EOPNOTSUPP,
					"tensor '%s' is not a LoRA tensor (.lora_a/.lora_b)",
					t->name);
			lora_warn(warn, "skipped tensor '%s': not a LoRA tensor", t->name);
			continue;
		}
		if (parse_base_name(t->name, len - 7, &layer, &target) < 0) {
			if (!opts->skip_unsupported)
				return errmsg_set(
					e, -EOPNOTSUPP,
					"tensor '%s': '%.*s' is not a supported LoRA target "
					"(blk.N.attn_q/attn_k/attn_v/attn_output/ffn_gate/ffn_up/"
					"ffn_down.weight)",
					t->name, (int) MIN(len - 7, (size_t) 128), t->name);
			lora_warn(warn, "skipped tensor '%s': unsupported target '%.*s'", t->name,
				  (int) MIN(len - 7, (size_t) 128), t->name);
			continue;
		}
		for (size_t k = 0; k < n_pairs; k++)
			if (pairs[k].layer == layer && pairs[k].target == target)
				p = &pairs[k];
		if (!p) {
			p = &pairs[n_pairs++];
			*p = (struct pair){ .layer = layer, .target = target };
		}
		if (is_b)
			p->b = t;
		else
			p->a = t;
	}
	src = calloc(n_pairs ? n_pairs : 1, sizeof(*src));
	if (!src)
		return -ENOMEM;
	for (size_t k = 0; k < n_pairs; k++) {
		const struct pair *p = &pairs[k];

		if (!p->a || !p->b)
			return errmsg_set(e, -EBADMSG, "tensor '%s' has no matching '%.*s.%s'",
					  (p->a ? p->a : p->b)->name,
					  (int) strlen((p->a ? p->a : p->b)->name) - 7,
					  (p->a ? p->a : p->b)->name, p->a ? "lora_b" : "lora_a");
		r = check_pair(p, opts->base, alpha, &src[n_src], e);
		if (r < 0)
			return r;
		n_src++;
	}
	name = default_name(path);
	if (!name)
		return -ENOMEM;
	/* src points into g's mapping: convert before g is closed. */
	return lora_adapter_from_sources(src, n_src, opts, name, LORA_FORMAT_GGUF, ret, e);
}
