/* SPDX-License-Identifier: MIT */
/*
 * server: one PostgreSQL server connection's state machine. Connects (the
 * login itself is server_login.c's), then streams the server's messages to
 * the linked client by header, reading only the few it must (ReadyForQuery,
 * ParameterStatus, FATAL errors, CopyInResponse). When its client is gone
 * it brings itself back to a clean idle state (cancel, CopyFail, Sync,
 * ROLLBACK) instead of being closed. Below it server_conn.c (the object:
 * made, closed, freed), above it server_use.c (linking it to a client).
 */
#include "server_internal.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
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
#include "ryw.h"
#include "server_login.h"
#include "shm.h"
#include "tls.h"

/* Stop reading the server once this much waits for a slow client. */
#define SERVER_OUT_BUDGET LINK_SERVER_OUT_BUDGET   /* (the client side's pump checks it too) */
#define SERVER_READ_HIGH_WATER (64u * 1024)

static void server_read_cb(struct io *io, void *arg);
static void server_drain_cb(struct io *io, void *arg);
static void server_event_cb(struct io *io, enum io_event what, int err, void *arg);
static const struct io_ops server_io_ops = { server_read_cb, server_drain_cb, server_event_cb, SERVER_OUT_BUDGET / 2,
					      offsetof(struct server, io) };

struct server *server_connect(struct srvpool *sp)
{
	struct worker *w = sp->pool->w;
	struct server *s = server_new(sp);
	if (!s)
		return NULL;
	/* Enter the lists as CONNECTING before anything can fail, so that
	 * server_close finds it where it expects. */
	server_set_state(s, SERVER_CONNECTING);
	log_debug("S-%llu %s@%s %s:%d: connecting", (unsigned long long)s->id, auth_server_user(sp->pool),
		  sp->database, sp->host, sp->port);
	if (!io_connect(&s->io, w->base, &w->flusher, (struct sockaddr *)&sp->addr, sp->addrlen,
			SERVER_READ_HIGH_WATER, &server_io_ops)) {
		s->io.closed = true;
		s->have_error = true;
		snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "08006");
		/* A Unix socket server is named by its socket file, as libpq does. */
		bool un = sp->host[0] == '/';
		snprintf(s->error_message, sizeof s->error_message, "could not connect to server %s%s%d: %s",
			 sp->host, un ? "/.s.PGSQL." : ":", sp->port, strerror(errno));
		server_close(s, "connect failed");
		return NULL;
	}
	return s;
}

struct server *server_adopt(struct srvpool *sp, int fd)
{
	struct worker *w = sp->pool->w;
	struct server *s = server_new(sp);
	if (!s || !io_open(&s->io, w->base, &w->flusher, fd, SERVER_READ_HIGH_WATER, &server_io_ops)) {
		close(fd);
		free(s);
		return NULL;
	}
	s->moved_in = true;
	server_set_state(s, SERVER_LOGIN);
	return s;
}

/* ---- login (server_login.c reads it; here what follows from it) ---- */

/* The login failed: pgcat's reason, or the server's own error (FATAL
 * during a login) when refused is set. */
static void login_failed(struct server *s, const char *msg, bool refused)
{
	if (!s->have_error) {
		s->have_error = true;
		snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "08006");
		snprintf(s->error_message, sizeof s->error_message, "%s", msg);
	}
	if (s->w->cfg->pgbouncer) {
		/* PgBouncer's lines, which its operators alert on. */
		log_warning("S-%llu %s:%d: server login failed: %s%s", (unsigned long long)s->id, s->sp->host,
			    s->sp->port, refused ? "FATAL " : "", msg);
		server_close(s, msg);
		return;
	}
	log_warning("S-%llu %s:%d: login failed: %s", (unsigned long long)s->id, s->sp->host, s->sp->port, msg);
	server_close(s, NULL);
}

static void login_fail(struct server *s, const char *msg)
{
	login_failed(s, msg, false);
}

/* The SCRAM key the server's challenge needed is derived (kdf.c, off the
 * loop): answer, then go on with what the server sent meanwhile. */
static void auth_derived(void *arg)
{
	struct server *s = arg;
	worker_update_clock(s->w);
	struct server_login_failure fail;
	if (server_login_derived(s, &fail))
		server_process(s);
	else
		login_failed(s, fail.why, fail.refused);
}

static void process_login(struct server *s)
{
	struct server_login_failure fail;
	switch (server_login_read(s, auth_derived, &fail)) {
	case SERVER_LOGIN_WAIT:
		return;
	case SERVER_LOGIN_READY:
		s->sp->ev->ready(s);
		return;
	case SERVER_LOGIN_FAILED:
		login_failed(s, fail.why, fail.refused);
		return;
	}
}

static void login_start(struct server *s)
{
	const char *why = server_login_start(s);
	if (why)
		login_fail(s, why);
}

/* ---- linking, syncing, draining, resetting ---- */

static void drain_begin(struct server *s, bool cancel);

/* In DRAINING: push the server toward 'I' with nothing outstanding. */
static void drain_step(struct server *s)
{
	if (s->state != SERVER_DRAINING)
		return;
	if (s->txn.outstanding > 0)
		return;
	if (s->txn.tx_status != 'I') {
		server_send_query(s, "ROLLBACK");
		return;
	}
	if (s->sp->pool->mode == POOL_MODE_SESSION) {
		server_reset(s);
		return;
	}
	s->sp->ev->clean(s);
}

/* A COPY FROM STDIN whose client is gone: failed, so nothing of it stays. */
static void send_copy_fail(struct server *s)
{
	static const char reason[] = "client disconnected";
	uint8_t storage[64];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_begin(&pb, PqMsg_CopyFail);
	pktbuf_put_cstring(&pb, reason);
	pktbuf_end(&pb);
	buf_add(io_out(&s->io), pb.data, pb.len);
}

/* The client left before the Sync that would end its extended request.
 * That Sync alone would commit the request's implicit transaction, which
 * the client never asked for (SPEC §10). First a Parse that cannot parse:
 * the server aborts the transaction (an explicit one is left failed, for
 * drain_step's ROLLBACK), or skips the Parse when an error already has it
 * skipping to Sync. The statement is named, so the server's unnamed
 * statement is not touched; its text says why in the server's log. Then
 * the Sync, whose ReadyForQuery the drain waits for. */
