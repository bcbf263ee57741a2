/* SPDX-License-Identifier: MIT */
/*
 * safetensors.c: the checked safetensors reader and writer (see safetensors.h).
 *
 * The header is bounded before it is read (length against the file and a 100 MB cap) and
 * parsed by json-c in strict mode; after that every number is checked before it is used:
 * shapes are multiplied with overflow checks, offsets compared with the data size, and the
 * tensors sorted by offset must tile the data exactly, as the reference implementation
 * requires, so no two tensors share bytes and none reaches past the end.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "atomic-file.h"
#include "safetensors.h"

struct metadata_entry {
	char *key;   /* owned */
	char *value; /* owned */
};

struct safetensors {
	const uint8_t *data; /* borrowed buffer, or the mapping */
	size_t size;
	void *map; /* owned mapping or NULL */
	size_t n_tensors;
	struct safetensors_tensor *tensors; /* owned, sorted by name */
	size_t n_meta;
	struct metadata_entry *meta; /* owned */
};

static const struct {
	const char *name;
	unsigned bits;
} dtypes[SAFETENSORS_DTYPE_COUNT_] = {
	[SAFETENSORS_BOOL] = { "BOOL", 8 },       [SAFETENSORS_U8] = { "U8", 8 },
	[SAFETENSORS_I8] = { "I8", 8 },           [SAFETENSORS_F8_E5M2] = { "F8_E5M2", 8 },
	[SAFETENSORS_F8_E4M3] = { "F8_E4M3", 8 }, [SAFETENSORS_F8_E8M0] = { "F8_E8M0", 8 },
	[SAFETENSORS_I16] = { "I16", 16 },        [SAFETENSORS_U16] = { "U16", 16 },
	[SAFETENSORS_F16] = { "F16", 16 },        [SAFETENSORS_BF16] = { "BF16", 16 },
	[SAFETENSORS_I32] = { "I32", 32 },        [SAFETENSORS_U32] = { "U32", 32 },
	[SAFETENSORS_F32] = { "F32", 32 },        [SAFETENSORS_F64] = { "F64", 64 },
	[SAFETENSORS_I64] = { "I64", 64 },        [SAFETENSORS_U64] = { "U64", 64 },
	[SAFETENSORS_F4] = { "F4", 4 },           [SAFETENSORS_F6_E2M3] = { "F6_E2M3", 6 },
	[SAFETENSORS_F6_E3M2] = { "F6_E3M2", 6 },
};

const char *safetensors_dtype_name(enum safetensors_dtype t)
{
	return (unsigned) t < SAFETENSORS_DTYPE_COUNT_ ? dtypes[t].name : NULL;
}

unsigned safetensors_dtype_bits(enum safetensors_dtype t)
{
	return (unsigned) t < SAFETENSORS_DTYPE_COUNT_ ? dtypes[t].bits : 0;
}

int safetensors_dtype_from_name(const char *name, enum safetensors_dtype *ret)
{
	for (unsigned i = 0; i < SAFETENSORS_DTYPE_COUNT_; i++)
		if (strcmp(name, dtypes[i].name) == 0) {
			*ret = (enum safetensors_dtype) i;
			return 0;
		}
	return -EINVAL;
}

struct safetensors *safetensors_free(struct safetensors *s)
{
	if (!s)
		return NULL;
	for (size_t i = 0; i < s->n_tensors; i++)
		free(s->tensors[i].name);
	free(s->tensors);
	for (size_t i = 0; i < s->n_meta; i++) {
		free(s->meta[i].key);
		free(s->meta[i].value);
	}
	free(s->meta);
	if (s->map)
		(void) munmap(s->map, s->size);
	free(s);
	return NULL;
}

static void json_putp(struct json_object **j)
{
	if (*j)
		(void) json_object_put(*j);
}

static void tokener_freep(struct json_tokener **t)
{
	if (*t)
		json_tokener_free(*t);
}

/* A JSON value that must be a non-negative integer; what names it in messages. */
static int get_uint(struct json_object *v, const char *name, const char *what, uint64_t *ret,
		    struct errmsg *e)
{
	if (!json_object_is_type(v, json_type_int))
		return errmsg_set(e, -EBADMSG, "tensor '%s': %s is not an integer", name, what);
	if (json_object_get_int64(v) < 0)
		return errmsg_set(e, -EBADMSG, "tensor '%s': %s is negative (%" PRId64 ")", name,
				  what, json_object_get_int64(v));
	*ret = json_object_get_uint64(v);
	return 0;
}

