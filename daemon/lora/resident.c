/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../engine/kernels.h"
#include "../engine/quant.h"
#include "resident.h"


/* A matrix's staging buffer, mapped and unmapped: after an adapter is made resident nothing of
 * its staging stays in the process (free() may keep it in the heap or an allocator's cache). */
struct scratch {
	void *p;
	size_t bytes;
};

static int scratch_new(struct scratch *s, size_t bytes)
{
	s->p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		    -1, 0);
	if (s->p == MAP_FAILED) {
		s->p = NULL;
		return -ENOMEM;
	}
	s->bytes = bytes ? bytes : 1;
	return 0;
}

static void scratch_freep(struct scratch *s)
{
	if (s->p)
		(void) munmap(s->p, s->bytes);
}

/* The row type matrix m has in the hot form: Q8_0 when asked and both its row lengths are
 * whole blocks, else the type it is stored in. */
static uint32_t hot_row_type(const struct lora_mat *m, enum lora_hot_type hot)
{
	if (hot == LORA_HOT_Q8_0 && m->n_in % QK8_0 == 0 && m->n_out % QK8_0 == 0)
		return GGML_TYPE_Q8_0;
	return m->dtype;
}

static size_t row_bytes(uint32_t type, uint32_t n)
{
	switch (type) {
	case GGML_TYPE_F32:
		return (size_t) n * 4;
	case GGML_TYPE_Q8_0:
		return (size_t) n / QK8_0 * sizeof(struct block_q8_0);
	default:
		return (size_t) n * 2;
	}
}

static float stored_value(const void *src, uint32_t dtype, size_t i)
{
	switch (dtype) {
	case GGML_TYPE_F32:
		return ((const float *) src)[i];
	case GGML_TYPE_BF16:
		return bf16_to_f32(((const uint16_t *) src)[i]);
	default:
		return fp16_to_f32(((const uint16_t *) src)[i]);
	}
}

/* Packs rows into pages: a page holds floor(page_bytes / row_bytes) rows of one matrix. */
struct packer {
	size_t page_bytes;
	lora_page_alloc_fn alloc;
	void *userdata;
	struct lora_resident *r;
	size_t pages_cap;
	char *cur;      /* current page */
	size_t cur_used;
};

static void *packer_row(struct packer *p, size_t row_bytes)
{
	void *row;

	if (!p->cur || p->cur_used + row_bytes > p->page_bytes) {
		uint32_t id;

		if (p->r->n_pages == p->pages_cap)
			return NULL; /* the count from lora_resident_pages_needed() was exceeded */
		p->cur = p->alloc(p->userdata, &id);
		if (!p->cur)
			return NULL;
		p->r->pages[p->r->n_pages++] = id;
		p->cur_used = 0;
	}
	row = p->cur + p->cur_used;
	p->cur_used += ALIGN_UP(row_bytes, 64); /* cache-line aligned rows */
	return row;
}

/* Walks the matrices as lora_resident_new() lays them out, counting pages. */
size_t lora_resident_pages_needed(const struct lora_adapter *a, enum lora_hot_type hot,
				  size_t page_bytes)
{
	size_t pages = 0, used = page_bytes; /* forces a first page */

	for (size_t i = 0; i < a->n_mats; i++) {
		const struct lora_mat *m = &a->mats[i];
		uint32_t type = hot_row_type(m, hot);
		size_t rows[2] = { ALIGN_UP(row_bytes(type, m->n_in), 64),
				   ALIGN_UP(row_bytes(type, m->n_out), 64) };

		for (int w = 0; w < 2; w++) {
			if (rows[w] > page_bytes)
				return (size_t) -1;
			for (uint32_t k = 0; k < m->rank; k++) {
				if (used + rows[w] > page_bytes) {
					pages++;
					used = 0;
				}
				used += rows[w];
			}
		}
	}
	return pages;
}

