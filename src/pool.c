/* SPDX-License-Identifier: MIT */
/*
 * pool: checkout, checkin and the FIFO of waiting clients per (pool, user,
 * server); the link between a client and a server; the write pause of a
 * reshard's cutover; the slots counted beside pooled connections (a
 * replication relay's, the connections a takeover promises). The admin
 * console's operations (PAUSE, RESUME, KILL...) are in pool_admin.c, the janitor's
 * pool duties in pool_janitor.c, reload and the databases made from
 * `*` in pool_reload.c (both above it: they call pool.c, never the other
 * way). Knows no protocol: it moves connections between lists and tells
 * the client and server machines what happened.
 */
#include "pool.h"
#include "pool_internal.h"

#include "dns.h"
#include "router.h"

#include <openssl/crypto.h>
#include "rotation.h"

#include <assert.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth_md5.h"
#include "cancel.h"
#include "client_end.h"
#include "link.h"
#include "shm.h"
#include "slowlog.h"
#include "log.h"
#include "server.h"
#include "context.h"
#include "tls.h"

/* server_login_retry: after a failed connect, the same server is not
 * tried again sooner; while no connection to it is alive, clients asking
 * meanwhile get the failure at once instead of a storm of doomed connects. */
static uint64_t login_retry_us(const struct srvpool *sp)
{
	return (uint64_t)sp->pool->w->cfg->general.server_login_retry * 1000;
}

/* The entry's first address, with the server's port. */
static bool take_dns_entry(struct srvpool *sp, const struct dns_entry *e)
{
	if (!e || e->state != DNS_OK || e->n_addrs == 0)
		return false;
	memcpy(&sp->addr, &e->addrs[0], sizeof sp->addr);
	sp->addrlen = e->addrlens[0];
	if (sp->addr.ss_family == AF_INET)
		((struct sockaddr_in *)&sp->addr)->sin_port = htons((uint16_t)sp->port);
	else if (sp->addr.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&sp->addr)->sin6_port = htons((uint16_t)sp->port);
	return true;
}

/* An address for the server: an IP literal at once; a host name from the
 * worker's c-ares cache (dns.c), which starts a lookup when it has none or
 * a stale one. False while the first answer is not in (pool_dns_done
 * follows) or when the name does not resolve. */
static bool resolve(struct srvpool *sp)
{
	if (sp->host_is_literal)
		return true;
	if (dns_literal(sp->host, sp->port, &sp->addr, &sp->addrlen)) {
		sp->host_is_literal = true;
		return true;
	}
	struct worker *w = sp->pool->w;
	if (!w->dns)
		return false;
	return take_dns_entry(sp, dns_lookup(w->dns, sp->host, w->cfg->general.dns_max_ttl));
}

/* Is a first lookup of sp's host in flight (so a client may wait for it)? */
static bool resolving(struct srvpool *sp)
{
	struct worker *w = sp->pool->w;
	if (!w->dns || sp->host_is_literal)
		return false;
	const struct dns_entry *e = dns_lookup(w->dns, sp->host, w->cfg->general.dns_max_ttl);
	return e && e->state == DNS_RESOLVING;
}

static void pool_server_state_changed(struct server *s, int old_state);
static void pool_server_ready(struct server *s);
static void pool_server_clean(struct server *s);
static void pool_release(struct server *s);
static void pool_server_closed(struct server *s, bool login_failed);

/* What a server of this pool reports (pool_types.h). */
static const struct srvpool_events srvpool_events = {
	.state_changed = pool_server_state_changed,
	.ready = pool_server_ready,
	.clean = pool_server_clean,
	.release = pool_release,
	.closed = pool_server_closed,
};

/* The query parser's verdicts for this pool (query_cache_size entries,
 * SPEC §4; route.c reads and fills it). */
static bool router_cache_init(struct pool *p)
{
	size_t cap = p->w->cfg->general.query_cache_size > 0 ? (size_t)p->w->cfg->general.query_cache_size : 0;
	p->router_cache = cap ? router_cache_new(cap) : NULL;
	return cap == 0 || p->router_cache != NULL;
}

static struct srvpool *srvpool_new(struct pool *p, const struct config_shard *sh, const struct config_server *cs)
{
	struct srvpool *sp = calloc(1, sizeof *sp);
	if (!sp)
		return NULL;
	sp->pool = p;
	sp->ev = &srvpool_events;
	sp->shard = sh->index;
	sp->role = cs->role;
	sp->host = strdup(cs->host);
	sp->port = cs->port;
	sp->database = strdup(sh->database);
	if (!sp->host || !sp->database) {
		free(sp->host);
		free(sp->database);
		free(sp);
		return NULL;
	}
	sp->ban_gen = UINT64_MAX;   /* never a generation: the first check reads the table */
	sp->shm_target = p->w->shm && p->shm_slot >= 0
				 ? shm_target_slot(p->w->shm, p->shm_slot, sh->index, cs->host, cs->port, sh->database)
				 : -1;
	list_init(&sp->retired_node);
	list_init(&sp->idle);
	list_init(&sp->active);
	list_init(&sp->opening);
	list_init(&sp->other);
	list_init(&sp->waiters);
	sp->resolved = resolve(sp);
	return sp;
}

