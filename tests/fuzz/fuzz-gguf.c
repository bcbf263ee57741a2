/* SPDX-License-Identifier: MIT */
/*
 * fuzz-gguf: libFuzzer target for the GGUF reader. Parses the input as a GGUF image, then
 * walks every value, getter and tensor the way a loader would, so a parse that succeeds on
 * bad bounds shows up as an ASan report on the walk.
 *
 *   build/fuzz/bin/fuzz-gguf -max_total_time=60 /tmp/scratch-corpus tests/fuzz/corpus/gguf
 */
#include <stdint.h>
#include <string.h>

#include "engine/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk_value(const struct gguf_value *v)
{
	switch (v->type) {
	case GGUF_TYPE_STRING:
		if (v->str.len)
			sink += (uint8_t) v->str.data[0] + (uint8_t) v->str.data[v->str.len - 1];
		return;
	case GGUF_TYPE_ARRAY:
		break;
	default:
		sink += v->u64;
		return;
	}
	for (uint64_t i = 0; i < v->arr.n; i++) {
		switch (v->arr.elem_type) {
		case GGUF_TYPE_STRING: {
			const struct gguf_str *s = &v->arr.strs[i];

			if (s->len)
				sink += (uint8_t) s->data[0] + (uint8_t) s->data[s->len - 1];
			break;
		}
		case GGUF_TYPE_ARRAY:
			walk_value(&v->arr.values[i]);
			break;
		default:
			sink += gguf_arr_u64(v, i) + (uint64_t) gguf_arr_i64(v, i);
			sink += (uint64_t) (gguf_arr_f64(v, i) != 0);
			break;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gguf *g = NULL;
	struct errmsg e = {};

	if (gguf_parse_buffer(data, size, &g, &e) < 0) {
		/* every failure explains itself */
		if (!e.text[0])
			__builtin_trap();
		return 0;
	}

	sink += gguf_version(g) + gguf_alignment(g) + gguf_file_size(g);
	for (size_t i = 0; i < gguf_n_kv(g); i++) {
		const struct gguf_kv *kv = gguf_kv_at(g, i);
		char key[512];
		uint32_t u32;
		uint64_t u64;
		int64_t i64;
		float f;
		bool b;
		char *s = NULL;

		walk_value(&kv->value);
		if (kv->key.len >= sizeof(key))
			continue;
		memcpy(key, kv->key.data, kv->key.len);
		key[kv->key.len] = 0;
		if (gguf_get(g, key) != &kv->value)
			__builtin_trap(); /* keys are unique, so lookup finds this very pair */
		sink += gguf_get_u32(g, key, &u32) + gguf_get_u64(g, key, &u64) +
			gguf_get_i64(g, key, &i64) + gguf_get_f32(g, key, &f) +
			gguf_get_bool(g, key, &b);
		if (gguf_get_string(g, key, &s) == 0) {
			sink += strlen(s);
			free(s);
		}
		sink += gguf_get_array(g, key, -1) != NULL;
	}
	for (size_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		const uint8_t *p = t->data;

		if (gguf_find_tensor(g, t->name) != t)
			__builtin_trap();
		if (t->n_bytes)
			sink += p[0] + p[t->n_bytes - 1];
		sink += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] + (uint64_t) t->type;
	}
	gguf_free(g);
	return 0;
}
