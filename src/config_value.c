/* SPDX-License-Identifier: MIT */
/*
 * config_value: one value of pgcat.ini read, checked and put into the field
 * its key describes (include/config_internal.h): integers in range,
 * booleans, enum spellings, host:port[:role], lists of addresses, tables,
 * functions and servers, and the extra check its key's table names (those
 * stand with the tables in config.c); the defaults, and freeing what a
 * field owns; and one [general] value written back as text (SHOW CONFIG in
 * either format). Its own room because it knows one key at a time: the file's
 * lines and sections are config_load.c's, and checks across keys
 * config_check.c's.
 */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h and comes
 * first in the include path. */
#include "config.h"
#include "config_internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Reading values                                                       */

/* A value shown in a message: quoted, shortened, secrets hidden. */
void quote_value(const char *value, unsigned flags, char *buf, size_t buflen)
{
	if (flags & KEY_SECRET) {
		snprintf(buf, buflen, "(hidden)");
		return;
	}
	size_t len = strlen(value);
	if (len > CONFIG_QUOTE_MAX)
		snprintf(buf, buflen, "\"%.*s...\"", CONFIG_QUOTE_MAX, value);
	else
		snprintf(buf, buflen, "\"%s\"", value);
}

bool parse_int64(const char *s, int64_t *out)
{
	if (*s == '\0' || is_space(*s))
		return false;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s)
		return false;
	*out = v;
	return true;
}

/* PostgreSQL's time units (guc.c's table), in microseconds. */
static const struct {
	const char *name;
	int64_t us;
} duration_units[] = {
	{ "d", 86400000000LL }, { "h", 3600000000LL }, { "min", 60000000LL },
	{ "s", 1000000LL }, { "ms", 1000LL }, { "us", 1LL },
};

size_t config_scan_decimal(const char *s, const char **end)
{
	const char *q = s;
	size_t digits = 0;
	while (*q >= '0' && *q <= '9') {
		q++;
		digits++;
	}
	if (*q == '.')
		for (q++; *q >= '0' && *q <= '9'; q++)
			digits++;
	*end = q;
	return digits;
}

bool config_parse_duration(const char *s, bool seconds, int64_t *out, bool *bare, char *why, size_t whylen)
{
	why[0] = '\0';
	*bare = true;
	if (parse_int64(s, out))
		return true;
	*bare = false;
	/* digits [. digits], then optional blanks and a unit, as PostgreSQL takes them */
	const char *q;
	size_t digits = config_scan_decimal(s, &q);
	if (digits == 0 || q - s > 30)
		return false;
	char num[32];
	memcpy(num, s, (size_t)(q - s));
	num[q - s] = '\0';
	while (*q == ' ' || *q == '\t')
		q++;
	int64_t unit_us = 0;
	for (size_t i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]); i++)
		if (strcmp(q, duration_units[i].name) == 0)
			unit_us = duration_units[i].us;
	if (unit_us == 0) {
		snprintf(why, whylen, "%s", *q ? "the unit must be one of us, ms, s, min, h, d" : "");
		return false;
	}
	double base_us = seconds ? 1e6 : 1e3;
	double v = strtod(num, NULL) * (double)unit_us / base_us;
	if (v >= 9e15)
		return false;
	/* Rounded to the key's unit as PostgreSQL does; but a value that is
	 * not zero must not round to zero, which would switch the feature off. */
	int64_t r = (int64_t)(v + 0.5);
	if (r == 0 && v > 0) {
		snprintf(why, whylen, "less than the setting's unit (1%s)", seconds ? "s" : "ms");
		return false;
	}
	*out = r;
	return true;
}

