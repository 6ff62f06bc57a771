/* SPDX-License-Identifier: MIT */
/*
 * notify_session: LISTEN and UNLISTEN answered by the normal session in
 * transaction mode (notify_session.h, SPEC §11).
 */
#include "notify_session.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "link.h"
#include "notify.h"
#include "pktbuf.h"
#include "pool_types.h"
#include "sqllex.h"
#include "txn.h"

enum notify_sql notify_sql_parse(const char *sql, size_t len, char *channel, size_t channel_size)
{
	const char *nul = memchr(sql, '\0', len);
	if (nul)
		len = (size_t)(nul - sql);   /* where PostgreSQL stops reading */
	size_t i = sqllex_skip_blank(sql, len, 0);
	enum notify_sql kind;
	if (sqllex_keyword(sql, len, &i, "listen"))
		kind = NOTIFY_SQL_LISTEN;
	else if (sqllex_keyword(sql, len, &i, "unlisten"))
		kind = NOTIFY_SQL_UNLISTEN;
	else
		return NOTIFY_SQL_NONE;
	i = sqllex_skip_blank(sql, len, i);
	if (kind == NOTIFY_SQL_UNLISTEN && i < len && sql[i] == '*') {
		channel[0] = '\0';
		return sqllex_rest_is_empty(sql, len, i + 1) ? NOTIFY_SQL_UNLISTEN_ALL : NOTIFY_SQL_NONE;
	}
	/* Longer names are truncated, as PostgreSQL does (NAMEDATALEN). */
	char name[1024];
	if (!sqllex_ident(sql, len, &i, name, sizeof name) || !sqllex_rest_is_empty(sql, len, i))
		return NOTIFY_SQL_NONE;   /* the server says what is wrong with it */
	size_t n = strlen(name);
	if (n > NOTIFY_CHANNEL_MAX)
		n = NOTIFY_CHANNEL_MAX;
	if (n + 1 > channel_size)
		return NOTIFY_SQL_NONE;
	memcpy(channel, name, n);
	channel[n] = '\0';
	return kind;
}

static const char *tag_of(enum notify_sql kind)
{
	return kind == NOTIFY_SQL_LISTEN ? "LISTEN" : "UNLISTEN";
}

static bool in_transaction_mode(const struct client *c)
{
	return c->pool && c->pool->mode == POOL_MODE_TRANSACTION;
}

/* Now (autocommit) or at the transaction's commit (in). false: out of memory. */
static bool register_cmd(struct notify_client *nc, enum notify_sql kind, const char *channel, bool in_tx)
{
	bool listen = kind == NOTIFY_SQL_LISTEN;
	const char *ch = kind == NOTIFY_SQL_UNLISTEN_ALL ? NULL : channel;
	return in_tx ? notify_defer(nc, listen, ch) : notify_apply(nc, listen, ch);
}

static void send_tag(struct client *c, enum notify_sql kind)
{
	uint8_t storage[32];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_command_complete(&pb, tag_of(kind));
	client_send_pkt(c, &pb);
}

/* A Query of one LISTEN or UNLISTEN, idle: answered, its ReadyForQuery
 * once the channel is listened to. */
static enum notify_here idle_query(struct client *c, const struct proto_frame *f)
{
	uint32_t total = f->len + 1;
	if (total > CLIENT_INSPECT_MAX)
		return NOTIFY_HERE_NOT;
	if (evbuffer_get_length(c->io.in) < total)
		return NOTIFY_HERE_WAIT;
	const char *sql = (const char *)evbuffer_pullup(c->io.in, total) + 5;
	char channel[NOTIFY_CHANNEL_MAX + 1];
	enum notify_sql kind = notify_sql_parse(sql, f->len - 4, channel, sizeof channel);
	if (kind == NOTIFY_SQL_NONE)
		return NOTIFY_HERE_NOT;
	struct notify_client *nc = notify_client_get(c);
	bool in_tx = c->tx == CLIENT_TX_HELD;
	evbuffer_drain(c->io.in, total);
	if (!nc || !register_cmd(nc, kind, channel, in_tx)) {
		client_send_error(c, "ERROR", SQLSTATE_OUT_OF_MEMORY, "out of memory");
		client_send_rfq(c, client_idle_status(c));
		return NOTIFY_HERE_ANSWERED;
	}
	send_tag(c, kind);
	if (in_tx)
		client_send_rfq(c, 'T');
	else
		notify_hold_ready(nc, 'I', false);
	return NOTIFY_HERE_ANSWERED;
}