void srvpool_free(struct srvpool *sp)
{
	struct worker *w = sp->pool->w;
	if (w->shm) {
		shm_conns_set(w->shm, w->id, sp->shm_target, 0);
		shm_waiters_set(w->shm, w->id, sp->shm_target, 0);
	}
	free(sp->host);
	free(sp->database);
	free(sp);
}

static bool srvpool_matches(const struct srvpool *sp, const struct config_shard *sh, const struct config_server *cs)
{
	return sp->shard == sh->index && sp->port == cs->port && strcmp(sp->host, cs->host) == 0 &&
	       strcmp(sp->database, sh->database) == 0;
}

/* Build the target array for cp, reusing srvpools of old[] that still
 * match (their connections live on); consumed entries of old are NULLed. */
bool build_targets(struct pool *p, const struct config_pool *cp, struct srvpool **old, size_t n_old,
			  struct srvpool ***out, size_t *n_out)
{
	size_t n = 0;
	for (size_t i = 0; i < cp->n_shards; i++)
		n += cp->shards[i].n_servers;
	struct srvpool **t = calloc(n ? n : 1, sizeof *t);
	if (!t)
		return false;
	size_t k = 0;
	for (size_t i = 0; i < cp->n_shards; i++) {
		const struct config_shard *sh = &cp->shards[i];
		for (size_t j = 0; j < sh->n_servers; j++) {
			const struct config_server *cs = &sh->servers[j];
			struct srvpool *sp = NULL;
			for (size_t o = 0; o < n_old && !sp; o++) {
				if (old[o] && srvpool_matches(old[o], sh, cs)) {
					sp = old[o];
					old[o] = NULL;
					sp->role = cs->role;
				}
			}
			if (!sp)
				sp = srvpool_new(p, sh, cs);
			if (!sp) {
				for (size_t x = 0; x < k; x++)
					if (t[x])
						srvpool_free(t[x]);
				free(t);
				return false;
			}
			t[k++] = sp;
		}
	}
	*out = t;
	*n_out = n;
	return true;
}

void pool_derive_scram(struct pool *p)
{
	p->have_scram = false;
	p->scram_pending = false;
	p->have_passthrough_key = false;
	OPENSSL_cleanse(p->passthrough_client_key, sizeof p->passthrough_client_key);
	const struct config_user *cu = p->cuser;
	const char *pw = cu ? cu->password : NULL;
	if (!pw || !pw[0] || pg_md5_is_stored(pw))
		return;
	if (strncmp(pw, "SCRAM-SHA-256$", 14) == 0) {
		p->have_scram = scram_secret_parse(pw, &p->scram);
		if (!p->have_scram)
			log_warning("pool %s user %s: cannot parse SCRAM secret", p->name, p->user);
		return;
	}
	/* Derived once, at the first login that needs it: PBKDF2 costs
	 * milliseconds, too much to pay per login or per pool at start. */
	p->scram_pending = true;
}

const struct scram_secret *pool_client_scram(struct pool *p)
{
	if (p->scram_pending) {
		p->scram_pending = false;
		const char *pw = p->cuser ? p->cuser->password : NULL;
		uint8_t salt[16];
		if (pw && pg_random_bytes(salt, sizeof salt))
			p->have_scram =
				scram_secret_from_password(pw, salt, sizeof salt, SCRAM_DEFAULT_ITERATIONS, &p->scram);
	}
	return p->have_scram ? &p->scram : NULL;
}

void pool_apply_config(struct pool *p, const struct config *cfg, const struct config_pool *cp,
			      const struct config_user *cu)
{
	p->cpool = cp;
	p->cuser = cu;
	p->mode = config_user_pool_mode(cfg, cp, cu);
	p->pool_size = config_user_pool_size(cfg, cp, cu);
	p->min_pool_size = config_user_min_pool_size(cfg, cp, cu);
	p->reserve_pool_size = config_user_reserve_pool_size(cfg, cp, cu);
	p->server_lifetime = config_pool_server_lifetime(cfg, cp);
	p->log_min_duration_us = (uint64_t)config_pool_log_min_duration(cfg, cp) * 1000;
	p->query_stats = config_pool_query_stats(cfg, cp);
	p->query_stats_max = (uint32_t)config_pool_query_stats_max(cfg, cp);
	p->query_timeout = config_user_query_timeout(cfg, cu);
	p->idle_transaction_timeout = config_user_idle_transaction_timeout(cfg, cu);
	p->client_idle_timeout = config_user_client_idle_timeout(cfg, cu);
	p->transaction_timeout = config_user_transaction_timeout(cfg, cu);
}

struct pool *pool_new(struct worker *w, const struct config_pool *cp, const struct config_user *cu)
{
	struct pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->w = w;
	p->name = strdup(cp->name);
	p->user = strdup(cu->name);
	params_init(&p->defaults);
	prep_registry_init(&p->prep);
	if (!router_cache_init(p))
		log_warning("pool %s: no memory for the query cache; statements are parsed every time", cp->name);
	list_init(&p->login_waiters);
	list_init(&p->retired);
	list_init(&p->node);
	p->shm_slot = w->shm && p->name && p->user ? shm_pool_slot(w->shm, p->name, p->user) : -1;
	if (p->shm_slot >= 0) {
		p->stats = shm_stats(w->shm, w->id, p->shm_slot);
		p->stats_avg = shm_stats_avg(w->shm, w->id, p->shm_slot);
		/* A restarted worker continues its predecessor's counters. */
		p->stats_prev = *p->stats;
	} else {
		if (w->shm)
			log_warning("pool %s user %s: shared pool directory full; its figures stay in one worker",
				    cp->name, cu->name);
		p->stats = &p->stats_local;
		p->stats_avg = &p->stats_avg_local;
	}
	if (!p->name || !p->user || !build_targets(p, cp, NULL, 0, &p->targets, &p->n_targets)) {
		free(p->name);
		free(p->user);
		free(p);
		return NULL;
	}
	pool_apply_config(p, w->cfg, cp, cu);
	pool_derive_scram(p);
	return p;
}

