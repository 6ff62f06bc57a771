/* SPDX-License-Identifier: MIT */
/*
 * fanout: the fan-out and its legs (include/fanout.h): the client's request
 * read, one leg per shard driving a server of that shard through the link
 * (a waiter on its pool, an end of a link), the legs' replies awaited
 * phase by phase, cancel, abort and free. What is sent and how the
 * replies are answered is each kind's: fanout_read.c (cross-shard reads),
 * fanout_write.c (split INSERTs, broadcast writes, the parked transaction),
 * fanout_copy.c (COPY FROM STDIN), fanout_batch.c (batches of Binds).
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "buf_msg.h"
#include "context.h"
#include "io.h"
#include "link.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "prepared.h"
#include "proto.h"
#include "rotation.h"
#include "route_pick.h"
#include "ryw.h"
#include "server.h"
#include "stats.h"

/* ---- the client's request ---- */

bool fanout_refuse(char *why, size_t whylen, const char *msg)
{
	snprintf(why, whylen, "cross-shard read: %s", msg);
	return false;
}

static bool add_step(struct request *r, uint8_t step)
{
	if (r->n_steps == MAX_STEPS)
		return false;
	r->steps[r->n_steps++] = step;
	return true;
}

/* Reads the request's messages. false: not one pgcat can fan out. */
bool fanout_read_request(const uint8_t *m, size_t lim, struct request *r, char *why, size_t whylen)
{
	size_t off = 0;
	memset(r, 0, sizeof *r);
	while (off + 5 <= lim) {
		uint8_t type = m[off];
		uint32_t l = proto_get_u32(m + off + 1);
		size_t total = (size_t)l + 1;
		if (l < 4 || total > lim - off)
			return fanout_refuse(why, whylen, "the request is too large to be sent to every shard");
		const uint8_t *body = m + off + 5;
		size_t blen = l - 4, b = 0;
		const char *s1, *s2;
		switch (type) {
		case PqMsg_Query:
			if (off != 0 || !proto_read_cstring(body, blen, &b, &r->query))
				return fanout_refuse(why, whylen, "malformed request");
			r->end = total;
			return true;
		case PqMsg_Parse:
			if (r->parse || r->has_bind || !proto_read_cstring(body, blen, &b, &s1) ||
			    !proto_read_cstring(body, blen, &b, &s2) || blen - b < 2 || !add_step(r, STEP_PARSE))
				return fanout_refuse(why, whylen, "only one statement per request can be sent to every shard");
			r->parse = m + off;
			r->parse_total = (uint32_t)total;
			r->parse_name = s1;
			r->parse_sql = s2;
			r->parse_types = body + b;
			r->parse_types_len = blen - b;
			break;
		case PqMsg_Bind:
			if (r->has_bind || !proto_read_cstring(body, blen, &b, &s1) || !proto_read_cstring(body, blen, &b, &s2) ||
			    !add_step(r, STEP_BIND))
				return fanout_refuse(why, whylen, "only one statement per request can be sent to every shard");
			r->has_bind = true;
			r->bind_len = blen;
			r->bind_portal = s1;
			r->bind_stmt = s2;
			r->bind_rest = body + b;
			r->bind_rest_len = blen - b;
			break;
		case PqMsg_Describe:
			if (blen < 2 || !(body[0] == 'S' || body[0] == 'P'))
				return fanout_refuse(why, whylen, "malformed Describe");
			b = 1;
			if (!proto_read_cstring(body, blen, &b, &s1))
				return fanout_refuse(why, whylen, "malformed Describe");
			if (body[0] == 'S') {
				if (r->has_bind || !r->parse || strcmp(s1, r->parse_name) != 0 || !add_step(r, STEP_DESCRIBE_STMT))
					return fanout_refuse(why, whylen, "this Describe cannot be sent to every shard");
			} else if (!r->has_bind || strcmp(s1, r->bind_portal) != 0 || !add_step(r, STEP_DESCRIBE_PORTAL)) {
				return fanout_refuse(why, whylen, "this Describe cannot be sent to every shard");
			}
			break;
		case PqMsg_Execute:
			if (!r->has_bind || r->has_execute || !proto_read_cstring(body, blen, &b, &s1) || blen - b != 4 ||
			    strcmp(s1, r->bind_portal) != 0 || !add_step(r, STEP_EXECUTE))
				return fanout_refuse(why, whylen, "only one Execute per request can be sent to every shard");
			r->max_rows = proto_get_u32(body + b);
			r->has_execute = true;
			break;
		case PqMsg_Sync:
			if (!add_step(r, STEP_SYNC))
				return fanout_refuse(why, whylen, "request too long");
			r->has_sync = true;
			r->end = off + total;
			return true;
		case PqMsg_Flush:
			r->has_flush = true;
			r->end = off + total;
			return true;
		default:
			return fanout_refuse(why, whylen, "this message cannot be sent to every shard");
		}
		off += total;
	}
	return fanout_refuse(why, whylen, "the request is too large to be sent to every shard");
}

