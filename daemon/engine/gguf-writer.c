/* SPDX-License-Identifier: MIT */
/*
 * gguf-writer.c: the GGUF v3 writer (see gguf-writer.h).
 *
 * Metadata is serialized into a memory buffer as keys are added (it is small: a tokenizer is
 * a few MB at most); tensor infos are kept as a list and their offsets assigned when the data
 * starts. The data then streams through a fixed buffer, so memory use does not depend on the
 * model size.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf-writer.h"

#define GGUF_MAGIC_BYTES   "GGUF"
#define WRITER_VERSION     3
#define WRITER_MAX_NESTING 8 /* as the reader accepts */
#define WRITER_MAX_KEY     65535
#define WRITER_MAX_NAME    256
#define OUT_BUF_BYTES      (4u << 20)

struct buf {
	uint8_t *p; /* owned */
	size_t len, cap;
};

struct writer_tensor {
	char *name; /* owned */
	uint32_t type, n_dims;
	uint64_t ne[GGUF_MAX_DIMS];
	uint64_t n_bytes;
	uint64_t offset; /* relative to the data section, assigned by header_size() */
};

enum writer_state {
	STATE_HEADER,   /* adding keys and tensors */
	STATE_DATA,     /* streaming tensor data */
	STATE_FINISHED, /* renamed into place */
	STATE_FAILED,   /* a write failed: everything fails with `error` */
};

struct gguf_writer {
	char *path;     /* owned: the final name */
	char *tmp_path; /* owned: PATH.tmp */
	int fd;
	enum writer_state state;
	int error;

	uint32_t alignment;
	struct buf kv; /* serialized key/value pairs */
	uint64_t n_kv;
	char **keys; /* owned, n_kv of them, for duplicate checks */
	size_t keys_cap;

	struct writer_tensor *tensors; /* owned */
	size_t n_tensors, tensors_cap;

	/* streaming */
	struct buf out;       /* pending output bytes, flushed at OUT_BUF_BYTES */
	uint64_t file_pos;    /* bytes handed to write() so far */
	size_t cur;           /* tensor being filled */
	uint64_t cur_written; /* bytes of it so far */
};

/* ---- buffers ---- */

static int buf_reserve(struct buf *b, size_t extra)
{
	size_t need, cap;
	uint8_t *p;

	if (__builtin_add_overflow(b->len, extra, &need))
		return -ENOMEM;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static int buf_put(struct buf *b, const void *data, size_t n)
{
	int r = buf_reserve(b, n);

	if (r < 0)
		return r;
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
	return 0;
}

static int buf_put_le(struct buf *b, uint64_t v, size_t n)
{
	uint8_t tmp[8];

	for (size_t i = 0; i < n; i++)
		tmp[i] = (uint8_t) (v >> (8 * i));
	return buf_put(b, tmp, n);
}

static int buf_put_str(struct buf *b, const void *s, uint64_t len)
{
	int r;

	if (len > SIZE_MAX)
		return -ENOMEM;
	r = buf_put_le(b, len, 8);
	if (r < 0)
		return r;
	return buf_put(b, s, (size_t) len);
}

/* ---- life cycle ---- */

int gguf_writer_new(const char *path, struct gguf_writer **ret, struct errmsg *e)
{
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;

	assert_return(path && *path && ret, -EINVAL);

	w = calloc(1, sizeof(*w));
	if (!w)
		return errmsg_set(e, -ENOMEM, "out of memory");
	w->fd = -EBADF;
	w->alignment = GGUF_DEFAULT_ALIGNMENT;
	w->path = strdup(path);
	if (!w->path || asprintf(&w->tmp_path, "%s.tmp", path) < 0) {
		w->tmp_path = NULL;
		return errmsg_set(e, -ENOMEM, "out of memory");
	}
	w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0)
		return errmsg_set(e, -errno, "%s: cannot create: %m", w->tmp_path);
	*ret = TAKE_PTR(w);
	return 0;
}

