/* SPDX-License-Identifier: MIT */
/*
 * lora-file.c: Molly's adapter file: writer, checked reader, O_DIRECT reads (format in
 * lora-file.h).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../basic/sha256.h"
#include "../engine/model.h"
#include "../engine/quant.h"
#include "adapter-private.h"
#include "atomic-file.h"
#include "lora-file.h"

#define FLAG_BASE_WEIGHTS_HASH 1u

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 |
	       (uint32_t) p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t) rd32(p) | (uint64_t) rd32(p + 4) << 32;
}

static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t) (v >> (8 * i));
}

static void wr64(uint8_t *p, uint64_t v)
{
	wr32(p, (uint32_t) v);
	wr32(p + 4, (uint32_t) (v >> 32));
}

/* Reads up to n bytes at off (fewer only at end of file); bytes read or -errno. */
static ssize_t read_at(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t k = pread(fd, (uint8_t *) buf + done, n - done, (off_t) (off + done));

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			break;
		done += (size_t) k;
	}
	return (ssize_t) done;
}

static void *aligned_buf(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, LORA_FILE_ALIGN, ALIGN_UP(n ? n : 1, LORA_FILE_ALIGN)) != 0)
		return NULL;
	return p;
}

void lora_file_close(struct lora_priv *p)
{
	if (!p)
		return;
	if (p->fd >= 0)
		(void) close(p->fd);
	p->fd = -EBADF;
	free(p->a_offset);
	free(p->b_offset);
	free(p->a_sha);
	free(p->b_sha);
	p->a_offset = p->b_offset = NULL;
	p->a_sha = p->b_sha = NULL;
}

int lora_file_tensor_info(const struct lora_adapter *a, size_t i, bool b_matrix,
			  uint64_t *ret_offset, uint8_t ret_sha[32])
{
	const struct lora_priv *p;

	assert_return(a && a->priv, -EINVAL);
	p = a->priv;
	if (p->format != LORA_FORMAT_MOLLY || i >= a->n_mats)
		return -ENOENT;
	if (ret_offset)
		*ret_offset = b_matrix ? p->b_offset[i] : p->a_offset[i];
	if (ret_sha)
		memcpy(ret_sha, b_matrix ? p->b_sha[i] : p->a_sha[i], 32);
	return 0;
}

int lora_file_read(const struct lora_adapter *a, size_t i, bool b_matrix, void *dst,
		   size_t dst_bytes)
{
	const struct lora_priv *p = a->priv;
	uint64_t off = b_matrix ? p->b_offset[i] : p->a_offset[i];
	const uint8_t *want = b_matrix ? p->b_sha[i] : p->a_sha[i];
	size_t padded = ALIGN_UP(dst_bytes, LORA_FILE_ALIGN);
	_cleanup_free_ void *bounce = NULL;
	uint8_t got[32];
	void *buf = dst;
	ssize_t k;

	if (p->image) {
		/* the warm copy: hashed whole when it was read in */
		if (off > p->image_bytes || dst_bytes > p->image_bytes - off)
			return -EIO;
		memcpy(dst, p->image + off, dst_bytes);
		return 0;
	}
	/* Read straight into dst when it already meets O_DIRECT's rules, else bounce. */
	if (((uintptr_t) dst % LORA_FILE_ALIGN) != 0 || padded != dst_bytes) {
		bounce = aligned_buf(padded);
		if (!bounce)
			return -ENOMEM;
		buf = bounce;
	}
	k = read_at(p->fd, buf, padded, off);
	if (k < 0)
		return (int) k;
	if ((size_t) k < padded)
		return -EIO; /* the file was truncated after open */
	sha256(buf, dst_bytes, got);
	if (memcmp(got, want, 32) != 0)
		return -EBADMSG;
	if (buf != dst)
		memcpy(dst, buf, dst_bytes);
	return 0;
}

/* ---- open ---- */

struct str_cursor {
	const uint8_t *p;
	size_t left;
};

static int next_string(struct str_cursor *c, char **ret, const char *what, size_t idx,
		       struct errmsg *e)
{
	uint32_t len;

