/* SPDX-License-Identifier: MIT */
/*
 * notify_move: a pool's listening clients and connections handed over
 * together (notify_move.h).
 */
#include "notify_move.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytes_in.h"
#include "client_move.h"
#include "context.h"
#include "handover_link.h"
#include "log.h"
#include "notify_session.h"
#include "notify_internal.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"

/* The unread input a listening connection may carry (a notification
 * not read whole yet; its read mark): beyond, it is read here first. */
#define LISTENER_MOVE_INPUT_MAX (64u * 1024)
/* A group whose members are all idle holds them still at most this long,
 * waiting for what they have in flight (their output to drain: a few
 * milliseconds for a client that reads), then lets them go a while. */
#define NOTIFY_GATHER_MAX_US (200u * 1000)
#define NOTIFY_GATHER_PAUSE_US (1000u * 1000)

/* ---- the old side ---- */

static void put_pool(struct pktbuf *pb, uint8_t type, const struct notify_pool *np)
{
	pktbuf_put_u8(pb, type);
	pktbuf_put_cstring(pb, np->pool->name);
	pktbuf_put_cstring(pb, np->pool->user);
}

static bool send_pool_record(int link_fd, uint8_t type, const struct notify_pool *np)
{
	uint8_t rec[512];
	struct pktbuf pb;
	pktbuf_init(&pb, rec, sizeof rec);
	put_pool(&pb, type, np);
	if (pb.failed)
		return true;   /* (names too long to say: the new process opens its own) */
	return handover_send(link_fd, pb.data, pb.len, NULL, 0);
}

static bool listener_tls(const struct notify_listener *l)
{
	return bconn_state(&l->b) != BCONN_CLOSED && l->b.io.ssl != NULL;
}

static bool pool_over_tls(const struct notify_pool *np)
{
	for (int k = 0; k < np->n_shards; k++)
		if (listener_tls(&np->listeners[k]))
			return true;
	return false;
}

const char *notify_move_never_why(const struct client *c)
{
	const char *why = client_move_never_why(c);
	if (why || !notify_move_grouped(c))
		return why;
	struct notify_pool *np = ((struct notify_client *)c->kind_state)->np;
	if (pool_over_tls(np))
		return "tls";
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &np->clients)
		if (client_move_never_why(LIST_OWNER(pos, struct notify_client, node)->c))
			return "listens with a client that stays";
	return NULL;
}

bool notify_move_promise(struct worker *w, int link_fd)
{
	struct notify_hub *hub = w->notify;
	if (!hub)
		return true;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &hub->pools) {
		struct notify_pool *np = LIST_OWNER(pos, struct notify_pool, node);
		np->move_given_up = false;
		np->gathering_since_us = np->gather_again_us = 0;
		if (list_empty(&np->clients) || pool_over_tls(np))
			continue;
		if (!send_pool_record(link_fd, 'w', np))
			return false;
		np->taking = true;   /* (kept until its end is told, even if its members leave) */
	}
	return true;
}

static bool held(const struct notify_listener *l)
{
	return (l->b.io.paused & IO_PAUSE_BACKPRESSURE) != 0;
}

/* Hold l still (no more notifications read) or let it read again. */
static void hold(struct notify_listener *l, bool on)
{
	if (bconn_state(&l->b) == BCONN_READY && held(l) != on)
		bconn_pause(&l->b, on);
}

/* Every connection of np reads again. */
static void read_again(struct notify_pool *np)
{
	for (int k = 0; k < np->n_shards; k++)
		hold(&np->listeners[k], false);
}

/* l can go: between commands, held, nothing to write, nothing in flight.
 * A closed one is simply not sent (the new process opens its own). */
