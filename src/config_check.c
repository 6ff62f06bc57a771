/* SPDX-License-Identifier: MIT */
/*
 * config_check: the checks of pgcat.ini that need more than one key, run
 * once the whole file is read (include/config_internal.h): [general] keys
 * against each other (also for SET), each pool's shards numbered 0..n-1
 * and put in order, default_shard in range, at most one primary a shard,
 * a user's minimum pool size within its pool size; and what is inherited
 * (a pool's pool_mode from [general], a shard's database from its pool's
 * name). Its own room because reading a line and a value (config_load.c,
 * config_value.c) cannot tell these; each is told at the line of the key
 * concerned.
 */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h and comes
 * first in the include path. */
#include "config.h"
#include "config_internal.h"
#include "ldap_opts.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Whole-file checks, once everything is read                           */

static int general_line(const struct parser *p, const char *key)
{
	size_t i;
	return find_spec(general_specs, N_GENERAL_KEYS, key, &i) ? p->general_line[i] : 0;
}

/* A problem at a [general] key's line, in the file it was read from. */
__attribute__((format(printf, 4, 5)))
static void general_problem(struct parser *p, enum config_problem_kind kind, const char *key, const char *fmt, ...)
{
	size_t i;
	const char *file = find_spec(general_specs, N_GENERAL_KEYS, key, &i) ? p->general_file[i] : NULL;
	const char *was = p->file;
	if (file != NULL)
		p->file = file;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	problem(p, kind, general_line(p, key), p->general_section, key, "%s", msg);
	p->file = was;
}

#define general_error(p, key, ...) general_problem((p), CONFIG_PROBLEM_ERROR, (key), __VA_ARGS__)

void check_general(struct parser *p)
{
	const struct config_general *g = &p->cfg->general;
	/* PgBouncer caps min_pool_size at the pool size, as pool_fill_min
	 * does: only pgcat.ini calls a larger one a mistake. */
	bool pgcat_ini = p->cfg->format == CONFIG_FORMAT_PGCAT;
	if (pgcat_ini && g->min_pool_size > g->default_pool_size)
		general_error(p, "min_pool_size", "must not exceed default_pool_size (%d), got %d",
			      g->default_pool_size, g->min_pool_size);
	if (g->auth_type == AUTH_TYPE_LDAP && g->auth_ldap_options[0] == '\0')
		general_error(p, "auth_type", "ldap needs auth_ldap_options (where the LDAP server is, and how to find "
			      "the user)");
	if (g->auth_ldap_options[0] != '\0') {
		/* Read for good by config_load.c, once the whole file is good. */
		struct ldap_opts o;
		char why[LDAP_OPTS_WHY_MAX];
		if (ldap_opts_parse_string(g->auth_ldap_options, &o, why, sizeof why))
			ldap_opts_free(&o);
		else
			general_error(p, "auth_ldap_options", "%s", why);
	}
	if (g->n_listen_addr == 0 && g->unix_socket_dir[0] == '\0')
		general_error(p, "listen_addr", "is empty and so is unix_socket_dir: nothing to listen on");
	if (g->prometheus_port != 0 && g->prometheus_port == g->listen_port)
		general_error(p, "prometheus_port", "must differ from listen_port (%d)", g->listen_port);
	if (g->client_tls_sslmode != TLS_MODE_DISABLE &&
	    (g->client_tls_cert_file[0] == '\0' || g->client_tls_key_file[0] == '\0'))
		general_error(p, "client_tls_sslmode", "\"%s\" needs client_tls_cert_file and client_tls_key_file",
			      enum_name(&client_tls_enum, (int)g->client_tls_sslmode));
	if ((g->client_tls_sslmode == TLS_MODE_VERIFY_CA || g->client_tls_sslmode == TLS_MODE_VERIFY_FULL) &&
	    g->client_tls_ca_file[0] == '\0')
		general_error(p, "client_tls_sslmode", "\"%s\" needs client_tls_ca_file to check client certificates",
			      enum_name(&client_tls_enum, (int)g->client_tls_sslmode));
	/* As libpq 17 refuses sslnegotiation=direct below sslmode=require: a
	 * server that does not take the direct handshake leaves no way back to
	 * plain text, so a "prefer" that cannot prefer anything is an error. */
	if (g->server_tls_negotiation == TLS_NEGOTIATION_DIRECT && g->server_tls_sslmode < TLS_MODE_REQUIRE)
		general_error(p, "server_tls_negotiation",
			      "\"direct\" needs server_tls_sslmode require, verify-ca or verify-full, got \"%s\"",
			      enum_name(&server_tls_enum, (int)g->server_tls_sslmode));
	/* (A console SET changes one of them at a time: the certificate is
	 * used once both are set, tls.c.) */
	if (!p->one_set && (g->server_tls_cert_file[0] == '\0') != (g->server_tls_key_file[0] == '\0'))
		general_error(p, g->server_tls_cert_file[0] ? "server_tls_cert_file" : "server_tls_key_file",
			      "server_tls_cert_file and server_tls_key_file go together: set both or neither");
	if (g->server_tls_cert_file[0] && g->server_tls_sslmode == TLS_MODE_DISABLE)
		general_problem(p, CONFIG_PROBLEM_WARNING, "server_tls_cert_file",
				"ignored while server_tls_sslmode is disable");
	if (p->cfg->n_peers > 0 && g->peer_id == 0)
		problem(p, CONFIG_PROBLEM_WARNING, p->peers_line, "peers", NULL,
			"ignored while [%s] peer_id is 0", p->general_section);
}

