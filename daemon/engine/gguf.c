/* SPDX-License-Identifier: MIT */
/*
 * gguf.c: the checked GGUF reader (see gguf.h for the format and the contract).
 *
 * Parsing walks a cursor over the image. Every read goes through cur_need(), which
 * compares the bytes wanted with the bytes left, so nothing is read out of bounds, and
 * every count is multiplied by the smallest size its elements can have and compared with
 * what is left *before* anything is allocated for it: a 40-byte file claiming 2^60 keys
 * fails at once instead of asking malloc for exabytes. Memory use is therefore bounded
 * by a small multiple of the file size.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "gguf.h"
#include "quant.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as little-endian u32 */
/* Arrays of arrays deeper than this are refused: real files nest at most once, and the
 * parser recurses once per level. */
#define GGUF_MAX_NESTING 8
/* ggml caps names at 63 bytes; allow more but stay bounded (names are copied). */
#define GGUF_MAX_TENSOR_NAME 256
#define GGUF_MAX_KEY         65535

/* Smallest encodings, used to bound counts before allocating for them. */
#define MIN_STR_BYTES         8u               /* u64 length, empty string */
#define MIN_KV_BYTES          (8u + 1 + 4 + 1) /* key of >= 1 byte, type, 1-byte value */
#define MIN_ARRAY_BYTES       (4u + 8)         /* elem type, count 0 */
#define MIN_TENSOR_INFO_BYTES (8u + 1 + 4 + 8 + 4 + 8)

struct gguf {
	const uint8_t *data; /* borrowed, or the mapping below */
	size_t size;
	void *map; /* owned mapping (gguf_open) or NULL */
	size_t map_size;

	uint32_t version;
	uint32_t alignment;
	uint64_t data_start; /* file offset of the tensor data section */

	size_t n_kv;
	struct gguf_kv *kvs; /* owned */
	size_t n_tensors;
	struct gguf_tensor *tensors; /* owned */

	/* Open-addressing hash tables of index+1 (0 = empty); sizes are powers of two. */
	uint32_t *kv_index;
	size_t kv_index_size;
	uint32_t *tensor_index;
	size_t tensor_index_size;
};

struct cursor {
	const uint8_t *base;
	size_t size;
	size_t pos;
	struct errmsg *e;
	const char *ctx; /* what is being parsed ("key 'x'", "tensor 3 ('y')"), for messages */
};

#define CTX_FMT     "%s%s"
#define CTX_ARGS(c) ((c)->ctx ? (c)->ctx : ""), ((c)->ctx ? ": " : "")

/* ---- ggml tensor types ---- */

struct type_layout {
	const char *name;
	uint16_t block_values;
	uint16_t block_bytes;
};

/* Every ggml type a GGUF file may contain, so files with types this engine cannot compute
 * with still parse (and tools can show them); ids 4, 5 and 31..33, 36..38 were removed
 * from ggml and are unknown. */
static const struct type_layout ggml_types[] = {
	[GGML_TYPE_F32] = { "f32", 1, 4 },
	[GGML_TYPE_F16] = { "f16", 1, 2 },
	[GGML_TYPE_Q4_0] = { "q4_0", 32, 18 },
	[GGML_TYPE_Q4_1] = { "q4_1", 32, 20 },
	[GGML_TYPE_Q5_0] = { "q5_0", 32, 22 },
	[GGML_TYPE_Q5_1] = { "q5_1", 32, 24 },
	[GGML_TYPE_Q8_0] = { "q8_0", 32, 34 },
	[GGML_TYPE_Q8_1] = { "q8_1", 32, 36 },
	[GGML_TYPE_Q2_K] = { "q2_k", 256, 84 },
	[GGML_TYPE_Q3_K] = { "q3_k", 256, 110 },
	[GGML_TYPE_Q4_K] = { "q4_k", 256, 144 },
	[GGML_TYPE_Q5_K] = { "q5_k", 256, 176 },
	[GGML_TYPE_Q6_K] = { "q6_k", 256, 210 },
	[GGML_TYPE_Q8_K] = { "q8_k", 256, 292 },
	[16] = { "iq2_xxs", 256, 66 },
	[17] = { "iq2_xs", 256, 74 },
	[18] = { "iq3_xxs", 256, 98 },
	[19] = { "iq1_s", 256, 50 },
	[20] = { "iq4_nl", 32, 18 },
	[21] = { "iq3_s", 256, 110 },
	[22] = { "iq2_s", 256, 82 },
	[23] = { "iq4_xs", 256, 136 },
	[24] = { "i8", 1, 1 },
	[25] = { "i16", 1, 2 },
	[26] = { "i32", 1, 4 },
	[27] = { "i64", 1, 8 },
	[28] = { "f64", 1, 8 },
	[29] = { "iq1_m", 256, 56 },
	[GGML_TYPE_BF16] = { "bf16", 1, 2 },
	[34] = { "tq1_0", 256, 54 },
	[35] = { "tq2_0", 256, 66 },
	[39] = { "mxfp4", 32, 17 },
};

static const struct type_layout *ggml_type_layout(uint32_t type)
{
	if (type >= ELEMENTSOF(ggml_types) || !ggml_types[type].name)
		return NULL;
	return &ggml_types[type];
}

const char *gguf_ggml_type_name(uint32_t type)
{
	const struct type_layout *l = ggml_type_layout(type);

	return l ? l->name : NULL;
}