/* ---- auth_query's users (auth_query.c): pools of users in no config ---- */

void own_user_free(struct config_user *u)
{
	if (!u)
		return;
	if (u->password) {
		OPENSSL_cleanse(u->password, strlen(u->password));
		free(u->password);
	}
	free(u->name);
	free(u);
}

struct pool *pool_add_looked_up(struct worker *w, const struct config_pool *cp, const char *user,
				const char *secret)
{
	struct config_user *u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	/* As a users section with only a password: the rest inherited. */
	u->pool_size = CONFIG_INHERIT;
	u->min_pool_size = CONFIG_INHERIT;
	u->pool_mode = CONFIG_INHERIT;
	u->transaction_timeout = CONFIG_INHERIT;
	u->reserve_pool_size = CONFIG_INHERIT;
	u->max_user_connections = CONFIG_INHERIT;
	u->name = strdup(user);
	u->password = strdup(secret);
	struct pool *p = u->name && u->password ? pool_new(w, cp, u) : NULL;
	if (!p) {
		own_user_free(u);
		return NULL;
	}
	p->own_user = u;
	/* PAUSE and DISABLE hold for the database, whichever user comes. */
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		const struct pool *q = LIST_OWNER(pos, struct pool, node);
		if (!q->removed && strcmp(q->name, p->name) == 0) {
			p->paused = q->paused;
			p->disabled = q->disabled;
			break;
		}
	}
	list_add_tail(&w->pools, &p->node);
	return p;
}

bool pool_set_looked_up_secret(struct pool *p, const char *secret)
{
	if (!p->own_user || strcmp(p->own_user->password, secret) == 0)
		return true;
	char *copy = strdup(secret);
	if (!copy)
		return false;
	OPENSSL_cleanse(p->own_user->password, strlen(p->own_user->password));
	free(p->own_user->password);
	p->own_user->password = copy;
	pool_derive_scram(p);   /* and forget the pass-through key of the old secret */
	return true;
}

void pool_retire_looked_up(struct pool *p)
{
	if (p->removed)
		return;
	log_info("pool %s user %s: auth_query no longer finds the user; draining", p->name, p->user);
	p->removed = true;
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

void srvpool_close_list(struct list_node *head)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, head)
		server_close(LIST_OWNER(pos, struct server, node), NULL);
}

void srvpool_close_all(struct srvpool *sp)
{
	srvpool_close_list(&sp->idle);
	srvpool_close_list(&sp->active);
	srvpool_close_list(&sp->opening);
	srvpool_close_list(&sp->other);
}

static void config_ref_put(struct config_ref *ref)
{
	if (ref && --ref->refs == 0) {
		config_free(ref->cfg);
		free(ref);
	}
}

/* Forget the made database cp of the current snapshot once no pool points
 * at it (pool_free calls this for a pool it frees). */
void pool_autodb_release(struct worker *w, const struct config_pool *cp, const struct pool *freed)
{
	if (!cp->autodb_instance)
		return;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		const struct pool *q = LIST_OWNER(pos, struct pool, node);
		if (q != freed && q->cpool == cp)
			return;
	}
	config_autodb_forget(w->cfg, cp);   /* (no-op for another snapshot's) */
}

void pool_free(struct pool *p)
{
	struct list_node *pos, *tmp;
	/* Every server first, then the srvpools: closing a server that was
	 * logging in looks at its shard's other srvpools (rotation_server_failed). */
	p->freeing = true;
	for (size_t i = 0; i < p->n_targets; i++)
		srvpool_close_all(p->targets[i]);
	LIST_FOREACH_SAFE(pos, tmp, &p->retired)
		srvpool_close_all(LIST_OWNER(pos, struct srvpool, retired_node));
	for (size_t i = 0; i < p->n_targets; i++)
		srvpool_free(p->targets[i]);
	LIST_FOREACH_SAFE(pos, tmp, &p->retired) {
		struct srvpool *sp = LIST_OWNER(pos, struct srvpool, retired_node);
		list_del(&sp->retired_node);
		srvpool_free(sp);
	}
	list_del(&p->node);
	if (p->w->shm && p->shm_slot >= 0)
		shm_gauges_clear(p->w->shm, p->w->id, p->shm_slot);
	params_clear(&p->defaults);
	prep_registry_free(&p->prep);
	if (p->router_cache)
		router_cache_free(p->router_cache);
	p->router_cache = NULL;
	/* the database's collation, learnt by the first merge that compared strings */
	if (p->collation)
		freelocale(p->collation);
	p->collation = (locale_t)0;
	p->collation_known = false;
	pool_autodb_release(p->w, p->cpool, p);
	config_ref_put(p->cfg_ref);
	own_user_free(p->own_user);
	free(p->targets);
	free(p->name);
	free(p->user);
	free(p);
}

