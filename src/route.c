/* SPDX-License-Identifier: MIT */
/*
 * route: the role of a transaction and the server of its shard (SPEC §4).
 */
#include "route.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "config.h"
#include "copy_route.h"
#include "route_pick.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "prepared.h"
#include "proto.h"
#include "rotation.h"
#include "router.h"
#include "sharding.h"
#include "shardkey.h"
#include "server.h"
#include "shm.h"
#include "sqllex.h"
#include "context.h"

bool route_statement_text(struct client *c, const struct proto_frame *f, const char **sql, size_t *len)
{
	uint32_t total = f->len + 1;
	struct buf *in = c->io.in;
	if (f->type == PqMsg_Bind) {
		/* A named statement: its text is in the pool's registry. */
		if (!c->end.prep || total > ROUTE_INSPECT_MAX || buf_len(in) < total)
			return false;
		const uint8_t *m = buf_pullup(in, total);
		size_t pl = strnlen((const char *)m + 5, total - 5);
		if (5 + pl + 1 >= total)
			return false;
		const char *name = (const char *)m + 5 + pl + 1;
		if (strnlen(name, total - 5 - pl - 1) >= total - 5 - pl - 1 || !name[0])
			return false;
		const struct prep_stmt *st = prep_cmap_get(&c->end.prep->names, name);
		if (!st)
			return false;
		*sql = (const char *)st->key;
		*len = strlen(*sql);
		return true;
	}
	if (f->type != PqMsg_Query && f->type != PqMsg_Parse)
		return false;
	if (total > ROUTE_INSPECT_MAX || buf_len(in) < total)
		return false;
	const uint8_t *m = buf_pullup(in, total);
	size_t off = 0;
	if (f->type == PqMsg_Parse) {
		const char *name;
		if (!proto_read_cstring(m + 5, total - 5, &off, &name))
			return false;
	}
	const char *q = (const char *)m + 5 + off;
	*sql = q;
	*len = strnlen(q, total - 5 - off);
	return true;
}

static enum router_role decide_role(struct client *c, const struct proto_frame *f, const struct route_rules *rr,
				    bool *writes)
{
	/* SPEC §4: a comment hint on the transaction's first statement, else
	 * SET SERVER ROLE, else the parser's verdict, else default_role. The
	 * hint is the most specific choice, so it is read first, even when the
	 * session has a role SET (which applies again to the next transaction). */
	bool held = c->held_begin && c->pool->cpool->query_parser_enabled;
	const char *sql;
	size_t len;
	struct router_verdict local;
	const struct router_verdict *v = NULL;
	if (!held && route_statement_text(c, f, &sql, &len))
		v = route_classify(c, rr, sql, len, &local);
	return route_role_of(c, v, held, writes);
}

/* ---- which shard (SPEC §6) ---- */

/* How far the routing looks into a request (Parse, Bind, ... up to Sync),
 * letting it into the buffer whole (a Bind with a large value before its
 * Execute): beyond this the statements seen decide, and a sharded one makes
 * the request cross-shard (its later Binds are not visible). */
#define ROUTE_SCAN_MAX (1024u * 1024)
/* Statements prepared by one request that the scan keeps track of. */
#define ROUTE_SCAN_PARSES 64

enum shard_decision {
	SHARD_DECIDED,      /* *shard is where the transaction goes */
	SHARD_WAIT,         /* the rest of the request is still on its way */
	SHARD_REFUSED,      /* refused (d->sqlstate, d->message) */
	SHARD_FANOUT        /* cross-shard: d->fanout for the session */
};

struct scan_parse {
	const char *name;
	const char *sql;
	size_t sql_len;
	const uint8_t *types;
	uint16_t n_types;
	bool bound;
};

/* A statement's text and parameter types from a Parse body (name, query,
 * types). */
static bool read_parse(const uint8_t *body, size_t len, struct scan_parse *out)
{
	size_t off = 0;
	const char *name, *sql;
	if (!proto_read_cstring(body, len, &off, &name))
		return false;
	size_t qoff = off;
	if (!proto_read_cstring(body, len, &off, &sql))
		return false;
	out->name = name;
	out->sql = sql;
	out->sql_len = off - qoff - 1;
	out->bound = false;
	return shardkey_param_types(body + off, len - off, &out->types, &out->n_types);
}

/* One statement (with the Bind executing it, if any) into acc. */
static void scan_statement(struct client *c, const struct route_rules *rr, const char *sql, size_t len,
			   const struct shardkey_bind *bind, struct shardkey_result *acc, bool *sharded)
{
	const struct config_pool *cp = c->pool->cpool;
	struct router_verdict local;
	const struct router_verdict *v = route_classify(c, rr, sql, len, &local);
	struct shardkey_result r;
	shardkey_resolve(v, cp->sharding_function, (int)cp->n_shards, bind, bind ? 1 : 0, &r);
	*sharded = *sharded || (v->parsed && v->reads_sharded);
	shardkey_merge(acc, &r);
	if (v->parsed && v->insert_unplaced && !acc->unplaced) {
		acc->unplaced = true;
		acc->unplaced_table = v->insert_table;
	}
}

/* The statement a Bind executes: prepared in this request, the client's
 * unnamed one from an earlier request, or one of its named statements. */
static bool bind_statement(struct client *c, struct scan_parse *parses, size_t n_parses, const char *name,
			   struct scan_parse *out)
{
	for (size_t i = n_parses; i-- > 0;) {
		if (strcmp(parses[i].name, name) == 0) {
			parses[i].bound = true;
			*out = parses[i];
			return true;
		}
	}
	/* (the unnamed one may be a named statement of pgcat's: the same key) */
	const uint8_t *key;
	size_t keylen;
	if (!prep_client_statement(c, name, &key, &keylen) || keylen == 0)
		return false;
	const char *sql = (const char *)key;
	size_t l = strnlen(sql, keylen);
	if (l >= keylen)
		return false;
	out->name = name;
	out->sql = sql;
	out->sql_len = l;
	return shardkey_param_types(key + l + 1, keylen - l - 1, &out->types, &out->n_types);
}

/* Reads the request at the head of the client's input (a simple Query, or
 * extended-protocol messages up to Sync/Flush) and folds what each of its
 * statements touches into *acc. false: wait for more bytes. */
