/* SPDX-License-Identifier: MIT */
/*
 * config.h: mollyd's configuration, in the INI dialect systemd users know.
 *
 * Files: the main file (default /etc/molly/mollyd.conf, or --config FILE), then the drop-ins:
 * the files ending in ".conf" in FILE.d/ (for the default: /etc/molly/mollyd.conf.d/), in
 * lexical order; a later
 * assignment wins, list keys (Load=, UIDs=, Models=) append and an empty assignment resets
 * them. A missing main file is fine when drop-ins or defaults suffice ([Model] Path= is
 * required by the daemon, not by the parser).
 *
 * Syntax: "[Section]" or "[Section NAME]" headers (Member); "Key=Value" (spaces around '='
 * and at both ends are trimmed; values may be double-quoted to keep outer spaces); lines
 * starting with '#' or ';' are comments; a line ending in '\' continues on the next line.
 * Booleans: 1/yes/true/on, 0/no/false/off. Sizes: bytes with an optional K/M/G/T suffix
 * (base 1024). Times: seconds with an optional ms/s/min/h suffix (StopTimeoutSec=).
 * Unknown sections or keys, malformed lines and bad values are errors "FILE:LINE: ...".
 *
 * Sections and keys are table entries in config.c: a later feature adds a section
 * ([Policy], [Rule NAME], [Target NAME], [Audit], [Egress], [Router]) by adding its fields
 * here, a parser table and one line in the section table.
 *
 * Lifetime: a parsed config is immutable and reference counted, so a reload can replace it
 * while fronts still hold the old one. Threading: config_ref/unref are atomic.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

#define CONFIG_DEFAULT_PATH "/etc/molly/mollyd.conf"

enum config_bus {
	CONFIG_BUS_SYSTEM,
	CONFIG_BUS_SESSION,
	CONFIG_BUS_NONE, /* Bus=none: no D-Bus front (HTTP only) */
};

enum config_listen_kind {
	CONFIG_LISTEN_NONE, /* Listen= empty: no HTTP front */
	CONFIG_LISTEN_TCP,
	CONFIG_LISTEN_UNIX,
};

struct config_listen {
	enum config_listen_kind kind;
	char *host;        /* owned; numeric: "127.0.0.1", "::1" (TCP) */
	uint16_t port;     /* TCP; 0 = pick any free port */
	int family;        /* AF_INET or AF_INET6 (TCP) */
	char *path;        /* owned; UNIX: the socket path */
	bool loopback;     /* TCP: the address is a loopback address */
};

struct config_member {
	char *name;              /* owned: [Member NAME] */
	bool has_key_hash;
	uint8_t key_hash[32];    /* KeyHash=sha256:<64 hex>: SHA-256 of the API key */
	uid_t *uids;             /* owned, n_uids: local users (D-Bus, unix socket) */
	size_t n_uids;
	char **models;           /* owned, n_models: names, "base:adapter", or "*" */
	size_t n_models;
	bool admin;              /* Admin=yes: may call administrative methods */
	bool has_max_tiers;
	uint32_t max_tiers;      /* MaxTiers=: POLICY_TIER() bits the member's requests may reach */
	char *file;              /* owned: where it was defined, for messages */
	unsigned line;
};

/* [Rule NAME] (policy/rules.h): Match=KIND:VALUE, Class=public|personal|secret */
struct config_rule {
	char *name;              /* owned */
	char *match;             /* owned: as written, e.g. "regex:ACME-[0-9]+"; NULL: unset */
	int class;               /* enum policy_class; -1: unset */
	char *file;              /* owned: where it was defined */
	unsigned line;           /* the [Rule] header */
	unsigned match_line;     /* the Match= line */
};

/* [Target NAME] (router/router.h, targets/remote.h): an OpenAI-compatible endpoint in T1..T3 */
#define CONFIG_MODALITY_TEXT (1u << 0)
#define CONFIG_MODALITY_IMAGE (1u << 1)
#define CONFIG_MODALITY_AUDIO (1u << 2)

