/* SPDX-License-Identifier: MIT */
/*
 * log.h: the daemon's log, for edges only (main, bus and HTTP handlers, callbacks); library
 * code returns errors instead of logging.
 *
 * Destination: the systemd journal (sd_journal_send, with PRIORITY, CODE_FILE/LINE/FUNC and
 * extra MOLLY_* fields) when $JOURNAL_STREAM is set or /run/systemd/journal/socket exists;
 * otherwise stderr, one line per message, "<level>: message" (with a "<N>" syslog prefix when
 * stderr is the journal's stream, so levels survive). Levels are syslog's LOG_ERR..LOG_DEBUG;
 * messages above the current level are dropped.
 * Threading: safe from any thread (one write per message).
 */
#pragma once

#include <stdarg.h>
#include <syslog.h>

#include "../basic/macro.h"

enum log_target {
	LOG_TARGET_AUTO,    /* journal when there is one, else stderr */
	LOG_TARGET_JOURNAL,
	LOG_TARGET_STDERR,
};

void log_setup(enum log_target t);
void log_set_level(int level);
int log_get_level(void);
/* "err", "warning", "notice", "info", "debug" (and numbers 0..7); -EINVAL otherwise. */
int log_level_from_string(const char *s);

/* Logs and returns error (a -errno, or 0), so edges can `return log_error_errno(r, ...)`.
 * "%m" in fmt prints strerror(-error). */
_printf_(6, 7) int log_internal(int level, int error, const char *file, int line,
				const char *func, const char *fmt, ...);

#define log_full_errno(level, error, ...)                                                          \
	log_internal((level), (error), __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_debug(...) log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_ERR, 0, __VA_ARGS__)
#define log_warning_errno(error, ...) log_full_errno(LOG_WARNING, (error), __VA_ARGS__)
#define log_error_errno(error, ...) log_full_errno(LOG_ERR, (error), __VA_ARGS__)
#define log_debug_errno(error, ...) log_full_errno(LOG_DEBUG, (error), __VA_ARGS__)
