/* SPDX-License-Identifier: MIT */
/*
 * log: one line per event — timestamp, level, pid, message — to stderr, a
 * file or syslog, as text or as JSON (log_format). The level is checked
 * before any formatting. Never pass a password here.
 */
#ifndef PGCAT_LOG_H
#define PGCAT_LOG_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

/* The logger is the one piece of process-wide state outside struct worker
 * (its level, log_level_now, and the rest in log.c): it must work before
 * the worker exists (config errors) and after it is gone (shutdown). */
bool log_open(enum log_level level, const char *file, bool use_syslog) __attribute__((warn_unused_result));
void log_set_level(enum log_level level);
/* Nothing to stderr (PgBouncer's --quiet): with no log file and no syslog
 * the lines are dropped. */
void log_quiet_stderr(void);
/* The logger's level (log.c): part of the logger's state, read here so
 * that a disabled log point costs a load and a compare, no call. */
extern enum log_level log_level_now;
static inline enum log_level log_get_level(void) { return log_level_now; }
void log_close(void);
/* Re-open the log file (after logrotate). */
void log_reopen(void);

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* log_format: text (the default) or json, one object per line with the
 * keys time, level, pid, event, then the event's fields, then message. A
 * line written by log_write is event "log" with its message only. */
void log_set_format(enum log_format format);

/* A field of an event: a string (str non-NULL) or a number. */
struct log_field {
	const char *key;
	const char *str;
	long long num;
};
/* An event (a short name: "client_login", "server_connect"...) with its
 * fields and a message (fmt). In text, the line is prefix (it names the
 * subject, as "C-12 app@appdb 127.0.0.1:5000: ") then the message; in
 * json, prefix is left out. The caller checks log_enabled first. */
void log_event(enum log_level level, const char *event, const struct log_field *fields, size_t n_fields,
	       const char *prefix, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define log_enabled(lvl) ((lvl) <= log_get_level())
#define log_error(...)   do { if (log_enabled(LOG_LEVEL_ERROR)) log_write(LOG_LEVEL_ERROR, __VA_ARGS__); } while (0)
#define log_warning(...) do { if (log_enabled(LOG_LEVEL_WARNING)) log_write(LOG_LEVEL_WARNING, __VA_ARGS__); } while (0)
#define log_info(...)    do { if (log_enabled(LOG_LEVEL_INFO)) log_write(LOG_LEVEL_INFO, __VA_ARGS__); } while (0)
#define log_debug(...)   do { if (log_enabled(LOG_LEVEL_DEBUG)) log_write(LOG_LEVEL_DEBUG, __VA_ARGS__); } while (0)
#define log_trace(...)   do { if (log_enabled(LOG_LEVEL_TRACE)) log_write(LOG_LEVEL_TRACE, __VA_ARGS__); } while (0)

#endif
