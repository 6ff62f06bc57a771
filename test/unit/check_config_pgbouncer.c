/* SPDX-License-Identifier: MIT */
/*
 * Tests of config_pgbouncer.c and config_pgbouncer_keys.c: pgbouncer.ini
 * texts read into the same snapshot as pgcat.ini's, with PgBouncer's line
 * rules, connection strings, units and defaults; each setting pgcat does
 * not honour refused or warned about by name; %include; SHOW CONFIG and
 * SET under PgBouncer's names.
 */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h. */
#include "../../include/config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../include/hba.h"
#include "check_suites.h"

#define DB "[databases]\ndb = host=127.0.0.1\n"

static struct config *load(const char *text, struct config_problems *pr)
{
	return config_load_string(text, "pgb.ini", pr);
}

static void dump(const struct config_problems *pr, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < pr->n && used < len; i++) {
		int w = snprintf(buf + used, len - used, "\n  [%d] %s", pr->items[i].kind, pr->items[i].message);
		if (w < 0)
			break;
		used += (size_t)w;
	}
}

static const struct config_problem *find(const struct config_problems *pr, enum config_problem_kind kind,
					  const char *start)
{
	for (size_t i = 0; i < pr->n; i++)
		if (pr->items[i].kind == kind && strncmp(pr->items[i].message, start, strlen(start)) == 0)
			return &pr->items[i];
	return NULL;
}

static struct config *load_clean(const char *text, struct config_problems *pr)
{
	struct config *cfg = load(text, pr);
	char buf[4096];
	dump(pr, buf, sizeof(buf));
	ck_assert_msg(cfg != NULL && pr->n == 0, "expected a clean load, got:%s", buf);
	ck_assert_int_eq(cfg->format, CONFIG_FORMAT_PGBOUNCER);
	return cfg;
}

/* The text loads (or not, as loads says) with a problem of kind at line
 * whose message starts with start. */
static void expect_problem(const char *text, bool loads, enum config_problem_kind kind, int line, const char *start)
{
	struct config_problems pr;
	struct config *cfg = load(text, &pr);
	char buf[4096];
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg((cfg != NULL) == loads, "expected %s for:\n%s\ngot:%s", loads ? "a load" : "a rejection", text, buf);
	const struct config_problem *p = find(&pr, kind, start);
	ck_assert_msg(p != NULL, "no problem of kind %d starting with '%s'; got:%s", kind, start, buf);
	ck_assert_int_eq(p->line, line);
	config_free(cfg);
	config_problems_free(&pr);
}

/* One [pgbouncer] line (line 3, after a database) and what comes of it. */
static void expect_setting(const char *kv, bool loads, enum config_problem_kind kind, const char *start)
{
	char text[1024];
	snprintf(text, sizeof(text), DB "[pgbouncer]\n%s\n", kv);
	expect_problem(text, loads, kind, 4, start);
}

static void expect_clean_setting(const char *kv)
{
	char text[1024];
	snprintf(text, sizeof(text), DB "[pgbouncer]\n%s\n", kv);
	struct config_problems pr;
	config_free(load_clean(text, &pr));
	config_problems_free(&pr);
}

START_TEST(test_defaults)
{
	struct config_problems pr;
	struct config *cfg = load_clean("[pgbouncer]\n" DB, &pr);
	const struct config_general *g = &cfg->general;
	/* PgBouncer's defaults, in pgcat's units. */
	ck_assert_int_eq(g->pool_mode, POOL_MODE_SESSION);
	ck_assert_int_eq(g->default_pool_size, 20);
	ck_assert_int_eq(g->max_client_conn, 100);
	ck_assert_int_eq(g->listen_port, 6432);
	ck_assert_uint_eq(g->n_listen_addr, 0);   /* the Unix socket only */
	ck_assert_str_eq(g->unix_socket_dir, "/tmp");
	ck_assert_int_eq(g->auth_type, AUTH_TYPE_MD5);
	ck_assert_int_eq(g->connect_timeout, 15000);
	ck_assert_int_eq(g->client_login_timeout, 60000);
	ck_assert_int_eq(config_client_login_timeout(cfg), 60000);
	ck_assert_int_eq(g->query_wait_timeout, 120000);
	ck_assert_int_eq(g->idle_timeout, 600000);
	ck_assert_int_eq(g->server_lifetime, 3600000);
	ck_assert_int_eq(g->reserve_pool_timeout, 5000);
	ck_assert_int_eq(g->healthcheck_delay, 30000);
	ck_assert_str_eq(g->healthcheck_query, "");   /* PgBouncer's <empty> */
	ck_assert_int_eq(g->dns_max_ttl, 15000);
	ck_assert(g->prepared_statements);
	ck_assert_int_eq(g->prepared_statements_cache_size, 200);
	ck_assert_str_eq(g->auth_query, "SELECT rolname, CASE WHEN rolvaliduntil < now() THEN NULL ELSE rolpassword "
					"END FROM pg_authid WHERE rolname=$1 AND rolcanlogin");
	ck_assert_str_eq(g->admin_username, "");   /* the console: admin_users and stats_users only */
	ck_assert_int_eq(g->log_level, LOG_LEVEL_INFO);
	/* The database: one shard, the host as its primary, PgBouncer's port. */
	ck_assert_uint_eq(cfg->n_pools, 1);
	const struct config_pool *db = &cfg->pools[0];
	ck_assert_str_eq(db->name, "db");
	ck_assert_int_eq(db->pool_mode, POOL_MODE_SESSION);
	ck_assert_uint_eq(db->n_shards, 1);
	ck_assert_str_eq(db->shards[0].database, "db");
	ck_assert_uint_eq(db->shards[0].n_servers, 1);
	ck_assert_str_eq(db->shards[0].servers[0].host, "127.0.0.1");
	ck_assert_int_eq(db->shards[0].servers[0].port, 5432);
	ck_assert_int_eq(db->shards[0].servers[0].role, SERVER_ROLE_PRIMARY);
	ck_assert_ptr_null(db->server_username);
	ck_assert_int_eq(config_user_pool_size(cfg, db, NULL), 20);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_units)
{
	struct config_problems pr;
	struct config *cfg = load_clean(DB "[pgbouncer]\n"
					"query_wait_timeout = 30.5\n"
					"server_lifetime = 0\n"        /* PgBouncer: use each connection once */
					"server_connect_timeout = 0\n"  /* no limit */
					"reserve_pool_timeout = 0\n"    /* the reserve is never used */
					"client_idle_timeout = 0.0005\n" /* not 0: never rounded to "off" */
					"idle_transaction_timeout = 7\n"
					"tcp_keepidle = 30\n"           /* seconds in both */
					"tcp_user_timeout = 2500\n"     /* ms in both */
					"stats_period = 15\n"
					"max_client_conn = 0x10\n"      /* C's notation, as PgBouncer reads it */
					"unix_socket_mode = 0777\n"
					"server_check_query = SELECT 2\n"
					"server_fast_close = 1\n",
					&pr);
	const struct config_general *g = &cfg->general;
	ck_assert_str_eq(g->healthcheck_query, "SELECT 2");
	ck_assert(g->server_fast_close);
	ck_assert_int_eq(g->query_wait_timeout, 30500);
	ck_assert_int_eq(g->server_lifetime, 1);
	ck_assert_int_eq(g->connect_timeout, INT_MAX);
	ck_assert_int_eq(g->reserve_pool_timeout, INT_MAX);
	ck_assert_int_eq(g->client_idle_timeout, 1);
	ck_assert_int_eq(g->idle_transaction_timeout, 7000);
	ck_assert_int_eq(g->tcp_keepidle, 30);
	ck_assert_int_eq(g->tcp_user_timeout, 2500);
	ck_assert_int_eq(g->stats_period, 15);
	ck_assert_int_eq(g->max_client_conn, 16);
	/* SHOW CONFIG gives them back in seconds, as PgBouncer's does. */
	struct config_show_row row;
	bool seen_wait = false, seen_life = false, seen_connect = false;
	for (size_t i = 0; config_show_row(cfg, i, &row); i++) {
		if (strcmp(row.key, "query_wait_timeout") == 0) {
			ck_assert_str_eq(row.value, "30.5");
			ck_assert_str_eq(row.default_value, "120");
			ck_assert(row.changeable);
			seen_wait = true;
		} else if (strcmp(row.key, "server_lifetime") == 0) {
			ck_assert_str_eq(row.value, "0");
			seen_life = true;
		} else if (strcmp(row.key, "server_connect_timeout") == 0) {
			ck_assert_str_eq(row.value, "0");
			seen_connect = true;
		} else if (strcmp(row.key, "listen_port") == 0) {
			ck_assert(!row.changeable);
		}
		ck_assert_str_ne(row.key, "service_name");   /* Windows only */
	}
	ck_assert(seen_wait && seen_life && seen_connect);
	config_free(cfg);
	config_problems_free(&pr);

	/* pgcat's units are not PgBouncer's notation. */
	expect_setting("query_wait_timeout = 5s", false, CONFIG_PROBLEM_ERROR,
		       "pgb.ini:4: [pgbouncer] query_wait_timeout: must be a number of seconds");
	expect_setting("query_wait_timeout = -1", false, CONFIG_PROBLEM_ERROR,
		       "pgb.ini:4: [pgbouncer] query_wait_timeout: must be a number of seconds");
	expect_setting("query_timeout = 3000000", false, CONFIG_PROBLEM_ERROR,
		       "pgb.ini:4: [pgbouncer] query_timeout: must be at most 2147483.647 seconds");
	expect_setting("max_client_conn = many", false, CONFIG_PROBLEM_ERROR,
		       "pgb.ini:4: [pgbouncer] max_client_conn: must be an integer, got \"many\"");
	/* pgcat's ranges, under PgBouncer's name. */
	expect_setting("default_pool_size = 0", false, CONFIG_PROBLEM_ERROR,
		       "pgb.ini:4: [pgbouncer] default_pool_size: must be an integer between 1 and 10000");
	expect_setting("pool_mode = sometimes", false, CONFIG_PROBLEM_ERROR,
		       "pgb.ini:4: [pgbouncer] pool_mode: must be one of session | transaction | statement");
	/* Booleans are numbers in PgBouncer. */
	cfg = load_clean(DB "[pgbouncer]\ntcp_keepalive = 0\nlog_connections = 0\nserver_round_robin = 1\n", &pr);
	ck_assert(!cfg->general.tcp_keepalive && !cfg->general.log_connections && cfg->general.server_round_robin);
	config_free(cfg);
	config_problems_free(&pr);
	expect_setting("tcp_keepalive = yes", false, CONFIG_PROBLEM_ERROR,
		       "pgb.ini:4: [pgbouncer] tcp_keepalive: must be an integer");
	/* min_pool_size above the pool size: PgBouncer caps it, no error. */
	expect_clean_setting("min_pool_size = 50");
}
END_TEST

