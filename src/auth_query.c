/* SPDX-License-Identifier: MIT */
/*
 * auth_query: users looked up on the server (include/auth_query.h, SPEC §3,
 * doc/authentication.md). A connection of its own (bconn.c) logged in as
 * auth_user to the pool's primary runs auth_query with the extended
 * protocol (Parse, Bind with the user name as $1 in text, Execute, Sync:
 * the name is never spliced into SQL), one lookup after another in a FIFO,
 * pipelined. Logins
 * waiting for an answer are parked on its cache entry and resumed through
 * login.c's callback.
 */
#include "auth_query.h"

#include <event2/event.h>
#include <openssl/crypto.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth_md5.h"
#include "auth_scram.h"
#include "bconn.h"
#include "client.h"
#include "config.h"
#include "context.h"
#include "dns.h"
#include "log.h"
#include "pool.h"
#include "proto.h"

/* ------------------------------------------------------------------ */
/* What a secret is                                                     */

enum auth_query_secret auth_query_classify(const char *secret)
{
	if (!secret || !secret[0])
		return AUTH_QUERY_SECRET_NONE;
	if (pg_md5_is_stored(secret))
		return AUTH_QUERY_SECRET_MD5;
	if (strncmp(secret, "SCRAM-SHA-256$", 14) == 0) {
		struct scram_secret s;
		bool ok = scram_secret_parse(secret, &s);
		OPENSSL_cleanse(&s, sizeof s);
		return ok ? AUTH_QUERY_SECRET_SCRAM : AUTH_QUERY_SECRET_INVALID;
	}
	return AUTH_QUERY_SECRET_PLAIN;
}

/* ------------------------------------------------------------------ */
/* The cache                                                            */

static size_t entry_hash(const struct auth_query_cache *c, const char *pool, const char *user)
{
	/* FNV-1a over "pool\0user" */
	uint64_t h = 1469598103934665603ULL;
	for (const char *s = pool;; s++) {
		h = (h ^ (uint8_t)*s) * 1099511628211ULL;
		if (!*s)
			break;
	}
	for (const char *s = user; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ULL;
	return (size_t)(h % c->n_buckets);
}

bool auth_query_cache_init(struct auth_query_cache *c, size_t n_buckets, size_t max)
{
	memset(c, 0, sizeof *c);
	c->buckets = calloc(n_buckets ? n_buckets : 1, sizeof *c->buckets);
	c->n_buckets = n_buckets ? n_buckets : 1;
	c->max = max;
	return c->buckets != NULL;
}

static void entry_free(struct auth_query_entry *e)
{
	if (e->secret) {
		OPENSSL_cleanse(e->secret, strlen(e->secret));
		free(e->secret);
	}
	free(e->pool);
	free(e->user);
	free(e);
}

void auth_query_cache_free(struct auth_query_cache *c)
{
	for (size_t i = 0; c->buckets && i < c->n_buckets; i++) {
		struct auth_query_entry *e = c->buckets[i];
		while (e) {
			struct auth_query_entry *next = e->next;
			entry_free(e);
			e = next;
		}
	}
	free(c->buckets);
	memset(c, 0, sizeof *c);
}

struct auth_query_entry *auth_query_cache_find(const struct auth_query_cache *c, const char *pool, const char *user)
{
	for (struct auth_query_entry *e = c->buckets[entry_hash(c, pool, user)]; e; e = e->next)
		if (strcmp(e->pool, pool) == 0 && strcmp(e->user, user) == 0)
			return e;
	return NULL;
}

struct auth_query_entry *auth_query_cache_add(struct auth_query_cache *c, const char *pool, const char *user)
{
	struct auth_query_entry *e = calloc(1, sizeof *e);
	if (!e)
		return NULL;
	e->pool = strdup(pool);
	e->user = strdup(user);
	if (!e->pool || !e->user) {
		entry_free(e);
		return NULL;
	}
	list_init(&e->waiters);
	list_init(&e->conn_node);
	size_t b = entry_hash(c, pool, user);
	e->next = c->buckets[b];
	c->buckets[b] = e;
	c->n++;
	return e;
}

void auth_query_cache_remove(struct auth_query_cache *c, struct auth_query_entry *e)
{
	for (struct auth_query_entry **pp = &c->buckets[entry_hash(c, e->pool, e->user)]; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			c->n--;
			break;
		}
	}
	entry_free(e);
}

bool auth_query_cache_answer(struct auth_query_entry *e, const char *secret, uint64_t now_us)
{
	char *copy = NULL;
	if (secret && !(copy = strdup(secret)))
		return false;
	if (e->secret) {
		OPENSSL_cleanse(e->secret, strlen(e->secret));
		free(e->secret);
	}
	e->secret = copy;
	e->answered = true;
	e->answered_us = now_us;
	return true;
}

