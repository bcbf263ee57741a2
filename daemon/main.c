/* SPDX-License-Identifier: MIT */
/*
 * main.c: mollyd — `mollyd [--config FILE]`.
 *
 * Start-up: read the configuration; run the privileged steps (as root only); switch to
 * [Daemon] User= with no capabilities; load the model and the adapters (manager); start the
 * scheduler thread; serve D-Bus and HTTP; tell systemd READY=1.
 *
 * Threads: this one runs the sd-event loop (signals, D-Bus, watchdog, events posted by the
 * fronts); the scheduler has its own thread; microhttpd has its own; a drain thread runs at
 * shutdown so the loop can keep delivering the last events while the scheduler winds down.
 *
 * Signals: SIGTERM/SIGINT stop accepting, finish or cancel what is in flight within
 * StopTimeoutSec=, then exit 0. SIGHUP re-reads the configuration and applies it without
 * dropping requests (a bad file is logged and the old configuration stays).
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <sys/syscall.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "core/config.h"
#include "core/default-model.h"
#include "core/log.h"
#include "egress/client.h"
#include "egress/egress.h"
#include "front/dbus.h"
#include "front/dev.h"
#include "front/http.h"
#include "manager.h"

#ifndef MOLLY_VERSION
#define MOLLY_VERSION "0.1.0"
#endif
#ifndef MOLLY_LIBEXECDIR
#define MOLLY_LIBEXECDIR "/usr/libexec"
#endif

/* How long start and reload wait for the egress workers to confirm their targets. */
#define EGRESS_START_WAIT_NS (15ull * 1000000000ull)
#define EGRESS_RELOAD_WAIT_NS (10ull * 1000000000ull)

/* After the drain, how long the fronts get to hand out the last events. */
#define FLUSH_TIMEOUT_USEC (5ull * 1000000ull)

struct daemon {
	const char *config_path;       /* NULL: the default */
	struct config *config;         /* owned reference */
	struct manager *manager;
	sd_event *event;
	struct dbus_front *dbus;
	struct http_front *http;
	struct dev_front *dev;
	int cuse_fd;                   /* /dev/cuse, opened as root for the dev front, or -EBADF */

	bool stopping;
	bool drained;
	int drain_fd;                  /* eventfd: the drain thread is done */
	pthread_t drain_thread;
	bool drain_started;
	sd_event_source *drain_source;
	sd_event_source *idle_timer;
	uint64_t flush_deadline;
	uint64_t watchdog_usec;
	sd_event_source *watchdog_timer;

	/* Egress enforcement: eg from egress_start() (as root), handed to the client. */
	bool egress_wanted;            /* Enforce=yes and remote targets configured */
	struct egress *eg;
	char egress_failure[600];      /* why enforcement did not start ("" : it did) */
	struct egress_client *egress;
	/* Denials arrive on the egress supervisor thread; those before the manager (and its
	 * audit store) exists wait here, a few at most. */
	pthread_mutex_t denial_lock;
	struct manager *denial_manager;
	struct egress_denial early_denials[16];
	size_t n_early_denials;
};

/* ---- privileged set-up ---- */

/*
 * What must happen as root, before the switch to User=. Each step gets the daemon and its
 * target user (NULL when no switch happens). Later features (the egress workers' cgroups and
 * BPF programs) add their steps here.
 */
struct privileged_step {
	const char *name;
	int (*run)(struct daemon *d, const struct passwd *user, struct errmsg *e);
};

static int make_dir_for(const char *path, const struct passwd *user, mode_t mode,
			struct errmsg *e)
{
	struct stat st;

