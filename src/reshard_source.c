/* SPDX-License-Identifier: MIT */
/*
 * reshard_source: one source shard of a reshard (reshard.h) and the
 * connections it works with: a control connection (publication, slot
 * drop, current LSN), a replication connection (the slot, its exported
 * snapshot, then the change stream), copy lanes (RESHARD_COPY_LANES
 * tables at a time: each a connection in that snapshot running COPY TO
 * STDOUT and one per destination shard running COPY FROM STDIN) and one
 * connection per destination shard (lane 0's, which then applies the
 * changes' statements).
 *
 * Copy: the rows of a sharded table go to the destination their key
 * hashes to under the new layout (copysplit.c reads the key); those of a
 * table kept whole go to every destination, from source 0 only (every
 * source holds the same). Stream: each source transaction's changes
 * become, per destination, one query "BEGIN;...;COMMIT" of idempotent
 * statements (logical_apply.c), sent in commit order; the slot's position
 * is confirmed only up to the last transaction every destination has
 * answered, so that pgcat started again replays from there and changes
 * nothing twice.
 */
#include "reshard_types.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "context.h"
#include "dns.h"
#include "io.h"
#include "log.h"
#include "logical_apply.h"
#include "proto.h"
#include "sharding.h"

/* PostgreSQL's MaxTupleAttributeNumber: no relation has more columns. */
#define RS_MAX_COLUMNS 1664
#define RS_MAX_RELIDS 4096
/* A destination's statements are sent before the commit once this long
 * (the transaction stays open there: BEGIN came first). */
#define RS_STMT_FLUSH (1024u * 1024u)
#define RS_MAX_STATEMENT (256u * 1024u * 1024u)
/* A status update at least this often (wal_sender_timeout is 60 s by default). */
#define RS_STATUS_EVERY_US (1000u * 1000u)

static const struct bconn_profile rs_profile = {
	.application_name = "pgcat reshard",
	.refused = "login failed: ",
	.auth_failed = "authentication failed: ",
	.max_message = 256u * 1024u * 1024u,
	.read_high = 256u * 1024u,
};

void rs_profile_init(struct reshard *rs)
{
	rs->profile = rs_profile;
	/* (PostgreSQL keeps 63 bytes of an application_name: it must fit,
	 * or the run would not know its own sessions.) */
	snprintf(rs->app_name, sizeof rs->app_name, "pgcat reshard %.24s %llx", rs->pool,
		 (unsigned long long)rs->w->now_us);
	/* (It goes into a literal of the query that ends the others.) */
	for (char *p = rs->app_name + 14; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == ' '))
			*p = '_';
	rs->profile.application_name = rs->app_name;
}

static const char *role_name(const struct rs_conn *c)
{
	switch (c->role) {
	case RSC_CTL: return "control";
	case RSC_REPL: return "replication";
	case RSC_COPY: return "copy";
	case RSC_DST: return "destination";
	}
	return "?";
}