static void abort_extended_request(struct server *s)
{
	static const char name[] = "pgcat_abort";
	static const char sql[] = "pgcat: the client left before its Sync, its work is rolled back";
	uint8_t storage[sizeof name + sizeof sql + 16];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_begin(&pb, PqMsg_Parse);
	pktbuf_put_cstring(&pb, name);
	pktbuf_put_cstring(&pb, sql);
	pktbuf_put_u16(&pb, 0);
	pktbuf_end(&pb);
	buf_add(io_out(&s->io), pb.data, pb.len);
	txn_sent(&s->txn, PqMsg_Parse);
	buf_add_bodyless(io_out(&s->io), PqMsg_Sync);
	txn_sent(&s->txn, PqMsg_Sync);
}

void server_drain(struct server *s)
{
	drain_begin(s, true);
}

void server_finish(struct server *s)
{
	drain_begin(s, false);
}

/* The client is gone (cancel: what runs is cancelled), or needs no more
 * of the reply (its statement ends as it would, its rest dropped). */
static void drain_begin(struct server *s, bool cancel)
{
	if (s->state == SERVER_CLOSED)
		return;
	server_set_state(s, SERVER_DRAINING);
	/* Whatever was in flight is not matched any more. */
	prep_server_reset_pending(s);
	s->prep_on = false;
	if (s->paused) {
		s->paused = false;
		io_pause(&s->io, false);
	}
	bool copy_failed = s->txn.in_copy_in;
	if (s->txn.in_copy_in) {
		send_copy_fail(s);
		s->txn.in_copy_in = false;
	}
	if (s->txn.ext_pending)
		abort_extended_request(s);
	/* A COPY FROM STDIN ends with the CopyFail: a cancel would only race
	 * with it, and arrive after the server went to the next client. */
	if (cancel && s->txn.outstanding > 0 && !copy_failed)
		server_send_cancel(s);
	drain_step(s);
	if (s->state == SERVER_DRAINING)
		server_process(s);
}

void server_reset(struct server *s)
{
	const char *q = s->w->cfg->general.server_reset_query;
	if (!q || !q[0]) {
		s->sp->ev->clean(s);
		return;
	}
	server_set_state(s, SERVER_RESETTING);
	s->prep_on = false;
	/* DISCARD ALL (the usual reset) drops every prepared statement. */
	if (strncasecmp(q, "discard all", 11) == 0 || strstr(q, "DISCARD ALL") || strstr(q, "discard all"))
		prep_server_discarded(s);
	server_send_query(s, q);
}

/* The client's settings were refused (sync_refused set): the SETs ran as
 * one implicit transaction and none took, so the server is as it was, its
 * table true. The client's end is told; the server, which nothing of the
 * client's reached, is brought back to 'I' (a held BEGIN may have run
 * after the SETs) and goes back to its pool. */
static void sync_refused(struct server *s, struct client_end *c)
{
	s->sync_refused = false;
	s->health_check = s->role_check = false;
	s->replay_check = SERVER_REPLAY_NOT_ASKED;
	c->ev->refused(c, s, s->error_sqlstate, s->error_message);
	if (s->state == SERVER_CLOSED || s->client)
		return;
	server_drain(s);
}

static bool reset_query_clears_all(const char *q)
{
	return strcasestr(q, "DISCARD ALL") || strcasestr(q, "RESET ALL");
}

/* ---- read_your_writes = lsn: the WAL position after a write ---- */

/* The client's transaction that wrote is over on this primary (its
 * ReadyForQuery 'I' went out, nothing more owed): one query of pgcat's
 * before the server goes back to the pool. The insert position, not
 * pg_current_wal_lsn() (the write position): the commit record was
 * inserted before the COMMIT returned, but with synchronous_commit = off
 * it may not be written yet, and a replica that reached the write
 * position would then lack it. The insert position may be a little ahead
 * (other sessions' records, or a page header when the record ended a
 * page): the replicas are then waited for a little longer, never too
 * little. The client's next request waits (link_serving is false). */
static void wal_ask(struct server *s)
{
	s->wal_known = false;
	s->wal_lsn = 0;
	server_set_state(s, SERVER_WAL_POSITION);
	server_send_query(s, RYW_POSITION_QUERY);
}

/* Its one row: one text column, "X/Y". Anything else: not known. */
static void wal_row(struct server *s, const uint8_t *body, size_t len)
{
	uint64_t lsn;
	if (ryw_position_row(body, len, &lsn)) {
		s->wal_lsn = lsn;
		s->wal_known = true;
	}
}

/* Its ReadyForQuery: the client told, the server back to the pool. */
static void wal_done(struct server *s)
{
	struct client_end *c = s->client;
	if (s->txn.tx_status != 'I') {
		server_close(s, "the WAL position query left a transaction open");
		return;
	}
	if (c)
		c->ev->wal_position(c, s, s->sp->shard, s->wal_known, s->wal_lsn, false);
	s->sp->ev->release(s);
}

/* Its one row: the number of live columns before the sharding column. */
static void placement_row(struct server *s, const uint8_t *body, size_t len)
{
	char num[8];
	if (len < 6 || (body[0] << 8 | body[1]) != 1)
		return;
	uint32_t l = proto_get_u32(body + 2);
	if (l == 0 || l >= sizeof num || l > len - 6)
		return;
	memcpy(num, body + 6, l);
	num[l] = '\0';
	char *end;
	unsigned long v = strtoul(num, &end, 10);
	if (*end || v > UINT16_MAX)
		return;
	s->txn.placed_position = (uint16_t)v;
	s->txn.placement = TXN_PLACEMENT_KNOWN;
}

/* Its ReadyForQuery: the client's request goes on (its guard reads the
 * answer in s->txn). A transaction no longer open means something failed:
 * the client finds it so. */
static void placement_done(struct server *s)
{
	if (s->txn.placement != TXN_PLACEMENT_KNOWN)
		s->txn.placement = TXN_PLACEMENT_UNKNOWN;
	server_set_state(s, SERVER_ACTIVE);
	if (s->client && s->client->ev->asked)
		s->client->ev->asked(s->client);
}

/* The answer to the replayed-position question (server_link): two
 * columns, the second 'replayed'; true when the first says 't'. */
static bool replay_row(const uint8_t *body, size_t len)
{
	static const char tag[] = "replayed";
	if (len < 2 || (body[0] << 8 | body[1]) != 2)
		return false;
	size_t off = 2;
	if (len - off < 4)
		return false;
	uint32_t l1 = proto_get_u32(body + off);
	off += 4;
	if (l1 != 1 || len - off < 1 + 4)
		return false;
	bool yes = body[off] == 't';
	off += 1;
	uint32_t l2 = proto_get_u32(body + off);
	off += 4;
	return yes && l2 == sizeof tag - 1 && len - off == l2 && memcmp(body + off, tag, l2) == 0;
}

