/* SPDX-License-Identifier: MIT */
/*
 * Tests of the config room: good and bad pgcat.ini texts through
 * config_load_string(), real files through config_load(), and the
 * [general] key table behind SHOW CONFIG.
 */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h. */
#include "../../include/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_suites.h"

#define POOL "[pools.db]\n[pools.db.shards.0]\nservers = 127.0.0.1:5432:primary\n"

static struct config *load(const char *text, struct config_problems *pr)
{
	return config_load_string(text, "t.ini", pr);
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

static size_t count(const struct config_problems *pr, enum config_problem_kind kind)
{
	size_t n = 0;
	for (size_t i = 0; i < pr->n; i++)
		n += pr->items[i].kind == kind;
	return n;
}

/* The text must load with no problem at all. */
static struct config *load_clean(const char *text, struct config_problems *pr)
{
	struct config *cfg = load(text, pr);
	char buf[4096];
	dump(pr, buf, sizeof(buf));
	ck_assert_msg(cfg != NULL && pr->n == 0, "expected a clean load, got:%s", buf);
	return cfg;
}

/* The text must be rejected with an error at line whose message starts with start. */
static void expect_error_at(const char *text, int line, const char *start)
{
	struct config_problems pr;
	struct config *cfg = load(text, &pr);
	char buf[4096];
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(cfg == NULL, "expected rejection for: %s", text);
	const struct config_problem *p = find(&pr, CONFIG_PROBLEM_ERROR, start);
	ck_assert_msg(p != NULL, "no error starting with '%s'; got:%s", start, buf);
	ck_assert_int_eq(p->line, line);
	config_problems_free(&pr);
}

/* Same, for one [general] line at line 2, before a valid pool. */
static void expect_general_error(const char *kv, const char *start)
{
	char text[1024];
	snprintf(text, sizeof(text), "[general]\n%s\n" POOL, kv);
	expect_error_at(text, 2, start);
}

START_TEST(test_defaults)
{
	struct config_problems pr;
	struct config *cfg = load_clean(POOL, &pr);
	const struct config_general *g = &cfg->general;

	ck_assert_str_eq(cfg->path, "t.ini");
	ck_assert_uint_eq(g->n_listen_addr, 1);
	ck_assert_str_eq(g->listen_addr[0], "0.0.0.0");
	ck_assert_int_eq(g->listen_port, 6432);
	ck_assert_str_eq(g->unix_socket_dir, "/tmp");
	ck_assert_int_eq(g->workers, 1);
	ck_assert_int_eq(g->max_client_conn, 10000);
	ck_assert_int_eq(g->pool_mode, POOL_MODE_TRANSACTION);
	ck_assert_int_eq(g->default_pool_size, 10);
	ck_assert_int_eq(g->min_pool_size, 0);
	ck_assert_int_eq(g->connect_timeout, 5000);
	ck_assert_int_eq(g->query_wait_timeout, 120000);
	ck_assert_int_eq(g->idle_timeout, 600000);
	ck_assert_int_eq(g->server_lifetime, 3600000);
	ck_assert_int_eq(g->idle_transaction_timeout, 0);
	ck_assert_int_eq(g->client_idle_timeout, 0);
	ck_assert_int_eq(g->healthcheck_timeout, 1000);
	ck_assert_int_eq(g->healthcheck_delay, 30000);
	ck_assert_int_eq(g->replica_lag_check_interval, 1000);
	ck_assert_int_eq(g->ban_time, 60);
	ck_assert_int_eq(g->shutdown_timeout, 60000);
	ck_assert_str_eq(g->server_reset_query, "DISCARD ALL");
	ck_assert(!g->server_round_robin);
	ck_assert(g->tcp_keepalive);
	ck_assert(g->max_packet_size == 2147483647);
	ck_assert_int_eq(g->query_parser_max_length, 65536);
	ck_assert_int_eq(g->autoreload, 0);
	ck_assert_str_eq(g->admin_username, "pgcat");
	ck_assert_str_eq(g->admin_password, "");
	ck_assert_int_eq(g->auth_type, AUTH_TYPE_SCRAM);
	ck_assert_str_eq(g->auth_file, "");
	ck_assert_str_eq(g->auth_query, "SELECT usename, passwd FROM pg_shadow WHERE usename = $1");
	ck_assert_str_eq(g->auth_user, "");
	ck_assert_int_eq(g->auth_query_cache_ttl, 60000);
	ck_assert_ptr_null(cfg->auth_user_secret);
	ck_assert_int_eq(g->log_level, LOG_LEVEL_INFO);
	ck_assert_str_eq(g->log_file, "");
	ck_assert(!g->syslog);
	ck_assert(g->log_connections);
	ck_assert(g->log_disconnections);
	ck_assert_str_eq(g->pidfile, "");
	ck_assert(g->prepared_statements);
	ck_assert(g->prepare_unnamed);
	ck_assert_int_eq(g->prepared_statements_cache_size, 500);
	ck_assert_int_eq(g->query_cache_size, 10000);
	ck_assert_int_eq(g->prometheus_port, 0);
	ck_assert_int_eq(g->peer_id, 0);
	ck_assert_int_eq(g->stats_period, 60);
	ck_assert_int_eq(g->dns_max_ttl, 15000);
	ck_assert_int_eq(g->client_tls_sslmode, TLS_MODE_DISABLE);
	ck_assert_str_eq(g->client_tls_cert_file, "");
	ck_assert_str_eq(g->client_tls_key_file, "");
	ck_assert_str_eq(g->client_tls_ca_file, "");
	ck_assert_int_eq(g->server_tls_sslmode, TLS_MODE_PREFER);
	ck_assert_str_eq(g->server_tls_ca_file, "");
	ck_assert_int_eq(g->server_tls_negotiation, TLS_NEGOTIATION_POSTGRES);
	ck_assert_int_eq(g->io_engine, IO_ENGINE_AUTO);
	ck_assert(!g->two_phase_commit);
	ck_assert_str_eq(g->state_dir, "/var/lib/pgcat");
	ck_assert_int_eq(g->two_phase_recovery_interval, 10000);

	ck_assert_uint_eq(cfg->n_pools, 1);
	const struct config_pool *pool = &cfg->pools[0];
	ck_assert_str_eq(pool->name, "db");
	ck_assert_int_eq(pool->pool_mode, POOL_MODE_TRANSACTION);
	ck_assert_int_eq(pool->default_role, DEFAULT_ROLE_ANY);
	ck_assert(pool->query_parser_enabled);
	ck_assert(pool->primary_reads_enabled);
	ck_assert_int_eq(pool->load_balancing_mode, LB_MODE_RANDOM);
	ck_assert_int_eq(pool->sharding_function, SHARDING_PG_BIGINT_HASH);
	ck_assert_uint_eq(pool->n_sharded_tables, 0);
	ck_assert_int_eq(pool->default_shard, 0);
	ck_assert(pool->max_replica_lag == 0);
	ck_assert_int_eq(pool->sticky_primary_after_write, 0);
	ck_assert_int_eq(pool->read_your_writes, READ_YOUR_WRITES_OFF);
	ck_assert_uint_eq(pool->n_shards, 1);
	ck_assert_str_eq(pool->shards[0].database, "db");  /* defaults to the pool's name */
	ck_assert_uint_eq(pool->shards[0].n_servers, 1);
	ck_assert_uint_eq(pool->n_users, 0);
	ck_assert_uint_eq(cfg->n_peers, 0);

	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_key_table)
{
	size_t n;
	const struct config_key_info *keys = config_general_keys(&n);
	ck_assert_uint_eq(n, 99);
	size_t fixed = 0;
	for (size_t i = 0; i < n; i++) {
		for (size_t j = i + 1; j < n; j++)
			ck_assert_str_ne(keys[i].name, keys[j].name);
		if (!keys[i].reloadable) {
			fixed++;
			ck_assert(strcmp(keys[i].name, "listen_addr") == 0 || strcmp(keys[i].name, "listen_port") == 0 ||
				  strcmp(keys[i].name, "unix_socket_dir") == 0 || strcmp(keys[i].name, "workers") == 0 ||
				  strcmp(keys[i].name, "io_engine") == 0 || strcmp(keys[i].name, "state_dir") == 0);
		}
	}
	ck_assert_uint_eq(fixed, 6);

	/* Every default, written out, loads and reads back as written. */
	char text[8192] = "[general]\n";
	for (size_t i = 0; i < n; i++) {
		strcat(text, keys[i].name);
		strcat(text, " = ");
		strcat(text, keys[i].default_value);
		strcat(text, "\n");
	}
	strcat(text, POOL);
	struct config_problems pr;
	struct config *cfg = load_clean(text, &pr);
	struct config *defaults = load_clean(POOL, &pr);
	for (size_t i = 0; i < n; i++) {
		char a[256], b[256];
		ck_assert(config_general_value(cfg, keys[i].name, a, sizeof(a)));
		ck_assert(config_general_value(defaults, keys[i].name, b, sizeof(b)));
		ck_assert_str_eq(a, keys[i].default_value);
		ck_assert_str_eq(b, keys[i].default_value);
	}
	char small[4];
	ck_assert(!config_general_value(cfg, "server_reset_query", small, sizeof(small)));
	ck_assert_str_eq(small, "DIS");
	ck_assert(!config_general_value(cfg, "no_such_key", small, sizeof(small)));
	config_free(cfg);
	config_free(defaults);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_general_values)
{
	struct config_problems pr;
	struct config *cfg = load_clean(
		"[general]\n"
		"listen_addr = 127.0.0.1, ::1 ,localhost\n"
		"listen_port = 7000\n"
		"workers = 0\n"
		"io_engine = io_uring\n"
		"two_phase_commit = on\n"
		"state_dir = /srv/pgcat-state\n"
		"two_phase_recovery_interval = 2s\n"
		"log_level = DEBUG\n"
		"auth_type = md5\n"
		"max_packet_size = 5\n"
		"admin_password = s3cret\n"
		"server_reset_query =\n"
		"client_tls_sslmode = verify-full\n"
		"client_tls_cert_file = /c.pem\n"
		"client_tls_key_file = /k.pem\n"
		"client_tls_ca_file = /ca.pem\n"
		"server_tls_sslmode = disable\n"
		POOL, &pr);
	const struct config_general *g = &cfg->general;
	ck_assert_uint_eq(g->n_listen_addr, 3);
	ck_assert_str_eq(g->listen_addr[1], "::1");
	ck_assert_str_eq(g->listen_addr[2], "localhost");
	ck_assert_int_eq(g->listen_port, 7000);
	ck_assert_int_eq(g->workers, 0);
	ck_assert_int_eq(g->io_engine, IO_ENGINE_IO_URING);
	ck_assert(g->two_phase_commit);
	ck_assert_str_eq(g->state_dir, "/srv/pgcat-state");
	ck_assert_int_eq(g->two_phase_recovery_interval, 2000);
	ck_assert_int_eq(g->log_level, LOG_LEVEL_DEBUG);
	ck_assert_int_eq(g->auth_type, AUTH_TYPE_MD5);
	ck_assert(g->max_packet_size == 5);
	ck_assert_str_eq(g->admin_password, "s3cret");
	ck_assert_str_eq(g->server_reset_query, "");
	ck_assert_int_eq(g->client_tls_sslmode, TLS_MODE_VERIFY_FULL);
	ck_assert_int_eq(g->server_tls_sslmode, TLS_MODE_DISABLE);

	char buf[128];
	ck_assert(config_general_value(cfg, "listen_addr", buf, sizeof(buf)));
	ck_assert_str_eq(buf, "127.0.0.1,::1,localhost");
	ck_assert(config_general_value(cfg, "admin_password", buf, sizeof(buf)));
	ck_assert_str_eq(buf, "********");  /* never shown */
	ck_assert(config_general_value(cfg, "log_level", buf, sizeof(buf)));
	ck_assert_str_eq(buf, "debug");
	config_free(cfg);
	config_problems_free(&pr);

	cfg = load_clean("[general]\nlisten_addr = *\n" POOL, &pr);
	ck_assert_str_eq(cfg->general.listen_addr[0], "*");
	config_free(cfg);
	/* No TCP listener is fine while there is a unix socket. */
	cfg = load_clean("[general]\nlisten_addr =\n" POOL, &pr);
	ck_assert_uint_eq(cfg->general.n_listen_addr, 0);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

static const char spec_sample[] =
	"[general]\n"
	"listen_addr = 0.0.0.0           ; comma list allowed; * = all\n"
	"listen_port = 6432\n"
	"pool_mode = transaction         ; transaction | session   (default for pools)\n"
	"admin_username = pgcat\n"
	"admin_password = ...            ; admin console (§7) login\n"
	"auth_file =                     ; optional\n"
	"peer_id = 2\n"
	"\n"
	"[pools.sharded_db]              ; clients connect with dbname=sharded_db\n"
	"pool_mode = session             ; overrides [general]\n"
	"default_role = replica\n"
	"query_parser_enabled = false\n"
	"primary_reads_enabled = off\n"
	"load_balancing_mode = loc\n"
	"sharding_function = murmur3\n"
	"sharded_tables = users.id, public.orders.user_id\n"
	"default_shard = all\n"
	"max_replica_lag = 1048576\n"
	"sticky_primary_after_write = 250\n"
	"read_your_writes = lsn\n"
	"\n"
	"[pools.sharded_db.shards.1]\n"
	"database = shard1\n"
	"servers = 127.0.0.1:5434:primary\n"
	"\n"
	"[pools.sharded_db.shards.0]\n"
	"database = shard0               ; database name on the servers\n"
	"servers = 127.0.0.1:5432:primary, 127.0.0.1:5433:replica   ; host:port:role\n"
	"                                ; role: primary | replica | auto\n"
	"\n"
	"[pools.sharded_db.users.app]    ; client user name \"app\"\n"
	"password = secret\n"
	"server_username =               ; optional\n"
	"server_password =\n"
	"pool_size = 10\n"
	"min_pool_size = 0\n"
	"statement_timeout = 30000\n"
	"pool_mode =                     ; optional override for this user\n"
	"\n"
	"[peers]\n"
	"1 = pgcat-a.internal:6432\n"
	"2 = pgcat-b.internal:6432\n";

START_TEST(test_every_section)
{
	struct config_problems pr;
	struct config *cfg = load_clean(spec_sample, &pr);
	ck_assert_str_eq(cfg->general.admin_password, "...");
	ck_assert_uint_eq(cfg->n_pools, 1);
	const struct config_pool *pool = config_find_pool(cfg, "sharded_db");
	ck_assert_ptr_nonnull(pool);
	ck_assert_ptr_null(config_find_pool(cfg, "other"));
	ck_assert_int_eq(pool->pool_mode, POOL_MODE_SESSION);
	ck_assert_int_eq(pool->default_role, DEFAULT_ROLE_REPLICA);
	ck_assert(!pool->query_parser_enabled);
	ck_assert(!pool->primary_reads_enabled);
	ck_assert_int_eq(pool->load_balancing_mode, LB_MODE_LOC);
	ck_assert_int_eq(pool->sharding_function, SHARDING_MURMUR3);
	ck_assert_uint_eq(pool->n_sharded_tables, 2);
	ck_assert_str_eq(pool->sharded_tables[0], "users.id");
	ck_assert_str_eq(pool->sharded_tables[1], "public.orders.user_id");
	ck_assert_int_eq(pool->default_shard, CONFIG_DEFAULT_SHARD_ALL);
	ck_assert(pool->max_replica_lag == 1048576);
	ck_assert_int_eq(pool->sticky_primary_after_write, 250);
	ck_assert_int_eq(pool->read_your_writes, READ_YOUR_WRITES_LSN);

	/* Shards come out sorted by index, whatever the file order. */
	ck_assert_uint_eq(pool->n_shards, 2);
	ck_assert_int_eq(pool->shards[0].index, 0);
	ck_assert_str_eq(pool->shards[0].database, "shard0");
	ck_assert_uint_eq(pool->shards[0].n_servers, 2);
	ck_assert_str_eq(pool->shards[0].servers[0].host, "127.0.0.1");
	ck_assert_int_eq(pool->shards[0].servers[0].port, 5432);
	ck_assert_int_eq(pool->shards[0].servers[0].role, SERVER_ROLE_PRIMARY);
	ck_assert_int_eq(pool->shards[0].servers[1].port, 5433);
	ck_assert_int_eq(pool->shards[0].servers[1].role, SERVER_ROLE_REPLICA);
	ck_assert_int_eq(pool->shards[1].index, 1);
	ck_assert_str_eq(pool->shards[1].database, "shard1");

	const struct config_user *u = config_find_user(pool, "app");
	ck_assert_ptr_nonnull(u);
	ck_assert_ptr_null(config_find_user(pool, "nobody"));
	ck_assert_str_eq(u->password, "secret");
	ck_assert_ptr_null(u->server_username);
	ck_assert_ptr_null(u->server_password);
	ck_assert_int_eq(u->pool_size, 10);
	ck_assert_int_eq(u->min_pool_size, 0);
	ck_assert_int_eq(u->statement_timeout, 30000);
	ck_assert_int_eq(u->pool_mode, CONFIG_INHERIT);

	ck_assert_uint_eq(cfg->n_peers, 2);
	ck_assert_int_eq(cfg->peers[0].id, 1);
	ck_assert_str_eq(cfg->peers[0].host, "pgcat-a.internal");
	ck_assert_int_eq(cfg->peers[0].port, 6432);
	ck_assert_int_eq(cfg->peers[1].id, 2);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_ipv6)
{
	struct config_problems pr;
	struct config *cfg = load_clean(
		"[general]\npeer_id = 1\n"
		"[pools.db.shards.0]\n"
		"servers = [::1]:5432:primary, [2001:db8::5]:6000:replica, db-1.example:5433:auto\n"
		"[peers]\n7 = [fe80::1]:6432\n", &pr);
	const struct config_shard *s = &cfg->pools[0].shards[0];
	ck_assert_uint_eq(s->n_servers, 3);
	ck_assert_str_eq(s->servers[0].host, "::1");
	ck_assert_int_eq(s->servers[0].port, 5432);
	ck_assert_int_eq(s->servers[0].role, SERVER_ROLE_PRIMARY);
	ck_assert_str_eq(s->servers[1].host, "2001:db8::5");
	ck_assert_int_eq(s->servers[1].port, 6000);
	ck_assert_int_eq(s->servers[1].role, SERVER_ROLE_REPLICA);
	ck_assert_str_eq(s->servers[2].host, "db-1.example");
	ck_assert_int_eq(s->servers[2].role, SERVER_ROLE_AUTO);
	ck_assert_str_eq(cfg->peers[0].host, "fe80::1");
	ck_assert_int_eq(cfg->peers[0].id, 7);
	config_free(cfg);
	config_problems_free(&pr);

	const char *pfx = "t.ini:3: [pools.db.shards.0] servers: ";
	char text[256], start[256];
	static const char *const bad[][2] = {
		{ "::1:5432:primary", "an IPv6 address must be written in brackets" },
		{ "[::1:5432:primary", "missing ']'" },
		{ "[::zz]:5432:primary", "not an IPv6 address" },
		{ "[::1]5432:primary", "expected host:port:role" },
		{ "[127.0.0.1]:5432:primary", "not an IPv6 address" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "[pools.db]\n[pools.db.shards.0]\nservers = %s\n", bad[i][0]);
		snprintf(start, sizeof(start), "%s\"%s\": %s", pfx, bad[i][0], bad[i][1]);
		expect_error_at(text, 3, start);
	}
}
END_TEST

START_TEST(test_inheritance)
{
	struct config_problems pr;
	/* [general] comes after the pools: inheritance is resolved at the end. */
	struct config *cfg = load_clean(
		"[pools.a]\n"
		"[pools.a.shards.0]\nservers = h:1:primary\n"
		"[pools.a.users.u1]\npool_mode =\n"
		"[pools.a.users.u2]\npool_mode = transaction\npool_size = 3\nmin_pool_size = 1\n"
		"[pools.b]\npool_mode = transaction\n"
		"[pools.b.shards.0]\nservers = h:1:primary\n"
		"[pools.b.users.u1]\n"
		"[general]\npool_mode = session\ndefault_pool_size = 20\nmin_pool_size = 2\n", &pr);
	const struct config_pool *a = config_find_pool(cfg, "a");
	const struct config_pool *b = config_find_pool(cfg, "b");
	ck_assert_int_eq(a->pool_mode, POOL_MODE_SESSION);
	ck_assert_int_eq(b->pool_mode, POOL_MODE_TRANSACTION);

	const struct config_user *u1 = config_find_user(a, "u1");
	const struct config_user *u2 = config_find_user(a, "u2");
	ck_assert_int_eq(u1->pool_mode, CONFIG_INHERIT);
	ck_assert_int_eq(u1->pool_size, CONFIG_INHERIT);
	ck_assert_int_eq(u1->min_pool_size, CONFIG_INHERIT);
	ck_assert_int_eq(config_user_pool_mode(cfg, a, u1), POOL_MODE_SESSION);
	ck_assert_int_eq(config_user_pool_size(cfg, a, u1), 20);
	ck_assert_int_eq(config_user_min_pool_size(cfg, a, u1), 2);
	ck_assert_int_eq(config_user_pool_mode(cfg, a, u2), POOL_MODE_TRANSACTION);
	ck_assert_int_eq(config_user_pool_size(cfg, a, u2), 3);
	ck_assert_int_eq(config_user_min_pool_size(cfg, a, u2), 1);
	ck_assert_int_eq(config_user_pool_mode(cfg, b, config_find_user(b, "u1")), POOL_MODE_TRANSACTION);
	/* Users from auth_file have no section. */
	ck_assert_int_eq(config_user_pool_mode(cfg, a, NULL), POOL_MODE_SESSION);
	ck_assert_int_eq(config_user_pool_size(cfg, a, NULL), 20);
	ck_assert_int_eq(config_user_min_pool_size(cfg, a, NULL), 2);
	/* A pool section may be implied by its shards. */
	config_free(cfg);
	cfg = load_clean("[pools.x.shards.0]\nservers = h:1:primary\n", &pr);
	ck_assert_str_eq(cfg->pools[0].name, "x");
	ck_assert_str_eq(cfg->pools[0].shards[0].database, "x");
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_booleans)
{
	static const char *const yes[] = { "true", "on", "yes", "1", "TRUE", "On", "YES" };
	static const char *const no[] = { "false", "off", "no", "0", "False", "OFF", "No" };
	char text[256];
	struct config_problems pr;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		snprintf(text, sizeof(text), "[general]\nsyslog = %s\ntcp_keepalive = %s\n" POOL, yes[i], no[i]);
		struct config *cfg = load_clean(text, &pr);
		ck_assert(cfg->general.syslog);
		ck_assert(!cfg->general.tcp_keepalive);
		config_free(cfg);
	}
	config_problems_free(&pr);
	static const char *const bad[] = { "maybe", "2", "", "y", "truee", "enabled" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char kv[64], start[200];
		snprintf(kv, sizeof(kv), "syslog = %s", bad[i]);
		snprintf(start, sizeof(start), "t.ini:2: [general] syslog: must be a boolean "
			 "(true/false, on/off, yes/no, 1/0), got \"%s\"", bad[i]);
		expect_general_error(kv, start);
	}
	expect_error_at("[pools.db]\nquery_parser_enabled = nope\n[pools.db.shards.0]\nservers = h:1:primary\n", 2,
			"t.ini:2: [pools.db] query_parser_enabled: must be a boolean");
}
END_TEST

START_TEST(test_message_format)
{
	expect_general_error("listen_port = abc",
			     "t.ini:2: [general] listen_port: must be an integer between 1 and 65535, got \"abc\"");
	struct config_problems pr;
	struct config *cfg = load("[general]\n\n; comment\nlisten_port = abc\n" POOL, &pr);
	ck_assert_ptr_null(cfg);
	ck_assert_uint_eq(pr.n, 1);
	ck_assert_int_eq(pr.items[0].kind, CONFIG_PROBLEM_ERROR);
	ck_assert_int_eq(pr.items[0].line, 4);
	ck_assert_str_eq(pr.items[0].message,
			 "t.ini:4: [general] listen_port: must be an integer between 1 and 65535, got \"abc\"");
	config_problems_free(&pr);
	/* Long values are shortened in messages. */
	char kv[300], start[200];
	memset(start, 0, sizeof(start));
	snprintf(kv, sizeof(kv), "log_level = %0150d", 0);
	snprintf(start, sizeof(start), "t.ini:2: [general] log_level: must be one of error | warning | info | "
		 "debug | trace, got \"%060d...\"", 0);
	expect_general_error(kv, start);
}
END_TEST

START_TEST(test_out_of_range)
{
	static const char *const cases[][2] = {
		{ "listen_port = 0", "listen_port: must be an integer between 1 and 65535, got \"0\"" },
		{ "listen_port = 65536", "listen_port: must be an integer between 1 and 65535" },
		{ "listen_port = 64 32", "listen_port: must be an integer" },
		{ "workers = -1", "workers: must be an integer between 0 and 1024" },
		{ "max_client_conn = 0", "max_client_conn: must be an integer between 1 and 1000000" },
		{ "default_pool_size = 0", "default_pool_size: must be an integer between 1 and 10000" },
		{ "min_pool_size = -1", "min_pool_size: must be an integer between 0 and 10000" },
		{ "connect_timeout = 0", "connect_timeout: must be a duration between 1ms and 2147483647ms: a number of milliseconds" },
		{ "query_wait_timeout = 1.5", "query_wait_timeout: must be a duration between 0 and 2147483647ms" },
		{ "idle_timeout = -5", "idle_timeout: must be a duration between 0" },
		{ "server_lifetime = 2147483648", "server_lifetime: must be a duration between 0 and 2147483647ms" },
		{ "healthcheck_timeout = 0", "healthcheck_timeout: must be a duration between 1ms" },
		{ "ban_time = 86401", "ban_time: must be a duration between 0 and 1d: a number of seconds" },
		{ "max_packet_size = 4", "max_packet_size: must be an integer between 5 and 2147483647" },
		{ "max_packet_size = 2147483648", "max_packet_size: must be an integer between 5 and 2147483647" },
		{ "max_packet_size = 99999999999999999999999", "max_packet_size: must be an integer" },
		{ "prepared_statements_cache_size = 0", "prepared_statements_cache_size: must be an integer between 1" },
		{ "prometheus_port = 70000", "prometheus_port: must be an integer between 0 and 65535" },
		{ "peer_id = 16384", "peer_id: must be an integer between 0 and 16383" },
		{ "stats_period = 0", "stats_period: must be a duration between 1s and 1d" },
		{ "autoreload = x", "autoreload: must be a duration" },
		{ "pool_mode = statements", "pool_mode: must be one of session | transaction | statement, got \"statements\"" },
		{ "io_engine = uring", "io_engine: must be one of auto | epoll | io_uring, got \"uring\"" },
		{ "log_level = verbose", "log_level: must be one of error | warning | info | debug | trace" },
		{ "auth_type = any", "auth_type: must be one of scram-sha-256 | md5 | trust | password | ldap | pam, got \"any\"" },
		{ "auth_pam_service = ", "auth_pam_service: must not be empty" },
		{ "auth_type = ldap", "auth_type: ldap needs auth_ldap_options" },
		{ "auth_ldap_options = ldapserver=h", "auth_ldap_options: method ldap needs ldapbasedn, ldapprefix or ldapsuffix" },
		{ "client_tls_sslmode = on", "client_tls_sslmode: must be one of disable | allow | prefer | require | "
					     "verify-ca | verify-full" },
		{ "server_tls_sslmode = allow", "server_tls_sslmode: must be one of disable | prefer | require | "
						"verify-ca | verify-full, got \"allow\"" },
		{ "server_tls_negotiation = tls", "server_tls_negotiation: must be one of postgres | direct, got \"tls\"" },
		/* direct TLS cannot fall back to plain text: not under the default prefer */
		{ "server_tls_negotiation = direct", "server_tls_negotiation: \"direct\" needs server_tls_sslmode require, "
						     "verify-ca or verify-full, got \"prefer\"" },
		{ "admin_username =", "admin_username: must not be empty" },
		{ "listen_addr = 127.0.0.1, not an addr", "listen_addr: \"not an addr\": not an IP address" },
		{ "listen_addr = 127.0.0.256", "listen_addr: \"127.0.0.256\": not an IP address" },
		{ "unix_socket_dir = /tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		  "unix_socket_dir: must be at most 92 characters" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char start[300];
		snprintf(start, sizeof(start), "t.ini:2: [general] %s", cases[i][1]);
		expect_general_error(cases[i][0], start);
	}
	/* The edges themselves are fine. */
	struct config_problems pr;
	struct config *cfg = load_clean("[general]\nlisten_port = 65535\nworkers = 1024\nmax_packet_size = 2147483647\n"
					"peer_id = 16383\nconnect_timeout = 2147483647\nban_time = 0\n" POOL, &pr);
	ck_assert_int_eq(cfg->general.connect_timeout, 2147483647);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_pool_values)
{
	static const char *const cases[][2] = {
		{ "pool_mode = tx", "pool_mode: must be one of session | transaction" },
		{ "default_role = master", "default_role: must be one of any | primary | replica" },
		{ "load_balancing_mode = round_robin", "load_balancing_mode: must be one of random | loc" },
		{ "sharding_function = md5", "sharding_function: must be one of pg_bigint_hash | pg_text_hash | "
					     "pg_uuid_hash | sha1 | murmur3" },
		{ "sharded_tables = users", "sharded_tables: \"users\": must be table.column or schema.table.column" },
		{ "sharded_tables = a.b.c.d", "sharded_tables: \"a.b.c.d\": must be table.column" },
		{ "sharded_tables = a..b", "sharded_tables: \"a..b\": must be table.column" },
		{ "default_shard = none", "default_shard: must be a shard number or \"all\", got \"none\"" },
		{ "default_shard = -1", "default_shard: must be a shard number or \"all\"" },
		{ "default_shard = 1", "default_shard: must be \"all\" or a shard number below 1, got 1" },
		{ "max_replica_lag = -1", "max_replica_lag: must be an integer between 0 and 9223372036854775807" },
		{ "sticky_primary_after_write = x", "sticky_primary_after_write: must be a duration" },
		{ "read_your_writes = none", "read_your_writes: must be one of off | lsn" },
		{ "servers = h:1:primary", "servers: unknown key" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[300], start[300];
		snprintf(text, sizeof(text), "[pools.p]\n%s\n[pools.p.shards.0]\nservers = h:1:primary\n", cases[i][0]);
		snprintf(start, sizeof(start), "t.ini:2: [pools.p] %s", cases[i][1]);
		if (strstr(cases[i][1], "unknown key") != NULL) {
			struct config_problems pr;
			struct config *cfg = load(text, &pr);
			ck_assert_ptr_nonnull(cfg);
			ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_UNKNOWN, start));
			config_free(cfg);
			config_problems_free(&pr);
		} else {
			expect_error_at(text, 2, start);
		}
	}
}
END_TEST

START_TEST(test_duplicates)
{
	expect_error_at("[general]\nworkers = 2\nlisten_port = 1\nworkers = 2\n" POOL, 4,
			"t.ini:4: [general] workers: duplicate key (first set on line 2)");
	expect_error_at("[pools.p]\ndefault_role = any\n[pools.p.shards.0]\nservers = h:1:primary\n"
			"[pools.p]\ndefault_role = replica\n", 6,
			"t.ini:6: [pools.p] default_role: duplicate key (first set on line 2)");
	expect_error_at("[pools.p.shards.0]\nservers = h:1:primary\nservers = h:2:primary\n", 3,
			"t.ini:3: [pools.p.shards.0] servers: duplicate key (first set on line 2)");
	expect_error_at(POOL "[pools.db.users.u]\npassword = a\npassword = b\n", 6,
			"t.ini:6: [pools.db.users.u] password: duplicate key (first set on line 5)");
	expect_error_at(POOL "[pools.db.shards.0]\nservers = h:2:replica\n", 5,
			"t.ini:5: [pools.db.shards.0] servers: duplicate key (first set on line 3)");
	expect_error_at("[pools.db.shards.0]\nservers = h:1:primary, h:2:replica, h:2:replica\n", 2,
			"t.ini:2: [pools.db.shards.0] servers: \"h:2:replica\": this server is listed twice");
}
END_TEST

START_TEST(test_unknown)
{
	struct config_problems pr;
	struct config *cfg = load("[general]\nlisten_port = 7000\nbogus_key = 1\n"
				  "[pools.db]\nlisten_port = 1\n"
				  "[pools.db.shards.0]\nservers = h:1:primary\nhost = x\n"
				  "[pools.db.users.u]\nPassword = x\n"
				  "[pgbouncer]\nlisten_port = 99999\nanything = at all\n"
				  "[pools.db.replicas.0]\nx = 1\n", &pr);
	char buf[4096];
	dump(&pr, buf, sizeof(buf));
	/* Unknown keys and sections do not reject the file. */
	ck_assert_msg(cfg != NULL, "%s", buf);
	ck_assert_int_eq(cfg->general.listen_port, 7000);
	ck_assert_msg(count(&pr, CONFIG_PROBLEM_UNKNOWN) == 6 && pr.n == 6, "%s", buf);
	ck_assert_int_eq(find(&pr, CONFIG_PROBLEM_UNKNOWN, "t.ini:3: [general] bogus_key: unknown key")->line, 3);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_UNKNOWN, "t.ini:5: [pools.db] listen_port: unknown key"));
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_UNKNOWN, "t.ini:8: [pools.db.shards.0] host: unknown key"));
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_UNKNOWN,
				   "t.ini:10: [pools.db.users.u] Password: unknown key (did you mean password?)"));
	/* One line for an unknown section; its keys are not checked. */
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_UNKNOWN, "t.ini:11: [pgbouncer]: unknown section"));
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_UNKNOWN, "t.ini:14: [pools.db.replicas.0]: unknown section"));
	config_free(cfg);
	config_problems_free(&pr);

	cfg = load("listen_port = 7000\n" POOL, &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_UNKNOWN, "t.ini:1: listen_port: key outside any section"));
	ck_assert_int_eq(cfg->general.listen_port, 6432);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_syntax)
{
	expect_error_at("[general]\nlisten_port 6432\n" POOL, 2,
			"t.ini:2: expected \"key = value\", a [section] or a comment, got \"listen_port 6432\"");
	expect_error_at("[general\nlisten_port = 1\n" POOL, 1, "t.ini:1: section header \"[general\" has no closing ']'");
	expect_error_at("[general] x\n" POOL, 1, "t.ini:1: [general]: unexpected text after ']'");
	expect_error_at("[general]\n= 5\n" POOL, 2, "t.ini:2: [general]: missing key name before '='");
	expect_error_at("[pools.]\n" POOL, 1, "t.ini:1: [pools.]: empty pool name");
	expect_error_at("[pools.db.shards.x]\n" POOL, 1,
			"t.ini:1: [pools.db.shards.x]: shard number must be an integer between 0 and 65535");
	expect_error_at("[pools.db.shards.-1]\n" POOL, 1, "t.ini:1: [pools.db.shards.-1]: shard number must be");
	expect_error_at("[pools.db.users.]\n" POOL, 1, "t.ini:1: [pools.db.users.]: empty user name");
	char longname[200] = "[pools.";
	memset(longname + strlen(longname), 'a', 64);
	strcat(longname, "]\n" POOL);
	expect_error_at(longname, 1, "t.ini:1: [pools.aaaa");
	ck_assert_int_eq(1, 1);

	/* inih would split a long line in two; it is refused instead. */
	char text[600] = "[general]\nserver_reset_query = ";
	memset(text + strlen(text), 'x', 300);
	strcat(text, "\n" POOL);
	expect_error_at(text, 2, "t.ini:2: line is longer than 197 characters");

	/* An indented line continues the previous key, which only lists may do. */
	expect_error_at("[general]\nlisten_port = 6432\n  workers = 2\n" POOL, 3,
			"t.ini:3: [general] listen_port: this indented line continues the value of listen_port, "
			"but only lists");
	expect_error_at("[general]\nlisten_addr = 127.0.0.1\n  workers = 2\n" POOL, 3,
			"t.ini:3: [general] listen_addr: this indented line continues the list listen_addr but "
			"looks like a new key");
	/* ... but an indented first key after a header is just a key. */
	struct config_problems pr;
	struct config *cfg = load_clean("[general]\n  listen_port = 7000\n\n[pools.db]\n    default_role = primary\n"
					"[pools.db.shards.0]\n  servers = h:1:primary\n", &pr);
	ck_assert_int_eq(cfg->general.listen_port, 7000);
	ck_assert_int_eq(cfg->pools[0].default_role, DEFAULT_ROLE_PRIMARY);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_continuation_lists)
{
	struct config_problems pr;
	struct config *cfg = load_clean(
		"[general]\n"
		"listen_addr = 127.0.0.1,\n"
		"   ::1   ; loopback v6\n"
		"\n"
		"   ; a comment between\n"
		"   10.0.0.1\n"
		"[pools.db]\n"
		"sharded_tables = a.b,\n"
		"  s.c.d\n"
		"[pools.db.shards.0]\n"
		"servers =\n"
		"    127.0.0.1:5432:primary,\n"
		"    [::1]:5433:replica\n", &pr);
	ck_assert_uint_eq(cfg->general.n_listen_addr, 3);
	ck_assert_str_eq(cfg->general.listen_addr[1], "::1");
	ck_assert_str_eq(cfg->general.listen_addr[2], "10.0.0.1");
	ck_assert_uint_eq(cfg->pools[0].n_sharded_tables, 2);
	ck_assert_str_eq(cfg->pools[0].sharded_tables[1], "s.c.d");
	ck_assert_uint_eq(cfg->pools[0].shards[0].n_servers, 2);
	ck_assert_str_eq(cfg->pools[0].shards[0].servers[1].host, "::1");
	config_free(cfg);
	config_problems_free(&pr);
	/* A bad entry on a continuation line is reported on that line. */
	expect_error_at("[pools.db.shards.0]\nservers = h:1:primary,\n  h:2:leader\n", 3,
			"t.ini:3: [pools.db.shards.0] servers: \"h:2:leader\": role must be primary | replica | auto");
}
END_TEST