START_TEST(test_refused_and_warned)
{
	/* Settings pgcat cannot honour, each named. */
	static const struct {
		const char *kv;
		bool loads;
		enum config_problem_kind kind;
		const char *start;
	} cases[] = {
		{ "pool_mode = bogus", false, CONFIG_PROBLEM_ERROR, "pool_mode: must be one of session | transaction | statement" },
		{ "auth_type = any", false, CONFIG_PROBLEM_ERROR, "auth_type: \"any\" is not supported yet" },
		{ "disable_pqexec = 1", false, CONFIG_PROBLEM_ERROR, "disable_pqexec: \"1\" is refused" },
		{ "resolv_conf = /etc/other.conf", false, CONFIG_PROBLEM_ERROR, "resolv_conf: \"/etc/other.conf\" is refused" },
		{ "unix_socket_mode = 0700", false, CONFIG_PROBLEM_ERROR, "unix_socket_mode: \"0700\" is refused" },
		{ "unix_socket_dir = @pgb", false, CONFIG_PROBLEM_ERROR, "unix_socket_dir: \"@pgb\": sockets in the abstract" },
		{ "server_tls_protocols = tlsv9", false, CONFIG_PROBLEM_ERROR, "server_tls_protocols: \"tlsv9\" is no TLS version" },
		{ "user = nosuchuser-pgcat-test", false, CONFIG_PROBLEM_ERROR, "user: no such system user" },
		{ "server_tls_sslmode = allow", true, CONFIG_PROBLEM_WARNING, "server_tls_sslmode: \"allow\" is taken as prefer" },
		{ "tcp_defer_accept = 1", true, CONFIG_PROBLEM_WARNING, "tcp_defer_accept: \"1\" is not honoured" },
		{ "listen_backlog = 4096", true, CONFIG_PROBLEM_WARNING, "listen_backlog: \"4096\" is not honoured" },
		{ "server_check_query =", true, CONFIG_PROBLEM_WARNING, "server_check_query: pgcat cannot turn the server check off" },
		{ "cancel_wait_timeout = 10", true, CONFIG_PROBLEM_WARNING, "cancel_wait_timeout: \"10\" is not honoured" },
		{ "log_stats = 1", true, CONFIG_PROBLEM_WARNING, "log_stats: \"1\" is not honoured" },
		{ "log_pooler_errors = 0", true, CONFIG_PROBLEM_WARNING, "log_pooler_errors: \"0\" is not honoured" },
		{ "server_reset_query_always = 1", true, CONFIG_PROBLEM_WARNING, "server_reset_query_always: \"1\"" },
		{ "application_name_add_host = 1", true, CONFIG_PROBLEM_WARNING, "application_name_add_host: \"1\"" },
		{ "syslog_ident = pgbouncer", true, CONFIG_PROBLEM_WARNING, "syslog_ident: \"pgbouncer\" is not honoured" },
		{ "syslog_facility = local0", true, CONFIG_PROBLEM_WARNING, "syslog_facility: \"local0\" is not honoured" },
		{ "suspend_timeout = 5", true, CONFIG_PROBLEM_WARNING, "suspend_timeout: \"5\" is not honoured" },
		{ "dns_nxdomain_ttl = 15", true, CONFIG_PROBLEM_WARNING, "dns_nxdomain_ttl: \"15\" is not honoured" },
		{ "dns_zone_check_period = 60", true, CONFIG_PROBLEM_WARNING, "dns_zone_check_period: \"60\"" },
		{ "tcp_socket_buffer = 65536", true, CONFIG_PROBLEM_WARNING, "tcp_socket_buffer: \"65536\"" },
		{ "unix_socket_group = postgres", true, CONFIG_PROBLEM_WARNING, "unix_socket_group: \"postgres\"" },
		{ "client_tls_ecdhcurve = prime256v1", true, CONFIG_PROBLEM_WARNING, "client_tls_ecdhcurve:" },
		{ "client_tls_dheparams = legacy", true, CONFIG_PROBLEM_WARNING, "client_tls_dheparams:" },
		{ "pkt_buf = 8192", true, CONFIG_PROBLEM_WARNING, "pkt_buf: \"8192\" is not honoured" },
		{ "sbuf_loopcnt = 0", true, CONFIG_PROBLEM_WARNING, "sbuf_loopcnt: \"0\" is not honoured" },
		{ "scram_iterations = 10000", true, CONFIG_PROBLEM_WARNING, "scram_iterations: \"10000\" is not honoured" },
		{ "conffile = /etc/other.ini", true, CONFIG_PROBLEM_WARNING, "conffile: \"/etc/other.ini\" is not honoured" },
		{ "listen_port = 6432x", false, CONFIG_PROBLEM_ERROR, "listen_port: must be an integer" },
		/* Unknown settings: pgcat.ini's rule (an error under -t, a warning at start). */
		{ "Listen_Port = 6000", true, CONFIG_PROBLEM_UNKNOWN, "Listen_Port: unknown setting (did you mean listen_port?)" },
		{ "workers = 4", true, CONFIG_PROBLEM_UNKNOWN, "workers: unknown setting: PgBouncer 1.25 has no such one" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char start[256];
		snprintf(start, sizeof(start), "pgb.ini:4: [pgbouncer] %s", cases[i].start);
		expect_setting(cases[i].kv, cases[i].loads, cases[i].kind, start);
	}
	/* The values pgcat's behaviour matches pass in silence. */
	static const char *const fine[] = {
		"client_tls_protocols = secure", "client_tls_protocols = tlsv1.2,tlsv1.3", "client_tls_protocols = tlsv1.3",
		"client_tls_protocols = all", "client_tls_ciphers = HIGH:!aNULL", "server_tls13_ciphers = TLS_AES_256_GCM_SHA384", "server_tls_ciphers = fast",
		"unix_socket_mode = 511", "listen_backlog = 128", "query_wait_notify = 5", "server_login_retry = 0.5",
		"tcp_defer_accept = 0", "so_reuseport = 1", "ignore_startup_parameters = extra_float_digits",
		"track_extra_parameters = search_path", "job_name = x", "autodb_idle_timeout = 60",
		"syslog_ident = pgcat", "log_stats = 0", "max_db_client_connections = 10", "max_user_client_connections = 3", "auth_ldap_options = ldapurl=\"ldap://127.0.0.1/dc=x?uid?sub\"",
		"cancel_wait_timeout = 5", "server_check_query = <empty>", "server_check_query = select 1", "server_fast_close = 1", "client_tls13_ciphers =",
	};
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
		expect_clean_setting(fine[i]);
}
END_TEST

START_TEST(test_connstrings)
{
	struct config_problems pr;
	struct config *cfg = load(
		"[databases]\n"
		"forced = host=db1,db2  port=6000 dbname=real user=svc password='it''s a secret' pool_size=5 "
		"min_pool_size=2 reserve_pool=3 max_db_connections=9 server_lifetime=1.5 pool_mode=transaction "
		"connect_query='SET search_path = a, b' application_name='my app' client_encoding=UTF8 "
		"datestyle=ISO timezone=UTC auth_user=lookup auth_query='SELECT u, p FROM f($1)' auth_dbname=other\n"
		"other = host=::1 reserve_pool_size=4\n"
		"sock = host=/run/postgresql/ port=5433\n"
		"default =\n"
		"'quoted name' = host=x\n"
		"[pgbouncer]\nunix_socket_dir = /var/run/pgb\n",
		&pr);
	/* Only: auth_user is in no auth_file (it logs in without a password). */
	ck_assert_ptr_nonnull(cfg);
	ck_assert_uint_eq(pr.n, 1);
	ck_assert_str_eq(pr.items[0].message, "pgb.ini:2: [databases] forced: auth_user: user \"lookup\" is not in "
			 "auth_file (auth_file is not set): auth_query logs in as it without a password");
	ck_assert_uint_eq(cfg->n_pools, 5);
	const struct config_pool *f = config_find_pool(cfg, "forced");
	ck_assert_str_eq(f->server_username, "svc");
	ck_assert_str_eq(f->server_password, "it's a secret");
	/* The forced user, in no auth_file: a user of its own that no client
	 * logs in as, whose pool the database's clients share. */
	ck_assert_uint_eq(f->n_users, 1);
	ck_assert(config_find_user(f, "svc")->server_only);
	ck_assert_ptr_null(config_find_user(f, "svc")->password);
	ck_assert_uint_eq(config_find_pool(cfg, "other")->n_users, 0);
	ck_assert_int_eq(f->pool_size, 5);
	ck_assert_int_eq(f->min_pool_size, 2);
	ck_assert_int_eq(f->reserve_pool_size, 3);
	ck_assert_int_eq(f->max_db_connections, 9);
	ck_assert_int_eq(f->server_lifetime, 1500);
	ck_assert_int_eq(f->pool_mode, POOL_MODE_TRANSACTION);
	ck_assert_str_eq(f->connect_query, "SET search_path = a, b");
	ck_assert_str_eq(f->application_name, "my app");
	ck_assert_str_eq(f->client_encoding, "UTF8");
	ck_assert_str_eq(f->datestyle, "ISO");
	ck_assert_str_eq(f->timezone, "UTC");
	ck_assert_str_eq(f->auth_user, "lookup");
	ck_assert_str_eq(f->auth_query, "SELECT u, p FROM f($1)");
	ck_assert_str_eq(f->auth_dbname, "other");
	ck_assert_str_eq(config_pool_auth_dbname(cfg, f), "other");
	ck_assert_str_eq(f->shards[0].database, "real");
	/* A host list: equals, any of them takes a transaction. */
	ck_assert_uint_eq(f->shards[0].n_servers, 2);
	ck_assert_str_eq(f->shards[0].servers[1].host, "db2");
	ck_assert_int_eq(f->shards[0].servers[1].port, 6000);
	ck_assert_int_eq(f->shards[0].servers[0].role, SERVER_ROLE_REPLICA);
	ck_assert_int_eq(f->shards[0].servers[1].role, SERVER_ROLE_REPLICA);
	ck_assert_int_eq(f->default_role, DEFAULT_ROLE_ANY);
	ck_assert(!f->query_parser_enabled);
	/* The forced user's name and password go to the servers, whoever the client is. */
	struct config_user client = { .name = "alice", .password = "alicepw", .pool_size = CONFIG_INHERIT,
				      .min_pool_size = CONFIG_INHERIT, .pool_mode = CONFIG_INHERIT,
				      .transaction_timeout = CONFIG_INHERIT, .reserve_pool_size = CONFIG_INHERIT,
				      .max_user_connections = CONFIG_INHERIT };
	ck_assert_str_eq(config_user_server_name(f, &client), "svc");
	ck_assert_str_eq(config_user_server_password(f, &client), "it's a secret");
	ck_assert_int_eq(config_user_pool_size(cfg, f, &client), 5);
	ck_assert_int_eq(config_user_reserve_pool_size(cfg, f, &client), 3);
	ck_assert_int_eq(config_pool_server_lifetime(cfg, f), 1500);
	const struct config_pool *o = config_find_pool(cfg, "other");
	ck_assert_str_eq(o->shards[0].servers[0].host, "::1");
	ck_assert_int_eq(o->reserve_pool_size, 4);
	ck_assert_str_eq(config_user_server_name(o, &client), "alice");
	ck_assert_int_eq(config_pool_server_lifetime(cfg, o), 3600000);
	const struct config_pool *s = config_find_pool(cfg, "sock");
	ck_assert_str_eq(s->shards[0].servers[0].host, "/run/postgresql");
	ck_assert_int_eq(s->shards[0].servers[0].port, 5433);
	/* No host: the Unix socket directory, port 5432. */
	const struct config_pool *d = config_find_pool(cfg, "default");
	ck_assert_str_eq(d->shards[0].servers[0].host, "/var/run/pgb");
	ck_assert_int_eq(d->shards[0].servers[0].port, 5432);
	ck_assert_ptr_nonnull(config_find_pool(cfg, "quoted name"));
	config_free(cfg);
	config_problems_free(&pr);

	/* Bad connection strings, at their line. */
	static const struct {
		const char *entry;
		const char *start;
	} bad[] = {
		{ "db = host='unterminated", "[databases] db: unterminated quoted value of host" },
		{ "db = host=", "[databases] db: empty value for host" },
		{ "db = host=x bogus=1", "[databases] db: unknown connection parameter \"bogus\"" },
		{ "db = host=x port=0", "[databases] db: port must be an integer between 1 and 65535" },
		{ "db = host=x pool_mode=bogus", "[databases] db: pool_mode must be session, transaction or statement" },
		{ "db = host=x load_balance_hosts=sometimes", "[databases] db: load_balance_hosts must be" },
		{ "db = host=bad!name", "[databases] db: host: \"bad!name\" is not a host name" },
		{ "db = host=@abstract", "[databases] db: host \"@abstract\": sockets in the abstract namespace" },
		{ "db = host='x'y", "[databases] db: a blank must follow the closing quote of host" },
		{ "db = =x", "[databases] db: expected key=value" },
		{ "pgbouncer = host=x", "[databases] pgbouncer: the name is reserved for the admin console" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[512], start[256];
		snprintf(text, sizeof(text), "[pgbouncer]\n; a comment\n[databases]\n%s\n", bad[i].entry);
		snprintf(start, sizeof(start), "pgb.ini:4: %s", bad[i].start);
		expect_problem(text, false, CONFIG_PROBLEM_ERROR, 4, start);
	}
	expect_problem("[pgbouncer]\n[databases]\ndb = host=x password=p\n", true, CONFIG_PROBLEM_WARNING, 3,
		       "pgb.ini:3: [databases] db: password= without user= is not used");
	/* As PgBouncer: taken; its logins that need auth_query are refused. */
	expect_problem("[pgbouncer]\n[databases]\ndb = host=x auth_dbname=nowhere\n", true, CONFIG_PROBLEM_WARNING, 3,
		       "pgb.ini:3: [databases] db: auth_dbname \"nowhere\" is no database of [databases]: logins that "
		       "need auth_query will be refused");
	expect_problem("[pgbouncer]\nauth_dbname = pgbouncer\n" DB, false, CONFIG_PROBLEM_ERROR, 2,
		       "pgb.ini:2: [pgbouncer] auth_dbname: cannot use the reserved \"pgbouncer\" database as an "
		       "auth_dbname");
	expect_problem("[pgbouncer]\n[databases]\ndb = host=a,b,a\n", true, CONFIG_PROBLEM_WARNING, 3,
		       "pgb.ini:3: [databases] db: host \"a\" is listed twice: pgcat takes it once");
	/* load_balance_hosts=disable: the first host that is not banned. */
	cfg = load_clean("[pgbouncer]\n[databases]\ndb = host=x,y load_balance_hosts=disable\n"
			 "rr = host=x,y load_balance_hosts=round-robin\n", &pr);
	ck_assert_int_eq(config_find_pool(cfg, "db")->load_balancing_mode, LB_MODE_FIRST);
	ck_assert_int_eq(config_find_pool(cfg, "rr")->load_balancing_mode, LB_MODE_LOC);
	config_free(cfg);
	config_problems_free(&pr);
	expect_problem("[pgbouncer]\nunix_socket_dir =\n[databases]\ndb =\n", false, CONFIG_PROBLEM_ERROR, 4,
		       "pgb.ini:4: [databases] db: no host=, and unix_socket_dir is empty");
	/* A connection string's integers are decimal (PgBouncer's atoi), not C's. */
	cfg = load_clean("[pgbouncer]\npeer_id = 10\n[databases]\ndb = host=a pool_size=010\n[peers]\n010 = host=b\n", &pr);
	ck_assert_int_eq(cfg->pools[0].pool_size, 10);
	ck_assert_int_eq(cfg->peers[0].id, 10);
	config_free(cfg);
	config_problems_free(&pr);
	/* A later entry of the same name wins, as in PgBouncer. */
	cfg = load_clean("[pgbouncer]\n[databases]\ndb = host=a\ndb = host=b\n", &pr);
	ck_assert_uint_eq(cfg->n_pools, 1);
	ck_assert_str_eq(cfg->pools[0].shards[0].servers[0].host, "b");
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_users_and_peers)
{
	struct config_problems pr;
	struct config *cfg = load_clean(DB
		"[users]\n"
		"app = pool_mode=transaction pool_size=7 reserve_pool_size=2 max_user_connections=30 query_timeout=2.5 "
		"idle_transaction_timeout=10 client_idle_timeout=60 transaction_timeout=30\n"
		"quiet = query_timeout=0\n"
		"[peers]\n1 = host=10.0.0.1\n2 = host=fd00::2 port=7432\n"
		"[pgbouncer]\npeer_id = 1\npool_mode = session\n",
		&pr);
	ck_assert_uint_eq(cfg->n_user_settings, 2);
	const struct config_user_settings *us = config_find_user_settings(cfg, "app");
	ck_assert_int_eq(us->pool_mode, POOL_MODE_TRANSACTION);
	ck_assert_int_eq(us->pool_size, 7);
	ck_assert_int_eq(us->query_timeout, 2500);
	ck_assert_int_eq(us->idle_transaction_timeout, 10000);
	ck_assert_int_eq(us->client_idle_timeout, 60000);
	ck_assert_int_eq(us->transaction_timeout, 30000);
	/* [users] above the database and [pgbouncer], below nothing. */
	const struct config_pool *db = &cfg->pools[0];
	struct config_user app = { .name = "app", .pool_size = CONFIG_INHERIT, .min_pool_size = CONFIG_INHERIT,
				   .pool_mode = CONFIG_INHERIT, .transaction_timeout = CONFIG_INHERIT,
				   .reserve_pool_size = CONFIG_INHERIT, .max_user_connections = CONFIG_INHERIT };
	struct config_user other = app;
	other.name = "other";
	ck_assert_int_eq(config_user_pool_mode(cfg, db, &app), POOL_MODE_TRANSACTION);
	ck_assert_int_eq(config_user_pool_mode(cfg, db, &other), POOL_MODE_SESSION);
	ck_assert_int_eq(config_user_pool_size(cfg, db, &app), 7);
	ck_assert_int_eq(config_user_pool_size(cfg, db, &other), 20);
	ck_assert_int_eq(config_user_reserve_pool_size(cfg, db, &app), 2);
	ck_assert_int_eq(config_user_max_user_connections(cfg, db, &app), 30);
	ck_assert_int_eq(config_user_query_timeout(cfg, &app), 2500);
	ck_assert_int_eq(config_user_idle_transaction_timeout(cfg, &app), 10000);
	ck_assert_int_eq(config_user_client_idle_timeout(cfg, &app), 60000);
	ck_assert_int_eq(config_user_transaction_timeout(cfg, &app), 30000);
	ck_assert_int_eq(config_user_query_timeout(cfg, &other), 0);
	/* 0 at user level: not set, [pgbouncer]'s applies. */
	ck_assert_int_eq(config_find_user_settings(cfg, "quiet")->query_timeout, CONFIG_INHERIT);
	ck_assert(config_any_client_idle_timeout(cfg));
	ck_assert(config_any_idle_transaction_timeout(cfg));
	ck_assert_uint_eq(cfg->n_peers, 2);
	ck_assert_str_eq(cfg->peers[0].host, "10.0.0.1");
	ck_assert_int_eq(cfg->peers[0].port, 6432);
	ck_assert_str_eq(cfg->peers[1].host, "fd00::2");
	ck_assert_int_eq(cfg->peers[1].port, 7432);
	ck_assert_int_eq(cfg->general.peer_id, 1);
	config_free(cfg);
	config_problems_free(&pr);

	expect_problem(DB "[users]\napp = pool_mode=bogus\n[pgbouncer]\n", false, CONFIG_PROBLEM_ERROR, 4,
		       "pgb.ini:4: [users] app: pool_mode must be session, transaction or statement");
	expect_problem(DB "[users]\napp = bogus=1\n[pgbouncer]\n", false, CONFIG_PROBLEM_ERROR, 4,
		       "pgb.ini:4: [users] app: unknown user parameter \"bogus\"");
	cfg = load(DB "[users]\napp = max_user_client_connections=5\n[pgbouncer]\nmax_user_client_connections = 9\n"
		      "max_db_client_connections = 7\n", &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_uint_eq(pr.n, 0);
	ck_assert_int_eq(cfg->general.server_login_retry, 15000);   /* PgBouncer's default, in seconds */
	ck_assert_int_eq(config_user_max_client_connections(cfg, "app"), 5);
	ck_assert_int_eq(config_user_max_client_connections(cfg, "other"), 9);
	ck_assert_int_eq(config_pool_max_db_client_connections(cfg, &cfg->pools[0]), 7);
	config_free(cfg);
	config_problems_free(&pr);
	/* Unix sockets as libpq names them: a directory (a trailing '/' names
	 * the same), or '@' and a name in the abstract namespace. */
	cfg = load_clean(DB "[peers]\n1 = host=/tmp/pgb1/ port=6001\n2 = host=@pgb2\n[pgbouncer]\npeer_id = 1\n", &pr);
	ck_assert_uint_eq(cfg->n_peers, 2);
	ck_assert_str_eq(cfg->peers[0].host, "/tmp/pgb1");
	ck_assert_int_eq(cfg->peers[0].port, 6001);
	ck_assert_str_eq(cfg->peers[1].host, "@pgb2");
	ck_assert_int_eq(cfg->peers[1].port, 6432);
	config_free(cfg);
	config_problems_free(&pr);
	expect_problem(DB "[peers]\n1 = host=@\n[pgbouncer]\n", false, CONFIG_PROBLEM_ERROR, 4,
		       "pgb.ini:4: [peers] 1: host: a socket name must follow '@'");
	char text[512], dir[128];
	memset(dir, 'd', sizeof(dir));
	dir[0] = '/';
	dir[93] = '\0';   /* with "/.s.PGSQL.65535" and a NUL, more than sun_path's 108 bytes */
	snprintf(text, sizeof(text), DB "[peers]\n1 = host=%s\n[pgbouncer]\n", dir);
	expect_problem(text, false, CONFIG_PROBLEM_ERROR, 4,
		       "pgb.ini:4: [peers] 1: host: a Unix socket directory must be at most 92 characters");
	dir[0] = '@';
	snprintf(text, sizeof(text), DB "[peers]\n1 = host=%s\n[pgbouncer]\n", dir);
	expect_problem(text, false, CONFIG_PROBLEM_ERROR, 4,
		       "pgb.ini:4: [peers] 1: host: a socket name in the abstract namespace must be at most 92");
	expect_problem(DB "[peers]\n1 = port=1\n[pgbouncer]\n", false, CONFIG_PROBLEM_ERROR, 4,
		       "pgb.ini:4: [peers] 1: host was not given");
	expect_problem(DB "[peers]\n99999 = host=x\n[pgbouncer]\n", false, CONFIG_PROBLEM_ERROR, 4,
		       "pgb.ini:4: [peers] 99999: a peer id must be an integer between 1 and 16383");
	expect_problem(DB "[peers]\n1 = host=x pool_size=4\n[pgbouncer]\npeer_id = 1\n", true, CONFIG_PROBLEM_WARNING,
		       4, "pgb.ini:4: [peers] 1: pool_size is not honoured");
}
END_TEST

START_TEST(test_lines)
{
	/* No inline comments: a ';' is part of the value, as PgBouncer reads it. */
	struct config_problems pr;
	struct config *cfg = load_clean("  [pgbouncer]\n"
					"\t# comment\n"
					"server_reset_query = DISCARD ALL ; x\n"
					"'admin_users' = a, b\n"
					"[databases]\n"
					"a.b-c = host=x\n",
					&pr);
	ck_assert_str_eq(cfg->general.server_reset_query, "DISCARD ALL ; x");
	ck_assert_str_eq(cfg->general.admin_users, "a, b");
	ck_assert_ptr_nonnull(config_find_pool(cfg, "a.b-c"));
	config_free(cfg);
	config_problems_free(&pr);

	/* A long line: no limit (pgcat.ini's inih has one). */
	char text[4096];
	snprintf(text, sizeof(text), "[pgbouncer]\nserver_reset_query = SELECT '%01000d'\n" DB, 0);
	cfg = load_clean(text, &pr);
	ck_assert_uint_eq(strlen(cfg->general.server_reset_query), 1000 + 9);
	config_free(cfg);
	config_problems_free(&pr);

	expect_problem("[pgbouncer]\nlisten_port 6432\n" DB, false, CONFIG_PROBLEM_ERROR, 2,
		       "pgb.ini:2: expected \"key = value\"");
	expect_problem("[pgbouncer\n" DB, false, CONFIG_PROBLEM_ERROR, 1, "pgb.ini:1: section header");
	expect_problem("[pgbouncer] junk\n" DB, false, CONFIG_PROBLEM_ERROR, 1, "pgb.ini:1: [pgbouncer]: unexpected text");
	expect_problem("[pgbouncer]\n[bogus]\nx = 1\n" DB, true, CONFIG_PROBLEM_UNKNOWN, 2,
		       "pgb.ini:2: [bogus]: unknown section");
	expect_problem(DB, false, CONFIG_PROBLEM_ERROR, 0, "pgb.ini: no [pgbouncer] section");
	/* A pgcat.ini with a stray [pgbouncer] section stays a pgcat.ini. */
	cfg = load("[general]\n[pgbouncer]\nx = 1\n[pools.db.shards.0]\nservers = h:1:primary\n", &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_int_eq(cfg->format, CONFIG_FORMAT_PGCAT);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

static char *tmpdir(void)
{
	char *dir = strdup("/tmp/pgcat-check-pgb-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	return dir;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fputs(text, f) >= 0, 1);
	fclose(f);
}

static void remove_files(const char *dir, const char *const *names, size_t n)
{
	char path[512];
	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (unlink(path) != 0)
			rmdir(path);
	}
	rmdir(dir);
}

/* config_load from the working directory cwd (then back): a
 * pgbouncer.ini's relative auth_file, auth_hba_file and auth_ident_file
 * are taken from there, as PgBouncer opens them. */
static struct config *load_in(const char *cwd, const char *path, struct config_problems *pr)
{
	char was[PATH_MAX];
	ck_assert_ptr_nonnull(getcwd(was, sizeof was));
	ck_assert_int_eq(chdir(cwd), 0);
	struct config *cfg = config_load(path, pr);
	ck_assert_int_eq(chdir(was), 0);
	return cfg;
}

START_TEST(test_include_and_auth_file)
{
	char *dir = tmpdir();
	static const char *const names[] = { "pgbouncer.ini", "common.ini", "sub/users.ini", "userlist.txt",
					     "loop.ini", "sub" };
	char path[512];
	snprintf(path, sizeof(path), "%s/sub", dir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	write_file(dir, "userlist.txt", "\"app\" \"apppw\"\n\"svc\" \"md5aaaabbbbccccddddeeeeffff00001111\"\n"
					 "\"admin\" \"adminpw\"\n");
	/* Relative to the including file's directory, nested. */
	write_file(dir, "pgbouncer.ini", "[pgbouncer]\nlisten_port = 7000\n%include common.ini\nlisten_addr = *\n");
	write_file(dir, "common.ini", "auth_file = userlist.txt\nadmin_users = admin\n%include sub/users.ini\n");
	write_file(dir, "sub/users.ini", "[databases]\nforced = host=x user=svc\nmine = host=x\n"
					  "[pgbouncer]\nlisten_port = 7001\n");
	snprintf(path, sizeof(path), "%s/pgbouncer.ini", dir);
	struct config_problems pr;
	char buf[4096];
	/* auth_file = userlist.txt: from the working directory, not the
	 * file's (PgBouncer's rule), so not found from / */
	struct config *cfg = load_in("/", path, &pr);
	ck_assert_ptr_null(cfg);
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(strstr(buf, "auth_file: userlist.txt: cannot open") != NULL, "%s", buf);
	config_problems_free(&pr);
	cfg = load_in(dir, path, &pr);
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(cfg != NULL && pr.n == 0, "%s", buf);
	ck_assert_int_eq(cfg->general.listen_port, 7001);   /* the later line wins */
	ck_assert_uint_eq(cfg->general.n_listen_addr, 1);
	/* back in the main file, in the section the included one left: [pgbouncer] */
	ck_assert_str_eq(cfg->general.listen_addr[0], "*");
	/* auth_file's users join every database; the forced user's password
	 * comes from its line of the file. */
	const struct config_pool *forced = config_find_pool(cfg, "forced");
	ck_assert_uint_eq(forced->n_users, 3);
	ck_assert(forced->users[0].from_auth_file);
	ck_assert_str_eq(forced->server_password, "md5aaaabbbbccccddddeeeeffff00001111");
	ck_assert_str_eq(config_user_server_name(forced, &forced->users[0]), "svc");
	const struct config_pool *mine = config_find_pool(cfg, "mine");
	ck_assert_str_eq(config_user_server_name(mine, &mine->users[0]), "app");
	ck_assert_str_eq(config_user_server_password(mine, &mine->users[0]), "apppw");
	/* SHOW CONFIG names the file pgcat reads. */
	struct config_show_row row;
	bool seen = false;
	for (size_t i = 0; config_show_row(cfg, i, &row); i++) {
		if (strcmp(row.key, "conffile") == 0) {
			ck_assert_str_eq(row.value, path);
			seen = true;
		}
	}
	ck_assert(seen);
	config_free(cfg);
	config_problems_free(&pr);

	/* A missing include, at its line; nesting past 10. */
	write_file(dir, "pgbouncer.ini", "[pgbouncer]\n\n%include nowhere.ini\n" DB);
	cfg = config_load(path, &pr);
	ck_assert_ptr_null(cfg);
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(pr.n >= 1 && pr.items[0].line == 3 && strstr(pr.items[0].message, "nowhere.ini: cannot open"),
		      "%s", buf);
	config_problems_free(&pr);
	write_file(dir, "pgbouncer.ini", "[pgbouncer]\n%include loop.ini\n" DB);
	write_file(dir, "loop.ini", "%include loop.ini\n");
	cfg = config_load(path, &pr);
	ck_assert_ptr_null(cfg);
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(strstr(buf, "loop.ini:1: %include nested more than 10 deep") != NULL, "%s", buf);
	config_problems_free(&pr);
	write_file(dir, "pgbouncer.ini", "[pgbouncer]\n%include /dev/null\n" DB);
	cfg = config_load(path, &pr);
	ck_assert_ptr_null(cfg);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_ERROR, path));
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(strstr(buf, ":2: %include /dev/null: not a regular file") != NULL, "%s", buf);
	config_problems_free(&pr);
	/* An error in an included file names that file and its line. */
	write_file(dir, "pgbouncer.ini", "[pgbouncer]\n%include common.ini\n" DB);
	write_file(dir, "common.ini", "\nmax_client_conn = lots\n");
	cfg = config_load(path, &pr);
	ck_assert_ptr_null(cfg);
	snprintf(buf, sizeof(buf), "%s/common.ini:2: [pgbouncer] max_client_conn: must be an integer", dir);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_ERROR, buf));
	config_problems_free(&pr);
	/* So does a check across settings, for a setting of an included file. */
	write_file(dir, "common.ini", "\n\nclient_tls_sslmode = require\n");
	cfg = config_load(path, &pr);
	ck_assert_ptr_null(cfg);
	snprintf(buf, sizeof(buf), "%s/common.ini:3: [pgbouncer] client_tls_sslmode: \"require\" needs "
		 "client_tls_cert_file", dir);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_ERROR, buf));
	config_problems_free(&pr);
	remove_files(dir, names, sizeof(names) / sizeof(names[0]));
	free(dir);
}
END_TEST

