/* SPDX-License-Identifier: MIT */
/*
 * vault.c: see vault.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detect.h"
#include "vault.h"

#define VAULT_MAX_REPORTS 64
#define TYPE_MAX 24

struct vault_entry {
	char type[TYPE_MAX];
	unsigned index;
	char *value;
	size_t len;
};

struct vault {
	struct vault_entry *e;
	size_t n, cap;
	char *reports[VAULT_MAX_REPORTS];
	size_t n_unrestorable;
	size_t n_restored;
};

struct vault_stream {
	struct vault *v;
	char *pending;
	size_t n, cap;
};

/* A growing output buffer. */
struct buf {
	char *p;
	size_t n, cap;
};

static int buf_add(struct buf *b, const void *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t nc = MAX(b->cap * 2, b->n + n + 64);
		char *np = malloc(nc);
		if (!np)
			return -ENOMEM;
		if (b->p) {
			memcpy(np, b->p, b->n);
			/* the old buffer may hold restored values */
			explicit_bzero(b->p, b->cap);
			free(b->p);
		}
		b->p = np;
		b->cap = nc;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

static void buf_wipe(struct buf *b)
{
	if (b->p) {
		explicit_bzero(b->p, b->cap);
		free(b->p);
	}
	*b = (struct buf){ 0 };
}

static int buf_take(struct buf *b, char **ret, size_t *ret_len)
{
	if (!b->p) {
		int r = buf_add(b, "", 0);
		if (r < 0)
			return r;
	}
	*ret = b->p;
	if (ret_len)
		*ret_len = b->n;
	*b = (struct buf){ 0 };
	return 0;
}

int vault_new(struct vault **ret)
{
	struct vault *v = calloc(1, sizeof(*v));

	if (!v)
		return -ENOMEM;
	*ret = v;
	return 0;
}

struct vault *vault_free(struct vault *v)
{
	if (!v)
		return NULL;
	for (size_t i = 0; i < v->n; i++) {
		explicit_bzero(v->e[i].value, v->e[i].len);
		free(v->e[i].value);
	}
	if (v->e) {
		explicit_bzero(v->e, v->cap * sizeof(*v->e));
		free(v->e);
	}
	for (size_t i = 0; i < VAULT_MAX_REPORTS; i++)
		if (v->reports[i]) {
			explicit_bzero(v->reports[i], strlen(v->reports[i]));
			free(v->reports[i]);
		}
	explicit_bzero(v, sizeof(*v));
	free(v);
	return NULL;
}

size_t vault_size(const struct vault *v)
{
	return v ? v->n : 0;
}

size_t vault_n_unrestorable(const struct vault *v)
{
	return v ? v->n_unrestorable : 0;
}

const char *vault_unrestorable(const struct vault *v, size_t i)
{
	return v && i < MIN(v->n_unrestorable, (size_t) VAULT_MAX_REPORTS) ? v->reports[i] : NULL;
}

size_t vault_n_restored(const struct vault *v)
{
	return v ? v->n_restored : 0;
}

/* The placeholder's TYPE for a finding's kind: the detector's own (detect_kind_placeholder()),
 * REDACTED for user rules, else the kind upper-cased ("connection_string" →
 * CONNECTION_STRING), with what the restorer would not read back as a TYPE (digits, other
 * bytes) dropped, so that any kind a layer adds gets a placeholder that round-trips. */
static const char *type_of(const char *kind, char buf[TYPE_MAX])
{
	enum detect_kind k;
	size_t n = 0;

	if (kind && detect_kind_from_name(kind, &k) >= 0)
		return detect_kind_placeholder(k);
	if (!kind || strcmp(kind, "rule") == 0)
		return "REDACTED";
	for (const char *c = kind; *c && n < TYPE_MAX - 1; c++) {
		if (*c >= 'a' && *c <= 'z')
			buf[n++] = (char) (*c - 32);
		else if (*c >= 'A' && *c <= 'Z')
			buf[n++] = *c;
		else if ((*c == '_' || *c == '-' || *c == ' ') && n > 0 && buf[n - 1] != '_')
			buf[n++] = '_';
	}
	while (n > 0 && buf[n - 1] == '_')
		n--;
	buf[n] = 0;
	/* the restorer wants two letters at least */
	return n >= 2 ? buf : "REDACTED";
}

static int format_placeholder(const struct vault_entry *e, char *buf, size_t size)
{
	int w = snprintf(buf, size, "\xe2\x9f\xa8%s_%u\xe2\x9f\xa9", e->type, e->index);

	return w < 0 || (size_t) w >= size ? -ENOBUFS : w;
}

int vault_entry(const struct vault *v, size_t i, char *buf, size_t size, const char **ret_value,
		size_t *ret_len)
{
	int r;

	assert_return(v && i < v->n, -EINVAL);
	r = format_placeholder(&v->e[i], buf, size);
	if (r < 0)
		return r;
	if (ret_value)
		*ret_value = v->e[i].value;
	if (ret_len)
		*ret_len = v->e[i].len;
	return 0;
}

/* The entry for (type, value), created if new. */
static int vault_get(struct vault *v, const char *type, const char *value, size_t len,
		     struct vault_entry **ret)
{
	unsigned max = 0;
	struct vault_entry *e;

	for (size_t i = 0; i < v->n; i++) {
		if (strcmp(v->e[i].type, type) != 0)
			continue;
		if (v->e[i].len == len && memcmp(v->e[i].value, value, len) == 0) {
			*ret = &v->e[i];
			return 0;
		}
		max = MAX(max, v->e[i].index);
	}
	if (v->n == v->cap) {
		size_t nc = v->cap ? v->cap * 2 : 8;
		struct vault_entry *ne = calloc(nc, sizeof(*ne));
		if (!ne)
			return -ENOMEM;
		if (v->e) {
			memcpy(ne, v->e, v->n * sizeof(*ne));
			explicit_bzero(v->e, v->cap * sizeof(*ne));
			free(v->e);
		}
		v->e = ne;
		v->cap = nc;
	}
	e = &v->e[v->n];
	e->value = malloc(len + 1);
	if (!e->value)
		return -ENOMEM;
	memcpy(e->value, value, len);
	e->value[len] = 0;
	e->len = len;
	e->index = max + 1;
	snprintf(e->type, sizeof(e->type), "%s", type);
	v->n++;
	*ret = e;
	return 0;
}

int vault_redact(struct vault *v, const char *text, size_t len, const struct policy_finding *f,
		 size_t n_findings, enum policy_class min_class, char **ret, size_t *ret_len)
{
	struct buf out = { 0 };
	size_t pos = 0;
	size_t *order = NULL;
	int r = 0;

	assert_return(v && (text || len == 0) && (f || n_findings == 0) && ret, -EINVAL);
	/* Spans in start order (findings usually come sorted; user rules may interleave). */
	if (n_findings) {
		order = malloc(n_findings * sizeof(*order));
		if (!order)
			return -ENOMEM;
		for (size_t i = 0; i < n_findings; i++)
			order[i] = i;
		for (size_t i = 1; i < n_findings; i++) /* insertion sort: nearly sorted input */
			for (size_t j = i; j > 0 && f[order[j - 1]].byte_start > f[order[j]].byte_start;
			     j--) {
				size_t tmp = order[j];
				order[j] = order[j - 1];
				order[j - 1] = tmp;
			}
	}
	for (size_t k = 0; k < n_findings; k++) {
		const struct policy_finding *x = &f[order[k]];
		size_t s = x->byte_start, e = x->byte_end;
		struct vault_entry *ent;
		char ph[TYPE_MAX + 16], type[TYPE_MAX];
		int w;

		if (x->class < min_class || !policy_finding_redactable(x) || s >= len)
			continue;
		e = MIN(e, len);
		if (s < pos) {
			if (e <= pos)
				continue;
			s = pos; /* an overlap already replaced: take the rest with it */
		}
		/* merge every later span that overlaps this one */
		for (size_t j = k + 1; j < n_findings; j++) {
			const struct policy_finding *y = &f[order[j]];
			if (y->class < min_class || !policy_finding_redactable(y))
				continue;
			if (y->byte_start >= e)
				break;
			e = MAX(e, MIN(y->byte_end, len));
		}
		if ((r = buf_add(&out, text + pos, s - pos)) < 0)
			goto fail;
		if ((r = vault_get(v, type_of(x->kind, type), text + s, e - s, &ent)) < 0)
			goto fail;
		w = format_placeholder(ent, ph, sizeof(ph));
		if (w < 0) {
			r = w;
			goto fail;
		}
		if ((r = buf_add(&out, ph, (size_t) w)) < 0)
			goto fail;
		pos = e;
	}
	if ((r = buf_add(&out, text + pos, len - pos)) < 0)
		goto fail;
	free(order);
	return buf_take(&out, ret, ret_len);
fail:
	free(order);
	buf_wipe(&out);
	return r;
}

/* ---- restoring ---- */

static const char *const openers[] = {
	"\xe2\x9f\xa8", /* ⟨ */
	"\xe2\x8c\xa9", /* 〈 */
	"\xe3\x80\x88", /* 〈 */
	"\xe2\x80\xb9", /* ‹ */
	"\xc2\xab",     /* « */
	"<",            "[",  "&lt;",
};
static const char *const closers[] = {
	"\xe2\x9f\xa9", "\xe2\x8c\xaa", "\xe3\x80\x89", "\xe2\x80\xba", "\xc2\xbb", ">", "]", "&gt;",
};
/* openers[0..2]: our own style, where any TYPE is a placeholder */
#define OWN_OPENERS 3

enum ph_result { PH_NO, PH_YES, PH_PARTIAL };

struct ph {
	size_t end;
	char type[TYPE_MAX];
	unsigned index;
	bool own;
};

/* Does t[p..] start with s? PH_PARTIAL: t ends inside a prefix of s. */
static enum ph_result starts(const char *t, size_t len, size_t p, const char *s, size_t *ret_n)
{
	size_t n = strlen(s), avail = len - p;

	if (avail < n)
		return memcmp(t + p, s, avail) == 0 ? PH_PARTIAL : PH_NO;
	if (memcmp(t + p, s, n) != 0)
		return PH_NO;
	*ret_n = n;
	return PH_YES;
}

static bool is_space(int c)
{
	return c == ' ' || c == '\t';
}

static enum ph_result parse_ph(const char *t, size_t len, size_t p, bool final, struct ph *ph)
{
	enum ph_result res = PH_NO;
	size_t q = 0, n = 0, tn = 0, ws;
	unsigned long idx = 0;
	int nd = 0, letters = 0;

#define PARTIAL() return final ? PH_NO : PH_PARTIAL
	for (size_t k = 0; k < ELEMENTSOF(openers); k++) {
		enum ph_result s = starts(t, len, p, openers[k], &n);
		if (s == PH_YES) {
			res = PH_YES;
			ph->own = k < OWN_OPENERS;
			break;
		}
		if (s == PH_PARTIAL)
			res = PH_PARTIAL;
	}
	if (res == PH_PARTIAL)
		PARTIAL();
	if (res == PH_NO)
		return PH_NO;
	q = p + n;
	for (ws = 0; q < len && is_space(t[q]) && ws < 4; ws++)
		q++;
	if (q >= len)
		PARTIAL();
	/* TYPE: letters, with '_', '-' or spaces between words (folded to one '_') */
	while (q < len) {
		int c = (unsigned char) t[q];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			if (tn >= TYPE_MAX - 1)
				return PH_NO;
			ph->type[tn++] = (char) (c >= 'a' ? c - 32 : c);
			letters++;
		} else if (c == '_' || c == '-' || is_space(c)) {
			if (tn == 0 || ph->type[tn - 1] == '_') {
				if (tn == 0 || ++ws > 8)
					return PH_NO;
			} else {
				if (tn >= TYPE_MAX - 1)
					return PH_NO;
				ph->type[tn++] = '_';
			}
		} else
			break;
		q++;
	}
	if (q >= len)
		PARTIAL();
	if (letters < 2)
		return PH_NO;
	while (tn > 0 && ph->type[tn - 1] == '_')
		tn--;
	ph->type[tn] = 0;
	while (q < len && t[q] >= '0' && t[q] <= '9') {
		if (++nd > 6)
			return PH_NO;
		idx = idx * 10 + (unsigned long) (t[q] - '0');
		q++;
	}
	if (q >= len)
		PARTIAL();
	if (nd == 0 || idx == 0)
		return PH_NO;
	for (ws = 0; q < len && is_space(t[q]) && ws < 4; ws++)
		q++;
	if (q >= len)
		PARTIAL();
	for (size_t k = 0; k < ELEMENTSOF(closers); k++) {
		enum ph_result s = starts(t, len, q, closers[k], &n);
		if (s == PH_YES) {
			ph->end = q + n;
			ph->index = (unsigned) idx;
			return PH_YES;
		}
		if (s == PH_PARTIAL)
			res = PH_PARTIAL;
	}
	if (res == PH_PARTIAL)
		PARTIAL();
	return PH_NO;
#undef PARTIAL
}

