/* SPDX-License-Identifier: MIT */
/*
 * config: pgcat.ini (SPEC §2) parsed with inih into one immutable snapshot.
 * The snapshot is built whole or not at all; a reload builds a new one and
 * swaps it in. This room knows nothing of sockets or pools at run time.
 */
#ifndef PGCAT_CONFIG_H
#define PGCAT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* statement: transaction mode in which a transaction block is refused
 * (PgBouncer's), each statement its own transaction. */
enum pool_mode { POOL_MODE_SESSION, POOL_MODE_TRANSACTION, POOL_MODE_STATEMENT };

/* A server goes back to its pool when a transaction ends: transaction
 * and statement mode alike. */
static inline bool pool_mode_per_transaction(enum pool_mode m) { return m != POOL_MODE_SESSION; }
/* password: the client sends its password in clear (PostgreSQL's hba
 * method "password", PgBouncer's auth_type plain), checked against the
 * stored secret whatever its form. */
/* LDAP: the password in clear, checked by an LDAP server as auth_ldap_options says.
 * PAM: the password in clear, checked by PAM's service auth_pam_service. */
enum auth_type { AUTH_TYPE_SCRAM, AUTH_TYPE_MD5, AUTH_TYPE_TRUST, AUTH_TYPE_PASSWORD, AUTH_TYPE_LDAP, AUTH_TYPE_PAM };
enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARNING, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG, LOG_LEVEL_TRACE };
/* How a log line is written: text (time, pid, level, message) or one JSON
 * object per line (log.h). */
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };
enum server_role { SERVER_ROLE_PRIMARY, SERVER_ROLE_REPLICA, SERVER_ROLE_AUTO };
enum default_role { DEFAULT_ROLE_ANY, DEFAULT_ROLE_PRIMARY, DEFAULT_ROLE_REPLICA };
/* first: the first server listed that is not banned (PgBouncer's
 * load_balance_hosts = disable). */
enum lb_mode { LB_MODE_RANDOM, LB_MODE_LOC, LB_MODE_FIRST };
/* read_your_writes (SPEC §4): off, or reads after a write wait for the
 * replicas to replay its WAL position (lsn). */
enum read_your_writes { READ_YOUR_WRITES_OFF, READ_YOUR_WRITES_LSN };
enum sharding_function {
	SHARDING_PG_BIGINT_HASH, SHARDING_PG_TEXT_HASH, SHARDING_PG_UUID_HASH,
	SHARDING_SHA1, SHARDING_MURMUR3
};
enum tls_mode {
	TLS_MODE_DISABLE, TLS_MODE_ALLOW, TLS_MODE_PREFER, TLS_MODE_REQUIRE,
	TLS_MODE_VERIFY_CA, TLS_MODE_VERIFY_FULL
};
/* How pgcat starts TLS towards servers: SSLRequest first, or a ClientHello
 * as the very first bytes (PostgreSQL 17's direct TLS). */
enum tls_negotiation { TLS_NEGOTIATION_POSTGRES, TLS_NEGOTIATION_DIRECT };
/* SPEC §12: how sockets are read and written (doc/io-engine.md). */
enum io_engine { IO_ENGINE_AUTO, IO_ENGINE_EPOLL, IO_ENGINE_IO_URING };

/* What query_timeout, transaction_timeout and idle_transaction_timeout do
 * when they expire: pgcat's cancel (the query cancelled, 57014; the
 * transaction ended, 25P04; the idle client closed with PostgreSQL's
 * 25P03), or PgBouncer's disconnect (the client and its server closed,
 * 08P01 with the timeout's name). A pgbouncer.ini has disconnect. */
enum timeout_action { TIMEOUT_ACTION_CANCEL, TIMEOUT_ACTION_DISCONNECT };

/* A server that cannot be connected to (refused, unreachable, timed
 * out): its waiting clients fail at once, and the next ones too for
 * server_login_retry (fail, pgcat's); or they wait, in order, while pgcat
 * tries again every server_login_retry, until query_wait_timeout (wait,
 * PgBouncer's; a pgbouncer.ini has it). A login the server refuses (28xxx,
 * 3D000) fails them at once either way. */
enum unreachable_server { UNREACHABLE_SERVER_FAIL, UNREACHABLE_SERVER_WAIT };