static int parse_tensor(const char *name, struct json_object *info, uint64_t data_size,
			struct safetensors_tensor *t, struct errmsg *e)
{
	struct json_object *dtype, *shape, *offsets;
	uint64_t begin = 0, end = 0, bits;
	int r;

	if (!json_object_is_type(info, json_type_object))
		return errmsg_set(e, -EBADMSG, "tensor '%s': entry is not an object", name);
	if (!json_object_object_get_ex(info, "dtype", &dtype))
		return errmsg_set(e, -EBADMSG, "tensor '%s': no dtype", name);
	if (!json_object_object_get_ex(info, "shape", &shape))
		return errmsg_set(e, -EBADMSG, "tensor '%s': no shape", name);
	if (!json_object_object_get_ex(info, "data_offsets", &offsets))
		return errmsg_set(e, -EBADMSG, "tensor '%s': no data_offsets", name);

	if (!json_object_is_type(dtype, json_type_string))
		return errmsg_set(e, -EBADMSG, "tensor '%s': dtype is not a string", name);
	if (safetensors_dtype_from_name(json_object_get_string(dtype), &t->dtype) < 0)
		return errmsg_set(e, -EBADMSG, "tensor '%s': unknown dtype '%.32s'", name,
				  json_object_get_string(dtype));

	if (!json_object_is_type(shape, json_type_array))
		return errmsg_set(e, -EBADMSG, "tensor '%s': shape is not an array", name);
	if (json_object_array_length(shape) > SAFETENSORS_MAX_DIMS)
		return errmsg_set(e, -EBADMSG, "tensor '%s': shape has %zu dimensions (at most %d)",
				  name, json_object_array_length(shape), SAFETENSORS_MAX_DIMS);
	t->n_dims = (uint32_t) json_object_array_length(shape);
	t->n_elems = 1;
	for (uint32_t d = 0; d < t->n_dims; d++) {
		r = get_uint(json_object_array_get_idx(shape, d), name, "a shape dimension",
			     &t->shape[d], e);
		if (r < 0)
			return r;
		if (__builtin_mul_overflow(t->n_elems, t->shape[d], &t->n_elems))
			return errmsg_set(e, -EBADMSG, "tensor '%s': shape overflows", name);
	}

	if (!json_object_is_type(offsets, json_type_array) ||
	    json_object_array_length(offsets) != 2)
		return errmsg_set(e, -EBADMSG, "tensor '%s': data_offsets is not [begin, end]",
				  name);
	if ((r = get_uint(json_object_array_get_idx(offsets, 0), name, "data_offsets[0]", &begin,
			  e)) < 0 ||
	    (r = get_uint(json_object_array_get_idx(offsets, 1), name, "data_offsets[1]", &end,
			  e)) < 0)
		return r;
	if (end < begin)
		return errmsg_set(e, -EBADMSG,
				  "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
				  "] end before begin",
				  name, begin, end);
	if (end > data_size)
		return errmsg_set(e, -EBADMSG,
				  "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
				  "] past the end of the data (%" PRIu64 " bytes)",
				  name, begin, end, data_size);
	bits = dtypes[t->dtype].bits;
	if (__builtin_mul_overflow(t->n_elems, bits, &bits))
		return errmsg_set(e, -EBADMSG, "tensor '%s': shape overflows", name);
	if (bits % 8 != 0)
		return errmsg_set(e, -EBADMSG,
				  "tensor '%s': %" PRIu64
				  " %s elements are not a whole number of bytes",
				  name, t->n_elems, dtypes[t->dtype].name);
	if (bits / 8 != end - begin)
		return errmsg_set(
			e, -EBADMSG,
			"tensor '%s': %" PRIu64 " %s elements need %" PRIu64
			" bytes, but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
			name, t->n_elems, dtypes[t->dtype].name, bits / 8, begin, end, end - begin);
	t->offset = begin;
	t->n_bytes = end - begin;
	t->name = strdup(name);
	if (!t->name)
		return -ENOMEM;
	return 0;
}

