/* SPDX-License-Identifier: MIT */
/*
 * lagmon: the replica lag monitor (SPEC §4, doc/replicas.md). One
 * connection of its own (bconn.c) per (pool, shard, server), logged in as
 * the pool's first user, that runs one query per interval. It is not a
 * room of the pool: its connections are counted in no pool, hand nothing
 * to clients, and are closed when their server leaves the config. What it
 * learns goes to the shared segment (lag per server, bans); routing reads
 * it from there like any other ban.
 */
#include "lagmon.h"

#include <event2/event.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "bconn.h"
#include "config.h"
#include "grow.h"
#include "log.h"
#include "pool.h"
#include "proto.h"
#include "shm.h"
#include "srvref.h"
#include "context.h"

static const struct bconn_profile lagmon_profile = {
	/* Set on every monitor connection, so that pg_stat_activity tells
	 * them from pooled ones. */
	.application_name = "pgcat lag monitor",
	.refused = "login failed: ",
	/* The largest message the monitor reads: its one row is short, and
	 * login messages (SCRAM, errors, parameters) are well under this. */
	.max_message = 8192,
	.read_high = 65536,
};

/* One query for every server, whatever it is: is it in recovery, its WAL
 * position (written on a primary, replayed on a replica), and on a replica
 * the age of the last transaction it replayed, in ms. */
static const char lagmon_query[] =
	"SELECT pg_is_in_recovery(), "
	"CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, "
	"CASE WHEN pg_is_in_recovery() THEN "
	"(extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)::int8 END";

/* Where a monitor connection is: its bconn's state, and once logged in
 * whether the measurement query is running. */
enum lagmon_conn_state {
	LAGMON_DOWN,          /* no socket; connect at the next tick */
	LAGMON_CONNECTING,    /* TCP connect under way */
	LAGMON_TLS_ANSWER,    /* SSLRequest sent, waiting for 'S' or 'N' */
	LAGMON_TLS_HANDSHAKE, /* TLS handshake under way */
	LAGMON_LOGIN,         /* startup sent; authentication */
	LAGMON_READY,         /* logged in, no query running */
	LAGMON_QUERY          /* the measurement query is running */
};

struct lagmon_conn {
	struct lagmon *lm;
	struct bconn b;               /* the login is the pool's server user's */
	bool querying;                /* the measurement query is running */
	uint64_t query_since_us;
	struct srvref at;             /* which server of which shard of which pool */
	enum server_role role;
	bool seen;                    /* still in the config at this tick */
	bool failing;                 /* a failure was logged; log the next success */
	/* This round: waiting for an answer (pending), and the answer. */
	bool pending;
	bool answered;
	bool in_recovery;
	uint64_t lsn;
	int64_t replay_ms;            /* -1: NULL (nothing replayed yet) */
};

struct lagmon {
	struct worker *w;
	struct event *timer;
	struct lagmon_conn **conns;
	size_t n_conns, cap_conns;
};

static enum lagmon_conn_state state_of(const struct lagmon_conn *c)
{
	switch (bconn_state(&c->b)) {
	case BCONN_CLOSED:
		return LAGMON_DOWN;
	case BCONN_CONNECTING:
		return LAGMON_CONNECTING;
	case BCONN_TLS_ANSWER:
		return LAGMON_TLS_ANSWER;
	case BCONN_TLS_HANDSHAKE:
		return LAGMON_TLS_HANDSHAKE;
	case BCONN_LOGIN:
		return LAGMON_LOGIN;
	case BCONN_READY:
		break;
	}
	return c->querying ? LAGMON_QUERY : LAGMON_READY;
}

/* When the connection entered its present step. */
static uint64_t state_since(const struct lagmon_conn *c)
{
	return state_of(c) == LAGMON_QUERY ? c->query_since_us : bconn_state_since(&c->b);
}

static void evaluate_group(struct lagmon *lm, const char *pool, int shard);
static void publish(struct lagmon *lm, const struct lagmon_conn *c, int64_t lag_bytes, int64_t lag_ms);
static void publish_wal(struct lagmon *lm, const struct lagmon_conn *c, uint64_t lsn, uint64_t at_us);

/* The connection is lost or given up: its lag is unknown this round (the
 * health checks ban servers that cannot be reached; this is not the place). */