static bool type_known(const char *type)
{
	if (strcmp(type, "REDACTED") == 0)
		return true;
	for (int k = 0; k < DETECT_KIND_COUNT_; k++)
		if (strcmp(type, detect_kind_placeholder((enum detect_kind) k)) == 0)
			return true;
	return false;
}

static int report(struct vault *v, const char *s, size_t n)
{
	if (v->n_unrestorable < VAULT_MAX_REPORTS) {
		char *c = strndup(s, n);
		if (!c)
			return -ENOMEM;
		v->reports[v->n_unrestorable] = c;
	}
	v->n_unrestorable++;
	return 0;
}

static bool may_open(unsigned char c)
{
	return c == '<' || c == '[' || c == '&' || c == 0xe2 || c == 0xe3 || c == 0xc2;
}

/* Restores t[0..len) into out; returns how much was consumed (less than len only when not
 * final and a possible placeholder runs to the end). */
static int restore_core(struct vault *v, const char *t, size_t len, bool final, struct buf *out,
			size_t *consumed)
{
	size_t p = 0, lit = 0;
	int r;

	while (p < len) {
		struct ph ph;
		enum ph_result res;

		if (!may_open((unsigned char) t[p])) {
			p++;
			continue;
		}
		res = parse_ph(t, len, p, final, &ph);
		if (res == PH_PARTIAL)
			break;
		if (res == PH_YES) {
			const struct vault_entry *e = NULL;
			for (size_t i = 0; i < v->n; i++)
				if (v->e[i].index == ph.index && strcmp(v->e[i].type, ph.type) == 0) {
					e = &v->e[i];
					break;
				}
			if (e || ph.own || type_known(ph.type)) {
				if ((r = buf_add(out, t + lit, p - lit)) < 0)
					return r;
				if (e) {
					r = buf_add(out, e->value, e->len);
					v->n_restored++;
				} else {
					r = report(v, t + p, ph.end - p);
					if (r >= 0)
						r = buf_add(out, t + p, ph.end - p);
				}
				if (r < 0)
					return r;
				p = lit = ph.end;
				continue;
			}
		}
		p++;
	}
	if ((r = buf_add(out, t + lit, p - lit)) < 0)
		return r;
	*consumed = p;
	return 0;
}