struct gguf_writer *gguf_writer_free(struct gguf_writer *w)
{
	if (!w)
		return NULL;
	if (w->fd >= 0) {
		(void) close(w->fd);
		if (w->state != STATE_FINISHED)
			(void) unlink(w->tmp_path);
	}
	for (size_t i = 0; i < w->n_kv; i++)
		free(w->keys[i]);
	free(w->keys);
	for (size_t i = 0; i < w->n_tensors; i++)
		free(w->tensors[i].name);
	free(w->tensors);
	free(w->kv.p);
	free(w->out.p);
	free(w->tmp_path);
	free(w->path);
	free(w);
	return NULL;
}

static int check_state(struct gguf_writer *w, enum writer_state want, struct errmsg *e)
{
	if (w->state == STATE_FAILED)
		return errmsg_set(e, w->error, "%s: an earlier write failed", w->tmp_path);
	if (w->state == STATE_FINISHED)
		return errmsg_set(e, -EINVAL, "%s: already finished", w->path);
	if (w->state != want)
		return errmsg_set(e, -EBUSY,
				  "%s: keys and tensors must be added before any tensor data",
				  w->tmp_path);
	return 0;
}

/* ---- metadata ---- */

static int begin_kv(struct gguf_writer *w, const char *key, enum gguf_type type, struct errmsg *e)
{
	size_t len;
	int r;

	assert_return(w && key, -EINVAL);
	r = check_state(w, STATE_HEADER, e);
	if (r < 0)
		return r;
	len = strlen(key);
	/* The reader refuses any other type for it, so refuse to write one. */
	if (strcmp(key, "general.alignment") == 0 && type != GGUF_TYPE_UINT32)
		return errmsg_set(e, -EINVAL, "key 'general.alignment' must be a u32, not %s",
				  gguf_type_name(type));
	if (len == 0 || len > WRITER_MAX_KEY)
		return errmsg_set(e, -EINVAL, "key of %zu bytes: must be 1..%d", len,
				  WRITER_MAX_KEY);
	for (size_t i = 0; i < w->n_kv; i++)
		if (strcmp(w->keys[i], key) == 0)
			return errmsg_set(e, -EEXIST, "key '%s' added twice", key);

	if (w->n_kv == w->keys_cap) {
		size_t cap = w->keys_cap ? 2 * w->keys_cap : 32;
		char **k = reallocarray(w->keys, cap, sizeof(*k));

		if (!k)
			return errmsg_set(e, -ENOMEM, "out of memory");
		w->keys = k;
		w->keys_cap = cap;
	}
	w->keys[w->n_kv] = strdup(key);
	if (!w->keys[w->n_kv])
		return errmsg_set(e, -ENOMEM, "out of memory");
	w->n_kv++;

	r = buf_put_str(&w->kv, key, len);
	if (r >= 0)
		r = buf_put_le(&w->kv, type, 4);
	if (r < 0)
		return errmsg_set(e, r, "out of memory");
	return 0;
}

/* A failed value leaves a half-written pair in the buffer: the writer cannot recover. */
static int kv_fail(struct gguf_writer *w, int r, struct errmsg *e)
{
	w->state = STATE_FAILED;
	w->error = r;
	return r;
}

static int add_scalar(struct gguf_writer *w, const char *key, enum gguf_type type, uint64_t bits,
		      struct errmsg *e)
{
	int r;

	if (key && strcmp(key, "general.alignment") == 0 && type == GGUF_TYPE_UINT32) {
		if (bits == 0 || (bits & (bits - 1)) != 0)
			return errmsg_set(e, -EINVAL, "alignment %" PRIu64 " is not a power of two",
					  bits);
	}
	r = begin_kv(w, key, type, e);
	if (r < 0)
		return r;
	r = buf_put_le(&w->kv, bits, gguf_type_size(type));
	if (r < 0)
		return kv_fail(w, errmsg_set(e, r, "out of memory"), e);
	if (strcmp(key, "general.alignment") == 0)
		w->alignment = (uint32_t) bits;
	return 0;
}

int gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v, struct errmsg *e)
{
	return add_scalar(w, key, GGUF_TYPE_UINT8, v, e);
}

int gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v, struct errmsg *e)
{
	return add_scalar(w, key, GGUF_TYPE_INT8, (uint64_t) (int64_t) v, e);
}

int gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v, struct errmsg *e)
{
	return add_scalar(w, key, GGUF_TYPE_UINT16, v, e);
}

int gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v, struct errmsg *e)
{
	return add_scalar(w, key, GGUF_TYPE_INT16, (uint64_t) (int64_t) v, e);
}

int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v, struct errmsg *e)
{
	return add_scalar(w, key, GGUF_TYPE_UINT32, v, e);
}

int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v, struct errmsg *e)
{
	return add_scalar(w, key, GGUF_TYPE_INT32, (uint64_t) (int64_t) v, e);
}

int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v, struct errmsg *e)
{
	return add_scalar(w, key, GGUF_TYPE_UINT64, v, e);
}

int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v, struct errmsg *e)
{
	return add_scalar(w, key, GGUF_TYPE_INT64, (uint64_t) v, e);
}

int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v, struct errmsg *e)
{
	uint32_t bits;

	memcpy(&bits, &v, sizeof(bits));
	return add_scalar(w, key, GGUF_TYPE_FLOAT32, bits, e);
}

int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v, struct errmsg *e)
{
	uint64_t bits;

	memcpy(&bits, &v, sizeof(bits));
	return add_scalar(w, key, GGUF_TYPE_FLOAT64, bits, e);
}

int gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v, struct errmsg *e)
{
	return add_scalar(w, key, GGUF_TYPE_BOOL, v ? 1 : 0, e);
}

int gguf_writer_add_str_n(struct gguf_writer *w, const char *key, const void *s, uint64_t len,
			  struct errmsg *e)
{
	int r;

	assert_return(s || len == 0, -EINVAL);
	r = begin_kv(w, key, GGUF_TYPE_STRING, e);
	if (r < 0)
		return r;
	r = buf_put_str(&w->kv, s, len);
	if (r < 0)
		return kv_fail(w, errmsg_set(e, r, "out of memory"), e);
	return 0;
}

int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *s, struct errmsg *e)
{
	assert_return(s, -EINVAL);
	return gguf_writer_add_str_n(w, key, s, strlen(s), e);
}

static bool is_scalar_type(enum gguf_type t)
{
	return gguf_type_size(t) != 0;
}

int gguf_writer_add_array(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
			  const void *elems, uint64_t n, struct errmsg *e)
{
	size_t size = gguf_type_size(elem_type);
	const uint8_t *p = elems;
	int r;

	assert_return(elems || n == 0, -EINVAL);
	if (!is_scalar_type(elem_type))
		return errmsg_set(e, -EINVAL, "key '%s': %s arrays need another function",
				  key ? key : "", gguf_type_name(elem_type));
	if (n > SIZE_MAX / size)
		return errmsg_set(e, -ENOMEM, "key '%s': array too large", key ? key : "");
	r = begin_kv(w, key, GGUF_TYPE_ARRAY, e);
	if (r < 0)
		return r;
	r = buf_put_le(&w->kv, elem_type, 4);
	if (r >= 0)
		r = buf_put_le(&w->kv, n, 8);
	if (r >= 0)
		r = buf_reserve(&w->kv, (size_t) n * size);
	if (r < 0)
		return kv_fail(w, errmsg_set(e, r, "out of memory"), e);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = 0;

		/* host order in, little-endian out */
		if (elem_type == GGUF_TYPE_BOOL) {
			v = p[i] ? 1 : 0;
		} else if (size == 1) {
			v = p[i];
		} else if (size == 2) {
			uint16_t x;
			memcpy(&x, p + i * 2, 2);
			v = x;
		} else if (size == 4) {
			uint32_t x;
			memcpy(&x, p + i * 4, 4);
			v = x;
		} else {
			memcpy(&v, p + i * 8, 8);
		}
		(void) buf_put_le(&w->kv, v, size); /* reserved above: cannot fail */
	}
	return 0;
}

