/* SPDX-License-Identifier: MIT */
/*
 * registry.c: see registry.h. LMDB codes stop here (lmdb_errno()).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/lmdb-util.h"
#include "../engine/quant.h"
#include "../lora/adapter.h"
#include "../lora/lora-file.h"
#include "registry.h"

#define SCHEMA_VERSION 1u
#define RECORD_VERSION 1u

struct registry {
	char *dir;                 /* owned */
	MDB_env *env;
	MDB_dbi names, versions, hashes, meta;
	bool read_only;
	uint32_t keep_versions;
	pthread_mutex_t lock;      /* serialises mutations (blob files + transactions) */
	int hold_fd;               /* .lock, held shared (registry_hold), or -EBADF */
	unsigned min_prefix;       /* hex digits of NAME@sha256:PREFIX (tests lower it) */
	atomic_uint tmp_counter;
};

/* ---- small helpers ---- */

static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t) (v >> (8 * i));
}

static void wr64(uint8_t *p, uint64_t v)
{
	wr32(p, (uint32_t) v);
	wr32(p + 4, (uint32_t) (v >> 32));
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 |
	       (uint32_t) p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t) rd32(p) | (uint64_t) rd32(p + 4) << 32;
}

static void be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t) (v >> 24);
	p[1] = (uint8_t) (v >> 16);
	p[2] = (uint8_t) (v >> 8);
	p[3] = (uint8_t) v;
}

static uint32_t rdbe32(const uint8_t *p)
{
	return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | p[3];
}

static inline void mdb_txn_abortp(MDB_txn **t)
{
	if (*t)
		mdb_txn_abort(*t);
}

static inline void mdb_cursor_closep(MDB_cursor **c)
{
	if (*c)
		mdb_cursor_close(*c);
}

static inline void closedirp(DIR **d)
{
	if (*d)
		(void) closedir(*d);
}

static int map_err(struct registry *r, int rc, const char *what, struct errmsg *e)
{
	int k = lmdb_errno(rc);

	if (rc == MDB_MAP_FULL) {
		MDB_envinfo info;
		(void) mdb_env_info(r->env, &info);
		return errmsg_set(e, -ENOSPC,
				  "the adapter registry is full (%zu bytes): raise [Adapters] "
				  "RegistryMapBytes=",
				  info.me_mapsize);
	}
	return errmsg_set(e, k, "registry: %s: %s", what, mdb_strerror(rc));
}

void registry_crash_point(const char *step)
{
	const char *t = getenv("MOLLY_TEST"), *at = getenv("MOLLY_TEST_CRASH_AT");

	if (!at || !t || strcmp(t, "1") != 0 || strcmp(at, step) != 0)
		return;
	(void) raise(SIGKILL); /* the test's crash: nothing of this process runs any more */
}

bool registry_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > REGISTRY_NAME_MAX || name[0] == '.' || name[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static int fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		r = -errno;
	(void) close(fd);
	return r;
}

static int mkdir_p1(const char *path)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* SHA-256 and size of a file's bytes; fsyncs it first when sync. */
static int hash_file(const char *path, bool sync, uint8_t hash[32], uint64_t *ret_bytes)
{
	_cleanup_free_ uint8_t *buf = malloc(1 << 20);
	struct sha256_ctx c;
	uint64_t n_bytes = 0;
	int fd, r = 0;

	if (!buf)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (sync && fsync(fd) < 0)
		r = -errno;
	sha256_init(&c);
	while (r == 0) {
		ssize_t k = read(fd, buf, 1 << 20);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (k == 0)
			break;
		sha256_update(&c, buf, (size_t) k);
		n_bytes += (uint64_t) k;
	}
	(void) close(fd);
	if (r < 0)
		return r;
	sha256_final(&c, hash);
	if (ret_bytes)
		*ret_bytes = n_bytes;
	return 0;
}

/* ---- records ---- */

/*
 * A version's record (little-endian):
 *   0 u32 RECORD_VERSION   4 u32 parent   8 u64 created_ns   16 u64 bytes   24 u32 rank
 *   28 f32 scale   32 u32 targets   36 u32 dtype   40 u8[32] hash   72 u8[32] base fingerprint
 *   104 u32 flags (bit 0 pinned)   108 u64 uses   116 u64 last_use_ns
 *   124 u32 base_quant (the ggml type of the base's weights it was imported against)
 *   128 strings: base, source, format, importer; u32 n_domains, domains; u32 n_exemplars,
 *       exemplars (each u32 length + bytes)
 */
#define REC_FIXED    128
#define REC_FLAGS    104
#define REC_USES     108
#define REC_LAST_USE 116
#define REC_PINNED   1u

struct buf {
	uint8_t *p;
	size_t n, cap;
	bool oom;
};

static void buf_put(struct buf *b, const void *d, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n > b->cap) {
		size_t cap = MAX(b->cap * 2, b->n + n + 256);
		uint8_t *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
}

static void buf_str(struct buf *b, const char *s)
{
	uint8_t l[4];
	size_t n = s ? strlen(s) : 0;

	wr32(l, (uint32_t) n);
	buf_put(b, l, 4);
	if (n)
		buf_put(b, s, n);
}

static int record_encode(const struct registry_version *v, struct buf *b)
{
	uint8_t f[REC_FIXED] = { 0 }, l[4];
	uint32_t scale_bits;

	memcpy(&scale_bits, &v->scale, 4);
	wr32(f, RECORD_VERSION);
	wr32(f + 4, v->parent);
	wr64(f + 8, v->created_ns);
	wr64(f + 16, v->bytes);
	wr32(f + 24, v->rank);
	wr32(f + 28, scale_bits);
	wr32(f + 32, v->targets);
	wr32(f + 36, v->dtype);
	memcpy(f + 40, v->hash, 32);
	memcpy(f + 72, v->base_fingerprint, 32);
	wr32(f + REC_FLAGS, v->pinned ? REC_PINNED : 0);
	wr64(f + REC_USES, v->uses);
	wr64(f + REC_LAST_USE, v->last_use_ns);
	wr32(f + 124, v->base_quant);
	buf_put(b, f, sizeof(f));
	buf_str(b, v->base);
	buf_str(b, v->source);
	buf_str(b, v->format);
	buf_str(b, v->importer);
	wr32(l, (uint32_t) v->n_domains);
	buf_put(b, l, 4);
	for (size_t i = 0; i < v->n_domains; i++)
		buf_str(b, v->domains[i]);
	wr32(l, (uint32_t) v->n_exemplars);
	buf_put(b, l, 4);
	for (size_t i = 0; i < v->n_exemplars; i++)
		buf_str(b, v->exemplars[i]);
	return b->oom ? -ENOMEM : 0;
}

struct cursor {
	const uint8_t *p;
	size_t left;
};

static int cur_u32(struct cursor *c, uint32_t *ret)
{
	if (c->left < 4)
		return -EBADMSG;
	*ret = rd32(c->p);
	c->p += 4;
	c->left -= 4;
	return 0;
}

