/* SPDX-License-Identifier: MIT */
/*
 * config_internal: what the files of the config room share (src/config.c,
 * config_value.c, config_check.c, config_load.c, config_runtime.c): the
 * limits, the types of the key tables and the list of [general] keys, the
 * parser's state, and the functions one file offers the files above it.
 * The room is layered, each file calling only those below it: config.c at
 * the bottom; config_value.c and config_check.c on it; config_load.c and
 * config_runtime.c on top. Not an interface: no other room includes it
 * (they use include/config.h).
 */
#ifndef PGCAT_CONFIG_INTERNAL_H
#define PGCAT_CONFIG_INTERNAL_H

#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "qstats.h"   /* (QSTATS_SLOTS: query_stats_max's bound) */

#define CONFIG_MAX_NAME 63          /* PostgreSQL's NAMEDATALEN - 1 */
#define CONFIG_MAX_SHARD 65535
#define CONFIG_MAX_PEER_ID 16383
#define CONFIG_MAX_SOCKET_DIR 92    /* + "/.s.PGSQL.65535" fits sun_path */
#define CONFIG_QUOTE_MAX 60         /* longest value echoed in a message */

/* ------------------------------------------------------------------ */
/* Key tables (the tables themselves are config.c's)                  */

/* A second spelling read as the value it names (written back under the
 * main name). */
struct enum_alias {
	const char *name;
	int value;
};

struct enum_names {
	const char *const *names;   /* indexed by enum value; NULL = not accepted */
	size_t n;
	const struct enum_alias *aliases;   /* NULL: none */
	size_t n_aliases;
};
#define ENUM_NAMES(a) { (a), sizeof(a) / sizeof((a)[0]), NULL, 0 }
#define ENUM_NAMES_ALIASED(a, al) { (a), sizeof(a) / sizeof((a)[0]), (al), sizeof(al) / sizeof((al)[0]) }

enum value_kind {
	VALUE_INT,          /* int field, min..max */
	VALUE_INT64,        /* int64_t field, min..max */
	VALUE_DURATION,     /* int field, min..max in ms (or s: KEY_SECONDS); PostgreSQL's units accepted */
	VALUE_BYTES,        /* int64_t field, min..max in bytes; PostgreSQL's memory units accepted */
	VALUE_BOOL,
	VALUE_STRING,       /* char * field */
	VALUE_ENUM,         /* int-sized enum field */
	VALUE_SHARD,        /* shard number or "all" */
	VALUE_ADDR_LIST,    /* char ** at off, size_t count at off_n */
	VALUE_TABLE_LIST,   /* same, [schema.]table.column entries */
	VALUE_NAME_LIST,    /* same, [schema.]function names, '*' at the end for a prefix */
	VALUE_SERVER_LIST   /* struct config_server * at off, count at off_n */
};

enum {
	KEY_EMPTY_INHERITS = 1 << 0,  /* "" stores CONFIG_INHERIT */
	KEY_EMPTY_IS_NULL = 1 << 1,   /* "" stores NULL */
	KEY_NOT_EMPTY = 1 << 2,
	KEY_SECRET = 1 << 3,          /* never echo the value */
	KEY_SECONDS = 1 << 4,         /* VALUE_DURATION: a bare number is seconds, not ms */
	KEY_PGB_SECONDS = 1 << 5      /* VALUE_DURATION: PgBouncer's same-named setting is in
				       * seconds; a bare value under 1,000 draws a warning */
};

typedef bool (*value_check)(const char *value, char *why, size_t whylen);

struct key_spec {
	const char *name;
	enum value_kind kind;
	int64_t min, max;
	const struct enum_names *names;
	size_t off, off_n;
	unsigned flags;
	const char *def;        /* default as written in the ini; NULL: none */
	value_check check;      /* extra check of a string value, or NULL */
};

/*
 * [general], in SPEC §2 order. One list feeds both the public table of
 * config_general_keys() and the parser's table, so they cannot drift.
 *   X(name, public type, default, reloadable, kind, min, max, enum, flags, check, count offset)
 */