static int parse_metadata(struct safetensors *s, struct json_object *meta, struct errmsg *e)
{
	size_t n;

	if (!json_object_is_type(meta, json_type_object))
		return errmsg_set(e, -EBADMSG, "__metadata__ is not an object");
	n = (size_t) json_object_object_length(meta);
	s->meta = calloc(n ? n : 1, sizeof(*s->meta));
	if (!s->meta)
		return -ENOMEM;
	json_object_object_foreach(meta, key, val)
	{
		if (!json_object_is_type(val, json_type_string))
			return errmsg_set(e, -EBADMSG, "__metadata__ '%.64s' is not a string", key);
		s->meta[s->n_meta].key = strdup(key);
		s->meta[s->n_meta].value = strdup(json_object_get_string(val));
		s->n_meta++;
		if (!s->meta[s->n_meta - 1].key || !s->meta[s->n_meta - 1].value)
			return -ENOMEM;
	}
	return 0;
}

static int cmp_offset(const void *a, const void *b)
{
	const struct safetensors_tensor *x = *(const struct safetensors_tensor *const *) a;
	const struct safetensors_tensor *y = *(const struct safetensors_tensor *const *) b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	/* Empty tensors first at a shared offset: they occupy nothing. */
	if (x->n_bytes != y->n_bytes)
		return x->n_bytes < y->n_bytes ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct safetensors_tensor *) a)->name,
		      ((const struct safetensors_tensor *) b)->name);
}

/* The tensors must cover [0, data_size) exactly once, as the reference reader requires. */
static int check_tiling(struct safetensors *s, uint64_t data_size, struct errmsg *e)
{
	_cleanup_free_ struct safetensors_tensor **by_offset = NULL;
	uint64_t end = 0;
	const char *prev = NULL;

	by_offset = calloc(s->n_tensors ? s->n_tensors : 1, sizeof(*by_offset));
	if (!by_offset)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_tensors; i++)
		by_offset[i] = &s->tensors[i];
	qsort(by_offset, s->n_tensors, sizeof(*by_offset), cmp_offset);
	for (size_t i = 0; i < s->n_tensors; i++) {
		const struct safetensors_tensor *t = by_offset[i];

		if (t->offset < end)
			return errmsg_set(e, -EBADMSG,
					  "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
					  "] overlap tensor '%s' (which ends at %" PRIu64 ")",
					  t->name, t->offset, t->offset + t->n_bytes, prev, end);
		if (t->offset > end)
			return errmsg_set(e, -EBADMSG,
					  "tensor '%s': data_offsets begin at %" PRIu64
					  ", leaving a gap after byte %" PRIu64,
					  t->name, t->offset, end);
		end = t->offset + t->n_bytes;
		prev = t->name;
	}
	if (end != data_size)
		return errmsg_set(e, -EBADMSG,
				  "the tensors cover %" PRIu64
				  " bytes of data, but the file holds %" PRIu64 " after the header",
				  end, data_size);
	return 0;
}

int safetensors_parse_buffer(const void *data, size_t size, struct safetensors **ret,
			     struct errmsg *e)
{
	_cleanup_(safetensors_freep) struct safetensors *s = NULL;
	_cleanup_(json_putp) struct json_object *root = NULL;
	_cleanup_(tokener_freep) struct json_tokener *tok = NULL;
	const uint8_t *p = data;
	uint64_t header_len = 0, data_size;
	enum json_tokener_error jerr;
	size_t end, n_entries;
	int r;

	assert_return((data || size == 0) && ret, -EINVAL);
	if (size < 8)
		return errmsg_set(e, -EBADMSG,
				  "file is %zu bytes, too short for a safetensors header", size);
	for (int i = 0; i < 8; i++)
		header_len |= (uint64_t) p[i] << (8 * i);
	if (header_len > SAFETENSORS_MAX_HEADER)
		return errmsg_set(e, -EBADMSG,
				  "header length %" PRIu64 " exceeds the %u-byte limit", header_len,
				  SAFETENSORS_MAX_HEADER);
	if (header_len > size - 8)
		return errmsg_set(e, -EBADMSG,
				  "header length %" PRIu64
				  " runs past the end of the file (%zu bytes)",
				  header_len, size);
	if (header_len < 2 || p[8] != '{')
		return errmsg_set(e, -EBADMSG, "header does not start with '{'");
	data_size = size - 8 - header_len;

