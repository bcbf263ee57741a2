/* SPDX-License-Identifier: MIT */
/*
 * page-pool.h: one memory budget of fixed-size pages that holds both the KV blocks of every
 * sequence and the weights of resident adapters, so a hot adapter and a sequence's context
 * compete for the same memory.
 *
 * Allocation and release are O(1) (a stack of free page ids). Every page records its owner
 * kind and owner id, so accounting can be checked at any time (page_pool_check()).
 * Threading: the scheduler thread only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/macro.h"

#define PAGE_NONE UINT32_MAX

enum page_kind {
	PAGE_KIND_FREE,
	PAGE_KIND_KV,
	PAGE_KIND_ADAPTER,
};

struct page_pool;

/* n_pages pages of page_bytes (a multiple of 4096); memory is reserved, touched on use. */
int page_pool_new(size_t page_bytes, size_t n_pages, struct page_pool **ret);
struct page_pool *page_pool_free(struct page_pool *p);
DEFINE_CLEANUP_FUNC(struct page_pool *, page_pool_free, NULL)

/* A free page for (kind, owner), or PAGE_NONE when the pool is full. */
uint32_t page_pool_alloc(struct page_pool *p, enum page_kind kind, uint64_t owner);
void page_pool_release(struct page_pool *p, uint32_t page);
/* The same, and the page's memory returns to the kernel (madvise MADV_DONTNEED): for pages
 * that may stay free a long time (an evicted or unloaded adapter's). */
void page_pool_release_discard(struct page_pool *p, uint32_t page);

void *page_pool_addr(const struct page_pool *p, uint32_t page);
char *page_pool_base(const struct page_pool *p);
size_t page_pool_page_bytes(const struct page_pool *p);
size_t page_pool_n_pages(const struct page_pool *p);
size_t page_pool_n_free(const struct page_pool *p);
size_t page_pool_n_kind(const struct page_pool *p, enum page_kind kind);
uint64_t page_pool_owner(const struct page_pool *p, uint32_t page);
enum page_kind page_pool_kind(const struct page_pool *p, uint32_t page);

/* Consistency: the free stack and the per-page records agree, counts add up. 0 or -EUCLEAN. */
int page_pool_check(const struct page_pool *p);