START_TEST(test_pool_structure)
{
	expect_error_at("[general]\n[pools.lonely]\ndefault_role = any\n", 2,
			"t.ini:2: [pools.lonely]: pool has no shards");
	expect_error_at("[pools.p]\n[pools.p.shards.0]\nservers = h:1:primary\n[pools.p.shards.2]\nservers = h:2:primary\n",
			1, "t.ini:1: [pools.p]: shard 1 is missing: shards must be numbered 0 to 1 without gaps, "
			   "but [pools.p.shards.2] is on line 4");
	expect_error_at("[pools.p.shards.1]\nservers = h:1:primary\n", 1,
			"t.ini:1: [pools.p]: shard 0 is missing");
	expect_error_at("[pools.p]\n[pools.p.shards.0]\ndatabase = d\n", 2,
			"t.ini:2: [pools.p.shards.0]: shard has no servers");
	expect_error_at("[pools.p]\n[pools.p.shards.0]\nservers =\n", 3,
			"t.ini:3: [pools.p.shards.0] servers: must list at least one server");
	expect_error_at("[pools.p]\n[pools.p.shards.0]\nservers = h:1\n", 3,
			"t.ini:3: [pools.p.shards.0] servers: \"h:1\": expected host:port:role");
	expect_error_at("[pools.p]\n[pools.p.shards.0]\nservers = h:0:primary\n", 3,
			"t.ini:3: [pools.p.shards.0] servers: \"h:0:primary\": port must be an integer between 1 and 65535");
	expect_error_at("[pools.p]\n[pools.p.shards.0]\nservers = h!x:1:primary\n", 3,
			"t.ini:3: [pools.p.shards.0] servers: \"h!x:1:primary\": \"h!x\" is not a host name");
	expect_error_at("[pools.p]\n[pools.p.shards.0]\nservers = a:1:primary, b:1:primary\n", 3,
			"t.ini:3: [pools.p.shards.0] servers: a shard has at most one primary, got 2");
	expect_error_at("[pools.p]\n[pools.p.shards.0]\ndatabase =\nservers = h:1:primary\n", 3,
			"t.ini:3: [pools.p.shards.0] database: must not be empty");

	/* 65 servers (one a line): one more than the router looks at */
	char many[65 * 20 + 64];
	size_t off = (size_t)snprintf(many, sizeof many, "[pools.p.shards.0]\nservers = ");
	for (int i = 0; i < 65; i++)
		off += (size_t)snprintf(many + off, sizeof many - off, "%sh:%d:replica", i ? ",\n  " : "", 1000 + i);
	snprintf(many + off, sizeof many - off, "\n");
	expect_error_at(many, 2, "t.ini:2: [pools.p.shards.0] servers: a shard lists at most 64 servers, got 65");

	/* A shard with only replicas and auto servers is fine; the order in the file does not matter. */
	struct config_problems pr;
	struct config *cfg = load_clean("[pools.p.shards.2]\nservers = c:1:replica\n[pools.p.shards.0]\n"
					"servers = a:1:auto, a:2:auto\n[pools.p.shards.1]\nservers = b:1:primary\n"
					"[pools.p]\ndefault_shard = 2\n", &pr);
	const struct config_pool *pool = &cfg->pools[0];
	ck_assert_uint_eq(pool->n_shards, 3);
	static const char *const hosts[] = { "a", "b", "c" };
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(pool->shards[i].index, i);
		ck_assert_str_eq(pool->shards[i].servers[0].host, hosts[i]);
	}
	ck_assert_int_eq(pool->default_shard, 2);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_users)
{
	struct config_problems pr;
	struct config *cfg = load_clean(
		POOL
		"[pools.db.users.plain]\npassword = pa ss;word\nserver_username = srv\nserver_password = x\n"
		"[pools.db.users.md5]\npassword = md5e10adc3949ba59abbe56e057f20f883e\n"
		"[pools.db.users.scram]\npassword = SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy\n"
		"[pools.db.users.first.last]\npool_size = 1\n", &pr);
	const struct config_pool *pool = &cfg->pools[0];
	ck_assert_uint_eq(pool->n_users, 4);
	ck_assert_str_eq(config_find_user(pool, "plain")->password, "pa ss;word");
	ck_assert_str_eq(config_find_user(pool, "plain")->server_username, "srv");
	ck_assert_str_eq(config_find_user(pool, "plain")->server_password, "x");
	ck_assert_str_eq(config_find_user(pool, "md5")->password, "md5e10adc3949ba59abbe56e057f20f883e");
	ck_assert_ptr_nonnull(config_find_user(pool, "scram"));
	ck_assert_ptr_null(config_find_user(pool, "first.last")->password);
	ck_assert_int_eq(config_find_user(pool, "first.last")->pool_size, 1);
	config_free(cfg);

	/* A malformed secret is refused, and never echoed. */
	cfg = load(POOL "[pools.db.users.u]\npassword = SCRAM-SHA-256$4096:salt\n", &pr);
	ck_assert_ptr_null(cfg);
	ck_assert_uint_eq(pr.n, 1);
	ck_assert_ptr_nonnull(strstr(pr.items[0].message, "t.ini:5: [pools.db.users.u] password: looks like a SCRAM secret"));
	ck_assert_ptr_null(strstr(pr.items[0].message, "4096"));
	config_problems_free(&pr);

	expect_error_at(POOL "[pools.db.users.u]\npool_size = 0\n", 5,
			"t.ini:5: [pools.db.users.u] pool_size: must be empty (inherit) or an integer between 1 and 10000");
	expect_error_at(POOL "[pools.db.users.u]\nmin_pool_size = -1\n", 5,
			"t.ini:5: [pools.db.users.u] min_pool_size: must be empty (inherit) or an integer between 0");
	expect_error_at(POOL "[pools.db.users.u]\nstatement_timeout = -1\n", 5,
			"t.ini:5: [pools.db.users.u] statement_timeout: must be a duration between 0 and 2147483647ms");
	expect_error_at(POOL "[pools.db.users.u]\npool_mode = stmt\n", 5,
			"t.ini:5: [pools.db.users.u] pool_mode: must be empty (inherit) or one of session | transaction | statement");
	expect_error_at(POOL "[pools.db.users.u]\npool_size = 2\nmin_pool_size = 3\n", 6,
			"t.ini:6: [pools.db.users.u] min_pool_size: the minimum pool size (3) exceeds the pool size (2)");
	expect_error_at("[general]\nmin_pool_size = 5\n" POOL "[pools.db.users.u]\npool_size = 2\n", 7,
			"t.ini:7: [pools.db.users.u] pool_size: the minimum pool size (5) exceeds the pool size (2)");
}
END_TEST