int gguf_writer_add_str_array(struct gguf_writer *w, const char *key, const char *const *strs,
			      uint64_t n, struct errmsg *e)
{
	int r;

	assert_return(strs || n == 0, -EINVAL);
	r = begin_kv(w, key, GGUF_TYPE_ARRAY, e);
	if (r < 0)
		return r;
	r = buf_put_le(&w->kv, GGUF_TYPE_STRING, 4);
	if (r >= 0)
		r = buf_put_le(&w->kv, n, 8);
	for (uint64_t i = 0; r >= 0 && i < n; i++)
		r = buf_put_str(&w->kv, strs[i] ? strs[i] : "", strs[i] ? strlen(strs[i]) : 0);
	if (r < 0)
		return kv_fail(w, errmsg_set(e, r, "out of memory"), e);
	return 0;
}

/* Checks a value tree before anything is written, so a bad one leaves the writer usable. */
static int check_value(const struct gguf_value *v, unsigned depth, const char *key,
		       struct errmsg *e)
{
	if ((unsigned) v->type >= GGUF_TYPE_COUNT_)
		return errmsg_set(e, -EINVAL, "key '%s': unknown value type %d", key, v->type);
	if (v->type == GGUF_TYPE_STRING && v->str.len && !v->str.data)
		return errmsg_set(e, -EINVAL, "key '%s': string without data", key);
	if (v->type != GGUF_TYPE_ARRAY)
		return 0;
	if ((unsigned) v->arr.elem_type >= GGUF_TYPE_COUNT_)
		return errmsg_set(e, -EINVAL, "key '%s': unknown array element type %d", key,
				  v->arr.elem_type);
	if (v->arr.n == 0)
		return 0;
	switch (v->arr.elem_type) {
	case GGUF_TYPE_STRING:
		if (!v->arr.strs)
			return errmsg_set(e, -EINVAL, "key '%s': string array without strs", key);
		for (uint64_t i = 0; i < v->arr.n; i++)
			if (v->arr.strs[i].len && !v->arr.strs[i].data)
				return errmsg_set(e, -EINVAL, "key '%s': string without data", key);
		return 0;
	case GGUF_TYPE_ARRAY:
		if (depth + 1 >= WRITER_MAX_NESTING)
			return errmsg_set(e, -EINVAL, "key '%s': arrays nested deeper than %d", key,
					  WRITER_MAX_NESTING);
		if (!v->arr.values)
			return errmsg_set(e, -EINVAL, "key '%s': array of arrays without values",
					  key);
		for (uint64_t i = 0; i < v->arr.n; i++) {
			int r;

			if (v->arr.values[i].type != GGUF_TYPE_ARRAY)
				return errmsg_set(e, -EINVAL,
						  "key '%s': element %" PRIu64
						  " of an array of arrays is a %s",
						  key, i, gguf_type_name(v->arr.values[i].type));
			r = check_value(&v->arr.values[i], depth + 1, key, e);
			if (r < 0)
				return r;
		}
		return 0;
	default:
		if (!v->arr.raw)
			return errmsg_set(e, -EINVAL, "key '%s': scalar array without raw data",
					  key);
		if (v->arr.n > SIZE_MAX / gguf_type_size(v->arr.elem_type))
			return errmsg_set(e, -ENOMEM, "key '%s': array too large", key);
		return 0;
	}
}