	if (c->left < 4)
		return errmsg_set(e, -EBADMSG, "header: strings end inside the length of %s %zu",
				  what, idx);
	len = rd32(c->p);
	c->p += 4;
	c->left -= 4;
	if (len > c->left)
		return errmsg_set(e, -EBADMSG,
				  "header: %s %zu is %" PRIu32
				  " bytes, past the end of the strings",
				  what, idx, len);
	if (memchr(c->p, 0, len))
		return errmsg_set(e, -EBADMSG, "header: %s %zu contains a NUL byte", what, idx);
	*ret = strndup((const char *) c->p, len);
	if (!*ret)
		return -ENOMEM;
	c->p += len;
	c->left -= len;
	return 0;
}

static int parse_strings(struct lora_adapter *a, const uint8_t *p, size_t n, uint32_t n_domains,
			 uint32_t n_exemplars, struct errmsg *e)
{
	struct str_cursor c = { p, n };
	int r;

	/* Every string takes at least its 4-byte length: bound the counts before allocating. */
	if ((2 + (uint64_t) n_domains + n_exemplars) * 4 > n)
		return errmsg_set(e, -EBADMSG,
				  "header: %" PRIu32 " domains and %" PRIu32
				  " exemplars do not fit %zu bytes of strings",
				  n_domains, n_exemplars, n);
	if ((r = next_string(&c, &a->meta.name, "name", 0, e)) < 0 ||
	    (r = next_string(&c, &a->base_description, "base description", 0, e)) < 0)
		return r;
	a->meta.domains = calloc(n_domains ? n_domains : 1, sizeof(char *));
	a->meta.exemplars = calloc(n_exemplars ? n_exemplars : 1, sizeof(char *));
	if (!a->meta.domains || !a->meta.exemplars)
		return -ENOMEM;
	for (uint32_t i = 0; i < n_domains; i++, a->meta.n_domains++)
		if ((r = next_string(&c, &a->meta.domains[i], "domain", i, e)) < 0)
			return r;
	for (uint32_t i = 0; i < n_exemplars; i++, a->meta.n_exemplars++)
		if ((r = next_string(&c, &a->meta.exemplars[i], "exemplar", i, e)) < 0)
			return r;
	if (c.left != 0)
		return errmsg_set(e, -EBADMSG, "header: %zu bytes after the last string", c.left);
	return 0;
}

/* One tensor's place: aligned, after the previous one, inside the file. */
static int check_extent(uint64_t off, uint64_t bytes, uint64_t *end, uint64_t file_bytes, size_t i,
			const char *which, struct errmsg *e)
{
	uint64_t padded;

	if (off % LORA_FILE_ALIGN != 0)
		return errmsg_set(e, -EBADMSG,
				  "matrix %zu: %s offset %" PRIu64 " is not a multiple of %d", i,
				  which, off, LORA_FILE_ALIGN);
	if (off < *end)
		return errmsg_set(e, -EBADMSG,
				  "matrix %zu: %s offset %" PRIu64
				  " overlaps what comes before it (which ends at %" PRIu64 ")",
				  i, which, off, *end);
	padded = ALIGN_UP(bytes, (uint64_t) LORA_FILE_ALIGN);
	if (off > file_bytes || padded > file_bytes - off)
		return errmsg_set(e, -EBADMSG,
				  "matrix %zu: %s [%" PRIu64 ", +%" PRIu64
				  ") runs past the end of the file (%" PRIu64 " bytes)",
				  i, which, off, padded, file_bytes);
	*end = off + padded;
	return 0;
}