bool auth_query_entry_fresh(const struct auth_query_entry *e, uint64_t now_us, int ttl_ms)
{
	if (!e->answered)
		return false;
	if (e->serving)
		return true;
	return ttl_ms > 0 && now_us >= e->answered_us && now_us - e->answered_us < (uint64_t)ttl_ms * 1000;
}

/* Entries that may go: answered, nobody waiting, not being served. */
static bool entry_idle(const struct auth_query_entry *e)
{
	return e->answered && !e->serving && list_empty(&e->waiters) && !e->conn;
}

size_t auth_query_cache_sweep(struct auth_query_cache *c, uint64_t now_us, int ttl_ms)
{
	size_t n = 0;
	for (size_t i = 0; i < c->n_buckets; i++) {
		struct auth_query_entry **pp = &c->buckets[i];
		while (*pp) {
			struct auth_query_entry *e = *pp;
			if (entry_idle(e) && !auth_query_entry_fresh(e, now_us, ttl_ms)) {
				*pp = e->next;
				c->n--;
				entry_free(e);
				n++;
			} else {
				pp = &e->next;
			}
		}
	}
	return n;
}

void auth_query_cache_trim(struct auth_query_cache *c)
{
	for (;;) {
		size_t answered = 0;
		struct auth_query_entry *oldest = NULL;
		for (size_t i = 0; i < c->n_buckets; i++)
			for (struct auth_query_entry *e = c->buckets[i]; e; e = e->next) {
				if (!entry_idle(e))
					continue;
				answered++;
				if (!oldest || e->answered_us < oldest->answered_us)
					oldest = e;
			}
		if (answered <= c->max || !oldest)
			return;
		/* Rare (a flood of names): one pass per entry over the limit. */
		auth_query_cache_remove(c, oldest);
	}
}

/* ------------------------------------------------------------------ */
/* The lookup connections                                               */

static const struct bconn_profile aq_profile = {
	.application_name = "pgcat auth_query",
	.auth_failed = "login as auth_user failed: ",
	.refused = "login as auth_user failed: ",
	/* The largest message read: a row of a user name and a secret, errors
	 * and login messages are far below; a custom auth_query's row has room. */
	.max_message = 65536,
	.read_high = 4 * 65536,
};
#define AQ_CACHE_BUCKETS 1024
#define AQ_CACHE_MAX 10000
/* The timer: while lookups are under way, and while connections idle. */
#define AQ_TICK_BUSY_MS 20
#define AQ_TICK_IDLE_MS 1000

enum aq_conn_state {
	AQ_RESOLVING,       /* the host name has no address yet (c-ares) */
	AQ_OPENING,         /* connect, TLS, login (bconn.c) */
	AQ_READY,           /* logged in; lookups are sent as they come */
	AQ_CLOSED           /* gone: freed once its callback returns */
};

struct aq_conn {
	struct auth_query *aq;
	struct list_node node;        /* on aq->conns */
	struct bconn b;               /* logged in as auth_user (its user name: bconn_user) */
	enum aq_conn_state state;
	/* Where (owned copies: a reload may free the config). */
	char *host;
	int port;
	char *database;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	uint64_t gen;                 /* the cache generation it was opened in */
	uint64_t idle_since_us;
	/* Lookups: struct auth_query_entry, FIFO; those sent come first. */
	struct list_node queue;
	/* The answer of the queue's head, as it comes. */
	bool row_seen;
	char *row_secret;
	bool bad_row;
	bool query_error;
	bool not_found_error;         /* a data exception (an unusable name): not found */
	char error[256];
};

struct auth_query {
	struct worker *w;
	struct auth_query_cache cache;
	struct list_node conns;
	/* Connections closed during this loop turn (their io's callback may
	 * still be on the stack): freed by the reaper event after it. */
	struct list_node dead;
	struct event *reaper;
	struct event *timer;
	bool timer_armed;
	uint64_t gen;                 /* bumped by a reload: answers asked before are not kept */
	void (*resume)(struct client *c);
	char why[160];                /* a refusal's words that name something */
};

static void arm_timer(struct auth_query *aq);

static void reset_answer(struct aq_conn *k)
{
	if (k->row_secret) {
		OPENSSL_cleanse(k->row_secret, strlen(k->row_secret));
		free(k->row_secret);
	}
	k->row_secret = NULL;
	k->row_seen = k->bad_row = k->query_error = k->not_found_error = false;
	k->error[0] = '\0';
}

static void conn_free(struct aq_conn *k)
{
	list_del(&k->node);
	bconn_release(&k->b);
	reset_answer(k);
	free(k->host);
	free(k->database);
	free(k);
}

/* ---- the end of a lookup ---- */

/* The logins waiting on e fail (the lookup did not answer); e goes.
 * verbatim: why is the client's whole error (a server's own refusal). */
