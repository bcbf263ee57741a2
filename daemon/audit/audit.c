/* SPDX-License-Identifier: MIT */
/*
 * audit.c: see audit.h. LMDB's return codes stay in this file: every exit converts them to
 * -errno (lmdb_errno()).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <json-c/json.h>
#include <lmdb.h>

#include "audit.h"
#include "../core/lmdb-util.h"

#define KEY_SIZE 16
#define PRUNE_BATCH 4096 /* deletions per write transaction */
#define MAP_FULL_TRIES 8

struct audit {
	MDB_env *env;
	MDB_dbi dbi;
	char *dir;
	uint64_t retention_ns;
	uint64_t next_seq;
	uint64_t map_cap;        /* the configured size: records beyond it are pruned */
	uint64_t map_size;       /* the map: map_cap plus the reserve pruning needs */
	size_t last_pgno_pruned; /* where the last prune-for-space left the file's end */
	bool read_only;
};

/* LMDB copies every page a transaction touches, so even deleting needs free pages: the map
 * keeps a reserve beyond the configured size, and records are pruned once the file reaches
 * into it. */
static uint64_t map_reserve(uint64_t cap)
{
	return MAX(cap / 8, 64ull * 4096);
}

static void key_encode(uint8_t k[KEY_SIZE], uint64_t t, uint64_t seq)
{
	for (int i = 0; i < 8; i++) {
		k[i] = (uint8_t) (t >> (56 - 8 * i));
		k[8 + i] = (uint8_t) (seq >> (56 - 8 * i));
	}
}

static uint64_t be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

/* ---- records ---- */

static void copy_str(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src ? src : "");
}

void audit_record_add_finding(struct audit_record *r, const char *kind, uint32_t n)
{
	if (!r || !kind || n == 0)
		return;
	for (size_t i = 0; i < r->n_findings; i++)
		if (strcmp(r->findings[i].kind, kind) == 0) {
			r->findings[i].count += n;
			return;
		}
	if (r->n_findings == AUDIT_MAX_KINDS) {
		/* Full: the last slot becomes the catch-all, so counts are never lost. */
		struct audit_kind_count *last = &r->findings[AUDIT_MAX_KINDS - 1];
		copy_str(last->kind, sizeof(last->kind), "other");
		last->count += n;
		return;
	}
	copy_str(r->findings[r->n_findings].kind, sizeof(r->findings[0].kind), kind);
	r->findings[r->n_findings].count = n;
	r->n_findings++;
}

static struct json_object *str_or_null(const char *s)
{
	return s && s[0] ? json_object_new_string(s) : NULL;
}

static struct json_object *tiers_array(uint32_t tiers)
{
	struct json_object *a = json_object_new_array();

	for (int i = 0; a && i < 4; i++)
		if (tiers & (1u << i)) {
			char t[4] = { 'T', (char) ('0' + i), 0 };
			json_object_array_add(a, json_object_new_string(t));
		}
	return a;
}

int audit_record_to_json(const struct audit_record *r, char **ret)
{
	struct json_object *o = json_object_new_object(), *f;
	const char *s;
	char tier[16] = "";
	int k = -ENOMEM;

	if (!o)
		return -ENOMEM;
	f = json_object_new_object();
	if (!f)
		goto out;
	for (size_t i = 0; i < r->n_findings && i < AUDIT_MAX_KINDS; i++)
		json_object_object_add(f, r->findings[i].kind,
				       json_object_new_int64(r->findings[i].count));
	if (r->tier >= 0 && r->tier <= 3)
		snprintf(tier, sizeof(tier), "T%d", (int) (r->tier & 0xff));

	json_object_object_add(o, "time", json_object_new_uint64(r->time_ns));
	json_object_object_add(o, "seq", json_object_new_uint64(r->seq));
	json_object_object_add(o, "request", json_object_new_uint64(r->request_id));
	json_object_object_add(o, "front", str_or_null(r->front));
	json_object_object_add(o, "uid", r->uid >= 0 ? json_object_new_int64(r->uid) : NULL);
	json_object_object_add(o, "member", str_or_null(r->member));
	json_object_object_add(o, "class", str_or_null(r->class_name));
	json_object_object_add(o, "declared", str_or_null(r->declared));
	json_object_object_add(o, "findings", f);
	json_object_object_add(o, "permitted_tiers", tiers_array(r->permitted_tiers));
	json_object_object_add(o, "target", str_or_null(r->target));
	json_object_object_add(o, "tier", str_or_null(tier));
	json_object_object_add(o, "redactions", json_object_new_int64(r->redactions));
	json_object_object_add(o, "escalations", json_object_new_int64(r->escalations));
	json_object_object_add(o, "fallbacks", json_object_new_int64(r->fallbacks));
	json_object_object_add(o, "route", str_or_null(r->route));
	json_object_object_add(o, "finish", str_or_null(r->finish));
	json_object_object_add(o, "error", str_or_null(r->error));
	json_object_object_add(o, "prompt_tokens", json_object_new_int64(r->prompt_tokens));
	json_object_object_add(o, "completion_tokens",
			       json_object_new_int64(r->completion_tokens));
	json_object_object_add(o, "egress_enforced", json_object_new_boolean(r->egress_enforced));
	s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
						      JSON_C_TO_STRING_NOSLASHESCAPE);
	if (s) {
		*ret = strdup(s);
		k = *ret ? 0 : -ENOMEM;
	}