struct hba;
struct ident;
struct auth_file;

#define CONFIG_DEFAULT_SHARD_ALL (-1)
#define CONFIG_INHERIT (-1)
/* Servers one shard may list: the router chooses among them in arrays on
 * its stack. */
#define CONFIG_MAX_SHARD_SERVERS 64

struct config_server {
	char *host;               /* name or address; IPv6 without brackets */
	int port;
	enum server_role role;
};

struct config_shard {
	int index;                /* N of [pools.P.shards.N]; shards sorted by it */
	char *database;           /* database name on the servers */
	struct config_server *servers;
	size_t n_servers;
};

struct config_user {
	char *name;
	char *password;           /* plaintext, "md5<32 hex>" or "SCRAM-SHA-256$..." ; may be NULL */
	char *server_username;    /* NULL: same as name */
	char *server_password;    /* NULL: derive from password */
	int pool_size;            /* CONFIG_INHERIT or >= 1 */
	int min_pool_size;        /* CONFIG_INHERIT or >= 0 */
	int statement_timeout;    /* ms, 0 = off */
	int pool_mode;            /* CONFIG_INHERIT or enum pool_mode */
	int transaction_timeout;  /* CONFIG_INHERIT or ms (0 = off) */
	int reserve_pool_size;    /* CONFIG_INHERIT or >= 0 */
	int max_user_connections; /* CONFIG_INHERIT or >= 0 (0: no cap for this user) */
	bool from_auth_file;      /* a line of auth_file, not a users section */
	/* Made for the pool's forced server_username, which no users section
	 * or auth_file line names: no client logs in as it; its pool holds
	 * the server connections the pool's clients share (pool_serving). */
	bool server_only;
};

/* [users.NAME] (PgBouncer's [users]): settings of a user name in every
 * pool, below a pool's own users section and above the pool's and
 * [general]'s. pool_size, reserve_pool_size, max_user_connections and
 * pool_mode follow the name pgcat logs in to the servers as (a pool's
 * forced server_username, else the client's); the timeouts the client's. */
struct config_user_settings {
	char *name;
	int pool_mode;                 /* CONFIG_INHERIT or enum pool_mode */
	int pool_size;                 /* CONFIG_INHERIT or >= 1 */
	int reserve_pool_size;         /* CONFIG_INHERIT or >= 0 */
	int max_user_connections;      /* CONFIG_INHERIT or >= 0 */
	int max_user_client_connections; /* CONFIG_INHERIT or >= 0: the client's user name's */
	int query_timeout;             /* CONFIG_INHERIT or ms (0 = off) */
	int idle_transaction_timeout;  /* CONFIG_INHERIT or ms */
	int client_idle_timeout;       /* CONFIG_INHERIT or ms */
	int transaction_timeout;       /* CONFIG_INHERIT or ms */
};

