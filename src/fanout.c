/* SPDX-License-Identifier: MIT */
/*
 * fanout: cross-shard reads through one leg per shard (include/fanout.h).
 */
#include "fanout.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "config.h"
#include "copy_route.h"
#include "copysplit.h"
#include "insert_split.h"
#include "broadcast.h"
#include "sharding.h"
#include "shardkey.h"
#include "io.h"
#include "log.h"
#include "merge.h"
#include "pktbuf.h"
#include "pool.h"
#include "prepared.h"
#include "proto.h"
#include "route.h"
#include "worker.h"

/* A shard's reply is kept whole until every shard answered: at most this
 * much of it (the query fails with 54000 beyond). */
#define FANOUT_REPLY_MAX (256u * 1024 * 1024)
/* The client's request is read whole (route waited for it up to this). */
#define FANOUT_REQUEST_MAX (1024u * 1024)

/* The database's collation, asked of shard 0 before the first merge that
 * compares strings (every shard of a pool is one schema: same collation). */
static const char COLLATION_QUERY[] = "SELECT datcollate FROM pg_catalog.pg_database WHERE datname = current_database()";

struct fanout_leg {
	struct fanout *fo;
	int shard;
	struct io io;             /* pgcat's end of the pair */
	struct client *client;    /* the leg client; NULL once it closed */
	size_t scanned;           /* bytes of the reply walked so far */
	int ready_needed;         /* ReadyForQuery messages still to come */
	bool io_open;
	bool want_copy_in;        /* COPY: done at CopyInResponse (after ready_needed) */
	struct evbuffer *rows;    /* COPY: this shard's rows, for the next CopyData */
	bool done;                /* the reply is complete, or the leg failed */
	bool lost;                /* closed before its reply was complete */
	bool too_big;
	bool begin_pending;       /* the BEGIN pgcat sent first: its CommandComplete is not the client's */
	uint8_t completes;        /* CommandComplete messages of the client's statement */
	/* BATCH: the replies of this shard's Binds (BindComplete to
	 * CommandComplete), one after the other in rows, and their lengths */
	size_t *unit_len;
	uint32_t n_units, cap_units;
	uint8_t *error;           /* BATCH: this shard's ErrorResponse (whole) */
	size_t error_len;
	bool parsed;              /* BATCH: its ParseComplete came */
};

/* What the client's request asked, in order: the replies it expects. */
enum reply_step { STEP_PARSE, STEP_DESCRIBE_STMT, STEP_BIND, STEP_DESCRIBE_PORTAL, STEP_EXECUTE, STEP_SYNC };
#define MAX_STEPS 8

enum fanout_kind {
	FANOUT_READ,          /* one statement on every shard, rows merged */
	FANOUT_INSERT,        /* a multi-row INSERT cut per shard (insert_split.c) */
	FANOUT_COPY,          /* COPY FROM STDIN, rows sent to their shards (copysplit.c) */
	FANOUT_BROADCAST,     /* default_shard = all: one write run alike on every shard (broadcast.c) */
	FANOUT_BATCH          /* one statement bound many times, each Bind on its key's shard */
};
/* A split INSERT runs in a transaction on each shard: BEGIN and the
 * shard's INSERT, then COMMIT only if every shard took its rows. */
enum fanout_phase {
	PHASE_RUN,            /* INSERT: BEGIN and the shard's rows */
	PHASE_COPY_OPEN,      /* COPY: BEGIN and COPY, until each shard's CopyInResponse */
	PHASE_COPY_DATA,      /* COPY: the client's rows flow to their shards */
	PHASE_COPY_CLOSE,     /* COPY: CopyDone (or CopyFail) sent, until each shard's ReadyForQuery */
	PHASE_END,            /* COMMIT or ROLLBACK on every shard */
	PHASE_INSERT_POSITION /* INSERT without a column list: where the sharding column is, first */
};

struct fanout {
	struct client *c;
	enum fanout_kind kind;
	enum fanout_phase phase;
	/* INSERT: the rows of RETURNING and the counts, kept from PHASE_RUN */
	struct evbuffer *result;
	uint8_t *error;           /* the first shard's ErrorResponse (whole) */
	size_t error_len;
	bool wrote_desc;
	uint64_t inserted;        /* INSERT and COPY: rows, summed over the shards */
	/* A broadcast write's command tag ("UPDATE", "CREATE TABLE"): the
	 * words of the first shard's; a count, if it has one, is summed. */
	char tag[64];
	bool tag_counted;
	/* COPY: the statement read, the splitter, the client's data */
	struct copy_route copy;
	struct copysplit split;
	bool split_ready;
	uint8_t *copy_in_response;   /* shard 0's, for the client */
	size_t copy_in_response_len;
	uint32_t copy_remaining;     /* bytes of the client's CopyData being read */
	uint32_t skip_remaining;     /* bytes of another client message being dropped */
	bool copy_discard;           /* an error: the client's data is dropped until CopyDone */
	bool waiting_drain;          /* the shards' buffers are full: stop reading the client */
	struct merge_plan plan;
	bool extended;
	bool asks_collation;
	uint8_t steps[MAX_STEPS];
	int n_steps;
	/* The Execute's row limit: the rest is dropped with the portal at
	 * Sync (a request that reads a portal in parts is not fanned out). */
	uint32_t max_rows;
	/* The client's Parse (whole message), to remember its statement. */
	uint8_t *parse_msg;
	uint32_t parse_len;
	/* The client's portal name ("" unnamed), and for a named one read in
	 * parts, its rest once merged (given to the client on success). */
	char portal[64];
	struct fanout_portal *rest;
	/* BATCH: for each of the client's Binds in order, its leg and its
	 * place among that leg's Binds */
	uint16_t *batch_leg;
	uint32_t *batch_idx;
	uint32_t n_batch;
	bool batch_parse;         /* the client sent the Parse: ParseComplete first */
	/* A split write inside a transaction pgcat holds (BEGIN, then the
	 * write): answered, then parked with every shard's transaction open
	 * until the client's COMMIT or ROLLBACK (end_tag), whose replies
	 * before CommandComplete are end_prefix. */
	bool parked;
	bool rollback;
	char end_tag[16];
	uint8_t end_prefix[16];
	size_t end_prefix_len;
	/* INSERT without a column list: the client's request (whole), read
	 * again once the sharding column's position is known */
	uint8_t *req_copy;
	size_t req_len;
	char ins_schema[64], ins_table[64], ins_column[64];   /* the sharded table and its column */
	int n_legs, n_done;
	struct fanout_leg legs[];
};

/* ---- the client's request ---- */

struct request {
	size_t end;                       /* bytes of the request */
	const char *query;                /* simple Query text */
	const uint8_t *parse;             /* whole Parse message */
	uint32_t parse_total;
	const char *parse_name, *parse_sql;
	const uint8_t *parse_types;       /* int16 n, n x oid */
	size_t parse_types_len;
	const char *bind_portal, *bind_stmt;   /* bind_portal: the Bind body's start */
	size_t bind_len;                  /* of the Bind body */
	const uint8_t *bind_rest;         /* formats, values, result formats */
	size_t bind_rest_len;
	bool has_bind, has_execute, has_sync, has_flush;
	uint32_t max_rows;                /* Execute's row limit (0: all) */
	uint8_t steps[MAX_STEPS];
	int n_steps;
};

static bool refuse(char *why, size_t whylen, const char *msg)
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
static bool read_request(const uint8_t *m, size_t lim, struct request *r, char *why, size_t whylen)
{
	size_t off = 0;
	memset(r, 0, sizeof *r);
	while (off + 5 <= lim) {
		uint8_t type = m[off];
		uint32_t l = proto_get_u32(m + off + 1);
		size_t total = (size_t)l + 1;
		if (l < 4 || total > lim - off)
			return refuse(why, whylen, "the request is too large to be sent to every shard");
		const uint8_t *body = m + off + 5;
		size_t blen = l - 4, b = 0;
		const char *s1, *s2;
		switch (type) {
		case PqMsg_Query:
			if (off != 0 || !proto_read_cstring(body, blen, &b, &r->query))
				return refuse(why, whylen, "malformed request");
			r->end = total;
			return true;
		case PqMsg_Parse:
			if (r->parse || r->has_bind || !proto_read_cstring(body, blen, &b, &s1) ||
			    !proto_read_cstring(body, blen, &b, &s2) || blen - b < 2 || !add_step(r, STEP_PARSE))
				return refuse(why, whylen, "only one statement per request can be sent to every shard");
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
				return refuse(why, whylen, "only one statement per request can be sent to every shard");
			r->has_bind = true;
			r->bind_len = blen;
			r->bind_portal = s1;
			r->bind_stmt = s2;
			r->bind_rest = body + b;
			r->bind_rest_len = blen - b;
			break;
		case PqMsg_Describe:
			if (blen < 2 || !(body[0] == 'S' || body[0] == 'P'))
				return refuse(why, whylen, "malformed Describe");
			b = 1;
			if (!proto_read_cstring(body, blen, &b, &s1))
				return refuse(why, whylen, "malformed Describe");
			if (body[0] == 'S') {
				if (r->has_bind || !r->parse || strcmp(s1, r->parse_name) != 0 || !add_step(r, STEP_DESCRIBE_STMT))
					return refuse(why, whylen, "this Describe cannot be sent to every shard");
			} else if (!r->has_bind || strcmp(s1, r->bind_portal) != 0 || !add_step(r, STEP_DESCRIBE_PORTAL)) {
				return refuse(why, whylen, "this Describe cannot be sent to every shard");
			}
			break;
		case PqMsg_Execute:
			if (!r->has_bind || r->has_execute || !proto_read_cstring(body, blen, &b, &s1) || blen - b != 4 ||
			    strcmp(s1, r->bind_portal) != 0 || !add_step(r, STEP_EXECUTE))
				return refuse(why, whylen, "only one Execute per request can be sent to every shard");
			r->max_rows = proto_get_u32(body + b);
			r->has_execute = true;
			break;
		case PqMsg_Sync:
			if (!add_step(r, STEP_SYNC))
				return refuse(why, whylen, "request too long");
			r->has_sync = true;
			r->end = off + total;
			return true;
		case PqMsg_Flush:
			r->has_flush = true;
			r->end = off + total;
			return true;
		default:
			return refuse(why, whylen, "this message cannot be sent to every shard");
		}
		off += total;
	}
	return refuse(why, whylen, "the request is too large to be sent to every shard");
}

static void put_msg(struct evbuffer *out, uint8_t type, const void *a, size_t alen, const void *b, size_t blen)
{
	uint8_t h[5] = { type };
	proto_put_u32(h + 1, (uint32_t)(4 + alen + blen));
	evbuffer_add(out, h, 5);
	if (alen)
		evbuffer_add(out, a, alen);
	if (blen)
		evbuffer_add(out, b, blen);
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

/* Closes the legs; the memory goes at the next loop turn, since this may
 * run inside a leg's own io callback, which reads its io after. */
struct fanout_portal {
	char name[64];
	struct evbuffer *rows;     /* DataRow messages not fetched yet */
	uint8_t *desc;             /* RowDescription (whole message), or NULL */
	size_t desc_len;
};

static void portal_free(struct fanout_portal *xp)
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
	portal_free(c->xshard->portal);
	c->xshard->portal = NULL;
}

