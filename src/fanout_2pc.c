/* SPDX-License-Identifier: MIT */
/*
 * fanout_2pc: the commit of a write split across shards when
 * two_phase_commit is on (SPEC §6, include/twophase.h). Instead of COMMIT
 * on every shard:
 *
 *   PHASE_PREPARE       PREPARE TRANSACTION '<gid>' on every shard
 *   (all prepared)      the decision is written to the log and synced (at
 *                       the end of the loop turn, with the turn's others)
 *   PHASE_PREPARED_END  COMMIT PREPARED on every shard; or, when a PREPARE
 *                       failed or the log could not be written, ROLLBACK
 *                       PREPARED where it succeeded (ROLLBACK elsewhere)
 *
 * then the kind's end of PHASE_END answers the client as after a plain
 * COMMIT or ROLLBACK. Once the decision is logged the transaction is
 * committed: a shard that fails its COMMIT PREPARED (lost, restarted)
 * keeps it prepared and the resolver (twophase_recover.c) commits it
 * there; the client gets its COMMIT. A crash before the log line leaves
 * prepared transactions that the resolver rolls back.
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <stdio.h>
#include <string.h>

#include "config.h"
#include "context.h"
#include "log.h"
#include "proto.h"
#include "twophase.h"
#include "twophase_recover.h"

static bool leg_live(const struct fanout_leg *leg)
{
	return leg->io_open && !leg->lost && !leg->too_big;
}

bool fanout_2pc_wanted(const struct fanout *fo)
{
	if (!fo->c->w->cfg->general.two_phase_commit || !fo->c->w->twophase || fo->txn_read_only)
		return false;
	int live = 0;
	for (int i = 0; i < fo->n_legs; i++)
		live += leg_live(&fo->legs[i]);
	return live >= 2;
}

/* verb, then the gid quoted when there is one (a gid is digits and
 * underscores: nothing to escape). */
static void put_query(struct fanout_leg *leg, const char *verb, const char *gid)
{
	char sql[TWOPHASE_GID_MAX + 40];
	int n = gid ? snprintf(sql, sizeof sql, "%s '%s'", verb, gid) : snprintf(sql, sizeof sql, "%s", verb);
	leg->ready_needed = 1;
	leg->want_copy_in = false;
	fanout_put_msg(fanout_leg_out(leg), PqMsg_Query, sql, (size_t)n + 1, NULL, 0);
}

static void prepared(struct fanout *fo);
static void ended(struct fanout *fo);

static void abandon(struct fanout *fo);

bool fanout_2pc_commit(struct fanout *fo)
{
	struct twophase *tp = fo->c->w->twophase;
	fo->xa_seq = twophase_begin(tp);
	if (!fo->xa_seq)
		return false;
	fo->on_free = abandon;
	fo->xa_committed = false;
	fo->xa_kind_done = fo->phase_done;
	fo->phase_done = prepared;
	fo->phase = PHASE_PREPARE;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		leg->prepared = false;
		if (!leg_live(leg))
			continue;
		char gid[TWOPHASE_GID_MAX];
		twophase_gid(tp, fo->xa_seq, leg->shard, gid, sizeof gid);
		/* its server stays for COMMIT PREPARED: checking one out of the
		 * pool again could wait behind clients that wait for this */
		leg->end.keep_linked = true;
		put_query(leg, "PREPARE TRANSACTION", gid);
	}
	fanout_begin_wait(fo);
	return true;
}

/* A shard's answer to PREPARE TRANSACTION: true when it prepared. A
 * transaction that had failed there answers ROLLBACK, without an error. */
static bool take_prepare(struct fanout *fo, struct fanout_leg *leg)
{
	struct fanout_walk w;
	const uint8_t *msg;
	size_t total;
	bool ok = false;
	fanout_walk_start(&w, leg);
	while (fanout_walk_next(&w, &msg, &total)) {
		if (msg[0] == PqMsg_ErrorResponse) {
			fanout_keep_msg(&fo->error, &fo->error_len, msg, total);
			ok = false;
		} else if (msg[0] == PqMsg_CommandComplete) {
			static const char tag[] = "PREPARE TRANSACTION";
			ok = total - 5 >= sizeof tag && memcmp(msg + 5, tag, sizeof tag) == 0;
			if (!ok) {
				char why[120];
				snprintf(why, sizeof why, "cross-shard write: shard %d rolled back at PREPARE TRANSACTION",
					 leg->shard);
				fanout_set_error(fo, "40001", why);
			}
		}
	}
	if (leg->lost || leg->too_big) {
		fanout_keep_leg_failure(leg, &fo->error, &fo->error_len);
		ok = false;
	}
	fanout_walk_done(&w, leg);
	return ok;
}

static void logged(void *arg, bool ok, const char *why);
static void finish(struct fanout *fo);

/* Every shard answered its PREPARE TRANSACTION: if all prepared, the
 * decision goes to the log (with the loop turn's others), else every
 * shard rolls back. */
