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

#include "utf8.h"

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

/* A JSON line being written: appends are whole (an escape, a UTF-8
 * character) or not at all (full), so that whatever is cut, what was
 * written is valid. */
struct jbuf {
	char *p;
	size_t cap, at;
	bool full;
};

static void jput(struct jbuf *b, const char *s, size_t n)
{
	if (b->full || b->at + n > b->cap) {
		b->full = true;
		return;
	}
	memcpy(b->p + b->at, s, n);
	b->at += n;
}

/* A JSON string's contents: quotes, backslashes and control characters
 * escaped, UTF-8 as it is, a byte that is not UTF-8 as U+FFFD. */
static void jstr(struct jbuf *b, const char *str)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	while (*s && !b->full) {
		unsigned char ch = *s;
		if (ch == '"' || ch == '\\') {
			char e[2] = { '\\', (char)ch };
			jput(b, e, 2);
			s++;
		} else if (ch < 0x20 || ch == 0x7f) {
			char e[6] = { '\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15] };
			jput(b, e, 6);
			s++;
		} else if (ch < 0x80) {
			jput(b, (const char *)s, 1);
			s++;
		} else {
			size_t n = utf8_char_len(s);
			if (n) {
				jput(b, (const char *)s, n);
				s += n;
			} else {
				jput(b, "\\ufffd", 6);
				s++;
			}
		}
	}
}

/* ,"key":value, whole or not at all, leaving reserve bytes free. */
static void jfield(struct jbuf *b, size_t reserve, const struct log_field *f)
{
	size_t mark = b->at, cap = b->cap;
	b->cap = cap > reserve ? cap - reserve : 0;
	jput(b, ",\"", 2);
	jstr(b, f->key);
	jput(b, "\":", 2);
	if (f->str) {
		jput(b, "\"", 1);
		jstr(b, f->str);
		jput(b, "\"", 1);
	} else {
		char num[24];
		int n = snprintf(num, sizeof num, "%lld", f->num);
		jput(b, num, n > 0 ? (size_t)n : 0);
	}
	if (b->full)
		b->at = mark;   /* (it does not fit: left out) */
	b->full = false;
	b->cap = cap;
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
		/* One line per event: a control character in a message (a
		 * client's name, a query's text) would start a line of its own
		 * that looks like pgcat's. */
		char clean[2560];
		size_t n = 0;
		const char *parts[2] = { prefix ? prefix : "", msg };
		for (int k = 0; k < 2; k++)
			for (const char *m = parts[k]; *m && n + 1 < sizeof clean; m++)
				clean[n++] = (unsigned char)*m < 0x20 || *m == 0x7f ? ' ' : *m;
		clean[n] = '\0';
		fprintf(out, "%s.%03dZ [%d] %s %s\n", logger.ts, (int)(tv.tv_usec / 1000), (int)pid,
			level_names[level], clean);
		return;
	}
	char line[8192];
	struct jbuf b = { line, sizeof line - 3, 0, false };   /* (3: the closing quote, brace and NUL) */
	char head[160];
	int hn = snprintf(head, sizeof head, "{\"time\":\"%s.%03dZ\",\"level\":\"%s\",\"pid\":%d,\"event\":\"",
			  logger.ts, (int)(tv.tv_usec / 1000), level_names[level], (int)pid);
	jput(&b, head, hn > 0 && (size_t)hn < sizeof head ? (size_t)hn : 0);
	jstr(&b, event);
	jput(&b, "\"", 1);
	/* The fields, each whole or left out, with room kept for the message. */
	for (size_t i = 0; i < n_fields; i++)
		jfield(&b, 64, &fields[i]);
	jput(&b, ",\"message\":\"", 12);
	jstr(&b, msg);   /* (cut at a whole character when the line is full) */
	line[b.at++] = '"';
	line[b.at++] = '}';
	line[b.at] = '\0';
	fprintf(out, "%s\n", line);
}

void log_event(enum log_level level, const char *event, const struct log_field *fields, size_t n_fields,
	       const char *prefix, const char *fmt, ...)
{
	if (!log_enabled(level))
		return;
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