static int cur_str(struct cursor *c, char **ret)
{
	uint32_t n;

	if (cur_u32(c, &n) < 0 || n > c->left)
		return -EBADMSG;
	*ret = strndup((const char *) c->p, n);
	if (!*ret)
		return -ENOMEM;
	c->p += n;
	c->left -= n;
	return 0;
}

static int cur_strv(struct cursor *c, char ***ret, size_t *ret_n)
{
	uint32_t n;
	int r;

	if ((r = cur_u32(c, &n)) < 0)
		return r;
	if ((uint64_t) n * 4 > c->left)
		return -EBADMSG;
	*ret = calloc(n ? n : 1, sizeof(char *));
	if (!*ret)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++, (*ret_n)++)
		if ((r = cur_str(c, &(*ret)[i])) < 0)
			return r;
	return 0;
}

void registry_version_done(struct registry_version *v)
{
	if (!v)
		return;
	free(v->base);
	free(v->source);
	free(v->format);
	free(v->importer);
	for (size_t i = 0; i < v->n_domains; i++)
		free(v->domains[i]);
	free(v->domains);
	for (size_t i = 0; i < v->n_exemplars; i++)
		free(v->exemplars[i]);
	free(v->exemplars);
	*v = (struct registry_version){ 0 };
}

static int record_decode(const char *name, size_t name_len, uint32_t version, const MDB_val *val,
			 uint32_t active, struct registry_version *v)
{
	const uint8_t *f = val->mv_data;
	struct cursor c;
	uint32_t scale_bits;
	int r;

	*v = (struct registry_version){ 0 };
	if (val->mv_size < REC_FIXED || rd32(f) != RECORD_VERSION || name_len > REGISTRY_NAME_MAX)
		return -EBADMSG;
	memcpy(v->name, name, name_len);
	v->version = version;
	v->active = version == active;
	v->parent = rd32(f + 4);
	v->created_ns = rd64(f + 8);
	v->bytes = rd64(f + 16);
	v->rank = rd32(f + 24);
	scale_bits = rd32(f + 28);
	memcpy(&v->scale, &scale_bits, 4);
	v->targets = rd32(f + 32);
	v->dtype = rd32(f + 36);
	memcpy(v->hash, f + 40, 32);
	sha256_hex(v->hash, v->hash_hex);
	memcpy(v->base_fingerprint, f + 72, 32);
	v->pinned = rd32(f + REC_FLAGS) & REC_PINNED;
	v->uses = rd64(f + REC_USES);
	v->last_use_ns = rd64(f + REC_LAST_USE);
	v->base_quant = rd32(f + 124);
	c = (struct cursor){ f + REC_FIXED, val->mv_size - REC_FIXED };
	if ((r = cur_str(&c, &v->base)) < 0 || (r = cur_str(&c, &v->source)) < 0 ||
	    (r = cur_str(&c, &v->format)) < 0 || (r = cur_str(&c, &v->importer)) < 0 ||
	    (r = cur_strv(&c, &v->domains, &v->n_domains)) < 0 ||
	    (r = cur_strv(&c, &v->exemplars, &v->n_exemplars)) < 0) {
		registry_version_done(v);
		return r;
	}
	return 0;
}

/* versions key: NAME \0 u32be(N) */
static size_t version_key(uint8_t *k, const char *name, uint32_t version)
{
	size_t n = strlen(name);

	memcpy(k, name, n);
	k[n] = 0;
	be32(k + n + 1, version);
	return n + 5;
}

/* hashes key: HASH NAME \0 u32be(N) */
static size_t hash_key(uint8_t *k, const uint8_t hash[32], const char *name, uint32_t version)
{
	memcpy(k, hash, 32);
	return 32 + version_key(k + 32, name, version);
}

struct name_rec {
	uint32_t active, last;
};

static int get_name(MDB_txn *t, struct registry *r, const char *name, struct name_rec *ret)
{
	MDB_val k = { strlen(name), (void *) name }, v;
	int rc = mdb_get(t, r->names, &k, &v);

	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	if (v.mv_size != 8)
		return -EBADMSG;
	ret->active = rd32(v.mv_data);
	ret->last = rd32((uint8_t *) v.mv_data + 4);
	return 0;
}

static int put_name(MDB_txn *t, struct registry *r, const char *name, const struct name_rec *n)
{
	uint8_t b[8];
	MDB_val k = { strlen(name), (void *) name }, v = { 8, b };

	wr32(b, n->active);
	wr32(b + 4, n->last);
	return mdb_put(t, r->names, &k, &v, 0);
}

static int get_version(MDB_txn *t, struct registry *r, const char *name, uint32_t version,
		       uint32_t active, struct registry_version *ret)
{
	uint8_t kb[REGISTRY_NAME_MAX + 8];
	MDB_val k = { version_key(kb, name, version), kb }, v;
	int rc = mdb_get(t, r->versions, &k, &v);

	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	return record_decode(name, strlen(name), version, &v, active, ret);
}

/* Whether any record refers to hash. */
static int hash_referenced(MDB_txn *t, struct registry *r, const uint8_t hash[32])
{
	_cleanup_(mdb_cursor_closep) MDB_cursor *c = NULL;
	MDB_val k = { 32, (void *) hash }, v;
	int rc = mdb_cursor_open(t, r->hashes, &c);

	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	return k.mv_size >= 32 && memcmp(k.mv_data, hash, 32) == 0;
}

/* ---- open ---- */

int registry_open(const struct registry_params *params, struct registry **ret, struct errmsg *e)
{
	_cleanup_(registry_closep) struct registry *r = NULL;
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_free_ char *p = NULL;
	unsigned txn_flags;
	int rc;

	assert_return(params && params->dir && ret, -EINVAL);
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	pthread_mutex_init(&r->lock, NULL);
	r->hold_fd = -EBADF;
	r->min_prefix = REGISTRY_MIN_PREFIX;
	r->read_only = params->read_only;
	r->keep_versions = params->keep_versions;
	r->dir = strdup(params->dir);
	if (!r->dir)
		return -ENOMEM;
	if (!r->read_only) {
		const char *sub[] = { "", "/blobs", "/blobs/sha256", "/tmp" };
		for (size_t i = 0; i < ELEMENTSOF(sub); i++) {
			free(p);
			p = NULL;
			if (asprintf(&p, "%s%s", r->dir, sub[i]) < 0)
				return -ENOMEM;
			if (mkdir_p1(p) < 0)
				return errmsg_set(e, -errno, "creating %s: %m", p);
		}
	} else if (access(r->dir, F_OK) < 0)
		return errmsg_set(e, -errno, "%s: %m", r->dir);

	rc = mdb_env_create(&r->env);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_set_maxdbs(r->env, 4);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_set_mapsize(r->env, params->map_bytes ? params->map_bytes
								     : REGISTRY_DEFAULT_MAP_BYTES);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_open(r->env, r->dir, MDB_NOTLS | (r->read_only ? MDB_RDONLY : 0), 0600);
	if (rc != MDB_SUCCESS)
		return errmsg_set(e, lmdb_errno(rc), "opening the adapter registry in %s: %s",
				  r->dir, mdb_strerror(rc));
	txn_flags = r->read_only ? MDB_RDONLY : 0;
	rc = mdb_txn_begin(r->env, NULL, txn_flags, &t);
	if (rc != MDB_SUCCESS)
		return map_err(r, rc, "begin", e);
	{
		unsigned f = r->read_only ? 0 : MDB_CREATE;
		if ((rc = mdb_dbi_open(t, "names", f, &r->names)) != MDB_SUCCESS ||
		    (rc = mdb_dbi_open(t, "versions", f, &r->versions)) != MDB_SUCCESS ||
		    (rc = mdb_dbi_open(t, "hashes", f, &r->hashes)) != MDB_SUCCESS ||
		    (rc = mdb_dbi_open(t, "meta", f, &r->meta)) != MDB_SUCCESS) {
			if (rc == MDB_NOTFOUND)
				return errmsg_set(e, -ENOENT, "%s holds no adapter registry", r->dir);
			return map_err(r, rc, "opening tables", e);
		}
	}
	if (!r->read_only) {
		uint8_t b[4];
		MDB_val k = { 6, "schema" }, v = { 4, b };
		wr32(b, SCHEMA_VERSION);
		rc = mdb_put(t, r->meta, &k, &v, 0);
		if (rc != MDB_SUCCESS)
			return map_err(r, rc, "schema", e);
	} else {
		MDB_val k = { 6, "schema" }, v;
		rc = mdb_get(t, r->meta, &k, &v);
		if (rc == MDB_SUCCESS && (v.mv_size != 4 || rd32(v.mv_data) != SCHEMA_VERSION))
			return errmsg_set(e, -EPROTO, "%s: registry schema %u is not %u", r->dir,
					  v.mv_size == 4 ? rd32(v.mv_data) : 0, SCHEMA_VERSION);
	}
	rc = mdb_txn_commit(TAKE_PTR(t));
	if (rc != MDB_SUCCESS)
		return map_err(r, rc, "commit", e);
	*ret = TAKE_PTR(r);
	return 0;
}

