/* SPDX-License-Identifier: MIT */
/*
 * pool_admin: the admin console's operations on pools (PAUSE, RESUME, the
 * write pause of a reshard's cutover, DISABLE, KILL, RECONNECT, SET) and
 * what SHOW POOLS counts of the waiting. Above pool.c: it calls pool.c,
 * never the other way.
 */
#include "pool.h"
#include "pool_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "context.h"
#include "log.h"
#include "server.h"
#include "shm.h"
#include "tls.h"

bool pool_matches_db(const struct pool *p, const char *db)
{
	return !p->removed && (db == NULL || strcmp(p->name, db) == 0);
}

/* PAUSE (writes false: its idle servers closed, as PgBouncer's) or a
 * reshard's write pause (true: this worker's word on the drain published). */
static int pause_pools(struct worker *w, const char *db, bool writes)
{
	int n = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_matches_db(p, db))
			continue;
		n++;
		if (writes) {
			p->writes_paused = true;
			pool_write_gate_publish(p);
			continue;
		}
		p->paused = true;
		for (size_t i = 0; i < p->n_targets; i++)
			srvpool_close_list(&p->targets[i]->idle);
	}
	return n;
}

int pool_pause(struct worker *w, const char *db)
{
	return pause_pools(w, db, false);
}

int pool_pause_writes(struct worker *w, const char *db)
{
	return pause_pools(w, db, true);
}

bool pool_writes_drained(struct worker *w, const char *db)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_matches_db(p, db))
			continue;
		if (!p->writes_paused || !pool_writes_drained_here(p))
			return false;
		/* The other workers' word (without a slot there is none:
		 * never drained, rather than a guess). */
		if (w->shm && (p->shm_slot < 0 || !shm_writes_drained_all(w->shm, p->shm_slot)))
			return false;
	}
	return true;
}

/* RESUME (writes false) or RESHARD RESUME (true): the pause ends, and the
 * waiters it held that may go now get servers. The two pauses are apart:
 * a cutover's RESHARD RESUME leaves an operator's PAUSE, and RESUME does
 * not end a cutover's write pause (writes there would miss the new layout). */
static int resume_pools(struct worker *w, const char *db, bool writes)
{
	int n = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_matches_db(p, db))
			continue;
		n++;
		bool *flag = writes ? &p->writes_paused : &p->paused;
		if (!*flag)
			continue;
		*flag = false;
		if (writes)
			pool_write_gate_publish(p);
		for (size_t i = 0; i < p->n_targets; i++)
			srvpool_wake_waiters(p->targets[i]);
	}
	return n;
}

int pool_resume(struct worker *w, const char *db)
{
	return resume_pools(w, db, false);
}

int pool_resume_writes(struct worker *w, const char *db)
{
	return resume_pools(w, db, true);
}

bool pool_db_disabled(struct worker *w, const char *db)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		const struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (pool_matches_db(p, db) && p->disabled)
			return true;
	}
	return false;
}

int pool_set_disabled(struct worker *w, const char *db, bool disabled)
{
	int n = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (pool_matches_db(p, db)) {
			p->disabled = disabled;
			n++;
		}
	}
	return n;
}

/* Close the waiters on head (a waiters or login_waiters list of p). */
static void close_waiters(struct list_node *head, const char *sqlstate, const char *message)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, head) {
		struct pool_waiter *pw = LIST_OWNER(pos, struct pool_waiter, node);
		pool_cancel_wait(pw);
		pw->ev->closed(pw, sqlstate, message);
	}
}

void pool_close_waiters(struct pool *p, bool login, bool server, const char *sqlstate, const char *message)
{
	if (login)
		close_waiters(&p->login_waiters, sqlstate, message);
	for (size_t i = 0; server && i < p->n_targets; i++)
		close_waiters(&p->targets[i]->waiters, sqlstate, message);
}

int pool_kill(struct worker *w, const char *db)
{
	int n = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_matches_db(p, db))
			continue;
		n++;
		p->paused = true;
		char msg[256];
		snprintf(msg, sizeof msg, "database \"%s\" was killed by an administrator", p->name);
		pool_close_waiters(p, true, true, "57P01", msg);
		for (size_t i = 0; i < p->n_targets; i++)
			srvpool_close_all(p->targets[i]);
	}
	return n;
}

int pool_reconnect(struct worker *w, const char *db)
{
	int n = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_matches_db(p, db))
			continue;
		n++;
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			struct list_node *sp_pos, *sp_tmp;
			struct list_node *lists[] = { &sp->active, &sp->other, &sp->opening };
			for (size_t l = 0; l < sizeof lists / sizeof *lists; l++)
				LIST_FOREACH_SAFE(sp_pos, sp_tmp, lists[l])
					server_close_when_idle(LIST_OWNER(sp_pos, struct server, node));
			srvpool_close_list(&sp->idle);
		}
	}
	return n;
}

/* Whether a pool of this name (one per user) has a server connection. */
static bool pool_name_has_servers(struct worker *w, const char *name)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		const struct pool *q = LIST_OWNER(pos, struct pool, node);
		if (q->removed || strcmp(q->name, name) != 0)
			continue;
		for (size_t i = 0; i < q->n_targets; i++)
			if (srvpool_total(q->targets[i]) > 0)
				return true;
	}
	return false;
}

void pool_server_tls_changed(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (p->removed)
			continue;
		/* The last failed login is no reason to wait any more: it may
		 * have been the old settings'. */
		for (size_t i = 0; i < p->n_targets; i++)
			p->targets[i]->last_failure_us = 0;
		if (!pool_first_of_name(w, true, p))
			continue;
		if (pool_name_has_servers(w, p->name))   /* (PgBouncer's words, which its operators know) */
			log_info("pool %s: server TLS settings changed: its server connections are obsolete connections, "
				 "closed once idle", p->name);
		(void)pool_reconnect(w, p->name);
	}
}

void pool_count_waiting(struct worker *w, const struct pool *p, int *waiting, uint64_t *maxwait_us)
{
	int wt = 0;
	uint64_t maxwait = 0;
	for (size_t i = 0; i < p->n_targets; i++) {
		struct srvpool *sp = p->targets[i];
		wt += sp->n_waiters;
		if (!list_empty(&sp->waiters)) {
			const struct pool_waiter *pw = LIST_OWNER(list_first(&sp->waiters), struct pool_waiter, node);
			uint64_t waited = w->now_us - pw->since_us;
			if (waited > maxwait)
				maxwait = waited;
		}
	}
	*waiting = wt;
	*maxwait_us = maxwait;
}

bool pool_apply_set(struct worker *w, const char *key, char *err, size_t errlen)
{
	log_set_level(w->cfg->general.log_level);
	log_set_format(w->cfg->general.log_format);
	pool_reapply_general(w);
	if (!config_key_is_tls(key))
		return true;
	if (!tls_contexts_rebuild(&w->tls, &w->cfg->general, err, errlen))
		return false;
	if (config_key_is_server_tls(key))
		pool_server_tls_changed(w);   /* the servers open with the old settings go */
	return true;
}

void pool_reapply_general(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!p->removed)
			pool_apply_config(p, w->cfg, p->cpool, p->cuser);
	}
}