static void entry_fail(struct auth_query *aq, struct auth_query_entry *e, const char *why, bool verbatim)
{
	if (e->conn) {
		list_del(&e->conn_node);
		e->conn = NULL;
	}
	while (!list_empty(&e->waiters)) {
		struct pool_waiter *pw = LIST_OWNER(list_first(&e->waiters), struct pool_waiter, node);
		list_del(&pw->node);
		struct client *c = client_of_waiter(pw);
		if (c && verbatim)
			client_close(c, SQLSTATE_CONNECTION_FAILURE, "%s", why);
		else if (c)
			client_close(c, SQLSTATE_CONNECTION_FAILURE, "authentication lookup failed for user \"%s\": %s",
				     client_user(c), why);
	}
	auth_query_cache_remove(&aq->cache, e);
}

/* e has its answer: the logins waiting on it start again, and find it. */
static void entry_answered(struct auth_query *aq, struct auth_query_entry *e, const char *secret)
{
	struct worker *w = aq->w;
	if (e->conn) {
		list_del(&e->conn_node);
		e->conn = NULL;
	}
	if (!auth_query_cache_answer(e, secret, w->now_us)) {
		entry_fail(aq, e, "out of memory", false);
		return;
	}
	e->serving = true;
	while (!list_empty(&e->waiters)) {
		struct pool_waiter *pw = LIST_OWNER(list_first(&e->waiters), struct pool_waiter, node);
		list_del(&pw->node);
		struct client *c = client_of_waiter(pw);
		if (!c || c->state != CLIENT_LOGIN_WAIT)
			continue;
		client_set_state(c, CLIENT_STARTUP);
		aq->resume(c);
		if (c->state != CLIENT_CLOSED && c->state != CLIENT_LOGIN_WAIT)
			client_process(c);   /* whatever it sent meanwhile */
	}
	e->serving = false;
	/* Not kept: no caching asked for, or asked before a reload. */
	if (w->cfg->general.auth_query_cache_ttl <= 0 || e->gen != aq->gen)
		auth_query_cache_remove(&aq->cache, e);
	else if (aq->cache.n > aq->cache.max) {
		(void)auth_query_cache_sweep(&aq->cache, w->now_us, w->cfg->general.auth_query_cache_ttl);
		auth_query_cache_trim(&aq->cache);
	}
}

/* The connection is lost or given up: every lookup on it fails. */
static void conn_down(void *arg, const char *why)
{
	struct aq_conn *k = arg;
	if (k->state == AQ_CLOSED)
		return;
	struct auth_query *aq = k->aq;
	if (!list_empty(&k->queue))
		log_warning("auth_query: %s:%d database %s user %s: %s", k->host, k->port, k->database,
			    bconn_user(&k->b), why);
	else
		log_debug("auth_query: %s:%d database %s: connection closed: %s", k->host, k->port, k->database, why);
	bconn_close(&k->b, true);   /* Terminate first when logged in */
	k->state = AQ_CLOSED;
	/* The client-facing reason: no server detail (the log has it); on a
	 * pgbouncer.ini a server's own refusal of the login, as PgBouncer
	 * passes it on ('database "x" does not exist'), logged in its words. */
	const char *short_why = strstr(why, "timed out") ? "the server did not answer within connect_timeout"
							 : "the server could not be reached or refused the lookup";
	bool verbatim = aq->w->cfg->pgbouncer && k->b.server_error[0];
	if (verbatim)
		log_warning("auth_query: %s:%d: server login failed: FATAL %s", k->host, k->port, k->b.server_error);
	while (!list_empty(&k->queue)) {
		struct auth_query_entry *e = LIST_OWNER(list_first(&k->queue), struct auth_query_entry, conn_node);
		entry_fail(aq, e, verbatim ? k->b.server_error : short_why, verbatim);
	}
	list_del(&k->node);
	list_add_tail(&aq->dead, &k->node);
	event_active(aq->reaper, 0, 0);
}

/* ---- sending ---- */

static void send_lookup(struct aq_conn *k, struct auth_query_entry *e)
{
	const char *params[1] = { e->user };
	/* The query of the pool the user asked for (its own, else [general]'s). */
	const struct config *cfg = k->aq->w->cfg;
	const char *query = config_pool_auth_query(cfg, config_find_pool(cfg, e->pool));
	if (!bconn_extended(&k->b, query, 1, params)) {
		entry_fail(k->aq, e, "auth_query too long", false);
		return;
	}
	e->sent = true;
}

static void send_pending(struct aq_conn *k)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &k->queue) {
		struct auth_query_entry *e = LIST_OWNER(pos, struct auth_query_entry, conn_node);
		if (!e->sent)
			send_lookup(k, e);
	}
}

/* ---- reading ---- */

/* A DataRow: the first row's second column is the secret (the first is
 * the user name). */
