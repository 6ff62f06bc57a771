/* SPDX-License-Identifier: MIT */
/*
 * config_pgbouncer: a pgbouncer.ini read as PgBouncer 1.25 reads it, into
 * the same struct config a pgcat.ini gives (include/config_internal.h):
 * PgBouncer's line rules (comments only at the start of a line, no inline
 * ones; quoted keys; `%include FILE`), its sections, and the connection
 * strings of [databases], [users] and [peers]. A database becomes a pool
 * with one shard whose servers are its hosts; a [users] line becomes a
 * [users.NAME]; each [pgbouncer] line goes to config_pgbouncer_keys.c,
 * which knows the settings. Its own room because the format is another
 * one; config_load.c calls it when the file is PgBouncer's and then runs
 * the same checks (config_check.c) and reads auth_file and the hba file as
 * for pgcat.ini. It calls config_pgbouncer_keys.c, config_value.c and
 * config.c only.
 *
 * What differs from PgBouncer on purpose (doc/configuration.md): a
 * relative %include is taken from the including file's directory (as
 * pgcat takes auth_file from the configuration's), not the working
 * directory; PgBouncer stops at the first bad line, pgcat reports them
 * all; and pgcat checks values PgBouncer reads with atoi.
 */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h and comes
 * first in the include path. */
#include "config.h"
#include "config_internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PGB_MAX_INCLUDE 10              /* PgBouncer's nesting limit */
#define PGB_MAX_FILE (16 * 1024 * 1024)

/* A problem on the current line of the current file. */
#define pgb_error(g, key, ...) \
	problem((g)->p, CONFIG_PROBLEM_ERROR, (g)->p->lineno, (g)->p->section_name, (key), __VA_ARGS__)
#define pgb_warning(g, key, ...) \
	problem((g)->p, CONFIG_PROBLEM_WARNING, (g)->p->lineno, (g)->p->section_name, (key), __VA_ARGS__)

/* ------------------------------------------------------------------ */
/* Connection strings                                                   */

/* One key=value of a connection string: key up to '=' or a blank, value
 * quoted '...' ('' for a quote) or up to the next blank; not empty.
 * *pos advances. 0: end; 1: a pair in key/value (malloc'ed); -1: bad
 * (why says where). */
static int cstr_pair(const char **pos, char **key, char **value, char *why, size_t whylen)
{
	const char *s = *pos;
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s == '\0') {
		*pos = s;
		return 0;
	}
	const char *k = s;
	while (*s && *s != '=' && *s != ' ' && *s != '\t')
		s++;
	size_t klen = (size_t)(s - k);
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s != '=' || klen == 0) {
		snprintf(why, whylen, "expected key=value at \"%.20s\"", k);
		return -1;
	}
	s++;
	while (*s == ' ' || *s == '\t')
		s++;
	char *v = malloc(strlen(s) + 1);
	if (v == NULL) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	size_t n = 0;
	if (*s == '\'') {
		s++;
		for (;;) {
			if (*s == '\0') {
				free(v);
				snprintf(why, whylen, "unterminated quoted value of %.*s", (int)klen, k);
				return -1;
			}
			if (*s == '\'' && s[1] == '\'') {
				v[n++] = '\'';
				s += 2;
			} else if (*s == '\'') {
				s++;
				break;
			} else {
				v[n++] = *s++;
			}
		}
		if (*s != '\0' && *s != ' ' && *s != '\t') {
			free(v);
			snprintf(why, whylen, "a blank must follow the closing quote of %.*s", (int)klen, k);
			return -1;
		}
	} else {
		while (*s && *s != ' ' && *s != '\t')
			v[n++] = *s++;
	}
	v[n] = '\0';
	if (n == 0) {
		free(v);
		snprintf(why, whylen, "empty value for %.*s", (int)klen, k);
		return -1;
	}
	*key = strndup(k, klen);
	if (*key == NULL) {
		free(v);
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	*value = v;
	*pos = s;
	return 1;
}

/* An integer of a connection string, min..max: decimal (PgBouncer reads
 * these with atoi, [pgbouncer]'s settings with strtol's C notation). */
static bool cstr_int(struct pgb *g, const char *entry, const char *key, const char *value, long long min,
		     long long max, int *out)
{
	int64_t v;
	if (!parse_int64(value, &v) || v < min || v > max) {
		pgb_error(g, entry, "%s must be an integer between %lld and %lld, got \"%.*s\"", key, min, max,
			  CONFIG_QUOTE_MAX, value);
		return false;
	}
	*out = (int)v;
	return true;
}

