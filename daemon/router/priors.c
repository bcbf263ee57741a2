/* SPDX-License-Identifier: MIT */
/*
 * priors.c: (domain, target) quality estimates in LMDB. See priors.h.
 *
 * Key: domain, NUL, target (so a cursor lists by domain). Value: 40 bytes, little-endian:
 * u32 version (1), u32 flags (bit 0: seeded), f64 mean, u64 count, f64 seed, u64 updated_ns.
 * A value of another size or version is reported as corrupt, not guessed at.
 */
#include <errno.h>
#include <lmdb.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "priors.h"
#include "../core/lmdb-util.h"

#define VALUE_VERSION 1u
#define VALUE_SIZE 40
#define FLAG_SEEDED 1u

struct priors {
	MDB_env *env;
	MDB_dbi dbi;
	double alpha;
	bool read_only;
	char *dir;
};

struct value {
	uint32_t flags;
	double mean;
	uint64_t count;
	double seed;
	uint64_t updated_ns;
};

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t) (v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t) (v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t) p[i] << (8 * i);
	return v;
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t) p[i] << (8 * i);
	return v;
}

static void encode(const struct value *v, uint8_t out[VALUE_SIZE])
{
	uint64_t b;

	put_u32(out, VALUE_VERSION);
	put_u32(out + 4, v->flags);
	memcpy(&b, &v->mean, 8);
	put_u64(out + 8, b);
	put_u64(out + 16, v->count);
	memcpy(&b, &v->seed, 8);
	put_u64(out + 24, b);
	put_u64(out + 32, v->updated_ns);
}

static int decode(const MDB_val *d, struct value *v)
{
	const uint8_t *p = d->mv_data;
	uint64_t b;

	if (d->mv_size != VALUE_SIZE || get_u32(p) != VALUE_VERSION)
		return -EBADMSG;
	v->flags = get_u32(p + 4);
	b = get_u64(p + 8);
	memcpy(&v->mean, &b, 8);
	v->count = get_u64(p + 16);
	b = get_u64(p + 24);
	memcpy(&v->seed, &b, 8);
	v->updated_ns = get_u64(p + 32);
	if (!isfinite(v->mean) || v->mean < 0 || v->mean > 1)
		return -EBADMSG;
	return 0;
}

int priors_check_name(const char *what, const char *name, struct errmsg *e)
{
	size_t n;

	if (!name || !name[0])
		return errmsg_set(e, -EINVAL, "empty %s name", what);
	n = strlen(name);
	if (n >= PRIORS_NAME_MAX)
		return errmsg_set(e, -EINVAL, "%s name '%.40s...' is longer than %d bytes", what,
				  name, PRIORS_NAME_MAX - 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char) name[i];
		if (c <= ' ' || c == 0x7f)
			return errmsg_set(e, -EINVAL,
					  "%s name '%s': byte %zu is a space or control character",
					  what, name, i);
	}
	return 0;
}

/* A write transaction, or -EROFS for a store opened read-only. */
static int write_txn_begin(struct priors *p, MDB_txn **ret, struct errmsg *e)
{
	int rc;

	if (p->read_only)
		return errmsg_set(e, -EROFS, "the priors store %s is open read-only", p->dir);
	rc = mdb_txn_begin(p->env, NULL, 0, ret);
	if (rc != MDB_SUCCESS)
		return errmsg_set(e, lmdb_errno(rc), "priors store %s: %s", p->dir,
				  mdb_strerror(rc));
	return 0;
}

static int make_key(const char *domain, const char *target, char *buf, MDB_val *k,
		    struct errmsg *e)
{
	int r = priors_check_name("domain", domain, e);

	if (r < 0)
		return r;
	r = priors_check_name("target", target, e);
	if (r < 0)
		return r;
	size_t dl = strlen(domain), tl = strlen(target);
	memcpy(buf, domain, dl);
	buf[dl] = 0;
	memcpy(buf + dl + 1, target, tl);
	k->mv_data = buf;
	k->mv_size = dl + 1 + tl;
	return 0;
}

int priors_open(const char *dir, const struct priors_options *opts, struct priors **ret,
		struct errmsg *e)
{
	struct priors_options o = opts ? *opts : (struct priors_options){ 0 };
	struct priors *p;
	MDB_txn *txn = NULL;
	struct stat st;
	unsigned flags = MDB_NOTLS;
	int rc;