START_TEST(test_peers)
{
	expect_error_at("[general]\npeer_id = 1\n" POOL "[peers]\n0 = a:1\n", 7,
			"t.ini:7: [peers] 0: peer id must be an integer between 1 and 16383");
	expect_error_at("[general]\npeer_id = 1\n" POOL "[peers]\n1 = a:1\n01 = b:1\n", 8,
			"t.ini:8: [peers] 01: duplicate peer id (first set on line 7)");
	expect_error_at("[general]\npeer_id = 1\n" POOL "[peers]\n1 = a\n", 7,
			"t.ini:7: [peers] 1: expected host:port, got \"a\"");
	expect_error_at("[general]\npeer_id = 1\n" POOL "[peers]\n1 = a:1\n  b:2\n", 8,
			"t.ini:8: [peers] 1: this indented line continues the value of 1");

	/* Unix sockets, as libpq names them: a directory holding .s.PGSQL.<port>
	 * (':' in it allowed, the port after the last one; a trailing '/'
	 * names the same socket), or '@' and a name in the abstract namespace. */
	struct config_problems pr;
	struct config *cfg = load_clean("[general]\npeer_id = 1\n" POOL
					"[peers]\n1 = /run/pgcat/:6432\n2 = /tmp/a:b:7000\n3 = @pgcat-c:6433\n", &pr);
	ck_assert_uint_eq(cfg->n_peers, 3);
	ck_assert_str_eq(cfg->peers[0].host, "/run/pgcat");
	ck_assert_int_eq(cfg->peers[0].port, 6432);
	ck_assert_str_eq(cfg->peers[1].host, "/tmp/a:b");
	ck_assert_int_eq(cfg->peers[1].port, 7000);
	ck_assert_str_eq(cfg->peers[2].host, "@pgcat-c");
	ck_assert_int_eq(cfg->peers[2].port, 6433);
	config_free(cfg);
	config_problems_free(&pr);
	expect_error_at("[general]\npeer_id = 1\n" POOL "[peers]\n1 = /run/pgcat\n", 7,
			"t.ini:7: [peers] 1: expected /socket/directory:port, got \"/run/pgcat\"");
	expect_error_at("[general]\npeer_id = 1\n" POOL "[peers]\n1 = @:6432\n", 7,
			"t.ini:7: [peers] 1: a socket name must follow '@'");
	expect_error_at("[general]\npeer_id = 1\n" POOL "[peers]\n1 = /tmp/x:port\n", 7,
			"t.ini:7: [peers] 1: port must be an integer between 1 and 65535");
	/* sun_path holds 108 bytes: 92 for the directory, 15 for
	 * "/.s.PGSQL.65535", one for the NUL */
	char text[512], dir[128];
	memset(dir, 'd', sizeof(dir));
	dir[0] = '/';
	dir[93] = '\0';
	snprintf(text, sizeof(text), "[general]\npeer_id = 1\n" POOL "[peers]\n1 = %s:6432\n", dir);
	expect_error_at(text, 7, "t.ini:7: [peers] 1: a Unix socket directory must be at most 92 characters");
	dir[0] = '@';
	snprintf(text, sizeof(text), "[general]\npeer_id = 1\n" POOL "[peers]\n1 = %s:6432\n", dir);
	expect_error_at(text, 7, "t.ini:7: [peers] 1: a socket name in the abstract namespace must be at most 92");
	dir[92] = '\0';
	snprintf(text, sizeof(text), "[general]\npeer_id = 1\n" POOL "[peers]\n1 = %s:65535\n", dir);
	config_free(load_clean(text, &pr));
	config_problems_free(&pr);
	/* servers are not reached in the abstract namespace */
	expect_error_at("[pools.db]\n[pools.db.shards.0]\nservers = @pg:5432:primary\n", 3,
			"t.ini:3: [pools.db.shards.0] servers: \"@pg:5432:primary\": \"@pg\" is not a host name or IPv4");

	cfg = load(POOL "[peers]\n1 = a:1\n", &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_uint_eq(pr.n, 1);
	ck_assert_int_eq(pr.items[0].kind, CONFIG_PROBLEM_WARNING);
	ck_assert_str_eq(pr.items[0].message, "t.ini:4: [peers]: ignored while [general] peer_id is 0");
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_cross_checks)
{
	expect_error_at("[general]\nmin_pool_size = 11\n" POOL, 2,
			"t.ini:2: [general] min_pool_size: must not exceed default_pool_size (10), got 11");
	expect_error_at("[general]\nlisten_addr =\nunix_socket_dir =\n" POOL, 2,
			"t.ini:2: [general] listen_addr: is empty and so is unix_socket_dir");
	expect_error_at("[general]\nprometheus_port = 6432\n" POOL, 2,
			"t.ini:2: [general] prometheus_port: must differ from listen_port (6432)");
	expect_error_at("[general]\nclient_tls_sslmode = require\nclient_tls_cert_file = /c\n" POOL, 2,
			"t.ini:2: [general] client_tls_sslmode: \"require\" needs client_tls_cert_file and client_tls_key_file");
	expect_error_at("[general]\nclient_tls_sslmode = verify-ca\nclient_tls_cert_file = /c\n"
			"client_tls_key_file = /k\n" POOL, 2,
			"t.ini:2: [general] client_tls_sslmode: \"verify-ca\" needs client_tls_ca_file");

	struct config_problems pr;
	struct config *cfg = load("[general]\n", &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_WARNING, "t.ini: no [pools.NAME] section"));
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_file_format)
{
	/* BOM, CRLF, '#' and ';' comments, inline comments, "key: value". */
	struct config_problems pr;
	struct config *cfg = load_clean("\xEF\xBB\xBF# hash comment\r\n[general]\r\n; semicolon comment\r\n"
					"listen_port: 7001 ; inline\r\nserver_reset_query = DISCARD ALL;\r\n"
					"[pools.db]\r\n[pools.db.shards.0]\r\nservers = h:1:primary", &pr);
	ck_assert_int_eq(cfg->general.listen_port, 7001);
	/* A ';' not preceded by white space is part of the value. */
	ck_assert_str_eq(cfg->general.server_reset_query, "DISCARD ALL;");
	ck_assert_str_eq(cfg->pools[0].shards[0].servers[0].host, "h");
	config_free(cfg);
	/* An empty file: defaults, and a warning that there is no pool. */
	cfg = load("", &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_uint_eq(count(&pr, CONFIG_PROBLEM_WARNING), 1);
	config_free(cfg);
	/* problems may be NULL. */
	cfg = config_load_string(POOL, "t.ini", NULL);
	ck_assert_ptr_nonnull(cfg);
	config_free(cfg);
	ck_assert_ptr_null(config_load_string("[general]\nworkers = x\n", "t.ini", NULL));
	config_problems_free(&pr);
	config_free(NULL);
}
END_TEST

START_TEST(test_many_errors)
{
	struct config_problems pr;
	struct config *cfg = load("[general]\nlisten_port = x\nworkers = y\nnope = 1\n"
				  "[pools.a]\ndefault_role = z\n", &pr);
	ck_assert_ptr_null(cfg);
	char buf[4096];
	dump(&pr, buf, sizeof(buf));
	ck_assert_msg(pr.n == 5, "%s", buf);
	ck_assert_int_eq(pr.items[0].line, 2);
	ck_assert_int_eq(pr.items[1].line, 3);
	ck_assert_int_eq(pr.items[2].line, 4);
	ck_assert_int_eq(pr.items[2].kind, CONFIG_PROBLEM_UNKNOWN);
	ck_assert_int_eq(pr.items[3].line, 6);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_ERROR, "t.ini:5: [pools.a]: pool has no shards"));
	ck_assert(config_problems_has(&pr, CONFIG_PROBLEM_ERROR));
	ck_assert(config_problems_has(&pr, CONFIG_PROBLEM_UNKNOWN));
	ck_assert(!config_problems_has(&pr, CONFIG_PROBLEM_WARNING));
	config_problems_free(&pr);
	ck_assert_uint_eq(pr.n, 0);
	ck_assert(!config_problems_has(&pr, CONFIG_PROBLEM_ERROR));
}
END_TEST

