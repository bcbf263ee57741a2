/* SPDX-License-Identifier: MIT */
/*
 * peft.c: PEFT LoRA directories: adapter_config.json (meaning as in peft.h) and
 * adapter_model.safetensors, whose tensors PEFT names
 *
 *   base_model.model.<module key>.lora_A.weight     [r, in_features]
 *   base_model.model.<module key>.lora_B.weight     [out_features, r]
 *
 * with module keys like model.layers.N.self_attn.q_proj and model.layers.N.mlp.down_proj.
 * Other tensors PEFT writes and Molly does not apply: lora_embedding_A/B (embeddings),
 * lora_magnitude_vector (DoRA), lora_B.bias (lora_bias), and the full weights of
 * modules_to_save (e.g. base_model.model.lm_head.weight).
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/model.h"
#include "../engine/quant.h"
#include "adapter-private.h"
#include "peft.h"
#include "safetensors.h"

/* Bounds on what a config may ask of the regex engine. */
#define REGEX_MATCH_LIMIT 1000000u
#define REGEX_DEPTH_LIMIT 10000u
#define MAX_LIST          4096 /* entries in target_modules, rank_pattern, ... */

static const char *const peft_names[LORA_TARGET_COUNT_] = {
	"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
};

/* ---- regular expressions ---- */

static int regex_compile(const char *pattern, size_t len, bool pattern_key, void **ret,
			 const char *what, struct errmsg *e)
{
	_cleanup_free_ char *full = NULL;
	PCRE2_SIZE err_off;
	pcre2_code *re;
	uint32_t options = PCRE2_UTF | PCRE2_UCP;
	int err;

	if (pattern_key) {
		/* PEFT's get_pattern_key: re.match(rf"(.*\.)?({key})$", module) */
		if (asprintf(&full, "(.*\\.)?(%.*s)$", (int) len, pattern) < 0)
			return -ENOMEM;
		options |= PCRE2_ANCHORED;
	} else {
		/* re.fullmatch(target_modules, module) */
		full = strndup(pattern, len);
		if (!full)
			return -ENOMEM;
		options |= PCRE2_ANCHORED | PCRE2_ENDANCHORED;
	}
	re = pcre2_compile((PCRE2_SPTR) full, PCRE2_ZERO_TERMINATED, options, &err, &err_off, NULL);
	if (!re) {
		PCRE2_UCHAR msg[160];

		(void) pcre2_get_error_message(err, msg, sizeof(msg));
		return errmsg_set(e, err == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EBADMSG,
				  "%s: '%.100s' is not a valid regular expression: %s", what,
				  pattern, (const char *) msg);
	}
	*ret = re;
	return 0;
}

/* 1 match, 0 no match, -errno when the engine gives up (match or depth limit). */
static int regex_match(void *re, const char *subject)
{
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	pcre2_match_context *mc = pcre2_match_context_create(NULL);
	int rc;

	if (!md || !mc) {
		pcre2_match_data_free(md);
		pcre2_match_context_free(mc);
		return -ENOMEM;
	}
	(void) pcre2_set_match_limit(mc, REGEX_MATCH_LIMIT);
	(void) pcre2_set_depth_limit(mc, REGEX_DEPTH_LIMIT);
	rc = pcre2_match(re, (PCRE2_SPTR) subject, PCRE2_ZERO_TERMINATED, 0, 0, md, mc);
	pcre2_match_data_free(md);
	pcre2_match_context_free(mc);
	if (rc >= 0)
		return 1;
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	if (rc == PCRE2_ERROR_NOMEMORY)
		return -ENOMEM;
	return -ELOOP; /* match/depth limit, bad UTF-8 subject */
}

/* ---- config ---- */

static void module_set_done(struct peft_module_set *s)
{
	for (size_t i = 0; i < s->n_names; i++)
		free(s->names[i]);
	free(s->names);
	free(s->regex);
	pcre2_code_free(s->re);
	*s = (struct peft_module_set){ 0 };
}

static void patterns_free(struct peft_pattern *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(p[i].key);
		pcre2_code_free(p[i].re);
	}
	free(p);
}

struct peft_config *peft_config_free(struct peft_config *c)
{
	if (!c)
		return NULL;
	free(c->peft_type);
	free(c->base_model);
	module_set_done(&c->target_modules);
	module_set_done(&c->exclude_modules);
	free(c->layers_to_transform);
	patterns_free(c->rank_pattern, c->n_rank_pattern);
	patterns_free(c->alpha_pattern, c->n_alpha_pattern);
	for (size_t i = 0; i < c->n_modules_to_save; i++)
		free(c->modules_to_save[i]);
	free(c->modules_to_save);
	free(c);
	return NULL;
}

