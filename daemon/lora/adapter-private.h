/* SPDX-License-Identifier: MIT */
/*
 * adapter-private.h: what the format readers (peft.c, lora-gguf.c, lora-file.c) share with
 * adapter.c. Not for other modules.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/sha256.h"
#include "adapter.h"

/* Where an adapter's weights come from. */
struct lora_priv {
	enum lora_format format;
	/* Public formats: converted at open, held in memory (owned, n_mats each). */
	void **a;
	void **b;
	/* Molly files: read on demand. */
	int fd;
	bool direct;                   /* fd is O_DIRECT */
	uint64_t *a_offset, *b_offset; /* owned, n_mats each; 4096-aligned */
	uint8_t (*a_sha)[32];          /* owned, n_mats each: SHA-256 of the stored bytes */
	uint8_t (*b_sha)[32];
	/* Molly files with a warm copy (lora_adapter_set_image): the whole file, already
	 * checked against its SHA-256; reads copy from it instead of reading the file. */
	const uint8_t *image;          /* borrowed */
	uint64_t image_bytes;
};

/* One matrix pair of a public format before conversion: source rows in a ggml type. */
struct lora_src_mat {
	struct lora_mat mat;     /* everything but dtype, which lora_adapter_from_sources picks */
	const void *a, *b;       /* borrowed: [rank][n_in] and [n_out][rank], row-major */
	uint32_t a_type, b_type; /* GGML_TYPE_F32, F16, BF16 or a quant type quant.h reads */
	const char *a_name, *b_name; /* for messages */
};

struct lora_adapter *lora_adapter_alloc(enum lora_format format);

/*
 * Builds an in-memory adapter from sources: picks each matrix's dtype (F16 or BF16 data kept
 * as stored when A and B share it, anything else converted to opts->dtype), converts, sorts,
 * rejects duplicates, non-finite values and F16 overflow, computes the content hash, and takes
 * the base fingerprint and description from opts->base. name: the default adapter name.
 */
int lora_adapter_from_sources(struct lora_src_mat *src, size_t n, const struct lora_open_opts *opts,
			      const char *name, enum lora_format format, struct lora_adapter **ret,
			      struct errmsg *e);

/* content_hash from the matrix table and per-tensor SHA-256s (see adapter.h). */
void lora_content_hash(const struct lora_mat *mats, size_t n, const uint8_t (*a_sha)[32],
		       const uint8_t (*b_sha)[32], uint8_t ret[32]);

/* Appends one line to warn (if non-NULL); marks truncation with "..." when full. */
_printf_(2, 3) void lora_warn(struct errmsg *warn, const char *fmt, ...);

/* The format readers. */
int lora_gguf_open(const char *path, const struct lora_open_opts *opts, struct lora_adapter **ret,
		   struct errmsg *warn, struct errmsg *e);
int lora_file_open(const char *path, const struct lora_open_opts *opts, struct lora_adapter **ret,
		   struct errmsg *e);
int lora_file_read(const struct lora_adapter *a, size_t i, bool b_matrix, void *dst,
		   size_t dst_bytes);
void lora_file_close(struct lora_priv *p);
