/* SPDX-License-Identifier: MIT */
/*
 * twophase_recover: the resolver of in-doubt transactions (SPEC §6
 * two_phase_commit). At start, after a reload, every
 * two_phase_recovery_interval and soon after a cross-shard commit left
 * something prepared, it connects to the primary of every shard of every
 * pool (as the pool's server user, outside the pools), lists the prepared
 * transactions of that database and user whose gid is this instance's
 * (pgcat_<peer_id>_...), and ends each as twophase_decide says: COMMIT
 * PREPARED if its decision is logged, ROLLBACK PREPARED if not, nothing
 * if it is still under way in a live process. It also reads
 * max_prepared_transactions and logs an error for a shard where it is 0
 * (a cross-shard write there fails at PREPARE TRANSACTION and rolls back).
 */
#ifndef PGCAT_TWOPHASE_RECOVER_H
#define PGCAT_TWOPHASE_RECOVER_H

struct worker;
struct twophase;
struct twophase_recover;

/* The worker's resolver; its first pass runs at once when two_phase_commit
 * is on. NULL: out of memory. */
struct twophase_recover *twophase_recover_new(struct worker *w, struct twophase *tp);
void twophase_recover_free(struct twophase_recover *r);
/* A pass soon (a commit left work behind, or the configuration changed). */
void twophase_recover_kick(struct twophase_recover *r);

#endif
