/* SPDX-License-Identifier: MIT */
/*
 * client_move: a logged-in client written out for the process that takes
 * this one's place (-R), and made again there. Only a client between
 * requests moves: idle, no transaction, nothing half read or half
 * written (a held BEGIN is a transaction: it waits, and drains if it
 * never gets there; a client with LISTEN registrations moves with the
 * others of its pool and their listening connection, notify_move.c,
 * whose part follows this one's in its record). What moves: who it is
 * (user, database, the pool's credentials it logged in with), its
 * address, its cancel key, its session's settings and what it logged in
 * with, its prepared statements and which of them change settings (its
 * setters), the WAL positions its reads wait for (read-your-writes), its
 * SET SERVER ROLE / SHARD choices, and the bytes it sent that pgcat had
 * not read yet.
 *
 * The record, integers high byte first:
 *   u32 version, cstring user, cstring database,
 *   u8 flags (CM_*), u8 peer family, u16 port, 16 bytes of address,
 *   i8 role, i8 primary reads, i16 shard, u64 age in microseconds,
 *   [CM_KEY] u32 pid, u32 secret, u8 kind, u8 peer pid, u16 peer id, 20 bytes,
 *   [CM_SECRET] cstring secret,
 *   [CM_PASSTHROUGH] 32 bytes ClientKey, 32 bytes ServerKey,
 *   settings then startup settings (params_write),
 *   u32 input length, the input,
 *   its prepared statements (prep_move.c),
 *   [version 2] u16 read-your-writes marks, each u8 state, u64 WAL
 *   position, u64 age in microseconds; u8 setters (255: none), u8 overflow,
 *   each cstring name, u8 kind, u16 name parameter, u16 value parameter,
 *   u32 text length, the text.
 * A client with neither is written as version 1 (a pgcat before version
 * 2, taking over in a downgrade, reads it); a version 1 record is read as
 * one with neither. A pgcat before version 2 refuses a version 2 record:
 * in a downgrade, a client with read-your-writes marks or setters is
 * closed.
 */
#include "client_move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "bytes_in.h"
#include "cancel.h"
#include "client.h"
#include "config.h"
#include "context.h"
#include "link.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "prepared.h"
#include "proto.h"
#include "ryw.h"
#include "setters.h"
#include "shm.h"
#include "txn.h"

#define CLIENT_MOVE_VERSION 2u
/* Input a moving client may carry (it was not read yet): beyond, it
 * waits for pgcat to read it here. */
#define CLIENT_MOVE_INPUT_MAX (32u * 1024)

enum {
	CM_UNIX = 1,
	CM_KEY = 2,
	CM_LONG_KEY = 4,
	CM_SECRET = 8,
	CM_PROVEN = 16,
	CM_PASSTHROUGH = 32,
	/* Its server (session mode) or its LISTEN registrations (notify_move.c)
	 * follow in the same record: the caller starts its reading. */
	CM_LINKED = 64
};

const char *client_move_never_why(const struct client *c)
{
	if (c->is_admin || c->console_peer)
		return "console";
	if (c->replication != CLIENT_REPLICATION_NONE)
		return "replication";
	if (c->io.ssl || (c->end.server && link_server_tls(c->end.server)))
		return "tls";
	if (c->move_refused)
		return "state too large";
	return NULL;
}