static int parse_table(struct lora_adapter *a, const uint8_t *t, uint64_t data_offset,
		       uint64_t file_bytes, struct errmsg *e)
{
	struct lora_priv *p = a->priv;
	uint64_t end = data_offset;

	for (size_t i = 0; i < a->n_mats; i++, t += LORA_FILE_ENTRY_BYTES) {
		struct lora_mat *m = &a->mats[i];
		uint64_t a_bytes, b_bytes;
		uint32_t target = rd32(t + 4), scale_bits = rd32(t + 24);

		*m = (struct lora_mat){ .layer = rd32(t),
					.rank = rd32(t + 8),
					.n_in = rd32(t + 12),
					.n_out = rd32(t + 16),
					.dtype = rd32(t + 20) };
		memcpy(&m->scale, &scale_bits, sizeof(m->scale));
		if (target >= LORA_TARGET_COUNT_)
			return errmsg_set(e, -EBADMSG, "matrix %zu: unknown target %" PRIu32, i,
					  target);
		m->target = (enum lora_target) target;
		if (m->rank == 0 || m->n_in == 0 || m->n_out == 0)
			return errmsg_set(e, -EBADMSG,
					  "matrix %zu: rank %" PRIu32 ", n_in %" PRIu32
					  ", n_out %" PRIu32 ": none may be 0",
					  i, m->rank, m->n_in, m->n_out);
		if (m->dtype != GGML_TYPE_F16 && m->dtype != GGML_TYPE_BF16)
			return errmsg_set(e, -EBADMSG,
					  "matrix %zu: dtype %" PRIu32 " is not f16 or bf16", i,
					  m->dtype);
		if (!isfinite(m->scale))
			return errmsg_set(e, -EBADMSG, "matrix %zu: scale is not finite", i);
		if (rd32(t + 28) != 0)
			return errmsg_set(e, -EBADMSG, "matrix %zu: reserved field is not zero", i);
		if (i > 0 && (m->layer < m[-1].layer ||
			      (m->layer == m[-1].layer && m->target <= m[-1].target)))
			return errmsg_set(e, -EBADMSG,
					  "matrix %zu (layer %" PRIu32
					  " %s) is out of order or repeated",
					  i, m->layer, lora_target_name(m->target));
		a_bytes = rd64(t + 40);
		b_bytes = rd64(t + 56);
		if (a_bytes != lora_mat_bytes(m, false) || b_bytes != lora_mat_bytes(m, true))
			return errmsg_set(e, -EBADMSG,
					  "matrix %zu: sizes %" PRIu64 "/%" PRIu64
					  " do not match rank %" PRIu32 ", %" PRIu32 " -> %" PRIu32,
					  i, a_bytes, b_bytes, m->rank, m->n_in, m->n_out);
		p->a_offset[i] = rd64(t + 32);
		p->b_offset[i] = rd64(t + 48);
		int r = check_extent(p->a_offset[i], a_bytes, &end, file_bytes, i, "A", e);
		if (r < 0)
			return r;
		r = check_extent(p->b_offset[i], b_bytes, &end, file_bytes, i, "B", e);
		if (r < 0)
			return r;
		memcpy(p->a_sha[i], t + 64, 32);
		memcpy(p->b_sha[i], t + 96, 32);
		a->max_rank = MAX(a->max_rank, m->rank);
	}
	if (end != file_bytes)
		return errmsg_set(e, -EBADMSG,
				  "the tensors end at %" PRIu64 ", but the file is %" PRIu64
				  " bytes",
				  end, file_bytes);
	return 0;
}

/* Opens path, with O_DIRECT when asked and the filesystem allows it, and reads the first
 * header block (which proves O_DIRECT reads work). */
static int open_and_read_head(const char *path, bool want_direct, int *ret_fd, bool *ret_direct,
			      uint8_t *block, ssize_t *ret_n, struct errmsg *e)
{
	for (int attempt = want_direct ? 0 : 1; attempt < 2; attempt++) {
		int flags = O_RDONLY | O_CLOEXEC | (attempt == 0 ? O_DIRECT : 0);
		int fd = open(path, flags);
		ssize_t k;

		if (fd < 0) {
			if (attempt == 0 && errno == EINVAL)
				continue; /* filesystem without O_DIRECT (tmpfs before 6.6) */
			return errmsg_set(e, -errno, "cannot open: %s", strerror(errno));
		}
		k = read_at(fd, block, LORA_FILE_ALIGN, 0);
		if (k == -EINVAL && attempt == 0) {
			(void) close(fd);
			continue;
		}
		if (k < 0) {
			(void) close(fd);
			return errmsg_set(e, (int) k, "cannot read: %s", strerror((int) -k));
		}
		*ret_fd = fd;
		*ret_direct = attempt == 0;
		*ret_n = k;
		return 0;
	}
	return errmsg_set(e, -EIO, "cannot read");
}

