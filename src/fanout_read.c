/* SPDX-License-Identifier: MIT */
/*
 * fanout_read: a cross-shard read (include/fanout.h): the one statement
 * sent to every shard, and the shards' replies read as they come. Each
 * leg's reply is walked up to its rows (its acknowledgements and
 * descriptions kept); once every shard got there, the client's reply goes
 * out step by step, its rows merged by merge_stream.c while each leg is
 * read only a window ahead (FANOUT_READ_WINDOW) and the client's output
 * stays within its budget. A named portal read in parts is that merge,
 * suspended between the client's Executes. The legs are fanout.c's;
 * writes are not here.
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broadcast.h"
#include "client.h"
#include "config.h"
#include "context.h"
#include "buf_msg.h"
#include "log.h"
#include "merge.h"
#include "pktbuf.h"
#include "pool.h"
#include "prepared.h"
#include "proto.h"
#include "shardkey.h"


/* The database's collation, asked of shard 0 before the first merge that
 * compares strings (every shard of a pool is one schema: same collation). */
static const char COLLATION_QUERY[] = "SELECT datcollate FROM pg_catalog.pg_database WHERE datname = current_database()";

/* ---- each shard's reply, read as it comes ---- */

/* Where a leg's reply stands (moved forward only). */
enum leg_read {
	LR_PREFIX,   /* the collation query's reply (leg 0, when asked) */
	LR_HEAD,     /* the statement's replies before its rows */
	LR_ROWS,     /* its DataRows, taken by the merge, until CommandComplete or PortalSuspended */
	LR_TAIL,     /* its rows ended: up to its ReadyForQuery */
	LR_DONE,     /* its ReadyForQuery read: the server went back to its pool */
	LR_FAILED    /* an error, a lost server, a reply pgcat did not expect: the read fails */
};

struct read_leg {
	enum leg_read st;
	bool after_param_desc, after_bind;
	uint8_t *param_desc, *stmt_desc, *portal_desc;   /* whole messages (copies) */
	size_t param_desc_len, stmt_desc_len, portal_desc_len;
	uint8_t *error;              /* LR_FAILED: its ErrorResponse (whole), or NULL */
	size_t error_len;
	bool unexpected;             /* LR_FAILED: a reply pgcat did not expect */
	bool too_large;              /* LR_FAILED: one message larger than cross_shard_max_memory */
	size_t big;                  /* read_high raised to hold one message of this size (0: the window) */
	char collation[128];
};

/* Where the client's reply stands. */
enum read_stage {
	RS_HEAD,        /* every shard's reply up to its rows: nothing sent yet */
	RS_ANSWER,      /* the reply's steps go out, the rows merged (the client waits) */
	RS_SUSPENDED    /* a portal read in parts, between its Executes (the client is idle) */
};

struct fanout_read {
	enum read_stage stage;
	struct read_leg *legs;          /* fo->n_legs of them */
	struct merge_stream *ms;
	uint8_t steps[MAX_STEPS];       /* the client's request, as answered */
	int n_steps, step;
	bool portal_execute;            /* the steps are a kept portal's Execute alone: no ReadyForQuery */
	bool keep_portal;               /* a named portal in a transaction pgcat holds: kept at its row limit */
	bool suspended;                 /* the last run stopped at the Execute's row limit */
	size_t oversize;                /* bytes of messages held above the windows (legs' big) */
	size_t hold_max;                /* cross_shard_max_memory when the read started */
	uint8_t *desc;                  /* the portal's RowDescription as the client sees it (Describe) */
	size_t desc_len;
	struct fanout_portal *xp;       /* while a kept portal's Execute runs: its name, given back when it suspends */
};

static void read_pump(struct fanout *fo);

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

static void send_error(struct buf *out, const char *sqlstate, const char *msg)
{
	uint8_t storage[1024];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_error(&pb, "ERROR", sqlstate, msg);
	if (!pb.failed)
		buf_add(out, pb.data, pb.len);
}

static uint8_t *copy_msg(const uint8_t *m, size_t len)
{
	uint8_t *c = malloc(len);
	if (c)
		memcpy(c, m, len);
	return c;
}

static void leg_failed(struct read_leg *rl)
{
	rl->st = LR_FAILED;
}

/* Bytes the read may hold beyond its windows (cross_shard_max_memory). */
static size_t hold_max(const struct client *c)
{
	int64_t v = c->w->cfg->general.cross_shard_max_memory;
	return v > 0 ? (size_t)v : 0;
}

/* The whole message at the head of leg i's reply (*total bytes), or NULL:
 * not all of it is here yet (the window grown to hold it: it comes), or
 * it is larger than the read may hold (the leg failed). */
