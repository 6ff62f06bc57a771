/* SPDX-License-Identifier: MIT */
/*
 * route_pick: which server of a shard takes a transaction of a client's
 * session, for a role (SPEC §4): the primary, or one of the replicas (and
 * the primary, with primary reads) not banned, at random or by least
 * outstanding connections; and the role itself, from a statement's
 * verdict (its hint, the parser's), the session's SET SERVER ROLE and the
 * pool's default_role. Used by route.c for a client's own requests and by
 * the fan-out for each shard's part of a cross-shard one.
 */
#ifndef PGCAT_ROUTE_PICK_H
#define PGCAT_ROUTE_PICK_H

#include <stdbool.h>
#include <stddef.h>

#include "route.h"
#include "router.h"

struct client;
struct srvpool;

/* The rules the parser works with for this pool: its sharded_tables split
 * into [schema.]table.column (on the stack: a reload may change them at any
 * time, and the cache fingerprints their contents anyway). */
#define ROUTE_MAX_TABLES 32
struct route_rules {
	struct router_rules r;
	struct router_table t[ROUTE_MAX_TABLES];
	char text[2048];
};

/* The rules of c's pool for the parser. */
void route_rules_build(const struct client *c, struct route_rules *out);
/* The verdict on sql: from the pool's cache (valid until the next call), or
 * into *local. */
const struct router_verdict *route_classify(const struct client *c, const struct route_rules *rr, const char *sql,
					    size_t len, struct router_verdict *local);
/* The role from a statement's verdict (v: NULL if not classified), the
 * session's SET SERVER ROLE and default_role; held: the transaction began
 * with the BEGIN pgcat held. *writes: it writes. */
enum router_role route_role_of(const struct client *c, const struct router_verdict *v, bool held, bool *writes);
/* One of the n servers of shard (all, n > 1) for role. *no_writer: a write
 * was asked and only a configured primary found in recovery is there. */
struct srvpool *route_choose_in_shard(struct client *c, struct srvpool **all, size_t n, int shard,
				      enum router_role role, bool *no_writer);
/* read_your_writes = lsn (SPEC §4): what route_ryw_filter found. */
struct route_ryw {
	bool marked;        /* c's reads on this shard wait for a position */
	bool all_reached;   /* every server of the shard has it: c's mark can go */
	bool resolved;      /* an unknown position now stands for lsn (the primary's, measured later) */
	uint64_t lsn;
	/* No replica known to have it, and some without a fresh figure: out
	 * holds those, to be asked directly whether they replayed ask
	 * (client_end.check_replayed); 0: nothing to ask. */
	uint64_t ask;
};
/* The servers of shard (all, n of them) a read of c may go to, in out
 * (room for n), their count returned: the primary, and the replicas whose
 * replayed position, as the lag monitor last measured it (not too long
 * ago), has reached the one c's reads wait for on that shard. If none
 * has, and may_ask, the replicas without a fresh figure instead, to be
 * asked (r->ask). Without a mark (or read_your_writes off), all of them. */
size_t route_ryw_filter(const struct client *c, struct srvpool **all, size_t n, int shard, bool may_ask,
			struct srvpool **out, struct route_ryw *r);
/* The server of shard `shard` for one shard's part of c's cross-shard
 * request (fanout.c), whose first statement there is sql: chosen as for a
 * transaction of c's session pinned to that shard (a hint in sql, SET
 * SERVER ROLE, the parser's verdict, default_role, primary reads, the
 * stickiness after a write), without c's held BEGIN. *no_writer: it
 * writes, and the shard's configured primary is in recovery with no other
 * to take writes. */
struct srvpool *route_pick_leg(struct client *c, const char *sql, size_t len, int shard, bool *no_writer);
/* A transaction routed to sp, counted by how its shard was chosen (SHOW
 * SHARDS' routed_* columns; enum route_via, route.h). */
void route_pick_count(struct srvpool *sp, enum route_via via);

#endif