static void conn_down(void *arg, const char *why)
{
	struct lagmon_conn *c = arg;
	if (bconn_state(&c->b) == BCONN_CLOSED)
		return;
	if (!c->failing)
		log_info("lag monitor: %s:%d (pool %s, shard %d): %s", c->at.host, c->at.port, c->at.pool, c->at.shard, why);
	c->failing = true;
	/* Terminate, to be polite, unless a query is running. */
	bconn_close(&c->b, !c->querying);
	c->querying = false;
	c->answered = false;
	publish(c->lm, c, -1, -1);   /* figures from before the loss are no longer true */
	publish_wal(c->lm, c, 0, 0);
	if (c->pending) {
		c->pending = false;
		evaluate_group(c->lm, c->at.pool, c->at.shard);
	}
}

static void conn_free(struct lagmon_conn *c)
{
	if (!c)
		return;
	if (bconn_state(&c->b) != BCONN_CLOSED) {
		c->failing = true;   /* no log line: the server left the config, or pgcat is stopping */
		c->pending = false;
		conn_down(c, "closed");
	}
	bconn_release(&c->b);
	srvref_clear(&c->at);
	free(c);
}

/* ---- the measurement ---- */

static bool parse_lsn(const char *s, uint64_t *out)
{
	unsigned int hi, lo;
	char tail;
	if (sscanf(s, "%X/%X%c", &hi, &lo, &tail) != 2)
		return false;
	*out = ((uint64_t)hi << 32) | (uint64_t)lo;
	return true;
}

/* What goes into every (pool, user) slot of one server: its lag, or its
 * WAL position. */
enum publish_what { PUBLISH_LAG, PUBLISH_WAL };
struct publish_figures {
	enum publish_what what;
	int64_t lag_bytes, lag_ms;
	uint64_t lsn, at_us;   /* at_us 0: unknown */
};

static void publish_figures(struct lagmon *lm, const struct lagmon_conn *c, const struct publish_figures *f)
{
	struct worker *w = lm->w;
	if (!w->shm)
		return;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (strcmp(p->name, c->at.pool) != 0)
			continue;
		for (size_t i = 0; i < p->n_targets; i++) {
			const struct srvpool *sp = p->targets[i];
			if (sp->shard != c->at.shard || sp->port != c->at.port || strcmp(sp->host, c->at.host) != 0)
				continue;
			switch (f->what) {
			case PUBLISH_LAG:
				shm_lag_set(w->shm, sp->shm_target, f->lag_bytes, f->lag_ms);
				break;
			case PUBLISH_WAL:
				shm_wal_set(w->shm, sp->shm_target, f->lsn, f->at_us);
				break;
			}
		}
	}
}

/* Write the lag of one server into every (pool, user) slot of it. */
static void publish(struct lagmon *lm, const struct lagmon_conn *c, int64_t lag_bytes, int64_t lag_ms)
{
	struct publish_figures f = { .what = PUBLISH_LAG, .lag_bytes = lag_bytes, .lag_ms = lag_ms };
	publish_figures(lm, c, &f);
}

/* Its WAL position as just answered, for read_your_writes = lsn (SPEC
 * §4): published at once, not at the end of the round, and dated by when
 * the query was sent (the position was read after that: the date can only
 * make it look older than it is). at_us 0: unknown from now on. */
static void publish_wal(struct lagmon *lm, const struct lagmon_conn *c, uint64_t lsn, uint64_t at_us)
{
	struct publish_figures f = { .what = PUBLISH_WAL, .lsn = lsn, .at_us = at_us };
	publish_figures(lm, c, &f);
}

/* max_replica_lag: ban a replica over it, lift the monitor's ban once a
 * measurement finds it under (or the limit was turned off). */