static void read_row(struct aq_conn *k, const uint8_t *body, size_t len)
{
	if (k->row_seen)
		return;   /* only the first row counts */
	k->row_seen = true;
	if (len < 2 || (body[0] << 8 | body[1]) < 2) {
		k->bad_row = true;
		return;
	}
	size_t off = 2;
	for (int col = 0; col < 2; col++) {
		if (len - off < 4) {
			k->bad_row = true;
			return;
		}
		int32_t l = (int32_t)proto_get_u32(body + off);
		off += 4;
		if (l < 0)
			continue;   /* NULL */
		if ((size_t)l > len - off) {
			k->bad_row = true;
			return;
		}
		if (col == 1) {
			k->row_secret = malloc((size_t)l + 1);
			if (!k->row_secret) {
				k->bad_row = true;
				return;
			}
			memcpy(k->row_secret, body + off, (size_t)l);
			k->row_secret[l] = '\0';
			if (memchr(k->row_secret, '\0', (size_t)l))
				k->bad_row = true;
		}
		off += (size_t)l;
	}
}

/* ReadyForQuery after a lookup: the head of the queue has its answer. */
static void lookup_done(struct aq_conn *k)
{
	struct auth_query *aq = k->aq;
	struct auth_query_entry *e = list_empty(&k->queue) ? NULL
				     : LIST_OWNER(list_first(&k->queue), struct auth_query_entry, conn_node);
	if (!e || !e->sent) {
		reset_answer(k);
		return;
	}
	if (k->query_error && !k->not_found_error) {
		log_warning("auth_query for user \"%s\" (pool %s) failed on %s:%d: %s", e->user, e->pool, k->host, k->port,
			    k->error);
		reset_answer(k);
		entry_fail(aq, e, aq->w->cfg->pgbouncer ? "bouncer config error" : "auth_query failed on the server", false);
		return;
	}
	if (k->bad_row) {
		log_warning("auth_query for user \"%s\" (pool %s): the row is not (user name, password)", e->user, e->pool);
		reset_answer(k);
		entry_fail(aq, e, "auth_query returned an unusable row", false);
		return;
	}
	const char *secret = NULL;
	switch (auth_query_classify(k->row_secret)) {
	case AUTH_QUERY_SECRET_MD5:
	case AUTH_QUERY_SECRET_SCRAM:
	case AUTH_QUERY_SECRET_PLAIN:
		secret = k->row_secret;
		break;
	case AUTH_QUERY_SECRET_INVALID:
		log_warning("auth_query for user \"%s\" (pool %s): the password looks like a SCRAM secret but does not "
			    "parse; the login is refused", e->user, e->pool);
		break;
	case AUTH_QUERY_SECRET_NONE:
		/* A row without a password (NULL: none set, or expired by
		 * PgBouncer's default query): the user exists and logs in only
		 * where no password is asked (trust), as in PgBouncer. No row:
		 * not found. */
		if (k->row_seen)
			secret = "";
		break;
	}
	log_debug("auth_query: user \"%s\" (pool %s): %s", e->user, e->pool,
		  !secret ? "not found" : secret[0] ? "found" : "found, without a password");
	/* The answer is copied into the entry before the logins resume. */
	char *keep = k->row_secret;
	k->row_secret = NULL;
	reset_answer(k);
	entry_answered(aq, e, secret);
	if (keep) {
		OPENSSL_cleanse(keep, strlen(keep));
		free(keep);
	}
}

/* ---- the connection's events ---- */

static void conn_ready(void *arg)
{
	struct aq_conn *k = arg;
	k->state = AQ_READY;
	k->idle_since_us = k->aq->w->now_us;
	send_pending(k);
}

static bool conn_message(void *arg, uint8_t type, const uint8_t *body, size_t len)
{
	struct aq_conn *k = arg;
	switch (type) {
	case PqMsg_ErrorResponse: {
		struct proto_error_fields ef;
		bool parsed = proto_parse_error(body, len, &ef);
		/* A failed lookup: the connection stays (ReadyForQuery follows). */
		k->query_error = true;
		/* Class 22 (data exception: a name the server cannot take,
		 * such as one that is not valid in its encoding): no such user. */
		k->not_found_error = parsed && ef.sqlstate && strncmp(ef.sqlstate, "22", 2) == 0;
		snprintf(k->error, sizeof k->error, "%s%s%s", parsed && ef.sqlstate ? ef.sqlstate : "",
			 parsed && ef.sqlstate ? ": " : "", parsed && ef.message ? ef.message : "server error");
		return true;
	}
	case PqMsg_DataRow:
		if (k->state == AQ_READY)
			read_row(k, body, len);
		return true;
	case PqMsg_ReadyForQuery:
		lookup_done(k);
		if (list_empty(&k->queue))
			k->idle_since_us = k->aq->w->now_us;
		return true;
	case PqMsg_ParseComplete:
	case PqMsg_BindComplete:
	case PqMsg_CommandComplete:
	case PqMsg_RowDescription:
	case PqMsg_NoData:
	case PqMsg_EmptyQueryResponse:
	case PqMsg_PortalSuspended:
	case PqMsg_NotificationResponse:
		return true;
	default:
		return false;
	}
}

/* ---- opening ---- */