int64_t gguf_ggml_row_bytes(uint32_t type, uint64_t n)
{
	const struct type_layout *l = ggml_type_layout(type);

	if (!l || n % l->block_values != 0)
		return -EINVAL;
	if (n > INT64_MAX)
		return -EOVERFLOW;
	/* The quant module is the authority for the types it computes with; the table above
	 * covers the rest. Both agree where both know a type. */
	if (n / l->block_values > (uint64_t) INT64_MAX / l->block_bytes)
		return -EOVERFLOW;
	if (quant_block_bytes(type) != 0)
		return quant_row_bytes(type, (int64_t) n);
	return (int64_t) (n / l->block_values * l->block_bytes);
}

/* ---- value types ---- */

static const char *const type_names[GGUF_TYPE_COUNT_] = {
	[GGUF_TYPE_UINT8] = "u8",    [GGUF_TYPE_INT8] = "i8",    [GGUF_TYPE_UINT16] = "u16",
	[GGUF_TYPE_INT16] = "i16",   [GGUF_TYPE_UINT32] = "u32", [GGUF_TYPE_INT32] = "i32",
	[GGUF_TYPE_FLOAT32] = "f32", [GGUF_TYPE_BOOL] = "bool",  [GGUF_TYPE_STRING] = "str",
	[GGUF_TYPE_ARRAY] = "arr",   [GGUF_TYPE_UINT64] = "u64", [GGUF_TYPE_INT64] = "i64",
	[GGUF_TYPE_FLOAT64] = "f64",
};

const char *gguf_type_name(enum gguf_type t)
{
	if ((unsigned) t >= GGUF_TYPE_COUNT_)
		return "unknown";
	return type_names[t];
}

size_t gguf_type_size(enum gguf_type t)
{
	switch (t) {
	case GGUF_TYPE_UINT8:
	case GGUF_TYPE_INT8:
	case GGUF_TYPE_BOOL:
		return 1;
	case GGUF_TYPE_UINT16:
	case GGUF_TYPE_INT16:
		return 2;
	case GGUF_TYPE_UINT32:
	case GGUF_TYPE_INT32:
	case GGUF_TYPE_FLOAT32:
		return 4;
	case GGUF_TYPE_UINT64:
	case GGUF_TYPE_INT64:
	case GGUF_TYPE_FLOAT64:
		return 8;
	default:
		return 0;
	}
}

static bool type_is_int(enum gguf_type t)
{
	switch (t) {
	case GGUF_TYPE_UINT8:
	case GGUF_TYPE_INT8:
	case GGUF_TYPE_UINT16:
	case GGUF_TYPE_INT16:
	case GGUF_TYPE_UINT32:
	case GGUF_TYPE_INT32:
	case GGUF_TYPE_UINT64:
	case GGUF_TYPE_INT64:
		return true;
	default:
		return false;
	}
}

static bool type_is_signed(enum gguf_type t)
{
	return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
	       t == GGUF_TYPE_INT64;
}

/* ---- little-endian loads (unaligned) ---- */

static uint64_t load_le(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v |= (uint64_t) p[i] << (8 * i);
	return v;
}

/* Decodes one scalar of type t at p into v's union (v->type set by the caller). */
static void decode_scalar(enum gguf_type t, const uint8_t *p, struct gguf_value *v)
{
	uint64_t raw = load_le(p, gguf_type_size(t));

	switch (t) {
	case GGUF_TYPE_INT8:
		v->i64 = (int8_t) raw;
		break;
	case GGUF_TYPE_INT16:
		v->i64 = (int16_t) raw;
		break;
	case GGUF_TYPE_INT32:
		v->i64 = (int32_t) raw;
		break;
	case GGUF_TYPE_INT64:
		v->i64 = (int64_t) raw;
		break;
	case GGUF_TYPE_FLOAT32: {
		uint32_t r32 = (uint32_t) raw;
		float f;

		memcpy(&f, &r32, sizeof(f));
		v->f64 = f;
		break;
	}
	case GGUF_TYPE_FLOAT64:
		memcpy(&v->f64, &raw, sizeof(v->f64));
		break;
	default:
		v->u64 = raw;
		break;
	}
}

/* Saturating conversions: casting an out-of-range double to an integer is undefined. */
static int64_t f64_to_i64(double x)
{
	if (!(x == x))
		return 0;
	if (x >= 9223372036854775807.0)
		return INT64_MAX;
	if (x <= -9223372036854775808.0)
		return INT64_MIN;
	return (int64_t) x;
}

static uint64_t f64_to_u64(double x)
{
	if (!(x > 0))
		return 0;
	if (x >= 18446744073709551615.0)
		return UINT64_MAX;
	return (uint64_t) x;
}

/* ---- printable excerpts of untrusted strings, for messages ---- */

struct quoted {
	char s[80];
};

static struct quoted quote(const char *p, uint64_t len)
{
	struct quoted q;
	size_t o = 0;

	for (uint64_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char) p[i];

		if (o + 8 >= sizeof(q.s)) {
			memcpy(q.s + o, "...", 4);
			return q;
		}
		if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
			q.s[o++] = (char) c;
		else
			o += (size_t) snprintf(q.s + o, sizeof(q.s) - o, "\\x%02x", c);
	}
	q.s[o] = 0;
	return q;
}

/* ---- cursor ---- */

static size_t cur_left(const struct cursor *c)
{
	return c->size - c->pos;
}