static void fanout_free(struct fanout *fo)
{
	portal_free(fo->rest);
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

static void fanout_finish(struct fanout *fo);

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

/* Below 256 kB queued for every shard, the client's rows flow again. */
#define COPY_LEG_HIGH (1024u * 1024)
#define COPY_LEG_LOW (256u * 1024)

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
static void begin_wait(struct fanout *fo)
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

/* ---- the merge ---- */

/* One shard's reply, as read by finish. */
struct leg_reply {
	const uint8_t *error;          /* an ErrorResponse (whole), else NULL */
	size_t error_len;
	const uint8_t *param_desc, *stmt_desc, *portal_desc;   /* whole messages */
	size_t param_desc_len, stmt_desc_len, portal_desc_len;
	struct merge_shard rows;
	bool have_tag;
	char collation[128];
	bool have_collation;
};

/* Reads one shard's reply; rows made contiguous in place (a notice among
 * them is dropped). false: a reply pgcat did not expect. */
static bool read_reply(uint8_t *m, size_t len, bool extended, bool collation_first, struct leg_reply *r)
{
	memset(r, 0, sizeof *r);
	size_t off = 0;
	bool after_param_desc = false, after_bind = false, in_rows = false;
	uint8_t *rows_w = NULL;
	int prefix_ready = collation_first ? 1 : 0;
	while (off + 5 <= len) {
		uint8_t type = m[off];
		uint32_t l = proto_get_u32(m + off + 1);
		size_t total = (size_t)l + 1;
		if (l < 4 || total > len - off)
			return false;
		uint8_t *msg = m + off;
		off += total;
		if (prefix_ready > 0) {
			/* the collation query's T, D, C, Z */
			if (type == PqMsg_DataRow && total >= 11 && proto_get_u32(msg + 7) < sizeof r->collation &&
			    proto_get_u32(msg + 7) <= total - 11) {
				uint32_t vl = proto_get_u32(msg + 7);
				memcpy(r->collation, msg + 11, vl);
				r->collation[vl] = '\0';
				r->have_collation = true;
			}
			if (type == PqMsg_ReadyForQuery)
				prefix_ready--;
			continue;
		}
		switch (type) {
		case PqMsg_ErrorResponse:
			if (!r->error) {
				r->error = msg;
				r->error_len = total;
			}
			in_rows = false;
			break;
		case PqMsg_ParameterDescription:
			r->param_desc = msg;
			r->param_desc_len = total;
			after_param_desc = true;
			break;
		case PqMsg_BindComplete:
			after_bind = true;
			after_param_desc = false;
			break;
		case PqMsg_RowDescription:
		case PqMsg_NoData:
			if (extended && after_param_desc) {
				r->stmt_desc = msg;
				r->stmt_desc_len = total;
				after_param_desc = false;
			} else if (!extended || after_bind) {
				r->portal_desc = msg;
				r->portal_desc_len = total;
				in_rows = true;
				rows_w = msg + total;
				r->rows.rows = rows_w;
			}
			break;
		case PqMsg_DataRow:
			if (!in_rows)
				return false;
			if (rows_w != msg)
				memmove(rows_w, msg, total);
			rows_w += total;
			r->rows.n_rows++;
			break;
		case PqMsg_CommandComplete:
			if (in_rows)
				r->rows.rows_len = (size_t)(rows_w - r->rows.rows);
			in_rows = false;
			r->have_tag = true;
			break;
		case PqMsg_ParseComplete:
		case PqMsg_NoticeResponse:
		case PqMsg_ParameterStatus:
		case PqMsg_NotificationResponse:
		case PqMsg_ReadyForQuery:
			break;
		default:
			return false;
		}
	}
	return off == len;
}

static void fanout_pool_collation(struct pool *p, const char *name)
{
	p->collation_known = true;
	p->collation_bytewise = strcmp(name, "C") == 0 || strcmp(name, "POSIX") == 0 || strcasecmp(name, "C.UTF-8") == 0 ||
				strcasecmp(name, "C.utf8") == 0;
	if (!p->collation_bytewise) {
		p->collation = newlocale(LC_COLLATE_MASK, name, (locale_t)0);
		if (!p->collation)
			log_warning("pool %s: collation \"%s\" is not installed here: cross-shard ORDER BY on text refused",
				    p->name, name);
	}
	snprintf(p->collation_name, sizeof p->collation_name, "%s", name);
}

void fanout_pool_free(struct pool *p)
{
	if (p->collation)
		freelocale(p->collation);
	p->collation = (locale_t)0;
	p->collation_known = false;
}

static void send_error(struct evbuffer *out, const char *sqlstate, const char *msg)
{
	uint8_t storage[1024];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_error(&pb, "ERROR", sqlstate, msg);
	if (!pb.failed)
		evbuffer_add(out, pb.data, pb.len);
}

static bool reply_rows(struct fanout *fo, struct leg_reply *rep, struct evbuffer *out, char why[MERGE_WHY])
{
	struct pool *p = fo->c->pool;
	struct merge_column cols[256];
	int n_cols = 0;
	const uint8_t *d = rep[0].portal_desc;
	if (!d || d[0] != PqMsg_RowDescription ||
	    !merge_read_row_description(d + 5, rep[0].portal_desc_len - 5, cols, 256, &n_cols)) {
		snprintf(why, MERGE_WHY, "cross-shard read: the result has no row description pgcat can read");
		return false;
	}
	struct merge_shard shards[MERGE_MAX_SHARDS];
	for (int i = 0; i < fo->n_legs; i++) {
		struct merge_column other[256];
		int n_other = 0;
		const uint8_t *od = rep[i].portal_desc;
		if (!od || od[0] != PqMsg_RowDescription ||
		    !merge_read_row_description(od + 5, rep[i].portal_desc_len - 5, other, 256, &n_other) ||
		    n_other != n_cols) {
			snprintf(why, MERGE_WHY, "cross-shard read: the shards' results have different columns");
			return false;
		}
		for (int k = 0; k < n_cols; k++)
			if (other[k].type_oid != cols[k].type_oid || other[k].format != cols[k].format) {
				snprintf(why, MERGE_WHY, "cross-shard read: column \"%s\" has different types on the shards",
					 cols[k].name);
				return false;
			}
		shards[i] = rep[i].rows;
	}
	locale_t coll = (locale_t)0;
	if (merge_plan_compares(&fo->plan) && !p->collation_bytewise) {
		/* strings need the collation; without it only other types merge */
		coll = p->collation;
		if (!coll) {
			bool strings = false;
			for (int k = 0; k < n_cols; k++)
				strings |= cols[k].type_oid == 25 || cols[k].type_oid == 1043 || cols[k].type_oid == 1042 ||
					   cols[k].type_oid == 19;
			if (strings) {
				snprintf(why, MERGE_WHY,
					 "cross-shard read: strings cannot be ordered: collation \"%.60s\" is not available to pgcat "
					 "(use COLLATE \"C\")", p->collation_name);
				return false;
			}
		}
	}
	return merge_rows(&fo->plan, cols, n_cols, shards, (size_t)fo->n_legs, coll, fo->max_rows, out, why);
}

/* An Execute with a row limit on a named portal: the first max_rows rows
 * and PortalSuspended, the rest kept for the portal's next Executes. */
static bool reply_rows_portal(struct fanout *fo, struct leg_reply *rep, struct evbuffer *out, char why[MERGE_WHY])
{
	struct evbuffer *all = evbuffer_new();
	uint32_t max_rows = fo->max_rows;
	fo->max_rows = 0;
	bool ok = all && reply_rows(fo, rep, all, why);
	fo->max_rows = max_rows;
	if (!ok) {
		if (!all)
			snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
		else
			evbuffer_free(all);
		return false;
	}
	/* the DataRows, then CommandComplete */
	size_t at = 0, keep = 0, total = evbuffer_get_length(all);
	uint32_t n = 0;
	bool more = false;
	while (at + 5 <= total) {
		uint8_t h[5];
		struct evbuffer_ptr pos;
		if (evbuffer_ptr_set(all, &pos, at, EVBUFFER_PTR_SET) < 0 || evbuffer_copyout_from(all, &pos, h, 5) != 5)
			break;
		if (h[0] != PqMsg_DataRow)
			break;
		if (n == max_rows) {
			more = true;
			break;
		}
		at += (size_t)proto_get_u32(h + 1) + 1;
		keep = at;
		n++;
	}
	if (!more) {
		evbuffer_add_buffer(out, all);   /* every row fits: completed as usual */
		evbuffer_free(all);
		return true;
	}
	struct fanout_portal *xp = calloc(1, sizeof *xp);
	if (!xp || !(xp->rows = evbuffer_new())) {
		free(xp);
		evbuffer_free(all);
		snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
		return false;
	}
	snprintf(xp->name, sizeof xp->name, "%s", fo->portal);
	const uint8_t *d = rep[0].portal_desc;
	if (d && (xp->desc = malloc(rep[0].portal_desc_len))) {
		memcpy(xp->desc, d, rep[0].portal_desc_len);
		xp->desc_len = rep[0].portal_desc_len;
	}
	evbuffer_remove_buffer(all, out, keep);
	static const uint8_t suspended[5] = { PqMsg_PortalSuspended, 0, 0, 0, 4 };
	evbuffer_add(out, suspended, sizeof suspended);
	/* the rest without the CommandComplete (the last message) */
	size_t rest = evbuffer_get_length(all), rows_len = 0;
	while (rows_len + 5 <= rest) {
		uint8_t h[5];
		struct evbuffer_ptr pos;
		if (evbuffer_ptr_set(all, &pos, rows_len, EVBUFFER_PTR_SET) < 0 ||
		    evbuffer_copyout_from(all, &pos, h, 5) != 5 || h[0] != PqMsg_DataRow)
			break;
		rows_len += (size_t)proto_get_u32(h + 1) + 1;
	}
	evbuffer_remove_buffer(all, xp->rows, rows_len);
	evbuffer_free(all);
	portal_free(fo->rest);
	fo->rest = xp;
	return true;
}

static void put_command_tag(struct evbuffer *out, uint64_t n)
{
	char tag[32];
	int tl = snprintf(tag, sizeof tag, "SELECT %llu", (unsigned long long)n);
	put_msg(out, PqMsg_CommandComplete, tag, (size_t)tl + 1, NULL, 0);
}

bool fanout_portal_message(struct client *c, const struct proto_frame *f)
{
	struct fanout_portal *xp = c->xshard ? c->xshard->portal : NULL;
	if (!xp || c->server)
		return false;
	struct evbuffer *in = c->io.in, *out = client_output(c);
	uint32_t total = f->len + 1;
	if (f->type != PqMsg_Sync && f->type != PqMsg_Execute && f->type != PqMsg_Describe && f->type != PqMsg_Close) {
		/* outside a transaction the portal ended with the last Sync */
		if (!c->held_begin)
			fanout_portal_drop(c);
		return false;
	}
	if (total > 5 + 256 || evbuffer_get_length(in) < total)
		return false;   /* not one of ours (names are short), or wait */
	const uint8_t *m = evbuffer_pullup(in, total), *body = m + 5;
	size_t blen = total - 5, b = 0;
	const char *name;
	switch (f->type) {
	case PqMsg_Sync: {
		uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)(c->held_begin ? 'T' : 'I') };
		if (!c->held_begin)
			fanout_portal_drop(c);
		evbuffer_drain(in, total);
		evbuffer_add(out, z, sizeof z);
		return true;
	}
	case PqMsg_Execute: {
		if (!proto_read_cstring(body, blen, &b, &name) || blen - b != 4 || strcmp(name, xp->name) != 0)
			return false;
		uint32_t max_rows = proto_get_u32(body + b);
		uint64_t n = 0;
		size_t at = 0, have = evbuffer_get_length(xp->rows);
		while (at + 5 <= have && (max_rows == 0 || n < max_rows)) {
			uint8_t h[5];
			struct evbuffer_ptr pos;
			if (evbuffer_ptr_set(xp->rows, &pos, at, EVBUFFER_PTR_SET) < 0 ||
			    evbuffer_copyout_from(xp->rows, &pos, h, 5) != 5)
				break;
			at += (size_t)proto_get_u32(h + 1) + 1;
			n++;
		}
		evbuffer_drain(in, total);
		evbuffer_remove_buffer(xp->rows, out, at);
		if (evbuffer_get_length(xp->rows) > 0) {
			static const uint8_t suspended[5] = { PqMsg_PortalSuspended, 0, 0, 0, 4 };
			evbuffer_add(out, suspended, sizeof suspended);
		} else {
			put_command_tag(out, n);   /* the rows of this Execute, as PostgreSQL counts them */
		}
		return true;
	}
	case PqMsg_Describe:
		if (blen < 2 || body[0] != 'P')
			return false;
		b = 1;
		if (!proto_read_cstring(body, blen, &b, &name) || strcmp(name, xp->name) != 0)
			return false;
		evbuffer_drain(in, total);
		if (xp->desc)
			evbuffer_add(out, xp->desc, xp->desc_len);
		else
			put_msg(out, PqMsg_NoData, NULL, 0, NULL, 0);
		return true;
	case PqMsg_Close:
		if (blen < 2 || body[0] != 'P')
			return false;
		b = 1;
		if (!proto_read_cstring(body, blen, &b, &name) || strcmp(name, xp->name) != 0)
			return false;
		evbuffer_drain(in, total);
		fanout_portal_drop(c);
		put_msg(out, PqMsg_CloseComplete, NULL, 0, NULL, 0);
		return true;
	default:
		return false;
	}
}

static void insert_finish(struct fanout *fo);
static void copy_finish(struct fanout *fo);

/* A shard's RowDescription (whole message m) for the client: without the
 * hidden sum/count columns the shards were asked for (avg alone). */
static void add_row_description(struct evbuffer *out, const uint8_t *m, size_t len, const struct merge_plan *p)
{
	if (!p->aggregates || p->n_hidden == 0 || len < 7 || m[0] != PqMsg_RowDescription) {
		evbuffer_add(out, m, len);
		return;
	}
	size_t off = 7;
	for (int i = 0; i < p->n_visible; i++) {
		const uint8_t *nul = off < len ? memchr(m + off, 0, len - off) : NULL;
		if (!nul || (size_t)(nul - m) + 1 + 18 > len) {
			evbuffer_add(out, m, len);   /* (not ours to judge: merge_rows refuses it) */
			return;
		}
		off = (size_t)(nul - m) + 1 + 18;
	}
	uint8_t h[7] = { PqMsg_RowDescription };
	proto_put_u32(h + 1, (uint32_t)(off - 1));
	h[5] = (uint8_t)(p->n_visible >> 8);
	h[6] = (uint8_t)p->n_visible;
	evbuffer_add(out, h, 7);
	evbuffer_add(out, m + 7, off - 7);
}

static void batch_finish(struct fanout *fo);

