/* SPDX-License-Identifier: MIT */
/*
 * data.h: training samples from JSONL, and the batches made of them.
 *
 * One JSON object per line (blank lines are skipped), one of:
 *   {"prompt": "...", "completion": "..."}   loss on the completion (and the EOS after it)
 *   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
 *       rendered with the model's chat template (chat.h); loss on each assistant turn (its
 *       text and the template's end-of-turn marks); anything after the last assistant turn
 *       is dropped
 *   {"text": "..."}                          loss on every token (and EOS)
 * BOS is added when the vocabulary adds it. The part a sample trains on is found by
 * tokenizing the text up to each boundary and taking the tokens the whole text shares with
 * that prefix, so tokens that merge across a boundary are counted once, on the side they
 * start. Errors name the file, the line and the field: "data.jsonl:3: field 'completion':
 * expected a string".
 *
 * Samples longer than the sequence length are cut (counted in n_truncated), or with split_long
 * become windows of the sequence length that overlap by one token, so that every token of a
 * long text is trained on as a target once (counted in n_split; for pretraining on whole
 * documents). Batches: the
 * samples are shuffled once (seeded) and fill rows of at most len tokens in that order,
 * several samples to a row when packing (positions restart and attention stops at each
 * sample's start); each epoch visits the rows in its own seeded order, cut into batches of
 * n_seq rows (the last one smaller). A batch's rows are as long as its longest row.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "net.h"

struct model;

struct train_sample {
	int32_t *ids;   /* owned */
	uint8_t *label; /* owned: 1 when ids[i] is a token the model learns to predict */
	uint32_t n;
};

struct train_data {
	struct train_sample *samples; /* owned */
	size_t n_samples;
	size_t n_truncated, n_split;
	uint64_t n_tokens, n_labeled;
};

int train_data_load(const char *path, const struct model *m, uint32_t max_len,
		    bool split_long, struct train_data **ret, struct errmsg *e);
struct train_data *train_data_free(struct train_data *d);
DEFINE_CLEANUP_FUNC(struct train_data *, train_data_free, NULL)

/* An epoch's rows: row r holds samples order[row_start[r] .. row_start[r+1]). */
struct train_epoch {
	uint32_t *order;     /* owned, n_samples */
	size_t *row_start;   /* owned, n_rows + 1 */
	size_t n_rows;
};

int train_epoch_plan(const struct train_data *d, uint64_t seed, uint64_t epoch, uint32_t len,
		     bool pack, struct train_epoch *ret);
void train_epoch_done(struct train_epoch *ep);

/* Storage for one batch of up to n_seq rows of len tokens. */
struct train_batch_buf {
	int32_t *tokens, *targets, *pos, *seg; /* owned */
	struct train_batch b;
};

int train_batch_buf_init(struct train_batch_buf *bb, uint32_t n_seq, uint32_t len);
void train_batch_buf_done(struct train_batch_buf *bb);
/* Fills bb->b with rows [r0, r0 + n) of the epoch (n <= the buffer's n_seq); returns the
 * number of labeled targets in it. */
uint64_t train_batch_fill(struct train_batch_buf *bb, const struct train_data *d,
			  const struct train_epoch *ep, size_t r0, size_t n, uint32_t len);