struct config_pool {
	char *name;               /* dbname clients connect with */
	enum pool_mode pool_mode; /* resolved: [general] value unless overridden */
	bool pool_mode_own;       /* set by the pool: a SET of [general]'s does not change it */
	enum default_role default_role;
	bool query_parser_enabled;
	bool primary_reads_enabled;
	enum lb_mode load_balancing_mode;
	enum sharding_function sharding_function;
	char **sharded_tables;    /* "[schema.]table.column" entries */
	char **writing_functions; /* beyond the built-ins: routed to the primary (SPEC §4) */
	size_t n_writing_functions;
	size_t n_sharded_tables;
	int default_shard;        /* shard index or CONFIG_DEFAULT_SHARD_ALL */
	int64_t max_replica_lag;
	int sticky_primary_after_write;
	enum read_your_writes read_your_writes;
	int max_db_connections;   /* CONFIG_INHERIT or >= 0 (0: no cap for this pool's databases) */
	int max_db_client_connections; /* CONFIG_INHERIT or >= 0: clients of this database name */
	char *connect_query;      /* run once on each new server connection; NULL = none */
	int pool_size;            /* CONFIG_INHERIT or >= 1: the users' default below [users.NAME] */
	int min_pool_size;        /* CONFIG_INHERIT or >= 0 */
	int reserve_pool_size;    /* CONFIG_INHERIT or >= 0 */
	int server_lifetime;      /* CONFIG_INHERIT or ms (0 = no age limit) */
	int log_min_duration;     /* CONFIG_INHERIT or ms: requests this long are logged (0 = none) */
	int query_stats;          /* CONFIG_INHERIT, 0 or 1: statistics per query shape (qstats.h) */
	int query_stats_max;      /* CONFIG_INHERIT or shapes kept per worker */
	/* PgBouncer's forced user: every client of the pool logs in to the
	 * servers as this role (NULL: as itself); a users section's own
	 * server_username still wins. */
	char *server_username;
	char *server_password;    /* NULL: auth_file's line of server_username, else none */
	char *auth_user;          /* NULL: [general]'s */
	char *auth_query;         /* NULL: [general]'s */
	char *auth_dbname;        /* NULL: [general]'s; names the pool whose server auth_query asks */
	/* Sent in the startup packet of every server connection (NULL: not
	 * sent): what a client that sets none of its own sees. */
	char *client_encoding;
	char *datestyle;
	char *timezone;
	char *application_name;
	/* Made at run time from the `*` template for a database a client
	 * asked for (config_autodb_instance): name and shards are its own,
	 * everything else the template's. */
	bool autodb_instance;
	struct config_shard *shards;   /* sorted by index, indexes 0..n-1 without gaps */
	size_t n_shards;
	/* [pools.NAME.next.shards.N]: the layout an online reshard moves the
	 * pool to (issue 45; the same sharding function and keys), as
	 * shards; 0 of them: none planned. Once the reshard cut over, the
	 * two are swapped in the running snapshot (config_use_next_layout). */
	struct config_shard *next_shards;
	size_t n_next_shards;
	struct config_user *users;
	size_t n_users;
};

struct config_peer {
	int id;
	char *host;
	int port;
};