void pool_destroy_all(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools)
		pool_free(LIST_OWNER(pos, struct pool, node));
}

struct pool *pool_find(struct worker *w, const char *db, const char *user)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!p->removed && strcmp(p->name, db) == 0 && strcmp(p->user, user) == 0)
			return p;
	}
	return NULL;
}

struct pool *pool_serving(struct worker *w, struct pool *p)
{
	/* Only users without a section of their own (auth_file's, auth_query's)
	 * share: a users section's settings (its own server_username, its
	 * statement_timeout, ...) hold for its own pool. */
	const char *forced = p->cpool->server_username;
	bool sectionless = p->own_user || (p->cuser && p->cuser->from_auth_file);
	if (!forced || !forced[0] || strcmp(p->user, forced) == 0 || !sectionless)
		return p;
	struct pool *q = pool_find(w, p->name, forced);
	return q ? q : p;
}

bool pool_serves_itself(struct worker *w, struct pool *p)
{
	return pool_serving(w, p) == p;
}

bool pool_first_of_name(struct worker *w, bool skip_removed, const struct pool *p)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		const struct pool *q = LIST_OWNER(pos, struct pool, node);
		if (q == p)
			return true;
		if (!(skip_removed && q->removed) && strcmp(q->name, p->name) == 0)
			return false;
	}
	return true;
}

bool pool_target_address(struct srvpool *sp)
{
	if (!sp->resolved)
		sp->resolved = resolve(sp);
	return sp->resolved;
}

bool pool_target_resolving(struct srvpool *sp)
{
	return resolving(sp);
}

bool pool_db_exists(struct worker *w, const char *db)
{
	return config_find_pool(w->cfg, db) != NULL;
}

struct srvpool *pool_pick_target(struct pool *p)
{
	/* For learning the server parameters of a login: the default shard's
	 * primary, else another of its servers; one that failed moments ago
	 * or is banned only when nothing else is left. */
	int shard = p->cpool->default_shard >= 0 ? p->cpool->default_shard : 0;
	struct srvpool *first = NULL, *healthy = NULL;
	for (size_t i = 0; i < p->n_targets; i++) {
		struct srvpool *sp = p->targets[i];
		if (sp->shard != shard)
			continue;
		if (!first)
			first = sp;
		if (srvpool_recently_failed(sp, p->w->now_us) || rotation_is_banned(sp))
			continue;
		if (pool_srvpool_unresolvable(sp)) {   /* (as the router does) */
			rotation_server_failed(sp, "server DNS lookup failed");
			continue;
		}
		if (!healthy || sp->role == SERVER_ROLE_PRIMARY)
			healthy = sp;
	}
	return healthy ? healthy : first ? first : p->targets[0];
}

static inline __attribute__((always_inline)) void count_adjust(struct srvpool *sp, enum server_state st, int delta)
{
	switch (st) {
	case SERVER_CONNECTING:
	case SERVER_LOGIN: sp->n_opening += delta; break;
	case SERVER_IDLE: sp->n_idle += delta; break;
	case SERVER_SYNCING:
	case SERVER_ACTIVE:
	case SERVER_WAL_POSITION: sp->n_active += delta; break;
	case SERVER_ASKING: sp->n_active += delta; break;
	case SERVER_DRAINING:
	case SERVER_RESETTING:
	case SERVER_CANCEL_WAIT: sp->n_other += delta; break;
	case SERVER_CLOSED: break;
	}
}

/* One list per state, and its count, kept in step with the server's state. */
static void pool_server_state_changed(struct server *s, int old_state)
{
	struct srvpool *sp = s->sp;
	if (list_linked(&s->node))
		list_del(&s->node);
	/* A new connection (server_connect) takes the place of its
	 * reservation: what this worker publishes stays the same, so it never
	 * dips below what the open lock's holder decided on. */
	if (old_state == SERVER_CLOSED && s->state != SERVER_CLOSED && sp->n_reserved > 0)
		sp->n_reserved--;
	count_adjust(sp, (enum server_state)old_state, -1);
	count_adjust(sp, s->state, +1);
	/* What the shared segment holds (srvpool_publish) is the total, which
	 * only a connection made or closed changes: not the moves between
	 * idle and active at every transaction. */
	if ((old_state == SERVER_CLOSED) != (s->state == SERVER_CLOSED))
		srvpool_publish(sp);
	switch (s->state) {
	case SERVER_CONNECTING:
	case SERVER_LOGIN: list_add_tail(&sp->opening, &s->node); break;
	case SERVER_IDLE: list_add_head(&sp->idle, &s->node); break;
	case SERVER_SYNCING:
	case SERVER_ACTIVE:
	case SERVER_WAL_POSITION: list_add_tail(&sp->active, &s->node); break;
	case SERVER_ASKING: list_add_tail(&sp->active, &s->node); break;
	case SERVER_DRAINING:
	case SERVER_RESETTING:
	case SERVER_CANCEL_WAIT: list_add_tail(&sp->other, &s->node); break;
	case SERVER_CLOSED: break;
	}
	/* A reshard's write pause: a server in use or back may be what the
	 * drain waits for, in this worker or another (its word, at once). */
	if (sp->pool->writes_paused)
		pool_write_gate_publish(sp->pool);
}

