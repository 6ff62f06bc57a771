/* SPDX-License-Identifier: MIT */
/*
 * pool_janitor: the pool's duties on every janitor tick (worker.c's 100 ms
 * timer): query_wait_timeout, statement_timeout, healthcheck_timeout and
 * connect_timeout; idle_timeout, server_lifetime and min_pool_size; DNS
 * answers refreshed before they go stale; srvpools a reload retired and
 * pools it removed, freed once drained; and this worker's figures
 * published to the shared segment. Split from pool.c so that checkout and
 * checkin read alone; the helpers of pool.c it uses are declared in
 * include/pool_internal.h.
 */
#include "pool_internal.h"

#include <stdio.h>
#include <string.h>

#include "context.h"
#include "client_end.h"
#include "config.h"
#include "dns.h"
#include "log.h"
#include "rotation.h"
#include "server.h"
#include "shm.h"

/* How long after statement_timeout's cancel a query may still run before
 * pgcat gives up on that server connection. */
#define STATEMENT_TIMEOUT_GRACE_US 1000000

/* A pool of a database made from `*` that no client used for
 * autodb_idle_timeout (0: never) goes: drained, then freed, and the
 * database with its last pool (pool_autodb_release). */
static bool autodb_idle(struct worker *w, struct pool *p)
{
	int ms = w->cfg->general.autodb_idle_timeout;
	if (p->n_clients > 0 || p->autodb_idle_since_us == 0) {
		p->autodb_idle_since_us = w->now_us;
		return false;
	}
	if (ms <= 0 || w->now_us - p->autodb_idle_since_us < (uint64_t)ms * 1000)
		return false;
	log_info("pool %s user %s: made from \"*\", unused for autodb_idle_timeout; dropped", p->name, p->user);
	p->removed = true;
	return true;
}

/* Has any worker logged in a client of p (its counters in the shared
 * segment)? Remembered once true. */
static bool pool_had_client(struct pool *p)
{
	if (p->had_client)
		return true;
	struct shm *shm = p->w->shm;
	if (shm && p->shm_slot >= 0)
		for (uint32_t i = 0; i < shm->h->n_workers && !p->had_client; i++)
			p->had_client = shm_stats(shm, (int)i, p->shm_slot)->v[STAT_CLIENT_LOGIN] > 0;
	return p->had_client;
}

void pool_fill_min(struct pool *p)
{
	/* One worker keeps the instance's warm connections. */
	if (p->w->id != 0)
		return;
	/* auth_file's users are every user of every pool without users
	 * sections: as PgBouncer, min_pool_size is kept for those only once a
	 * client of that user came (in worker 0: its clients count there). */
	if (p->min_pool_size <= 0 || !pool_serves_itself(p->w, p))
		return;
	/* A forced user's pool is the database's: kept from the start. */
	bool forced = p->cpool->server_username && strcmp(p->cpool->server_username, p->user) == 0;
	if (p->cuser && p->cuser->from_auth_file && !forced && !pool_had_client(p))
		return;
	/* Only a SCRAM verifier for this user: no login is possible before a
	 * client has lent its key (SCRAM pass-through, doc/authentication.md). */
	if (p->cuser && p->cuser->password && strncmp(p->cuser->password, "SCRAM-SHA-256$", 14) == 0 &&
	    !p->have_passthrough_key && !(p->cuser->server_password && p->cuser->server_password[0]))
		return;
	for (size_t i = 0; i < p->n_targets; i++) {
		struct srvpool *sp = p->targets[i];
		if (srvpool_login_backoff(sp, p->w->now_us) || !sp->resolved)
			continue;
		int want = p->min_pool_size < p->pool_size ? p->min_pool_size : p->pool_size;
		while (srvpool_reserve(sp, want, false)) {
			if (!srvpool_connect(sp))
				break;
		}
	}
}