	if (!path)
		return 0;
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return errmsg_set(e, -errno, "creating %s: %s", path, strerror(errno));
	if (stat(path, &st) < 0)
		return errmsg_set(e, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return errmsg_set(e, -ENOTDIR, "%s is not a directory", path);
	if (user && (st.st_uid != user->pw_uid) && chown(path, user->pw_uid, user->pw_gid) < 0)
		return errmsg_set(e, -errno, "chown %s to %s: %s", path, user->pw_name,
				  strerror(errno));
	return 0;
}

/* StateDirectory=, RuntimeDirectory= and the adapter directory, owned by User=. (Under systemd
 * the unit's StateDirectory=/RuntimeDirectory= have made them already.) */
static int step_directories(struct daemon *d, const struct passwd *user, struct errmsg *e)
{
	int r;

	r = make_dir_for(d->config->state_directory, user, 0755, e);
	if (r >= 0)
		r = make_dir_for(d->config->runtime_directory, user, 0755, e);
	if (r >= 0)
		r = make_dir_for(d->config->adapter_directory, user, 0755, e);
	return r;
}

static bool test_env(const char *name)
{
	const char *t = getenv("MOLLY_EGRESS_TEST"), *v = getenv(name);

	return t && strcmp(t, "1") == 0 && v && v[0] && strcmp(v, "0") != 0;
}

/* [Model] Path= unset: $MOLLY_MODEL, else Molly's own model (default-model.h). None found:
 * the path stays unset and the manager says what to set. */
static int default_model_path(struct config *c)
{
	return c->model_path ? 0 : default_model_find(&c->model_path);
}

/* The molly-egress to start: WorkerPath=, else next to this executable (a build tree), else
 * ../libexec/molly/ from it, else the configured libexec directory. */
static int egress_worker_path(const struct config *c, char *buf, size_t size)
{
	char self[4096];
	ssize_t n;

	if (c->egress_worker_path) {
		snprintf(buf, size, "%s", c->egress_worker_path);
		return access(buf, X_OK) < 0 ? -errno : 0;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		char *slash;
		self[n] = 0;
		slash = strrchr(self, '/');
		if (slash) {
			*slash = 0;
			snprintf(buf, size, "%.3800s/molly-egress", self);
			if (access(buf, X_OK) == 0)
				return 0;
			/* PREFIX/sbin/mollyd → PREFIX/libexec/molly/molly-egress, whatever the
			 * prefix was at configure time */
			snprintf(buf, size, "%.3800s/../libexec/molly/molly-egress", self);
			if (access(buf, X_OK) == 0)
				return 0;
		}
	}
	snprintf(buf, size, "%s/molly/molly-egress", MOLLY_LIBEXECDIR);
	return access(buf, X_OK) < 0 ? -errno : 0;
}

/* TEST ONLY (MOLLY_EGRESS_TEST=1 MOLLY_EGRESS_TEST_CORE_CONNECT=ADDR:PORT): once in the core
 * cgroup, try one TCP connect and log what happened, so a test can show the core has no
 * route out (EPERM, and a denial record). */
static void test_core_connect(void)
{
	const char *dest = getenv("MOLLY_EGRESS_TEST_CORE_CONNECT");
	struct egress_dest d;
	struct errmsg e = { { 0 } };
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} sa = { 0 };
	socklen_t len;
	int fd, r;

	if (!test_env("MOLLY_EGRESS_TEST_CORE_CONNECT"))
		return;
	if (egress_dest_parse(dest, &d, &e) < 0) {
		log_error("TEST: MOLLY_EGRESS_TEST_CORE_CONNECT=%s: %s", dest, e.text);
		return;
	}
	if (d.family == AF_INET) {
		sa.in.sin_family = AF_INET;
		sa.in.sin_port = htons(d.port);
		memcpy(&sa.in.sin_addr, d.addr, 4);
		len = sizeof(sa.in);
	} else {
		sa.in6.sin6_family = AF_INET6;
		sa.in6.sin6_port = htons(d.port);
		memcpy(&sa.in6.sin6_addr, d.addr, 16);
		len = sizeof(sa.in6);
	}
	fd = socket(d.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_error("TEST: core connect to %s: socket: %m", dest);
		return;
	}
	r = connect(fd, &sa.sa, len);
	if (r < 0)
		log_notice("TEST: core connect to %s: %s (errno %d)", dest, strerror(errno), errno);
	else
		log_warning("TEST: core connect to %s: CONNECTED (the core is not filtered)", dest);
	close(fd);
}

/* Whether uid/gid may execute path (every directory on the way included): a child switches to
 * them and asks. We are root and single-threaded here. */
static bool can_exec_as(const char *path, uid_t uid, gid_t gid)
{
	int status = 0;
	pid_t p = fork();

	if (p < 0)
		return false;
	if (p == 0) {
		if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 ||
		    setresuid(uid, uid, uid) < 0)
			_exit(2);
		_exit(access(path, X_OK) == 0 ? 0 : 1);
	}
	if (waitpid(p, &status, 0) < 0)
		return false;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Egress enforcement: the cgroups, the BPF programs and the privileged helper; this process
 * moves into the core cgroup (no inet connection at all). A failure is not fatal: remote
 * tiers stay closed (fail closed) and the reason is logged and shown in Status. */