void fanout_put_msg(struct buf *out, uint8_t type, const void *a, size_t alen, const void *b, size_t blen)
{
	uint8_t h[5] = { type };
	proto_put_u32(h + 1, (uint32_t)(4 + alen + blen));
	buf_add(out, h, 5);
	if (alen)
		buf_add(out, a, alen);
	if (blen)
		buf_add(out, b, blen);
}

void fanout_put_unnamed_parse(struct buf *out, const char *sql, size_t sql_len, const void *types, size_t types_len)
{
	uint8_t h[6] = { PqMsg_Parse };
	proto_put_u32(h + 1, (uint32_t)(4 + 1 + sql_len + 1 + types_len));
	/* h[5] = 0: the statement's empty name */
	buf_add(out, h, 6);
	buf_add(out, sql, sql_len + 1);
	if (types_len)
		buf_add(out, types, types_len);
}

/* ---- legs ---- */

/* The edges a leg's link may take (enum leg_link). */
static bool leg_edge_ok(enum leg_link from, enum leg_link to)
{
	switch (to) {
	case LEG_UNLINKED:   /* lost before use, rerouted, failed, or released at a transaction's end */
		return from == LEG_WAITING || from == LEG_SYNCING || from == LEG_READY;
	case LEG_WAITING:
		return from == LEG_UNLINKED;
	case LEG_SYNCING:
		return from == LEG_WAITING;
	case LEG_READY:
		return from == LEG_SYNCING || from == LEG_UNLINKED;   /* (UNLINKED: a server adopted, fanout_adopt_leg) */
	case LEG_GONE:
		return from != LEG_GONE;
	}
	return false;
}

static void leg_set(struct fanout_leg *leg, enum leg_link to)
{
	assert(leg_edge_ok(leg->link, to));
	leg->link = to;
}

/* The leg's server goes back to its pool (it finishes, cancels or rolls
 * back what runs there, as for a client that went away), or its wait ends. */
static void leg_let_go(struct fanout_leg *leg)
{
	switch (leg->link) {
	case LEG_WAITING:
		pool_cancel_wait(&leg->wait);
		break;
	case LEG_SYNCING:
	case LEG_READY:
		pool_client_gone(leg->end.server);
		break;
	case LEG_UNLINKED:
	case LEG_GONE:
		break;
	}
	if (leg->link != LEG_GONE)
		leg_set(leg, LEG_GONE);
}

static void leg_close_io(struct fanout_leg *leg)
{
	if (!leg->io_open)
		return;
	leg->io_open = false;
	io_close(&leg->io);
}

static void fanout_release(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct fanout *fo = arg;
	if (fo->result)
		buf_free(fo->result);
	if (fo->split_ready)
		copysplit_free(&fo->split);
	free(fo->copy_in_response);
	free(fo->error);
	free(fo->parse_msg);
	free(fo);
}

void fanout_portal_free(struct fanout_portal *xp)
{
	if (!xp)
		return;
	struct fanout *fo = xp->fo;
	xp->fo = NULL;
	free(xp);
	if (fo)
		fanout_free(fo);   /* (its read's portal is this one: not freed twice) */
}

struct client_xshard *fanout_xshard(struct client *c)
{
	if (!c->xshard)
		c->xshard = calloc(1, sizeof *c->xshard);
	return c->xshard;
}

void fanout_portal_drop(struct client *c)
{
	if (!c->xshard)
		return;
	fanout_portal_free(c->xshard->portal);
	c->xshard->portal = NULL;
}

struct fanout *fanout_new_write(struct client *c, enum fanout_kind kind, enum fanout_phase phase, int n_legs,
				void (*phase_done)(struct fanout *fo))
{
	struct fanout *fo = calloc(1, sizeof *fo + (size_t)n_legs * sizeof fo->legs[0]);
	if (!fo || !(fo->result = buf_new(BUF_SMALL))) {
		free(fo);
		return NULL;
	}
	fo->c = c;
	fo->layout_shards = c->pool->cpool->n_shards;
	fo->kind = kind;
	fo->phase = phase;
	fo->phase_done = phase_done;
	return fo;
}

