/* SPDX-License-Identifier: MIT */
/*
 * checkpoint.h: the trainer's state in one file, written atomically (PATH.tmp, fsync,
 * rename), so a crash leaves the previous checkpoint or the new one, never half of one.
 *
 * Layout (little-endian):
 *   u8[8] "MOLLYTCK"  u32 version (1)  u32 n_params  u64 steps  u8[32] run_hash
 *   per parameter: u32 name length, name, u64 count, f32 w[count], f32 m[count], f32 v[count]
 *   u8[32] SHA-256 of everything before it
 * run_hash identifies what the run computes (model, data, every option that changes the
 * trajectory); a checkpoint resumes only the run that wrote it (-ESTALE otherwise). With
 * the values, the moments and the step count restored, and the data order and dropout masks
 * functions of (seed, step), a resumed run continues with the same bits.
 */
#pragma once

#include <stdint.h>

#include "../basic/errmsg.h"

struct train_net;
struct train_optim;

int train_checkpoint_save(const char *path, struct train_net *net, struct train_optim *opt,
			  const uint8_t run_hash[32], struct errmsg *e);
/* -EBADMSG (corrupt or not a checkpoint), -ESTALE (another run or other parameters). */
int train_checkpoint_load(const char *path, struct train_net *net, struct train_optim *opt,
			  const uint8_t run_hash[32], struct errmsg *e);