struct config_general {
	char **listen_addr;       /* split comma list; "*" kept as "*" */
	size_t n_listen_addr;
	int listen_port;
	char *unix_socket_dir;    /* "" = none */
	int workers;
	enum io_engine io_engine;   /* read when a worker starts: not reloadable */
	int max_client_conn;
	enum pool_mode pool_mode;
	int default_pool_size;
	int min_pool_size;
	int connect_timeout;
	int server_login_retry;   /* ms after a failed server login before the next */
	enum unreachable_server unreachable_server;
	int client_login_timeout; /* ms, 0 = off; CONFIG_INHERIT: connect_timeout */
	int autodb_idle_timeout;  /* ms a database made from `*` may go unused before it is dropped */
	int query_wait_timeout;
	int query_wait_notify;    /* ms, 0 = off: a client waiting this long for a server gets a notice */
	int idle_timeout;
	int server_lifetime;
	int idle_transaction_timeout;
	int max_db_connections;   /* >0: server connections per server database (all pools, users, workers) */
	int max_user_connections; /* >0: server connections per server role (all pools, workers) */
	int max_db_client_connections;   /* >0: client connections per database name (all users, workers) */
	int max_user_client_connections; /* >0: client connections per client user name (all databases, workers) */
	int reserve_pool_size;    /* connections beyond pool_size for clients that waited reserve_pool_timeout */
	int reserve_pool_timeout; /* ms */
	int transaction_timeout;  /* ms, 0 = off: a transaction open longer is ended (25P04), its server kept */
	int query_timeout;        /* ms, 0 = off: a query running longer is cancelled (57014), for every user */
	enum timeout_action timeout_action;
	int client_idle_timeout;
	int healthcheck_timeout;
	int healthcheck_delay;
	/* The health check's query where no role check is asked for ("", the
	 * default: an empty query, as ";", PostgreSQL's cheapest answer). */
	char *healthcheck_query;
	/* Writes on several shards commit with PREPARE TRANSACTION on each,
	 * the decision logged in state_dir first (twophase.c, SPEC §6). */
	bool two_phase_commit;
	char *state_dir;          /* read when a worker starts: not reloadable */
	int two_phase_recovery_interval;   /* ms between passes over in-doubt transactions */
	int replica_lag_check_interval;   /* ms between the lag monitor's measurements (lagmon.c) */
	int ban_time;             /* seconds */
	int shutdown_timeout;
	char *server_reset_query; /* "" = none */
	bool server_round_robin;
	/* Session mode: a server marked for closing (RECONNECT, a changed
	 * configuration) goes at the end of its client's transaction, and the
	 * client with it, instead of at the end of the session. */
	bool server_fast_close;
	bool tcp_keepalive;
	int tcp_keepidle;         /* seconds; 0 = the kernel's */
	int tcp_keepintvl;        /* seconds; 0 = the kernel's */
	int tcp_keepcnt;          /* 0 = the kernel's */
	int tcp_user_timeout;     /* ms; 0 = the kernel's (TCP_USER_TIMEOUT unset) */
	int64_t max_packet_size;
	int query_parser_max_length;
	/* What a cross-shard read may hold in pgcat beyond its streaming
	 * windows (the rows of GROUP BY, DISTINCT and aggregates, a row larger
	 * than a window), in bytes: 54000 beyond. */
	int64_t cross_shard_max_memory;
	int autoreload;
	char *admin_username;
	char *admin_password;
	char *admin_users;        /* comma list: console users with every command */
	char *stats_users;        /* comma list: console users limited to SHOW */
	enum auth_type auth_type;
	char *auth_file;          /* "" = none */
	char *auth_hba_file;      /* "" = none: auth_type for every login */
	char *auth_ident_file;    /* "" = none: user name maps for hba lines' map= (peer, cert) */
	char *auth_ldap_options;  /* "" = none: auth_type = ldap's options (ldap_opts.h), as an hba line's */
	char *ignore_startup_parameters;   /* startup settings dropped, options' -c too (comma list; "" = none) */
	char *auth_pam_service;   /* PAM's service of auth_type = pam and hba pam lines (pgbouncer.ini: "pgbouncer") */
	char *auth_query;         /* run as auth_user for users found nowhere else (auth_query.c) */
	char *auth_user;          /* "" = auth_query off */
	char *auth_dbname;        /* "": auth_query runs in the pool's own database; else that pool's */
	int auth_query_cache_ttl; /* ms a looked-up secret is reused */
	enum log_level log_level;
	enum log_format log_format;
	int log_min_duration;     /* ms: a request this long is logged (slowlog.h); 0 = none */
	bool query_stats;         /* statistics per query shape (qstats.h) */
	int query_stats_max;      /* shapes a pool keeps per worker */
	char *log_file;           /* "" = stderr */
	bool syslog;
	bool log_connections;
	bool log_disconnections;
	char *pidfile;            /* "" = none */
	bool prepared_statements;
	bool prepare_unnamed;     /* unnamed Parses of repeated texts as named statements (SPEC §5) */
	int prepared_statements_cache_size;
	/* Parse and Query messages longer than this (bytes) are not held to
	 * be rewritten: streamed through, or refused (doc/prepared-statements.md;
	 * config_prep_too_long). */
	int prepared_statements_max_length;
	int query_cache_size;
	int prometheus_port;
	int peer_id;
	int stats_period;         /* seconds */
	int dns_max_ttl;
	enum tls_mode client_tls_sslmode;
	char *client_tls_cert_file;
	char *client_tls_key_file;
	char *client_tls_ca_file;
	/* TLS versions (config_tls_versions) and cipher lists, each way:
	 * ciphers for TLS 1.2 and below in OpenSSL's syntax (or PgBouncer's
	 * preset names), tls13_ciphers TLS 1.3's suites ("": OpenSSL's). */
	char *client_tls_protocols;
	char *client_tls_ciphers;
	char *client_tls13_ciphers;
	enum tls_mode server_tls_sslmode;
	char *server_tls_ca_file;
	char *server_tls_cert_file;   /* the certificate pgcat presents to servers ("": none) */
	char *server_tls_key_file;
	enum tls_negotiation server_tls_negotiation;
	char *server_tls_protocols;
	char *server_tls_ciphers;
	char *server_tls13_ciphers;
};

/* Which file format the snapshot was read from: pgcat.ini, or a
 * pgbouncer.ini (PgBouncer's format, config_pgbouncer.c). */
enum config_format { CONFIG_FORMAT_PGCAT, CONFIG_FORMAT_PGBOUNCER };

struct config_pgbouncer;

