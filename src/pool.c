/* SPDX-License-Identifier: MIT */
/*
 * pool: checkout, checkin and the FIFO of waiting clients per (pool, user,
 * server); the link between a client and a server; the janitor's pool
 * duties. Knows no protocol: it moves connections between lists and tells
 * the client and server machines what happened.
 */
#include "pool.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth_md5.h"
#include "client.h"
#include "log.h"
#include "server.h"
#include "worker.h"

/* After a failed connect, do not try the same server again sooner than
 * this while no connection to it is alive; clients asking meanwhile get
 * the failure at once instead of a storm of doomed connects. */
#define RECONNECT_BACKOFF_US 500000ULL

static bool resolve(struct srvpool *sp)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC };
	struct addrinfo *res = NULL;
	char port[16];
	snprintf(port, sizeof port, "%d", sp->port);
	/* Resolved once at startup; asynchronous re-resolution (c-ares) is a
	 * later step. */
	int rc = getaddrinfo(sp->host, port, &hints, &res);
	if (rc != 0 || !res) {
		log_warning("cannot resolve server %s:%d: %s", sp->host, sp->port, gai_strerror(rc));
		return false;
	}
	memcpy(&sp->addr, res->ai_addr, res->ai_addrlen);
	sp->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	return true;
}

static struct pool *pool_new(struct worker *w, const struct config_pool *cp, const struct config_user *cu)
{
	struct pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->w = w;
	p->name = strdup(cp->name);
	p->user = strdup(cu->name);
	p->cpool = cp;
	p->cuser = cu;
	p->mode = config_user_pool_mode(cp, cu);
	p->pool_size = config_user_pool_size(w->cfg, cp, cu);
	p->min_pool_size = config_user_min_pool_size(w->cfg, cp, cu);
	params_init(&p->defaults);
	list_init(&p->login_waiters);
	list_init(&p->node);
	size_t n = 0;
	for (size_t i = 0; i < cp->n_shards; i++)
		n += cp->shards[i].n_servers;
	p->targets = calloc(n ? n : 1, sizeof *p->targets);
	if (!p->name || !p->user || !p->targets) {
		free(p->name);
		free(p->user);
		free(p->targets);
		free(p);
		return NULL;
	}
	size_t k = 0;
	for (size_t i = 0; i < cp->n_shards; i++) {
		const struct config_shard *sh = &cp->shards[i];
		for (size_t j = 0; j < sh->n_servers; j++) {
			struct srvpool *sp = &p->targets[k++];
			sp->pool = p;
			sp->shard = sh->index;
			sp->role = sh->servers[j].role;
			sp->host = sh->servers[j].host;
			sp->port = sh->servers[j].port;
			sp->database = sh->database;
			list_init(&sp->idle);
			list_init(&sp->active);
			list_init(&sp->opening);
			list_init(&sp->other);
			list_init(&sp->waiters);
			sp->resolved = resolve(sp);
		}
	}
	p->n_targets = n;

	/* Derive the SCRAM verifier once: PBKDF2 costs milliseconds, too much
	 * to pay per login. */
	const char *pw = cu->password;
	if (pw && pw[0] && !pg_md5_is_stored(pw)) {
		if (strncmp(pw, "SCRAM-SHA-256$", 14) == 0) {
			p->have_scram = scram_secret_parse(pw, &p->scram);
			if (!p->have_scram)
				log_warning("pool %s user %s: cannot parse SCRAM secret", cp->name, cu->name);
		} else {
			uint8_t salt[16];
			if (pg_random_bytes(salt, sizeof salt))
				p->have_scram = scram_secret_from_password(pw, salt, sizeof salt,
									  SCRAM_DEFAULT_ITERATIONS, &p->scram);
		}
	}
	return p;
}

bool pool_create_all(struct worker *w)
{
	const struct config *cfg = w->cfg;
	for (size_t i = 0; i < cfg->n_pools; i++) {
		const struct config_pool *cp = &cfg->pools[i];
		for (size_t j = 0; j < cp->n_users; j++) {
			struct pool *p = pool_new(w, cp, &cp->users[j]);
			if (!p)
				return false;
			list_add_tail(&w->pools, &p->node);
		}
	}
	return true;
}