static bool scan_request(struct client *c, const struct proto_frame *f, const struct route_rules *rr,
			 struct shardkey_result *acc, bool *provisional, uint32_t *read_need)
{
	*provisional = false;
	*read_need = 0;
	struct buf *in = c->io.in;
	size_t have = buf_len(in);
	bool sharded = false;
	acc->outcome = SHARDKEY_DEFAULT;
	acc->shard = -1;
	acc->writes = false;
	if (f->type == PqMsg_Query) {
		uint32_t total = f->len + 1;
		if (total > ROUTE_INSPECT_MAX) {
			acc->writes = true;   /* not parsed: default_shard, SPEC §2 */
			return true;
		}
		if (have < total)
			return false;
		const uint8_t *m = buf_pullup(in, total);
		const char *sql = (const char *)m + 5;
		scan_statement(c, rr, sql, strnlen(sql, total - 5), NULL, acc, &sharded);
		return true;
	}
	if (f->type != PqMsg_Parse && f->type != PqMsg_Bind && f->type != PqMsg_Describe &&
	    f->type != PqMsg_Execute && f->type != PqMsg_Close)
		return true;
	size_t lim = have < ROUTE_SCAN_MAX ? have : ROUTE_SCAN_MAX;
	const uint8_t *m = buf_pullup(in, lim);
	struct scan_parse parses[ROUTE_SCAN_PARSES];
	size_t n_parses = 0;
	bool complete = false, truncated = false, flush = false, bound = false;
	size_t off = 0, want = 0;
	while (off + 5 <= lim) {
		uint8_t type = m[off];
		uint32_t l = proto_get_u32(m + off + 1);
		if (l < 4 || type == PqMsg_Sync || type == PqMsg_Flush || type == PqMsg_Query ||
		    type == PqMsg_FunctionCall || type == PqMsg_Terminate) {
			complete = true;   /* (a bad length: the pump refuses it) */
			flush = l >= 4 && type == PqMsg_Flush;
			break;
		}
		size_t total = (size_t)l + 1;
		if (total > lim - off) {
			want = off + total;
			break;
		}
		const uint8_t *body = m + off + 5;
		size_t blen = l - 4;
		if (type == PqMsg_Parse) {
			struct scan_parse sp;
			if (n_parses == ROUTE_SCAN_PARSES || !read_parse(body, blen, &sp)) {
				truncated = true;
				sharded = true;   /* unknown: assume the worst */
				break;
			}
			parses[n_parses++] = sp;
		} else if (type == PqMsg_Bind) {
			size_t noff = 0;
			const char *portal, *name;
			struct scan_parse st;
			bound = true;
			if (proto_read_cstring(body, blen, &noff, &portal) && proto_read_cstring(body, blen, &noff, &name) &&
			    bind_statement(c, parses, n_parses, name, &st)) {
				struct shardkey_bind b = { body, blen, st.types, st.n_types };
				scan_statement(c, rr, st.sql, st.sql_len, &b, acc, &sharded);
			}
		}
		off += total;
	}
	if (!complete) {
		size_t need = want ? want : off + 5;
		if (lim == have && need <= ROUTE_SCAN_MAX) {
			/* the rest is on its way: let it in (bounded) */
			*read_need = (uint32_t)need;
			log_debug("C-%llu: routing waits for %zu bytes of the request (%zu here)", (unsigned long long)c->id,
				  need, have);
			return false;
		}
		truncated = true;
	}
	/* Statements prepared and not executed here: their literal keys. */
	bool sharded_before = sharded;
	for (size_t i = 0; i < n_parses; i++)
		if (!parses[i].bound)
			scan_statement(c, rr, parses[i].sql, parses[i].sql_len, NULL, acc, &sharded);
	/* Parse, Describe, Flush of a sharded statement: its Bind comes next,
	 * in the same server transaction. */
	*provisional = flush && !bound && sharded && !sharded_before && acc->outcome == SHARDKEY_DEFAULT;
	if (truncated && sharded) {
		acc->outcome = SHARDKEY_CROSS;
		acc->shard = -1;
	}
	return true;
}

/* The request is refused with an error (the session answers it:
 * ReadyForQuery, or skipping to Sync; inside a held BEGIN, the
 * transaction fails). */
/* The decision's reply, started empty in its own storage (a reply to the
 * client is rare: route_decision_init leaves it unset). */
static struct pktbuf *decision_reply(struct route_decision *d)
{
	pktbuf_init(&d->reply, d->reply_storage, sizeof d->reply_storage);
	return &d->reply;
}

static void refuse(struct route_decision *d, const char *sqlstate, const char *msg)
{
	d->action = ROUTE_REFUSE;
	snprintf(d->sqlstate, sizeof d->sqlstate, "%s", sqlstate);
	snprintf(d->message, sizeof d->message, "%s", msg);
}

/* Cross-shard work for the fan-out (fanout.h): the session starts it, and
 * routes again, without it, if it finds one shard will do. */
static enum shard_decision ask_fanout(struct route_decision *d, enum route_fanout kind, bool sharded)
{
	d->fanout = kind;
	d->fanout_sharded = sharded;
	return SHARD_FANOUT;
}

/* The fan-out declined a request ended by Flush (asyncpg's Parse,
 * Describe, Flush): its Bind, next, picks its shards itself, as for a
 * statement whose key is a parameter. */
static void after_declined_flush(const struct client *c, unsigned declined, struct route_decision *d)
{
	if ((declined & ROUTE_DECLINED_FLUSH) && pool_mode_per_transaction(c->pool->mode) && prep_enabled(c))
		d->phase = ROUTE_PHASE_PROVISIONAL;
}