/* A Parse of an unnamed LISTEN or UNLISTEN: the client's unnamed statement
 * is pgcat's from now on (until its next unnamed Parse). */
static enum notify_here idle_parse(struct client *c, const struct proto_frame *f)
{
	uint32_t total = f->len + 1;
	if (total > CLIENT_INSPECT_MAX)
		return NOTIFY_HERE_NOT;
	if (evbuffer_get_length(c->io.in) < total)
		return NOTIFY_HERE_WAIT;
	const uint8_t *body = evbuffer_pullup(c->io.in, total) + 5;
	size_t off = 0;
	const char *name, *sql;
	if (!proto_read_cstring(body, f->len - 4, &off, &name) || name[0] != '\0')
		return NOTIFY_HERE_NOT;
	size_t at = off;
	if (!proto_read_cstring(body, f->len - 4, &off, &sql))
		return NOTIFY_HERE_NOT;
	char channel[NOTIFY_CHANNEL_MAX + 1];
	enum notify_sql kind = notify_sql_parse(sql, off - at - 1, channel, sizeof channel);
	struct notify_client *nc = notify_client_of(c);
	if (kind == NOTIFY_SQL_NONE) {
		if (nc)   /* a new unnamed statement replaces pgcat's */
			notify_unnamed(nc)->cmd = NOTIFY_SQL_NONE;
		return NOTIFY_HERE_NOT;
	}
	if (!nc && !(nc = notify_client_get(c)))
		return NOTIFY_HERE_NOT;
	struct notify_unnamed *u = notify_unnamed(nc);
	u->cmd = kind;
	u->bound = false;
	snprintf(u->channel, sizeof u->channel, "%s", channel);
	evbuffer_drain(c->io.in, total);
	client_send_simple(c, PqMsg_ParseComplete);
	return NOTIFY_HERE_ANSWERED;
}

/* The first string of the message (a Bind's portal, a Describe's or
 * Close's name after its kind byte) is empty, and for a Bind the second
 * (its statement) too. */
static bool names_unnamed(struct client *c, const struct proto_frame *f, bool *wait)
{
	uint32_t total = f->len + 1;
	*wait = false;
	uint32_t need = total < 5 + 64 ? total : 5 + 64;   /* the names are at the front */
	if (evbuffer_get_length(c->io.in) < need) {
		*wait = true;
		return false;
	}
	const uint8_t *body = evbuffer_pullup(c->io.in, need) + 5;
	size_t len = need - 5;
	if (f->type == PqMsg_Bind)   /* portal, statement */
		return len >= 2 && body[0] == '\0' && body[1] == '\0';
	if (f->type == PqMsg_Execute)   /* portal */
		return len >= 1 && body[0] == '\0';
	return len >= 2 && body[1] == '\0';   /* Describe, Close: kind, name */
}

/* The other messages of an unnamed LISTEN: answered as PostgreSQL would. */
static enum notify_here idle_extended(struct client *c, struct notify_client *nc, const struct proto_frame *f)
{
	struct notify_unnamed *u = notify_unnamed(nc);
	uint32_t total = f->len + 1;
	bool wait = false;
	if (f->type == PqMsg_Sync && u->await_sync) {
		u->await_sync = false;
		evbuffer_drain(c->io.in, total);
		char status = client_idle_status(c);
		if (status == 'I')
			notify_hold_ready(nc, status, false);
		else
			client_send_rfq(c, status);
		return NOTIFY_HERE_ANSWERED;
	}
	if (u->cmd == NOTIFY_SQL_NONE)
		return NOTIFY_HERE_NOT;
	switch (f->type) {
	case PqMsg_Bind:
		if (!names_unnamed(c, f, &wait))
			return wait ? NOTIFY_HERE_WAIT : NOTIFY_HERE_NOT;
		client_discard_message(c, total);
		u->bound = true;
		client_send_simple(c, PqMsg_BindComplete);
		return NOTIFY_HERE_ANSWERED;
	case PqMsg_Describe: {
		if (!names_unnamed(c, f, &wait))
			return wait ? NOTIFY_HERE_WAIT : NOTIFY_HERE_NOT;
		uint8_t kind = evbuffer_pullup(c->io.in, 6)[5];
		if (kind == 'P' && !u->bound)
			return NOTIFY_HERE_NOT;
		evbuffer_drain(c->io.in, total);
		if (kind == 'S') {   /* no parameters */
			uint8_t pd[7] = { PqMsg_ParameterDescription, 0, 0, 0, 6, 0, 0 };
			evbuffer_add(client_output(c), pd, sizeof pd);
		}
		client_send_simple(c, PqMsg_NoData);
		return NOTIFY_HERE_ANSWERED;
	}
	case PqMsg_Execute: {
		if (!u->bound || !names_unnamed(c, f, &wait))
			return wait ? NOTIFY_HERE_WAIT : NOTIFY_HERE_NOT;
		client_discard_message(c, total);
		if (!register_cmd(nc, (enum notify_sql)u->cmd, u->channel, c->tx == CLIENT_TX_HELD)) {
			client_send_error(c, "ERROR", SQLSTATE_OUT_OF_MEMORY, "out of memory");
			client_set_batch(c, CLIENT_BATCH_SKIP_TO_SYNC);
			return NOTIFY_HERE_ANSWERED;
		}
		send_tag(c, (enum notify_sql)u->cmd);
		u->await_sync = true;
		return NOTIFY_HERE_ANSWERED;
	}
	case PqMsg_Close:
		if (!names_unnamed(c, f, &wait))
			return wait ? NOTIFY_HERE_WAIT : NOTIFY_HERE_NOT;
		{
			const uint8_t *b = evbuffer_pullup(c->io.in, 6);
			if (b[5] == 'S')
				u->cmd = NOTIFY_SQL_NONE;
			else
				u->bound = false;
		}
		evbuffer_drain(c->io.in, total);
		client_send_simple(c, PqMsg_CloseComplete);
		return NOTIFY_HERE_ANSWERED;
	default:
		return NOTIFY_HERE_NOT;
	}
}