int lora_file_open(const char *path, const struct lora_open_opts *opts, struct lora_adapter **ret,
		   struct errmsg *e)
{
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
	_cleanup_free_ uint8_t *hdr = NULL;
	uint32_t version, header_bytes, flags, n_mats, max_rank, target_mask, n_domains,
		n_exemplars, strings_offset, strings_bytes;
	uint64_t data_offset, file_bytes;
	uint8_t sha[32], want[32];
	struct lora_priv *p;
	struct stat st;
	ssize_t k = 0;
	int r;

	a = lora_adapter_alloc(LORA_FORMAT_MOLLY);
	hdr = aligned_buf(LORA_FILE_ALIGN);
	if (!a || !hdr)
		return -ENOMEM;
	p = a->priv;
	r = open_and_read_head(path, opts->direct_io, &p->fd, &p->direct, hdr, &k, e);
	if (r < 0)
		return r;
	if (fstat(p->fd, &st) < 0)
		return errmsg_set(e, -errno, "cannot stat: %s", strerror(errno));
	if (k < LORA_FILE_FIXED_BYTES)
		return errmsg_set(e, -EBADMSG,
				  "truncated: %zd bytes, shorter than the %d-byte header", k,
				  LORA_FILE_FIXED_BYTES);
	if (memcmp(hdr, LORA_FILE_MAGIC, 8) != 0)
		return errmsg_set(e, -EBADMSG, "bad magic: not a Molly adapter file");
	version = rd32(hdr + 8);
	if (version != LORA_FILE_VERSION)
		return errmsg_set(e, -EPROTONOSUPPORT,
				  "Molly adapter file version %" PRIu32 " is not supported (this "
				  "build reads version %d)",
				  version, LORA_FILE_VERSION);
	header_bytes = rd32(hdr + 12);
	data_offset = rd64(hdr + 16);
	file_bytes = rd64(hdr + 24);
	if (header_bytes < LORA_FILE_FIXED_BYTES || header_bytes > LORA_FILE_MAX_HEADER)
		return errmsg_set(e, -EBADMSG, "header size %" PRIu32 " is not in %d..%u",
				  header_bytes, LORA_FILE_FIXED_BYTES, LORA_FILE_MAX_HEADER);
	if (data_offset != ALIGN_UP((uint64_t) header_bytes, LORA_FILE_ALIGN))
		return errmsg_set(e, -EBADMSG,
				  "data offset %" PRIu64 " is not the header size %" PRIu32
				  " rounded up to %d",
				  data_offset, header_bytes, LORA_FILE_ALIGN);
	if ((uint64_t) st.st_size != file_bytes)
		return errmsg_set(e, -EBADMSG,
				  "file is %lld bytes, but its header says %" PRIu64 "%s",
				  (long long) st.st_size, file_bytes,
				  (uint64_t) st.st_size < file_bytes ? " (truncated)" : "");
	if (file_bytes < data_offset || file_bytes % LORA_FILE_ALIGN != 0)
		return errmsg_set(e, -EBADMSG,
				  "file size %" PRIu64 " is not a multiple of %d past the header",
				  file_bytes, LORA_FILE_ALIGN);
	if (data_offset > LORA_FILE_ALIGN) {
		uint8_t *big = aligned_buf(data_offset);

		if (!big)
			return -ENOMEM;
		free(hdr);
		hdr = big;
		k = read_at(p->fd, hdr, data_offset, 0);
		if (k < 0)
			return errmsg_set(e, (int) k, "cannot read the header: %s",
					  strerror((int) -k));
		if ((uint64_t) k < data_offset)
			return errmsg_set(e, -EBADMSG, "truncated inside the header");
	}

	memcpy(want, hdr + 32, 32);
	memset(hdr + 32, 0, 32);
	sha256(hdr, header_bytes, sha);
	memcpy(hdr + 32, want, 32);
	if (memcmp(sha, want, 32) != 0)
		return errmsg_set(e, -EBADMSG, "header checksum mismatch (the file is corrupt)");

