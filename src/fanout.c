/* SPDX-License-Identifier: MIT */
/*
 * fanout: the fan-out and its legs (include/fanout.h): the client's request
 * read, one leg client per shard over a socketpair, the legs' replies
 * awaited phase by phase, cancel, abort and free. What is sent and how the
 * replies are answered is each kind's: fanout_read.c (cross-shard reads),
 * fanout_write.c (split INSERTs, broadcast writes, the parked transaction),
 * fanout_copy.c (COPY FROM STDIN), fanout_batch.c (batches of Binds).
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "io.h"
#include "log.h"
#include "prepared.h"
#include "proto.h"
#include "context.h"

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

void fanout_put_msg(struct evbuffer *out, uint8_t type, const void *a, size_t alen, const void *b, size_t blen)
{
	uint8_t h[5] = { type };
	proto_put_u32(h + 1, (uint32_t)(4 + alen + blen));
	evbuffer_add(out, h, 5);
	if (alen)
		evbuffer_add(out, a, alen);
	if (blen)
		evbuffer_add(out, b, blen);
}

void fanout_put_unnamed_parse(struct evbuffer *out, const char *sql, size_t sql_len, const void *types, size_t types_len)
{
	uint8_t h[6] = { PqMsg_Parse };
	proto_put_u32(h + 1, (uint32_t)(4 + 1 + sql_len + 1 + types_len));
	/* h[5] = 0: the statement's empty name */
	evbuffer_add(out, h, 6);
	evbuffer_add(out, sql, sql_len + 1);
	if (types_len)
		evbuffer_add(out, types, types_len);
}

/* ---- legs ---- */

static void leg_close_io(struct fanout_leg *leg)
{
	if (!leg->io_open)
		return;
	leg->io_open = false;
	io_close(&leg->io);   /* the leg client reads EOF and goes away */
}

static void fanout_release(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct fanout *fo = arg;
	if (fo->result)
		evbuffer_free(fo->result);
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
	if (xp->rows)
		evbuffer_free(xp->rows);
	free(xp->desc);
	free(xp);
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

/* Closes the legs; the memory goes at the next loop turn, since this may
 * run inside a leg's own io callback, which reads its io after. */
struct fanout *fanout_new_write(struct client *c, enum fanout_kind kind, enum fanout_phase phase, int n_legs)
{
	struct fanout *fo = calloc(1, sizeof *fo + (size_t)n_legs * sizeof fo->legs[0]);
	if (!fo || !(fo->result = evbuffer_new())) {
		free(fo);
		return NULL;
	}
	fo->c = c;
	fo->kind = kind;
	fo->phase = phase;
	return fo;
}

void fanout_free(struct fanout *fo)
{
	fanout_portal_free(fo->rest);
	fo->rest = NULL;
	free(fo->req_copy);
	fo->req_copy = NULL;
	free(fo->batch_leg);
	free(fo->batch_idx);
	fo->batch_leg = NULL;
	fo->batch_idx = NULL;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		free(leg->unit_len);
		free(leg->error);
		leg->unit_len = NULL;
		leg->error = NULL;
		if (leg->client) {
			leg->client->fanout = NULL;
			leg->client = NULL;
		}
		leg_close_io(leg);
		if (leg->rows) {
			evbuffer_free(leg->rows);
			leg->rows = NULL;
		}
	}
	const struct timeval now = { 0, 0 };
	if (event_base_once(fo->c->w->base, -1, EV_TIMEOUT, fanout_release, fo, &now) != 0)
		log_warning("cross-shard read: could not schedule a release (%zu bytes kept)", sizeof *fo);
}

/* Every leg is in: the phase ends as its kind says (fanout_read.c,
 * fanout_write.c, fanout_copy.c, fanout_batch.c). */
static void fanout_finish(struct fanout *fo)
{
	if (fo->kind == FANOUT_BATCH) {
		fanout_batch_finish(fo);
		return;
	}
	if (fo->kind == FANOUT_INSERT || fo->kind == FANOUT_BROADCAST) {
		fanout_insert_finish(fo);
		return;
	}
	if (fo->kind == FANOUT_COPY) {
		fanout_copy_finish(fo);
		return;
	}
	fanout_read_finish(fo);
}

