/* SPDX-License-Identifier: MIT */
/*
 * checkpoint.c: save and resume (see checkpoint.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../basic/sha256.h"
#include "../lora/atomic-file.h"
#include "checkpoint.h"
#include "net.h"
#include "optim.h"

#define CKPT_MAGIC "MOLLYTCK"
#define CKPT_VERSION 1

static int put(struct atomic_file *f, struct sha256_ctx *h, const void *p, size_t n,
	       struct errmsg *e)
{
	sha256_update(h, p, n);
	return atomic_file_write(f, p, n, e);
}

int train_checkpoint_save(const char *path, struct train_net *net, struct train_optim *opt,
			  const uint8_t run_hash[32], struct errmsg *e)
{
	_cleanup_(atomic_file_freep) struct atomic_file *f = NULL;
	struct sha256_ctx h;
	uint32_t ver = CKPT_VERSION, np = (uint32_t) train_net_n_params(net);
	uint64_t steps = train_optim_steps(opt);
	uint8_t digest[32];
	int r;

	sha256_init(&h);
	if ((r = atomic_file_new(path, &f, e)) < 0 || (r = put(f, &h, CKPT_MAGIC, 8, e)) < 0 ||
	    (r = put(f, &h, &ver, 4, e)) < 0 || (r = put(f, &h, &np, 4, e)) < 0 ||
	    (r = put(f, &h, &steps, 8, e)) < 0 || (r = put(f, &h, run_hash, 32, e)) < 0)
		return r;
	for (uint32_t i = 0; i < np; i++) {
		struct train_param *p = train_net_param(net, i);
		uint32_t nl = (uint32_t) strlen(p->name);
		uint64_t count = (uint64_t) (p->rows * p->cols);

		if ((r = put(f, &h, &nl, 4, e)) < 0 || (r = put(f, &h, p->name, nl, e)) < 0 ||
		    (r = put(f, &h, &count, 8, e)) < 0 ||
		    (r = put(f, &h, p->w, count * 4, e)) < 0 ||
		    (r = put(f, &h, train_optim_m(opt, i), count * 4, e)) < 0 ||
		    (r = put(f, &h, train_optim_v(opt, i), count * 4, e)) < 0)
			return r;
	}
	sha256_final(&h, digest);
	if ((r = atomic_file_write(f, digest, 32, e)) < 0)
		return r;
	return atomic_file_finish(f, e);
}

static int get(FILE *f, struct sha256_ctx *h, void *p, size_t n)
{
	if (fread(p, 1, n, f) != n)
		return -EBADMSG;
	sha256_update(h, p, n);
	return 0;
}

int train_checkpoint_load(const char *path, struct train_net *net, struct train_optim *opt,
			  const uint8_t run_hash[32], struct errmsg *e)
{
	_cleanup_free_ char *name = NULL;
	struct sha256_ctx h;
	char magic[8];
	uint32_t ver, np;
	uint64_t steps;
	uint8_t rh[32], digest[32], stored[32];
	FILE *f = fopen(path, "re");
	int r = 0;

	if (!f)
		return errmsg_set(e, -errno, "%s: %m", path);
	sha256_init(&h);
	if (get(f, &h, magic, 8) < 0 || memcmp(magic, CKPT_MAGIC, 8) || get(f, &h, &ver, 4) < 0 ||
	    ver != CKPT_VERSION || get(f, &h, &np, 4) < 0 || get(f, &h, &steps, 8) < 0 ||
	    get(f, &h, rh, 32) < 0) {
		r = errmsg_set(e, -EBADMSG, "%s: not a Molly training checkpoint", path);
		goto out;
	}
	if (memcmp(rh, run_hash, 32) || np != train_net_n_params(net)) {
		r = errmsg_set(e, -ESTALE,
			       "%s: written by another run (model, data or options differ)", path);
		goto out;
	}
	for (uint32_t i = 0; i < np; i++) {
		struct train_param *p = train_net_param(net, i);
		uint64_t count;
		uint32_t nl;

		free(name);
		name = NULL;
		if (get(f, &h, &nl, 4) < 0 || nl > 4096 || !(name = calloc(nl + 1, 1)) ||
		    get(f, &h, name, nl) < 0 || get(f, &h, &count, 8) < 0) {
			r = errmsg_set(e, -EBADMSG, "%s: truncated at parameter %u", path, i);
			goto out;
		}
		if (strcmp(name, p->name) || count != (uint64_t) (p->rows * p->cols)) {
			r = errmsg_set(e, -ESTALE, "%s: parameter %u is '%s', expected '%s'", path,
				       i, name, p->name);
			goto out;
		}
		if (get(f, &h, p->w, count * 4) < 0 || get(f, &h, train_optim_m(opt, i), count * 4) < 0 ||
		    get(f, &h, train_optim_v(opt, i), count * 4) < 0) {
			r = errmsg_set(e, -EBADMSG, "%s: truncated in '%s'", path, name);
			goto out;
		}
	}
	sha256_final(&h, digest);
	if (fread(stored, 1, 32, f) != 32 || memcmp(stored, digest, 32)) {
		r = errmsg_set(e, -EBADMSG, "%s: checksum mismatch", path);
		goto out;
	}
	train_optim_set_steps(opt, steps);
out:
	fclose(f);
	return r;
}
