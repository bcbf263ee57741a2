/* SPDX-License-Identifier: MIT */
/*
 * gguf-writer.h: writes GGUF version 3 files (the format is described in gguf.h), streaming
 * the tensor data so a model bigger than memory can be written row by row.
 *
 * Usage:
 *
 *   _cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
 *   r = gguf_writer_new("out.gguf", &w, &e);           creates out.gguf.tmp
 *   r = gguf_writer_add_str(w, "general.architecture", "llama", &e);
 *   r = gguf_writer_add_value(w, "tokenizer.ggml.tokens", gguf_get(src, ...), &e);
 *   r = gguf_writer_add_tensor(w, "token_embd.weight", GGML_TYPE_F32, 2, ne, &e);
 *   ...                                                 all keys and tensors first, then
 *   r = gguf_writer_write(w, row, row_bytes, &e);       the data of each tensor in the order
 *   ...                                                 the tensors were added, in any chunks
 *   r = gguf_writer_finish(w, &e);                      fsync, rename to out.gguf, fsync dir
 *
 * Until gguf_writer_finish() succeeds the output exists only as PATH.tmp, which
 * gguf_writer_free() removes, so a failed or interrupted write never leaves a half file under
 * the final name (a crash may leave PATH.tmp behind). The space for the whole file is reserved
 * with fallocate() when the data starts, so a full disk is usually reported (-ENOSPC) before
 * gigabytes are generated.
 *
 * Keys must be unique (-EEXIST), 1..65535 bytes. "general.alignment" must be a power-of-two
 * u32 and sets the data alignment (default 32), as does gguf_writer_set_alignment(). Keys and
 * tensors can be added until the first gguf_writer_write() (-EBUSY afterwards).
 *
 * Errors: -errno with a reason in e; after a failed write every later call fails too.
 * Threading: a writer is used by one thread at a time.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "gguf.h"

struct gguf_writer;

/* Creates PATH.tmp (mode 0644, truncated if present). 0 and a writer in *ret, or -errno. */
int gguf_writer_new(const char *path, struct gguf_writer **ret, struct errmsg *e);
/* NULL-safe, returns NULL. Unless finished, closes and removes PATH.tmp. */
struct gguf_writer *gguf_writer_free(struct gguf_writer *w);
DEFINE_CLEANUP_FUNC(struct gguf_writer *, gguf_writer_free, NULL)

/* Data alignment (a power of two); also records it as the u32 key "general.alignment". */
int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment, struct errmsg *e);

/* Scalar keys. */
int gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v, struct errmsg *e);
int gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v, struct errmsg *e);
int gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v, struct errmsg *e);
int gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v, struct errmsg *e);
int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v, struct errmsg *e);
int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v, struct errmsg *e);
int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v, struct errmsg *e);
int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v, struct errmsg *e);
int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v, struct errmsg *e);
int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v, struct errmsg *e);
int gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v, struct errmsg *e);
/* A NUL-terminated string, or len bytes of any content. */
int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *s, struct errmsg *e);
int gguf_writer_add_str_n(struct gguf_writer *w, const char *key, const void *s, uint64_t len,
			  struct errmsg *e);

/* An array of n scalars of elem_type (not STRING/ARRAY), packed in host byte order
 * (uint32_t[] for UINT32, float[] for FLOAT32, bool/uint8_t[] with 0/1 for BOOL ...). */
int gguf_writer_add_array(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
			  const void *elems, uint64_t n, struct errmsg *e);
/* An array of n NUL-terminated strings. */
int gguf_writer_add_str_array(struct gguf_writer *w, const char *key, const char *const *strs,
			      uint64_t n, struct errmsg *e);
/* Any value, deep-copied: one from a parsed file (e.g. to copy tokenizer.* keys), or one built
 * in memory. Scalar array elements in v->arr.raw are little-endian, as in a file; STRING
 * arrays use v->arr.strs and ARRAY arrays v->arr.values (nesting up to 8 levels). */
int gguf_writer_add_value(struct gguf_writer *w, const char *key, const struct gguf_value *v,
			  struct errmsg *e);

/* Declares a tensor: n_dims 1..4, ne[0] a multiple of the type's block size, any ggml type
 * gguf_ggml_type_name() knows. Names are unique (-EEXIST), 1..256 bytes. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
			   const uint64_t *ne, struct errmsg *e);

/* Appends n bytes of tensor data: the tensors are filled in the order they were added, a
 * chunk may span several tensors; padding is inserted by the writer. The first call writes
 * the header. -EINVAL when more data is given than the tensors hold. */
int gguf_writer_write(struct gguf_writer *w, const void *data, size_t n, struct errmsg *e);

/* Checks every tensor got all its bytes (-EINVAL otherwise), then flushes, fsyncs and renames
 * PATH.tmp to PATH. After this the writer only answers gguf_writer_free(). */
int gguf_writer_finish(struct gguf_writer *w, struct errmsg *e);

/* Size of the file as declared so far (header, padding and all tensor data), in bytes. */
uint64_t gguf_writer_size(const struct gguf_writer *w);
/* Bytes of the n-th declared tensor's data; 0 when out of range. */
uint64_t gguf_writer_tensor_bytes(const struct gguf_writer *w, size_t i);
