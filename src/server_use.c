/* SPDX-License-Identifier: MIT */
/*
 * server_use: what the link and the pool start on a server connection,
 * above server.c's state machine (server.h): linking it to a client's end
 * (the client's session settings, the health and role checks, a held
 * BEGIN, the replayed-position question of read_your_writes), the
 * question of where a sharded table's sharding column sits, asked inside
 * the client's transaction, and the reset of session state pgcat does not
 * follow. Each sends what it must and sets the state whose replies
 * server.c reads; nothing below calls back here.
 */
#include "server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_end.h"
#include "config.h"
#include "context.h"
#include "buf_msg.h"
#include "log.h"
#include "pktbuf.h"
#include "pool_types.h"
#include "prep_server.h"
#include "proto.h"
#include "rotation.h"

/* What a server keeps of the end it serves from now on. */
static void take_end(struct server *s)
{
	struct client_end *c = s->client;
	s->txn.sent_to_client = false;
	s->txn.req_msgs = 0;
	s->txn.req_data = false;
	s->txn.skip_msgs = c->retry_skip;
	s->prep_on = c->prep_on;
	if (!c->prep_on && s->prep)
		prep_server_forget_unnamed(s);
}

void server_relink(struct server *s)
{
	take_end(s);
}

void server_link(struct server *s)
{
	char *sql = NULL;   /* the SETs, of any length (params.h bounds them) */
	struct client_end *c = s->client;
	take_end(s);
	/* -R: an idle server held still for the move (server_move.c) that a
	 * client here took after all: it is read again. */
	if (io_suspended(&s->io))
		io_suspend(&s->io, false);
	/* Nothing of a previous client may still be awaited. */
	if (s->prep && (s->prep->seg_sent != s->prep->seg_recv || s->prep->parses.len || s->prep->closes.len))
		prep_server_reset_pending(s);
	int n = params_same(c->params, &s->params) ? 0 : params_build_sync(c->params, &s->params, &sql);
	if (n < 0) {
		/* Without its settings the client would run with another's. */
		server_close(s, "out of memory");
		return;
	}
	/* Unused for healthcheck_delay: checked before the client's first byte
	 * goes there (healthcheck_query, after the SETs if any). */
	const struct config_general *g = &s->w->cfg->general;
	bool idle_long = g->healthcheck_delay >= 0 && s->last_used_us &&
			 s->w->now_us - s->last_used_us > (uint64_t)g->healthcheck_delay * 1000;
	/* Where roles matter, the check also asks the server what it is (SPEC
	 * §4 role checks), and a new connection is checked at its first use;
	 * elsewhere healthcheck_query, when idle long. (Replica lag is the lag
	 * monitor's, lagmon.c.) */
	bool ask = (idle_long || !s->checked) && rotation_wants_role_check(s->sp);
	s->health_check = idle_long || (ask && !s->checked);
	s->role_check = s->health_check && ask;
	s->checked = true;
	const char *check = !s->health_check ? NULL : ask ? "SELECT pg_is_in_recovery()" : g->healthcheck_query;
	bool syncing = false;
	s->sync_refused = false;
	if (n > 0 || check) {
		if (n > 0)
			log_trace("S-%llu: sync parameters: %s", (unsigned long long)s->id, sql);
		(void)buf_add_query(io_out(&s->io), n > 0 ? sql : "", check ? check : "");
		server_own_query_sent(s);
		syncing = true;
	}
	if (sql)
		free(sql);
	if (c->begin) {
		/* sharding: the BEGIN pgcat answered (route.c), replies absorbed */
		uint8_t storage[512];
		struct pktbuf pb;
		pktbuf_init(&pb, storage, sizeof storage);
		pktbuf_query(&pb, c->begin);
		if (!pb.failed) {
			buf_add(io_out(&s->io), pb.data, pb.len);
			server_own_query_sent(s);
			/* The client's transaction starts here on this server (its
			 * own first message finds it open: xact_time and
			 * transaction_timeout count from now, not from the last). */
			s->txn.xact_start_us = s->w->now_us;
			syncing = true;
		}
	}
	/* read_your_writes: a replica whose figures are too old is asked
	 * whether it replayed the client's position, in a query of its own
	 * (two columns: not the health check's row). Not with a held BEGIN,
	 * which would have to be undone (route.c asks for none then). */
	s->replay_check = SERVER_REPLAY_NOT_ASKED;
	if (c->check_replayed && c->ev->behind && !c->begin) {
		char q[128];
		snprintf(q, sizeof q, "SELECT pg_last_wal_replay_lsn() >= '%X/%X'::pg_lsn, 'replayed'",
			 (unsigned)(c->check_replayed >> 32), (unsigned)(c->check_replayed & 0xffffffffu));
		uint8_t storage[160];
		struct pktbuf pb;
		pktbuf_init(&pb, storage, sizeof storage);
		pktbuf_query(&pb, q);
		if (!pb.failed) {
			buf_add(io_out(&s->io), pb.data, pb.len);
			server_own_query_sent(s);
			s->replay_check = SERVER_REPLAY_ASKED;
			syncing = true;
		}
	}
	if (syncing) {
		server_set_state(s, SERVER_SYNCING);
		return;
	}
	server_set_state(s, SERVER_ACTIVE);
	c->ev->ready(c, false);
}

