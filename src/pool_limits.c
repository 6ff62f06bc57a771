/* SPDX-License-Identifier: MIT */
/*
 * pool_limits: how many server connections a srvpool has (here and over
 * every worker) and how many it may have: its pool
 * size, the reserve for clients that waited reserve_pool_timeout, and the
 * caps over every pool of a server's database and role
 * (max_db_connections, max_user_connections), which may close an idle
 * connection of another pool to make room. Counted over every worker
 * through the shared segment (srvpool_instance_total); a new connection
 * is decided on and counted in one step under the segment's open lock
 * (srvpool_reserve), so the workers together stay within every limit.
 * Split from pool.c
 * (checkout and checkin), whose internals it shares through
 * include/pool_internal.h. Below pool.c: it counts and decides, and calls
 * nothing of pool.c's; launching a connection for a waiter, when a slot
 * frees, is pool.c's (pool_relay_slot_give, pool_promise).
 */
#include "pool_internal.h"

#include <string.h>

#include "config.h"
#include "context.h"
#include "log.h"
#include "server.h"
#include "shm.h"

int srvpool_total(const struct srvpool *sp)
{
	return sp->n_idle + sp->n_active + sp->n_opening + sp->n_other + sp->n_relay;
}

void srvpool_publish(const struct srvpool *sp)
{
	struct worker *w = sp->pool->w;
	if (w->shm)
		shm_conns_set(w->shm, w->id, sp->shm_target,
			      srvpool_total(sp) + sp->n_reserved + sp->n_promised);
}

/* Connections to this server across every worker: pool sizes hold per
 * instance (SPEC §9). */
int srvpool_instance_total(const struct srvpool *sp)
{
	struct worker *w = sp->pool->w;
	if (!w->shm || sp->shm_target < 0)
		return srvpool_total(sp);
	return shm_conns_total(w->shm, sp->shm_target);
}

/* How many connections this server may have now: pool_size, and the
 * reserve once the first client in the queue has waited
 * reserve_pool_timeout. The reserve's connections close when they would
 * go idle (pool_server_clean: over pool_size). */
int srvpool_limit(const struct srvpool *sp)
{
	const struct pool *p = sp->pool;
	if (p->reserve_pool_size <= 0 || list_empty(&sp->waiters))
		return p->pool_size;
	const struct pool_waiter *first = LIST_OWNER(list_first(&sp->waiters), struct pool_waiter, node);
	uint64_t timeout = (uint64_t)p->w->cfg->general.reserve_pool_timeout * 1000;
	if (first->since_us && p->w->now_us - first->since_us >= timeout)
		return p->pool_size + p->reserve_pool_size;
	return p->pool_size;
}

int pool_reserve_in_use(const struct pool *p)
{
	int n = 0;
	for (size_t i = 0; i < p->n_targets; i++) {
		int over = srvpool_instance_total(p->targets[i]) - p->pool_size;
		n += over > 0 ? over : 0;
	}
	return n;
}

/* ---- caps on a server's connections over every pool (max_db_connections,
 * max_user_connections) ---- */

enum cap_kind { CAP_DB, CAP_ROLE };

/* The role pgcat logs in to p's servers as. */
static const char *server_role_of(const struct pool *p)
{
	return p->cuser ? config_user_server_name(p->cpool, p->cuser) : p->user;
}

/* Do a's connections count against the same cap as b's: the same server
 * (host and port), and the same database or role there. On a
 * pgbouncer.ini max_db_connections counts per database entry, as
 * PgBouncer counts it (the entries' pools, every user). */
static bool cap_shared(const struct srvpool *a, const struct srvpool *b, enum cap_kind k)
{
	if (a->port != b->port || strcmp(a->host, b->host) != 0)
		return false;
	if (k == CAP_DB && a->pool->w->cfg->pgbouncer)
		return strcmp(a->pool->name, b->pool->name) == 0 && strcmp(a->database, b->database) == 0;
	return k == CAP_DB ? strcmp(a->database, b->database) == 0
			   : strcmp(server_role_of(a->pool), server_role_of(b->pool)) == 0;
}

static void caps_of(const struct srvpool *sp, int caps[2]);

/* Is t's pool held back by a cap of kind k itself (its min_pool_size
 * fills under it, pool_fill_min)? */
static bool capped_by(const struct srvpool *t, enum cap_kind k)
{
	int caps[2];
	caps_of(t, caps);
	return caps[k] > 0;
}