static char *write_temp(const char *text, size_t len)
{
	char *path = strdup("/tmp/pgcat-check-config-XXXXXX");
	ck_assert_ptr_nonnull(path);
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
	return path;
}

START_TEST(test_load_file)
{
	static const char good[] = "[general]\nlisten_addr = 127.0.0.1\nlisten_port = 6433\n" POOL;
	char *path = write_temp(good, strlen(good));
	struct config_problems pr;
	struct config *cfg = config_load(path, &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_uint_eq(pr.n, 0);
	ck_assert_str_eq(cfg->path, path);
	ck_assert_int_eq(cfg->general.listen_port, 6433);
	config_free(cfg);
	unlink(path);
	free(path);

	static const char bad[] = "[general]\n\nlisten_port = 0\n" POOL;
	path = write_temp(bad, strlen(bad));
	ck_assert_ptr_null(config_load(path, &pr));
	ck_assert_uint_eq(pr.n, 1);
	ck_assert_int_eq(pr.items[0].line, 3);
	char want[256];
	snprintf(want, sizeof(want), "%s:3: [general] listen_port: must be an integer between 1 and 65535, got \"0\"", path);
	ck_assert_str_eq(pr.items[0].message, want);
	config_problems_free(&pr);
	unlink(path);

	/* Missing file: one error, no line. */
	ck_assert_ptr_null(config_load(path, &pr));
	ck_assert_uint_eq(pr.n, 1);
	ck_assert_int_eq(pr.items[0].line, 0);
	snprintf(want, sizeof(want), "%s: cannot open: No such file or directory", path);
	ck_assert_str_eq(pr.items[0].message, want);
	config_problems_free(&pr);
	free(path);

	static const char nul[] = "[general]\nlisten_port = 1\0\n";
	path = write_temp(nul, sizeof(nul) - 1);
	ck_assert_ptr_null(config_load(path, &pr));
	ck_assert_uint_eq(pr.n, 1);
	ck_assert_int_eq(pr.items[0].line, 2);
	ck_assert_ptr_nonnull(strstr(pr.items[0].message, ":2: the file contains a NUL byte"));
	config_problems_free(&pr);
	unlink(path);
	free(path);
}
END_TEST

/* SET must fail with a reason starting with start and leave every key as it was. */
static void expect_set_refused(struct config *cfg, const char *key, const char *value, const char *start)
{
	size_t n;
	const struct config_key_info *keys = config_general_keys(&n);
	char before[128][256], after[256], err[256];
	ck_assert_uint_le(n, 128);
	for (size_t i = 0; i < n; i++)
		ck_assert(config_general_value(cfg, keys[i].name, before[i], sizeof(before[i])));
	const char *secret = cfg->general.admin_password;
	memset(err, 0, sizeof(err));
	ck_assert_msg(!config_general_set(cfg, key, value, err, sizeof(err)), "SET %s = %s was accepted", key, value);
	ck_assert_msg(strncmp(err, start, strlen(start)) == 0, "SET %s = %s: expected '%s...', got '%s'", key,
		      value, start, err);
	ck_assert_ptr_null(strchr(err, '\n'));
	for (size_t i = 0; i < n; i++) {
		ck_assert(config_general_value(cfg, keys[i].name, after, sizeof(after)));
		ck_assert_str_eq(after, before[i]);
	}
	ck_assert_ptr_eq(cfg->general.admin_password, secret);
}

static void expect_set(struct config *cfg, const char *key, const char *value, const char *shown)
{
	char err[256] = "", buf[256];
	ck_assert_msg(config_general_set(cfg, key, value, err, sizeof(err)), "SET %s = %s refused: %s", key, value,
		      err);
	ck_assert(config_general_value(cfg, key, buf, sizeof(buf)));
	ck_assert_str_eq(buf, shown);
}

/* admin_users and stats_users: comma lists as PgBouncer writes them, and
 * a console user's secret from a users section (auth_file's are read from
 * a file, which the integration tests cover). */
START_TEST(test_console_users)
{
	ck_assert(config_list_has("ops", "ops"));
	ck_assert(config_list_has(" ops , watcher,", "watcher"));
	ck_assert(config_list_has("a,\tops\t", "ops"));
	ck_assert(!config_list_has("ops2, xops", "ops"));
	ck_assert(!config_list_has("", "ops"));
	ck_assert(!config_list_has("ops", ""));
	ck_assert(!config_list_has(NULL, "ops"));
	struct config_problems pr;
	struct config *cfg = load_clean("[general]\nadmin_users = ops, dba\nstats_users = mon\n" POOL
					"[pools.db.users.mon]\npassword = md5abcdefabcdefabcdefabcdefabcdefab\n", &pr);
	ck_assert_str_eq(cfg->general.admin_users, "ops, dba");
	ck_assert_str_eq(cfg->general.stats_users, "mon");
	ck_assert_str_eq(config_console_secret(cfg, "mon"), "md5abcdefabcdefabcdefabcdefabcdefab");
	ck_assert_ptr_null(config_console_secret(cfg, "ops"));
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

static bool refuse_tpc(const struct config *trial, void *arg, char *err, size_t errlen)
{
	int *calls = arg;
	(*calls)++;
	if (!trial->general.two_phase_commit)
		return true;
	snprintf(err, errlen, "not by SET");
	return false;
}

/* SET with a last word of the caller's: it sees the value parsed, and a
 * refusal changes nothing. */
START_TEST(test_set_if)
{
	struct config_problems pr;
	struct config *cfg = load_clean("[general]\n" POOL, &pr);
	char err[256];
	int calls = 0;
	ck_assert(!config_general_set_if(cfg, "two_phase_commit", "on", refuse_tpc, &calls, err, sizeof err));
	ck_assert_str_eq(err, "not by SET");
	ck_assert(!cfg->general.two_phase_commit);
	ck_assert_int_eq(calls, 1);
	/* an invalid value is refused before it is shown */
	ck_assert(!config_general_set_if(cfg, "two_phase_commit", "maybe", refuse_tpc, &calls, err, sizeof err));
	ck_assert_int_eq(calls, 1);
	ck_assert(config_general_set_if(cfg, "max_client_conn", "321", refuse_tpc, &calls, err, sizeof err));
	ck_assert_int_eq(cfg->general.max_client_conn, 321);
	ck_assert_int_eq(calls, 2);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

START_TEST(test_set)
{
	struct config_problems pr;
	struct config *cfg = load_clean("[general]\nserver_reset_query = RESET ALL\n" POOL, &pr);

	/* int, int64, bool, enum, string */
	expect_set(cfg, "max_client_conn", "500", "500");
	ck_assert_int_eq(cfg->general.max_client_conn, 500);
	expect_set(cfg, "max_packet_size", "5", "5");
	ck_assert(cfg->general.max_packet_size == 5);
	expect_set(cfg, "tcp_keepalive", "off", "false");
	ck_assert(!cfg->general.tcp_keepalive);
	expect_set(cfg, "server_round_robin", "YES", "true");
	/* read per unnamed Parse: a reload applies to the next one */
	expect_set(cfg, "prepare_unnamed", "off", "false");
	ck_assert(!cfg->general.prepare_unnamed);
	expect_set(cfg, "log_level", "DEBUG", "debug");
	ck_assert_int_eq(cfg->general.log_level, LOG_LEVEL_DEBUG);
	expect_set(cfg, "pool_mode", "session", "session");
	ck_assert_int_eq(cfg->general.pool_mode, POOL_MODE_SESSION);
	/* password, also under PgBouncer's name plain (shown as password) */
	expect_set(cfg, "auth_type", "password", "password");
	ck_assert_int_eq(cfg->general.auth_type, AUTH_TYPE_PASSWORD);
	expect_set(cfg, "auth_type", "md5", "md5");
	expect_set(cfg, "auth_type", "PLAIN", "password");
	ck_assert_int_eq(cfg->general.auth_type, AUTH_TYPE_PASSWORD);
	expect_set(cfg, "server_reset_query", "DISCARD ALL", "DISCARD ALL");
	expect_set(cfg, "server_reset_query", "", "");
	expect_set(cfg, "auth_file", "/etc/pgcat/users.txt", "/etc/pgcat/users.txt");
	expect_set(cfg, "admin_password", "n3w", "********");
	ck_assert_str_eq(cfg->general.admin_password, "n3w");

	/* Key names are case-insensitive; outer white space goes, as in the ini. */
	char err[256];
	ck_assert(config_general_set(cfg, "Default_Pool_Size", "  20 ", err, sizeof(err)));
	ck_assert_int_eq(cfg->general.default_pool_size, 20);

	/* SQL quoting: one pair of quotes stripped, '' inside is '. */
	expect_set(cfg, "log_level", "'warning'", "warning");
	expect_set(cfg, "ban_time", "'120'", "120");
	expect_set(cfg, "server_reset_query", "'SELECT ''x'''", "SELECT 'x'");
	expect_set(cfg, "server_reset_query", "''", "");
	expect_set(cfg, "log_file", " '/var/log/pg cat.log' ", "/var/log/pg cat.log");
	expect_set(cfg, "server_reset_query", "it's", "it's");  /* not quoted: taken as is */
	expect_set(cfg, "admin_username", "'''admin'''", "'admin'");

	/* Refused, with cfg unchanged. */
	expect_set_refused(cfg, "max_client_conn", "0", "max_client_conn: must be an integer between 1 and 1000000");
	expect_set_refused(cfg, "max_client_conn", "1000001", "max_client_conn: must be an integer");
	expect_set_refused(cfg, "max_client_conn", "ten", "max_client_conn: must be an integer");
	expect_set_refused(cfg, "max_packet_size", "2147483648", "max_packet_size: must be an integer between 5");
	expect_set_refused(cfg, "ban_time", "'86401'", "ban_time: must be a duration between 0 and 1d");
	expect_set(cfg, "ban_time", "'2min'", "120");
	expect_set(cfg, "query_wait_timeout", "1.5s", "1500");
	expect_set_refused(cfg, "tcp_keepalive", "maybe", "tcp_keepalive: must be a boolean");
	expect_set_refused(cfg, "log_level", "verbose",
			   "log_level: must be one of error | warning | info | debug | trace, got \"verbose\"");
	expect_set_refused(cfg, "server_tls_sslmode", "allow", "server_tls_sslmode: must be one of disable | prefer");
	expect_set_refused(cfg, "admin_username", "", "admin_username: must not be empty");
	expect_set_refused(cfg, "admin_username", "''", "admin_username: must not be empty");
	/* The load's cross-checks of [general] apply too. */
	expect_set_refused(cfg, "min_pool_size", "21", "min_pool_size: must not exceed default_pool_size (20), got 21");
	expect_set(cfg, "min_pool_size", "5", "5");
	expect_set_refused(cfg, "default_pool_size", "'1'",
			   "min_pool_size: must not exceed default_pool_size (1), got 5");
	expect_set_refused(cfg, "prometheus_port", "6432", "prometheus_port: must differ from listen_port (6432)");
	expect_set_refused(cfg, "client_tls_sslmode", "require", "client_tls_sslmode: \"require\" needs");
	expect_set_refused(cfg, "server_tls_negotiation", "direct", "server_tls_negotiation: \"direct\" needs");
	/* Not reloadable, unknown, badly quoted. */
	expect_set_refused(cfg, "listen_port", "7000", "listen_port cannot be changed at run time");
	expect_set_refused(cfg, "LISTEN_ADDR", "127.0.0.1", "listen_addr cannot be changed at run time");
	expect_set_refused(cfg, "unix_socket_dir", "/run", "unix_socket_dir cannot be changed at run time");
	expect_set_refused(cfg, "workers", "2", "workers cannot be changed at run time");
	expect_set_refused(cfg, "io_engine", "epoll", "io_engine cannot be changed at run time");
	expect_set_refused(cfg, "no_such_key", "1", "unknown key \"no_such_key\"");
	expect_set_refused(cfg, "", "1", "unknown key");
	expect_set_refused(cfg, "pool_size", "1", "unknown key");  /* a user key, not [general] */
	expect_set_refused(cfg, "log_level", "'debug", "unterminated quoted value");
	expect_set_refused(cfg, "log_level", "'de'bug'", "unexpected text after the closing quote");
	expect_set_refused(cfg, "server_reset_query", "'a\nb'", "the value must be on one line");
	/* Secrets are never echoed. */
	ck_assert(!config_general_set(cfg, "admin_password", "SCRAM-junk", err, sizeof(err)) ||
		  strstr(err, "junk") == NULL);
	ck_assert(!config_general_set(NULL, "log_level", "info", err, sizeof(err)));
	ck_assert(!config_general_set(cfg, "log_level", NULL, err, sizeof(err)));
	ck_assert(!config_general_set(cfg, "log_level", "nope", NULL, 0));
	ck_assert_int_eq(cfg->general.log_level, LOG_LEVEL_WARNING);

	/* A long reason is cut to fit, still terminated. */
	char small[8];
	ck_assert(!config_general_set(cfg, "log_level", "nope", small, sizeof(small)));
	ck_assert_str_eq(small, "log_lev");

	/* Valid once the other side allows it. */
	expect_set(cfg, "client_tls_cert_file", "/c.pem", "/c.pem");
	expect_set(cfg, "client_tls_key_file", "/k.pem", "/k.pem");
	expect_set(cfg, "client_tls_sslmode", "require", "require");
	expect_set_refused(cfg, "client_tls_cert_file", "''", "client_tls_sslmode: \"require\" needs");
	ck_assert_str_eq(cfg->general.client_tls_cert_file, "/c.pem");

	config_free(cfg);  /* every string set above is owned by cfg: ASan finds no leak */
	config_problems_free(&pr);
}
END_TEST

/* auth_user must name a user of some users section or of auth_file. */
START_TEST(test_auth_user)
{
	struct config_problems pr;
	/* In a users section (of any pool): accepted. */
	struct config *cfg = load_clean("[general]\nauth_user = lookup\n" POOL
					"[pools.other]\n[pools.other.shards.0]\nservers = 127.0.0.1:5432:primary\n"
					"[pools.other.users.lookup]\npassword = pw\n", &pr);
	ck_assert_str_eq(cfg->general.auth_user, "lookup");
	ck_assert_ptr_null(cfg->auth_user_secret);
	config_free(cfg);
	config_problems_free(&pr);

	/* Nowhere: an error at auth_user's line, naming it. */
	expect_error_at("[general]\nauth_query_cache_ttl = 500\nauth_user = nobody\n" POOL, 3,
			"t.ini:3: [general] auth_user: user \"nobody\" is in no [pools.NAME.users.USER] section "
			"and not in auth_file (auth_file is not set)");
	/* auth_query may not be empty; the TTL is ms >= 0. */
	expect_general_error("auth_query =", "t.ini:2: [general] auth_query:");
	expect_general_error("auth_query_cache_ttl = -1", "t.ini:2: [general] auth_query_cache_ttl:");

	/* In auth_file, even when every pool has a users section: its secret is kept aside. */
	static const char userlist[] = "\"lookup\" \"md5aaaabbbbccccddddeeeeffff00001111\"\n\"x\" \"y\"\n";
	char *ul = write_temp(userlist, strlen(userlist));
	char text[512];
	snprintf(text, sizeof text, "[general]\nauth_user = lookup\nauth_file = %s\n" POOL
		 "[pools.db.users.app]\npassword = pw\n", ul);
	cfg = load_clean(text, &pr);
	ck_assert_str_eq(cfg->auth_user_secret, "md5aaaabbbbccccddddeeeeffff00001111");
	ck_assert_uint_eq(cfg->pools[0].n_users, 1);   /* the file's users do not join a pool with a section */

	/* SET checks it too. */
	char err[256];
	ck_assert(!config_general_set(cfg, "auth_user", "'nobody'", err, sizeof err));
	static const char want[] = "auth_user: user \"nobody\" is in no";
	ck_assert_msg(strncmp(err, want, sizeof want - 1) == 0, "%s", err);
	ck_assert_str_eq(cfg->general.auth_user, "lookup");
	ck_assert(config_general_set(cfg, "auth_user", "'app'", err, sizeof err));
	ck_assert(config_general_set(cfg, "auth_user", "''", err, sizeof err));   /* off */
	config_free(cfg);
	config_problems_free(&pr);
	unlink(ul);
	free(ul);
}
END_TEST

START_TEST(test_names)
{
	ck_assert_str_eq(config_pool_mode_name(POOL_MODE_SESSION), "session");
	ck_assert_str_eq(config_pool_mode_name(POOL_MODE_TRANSACTION), "transaction");
	ck_assert_str_eq(config_pool_mode_name((enum pool_mode)7), "unknown");
	ck_assert_str_eq(config_log_level_name(LOG_LEVEL_ERROR), "error");
	ck_assert_str_eq(config_log_level_name(LOG_LEVEL_WARNING), "warning");
	ck_assert_str_eq(config_log_level_name(LOG_LEVEL_TRACE), "trace");
	ck_assert_str_eq(config_server_role_name(SERVER_ROLE_PRIMARY), "primary");
	ck_assert_str_eq(config_server_role_name(SERVER_ROLE_REPLICA), "replica");
	ck_assert_str_eq(config_server_role_name(SERVER_ROLE_AUTO), "auto");
}
END_TEST

/* SPEC §2: every time setting takes PostgreSQL's units; a bare number
 * keeps the key's own unit. */
START_TEST(test_durations)
{
	struct config_problems pr;
	struct config *cfg = load_clean("[general]\nquery_wait_timeout = 1s\nconnect_timeout = 250ms\n"
					"idle_timeout = 2min\nserver_lifetime = 1h\nshutdown_timeout = 1.5s\n"
					"healthcheck_delay = 1d\nclient_idle_timeout = 2000us\n"
					"idle_transaction_timeout = 30 s\nban_time = 2min\nstats_period = 15\n"
					"tcp_keepidle = 1min\ntcp_keepintvl = 5\ntcp_keepcnt = 3\n"
					"tcp_user_timeout = 10s\ndns_max_ttl = 15000\n"
					"[pools.db]\nsticky_primary_after_write = 2s\n"
					"[pools.db.shards.0]\nservers = 127.0.0.1:5432:primary\n"
					"[pools.db.users.u]\nstatement_timeout = 1min\n", &pr);
	const struct config_general *g = &cfg->general;
	ck_assert_int_eq(g->query_wait_timeout, 1000);
	ck_assert_int_eq(g->connect_timeout, 250);
	ck_assert_int_eq(g->idle_timeout, 120000);
	ck_assert_int_eq(g->server_lifetime, 3600000);
	ck_assert_int_eq(g->shutdown_timeout, 1500);
	ck_assert_int_eq(g->healthcheck_delay, 86400000);
	ck_assert_int_eq(g->client_idle_timeout, 2);
	ck_assert_int_eq(g->idle_transaction_timeout, 30000);
	ck_assert_int_eq(g->ban_time, 120);          /* seconds */
	ck_assert_int_eq(g->stats_period, 15);       /* a bare number: seconds, as before */
	ck_assert_int_eq(g->tcp_keepidle, 60);
	ck_assert_int_eq(g->tcp_keepintvl, 5);
	ck_assert_int_eq(g->tcp_keepcnt, 3);
	ck_assert_int_eq(g->tcp_user_timeout, 10000);
	ck_assert_int_eq(g->dns_max_ttl, 15000);
	ck_assert_int_eq(cfg->pools[0].sticky_primary_after_write, 2000);
	ck_assert_int_eq(cfg->pools[0].users[0].statement_timeout, 60000);
	config_free(cfg);
	config_problems_free(&pr);

	expect_general_error("query_wait_timeout = 5 parsecs", "t.ini:2: [general] query_wait_timeout: must be a "
			     "duration between 0 and 2147483647ms: a number of milliseconds or a number with a unit "
			     "(us, ms, s, min, h, d), got \"5 parsecs\": the unit must be one of us, ms, s, min, h, d");
	expect_general_error("connect_timeout = 5S", "t.ini:2: [general] connect_timeout: must be a duration");
	expect_general_error("connect_timeout = s", "t.ini:2: [general] connect_timeout: must be a duration");
	expect_general_error("connect_timeout = -1s", "t.ini:2: [general] connect_timeout: must be a duration");
	expect_general_error("connect_timeout = 25d", "t.ini:2: [general] connect_timeout: must be a duration between "
			     "1ms and 2147483647ms");
	/* not zero, but less than the key's unit: refused rather than rounded to "off" */
	expect_general_error("tcp_keepidle = 400ms", "t.ini:2: [general] tcp_keepidle: must be a duration between 0 "
			     "and 32767s: a number of seconds or a number with a unit (us, ms, s, min, h, d), got "
			     "\"400ms\": less than the setting's unit (1s)");
	expect_general_error("ban_time = 2d", "t.ini:2: [general] ban_time: must be a duration between 0 and 1d");

	/* A bare value under 1,000 where PgBouncer's same-named key is in
	 * seconds: accepted (milliseconds) with a warning naming the key. */
	cfg = load("[general]\nquery_wait_timeout = 120\nserver_lifetime = 3600ms\nclient_idle_timeout = 0\n"
		   "connect_timeout = 500\ndns_max_ttl = 15\n" POOL, &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_int_eq(cfg->general.query_wait_timeout, 120);
	ck_assert_uint_eq(count(&pr, CONFIG_PROBLEM_WARNING), 2);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_WARNING, "t.ini:2: [general] query_wait_timeout: 120 is taken "
				    "as 120 milliseconds, but PgBouncer's query_wait_timeout is in seconds; write 120s"));
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_WARNING, "t.ini:6: [general] dns_max_ttl: 15 is taken"));
	config_free(cfg);
	config_problems_free(&pr);

	/* the keys of issue 27's other items too; a user's transaction_timeout may inherit */
	cfg = load("[general]\nreserve_pool_timeout = 5s\nquery_timeout = 30\ntransaction_timeout = 2min\n"
		   "auth_query_cache_ttl = 1min\n[pools.db]\n[pools.db.shards.0]\nservers = 127.0.0.1:5432:primary\n"
		   "[pools.db.users.a]\ntransaction_timeout = 1.5s\n[pools.db.users.b]\ntransaction_timeout =\n", &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_int_eq(cfg->general.reserve_pool_timeout, 5000);
	ck_assert_int_eq(cfg->general.query_timeout, 30);
	ck_assert_int_eq(cfg->general.transaction_timeout, 120000);
	ck_assert_int_eq(cfg->general.auth_query_cache_ttl, 60000);
	ck_assert_int_eq(config_user_transaction_timeout(cfg, &cfg->pools[0].users[0]), 1500);
	ck_assert_int_eq(config_user_transaction_timeout(cfg, &cfg->pools[0].users[1]), 120000);
	ck_assert_uint_eq(count(&pr, CONFIG_PROBLEM_WARNING), 1);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_WARNING, "t.ini:3: [general] query_timeout: 30 is taken as 30 "
				    "milliseconds, but PgBouncer's query_timeout is in seconds"));
	config_free(cfg);
	config_problems_free(&pr);
	expect_error_at("[pools.db.shards.0]\nservers = 127.0.0.1:5432:primary\n[pools.db.users.a]\n"
			"transaction_timeout = soon\n", 4, "t.ini:4: [pools.db.users.a] transaction_timeout: must be "
			"empty (inherit) or a duration between 0 and 2147483647ms");

	char buf[32];
	static const struct { int64_t v; bool s; const char *text; } shown[] = {
		{ 0, false, "0" }, { 1, false, "1ms" }, { 1500, false, "1500ms" }, { 1000, false, "1s" },
		{ 120000, false, "2min" }, { 3600000, false, "1h" }, { 86400000, false, "1d" },
		{ 2147483647, false, "2147483647ms" }, { 60, true, "1min" }, { 61, true, "61s" }, { 86400, true, "1d" },
	};
	for (size_t i = 0; i < sizeof(shown) / sizeof(shown[0]); i++) {
		config_format_duration(shown[i].v, shown[i].s, buf, sizeof(buf));
		ck_assert_str_eq(buf, shown[i].text);
	}
}
END_TEST

