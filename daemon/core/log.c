/* SPDX-License-Identifier: MIT */
/*
 * log.c: see log.h.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define SD_JOURNAL_SUPPRESS_LOCATION /* we pass CODE_* ourselves */
#include <systemd/sd-journal.h>

#include "log.h"

static atomic_int log_level = LOG_INFO;
static atomic_int log_target = LOG_TARGET_STDERR;
/* stderr is connected to the journal (systemd's StandardError=journal): prefix "<N>". */
static atomic_bool stderr_is_journal;

static bool journal_stream_is_stderr(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long) st.st_dev == dev && (unsigned long long) st.st_ino == ino;
}

void log_setup(enum log_target t)
{
	if (t == LOG_TARGET_AUTO) {
		/* The journal when we run under systemd (JOURNAL_STREAM) or one is listening. */
		if (getenv("JOURNAL_STREAM") || access("/run/systemd/journal/socket", W_OK) == 0)
			t = LOG_TARGET_JOURNAL;
		else
			t = LOG_TARGET_STDERR;
	}
	atomic_store(&log_target, t);
	atomic_store(&stderr_is_journal, journal_stream_is_stderr());
}

void log_set_level(int level)
{
	atomic_store(&log_level, level < LOG_EMERG   ? LOG_EMERG
				 : level > LOG_DEBUG ? LOG_DEBUG
						     : level);
}

int log_get_level(void)
{
	return atomic_load(&log_level);
}

int log_level_from_string(const char *s)
{
	static const char *const names[] = { "emerg", "alert", "crit", "err",
					     "warning", "notice", "info", "debug" };

	if (!s)
		return -EINVAL;
	for (int i = 0; i < 8; i++)
		if (strcasecmp(s, names[i]) == 0)
			return i;
	if (strcasecmp(s, "error") == 0)
		return LOG_ERR;
	if (strcasecmp(s, "warn") == 0)
		return LOG_WARNING;
	if (s[0] >= '0' && s[0] <= '7' && !s[1])
		return s[0] - '0';
	return -EINVAL;
}

static const char *level_name(int level)
{
	static const char *const names[] = { "emerg", "alert", "crit", "error",
					     "warning", "notice", "info", "debug" };

	return level >= 0 && level < 8 ? names[level] : "info";
}

int log_internal(int level, int error, const char *file, int line, const char *func,
		 const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	int saved = errno;

	if (level > atomic_load(&log_level))
		return error;
	/* %m prints the error we were given, not whatever errno happens to hold. */
	errno = error < 0 ? -error : error;
	va_start(ap, fmt);
	(void) vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	errno = saved;

	if (atomic_load(&log_target) == LOG_TARGET_JOURNAL) {
		char code_file[300], code_line[32], code_func[160];
		int r;

		snprintf(code_file, sizeof(code_file), "CODE_FILE=%s", file);
		snprintf(code_line, sizeof(code_line), "CODE_LINE=%d", line);
		snprintf(code_func, sizeof(code_func), "CODE_FUNC=%s", func);
		if (error != 0)
			r = sd_journal_send("MESSAGE=%s", msg, "PRIORITY=%i", level, "ERRNO=%i",
					    error < 0 ? -error : error, code_file, code_line,
					    code_func, "SYSLOG_IDENTIFIER=mollyd", NULL);
		else
			r = sd_journal_send("MESSAGE=%s", msg, "PRIORITY=%i", level, code_file,
					    code_line, code_func, "SYSLOG_IDENTIFIER=mollyd", NULL);
		if (r >= 0)
			return error;
		/* No journal after all: fall through to stderr. */
	}
	if (atomic_load(&stderr_is_journal))
		fprintf(stderr, "<%d>%s\n", level, msg);
	else
		fprintf(stderr, "mollyd: %s: %s\n", level_name(level), msg);
	return error;
}