static void prepared(struct fanout *fo)
{
	struct twophase *tp = fo->c->w->twophase;
	bool all = true;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		if (!leg->io_open)
			continue;   /* never used */
		leg->prepared = take_prepare(fo, leg);
		all = all && leg->prepared;
	}
	twophase_hook_reached(tp, TWOPHASE_HOOK_AFTER_PREPARE);
	if (all) {
		if (twophase_log_commit(tp, fo->xa_seq, logged, fo))
			return;   /* logged() goes on */
		fanout_set_error(fo, "53200", "cross-shard write: out of memory for its two-phase commit");
	}
	finish(fo);
}

static void logged(void *arg, bool ok, const char *why)
{
	struct fanout *fo = arg;
	if (ok) {
		fo->xa_committed = true;
		twophase_hook_reached(fo->c->w->twophase, TWOPHASE_HOOK_AFTER_LOG);
	} else {
		log_error("C-%llu: two-phase commit: %s; the transaction rolls back on every shard",
			  (unsigned long long)fo->c->id, why);
		char msg[300];
		snprintf(msg, sizeof msg, "cross-shard write: two-phase commit: %s", why);
		fanout_set_error(fo, "58030", msg);
	}
	finish(fo);
}

/* COMMIT PREPARED on every shard once the decision is logged; else
 * ROLLBACK PREPARED where a PREPARE succeeded, ROLLBACK elsewhere. */
static void finish(struct fanout *fo)
{
	struct twophase *tp = fo->c->w->twophase;
	fo->phase = PHASE_PREPARED_END;
	fo->phase_done = ended;
	bool one_only = fo->xa_committed && twophase_hook(tp) == TWOPHASE_HOOK_BETWEEN_COMMITS;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		if (!leg_live(leg))
			continue;
		char gid[TWOPHASE_GID_MAX];
		twophase_gid(tp, fo->xa_seq, leg->shard, gid, sizeof gid);
		if (!leg->prepared)
			put_query(leg, "ROLLBACK", NULL);   /* its PREPARE failed: nothing is left there */
		else if (!fo->xa_committed)
			put_query(leg, "ROLLBACK PREPARED", gid);
		else if (!one_only || i == 0) {
			put_query(leg, "COMMIT PREPARED", gid);
			fanout_ask_wal(fo, leg);   /* read_your_writes: where the commit ended */
		} else
			put_query(leg, "SELECT 1", NULL);   /* the test hook: this one is left to the resolver */
	}
	fanout_begin_wait(fo);
}

/* A shard's answer to COMMIT PREPARED or ROLLBACK PREPARED. false: it
 * may still hold the transaction prepared. */
static bool take_end(struct fanout *fo, struct fanout_leg *leg)
{
	struct fanout_walk w;
	const uint8_t *msg;
	size_t total;
	bool ok = !leg->lost && !leg->too_big;
	fanout_walk_start(&w, leg);
	while (fanout_walk_next(&w, &msg, &total)) {
		if (msg[0] != PqMsg_ErrorResponse)
			continue;
		struct proto_error_fields e;
		log_warning("C-%llu: two-phase commit: shard %d: %s PREPARED failed: %s; the resolver ends it",
			    (unsigned long long)fo->c->id, leg->shard, fo->xa_committed ? "COMMIT" : "ROLLBACK",
			    proto_parse_error(msg + 5, total - 5, &e) && e.message ? e.message : "error");
		ok = false;
	}
	fanout_walk_done(&w, leg);
	return ok;
}

/* Every shard ended its prepared transaction (or failed to). */
static void ended(struct fanout *fo)
{
	struct twophase *tp = fo->c->w->twophase;
	bool one_only = fo->xa_committed && twophase_hook(tp) == TWOPHASE_HOOK_BETWEEN_COMMITS;
	bool clean = true;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		if (!leg->io_open && !leg->prepared)
			continue;
		bool ok = take_end(fo, leg) && !(one_only && i > 0);
		if (leg->prepared && !ok) {
			clean = false;
			if (fo->xa_committed)
				log_warning("C-%llu: two-phase commit: shard %d did not confirm COMMIT PREPARED; the "
					    "transaction is committed and the resolver commits it there",
					    (unsigned long long)fo->c->id, leg->shard);
		}
	}
	twophase_hook_reached(tp, TWOPHASE_HOOK_BETWEEN_COMMITS);
	/* a PREPARE whose answer was lost may have happened: the resolver looks */
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].io_open && fo->legs[i].lost && !fo->legs[i].prepared)
			clean = false;
	twophase_end(tp, fo->xa_seq, fo->xa_committed, clean);
	if (!clean)
		twophase_recover_kick(fo->c->w->twophase_recover);
	fo->xa_seq = 0;
	fo->on_free = NULL;
	fo->phase = PHASE_END;
	fo->phase_done = fo->xa_kind_done;
	fo->phase_done(fo);   /* the kind's answer: every reply was taken here */
}

/* fo is freed before its prepared transactions were ended (its client
 * left): the resolver ends them, as the log says. */
static void abandon(struct fanout *fo)
{
	if (!fo->xa_seq)
		return;
	twophase_log_cancel(fo->c->w->twophase, fo->xa_seq);   /* (not logged yet: it rolls back) */
	twophase_end(fo->c->w->twophase, fo->xa_seq, fo->xa_committed, false);
	twophase_recover_kick(fo->c->w->twophase_recover);
	fo->xa_seq = 0;
}