static int put_value(struct buf *b, const struct gguf_value *v, bool with_type)
{
	size_t size;
	int r = 0;

	if (with_type)
		r = buf_put_le(b, v->type, 4);
	if (r < 0)
		return r;
	switch (v->type) {
	case GGUF_TYPE_STRING:
		return buf_put_str(b, v->str.data, v->str.len);
	case GGUF_TYPE_FLOAT32: {
		float f = (float) v->f64;
		uint32_t bits;

		memcpy(&bits, &f, 4);
		return buf_put_le(b, bits, 4);
	}
	case GGUF_TYPE_FLOAT64: {
		uint64_t bits;

		memcpy(&bits, &v->f64, 8);
		return buf_put_le(b, bits, 8);
	}
	case GGUF_TYPE_BOOL:
		return buf_put_le(b, v->u64 ? 1 : 0, 1);
	case GGUF_TYPE_ARRAY:
		break;
	default:
		return buf_put_le(b, v->u64, gguf_type_size(v->type));
	}

	r = buf_put_le(b, v->arr.elem_type, 4);
	if (r >= 0)
		r = buf_put_le(b, v->arr.n, 8);
	if (r < 0)
		return r;
	switch (v->arr.elem_type) {
	case GGUF_TYPE_STRING:
		for (uint64_t i = 0; r >= 0 && i < v->arr.n; i++)
			r = buf_put_str(b, v->arr.strs[i].data, v->arr.strs[i].len);
		return r;
	case GGUF_TYPE_ARRAY:
		for (uint64_t i = 0; r >= 0 && i < v->arr.n; i++)
			r = put_value(b, &v->arr.values[i], false);
		return r;
	default:
		size = gguf_type_size(v->arr.elem_type);
		if (v->arr.elem_type == GGUF_TYPE_BOOL) {
			const uint8_t *p = v->arr.raw;

			for (uint64_t i = 0; r >= 0 && i < v->arr.n; i++)
				r = buf_put_le(b, p[i] ? 1 : 0, 1);
			return r;
		}
		return buf_put(b, v->arr.raw, (size_t) v->arr.n * size); /* already LE */
	}
}

int gguf_writer_add_value(struct gguf_writer *w, const char *key, const struct gguf_value *v,
			  struct errmsg *e)
{
	int r;

	assert_return(w && key && v, -EINVAL);
	r = check_value(v, 0, key, e);
	if (r < 0)
		return r;
	if (v->type != GGUF_TYPE_ARRAY && v->type != GGUF_TYPE_STRING) {
		uint64_t bits = v->u64;

		if (v->type == GGUF_TYPE_FLOAT32) {
			float f = (float) v->f64;
			uint32_t b32;

			memcpy(&b32, &f, 4);
			bits = b32;
		} else if (v->type == GGUF_TYPE_BOOL) {
			bits = v->u64 != 0;
		}
		return add_scalar(w, key, v->type, bits, e);
	}
	r = begin_kv(w, key, v->type, e);
	if (r < 0)
		return r;
	r = put_value(&w->kv, v, false);
	if (r < 0)
		return kv_fail(w, errmsg_set(e, r, "key '%s': out of memory", key), e);
	return 0;
}

int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment, struct errmsg *e)
{
	assert_return(w, -EINVAL);
	return gguf_writer_add_u32(w, "general.alignment", alignment, e);
}