/* Put shards[0..n) (of pool's layout, or its next one: what names the
 * sections, "shards" or "next.shards") in index order; they must be
 * numbered 0..n-1. */
static bool order_shards(struct parser *p, const struct config_pool *pool, const struct pool_meta *meta,
			 struct config_shard *shards, struct shard_meta *metas, size_t n, const char *what)
{
	bool *seen = p_alloc(p, n);
	if (seen == NULL)
		return false;
	const struct shard_meta *beyond = NULL;
	int beyond_index = 0;
	for (size_t i = 0; i < n; i++) {
		if ((size_t)shards[i].index < n) {
			seen[shards[i].index] = true;
		} else if (beyond == NULL || shards[i].index < beyond_index) {
			beyond = &metas[i];
			beyond_index = shards[i].index;
		}
	}
	if (beyond != NULL) {
		size_t missing = 0;
		while (missing < n && seen[missing])
			missing++;
		char section[CONFIG_MAX_NAME + 8];
		snprintf(section, sizeof(section), "pools.%s", pool->name);
		problem(p, CONFIG_PROBLEM_ERROR, meta->line, section, NULL,
			"shard %zu is missing: shards must be numbered 0 to %zu without gaps, "
			"but [pools.%s.%s.%d] is on line %d",
			missing, n - 1, pool->name, what, beyond_index, beyond->line);
		free(seen);
		return false;
	}
	free(seen);
	for (size_t i = 0; i < n; i++) {
		while ((size_t)shards[i].index != i) {
			size_t j = (size_t)shards[i].index;
			struct config_shard ts = shards[i];
			shards[i] = shards[j];
			shards[j] = ts;
			struct shard_meta tm = metas[i];
			metas[i] = metas[j];
			metas[j] = tm;
		}
	}
	return true;
}

/* [pools.NAME.next.shards.N] (issue 45): numbered without gaps, each with
 * its database and servers (one primary, which the rows are written to),
 * on a pool that has sharded tables to split. */