/* Lets the legs' servers go; the memory goes at the next loop turn, since
 * this may run inside a leg's reply callback (its io is read after). */
void fanout_free(struct fanout *fo)
{
	if (fo->on_free)
		fo->on_free(fo);   /* (a two-phase commit under way: fanout_2pc.c; a read: fanout_read.c) */
	free(fo->req_copy);
	fo->req_copy = NULL;
	free(fo->batch_leg);
	free(fo->batch_idx);
	fo->batch_leg = NULL;
	fo->batch_idx = NULL;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		if (!leg->fo)
			continue;   /* never opened */
		free(leg->unit_len);
		free(leg->error);
		leg->unit_len = NULL;
		leg->error = NULL;
		leg_let_go(leg);
		leg_close_io(leg);
		params_clear(&leg->params);
		if (leg->req)
			buf_free(leg->req);
		if (leg->sent)
			buf_free(leg->sent);
		if (leg->rows)
			buf_free(leg->rows);
		leg->req = leg->sent = leg->rows = NULL;
	}
	const struct timeval now = { 0, 0 };
	if (event_base_once(fo->c->w->base, -1, EV_TIMEOUT, fanout_release, fo, &now) != 0)
		log_warning("cross-shard read: could not schedule a release (%zu bytes kept)", sizeof *fo);
}

/* ---- read_your_writes = lsn: the WAL position of a leg's commit ---- */

/* A separate Query rather than "COMMIT; SELECT ...": COMMIT PREPARED
 * cannot run in the implicit transaction of a multi-statement query. The
 * server stays with the leg between the two (one is still owed), so the
 * position is that of the primary that just committed; and it is the
 * insert position, for the reason server.c asks that one for a client's
 * own server (doc/replicas.md). */
void fanout_ask_wal(struct fanout *fo, struct fanout_leg *leg)
{
	const struct client *c = fo->c;
	if (c->pool->cpool->read_your_writes != READ_YOUR_WRITES_LSN || !pool_mode_per_transaction(c->pool->mode))
		return;   /* (in session mode reads stay on the client's server: nothing to steer) */
	/* A READ ONLY spread transaction wrote nowhere but where it began,
	 * before it turned read only (SET TRANSACTION READ ONLY may follow a
	 * write), and only if it began on a primary. */
	if (fo->txn_read_only &&
	    (leg->shard != fo->txn_home || !leg->end.server || !rotation_takes_writes(leg->end.server->sp)))
		return;
	struct srvpool *all[2];
	if (rotation_shard_servers(c->pool, leg->shard, all, 2) < 2)
		return;   /* a shard of one server: its reads have nowhere else to go (as route.c) */
	static const char q[] = RYW_POSITION_QUERY;
	fanout_put_msg(fanout_leg_out(leg), PqMsg_Query, q, sizeof q, NULL, 0);
	leg->ready_needed++;
	leg->wal_asked = true;
}

/* A CommandComplete saying the commit happened: "COMMIT" or "COMMIT
 * PREPARED" (a transaction that had failed answers COMMIT with
 * "ROLLBACK"). */
static bool commit_tag(const uint8_t *msg, size_t total)
{
	static const char plain[] = "COMMIT", prepared[] = "COMMIT PREPARED";
	return (total - 5 == sizeof plain && memcmp(msg + 5, plain, sizeof plain) == 0) ||
	       (total - 5 == sizeof prepared && memcmp(msg + 5, prepared, sizeof prepared) == 0);
}

/* The leg's reply to its commit and the position query: the commit's part
 * (up to its ReadyForQuery) is left for the kind, the position's is taken
 * off. A commit that happened is told to the client with its position
 * (known, or not when the query failed); one whose outcome is not known
 * (the server lost meanwhile) as unknown; a failed one (an error, or
 * "ROLLBACK") not at all: nothing was written. */
