/* SPDX-License-Identifier: MIT */
/*
 * fuzz-adapter-config: libFuzzer target for the adapter_config.json parser (PEFT). Parses the
 * input, then asks the parsed config what PEFT would: which modules it targets and with which
 * rank and alpha, for a set of Llama module keys. The regular expressions in the config run
 * there, so a pattern that hangs or crashes PCRE2 shows up too (matches are limited).
 *
 *   build/fuzz/bin/fuzz-adapter-config -max_total_time=60 /tmp/scratch-corpus \
 *       tests/fuzz/corpus/adapter-config
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lora/peft.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static const char *const keys[] = {
	"model.layers.0.self_attn.q_proj",
	"model.layers.1.self_attn.k_proj",
	"model.layers.2.self_attn.v_proj",
	"model.layers.3.self_attn.o_proj",
	"model.layers.10.mlp.gate_proj",
	"model.layers.11.mlp.up_proj",
	"model.layers.31.mlp.down_proj",
	"lm_head",
	"model.embed_tokens",
	"",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct peft_config *c = NULL;
	struct errmsg e = {};

	if (peft_config_parse((const char *) data, size, &c, &e) < 0) {
		if (!e.text[0])
			__builtin_trap();
		return 0;
	}
	if (c->r < 1 || !isfinite(c->lora_alpha))
		__builtin_trap();
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *pat = NULL;
		uint32_t r = 0;
		double alpha = 0;
		int t = peft_config_targets(c, keys[i], (int64_t) i);

		if (t > 1)
			__builtin_trap();
		if (peft_config_rank(c, keys[i], &r, &pat) == 0 && r < 1)
			__builtin_trap();
		if (peft_config_alpha(c, keys[i], &alpha, &pat) == 0 && !isfinite(alpha))
			__builtin_trap();
		sink += (uint64_t) t + r + (pat ? strlen(pat) : 0);
	}
	peft_config_free(c);
	return 0;
}
