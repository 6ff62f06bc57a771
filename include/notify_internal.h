/* SPDX-License-Identifier: MIT */
/*
 * notify_internal: the data of notify.c (the hub, its pools' listening
 * connections, channels and clients), shared with notify_move.c, which
 * hands them to the process that takes this one's place (-R). No other
 * module reads these.
 */
#ifndef PGCAT_NOTIFY_INTERNAL_H
#define PGCAT_NOTIFY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bconn.h"
#include "list.h"
#include "notify.h"

/* How the listening connections log in (application_name, limits). */
extern const struct bconn_profile notify_listener_profile;

/* One per (pool, shard) and worker. */
struct notify_listener {
	struct bconn b;
	struct notify_pool *np;
	int shard;
	char *host, *database;        /* owned: a reload may drop the server's config */
	int port;
	/* Commands sent (LISTEN, UNLISTEN, the empty query of a barrier) and
	 * answered (ReadyForQuery), in order: a command is done once
	 * done_seq reaches its number. */
	uint64_t sent_seq, done_seq;
	uint64_t retry_at_us;         /* down: connect again from then */
	uint64_t oldest_sent_us;      /* when the first command unanswered went */
	bool failing;                 /* a failure was logged; log the recovery */
	/* New side of a takeover: the old process's connection is on its way
	 * (notify_move.c): none is opened meanwhile, and its clients wait
	 * for it as for one logging in. */
	bool awaited;
};

struct notify_channel {
	char name[NOTIFY_CHANNEL_MAX + 1];
	struct notify_client **clients;
	uint32_t n_clients, cap_clients;
	/* Per shard: the number of its LISTEN on that shard's connection
	 * (0: not sent there since the connection was made). */
	uint64_t listen_seq[];
};

/* A pool's listening state on this worker. */
struct notify_pool {
	struct list_node node;        /* hub->pools */
	struct notify_hub *hub;
	struct pool *pool;
	int n_shards;
	struct notify_channel **channels;
	size_t n_channels, cap_channels;
	struct list_node clients;     /* struct notify_client: every one of the pool's */
	struct notify_listener *listeners;   /* n_shards */
	/* Old side of a takeover: the new process was told that this pool's
	 * listening connections will not come (notify_move.c). */
	bool move_given_up;
	/* Its group's move is under way (notify_move.c): on the new side
	 * between 'w' or 'W' and the group's end, on the old between the
	 * promise and the end: kept while it has no client. */
	bool taking;
	/* Old side: since when its members are held together, waiting for
	 * what they have in flight (0: they are not); not before this again
	 * (a group that did not come together in time is let go a while). */
	uint64_t gathering_since_us, gather_again_us;
};

struct notify_hub {
	struct worker *w;
	struct list_node pools;
	struct event *timer;
};

/* What a client deferred to its transaction's commit. */
struct notify_op {
	bool listen;
	bool all;                     /* UNLISTEN * */
	char channel[NOTIFY_CHANNEL_MAX + 1];
};

struct notify_client {
	struct client *c;
	struct notify_pool *np;
	struct list_node node;        /* np->clients */
	struct notify_channel **channels;
	uint32_t n_channels, cap_channels;
	struct notify_op *ops;
	uint32_t n_ops, cap_ops;
	struct buf *queue;       /* due after the client's transaction */
	uint64_t *barrier;            /* per shard: the command to wait for; 0 none */
	char held_status;             /* the ReadyForQuery held; 0: none */
	bool dropped_logged;
	/* New side: taken over, not reading until its group's end. */
	bool held_for_group;
	struct notify_stmts stmts;
};

/* The worker's hub and a pool's state in it, made on first use (NULL: out
 * of memory). */
struct notify_hub *notify_hub_get(struct worker *w);
struct notify_pool *notify_pool_get(struct notify_hub *hub, struct pool *p);
/* The pool's state goes, its listening connections closed (with a
 * Terminate: those still open are this process's). Done by the hub's
 * timer once the pool has no listening client left, never from a
 * listening connection's own event (whose bconn is in it). */
void notify_pool_free(struct notify_pool *np);
/* Connect l to its shard's primary now. */
void notify_listener_open(struct notify_listener *l);
/* l is logged in (or was handed over): it LISTENs to every channel of its
 * pool, and the clients waiting for that are looked at again. */
void notify_listener_ready(struct notify_listener *l);

#endif