static void srvpool_close_list(struct list_node *head)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, head)
		server_close(LIST_ENTRY(pos, struct server, node), NULL);
}

void pool_destroy_all(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_ENTRY(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = &p->targets[i];
			srvpool_close_list(&sp->idle);
			srvpool_close_list(&sp->active);
			srvpool_close_list(&sp->opening);
			srvpool_close_list(&sp->other);
		}
		list_del(&p->node);
		params_clear(&p->defaults);
		free(p->targets);
		free(p->name);
		free(p->user);
		free(p);
	}
}

struct pool *pool_find(struct worker *w, const char *db, const char *user)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_ENTRY(pos, struct pool, node);
		if (strcmp(p->name, db) == 0 && strcmp(p->user, user) == 0)
			return p;
	}
	return NULL;
}

bool pool_db_exists(struct worker *w, const char *db)
{
	return config_find_pool(w->cfg, db) != NULL;
}

int srvpool_total(const struct srvpool *sp)
{
	return sp->n_idle + sp->n_active + sp->n_opening + sp->n_other;
}

struct srvpool *pool_pick_target(struct pool *p)
{
	/* Until the router exists: the default shard's primary, else its first
	 * server. */
	int shard = p->cpool->default_shard >= 0 ? p->cpool->default_shard : 0;
	struct srvpool *first = NULL;
	for (size_t i = 0; i < p->n_targets; i++) {
		struct srvpool *sp = &p->targets[i];
		if (sp->shard != shard)
			continue;
		if (!first)
			first = sp;
		if (sp->role == SERVER_ROLE_PRIMARY)
			return sp;
	}
	return first ? first : &p->targets[0];
}

static void count_adjust(struct srvpool *sp, enum server_state st, int delta)
{
	switch (st) {
	case SERVER_CONNECTING:
	case SERVER_LOGIN: sp->n_opening += delta; break;
	case SERVER_IDLE: sp->n_idle += delta; break;
	case SERVER_SYNCING:
	case SERVER_ACTIVE: sp->n_active += delta; break;
	case SERVER_DRAINING:
	case SERVER_RESETTING: sp->n_other += delta; break;
	case SERVER_CLOSED: break;
	}
}

/* One list per state, and its count, kept in step with the server's state. */
void pool_server_state_changed(struct server *s, int old_state)
{
	struct srvpool *sp = s->sp;
	if (list_linked(&s->node))
		list_del(&s->node);
	count_adjust(sp, (enum server_state)old_state, -1);
	count_adjust(sp, s->state, +1);
	switch (s->state) {
	case SERVER_CONNECTING:
	case SERVER_LOGIN: list_add_tail(&sp->opening, &s->node); break;
	case SERVER_IDLE: list_add_head(&sp->idle, &s->node); break;
	case SERVER_SYNCING:
	case SERVER_ACTIVE: list_add_tail(&sp->active, &s->node); break;
	case SERVER_DRAINING:
	case SERVER_RESETTING: list_add_tail(&sp->other, &s->node); break;
	case SERVER_CLOSED: break;
	}
}

static void link_pair(struct server *s, struct client *c)
{
	s->client = c;
	c->server = s;
	c->wait_target = NULL;
	client_set_state(c, CLIENT_ACTIVE);
	server_link(s, c);
}

static bool recently_failed(const struct srvpool *sp, uint64_t now)
{
	return sp->last_failure_us && now - sp->last_failure_us < RECONNECT_BACKOFF_US &&
	       srvpool_total(sp) == 0;
}

static void maybe_launch(struct srvpool *sp)
{
	struct pool *p = sp->pool;
	if (!sp->resolved) {
		sp->resolved = resolve(sp);
		if (!sp->resolved)
			return;
	}
	while (sp->n_opening < sp->n_waiters && srvpool_total(sp) < p->pool_size) {
		struct server *s = server_connect(sp);
		if (!s)
			break;
	}
}

static void fail_waiters(struct srvpool *sp)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &sp->waiters) {
		struct client *c = LIST_ENTRY(pos, struct client, node);
		list_del(&c->node);
		sp->n_waiters--;
		c->wait_target = NULL;
		client_on_checkout_failed(c, sp->last_error_code[0] ? sp->last_error_code : "08006",
					  sp->last_error[0] ? sp->last_error : "server connection failed");
	}
}