	flags = rd32(hdr + 160);
	n_mats = rd32(hdr + 164);
	max_rank = rd32(hdr + 168);
	target_mask = rd32(hdr + 172);
	n_domains = rd32(hdr + 176);
	n_exemplars = rd32(hdr + 180);
	strings_offset = rd32(hdr + 192);
	strings_bytes = rd32(hdr + 196);
	if (flags & ~FLAG_BASE_WEIGHTS_HASH)
		return errmsg_set(e, -EBADMSG, "unknown flags 0x%" PRIx32, flags);
	if (rd32(hdr + 184) != LORA_FILE_FIXED_BYTES || rd32(hdr + 188) != LORA_FILE_ENTRY_BYTES)
		return errmsg_set(e, -EBADMSG,
				  "table at %" PRIu32 " with %" PRIu32
				  "-byte entries (expected %d, %d)",
				  rd32(hdr + 184), rd32(hdr + 188), LORA_FILE_FIXED_BYTES,
				  LORA_FILE_ENTRY_BYTES);
	if (n_mats == 0)
		return errmsg_set(e, -EBADMSG, "no matrices");
	if (n_mats > (header_bytes - LORA_FILE_FIXED_BYTES) / LORA_FILE_ENTRY_BYTES ||
	    strings_offset != LORA_FILE_FIXED_BYTES + n_mats * LORA_FILE_ENTRY_BYTES ||
	    (uint64_t) strings_offset + strings_bytes != header_bytes)
		return errmsg_set(e, -EBADMSG,
				  "%" PRIu32 " matrices and %" PRIu32
				  " bytes of strings at %" PRIu32 " do not fill the %" PRIu32
				  "-byte header",
				  n_mats, strings_bytes, strings_offset, header_bytes);
	for (int i = 200; i < LORA_FILE_FIXED_BYTES; i++)
		if (hdr[i] != 0)
			return errmsg_set(e, -EBADMSG, "reserved header bytes are not zero");

	a->n_mats = n_mats;
	a->mats = calloc(n_mats, sizeof(*a->mats));
	p->a_offset = calloc(n_mats, sizeof(*p->a_offset));
	p->b_offset = calloc(n_mats, sizeof(*p->b_offset));
	p->a_sha = calloc(n_mats, sizeof(*p->a_sha));
	p->b_sha = calloc(n_mats, sizeof(*p->b_sha));
	if (!a->mats || !p->a_offset || !p->b_offset || !p->a_sha || !p->b_sha)
		return -ENOMEM;
	r = parse_table(a, hdr + LORA_FILE_FIXED_BYTES, data_offset, file_bytes, e);
	if (r < 0)
		return r;
	if (a->max_rank != max_rank || lora_adapter_targets(a) != target_mask)
		return errmsg_set(e, -EBADMSG,
				  "header says max rank %" PRIu32 ", targets 0x%" PRIx32
				  "; the table has %" PRIu32 ", 0x%" PRIx32,
				  max_rank, target_mask, a->max_rank, lora_adapter_targets(a));
	r = parse_strings(a, hdr + strings_offset, strings_bytes, n_domains, n_exemplars, e);
	if (r < 0)
		return r;

	memcpy(a->content_hash, hdr + 64, 32);
	memcpy(a->base_fingerprint, hdr + 96, 32);
	memcpy(a->base_weights_hash, hdr + 128, 32);
	a->has_base_weights_hash = flags & FLAG_BASE_WEIGHTS_HASH;
	lora_content_hash(a->mats, a->n_mats, (const uint8_t(*)[32]) p->a_sha,
			  (const uint8_t(*)[32]) p->b_sha, sha);
	if (memcmp(sha, a->content_hash, 32) != 0)
		return errmsg_set(e, -EBADMSG, "content hash does not match the tensor table");
	if (opts->base) {
		r = lora_adapter_check_base(a, opts->base, e);
		if (r < 0)
			return r;
	}
	*ret = TAKE_PTR(a);
	return 0;
}

/* ---- write ---- */

static int put_string(uint8_t **p, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	wr32(*p, (uint32_t) n);
	if (n)
		memcpy(*p + 4, s, n);
	*p += 4 + n;
	return 0;
}

