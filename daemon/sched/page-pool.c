/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "page-pool.h"

struct page_pool {
	char *base;        /* owned mapping: n_pages * page_bytes */
	size_t page_bytes;
	size_t n_pages;
	uint32_t *free_stack; /* owned: ids of free pages; n_free of them */
	size_t n_free;
	uint8_t *kind;     /* owned: enum page_kind per page */
	uint64_t *owner;   /* owned: owner id per page */
	size_t n_kind[3];
};

int page_pool_new(size_t page_bytes, size_t n_pages, struct page_pool **ret)
{
	struct page_pool *p;
	size_t bytes;

	assert_return(ret && page_bytes > 0 && page_bytes % 4096 == 0, -EINVAL);
	assert_return(n_pages > 0 && n_pages < PAGE_NONE, -EINVAL);
	if (__builtin_mul_overflow(page_bytes, n_pages, &bytes))
		return -EOVERFLOW;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->page_bytes = page_bytes;
	p->n_pages = n_pages;
	/* MAP_NORESERVE: the budget is a ceiling; pages cost memory when first written */
	p->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	p->free_stack = malloc(n_pages * sizeof(*p->free_stack));
	p->kind = calloc(n_pages, sizeof(*p->kind));
	p->owner = calloc(n_pages, sizeof(*p->owner));
	if (p->base == MAP_FAILED || !p->free_stack || !p->kind || !p->owner) {
		if (p->base == MAP_FAILED)
			p->base = NULL;
		page_pool_free(p);
		return -ENOMEM;
	}
	/* lowest ids on top, so a fresh pool hands out pages in address order */
	for (size_t i = 0; i < n_pages; i++)
		p->free_stack[i] = (uint32_t) (n_pages - 1 - i);
	p->n_free = n_pages;
	p->n_kind[PAGE_KIND_FREE] = n_pages;
	*ret = p;
	return 0;
}

struct page_pool *page_pool_free(struct page_pool *p)
{
	if (!p)
		return NULL;
	if (p->base)
		munmap(p->base, p->page_bytes * p->n_pages);
	free(p->free_stack);
	free(p->kind);
	free(p->owner);
	free(p);
	return NULL;
}

uint32_t page_pool_alloc(struct page_pool *p, enum page_kind kind, uint64_t owner)
{
	uint32_t page;

	if (p->n_free == 0 || kind == PAGE_KIND_FREE)
		return PAGE_NONE;
	page = p->free_stack[--p->n_free];
	p->kind[page] = (uint8_t) kind;
	p->owner[page] = owner;
	p->n_kind[PAGE_KIND_FREE]--;
	p->n_kind[kind]++;
	return page;
}

void page_pool_release(struct page_pool *p, uint32_t page)
{
	if (page >= p->n_pages || p->kind[page] == PAGE_KIND_FREE)
		return; /* double release is a caller bug; page_pool_check() would not see it */
	p->n_kind[p->kind[page]]--;
	p->n_kind[PAGE_KIND_FREE]++;
	p->kind[page] = PAGE_KIND_FREE;
	p->owner[page] = 0;
	p->free_stack[p->n_free++] = page;
}

void page_pool_release_discard(struct page_pool *p, uint32_t page)
{
	if (page >= p->n_pages || p->kind[page] == PAGE_KIND_FREE)
		return;
	/* The memory goes back to the kernel (the next touch maps a zero page): what an unloaded
	 * or evicted adapter held leaves the process's resident set, not just the free list. */
	(void) madvise(p->base + (size_t) page * p->page_bytes, p->page_bytes, MADV_DONTNEED);
	page_pool_release(p, page);
}

void *page_pool_addr(const struct page_pool *p, uint32_t page)
{
	return p->base + (size_t) page * p->page_bytes;
}

char *page_pool_base(const struct page_pool *p)
{
	return p->base;
}

size_t page_pool_page_bytes(const struct page_pool *p)
{
	return p->page_bytes;
}

size_t page_pool_n_pages(const struct page_pool *p)
{
	return p->n_pages;
}

size_t page_pool_n_free(const struct page_pool *p)
{
	return p->n_free;
}

size_t page_pool_n_kind(const struct page_pool *p, enum page_kind kind)
{
	return kind <= PAGE_KIND_ADAPTER ? p->n_kind[kind] : 0;
}

uint64_t page_pool_owner(const struct page_pool *p, uint32_t page)
{
	return page < p->n_pages ? p->owner[page] : 0;
}

enum page_kind page_pool_kind(const struct page_pool *p, uint32_t page)
{
	return page < p->n_pages ? (enum page_kind) p->kind[page] : PAGE_KIND_FREE;
}

int page_pool_check(const struct page_pool *p)
{
	size_t counts[3] = {};
	_cleanup_free_ uint8_t *on_stack = calloc(p->n_pages, 1);

	if (!on_stack)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_pages; i++) {
		if (p->kind[i] > PAGE_KIND_ADAPTER)
			return -EUCLEAN;
		counts[p->kind[i]]++;
	}
	for (size_t i = 0; i < p->n_free; i++) {
		uint32_t pg = p->free_stack[i];

		if (pg >= p->n_pages || on_stack[pg] || p->kind[pg] != PAGE_KIND_FREE)
			return -EUCLEAN;
		on_stack[pg] = 1;
	}
	if (counts[PAGE_KIND_FREE] != p->n_free)
		return -EUCLEAN;
	for (int k = 0; k < 3; k++)
		if (counts[k] != p->n_kind[k])
			return -EUCLEAN;
	return 0;
}