void config_format_duration(int64_t v, bool seconds, char *buf, size_t buflen)
{
	if (v == 0) {
		snprintf(buf, buflen, "0");
		return;
	}
	/* The largest unit that shows the value exactly, as PostgreSQL's SHOW. */
	int64_t base_us = seconds ? 1000000 : 1000;
	for (size_t i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]); i++) {
		int64_t per = duration_units[i].us / base_us;
		if (per >= 1 && duration_units[i].us % base_us == 0 && v % per == 0) {
			snprintf(buf, buflen, "%lld%s", (long long)(v / per), duration_units[i].name);
			return;
		}
	}
	snprintf(buf, buflen, "%lld%s", (long long)v, seconds ? "s" : "ms");
}

/* PostgreSQL's memory units (guc.c's table), in bytes. */
static const struct {
	const char *name;
	int64_t bytes;
} byte_units[] = {
	{ "TB", INT64_C(1) << 40 }, { "GB", INT64_C(1) << 30 }, { "MB", INT64_C(1) << 20 }, { "kB", INT64_C(1) << 10 },
	{ "B", 1 },
};

bool config_parse_bytes(const char *s, int64_t *out, char *why, size_t whylen)
{
	why[0] = '\0';
	if (parse_int64(s, out))
		return true;
	/* digits [. digits], then optional blanks and a unit, as PostgreSQL takes them */
	const char *q;
	size_t digits = config_scan_decimal(s, &q);
	if (digits == 0 || q - s > 30)
		return false;
	char num[32];
	memcpy(num, s, (size_t)(q - s));
	num[q - s] = '\0';
	while (*q == ' ' || *q == '\t')
		q++;
	int64_t unit = 0;
	for (size_t i = 0; i < sizeof(byte_units) / sizeof(byte_units[0]); i++)
		if (strcmp(q, byte_units[i].name) == 0)
			unit = byte_units[i].bytes;
	if (unit == 0) {
		snprintf(why, whylen, "%s", *q ? "the unit must be one of B, kB, MB, GB, TB" : "");
		return false;
	}
	double v = strtod(num, NULL) * (double)unit;
	if (v >= 9e18)
		return false;
	*out = (int64_t)(v + 0.5);
	return true;
}

void config_format_bytes(int64_t v, char *buf, size_t buflen)
{
	if (v == 0) {
		snprintf(buf, buflen, "0");
		return;
	}
	for (size_t i = 0; i < sizeof(byte_units) / sizeof(byte_units[0]); i++) {
		if (v % byte_units[i].bytes == 0) {
			snprintf(buf, buflen, "%lld%s", (long long)(v / byte_units[i].bytes), byte_units[i].name);
			return;
		}
	}
}

static bool parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "true", "on", "yes", "1" };
	static const char *const no[] = { "false", "off", "no", "0" };
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (ci_equal(s, yes[i])) {
			*out = true;
			return true;
		}
		if (ci_equal(s, no[i])) {
			*out = false;
			return true;
		}
	}
	return false;
}

static bool parse_enum(const struct enum_names *e, const char *s, int *out)
{
	for (size_t i = 0; i < e->n; i++) {
		if (e->names[i] != NULL && ci_equal(s, e->names[i])) {
			*out = (int)i;
			return true;
		}
	}
	for (size_t i = 0; i < e->n_aliases; i++) {
		if (ci_equal(s, e->aliases[i].name)) {
			*out = e->aliases[i].value;
			return true;
		}
	}
	return false;
}

static void enum_choices(const struct enum_names *e, char *buf, size_t buflen)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < e->n; i++) {
		if (e->names[i] == NULL)
			continue;
		int w = snprintf(buf + used, buflen - used, "%s%s", used ? " | " : "", e->names[i]);
		if (w < 0 || (size_t)w >= buflen - used)
			return;
		used += (size_t)w;
	}
}

/* ------------------------------------------------------------------ */
/* Value checks                                                         */

static bool valid_ip(int af, const char *s, size_t n);