/* Seconds of a connection string as ms. */
static bool cstr_seconds(struct pgb *g, const char *entry, const char *key, const char *value, int *out)
{
	double v;
	long long ms;
	if (!pgb_seconds(value, &v) || !pgb_seconds_to_ms(v, &ms)) {
		pgb_error(g, entry, "%s must be a number of seconds, got \"%.*s\"", key, CONFIG_QUOTE_MAX, value);
		return false;
	}
	*out = (int)ms;
	return true;
}

static bool cstr_pool_mode(struct pgb *g, const char *entry, const char *value, int *out)
{
	if (ci_equal(value, "session") || ci_equal(value, "transaction") || ci_equal(value, "statement")) {
		*out = ci_equal(value, "session")       ? POOL_MODE_SESSION
		       : ci_equal(value, "transaction") ? POOL_MODE_TRANSACTION
							: POOL_MODE_STATEMENT;
		return true;
	}
	pgb_error(g, entry, "pool_mode must be session, transaction or statement, got \"%.*s\"", CONFIG_QUOTE_MAX,
		  value);
	return false;
}


/* ------------------------------------------------------------------ */
/* [databases]                                                          */

/* A database entry's connection string, read. */
struct pgb_db {
	char *dbname, *host, *user, *password, *auth_user, *auth_dbname, *auth_query;
	char *client_encoding, *datestyle, *timezone, *application_name, *connect_query;
	int port;
	int pool_size, min_pool_size, reserve_pool_size, max_db_connections, server_lifetime, pool_mode;
	int max_db_client_connections;
	bool lb_disable;
};

static void db_spec_free(struct pgb_db *d)
{
	char **strings[] = { &d->dbname, &d->host, &d->user, &d->password, &d->auth_user, &d->auth_dbname,
			     &d->auth_query, &d->client_encoding, &d->datestyle, &d->timezone, &d->application_name,
			     &d->connect_query };
	for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
		free(*strings[i]);
		*strings[i] = NULL;
	}
}

/* Take value into *dst (owned); a key given twice: the last wins, as in PgBouncer. */
static void take(char **dst, char **value)
{
	free(*dst);
	*dst = *value;
	*value = NULL;
}

/* One key of a database's connection string; false: a problem was reported. */
static bool db_key(struct pgb *g, const char *name, struct pgb_db *d, const char *key, char **value)
{
	const char *v = *value;
	if (strcmp(key, "dbname") == 0)
		take(&d->dbname, value);
	else if (strcmp(key, "host") == 0)
		take(&d->host, value);
	else if (strcmp(key, "user") == 0)
		take(&d->user, value);
	else if (strcmp(key, "password") == 0)
		take(&d->password, value);
	else if (strcmp(key, "auth_user") == 0)
		take(&d->auth_user, value);
	else if (strcmp(key, "auth_dbname") == 0)
		take(&d->auth_dbname, value);
	else if (strcmp(key, "auth_query") == 0)
		take(&d->auth_query, value);
	else if (strcmp(key, "client_encoding") == 0)
		take(&d->client_encoding, value);
	else if (strcmp(key, "datestyle") == 0)
		take(&d->datestyle, value);
	else if (strcmp(key, "timezone") == 0)
		take(&d->timezone, value);
	else if (strcmp(key, "application_name") == 0)
		take(&d->application_name, value);
	else if (strcmp(key, "connect_query") == 0)
		take(&d->connect_query, value);
	else if (strcmp(key, "port") == 0)
		return cstr_int(g, name, key, v, 1, 65535, &d->port);
	else if (strcmp(key, "pool_size") == 0)
		return cstr_int(g, name, key, v, 1, 10000, &d->pool_size);
	else if (strcmp(key, "min_pool_size") == 0)
		return cstr_int(g, name, key, v, 0, 10000, &d->min_pool_size);
	else if (strcmp(key, "reserve_pool_size") == 0 || strcmp(key, "reserve_pool") == 0)
		return cstr_int(g, name, key, v, 0, 10000, &d->reserve_pool_size);
	else if (strcmp(key, "max_db_connections") == 0)
		return cstr_int(g, name, key, v, 0, 1000000, &d->max_db_connections);
	else if (strcmp(key, "server_lifetime") == 0)
		return cstr_seconds(g, name, key, v, &d->server_lifetime);
	else if (strcmp(key, "pool_mode") == 0)
		return cstr_pool_mode(g, name, v, &d->pool_mode);
	else if (strcmp(key, "load_balance_hosts") == 0) {
		if (ci_equal(v, "round-robin") || ci_equal(v, "disable")) {
			d->lb_disable = ci_equal(v, "disable");
			return true;
		}
		pgb_error(g, name, "load_balance_hosts must be round-robin or disable, got \"%.*s\"", CONFIG_QUOTE_MAX, v);
		return false;
	} else if (strcmp(key, "max_db_client_connections") == 0) {
		/* 0: [pgbouncer]'s applies, as in PgBouncer */
		int n;
		if (!cstr_int(g, name, key, v, 0, 1000000, &n))
			return false;
		if (n > 0)
			d->max_db_client_connections = n;
	} else {
		pgb_error(g, name, "unknown connection parameter \"%.*s\"", CONFIG_QUOTE_MAX, key);
		return false;
	}
	return true;
}