static int cur_need(struct cursor *c, uint64_t n, const char *what)
{
	if (n > cur_left(c))
		return errmsg_set(c->e, -EBADMSG,
				  CTX_FMT "truncated: %s at offset %zu needs %" PRIu64
					  " bytes, only %zu left in the file (size %zu)",
				  CTX_ARGS(c), what, c->pos, n, cur_left(c), c->size);
	return 0;
}

static int cur_u32(struct cursor *c, uint32_t *ret, const char *what)
{
	int r = cur_need(c, 4, what);

	if (r < 0)
		return r;
	*ret = (uint32_t) load_le(c->base + c->pos, 4);
	c->pos += 4;
	return 0;
}

static int cur_u64(struct cursor *c, uint64_t *ret, const char *what)
{
	int r = cur_need(c, 8, what);

	if (r < 0)
		return r;
	*ret = load_le(c->base + c->pos, 8);
	c->pos += 8;
	return 0;
}

/* A length-prefixed string; what names it in messages ("key", "tensor name", ...). */
static int cur_str(struct cursor *c, struct gguf_str *ret, const char *what)
{
	size_t at = c->pos;
	uint64_t len;
	int r;

	r = cur_u64(c, &len, what);
	if (r < 0)
		return r;
	if (len > cur_left(c))
		return errmsg_set(c->e, -EBADMSG,
				  CTX_FMT "%s at offset %zu: length %" PRIu64
					  " exceeds the %zu bytes left in the file",
				  CTX_ARGS(c), what, at, len, cur_left(c));
	ret->len = len;
	ret->data = (const char *) c->base + c->pos;
	c->pos += len;
	return 0;
}

/* ---- hash index ---- */