static void fanout_finish(struct fanout *fo)
{
	if (fo->kind == FANOUT_BATCH) {
		batch_finish(fo);
		return;
	}
	if (fo->kind == FANOUT_INSERT || fo->kind == FANOUT_BROADCAST) {
		insert_finish(fo);
		return;
	}
	if (fo->kind == FANOUT_COPY) {
		copy_finish(fo);
		return;
	}
	struct client *c = fo->c;
	struct pool *p = c->pool;
	struct evbuffer *reply = evbuffer_new();
	struct leg_reply rep[MERGE_MAX_SHARDS];
	char why[MERGE_WHY] = "";
	const char *sqlstate = SQLSTATE_FEATURE_NOT_SUPPORTED;
	const uint8_t *error = NULL;
	size_t error_len = 0;
	char status = c->held_begin ? 'T' : 'I';

	for (int i = 0; i < fo->n_legs && !why[0] && !error; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		if (leg->too_big) {
			sqlstate = "54000";
			snprintf(why, sizeof why, "cross-shard read: the result of shard %d is larger than %u MB", leg->shard,
				 FANOUT_REPLY_MAX >> 20);
			break;
		}
		struct evbuffer *in = leg->io.in;
		size_t len = in ? evbuffer_get_length(in) : 0;
		uint8_t *m = len ? evbuffer_pullup(in, (ev_ssize_t)len) : NULL;
		bool ok = (len == 0 || m) && read_reply(m, leg->lost ? leg->scanned : len, fo->extended,
							i == 0 && fo->asks_collation, &rep[i]);
		if (ok && rep[i].error) {
			error = rep[i].error;   /* the first shard's error, as PostgreSQL wrote it */
			error_len = rep[i].error_len;
			break;
		}
		if (leg->lost || !ok || !rep[i].have_tag) {
			sqlstate = SQLSTATE_CONNECTION_FAILURE;
			snprintf(why, sizeof why, "cross-shard read: shard %d: %s", leg->shard,
				 leg->lost ? "the connection was lost before the result was complete" : "unexpected reply");
			break;
		}
		if (i == 0 && fo->asks_collation && rep[0].have_collation && !p->collation_known)
			fanout_pool_collation(p, rep[0].collation);
	}
	if (!reply) {
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	if (!why[0] && !error) {
		struct leg_reply *r0 = &rep[0];
		static const uint8_t parse_complete[5] = { PqMsg_ParseComplete, 0, 0, 0, 4 };
		static const uint8_t bind_complete[5] = { PqMsg_BindComplete, 0, 0, 0, 4 };
		for (int s = 0; s < fo->n_steps && !why[0]; s++) {
			switch (fo->steps[s]) {
			case STEP_PARSE:
				evbuffer_add(reply, parse_complete, 5);
				break;
			case STEP_DESCRIBE_STMT:
				if (r0->param_desc)
					evbuffer_add(reply, r0->param_desc, r0->param_desc_len);
				if (r0->stmt_desc)
					add_row_description(reply, r0->stmt_desc, r0->stmt_desc_len, &fo->plan);
				break;
			case STEP_BIND:
				evbuffer_add(reply, bind_complete, 5);
				break;
			case STEP_DESCRIBE_PORTAL:
				if (r0->portal_desc)
					add_row_description(reply, r0->portal_desc, r0->portal_desc_len, &fo->plan);
				break;
			case STEP_EXECUTE:
				if (fo->portal[0] && fo->max_rows > 0)
					(void)reply_rows_portal(fo, rep, reply, why);
				else
					(void)reply_rows(fo, rep, reply, why);
				break;
			case STEP_SYNC:
				break;
			}
		}
		if (!fo->extended && !why[0]) {
			if (r0->portal_desc)
				add_row_description(reply, r0->portal_desc, r0->portal_desc_len, &fo->plan);
			(void)reply_rows(fo, rep, reply, why);
		}
	}
	struct evbuffer *out = client_output(c);
	if (error) {
		evbuffer_add(out, error, error_len);
	} else if (why[0]) {
		log_debug("C-%llu: %s", (unsigned long long)c->id, why);
		send_error(out, sqlstate, why);
	} else {
		evbuffer_add_buffer(out, reply);
		if (fo->rest) {
			/* a named portal read in parts: its rest is the client's */
			fanout_portal_drop(c);
			struct client_xshard *xs = fanout_xshard(c);
			if (xs) {
				xs->portal = fo->rest;
				fo->rest = NULL;
			}
		}
		/* the client's named statement lives on (SPEC §5) */
		if (fo->parse_msg && prep_enabled(c))
			(void)prep_client_adopt(c, fo->parse_msg, fo->parse_len);
	}
	evbuffer_free(reply);
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)status };
	evbuffer_add(out, z, sizeof z);
	c->fanout = NULL;
	fanout_free(fo);
	client_on_released(c);   /* idle again: its next request */
}

/* ---- start ---- */

/* Leg idx of fo, to shard: the pair, pgcat's end, the leg client. */
static bool open_leg(struct fanout *fo, int idx, int shard, char *why, size_t whylen)
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
static bool bound_statement(struct client *c, const char *name, const char **sql, const uint8_t **types,
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

/* Parameter param (1-based) of a Bind body as an integer: text, or binary
 * int8/int4/int2 by its length. *is_null for NULL. false: unreadable. */
static bool bind_int64(const char *bind_body, size_t len, int param, int64_t *v, bool *is_null)
{
	const uint8_t *val;
	int32_t vlen;
	int16_t format;
	*is_null = false;
	if (!shardkey_bind_param((const uint8_t *)bind_body, len, param, &val, &vlen, &format))
		return false;
	if (vlen < 0) {
		*is_null = true;
		return true;
	}
	if (format == 1) {
		if (vlen != 8 && vlen != 4 && vlen != 2)
			return false;
		uint64_t u = 0;
		for (int32_t i = 0; i < vlen; i++)
			u = u << 8 | val[i];
		if (vlen == 8)
			*v = (int64_t)u;
		else if (vlen == 4)
			*v = (int32_t)(uint32_t)u;
		else
			*v = (int16_t)(uint16_t)u;
		return true;
	}
	/* text, as int8in reads it: spaces around, a sign, digits */
	char t[32];
	if (vlen <= 0 || (size_t)vlen >= sizeof t)
		return false;
	memcpy(t, val, (size_t)vlen);
	t[vlen] = '\0';
	char *e;
	errno = 0;
	long long x = strtoll(t, &e, 10);
	while (*e == ' ' || *e == '\t' || *e == '\n' || *e == '\r')
		e++;
	if (errno || e == t || *e)
		return false;
	*v = x;
	return true;
}

enum fanout_start fanout_start(struct client *c, const struct proto_frame *f, bool sharded,
			       const struct router_rules *rules, char *why, size_t whylen)
{
	(void)f;
	struct pool *p = c->pool;
	int n_shards = (int)p->cpool->n_shards;
	struct evbuffer *in = c->io.in;
	size_t have = evbuffer_get_length(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = evbuffer_pullup(in, (ev_ssize_t)lim);
	struct request r;
	why[0] = '\0';
	if (n_shards > MERGE_MAX_SHARDS) {
		refuse(why, whylen, "too many shards");
		return FANOUT_REFUSED;
	}
	if (!m || !read_request(m, lim, &r, why, whylen))
		return FANOUT_REFUSED;
	if (!r.query && !r.has_execute && r.has_bind) {
		/* a portal bound on one shard would then be read there alone */
		refuse(why, whylen, "a portal bound without Execute in the same request (asyncpg's awaitable cursor) cannot "
				    "be merged; bind and execute together (asyncpg: iterate with async for)");
		return FANOUT_REFUSED;
	}
	if (!r.query && !r.has_execute)   /* Parse/Describe: every shard answers alike */
		return r.has_flush ? FANOUT_ANY_SHARD_FLUSH : FANOUT_ANY_SHARD;
	if (!r.query && !r.has_sync) {
		refuse(why, whylen, "an Execute without Sync cannot be merged (send Sync)");
		return FANOUT_REFUSED;
	}
	const char *sql = r.query;
	const uint8_t *types = (const uint8_t *)"\0";
	size_t types_len = 2;
	if (!r.query) {
		if (r.parse && strcmp(r.parse_name, r.bind_stmt) == 0) {
			sql = r.parse_sql;
			types = r.parse_types;
			types_len = r.parse_types_len;
		} else if (!bound_statement(c, r.bind_stmt, &sql, &types, &types_len)) {
			refuse(why, whylen, "the prepared statement is not known to pgcat (prepared_statements off?)");
			return FANOUT_REFUSED;
		}
	}
	struct fanout *fo = calloc(1, sizeof *fo + (size_t)n_shards * sizeof fo->legs[0]);
	if (!fo) {
		refuse(why, whylen, "out of memory");
		return FANOUT_REFUSED;
	}
	fo->c = c;
	fo->extended = r.query == NULL;
	if (r.has_bind && strlen(r.bind_portal) >= sizeof fo->portal) {
		free(fo);
		refuse(why, whylen, "portal name too long");
		return FANOUT_REFUSED;
	}
	if (r.has_bind)
		snprintf(fo->portal, sizeof fo->portal, "%s", r.bind_portal);
	char pwhy[MERGE_WHY];
	if (!merge_plan_build(sql, strlen(sql), &fo->plan, pwhy)) {
		bool any = fo->plan.not_select && !sharded;   /* SET, SHOW... with default_shard = all */
		snprintf(why, whylen, "%s", pwhy);
		free(fo);
		return any ? FANOUT_ANY_SHARD : FANOUT_REFUSED;
	}
	/* LIMIT $n / OFFSET $m: their values, from the Bind */
	bool passthrough = false;
	if ((fo->plan.limit_param || fo->plan.offset_param) && !r.query) {
		int64_t v[2] = { 0, 0 };
		bool null[2] = { true, true };
		int params[2] = { fo->plan.limit_param, fo->plan.offset_param };
		for (int i = 0; i < 2; i++) {
			if (!params[i])
				continue;
			if (!bind_int64(r.bind_portal, r.bind_len, params[i], &v[i], &null[i])) {
				free(fo);
				refuse(why, whylen, "a LIMIT or OFFSET parameter pgcat cannot read (an integer is needed)");
				return FANOUT_REFUSED;
			}
		}
		/* a negative one: the shards raise PostgreSQL's own error */
		passthrough = !merge_plan_bind(&fo->plan, null[0], v[0], null[1], v[1]);
	}
	/* mergeable rows, but are they each shard's part of the answer? */
	if (!broadcast_read_check(sql, strlen(sql), rules, pwhy)) {
		snprintf(why, whylen, "%s", pwhy);
		free(fo);
		return FANOUT_REFUSED;
	}
	memcpy(fo->steps, r.steps, sizeof r.steps);
	fo->n_steps = r.n_steps;
	fo->max_rows = r.max_rows;
	fo->asks_collation = merge_plan_compares(&fo->plan) && !p->collation_known;
	if (r.parse && r.parse_name[0]) {
		fo->parse_msg = malloc(r.parse_total);
		if (fo->parse_msg) {
			memcpy(fo->parse_msg, r.parse, r.parse_total);
			fo->parse_len = r.parse_total;
		}
	}

	/* What every shard runs. */
	struct evbuffer *req = evbuffer_new();
	size_t sql_len = strlen(sql);
	bool rewrite = merge_plan_rewrites(&fo->plan) && !passthrough;
	char *shard_sql = rewrite ? merge_plan_shard_sql(&fo->plan, sql, sql_len, &sql_len) : NULL;
	const char *run = shard_sql ? shard_sql : sql;
	if (!req || (rewrite && !shard_sql)) {
		evbuffer_free(req);
		free(shard_sql);
		free(fo->parse_msg);
		free(fo);
		refuse(why, whylen, "out of memory");
		return FANOUT_REFUSED;
	}
	if (!fo->extended) {
		put_msg(req, PqMsg_Query, run, sql_len + 1, NULL, 0);
	} else {
		/* Parse, [Describe S], Bind, Describe P, Execute, Sync: unnamed,
		 * whatever the client named them */
		uint8_t h[5] = { PqMsg_Parse };
		proto_put_u32(h + 1, (uint32_t)(4 + 1 + sql_len + 1 + types_len));
		evbuffer_add(req, h, 5);
		evbuffer_add(req, "", 1);
		evbuffer_add(req, run, sql_len + 1);
		evbuffer_add(req, types, types_len);
		for (int s = 0; s < r.n_steps; s++)
			if (r.steps[s] == STEP_DESCRIBE_STMT)
				put_msg(req, PqMsg_Describe, "S", 2, NULL, 0);
		put_msg(req, PqMsg_Bind, "\0", 2, r.bind_rest, r.bind_rest_len);
		put_msg(req, PqMsg_Describe, "P", 2, NULL, 0);
		put_msg(req, PqMsg_Execute, "\0\0\0\0", 5, NULL, 0);
		put_msg(req, PqMsg_Sync, NULL, 0, NULL, 0);
	}
	free(shard_sql);

	/* One leg per shard. */
	fo->n_legs = n_shards;
	int made = 0;
	for (; made < n_shards; made++) {
		if (!open_leg(fo, made, made, why, whylen)) {
			made++;
			break;
		}
		struct fanout_leg *leg = &fo->legs[made];
		leg->ready_needed = made == 0 && fo->asks_collation ? 2 : 1;
		if (made == 0 && fo->asks_collation)
			put_msg(io_out(&leg->io), PqMsg_Query, COLLATION_QUERY, sizeof COLLATION_QUERY, NULL, 0);
		size_t rl = evbuffer_get_length(req);
		evbuffer_add(io_out(&leg->io), evbuffer_pullup(req, (ev_ssize_t)rl), rl);
	}
	evbuffer_free(req);
	if (made < n_shards || why[0]) {
		fo->n_legs = made;
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	evbuffer_drain(in, r.end);
	c->fanout = fo;
	client_set_state(c, CLIENT_FANOUT);
	log_debug("C-%llu: cross-shard read sent to %d shards", (unsigned long long)c->id, n_shards);
	return FANOUT_STARTED;
}

/* ---- a multi-row INSERT split by shard ---- */

static void set_error(struct fanout *fo, const char *sqlstate, const char *msg);

/* A CommandComplete of a write: "INSERT 0 n", "UPDATE n", "CREATE TABLE".
 * The count is summed over the shards; the words are the first shard's. */
static void take_tag(struct fanout *fo, struct fanout_leg *leg, const char *tag, size_t n)
{
	size_t tl = strnlen(tag, n);
	if (leg->begin_pending && tl == 5 && memcmp(tag, "BEGIN", 5) == 0) {
		leg->begin_pending = false;
		return;
	}
	if (++leg->completes > 1) {
		/* several statements ran: one tag could not stand for them (and the
		 * error rolls every shard back) */
		set_error(fo, SQLSTATE_FEATURE_NOT_SUPPORTED,
			  "cross-shard write: send one statement per query when it runs on every shard");
		return;
	}
	size_t sp = tl;
	while (sp > 0 && tag[sp - 1] >= '0' && tag[sp - 1] <= '9')
		sp--;
	bool counted = sp < tl && sp > 0 && tag[sp - 1] == ' ' && tl - sp <= 19;
	size_t words = counted ? sp - 1 : tl;
	if (!fo->tag[0]) {
		if (words >= sizeof fo->tag)
			words = sizeof fo->tag - 1;
		memcpy(fo->tag, tag, words);
		fo->tag[words] = '\0';
		fo->tag_counted = counted;
	}
	if (counted)
		fo->inserted += strtoull(tag + sp, NULL, 10);
}

/* Takes a shard's reply of a phase: its first error, RETURNING rows, and
 * the count of its command tag. */
static void insert_take_reply(struct fanout *fo, struct fanout_leg *leg)
{
	struct evbuffer *in = leg->io.in;
	size_t len = in ? evbuffer_get_length(in) : 0;
	const uint8_t *m = len ? evbuffer_pullup(in, (ev_ssize_t)len) : NULL;
	size_t off = 0;
	bool ok = !leg->lost && !leg->too_big;
	while (m && off + 5 <= len) {
		uint8_t type = m[off];
		uint32_t l = proto_get_u32(m + off + 1);
		if (l < 4 || (size_t)l + 1 > len - off)
			break;
		const uint8_t *msg = m + off;
		size_t total = (size_t)l + 1;
		off += total;
		if (type == PqMsg_ErrorResponse && !fo->error) {
			fo->error = malloc(total);
			if (fo->error) {
				memcpy(fo->error, msg, total);
				fo->error_len = total;
			}
		} else if (fo->phase == PHASE_RUN && (type == PqMsg_RowDescription || type == PqMsg_NoData) &&
			   !fo->wrote_desc) {
			evbuffer_prepend(fo->result, msg, total);
			fo->wrote_desc = true;
		} else if (fo->phase == PHASE_RUN && type == PqMsg_DataRow) {
			evbuffer_add(fo->result, msg, total);
		} else if (fo->phase == PHASE_RUN && type == PqMsg_CommandComplete) {
			take_tag(fo, leg, (const char *)msg + 5, total - 5);
		} else if (fo->phase == PHASE_COPY_CLOSE && type == PqMsg_CommandComplete && total > 5 + 5 &&
			   memcmp(msg + 5, "COPY ", 5) == 0) {
			fo->inserted += strtoull((const char *)msg + 5 + 5, NULL, 10);
		}
	}
	if (!ok && !fo->error) {
		char why[160];
		snprintf(why, sizeof why, "cross-shard write: shard %d: %s", leg->shard,
			 leg->too_big ? "the reply is too large" : "the connection was lost before the reply was complete");
		uint8_t storage[256];
		struct pktbuf pb;
		pktbuf_init(&pb, storage, sizeof storage);
		pktbuf_error(&pb, "ERROR", leg->lost ? SQLSTATE_CONNECTION_FAILURE : "54000", why);
		if (!pb.failed && (fo->error = malloc(pb.len))) {
			memcpy(fo->error, pb.data, pb.len);
			fo->error_len = pb.len;
		}
	}
	if (len)
		evbuffer_drain(in, len);
	leg->scanned = 0;
}

/* The error the client gets, made by pgcat (the first one wins). */
static void set_error(struct fanout *fo, const char *sqlstate, const char *msg)
{
	if (fo->error)
		return;
	uint8_t storage[512];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_error(&pb, "ERROR", sqlstate, msg);
	if (!pb.failed && (fo->error = malloc(pb.len))) {
		memcpy(fo->error, pb.data, pb.len);
		fo->error_len = pb.len;
	}
}

/* COMMIT on every shard if none failed, else ROLLBACK. */
static void write_end(struct fanout *fo)
{
	const char *end = fo->error || fo->rollback ? "ROLLBACK" : "COMMIT";
	fo->phase = PHASE_END;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		leg->want_copy_in = false;
		leg->ready_needed = 1;
		if (leg->io_open && !leg->lost)
			put_msg(io_out(&leg->io), PqMsg_Query, end, strlen(end) + 1, NULL, 0);
	}
	begin_wait(fo);
}

static void put_result(struct fanout *fo, struct evbuffer *out);
static void batch_put_result(struct fanout *fo, struct evbuffer *out);

/* The answer to the client's COMMIT or ROLLBACK of a parked split write,
 * once every shard ended its transaction: the transaction is over. */
static void write_end_reply(struct fanout *fo)
{
	struct client *c = fo->c;
	struct evbuffer *out = client_output(c);
	evbuffer_add(out, fo->end_prefix, fo->end_prefix_len);
	if (fo->error)
		evbuffer_add(out, fo->error, fo->error_len);
	else
		put_msg(out, PqMsg_CommandComplete, fo->end_tag, strlen(fo->end_tag) + 1, NULL, 0);
	free(c->held_begin);
	c->held_begin = NULL;
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, 'I' };
	evbuffer_add(out, z, sizeof z);
	c->fanout = NULL;
	fanout_free(fo);
	client_on_released(c);
}

/* A split write inside a transaction pgcat holds, every shard's part done:
 * the client gets its answer now, and the shards' transactions stay open
 * until the client's COMMIT or ROLLBACK (fanout_parked_message). true:
 * parked. */
static bool park(struct fanout *fo)
{
	struct client *c = fo->c;
	if (!c->held_begin || fo->error || fo->parked ||
	    (fo->kind != FANOUT_INSERT && fo->kind != FANOUT_COPY && fo->kind != FANOUT_BATCH))
		return false;
	struct client_xshard *xs = fanout_xshard(c);
	if (!xs)
		return false;   /* out of memory: not parked, answered as outside a transaction */
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].lost || !fo->legs[i].io_open)
			return false;
	struct evbuffer *out = client_output(c);
	if (fo->kind == FANOUT_BATCH)
		batch_put_result(fo, out);
	else
		put_result(fo, out);
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, 'T' };
	evbuffer_add(out, z, sizeof z);
	fo->parked = true;
	c->fanout = NULL;
	xs->parked = fo;
	client_on_released(c);
	return true;
}