static int step_egress(struct daemon *d, const struct passwd *user, struct errmsg *e)
{
	char path[4096];
	struct errmsg ee = { { 0 } };
	int r;

	if (!d->egress_wanted)
		return 0;
	if (test_env("MOLLY_EGRESS_TEST_FAIL_START")) {
		snprintf(d->egress_failure, sizeof(d->egress_failure),
			 "TEST: MOLLY_EGRESS_TEST_FAIL_START is set");
		return 0;
	}
	r = egress_worker_path(d->config, path, sizeof(path));
	if (r < 0) {
		snprintf(d->egress_failure, sizeof(d->egress_failure),
			 "the egress worker %.300s is not executable (%s); set [Egress] WorkerPath=",
			 path, strerror(-r));
		return 0;
	}
	/* Workers never run as root (root could leave its cgroup): User=, else nobody. */
	uid_t wuid = user ? user->pw_uid : getuid();
	gid_t wgid = user ? user->pw_gid : getgid();
	if (wuid == 0) {
		struct passwd pwbuf, *nb = NULL;
		char buf[1024];
		if (getpwnam_r("nobody", &pwbuf, buf, sizeof(buf), &nb) != 0 || !nb) {
			snprintf(d->egress_failure, sizeof(d->egress_failure),
				 "no [Daemon] User= and no user 'nobody' to run the egress workers "
				 "as (they must not run as root)");
			return 0;
		}
		wuid = nb->pw_uid;
		wgid = nb->pw_gid;
		if (!can_exec_as(path, wuid, wgid)) {
			/* A build tree under a private home, say. Without User= the whole daemon
			 * runs as root anyway (warned about below); say it loudly. */
			log_warning("egress: user nobody cannot execute %s (a directory on the way is "
				    "closed to it): the egress workers run as root, which weakens "
				    "their confinement; set [Daemon] User= and install molly-egress "
				    "where that user can run it",
				    path);
			wuid = 0;
			wgid = 0;
		}
	} else if (!can_exec_as(path, wuid, wgid)) {
		snprintf(d->egress_failure, sizeof(d->egress_failure),
			 "user %u cannot execute the egress worker %.300s (check the permissions "
			 "of it and its directories, or set [Egress] WorkerPath=)",
			 (unsigned) wuid, path);
		return 0;
	}
	r = egress_start("mollyd", path, wuid, wgid, &d->eg, &ee);
	if (r < 0) {
		snprintf(d->egress_failure, sizeof(d->egress_failure), "%s",
			 ee.text[0] ? ee.text : strerror(-r));
		return 0;
	}
	/* The core never needs to leave its cgroup again: sealed, not even a core taken over
	 * by an attacker can ask the helper to move it out. */
	r = egress_seal(d->eg, &ee);
	if (r < 0) {
		snprintf(d->egress_failure, sizeof(d->egress_failure), "sealing the core: %s",
			 ee.text[0] ? ee.text : strerror(-r));
		d->eg = egress_free(d->eg);
		return 0;
	}
	log_info("egress enforcement: core cgroup %s (no inet connection); workers: %s",
		 egress_cgroup_path(d->eg, EGRESS_CORE), path);
	test_core_connect();
	return 0;
}

/* /dev/cuse is root's: open it now for the CUSE fallback of /dev/molly, which the dev front
 * uses only when kmod-shim's control node is absent. Never fatal. */
static int step_cuse(struct daemon *d, const struct passwd *user, struct errmsg *e)
{
	const char *ctl = getenv("MOLLY_DEV_CONTROL"), *cuse = getenv("MOLLY_DEV_CUSE");

	if (access(ctl && *ctl ? ctl : "/dev/molly-control", F_OK) == 0)
		return 0; /* the module is there */
	if (cuse && strcmp(cuse, "0") == 0)
		return 0; /* MOLLY_DEV_CUSE=0: no fallback (tests' daemons must not make /dev/molly) */
	d->cuse_fd = open("/dev/cuse", O_RDWR | O_CLOEXEC);
	if (d->cuse_fd < 0) {
		log_debug("no /dev/cuse (%m): without kmod-shim the device will be off");
		d->cuse_fd = -EBADF;
	}
	return 0;
}