static uint64_t hash_bytes(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static int index_new(size_t n, uint32_t **ret, size_t *ret_size)
{
	size_t size = 16;

	while (size < 2 * n) {
		if (size > SIZE_MAX / 4)
			return -ENOMEM;
		size *= 2;
	}
	*ret = calloc(size, sizeof(uint32_t));
	if (!*ret)
		return -ENOMEM;
	*ret_size = size;
	return 0;
}

static const struct gguf_kv *kv_lookup(const struct gguf *g, const char *key, size_t len)
{
	size_t mask = g->kv_index_size - 1;

	if (!g->kv_index)
		return NULL;
	for (size_t i = hash_bytes(key, len) & mask;; i = (i + 1) & mask) {
		uint32_t slot = g->kv_index[i];
		const struct gguf_kv *kv;

		if (slot == 0)
			return NULL;
		kv = &g->kvs[slot - 1];
		if (kv->key.len == len && memcmp(kv->key.data, key, len) == 0)
			return kv;
	}
}

/* Inserts kv i; returns the already indexed duplicate instead, if any. */
static const struct gguf_kv *kv_insert(struct gguf *g, size_t idx)
{
	const struct gguf_kv *kv = &g->kvs[idx];
	size_t mask = g->kv_index_size - 1;

	for (size_t i = hash_bytes(kv->key.data, kv->key.len) & mask;; i = (i + 1) & mask) {
		uint32_t slot = g->kv_index[i];

		if (slot == 0) {
			g->kv_index[i] = (uint32_t) idx + 1;
			return NULL;
		}
		const struct gguf_kv *o = &g->kvs[slot - 1];
		if (o->key.len == kv->key.len &&
		    memcmp(o->key.data, kv->key.data, kv->key.len) == 0)
			return o;
	}
}

static const struct gguf_tensor *tensor_lookup(const struct gguf *g, const char *name)
{
	size_t mask = g->tensor_index_size - 1;

	if (!g->tensor_index)
		return NULL;
	for (size_t i = hash_bytes(name, strlen(name)) & mask;; i = (i + 1) & mask) {
		uint32_t slot = g->tensor_index[i];

		if (slot == 0)
			return NULL;
		if (strcmp(g->tensors[slot - 1].name, name) == 0)
			return &g->tensors[slot - 1];
	}
}

static const struct gguf_tensor *tensor_insert(struct gguf *g, size_t idx)
{
	const char *name = g->tensors[idx].name;
	size_t mask = g->tensor_index_size - 1;

	for (size_t i = hash_bytes(name, strlen(name)) & mask;; i = (i + 1) & mask) {
		uint32_t slot = g->tensor_index[i];

		if (slot == 0) {
			g->tensor_index[i] = (uint32_t) idx + 1;
			return NULL;
		}
		if (strcmp(g->tensors[slot - 1].name, name) == 0)
			return &g->tensors[slot - 1];
	}
}

/* ---- values ---- */

static void value_done(struct gguf_value *v)
{
	if (v->type != GGUF_TYPE_ARRAY)
		return;
	if (v->arr.values) {
		for (uint64_t i = 0; i < v->arr.n; i++)
			value_done((struct gguf_value *) &v->arr.values[i]);
		free((void *) v->arr.values);
	}
	free((void *) v->arr.strs);
	v->arr.values = NULL;
	v->arr.strs = NULL;
}

static int parse_array(struct cursor *c, struct gguf_value *v, unsigned depth)
{
	size_t at = c->pos;
	uint32_t elem_type;
	uint64_t n;
	size_t elem_min;
	int r;

	r = cur_u32(c, &elem_type, "array element type");
	if (r < 0)
		return r;
	if (elem_type >= GGUF_TYPE_COUNT_)
		return errmsg_set(c->e, -EBADMSG,
				  CTX_FMT "array at offset %zu has unknown element type %" PRIu32,
				  CTX_ARGS(c), at, elem_type);
	if (elem_type == GGUF_TYPE_ARRAY && depth + 1 >= GGUF_MAX_NESTING)
		return errmsg_set(c->e, -EBADMSG,
				  CTX_FMT "array at offset %zu nests arrays deeper than %d levels",
				  CTX_ARGS(c), at, GGUF_MAX_NESTING);
	r = cur_u64(c, &n, "array length");
	if (r < 0)
		return r;

	elem_min = elem_type == GGUF_TYPE_STRING  ? MIN_STR_BYTES
		   : elem_type == GGUF_TYPE_ARRAY ? MIN_ARRAY_BYTES
						  : gguf_type_size(elem_type);
	if (n > cur_left(c) / elem_min)
		return errmsg_set(c->e, -EBADMSG,
				  CTX_FMT "array of %" PRIu64 " %s at offset %zu exceeds the %zu "
					  "bytes left",
				  CTX_ARGS(c), n,
				  elem_type == GGUF_TYPE_STRING  ? "strings"
				  : elem_type == GGUF_TYPE_ARRAY ? "arrays"
								 : gguf_type_name(elem_type),
				  at, cur_left(c));

	v->type = GGUF_TYPE_ARRAY;
	v->arr.elem_type = elem_type;
	v->arr.n = 0; /* counts initialized elements, for value_done() on failure */
	v->arr.raw = c->base + c->pos;

	if (elem_type == GGUF_TYPE_STRING) {
		struct gguf_str *strs = calloc(n ? n : 1, sizeof(*strs));

		if (!strs)
			return errmsg_set(c->e, -ENOMEM,
					  CTX_FMT "out of memory for %" PRIu64 " strings",
					  CTX_ARGS(c), n);
		v->arr.strs = strs;
		for (uint64_t i = 0; i < n; i++) {
			r = cur_str(c, &strs[i], "array string");
			if (r < 0)
				return r;
		}
		v->arr.n = n;
	} else if (elem_type == GGUF_TYPE_ARRAY) {
		struct gguf_value *vals = calloc(n ? n : 1, sizeof(*vals));

		if (!vals)
			return errmsg_set(c->e, -ENOMEM,
					  CTX_FMT "out of memory for %" PRIu64 " arrays",
					  CTX_ARGS(c), n);
		v->arr.values = vals;
		for (uint64_t i = 0; i < n; i++) {
			vals[i].type = GGUF_TYPE_ARRAY;
			v->arr.n = i + 1;
			r = parse_array(c, &vals[i], depth + 1);
			if (r < 0)
				return r;
		}
	} else {
		size_t bytes = (size_t) n * elem_min; /* bounded by cur_left() above */

		if (elem_type == GGUF_TYPE_BOOL)
			for (size_t i = 0; i < bytes; i++)
				if (c->base[c->pos + i] > 1)
					return errmsg_set(c->e, -EBADMSG,
							  CTX_FMT "bool array element %zu at "
								  "offset %zu is %u, not 0 or 1",
							  CTX_ARGS(c), i, c->pos + i,
							  c->base[c->pos + i]);
		c->pos += bytes;
		v->arr.n = n;
	}
	return 0;
}

static int parse_value(struct cursor *c, enum gguf_type type, struct gguf_value *v)
{
	size_t size;
	int r;

	v->type = type;
	if (type == GGUF_TYPE_STRING)
		return cur_str(c, &v->str, "string value");
	if (type == GGUF_TYPE_ARRAY)
		return parse_array(c, v, 0);

	size = gguf_type_size(type);
	r = cur_need(c, size, gguf_type_name(type));
	if (r < 0)
		return r;
	if (type == GGUF_TYPE_BOOL && c->base[c->pos] > 1)
		return errmsg_set(c->e, -EBADMSG,
				  CTX_FMT "bool value at offset %zu is %u, not 0 or 1", CTX_ARGS(c),
				  c->pos, c->base[c->pos]);
	decode_scalar(type, c->base + c->pos, v);
	c->pos += size;
	return 0;
}

/* ---- the whole file ---- */

static int parse_kvs(struct gguf *g, struct cursor *c)
{
	char what[128];
	int r;

	r = index_new(g->n_kv, &g->kv_index, &g->kv_index_size);
	if (r < 0)
		return errmsg_set(c->e, r, "out of memory for the key index");

	for (size_t i = 0; i < g->n_kv; i++) {
		struct gguf_kv *kv = &g->kvs[i];
		uint32_t type;

		(void) snprintf(what, sizeof(what), "kv %zu", i);
		c->ctx = what;
		kv->file_offset = c->pos;
		r = cur_str(c, &kv->key, "key");
		if (r < 0)
			return r;
		if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY)
			return errmsg_set(c->e, -EBADMSG,
					  "kv %zu at offset %" PRIu64 ": key length %" PRIu64
					  " is not in 1..%d",
					  i, kv->file_offset, kv->key.len, GGUF_MAX_KEY);
		if (memchr(kv->key.data, 0, kv->key.len))
			return errmsg_set(c->e, -EBADMSG,
					  "kv %zu at offset %" PRIu64
					  ": key '%s' contains a NUL byte",
					  i, kv->file_offset, quote(kv->key.data, kv->key.len).s);
		(void) snprintf(what, sizeof(what), "key '%s'", quote(kv->key.data, kv->key.len).s);

		const struct gguf_kv *dup = kv_insert(g, i);
		if (dup)
			return errmsg_set(c->e, -EBADMSG,
					  "%s at offset %" PRIu64
					  ": duplicate key (first at offset %" PRIu64 ")",
					  what, kv->file_offset, dup->file_offset);

		size_t type_at = c->pos;
		r = cur_u32(c, &type, "value type");
		if (r < 0)
			return r;
		if (type >= GGUF_TYPE_COUNT_)
			return errmsg_set(c->e, -EBADMSG,
					  "%s: unknown value type %" PRIu32 " at offset %zu", what,
					  type, type_at);
		r = parse_value(c, type, &kv->value);
		if (r < 0)
			return r;
	}
	c->ctx = NULL;
	return 0;
}