struct config_quality {
	char *domain;            /* owned: the DOMAIN of Quality.DOMAIN= */
	double quality;          /* [0, 1]: the seed prior for (domain, target) */
};

struct config_target {
	char *name;              /* owned */
	int tier;                /* 1..3; -1: unset (an error in config_verify) */
	char *url;               /* owned: base URL, "http://HOST:PORT" (…/v1 is appended) */
	char *model;             /* owned: the remote model id; NULL: the target's name */
	bool user_controlled;    /* UserControlled=: T2 needs it (policy_tier_allowed) */
	double cost_in;          /* CostPerMTokIn=: currency units per million prompt tokens */
	double cost_out;         /* CostPerMTokOut= */
	char *credential_file;   /* owned: absolute, or a name in $CREDENTIALS_DIRECTORY; NULL */
	uint32_t modalities;     /* CONFIG_MODALITY_* bits; default text */
	uint32_t context_tokens; /* 0: unknown */
	uint64_t timeout_ns;     /* TimeoutSec=: no byte for this long → timeout; default 30 s */
	uint32_t retries;        /* Retries=: extra attempts before the first byte; default 2 */
	struct config_quality *quality; /* owned, n_quality */
	size_t n_quality;
	char *file;              /* owned: where it was defined */
	unsigned line;
};

struct config {
	unsigned n_ref; /* atomic */

	/* [Model] */
	char *model_path;        /* owned; required by the daemon */
	char *model_name;        /* owned; NULL: the file name without .gguf */
	int threads;             /* 0: online CPUs */
	char *chat_template; /* owned; a chat family name (chatml, llama2, llama3, ...) or NULL */

	/* [Engine] */
	uint64_t pool_bytes;     /* 0: the scheduler's default */
	uint32_t max_sequences;  /* default 8 */
	uint32_t queue_length;   /* default 64 */
	uint32_t context_length; /* 0: the model's (capped by the scheduler) */
	uint32_t step_tokens;    /* 0: the scheduler's default */

	/* [Adapters] */
	char *adapter_directory; /* owned; default <StateDirectory>/adapters */
	char **adapter_load;     /* owned, n_adapter_load: names in Directory= to load at start */
	size_t n_adapter_load;
	uint32_t keep_versions;      /* versions kept per name (active and pinned always); 0: all */
	uint64_t registry_map_bytes; /* the registry's LMDB map; default 1 GiB */
	/* tiers (sched/tiers.h) */
	uint64_t warm_bytes;         /* WarmBytes=: warm copies in host memory; default 2 GiB */
	uint64_t hot_bytes;          /* HotBytes=: adapter weights in the pool; 0: half of it */
	int eviction;                /* Eviction=: enum evict_policy, gdsf (default) or lru */
	int hot_type;                /* HotType=: enum lora_hot_type, stored (default) or q8_0 */
	int load_path;               /* LoadPath=: enum blob_path, uring (default) or pread */
	uint32_t load_queue_depth;   /* LoadQueueDepth=: reads in flight; default 8 */

	/* [HTTP] */
	struct config_listen listen;  /* default 127.0.0.1:8411 */
	bool allow_non_loopback;
	uint64_t max_body_bytes;      /* default 1 MiB */

	/* [DBus] */
	enum config_bus bus;          /* default system */
	uint64_t stream_buffer_bytes; /* output a Stream reader may leave unread; default 256 KiB */

	/* [Paths] */
	char *state_directory;   /* owned; default $STATE_DIRECTORY or /var/lib/molly */
	char *runtime_directory; /* owned; default $RUNTIME_DIRECTORY or /run/molly */

	/* [Daemon] */
	char *user;              /* owned; NULL: keep the current user */
	char *admin_group;       /* owned; NULL: no admin group */
	uint64_t stop_timeout_ns;/* default 30 s */
	int log_level;           /* LOG_* from syslog.h; default LOG_INFO */

	/* [Audit] */
	uint32_t audit_retention_days; /* default 90; 0: keep records forever */
	uint64_t audit_map_size;       /* the LMDB map's size; default 256 MiB */