START_TEST(test_auth_types)
{
	struct config_problems pr;
	/* hba: the rules of auth_hba_file, read as pgcat.ini's. */
	char *dir = tmpdir();
	write_file(dir, "hba.conf", "host all all 127.0.0.1/32 md5\n");
	char text[1024], path[512];
	snprintf(path, sizeof(path), "%s/pgbouncer.ini", dir);
	write_file(dir, "pgbouncer.ini", "[pgbouncer]\nauth_type = hba\nauth_hba_file = hba.conf\n" DB);
	struct config *cfg = load_in(dir, path, &pr);
	char buf[4096];
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(cfg != NULL && pr.n == 0, "%s", buf);
	ck_assert_ptr_nonnull(cfg->hba);
	ck_assert_uint_eq(cfg->hba->n, 1);
	config_free(cfg);
	config_problems_free(&pr);
	/* Relative to the working directory, as PgBouncer: not the file's. */
	cfg = load_in("/", path, &pr);
	ck_assert_ptr_null(cfg);
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(strstr(buf, "auth_hba_file: hba.conf: cannot open") != NULL, "%s", buf);
	config_problems_free(&pr);
	/* peer, map= and auth_ident_file; cert on a host line (PgBouncer
	 * reads it; without client_tls_ca_file a warning). */
	write_file(dir, "hba.conf", "local all postgres peer\nlocal all all peer map=m\n"
				    "host all all 19.0.0.0/8 cert map=m\n");
	write_file(dir, "ident.conf", "m /^(.*)$ \\1\n");
	write_file(dir, "pgbouncer.ini", "[pgbouncer]\nauth_type = hba\nauth_hba_file = hba.conf\n"
					 "auth_ident_file = ident.conf\n" DB);
	cfg = load_in(dir, path, &pr);
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(cfg != NULL && pr.n == 1 && pr.items[0].kind == CONFIG_PROBLEM_WARNING &&
			      strstr(buf, "hba.conf:3: cert line never lets a login in: no client_tls_ca_file"),
		      "%s", buf);
	ck_assert_uint_eq(cfg->hba->n, 3);
	ck_assert_int_eq(cfg->hba->rules[0].method, HBA_PEER);
	ck_assert_ptr_nonnull(cfg->ident);
	config_free(cfg);
	config_problems_free(&pr);
	/* auth_ident_file counts only with hba, as auth_hba_file. */
	write_file(dir, "pgbouncer.ini", "[pgbouncer]\nauth_type = md5\nauth_ident_file = nowhere.conf\n" DB);
	cfg = load_in(dir, path, &pr);
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(cfg != NULL && pr.n == 0, "%s", buf);
	ck_assert_ptr_null(cfg->ident);
	config_free(cfg);
	config_problems_free(&pr);
	snprintf(text, sizeof(text), "%s/ident.conf", dir);
	unlink(text);
	write_file(dir, "hba.conf", "host all all 127.0.0.1/32 md5\n");
	/* auth_hba_file counts only with auth_type = hba, as in PgBouncer. */
	write_file(dir, "pgbouncer.ini", "[pgbouncer]\nauth_type = md5\nauth_hba_file = hba.conf\n" DB);
	cfg = config_load(path, &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_ptr_null(cfg->hba);
	config_free(cfg);
	config_problems_free(&pr);
	static const char *const names[] = { "hba.conf", "pgbouncer.ini" };
	remove_files(dir, names, 2);
	free(dir);

	expect_problem("[pgbouncer]\nauth_type = hba\n" DB, false, CONFIG_PROBLEM_ERROR, 2,
		       "pgb.ini:2: [pgbouncer] auth_type: \"hba\" needs auth_hba_file");
	expect_problem("[pgbouncer]\nauth_type = cert\n" DB, false, CONFIG_PROBLEM_ERROR, 2,
		       "pgb.ini:2: [pgbouncer] auth_type: \"cert\" needs client_tls_sslmode verify-ca");
	/* cert: TLS with a verified certificate, one rule of pgcat's. */
	snprintf(text, sizeof(text), "[pgbouncer]\nauth_type = cert\nclient_tls_sslmode = verify-ca\n"
		 "client_tls_cert_file = c.pem\nclient_tls_key_file = k.pem\nclient_tls_ca_file = ca.pem\n" DB);
	cfg = load_clean(text, &pr);
	ck_assert_ptr_nonnull(cfg->hba);
	ck_assert_uint_eq(cfg->hba->n, 1);
	ck_assert_int_eq(cfg->hba->rules[0].method, HBA_CERT);
	config_free(cfg);
	config_problems_free(&pr);
	cfg = load_clean("[pgbouncer]\nauth_type = scram-sha-256\n" DB, &pr);
	ck_assert_int_eq(cfg->general.auth_type, AUTH_TYPE_SCRAM);
	config_free(cfg);
	config_problems_free(&pr);
	/* plain: the password in clear, pgcat.ini's "password"; SHOW CONFIG
	 * shows PgBouncer's word, as the file has it. */
	cfg = load_clean("[pgbouncer]\nauth_type = plain\n" DB, &pr);
	ck_assert_int_eq(cfg->general.auth_type, AUTH_TYPE_PASSWORD);
	struct config_show_row row;
	bool shown = false;
	for (size_t i = 0; config_show_row(cfg, i, &row); i++) {
		if (strcmp(row.key, "auth_type") == 0) {
			ck_assert_str_eq(row.value, "plain");
			shown = true;
		}
	}
	ck_assert(shown);
	config_free(cfg);
	config_problems_free(&pr);
	/* auth_user in no file: PgBouncer logs in without a password; a warning. */
	expect_problem("[pgbouncer]\nauth_user = lookup\n" DB, true, CONFIG_PROBLEM_WARNING, 2,
		       "pgb.ini:2: [pgbouncer] auth_user: user \"lookup\" is not in auth_file");
	expect_problem("[pgbouncer]\nauth_dbname = nowhere\n" DB, false, CONFIG_PROBLEM_ERROR, 2,
		       "pgb.ini:2: [pgbouncer] auth_dbname: \"nowhere\" is no database");
}
END_TEST

START_TEST(test_set_and_show)
{
	struct config_problems pr;
	struct config *cfg = load_clean(DB "[pgbouncer]\nquery_wait_timeout = 30\nsyslog_ident = pgcat\n", &pr);
	char err[256];
	/* PgBouncer's names and units. */
	ck_assert_msg(config_general_set(cfg, "query_wait_timeout", "10", err, sizeof err), "%s", err);
	ck_assert_int_eq(cfg->general.query_wait_timeout, 10000);
	ck_assert_msg(config_general_set(cfg, "server_idle_timeout", "'1.5'", err, sizeof err), "%s", err);
	ck_assert_int_eq(cfg->general.idle_timeout, 1500);
	ck_assert_msg(config_general_set(cfg, "max_prepared_statements", "0", err, sizeof err), "%s", err);
	ck_assert(!cfg->general.prepared_statements);
	ck_assert_msg(config_general_set(cfg, "pool_mode", "transaction", err, sizeof err), "%s", err);
	ck_assert_int_eq(cfg->general.pool_mode, POOL_MODE_TRANSACTION);
	ck_assert_msg(config_general_set(cfg, "tcp_keepalive", "0", err, sizeof err), "%s", err);
	ck_assert(!cfg->general.tcp_keepalive);
	/* pgcat's own keys still work. */
	ck_assert_msg(config_general_set(cfg, "ban_time", "30", err, sizeof err), "%s", err);
	ck_assert_int_eq(cfg->general.ban_time, 30);
	/* What the file would refuse or not honour is refused. */
	ck_assert_msg(config_general_set(cfg, "pool_mode", "statement", err, sizeof err), "%s", err);
	ck_assert_int_eq(cfg->general.pool_mode, POOL_MODE_STATEMENT);
	ck_assert(!config_general_set(cfg, "pool_mode", "bogus", err, sizeof err));
	ck_assert_msg(strstr(err, "pool_mode: must be one of") != NULL, "%s", err);
	ck_assert(!config_general_set(cfg, "syslog_ident", "pgbouncer", err, sizeof err));
	ck_assert_msg(strstr(err, "syslog_ident: \"pgbouncer\" is not honoured") != NULL, "%s", err);
	ck_assert(!config_general_set(cfg, "query_wait_timeout", "5s", err, sizeof err));
	ck_assert_msg(strstr(err, "must be a number of seconds") != NULL, "%s", err);
	ck_assert(!config_general_set(cfg, "listen_port", "7000", err, sizeof err));
	ck_assert_msg(strstr(err, "cannot be changed at run time") != NULL, "%s", err);
	ck_assert(!config_general_set(cfg, "auth_type", "hba", err, sizeof err));
	/* SET auth_type = 'plain', as PgBouncer's tests do; and back. */
	ck_assert_msg(config_general_set(cfg, "auth_type", "'plain'", err, sizeof err), "%s", err);
	ck_assert_int_eq(cfg->general.auth_type, AUTH_TYPE_PASSWORD);
	ck_assert_msg(config_general_set(cfg, "auth_type", "md5", err, sizeof err), "%s", err);
	ck_assert_int_eq(cfg->general.auth_type, AUTH_TYPE_MD5);
	ck_assert(!config_general_set(cfg, "auth_type", "ldap", err, sizeof err));
	ck_assert_int_eq(cfg->general.auth_type, AUTH_TYPE_MD5);
	ck_assert_int_eq(cfg->general.query_wait_timeout, 10000);
	/* SHOW CONFIG follows. */
	struct config_show_row row;
	for (size_t i = 0; config_show_row(cfg, i, &row); i++) {
		if (strcmp(row.key, "query_wait_timeout") == 0)
			ck_assert_str_eq(row.value, "10");
		else if (strcmp(row.key, "server_idle_timeout") == 0)
			ck_assert_str_eq(row.value, "1.5");
		else if (strcmp(row.key, "max_prepared_statements") == 0)
			ck_assert_str_eq(row.value, "0");
		else if (strcmp(row.key, "tcp_keepalive") == 0)
			ck_assert_str_eq(row.value, "0");
		else if (strcmp(row.key, "syslog_ident") == 0)
			ck_assert_str_eq(row.value, "pgcat");
		else if (strcmp(row.key, "auth_file") == 0)
			ck_assert(row.value_null && row.default_value == NULL);
	}
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_autodb)
{
	struct config_problems pr;
	struct config *cfg = load_clean("[pgbouncer]\nautodb_idle_timeout = 60\n[databases]\n"
					"* = host=db1,db2 port=6000 pool_size=4\nnamed = host=x\n", &pr);
	/* The template is no pool itself. */
	ck_assert_uint_eq(cfg->n_pools, 1);
	ck_assert_ptr_null(config_find_pool(cfg, "*"));
	ck_assert_ptr_nonnull(cfg->autodb);
	ck_assert_ptr_null(cfg->autodb->shards[0].database);
	ck_assert_int_eq(cfg->general.autodb_idle_timeout, 60000);
	/* A name no pool has: made from it, the name as its database. */
	const struct config_pool *a = config_autodb_instance(cfg, "sales");
	ck_assert_ptr_nonnull(a);
	ck_assert(a->autodb_instance);
	ck_assert_str_eq(a->name, "sales");
	ck_assert_str_eq(a->shards[0].database, "sales");
	ck_assert_uint_eq(a->shards[0].n_servers, 2);
	ck_assert_int_eq(a->shards[0].servers[1].port, 6000);
	ck_assert_int_eq(a->pool_size, 4);
	ck_assert_ptr_eq(config_find_pool(cfg, "sales"), a);
	ck_assert_ptr_eq(config_autodb_instance(cfg, "sales"), a);   /* once */
	/* A named pool stays itself; names a database cannot have are refused. */
	ck_assert(!config_autodb_instance(cfg, "named")->autodb_instance);
	ck_assert_ptr_null(config_autodb_instance(cfg, "pgbouncer"));
	ck_assert_ptr_null(config_autodb_instance(cfg, ""));
	ck_assert_ptr_null(config_autodb_instance(cfg, "a234567890123456789012345678901234567890123456789012345678901234"));
	ck_assert_ptr_nonnull(config_autodb_instance(cfg, "other"));
	ck_assert_uint_eq(cfg->n_autodb_pools, 2);
	config_autodb_forget(cfg, a);
	ck_assert_ptr_null(config_find_pool(cfg, "sales"));
	ck_assert_uint_eq(cfg->n_autodb_pools, 1);
	config_free(cfg);   /* (frees "other": ASan would see a leak) */
	config_problems_free(&pr);

	/* dbname= in the template: every name goes to that database. */
	cfg = load_clean("[pgbouncer]\n[databases]\n* = host=x dbname=fixed\n", &pr);
	ck_assert_str_eq(config_autodb_instance(cfg, "any")->shards[0].database, "fixed");
	config_free(cfg);
	config_problems_free(&pr);
	/* No template: nothing is made. */
	cfg = load_clean("[pgbouncer]\n" DB, &pr);
	ck_assert_ptr_null(config_autodb_instance(cfg, "any"));
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

Suite *config_pgbouncer_suite(void)
{
	Suite *s = suite_create("config_pgbouncer");
	TCase *tc = tcase_create("pgbouncer.ini");
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_units);
	tcase_add_test(tc, test_refused_and_warned);
	tcase_add_test(tc, test_connstrings);
	tcase_add_test(tc, test_users_and_peers);
	tcase_add_test(tc, test_lines);
	tcase_add_test(tc, test_include_and_auth_file);
	tcase_add_test(tc, test_auth_types);
	tcase_add_test(tc, test_set_and_show);
	tcase_add_test(tc, test_autodb);
	suite_add_tcase(s, tc);
	return s;
}
