/* SPDX-License-Identifier: MIT */
/*
 * data.c: JSONL samples and batches (see data.h).
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/chat.h"
#include "../engine/model.h"
#include "../engine/vocab.h"
#include "data.h"

static int tokenize(const struct vocab *v, const char *text, size_t len, bool bos, int32_t **ret,
		    uint32_t *ret_n)
{
	int64_t n = vocab_tokenize(v, text, len, bos, true, NULL, 0);
	int32_t *ids;

	if (n < 0)
		return (int) n;
	ids = malloc((size_t) (n + 1) * sizeof(int32_t));
	if (!ids)
		return -ENOMEM;
	n = vocab_tokenize(v, text, len, bos, true, ids, (size_t) n + 1);
	if (n < 0) {
		free(ids);
		return (int) n;
	}
	*ret = ids;
	*ret_n = (uint32_t) n;
	return 0;
}

/* Tokens of the whole text that the tokenization of its first prefix_len bytes shares. */
static int prefix_tokens(const struct vocab *v, const char *text, size_t prefix_len,
			 const int32_t *all, uint32_t n_all, uint32_t *ret)
{
	_cleanup_free_ int32_t *p = NULL;
	uint32_t np = 0, k = 0;
	int r = tokenize(v, text, prefix_len, vocab_add_bos(v), &p, &np);

	if (r < 0)
		return r;
	while (k < np && k < n_all && p[k] == all[k])
		k++;
	*ret = k;
	return 0;
}

struct sample_build {
	char *text;          /* owned: the whole text */
	size_t bounds[256];  /* byte offsets: [on, off) pairs of labeled spans */
	size_t n_bounds;
	bool eos;            /* append a labeled EOS */
};

static int make_sample(const struct model *m, struct sample_build *sb, struct train_sample *s)
{
	const struct vocab *v = m->vocab;
	int32_t *ids = NULL;
	uint32_t n = 0;
	int r = tokenize(v, sb->text, strlen(sb->text), vocab_add_bos(v), &ids, &n);

	if (r < 0)
		return r;
	s->label = calloc(n + 1, 1);
	if (!s->label) {
		free(ids);
		return -ENOMEM;
	}
	s->ids = ids;
	s->n = n;
	for (size_t i = 0; i + 1 < sb->n_bounds; i += 2) {
		uint32_t a, b;

		if ((r = prefix_tokens(v, sb->text, sb->bounds[i], ids, n, &a)) < 0)
			return r;
		if (sb->bounds[i + 1] >= strlen(sb->text))
			b = n;
		else if ((r = prefix_tokens(v, sb->text, sb->bounds[i + 1], ids, n, &b)) < 0)
			return r;
		for (uint32_t k = a; k < b; k++)
			s->label[k] = 1;
	}
	if (sb->eos && vocab_eos(v) >= 0) {
		s->ids[s->n] = vocab_eos(v);
		s->label[s->n] = 1;
		s->n++;
	}
	return 0;
}