static const struct privileged_step privileged_steps[] = {
	{ "directories", step_directories },
	{ "egress", step_egress },
	{ "cuse", step_cuse },
};

/* Whether any capability is still permitted or effective. */
static bool holds_capabilities(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = { 0 };

	if (syscall(SYS_capget, &h, data) < 0)
		return true; /* cannot tell: assume the worst */
	for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
		if (data[i].permitted || data[i].effective)
			return true;
	return false;
}

static int drop_privileges(const struct passwd *pw, struct errmsg *e)
{
	/* Empty the bounding set first (needs CAP_SETPCAP, which root has): nothing we exec
	 * could ever get a capability back. */
	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return errmsg_set(e, -errno, "dropping capability %d: %s", c,
					  strerror(errno));
	if (initgroups(pw->pw_name, pw->pw_gid) < 0)
		return errmsg_set(e, -errno, "initgroups(%s): %s", pw->pw_name, strerror(errno));
	if (setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) < 0)
		return errmsg_set(e, -errno, "setresgid(%u): %s", (unsigned) pw->pw_gid,
				  strerror(errno));
	if (setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) < 0)
		return errmsg_set(e, -errno, "setresuid(%u): %s", (unsigned) pw->pw_uid,
				  strerror(errno));
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return errmsg_set(e, -errno, "PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
	/* setuid() away from root clears the capability sets; check rather than trust. */
	if (holds_capabilities())
		return errmsg_set(e, -EPERM, "capabilities are still held after the switch to %s",
				  pw->pw_name);
	if (setuid(0) == 0)
		return errmsg_set(e, -EPERM, "could switch back to root after dropping privileges");
	return 0;
}

static int become_user(struct daemon *d)
{
	struct passwd pwbuf, *pw = NULL;
	char buf[4096];
	struct errmsg e = { { 0 } };
	int r;

	if (d->config->user) {
		r = getpwnam_r(d->config->user, &pwbuf, buf, sizeof(buf), &pw);
		if (r != 0 || !pw)
			return log_error_errno(
				-ENOENT,
				"[Daemon] User=%s: no such user (create it, e.g. with "
				"systemd-sysusers and packaging/sysusers.d/molly.conf)",
				d->config->user);
	}
	if (geteuid() != 0) {
		if (d->egress_wanted)
			snprintf(d->egress_failure, sizeof(d->egress_failure),
				 "mollyd was not started as root (loading the eBPF egress filter "
				 "and making its cgroups need root)");
		if (pw && pw->pw_uid != geteuid())
			log_warning(
				"not started as root: staying uid %u instead of [Daemon] User=%s",
				(unsigned) geteuid(), d->config->user);
		return 0;
	}
	for (size_t i = 0; i < ELEMENTSOF(privileged_steps); i++) {
		r = privileged_steps[i].run(d, pw, &e);
		if (r < 0)
			return log_error_errno(r, "privileged set-up (%s): %s",
					       privileged_steps[i].name, e.text);
	}
	if (!pw) {
		log_warning("running as root: set [Daemon] User= (e.g. molly) to drop privileges");
		return 0;
	}
	r = drop_privileges(pw, &e);
	if (r < 0)
		return log_error_errno(r, "dropping privileges: %s", e.text);
	log_info("running as %s (uid %u) without capabilities", pw->pw_name, (unsigned) pw->pw_uid);
	return 0;
}

/* ---- egress ---- */

static void on_denial(const struct egress_denial *dn, void *userdata)
{
	struct daemon *d = userdata;
	char dest[64] = "?";

	(void) egress_dest_format(&dn->dest, dest, sizeof(dest));
	log_warning("egress: denied a %s connection to %s from pid %u in the %s cgroup",
		    dn->protocol == 17 ? "UDP" : "TCP", dest, (unsigned) dn->pid,
		    dn->tier == EGRESS_CORE ? "core" : dn->tier == EGRESS_T1 ? "t1"
						: dn->tier == EGRESS_T2 ? "t2" : "t3");
	pthread_mutex_lock(&d->denial_lock);
	if (d->denial_manager)
		manager_audit_denial(d->denial_manager, dn);
	else if (d->n_early_denials < ELEMENTSOF(d->early_denials))
		d->early_denials[d->n_early_denials++] = *dn;
	pthread_mutex_unlock(&d->denial_lock);
}