/* The replica had not replayed the client's position (or could not say):
 * the client routes its request again, nothing of it sent here, and the
 * server, clean ('I'), goes back to its pool; else it is closed. */
static void replay_behind(struct server *s, struct client_end *c)
{
	server_set_state(s, SERVER_ACTIVE);
	c->ev->behind(c, s);
	if (s->state == SERVER_CLOSED || s->client)
		return;
	if (s->txn.tx_status != 'I') {
		server_close(s, "the replayed-position question left a transaction open");
		return;
	}
	s->sp->ev->clean(s);
}

/* What the bytes buffered behind the first off bytes of in are, once the
 * server owes nothing. */
enum behind {
	BEHIND_NOTHING,   /* nothing, or only unprompted messages (or one not whole yet) */
	BEHIND_UNASKED,   /* a reply nobody asked for */
	BEHIND_FATAL      /* a FATAL error: the server ends its session */
};

/* An error a server sends its client, counted by its SQLSTATE under the
 * pool's database and user (errstats.h; body NULL: not read). */
static void count_server_error(struct server *s, const uint8_t *body, size_t len)
{
	struct proto_error_fields ef;
	const char *code = body && proto_parse_error(body, len, &ef) ? ef.sqlstate : NULL;
	const struct pool *p = s->sp->pool;
	errstats_count(shm_errstats(s->w->shm, s->w->id), p->name, p->user, code, ERRSTATS_SERVER);
	if (s->slow.noted)
		slowlog_note_error(&s->slow);
}

/* A reply that came in the same read as the last one asked for would be
 * taken by the next request as its own. A FATAL ErrorResponse comes
 * unprompted (a backend terminated, the server shutting down, right after
 * its last answer): the answer before it stands, and the server is not
 * given to anyone. A message not yet whole is judged when it is, by the
 * pump. */
static enum behind look_behind(struct buf *in, size_t off)
{
	size_t have = buf_len(in);
	while (off < have) {
		uint8_t hdr[5];
		size_t n = have - off < sizeof hdr ? have - off : sizeof hdr;
		if (!buf_copy_at(in, off, hdr, n))
			return BEHIND_UNASKED;
		bool error = hdr[0] == PqMsg_ErrorResponse;
		if (!error && !proto_backend_unprompted(hdr[0]))
			return BEHIND_UNASKED;
		if (n < sizeof hdr)
			return BEHIND_NOTHING;
		uint32_t len = proto_get_u32(hdr + 1);
		if (len < 4)
			return BEHIND_UNASKED;
		size_t total = (size_t)len + 1;
		if (error) {
			if (have - off < total)
				return BEHIND_NOTHING;
			if (total > SERVER_INSPECT_MAX)
				return BEHIND_UNASKED;
			const uint8_t *m = buf_pullup(in, (size_t)(off + total));
			return m && proto_error_is_fatal(m + off + 5, len - 4) ? BEHIND_FATAL : BEHIND_UNASKED;
		}
		off += total;
	}
	return BEHIND_NOTHING;
}

/* The last answer owed has come, the first off bytes of in: what came with
 * it decides what becomes of the server. false: it sent a reply nobody
 * asked for, and is closed; a FATAL error behind it: it is not handed on
 * (closed when it goes back). */
static bool settle_behind(struct server *s, struct buf *in, size_t off)
{
	switch (look_behind(in, off)) {
	case BEHIND_NOTHING:
		return true;
	case BEHIND_UNASKED:
		server_close_unasked(s, PqMsg_ReadyForQuery);
		return false;
	case BEHIND_FATAL:
		log_info("S-%llu: the server ends its session right after its last answer: not handed on",
			 (unsigned long long)s->id);
		s->close_when_idle = true;
		return true;
	}
	return true;
}

/* CopyInResponse: the server reads copy data, and ignored the Syncs sent
 * behind the COPY's Execute (txn_copy_in). */
static void copy_in_started(struct server *s)
{
	uint32_t after;
	uint32_t ignored = txn_copy_in(&s->txn, &after);
	if (ignored)
		prep_server_syncs_ignored(s, ignored, after);
}

/* Messages while no client reads them (idle, syncing, draining, resetting,
 * the WAL position query): track state, forward nothing. */