static int push_sample(struct train_data *d, size_t *cap, struct train_sample *s)
{
	if (d->n_samples == *cap) {
		size_t nc = *cap ? 2 * *cap : 64;
		struct train_sample *ns = realloc(d->samples, nc * sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		d->samples = ns;
		*cap = nc;
	}
	d->samples[d->n_samples++] = *s;
	d->n_tokens += s->n;
	for (uint32_t i = 1; i < s->n; i++)
		d->n_labeled += s->label[i];
	*s = (struct train_sample){ 0 };
	return 0;
}

/* A sample longer than max_len becomes windows of max_len tokens, each starting at the
 * previous one's last token: every token after the first is a target in exactly one window,
 * with at least max_len - 1 tokens of context before the window's end. */
static int push_windows(struct train_data *d, size_t *cap, struct train_sample *s,
			uint32_t max_len)
{
	for (uint32_t start = 0;; start += max_len - 1) {
		uint32_t n = s->n - start < max_len ? s->n - start : max_len;
		struct train_sample w = { .n = n };
		int r;

		w.ids = malloc(n * sizeof(*w.ids));
		w.label = malloc(n);
		if (!w.ids || !w.label) {
			free(w.ids);
			free(w.label);
			return -ENOMEM;
		}
		memcpy(w.ids, s->ids + start, n * sizeof(*w.ids));
		memcpy(w.label, s->label + start, n);
		if ((r = push_sample(d, cap, &w)) < 0) {
			free(w.ids);
			free(w.label);
			return r;
		}
		if (start + n >= s->n)
			break;
	}
	free(s->ids);
	free(s->label);
	*s = (struct train_sample){ 0 };
	return 0;
}

static int field_string(struct json_object *o, const char *field, const char **ret,
			const char *path, size_t line, struct errmsg *e)
{
	struct json_object *f;

	if (!json_object_object_get_ex(o, field, &f))
		return errmsg_set(e, -EINVAL, "%s:%zu: field '%s' is missing", path, line, field);
	if (!json_object_is_type(f, json_type_string))
		return errmsg_set(e, -EINVAL, "%s:%zu: field '%s': expected a string", path, line,
				  field);
	*ret = json_object_get_string(f);
	return 0;
}

static int build_messages(const struct model *m, enum chat_family fam, struct json_object *arr,
			  struct sample_build *sb, const char *path, size_t line,
			  struct errmsg *e)
{
	size_t n = json_object_array_length(arr), last = SIZE_MAX;
	_cleanup_free_ struct chat_message *msgs = calloc(n ? n : 1, sizeof(*msgs));
	struct errmsg ce = { 0 };
	int r;

	if (!msgs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *mo = json_object_array_get_idx(arr, i), *f;
		char field[64];

		snprintf(field, sizeof(field), "messages[%zu]", i);
		if (!json_object_is_type(mo, json_type_object))
			return errmsg_set(e, -EINVAL, "%s:%zu: field '%s': expected an object",
					  path, line, field);
		for (int k = 0; k < 2; k++) {
			const char *key = k ? "content" : "role";

			if (!json_object_object_get_ex(mo, key, &f) ||
			    !json_object_is_type(f, json_type_string))
				return errmsg_set(e, -EINVAL,
						  "%s:%zu: field '%s.%s': expected a string", path,
						  line, field, key);
			if (k)
				msgs[i].content = json_object_get_string(f);
			else
				msgs[i].role = json_object_get_string(f);
		}
		if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") &&
		    strcmp(msgs[i].role, "assistant"))
			return errmsg_set(e, -EINVAL,
					  "%s:%zu: field '%s.role': '%s' is not system, user or "
					  "assistant",
					  path, line, field, msgs[i].role);
		if (!strcmp(msgs[i].role, "assistant"))
			last = i;
	}
	if (last == SIZE_MAX)
		return errmsg_set(e, -EINVAL, "%s:%zu: field 'messages': no assistant message to "
				  "train on", path, line);
	r = chat_render(fam, msgs, last + 1, false, &sb->text, &ce);
	if (r < 0)
		return errmsg_set(e, r, "%s:%zu: field 'messages': %s", path, line, ce.text);
	for (size_t i = 0; i <= last; i++) {
		_cleanup_free_ char *pre = NULL, *full = NULL;

		if (strcmp(msgs[i].role, "assistant"))
			continue;
		if (sb->n_bounds + 2 > sizeof(sb->bounds) / sizeof(sb->bounds[0]))
			return errmsg_set(e, -E2BIG, "%s:%zu: field 'messages': too many turns",
					  path, line);
		if ((r = chat_render(fam, msgs, i, true, &pre, &ce)) < 0 ||
		    (r = chat_render(fam, msgs, i + 1, false, &full, &ce)) < 0)
			return errmsg_set(e, r, "%s:%zu: field 'messages': %s", path, line,
					  ce.text);
		/* The template must render a conversation as a prefix of its continuation. */
		if (strncmp(sb->text, pre, strlen(pre)) || strncmp(sb->text, full, strlen(full)))
			return errmsg_set(e, -EINVAL,
					  "%s:%zu: field 'messages': the chat template does not "
					  "render turns as prefixes of the conversation",
					  path, line);
		sb->bounds[sb->n_bounds++] = strlen(pre);
		sb->bounds[sb->n_bounds++] = strlen(full);
	}
	return 0;
}