/* A DNS name or a dotted IPv4 address. */
static bool valid_hostname(const char *s, size_t n)
{
	if (n == 0 || n > 253)
		return false;
	if (strspn(s, "0123456789.") >= n)
		return valid_ip(AF_INET, s, n);  /* "127.0.0.256" is no name either */
	size_t label = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '.') {
			if (label == 0)
				return false;
			label = 0;
		} else if (isalnum(c) || c == '-' || c == '_') {
			if (++label > 63)
				return false;
		} else {
			return false;
		}
	}
	return true;
}

static bool valid_ip(int af, const char *s, size_t n)
{
	char buf[64];
	unsigned char addr[16];
	if (n >= sizeof(buf))
		return false;
	memcpy(buf, s, n);
	buf[n] = '\0';
	return inet_pton(af, buf, addr) == 1;
}

static bool check_listen_addr(const char *s, size_t n, char *why, size_t whylen)
{
	if ((n == 1 && s[0] == '*') || valid_ip(AF_INET, s, n) || valid_ip(AF_INET6, s, n) || valid_hostname(s, n))
		return true;
	snprintf(why, whylen, "not an IP address, a host name or *");
	return false;
}

/* A function name for writing_functions: [schema.]name, an optional '*'
 * at the end for a prefix. */
static bool check_function_name(const char *s, size_t n, char *why, size_t whylen)
{
	if (n == 0 || n > 127) {
		snprintf(why, whylen, "a function name of 1 to 127 characters");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
			  ch == '.' || (ch == '*' && i == n - 1) || (unsigned char)ch >= 0x80;
		if (!ok) {
			snprintf(why, whylen, "not a function name ([schema.]name, '*' at the end for a prefix)");
			return false;
		}
	}
	return true;
}

static bool check_sharded_table(const char *s, size_t n, char *why, size_t whylen)
{
	size_t parts = 1, part_len = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '.') {
			if (part_len == 0)
				break;
			parts++;
			part_len = 0;
		} else if (is_space(s[i]) || s[i] == '"' || s[i] == '\'') {
			part_len = 0;
			parts = 0;
			break;
		} else {
			part_len++;
		}
	}
	if (part_len > 0 && (parts == 2 || parts == 3))
		return true;
	snprintf(why, whylen, "must be table.column or schema.table.column");
	return false;
}

bool check_server_host(const char *s, size_t n, char *why, size_t whylen)
{
	if (n > 0 && s[0] == '/') {
		if (n > CONFIG_MAX_SOCKET_DIR) {
			snprintf(why, whylen, "a Unix socket directory must be at most %d characters, so that the "
				 "socket path fits", CONFIG_MAX_SOCKET_DIR);
			return false;
		}
		return true;
	}
	if (memchr(s, ':', n) != NULL) {
		if (valid_ip(AF_INET6, s, n))
			return true;
		snprintf(why, whylen, "\"%.*s\" is not an IPv6 address", (int)n, s);
		return false;
	}
	if (valid_hostname(s, n))
		return true;
	snprintf(why, whylen, "\"%.*s\" is not a host name, an IP address or a Unix socket directory", (int)n, s);
	return false;
}

bool check_peer_host(const char *s, size_t n, char *why, size_t whylen)
{
	if (n > 0 && s[0] == '@') {
		/* As libpq: '@name' is the socket "name/.s.PGSQL.<port>" in
		 * Linux's abstract namespace; the same cap as a directory keeps
		 * it inside sun_path. */
		if (n == 1) {
			snprintf(why, whylen, "a socket name must follow '@' (Linux's abstract namespace)");
			return false;
		}
		if (n > CONFIG_MAX_SOCKET_DIR) {
			snprintf(why, whylen, "a socket name in the abstract namespace must be at most %d characters, so "
				 "that the socket path fits", CONFIG_MAX_SOCKET_DIR);
			return false;
		}
		return true;
	}
	return check_server_host(s, n, why, whylen);
}

