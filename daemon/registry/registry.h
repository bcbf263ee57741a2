/* SPDX-License-Identifier: MIT */
/*
 * registry.h: the adapter library on disk — content-addressed, versioned, crash-safe.
 *
 * Layout under DIR (<StateDirectory>/registry):
 *   data.mdb, lock.mdb      LMDB (map size [Adapters] RegistryMapBytes=)
 *   blobs/sha256/AB/HEX     one blob per content: the adapter as Molly's own adapter file
 *                           (lora-file.h) written deterministically, HEX = SHA-256 of the file
 *   tmp/                    imports in progress (leftovers after a crash: fsck warns)
 *   .lock                   flock: a daemon holds it shared, `fsck --repair` exclusive
 *
 * A blob holds the weights and their configuration only (name "", no domains, no exemplars,
 * the base described from the loaded base, no base weights hash), so the same weights and
 * configuration give the same hash whatever format and file name they came from. Names,
 * domains, exemplars and provenance are records in LMDB:
 *   names     NAME → active version, last version number
 *   versions  NAME \0 u32be(N) → the version's record (hash, created, bytes, parent, rank,
 *             scale, targets, dtype, base fingerprint, quantisation and description, pinned,
 *             uses, last use,
 *             provenance: source path, format, importer; domains; exemplars)
 *   hashes    HASH[32] NAME \0 u32be(N) → "" (who refers to a blob: GC, fsck, removal)
 *   meta      "schema" → 1; "drop/ENTRY" → what the drop folder held when it was imported
 *
 * Import order, so that a crash at any point leaves the old state or the new one and never a
 * record without its blob: the blob goes to tmp/ (written, fsynced), is renamed into blobs/
 * (directory fsynced), and only then is the LMDB transaction committed. A removal commits
 * first and unlinks blobs no record refers to afterwards. What a crash can leave is an orphan
 * blob or a temp file: fsck warns, `--repair` (or registry_gc()) removes them.
 *
 * Versions: a name's versions are numbered 1, 2, ...; importing under an existing name adds a
 * version (parent: the active one) and makes it active, unless the content equals the active
 * one's (nothing changes then). Versions beyond keep_versions per name are pruned at import
 * and GC, never the active one nor pinned ones.
 *
 * Specs: "NAME" (the active version), "NAME@N", "NAME@sha256:HEX" (a prefix of at least 8 hex
 * digits among NAME's versions; -ENOTUNIQ listing the candidates when it matches several
 * contents).
 *
 * Threading: every call is safe from any thread (LMDB read transactions without thread-local
 * storage; mutations serialised by a mutex, and against other processes by LMDB's own lock).
 * Errors are -errno with a message in e; MDB codes never leave registry.c. A full map is
 * -ENOSPC naming RegistryMapBytes=.
 *
 * TEST ONLY: with MOLLY_TEST=1 and MOLLY_TEST_CRASH_AT=STEP the process kills itself
 * (SIGKILL) at that step: import-temp-written, import-temp-synced, import-renamed,
 * import-before-commit, import-after-commit, remove-before-commit, remove-after-commit,
 * remove-after-unlink.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"
#include "../basic/sha256.h"

struct lora_adapter;
struct registry;

#define REGISTRY_NAME_MAX   64
#define REGISTRY_MIN_PREFIX 8       /* hex digits of a NAME@sha256:PREFIX */
#define REGISTRY_DEFAULT_MAP_BYTES (1ull << 30)

/* A version's record, copied out of the map: owned by the caller, registry_version_done(). */
struct registry_version {
	char name[REGISTRY_NAME_MAX + 1];
	uint32_t version;
	uint8_t hash[SHA256_DIGEST_SIZE];
	char hash_hex[SHA256_HEX_SIZE];
	bool active;                 /* the name's active version (as of the read) */
	bool pinned;
	uint32_t parent;             /* the version active when this one was imported; 0: none */
	uint64_t created_ns;         /* CLOCK_REALTIME */
	uint64_t bytes;              /* the blob's size */
	uint32_t rank;               /* the largest */
	float scale;                 /* alpha/rank of the first matrix; alpha = scale · rank */
	uint32_t targets;            /* mask: 1 << enum lora_target */
	uint32_t dtype;              /* GGML_TYPE_F16 or _BF16: the weights' row type */
	uint8_t base_fingerprint[SHA256_DIGEST_SIZE];
	uint32_t base_quant;         /* the base's weight type (ggml) it was imported against */
	uint64_t uses;               /* requests that used it (flushed by registry_add_uses) */
	uint64_t last_use_ns;        /* CLOCK_REALTIME; 0: never */
	char *base;                  /* base description */
	char *source;                /* provenance: the imported path */
	char *format;                /* "peft", "gguf", "molly" */
	char *importer;              /* who imported it: "uid 0 via dbus", "drop folder"... */
	char **domains;
	size_t n_domains;
	char **exemplars;
	size_t n_exemplars;
};
void registry_version_done(struct registry_version *v);

struct registry_params {
	const char *dir;
	uint64_t map_bytes;          /* 0: REGISTRY_DEFAULT_MAP_BYTES */
	uint32_t keep_versions;      /* per name; 0: keep all */
	bool read_only;              /* list, resolve and fsck without --repair */
};

