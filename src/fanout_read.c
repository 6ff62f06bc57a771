/* SPDX-License-Identifier: MIT */
/*
 * fanout_read: a cross-shard read (include/fanout.h): the one statement
 * sent to every shard, the shards' replies merged (merge.c) into the
 * client's answer, and a named portal read in parts answered from the rows
 * kept. The legs are fanout.c's; writes are not here.
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <errno.h>
#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broadcast.h"
#include "client.h"
#include "config.h"
#include "evbuf.h"
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
		if (!evbuf_copy_at(all, at, h, 5))
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
	evbuf_add_bodyless(out, PqMsg_PortalSuspended);
	/* the rest without the CommandComplete (the last message) */
	size_t rest = evbuffer_get_length(all), rows_len = 0;
	while (rows_len + 5 <= rest) {
		uint8_t h[5];
		if (!evbuf_copy_at(all, rows_len, h, 5) || h[0] != PqMsg_DataRow)
			break;
		rows_len += (size_t)proto_get_u32(h + 1) + 1;
	}
	evbuffer_remove_buffer(all, xp->rows, rows_len);
	evbuffer_free(all);
	fanout_portal_free(fo->rest);
	fo->rest = xp;
	return true;
}

static void put_command_tag(struct evbuffer *out, uint64_t n)
{
	char tag[32];
	int tl = snprintf(tag, sizeof tag, "SELECT %llu", (unsigned long long)n);
	fanout_put_msg(out, PqMsg_CommandComplete, tag, (size_t)tl + 1, NULL, 0);
}

bool fanout_portal_message(struct client *c, const struct proto_frame *f)
{
	struct fanout_portal *xp = c->xshard ? c->xshard->portal : NULL;
	if (!xp || c->end.server)
		return false;
	struct evbuffer *in = c->io.in, *out = io_out(&c->io);
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
			if (!evbuf_copy_at(xp->rows, at, h, 5))
				break;
			at += (size_t)proto_get_u32(h + 1) + 1;
			n++;
		}
		evbuffer_drain(in, total);
		evbuffer_remove_buffer(xp->rows, out, at);
		if (evbuffer_get_length(xp->rows) > 0) {
			evbuf_add_bodyless(out, PqMsg_PortalSuspended);
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
			fanout_put_msg(out, PqMsg_NoData, NULL, 0, NULL, 0);
		return true;
	case PqMsg_Close:
		if (blen < 2 || body[0] != 'P')
			return false;
		b = 1;
		if (!proto_read_cstring(body, blen, &b, &name) || strcmp(name, xp->name) != 0)
			return false;
		evbuffer_drain(in, total);
		fanout_portal_drop(c);
		fanout_put_msg(out, PqMsg_CloseComplete, NULL, 0, NULL, 0);
		return true;
	default:
		return false;
	}
}

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

/* A cross-shard read, every shard's reply in: the merged answer, then
 * the client is idle again. */
void fanout_read_finish(struct fanout *fo)
{
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
		fanout_ev(c)->fatal(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	if (!why[0] && !error) {
		struct leg_reply *r0 = &rep[0];
		for (int s = 0; s < fo->n_steps && !why[0]; s++) {
			switch (fo->steps[s]) {
			case STEP_PARSE:
				evbuf_add_bodyless(reply, PqMsg_ParseComplete);
				break;
			case STEP_DESCRIBE_STMT:
				if (r0->param_desc)
					evbuffer_add(reply, r0->param_desc, r0->param_desc_len);
				if (r0->stmt_desc)
					add_row_description(reply, r0->stmt_desc, r0->stmt_desc_len, &fo->plan);
				break;
			case STEP_BIND:
				evbuf_add_bodyless(reply, PqMsg_BindComplete);
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
	struct evbuffer *out = io_out(&c->io);
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
	fanout_free(fo);
	fanout_ev(c)->answered(c);   /* idle again: its next request */
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
 * Describe P, Execute, Sync, unnamed whatever the client named them.
 * NULL: out of memory. */
static struct evbuffer *read_shard_request(const struct fanout *fo, const struct request *r, const char *sql,
					   const uint8_t *types, size_t types_len, bool passthrough)
{
	struct evbuffer *req = evbuffer_new();
	size_t sql_len = strlen(sql);
	bool rewrite = merge_plan_rewrites(&fo->plan) && !passthrough;
	char *shard_sql = rewrite ? merge_plan_shard_sql(&fo->plan, sql, sql_len, &sql_len) : NULL;
	const char *run = shard_sql ? shard_sql : sql;
	if (!req || (rewrite && !shard_sql)) {
		if (req)
			evbuffer_free(req);
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
		fanout_put_msg(req, PqMsg_Execute, "\0\0\0\0", 5, NULL, 0);
		fanout_put_msg(req, PqMsg_Sync, NULL, 0, NULL, 0);
	}
	free(shard_sql);
	return req;
}

/* One leg per shard, each with the request (the first one asking the
 * collation first, if the merge compares text). false: *why says why. */
static bool read_open_legs(struct fanout *fo, struct evbuffer *req, int n_shards, char *why, size_t whylen)
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
		size_t rl = evbuffer_get_length(req);
		evbuffer_add(fanout_leg_out(leg), evbuffer_pullup(req, (ev_ssize_t)rl), rl);
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
	struct evbuffer *in = c->io.in;
	size_t have = evbuffer_get_length(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = evbuffer_pullup(in, (ev_ssize_t)lim);
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
	fo->c = c;
	fo->phase_done = fanout_read_finish;   /* (kind FANOUT_READ: 0) */
	fo->extended = r.query == NULL;
	if (r.has_bind)
		snprintf(fo->portal, sizeof fo->portal, "%s", r.bind_portal);
	bool passthrough;
	st = read_plan(fo, &r, sql, sharded, rules, &passthrough, why, whylen);
	if (st != FANOUT_STARTED) {
		free(fo);
		return st;
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
	struct evbuffer *req = read_shard_request(fo, &r, sql, types, types_len, passthrough);
	if (!req) {
		free(fo->parse_msg);
		free(fo);
		fanout_refuse(why, whylen, "out of memory");
		return FANOUT_REFUSED;
	}
	bool opened = read_open_legs(fo, req, n_shards, why, whylen);
	evbuffer_free(req);
	if (!opened) {
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	evbuffer_drain(in, r.end);
	fanout_ev(c)->started(c, fo);
	fanout_send(fo);   /* each leg checks its server out */
	log_debug("C-%llu: cross-shard read sent to %d shards", (unsigned long long)c->id, n_shards);
	return FANOUT_STARTED;
}
