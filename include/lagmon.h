/* SPDX-License-Identifier: MIT */
/*
 * lagmon: the replica lag monitor (SPEC §4). Every
 * replica_lag_check_interval ms it asks each shard's primary for its WAL
 * position and each replica for its replayed position, over connections of
 * its own (never pooled ones: a pooled connection is only checked when a
 * client happens to use it, so a replica nobody writes through would never
 * be measured). One monitor per instance: worker 0 runs it. It publishes
 * the lag of every server in the shared segment (SHOW SHARDS, /metrics)
 * and bans a replica over max_replica_lag until a measurement finds it
 * under the limit. It never routes, and it never blocks the loop.
 */
#ifndef PGCAT_LAGMON_H
#define PGCAT_LAGMON_H

#include "types.h"

struct lagmon;

/* Start the monitor of this worker (only worker 0 calls it). NULL when out
 * of memory; the worker then runs without one. */
struct lagmon *lagmon_new(struct worker *w) __attribute__((warn_unused_result));
/* Close its connections and free it (NULL is fine). */
void lagmon_free(struct lagmon *lm);

/* The reason text of its bans starts with this: the monitor lifts only
 * bans it set. */
#define LAGMON_BAN_REASON_PREFIX "replica lag "

#endif