static enum shard_decision decide_shard(struct client *c, const struct proto_frame *f, const struct route_rules *rr,
					unsigned declined, int *shard, enum route_via *via, struct route_decision *d)
{
	const struct config_pool *cp = c->pool->cpool;
	int n_shards = (int)cp->n_shards;
	*shard = c->shard_override >= 0 ? c->shard_override : (cp->default_shard >= 0 ? cp->default_shard : 0);
	*via = c->shard_override >= 0 ? ROUTE_VIA_SET : ROUTE_VIA_DEFAULT;
	if (n_shards <= 1)
		return SHARD_DECIDED;
	if (d->known_shard >= 0 && d->known_shard < n_shards) {
		*shard = d->known_shard;
		*via = ROUTE_VIA_KEY;
		return SHARD_DECIDED;
	}

	/* A comment hint routes this one transaction, whatever was SET. */
	const char *sql;
	size_t len;
	if (route_statement_text(c, f, &sql, &len)) {
		struct router_verdict local;
		const struct router_verdict *v = route_classify(c, rr, sql, len, &local);
		char msg[160];
		if (v->hint_invalid) {
			refuse(d, "22023", "invalid pgcat hint: shard= takes a shard number, sharding_key= a key of at most 63 bytes");
			return SHARD_REFUSED;
		}
		if (v->hint_shard >= 0) {
			if (v->hint_shard >= n_shards) {
				snprintf(msg, sizeof msg, "invalid shard %d in pgcat hint: this pool has shards 0 to %d",
					 v->hint_shard, n_shards - 1);
				refuse(d, "22023", msg);
				return SHARD_REFUSED;
			}
			*shard = v->hint_shard;
			*via = ROUTE_VIA_HINT;
			return SHARD_DECIDED;
		}
		if (v->has_hint_key) {
			char err[120];
			int s;
			if (!sharding_shard_for_key(cp->sharding_function, v->hint_key, strlen(v->hint_key), n_shards, &s,
						    err, sizeof err)) {
				snprintf(msg, sizeof msg, "invalid sharding_key in pgcat hint: %s", err);
				refuse(d, "22023", msg);
				return SHARD_REFUSED;
			}
			*shard = s;
			*via = ROUTE_VIA_HINT;
			return SHARD_DECIDED;
		}
	}
	if (c->shard_override >= 0)
		return SHARD_DECIDED;

	struct shardkey_result r = { SHARDKEY_DEFAULT, -1, true, false, 0 };
	if (cp->query_parser_enabled && cp->n_sharded_tables > 0) {
		bool provisional;
		if (!scan_request(c, f, rr, &r, &provisional, &d->read_need))
			return SHARD_WAIT;
		if (provisional && pool_mode_per_transaction(c->pool->mode) && prep_enabled(c))
			d->phase = ROUTE_PHASE_PROVISIONAL;
	} else if (route_statement_text(c, f, &sql, &len)) {
		struct router_verdict local;
		r.writes = route_classify(c, rr, sql, len, &local)->writes;
	}
	if (r.outcome == SHARDKEY_ONE) {
		*shard = r.shard;
		*via = ROUTE_VIA_KEY;
		return SHARD_DECIDED;
	}
	if (r.outcome == SHARDKEY_DEFAULT && cp->default_shard >= 0)
		return SHARD_DECIDED;
	/* Several shards, a sharded table without key, or default_shard = all. */
	if (r.outcome == SHARDKEY_CROSS && f->type != PqMsg_Query && !(declined & ROUTE_FANOUT_BATCH)) {
		/* executemany, executeBatch: one statement bound with keys of
		 * several shards, each Bind run on its own */
		return ask_fanout(d, ROUTE_FANOUT_BATCH, true);
	}
	if (r.writes && r.outcome == SHARDKEY_CROSS) {
		/* a COPY FROM STDIN or a multi-row INSERT whose rows belong to
		 * several shards is split (or, with default_shard = all, an
		 * UPDATE or DELETE without a key runs on every shard); declined:
		 * it prepares only, and its Bind is routed by itself */
		if (!(declined & ROUTE_FANOUT_SPLIT))
			return ask_fanout(d, ROUTE_FANOUT_SPLIT, true);
		after_declined_flush(c, declined, d);
		return SHARD_DECIDED;
	}
	if (r.writes) {
		if (r.outcome == SHARDKEY_DEFAULT && cp->default_shard < 0) {
			/* default_shard = all: DDL and writes of tables kept on
			 * every shard run on every shard */
			return ask_fanout(d, ROUTE_FANOUT_BROADCAST, false);
		}
		refuse(d, "0A000", "cross-shard write: the statement's sharding keys are missing or on several "
				   "shards; use SET SHARD or SET SHARDING KEY");
		return SHARD_REFUSED;
	}
	/* A read on several shards, merged (or, declined: it executes nothing
	 * and any shard answers alike). (*shard is default_shard, or shard 0
	 * for default_shard = all.) */
	if (!(declined & ROUTE_FANOUT_READ))
		return ask_fanout(d, ROUTE_FANOUT_READ, r.outcome == SHARDKEY_CROSS);
	after_declined_flush(c, declined, d);
	return SHARD_DECIDED;
}

_Static_assert(ROUTE_VIA__COUNT == SHM_ROUTE_VIA, "one shared counter per way of choosing a shard");

/* The guard looks at one message at a time (a pipeline of many Binds is
 * checked in one pass): a whole Query, or one Bind with its statement.
 * false: wait for the rest of it. */
static bool scan_message(struct client *c, const struct proto_frame *f, const struct route_rules *rr,
			 struct shardkey_result *acc, uint32_t *read_need)
{
	bool provisional, sharded = false;
	if (f->type == PqMsg_Query)
		return scan_request(c, f, rr, acc, &provisional, read_need);
	*read_need = 0;
	acc->outcome = SHARDKEY_DEFAULT;
	acc->shard = -1;
	acc->writes = false;
	struct buf *in = c->io.in;
	size_t total = (size_t)f->len + 1;
	if (buf_len(in) < total) {
		*read_need = (uint32_t)total;   /* (at most ROUTE_SCAN_MAX) */
		return false;
	}
	const uint8_t *body = buf_pullup(in, (size_t)total) + 5;
	size_t blen = total - 5, noff = 0;
	const char *portal, *name;
	struct scan_parse st;
	if (proto_read_cstring(body, blen, &noff, &portal) && proto_read_cstring(body, blen, &noff, &name) &&
	    bind_statement(c, NULL, 0, name, &st)) {
		struct shardkey_bind b = { body, blen, st.types, st.n_types };
		scan_statement(c, rr, st.sql, st.sql_len, &b, acc, &sharded);
	}
	return true;
}