	tok = json_tokener_new();
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
					    JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, (const char *) p + 8, (int) header_len);
	jerr = json_tokener_get_error(tok);
	if (!root || jerr != json_tokener_success)
		return errmsg_set(e, -EBADMSG, "header is not valid JSON: %s (near byte %zu)",
				  jerr == json_tokener_continue ? "unexpected end"
								: json_tokener_error_desc(jerr),
				  8 + json_tokener_get_parse_end(tok));
	end = json_tokener_get_parse_end(tok);
	for (size_t i = end; i < header_len; i++)
		if (!strchr(" \t\r\n", p[8 + i]) || p[8 + i] == 0)
			return errmsg_set(e, -EBADMSG,
					  "header has data after the JSON object (byte %zu)",
					  8 + i);
	if (!json_object_is_type(root, json_type_object))
		return errmsg_set(e, -EBADMSG, "header is not a JSON object");

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->data = p;
	s->size = size;
	n_entries = (size_t) json_object_object_length(root);
	s->tensors = calloc(n_entries ? n_entries : 1, sizeof(*s->tensors));
	if (!s->tensors)
		return -ENOMEM;

	/* In file order (json-c keeps it), so the first bad entry is the one reported. */
	struct json_object_iterator it = json_object_iter_begin(root);
	struct json_object_iterator it_end = json_object_iter_end(root);
	for (; !json_object_iter_equal(&it, &it_end); json_object_iter_next(&it)) {
		const char *key = json_object_iter_peek_name(&it);
		struct json_object *val = json_object_iter_peek_value(&it);

		if (strcmp(key, "__metadata__") == 0) {
			r = parse_metadata(s, val, e);
			if (r < 0)
				return r;
			continue;
		}
		r = parse_tensor(key, val, data_size, &s->tensors[s->n_tensors], e);
		if (r < 0)
			return r;
		s->tensors[s->n_tensors].data =
			p + 8 + header_len + s->tensors[s->n_tensors].offset;
		s->n_tensors++;
	}
	r = check_tiling(s, data_size, e);
	if (r < 0)
		return r;
	qsort(s->tensors, s->n_tensors, sizeof(*s->tensors), cmp_name);
	*ret = TAKE_PTR(s);
	return 0;
}

int safetensors_open(const char *path, struct safetensors **ret, struct errmsg *e)
{
	_cleanup_close_ int fd = -EBADF;
	struct safetensors *s = NULL;
	struct stat st;
	void *map;
	int r;

	assert_return(path && ret, -EINVAL);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errmsg_set(e, -errno, "cannot open: %s", strerror(errno));
	if (fstat(fd, &st) < 0)
		return errmsg_set(e, -errno, "cannot stat: %s", strerror(errno));
	if (!S_ISREG(st.st_mode))
		return errmsg_set(e, -EINVAL, "not a regular file");
	if (st.st_size < 8)
		return errmsg_set(e, -EBADMSG,
				  "file is %lld bytes, too short for a safetensors header",
				  (long long) st.st_size);
	if ((uint64_t) st.st_size > SIZE_MAX)
		return errmsg_set(e, -EFBIG, "file too large to map");
	map = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return errmsg_set(e, -errno, "cannot map: %s", strerror(errno));
	r = safetensors_parse_buffer(map, (size_t) st.st_size, &s, e);
	if (r < 0) {
		(void) munmap(map, (size_t) st.st_size);
		return r;
	}
	s->map = map;
	*ret = s;
	return 0;
}

size_t safetensors_n_tensors(const struct safetensors *s)
{
	return s ? s->n_tensors : 0;
}

const struct safetensors_tensor *safetensors_tensor_at(const struct safetensors *s, size_t i)
{
	return s && i < s->n_tensors ? &s->tensors[i] : NULL;
}

const struct safetensors_tensor *safetensors_find(const struct safetensors *s, const char *name)
{
	struct safetensors_tensor key = { .name = (char *) name };

	if (!s || !name)
		return NULL;
	return bsearch(&key, s->tensors, s->n_tensors, sizeof(*s->tensors), cmp_name);
}

size_t safetensors_n_metadata(const struct safetensors *s)
{
	return s ? s->n_meta : 0;
}

int safetensors_metadata_at(const struct safetensors *s, size_t i, const char **ret_key,
			    const char **ret_value)
{
	if (!s || i >= s->n_meta)
		return -ENOENT;
	if (ret_key)
		*ret_key = s->meta[i].key;
	if (ret_value)
		*ret_value = s->meta[i].value;
	return 0;
}

