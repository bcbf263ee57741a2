/* SPDX-License-Identifier: MIT */
/*
 * config.c: see config.h. The grammar is line based; every section is a table of keys with a
 * parser and the offset of the field it fills, so adding a section or a key is adding rows.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include "../basic/sha256.h"
#include "../engine/chat.h"
#include "../loader/blob-load.h"
#include "../lora/resident.h"
#include "../policy/policy.h"
#include "../policy/rules.h"
#include "../sched/evict.h"
#include "config.h"

#define CONFIG_MAX_FILE_BYTES (1u << 20)
#define CONFIG_MAX_LIST 4096   /* items in one list key (Load=, UIDs=, Models=) */
#define CONFIG_MAX_MEMBERS 4096
#define CONFIG_MAX_DROPINS 1024
#define CONFIG_MAX_RULES 4096
#define CONFIG_MAX_TARGETS 256
#define CONFIG_MAX_QUALITY 256 /* Quality.DOMAIN= keys per target */

/* Where a value comes from, for messages. */
struct pctx {
	const char *file;
	unsigned line;
	const char *section;
	const char *key;
	const char *full_key; /* as written: a prefix key's suffix (Quality.DOMAIN=) */
	struct errmsg *e;
	struct config *config;
};

_printf_(3, 4) static int perr(struct pctx *x, int r, const char *fmt, ...)
{
	char buf[384];
	va_list ap;

	va_start(ap, fmt);
	(void) vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (x->key)
		return errmsg_set(x->e, r, "%s:%u: [%s] %s=: %s", x->file, x->line, x->section,
				  x->key, buf);
	return errmsg_set(x->e, r, "%s:%u: %s", x->file, x->line, buf);
}

static void strv_free(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* ---- value parsers: (ctx, value, field) ---- */

typedef int (*parse_fn)(struct pctx *x, const char *v, void *field);

static int parse_string(struct pctx *x, const char *v, void *field)
{
	char **p = field;
	char *s = NULL;

	if (v[0] && !(s = strdup(v)))
		return -ENOMEM;
	free(*p);
	*p = s; /* empty: back to the default */
	return 0;
}

static int parse_path(struct pctx *x, const char *v, void *field)
{
	if (v[0] && v[0] != '/')
		return perr(x, -EINVAL, "'%s' is not an absolute path", v);
	if (strlen(v) >= PATH_MAX)
		return perr(x, -ENAMETOOLONG, "path too long");
	return parse_string(x, v, field);
}

static int parse_bool_value(const char *v, bool *ret)
{
	static const char *const yes[] = { "1", "yes", "y", "true", "t", "on" };
	static const char *const no[] = { "0", "no", "n", "false", "f", "off" };

	for (size_t i = 0; i < ELEMENTSOF(yes); i++)
		if (strcasecmp(v, yes[i]) == 0) {
			*ret = true;
			return 0;
		}
	for (size_t i = 0; i < ELEMENTSOF(no); i++)
		if (strcasecmp(v, no[i]) == 0) {
			*ret = false;
			return 0;
		}
	return -EINVAL;
}

static int parse_bool(struct pctx *x, const char *v, void *field)
{
	if (parse_bool_value(v, field) < 0)
		return perr(x, -EINVAL, "'%s' is not a boolean (yes/no, true/false, on/off, 1/0)",
			    v);
	return 0;
}

static int parse_u64_value(const char *v, uint64_t *ret)
{
	char *end;
	unsigned long long n = 0;

	if (!isdigit((unsigned char) v[0]))
		return -EINVAL;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno)
		return -errno;
	if (*end)
		return -EINVAL;
	*ret = n;
	return 0;
}

static int parse_u32_range(struct pctx *x, const char *v, void *field, uint64_t lo, uint64_t hi)
{
	uint64_t n = 0;

	if (parse_u64_value(v, &n) < 0 || n < lo || n > hi)
		return perr(x, -EINVAL, "'%s' is not a whole number in [%llu, %llu]", v,
			    (unsigned long long) lo, (unsigned long long) hi);
	*(uint32_t *) field = (uint32_t) n;
	return 0;
}

/* Generates parse_<name>(): an unsigned integer within [lo, hi] into a uint32_t. */
#define DEFINE_PARSE_U32(name, lo, hi)                                                             \
	static int parse_##name(struct pctx *x, const char *v, void *field)                       \
	{                                                                                          \
		return parse_u32_range(x, v, field, (lo), (hi));                                   \
	}
DEFINE_PARSE_U32(max_sequences, 1, 1024)
DEFINE_PARSE_U32(queue_length, 1, 65536)
DEFINE_PARSE_U32(context_length, 0, 1u << 20)
DEFINE_PARSE_U32(step_tokens, 0, 65536)

static int parse_threads(struct pctx *x, const char *v, void *field)
{
	uint64_t n = 0;

	if (parse_u64_value(v, &n) < 0 || n > 1024)
		return perr(x, -EINVAL, "'%s' is not a thread count in [0, 1024] (0: all CPUs)", v);
	*(int *) field = (int) n;
	return 0;
}

static int parse_size(struct pctx *x, const char *v, void *field)
{
	static const struct {
		const char *suffix;
		uint64_t factor;
	} units[] = {
		{ "", 1 },
		{ "B", 1 },
		{ "K", 1ull << 10 },
		{ "M", 1ull << 20 },
		{ "G", 1ull << 30 },
		{ "T", 1ull << 40 },
		{ "KiB", 1ull << 10 },
		{ "MiB", 1ull << 20 },
		{ "GiB", 1ull << 30 },
		{ "TiB", 1ull << 40 },
	};
	char *end;
	unsigned long long n = 0;

	if (!isdigit((unsigned char) v[0]))
		goto bad;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno)
		goto bad;
	while (*end == ' ')
		end++;
	for (size_t i = 0; i < ELEMENTSOF(units); i++)
		if (strcmp(end, units[i].suffix) == 0) {
			if (n > UINT64_MAX / units[i].factor)
				return perr(x, -ERANGE, "'%s' is too large", v);
			*(uint64_t *) field = n * units[i].factor;
			return 0;
		}
bad:
	return perr(x, -EINVAL, "'%s' is not a size (bytes, or with K, M, G, T: base 1024)", v);
}

static int parse_sec(struct pctx *x, const char *v, void *field)
{
	static const struct {
		const char *suffix;
		uint64_t ns;
	} units[] = {
		{ "", 1000000000ull }, { "s", 1000000000ull }, { "sec", 1000000000ull },
		{ "ms", 1000000ull }, { "msec", 1000000ull }, { "min", 60000000000ull },
		{ "m", 60000000000ull }, { "h", 3600000000000ull },
	};
	char *end;
	double d;

	if (strcasecmp(v, "infinity") == 0) {
		*(uint64_t *) field = UINT64_MAX;
		return 0;
	}
	if (!isdigit((unsigned char) v[0]))
		goto bad;
	errno = 0;
	d = strtod(v, &end);
	if (errno || d < 0)
		goto bad;
	while (*end == ' ')
		end++;
	for (size_t i = 0; i < ELEMENTSOF(units); i++)
		if (strcmp(end, units[i].suffix) == 0) {
			double ns = d * (double) units[i].ns;
			if (ns >= 1.8e19)
				return perr(x, -ERANGE, "'%s' is too long", v);
			*(uint64_t *) field = (uint64_t) ns;
			return 0;
		}
bad:
	return perr(x, -EINVAL, "'%s' is not a time span (e.g. 30, 30s, 500ms, 2min, infinity)", v);
}

