/* SPDX-License-Identifier: MIT */
/*
 * pool_reload: a new configuration snapshot applied to the running pools
 * (include/pool.h): planned first, pool by pool, into fresh arrays so that
 * a failure changes nothing, then committed; pools the new snapshot drops
 * drain. Also the databases made at login from a `*` template (PgBouncer's
 * fallback database), which a reload makes again from the new template.
 * Its own room because it only compares snapshots and moves pools; the
 * lists, waiters and connects are pool.c's.
 */
#include "pool.h"
#include "pool_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "context.h"
#include "log.h"
#include "server.h"

/* ---- reload ---- */

static void retire_srvpool(struct pool *p, struct srvpool *sp)
{
	log_info("pool %s user %s: server %s:%d removed by reload; closing its connections once idle",
		 p->name, p->user, sp->host, sp->port);
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &sp->active)
		server_close_when_idle(LIST_OWNER(pos, struct server, node));
	LIST_FOREACH_SAFE(pos, tmp, &sp->other)
		LIST_OWNER(pos, struct server, node)->close_when_idle = true;
	LIST_FOREACH_SAFE(pos, tmp, &sp->opening)
		LIST_OWNER(pos, struct server, node)->close_when_idle = true;
	srvpool_close_list(&sp->idle);
	list_add_tail(&p->retired, &sp->retired_node);
	/* Its waiters are routed again, as when a server is banned: the
	 * server they wait for may now be another shard's (a reshard's
	 * layout switch), so the pool's generic pick would not do. */
	LIST_FOREACH_SAFE(pos, tmp, &sp->waiters) {
		struct pool_waiter *pw = LIST_OWNER(pos, struct pool_waiter, node);
		pool_cancel_wait(pw);
		if (p->removed || p->n_targets == 0)
			pool_fail_waiter(pw, "08006", "server removed from the configuration");
		else
			pw->ev->rerouted(pw);
	}
}

/* A reload, planned before anything changes: for each pool the new
 * config keeps, its new srvpools (t: NULL for a new pool), config and
 * whether its password changed. Built first into fresh arrays, so that a
 * failure changes nothing. */
struct reload_entry {
	struct pool *p;
	struct srvpool **t;
	size_t n;
	const struct config_pool *cp;
	const struct config_user *cu;
	bool password_changed;
};
struct reload_plan {
	struct reload_entry *e;
	size_t n, cap;
};

/* A new, zeroed entry; NULL: out of memory. */
static struct reload_entry *plan_add(struct reload_plan *pl)
{
	if (pl->n == pl->cap) {
		size_t cap = pl->cap ? pl->cap * 2 : 16;
		struct reload_entry *ne = realloc(pl->e, cap * sizeof *ne);
		if (!ne)
			return NULL;
		pl->e = ne;
		pl->cap = cap;
	}
	struct reload_entry *e = &pl->e[pl->n];
	memset(e, 0, sizeof *e);
	return e;
}

static bool plan_has(const struct reload_plan *pl, const struct pool *p)
{
	for (size_t i = 0; i < pl->n; i++)
		if (pl->e[i].p == p)
			return true;
	return false;
}

/* e's pool (existing) gets the srvpools of cp, reusing its own. */
static bool plan_targets(struct reload_entry *e, const struct config_pool *cp)
{
	struct pool *p = e->p;
	struct srvpool **old = calloc(p->n_targets ? p->n_targets : 1, sizeof *old);
	if (!old)
		return false;
	memcpy(old, p->targets, p->n_targets * sizeof *old);
	bool ok = build_targets(p, cp, old, p->n_targets, &e->t, &e->n);
	free(old);
	return ok;
}

/* Every (pool, user) of the new config: the existing pool re-targeted, or
 * a new one. */