	if (!dir || !dir[0])
		return errmsg_set(e, -EINVAL, "no priors store directory given");
	if (o.alpha == 0)
		o.alpha = PRIORS_DEFAULT_ALPHA;
	if (!(o.alpha > 0 && o.alpha <= 1))
		return errmsg_set(e, -EINVAL, "EWMA weight %g: give a value in (0, 1]", o.alpha);
	if (o.read_only) {
		if (stat(dir, &st) < 0)
			return errmsg_set(e, -errno, "no priors store at %s (%m)", dir);
		flags |= MDB_RDONLY;
	} else if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		return errmsg_set(e, -errno, "creating the priors store %s: %m", dir);
	}
	if (o.no_sync)
		flags |= MDB_NOSYNC;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->alpha = o.alpha;
	p->read_only = o.read_only;
	p->dir = strdup(dir);
	if (!p->dir) {
		free(p);
		return -ENOMEM;
	}
	rc = mdb_env_create(&p->env);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_set_mapsize(p->env, o.map_size ? o.map_size
							    : PRIORS_DEFAULT_MAP_SIZE);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_open(p->env, dir, flags, 0600);
	if (rc == MDB_SUCCESS)
		rc = mdb_txn_begin(p->env, NULL, o.read_only ? MDB_RDONLY : 0, &txn);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, NULL, 0, &p->dbi);
	if (rc == MDB_SUCCESS && txn) {
		rc = o.read_only ? (mdb_txn_abort(txn), MDB_SUCCESS) : mdb_txn_commit(txn);
		txn = NULL;
	}
	if (rc != MDB_SUCCESS) {
		int r = lmdb_errno(rc);
		if (txn)
			mdb_txn_abort(txn);
		if (o.read_only && rc == ENOENT)
			errmsg_set(e, -ENOENT, "no priors store at %s: the daemon or `molly "
					       "priors record` creates it", dir);
		else
			errmsg_set(e, r, "opening the priors store %s: %s", dir, mdb_strerror(rc));
		priors_close(p);
		return r;
	}
	*ret = p;
	return 0;
}

struct priors *priors_close(struct priors *p)
{
	if (!p)
		return NULL;
	if (p->env)
		mdb_env_close(p->env);
	free(p->dir);
	free(p);
	return NULL;
}

/* Reads, changes with fn and writes one entry in one write transaction. */
static int update(struct priors *p, const char *domain, const char *target,
		  void (*fn)(struct value *v, bool exists, double x, double alpha), double x,
		  struct value *ret, struct errmsg *e)
{
	char kbuf[2 * PRIORS_NAME_MAX];
	uint8_t vbuf[VALUE_SIZE];
	struct value v = { 0 };
	MDB_val k, d;
	MDB_txn *txn;
	bool exists;
	int r, rc;

	r = make_key(domain, target, kbuf, &k, e);
	if (r < 0)
		return r;
	r = write_txn_begin(p, &txn, e);
	if (r < 0)
		return r;
	rc = mdb_get(txn, p->dbi, &k, &d);
	exists = rc == MDB_SUCCESS;
	if (exists && decode(&d, &v) < 0) {
		mdb_txn_abort(txn);
		return errmsg_set(e, -EBADMSG, "priors store %s: the entry for (%s, %s) is corrupt",
				  p->dir, domain, target);
	}
	if (!exists && rc != MDB_NOTFOUND) {
		mdb_txn_abort(txn);
		return errmsg_set(e, lmdb_errno(rc), "priors store %s: %s", p->dir,
				  mdb_strerror(rc));
	}
	fn(&v, exists, x, p->alpha);
	v.updated_ns = lmdb_realtime_ns();
	encode(&v, vbuf);
	d = (MDB_val){ .mv_size = VALUE_SIZE, .mv_data = vbuf };
	rc = mdb_put(txn, p->dbi, &k, &d, 0);
	if (rc != MDB_SUCCESS) {
		mdb_txn_abort(txn);
		return errmsg_set(e, lmdb_errno(rc), "priors store %s: writing (%s, %s): %s",
				  p->dir, domain, target, mdb_strerror(rc));
	}
	rc = mdb_txn_commit(txn);
	if (rc != MDB_SUCCESS)
		return errmsg_set(e, lmdb_errno(rc), "priors store %s: commit: %s", p->dir,
				  mdb_strerror(rc));
	if (ret)
		*ret = v;
	return 0;
}

static void apply_seed(struct value *v, bool exists, double seed, double alpha)
{
	if (!exists || v->count == 0)
		v->mean = seed;
	v->seed = seed;
	v->flags |= FLAG_SEEDED;
}

static void apply_score(struct value *v, bool exists, double score, double alpha)
{
	/* k-th score: weight max(alpha, 1/(k + seeded)); a seed is one observation. */
	uint64_t k = (exists ? v->count : 0) + 1;
	double denom = (double) k + ((exists && (v->flags & FLAG_SEEDED)) ? 1.0 : 0.0);
	double a = MAX(alpha, 1.0 / denom);

	if (!exists)
		v->mean = score;
	else
		v->mean += a * (score - v->mean);
	/* rounding must not leave [0, 1] */
	v->mean = MIN(1.0, MAX(0.0, v->mean));
	v->count = k;
}