/* Space-separated words appended to a list; an empty value empties it. */
static int strv_append_words(struct pctx *x, const char *v, char ***list, size_t *n,
			     bool (*valid)(const char *word), const char *what)
{
	const char *p = v;

	if (!v[0]) {
		strv_free(*list, *n);
		*list = NULL;
		*n = 0;
		return 0;
	}
	while (*p) {
		size_t len = 0;
		char *w, **nl;

		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		len = strcspn(p, " \t");
		w = strndup(p, len);
		if (!w)
			return -ENOMEM;
		p += len;
		if (valid && !valid(w)) {
			int r = perr(x, -EINVAL, "'%s' is not %s", w, what);
			free(w);
			return r;
		}
		if (*n >= CONFIG_MAX_LIST) {
			free(w);
			return perr(x, -E2BIG, "more than %d items", CONFIG_MAX_LIST);
		}
		nl = realloc(*list, (*n + 1) * sizeof(char *));
		if (!nl) {
			free(w);
			return -ENOMEM;
		}
		*list = nl;
		(*list)[(*n)++] = w;
	}
	return 0;
}

static bool name_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64 || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char) s[i]) && !strchr("._-", s[i]))
			return false;
	return true;
}

/* A Models= entry: a name, "base:adapter", or "*". */
static bool model_ref_valid(const char *s)
{
	const char *colon = strchr(s, ':');
	char buf[160];

	if (strcmp(s, "*") == 0)
		return true;
	if (!colon)
		return name_valid(s);
	if ((size_t) (colon - s) >= sizeof(buf) || strchr(colon + 1, ':'))
		return false;
	memcpy(buf, s, (size_t) (colon - s));
	buf[colon - s] = 0;
	return name_valid(buf) && name_valid(colon + 1);
}

static int parse_adapter_load(struct pctx *x, const char *v, void *field)
{
	struct config *c = x->config;

	(void) field;
	return strv_append_words(x, v, &c->adapter_load, &c->n_adapter_load, name_valid,
				 "an adapter name (letters, digits, '.', '_', '-')");
}

static int parse_models(struct pctx *x, const char *v, void *field)
{
	struct config_member *m = field;

	return strv_append_words(x, v, &m->models, &m->n_models, model_ref_valid,
				 "a model name, base:adapter, or *");
}

static int parse_uids(struct pctx *x, const char *v, void *field)
{
	struct config_member *m = field;
	_cleanup_free_ char *copy = strdup(v);
	char *save = NULL, *w;

	if (!copy)
		return -ENOMEM;
	if (!v[0]) {
		free(m->uids);
		m->uids = NULL;
		m->n_uids = 0;
		return 0;
	}
	for (w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		uint64_t n = 0;
		uid_t uid, *nu;

		if (parse_u64_value(w, &n) >= 0) {
			if (n >= UINT32_MAX)
				return perr(x, -ERANGE, "uid %s is out of range", w);
			uid = (uid_t) n;
		} else {
			struct passwd pw, *res = NULL;
			char buf[4096];
			int r = getpwnam_r(w, &pw, buf, sizeof(buf), &res);
			if (r != 0 || !res)
				return perr(x, -ENOENT, "no user '%s' (give a name or a number)",
					    w);
			uid = res->pw_uid;
		}
		if (m->n_uids >= CONFIG_MAX_LIST)
			return perr(x, -E2BIG, "more than %d users", CONFIG_MAX_LIST);
		nu = realloc(m->uids, (m->n_uids + 1) * sizeof(uid_t));
		if (!nu)
			return -ENOMEM;
		m->uids = nu;
		m->uids[m->n_uids++] = uid;
	}
	return 0;
}

static int parse_key_hash(struct pctx *x, const char *v, void *field)
{
	struct config_member *m = field;

	if (!v[0]) {
		m->has_key_hash = false;
		return 0;
	}
	if (strncmp(v, "sha256:", 7) != 0 || strlen(v + 7) != 64 ||
	    sha256_from_hex(v + 7, m->key_hash) < 0)
		return perr(x, -EINVAL,
			    "expected sha256:<64 hex digits> (make one with `molly key new NAME`)");
	m->has_key_hash = true;
	return 0;
}

static void listen_clear(struct config_listen *l)
{
	free(l->host);
	free(l->path);
	*l = (struct config_listen){ .kind = CONFIG_LISTEN_NONE };
}

