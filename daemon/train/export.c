/* SPDX-License-Identifier: MIT */
/*
 * export.c: adapters and full models out of a trained net (see export.h). The adapter
 * layouts are daemon/lora's (lora-gen.c writes PEFT and GGUF LoRA; Molly's file is made
 * from the PEFT form by lora_file_write(), as `molly-adapter import` does).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/gguf-writer.h"
#include "../engine/model.h"
#include "../engine/quant.h"
#include "../lora/adapter.h"
#include "../lora/lora-file.h"
#include "../lora/lora-gen.h"
#include "export.h"

int train_format_from_name(const char *name, enum train_format *ret)
{
	if (!strcmp(name, "molly"))
		*ret = TRAIN_FORMAT_MOLLY;
	else if (!strcmp(name, "peft"))
		*ret = TRAIN_FORMAT_PEFT;
	else if (!strcmp(name, "gguf"))
		*ret = TRAIN_FORMAT_GGUF;
	else
		return -EINVAL;
	return 0;
}

static int export_lora(struct train_net *net, enum train_format f, const char *path,
		       struct errmsg *e)
{
	const struct model *m = train_net_model(net);
	size_t np = train_net_n_params(net), n = 0;
	_cleanup_free_ struct lora_gen_mat *mats = calloc(np / 2 + 1, sizeof(*mats));
	struct lora_gen_opts o = { .base = m, .dtype = GGML_TYPE_F32 };
	char tmpdir[4096];
	int r;

	if (!mats)
		return -ENOMEM;
	for (size_t i = 0; i + 1 < np; i += 2) {
		struct train_param *a = train_net_param(net, i), *b = train_net_param(net, i + 1);

		mats[n++] = (struct lora_gen_mat){ .layer = a->layer,
						   .target = (enum lora_target) a->target,
						   .n_in = (uint32_t) a->cols,
						   .n_out = (uint32_t) b->rows,
						   .a = a->w,
						   .b = b->w };
		o.rank = (uint32_t) a->rows;
	}
	o.alpha = train_net_lora_scale(net) * (float) o.rank;
	if (f == TRAIN_FORMAT_GGUF) {
		o.format = LORA_FORMAT_GGUF;
		return lora_gen_write_mats(path, &o, mats, n, e);
	}
	o.format = LORA_FORMAT_PEFT;
	if (f == TRAIN_FORMAT_PEFT)
		return lora_gen_write_mats(path, &o, mats, n, e);
	/* Molly's file: through a PEFT directory beside the output, opened against the base. */
	snprintf(tmpdir, sizeof(tmpdir), "%s.peft-XXXXXX", path);
	if (!mkdtemp(tmpdir))
		return errmsg_set(e, -errno, "%s: cannot create a temporary directory: %m", tmpdir);
	r = lora_gen_write_mats(tmpdir, &o, mats, n, e);
	if (r >= 0) {
		_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
		struct lora_open_opts oo = { .base = m };

		r = lora_adapter_open(tmpdir, &oo, &a, NULL, e);
		if (r >= 0)
			r = lora_file_write(a, path, &(struct lora_write_opts){ 0 }, e);
	}
	{
		char p1[4200], p2[4200];

		snprintf(p1, sizeof(p1), "%s/adapter_model.safetensors", tmpdir);
		snprintf(p2, sizeof(p2), "%s/adapter_config.json", tmpdir);
		(void) unlink(p1);
		(void) unlink(p2);
		(void) rmdir(tmpdir);
	}
	return r;
}

static struct train_param *find_param(struct train_net *net, const char *name)
{
	for (size_t i = 0; i < train_net_n_params(net); i++)
		if (!strcmp(train_net_param(net, i)->name, name))
			return train_net_param(net, i);
	return NULL;
}

static int export_full(struct train_net *net, const char *path, struct errmsg *e)
{
	const struct model *m = train_net_model(net);
	const struct gguf *g = m->gguf;
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
	int r;

	if ((r = gguf_writer_new(path, &w, e)) < 0)
		return r;
	for (size_t i = 0; i < gguf_n_kv(g); i++) {
		const struct gguf_kv *kv = gguf_kv_at(g, i);
		char key[256];

		snprintf(key, sizeof(key), "%.*s", (int) kv->key.len, kv->key.data);
		if (!strcmp(key, "general.quantization_version") || !strcmp(key, "general.alignment"))
			continue;
		if (!strcmp(key, "general.file_type"))
			r = gguf_writer_add_u32(w, key, 0, e); /* ALL_F32 */
		else
			r = gguf_writer_add_value(w, key, &kv->value, e);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		struct train_param *p = find_param(net, t->name);

		r = gguf_writer_add_tensor(w, t->name, p ? GGML_TYPE_F32 : t->type, t->n_dims, t->ne,
					   e);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		struct train_param *p = find_param(net, t->name);

		if (p)
			r = gguf_writer_write(w, p->w, (size_t) (p->rows * p->cols) * 4, e);
		else
			r = gguf_writer_write(w, t->data, t->n_bytes, e);
		if (r < 0)
			return r;
	}
	return gguf_writer_finish(w, e);
}

int train_export(struct train_net *net, enum train_format f, const char *path, struct errmsg *e)
{
	bool lora = train_net_n_params(net) > 0 && train_net_param(net, 0)->target >= 0;

	return lora ? export_lora(net, f, path, e) : export_full(net, path, e);
}