static void take_position(struct fanout *fo, struct fanout_leg *leg)
{
	leg->wal_asked = false;
	struct buf *in = leg->io_open ? leg->io.in : NULL;
	struct fanout_walk w;
	const uint8_t *msg;
	size_t total, cut = 0;
	bool in_commit = true, failed = false, committed = false, known = false;
	uint64_t lsn = 0;
	fanout_walk_start(&w, leg);
	while (fanout_walk_next(&w, &msg, &total)) {
		if (in_commit) {
			if (msg[0] == PqMsg_ErrorResponse)
				failed = true;
			else if (msg[0] == PqMsg_CommandComplete)
				committed = commit_tag(msg, total);
			else if (msg[0] == PqMsg_ReadyForQuery) {
				in_commit = false;
				cut = w.off;
			}
		} else if (msg[0] == PqMsg_DataRow) {
			known = ryw_position_row(msg + 5, total - 5, &lsn);
		} else if (msg[0] == PqMsg_ErrorResponse) {
			known = false;
		}
	}
	if (in && cut > 0 && cut < buf_len(in)) {
		/* the commit's part alone stays, as if nothing followed it */
		buf_truncate(in, cut);
	}
	if (in)
		leg->scanned = buf_len(in);
	struct client *c = fo->c;
	if (committed && !failed)
		fanout_ev(c)->wrote(c, leg->shard, known, lsn);
	else if (leg->lost || leg->too_big)
		fanout_ev(c)->wrote(c, leg->shard, false, 0);   /* it may have committed */
}

/* Every leg's part of the phase is in: the positions of commits taken,
 * then the kind's end of the phase. */
static void phase_over(struct fanout *fo)
{
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].wal_asked)
			take_position(fo, &fo->legs[i]);
	fo->phase_done(fo);   /* the kind's (fanout_read.c, fanout_write.c, ...) */
}

static void leg_done(struct fanout_leg *leg)
{
	if (leg->done)
		return;
	leg->done = true;
	struct fanout *fo = leg->fo;
	if (++fo->n_done == fo->n_legs)
		phase_over(fo);
}

/* What a leg may hold of a reply it reads whole (a write's, a batch's, a
 * statement of a transaction over several shards): cross_shard_max_memory,
 * as a cross-shard read's kept rows, and never more than FANOUT_REPLY_MAX.
 * Past it the leg fails with 54000 (SPEC §10: bounded by a setting). */
static size_t leg_reply_max(const struct fanout *fo)
{
	int64_t v = fo->c->w->cfg->general.cross_shard_max_memory;
	return v > 0 && (uint64_t)v < FANOUT_REPLY_MAX ? (size_t)v : FANOUT_REPLY_MAX;
}

/* Walks the reply's new messages. true: the leg's part of this phase is
 * complete (its last ReadyForQuery, or CopyInResponse when that is
 * awaited), or it failed (lost, too big). Calls nothing. */
static bool leg_scan(struct fanout_leg *leg)
{
	struct buf *in = leg->io.in;
	size_t have = in ? buf_len(in) : 0;
	while (have - leg->scanned >= 5) {
		uint8_t h[5];
		if (!buf_copy_at(in, leg->scanned, h, 5))
			break;
		uint32_t l = proto_get_u32(h + 1);
		if (l < 4) {
			leg->lost = true;
			return true;
		}
		if ((size_t)l + 1 > have - leg->scanned)
			break;
		leg->scanned += (size_t)l + 1;
		if (h[0] == PqMsg_ReadyForQuery) {
			if (leg->ready_needed > 0) {
				if (--leg->ready_needed == 0 && !leg->want_copy_in)
					return true;
			} else if (leg->want_copy_in) {
				return true;   /* the COPY failed: its ReadyForQuery */
			}
		} else if (h[0] == PqMsg_CopyInResponse && leg->want_copy_in && leg->ready_needed == 0) {
			return true;
		}
	}
	if (have > leg_reply_max(leg->fo)) {
		leg->too_big = true;
		return true;
	}
	return false;
}

/* The server's replies of this loop turn are in (the loopback). */
static void leg_read_cb(struct io *io, void *arg)
{
	(void)io;
	struct fanout_leg *leg = arg;
	if (leg->fo->leg_input) {
		leg->fo->leg_input(leg);   /* read as they come (a cross-shard read) */
		return;
	}
	if (leg->done || !leg_scan(leg))
		return;
	if (leg->too_big) {
		/* no more of it: the server finishes (cancels) without the leg */
		leg_let_go(leg);
		leg_close_io(leg);
	}
	leg_done(leg);   /* may end the fan-out: leg is not to be touched after */
}

static void leg_event_cb(struct io *io, enum io_event what, int err, void *arg)
{
	(void)io;   /* a loopback reports no events */
	(void)what;
	(void)err;
	(void)arg;
}

/* What waited in the loopback's output was handed over: a server paused
 * for it (its end's out_budget, fanout_leg_stream) is read again. */
static void leg_drain_cb(struct io *io, void *arg)
{
	(void)io;
	struct fanout_leg *leg = arg;
	if (leg->link == LEG_READY || leg->link == LEG_SYNCING)
		link_resume(leg->end.server);
}