/* ---- tensors ---- */

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
			   const uint64_t *ne, struct errmsg *e)
{
	struct writer_tensor *t;
	uint64_t n_elems = 1, n_rows = 1, n_bytes;
	int64_t row_bytes;
	size_t len;
	int r;

	assert_return(w && name && (ne || n_dims == 0), -EINVAL);
	r = check_state(w, STATE_HEADER, e);
	if (r < 0)
		return r;
	len = strlen(name);
	if (len == 0 || len > WRITER_MAX_NAME)
		return errmsg_set(e, -EINVAL, "tensor name of %zu bytes: must be 1..%d", len,
				  WRITER_MAX_NAME);
	if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
		return errmsg_set(e, -EINVAL, "tensor '%s': n_dims %" PRIu32 " not in 1..%d", name,
				  n_dims, GGUF_MAX_DIMS);
	if (!gguf_ggml_type_name(type))
		return errmsg_set(e, -EINVAL, "tensor '%s': unknown type %" PRIu32, name, type);
	for (uint32_t d = 0; d < n_dims; d++) {
		if (ne[d] == 0)
			return errmsg_set(e, -EINVAL, "tensor '%s': ne[%" PRIu32 "] is 0", name, d);
		if (__builtin_mul_overflow(n_elems, ne[d], &n_elems) || n_elems > INT64_MAX)
			return errmsg_set(e, -EOVERFLOW, "tensor '%s': too many elements", name);
		if (d > 0)
			n_rows *= ne[d];
	}
	row_bytes = gguf_ggml_row_bytes(type, ne[0]);
	if (row_bytes < 0)
		return errmsg_set(e, (int) row_bytes,
				  "tensor '%s': ne[0] = %" PRIu64 " is not a whole number of %s "
				  "blocks",
				  name, ne[0], gguf_ggml_type_name(type));
	if (__builtin_mul_overflow((uint64_t) row_bytes, n_rows, &n_bytes) || n_bytes > INT64_MAX)
		return errmsg_set(e, -EOVERFLOW, "tensor '%s': size overflows", name);
	for (size_t i = 0; i < w->n_tensors; i++)
		if (strcmp(w->tensors[i].name, name) == 0)
			return errmsg_set(e, -EEXIST, "tensor '%s' added twice", name);

	if (w->n_tensors == w->tensors_cap) {
		size_t cap = w->tensors_cap ? 2 * w->tensors_cap : 64;
		struct writer_tensor *ts = reallocarray(w->tensors, cap, sizeof(*ts));

		if (!ts)
			return errmsg_set(e, -ENOMEM, "out of memory");
		w->tensors = ts;
		w->tensors_cap = cap;
	}
	t = &w->tensors[w->n_tensors];
	*t = (struct writer_tensor){ .type = type, .n_dims = n_dims, .n_bytes = n_bytes };
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = d < n_dims ? ne[d] : 1;
	t->name = strdup(name);
	if (!t->name)
		return errmsg_set(e, -ENOMEM, "out of memory");
	w->n_tensors++;
	return 0;
}

/* Bytes before the data section (header, kv, tensor infos, padding); assigns the offsets.
 * Returns the total file size in *ret_total. */
static uint64_t layout(const struct gguf_writer *w, uint64_t *ret_total)
{
	uint64_t head = 4 + 4 + 8 + 8 + w->kv.len, off = 0;

	for (size_t i = 0; i < w->n_tensors; i++) {
		struct writer_tensor *t = &w->tensors[i];

		head += 8 + strlen(t->name) + 4 + 8 * t->n_dims + 4 + 8;
		t->offset = off;
		off = ALIGN_UP(off + t->n_bytes, (uint64_t) w->alignment);
	}
	head = ALIGN_UP(head, (uint64_t) w->alignment);
	if (ret_total)
		*ret_total = head + (w->n_tensors ? off : 0);
	return head;
}

uint64_t gguf_writer_size(const struct gguf_writer *w)
{
	uint64_t total;

	(void) layout(w, &total);
	return total;
}

uint64_t gguf_writer_tensor_bytes(const struct gguf_writer *w, size_t i)
{
	return i < w->n_tensors ? w->tensors[i].n_bytes : 0;
}

/* ---- output ---- */