struct config {
	char *path;
	enum config_format format;
	/* PgBouncer's [pgbouncer] settings as the file gave them (for SHOW
	 * CONFIG and SET under PgBouncer's names); NULL for pgcat.ini. */
	struct config_pgbouncer *pgbouncer;
	struct config_general general;
	struct config_pool *pools;
	size_t n_pools;
	struct config_peer *peers;
	size_t n_peers;
	struct config_user_settings *user_settings;   /* [users.NAME] */
	size_t n_user_settings;
	/* The `*` pool ([pools.*], PgBouncer's fallback database): a template
	 * for any database name no pool has, its shards' database the name
	 * asked for unless they give one. NULL: none. Not among pools. */
	struct config_pool *autodb;
	/* The databases made from it so far, each at a stable address
	 * (workers' pools point at them); see config_autodb_instance. */
	struct config_pool **autodb_pools;
	size_t n_autodb_pools;
	struct hba *hba;          /* auth_hba_file's rules, read with the file; NULL = no auth_hba_file */
	struct ident *ident;      /* auth_ident_file's maps, read with it; NULL = no auth_ident_file */
	struct ldap_opts *ldap;   /* auth_ldap_options read; NULL = none */
	/* auth_file's entry for auth_user as loaded (its name and password or
	 * secret), when the file has one; NULL otherwise. Read for auth_query's
	 * logins; a SET of auth_user to another name does not match it. */
	char *auth_user_secret_of;
	char *auth_user_secret;
	/* auth_file's users and secrets, kept whole for the admin console's
	 * admin_users and stats_users; NULL when the file was not read. */
	struct auth_file *auth_users;
};

enum config_problem_kind {
	CONFIG_PROBLEM_ERROR,     /* bad value, bad section, missing file...: config rejected */
	CONFIG_PROBLEM_UNKNOWN,   /* unknown key or section: error under -t, warning at startup */
	CONFIG_PROBLEM_WARNING    /* accepted, but worth a line in the log */
};

struct config_problem {
	enum config_problem_kind kind;
	int line;                 /* 0 when not tied to a line */
	char *message;            /* "FILE:LINE: [section] key: what is wrong" */
};

struct config_problems {
	struct config_problem *items;
	size_t n, cap;
};

/* Parse and validate a file. Always fills problems (may be empty). Returns
 * NULL if any CONFIG_PROBLEM_ERROR was found; unknown keys alone do not make
 * it fail (the caller decides, -t treats them as errors). */
struct config *config_load(const char *path, struct config_problems *problems)
	__attribute__((warn_unused_result));
/* Same, from a string (for tests); name is used in messages. */
struct config *config_load_string(const char *text, const char *name,
				  struct config_problems *problems)
	__attribute__((warn_unused_result));
void config_free(struct config *cfg);
void config_problems_free(struct config_problems *problems);
bool config_problems_has(const struct config_problems *problems, enum config_problem_kind kind);

/* Lookups over a loaded config: the pools, then the databases made from
 * the `*` template. */
const struct config_pool *config_find_pool(const struct config *cfg, const char *name);
/* A finished reshard (reshard.c): the pool's next layout becomes its
 * shards, and the layout it had is kept as its next (nothing is freed:
 * pointers into either stay valid). */
void config_use_next_layout(struct config_pool *cp);
/* The pool for database name made from the `*` template (made now if
 * there is none yet): the one exception to the snapshot being immutable,
 * a worker adds to its own copy at login. NULL: no template, a name that
 * cannot be one (empty, longer than 63 bytes, the console's), or out of
 * memory. */
const struct config_pool *config_autodb_instance(struct config *cfg, const char *name);
/* Drop a pool config_autodb_instance made (no pool of a worker points at
 * it any more). */
void config_autodb_forget(struct config *cfg, const struct config_pool *cp);
const struct config_user *config_find_user(const struct config_pool *pool, const char *name);
/* Whether name is one of the comma-separated names of list (blanks
 * around each ignored). */
bool config_list_has(const char *list, const char *name);
/* The secret a console user of admin_users or stats_users logs in with:
 * auth_file's, else the first users section of that name; NULL: none. */
const char *config_console_secret(const struct config *cfg, const char *user);
/* Effective values for a user in a pool (inheritance resolved): the
 * user's own section, then [users.NAME], then the pool, then [general]. */
int config_user_pool_size(const struct config *cfg, const struct config_pool *pool,
			  const struct config_user *user);
