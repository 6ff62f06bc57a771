/* SPDX-License-Identifier: MIT */
/*
 * route_pick: which server of a shard takes a transaction of a client's
 * session, for a role (include/route_pick.h). Below route.c, which decides
 * the shard and the role of the client's own requests, and the fan-out,
 * whose legs take a server of each shard for the same session: both pick
 * here, so the rules (roles, primary reads, bans, load balancing) are one.
 */
#include "route_pick.h"

#include <stdatomic.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "context.h"
#include "pool.h"
#include "rotation.h"
#include "route.h"
#include "router.h"
#include "ryw.h"
#include "server.h"
#include "shm.h"

/* xorshift64*: the worker's own generator, for picking among servers. */
static uint64_t next_random(struct worker *w)
{
	uint64_t x = w->rng ? w->rng : 0x9e3779b97f4a7c15ULL ^ (uint64_t)w->id;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	w->rng = x;
	return x * 0x2545f4914f6cdd1dULL;
}

static int outstanding(const struct srvpool *sp)
{
	return sp->n_active + sp->n_opening + sp->n_waiters;
}


void route_rules_build(const struct client *c, struct route_rules *out)
{
	const struct config_pool *cp = c->pool->cpool;
	memset(&out->r, 0, sizeof out->r);
	out->r.writing_functions = (const char *const *)cp->writing_functions;
	out->r.n_writing_functions = cp->n_writing_functions;
	size_t maxlen = (size_t)c->w->cfg->general.query_parser_max_length;
	out->r.max_length = cp->query_parser_enabled ? maxlen : 0;   /* off: only hints are read */
	size_t used = 0, n = 0;
	for (size_t i = 0; i < cp->n_sharded_tables && n < ROUTE_MAX_TABLES; i++) {
		size_t l = strlen(cp->sharded_tables[i]);
		if (l + 1 > sizeof out->text - used)
			break;
		char *copy = out->text + used;
		memcpy(copy, cp->sharded_tables[i], l + 1);
		used += l + 1;
		char *last = strrchr(copy, '.');
		if (!last)
			continue;   /* config checked: never */
		*last = '\0';
		char *first = strchr(copy, '.');
		struct router_table *t = &out->t[n++];
		t->column = last + 1;
		t->positioned = false;   /* (route.c places what the transaction learnt) */
		t->position = 0;
		if (first) {
			*first = '\0';
			t->schema = copy;
			t->table = first + 1;
		} else {
			t->schema = NULL;
			t->table = copy;
		}
	}
	out->r.sharded = out->t;
	out->r.n_sharded = n;
}

/* The verdict on sql: from the pool's cache (valid until the next call), or
 * into *local. */
const struct router_verdict *route_classify(const struct client *c, const struct route_rules *rr, const char *sql,
					    size_t len, struct router_verdict *local)
{
	struct pool *p = c->pool;
	if (p->cpool->query_parser_enabled && p->router_cache)
		return router_cache_classify(p->router_cache, sql, len, &rr->r);
	(void)router_classify(sql, len, &rr->r, local);
	return local;
}

/* The role from a statement's verdict (v: NULL if not classified), the
 * session's SET SERVER ROLE and default_role; held: the transaction began
 * with the BEGIN pgcat held. */
enum router_role route_role_of(const struct client *c, const struct router_verdict *v, bool held, bool *writes)
{
	const struct config_pool *cp = c->pool->cpool;
	*writes = false;
	if (v && v->hint_role != ROUTER_ROLE_NONE)
		return v->hint_role;
	if (c->role_override != ROUTER_ROLE_NONE)
		return (enum router_role)c->role_override;
	enum router_role role = ROUTER_ROLE_ANY;
	switch (cp->default_role) {
	case DEFAULT_ROLE_ANY: role = ROUTER_ROLE_ANY; break;
	case DEFAULT_ROLE_PRIMARY: role = ROUTER_ROLE_PRIMARY; break;
	case DEFAULT_ROLE_REPLICA: role = ROUTER_ROLE_REPLICA; break;
	}
	if (held) {
		/* the transaction began with the BEGIN pgcat held (below) */
		*writes = !c->held_begin_read_only;
		return c->held_begin_read_only ? ROUTER_ROLE_REPLICA : ROUTER_ROLE_PRIMARY;
	}
	if (!v || !cp->query_parser_enabled || !v->parsed)
		return role;
	if ((v->begins && !v->begin_read_only) || v->writes || v->multi_statement) {
		*writes = !(v->begins && v->begin_read_only);
		return ROUTER_ROLE_PRIMARY;
	}
	return ROUTER_ROLE_REPLICA;
}

/* One of the n servers of shard (all, n > 1) for role: the primary, or a
 * replica (or the primary, with primary reads) that is not banned, at
 * random or by least outstanding connections. *no_writer: a write was
 * asked and only a configured primary found in recovery is there. */
