/* SPDX-License-Identifier: MIT */
/*
 * adapter.c: the uniform adapter object (see adapter.h): format detection, conversion of
 * public formats into F16/BF16 matrices held in memory, identities (content hash, base
 * fingerprint), base checks, and reads. The format readers live in peft.c, lora-gguf.c and
 * lora-file.c.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../basic/sha256.h"
#include "../engine/gguf.h"
#include "../engine/model.h"
#include "../engine/quant.h"
#include "adapter-private.h"
#include "lora-file.h"
#include "peft.h"

static const char *const target_names[LORA_TARGET_COUNT_] = {
	[LORA_TARGET_Q] = "q",       [LORA_TARGET_K] = "k",       [LORA_TARGET_V] = "v",
	[LORA_TARGET_O] = "o",       [LORA_TARGET_GATE] = "gate", [LORA_TARGET_UP] = "up",
	[LORA_TARGET_DOWN] = "down",
};

/* The same targets as PEFT (Llama-family module names) and GGUF (llama.cpp tensor names). */
static const char *const target_peft[LORA_TARGET_COUNT_] = {
	"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
};
static const char *const target_gguf[LORA_TARGET_COUNT_] = {
	"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

const char *lora_target_name(enum lora_target t)
{
	return (unsigned) t < LORA_TARGET_COUNT_ ? target_names[t] : NULL;
}

int lora_target_from_name(const char *name, enum lora_target *ret)
{
	assert_return(name && ret, -EINVAL);
	for (int t = 0; t < LORA_TARGET_COUNT_; t++)
		if (strcmp(name, target_names[t]) == 0) {
			*ret = (enum lora_target) t;
			return 0;
		}
	return -EINVAL;
}

const char *lora_format_name(enum lora_format f)
{
	switch (f) {
	case LORA_FORMAT_PEFT:
		return "peft";
	case LORA_FORMAT_GGUF:
		return "gguf";
	case LORA_FORMAT_MOLLY:
		return "molly";
	}
	return "unknown";
}

char *lora_targets_format(uint32_t mask, char *buf, size_t size)
{
	size_t n = 0;

	if (size == 0)
		return buf;
	buf[0] = 0;
	for (int t = 0; t < LORA_TARGET_COUNT_; t++)
		if (mask & (1u << t)) {
			int k = snprintf(buf + n, size - n, "%s%s", n ? "," : "", target_names[t]);

			if (k < 0 || (size_t) k >= size - n)
				break;
			n += (size_t) k;
		}
	return buf;
}

int lora_targets_parse(const char *s, uint32_t *ret_mask, struct errmsg *e)
{
	uint32_t mask = 0;
	const char *p = s;

	assert_return(s && ret_mask, -EINVAL);
	while (*p) {
		size_t n = strcspn(p, ",");
		bool found = false;

		if (n == 3 && strncmp(p, "all", 3) == 0) {
			mask |= (1u << LORA_TARGET_COUNT_) - 1;
			found = true;
		}
		for (int t = 0; !found && t < LORA_TARGET_COUNT_; t++)
			if ((strlen(target_names[t]) == n && strncmp(p, target_names[t], n) == 0) ||
			    (strlen(target_peft[t]) == n && strncmp(p, target_peft[t], n) == 0) ||
			    (strlen(target_gguf[t]) == n && strncmp(p, target_gguf[t], n) == 0)) {
				mask |= 1u << t;
				found = true;
			}
		if (!found)
			return errmsg_set(
				e, -EINVAL,
				"unknown target '%.*s' (targets: q, k, v, o, gate, up, down, all)",
				(int) MIN(n, (size_t) 64), p);
		p += n;
		if (*p == ',')
			p++;
	}
	if (mask == 0)
		return errmsg_set(e, -EINVAL, "no targets given");
	*ret_mask = mask;
	return 0;
}

size_t lora_mat_bytes(const struct lora_mat *m, bool b_matrix)
{
	if (!m)
		return 0;
	/* F16/BF16: 2 bytes a value, F32 (keep_f32): 4; u32 · u32 · 4 fits a 64-bit size_t */
	return (size_t) m->rank * (b_matrix ? m->n_out : m->n_in) *
	       (m->dtype == GGML_TYPE_F32 ? 4 : 2);
}

void lora_warn(struct errmsg *warn, const char *fmt, ...)
{
	size_t used;
	va_list ap;
	int k;

	if (!warn)
		return;
	used = strnlen(warn->text, sizeof(warn->text));
	if (used >= sizeof(warn->text) - 4)
		return; /* already full (and marked) */
	va_start(ap, fmt);
	k = vsnprintf(warn->text + used, sizeof(warn->text) - used, fmt, ap);
	va_end(ap);
	if (k < 0) {
		warn->text[used] = 0;
		return;
	}
	used += (size_t) k;
	if (used + 2 > sizeof(warn->text)) {
		/* Cut: end with "..." so the reader knows there was more. */
		memcpy(warn->text + sizeof(warn->text) - 5, "...\n", 5);
		return;
	}
	warn->text[used] = '\n';
	warn->text[used + 1] = 0;
}

/* ---- the adapter object ---- */

struct lora_adapter *lora_adapter_alloc(enum lora_format format)
{
	struct lora_adapter *a = calloc(1, sizeof(*a));
	struct lora_priv *p = calloc(1, sizeof(*p));

	if (!a || !p) {
		free(a);
		free(p);
		return NULL;
	}
	p->format = format;
	p->fd = -EBADF;
	a->priv = p;
	return a;
}

struct lora_adapter *lora_adapter_free(struct lora_adapter *a)
{
	struct lora_priv *p;

	if (!a)
		return NULL;
	p = a->priv;
	if (p) {
		for (size_t i = 0; i < a->n_mats; i++) {
			if (p->a)
				free(p->a[i]);
			if (p->b)
				free(p->b[i]);
		}
		free(p->a);
		free(p->b);
		lora_file_close(p);
		free(p);
	}
	free(a->meta.name);
	for (size_t i = 0; i < a->meta.n_domains; i++)
		free(a->meta.domains[i]);
	free(a->meta.domains);
	for (size_t i = 0; i < a->meta.n_exemplars; i++)
		free(a->meta.exemplars[i]);
	free(a->meta.exemplars);
	free(a->base_description);
	free(a->mats);
	free(a);
	return NULL;
}

enum lora_format lora_adapter_format(const struct lora_adapter *a)
{
	return a && a->priv ? ((const struct lora_priv *) a->priv)->format : LORA_FORMAT_PEFT;
}

bool lora_adapter_direct_io(const struct lora_adapter *a)
{
	return a && a->priv && ((const struct lora_priv *) a->priv)->direct;
}

int lora_adapter_set_image(struct lora_adapter *a, const void *image, size_t bytes)
{
	struct lora_priv *p = a ? a->priv : NULL;

	if (!p || p->format != LORA_FORMAT_MOLLY)
		return -EOPNOTSUPP;
	p->image = image;
	p->image_bytes = image ? bytes : 0;
	return 0;
}

uint32_t lora_adapter_targets(const struct lora_adapter *a)
{
	uint32_t mask = 0;

	for (size_t i = 0; a && i < a->n_mats; i++)
		mask |= 1u << a->mats[i].target;
	return mask;
}

int lora_adapter_read(const struct lora_adapter *a, size_t i, bool b_matrix, void *dst,
		      size_t dst_bytes)
{
	const struct lora_priv *p;

	assert_return(a && a->priv && dst, -EINVAL);
	assert_return(i < a->n_mats, -ERANGE);
	assert_return(dst_bytes == lora_mat_bytes(&a->mats[i], b_matrix), -EINVAL);
	p = a->priv;
	if (p->format == LORA_FORMAT_MOLLY)
		return lora_file_read(a, i, b_matrix, dst, dst_bytes);
	memcpy(dst, b_matrix ? p->b[i] : p->a[i], dst_bytes);
	return 0;
}

/* ---- the base ---- */

static const struct weight *base_weight(const struct model *m, uint32_t layer, enum lora_target t)
{
	const struct model_layer *l = &m->layers[layer];

	switch (t) {
	case LORA_TARGET_Q:
		return &l->wq;
	case LORA_TARGET_K:
		return &l->wk;
	case LORA_TARGET_V:
		return &l->wv;
	case LORA_TARGET_O:
		return &l->wo;
	case LORA_TARGET_GATE:
		return &l->ffn_gate;
	case LORA_TARGET_UP:
		return &l->ffn_up;
	case LORA_TARGET_DOWN:
		return &l->ffn_down;
	default:
		return NULL;
	}
}

int lora_base_dims(const struct model *base, uint32_t layer, enum lora_target t, uint32_t *n_in,
		   uint32_t *n_out, struct errmsg *e)
{
	const struct weight *w;

	if (layer >= base->hp.n_layer)
		return errmsg_set(e, -EINVAL,
				  "layer %" PRIu32 " is past the base's %" PRIu32 " layers", layer,
				  base->hp.n_layer);
	w = base_weight(base, layer, t);
	if (!w)
		return errmsg_set(e, -EINVAL, "unknown target %d", (int) t);
	*n_in = (uint32_t) w->n_in;
	*n_out = (uint32_t) w->n_out;
	return 0;
}

char *lora_base_describe(const struct model *m)
{
	char *s = NULL;

	if (!m)
		return strdup("(unknown base)");
	if (asprintf(&s, "%s %" PRIu32 "x%" PRIu32 " vocab %" PRIu32 " (%s)",
		     model_arch_name(m->hp.arch), m->hp.n_layer, m->hp.n_embd, m->hp.n_vocab,
		     m->name ? m->name : "unnamed") < 0)
		return NULL;
	return s;
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp((*(const struct gguf_tensor *const *) a)->name,
		      (*(const struct gguf_tensor *const *) b)->name);
}

/* The model's tensors sorted by name (NULL on allocation failure). */
static const struct gguf_tensor **sorted_tensors(const struct gguf *g, size_t *ret_n)
{
	size_t n = gguf_n_tensors(g);
	const struct gguf_tensor **t = calloc(n ? n : 1, sizeof(*t));

	if (!t)
		return NULL;
	for (size_t i = 0; i < n; i++)
		t[i] = gguf_tensor_at(g, i);
	qsort(t, n, sizeof(*t), cmp_tensor_name);
	*ret_n = n;
	return t;
}

static void hash_gguf_value(struct sha256_ctx *c, const struct gguf *g, const char *key)
{
	const struct gguf_value *v = gguf_get(g, key);

	/* Absent keys hash as a marker, so "absent" differs from "empty". */
	if (!v) {
		sha256_update_u32(c, UINT32_MAX);
		return;
	}
	sha256_update_u32(c, v->type);
	if (v->type == GGUF_TYPE_STRING) {
		sha256_update_str(c, v->str.data, v->str.len);
	} else if (v->type == GGUF_TYPE_ARRAY) {
		sha256_update_u32(c, v->arr.elem_type);
		sha256_update_u64(c, v->arr.n);
		if (v->arr.elem_type == GGUF_TYPE_STRING) {
			for (uint64_t i = 0; i < v->arr.n; i++)
				sha256_update_str(c, v->arr.strs[i].data, v->arr.strs[i].len);
		} else if (v->arr.elem_type != GGUF_TYPE_ARRAY) {
			/* Scalars: the little-endian bytes as stored. */
			sha256_update(c, v->arr.raw, v->arr.n * gguf_type_size(v->arr.elem_type));
		}
	} else {
		sha256_update_u64(c, v->u64);
	}
}

void lora_base_fingerprint(const struct model *m, uint8_t ret[32])
{
	static const char domain[] = "molly-lora-base-v1";
	_cleanup_free_ const struct gguf_tensor **t = NULL;
	struct sha256_ctx c;
	size_t n = 0;

	memset(ret, 0, 32);
	if (!m || !m->gguf)
		return;
	sha256_init(&c);
	sha256_update(&c, domain, sizeof(domain)); /* with its NUL */
	hash_gguf_value(&c, m->gguf, "general.architecture");
	/* Not visible in tensor shapes: how Q and K/V split into heads. */
	sha256_update_u32(&c, m->hp.n_head);
	sha256_update_u32(&c, m->hp.n_head_kv);
	t = sorted_tensors(m->gguf, &n);
	if (!t)
		return; /* all zero: never equal to a real fingerprint */
	sha256_update_u64(&c, n);
	for (size_t i = 0; i < n; i++) {
		sha256_update_str(&c, t[i]->name, strlen(t[i]->name));
		sha256_update_u32(&c, t[i]->n_dims);
		for (uint32_t d = 0; d < t[i]->n_dims; d++)
			sha256_update_u64(&c, t[i]->ne[d]);
	}
	hash_gguf_value(&c, m->gguf, "tokenizer.ggml.model");
	hash_gguf_value(&c, m->gguf, "tokenizer.ggml.tokens");
	hash_gguf_value(&c, m->gguf, "tokenizer.ggml.merges");
	hash_gguf_value(&c, m->gguf, "tokenizer.ggml.scores");
	sha256_final(&c, ret);
}

void lora_base_weights_hash(const struct model *m, uint8_t ret[32])
{
	static const char domain[] = "molly-lora-base-weights-v1";
	_cleanup_free_ const struct gguf_tensor **t = NULL;
	struct sha256_ctx c;
	size_t n = 0;

	memset(ret, 0, 32);
	if (!m || !m->gguf)
		return;
	t = sorted_tensors(m->gguf, &n);
	if (!t)
		return;
	sha256_init(&c);
	sha256_update(&c, domain, sizeof(domain));
	sha256_update_u64(&c, n);
	for (size_t i = 0; i < n; i++) {
		sha256_update_str(&c, t[i]->name, strlen(t[i]->name));
		sha256_update_u32(&c, t[i]->type);
		sha256_update_str(&c, t[i]->data, t[i]->n_bytes);
	}
	sha256_final(&c, ret);
}

void lora_content_hash(const struct lora_mat *mats, size_t n, const uint8_t (*a_sha)[32],
		       const uint8_t (*b_sha)[32], uint8_t ret[32])
{
	static const char domain[] = "molly-lora-content-v1";
	struct sha256_ctx c;

	sha256_init(&c);
	sha256_update(&c, domain, sizeof(domain));
	sha256_update_u32(&c, (uint32_t) n);
	for (size_t i = 0; i < n; i++) {
		const struct lora_mat *m = &mats[i];
		uint32_t scale_bits;

		memcpy(&scale_bits, &m->scale, sizeof(scale_bits));
		sha256_update_u32(&c, m->layer);
		sha256_update_u32(&c, (uint32_t) m->target);
		sha256_update_u32(&c, m->rank);
		sha256_update_u32(&c, m->n_in);
		sha256_update_u32(&c, m->n_out);
		sha256_update_u32(&c, m->dtype);
		sha256_update_u32(&c, scale_bits);
		sha256_update(&c, a_sha[i], 32);
		sha256_update(&c, b_sha[i], 32);
	}
	sha256_final(&c, ret);
}

int lora_adapter_check_base(const struct lora_adapter *a, const struct model *m, struct errmsg *e)
{
	_cleanup_free_ char *desc = NULL;
	uint8_t fp[32];
	char h1[SHA256_HEX_SIZE], h2[SHA256_HEX_SIZE];

	assert_return(a && m, -EINVAL);
	desc = lora_base_describe(m);
	if (!desc)
		return -ENOMEM;
	lora_base_fingerprint(m, fp);
	if (memcmp(fp, a->base_fingerprint, 32) != 0)
		return errmsg_set(
			e, -EXDEV,
			"adapter '%s' was made for base '%s' (fingerprint %.16s), but the "
			"loaded base is '%s' (fingerprint %.16s)",
			a->meta.name ? a->meta.name : "?",
			a->base_description ? a->base_description : "?",
			sha256_hex(a->base_fingerprint, h1), desc, sha256_hex(fp, h2));
	for (size_t i = 0; i < a->n_mats; i++) {
		const struct lora_mat *mat = &a->mats[i];
		uint32_t n_in = 0, n_out = 0;

		if (lora_base_dims(m, mat->layer, mat->target, &n_in, &n_out, NULL) < 0 ||
		    n_in != mat->n_in || n_out != mat->n_out)
			return errmsg_set(
				e, -EXDEV,
				"adapter '%s' (made for base '%s'): layer %" PRIu32
				" %s is %" PRIu32 " -> %" PRIu32 ", which does not fit the "
				"loaded base '%s'",
				a->meta.name ? a->meta.name : "?",
				a->base_description ? a->base_description : "?", mat->layer,
				lora_target_name(mat->target), mat->n_in, mat->n_out, desc);
	}
	return 0;
}

/* ---- building from public formats ---- */

static int cmp_src(const void *x, const void *y)
{
	const struct lora_src_mat *a = x, *b = y;

	if (a->mat.layer != b->mat.layer)
		return a->mat.layer < b->mat.layer ? -1 : 1;
	return (int) a->mat.target - (int) b->mat.target;
}

/* Stores v as dtype (F32, F16 or BF16) at dst[i]; false when it overflows the type. */
static bool store_value(uint32_t dtype, void *dst, size_t i, float v)
{
	uint16_t h;

	if (dtype == GGML_TYPE_F32) {
		memcpy((uint8_t *) dst + 4 * i, &v, 4);
		return true;
	}
	h = dtype == GGML_TYPE_F16 ? f32_to_fp16(v) : f32_to_bf16(v);
	memcpy((uint8_t *) dst + 2 * i, &h, 2);
	return isfinite(dtype == GGML_TYPE_F16 ? fp16_to_f32(h) : bf16_to_f32(h));
}

/* Converts rows × cols values of src_type into dtype (F32/F16/BF16) at dst. */
static int convert(const void *src, uint32_t src_type, uint32_t rows, uint32_t cols, uint32_t dtype,
		   void *dst, const char *name, struct errmsg *e)
{
	_cleanup_free_ float *row = NULL;
	int64_t row_bytes = quant_row_bytes(src_type, cols);
	const uint8_t *p = src;

	if (!quant_type_supported(src_type) || src_type == GGML_TYPE_Q8_K)
		return errmsg_set(e, -EOPNOTSUPP, "tensor '%s': type %s is not supported", name,
				  quant_type_name(src_type)       ? quant_type_name(src_type)
				  : gguf_ggml_type_name(src_type) ? gguf_ggml_type_name(src_type)
								  : "unknown");
	if (row_bytes < 0)
		return errmsg_set(e, -EBADMSG,
				  "tensor '%s': rows of %" PRIu32 " values do not fit type %s",
				  name, cols, quant_type_name(src_type));
	row = malloc((size_t) cols * sizeof(float));
	if (!row)
		return -ENOMEM;
	for (uint32_t r = 0; r < rows; r++, p += row_bytes) {
		/* Safetensors data need not be aligned: copy F32/F16/BF16 values bytewise. */
		if (src_type == GGML_TYPE_F32) {
			memcpy(row, p, (size_t) cols * 4);
		} else if (src_type == GGML_TYPE_F16 || src_type == GGML_TYPE_BF16) {
			for (uint32_t c = 0; c < cols; c++) {
				uint16_t h;

				memcpy(&h, p + 2 * (size_t) c, 2);
				row[c] =
					src_type == GGML_TYPE_F16 ? fp16_to_f32(h) : bf16_to_f32(h);
			}
		} else {
			quant_dequantize_row(src_type, p, row, cols);
		}
		for (uint32_t c = 0; c < cols; c++) {
			if (!isfinite(row[c]))
				return errmsg_set(e, -EBADMSG,
						  "tensor '%s': value at row %" PRIu32
						  ", column %" PRIu32 " is not finite (%g)",
						  name, r, c, (double) row[c]);
			if (!store_value(dtype, dst, (size_t) r * cols + c, row[c]))
				return errmsg_set(e, -ERANGE,
						  "tensor '%s': value %g at row %" PRIu32
						  ", column %" PRIu32 " does not fit %s (use bf16)",
						  name, (double) row[c], r, c,
						  quant_type_name(dtype));
		}
	}
	/* F16 and BF16 sources kept as they are come out bit for bit: an F16 → float → F16
	 * round trip is exact. */
	return 0;
}

int lora_adapter_from_sources(struct lora_src_mat *src, size_t n, const struct lora_open_opts *opts,
			      const char *name, enum lora_format format, struct lora_adapter **ret,
			      struct errmsg *e)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
	_cleanup_free_ uint8_t(*a_sha)[32] = NULL;
	_cleanup_free_ uint8_t(*b_sha)[32] = NULL;
	uint32_t want = opts->dtype ? opts->dtype : GGML_TYPE_F16;
	struct lora_priv *p;
	int r;

	if (want != GGML_TYPE_F16 && want != GGML_TYPE_BF16)
		return errmsg_set(e, -EINVAL, "adapter dtype must be f16 or bf16, not %s",
				  quant_type_name(want) ? quant_type_name(want) : "unknown");
	if (n == 0)
		return errmsg_set(e, -ENOENT,
				  "no supported LoRA matrices (targets: q, k, v, o, "
				  "gate, up, down)");
	qsort(src, n, sizeof(*src), cmp_src);
	for (size_t i = 1; i < n; i++)
		if (cmp_src(&src[i - 1], &src[i]) == 0)
			return errmsg_set(e, -EBADMSG,
					  "tensors '%s' and '%s' both adapt layer %" PRIu32 " %s",
					  src[i - 1].a_name, src[i].a_name, src[i].mat.layer,
					  lora_target_name(src[i].mat.target));

	a = lora_adapter_alloc(format);
	if (!a)
		return -ENOMEM;
	p = a->priv;
	a->mats = calloc(n, sizeof(*a->mats));
	p->a = calloc(n, sizeof(*p->a));
	p->b = calloc(n, sizeof(*p->b));
	a_sha = calloc(n, sizeof(*a_sha));
	b_sha = calloc(n, sizeof(*b_sha));
	if (!a->mats || !p->a || !p->b || !a_sha || !b_sha)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct lora_src_mat *s = &src[i];
		struct lora_mat *m = &a->mats[i];

		*m = s->mat;
		if (s->a_type == s->b_type &&
		    (s->a_type == GGML_TYPE_F16 || s->a_type == GGML_TYPE_BF16))
			m->dtype = s->a_type; /* kept as stored */
		else
			m->dtype = opts->keep_f32 ? GGML_TYPE_F32 : want;
		a->n_mats = i + 1; /* p->a[i], p->b[i] freed from here on */
		p->a[i] = malloc(lora_mat_bytes(m, false));
		p->b[i] = malloc(lora_mat_bytes(m, true));
		if (!p->a[i] || !p->b[i])
			return -ENOMEM;
		r = convert(s->a, s->a_type, m->rank, m->n_in, m->dtype, p->a[i], s->a_name, e);
		if (r < 0)
			return r;
		r = convert(s->b, s->b_type, m->n_out, m->rank, m->dtype, p->b[i], s->b_name, e);
		if (r < 0)
			return r;
		sha256(p->a[i], lora_mat_bytes(m, false), a_sha[i]);
		sha256(p->b[i], lora_mat_bytes(m, true), b_sha[i]);
		a->max_rank = MAX(a->max_rank, m->rank);
	}
	lora_content_hash(a->mats, a->n_mats, (const uint8_t(*)[32]) a_sha,
			  (const uint8_t(*)[32]) b_sha, a->content_hash);
	lora_base_fingerprint(opts->base, a->base_fingerprint);
	a->base_description = lora_base_describe(opts->base);
	a->meta.name = strdup(name);
	if (!a->base_description || !a->meta.name)
		return -ENOMEM;
	*ret = TAKE_PTR(a);
	return 0;
}