static bool is_null(struct json_object *v)
{
	return !v || json_object_is_type(v, json_type_null);
}

/* A JSON string with no NUL inside, copied. */
static int dup_string(struct json_object *v, const char *key, char **ret, struct errmsg *e)
{
	const char *s;
	size_t len;

	if (!json_object_is_type(v, json_type_string))
		return errmsg_set(e, -EBADMSG, "'%s' is not a string", key);
	s = json_object_get_string(v);
	len = (size_t) json_object_get_string_len(v);
	if (strlen(s) != len)
		return errmsg_set(e, -EBADMSG, "'%s' contains a NUL character", key);
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

static int get_bool(struct json_object *root, const char *key, bool *ret, struct errmsg *e)
{
	struct json_object *v = NULL;

	if (!json_object_object_get_ex(root, key, &v) || is_null(v))
		return 0;
	if (!json_object_is_type(v, json_type_boolean))
		return errmsg_set(e, -EBADMSG, "'%s' is not true or false", key);
	*ret = json_object_get_boolean(v);
	return 0;
}

static int get_number(struct json_object *v, const char *key, double *ret, struct errmsg *e)
{
	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return errmsg_set(e, -EBADMSG, "%s is not a number", key);
	*ret = json_object_get_double(v);
	if (!isfinite(*ret))
		return errmsg_set(e, -EBADMSG, "%s is not finite", key);
	return 0;
}

static int get_rank(struct json_object *v, const char *key, uint32_t *ret, struct errmsg *e)
{
	int64_t r;

	if (!json_object_is_type(v, json_type_int))
		return errmsg_set(e, -EBADMSG, "%s is not an integer", key);
	r = json_object_get_int64(v);
	if (r < 1 || r > (1 << 20))
		return errmsg_set(e, -EBADMSG, "%s is %" PRId64 "; a LoRA rank must be in 1..%d",
				  key, r, 1 << 20);
	*ret = (uint32_t) r;
	return 0;
}

/* target_modules / exclude_modules / modules_to_save: a string (regex) or list of strings. */
static int get_module_set(struct json_object *root, const char *key, bool allow_all_linear,
			  struct peft_module_set *s, struct errmsg *e)
{
	struct json_object *v = NULL;
	size_t n;
	int r;

	if (!json_object_object_get_ex(root, key, &v) || is_null(v))
		return 0;
	if (json_object_is_type(v, json_type_string)) {
		r = dup_string(v, key, &s->regex, e);
		if (r < 0)
			return r;
		if (allow_all_linear && strcasecmp(s->regex, "all-linear") == 0) {
			s->kind = PEFT_MATCH_ALL_LINEAR;
			return 0;
		}
		s->kind = PEFT_MATCH_REGEX;
		return regex_compile(s->regex, strlen(s->regex), false, &s->re, key, e);
	}
	if (!json_object_is_type(v, json_type_array))
		return errmsg_set(e, -EBADMSG, "'%s' is neither a string nor a list", key);
	n = json_object_array_length(v);
	if (n > MAX_LIST)
		return errmsg_set(e, -EBADMSG, "'%s' has %zu entries (at most %d)", key, n,
				  MAX_LIST);
	s->kind = PEFT_MATCH_LIST;
	s->names = calloc(n ? n : 1, sizeof(*s->names));
	if (!s->names)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++, s->n_names++) {
		r = dup_string(json_object_array_get_idx(v, i), key, &s->names[i], e);
		if (r < 0)
			return r;
	}
	return 0;
}

static int get_patterns(struct json_object *root, const char *key, bool ranks,
			struct peft_pattern **ret, size_t *ret_n, struct errmsg *e)
{
	struct json_object *v = NULL;
	struct peft_pattern *p;
	size_t n;
	int r;