/* The connections counting against sp's cap of kind k, over every worker
 * (each pool's connection counts are in the shared segment; every worker
 * has the same pools), retired srvpools of a reload included. With
 * victim: also an idle connection of this worker, of another srvpool than
 * sp, that could be closed to make room (the least recently used). */
static int cap_count(const struct srvpool *sp, enum cap_kind k, struct server **victim)
{
	struct worker *w = sp->pool->w;
	int n = 0;
	struct list_node *pos, *tmp, *rp, *rt;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *t = p->targets[i];
			if (!cap_shared(t, sp, k))
				continue;
			n += srvpool_instance_total(t);
			/* Not one that min_pool_size keeps in a pool this cap does
			 * not hold back: that pool would open it again at once,
			 * and the two would take turns forever. */
			if (victim && !*victim && t != sp && !list_empty(&t->idle) &&
			    (srvpool_instance_total(t) > t->pool->min_pool_size || capped_by(t, k)))
				*victim = LIST_OWNER(list_last(&t->idle), struct server, node);
		}
		LIST_FOREACH_SAFE(rp, rt, &p->retired) {
			struct srvpool *t = LIST_OWNER(rp, struct srvpool, retired_node);
			if (cap_shared(t, sp, k))
				n += srvpool_total(t);
		}
	}
	return n;
}

/* sp's caps, by enum cap_kind (0: none). */
static void caps_of(const struct srvpool *sp, int caps[2])
{
	const struct worker *w = sp->pool->w;
	caps[CAP_DB] = config_pool_max_db_connections(w->cfg, sp->pool->cpool);
	caps[CAP_ROLE] = config_user_max_user_connections(w->cfg, sp->pool->cpool, sp->pool->cuser);
}

bool srvpool_at_cap(const struct srvpool *sp)
{
	int caps[2];
	caps_of(sp, caps);
	for (int k = CAP_DB; k <= CAP_ROLE; k++)
		if (caps[k] > 0 && cap_count(sp, (enum cap_kind)k, NULL) >= caps[k])
			return true;
	return false;
}

/* With the open lock held (or no shared segment): room for one more
 * connection to sp's server, under limit and under both caps. At a full
 * cap, *victim (when asked for) is an idle connection of another pool of
 * this worker that counts against that cap, and *cap that cap. */
static bool room_for_one(const struct srvpool *sp, int limit, struct server **victim, enum cap_kind *cap)
{
	if (srvpool_instance_total(sp) >= limit)
		return false;
	int caps[2];
	caps_of(sp, caps);
	for (int k = CAP_DB; k <= CAP_ROLE; k++) {
		if (caps[k] <= 0)
			continue;
		if (victim)
			*victim = NULL;
		if (cap_count(sp, (enum cap_kind)k, victim) >= caps[k]) {
			*cap = (enum cap_kind)k;
			return false;
		}
	}
	return true;
}

/* Look and count under the open lock; at a full cap, close the victim
 * outside it (a close is syscalls and callbacks) and look again: once per
 * cap at most, as the caps allow one eviction each. */
#define RESERVE_LOOKS 3

bool srvpool_reserve(struct srvpool *sp, int limit, bool evict)
{
	struct worker *w = sp->pool->w;
	static const char *const why[2] = { "closed to make room under max_db_connections",
					    "closed to make room under max_user_connections" };
	/* A full pool, as seen without the lock: every client that queues on
	 * it asks, so this answer costs no lock. A count read stale here is
	 * one that went down since: no connection now, the janitor's next
	 * tick asks again. */
	if (srvpool_instance_total(sp) >= limit)
		return false;
	for (int look = 0; look < RESERVE_LOOKS; look++) {
		/* The caps count over other pools' targets too: the lock is
		 * taken whenever there is a segment, not only when sp has a
		 * slot in it. */
		if (w->shm && !shm_open_lock(w->shm))
			return false;
		struct server *victim = NULL;
		enum cap_kind cap = CAP_DB;
		bool room = room_for_one(sp, limit, evict ? &victim : NULL, &cap);
		if (room) {
			/* Counted before the lock goes: a worker deciding next
			 * sees this connection in its sums. */
			sp->n_reserved++;
			srvpool_publish(sp);
		}
		if (w->shm)
			shm_open_unlock(w->shm);
		if (room)
			return true;
		if (!victim)
			return false;
		server_close(victim, why[cap]);
	}
	return false;
}