/* ---- open ---- */

#define MOLLY_MAGIC_LEN 8

static int open_detect(const char *path, const struct lora_open_opts *opts,
		       struct lora_adapter **ret, struct errmsg *warn, struct errmsg *e)
{
	_cleanup_free_ char *copy = NULL;
	_cleanup_close_ int fd = -EBADF;
	uint8_t head[8] = { 0 };
	const char *base;
	struct stat st;
	ssize_t k;

	if (stat(path, &st) < 0)
		return errmsg_set(e, -errno, "cannot open: %s", strerror(errno));
	if (S_ISDIR(st.st_mode))
		return peft_adapter_open(path, opts, ret, warn, e);
	if (!S_ISREG(st.st_mode))
		return errmsg_set(e, -EINVAL, "not a regular file or directory");

	/* A file inside a PEFT directory stands for the directory. */
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	if (strcmp(base, "adapter_config.json") == 0 ||
	    strcmp(base, "adapter_model.safetensors") == 0)
		return peft_adapter_open(dirname(copy), opts, ret, warn, e);

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errmsg_set(e, -errno, "cannot open: %s", strerror(errno));
	k = pread(fd, head, sizeof(head), 0);
	if (k < 0)
		return errmsg_set(e, -errno, "cannot read: %s", strerror(errno));
	if (k >= 4 && memcmp(head, "GGUF", 4) == 0)
		return lora_gguf_open(path, opts, ret, warn, e);
	if (k >= MOLLY_MAGIC_LEN && memcmp(head, LORA_FILE_MAGIC, MOLLY_MAGIC_LEN) == 0)
		return lora_file_open(path, opts, ret, e);
	return errmsg_set(e, -EMEDIUMTYPE,
			  "not an adapter: expected a PEFT directory (adapter_config.json + "
			  "adapter_model.safetensors), a GGUF LoRA file or a Molly adapter file");
}

int lora_adapter_open(const char *path, const struct lora_open_opts *opts,
		      struct lora_adapter **ret, struct errmsg *warn, struct errmsg *e)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
	struct lora_open_opts defaults = { 0 };
	int r;

	assert_return(path && ret, -EINVAL);
	if (!opts)
		opts = &defaults;
	r = open_detect(path, opts, &a, warn, e);
	if (r < 0)
		return errmsg_prefix(e, r, "%s", path);
	if (opts->name) {
		char *name = strdup(opts->name);

		if (!name)
			return -ENOMEM;
		free(a->meta.name);
		a->meta.name = name;
	}
	*ret = TAKE_PTR(a);
	return 0;
}