/* timeout_action = disconnect (PgBouncer's): the client of s is closed
 * with 08P01 and the timeout's name, and s with it. false: s has no
 * client that can be told so (a cross-shard leg, whose client's own
 * transaction is what counts): the caller acts as timeout_action =
 * cancel would. */
static bool timeout_disconnect(struct server *s, const char *what)
{
	struct client_end *end = s->client;
	if (end == NULL || end->ev->ended == NULL)
		return false;
	end->ev->ended(end, s, "08P01", what, true);
	server_close(s, what);
	return true;
}

/* statement_timeout (per user) and query_timeout (for every user): a
 * query running longer is cancelled (the client gets PostgreSQL's 57014);
 * a replica that slow for statement_timeout is banned. query_timeout with
 * timeout_action = disconnect closes the client and the server instead. */
static void query_timeouts(struct srvpool *sp, uint64_t now)
{
	bool disconnect = sp->pool->w->cfg->general.timeout_action == TIMEOUT_ACTION_DISCONNECT;
	int st_ms = sp->pool->cuser ? sp->pool->cuser->statement_timeout : 0;
	int qt_ms = sp->pool->query_timeout;
	if (st_ms <= 0 && qt_ms <= 0)
		return;
	/* The shorter of the two that are on decides. */
	bool statement = st_ms > 0 && (qt_ms <= 0 || st_ms <= qt_ms);
	int ms = statement ? st_ms : qt_ms;
	const char *name = statement ? "statement_timeout" : "query_timeout";
	uint64_t limit = (uint64_t)ms * 1000;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &sp->active) {
		struct server *s = LIST_OWNER(pos, struct server, node);
		if (s->state != SERVER_ACTIVE || s->txn.outstanding == 0 || now - s->txn.query_start_us < limit)
			continue;
		if (!statement && disconnect && timeout_disconnect(s, "query timeout"))
			continue;
		if (!s->timeout_cancelled) {
			s->timeout_cancelled = true;
			log_info("S-%llu %s:%d: %s (%d ms): cancelling", (unsigned long long)s->id, sp->host, sp->port, name,
				 ms);
			server_send_cancel(s);
			if (statement)
				rotation_server_failed(sp, "statement_timeout");
		} else if (now - s->txn.query_start_us >= limit + STATEMENT_TIMEOUT_GRACE_US) {
			/* The cancel did not end it (a stopped or unreachable
			 * server): pgcat ends it, the client gets 57014. */
			s->have_error = true;
			snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "57014");
			snprintf(s->error_message, sizeof s->error_message, "canceling statement due to %s",
				 statement ? "statement timeout" : "query_timeout");
			server_close(s, statement ? "statement_timeout: the server did not act on the cancel"
						  : "query_timeout: the server did not act on the cancel");
		}
	}
}

/* transaction_timeout (global, per user): a transaction open longer is
 * ended by pgcat: its client gets 25P04 (as for a lost server: at once if
 * it waits for a reply, else with its next message; in session mode the
 * connection ends, as PostgreSQL 17 ends it), and the server is cleaned
 * (cancel, ROLLBACK) and kept. With timeout_action = disconnect the
 * client and the server are closed instead. */
static void transaction_timeouts(struct srvpool *sp, uint64_t now)
{
	bool disconnect = sp->pool->w->cfg->general.timeout_action == TIMEOUT_ACTION_DISCONNECT;
	int ms = sp->pool->transaction_timeout;
	if (ms <= 0)
		return;
	uint64_t limit = (uint64_t)ms * 1000;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &sp->active) {
		struct server *s = LIST_OWNER(pos, struct server, node);
		struct client_end *end = s->client;
		/* 'I' with nothing owed: no transaction (a server just linked
		 * whose clock is the last transaction's, or a session between
		 * its transactions). */
		if (s->state != SERVER_ACTIVE || !end || !end->ev->ended ||
		    (s->txn.tx_status == 'I' && s->txn.outstanding == 0 && !s->txn.ext_pending) ||
		    now - s->txn.xact_start_us < limit)
			continue;
		if (disconnect) {
			(void)timeout_disconnect(s, "transaction timeout");
			continue;
		}
		log_info("S-%llu %s:%d: transaction_timeout (%d ms): the transaction is ended, the server kept",
			 (unsigned long long)s->id, sp->host, sp->port, ms);
		end->ev->ended(end, s, "25P04", "canceling transaction due to transaction_timeout", false);
		/* (the handler untied the link) */
		if (s->state == SERVER_ACTIVE && !s->client)
			server_drain(s);
	}
}