/* The server to ask: the default shard's primary (else its first server). */
static const struct config_server *pick_server(const struct config_pool *cp, const struct config_shard **shard)
{
	if (cp->n_shards == 0)
		return NULL;
	size_t si = cp->default_shard >= 0 && (size_t)cp->default_shard < cp->n_shards ? (size_t)cp->default_shard : 0;
	const struct config_shard *sh = &cp->shards[si];
	*shard = sh;
	if (sh->n_servers == 0)
		return NULL;
	for (size_t i = 0; i < sh->n_servers; i++)
		if (sh->servers[i].role == SERVER_ROLE_PRIMARY)
			return &sh->servers[i];
	return &sh->servers[0];
}

/* auth_user's login: its users section (this pool's first, else any
 * pool's; server_username and server_password as for its own logins),
 * else its auth_file entry. */
static bool auth_user_login(struct worker *w, const struct config_pool *cp, const char **user, const char **password)
{
	const struct config *cfg = w->cfg;
	const char *au = config_pool_auth_user(cfg, cp);
	const struct config_user *u = config_find_user(cp, au);
	for (size_t i = 0; (!u || u->from_auth_file) && i < cfg->n_pools; i++)
		u = config_find_user(&cfg->pools[i], au);
	if (u && !u->from_auth_file) {
		/* Its own section's server_username, never a pool's forced role. */
		*user = config_user_server_name(NULL, u);   /* (its name is au) */
		*password = config_user_server_password(NULL, u);
		return true;
	}
	if (cfg->auth_user_secret && cfg->auth_user_secret_of && strcmp(cfg->auth_user_secret_of, au) == 0) {
		*user = au;
		*password = cfg->auth_user_secret;
		return true;
	}
	const char *secret = cfg->auth_users ? config_console_secret(cfg, au) : NULL;
	*user = au;
	/* In no users section nor auth_file: without a password (a
	 * pgbouncer.ini may rely on the server trusting auth_user; the load
	 * warned about it). */
	*password = secret;
	return au[0] != '\0';
}

static struct aq_conn *conn_find(struct auth_query *aq, const char *host, int port, const char *db, const char *user)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &aq->conns) {
		struct aq_conn *k = LIST_OWNER(pos, struct aq_conn, node);
		if (k->state != AQ_CLOSED && k->gen == aq->gen && k->port == port && strcmp(k->host, host) == 0 &&
		    strcmp(k->database, db) == 0 && strcmp(bconn_user(&k->b), user) == 0)
			return k;
	}
	return NULL;
}

/* An address for k: a pool's srvpool of that server has one; else an IP
 * literal; else c-ares (false: not yet, the timer tries again). */
static bool resolve(struct aq_conn *k, const char **error)
{
	struct worker *w = k->aq->w;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		const struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			const struct srvpool *sp = p->targets[i];
			if (sp->resolved && sp->port == k->port && strcmp(sp->host, k->host) == 0) {
				memcpy(&k->addr, &sp->addr, sizeof k->addr);
				k->addrlen = sp->addrlen;
				return true;
			}
		}
	}
	if (dns_literal(k->host, k->port, &k->addr, &k->addrlen))
		return true;
	const struct dns_entry *e = w->dns ? dns_lookup(w->dns, k->host, w->cfg->general.dns_max_ttl) : NULL;
	if (!e) {
		*error = "cannot resolve the host name";
		return false;
	}
	if (e->state == DNS_RESOLVING)
		return false;
	if (e->state != DNS_OK || e->n_addrs == 0) {
		*error = "the host name does not resolve";
		return false;
	}
	memcpy(&k->addr, &e->addrs[0], sizeof k->addr);
	k->addrlen = e->addrlens[0];
	if (k->addr.ss_family == AF_INET)
		((struct sockaddr_in *)&k->addr)->sin_port = htons((uint16_t)k->port);
	else if (k->addr.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&k->addr)->sin6_port = htons((uint16_t)k->port);
	return true;
}

/* Resolved: connect (AQ_RESOLVING -> AQ_OPENING, or down). */
static void conn_connect(struct aq_conn *k)
{
	const char *error = NULL;
	if (!resolve(k, &error)) {
		if (error)
			conn_down(k, error);
		return;
	}
	k->state = AQ_OPENING;
	/* (A failure went down through conn_down.) */
	(void)bconn_open(&k->b, &aq_profile, k->host, k->port, (const struct sockaddr *)&k->addr, k->addrlen,
			 k->database);
}

/* A connection for lookups of cp's users: on the server and database of
 * cp's auth_dbname, or with direct of cp itself (the console's lookups,
 * whose database the global auth_dbname names already). */