static void set_denial_manager(struct daemon *d, struct manager *m)
{
	pthread_mutex_lock(&d->denial_lock);
	d->denial_manager = m;
	for (size_t i = 0; m && i < d->n_early_denials; i++)
		manager_audit_denial(m, &d->early_denials[i]);
	d->n_early_denials = 0;
	pthread_mutex_unlock(&d->denial_lock);
}

/* The client over the workers: ENFORCED when egress_start() succeeded, else DISABLED (remote
 * tiers refused with the reason). */
static int egress_client_setup(struct daemon *d, struct errmsg *e)
{
	struct egress_client_options o = { .on_denial = on_denial,
					   .userdata = d,
					   .resolve_interval_ns = d->config->egress_resolve_interval_ns };
	static const char *const wrong_env[4] = { NULL, "MOLLY_EGRESS_TEST_WRONG_TARGET_T1",
						  "MOLLY_EGRESS_TEST_WRONG_TARGET_T2",
						  "MOLLY_EGRESS_TEST_WRONG_TARGET_T3" };
	int r;

	if (d->eg) {
		o.mode = EGRESS_CLIENT_ENFORCED;
		o.eg = d->eg;
	} else {
		o.mode = EGRESS_CLIENT_DISABLED;
		o.disabled_reason = d->egress_failure[0] ? d->egress_failure : "unknown reason";
		log_error("egress enforcement could not start: %s. Remote tiers (T1..T3) are "
			  "DISABLED and only T0 (this machine) serves; fix the cause or set "
			  "[Egress] Enforce=no to call remote targets without kernel enforcement",
			  o.disabled_reason);
	}
	for (unsigned i = 1; i <= 3; i++)
		if (test_env(wrong_env[i]))
			o.test_wrong_target[i] = getenv(wrong_env[i]);
	r = egress_client_new(&o, &d->egress, e);
	if (r >= 0)
		d->eg = NULL; /* the client owns it now */
	return r;
}

/* ---- reload ---- */

static int daemon_reload(void *userdata, struct errmsg *e)
{
	struct daemon *d = userdata;
	_cleanup_(config_unrefp) struct config *c = NULL;
	struct errmsg e2 = { { 0 } };
	struct timespec ts;
	int r, warn = 0;

	if (d->stopping)
		return errmsg_set(e, -ESHUTDOWN, "the daemon is stopping");
	clock_gettime(CLOCK_MONOTONIC, &ts);
	/* MONOTONIC_USEC lets Type=notify-reload (systemd >= 253) match this to its SIGHUP. */
	(void) sd_notifyf(false, "RELOADING=1\nSTATUS=Reloading the configuration\n"
				 "MONOTONIC_USEC=%llu",
			  (unsigned long long) ts.tv_sec * 1000000ull +
				  (unsigned long long) ts.tv_nsec / 1000ull);
	r = config_load(d->config_path, &c, e);
	if (r < 0) {
		log_error("reload: %s; keeping the running configuration", e->text);
		goto out;
	}
	if ((r = default_model_path(c)) < 0) {
		errmsg_set(e, r, "the default model: %s", strerror(-r));
		log_error("reload: %s; keeping the running configuration", e->text);
		goto out;
	}
	log_set_level(c->log_level);
	r = manager_reload(d->manager, c, e);
	if (r < 0) {
		log_error("reload: %s", e->text);
		goto out;
	}
	if (r > 0) {
		log_warning("reload: %s", e->text);
		warn = 1;
	}
	if (d->egress && egress_client_mode(d->egress) != EGRESS_CLIENT_DISABLED) {
		/* New URLs or addresses: the workers resolve, the allow-lists follow. */
		int k = egress_client_configure(d->egress, c, EGRESS_RELOAD_WAIT_NS, &e2);
		if (k != 0) {
			log_warning("reload: egress: %s", e2.text);
			if (!warn)
				errmsg_set(e, 1, "%s", e2.text);
			warn = 1;
		}
	}
	if (d->http) {
		int k = http_front_reload(d->http, c, &e2);
		if (k != 0) {
			log_warning("reload: HTTP: %s", e2.text);
			if (!warn)
				errmsg_set(e, 1, "%s", e2.text);
			warn = 1;
		}
	}
	config_unref(d->config);
	d->config = TAKE_PTR(c);
	log_info("configuration reloaded");
	r = warn;
out:
	(void) sd_notify(false, "READY=1\nSTATUS=Serving");
	return r;
}