out:
	json_object_put(o);
	return k;
}

static const char *get_str(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static bool get_u64(struct json_object *o, const char *key, uint64_t *ret)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	errno = 0;
	*ret = json_object_get_uint64(v);
	return errno == 0;
}

static bool get_u32(struct json_object *o, const char *key, uint32_t *ret)
{
	uint64_t v;

	if (!get_u64(o, key, &v) || v > UINT32_MAX)
		return false;
	*ret = (uint32_t) v;
	return true;
}

int audit_parse_tier(const char *s, int *ret)
{
	if (!s)
		return -EINVAL;
	if (s[0] == 'T' || s[0] == 't')
		s++;
	if (s[0] < '0' || s[0] > '3' || s[1])
		return -EINVAL;
	*ret = s[0] - '0';
	return 0;
}

int audit_record_from_json(const char *text, size_t len, struct audit_record *ret)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o = NULL, *v;
	struct audit_record r = { .uid = -1, .tier = -1 };
	int k = -EBADMSG;

	if (!tok)
		return -ENOMEM;
	if (len > INT32_MAX)
		goto out;
	o = json_tokener_parse_ex(tok, text, (int) len);
	if (!o || json_tokener_get_error(tok) != json_tokener_success ||
	    !json_object_is_type(o, json_type_object))
		goto out;
	if (!get_u64(o, "time", &r.time_ns) || !get_u64(o, "seq", &r.seq))
		goto out;
	(void) get_u64(o, "request", &r.request_id);
	copy_str(r.front, sizeof(r.front), get_str(o, "front"));
	if (json_object_object_get_ex(o, "uid", &v) && json_object_is_type(v, json_type_int))
		r.uid = json_object_get_int64(v);
	copy_str(r.member, sizeof(r.member), get_str(o, "member"));
	copy_str(r.class_name, sizeof(r.class_name), get_str(o, "class"));
	copy_str(r.declared, sizeof(r.declared), get_str(o, "declared"));
	if (json_object_object_get_ex(o, "findings", &v) &&
	    json_object_is_type(v, json_type_object)) {
		json_object_object_foreach(v, kind, cnt)
		{
			int64_t n = json_object_get_int64(cnt);
			if (!json_object_is_type(cnt, json_type_int) || n < 0 || n > UINT32_MAX)
				goto out;
			audit_record_add_finding(&r, kind, (uint32_t) n);
		}
	}
	if (json_object_object_get_ex(o, "permitted_tiers", &v) &&
	    json_object_is_type(v, json_type_array))
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			int t;
			if (audit_parse_tier(json_object_get_string(json_object_array_get_idx(v, i)),
					     &t) < 0)
				goto out;
			r.permitted_tiers |= 1u << t;
		}
	copy_str(r.target, sizeof(r.target), get_str(o, "target"));
	if (get_str(o, "tier") && audit_parse_tier(get_str(o, "tier"), &r.tier) < 0)
		goto out;
	(void) get_u32(o, "redactions", &r.redactions);
	(void) get_u32(o, "escalations", &r.escalations);
	(void) get_u32(o, "fallbacks", &r.fallbacks);
	copy_str(r.route, sizeof(r.route), get_str(o, "route"));
	copy_str(r.finish, sizeof(r.finish), get_str(o, "finish"));
	copy_str(r.error, sizeof(r.error), get_str(o, "error"));
	(void) get_u32(o, "prompt_tokens", &r.prompt_tokens);
	(void) get_u32(o, "completion_tokens", &r.completion_tokens);
	if (json_object_object_get_ex(o, "egress_enforced", &v))
		r.egress_enforced = json_object_get_boolean(v);
	*ret = r;
	k = 0;