struct registry *registry_close(struct registry *r)
{
	if (!r)
		return NULL;
	if (r->env)
		mdb_env_close(r->env);
	if (r->hold_fd >= 0)
		(void) close(r->hold_fd);
	pthread_mutex_destroy(&r->lock);
	free(r->dir);
	free(r);
	return NULL;
}

const char *registry_dir(const struct registry *r)
{
	return r->dir;
}

void registry_test_set_min_prefix(struct registry *r, unsigned digits)
{
	r->min_prefix = digits ? digits : REGISTRY_MIN_PREFIX;
}

void registry_set_keep_versions(struct registry *r, uint32_t keep_versions)
{
	pthread_mutex_lock(&r->lock);
	r->keep_versions = keep_versions;
	pthread_mutex_unlock(&r->lock);
}

int registry_hold(struct registry *r)
{
	_cleanup_free_ char *p = NULL;
	int fd;

	if (asprintf(&p, "%s/.lock", r->dir) < 0)
		return -ENOMEM;
	fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_SH) < 0) {
		int k = -errno;
		(void) close(fd);
		return k;
	}
	if (r->hold_fd >= 0)
		(void) close(r->hold_fd);
	r->hold_fd = fd;
	return 0;
}

char *registry_blob_path(const struct registry *r, const uint8_t hash[32], char *buf, size_t size)
{
	char hex[SHA256_HEX_SIZE];

	sha256_hex(hash, hex);
	snprintf(buf, size, "%s/blobs/sha256/%.2s/%s", r->dir, hex, hex);
	return buf;
}

/* ---- versions: pruning (r->lock held, inside a write transaction) ---- */

struct hashv {
	uint8_t (*v)[32];
	size_t n, cap;
};

static int hashv_add(struct hashv *h, const uint8_t hash[32])
{
	for (size_t i = 0; i < h->n; i++)
		if (memcmp(h->v[i], hash, 32) == 0)
			return 0;
	if (h->n == h->cap) {
		size_t cap = MAX(8, h->cap * 2);
		uint8_t(*v)[32] = realloc(h->v, cap * 32);
		if (!v)
			return -ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	memcpy(h->v[h->n++], hash, 32);
	return 0;
}

/* Deletes a version's two records; its hash goes into gone. */
static int delete_version(MDB_txn *t, struct registry *r, const char *name, uint32_t version,
			  const uint8_t hash[32], struct hashv *gone)
{
	uint8_t kb[32 + REGISTRY_NAME_MAX + 8];
	MDB_val k = { version_key(kb, name, version), kb };
	int rc = mdb_del(t, r->versions, &k, NULL);

	if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
		return rc;
	k = (MDB_val){ hash_key(kb, hash, name, version), kb };
	rc = mdb_del(t, r->hashes, &k, NULL);
	if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
		return rc;
	return hashv_add(gone, hash) < 0 ? ENOMEM : MDB_SUCCESS;
}

/* Oldest first, removes versions of name beyond keep (never active, never pinned). */
static int prune_name(MDB_txn *t, struct registry *r, const char *name, uint32_t active,
		      uint32_t keep, struct hashv *gone)
{
	_cleanup_(mdb_cursor_closep) MDB_cursor *c = NULL;
	uint8_t kb[REGISTRY_NAME_MAX + 8];
	size_t nl = strlen(name), n = 0;
	struct {
		uint32_t version;
		uint8_t hash[32];
		bool keep;
	} *all = NULL;
	size_t cap = 0;
	MDB_val k, v;
	int rc;

	if (keep == 0)
		return MDB_SUCCESS;
	rc = mdb_cursor_open(t, r->versions, &c);
	if (rc != MDB_SUCCESS)
		return rc;
	k = (MDB_val){ version_key(kb, name, 0), kb };
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == MDB_SUCCESS;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		const uint8_t *kp = k.mv_data;
		if (k.mv_size != nl + 5 || memcmp(kp, name, nl) != 0 || kp[nl] != 0)
			break;
		if (v.mv_size < REC_FIXED)
			continue;
		if (n == cap) {
			cap = MAX(8, cap * 2);
			void *p = realloc(all, cap * sizeof(*all));
			if (!p) {
				free(all);
				return ENOMEM;
			}
			all = p;
		}
		all[n].version = rdbe32(kp + nl + 1);
		memcpy(all[n].hash, (uint8_t *) v.mv_data + 40, 32);
		all[n].keep = all[n].version == active ||
			      (rd32((uint8_t *) v.mv_data + REC_FLAGS) & REC_PINNED);
		n++;
	}
	if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) {
		free(all);
		return rc;
	}
	rc = MDB_SUCCESS;
	for (size_t i = 0, excess = n > keep ? n - keep : 0; i < n && excess > 0 && rc == MDB_SUCCESS;
	     i++) {
		if (all[i].keep)
			continue;
		rc = delete_version(t, r, name, all[i].version, all[i].hash, gone);
		excess--;
	}
	free(all);
	return rc;
}