static int parse_line(const struct model *m, enum chat_family fam, const char *text, size_t len,
		      struct sample_build *sb, const char *path, size_t line, struct errmsg *e)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o, *f;
	enum json_tokener_error err;
	const char *a = NULL, *b = NULL;
	int r = 0;

	if (!tok)
		return -ENOMEM;
	o = json_tokener_parse_ex(tok, text, (int) len);
	err = json_tokener_get_error(tok);
	if (!o || err != json_tokener_success || tok->char_offset != (int) len) {
		r = errmsg_set(e, -EINVAL, "%s:%zu: not a JSON object: %s", path, line,
			       o ? "text after the object" : json_tokener_error_desc(err));
		goto out;
	}
	if (!json_object_is_type(o, json_type_object)) {
		r = errmsg_set(e, -EINVAL, "%s:%zu: not a JSON object", path, line);
		goto out;
	}
	if (json_object_object_get_ex(o, "messages", &f)) {
		if (!json_object_is_type(f, json_type_array)) {
			r = errmsg_set(e, -EINVAL, "%s:%zu: field 'messages': expected an array",
				       path, line);
			goto out;
		}
		r = build_messages(m, fam, f, sb, path, line, e);
	} else if (json_object_object_get_ex(o, "text", &f)) {
		if ((r = field_string(o, "text", &a, path, line, e)) < 0)
			goto out;
		sb->text = strdup(a);
		sb->bounds[0] = 0;
		sb->bounds[1] = strlen(a);
		sb->n_bounds = 2;
		sb->eos = true;
	} else if (json_object_object_get_ex(o, "prompt", &f) ||
		   json_object_object_get_ex(o, "completion", &f)) {
		if ((r = field_string(o, "prompt", &a, path, line, e)) < 0 ||
		    (r = field_string(o, "completion", &b, path, line, e)) < 0)
			goto out;
		if (asprintf(&sb->text, "%s%s", a, b) < 0) {
			sb->text = NULL;
			r = -ENOMEM;
			goto out;
		}
		sb->bounds[0] = strlen(a);
		sb->bounds[1] = strlen(sb->text);
		sb->n_bounds = 2;
		sb->eos = true;
	} else {
		r = errmsg_set(e, -EINVAL,
			       "%s:%zu: no field 'prompt'/'completion', 'messages' or 'text'", path,
			       line);
	}
	if (r >= 0 && !sb->text)
		r = -ENOMEM;
out:
	json_object_put(o);
	json_tokener_free(tok);
	return r;
}

int train_data_load(const char *path, const struct model *m, uint32_t max_len,
		    bool split_long, struct train_data **ret, struct errmsg *e)
{
	_cleanup_(train_data_freep) struct train_data *d = NULL;
	_cleanup_free_ char *line = NULL;
	size_t cap_line = 0, cap = 0, lineno = 0;
	enum chat_family fam = CHAT_FAMILY_CHATML;
	bool have_fam = false;
	FILE *f;
	ssize_t len;
	int r = 0;

	assert_return(path && m && ret && max_len >= 2, -EINVAL);
	f = fopen(path, "re");
	if (!f)
		return errmsg_set(e, -errno, "%s: %m", path);
	d = calloc(1, sizeof(*d));
	if (!d) {
		fclose(f);
		return -ENOMEM;
	}
	while ((len = getline(&line, &cap_line, f)) >= 0) {
		struct sample_build sb = { 0 };
		struct train_sample s = { 0 };
		size_t k = 0;

		lineno++;
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		while ((ssize_t) k < len && (line[k] == ' ' || line[k] == '\t'))
			k++;
		if ((ssize_t) k == len)
			continue;
		if (strstr(line, "\"messages\"") && !have_fam) {
			struct errmsg ce = { 0 };

			r = chat_family_choose(NULL, m->chat_template, &fam, &ce);
			if (r < 0) {
				r = errmsg_set(e, r, "%s:%zu: field 'messages': %s", path, lineno,
					       ce.text);
				break;
			}
			have_fam = true;
		}
		r = parse_line(m, fam, line, (size_t) len, &sb, path, lineno, e);
		if (r >= 0)
			r = make_sample(m, &sb, &s);
		free(sb.text);
		if (r < 0) {
			free(s.ids);
			free(s.label);
			if (!e || !e->text[0])
				errmsg_set(e, r, "%s:%zu: cannot tokenize", path, lineno);
			break;
		}
		if (s.n > max_len && split_long) {
			d->n_split++;
			r = push_windows(d, &cap, &s, max_len);
		} else {
			if (s.n > max_len) {
				d->n_truncated++;
				s.n = max_len;
			}
			r = push_sample(d, &cap, &s);
		}
		if (r < 0) {
			free(s.ids);
			free(s.label);
			break;
		}
	}
	fclose(f);
	if (r < 0)
		return r;
	if (d->n_samples == 0)
		return errmsg_set(e, -EINVAL, "%s: no samples", path);
	if (d->n_labeled == 0)
		return errmsg_set(e, -EINVAL, "%s: no tokens to train on", path);
	*ret = TAKE_PTR(d);
	return 0;
}