enum route_active route_refuse_on_server(const struct client *c, struct server *s, const struct proto_frame *f,
					 const char *sqlstate, const char *msg, struct route_active_decision *d)
{
	uint32_t total = f->len + 1;
	if (buf_len(c->io.in) < total) {
		d->read_need = total;
		return ROUTE_ACTIVE_WAIT;
	}
	/* (a FunctionCall is answered as a Query is: an error, ReadyForQuery) */
	bool ok = f->type == PqMsg_Bind ? prep_server_fail_bind(s, sqlstate, msg)
					: prep_server_fail_query(s, sqlstate, msg);
	if (!ok)
		return ROUTE_ACTIVE_FORWARD;
	d->consume = total;
	log_debug("C-%llu: %s", (unsigned long long)c->id, msg);
	return ROUTE_ACTIVE_CONSUMED;
}

/* two_phase_commit (SPEC §6): a transaction may go on to another shard at
 * the first message of a request, s owing nothing and no error since its
 * last ReadyForQuery (an extended segment may be open: asyncpg prepares
 * with Flush, then sends its Bind; s closes it with pgcat's next Sync or
 * Query there). Not in statement mode, which has no transaction blocks. */
static bool may_cross(const struct client *c, const struct server *s)
{
	return c->w->cfg->general.two_phase_commit && c->pool->mode == POOL_MODE_TRANSACTION &&
	       s->txn.tx_status == 'T' && s->txn.outstanding == 0 && !s->txn.set_cycle_error && !s->txn.in_copy_in;
}

static enum route_active refuse_elsewhere(struct client *c, struct server *s, const struct proto_frame *f,
					  const struct shardkey_result *r, struct route_active_decision *d);

enum route_active route_active_refuse_cross(struct client *c, struct server *s, const struct proto_frame *f,
					    const char *why, struct route_active_decision *d)
{
	if (f->type == PqMsg_Parse) {
		d->phase = ROUTE_PHASE_REFUSE_BIND;   /* as without the switch: its Bind is refused */
		return ROUTE_ACTIVE_FORWARD;
	}
	if (why && why[0])
		return route_refuse_on_server(c, s, f, "0A000", why, d);
	struct shardkey_result r = { SHARDKEY_ONE, d->cross_shard, true, false, 0 };
	return refuse_elsewhere(c, s, f, &r, d);
}

bool route_request_shard(struct client *c, const struct proto_frame *f, struct shardkey_result *r,
			 uint32_t *read_need)
{
	struct route_rules rr;
	route_rules_build(c, &rr);
	bool provisional;
	return scan_request(c, f, &rr, r, &provisional, read_need);
}

/* What the transaction on s learnt of its tables (server_ask_placement):
 * an INSERT without a column list has its keys where the sharding column
 * sits. */
static void place_tables(struct route_rules *rr, const struct server *s)
{
	if (s->txn.placement == TXN_PLACEMENT_KNOWN && s->txn.placed_table < rr->r.n_sharded) {
		rr->t[s->txn.placed_table].positioned = true;
		rr->t[s->txn.placed_table].position = s->txn.placed_position;
	}
}

/* An INSERT without a column list into a sharded table whose column places
 * the transaction on s has not asked yet: asked of s, if it owes nothing
 * and is inside a transaction (the question must end nothing of the
 * client's); true: d says what to ask, the request waits for the answer. */
static bool ask_placement(const struct client *c, const struct server *s, const struct route_rules *rr,
			  uint8_t table, struct route_active_decision *d)
{
	(void)c;
	if (s->txn.placement != TXN_PLACEMENT_NONE || table >= rr->r.n_sharded || s->txn.outstanding ||
	    s->txn.ext_pending || s->txn.tx_status != 'T')
		return false;
	const struct router_table *t = &rr->t[table];
	struct copy_route cr;
	memset(&cr, 0, sizeof cr);
	snprintf(cr.schema, sizeof cr.schema, "%s", t->schema ? t->schema : "");
	snprintf(cr.table, sizeof cr.table, "%s", t->table);
	snprintf(cr.column, sizeof cr.column, "%s", t->column);
	if (!copy_route_placement_query(&cr, d->ask_sql, sizeof d->ask_sql))
		return false;
	d->ask_table = table;
	return true;
}