/* host=h1,h2 into servers of shard (port each); false: a problem. */
static bool db_hosts(struct pgb *g, const char *name, const struct pgb_db *d, struct config_shard *shard)
{
	const char *s = d->host;
	for (;;) {
		const char *comma = strchr(s, ',');
		size_t n = comma ? (size_t)(comma - s) : strlen(s);
		const char *h = s;
		trim(&h, &n);
		char why[160];
		if (n > 0 && h[0] == '@') {
			pgb_error(g, name, "host \"%.*s\": sockets in the abstract namespace are not supported", (int)n, h);
			return false;
		}
		while (n > 1 && h[0] == '/' && h[n - 1] == '/')
			n--;   /* "/run/postgresql/" names the same socket */
		if (n == 0 || !check_server_host(h, n, why, sizeof(why))) {
			pgb_error(g, name, "host: %s", n == 0 ? "an empty host in the list" : why);
			return false;
		}
		bool twice = false;
		for (size_t i = 0; i < shard->n_servers && !twice; i++)
			twice = strlen(shard->servers[i].host) == n && strncmp(shard->servers[i].host, h, n) == 0;
		if (twice) {
			/* PgBouncer gives such a host two turns of its round; pgcat
			 * has one server for it. */
			pgb_warning(g, name, "host \"%.*s\" is listed twice: pgcat takes it once", (int)n, h);
			if (comma == NULL)
				break;
			s = comma + 1;
			continue;
		}
		if (shard->n_servers >= CONFIG_MAX_SHARD_SERVERS) {
			pgb_error(g, name, "host lists at most %d hosts", CONFIG_MAX_SHARD_SERVERS);
			return false;
		}
		char *copy = p_strndup(g->p, h, n);
		if (copy == NULL || !p_grow(g->p, &shard->servers, shard->n_servers, sizeof(*shard->servers))) {
			free(copy);
			return false;
		}
		shard->servers[shard->n_servers++] = (struct config_server){ .host = copy, .port = d->port };
		if (comma == NULL)
			break;
		s = comma + 1;
	}
	return true;
}

static void pool_clear(struct config_pool *pool, struct pool_meta *meta)
{
	free_fields(pool_specs, POOL_KEY_COUNT, pool);
	for (size_t j = 0; j < pool->n_shards; j++)
		free_fields(shard_specs, SHARD_KEY_COUNT, &pool->shards[j]);
	free(pool->shards);
	for (size_t j = 0; j < pool->n_next_shards; j++)   /* (pgbouncer.ini has none: for form's sake) */
		free_fields(shard_specs, SHARD_KEY_COUNT, &pool->next_shards[j]);
	free(pool->next_shards);
	char *name = pool->name;
	*pool = (struct config_pool){ .name = name };
	free(meta->shards);
	free(meta->next_shards);
	free(meta->users);
	*meta = (struct pool_meta){ 0 };
}

/* The pool of that name, new or emptied (a later entry wins, as in
 * PgBouncer); SIZE_MAX when out of memory. */
static size_t pool_slot(struct pgb *g, const char *name)
{
	struct parser *p = g->p;
	struct config *cfg = p->cfg;
	for (size_t i = 0; i < cfg->n_pools; i++) {
		if (strcmp(cfg->pools[i].name, name) == 0) {
			pool_clear(&cfg->pools[i], &p->pools[i]);
			return i;
		}
	}
	char *copy = p_strdup(p, name);
	if (copy == NULL || !p_grow(p, &p->pools, cfg->n_pools, sizeof(*p->pools)) ||
	    !p_grow(p, &g->socket_host, cfg->n_pools, sizeof(*g->socket_host)) ||
	    !p_grow(p, &cfg->pools, cfg->n_pools, sizeof(*cfg->pools))) {
		free(copy);
		return SIZE_MAX;
	}
	cfg->pools[cfg->n_pools].name = copy;
	return cfg->n_pools++;
}