enum client_move_check client_move_check(struct client *c, bool server_ok)
{
	if (client_move_never_why(c))
		return CLIENT_MOVE_NEVER;
	/* A session-mode client moves with its server, between transactions
	 * (the server's side: server_ok, server_move_at_boundary). */
	bool linked = c->state == CLIENT_ACTIVE && c->end.server && c->pool && !pool_mode_per_transaction(c->pool->mode);
	if (linked && !server_ok)
		return CLIENT_MOVE_NOT_NOW;
	size_t in = c->io.in ? buf_len(c->io.in) : 0;
	if ((c->state != CLIENT_IDLE && !linked) || c->pending_error || c->tx != CLIENT_TX_NONE || c->batch != CLIENT_BATCH_NONE ||
	    c->held_begin || c->fanout || c->xshard || (c->retry && buf_len(c->retry)) ||
	    c->reply_held || c->wait_answer || c->fwd_remaining || c->skip_remaining ||
	    c->sticky_until_us > c->w->now_us || !c->pool || in > CLIENT_MOVE_INPUT_MAX)
		return CLIENT_MOVE_NOT_NOW;
	/* Only now, everything else being right, reading stops (a request
	 * already read is still served: the client is not idle then, and its
	 * reading follows the worker again at its next state); a receive in
	 * flight lands in the input. */
	if (!io_suspended(&c->io))
		io_suspend(&c->io, true);
	if (c->processing || !io_at_rest(&c->io))
		return CLIENT_MOVE_NOT_NOW;
	if (c->io.in && buf_len(c->io.in) > CLIENT_MOVE_INPUT_MAX) {
		/* What landed meanwhile is a large request: served here first. */
		io_suspend(&c->io, c->w->suspended);
		return CLIENT_MOVE_NOT_NOW;
	}
	return CLIENT_MOVE_READY;
}

/* The positions c's reads wait for, each mark's time as an age. */
static bool write_ryw(const struct client *c, struct pktbuf *pb)
{
	size_t n = c->ryw ? c->ryw->n : 0;
	if (n > UINT16_MAX)
		return false;
	pktbuf_put_u16(pb, (uint16_t)n);
	for (size_t i = 0; i < n; i++) {
		const struct ryw_mark *m = &c->ryw->m[i];
		pktbuf_put_u8(pb, (uint8_t)m->state);
		pktbuf_put_u64(pb, m->lsn);
		pktbuf_put_u64(pb, m->since_us && m->since_us < c->w->now_us ? c->w->now_us - m->since_us : 0);
	}
	return true;
}

static struct ryw *read_ryw(struct bytes_in *r, uint64_t now_us)
{
	uint16_t n = bytes_u16(r);
	if (r->bad || n == 0)
		return NULL;
	struct ryw *y = calloc(1, sizeof *y + (size_t)n * sizeof y->m[0]);
	if (!y) {
		r->bad = true;
		return NULL;
	}
	y->n = n;
	for (uint16_t i = 0; i < n; i++) {
		uint8_t state = bytes_u8(r);
		y->m[i].lsn = bytes_u64(r);
		uint64_t age = bytes_u64(r);
		y->m[i].state = state <= RYW_UNKNOWN ? (enum ryw_mark_state)state : RYW_NONE;
		y->m[i].since_us = age < now_us ? now_us - age : 0;
		if (state > RYW_UNKNOWN)
			r->bad = true;
	}
	return y;
}

/* Which of c's prepared statements change settings (setters.h). */
static bool write_setters(const struct setters *s, struct pktbuf *pb)
{
	if (!s) {
		pktbuf_put_u8(pb, 255);
		return true;
	}
	pktbuf_put_u8(pb, (uint8_t)s->n);
	pktbuf_put_u8(pb, s->overflow);
	for (unsigned i = 0; i < s->n && i < SETTERS_MAX; i++) {
		const struct setter *e = &s->e[i];
		pktbuf_put_cstring(pb, e->name);
		pktbuf_put_u8(pb, (uint8_t)e->kind);
		pktbuf_put_u16(pb, e->name_param);
		pktbuf_put_u16(pb, e->value_param);
		size_t len = e->sql ? e->len : 0;
		pktbuf_put_u32(pb, (uint32_t)len);
		if (len)
			pktbuf_put_bytes(pb, e->sql, len);
	}
	return true;
}