static int parse_alignment(struct gguf *g, struct errmsg *e)
{
	const struct gguf_kv *kv = kv_lookup(g, "general.alignment", strlen("general.alignment"));

	g->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (!kv)
		return 0;
	if (kv->value.type != GGUF_TYPE_UINT32)
		return errmsg_set(e, -EBADMSG,
				  "key 'general.alignment' at offset %" PRIu64
				  ": type %s, expected u32",
				  kv->file_offset, gguf_type_name(kv->value.type));
	if (kv->value.u64 == 0 || (kv->value.u64 & (kv->value.u64 - 1)) != 0)
		return errmsg_set(e, -EBADMSG,
				  "key 'general.alignment' at offset %" PRIu64
				  ": alignment %" PRIu64 " is not a power of two",
				  kv->file_offset, kv->value.u64);
	g->alignment = (uint32_t) kv->value.u64;
	return 0;
}

static int parse_tensor_info(struct gguf *g, struct cursor *c, size_t i)
{
	struct gguf_tensor *t = &g->tensors[i];
	size_t at = c->pos;
	struct gguf_str name;
	uint64_t n_elems = 1, n_rows = 1;
	int64_t row_bytes;
	const struct type_layout *l;
	char tn[128];
	int r;

	(void) snprintf(tn, sizeof(tn), "tensor %zu", i);
	c->ctx = tn;
	r = cur_str(c, &name, "tensor name");
	if (r < 0)
		return r;
	if (name.len == 0 || name.len > GGUF_MAX_TENSOR_NAME || memchr(name.data, 0, name.len))
		return errmsg_set(c->e, -EBADMSG,
				  "tensor %zu at offset %zu: bad name '%s' (length %" PRIu64
				  ", must be 1..%d bytes without NUL)",
				  i, at, quote(name.data, name.len).s, name.len,
				  GGUF_MAX_TENSOR_NAME);
	t->name = strndup(name.data, name.len);
	if (!t->name)
		return errmsg_set(c->e, -ENOMEM, "out of memory");
	(void) snprintf(tn, sizeof(tn), "tensor %zu ('%s')", i, quote(name.data, name.len).s);

	const struct gguf_tensor *dup = tensor_insert(g, i);
	if (dup)
		return errmsg_set(c->e, -EBADMSG,
				  "%s at offset %zu: duplicate tensor name (also tensor %zu)", tn,
				  at, (size_t) (dup - g->tensors));

	size_t dims_at = c->pos;
	r = cur_u32(c, &t->n_dims, "n_dims");
	if (r < 0)
		return r;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		return errmsg_set(c->e, -EBADMSG,
				  "%s: n_dims %" PRIu32 " at offset %zu is not in 1..%d", tn,
				  t->n_dims, dims_at, GGUF_MAX_DIMS);
	for (unsigned d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = 1;
		if (d >= t->n_dims)
			continue;
		size_t ne_at = c->pos;
		r = cur_u64(c, &t->ne[d], "ne");
		if (r < 0)
			return r;
		if (t->ne[d] == 0)
			return errmsg_set(c->e, -EBADMSG, "%s: ne[%u] at offset %zu is zero", tn, d,
					  ne_at);
		if (__builtin_mul_overflow(n_elems, t->ne[d], &n_elems) || n_elems > INT64_MAX)
			return errmsg_set(c->e, -EOVERFLOW,
					  "%s: shape overflows: ne[%u] = %" PRIu64
					  " at offset %zu makes more than 2^63-1 elements",
					  tn, d, t->ne[d], ne_at);
		if (d > 0)
			n_rows *= t->ne[d]; /* <= n_elems: cannot overflow */
	}
	size_t type_at = c->pos;
	r = cur_u32(c, &t->type, "tensor type");
	if (r < 0)
		return r;
	l = ggml_type_layout(t->type);
	if (!l)
		return errmsg_set(c->e, -EBADMSG,
				  "%s: unknown tensor type %" PRIu32 " at offset %zu", tn, t->type,
				  type_at);
	if (t->ne[0] % l->block_values != 0)
		return errmsg_set(c->e, -EBADMSG,
				  "%s: ne[0] = %" PRIu64
				  " is not a multiple of the %s block size %u",
				  tn, t->ne[0], l->name, l->block_values);
	row_bytes = gguf_ggml_row_bytes(t->type, t->ne[0]);
	if (row_bytes <= 0)
		return errmsg_set(c->e, -EOVERFLOW,
				  "%s: size in bytes overflows (a row of %" PRIu64 " %s values)",
				  tn, t->ne[0], l->name);
	if (__builtin_mul_overflow((uint64_t) row_bytes, n_rows, &t->n_bytes) ||
	    t->n_bytes > INT64_MAX)
		return errmsg_set(c->e, -EOVERFLOW,
				  "%s: size in bytes overflows (%" PRIu64 " rows of %" PRId64
				  " bytes)",
				  tn, n_rows, row_bytes);

	size_t off_at = c->pos;
	r = cur_u64(c, &t->offset, "tensor offset");
	if (r < 0)
		return r;
	if (t->offset % g->alignment != 0)
		return errmsg_set(c->e, -EBADMSG,
				  "%s: offset %" PRIu64 " at offset %zu is not a multiple of the "
				  "alignment %" PRIu32,
				  tn, t->offset, off_at, g->alignment);
	c->ctx = NULL;
	return 0;
}