static const struct io_ops leg_io_ops = { leg_read_cb, leg_drain_cb, leg_event_cb, FANOUT_READ_WINDOW / 2,
					   offsetof(struct fanout_leg, io) };

/* The phase's request cannot run on this shard: its reply is this error
 * and the ReadyForQuery messages awaited, as a server would have answered
 * (through the loopback, so it is read at the flush like any reply). */
static void leg_fail_request(struct fanout_leg *leg, const char *sqlstate, const char *message)
{
	if (leg->req)
		buf_drain(leg->req, buf_len(leg->req));
	if (!leg->io_open)
		return;
	uint8_t storage[640];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_error(&pb, "ERROR", sqlstate, message);
	struct buf *out = io_out(&leg->io);
	if (!pb.failed)
		buf_add(out, pb.data, pb.len);
	int rfq = leg->ready_needed + (leg->want_copy_in ? 1 : 0);
	for (int i = 0; i < rfq; i++)
		buf_add(out, "Z\0\0\0\5I", 6);
}

static void leg_push(struct fanout_leg *leg);

/* The leg's server for its queued request: picked as for a client of the
 * same session pinned to the shard (route_pick_leg), and checked out. */
static void leg_checkout(struct fanout_leg *leg)
{
	struct client *c = leg->fo->c;
	const char *sql = "";
	size_t len = 0;
	uint8_t h[5];
	if (buf_copyout(leg->req, h, 5) == 5) {
		size_t total = (size_t)proto_get_u32(h + 1) + 1;
		if (total > 5 && total <= buf_len(leg->req) &&
		    (h[0] == PqMsg_Query || h[0] == PqMsg_Parse)) {
			const uint8_t *m = buf_pullup(leg->req, total);
			size_t off = 0;
			const char *name;
			if (h[0] == PqMsg_Query || proto_read_cstring(m + 5, total - 5, &off, &name)) {
				sql = (const char *)m + 5 + off;
				len = strnlen(sql, total - 5 - off);
			}
		}
	}
	bool no_writer;
	struct srvpool *sp = route_pick_leg(c, sql, len, leg->shard, &no_writer);
	if (no_writer) {
		leg_fail_request(leg, "25006", "cannot execute a write: the configured primary is in recovery");
		return;
	}
	leg->wait.client_id = c->id;
	leg_set(leg, LEG_WAITING);
	(void)pool_checkout(sp, &leg->wait);   /* granted, failed or queued: its events */
}

/* The queued requests go to the server (whole messages: the link counts
 * what each one owes), or a server is found for them first. */
static void leg_push(struct fanout_leg *leg)
{
	size_t n = leg->req ? buf_len(leg->req) : 0;
	if (n == 0)
		return;
	switch (leg->link) {
	case LEG_GONE:
		buf_drain(leg->req, n);
		return;
	case LEG_UNLINKED:
		leg_checkout(leg);
		return;
	case LEG_WAITING:
	case LEG_SYNCING:
		return;   /* sent once the server is ready */
	case LEG_READY:
		break;
	}
	struct server *s = leg->end.server;
	struct worker *w = leg->fo->c->w;
	if (leg->fo->kind == FANOUT_READ && !leg->retried) {
		if (!leg->sent)
			leg->sent = buf_new(BUF_SMALL);
		if (leg->sent)
			buf_add(leg->sent, buf_head(leg->req), n);
	}
	size_t off = 0;
	while (n - off >= 5) {
		uint8_t h[5];
		if (!buf_copy_at(leg->req, off, h, 5))
			break;
		txn_frontend(&s->txn, h[0], w->now_us);
		off += (size_t)proto_get_u32(h + 1) + 1;
	}
	buf_move_to(leg->req, server_output(s), n);
	stats_add(leg->fo->c->pool->stats, STAT_RECEIVED, n);
}

void fanout_send(struct fanout *fo)
{
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].fo)
			leg_push(&fo->legs[i]);
}

bool fanout_leg_full(const struct fanout_leg *leg)
{
	if (leg->req && buf_len(leg->req) > COPY_LEG_HIGH)
		return true;
	return leg->link == LEG_READY && server_output_full(leg->end.server);
}

/* A new phase: every live leg's requests go out, and it waits for its
 * replies again (some may be buffered already: an error during COPY).
 * Ends with fo->phase_done when all are in: the caller must not touch fo
 * after this. */
void fanout_begin_wait(struct fanout *fo)
{
	fanout_send(fo);
	fo->n_done = 0;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		if (!leg->io_open || leg->lost || leg->too_big) {
			leg->done = true;
			fo->n_done++;
			continue;
		}
		leg->done = leg_scan(leg);
		fo->n_done += leg->done;
	}
	if (fo->n_done == fo->n_legs)
		phase_over(fo);
}