#define GENERAL_KEYS(X) \
	X(listen_addr, LIST, "0.0.0.0", false, VALUE_ADDR_LIST, 0, 0, NULL, 0, NULL, \
	  offsetof(struct config_general, n_listen_addr)) \
	X(listen_port, INT, "6432", false, VALUE_INT, 1, 65535, NULL, 0, NULL, 0) \
	X(unix_socket_dir, STRING, "/tmp", false, VALUE_STRING, 0, 0, NULL, 0, check_socket_dir, 0) \
	X(workers, INT, "1", false, VALUE_INT, 0, 1024, NULL, 0, NULL, 0) \
	X(io_engine, ENUM, "auto", false, VALUE_ENUM, 0, 0, &io_engine_enum, 0, NULL, 0) \
	X(max_client_conn, INT, "10000", true, VALUE_INT, 1, 1000000, NULL, 0, NULL, 0) \
	X(pool_mode, ENUM, "transaction", true, VALUE_ENUM, 0, 0, &pool_mode_enum, 0, NULL, 0) \
	X(default_pool_size, INT, "10", true, VALUE_INT, 1, 10000, NULL, 0, NULL, 0) \
	X(min_pool_size, INT, "0", true, VALUE_INT, 0, 10000, NULL, 0, NULL, 0) \
	X(connect_timeout, INT, "5000", true, VALUE_DURATION, 1, INT_MAX, NULL, 0, NULL, 0) \
	X(server_login_retry, INT, "500", true, VALUE_DURATION, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(unreachable_server, ENUM, "fail", true, VALUE_ENUM, 0, 0, &unreachable_server_enum, 0, NULL, 0) \
	X(autodb_idle_timeout, INT, "3600000", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_PGB_SECONDS, NULL, 0) \
	X(client_login_timeout, INT, "", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_EMPTY_INHERITS, NULL, 0) \
	X(query_wait_timeout, INT, "120000", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_PGB_SECONDS, NULL, 0) \
	X(query_wait_notify, INT, "0", true, VALUE_DURATION, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(idle_timeout, INT, "600000", true, VALUE_DURATION, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(server_lifetime, INT, "3600000", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_PGB_SECONDS, NULL, 0) \
	X(idle_transaction_timeout, INT, "0", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_PGB_SECONDS, NULL, 0) \
	X(max_db_connections, INT, "0", true, VALUE_INT, 0, 1000000, NULL, 0, NULL, 0) \
	X(max_user_connections, INT, "0", true, VALUE_INT, 0, 1000000, NULL, 0, NULL, 0) \
	X(max_db_client_connections, INT, "0", true, VALUE_INT, 0, 1000000, NULL, 0, NULL, 0) \
	X(max_user_client_connections, INT, "0", true, VALUE_INT, 0, 1000000, NULL, 0, NULL, 0) \
	X(reserve_pool_size, INT, "0", true, VALUE_INT, 0, 10000, NULL, 0, NULL, 0) \
	X(reserve_pool_timeout, INT, "5000", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_PGB_SECONDS, NULL, 0) \
	X(transaction_timeout, INT, "0", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_PGB_SECONDS, NULL, 0) \
	X(query_timeout, INT, "0", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_PGB_SECONDS, NULL, 0) \
	X(timeout_action, ENUM, "cancel", true, VALUE_ENUM, 0, 0, &timeout_action_enum, 0, NULL, 0) \
	X(client_idle_timeout, INT, "0", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_PGB_SECONDS, NULL, 0) \
	X(healthcheck_timeout, INT, "1000", true, VALUE_DURATION, 1, INT_MAX, NULL, 0, NULL, 0) \
	X(healthcheck_delay, INT, "30000", true, VALUE_DURATION, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(healthcheck_query, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(two_phase_commit, BOOL, "false", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(state_dir, STRING, "/var/lib/pgcat", false, VALUE_STRING, 0, 0, NULL, KEY_NOT_EMPTY, NULL, 0) \
	X(two_phase_recovery_interval, INT, "10000", true, VALUE_DURATION, 100, INT_MAX, NULL, 0, NULL, 0) \
	X(replica_lag_check_interval, INT, "1000", true, VALUE_DURATION, 10, INT_MAX, NULL, 0, NULL, 0) \
	X(ban_time, INT, "60", true, VALUE_DURATION, 0, 86400, NULL, KEY_SECONDS, NULL, 0) \
	X(shutdown_timeout, INT, "60000", true, VALUE_DURATION, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(server_reset_query, STRING, "DISCARD ALL", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(server_round_robin, BOOL, "false", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(server_fast_close, BOOL, "false", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(tcp_keepalive, BOOL, "true", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(tcp_keepidle, INT, "0", true, VALUE_DURATION, 0, 32767, NULL, KEY_SECONDS, NULL, 0) \
	X(tcp_keepintvl, INT, "0", true, VALUE_DURATION, 0, 32767, NULL, KEY_SECONDS, NULL, 0) \
	X(tcp_keepcnt, INT, "0", true, VALUE_INT, 0, 127, NULL, 0, NULL, 0) \
	X(tcp_user_timeout, INT, "0", true, VALUE_DURATION, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(max_packet_size, INT64, "2147483647", true, VALUE_INT64, 5, 2147483647, NULL, 0, NULL, 0) \
	X(query_parser_max_length, INT, "65536", true, VALUE_INT, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(cross_shard_max_memory, INT64, "67108864", true, VALUE_BYTES, 65536, INT64_C(1) << 40, NULL, 0, NULL, 0) \
	X(autoreload, INT, "0", true, VALUE_DURATION, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(admin_username, STRING, "pgcat", true, VALUE_STRING, 0, 0, NULL, KEY_NOT_EMPTY, NULL, 0) \
	X(admin_password, STRING, "", true, VALUE_STRING, 0, 0, NULL, KEY_SECRET, NULL, 0) \
	X(admin_users, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(stats_users, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(auth_type, ENUM, "scram-sha-256", true, VALUE_ENUM, 0, 0, &auth_type_enum, 0, NULL, 0) \
	X(auth_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(auth_query, STRING, "SELECT usename, passwd FROM pg_shadow WHERE usename = $1", true, VALUE_STRING, 0, 0, \
	  NULL, KEY_NOT_EMPTY, NULL, 0) \
	X(auth_user, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(auth_dbname, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(auth_query_cache_ttl, INT, "60000", true, VALUE_DURATION, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(auth_hba_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(auth_ident_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(auth_ldap_options, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(auth_pam_service, STRING, "pgcat", true, VALUE_STRING, 0, 0, NULL, KEY_NOT_EMPTY, NULL, 0) \
	X(ignore_startup_parameters, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(log_level, ENUM, "info", true, VALUE_ENUM, 0, 0, &log_level_enum, 0, NULL, 0) \
	X(log_format, ENUM, "text", true, VALUE_ENUM, 0, 0, &log_format_enum, 0, NULL, 0) \
	X(log_min_duration, INT, "0", true, VALUE_DURATION, 0, INT_MAX, NULL, 0, NULL, 0) \
	X(query_stats, BOOL, "false", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(query_stats_max, INT, "500", true, VALUE_INT, 1, QSTATS_SLOTS, NULL, 0, NULL, 0) \
	X(log_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(syslog, BOOL, "false", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(log_connections, BOOL, "true", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(log_disconnections, BOOL, "true", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(pidfile, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(prepared_statements, BOOL, "true", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(prepare_unnamed, BOOL, "true", true, VALUE_BOOL, 0, 0, NULL, 0, NULL, 0) \
	X(prepared_statements_cache_size, INT, "500", true, VALUE_INT, 1, 1000000, NULL, 0, NULL, 0) \
	X(prepared_statements_max_length, INT, "1048576", true, VALUE_INT, 1024, INT_MAX, NULL, 0, NULL, 0) \
	X(query_cache_size, INT, "10000", true, VALUE_INT, 0, 10000000, NULL, 0, NULL, 0) \
	X(prometheus_port, INT, "0", true, VALUE_INT, 0, 65535, NULL, 0, NULL, 0) \
	X(peer_id, INT, "0", true, VALUE_INT, 0, CONFIG_MAX_PEER_ID, NULL, 0, NULL, 0) \
	X(stats_period, INT, "60", true, VALUE_DURATION, 1, 86400, NULL, KEY_SECONDS, NULL, 0) \
	X(dns_max_ttl, INT, "15000", true, VALUE_DURATION, 0, INT_MAX, NULL, KEY_PGB_SECONDS, NULL, 0) \
	X(client_tls_sslmode, ENUM, "disable", true, VALUE_ENUM, 0, 0, &client_tls_enum, 0, NULL, 0) \
	X(client_tls_cert_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(client_tls_key_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(client_tls_ca_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(client_tls_protocols, STRING, "secure", true, VALUE_STRING, 0, 0, NULL, 0, check_tls_protocols, 0) \
	X(client_tls_ciphers, STRING, "default", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(client_tls13_ciphers, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(server_tls_sslmode, ENUM, "prefer", true, VALUE_ENUM, 0, 0, &server_tls_enum, 0, NULL, 0) \
	X(server_tls_ca_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(server_tls_cert_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(server_tls_key_file, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(server_tls_protocols, STRING, "secure", true, VALUE_STRING, 0, 0, NULL, 0, check_tls_protocols, 0) \
	X(server_tls_ciphers, STRING, "default", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(server_tls13_ciphers, STRING, "", true, VALUE_STRING, 0, 0, NULL, 0, NULL, 0) \
	X(server_tls_negotiation, ENUM, "postgres", true, VALUE_ENUM, 0, 0, &tls_negotiation_enum, 0, NULL, 0)

/* How many keys [general] has (the parser keeps a line number per key). */
#define GENERAL_COUNT(name, type, def, reload, kind, mn, mx, en, fl, ck, offn) + 1
#define N_GENERAL_KEYS ((size_t)(0 GENERAL_KEYS(GENERAL_COUNT)))

enum pool_key {
	POOL_KEY_POOL_MODE, POOL_KEY_DEFAULT_ROLE, POOL_KEY_QUERY_PARSER_ENABLED,
	POOL_KEY_PRIMARY_READS_ENABLED, POOL_KEY_LOAD_BALANCING_MODE, POOL_KEY_SHARDING_FUNCTION,
	POOL_KEY_SHARDED_TABLES, POOL_KEY_DEFAULT_SHARD, POOL_KEY_MAX_REPLICA_LAG,
	POOL_KEY_STICKY_PRIMARY_AFTER_WRITE, POOL_KEY_READ_YOUR_WRITES, POOL_KEY_WRITING_FUNCTIONS,
	POOL_KEY_MAX_DB_CONNECTIONS, POOL_KEY_CONNECT_QUERY, POOL_KEY_POOL_SIZE, POOL_KEY_MIN_POOL_SIZE,
	POOL_KEY_RESERVE_POOL_SIZE, POOL_KEY_SERVER_LIFETIME, POOL_KEY_SERVER_USERNAME, POOL_KEY_SERVER_PASSWORD,
	POOL_KEY_AUTH_USER, POOL_KEY_AUTH_QUERY, POOL_KEY_AUTH_DBNAME, POOL_KEY_CLIENT_ENCODING, POOL_KEY_DATESTYLE,
	POOL_KEY_TIMEZONE, POOL_KEY_APPLICATION_NAME, POOL_KEY_MAX_DB_CLIENT_CONNECTIONS, POOL_KEY_LOG_MIN_DURATION, POOL_KEY_QUERY_STATS, POOL_KEY_QUERY_STATS_MAX,
	POOL_KEY_COUNT
};

enum shard_key { SHARD_KEY_DATABASE, SHARD_KEY_SERVERS, SHARD_KEY_COUNT };

enum user_key {
	USER_KEY_PASSWORD, USER_KEY_SERVER_USERNAME, USER_KEY_SERVER_PASSWORD, USER_KEY_POOL_SIZE,
	USER_KEY_MIN_POOL_SIZE, USER_KEY_STATEMENT_TIMEOUT, USER_KEY_POOL_MODE, USER_KEY_TRANSACTION_TIMEOUT,
	USER_KEY_RESERVE_POOL_SIZE, USER_KEY_MAX_USER_CONNECTIONS, USER_KEY_COUNT
};

/* [users.NAME] */
enum uset_key {
	USET_KEY_POOL_MODE, USET_KEY_POOL_SIZE, USET_KEY_RESERVE_POOL_SIZE, USET_KEY_MAX_USER_CONNECTIONS,
	USET_KEY_QUERY_TIMEOUT, USET_KEY_IDLE_TRANSACTION_TIMEOUT, USET_KEY_CLIENT_IDLE_TIMEOUT,
	USET_KEY_TRANSACTION_TIMEOUT, USET_KEY_MAX_USER_CLIENT_CONNECTIONS, USET_KEY_COUNT
};

/* ------------------------------------------------------------------ */
/* Parser state (lives on the stack of one load call)                   */

enum section_kind { SECTION_NONE, SECTION_GENERAL, SECTION_POOL, SECTION_SHARD, SECTION_NEXT, SECTION_NEXT_SHARD,
		    SECTION_USER, SECTION_USER_SETTINGS, SECTION_PEERS, SECTION_IGNORED };

enum line_kind {
	LINE_NONE,          /* blank, comment, section header, or already reported */
	LINE_KEY,           /* inih should call the handler with a new key */
	LINE_CONTINUATION   /* indented: inih continues the previous key */
};

struct shard_meta { int line; int key_line[SHARD_KEY_COUNT]; };
struct user_meta { int line; int key_line[USER_KEY_COUNT]; };
struct pool_meta {
	int line;
	const char *file;           /* of line, when not the parser's file (an %include); NULL: that */
	int key_line[POOL_KEY_COUNT];
	struct shard_meta *shards;  /* parallel to config_pool.shards */
	struct shard_meta *next_shards;   /* parallel to config_pool.next_shards */
	int next_line;              /* its [pools.NAME.next] section's, 0: none */
	struct user_meta *users;    /* parallel to config_pool.users */
};

struct uset_meta { int line; int key_line[USET_KEY_COUNT]; };

struct parser {
	struct config *cfg;
	struct config_problems *problems;
	const char *file;           /* name used in messages */
	bool one_set;               /* a console SET: one key changes at a time */
	const char *pos;            /* rest of the text */
	int lineno;
	bool oom;
	int first_syntax_line;

	enum line_kind line_kind;   /* of the line inih is working on */
	bool handled;               /* inih called the handler for it */
	bool have_prev;             /* inih would treat an indented line as a continuation */
	char snippet[48];           /* start of the line, for syntax errors */

	enum section_kind section;
	char *section_name;         /* full, as written between [ and ] */
	size_t pool, shard, user;   /* indexes of the current section's object */
	size_t uset;                /* index of the current [users.NAME] */
	/* The name of [general] in messages: "general", or "pgbouncer" when
	 * the file is PgBouncer's (its keys are checked under that name). */
	const char *general_section;

	const struct key_spec *last_spec;  /* key an indented line would continue */
	char last_key[64];                 /* its name as written; "" = ignore continuations */

	int general_line[N_GENERAL_KEYS];
	/* The file of each general_line when it is not `file` (a pgbouncer.ini's
	 * %include); NULL: file. The names are in files, freed with the parser. */
	const char *general_file[N_GENERAL_KEYS];
	char **files;
	size_t n_files;
	struct pool_meta *pools;    /* parallel to cfg->pools */
	int *peer_line;             /* parallel to cfg->peers */
	int peers_line;
	struct uset_meta *usets;    /* parallel to cfg->user_settings */
};

/* ------------------------------------------------------------------ */
/* Small helpers                                                        */

static inline void *field(void *base, size_t off)
{
	return (char *)base + off;
}

static inline const void *cfield(const void *base, size_t off)
{
	return (const char *)base + off;
}

static inline int ascii_lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

static inline bool ci_equal(const char *a, const char *b)
{
	while (*a != '\0' && ascii_lower((unsigned char)*a) == ascii_lower((unsigned char)*b)) {
		a++;
		b++;
	}
	return *a == '\0' && *b == '\0';
}

static inline bool is_space(char c)
{
	return isspace((unsigned char)c) != 0;
}

/* Trim [*s, *s + *n) of white space in place. */
static inline void trim(const char **s, size_t *n)
{
	while (*n > 0 && is_space(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n > 0 && is_space((*s)[*n - 1]))
		(*n)--;
}

/* ---- config.c: allocations (failure sets p->oom), problems, the key tables ---- */

/* Free the databases made from the `*` template (config_free). */
void config_autodb_free_all(struct config *cfg);
/* A whole small file (a path as given), NUL-terminated, in a malloc'ed
 * buffer of *len bytes; NULL with *err (malloc'ed, or NULL when out of
 * memory) saying why. */
char *config_read_file(const char *path, size_t max, size_t *len, char **err);
/* file relative to the directory of the file base names (NULL: as it is). */
char *config_relative_path(const char *base, const char *file);

void *p_alloc(struct parser *p, size_t n);
char *p_strndup(struct parser *p, const char *s, size_t n);
char *p_strdup(struct parser *p, const char *s);
bool p_grow(struct parser *p, void *arr, size_t n, size_t sz);
/* A malloc'ed printf; NULL when out of memory. */
__attribute__((format(printf, 1, 2)))
char *format(const char *fmt, ...);
/* Append message (owned; NULL = out of memory) to pr; *oom set on failure. */
void add_problem(struct config_problems *pr, enum config_problem_kind kind, int line, char *message,
		 bool *oom);
__attribute__((format(printf, 6, 7)))
void problem(struct parser *p, enum config_problem_kind kind, int line, const char *section,
	     const char *key, const char *fmt, ...);
/* Message helpers tied to the current line and section. */
#define line_error(p, key, ...) problem((p), CONFIG_PROBLEM_ERROR, (p)->lineno, (p)->section_name, (key), __VA_ARGS__)

/* The extra checks the key tables name (unix_socket_dir; a user's SCRAM secret). */
bool check_socket_dir(const char *value, char *why, size_t whylen);
bool check_tls_protocols(const char *value, char *why, size_t whylen);
bool check_password(const char *value, char *why, size_t whylen);

extern const struct enum_names server_role_enum, client_tls_enum, server_tls_enum;
extern const struct key_spec general_specs[];
extern const struct key_spec pool_specs[POOL_KEY_COUNT];
extern const struct key_spec shard_specs[SHARD_KEY_COUNT];
extern const struct key_spec user_specs[USER_KEY_COUNT];
extern const struct key_spec uset_specs[USET_KEY_COUNT];
extern const struct enum_names pool_mode_enum, auth_type_enum, log_level_enum, log_format_enum;
extern const struct config_key_info general_info[];
const char *enum_name(const struct enum_names *e, int v);
const struct key_spec *find_spec(const struct key_spec *specs, size_t n, const char *name, size_t *index);
/* Append s to buf (buflen bytes) at *used; false once it no longer fits
 * (buf then holds what fitted). config_value.c. */
bool config_buf_put(char *buf, size_t buflen, size_t *used, const char *s);
/* digits [. digits] at the start of s: how many digits; *end after them
 * (a duration's, a size's, PgBouncer's seconds). config_value.c. */
size_t config_scan_decimal(const char *s, const char **end);

/* ---- config_value.c: one value, read, checked and put into its field ---- */

void quote_value(const char *value, unsigned flags, char *buf, size_t buflen);
bool parse_int64(const char *s, int64_t *out);
bool parse_endpoint(const char *s, size_t n, bool want_role, const char **host, size_t *host_len,
		    int *port, int *role, char *why, size_t whylen);
bool is_list(enum value_kind kind);
/* A server's host as written without a port: a name, an IPv4 or IPv6
 * address, or a Unix socket directory (starting with '/'). */
bool check_server_host(const char *s, size_t n, char *why, size_t whylen);
/* A [peers] host: a server host, or '@' and a name in the abstract namespace. */
bool check_peer_host(const char *s, size_t n, char *why, size_t whylen);
void set_value(struct parser *p, const struct key_spec *k, void *base, const char *value, bool append);
void apply_defaults(struct parser *p, const struct key_spec *specs, size_t n, void *base);
void free_field(const struct key_spec *k, void *base);
void detach_field(const struct key_spec *k, void *base);
void free_fields(const struct key_spec *specs, size_t n, void *base);

/* ---- config_pgbouncer.c: a pgbouncer.ini into the same snapshot ---- */

/* Whether text is PgBouncer's format (a [pgbouncer] or [databases]
 * section, or a %include line). */
bool pgb_detect(const char *text);
/* Read it into p->cfg (whose [general] holds pgcat's defaults), with
 * PgBouncer's defaults, units and rules; the checks of config_check.c
 * and auth_file follow as for pgcat.ini. */
void pgb_load(struct parser *p, const char *text);

/* ---- config_pgbouncer_keys.c: the [pgbouncer] settings ---- */

#define PGB_KEY_SLOTS 128   /* at least the number of PgBouncer's settings */

enum pgb_section { PS_NONE, PS_PGBOUNCER, PS_DATABASES, PS_USERS, PS_PEERS, PS_UNKNOWN };

/* Reading a pgbouncer.ini (or one SET of its settings). */
struct pgb {
	struct parser *p;
	bool set_mode;             /* SET: pgcat's keys are collected in set, nothing is changed */
	struct pgb_set *set;
	bool defaults;             /* applying PgBouncer's defaults (no line) */
	char *value[PGB_KEY_SLOTS];        /* the file's values of the settings */
	int key_line[PGB_KEY_SLOTS];
	const char *key_file[PGB_KEY_SLOTS];
	enum pgb_section section;
	bool saw_main;             /* a [pgbouncer] section was read */
	bool *socket_host;         /* parallel to cfg->pools: no host=, the Unix socket directory */
	int autodb_line;           /* the `*` entry of [databases]; 0: none */
	const char *autodb_file;
	int depth;                 /* of %include */
};

/* PgBouncer's notations: an integer as C writes it (0777, 0x1F); seconds
 * (digits, an optional fraction); seconds as ms, never 0 for a value that
 * is not 0 (false: more than pgcat's ms hold). */
bool pgb_int(const char *s, long long *out);
bool pgb_seconds(const char *s, double *out);
bool pgb_seconds_to_ms(double v, long long *ms);
/* PgBouncer's defaults onto cfg->general (before the file). */
void pgb_apply_defaults(struct pgb *g);
/* One line `name = value` of [pgbouncer]. */
void pgb_setting(struct pgb *g, const char *name, const char *value);
/* Once every file is read: what depends on several settings (auth_type
 * hba and cert), and the values kept for SHOW CONFIG. */
void pgb_finish_settings(struct pgb *g);
void config_pgbouncer_free(struct config_pgbouncer *pg);
/* The settings of PgBouncer's whose names start with prefix have the same
 * values (as written, or the default) in a and b (NULL: none). */
bool config_pgbouncer_same(const struct config_pgbouncer *a, const struct config_pgbouncer *b, const char *prefix);
bool pgb_show_row(const struct config *cfg, size_t i, struct config_show_row *row);
/* SET of one of PgBouncer's settings (value unquoted): the pgcat keys and
 * values it comes to. -1: not one of PgBouncer's settings; 0: refused
 * (why in err); 1: out holds them (maybe none). */
#define PGB_SET_MAX_PAIRS 2
struct pgb_set {
	struct { const char *key; char value[1024]; } pairs[PGB_SET_MAX_PAIRS];
	size_t n;
};
int pgb_translate_set(const struct config *cfg, const char *key, const char *value, struct pgb_set *out,
		      char *err, size_t errlen);
/* Remember value as the setting's (for SHOW CONFIG); false: out of memory. */
bool pgb_note_set(struct config *cfg, const char *key, const char *value);

/* ---- config_check.c: checks across keys, once the whole file is read ---- */

void check_general(struct parser *p);
void check_all(struct parser *p);
/* auth_user names a user of some users section or of auth_file (run once
 * auth_file is read, and by SET). */
void check_auth_user(struct parser *p);

#endif