/* "127.0.0.1:PORT", "[::1]:PORT", "localhost:PORT", "unix:/path", or "" (off). */
static int parse_listen_value(const char *v, struct config_listen *ret, char *why, size_t n_why)
{
	struct config_listen l = { 0 };
	char host[INET6_ADDRSTRLEN + 2];
	const char *port;
	uint64_t p = 0;

	if (!v[0]) {
		*ret = l;
		return 0;
	}
	if (strncmp(v, "unix:", 5) == 0) {
		const char *path = v + 5;
		if (path[0] != '/') {
			snprintf(why, n_why, "unix: needs an absolute path");
			return -EINVAL;
		}
		if (strlen(path) >= sizeof(((struct sockaddr_un *) NULL)->sun_path)) {
			snprintf(why, n_why, "the socket path is longer than %zu bytes",
				 sizeof(((struct sockaddr_un *) NULL)->sun_path) - 1);
			return -ENAMETOOLONG;
		}
		l.kind = CONFIG_LISTEN_UNIX;
		l.path = strdup(path);
		if (!l.path)
			return -ENOMEM;
		*ret = l;
		return 0;
	}
	if (v[0] == '[') {
		const char *end = strchr(v, ']');
		if (!end || end[1] != ':' || (size_t) (end - v - 1) >= sizeof(host)) {
			snprintf(why, n_why, "expected [IPv6]:PORT");
			return -EINVAL;
		}
		memcpy(host, v + 1, (size_t) (end - v - 1));
		host[end - v - 1] = 0;
		port = end + 2;
		l.family = AF_INET6;
	} else {
		const char *colon = strrchr(v, ':');
		if (!colon || (size_t) (colon - v) >= sizeof(host) ||
		    memchr(v, ':', (size_t) (colon - v))) {
			snprintf(why, n_why, "expected ADDRESS:PORT, [IPv6]:PORT or unix:PATH");
			return -EINVAL;
		}
		memcpy(host, v, (size_t) (colon - v));
		host[colon - v] = 0;
		port = colon + 1;
		l.family = AF_INET;
		if (strcmp(host, "localhost") == 0)
			strcpy(host, "127.0.0.1");
	}
	if (parse_u64_value(port, &p) < 0 || p > 65535) {
		snprintf(why, n_why, "'%s' is not a port number", port);
		return -EINVAL;
	}
	if (l.family == AF_INET) {
		struct in_addr a;
		if (inet_pton(AF_INET, host, &a) != 1) {
			snprintf(why, n_why, "'%s' is not a numeric IPv4 address", host);
			return -EINVAL;
		}
		l.loopback = (ntohl(a.s_addr) >> 24) == 127;
	} else {
		struct in6_addr a;
		if (inet_pton(AF_INET6, host, &a) != 1) {
			snprintf(why, n_why, "'%s' is not a numeric IPv6 address", host);
			return -EINVAL;
		}
		l.loopback = IN6_IS_ADDR_LOOPBACK(&a) ||
			     (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
	}
	l.kind = CONFIG_LISTEN_TCP;
	l.port = (uint16_t) p;
	l.host = strdup(host);
	if (!l.host)
		return -ENOMEM;
	*ret = l;
	return 0;
}

static int parse_listen(struct pctx *x, const char *v, void *field)
{
	struct config_listen *l = field, n;
	char why[160] = "";
	int r;

	r = parse_listen_value(v, &n, why, sizeof(why));
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return perr(x, r, "'%s': %s", v, why);
	listen_clear(l);
	*l = n;
	return 0;
}

static int parse_bus(struct pctx *x, const char *v, void *field)
{
	enum config_bus *b = field;

	if (strcmp(v, "system") == 0)
		*b = CONFIG_BUS_SYSTEM;
	else if (strcmp(v, "session") == 0)
		*b = CONFIG_BUS_SESSION;
	else if (strcmp(v, "none") == 0)
		*b = CONFIG_BUS_NONE;
	else
		return perr(x, -EINVAL, "'%s' is not one of system, session, none", v);
	return 0;
}

static int parse_chat_template(struct pctx *x, const char *v, void *field)
{
	enum chat_family f;

	if (v[0] && chat_family_from_name(v, &f) < 0)
		return perr(x, -EINVAL,
			    "'%s' is not a template family (chatml, llama2, llama3, mistral, phi3, "
			    "gemma)",
			    v);
	return parse_string(x, v, field);
}

static int parse_user(struct pctx *x, const char *v, void *field)
{
	if (v[0] && !name_valid(v))
		return perr(x, -EINVAL, "'%s' is not a user or group name", v);
	return parse_string(x, v, field);
}

static int parse_log_level(struct pctx *x, const char *v, void *field)
{
	static const char *const names[] = { "emerg", "alert", "crit", "err",
					     "warning", "notice", "info", "debug" };
	int l = -1;

	/* As syslog names them (and log.h's levels); "error" and "warn" too, or 0..7. */
	for (int i = 0; i < 8; i++)
		if (strcasecmp(v, names[i]) == 0)
			l = i;
	if (strcasecmp(v, "error") == 0)
		l = LOG_ERR;
	else if (strcasecmp(v, "warn") == 0)
		l = LOG_WARNING;
	else if (v[0] >= '0' && v[0] <= '7' && !v[1])
		l = v[0] - '0';

	if (l < 0)
		return perr(x, -EINVAL, "'%s' is not a level (err, warning, notice, info, debug)",
			    v);
	*(int *) field = l;
	return 0;
}

static int parse_model_name(struct pctx *x, const char *v, void *field)
{
	if (v[0] && !name_valid(v))
		return perr(x, -EINVAL,
			    "'%s' is not a model id (letters, digits, '.', '_', '-'; at most 64)",
			    v);
	return parse_string(x, v, field);
}

/* ---- [Policy], [Rule NAME], [Member] MaxTiers= ---- */

static int parse_tiers(struct pctx *x, const char *v, void *field)
{
	struct errmsg why = { { 0 } };

	if (policy_tiers_parse(v, field, &why) < 0)
		return perr(x, -EINVAL, "%s", why.text);
	return 0;
}

/* JudgeBand=LOW,HIGH: two probabilities, LOW <= HIGH (spaces allowed around the comma). */
static int parse_judge_band(struct pctx *x, const char *v, void *field)
{
	float *band = field;
	const char *orig = v;
	char *end;
	double lo, hi;

	errno = 0;
	lo = strtod(v, &end);
	while (*end == ' ' || *end == '\t')
		end++;
	if (errno || end == v || *end != ',')
		goto bad;
	v = end + 1;
	hi = strtod(v, &end);
	while (*end == ' ' || *end == '\t')
		end++;
	if (errno || end == v || *end || !(lo >= 0 && lo <= hi && hi <= 1))
		goto bad;
	band[0] = (float) lo;
	band[1] = (float) hi;
	return 0;
bad:
	return perr(x, -EINVAL, "'%s' is not LOW,HIGH with 0 <= LOW <= HIGH <= 1", orig);
}

DEFINE_PARSE_U32(judge_timeout_ms, 1, 60000)

static int parse_max_tiers(struct pctx *x, const char *v, void *field)
{
	struct config_member *m = field;

	if (!v[0]) {
		m->has_max_tiers = false; /* back to no limit */
		return 0;
	}
	m->has_max_tiers = true;
	return parse_tiers(x, v, &m->max_tiers);
}

static int parse_rule_match(struct pctx *x, const char *v, void *field)
{
	struct config_rule *r = field;
	struct errmsg why = { { 0 } };
	struct rule *compiled = NULL;
	char *s;
	int k;

	/* Compiled here only to report a bad pattern with its file and line; the policy
	 * compiles it again (with JIT) when it is built. */
	k = rule_new(r->name, v, POLICY_CLASS_PUBLIC, NULL, &compiled, &why);
	if (k == -ENOMEM)
		return k;
	if (k < 0)
		return perr(x, k, "%s", why.text);
	rule_free(compiled);
	s = strdup(v);
	if (!s)
		return -ENOMEM;
	free(r->match);
	r->match = s;
	r->match_line = x->line;
	return 0;
}

static int parse_rule_class(struct pctx *x, const char *v, void *field)
{
	struct config_rule *r = field;
	enum policy_class c;

	if (policy_class_from_name(v, &c) < 0)
		return perr(x, -EINVAL, "'%s' is not a class (public, personal, secret)", v);
	r->class = (int) c;
	return 0;
}

/* ---- [Target NAME], [Router] ---- */

static int parse_double_range(struct pctx *x, const char *v, double *ret, double lo, double hi)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(v, &end);
	if (!v[0] || errno || *end || !(d >= lo && d <= hi))
		return perr(x, -EINVAL, "'%s' is not a number in [%g, %g]", v, lo, hi);
	*ret = d;
	return 0;
}

static int parse_unit_float(struct pctx *x, const char *v, void *field)
{
	return parse_double_range(x, v, field, 0.0, 1.0);
}

static int parse_cost(struct pctx *x, const char *v, void *field)
{
	return parse_double_range(x, v, field, 0.0, 1e9);
}

static int parse_target_tier(struct pctx *x, const char *v, void *field)
{
	if ((v[0] == 'T' || v[0] == 't') && v[1] >= '1' && v[1] <= '3' && !v[2]) {
		*(int *) field = v[1] - '0';
		return 0;
	}
	if (v[0] >= '1' && v[0] <= '3' && !v[1]) {
		*(int *) field = v[0] - '0';
		return 0;
	}
	return perr(x, -EINVAL,
		    "'%s' is not a remote tier (T1, T2 or T3; T0 is this machine's engine)", v);
}

static int parse_url(struct pctx *x, const char *v, void *field)
{
	const char *host;

	if (strncmp(v, "http://", 7) == 0)
		host = v + 7;
	else if (strncmp(v, "https://", 8) == 0)
		host = v + 8;
	else
		return perr(x, -EINVAL, "'%s' is not an http:// or https:// URL", v);
	if (!host[0] || host[0] == '/')
		return perr(x, -EINVAL, "'%s' has no host", v);
	if (strpbrk(v, " \t\"<>\\^`{|}"))
		return perr(x, -EINVAL, "'%s' contains characters a URL cannot hold", v);
	if (strlen(v) > 2048)
		return perr(x, -ENAMETOOLONG, "URL too long");
	return parse_string(x, v, field);
}

