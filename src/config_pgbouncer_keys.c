/* SPDX-License-Identifier: MIT */
/*
 * config_pgbouncer_keys: PgBouncer 1.25's [pgbouncer] settings, one table
 * that says for each how pgcat honours it: through a pgcat key (its value
 * converted from PgBouncer's units, seconds, and notation), or not at all,
 * in which case a value pgcat's fixed behaviour does not match is refused
 * or warned about by name, never passed over in silence. Also PgBouncer's
 * defaults, what its SHOW CONFIG shows, and SET under its names
 * (translated to pgcat's keys; config_runtime.c applies them). Its own
 * room beside config_pgbouncer.c, which reads the file and its other
 * sections and calls in here for each [pgbouncer] line. It calls
 * config_value.c and config.c only. doc/configuration.md ("Coming from
 * PgBouncer") is the table in words.
 */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h and comes
 * first in the include path. */
#include "config.h"
#include "config_internal.h"

#include "hba.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* The [pgbouncer] settings                                             */

enum pgb_type { PT_INT, PT_UINT, PT_TIME, PT_STR, PT_LOOKUP };

enum pgb_map {
	M_INT,     /* pgcat key, the same integer */
	M_BOOL,    /* pgcat boolean key: 0 false, anything else true */
	M_SECS,    /* pgcat time key (ms) from seconds, maybe fractional */
	M_STR,     /* pgcat string (or enum of the same spellings) key, as written */
	M_SAME,    /* no pgcat key: the values pgcat's fixed behaviour matches pass,
		    * others draw a problem of kind `level` saying what pgcat does */
	M_ACCEPT,  /* no pgcat key, and nothing pgcat would do otherwise */
	M_FN       /* a function of its own */
};

/* What PgBouncer's 0 comes to for an M_SECS setting. */
enum pgb_zero { Z_ZERO, Z_NEVER, Z_ONCE };

struct pgb;
struct pgb_key;
typedef void (*pgb_fn)(struct pgb *g, const struct pgb_key *k, const char *value);

struct pgb_key {
	const char *name;
	enum pgb_type type;
	const char *def;           /* PgBouncer's default as its SHOW CONFIG has it; NULL: shown NULL */
	bool reload;               /* PgBouncer changes it without a restart */
	enum pgb_map map;
	const char *pgcat;         /* pgcat's key: the target, or where SHOW CONFIG reads it */
	enum pgb_zero zero;
	const char *same;          /* M_SAME: the matching values, '|' between them */
	enum config_problem_kind level;
	const char *why;           /* M_SAME: what pgcat does instead */
	pgb_fn fn;
	bool hidden;               /* not in SHOW CONFIG (PgBouncer on Linux has no such key) */
};

static void fn_auth_type(struct pgb *g, const struct pgb_key *k, const char *value);
static void fn_auth_hba_file(struct pgb *g, const struct pgb_key *k, const char *value);
static void fn_listen_addr(struct pgb *g, const struct pgb_key *k, const char *value);
static void fn_unix_socket_dir(struct pgb *g, const struct pgb_key *k, const char *value);
static void fn_max_prepared(struct pgb *g, const struct pgb_key *k, const char *value);
static void fn_server_sslmode(struct pgb *g, const struct pgb_key *k, const char *value);
static void fn_user(struct pgb *g, const struct pgb_key *k, const char *value);
static void fn_verbose(struct pgb *g, const struct pgb_key *k, const char *value);
static void fn_server_check_query(struct pgb *g, const struct pgb_key *k, const char *value);