static int check_quality(const char *what, double x, struct errmsg *e)
{
	if (!(x >= 0 && x <= 1))
		return errmsg_set(e, -EINVAL, "%s %g: give a quality between 0 and 1", what, x);
	return 0;
}

int priors_seed(struct priors *p, const char *domain, const char *target, double seed,
		struct errmsg *e)
{
	int r = check_quality("seed", seed, e);

	if (r < 0)
		return r;
	return update(p, domain, target, apply_seed, seed, NULL, e);
}

int priors_record(struct priors *p, const char *domain, const char *target, double score,
		  double *ret_mean, struct errmsg *e)
{
	struct value v;
	int r = check_quality("score", score, e);

	if (r < 0)
		return r;
	r = update(p, domain, target, apply_score, score, &v, e);
	if (r >= 0 && ret_mean)
		*ret_mean = v.mean;
	return r;
}

int priors_get(struct priors *p, const char *domain, const char *target, double *mean,
	       uint64_t *count)
{
	char kbuf[2 * PRIORS_NAME_MAX];
	struct value v;
	MDB_val k, d;
	MDB_txn *txn;
	int r, rc;

	if (!p)
		return -EINVAL;
	r = make_key(domain, target, kbuf, &k, NULL);
	if (r < 0)
		return r;
	rc = mdb_txn_begin(p->env, NULL, MDB_RDONLY, &txn);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	rc = mdb_get(txn, p->dbi, &k, &d);
	r = rc == MDB_SUCCESS ? decode(&d, &v) : lmdb_errno(rc);
	mdb_txn_abort(txn);
	if (r < 0)
		return r;
	if (mean)
		*mean = v.mean;
	if (count)
		*count = v.count;
	return 0;
}

int priors_foreach(struct priors *p, int (*fn)(const struct priors_entry *en, void *userdata),
		   void *userdata, struct errmsg *e)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, d;
	int rc, r = 0;

	if (!p || !fn)
		return -EINVAL;
	rc = mdb_txn_begin(p->env, NULL, MDB_RDONLY, &txn);
	if (rc == MDB_SUCCESS) {
		rc = mdb_cursor_open(txn, p->dbi, &cur);
		if (rc != MDB_SUCCESS)
			mdb_txn_abort(txn);
	}
	if (rc != MDB_SUCCESS)
		return errmsg_set(e, lmdb_errno(rc), "reading the priors store %s: %s", p->dir,
				  mdb_strerror(rc));
	for (MDB_cursor_op op = MDB_FIRST;; op = MDB_NEXT) {
		char kbuf[2 * PRIORS_NAME_MAX];
		struct value v;
		const char *nul;

		rc = mdb_cursor_get(cur, &k, &d, op);
		if (rc == MDB_NOTFOUND)
			break;
		if (rc != MDB_SUCCESS) {
			r = errmsg_set(e, lmdb_errno(rc), "reading the priors store %s: %s",
				       p->dir, mdb_strerror(rc));
			break;
		}
		nul = k.mv_size < sizeof(kbuf) ? memchr(k.mv_data, 0, k.mv_size) : NULL;
		if (!nul || decode(&d, &v) < 0) {
			r = errmsg_set(e, -EBADMSG, "priors store %s: a corrupt entry", p->dir);
			break;
		}
		memcpy(kbuf, k.mv_data, k.mv_size);
		kbuf[k.mv_size] = 0;
		struct priors_entry en = {
			.domain = kbuf,
			.target = kbuf + (nul - (const char *) k.mv_data) + 1,
			.mean = v.mean,
			.count = v.count,
			.seeded = v.flags & FLAG_SEEDED,
			.seed = v.seed,
			.updated_ns = v.updated_ns,
		};
		r = fn(&en, userdata);
		if (r < 0)
			break;
		r = 0;
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return r;
}

int priors_forget(struct priors *p, const char *domain, const char *target, struct errmsg *e)
{
	char kbuf[2 * PRIORS_NAME_MAX];
	MDB_val k;
	MDB_txn *txn;
	int r, rc;

	r = make_key(domain, target, kbuf, &k, e);
	if (r < 0)
		return r;
	r = write_txn_begin(p, &txn, e);
	if (r < 0)
		return r;
	rc = mdb_del(txn, p->dbi, &k, NULL);
	if (rc != MDB_SUCCESS) {
		mdb_txn_abort(txn);
		if (rc == MDB_NOTFOUND)
			return errmsg_set(e, -ENOENT, "no prior for (%s, %s)", domain, target);
		return errmsg_set(e, lmdb_errno(rc), "priors store %s: %s", p->dir,
				  mdb_strerror(rc));
	}
	rc = mdb_txn_commit(txn);
	return rc == MDB_SUCCESS ? 0 : errmsg_set(e, lmdb_errno(rc), "priors store %s: %s",
						  p->dir, mdb_strerror(rc));
}