static const uint8_t *leg_message(struct fanout *fo, int i, size_t *total)
{
	struct fanout_leg *leg = &fo->legs[i];
	struct read_leg *rl = &fo->rd->legs[i];
	if (leg->lost) {
		/* Its server closed, maybe in the middle of a message it was
		 * forwarding: what follows cannot be framed. Its answer is
		 * over if its rows had ended, else failed (read_fail_leg). */
		if (rl->st == LR_TAIL)
			rl->st = LR_DONE;
		else
			leg_failed(rl);
		return NULL;
	}
	struct buf *in = leg->io_open ? leg->io.in : NULL;
	size_t have = in ? buf_len(in) : 0;
	uint8_t h[5];
	if (have < 5 || buf_copyout(in, h, 5) != 5)
		return NULL;
	uint32_t l = proto_get_u32(h + 1);
	if (l < 4) {
		rl->unexpected = true;
		leg_failed(rl);
		return NULL;
	}
	*total = (size_t)l + 1;
	if (*total <= have)
		return buf_pullup(in, (size_t)*total);
	if (*total > FANOUT_READ_WINDOW && *total > rl->big) {
		/* One message larger than the window: the window grows to hold it
		 * whole (the merge needs whole rows), within the read's bound. */
		size_t more = *total - rl->big;
		if (fo->rd->oversize + more > fo->rd->hold_max) {
			rl->too_large = true;
			leg_failed(rl);
			return NULL;
		}
		fo->rd->oversize += more;
		rl->big = *total;
		io_set_read_high(&leg->io, *total);
	}
	return NULL;
}

/* The head message of leg i (total bytes) is used up. */
static void leg_consume(struct fanout *fo, int i, size_t total)
{
	struct fanout_leg *leg = &fo->legs[i];
	struct read_leg *rl = &fo->rd->legs[i];
	buf_drain(leg->io.in, total);
	if (rl->big && total >= rl->big) {
		fo->rd->oversize -= rl->big;
		rl->big = 0;
		io_set_read_high(&leg->io, FANOUT_READ_WINDOW);
	} else {
		io_update_reading(&leg->io);   /* room again: what waits in its output comes */
	}
}

/* Leg i's reply up to its rows: the collation (leg 0, when asked), the
 * acknowledgements, the statement's and the portal's descriptions, or
 * its error. */
static void leg_head(struct fanout *fo, int i)
{
	struct read_leg *rl = &fo->rd->legs[i];
	while (rl->st == LR_PREFIX || rl->st == LR_HEAD) {
		size_t total;
		const uint8_t *m = leg_message(fo, i, &total);
		if (!m)
			return;
		uint8_t type = m[0];
		if (rl->st == LR_PREFIX) {
			/* the collation query's T, D, C, Z (its error, if any, ignored) */
			if (type == PqMsg_DataRow && total >= 11 && proto_get_u32(m + 7) < sizeof rl->collation &&
			    proto_get_u32(m + 7) <= total - 11) {
				uint32_t vl = proto_get_u32(m + 7);
				memcpy(rl->collation, m + 11, vl);
				rl->collation[vl] = '\0';
				struct pool *p = fo->c->pool;
				if (!p->collation_known)
					fanout_pool_collation(p, rl->collation);
			}
			if (type == PqMsg_ReadyForQuery)
				rl->st = LR_HEAD;
			leg_consume(fo, i, total);
			continue;
		}
		switch (type) {
		case PqMsg_ErrorResponse:
			rl->error = copy_msg(m, total);
			rl->error_len = total;
			leg_failed(rl);
			break;
		case PqMsg_ParameterDescription:
			free(rl->param_desc);
			rl->param_desc = copy_msg(m, total);
			rl->param_desc_len = total;
			rl->after_param_desc = true;
			break;
		case PqMsg_BindComplete:
			rl->after_bind = true;
			rl->after_param_desc = false;
			break;
		case PqMsg_RowDescription:
		case PqMsg_NoData:
			if (fo->extended && rl->after_param_desc) {
				free(rl->stmt_desc);
				rl->stmt_desc = copy_msg(m, total);
				rl->stmt_desc_len = total;
				rl->after_param_desc = false;
			} else if (!fo->extended || rl->after_bind) {
				rl->portal_desc = copy_msg(m, total);
				rl->portal_desc_len = total;
				rl->st = LR_ROWS;
			}
			break;
		case PqMsg_ParseComplete:
		case PqMsg_NoticeResponse:
		case PqMsg_ParameterStatus:
		case PqMsg_NotificationResponse:
			break;
		default:
			/* rows or an end before any description: not a read's reply */
			rl->unexpected = true;
			leg_failed(rl);
			return;
		}
		leg_consume(fo, i, total);
	}
}

/* Leg i after its rows: up to its ReadyForQuery. (An error there, after
 * its CommandComplete, would be its implicit transaction's commit
 * failing: nothing of the read's answer; dropped.) */
static void leg_tail(struct fanout *fo, int i)
{
	struct read_leg *rl = &fo->rd->legs[i];
	while (rl->st == LR_TAIL) {
		size_t total;
		const uint8_t *m = leg_message(fo, i, &total);
		if (!m)
			return;
		if (m[0] == PqMsg_ReadyForQuery)
			rl->st = LR_DONE;
		leg_consume(fo, i, total);
	}
}

/* ---- the merge's source: the legs' rows ---- */