static int parse_remote_model(struct pctx *x, const char *v, void *field)
{
	/* Sent as JSON, never put in a URL or a header: any printable text is fine. */
	for (const char *p = v; *p; p++)
		if ((unsigned char) *p < 0x20)
			return perr(x, -EINVAL, "control characters in '%s'", v);
	if (strlen(v) > 256)
		return perr(x, -ENAMETOOLONG, "model id longer than 256 bytes");
	return parse_string(x, v, field);
}

static int parse_credential_file(struct pctx *x, const char *v, void *field)
{
	if (v[0] && v[0] != '/' && (strchr(v, '/') || strcmp(v, "..") == 0 || strcmp(v, ".") == 0))
		return perr(x, -EINVAL,
			    "'%s' is neither an absolute path nor a credential name (a file in "
			    "$CREDENTIALS_DIRECTORY)",
			    v);
	if (strlen(v) >= PATH_MAX)
		return perr(x, -ENAMETOOLONG, "path too long");
	return parse_string(x, v, field);
}

static int parse_modalities(struct pctx *x, const char *v, void *field)
{
	static const struct {
		const char *name;
		uint32_t bit;
	} names[] = {
		{ "text", CONFIG_MODALITY_TEXT },
		{ "image", CONFIG_MODALITY_IMAGE },
		{ "audio", CONFIG_MODALITY_AUDIO },
	};
	uint32_t bits = 0;
	const char *p = v;

	if (!v[0]) {
		*(uint32_t *) field = CONFIG_MODALITY_TEXT;
		return 0;
	}
	while (*p) {
		size_t l = strcspn(p, " ,\t");
		bool found = false;

		for (size_t i = 0; l > 0 && i < ELEMENTSOF(names); i++)
			if (strlen(names[i].name) == l && strncasecmp(p, names[i].name, l) == 0) {
				bits |= names[i].bit;
				found = true;
			}
		if (l > 0 && !found)
			return perr(x, -EINVAL, "'%.*s' is not a modality (text, image, audio)",
				    (int) MIN(l, (size_t) 64), p);
		p += l;
		p += strspn(p, " ,\t");
	}
	*(uint32_t *) field = bits;
	return 0;
}

DEFINE_PARSE_U32(context_tokens, 0, 1u << 24)
DEFINE_PARSE_U32(retries, 0, 10)
DEFINE_PARSE_U32(mixture_k, 1, 16)
DEFINE_PARSE_U32(max_fallbacks, 0, 16)

static int parse_target_timeout(struct pctx *x, const char *v, void *field)
{
	int r = parse_sec(x, v, field);

	if (r >= 0 && (*(uint64_t *) field < 1000000ull ||
		       *(uint64_t *) field > 3600ull * 1000000000ull))
		return perr(x, -ERANGE, "'%s' is outside [1ms, 1h]", v);
	return r;
}

/* Quality.DOMAIN=: a prefix key; the domain is what follows "Quality." */
static int parse_quality(struct pctx *x, const char *v, void *field)
{
	struct config_target *t = field;
	const char *domain = x->full_key + strlen("Quality.");
	struct config_quality *q;
	double d = 0;
	int r;

	if (!name_valid(domain))
		return perr(x, -EINVAL,
			    "'%s' is not a domain (letters, digits, '.', '_', '-'; at most 64)",
			    domain);
	r = parse_double_range(x, v, &d, 0.0, 1.0);
	if (r < 0)
		return r;
	for (size_t i = 0; i < t->n_quality; i++)
		if (strcmp(t->quality[i].domain, domain) == 0) {
			t->quality[i].quality = d;
			return 0;
		}
	if (t->n_quality >= CONFIG_MAX_QUALITY)
		return perr(x, -E2BIG, "more than %d Quality.DOMAIN= keys", CONFIG_MAX_QUALITY);
	q = realloc(t->quality, (t->n_quality + 1) * sizeof(*q));
	if (!q)
		return -ENOMEM;
	t->quality = q;
	q[t->n_quality].domain = strdup(domain);
	if (!q[t->n_quality].domain)
		return -ENOMEM;
	q[t->n_quality].quality = d;
	t->n_quality++;
	return 0;
}

/* ---- the tables ---- */

struct key_def {
	const char *key; /* ending in '.': a prefix (Quality.DOMAIN=) */
	parse_fn parse;
	size_t offset; /* into the section's object; (size_t) -1: the object itself */
};

#define SELF ((size_t) -1)

#define C(field) offsetof(struct config, field)
static const struct key_def model_keys[] = {
	{ "Path", parse_path, C(model_path) },
	{ "Name", parse_model_name, C(model_name) },
	{ "Threads", parse_threads, C(threads) },
	{ "ChatTemplate", parse_chat_template, C(chat_template) },
	{},
};
static const struct key_def engine_keys[] = {
	{ "PoolBytes", parse_size, C(pool_bytes) },
	{ "MaxSequences", parse_max_sequences, C(max_sequences) },
	{ "QueueLength", parse_queue_length, C(queue_length) },
	{ "ContextLength", parse_context_length, C(context_length) },
	{ "StepTokens", parse_step_tokens, C(step_tokens) },
	{},
};
DEFINE_PARSE_U32(keep_versions, 0, 1000000)
static int parse_registry_map_bytes(struct pctx *x, const char *v, void *field)
{
	int r = parse_size(x, v, field);

	/* Below 1 MiB not even a few hundred records fit; LMDB maps what the address space
	 * allows. */
	if (r >= 0 && (*(uint64_t *) field < (1ull << 20) || *(uint64_t *) field > (1ull << 40)))
		return perr(x, -ERANGE, "'%s' is outside [1M, 1T]", v);
	return r;
}
static int parse_eviction(struct pctx *x, const char *v, void *field)
{
	enum evict_policy pol;

	if (evict_policy_from_name(v, &pol) < 0)
		return perr(x, -EINVAL, "'%s' is not one of gdsf, lru", v);
	*(int *) field = (int) pol;
	return 0;
}
static int parse_hot_type(struct pctx *x, const char *v, void *field)
{
	if (strcmp(v, "stored") == 0)
		*(int *) field = LORA_HOT_STORED;
	else if (strcmp(v, "q8_0") == 0)
		*(int *) field = LORA_HOT_Q8_0;
	else
		return perr(x, -EINVAL, "'%s' is not one of stored, q8_0", v);
	return 0;
}
static int parse_load_path(struct pctx *x, const char *v, void *field)
{
	enum blob_path p;

	/* uring falls back by itself (O_DIRECT refused, io_uring refused); mmap is for benchmarks */
	if ((strcmp(v, "uring") != 0 && strcmp(v, "pread") != 0) || blob_path_from_name(v, &p) < 0)
		return perr(x, -EINVAL, "'%s' is not one of uring, pread", v);
	*(int *) field = (int) p;
	return 0;
}
DEFINE_PARSE_U32(load_queue_depth, 1, 64)
static const struct key_def adapters_keys[] = {
	{ "Directory", parse_path, C(adapter_directory) },
	{ "Load", parse_adapter_load, SELF },
	{ "KeepVersions", parse_keep_versions, C(keep_versions) },
	{ "RegistryMapBytes", parse_registry_map_bytes, C(registry_map_bytes) },
	{ "WarmBytes", parse_size, C(warm_bytes) },
	{ "HotBytes", parse_size, C(hot_bytes) },
	{ "Eviction", parse_eviction, C(eviction) },
	{ "HotType", parse_hot_type, C(hot_type) },
	{ "LoadPath", parse_load_path, C(load_path) },
	{ "LoadQueueDepth", parse_load_queue_depth, C(load_queue_depth) },
	{},
};
static const struct key_def http_keys[] = {
	{ "Listen", parse_listen, C(listen) },
	{ "AllowNonLoopback", parse_bool, C(allow_non_loopback) },
	{ "MaxBodyBytes", parse_size, C(max_body_bytes) },
	{},
};
static int parse_stream_buffer(struct pctx *x, const char *v, void *field)
{
	int r = parse_size(x, v, field);

	if (r >= 0 && (*(uint64_t *) field < 4096 || *(uint64_t *) field > (1ull << 30)))
		return perr(x, -ERANGE, "'%s' is outside [4K, 1G]", v);
	return r;
}