static int cmp_by_offset(const void *a, const void *b, void *userdata)
{
	const struct gguf_tensor *ts = userdata;
	uint64_t x = ts[*(const uint32_t *) a].offset, y = ts[*(const uint32_t *) b].offset;

	return x < y ? -1 : x > y;
}

static int check_tensor_data(struct gguf *g, struct errmsg *e)
{
	_cleanup_free_ uint32_t *order = NULL;

	for (size_t i = 0; i < g->n_tensors; i++) {
		struct gguf_tensor *t = &g->tensors[i];
		uint64_t start, end;

		if (__builtin_add_overflow(g->data_start, t->offset, &start) ||
		    __builtin_add_overflow(start, t->n_bytes, &end))
			return errmsg_set(e, -EBADMSG,
					  "tensor %zu ('%s'): offset %" PRIu64
					  " past end of file (size %zu)",
					  i, quote(t->name, strlen(t->name)).s, t->offset, g->size);
		if (end > g->size)
			return errmsg_set(e, -EBADMSG,
					  "tensor %zu ('%s'): data [%" PRIu64 ", %" PRIu64
					  ") past end of file (size %zu)",
					  i, quote(t->name, strlen(t->name)).s, start, end,
					  g->size);
		t->data = g->data + start;
	}

	if (g->n_tensors < 2)
		return 0;
	order = malloc(g->n_tensors * sizeof(*order));
	if (!order)
		return errmsg_set(e, -ENOMEM, "out of memory");
	for (size_t i = 0; i < g->n_tensors; i++)
		order[i] = (uint32_t) i;
	qsort_r(order, g->n_tensors, sizeof(*order), cmp_by_offset, g->tensors);
	for (size_t i = 1; i < g->n_tensors; i++) {
		const struct gguf_tensor *a = &g->tensors[order[i - 1]], *b = &g->tensors[order[i]];

		if (a->offset + a->n_bytes > b->offset)
			return errmsg_set(
			    e, -EBADMSG,
			    "tensor %" PRIu32 " ('%s'): data [%" PRIu64 ", %" PRIu64
			    ") overlaps tensor %" PRIu32 " ('%s') at [%" PRIu64 ", %" PRIu64 ")",
			    order[i], quote(b->name, strlen(b->name)).s, g->data_start + b->offset,
			    g->data_start + b->offset + b->n_bytes, order[i - 1],
			    quote(a->name, strlen(a->name)).s, g->data_start + a->offset,
			    g->data_start + a->offset + a->n_bytes);
	}
	return 0;
}

static int parse(struct gguf *g, struct errmsg *e)
{
	struct cursor c = { .base = g->data, .size = g->size, .e = e };
	uint32_t magic;
	uint64_t n_tensors, n_kv;
	int r;

	if (g->size == 0)
		return errmsg_set(e, -EBADMSG, "empty file, not GGUF");
	r = cur_u32(&c, &magic, "magic");
	if (r < 0)
		return r;
	if (magic != GGUF_MAGIC)
		return errmsg_set(e, -EBADMSG,
				  "bad magic 0x%08" PRIx32
				  " at offset 0 (expected \"GGUF\"): not a "
				  "GGUF file",
				  magic);
	r = cur_u32(&c, &g->version, "version");
	if (r < 0)
		return r;
	if (g->version == 1)
		return errmsg_set(e, -EBADMSG,
				  "GGUF version 1 at offset 4 is not supported (only 2 and 3); "
				  "convert the file with a newer llama.cpp");
	if (g->version != 2 && g->version != 3)
		return errmsg_set(
		    e, -EBADMSG,
		    "unsupported GGUF version %" PRIu32 " at offset 4 (only 2 and 3%s)", g->version,
		    __builtin_bswap32(g->version) <= 3 ? "; a big-endian file?" : "");

	size_t at = c.pos;
	r = cur_u64(&c, &n_tensors, "n_tensors");
	if (r < 0)
		return r;
	r = cur_u64(&c, &n_kv, "n_kv");
	if (r < 0)
		return r;
	/* Keys come before tensor infos, so the pair must fit together. */
	if (n_kv > cur_left(&c) / MIN_KV_BYTES)
		return errmsg_set(e, -EBADMSG,
				  "n_kv %" PRIu64
				  " at offset %zu: that many keys cannot fit in the "
				  "%zu bytes left",
				  n_kv, at + 8, cur_left(&c));
	if (n_tensors > (cur_left(&c) - n_kv * MIN_KV_BYTES) / MIN_TENSOR_INFO_BYTES)
		return errmsg_set(e, -EBADMSG,
				  "n_tensors %" PRIu64
				  " at offset %zu: that many tensor infos cannot "
				  "fit in the %zu bytes left",
				  n_tensors, at, cur_left(&c));

	if (n_kv >= UINT32_MAX || n_tensors >= UINT32_MAX) /* indexes are u32 */
		return errmsg_set(e, -EOVERFLOW, "too many keys or tensors");

	g->kvs = calloc(n_kv ? n_kv : 1, sizeof(*g->kvs));
	if (!g->kvs)
		return errmsg_set(e, -ENOMEM, "out of memory for %" PRIu64 " keys", n_kv);
	g->n_kv = n_kv;
	r = parse_kvs(g, &c);
	if (r < 0)
		return r;
	r = parse_alignment(g, e);
	if (r < 0)
		return r;

	g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof(*g->tensors));
	if (!g->tensors)
		return errmsg_set(e, -ENOMEM, "out of memory for %" PRIu64 " tensors", n_tensors);
	g->n_tensors = n_tensors;
	r = index_new(g->n_tensors, &g->tensor_index, &g->tensor_index_size);
	if (r < 0)
		return errmsg_set(e, r, "out of memory for the tensor index");
	for (size_t i = 0; i < g->n_tensors; i++) {
		r = parse_tensor_info(g, &c, i);
		if (r < 0)
			return r;
	}

	/* The data section starts at the next multiple of the alignment; a vocabulary-only
	 * file may end before that padding. */
	g->data_start = ALIGN_UP((uint64_t) c.pos, (uint64_t) g->alignment);
	if (g->n_tensors > 0 && g->data_start > g->size)
		return errmsg_set(e, -EBADMSG,
				  "truncated: tensor data section starts at offset %" PRIu64
				  " but the file is only %zu bytes",
				  g->data_start, g->size);
	return check_tensor_data(g, e);
}

