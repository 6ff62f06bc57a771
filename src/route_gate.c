/* SPDX-License-Identifier: MIT */
/*
 * route_gate: the write pause of a reshard's cutover, on the client's side.
 * While a pool's writes are paused (pool_types.h), a request that provably
 * only reads still gets a server (route_reads_only decides), and the link
 * it gets is write_gated (txn.h): every later statement on it is judged
 * here, and one that might write is refused on the server itself, so that
 * the server's transaction fails as the client is told. Without this, a
 * transaction admitted as a read could write to the old layout after the
 * cutover counted it drained: a row the new layout never sees.
 *
 * "Provably" is the parser's: parsed, writing nothing (router.h), calling
 * no function outside the built-ins known to write nothing. Anything else
 * waits for the cutover to end, as with PAUSE.
 */
#include "route.h"

#include <string.h>

#include "buf_msg.h"
#include "client.h"
#include "pool.h"
#include "prepared.h"
#include "proto.h"
#include "route_pick.h"
#include "router.h"
#include "server.h"

#define GATE_SQLSTATE "25006"   /* read_only_sql_transaction */
#define GATE_MESSAGE                                                                                            \
	"cannot write in this transaction: it began as a read while the pool's writes were paused for a reshard's " \
	"cutover; retry it"

static bool verdict_reads_only(const struct router_verdict *v)
{
	return v->parsed && !v->writes && !v->calls_unknown;
}

/* The verdict on the text of f (route_statement_text) says it only reads;
 * false for a text not whole here or too long to judge. */
static bool text_reads_only(struct client *c, const struct proto_frame *f)
{
	const char *sql;
	size_t len;
	if (!route_statement_text(c, f, &sql, &len))
		return false;
	struct route_rules rr;
	route_rules_build(c, &rr);
	struct router_verdict local;
	return verdict_reads_only(route_classify(c, &rr, sql, len, &local));
}

bool route_reads_only(struct client *c, const struct proto_frame *f)
{
	/* The BEGIN pgcat held goes first: READ ONLY, the server refuses
	 * writes in it (and route_gate judges what follows anyway). */
	if (c->held_begin)
		return c->held_begin_read_only;
	return text_reads_only(c, f);
}

/* The statement name of the Bind at the head of the input (its first
 * bytes are enough): 1, and *name; 0: wait for them; -1: malformed or
 * longer than the head. */
static int bind_name(struct client *c, const struct proto_frame *f, const char **name)
{
	uint32_t total = f->len + 1;
	size_t head = total < PROTO_LONG_HEAD ? total : PROTO_LONG_HEAD;
	if (buf_len(c->io.in) < head)
		return 0;
	const char *m = (const char *)buf_pullup(c->io.in, head);
	size_t pl = strnlen(m + 5, head - 5);
	if (5 + pl + 1 >= head)
		return -1;
	size_t nl = strnlen(m + 5 + pl + 1, head - 5 - pl - 1);
	if (5 + pl + 1 + nl >= head)
		return -1;
	*name = m + 5 + pl + 1;
	return 1;
}

/* A text judged whole, if short enough to judge: the rest of it first
 * (d->read_need). A longer one is taken for a write. */
static bool await_whole(const struct client *c, uint32_t total, struct route_active_decision *d)
{
	if (total > ROUTE_INSPECT_MAX || buf_len(c->io.in) >= total)
		return false;
	d->read_need = total;
	return true;
}

enum route_active route_gate(struct client *c, struct server *s, const struct proto_frame *f,
			     struct route_active_decision *d)
{
	uint32_t total = f->len + 1;
	switch (f->type) {
	case PqMsg_Query:
		if (await_whole(c, total, d))
			return ROUTE_ACTIVE_WAIT;
		if (text_reads_only(c, f))
			return ROUTE_ACTIVE_FORWARD;
		break;
	case PqMsg_Parse: {
		/* A Parse writes nothing: its Bind is judged. The unnamed
		 * statement's text is not kept anywhere else. */
		if (await_whole(c, total, d))
			return ROUTE_ACTIVE_WAIT;
		const char *stmt = NULL;
		if (buf_len(c->io.in) >= 6)
			stmt = (const char *)buf_pullup(c->io.in, 6) + 5;
		if (stmt && stmt[0] == '\0')
			s->txn.gate_unnamed_reads = text_reads_only(c, f);
		return ROUTE_ACTIVE_FORWARD;
	}
	case PqMsg_Bind: {
		const char *name = NULL;
		int got = bind_name(c, f, &name);
		if (got == 0) {
			d->read_need = total < PROTO_LONG_HEAD ? total : PROTO_LONG_HEAD;
			return ROUTE_ACTIVE_WAIT;
		}
		if (got < 0)
			break;
		if (name[0] == '\0') {
			/* the unnamed statement: as its Parse on this link said */
			if (s->txn.gate_unnamed_reads)
				return ROUTE_ACTIVE_FORWARD;
			break;
		}
		/* a named statement pgcat prepared: its text, found by name
		 * (route_statement_text reads the Bind whole) */
		if (await_whole(c, total, d))
			return ROUTE_ACTIVE_WAIT;
		if (text_reads_only(c, f))
			return ROUTE_ACTIVE_FORWARD;
		break;
	}
	case PqMsg_FunctionCall:
		break;   /* a function by its oid: it might write */
	default:
		return ROUTE_ACTIVE_FORWARD;
	}
	return route_refuse_on_server(c, s, f, GATE_SQLSTATE, GATE_MESSAGE, d);
}
