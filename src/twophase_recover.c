/* SPDX-License-Identifier: MIT */
/*
 * twophase_recover: the resolver of in-doubt transactions
 * (include/twophase_recover.h). A pass opens one connection per (pool,
 * shard primary), lists, finishes one gid at a time (COMMIT PREPARED and
 * ROLLBACK PREPARED cannot share a transaction block, so not one Query),
 * and closes. Connections are freed only from the timer, never inside
 * their own callbacks.
 */
#include "twophase_recover.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "bconn.h"
#include "config.h"
#include "context.h"
#include "grow.h"
#include "log.h"
#include "pool.h"
#include "proto.h"
#include "rotation.h"
#include "srvref.h"
#include "twophase.h"

static const struct bconn_profile recover_profile = {
	.application_name = "pgcat two-phase resolver",
	.refused = "login failed: ",
	/* A row is one gid or one setting; errors and login messages fit. */
	.max_message = 8192,
	.read_high = 65536,
};

/* How long one shard may take over its part of a pass (after the connect
 * timeout): listing and finishing are quick unless the server hangs. */
#define PASS_STEP_LIMIT_MS 10000u
/* A pass asked for by a kick starts this soon. */
#define KICK_DELAY_MS 500

enum rconn_state {
	RC_CONNECTING,   /* connect and login */
	RC_LISTING,      /* SHOW max_prepared_transactions; SELECT gid ... */
	RC_FINISHING,    /* one COMMIT/ROLLBACK PREPARED at a time */
	RC_DONE,         /* everything found was ended (or skipped) */
	RC_FAILED        /* lost, refused or timed out: the pass did not reach this shard */
};

struct found {
	char gid[TWOPHASE_GID_MAX];
	enum twophase_verdict verdict;
};

struct rconn {
	struct twophase_recover *r;
	struct bconn b;
	enum rconn_state state;
	uint64_t since_us;
	struct srvref at;        /* the shard's primary */
	int completes;           /* CommandCompletes of the listing */
	struct found *found;
	size_t n_found, cap_found, next;
};

struct twophase_recover {
	struct worker *w;
	struct twophase *tp;
	struct event *timer;
	struct rconn **conns;
	size_t n_conns, cap_conns;
	bool running;            /* a pass is under way */
	bool all_reached;        /* every shard of every pool has a primary to ask */
	bool kicked;             /* another pass once this one ends */
};

static void arm_ms(struct twophase_recover *r, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	evtimer_add(r->timer, &tv);
}

static void rc_set(struct rconn *c, enum rconn_state s)
{
	c->state = s;
	c->since_us = c->r->w->now_us;
	if (s == RC_DONE || s == RC_FAILED) {
		if (bconn_state(&c->b) != BCONN_CLOSED)
			bconn_close(&c->b, s == RC_DONE);
		arm_ms(c->r, 0);   /* the timer sees whether the pass is over */
	}
}

static void rc_fail(struct rconn *c, const char *why)
{
	if (c->state == RC_DONE || c->state == RC_FAILED)
		return;
	log_warning("two-phase resolver: pool %s, shard %d (%s:%d): %s", c->at.pool, c->at.shard, c->at.host, c->at.port, why);
	rc_set(c, RC_FAILED);
}

static void rc_next(struct rconn *c)
{
	while (c->next < c->n_found) {
		const struct found *f = &c->found[c->next];
		char sql[TWOPHASE_GID_MAX + 40];
		/* the gid parsed as pgcat's: digits and underscores, nothing to quote */
		snprintf(sql, sizeof sql, "%s PREPARED '%s'", f->verdict == TWOPHASE_COMMIT ? "COMMIT" : "ROLLBACK",
			 f->gid);
		log_info("two-phase resolver: pool %s, shard %d: %s (left in doubt)", c->at.pool, c->at.shard, sql);
		if (!bconn_query(&c->b, sql)) {
			rc_fail(c, "query too long");
			return;
		}
		rc_set(c, RC_FINISHING);
		return;
	}
	rc_set(c, RC_DONE);
}