static bool read_setters(struct bytes_in *r, struct setters **sp)
{
	uint8_t n = bytes_u8(r);
	if (r->bad || n == 255)
		return !r->bad;
	uint8_t overflow = bytes_u8(r);
	struct setters *s = calloc(1, sizeof *s);
	if (!s || n > SETTERS_MAX) {
		free(s);
		return false;
	}
	*sp = s;   /* (freed with the client, whatever it holds) */
	s->overflow = overflow != 0;
	for (uint8_t i = 0; i < n; i++) {
		const char *name = bytes_cstring(r);
		uint8_t kind = bytes_u8(r);
		uint16_t name_param = bytes_u16(r), value_param = bytes_u16(r);
		uint32_t len = bytes_u32(r);
		const uint8_t *sql = bytes_take(r, len);
		if (r->bad || kind == PARAMS_SETTER_NONE || kind > PARAMS_SETTER_UNTRACKED || len > SETTERS_SQL_MAX)
			return false;
		struct setter *e = &s->e[s->n];
		if (!(e->name = strdup(name)))
			return false;
		s->n++;
		e->kind = (enum params_setter)kind;
		e->name_param = name_param;
		e->value_param = value_param;
		if (len) {
			if (!(e->sql = malloc(len)))
				return false;
			memcpy(e->sql, sql, len);
			e->len = len;
		}
	}
	return true;
}

bool client_move_write(struct client *c, struct pktbuf *pb)
{
	struct worker *w = c->w;
	/* The user's own pool holds what it logged in with (c->pool may be
	 * a forced user's, which serves it). */
	struct pool *own = pool_find(w, client_database(c), client_user(c));
	struct cancel_key_state key;
	bool has_key = c->has_cancel_key && cancel_key_export(&w->cancel, c->cancel_pid, &key);
	const char *secret = own && own->own_user ? own->own_user->password : NULL;
	bool passthrough = own && own->have_scram && own->have_passthrough_key;
	uint8_t flags = (c->is_unix ? CM_UNIX : 0) | (has_key ? CM_KEY : 0) | (c->long_cancel_key ? CM_LONG_KEY : 0) |
			(secret ? CM_SECRET : 0) | (own && own->proven ? CM_PROVEN : 0) |
			(passthrough ? CM_PASSTHROUGH : 0) | (c->end.server || c->kind_state ? CM_LINKED : 0);
	/* Version 1 when there is nothing of version 2's to say: a pgcat
	 * before version 2 (a downgrade) reads that one, and takes the client. */
	bool v2 = (c->ryw && c->ryw->n) || c->setters;
	pktbuf_put_u32(pb, v2 ? CLIENT_MOVE_VERSION : 1u);
	pktbuf_put_cstring(pb, client_user(c));
	pktbuf_put_cstring(pb, client_database(c));
	pktbuf_put_u8(pb, flags);
	pktbuf_put_u8(pb, c->peer_family);
	pktbuf_put_u16(pb, c->port);
	uint8_t addr[16] = { 0 };
	if (c->peer_family == AF_INET)
		memcpy(addr, &c->peer.v4, sizeof c->peer.v4);
	else if (c->peer_family == AF_INET6)
		memcpy(addr, &c->peer.v6, sizeof c->peer.v6);
	pktbuf_put_bytes(pb, addr, sizeof addr);
	pktbuf_put_u8(pb, (uint8_t)c->role_override);
	pktbuf_put_u8(pb, (uint8_t)c->primary_reads_override);
	pktbuf_put_u16(pb, (uint16_t)c->shard_override);
	pktbuf_put_u64(pb, w->now_us - c->connect_us);
	if (has_key) {
		pktbuf_put_u32(pb, key.pid);
		pktbuf_put_u32(pb, key.secret);
		pktbuf_put_u8(pb, key.kind);
		pktbuf_put_u8(pb, key.peer_pid);
		pktbuf_put_u16(pb, key.peer_id);
		pktbuf_put_bytes(pb, key.ext, sizeof key.ext);
	}
	if (secret)
		pktbuf_put_cstring(pb, secret);
	if (passthrough) {
		pktbuf_put_bytes(pb, own->passthrough_client_key, SCRAM_KEY_LEN);
		pktbuf_put_bytes(pb, own->scram.server_key, SCRAM_KEY_LEN);
	}
	params_write(pb, &c->params);
	params_write(pb, &c->startup_params);
	size_t in = c->io.in ? buf_len(c->io.in) : 0;
	pktbuf_put_u32(pb, (uint32_t)in);
	if (in) {
		const unsigned char *p = buf_head(c->io.in);
		if (!p)
			return false;
		pktbuf_put_bytes(pb, p, in);
	}
	return prep_client_write(c, pb) && (!v2 || (write_ryw(c, pb) && write_setters(c->setters, pb))) && !pb->failed;
}