enum route_active route_active_message(struct client *c, struct server *s, const struct proto_frame *f,
				       struct route_active_decision *d)
{
	d->phase = c->shard_phase;
	d->consume = 0;
	d->read_need = 0;
	d->cross_shard = -1;
	d->cross_from = -1;
	if (d->phase == ROUTE_PHASE_REROUTING)
		return ROUTE_ACTIVE_WAIT;
	if (d->phase == ROUTE_PHASE_KNOWN) {
		/* judged already (its key where the table's sharding column
		 * sits): the statements after it are guarded as usual */
		if (f->type == PqMsg_Query || f->type == PqMsg_Sync || f->type == PqMsg_FunctionCall)
			d->phase = ROUTE_PHASE_GUARD;
		return ROUTE_ACTIVE_FORWARD;
	}
	bool refuse_bind = d->phase == ROUTE_PHASE_REFUSE_BIND && f->type == PqMsg_Bind;
	if (f->type == PqMsg_Parse && d->phase == ROUTE_PHASE_GUARD && f->len + 1 <= ROUTE_SCAN_MAX) {
		/* The request this Parse opens, with its Binds: once the Parse
		 * is sent, its text may be known nowhere else (no prepared
		 * statement rewriting), so it is judged now and its Bind
		 * refused if need be. */
		struct route_rules rr;
		route_rules_build(c, &rr);
		place_tables(&rr, s);
		struct shardkey_result r = { SHARDKEY_DEFAULT, -1, false, false, 0 };
		bool provisional;
		if (!scan_request(c, f, &rr, &r, &provisional, &d->read_need))
			return ROUTE_ACTIVE_WAIT;
		if (r.unplaced && ask_placement(c, s, &rr, r.unplaced_table, d))
			return ROUTE_ACTIVE_ASK;
		if (r.outcome == SHARDKEY_ONE && r.shard != s->sp->shard && may_cross(c, s)) {
			d->cross_shard = r.shard;
			d->cross_from = s->sp->shard;
			return ROUTE_ACTIVE_CROSS;
		}
		if (r.outcome == SHARDKEY_CROSS || (r.outcome == SHARDKEY_ONE && r.shard != s->sp->shard))
			d->phase = ROUTE_PHASE_REFUSE_BIND;
		return ROUTE_ACTIVE_FORWARD;
	}
	if (f->type != PqMsg_Bind && f->type != PqMsg_Query) {
		if ((d->phase == ROUTE_PHASE_PROVISIONAL || d->phase == ROUTE_PHASE_REFUSE_BIND) &&
		    (f->type == PqMsg_Sync || f->type == PqMsg_FunctionCall))
			d->phase = ROUTE_PHASE_GUARD;   /* the segment ends where it is */
		return ROUTE_ACTIVE_FORWARD;
	}
	if (d->phase == ROUTE_PHASE_REFUSE_BIND && f->type == PqMsg_Query)
		d->phase = ROUTE_PHASE_GUARD;   /* the Parse's request ended */
	/* Too long to look at: the parser would not read it either. */
	if (f->len + 1 > ROUTE_SCAN_MAX)
		return ROUTE_ACTIVE_FORWARD;
	struct route_rules rr;
	route_rules_build(c, &rr);
	place_tables(&rr, s);
	struct shardkey_result r = { SHARDKEY_DEFAULT, -1, false, false, 0 };
	if (d->phase == ROUTE_PHASE_PROVISIONAL && f->type == PqMsg_Bind) {
		/* Only prepared so far: the Binds that follow are judged
		 * together, up to their Sync. asyncpg's executemany prepares
		 * (Parse, Describe, Flush) and then sends all its Binds: a batch
		 * with keys on several shards must start afresh and go to the
		 * fan-out whole, not begin here because its first key is here. */
		bool provisional;
		if (!scan_request(c, f, &rr, &r, &provisional, &d->read_need))
			return ROUTE_ACTIVE_WAIT;   /* the rest of the request first */
	} else if (!scan_message(c, f, &rr, &r, &d->read_need)) {
		return ROUTE_ACTIVE_WAIT;   /* the rest of the message first */
	}
	if (r.unplaced && ask_placement(c, s, &rr, r.unplaced_table, d))
		return ROUTE_ACTIVE_ASK;
	if (refuse_bind)
		d->phase = ROUTE_PHASE_GUARD;
	int here = s->sp->shard;
	if (refuse_bind && !(r.outcome == SHARDKEY_CROSS || (r.outcome == SHARDKEY_ONE && r.shard != here)))
		r.outcome = SHARDKEY_CROSS;   /* judged at its Parse; its statement is not known here */
	/* (with a held BEGIN the Bind starts afresh anyway: the BEGIN goes
	 * first, and not in the middle of a segment) */
	bool in_place = !(d->phase == ROUTE_PHASE_PROVISIONAL && c->held_begin);
	if (in_place && (r.outcome == SHARDKEY_DEFAULT || (r.outcome == SHARDKEY_ONE && r.shard == here))) {
		if (d->phase == ROUTE_PHASE_PROVISIONAL && f->type == PqMsg_Bind)
			d->phase = ROUTE_PHASE_GUARD;   /* already where it belongs */
		return ROUTE_ACTIVE_FORWARD;
	}
	/* Only prepared so far (the server owes nothing, no transaction): the
	 * Bind starts afresh on its own shard, and so does a Query (asyncpg's
	 * copy_records_to_table prepares a SELECT of the table, then sends its
	 * COPY as a Query: split by shard like any COPY, not refused as
	 * pipelined behind the prepare). */
	if (d->phase == ROUTE_PHASE_PROVISIONAL && (f->type == PqMsg_Bind || f->type == PqMsg_Query) &&
	    s->txn.outstanding == 0 &&
	    s->txn.ext_pending && s->txn.tx_status == 'I' && prep_server_end_segment(s)) {
		d->phase = ROUTE_PHASE_REROUTING;
		return ROUTE_ACTIVE_WAIT;
	}
	if (r.outcome == SHARDKEY_ONE && !refuse_bind && d->phase != ROUTE_PHASE_PROVISIONAL && may_cross(c, s)) {
		d->cross_shard = r.shard;
		d->cross_from = here;
		return ROUTE_ACTIVE_CROSS;
	}
	return refuse_elsewhere(c, s, f, &r, d);
}

/* A statement for another shard, or several, inside the transaction on s. */
static enum route_active refuse_elsewhere(struct client *c, struct server *s, const struct proto_frame *f,
					  const struct shardkey_result *r, struct route_active_decision *d)
{
	int here = s->sp->shard;
	char msg[240];
	if (r->outcome == SHARDKEY_ONE)
		snprintf(msg, sizeof msg,
			 "cross-shard transaction: this statement's keys are on shard %d, the transaction runs on shard %d; "
			 "use one transaction per shard%s",
			 r->shard, here,
			 c->w->cfg->general.two_phase_commit ? "" : " (or two_phase_commit, to go on there)");
	else
		snprintf(msg, sizeof msg,
			 "cross-shard statement inside a transaction or pipeline on shard %d: its sharding keys are "
			 "missing or on several shards",
			 here);
	return route_refuse_on_server(c, s, f, "0A000", msg, d);
}

static struct srvpool *pick(struct client *c, const struct proto_frame *f, unsigned declined,
			    struct route_decision *d);

/* ---- BEGIN held until the first statement (sharding) ---- */


#define ROUTE_HELD_BEGIN_MAX 200

/* The tag of the BEGIN or START TRANSACTION sql is (libpg_query said it
 * begins a transaction), or NULL. */
static const char *begin_tag(const char *sql, size_t len)
{
	size_t i = sqllex_skip_blank(sql, len, 0), at = i;
	if (sqllex_keyword(sql, len, &at, "begin"))
		return "BEGIN";
	at = i;
	return sqllex_keyword(sql, len, &at, "start") ? "START TRANSACTION" : NULL;
}

/* In a sharded pool with automatic routing, a BEGIN alone says nothing
 * about the shard: pgcat answers it and holds it until the transaction's
 * first statement has been routed (server.c sends it first on link). true:
 * answered (held BEGIN, or the COMMIT/ROLLBACK of a transaction that never
 * reached a server). Not in statement mode: its BEGIN goes to a server,
 * which closes the client at once (server.c), as PgBouncer does. */