	if (!json_object_object_get_ex(root, key, &v) || is_null(v))
		return 0;
	if (!json_object_is_type(v, json_type_object))
		return errmsg_set(e, -EBADMSG, "'%s' is not an object", key);
	n = (size_t) json_object_object_length(v);
	if (n > MAX_LIST)
		return errmsg_set(e, -EBADMSG, "'%s' has %zu entries (at most %d)", key, n,
				  MAX_LIST);
	p = calloc(n ? n : 1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	*ret = p;
	/* json-c keeps object entries in file order, which PEFT's first-match rule needs. */
	json_object_object_foreach(v, k, val)
	{
		char what[160];
		struct peft_pattern *q = &p[(*ret_n)++];

		(void) snprintf(what, sizeof(what), "%s '%.100s'", key, k);
		if (ranks) {
			uint32_t rank = 0;

			r = get_rank(val, what, &rank, e);
			q->value = rank;
		} else {
			r = get_number(val, what, &q->value, e);
		}
		if (r < 0)
			return r;
		q->key = strdup(k);
		if (!q->key)
			return -ENOMEM;
		r = regex_compile(k, strlen(k), true, &q->re, what, e);
		if (r < 0)
			return r;
	}
	return 0;
}

static int get_layers(struct json_object *root, struct peft_config *c, struct errmsg *e)
{
	struct json_object *v = NULL;
	size_t n;

	if (!json_object_object_get_ex(root, "layers_to_transform", &v) || is_null(v))
		return 0;
	if (json_object_is_type(v, json_type_int)) {
		c->layers_to_transform = malloc(sizeof(int64_t));
		if (!c->layers_to_transform)
			return -ENOMEM;
		c->layers_to_transform[0] = json_object_get_int64(v);
		c->n_layers_to_transform = 1;
		c->has_layers_to_transform = true;
		return 0;
	}
	if (!json_object_is_type(v, json_type_array))
		return errmsg_set(e, -EBADMSG, "'layers_to_transform' is not an integer or a list");
	n = json_object_array_length(v);
	if (n > MAX_LIST)
		return errmsg_set(e, -EBADMSG, "'layers_to_transform' has %zu entries", n);
	c->layers_to_transform = calloc(n ? n : 1, sizeof(int64_t));
	if (!c->layers_to_transform)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *x = json_object_array_get_idx(v, i);

		if (!json_object_is_type(x, json_type_int))
			return errmsg_set(e, -EBADMSG,
					  "'layers_to_transform' entry %zu is not an integer", i);
		c->layers_to_transform[i] = json_object_get_int64(x);
	}
	c->n_layers_to_transform = n;
	c->has_layers_to_transform = n > 0; /* PEFT: an empty list means all layers */
	return 0;
}

/* Keys whose presence (non-null, non-false, non-empty) means a feature Molly lacks. */
static bool is_set(struct json_object *v)
{
	if (is_null(v))
		return false;
	if (json_object_is_type(v, json_type_boolean))
		return json_object_get_boolean(v);
	if (json_object_is_type(v, json_type_array))
		return json_object_array_length(v) > 0;
	if (json_object_is_type(v, json_type_object))
		return json_object_object_length(v) > 0;
	if (json_object_is_type(v, json_type_string))
		return json_object_get_string_len(v) > 0;
	return true;
}

static void json_putp(struct json_object **j)
{
	if (*j)
		(void) json_object_put(*j);
}

static void tokener_freep(struct json_tokener **t)
{
	if (*t)
		json_tokener_free(*t);
}