static const struct key_def dbus_keys[] = {
	{ "Bus", parse_bus, C(bus) },
	{ "StreamBufferBytes", parse_stream_buffer, C(stream_buffer_bytes) },
	{},
};
static const struct key_def paths_keys[] = {
	{ "StateDirectory", parse_path, C(state_directory) },
	{ "RuntimeDirectory", parse_path, C(runtime_directory) },
	{},
};
static const struct key_def daemon_keys[] = {
	{ "User", parse_user, C(user) },
	{ "AdminGroup", parse_user, C(admin_group) },
	{ "StopTimeoutSec", parse_sec, C(stop_timeout_ns) },
	{ "LogLevel", parse_log_level, C(log_level) },
	{},
};
DEFINE_PARSE_U32(retention_days, 0, 36500)
static int parse_audit_map_size(struct pctx *x, const char *v, void *field)
{
	int r = parse_size(x, v, field);

	/* Below 1 MiB a few requests' records would fill it; LMDB maps up to what the
	 * address space allows. */
	if (r >= 0 && (*(uint64_t *) field < (1ull << 20) || *(uint64_t *) field > (1ull << 40)))
		return perr(x, -ERANGE, "'%s' is outside [1M, 1T]", v);
	return r;
}
static const struct key_def audit_keys[] = {
	{ "RetentionDays", parse_retention_days, C(audit_retention_days) },
	{ "MapSize", parse_audit_map_size, C(audit_map_size) },
	{},
};
static int parse_resolve_interval(struct pctx *x, const char *v, void *field)
{
	int r = parse_sec(x, v, field);

	if (r >= 0 && (*(uint64_t *) field < 1000000000ull ||
		       *(uint64_t *) field > 86400ull * 1000000000ull))
		return perr(x, -ERANGE, "'%s' is outside [1s, 24h]", v);
	return r;
}
static const struct key_def egress_keys[] = {
	{ "Enforce", parse_bool, C(egress_enforce) },
	{ "WorkerPath", parse_path, C(egress_worker_path) },
	{ "ResolveIntervalSec", parse_resolve_interval, C(egress_resolve_interval_ns) },
	{},
};
static const struct key_def policy_keys[] = {
	{ "PublicTiers", parse_tiers, C(policy_tiers[POLICY_CLASS_PUBLIC]) },
	{ "PersonalTiers", parse_tiers, C(policy_tiers[POLICY_CLASS_PERSONAL]) },
	{ "SecretTiers", parse_tiers, C(policy_tiers[POLICY_CLASS_SECRET]) },
	{ "AllowExternal", parse_bool, C(policy_allow_external) },
	{ "Judge", parse_bool, C(policy_judge) },
	{ "JudgeBand", parse_judge_band, C(policy_judge_band) },
	{ "JudgeTimeoutMs", parse_judge_timeout_ms, C(policy_judge_timeout_ms) },
	{},
};
static const struct key_def rule_keys[] = {
	{ "Match", parse_rule_match, SELF },
	{ "Class", parse_rule_class, SELF },
	{},
};
#undef C

#define M(field) offsetof(struct config_member, field)
static const struct key_def member_keys[] = {
	{ "KeyHash", parse_key_hash, SELF },
	{ "UIDs", parse_uids, SELF },
	{ "Models", parse_models, SELF },
	{ "Admin", parse_bool, M(admin) },
	{ "MaxTiers", parse_max_tiers, SELF },
	{},
};
#undef M

#define T(field) offsetof(struct config_target, field)
static const struct key_def target_keys[] = {
	{ "Tier", parse_target_tier, T(tier) },
	{ "URL", parse_url, T(url) },
	{ "Model", parse_remote_model, T(model) },
	{ "UserControlled", parse_bool, T(user_controlled) },
	{ "CostPerMTokIn", parse_cost, T(cost_in) },
	{ "CostPerMTokOut", parse_cost, T(cost_out) },
	{ "CredentialFile", parse_credential_file, T(credential_file) },
	{ "Modalities", parse_modalities, T(modalities) },
	{ "ContextTokens", parse_context_tokens, T(context_tokens) },
	{ "TimeoutSec", parse_target_timeout, T(timeout_ns) },
	{ "Retries", parse_retries, T(retries) },
	{ "Quality.", parse_quality, SELF },
	{},
};
#undef T

#define C(field) offsetof(struct config, field)
static const struct key_def router_keys[] = {
	{ "MixtureEntropy", parse_unit_float, C(router_mixture_entropy) },
	{ "MixtureK", parse_mixture_k, C(router_mixture_k) },
	{ "MixtureTopK", parse_mixture_k, C(router_mixture_k) },
	{ "ConfidenceThreshold", parse_unit_float, C(router_confidence_threshold) },
	{ "MaxFallbacks", parse_max_fallbacks, C(router_max_fallbacks) },
	{ "CostWeight", parse_cost, C(router_cost_weight) },
	{ "LatencyWeight", parse_cost, C(router_latency_weight) },
	{ "Budget", parse_cost, C(router_budget) },
	{ "HealthCheckSec", parse_sec, C(router_health_interval_ns) },
	{},
};
#undef C

/* Returns the object the section's key offsets apply to, for [Name] or [Name ARG]. */
typedef int (*section_open_fn)(struct pctx *x, const char *arg, void **ret);

static int open_config(struct pctx *x, const char *arg, void **ret)
{
	*ret = x->config;
	return 0;
}

static int open_member(struct pctx *x, const char *arg, void **ret)
{
	struct config *c = x->config;
	struct config_member *m;

	if (!name_valid(arg))
		return perr(
			x, -EINVAL,
			"[Member %s]: a member name is letters, digits, '.', '_', '-' (at most 64)",
			arg);
	for (size_t i = 0; i < c->n_members; i++)
		if (strcmp(c->members[i].name, arg) == 0) {
			/* A drop-in may add to or override an earlier definition. */
			*ret = &c->members[i];
			return 0;
		}
	if (c->n_members >= CONFIG_MAX_MEMBERS)
		return perr(x, -E2BIG, "more than %d members", CONFIG_MAX_MEMBERS);
	m = realloc(c->members, (c->n_members + 1) * sizeof(*m));
	if (!m)
		return -ENOMEM;
	c->members = m;
	m = &c->members[c->n_members];
	*m = (struct config_member){ .name = strdup(arg),
				     .file = strdup(x->file),
				     .line = x->line };
	if (!m->name || !m->file) {
		free(m->name);
		free(m->file);
		return -ENOMEM;
	}
	c->n_members++;
	*ret = m;
	return 0;
}