static enum merge_next source_peek(void *arg, int i, const uint8_t **row, size_t *len)
{
	struct fanout *fo = arg;
	struct read_leg *rl = &fo->rd->legs[i];
	for (;;) {
		switch (rl->st) {
		case LR_ROWS:
			break;
		case LR_TAIL:
		case LR_DONE:
			return MERGE_END;
		case LR_FAILED:
			return MERGE_FAIL;
		case LR_PREFIX:
		case LR_HEAD:
			return MERGE_WAIT;   /* (not merged before every head is in) */
		}
		size_t total;
		const uint8_t *m = leg_message(fo, i, &total);
		if (!m)
			return rl->st == LR_FAILED ? MERGE_FAIL : MERGE_WAIT;
		switch (m[0]) {
		case PqMsg_DataRow:
			*row = m;
			*len = total;
			return MERGE_ROW;
		case PqMsg_CommandComplete:
		case PqMsg_PortalSuspended:   /* (a shard's Execute with a row limit) */
			rl->st = LR_TAIL;
			leg_consume(fo, i, total);
			leg_tail(fo, i);
			return MERGE_END;
		case PqMsg_ErrorResponse:
			rl->error = copy_msg(m, total);
			rl->error_len = total;
			leg_failed(rl);
			leg_consume(fo, i, total);
			return MERGE_FAIL;
		case PqMsg_NoticeResponse:
		case PqMsg_ParameterStatus:
		case PqMsg_NotificationResponse:
			leg_consume(fo, i, total);   /* (not part of the answer) */
			continue;
		default:
			rl->unexpected = true;
			leg_failed(rl);
			return MERGE_FAIL;
		}
	}
}

static void source_take(void *arg, int i)
{
	struct fanout *fo = arg;
	uint8_t h[5];
	if (buf_copyout(fo->legs[i].io.in, h, 5) == 5)
		leg_consume(fo, i, (size_t)proto_get_u32(h + 1) + 1);
}

/* ---- the client's reply ---- */

/* A shard's RowDescription (whole message m) for the client: without the
 * hidden sum/count columns the shards were asked for (avg alone). */
static void add_row_description(struct buf *out, const uint8_t *m, size_t len, const struct merge_plan *p)
{
	if (!p->aggregates || p->n_hidden == 0 || len < 7 || m[0] != PqMsg_RowDescription) {
		buf_add(out, m, len);
		return;
	}
	size_t off = 7;
	for (int i = 0; i < p->n_visible; i++) {
		const uint8_t *nul = off < len ? memchr(m + off, 0, len - off) : NULL;
		if (!nul || (size_t)(nul - m) + 1 + 18 > len) {
			buf_add(out, m, len);   /* (not ours to judge: the merge refuses it) */
			return;
		}
		off = (size_t)(nul - m) + 1 + 18;
	}
	uint8_t h[7] = { PqMsg_RowDescription };
	proto_put_u32(h + 1, (uint32_t)(off - 1));
	h[5] = (uint8_t)(p->n_visible >> 8);
	h[6] = (uint8_t)p->n_visible;
	buf_add(out, h, 7);
	buf_add(out, m + 7, off - 7);
}

static void read_free(struct fanout *fo)
{
	struct fanout_read *rd = fo->rd;
	if (!rd)
		return;
	fo->rd = NULL;
	for (int i = 0; rd->legs && i < fo->n_legs; i++) {
		struct read_leg *rl = &rd->legs[i];
		free(rl->param_desc);
		free(rl->stmt_desc);
		free(rl->portal_desc);
		free(rl->error);
	}
	free(rd->legs);
	merge_stream_free(rd->ms);
	free(rd->desc);
	if (rd->xp) {
		rd->xp->fo = NULL;   /* (it is this read: fanout_free is under way) */
		fanout_portal_free(rd->xp);
	}
	free(rd);
}

/* The reply is over (ok: as far as the client asked; else its error went
 * out): ReadyForQuery if the request had its Sync, then the fan-out ends,
 * or a named portal read in parts is kept for its next Execute. */
static void read_end(struct fanout *fo, bool ok)
{
	struct client *c = fo->c;
	struct fanout_read *rd = fo->rd;
	struct buf *out = io_out(&c->io);
	bool portal_execute = rd->portal_execute;
	if (!portal_execute) {
		uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)(c->held_begin ? 'T' : 'I') };
		buf_add(out, z, sizeof z);
	}
	bool keep = ok && rd->keep_portal && (rd->suspended || portal_execute);
	if (ok) {
		/* The answer is whole: what the shards still send (rows past a
		 * LIMIT, a portal's rest at its Sync) is not needed. Each shard's
		 * statement ends as it would have, its rest read and dropped. */
		for (int i = 0; i < fo->n_legs; i++) {
			enum leg_read st = rd->legs[i].st;
			if (st != LR_DONE && !(keep && rd->suspended))
				fanout_leg_finish(&fo->legs[i]);
		}
	}
	if (keep) {
		struct fanout_portal *xp = rd->xp;
		rd->xp = NULL;
		if (!xp && (xp = calloc(1, sizeof *xp)))
			snprintf(xp->name, sizeof xp->name, "%s", fo->portal);
		struct client_xshard *xs = xp ? fanout_xshard(c) : NULL;
		if (xs) {
			fanout_portal_drop(c);   /* (another portal, replaced) */
			xp->fo = fo;
			xs->portal = xp;
			rd->stage = RS_SUSPENDED;
			fanout_ev(c)->answered(c);
			return;
		}
		free(xp);   /* (out of memory: the portal ends here) */
	}
	if (!ok && portal_execute && c->held_begin)
		fanout_ev(c)->tx_aborted(c);   /* as PostgreSQL: the transaction failed with its Execute */
	fanout_free(fo);
	fanout_ev(c)->answered(c);   /* idle again: its next request */
}