static struct aq_conn *conn_open(struct auth_query *aq, const struct config_pool *cp, bool direct, const char **error)
{
	struct worker *w = aq->w;
	const struct config_shard *sh = NULL;
	/* auth_dbname: the lookup runs on that pool's server and database. */
	const char *adb = direct ? "" : config_pool_auth_dbname(w->cfg, cp);
	const struct config_pool *ap = adb[0] ? config_find_pool(w->cfg, adb) : cp;
	bool reserved = config_is_console_db(adb);
	if (adb[0] && (!ap || reserved)) {
		/* PgBouncer's log lines, and on a pgbouncer.ini its words to the
		 * client, for a configuration that cannot work. */
		if (reserved)
			log_warning("cannot use the reserved \"%s\" database as an auth_dbname", adb);
		else
			log_warning("authentication database \"%s\" is not configured", adb);
		*error = w->cfg->pgbouncer ? "bouncer config error" : "auth_dbname names no pool";
		return NULL;
	}
	if (adb[0] && pool_db_disabled(w, adb)) {
		snprintf(aq->why, sizeof aq->why, "authentication database \"%.64s\" is disabled", adb);
		*error = aq->why;
		return NULL;
	}
	const struct config_server *cs = ap ? pick_server(ap, &sh) : NULL;
	const char *user, *password;
	if (!cs) {
		*error = "the pool has no server";
		return NULL;
	}
	if (!auth_user_login(w, cp, &user, &password)) {
		log_warning("auth_query: pool %s has no auth_user", cp->name);
		*error = "auth_user is not configured";
		return NULL;
	}
	struct aq_conn *k = conn_find(aq, cs->host, cs->port, sh->database, user);
	if (k)
		return k;
	k = calloc(1, sizeof *k);
	if (!k) {
		*error = "out of memory";
		return NULL;
	}
	k->aq = aq;
	bconn_init(&k->b, w, conn_ready, conn_message, conn_down, k);
	k->state = AQ_RESOLVING;
	k->port = cs->port;
	k->gen = aq->gen;
	list_init(&k->queue);
	list_add_tail(&aq->conns, &k->node);
	/* auth_user known only by its SCRAM verifier: the key a client of
	 * auth_user proved (SCRAM pass-through), if one has. */
	const struct pool *with_key = NULL;
	if (password && strncmp(password, "SCRAM-SHA-256$", 14) == 0) {
		struct list_node *pos, *tmp;
		LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
			const struct pool *p = LIST_OWNER(pos, struct pool, node);
			if (p->have_scram && p->have_passthrough_key && p->cuser && p->cuser->password &&
			    strcmp(p->cuser->password, password) == 0) {
				with_key = p;
				break;
			}
		}
	}
	k->host = strdup(cs->host);
	k->database = strdup(sh->database);
	if (!k->host || !k->database ||
	    !bconn_set_login(&k->b, user, password, with_key ? with_key->passthrough_client_key : NULL,
			     with_key ? with_key->scram.server_key : NULL)) {
		conn_free(k);
		*error = "out of memory";
		return NULL;
	}
	return k;
}

/* ---- the timer: deadlines, DNS, idle connections, stale answers ---- */

static bool anything_pending(struct auth_query *aq)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &aq->conns)
		if (!list_empty(&LIST_OWNER(pos, struct aq_conn, node)->queue))
			return true;
	return false;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct auth_query *aq = arg;
	struct worker *w = aq->w;
	worker_update_clock(w);
	aq->timer_armed = false;
	const struct config_general *g = &w->cfg->general;
	uint64_t now = w->now_us;
	int login_ms = config_client_login_timeout(w->cfg);
	uint64_t login_limit = login_ms > 0 ? (uint64_t)login_ms * 1000 : UINT64_MAX;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &aq->conns) {
		struct aq_conn *k = LIST_OWNER(pos, struct aq_conn, node);
		/* Logins past their own connect_timeout leave, as the worker's
		 * sweep closes those still in their exchange. */
		struct list_node *ep, *et;
		LIST_FOREACH_SAFE(ep, et, &k->queue) {
			struct auth_query_entry *e = LIST_OWNER(ep, struct auth_query_entry, conn_node);
			struct list_node *wp, *wt;
			LIST_FOREACH_SAFE(wp, wt, &e->waiters) {
				struct client *c = client_of_waiter(LIST_OWNER(wp, struct pool_waiter, node));
				if (c && now - c->connect_us >= login_limit)
					client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "canceling authentication due to timeout");
			}
		}
		struct auth_query_entry *head = list_empty(&k->queue) ? NULL
						: LIST_OWNER(list_first(&k->queue), struct auth_query_entry, conn_node);
		if (head && now >= head->deadline_us) {
			conn_down(k, "auth_query timed out (connect_timeout)");
			continue;
		}
		if (k->state == AQ_RESOLVING) {
			conn_connect(k);
			continue;
		}
		/* Idle ones close after idle_timeout, or at once when a reload
		 * made them of another generation. */
		if (k->state == AQ_READY && !head &&
		    (k->gen != aq->gen || (g->idle_timeout > 0 && now - k->idle_since_us >= (uint64_t)g->idle_timeout * 1000)))
			conn_down(k, "idle");
	}
	(void)auth_query_cache_sweep(&aq->cache, now, g->auth_query_cache_ttl);
	arm_timer(aq);
}

