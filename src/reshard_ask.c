/* SPDX-License-Identifier: MIT */
/*
 * reshard_ask: the questions the plan (reshard.c) asks a source shard on
 * its control connection: its position to drain to at the cutover, its
 * count of tables, its sequences, and the drop of its slot and the
 * publication. Each sets the source's flag that tells reshard_source.c,
 * which reads the connection, where the answer goes. Calls
 * reshard_source.c; never called by it.
 */
#include "reshard_types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rs_source_ask_target(struct rs_source *s)
{
	s->target = 0;
	s->stale_target = false;
	s->asking_target = true;
	/* Not pg_current_wal_lsn(): with synchronous_commit off a client's
	 * COMMIT returns before its WAL is written, and the write position
	 * can be behind it. A logical message is inserted after every commit
	 * that has returned, and its transaction, committed with a local
	 * flush (not waiting for synchronous standbys), flushes the WAL up
	 * to it, so that the walsender decodes past it at once. Its position
	 * is the target. */
	(void)rs_source_send(s, &s->ctl,
			   "SET synchronous_commit = local; "
			   "SELECT pg_catalog.pg_logical_emit_message(true, 'pgcat_reshard', 'cutover')");
}

bool rs_source_count_tables(struct rs_source *s)
{
	if (s->counting_tables || s->asking_lsn || !rs_conn_idle(&s->ctl))
		return false;
	size_t n = strlen(rs_tables_query) + 64;
	char *sql = malloc(n);
	if (!sql)
		return false;
	snprintf(sql, n, "SELECT pg_catalog.count(*)::text FROM (%s) t", rs_tables_query);
	s->tables_now = -1;
	s->counting_tables = rs_conn_query(&s->ctl, sql);
	free(sql);
	return s->counting_tables;
}

void rs_source_ask_sequences(struct rs_source *s)
{
	s->reading_seqs = true;
	(void)rs_source_send(s, &s->ctl,
			   "SELECT pg_catalog.quote_ident(schemaname) || '.' || pg_catalog.quote_ident(sequencename), "
			   "last_value::text, (increment_by < 0)::text FROM pg_catalog.pg_sequences WHERE last_value IS NOT NULL");
}

bool rs_source_drained(const struct rs_source *s)
{
	return s->target != 0 && s->confirmed >= s->target;
}

void rs_source_drop_slot(struct rs_source *s)
{
	const char *first = s->rs->drop_first ? s->rs->drop_first : "";
	size_t cap = strlen(first) + 600;
	char *sql = malloc(cap);
	if (!sql) {
		rs_failf(s->rs, "source shard %d: out of memory", s->index);
		return;
	}
	snprintf(sql, cap,
		 "%s%sSELECT pg_catalog.pg_terminate_backend(active_pid, 10000) FROM pg_catalog.pg_replication_slots "
		 "WHERE slot_name = '%s' AND active_pid IS NOT NULL; "
		 "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots "
		 "WHERE slot_name = '%s' AND NOT active; DROP PUBLICATION IF EXISTS %s; "
		 "SELECT pg_catalog.count(*)::text FROM pg_catalog.pg_replication_slots WHERE slot_name = '%s'",
		 first, first[0] ? "; " : "", s->slot, s->slot, s->rs->publication, s->slot);
	(void)rs_source_send(s, &s->ctl, sql);
	free(sql);
}