struct gguf *gguf_free(struct gguf *g)
{
	if (!g)
		return NULL;
	if (g->kvs)
		for (size_t i = 0; i < g->n_kv; i++)
			value_done(&g->kvs[i].value);
	free(g->kvs);
	if (g->tensors)
		for (size_t i = 0; i < g->n_tensors; i++)
			free(g->tensors[i].name);
	free(g->tensors);
	free(g->kv_index);
	free(g->tensor_index);
	if (g->map)
		(void) munmap(g->map, g->map_size);
	free(g);
	return NULL;
}

int gguf_parse_buffer(const void *data, size_t size, struct gguf **ret, struct errmsg *e)
{
	_cleanup_(gguf_freep) struct gguf *g = NULL;
	int r;

	assert_return(data || size == 0, -EINVAL);
	assert_return(ret, -EINVAL);

	g = calloc(1, sizeof(*g));
	if (!g)
		return errmsg_set(e, -ENOMEM, "out of memory");
	g->data = data;
	g->size = size;
	r = parse(g, e);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(g);
	return 0;
}

int gguf_open(const char *path, struct gguf **ret, struct errmsg *e)
{
	_cleanup_close_ int fd = -EBADF;
	_cleanup_(gguf_freep) struct gguf *g = NULL;
	struct stat st;
	void *map;
	int r;

	assert_return(path && ret, -EINVAL);

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errmsg_set(e, -errno, "cannot open: %m");
	if (fstat(fd, &st) < 0)
		return errmsg_set(e, -errno, "cannot stat: %m");
	if (S_ISDIR(st.st_mode))
		return errmsg_set(e, -EISDIR, "is a directory");
	if (!S_ISREG(st.st_mode))
		return errmsg_set(e, -EBADMSG, "not a regular file");
	if ((uint64_t) st.st_size > SIZE_MAX)
		return errmsg_set(e, -EOVERFLOW, "file too large to map (%" PRId64 " bytes)",
				  (int64_t) st.st_size);
	if (st.st_size == 0)
		return errmsg_set(e, -EBADMSG, "empty file, not GGUF");

	map = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return errmsg_set(e, -errno, "cannot map %" PRId64 " bytes: %m",
				  (int64_t) st.st_size);
	g = calloc(1, sizeof(*g));
	if (!g) {
		(void) munmap(map, (size_t) st.st_size);
		return errmsg_set(e, -ENOMEM, "out of memory");
	}
	g->map = map;
	g->map_size = (size_t) st.st_size;
	g->data = map;
	g->size = (size_t) st.st_size;
	r = parse(g, e);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(g);
	return 0;
}

/* ---- accessors ---- */

uint32_t gguf_version(const struct gguf *g)
{
	return g->version;
}

uint32_t gguf_alignment(const struct gguf *g)
{
	return g->alignment;
}

size_t gguf_file_size(const struct gguf *g)
{
	return g->size;
}

const void *gguf_file_data(const struct gguf *g)
{
	return g->data;
}

size_t gguf_n_kv(const struct gguf *g)
{
	return g->n_kv;
}

const struct gguf_kv *gguf_kv_at(const struct gguf *g, size_t i)
{
	return i < g->n_kv ? &g->kvs[i] : NULL;
}

const struct gguf_value *gguf_get(const struct gguf *g, const char *key)
{
	const struct gguf_kv *kv;

	assert_return(g && key, NULL);
	kv = kv_lookup(g, key, strlen(key));
	return kv ? &kv->value : NULL;
}

size_t gguf_n_tensors(const struct gguf *g)
{
	return g->n_tensors;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, size_t i)
{
	return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
	assert_return(g && name, NULL);
	return tensor_lookup(g, name);
}