/* The read fails: the client gets the error (after what went out
 * already, as from a PostgreSQL whose query fails midway), what the
 * shards still run is cancelled. */
static void read_fail(struct fanout *fo, const uint8_t *error, size_t error_len, const char *sqlstate,
		      const char *msg)
{
	struct buf *out = io_out(&fo->c->io);
	if (error) {
		buf_add(out, error, error_len);   /* a shard's error, as PostgreSQL wrote it */
	} else {
		log_debug("C-%llu: %s", (unsigned long long)fo->c->id, msg);
		client_count_error(fo->c, sqlstate);
		send_error(out, sqlstate, msg);
	}
	read_end(fo, false);
}

/* Leg i failed: its error, or why. */
static void read_fail_leg(struct fanout *fo, int i)
{
	struct fanout_leg *leg = &fo->legs[i];
	struct read_leg *rl = &fo->rd->legs[i];
	char why[200];
	if (rl->too_large) {
		snprintf(why, sizeof why,
			 "cross-shard read: a message of shard %d is larger than cross_shard_max_memory (%zu bytes)",
			 leg->shard, fo->rd->hold_max);
		read_fail(fo, NULL, 0, SQLSTATE_PROGRAM_LIMIT_EXCEEDED, why);
	} else if (leg->lost || rl->unexpected || !rl->error) {
		snprintf(why, sizeof why, "cross-shard read: shard %d: %s", leg->shard,
			 leg->lost ? "the connection was lost before the result was complete" : "unexpected reply");
		read_fail(fo, NULL, 0, SQLSTATE_CONNECTION_FAILURE, why);
	} else {
		read_fail(fo, rl->error, rl->error_len, NULL, NULL);
	}
}

/* Every shard's reply reached its rows: the columns checked alike and
 * the merge made. false: the read failed (answered, fo gone). */
static bool read_begin_rows(struct fanout *fo)
{
	struct fanout_read *rd = fo->rd;
	struct pool *p = fo->c->pool;
	struct merge_column cols[256];
	int n_cols = 0;
	char why[MERGE_WHY];
	const uint8_t *d = rd->legs[0].portal_desc;
	if (!d || d[0] != PqMsg_RowDescription ||
	    !merge_read_row_description(d + 5, rd->legs[0].portal_desc_len - 5, cols, 256, &n_cols)) {
		read_fail(fo, NULL, 0, SQLSTATE_FEATURE_NOT_SUPPORTED,
			  "cross-shard read: the result has no row description pgcat can read");
		return false;
	}
	for (int i = 1; i < fo->n_legs; i++) {
		struct merge_column other[256];
		int n_other = 0;
		const uint8_t *od = rd->legs[i].portal_desc;
		if (!od || od[0] != PqMsg_RowDescription ||
		    !merge_read_row_description(od + 5, rd->legs[i].portal_desc_len - 5, other, 256, &n_other) ||
		    n_other != n_cols) {
			read_fail(fo, NULL, 0, SQLSTATE_FEATURE_NOT_SUPPORTED,
				  "cross-shard read: the shards' results have different columns");
			return false;
		}
		for (int k = 0; k < n_cols; k++)
			if (other[k].type_oid != cols[k].type_oid || other[k].format != cols[k].format) {
				snprintf(why, sizeof why, "cross-shard read: column \"%s\" has different types on the shards",
					 cols[k].name);
				read_fail(fo, NULL, 0, SQLSTATE_FEATURE_NOT_SUPPORTED, why);
				return false;
			}
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
				snprintf(why, sizeof why,
					 "cross-shard read: strings cannot be ordered: collation \"%.60s\" is not available to pgcat "
					 "(use COLLATE \"C\")", p->collation_name);
				read_fail(fo, NULL, 0, SQLSTATE_FEATURE_NOT_SUPPORTED, why);
				return false;
			}
		}
	}
	rd->ms = merge_stream_new(&fo->plan, cols, n_cols, fo->n_legs, coll, why);
	if (!rd->ms) {
		read_fail(fo, NULL, 0, SQLSTATE_FEATURE_NOT_SUPPORTED, why);
		return false;
	}
	merge_stream_execute(rd->ms, fo->max_rows);
	if (rd->keep_portal) {
		struct buf *b = buf_new(BUF_SMALL);
		if (b) {
			add_row_description(b, d, rd->legs[0].portal_desc_len, &fo->plan);
			rd->desc_len = buf_len(b);
			rd->desc = malloc(rd->desc_len);
			if (rd->desc)
				buf_take(b, rd->desc, rd->desc_len);
			buf_free(b);
		}
	}
	/* The client's named statement lives on (SPEC §5): its Parse
	 * succeeded on every shard. */
	if (fo->parse_msg && prep_enabled(fo->c))
		(void)prep_client_adopt(fo->c, fo->parse_msg, fo->parse_len);
	rd->stage = RS_ANSWER;
	return true;
}