static void srvpool_janitor(struct srvpool *sp)
{
	struct worker *w = sp->pool->w;
	const struct config_general *g = &w->cfg->general;
	uint64_t now = w->now_us;
	struct list_node *pos, *tmp;

	/* PgBouncer's query_timeout counts a client's wait for a server too
	 * (timeout_action = disconnect): it is closed with "query_timeout". */
	int qt = sp->pool->query_timeout;
	if (qt > 0 && g->timeout_action == TIMEOUT_ACTION_DISCONNECT) {
		LIST_FOREACH_SAFE(pos, tmp, &sp->waiters) {
			struct pool_waiter *pw = LIST_OWNER(pos, struct pool_waiter, node);
			if (now - pw->since_us < (uint64_t)qt * 1000)
				continue;
			pool_cancel_wait(pw);
			pw->ev->closed(pw, "08P01", "query_timeout");
		}
	}
	if (g->query_wait_timeout > 0) {
		uint64_t limit = (uint64_t)g->query_wait_timeout * 1000;
		while (!list_empty(&sp->waiters)) {
			struct pool_waiter *pw = LIST_OWNER(list_first(&sp->waiters), struct pool_waiter, node);
			if (now - pw->since_us < limit)
				break;
			srvpool_take_waiter(sp);
			log_info("C-%llu %s@%s: query_wait_timeout", (unsigned long long)pw->client_id, sp->pool->user,
				 sp->pool->name);
			/* A replica that cannot serve its queue in time leaves the rotation. */
			rotation_server_failed(sp, "query_wait_timeout");
			pool_fail_waiter(pw, "08P01", "query_wait_timeout");
		}
	}
	query_timeouts(sp, now);
	transaction_timeouts(sp, now);
	/* A vanished client's query still running after pgcat's cancel was
	 * answered: the cancel reached the backend before the query did (it
	 * is then ignored, as for any client). The server is pgcat's alone
	 * now: cancel again, at this pace, until the query ends. */
	LIST_FOREACH_SAFE(pos, tmp, &sp->other) {
		struct server *s = LIST_OWNER(pos, struct server, node);
		if (s->state == SERVER_DRAINING && s->txn.outstanding > 0 && s->cancels_in_flight == 0)
			server_send_cancel(s);
	}
	/* Health checks that got no answer in time: the server is banned (a
	 * replica) and closed; its client is routed again. */
	if (g->healthcheck_timeout > 0) {
		uint64_t limit = (uint64_t)g->healthcheck_timeout * 1000;
		LIST_FOREACH_SAFE(pos, tmp, &sp->active) {
			struct server *s = LIST_OWNER(pos, struct server, node);
			if (s->state == SERVER_SYNCING && (s->health_check || s->replay_check == SERVER_REPLAY_ASKED) &&
			    now - s->state_since_us >= limit) {
				rotation_server_failed(sp, "health check timed out");
				server_close(s, "health check timed out");
			}
		}
	}
	/* read_your_writes: the WAL position query unanswered (a server that
	 * stopped): the client's next request must not wait for it forever.
	 * Closed; the client routes its reads to the primary until a position
	 * measured later stands for the one it lacks. */
	{
		uint64_t limit = (uint64_t)(g->healthcheck_timeout > 0 ? g->healthcheck_timeout : 5000) * 1000;
		LIST_FOREACH_SAFE(pos, tmp, &sp->active) {
			struct server *s = LIST_OWNER(pos, struct server, node);
			if (s->state == SERVER_WAL_POSITION && now - s->state_since_us >= limit)
				server_close(s, "no answer to the WAL position query");
		}
	}
	if (g->connect_timeout > 0) {
		uint64_t limit = (uint64_t)g->connect_timeout * 1000;
		LIST_FOREACH_SAFE(pos, tmp, &sp->opening) {
			struct server *s = LIST_OWNER(pos, struct server, node);
			if (now - s->connect_us >= limit) {
				s->have_error = true;
				snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "08006");
				snprintf(s->error_message, sizeof s->error_message, "server connect timeout");
				server_close(s, "connect timeout");   /* (PgBouncer's words) */
			}
		}
	}
	/* Draining or resetting for too long: the server does not come back. */
	LIST_FOREACH_SAFE(pos, tmp, &sp->other) {
		struct server *s = LIST_OWNER(pos, struct server, node);
		if (now - s->state_since_us > 30ULL * 1000000)
			server_close(s, "could not be brought back to idle");
	}
	int total = srvpool_total(sp);
	LIST_FOREACH_SAFE(pos, tmp, &sp->idle) {
		struct server *s = LIST_OWNER(pos, struct server, node);
		bool too_old = sp->pool->server_lifetime > 0 &&
			       now - s->connect_us > (uint64_t)sp->pool->server_lifetime * 1000;
		bool too_idle = g->idle_timeout > 0 && now - s->last_used_us > (uint64_t)g->idle_timeout * 1000 &&
				total > sp->pool->min_pool_size;
		if (too_old || too_idle || w->shutting_down) {
			server_close(s, too_old ? "server_lifetime" : too_idle ? "idle_timeout" : "shutdown");
			total--;
		}
	}
	if (!list_empty(&sp->waiters) && !srvpool_recently_failed(sp, now) && !sp->pool->paused)
		srvpool_maybe_launch(sp);
	/* query_wait_notify: a client that has waited that long hears why. */
	uint64_t notify_us = (uint64_t)g->query_wait_notify * 1000;
	LIST_FOREACH_SAFE(pos, tmp, &sp->waiters) {
		struct pool_waiter *pw = LIST_OWNER(pos, struct pool_waiter, node);
		if (notify_us > 0 && !pw->told_waiting && pw->ev->waited_long && now - pw->since_us >= notify_us) {
			pw->told_waiting = true;
			pw->ev->waited_long(pw);
		}
	}
	/* Paused pools give their idle servers back to PostgreSQL. */
	if (sp->pool->paused)
		srvpool_close_list(&sp->idle);
}

