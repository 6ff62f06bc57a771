/* SPDX-License-Identifier: MIT */
/*
 * server_qstats: a server's answers counted per query shape (query_stats,
 * qstats.h): the rows its CommandCompletes say, and the request counted
 * at its ReadyForQuery from the notes the link keeps (slowlog.h).
 */
#include "server_internal.h"

#include <stdlib.h>

#include "buf.h"
#include "config.h"
#include "context.h"
#include "pool_types.h"
#include "qshape.h"
#include "qstats.h"
#include "shm.h"
#include "slowlog.h"

bool server_note_rows(struct server *s, const struct buf *in, uint32_t len)
{
	/* the rows it says (a tag that counts is short) */
	char tag[32];   /* ("INSERT 0 " and 20 digits) */
	if (len < 4)
		return true;
	size_t n = len - 4 < sizeof tag ? len - 4 : sizeof tag;
	if (!buf_copy_at(in, 5, tag, n))
		return false;   /* (split across reads: a few bytes more to wait for) */
	slowlog_note_complete(&s->slow, tag, n);
	return true;
}

/* The worker's query statistics, made at the first request counted. */
static bool qstats_ready(struct worker *w)
{
	if (w->qstats_local && w->qshapes)
		return true;
	struct qstats_table *t = shm_qstats(w->shm, w->id);
	if (!t)
		return false;
	if (!w->qstats_local) {
		if (!(w->qstats_local = malloc(sizeof *w->qstats_local)))
			return false;
		/* (a restarted worker goes on with the shapes it had counted) */
		qstats_local_rebuild(w->qstats_local, t);
	}
	if (!w->qshapes)
		w->qshapes = qshape_cache_new(QSHAPE_CACHE_SETS);
	w->qstats_table = t;
	w->qstats_resets = shm_qstats_resets(w->shm);
	return w->qshapes != NULL;
}

/* query_stats: the request just answered, counted under its shape
 * (qstats.h) from the notes of it (slowlog.h). A text libpg_query cannot
 * read is counted under fingerprint 0; a statement whose text pgcat does
 * not have (parsed before query_stats was on, a text over 8 kB, one that
 * left the cache) under its key, as a shape without text. */
void server_count_shape(struct server *s, uint64_t exec_us)
{
	struct worker *w = s->w;
	const struct pool *p = s->sp->pool;
	const struct slowlog_req *r = &s->slow;
	if (p->shm_slot < 0 || !qstats_ready(w))
		return;
	struct qshape_desc *d = r->len && !r->cut ? qshape_cache_text(w->qshapes, r->sql, r->len)
				: qshape_cache_get(w->qshapes, r->qkey, NULL);
	/* (without a description: a made-up fingerprint: 2 for every text
	 * too long to keep, the key of a statement that left the cache, 1
	 * for one never seen; 0 is the one of texts that are not SQL) */
	uint64_t fingerprint = r->cut ? 2 : r->qkey ? r->qkey : 1;
	const char *text = r->cut ? "(text longer than 8 kB: not shown)"
		: r->qkey ? "(statement's text no longer cached)"
		: "(statement whose Parse was not seen with query_stats on: text not known)";
	if (d) {
		fingerprint = d->fingerprint;
		text = d->why == QSHAPE_TEXT_OK ? d->text : qshape_text_why(d->why);
	}
	const struct srvpool *sp = s->sp;
	bool replica = sp->role_known ? sp->in_recovery : sp->role == SERVER_ROLE_REPLICA;
	struct qstats_sample sample = {
		.exec_us = exec_us, .wait_us = r->wait_us, .rows = r->rows, .errors = r->errors,
		.shard = sp->shard, .role = replica ? QSTATS_REPLICA : QSTATS_PRIMARY,
	};
	int32_t slot = qstats_record(w->qstats_table, w->qstats_local, w->qstats_resets, (uint32_t)p->shm_slot,
				     p->query_stats_max, fingerprint, text, &sample, d ? d->slot_hint : -1);
	if (d)
		d->slot_hint = slot;
}
