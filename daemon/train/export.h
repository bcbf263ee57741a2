/* SPDX-License-Identifier: MIT */
/*
 * export.h: a trained net written out for serving.
 *
 *   LoRA mode: Molly's adapter file (lora-file.h, F16), a PEFT directory (adapter_config.json
 *     + adapter_model.safetensors, F32) or a llama.cpp GGUF LoRA file (F32); alpha and rank as
 *     trained, so every server applies scale alpha/rank.
 *   Full mode: a GGUF model: the source file's metadata (general.file_type set to ALL_F32),
 *     every tensor in the source's order, trained ones as F32.
 * Every file is written atomically.
 */
#pragma once

#include "../basic/errmsg.h"
#include "net.h"

enum train_format {
	TRAIN_FORMAT_MOLLY,
	TRAIN_FORMAT_PEFT,
	TRAIN_FORMAT_GGUF,
};

int train_format_from_name(const char *name, enum train_format *ret);
int train_export(struct train_net *net, enum train_format f, const char *path, struct errmsg *e);