/* Move a string of the entry into a field of the pool (NULL stays NULL). */
static void give(char **field_ptr, char **value)
{
	free(*field_ptr);
	*field_ptr = *value;
	*value = NULL;
}

static void build_pool(struct pgb *g, const char *name, struct pgb_db *d)
{
	struct parser *p = g->p;
	size_t i = pool_slot(g, name);
	if (i == SIZE_MAX)
		return;
	struct config_pool *pool = &p->cfg->pools[i];
	struct pool_meta *meta = &p->pools[i];
	apply_defaults(p, pool_specs, POOL_KEY_COUNT, pool);
	meta->line = p->lineno;
	meta->file = p->file;
	for (size_t k = 0; k < POOL_KEY_COUNT; k++)
		meta->key_line[k] = p->lineno;
	/* The pool's mode is [pgbouncer]'s unless the entry has its own. */
	meta->key_line[POOL_KEY_POOL_MODE] = d->pool_mode >= 0 ? p->lineno : 0;
	if (d->pool_mode >= 0)
		pool->pool_mode = (enum pool_mode)d->pool_mode;
	/* A host list is a set of equals: each transaction (in session mode,
	 * each session) goes to any of them that is not banned; no query
	 * parsing, no primary. */
	pool->default_role = DEFAULT_ROLE_ANY;
	pool->query_parser_enabled = false;
	pool->pool_size = d->pool_size;
	pool->min_pool_size = d->min_pool_size;
	pool->reserve_pool_size = d->reserve_pool_size;
	pool->max_db_connections = d->max_db_connections;
	pool->max_db_client_connections = d->max_db_client_connections;
	pool->server_lifetime = d->server_lifetime;
	pool->log_min_duration = CONFIG_INHERIT;
	pool->query_stats = CONFIG_INHERIT;
	pool->query_stats_max = CONFIG_INHERIT;
	give(&pool->connect_query, &d->connect_query);
	give(&pool->auth_user, &d->auth_user);
	give(&pool->auth_query, &d->auth_query);
	give(&pool->auth_dbname, &d->auth_dbname);
	give(&pool->client_encoding, &d->client_encoding);
	give(&pool->datestyle, &d->datestyle);
	give(&pool->timezone, &d->timezone);
	give(&pool->application_name, &d->application_name);
	if (d->user != NULL) {
		give(&pool->server_username, &d->user);
		give(&pool->server_password, &d->password);
	}
	if (!p_grow(p, &pool->shards, 0, sizeof(*pool->shards)) || !p_grow(p, &meta->shards, 0, sizeof(*meta->shards)))
		return;
	pool->n_shards = 1;
	meta->shards[0].line = p->lineno;
	for (size_t k = 0; k < SHARD_KEY_COUNT; k++)
		meta->shards[0].key_line[k] = p->lineno;
	struct config_shard *shard = &pool->shards[0];
	/* `*` without dbname=: the name each client asks for (made at login). */
	shard->database = d->dbname ? d->dbname : strcmp(name, "*") == 0 ? NULL : p_strdup(p, name);
	d->dbname = NULL;
	g->socket_host[i] = d->host == NULL;
	if (d->host != NULL && db_hosts(g, name, d, shard)) {
		/* One host: the primary; several: equals (replicas). */
		for (size_t k = 0; k < shard->n_servers; k++)
			shard->servers[k].role = shard->n_servers == 1 ? SERVER_ROLE_PRIMARY : SERVER_ROLE_REPLICA;
		/* disable: stay on the first host until it fails (then the next,
		 * while the first is banned). round-robin: pgcat's loc, the host
		 * with the fewest connections in use (ties at random), which
		 * spreads concurrent clients over the hosts as PgBouncer's turns
		 * do, without a turn order shared between workers. */
		pool->load_balancing_mode = d->lb_disable ? LB_MODE_FIRST : LB_MODE_LOC;
	}
	g->socket_host[i] = d->host == NULL;
}