out:
	json_object_put(o);
	json_tokener_free(tok);
	return k;
}

int audit_record_format(const struct audit_record *r, char **ret)
{
	char when[64], tiers[16] = "", findings[512] = "", uid[24] = "-", tier[16] = "-";
	struct tm tm;
	time_t t = (time_t) (r->time_ns / 1000000000ull);
	size_t n = 0;

	if (!gmtime_r(&t, &tm))
		return -EINVAL;
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + strlen(when), sizeof(when) - strlen(when), ".%03uZ",
		 (unsigned) (r->time_ns % 1000000000ull / 1000000ull));
	for (int i = 0; i < 4; i++)
		if (r->permitted_tiers & (1u << i))
			snprintf(tiers + strlen(tiers), sizeof(tiers) - strlen(tiers), "%sT%d",
				 tiers[0] ? "," : "", i);
	for (size_t i = 0; i < r->n_findings && n < sizeof(findings); i++)
		n += (size_t) snprintf(findings + n, sizeof(findings) - n, "%s%s:%u",
				       i ? "," : "", r->findings[i].kind, r->findings[i].count);
	if (r->uid >= 0)
		snprintf(uid, sizeof(uid), "%" PRId64, r->uid);
	if (r->tier >= 0)
		snprintf(tier, sizeof(tier), "T%d", (int) (r->tier & 0xff));
	if (asprintf(ret,
		     "%s %s uid=%s member=%s class=%s%s%s findings=%s tiers=%s target=%s tier=%s "
		     "redactions=%u escalations=%u fallbacks=%u %s=%s egress=%s",
		     when, r->front[0] ? r->front : "-", uid, r->member[0] ? r->member : "-",
		     r->class_name[0] ? r->class_name : "-", r->declared[0] ? " declared=" : "",
		     r->declared, findings[0] ? findings : "-", tiers[0] ? tiers : "-",
		     r->target[0] ? r->target : "-", tier, r->redactions, r->escalations,
		     r->fallbacks, r->error[0] ? "error" : "finish",
		     r->error[0] ? r->error : (r->finish[0] ? r->finish : "-"),
		     r->egress_enforced ? "enforced" : "off") < 0)
		return -ENOMEM;
	return 0;
}

int audit_parse_duration(const char *s, uint64_t *ret)
{
	static const struct {
		char unit;
		uint64_t ns;
	} units[] = {
		{ 's', 1000000000ull },          { 'm', 60ull * 1000000000ull },
		{ 'h', 3600ull * 1000000000ull }, { 'd', 86400ull * 1000000000ull },
		{ 'w', 7ull * 86400ull * 1000000000ull },
	};
	uint64_t total = 0;

	if (!s || !s[0])
		return -EINVAL;
	while (*s) {
		uint64_t n = 0, mul = 0;
		const char *p = s;

		while (*p >= '0' && *p <= '9') {
			if (n > (UINT64_MAX - 9) / 10)
				return -ERANGE;
			n = n * 10 + (uint64_t) (*p - '0');
			p++;
		}
		if (p == s)
			return -EINVAL;
		for (size_t i = 0; i < ELEMENTSOF(units); i++)
			if (*p == units[i].unit)
				mul = units[i].ns;
		if (!mul)
			return -EINVAL;
		if (n > (UINT64_MAX - total) / mul)
			return -ERANGE;
		total += n * mul;
		s = p + 1;
	}
	*ret = total;
	return 0;
}

/* ---- the store ---- */

int audit_open(const char *dir, const struct audit_options *o, struct audit **ret,
	       struct errmsg *e)
{
	_cleanup_(audit_closep) struct audit *a = NULL;
	struct audit_options def = { 0 };
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	unsigned flags = 0;
	int rc;

	assert_return(dir && ret, -EINVAL);
	if (!o)
		o = &def;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->dir = strdup(dir);
	if (!a->dir)
		return -ENOMEM;
	a->retention_ns = o->retention_ns;
	a->read_only = o->read_only;

