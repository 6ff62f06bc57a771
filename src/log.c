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
	enum log_format format;
} logger = { NULL, "", false, false, 0, false, -1, "", LOG_FORMAT_TEXT };

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
void log_set_format(enum log_format format) { logger.format = format; }
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

/* A JSON string's contents: quotes, backslashes and control characters
 * escaped; bytes of 0x80 and above (UTF-8) as they are. */
static size_t json_string(char *out, size_t cap, size_t at, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	for (; s && *s && at + 7 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\') {
			out[at++] = '\\';
			out[at++] = (char)ch;
		} else if (ch == '\n') {
			out[at++] = '\\';
			out[at++] = 'n';
		} else if (ch < 0x20) {
			memcpy(out + at, "\\u00", 4);
			out[at + 4] = hex[ch >> 4];
			out[at + 5] = hex[ch & 15];
			at += 6;
		} else {
			out[at++] = (char)ch;
		}
	}
	return at;
}

static size_t json_key(char *out, size_t cap, size_t at, const char *key)
{
	if (at + 4 + strlen(key) >= cap)
		return at;
	at += (size_t)snprintf(out + at, cap - at, ",\"%s\":", key);
	return at;
}

/* The timestamp of now (cached per second), and the pid. */
static pid_t stamp(struct timeval *tv)
{
	gettimeofday(tv, NULL);
	if (tv->tv_sec != logger.ts_sec) {
		struct tm tm;
		gmtime_r(&tv->tv_sec, &tm);
		strftime(logger.ts, sizeof logger.ts, "%Y-%m-%dT%H:%M:%S", &tm);
		logger.ts_sec = tv->tv_sec;
	}
	/* log_open not called yet (or pid unknown): ask. */
	return logger.atfork_set ? logger.pid : getpid();
}

static void emit(enum log_level level, const char *event, const struct log_field *fields, size_t n_fields,
		 const char *prefix, const char *msg)
{
	if (logger.use_syslog) {
		static const int prio[] = {
			[LOG_LEVEL_ERROR] = LOG_ERR, [LOG_LEVEL_WARNING] = LOG_WARNING,
			[LOG_LEVEL_INFO] = LOG_INFO, [LOG_LEVEL_DEBUG] = LOG_DEBUG,
			[LOG_LEVEL_TRACE] = LOG_DEBUG,
		};
		syslog(prio[level], "%s %s%s", level_names[level], prefix ? prefix : "", msg);
		return;
	}
	if (!logger.file && logger.no_stderr)
		return;
	struct timeval tv;
	pid_t pid = stamp(&tv);
	FILE *out = logger.file ? logger.file : stderr;
	if (logger.format != LOG_FORMAT_JSON) {
		fprintf(out, "%s.%03dZ [%d] %s %s%s\n", logger.ts, (int)(tv.tv_usec / 1000), (int)pid,
			level_names[level], prefix ? prefix : "", msg);
		return;
	}
	char line[8192];
	size_t at = (size_t)snprintf(line, sizeof line, "{\"time\":\"%s.%03dZ\",\"level\":\"%s\",\"pid\":%d,\"event\":\"",
				     logger.ts, (int)(tv.tv_usec / 1000), level_names[level], (int)pid);
	at = json_string(line, sizeof line, at, event);
	line[at++] = '"';
	for (size_t i = 0; i < n_fields && at + 32 < sizeof line; i++) {
		at = json_key(line, sizeof line, at, fields[i].key);
		if (fields[i].str) {
			line[at++] = '"';
			at = json_string(line, sizeof line, at, fields[i].str);
			line[at++] = '"';
		} else {
			at += (size_t)snprintf(line + at, sizeof line - at, "%lld", fields[i].num);
		}
	}
	at = json_key(line, sizeof line, at, "message");
	line[at++] = '"';
	at = json_string(line, sizeof line, at, msg);
	if (at + 3 > sizeof line)
		at = sizeof line - 3;   /* (cut: the object still closes) */
	line[at++] = '"';
	line[at++] = '}';
	line[at] = '\0';
	fprintf(out, "%s\n", line);
}

void log_event(enum log_level level, const char *event, const struct log_field *fields, size_t n_fields,
	       const char *prefix, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	emit(level, event, fields, n_fields, prefix, msg);
}

void log_write(enum log_level level, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	emit(level, "log", NULL, 0, NULL, msg);
}