static bool hold_begin(const struct client *c, const struct proto_frame *f, struct route_decision *d)
{
	const struct config_pool *cp = c->pool->cpool;
	if (f->type != PqMsg_Query)
		return false;
	if (!c->held_begin && (cp->n_shards <= 1 || !cp->query_parser_enabled || cp->n_sharded_tables == 0 ||
			       c->shard_override >= 0 || c->pool->mode != POOL_MODE_TRANSACTION))
		return false;
	uint32_t total = f->len + 1;
	if (total > 5 + ROUTE_HELD_BEGIN_MAX || buf_len(c->io.in) < total)
		return false;
	const char *sql = (const char *)buf_pullup(c->io.in, total) + 5;
	size_t len = strnlen(sql, total - 5);
	struct pktbuf *pb = decision_reply(d);
	if (c->held_begin) {
		const char *tag = sqllex_plain_end_tag(sql, len);
		if (!tag)
			return false;
		d->action = ROUTE_HOLD;
		d->held = ROUTE_HELD_END;
		d->consume = total;
		pktbuf_command_complete(pb, tag);
		pktbuf_ready_for_query(pb, 'I');
		return true;
	}
	struct route_rules rr;
	route_rules_build(c, &rr);
	rr.r.literals_inline = true;   /* (a Query's) */
	struct router_verdict local;
	const struct router_verdict *v = route_classify(c, &rr, sql, len, &local);
	if (!v->parsed || !v->begins || v->ends || v->multi_statement || v->reads_sharded || v->hint_shard >= 0 ||
	    v->has_hint_key || v->hint_invalid || v->hint_role != ROUTER_ROLE_NONE)
		return false;
	const char *tag = begin_tag(sql, len);
	if (!tag)
		return false;
	d->action = ROUTE_HOLD;
	d->held = ROUTE_HELD_BEGIN;
	d->held_sql = sql;
	d->held_len = len;
	d->held_read_only = v->begin_read_only;
	d->consume = total;
	pktbuf_command_complete(pb, tag);
	pktbuf_ready_for_query(pb, 'T');
	return true;
}

/* One message of the extended protocol at m[*off..lim): its type, body and
 * length; false if it is not all there. */
static bool next_msg(const uint8_t *m, size_t lim, size_t *off, uint8_t *type, const uint8_t **body, size_t *blen)
{
	if (lim - *off < 5)
		return false;
	uint32_t l = proto_get_u32(m + *off + 1);
	if (l < 4 || (size_t)l + 1 > lim - *off)
		return false;
	*type = m[*off];
	*body = m + *off + 5;
	*blen = l - 4;
	*off += (size_t)l + 1;
	return true;
}

/* pgjdbc (autocommit off) opens its transactions with Parse/Bind/Execute
 * of "BEGIN" in the same request as the first statement, before its Sync.
 * That BEGIN says nothing about the shard either: pgcat answers its
 * messages (ParseComplete, BindComplete, NoData, BEGIN) and holds it as
 * hold_begin does, and the rest of the request is routed as the
 * transaction's first statement (to its shard, or across shards). */
static bool hold_begin_extended(const struct client *c, const struct proto_frame *f, struct route_decision *d)
{
	const struct config_pool *cp = c->pool->cpool;
	if (c->held_begin || (f->type != PqMsg_Parse && f->type != PqMsg_Bind) || cp->n_shards <= 1 ||
	    !cp->query_parser_enabled || cp->n_sharded_tables == 0 || c->shard_override >= 0 ||
	    c->pool->mode != POOL_MODE_TRANSACTION || !prep_enabled(c))
		return false;
	struct buf *in = c->io.in;
	size_t have = buf_len(in), lim = have < 1024 ? have : 1024, off = 0, parse_at = 0, parse_total = 0;
	const uint8_t *m = buf_pullup(in, (size_t)lim), *body, *key = NULL;
	size_t blen, b = 0, keylen;
	uint8_t type;
	const char *name = NULL, *sql = NULL, *portal, *stmt;
	if (!m || !next_msg(m, lim, &off, &type, &body, &blen))
		return false;
	if (type == PqMsg_Parse) {
		if (!proto_read_cstring(body, blen, &b, &name) || !proto_read_cstring(body, blen, &b, &sql) || blen - b != 2 ||
		    body[b] != 0 || body[b + 1] != 0)
			return false;   /* (parameters: not a plain BEGIN) */
		parse_total = off - parse_at;
		if (!next_msg(m, lim, &off, &type, &body, &blen))
			return false;
	}
	/* the Bind: the unnamed portal, no parameters */
	b = 0;
	if (type != PqMsg_Bind || !proto_read_cstring(body, blen, &b, &portal) || portal[0] ||
	    !proto_read_cstring(body, blen, &b, &stmt) || blen - b < 4)
		return false;
	uint16_t nfmt = (uint16_t)(body[b] << 8 | body[b + 1]);
	b += 2 + 2 * (size_t)nfmt;
	if (blen < b + 2 || body[b] != 0 || body[b + 1] != 0)
		return false;
	if (name ? strcmp(name, stmt) != 0 : !prep_client_statement(c, stmt, &key, &keylen))
		return false;
	if (!name)
		sql = (const char *)key;   /* "query\0 types" */
	bool describe = false, sync = false;
	if (!next_msg(m, lim, &off, &type, &body, &blen))
		return false;
	if (type == PqMsg_Describe) {
		if (blen != 2 || body[0] != 'P' || body[1] != 0 || !next_msg(m, lim, &off, &type, &body, &blen))
			return false;
		describe = true;
	}
	if (type != PqMsg_Execute || blen != 5 || body[0] != 0)
		return false;
	/* what follows: the transaction's first statement, or its Sync */
	size_t next = off;
	if (lim - off < 5)
		return false;
	if (m[off] == PqMsg_Sync) {
		if (!next_msg(m, lim, &next, &type, &body, &blen))
			return false;
		sync = true;
	}
	size_t len = strlen(sql);
	if (len > ROUTE_HELD_BEGIN_MAX)
		return false;
	struct route_rules rr;
	route_rules_build(c, &rr);
	rr.r.literals_inline = true;   /* (a Query's) */
	struct router_verdict local;
	const struct router_verdict *v = route_classify(c, &rr, sql, len, &local);
	if (!v->parsed || !v->begins || v->ends || v->multi_statement || v->reads_sharded || v->hint_shard >= 0 ||
	    v->has_hint_key || v->hint_invalid || v->hint_role != ROUTER_ROLE_NONE)
		return false;
	const char *tag = begin_tag(sql, len);
	if (!tag)
		return false;
	d->action = ROUTE_HOLD;
	d->held = ROUTE_HELD_BEGIN;
	d->held_sql = sql;
	d->held_len = len;
	d->held_read_only = v->begin_read_only;
	/* a named Parse: the statement is the client's from now on, as if a
	 * server had taken it (its next BEGIN is a Bind of it) */
	if (name && name[0]) {
		d->adopt = m + parse_at;
		d->adopt_len = (uint32_t)parse_total;
	}
	struct pktbuf *pb = decision_reply(d);
	if (name) {
		pktbuf_begin(pb, PqMsg_ParseComplete);
		pktbuf_end(pb);
	}
	pktbuf_begin(pb, PqMsg_BindComplete);
	pktbuf_end(pb);
	if (describe) {
		pktbuf_begin(pb, PqMsg_NoData);
		pktbuf_end(pb);
	}
	pktbuf_command_complete(pb, tag);
	if (sync)
		pktbuf_ready_for_query(pb, 'T');
	d->consume = next;
	d->reprocess = true;   /* the rest of the request, already here */
	return true;
}