	if (o->read_only) {
		_cleanup_free_ char *data = NULL;
		struct stat st;
		if (asprintf(&data, "%s/data.mdb", dir) < 0)
			return -ENOMEM;
		if (stat(data, &st) < 0)
			return errmsg_set(e, -errno, "no audit store at %s (%m): the daemon creates "
						     "it at its first request; pass --state-dir if "
						     "its StateDirectory= is elsewhere",
					  dir);
		flags |= MDB_RDONLY;
	} else if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return errmsg_set(e, -errno, "creating the audit store %s: %m", dir);
	if (o->no_sync)
		flags |= MDB_NOSYNC;

	for (int attempt = 0; attempt < 2; attempt++) {
		rc = mdb_env_create(&a->env);
		if (rc != MDB_SUCCESS)
			return errmsg_set(e, lmdb_errno(rc), "%s: %s", dir, mdb_strerror(rc));
		/* A reader takes the size from the file; a writer sets the configured cap. */
		if (!o->read_only) {
			a->map_cap = o->map_size ? o->map_size : AUDIT_DEFAULT_MAP_SIZE;
			a->map_size = a->map_cap + map_reserve(a->map_cap);
			rc = mdb_env_set_mapsize(a->env, a->map_size);
			if (rc != MDB_SUCCESS)
				return errmsg_set(e, lmdb_errno(rc), "%s: map size: %s", dir,
						  mdb_strerror(rc));
		}
		rc = mdb_env_open(a->env, dir, flags, 0600);
		if (rc == MDB_SUCCESS)
			break;
		mdb_env_close(a->env);
		a->env = NULL;
		/* A reader that may not write the lock file (another user's daemon, a read-only
		 * copy) still reads, without the reader table. */
		if (o->read_only && (rc == EACCES || rc == EROFS) && !(flags & MDB_NOLOCK)) {
			flags |= MDB_NOLOCK;
			continue;
		}
		return errmsg_set(e, lmdb_errno(rc), "opening the audit store %s: %s", dir,
				  mdb_strerror(rc));
	}

	rc = mdb_txn_begin(a->env, NULL, o->read_only ? MDB_RDONLY : 0, &txn);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, NULL, 0, &a->dbi);
	if (rc == MDB_SUCCESS)
		rc = mdb_cursor_open(txn, a->dbi, &cur);
	if (rc == MDB_SUCCESS) {
		/* Sequence numbers continue after the newest record, across restarts. */
		int g = mdb_cursor_get(cur, &k, &v, MDB_LAST);
		if (g == MDB_SUCCESS && k.mv_size == KEY_SIZE)
			a->next_seq = be64((const uint8_t *) k.mv_data + 8) + 1;
		else if (g != MDB_SUCCESS && g != MDB_NOTFOUND)
			rc = g;
		mdb_cursor_close(cur);
	}
	if (rc == MDB_SUCCESS)
		rc = o->read_only ? (mdb_txn_abort(txn), MDB_SUCCESS) : mdb_txn_commit(txn);
	else if (txn)
		mdb_txn_abort(txn);
	if (rc != MDB_SUCCESS)
		return errmsg_set(e, lmdb_errno(rc), "opening the audit store %s: %s", dir,
				  mdb_strerror(rc));
	*ret = TAKE_PTR(a);
	return 0;
}

struct audit *audit_close(struct audit *a)
{
	if (!a)
		return NULL;
	if (a->env)
		mdb_env_close(a->env);
	free(a->dir);
	free(a);
	return NULL;
}

/* Deletes up to max records with time < before_ns (max 0: no limit on count, only the
 * batch size per transaction). */
static int prune_batch(struct audit *a, uint64_t before_ns, uint64_t max, uint64_t *ret_n)
{
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t n = 0;
	int rc;

	rc = mdb_txn_begin(a->env, NULL, 0, &txn);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	rc = mdb_cursor_open(txn, a->dbi, &cur);
	if (rc != MDB_SUCCESS)
		goto fail;
	while (n < PRUNE_BATCH && (max == 0 || n < max)) {
		rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
		if (rc == MDB_NOTFOUND)
			break;
		if (rc != MDB_SUCCESS)
			goto fail;
		if (k.mv_size == KEY_SIZE && be64(k.mv_data) >= before_ns)
			break;
		rc = mdb_cursor_del(cur, 0);
		if (rc != MDB_SUCCESS)
			goto fail;
		n++;
	}
	mdb_cursor_close(cur);
	rc = mdb_txn_commit(txn);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	*ret_n = n;
	return 0;
fail:
	if (cur)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return lmdb_errno(rc);
}