void fanout_wait_one(struct fanout *fo, struct fanout_leg *leg)
{
	fanout_send(fo);
	fo->n_done = 0;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *l = &fo->legs[i];
		if (l == leg)
			continue;
		l->done = true;
		fo->n_done++;
	}
	if (!leg->io_open || leg->lost || leg->too_big)
		leg->done = true;
	else
		leg->done = leg_scan(leg);
	fo->n_done += leg->done;
	if (fo->n_done == fo->n_legs)
		phase_over(fo);
}

/* ---- the events of a leg's end of its link (client_end.h) ---- */

static struct fanout_leg *leg_of_end(struct client_end *end) { return LIST_OWNER(end, struct fanout_leg, end); }

static void leg_ready(struct client_end *end, bool begin_ran)
{
	(void)begin_ran;   /* a leg sends its BEGIN itself */
	struct fanout_leg *leg = leg_of_end(end);
	end->retry_skip = 0;   /* taken by the server (server_link) */
	leg_set(leg, LEG_READY);
	leg_push(leg);
}

/* A read whose replica died before answering goes to another server of
 * the shard, once, as a client's read would (SPEC §4). */
static bool leg_may_retry(const struct fanout_leg *leg, const struct server *s)
{
	const struct pool *p = s->sp->pool;
	return leg->fo->kind == FANOUT_READ && !leg->retried && leg->sent && !s->txn.req_data && p->n_targets > 1 &&
	       pool_mode_per_transaction(p->mode) && s->sp->role != SERVER_ROLE_PRIMARY;
}

static void leg_lost(struct client_end *end, struct server *s, bool untouched, const char *sqlstate,
		     const char *message)
{
	struct fanout_leg *leg = leg_of_end(end);
	(void)link_detach(s);
	if (untouched || leg_may_retry(leg, s)) {
		/* Nothing of the request ran there (or a read, to replay): it goes
		 * to another server of the shard. */
		rotation_server_failed(s->sp, message);
		if (!untouched) {
			log_info("C-%llu: shard %d's server lost before answering (%s); read sent again elsewhere",
				 (unsigned long long)leg->fo->c->id, leg->shard, message);
			leg->retried = true;
			end->retry_skip = s->txn.req_msgs;   /* what the loopback got already */
			/* (out of memory: the copy stays behind, the leg times out) */
			if (buf_prepend(leg->req, buf_head(leg->sent), buf_len(leg->sent)))
				buf_drain(leg->sent, buf_len(leg->sent));
		}
		leg_set(leg, LEG_UNLINKED);
		leg_push(leg);
		return;
	}
	leg_set(leg, LEG_GONE);
	leg->lost = true;
	leg_fail_request(leg, sqlstate, message);
}

/* The shard's server refused the client's session settings: the
 * request fails there with the server's error, as for a lost server (the
 * client's own next request is refused the same way, and closes it). */
static void leg_refused(struct client_end *end, struct server *s, const char *sqlstate, const char *message)
{
	struct fanout_leg *leg = leg_of_end(end);
	(void)link_detach(s);
	leg_set(leg, LEG_GONE);
	leg->lost = true;
	leg_fail_request(leg, sqlstate, message);
}

static void leg_released(struct client_end *end)
{
	struct fanout_leg *leg = leg_of_end(end);
	leg_set(leg, LEG_UNLINKED);   /* its transaction ended; a later phase checks one out again */
	leg_push(leg);
}

static void leg_answered(struct client_end *end) { (void)end; }

/* COPY: a server's output drained; the client's rows flow again once no
 * leg is full. */
static void leg_resume(struct client_end *end)
{
	struct fanout *fo = leg_of_end(end)->fo;
	if (!fo->waiting_drain)
		return;
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].fo && fanout_leg_full(&fo->legs[i]))
			return;
	fo->waiting_drain = false;
	fanout_ev(fo->c)->resume(fo->c);
}

static const struct client_end_events leg_end_events = {
	.ready = leg_ready,
	.lost = leg_lost,
	.ended = NULL,   /* (the client's transaction is timed, not its legs') */
	.refused = leg_refused,
	.released = leg_released,
	.answered = leg_answered,
	.resume = leg_resume,
};

/* ---- the events of a leg's wait on a pool (pool.h) ---- */

static struct fanout_leg *leg_of_wait(struct pool_waiter *pw) { return LIST_OWNER(pw, struct fanout_leg, wait); }