static void src_fail(struct rs_source *s, const struct rs_conn *c, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void src_fail(struct rs_source *s, const struct rs_conn *c, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	s->errors++;
	if (c && c->role == RSC_DST)
		rs_failf(s->rs, "source shard %d, new shard %d (%s:%d/%s): %s", s->index, c->dst, c->ep->host, c->ep->port,
			c->ep->database, why);
	else if (c)
		rs_failf(s->rs, "source shard %d, %s connection (%s:%d/%s): %s", s->index, role_name(c), c->ep->host,
			c->ep->port, c->ep->database, why);
	else
		rs_failf(s->rs, "source shard %d: %s", s->index, why);
}

bool rs_conn_query(struct rs_conn *c, const char *sql)
{
	if (bconn_state(&c->b) != BCONN_READY || !bconn_query(&c->b, sql))
		return false;
	c->sent++;
	c->have_answer = false;
	return true;
}

bool rs_conn_idle(const struct rs_conn *c)
{
	return c->done == c->sent;
}

static bool lane_dst_idle(const struct rs_source *s, const struct rs_lane *l)
{
	for (int d = 0; d < s->rs->n_dst; d++)
		if (!rs_conn_idle(&l->dst[d]))
			return false;
	return true;
}

/* The source's destination connections and every lane's. */
static bool all_dst_idle(const struct rs_source *s)
{
	for (int d = 0; d < s->rs->n_dst; d++)
		if (!rs_conn_idle(&s->dst[d]))
			return false;
	for (int k = 1; k < RESHARD_COPY_LANES; k++)
		if (!lane_dst_idle(s, &s->lanes[k]))
			return false;
	return true;
}

bool rs_source_send(struct rs_source *s, struct rs_conn *c, const char *sql)
{
	if (rs_conn_query(c, sql))
		return true;
	src_fail(s, c, "could not send a query (connection not ready, or out of memory)");
	return false;
}

/* ---- flow ---- */

static bool dst_behind(const struct rs_source *s, const struct rs_conn *dst)
{
	for (int d = 0; d < s->rs->n_dst; d++)
		if (io_out_len(&dst[d].b.io) > RESHARD_OUT_HIGH)
			return true;
	return false;
}

/* Read the source (each lane's copy, or the stream) only while its
 * destinations keep up. */
static void src_flow(struct rs_source *s)
{
	if (s->state == RSS_COPY) {
		for (int k = 0; k < RESHARD_COPY_LANES; k++) {
			struct rs_lane *l = &s->lanes[k];
			bool want = dst_behind(s, l->dst);
			if (want != l->paused) {
				l->paused = want;
				bconn_pause(&l->copy.b, want);
			}
		}
		return;
	}
	bool want = dst_behind(s, s->dst);
	if (want == s->paused)
		return;
	s->paused = want;
	bconn_pause(&s->repl.b, want);
}

/* ---- the stream ---- */

static void send_status(struct rs_source *s, bool reply_requested)
{
	struct rs_conn *c = &s->repl;
	if (!c->copy_both || bconn_state(&c->b) != BCONN_READY)
		return;
	uint8_t st[PGOUTPUT_STATUS_LEN];
	struct worker *w = s->rs->w;
	int64_t now = (int64_t)w->now_us - PGOUTPUT_EPOCH_OFFSET_US;
	/* Written and flushed: what the destinations committed; nothing
	 * later is acknowledged, so the slot keeps it after a restart. */
	pgoutput_status_update(st, s->confirmed, s->confirmed, s->confirmed, now, reply_requested);
	bconn_send(&c->b, PqMsg_CopyData, st, sizeof st);
	s->last_status_us = w->now_us;
}

/* Transactions every destination has answered: confirmed. */
static void advance_confirmed(struct rs_source *s)
{
	uint64_t before = s->confirmed;
	while (s->ring_len > 0) {
		struct rs_txn *t = &s->ring[s->ring_head];
		bool done = true;
		for (int d = 0; d < s->rs->n_dst && done; d++)
			done = t->need[d] <= s->dst[d].done;
		if (!done)
			break;
		if (t->end_lsn > s->confirmed)
			s->confirmed = t->end_lsn;
		s->ring_head = (s->ring_head + 1) % RESHARD_TXN_RING;
		s->ring_len--;
	}
	/* Nothing open and nothing unanswered: everything the server sent
	 * before its last keepalive is applied. */
	if (s->ring_len == 0 && !s->in_txn && !s->batch_open && s->sent_end > s->confirmed)
		s->confirmed = s->sent_end;
	if (s->confirmed != before && s->target && s->confirmed >= s->target)
		s->rs->ev->progressed(s->rs);
}

static struct rs_rel *find_rel(struct rs_source *s, uint32_t relid)
{
	for (size_t i = 0; i < s->n_rels; i++)
		if (s->rels[i].relid == relid)
			return &s->rels[i];
	return NULL;
}

static void rel_clear(struct rs_rel *r)
{
	free(r->nspname);
	free(r->relname);
	for (uint16_t i = 0; i < r->n_columns; i++)
		free((char *)r->columns[i].name);
	free(r->columns);
	memset(r, 0, sizeof *r);
}

static bool on_relation(struct rs_source *s, const struct pgoutput_msg *m)
{
	struct rs_rel *r = find_rel(s, m->u.relation.relid);
	if (!r) {
		if (s->n_rels == s->cap_rels) {
			size_t cap = s->cap_rels ? s->cap_rels * 2 : 16;
			struct rs_rel *nr = realloc(s->rels, cap * sizeof *nr);
			if (!nr)
				return false;
			s->rels = nr;
			s->cap_rels = cap;
		}
		r = &s->rels[s->n_rels++];
		memset(r, 0, sizeof *r);
	} else {
		rel_clear(r);
	}
	r->relid = m->u.relation.relid;
	r->replica_identity = m->u.relation.replica_identity;
	r->nspname = strdup(m->u.relation.nspname);
	r->relname = strdup(m->u.relation.relname);
	r->columns = calloc(m->u.relation.n_columns ? m->u.relation.n_columns : 1, sizeof *r->columns);
	if (!r->nspname || !r->relname || !r->columns)
		return false;
	for (uint16_t i = 0; i < m->u.relation.n_columns; i++) {
		r->columns[i] = m->u.relation.columns[i];
		if (!(r->columns[i].name = strdup(m->u.relation.columns[i].name)))
			return false;
		r->n_columns = (uint16_t)(i + 1);
	}
	r->table = -1;
	r->key_col = -1;
	struct reshard *rs = s->rs;
	for (size_t t = 0; t < rs->n_tables; t++) {
		const struct rs_table *tb = &rs->tables[t];
		if (strcmp(tb->nspname, r->nspname) != 0 || strcmp(tb->relname, r->relname) != 0)
			continue;
		r->table = (int)t;
		if (tb->key_name)
			for (uint16_t i = 0; i < r->n_columns; i++)
				if (strcasecmp(r->columns[i].name, tb->key_name) == 0)
					r->key_col = i;
		break;
	}
	return true;
}

/* The statement of a change into s->scratch (grown as needed). */
static enum logical_apply_result write_statement(struct rs_source *s, const struct pgoutput_msg *m,
						 const struct rs_rel *r, size_t *len)
{
	struct logical_rel lr = { r->nspname, r->relname, r->replica_identity, r->columns, r->n_columns };
	for (;;) {
		if (!s->scratch) {
			s->scratch_cap = 4096;
			if (!(s->scratch = malloc(s->scratch_cap)))
				return LOGICAL_APPLY_TOO_LONG;
		}
		enum logical_apply_result res = logical_apply_sql(m, &lr, s->scratch, s->scratch_cap, len);
		if (res != LOGICAL_APPLY_TOO_LONG || s->scratch_cap >= RS_MAX_STATEMENT)
			return res;
		char *n = realloc(s->scratch, s->scratch_cap * 2);
		if (!n)
			return LOGICAL_APPLY_TOO_LONG;
		s->scratch = n;
		s->scratch_cap *= 2;
	}
}

/* Send what destination d holds of this transaction (commit: and end it). */
/* commit: the transaction opened there (its BEGIN sent) ends: COMMIT goes
 * even when nothing is left to send with it (an earlier flush took it
 * all). */
static bool flush_stmts(struct rs_source *s, int d, bool commit)
{
	struct buf *b = s->stmts[d];
	if (buf_len(b) == 0 && !commit)
		return true;
	if ((commit && buf_add(b, "COMMIT", 6) != 0) || buf_add(b, "", 1) != 0)
		return false;
	bool ok = rs_conn_query(&s->dst[d], (const char *)buf_head(b));
	buf_drain(b, buf_len(b));
	return ok;
}

static bool add_stmt(struct rs_source *s, int d, const char *sql, size_t len, bool *opened)
{
	struct buf *b = s->stmts[d];
	if (!opened[d]) {
		if (buf_add(b, "BEGIN;", 6) != 0)
			return false;
		opened[d] = true;
	}
	if (buf_add(b, sql, len) != 0 || buf_add(b, ";", 1) != 0)
		return false;
	return buf_len(b) < RS_STMT_FLUSH || flush_stmts(s, d, false);
}

/* The destinations of a change: one shard, or all of them (-1). */
static bool change_target(struct rs_source *s, const struct pgoutput_msg *m, const struct rs_rel *r, int *dst)
{
	*dst = -1;
	if (r->key_col < 0)
		return true;
	const struct pgoutput_tuple *t = m->kind == PGOUTPUT_DELETE ? &m->u.change.old_tuple : &m->u.change.new_tuple;
	if (r->key_col >= t->n || t->values[r->key_col].kind != PGOUTPUT_TEXT) {
		/* A delete whose key tuple lacks the sharding column (not part
		 * of the replica identity): deleting by key everywhere is the
		 * same, as the row is on one of them only. */
		if (m->kind == PGOUTPUT_DELETE)
			return true;
		src_fail(s, &s->repl, "a change of %s.%s without its sharding column %s", r->nspname, r->relname,
			 r->columns[r->key_col].name);
		return false;
	}
	const struct pgoutput_value *v = &t->values[r->key_col];
	char err[128];
	if (!sharding_shard_for_key(s->rs->fn, (const char *)v->data, v->len, s->rs->n_dst, dst, err, sizeof err)) {
		src_fail(s, &s->repl, "%s.%s: the sharding key does not fit: %s", r->nspname, r->relname, err);
		return false;
	}
	return true;
}

static bool on_change(struct rs_source *s, const struct pgoutput_msg *m, bool *opened)
{
	struct rs_rel *r = find_rel(s, m->u.change.relid);
	if (!r) {
		src_fail(s, &s->repl, "a change of relation %" PRIu32 " before its description", m->u.change.relid);
		return false;
	}
	if (r->table < 0) {
		src_fail(s, &s->repl, "a change of %s.%s, a table the reshard did not copy (made during the reshard?)",
			 r->nspname, r->relname);
		return false;
	}
	if (r->key_col < 0 && s->index != 0)
		return true;   /* a table kept whole: source 0's changes are every source's */
	int d;
	if (!change_target(s, m, r, &d))
		return false;
	size_t len;
	enum logical_apply_result res = write_statement(s, m, r, &len);
	if (res == LOGICAL_APPLY_NOTHING)
		return true;
	if (res != LOGICAL_APPLY_OK) {
		src_fail(s, &s->repl, "%s.%s: %s", r->nspname, r->relname, logical_apply_text(res));
		return false;
	}
	s->changes++;
	if (s->t_changes)
		s->t_changes[r->table]++;
	for (int k = 0; k < s->rs->n_dst; k++)
		if ((d < 0 || k == d) && !add_stmt(s, k, s->scratch, len, opened)) {
			src_fail(s, &s->dst[k], "out of memory, or the statements could not be sent");
			return false;
		}
	return true;
}

static bool on_truncate(struct rs_source *s, const struct pgoutput_msg *m, bool *opened)
{
	for (uint32_t i = 0; i < m->u.truncate.n_relids; i++) {
		struct rs_rel *r = find_rel(s, m->u.truncate.relids[i]);
		if (!r || r->table < 0) {
			src_fail(s, &s->repl, "TRUNCATE of a table the reshard did not copy");
			return false;
		}
		if (r->key_col >= 0) {
			src_fail(s, &s->repl, "TRUNCATE of %s.%s, a sharded table, during the reshard", r->nspname, r->relname);
			return false;
		}
		if (s->index != 0)
			continue;
		char sql[600];
		int n = snprintf(sql, sizeof sql, "TRUNCATE \"%s\".\"%s\"", r->nspname, r->relname);
		if (n < 0 || (size_t)n >= sizeof sql || strchr(r->nspname, '"') || strchr(r->relname, '"')) {
			src_fail(s, &s->repl, "TRUNCATE of a table whose name pgcat does not write");
			return false;
		}
		for (int k = 0; k < s->rs->n_dst; k++)
			if (!add_stmt(s, k, sql, (size_t)n, opened)) {
				src_fail(s, &s->dst[k], "out of memory");
				return false;
			}
	}
	return true;
}

/* The batch's end: its queries go (each with its COMMIT), and it waits in
 * the ring to be confirmed at the end of its last source transaction. */
static bool end_batch(struct rs_source *s)
{
	struct reshard *rs = s->rs;
	bool *opened = s->opened;
	if (!s->batch_open)
		return true;
	s->batch_open = false;
	s->batch_txns = 0;
	bool any = false;
	for (int d = 0; d < rs->n_dst; d++)
		if (opened[d]) {
			if (!flush_stmts(s, d, true)) {
				src_fail(s, &s->dst[d], "the transaction's statements could not be sent");
				return false;
			}
			any = true;
		}
	uint64_t end_lsn = s->batch_end_lsn;
	if (!any && s->ring_len == 0) {
		/* Nothing to wait for: confirmed at once. */
		if (end_lsn > s->confirmed)
			s->confirmed = end_lsn;
		return true;
	}
	struct rs_txn *t;
	if (s->ring_len == RESHARD_TXN_RING) {
		/* Full: the last one waits for this one's queries too. */
		t = &s->ring[(s->ring_head + s->ring_len - 1) % RESHARD_TXN_RING];
	} else {
		t = &s->ring[(s->ring_head + s->ring_len) % RESHARD_TXN_RING];
		s->ring_len++;
		memset(t->need, 0, (size_t)rs->n_dst * sizeof *t->need);
	}
	t->end_lsn = end_lsn;
	for (int d = 0; d < rs->n_dst; d++)
		if (opened[d] && s->dst[d].sent > t->need[d])
			t->need[d] = s->dst[d].sent;
	memset(opened, 0, (size_t)rs->n_dst * sizeof *opened);
	return true;
}

/* A source transaction's end: it joins the batch, which ends now if full. */
static bool on_commit(struct rs_source *s, uint64_t end_lsn)
{
	s->batch_open = true;
	s->batch_end_lsn = end_lsn;
	if (++s->batch_txns >= RESHARD_BATCH_TXNS)
		return end_batch(s);
	return true;
}

/* The stream has nothing more to read for now (bconn's on_read_done), or
 * the tick: a batch between source transactions ends. */
static void stream_idle(struct rs_source *s)
{
	if (s->state == RSS_STREAM && s->batch_open && !s->in_txn && end_batch(s))
		advance_confirmed(s);
}

static void repl_read_done(void *arg)
{
	struct rs_conn *c = arg;
	stream_idle(c->src);
}

static void on_wal(struct rs_source *s, const uint8_t *payload, size_t len)
{
	struct pgoutput_wal wal;
	if (!pgoutput_wal_parse(payload, len, &wal)) {
		src_fail(s, &s->repl, "the server sent a replication message pgcat does not read");
		return;
	}
	if (wal.kind == PGOUTPUT_WAL_KEEPALIVE) {
		if (wal.end_lsn > s->sent_end)
			s->sent_end = wal.end_lsn;
		advance_confirmed(s);
		if (wal.reply_now)
			send_status(s, false);
		return;
	}
	struct pgoutput_room room = { s->room_columns, RS_MAX_COLUMNS, s->room_new, s->room_old, RS_MAX_COLUMNS,
				      s->room_relids, RS_MAX_RELIDS };
	struct pgoutput_msg m;
	enum pgoutput_error e = pgoutput_parse(wal.data, wal.len, &room, &m);
	if (e != PGOUTPUT_OK) {
		src_fail(s, &s->repl, "a pgoutput message pgcat does not read: %s", pgoutput_error_text(e));
		return;
	}
	bool *opened = s->opened;
	bool ok = true;
	switch (m.kind) {
	case PGOUTPUT_BEGIN:
		/* (in an open batch, its destinations' transactions go on) */
		s->in_txn = true;
		break;
	case PGOUTPUT_COMMIT:
		ok = on_commit(s, m.u.commit.end_lsn);
		s->in_txn = false;
		if (ok)
			advance_confirmed(s);
		break;
	case PGOUTPUT_RELATION:
		if (!on_relation(s, &m)) {
			src_fail(s, &s->repl, "out of memory");
			return;
		}
		break;
	case PGOUTPUT_INSERT:
	case PGOUTPUT_UPDATE:
	case PGOUTPUT_DELETE:
		ok = on_change(s, &m, opened);
		break;
	case PGOUTPUT_TRUNCATE:
		ok = on_truncate(s, &m, opened);
		break;
	case PGOUTPUT_ORIGIN:
	case PGOUTPUT_TYPE:
	case PGOUTPUT_MESSAGE:
		break;
	}
	if (ok)
		src_flow(s);
}

/* ---- the copy ---- */

static struct rs_source *lane_source(struct rs_lane *l)
{
	return l->copy.src;
}

static bool split_row(void *arg, const uint8_t *row, size_t rowlen, bool header, const uint8_t *key, size_t keylen,
		      bool is_null)
{
	struct rs_lane *l = arg;
	struct rs_source *s = lane_source(l);
	if (header)
		return true;
	struct rs_table *t = &s->rs->tables[l->table];
	if (is_null) {
		src_fail(s, &l->copy, "%s.%s: a row with a NULL sharding key", t->nspname, t->relname);
		return false;
	}
	int d;
	char err[128];
	if (!sharding_shard_for_key(s->rs->fn, (const char *)key, keylen, s->rs->n_dst, &d, err, sizeof err)) {
		src_fail(s, &l->copy, "%s.%s: the sharding key does not fit: %s", t->nspname, t->relname, err);
		return false;
	}
	bconn_send(&l->dst[d].b, PqMsg_CopyData, row, rowlen);
	return true;
}

static void on_copy_data(struct rs_lane *l, const uint8_t *body, size_t len)
{
	struct rs_source *s = lane_source(l);
	struct rs_table *t = &s->rs->tables[l->table];
	t->bytes += len;
	s->t_bytes[l->table] += len;
	if (t->key_col < 0) {
		for (int d = 0; d < s->rs->n_dst; d++)
			bconn_send(&l->dst[d].b, PqMsg_CopyData, body, len);
		t->rows++;
		s->t_rows[l->table]++;
	} else {
		uint64_t before = l->split.rows;
		enum copysplit_result r = copysplit_feed(&l->split, body, len, split_row, l);
		t->rows += l->split.rows - before;
		s->t_rows[l->table] += l->split.rows - before;
		if (r != COPYSPLIT_OK && r != COPYSPLIT_STOPPED) {
			src_fail(s, &l->copy, "%s.%s: %s", t->nspname, t->relname, copysplit_strerror(r));
			return;
		}
	}
	src_flow(s);
}

static bool quoted_name(char *out, size_t cap, const struct rs_table *t)
{
	int n = snprintf(out, cap, "%s (%s)", t->qname, t->columns);
	return n > 0 && (size_t)n < cap;
}

/* The lane takes the source's next table (none left: it rests). */
static void lane_next_table(struct rs_lane *l)
{
	struct rs_source *s = lane_source(l);
	struct reshard *rs = s->rs;
	if (l->split_on) {
		copysplit_free(&l->split);
		l->split_on = false;
	}
	while (s->next_table < rs->n_tables && rs->tables[s->next_table].key_col < 0 && s->index != 0)
		s->next_table++;   /* kept whole: source 0 copies it */
	if (s->next_table >= rs->n_tables) {
		l->busy = false;
		return;
	}
	l->table = s->next_table++;
	l->busy = true;
	struct rs_table *t = &rs->tables[l->table];
	size_t cap = strlen(t->columns) + strlen(t->qname) + 64;
	char *name = malloc(cap), *sql = malloc(cap + 32);
	if (!name || !sql || !quoted_name(name, cap, t)) {
		free(name);
		free(sql);
		src_fail(s, NULL, "%s.%s: out of memory, or a name pgcat does not write", t->nspname, t->relname);
		return;
	}
	if (t->key_col >= 0) {
		struct copysplit_options o;
		copysplit_defaults(&o, COPYSPLIT_TEXT);
		o.key_column = (unsigned)t->key_col;
		copysplit_init(&l->split, &o);
		l->split_on = true;
	}
	l->copy_ended = false;
	snprintf(sql, cap + 32, "COPY %s FROM STDIN", name);
	for (int d = 0; d < rs->n_dst; d++)
		if (!rs_source_send(s, &l->dst[d], sql))
			goto out;
	snprintf(sql, cap + 32, "COPY %s TO STDOUT", name);
	(void)rs_source_send(s, &l->copy, sql);
out:
	free(name);
	free(sql);
}

static void copy_ended(struct rs_lane *l)
{
	struct rs_source *s = lane_source(l);
	if (l->split_on) {
		struct rs_table *t = &s->rs->tables[l->table];
		uint64_t before = l->split.rows;
		enum copysplit_result r = copysplit_finish(&l->split, split_row, l);
		t->rows += l->split.rows - before;
		s->t_rows[l->table] += l->split.rows - before;
		if (r != COPYSPLIT_OK && r != COPYSPLIT_END) {
			src_fail(s, &l->copy, "%s.%s: %s", t->nspname, t->relname, copysplit_strerror(r));
			return;
		}
	}
	l->copy_ended = true;
	for (int d = 0; d < s->rs->n_dst; d++)
		bconn_send(&l->dst[d].b, PqMsg_CopyDone, NULL, 0);
}

/* Each lane whose table is in (its COPY answered on both sides) takes
 * the next one. true: every lane rests, the copy is over. */
static bool lanes_step(struct rs_source *s)
{
	struct reshard *rs = s->rs;
	bool all_rest = true;
	for (int k = 0; k < RESHARD_COPY_LANES && s->state == RSS_COPY; k++) {
		struct rs_lane *l = &s->lanes[k];
		if (l->busy && l->copy_ended && rs_conn_idle(&l->copy) && lane_dst_idle(s, l)) {
			struct rs_table *t = &rs->tables[l->table];
			if (++t->sources_done == (t->key_col < 0 ? 1 : rs->n_src))
				rs->tables_copied++;
			rs->ev->publish(rs);
			lane_next_table(l);
		}
		if (l->busy)
			all_rest = false;
	}
	return all_rest && s->state == RSS_COPY;
}

static bool lanes_copy_idle(const struct rs_source *s)
{
	for (int k = 0; k < RESHARD_COPY_LANES; k++)
		if (!rs_conn_idle(&s->lanes[k].copy))
			return false;
	return true;
}

static bool lanes_send(struct rs_source *s, const char *sql)
{
	for (int k = 0; k < RESHARD_COPY_LANES; k++)
		if (!rs_source_send(s, &s->lanes[k].copy, sql))
			return false;
	return true;
}

/* ---- steps ---- */

static void start_stream(struct rs_source *s)
{
	char sql[256];
	snprintf(sql, sizeof sql,
		 "START_REPLICATION SLOT \"%s\" LOGICAL 0/0 (proto_version '1', publication_names '\"%s\"')", s->slot,
		 s->rs->publication);
	s->state = RSS_START;
	(void)rs_source_send(s, &s->repl, sql);
}

/* The next step, when the one under way has ended (every query answered). */
static void src_step(struct rs_source *s)
{
	struct reshard *rs = s->rs;
	if (rs->phase == RESHARD_FAILED || s->state == RSS_STOPPED || rs->controls_only)
		return;
	switch (s->state) {
	case RSS_CONNECT: {
		if (bconn_state(&s->ctl.b) != BCONN_READY || bconn_state(&s->repl.b) != BCONN_READY)
			return;
		for (int d = 0; d < rs->n_dst; d++)
			if (bconn_state(&s->dst[d].b) != BCONN_READY)
				return;
		for (int k = 0; !rs->resume_stream && k < RESHARD_COPY_LANES; k++) {
			if (bconn_state(&s->lanes[k].copy.b) != BCONN_READY)
				return;
			for (int d = 0; k > 0 && d < rs->n_dst; d++)
				if (bconn_state(&s->lanes[k].dst[d].b) != BCONN_READY)
					return;
		}
		s->state = RSS_PREP;
		/* A walsender still holding the slot (pgcat was killed: its
		 * server has not noticed yet) is ended first, and waited for:
		 * the slot is taken again, or dropped for a copy that starts
		 * again. */
		char sql[1400];
		snprintf(sql, sizeof sql,
			 "SELECT pg_catalog.pg_terminate_backend(active_pid, 10000) FROM pg_catalog.pg_replication_slots "
			 "WHERE slot_name = '%s' AND active_pid IS NOT NULL; "
			 "%s%s%s"
			 "SELECT pg_catalog.current_setting('server_encoding')",
			 s->slot,
			 rs->resume_stream ? "" : "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM "
						  "pg_catalog.pg_replication_slots WHERE slot_name = '",
			 rs->resume_stream ? "" : s->slot, rs->resume_stream ? "" : "'; ");
		(void)rs_source_send(s, &s->ctl, sql);
		return;
	}
	case RSS_PREP:
		if (!rs_conn_idle(&s->ctl) || !all_dst_idle(s))
			return;
		if (!s->encoding[0]) {
			if (!s->ctl.have_answer || strchr(s->ctl.answer, '\'')) {
				src_fail(s, &s->ctl, "the server did not tell its encoding");
				return;
			}
			if (strlen(s->ctl.answer) >= sizeof s->encoding) {
				src_fail(s, &s->ctl, "the server's encoding name is too long");
				return;
			}
			memcpy(s->encoding, s->ctl.answer, strlen(s->ctl.answer) + 1);
			/* The sessions a killed pgcat left on a new shard may still
			 * run what it sent them: ended, and waited for, before
			 * anything is applied again (a late commit there would
			 * overwrite what the replay applies). Then the destinations
			 * read values as the source writes them. */
			char sql[1024];
			snprintf(sql, sizeof sql,
				 "SELECT pg_catalog.pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_stat_activity "
				 "WHERE datname = pg_catalog.current_database() AND application_name LIKE 'pgcat reshard %%' "
				 "AND application_name <> '%s' AND pid <> pg_catalog.pg_backend_pid(); "
				 "SET client_encoding = '%s'; SET DateStyle = ISO; SET IntervalStyle = postgres; "
				 "SET extra_float_digits = 3; SET session_replication_role = replica; "
				 "SET statement_timeout = 0; SET lock_timeout = 0; SET idle_in_transaction_session_timeout = 0; "
				 "SET idle_session_timeout = 0",
				 rs->app_name, s->encoding);
			for (int d = 0; d < rs->n_dst; d++)
				if (!rs_source_send(s, &s->dst[d], sql))
					return;
			for (int k = 1; !rs->resume_stream && k < RESHARD_COPY_LANES; k++)
				for (int d = 0; d < rs->n_dst; d++)
					if (!rs_source_send(s, &s->lanes[k].dst[d], sql))
						return;
			if (!rs->resume_stream) {
				snprintf(sql, sizeof sql,
					 "SET client_encoding = '%s'; SET DateStyle = ISO; SET IntervalStyle = postgres; "
					 "SET extra_float_digits = 3; SET statement_timeout = 0; "
					 "SET idle_in_transaction_session_timeout = 0; SET idle_session_timeout = 0",
					 s->encoding);
				if (!lanes_send(s, sql))
					return;
			}
			return;
		}
		if (!rs->resume_stream && !lanes_copy_idle(s))
			return;
		s->state = RSS_WAIT_SCHEMA;
		rs->ev->progressed(rs);
		return;
	case RSS_PUBLISH:
		if (!rs_conn_idle(&s->ctl))
			return;
		s->state = RSS_SLOT;
		{
			char sql[200];
			snprintf(sql, sizeof sql, "CREATE_REPLICATION_SLOT \"%s\" LOGICAL pgoutput EXPORT_SNAPSHOT", s->slot);
			(void)rs_source_send(s, &s->repl, sql);
		}
		return;
	case RSS_SLOT:
		if (!rs_conn_idle(&s->repl))
			return;
		if (!s->snapshot[0] || strspn(s->snapshot, "0123456789ABCDEFabcdef-") != strlen(s->snapshot)) {
			src_fail(s, &s->repl, "CREATE_REPLICATION_SLOT gave no snapshot pgcat can use");
			return;
		}
		s->state = RSS_SNAPSHOT;
		{
			char sql[300];
			/* Every lane in the same snapshot (imported before the
			 * replication connection runs anything else). */
			snprintf(sql, sizeof sql,
				 "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT '%s'", s->snapshot);
			(void)lanes_send(s, sql);
		}
		return;
	case RSS_SNAPSHOT:
		if (!lanes_copy_idle(s))
			return;
		s->state = RSS_COPY;
		s->next_table = 0;
		for (int k = 0; k < RESHARD_COPY_LANES && s->state == RSS_COPY; k++)
			lane_next_table(&s->lanes[k]);
		if (s->state == RSS_COPY && lanes_step(s)) {
			s->state = RSS_COPY_COMMIT;
			(void)lanes_send(s, "COMMIT");
		}
		return;
	case RSS_COPY:
		if (lanes_step(s)) {
			s->state = RSS_COPY_COMMIT;
			(void)lanes_send(s, "COMMIT");
		}
		return;
	case RSS_COPY_COMMIT:
		if (!lanes_copy_idle(s))
			return;
		s->stopping = true;
		for (int k = 0; k < RESHARD_COPY_LANES; k++) {
			bconn_close(&s->lanes[k].copy.b, true);
			for (int d = 0; k > 0 && d < rs->n_dst; d++)
				bconn_close(&s->lanes[k].dst[d].b, true);
		}
		s->stopping = false;
		start_stream(s);
		return;
	case RSS_WAIT_SCHEMA:
	case RSS_START:
	case RSS_STREAM:
	case RSS_STOPPED:
		return;
	}
}

/* ---- connection events ---- */

static void conn_ready(void *arg)
{
	struct rs_conn *c = arg;
	src_step(c->src);
}

static void conn_down(void *arg, const char *why)
{
	struct rs_conn *c = arg;
	struct rs_source *s = c->src;
	if (s->stopping || s->state == RSS_STOPPED)
		return;
	src_fail(s, c, "%s", why);
}

static bool conn_message(void *arg, uint8_t type, const uint8_t *body, size_t len)
{
	struct rs_conn *c = arg;
	struct rs_source *s = c->src;
	switch (type) {
	case PqMsg_ErrorResponse: {
		struct proto_error_fields e;
		const char *m = proto_parse_error(body, len, &e) && e.message ? e.message : "error";
		src_fail(s, c, "%s%s%s", e.sqlstate ? e.sqlstate : "", e.sqlstate ? ": " : "", m);
		return true;
	}
	case PqMsg_ReadyForQuery:
		c->done++;
		if (c->role == RSC_DST && s->state >= RSS_START)
			advance_confirmed(s);
		if (c->role == RSC_CTL && s->asking_lsn && rs_conn_idle(c)) {
			s->asking_lsn = false;
			unsigned hi, lo;
			if (c->have_answer && sscanf(c->answer, "%X/%X", &hi, &lo) == 2)
				s->server_end = ((uint64_t)hi << 32) | lo;
		}
		if (c->role == RSC_CTL && s->reading_seqs && rs_conn_idle(c))
			s->reading_seqs = false;
		if (c->role == RSC_CTL && s->counting_tables && rs_conn_idle(c)) {
			s->counting_tables = false;
			char *end = NULL;
			long long n = c->have_answer ? strtoll(c->answer, &end, 10) : -1;
			s->tables_now = end && end != c->answer && *end == '\0' ? n : -1;
		}
		if (c->role == RSC_CTL && s->asking_target && rs_conn_idle(c)) {
			s->asking_target = false;
			unsigned hi, lo;
			if (!c->have_answer || sscanf(c->answer, "%X/%X", &hi, &lo) != 2) {
				src_fail(s, c, "pg_logical_emit_message() gave no position");
				return true;
			}
			s->target = s->stale_target ? 0 : ((uint64_t)hi << 32) | lo;
			s->stale_target = false;
			advance_confirmed(s);
		}
		src_step(s);
		if (rs_conn_idle(c) && (c->role == RSC_CTL || s->state == RSS_WAIT_SCHEMA))
			s->rs->ev->progressed(s->rs);
		return true;
	case PqMsg_DataRow: {
		const char *v;
		int32_t vl;
		if (c->role == RSC_CTL && s->reading_seqs) {
			if (!rs_seq_row(s->rs, body, len))
				src_fail(s, c, "a sequence row pgcat does not read");
			return true;
		}
		if (c->role == RSC_CTL && s->rs->listing_tables && s->index == 0) {
			if (!rs_schema_table_row(s->rs, body, len))
				src_fail(s, c, "a table list row pgcat does not read");
			return true;
		}
		if (c->role == RSC_REPL && s->state == RSS_SLOT && rs_datarow_col(body, len, 2, &v, &vl) && v && vl > 0 &&
		    (size_t)vl < sizeof s->snapshot) {
			memcpy(s->snapshot, v, (size_t)vl);
			s->snapshot[vl] = '\0';
		}
		if (rs_datarow_col(body, len, 0, &v, &vl) && v && vl >= 0 && (size_t)vl < sizeof c->answer) {
			memcpy(c->answer, v, (size_t)vl);
			c->answer[vl] = '\0';
			c->have_answer = true;
		}
		return true;
	}
	case PqMsg_CopyData:
		if (c->role == RSC_COPY && s->state == RSS_COPY && c->lane && c->lane->busy)
			on_copy_data(c->lane, body, len);
		else if (c->role == RSC_REPL && c->copy_both)
			on_wal(s, body, len);
		else
			return false;
		return true;
	case PqMsg_CopyDone:
		if (c->role == RSC_COPY && s->state == RSS_COPY && c->lane && c->lane->busy) {
			copy_ended(c->lane);
			return true;
		}
		if (c->role == RSC_REPL && c->copy_both) {
			src_fail(s, c, "the server ended the change stream");
			return true;
		}
		return false;
	case PqMsg_CopyOutResponse:
		return c->role == RSC_COPY;
	case PqMsg_CopyInResponse:
		c->copy_in = true;
		return c->role == RSC_DST;
	case PqMsg_CopyBothResponse:
		if (c->role != RSC_REPL)
			return false;
		c->copy_both = true;
		s->state = RSS_STREAM;
		send_status(s, true);
		s->rs->ev->progressed(s->rs);
		return true;
	case PqMsg_RowDescription:
	case PqMsg_CommandComplete:
	case PqMsg_EmptyQueryResponse:
	case PqMsg_NoticeResponse:
	case PqMsg_ParameterStatus:
		return true;
	default:
		return false;
	}
}

static void conn_drain(void *arg)
{
	struct rs_conn *c = arg;
	src_flow(c->src);
}

/* ---- life ---- */

static void conn_init(struct rs_source *s, struct rs_conn *c, enum rs_conn_role role, int dst,
		      const struct rs_endpoint *ep)
{
	memset(c, 0, sizeof *c);
	c->src = s;
	c->role = role;
	c->dst = dst;
	c->ep = ep;
	bconn_init(&c->b, s->rs->w, conn_ready, conn_message, conn_down, c);
	c->b.on_drain = conn_drain;
	if (role == RSC_REPL) {
		c->b.replication = "database";
		c->b.on_read_done = repl_read_done;
	}
}

bool rs_source_init(struct reshard *rs, struct rs_source *s, int index)
{
	memset(s, 0, sizeof *s);
	s->rs = rs;
	s->index = index;
	rs_slot_name(s->slot, sizeof s->slot, rs->pool, index);
	conn_init(s, &s->ctl, RSC_CTL, -1, &rs->src_ep[index]);
	conn_init(s, &s->repl, RSC_REPL, -1, &rs->src_ep[index]);
	s->dst = calloc((size_t)rs->n_dst, sizeof *s->dst);
	s->stmts = calloc((size_t)rs->n_dst, sizeof *s->stmts);
	s->opened = calloc((size_t)rs->n_dst, sizeof *s->opened);
	s->room_columns = calloc(RS_MAX_COLUMNS, sizeof *s->room_columns);
	s->room_new = calloc(RS_MAX_COLUMNS, sizeof *s->room_new);
	s->room_old = calloc(RS_MAX_COLUMNS, sizeof *s->room_old);
	s->room_relids = calloc(RS_MAX_RELIDS, sizeof *s->room_relids);
	if (!s->dst || !s->stmts || !s->opened || !s->room_columns || !s->room_new || !s->room_old || !s->room_relids)
		return false;
	for (int d = 0; d < rs->n_dst; d++) {
		conn_init(s, &s->dst[d], RSC_DST, d, &rs->dst_ep[d]);
		if (!(s->stmts[d] = buf_new(4096)))
			return false;
	}
	for (int k = 0; k < RESHARD_COPY_LANES; k++) {
		struct rs_lane *l = &s->lanes[k];
		conn_init(s, &l->copy, RSC_COPY, -1, &rs->src_ep[index]);
		l->copy.lane = l;
		if (k == 0) {
			l->dst = s->dst;
			continue;
		}
		if (!(l->dst = calloc((size_t)rs->n_dst, sizeof *l->dst)))
			return false;
		l->own_dst = true;
		for (int d = 0; d < rs->n_dst; d++) {
			conn_init(s, &l->dst[d], RSC_DST, d, &rs->dst_ep[d]);
			l->dst[d].lane = l;
		}
	}
	for (size_t i = 0; i < RESHARD_TXN_RING; i++)
		if (!(s->ring[i].need = calloc((size_t)rs->n_dst, sizeof *s->ring[i].need)))
			return false;
	return true;
}

static void conn_try_open(struct rs_source *s, struct rs_conn *c)
{
	struct reshard *rs = s->rs;
	if (bconn_state(&c->b) != BCONN_CLOSED)
		return;
	if (!c->addrlen) {
		if (!dns_literal(c->ep->host, c->ep->port, &c->addr, &c->addrlen)) {
			const struct dns_entry *e = dns_lookup(rs->w->dns, c->ep->host, rs->w->cfg->general.dns_max_ttl);
			if (!e) {
				src_fail(s, c, "out of memory");
				return;
			}
			if (e->state == DNS_FAILED) {
				src_fail(s, c, "cannot resolve %s: %s", c->ep->host, e->error);
				return;
			}
			if (e->state != DNS_OK || e->n_addrs == 0) {
				c->resolving = true;
				return;   /* the next tick looks again */
			}
			memcpy(&c->addr, &e->addrs[0], sizeof c->addr);
			c->addrlen = e->addrlens[0];
			if (c->addr.ss_family == AF_INET)
				((struct sockaddr_in *)&c->addr)->sin_port = htons((uint16_t)c->ep->port);
			else if (c->addr.ss_family == AF_INET6)
				((struct sockaddr_in6 *)&c->addr)->sin6_port = htons((uint16_t)c->ep->port);
		}
	}
	c->resolving = false;
	c->sent = c->done = 0;
	if (!bconn_set_login(&c->b, rs->user, rs->password, NULL, NULL)) {
		src_fail(s, c, "out of memory");
		return;
	}
	(void)bconn_open(&c->b, &rs->profile, c->ep->host, c->ep->port, (const struct sockaddr *)&c->addr, c->addrlen,
			 c->ep->database);
}

void rs_source_open(struct rs_source *s)
{
	s->state = RSS_CONNECT;
	conn_try_open(s, &s->ctl);
	if (s->rs->controls_only)
		return;
	conn_try_open(s, &s->repl);
	for (int d = 0; d < s->rs->n_dst && s->state != RSS_STOPPED; d++)
		conn_try_open(s, &s->dst[d]);
	for (int k = 0; !s->rs->resume_stream && k < RESHARD_COPY_LANES && s->state != RSS_STOPPED; k++) {
		conn_try_open(s, &s->lanes[k].copy);
		for (int d = 0; k > 0 && d < s->rs->n_dst && s->state != RSS_STOPPED; d++)
			conn_try_open(s, &s->lanes[k].dst[d]);
	}
}

void rs_source_begin_copy(struct rs_source *s)
{
	struct reshard *rs = s->rs;
	size_t n = rs->n_tables ? rs->n_tables : 1;
	if (!s->t_rows && (!(s->t_rows = calloc(n, sizeof *s->t_rows)) || !(s->t_bytes = calloc(n, sizeof *s->t_bytes)) ||
			   !(s->t_changes = calloc(n, sizeof *s->t_changes)))) {
		src_fail(s, NULL, "out of memory");
		return;
	}
	if (rs->resume_stream) {
		start_stream(s);
		return;
	}
	/* The publication of what this source moves (source 0: every
	 * table; the others: the sharded ones, as source 0 moves the
	 * others), made afresh; then the slot. Only these tables are
	 * published: a table left out keeps its updates and deletes working
	 * on the source whatever its replica identity. */
	struct buf *b = buf_new(1024);
	bool ok = b && buf_add_printf(b, "DROP PUBLICATION IF EXISTS %s; CREATE PUBLICATION %s FOR TABLE ", rs->publication,
				      rs->publication) >= 0;
	bool first = true;
	for (size_t t = 0; ok && t < rs->n_tables; t++) {
		if (rs->tables[t].key_col < 0 && s->index != 0)
			continue;
		ok = buf_add_printf(b, "%s%s", first ? "" : ", ", rs->tables[t].qname) >= 0;
		first = false;
	}
	if (first && ok) {
		/* Nothing sharded here: a publication of nothing (the stream
		 * still carries the keepalives the cutover reads). */
		buf_drain(b, buf_len(b));
		ok = buf_add_printf(b, "DROP PUBLICATION IF EXISTS %s; CREATE PUBLICATION %s", rs->publication,
				    rs->publication) >= 0;
	}
	ok = ok && buf_add(b, "", 1) == 0;
	s->state = RSS_PUBLISH;
	if (!ok)
		src_fail(s, &s->ctl, "out of memory");
	else
		(void)rs_source_send(s, &s->ctl, (const char *)buf_head(b));
	if (b)
		buf_free(b);
}

void rs_source_tick(struct rs_source *s)
{
	if (s->state == RSS_STOPPED)
		return;
	if (s->state == RSS_CONNECT || s->rs->controls_only) {
		struct rs_conn *cs[] = { &s->ctl, &s->repl };
		for (size_t i = 0; i < 2; i++)
			if (cs[i]->resolving)
				conn_try_open(s, cs[i]);
		for (int d = 0; d < s->rs->n_dst; d++)
			if (s->dst[d].resolving)
				conn_try_open(s, &s->dst[d]);
		for (int k = 0; k < RESHARD_COPY_LANES; k++) {
			if (s->lanes[k].copy.resolving)
				conn_try_open(s, &s->lanes[k].copy);
			for (int d = 0; k > 0 && d < s->rs->n_dst; d++)
				if (s->lanes[k].dst[d].resolving)
					conn_try_open(s, &s->lanes[k].dst[d]);
		}
	}
	if (s->state == RSS_STREAM) {
		stream_idle(s);   /* (a batch left open by a stream read no more) */
		advance_confirmed(s);
		uint64_t now = s->rs->w->now_us;
		/* The lag: the source's end of WAL against what is confirmed
		 * (the stream's own positions are the decoder's, not the
		 * server's end). Twice a second. */
		if (!s->asking_lsn && !s->asking_target && !s->target && !s->reading_seqs && !s->counting_tables &&
		    rs_conn_idle(&s->ctl) &&
		    bconn_state(&s->ctl.b) == BCONN_READY && now - s->last_lsn_poll_us >= 500000) {
			s->last_lsn_poll_us = now;
			s->asking_lsn = rs_conn_query(&s->ctl, "SELECT pg_catalog.pg_current_wal_insert_lsn()");
		}
		/* Cutover: ask for keepalives, whose position tells when the
		 * stream has everything up to the target. */
		if (s->target && s->confirmed < s->target)
			send_status(s, true);
		else if (now - s->last_status_us >= RS_STATUS_EVERY_US)
			send_status(s, true);
	}
}

void rs_source_close(struct rs_source *s)
{
	s->stopping = true;
	bconn_close(&s->ctl.b, true);
	bconn_close(&s->repl.b, true);
	for (int d = 0; s->dst && d < s->rs->n_dst; d++)
		bconn_close(&s->dst[d].b, true);
	for (int k = 0; k < RESHARD_COPY_LANES; k++) {
		bconn_close(&s->lanes[k].copy.b, true);
		for (int d = 0; s->lanes[k].own_dst && d < s->rs->n_dst; d++)
			bconn_close(&s->lanes[k].dst[d].b, true);
	}
	s->stopping = false;
	s->state = RSS_STOPPED;
}

void rs_source_free(struct rs_source *s)
{
	if (!s->rs)
		return;
	bconn_release(&s->ctl.b);
	bconn_release(&s->repl.b);
	for (int k = 0; k < RESHARD_COPY_LANES; k++) {
		struct rs_lane *l = &s->lanes[k];
		bconn_release(&l->copy.b);
		for (int d = 0; l->own_dst && l->dst && d < s->rs->n_dst; d++)
			bconn_release(&l->dst[d].b);
		if (l->own_dst)
			free(l->dst);
		if (l->split_on)
			copysplit_free(&l->split);
	}
	for (int d = 0; s->dst && d < s->rs->n_dst; d++) {
		bconn_release(&s->dst[d].b);
		if (s->stmts && s->stmts[d])
			buf_free(s->stmts[d]);
	}
	free(s->dst);
	free(s->stmts);
	free(s->opened);
	for (size_t i = 0; i < RESHARD_TXN_RING; i++)
		free(s->ring[i].need);
	for (size_t i = 0; i < s->n_rels; i++)
		rel_clear(&s->rels[i]);
	free(s->rels);
	free(s->scratch);
	free(s->t_rows);
	free(s->t_bytes);
	free(s->t_changes);
	free(s->room_columns);
	free(s->room_new);
	free(s->room_old);
	free(s->room_relids);
	memset(s, 0, sizeof *s);
}