/* Unlinks the blobs in gone that no record refers to any more (r->lock held, after commit). */
static void unlink_unreferenced(struct registry *r, const struct hashv *gone, uint32_t *ret_n,
				uint64_t *ret_bytes)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;

	if (gone->n == 0 || mdb_txn_begin(r->env, NULL, MDB_RDONLY, &t) != MDB_SUCCESS)
		return;
	for (size_t i = 0; i < gone->n; i++) {
		char path[4096];
		struct stat st;

		if (hash_referenced(t, r, gone->v[i]) != 0)
			continue;
		registry_blob_path(r, gone->v[i], path, sizeof(path));
		if (stat(path, &st) == 0 && unlink(path) == 0) {
			if (ret_n)
				(*ret_n)++;
			if (ret_bytes)
				*ret_bytes += (uint64_t) st.st_size;
			char *slash = strrchr(path, '/');
			*slash = 0;
			(void) fsync_dir(path);
		}
	}
}

/* ---- import ---- */

static bool strv_equal(char *const *a, size_t na, const char *const *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (strcmp(a[i], b[i]) != 0)
			return false;
	return true;
}

static int copy_strv(const char *const *src, size_t n, char ***ret, size_t *ret_n)
{
	*ret = calloc(n ? n : 1, sizeof(char *));
	if (!*ret)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++, (*ret_n)++)
		if (!((*ret)[i] = strdup(src[i])))
			return -ENOMEM;
	return 0;
}

/* Moves the finished temp blob to its content address (r->lock held). */
static int place_blob(struct registry *r, const char *tmp, const uint8_t hash[32],
		      uint64_t bytes, struct errmsg *e)
{
	char path[4096], dir[4096];
	struct stat st;
	bool made;

	registry_blob_path(r, hash, path, sizeof(path));
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = 0;
	made = access(dir, F_OK) < 0;
	if (mkdir_p1(dir) < 0)
		return errmsg_set(e, -errno, "creating %s: %m", dir);
	if (made) {
		char parent[4096];
		snprintf(parent, sizeof(parent), "%s/blobs/sha256", r->dir);
		(void) fsync_dir(parent);
	}
	if (stat(path, &st) == 0 && (uint64_t) st.st_size == bytes) {
		/* The same content is stored already (deduplicated). A blob damaged behind our
		 * back is fsck's to report, and a later import of it replaces it. */
		(void) unlink(tmp);
		return 0;
	}
	if (rename(tmp, path) < 0)
		return errmsg_set(e, -errno, "renaming the blob into %s: %m", path);
	if (fsync_dir(dir) < 0)
		return errmsg_set(e, -errno, "fsync %s: %m", dir);
	return 0;
}

int registry_import(struct registry *r, const struct lora_adapter *a,
		    const struct registry_import *imp, struct registry_version *ret,
		    struct errmsg *e)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_(registry_version_done) struct registry_version v = { 0 };
	struct lora_adapter_meta empty = { .name = (char *) "" };
	struct lora_write_opts wo = { .meta = &empty };
	struct lora_adapter copy;
	struct name_rec nr = { 0, 0 };
	struct hashv gone = { 0 };
	struct buf rec = { 0 };
	char tmp[4200], tmpdir[4096];
	uint8_t hash[32], kb[32 + REGISTRY_NAME_MAX + 8];
	uint64_t bytes;
	const char *const *domains;
	const char *const *exemplars;
	size_t n_domains, n_exemplars;
	int rc, k;

	assert_return(r && a && imp && imp->name, -EINVAL);
	if (r->read_only)
		return errmsg_set(e, -EROFS, "the registry is open read-only");
	if (!registry_name_valid(imp->name))
		return errmsg_set(e, -EINVAL,
				  "'%.80s' is not a valid adapter name (letters, digits, '.', '_', "
				  "'-'; at most %d)",
				  imp->name, REGISTRY_NAME_MAX);
	domains = imp->has_meta ? imp->domains : (const char *const *) a->meta.domains;
	n_domains = imp->has_meta ? imp->n_domains : a->meta.n_domains;
	exemplars = imp->has_meta ? imp->exemplars : (const char *const *) a->meta.exemplars;
	n_exemplars = imp->has_meta ? imp->n_exemplars : a->meta.n_exemplars;

	/* 1. The deterministic blob, in tmp/ (lora_file_write: written, fsynced, renamed). */
	copy = *a;
	copy.base_description = (char *) (imp->base_description ? imp->base_description
								: a->base_description);
	copy.has_base_weights_hash = false;
	snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", r->dir);
	(void) mkdir_p1(tmpdir);
	snprintf(tmp, sizeof(tmp), "%s/import-%d-%u.molly", tmpdir, (int) getpid(),
		 atomic_fetch_add(&r->tmp_counter, 1));
	k = lora_file_write(&copy, tmp, &wo, e);
	if (k < 0)
		return k;
	registry_crash_point("import-temp-written");
	k = hash_file(tmp, true, hash, &bytes);
	if (k >= 0)
		k = fsync_dir(tmpdir);
	if (k < 0) {
		(void) unlink(tmp);
		return errmsg_set(e, k, "hashing %s: %s", tmp, strerror(-k));
	}
	registry_crash_point("import-temp-synced");

	pthread_mutex_lock(&r->lock);
	k = place_blob(r, tmp, hash, bytes, e);
	if (k < 0) {
		(void) unlink(tmp);
		goto out;
	}
	registry_crash_point("import-renamed");

	/* 2. The records, in one transaction. */
	rc = mdb_txn_begin(r->env, NULL, 0, &t);
	if (rc != MDB_SUCCESS) {
		k = map_err(r, rc, "begin", e);
		goto out;
	}
	k = get_name(t, r, imp->name, &nr);
	if (k < 0 && k != -ENOENT)
		goto out_msg;
	if (k == 0) {
		struct registry_version cur;
		k = get_version(t, r, imp->name, nr.active, nr.active, &cur);
		if (k < 0)
			goto out_msg;
		bool same = memcmp(cur.hash, hash, 32) == 0 &&
			    strv_equal(cur.domains, cur.n_domains, domains, n_domains) &&
			    strv_equal(cur.exemplars, cur.n_exemplars, exemplars, n_exemplars);
		if (same) {
			if (ret)
				*ret = cur;
			else
				registry_version_done(&cur);
			k = 1;
			goto out;
		}
		registry_version_done(&cur);
	}
	snprintf(v.name, sizeof(v.name), "%s", imp->name);
	v.version = nr.last + 1;
	v.active = true;
	v.parent = nr.active;
	memcpy(v.hash, hash, 32);
	sha256_hex(hash, v.hash_hex);
	v.created_ns = lmdb_realtime_ns();
	v.bytes = bytes;
	v.rank = a->max_rank;
	v.scale = a->n_mats ? a->mats[0].scale : 0;
	v.targets = lora_adapter_targets(a);
	v.dtype = a->n_mats ? (a->mats[0].dtype == GGML_TYPE_F32 ? GGML_TYPE_F16 : a->mats[0].dtype)
			    : 0;
	memcpy(v.base_fingerprint, a->base_fingerprint, 32);
	v.base_quant = imp->base_quant;
	v.base = strdup(copy.base_description ? copy.base_description : "");
	v.source = strdup(imp->source ? imp->source : "");
	v.format = strdup(lora_format_name(lora_adapter_format(a)));
	v.importer = strdup(imp->importer ? imp->importer : "");
	if (!v.base || !v.source || !v.format || !v.importer ||
	    copy_strv(domains, n_domains, &v.domains, &v.n_domains) < 0 ||
	    copy_strv(exemplars, n_exemplars, &v.exemplars, &v.n_exemplars) < 0 ||
	    record_encode(&v, &rec) < 0) {
		k = -ENOMEM;
		goto out;
	}
	{
		MDB_val key = { version_key(kb, imp->name, v.version), kb }, val = { rec.n, rec.p };
		rc = mdb_put(t, r->versions, &key, &val, 0);
	}
	if (rc == MDB_SUCCESS) {
		MDB_val key = { hash_key(kb, hash, imp->name, v.version), kb }, val = { 0, "" };
		rc = mdb_put(t, r->hashes, &key, &val, 0);
	}
	nr.active = v.version;
	nr.last = v.version;
	if (rc == MDB_SUCCESS)
		rc = put_name(t, r, imp->name, &nr);
	if (rc == MDB_SUCCESS)
		rc = prune_name(t, r, imp->name, nr.active, r->keep_versions, &gone);
	if (rc != MDB_SUCCESS) {
		k = map_err(r, rc, "recording the version", e);
		goto out;
	}
	registry_crash_point("import-before-commit");
	rc = mdb_txn_commit(TAKE_PTR(t));
	if (rc != MDB_SUCCESS) {
		k = map_err(r, rc, "commit", e);
		goto out;
	}
	registry_crash_point("import-after-commit");
	unlink_unreferenced(r, &gone, NULL, NULL);
	if (ret) {
		*ret = v;
		v = (struct registry_version){ 0 };
	}
	k = 0;
	goto out;
