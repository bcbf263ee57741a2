/* SPDX-License-Identifier: MIT */
/*
 * safetensors.h: a checked reader and a small writer for Hugging Face's safetensors files.
 *
 * The format (https://github.com/huggingface/safetensors, little-endian):
 *
 *   u64 N                       length of the header
 *   N bytes                     a UTF-8 JSON object, starting with '{', maybe padded with
 *                               spaces (writers pad to a multiple of 8):
 *       { "<tensor name>": { "dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24] },
 *         ...,
 *         "__metadata__": { "<key>": "<string value>", ... } }     (optional)
 *   data                        the rest of the file; each tensor's bytes are
 *                               data[begin .. end), row-major (C order), little-endian
 *
 * Checked as the reference implementation does, plus bounds on everything: the header length
 * against the file size and a 100 MB cap; the JSON (strict, valid UTF-8, nothing but
 * whitespace after the object); every entry's dtype (known name), shape (non-negative
 * integers, at most SAFETENSORS_MAX_DIMS) and data_offsets (two integers, begin <= end);
 * elements × dtype size == end - begin without overflow; and the tensors, sorted by offset,
 * tile the data section exactly (no overlap, no gap, nothing after the last). Every failure
 * is -EBADMSG (-ENOMEM, -EOVERFLOW) with a message naming the tensor and what was wrong.
 *
 * Lifetime: safetensors_open() maps the file read-only; tensor data pointers point into the
 * mapping (or into the caller's buffer for safetensors_parse_buffer()) until
 * safetensors_free(). Threading: a parsed file is immutable; read it from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

#define SAFETENSORS_MAX_DIMS   8
#define SAFETENSORS_MAX_HEADER (100u * 1000 * 1000) /* as the reference implementation */

enum safetensors_dtype {
	SAFETENSORS_BOOL,
	SAFETENSORS_U8,
	SAFETENSORS_I8,
	SAFETENSORS_F8_E5M2,
	SAFETENSORS_F8_E4M3,
	SAFETENSORS_F8_E8M0,
	SAFETENSORS_I16,
	SAFETENSORS_U16,
	SAFETENSORS_F16,
	SAFETENSORS_BF16,
	SAFETENSORS_I32,
	SAFETENSORS_U32,
	SAFETENSORS_F32,
	SAFETENSORS_F64,
	SAFETENSORS_I64,
	SAFETENSORS_U64,
	SAFETENSORS_F4, /* sub-byte types: packed, elements × bits must fill whole bytes */
	SAFETENSORS_F6_E2M3,
	SAFETENSORS_F6_E3M2,
	SAFETENSORS_DTYPE_COUNT_,
};

struct safetensors_tensor {
	char *name; /* owned, NUL-terminated */
	enum safetensors_dtype dtype;
	uint32_t n_dims; /* 0 = a scalar (one element) */
	uint64_t shape[SAFETENSORS_MAX_DIMS];
	uint64_t n_elems;
	uint64_t offset;  /* begin, relative to the data section */
	uint64_t n_bytes; /* end - begin */
	const void *data; /* borrowed: inside the mapping / buffer */
};

struct safetensors;

/* Maps and parses path. Messages start with what was wrong (the caller adds the path). */
int safetensors_open(const char *path, struct safetensors **ret, struct errmsg *e);
/* Parses an image in memory (borrowed: must outlive the handle). For fuzzers and tests. */
int safetensors_parse_buffer(const void *data, size_t size, struct safetensors **ret,
			     struct errmsg *e);
struct safetensors *safetensors_free(struct safetensors *s); /* NULL-safe, returns NULL */
DEFINE_CLEANUP_FUNC(struct safetensors *, safetensors_free, NULL)

/* Tensors sorted by name. */
size_t safetensors_n_tensors(const struct safetensors *s);
const struct safetensors_tensor *safetensors_tensor_at(const struct safetensors *s, size_t i);
/* Lookup by exact name; NULL when absent. */
const struct safetensors_tensor *safetensors_find(const struct safetensors *s, const char *name);

/* __metadata__ entries (string values), in file order. */
size_t safetensors_n_metadata(const struct safetensors *s);
/* Key and value of entry i; -ENOENT when out of range. Pointers live as long as s. */
int safetensors_metadata_at(const struct safetensors *s, size_t i, const char **ret_key,
			    const char **ret_value);
/* The value for key, or NULL. */
const char *safetensors_metadata_get(const struct safetensors *s, const char *key);

/* "F32", "BF16", ... ; NULL for an out-of-range value. */
const char *safetensors_dtype_name(enum safetensors_dtype t);
/* Parses a dtype name (exact, upper case as in files); -EINVAL when unknown. */
int safetensors_dtype_from_name(const char *name, enum safetensors_dtype *ret);
/* Size of one element in bits (1 byte = 8; F4 = 4). */
unsigned safetensors_dtype_bits(enum safetensors_dtype t);

/*
 * Writes a safetensors file with the n tensors given (name, dtype, n_dims, shape, data; the
 * other fields are ignored), their data laid out in the order given, and optional string
 * metadata (n_meta key/value pairs: meta[2i] is a key, meta[2i+1] its value). Like every
 * writer in Molly it writes PATH.tmp, fsyncs, and renames it over path, so a failure never
 * leaves a half file under the final name. -ENOSPC etc. with a message.
 */
int safetensors_write(const char *path, const struct safetensors_tensor *tensors, size_t n,
		      const char *const *meta, size_t n_meta, struct errmsg *e);
