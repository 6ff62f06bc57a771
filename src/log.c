/* SPDX-License-Identifier: MIT */
/*
 * log: formats and writes log lines. Not a place for policy: callers decide
 * what is worth a line; this room only decides where it goes.
 */
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

/* The level: log.h reads it inline at every log point (a trace point
 * runs a few times per transaction; a call to learn the level cost more
 * than the test). Only log_open and log_set_level write it. */
enum log_level log_level_now = LOG_LEVEL_INFO;

static struct {
	FILE *file;          /* NULL: stderr */
	char path[4096];
	bool use_syslog;
	bool no_stderr;      /* log_quiet_stderr */
	/* Every line carries the pid and a timestamp: both are cached (a
	 * login logs two lines, and getpid and strftime were a visible part of
	 * its cost). The pid is refreshed in a forked child by an atfork
	 * handler, the seconds part of the timestamp when the second changes. */
	pid_t pid;
	bool atfork_set;
	time_t ts_sec;
	char ts[32];
} logger = { NULL, "", false, false, 0, false, -1, "" };

static void log_child_after_fork(void) { logger.pid = getpid(); }

static const char *const level_names[] = {
	[LOG_LEVEL_ERROR] = "ERROR",
	[LOG_LEVEL_WARNING] = "WARNING",
	[LOG_LEVEL_INFO] = "LOG",
	[LOG_LEVEL_DEBUG] = "DEBUG",
	[LOG_LEVEL_TRACE] = "TRACE",
};

bool log_open(enum log_level level, const char *file, bool use_syslog)
{
	log_level_now = level;
	logger.use_syslog = use_syslog;
	logger.pid = getpid();
	if (!logger.atfork_set && pthread_atfork(NULL, NULL, log_child_after_fork) == 0)
		logger.atfork_set = true;
	if (use_syslog)
		openlog("pgcat", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	if (file && file[0]) {
		FILE *f = fopen(file, "a");
		if (!f) {
			fprintf(stderr, "pgcat: cannot open log file %s: %s\n", file, strerror(errno));
			return false;
		}
		setvbuf(f, NULL, _IOLBF, 0);
		if (logger.file)
			fclose(logger.file);
		logger.file = f;
		snprintf(logger.path, sizeof logger.path, "%s", file);
	}
	return true;
}

void log_set_level(enum log_level level) { log_level_now = level; }
void log_quiet_stderr(void) { logger.no_stderr = true; }

void log_close(void)
{
	if (logger.file) {
		fclose(logger.file);
		logger.file = NULL;
	}
	if (logger.use_syslog)
		closelog();
}

void log_reopen(void)
{
	if (!logger.file || !logger.path[0])
		return;
	FILE *f = fopen(logger.path, "a");
	if (!f)
		return;
	setvbuf(f, NULL, _IOLBF, 0);
	fclose(logger.file);
	logger.file = f;
}

void log_write(enum log_level level, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);

	if (logger.use_syslog) {
		static const int prio[] = {
			[LOG_LEVEL_ERROR] = LOG_ERR, [LOG_LEVEL_WARNING] = LOG_WARNING,
			[LOG_LEVEL_INFO] = LOG_INFO, [LOG_LEVEL_DEBUG] = LOG_DEBUG,
			[LOG_LEVEL_TRACE] = LOG_DEBUG,
		};
		syslog(prio[level], "%s %s", level_names[level], msg);
		return;
	}
	if (!logger.file && logger.no_stderr)
		return;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	if (tv.tv_sec != logger.ts_sec) {
		struct tm tm;
		gmtime_r(&tv.tv_sec, &tm);
		strftime(logger.ts, sizeof logger.ts, "%Y-%m-%dT%H:%M:%S", &tm);
		logger.ts_sec = tv.tv_sec;
	}
	/* log_open not called yet (or pid unknown): ask. */
	pid_t pid = logger.atfork_set ? logger.pid : getpid();
	FILE *out = logger.file ? logger.file : stderr;
	fprintf(out, "%s.%03dZ [%d] %s %s\n", logger.ts, (int)(tv.tv_usec / 1000), (int)pid,
		level_names[level], msg);
}