enum notify_here notify_session_message(struct client *c, const struct proto_frame *f)
{
	if (!in_transaction_mode(c))
		return NOTIFY_HERE_NOT;
	struct notify_client *nc = notify_client_of(c);
	if (nc)
		notify_flush(nc);   /* what waited for the client's transaction to end */
	switch (f->type) {
	case PqMsg_Query:
		return idle_query(c, f);
	case PqMsg_Parse:
		return idle_parse(c, f);
	default:
		return nc ? idle_extended(c, nc, f) : NOTIFY_HERE_NOT;
	}
}

enum session_query notify_session_active_query(struct client *c, struct server *s, const struct proto_frame *f,
					       const char *sql, size_t len)
{
	if (!in_transaction_mode(c))
		return SESSION_QUERY_FORWARD;
	char channel[NOTIFY_CHANNEL_MAX + 1];
	enum notify_sql kind = notify_sql_parse(sql, len, channel, sizeof channel);
	if (kind == NOTIFY_SQL_NONE)
		return SESSION_QUERY_FORWARD;
	const struct txn *t = link_txn(s);
	if (t->outstanding > 0 || t->ext_pending)
		return SESSION_QUERY_WAIT;   /* its answer must come after theirs */
	evbuffer_drain(c->io.in, (size_t)f->len + 1);
	if (t->tx_status == 'E') {
		client_send_error(c, "ERROR", SQLSTATE_IN_FAILED_TRANSACTION,
				  "current transaction is aborted, commands ignored until end of transaction block");
		client_send_rfq(c, 'E');
		return SESSION_QUERY_ANSWERED;
	}
	struct notify_client *nc = notify_client_get(c);
	if (!nc || !register_cmd(nc, kind, channel, t->tx_status == 'T')) {
		client_send_error(c, "ERROR", SQLSTATE_OUT_OF_MEMORY, "out of memory");
		client_send_rfq(c, t->tx_status);
		return SESSION_QUERY_ANSWERED;
	}
	send_tag(c, kind);
	client_send_rfq(c, t->tx_status);
	return SESSION_QUERY_ANSWERED;
}

void notify_session_ready_held(struct client *c, bool committed)
{
	struct notify_client *nc = notify_client_of(c);
	if (!nc) {
		client_send_rfq(c, 'I');
		return;
	}
	notify_tx_end(nc, committed);
	notify_hold_ready(nc, 'I', true);
}

void notify_session_tx_end(struct client *c, bool committed, const void *reply, size_t reply_len)
{
	struct notify_client *nc = notify_client_of(c);
	const uint8_t *r = reply;
	/* The ReadyForQuery at its end waits for the LISTENs. */
	if (!nc || reply_len < 6 || r[reply_len - 6] != PqMsg_ReadyForQuery) {
		if (nc)
			notify_tx_end(nc, committed);
		evbuffer_add(client_output(c), reply, reply_len);
		return;
	}
	notify_tx_end(nc, committed);
	evbuffer_add(client_output(c), reply, reply_len - 6);
	notify_hold_ready(nc, (char)r[reply_len - 1], true);
}