/* "host:port" (want_role false) or "host:port:role"; IPv6 hosts in brackets. */
bool parse_endpoint(const char *s, size_t n, bool want_role, const char **host, size_t *host_len,
			   int *port, int *role, char *why, size_t whylen)
{
	const char *form = want_role ? "host:port:role" : "host:port";
	const char *rest;
	if (n > 0 && (s[0] == '/' || (!want_role && s[0] == '@'))) {
		/* A Unix socket directory, or for a peer (want_role false) '@' and
		 * a name in the abstract namespace (pgcat's servers are not
		 * reached there): either may hold ':' itself, so the port (and
		 * the role) are after its last colon(s). */
		const char *port_colon = NULL;
		size_t colons = 0;
		for (size_t i = n; i-- > 0 && port_colon == NULL;)
			if (s[i] == ':' && ++colons == (want_role ? 2 : 1))
				port_colon = s + i;
		if (port_colon == NULL) {
			snprintf(why, whylen, "expected %s:port%s", s[0] == '@' ? "@name" : "/socket/directory",
				 want_role ? ":role" : "");
			return false;
		}
		*host = s;
		*host_len = (size_t)(port_colon - s);
		while (s[0] == '/' && *host_len > 1 && s[*host_len - 1] == '/')
			(*host_len)--;       /* "/run/postgresql/" names the same socket */
		if (!(want_role ? check_server_host : check_peer_host)(*host, *host_len, why, whylen))
			return false;
		rest = port_colon + 1;
	} else if (n > 0 && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (close == NULL) {
			snprintf(why, whylen, "missing ']' after the IPv6 address");
			return false;
		}
		*host = s + 1;
		*host_len = (size_t)(close - s - 1);
		if (!valid_ip(AF_INET6, *host, *host_len)) {
			snprintf(why, whylen, "not an IPv6 address between [ and ]");
			return false;
		}
		rest = close + 1;
		if (rest == s + n || *rest != ':') {
			snprintf(why, whylen, "expected %s, e.g. [::1]:5432%s", form, want_role ? ":replica" : "");
			return false;
		}
		rest++;
	} else {
		size_t colons = 0;
		for (size_t i = 0; i < n; i++)
			colons += s[i] == ':';
		size_t expect = want_role ? 2 : 1;
		if (colons > expect) {
			snprintf(why, whylen, "an IPv6 address must be written in brackets, e.g. [::1]:5432%s",
				 want_role ? ":replica" : "");
			return false;
		}
		if (colons < expect) {
			snprintf(why, whylen, "expected %s", form);
			return false;
		}
		const char *colon = memchr(s, ':', n);
		*host = s;
		*host_len = (size_t)(colon - s);
		if (!valid_hostname(*host, *host_len)) {
			snprintf(why, whylen, "\"%.*s\" is not a host name or IPv4 address", (int)*host_len, *host);
			return false;
		}
		rest = colon + 1;
	}
	const char *end = s + n;
	const char *port_end = want_role ? memchr(rest, ':', (size_t)(end - rest)) : end;
	if (port_end == NULL) {
		snprintf(why, whylen, "expected %s", form);
		return false;
	}
	char buf[16];
	size_t plen = (size_t)(port_end - rest);
	int64_t v;
	if (plen == 0 || plen >= sizeof(buf)) {
		v = -1;
	} else {
		memcpy(buf, rest, plen);
		buf[plen] = '\0';
		if (!parse_int64(buf, &v))
			v = -1;
	}
	if (v < 1 || v > 65535) {
		snprintf(why, whylen, "port must be an integer between 1 and 65535");
		return false;
	}
	*port = (int)v;
	if (want_role) {
		const char *r = port_end + 1;
		size_t rlen = (size_t)(end - r);
		char rbuf[16];
		int rv = -1;
		if (rlen < sizeof(rbuf)) {
			memcpy(rbuf, r, rlen);
			rbuf[rlen] = '\0';
			if (!parse_enum(&server_role_enum, rbuf, &rv))
				rv = -1;
		}
		if (rv < 0) {
			snprintf(why, whylen, "role must be primary | replica | auto");
			return false;
		}
		*role = rv;
	}
	return true;
}