static void database_entry(struct pgb *g, const char *name, const char *connstr)
{
	if (config_is_console_db(name)) {
		pgb_error(g, name, "the name is reserved for the admin console");
		return;
	}
	if (strlen(name) > CONFIG_MAX_NAME) {
		pgb_error(g, NULL, "database name is longer than %d bytes, PostgreSQL's limit for names", CONFIG_MAX_NAME);
		return;
	}
	struct pgb_db d = { .port = 5432, .pool_size = CONFIG_INHERIT, .min_pool_size = CONFIG_INHERIT,
			    .reserve_pool_size = CONFIG_INHERIT, .max_db_connections = CONFIG_INHERIT,
			    .max_db_client_connections = CONFIG_INHERIT,
			    .server_lifetime = CONFIG_INHERIT, .pool_mode = -1 };
	const char *pos = connstr;
	bool ok = true;
	for (;;) {
		char *key = NULL, *value = NULL, why[120];
		int r = cstr_pair(&pos, &key, &value, why, sizeof(why));
		if (r == 0)
			break;
		if (r < 0) {
			pgb_error(g, name, "%s", why);
			ok = false;
			break;
		}
		ok &= db_key(g, name, &d, key, &value);
		free(key);
		free(value);
	}
	/* PgBouncer's 0 for a database's server_lifetime: [pgbouncer]'s. */
	if (d.server_lifetime == 0)
		d.server_lifetime = CONFIG_INHERIT;
	if (ok && d.password != NULL && d.user == NULL)
		pgb_warning(g, name, "password= without user= is not used (as in PgBouncer): clients log in with "
			    "their own names and auth_file's passwords");
	if (ok)
		build_pool(g, name, &d);
	db_spec_free(&d);
}

/* ------------------------------------------------------------------ */
/* [users] and [peers]                                                  */

static void user_entry(struct pgb *g, const char *name, const char *connstr)
{
	struct parser *p = g->p;
	struct config *cfg = p->cfg;
	if (strlen(name) > CONFIG_MAX_NAME) {
		pgb_error(g, NULL, "user name is longer than %d bytes, PostgreSQL's limit for names", CONFIG_MAX_NAME);
		return;
	}
	struct config_user_settings us = { .pool_mode = CONFIG_INHERIT, .pool_size = CONFIG_INHERIT,
					   .reserve_pool_size = CONFIG_INHERIT, .max_user_connections = CONFIG_INHERIT,
					   .max_user_client_connections = CONFIG_INHERIT,
					   .query_timeout = CONFIG_INHERIT, .idle_transaction_timeout = CONFIG_INHERIT,
					   .client_idle_timeout = CONFIG_INHERIT, .transaction_timeout = CONFIG_INHERIT };
	const char *pos = connstr;
	bool ok = true;
	for (;;) {
		char *key = NULL, *value = NULL, why[120];
		int r = cstr_pair(&pos, &key, &value, why, sizeof(why));
		if (r == 0)
			break;
		if (r < 0) {
			pgb_error(g, name, "%s", why);
			ok = false;
			break;
		}
		int n = 0;
		int *timeout = strcmp(key, "query_timeout") == 0		? &us.query_timeout
			       : strcmp(key, "idle_transaction_timeout") == 0 ? &us.idle_transaction_timeout
			       : strcmp(key, "client_idle_timeout") == 0      ? &us.client_idle_timeout
			       : strcmp(key, "transaction_timeout") == 0      ? &us.transaction_timeout
									      : NULL;
		if (timeout != NULL) {
			/* 0: not set, [pgbouncer]'s applies (as in PgBouncer) */
			if ((ok &= cstr_seconds(g, name, key, value, &n)) && n > 0)
				*timeout = n;
		} else if (strcmp(key, "pool_mode") == 0) {
			ok &= cstr_pool_mode(g, name, value, &us.pool_mode);
		} else if (strcmp(key, "pool_size") == 0) {
			ok &= cstr_int(g, name, key, value, 1, 10000, &us.pool_size);
		} else if (strcmp(key, "reserve_pool_size") == 0) {
			ok &= cstr_int(g, name, key, value, 0, 10000, &us.reserve_pool_size);
		} else if (strcmp(key, "max_user_connections") == 0) {
			ok &= cstr_int(g, name, key, value, 0, 1000000, &us.max_user_connections);
		} else if (strcmp(key, "max_user_client_connections") == 0) {
			/* 0: [pgbouncer]'s applies, as in PgBouncer */
			if ((ok &= cstr_int(g, name, key, value, 0, 1000000, &n)) && n > 0)
				us.max_user_client_connections = n;
		} else {
			pgb_error(g, name, "unknown user parameter \"%.*s\"", CONFIG_QUOTE_MAX, key);
			ok = false;
		}
		free(key);
		free(value);
	}
	if (!ok)
		return;
	size_t i = 0;
	while (i < cfg->n_user_settings && strcmp(cfg->user_settings[i].name, name) != 0)
		i++;
	if (i == cfg->n_user_settings) {
		us.name = p_strdup(p, name);
		if (us.name == NULL || !p_grow(p, &p->usets, cfg->n_user_settings, sizeof(*p->usets)) ||
		    !p_grow(p, &cfg->user_settings, cfg->n_user_settings, sizeof(*cfg->user_settings))) {
			free(us.name);
			return;
		}
		cfg->n_user_settings++;
	} else {
		us.name = cfg->user_settings[i].name;   /* a later line wins */
	}
	cfg->user_settings[i] = us;
	p->usets[i].line = p->lineno;
}