static void apply_limit(struct lagmon *lm, const struct lagmon_conn *c, int64_t max_lag, int64_t lag_bytes)
{
	struct worker *w = lm->w;
	if (!w->shm)
		return;
	int64_t now = (int64_t)time(NULL);
	if (max_lag > 0 && lag_bytes > max_lag) {
		char why[96];
		snprintf(why, sizeof why, LAGMON_BAN_REASON_PREFIX "%" PRId64 " bytes", lag_bytes);
		/* Renewed at every measurement: the ban must outlive the gap to
		 * the next one, whatever ban_time says. */
		int64_t secs = w->cfg->general.ban_time > 0 ? w->cfg->general.ban_time : 60;
		int64_t gap = (int64_t)w->cfg->general.replica_lag_check_interval * 3 / 1000 + 1;
		if (secs < gap)
			secs = gap;
		if (secs > INT_MAX)
			secs = INT_MAX;
		bool was_banned = false;
		if (!shm_ban_set_auto(w->shm, c->at.host, c->at.port, now, (int)secs, why, &was_banned))
			log_warning("ban table full: %s:%d not banned (%s)", c->at.host, c->at.port, why);
		else if (!was_banned) {
			struct log_field f[] = { { "host", c->at.host, 0 }, { "port", NULL, c->at.port },
						 { "seconds", NULL, secs }, { "reason", why, 0 }, { "source", "auto", 0 } };
			log_event(LOG_LEVEL_WARNING, "server_ban", f, sizeof f / sizeof *f, NULL,
				  "banning %s:%d: %s > max_replica_lag %" PRId64, c->at.host, c->at.port, why, max_lag);
		}
		return;
	}
	if (lag_bytes >= 0 && shm_ban_clear_auto(w->shm, c->at.host, c->at.port, now, LAGMON_BAN_REASON_PREFIX)) {
		struct log_field f[] = { { "host", c->at.host, 0 }, { "port", NULL, c->at.port },
					 { "reason", "replica lag within max_replica_lag", 0 }, { "source", "auto", 0 } };
		log_event(LOG_LEVEL_INFO, "server_unban", f, sizeof f / sizeof *f, NULL,
			  "unbanning %s:%d: replica lag %" PRId64 " bytes is within max_replica_lag %" PRId64, c->at.host,
			  c->at.port, lag_bytes, max_lag);
	}
}

/* A round of a (pool, shard) is over (every server answered or failed,
 * or the next tick came): lag = the primary's position - the replica's. */
static void evaluate_group(struct lagmon *lm, const char *pool, int shard)
{
	const struct lagmon_conn *primary = NULL;
	for (size_t i = 0; i < lm->n_conns; i++) {
		const struct lagmon_conn *c = lm->conns[i];
		if (c->at.shard != shard || strcmp(c->at.pool, pool) != 0)
			continue;
		if (c->pending)
			return;   /* not over yet */
		/* The primary is the server that is not in recovery; a replica
		 * that was promoted but not yet reconfigured does not count. */
		if (c->answered && !c->in_recovery && c->role != SERVER_ROLE_REPLICA &&
		    (!primary || (primary->role != SERVER_ROLE_PRIMARY && c->role == SERVER_ROLE_PRIMARY)))
			primary = c;
	}
	const struct config_pool *cp = config_find_pool(lm->w->cfg, pool);
	int64_t max_lag = cp ? cp->max_replica_lag : 0;
	for (size_t i = 0; i < lm->n_conns; i++) {
		struct lagmon_conn *c = lm->conns[i];
		if (c->at.shard != shard || strcmp(c->at.pool, pool) != 0)
			continue;
		int64_t lag_bytes = -1, lag_ms = -1;
		if (c->answered && c->in_recovery && primary) {
			uint64_t d = primary->lsn > c->lsn ? primary->lsn - c->lsn : 0;
			lag_bytes = d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
			/* The age of the last replayed transaction grows while the
			 * primary is idle; a replica that has replayed everything
			 * does not lag, whatever that age. */
			lag_ms = lag_bytes == 0 ? 0 : c->replay_ms;
		}
		publish(lm, c, lag_bytes, lag_ms);
		if (c->answered && c->in_recovery)
			apply_limit(lm, c, max_lag, lag_bytes);
		c->answered = false;
	}
}