/* Memory settings take PostgreSQL's memory units (1024 each), or bytes. */
START_TEST(test_bytes)
{
	struct config_problems pr;
	struct config *cfg = load_clean("[general]\n" POOL, &pr);
	ck_assert_int_eq(cfg->general.cross_shard_max_memory, 64 << 20);   /* the default */
	config_free(cfg);
	config_problems_free(&pr);
	static const struct { const char *text; int64_t v; } taken[] = {
		{ "1GB", INT64_C(1) << 30 }, { "512 kB", 512 << 10 }, { "1.5MB", 3 << 19 }, { "100000", 100000 },
		{ "1TB", INT64_C(1) << 40 }, { "70000B", 70000 },
	};
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
		char ini[200];
		snprintf(ini, sizeof ini, "[general]\ncross_shard_max_memory = %s\n" POOL, taken[i].text);
		cfg = load_clean(ini, &pr);
		ck_assert_int_eq(cfg->general.cross_shard_max_memory, taken[i].v);
		config_free(cfg);
		config_problems_free(&pr);
	}
	expect_general_error("cross_shard_max_memory = 64mb", "t.ini:2: [general] cross_shard_max_memory: must be an "
			     "amount of memory between 64kB and 1TB: a number of bytes or a number with a unit (B, kB, MB, "
			     "GB, TB), got \"64mb\": the unit must be one of B, kB, MB, GB, TB");
	expect_general_error("cross_shard_max_memory = 1kB", "t.ini:2: [general] cross_shard_max_memory: must be an "
			     "amount of memory between 64kB and 1TB");
	expect_general_error("cross_shard_max_memory = 2TB", "t.ini:2: [general] cross_shard_max_memory: must be an "
			     "amount of memory");
	expect_general_error("cross_shard_max_memory = -1MB", "t.ini:2: [general] cross_shard_max_memory: must be an "
			     "amount of memory");
	char buf[32];
	static const struct { int64_t v; const char *text; } shown[] = {
		{ 0, "0" }, { 100, "100B" }, { 1536, "1536B" }, { 3 << 19, "1536kB" }, { 64 << 20, "64MB" },
		{ INT64_C(1) << 40, "1TB" },
	};
	for (size_t i = 0; i < sizeof(shown) / sizeof(shown[0]); i++) {
		config_format_bytes(shown[i].v, buf, sizeof(buf));
		ck_assert_str_eq(buf, shown[i].text);
	}
}
END_TEST