struct srvpool *route_choose_in_shard(struct client *c, struct srvpool **all, size_t n, int shard,
				      enum router_role role, bool *no_writer)
{
	struct pool *p = c->pool;
	struct worker *w = c->w;
	const struct config_pool *cp = p->cpool;
	struct srvpool *primary = NULL, *configured = NULL;
	for (size_t i = 0; i < n; i++) {
		if (all[i]->role == SERVER_ROLE_PRIMARY)
			configured = all[i];
		if (rotation_takes_writes(all[i]) && (!primary || all[i]->role == SERVER_ROLE_AUTO))
			primary = all[i];
	}
	if (role == ROUTER_ROLE_PRIMARY) {
		if (primary)
			return primary;   /* never banned for writes */
		if (configured) {
			/* configured primary found in recovery, no auto server promoted */
			*no_writer = true;
			return configured;
		}
	}

	bool primary_reads = c->primary_reads_override >= 0 ? c->primary_reads_override == 1 : cp->primary_reads_enabled;
	struct srvpool *cand[CONFIG_MAX_SHARD_SERVERS];
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		struct srvpool *sp = all[i];
		bool is_replica = sp != primary;
		if (role == ROUTER_ROLE_REPLICA && !is_replica && !primary_reads)
			continue;
		cand[k++] = sp;
	}
	if (k == 0)
		return primary ? primary : all[0];
	struct srvpool *ok[CONFIG_MAX_SHARD_SERVERS];
	size_t m = 0;
	for (size_t i = 0; i < k; i++) {
		if (rotation_is_banned(cand[i]))
			continue;
		if (pool_srvpool_failing(cand[i])) {
			/* failed moments ago (say, right after an UNBAN): banned again */
			rotation_server_failed(cand[i], cand[i]->last_error);
			continue;
		}
		if (pool_srvpool_unresolvable(cand[i])) {
			/* its name did not resolve (a pgbouncer.ini does not ban at
			 * the lookup, pool_dns_done: here, as its clients meet it) */
			rotation_server_failed(cand[i], "server DNS lookup failed");
			continue;
		}
		ok[m++] = cand[i];
	}
	if (m == 0) {
		rotation_clear_shard_bans(p, shard);
		for (size_t i = 0; i < k; i++)
			if (!rotation_is_banned(cand[i]))   /* admin bans stay */
				ok[m++] = cand[i];
		if (m == 0)
			return role == ROUTER_ROLE_ANY && primary ? primary : cand[next_random(w) % k];
	}
	/* ok[] keeps the order of the servers list: the first one that is not
	 * banned takes everything, the next when it fails. */
	if (cp->load_balancing_mode == LB_MODE_FIRST)
		return ok[0];
	if (cp->load_balancing_mode == LB_MODE_LOC) {
		/* least outstanding connections; ties at random */
		size_t best = 0, ties = 0;
		int lo = 0;
		for (size_t i = 0; i < m; i++) {
			int o = outstanding(ok[i]);
			if (i == 0 || o < lo) {
				lo = o;
				best = i;
				ties = 1;
			} else if (o == lo && next_random(w) % ++ties == 0) {
				best = i;
			}
		}
		return ok[best];
	}
	return ok[next_random(w) % m];
}

/* SHOW SHARDS: where transactions were routed, and how (summed over the
 * workers through the shared segment; local without one). */