/* The client's answer, once every shard committed or rolled back. */
static void write_reply(struct fanout *fo)
{
	struct client *c = fo->c;
	struct evbuffer *out = client_output(c);
	if (fo->end_tag[0]) {
		write_end_reply(fo);
		return;
	}
	put_result(fo, out);
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)(c->held_begin ? 'T' : 'I') };
	evbuffer_add(out, z, sizeof z);
	c->fanout = NULL;
	fanout_free(fo);
	client_on_released(c);
}

/* The statement's own answer: its error, or its rows and command tag. */
static void put_result(struct fanout *fo, struct evbuffer *out)
{
	struct client *c = fo->c;
	if (fo->error) {
		evbuffer_add(out, fo->error, fo->error_len);
	} else {
		static const uint8_t parse_complete[5] = { PqMsg_ParseComplete, 0, 0, 0, 4 };
		static const uint8_t bind_complete[5] = { PqMsg_BindComplete, 0, 0, 0, 4 };
		for (int i = 0; fo->extended && i < fo->n_steps; i++) {
			if (fo->steps[i] == STEP_PARSE)
				evbuffer_add(out, parse_complete, 5);
			else if (fo->steps[i] == STEP_BIND)
				evbuffer_add(out, bind_complete, 5);
		}
		evbuffer_add_buffer(out, fo->result);   /* RowDescription or NoData, rows */
		if (fo->parse_msg && prep_enabled(c))
			(void)prep_client_adopt(c, fo->parse_msg, fo->parse_len);
		char tag[96];
		int tl;
		if (fo->kind == FANOUT_COPY)
			tl = snprintf(tag, sizeof tag, "COPY %llu", (unsigned long long)fo->inserted);
		else if (fo->kind == FANOUT_INSERT || fo->tag_counted)
			tl = snprintf(tag, sizeof tag, "%s %llu", fo->tag[0] ? fo->tag : "INSERT 0",
				      (unsigned long long)fo->inserted);
		else
			tl = snprintf(tag, sizeof tag, "%s", fo->tag);
		put_msg(out, PqMsg_CommandComplete, tag, (size_t)tl + 1, NULL, 0);
	}
}

static void insert_positioned(struct fanout *fo);

static void insert_finish(struct fanout *fo)
{
	if (fo->phase == PHASE_INSERT_POSITION) {
		insert_positioned(fo);
		return;
	}
	bool commit_phase = fo->phase == PHASE_END, failed_before = fo->error != NULL;
	for (int i = 0; i < fo->n_legs; i++)
		insert_take_reply(fo, &fo->legs[i]);
	if (!commit_phase) {
		if (!park(fo))
			write_end(fo);   /* every shard took its rows, or none keeps them */
		return;
	}
	if (!failed_before && fo->error)
		log_warning("C-%llu: a cross-shard write failed at COMMIT on a shard; the other shards committed",
			    (unsigned long long)fo->c->id);
	write_reply(fo);
}

/* ---- COPY FROM STDIN split by shard ---- */

static bool copy_row(void *arg, const uint8_t *row, size_t rowlen, bool header, const uint8_t *key, size_t keylen,
		     bool is_null)
{
	struct fanout *fo = arg;
	if (header) {
		for (int i = 0; i < fo->n_legs; i++)
			evbuffer_add(fo->legs[i].rows, row, rowlen);
		return true;
	}
	char msg[200], err[120];
	int s;
	if (is_null) {
		snprintf(msg, sizeof msg, "cross-shard COPY: line %llu: the sharding key is NULL",
			 (unsigned long long)fo->split.line);
		set_error(fo, "22004", msg);
		return false;
	}
	if (fo->split.o.format == COPYSPLIT_BINARY) {
		/* the value in its binary form, read as a Bind's binary value
		 * whose type the server chose (by the hash function and the
		 * length: int8/int4/int2, uuid, text) */
		if (keylen > INT32_MAX ||
		    !shardkey_value_shard(fo->c->pool->cpool->sharding_function, fo->n_legs, key, (int32_t)keylen, 1, 0, &s)) {
			snprintf(msg, sizeof msg, "cross-shard COPY: row %llu: the sharding key cannot be read in binary form",
				 (unsigned long long)fo->split.line);
			set_error(fo, "22P03", msg);
			return false;
		}
	} else if (!sharding_shard_for_key(fo->c->pool->cpool->sharding_function, (const char *)key, keylen, fo->n_legs,
					   &s, err, sizeof err)) {
		snprintf(msg, sizeof msg, "cross-shard COPY: line %llu: %s", (unsigned long long)fo->split.line, err);
		set_error(fo, "22P02", msg);
		return false;
	}
	evbuffer_add(fo->legs[s].rows, row, rowlen);
	return true;
}

/* Each shard's rows so far, as one CopyData. */
static void copy_flush_rows(struct fanout *fo)
{
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		size_t n = evbuffer_get_length(leg->rows);
		if (!n)
			continue;
		while (n > 0) {
			/* CopyData messages of at most 1 MB */
			size_t part = n < (1u << 20) ? n : (1u << 20);
			uint8_t h[5] = { PqMsg_CopyData };
			proto_put_u32(h + 1, (uint32_t)(4 + part));
			struct evbuffer *out = io_out(&leg->io);
			evbuffer_add(out, h, 5);
			evbuffer_remove_buffer(leg->rows, out, part);
			n -= part;
		}
		if (io_out_len(&leg->io) > COPY_LEG_HIGH)
			fo->waiting_drain = true;
	}
}

/* The client's data stops here (CopyDone, CopyFail, an error): every
 * shard ends its COPY, then the transactions end. */
static void copy_close(struct fanout *fo, bool fail, const char *why)
{
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		leg->ready_needed = 1;
		leg->want_copy_in = false;
		if (!leg->io_open || leg->lost)
			continue;
		if (fail)
			put_msg(io_out(&leg->io), PqMsg_CopyFail, why, strlen(why) + 1, NULL, 0);
		else
			put_msg(io_out(&leg->io), PqMsg_CopyDone, NULL, 0, NULL, 0);
	}
	fo->phase = PHASE_COPY_CLOSE;
	begin_wait(fo);
}

/* A splitter or hashing error: the shards' COPY fails now, the client's
 * rows are dropped until its CopyDone. */
static void copy_abort(struct fanout *fo)
{
	if (fo->copy_discard)
		return;
	fo->copy_discard = true;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		static const char msg[] = "pgcat: cross-shard COPY failed";
		if (leg->io_open && !leg->lost)
			put_msg(io_out(&leg->io), PqMsg_CopyFail, msg, sizeof msg, NULL, 0);
	}
}

static void copy_feed(struct fanout *fo, const uint8_t *data, size_t n)
{
	if (fo->copy_discard || fo->split.ended)
		return;
	enum copysplit_result r = copysplit_feed(&fo->split, data, n, copy_row, fo);
	if (r == COPYSPLIT_OK || r == COPYSPLIT_END) {
		copy_flush_rows(fo);
		return;
	}
	if (r != COPYSPLIT_STOPPED) {
		char msg[200];
		snprintf(msg, sizeof msg, "cross-shard COPY: line %llu: %s", (unsigned long long)fo->split.line,
			 copysplit_strerror(r));
		set_error(fo, r == COPYSPLIT_ERR_NOMEM ? SQLSTATE_OUT_OF_MEMORY : "22P04", msg);
	}
	copy_abort(fo);
}