/* The merge's next run into the client's output. true: the Execute is
 * answered (rows, then CommandComplete or PortalSuspended); false: it
 * waits (for a shard's rows or the client's reading), or the read failed
 * (answered, fo gone). */
static bool read_rows(struct fanout *fo)
{
	struct fanout_read *rd = fo->rd;
	struct client *c = fo->c;
	struct buf *out = io_out(&c->io);
	size_t used = io_out_len(&c->io), budget = c->end.out_budget;
	size_t high = buf_len(out) + (used < budget ? budget - used : 0);
	struct merge_source src = { source_peek, source_take, fo };
	char why[MERGE_WHY], msg[MERGE_WHY + 120];
	merge_stream_hold_limit(rd->ms, rd->hold_max > rd->oversize ? rd->hold_max - rd->oversize : 0);
	enum merge_status st = merge_stream_run(rd->ms, &src, out, high, why);
	switch (st) {
	case MERGE_NEED_ROWS:
	case MERGE_OUT_FULL:
		return false;
	case MERGE_COMPLETE:
	case MERGE_SUSPENDED:
		rd->suspended = st == MERGE_SUSPENDED;
		return true;
	case MERGE_SOURCE_FAILED:
		for (int i = 0; i < fo->n_legs; i++)
			if (rd->legs[i].st == LR_FAILED) {
				read_fail_leg(fo, i);
				return false;
			}
		read_fail(fo, NULL, 0, SQLSTATE_CONNECTION_FAILURE, "cross-shard read: a shard failed");
		break;
	case MERGE_TOO_LARGE:
		snprintf(msg, sizeof msg,
			 "cross-shard read: the rows this query must hold in pgcat (GROUP BY, DISTINCT or aggregates) exceed "
			 "cross_shard_max_memory (%zu bytes); raise it, or narrow the query", rd->hold_max);
		read_fail(fo, NULL, 0, SQLSTATE_PROGRAM_LIMIT_EXCEEDED, msg);
		break;
	case MERGE_FAILED:
		read_fail(fo, NULL, 0, SQLSTATE_FEATURE_NOT_SUPPORTED, why);
		break;
	}
	return false;
}

/* Whatever came: every leg's reply walked as far as the read stands, and
 * the client's reply written as far as it can be. */
static void read_pump(struct fanout *fo)
{
	struct fanout_read *rd = fo->rd;
	if (rd->stage == RS_SUSPENDED)
		return;   /* (the shards wait: their windows fill, then their servers pause) */
	for (int i = 0; i < fo->n_legs; i++) {
		leg_head(fo, i);
		leg_tail(fo, i);
	}
	if (rd->stage == RS_HEAD) {
		/* Nothing goes out before every shard's reply reached its rows:
		 * the first shard's error wins, as when every reply was whole. */
		int failed = -1;
		for (int i = 0; i < fo->n_legs; i++) {
			enum leg_read st = rd->legs[i].st;
			if (st == LR_PREFIX || st == LR_HEAD)
				return;
			if (st == LR_FAILED && failed < 0)
				failed = i;
		}
		if (failed >= 0) {
			read_fail_leg(fo, failed);
			return;
		}
		if (!read_begin_rows(fo))
			return;
	}
	struct client *c = fo->c;
	while (rd->step < rd->n_steps) {
		struct buf *out = io_out(&c->io);
		const struct read_leg *l0 = &rd->legs[0];
		switch (rd->steps[rd->step]) {
		case STEP_PARSE:
			buf_add_bodyless(out, PqMsg_ParseComplete);
			break;
		case STEP_DESCRIBE_STMT:
			if (l0->param_desc)
				buf_add(out, l0->param_desc, l0->param_desc_len);
			if (l0->stmt_desc)
				add_row_description(out, l0->stmt_desc, l0->stmt_desc_len, &fo->plan);
			break;
		case STEP_BIND:
			buf_add_bodyless(out, PqMsg_BindComplete);
			break;
		case STEP_DESCRIBE_PORTAL:
			if (l0->portal_desc)
				add_row_description(out, l0->portal_desc, l0->portal_desc_len, &fo->plan);
			break;
		case STEP_EXECUTE:
			if (!read_rows(fo))
				return;   /* (more rows, or room, first; or failed: fo gone) */
			break;
		case STEP_SYNC:
			break;
		}
		rd->step++;
	}
	read_end(fo, true);
}

static void read_leg_input(struct fanout_leg *leg)
{
	read_pump(leg->fo);
}