out_msg:
	k = errmsg_set(e, k, "registry: reading '%s': %s", imp->name, strerror(-k));
out:
	pthread_mutex_unlock(&r->lock);
	free(gone.v);
	free(rec.p);
	return k;
}

/* ---- lookups ---- */

size_t registry_spec_name_len(const char *spec)
{
	const char *at = strchr(spec, '@');

	return at ? (size_t) (at - spec) : strlen(spec);
}

int registry_resolve(struct registry *r, const char *spec, struct registry_version *ret,
		     struct errmsg *e)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_(mdb_cursor_closep) MDB_cursor *c = NULL;
	char name[REGISTRY_NAME_MAX + 1], prefix[SHA256_HEX_SIZE] = "";
	size_t nl = registry_spec_name_len(spec), pl = 0;
	const char *at = spec[nl] == '@' ? spec + nl + 1 : NULL;
	uint32_t want = 0;
	struct name_rec nr;
	int rc, k;

	assert_return(r && spec && ret, -EINVAL);
	if (nl == 0 || nl > REGISTRY_NAME_MAX)
		return errmsg_set(e, nl ? -ENOENT : -EINVAL, "'%.80s' names no adapter", spec);
	memcpy(name, spec, nl);
	name[nl] = 0;
	if (!registry_name_valid(name))
		return errmsg_set(e, -ENOENT, "'%.80s' names no adapter", spec);
	if (at && strncmp(at, "sha256:", 7) == 0) {
		const char *h = at + 7;
		pl = strlen(h);
		if (pl < r->min_prefix || pl > 64)
			return errmsg_set(e, -EINVAL,
					  "'%.100s': a hash prefix needs %u to 64 hex digits",
					  spec, r->min_prefix);
		for (size_t i = 0; i < pl; i++) {
			if (!isxdigit((unsigned char) h[i]))
				return errmsg_set(e, -EINVAL, "'%.100s': '%c' is not a hex digit",
						  spec, h[i]);
			prefix[i] = (char) tolower((unsigned char) h[i]);
		}
		prefix[pl] = 0;
	} else if (at) {
		char *end;
		unsigned long n;
		errno = 0;
		n = strtoul(at, &end, 10);
		if (!*at || *end || errno || n == 0 || n > UINT32_MAX || !isdigit((unsigned char) *at))
			return errmsg_set(e, -EINVAL,
					  "'%.100s': after '@' comes a version number (1, 2, ...) "
					  "or sha256:HEX",
					  spec);
		want = (uint32_t) n;
	}

	rc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &t);
	if (rc != MDB_SUCCESS)
		return map_err(r, rc, "begin", e);
	k = get_name(t, r, name, &nr);
	if (k == -ENOENT)
		return errmsg_set(e, -ENOENT, "no adapter '%s' in the registry", name);
	if (k < 0)
		return errmsg_set(e, k, "registry: '%s': %s", name, strerror(-k));
	if (!at || want) {
		uint32_t v = want ? want : nr.active;
		k = get_version(t, r, name, v, nr.active, ret);
		if (k == -ENOENT)
			return errmsg_set(e, -ENOENT, "adapter '%s' has no version %u (see `molly "
						      "adapters history %s`)",
					  name, v, name);
		if (k < 0)
			return errmsg_set(e, k, "registry: '%s@%u': %s", name, v, strerror(-k));
		return 0;
	}

	/* A hash prefix: scan the name's versions (newest match wins among equal contents). */
	{
		uint8_t kb[REGISTRY_NAME_MAX + 8];
		MDB_val key = { version_key(kb, name, 0), kb }, val;
		uint32_t found = 0, n_distinct = 0;
		uint8_t found_hash[32];
		char cands[400] = "";
		size_t cl = 0;

		rc = mdb_cursor_open(t, r->versions, &c);
		if (rc != MDB_SUCCESS)
			return map_err(r, rc, "cursor", e);
		for (rc = mdb_cursor_get(c, &key, &val, MDB_SET_RANGE); rc == MDB_SUCCESS;
		     rc = mdb_cursor_get(c, &key, &val, MDB_NEXT)) {
			const uint8_t *kp = key.mv_data;
			char hex[SHA256_HEX_SIZE];
			if (key.mv_size != nl + 5 || memcmp(kp, name, nl) != 0 || kp[nl] != 0)
				break;
			if (val.mv_size < REC_FIXED)
				continue;
			sha256_hex((const uint8_t *) val.mv_data + 40, hex);
			if (strncmp(hex, prefix, pl) != 0)
				continue;
			if (!found || memcmp(found_hash, (uint8_t *) val.mv_data + 40, 32) != 0) {
				if (found)
					n_distinct++;
				else
					n_distinct = 1;
				if (cl < sizeof(cands) - 40)
					cl += (size_t) snprintf(cands + cl, sizeof(cands) - cl,
								"%s%s@%u (sha256:%.16s)",
								cl ? ", " : "", name,
								rdbe32(kp + nl + 1), hex);
			}
			found = rdbe32(kp + nl + 1);
			memcpy(found_hash, (uint8_t *) val.mv_data + 40, 32);
		}
		if (!found)
			return errmsg_set(e, -ENOENT, "adapter '%s' has no version with hash %s...",
					  name, prefix);
		if (n_distinct > 1)
			return errmsg_set(e, -ENOTUNIQ,
					  "'%s' is ambiguous: it matches %s; give more hex digits",
					  spec, cands);
		mdb_cursor_close(TAKE_PTR(c));
		k = get_version(t, r, name, found, nr.active, ret);
		if (k < 0)
			return errmsg_set(e, k, "registry: '%s@%u': %s", name, found, strerror(-k));
		return 0;
	}
}