void fanout_client_input(struct client *c)
{
	struct fanout *fo = c->fanout;
	if (!fo || fo->kind != FANOUT_COPY || fo->phase != PHASE_COPY_DATA)
		return;
	struct evbuffer *in = c->io.in;
	while (fo->phase == PHASE_COPY_DATA && !fo->waiting_drain) {
		size_t have = evbuffer_get_length(in);
		if (fo->skip_remaining) {
			size_t n = have < fo->skip_remaining ? have : fo->skip_remaining;
			if (!n)
				return;
			evbuffer_drain(in, n);
			fo->skip_remaining -= (uint32_t)n;
			continue;
		}
		if (fo->copy_remaining) {
			size_t n = have < fo->copy_remaining ? have : fo->copy_remaining;
			if (!n)
				return;
			/* the splitter takes any piece: no need to wait for the
			 * whole message, however large */
			struct evbuffer_iovec v;
			if (evbuffer_peek(in, (ev_ssize_t)n, NULL, &v, 1) < 1)
				return;
			if (v.iov_len > n)
				v.iov_len = n;
			copy_feed(fo, v.iov_base, v.iov_len);
			evbuffer_drain(in, v.iov_len);
			fo->copy_remaining -= (uint32_t)v.iov_len;
			continue;
		}
		uint8_t h[5];
		if (have < 5 || evbuffer_copyout(in, h, 5) != 5)
			return;
		uint32_t l = proto_get_u32(h + 1);
		if (l < 4) {
			client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "invalid message length");
			return;
		}
		switch (h[0]) {
		case PqMsg_CopyData:
			evbuffer_drain(in, 5);
			fo->copy_remaining = l - 4;
			break;
		case PqMsg_CopyDone:
			evbuffer_drain(in, 5);
			fo->skip_remaining = l - 4;
			if (!fo->copy_discard && !fo->split.ended) {
				enum copysplit_result r = copysplit_finish(&fo->split, copy_row, fo);
				if (r == COPYSPLIT_OK || r == COPYSPLIT_END) {
					copy_flush_rows(fo);
				} else {
					if (r != COPYSPLIT_STOPPED) {
						char msg[200];
						snprintf(msg, sizeof msg, "cross-shard COPY: line %llu: %s",
							 (unsigned long long)fo->split.line, copysplit_strerror(r));
						set_error(fo, "22P04", msg);
					}
					copy_abort(fo);
				}
			}
			copy_close(fo, fo->copy_discard, "pgcat: cross-shard COPY failed");
			return;   /* fo may be gone */
		case PqMsg_CopyFail: {
			if (l > 64 * 1024) {
				client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "CopyFail message too long");
				return;
			}
			if (have < (size_t)l + 1)
				return;
			char msg[300];
			size_t ml = l - 4 < sizeof msg - 1 ? l - 4 : sizeof msg - 1;
			evbuffer_drain(in, 5);
			evbuffer_remove(in, msg, ml);
			evbuffer_drain(in, l - 4 - ml);
			msg[ml] = '\0';
			char err[400];
			snprintf(err, sizeof err, "COPY from stdin failed: %s", msg);
			set_error(fo, "57014", err);
			copy_abort(fo);
			copy_close(fo, true, msg);
			return;
		}
		case PqMsg_Flush:
		case PqMsg_Sync:
			/* ignored during COPY, as PostgreSQL does */
			evbuffer_drain(in, 5);
			fo->skip_remaining = l - 4;
			break;
		default: {
			char msg[120];
			snprintf(msg, sizeof msg, "unexpected message type 0x%02X during COPY from stdin", h[0]);
			set_error(fo, SQLSTATE_PROTOCOL_VIOLATION, msg);
			evbuffer_drain(in, 5);
			fo->skip_remaining = l - 4;
			copy_abort(fo);
			copy_close(fo, true, msg);
			return;
		}
		}
	}
}

/* Every shard answered its BEGIN and COPY (or failed). */
static void copy_opened(struct fanout *fo)
{
	struct client *c = fo->c;
	bool in_copy[MERGE_MAX_SHARDS] = { false };
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		struct evbuffer *in = leg->io.in;
		size_t len = in ? evbuffer_get_length(in) : 0;
		const uint8_t *m = len ? evbuffer_pullup(in, (ev_ssize_t)len) : NULL;
		size_t off = 0;
		while (m && off + 5 <= len) {
			uint32_t l = proto_get_u32(m + off + 1);
			if (l < 4 || (size_t)l + 1 > len - off)
				break;
			const uint8_t *msg = m + off;
			size_t total = (size_t)l + 1;
			off += total;
			if (msg[0] == PqMsg_ErrorResponse && !fo->error) {
				if ((fo->error = malloc(total))) {
					memcpy(fo->error, msg, total);
					fo->error_len = total;
				}
			} else if (msg[0] == PqMsg_DataRow && i == 0 && fo->copy.key_position < 0 && total >= 11) {
				/* the position query's answer */
				uint32_t vl = proto_get_u32(msg + 7);
				char num[16];
				if (vl > 0 && vl < sizeof num && vl <= total - 11) {
					memcpy(num, msg + 11, vl);
					num[vl] = '\0';
					fo->copy.key_position = atoi(num);
				}
			} else if (msg[0] == PqMsg_CopyInResponse) {
				in_copy[i] = true;
				if (i == 0 && !fo->copy_in_response && (fo->copy_in_response = malloc(total))) {
					memcpy(fo->copy_in_response, msg, total);
					fo->copy_in_response_len = total;
				}
			}
		}
		if (leg->lost || leg->too_big)
			set_error(fo, SQLSTATE_CONNECTION_FAILURE, "cross-shard COPY: a shard's connection was lost");
		if (len)
			evbuffer_drain(in, len);
		leg->scanned = 0;
	}
	if (!fo->error && fo->copy.key_position < 0)
		set_error(fo, "42703", "cross-shard COPY: the sharding column was not found in the table");
	if (!fo->error && !fo->copy_in_response)
		set_error(fo, SQLSTATE_OUT_OF_MEMORY, "out of memory");
	struct copysplit_options o = fo->copy.opts;
	o.key_column = (unsigned)(fo->copy.key_position < 0 ? 0 : fo->copy.key_position);
	if (!fo->error) {
		copysplit_init(&fo->split, &o);
		fo->split_ready = true;
		for (int i = 0; i < fo->n_legs && !fo->error; i++)
			if (!(fo->legs[i].rows = evbuffer_new()))
				set_error(fo, SQLSTATE_OUT_OF_MEMORY, "out of memory");
	}
	if (fo->error) {
		/* the shards that opened their COPY fail it; then ROLLBACK */
		for (int i = 0; i < fo->n_legs; i++) {
			struct fanout_leg *leg = &fo->legs[i];
			leg->want_copy_in = false;
			leg->ready_needed = in_copy[i] ? 1 : 0;
			static const char msg[] = "pgcat: cross-shard COPY failed on another shard";
			if (in_copy[i] && leg->io_open && !leg->lost)
				put_msg(io_out(&leg->io), PqMsg_CopyFail, msg, sizeof msg, NULL, 0);
		}
		fo->phase = PHASE_COPY_CLOSE;
		begin_wait(fo);
		return;
	}
	evbuffer_add(client_output(c), fo->copy_in_response, fo->copy_in_response_len);
	fo->phase = PHASE_COPY_DATA;
	for (int i = 0; i < fo->n_legs; i++)
		fo->legs[i].done = true;   /* nothing awaited while rows flow */
	client_process(c);   /* rows the client sent already */
}

static void copy_finish(struct fanout *fo)
{
	switch (fo->phase) {
	case PHASE_COPY_OPEN:
		copy_opened(fo);
		return;
	case PHASE_COPY_CLOSE:
		for (int i = 0; i < fo->n_legs; i++)
			insert_take_reply(fo, &fo->legs[i]);
		if (!park(fo))
			write_end(fo);
		return;
	case PHASE_END: {
		bool failed_before = fo->error != NULL;
		for (int i = 0; i < fo->n_legs; i++)
			insert_take_reply(fo, &fo->legs[i]);
		if (!failed_before && fo->error)
			log_warning("C-%llu: a cross-shard COPY failed at COMMIT on a shard; the other shards committed",
				    (unsigned long long)fo->c->id);
		write_reply(fo);
		return;
	}
	case PHASE_RUN:
	case PHASE_COPY_DATA:
	case PHASE_INSERT_POSITION:
		return;
	}
}