static bool plan_configured(struct worker *w, const struct config *newcfg, struct reload_plan *pl)
{
	for (size_t i = 0; i < newcfg->n_pools; i++) {
		const struct config_pool *cp = &newcfg->pools[i];
		for (size_t j = 0; j < cp->n_users; j++) {
			const struct config_user *cu = &cp->users[j];
			struct reload_entry *e = plan_add(pl);
			if (!e)
				return false;
			e->cp = cp;
			e->cu = cu;
			e->p = pool_find(w, cp->name, cu->name);
			if (e->p) {
				if (!plan_targets(e, cp))
					return false;
				const char *a = e->p->cuser ? e->p->cuser->password : NULL;
				const char *b = cu->password;
				e->password_changed = (a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0);
			} else {
				e->p = pool_new(w, cp, cu);
				if (!e->p)
					return false;
				/* pool_new read w->cfg: apply the new snapshot's values. */
				pool_apply_config(e->p, newcfg, cp, cu);
			}
			pl->n++;
		}
	}
	return true;
}

/* Users auth_query found: kept while their database is configured,
 * auth_query still on and no users section took them over; users an LDAP
 * server or PAM let in (proven) while their database is configured. */
static bool plan_looked_up(struct worker *w, const struct config *newcfg, struct reload_plan *pl)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		const struct config_pool *cp = p->own_user && !p->removed ? config_find_pool(newcfg, p->name) : NULL;
		if (!cp || (!p->proven && !config_pool_auth_user(newcfg, cp)[0]) || plan_has(pl, p))
			continue;
		struct reload_entry *e = plan_add(pl);
		if (!e)
			return false;
		e->p = p;
		e->cp = cp;
		e->cu = p->own_user;
		if (!plan_targets(e, cp))
			return false;
		pl->n++;
	}
	return true;
}

/* Nothing changed: free what the plan made (new pools, new srvpools). */
static void plan_abort(struct reload_plan *pl)
{
	for (size_t i = 0; i < pl->n; i++) {
		struct reload_entry *e = &pl->e[i];
		if (e->t) {
			for (size_t k = 0; k < e->n; k++) {
				bool existing = false;
				for (size_t m = 0; m < e->p->n_targets && !existing; m++)
					existing = e->p->targets[m] == e->t[k];
				if (!existing)
					srvpool_free(e->t[k]);
			}
			free(e->t);
		} else if (e->p) {
			pool_free(e->p);
		}
	}
	free(pl->e);
}

/* The plan applied to one pool: old srvpools not reused retired, the new
 * config's values, a new verifier if the password changed; a new pool
 * joins the list. */
static void plan_apply(struct worker *w, const struct config *newcfg, struct reload_entry *e)
{
	struct pool *p = e->p;
	if (!e->t) {
		list_add_tail(&w->pools, &p->node);
		return;
	}
	/* The new targets and settings first: the waiters of a server
	 * retired below are routed again, over what the pool has now. */
	struct srvpool **old = p->targets;
	size_t n_old = p->n_targets;
	p->targets = e->t;
	p->n_targets = e->n;
	pool_apply_config(p, newcfg, e->cp, e->cu);
	for (size_t k = 0; k < n_old; k++) {
		bool reused = false;
		for (size_t m = 0; m < e->n && !reused; m++)
			reused = e->t[m] == old[k];
		if (!reused)
			retire_srvpool(p, old[k]);
	}
	free(old);
	if (p->own_user && p->cuser != p->own_user) {
		/* a users section now lists the user auth_query found */
		own_user_free(p->own_user);
		p->own_user = NULL;
	}
	if (e->password_changed)
		pool_derive_scram(p);
}

/* ---- databases made from `*` ---- */

/* At most this many databases made from `*` per worker: a client may ask
 * for any name, before it has authenticated. */
#define AUTODB_MAX 4096