int registry_list(struct registry *r, int (*fn)(const struct registry_version *v, void *ud),
		  void *ud)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_(mdb_cursor_closep) MDB_cursor *c = NULL;
	MDB_val k, v;
	int rc, res = 0;

	rc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &t);
	if (rc == MDB_SUCCESS)
		rc = mdb_cursor_open(t, r->names, &c);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == MDB_SUCCESS && res == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		char name[REGISTRY_NAME_MAX + 1];
		struct registry_version rv;
		uint8_t kb[REGISTRY_NAME_MAX + 8];
		MDB_val vk, vv;
		uint32_t active;

		if (k.mv_size > REGISTRY_NAME_MAX || v.mv_size != 8)
			continue;
		memcpy(name, k.mv_data, k.mv_size);
		name[k.mv_size] = 0;
		active = rd32(v.mv_data);
		vk = (MDB_val){ version_key(kb, name, active), kb };
		if (mdb_get(t, r->versions, &vk, &vv) != MDB_SUCCESS)
			continue;
		if (record_decode(name, k.mv_size, active, &vv, active, &rv) < 0)
			continue;
		res = fn(&rv, ud);
		registry_version_done(&rv);
	}
	if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
		return lmdb_errno(rc);
	return res;
}

int registry_count(struct registry *r, size_t *ret)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	MDB_stat st;
	int rc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &t);

	if (rc == MDB_SUCCESS)
		rc = mdb_stat(t, r->names, &st);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	*ret = st.ms_entries;
	return 0;
}

int registry_history(struct registry *r, const char *name,
		     int (*fn)(const struct registry_version *v, void *ud), void *ud)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_(mdb_cursor_closep) MDB_cursor *c = NULL;
	uint8_t kb[REGISTRY_NAME_MAX + 8];
	size_t nl;
	struct name_rec nr;
	MDB_val k, v;
	int rc, res = 0;

	if (!registry_name_valid(name))
		return -ENOENT;
	nl = strlen(name);
	rc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &t);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	res = get_name(t, r, name, &nr);
	if (res < 0)
		return res;
	rc = mdb_cursor_open(t, r->versions, &c);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	k = (MDB_val){ version_key(kb, name, 0), kb };
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == MDB_SUCCESS && res == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		const uint8_t *kp = k.mv_data;
		struct registry_version rv;
		if (k.mv_size != nl + 5 || memcmp(kp, name, nl) != 0 || kp[nl] != 0)
			break;
		if (record_decode(name, nl, rdbe32(kp + nl + 1), &v, nr.active, &rv) < 0)
			continue;
		res = fn(&rv, ud);
		registry_version_done(&rv);
	}
	if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
		return lmdb_errno(rc);
	return res;
}

/* ---- mutations ---- */

/* A mutation's start: name checked, the lock taken, a write transaction begun in *t and the
 * name's record read. On failure the lock is released and e says why (*t, if begun, is the
 * caller's to abort). */
static int mutation_begin(struct registry *r, const char *name, MDB_txn **t, struct name_rec *nr,
			  struct errmsg *e)
{
	int rc, k;

	if (!registry_name_valid(name))
		return errmsg_set(e, -ENOENT, "no adapter '%.80s' in the registry", name);
	pthread_mutex_lock(&r->lock);
	rc = mdb_txn_begin(r->env, NULL, 0, t);
	if (rc != MDB_SUCCESS) {
		k = map_err(r, rc, "begin", e);
		goto fail;
	}
	k = get_name(*t, r, name, nr);
	if (k < 0) {
		k = errmsg_set(e, k, "no adapter '%s' in the registry", name);
		goto fail;
	}
	return 0;
fail:
	pthread_mutex_unlock(&r->lock);
	return k;
}

int registry_rollback(struct registry *r, const char *name, uint32_t version, struct errmsg *e)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	struct registry_version rv;
	struct name_rec nr;
	int rc, k;

	k = mutation_begin(r, name, &t, &nr, e);
	if (k < 0)
		return k;
	k = get_version(t, r, name, version, nr.active, &rv);
	if (k < 0) {
		k = errmsg_set(e, k, "adapter '%s' has no version %u", name, version);
		goto out;
	}
	registry_version_done(&rv);
	nr.active = version;
	rc = put_name(t, r, name, &nr);
	if (rc == MDB_SUCCESS)
		rc = mdb_txn_commit(TAKE_PTR(t));
	k = rc == MDB_SUCCESS ? 0 : map_err(r, rc, "rollback", e);
out:
	pthread_mutex_unlock(&r->lock);
	return k;
}

int registry_remove(struct registry *r, const char *name, struct errmsg *e)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_(mdb_cursor_closep) MDB_cursor *c = NULL;
	uint8_t kb[32 + REGISTRY_NAME_MAX + 8];
	struct hashv gone = { 0 };
	size_t nl;
	struct name_rec nr;
	MDB_val k, v;
	int rc, res;

	res = mutation_begin(r, name, &t, &nr, e);
	if (res < 0)
		return res;
	nl = strlen(name);
	rc = mdb_cursor_open(t, r->versions, &c);
	k = (MDB_val){ version_key(kb, name, 0), kb };
	for (rc = rc ?: mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == MDB_SUCCESS;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		const uint8_t *kp = k.mv_data;
		uint8_t hk[32 + REGISTRY_NAME_MAX + 8];
		MDB_val key;
		if (k.mv_size != nl + 5 || memcmp(kp, name, nl) != 0 || kp[nl] != 0)
			break;
		if (v.mv_size < REC_FIXED)
			continue;
		key = (MDB_val){ hash_key(hk, (uint8_t *) v.mv_data + 40, name, rdbe32(kp + nl + 1)),
				 hk };
		if (hashv_add(&gone, (uint8_t *) v.mv_data + 40) < 0) {
			rc = ENOMEM;
			break;
		}
		rc = mdb_del(t, r->hashes, &key, NULL);
		if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
			break;
		rc = mdb_cursor_del(c, 0);
		if (rc != MDB_SUCCESS)
			break;
	}
	if (rc == MDB_NOTFOUND)
		rc = MDB_SUCCESS;
	if (rc == MDB_SUCCESS) {
		MDB_val key = { nl, (void *) name };
		rc = mdb_del(t, r->names, &key, NULL);
	}
	if (rc != MDB_SUCCESS) {
		res = map_err(r, rc, "removing", e);
		goto out;
	}
	mdb_cursor_close(TAKE_PTR(c));
	registry_crash_point("remove-before-commit");
	rc = mdb_txn_commit(TAKE_PTR(t));
	if (rc != MDB_SUCCESS) {
		res = map_err(r, rc, "commit", e);
		goto out;
	}
	registry_crash_point("remove-after-commit");
	unlink_unreferenced(r, &gone, NULL, NULL);
	registry_crash_point("remove-after-unlink");
	res = 0;
out:
	pthread_mutex_unlock(&r->lock);
	free(gone.v);
	return res;
}

