/* SPDX-License-Identifier: MIT */
/*
 * reshard_publish: a reshard's progress, as SHOW RESHARD and SHOW RESHARD
 * TABLES read it from the shared segment (admin_reshard.c, any worker):
 * written by worker 0 at every change of phase and once a second. A leaf:
 * it reads struct reshard and writes the segment's entry, nothing more.
 */
#include "reshard_types.h"

#include <stdatomic.h>
#include <stdio.h>

#include "context.h"
#include "shm.h"

void rs_publish(struct reshard *rs)
{
	struct shm_reshard *e = shm_reshard_entry(rs->w->shm, rs->pool);
	if (!e)
		return;
	uint64_t rows = 0, bytes = 0, changes = 0, lag = 0;
	for (size_t t = 0; t < rs->n_tables; t++) {
		rows += rs->tables[t].rows;
		bytes += rs->tables[t].bytes;
	}
	for (int i = 0; rs->src && i < rs->n_src; i++) {
		const struct rs_source *s = &rs->src[i];
		changes += s->changes;
		if (s->state == RSS_STREAM && s->server_end > s->confirmed && s->server_end - s->confirmed > lag)
			lag = s->server_end - s->confirmed;
	}
	atomic_fetch_add_explicit(&e->seq, 1, memory_order_acq_rel);
	/* (done once saved, shown once every worker and peer switched) */
	e->phase = (int32_t)(rs->step == RSP_SWITCHING ? RESHARD_CUTOVER : rs->phase);
	e->source_shards = rs->n_src;
	e->target_shards = rs->n_dst;
	e->tables = (int32_t)rs->n_tables;
	e->tables_copied = (int32_t)rs->tables_copied;
	e->rows_copied = rows;
	e->bytes_copied = bytes;
	e->changes_applied = changes;
	e->lag_bytes = lag;
	e->pause_ms = rs->pause_us / 1000;
	e->errors = rs->errors;
	snprintf(e->last_error, sizeof e->last_error, "%s", rs->error);
	/* Per table and source shard (those that copy it: every source for
	 * a sharded table, source 0 for one kept whole). */
	int32_t n = 0;
	for (int i = 0; rs->src && i < rs->n_src; i++) {
		const struct rs_source *s = &rs->src[i];
		uint64_t slag = s->server_end > s->confirmed ? s->server_end - s->confirmed : 0;
		for (size_t t = 0; t < rs->n_tables && n < SHM_RESHARD_PARTS; t++) {
			if (rs->tables[t].key_col < 0 && i != 0)
				continue;
			struct shm_reshard_part *pt = &e->parts[n++];
			snprintf(pt->table, sizeof pt->table, "%s.%s", rs->tables[t].nspname, rs->tables[t].relname);
			pt->source_shard = i;
			pt->rows_copied = s->t_rows ? s->t_rows[t] : 0;
			pt->bytes_copied = s->t_bytes ? s->t_bytes[t] : 0;
			pt->changes_applied = s->t_changes ? s->t_changes[t] : 0;
			pt->lag_bytes = s->state == RSS_STREAM ? slag : 0;
			pt->errors = s->errors;
		}
	}
	e->n_parts = n;
	atomic_fetch_add_explicit(&e->seq, 1, memory_order_release);
}
