/* SPDX-License-Identifier: MIT */
/*
 * reshard_layout: which layout a pool uses once its reshard is done. Every
 * worker reads state_dir when it reads its configuration (reshard_overlay:
 * the next layout becomes the pool's shards while the state says done and
 * the file still names that layout as next); a cutover switches a running
 * worker (reshard_switch, through the admin ring), and a peer's cutover
 * switches this instance (RESHARD SWITCH). A session that chose its shard
 * by number is closed at the switch: its number was the old layout's.
 */
#include "reshard_types.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "context.h"
#include "list.h"
#include "log.h"
#include "pool.h"
#include "pool_types.h"
#include "shm.h"

static void layout_switch_pool(struct worker *w, const char *pool);

/* A session of pool that chose its shard by number or key. */
static void close_pinned(struct client *c, const char *pool)
{
	if (c->pool && strcmp(c->pool->name, pool) == 0 && c->shard_override >= 0)
		client_close(c, "08006", "the shards of \"%s\" changed (an online reshard): connect again and SET SHARD "
			     "or SET SHARDING KEY again", pool);
}

/* RESHARD SWITCH (a peer's cutover): phase done with this instance's next
 * layout, kept in state_dir, and every worker on it. Idempotent. */
bool rs_switch_here(struct worker *w, const char *pool, char *err, size_t errlen)
{
	const struct config_pool *cp = config_find_pool(w->cfg, pool);
	struct rs_state st;
	if (rs_state_read(w->cfg->general.state_dir, pool, &st) && rs_overlay_active(cp, &st))
		return true;   /* switched already (this next layout is in use) */
	memset(&st, 0, sizeof st);
	st.phase = RESHARD_DONE;
	rs_layout_text(cp->next_shards, cp->n_next_shards, st.targets, sizeof st.targets);
	rs_layout_text(cp->shards, cp->n_shards, st.sources, sizeof st.sources);
	if (!rs_state_write(w->cfg->general.state_dir, pool, &st, err, errlen))
		return false;
	struct shm_reshard *e = shm_reshard_entry(w->shm, pool);
	if (e) {
		atomic_fetch_add_explicit(&e->seq, 1, memory_order_acq_rel);
		e->phase = RESHARD_DONE;
		e->source_shards = (int32_t)cp->n_shards;
		e->target_shards = (int32_t)cp->n_next_shards;
		atomic_fetch_add_explicit(&e->seq, 1, memory_order_release);
	}
	log_info("reshard %s: switched to the next layout by a peer's cutover", pool);
	layout_switch_pool(w, pool);
	return true;
}

/* The snapshot uses the layout a done reshard moved to, the one it moved
 * from as its next (the overlay, reshard_overlay). */
bool rs_overlay_active(const struct config_pool *cp, const struct rs_state *st)
{
	char now[sizeof st->targets], next[sizeof st->sources];
	rs_layout_text(cp->shards, cp->n_shards, now, sizeof now);
	rs_layout_text(cp->next_shards, cp->n_next_shards, next, sizeof next);
	return st->phase == RESHARD_DONE && strcmp(now, st->targets) == 0 && strcmp(next, st->sources) == 0;
}

static bool layout_done(const struct config *cfg, const struct config_pool *cp)
{
	struct rs_state st;
	if (cp->n_next_shards == 0 || !rs_state_read(cfg->general.state_dir, cp->name, &st) || st.phase != RESHARD_DONE)
		return false;
	char now[sizeof st.targets];
	rs_layout_text(cp->next_shards, cp->n_next_shards, now, sizeof now);
	return strcmp(now, st.targets) == 0;
}

void reshard_overlay(struct config *cfg)
{
	for (size_t i = 0; i < cfg->n_pools; i++)
		if (layout_done(cfg, &cfg->pools[i])) {
			config_use_next_layout(&cfg->pools[i]);
			log_debug("reshard %s: its next layout is in use (the reshard is done)", cfg->pools[i].name);
		}
}

/* This worker switches, and the others through the admin ring. */
static void layout_switch_pool(struct worker *w, const char *pool)
{
	reshard_switch(w, pool);
	(void)shm_admin_post(w->shm, w->id, SHM_ADMIN_RESHARD_SWITCH, pool, NULL);
}

void reshard_switch(struct worker *w, const char *pool)
{
	struct config *cfg = w->cfg;
	for (size_t i = 0; i < cfg->n_pools; i++) {
		struct config_pool *cp = &cfg->pools[i];
		if (strcmp(cp->name, pool) != 0 || !layout_done(cfg, cp))
			continue;
		config_use_next_layout(cp);
		bool kept = false;
		if (!pool_reload(w, cfg, cfg, &kept))
			log_error("reshard %s: out of memory while switching to the new layout", pool);
		else
			log_info("reshard %s: now routing over %zu shards", pool, cp->n_shards);
		/* A session that chose its shard by number or key (SET SHARD, SET
		 * SHARDING KEY) holds a number of the old layout: it would write
		 * to another shard than it meant. Closed, with the reason. */
		struct list_node *lists[] = { &w->clients_idle, &w->clients_active };
		struct list_node *pos, *tmp;
		for (size_t l = 0; l < sizeof lists / sizeof *lists; l++)
			LIST_FOREACH_SAFE(pos, tmp, lists[l])
				close_pinned(LIST_OWNER(pos, struct client, node), pool);
		/* and those waiting for a server (on the pools' queues) */
		LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
			struct pool *p = LIST_OWNER(pos, struct pool, node);
			if (strcmp(p->name, pool) != 0)
				continue;
			for (size_t t = 0; t < p->n_targets; t++) {
				struct list_node *wpos, *wtmp;
				LIST_FOREACH_SAFE(wpos, wtmp, &p->targets[t]->waiters) {
					struct pool_waiter *pw = LIST_OWNER(wpos, struct pool_waiter, node);
					if (pw->is_client)
						close_pinned(LIST_OWNER(pw, struct client, wait), pool);
				}
			}
		}
	}
}