static void arm_timer(struct auth_query *aq)
{
	if (aq->timer_armed)
		return;
	bool busy = anything_pending(aq);
	if (!busy && list_empty(&aq->conns) && aq->cache.n == 0)
		return;
	int ms = busy ? AQ_TICK_BUSY_MS : AQ_TICK_IDLE_MS;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	if (busy)
		evtimer_del(aq->timer);   /* an idle tick may be armed far away */
	evtimer_add(aq->timer, &tv);
	aq->timer_armed = busy;
}

static void reaper_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct auth_query *aq = arg;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &aq->dead)
		conn_free(LIST_OWNER(pos, struct aq_conn, node));
}

static struct auth_query *aq_get(struct worker *w)
{
	if (w->auth_query)
		return w->auth_query;
	struct auth_query *aq = calloc(1, sizeof *aq);
	if (!aq)
		return NULL;
	aq->w = w;
	list_init(&aq->conns);
	list_init(&aq->dead);
	if (!auth_query_cache_init(&aq->cache, AQ_CACHE_BUCKETS, AQ_CACHE_MAX) ||
	    !(aq->timer = evtimer_new(w->base, tick_cb, aq)) || !(aq->reaper = event_new(w->base, -1, 0, reaper_cb, aq))) {
		if (aq->timer)
			event_free(aq->timer);
		auth_query_cache_free(&aq->cache);
		free(aq);
		return NULL;
	}
	w->auth_query = aq;
	return aq;
}

/* ------------------------------------------------------------------ */
/* The login's part                                                     */

