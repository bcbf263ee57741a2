/* SPDX-License-Identifier: MIT */
/*
 * lora-file.h: Molly's own adapter file, made for loading with O_DIRECT: every section and
 * every tensor starts at a multiple of 4096 and is padded to a multiple of 4096, so each
 * piece is one aligned pread, and everything read is checked against a SHA-256.
 *
 * Layout (version 1, little-endian):
 *
 *   header section, at 0, padded with zeros to data_offset:
 *     0    u8[8]  magic "MOLLYLRA"
 *     8    u32    version (1)
 *     12   u32    header_bytes: bytes of header (fixed part + table + strings), covered by
 *                 header_sha256; 256 <= header_bytes <= LORA_FILE_MAX_HEADER
 *     16   u64    data_offset = header_bytes rounded up to 4096
 *     24   u64    file_bytes: the whole file (a multiple of 4096); a shorter file is truncated
 *     32   u8[32] header_sha256: SHA-256 of bytes [0, header_bytes) with this field zeroed
 *     64   u8[32] content_hash       (adapter.h; re-derived from the table at open)
 *     96   u8[32] base_fingerprint   (adapter.h)
 *     128  u8[32] base_weights_hash  (information; zero unless flags bit 0)
 *     160  u32    flags: bit 0 base_weights_hash known; other bits zero
 *     164  u32    n_mats (>= 1)
 *     168  u32    max_rank
 *     172  u32    target_mask: bit t set when some matrix adapts target t
 *     176  u32    n_domains
 *     180  u32    n_exemplars
 *     184  u32    table_offset (256)
 *     188  u32    table_entry_bytes (128)
 *     192  u32    strings_offset = 256 + 128 * n_mats
 *     196  u32    strings_bytes; strings_offset + strings_bytes = header_bytes
 *     200  u8[56] reserved, zero
 *     256  n_mats table entries of 128 bytes, sorted by (layer, target), no duplicates:
 *            0  u32 layer        4  u32 target (enum lora_target)   8  u32 rank
 *            12 u32 n_in         16 u32 n_out    20 u32 dtype (GGML_TYPE_F16 or _BF16)
 *            24 f32 scale (alpha/rank, rsLoRA or pattern adjusted; finite)  28 u32 zero
 *            32 u64 a_offset     40 u64 a_bytes  48 u64 b_offset  56 u64 b_bytes
 *            64 u8[32] SHA-256 of A's a_bytes    96 u8[32] SHA-256 of B's b_bytes
 *          A is [rank][n_in] and B is [n_out][rank] rows of dtype (a_bytes = rank·n_in·2,
 *          b_bytes = n_out·rank·2).
 *     strings: name, base_description, n_domains domains, n_exemplars exemplars, each
 *          u32 length + that many bytes (no NUL inside, not terminated)
 *   tensor data: A0, B0, A1, B1, ... each at a 4096-aligned offset >= data_offset, in
 *     increasing order, each followed by zeros up to the next multiple of 4096; the last one
 *     ends the file.
 *
 * Open reads the header section (aligned), checks the magic, version, sizes against the
 * file, header_sha256, every table entry (types, shapes, sizes, alignment, order, overlap,
 * bounds) and the content hash; lora_adapter_read() checks each tensor's SHA-256 (-EBADMSG
 * on mismatch, -EIO on a short read). Writing goes through atomic-file.h: PATH.tmp, fsync,
 * rename; never a half file under PATH.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "adapter.h"

#define LORA_FILE_MAGIC       "MOLLYLRA"
#define LORA_FILE_VERSION     1
#define LORA_FILE_ALIGN       4096
#define LORA_FILE_FIXED_BYTES 256
#define LORA_FILE_ENTRY_BYTES 128
#define LORA_FILE_MAX_HEADER  (64u << 20)

struct lora_write_opts {
	uint32_t dtype;                       /* 0: keep each matrix's; F16/BF16: convert all */
	const struct lora_adapter_meta *meta; /* NULL: the adapter's own */
	const uint8_t *base_weights_hash;     /* 32 bytes, or NULL: the adapter's own if known */
};

/*
 * Writes adapter a (any format) as a Molly adapter file at path. Converting the dtype
 * changes the stored weights, so the content hash is computed anew from what is written.
 * -E2BIG when the metadata does not fit the header limit, -ENOSPC etc. with a message.
 */
int lora_file_write(const struct lora_adapter *a, const char *path,
		    const struct lora_write_opts *opts, struct errmsg *e);

/* For Molly files: where matrix i's A or B lies and its stored SHA-256; -ENOENT for other
 * formats. */
int lora_file_tensor_info(const struct lora_adapter *a, size_t i, bool b_matrix,
			  uint64_t *ret_offset, uint8_t ret_sha[32]);