void pool_janitor(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			/* Names are looked up again when their answer goes stale,
			 * so a host that stops resolving is noticed (and banned). */
			if (!sp->host_is_literal && w->dns)
				(void)dns_lookup(w->dns, sp->host, w->cfg->general.dns_max_ttl);
			srvpool_janitor(sp);
		}
		pool_defaults_retry(p);
		/* Logins waiting for the server's parameters (its server cannot
		 * be reached, unreachable_server = wait) wait no longer than
		 * query_wait_timeout, as the clients queued for a server. */
		int qwt = w->cfg->general.query_wait_timeout;
		int qt = w->cfg->general.timeout_action == TIMEOUT_ACTION_DISCONNECT ? p->query_timeout : 0;
		struct list_node *lp, *lt;
		LIST_FOREACH_SAFE(lp, lt, &p->login_waiters) {
			struct pool_waiter *pw = LIST_OWNER(lp, struct pool_waiter, node);
			uint64_t waited = w->now_us - pw->since_us;
			bool query = qt > 0 && waited >= (uint64_t)qt * 1000;
			if (!query && (qwt <= 0 || waited < (uint64_t)qwt * 1000))
				continue;
			list_del(&pw->node);
			pw->ev->defaults_failed(pw, "08P01", query ? "query_timeout" : "query_wait_timeout");
		}
		struct list_node *rp, *rt;
		LIST_FOREACH_SAFE(rp, rt, &p->retired) {
			struct srvpool *sp = LIST_OWNER(rp, struct srvpool, retired_node);
			srvpool_close_list(&sp->idle);
			srvpool_janitor(sp);
			if (srvpool_total(sp) == 0 && sp->n_waiters == 0) {
				list_del(&sp->retired_node);
				srvpool_free(sp);
			}
		}
		if (p->removed) {
			/* Draining: servers go as soon as they are idle. */
			for (size_t i = 0; i < p->n_targets; i++)
				srvpool_close_list(&p->targets[i]->idle);
			bool empty = p->n_clients == 0 && list_empty(&p->retired);
			for (size_t i = 0; i < p->n_targets && empty; i++)
				empty = srvpool_total(p->targets[i]) == 0 && p->targets[i]->n_waiters == 0;
			if (empty) {
				log_info("pool %s user %s: removed, now drained", p->name, p->user);
				pool_free(p);
			}
			continue;
		}
		if (p->cpool->autodb_instance && autodb_idle(w, p))
			continue;
		if (!w->shutting_down)
			pool_fill_min(p);
	}
}