static void leg_done(struct fanout_leg *leg)
{
	if (leg->done)
		return;
	leg->done = true;
	struct fanout *fo = leg->fo;
	if (++fo->n_done == fo->n_legs)
		fanout_finish(fo);
}

/* Walks the reply's new messages. true: the leg's part of this phase is
 * complete (its last ReadyForQuery, or CopyInResponse when that is
 * awaited), or it failed (lost, too big). Calls nothing. */
static bool leg_scan(struct fanout_leg *leg)
{
	struct evbuffer *in = leg->io.in;
	size_t have = in ? evbuffer_get_length(in) : 0;
	while (have - leg->scanned >= 5) {
		uint8_t h[5];
		struct evbuffer_ptr pos;
		if (evbuffer_ptr_set(in, &pos, leg->scanned, EVBUFFER_PTR_SET) < 0 ||
		    evbuffer_copyout_from(in, &pos, h, 5) != 5)
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
	if (have > FANOUT_REPLY_MAX) {
		leg->too_big = true;
		leg_close_io(leg);
		return true;
	}
	return false;
}

static void leg_read_cb(struct io *io, void *arg);
static void leg_drain_cb(struct io *io, void *arg);
static void leg_event_cb(struct io *io, enum io_event what, int err, void *arg);
static const struct io_ops leg_io_ops = { leg_read_cb, leg_drain_cb, leg_event_cb, COPY_LEG_LOW,
					   offsetof(struct fanout_leg, io) };

static void leg_read_cb(struct io *io, void *arg)
{
	(void)io;
	struct fanout_leg *leg = arg;
	if (!leg->done && leg_scan(leg))
		leg_done(leg);   /* may free the fan-out: leg is gone */
}

/* A new phase: every live leg waits for its replies again (some may be
 * buffered already: an error during COPY). Ends with fanout_finish when
 * all are in: the caller must not touch fo after this. */
void fanout_begin_wait(struct fanout *fo)
{
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
		fanout_finish(fo);
}

static void leg_drain_cb(struct io *io, void *arg)
{
	(void)io;
	struct fanout_leg *leg = arg;
	struct fanout *fo = leg->fo;
	if (!fo->waiting_drain)
		return;
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].io_open && io_out_len(&fo->legs[i].io) > COPY_LEG_LOW)
			return;
	fo->waiting_drain = false;
	client_process(fo->c);
}

static void leg_event_cb(struct io *io, enum io_event what, int err, void *arg)
{
	struct fanout_leg *leg = arg;
	(void)io;
	(void)err;
	if (what != IO_EOF && what != IO_ERROR)
		return;
	if (leg->done) {
		/* between phases (COPY rows flowing): noticed at the next one */
		if (leg->fo->phase == PHASE_COPY_DATA)
			leg->lost = true;
		return;
	}
	leg->lost = true;
	leg_done(leg);
}

/* ---- start ---- */

/* Leg idx of fo, to shard: the pair, pgcat's end, the leg client. */
bool fanout_open_leg(struct fanout *fo, int idx, int shard, char *why, size_t whylen)
{
	struct client *c = fo->c;
	struct worker *w = c->w;
	struct fanout_leg *leg = &fo->legs[idx];
	leg->fo = fo;
	leg->shard = shard;
	leg->ready_needed = 1;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
		snprintf(why, whylen, "cross-shard %s: cannot reach shard %d: %s", fo->kind == FANOUT_READ ? "read" : "write",
			 shard, strerror(errno));
		return false;
	}
	if (!io_open(&leg->io, w->base, &w->flusher, sv[1], FANOUT_REPLY_MAX + 65536u, &leg_io_ops)) {
		close(sv[0]);
		close(sv[1]);
		snprintf(why, whylen, "cross-shard query: out of memory");
		return false;
	}
	leg->io_open = true;
	leg->client = client_open_leg(c, sv[0], shard, fo);
	if (!leg->client) {
		snprintf(why, whylen, "cross-shard query: out of memory");
		return false;
	}
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
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].client)
			client_cancel_query(fo->legs[i].client);
}

void fanout_leg_closed(struct client *leg_client)
{
	struct fanout *fo = leg_client->fanout;
	leg_client->fanout = NULL;
	if (!fo)
		return;
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].client == leg_client)
			fo->legs[i].client = NULL;
	/* its pair end reports EOF: the leg is marked lost there if its reply
	 * was not complete */
}