static int open_rule(struct pctx *x, const char *arg, void **ret)
{
	struct config *c = x->config;
	struct config_rule *r;

	if (!name_valid(arg))
		return perr(x, -EINVAL,
			    "[Rule %s]: a rule name is letters, digits, '.', '_', '-' (at most 64)",
			    arg);
	for (size_t i = 0; i < c->n_rules; i++)
		if (strcmp(c->rules[i].name, arg) == 0) {
			/* A drop-in may override an earlier rule's keys. */
			*ret = &c->rules[i];
			return 0;
		}
	if (c->n_rules >= CONFIG_MAX_RULES)
		return perr(x, -E2BIG, "more than %d rules", CONFIG_MAX_RULES);
	r = realloc(c->rules, (c->n_rules + 1) * sizeof(*r));
	if (!r)
		return -ENOMEM;
	c->rules = r;
	r = &c->rules[c->n_rules];
	*r = (struct config_rule){ .name = strdup(arg), .file = strdup(x->file), .line = x->line,
				   .class = -1 };
	if (!r->name || !r->file) {
		free(r->name);
		free(r->file);
		return -ENOMEM;
	}
	c->n_rules++;
	*ret = r;
	return 0;
}

static int open_target(struct pctx *x, const char *arg, void **ret)
{
	struct config *c = x->config;
	struct config_target *t;

	if (!name_valid(arg))
		return perr(x, -EINVAL,
			    "[Target %s]: a target name is letters, digits, '.', '_', '-' (at most "
			    "64)",
			    arg);
	for (size_t i = 0; i < c->n_targets; i++)
		if (strcmp(c->targets[i].name, arg) == 0) {
			*ret = &c->targets[i];
			return 0;
		}
	if (c->n_targets >= CONFIG_MAX_TARGETS)
		return perr(x, -E2BIG, "more than %d targets", CONFIG_MAX_TARGETS);
	t = realloc(c->targets, (c->n_targets + 1) * sizeof(*t));
	if (!t)
		return -ENOMEM;
	c->targets = t;
	t = &c->targets[c->n_targets];
	*t = (struct config_target){ .name = strdup(arg),
				     .file = strdup(x->file),
				     .line = x->line,
				     .tier = -1,
				     .modalities = CONFIG_MODALITY_TEXT,
				     .timeout_ns = 30ull * 1000000000ull,
				     .retries = 2 };
	if (!t->name || !t->file) {
		free(t->name);
		free(t->file);
		return -ENOMEM;
	}
	c->n_targets++;
	*ret = t;
	return 0;
}

struct section_def {
	const char *name;
	bool named; /* [Name ARG] */
	section_open_fn open;
	const struct key_def *keys;
};

/* New sections ([Policy], [Rule NAME], [Target NAME], [Audit], [Egress], [Router]) go here. */
static const struct section_def sections[] = {
	{ "Model", false, open_config, model_keys },
	{ "Engine", false, open_config, engine_keys },
	{ "Adapters", false, open_config, adapters_keys },
	{ "HTTP", false, open_config, http_keys },
	{ "DBus", false, open_config, dbus_keys },
	{ "Paths", false, open_config, paths_keys },
	{ "Daemon", false, open_config, daemon_keys },
	{ "Member", true, open_member, member_keys },
	{ "Policy", false, open_config, policy_keys },
	{ "Rule", true, open_rule, rule_keys },
	{ "Audit", false, open_config, audit_keys },
	{ "Target", true, open_target, target_keys },
	{ "Router", false, open_config, router_keys },
	{ "Egress", false, open_config, egress_keys },
};

/* ---- lifetime ---- */