int vault_restore(struct vault *v, const char *text, size_t len, char **ret, size_t *ret_len)
{
	struct buf out = { 0 };
	size_t consumed = 0;
	int r;

	assert_return(v && (text || len == 0) && ret, -EINVAL);
	r = restore_core(v, text ? text : "", len, true, &out, &consumed);
	if (r < 0) {
		buf_wipe(&out);
		return r;
	}
	return buf_take(&out, ret, ret_len);
}

int vault_stream_new(struct vault *v, struct vault_stream **ret)
{
	struct vault_stream *s;

	assert_return(v && ret, -EINVAL);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->v = v;
	*ret = s;
	return 0;
}

struct vault_stream *vault_stream_free(struct vault_stream *s)
{
	if (!s)
		return NULL;
	if (s->pending) {
		explicit_bzero(s->pending, s->cap);
		free(s->pending);
	}
	free(s);
	return NULL;
}

static int stream_run(struct vault_stream *s, bool final, char **out, size_t *out_len)
{
	struct buf o = { 0 };
	size_t consumed = 0;
	int r;

	r = restore_core(s->v, s->pending ? s->pending : "", s->n, final, &o, &consumed);
	if (r < 0) {
		buf_wipe(&o);
		return r;
	}
	if (consumed)
		memmove(s->pending, s->pending + consumed, s->n - consumed);
	s->n -= consumed;
	return buf_take(&o, out, out_len);
}

int vault_stream_feed(struct vault_stream *s, const char *chunk, size_t len, char **out,
		      size_t *out_len)
{
	assert_return(s && (chunk || len == 0) && out, -EINVAL);
	if (s->n + len > s->cap) {
		size_t nc = MAX(s->cap * 2, s->n + len + 64);
		char *np = malloc(nc);
		if (!np)
			return -ENOMEM;
		if (s->pending) {
			memcpy(np, s->pending, s->n);
			explicit_bzero(s->pending, s->cap);
			free(s->pending);
		}
		s->pending = np;
		s->cap = nc;
	}
	if (len)
		memcpy(s->pending + s->n, chunk, len);
	s->n += len;
	return stream_run(s, false, out, out_len);
}

int vault_stream_finish(struct vault_stream *s, char **out, size_t *out_len)
{
	assert_return(s && out, -EINVAL);
	return stream_run(s, true, out, out_len);
}
