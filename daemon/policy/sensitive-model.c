/* SPDX-License-Identifier: MIT */
/* Bootstrap (empty) model; tools/molly-train-sensitive overwrites this file. */
#include "sensitive.h"

static const int16_t bin_w[1u << SENSITIVE_BIN_BITS];
static const int8_t cat_w[(1u << SENSITIVE_CAT_BITS) * SENSITIVE_CATEGORY_COUNT_];

const struct sensitive_model sensitive_builtin_model = {
	.bin_w = bin_w, .bin_scale = 1, .bin_bias = -10, .platt_a = 1, .platt_b = 0,
	.cat_w = cat_w, .cat_scale = 1,
};