/* Opens (creating when writable) the registry in params->dir. */
int registry_open(const struct registry_params *params, struct registry **ret, struct errmsg *e);
struct registry *registry_close(struct registry *r);
DEFINE_CLEANUP_FUNC(struct registry *, registry_close, NULL)

const char *registry_dir(const struct registry *r);
void registry_set_keep_versions(struct registry *r, uint32_t keep_versions);

/* "DIR/blobs/sha256/AB/HEX" into buf (at least PATH_MAX); returns buf. */
char *registry_blob_path(const struct registry *r, const uint8_t hash[SHA256_DIGEST_SIZE],
			 char *buf, size_t size);

/* Whether name is usable: [A-Za-z0-9._-], 1..64 bytes, not starting with '.' or '-'. */
bool registry_name_valid(const char *name);

struct registry_import {
	const char *name;
	const char *base_description; /* the loaded base's (lora_base_describe) */
	uint32_t base_quant;          /* the loaded base's weight type (its layers' Q weight) */
	const char *source;           /* provenance */
	const char *importer;
	/* domains and exemplars: NULL → the adapter's own */
	const char *const *domains;
	size_t n_domains;
	const char *const *exemplars;
	size_t n_exemplars;
	bool has_meta;                /* domains/exemplars above replace the adapter's own */
};

/*
 * Writes a's blob and records a new version of imp->name. 0 with the new version in *ret
 * (when ret is not NULL); 1 when the content and metadata equal the active version's (no new
 * version; *ret is the active one). -EINVAL bad name, -ENOSPC full map or disk.
 */
int registry_import(struct registry *r, const struct lora_adapter *a,
		    const struct registry_import *imp, struct registry_version *ret,
		    struct errmsg *e);

/* Resolves a spec (see above). -ENOENT unknown name/version/prefix, -EINVAL malformed,
 * -ENOTUNIQ ambiguous prefix (the candidates in e). */
int registry_resolve(struct registry *r, const char *spec, struct registry_version *ret,
		     struct errmsg *e);
/* Splits "NAME@..." at '@': the name's length (the whole spec when no '@'). */
size_t registry_spec_name_len(const char *spec);

/* Calls fn for every name's active version, in name order (fn gets a borrowed record); a
 * non-zero return from fn stops the walk and is returned. */
int registry_list(struct registry *r, int (*fn)(const struct registry_version *v, void *ud),
		  void *ud);
/* Calls fn for every version of name, oldest first. -ENOENT for an unknown name. */
int registry_history(struct registry *r, const char *name,
		     int (*fn)(const struct registry_version *v, void *ud), void *ud);
/* Number of names. */
int registry_count(struct registry *r, size_t *ret);

/* Makes version the active one. -ENOENT when either does not exist. */
int registry_rollback(struct registry *r, const char *name, uint32_t version, struct errmsg *e);
/* Removes every version of name and the blobs nobody else refers to. */
int registry_remove(struct registry *r, const char *name, struct errmsg *e);
/* Pins or unpins a version (0: the active one): GC keeps pinned versions. */
int registry_set_pinned(struct registry *r, const char *name, uint32_t version, bool pinned,
			struct errmsg *e);
/* Adds to a version's use statistics. */
int registry_add_uses(struct registry *r, const char *name, uint32_t version, uint64_t uses,
		      uint64_t last_use_ns);

/* Prunes versions beyond keep_versions, then removes every blob and temp file no record
 * refers to. The blobs and bytes removed in *ret_blobs, *ret_bytes. */
int registry_gc(struct registry *r, uint32_t *ret_blobs, uint64_t *ret_bytes, struct errmsg *e);

/* Small key/value notes (the drop folder's state): -ENOENT when absent. */
int registry_note_get(struct registry *r, const char *key, void *buf, size_t size);
int registry_note_put(struct registry *r, const char *key, const void *buf, size_t size);

/*
 * Checks the registry in dir without a daemon: every record's blob exists and hashes to its
 * name (errors), no blob without a record and no temp file (warnings; removed with repair,
 * which takes the registry's lock: -EBUSY while a daemon holds it). report() gets one line
 * per finding. Returns the number of errors (>= 0) or -errno.
 */
enum registry_finding { REGISTRY_FSCK_ERROR, REGISTRY_FSCK_WARNING, REGISTRY_FSCK_REPAIRED };
int registry_fsck(const char *dir, bool repair,
		  void (*report)(enum registry_finding kind, const char *text, void *ud), void *ud,
		  size_t *ret_warnings, struct errmsg *e);

/* Holds the registry's lock shared for the object's life (a daemon: fsck --repair then
 * refuses). */
int registry_hold(struct registry *r);

/* TEST ONLY: the shortest hash prefix this object accepts (REGISTRY_MIN_PREFIX otherwise), so
 * that a test can reach an ambiguous prefix without 2^32 imports. */
void registry_test_set_min_prefix(struct registry *r, unsigned digits);

/* TEST ONLY: the crash switch (see the top). */
void registry_crash_point(const char *step);