/* Sharding: an INSERT without a column list, inside the client's
 * transaction on this server, between its requests (route.c's guard): the
 * place of the table's sharding column, asked of this very server, as the
 * transaction sees the table. Through the extended protocol with a named
 * statement and portal of pgcat's own (the client's unnamed ones stay) and
 * a Sync, which inside the transaction block ends nothing of the
 * client's; a question that cannot fail (an unknown table or column gives
 * no row, not an error). */
bool server_ask_placement(struct server *s, uint8_t table, const char *sql)
{
	if (s->state != SERVER_ACTIVE || s->txn.outstanding || s->txn.ext_pending || s->txn.tx_status != 'T')
		return false;
	static const char name[] = "pgcat_placement";
	size_t sl = strlen(sql);
	struct buf *out = io_out(&s->io);
	uint8_t h[5] = { PqMsg_Parse };
	proto_put_u32(h + 1, (uint32_t)(4 + sizeof name + sl + 1 + 2));
	static const uint8_t no_types[2] = { 0, 0 };
	if (buf_add(out, h, 5) || buf_add(out, name, sizeof name) || buf_add(out, sql, sl + 1) ||
	    buf_add(out, no_types, 2))
		return false;
	/* Bind: portal, statement, no formats, no parameters, no result formats */
	uint8_t b[5 + 2 * sizeof name + 6] = { PqMsg_Bind };
	proto_put_u32(b + 1, (uint32_t)(sizeof b - 1));
	memcpy(b + 5, name, sizeof name);
	memcpy(b + 5 + sizeof name, name, sizeof name);
	memset(b + 5 + 2 * sizeof name, 0, 6);
	uint8_t e[5 + sizeof name + 4] = { PqMsg_Execute };
	proto_put_u32(e + 1, (uint32_t)(sizeof e - 1));
	memcpy(e + 5, name, sizeof name);
	memset(e + 5 + sizeof name, 0, 4);
	uint8_t cl[5 + 1 + sizeof name] = { PqMsg_Close };
	proto_put_u32(cl + 1, (uint32_t)(sizeof cl - 1));
	cl[5] = 'S';   /* its portal closes with it */
	memcpy(cl + 6, name, sizeof name);
	if (buf_add(out, b, sizeof b) || buf_add(out, e, sizeof e) || buf_add(out, cl, sizeof cl) ||
	    buf_add_bodyless(out, PqMsg_Sync))
		return false;
	txn_sent(&s->txn, PqMsg_Parse);
	txn_sent(&s->txn, PqMsg_Sync);
	s->txn.placement = TXN_PLACEMENT_ASKED;
	s->txn.placed_table = table;
	server_set_state(s, SERVER_ASKING);
	return true;
}

void server_reset_untracked(struct server *s)
{
	const struct pool *p = s->sp->pool;
	if (p->cpool && p->cpool->connect_query && p->cpool->connect_query[0]) {
		server_close(s, "session state pgcat does not follow, and a connect_query a reset would undo");
		return;
	}
	log_debug("S-%llu: reset: the session took a change pgcat does not follow", (unsigned long long)s->id);
	server_set_state(s, SERVER_RESETTING);
	s->prep_on = false;
	s->reset_untracked = true;
	/* RESET ALL leaves the role and the session user as they are */
	server_send_query(s, "RESET SESSION AUTHORIZATION; RESET ALL");
}