/* Janitor, every tick: this worker's part of the instance-wide figures, and
 * idle servers handed back when another worker's clients wait for them. */
void pool_publish(struct worker *w)
{
	if (!w->shm)
		return;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		int active = p->cl_active, waiting;
		uint64_t maxwait;
		pool_count_waiting(w, p, &waiting, &maxwait);
		int32_t sv_active = 0, sv_idle = 0, sv_used = 0, sv_login = 0;
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			sv_active += sp->n_active;
			sv_idle += sp->n_idle;
			sv_used += sp->n_other;
			sv_login += sp->n_opening;
			shm_waiters_set(w->shm, w->id, sp->shm_target, sp->n_waiters);
			/* Full by pool_size or by a cap: either way the other
			 * workers' clients wait for a connection to close. */
			if (sp->shm_target >= 0 && !list_empty(&sp->idle) &&
			    shm_waiters_others(w->shm, w->id, sp->shm_target) > 0 &&
			    (srvpool_instance_total(sp) >= p->pool_size || srvpool_at_cap(sp))) {
				/* The least recently used one. */
				server_close(LIST_OWNER(list_last(&sp->idle), struct server, node),
					     "handed back for another worker's waiting clients");
			}
		}
		if (p->shm_slot < 0)
			continue;
		pool_write_gate_publish(p);
		struct shm_pool_gauges *g = shm_gauges(w->shm, w->id, p->shm_slot);
		atomic_store_explicit(&g->cl_active, active, memory_order_relaxed);
		atomic_store_explicit(&g->cl_waiting, waiting, memory_order_relaxed);
		atomic_store_explicit(&g->sv_active, sv_active, memory_order_relaxed);
		atomic_store_explicit(&g->sv_idle, sv_idle, memory_order_relaxed);
		atomic_store_explicit(&g->sv_used, sv_used, memory_order_relaxed);
		atomic_store_explicit(&g->sv_login, sv_login, memory_order_relaxed);
		atomic_store_explicit(&g->maxwait_us, (int64_t)maxwait, memory_order_relaxed);
	}
}

/* (Here, beside pool_publish, which it publishes first: pool.c calls
 * nothing of this file.) */
bool pool_paused_drained(struct worker *w, const char *db)
{
	struct list_node *pos, *tmp;
	pool_publish(w);
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_matches_db(p, db))
			continue;
		for (size_t i = 0; i < p->n_targets; i++)
			if (p->targets[i]->n_active > 0 || p->targets[i]->n_other > 0)
				return false;
		if (w->shm && p->shm_slot >= 0) {
			int32_t a, wt, sa, si, su, sl;
			int64_t mw;
			shm_gauges_total(w->shm, p->shm_slot, &a, &wt, &sa, &si, &su, &sl, &mw);
			if (sa > 0 || su > 0)
				return false;
		}
	}
	return true;
}