	/* [Egress] (egress/client.h): kernel-enforced egress through one worker per tier */
	bool egress_enforce;           /* Enforce=: default yes; no: remote calls in-process */
	char *egress_worker_path;      /* owned; WorkerPath=: molly-egress; NULL: next to mollyd,
					* else the installed one */
	uint64_t egress_resolve_interval_ns; /* ResolveIntervalSec=: default 300 s */

	/* [Member NAME] */
	struct config_member *members; /* owned, n_members */
	size_t n_members;

	/* [Policy] (policy/policy.h): tiers per class, POLICY_TIER() bits */
	uint32_t policy_tiers[3];      /* public T0,T1; personal T0,T1; secret T0 */
	bool policy_allow_external;    /* AllowExternal=: T3 at all (then only redacted) */
	bool policy_judge;             /* Judge=: ask the local model about uncertain scores */
	float policy_judge_band[2];    /* JudgeBand=LOW,HIGH (default 0.3,0.7) */
	uint32_t policy_judge_timeout_ms; /* JudgeTimeoutMs= (default 2000; 1..60000) */

	/* [Rule NAME] */
	struct config_rule *rules;     /* owned, n_rules, in the order of the files */
	size_t n_rules;

	/* [Target NAME] */
	struct config_target *targets; /* owned, n_targets, in the order of the files */
	size_t n_targets;

	/* [Router] */
	double router_mixture_entropy;      /* MixtureEntropy=: default 0.8 */
	uint32_t router_mixture_k;          /* MixtureTopK= (or MixtureK=): default 2 */
	double router_confidence_threshold; /* ConfidenceThreshold=: default 0 (no cascade) */
	uint32_t router_max_fallbacks;      /* MaxFallbacks=: default 2 */
	double router_cost_weight;          /* CostWeight=: score per currency unit; default 1 */
	double router_latency_weight;       /* LatencyWeight=: score per second; default 0.05 */
	double router_budget;               /* Budget=: cost units per request; 0: no bound */
	uint64_t router_health_interval_ns; /* HealthCheckSec=: default 10 s; 0: off */

	/* The files that were read, in order (for `molly config check` and logs). */
	char **files;            /* owned, n_files */
	size_t n_files;
};

/* An empty config with every default. */
int config_new(struct config **ret);
struct config *config_ref(struct config *c);
struct config *config_unref(struct config *c);
DEFINE_CLEANUP_FUNC(struct config *, config_unref, NULL)

/*
 * Reads path (NULL: CONFIG_DEFAULT_PATH) and its drop-ins (the ".conf" files in path.d/, in
 * lexical order).
 * A missing main file is not an error when path is NULL; a named one must exist.
 * Errors: "FILE:LINE: what" in e.
 */
int config_load(const char *path, struct config **ret, struct errmsg *e);

/* Parses one file's text into c (later assignments win over what c holds). filename is used
 * in messages. For tests, fuzzers, and config_load. */
int config_parse_text(struct config *c, const char *text, size_t len, const char *filename,
		      struct errmsg *e);

/* Checks what only makes sense for the whole set of files (e.g. a member without a key or
 * UIDs=, Listen= on a public address without AllowNonLoopback=yes). config_load calls it. */
int config_verify(const struct config *c, struct errmsg *e);

/* The base model's id: Name= or the file name of Path= without ".gguf" (malloc'd). */
char *config_model_name(const struct config *c);

const struct config_member *config_find_member(const struct config *c, const char *name);
const struct config_member *config_find_member_by_uid(const struct config *c, uid_t uid);
/* Hashes key and compares with every KeyHash= in constant time per member. */
const struct config_member *config_find_member_by_key(const struct config *c, const char *key);

/* Whether member may use model (a name as a request gives it: "base", "adapter",
 * "base:adapter"); models lists names, "base:adapter" pairs, or "*". */
bool config_member_may_use(const struct config_member *m, const char *base_name,
			   const char *model);

/* "sha256:<hex>" for key, as KeyHash= wants it; ret must hold 72 bytes. */
void config_key_hash_string(const char *key, char ret[72]);