static void leg_queued(struct pool_waiter *pw, bool login)
{
	(void)pw;
	(void)login;   /* (still LEG_WAITING) */
}

static void leg_granted(struct pool_waiter *pw, struct server *s)
{
	struct fanout_leg *leg = leg_of_wait(pw);
	leg_set(leg, LEG_SYNCING);
	link_start(&leg->end, s);   /* its ready event follows (maybe at once) */
}

static void leg_wait_failed(struct pool_waiter *pw, const char *sqlstate, const char *message)
{
	struct fanout_leg *leg = leg_of_wait(pw);
	leg_set(leg, LEG_UNLINKED);
	leg_fail_request(leg, sqlstate, message);
}

static void leg_rerouted(struct pool_waiter *pw)
{
	struct fanout_leg *leg = leg_of_wait(pw);
	leg_set(leg, LEG_UNLINKED);
	/* A leg per shard of the layout the statement was planned on: once
	 * the pool moved to another (an online reshard cut over while it
	 * waited), the plan no longer holds. Nothing ran anywhere yet. */
	if (leg->fo->layout_shards != leg->fo->c->pool->cpool->n_shards) {
		leg_fail_request(leg, "40001", "the pool's shards changed (an online reshard cut over) while this "
				 "statement waited for its servers; run it again");
		return;
	}
	leg_push(leg);
}

static void leg_defaults_known(struct pool_waiter *pw) { (void)pw; }   /* logins only */

static void leg_defaults_failed(struct pool_waiter *pw, const char *sqlstate, const char *message)
{
	(void)pw;
	(void)sqlstate;
	(void)message;
}

static void leg_wait_closed(struct pool_waiter *pw, const char *sqlstate, const char *message)
{
	struct fanout_leg *leg = leg_of_wait(pw);
	leg_set(leg, LEG_GONE);
	leg->lost = true;
	leg_fail_request(leg, sqlstate, message);
}

static const struct pool_waiter_events leg_wait_events = {
	.queued = leg_queued,
	.granted = leg_granted,
	.failed = leg_wait_failed,
	.rerouted = leg_rerouted,
	.defaults_known = leg_defaults_known,
	.defaults_failed = leg_defaults_failed,
	.closed = leg_wait_closed,
};

/* ---- start ---- */

bool fanout_open_leg(struct fanout *fo, int idx, int shard, char *why, size_t whylen)
{
	struct client *c = fo->c;
	struct worker *w = c->w;
	struct fanout_leg *leg = &fo->legs[idx];
	leg->fo = fo;
	leg->shard = shard;
	leg->ready_needed = 1;
	leg->link = LEG_UNLINKED;
	params_init(&leg->params);
	io_open_loopback(&leg->io, &w->flusher, FANOUT_REPLY_MAX + 65536u, &leg_io_ops);
	leg->io_open = true;
	list_init(&leg->wait.node);
	leg->wait.ev = &leg_wait_events;
	leg->wait.is_client = false;
	leg->end.ev = &leg_end_events;
	leg->end.io = &leg->io;
	leg->end.params = &leg->params;
	leg->end.client_id = c->id;
	leg->end.out_budget = UINT32_MAX;   /* the reply is bounded by FANOUT_REPLY_MAX (leg_scan), or streamed (fanout_leg_stream) */
	params_copy(&leg->params, &c->params);
	if (!(leg->req = buf_new(BUF_SMALL))) {
		snprintf(why, whylen, "cross-shard %s: out of memory", fo->kind == FANOUT_READ ? "read" : "write");
		return false;
	}
	return true;
}

void fanout_leg_stream(struct fanout_leg *leg, uint32_t window)
{
	io_set_read_high(&leg->io, window);
	leg->end.out_budget = window;   /* (the server pauses once its replies wait behind a full window) */
}

void fanout_leg_finish(struct fanout_leg *leg)
{
	switch (leg->link) {
	case LEG_WAITING:
		pool_cancel_wait(&leg->wait);
		break;
	case LEG_SYNCING:
	case LEG_READY:
		pool_client_done(leg->end.server);
		break;
	case LEG_UNLINKED:
	case LEG_GONE:
		break;
	}
	if (leg->link != LEG_GONE)
		leg_set(leg, LEG_GONE);
	leg_close_io(leg);
}

bool fanout_adopt_leg(struct fanout *fo, int idx, int shard, struct server *s, char *why, size_t whylen)
{
	if (!fanout_open_leg(fo, idx, shard, why, whylen))
		return false;
	struct fanout_leg *leg = &fo->legs[idx];
	link_move(&leg->end, s);   /* (the client's end has no server from here) */
	leg_set(leg, LEG_READY);
	return true;
}