static bool listener_at_rest(const struct notify_listener *l)
{
	switch (bconn_state(&l->b)) {
	case BCONN_CLOSED:
		return true;
	case BCONN_READY:
		return l->sent_seq == l->done_seq && held(l) && io_at_rest(&l->b.io) && !l->b.io.ssl &&
		       (!l->b.io.in || buf_len(l->b.io.in) <= LISTENER_MOVE_INPUT_MAX);
	case BCONN_CONNECTING:
	case BCONN_TLS_ANSWER:
	case BCONN_TLS_HANDSHAKE:
	case BCONN_LOGIN:
		break;   /* logging in: ready soon */
	}
	return false;
}

enum group_look {
	GROUP_BUSY,       /* a member in a request or a transaction */
	GROUP_GATHERING,  /* every member idle: held, waiting for what is in flight */
	GROUP_READY,
	GROUP_NEVER
};

/* Every member and connection of np looked at; a member found idle is
 * held still by client_move_check (its reading stops). */
static enum group_look look(struct notify_pool *np)
{
	if (pool_over_tls(np))
		return GROUP_NEVER;
	bool ready = true, gathering = true;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &np->clients) {
		struct notify_client *nc = LIST_OWNER(pos, struct notify_client, node);
		struct client *c = nc->c;
		if (nc->queue && buf_len(nc->queue))
			notify_flush(nc);   /* (into its output: out before it moves) */
		enum client_move_check k = client_move_check(c, false);
		if (k == CLIENT_MOVE_NEVER)
			return GROUP_NEVER;
		bool mine = !nc->held_status && !nc->n_ops && !(nc->queue && buf_len(nc->queue));
		if (k != CLIENT_MOVE_READY || !mine)
			ready = false;
		/* (held by the check: idle, only its input or output in flight) */
		if (!io_suspended(&c->io) || !mine)
			gathering = false;
	}
	if (!gathering)
		return GROUP_BUSY;
	for (int k = 0; k < np->n_shards; k++) {
		struct notify_listener *l = &np->listeners[k];
		/* Held only between commands: an answer owed is read first. */
		hold(l, l->sent_seq == l->done_seq && io_out_len(&l->b.io) == 0);
		if (!listener_at_rest(l))
			ready = false;
	}
	return ready ? GROUP_READY : GROUP_GATHERING;
}

/* The members read again, the connections too: the group did not come
 * together this time. */
static void let_go(struct worker *w, struct notify_pool *np)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &np->clients) {
		struct client *c = LIST_OWNER(pos, struct notify_client, node)->c;
		if (io_suspended(&c->io) != w->suspended)
			io_suspend(&c->io, w->suspended);
	}
	read_again(np);
}

static void write_member(struct notify_client *nc, struct pktbuf *pb)
{
	pktbuf_put_u8(pb, 'M');
	pktbuf_put_u32(pb, 0);   /* the client's part's length, below */
	size_t from = pb->len;
	if (!client_move_write(nc->c, pb)) {
		pb->failed = true;
		return;
	}
	if (!pb->failed)
		proto_put_u32(pb->data + 1, (uint32_t)(pb->len - from));
	pktbuf_put_u16(pb, (uint16_t)nc->n_channels);
	for (uint32_t i = 0; i < nc->n_channels; i++)
		pktbuf_put_cstring(pb, nc->channels[i]->name);
	pktbuf_put_u16(pb, (uint16_t)nc->stmts.n);
	for (uint32_t i = 0; i < nc->stmts.n; i++) {
		const struct notify_stmt *st = &nc->stmts.v[i];
		pktbuf_put_cstring(pb, st->name);
		pktbuf_put_u8(pb, st->portal);
		pktbuf_put_u8(pb, (uint8_t)st->cmd);
		pktbuf_put_cstring(pb, st->channel);
	}
	if (nc->n_channels > UINT16_MAX || nc->stmts.n > UINT16_MAX)
		pb->failed = true;
}