static void peer_entry(struct pgb *g, const char *name, const char *connstr)
{
	struct parser *p = g->p;
	struct config *cfg = p->cfg;
	int64_t id;
	if (!parse_int64(name, &id) || id < 1 || id > CONFIG_MAX_PEER_ID) {
		pgb_error(g, name, "a peer id must be an integer between 1 and %d", CONFIG_MAX_PEER_ID);
		return;
	}
	char *host = NULL;
	int port = 6432;
	bool ok = true;
	const char *pos = connstr;
	for (;;) {
		char *key = NULL, *value = NULL, why[120];
		int r = cstr_pair(&pos, &key, &value, why, sizeof(why));
		if (r == 0)
			break;
		if (r < 0) {
			pgb_error(g, name, "%s", why);
			ok = false;
			break;
		}
		int n;
		if (strcmp(key, "host") == 0) {
			take(&host, &value);
		} else if (strcmp(key, "port") == 0) {
			ok &= cstr_int(g, name, key, value, 1, 65535, &port);
		} else if (strcmp(key, "pool_size") == 0) {
			if ((ok &= cstr_int(g, name, key, value, 0, INT_MAX, &n)))
				pgb_warning(g, name, "pool_size is not honoured: pgcat forwards each cancel request on a "
					    "connection of its own, at most 256 at a time per worker");
		} else {
			pgb_error(g, name, "unknown connection parameter \"%.*s\"", CONFIG_QUOTE_MAX, key);
			ok = false;
		}
		free(key);
		free(value);
	}
	char why[160];
	if (ok && host == NULL) {
		pgb_error(g, name, "host was not given");
		ok = false;
	} else if (ok) {
		/* As libpq: '/' a Unix socket directory, '@' a name in Linux's
		 * abstract namespace, anything else TCP. */
		size_t n = strlen(host);
		while (host[0] == '/' && n > 1 && host[n - 1] == '/')
			host[--n] = '\0';   /* "/run/pgbouncer/" names the same socket */
		if (!check_peer_host(host, n, why, sizeof(why))) {
			pgb_error(g, name, "host: %s", why);
			ok = false;
		}
	}
	if (!ok) {
		free(host);
		return;
	}
	size_t i = 0;
	while (i < cfg->n_peers && cfg->peers[i].id != id)
		i++;
	if (i == cfg->n_peers) {
		if (!p_grow(p, &p->peer_line, cfg->n_peers, sizeof(*p->peer_line)) ||
		    !p_grow(p, &cfg->peers, cfg->n_peers, sizeof(*cfg->peers))) {
			free(host);
			return;
		}
		cfg->n_peers++;
	} else {
		free(cfg->peers[i].host);   /* a later line wins */
	}
	cfg->peers[i] = (struct config_peer){ .id = (int)id, .host = host, .port = port };
	p->peer_line[i] = p->lineno;
}

/* ------------------------------------------------------------------ */
/* Lines and files                                                      */

static void read_text(struct pgb *g, const char *text, const char *file);

static void include_file(struct pgb *g, const char *name)
{
	struct parser *p = g->p;
	if (g->depth >= PGB_MAX_INCLUDE) {
		problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL, "%%include nested more than %d deep",
			PGB_MAX_INCLUDE);
		return;
	}
	char *path = config_relative_path(p->file, name);
	if (path == NULL || !p_grow(p, &p->files, p->n_files, sizeof(*p->files))) {
		free(path);
		p->oom = true;
		return;
	}
	p->files[p->n_files++] = path;   /* named by the problems of its lines, until the parser goes */
	/* A FIFO or a device would hang or flood the reload that reads it. */
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL, "%%include %s: not a regular file", path);
		return;
	}
	size_t len = 0;
	char *err = NULL;
	char *text = config_read_file(path, PGB_MAX_FILE, &len, &err);
	if (text == NULL) {
		problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL, "%%include %s: %s", path, err ? err : "out of memory");
		free(err);
		return;
	}
	if (strlen(text) != len) {
		problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL, "%%include %s: the file contains a NUL byte", path);
	} else {
		g->depth++;
		read_text(g, text, path);
		g->depth--;
	}
	free(text);
}