void fanout_client_drain(struct client *c)
{
	struct fanout *fo = c->fanout;
	if (fo && fo->rd && fo->rd->stage == RS_ANSWER)
		read_pump(fo);
}

/* ---- a named portal read in parts ---- */

bool fanout_portal_message(struct client *c, const struct proto_frame *f)
{
	struct fanout_portal *xp = c->xshard ? c->xshard->portal : NULL;
	if (!xp || !xp->fo || c->end.server)
		return false;
	struct fanout *fo = xp->fo;
	struct fanout_read *rd = fo->rd;
	struct buf *in = c->io.in;
	struct buf *out = io_out(&c->io);
	uint32_t total = f->len + 1;
	if (f->type != PqMsg_Sync && f->type != PqMsg_Execute && f->type != PqMsg_Describe && f->type != PqMsg_Close) {
		/* outside a transaction the portal ended with the last Sync */
		if (!c->held_begin)
			fanout_portal_drop(c);
		return false;
	}
	if (total > 5 + 256 || buf_len(in) < total)
		return false;   /* not one of ours (names are short), or wait */
	const uint8_t *m = buf_pullup(in, total), *body = m + 5;
	size_t blen = total - 5, b = 0;
	const char *name;
	switch (f->type) {
	case PqMsg_Sync: {
		uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)(c->held_begin ? 'T' : 'I') };
		if (!c->held_begin)
			fanout_portal_drop(c);
		buf_drain(in, total);
		buf_add(out, z, sizeof z);
		return true;
	}
	case PqMsg_Execute: {
		if (!proto_read_cstring(body, blen, &b, &name) || blen - b != 4 || strcmp(name, xp->name) != 0)
			return false;
		uint32_t max_rows = proto_get_u32(body + b);
		buf_drain(in, total);
		/* The read goes on: it is the client's until it suspends again
		 * (the portal's name waits with it). */
		xp->fo = NULL;
		c->xshard->portal = NULL;
		rd->xp = xp;
		rd->portal_execute = true;
		rd->steps[0] = STEP_EXECUTE;
		rd->n_steps = 1;
		rd->step = 0;
		rd->suspended = false;
		rd->stage = RS_ANSWER;
		merge_stream_execute(rd->ms, max_rows);
		fanout_ev(c)->started(c, fo);
		read_pump(fo);
		return true;
	}
	case PqMsg_Describe:
		if (blen < 2 || body[0] != 'P')
			return false;
		b = 1;
		if (!proto_read_cstring(body, blen, &b, &name) || strcmp(name, xp->name) != 0)
			return false;
		buf_drain(in, total);
		if (rd->desc)
			buf_add(out, rd->desc, rd->desc_len);
		else
			fanout_put_msg(out, PqMsg_NoData, NULL, 0, NULL, 0);
		return true;
	case PqMsg_Close:
		if (blen < 2 || body[0] != 'P')
			return false;
		b = 1;
		if (!proto_read_cstring(body, blen, &b, &name) || strcmp(name, xp->name) != 0)
			return false;
		buf_drain(in, total);
		fanout_portal_drop(c);   /* (what its shards still run is cancelled) */
		fanout_put_msg(out, PqMsg_CloseComplete, NULL, 0, NULL, 0);
		return true;
	default:
		return false;
	}
}

/* ---- start ---- */

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

/* The statement the request runs (its text and parameter types), and
 * whether it is a read to fan out at all. FANOUT_STARTED here: go on. */
static enum fanout_start read_statement(struct client *c, const struct request *r, const char **sql,
					const uint8_t **types, size_t *types_len, char *why, size_t whylen)
{
	if (!r->query && !r->has_execute && r->has_bind) {
		/* a portal bound on one shard would then be read there alone */
		fanout_refuse(why, whylen, "a portal bound without Execute in the same request (asyncpg's awaitable cursor) cannot "
				    "be merged; bind and execute together (asyncpg: iterate with async for)");
		return FANOUT_REFUSED;
	}
	if (!r->query && !r->has_execute)   /* Parse/Describe: every shard answers alike */
		return r->has_flush ? FANOUT_ANY_SHARD_FLUSH : FANOUT_ANY_SHARD;
	if (!r->query && !r->has_sync) {
		fanout_refuse(why, whylen, "an Execute without Sync cannot be merged (send Sync)");
		return FANOUT_REFUSED;
	}
	*sql = r->query;
	*types = (const uint8_t *)"\0";
	*types_len = 2;
	if (!r->query) {
		if (r->parse && strcmp(r->parse_name, r->bind_stmt) == 0) {
			*sql = r->parse_sql;
			*types = r->parse_types;
			*types_len = r->parse_types_len;
		} else if (!fanout_bound_statement(c, r->bind_stmt, sql, types, types_len)) {
			fanout_refuse(why, whylen, "the prepared statement is not known to pgcat (prepared_statements off?)");
			return FANOUT_REFUSED;
		}
	}
	return FANOUT_STARTED;
}