static bool write_listener(const struct notify_listener *l, struct pktbuf *pb)
{
	put_pool(pb, 'W', l->np);
	pktbuf_put_u32(pb, (uint32_t)l->shard);
	pktbuf_put_cstring(pb, l->host ? l->host : "");
	pktbuf_put_u32(pb, (uint32_t)l->port);
	pktbuf_put_cstring(pb, l->database ? l->database : "");
	size_t in = l->b.io.in ? buf_len(l->b.io.in) : 0;
	pktbuf_put_u32(pb, (uint32_t)in);
	if (in) {
		const unsigned char *p = buf_head(l->b.io.in);
		if (!p)
			return false;
		pktbuf_put_bytes(pb, p, in);
	}
	return !pb->failed;
}

/* np's records written, each in its own allocation (a member's state is
 * written before anything goes, so that one too large to move keeps the
 * whole group here, with its connections). NULL: it does not fit (the
 * member marked, or out of memory). */
struct written {
	struct pktbuf pb;
	int fd;
	struct notify_listener *listener;   /* the record's: a connection, */
	struct client *client;               /* or a client */
};

static void written_free(struct written *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].pb.data);
	free(v);
}

static struct written *write_group(struct notify_pool *np, size_t *n_out)
{
	size_t n = 0, cap = (size_t)np->n_shards;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &np->clients)
		cap++;
	struct written *v = calloc(cap, sizeof *v);
	if (!v)
		return NULL;
	for (int k = 0; k < np->n_shards; k++) {
		struct notify_listener *l = &np->listeners[k];
		if (bconn_state(&l->b) != BCONN_READY)
			continue;
		uint8_t *mem = malloc(HANDOVER_RECORD_MAX);
		if (!mem)
			goto fail;
		pktbuf_init(&v[n].pb, mem, HANDOVER_RECORD_MAX);
		v[n].fd = l->b.io.fd;
		v[n].listener = l;
		n++;
		if (!write_listener(l, &v[n - 1].pb))
			goto fail;
	}
	LIST_FOREACH_SAFE(pos, tmp, &np->clients) {
		struct notify_client *nc = LIST_OWNER(pos, struct notify_client, node);
		uint8_t *mem = malloc(HANDOVER_RECORD_MAX);
		if (!mem)
			goto fail;
		pktbuf_init(&v[n].pb, mem, HANDOVER_RECORD_MAX);
		v[n].fd = nc->c->io.fd;
		v[n].client = nc->c;
		n++;
		write_member(nc, &v[n - 1].pb);
		if (v[n - 1].pb.failed) {
			nc->c->move_refused = true;   /* (it drains, and its group with it) */
			goto fail;
		}
	}
	*n_out = n;
	return v;
fail:
	written_free(v, n);
	return NULL;
}

/* What the new process has now is gone from here: the connections
 * (closed, not ended: the new process has them), then the clients, whose
 * registrations go with them without a word to a server (the pool's state
 * goes once they are all gone, notify.c). The count of clients. */
static unsigned gone(const struct written *v, size_t n)
{
	unsigned count = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i].listener)
			bconn_close(&v[i].listener->b, false);
	for (size_t i = 0; i < n; i++) {
		struct client *c = v[i].client;
		if (!c)
			continue;
		c->moved = true;
		client_close(c, NULL, "moved to the new process");
		count++;
	}
	return count;
}

/* np goes: its connections, its members, its end. false: the link
 * failed; what went before it is the new process's all the same (gone
 * from here: two processes must never read one socket). */
static bool give_group(struct worker *w, int link_fd, struct notify_pool *np, unsigned *moved)
{
	size_t n = 0;
	struct written *v = write_group(np, &n);
	if (!v) {
		let_go(w, np);
		return true;   /* (a later look finds it NEVER, or out of memory no more) */
	}
	size_t sent = 0;
	while (sent < n && handover_send(link_fd, v[sent].pb.data, v[sent].pb.len, &v[sent].fd, 1))
		sent++;
	bool ok = sent == n && send_pool_record(link_fd, 'g', np);
	np->taking = false;
	char name[128];
	snprintf(name, sizeof name, "%s", np->pool->name);
	unsigned count = gone(v, sent);
	written_free(v, n);
	*moved += count;
	if (!ok) {
		log_error("handover: sending the listening clients of pool %s to the new process failed (%u had gone)",
			  name, count);
		return false;
	}
	log_info("handover: pool %s: %u listening clients moved to the new process with their listening connections",
		 name, count);
	return true;
}

