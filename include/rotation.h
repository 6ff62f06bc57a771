/* SPDX-License-Identifier: MIT */
/*
 * rotation: the servers a transaction may go to (SPEC §4): bans of servers
 * that failed, and the roles health checks found. Routing (route.c) picks
 * among what this module says is in the rotation.
 */
#ifndef PGCAT_ROTATION_H
#define PGCAT_ROTATION_H

#include <stdbool.h>
#include <stddef.h>

struct pool;
struct srvpool;

/* Is sp out of the read rotation now (banned)? Asked for every candidate
 * of every routed transaction: cheap unless the shared table changed. */
bool rotation_is_banned(struct srvpool *sp);
/* A connect, login or health check of sp failed, or it was too slow: ban
 * it if it is a replica (and there is somewhere else to go). */
void rotation_server_failed(struct srvpool *sp, const char *reason);
/* Every read candidate of the shard is banned: clear its automatic bans
 * (a safety valve against false positives); admin bans stay. */
void rotation_clear_shard_bans(struct pool *p, int shard);
/* The servers of a shard (at most max, into out), in configuration order. */
size_t rotation_shard_servers(struct pool *p, int shard, struct srvpool **out, size_t max);

/* Should a health check of sp ask whether it is in recovery? */
bool rotation_wants_role_check(const struct srvpool *sp);
/* What a health check found. */
void rotation_role_result(struct srvpool *sp, bool in_recovery);
/* Writes may go there: a primary that is not in recovery, or an auto
 * server that was found not to be. */
bool rotation_takes_writes(const struct srvpool *sp);

#endif