/* Rewrites a version's fixed fields with fn. */
static int update_version(struct registry *r, const char *name, uint32_t version,
			  void (*fn)(uint8_t *rec, void *ud), void *ud, struct errmsg *e)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_free_ uint8_t *copy = NULL;
	uint8_t kb[REGISTRY_NAME_MAX + 8];
	struct name_rec nr;
	MDB_val k, v;
	int rc, res;

	res = mutation_begin(r, name, &t, &nr, e);
	if (res < 0)
		return res;
	if (version == 0)
		version = nr.active;
	k = (MDB_val){ version_key(kb, name, version), kb };
	rc = mdb_get(t, r->versions, &k, &v);
	if (rc != MDB_SUCCESS || v.mv_size < REC_FIXED) {
		res = errmsg_set(e, -ENOENT, "adapter '%s' has no version %u", name, version);
		goto out;
	}
	copy = malloc(v.mv_size);
	if (!copy) {
		res = -ENOMEM;
		goto out;
	}
	memcpy(copy, v.mv_data, v.mv_size);
	fn(copy, ud);
	v.mv_data = copy;
	rc = mdb_put(t, r->versions, &k, &v, 0);
	if (rc == MDB_SUCCESS)
		rc = mdb_txn_commit(TAKE_PTR(t));
	res = rc == MDB_SUCCESS ? 0 : map_err(r, rc, "update", e);
out:
	pthread_mutex_unlock(&r->lock);
	return res;
}

static void set_pinned(uint8_t *rec, void *ud)
{
	uint32_t f = rd32(rec + REC_FLAGS);

	wr32(rec + REC_FLAGS, *(bool *) ud ? f | REC_PINNED : f & ~REC_PINNED);
}

int registry_set_pinned(struct registry *r, const char *name, uint32_t version, bool pinned,
			struct errmsg *e)
{
	return update_version(r, name, version, set_pinned, &pinned, e);
}

struct uses {
	uint64_t n, last;
};

static void add_uses(uint8_t *rec, void *ud)
{
	struct uses *u = ud;

	wr64(rec + REC_USES, rd64(rec + REC_USES) + u->n);
	if (u->last > rd64(rec + REC_LAST_USE))
		wr64(rec + REC_LAST_USE, u->last);
}

int registry_add_uses(struct registry *r, const char *name, uint32_t version, uint64_t uses,
		      uint64_t last_use_ns)
{
	struct uses u = { uses, last_use_ns };

	return update_version(r, name, version, add_uses, &u, NULL);
}

/* ---- notes ---- */

int registry_note_get(struct registry *r, const char *key, void *buf, size_t size)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	MDB_val k = { strlen(key), (void *) key }, v;
	int rc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &t);

	if (rc == MDB_SUCCESS)
		rc = mdb_get(t, r->meta, &k, &v);
	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	if (v.mv_size != size)
		return -ENOENT;
	memcpy(buf, v.mv_data, size);
	return 0;
}

int registry_note_put(struct registry *r, const char *key, const void *buf, size_t size)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	MDB_val k = { strlen(key), (void *) key }, v = { size, (void *) buf };
	int rc;

	pthread_mutex_lock(&r->lock);
	rc = mdb_txn_begin(r->env, NULL, 0, &t);
	if (rc == MDB_SUCCESS)
		rc = mdb_put(t, r->meta, &k, &v, 0);
	if (rc == MDB_SUCCESS)
		rc = mdb_txn_commit(TAKE_PTR(t));
	pthread_mutex_unlock(&r->lock);
	return lmdb_errno(rc);
}

/* ---- the blob store's files: GC and fsck share this walk ---- */

enum blob_kind { BLOB_REFERENCED, BLOB_ORPHAN, BLOB_TEMP };

/* Calls fn for every file under blobs/sha256 and tmp/ with what it is. A temp file of a live
 * process (an import in progress) is skipped unless include_live. */
static int walk_files(const char *dir, MDB_env *env, MDB_dbi hashes, bool include_live,
		      void (*fn)(const char *path, enum blob_kind kind, uint64_t bytes, void *ud),
		      void *ud)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_(closedirp) DIR *top = NULL;
	char path[4096];
	struct dirent *de;
	int rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &t);

	if (rc != MDB_SUCCESS)
		return lmdb_errno(rc);
	snprintf(path, sizeof(path), "%s/blobs/sha256", dir);
	top = opendir(path);
	while (top && (de = readdir(top))) {
		_cleanup_(closedirp) DIR *sub = NULL;
		char subp[4400];
		struct dirent *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(subp, sizeof(subp), "%s/%s", path, de->d_name);
		sub = opendir(subp);
		while (sub && (f = readdir(sub))) {
			char fp[4700];
			uint8_t hash[32];
			struct stat st;
			enum blob_kind kind;

			if (strcmp(f->d_name, ".") == 0 || strcmp(f->d_name, "..") == 0)
				continue;
			snprintf(fp, sizeof(fp), "%s/%s", subp, f->d_name);
			if (stat(fp, &st) < 0 || !S_ISREG(st.st_mode))
				continue;
			if (strlen(f->d_name) != 64 || sha256_from_hex(f->d_name, hash) < 0 ||
			    strncmp(f->d_name, de->d_name, 2) != 0)
				kind = BLOB_TEMP;
			else {
				MDB_val k = { 32, hash }, v;
				_cleanup_(mdb_cursor_closep) MDB_cursor *c = NULL;
				kind = BLOB_ORPHAN;
				if (mdb_cursor_open(t, hashes, &c) == MDB_SUCCESS &&
				    mdb_cursor_get(c, &k, &v, MDB_SET_RANGE) == MDB_SUCCESS &&
				    k.mv_size >= 32 && memcmp(k.mv_data, hash, 32) == 0)
					kind = BLOB_REFERENCED;
			}
			fn(fp, kind, (uint64_t) st.st_size, ud);
		}
	}
	snprintf(path, sizeof(path), "%s/tmp", dir);
	{
		_cleanup_(closedirp) DIR *td = opendir(path);
		while (td && (de = readdir(td))) {
			char fp[4400];
			struct stat st;
			int pid;

			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			if (!include_live && sscanf(de->d_name, "import-%d-", &pid) == 1 &&
			    (pid == getpid() || kill(pid, 0) == 0 || errno == EPERM))
				continue; /* an import in progress */
			snprintf(fp, sizeof(fp), "%s/%s", path, de->d_name);
			if (stat(fp, &st) < 0 || !S_ISREG(st.st_mode))
				continue;
			fn(fp, BLOB_TEMP, (uint64_t) st.st_size, ud);
		}
	}
	return 0;
}

struct sweep {
	uint32_t n;
	uint64_t bytes;
};

static void sweep_one(const char *path, enum blob_kind kind, uint64_t bytes, void *ud)
{
	struct sweep *s = ud;

	if (kind == BLOB_REFERENCED)
		return;
	if (unlink(path) == 0 && kind == BLOB_ORPHAN) {
		s->n++;
		s->bytes += bytes;
	}
}