/* The group will not move in this handover: the new process stops
 * waiting for its connections. false: the link failed. */
static bool give_up(int link_fd, struct notify_pool *np)
{
	if (np->move_given_up)
		return true;
	np->move_given_up = true;
	np->taking = false;
	return send_pool_record(link_fd, 'g', np);
}

bool notify_move_give(struct worker *w, int link_fd, unsigned *moved, unsigned *staying)
{
	*moved = *staying = 0;
	struct notify_hub *hub = w->notify;
	if (!hub)
		return true;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &hub->pools) {
		struct notify_pool *np = LIST_OWNER(pos, struct notify_pool, node);
		if (list_empty(&np->clients)) {
			/* Its members left: nothing comes, for now (a client
			 * that LISTENs here later makes a group that may move). */
			if (np->taking) {
				np->taking = false;
				if (!send_pool_record(link_fd, 'g', np))
					return false;
			}
			continue;
		}
		enum group_look k = np->move_given_up ? GROUP_NEVER : w->now_us < np->gather_again_us ? GROUP_BUSY : look(np);
		if (k == GROUP_GATHERING && !np->gathering_since_us)
			np->gathering_since_us = w->now_us;
		if (k == GROUP_GATHERING && w->now_us - np->gathering_since_us > NOTIFY_GATHER_MAX_US) {
			/* One of them does not get to rest (its output does not
			 * drain): the others are not held for it longer; later. */
			np->gather_again_us = w->now_us + NOTIFY_GATHER_PAUSE_US;
			k = GROUP_BUSY;
		}
		if (k != GROUP_GATHERING)
			np->gathering_since_us = 0;
		switch (k) {
		case GROUP_READY:
			if (!give_group(w, link_fd, np, moved))
				return false;
			break;
		case GROUP_NEVER: {
			let_go(w, np);
			struct list_node *cp, *ct;
			LIST_FOREACH_SAFE(cp, ct, &np->clients)
				*staying += client_move_never_why(LIST_OWNER(cp, struct notify_client, node)->c) == NULL;
			if (!give_up(link_fd, np))
				return false;
			break;
		}
		case GROUP_BUSY:
			let_go(w, np);
			break;
		case GROUP_GATHERING:
			break;
		}
	}
	return true;
}

/* fn on each pool of w's hub (it may not free the pool). */
static void each_pool(struct worker *w, void (*fn)(struct notify_pool *np))
{
	struct notify_hub *hub = w->notify;
	if (!hub)
		return;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &hub->pools)
		fn(LIST_OWNER(pos, struct notify_pool, node));
}

/* Every connection and member of np reads again; its move is over. */
static void abandon(struct notify_pool *np)
{
	np->taking = false;
	np->gathering_since_us = np->gather_again_us = 0;
	let_go(np->hub->w, np);
}

void notify_move_abandon(struct worker *w)
{
	each_pool(w, abandon);
}

/* ---- the new side ---- */

/* The pool a record names, from its start (NULL: none here). */
static struct notify_pool *read_pool(struct worker *w, struct bytes_in *r, bool make)
{
	const char *name = bytes_cstring(r), *user = bytes_cstring(r);
	if (r->bad)
		return NULL;
	struct pool *p = pool_find(w, name, user);
	if (!p)
		return NULL;
	struct notify_hub *hub = w->notify;
	if (hub) {
		struct list_node *pos, *tmp;
		LIST_FOREACH_SAFE(pos, tmp, &hub->pools) {
			struct notify_pool *np = LIST_OWNER(pos, struct notify_pool, node);
			if (np->pool == p)
				return np;
		}
	}
	if (!make || !(hub = notify_hub_get(w)))
		return NULL;
	return notify_pool_get(hub, p);
}