/* Server s to a client no longer on any waiters list. */
void srvpool_grant(struct server *s, struct pool_waiter *pw)
{
	struct stats *st = s->sp->pool->stats;
	st->v[STAT_SERVER_ASSIGNMENT]++;
	uint64_t waited = pw->since_us ? s->w->now_us - pw->since_us : 0;
	st->v[STAT_WAIT_TIME] += waited;
	stats_observe(st, HIST_WAIT, waited);
	/* A new link: the slow-query log's notes start afresh (noted: a
	 * RELOAD turned it off while a request was noted). */
	if (s->sp->pool->log_min_duration_us || s->sp->pool->query_stats || s->slow.noted)
		slowlog_begin(&s->slow, waited);
	pw->target = NULL;
	pw->since_us = 0;
	s->txn.write_gated = s->sp->pool->writes_paused && pw->reads_only;
	s->txn.gate_unnamed_reads = false;
	pw->reads_only = false;   /* (said again at each checkout) */
	pw->ev->granted(pw, s);
}

/* The first waiter of sp a server may go to now: none while paused; while
 * the writes are, the first that only reads (the others keep their place). */
static struct pool_waiter *admitted_waiter(const struct srvpool *sp)
{
	if (sp->pool->paused || list_empty(&sp->waiters))
		return NULL;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &sp->waiters) {
		struct pool_waiter *pw = LIST_OWNER(pos, struct pool_waiter, node);
		if (!sp->pool->writes_paused || pw->reads_only)
			return pw;
	}
	return NULL;
}

void srvpool_wake_waiters(struct srvpool *sp)
{
	struct pool_waiter *pw;
	while (!list_empty(&sp->idle) && (pw = admitted_waiter(sp))) {
		pool_cancel_wait(pw);
		srvpool_grant(LIST_OWNER(list_first(&sp->idle), struct server, node), pw);
	}
	if (admitted_waiter(sp))
		srvpool_maybe_launch(sp);
}

/* The first waiter of sp, taken off the list. */
struct pool_waiter *srvpool_take_waiter(struct srvpool *sp)
{
	struct pool_waiter *pw = LIST_OWNER(list_first(&sp->waiters), struct pool_waiter, node);
	pool_cancel_wait(pw);
	return pw;
}

void pool_fail_waiter(struct pool_waiter *pw, const char *sqlstate, const char *message)
{
	pw->target = NULL;
	pw->since_us = 0;
	pw->ev->failed(pw, sqlstate, message);
}

bool srvpool_login_backoff(const struct srvpool *sp, uint64_t now)
{
	return sp->last_failure_us && now - sp->last_failure_us < login_retry_us(sp);
}

bool srvpool_recently_failed(const struct srvpool *sp, uint64_t now)
{
	return sp->last_failure_us && now - sp->last_failure_us < login_retry_us(sp) &&
	       srvpool_total(sp) == 0;
}

bool pool_checkout_would_wait(const struct srvpool *sp)
{
	if (sp->pool->paused || sp->pool->writes_paused)
		return true;
	if (!list_empty(&sp->idle))
		return false;
	/* A connection may still be opened, or one being opened is not yet
	 * promised to a client queued before. */
	return srvpool_instance_total(sp) >= sp->pool->pool_size && sp->n_opening <= sp->n_waiters;
}

bool pool_srvpool_failing(const struct srvpool *sp)
{
	return srvpool_recently_failed(sp, sp->pool->w->now_us);
}

bool pool_srvpool_unresolvable(struct srvpool *sp)
{
	if (sp->resolved || sp->host_is_literal)
		return false;
	if ((sp->resolved = resolve(sp)) || resolving(sp))
		return false;
	/* (PgBouncer's words for a connection its DNS lookup failed) */
	if (sp->pool->w->cfg->pgbouncer)
		log_info("%s@%s %s:%d: closing because: server DNS lookup failed (%s)",
			 sp->pool->cuser ? config_user_server_name(sp->pool->cpool, sp->pool->cuser) : sp->pool->user,
			 sp->database, sp->host, sp->port, sp->last_error[0] ? sp->last_error : "no address");
	return true;
}

struct server *srvpool_connect(struct srvpool *sp)
{
	int reserved = sp->n_reserved;
	struct server *s = server_connect(sp);
	/* Failed before it entered CONNECTING (out of memory): the
	 * reservation is not used, and no longer counted. */
	if (reserved > 0 && sp->n_reserved == reserved) {
		sp->n_reserved--;
		srvpool_publish(sp);
	}
	return s;
}

void pool_defaults_retry(struct pool *p)
{
	if (p->have_defaults || list_empty(&p->login_waiters))
		return;
	struct srvpool *sp = pool_pick_target(p);
	/* The server's parameters are learned over pool_size if need be (the
	 * connection closes once idle, pool_server_clean); the caps hold. */
	if (sp->n_opening > 0 || sp->n_idle > 0 || sp->n_active > 0 || !sp->resolved ||
	    srvpool_recently_failed(sp, p->w->now_us) || !srvpool_reserve(sp, INT_MAX, true))
		return;
	if (!srvpool_connect(sp))
		log_debug("%s@%s: no connection for the server's parameters yet", p->user, p->name);
	/* (a connection that fails tells the login waiters: pool_server_closed) */
}