/* The statement a Bind names, when its Parse is not in this request. */
bool fanout_bound_statement(struct client *c, const char *name, const char **sql, const uint8_t **types,
			    size_t *types_len)
{
	const uint8_t *key;
	size_t keylen;
	if (!prep_enabled(c) || !prep_client_statement(c, name, &key, &keylen))
		return false;
	size_t q = strnlen((const char *)key, keylen);
	if (q == keylen || keylen - q - 1 < 2)
		return false;
	*sql = (const char *)key;
	*types = key + q + 1;
	*types_len = keylen - q - 1;
	return true;
}

void fanout_abort(struct client *c)
{
	struct fanout *fo = c->fanout;
	if (!fo)
		return;
	c->fanout = NULL;
	fanout_free(fo);
}

void fanout_cancel(struct client *c)
{
	struct fanout *fo = c->fanout;
	if (!fo)
		return;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		if (!leg->fo)
			continue;
		switch (leg->link) {
		case LEG_READY:
		case LEG_SYNCING:
			if (leg->end.server->txn.outstanding > 0)
				server_send_cancel(leg->end.server);
			break;
		case LEG_WAITING:
			/* Nothing reached a server yet: answered as PostgreSQL would. */
			pool_cancel_wait(&leg->wait);
			leg_set(leg, LEG_UNLINKED);
			leg_fail_request(leg, SQLSTATE_QUERY_CANCELED, "canceling statement due to user request");
			break;
		case LEG_UNLINKED:
		case LEG_GONE:
			break;
		}
	}
}

/* ---- a leg's reply, taken whole (every kind's) ---- */

/* The error the client gets, made by pgcat (the first one wins). */
void fanout_set_error(struct fanout *fo, const char *sqlstate, const char *msg)
{
	if (fo->error)
		return;
	uint8_t storage[512];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_error(&pb, "ERROR", sqlstate, msg);
	if (!pb.failed)
		fanout_keep_msg(&fo->error, &fo->error_len, pb.data, pb.len);
	if (fo->error)
		client_count_error(fo->c, sqlstate);   /* (the one the client gets) */
}

void fanout_keep_msg(uint8_t **dst, size_t *dst_len, const uint8_t *msg, size_t len)
{
	if (*dst || !(*dst = malloc(len)))
		return;
	memcpy(*dst, msg, len);
	*dst_len = len;
}

void fanout_keep_leg_failure(const struct fanout_leg *leg, uint8_t **dst, size_t *dst_len)
{
	if (*dst)
		return;
	char why[160];
	snprintf(why, sizeof why, "cross-shard write: shard %d: %s", leg->shard,
		 leg->too_big ? "the reply is larger than cross_shard_max_memory"
			      : "the connection was lost before the reply was complete");
	uint8_t storage[256];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	const char *code = leg->lost ? SQLSTATE_CONNECTION_FAILURE : "54000";
	pktbuf_error(&pb, "ERROR", code, why);
	if (!pb.failed)
		fanout_keep_msg(dst, dst_len, pb.data, pb.len);
	if (*dst && leg->fo && leg->fo->c)
		client_count_error(leg->fo->c, code);
}

bool fanout_first_int(const uint8_t *msg, size_t len, int *out)
{
	if (len < 11)
		return false;
	uint32_t vl = proto_get_u32(msg + 7);
	char num[16];
	if (vl == 0 || vl >= sizeof num || vl > len - 11)
		return false;
	memcpy(num, msg + 11, vl);
	num[vl] = '\0';
	*out = atoi(num);
	return true;
}

void fanout_walk_start(struct fanout_walk *w, struct fanout_leg *leg)
{
	w->in = leg->io.in;
	w->len = w->in ? buf_len(w->in) : 0;
	w->m = w->len ? buf_head(w->in) : NULL;
	w->off = 0;
}

bool fanout_walk_next(struct fanout_walk *w, const uint8_t **msg, size_t *len)
{
	if (!w->m || w->off + 5 > w->len)
		return false;
	uint32_t l = proto_get_u32(w->m + w->off + 1);
	if (l < 4 || (size_t)l + 1 > w->len - w->off)
		return false;
	*msg = w->m + w->off;
	*len = (size_t)l + 1;
	w->off += *len;
	return true;
}

void fanout_walk_done(struct fanout_walk *w, struct fanout_leg *leg)
{
	if (w->len)
		buf_drain(w->in, w->len);
	leg->scanned = 0;
}