/* The row of the measurement query: 3 text columns. */
static bool read_row(struct lagmon_conn *c, const uint8_t *body, size_t len)
{
	char vals[3][32];
	bool null[3];
	if (len < 2 || (body[0] << 8 | body[1]) != 3)
		return false;
	size_t off = 2;
	for (int k = 0; k < 3; k++) {
		if (len - off < 4)
			return false;
		int32_t l = (int32_t)proto_get_u32(body + off);
		off += 4;
		null[k] = l < 0;
		vals[k][0] = 0;
		if (l < 0)
			continue;
		if ((size_t)l > len - off || (size_t)l >= sizeof vals[k])
			return false;
		memcpy(vals[k], body + off, (size_t)l);
		vals[k][l] = 0;
		off += (size_t)l;
	}
	if (null[0] || null[1] || !parse_lsn(vals[1], &c->lsn))
		return false;
	c->in_recovery = vals[0][0] == 't';
	c->replay_ms = -1;
	if (!null[2]) {
		char *end;
		long long v = strtoll(vals[2], &end, 10);
		if (*end == 0 && end != vals[2])
			c->replay_ms = v < 0 ? 0 : v;
	}
	return true;
}

static void send_query(struct lagmon_conn *c)
{
	if (!bconn_query(&c->b, lagmon_query)) {
		conn_down(c, "query too long");
		return;
	}
	c->querying = true;
	c->query_since_us = c->lm->w->now_us;
}

/* ---- the connection's events ---- */

static void conn_ready(void *arg)
{
	struct lagmon_conn *c = arg;
	if (c->failing)
		log_info("lag monitor: %s:%d (pool %s, shard %d): connected", c->at.host, c->at.port, c->at.pool, c->at.shard);
	c->failing = false;
	if (c->pending)
		send_query(c);   /* this round's measurement */
}

static bool conn_message(void *arg, uint8_t type, const uint8_t *body, size_t len)
{
	struct lagmon_conn *c = arg;
	switch (type) {
	case PqMsg_ErrorResponse: {
		struct proto_error_fields e;
		char msg[300];
		snprintf(msg, sizeof msg, "query failed: %s",
			 proto_parse_error(body, len, &e) && e.message ? e.message : "server error");
		/* A failed query leaves the connection usable, but a server
		 * that cannot answer it (not PostgreSQL >= 10?) will not
		 * later: give up on it until the next tick. */
		conn_down(c, msg);
		return true;
	}
	case PqMsg_DataRow:
		if (c->querying && c->pending) {
			c->answered = read_row(c, body, len);
			if (c->answered)
				publish_wal(c->lm, c, c->lsn, c->query_since_us ? c->query_since_us : 1);
		}
		return true;
	case PqMsg_ReadyForQuery:
		if (c->querying) {
			c->querying = false;
			if (c->pending) {
				c->pending = false;
				evaluate_group(c->lm, c->at.pool, c->at.shard);
			}
		}
		return true;
	case PqMsg_RowDescription:
	case PqMsg_CommandComplete:
		return true;
	default:
		return false;
	}
}

/* ---- the timer ---- */

static bool conn_start(struct lagmon_conn *c, const struct pool *p, const struct srvpool *sp)
{
	return auth_open_server_conn(&c->b, &lagmon_profile, p, sp, c->at.host, c->at.database);
}

static struct lagmon_conn *find_or_add(struct lagmon *lm, const struct pool *p, const struct srvpool *sp)
{
	for (size_t i = 0; i < lm->n_conns; i++) {
		struct lagmon_conn *c = lm->conns[i];
		if (srvref_is(&c->at, p->name, sp->shard, sp->host, sp->port, sp->database))
			return c;
	}
	if (!grow_for_one(&lm->conns, lm->n_conns, &lm->cap_conns, 8, sizeof *lm->conns))
		return NULL;
	struct lagmon_conn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->lm = lm;
	bconn_init(&c->b, lm->w, conn_ready, conn_message, conn_down, c);
	if (!srvref_set(&c->at, p->name, sp->shard, sp->host, sp->port, sp->database)) {
		conn_free(c);
		return NULL;
	}
	lm->conns[lm->n_conns++] = c;
	return c;
}

