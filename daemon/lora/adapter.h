/* SPDX-License-Identifier: MIT */
/*
 * adapter.h: LoRA adapters — reading the formats people have (PEFT directories, llama.cpp
 * GGUF LoRA files) and Molly's own adapter file, into one uniform description.
 *
 * Conventions (all formats map to these):
 *   For a targeted projection y = W·x (W: [n_out][n_in]), the adapter adds
 *   s · B·(A·x) with A: [rank][n_in] and B: [n_out][rank], both row-major, and
 *   s = user_scale · mat->scale, where mat->scale = alpha/rank (alpha/sqrt(rank) with
 *   rsLoRA; PEFT's rank_pattern / alpha_pattern apply per module).
 *   Targets: q, k, v, o, gate, up, down (PEFT q_proj ... down_proj; GGUF attn_q ...
 *   ffn_down). Anything else (embeddings, lm_head, modules_to_save, DoRA magnitudes) is an
 *   error naming it unless skip_unsupported.
 *
 * Identity: content_hash = SHA-256 over the weights (as stored, F16/BF16) and the
 * canonical config; base_fingerprint = SHA-256 over the base model's architecture, every
 * tensor's name and shape (not its type: an adapter made on an F32 base loads on its Q8_0
 * file) and its tokenizer. A mismatch with the loaded base is an error naming the adapter,
 * the base it was made for and the base that is loaded.
 *
 *   content_hash = SHA-256("molly-lora-content-v1\0", u32 n_mats, then per matrix in
 *                  (layer, target) order: u32 layer, target, rank, n_in, n_out, dtype,
 *                  f32 bits of scale, SHA-256(A bytes), SHA-256(B bytes))   (little-endian)
 *   The weights enter as stored after conversion (F16/BF16 rows), the config as what it
 *   means per matrix (rank, effective scale after alpha/rank_pattern/alpha_pattern/rsLoRA),
 *   so it is the same whichever format carried the same weights: a PEFT directory, the
 *   GGUF LoRA file of the same F32 weights and the Molly file imported from either all hash
 *   alike (F32 sources converted to the same dtype). Names, domains, exemplars are not part
 *   of it. Molly files store the per-tensor hashes, so the content hash is re-derived and
 *   checked at open without reading the weights.
 *   base_fingerprint = SHA-256("molly-lora-base-v1\0", general.architecture, head counts,
 *                  every tensor's name, n_dims and ne[] in name order, tokenizer.ggml.model,
 *                  tokenizer.ggml.tokens, .merges and .scores) from the model's GGUF.
 *
 * Lifetime: an adapter is immutable after open; weights are read on demand with
 * lora_adapter_read() (Molly files: pread at page-aligned offsets, O_DIRECT-capable; public
 * formats: converted at open and held in memory). Threading: reads may run concurrently.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "../engine/sgmv.h" /* enum lora_target: the projections an adapter may adapt */

struct model;


/* "q", "k", "v", "o", "gate", "up", "down" */
const char *lora_target_name(enum lora_target t);
int lora_target_from_name(const char *name, enum lora_target *ret);

struct lora_mat {
	uint32_t layer;
	enum lora_target target;
	uint32_t rank;
	uint32_t n_in;
	uint32_t n_out;
	float scale;     /* alpha/rank (or rsLoRA / pattern-adjusted); user scale not included */
	uint32_t dtype;  /* GGML_TYPE_F16 or GGML_TYPE_BF16: the row type of A and B
			  * (GGML_TYPE_F32 for F32 data opened with keep_f32) */
};

struct lora_adapter_meta {
	char *name;          /* owned */
	char **domains;      /* owned, n_domains */
	size_t n_domains;
	char **exemplars;    /* owned, n_exemplars: a few example prompts for the router */
	size_t n_exemplars;
};

struct lora_adapter {
	struct lora_adapter_meta meta;
	uint8_t content_hash[32];
	uint8_t base_fingerprint[32];
	uint8_t base_weights_hash[32]; /* information only; all zero when unknown */
	bool has_base_weights_hash;
	char *base_description;        /* owned: e.g. "llama 5x64 vocab 512 (stories260K)" */
	uint32_t max_rank;
	size_t n_mats;
	struct lora_mat *mats;         /* owned, sorted by (layer, target) */
	/* private to adapter.c: data source */
	void *priv;
};