void srvpool_maybe_launch(struct srvpool *sp)
{
	struct pool *p = sp->pool;
	if (srvpool_login_backoff(sp, p->w->now_us))
		return;   /* (the janitor asks again) */
	/* -R: this worker hands its connections over (handover.c), so its
	 * count drops as they go; a client still waiting here gets one in use
	 * as it comes back, not a new login, while there is one. */
	if (p->w->handing_over && sp->n_active + sp->n_other > 0)
		return;
	/* A new connection: the freshest address (a stale one is used while
	 * its refresh is in flight). */
	sp->resolved = resolve(sp);
	if (!sp->resolved)
		return;
	int limit = srvpool_limit(sp);
	while (sp->n_opening + sp->n_promised < sp->n_waiters && srvpool_reserve(sp, limit, true)) {
		/* (the instance's count includes this reservation now) */
		/* (the words PgBouncer's operators alert on, in both formats) */
		if (srvpool_instance_total(sp) > p->pool_size)
			log_warning("%s@%s %s:%d: taking connection from reserve_pool (reserve_pool_size %d, clients "
				    "waiting over %d ms)", p->user, p->name, sp->host, sp->port, p->reserve_pool_size,
				    p->w->cfg->general.reserve_pool_timeout);
		if (!srvpool_connect(sp))
			break;
	}
}

/* Its clients wait for it (unreachable_server = wait, PgBouncer's): the
 * last failure was no refusal of the login itself (28xxx, 3D000), which
 * would come again whatever the wait. */
static bool clients_wait(const struct srvpool *sp)
{
	return sp->pool->w->cfg->general.unreachable_server == UNREACHABLE_SERVER_WAIT &&
	       strncmp(sp->last_error_code, "28", 2) != 0 && strcmp(sp->last_error_code, "3D000") != 0;
}

static void fail_waiters(struct srvpool *sp)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &sp->waiters) {
		struct pool_waiter *pw = LIST_OWNER(pos, struct pool_waiter, node);
		pool_cancel_wait(pw);
		pool_fail_waiter(pw, sp->last_error_code[0] ? sp->last_error_code : "08006",
			    sp->last_error[0] ? sp->last_error : "server connection failed");
	}
}

static void queue(struct srvpool *sp, struct pool_waiter *pw)
{
	pw->ev->queued(pw, false);
	list_add_tail(&sp->waiters, &pw->node);
	sp->n_waiters++;
	pw->target = sp;
	pw->since_us = sp->pool->w->now_us;
	pw->told_waiting = false;
}

bool pool_checkout(struct srvpool *sp, struct pool_waiter *pw)
{
	struct worker *w = sp->pool->w;
	assert(!list_linked(&pw->node));
	if (w->waiting_for_servers) {
		/* SHUTDOWN WAIT_FOR_SERVERS: no server for a new transaction
		 * (PgBouncer's words). */
		pw->ev->closed(pw, SQLSTATE_ADMIN_SHUTDOWN, "server shutting down");
		return false;
	}
	if (sp->pool->paused || (sp->pool->writes_paused && !pw->reads_only)) {
		/* PAUSE: the client waits, in order, until RESUME; with the
		 * writes paused, unless it only reads. */
		queue(sp, pw);
		return false;
	}
	if (!list_empty(&sp->idle)) {
		struct list_node *n = w->cfg->general.server_round_robin ? list_last(&sp->idle) : list_first(&sp->idle);
		srvpool_grant(LIST_OWNER(n, struct server, node), pw);
		return true;
	}
	if (!sp->resolved && !(sp->resolved = resolve(sp)) && !resolving(sp)) {
		pool_fail_waiter(pw, "08006", sp->last_error[0] ? sp->last_error : "cannot resolve server host name");
		return false;
	}
	if (srvpool_recently_failed(sp, w->now_us)) {
		if (clients_wait(sp)) {
			queue(sp, pw);   /* the janitor tries again after server_login_retry */
			return false;
		}
		pool_fail_waiter(pw, sp->last_error_code[0] ? sp->last_error_code : "08006",
			    sp->last_error[0] ? sp->last_error : "server connection failed");
		return false;
	}
	queue(sp, pw);
	srvpool_maybe_launch(sp);
	return false;
}

void pool_cancel_wait(struct pool_waiter *pw)
{
	if (!list_linked(&pw->node))
		return;
	list_del(&pw->node);
	if (pw->target)
		pw->target->n_waiters--;
	pw->target = NULL;
}

/* A server back at 'I' with no client: idled, handed to a waiter or
 * closed. server_lifetime is enforced when it comes back from a client,
 * not from its own login (as PgBouncer: with server_lifetime = 0, "used
 * once", the connection that told a first login the server's parameters
 * still serves that client's first transaction). */
static void server_back(struct server *s, bool from_login);

static void pool_server_clean(struct server *s)
{
	server_back(s, false);
}