/* dst[k][o] = src[o][k] for B ([n_out][rank] → [rank][n_out]), in the element type. Typed
 * and blocked by 16 outputs: reads stay within a few cache lines of src, each row of dst is
 * written 16 elements at a time (an element-wise memcpy of a run-time size made a 23 MB
 * adapter's build take 100+ ms). */
#define TRANSPOSE_BLOCK 16
#define DEFINE_TRANSPOSE(name, type)                                                               \
	static void name(const type *src, void **dst_rows, uint32_t n_out, uint32_t rank)         \
	{                                                                                          \
		for (uint32_t o0 = 0; o0 < n_out; o0 += TRANSPOSE_BLOCK) {                          \
			uint32_t o1 = MIN(o0 + TRANSPOSE_BLOCK, n_out);                             \
			for (uint32_t k = 0; k < rank; k++) {                                      \
				type *d = (type *) dst_rows[k];                                    \
				for (uint32_t o = o0; o < o1; o++)                                 \
					d[o] = src[(size_t) o * rank + k];                         \
			}                                                                          \
		}                                                                                  \
	}
DEFINE_TRANSPOSE(transpose16, uint16_t)
DEFINE_TRANSPOSE(transpose32, uint32_t)

static void transpose(const void *src, void **dst_rows, uint32_t n_out, uint32_t rank, size_t eb)
{
	if (eb == 2)
		transpose16(src, dst_rows, n_out, rank);
	else
		transpose32(src, dst_rows, n_out, rank);
}

/* Row k of the matrix in buf (rows × cols in dtype; Bᵀ's row k is B's column k when
 * transposed) as one Q8_0 row at dst, through the scalar quantizer: the hot form has the same
 * bits on every CPU. */
static void quantize_row_q8_0(const void *buf, uint32_t dtype, uint32_t rows, uint32_t cols,
			      bool transposed, uint32_t k, float *tmp, void *dst)
{
	uint32_t n = transposed ? rows : cols;

	for (uint32_t i = 0; i < n; i++)
		tmp[i] = stored_value(buf, dtype,
				      transposed ? (size_t) i * cols + k : (size_t) k * cols + i);
	quant_quantize_row_ref(GGML_TYPE_Q8_0, tmp, dst, n);
}

int lora_resident_new(const struct lora_adapter *a, enum lora_hot_type hot, uint32_t n_layer,
		      size_t page_bytes, lora_page_alloc_fn alloc, void *userdata,
		      struct lora_resident **ret, struct errmsg *e)
{
	struct lora_resident *r;
	struct packer p = { .page_bytes = page_bytes, .alloc = alloc, .userdata = userdata };
	_cleanup_(scratch_freep) struct scratch buf = { NULL, 0 };
	_cleanup_free_ float *tmp = NULL;
	size_t need = lora_resident_pages_needed(a, hot, page_bytes);
	int res = 0;

	assert_return(a && ret && alloc && page_bytes > 0, -EINVAL);
	*ret = NULL;
	if (need == (size_t) -1)
		return errmsg_set(e, -E2BIG, "adapter '%s': a row does not fit a %zu-byte page",
				  a->meta.name ?: "?", page_bytes);
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	*ret = r;
	r->name = strdup(a->meta.name ? a->meta.name : "");
	r->n_layer = n_layer;
	r->max_rank = a->max_rank;
	r->mats = calloc((size_t) n_layer * LORA_TARGET_COUNT_, sizeof(*r->mats));
	r->pages = calloc(need + 1, sizeof(*r->pages));
	if (!r->name || !r->mats || !r->pages)
		return -ENOMEM;
	p.r = r;
	p.pages_cap = need;
	/* one scratch for every matrix (the largest): a mapping per matrix cost a page fault per
	 * 4 KiB of each, most of a small adapter's build */
	{
		size_t max_bytes = 0;

		for (size_t i = 0; i < a->n_mats; i++)
			max_bytes = MAX(max_bytes, MAX(lora_mat_bytes(&a->mats[i], false),
						       lora_mat_bytes(&a->mats[i], true)));
		res = scratch_new(&buf, max_bytes);
		if (res < 0)
			return res;
	}
	if (hot == LORA_HOT_Q8_0) {
		uint32_t max_len = 0;

		for (size_t i = 0; i < a->n_mats; i++)
			max_len = MAX(max_len, MAX(a->mats[i].n_in, a->mats[i].n_out));
		tmp = malloc((size_t) max_len * sizeof(float) + 1);
		if (!tmp)
			return -ENOMEM;
	}