/* ------------------------------------------------------------------ */
/* Setting values                                                       */

static void free_string_list(char ***list, size_t *n)
{
	for (size_t i = 0; i < *n; i++)
		free((*list)[i]);
	free(*list);
	*list = NULL;
	*n = 0;
}

static void free_server_list(struct config_server **list, size_t *n)
{
	for (size_t i = 0; i < *n; i++)
		free((*list)[i].host);
	free(*list);
	*list = NULL;
	*n = 0;
}

static void set_list_item(struct parser *p, const struct key_spec *k, void *base, const char *item, size_t n)
{
	char why[160];
	char **list_items = NULL;
	switch (k->kind) {
	case VALUE_ADDR_LIST:
	case VALUE_TABLE_LIST:
	case VALUE_NAME_LIST: {
		bool ok = k->kind == VALUE_ADDR_LIST   ? check_listen_addr(item, n, why, sizeof(why))
			  : k->kind == VALUE_NAME_LIST ? check_function_name(item, n, why, sizeof(why))
						       : check_sharded_table(item, n, why, sizeof(why));
		if (!ok) {
			line_error(p, k->name, "\"%.*s\": %s", (int)n, item, why);
			return;
		}
		char ***list = field(base, k->off);
		size_t *count = field(base, k->off_n);
		char *copy = p_strndup(p, item, n);
		if (copy == NULL)
			return;
		list_items = *list;
		if (!p_grow(p, &list_items, *count, sizeof(char *))) {
			free(copy);
			return;
		}
		list_items[(*count)++] = copy;
		*list = list_items;
		return;
	}
	case VALUE_SERVER_LIST: {
		const char *host;
		size_t host_len;
		int port, role;
		if (!parse_endpoint(item, n, true, &host, &host_len, &port, &role, why, sizeof(why))) {
			line_error(p, k->name, "\"%.*s\": %s", (int)n, item, why);
			return;
		}
		struct config_server **list = field(base, k->off);
		size_t *count = field(base, k->off_n);
		for (size_t i = 0; i < *count; i++) {
			if ((*list)[i].port == port && strlen((*list)[i].host) == host_len &&
			    strncmp((*list)[i].host, host, host_len) == 0) {
				line_error(p, k->name, "\"%.*s\": this server is listed twice", (int)n, item);
				return;
			}
		}
		char *copy = p_strndup(p, host, host_len);
		if (copy == NULL)
			return;
		struct config_server *servers = *list;
		if (!p_grow(p, &servers, *count, sizeof(*servers))) {
			free(copy);
			return;
		}
		servers[(*count)++] = (struct config_server){ .host = copy, .port = port, .role = (enum server_role)role };
		*list = servers;
		return;
	}
	case VALUE_INT:
	case VALUE_INT64:
	case VALUE_DURATION:
	case VALUE_BYTES:
	case VALUE_BOOL:
	case VALUE_STRING:
	case VALUE_ENUM:
	case VALUE_SHARD:
		return;
	}
}

bool is_list(enum value_kind kind)
{
	switch (kind) {
	case VALUE_ADDR_LIST:
	case VALUE_TABLE_LIST:
	case VALUE_NAME_LIST:
	case VALUE_SERVER_LIST:
		return true;
	case VALUE_INT:
	case VALUE_INT64:
	case VALUE_DURATION:
	case VALUE_BYTES:
	case VALUE_BOOL:
	case VALUE_STRING:
	case VALUE_ENUM:
	case VALUE_SHARD:
		return false;
	}
	return false;
}