int peft_config_parse(const char *json, size_t len, struct peft_config **ret, struct errmsg *e)
{
	static const char *const unsupported[] = {
		"use_dora",   "layer_replication", "target_parameters", "alora_invocation_tokens",
		"use_qalora", "lora_bias",
	};
	_cleanup_(peft_config_freep) struct peft_config *c = NULL;
	_cleanup_(json_putp) struct json_object *root = NULL;
	_cleanup_(tokener_freep) struct json_tokener *tok = NULL;
	struct json_object *v = NULL;
	enum json_tokener_error jerr;
	int r;

	assert_return((json || len == 0) && ret, -EINVAL);
	if (len > PEFT_CONFIG_MAX_BYTES)
		return errmsg_set(e, -EFBIG, "adapter_config.json is %zu bytes (at most %u)", len,
				  PEFT_CONFIG_MAX_BYTES);
	tok = json_tokener_new();
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, json, (int) len);
	jerr = json_tokener_get_error(tok);
	if (!root || jerr != json_tokener_success)
		return errmsg_set(e, -EBADMSG,
				  "adapter_config.json is not valid JSON: %s (near byte %zu)",
				  jerr == json_tokener_continue ? "unexpected end"
								: json_tokener_error_desc(jerr),
				  json_tokener_get_parse_end(tok));
	for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
		if (!strchr(" \t\r\n", json[i]) || json[i] == 0)
			return errmsg_set(
				e, -EBADMSG,
				"adapter_config.json has data after the JSON object (byte %zu)", i);
	if (!json_object_is_type(root, json_type_object))
		return errmsg_set(e, -EBADMSG, "adapter_config.json is not a JSON object");

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->r = 8; /* PEFT's LoraConfig defaults */
	c->lora_alpha = 8;
	if (json_object_object_get_ex(root, "peft_type", &v) && !is_null(v) &&
	    (r = dup_string(v, "peft_type", &c->peft_type, e)) < 0)
		return r;
	if (json_object_object_get_ex(root, "base_model_name_or_path", &v) && !is_null(v) &&
	    json_object_is_type(v, json_type_string) &&
	    (r = dup_string(v, "base_model_name_or_path", &c->base_model, e)) < 0)
		return r;
	if (json_object_object_get_ex(root, "r", &v) && !is_null(v) &&
	    (r = get_rank(v, "'r'", &c->r, e)) < 0)
		return r;
	if (json_object_object_get_ex(root, "lora_alpha", &v) && !is_null(v) &&
	    (r = get_number(v, "'lora_alpha'", &c->lora_alpha, e)) < 0)
		return r;
	if ((r = get_module_set(root, "target_modules", true, &c->target_modules, e)) < 0 ||
	    (r = get_module_set(root, "exclude_modules", false, &c->exclude_modules, e)) < 0 ||
	    (r = get_layers(root, c, e)) < 0 ||
	    (r = get_bool(root, "use_rslora", &c->use_rslora, e)) < 0 ||
	    (r = get_bool(root, "use_dora", &c->use_dora, e)) < 0 ||
	    (r = get_bool(root, "fan_in_fan_out", &c->fan_in_fan_out, e)) < 0 ||
	    (r = get_patterns(root, "rank_pattern", true, &c->rank_pattern, &c->n_rank_pattern,
			      e)) < 0 ||
	    (r = get_patterns(root, "alpha_pattern", false, &c->alpha_pattern, &c->n_alpha_pattern,
			      e)) < 0)
		return r;
	if (json_object_object_get_ex(root, "modules_to_save", &v) && !is_null(v)) {
		struct peft_module_set s = { 0 };

		r = get_module_set(root, "modules_to_save", false, &s, e);
		if (r < 0) {
			module_set_done(&s);
			return r;
		}
		if (s.kind == PEFT_MATCH_REGEX) {
			module_set_done(&s);
			return errmsg_set(e, -EBADMSG, "'modules_to_save' is not a list");
		}
		c->modules_to_save = TAKE_PTR(s.names);
		c->n_modules_to_save = s.n_names;
		s.n_names = 0;
		module_set_done(&s);
	}
	for (size_t i = 0; i < ELEMENTSOF(unsupported); i++)
		if (json_object_object_get_ex(root, unsupported[i], &v) && is_set(v)) {
			c->unsupported_feature = unsupported[i];
			break;
		}
	if (json_object_object_get_ex(root, "trainable_token_indices", &v) && is_set(v))
		c->has_trainable_tokens = true;
	*ret = TAKE_PTR(c);
	return 0;
}

static int set_matches(const struct peft_module_set *s, const char *key)
{
	size_t klen = strlen(key);

	switch (s->kind) {
	case PEFT_MATCH_NONE:
		return 0;
	case PEFT_MATCH_ALL_LINEAR:
		return 1;
	case PEFT_MATCH_REGEX:
		return regex_match(s->re, key);
	case PEFT_MATCH_LIST:
		for (size_t i = 0; i < s->n_names; i++) {
			size_t n = strlen(s->names[i]);

			if (strcmp(key, s->names[i]) == 0 ||
			    (klen > n && key[klen - n - 1] == '.' &&
			     strcmp(key + klen - n, s->names[i]) == 0))
				return 1;
		}
		return 0;
	}
	return 0;
}

int peft_config_targets(const struct peft_config *c, const char *key, int64_t layer)
{
	int r;

	assert_return(c && key, -EINVAL);
	r = set_matches(&c->exclude_modules, key);
	if (r != 0)
		return r < 0 ? r : 0;
	/* Not given (null): PEFT would fill in the architecture's defaults when the adapter was
	 * made, so a file without them is taken as targeting what it has weights for. */
	if (c->target_modules.kind == PEFT_MATCH_NONE)
		return 1;
	r = set_matches(&c->target_modules, key);
	if (r <= 0)
		return r;
	/* PEFT applies layers_to_transform to list-form target_modules only, and an exact name
	 * in the list is taken as is. */
	if (c->target_modules.kind == PEFT_MATCH_LIST && c->has_layers_to_transform) {
		for (size_t i = 0; i < c->target_modules.n_names; i++)
			if (strcmp(key, c->target_modules.names[i]) == 0)
				return 1;
		for (size_t i = 0; i < c->n_layers_to_transform; i++)
			if (c->layers_to_transform[i] == layer)
				return 1;
		return 0;
	}
	return 1;
}

static int pattern_lookup(const struct peft_pattern *p, size_t n, const char *key,
			  const struct peft_pattern **ret)
{
	*ret = NULL;
	for (size_t i = 0; i < n; i++) {
		int r = regex_match(p[i].re, key);

		if (r < 0)
			return r;
		if (r > 0) {
			*ret = &p[i];
			return 0;
		}
	}
	return 0;
}

