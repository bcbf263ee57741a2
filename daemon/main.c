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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "core/config.h"
#include "core/log.h"
#include "front/dbus.h"
#include "front/http.h"
#include "manager.h"

#ifndef MOLLY_VERSION
#define MOLLY_VERSION "0.1.0"
#endif

/* After the drain, how long the fronts get to hand out the last events. */
#define FLUSH_TIMEOUT_USEC (5ull * 1000000ull)

struct daemon {
	const char *config_path;       /* NULL: the default */
	struct config *config;         /* owned reference */
	struct manager *manager;
	sd_event *event;
	struct dbus_front *dbus;
	struct http_front *http;

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

static const struct privileged_step privileged_steps[] = {
	{ "directories", step_directories },
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
	if (!c->model_path && getenv("MOLLY_MODEL"))
		c->model_path = strdup(getenv("MOLLY_MODEL"));
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
	log_info("%s: stopping (in-flight work gets up to %llu ms)", why,
		 (unsigned long long) (d->config->stop_timeout_ns / 1000000ull));
	(void) sd_notify(false, "STOPPING=1\nSTATUS=Stopping");
	dbus_front_stop_accepting(d->dbus);
	http_front_stop_accepting(d->http);

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
	}
	return 0;
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
	struct daemon d = { .drain_fd = -EBADF };
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
	if (!d.config->model_path && getenv("MOLLY_MODEL"))
		d.config->model_path = strdup(getenv("MOLLY_MODEL"));
	log_set_level(d.config->log_level);
	for (size_t i = 0; i < d.config->n_files; i++)
		log_debug("configuration file: %s", d.config->files[i]);

	/* Writes to a stream whose reader left must fail with EPIPE, not kill us. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	/* Blocked before any thread starts, so every thread inherits it and signalfd sees all. */
	pthread_sigmask(SIG_BLOCK, &mask, NULL);

	r = become_user(&d);
	if (r < 0)
		goto out;

	(void) sd_notifyf(false, "STATUS=Loading %s", d.config->model_path ?: "(no model)");
	r = manager_new(d.config, &d.manager, &e);
	if (r < 0) {
		log_error_errno(r, "%s", e.text);
		goto out;
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
	d.http = http_front_free(d.http);
	d.dbus = dbus_front_free(d.dbus);
	if (d.drain_started)
		pthread_join(d.drain_thread, NULL);
	d.manager = manager_free(d.manager);
	sd_event_source_disable_unref(d.drain_source);
	sd_event_source_disable_unref(d.idle_timer);
	sd_event_source_disable_unref(d.watchdog_timer);
	if (d.drain_fd >= 0)
		close(d.drain_fd);
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