/* SPEC §2: a Unix socket directory as a server's host, as libpq's host=/dir. */
START_TEST(test_unix_socket_servers)
{
	struct config_problems pr;
	struct config *cfg = load_clean("[pools.db.shards.0]\n"
					"servers = /var/run/postgresql:5432:primary, /tmp/:5433:replica, "
					"/odd:dir:6000:auto\n", &pr);
	const struct config_shard *s = &cfg->pools[0].shards[0];
	ck_assert_uint_eq(s->n_servers, 3);
	ck_assert_str_eq(s->servers[0].host, "/var/run/postgresql");
	ck_assert_int_eq(s->servers[0].port, 5432);
	ck_assert_int_eq(s->servers[0].role, SERVER_ROLE_PRIMARY);
	ck_assert_str_eq(s->servers[1].host, "/tmp");           /* a trailing slash names the same socket */
	ck_assert_int_eq(s->servers[1].role, SERVER_ROLE_REPLICA);
	ck_assert_str_eq(s->servers[2].host, "/odd:dir");       /* port and role after the last two colons */
	ck_assert_int_eq(s->servers[2].port, 6000);
	config_free(cfg);
	config_problems_free(&pr);

	expect_error_at("[pools.db.shards.0]\nservers = /tmp:5432\n", 2,
			"t.ini:2: [pools.db.shards.0] servers: \"/tmp:5432\": expected /socket/directory:port:role");
	expect_error_at("[pools.db.shards.0]\nservers = /tmp\n", 2,
			"t.ini:2: [pools.db.shards.0] servers: \"/tmp\": expected /socket/directory:port:role");
	expect_error_at("[pools.db.shards.0]\nservers = /tmp:0:primary\n", 2,
			"t.ini:2: [pools.db.shards.0] servers: \"/tmp:0:primary\": port must be an integer");
	expect_error_at("[pools.db.shards.0]\nservers = /tmp:5432:primary, /tmp/:5432:replica\n", 2,
			"t.ini:2: [pools.db.shards.0] servers: \"/tmp/:5432:replica\": this server is listed twice");
	expect_error_at("[pools.db.shards.0]\nservers = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
			"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:5432:primary\n", 2,
			"t.ini:2: [pools.db.shards.0] servers: \"/aaaa");
}
END_TEST