int config_new(struct config **ret)
{
	struct config *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->n_ref = 1;
	c->max_sequences = 8;
	c->queue_length = 64;
	c->max_body_bytes = 1u << 20;
	c->bus = CONFIG_BUS_SYSTEM;
	c->stream_buffer_bytes = 256u * 1024u;
	c->stop_timeout_ns = 30ull * 1000000000ull;
	c->log_level = LOG_INFO;
	c->policy_tiers[POLICY_CLASS_PUBLIC] = POLICY_TIER(0) | POLICY_TIER(1);
	c->policy_tiers[POLICY_CLASS_PERSONAL] = POLICY_TIER(0) | POLICY_TIER(1);
	c->policy_tiers[POLICY_CLASS_SECRET] = POLICY_TIER(0);
	c->policy_judge_band[0] = 0.3f;
	c->policy_judge_band[1] = 0.7f;
	c->policy_judge_timeout_ms = 2000;
	c->audit_retention_days = 90;
	c->audit_map_size = 256ull << 20;
	c->keep_versions = 3;
	c->registry_map_bytes = 1ull << 30;
	c->warm_bytes = 2ull << 30;
	c->eviction = EVICT_GDSF;
	c->load_path = BLOB_PATH_URING;
	c->load_queue_depth = 8;
	c->egress_enforce = true;
	c->egress_resolve_interval_ns = 300ull * 1000000000ull;
	c->router_mixture_entropy = 0.8;
	c->router_mixture_k = 2;
	c->router_max_fallbacks = 2;
	c->router_cost_weight = 1.0;
	c->router_latency_weight = 0.05;
	c->router_health_interval_ns = 10ull * 1000000000ull;
	c->listen = (struct config_listen){ .kind = CONFIG_LISTEN_TCP,
					    .host = strdup("127.0.0.1"),
					    .port = 8411,
					    .family = AF_INET,
					    .loopback = true };
	if (!c->listen.host) {
		free(c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

static void config_free(struct config *c)
{
	free(c->model_path);
	free(c->model_name);
	free(c->chat_template);
	free(c->adapter_directory);
	strv_free(c->adapter_load, c->n_adapter_load);
	listen_clear(&c->listen);
	free(c->state_directory);
	free(c->runtime_directory);
	free(c->user);
	free(c->admin_group);
	free(c->egress_worker_path);
	for (size_t i = 0; i < c->n_members; i++) {
		struct config_member *m = &c->members[i];
		free(m->name);
		free(m->uids);
		strv_free(m->models, m->n_models);
		free(m->file);
	}
	free(c->members);
	for (size_t i = 0; i < c->n_rules; i++) {
		free(c->rules[i].name);
		free(c->rules[i].match);
		free(c->rules[i].file);
	}
	free(c->rules);
	for (size_t i = 0; i < c->n_targets; i++) {
		struct config_target *t = &c->targets[i];
		free(t->name);
		free(t->url);
		free(t->model);
		free(t->credential_file);
		for (size_t j = 0; j < t->n_quality; j++)
			free(t->quality[j].domain);
		free(t->quality);
		free(t->file);
	}
	free(c->targets);
	strv_free(c->files, c->n_files);
	free(c);
}

struct config *config_ref(struct config *c)
{
	if (c)
		__atomic_add_fetch(&c->n_ref, 1, __ATOMIC_RELAXED);
	return c;
}

struct config *config_unref(struct config *c)
{
	if (c && __atomic_sub_fetch(&c->n_ref, 1, __ATOMIC_ACQ_REL) == 0)
		config_free(c);
	return NULL;
}

/* ---- the parser ---- */

static char *trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
		*--end = 0;
	return s;
}

static bool text_has_nul(const char *text, size_t len)
{
	return memchr(text, 0, len) != NULL;
}

int config_parse_text(struct config *c, const char *text, size_t len, const char *filename,
		      struct errmsg *e)
{
	struct pctx x = { .file = filename ? filename : "(text)", .e = e, .config = c };
	const struct section_def *sec = NULL;
	void *obj = NULL;
	char section_name[160] = "";
	size_t pos = 0;
	unsigned lineno = 0;

	assert_return(c && (text || len == 0), -EINVAL);
	if (len > CONFIG_MAX_FILE_BYTES)
		return errmsg_set(e, -EFBIG, "%s: larger than %u bytes", x.file,
				  CONFIG_MAX_FILE_BYTES);
	if (text_has_nul(text, len))
		return errmsg_set(e, -EINVAL, "%s: contains a NUL byte", x.file);

	while (pos < len) {
		_cleanup_free_ char *logical = NULL;
		size_t n_logical = 0;
		unsigned first_line = lineno + 1;
		char *line, *eq, *key, *value;
		int r;

		/* One logical line: physical lines joined where one ends in a backslash. */
		for (;;) {
			const char *nl = memchr(text + pos, '\n', len - pos);
			size_t l = nl ? (size_t) (nl - (text + pos)) : len - pos;
			char *nb;
			bool cont;

			lineno++;
			nb = realloc(logical, n_logical + l + 2);
			if (!nb)
				return -ENOMEM;
			logical = nb;
			memcpy(logical + n_logical, text + pos, l);
			n_logical += l;
			logical[n_logical] = 0;
			pos += l + (nl ? 1 : 0);
			while (n_logical > 0 && logical[n_logical - 1] == '\r')
				logical[--n_logical] = 0;
			cont = n_logical > 0 && logical[n_logical - 1] == '\\' &&
			       logical[strspn(logical, " \t")] != '#' &&
			       logical[strspn(logical, " \t")] != ';';
			if (!cont || pos >= len)
				break;
			logical[n_logical - 1] =
				' '; /* as systemd: the backslash becomes a space */
		}
		x.line = first_line;
		x.key = NULL;
		line = trim(logical);

		if (!line[0] || line[0] == '#' || line[0] == ';')
			continue;

		if (line[0] == '[') {
			char *end = strchr(line, ']'), *name, *arg;
			if (!end || end[1])
				return perr(&x, -EINVAL, "malformed section header '%.80s'", line);
			*end = 0;
			name = trim(line + 1);
			arg = strpbrk(name, " \t");
			if (arg) {
				*arg++ = 0;
				arg = trim(arg);
				size_t al = strlen(arg);
				if (al >= 2 && arg[0] == '"' && arg[al - 1] == '"') {
					arg[al - 1] = 0;
					arg++;
				}
			}
			sec = NULL;
			for (size_t i = 0; i < ELEMENTSOF(sections); i++)
				if (strcmp(sections[i].name, name) == 0)
					sec = &sections[i];
			if (!sec)
				return perr(&x, -EINVAL, "unknown section [%.80s]", name);
			if (sec->named && (!arg || !arg[0]))
				return perr(&x, -EINVAL, "[%s] needs a name: [%s NAME]", name,
					    name);
			if (!sec->named && arg)
				return perr(&x, -EINVAL, "[%s] takes no name", name);
			snprintf(section_name, sizeof(section_name), "%s%s%.64s", name,
				 arg ? " " : "", arg ? arg : "");
			x.section = section_name;
			r = sec->open(&x, arg, &obj);
			if (r < 0)
				return r;
			continue;
		}

		eq = strchr(line, '=');
		if (!eq)
			return perr(&x, -EINVAL, "expected Key=Value or [Section], got '%.80s'",
				    line);
		*eq = 0;
		key = trim(line);
		value = trim(eq + 1);
		if (!key[0])
			return perr(&x, -EINVAL, "missing key before '='");
		if (!sec)
			return perr(&x, -EINVAL, "'%.80s=' is outside any section", key);
		{
			size_t vl = strlen(value);
			if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"') {
				value[vl - 1] = 0;
				value++;
			}
		}

		const struct key_def *k = NULL;
		for (const struct key_def *d = sec->keys; d->key; d++) {
			size_t dl = strlen(d->key);
			if (strcmp(d->key, key) == 0 ||
			    (dl > 0 && d->key[dl - 1] == '.' && strncmp(d->key, key, dl) == 0 &&
			     key[dl]))
				k = d;
		}
		if (!k)
			return perr(&x, -EINVAL, "unknown key '%.80s' in [%s]", key, section_name);
		x.key = k->key;
		x.full_key = key;
		r = k->parse(&x, value, k->offset == SELF ? obj : (char *) obj + k->offset);
		if (r < 0)
			return r == -ENOMEM
				       ? errmsg_set(e, r, "%s:%u: out of memory", x.file, x.line)
				       : r;
	}
	return 0;
}

/* ---- loading files ---- */

static int read_file(const char *path, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = -EBADF;
	_cleanup_free_ char *buf = NULL;
	struct stat st;
	size_t n = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EISDIR;
	if (st.st_size > CONFIG_MAX_FILE_BYTES)
		return -EFBIG;
	buf = malloc((size_t) st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	while (n < (size_t) st.st_size) {
		ssize_t k = read(fd, buf + n, (size_t) st.st_size - n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			break;
		n += (size_t) k;
	}
	buf[n] = 0;
	*ret = TAKE_PTR(buf);
	*ret_len = n;
	return 0;
}

static int add_file(struct config *c, const char *path)
{
	char **v = realloc(c->files, (c->n_files + 1) * sizeof(char *));

	if (!v)
		return -ENOMEM;
	c->files = v;
	c->files[c->n_files] = strdup(path);
	if (!c->files[c->n_files])
		return -ENOMEM;
	c->n_files++;
	return 0;
}

static int parse_file(struct config *c, const char *path, bool may_be_missing, struct errmsg *e)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r;

	r = read_file(path, &text, &len);
	if (r == -ENOENT && may_be_missing)
		return 0;
	if (r < 0)
		return errmsg_set(e, r, "%s: %s", path,
				  r == -EFBIG ? "larger than 1 MiB" : strerror(-r));
	r = add_file(c, path);
	if (r < 0)
		return r;
	return config_parse_text(c, text, len, path, e);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

static int parse_dropins(struct config *c, const char *dir, struct errmsg *e)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char **names = NULL;
	size_t n = 0;
	int r = 0;

	if (!d)
		return errno == ENOENT || errno == ENOTDIR ? 0
							    : errmsg_set(e, -errno, "%s: %s", dir,
									 strerror(errno));
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		char **nn;

		if (de->d_name[0] == '.' || l <= 5 || strcmp(de->d_name + l - 5, ".conf") != 0)
			continue;
		if (n >= CONFIG_MAX_DROPINS) {
			r = errmsg_set(e, -E2BIG, "%s: more than %d drop-ins", dir,
				       CONFIG_MAX_DROPINS);
			goto out;
		}
		nn = realloc(names, (n + 1) * sizeof(char *));
		if (!nn) {
			r = -ENOMEM;
			goto out;
		}
		names = nn;
		if (asprintf(&names[n], "%s/%s", dir, de->d_name) < 0) {
			r = -ENOMEM;
			goto out;
		}
		n++;
	}
	qsort(names, n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < n && r >= 0; i++)
		r = parse_file(c, names[i], false, e);
out:
	strv_free(names, n);
	closedir(d);
	return r;
}

/* Fills in defaults that depend on other keys or the environment. */
static int config_finalize(struct config *c)
{
	if (!c->state_directory) {
		const char *s = getenv("STATE_DIRECTORY");
		/* systemd may pass several, separated by ':'; the first is ours. */
		c->state_directory = s && s[0] == '/' ? strndup(s, strcspn(s, ":"))
						       : strdup("/var/lib/molly");
		if (!c->state_directory)
			return -ENOMEM;
	}
	if (!c->runtime_directory) {
		const char *s = getenv("RUNTIME_DIRECTORY");
		c->runtime_directory = s && s[0] == '/' ? strndup(s, strcspn(s, ":"))
							 : strdup("/run/molly");
		if (!c->runtime_directory)
			return -ENOMEM;
	}
	if (!c->adapter_directory &&
	    asprintf(&c->adapter_directory, "%s/adapters", c->state_directory) < 0) {
		c->adapter_directory = NULL;
		return -ENOMEM;
	}
	return 0;
}

int config_verify(const struct config *c, struct errmsg *e)
{
	if (c->listen.kind == CONFIG_LISTEN_TCP && !c->listen.loopback && !c->allow_non_loopback)
		return errmsg_set(
			e, -EPERM,
			"[HTTP] Listen=%s%s%s:%u is not a loopback address: the API would be "
			"reachable from the network. Set AllowNonLoopback=yes in [HTTP] if "
			"that is what you want (and configure [Member] keys)",
			c->listen.family == AF_INET6 ? "[" : "", c->listen.host,
			c->listen.family == AF_INET6 ? "]" : "", c->listen.port);
	for (size_t i = 0; i < c->n_members; i++) {
		const struct config_member *m = &c->members[i];
		if (!m->has_key_hash && m->n_uids == 0)
			return errmsg_set(
				e, -EINVAL,
				"%s:%u: [Member %s] has neither KeyHash= nor UIDs=, so nobody "
				"can act as it",
				m->file, m->line, m->name);
	}
	for (size_t i = 0; i < c->n_members; i++)
		for (size_t j = i + 1; j < c->n_members; j++)
			if (c->members[i].has_key_hash && c->members[j].has_key_hash &&
			    memcmp(c->members[i].key_hash, c->members[j].key_hash, 32) == 0)
				return errmsg_set(e, -EINVAL,
						  "%s:%u: [Member %s] has the same KeyHash= as "
						  "[Member %s]",
						  c->members[j].file, c->members[j].line,
						  c->members[j].name, c->members[i].name);
	for (size_t i = 0; i < c->n_rules; i++) {
		const struct config_rule *r = &c->rules[i];
		if (!r->match || r->class < 0)
			return errmsg_set(e, -EINVAL, "%s:%u: [Rule %s] needs both Match= and Class=",
					  r->file, r->line, r->name);
	}
	for (size_t i = 0; i < c->n_targets; i++) {
		const struct config_target *t = &c->targets[i];
		if (t->tier < 1 || !t->url)
			return errmsg_set(e, -EINVAL, "%s:%u: [Target %s] needs both Tier= and URL=",
					  t->file, t->line, t->name);
	}
	if (c->model_path && c->model_name == NULL) {
		const char *b = strrchr(c->model_path, '/');
		b = b ? b + 1 : c->model_path;
		if (!b[0])
			return errmsg_set(e, -EINVAL, "[Model] Path=%s names a directory",
					  c->model_path);
	}
	return 0;
}

int config_load(const char *path, struct config **ret, struct errmsg *e)
{
	_cleanup_(config_unrefp) struct config *c = NULL;
	_cleanup_free_ char *dropins = NULL;
	int r;

	assert_return(ret, -EINVAL);
	r = config_new(&c);
	if (r < 0)
		return r;
	r = parse_file(c, path ? path : CONFIG_DEFAULT_PATH, !path, e);
	if (r < 0)
		return r;
	if (asprintf(&dropins, "%s.d", path ? path : CONFIG_DEFAULT_PATH) < 0)
		return -ENOMEM;
	r = parse_dropins(c, dropins, e);
	if (r < 0)
		return r;
	r = config_finalize(c);
	if (r < 0)
		return r;
	r = config_verify(c, e);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(c);
	return 0;
}

/* ---- lookups ---- */

char *config_model_name(const struct config *c)
{
	const char *b;
	size_t n;

	if (c->model_name)
		return strdup(c->model_name);
	if (!c->model_path)
		return strdup("model");
	b = strrchr(c->model_path, '/');
	b = b ? b + 1 : c->model_path;
	n = strlen(b);
	if (n > 5 && strcmp(b + n - 5, ".gguf") == 0)
		n -= 5;
	return strndup(b, n);
}

const struct config_member *config_find_member(const struct config *c, const char *name)
{
	if (!c || !name)
		return NULL;
	for (size_t i = 0; i < c->n_members; i++)
		if (strcmp(c->members[i].name, name) == 0)
			return &c->members[i];
	return NULL;
}

const struct config_member *config_find_member_by_uid(const struct config *c, uid_t uid)
{
	if (!c)
		return NULL;
	for (size_t i = 0; i < c->n_members; i++)
		for (size_t k = 0; k < c->members[i].n_uids; k++)
			if (c->members[i].uids[k] == uid)
				return &c->members[i];
	return NULL;
}

const struct config_member *config_find_member_by_key(const struct config *c, const char *key)
{
	const struct config_member *found = NULL;
	uint8_t h[SHA256_DIGEST_SIZE];

	if (!c || !key)
		return NULL;
	sha256(key, strlen(key), h);
	/* Every member is compared, and each comparison takes the same time, so timing does
	 * not tell how close a guess was. */
	for (size_t i = 0; i < c->n_members; i++) {
		uint8_t diff = 0;
		for (size_t k = 0; k < SHA256_DIGEST_SIZE; k++)
			diff |= (uint8_t) (h[k] ^ c->members[i].key_hash[k]);
		if (diff == 0 && c->members[i].has_key_hash && !found)
			found = &c->members[i];
	}
	return found;
}

bool config_member_may_use(const struct config_member *m, const char *base_name,
			   const char *model)
{
	const char *colon;
	const char *adapter = NULL;

	if (!m)
		return false;
	if (!model || !model[0])
		model = base_name;
	colon = strchr(model, ':');
	if (colon) {
		/* "base:adapter" must name our base. */
		if (!base_name || (size_t) (colon - model) != strlen(base_name) ||
		    strncmp(model, base_name, (size_t) (colon - model)) != 0)
			return false;
		adapter = colon + 1;
	}
	else if (!base_name || strcmp(model, base_name) != 0)
		adapter = model;
	for (size_t i = 0; i < m->n_models; i++) {
		const char *s = m->models[i];
		const char *sc = strchr(s, ':');

		if (strcmp(s, "*") == 0 || strcmp(s, model) == 0)
			return true;
		/* "adapter" allows "base:adapter" and the reverse. */
		if (adapter && strcmp(s, adapter) == 0)
			return true;
		if (adapter && sc && strcmp(sc + 1, adapter) == 0 && base_name &&
		    (size_t) (sc - s) == strlen(base_name) &&
		    strncmp(s, base_name, (size_t) (sc - s)) == 0)
			return true;
	}
	return false;
}

void config_key_hash_string(const char *key, char ret[72])
{
	uint8_t h[SHA256_DIGEST_SIZE];
	char hex[SHA256_HEX_SIZE];

	sha256(key, strlen(key), h);
	snprintf(ret, 72, "sha256:%s", sha256_hex(h, hex));
}
