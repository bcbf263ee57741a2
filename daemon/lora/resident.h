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

/* Pages needed to hold adapter a in pages of page_bytes (-E2BIG as (size_t)-1 if a row does
 * not fit a page). */
size_t lora_resident_pages_needed(const struct lora_adapter *a, size_t page_bytes);

/*
 * Reads a's weights into pages from alloc (each page_bytes). On failure every page already
 * taken is listed in the partially built object's pages: the caller gives them back, then
 * frees it — so call lora_resident_free() and release ret->pages even on error when
 * *ret is set. -ENOSPC when alloc ran out.
 */
int lora_resident_new(const struct lora_adapter *a, uint32_t n_layer, size_t page_bytes,
		      lora_page_alloc_fn alloc, void *userdata, struct lora_resident **ret,
		      struct errmsg *e);
/* Frees the object (not the pages: the caller gives those back to its pool). */
struct lora_resident *lora_resident_free(struct lora_resident *r);
DEFINE_CLEANUP_FUNC(struct lora_resident *, lora_resident_free, NULL)