static void server_back(struct server *s, bool from_login)
{
	struct srvpool *sp = s->sp;
	struct worker *w = sp->pool->w;
	assert(s->client == NULL);
	s->txn.write_gated = false;   /* (its link is over) */
	server_settings_discard(s);   /* a client gone mid-transaction: rolled back */
	if (s->cancels_in_flight > 0) {
		/* server_cancel_done brings it back */
		server_set_state(s, SERVER_CANCEL_WAIT);
		return;
	}
	if (sp->pool->removed && list_empty(&sp->waiters))
		s->close_when_idle = true;
	if (s->close_when_idle || w->shutting_down ||
	    (!from_login && sp->pool->server_lifetime > 0 &&
	     w->now_us - s->connect_us > (uint64_t)sp->pool->server_lifetime * 1000)) {
		if (list_empty(&sp->waiters) || s->close_when_idle) {
			server_close(s, s->close_when_idle ? "close requested" : "server_lifetime");
			return;
		}
	}
	/* Session state pgcat did not follow (SPEC §10): reset before anyone
	 * gets it; back here once done. */
	if (s->txn.untracked) {
		server_reset_untracked(s);
		return;
	}
	/* (SHUTDOWN WAIT_FOR_SERVERS: the janitor closes the waiters.) */
	struct pool_waiter *next = w->waiting_for_servers ? NULL : admitted_waiter(sp);
	if (next) {
		pool_cancel_wait(next);
		srvpool_grant(s, next);
		return;
	}
	/* Over the instance's pool_size (a connection opened only to learn the
	 * server's parameters for a worker's first login, or a smaller
	 * pool_size after a reload): it does not stay. */
	server_set_state(s, SERVER_IDLE);
	if (srvpool_instance_total(sp) > sp->pool->pool_size)
		server_close(s, "more server connections than pool_size");
}

static void pool_release(struct server *s)
{
	struct client_end *end = link_detach(s);
	s->last_used_us = s->w->now_us;
	pool_server_clean(s);
	if (end)
		end->ev->released(end);
}

void pool_client_gone(struct server *s)
{
	(void)link_detach(s);
	server_drain(s);
}

void pool_client_done(struct server *s)
{
	(void)link_detach(s);
	server_finish(s);
}

void pool_grant_adopted(struct server *s, struct pool_waiter *pw)
{
	s->last_used_us = s->w->now_us;
	srvpool_grant(s, pw);
}

static void pool_server_ready(struct server *s)
{
	struct pool *p = s->sp->pool;
	s->last_used_us = s->w->now_us;
	s->sp->last_failure_us = 0;
	if (!p->have_defaults) {
		params_copy(&p->defaults, &s->params);
		p->have_defaults = true;
		struct list_node *pos, *tmp;
		LIST_FOREACH_SAFE(pos, tmp, &p->login_waiters) {
			struct pool_waiter *pw = LIST_OWNER(pos, struct pool_waiter, node);
			list_del(&pw->node);
			pw->ev->defaults_known(pw);
		}
	}
	server_back(s, true);
}

static void pool_server_closed(struct server *s, bool login_failed)
{
	struct srvpool *sp = s->sp;
	struct pool *p = sp->pool;
	if (list_linked(&s->node))
		list_del(&s->node);
	count_adjust(sp, s->state, -1);
	srvpool_publish(sp);   /* (one connection fewer) */
	if (!login_failed || p->freeing)
		return;
	sp->last_failure_us = s->w->now_us ? s->w->now_us : 1;
	if (s->have_error) {
		snprintf(sp->last_error_code, sizeof sp->last_error_code, "%s", s->error_sqlstate);
		snprintf(sp->last_error, sizeof sp->last_error, "%s", s->error_message);
	} else {
		snprintf(sp->last_error_code, sizeof sp->last_error_code, "08006");
		snprintf(sp->last_error, sizeof sp->last_error, "server connection failed");
	}
	/* A replica that cannot be reached is banned; its waiters go to
	 * another server of the shard (SPEC §4 failover). */
	rotation_server_failed(sp, sp->last_error);
	if (rotation_is_banned(sp)) {
		struct list_node moved, *pos, *tmp;
		list_init(&moved);
		LIST_FOREACH_SAFE(pos, tmp, &sp->waiters) {
			list_del(pos);
			list_add_tail(&moved, pos);
		}
		sp->n_waiters = 0;
		LIST_FOREACH_SAFE(pos, tmp, &moved) {
			struct pool_waiter *pw = LIST_OWNER(pos, struct pool_waiter, node);
			list_del(pos);
			pw->target = NULL;
			pw->since_us = 0;
			pw->ev->rerouted(pw);
		}
	}
	/* A login the server refused for who or where it was (authentication,
	 * authorization, a database it lacks) would be refused again: the
	 * clients waiting are told now, whatever else the pool holds, as
	 * PgBouncer tells them. */
	if (strncmp(sp->last_error_code, "28", 2) == 0 || strcmp(sp->last_error_code, "3D000") == 0)
		fail_waiters(sp);
	/* Nobody left who could serve the waiters: tell them now rather than
	 * at query_wait_timeout (unless they wait for it: the janitor tries
	 * again after server_login_retry). */
	if (srvpool_total(sp) == 0 && !clients_wait(sp)) {
		fail_waiters(sp);
		if (!p->have_defaults) {
			/* Another server of the shard may tell the parameters. */
			struct srvpool *other = pool_pick_target(p);
			bool retry = other != sp && !srvpool_recently_failed(other, p->w->now_us);
			struct list_node waiting, *pos, *tmp;
			list_init(&waiting);
			LIST_FOREACH_SAFE(pos, tmp, &p->login_waiters) {
				list_del(pos);
				list_add_tail(&waiting, pos);
			}
			LIST_FOREACH_SAFE(pos, tmp, &waiting) {
				struct pool_waiter *pw = LIST_OWNER(pos, struct pool_waiter, node);
				list_del(pos);
				if (retry)
					pool_request_defaults(p, pw);
				else
					pw->ev->defaults_failed(pw, sp->last_error_code, sp->last_error);
			}
		}
	}
}