void route_pick_count(struct srvpool *sp, enum route_via via)
{
	struct worker *w = sp->pool->w;
	struct shm_target_counts *t = w->shm ? shm_target_counts(w->shm, w->id, sp->shm_target) : NULL;
	if (!t) {
		sp->routed[via]++;
		return;
	}
	/* one writer: this worker */
	atomic_store_explicit(&t->routed[via], atomic_load_explicit(&t->routed[via], memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* The server of a leg, counted as a transaction routed by SET SHARD: each
 * shard's part of cross-shard work is pinned to its shard. */
static struct srvpool *leg_counted(struct srvpool *sp)
{
	if (sp)
		route_pick_count(sp, ROUTE_VIA_SET);
	return sp;
}

size_t route_ryw_filter(const struct client *c, struct srvpool **all, size_t n, int shard, bool may_ask,
			struct srvpool **out, struct route_ryw *r)
{
	memset(r, 0, sizeof *r);
	const struct ryw_mark *m = shard >= 0 ? ryw_mark(c->ryw, (size_t)shard) : NULL;
	if (!m || c->pool->cpool->read_your_writes != READ_YOUR_WRITES_LSN) {
		memcpy(out, all, n * sizeof *all);
		return n;
	}
	r->marked = true;
	struct worker *w = c->w;
	uint64_t now = w->now_us;
	uint64_t max_age = ryw_max_age_us(w->cfg->general.replica_lag_check_interval);
	struct srvpool *primary = NULL;
	for (size_t i = 0; i < n; i++)
		if (rotation_takes_writes(all[i]) && (!primary || all[i]->role == SERVER_ROLE_AUTO))
			primary = all[i];
	uint64_t target = m->lsn;
	if (m->state == RYW_UNKNOWN) {
		/* The position of the write was not learnt: the primary's own,
		 * measured after the write ended, stands for it. That figure is
		 * pg_current_wal_lsn(), the write position: with
		 * synchronous_commit = off a commit reaches it within three
		 * wal_writer_delay (200 ms by default), so the measurement
		 * must come a second after the write. */
		uint64_t lsn = 0, at = 0;
		if (primary)
			shm_wal_get(w->shm, primary->shm_target, &lsn, &at);
		if (at <= m->since_us + RYW_UNKNOWN_MARGIN_US || ryw_judge(0, lsn, at, now, max_age) == RYW_STALE) {
			if (!primary) {
				memcpy(out, all, n * sizeof *all);   /* no better choice */
				return n;
			}
			out[0] = primary;
			return 1;
		}
		r->resolved = true;
		r->lsn = target = lsn;
	}
	size_t k = 0, reached = 0, stale = 0;
	bool all_reached = true;
	for (size_t i = 0; i < n; i++) {
		if (all[i] == primary) {
			out[k++] = all[i];
			continue;
		}
		uint64_t lsn = 0, at = 0;
		shm_wal_get(w->shm, all[i]->shm_target, &lsn, &at);
		enum ryw_verdict v = ryw_judge(target, lsn, at, now, max_age);
		if (v != RYW_REACHED)
			all_reached = false;
		/* (a banned one left out here: the ban valve must not see a subset) */
		if (v == RYW_REACHED && !rotation_is_banned(all[i])) {
			out[k++] = all[i];
			reached++;
		} else if (v == RYW_STALE && !rotation_is_banned(all[i])) {
			stale++;
		}
	}
	r->all_reached = all_reached && primary;
	if (reached == 0 && stale > 0 && may_ask && !c->ryw_no_ask) {
		/* None known to have it, some not known either way: those are
		 * asked (SPEC §4: "or by asking the replica when the figures
		 * are too old"). */
		k = 0;
		for (size_t i = 0; i < n; i++) {
			if (all[i] == primary || rotation_is_banned(all[i]))
				continue;
			uint64_t lsn = 0, at = 0;
			shm_wal_get(w->shm, all[i]->shm_target, &lsn, &at);
			if (ryw_judge(target, lsn, at, now, max_age) == RYW_STALE)
				out[k++] = all[i];
		}
		if (k > 0) {
			r->ask = target;
			return k;
		}
	}
	if (k == 0) {   /* no primary to fall back on, none caught up: as without a mark */
		memcpy(out, all, n * sizeof *all);
		return n;
	}
	return k;
}

struct srvpool *route_pick_leg(struct client *c, const char *sql, size_t len, int shard, bool *no_writer)
{
	*no_writer = false;
	struct srvpool *all[CONFIG_MAX_SHARD_SERVERS];
	size_t n = rotation_shard_servers(c->pool, shard, all, CONFIG_MAX_SHARD_SERVERS);
	if (n == 0)
		return leg_counted(c->pool->targets[0]);
	if (n == 1)
		return leg_counted(all[0]);
	struct route_rules rr;
	route_rules_build(c, &rr);
	struct router_verdict local;
	const struct router_verdict *v = route_classify(c, &rr, sql, len, &local);
	bool writes;
	enum router_role role = route_role_of(c, v, false, &writes);
	/* The session's stickiness applies; a leg's own writes do not extend
	 * it (the client's transaction is what counts, route_pick). */
	if (role == ROUTER_ROLE_REPLICA && c->pool->cpool->sticky_primary_after_write > 0 &&
	    c->w->now_us < c->sticky_until_us)
		role = ROUTER_ROLE_PRIMARY;
	/* read_your_writes: a read only where the session's last write on
	 * this shard has been replayed (its mark is left to the client's own
	 * requests to clear). */
	if (role != ROUTER_ROLE_PRIMARY && !writes) {
		struct srvpool *ok[CONFIG_MAX_SHARD_SERVERS];
		struct route_ryw r;
		size_t k = route_ryw_filter(c, all, n, shard, false, ok, &r);
		if (r.marked && k < n) {
			if (k == 1 && rotation_takes_writes(ok[0]))
				role = ROUTER_ROLE_PRIMARY;   /* none caught up */
			return leg_counted(route_choose_in_shard(c, ok, k, shard, role, no_writer));
		}
	}
	return leg_counted(route_choose_in_shard(c, all, n, shard, role, no_writer));
}