void route_pick(struct client *c, const struct proto_frame *f, bool may_hold, unsigned declined,
		struct route_decision *d)
{
	/* One server in all (most pools): no shard to decide, so no BEGIN to
	 * hold (hold_begin, hold_begin_extended), no role to pick, nowhere
	 * to retry; nothing below would read the request, and it is not
	 * walked through to find that out. */
	if (c->pool->n_targets == 1 && !c->held_begin) {
		d->set_phase = true;
		d->phase = ROUTE_PHASE_NONE;
		d->action = ROUTE_CHECKOUT;
		d->sp = c->pool->targets[0];
		d->retry_on = false;
		return;
	}
	/* (a BEGIN is held only in a sharded pool: hold_begin) */
	if (may_hold && (c->pool->cpool->n_shards > 1 || c->held_begin) &&
	    (hold_begin(c, f, d) || hold_begin_extended(c, f, d)))
		return;
	struct srvpool *sp = pick(c, f, declined, d);
	if (!sp)
		return;
	d->action = ROUTE_CHECKOUT;
	d->sp = sp;
	/* Reads on a replica can be sent elsewhere if it dies before answering. */
	d->retry_on = pool_mode_per_transaction(c->pool->mode) && sp->role != SERVER_ROLE_PRIMARY && c->pool->n_targets > 1;
}

static struct srvpool *pick_in_shard(struct client *c, const struct proto_frame *f, const struct route_rules *rr,
				     int shard, struct route_decision *d);

static struct srvpool *pick(struct client *c, const struct proto_frame *f, unsigned declined,
			    struct route_decision *d)
{
	struct pool *p = c->pool;
	/* The parser's rules, for a pool with a choice to make: with one
	 * server in all there is no shard to decide and no role to pick, and
	 * nothing below reads them (decide_shard and pick_in_shard return
	 * first), so they are not built for every request. */
	struct route_rules rr;
	if (p->n_targets > 1) {
		route_rules_build(c, &rr);
		rr.r.literals_inline = f->type == PqMsg_Query;
	}
	d->set_phase = true;
	d->phase = ROUTE_PHASE_NONE;
	int shard;
	enum route_via via;
	switch (decide_shard(c, f, &rr, declined, &shard, &via, d)) {
	case SHARD_DECIDED:
		break;
	case SHARD_WAIT:
		d->action = ROUTE_WAIT;
		return NULL;
	case SHARD_REFUSED:
		d->action = ROUTE_REFUSE;
		return NULL;
	case SHARD_FANOUT:
		d->action = ROUTE_FANOUT;
		return NULL;
	}
	struct srvpool *sp = pick_in_shard(c, f, &rr, shard, d);
	if (sp && p->cpool->n_shards > 1) {
		route_pick_count(sp, via);
		/* A shard the client did not choose: the transaction's other
		 * statements must agree with it. */
		if (d->phase == ROUTE_PHASE_NONE && (via == ROUTE_VIA_KEY || via == ROUTE_VIA_DEFAULT) &&
		    p->cpool->query_parser_enabled && p->cpool->n_sharded_tables > 0)
			d->phase = d->known_shard >= 0 ? ROUTE_PHASE_KNOWN : ROUTE_PHASE_GUARD;
	}
	return sp;
}

static struct srvpool *pick_in_shard(struct client *c, const struct proto_frame *f, const struct route_rules *rr,
				     int shard, struct route_decision *d)
{
	const struct config_pool *cp = c->pool->cpool;
	struct srvpool *in_shard[CONFIG_MAX_SHARD_SERVERS];
	struct srvpool **all = in_shard;
	size_t n;
	if (cp->n_shards <= 1 && shard == 0 && c->pool->n_targets <= CONFIG_MAX_SHARD_SERVERS) {
		all = c->pool->targets;   /* one shard: every server is in it */
		n = c->pool->n_targets;
	} else {
		n = rotation_shard_servers(c->pool, shard, in_shard, CONFIG_MAX_SHARD_SERVERS);
	}
	if (n == 0)
		return c->pool->targets[0];
	if (n == 1)
		return all[0];   /* nothing to choose: no parsing, no ban checks */
	uint64_t now = c->w->now_us;
	bool writes;
	enum router_role role = decide_role(c, f, rr, &writes);
	if (role == ROUTER_ROLE_REPLICA && cp->sticky_primary_after_write > 0 && now < c->sticky_until_us)
		role = ROUTER_ROLE_PRIMARY;
	if (writes && cp->sticky_primary_after_write > 0)
		d->sticky_until_us = now + (uint64_t)cp->sticky_primary_after_write * 1000;
	/* read_your_writes = lsn (SPEC §4): a write learns its WAL position
	 * at its end (server.c; in session mode the client stays on its
	 * server anyway); a read goes where the client's last write on this
	 * shard has been replayed. */
	struct srvpool *ok[CONFIG_MAX_SHARD_SERVERS];
	struct srvpool **from = all;
	if (cp->read_your_writes == READ_YOUR_WRITES_LSN) {
		if (writes)
			d->want_wal = pool_mode_per_transaction(c->pool->mode);
		else if (role != ROUTER_ROLE_PRIMARY) {
			struct route_ryw r;
			/* (not with a held BEGIN: server.c would have to undo it) */
			size_t k = route_ryw_filter(c, all, n, shard, !c->held_begin, ok, &r);
			if (r.marked) {
				d->ryw_shard = shard;
				d->ryw_clear = r.all_reached;
				d->ryw_resolved = r.resolved;
				d->ryw_lsn = r.lsn;
				d->ryw_ask = r.ask;
				if (!r.all_reached) {
					from = ok;
					n = k;
					if (k == 1 && rotation_takes_writes(ok[0]))
						role = ROUTER_ROLE_PRIMARY;   /* no replica caught up */
				}
			}
		}
	}
	bool no_writer = false;
	struct srvpool *sp = route_choose_in_shard(c, from, n, shard, role, &no_writer);
	d->no_writer = no_writer;
	return sp;
}