enum fanout_start fanout_start_copy(struct client *c, const struct proto_frame *f, const struct router_rules *rules,
				    char *why, size_t whylen)
{
	struct pool *p = c->pool;
	int n_shards = (int)p->cpool->n_shards;
	struct evbuffer *in = c->io.in;
	why[0] = '\0';
	if (f->type != PqMsg_Query)
		return FANOUT_ANY_SHARD;   /* not a COPY (route refuses what it was) */
	size_t total = (size_t)f->len + 1;
	if (evbuffer_get_length(in) < total || total > FANOUT_REQUEST_MAX || n_shards > MERGE_MAX_SHARDS)
		return FANOUT_ANY_SHARD;
	const uint8_t *m = evbuffer_pullup(in, (ev_ssize_t)total);
	if (!m)
		return FANOUT_ANY_SHARD;
	const char *sql = (const char *)m + 5;
	size_t sql_len = strnlen(sql, total - 5);
	struct copy_route cr;
	char cwhy[MERGE_WHY];
	switch (copy_route_read(sql, sql_len, rules, &cr, cwhy)) {
	case COPY_ROUTE_NOT_COPY:
		return FANOUT_ANY_SHARD;
	case COPY_ROUTE_REFUSED:
		snprintf(why, whylen, "%s", cwhy);
		return FANOUT_REFUSED;
	case COPY_ROUTE_SPLIT:
		break;
	}
	char posq[1024];
	if (cr.key_position < 0 && !copy_route_position_query(&cr, posq, sizeof posq)) {
		snprintf(why, whylen, "cross-shard COPY: the table name is too long");
		return FANOUT_REFUSED;
	}
	struct fanout *fo = calloc(1, sizeof *fo + (size_t)n_shards * sizeof fo->legs[0]);
	if (!fo || !(fo->result = evbuffer_new())) {
		free(fo);
		snprintf(why, whylen, "cross-shard COPY: out of memory");
		return FANOUT_REFUSED;
	}
	fo->c = c;
	fo->kind = FANOUT_COPY;
	fo->phase = PHASE_COPY_OPEN;
	fo->copy = cr;
	fo->copy.opts.null_string = fo->copy.opts.null_string == cr.null_string ? fo->copy.null_string
										 : fo->copy.opts.null_string;
	for (int s = 0; s < n_shards && !why[0]; s++) {
		fo->n_legs = s + 1;
		if (!open_leg(fo, s, s, why, whylen))
			break;
		struct fanout_leg *leg = &fo->legs[s];
		leg->want_copy_in = true;
		leg->ready_needed = 1;
		if (s == 0 && cr.key_position < 0) {
			put_msg(io_out(&leg->io), PqMsg_Query, posq, strlen(posq) + 1, NULL, 0);
			leg->ready_needed++;
		}
		put_msg(io_out(&leg->io), PqMsg_Query, "BEGIN", 6, NULL, 0);
		put_msg(io_out(&leg->io), PqMsg_Query, sql, sql_len + 1, NULL, 0);
	}
	if (why[0]) {
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	evbuffer_drain(in, total);
	c->fanout = fo;
	client_set_state(c, CLIENT_FANOUT);
	log_debug("C-%llu: COPY split over %d shards", (unsigned long long)c->id, n_shards);
	return FANOUT_STARTED;
}

/* The parts of a Bind body after its two names: parameter formats,
 * values, result formats. */
struct bind_parts {
	const uint8_t *formats;       /* n_formats x int16 */
	uint16_t n_formats;
	const uint8_t *values;        /* n_values x (int32 len, bytes) */
	uint16_t n_values;
	const uint8_t *results;       /* int16 n, n x int16: copied as is */
	size_t results_len;
};

static bool read_bind_parts(const uint8_t *p, size_t len, struct bind_parts *b)
{
	size_t off = 0;
	if (len < 2)
		return false;
	b->n_formats = (uint16_t)(p[0] << 8 | p[1]);
	off = 2;
	if (len - off < 2 * (size_t)b->n_formats + 2)
		return false;
	b->formats = p + off;
	off += 2 * (size_t)b->n_formats;
	b->n_values = (uint16_t)(p[off] << 8 | p[off + 1]);
	off += 2;
	b->values = p + off;
	for (uint16_t i = 0; i < b->n_values; i++) {
		if (len - off < 4)
			return false;
		int32_t l = (int32_t)proto_get_u32(p + off);
		off += 4;
		if (l < -1 || (l > 0 && (size_t)l > len - off))
			return false;
		if (l > 0)
			off += (size_t)l;
	}
	b->results = p + off;
	b->results_len = len - off;
	return b->results_len >= 2;
}

/* Value k (0-based) of the Bind: its bytes with the length word. */
static const uint8_t *bind_value(const struct bind_parts *b, uint16_t k, size_t *total)
{
	const uint8_t *v = b->values;
	for (uint16_t i = 0;; i++) {
		int32_t l = (int32_t)proto_get_u32(v);
		size_t t = 4 + (l > 0 ? (size_t)l : 0);
		if (i == k) {
			*total = t;
			return v;
		}
		v += t;
	}
}

/* One shard's part of a split INSERT in the extended protocol: its
 * statement, and a Bind with the parameters it uses, renumbered. */
static void put_insert_part(struct evbuffer *out, const char *sql, size_t sql_len, const uint16_t *params,
			    uint16_t n_params, const uint8_t *types, uint16_t n_types, const struct bind_parts *b,
			    bool describe)
{
	uint8_t h[5] = { PqMsg_Parse };
	proto_put_u32(h + 1, (uint32_t)(4 + 1 + sql_len + 1 + 2 + 4 * (size_t)n_params));
	evbuffer_add(out, h, 5);
	evbuffer_add(out, "", 1);
	evbuffer_add(out, sql, sql_len + 1);
	uint8_t n16[2] = { (uint8_t)(n_params >> 8), (uint8_t)n_params };
	evbuffer_add(out, n16, 2);
	for (uint16_t k = 0; k < n_params; k++) {
		uint16_t old = params[k];
		static const uint8_t unknown[4] = { 0 };
		evbuffer_add(out, old <= n_types ? types + 4 * (old - 1) : unknown, 4);
	}
	/* Bind: formats (all alike, or one per kept parameter), values */
	size_t len = 4 + 2 + 2 + (b->n_formats > 1 ? 2 * (size_t)n_params : 2 * (size_t)b->n_formats) + 2 + b->results_len;
	for (uint16_t k = 0; k < n_params; k++) {
		size_t t = 4;
		if (params[k] <= b->n_values)
			(void)bind_value(b, (uint16_t)(params[k] - 1), &t);
		len += t;
	}
	h[0] = PqMsg_Bind;
	proto_put_u32(h + 1, (uint32_t)len);
	evbuffer_add(out, h, 5);
	evbuffer_add(out, "\0\0", 2);
	if (b->n_formats > 1) {
		evbuffer_add(out, n16, 2);
		for (uint16_t k = 0; k < n_params; k++) {
			static const uint8_t text[2] = { 0, 0 };
			evbuffer_add(out, params[k] <= b->n_formats ? b->formats + 2 * (params[k] - 1) : text, 2);
		}
	} else {
		uint8_t nf[2] = { 0, (uint8_t)b->n_formats };
		evbuffer_add(out, nf, 2);
		evbuffer_add(out, b->formats, 2 * (size_t)b->n_formats);
	}
	evbuffer_add(out, n16, 2);
	for (uint16_t k = 0; k < n_params; k++) {
		size_t t;
		if (params[k] <= b->n_values) {
			const uint8_t *v = bind_value(b, (uint16_t)(params[k] - 1), &t);
			evbuffer_add(out, v, t);
		} else {
			static const uint8_t null[4] = { 0xff, 0xff, 0xff, 0xff };   /* PostgreSQL refuses it as it would */
			evbuffer_add(out, null, 4);
		}
	}
	evbuffer_add(out, b->results, b->results_len);
	if (describe)
		put_msg(out, PqMsg_Describe, "P", 2, NULL, 0);
	put_msg(out, PqMsg_Execute, "\0\0\0\0", 5, NULL, 0);
	put_msg(out, PqMsg_Sync, NULL, 0, NULL, 0);
}

/* The client's INSERT request (m[0..len), whole) read again: its text,
 * parameter types and Bind. false: why says why not. */
struct insert_request {
	struct request r;
	const char *sql;
	const uint8_t *types;
	size_t types_len;
	struct bind_parts bp;
	struct shardkey_bind kb;
	bool describe;
};

static bool read_insert_request(struct client *c, const uint8_t *m, size_t lim, struct insert_request *q, char *why,
				size_t whylen)
{
	memset(q, 0, sizeof *q);
	char rwhy[200] = "";
	if (!m || !read_request(m, lim, &q->r, rwhy, sizeof rwhy)) {
		const char *reason = strchr(rwhy, ':');
		snprintf(why, whylen, "cross-shard write%s", reason ? reason : ": the request could not be read");
		return false;
	}
	struct request *r = &q->r;
	q->sql = r->query;
	if (!r->query) {
		bool stmt_describe = false;
		for (int i = 0; i < r->n_steps; i++)
			stmt_describe |= r->steps[i] == STEP_DESCRIBE_STMT;
		if (!r->has_execute || !r->has_sync || r->max_rows != 0 || stmt_describe) {
			snprintf(why, whylen, "cross-shard write: an INSERT whose rows go to several shards is split only as "
					      "Parse/Bind/Describe/Execute/Sync (or a simple Query)");
			return false;
		}
		if (r->parse && strcmp(r->parse_name, r->bind_stmt) == 0) {
			q->sql = r->parse_sql;
			q->types = r->parse_types;
			q->types_len = r->parse_types_len;
		} else if (!bound_statement(c, r->bind_stmt, &q->sql, &q->types, &q->types_len)) {
			snprintf(why, whylen, "cross-shard write: the prepared statement is not known to pgcat");
			return false;
		}
		if (!read_bind_parts(r->bind_rest, r->bind_rest_len, &q->bp) ||
		    !shardkey_param_types(q->types, q->types_len, &q->kb.types, &q->kb.n_types)) {
			snprintf(why, whylen, "cross-shard write: malformed Bind");
			return false;
		}
		q->kb.body = (const uint8_t *)r->bind_portal;
		q->kb.len = r->bind_len;
	}
	for (int i = 0; i < r->n_steps; i++)
		q->describe |= r->steps[i] == STEP_DESCRIBE_PORTAL;
	return true;
}

/* Each shard's part of the split: BEGIN and its rows; a shard without rows
 * (legs of every shard, after a position query) BEGIN only. */
static void insert_send_parts(struct fanout *fo, const struct insert_split *split, const struct insert_request *q)
{
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		int s = leg->shard;
		struct evbuffer *out = io_out(&leg->io);
		leg->begin_pending = true;
		leg->ready_needed = split->sql[s] ? 2 : 1;
		put_msg(out, PqMsg_Query, "BEGIN", 6, NULL, 0);
		if (!split->sql[s])
			continue;
		if (q->r.query)
			put_msg(out, PqMsg_Query, split->sql[s], split->len[s] + 1, NULL, 0);
		else
			put_insert_part(out, split->sql[s], strlen(split->sql[s]), split->params[s], split->n_params[s],
					q->kb.types, q->kb.n_types, &q->bp, q->describe);
	}
}