static void conn_tick(struct lagmon_conn *c, const struct pool *p, const struct srvpool *sp)
{
	struct worker *w = c->lm->w;
	const struct config_general *g = &w->cfg->general;
	uint64_t age_ms = (w->now_us - state_since(c)) / 1000;
	switch (state_of(c)) {
	case LAGMON_CONNECTING:
	case LAGMON_TLS_ANSWER:
	case LAGMON_TLS_HANDSHAKE:
	case LAGMON_LOGIN:
		if (age_ms > (uint64_t)g->connect_timeout)
			conn_down(c, "connect or login timed out");
		break;
	case LAGMON_QUERY: {
		uint64_t limit = (uint64_t)g->healthcheck_timeout;
		if (limit < (uint64_t)g->replica_lag_check_interval)
			limit = (uint64_t)g->replica_lag_check_interval;
		if (age_ms > limit)
			conn_down(c, "the measurement timed out");
		break;
	}
	case LAGMON_DOWN:
	case LAGMON_READY:
		break;
	}
	c->role = sp->role;
	c->answered = false;
	switch (state_of(c)) {
	case LAGMON_READY:
		c->pending = true;
		send_query(c);
		break;
	case LAGMON_DOWN:
		if (!sp->resolved)
			break;   /* DNS has no address yet: next tick */
		c->pending = true;
		if (!conn_start(c, p, sp))
			c->pending = false;
		break;
	case LAGMON_CONNECTING:
	case LAGMON_TLS_ANSWER:
	case LAGMON_TLS_HANDSHAKE:
	case LAGMON_LOGIN:
		c->pending = true;   /* measured once logged in */
		break;
	case LAGMON_QUERY:
		break;               /* still running (under the limit): its answer counts for this round */
	}
}

static bool pool_monitored(const struct pool *p)
{
	/* Servers that are only alternatives to each other (no primary, the
	 * parser off, as a pgbouncer.ini host list): no lag means anything to
	 * routing, and no lag limit asks for one; the monitor would only add
	 * connections to servers that PgBouncer's users counted without it. */
	const struct config_pool *cp = p->cpool;
	bool has_primary = false;
	for (size_t i = 0; i < p->n_targets; i++)
		has_primary |= p->targets[i]->role == SERVER_ROLE_PRIMARY;
	if (!has_primary && !cp->query_parser_enabled && cp->max_replica_lag <= 0 &&
	    cp->read_your_writes != READ_YOUR_WRITES_LSN)
		return false;
	/* A shard of one server has no replica to measure. */
	for (size_t i = 0; i < p->n_targets; i++)
		for (size_t k = i + 1; k < p->n_targets; k++)
			if (p->targets[i]->shard == p->targets[k]->shard)
				return true;
	return false;
}

static void arm(struct lagmon *lm)
{
	int ms = lm->w->cfg->general.replica_lag_check_interval;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	evtimer_add(lm->timer, &tv);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct lagmon *lm = arg;
	struct worker *w = lm->w;
	worker_update_clock(w);
	/* The last round's stragglers: their lag is unknown. */
	for (size_t i = 0; i < lm->n_conns; i++) {
		struct lagmon_conn *c = lm->conns[i];
		if (c->pending && state_of(c) != LAGMON_QUERY) {
			c->pending = false;
			evaluate_group(lm, c->at.pool, c->at.shard);
		}
		c->seen = false;
	}
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (p->removed || !pool_first_of_name(w, true, p) || !pool_monitored(p))
			continue;
		for (size_t i = 0; i < p->n_targets; i++) {
			struct lagmon_conn *c = find_or_add(lm, p, p->targets[i]);
			if (!c) {
				log_warning("lag monitor: out of memory");
				continue;
			}
			c->seen = true;
			conn_tick(c, p, p->targets[i]);
		}
	}
	/* Servers that left the config: their connections go. */
	size_t k = 0;
	for (size_t i = 0; i < lm->n_conns; i++) {
		if (lm->conns[i]->seen)
			lm->conns[k++] = lm->conns[i];
		else
			conn_free(lm->conns[i]);
	}
	lm->n_conns = k;
	arm(lm);
}

struct lagmon *lagmon_new(struct worker *w)
{
	struct lagmon *lm = calloc(1, sizeof *lm);
	if (!lm)
		return NULL;
	lm->w = w;
	if (!(lm->timer = evtimer_new(w->base, tick_cb, lm))) {
		free(lm);
		return NULL;
	}
	/* The first round at once: lag is known from the start. */
	struct timeval now = { 0, 0 };
	evtimer_add(lm->timer, &now);
	return lm;
}

void lagmon_free(struct lagmon *lm)
{
	if (!lm)
		return;
	for (size_t i = 0; i < lm->n_conns; i++)
		conn_free(lm->conns[i]);
	free(lm->conns);
	if (lm->timer)
		event_free(lm->timer);
	free(lm);
}