	for (size_t i = 0; i < a->n_mats && res == 0; i++) {
		const struct lora_mat *m = &a->mats[i];
		uint32_t type = hot_row_type(m, hot);
		size_t a_row = row_bytes(type, m->n_in), bt_row = row_bytes(type, m->n_out);
		size_t a_bytes = lora_mat_bytes(m, false), b_bytes = lora_mat_bytes(m, true);
		size_t eb = row_bytes(m->dtype, 1);
		struct lora_resident_mat *rm;

		if (m->layer >= n_layer || m->target >= LORA_TARGET_COUNT_)
			return errmsg_set(e, -EINVAL, "adapter '%s': matrix %zu for layer %u out of range",
					  r->name, i, m->layer);
		if (m->dtype != GGML_TYPE_F32 && m->dtype != GGML_TYPE_F16 && m->dtype != GGML_TYPE_BF16)
			return errmsg_set(e, -EINVAL, "adapter '%s': unsupported row type %u", r->name,
					  m->dtype);
		rm = calloc(1, sizeof(*rm) + 2 * (size_t) m->rank * sizeof(void *));
		if (!rm)
			return -ENOMEM;
		r->mats[(size_t) m->layer * LORA_TARGET_COUNT_ + m->target] = rm;
		*rm = (struct lora_resident_mat){ .rank = m->rank, .n_in = m->n_in, .n_out = m->n_out,
						  .dtype = type, .scale = m->scale };
		rm->a_rows = (const void **) (rm + 1);
		rm->bt_rows = rm->a_rows + m->rank;

		res = lora_adapter_read(a, i, false, buf.p, a_bytes);
		if (res < 0)
			return errmsg_set(e, res, "adapter '%s': reading A of matrix %zu: %s", r->name, i,
					  strerror(-res));
		for (uint32_t k = 0; k < m->rank; k++) {
			void *row = packer_row(&p, a_row);
			if (!row)
				return errmsg_set(e, -ENOSPC, "adapter '%s': out of pages", r->name);
			if (type == GGML_TYPE_Q8_0)
				quantize_row_q8_0(buf.p, m->dtype, m->rank, m->n_in, false, k, tmp, row);
			else
				memcpy(row, (char *) buf.p + (size_t) k * m->n_in * eb, a_row);
			rm->a_rows[k] = row;
		}
		res = lora_adapter_read(a, i, true, buf.p, b_bytes);
		if (res < 0)
			return errmsg_set(e, res, "adapter '%s': reading B of matrix %zu: %s", r->name, i,
					  strerror(-res));
		for (uint32_t k = 0; k < m->rank; k++) {
			void *row = packer_row(&p, bt_row);
			if (!row)
				return errmsg_set(e, -ENOSPC, "adapter '%s': out of pages", r->name);
			rm->bt_rows[k] = row;
			if (type == GGML_TYPE_Q8_0) /* B is [n_out][rank]: Bᵀ row k is its column k */
				quantize_row_q8_0(buf.p, m->dtype, m->n_out, m->rank, true, k, tmp, row);
		}
		if (type != GGML_TYPE_Q8_0)
			transpose(buf.p, (void **) rm->bt_rows, m->n_out, m->rank, eb);
		r->bytes += (size_t) m->rank * (a_row + bt_row);
	}
	return res;
}

struct lora_resident *lora_resident_free(struct lora_resident *r)
{
	if (!r)
		return NULL;
	if (r->mats)
		for (size_t i = 0; i < (size_t) r->n_layer * LORA_TARGET_COUNT_; i++)
			free(r->mats[i]);
	free(r->mats);
	free(r->pages);
	free(r->name);
	free(r);
	return NULL;
}