static void process_unlinked(struct server *s)
{
	struct buf *in = s->io.in;
	uint8_t buf[SERVER_INSPECT_MAX];
	enum server_state st = s->state;
	while (s->state == st) {
		uint8_t hdr[6];
		if (io_head(in, hdr, 5, 6) == 0)
			return;
		size_t have = buf_len(in);
		struct proto_frame f;
		if (proto_frame_header(hdr, 5, SERVER_MAX_MESSAGE, &f) != PROTO_FRAME_OK) {
			server_close(s, "server sent an invalid message");
			return;
		}
		uint32_t total = f.len + 1;
		/* (an ErrorResponse is judged below, once its severity is known) */
		if (f.type != PqMsg_ErrorResponse && txn_unasked(&s->txn, f.type)) {
			server_close_unasked(s, f.type);
			return;
		}
		bool need_body = f.type == PqMsg_ParameterStatus || f.type == PqMsg_ErrorResponse ||
				 (f.type == PqMsg_DataRow && st == SERVER_SYNCING &&
				  (s->health_check || s->replay_check == SERVER_REPLAY_ASKED)) ||
				 (f.type == PqMsg_DataRow && (st == SERVER_WAL_POSITION || st == SERVER_ASKING));
		if (need_body && total <= SERVER_INSPECT_MAX) {
			if (!buf_take_whole(in, total, buf))
				return;
		} else if (f.type == PqMsg_ReadyForQuery) {
			if (have < 6)
				return;
			buf_drain(in, 6);
		} else {
			/* Skip the body, in pieces if it is large. */
			size_t n = have < total ? have : total;
			if (n < total) {
				/* Drop what is there and remember how much of this
				 * message is still to come (server_process skips it). */
				buf_drain(in, n);
				s->fwd_remaining = total - (uint32_t)n;
				return;
			}
			buf_drain(in, total);
		}
		const uint8_t *body = buf + 5;
		size_t blen = f.len - 4;
		if (f.type == PqMsg_DataRow && need_body && total <= SERVER_INSPECT_MAX && st == SERVER_WAL_POSITION)
			wal_row(s, body, blen);
		else if (f.type == PqMsg_DataRow && need_body && total <= SERVER_INSPECT_MAX && st == SERVER_ASKING)
			placement_row(s, body, blen);
		else if (f.type == PqMsg_DataRow && need_body && total <= SERVER_INSPECT_MAX &&
			 replay_row(body, blen)) {
			s->replay_check = SERVER_REPLAY_REACHED;
		} else if (f.type == PqMsg_DataRow && need_body && total <= SERVER_INSPECT_MAX) {
			/* The role check's answer: one column, in recovery? (A
			 * healthcheck_query's rows are not read.) */
			if (s->role_check && blen >= 7 && (body[0] << 8 | body[1]) == 1 && proto_get_u32(body + 2) == 1 &&
			    (body[6] == 't' || body[6] == 'f'))
				rotation_role_result(s->sp, body[6] == 't');
		}
		switch (f.type) {
		case PqMsg_ReadyForQuery:
			txn_ready(&s->txn, (char)hdr[5]);
			if (s->txn.outstanding == 0 && !s->txn.ext_pending && !settle_behind(s, in, 0))
				return;
			if (st == SERVER_SYNCING && s->txn.outstanding == 0) {
				struct client_end *c = s->client;
				if (c && s->sync_refused) {
					sync_refused(s, c);
					return;
				}
				/* The SETs ran: the server's session is now the client's. */
				if (c)
					(void)params_copy(&s->params, c->params);
				s->health_check = s->role_check = false;
				bool asked_behind = s->replay_check == SERVER_REPLAY_ASKED;
				s->replay_check = SERVER_REPLAY_NOT_ASKED;
				if (c && asked_behind) {
					replay_behind(s, c);
					return;
				}
				server_set_state(s, SERVER_ACTIVE);
				/* its held BEGIN ran here: the transaction is open */
				if (c)
					c->ev->ready(c, c->begin != NULL);
				return;
			}
			if (st == SERVER_WAL_POSITION && s->txn.outstanding == 0) {
				wal_done(s);
				return;
			}
			if (st == SERVER_ASKING && s->txn.outstanding == 0) {
				placement_done(s);
				return;
			}
			if (st == SERVER_DRAINING) {
				drain_step(s);
			} else if (st == SERVER_RESETTING && s->txn.outstanding == 0) {
				/* pgcat's own reset (server_reset_untracked), or
				 * server_reset_query: DISCARD ALL resets the session
				 * user too, RESET ALL alone does not */
				const char *q = s->w->cfg->general.server_reset_query;
				bool own = s->reset_untracked;
				s->reset_untracked = false;
				if (own || reset_query_clears_all(q))
					for (size_t i = params_count(&s->params); i-- > 0;)
						if (!params_reported(params_at(&s->params, i)->name))
							params_remove(&s->params, params_at(&s->params, i)->name);
				if (own || strcasestr(q, "DISCARD ALL"))
					s->txn.untracked = false;
				if (s->txn.tx_status != 'I') {
					server_close(s, "reset query left a transaction open");
					return;
				}
				s->sp->ev->clean(s);
			}
			break;
		case PqMsg_ParameterStatus: {
			const char *name, *value;
			if (need_body && total <= SERVER_INSPECT_MAX &&
			    proto_parse_parameter_status(body, blen, &name, &value)) {
				(void)params_set(&s->params, name, value, false);
				/* While syncing, the server reports the canonical form of
				 * what the client asked for: the client's value now. */
				if (st == SERVER_SYNCING && s->client)
					(void)params_set(s->client->params, name, value, false);
			}
			break;
		}
		case PqMsg_ErrorResponse:
			if (total <= SERVER_INSPECT_MAX && proto_error_is_fatal(body, blen)) {
				server_login_note_error(s, body, blen);
				server_close(s, s->error_message);
				return;
			}
			if (txn_unasked(&s->txn, f.type)) {
				server_close_unasked(s, f.type);
				return;
			}
			if (st == SERVER_RESETTING && s->reset_untracked) {
				/* nothing of it took: the state it was to undo is there */
				server_close(s, "the reset of session state pgcat does not follow failed");
				return;
			}
			if (st == SERVER_SYNCING && s->client && !s->sync_refused) {
				/* A setting of the client's the server refuses (none of
				 * the SETs took): the client must not go on with this
				 * server's settings (sync_refused, at the ReadyForQuery). */
				struct proto_error_fields ef;
				bool parsed = total <= SERVER_INSPECT_MAX && proto_parse_error(body, blen, &ef);
				snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "%s",
					 parsed && ef.sqlstate ? ef.sqlstate : "22023");
				snprintf(s->error_message, sizeof s->error_message, "%s",
					 parsed && ef.message ? ef.message : "a session setting was refused by the server");
				s->sync_refused = true;
				log_info("S-%llu: the server refused the settings of C-%llu: %s", (unsigned long long)s->id,
					 (unsigned long long)s->client->client_id, s->error_message);
			}
			break;
		case PqMsg_CopyInResponse:
			copy_in_started(s);
			if (st == SERVER_DRAINING && s->txn.in_copy_in) {
				s->txn.in_copy_in = false;
				send_copy_fail(s);
				/* a COPY of an Execute: its request still needs a Sync */
				if (s->txn.ext_pending)
					abort_extended_request(s);
			}
			break;
		default:
			break;
		}
	}
}

/* ---- the server-to-client pump ---- */

static void pause_for_client(struct server *s)
{
	if (!s->paused) {
		s->paused = true;
		io_pause(&s->io, true);
	}
}

void server_resume_reading(struct server *s)
{
	if (s->state == SERVER_CLOSED || !s->paused)
		return;
	s->paused = false;
	io_pause(&s->io, false);
	server_process(s);
}

/* A small server message pgcat consumed itself (all of it is buffered). */
static void drop_message(struct server *s, uint32_t total)
{
	buf_drain(s->io.in, total);
}

/* A request or transaction that changed session settings has ended
 * (ReadyForQuery 'I'), or the server is gone: keep the changes if it
 * committed, else put both sides back as they were (PostgreSQL undoes a SET
 * that failed or was rolled back). ROLLBACK TO SAVEPOINT is not followed:
 * a SET undone by it is kept if the transaction commits. */
static void settings_settle(struct server *s, bool committed)
{
	if (!s->txn.set_pending)
		return;
	if (!committed) {
		if (s->client)
			params_copy(s->client->params, &s->txn.set_undo_client);
		params_copy(&s->params, &s->txn.set_undo_server);
	}
	params_clear(&s->txn.set_undo_client);
	params_clear(&s->txn.set_undo_server);
	s->txn.set_pending = false;
}

void server_settings_discard(struct server *s)
{
	settings_settle(s, false);
}