/* ---- the other side ---- */

/* The user's own pool in this process, made as a login would make it. */
static struct pool *own_pool(struct worker *w, const char *db, const char *user, const char *secret, bool proven)
{
	struct pool *own = pool_find(w, db, user);
	if (!own) {
		const struct config_pool *named = config_find_pool(w->cfg, db);
		if ((!named || named->autodb_instance) && pool_add_autodb(w, db, user))
			own = pool_find(w, db, user);
	}
	if (own && own->cuser && own->cuser->server_only)
		return NULL;
	if (!own && secret) {
		const struct config_pool *cp = config_find_pool(w->cfg, db);
		own = cp ? pool_add_looked_up(w, cp, user, secret) : NULL;
		if (own)
			own->proven = proven;
	}
	return own;
}

static struct client *refuse(struct client *c, const char *why)
{
	log_warning("C-%llu %s@%s: cannot take this client over: %s", (unsigned long long)c->id, client_user(c),
		    client_database(c), why);
	client_close(c, SQLSTATE_ADMIN_SHUTDOWN, "pgcat restarted and %s", why);
	return NULL;
}

struct client *client_move_read(struct worker *w, int fd, const uint8_t *rec, size_t len)
{
	struct bytes_in r = { rec, len, 0, false };
	uint32_t version = bytes_u32(&r);
	const char *user = bytes_cstring(&r), *db = bytes_cstring(&r);
	uint8_t flags = bytes_u8(&r);
	uint8_t family = bytes_u8(&r);
	uint16_t port = bytes_u16(&r);
	const uint8_t *addr = bytes_take(&r, 16);
	int8_t role = (int8_t)bytes_u8(&r), primary_reads = (int8_t)bytes_u8(&r);
	int16_t shard = (int16_t)bytes_u16(&r);
	uint64_t age = bytes_u64(&r);
	struct cancel_key_state key = { 0 };
	if (flags & CM_KEY) {
		key.pid = bytes_u32(&r);
		key.secret = bytes_u32(&r);
		key.kind = bytes_u8(&r);
		key.peer_pid = bytes_u8(&r);
		key.peer_id = bytes_u16(&r);
		const uint8_t *ext = bytes_take(&r, sizeof key.ext);
		if (ext)
			memcpy(key.ext, ext, sizeof key.ext);
	}
	const char *secret = flags & CM_SECRET ? bytes_cstring(&r) : NULL;
	const uint8_t *client_key = flags & CM_PASSTHROUGH ? bytes_take(&r, SCRAM_KEY_LEN) : NULL;
	const uint8_t *server_key = flags & CM_PASSTHROUGH ? bytes_take(&r, SCRAM_KEY_LEN) : NULL;
	if (r.bad || version < 1 || version > CLIENT_MOVE_VERSION || !user[0] || !db[0] ||
	    (family != AF_UNIX && family != AF_INET && family != AF_INET6)) {
		log_error("handover: a client record this version cannot read (version %u, %zu bytes)", version, len);
		close(fd);
		return NULL;
	}
	struct client *c = client_new(w, fd, (flags & CM_UNIX) != 0);
	if (!c)
		return NULL;
	c->moved_in = true;
	c->peer_family = family;
	c->port = port;
	if (family == AF_INET)
		memcpy(&c->peer.v4, addr, sizeof c->peer.v4);
	else if (family == AF_INET6)
		memcpy(&c->peer.v6, addr, sizeof c->peer.v6);
	/* (Checked against this process's pools below: a value out of range
	 * is the default.) */
	c->role_override = role >= 0 && role <= 3 ? role : 0;
	c->primary_reads_override = primary_reads >= -1 && primary_reads <= 1 ? primary_reads : -1;
	c->shard_override = shard;
	c->connect_us = age < w->now_us ? w->now_us - age : 0;
	size_t ul = strlen(user), dl = strlen(db);
	c->names = malloc(ul + dl + 2);
	if (!c->names)
		return refuse(c, "ran out of memory");
	memcpy(c->names, user, ul + 1);
	memcpy(c->names + ul + 1, db, dl + 1);
	client_set_state(c, CLIENT_IDLE);
	if (!params_read(&r, &c->params) || !params_read(&r, &c->startup_params))
		return refuse(c, "its session settings could not be read");
	uint32_t in = bytes_u32(&r);
	const uint8_t *input = bytes_take(&r, in);
	if (r.bad)
		return refuse(c, "its record is malformed");
	struct pool *own = own_pool(w, db, user, secret, (flags & CM_PROVEN) != 0);
	if (!own)
		return refuse(c, "its database or user is no longer configured");
	if (client_key) {
		(void)pool_client_scram(own);   /* (the verifier, if not made yet) */
		auth_adopt_passthrough_key(own, server_key, client_key);
	}
	c->pool = pool_serving(w, own);
	if (c->shard_override < -1 || (c->shard_override >= 0 && (size_t)c->shard_override >= c->pool->cpool->n_shards))
		c->shard_override = -1;   /* (a shard this configuration does not have) */
	c->pool->n_clients++;
	c->pool->had_client = true;
	if (w->shm && own->shm_slot >= 0) {
		c->count_slot = (int16_t)own->shm_slot;
		shm_pool_clients_add(w->shm, w->id, own->shm_slot, 1);
	}
	if (strcmp(c->pool->user, user) == 0 && strcmp(c->pool->name, db) == 0) {
		free(c->names);   /* the pool's names serve (client_user) */
		c->names = NULL;
	}
	bool prep_ok = prep_client_read(c, &r);
	if (prep_ok && version >= 2) {
		c->ryw = read_ryw(&r, w->now_us);
		prep_ok = read_setters(&r, &c->setters) && !r.bad;
	}
	if (!prep_ok || r.off != r.len)
		return refuse(c, r.bad || r.off != r.len ? "its record is malformed" : "its prepared statements could not be kept");
	c->long_cancel_key = (flags & CM_LONG_KEY) != 0;
	if ((flags & CM_KEY) && cancel_key_adopt(&w->cancel, c, &key)) {
		c->has_cancel_key = true;
		c->cancel_pid = key.pid;
		c->cancel_key = key.secret;
		c->end.backend_pid = key.pid;
	} else if (flags & CM_KEY) {
		log_warning("C-%llu %s@%s: its cancel key could not be kept: it cancels nothing from now on",
			    (unsigned long long)c->id, client_user(c), client_database(c));
	}
	if (w->cfg->general.log_connections) {
		char a[CLIENT_ADDR_STRLEN];
		log_info("C-%llu %s@%s %s:%d: taken over from the previous process", (unsigned long long)c->id,
			 client_user(c), client_database(c), client_addr_str(c, a), c->port);
	}
	if (in && !io_in_add(&c->io, input, in))
		return refuse(c, "ran out of memory");
	/* With its server or its LISTEN state (CM_LINKED) it reads once the
	 * caller has set those up (handover.c, notify_move.c). */
	if (!(flags & CM_LINKED)) {
		io_read_now(&c->io);
		if (c->state == CLIENT_IDLE && c->io.in && buf_len(c->io.in))
			client_process(c);
	}
	return c;
}