void pool_request_defaults(struct pool *p, struct pool_waiter *pw)
{
	pw->ev->queued(pw, true);
	pw->since_us = p->w->now_us;
	list_add_tail(&p->login_waiters, &pw->node);
	struct srvpool *sp = pool_pick_target(p);
	if (sp->n_opening > 0 || sp->n_idle > 0 || sp->n_active > 0)
		return;
	if (srvpool_recently_failed(sp, p->w->now_us) && clients_wait(sp))
		return;   /* (pool_defaults_retry, from the janitor, after server_login_retry) */
	bool usable = !srvpool_recently_failed(sp, p->w->now_us) && (sp->resolved || (sp->resolved = resolve(sp)));
	/* At max_db_connections or max_user_connections, or the open lock
	 * not to be had: the logins wait (the janitor asks again,
	 * pool_defaults_retry). Over pool_size, as pool_defaults_retry. */
	if (usable && !srvpool_reserve(sp, INT_MAX, true))
		return;
	if (!usable || !srvpool_connect(sp)) {
		/* (a failure inside server_connect may have told it already) */
		if (list_linked(&pw->node)) {
			list_del(&pw->node);
			pw->ev->defaults_failed(pw, sp->last_error_code[0] ? sp->last_error_code : "08006",
						sp->last_error[0] ? sp->last_error : "server connection failed");
		}
	}
}

void pool_dns_done(struct worker *w, const struct dns_entry *e)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			if (sp->host_is_literal || strcmp(sp->host, e->host) != 0)
				continue;
			if (e->state == DNS_OK && take_dns_entry(sp, e)) {
				sp->resolved = true;
				if (sp->n_waiters > 0)
					srvpool_maybe_launch(sp);
				continue;
			}
			/* A host that stops resolving: like a server that refuses
			 * connections (a replica is banned, waiting clients fail). */
			sp->resolved = false;
			snprintf(sp->last_error_code, sizeof sp->last_error_code, "08006");
			snprintf(sp->last_error, sizeof sp->last_error, "%s", e->error);
			/* A pgbouncer.ini's host lists: as PgBouncer, which looks a
			 * name up when it connects, the failure counts when a client
			 * would go there (the router bans it then,
			 * pool_srvpool_unresolvable), not at a lookup nobody waited for. */
			if (w->cfg->pgbouncer && sp->n_waiters == 0)
				continue;
			rotation_server_failed(sp, e->error);
			fail_waiters(sp);
		}
	}
}

/* ---- the write pause (its admin side: pool_admin.c) ---- */

/* Whether no server of p (this worker's) serves a transaction that may
 * write: each one linked is write_gated, none is between states. */
bool pool_writes_drained_here(const struct pool *p)
{
	for (size_t i = 0; i < p->n_targets; i++) {
		const struct srvpool *sp = p->targets[i];
		if (sp->n_other > 0)
			return false;
		const struct list_node *pos;
		for (pos = sp->active.next; pos != &sp->active; pos = pos->next)
			if (!LIST_OWNER(pos, const struct server, node)->txn.write_gated)
				return false;
	}
	return true;
}

void pool_write_gate_publish(struct pool *p)
{
	struct worker *w = p->w;
	if (!w->shm || p->shm_slot < 0)
		return;
	struct shm_pool_gauges *g = shm_gauges(w->shm, w->id, p->shm_slot);
	atomic_store_explicit(&g->writes_drained, p->writes_paused && pool_writes_drained_here(p), memory_order_release);
}

/* ---- counted slots that are not pooled connections ---- */

bool pool_relay_slot_take(struct srvpool *sp)
{
	int limit = srvpool_limit(sp);
	if (!srvpool_reserve(sp, limit, true)) {
		/* Full with pooled connections: an idle one makes room, as
		 * PgBouncer evicts one for a replication connection. */
		if (list_empty(&sp->idle))
			return false;
		server_close(LIST_OWNER(list_last(&sp->idle), struct server, node), "evicted");
		if (!srvpool_reserve(sp, limit, true))
			return false;
	}
	sp->n_reserved--;   /* the reservation becomes the relay's slot */
	sp->n_relay++;
	srvpool_publish(sp);
	return true;
}

/* The counts changed: publish them, and if room opened (a slot given back,
 * fewer servers to come), clients queued for one may get a new one. */
static void counts_changed(struct srvpool *sp, bool room_opened)
{
	srvpool_publish(sp);
	if (room_opened && !list_empty(&sp->waiters) && !sp->pool->paused)
		srvpool_maybe_launch(sp);
}

void pool_relay_slot_give(struct srvpool *sp)
{
	sp->n_relay--;
	counts_changed(sp, true);
}

void pool_promise(struct srvpool *sp, int delta)
{
	sp->n_promised += delta;
	if (sp->n_promised < 0)
		sp->n_promised = 0;
	counts_changed(sp, delta < 0);
}