/* How the shards' rows merge (fo->plan), with LIMIT $n / OFFSET $m read
 * from the Bind; *passthrough: the shards run the statement as it is (a
 * negative one: they raise PostgreSQL's own error). FANOUT_STARTED here:
 * go on. */
static enum fanout_start read_plan(struct fanout *fo, const struct request *r, const char *sql, bool sharded,
				   const struct router_rules *rules, bool *passthrough, char *why, size_t whylen)
{
	char pwhy[MERGE_WHY];
	*passthrough = false;
	if (!merge_plan_build(sql, strlen(sql), &fo->plan, pwhy)) {
		snprintf(why, whylen, "%s", pwhy);
		/* SET, SHOW... with default_shard = all */
		return fo->plan.not_select && !sharded ? FANOUT_ANY_SHARD : FANOUT_REFUSED;
	}
	if ((fo->plan.limit_param || fo->plan.offset_param) && !r->query) {
		int64_t v[2] = { 0, 0 };
		bool null[2] = { true, true };
		int params[2] = { fo->plan.limit_param, fo->plan.offset_param };
		for (int i = 0; i < 2; i++) {
			if (params[i] && !bind_int64(r->bind_portal, r->bind_len, params[i], &v[i], &null[i])) {
				fanout_refuse(why, whylen, "a LIMIT or OFFSET parameter pgcat cannot read (an integer is needed)");
				return FANOUT_REFUSED;
			}
		}
		*passthrough = !merge_plan_bind(&fo->plan, null[0], v[0], null[1], v[1]);
		if (*passthrough) {
			/* every shard raises PostgreSQL's error: no limit of pgcat's may
			 * end the merge before it reads them */
			if (fo->plan.limit_param)
				fo->plan.has_limit = false;
			if (fo->plan.offset_param)
				fo->plan.has_offset = false;
		}
	}
	/* mergeable rows, but are they each shard's part of the answer? */
	if (!broadcast_read_check(sql, strlen(sql), rules, pwhy)) {
		snprintf(why, whylen, "%s", pwhy);
		return FANOUT_REFUSED;
	}
	return FANOUT_STARTED;
}

/* What every shard runs: the statement (rewritten if the merge needs more
 * rows or hidden columns), simple or as Parse, [Describe S], Bind,
 * Describe P, Execute (with shard_rows as its row limit, 0: none), Sync,
 * unnamed whatever the client named them. NULL: out of memory. */
static struct buf *read_shard_request(const struct fanout *fo, const struct request *r, const char *sql,
					   const uint8_t *types, size_t types_len, bool passthrough, uint32_t shard_rows)
{
	struct buf *req = buf_new(BUF_SMALL);
	size_t sql_len = strlen(sql);
	bool rewrite = merge_plan_rewrites(&fo->plan) && !passthrough;
	char *shard_sql = rewrite ? merge_plan_shard_sql(&fo->plan, sql, sql_len, &sql_len) : NULL;
	const char *run = shard_sql ? shard_sql : sql;
	if (!req || (rewrite && !shard_sql)) {
		if (req)
			buf_free(req);
		free(shard_sql);
		return NULL;
	}
	if (!fo->extended) {
		fanout_put_msg(req, PqMsg_Query, run, sql_len + 1, NULL, 0);
	} else {
		fanout_put_unnamed_parse(req, run, sql_len, types, types_len);
		for (int s = 0; s < r->n_steps; s++)
			if (r->steps[s] == STEP_DESCRIBE_STMT)
				fanout_put_msg(req, PqMsg_Describe, "S", 2, NULL, 0);
		fanout_put_msg(req, PqMsg_Bind, "\0", 2, r->bind_rest, r->bind_rest_len);
		fanout_put_msg(req, PqMsg_Describe, "P", 2, NULL, 0);
		uint8_t e[5] = { 0 };   /* the unnamed portal, then the row limit */
		proto_put_u32(e + 1, shard_rows);
		fanout_put_msg(req, PqMsg_Execute, e, sizeof e, NULL, 0);
		fanout_put_msg(req, PqMsg_Sync, NULL, 0, NULL, 0);
	}
	free(shard_sql);
	return req;
}

/* One leg per shard, each with the request (the first one asking the
 * collation first, if the merge compares text). false: *why says why. */
static bool read_open_legs(struct fanout *fo, struct buf *req, int n_shards, char *why, size_t whylen)
{
	fo->n_legs = n_shards;
	int made = 0;
	for (; made < n_shards; made++) {
		if (!fanout_open_leg(fo, made, made, why, whylen)) {
			made++;
			break;
		}
		struct fanout_leg *leg = &fo->legs[made];
		leg->ready_needed = made == 0 && fo->asks_collation ? 2 : 1;
		if (made == 0 && fo->asks_collation)
			fanout_put_msg(fanout_leg_out(leg), PqMsg_Query, COLLATION_QUERY, sizeof COLLATION_QUERY, NULL, 0);
		size_t rl = buf_len(req);
		buf_add(fanout_leg_out(leg), buf_head(req), rl);
	}
	fo->n_legs = made;
	return made == n_shards && !why[0];
}