int registry_gc(struct registry *r, uint32_t *ret_blobs, uint64_t *ret_bytes, struct errmsg *e)
{
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_(mdb_cursor_closep) MDB_cursor *c = NULL;
	struct hashv gone = { 0 };
	struct sweep s = { 0 };
	MDB_val k, v;
	int rc, res = 0;

	if (r->read_only)
		return errmsg_set(e, -EROFS, "the registry is open read-only");
	pthread_mutex_lock(&r->lock);
	rc = mdb_txn_begin(r->env, NULL, 0, &t);
	if (rc == MDB_SUCCESS && r->keep_versions > 0) {
		/* names first (a cursor on names while deleting versions is fine: other tables) */
		char **names = NULL;
		uint32_t *active = NULL;
		size_t n = 0, cap = 0;
		rc = mdb_cursor_open(t, r->names, &c);
		for (rc = rc ?: mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
		     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
			if (k.mv_size > REGISTRY_NAME_MAX || v.mv_size != 8)
				continue;
			if (n == cap) {
				cap = MAX(16, cap * 2);
				char **nn = realloc(names, cap * sizeof(*names));
				uint32_t *na = nn ? realloc(active, cap * sizeof(*active)) : NULL;
				if (nn)
					names = nn;
				if (!nn || !na) {
					rc = ENOMEM;
					break;
				}
				active = na;
			}
			names[n] = strndup(k.mv_data, k.mv_size);
			active[n] = rd32(v.mv_data);
			if (!names[n]) {
				rc = ENOMEM;
				break;
			}
			n++;
		}
		if (rc == MDB_NOTFOUND)
			rc = MDB_SUCCESS;
		mdb_cursor_close(TAKE_PTR(c));
		for (size_t i = 0; i < n && rc == MDB_SUCCESS; i++)
			rc = prune_name(t, r, names[i], active[i], r->keep_versions, &gone);
		for (size_t i = 0; i < n; i++)
			free(names[i]);
		free(names);
		free(active);
	}
	if (rc == MDB_SUCCESS)
		rc = mdb_txn_commit(TAKE_PTR(t));
	if (rc != MDB_SUCCESS) {
		res = map_err(r, rc, "gc", e);
		goto out;
	}
	unlink_unreferenced(r, &gone, &s.n, &s.bytes);
	res = walk_files(r->dir, r->env, r->hashes, false, sweep_one, &s);
	if (res < 0)
		res = errmsg_set(e, res, "gc: %s", strerror(-res));
out:
	pthread_mutex_unlock(&r->lock);
	free(gone.v);
	if (ret_blobs)
		*ret_blobs = s.n;
	if (ret_bytes)
		*ret_bytes = s.bytes;
	return res;
}

/* ---- fsck ---- */

struct fsck {
	void (*report)(enum registry_finding kind, const char *text, void *ud);
	void *ud;
	bool repair;
	size_t errors, warnings;
};

static void fsck_file(const char *path, enum blob_kind kind, uint64_t bytes, void *ud)
{
	struct fsck *f = ud;
	char line[4800];

	if (kind == BLOB_REFERENCED)
		return;
	f->warnings++;
	snprintf(line, sizeof(line), "%s %s (%" PRIu64 " bytes)",
		 kind == BLOB_ORPHAN ? "orphan blob (no record refers to it):"
				     : "leftover temporary file:",
		 path, bytes);
	f->report(REGISTRY_FSCK_WARNING, line, f->ud);
	if (f->repair && unlink(path) == 0) {
		snprintf(line, sizeof(line), "removed %s", path);
		f->report(REGISTRY_FSCK_REPAIRED, line, f->ud);
	}
}

int registry_fsck(const char *dir, bool repair,
		  void (*report)(enum registry_finding kind, const char *text, void *ud), void *ud,
		  size_t *ret_warnings, struct errmsg *e)
{
	struct registry_params p = { .dir = dir, .read_only = true };
	_cleanup_(registry_closep) struct registry *r = NULL;
	_cleanup_(mdb_txn_abortp) MDB_txn *t = NULL;
	_cleanup_(mdb_cursor_closep) MDB_cursor *c = NULL;
	struct fsck f = { .report = report, .ud = ud, .repair = repair };
	int lock_fd = -EBADF, rc, k;
	MDB_val key, val;

	if (repair) {
		_cleanup_free_ char *lp = NULL;
		if (asprintf(&lp, "%s/.lock", dir) < 0)
			return -ENOMEM;
		lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (lock_fd < 0)
			return errmsg_set(e, -errno, "%s: %m", lp);
		if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
			(void) close(lock_fd);
			return errmsg_set(e, -EBUSY,
					  "a daemon is using the registry in %s: stop it before "
					  "--repair",
					  dir);
		}
	}
	k = registry_open(&p, &r, e);
	if (k < 0)
		goto out;
	rc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &t);
	if (rc == MDB_SUCCESS)
		rc = mdb_cursor_open(t, r->versions, &c);
	if (rc != MDB_SUCCESS) {
		k = map_err(r, rc, "fsck", e);
		goto out;
	}
	for (rc = mdb_cursor_get(c, &key, &val, MDB_FIRST); rc == MDB_SUCCESS;
	     rc = mdb_cursor_get(c, &key, &val, MDB_NEXT)) {
		const uint8_t *kp = key.mv_data;
		char path[4096], hex[SHA256_HEX_SIZE], line[4400];
		size_t nl = key.mv_size >= 5 ? key.mv_size - 5 : 0;
		uint8_t got[32];
		uint64_t bytes;
		int h;

		if (key.mv_size < 6 || kp[nl] != 0 || val.mv_size < REC_FIXED) {
			f.errors++;
			report(REGISTRY_FSCK_ERROR, "a malformed version record", ud);
			continue;
		}
		registry_blob_path(r, (uint8_t *) val.mv_data + 40, path, sizeof(path));
		sha256_hex((uint8_t *) val.mv_data + 40, hex);
		h = hash_file(path, false, got, &bytes);
		if (h < 0) {
			f.errors++;
			snprintf(line, sizeof(line), "%.*s@%u: blob %s: %s", (int) nl,
				 (const char *) kp, rdbe32(kp + nl + 1), path, strerror(-h));
			report(REGISTRY_FSCK_ERROR, line, ud);
		} else if (memcmp(got, (uint8_t *) val.mv_data + 40, 32) != 0 ||
			   bytes != rd64((uint8_t *) val.mv_data + 16)) {
			f.errors++;
			snprintf(line, sizeof(line),
				 "%.*s@%u: blob %s does not hash to its name (corrupt)", (int) nl,
				 (const char *) kp, rdbe32(kp + nl + 1), path);
			report(REGISTRY_FSCK_ERROR, line, ud);
		}
	}
	mdb_cursor_close(TAKE_PTR(c));
	mdb_txn_abort(TAKE_PTR(t));
	k = walk_files(dir, r->env, r->hashes, true, fsck_file, &f);
	if (k < 0) {
		k = errmsg_set(e, k, "fsck: %s", strerror(-k));
		goto out;
	}
	if (ret_warnings)
		*ret_warnings = f.warnings;
	k = (int) MIN(f.errors, (size_t) INT32_MAX);
out:
	if (lock_fd >= 0)
		(void) close(lock_fd);
	return k;
}
