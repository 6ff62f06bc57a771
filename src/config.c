/* SPDX-License-Identifier: MIT */
/*
 * config: the bottom of the config room, what its other files share: the
 * spellings of the enums, the key tables of every section (names, types,
 * ranges, defaults, and the extra checks they name) and their lookup, the
 * parser's allocations and problem messages, the lists of problems, and
 * the lookups and names of include/config.h on a loaded snapshot. It calls
 * no other file of the room.
 *
 * Above it: one value read, checked and put into its field is
 * config_value.c's; the checks across keys once the whole file is read are
 * config_check.c's; reading the file, its lines and sections (the driver
 * that calls those two), and config_free are config_load.c's; SHOW
 * CONFIG's values and SET at run time are config_runtime.c's. What the
 * files of the room share is include/config_internal.h.
 */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h and comes
 * first in the include path. */
#include "config.h"
#include "config_internal.h"

#include "auth_file.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Enum fields are written through int-sized copies. */
_Static_assert(sizeof(enum pool_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(enum auth_type) == sizeof(int), "enum size");
_Static_assert(sizeof(enum log_level) == sizeof(int), "enum size");
_Static_assert(sizeof(enum log_format) == sizeof(int), "enum size");
_Static_assert(sizeof(enum server_role) == sizeof(int), "enum size");
_Static_assert(sizeof(enum default_role) == sizeof(int), "enum size");
_Static_assert(sizeof(enum lb_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(enum read_your_writes) == sizeof(int), "enum size");
_Static_assert(sizeof(enum sharding_function) == sizeof(int), "enum size");
_Static_assert(sizeof(enum tls_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(enum tls_negotiation) == sizeof(int), "enum size");
_Static_assert(sizeof(enum io_engine) == sizeof(int), "enum size");

/* ------------------------------------------------------------------ */
/* Enum spellings                                                       */

static const char *const pool_mode_names[] = {
	[POOL_MODE_SESSION] = "session", [POOL_MODE_TRANSACTION] = "transaction", [POOL_MODE_STATEMENT] = "statement",
};
static const char *const auth_type_names[] = {
	[AUTH_TYPE_SCRAM] = "scram-sha-256", [AUTH_TYPE_MD5] = "md5", [AUTH_TYPE_TRUST] = "trust",
	[AUTH_TYPE_PASSWORD] = "password", [AUTH_TYPE_LDAP] = "ldap", [AUTH_TYPE_PAM] = "pam",
};
/* PgBouncer's name for it, for those who come from a pgbouncer.ini. */
static const struct enum_alias auth_type_aliases[] = { { "plain", AUTH_TYPE_PASSWORD } };
static const char *const log_level_names[] = {
	[LOG_LEVEL_ERROR] = "error", [LOG_LEVEL_WARNING] = "warning", [LOG_LEVEL_INFO] = "info",
	[LOG_LEVEL_DEBUG] = "debug", [LOG_LEVEL_TRACE] = "trace",
};
static const char *const log_format_names[] = { [LOG_FORMAT_TEXT] = "text", [LOG_FORMAT_JSON] = "json" };
static const char *const server_role_names[] = {
	[SERVER_ROLE_PRIMARY] = "primary", [SERVER_ROLE_REPLICA] = "replica", [SERVER_ROLE_AUTO] = "auto",
};
static const char *const default_role_names[] = {
	[DEFAULT_ROLE_ANY] = "any", [DEFAULT_ROLE_PRIMARY] = "primary", [DEFAULT_ROLE_REPLICA] = "replica",
};
static const char *const lb_mode_names[] = {
	[LB_MODE_RANDOM] = "random", [LB_MODE_LOC] = "loc", [LB_MODE_FIRST] = "first",
};
static const char *const read_your_writes_names[] = {
	[READ_YOUR_WRITES_OFF] = "off", [READ_YOUR_WRITES_LSN] = "lsn",
};
static const char *const sharding_function_names[] = {
	[SHARDING_PG_BIGINT_HASH] = "pg_bigint_hash", [SHARDING_PG_TEXT_HASH] = "pg_text_hash",
	[SHARDING_PG_UUID_HASH] = "pg_uuid_hash", [SHARDING_SHA1] = "sha1", [SHARDING_MURMUR3] = "murmur3",
};
static const char *const client_tls_names[] = {
	[TLS_MODE_DISABLE] = "disable", [TLS_MODE_ALLOW] = "allow", [TLS_MODE_PREFER] = "prefer",
	[TLS_MODE_REQUIRE] = "require", [TLS_MODE_VERIFY_CA] = "verify-ca", [TLS_MODE_VERIFY_FULL] = "verify-full",
};
/* SPEC §2: "allow" is a client-side mode only. */
static const char *const server_tls_names[] = {
	[TLS_MODE_DISABLE] = "disable", [TLS_MODE_ALLOW] = NULL, [TLS_MODE_PREFER] = "prefer",
	[TLS_MODE_REQUIRE] = "require", [TLS_MODE_VERIFY_CA] = "verify-ca", [TLS_MODE_VERIFY_FULL] = "verify-full",
};

static const char *const tls_negotiation_names[] = {
	[TLS_NEGOTIATION_POSTGRES] = "postgres", [TLS_NEGOTIATION_DIRECT] = "direct",
};

static const char *const io_engine_names[] = {
	[IO_ENGINE_AUTO] = "auto", [IO_ENGINE_EPOLL] = "epoll", [IO_ENGINE_IO_URING] = "io_uring",
};

static const char *const unreachable_server_names[] = {
	[UNREACHABLE_SERVER_FAIL] = "fail", [UNREACHABLE_SERVER_WAIT] = "wait",
};
static const char *const timeout_action_names[] = {
	[TIMEOUT_ACTION_CANCEL] = "cancel", [TIMEOUT_ACTION_DISCONNECT] = "disconnect",
};

const struct enum_names pool_mode_enum = ENUM_NAMES(pool_mode_names);
const struct enum_names auth_type_enum = ENUM_NAMES_ALIASED(auth_type_names, auth_type_aliases);
const struct enum_names log_level_enum = ENUM_NAMES(log_level_names);
const struct enum_names log_format_enum = ENUM_NAMES(log_format_names);
const struct enum_names server_role_enum = ENUM_NAMES(server_role_names);
static const struct enum_names default_role_enum = ENUM_NAMES(default_role_names);
static const struct enum_names lb_mode_enum = ENUM_NAMES(lb_mode_names);
static const struct enum_names read_your_writes_enum = ENUM_NAMES(read_your_writes_names);
/* A pool's switch that inherits [general]'s: a boolean, or "" */
static const char *const switch_names[] = { "off", "on" };
static const struct enum_alias switch_aliases[] = {
	{ "false", 0 }, { "no", 0 }, { "0", 0 }, { "true", 1 }, { "yes", 1 }, { "1", 1 },
};
static const struct enum_names switch_enum = ENUM_NAMES_ALIASED(switch_names, switch_aliases);
static const struct enum_names sharding_function_enum = ENUM_NAMES(sharding_function_names);
const struct enum_names client_tls_enum = ENUM_NAMES(client_tls_names);
const struct enum_names server_tls_enum = ENUM_NAMES(server_tls_names);
static const struct enum_names tls_negotiation_enum = ENUM_NAMES(tls_negotiation_names);
static const struct enum_names io_engine_enum = ENUM_NAMES(io_engine_names);
static const struct enum_names timeout_action_enum = ENUM_NAMES(timeout_action_names);
static const struct enum_names unreachable_server_enum = ENUM_NAMES(unreachable_server_names);

const char *enum_name(const struct enum_names *e, int v)
{
	if (v < 0 || (size_t)v >= e->n || e->names[v] == NULL)
		return "unknown";
	return e->names[v];
}

/* ------------------------------------------------------------------ */
/* Checks the key tables name                                           */

bool check_socket_dir(const char *value, char *why, size_t whylen)
{
	if (strlen(value) <= CONFIG_MAX_SOCKET_DIR)
		return true;
	snprintf(why, whylen, "must be at most %d characters, so that the socket path fits", CONFIG_MAX_SOCKET_DIR);
	return false;
}

static bool base64_run(const char **s, char stop)
{
	const char *start = *s;
	while (**s != '\0' && **s != stop &&
	       (isalnum((unsigned char)**s) || **s == '+' || **s == '/' || **s == '='))
		(*s)++;
	return *s > start && **s == stop;
}

/* A password that claims to be a SCRAM secret must look like one:
 * SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey> */
bool check_password(const char *value, char *why, size_t whylen)
{
	static const char prefix[] = "SCRAM-SHA-256$";
	if (strncmp(value, prefix, sizeof(prefix) - 1) != 0)
		return true;
	const char *s = value + sizeof(prefix) - 1;
	const char *digits = s;
	while (isdigit((unsigned char)*s))
		s++;
	bool ok = s > digits && *digits != '0' && *s == ':';
	if (ok) {
		s++;
		ok = base64_run(&s, '$');
	}
	if (ok) {
		s++;
		ok = base64_run(&s, ':');
	}
	if (ok) {
		s++;
		ok = base64_run(&s, '\0');
	}
	if (!ok)
		snprintf(why, whylen, "looks like a SCRAM secret but is not of the form "
			 "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>");
	return ok;
}

/* ------------------------------------------------------------------ */
/* Key tables                                                           */

#define GENERAL_INFO(name, type, def, reload, kind, mn, mx, en, fl, ck, offn) \
	{ #name, CONFIG_KEY_##type, def, reload },
const struct config_key_info general_info[] = { GENERAL_KEYS(GENERAL_INFO) };

#define GENERAL_SPEC(name, type, def, reload, kind, mn, mx, en, fl, ck, offn) \
	{ #name, kind, mn, mx, en, offsetof(struct config_general, name), offn, fl, def, ck },
const struct key_spec general_specs[] = { GENERAL_KEYS(GENERAL_SPEC) };

_Static_assert(sizeof(general_specs) / sizeof(general_specs[0]) == N_GENERAL_KEYS, "key tables");
_Static_assert(sizeof(general_info) / sizeof(general_info[0]) == N_GENERAL_KEYS, "key tables");

#define POOL_FIELD(f) offsetof(struct config_pool, f)
const struct key_spec pool_specs[POOL_KEY_COUNT] = {
	/* No default: inherited from [general] once the whole file is read. */
	[POOL_KEY_POOL_MODE] = { "pool_mode", VALUE_ENUM, 0, 0, &pool_mode_enum, POOL_FIELD(pool_mode), 0, 0, NULL, NULL },
	[POOL_KEY_DEFAULT_ROLE] = { "default_role", VALUE_ENUM, 0, 0, &default_role_enum,
		POOL_FIELD(default_role), 0, 0, "any", NULL },
	[POOL_KEY_QUERY_PARSER_ENABLED] = { "query_parser_enabled", VALUE_BOOL, 0, 0, NULL,
		POOL_FIELD(query_parser_enabled), 0, 0, "true", NULL },
	[POOL_KEY_PRIMARY_READS_ENABLED] = { "primary_reads_enabled", VALUE_BOOL, 0, 0, NULL,
		POOL_FIELD(primary_reads_enabled), 0, 0, "true", NULL },
	[POOL_KEY_LOAD_BALANCING_MODE] = { "load_balancing_mode", VALUE_ENUM, 0, 0, &lb_mode_enum,
		POOL_FIELD(load_balancing_mode), 0, 0, "random", NULL },
	[POOL_KEY_SHARDING_FUNCTION] = { "sharding_function", VALUE_ENUM, 0, 0, &sharding_function_enum,
		POOL_FIELD(sharding_function), 0, 0, "pg_bigint_hash", NULL },
	[POOL_KEY_SHARDED_TABLES] = { "sharded_tables", VALUE_TABLE_LIST, 0, 0, NULL,
		POOL_FIELD(sharded_tables), POOL_FIELD(n_sharded_tables), 0, "", NULL },
	[POOL_KEY_DEFAULT_SHARD] = { "default_shard", VALUE_SHARD, 0, CONFIG_MAX_SHARD, NULL,
		POOL_FIELD(default_shard), 0, 0, "0", NULL },
	[POOL_KEY_MAX_REPLICA_LAG] = { "max_replica_lag", VALUE_INT64, 0, INT64_MAX, NULL,
		POOL_FIELD(max_replica_lag), 0, 0, "0", NULL },
	[POOL_KEY_STICKY_PRIMARY_AFTER_WRITE] = { "sticky_primary_after_write", VALUE_DURATION, 0, INT_MAX, NULL,
		POOL_FIELD(sticky_primary_after_write), 0, 0, "0", NULL },
	[POOL_KEY_READ_YOUR_WRITES] = { "read_your_writes", VALUE_ENUM, 0, 0, &read_your_writes_enum,
		POOL_FIELD(read_your_writes), 0, 0, "off", NULL },
	[POOL_KEY_MAX_DB_CONNECTIONS] = { "max_db_connections", VALUE_INT, 0, 1000000, NULL,
		POOL_FIELD(max_db_connections), 0, KEY_EMPTY_INHERITS, "", NULL },
	[POOL_KEY_MAX_DB_CLIENT_CONNECTIONS] = { "max_db_client_connections", VALUE_INT, 0, 1000000, NULL,
		POOL_FIELD(max_db_client_connections), 0, KEY_EMPTY_INHERITS, "", NULL },
	[POOL_KEY_WRITING_FUNCTIONS] = { "writing_functions", VALUE_NAME_LIST, 0, 0, NULL,
		POOL_FIELD(writing_functions), POOL_FIELD(n_writing_functions), 0, "", NULL },
	[POOL_KEY_CONNECT_QUERY] = { "connect_query", VALUE_STRING, 0, 0, NULL, POOL_FIELD(connect_query), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
	[POOL_KEY_POOL_SIZE] = { "pool_size", VALUE_INT, 1, 10000, NULL, POOL_FIELD(pool_size), 0,
		KEY_EMPTY_INHERITS, "", NULL },
	[POOL_KEY_MIN_POOL_SIZE] = { "min_pool_size", VALUE_INT, 0, 10000, NULL, POOL_FIELD(min_pool_size), 0,
		KEY_EMPTY_INHERITS, "", NULL },
	[POOL_KEY_RESERVE_POOL_SIZE] = { "reserve_pool_size", VALUE_INT, 0, 10000, NULL,
		POOL_FIELD(reserve_pool_size), 0, KEY_EMPTY_INHERITS, "", NULL },
	[POOL_KEY_SERVER_LIFETIME] = { "server_lifetime", VALUE_DURATION, 0, INT_MAX, NULL,
		POOL_FIELD(server_lifetime), 0, KEY_EMPTY_INHERITS | KEY_PGB_SECONDS, "", NULL },
	[POOL_KEY_LOG_MIN_DURATION] = { "log_min_duration", VALUE_DURATION, 0, INT_MAX, NULL,
		POOL_FIELD(log_min_duration), 0, KEY_EMPTY_INHERITS, "", NULL },
	[POOL_KEY_QUERY_STATS] = { "query_stats", VALUE_ENUM, 0, 0, &switch_enum, POOL_FIELD(query_stats), 0,
		KEY_EMPTY_INHERITS, "", NULL },
	[POOL_KEY_QUERY_STATS_MAX] = { "query_stats_max", VALUE_INT, 1, QSTATS_SLOTS, NULL,
		POOL_FIELD(query_stats_max), 0, KEY_EMPTY_INHERITS, "", NULL },
	[POOL_KEY_SERVER_USERNAME] = { "server_username", VALUE_STRING, 0, 0, NULL, POOL_FIELD(server_username), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
	[POOL_KEY_SERVER_PASSWORD] = { "server_password", VALUE_STRING, 0, 0, NULL, POOL_FIELD(server_password), 0,
		KEY_EMPTY_IS_NULL | KEY_SECRET, NULL, NULL },
	[POOL_KEY_AUTH_USER] = { "auth_user", VALUE_STRING, 0, 0, NULL, POOL_FIELD(auth_user), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
	[POOL_KEY_AUTH_QUERY] = { "auth_query", VALUE_STRING, 0, 0, NULL, POOL_FIELD(auth_query), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
	[POOL_KEY_AUTH_DBNAME] = { "auth_dbname", VALUE_STRING, 0, 0, NULL, POOL_FIELD(auth_dbname), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
	[POOL_KEY_CLIENT_ENCODING] = { "client_encoding", VALUE_STRING, 0, 0, NULL, POOL_FIELD(client_encoding), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
	[POOL_KEY_DATESTYLE] = { "datestyle", VALUE_STRING, 0, 0, NULL, POOL_FIELD(datestyle), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
	[POOL_KEY_TIMEZONE] = { "timezone", VALUE_STRING, 0, 0, NULL, POOL_FIELD(timezone), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
	[POOL_KEY_APPLICATION_NAME] = { "application_name", VALUE_STRING, 0, 0, NULL, POOL_FIELD(application_name), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
};

const struct key_spec shard_specs[SHARD_KEY_COUNT] = {
	/* No default: the pool's name, filled in once the file is read. */
	[SHARD_KEY_DATABASE] = { "database", VALUE_STRING, 0, 0, NULL,
		offsetof(struct config_shard, database), 0, KEY_NOT_EMPTY, NULL, NULL },
	[SHARD_KEY_SERVERS] = { "servers", VALUE_SERVER_LIST, 0, 0, NULL,
		offsetof(struct config_shard, servers), offsetof(struct config_shard, n_servers), 0, NULL, NULL },
};

#define USER_FIELD(f) offsetof(struct config_user, f)
const struct key_spec user_specs[USER_KEY_COUNT] = {
	[USER_KEY_PASSWORD] = { "password", VALUE_STRING, 0, 0, NULL, USER_FIELD(password), 0,
		KEY_EMPTY_IS_NULL | KEY_SECRET, NULL, check_password },
	[USER_KEY_SERVER_USERNAME] = { "server_username", VALUE_STRING, 0, 0, NULL, USER_FIELD(server_username), 0,
		KEY_EMPTY_IS_NULL, NULL, NULL },
	[USER_KEY_SERVER_PASSWORD] = { "server_password", VALUE_STRING, 0, 0, NULL, USER_FIELD(server_password), 0,
		KEY_EMPTY_IS_NULL | KEY_SECRET, NULL, NULL },
	[USER_KEY_POOL_SIZE] = { "pool_size", VALUE_INT, 1, 10000, NULL, USER_FIELD(pool_size), 0,
		KEY_EMPTY_INHERITS, "", NULL },
	[USER_KEY_MIN_POOL_SIZE] = { "min_pool_size", VALUE_INT, 0, 10000, NULL, USER_FIELD(min_pool_size), 0,
		KEY_EMPTY_INHERITS, "", NULL },
	[USER_KEY_STATEMENT_TIMEOUT] = { "statement_timeout", VALUE_DURATION, 0, INT_MAX, NULL,
		USER_FIELD(statement_timeout), 0, 0, "0", NULL },
	[USER_KEY_POOL_MODE] = { "pool_mode", VALUE_ENUM, 0, 0, &pool_mode_enum, USER_FIELD(pool_mode), 0,
		KEY_EMPTY_INHERITS, "", NULL },
	[USER_KEY_TRANSACTION_TIMEOUT] = { "transaction_timeout", VALUE_DURATION, 0, INT_MAX, NULL,
		USER_FIELD(transaction_timeout), 0, KEY_EMPTY_INHERITS | KEY_PGB_SECONDS, "", NULL },
	[USER_KEY_RESERVE_POOL_SIZE] = { "reserve_pool_size", VALUE_INT, 0, 10000, NULL,
		USER_FIELD(reserve_pool_size), 0, KEY_EMPTY_INHERITS, "", NULL },
	[USER_KEY_MAX_USER_CONNECTIONS] = { "max_user_connections", VALUE_INT, 0, 1000000, NULL,
		USER_FIELD(max_user_connections), 0, KEY_EMPTY_INHERITS, "", NULL },
};

#define USET_FIELD(f) offsetof(struct config_user_settings, f)
const struct key_spec uset_specs[USET_KEY_COUNT] = {
	[USET_KEY_POOL_MODE] = { "pool_mode", VALUE_ENUM, 0, 0, &pool_mode_enum, USET_FIELD(pool_mode), 0,
		KEY_EMPTY_INHERITS, "", NULL },
	[USET_KEY_POOL_SIZE] = { "pool_size", VALUE_INT, 1, 10000, NULL, USET_FIELD(pool_size), 0,
		KEY_EMPTY_INHERITS, "", NULL },
	[USET_KEY_RESERVE_POOL_SIZE] = { "reserve_pool_size", VALUE_INT, 0, 10000, NULL, USET_FIELD(reserve_pool_size),
		0, KEY_EMPTY_INHERITS, "", NULL },
	[USET_KEY_MAX_USER_CONNECTIONS] = { "max_user_connections", VALUE_INT, 0, 1000000, NULL,
		USET_FIELD(max_user_connections), 0, KEY_EMPTY_INHERITS, "", NULL },
	[USET_KEY_MAX_USER_CLIENT_CONNECTIONS] = { "max_user_client_connections", VALUE_INT, 0, 1000000, NULL,
		USET_FIELD(max_user_client_connections), 0, KEY_EMPTY_INHERITS, "", NULL },
	[USET_KEY_QUERY_TIMEOUT] = { "query_timeout", VALUE_DURATION, 0, INT_MAX, NULL, USET_FIELD(query_timeout), 0,
		KEY_EMPTY_INHERITS | KEY_PGB_SECONDS, "", NULL },
	[USET_KEY_IDLE_TRANSACTION_TIMEOUT] = { "idle_transaction_timeout", VALUE_DURATION, 0, INT_MAX, NULL,
		USET_FIELD(idle_transaction_timeout), 0, KEY_EMPTY_INHERITS | KEY_PGB_SECONDS, "", NULL },
	[USET_KEY_CLIENT_IDLE_TIMEOUT] = { "client_idle_timeout", VALUE_DURATION, 0, INT_MAX, NULL,
		USET_FIELD(client_idle_timeout), 0, KEY_EMPTY_INHERITS | KEY_PGB_SECONDS, "", NULL },
	[USET_KEY_TRANSACTION_TIMEOUT] = { "transaction_timeout", VALUE_DURATION, 0, INT_MAX, NULL,
		USET_FIELD(transaction_timeout), 0, KEY_EMPTY_INHERITS | KEY_PGB_SECONDS, "", NULL },
};

/* ------------------------------------------------------------------ */
/* Key lookup                                                           */

const struct key_spec *find_spec(const struct key_spec *specs, size_t n, const char *name, size_t *index)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(specs[i].name, name) == 0) {
			if (index != NULL)
				*index = i;
			return &specs[i];
		}
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Small helpers                                                        */

void *p_alloc(struct parser *p, size_t n)
{
	void *ptr = calloc(1, n ? n : 1);
	if (ptr == NULL)
		p->oom = true;
	return ptr;
}

char *p_strndup(struct parser *p, const char *s, size_t n)
{
	char *d = p_alloc(p, n + 1);
	if (d != NULL)
		memcpy(d, s, n);
	return d;
}

char *p_strdup(struct parser *p, const char *s)
{
	return p_strndup(p, s, strlen(s));
}

/* Grow *arr to hold n + 1 elements of size sz (new element zeroed). */
bool p_grow(struct parser *p, void *arr, size_t n, size_t sz)
{
	void **ap = arr;
	if (n + 1 > SIZE_MAX / sz) {
		p->oom = true;
		return false;
	}
	void *np = realloc(*ap, (n + 1) * sz);
	if (np == NULL) {
		p->oom = true;
		return false;
	}
	memset((char *)np + n * sz, 0, sz);
	*ap = np;
	return true;
}

/* ------------------------------------------------------------------ */
/* Problems                                                             */

__attribute__((format(printf, 1, 0)))
static char *vformat(const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return NULL;
	char *s = malloc((size_t)n + 1);
	if (s != NULL)
		vsnprintf(s, (size_t)n + 1, fmt, ap);
	return s;
}

__attribute__((format(printf, 1, 2)))
char *format(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = vformat(fmt, ap);
	va_end(ap);
	return s;
}

void add_problem(struct config_problems *pr, enum config_problem_kind kind, int line, char *message,
			bool *oom)
{
	if (message == NULL) {
		*oom = true;
		return;
	}
	if (pr->n == pr->cap) {
		size_t cap = pr->cap ? pr->cap * 2 : 8;
		struct config_problem *items = realloc(pr->items, cap * sizeof(*items));
		if (items == NULL) {
			free(message);
			*oom = true;
			return;
		}
		pr->items = items;
		pr->cap = cap;
	}
	pr->items[pr->n++] = (struct config_problem){ .kind = kind, .line = line, .message = message };
}

/* "FILE:LINE: [section] key: message"; line 0, section or key NULL leave that part out. */
__attribute__((format(printf, 6, 7)))
void problem(struct parser *p, enum config_problem_kind kind, int line, const char *section,
		    const char *key, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *body = vformat(fmt, ap);
	va_end(ap);
	if (body == NULL) {
		p->oom = true;
		return;
	}
	char where[32] = "";
	if (line > 0)
		snprintf(where, sizeof(where), ":%d", line);
	char *msg = format("%s%s: %s%s%s%s%s%s%s", p->file, where,
			   section ? "[" : "", section ? section : "", section ? "]" : "",
			   section && key ? " " : "", key ? key : "", section || key ? ": " : "", body);
	free(body);
	add_problem(p->problems, kind, line, msg, &p->oom);
}

void config_problems_free(struct config_problems *problems)
{
	if (problems == NULL)
		return;
	for (size_t i = 0; i < problems->n; i++)
		free(problems->items[i].message);
	free(problems->items);
	*problems = (struct config_problems){ 0 };
}

bool config_problems_has(const struct config_problems *problems, enum config_problem_kind kind)
{
	if (problems == NULL)
		return false;
	for (size_t i = 0; i < problems->n; i++)
		if (problems->items[i].kind == kind)
			return true;
	return false;
}

/* ------------------------------------------------------------------ */
/* Lookups                                                              */

const struct config_pool *config_find_pool(const struct config *cfg, const char *name)
{
	if (cfg == NULL || name == NULL)
		return NULL;
	for (size_t i = 0; i < cfg->n_pools; i++)
		if (strcmp(cfg->pools[i].name, name) == 0)
			return &cfg->pools[i];
	for (size_t i = 0; i < cfg->n_autodb_pools; i++)
		if (strcmp(cfg->autodb_pools[i]->name, name) == 0)
			return cfg->autodb_pools[i];
	return NULL;
}

static void autodb_pool_free(struct config_pool *cp)
{
	for (size_t i = 0; i < cp->n_shards; i++)
		free(cp->shards[i].database);
	free(cp->shards);
	free(cp->name);
	free(cp);
}

const struct config_pool *config_autodb_instance(struct config *cfg, const char *name)
{
	const struct config_pool *found = config_find_pool(cfg, name);
	if (found != NULL || cfg->autodb == NULL)
		return found;
	size_t len = strlen(name);
	if (len == 0 || len > CONFIG_MAX_NAME || config_is_console_db(name))
		return NULL;
	const struct config_pool *t = cfg->autodb;
	struct config_pool *cp = malloc(sizeof(*cp));
	struct config_pool **list = cp ? realloc(cfg->autodb_pools, (cfg->n_autodb_pools + 1) * sizeof(*list)) : NULL;
	if (list == NULL) {
		free(cp);
		return NULL;
	}
	cfg->autodb_pools = list;
	/* The template's settings, servers and users (they live as long as
	 * this snapshot); its own name and shards. */
	*cp = *t;
	cp->autodb_instance = true;
	cp->next_shards = NULL;   /* (the template has none: checked) */
	cp->n_next_shards = 0;
	cp->name = strdup(name);
	cp->shards = calloc(t->n_shards ? t->n_shards : 1, sizeof(*cp->shards));
	bool ok = cp->name && cp->shards;
	for (size_t i = 0; ok && i < t->n_shards; i++) {
		cp->shards[i] = t->shards[i];
		cp->shards[i].database = strdup(t->shards[i].database ? t->shards[i].database : name);
		ok = cp->shards[i].database != NULL;
	}
	if (!ok) {
		cp->n_shards = cp->shards ? t->n_shards : 0;
		autodb_pool_free(cp);
		return NULL;
	}
	cfg->autodb_pools[cfg->n_autodb_pools++] = cp;
	return cp;
}

void config_autodb_forget(struct config *cfg, const struct config_pool *cp)
{
	for (size_t i = 0; i < cfg->n_autodb_pools; i++) {
		if (cfg->autodb_pools[i] != cp)
			continue;
		autodb_pool_free(cfg->autodb_pools[i]);
		cfg->autodb_pools[i] = cfg->autodb_pools[--cfg->n_autodb_pools];
		return;
	}
}

void config_autodb_free_all(struct config *cfg)
{
	for (size_t i = 0; i < cfg->n_autodb_pools; i++)
		autodb_pool_free(cfg->autodb_pools[i]);
	free(cfg->autodb_pools);
	cfg->autodb_pools = NULL;
	cfg->n_autodb_pools = 0;
}

const struct config_user *config_find_user(const struct config_pool *pool, const char *name)
{
	if (pool == NULL || name == NULL)
		return NULL;
	for (size_t i = 0; i < pool->n_users; i++)
		if (strcmp(pool->users[i].name, name) == 0)
			return &pool->users[i];
	return NULL;
}

bool config_list_has(const char *list, const char *name)
{
	if (list == NULL || name == NULL || name[0] == '\0')
		return false;
	size_t nlen = strlen(name);
	const char *p = list;
	while (*p) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		const char *start = p;
		while (*p && *p != ',')
			p++;
		const char *end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if ((size_t)(end - start) == nlen && memcmp(start, name, nlen) == 0)
			return true;
	}
	return false;
}

const char *config_console_secret(const struct config *cfg, const char *user)
{
	const struct auth_file_entry *e = cfg->auth_users ? auth_file_find(cfg->auth_users, user) : NULL;
	if (e != NULL)
		return e->secret;
	for (size_t i = 0; i < cfg->n_pools; i++) {
		const struct config_user *u = config_find_user(&cfg->pools[i], user);
		if (u != NULL && u->password != NULL && u->password[0])
			return u->password;
	}
	return NULL;
}

const struct config_user_settings *config_find_user_settings(const struct config *cfg, const char *name)
{
	for (size_t i = 0; cfg != NULL && name != NULL && i < cfg->n_user_settings; i++)
		if (strcmp(cfg->user_settings[i].name, name) == 0)
			return &cfg->user_settings[i];
	return NULL;
}

/* [users.NAME] of the name the pool logs in to the servers as (sizes and
 * the role cap follow the server-side user, as PgBouncer's pools do). */
static const struct config_user_settings *server_side_settings(const struct config *cfg,
							      const struct config_pool *pool,
							      const struct config_user *user)
{
	if (user != NULL)
		return config_find_user_settings(cfg, config_user_server_name(pool, user));
	if (pool != NULL && pool->server_username != NULL)
		return config_find_user_settings(cfg, pool->server_username);
	return NULL;
}

/* [users.NAME] of the client's own name (its time limits). */
static const struct config_user_settings *client_settings(const struct config *cfg, const struct config_user *user)
{
	return user != NULL ? config_find_user_settings(cfg, user->name) : NULL;
}

int config_user_pool_size(const struct config *cfg, const struct config_pool *pool,
			  const struct config_user *user)
{
	if (user != NULL && user->pool_size != CONFIG_INHERIT)
		return user->pool_size;
	const struct config_user_settings *us = server_side_settings(cfg, pool, user);
	if (us != NULL && us->pool_size != CONFIG_INHERIT)
		return us->pool_size;
	if (pool != NULL && pool->pool_size != CONFIG_INHERIT)
		return pool->pool_size;
	return cfg->general.default_pool_size;
}

int config_user_min_pool_size(const struct config *cfg, const struct config_pool *pool,
			      const struct config_user *user)
{
	if (user != NULL && user->min_pool_size != CONFIG_INHERIT)
		return user->min_pool_size;
	if (pool != NULL && pool->min_pool_size != CONFIG_INHERIT)
		return pool->min_pool_size;
	return cfg->general.min_pool_size;
}

int config_user_transaction_timeout(const struct config *cfg, const struct config_user *user)
{
	if (user != NULL && user->transaction_timeout != CONFIG_INHERIT)
		return user->transaction_timeout;
	const struct config_user_settings *us = client_settings(cfg, user);
	if (us != NULL && us->transaction_timeout != CONFIG_INHERIT)
		return us->transaction_timeout;
	return cfg->general.transaction_timeout;
}

int config_user_query_timeout(const struct config *cfg, const struct config_user *user)
{
	const struct config_user_settings *us = client_settings(cfg, user);
	if (us != NULL && us->query_timeout != CONFIG_INHERIT)
		return us->query_timeout;
	return cfg->general.query_timeout;
}

int config_user_idle_transaction_timeout(const struct config *cfg, const struct config_user *user)
{
	const struct config_user_settings *us = client_settings(cfg, user);
	if (us != NULL && us->idle_transaction_timeout != CONFIG_INHERIT)
		return us->idle_transaction_timeout;
	return cfg->general.idle_transaction_timeout;
}

int config_user_client_idle_timeout(const struct config *cfg, const struct config_user *user)
{
	const struct config_user_settings *us = client_settings(cfg, user);
	if (us != NULL && us->client_idle_timeout != CONFIG_INHERIT)
		return us->client_idle_timeout;
	return cfg->general.client_idle_timeout;
}

bool config_any_idle_transaction_timeout(const struct config *cfg)
{
	if (cfg->general.idle_transaction_timeout > 0)
		return true;
	for (size_t i = 0; i < cfg->n_user_settings; i++)
		if (cfg->user_settings[i].idle_transaction_timeout > 0)
			return true;
	return false;
}

bool config_any_client_idle_timeout(const struct config *cfg)
{
	if (cfg->general.client_idle_timeout > 0)
		return true;
	for (size_t i = 0; i < cfg->n_user_settings; i++)
		if (cfg->user_settings[i].client_idle_timeout > 0)
			return true;
	return false;
}

int config_pool_max_db_connections(const struct config *cfg, const struct config_pool *pool)
{
	if (pool != NULL && pool->max_db_connections != CONFIG_INHERIT)
		return pool->max_db_connections;
	return cfg->general.max_db_connections;
}

int config_pool_max_db_client_connections(const struct config *cfg, const struct config_pool *pool)
{
	if (pool != NULL && pool->max_db_client_connections != CONFIG_INHERIT)
		return pool->max_db_client_connections;
	return cfg->general.max_db_client_connections;
}

int config_user_max_client_connections(const struct config *cfg, const char *user)
{
	const struct config_user_settings *us = config_find_user_settings(cfg, user);
	if (us != NULL && us->max_user_client_connections != CONFIG_INHERIT)
		return us->max_user_client_connections;
	return cfg->general.max_user_client_connections;
}

int config_user_max_user_connections(const struct config *cfg, const struct config_pool *pool,
				     const struct config_user *user)
{
	if (user != NULL && user->max_user_connections != CONFIG_INHERIT)
		return user->max_user_connections;
	const struct config_user_settings *us = server_side_settings(cfg, pool, user);
	if (us != NULL && us->max_user_connections != CONFIG_INHERIT)
		return us->max_user_connections;
	return cfg->general.max_user_connections;
}

int config_user_reserve_pool_size(const struct config *cfg, const struct config_pool *pool,
				  const struct config_user *user)
{
	if (user != NULL && user->reserve_pool_size != CONFIG_INHERIT)
		return user->reserve_pool_size;
	const struct config_user_settings *us = server_side_settings(cfg, pool, user);
	if (us != NULL && us->reserve_pool_size != CONFIG_INHERIT)
		return us->reserve_pool_size;
	if (pool != NULL && pool->reserve_pool_size != CONFIG_INHERIT)
		return pool->reserve_pool_size;
	return cfg->general.reserve_pool_size;
}

int config_pool_server_lifetime(const struct config *cfg, const struct config_pool *pool)
{
	if (pool != NULL && pool->server_lifetime != CONFIG_INHERIT)
		return pool->server_lifetime;
	return cfg->general.server_lifetime;
}

bool config_pool_query_stats(const struct config *cfg, const struct config_pool *pool)
{
	if (pool != NULL && pool->query_stats != CONFIG_INHERIT)
		return pool->query_stats != 0;
	return cfg->general.query_stats;
}

int config_pool_query_stats_max(const struct config *cfg, const struct config_pool *pool)
{
	if (pool != NULL && pool->query_stats_max != CONFIG_INHERIT)
		return pool->query_stats_max;
	return cfg->general.query_stats_max;
}

int config_pool_log_min_duration(const struct config *cfg, const struct config_pool *pool)
{
	if (pool != NULL && pool->log_min_duration != CONFIG_INHERIT)
		return pool->log_min_duration;
	return cfg->general.log_min_duration;
}

int config_client_login_timeout(const struct config *cfg)
{
	int v = cfg->general.client_login_timeout;
	return v == CONFIG_INHERIT ? cfg->general.connect_timeout : v;
}

const char *config_pool_auth_user(const struct config *cfg, const struct config_pool *pool)
{
	if (pool != NULL && pool->auth_user != NULL)
		return pool->auth_user;
	return cfg->general.auth_user ? cfg->general.auth_user : "";
}

const char *config_pool_auth_query(const struct config *cfg, const struct config_pool *pool)
{
	if (pool != NULL && pool->auth_query != NULL)
		return pool->auth_query;
	return cfg->general.auth_query;
}

const char *config_pool_auth_dbname(const struct config *cfg, const struct config_pool *pool)
{
	if (pool != NULL && pool->auth_dbname != NULL)
		return pool->auth_dbname;
	return cfg->general.auth_dbname ? cfg->general.auth_dbname : "";
}

const char *config_user_server_name(const struct config_pool *pool, const struct config_user *user)
{
	if (user->server_username && user->server_username[0])
		return user->server_username;
	if (pool != NULL && pool->server_username != NULL && pool->server_username[0])
		return pool->server_username;
	return user->name;
}

const char *config_user_server_password(const struct config_pool *pool, const struct config_user *user)
{
	if (user->server_password && user->server_password[0])
		return user->server_password;
	/* A users section that names its own server role goes with its own
	 * password; else the pool's forced role with the pool's. */
	if (!(user->server_username && user->server_username[0]) && pool != NULL && pool->server_username != NULL &&
	    pool->server_username[0])
		return pool->server_password;
	return user->password;
}

enum pool_mode config_user_pool_mode(const struct config *cfg, const struct config_pool *pool,
				     const struct config_user *user)
{
	if (user != NULL && user->pool_mode != CONFIG_INHERIT)
		return (enum pool_mode)user->pool_mode;
	const struct config_user_settings *us = server_side_settings(cfg, pool, user);
	if (us != NULL && us->pool_mode != CONFIG_INHERIT)
		return (enum pool_mode)us->pool_mode;
	/* [general]'s as it is now: a console SET of pool_mode reaches the
	 * pools that set none of their own, as on PgBouncer */
	return pool->pool_mode_own ? pool->pool_mode : cfg->general.pool_mode;
}

bool config_is_console_db(const char *name)
{
	return strcmp(name, "pgcat") == 0 || strcmp(name, "pgbouncer") == 0;
}

bool config_key_is_tls(const char *key)
{
	return strncasecmp(key, "client_tls", 10) == 0 || config_key_is_server_tls(key);
}

bool config_key_is_server_tls(const char *key)
{
	return strncasecmp(key, "server_tls", 10) == 0;
}

bool config_tls_versions(const char *list, int *min, int *max, char *why, size_t whylen)
{
	static const struct {
		const char *word;
		int lo, hi;
	} words[] = {
		{ "tlsv1.0", 10, 10 }, { "tlsv1.1", 11, 11 }, { "tlsv1.2", 12, 12 }, { "tlsv1.3", 13, 13 },
		{ "all", 10, 13 },     { "legacy", 10, 13 },  { "secure", 12, 13 },  { "default", 12, 13 },
	};
	int lo = 99, hi = 0;
	const char *s = list;
	while (*s) {
		while (*s == ',' || isspace((unsigned char)*s))
			s++;
		size_t n = 0;
		while (s[n] && s[n] != ',' && !isspace((unsigned char)s[n]))
			n++;
		if (n == 0)
			break;
		size_t i = 0;
		while (i < sizeof words / sizeof *words && !(strlen(words[i].word) == n && strncasecmp(s, words[i].word, n) == 0))
			i++;
		if (i == sizeof words / sizeof *words) {
			snprintf(why, whylen, "\"%.*s\" is no TLS version: tlsv1.0, tlsv1.1, tlsv1.2, tlsv1.3, all, secure, legacy",
				 (int)(n > 40 ? 40 : n), s);
			return false;
		}
		lo = words[i].lo < lo ? words[i].lo : lo;
		hi = words[i].hi > hi ? words[i].hi : hi;
		s += n;
	}
	if (hi == 0) {
		snprintf(why, whylen, "names no TLS version");
		return false;
	}
	*min = lo;
	*max = hi;
	return true;
}

bool check_tls_protocols(const char *value, char *why, size_t whylen)
{
	int lo, hi;
	return config_tls_versions(value, &lo, &hi, why, whylen);
}


const char *config_pool_mode_name(enum pool_mode m)
{
	return enum_name(&pool_mode_enum, (int)m);
}

const char *config_log_level_name(enum log_level l)
{
	return enum_name(&log_level_enum, (int)l);
}

const char *config_server_role_name(enum server_role r)
{
	return enum_name(&server_role_enum, (int)r);
}

const struct config_key_info *config_general_keys(size_t *n)
{
	if (n != NULL)
		*n = N_GENERAL_KEYS;
	return general_info;
}

/* ------------------------------------------------------------------ */
/* Files a configuration names                                          */

char *config_relative_path(const char *base, const char *file)
{
	if (file[0] == '/' || base == NULL)
		return strdup(file);
	const char *slash = strrchr(base, '/');
	if (slash == NULL)
		return strdup(file);
	return format("%.*s/%s", (int)(slash - base), base, file);
}

char *config_read_file(const char *path, size_t max, size_t *len, char **err)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		*err = format("cannot open: %s", strerror(errno));
		return NULL;
	}
	char *buf = malloc(max + 1);
	size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
	bool bad = buf == NULL || ferror(f);
	int saved = errno;
	fclose(f);
	if (bad || n > max) {
		*err = buf == NULL ? format("out of memory") : n > max ? format("larger than %zu bytes", max)
								       : format("cannot read: %s", strerror(saved));
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

void config_use_next_layout(struct config_pool *cp)
{
	struct config_shard *shards = cp->shards;
	size_t n = cp->n_shards;
	cp->shards = cp->next_shards;
	cp->n_shards = cp->n_next_shards;
	cp->next_shards = shards;
	cp->n_next_shards = n;
}