int config_user_min_pool_size(const struct config *cfg, const struct config_pool *pool,
			      const struct config_user *user);
enum pool_mode config_user_pool_mode(const struct config *cfg, const struct config_pool *pool,
				     const struct config_user *user);
/* How a user logs in to the servers: its server_username, else the pool's
 * forced server_username, else its name; the password that goes with
 * that name (NULL: none). */
const char *config_user_server_name(const struct config_pool *pool, const struct config_user *user);
const char *config_user_server_password(const struct config_pool *pool, const struct config_user *user);
/* [users.NAME] of that name; NULL: none. */
const struct config_user_settings *config_find_user_settings(const struct config *cfg, const char *name);
/* The user's time limits (ms, 0 = off): its own, else [users.NAME]'s,
 * else [general]'s. */
int config_user_transaction_timeout(const struct config *cfg, const struct config_user *user);
int config_user_query_timeout(const struct config *cfg, const struct config_user *user);
int config_user_idle_transaction_timeout(const struct config *cfg, const struct config_user *user);
int config_user_client_idle_timeout(const struct config *cfg, const struct config_user *user);
/* Whether any user has that limit on ([general]'s or a [users.NAME]'s). */
bool config_any_idle_transaction_timeout(const struct config *cfg);
bool config_any_client_idle_timeout(const struct config *cfg);
/* The user's reserve_pool_size: its own, else [users.NAME]'s, the pool's,
 * [general]'s. */
int config_user_reserve_pool_size(const struct config *cfg, const struct config_pool *pool,
				  const struct config_user *user);
/* The caps on server connections (0: none): the pool's or user's own
 * (and [users.NAME]'s), else [general]'s. */
int config_pool_max_db_connections(const struct config *cfg, const struct config_pool *pool);
/* Client connections allowed: to the pool's database name (0: no cap),
 * and of a client user name (its [users.NAME], else [general]). */
int config_pool_max_db_client_connections(const struct config *cfg, const struct config_pool *pool);
int config_user_max_client_connections(const struct config *cfg, const char *user);
int config_user_max_user_connections(const struct config *cfg, const struct config_pool *pool,
				     const struct config_user *user);
/* The pool's server_lifetime (ms, 0 = none): its own, else [general]'s. */
int config_pool_server_lifetime(const struct config *cfg, const struct config_pool *pool);
/* The pool's log_min_duration (ms, 0 = none): its own, else [general]'s. */
int config_pool_log_min_duration(const struct config *cfg, const struct config_pool *pool);
/* The pool's query_stats and query_stats_max: its own, else [general]'s. */
bool config_pool_query_stats(const struct config *cfg, const struct config_pool *pool);
int config_pool_query_stats_max(const struct config *cfg, const struct config_pool *pool);
/* How long a client may take to log in (ms, 0 = no limit). */
int config_client_login_timeout(const struct config *cfg);
/* auth_query's settings for a pool: its own, else [general]'s ("" for
 * auth_user: auth_query off; for auth_dbname: the pool itself). */
const char *config_pool_auth_user(const struct config *cfg, const struct config_pool *pool);
const char *config_pool_auth_query(const struct config *cfg, const struct config_pool *pool);
const char *config_pool_auth_dbname(const struct config *cfg, const struct config_pool *pool);

/* A time setting (SPEC §2): a bare integer (bare = true) in the key's unit
 * (milliseconds, or seconds when seconds), or a number with one of
 * PostgreSQL's units us, ms, s, min, h, d, rounded to the key's unit. false
 * (why says more, or is empty) when it is neither. */
bool config_parse_duration(const char *s, bool seconds, int64_t *out, bool *bare, char *why, size_t whylen);
/* v in the key's unit, written as PostgreSQL's SHOW does: the largest unit
 * that is exact ("2min", "1500ms", "0"). */
void config_format_duration(int64_t v, bool seconds, char *buf, size_t buflen);
/* A memory setting: a bare integer of bytes, or a number with one of
 * PostgreSQL's memory units B, kB, MB, GB, TB (1024 each), rounded to a
 * byte. false (why says more, or is empty) when it is neither. */
bool config_parse_bytes(const char *s, int64_t *out, char *why, size_t whylen);
/* v bytes with the largest unit that is exact ("64MB", "1536kB", "100B"). */
void config_format_bytes(int64_t v, char *buf, size_t buflen);