enum fanout_start fanout_start_insert(struct client *c, const struct proto_frame *f, const struct router_rules *rules,
				      char *why, size_t whylen)
{
	struct pool *p = c->pool;
	const struct config_pool *cp = p->cpool;
	int n_shards = (int)cp->n_shards;
	struct evbuffer *in = c->io.in;
	why[0] = '\0';
	(void)f;
	size_t have = evbuffer_get_length(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = evbuffer_pullup(in, (ev_ssize_t)lim);
	struct insert_request q;
	if (!read_insert_request(c, m, lim, &q, why, whylen)) {
		/* Parse/Describe only (asyncpg prepares first): nothing to split
		 * yet, any shard describes it; its Bind comes back here */
		if (!q.r.query && !q.r.has_bind && !q.r.has_execute && (q.r.has_sync || q.r.has_flush))
			return q.r.has_flush ? FANOUT_ANY_SHARD_FLUSH : FANOUT_ANY_SHARD;
		return FANOUT_REFUSED;
	}
	struct insert_split split;
	char swhy[MERGE_WHY];
	bool position = false;
	char posq[1024];
	if (!insert_split_build(q.sql, strlen(q.sql), rules, cp->sharding_function, n_shards, q.r.query ? NULL : &q.kb,
				&split, swhy)) {
		/* no column list: where the sharding column sits is asked of
		 * shard 0 first (as for COPY), then the rows are split */
		struct copy_route cr;
		memset(&cr, 0, sizeof cr);
		snprintf(cr.schema, sizeof cr.schema, "%s", split.schema);
		snprintf(cr.table, sizeof cr.table, "%s", split.table);
		snprintf(cr.column, sizeof cr.column, "%s", split.column);
		position = split.needs_position && copy_route_position_query(&cr, posq, sizeof posq);
		if (!position) {
			insert_split_free(&split);
			snprintf(why, whylen, "%s", swhy);
			return FANOUT_REFUSED;
		}
	}
	int n_legs = 0;
	for (int s = 0; s < n_shards; s++)
		n_legs += position || split.sql[s] != NULL;
	/* (a refused split holds no parts; its names are used below) */
	struct fanout *fo = calloc(1, sizeof *fo + (size_t)n_legs * sizeof fo->legs[0]);
	if (!fo || !(fo->result = evbuffer_new()) || (position && !(fo->req_copy = malloc(q.r.end)))) {
		if (fo && fo->result)
			evbuffer_free(fo->result);
		free(fo);
		insert_split_free(&split);
		snprintf(why, whylen, "cross-shard write: out of memory");
		return FANOUT_REFUSED;
	}
	fo->c = c;
	fo->kind = FANOUT_INSERT;
	fo->phase = position ? PHASE_INSERT_POSITION : PHASE_RUN;
	fo->extended = q.r.query == NULL;
	memcpy(fo->steps, q.r.steps, sizeof q.r.steps);
	fo->n_steps = q.r.n_steps;
	if (position) {
		snprintf(fo->ins_schema, sizeof fo->ins_schema, "%s", split.schema);
		snprintf(fo->ins_table, sizeof fo->ins_table, "%s", split.table);
		snprintf(fo->ins_column, sizeof fo->ins_column, "%s", split.column);
	}
	if (q.r.parse && q.r.parse_name[0] && (fo->parse_msg = malloc(q.r.parse_total))) {
		memcpy(fo->parse_msg, q.r.parse, q.r.parse_total);
		fo->parse_len = q.r.parse_total;
	}
	if (position) {
		memcpy(fo->req_copy, m, q.r.end);
		fo->req_len = q.r.end;
	}
	int made = 0;
	for (int s = 0; s < n_shards && !why[0]; s++) {
		if (!position && !split.sql[s])
			continue;
		fo->n_legs = made + 1;
		if (!open_leg(fo, made, s, why, whylen))
			break;
		struct fanout_leg *leg = &fo->legs[made++];
		if (position) {
			/* every shard answers alike: each leg has something to wait for */
			leg->ready_needed = 1;
			put_msg(io_out(&leg->io), PqMsg_Query, posq, strlen(posq) + 1, NULL, 0);
		}
	}
	if (!position && !why[0])
		insert_send_parts(fo, &split, &q);
	insert_split_free(&split);
	if (why[0]) {
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	evbuffer_drain(in, q.r.end);
	c->fanout = fo;
	client_set_state(c, CLIENT_FANOUT);
	log_debug("C-%llu: INSERT split over %d shards%s", (unsigned long long)c->id, n_legs,
		  position ? " (asking where the sharding column is)" : "");
	return FANOUT_STARTED;
}

/* The position query's answers are in: the sharding column's place in the
 * table; the rows are split by it and sent. */
static void insert_positioned(struct fanout *fo)
{
	int position = -1;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		struct evbuffer *in = leg->io.in;
		size_t len = in ? evbuffer_get_length(in) : 0;
		const uint8_t *m = len ? evbuffer_pullup(in, (ev_ssize_t)len) : NULL;
		size_t off = 0;
		while (m && off + 5 <= len) {
			uint32_t l = proto_get_u32(m + off + 1);
			if (l < 4 || (size_t)l + 1 > len - off)
				break;
			const uint8_t *msg = m + off;
			size_t total = (size_t)l + 1;
			off += total;
			if (msg[0] == PqMsg_ErrorResponse && !fo->error && (fo->error = malloc(total))) {
				memcpy(fo->error, msg, total);
				fo->error_len = total;
			} else if (msg[0] == PqMsg_DataRow && i == 0 && total >= 11) {
				uint32_t vl = proto_get_u32(msg + 7);
				char num[16];
				if (vl > 0 && vl < sizeof num && vl <= total - 11) {
					memcpy(num, msg + 11, vl);
					num[vl] = '\0';
					position = atoi(num);
				}
			}
		}
		if ((leg->lost || leg->too_big) && !fo->error)
			set_error(fo, SQLSTATE_CONNECTION_FAILURE, "cross-shard write: a shard's connection was lost");
		if (len)
			evbuffer_drain(in, len);
		leg->scanned = 0;
	}
	if (!fo->error && position < 0)
		set_error(fo, "42703", "cross-shard write: the sharding column was not found in the table");
	struct insert_request q;
	struct insert_split split;
	char why[MERGE_WHY];
	const struct config_pool *cp = fo->c->pool->cpool;
	/* the rules: the one sharded table of the statement */
	struct router_table t = { fo->ins_schema[0] ? fo->ins_schema : NULL, fo->ins_table, fo->ins_column };
	struct router_rules rules = { .sharded = &t, .n_sharded = 1, .max_length = SIZE_MAX };
	if (!fo->error) {
		if (!read_insert_request(fo->c, fo->req_copy, fo->req_len, &q, why, sizeof why))
			set_error(fo, SQLSTATE_FEATURE_NOT_SUPPORTED, why);
		else if (!insert_split_build_at(q.sql, strlen(q.sql), &rules, cp->sharding_function, fo->n_legs,
						q.r.query ? NULL : &q.kb, position, &split, why))
			set_error(fo, SQLSTATE_FEATURE_NOT_SUPPORTED, why);
		else {
			fo->phase = PHASE_RUN;
			insert_send_parts(fo, &split, &q);
			insert_split_free(&split);
			begin_wait(fo);
			return;
		}
	}
	write_reply(fo);   /* nothing began anywhere: the error alone */
}

enum fanout_start fanout_start_broadcast(struct client *c, const struct router_rules *rules, char *why,
					 size_t whylen)
{
	struct pool *p = c->pool;
	int n_shards = (int)p->cpool->n_shards;
	struct evbuffer *in = c->io.in;
	why[0] = '\0';
	if (c->held_begin) {
		snprintf(why, whylen, "cross-shard write: a write that runs on every shard cannot run inside a transaction; "
				      "use SET SHARD or send it on its own");
		return FANOUT_REFUSED;
	}
	size_t have = evbuffer_get_length(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = evbuffer_pullup(in, (ev_ssize_t)lim);
	struct request r;
	char rwhy[200] = "";
	if (!m || !read_request(m, lim, &r, rwhy, sizeof rwhy)) {
		const char *reason = strchr(rwhy, ':');
		snprintf(why, whylen, "cross-shard write%s", reason ? reason : ": the request could not be read");
		return FANOUT_REFUSED;
	}
	const char *sql = r.query;
	const uint8_t *types = NULL;
	size_t types_len = 0;
	struct bind_parts bp = { 0 };
	struct shardkey_bind kb = { 0 };
	if (!r.query) {
		bool stmt_describe = false;
		for (int i = 0; i < r.n_steps; i++)
			stmt_describe |= r.steps[i] == STEP_DESCRIBE_STMT;
		if (!r.has_execute || !r.has_sync || r.max_rows != 0 || stmt_describe) {
			snprintf(why, whylen, "cross-shard write: a write that runs on every shard is sent only as "
					      "Parse/Bind/Describe/Execute/Sync (or a simple Query)");
			return FANOUT_REFUSED;
		}
		if (r.parse && strcmp(r.parse_name, r.bind_stmt) == 0) {
			sql = r.parse_sql;
			types = r.parse_types;
			types_len = r.parse_types_len;
		} else if (!bound_statement(c, r.bind_stmt, &sql, &types, &types_len)) {
			snprintf(why, whylen, "cross-shard write: the prepared statement is not known to pgcat");
			return FANOUT_REFUSED;
		}
		if (!read_bind_parts(r.bind_rest, r.bind_rest_len, &bp) ||
		    !shardkey_param_types(types, types_len, &kb.types, &kb.n_types)) {
			snprintf(why, whylen, "cross-shard write: malformed Bind");
			return FANOUT_REFUSED;
		}
	}
	bool outside_tx;
	char bwhy[MERGE_WHY];
	if (!broadcast_write_check(sql, strlen(sql), rules, &outside_tx, bwhy)) {
		snprintf(why, whylen, "%s", bwhy);
		return FANOUT_REFUSED;
	}
	/* every parameter, as numbered */
	uint16_t *all = NULL;
	if (!r.query && bp.n_values > 0) {
		all = malloc((size_t)bp.n_values * sizeof *all);
		if (!all) {
			snprintf(why, whylen, "cross-shard write: out of memory");
			return FANOUT_REFUSED;
		}
		for (uint16_t k = 0; k < bp.n_values; k++)
			all[k] = (uint16_t)(k + 1);
	}
	struct fanout *fo = calloc(1, sizeof *fo + (size_t)n_shards * sizeof fo->legs[0]);
	if (!fo || !(fo->result = evbuffer_new())) {
		free(fo);
		free(all);
		snprintf(why, whylen, "cross-shard write: out of memory");
		return FANOUT_REFUSED;
	}
	fo->c = c;
	fo->kind = FANOUT_BROADCAST;
	fo->phase = PHASE_RUN;
	fo->extended = r.query == NULL;
	memcpy(fo->steps, r.steps, sizeof r.steps);
	fo->n_steps = r.n_steps;
	bool describe = false;
	for (int i = 0; i < r.n_steps; i++)
		describe |= r.steps[i] == STEP_DESCRIBE_PORTAL;
	if (r.parse && r.parse_name[0] && (fo->parse_msg = malloc(r.parse_total))) {
		memcpy(fo->parse_msg, r.parse, r.parse_total);
		fo->parse_len = r.parse_total;
	}
	for (int s = 0; s < n_shards && !why[0]; s++) {
		fo->n_legs = s + 1;
		if (!open_leg(fo, s, s, why, whylen))
			break;
		struct fanout_leg *leg = &fo->legs[s];
		struct evbuffer *out = io_out(&leg->io);
		/* In a transaction on each shard, committed only once every shard
		 * succeeded; what PostgreSQL runs only outside one goes alone. */
		leg->ready_needed = outside_tx ? 1 : 2;
		leg->begin_pending = !outside_tx;
		if (!outside_tx)
			put_msg(out, PqMsg_Query, "BEGIN", 6, NULL, 0);
		if (r.query)
			put_msg(out, PqMsg_Query, r.query, strlen(r.query) + 1, NULL, 0);
		else
			put_insert_part(out, sql, strlen(sql), all, bp.n_values, kb.types, kb.n_types, &bp, describe);
	}
	free(all);
	if (why[0]) {
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	evbuffer_drain(in, r.end);
	c->fanout = fo;
	client_set_state(c, CLIENT_FANOUT);
	log_debug("C-%llu: write sent to all %d shards", (unsigned long long)c->id, n_shards);
	return FANOUT_STARTED;
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

/* ---- a split write parked inside the client's transaction ---- */

bool fanout_parked_message(struct client *c, const struct proto_frame *f)
{
	struct fanout *fo = c->xshard ? c->xshard->parked : NULL;
	if (!fo)
		return false;
	struct evbuffer *in = c->io.in;
	size_t have = evbuffer_get_length(in), lim = have < 4096 ? have : 4096;
	const uint8_t *m = evbuffer_pullup(in, (ev_ssize_t)lim);
	const char *tag = NULL;
	size_t end = 0;
	uint8_t prefix[16];
	size_t prefix_len = 0;
	if (!m)
		return false;
	if (f->type == PqMsg_Query && (size_t)f->len + 1 <= lim) {
		tag = route_plain_end_tag((const char *)m + 5, strnlen((const char *)m + 5, f->len - 4));
		end = (size_t)f->len + 1;
	} else if (f->type == PqMsg_Parse || f->type == PqMsg_Bind) {
		/* pgjdbc: [Parse "COMMIT"], Bind, [Describe], Execute, Sync */
		size_t off = 0;
		const char *sql = NULL;
		while (lim - off >= 5) {
			uint8_t type = m[off];
			uint32_t l = proto_get_u32(m + off + 1);
			if (l < 4 || (size_t)l + 1 > lim - off)
				break;
			const uint8_t *body = m + off + 5;
			size_t blen = l - 4, b = 0;
			const char *s1, *s2;
			static const uint8_t one[5] = { PqMsg_ParseComplete, 0, 0, 0, 4 }, two[5] = { PqMsg_BindComplete, 0, 0, 0, 4 },
					     none[5] = { PqMsg_NoData, 0, 0, 0, 4 };
			if (type == PqMsg_Parse && off == 0 && proto_read_cstring(body, blen, &b, &s1) &&
			    proto_read_cstring(body, blen, &b, &s2)) {
				sql = s2;
				memcpy(prefix + prefix_len, one, 5);
				prefix_len += 5;
			} else if (type == PqMsg_Bind && prefix_len <= 5 && proto_read_cstring(body, blen, &b, &s1) &&
				   proto_read_cstring(body, blen, &b, &s2)) {
				const uint8_t *key;
				size_t keylen;
				if (!sql && prep_client_statement(c, s2, &key, &keylen))
					sql = (const char *)key;
				memcpy(prefix + prefix_len, two, 5);
				prefix_len += 5;
			} else if (type == PqMsg_Describe && prefix_len >= 5 && prefix_len <= 10) {
				memcpy(prefix + prefix_len, none, 5);
				prefix_len += 5;
			} else if (type == PqMsg_Execute && sql) {
				/* (its CommandComplete is the end's) */
			} else if (type == PqMsg_Sync && sql) {
				tag = route_plain_end_tag(sql, strlen(sql));
				end = off + (size_t)l + 1;
				break;
			} else {
				break;
			}
			off += (size_t)l + 1;
		}
		if (!end && lim == have && have < 4096)
			return true;   /* the rest of the request first (consumed nothing) */
	}
	if (!tag) {
		/* Anything else would run without the rows the shards hold in
		 * their open transactions: they roll back (the legs close), and
		 * the transaction fails here as it would on a server. */
		c->xshard->parked = NULL;
		fanout_free(fo);
		free(c->held_begin);
		c->held_begin = NULL;
		client_fail_transaction(c, SQLSTATE_FEATURE_NOT_SUPPORTED,
					"cross-shard transaction: after a write split across shards only COMMIT or ROLLBACK can "
					"follow in its transaction (the write is rolled back)");
		return false;   /* the message is answered as in a failed transaction */
	}
	evbuffer_drain(in, end);
	c->xshard->parked = NULL;
	c->fanout = fo;
	fo->parked = false;
	snprintf(fo->end_tag, sizeof fo->end_tag, "%s", tag);
	memcpy(fo->end_prefix, prefix, prefix_len);
	fo->end_prefix_len = prefix_len;
	fo->rollback = strcmp(tag, "COMMIT") != 0;
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].lost || !fo->legs[i].io_open) {
			/* a shard lost meanwhile: none commits */
			set_error(fo, SQLSTATE_CONNECTION_FAILURE,
				  "cross-shard transaction: a shard's connection was lost; the transaction is rolled back");
			fo->rollback = true;
		}
	client_set_state(c, CLIENT_FANOUT);
	write_end(fo);
	return true;
}

void fanout_parked_abort(struct client *c)
{
	struct fanout *fo = c->xshard ? c->xshard->parked : NULL;
	if (!fo)
		return;
	c->xshard->parked = NULL;
	fanout_free(fo);
}

/* ---- one statement bound many times: each Bind on its shard ---- */

/* psycopg's and asyncpg's executemany and pgjdbc's executeBatch send one
 * request: [Parse], then (Bind, [Describe portal], Execute) for every set
 * of parameters, then Sync. Each Bind has its own key: the Binds are
 * grouped by shard, each shard runs its group in a transaction (BEGIN,
 * Parse, its Binds, Sync), and every shard commits only when all of them
 * succeeded, as the request would have in one PostgreSQL. The client gets
 * each Bind's replies in its own order. */

#define BATCH_MAX_BINDS 65535

enum fanout_start fanout_start_batch(struct client *c, const struct router_rules *rules, char *why, size_t whylen)
{
	struct pool *p = c->pool;
	const struct config_pool *cp = p->cpool;
	int n_shards = (int)cp->n_shards;
	struct evbuffer *in = c->io.in;
	why[0] = '\0';
	size_t have = evbuffer_get_length(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = evbuffer_pullup(in, (ev_ssize_t)lim);
	if (!m || lim < 5 || (m[0] != PqMsg_Parse && m[0] != PqMsg_Bind))
		return FANOUT_ANY_SHARD;
	/* the shape, first: anything else is not a batch. Flush may come
	 * between (psycopg sends its Binds, Flush, then Sync). */
	const char *name = NULL, *sql = NULL;
	const uint8_t *types = NULL, *parse = NULL;
	size_t types_len = 0, parse_total = 0, off = 0, end = 0;
	uint32_t n_binds = 0, cap = 0, *bind_off = NULL;
	bool describe = false, complete = true, last_flush = false;
	enum fanout_start verdict = FANOUT_ANY_SHARD;
	while (!end) {
		if (lim - off < 5) {
			complete = false;
			break;
		}
		uint8_t type = m[off];
		uint32_t l = proto_get_u32(m + off + 1);
		if (l < 4)
			goto out;
		if ((size_t)l + 1 > lim - off) {
			complete = false;
			break;
		}
		const uint8_t *body = m + off + 5;
		size_t blen = l - 4, b = 0;
		const char *s1, *s2;
		last_flush = type == PqMsg_Flush;
		if (type == PqMsg_Parse && off == 0) {
			if (!proto_read_cstring(body, blen, &b, &s1) || !proto_read_cstring(body, blen, &b, &s2) || blen - b < 2)
				goto out;
			name = s1;
			sql = s2;
			types = body + b;
			types_len = blen - b;
			parse = m;
			parse_total = (size_t)l + 1;
		} else if (type == PqMsg_Bind) {
			if (!proto_read_cstring(body, blen, &b, &s1) || !proto_read_cstring(body, blen, &b, &s2) || s1[0] ||
			    (name && strcmp(s2, name) != 0))
				goto out;
			if (!name)
				name = s2;
			/* then [Describe P ""], Execute "" (any row limit: pgjdbc asks 1 of an INSERT) */
			size_t o2 = off + (size_t)l + 1, need = o2 + 10 + (n_binds == 0 || describe ? 7 : 0);
			if (lim < need && lim - o2 < 5) {
				complete = false;
				break;
			}
			bool d = m[o2] == PqMsg_Describe;
			if (n_binds > 0 && d != describe)
				goto out;
			if (d) {
				if (lim - o2 < 7) {
					complete = false;
					break;
				}
				if (proto_get_u32(m + o2 + 1) != 6 || m[o2 + 5] != 'P' || m[o2 + 6] != 0)
					goto out;
				o2 += 7;
			}
			if (lim - o2 < 10) {
				complete = false;
				break;
			}
			if (m[o2] != PqMsg_Execute || proto_get_u32(m + o2 + 1) != 9 || m[o2 + 5] != 0)
				goto out;
			describe = d;
			if (n_binds == BATCH_MAX_BINDS)
				goto out;
			if (n_binds == cap) {
				uint32_t ncap = cap ? cap * 2 : 64;
				uint32_t *nb = realloc(bind_off, ncap * sizeof *nb);
				if (!nb)
					goto out;
				bind_off = nb;
				cap = ncap;
			}
			bind_off[n_binds++] = (uint32_t)off;
			off = o2 + 10;
			continue;
		} else if (type == PqMsg_Flush && off > 0) {
			/* nothing to flush before the whole batch is answered */
		} else if (type == PqMsg_Sync && n_binds > 0) {
			end = off + 5;
			break;
		} else {
			goto out;
		}
		off += (size_t)l + 1;
	}
	if (!complete) {
		/* a batch so far: the rest (up to its Sync) before deciding. But
		 * a client may wait for the results of its Flush before sending
		 * Sync (psycopg's executemany with returning=True): if nothing
		 * comes for a while after the Flush, refuse instead of hanging. */
		bool flushed = last_flush && off == lim;
		if (n_binds >= 2 && lim == have && flushed && c->xshard && c->xshard->batch_no_wait) {
			snprintf(why, whylen, "cross-shard write: a batch whose results are awaited before its Sync (psycopg's "
					      "executemany with returning=True) cannot be split by shard; send it without "
					      "returning, or one statement at a time");
			verdict = FANOUT_REFUSED;
		} else if (n_binds >= 2 && lim == have) {
			if (c->io.read_high < FANOUT_REQUEST_MAX)
				c->io.read_high = FANOUT_REQUEST_MAX;
			struct client_xshard *xs = flushed ? fanout_xshard(c) : NULL;
			if (xs && !xs->batch_wait_since_us) {
				xs->batch_wait_since_us = c->w->now_us;
				c->w->batch_waiters = true;
			}
			verdict = FANOUT_WAIT;
		} else if (n_binds >= 2) {
			snprintf(why, whylen, "cross-shard write: a batch for several shards is split up to 1 MB before its Sync; "
					      "send it in smaller parts");
			verdict = FANOUT_REFUSED;
		}
		goto out;
	}
	if (n_binds < 2)
		goto out;
	verdict = FANOUT_REFUSED;
	if (!parse && !bound_statement(c, name, &sql, &types, &types_len)) {
		snprintf(why, whylen, "cross-shard write: the prepared statement is not known to pgcat");
		goto out;
	}
	struct router_verdict v;
	struct shardkey_bind kb = { 0 };
	router_classify(sql, strlen(sql), rules, &v);
	if (!shardkey_param_types(types, types_len, &kb.types, &kb.n_types)) {
		snprintf(why, whylen, "cross-shard write: malformed Parse");
		goto out;
	}
	if (!v.parsed || v.multi_statement || v.begins || v.ends) {
		snprintf(why, whylen, "cross-shard write: this batch cannot be split by shard");
		goto out;
	}
	/* each Bind's shard */
	uint16_t *leg_of = calloc(n_binds, sizeof *leg_of);
	uint32_t *idx = calloc(n_binds, sizeof *idx);
	uint32_t per_shard[MERGE_MAX_SHARDS] = { 0 };
	int leg_index[MERGE_MAX_SHARDS];
	if (!leg_of || !idx || n_shards > MERGE_MAX_SHARDS) {
		free(leg_of);
		free(idx);
		snprintf(why, whylen, "cross-shard write: out of memory");
		goto out;
	}
	for (uint32_t k = 0; k < n_binds; k++) {
		uint32_t l = proto_get_u32(m + bind_off[k] + 1);
		kb.body = m + bind_off[k] + 5;
		kb.len = l - 4;
		struct shardkey_result res;
		shardkey_resolve(&v, cp->sharding_function, n_shards, &kb, 1, &res);
		if (res.outcome != SHARDKEY_ONE || res.shard < 0 || res.shard >= n_shards) {
			free(leg_of);
			free(idx);
			snprintf(why, whylen, "cross-shard write: a batch whose statements go to several shards is split only when "
					      "each one has its sharding key; statement %u has none", k + 1);
			goto out;
		}
		leg_of[k] = (uint16_t)res.shard;   /* a shard for now: legs below */
		idx[k] = per_shard[res.shard]++;
	}
	int n_legs = 0;
	for (int s = 0; s < n_shards; s++)
		leg_index[s] = per_shard[s] ? n_legs++ : -1;
	struct fanout *fo = calloc(1, sizeof *fo + (size_t)n_legs * sizeof fo->legs[0]);
	if (!fo || !(fo->result = evbuffer_new())) {
		free(fo);
		free(leg_of);
		free(idx);
		snprintf(why, whylen, "cross-shard write: out of memory");
		goto out;
	}
	fo->c = c;
	fo->kind = FANOUT_BATCH;
	fo->phase = PHASE_RUN;
	fo->extended = true;
	fo->batch_leg = leg_of;
	fo->batch_idx = idx;
	fo->n_batch = n_binds;
	fo->batch_parse = parse != NULL;
	if (parse && name[0] && (fo->parse_msg = malloc(parse_total))) {
		memcpy(fo->parse_msg, parse, parse_total);
		fo->parse_len = (uint32_t)parse_total;
	}
	size_t sql_len = strlen(sql);
	for (int s = 0; s < n_shards && !why[0]; s++) {
		int li = leg_index[s];
		if (li < 0)
			continue;
		fo->n_legs = li + 1;
		if (!open_leg(fo, li, s, why, whylen))
			break;
		struct fanout_leg *leg = &fo->legs[li];
		if (!(leg->rows = evbuffer_new()) || !(leg->unit_len = calloc(per_shard[s], sizeof *leg->unit_len))) {
			snprintf(why, whylen, "cross-shard write: out of memory");
			break;
		}
		leg->cap_units = per_shard[s];
		leg->ready_needed = 2;
		leg->begin_pending = true;
		struct evbuffer *out = io_out(&leg->io);
		put_msg(out, PqMsg_Query, "BEGIN", 6, NULL, 0);
		/* the statement unnamed; each of this shard's Binds as the client sent it */
		uint8_t h[5] = { PqMsg_Parse };
		proto_put_u32(h + 1, (uint32_t)(4 + 1 + sql_len + 1 + types_len));
		evbuffer_add(out, h, 5);
		evbuffer_add(out, "", 1);
		evbuffer_add(out, sql, sql_len + 1);
		evbuffer_add(out, types, types_len);
		for (uint32_t k = 0; k < n_binds; k++) {
			if (leg_of[k] != (uint16_t)s)
				continue;
			size_t bo = bind_off[k], b = 0;
			uint32_t l = proto_get_u32(m + bo + 1);
			const char *portal, *stmt;
			const uint8_t *body = m + bo + 5;
			(void)proto_read_cstring(body, l - 4, &b, &portal);
			(void)proto_read_cstring(body, l - 4, &b, &stmt);
			const uint8_t *ex = m + bo + (size_t)l + 1 + (describe ? 7 : 0);
			put_msg(out, PqMsg_Bind, "\0", 2, body + b, l - 4 - b);
			if (describe)
				put_msg(out, PqMsg_Describe, "P", 2, NULL, 0);
			put_msg(out, PqMsg_Execute, ex + 5, 5, NULL, 0);   /* "" and the client's row limit */
		}
		put_msg(out, PqMsg_Sync, NULL, 0, NULL, 0);
	}
	for (uint32_t k = 0; k < n_binds; k++)
		leg_of[k] = (uint16_t)leg_index[leg_of[k]];
	if (why[0]) {
		fanout_free(fo);
		goto out;
	}
	evbuffer_drain(in, end);
	c->fanout = fo;
	client_set_state(c, CLIENT_FANOUT);
	log_debug("C-%llu: a batch of %u statements split over %d shards", (unsigned long long)c->id, n_binds, n_legs);
	verdict = FANOUT_STARTED;
out:
	free(bind_off);
	if (verdict != FANOUT_WAIT && c->xshard) {
		c->xshard->batch_wait_since_us = 0;
		c->xshard->batch_no_wait = false;
	}
	return verdict;
}

/* A shard's replies to its Binds: one unit each, from BindComplete to
 * CommandComplete; its error, if any. */
static void batch_take_reply(struct fanout *fo, struct fanout_leg *leg)
{
	struct evbuffer *in = leg->io.in;
	size_t len = in ? evbuffer_get_length(in) : 0;
	const uint8_t *m = len ? evbuffer_pullup(in, (ev_ssize_t)len) : NULL;
	size_t off = 0, unit_start = 0;
	bool in_unit = false;
	while (m && off + 5 <= len) {
		uint8_t type = m[off];
		uint32_t l = proto_get_u32(m + off + 1);
		if (l < 4 || (size_t)l + 1 > len - off)
			break;
		size_t total = (size_t)l + 1;
		const uint8_t *msg = m + off;
		if (type == PqMsg_ErrorResponse) {
			if (!leg->error && (leg->error = malloc(total))) {
				memcpy(leg->error, msg, total);
				leg->error_len = total;
			}
			if (!fo->error && (fo->error = malloc(total))) {
				memcpy(fo->error, msg, total);
				fo->error_len = total;
			}
			in_unit = false;
		} else if (type == PqMsg_CommandComplete && leg->begin_pending) {
			leg->begin_pending = false;   /* BEGIN's */
		} else if (type == PqMsg_ParseComplete) {
			leg->parsed = true;
		} else if (type == PqMsg_BindComplete) {
			in_unit = true;
			unit_start = off;
		} else if (in_unit && (type == PqMsg_CommandComplete || type == PqMsg_EmptyQueryResponse ||
				       type == PqMsg_PortalSuspended)) {
			if (leg->n_units < leg->cap_units) {
				evbuffer_add(leg->rows, m + unit_start, off + total - unit_start);
				leg->unit_len[leg->n_units++] = off + total - unit_start;
			}
			in_unit = false;
		}
		off += total;
	}
	if ((leg->lost || leg->too_big) && !leg->error) {
		char why[160];
		snprintf(why, sizeof why, "cross-shard write: shard %d: %s", leg->shard,
			 leg->too_big ? "the reply is too large" : "the connection was lost before the reply was complete");
		uint8_t storage[256];
		struct pktbuf pb;
		pktbuf_init(&pb, storage, sizeof storage);
		pktbuf_error(&pb, "ERROR", leg->lost ? SQLSTATE_CONNECTION_FAILURE : "54000", why);
		if (!pb.failed && (leg->error = malloc(pb.len))) {
			memcpy(leg->error, pb.data, pb.len);
			leg->error_len = pb.len;
			if (!fo->error && (fo->error = malloc(pb.len))) {
				memcpy(fo->error, pb.data, pb.len);
				fo->error_len = pb.len;
			}
		}
	}
	if (len)
		evbuffer_drain(in, len);
	leg->scanned = 0;
}

static void batch_finish(struct fanout *fo)
{
	if (fo->phase != PHASE_END) {
		for (int i = 0; i < fo->n_legs; i++)
			batch_take_reply(fo, &fo->legs[i]);
		if (!park(fo))
			write_end(fo);   /* every shard took its statements, or none keeps them */
		return;
	}
	bool failed_before = fo->error != NULL;
	for (int i = 0; i < fo->n_legs; i++)
		insert_take_reply(fo, &fo->legs[i]);   /* COMMIT's or ROLLBACK's errors */
	if (!failed_before && fo->error)
		log_warning("C-%llu: a cross-shard batch failed at COMMIT on a shard; the other shards committed",
			    (unsigned long long)fo->c->id);
	if (fo->end_tag[0]) {
		write_end_reply(fo);
		return;
	}
	struct client *c = fo->c;
	struct evbuffer *out = client_output(c);
	batch_put_result(fo, out);
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)(c->held_begin ? 'T' : 'I') };
	evbuffer_add(out, z, sizeof z);
	c->fanout = NULL;
	fanout_free(fo);
	client_on_released(c);
}

/* A batch's answer: each Bind's replies in the client's order. */
static void batch_put_result(struct fanout *fo, struct evbuffer *out)
{
	struct client *c = fo->c;
	static const uint8_t parse_complete[5] = { PqMsg_ParseComplete, 0, 0, 0, 4 };
	bool parsed = true;
	for (int i = 0; i < fo->n_legs; i++)
		parsed &= fo->legs[i].parsed;
	if (fo->batch_parse && parsed) {
		evbuffer_add(out, parse_complete, 5);
		/* the client's named statement exists, whatever its Binds did */
		if (fo->parse_msg && prep_enabled(c))
			(void)prep_client_adopt(c, fo->parse_msg, fo->parse_len);
	}
	/* each Bind's replies in the client's order, up to the first that a
	 * shard did not complete: there its error */
	const uint8_t *error = fo->error;
	size_t error_len = fo->error_len;
	uint32_t *taken = calloc((size_t)fo->n_legs, sizeof *taken);
	for (uint32_t k = 0; taken && k < fo->n_batch; k++) {
		struct fanout_leg *leg = &fo->legs[fo->batch_leg[k]];
		if (fo->batch_idx[k] >= leg->n_units) {
			if (leg->error) {
				error = leg->error;
				error_len = leg->error_len;
			}
			break;
		}
		evbuffer_remove_buffer(leg->rows, out, leg->unit_len[fo->batch_idx[k]]);
		taken[fo->batch_leg[k]]++;
	}
	free(taken);
	if (error)
		evbuffer_add(out, error, error_len);
}