bool pool_checkout(struct srvpool *sp, struct client *c)
{
	struct worker *w = sp->pool->w;
	if (!list_empty(&sp->idle)) {
		struct list_node *n = w->cfg->general.server_round_robin ? list_last(&sp->idle) : list_first(&sp->idle);
		link_pair(LIST_ENTRY(n, struct server, node), c);
		return true;
	}
	if (!sp->resolved && !(sp->resolved = resolve(sp))) {
		client_on_checkout_failed(c, "08006", "cannot resolve server host name");
		return false;
	}
	if (recently_failed(sp, w->now_us)) {
		client_on_checkout_failed(c, sp->last_error_code[0] ? sp->last_error_code : "08006",
					  sp->last_error[0] ? sp->last_error : "server connection failed");
		return false;
	}
	client_set_state(c, CLIENT_WAITING);
	list_add_tail(&sp->waiters, &c->node);
	sp->n_waiters++;
	c->wait_target = sp;
	maybe_launch(sp);
	return false;
}

void pool_cancel_wait(struct client *c)
{
	struct srvpool *sp = c->wait_target;
	if (!sp)
		return;
	list_del(&c->node);
	sp->n_waiters--;
	c->wait_target = NULL;
}

void pool_server_clean(struct server *s)
{
	struct srvpool *sp = s->sp;
	struct worker *w = sp->pool->w;
	const struct config_general *g = &w->cfg->general;
	s->client = NULL;
	if (s->close_when_idle || w->shutting_down ||
	    (g->server_lifetime > 0 && w->now_us - s->connect_us > (uint64_t)g->server_lifetime * 1000)) {
		if (list_empty(&sp->waiters) || s->close_when_idle) {
			server_close(s, s->close_when_idle ? "close requested" : "server_lifetime");
			return;
		}
	}
	if (!list_empty(&sp->waiters)) {
		struct client *c = LIST_ENTRY(list_first(&sp->waiters), struct client, node);
		list_del(&c->node);
		sp->n_waiters--;
		link_pair(s, c);
		return;
	}
	server_set_state(s, SERVER_IDLE);
}

void pool_release(struct server *s)
{
	struct client *c = s->client;
	s->client = NULL;
	if (c)
		c->server = NULL;
	s->last_used_us = s->w->now_us;
	pool_server_clean(s);
	if (c)
		client_on_released(c);
}

void pool_client_gone(struct server *s)
{
	struct client *c = s->client;
	s->client = NULL;
	if (c)
		c->server = NULL;
	server_drain(s);
}

void pool_server_ready(struct server *s)
{
	struct pool *p = s->sp->pool;
	s->last_used_us = s->w->now_us;
	s->sp->last_failure_us = 0;
	if (!p->have_defaults) {
		if (params_copy(&p->defaults, &s->params))
			p->have_defaults = true;
		struct list_node *pos, *tmp;
		LIST_FOREACH_SAFE(pos, tmp, &p->login_waiters) {
			struct client *c = LIST_ENTRY(pos, struct client, node);
			client_on_defaults_known(c);
		}
	}
	pool_server_clean(s);
}

void pool_server_closed(struct server *s, bool login_failed)
{
	struct srvpool *sp = s->sp;
	struct pool *p = sp->pool;
	if (list_linked(&s->node))
		list_del(&s->node);
	count_adjust(sp, s->state, -1);
	if (!login_failed)
		return;
	sp->last_failure_us = s->w->now_us ? s->w->now_us : 1;
	if (s->have_error) {
		snprintf(sp->last_error_code, sizeof sp->last_error_code, "%s", s->error_sqlstate);
		snprintf(sp->last_error, sizeof sp->last_error, "%s", s->error_message);
	} else {
		snprintf(sp->last_error_code, sizeof sp->last_error_code, "08006");
		snprintf(sp->last_error, sizeof sp->last_error, "server connection failed");
	}
	/* Nobody left who could serve the waiters: tell them now rather than
	 * at query_wait_timeout. */
	if (srvpool_total(sp) == 0) {
		fail_waiters(sp);
		if (!p->have_defaults) {
			struct list_node *pos, *tmp;
			LIST_FOREACH_SAFE(pos, tmp, &p->login_waiters) {
				struct client *c = LIST_ENTRY(pos, struct client, node);
				client_on_defaults_failed(c, sp->last_error_code, sp->last_error);
			}
		}
	}
}

