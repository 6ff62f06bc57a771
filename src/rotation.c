/* SPDX-License-Identifier: MIT */
/*
 * rotation: which servers a transaction may be sent to (SPEC §4): the bans
 * of servers that failed (shared by every worker, cleared for a whole
 * shard when every server of it is banned) and what role checks found a
 * server to be. Apart from routing, so that the server and pool machines,
 * which report failures and check results here, depend on this small
 * module instead of on the router above them.
 */
#include "rotation.h"

#include <stdlib.h>
#include <time.h>

#include "bans.h"
#include "config.h"
#include "log.h"
#include "pool.h"
#include "shm.h"
#include "context.h"

/* Asked for every candidate of every routed transaction: the shared table
 * (256 entries behind a process-shared mutex) is read only when its
 * generation moved; an expiry needs no new read, the cached time says it. */
bool rotation_is_banned(struct srvpool *sp)
{
	struct worker *w = sp->pool->w;
	if (!w->shm)
		return false;
	if (shm_bans_generation(w->shm) != sp->ban_gen)
		sp->ban_until = shm_ban_until(w->shm, sp->host, sp->port, &sp->ban_gen);
	return sp->ban_until != 0 && sp->ban_until > (int64_t)time(NULL);
}

size_t rotation_shard_servers(struct pool *p, int shard, struct srvpool **out, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < p->n_targets && n < max; i++)
		if (p->targets[i]->shard == shard)
			out[n++] = p->targets[i];
	return n;
}

void rotation_server_failed(struct srvpool *sp, const char *reason)
{
	struct pool *p = sp->pool;
	struct worker *w = p->w;
	/* The primary is never banned for writes (they ignore bans: nowhere
	 * else to go); with primary reads on, it leaves the read rotation like
	 * a replica. A server alone in its shard is never banned. */
	if ((sp->role == SERVER_ROLE_PRIMARY && !p->cpool->primary_reads_enabled) || !w->shm)
		return;
	struct srvpool *all[CONFIG_MAX_SHARD_SERVERS];
	if (rotation_shard_servers(p, sp->shard, all, CONFIG_MAX_SHARD_SERVERS) < 2)
		return;
	int secs = w->cfg->general.ban_time > 0 ? w->cfg->general.ban_time : 60;
	if (!shm_is_banned(w->shm, sp->host, sp->port, (int64_t)time(NULL))) {
		struct log_field f[] = { { "host", sp->host, 0 }, { "port", NULL, sp->port }, { "seconds", NULL, secs },
					 { "reason", reason, 0 }, { "source", "auto", 0 } };
		log_event(LOG_LEVEL_WARNING, "server_ban", f, sizeof f / sizeof *f, NULL, "banning %s:%d for %d s: %s",
			  sp->host, sp->port, secs, reason);
		if (!shm_ban_set(w->shm, sp->host, sp->port, (int64_t)time(NULL), secs, BAN_SOURCE_AUTO, reason))
			log_warning("ban table full: %s:%d not banned", sp->host, sp->port);
	}
}

void rotation_clear_shard_bans(struct pool *p, int shard)
{
	struct worker *w = p->w;
	struct bans *copy = malloc(sizeof *copy);
	if (!copy)
		return;
	shm_bans_copy(w->shm, copy);
	int64_t now = (int64_t)time(NULL);
	struct srvpool *all[CONFIG_MAX_SHARD_SERVERS];
	size_t n = rotation_shard_servers(p, shard, all, CONFIG_MAX_SHARD_SERVERS);
	for (size_t i = 0; i < n; i++) {
		const struct ban *b = bans_get(copy, all[i]->host, all[i]->port, now);
		if (b && b->source == BAN_SOURCE_AUTO)
			(void)shm_ban_clear(w->shm, all[i]->host, all[i]->port);
	}
	free(copy);
	log_warning("pool %s: every server of shard %d was banned; automatic bans cleared", p->name, shard);
}

/* ---- role checks ---- */

bool rotation_wants_role_check(const struct srvpool *sp)
{
	struct pool *p = sp->pool;
	if (sp->role == SERVER_ROLE_AUTO)
		return true;
	size_t n = 0;
	for (size_t i = 0; i < p->n_targets; i++)
		if (p->targets[i]->shard == sp->shard)
			n++;
	return n > 1;
}

bool rotation_takes_writes(const struct srvpool *sp)
{
	if (sp->role == SERVER_ROLE_PRIMARY)
		return !(sp->role_known && sp->in_recovery);
	if (sp->role == SERVER_ROLE_AUTO)
		return sp->role_known && !sp->in_recovery;
	return false;
}

void rotation_role_result(struct srvpool *sp, bool in_recovery)
{
	bool was_known = sp->role_known, was = sp->in_recovery;
	sp->role_known = true;
	sp->in_recovery = in_recovery;
	if (!was_known || was != in_recovery) {
		if (sp->role == SERVER_ROLE_PRIMARY && in_recovery)
			log_warning("%s:%d is configured as primary but is in recovery: no writes go there",
				    sp->host, sp->port);
		else if (sp->role == SERVER_ROLE_AUTO)
			log_info("%s:%d (role auto) is a %s", sp->host, sp->port, in_recovery ? "replica" : "primary");
	}
	/* Replica lag is not measured here but by the lag monitor (lagmon.c):
	 * a pooled connection is checked only when a client uses it, so the
	 * primary's position went stale whenever writes bypassed pgcat. */
}