static void enter_section(struct pgb *g, const char *name, size_t n)
{
	struct parser *p = g->p;
	free(p->section_name);
	p->section_name = p_strndup(p, name, n);
	if (p->section_name == NULL) {
		g->section = PS_UNKNOWN;
		return;
	}
	static const struct { const char *name; enum pgb_section s; } known[] = {
		{ "pgbouncer", PS_PGBOUNCER }, { "databases", PS_DATABASES }, { "users", PS_USERS }, { "peers", PS_PEERS },
	};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		if (strcmp(p->section_name, known[i].name) == 0) {
			g->section = known[i].s;
			g->saw_main |= known[i].s == PS_PGBOUNCER;
			if (known[i].s == PS_PEERS && p->peers_line == 0)
				p->peers_line = p->lineno;
			return;
		}
	}
	g->section = PS_UNKNOWN;
	problem(p, CONFIG_PROBLEM_UNKNOWN, p->lineno, p->section_name, NULL,
		"unknown section; PgBouncer's are [pgbouncer], [databases], [users] and [peers]");
}

static bool key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
	       c == '-' || c == '*';
}

/* One line (no line end), as PgBouncer's reader takes it. */
static void read_line(struct pgb *g, char *s)
{
	struct parser *p = g->p;
	while (is_space(*s))
		s++;
	if (*s == '\0' || *s == '#' || *s == ';')
		return;
	if (strncmp(s, "%include", 8) == 0 && (s[8] == ' ' || s[8] == '\t')) {
		const char *name = s + 8;
		size_t n = strlen(name);
		trim(&name, &n);
		char *copy = p_strndup(p, name, n);
		if (copy != NULL) {
			include_file(g, copy);
			free(copy);
		}
		return;
	}
	if (*s == '[') {
		char *close = strchr(s, ']');
		if (close == NULL) {
			problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL, "section header \"%.40s\" has no closing ']'", s);
			g->section = PS_UNKNOWN;
			return;
		}
		enter_section(g, s + 1, (size_t)(close - s - 1));
		const char *after = close + 1;
		while (is_space(*after))
			after++;
		if (*after != '\0' && *after != ';' && *after != '#')
			problem(p, CONFIG_PROBLEM_ERROR, p->lineno, p->section_name, NULL, "unexpected text after ']'");
		return;
	}
	/* key: letters, digits, _ . - *, or anything between single quotes */
	char *key = s, *k_end;
	size_t klen;
	if (*s == '\'') {
		key = ++s;
		while (*s && *s != '\'')
			s++;
		klen = (size_t)(s - key);
		if (*s != '\'' || klen == 0) {
			problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL, "a quoted key needs its closing quote");
			return;
		}
		k_end = s++;
	} else {
		while (key_char(*s))
			s++;
		klen = (size_t)(s - key);
		k_end = s;
	}
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s != '=' || klen == 0) {
		problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL,
			"expected \"key = value\", a [section], %%include or a comment, got \"%.40s%s\"", key,
			strlen(key) > 40 ? "..." : "");
		return;
	}
	s++;
	while (*s == ' ' || *s == '\t')
		s++;
	/* The value runs to the end of the line: no inline comments. */
	size_t vlen = strlen(s);
	while (vlen > 0 && is_space(s[vlen - 1]))
		vlen--;
	s[vlen] = '\0';
	*k_end = '\0';
	switch (g->section) {
	case PS_NONE:
		problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, key, "outside any section");
		break;
	case PS_PGBOUNCER:
		pgb_setting(g, key, s);
		break;
	case PS_DATABASES:
		database_entry(g, key, s);
		break;
	case PS_USERS:
		user_entry(g, key, s);
		break;
	case PS_PEERS:
		peer_entry(g, key, s);
		break;
	case PS_UNKNOWN:
		break;
	}
}