int peft_config_rank(const struct peft_config *c, const char *key, uint32_t *ret,
		     const char **ret_pattern)
{
	const struct peft_pattern *p;
	int r;

	assert_return(c && key && ret, -EINVAL);
	r = pattern_lookup(c->rank_pattern, c->n_rank_pattern, key, &p);
	if (r < 0)
		return r;
	*ret = p ? (uint32_t) p->value : c->r;
	if (ret_pattern)
		*ret_pattern = p ? p->key : NULL;
	return 0;
}

int peft_config_alpha(const struct peft_config *c, const char *key, double *ret,
		      const char **ret_pattern)
{
	const struct peft_pattern *p;
	int r;

	assert_return(c && key && ret, -EINVAL);
	r = pattern_lookup(c->alpha_pattern, c->n_alpha_pattern, key, &p);
	if (r < 0)
		return r;
	*ret = p ? p->value : c->lora_alpha;
	if (ret_pattern)
		*ret_pattern = p ? p->key : NULL;
	return 0;
}

/* ---- the directory ---- */

enum tensor_kind {
	KIND_A,
	KIND_B,
	KIND_OTHER, /* embeddings, DoRA, biases, modules_to_save weights, anything else */
};

struct module {
	char *key; /* owned: the module key */
	uint32_t layer;
	enum lora_target target;
	const struct safetensors_tensor *a, *b;
};

/* Splits a tensor name into its module key and kind. *key is malloc'd. */
static int classify(const char *name, char **key, enum tensor_kind *kind, const char **what)
{
	static const struct {
		const char *suffix;
		enum tensor_kind kind;
		const char *what;
	} suffixes[] = {
		{ ".lora_A.weight", KIND_A, NULL },
		{ ".lora_B.weight", KIND_B, NULL },
		{ ".lora_embedding_A", KIND_OTHER, "a LoRA on an embedding" },
		{ ".lora_embedding_B", KIND_OTHER, "a LoRA on an embedding" },
		{ ".lora_magnitude_vector", KIND_OTHER, "a DoRA magnitude vector" },
		{ ".lora_magnitude_vector.weight", KIND_OTHER, "a DoRA magnitude vector" },
		{ ".lora_B.bias", KIND_OTHER, "a LoRA bias (lora_bias)" },
		{ ".lora_A.bias", KIND_OTHER, "a LoRA bias" },
	};
	const char *s = name;
	size_t n;

	if (strncmp(s, "base_model.model.", 17) == 0)
		s += 17;
	n = strlen(s);
	for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
		size_t k = strlen(suffixes[i].suffix);

		if (n > k && strcmp(s + n - k, suffixes[i].suffix) == 0) {
			*key = strndup(s, n - k);
			*kind = suffixes[i].kind;
			*what = suffixes[i].what;
			return *key ? 0 : -ENOMEM;
		}
	}
	/* lora_A.<adapter name>.weight, as some tools save without PEFT's renaming. */
	for (int b = 0; b < 2; b++) {
		const char *m = strstr(s, b ? ".lora_B." : ".lora_A.");

		if (m && strchr(m + 8, '.') && strcmp(strchr(m + 8, '.'), ".weight") == 0) {
			*key = strndup(s, (size_t) (m - s));
			*kind = b ? KIND_B : KIND_A;
			*what = NULL;
			return *key ? 0 : -ENOMEM;
		}
	}
	*key = strdup(s);
	*kind = KIND_OTHER;
	*what = "not a LoRA weight (a whole module's weight, as modules_to_save stores)";
	return *key ? 0 : -ENOMEM;
}

/* "model.layers.12.self_attn.q_proj" → 12, q. -EINVAL when not one of ours. */
static int parse_module(const char *key, uint32_t *layer, enum lora_target *t)
{
	const char *last = strrchr(key, '.'), *p;
	unsigned long long l = 0;
	int found = -1;

	if (!last)
		return -EINVAL;
	for (int k = 0; k < LORA_TARGET_COUNT_; k++)
		if (strcmp(last + 1, peft_names[k]) == 0)
			found = k;
	if (found < 0)
		return -EINVAL;
	/* The layer index: the number after the last "layers." before the projection. */
	p = NULL;
	for (const char *s = key; (s = strstr(s, "layers.")) && s < last; s++)
		if (s == key || s[-1] == '.')
			p = s + 7;
	if (!p || *p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		l = l * 10 + (unsigned long long) (*p - '0');
		if (l > UINT32_MAX)
			return -EINVAL;
	}
	if (*p != '.')
		return -EINVAL;
	/* Between the layer and the projection: self_attn for q/k/v/o, mlp for the FFN. */
	if (strncmp(p, found <= LORA_TARGET_O ? ".self_attn." : ".mlp.",
		    found <= LORA_TARGET_O ? 11 : 5) != 0 ||
	    p + (found <= LORA_TARGET_O ? 10 : 4) != last)
		return -EINVAL;
	*layer = (uint32_t) l;
	*t = (enum lora_target) found;
	return 0;
}