int audit_prune(struct audit *a, uint64_t before_ns, uint64_t *ret_removed, struct errmsg *e)
{
	uint64_t total = 0;

	assert_return(a, -EINVAL);
	if (a->read_only)
		return errmsg_set(e, -EROFS, "%s: opened read-only", a->dir);
	for (;;) {
		uint64_t n = 0;
		int k = prune_batch(a, before_ns, 0, &n);
		if (k < 0)
			return errmsg_set(e, k, "pruning the audit store %s: %s", a->dir,
					  strerror(-k));
		total += n;
		if (n < PRUNE_BATCH)
			break;
	}
	if (ret_removed)
		*ret_removed = total;
	return 0;
}

static int count_records(struct audit *a, uint64_t *ret)
{
	MDB_txn *txn;
	MDB_stat st;
	int rc;

	rc = mdb_txn_begin(a->env, NULL, MDB_RDONLY, &txn);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	rc = mdb_stat(txn, a->dbi, &st);
	mdb_txn_abort(txn);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	*ret = st.ms_entries;
	return 0;
}

/* The map is full: drop what the retention would drop anyway, else the oldest eighth. */
static int make_room(struct audit *a, uint64_t now, uint64_t *dropped)
{
	uint64_t n = 0, total = 0;
	int k;

	if (a->retention_ns && now > a->retention_ns) {
		k = prune_batch(a, now - a->retention_ns, 0, &n);
		if (k < 0)
			return k;
		if (n > 0) {
			*dropped += n;
			return 0;
		}
	}
	k = count_records(a, &total);
	if (k < 0)
		return k;
	if (total == 0)
		return -ENOSPC; /* not even one record fits: the map is too small */
	k = prune_batch(a, UINT64_MAX, MAX(total / 8, 1), &n);
	if (k < 0)
		return k;
	*dropped += n;
	return n > 0 ? 0 : -ENOSPC;
}

static int put_one(struct audit *a, const uint8_t *key, const char *json, size_t len)
{
	MDB_txn *txn = NULL;
	MDB_val k = { .mv_size = KEY_SIZE, .mv_data = (void *) key };
	MDB_val v = { .mv_size = len, .mv_data = (void *) json };
	int rc;

	rc = mdb_txn_begin(a->env, NULL, 0, &txn);
	if (rc != MDB_SUCCESS)
		return rc;
	rc = mdb_put(txn, a->dbi, &k, &v, MDB_NOOVERWRITE);
	if (rc != MDB_SUCCESS) {
		mdb_txn_abort(txn);
		return rc;
	}
	return mdb_txn_commit(txn); /* a failed commit frees the transaction */
}

/* Whether the file reaches beyond the configured size and has grown since the last prune
 * for space: the free pages inside it are used up. */
static bool over_cap(struct audit *a)
{
	MDB_envinfo info;
	MDB_stat st;

	if (mdb_env_info(a->env, &info) != MDB_SUCCESS || mdb_env_stat(a->env, &st) != MDB_SUCCESS)
		return false;
	if ((uint64_t) (info.me_last_pgno + 1) * st.ms_psize <= a->map_cap)
		return false;
	return info.me_last_pgno > a->last_pgno_pruned;
}

static void note_pruned(struct audit *a)
{
	MDB_envinfo info;

	if (mdb_env_info(a->env, &info) == MDB_SUCCESS)
		a->last_pgno_pruned = info.me_last_pgno;
}