/* A fresh answer: the user's pool follows it. false: c was closed. */
static bool apply_answer(struct client *c, const struct config_pool *cp, struct pool *p,
			 const struct auth_query_entry *e)
{
	struct worker *w = c->w;
	if (!e->secret) {
		if (p)
			pool_retire_looked_up(p);   /* the user is gone: so are its logins */
		return true;
	}
	if (p) {
		if (!pool_set_looked_up_secret(p, e->secret)) {
			client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
			return false;
		}
		return true;
	}
	if (!pool_add_looked_up(w, cp, client_user(c), e->secret)) {
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	log_info("pool %s user %s: made for a user auth_query found", cp->name, client_user(c));
	return true;
}

/* c waits for e's answer (CLIENT_LOGIN_WAIT, on e's list: client_close
 * takes it off, as it does a pool's waiter). */
static void park(struct client *c, struct auth_query_entry *e)
{
	c->wait.target = NULL;
	c->wait.since_us = c->w->now_us;
	c->wait.client_id = c->id;
	list_add_tail(&e->waiters, &c->wait.node);
	client_set_state(c, CLIENT_LOGIN_WAIT);
}

/* A lookup of c's user in pool cp (direct: see conn_open), cached under
 * (key, user), c parked on it. (c may be closed on return: the connection
 * failed at once.) */
static void start_lookup(struct auth_query *aq, const struct config_pool *cp, const char *key, bool direct,
			 struct client *c)
{
	struct worker *w = aq->w;
	const char *error = NULL;
	struct aq_conn *k = conn_open(aq, cp, direct, &error);
	if (!k) {
		client_close(c, SQLSTATE_CONNECTION_FAILURE, "authentication lookup failed for user \"%s\": %s",
			     client_user(c), error ? error : "error");
		return;
	}
	struct auth_query_entry *e = auth_query_cache_add(&aq->cache, key, client_user(c));
	if (!e) {
		if (list_empty(&k->queue) && k->state == AQ_RESOLVING)
			conn_free(k);   /* made for this lookup, never started */
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	e->gen = aq->gen;
	e->deadline_us = w->now_us + (uint64_t)w->cfg->general.connect_timeout * 1000;
	e->conn = k;
	list_add_tail(&k->queue, &e->conn_node);
	log_debug("auth_query: looking up user \"%s\" (pool %s) on %s:%d", e->user, e->pool, k->host, k->port);
	/* Parked first: a connection that fails at once fails the entry's logins. */
	park(c, e);
	if (k->state == AQ_READY)
		send_lookup(k, e);
	else if (k->state == AQ_RESOLVING && list_first(&k->queue) == &e->conn_node)
		conn_connect(k);   /* a new connection: its first lookup starts it */
	arm_timer(aq);
}

/* The fresh answer cached for (key, c's user); else NULL, with c parked
 * on the lookup under way or on a new one (in cp, direct: see conn_open),
 * or closed (out of memory). resume(c) runs once the answer is in. */
static const struct auth_query_entry *answer_or_park(struct client *c, void (*resume)(struct client *c),
						     const struct config_pool *cp, const char *key, bool direct)
{
	struct worker *w = c->w;
	struct auth_query *aq = aq_get(w);
	if (!aq) {
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return NULL;
	}
	aq->resume = resume;
	struct auth_query_entry *e = auth_query_cache_find(&aq->cache, key, client_user(c));
	if (e && e->answered && auth_query_entry_fresh(e, w->now_us, w->cfg->general.auth_query_cache_ttl))
		return e;
	if (e && e->answered) {
		auth_query_cache_remove(&aq->cache, e);   /* stale: asked again */
		e = NULL;
	}
	if (e)
		park(c, e);   /* a lookup of this user is under way: its answer serves c too */
	else
		start_lookup(aq, cp, key, direct, c);
	return NULL;
}

bool auth_query_login(struct client *c, void (*resume)(struct client *c))
{
	struct worker *w = c->w;
	const char *db = client_database(c), *user = client_user(c);
	struct pool *p = pool_find(w, db, user);
	if (p && !p->own_user)
		return false;   /* the config's user */
	if (p && p->proven)
		return false;   /* an LDAP or PAM user's: no lookup retires or rewrites it */
	const struct config_pool *cp = config_find_pool(w->cfg, db);
	if (!cp)
		return false;
	if (!config_pool_auth_user(w->cfg, cp)[0]) {
		/* Off (SET auth_user = ''): users it had found no longer log in. */
		if (p)
			pool_retire_looked_up(p);
		return false;
	}
	const struct auth_query_entry *e = answer_or_park(c, resume, cp, db, false);
	return !e || !apply_answer(c, cp, p, e);
}

bool auth_query_console_login(struct client *c, void (*resume)(struct client *c), const char **secret)
{
	struct worker *w = c->w;
	const struct config_general *g = &w->cfg->general;
	*secret = NULL;
	if (!g->auth_user || !g->auth_user[0])
		return false;
	const char *adb = g->auth_dbname ? g->auth_dbname : "";
	const struct config_pool *cp = adb[0] && !config_is_console_db(adb) ? config_find_pool(w->cfg, adb) : NULL;
	if (!cp) {
		/* PgBouncer's log lines: the console's own database serves no
		 * lookup. */
		if (!adb[0] || config_is_console_db(adb))
			log_warning("cannot use the reserved \"%s\" database as an auth_dbname",
				    adb[0] ? adb : client_database(c));
		else
			log_warning("authentication database \"%s\" is not configured", adb);
		client_close(c, SQLSTATE_CONNECTION_FAILURE, "authentication lookup failed for user \"%s\": %s",
			     client_user(c), w->cfg->pgbouncer ? "bouncer config error" : "auth_dbname names no pool");
		return true;
	}
	/* Keyed by the console's name, which no pool has: its answers are
	 * the console's alone. */
	const struct auth_query_entry *e = answer_or_park(c, resume, cp, client_database(c), true);
	if (!e)
		return true;
	*secret = e->secret;
	return false;
}

void auth_query_reload(struct worker *w)
{
	struct auth_query *aq = w->auth_query;
	if (!aq)
		return;
	aq->gen++;
	/* Answers go; lookups under way stay for their logins (not kept). */
	for (size_t i = 0; i < aq->cache.n_buckets; i++) {
		struct auth_query_entry **pp = &aq->cache.buckets[i];
		while (*pp) {
			struct auth_query_entry *e = *pp;
			if (entry_idle(e)) {
				*pp = e->next;
				aq->cache.n--;
				entry_free(e);
			} else {
				pp = &e->next;
			}
		}
	}
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &aq->conns) {
		struct aq_conn *k = LIST_OWNER(pos, struct aq_conn, node);
		if (list_empty(&k->queue))
			conn_down(k, "configuration reloaded");
	}
	arm_timer(aq);
}

void auth_query_free(struct worker *w)
{
	struct auth_query *aq = w->auth_query;
	if (!aq)
		return;
	struct list_node *pos, *tmp;
	/* Parked logins close (client_close takes each off its entry). */
	LIST_FOREACH_SAFE(pos, tmp, &aq->conns) {
		struct aq_conn *k = LIST_OWNER(pos, struct aq_conn, node);
		struct list_node *ep, *et;
		LIST_FOREACH_SAFE(ep, et, &k->queue) {
			struct auth_query_entry *e = LIST_OWNER(ep, struct auth_query_entry, conn_node);
			while (!list_empty(&e->waiters)) {
				struct pool_waiter *pw = LIST_OWNER(list_first(&e->waiters), struct pool_waiter, node);
				struct client *c = client_of_waiter(pw);
				if (c && c->state == CLIENT_LOGIN_WAIT)
					client_close(c, NULL, NULL);   /* (takes it off the list) */
				if (list_linked(&pw->node))
					list_del(&pw->node);
			}
			list_del(&e->conn_node);
			e->conn = NULL;
		}
		bconn_close(&k->b, false);
		k->state = AQ_CLOSED;
		conn_free(k);
	}
	reaper_cb(-1, 0, aq);
	auth_query_cache_free(&aq->cache);
	event_free(aq->timer);
	event_free(aq->reaper);
	free(aq);
	w->auth_query = NULL;
}