struct train_data *train_data_free(struct train_data *d)
{
	if (!d)
		return NULL;
	for (size_t i = 0; i < d->n_samples; i++) {
		free(d->samples[i].ids);
		free(d->samples[i].label);
	}
	free(d->samples);
	free(d);
	return NULL;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void shuffle(uint32_t *a, size_t n, uint64_t s)
{
	for (size_t i = n; i > 1; i--) { /* Fisher-Yates */
		size_t j = (size_t) (splitmix64(&s) % i);
		uint32_t t = a[i - 1];

		a[i - 1] = a[j];
		a[j] = t;
	}
}

int train_epoch_plan(const struct train_data *d, uint64_t seed, uint64_t epoch, uint32_t len,
		     bool pack, struct train_epoch *ret)
{
	size_t n = d->n_samples, rows = 0;
	uint32_t used = 0, *order = malloc(n * sizeof(uint32_t)), *perm = NULL;
	size_t *start = malloc((n + 1) * sizeof(size_t));
	int r = -ENOMEM;

	*ret = (struct train_epoch){ 0 };
	if (!order || !start)
		goto out;
	/* The rows are packed once, from one shuffle of the samples, so every epoch has the
	 * same number of rows (the step → batch mapping stays fixed); each epoch then visits
	 * the rows in its own order. */
	for (size_t i = 0; i < n; i++)
		order[i] = (uint32_t) i;
	shuffle(order, n, seed ^ 0xda7a5eedull);
	for (size_t i = 0; i < n; i++) {
		uint32_t sl = d->samples[order[i]].n;

		if (i == 0 || !pack || used + sl > len) {
			start[rows++] = i;
			used = 0;
		}
		used += sl;
	}
	start[rows] = n;
	perm = malloc(rows * sizeof(uint32_t));
	ret->order = malloc(n * sizeof(uint32_t));
	ret->row_start = malloc((rows + 1) * sizeof(size_t));
	if (!perm || !ret->order || !ret->row_start)
		goto out;
	for (size_t i = 0; i < rows; i++)
		perm[i] = (uint32_t) i;
	shuffle(perm, rows, seed ^ (0x5ca1ab1eull + (epoch + 1) * 0x9e3779b97f4a7c15ull));
	for (size_t i = 0, k = 0; i < rows; i++) {
		ret->row_start[i] = k;
		for (size_t j = start[perm[i]]; j < start[perm[i] + 1]; j++)
			ret->order[k++] = order[j];
	}
	ret->row_start[rows] = n;
	ret->n_rows = rows;
	r = 0;
out:
	free(order);
	free(start);
	free(perm);
	if (r < 0)
		train_epoch_done(ret);
	return r;
}

void train_epoch_done(struct train_epoch *ep)
{
	free(ep->order);
	free(ep->row_start);
	*ep = (struct train_epoch){ 0 };
}

int train_batch_buf_init(struct train_batch_buf *bb, uint32_t n_seq, uint32_t len)
{
	size_t n = (size_t) n_seq * len;

	*bb = (struct train_batch_buf){ 0 };
	bb->tokens = malloc(n * sizeof(int32_t));
	bb->targets = malloc(n * sizeof(int32_t));
	bb->pos = malloc(n * sizeof(int32_t));
	bb->seg = malloc(n * sizeof(int32_t));
	if (!bb->tokens || !bb->targets || !bb->pos || !bb->seg) {
		train_batch_buf_done(bb);
		return -ENOMEM;
	}
	return 0;
}

void train_batch_buf_done(struct train_batch_buf *bb)
{
	free(bb->tokens);
	free(bb->targets);
	free(bb->pos);
	free(bb->seg);
	*bb = (struct train_batch_buf){ 0 };
}

uint64_t train_batch_fill(struct train_batch_buf *bb, const struct train_data *d,
			  const struct train_epoch *ep, size_t r0, size_t n, uint32_t len)
{
	uint64_t labeled = 0;
	uint32_t eff = 1;

	/* Rows are as long as the longest one in this batch needs, at most len. */
	for (size_t r = 0; r < n; r++) {
		uint64_t used = 0;

		for (size_t k = ep->row_start[r0 + r]; k < ep->row_start[r0 + r + 1]; k++)
			used += d->samples[ep->order[k]].n;
		if (used > eff)
			eff = used < len ? (uint32_t) used : len;
	}
	len = eff;
	for (size_t r = 0; r < n; r++) {
		size_t t = r * len, row = r0 + r;
		int32_t seg = 0;

		for (size_t k = ep->row_start[row]; k < ep->row_start[row + 1]; k++, seg++) {
			const struct train_sample *s = &d->samples[ep->order[k]];

			for (uint32_t i = 0; i < s->n && t < (r + 1) * len; i++, t++) {
				bool lab = i + 1 < s->n && s->label[i + 1];

				bb->tokens[t] = s->ids[i];
				bb->targets[t] = lab ? s->ids[i + 1] : -1;
				bb->pos[t] = (int32_t) i;
				bb->seg[t] = seg;
				labeled += lab;
			}
		}
		for (; t < (r + 1) * len; t++) { /* padding: attends to itself, no loss */
			bb->tokens[t] = d->samples[0].ids[0];
			bb->targets[t] = -1;
			bb->pos[t] = 0;
			bb->seg[t] = -1;
		}
	}
	bb->b = (struct train_batch){ .n_seq = (int64_t) n, .len = len, .tokens = bb->tokens,
				      .targets = bb->targets, .pos = bb->pos, .seg = bb->seg };
	return labeled;
}