/* ---- shutdown ---- */

static void *drain_main(void *arg)
{
	struct daemon *d = arg;
	uint64_t one = 1;

	manager_drain(d->manager, d->config->stop_timeout_ns);
	(void) !write(d->drain_fd, &one, sizeof(one));
	return NULL;
}

static int on_idle_check(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct daemon *d = userdata;
	bool idle = dbus_front_idle(d->dbus);

	if (idle || usec >= d->flush_deadline) {
		if (!idle)
			log_warning("stopping with output still unwritten to some D-Bus streams");
		return sd_event_exit(d->event, 0);
	}
	(void) sd_event_source_set_time(s, usec + 20000);
	(void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

static int on_drained(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct daemon *d = userdata;
	uint64_t n, now = 0;

	(void) !read(fd, &n, sizeof(n));
	d->drained = true;
	d->drain_source = sd_event_source_disable_unref(d->drain_source);
	log_info("in-flight work finished or cancelled");
	(void) sd_event_now(d->event, CLOCK_MONOTONIC, &now);
	d->flush_deadline = now + FLUSH_TIMEOUT_USEC;
	return sd_event_add_time(d->event, &d->idle_timer, CLOCK_MONOTONIC, now, 0, on_idle_check,
				 d);
}

static void begin_stop(struct daemon *d, const char *why)
{
	int r;

	if (d->stopping)
		return;
	d->stopping = true;
	dbus_front_stop_accepting(d->dbus);
	http_front_stop_accepting(d->http);
	/* logged once the fronts refuse new requests: tests wait for this line */
	log_info("%s: stopping (in-flight work gets up to %llu ms)", why,
		 (unsigned long long) (d->config->stop_timeout_ns / 1000000ull));
	(void) sd_notify(false, "STOPPING=1\nSTATUS=Stopping");

	d->drain_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->drain_fd < 0 ||
	    sd_event_add_io(d->event, &d->drain_source, d->drain_fd, EPOLLIN, on_drained, d) < 0 ||
	    (r = pthread_create(&d->drain_thread, NULL, drain_main, d)) != 0) {
		log_error("cannot start the drain thread; stopping at once");
		(void) sd_event_exit(d->event, 0);
		return;
	}
	d->drain_started = true;
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct daemon *d = userdata;
	struct errmsg e = { { 0 } };

	switch (si->ssi_signo) {
	case SIGTERM:
	case SIGINT:
		if (d->stopping && si->ssi_signo == SIGINT) {
			log_notice("second SIGINT: exiting without waiting");
			return sd_event_exit(d->event, 0);
		}
		begin_stop(d, si->ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
		break;
	case SIGHUP:
		(void) daemon_reload(d, &e);
		break;
	/* only in test mode (test_mode_wanted) */
	case SIGUSR1:
		manager_test_hold(d->manager, UINT64_MAX);
		log_warning("TEST ONLY: SIGUSR1: the scheduler's hold is lifted");
		break;
	case SIGUSR2:
		manager_test_hold(d->manager, 1);
		log_warning("TEST ONLY: SIGUSR2: the scheduler holds after one more token");
		break;
	}
	return 0;
}

/* TEST ONLY: with MOLLY_TEST=1, SIGUSR1 lifts the scheduler's hold (MOLLY_TEST_HOLD_AFTER_TOKENS,
 * manager.c) and SIGUSR2 sets it again after one more generated token, so a test can keep work
 * in flight across an event of its choosing (a reload, a look at /metrics) and then let it
 * finish. The handlers are logged once they have acted. Otherwise both signals keep their
 * default action. */
static bool test_mode_wanted(void)
{
	const char *t = getenv("MOLLY_TEST");

	return t && strcmp(t, "1") == 0;
}

/* ---- watchdog ---- */

static int on_watchdog(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct daemon *d = userdata;
	struct manager_stats st;

	/* Taking the stats takes the scheduler's lock: a wedged scheduler stops the pings, and
	 * systemd restarts us. */
	manager_get_stats(d->manager, &st);
	(void) sd_notify(false, "WATCHDOG=1");
	(void) sd_event_source_set_time(s, usec + d->watchdog_usec / 2);
	(void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

/* ---- main ---- */

static void usage(void)
{
	printf("Usage: mollyd [--config FILE] [--log-target auto|journal|stderr]\n"
	       "\n"
	       "The Molly inference service: serves the model over D-Bus (org.molly.Daemon1) and "
	       "an\n"
	       "OpenAI-compatible HTTP API.\n"
	       "\n"
	       "  -c, --config FILE    configuration file (default " CONFIG_DEFAULT_PATH "),\n"
	       "                       plus the drop-ins in FILE.d/*.conf\n"
	       "      --log-target T   auto (journal when there is one), journal, stderr\n"
	       "  -h, --help           this help\n"
	       "      --version        the version\n"
	       "\n"
	       "Signals: SIGTERM stops (gracefully), SIGHUP reloads the configuration.\n"
	       "See docs/config.md and docs/dbus.md.\n");
}

static int run(int argc, char **argv)
{
	static const struct option options[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "log-target", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{},
	};
	struct daemon d = { .drain_fd = -EBADF, .cuse_fd = -EBADF,
			    .denial_lock = PTHREAD_MUTEX_INITIALIZER };
	struct dbus_front_hooks hooks = { .reload = daemon_reload, .userdata = &d };
	enum log_target target = LOG_TARGET_AUTO;
	struct errmsg e = { { 0 } };
	sigset_t mask;
	int c, r;

	while ((c = getopt_long(argc, argv, "c:h", options, NULL)) >= 0) {
		switch (c) {
		case 'c':
			d.config_path = optarg;
			break;
		case 'L':
			if (strcmp(optarg, "auto") == 0)
				target = LOG_TARGET_AUTO;
			else if (strcmp(optarg, "journal") == 0)
				target = LOG_TARGET_JOURNAL;
			else if (strcmp(optarg, "stderr") == 0)
				target = LOG_TARGET_STDERR;
			else {
				fprintf(stderr,
					"mollyd: --log-target: '%s' is not auto, journal or "
					"stderr\n",
					optarg);
				return 2;
			}
			break;
		case 'h':
			usage();
			return 0;
		case 'V':
			printf("mollyd %s\n", MOLLY_VERSION);
			return 0;
		default:
			fprintf(stderr, "Try 'mollyd --help'.\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "mollyd: unexpected argument '%s'. Try 'mollyd --help'.\n",
			argv[optind]);
		return 2;
	}
	log_setup(target);

	r = config_load(d.config_path, &d.config, &e);
	if (r < 0) {
		log_error_errno(r, "configuration: %s", e.text);
		return 1;
	}
	r = default_model_path(d.config);
	if (r < 0) {
		log_error_errno(r, "the default model: %m");
		return 1;
	}
	log_set_level(d.config->log_level);
	for (size_t i = 0; i < d.config->n_files; i++)
		log_debug("configuration file: %s", d.config->files[i]);

	/* Writes to a stream whose reader left must fail with EPIPE, not kill us. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	if (test_mode_wanted()) {
		sigaddset(&mask, SIGUSR1);
		sigaddset(&mask, SIGUSR2);
	}
	/* Blocked before any thread starts, so every thread inherits it and signalfd sees all. */
	pthread_sigmask(SIG_BLOCK, &mask, NULL);

	d.egress_wanted = d.config->egress_enforce && d.config->n_targets > 0;
	if (getenv("MOLLY_EGRESS_TEST") && strcmp(getenv("MOLLY_EGRESS_TEST"), "1") == 0)
		log_warning("MOLLY_EGRESS_TEST=1: the egress test-only switches are honoured; "
			    "never set this in production");
	r = become_user(&d);
	if (r < 0)
		goto out;
	if (d.egress_wanted) {
		r = egress_client_setup(&d, &e);
		if (r < 0) {
			log_error_errno(r, "egress: %s", e.text);
			goto out;
		}
	} else if (d.config->n_targets > 0)
		log_warning("[Egress] Enforce=no: remote targets are called from the daemon's own "
			    "process, without kernel enforcement (audit records say "
			    "egress_enforced=false)");

	(void) sd_notifyf(false, "STATUS=Loading %s", d.config->model_path ?: "(no model)");
	r = manager_new_with_egress(d.config, d.egress, &d.manager, &e);
	if (r < 0) {
		log_error_errno(r, "%s", e.text);
		goto out;
	}
	set_denial_manager(&d, d.manager);
	if (d.egress && egress_client_mode(d.egress) != EGRESS_CLIENT_DISABLED) {
		struct errmsg ew = { { 0 } };
		int k = egress_client_configure(d.egress, d.config, EGRESS_START_WAIT_NS, &ew);
		if (k < 0) {
			log_error_errno(k, "egress: %s", ew.text);
			r = k;
			goto out;
		}
		if (k > 0)
			log_warning("egress: %s", ew.text);
	}
	r = manager_start(d.manager);
	if (r < 0) {
		log_error_errno(r, "starting the scheduler: %m");
		goto out;
	}

	r = sd_event_default(&d.event);
	if (r < 0) {
		log_error_errno(r, "event loop: %m");
		goto out;
	}
	(void) sd_event_add_signal(d.event, NULL, SIGTERM, on_signal, &d);
	(void) sd_event_add_signal(d.event, NULL, SIGINT, on_signal, &d);
	(void) sd_event_add_signal(d.event, NULL, SIGHUP, on_signal, &d);
	if (test_mode_wanted()) {
		log_warning("TEST ONLY: MOLLY_TEST=1: SIGUSR1 and SIGUSR2 lift and set the "
			    "scheduler's hold");
		(void) sd_event_add_signal(d.event, NULL, SIGUSR1, on_signal, &d);
		(void) sd_event_add_signal(d.event, NULL, SIGUSR2, on_signal, &d);
	}

	r = dbus_front_new(d.event, d.manager, &hooks, &d.dbus, &e);
	if (r < 0) {
		log_error_errno(r, "D-Bus: %s", e.text);
		goto out;
	}
	r = http_front_new(d.manager, d.config, &d.http, &e);
	if (r < 0) {
		log_error_errno(r, "HTTP: %s", e.text);
		goto out;
	}
	/* /dev/molly: never fatal; without kmod-shim the device is off (Status says why). */
	r = dev_front_new(d.event, d.manager, TAKE_FD(d.cuse_fd), &d.dev, &e);
	if (r < 0) {
		log_error_errno(r, "/dev/molly: %s", e.text);
		goto out;
	}

	if (sd_watchdog_enabled(false, &d.watchdog_usec) > 0 && d.watchdog_usec > 0) {
		uint64_t now = 0;
		(void) sd_event_now(d.event, CLOCK_MONOTONIC, &now);
		(void) sd_event_add_time(d.event, &d.watchdog_timer, CLOCK_MONOTONIC,
					 now + d.watchdog_usec / 2, 0, on_watchdog, &d);
	}

	log_info("serving %s (%s): D-Bus %s%s, HTTP %s", manager_model_name(d.manager),
		 d.config->model_path, d.dbus ? "org.molly.Daemon1 on " : "off",
		 d.dbus ? (d.config->bus == CONFIG_BUS_SYSTEM ? "the system bus" : "the session bus") : "",
		 d.http ? http_front_address(d.http) : "off");
	(void) sd_notifyf(false, "READY=1\nSTATUS=Serving %s", manager_model_name(d.manager));

	r = sd_event_loop(d.event);
	if (r < 0)
		log_error_errno(r, "event loop: %m");
	else
		r = 0;

out:
	if (d.manager && !d.stopping)
		dbus_front_stop_accepting(d.dbus);
	/* The fronts go first: they cancel and wait (bounded) for what they still hold, while
	 * the scheduler is still there to deliver the final events. */
	d.dev = dev_front_free(d.dev);
	d.http = http_front_free(d.http);
	d.dbus = dbus_front_free(d.dbus);
	if (d.drain_started)
		pthread_join(d.drain_thread, NULL);
	set_denial_manager(&d, NULL);
	d.manager = manager_free(d.manager);
	/* After the manager: the router's proxies use the client until they are freed. */
	d.egress = egress_client_free(d.egress);
	d.eg = egress_free(d.eg);
	sd_event_source_disable_unref(d.drain_source);
	sd_event_source_disable_unref(d.idle_timer);
	sd_event_source_disable_unref(d.watchdog_timer);
	if (d.drain_fd >= 0)
		close(d.drain_fd);
	if (d.cuse_fd >= 0)
		close(d.cuse_fd);
	sd_event_unref(d.event);
	config_unref(d.config);
	if (r >= 0)
		log_info("stopped");
	return r < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	return run(argc, argv);
}