/* Converts n values from one row type to another (F32, F16, BF16) into out. */
static int convert_dtype(const void *in, uint32_t from, void *out, uint32_t to, size_t n,
			 size_t idx, struct errmsg *e)
{
	for (size_t i = 0; i < n; i++) {
		float x;
		uint16_t h;

		if (from == GGML_TYPE_F32) {
			memcpy(&x, (const uint8_t *) in + 4 * i, 4);
		} else {
			memcpy(&h, (const uint8_t *) in + 2 * i, 2);
			x = from == GGML_TYPE_F16 ? fp16_to_f32(h) : bf16_to_f32(h);
		}
		h = to == GGML_TYPE_F16 ? f32_to_fp16(x) : f32_to_bf16(x);
		if (isfinite(x) && !isfinite(to == GGML_TYPE_F16 ? fp16_to_f32(h) : bf16_to_f32(h)))
			return errmsg_set(e, -ERANGE, "matrix %zu: value %g does not fit %s", idx,
					  (double) x, quant_type_name(to));
		memcpy((uint8_t *) out + 2 * i, &h, 2);
	}
	return 0;
}

int lora_file_write(const struct lora_adapter *a, const char *path,
		    const struct lora_write_opts *opts, struct errmsg *e)
{
	static const struct lora_write_opts no_opts;
	_cleanup_(atomic_file_freep) struct atomic_file *f = NULL;
	_cleanup_free_ struct lora_mat *mats = NULL;
	_cleanup_free_ uint8_t(*a_sha)[32] = NULL;
	_cleanup_free_ uint8_t(*b_sha)[32] = NULL;
	_cleanup_free_ uint64_t *offs = NULL;
	_cleanup_free_ uint8_t *hdr = NULL;
	const struct lora_adapter_meta *meta;
	uint64_t strings_bytes, header_bytes, data_offset, off;
	uint8_t *q;
	size_t n;
	int r;

	assert_return(a && path, -EINVAL);
	if (!opts)
		opts = &no_opts;
	if (opts->dtype && opts->dtype != GGML_TYPE_F16 && opts->dtype != GGML_TYPE_BF16)
		return errmsg_set(e, -EINVAL, "dtype must be f16 or bf16");
	meta = opts->meta ? opts->meta : &a->meta;
	n = a->n_mats;
	if (n == 0 || n > (LORA_FILE_MAX_HEADER - LORA_FILE_FIXED_BYTES) / LORA_FILE_ENTRY_BYTES)
		return errmsg_set(e, -EINVAL, "%zu matrices cannot be written", n);

	strings_bytes = 8 + (meta->name ? strlen(meta->name) : 0) +
			(a->base_description ? strlen(a->base_description) : 0);
	for (size_t i = 0; i < meta->n_domains; i++)
		strings_bytes += 4 + strlen(meta->domains[i]);
	for (size_t i = 0; i < meta->n_exemplars; i++)
		strings_bytes += 4 + strlen(meta->exemplars[i]);
	header_bytes = LORA_FILE_FIXED_BYTES + (uint64_t) n * LORA_FILE_ENTRY_BYTES + strings_bytes;
	if (header_bytes > LORA_FILE_MAX_HEADER)
		return errmsg_set(e, -E2BIG,
				  "metadata too large: the header would be %" PRIu64
				  " bytes (at most %u)",
				  header_bytes, LORA_FILE_MAX_HEADER);
	data_offset = ALIGN_UP(header_bytes, (uint64_t) LORA_FILE_ALIGN);

	mats = calloc(n, sizeof(*mats));
	a_sha = calloc(n, sizeof(*a_sha));
	b_sha = calloc(n, sizeof(*b_sha));
	offs = calloc(2 * n, sizeof(*offs));
	hdr = calloc(1, data_offset);
	if (!mats || !a_sha || !b_sha || !offs || !hdr)
		return -ENOMEM;
	off = data_offset;
	for (size_t i = 0; i < n; i++) {
		mats[i] = a->mats[i];
		if (opts->dtype)
			mats[i].dtype = opts->dtype;
		else if (mats[i].dtype == GGML_TYPE_F32)
			mats[i].dtype = GGML_TYPE_F16; /* Molly files hold F16 or BF16 */
		offs[2 * i] = off;
		off += ALIGN_UP((uint64_t) lora_mat_bytes(&mats[i], false), LORA_FILE_ALIGN);
		offs[2 * i + 1] = off;
		off += ALIGN_UP((uint64_t) lora_mat_bytes(&mats[i], true), LORA_FILE_ALIGN);
	}

	r = atomic_file_new(path, &f, e);
	if (r < 0)
		return r;
	if ((r = atomic_file_reserve(f, off, e)) < 0 ||
	    (r = atomic_file_write(f, hdr, data_offset, e)) < 0) /* placeholder, rewritten last */
		return r;
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 2; b++) {
			size_t in_bytes = lora_mat_bytes(&a->mats[i], b);
			size_t bytes = lora_mat_bytes(&mats[i], b);
			_cleanup_free_ uint8_t *in = malloc(in_bytes), *conv = NULL;
			const uint8_t *buf = in;

			if (!in)
				return -ENOMEM;
			r = lora_adapter_read(a, i, b, in, in_bytes);
			if (r < 0)
				return errmsg_set(e, r, "reading matrix %zu %s of the source: %s",
						  i, b ? "B" : "A", strerror(-r));
			if (a->mats[i].dtype != mats[i].dtype) {
				conv = malloc(bytes);
				if (!conv)
					return -ENOMEM;
				r = convert_dtype(in, a->mats[i].dtype, conv, mats[i].dtype,
						  bytes / 2, i, e);
				if (r < 0)
					return r;
				buf = conv;
			}
			sha256(buf, bytes, b ? b_sha[i] : a_sha[i]);
			if ((r = atomic_file_write(f, buf, bytes, e)) < 0 ||
			    (r = atomic_file_pad(f, LORA_FILE_ALIGN, e)) < 0)
				return r;
		}

	memcpy(hdr, LORA_FILE_MAGIC, 8);
	wr32(hdr + 8, LORA_FILE_VERSION);
	wr32(hdr + 12, (uint32_t) header_bytes);
	wr64(hdr + 16, data_offset);
	wr64(hdr + 24, off);
	lora_content_hash(mats, n, (const uint8_t(*)[32]) a_sha, (const uint8_t(*)[32]) b_sha,
			  hdr + 64);
	memcpy(hdr + 96, a->base_fingerprint, 32);
	if (opts->base_weights_hash || a->has_base_weights_hash) {
		memcpy(hdr + 128,
		       opts->base_weights_hash ? opts->base_weights_hash : a->base_weights_hash,
		       32);
		wr32(hdr + 160, FLAG_BASE_WEIGHTS_HASH);
	}
	wr32(hdr + 164, (uint32_t) n);
	wr32(hdr + 168, a->max_rank);
	wr32(hdr + 172, lora_adapter_targets(a));
	wr32(hdr + 176, (uint32_t) meta->n_domains);
	wr32(hdr + 180, (uint32_t) meta->n_exemplars);
	wr32(hdr + 184, LORA_FILE_FIXED_BYTES);
	wr32(hdr + 188, LORA_FILE_ENTRY_BYTES);
	wr32(hdr + 192, (uint32_t) (LORA_FILE_FIXED_BYTES + n * LORA_FILE_ENTRY_BYTES));
	wr32(hdr + 196, (uint32_t) strings_bytes);
	q = hdr + LORA_FILE_FIXED_BYTES;
	for (size_t i = 0; i < n; i++, q += LORA_FILE_ENTRY_BYTES) {
		uint32_t scale_bits;

		memcpy(&scale_bits, &mats[i].scale, 4);
		wr32(q, mats[i].layer);
		wr32(q + 4, (uint32_t) mats[i].target);
		wr32(q + 8, mats[i].rank);
		wr32(q + 12, mats[i].n_in);
		wr32(q + 16, mats[i].n_out);
		wr32(q + 20, mats[i].dtype);
		wr32(q + 24, scale_bits);
		wr64(q + 32, offs[2 * i]);
		wr64(q + 40, lora_mat_bytes(&mats[i], false));
		wr64(q + 48, offs[2 * i + 1]);
		wr64(q + 56, lora_mat_bytes(&mats[i], true));
		memcpy(q + 64, a_sha[i], 32);
		memcpy(q + 96, b_sha[i], 32);
	}
	put_string(&q, meta->name);
	put_string(&q, a->base_description);
	for (size_t i = 0; i < meta->n_domains; i++)
		put_string(&q, meta->domains[i]);
	for (size_t i = 0; i < meta->n_exemplars; i++)
		put_string(&q, meta->exemplars[i]);
	sha256(hdr, header_bytes, hdr + 32); /* the field is still zero here */
	r = atomic_file_pwrite(f, hdr, header_bytes, 0, e);
	if (r < 0)
		return r;
	return atomic_file_finish(f, e);
}