bool pool_add_autodb(struct worker *w, const char *db, const char *user)
{
	struct config *cfg = w->cfg;
	if (cfg->autodb == NULL)
		return false;
	if (cfg->n_autodb_pools >= AUTODB_MAX && !config_find_pool(cfg, db)) {
		/* Names made for logins that got no pool (a user neither
		 * auth_file nor auth_query knows, say) go first. */
		for (size_t i = cfg->n_autodb_pools; i-- > 0;)
			pool_autodb_release(w, cfg->autodb_pools[i], NULL);
	}
	if (cfg->n_autodb_pools >= AUTODB_MAX && !config_find_pool(cfg, db)) {
		log_warning("database \"%s\": %d databases made from \"*\" already; no more until some go idle "
			    "(autodb_idle_timeout)", db, AUTODB_MAX);
		return false;
	}
	size_t before = cfg->n_autodb_pools;
	const struct config_pool *cp = config_autodb_instance(cfg, db);
	if (cp == NULL)
		return false;
	if (cfg->n_autodb_pools > before)
		log_info("registered new auto-database: %s (made from \"*\")", db);   /* (PgBouncer's words) */
	/* The pool of this client's user, if the template (auth_file) has it,
	 * made at its first login, as PgBouncer makes them; auth_query makes
	 * those of the others (auth_query.c). */
	const char *names[] = { user, cp->server_username };   /* (and the forced user's, which serves it) */
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		const struct config_user *cu = names[i] ? config_find_user(cp, names[i]) : NULL;
		if (cu && !pool_find(w, cp->name, names[i])) {
			struct pool *p = pool_new(w, cp, cu);
			if (!p)
				return false;
			p->autodb_idle_since_us = w->now_us;
			list_add_tail(&w->pools, &p->node);
		}
	}
	return true;
}

/* Databases made from `*`: made again from the new template (unless the
 * new snapshot names them), their pools kept; without a template they
 * drain with the others the new snapshot drops. */
static bool plan_autodb(struct worker *w, struct config *newcfg, struct reload_plan *pl)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (p->removed || !p->cpool->autodb_instance || plan_has(pl, p) || !newcfg->autodb)
			continue;
		const struct config_pool *cp = config_find_pool(newcfg, p->name);
		if (cp && !cp->autodb_instance)
			continue;   /* named now, and this user is not of it */
		if (!cp && !(cp = config_autodb_instance(newcfg, p->name)))
			return false;
		const struct config_user *cu = p->own_user ? p->own_user : config_find_user(cp, p->user);
		if (!cu)
			continue;   /* no longer in auth_file */
		struct reload_entry *e = plan_add(pl);
		if (!e)
			return false;
		e->p = p;
		e->cp = cp;
		e->cu = cu;
		if (!plan_targets(e, cp))
			return false;
		const char *a = p->cuser ? p->cuser->password : NULL;
		e->password_changed = (a == NULL) != (cu->password == NULL) || (a && strcmp(a, cu->password) != 0);
		pl->n++;
	}
	return true;
}

bool pool_reload(struct worker *w, struct config *newcfg, struct config *oldcfg, bool *oldcfg_kept)
{
	*oldcfg_kept = false;
	struct list_node *pos, *tmp;
	struct reload_plan pl = { NULL, 0, 0 };
	/* Allocated up front so that nothing can fail after the first change. */
	struct config_ref *ref = calloc(1, sizeof *ref);
	if (!ref)
		return false;
	ref->cfg = oldcfg;
	if (!plan_configured(w, newcfg, &pl) || !plan_autodb(w, newcfg, &pl) || !plan_looked_up(w, newcfg, &pl)) {
		plan_abort(&pl);
		free(ref);
		return false;
	}
	/* Commit. Pools not in the new config: removed, draining. */
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (plan_has(&pl, p) || p->removed)
			continue;
		log_info("pool %s user %s: removed by reload; draining", p->name, p->user);
		p->removed = true;
	}
	/* Pools removed now still point into the old snapshot: they hold it. */
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (p->removed && !p->cfg_ref) {
			ref->refs++;
			p->cfg_ref = ref;
		}
	}
	if (ref->refs > 0)
		*oldcfg_kept = true;
	else
		free(ref);
	for (size_t i = 0; i < pl.n; i++)
		plan_apply(w, newcfg, &pl.e[i]);
	free(pl.e);
	return true;
}
