/* SPDX-License-Identifier: MIT */
/*
 * peft.h: Hugging Face PEFT LoRA adapters: adapter_config.json, and the directory loader
 * behind lora_adapter_open() (adapter_config.json + adapter_model.safetensors).
 *
 * What the config means is PEFT's (src/peft/tuners/lora/config.py, tuners_utils.py,
 * utils/other.py), for a module key such as "model.layers.3.self_attn.q_proj" (the name of
 * the module in the base model, i.e. a tensor name without "base_model.model." and without
 * ".lora_A.weight"):
 *
 *   target_modules   a list: the key equals an entry or ends with "." + entry;
 *                    a string: a regular expression that must match the whole key
 *                    (re.fullmatch); "all-linear": every linear layer but the output;
 *                    absent or null: every module the file has weights for (PEFT fills in
 *                    the architecture's defaults when it makes an adapter).
 *   exclude_modules  the same forms; an excluded key is not targeted.
 *   layers_to_transform  an int or a list: only those layer indices (list form only, as PEFT).
 *   rank_pattern, alpha_pattern   {pattern: value}: the first pattern, in file order, for
 *                    which re.match(r"(.*\.)?(PATTERN)$", key) matches gives the module's r
 *                    or lora_alpha; otherwise r / lora_alpha.
 *   use_rslora       scale = alpha / sqrt(r) instead of alpha / r.
 *   fan_in_fan_out   only transposes the *base* weight of GPT-2 style Conv1D layers; lora_A
 *                    and lora_B are always stored as nn.Linear weights ([r, in], [out, r]),
 *                    and Llama-family projections are nn.Linear, so it changes nothing here.
 *
 * Regular expressions are PCRE2 with Unicode semantics (close to Python's re for the
 * patterns people write) and a match limit, so a hostile pattern fails instead of hanging.
 *
 * Threading: a parsed config is immutable; matching may run from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "adapter.h"

#define PEFT_CONFIG_MAX_BYTES (16u << 20)

enum peft_match_kind {
	PEFT_MATCH_NONE,       /* absent or null (exclude_modules: nothing; target_modules: all) */
	PEFT_MATCH_LIST,       /* exact name or "."-suffix */
	PEFT_MATCH_REGEX,      /* full match */
	PEFT_MATCH_ALL_LINEAR, /* "all-linear" (target_modules only) */
};

struct peft_module_set {
	enum peft_match_kind kind;
	char **names; /* owned, n_names (LIST) */
	size_t n_names;
	char *regex; /* owned (REGEX): the pattern as written */
	void *re;    /* owned pcre2_code (REGEX) */
};

struct peft_pattern {
	char *key; /* owned: the pattern as written */
	void *re;  /* owned pcre2_code of (.*\.)?(KEY)$, anchored */
	double value;
};

struct peft_config {
	char *peft_type;   /* owned; NULL when absent */
	char *base_model;  /* owned: base_model_name_or_path, or NULL */
	uint32_t r;        /* default 8, as PEFT */
	double lora_alpha; /* default 8, as PEFT */
	struct peft_module_set target_modules;
	struct peft_module_set exclude_modules;
	bool has_layers_to_transform;
	int64_t *layers_to_transform; /* owned */
	size_t n_layers_to_transform;
	bool use_rslora;
	bool use_dora;
	bool fan_in_fan_out;
	struct peft_pattern *rank_pattern; /* owned, file order */
	size_t n_rank_pattern;
	struct peft_pattern *alpha_pattern; /* owned, file order */
	size_t n_alpha_pattern;
	char **modules_to_save; /* owned */
	size_t n_modules_to_save;
	/* Features that change what the adapter computes and that Molly does not implement;
	 * each holds the config key when set (non-null, non-empty), else NULL. */
	const char *unsupported_feature; /* use_dora, layer_replication, target_parameters, ... */
	bool has_trainable_tokens;       /* trainable_token_indices: extra embedding rows */
};

/* Parses adapter_config.json's bytes (need not be NUL-terminated). Type errors, invalid
 * regular expressions, r < 1 and the like are -EBADMSG with the key named. */
int peft_config_parse(const char *json, size_t len, struct peft_config **ret, struct errmsg *e);
struct peft_config *peft_config_free(struct peft_config *c);
DEFINE_CLEANUP_FUNC(struct peft_config *, peft_config_free, NULL)

/* Whether PEFT would put a LoRA layer on module key (layer: its layer index, or -1).
 * 1 yes, 0 no, -errno when a regular expression fails (match limit). */
int peft_config_targets(const struct peft_config *c, const char *key, int64_t layer);
/* The rank and alpha PEFT gives module key; *ret_pattern is the matching pattern key or NULL
 * when the default applied. -errno when a regular expression fails. */
int peft_config_rank(const struct peft_config *c, const char *key, uint32_t *ret,
		     const char **ret_pattern);
int peft_config_alpha(const struct peft_config *c, const char *key, double *ret,
		      const char **ret_pattern);

/* The directory loader (lora_adapter_open() calls it for directories). */
int peft_adapter_open(const char *dir, const struct lora_open_opts *opts, struct lora_adapter **ret,
		      struct errmsg *warn, struct errmsg *e);