static void set_list(struct parser *p, const struct key_spec *k, void *base, const char *value, bool append)
{
	if (!append) {
		if (k->kind == VALUE_SERVER_LIST)
			free_server_list(field(base, k->off), field(base, k->off_n));
		else
			free_string_list(field(base, k->off), field(base, k->off_n));
	}
	/* Empty entries (",," or a trailing comma before a continuation line) are skipped. */
	const char *s = value;
	for (;;) {
		const char *comma = strchr(s, ',');
		size_t n = comma ? (size_t)(comma - s) : strlen(s);
		const char *item = s;
		trim(&item, &n);
		if (n > 0)
			set_list_item(p, k, base, item, n);
		if (comma == NULL)
			break;
		s = comma + 1;
	}
}

/* A duration key: a bare integer in the key's unit, as before units
 * existed, or a number with one of PostgreSQL's units. A bare value that
 * reads as PgBouncer's seconds is accepted with a warning. */
static void set_duration(struct parser *p, const struct key_spec *k, void *base, const char *value,
			 const char *got)
{
	bool seconds = (k->flags & KEY_SECONDS) != 0;
	int64_t v;
	bool bare;
	char why[120];
	if ((k->flags & KEY_EMPTY_INHERITS) && value[0] == '\0') {
		int iv = CONFIG_INHERIT;
		memcpy(field(base, k->off), &iv, sizeof(iv));
		return;
	}
	if (!config_parse_duration(value, seconds, &v, &bare, why, sizeof(why)) || v < k->min || v > k->max) {
		char lo[32], hi[32];
		config_format_duration(k->min, seconds, lo, sizeof(lo));
		config_format_duration(k->max, seconds, hi, sizeof(hi));
		line_error(p, k->name, "must be %sa duration between %s and %s: a number of %s or a number with a "
			   "unit (us, ms, s, min, h, d), got %s%s%s", (k->flags & KEY_EMPTY_INHERITS) ? "empty (inherit) or " : "",
			   lo, hi, seconds ? "seconds" : "milliseconds",
			   got, why[0] ? ": " : "", why);
		return;
	}
	if (bare && (k->flags & KEY_PGB_SECONDS) && v > 0 && v < 1000)
		problem(p, CONFIG_PROBLEM_WARNING, p->lineno, p->section_name, k->name,
			"%lld is taken as %lld milliseconds, but PgBouncer's %s is in seconds; write %llds "
			"if seconds were meant, or %lldms to keep milliseconds and silence this warning",
			(long long)v, (long long)v, k->name, (long long)v, (long long)v);
	int iv = (int)v;
	memcpy(field(base, k->off), &iv, sizeof(iv));
}

