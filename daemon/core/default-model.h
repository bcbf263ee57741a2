/* SPDX-License-Identifier: MIT */
/*
 * default-model.h: the model mollyd serves when its configuration names none.
 *
 * In order: $MOLLY_MODEL (when set and not empty); Molly's own model, molly-mini.gguf
 * (issue 20, docs/model.md), at ../share/molly/models/ from the running executable's folder,
 * which is where packages install it for /usr/sbin/mollyd and /usr/bin/molly and where the
 * build copies it for build/PRESET/bin/; then the configured data directory
 * (DATADIR/molly/models/). `molly config check` asks the same question mollyd does.
 */
#pragma once

#define DEFAULT_MODEL_FILE "molly-mini.gguf"

/* *ret: the path (malloc'd), or NULL when none is there. 0 or -ENOMEM. */
int default_model_find(char **ret);
