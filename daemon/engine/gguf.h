/* SPDX-License-Identifier: MIT */
/*
 * gguf.h: a checked reader for GGUF files (versions 2 and 3).
 *
 * The format (little-endian throughout):
 *
 *   u32 magic "GGUF"   u32 version (2|3)   u64 n_tensors   u64 n_kv
 *   n_kv × { str key, u32 value_type, value }
 *   n_tensors × { str name, u32 n_dims (1..4), u64 ne[n_dims], u32 ggml_type, u64 offset }
 *   padding to `general.alignment` (u32, default 32, a power of two)
 *   tensor data: each tensor at data_start + offset, offset a multiple of the alignment
 *
 *   str   = u64 length, then that many bytes (not NUL-terminated, not necessarily UTF-8)
 *   value = a scalar of value_type, a str, or an array: u32 elem_type, u64 n, n × value
 *           (arrays may nest).
 *
 * Version 1 (u32 counts) is refused with a clear error; it predates every model we load.
 *
 * Every count, length, offset and size is checked against the bytes that remain before it
 * is used or allocated for, so a hostile or truncated file yields -EBADMSG (or -ENOMEM,
 * -EOVERFLOW) and an errmsg naming the field and its file offset; never a read out of bounds.
 *
 * Lifetime: the file is mmap'd read-only; every pointer handed out (strings, array data,
 * tensor data) points into that mapping and stays valid until gguf_free().
 * Threading: a parsed struct gguf is immutable and may be read from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

enum gguf_type {
	GGUF_TYPE_UINT8 = 0,
	GGUF_TYPE_INT8 = 1,
	GGUF_TYPE_UINT16 = 2,
	GGUF_TYPE_INT16 = 3,
	GGUF_TYPE_UINT32 = 4,
	GGUF_TYPE_INT32 = 5,
	GGUF_TYPE_FLOAT32 = 6,
	GGUF_TYPE_BOOL = 7,
	GGUF_TYPE_STRING = 8,
	GGUF_TYPE_ARRAY = 9,
	GGUF_TYPE_UINT64 = 10,
	GGUF_TYPE_INT64 = 11,
	GGUF_TYPE_FLOAT64 = 12,
	GGUF_TYPE_COUNT_,
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* A length-delimited string inside the mapping (or owned, for values built in memory). */
struct gguf_str {
	uint64_t len;
	const char *data;
};

struct gguf_value {
	enum gguf_type type;
	union {
		uint64_t u64; /* UINT8/16/32/64 and BOOL, zero-extended */
		int64_t i64;  /* INT8/16/32/64, sign-extended */
		double f64;   /* FLOAT32 and FLOAT64 */
		struct gguf_str str;
		struct {
			enum gguf_type elem_type;
			uint64_t n;
			/* Scalar elements: raw little-endian bytes in the mapping (maybe
			 * unaligned; read them with gguf_arr_*()). */
			const void *raw;
			/* STRING elements: n strings. ARRAY elements: n nested values. */
			const struct gguf_str *strs;       /* owned */
			const struct gguf_value *values;   /* owned */
		} arr;
	};
};

struct gguf_kv {
	struct gguf_str key;
	uint64_t file_offset; /* where the key's length field starts */
	struct gguf_value value;
};

struct gguf_tensor {
	char *name;        /* owned, NUL-terminated copy */
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (input) dimension; unused dims 1 */
	uint32_t type;              /* enum ggml_type value (see quant.h) */
	uint64_t offset;            /* relative to the data section */
	uint64_t n_bytes;
	const void *data;           /* inside the mapping */
};

struct gguf;

/* Maps and parses the file at path. 0 and a new handle in *ret, or -errno with e filled. */
int gguf_open(const char *path, struct gguf **ret, struct errmsg *e);

/* Parses a GGUF image in memory (borrowed: must outlive the handle). For fuzzers and tests. */
int gguf_parse_buffer(const void *data, size_t size, struct gguf **ret, struct errmsg *e);

struct gguf *gguf_free(struct gguf *g); /* NULL-safe, returns NULL */
DEFINE_CLEANUP_FUNC(struct gguf *, gguf_free, NULL)

uint32_t gguf_version(const struct gguf *g);
uint32_t gguf_alignment(const struct gguf *g);
size_t gguf_file_size(const struct gguf *g);
const void *gguf_file_data(const struct gguf *g);

size_t gguf_n_kv(const struct gguf *g);
const struct gguf_kv *gguf_kv_at(const struct gguf *g, size_t i);
/* Lookup by key; NULL when absent. */
const struct gguf_value *gguf_get(const struct gguf *g, const char *key);

size_t gguf_n_tensors(const struct gguf *g);
const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, size_t i);
/* Lookup by name; NULL when absent. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);

/* Typed getters: 0, -ENOENT when absent, -EINVAL when the type does not fit (integers accept
 * any integer type whose value fits; floats accept FLOAT32/FLOAT64 and integers). */
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *ret);
int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *ret);
int gguf_get_i64(const struct gguf *g, const char *key, int64_t *ret);
int gguf_get_f32(const struct gguf *g, const char *key, float *ret);
int gguf_get_bool(const struct gguf *g, const char *key, bool *ret);
/* *ret is a NUL-terminated malloc'd copy (caller frees). */
int gguf_get_string(const struct gguf *g, const char *key, char **ret);
/* The array value for key, of elem_type (or any when elem_type < 0); NULL if absent/mismatched. */
const struct gguf_value *gguf_get_array(const struct gguf *g, const char *key, int elem_type);

/* Element readers for scalar arrays (bounds are the caller's: i < v->arr.n). */
int64_t gguf_arr_i64(const struct gguf_value *v, uint64_t i);
uint64_t gguf_arr_u64(const struct gguf_value *v, uint64_t i);
double gguf_arr_f64(const struct gguf_value *v, uint64_t i);

const char *gguf_type_name(enum gguf_type t);
/* Size in bytes of a scalar value type, 0 for STRING/ARRAY/unknown. */
size_t gguf_type_size(enum gguf_type t);

/* ggml's lower-case name of a tensor type ("q8_0", "iq2_xs", ...), covering every type a GGUF
 * file may hold, also those quant.h cannot compute with; NULL for an unknown id. */
const char *gguf_ggml_type_name(uint32_t type);
/* Bytes of a row of n values of a ggml type: -EINVAL for an unknown type or n not a multiple
 * of its block size, -EOVERFLOW when it does not fit an int64_t. */
int64_t gguf_ggml_row_bytes(uint32_t type, uint64_t n);