/* An integer value as (negative?, magnitude) so range checks need no casts that overflow. */
static int get_int(const struct gguf *g, const char *key, bool *neg, uint64_t *mag)
{
	const struct gguf_value *v = gguf_get(g, key);

	if (!v)
		return -ENOENT;
	if (!type_is_int(v->type))
		return -EINVAL;
	if (type_is_signed(v->type) && v->i64 < 0) {
		*neg = true;
		*mag = (uint64_t) 0 - (uint64_t) v->i64;
	} else {
		*neg = false;
		*mag = v->u64;
	}
	return 0;
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *ret)
{
	uint64_t mag;
	bool neg;
	int r;

	assert_return(g && key && ret, -EINVAL);
	r = get_int(g, key, &neg, &mag);
	if (r < 0)
		return r;
	if (neg || mag > UINT32_MAX)
		return -EINVAL;
	*ret = (uint32_t) mag;
	return 0;
}

int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *ret)
{
	uint64_t mag;
	bool neg;
	int r;

	assert_return(g && key && ret, -EINVAL);
	r = get_int(g, key, &neg, &mag);
	if (r < 0)
		return r;
	if (neg)
		return -EINVAL;
	*ret = mag;
	return 0;
}

int gguf_get_i64(const struct gguf *g, const char *key, int64_t *ret)
{
	uint64_t mag;
	bool neg;
	int r;

	assert_return(g && key && ret, -EINVAL);
	r = get_int(g, key, &neg, &mag);
	if (r < 0)
		return r;
	if (neg)
		*ret = mag == (uint64_t) INT64_MAX + 1 ? INT64_MIN : -(int64_t) mag;
	else if (mag > INT64_MAX)
		return -EINVAL;
	else
		*ret = (int64_t) mag;
	return 0;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *ret)
{
	const struct gguf_value *v;

	assert_return(g && key && ret, -EINVAL);
	v = gguf_get(g, key);
	if (!v)
		return -ENOENT;
	if (v->type == GGUF_TYPE_FLOAT32 || v->type == GGUF_TYPE_FLOAT64)
		*ret = (float) v->f64;
	else if (type_is_signed(v->type))
		*ret = (float) v->i64;
	else if (type_is_int(v->type))
		*ret = (float) v->u64;
	else
		return -EINVAL;
	return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, bool *ret)
{
	const struct gguf_value *v;

	assert_return(g && key && ret, -EINVAL);
	v = gguf_get(g, key);
	if (!v)
		return -ENOENT;
	if (v->type != GGUF_TYPE_BOOL)
		return -EINVAL;
	*ret = v->u64 != 0;
	return 0;
}

int gguf_get_string(const struct gguf *g, const char *key, char **ret)
{
	const struct gguf_value *v;
	char *s;

	assert_return(g && key && ret, -EINVAL);
	v = gguf_get(g, key);
	if (!v)
		return -ENOENT;
	if (v->type != GGUF_TYPE_STRING)
		return -EINVAL;
	if (v->str.len >= SIZE_MAX)
		return -ENOMEM;
	s = malloc((size_t) v->str.len + 1);
	if (!s)
		return -ENOMEM;
	if (v->str.len)
		memcpy(s, v->str.data, (size_t) v->str.len);
	s[v->str.len] = 0;
	*ret = s;
	return 0;
}

const struct gguf_value *gguf_get_array(const struct gguf *g, const char *key, int elem_type)
{
	const struct gguf_value *v = gguf_get(g, key);

	if (!v || v->type != GGUF_TYPE_ARRAY)
		return NULL;
	if (elem_type >= 0 && (int) v->arr.elem_type != elem_type)
		return NULL;
	return v;
}

/* Element i of a scalar array, decoded like a scalar value. */
static struct gguf_value arr_elem(const struct gguf_value *v, uint64_t i)
{
	struct gguf_value out = { .type = v->arr.elem_type };
	size_t size = gguf_type_size(v->arr.elem_type);

	if (v->type != GGUF_TYPE_ARRAY || size == 0 || !v->arr.raw)
		return (struct gguf_value){ .type = GGUF_TYPE_COUNT_ };
	decode_scalar(v->arr.elem_type, (const uint8_t *) v->arr.raw + i * size, &out);
	return out;
}

int64_t gguf_arr_i64(const struct gguf_value *v, uint64_t i)
{
	struct gguf_value x = arr_elem(v, i);

	if (x.type == GGUF_TYPE_FLOAT32 || x.type == GGUF_TYPE_FLOAT64)
		return f64_to_i64(x.f64);
	if (x.type == GGUF_TYPE_COUNT_)
		return 0;
	return x.i64; /* unsigned values reinterpret, as the caller asked for i64 */
}

uint64_t gguf_arr_u64(const struct gguf_value *v, uint64_t i)
{
	struct gguf_value x = arr_elem(v, i);

	if (x.type == GGUF_TYPE_FLOAT32 || x.type == GGUF_TYPE_FLOAT64)
		return f64_to_u64(x.f64);
	if (x.type == GGUF_TYPE_COUNT_)
		return 0;
	return x.u64;
}

double gguf_arr_f64(const struct gguf_value *v, uint64_t i)
{
	struct gguf_value x = arr_elem(v, i);

	if (x.type == GGUF_TYPE_FLOAT32 || x.type == GGUF_TYPE_FLOAT64)
		return x.f64;
	if (x.type == GGUF_TYPE_COUNT_)
		return 0;
	if (type_is_signed(x.type))
		return (double) x.i64;
	return (double) x.u64;
}