static bool add_found(struct rconn *c, const char *gid, size_t len)
{
	struct twophase_gid g;
	char buf[TWOPHASE_GID_MAX];
	if (len >= sizeof buf)
		return true;   /* not one of pgcat's */
	memcpy(buf, gid, len);
	buf[len] = '\0';
	if (!twophase_gid_parse(buf, &g) || g.shard != c->at.shard)
		return true;
	enum twophase_verdict v = twophase_decide(c->r->tp, &g);
	if (v == TWOPHASE_SKIP)
		return true;
	if (!grow_for_one(&c->found, c->n_found, &c->cap_found, 8, sizeof *c->found))
		return false;
	struct found *f = &c->found[c->n_found++];
	memcpy(f->gid, buf, len + 1);
	f->verdict = v;
	return true;
}

/* ---- the connection's events ---- */

static void rc_ready(void *arg)
{
	struct rconn *c = arg;
	char sql[300];
	snprintf(sql, sizeof sql,
		 "SHOW max_prepared_transactions; "
		 "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND owner = current_user "
		 "AND gid LIKE 'pgcat\\_%d\\_%%'",
		 c->r->w->cfg->general.peer_id);
	if (!bconn_query(&c->b, sql)) {
		rc_fail(c, "query too long");
		return;
	}
	c->completes = 0;
	rc_set(c, RC_LISTING);
}

static bool rc_message(void *arg, uint8_t type, const uint8_t *body, size_t len)
{
	struct rconn *c = arg;
	if (c->state == RC_DONE || c->state == RC_FAILED)
		return true;
	switch (type) {
	case PqMsg_ErrorResponse: {
		struct proto_error_fields e;
		memset(&e, 0, sizeof e);
		const char *msg = proto_parse_error(body, len, &e) && e.message ? e.message : "server error";
		if (c->state == RC_FINISHING) {
			/* Ended meanwhile (42704): its own commit finished it between
			 * the listing and this; quietly. Refused otherwise: the next
			 * pass sees it again. */
			if (e.sqlstate && strcmp(e.sqlstate, "42704") == 0)
				log_debug("two-phase resolver: pool %s, shard %d: %s: ended meanwhile", c->at.pool, c->at.shard,
					  c->found[c->next].gid);
			else
				log_warning("two-phase resolver: pool %s, shard %d: %s: %s", c->at.pool, c->at.shard,
					    c->found[c->next].gid, msg);
			return true;
		}
		char why[300];
		snprintf(why, sizeof why, "listing prepared transactions failed: %s", msg);
		rc_fail(c, why);
		return true;
	}
	case PqMsg_DataRow: {
		const char *v;
		size_t vl;
		if (c->state != RC_LISTING || !proto_parse_datarow_first(body, len, &v, &vl) || !v)
			return true;
		if (c->completes == 0) {
			if (vl == 1 && v[0] == '0')
				log_error("two_phase_commit: pool %s, shard %d (%s:%d, database %s) has "
					  "max_prepared_transactions = 0: cross-shard writes of this pool fail at PREPARE "
					  "TRANSACTION and roll back; set it above 0 on that server",
					  c->at.pool, c->at.shard, c->at.host, c->at.port, c->at.database);
		} else if (!add_found(c, v, vl)) {
			rc_fail(c, "out of memory");
		}
		return true;
	}
	case PqMsg_CommandComplete:
		if (c->state == RC_LISTING)
			c->completes++;
		return true;
	case PqMsg_ReadyForQuery:
		if (c->state == RC_LISTING) {
			c->next = 0;
			rc_next(c);
		} else if (c->state == RC_FINISHING) {
			c->next++;
			rc_next(c);
		}
		return true;
	case PqMsg_RowDescription:
	case PqMsg_NoticeResponse:
		return true;
	default:
		return false;
	}
}

static void rc_down(void *arg, const char *why)
{
	struct rconn *c = arg;
	rc_fail(c, why);
}

static void rc_free(struct rconn *c)
{
	bconn_release(&c->b);
	free(c->found);
	srvref_clear(&c->at);
	free(c);
}

/* ---- a pass ---- */

static bool rc_start(struct twophase_recover *r, const struct pool *p, const struct srvpool *sp)
{
	if (!grow_for_one(&r->conns, r->n_conns, &r->cap_conns, 8, sizeof *r->conns))
		return false;
	struct rconn *c = calloc(1, sizeof *c);
	if (!c)
		return false;
	c->r = r;
	bconn_init(&c->b, r->w, rc_ready, rc_message, rc_down, c);
	if (!srvref_set(&c->at, p->name, sp->shard, sp->host, sp->port, sp->database)) {
		rc_free(c);
		return false;
	}
	r->conns[r->n_conns++] = c;
	c->state = RC_CONNECTING;
	c->since_us = r->w->now_us;
	if (!sp->resolved) {
		rc_fail(c, "no address yet");
		return true;
	}
	/* false: the down event ran (the connection failed), or out of memory */
	if (!auth_open_server_conn(&c->b, &recover_profile, p, sp, c->at.host, c->at.database))
		rc_fail(c, "could not connect");
	return true;
}