/* ---- SET SERVER ROLE and friends ---- */

/* The reply pb ends with ReadyForQuery: in the transaction pgcat holds,
 * or idle. */
static void reply(const struct client *c, struct pktbuf *pb)
{
	pktbuf_ready_for_query(pb, c->held_begin ? 'T' : 'I');
}

static void reply_show(const struct client *c, struct pktbuf *pb, const char *column, const char *value)
{
	pktbuf_begin(pb, PqMsg_RowDescription);
	pktbuf_put_u16(pb, 1);
	pktbuf_put_cstring(pb, column);
	pktbuf_put_u32(pb, 0);
	pktbuf_put_u16(pb, 0);
	pktbuf_put_u32(pb, 25);      /* text */
	pktbuf_put_u16(pb, 0xffff);  /* -1: variable */
	pktbuf_put_u32(pb, 0xffffffff);
	pktbuf_put_u16(pb, 0);
	pktbuf_end(pb);
	pktbuf_begin(pb, PqMsg_DataRow);
	pktbuf_put_u16(pb, 1);
	pktbuf_put_u32(pb, (uint32_t)strlen(value));
	pktbuf_put_bytes(pb, value, strlen(value));
	pktbuf_end(pb);
	pktbuf_command_complete(pb, "SHOW");
	reply(c, pb);
}

static void reply_error(const struct client *c, struct pktbuf *pb, const char *sqlstate, const char *msg)
{
	client_count_error(c, sqlstate);
	pktbuf_error(pb, "ERROR", sqlstate, msg);
	reply(c, pb);
}

/* SET answered, and the setting it changes. */
static void reply_set(const struct client *c, struct route_decision *d, enum route_setting setting, int value)
{
	d->setting = setting;
	d->value = value;
	struct pktbuf *pb = decision_reply(d);
	pktbuf_command_complete(pb, "SET");
	reply(c, pb);
}

static const char *role_text(int r)
{
	switch (r) {
	case ROUTER_ROLE_PRIMARY: return "primary";
	case ROUTER_ROLE_REPLICA: return "replica";
	case ROUTER_ROLE_ANY: return "any";
	default: return "auto";
	}
}

bool route_local_command(const struct client *c, const char *sql, size_t len, struct route_decision *d)
{
	if (!route_may_be_local(sql, len))
		return false;
	char value[1024];   /* SET SHARDING KEY: a text key may be long */
	enum router_command cmd = router_parse_command(sql, len, value, sizeof value);
	if (cmd == ROUTER_CMD_NONE)
		return false;
	route_decision_init(d);   /* (only now: SELECT passes here on every request) */
	struct pktbuf *pb = decision_reply(d);
	switch (cmd) {
	case ROUTER_CMD_NONE:
		return false;
	case ROUTER_CMD_INVALID:
		reply_error(c, pb, "42601", "syntax error in pgcat command");
		return true;
	case ROUTER_CMD_SET_SERVER_ROLE: {
		enum router_role r;
		if (!router_role_parse(value, strlen(value), &r)) {
			char msg[200];
			snprintf(msg, sizeof msg, "invalid server role \"%.64s\": primary, replica, any, auto or default",
				 value);
			reply_error(c, pb, "22023", msg);
			return true;
		}
		reply_set(c, d, ROUTE_SET_ROLE, (int)r);
		return true;
	}
	case ROUTER_CMD_SET_PRIMARY_READS: {
		int on;
		if (strcasecmp(value, "on") == 0 || strcasecmp(value, "true") == 0) {
			on = 1;
		} else if (strcasecmp(value, "off") == 0 || strcasecmp(value, "false") == 0) {
			on = 0;
		} else if (strcasecmp(value, "default") == 0) {
			on = -1;
		} else {
			reply_error(c, pb, "22023", "invalid value for primary reads: on, off or default");
			return true;
		}
		reply_set(c, d, ROUTE_SET_PRIMARY_READS, on);
		return true;
	}
	case ROUTER_CMD_SET_SHARD: {
		char *end;
		long s = strtol(value, &end, 10);
		if (!value[0] || *end || s < 0 || (size_t)s >= c->pool->cpool->n_shards) {
			char msg[200];
			snprintf(msg, sizeof msg, "invalid shard \"%.64s\": this pool has shards 0 to %zu", value,
				 c->pool->cpool->n_shards - 1);
			reply_error(c, pb, "22023", msg);
			return true;
		}
		reply_set(c, d, ROUTE_SET_SHARD, (int)s);
		return true;
	}
	case ROUTER_CMD_SET_SHARDING_KEY: {
		const struct config_pool *cp = c->pool->cpool;
		char err[120], msg[200];
		int s;
		if (!sharding_shard_for_key(cp->sharding_function, value, strlen(value), (int)cp->n_shards, &s, err,
					    sizeof err)) {
			snprintf(msg, sizeof msg, "invalid sharding key: %s", err);
			reply_error(c, pb, "22023", msg);
			return true;
		}
		reply_set(c, d, ROUTE_SET_SHARD, s);
		return true;
	}
	case ROUTER_CMD_SHOW_SHARD: {
		char v[16];
		int s = c->shard_override >= 0 ? c->shard_override
						: (c->pool->cpool->default_shard >= 0 ? c->pool->cpool->default_shard : 0);
		snprintf(v, sizeof v, "%d", s);
		reply_show(c, pb, "shard", v);
		return true;
	}
	case ROUTER_CMD_SHOW_SERVER_ROLE:
		reply_show(c, pb, "server_role", role_text(c->role_override));
		return true;
	case ROUTER_CMD_SHOW_PRIMARY_READS: {
		bool on = c->primary_reads_override >= 0 ? c->primary_reads_override == 1
							 : c->pool->cpool->primary_reads_enabled;
		reply_show(c, pb, "primary_reads", on ? "on" : "off");
		return true;
	}
	}
	return false;
}