/* While settings are pending, note whether a CommandComplete says ROLLBACK
 * (also what COMMIT of a failed transaction answers). */
static void settings_note_complete(struct server *s, struct buf *in, uint32_t total)
{
	static const char tag[] = "ROLLBACK";   /* with its NUL */
	uint8_t b[5 + sizeof tag];
	s->txn.set_last_rollback = total == 5 + sizeof tag && buf_copyout(in, b, sizeof b) == sizeof b &&
			       memcmp(b + 5, tag, sizeof tag) == 0;
}

/* What the pump does with each type of reply, looked up once per message
 * (a table, not the chains of comparisons each step would make). */
enum reply_class {
	/* The prepared-statement layer may drop or replace it (ParseComplete,
	 * BindComplete, CloseComplete, CommandComplete, ErrorResponse,
	 * EmptyQueryResponse, ReadyForQuery). */
	REPLY_REPLACEABLE = 1 << 0,
	/* The replies to a Describe (ParameterDescription, RowDescription,
	 * NoData): that layer keeps a statement's. With REPLY_REPLACEABLE,
	 * every reply it reads: a DataRow, the bulk of most results, never
	 * goes through it. */
	REPLY_DESCRIBED = 1 << 1,
	/* Read by inspect_reply (ParameterStatus, ErrorResponse,
	 * CopyInResponse, CommandComplete, NotificationResponse). */
	REPLY_INSPECTED = 1 << 2,
	/* An acknowledgement or a description: counted for a replayed read
	 * (count_for_replay). */
	REPLY_ACK = 1 << 3,
};

#define REPLY_ACKED (REPLY_REPLACEABLE | REPLY_ACK)
#define REPLY_DESCRIPTION (REPLY_DESCRIBED | REPLY_ACK)
static const uint8_t reply_classes[256] = {
	[PqMsg_ParseComplete] = REPLY_ACKED,
	[PqMsg_BindComplete] = REPLY_ACKED,
	[PqMsg_CloseComplete] = REPLY_ACKED,
	[PqMsg_ParameterDescription] = REPLY_DESCRIPTION,
	[PqMsg_RowDescription] = REPLY_DESCRIPTION,
	[PqMsg_NoData] = REPLY_DESCRIPTION,
	[PqMsg_CommandComplete] = REPLY_REPLACEABLE | REPLY_INSPECTED,
	[PqMsg_ErrorResponse] = REPLY_REPLACEABLE | REPLY_INSPECTED,
	[PqMsg_EmptyQueryResponse] = REPLY_REPLACEABLE,
	[PqMsg_ReadyForQuery] = REPLY_REPLACEABLE,
	[PqMsg_ParameterStatus] = REPLY_INSPECTED,
	[PqMsg_NotificationResponse] = REPLY_INSPECTED,
	[PqMsg_CopyInResponse] = REPLY_INSPECTED,
};
#undef REPLY_ACKED
#undef REPLY_DESCRIPTION

static inline unsigned reply_class(uint8_t type) { return reply_classes[type]; }

/* What the pump does after a step on one message: go on with the same
 * message, take the next one, or stop (wait for bytes, or the link moved). */
enum pump_step { PUMP_ON, PUMP_NEXT, PUMP_STOP };

/* A server that breaks the protocol is not passed on (SPEC §10): the
 * client gets pgcat's error and the connection is dropped. true: dropped. */
static bool refuse_invalid(struct server *s, const struct proto_frame *f, const uint8_t *hdr, ssize_t got)
{
	if (proto_backend_type_valid(f->type) && !(f->type == PqMsg_ErrorResponse && f->len < 5) &&
	    !(f->type == PqMsg_ReadyForQuery &&
	      (f->len != 5 || (got >= 6 && hdr[5] != 'I' && hdr[5] != 'T' && hdr[5] != 'E'))))
		return false;
	s->have_error = true;
	snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "08P01");
	snprintf(s->error_message, sizeof s->error_message, "server sent an invalid message (type %d)", f->type);
	server_close(s, s->error_message);
	return true;
}

/* An acknowledgement (ParseComplete, BindComplete, CloseComplete, a
 * description) about to reach the client, the server's or pgcat's own:
 * true to send it (counted, for a replay of the read), false when a
 * replayed read's client got it from the first server (the caller drops
 * it). */
static bool replay_forward_ack(struct server *s)
{
	if (s->txn.skip_msgs == 0) {
		s->txn.req_msgs++;
		return true;
	}
	s->txn.skip_msgs--;
	return false;
}

/* Prepared statements: a reply prepared.c passes, swallows (the answer to
 * pgcat's own message) or replaces. */
static enum pump_step prep_reply(struct server *s, struct buf *in, struct buf *out,
				 const struct proto_frame *f, const uint8_t *hdr, ssize_t got)
{
	uint32_t total = f->len + 1;
	if (f->type == PqMsg_ReadyForQuery && got < 6)
		return PUMP_STOP;
	const uint8_t *whole = NULL;
	bool small = total <= SERVER_INSPECT_MAX;
	/* Replies pgcat may drop or replace are small: have them whole first. */
	bool wanted = small && prep_server_wants(s, f->type);
	if (small && ((reply_class(f->type) & REPLY_REPLACEABLE) || wanted) && buf_len(in) < total)
		return PUMP_STOP;
	if (wanted)
		whole = buf_pullup(in, total);
	uint8_t *repl = NULL;
	uint32_t repl_len = 0;
	switch (prep_server_message(s, f->type, whole, total, &repl, &repl_len)) {
	case PREP_PASS:
		return PUMP_ON;
	case PREP_SWALLOW:
		if (!small) {
			server_close(s, "unexpected large reply to pgcat's own message");
			return PUMP_STOP;
		}
		drop_message(s, total);
		if (f->type != PqMsg_ReadyForQuery)
			return PUMP_NEXT;
		/* pgcat's own PREPARE segment: one ReadyForQuery less owed */
		txn_ready(&s->txn, (char)hdr[5]);
		if (s->txn.outstanding == 0 && !s->txn.ext_pending && !settle_behind(s, in, 0))
			return PUMP_STOP;
		/* pgcat's own Sync after a Flush (sharding, route.c): nothing
		 * else owed, the server goes back. */
		if (s->txn.outstanding == 0 && !s->txn.ext_pending && s->txn.tx_status == 'I' &&
		    pool_mode_per_transaction(s->sp->pool->mode)) {
			s->sp->ev->release(s);
			return PUMP_STOP;
		}
		return PUMP_NEXT;
	case PREP_REPLACE:
		drop_message(s, total);
		buf_add(out, repl, repl_len);
		free(repl);
		s->txn.sent_to_client = true;
		stats_add(s->sp->pool->stats, STAT_SENT, repl_len);
		return PUMP_NEXT;
	case PREP_PREFIX:
		/* The ParseComplete of the client's unnamed Parse that pgcat did
		 * not send, where PostgreSQL's would be: right before its Bind's
		 * reply. A replayed read's client has it already. */
		if (replay_forward_ack(s)) {
			buf_add_bodyless(out, PqMsg_ParseComplete);
			s->txn.sent_to_client = true;
			stats_add(s->sp->pool->stats, STAT_SENT, PROTO_BODYLESS_LEN);
		}
		return PUMP_ON;
	}
	return PUMP_ON;
}