/* The primary a pass asks on shard s of p: the server writes go to (a
 * configured primary not found in recovery, or an auto server found not to
 * be), so a demoted primary is not asked to finish what it cannot. */
static const struct srvpool *shard_primary(const struct pool *p, int s)
{
	for (size_t i = 0; i < p->n_targets; i++) {
		const struct srvpool *sp = p->targets[i];
		if (sp->shard != s)
			continue;
		if (rotation_takes_writes(sp))
			return sp;
	}
	return NULL;
}

static void pass_start(struct twophase_recover *r)
{
	struct worker *w = r->w;
	r->running = true;
	r->all_reached = true;
	r->kicked = false;
	twophase_pass_begin(r->tp);
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (p->removed || !pool_first_of_name(w, true, p) || p->cpool->n_shards < 2)
			continue;
		for (int s = 0; s < (int)p->cpool->n_shards; s++) {
			const struct srvpool *sp = shard_primary(p, s);
			if (!sp || !rc_start(r, p, sp))
				r->all_reached = false;
		}
	}
}

/* The pass is over when every connection is: what was not reached makes
 * it partial (nothing is forgotten then). */
static bool pass_check(struct twophase_recover *r)
{
	const struct config_general *g = &r->w->cfg->general;
	for (size_t i = 0; i < r->n_conns; i++) {
		struct rconn *c = r->conns[i];
		uint64_t age_ms = (r->w->now_us - c->since_us) / 1000;
		if (c->state == RC_CONNECTING && age_ms > (uint64_t)g->connect_timeout)
			rc_fail(c, "connect or login timed out");
		else if ((c->state == RC_LISTING || c->state == RC_FINISHING) && age_ms > PASS_STEP_LIMIT_MS)
			rc_fail(c, "the server did not answer in time");
	}
	for (size_t i = 0; i < r->n_conns; i++)
		if (r->conns[i]->state != RC_DONE && r->conns[i]->state != RC_FAILED)
			return false;
	return true;
}

static void pass_end(struct twophase_recover *r)
{
	bool all = r->all_reached;
	for (size_t i = 0; i < r->n_conns; i++) {
		all = all && r->conns[i]->state == RC_DONE;
		rc_free(r->conns[i]);
	}
	r->n_conns = 0;
	twophase_pass_end(r->tp, all);
	r->running = false;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct twophase_recover *r = arg;
	struct worker *w = r->w;
	worker_update_clock(w);
	if (r->running) {
		if (!pass_check(r)) {
			arm_ms(r, 1000);   /* watch the timeouts */
			return;
		}
		pass_end(r);
		if (r->kicked) {
			arm_ms(r, KICK_DELAY_MS);
			return;
		}
	} else if (w->cfg->general.two_phase_commit || twophase_has_work(r->tp)) {
		pass_start(r);
		if (r->n_conns > 0) {
			arm_ms(r, 1000);
			return;
		}
		pass_end(r);
	}
	arm_ms(r, w->cfg->general.two_phase_recovery_interval);
}

struct twophase_recover *twophase_recover_new(struct worker *w, struct twophase *tp)
{
	struct twophase_recover *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->w = w;
	r->tp = tp;
	if (!(r->timer = evtimer_new(w->base, tick_cb, r))) {
		free(r);
		return NULL;
	}
	/* The first pass at once: what a crash left prepared is ended first. */
	arm_ms(r, 0);
	return r;
}

void twophase_recover_kick(struct twophase_recover *r)
{
	if (!r)
		return;
	if (r->running) {
		r->kicked = true;
		return;
	}
	arm_ms(r, KICK_DELAY_MS);
}

void twophase_recover_free(struct twophase_recover *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_conns; i++) {
		if (bconn_state(&r->conns[i]->b) != BCONN_CLOSED)
			bconn_close(&r->conns[i]->b, false);
		rc_free(r->conns[i]);
	}
	free(r->conns);
	if (r->timer)
		event_free(r->timer);
	free(r);
}