static void check_next_layout(struct parser *p, struct config_pool *pool, struct pool_meta *meta)
{
	char section[CONFIG_MAX_NAME * 2 + 40];
	snprintf(section, sizeof(section), "pools.%s.next", pool->name);
	if (pool->n_next_shards == 0) {
		if (meta->next_line)
			problem(p, CONFIG_PROBLEM_ERROR, meta->next_line, section, NULL,
				"the next layout has no shards; add [pools.%s.next.shards.0] and the others", pool->name);
		return;
	}
	int line = meta->next_line ? meta->next_line : meta->next_shards[0].line;
	if (strcmp(pool->name, "*") == 0) {
		problem(p, CONFIG_PROBLEM_ERROR, line, section, NULL,
			"the * pool (a template of databases) cannot be resharded");
		return;
	}
	if (pool->n_sharded_tables == 0)
		problem(p, CONFIG_PROBLEM_ERROR, line, section, NULL,
			"a next layout splits the rows of sharded_tables by their key: the pool has none");
	if (!order_shards(p, pool, meta, pool->next_shards, meta->next_shards, pool->n_next_shards, "next.shards"))
		return;
	for (size_t i = 0; i < pool->n_next_shards; i++) {
		const struct config_shard *shard = &pool->next_shards[i];
		const struct shard_meta *sm = &meta->next_shards[i];
		snprintf(section, sizeof(section), "pools.%s.next.shards.%d", pool->name, shard->index);
		if (shard->database == NULL)
			problem(p, CONFIG_PROBLEM_ERROR, sm->line, section, "database",
				"a shard of the next layout names its database");
		size_t primaries = 0;
		for (size_t j = 0; j < shard->n_servers; j++)
			primaries += shard->servers[j].role == SERVER_ROLE_PRIMARY;
		if (shard->n_servers > CONFIG_MAX_SHARD_SERVERS)
			problem(p, CONFIG_PROBLEM_ERROR, sm->key_line[SHARD_KEY_SERVERS], section, "servers",
				"a shard lists at most %d servers, got %zu", CONFIG_MAX_SHARD_SERVERS,
				shard->n_servers);
		else if (primaries != 1)
			problem(p, CONFIG_PROBLEM_ERROR, sm->key_line[SHARD_KEY_SERVERS] ? sm->key_line[SHARD_KEY_SERVERS]
											   : sm->line,
				section, "servers", "a shard of the next layout has exactly one primary, got %zu",
				primaries);
	}
}

