/* SPDX-License-Identifier: MIT */
/*
 * twophase_check: before a configuration with two_phase_commit = true is
 * used (at startup, or applied by a reload), ask the primary of every
 * shard of every sharded pool `SHOW max_prepared_transactions`. A shard
 * that answers 0 cannot PREPARE TRANSACTION: the configuration is refused
 * (pgcat does not start; the reload is not applied). A shard that cannot
 * be asked in time (down, DNS, login) only gets a warning: the resolver
 * (twophase_recover.c) asks it again on every pass and logs an error then.
 *
 * One connection per server of pgcat's own (bconn.h), as the pool's first
 * user logs in to servers, taken from the configuration being checked (a
 * reload's new one is not applied yet, so it has no pools). Servers of
 * role primary and auto are asked (which auto one is the primary is not
 * known yet; a standby's max_prepared_transactions cannot be below its
 * primary's, so a standby answering 0 means its primary has 0 too).
 * Everything is bounded by connect_timeout from the start.
 */
#ifndef PGCAT_TWOPHASE_CHECK_H
#define PGCAT_TWOPHASE_CHECK_H

#include <stdbool.h>
#include <stddef.h>

struct worker;
struct config;
struct twophase_check;

/* Does cfg need a check before it is used? Only with two_phase_commit on,
 * for the shards of pools with more than one shard that were not checked
 * with it on before: every one when old is NULL (startup) or had
 * two_phase_commit off; otherwise those old did not have (a new pool, a
 * new shard, another server or database). */
bool twophase_check_needed(const struct config *cfg, const struct config *old);

/* Called once, from the check's timer, when every server answered or gave
 * up: refused when one answered 0 (each logged as an error; the first one
 * is in twophase_check_error). The owner may free the check in it. */
typedef void (*twophase_check_done_fn)(struct twophase_check *chk, bool refused, void *arg);

/* Start checking what twophase_check_needed(cfg, old) names (what it needs
 * of cfg and old is copied). refusal (a literal: it is kept) says what a
 * 0 means, for the log ("pgcat does not start", "the reload is refused").
 * NULL: out of memory. */
struct twophase_check *twophase_check_start(struct worker *w, const struct config *cfg, const struct config *old,
					    const char *refusal, twophase_check_done_fn done, void *arg);
/* The first refusal, for an answer to an administrator ("" if none). */
const char *twophase_check_error(const struct twophase_check *chk);
/* Stop (closing what is open) and free; NULL is fine. */
void twophase_check_free(struct twophase_check *chk);

#endif