int audit_append(struct audit *a, struct audit_record *r, struct errmsg *e)
{
	_cleanup_free_ char *json = NULL;
	uint64_t dropped = 0;
	uint8_t key[KEY_SIZE];
	int rc, k;

	assert_return(a && r, -EINVAL);
	if (a->read_only)
		return errmsg_set(e, -EROFS, "%s: opened read-only", a->dir);
	if (r->time_ns == 0)
		r->time_ns = lmdb_realtime_ns();
	for (int tries = 0;; tries++) {
		r->seq = a->next_seq;
		free(json);
		json = NULL;
		k = audit_record_to_json(r, &json);
		if (k < 0)
			return errmsg_set(e, k, "encoding an audit record: %s", strerror(-k));
		key_encode(key, r->time_ns, r->seq);
		rc = put_one(a, key, json, strlen(json));
		if (rc == MDB_SUCCESS) {
			a->next_seq++;
			if (over_cap(a)) {
				k = make_room(a, lmdb_realtime_ns(), &dropped);
				note_pruned(a);
				if (k < 0 && k != -ENOSPC)
					return errmsg_set(e, k, "pruning the full audit store %s: %s",
							  a->dir, strerror(-k));
			}
			break;
		}
		if (rc == MDB_KEYEXIST && tries < 4) {
			/* Another writer (a second daemon on the same store?) took this key. */
			a->next_seq++;
			continue;
		}
		if (rc == MDB_MAP_FULL && tries < MAP_FULL_TRIES) {
			/* The reserve is used up too: grow it once more, up to twice the cap, so
			 * the prune has pages to work with. */
			if (a->map_size < 2 * a->map_cap + map_reserve(a->map_cap)) {
				uint64_t sz = a->map_size + map_reserve(a->map_cap);
				if (mdb_env_set_mapsize(a->env, sz) == MDB_SUCCESS)
					a->map_size = sz;
			}
			k = make_room(a, lmdb_realtime_ns(), &dropped);
			note_pruned(a);
			if (k < 0)
				return errmsg_set(e, k,
						  "the audit store %s is full and nothing could be "
						  "pruned: raise [Audit] MapSize= (%s)",
						  a->dir, strerror(-k));
			continue;
		}
		k = lmdb_errno(rc);
		return errmsg_set(e, k, "writing to the audit store %s: %s", a->dir,
				  mdb_strerror(rc));
	}
	return dropped > INT32_MAX ? INT32_MAX : (int) dropped;
}

int audit_scan(struct audit *a, const struct audit_filter *f,
	       int (*fn)(const struct audit_record *r, void *userdata), void *userdata,
	       struct errmsg *e)
{
	struct audit_filter any = { .tier = -1 };
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	uint8_t start[KEY_SIZE];
	MDB_val k = { .mv_size = KEY_SIZE, .mv_data = start }, v;
	MDB_cursor_op op = MDB_SET_RANGE;
	int rc, ret = 0;

	assert_return(a && fn, -EINVAL);
	if (!f)
		f = &any;
	key_encode(start, f->since_ns, 0);
	rc = mdb_txn_begin(a->env, NULL, MDB_RDONLY, &txn);
	if (rc == MDB_SUCCESS)
		rc = mdb_cursor_open(txn, a->dbi, &cur);
	if (rc != MDB_SUCCESS) {
		if (txn)
			mdb_txn_abort(txn);
		return errmsg_set(e, lmdb_errno(rc), "reading the audit store %s: %s", a->dir,
				  mdb_strerror(rc));
	}
	for (;;) {
		struct audit_record r;
		uint64_t t;

		rc = mdb_cursor_get(cur, &k, &v, op);
		op = MDB_NEXT;
		if (rc == MDB_NOTFOUND)
			break;
		if (rc != MDB_SUCCESS) {
			ret = errmsg_set(e, lmdb_errno(rc), "reading the audit store %s: %s",
					 a->dir, mdb_strerror(rc));
			break;
		}
		if (k.mv_size != KEY_SIZE) {
			ret = errmsg_set(e, -EBADMSG, "%s: a key of %zu bytes is not an audit key",
					 a->dir, k.mv_size);
			break;
		}
		t = be64(k.mv_data);
		if (f->until_ns && t >= f->until_ns)
			break;
		if (audit_record_from_json(v.mv_data, v.mv_size, &r) < 0) {
			ret = errmsg_set(e, -EBADMSG,
					 "%s: the record at time %" PRIu64 " seq %" PRIu64
					 " does not parse",
					 a->dir, t, be64((const uint8_t *) k.mv_data + 8));
			break;
		}
		if (f->tier >= 0 && r.tier != f->tier)
			continue;
		if (f->class_name && strcmp(r.class_name, f->class_name) != 0)
			continue;
		ret = fn(&r, userdata);
		if (ret < 0)
			break;
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return ret < 0 ? ret : 0;
}