static void check_pool(struct parser *p, struct config_pool *pool, struct pool_meta *meta)
{
	const struct config_general *g = &p->cfg->general;
	char section[CONFIG_MAX_NAME * 2 + 32];

	pool->pool_mode_own = meta->key_line[POOL_KEY_POOL_MODE] != 0;
	if (!pool->pool_mode_own)
		pool->pool_mode = g->pool_mode;
	snprintf(section, sizeof(section), "pools.%s", pool->name);
	if (pool->n_shards == 0) {
		problem(p, CONFIG_PROBLEM_ERROR, meta->line, section, NULL,
			"pool has no shards; add a [pools.%s.shards.0] section with its servers", pool->name);
	} else if (order_shards(p, pool, meta, pool->shards, meta->shards, pool->n_shards, "shards")) {
		if (pool->default_shard != CONFIG_DEFAULT_SHARD_ALL && (size_t)pool->default_shard >= pool->n_shards)
			problem(p, CONFIG_PROBLEM_ERROR, meta->key_line[POOL_KEY_DEFAULT_SHARD], section,
				"default_shard", "must be \"all\" or a shard number below %zu, got %d",
				pool->n_shards, pool->default_shard);
	}
	for (size_t i = 0; i < pool->n_shards; i++) {
		struct config_shard *shard = &pool->shards[i];
		const struct shard_meta *sm = &meta->shards[i];
		snprintf(section, sizeof(section), "pools.%s.shards.%d", pool->name, shard->index);
		/* `*`: the database a client asks for (config_autodb_instance). */
		if (shard->database == NULL && sm->key_line[SHARD_KEY_DATABASE] == 0 && strcmp(pool->name, "*") != 0) {
			shard->database = p_strdup(p, pool->name);
		}
		if (shard->n_servers == 0 && p->cfg->format == CONFIG_FORMAT_PGCAT) {
			if (sm->key_line[SHARD_KEY_SERVERS] != 0)
				problem(p, CONFIG_PROBLEM_ERROR, sm->key_line[SHARD_KEY_SERVERS], section, "servers",
					"must list at least one server as host:port:role");
			else
				problem(p, CONFIG_PROBLEM_ERROR, sm->line, section, NULL,
					"shard has no servers; add servers = host:port:role, ...");
		}
		if (shard->n_servers > CONFIG_MAX_SHARD_SERVERS)
			problem(p, CONFIG_PROBLEM_ERROR, sm->key_line[SHARD_KEY_SERVERS], section, "servers",
				"a shard lists at most %d servers, got %zu", CONFIG_MAX_SHARD_SERVERS,
				shard->n_servers);
		size_t primaries = 0;
		for (size_t j = 0; j < shard->n_servers; j++)
			primaries += shard->servers[j].role == SERVER_ROLE_PRIMARY;
		if (primaries > 1)
			problem(p, CONFIG_PROBLEM_ERROR, sm->key_line[SHARD_KEY_SERVERS], section, "servers",
				"a shard has at most one primary, got %zu", primaries);
	}
	check_next_layout(p, pool, meta);
	bool pgcat_ini = p->cfg->format == CONFIG_FORMAT_PGCAT;
	snprintf(section, sizeof(section), "pools.%s", pool->name);
	if (pgcat_ini && pool->min_pool_size != CONFIG_INHERIT &&
	    pool->min_pool_size > config_user_pool_size(p->cfg, pool, NULL))
		problem(p, CONFIG_PROBLEM_ERROR, meta->key_line[POOL_KEY_MIN_POOL_SIZE], section, "min_pool_size",
			"the minimum pool size (%d) exceeds the pool size (%d)", pool->min_pool_size,
			config_user_pool_size(p->cfg, pool, NULL));
	if (pool->server_password != NULL && pool->server_username == NULL)
		problem(p, CONFIG_PROBLEM_ERROR, meta->key_line[POOL_KEY_SERVER_PASSWORD], section, "server_password",
			"goes with server_username, which is not set");
	if (pgcat_ini && pool->auth_dbname != NULL && config_find_pool(p->cfg, pool->auth_dbname) == NULL)
		problem(p, CONFIG_PROBLEM_ERROR, meta->key_line[POOL_KEY_AUTH_DBNAME], section, "auth_dbname",
			"names no pool: \"%.*s\"", CONFIG_QUOTE_MAX, pool->auth_dbname);
	for (size_t i = 0; i < pool->n_users; i++) {
		const struct config_user *u = &pool->users[i];
		const struct user_meta *um = &meta->users[i];
		int size = config_user_pool_size(p->cfg, pool, u);
		int min = config_user_min_pool_size(p->cfg, pool, u);
		int line = um->key_line[USER_KEY_MIN_POOL_SIZE] ? um->key_line[USER_KEY_MIN_POOL_SIZE]
							       : um->key_line[USER_KEY_POOL_SIZE];
		const char *key = um->key_line[USER_KEY_MIN_POOL_SIZE] ? "min_pool_size" : "pool_size";
		if (pgcat_ini && min > size && line != 0) {
			snprintf(section, sizeof(section), "pools.%s.users.%s", pool->name, u->name);
			problem(p, CONFIG_PROBLEM_ERROR, line, section, key,
				"the minimum pool size (%d) exceeds the pool size (%d)", min, size);
		}
	}
}

/* Whether pgcat knows a password (or that there is none to know) for
 * user au: a users section, or auth_file. */