/* Parse value into the field k describes; report a problem on the current line if bad. */
void set_value(struct parser *p, const struct key_spec *k, void *base, const char *value, bool append)
{
	char got[CONFIG_QUOTE_MAX + 16];
	quote_value(value, k->flags, got, sizeof(got));
	bool inherit = (k->flags & KEY_EMPTY_INHERITS) && value[0] == '\0';
	const char *or_empty = (k->flags & KEY_EMPTY_INHERITS) ? "empty (inherit) or " : "";

	switch (k->kind) {
	case VALUE_INT:
	case VALUE_INT64: {
		int64_t v = CONFIG_INHERIT;
		if (!inherit && (!parse_int64(value, &v) || v < k->min || v > k->max)) {
			line_error(p, k->name, "must be %san integer between %lld and %lld, got %s", or_empty,
				   (long long)k->min, (long long)k->max, got);
			return;
		}
		if (k->kind == VALUE_INT) {
			int iv = (int)v;
			memcpy(field(base, k->off), &iv, sizeof(iv));
		} else {
			memcpy(field(base, k->off), &v, sizeof(v));
		}
		return;
	}
	case VALUE_DURATION:
		set_duration(p, k, base, value, got);
		return;
	case VALUE_BYTES: {
		int64_t v;
		char why[80];
		if (!config_parse_bytes(value, &v, why, sizeof(why)) || v < k->min || v > k->max) {
			char lo[32], hi[32];
			config_format_bytes(k->min, lo, sizeof(lo));
			config_format_bytes(k->max, hi, sizeof(hi));
			line_error(p, k->name, "must be an amount of memory between %s and %s: a number of bytes or a number "
				   "with a unit (B, kB, MB, GB, TB), got %s%s%s", lo, hi, got, why[0] ? ": " : "", why);
			return;
		}
		memcpy(field(base, k->off), &v, sizeof(v));
		return;
	}
	case VALUE_BOOL: {
		bool b;
		if (!parse_bool(value, &b)) {
			line_error(p, k->name, "must be a boolean (true/false, on/off, yes/no, 1/0), got %s", got);
			return;
		}
		*(bool *)field(base, k->off) = b;
		return;
	}
	case VALUE_STRING: {
		char why[200];
		if ((k->flags & KEY_NOT_EMPTY) && value[0] == '\0') {
			line_error(p, k->name, "must not be empty");
			return;
		}
		if (k->check != NULL && !k->check(value, why, sizeof(why))) {
			line_error(p, k->name, "%s, got %s", why, got);
			return;
		}
		char *copy = NULL;
		if (!((k->flags & KEY_EMPTY_IS_NULL) && value[0] == '\0')) {
			copy = p_strdup(p, value);
			if (copy == NULL)
				return;
		}
		char **dst = field(base, k->off);
		free(*dst);
		*dst = copy;
		return;
	}
	case VALUE_ENUM: {
		int v = CONFIG_INHERIT;
		if (!inherit && !parse_enum(k->names, value, &v)) {
			char choices[200];
			enum_choices(k->names, choices, sizeof(choices));
			line_error(p, k->name, "must be %sone of %s, got %s", or_empty, choices, got);
			return;
		}
		memcpy(field(base, k->off), &v, sizeof(v));
		return;
	}
	case VALUE_SHARD: {
		int64_t v;
		if (ci_equal(value, "all")) {
			v = CONFIG_DEFAULT_SHARD_ALL;
		} else if (!parse_int64(value, &v) || v < k->min || v > k->max) {
			line_error(p, k->name, "must be a shard number or \"all\", got %s", got);
			return;
		}
		int iv = (int)v;
		memcpy(field(base, k->off), &iv, sizeof(iv));
		return;
	}
	case VALUE_ADDR_LIST:
	case VALUE_TABLE_LIST:
	case VALUE_NAME_LIST:
	case VALUE_SERVER_LIST:
		set_list(p, k, base, value, append);
		return;
	}
}

void apply_defaults(struct parser *p, const struct key_spec *specs, size_t n, void *base)
{
	for (size_t i = 0; i < n; i++)
		if (specs[i].def != NULL)
			set_value(p, &specs[i], base, specs[i].def, false);
}

/* Free what the field k describes owns, leaving it empty. */
void free_field(const struct key_spec *k, void *base)
{
	switch (k->kind) {
	case VALUE_STRING: {
		char **s = field(base, k->off);
		free(*s);
		*s = NULL;
		break;
	}
	case VALUE_ADDR_LIST:
	case VALUE_TABLE_LIST:
	case VALUE_NAME_LIST:
		free_string_list(field(base, k->off), field(base, k->off_n));
		break;
	case VALUE_SERVER_LIST:
		free_server_list(field(base, k->off), field(base, k->off_n));
		break;
	case VALUE_INT:
	case VALUE_INT64:
	case VALUE_DURATION:
	case VALUE_BYTES:
	case VALUE_BOOL:
	case VALUE_ENUM:
	case VALUE_SHARD:
		break;
	}
}

/* Forget (without freeing) what the field k describes owns, so that a
 * shallow copy can take a new value while the original keeps the old one. */