#define INT_(n, def, rl, to) { n, PT_INT, def, rl, M_INT, to, Z_ZERO, NULL, 0, NULL, NULL, false }
#define UINT_(n, def, rl, to) { n, PT_UINT, def, rl, M_INT, to, Z_ZERO, NULL, 0, NULL, NULL, false }
#define BOOL_(n, def, to) { n, PT_INT, def, true, M_BOOL, to, Z_ZERO, NULL, 0, NULL, NULL, false }
#define SECS_(n, def, to, z) { n, PT_TIME, def, true, M_SECS, to, z, NULL, 0, NULL, NULL, false }
#define STR_(n, def, rl, to) { n, PT_STR, def, rl, M_STR, to, Z_ZERO, NULL, 0, NULL, NULL, false }
#define SAME(n, t, def, rl, same, lvl, why) \
	{ n, t, def, rl, M_SAME, NULL, Z_ZERO, same, CONFIG_PROBLEM_##lvl, why, NULL, false }
#define ACCEPT(n, t, def, rl) { n, t, def, rl, M_ACCEPT, NULL, Z_ZERO, NULL, 0, NULL, NULL, false }
#define FN(n, t, def, rl, show, f) { n, t, def, rl, M_FN, show, Z_ZERO, NULL, 0, NULL, f, false }

static const char pgb_auth_query_default[] =
	"SELECT rolname, CASE WHEN rolvaliduntil < now() THEN NULL ELSE rolpassword END FROM pg_authid "
	"WHERE rolname=$1 AND rolcanlogin";

/* Every setting of PgBouncer 1.25's [pgbouncer], in its SHOW CONFIG order
 * (alphabetical). doc/configuration.md ("Coming from PgBouncer") is this
 * table in words. */
static const struct pgb_key pgb_keys[] = {
	STR_("admin_users", "", true, "admin_users"),
	SAME("application_name_add_host", PT_INT, "0", true, "0", WARNING,
	     "not supported yet: application_name reaches the server as the client set it"),
	STR_("auth_dbname", NULL, true, "auth_dbname"),
	STR_("auth_file", NULL, true, "auth_file"),
	FN("auth_hba_file", PT_STR, "", true, NULL, fn_auth_hba_file),
	FN("auth_ident_file", PT_STR, NULL, true, NULL, fn_auth_hba_file),
	STR_("auth_ldap_options", NULL, true, "auth_ldap_options"),
	STR_("auth_query", pgb_auth_query_default, true, "auth_query"),
	FN("auth_type", PT_LOOKUP, "md5", true, NULL, fn_auth_type),
	STR_("auth_user", NULL, true, "auth_user"),
	SECS_("autodb_idle_timeout", "3600", "autodb_idle_timeout", Z_ZERO),
	SAME("cancel_wait_timeout", PT_TIME, "10", true, "5", WARNING,
	     "pgcat sends a cancel request at once on a connection of its own and gives up after 5 seconds"),
	SECS_("client_idle_timeout", "0", "client_idle_timeout", Z_ZERO),
	SECS_("client_login_timeout", "60", "client_login_timeout", Z_ZERO),
	STR_("client_tls13_ciphers", NULL, true, "client_tls13_ciphers"),
	STR_("client_tls_ca_file", "", true, "client_tls_ca_file"),
	STR_("client_tls_cert_file", "", true, "client_tls_cert_file"),
	STR_("client_tls_ciphers", "default", true, "client_tls_ciphers"),
	SAME("client_tls_dheparams", PT_STR, "auto", true, "auto", WARNING,
	     "pgcat leaves the DH parameters to OpenSSL's defaults"),
	SAME("client_tls_ecdhcurve", PT_STR, "auto", true, "auto", WARNING,
	     "pgcat leaves the ECDH curves to OpenSSL's defaults"),
	STR_("client_tls_key_file", "", true, "client_tls_key_file"),
	STR_("client_tls_protocols", "secure", true, "client_tls_protocols"),
	STR_("client_tls_sslmode", "disable", true, "client_tls_sslmode"),
	SAME("conffile", PT_STR, NULL, true, "", WARNING,
	     "pgcat reads the file named on its command line, at start and on every reload"),
	INT_("default_pool_size", "20", true, "default_pool_size"),
	SAME("disable_pqexec", PT_INT, "0", false, "0", ERROR,
	     "not supported yet: pgcat passes simple Query messages through"),
	SECS_("dns_max_ttl", "15", "dns_max_ttl", Z_ZERO),
	SAME("dns_nxdomain_ttl", PT_TIME, "15", true, "0", WARNING,
	     "pgcat keeps a failed lookup one second: the next new server connection after that asks again"),
	SAME("dns_zone_check_period", PT_TIME, "0", true, "0", WARNING,
	     "not supported: pgcat does not watch zone serials (it looks names up again after dns_max_ttl)"),
	SECS_("idle_transaction_timeout", "0", "idle_transaction_timeout", Z_ZERO),
	STR_("ignore_startup_parameters", "", true, "ignore_startup_parameters"),
	ACCEPT("job_name", PT_STR, "pgbouncer", false),
	FN("listen_addr", PT_STR, "", false, "listen_addr", fn_listen_addr),
	SAME("listen_backlog", PT_INT, "128", false, "128|1024", WARNING, "pgcat's listen backlog is 1024"),
	INT_("listen_port", "6432", false, "listen_port"),
	BOOL_("log_connections", "1", "log_connections"),
	BOOL_("log_disconnections", "1", "log_disconnections"),
	SAME("log_pooler_errors", PT_INT, "1", true, "1", WARNING,
	     "pgcat always logs an error it sends a client, in that client's disconnection line"),
	SAME("log_stats", PT_INT, "1", true, "0", WARNING,
	     "pgcat writes no periodic statistics lines: SHOW STATS and the Prometheus endpoint have them"),
	STR_("logfile", "", true, "log_file"),
	INT_("max_client_conn", "100", true, "max_client_conn"),
	INT_("max_db_client_connections", "0", true, "max_db_client_connections"),
	INT_("max_db_connections", "0", true, "max_db_connections"),
	UINT_("max_packet_size", "2147483647", true, "max_packet_size"),
	FN("max_prepared_statements", PT_INT, "200", true, NULL, fn_max_prepared),
	INT_("max_user_client_connections", "0", true, "max_user_client_connections"),
	INT_("max_user_connections", "0", true, "max_user_connections"),
	INT_("min_pool_size", "0", true, "min_pool_size"),
	INT_("peer_id", "0", true, "peer_id"),
	STR_("pidfile", "", false, "pidfile"),
	SAME("pkt_buf", PT_INT, "4096", false, "4096", WARNING,
	     "pgcat reads a socket up to 64 KiB at a time"),
	{ "pool_mode", PT_LOOKUP, "session", true, M_STR, "pool_mode", Z_ZERO, NULL, 0, NULL, NULL, false },
	SECS_("query_timeout", "0", "query_timeout", Z_ZERO),
	SECS_("query_wait_notify", "5", "query_wait_notify", Z_ZERO),
	SECS_("query_wait_timeout", "120", "query_wait_timeout", Z_ZERO),
	INT_("reserve_pool_size", "0", true, "reserve_pool_size"),
	SECS_("reserve_pool_timeout", "5", "reserve_pool_timeout", Z_NEVER),
	SAME("resolv_conf", PT_STR, "", false, "", ERROR,
	     "not supported yet: pgcat's resolver reads /etc/hosts and /etc/resolv.conf"),
	SAME("sbuf_loopcnt", PT_INT, "5", true, "5", WARNING,
	     "pgcat reads once (up to 64 KiB) per ready connection, then moves on"),
	SAME("scram_iterations", PT_INT, "4096", true, "4096", WARNING,
	     "pgcat derives SCRAM secrets with 4096 iterations"),
	SECS_("server_check_delay", "30", "healthcheck_delay", Z_ZERO),
	FN("server_check_query", PT_STR, "<empty>", true, NULL, fn_server_check_query),
	SECS_("server_connect_timeout", "15", "connect_timeout", Z_NEVER),
	BOOL_("server_fast_close", "0", "server_fast_close"),
	SECS_("server_idle_timeout", "600", "idle_timeout", Z_ZERO),
	SECS_("server_lifetime", "3600", "server_lifetime", Z_ONCE),
	SECS_("server_login_retry", "15", "server_login_retry", Z_ZERO),
	STR_("server_reset_query", "DISCARD ALL", true, "server_reset_query"),
	SAME("server_reset_query_always", PT_INT, "0", true, "0", WARNING,
	     "not supported: pgcat runs server_reset_query in session mode only"),
	BOOL_("server_round_robin", "0", "server_round_robin"),
	STR_("server_tls13_ciphers", NULL, true, "server_tls13_ciphers"),
	STR_("server_tls_ca_file", "", true, "server_tls_ca_file"),
	STR_("server_tls_cert_file", "", true, "server_tls_cert_file"),
	STR_("server_tls_ciphers", "default", true, "server_tls_ciphers"),
	STR_("server_tls_key_file", "", true, "server_tls_key_file"),
	STR_("server_tls_protocols", "secure", true, "server_tls_protocols"),
	FN("server_tls_sslmode", PT_LOOKUP, "prefer", true, "server_tls_sslmode", fn_server_sslmode),
	{ "service_name", PT_STR, NULL, false, M_ACCEPT, NULL, Z_ZERO, NULL, 0, NULL, NULL, true },
	ACCEPT("so_reuseport", PT_INT, "0", false),
	INT_("stats_period", "60", true, "stats_period"),
	STR_("stats_users", "", true, "stats_users"),
	SAME("suspend_timeout", PT_TIME, "10", true, "10", WARNING,
	     "pgcat's SUSPEND drops no connection: it stops reading from clients, servers' answers still reach them"),
	BOOL_("syslog", "0", "syslog"),
	SAME("syslog_facility", PT_STR, "daemon", true, "daemon", WARNING, "pgcat logs to syslog as daemon"),
	SAME("syslog_ident", PT_STR, "pgbouncer", true, "pgcat", WARNING, "pgcat logs to syslog as pgcat"),
	SAME("tcp_defer_accept", PT_INT, "1", true, "0", WARNING, "not supported yet: pgcat accepts at once"),
	BOOL_("tcp_keepalive", "1", "tcp_keepalive"),
	INT_("tcp_keepcnt", "0", true, "tcp_keepcnt"),
	INT_("tcp_keepidle", "0", true, "tcp_keepidle"),
	INT_("tcp_keepintvl", "0", true, "tcp_keepintvl"),
	SAME("tcp_socket_buffer", PT_INT, "0", true, "0", WARNING,
	     "not supported yet: pgcat keeps the kernel's socket buffer sizes"),
	INT_("tcp_user_timeout", "0", true, "tcp_user_timeout"),
	ACCEPT("track_extra_parameters", PT_STR, "IntervalStyle", false),
	SECS_("transaction_timeout", "0", "transaction_timeout", Z_ZERO),
	FN("unix_socket_dir", PT_STR, "/tmp", false, "unix_socket_dir", fn_unix_socket_dir),
	SAME("unix_socket_group", PT_STR, "", false, "", WARNING,
	     "not supported yet: pgcat's Unix socket keeps the group of its process"),
	SAME("unix_socket_mode", PT_INT, "0777", false, "0777", ERROR,
	     "not supported yet: pgcat's Unix socket is always 0777"),
	FN("user", PT_STR, NULL, false, NULL, fn_user),
	FN("verbose", PT_INT, "0", true, NULL, fn_verbose),
};

#define N_PGB_KEYS (sizeof(pgb_keys) / sizeof(pgb_keys[0]))

static const char *const lookup_pool_mode[] = { "session", "transaction", "statement", NULL };
static const char *const lookup_auth_type[] = { "any", "trust", "plain", "md5", "cert", "hba", "ldap", "pam",
						"scram-sha-256", NULL };
static const char *const lookup_sslmode[] = { "disable", "allow", "prefer", "require", "verify-ca", "verify-full",
					      NULL };

static const char *const *key_lookup(const struct pgb_key *k)
{
	if (strcmp(k->name, "pool_mode") == 0)
		return lookup_pool_mode;
	if (strcmp(k->name, "auth_type") == 0)
		return lookup_auth_type;
	return lookup_sslmode;
}

/* Values PgBouncer keeps per file, beyond what pgcat's keys hold. */
struct config_pgbouncer {
	char *value[N_PGB_KEYS];   /* as the file (or a SET) gave it; NULL: PgBouncer's default */
};

_Static_assert(N_PGB_KEYS <= PGB_KEY_SLOTS, "PGB_KEY_SLOTS");

/* A problem on the current line of the current file. */
#define pgb_problem(g, kind, key, ...) \
	problem((g)->p, (kind), (g)->defaults ? 0 : (g)->p->lineno, (g)->p->section_name, (key), __VA_ARGS__)
#define pgb_error(g, key, ...) pgb_problem((g), CONFIG_PROBLEM_ERROR, (key), __VA_ARGS__)
#define pgb_warning(g, key, ...) pgb_problem((g), CONFIG_PROBLEM_WARNING, (key), __VA_ARGS__)

static const struct pgb_key *find_pgb_key(const char *name, size_t *index)
{
	for (size_t i = 0; i < N_PGB_KEYS; i++) {
		if (strcmp(pgb_keys[i].name, name) == 0) {
			if (index)
				*index = i;
			return &pgb_keys[i];
		}
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* PgBouncer's value types                                              */

/* An integer as PgBouncer reads one: C's notation (0777 octal, 0x1F
 * hexadecimal), the whole value. */
bool pgb_int(const char *s, long long *out)
{
	if (*s == '\0')
		return false;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 0);
	if (errno != 0 || *end != '\0' || end == s)
		return false;
	*out = v;
	return true;
}

/* Seconds: digits, an optional fraction; not negative. */
bool pgb_seconds(const char *s, double *out)
{
	const char *q;
	size_t digits = config_scan_decimal(s, &q);
	if (digits == 0 || *q != '\0' || q - s > 30)
		return false;
	*out = strtod(s, NULL);
	return true;
}

/* Seconds as pgcat's milliseconds ("1500ms"); false: too large. A value
 * that is not 0 never rounds to 0 (which means "off"). */
bool pgb_seconds_to_ms(double v, long long *ms)
{
	double m = v * 1000.0;
	if (m > (double)INT_MAX)
		return false;
	*ms = (long long)(m + 0.5);   /* not negative: rounded to the nearest */
	if (*ms == 0 && v > 0)
		*ms = 1;
	return true;
}

static bool lookup_has(const char *const *names, const char *value)
{
	for (size_t i = 0; names[i]; i++)
		if (ci_equal(names[i], value))
			return true;
	return false;
}

/* Check value against the setting's PgBouncer type: a problem if it is
 * not one PgBouncer would take either. */
static bool valid_type(struct pgb *g, const struct pgb_key *k, const char *value)
{
	long long iv;
	double dv;
	switch (k->type) {
	case PT_INT:
	case PT_UINT:
		if (pgb_int(value, &iv) && (k->type == PT_INT ? iv >= INT_MIN && iv <= INT_MAX : iv >= 0 && iv <= UINT_MAX))
			return true;
		pgb_error(g, k->name, "must be an integer, got \"%.*s\"", CONFIG_QUOTE_MAX, value);
		return false;
	case PT_TIME:
		if (pgb_seconds(value, &dv))
			return true;
		pgb_error(g, k->name, "must be a number of seconds (PgBouncer's unit, e.g. 30 or 0.5), got \"%.*s\"",
			  CONFIG_QUOTE_MAX, value);
		return false;
	case PT_LOOKUP: {
		const char *const *names = key_lookup(k);
		if (lookup_has(names, value))
			return true;
		char list[200] = "";
		for (size_t i = 0; names[i]; i++)
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? " | " : "", names[i]);
		pgb_error(g, k->name, "must be one of %s, got \"%.*s\"", list, CONFIG_QUOTE_MAX, value);
		return false;
	}
	case PT_STR:
		return true;
	}
	return true;
}

/* ------------------------------------------------------------------ */
/* Setting pgcat's keys                                                 */

/* pgcat's key `to` takes value (in pgcat's notation) for PgBouncer's
 * setting k: errors name k, and its line is the key's line. */
static void emit(struct pgb *g, const struct pgb_key *k, const char *to, const char *value)
{
	if (g->set_mode) {
		if (g->set->n < PGB_SET_MAX_PAIRS) {
			g->set->pairs[g->set->n].key = to;
			snprintf(g->set->pairs[g->set->n].value, sizeof(g->set->pairs[0].value), "%s", value);
			g->set->n++;
		}
		return;
	}
	size_t idx;
	const struct key_spec *spec = find_spec(general_specs, N_GENERAL_KEYS, to, &idx);
	if (spec == NULL)
		return;
	struct key_spec named = *spec;
	named.name = k->name;   /* messages speak of PgBouncer's setting */
	if (!g->defaults) {
		g->p->general_line[idx] = g->p->lineno;
		g->p->general_file[idx] = g->p->file;
	}
	set_value(g->p, &named, &g->p->cfg->general, value, false);
}

/* Does value match one of the '|'-separated values of same (as numbers
 * for numeric settings)? */
static bool same_value(const struct pgb_key *k, const char *value)
{
	const char *s = k->same;
	for (;;) {
		const char *bar = strchr(s, '|');
		size_t n = bar ? (size_t)(bar - s) : strlen(s);
		char one[64];
		snprintf(one, sizeof(one), "%.*s", (int)n, s);
		long long a, b;
		double x, y;
		bool eq = k->type == PT_INT || k->type == PT_UINT ? pgb_int(value, &a) && pgb_int(one, &b) && a == b
			  : k->type == PT_TIME ? pgb_seconds(value, &x) && pgb_seconds(one, &y) && x == y
					       : ci_equal(value, one);
		if (eq)
			return true;
		if (bar == NULL)
			return false;
		s = bar + 1;
	}
}

static void apply_key(struct pgb *g, const struct pgb_key *k, const char *value)
{
	if (!valid_type(g, k, value))
		return;
	char buf[64];
	long long iv = 0;
	double dv = 0;
	switch (k->map) {
	case M_INT:
		(void)pgb_int(value, &iv);
		snprintf(buf, sizeof(buf), "%lld", iv);
		emit(g, k, k->pgcat, buf);
		return;
	case M_BOOL:
		(void)pgb_int(value, &iv);
		emit(g, k, k->pgcat, iv ? "true" : "false");
		return;
	case M_SECS: {
		(void)pgb_seconds(value, &dv);
		long long ms;
		if (!pgb_seconds_to_ms(dv, &ms)) {
			pgb_error(g, k->name, "must be at most %d.%03d seconds, got \"%.*s\"", INT_MAX / 1000, INT_MAX % 1000,
				  CONFIG_QUOTE_MAX, value);
			return;
		}
		/* PgBouncer's 0: what pgcat does that comes closest. */
		if (ms == 0 && k->zero == Z_NEVER)
			ms = INT_MAX;     /* no limit: the longest wait pgcat knows */
		else if (ms == 0 && k->zero == Z_ONCE)
			ms = 1;           /* each connection used once: older than 1 ms when given back */
		snprintf(buf, sizeof(buf), "%lldms", ms);
		emit(g, k, k->pgcat, buf);
		return;
	}
	case M_STR:
		emit(g, k, k->pgcat, value);
		return;
	case M_SAME:
		if (!same_value(k, value))
			pgb_problem(g, k->level, k->name, "\"%.*s\" %s: %s", CONFIG_QUOTE_MAX, value,
				    k->level == CONFIG_PROBLEM_ERROR ? "is refused" : "is not honoured", k->why);
		return;
	case M_ACCEPT:
		return;
	case M_FN:
		k->fn(g, k, value);
		return;
	}
}

/* ---- the settings with functions of their own ---- */

static void fn_auth_type(struct pgb *g, const struct pgb_key *k, const char *value)
{
	if (ci_equal(value, "md5") || ci_equal(value, "scram-sha-256") || ci_equal(value, "trust") ||
	    ci_equal(value, "ldap") || ci_equal(value, "pam")) {
		emit(g, k, "auth_type", value);
		return;
	}
	/* plain: the password in clear, pgcat.ini's "password" (PostgreSQL's
	 * name); SHOW CONFIG still shows what the file or SET said. */
	if (ci_equal(value, "plain")) {
		emit(g, k, "auth_type", "password");
		return;
	}
	if (ci_equal(value, "hba") || ci_equal(value, "cert")) {
		/* Read with the rest (pgb_finish): the rules come from
		 * auth_hba_file, or for cert from one rule of pgcat's. */
		if (g->set_mode)
			pgb_error(g, k->name, "\"%s\" cannot be SET: edit the file and RELOAD", value);
		return;
	}
	pgb_error(g, k->name, "\"%s\" is not supported yet: pgcat knows md5, scram-sha-256, plain, trust, hba, cert, "
		  "ldap and pam", value);
}

/* auth_hba_file and auth_ident_file. */
static void fn_auth_hba_file(struct pgb *g, const struct pgb_key *k, const char *value)
{
	(void)value;   /* read at the end: they count only with auth_type = hba */
	if (g->set_mode)
		pgb_error(g, k->name, "cannot be SET: edit the file and RELOAD");
}

static void fn_listen_addr(struct pgb *g, const struct pgb_key *k, const char *value)
{
	/* Empty: no TCP, only the Unix socket (PgBouncer's default). */
	emit(g, k, "listen_addr", value);
}

static void fn_unix_socket_dir(struct pgb *g, const struct pgb_key *k, const char *value)
{
	if (value[0] == '@') {
		pgb_error(g, k->name, "\"%.*s\": sockets in the abstract namespace are not supported",
			  CONFIG_QUOTE_MAX, value);
		return;
	}
	emit(g, k, "unix_socket_dir", value);
}

static void fn_max_prepared(struct pgb *g, const struct pgb_key *k, const char *value)
{
	long long n = 0;
	(void)pgb_int(value, &n);
	if (n <= 0) {
		emit(g, k, "prepared_statements", "false");
		return;
	}
	char buf[32];
	snprintf(buf, sizeof(buf), "%lld", n);
	emit(g, k, "prepared_statements", "true");
	emit(g, k, "prepared_statements_cache_size", buf);
}

static void fn_server_sslmode(struct pgb *g, const struct pgb_key *k, const char *value)
{
	if (ci_equal(value, "allow")) {
		pgb_warning(g, k->name, "\"allow\" is taken as prefer: pgcat asks servers for TLS first, and uses plain "
			    "TCP where the server has no TLS");
		emit(g, k, "server_tls_sslmode", "prefer");
		return;
	}
	emit(g, k, "server_tls_sslmode", value);
}

/* pgcat allows TLS 1.2 and 1.3 (PgBouncer's "secure"). A list without
 * them would let more through than asked: refused. Older versions asked
 * for as well: warned about, pgcat is stricter. */
/* PgBouncer changes to this user after start; pgcat does not: fine when
 * it runs as that user already. */
static void fn_user(struct pgb *g, const struct pgb_key *k, const char *value)
{
	if (value[0] == '\0')
		return;
	struct passwd *pw = getpwnam(value);
	if (pw == NULL)
		pgb_error(g, k->name, "no such system user: \"%.*s\"", CONFIG_QUOTE_MAX, value);
	else if (pw->pw_uid != geteuid())
		pgb_error(g, k->name, "\"%.*s\" is refused: pgcat does not change users; start it as that user "
			  "(its Debian unit runs it as pgcat)", CONFIG_QUOTE_MAX, value);
}

static void fn_verbose(struct pgb *g, const struct pgb_key *k, const char *value)
{
	long long v = 0;
	(void)pgb_int(value, &v);
	emit(g, k, "log_level", v <= 0 ? "info" : v == 1 ? "debug" : "trace");
}

/* PgBouncer's "<empty>" is an empty query; an empty value turns its
 * check off, which pgcat's role checks cannot do without. */
static void fn_server_check_query(struct pgb *g, const struct pgb_key *k, const char *value)
{
	if (value[0] == '\0') {
		pgb_warning(g, k->name, "pgcat cannot turn the server check off: it sends an empty query instead");
		emit(g, k, "healthcheck_query", "");
		return;
	}
	emit(g, k, "healthcheck_query", strcmp(value, "<empty>") == 0 ? "" : value);
}

/* ------------------------------------------------------------------ */
/* The file's settings                                                  */

void pgb_apply_defaults(struct pgb *g)
{
	g->defaults = true;
	for (size_t i = 0; i < N_PGB_KEYS; i++) {
		const struct pgb_key *k = &pgb_keys[i];
		/* Only settings that map: the others have nothing to set. */
		if (k->map == M_SAME || k->map == M_ACCEPT)
			continue;
		if (k->def != NULL)
			apply_key(g, k, k->def);
		else if (k->map == M_STR)
			emit(g, k, k->pgcat, "");   /* PgBouncer's "not set" */
	}
	g->defaults = false;
}

void pgb_setting(struct pgb *g, const char *name, const char *value)
{
	size_t i;
	const struct pgb_key *k = find_pgb_key(name, &i);
	if (k == NULL) {
		for (size_t j = 0; j < N_PGB_KEYS; j++) {
			if (ci_equal(pgb_keys[j].name, name)) {
				pgb_problem(g, CONFIG_PROBLEM_UNKNOWN, name, "unknown setting (did you mean %s?)",
					    pgb_keys[j].name);
				return;
			}
		}
		pgb_problem(g, CONFIG_PROBLEM_UNKNOWN, name, "unknown setting: PgBouncer 1.25 has no such one");
		return;
	}
	/* As PgBouncer: a later line (an included file's, say) wins. */
	char *copy = p_strdup(g->p, value);
	if (copy == NULL)
		return;
	free(g->value[i]);
	g->value[i] = copy;
	g->key_line[i] = g->p->lineno;
	g->key_file[i] = g->p->file;
	apply_key(g, k, value);
}

static const char *setting(const struct pgb *g, const char *name, int *line, const char **file)
{
	size_t i = 0;
	const struct pgb_key *k = find_pgb_key(name, &i);
	assert(k);   /* (names of the table itself) */
	*line = g->key_line[i];
	*file = g->key_file[i];
	return g->value[i] ? g->value[i] : k->def;
}

/* A problem about setting name, at its line in its file. */
__attribute__((format(printf, 5, 6)))
static void setting_problem(struct pgb *g, enum config_problem_kind kind, const char *name, const char *key,
			    const char *fmt, ...)
{
	int line;
	const char *file;
	(void)setting(g, name, &line, &file);
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	const char *was = g->p->file;
	if (file != NULL)
		g->p->file = file;
	problem(g->p, kind, line, "pgbouncer", key, "%s", msg);
	g->p->file = was;
}

/* The rules of auth_type hba (auth_hba_file, read by config_load.c as
 * pgcat.ini's is) and cert (one rule: TLS with a client certificate). */
static void finish_auth_type(struct pgb *g)
{
	struct config *cfg = g->p->cfg;
	int line;
	const char *file;
	const char *type = setting(g, "auth_type", &line, &file);
	if (ci_equal(type, "hba")) {
		const char *hba = setting(g, "auth_hba_file", &line, &file);
		if (hba == NULL || hba[0] == '\0') {
			setting_problem(g, CONFIG_PROBLEM_ERROR, "auth_type", "auth_type",
					"\"hba\" needs auth_hba_file: without it every login would be refused");
			return;
		}
		char *copy = p_strdup(g->p, hba);
		if (copy == NULL)
			return;
		free(cfg->general.auth_hba_file);
		cfg->general.auth_hba_file = copy;
		size_t idx;
		if (find_spec(general_specs, N_GENERAL_KEYS, "auth_hba_file", &idx))
			g->p->general_line[idx] = line;
		/* The maps of its map= lines, read with it (PgBouncer reads
		 * them only for hba too). */
		const char *ident = setting(g, "auth_ident_file", &line, &file);
		if (ident != NULL && ident[0] != '\0') {
			copy = p_strdup(g->p, ident);
			if (copy == NULL)
				return;
			free(cfg->general.auth_ident_file);
			cfg->general.auth_ident_file = copy;
			if (find_spec(general_specs, N_GENERAL_KEYS, "auth_ident_file", &idx))
				g->p->general_line[idx] = line;
		}
		return;
	}
	if (!ci_equal(type, "cert"))
		return;   /* auth_hba_file counts only for hba, as in PgBouncer */
	if (cfg->general.client_tls_sslmode < TLS_MODE_VERIFY_CA) {
		setting_problem(g, CONFIG_PROBLEM_ERROR, "auth_type", "auth_type",
				"\"cert\" needs client_tls_sslmode verify-ca or verify-full (a client certificate checked "
				"against client_tls_ca_file)");
		return;
	}
	static const char rule[] = "hostssl all all all cert\n";
	struct hba *rules = calloc(1, sizeof(*rules));
	if (rules == NULL || hba_parse(rule, sizeof(rule) - 1, rules, NULL, NULL) != HBA_PARSE_OK) {
		free(rules);
		g->p->oom = true;
		return;
	}
	cfg->hba = rules;
}

void pgb_finish_settings(struct pgb *g)
{
	struct config *cfg = g->p->cfg;
	finish_auth_type(g);
	/* PgBouncer's timeouts close the client and its server. */
	cfg->general.timeout_action = TIMEOUT_ACTION_DISCONNECT;
	/* and its PAM service is "pgbouncer" (/etc/pam.d/pgbouncer). */
	char *service = p_strdup(g->p, "pgbouncer");
	if (service != NULL) {
		free(cfg->general.auth_pam_service);
		cfg->general.auth_pam_service = service;
	}
	/* and its clients wait for a server that cannot be reached. */
	cfg->general.unreachable_server = UNREACHABLE_SERVER_WAIT;
	/* The console's users are admin_users and stats_users, as PgBouncer's:
	 * pgcat's own admin_username names nobody here. */
	char *none = p_strdup(g->p, "");
	if (none != NULL) {
		free(cfg->general.admin_username);
		cfg->general.admin_username = none;
	}
	cfg->pgbouncer = p_alloc(g->p, sizeof(*cfg->pgbouncer));
	if (cfg->pgbouncer == NULL)
		return;
	for (size_t i = 0; i < N_PGB_KEYS; i++) {
		cfg->pgbouncer->value[i] = g->value[i];
		g->value[i] = NULL;
	}
}

bool config_pgbouncer_same(const struct config_pgbouncer *a, const struct config_pgbouncer *b, const char *prefix)
{
	size_t n = strlen(prefix);
	for (size_t i = 0; i < N_PGB_KEYS; i++) {
		if (strncmp(pgb_keys[i].name, prefix, n) != 0)
			continue;
		const char *x = a && a->value[i] ? a->value[i] : pgb_keys[i].def;
		const char *y = b && b->value[i] ? b->value[i] : pgb_keys[i].def;
		if (strcmp(x ? x : "", y ? y : "") != 0)
			return false;
	}
	return true;
}

void config_pgbouncer_free(struct config_pgbouncer *pg)
{
	if (pg == NULL)
		return;
	for (size_t i = 0; i < N_PGB_KEYS; i++)
		free(pg->value[i]);
	free(pg);
}

/* ------------------------------------------------------------------ */
/* SHOW CONFIG and SET under PgBouncer's names                          */

/* ms as PgBouncer writes seconds: "120", "0.5", "1.25". */
static void format_seconds(long long ms, char *buf, size_t len)
{
	snprintf(buf, len, "%lld", ms / 1000);
	if (ms % 1000 != 0) {
		char frac[8];
		snprintf(frac, sizeof(frac), "%03lld", ms % 1000);
		for (int n = 2; n > 0 && frac[n] == '0'; n--)
			frac[n] = '\0';
		snprintf(buf + strlen(buf), len - strlen(buf), ".%s", frac);
	}
}

bool pgb_show_row(const struct config *cfg, size_t i, struct config_show_row *row)
{
	size_t k_i = 0;
	for (size_t j = 0; j < N_PGB_KEYS; j++) {
		if (pgb_keys[j].hidden)
			continue;
		if (k_i++ != i)
			continue;
		const struct pgb_key *k = &pgb_keys[j];
		const char *raw = cfg->pgbouncer ? cfg->pgbouncer->value[j] : NULL;
		row->key = k->name;
		row->default_value = k->def;
		row->changeable = k->reload;
		char gv[sizeof(row->value)] = "";
		bool from_pgcat = k->pgcat != NULL && config_general_value(cfg, k->pgcat, gv, sizeof(gv));
		if (strcmp(k->name, "conffile") == 0) {
			snprintf(row->value, sizeof(row->value), "%s", cfg->path ? cfg->path : "");
		} else if (from_pgcat && k->map == M_SECS) {
			long long ms = strtoll(gv, NULL, 10);
			if ((k->zero == Z_NEVER && ms == INT_MAX) || (k->zero == Z_ONCE && ms == 1))
				ms = 0;
			format_seconds(ms, row->value, sizeof(row->value));
		} else if (from_pgcat && k->map == M_BOOL) {
			snprintf(row->value, sizeof(row->value), "%d", strcmp(gv, "true") == 0);
		} else if (from_pgcat) {
			snprintf(row->value, sizeof(row->value), "%s", gv);
			row->value_null = gv[0] == '\0' && k->def == NULL;
		} else if (raw != NULL || k->def != NULL) {
			snprintf(row->value, sizeof(row->value), "%s", raw ? raw : k->def);
		} else {
			row->value_null = true;
		}
		return true;
	}
	return false;
}

int pgb_translate_set(const struct config *cfg, const char *key, const char *value, struct pgb_set *out,
		      char *err, size_t errlen)
{
	const struct pgb_key *k = NULL;
	for (size_t i = 0; i < N_PGB_KEYS && k == NULL; i++)
		if (ci_equal(pgb_keys[i].name, key) && !pgb_keys[i].hidden)
			k = &pgb_keys[i];
	if (k == NULL)
		return -1;
	if (!k->reload) {
		snprintf(err, errlen, "%s cannot be changed at run time; edit the file and restart", k->name);
		return 0;
	}
	out->n = 0;
	struct config_problems problems = { 0 };
	/* The file's checks, on a parser that changes nothing (set_mode). */
	struct parser p = { .cfg = (struct config *)cfg, .problems = &problems, .file = "SET",
			    .general_section = "pgbouncer" };
	struct pgb g = { .p = &p, .set_mode = true, .set = out };
	apply_key(&g, k, value);
	int r = 1;
	if (p.oom) {
		snprintf(err, errlen, "out of memory");
		r = 0;
	} else if (problems.n > 0) {
		/* A value pgcat would not honour is refused, warned-about ones too:
		 * SET has no log line to carry the warning. "SET: key: why" -> "key: why" */
		const char *msg = problems.items[0].message;
		if (strncmp(msg, "SET: ", 5) == 0)
			msg += 5;
		snprintf(err, errlen, "%s", msg);
		r = 0;
	}
	config_problems_free(&problems);
	return r;
}

bool pgb_note_set(struct config *cfg, const char *key, const char *value)
{
	if (cfg->pgbouncer == NULL)
		return true;
	for (size_t i = 0; i < N_PGB_KEYS; i++) {
		if (!ci_equal(pgb_keys[i].name, key))
			continue;
		char *copy = strdup(value);
		if (copy == NULL)
			return false;
		free(cfg->pgbouncer->value[i]);
		cfg->pgbouncer->value[i] = copy;
		return true;
	}
	return true;
}

/* (Here, beside the values as written: allow and prefer are one mode to
 * pgcat and two to PgBouncer, whose operators expect a change of either to
 * close the servers.) */
static bool same_text(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") == 0;
}

bool config_server_tls_same(const struct config *a, const struct config *b)
{
	const struct config_general *x = &a->general, *y = &b->general;
	return x->server_tls_sslmode == y->server_tls_sslmode && x->server_tls_negotiation == y->server_tls_negotiation &&
	       same_text(x->server_tls_ca_file, y->server_tls_ca_file) &&
	       same_text(x->server_tls_cert_file, y->server_tls_cert_file) &&
	       same_text(x->server_tls_key_file, y->server_tls_key_file) &&
	       same_text(x->server_tls_protocols, y->server_tls_protocols) &&
	       same_text(x->server_tls_ciphers, y->server_tls_ciphers) &&
	       same_text(x->server_tls13_ciphers, y->server_tls13_ciphers) &&
	       config_pgbouncer_same(a->pgbouncer, b->pgbouncer, "server_tls");
}