static bool auth_user_known(const struct config *cfg, const char *au)
{
	if (cfg->auth_user_secret_of && strcmp(cfg->auth_user_secret_of, au) == 0)
		return true;
	if (cfg->auth_users && config_console_secret(cfg, au) != NULL)
		return true;
	for (size_t i = 0; i < cfg->n_pools; i++)
		for (size_t j = 0; j < cfg->pools[i].n_users; j++)
			if (strcmp(cfg->pools[i].users[j].name, au) == 0)
				return true;
	return false;
}

/* auth_user (of [general] or of a pool) that pgcat has no password for.
 * A pgbouncer.ini may leave it out of auth_file: PgBouncer then logs in
 * without a password (the server trusts it), and so does pgcat; in
 * pgcat.ini it is a mistake. prefix: "" for the key itself, else what
 * goes before the name in the message. */
static void unknown_auth_user(struct parser *p, int line, const char *section, const char *key, const char *prefix,
			      const char *au)
{
	const struct config *cfg = p->cfg;
	const char *nofile = cfg->general.auth_file[0] ? "" : " (auth_file is not set)";
	if (cfg->format == CONFIG_FORMAT_PGBOUNCER)
		problem(p, CONFIG_PROBLEM_WARNING, line, section, key,
			"%suser \"%.*s%s\" is not in auth_file%s: auth_query logs in as it without a password", prefix,
			CONFIG_QUOTE_MAX, au, strlen(au) > CONFIG_QUOTE_MAX ? "..." : "", nofile);
	else
		problem(p, CONFIG_PROBLEM_ERROR, line, section, key,
			"%suser \"%.*s%s\" is in no [pools.NAME.users.USER] section and not in auth_file%s: "
			"auth_query cannot log in", prefix, CONFIG_QUOTE_MAX, au, strlen(au) > CONFIG_QUOTE_MAX ? "..." : "",
			nofile);
}

void check_auth_user(struct parser *p)
{
	const struct config *cfg = p->cfg;
	const char *au = cfg->general.auth_user;
	if (au != NULL && au[0] != '\0' && !auth_user_known(cfg, au)) {
		size_t i;
		const char *was = p->file;
		if (find_spec(general_specs, N_GENERAL_KEYS, "auth_user", &i) && p->general_file[i])
			p->file = p->general_file[i];
		unknown_auth_user(p, general_line(p, "auth_user"), p->general_section, "auth_user", "", au);
		p->file = was;
	}
	/* Pools' own auth_user: only at load (p->pools is NULL under SET). */
	for (size_t i = 0; p->pools != NULL && i < cfg->n_pools; i++) {
		const char *pau = cfg->pools[i].auth_user;
		if (pau == NULL || auth_user_known(cfg, pau))
			continue;
		char section[CONFIG_MAX_NAME + 8];
		int line = p->pools[i].key_line[POOL_KEY_AUTH_USER];
		if (cfg->format == CONFIG_FORMAT_PGBOUNCER) {
			const char *was = p->file;
			if (p->pools[i].file)
				p->file = p->pools[i].file;
			unknown_auth_user(p, line, "databases", cfg->pools[i].name, "auth_user: ", pau);
			p->file = was;
		} else {
			snprintf(section, sizeof(section), "pools.%s", cfg->pools[i].name);
			unknown_auth_user(p, line, section, "auth_user", "", pau);
		}
	}
}

void check_all(struct parser *p)
{
	check_general(p);
	for (size_t i = 0; i < p->cfg->n_pools; i++)
		check_pool(p, &p->cfg->pools[i], &p->pools[i]);
	if (p->cfg->n_pools == 0 && p->cfg->format == CONFIG_FORMAT_PGBOUNCER)
		problem(p, CONFIG_PROBLEM_WARNING, 0, NULL, NULL,
			"no database in [databases]: only the admin console can be reached");
	else if (p->cfg->n_pools == 0)
		problem(p, CONFIG_PROBLEM_WARNING, 0, NULL, NULL,
			"no [pools.NAME] section: only the admin console can be reached");
}