void pool_request_defaults(struct pool *p, struct client *c)
{
	client_set_state(c, CLIENT_LOGIN_WAIT);
	list_add_tail(&p->login_waiters, &c->node);
	struct srvpool *sp = pool_pick_target(p);
	if (sp->n_opening > 0 || sp->n_idle > 0 || sp->n_active > 0)
		return;
	if (recently_failed(sp, p->w->now_us) || (!sp->resolved && !(sp->resolved = resolve(sp))) ||
	    !server_connect(sp)) {
		if (c->state == CLIENT_LOGIN_WAIT)
			client_on_defaults_failed(c, sp->last_error_code[0] ? sp->last_error_code : "08006",
						  sp->last_error[0] ? sp->last_error : "server connection failed");
	}
}

void pool_fill_min(struct pool *p)
{
	for (size_t i = 0; i < p->n_targets; i++) {
		struct srvpool *sp = &p->targets[i];
		if (recently_failed(sp, p->w->now_us) || !sp->resolved)
			continue;
		while (srvpool_total(sp) < p->min_pool_size && srvpool_total(sp) < p->pool_size) {
			if (!server_connect(sp))
				break;
		}
	}
}

static void srvpool_janitor(struct srvpool *sp)
{
	struct worker *w = sp->pool->w;
	const struct config_general *g = &w->cfg->general;
	uint64_t now = w->now_us;
	struct list_node *pos, *tmp;

	if (g->query_wait_timeout > 0) {
		uint64_t limit = (uint64_t)g->query_wait_timeout * 1000;
		while (!list_empty(&sp->waiters)) {
			struct client *c = LIST_ENTRY(list_first(&sp->waiters), struct client, node);
			if (now - c->state_since_us < limit)
				break;
			list_del(&c->node);
			sp->n_waiters--;
			c->wait_target = NULL;
			log_info("C-%llu %s@%s: query_wait_timeout", (unsigned long long)c->id, c->user, c->database);
			client_on_checkout_failed(c, "08P01", "query_wait_timeout");
		}
	}
	if (g->connect_timeout > 0) {
		uint64_t limit = (uint64_t)g->connect_timeout * 1000;
		LIST_FOREACH_SAFE(pos, tmp, &sp->opening) {
			struct server *s = LIST_ENTRY(pos, struct server, node);
			if (now - s->connect_us >= limit) {
				s->have_error = true;
				snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "08006");
				snprintf(s->error_message, sizeof s->error_message, "server connect timeout");
				server_close(s, "connect_timeout");
			}
		}
	}
	/* Draining or resetting for too long: the server does not come back. */
	LIST_FOREACH_SAFE(pos, tmp, &sp->other) {
		struct server *s = LIST_ENTRY(pos, struct server, node);
		if (now - s->state_since_us > 30ULL * 1000000)
			server_close(s, "could not be brought back to idle");
	}
	int total = srvpool_total(sp);
	LIST_FOREACH_SAFE(pos, tmp, &sp->idle) {
		struct server *s = LIST_ENTRY(pos, struct server, node);
		bool too_old = g->server_lifetime > 0 && now - s->connect_us > (uint64_t)g->server_lifetime * 1000;
		bool too_idle = g->idle_timeout > 0 && now - s->last_used_us > (uint64_t)g->idle_timeout * 1000 &&
				total > sp->pool->min_pool_size;
		if (too_old || too_idle || w->shutting_down) {
			server_close(s, too_old ? "server_lifetime" : too_idle ? "idle_timeout" : "shutdown");
			total--;
		}
	}
	if (!list_empty(&sp->waiters) && !recently_failed(sp, now))
		maybe_launch(sp);
}

void pool_janitor(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_ENTRY(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++)
			srvpool_janitor(&p->targets[i]);
		if (!w->shutting_down)
			pool_fill_min(p);
	}
}
