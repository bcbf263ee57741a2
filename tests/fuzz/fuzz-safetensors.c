/* SPDX-License-Identifier: MIT */
/*
 * fuzz-safetensors: libFuzzer target for the safetensors reader. Parses the input, then
 * checks the promises of safetensors.h on whatever parsed: every tensor lies inside the
 * buffer, its size is its shape times its dtype, lookups find it, and no two tensors share a
 * byte. A parse that accepted bad bounds shows up as a trap or an ASan report.
 *
 *   build/fuzz/bin/fuzz-safetensors -max_total_time=60 /tmp/scratch-corpus \
 *       tests/fuzz/corpus/safetensors
 */
#include <stdint.h>
#include <string.h>

#include "lora/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct safetensors *s = NULL;
	struct errmsg e = {};
	uint64_t covered = 0;

	if (safetensors_parse_buffer(data, size, &s, &e) < 0) {
		if (!e.text[0])
			__builtin_trap(); /* every failure explains itself */
		return 0;
	}
	for (size_t i = 0; i < safetensors_n_tensors(s); i++) {
		const struct safetensors_tensor *t = safetensors_tensor_at(s, i);
		const uint8_t *p = t->data;
		uint64_t elems = 1;

		if (p < data || t->n_bytes > size || p + t->n_bytes > data + size)
			__builtin_trap();
		for (uint32_t d = 0; d < t->n_dims; d++)
			elems *= t->shape[d];
		if (elems != t->n_elems ||
		    elems * safetensors_dtype_bits(t->dtype) != t->n_bytes * 8)
			__builtin_trap();
		if (safetensors_find(s, t->name) != t || !safetensors_dtype_name(t->dtype))
			__builtin_trap();
		if (i > 0 && strcmp(safetensors_tensor_at(s, i - 1)->name, t->name) >= 0)
			__builtin_trap(); /* sorted, unique */
		if (t->n_bytes)
			sink += p[0] + p[t->n_bytes - 1];
		covered += t->n_bytes;
	}
	/* They tile the data section: together no bigger than the file. */
	if (covered > size)
		__builtin_trap();
	for (size_t i = 0; i < safetensors_n_metadata(s); i++) {
		const char *k, *v;

		if (safetensors_metadata_at(s, i, &k, &v) < 0)
			__builtin_trap();
		sink += strlen(k) + strlen(v);
		if (safetensors_metadata_get(s, k) == NULL)
			__builtin_trap();
	}
	safetensors_free(s);
	return 0;
}
