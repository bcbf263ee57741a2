/* SPDX-License-Identifier: MIT */
/*
 * resident.h: building an adapter's hot form (struct lora_resident, engine/sgmv.h) from an
 * opened adapter file; the batched LoRA kernels that compute with it live in the engine
 * (engine/sgmv.h), which knows no adapter format.
 * The layout (A rows, Bᵀ rows, packed into pages) is described in engine/sgmv.h.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "../engine/sgmv.h"
#include "adapter.h"

/* Hands out one page of page_bytes (its id in *ret_id) or returns NULL when none is left. */
typedef void *(*lora_page_alloc_fn)(void *userdata, uint32_t *ret_id);

/*
 * The element type of the hot form ([Adapters] HotType=):
 *   LORA_HOT_STORED: as the adapter holds it (F16/BF16, or F32 when kept): exact;
 *   LORA_HOT_Q8_0: 8-bit blocks of 32 (scale + 32 signed bytes) for every matrix whose n_in
 *     and n_out are multiples of 32 (others stay as stored): 34 bytes per 32 values instead of
 *     64, so a decode step that streams several distinct adapters reads about half their bytes;
 *     each value within half a step of its block's scale (|v|max / 254) of the stored one.
 */
enum lora_hot_type {
	LORA_HOT_STORED,
	LORA_HOT_Q8_0,
};

/* Pages needed to hold adapter a in pages of page_bytes (-E2BIG as (size_t)-1 if a row does
 * not fit a page). */
size_t lora_resident_pages_needed(const struct lora_adapter *a, enum lora_hot_type hot,
				  size_t page_bytes);

/*
 * Reads a's weights into pages from alloc (each page_bytes). On failure every page already
 * taken is listed in the partially built object's pages: the caller gives them back, then
 * frees it — so call lora_resident_free() and release ret->pages even on error when
 * *ret is set. -ENOSPC when alloc ran out.
 */
int lora_resident_new(const struct lora_adapter *a, enum lora_hot_type hot, uint32_t n_layer,
		      size_t page_bytes, lora_page_alloc_fn alloc, void *userdata,
		      struct lora_resident **ret, struct errmsg *e);
/* Frees the object (not the pages: the caller gives those back to its pool). */
struct lora_resident *lora_resident_free(struct lora_resident *r);
DEFINE_CLEANUP_FUNC(struct lora_resident *, lora_resident_free, NULL)