enum fanout_start fanout_start(struct client *c, const struct proto_frame *f, bool sharded,
			       const struct router_rules *rules, char *why, size_t whylen)
{
	(void)f;
	struct pool *p = c->pool;
	int n_shards = (int)p->cpool->n_shards;
	struct buf *in = c->io.in;
	size_t have = buf_len(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = buf_pullup(in, (size_t)lim);
	struct request r;
	why[0] = '\0';
	if (n_shards > MERGE_MAX_SHARDS) {
		fanout_refuse(why, whylen, "too many shards");
		return FANOUT_REFUSED;
	}
	if (!m || !fanout_read_request(m, lim, &r, why, whylen))
		return FANOUT_REFUSED;
	const char *sql;
	const uint8_t *types;
	size_t types_len;
	enum fanout_start st = read_statement(c, &r, &sql, &types, &types_len, why, whylen);
	if (st != FANOUT_STARTED)
		return st;
	if (r.has_bind && strlen(r.bind_portal) >= sizeof ((struct fanout *)0)->portal) {
		fanout_refuse(why, whylen, "portal name too long");
		return FANOUT_REFUSED;
	}
	struct fanout *fo = calloc(1, sizeof *fo + (size_t)n_shards * sizeof fo->legs[0]);
	if (!fo) {
		fanout_refuse(why, whylen, "out of memory");
		return FANOUT_REFUSED;
	}
	fo->c = c;   /* (kind FANOUT_READ: 0) */
	fo->layout_shards = c->pool->cpool->n_shards;
	fo->extended = r.query == NULL;
	if (r.has_bind)
		snprintf(fo->portal, sizeof fo->portal, "%s", r.bind_portal);
	bool passthrough;
	st = read_plan(fo, &r, sql, sharded, rules, &passthrough, why, whylen);
	if (st != FANOUT_STARTED) {
		free(fo);
		return st;
	}
	fo->max_rows = r.max_rows;
	fo->asks_collation = merge_plan_compares(&fo->plan) && !p->collation_known;
	if (r.parse && r.parse_name[0]) {
		fo->parse_msg = malloc(r.parse_total);
		if (fo->parse_msg) {
			memcpy(fo->parse_msg, r.parse, r.parse_total);
			fo->parse_len = r.parse_total;
		}
	}
	/* A named portal read in parts, inside a transaction pgcat holds, is
	 * kept suspended between its Executes; any other Execute with a row
	 * limit drops the rest at its Sync, so the shards need give no more
	 * than it can take (OFFSET, its rows, and one more that tells whether
	 * it is suspended): each shard's portal stops there too, as
	 * PostgreSQL's would. Not for aggregates, groups and DISTINCT, which
	 * need every row. */
	bool keep = fo->portal[0] && fo->max_rows > 0 && c->held_begin;
	uint32_t shard_rows = 0;
	if (fo->max_rows > 0 && !keep && !passthrough && !fo->plan.aggregates && !fo->plan.grouped && !fo->plan.distinct) {
		uint64_t need = (uint64_t)fo->max_rows + 1 + (fo->plan.has_offset ? (uint64_t)fo->plan.offset : 0);
		shard_rows = need <= UINT32_MAX ? (uint32_t)need : 0;
	}
	struct buf *req = read_shard_request(fo, &r, sql, types, types_len, passthrough, shard_rows);
	struct fanout_read *rd = calloc(1, sizeof *rd);
	struct read_leg *rls = calloc((size_t)n_shards, sizeof *rls);
	if (!req || !rd || !rls) {
		if (req)
			buf_free(req);
		free(rd);
		free(rls);
		free(fo->parse_msg);
		free(fo);
		fanout_refuse(why, whylen, "out of memory");
		return FANOUT_REFUSED;
	}
	rd->legs = rls;
	rd->keep_portal = keep;
	rd->hold_max = hold_max(c);
	if (fo->extended) {
		memcpy(rd->steps, r.steps, sizeof r.steps);
		rd->n_steps = r.n_steps;
	} else {
		rd->steps[0] = STEP_DESCRIBE_PORTAL;   /* a simple Query's RowDescription, then its rows */
		rd->steps[1] = STEP_EXECUTE;
		rd->n_steps = 2;
	}
	for (int i = 0; i < n_shards; i++)
		rls[i].st = i == 0 && fo->asks_collation ? LR_PREFIX : LR_HEAD;
	fo->rd = rd;
	fo->on_free = read_free;
	fo->leg_input = read_leg_input;
	bool opened = read_open_legs(fo, req, n_shards, why, whylen);
	buf_free(req);
	if (!opened) {
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	for (int i = 0; i < fo->n_legs; i++)
		fanout_leg_stream(&fo->legs[i], FANOUT_READ_WINDOW);
	buf_drain(in, r.end);
	fanout_ev(c)->started(c, fo);
	fanout_send(fo);   /* each leg checks its server out */
	log_debug("C-%llu: cross-shard read sent to %d shards", (unsigned long long)c->id, n_shards);
	return FANOUT_STARTED;
}