struct lora_open_opts {
	bool skip_unsupported;  /* unsupported targets become warnings (see warnings below) */
	uint32_t dtype;         /* F16 (default when 0) or BF16: for public formats' F32 data */
	const char *name;       /* overrides the name (default: the file or directory name) */
	/* Needed for public formats, which do not record the base: the model they are for.
	 * For Molly files optional: when given, lora_adapter_check_base() runs at open. */
	const struct model *base;
	/* Molly files: read weights with O_DIRECT (page-aligned preads that bypass the page
	 * cache); when the filesystem refuses O_DIRECT the file is read buffered instead, see
	 * lora_adapter_direct_io(). Ignored for public formats (held in memory). */
	bool direct_io;
	/* Public formats: F32 data stays F32 (mats[i].dtype = GGML_TYPE_F32, 4 bytes a value),
	 * e.g. to match llama.cpp's F32 numerics exactly; dtype then applies to nothing. Needed
	 * because GGML_TYPE_F32 is 0, which dtype reads as "the default, F16". Molly files are
	 * always F16 or BF16 (lora_file_write() converts F32 matrices to F16 by default). */
	bool keep_f32;
};

/*
 * Opens an adapter in any supported format: a PEFT directory (adapter_config.json +
 * adapter_model.safetensors), a GGUF LoRA file, or a Molly adapter file. Errors name the
 * file, the tensor or key, and what was wrong. Warnings (skipped tensors) are appended to
 * warn (if non-NULL) one per line.
 */
int lora_adapter_open(const char *path, const struct lora_open_opts *opts,
		      struct lora_adapter **ret, struct errmsg *warn, struct errmsg *e);
struct lora_adapter *lora_adapter_free(struct lora_adapter *a);
DEFINE_CLEANUP_FUNC(struct lora_adapter *, lora_adapter_free, NULL)

/* Fills dst with matrix i's A ([rank][n_in]) or B ([n_out][rank]) rows in mats[i].dtype.
 * dst_bytes must be exactly the matrix's size. -EIO/-EBADMSG on a short or corrupt read. */
int lora_adapter_read(const struct lora_adapter *a, size_t i, bool b_matrix, void *dst,
		      size_t dst_bytes);
/* Bytes of matrix i's A or B. */
size_t lora_mat_bytes(const struct lora_mat *m, bool b_matrix);

/* 0 when the adapter was made for this base (fingerprints equal and every matrix's shape
 * fits the model); -EXDEV with the names of both bases otherwise. */
int lora_adapter_check_base(const struct lora_adapter *a, const struct model *m,
			    struct errmsg *e);

/* The base fingerprint of a loaded model (see above). */
void lora_base_fingerprint(const struct model *m, uint8_t ret[32]);

/* ---- additions (h-adapter) ---- */

enum lora_format {
	LORA_FORMAT_PEFT,  /* directory: adapter_config.json + adapter_model.safetensors */
	LORA_FORMAT_GGUF,  /* llama.cpp GGUF LoRA */
	LORA_FORMAT_MOLLY, /* Molly's adapter file (lora-file.h) */
};

/* "peft", "gguf", "molly" */
const char *lora_format_name(enum lora_format f);
enum lora_format lora_adapter_format(const struct lora_adapter *a);
/* Whether a Molly file is being read with O_DIRECT (false for buffered and public formats). */
bool lora_adapter_direct_io(const struct lora_adapter *a);

/* Molly files: reads copy from image (the whole file in memory, its SHA-256 checked by the
 * caller: the warm tier) instead of reading the file; NULL goes back to the file. The image
 * is borrowed until replaced. Not while a read runs (the scheduler does both under its
 * lock). -EOPNOTSUPP for public formats. */
int lora_adapter_set_image(struct lora_adapter *a, const void *image, size_t bytes);

/* "llama 5x64 vocab 512 (stories260K)": arch, layers x embedding, vocabulary, name. Owned by
 * the caller; NULL on allocation failure. */
char *lora_base_describe(const struct model *m);
/* SHA-256 over every base tensor's name, type and data, in name order: the exact weights,
 * unlike the fingerprint. Reads the whole model (slow on big ones: import time only). */
void lora_base_weights_hash(const struct model *m, uint8_t ret[32]);

/* n_in / n_out of target t in a layer of the base, from its weights. -EINVAL (with a message)
 * when the layer is out of range. */
int lora_base_dims(const struct model *base, uint32_t layer, enum lora_target t, uint32_t *n_in,
		   uint32_t *n_out, struct errmsg *e);

/* The mask of targets present (bit 1 << target). */
uint32_t lora_adapter_targets(const struct lora_adapter *a);
/* "q,k,v,o" into buf; returns buf. */
char *lora_targets_format(uint32_t mask, char *buf, size_t size);
/* Parses "q,k,v" / "all" (also PEFT's q_proj ... and GGUF's attn_q ... names). -EINVAL with
 * the bad name in e. */
int lora_targets_parse(const char *s, uint32_t *ret_mask, struct errmsg *e);