/* The old process's connection closed here, politely: it was not taken. */
static void terminate(int fd)
{
	static const uint8_t terminate_msg[5] = { PqMsg_Terminate, 0, 0, 0, 4 };
	ssize_t r = write(fd, terminate_msg, sizeof terminate_msg);
	(void)r;
	close(fd);
}

static void take_promise(struct worker *w, const uint8_t *rec, size_t len)
{
	struct bytes_in r = { rec, len, 0, false };
	struct notify_pool *np = read_pool(w, &r, true);
	if (!np)
		return;
	np->taking = true;
	for (int k = 0; k < np->n_shards; k++) {
		struct notify_listener *l = &np->listeners[k];
		if (bconn_state(&l->b) != BCONN_CLOSED)
			continue;
		l->awaited = true;
		l->retry_at_us = UINT64_MAX;
	}
}

static void take_listener(struct worker *w, const uint8_t *rec, size_t len, int fd)
{
	struct bytes_in r = { rec, len, 0, false };
	struct notify_pool *np = read_pool(w, &r, true);
	uint32_t shard = bytes_u32(&r);
	const char *host = bytes_cstring(&r);
	uint32_t port = bytes_u32(&r);
	const char *database = bytes_cstring(&r);
	uint32_t in = bytes_u32(&r);
	const uint8_t *input = bytes_take(&r, in);
	if (r.bad || r.off != r.len || port > 65535) {
		log_error("handover: a listening connection's record this version cannot read (%zu bytes)", len);
		terminate(fd);
		return;
	}
	if (!np || shard >= (uint32_t)np->n_shards) {
		log_info("handover: no pool or shard here for a listening connection of the old process: it is closed");
		terminate(fd);
		return;
	}
	np->taking = true;
	struct notify_listener *l = &np->listeners[shard];
	if (bconn_state(&l->b) != BCONN_CLOSED) {
		/* One of this process's own came first (a client here LISTENed
		 * before the promise): it serves; notifications the old one had
		 * not read are lost, and said so. */
		log_warning("listener (pool %s, shard %u): this process has its own already; the old process's is "
			    "closed, and what it had not read is lost", np->pool->name, shard);
		terminate(fd);
		return;
	}
	char *h = strdup(host), *d = strdup(database);
	if (!h || !d) {
		free(h);
		free(d);
		terminate(fd);
		return;
	}
	free(l->host);
	free(l->database);
	l->host = h;
	l->database = d;
	l->port = (int)port;
	if (!bconn_adopt(&l->b, &notify_listener_profile, fd, l->host, l->port, l->database))
		return;
	l->sent_seq = l->done_seq = 0;
	l->oldest_sent_us = w->now_us;
	l->failing = false;
	l->awaited = false;
	l->retry_at_us = 0;
	if (in && !io_in_add(&l->b.io, input, in)) {
		log_warning("listener (pool %s, shard %u): out of memory: notifications the old process had not read "
			    "are lost", np->pool->name, shard);
		bconn_close(&l->b, true);
		return;
	}
	/* The channels this process knows already (a client here may have
	 * LISTENed meanwhile) are listened to on it; its clients' come as
	 * they register. It stays held until the group's end: its clients
	 * come first, and the answers are read then. */
	notify_listener_ready(l);
}