/* Names of enum values, as spelled in the ini file. */
const char *config_pool_mode_name(enum pool_mode m);
/* A [general] key the TLS contexts are built from (client_tls_*,
 * server_tls_*, in either file format): a change rebuilds them. */
bool config_key_is_tls(const char *key);
/* A key of the TLS towards servers (server_tls_*, server_tls13_*). */
bool config_key_is_server_tls(const char *key);
/* A *_tls_protocols list (tlsv1.0, tlsv1.1, tlsv1.2, tlsv1.3, all,
 * secure, legacy, default; commas or spaces between) as the lowest and
 * highest version it names (10 .. 13). false: a word it does not know
 * (why says so). */
bool config_tls_versions(const char *list, int *min, int *max, char *why, size_t whylen);
/* The admin console's database names, "pgcat" and "pgbouncer" (a pool
 * may not take them in a pgbouncer.ini, and auth_dbname may not name them). */
bool config_is_console_db(const char *name);
/* Do a and b ask for the same TLS towards servers (server_tls_*, and a
 * pgbouncer.ini's own server_tls_protocols and ciphers as written)? */
bool config_server_tls_same(const struct config *a, const struct config *b);
const char *config_log_level_name(enum log_level l);
const char *config_server_role_name(enum server_role r);

/* The key table of [general], for SHOW CONFIG and SET (SPEC §7). */
enum config_key_type { CONFIG_KEY_INT, CONFIG_KEY_INT64, CONFIG_KEY_BOOL, CONFIG_KEY_STRING, CONFIG_KEY_ENUM, CONFIG_KEY_LIST };
struct config_key_info {
	const char *name;
	enum config_key_type type;
	const char *default_value;  /* as written in the ini */
	bool reloadable;            /* false: listen_addr, listen_port, unix_socket_dir, workers */
};
const struct config_key_info *config_general_keys(size_t *n);
/* Current value of a [general] key, formatted as in the ini, into buf. */
bool config_general_value(const struct config *cfg, const char *key, char *buf, size_t buflen);

/* SHOW CONFIG (SPEC §7): row i of the running configuration under the
 * names of the file it came from: pgcat.ini's [general] keys, or
 * PgBouncer's [pgbouncer] settings for a pgbouncer.ini (as PgBouncer's
 * SHOW CONFIG: value and default as PgBouncer writes them, times in
 * seconds). false past the last row. */
struct config_show_row {
	const char *key;
	char value[1024];
	const char *default_value;   /* NULL: none */
	bool changeable;
	bool value_null;             /* a setting PgBouncer shows as NULL */
};
bool config_show_row(const struct config *cfg, size_t i, struct config_show_row *row);

/* Every key of every section with its effective value, as an ini file
 * (inherited values resolved, secrets hidden, durations with their unit):
 * what `pgcat -t` prints. */
void config_print(const struct config *cfg, FILE *out);

/* Admin console SET (SPEC §7): change one [general] key of a loaded config
 * at run time. Validates value exactly as the ini parser would (same type,
 * bounds, enum names, checks); refuses keys that are not reloadable
 * (listen_addr, listen_port, unix_socket_dir, workers) and unknown keys.
 * On failure leaves cfg untouched and writes a one-line reason into err. */
bool config_general_set(struct config *cfg, const char *key, const char *value, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* The same, and accept (may be NULL) sees the configuration as it would be
 * (cfg with the new [general]) once the value passed every check: false
 * (its reason in err) leaves cfg untouched too. */
typedef bool (*config_set_accept_fn)(const struct config *trial, void *arg, char *err, size_t errlen);
bool config_general_set_if(struct config *cfg, const char *key, const char *value, config_set_accept_fn accept,
			   void *arg, char *err, size_t errlen) __attribute__((warn_unused_result));

/* prepared_statements_max_length: is a Parse or Query of total bytes (its
 * header included) too long to be held whole for the prepared-statement
 * rewriting (SPEC §10)? Of such a message only PROTO_LONG_HEAD bytes are
 * read before the rewriting decides; the rest streams through or is
 * discarded. */
static inline bool config_prep_too_long(const struct config_general *g, uint32_t total)
{
	return total > (uint32_t)g->prepared_statements_max_length;
}

#endif