void detach_field(const struct key_spec *k, void *base)
{
	switch (k->kind) {
	case VALUE_STRING:
		*(char **)field(base, k->off) = NULL;
		break;
	case VALUE_ADDR_LIST:
	case VALUE_TABLE_LIST:
	case VALUE_NAME_LIST:
		*(char ***)field(base, k->off) = NULL;
		*(size_t *)field(base, k->off_n) = 0;
		break;
	case VALUE_SERVER_LIST:
		*(struct config_server **)field(base, k->off) = NULL;
		*(size_t *)field(base, k->off_n) = 0;
		break;
	case VALUE_INT:
	case VALUE_INT64:
	case VALUE_DURATION:
	case VALUE_BYTES:
	case VALUE_BOOL:
	case VALUE_ENUM:
	case VALUE_SHARD:
		break;
	}
}

void free_fields(const struct key_spec *specs, size_t n, void *base)
{
	for (size_t i = 0; i < n; i++)
		free_field(&specs[i], base);
}

/* ------------------------------------------------------------------ */
/* A [general] value as text (SHOW CONFIG, pgcat's and PgBouncer's rows) */

/* Append to buf at *used; false once it no longer fits. */
bool config_buf_put(char *buf, size_t buflen, size_t *used, const char *s)
{
	size_t len = strlen(s);
	if (*used + len >= buflen) {
		if (*used < buflen) {
			memcpy(buf + *used, s, buflen - *used - 1);
			buf[buflen - 1] = '\0';
		}
		*used = buflen;
		return false;
	}
	memcpy(buf + *used, s, len + 1);
	*used += len;
	return true;
}

bool config_general_value(const struct config *cfg, const char *key, char *buf, size_t buflen)
{
	if (buf == NULL || buflen == 0)
		return false;
	buf[0] = '\0';
	size_t i;
	const struct key_spec *k = cfg && key ? find_spec(general_specs, N_GENERAL_KEYS, key, &i) : NULL;
	if (k == NULL)
		return false;
	const void *base = &cfg->general;
	char num[32];
	size_t used = 0;
	switch (k->kind) {
	case VALUE_INT:
	case VALUE_DURATION:    /* a number in the key's unit, as PgBouncer's SHOW CONFIG */
	case VALUE_SHARD: {
		int v;
		memcpy(&v, cfield(base, k->off), sizeof(v));
		if (v == CONFIG_INHERIT && (k->flags & KEY_EMPTY_INHERITS))
			return true;    /* empty: inherited */
		snprintf(num, sizeof(num), "%d", v);
		return config_buf_put(buf, buflen, &used, num);
	}
	case VALUE_INT64:
	case VALUE_BYTES: {     /* (bytes, as max_packet_size) */
		int64_t v;
		memcpy(&v, cfield(base, k->off), sizeof(v));
		snprintf(num, sizeof(num), "%lld", (long long)v);
		return config_buf_put(buf, buflen, &used, num);
	}
	case VALUE_BOOL:
		return config_buf_put(buf, buflen, &used, *(const bool *)cfield(base, k->off) ? "true" : "false");
	case VALUE_STRING: {
		const char *s = *(char *const *)cfield(base, k->off);
		if (s == NULL)
			s = "";
		/* SHOW CONFIG must not print secrets. */
		if ((k->flags & KEY_SECRET) && s[0] != '\0')
			s = "********";
		return config_buf_put(buf, buflen, &used, s);
	}
	case VALUE_ENUM: {
		int v;
		memcpy(&v, cfield(base, k->off), sizeof(v));
		return config_buf_put(buf, buflen, &used, enum_name(k->names, v));
	}
	case VALUE_ADDR_LIST:
	case VALUE_TABLE_LIST:
	case VALUE_NAME_LIST: {
		char *const *list = *(char **const *)cfield(base, k->off);
		size_t n = *(const size_t *)cfield(base, k->off_n);
		for (size_t j = 0; j < n; j++)
			if ((j > 0 && !config_buf_put(buf, buflen, &used, ",")) || !config_buf_put(buf, buflen, &used, list[j]))
				return false;
		return true;
	}
	case VALUE_SERVER_LIST:
		return false;
	}
	return false;
}