static int write_fail(struct gguf_writer *w, int r, const char *what, struct errmsg *e)
{
	w->state = STATE_FAILED;
	w->error = r;
	if (r == -ENOSPC)
		return errmsg_set(e, r,
				  "%s: %s failed at byte %" PRIu64 " of %" PRIu64
				  ": no space left on the device",
				  w->tmp_path, what, w->file_pos, gguf_writer_size(w));
	return errmsg_set(e, r, "%s: %s failed at byte %" PRIu64 ": %s", w->tmp_path, what,
			  w->file_pos, strerror(-r));
}

static int flush_out(struct gguf_writer *w, struct errmsg *e)
{
	size_t done = 0;

	while (done < w->out.len) {
		ssize_t n = write(w->fd, w->out.p + done, w->out.len - done);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return write_fail(w, -errno, "write", e);
		}
		if (n == 0)
			return write_fail(w, -EIO, "write", e);
		done += (size_t) n;
		w->file_pos += (uint64_t) n;
	}
	w->out.len = 0;
	return 0;
}

static int out_put(struct gguf_writer *w, const void *data, size_t n, struct errmsg *e)
{
	const uint8_t *p = data;

	while (n > 0) {
		size_t room = OUT_BUF_BYTES - w->out.len, k = MIN(n, room);
		int r;

		memcpy(w->out.p + w->out.len, p, k);
		w->out.len += k;
		p += k;
		n -= k;
		if (w->out.len == OUT_BUF_BYTES) {
			r = flush_out(w, e);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static int out_zeros(struct gguf_writer *w, uint64_t n, struct errmsg *e)
{
	static const uint8_t zeros[256];

	while (n > 0) {
		size_t k = (size_t) MIN(n, (uint64_t) sizeof(zeros));
		int r = out_put(w, zeros, k, e);

		if (r < 0)
			return r;
		n -= k;
	}
	return 0;
}

static int write_header(struct gguf_writer *w, struct errmsg *e)
{
	_cleanup_free_ uint8_t *hdr_p = NULL;
	struct buf hdr = {};
	uint64_t head, total, pos;
	int r;

	head = layout(w, &total);
	w->out.p = malloc(OUT_BUF_BYTES);
	if (!w->out.p)
		return errmsg_set(e, -ENOMEM, "out of memory");
	w->out.cap = OUT_BUF_BYTES;

	/* Reserve the space now: a full disk is reported before the data is generated. */
	if (fallocate(w->fd, 0, 0, (off_t) total) < 0 && errno != EOPNOTSUPP && errno != ENOSYS) {
		if (errno == ENOSPC || errno == EFBIG)
			return write_fail(w, -errno, "reserving the file's space", e);
		return write_fail(w, -errno, "fallocate", e);
	}

	r = buf_put(&hdr, GGUF_MAGIC_BYTES, 4);
	if (r >= 0)
		r = buf_put_le(&hdr, WRITER_VERSION, 4);
	if (r >= 0)
		r = buf_put_le(&hdr, w->n_tensors, 8);
	if (r >= 0)
		r = buf_put_le(&hdr, w->n_kv, 8);
	for (size_t i = 0; r >= 0 && i < w->n_tensors; i++) {
		const struct writer_tensor *t = &w->tensors[i];

		r = buf_put_str(&hdr, t->name, strlen(t->name));
		if (r >= 0)
			r = buf_put_le(&hdr, t->n_dims, 4);
		for (uint32_t d = 0; r >= 0 && d < t->n_dims; d++)
			r = buf_put_le(&hdr, t->ne[d], 8);
		if (r >= 0)
			r = buf_put_le(&hdr, t->type, 4);
		if (r >= 0)
			r = buf_put_le(&hdr, t->offset, 8);
	}
	hdr_p = hdr.p;
	if (r < 0)
		return errmsg_set(e, -ENOMEM, "out of memory");

	/* magic..n_kv, then the kv pairs, then the tensor infos */
	r = out_put(w, hdr.p, 24, e);
	if (r >= 0)
		r = out_put(w, w->kv.p, w->kv.len, e);
	if (r >= 0)
		r = out_put(w, hdr.p + 24, hdr.len - 24, e);
	if (r < 0)
		return r;
	pos = w->file_pos + w->out.len;
	return out_zeros(w, head - pos, e);
}

/* Pads after tensor cur (complete) to where the next one starts, and moves on. */
static int next_tensor(struct gguf_writer *w, struct errmsg *e)
{
	const struct writer_tensor *t = &w->tensors[w->cur];
	uint64_t end = t->offset + t->n_bytes;
	int r;

	r = out_zeros(w, ALIGN_UP(end, (uint64_t) w->alignment) - end, e);
	if (r < 0)
		return r;
	w->cur++;
	w->cur_written = 0;
	return 0;
}

static int start_data(struct gguf_writer *w, struct errmsg *e)
{
	int r;

	r = check_state(w, STATE_HEADER, e);
	if (r < 0)
		return r;
	r = write_header(w, e);
	if (r < 0)
		return r;
	w->state = STATE_DATA;
	return 0;
}

int gguf_writer_write(struct gguf_writer *w, const void *data, size_t n, struct errmsg *e)
{
	const uint8_t *p = data;
	int r;

	assert_return(w && (data || n == 0), -EINVAL);
	if (w->state == STATE_HEADER) {
		r = start_data(w, e);
		if (r < 0)
			return r;
	}
	r = check_state(w, STATE_DATA, e);
	if (r < 0)
		return r;

	while (n > 0) {
		const struct writer_tensor *t;
		uint64_t k;

		if (w->cur >= w->n_tensors)
			return errmsg_set(e, -EINVAL,
					  "%s: %zu bytes of data beyond the last tensor",
					  w->tmp_path, n);
		t = &w->tensors[w->cur];
		k = MIN((uint64_t) n, t->n_bytes - w->cur_written);
		r = out_put(w, p, (size_t) k, e);
		if (r < 0)
			return r;
		p += k;
		n -= (size_t) k;
		w->cur_written += k;
		if (w->cur_written == t->n_bytes) {
			r = next_tensor(w, e);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static int fsync_dir_of(const char *path)
{
	_cleanup_free_ char *copy = strdup(path);
	_cleanup_close_ int fd = -EBADF;

	if (!copy)
		return -ENOMEM;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0 && errno != EINVAL)
		return -errno;
	return 0;
}

int gguf_writer_finish(struct gguf_writer *w, struct errmsg *e)
{
	int r;

	assert_return(w, -EINVAL);
	if (w->state == STATE_HEADER) {
		r = start_data(w, e);
		if (r < 0)
			return r;
	}
	r = check_state(w, STATE_DATA, e);
	if (r < 0)
		return r;
	if (w->cur < w->n_tensors)
		return errmsg_set(e, -EINVAL,
				  "%s: tensor %zu ('%s') has %" PRIu64 " of its %" PRIu64
				  " bytes (%zu tensors declared)",
				  w->tmp_path, w->cur, w->tensors[w->cur].name, w->cur_written,
				  w->tensors[w->cur].n_bytes, w->n_tensors);
	r = flush_out(w, e);
	if (r < 0)
		return r;
	/* The file may be shorter than reserved only if no tensors were declared (the vocab-only
	 * layout is exact anyway); trim to be sure nothing stale is left at the end. */
	if (ftruncate(w->fd, (off_t) w->file_pos) < 0)
		return write_fail(w, -errno, "ftruncate", e);
	if (fsync(w->fd) < 0)
		return write_fail(w, -errno, "fsync", e);
	if (rename(w->tmp_path, w->path) < 0)
		return write_fail(w, -errno, "rename", e);
	w->state = STATE_FINISHED;
	(void) close(TAKE_FD(w->fd));
	r = fsync_dir_of(w->path);
	if (r < 0)
		return errmsg_set(e, r, "%s: fsync of the directory failed: %s", w->path,
				  strerror(-r));
	return 0;
}