static int read_small_file(const char *path, size_t max, char **ret, size_t *ret_len,
			   struct errmsg *e)
{
	_cleanup_close_ int fd = -EBADF;
	_cleanup_free_ char *buf = NULL;
	struct stat st;
	size_t n = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t) st.st_size > max)
		return errmsg_set(e, -EFBIG, "%s is %lld bytes (at most %zu)", path,
				  (long long) st.st_size, max);
	buf = malloc((size_t) st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	while (n < (size_t) st.st_size) {
		ssize_t k = read(fd, buf + n, (size_t) st.st_size - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		n += (size_t) k;
	}
	buf[n] = 0;
	*ret = TAKE_PTR(buf);
	*ret_len = n;
	return 0;
}

static uint32_t st_to_ggml(enum safetensors_dtype t)
{
	switch (t) {
	case SAFETENSORS_F32:
		return GGML_TYPE_F32;
	case SAFETENSORS_F16:
		return GGML_TYPE_F16;
	case SAFETENSORS_BF16:
		return GGML_TYPE_BF16;
	default:
		return UINT32_MAX;
	}
}

/* Checks a module's pair and fills src. */
static int check_module(const struct module *m, const struct peft_config *c,
			const struct model *base, struct lora_src_mat *src, struct errmsg *e)
{
	const struct safetensors_tensor *a = m->a, *b = m->b;
	uint32_t n_in = 0, n_out = 0, want_rank = 0;
	const char *rank_pat, *alpha_pat;
	double alpha;
	int r;

	if (!a || !b)
		return errmsg_set(e, -EBADMSG, "tensor '%s' has no matching %s (module '%s')",
				  (a ? a : b)->name, a ? "lora_B" : "lora_A", m->key);
	for (int i = 0; i < 2; i++) {
		const struct safetensors_tensor *t = i ? b : a;

		if (st_to_ggml(t->dtype) == UINT32_MAX)
			return errmsg_set(
				e, -EOPNOTSUPP,
				"tensor '%s': dtype %s is not supported (F32, F16 or BF16)",
				t->name, safetensors_dtype_name(t->dtype));
		if (t->n_dims != 2)
			return errmsg_set(e, -EBADMSG,
					  "tensor '%s': expected 2 dimensions, has %" PRIu32,
					  t->name, t->n_dims);
	}
	if (a->shape[0] == 0 || b->shape[1] == 0)
		return errmsg_set(e, -EBADMSG, "tensor '%s': rank 0",
				  a->shape[0] == 0 ? a->name : b->name);
	if (a->shape[0] != b->shape[1])
		return errmsg_set(e, -EBADMSG,
				  "rank mismatch: '%s' [%" PRIu64 ", %" PRIu64 "] has rank %" PRIu64
				  ", '%s' [%" PRIu64 ", %" PRIu64 "] has rank %" PRIu64,
				  a->name, a->shape[0], a->shape[1], a->shape[0], b->name,
				  b->shape[0], b->shape[1], b->shape[1]);
	r = peft_config_rank(c, m->key, &want_rank, &rank_pat);
	if (r < 0)
		return errmsg_set(e, r, "rank_pattern: matching '%s' failed (%s)", m->key,
				  strerror(-r));
	if (a->shape[0] != want_rank) {
		if (rank_pat)
			return errmsg_set(
				e, -EBADMSG,
				"rank mismatch: tensor '%s' has rank %" PRIu64
				", but adapter_config.json's rank_pattern '%s' gives %" PRIu32,
				a->name, a->shape[0], rank_pat, want_rank);
		return errmsg_set(e, -EBADMSG,
				  "rank mismatch: tensor '%s' has rank %" PRIu64
				  ", but adapter_config.json has r = %" PRIu32,
				  a->name, a->shape[0], want_rank);
	}
	r = lora_base_dims(base, m->layer, m->target, &n_in, &n_out, e);
	if (r < 0)
		return errmsg_prefix(e, r, "tensor '%s'", a->name);
	if (a->shape[1] != n_in || b->shape[0] != n_out) {
		_cleanup_free_ char *desc = lora_base_describe(base);

		return errmsg_set(
			e, -EXDEV,
			"module '%s': lora_A [%" PRIu64 ", %" PRIu64 "] and lora_B [%" PRIu64
			", %" PRIu64 "] do not fit base '%s', where %s is %" PRIu32 " -> %" PRIu32
			" (expected lora_A [rank, %" PRIu32 "], lora_B [%" PRIu32
			", rank]; made for another base?)",
			m->key, a->shape[0], a->shape[1], b->shape[0], b->shape[1],
			desc ? desc : "?", peft_names[m->target], n_in, n_out, n_in, n_out);
	}
	r = peft_config_alpha(c, m->key, &alpha, &alpha_pat);
	if (r < 0)
		return errmsg_set(e, r, "alpha_pattern: matching '%s' failed (%s)", m->key,
				  strerror(-r));
	*src = (struct lora_src_mat){
		.mat = { .layer = m->layer,
			 .target = m->target,
			 .rank = want_rank,
			 .n_in = n_in,
			 .n_out = n_out },
		.a = a->data,
		.b = b->data,
		.a_type = st_to_ggml(a->dtype),
		.b_type = st_to_ggml(b->dtype),
		.a_name = a->name,
		.b_name = b->name,
	};
	src->mat.scale = (float) (c->use_rslora ? alpha / sqrt((double) want_rank)
						: alpha / (double) want_rank);
	if (!isfinite(src->mat.scale))
		return errmsg_set(e, -EBADMSG, "module '%s': scale is not finite", m->key);
	return 0;
}

static int check_config(const struct peft_config *c, const struct lora_open_opts *opts,
			struct errmsg *warn, struct errmsg *e)
{
	if (c->peft_type && strcmp(c->peft_type, "LORA") != 0)
		return errmsg_set(
			e, -EOPNOTSUPP,
			"adapter_config.json: peft_type '%.64s' is not supported (only LORA)",
			c->peft_type);
	if (c->use_dora)
		return errmsg_set(
			e, -EOPNOTSUPP,
			"adapter_config.json: use_dora: DoRA adapters are not supported "
			"(their magnitude vectors change what every targeted layer computes)");
	if (c->unsupported_feature)
		return errmsg_set(e, -EOPNOTSUPP, "adapter_config.json: '%s' is not supported",
				  c->unsupported_feature);
	if (c->n_modules_to_save > 0) {
		if (!opts->skip_unsupported)
			return errmsg_set(e, -EOPNOTSUPP,
					  "adapter_config.json: modules_to_save ('%.64s'%s) is not "
					  "supported: the adapter replaces whole modules",
					  c->modules_to_save[0],
					  c->n_modules_to_save > 1 ? ", ..." : "");
		lora_warn(warn, "ignored modules_to_save ('%.64s'%s): their weights are skipped",
			  c->modules_to_save[0], c->n_modules_to_save > 1 ? ", ..." : "");
	}
	if (c->has_trainable_tokens) {
		if (!opts->skip_unsupported)
			return errmsg_set(
				e, -EOPNOTSUPP,
				"adapter_config.json: trainable_token_indices is not supported");
		lora_warn(warn, "ignored trainable_token_indices");
	}
	if (c->fan_in_fan_out)
		lora_warn(warn, "fan_in_fan_out is ignored: lora_A/lora_B are stored as Linear "
				"weights either way (PEFT resets it for Linear layers)");
	return 0;
}

static void modules_free(struct module *m, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(m[i].key);
	free(m);
}

static char *dir_name(const char *dir)
{
	size_t n = strlen(dir);
	const char *s;

	while (n > 1 && dir[n - 1] == '/')
		n--;
	s = dir + n;
	while (s > dir && s[-1] != '/')
		s--;
	return strndup(s, (size_t) (dir + n - s));
}

int peft_adapter_open(const char *dir, const struct lora_open_opts *opts, struct lora_adapter **ret,
		      struct errmsg *warn, struct errmsg *e)
{
	_cleanup_(peft_config_freep) struct peft_config *c = NULL;
	_cleanup_(safetensors_freep) struct safetensors *st = NULL;
	_cleanup_free_ char *cfg_path = NULL, *st_path = NULL, *json = NULL, *name = NULL;
	_cleanup_free_ struct lora_src_mat *src = NULL;
	struct module *mods = NULL;
	size_t json_len = 0, n_mods = 0, n_t;
	int r;

	if (!opts->base)
		return errmsg_set(e, -EINVAL,
				  "a PEFT adapter needs its base model to be loaded (it "
				  "does not record the base's shapes)");
	if (asprintf(&cfg_path, "%s/adapter_config.json", dir) < 0) {
		cfg_path = NULL;
		return -ENOMEM;
	}
	if (asprintf(&st_path, "%s/adapter_model.safetensors", dir) < 0) {
		st_path = NULL;
		return -ENOMEM;
	}
	r = read_small_file(cfg_path, PEFT_CONFIG_MAX_BYTES, &json, &json_len, e);
	if (r == -ENOENT)
		return errmsg_set(e, r, "no adapter_config.json: not a PEFT adapter directory");
	if (r < 0)
		return r == -EFBIG ? r : errmsg_set(e, r, "adapter_config.json: %s", strerror(-r));
	r = peft_config_parse(json, json_len, &c, e);
	if (r < 0)
		return r;
	r = check_config(c, opts, warn, e);
	if (r < 0)
		return r;
	r = safetensors_open(st_path, &st, e);
	if (r == -ENOENT) {
		_cleanup_free_ char *bin = NULL;

		if (asprintf(&bin, "%s/adapter_model.bin", dir) >= 0 && access(bin, F_OK) == 0)
			return errmsg_set(
				e, -EOPNOTSUPP,
				"only adapter_model.safetensors is read; adapter_model.bin "
				"(a pickle) is not: convert it with safetensors first");
		return errmsg_set(e, r, "no adapter_model.safetensors");
	}
	if (r < 0)
		return errmsg_prefix(e, r, "adapter_model.safetensors");

	n_t = safetensors_n_tensors(st);
	mods = calloc(n_t ? n_t : 1, sizeof(*mods));
	if (!mods)
		return -ENOMEM;
	for (size_t i = 0; i < n_t; i++) {
		const struct safetensors_tensor *t = safetensors_tensor_at(st, i);
		_cleanup_free_ char *key = NULL;
		enum tensor_kind kind;
		const char *what;
		uint32_t layer;
		enum lora_target target;
		struct module *m = NULL;

		r = classify(t->name, &key, &kind, &what);
		if (r < 0)
			goto out;
		if (kind == KIND_OTHER) {
			if (!opts->skip_unsupported) {
				r = errmsg_set(e, -EOPNOTSUPP,
					       "tensor '%s' (module '%s'): %s: not supported",
					       t->name, key, what);
				goto out;
			}
			lora_warn(warn, "skipped tensor '%s': %s", t->name, what);
			continue;
		}
		if (parse_module(key, &layer, &target) < 0) {
			if (!opts->skip_unsupported) {
				r = errmsg_set(
					e, -EOPNOTSUPP,
					"tensor '%s': module '%s' is not a supported LoRA target "
					"(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
					"down_proj of model.layers.N)",
					t->name, key);
				goto out;
			}
			lora_warn(warn,
				  "skipped tensor '%s': module '%s' is not a supported target",
				  t->name, key);
			continue;
		}
		r = peft_config_targets(c, key, layer);
		if (r < 0) {
			r = errmsg_set(e, r, "target_modules: matching '%s' failed (%s)", key,
				       strerror(-r));
			goto out;
		}
		if (r == 0) {
			/* PEFT itself would not load these weights (no LoRA layer there). */
			if (!opts->skip_unsupported) {
				r = errmsg_set(e, -EBADMSG,
					       "tensor '%s': module '%s' is not targeted by "
					       "adapter_config.json (target_modules%s)",
					       t->name, key,
					       c->has_layers_to_transform ? ", layers_to_transform"
									  : "");
				goto out;
			}
			lora_warn(warn, "skipped tensor '%s': module not in target_modules",
				  t->name);
			continue;
		}
		for (size_t k = 0; k < n_mods; k++)
			if (strcmp(mods[k].key, key) == 0)
				m = &mods[k];
		if (m && (kind == KIND_A ? m->a : m->b)) {
			r = errmsg_set(e, -EBADMSG,
				       "tensors '%s' and '%s' are both lora_%s of '%s'",
				       (kind == KIND_A ? m->a : m->b)->name, t->name,
				       kind == KIND_A ? "A" : "B", key);
			goto out;
		}
		if (!m) {
			for (size_t k = 0; k < n_mods; k++)
				if (mods[k].layer == layer && mods[k].target == target) {
					r = errmsg_set(
						e, -EBADMSG,
						"modules '%s' and '%s' both adapt layer %" PRIu32
						" %s",
						mods[k].key, key, layer, peft_names[target]);
					goto out;
				}
			m = &mods[n_mods++];
			*m = (struct module){ .key = TAKE_PTR(key),
					      .layer = layer,
					      .target = target };
		}
		if (kind == KIND_A)
			m->a = t;
		else
			m->b = t;
	}
	src = calloc(n_mods ? n_mods : 1, sizeof(*src));
	if (!src) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t k = 0; k < n_mods; k++) {
		r = check_module(&mods[k], c, opts->base, &src[k], e);
		if (r < 0)
			goto out;
	}
	name = dir_name(dir);
	if (!name) {
		r = -ENOMEM;
		goto out;
	}
	r = lora_adapter_from_sources(src, n_mods, opts, name, LORA_FORMAT_PEFT, ret, e);
out:
	modules_free(mods, n_mods);
	return r;
}