/* A request answered: query_time, and at the end of a transaction
 * xact_time and the shard's transaction count. */
static void count_answer(struct server *s)
{
	struct stats *st = s->sp->pool->stats;
	uint64_t now = s->w->now_us;
	st->v[STAT_SENT] += 6;
	st->v[STAT_QUERY]++;
	st->v[STAT_QUERY_TIME] += now - s->txn.query_start_us;
	stats_observe(st, HIST_QUERY, now - s->txn.query_start_us);
	const struct pool *p = s->sp->pool;
	if (p->query_stats && s->slow.noted)
		server_count_shape(s, now - s->txn.query_start_us);
	if (p->log_min_duration_us || s->slow.noted) {   /* (noted: it was on; the notes go either way) */
		struct slowlog_where where = { p->name, p->user, s->sp->host, s->sp->port, s->sp->shard, s->id };
		slowlog_done(&s->slow, now - s->txn.query_start_us, p->log_min_duration_us, &where);
	}
	s->txn.query_start_us = now;
	if (s->txn.tx_status != 'I')
		return;
	s->sp->xact_count++;
	struct shm_target_counts *tc = s->w->shm ? shm_target_counts(s->w->shm, s->w->id, s->sp->shm_target) : NULL;
	if (tc)   /* one writer: this worker (SHOW SHARDS) */
		atomic_store_explicit(&tc->xacts, atomic_load_explicit(&tc->xacts, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	st->v[STAT_XACT]++;
	st->v[STAT_XACT_TIME] += now - s->txn.xact_start_us;
	stats_observe(st, HIST_XACT, now - s->txn.xact_start_us);
}

/* ReadyForQuery (whole, got 6): forwarded, the transaction's books
 * settled, the client told; the server goes back to its pool when nothing
 * more is owed outside a transaction. PUMP_STOP: it went back. */
static enum pump_step ready_for_query(struct server *s, struct client_end *c, struct buf *in,
				      struct buf *out, char status)
{
	/* The last answer owed: anything already here behind it was not asked
	 * for (checked before the client is told, so it gets the error). */
	if (s->txn.outstanding == 1 && !s->txn.ext_pending && !settle_behind(s, in, 6))
		return PUMP_STOP;
	txn_ready(&s->txn, status);
	if (status != 'I' && c->no_tx_blocks) {
		/* Statement mode: the block is not let open. Closing the server
		 * rolls it back; its client is closed with this error. */
		s->have_error = true;
		snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "08P01");
		snprintf(s->error_message, sizeof s->error_message,
			 "transaction blocks not allowed in statement pooling mode");
		server_close(s, s->error_message);
		return PUMP_STOP;
	}
	/* A listening client's transaction ends, nothing more owed: its end
	 * sends this ReadyForQuery itself, after the notifications due
	 * before it (with more owed, the replies after it must not pass it). */
	bool held = c->hold_ready && status == 'I' && s->txn.outstanding == 0 && !s->txn.ext_pending;
	bool committed = !s->txn.set_cycle_error && !s->txn.set_last_rollback;
	if (held)
		buf_drain(in, 6);
	else if (buf_add(out, buf_head(in), 6) == 0)   /* (whole, as said: a copy of a known size) */
		buf_drain(in, 6);
	if (s->txn.set_pending && s->txn.tx_status == 'I')
		settings_settle(s, committed);
	s->txn.set_cycle_error = false;
	s->txn.set_last_rollback = false;
	count_answer(s);
	s->txn.in_copy_in = false;
	s->last_used_us = s->w->now_us;
	s->txn.sent_to_client = false;
	s->txn.req_msgs = 0;
	s->txn.req_data = false;
	s->txn.skip_msgs = 0;
	s->timeout_cancelled = false;
	if (held)
		c->ev->ready_held(c, committed);
	else
		c->ev->answered(c);
	/* Messages the client sent after that Sync (a Parse, Describe and
	 * Flush of postgres.js, the next pipeline of pgx) are still being
	 * answered here: their replies are this client's, so the server stays
	 * until the ReadyForQuery of their own Sync. */
	if (s->txn.outstanding == 0 && !s->txn.ext_pending && s->txn.tx_status == 'I' && !c->keep_linked &&
	    (pool_mode_per_transaction(s->sp->pool->mode) || c->close_when_released)) {
		/* read_your_writes: a transaction that wrote asks its position
		 * first, while the link still holds (the release follows the
		 * answer); want_wal is set again at the client's next checkout. */
		if (c->want_wal && c->ev->wal_position && pool_mode_per_transaction(s->sp->pool->mode) &&
		    s->client == c && s->state == SERVER_ACTIVE) {
			wal_ask(s);
			return PUMP_STOP;
		}
		s->sp->ev->release(s);
		return PUMP_STOP;
	}
	if (server_fast_close_if_due(s))
		return PUMP_STOP;
	return PUMP_NEXT;
}

/* A NotificationResponse of the client's own server (session mode, or a
 * LISTEN passed through): the notifier's pid becomes the one pgcat gave
 * the client that notified, as the listener's are (SPEC §11), so that an
 * application recognises its own notifications. Rewritten in place. */
static enum pump_step notification_pid(struct server *s, struct buf *in, const struct proto_frame *f)
{
	if (f->len < 4 + 4 + 2)   /* pid, two strings: else refused whole by the client */
		return PUMP_ON;
	if (buf_len(in) < 9)
		return PUMP_STOP;
	uint8_t *h = buf_pullup(in, 9);
	const struct srvpool *sp = s->sp;
	uint32_t pid = proto_get_u32(h + 5);
	uint32_t mine = shm_backend_client_pid(s->w->shm, pid, sp->host, sp->port, sp->database);
	if (mine)
		proto_put_u32(h + 5, mine);
	return PUMP_ON;
}

/* Replies pgcat reads on their way (ParameterStatus, ErrorResponse,
 * CopyInResponse, CommandComplete): taken whole where small, into buf
 * (SERVER_INSPECT_MAX bytes, the pump's: one stack frame of that size per
 * batch, not per message). */
static enum pump_step inspect_reply(struct server *s, struct client_end *c, struct buf *in,
				    struct buf *out, const struct proto_frame *f, uint8_t *buf)
{
	uint32_t total = f->len + 1;
	switch (f->type) {
	case PqMsg_ParameterStatus:
		if (total > SERVER_INSPECT_MAX)
			return PUMP_ON;
		if (!buf_take_whole(in, total, buf))
			return PUMP_STOP;
		const char *name, *value;
		if (proto_parse_parameter_status(buf + 5, f->len - 4, &name, &value)) {
			(void)params_set(&s->params, name, value, false);
			(void)params_set(c->params, name, value, false);
		}
		buf_add(out, buf, total);
		stats_add(s->sp->pool->stats, STAT_SENT, total);
		return PUMP_NEXT;
	case PqMsg_ErrorResponse:
		s->txn.in_copy_in = false;
		s->txn.set_cycle_error = true;
		if (total > SERVER_INSPECT_MAX) {
			count_server_error(s, NULL, 0);   /* (too long to read: its code unknown) */
			return PUMP_ON;
		}
		if (!buf_take_whole(in, total, buf))
			return PUMP_STOP;
		if (proto_error_is_fatal(buf + 5, f->len - 4)) {
			/* The server is about to close: the client gets this as an
			 * ERROR through its end's lost event. */
			server_login_note_error(s, buf + 5, f->len - 4);
			server_close(s, s->error_message);
			return PUMP_STOP;
		}
		count_server_error(s, buf + 5, f->len - 4);
		buf_add(out, buf, total);
		s->txn.sent_to_client = true;
		s->txn.req_data = true;
		stats_add(s->sp->pool->stats, STAT_SENT, total);
		return PUMP_NEXT;
	case PqMsg_CopyInResponse:
		copy_in_started(s);
		return PUMP_ON;
	case PqMsg_CommandComplete:
		/* (a listening client's transaction: committed or not, SPEC §11) */
		if (s->txn.set_pending || c->hold_ready)
			settings_note_complete(s, in, total);
		if (s->slow.noted && s->sp->pool->query_stats && !server_note_rows(s, in, f->len))
			return PUMP_STOP;
		return PUMP_ON;
	case PqMsg_NotificationResponse:
		return notification_pid(s, in, f);
	default:
		return PUMP_ON;
	}
}

/* The replay counts of a message about to be forwarded: an
 * acknowledgement a replayed read already gave the client is dropped
 * (PUMP_NEXT), one forwarded is counted, anything else marks the reply as
 * carrying data. */
static enum pump_step count_for_replay(struct server *s, struct buf *in, const struct proto_frame *f, unsigned cls)
{
	uint32_t total = f->len + 1;
	if (cls & REPLY_ACK) {
		if (s->txn.skip_msgs > 0) {
			/* A replayed read: the client may have this one already. */
			if (total > SERVER_INSPECT_MAX) {
				server_close(s, "replayed read: unexpected large reply");
				return PUMP_STOP;
			}
			if (buf_len(in) < total)
				return PUMP_STOP;
		}
		if (replay_forward_ack(s))
			return PUMP_ON;
		buf_drain(in, total);
		return PUMP_NEXT;
	}
	if (f->type != PqMsg_NoticeResponse && f->type != PqMsg_NotificationResponse) {
		/* (a notice, such as the one of a server shutting down, is not
		 * part of the answer: a replay need not repeat it) */
		s->txn.req_data = true;
		s->txn.skip_msgs = 0;
	}
	return PUMP_ON;
}

/* The start of a reply message at the head of in: its header checked,
 * then each step that reads it. PUMP_ON: forward it (s->fwd_remaining
 * set); PUMP_NEXT: it was taken; PUMP_STOP: wait, or the link moved. */
static enum pump_step server_reply_step(struct server *s, struct client_end *c, struct buf *in, struct buf *out,
				 uint8_t *buf)
{
	uint8_t hdr[6];
	ssize_t got = (ssize_t)io_head(in, hdr, 5, 6);
	if (got < 5)
		return PUMP_STOP;
	struct proto_frame f;
	if (proto_frame_header(hdr, (size_t)got, SERVER_MAX_MESSAGE, &f) != PROTO_FRAME_OK) {
		server_close(s, "server sent an invalid message");
		return PUMP_STOP;
	}
	unsigned cls = reply_class(f.type);
	if (refuse_invalid(s, &f, hdr, got))
		return PUMP_STOP;
	if (txn_unasked(&s->txn, f.type)) {
		/* (a FATAL error, e.g. of a terminated backend, comes unasked:
		 * inspect_reply closes the server with it) */
		uint32_t total = f.len + 1;
		if (f.type != PqMsg_ErrorResponse || total > SERVER_INSPECT_MAX) {
			server_close_unasked(s, f.type);
			return PUMP_STOP;
		}
		if (buf_len(in) < total)
			return PUMP_STOP;
		const uint8_t *m = buf_pullup(in, total);
		if (!m || !proto_error_is_fatal(m + 5, f.len - 4)) {
			server_close_unasked(s, f.type);
			return PUMP_STOP;
		}
	}
	enum pump_step step = PUMP_ON;
	if (s->prep_on && (cls & (REPLY_REPLACEABLE | REPLY_DESCRIBED)))
		step = prep_reply(s, in, out, &f, hdr, got);
	if (step == PUMP_ON && f.type == PqMsg_ReadyForQuery) {
		if (got < 6)
			return PUMP_STOP;
		step = ready_for_query(s, c, in, out, (char)hdr[5]);
	}
	if (step == PUMP_ON && (cls & REPLY_INSPECTED))
		step = inspect_reply(s, c, in, out, &f, buf);
	if (step == PUMP_ON)
		step = count_for_replay(s, in, &f, cls);
	if (step == PUMP_ON)
		s->fwd_remaining = f.len + 1;
	return step;
}

/* The server-to-client pump: whole small messages pgcat reads, the rest
 * streamed by header (io_forward_rest). */
static void process_active(struct server *s)
{
	struct buf *in = s->io.in;
	uint8_t buf[SERVER_INSPECT_MAX];
	struct client_end *c = s->client;
	if (!c)
		return;
	/* Once per batch: the output buffer, marked for the flusher. Every
	 * way out of this client's link leaves the loop (return) at once. */
	struct buf *out = io_out(c->io);
	/* One pass per message: the client's budget, the header (unless a
	 * message is part-forwarded), then as much of it as is here. */
	while (s->state == SERVER_ACTIVE && s->client == c) {
		if (io_out_len(c->io) >= c->out_budget) {
			pause_for_client(s);
			return;
		}
		if (s->fwd_remaining == 0) {
			enum pump_step step = server_reply_step(s, c, in, out, buf);
			if (step == PUMP_STOP)
				return;
			if (step == PUMP_NEXT)
				continue;
		}
		size_t n = io_forward_rest(in, out, &s->fwd_remaining);
		if (n == 0)
			return;
		s->txn.sent_to_client = true;
		stats_add(s->sp->pool->stats, STAT_SENT, n);
	}
}

static void process_once(struct server *s)
{
	/* Nothing read yet: nothing to process (the buffer comes with the first read). */
	if (!s->io.in)
		return;
	switch (s->state) {
	case SERVER_CONNECTING:
		return;
	case SERVER_LOGIN:
		process_login(s);
		return;
	case SERVER_ACTIVE:
		process_active(s);
		return;
	case SERVER_IDLE:
	case SERVER_SYNCING:
	case SERVER_WAL_POSITION:
	case SERVER_ASKING:
	case SERVER_DRAINING:
	case SERVER_RESETTING:
	case SERVER_CANCEL_WAIT:
		if (s->fwd_remaining > 0) {
			struct buf *in = s->io.in;
			size_t have = buf_len(in);
			size_t n = have < s->fwd_remaining ? have : s->fwd_remaining;
			buf_drain(in, n);
			s->fwd_remaining -= (uint32_t)n;
			if (s->fwd_remaining > 0)
				return;
		}
		process_unlinked(s);
		/* A state change inside may leave more to do in the new state. */
		if (s->state == SERVER_ACTIVE)
			process_active(s);
		return;
	case SERVER_CLOSED:
		return;
	}
}

void server_process(struct server *s)
{
	process_once(s);
	/* Input consumed below the high watermark: read again. */
	if (s->state != SERVER_CLOSED)
		io_update_reading(&s->io);
}

static void server_read_cb(struct io *io, void *arg)
{
	struct server *s = arg;
	worker_update_clock(s->w);
	server_process(s);
}

static void server_drain_cb(struct io *io, void *arg)
{
	struct server *s = arg;
	/* Below the low watermark again: the client may send more. */
	if (s->client && s->state == SERVER_ACTIVE)
		s->client->ev->resume(s->client);
}

static void server_event_cb(struct io *io, enum io_event what, int err, void *arg)
{
	struct server *s = arg;
	worker_update_clock(s->w);
	if (what == IO_CONNECTED) {
		server_set_socket_options(s);
		server_set_state(s, SERVER_LOGIN);
		if (s->w->cfg->general.log_connections)
			server_log_new_connection(s);
		/* As libpq: no TLS over a Unix socket, whatever server_tls_sslmode
		 * says (PostgreSQL would answer an SSLRequest there with 'N'). */
		if (s->sp->addr.ss_family == AF_UNIX) {
			login_start(s);
			return;
		}
		if (s->w->tls.for_servers && s->w->cfg->general.server_tls_negotiation == TLS_NEGOTIATION_DIRECT) {
			/* Direct TLS (PostgreSQL 17+): the ClientHello goes first. */
			const char *why = server_login_start_tls(s, true);
			if (why)
				login_fail(s, why);
			return;
		}
		if (s->w->tls.for_servers) {
			/* server_tls_sslmode: ask first (Int32 8, Int32 80877103). */
			static const uint8_t ssl_request[8] = { 0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f };
			buf_add(io_out(&s->io), ssl_request, sizeof ssl_request);
			s->tls_phase = SERVER_TLS_WAIT_ANSWER;
			return;
		}
		login_start(s);
		return;
	}
	if (what == IO_TLS_READY) {
		/* As libpq 17: an ALPN the server picked must be "postgresql",
		 * and a direct handshake must have agreed on it (a TLS server
		 * that is not PostgreSQL, behind the port, would not). */
		bool direct = tls_is_direct(s->io.ssl);
		if (!tls_alpn_ok(s->io.ssl, direct)) {
			login_fail(s, direct ? "the server did not agree on ALPN \"postgresql\" in a direct TLS handshake"
					     : "the server agreed on an ALPN other than \"postgresql\"");
			return;
		}
		s->tls_phase = SERVER_TLS_NONE;
		login_start(s);
		return;
	}
	if (s->tls_phase == SERVER_TLS_HANDSHAKE && !s->have_error) {
		char why[200];
		tls_last_error(why, sizeof why);
		s->have_error = true;
		snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "08006");
		bool direct = s->io.ssl && tls_is_direct(s->io.ssl);
		/* A long OpenSSL reason may cut the hint: the message stays useful. */
		int n = snprintf(s->error_message, sizeof s->error_message, "%sTLS handshake with server %s:%d failed: %s%s",
				 direct ? "direct " : "", s->sp->host, s->sp->port, what == IO_EOF ? "connection closed" : why,
				 direct ? " (server_tls_negotiation = direct needs PostgreSQL 17 or later)" : "");
		if (n < 0)
			snprintf(s->error_message, sizeof s->error_message, "TLS handshake with server failed");
		log_warning("S-%llu: %s", (unsigned long long)s->id, s->error_message);
	}
	{
		/* Process what arrived before the close: typically the FATAL. */
		if (s->state != SERVER_CONNECTING)
			server_process(s);
		if (s->state == SERVER_CLOSED)
			return;
		if (!s->have_error && (s->state == SERVER_CONNECTING || s->state == SERVER_LOGIN)) {
			s->have_error = true;
			snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "08006");
			bool un = s->sp->host[0] == '/';
			snprintf(s->error_message, sizeof s->error_message, "could not connect to server %s%s%d: %s",
				 s->sp->host, un ? "/.s.PGSQL." : ":", s->sp->port,
				 err ? strerror(err) : "connection closed");
		}
		/* The reason names the kernel's verdict: "Connection timed out"
		 * is how tcp_user_timeout and keepalive report a vanished peer. */
		char reason[96];
		snprintf(reason, sizeof reason, "%s%s%s", s->state == SERVER_CONNECTING ? "connect failed" : "connection error",
			 err ? ": " : "", err ? strerror(err) : "");
		server_close(s, what == IO_EOF ? "server closed the connection" : reason);
	}
}