static bool take_member(struct worker *w, const uint8_t *rec, size_t len, int fd)
{
	if (len < 4 || proto_get_u32(rec) > len - 4) {
		log_error("handover: a listening client's record this version cannot read (%zu bytes)", len);
		close(fd);
		return false;
	}
	size_t client_len = proto_get_u32(rec);
	struct client *c = client_move_read(w, fd, rec + 4, client_len);
	if (!c)
		return false;
	struct bytes_in r = { rec + 4 + client_len, len - 4 - client_len, 0, false };
	struct notify_client *nc = notify_client_get(c);
	bool ok = nc != NULL;
	uint16_t n = bytes_u16(&r);
	for (uint16_t i = 0; i < n && ok && !r.bad; i++) {
		const char *channel = bytes_cstring(&r);
		ok = r.bad || (strlen(channel) <= NOTIFY_CHANNEL_MAX && notify_apply(nc, true, channel));
	}
	uint16_t n_stmts = bytes_u16(&r);
	struct notify_stmts *stmts = nc ? notify_stmts(nc) : NULL;
	for (uint16_t i = 0; i < n_stmts && ok && !r.bad; i++) {
		const char *name = bytes_cstring(&r);
		uint8_t portal = bytes_u8(&r), cmd = bytes_u8(&r);
		const char *channel = bytes_cstring(&r);
		if (r.bad || strlen(channel) > NOTIFY_CHANNEL_MAX || cmd > NOTIFY_SQL_UNLISTEN_ALL) {
			ok = false;
			break;
		}
		if (stmts->n == stmts->cap) {
			uint32_t cap = stmts->cap ? stmts->cap * 2 : 2;
			struct notify_stmt *v = realloc(stmts->v, cap * sizeof *v);
			if (!v) {
				ok = false;
				break;
			}
			stmts->v = v;
			stmts->cap = cap;
		}
		struct notify_stmt *st = &stmts->v[stmts->n];
		if (!(st->name = strdup(name))) {
			ok = false;
			break;
		}
		st->portal = portal != 0;
		st->cmd = cmd;
		memcpy(st->channel, channel, strlen(channel) + 1);
		stmts->n++;
	}
	if (!ok || r.bad || r.off != r.len) {
		log_warning("C-%llu %s@%s: its LISTEN registrations could not be taken over", (unsigned long long)c->id,
			    client_user(c), client_database(c));
		client_close(c, SQLSTATE_ADMIN_SHUTDOWN, "pgcat restarted and this session's LISTEN registrations "
			     "could not be kept");
		return false;
	}
	/* It reads at the group's end (group_end), once its pool's
	 * connections are in and read: whatever it sent meanwhile (a
	 * Terminate, an UNLISTEN) then finds them there. */
	nc->held_for_group = true;
	io_suspend(&c->io, true);
	return true;
}

/* The pool's connections that came read from now on; those that did
 * not come are opened as usual. */
static void group_end(struct notify_pool *np)
{
	np->taking = false;
	for (int k = 0; k < np->n_shards; k++) {
		struct notify_listener *l = &np->listeners[k];
		if (l->awaited) {
			l->awaited = false;
			l->retry_at_us = 0;
			if (np->n_channels > 0)
				notify_listener_open(l);
		}
	}
	/* (After: reading may deliver, and its clients' ReadyForQuery go.) */
	read_again(np);
	/* Its clients that came read now (client_move_read left it to us). */
	struct worker *w = np->hub->w;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &np->clients) {
		struct notify_client *nc = LIST_OWNER(pos, struct notify_client, node);
		if (!nc->held_for_group)
			continue;
		struct client *c = nc->c;
		nc->held_for_group = false;
		io_suspend(&c->io, w->suspended);
		io_read_now(&c->io);
		if (c->state == CLIENT_IDLE && c->io.in && buf_len(c->io.in))
			client_process(c);
	}
}

bool notify_move_take(struct worker *w, uint8_t type, const uint8_t *rec, size_t len, const int *fds, size_t n_fds)
{
	bool one_socket = n_fds == 1;
	if ((type == 'W' || type == 'M') != one_socket) {
		for (size_t i = 0; i < n_fds; i++)
			close(fds[i]);
		log_error("handover: a record '%c' with %zu sockets", type, n_fds);
		return false;
	}
	switch (type) {
	case 'w':
		take_promise(w, rec, len);
		return false;
	case 'W':
		take_listener(w, rec, len, fds[0]);
		return false;
	case 'M':
		return take_member(w, rec, len, fds[0]);
	case 'g': {
		struct bytes_in r = { rec, len, 0, false };
		struct notify_pool *np = read_pool(w, &r, false);
		if (np)
			group_end(np);
		return false;
	}
	default:
		return false;
	}
}

void notify_move_take_end(struct worker *w)
{
	each_pool(w, group_end);
}