static void read_text(struct pgb *g, const char *text, const char *file)
{
	struct parser *p = g->p;
	const char *was_file = p->file;
	int was_line = p->lineno;
	p->file = file;
	p->lineno = 0;
	const char *s = text;
	if (strncmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3;
	while (*s && !p->oom) {
		const char *nl = strchr(s, '\n');
		size_t len = nl ? (size_t)(nl - s) : strlen(s);
		p->lineno++;
		char *line = p_strndup(p, s, len);
		if (line != NULL) {
			read_line(g, line);
			free(line);
		}
		s = nl ? nl + 1 : s + len;
	}
	p->file = was_file;
	p->lineno = was_line;
}

/* ------------------------------------------------------------------ */
/* Loading                                                              */

/* PgBouncer's sections, or %include, and none of pgcat.ini's: a pgcat.ini
 * with a stray [pgbouncer] section stays a pgcat.ini (that section is an
 * unknown one there). */
bool pgb_detect(const char *text)
{
	bool pgbouncer = false, pgcat = false;
	const char *s = text;
	while (*s) {
		while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
			s++;
		if (strncmp(s, "[pgbouncer]", 11) == 0 || strncmp(s, "[databases]", 11) == 0 ||
		    (strncmp(s, "%include", 8) == 0 && (s[8] == ' ' || s[8] == '\t')))
			pgbouncer = true;
		else if (strncmp(s, "[general]", 9) == 0 || strncmp(s, "[pools.", 7) == 0)
			pgcat = true;
		const char *nl = strchr(s, '\n');
		if (nl == NULL)
			break;
		s = nl + 1;
	}
	return pgbouncer && !pgcat;
}

/* What needs the whole file: databases without host= go to the Unix
 * socket directory, and the names auth_dbname gives must be databases. */
static void finish(struct pgb *g)
{
	struct parser *p = g->p;
	struct config *cfg = p->cfg;
	const char *was = p->file;
	for (size_t i = 0; i < cfg->n_pools && !p->oom; i++) {
		struct config_pool *pool = &cfg->pools[i];
		p->file = p->pools[i].file;
		/* As PgBouncer: the file is taken, and the logins to this
		 * database that need auth_query are refused (auth_query.c says
		 * why, in PgBouncer's words). */
		if (pool->auth_dbname != NULL && config_find_pool(cfg, pool->auth_dbname) == NULL)
			problem(p, CONFIG_PROBLEM_WARNING, p->pools[i].line, "databases", pool->name,
				"auth_dbname \"%.*s\" is no database of [databases]: logins that need auth_query "
				"will be refused", CONFIG_QUOTE_MAX, pool->auth_dbname);
		if (!g->socket_host[i])
			continue;
		const char *dir = cfg->general.unix_socket_dir;
		struct config_shard *shard = &pool->shards[0];
		if (dir[0] == '\0') {
			problem(p, CONFIG_PROBLEM_ERROR, p->pools[i].line, "databases", pool->name,
				"no host=, and unix_socket_dir is empty: no Unix socket to connect to");
			continue;
		}
		char *copy = p_strdup(p, dir);
		if (copy == NULL || !p_grow(p, &shard->servers, 0, sizeof(*shard->servers))) {
			free(copy);
			continue;
		}
		shard->servers[0] = (struct config_server){ .host = copy, .port = 5432, .role = SERVER_ROLE_PRIMARY };
		shard->n_servers = 1;
	}
	p->file = was;
	const char *adb = cfg->general.auth_dbname;
	size_t idx;
	if (adb[0] != '\0' && config_find_pool(cfg, adb) == NULL &&
	    find_spec(general_specs, N_GENERAL_KEYS, "auth_dbname", &idx)) {
		if (p->general_file[idx])
			p->file = p->general_file[idx];
		if (strcmp(adb, "pgbouncer") == 0)   /* PgBouncer's words */
			problem(p, CONFIG_PROBLEM_ERROR, p->general_line[idx], "pgbouncer", "auth_dbname",
				"cannot use the reserved \"pgbouncer\" database as an auth_dbname");
		else
			problem(p, CONFIG_PROBLEM_ERROR, p->general_line[idx], "pgbouncer", "auth_dbname",
				"\"%.*s\" is no database of [databases]", CONFIG_QUOTE_MAX, adb);
		p->file = was;
	}
	if (!g->saw_main)
		problem(p, CONFIG_PROBLEM_ERROR, 0, NULL, NULL, "no [pgbouncer] section: PgBouncer refuses such a file too");
	pgb_finish_settings(g);
}

void pgb_load(struct parser *p, const char *text)
{
	struct pgb g = { .p = p };
	p->cfg->format = CONFIG_FORMAT_PGBOUNCER;
	p->general_section = "pgbouncer";
	pgb_apply_defaults(&g);
	read_text(&g, text, p->file);
	if (!p->oom)
		finish(&g);
	for (size_t i = 0; i < PGB_KEY_SLOTS; i++)
		free(g.value[i]);
	free(g.socket_host);
}