const char *safetensors_metadata_get(const struct safetensors *s, const char *key)
{
	for (size_t i = 0; s && key && i < s->n_meta; i++)
		if (strcmp(s->meta[i].key, key) == 0)
			return s->meta[i].value;
	return NULL;
}

/* ---- writer ---- */

int safetensors_write(const char *path, const struct safetensors_tensor *tensors, size_t n,
		      const char *const *meta, size_t n_meta, struct errmsg *e)
{
	_cleanup_(json_putp) struct json_object *root = NULL;
	_cleanup_(atomic_file_freep) struct atomic_file *f = NULL;
	_cleanup_free_ char *header = NULL;
	uint64_t offset = 0, total;
	size_t header_len, padded;
	const char *json;
	uint8_t len_le[8];
	int r;

	assert_return(path && (tensors || n == 0) && (meta || n_meta == 0), -EINVAL);
	root = json_object_new_object();
	if (!root)
		return -ENOMEM;
	if (n_meta > 0) {
		struct json_object *m = json_object_new_object();

		if (!m || json_object_object_add(root, "__metadata__", m) < 0) {
			json_object_put(m);
			return -ENOMEM;
		}
		for (size_t i = 0; i < n_meta; i++)
			if (json_object_object_add(m, meta[2 * i],
						   json_object_new_string(meta[2 * i + 1])) < 0)
				return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const struct safetensors_tensor *t = &tensors[i];
		struct json_object *info = json_object_new_object(), *shape, *offs;
		uint64_t elems = 1, bits;

		if (!info || json_object_object_add(root, t->name, info) < 0) {
			json_object_put(info);
			return -ENOMEM;
		}
		if ((unsigned) t->dtype >= SAFETENSORS_DTYPE_COUNT_ ||
		    t->n_dims > SAFETENSORS_MAX_DIMS)
			return errmsg_set(e, -EINVAL, "tensor '%s': bad dtype or rank", t->name);
		shape = json_object_new_array();
		offs = json_object_new_array();
		if (json_object_object_add(info, "dtype",
					   json_object_new_string(dtypes[t->dtype].name)) < 0 ||
		    json_object_object_add(info, "shape", shape) < 0 ||
		    json_object_object_add(info, "data_offsets", offs) < 0)
			return -ENOMEM;
		for (uint32_t d = 0; d < t->n_dims; d++) {
			if (__builtin_mul_overflow(elems, t->shape[d], &elems))
				return errmsg_set(e, -EOVERFLOW, "tensor '%s': shape overflows",
						  t->name);
			json_object_array_add(shape, json_object_new_int64((int64_t) t->shape[d]));
		}
		if (__builtin_mul_overflow(elems, (uint64_t) dtypes[t->dtype].bits, &bits) ||
		    bits % 8 != 0)
			return errmsg_set(e, -EINVAL, "tensor '%s': size is not whole bytes",
					  t->name);
		json_object_array_add(offs, json_object_new_int64((int64_t) offset));
		offset += bits / 8;
		json_object_array_add(offs, json_object_new_int64((int64_t) offset));
	}
	json = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
							    JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!json)
		return -ENOMEM;
	header_len = strlen(json);
	/* Pad with spaces so the data starts 8-byte aligned, as the reference writer does. */
	padded = ALIGN_UP(header_len, 8);
	header = malloc(padded);
	if (!header)
		return -ENOMEM;
	memcpy(header, json, header_len);
	memset(header + header_len, ' ', padded - header_len);
	for (int i = 0; i < 8; i++)
		len_le[i] = (uint8_t) ((uint64_t) padded >> (8 * i));
	total = 8 + padded + offset;

	r = atomic_file_new(path, &f, e);
	if (r < 0)
		return r;
	if ((r = atomic_file_reserve(f, total, e)) < 0 ||
	    (r = atomic_file_write(f, len_le, sizeof(len_le), e)) < 0 ||
	    (r = atomic_file_write(f, header, padded, e)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		uint64_t elems = 1;

		for (uint32_t d = 0; d < tensors[i].n_dims; d++)
			elems *= tensors[i].shape[d];
		r = atomic_file_write(f, tensors[i].data, elems * dtypes[tensors[i].dtype].bits / 8,
				      e);
		if (r < 0)
			return r;
	}
	return atomic_file_finish(f, e);
}