START_TEST(test_connect_query)
{
	struct config_problems pr;
	struct config *cfg = load_clean("[pools.a]\nconnect_query = SET search_path = app, public\n"
					"[pools.a.shards.0]\nservers = 127.0.0.1:5432:primary\n"
					"[pools.b]\nconnect_query =\n[pools.b.shards.0]\nservers = 127.0.0.1:5432:primary\n", &pr);
	ck_assert_str_eq(cfg->pools[0].connect_query, "SET search_path = app, public");
	ck_assert_ptr_null(cfg->pools[1].connect_query);   /* empty: none */
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

/* What a pgbouncer.ini can say, in pgcat.ini's own keys: a pool's sizes,
 * lifetime, forced server user, auth_query settings and startup
 * parameters; [users.NAME] for a user name in every pool. */
START_TEST(test_pool_and_user_settings)
{
	struct config_problems pr;
	static const char userlist[] = "\"svc\" \"svcpw\"\n\"app\" \"apppw\"\n";
	char *ul = write_temp(userlist, strlen(userlist));
	char text[2048];
	snprintf(text, sizeof text,
		 "[general]\nauth_file = %s\nclient_login_timeout = 2s\n"
		 "[pools.db]\npool_size = 4\nmin_pool_size = 1\nreserve_pool_size = 2\nserver_lifetime = 10s\n"
		 "server_username = svc\nauth_user = svc\nauth_query = SELECT 1\nauth_dbname = other\n"
		 "client_encoding = LATIN1\ntimezone = UTC\napplication_name = app\ndatestyle = ISO\n"
		 "[pools.db.shards.0]\nservers = 127.0.0.1:5432:primary\n"
		 "[pools.other.shards.0]\nservers = 127.0.0.1:5432:primary\n"
		 "[users.app]\npool_size = 9\npool_mode = session\nquery_timeout = 3s\nclient_idle_timeout = 1min\n",
		 ul);
	struct config *cfg = load_clean(text, &pr);
	ck_assert_int_eq(config_client_login_timeout(cfg), 2000);
	const struct config_pool *db = config_find_pool(cfg, "db");
	ck_assert_int_eq(db->server_lifetime, 10000);
	ck_assert_str_eq(db->client_encoding, "LATIN1");
	ck_assert_str_eq(config_pool_auth_query(cfg, db), "SELECT 1");
	ck_assert_str_eq(config_pool_auth_user(cfg, db), "svc");
	ck_assert_str_eq(config_pool_auth_dbname(cfg, db), "other");
	/* The forced role's password: its auth_file line. */
	ck_assert_str_eq(db->server_password, "svcpw");
	ck_assert_uint_eq(db->n_users, 2);
	const struct config_user *app = config_find_user(db, "app");
	ck_assert(app->from_auth_file);
	ck_assert_str_eq(config_user_server_name(db, app), "svc");
	ck_assert_str_eq(config_user_server_password(db, app), "svcpw");
	/* [users.app] goes by the server-side name for sizes: svc has none. */
	ck_assert_int_eq(config_user_pool_size(cfg, db, app), 4);
	ck_assert_int_eq(config_user_min_pool_size(cfg, db, app), 1);
	ck_assert_int_eq(config_user_reserve_pool_size(cfg, db, app), 2);
	ck_assert_int_eq(config_user_pool_mode(cfg, db, app), POOL_MODE_TRANSACTION);
	/* ... and by the client's for its time limits. */
	ck_assert_int_eq(config_user_query_timeout(cfg, app), 3000);
	ck_assert_int_eq(config_user_client_idle_timeout(cfg, app), 60000);
	const struct config_pool *other = config_find_pool(cfg, "other");
	const struct config_user *app2 = config_find_user(other, "app");
	ck_assert_int_eq(config_user_pool_size(cfg, other, app2), 9);
	ck_assert_int_eq(config_user_pool_mode(cfg, other, app2), POOL_MODE_SESSION);
	ck_assert_int_eq(config_pool_server_lifetime(cfg, other), 3600000);
	ck_assert_str_eq(config_pool_auth_dbname(cfg, other), "");
	config_free(cfg);
	config_problems_free(&pr);
	unlink(ul);
	free(ul);

	expect_error_at("[pools.db]\nauth_dbname = nowhere\n[pools.db.shards.0]\nservers = h:1:primary\n", 2,
			"t.ini:2: [pools.db] auth_dbname: names no pool: \"nowhere\"");
	expect_error_at("[pools.db]\nserver_password = x\n[pools.db.shards.0]\nservers = h:1:primary\n", 2,
			"t.ini:2: [pools.db] server_password: goes with server_username");
	expect_error_at("[pools.db]\npool_size = 2\nmin_pool_size = 3\n[pools.db.shards.0]\nservers = h:1:primary\n", 3,
			"t.ini:3: [pools.db] min_pool_size: the minimum pool size (3) exceeds the pool size (2)");
	expect_error_at("[users.app]\npool_size = 0\n" POOL, 2,
			"t.ini:2: [users.app] pool_size: must be empty (inherit) or an integer between 1 and 10000");
	expect_error_at("[users.app]\nquery_timeout = soon\n" POOL, 2, "t.ini:2: [users.app] query_timeout: must be");
	/* Without a value: connect_timeout. */
	cfg = load_clean("[general]\nconnect_timeout = 3s\n" POOL, &pr);
	ck_assert_int_eq(config_client_login_timeout(cfg), 3000);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

/* [pools.*]: pgcat.ini's fallback database, a template for any name. */
START_TEST(test_autodb_pool)
{
	struct config_problems pr;
	struct config *cfg = load_clean("[pools.*]\npool_mode = session\n[pools.*.shards.0]\n"
					"servers = 127.0.0.1:5432:primary\n" POOL, &pr);
	ck_assert_uint_eq(cfg->n_pools, 1);
	ck_assert_ptr_nonnull(cfg->autodb);
	const struct config_pool *x = config_autodb_instance(cfg, "x");
	ck_assert_str_eq(x->shards[0].database, "x");
	ck_assert_int_eq(x->pool_mode, POOL_MODE_SESSION);
	ck_assert_ptr_eq(config_find_pool(cfg, "x"), x);
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

/* [pools.NAME.next.shards.N]: the layout a reshard moves a pool to. */
#define RESHARD_POOL \
	"[pools.p]\nsharded_tables = accounts.id\n" \
	"[pools.p.shards.0]\ndatabase = s0\nservers = 10.0.0.1:5432:primary\n" \
	"[pools.p.shards.1]\ndatabase = s1\nservers = 10.0.0.1:5432:primary\n"
START_TEST(test_next_layout)
{
	struct config_problems pr;
	struct config *cfg = load_clean(RESHARD_POOL "[pools.p.next]\n"
					"[pools.p.next.shards.1]\ndatabase = n1\nservers = 10.0.0.2:5432:primary, 10.0.0.3:5432:replica\n"
					"[pools.p.next.shards.0]\ndatabase = n0\nservers = 10.0.0.2:5432:primary\n"
					"[pools.p.next.shards.2]\ndatabase = n2\nservers = 10.0.0.4:5432:primary\n",
					&pr);
	const struct config_pool *pool = config_find_pool(cfg, "p");
	ck_assert_ptr_nonnull(pool);
	ck_assert_uint_eq(pool->n_shards, 2);
	ck_assert_uint_eq(pool->n_next_shards, 3);
	for (size_t i = 0; i < 3; i++)
		ck_assert_int_eq(pool->next_shards[i].index, (int)i);   /* in index order */
	ck_assert_str_eq(pool->next_shards[1].database, "n1");
	ck_assert_uint_eq(pool->next_shards[1].n_servers, 2);
	ck_assert_str_eq(pool->next_shards[1].servers[1].host, "10.0.0.3");
	ck_assert_str_eq(pool->shards[1].database, "s1");   /* the layout in force is untouched */
	char *printed = NULL;
	size_t plen = 0;
	FILE *f = open_memstream(&printed, &plen);
	ck_assert_ptr_nonnull(f);
	config_print(cfg, f);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(printed, "[pools.p.next.shards.2]"));
	free(printed);
	config_free(cfg);
	config_problems_free(&pr);
	/* without: none planned */
	cfg = load_clean(RESHARD_POOL, &pr);
	ck_assert_uint_eq(config_find_pool(cfg, "p")->n_next_shards, 0);
	config_free(cfg);
	config_problems_free(&pr);

	expect_error_at(RESHARD_POOL "[pools.p.next.shards.0]\ndatabase = n0\nservers = h:1:primary\n"
			"[pools.p.next.shards.2]\ndatabase = n2\nservers = h:1:primary\n",
			1, "t.ini:1: [pools.p]: shard 1 is missing: shards must be numbered 0 to 1 without gaps, but "
			   "[pools.p.next.shards.2] is on line 12");
	expect_error_at(RESHARD_POOL "[pools.p.next.shards.0]\nservers = h:1:primary\n", 9,
			"t.ini:9: [pools.p.next.shards.0] database: a shard of the next layout names its database");
	expect_error_at(RESHARD_POOL "[pools.p.next.shards.0]\ndatabase = n0\nservers = h:1:replica\n", 11,
			"t.ini:11: [pools.p.next.shards.0] servers: a shard of the next layout has exactly one primary, got 0");
	expect_error_at(RESHARD_POOL "[pools.p.next.shards.0]\ndatabase = n0\n", 9,
			"t.ini:9: [pools.p.next.shards.0] servers: a shard of the next layout has exactly one primary");
	expect_error_at(RESHARD_POOL "[pools.p.next]\n", 9,
			"t.ini:9: [pools.p.next]: the next layout has no shards");
	expect_error_at("[pools.q]\n[pools.q.shards.0]\nservers = h:1:primary\n"
			"[pools.q.next.shards.0]\ndatabase = n0\nservers = h:1:primary\n",
			4, "t.ini:4: [pools.q.next]: a next layout splits the rows of sharded_tables by their key");
	expect_error_at(RESHARD_POOL "[pools.p.next.shards.x]\n", 9, "t.ini:9: [pools.p.next.shards.x]: shard number");
	expect_error_at("[pools.*]\nsharded_tables = t.id\n[pools.*.shards.0]\nservers = h:1:primary\n"
			"[pools.*.next.shards.0]\ndatabase = n0\nservers = h:1:primary\n",
			5, "t.ini:5: [pools.*.next]: the * pool (a template of databases) cannot be resharded");
	/* a key of the next section itself: unknown */
	cfg = load(RESHARD_POOL "[pools.p.next]\nstart = now\n[pools.p.next.shards.0]\ndatabase = n0\n"
		   "servers = h:1:primary\n", &pr);
	ck_assert_ptr_nonnull(find(&pr, CONFIG_PROBLEM_UNKNOWN, "t.ini:10: [pools.p.next] start: unknown key"));
	config_free(cfg);
	config_problems_free(&pr);
}
END_TEST

Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_key_table);
	tcase_add_test(tc, test_general_values);
	tcase_add_test(tc, test_every_section);
	tcase_add_test(tc, test_ipv6);
	tcase_add_test(tc, test_inheritance);
	tcase_add_test(tc, test_booleans);
	tcase_add_test(tc, test_message_format);
	tcase_add_test(tc, test_out_of_range);
	tcase_add_test(tc, test_pool_values);
	tcase_add_test(tc, test_duplicates);
	tcase_add_test(tc, test_unknown);
	tcase_add_test(tc, test_syntax);
	tcase_add_test(tc, test_continuation_lists);
	tcase_add_test(tc, test_pool_structure);
	tcase_add_test(tc, test_users);
	tcase_add_test(tc, test_peers);
	tcase_add_test(tc, test_cross_checks);
	tcase_add_test(tc, test_file_format);
	tcase_add_test(tc, test_many_errors);
	tcase_add_test(tc, test_load_file);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_set);
	tcase_add_test(tc, test_set_if);
	tcase_add_test(tc, test_auth_user);
	tcase_add_test(tc, test_console_users);
	tcase_add_test(tc, test_durations);
	tcase_add_test(tc, test_bytes);
	tcase_add_test(tc, test_unix_socket_servers);
	tcase_add_test(tc, test_connect_query);
	tcase_add_test(tc, test_pool_and_user_settings);
	tcase_add_test(tc, test_autodb_pool);
	tcase_add_test(tc, test_next_layout);
	suite_add_tcase(s, tc);
	return s;
}
