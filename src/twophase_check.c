/* SPDX-License-Identifier: MIT */
/*
 * twophase_check: max_prepared_transactions of every shard before a
 * configuration with two_phase_commit is used (include/twophase_check.h).
 * One connection per server asked; a timer watches the deadline and the
 * host names still being resolved, and ends the check. Connections are
 * closed in their callbacks but freed only from the timer or by the owner.
 */
#include "twophase_check.h"

#include <event2/event.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "bconn.h"
#include "config.h"
#include "context.h"
#include "dns.h"
#include "grow.h"
#include "log.h"
#include "proto.h"
#include "srvref.h"

static const struct bconn_profile check_profile = {
	.application_name = "pgcat two-phase check",
	.refused = "login failed: ",
	/* One short setting, errors and login messages. */
	.max_message = 8192,
	.read_high = 65536,
};

/* How often the timer looks at host names being resolved and the deadline. */
#define TICK_MS 100

enum tc_state {
	TC_RESOLVING,   /* a host name: waiting for the worker's DNS cache */
	TC_CONNECTING,  /* connect and login */
	TC_ASKING,      /* SHOW max_prepared_transactions sent */
	TC_ENABLED,     /* answered above 0 */
	TC_DISABLED,    /* answered 0: the configuration is refused */
	TC_FAILED       /* not asked in time (down, login, DNS): a warning */
};

struct tc_target {
	struct twophase_check *chk;
	struct bconn b;
	enum tc_state state;
	/* Copies: a reload may free the configuration they come from while
	 * the check runs (one during the startup check, say). */
	struct srvref at;
	char *user, *password;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	bool answered;             /* a DataRow came */
	bool zero;                 /* ... and it said 0 */
};

struct twophase_check {
	struct worker *w;
	struct event *timer;
	struct tc_target **targets;
	size_t n_targets, cap_targets;
	uint64_t deadline_us;
	const char *refusal;
	twophase_check_done_fn done;
	void *arg;
	bool finished;             /* done was called */
	char error[512];           /* the first refusal */
};

static bool tc_terminal(const struct tc_target *t)
{
	return t->state == TC_ENABLED || t->state == TC_DISABLED || t->state == TC_FAILED;
}

static void tc_end(struct tc_target *t, enum tc_state s)
{
	if (tc_terminal(t))
		return;
	t->state = s;
	if (bconn_state(&t->b) != BCONN_CLOSED)
		bconn_close(&t->b, s != TC_FAILED);
	/* The timer sees whether the check is over (not from here: this may
	 * run inside the connection's own callback). */
	struct timeval now = { 0, 0 };
	evtimer_add(t->chk->timer, &now);
}

static void tc_fail(struct tc_target *t, const char *why)
{
	if (tc_terminal(t))
		return;
	log_warning("two_phase_commit: pool %s, shard %d (%s:%d, database %s): max_prepared_transactions could not "
		    "be checked (%s); going on, the two-phase resolver asks again on its next pass",
		    t->at.pool, t->at.shard, t->at.host, t->at.port, t->at.database, why);
	tc_end(t, TC_FAILED);
}

/* ---- the connection's events ---- */

static void tc_ready(void *arg)
{
	struct tc_target *t = arg;
	if (!bconn_query(&t->b, "SHOW max_prepared_transactions")) {
		tc_fail(t, "query too long");
		return;
	}
	t->state = TC_ASKING;
}

static bool tc_message(void *arg, uint8_t type, const uint8_t *body, size_t len)
{
	struct tc_target *t = arg;
	if (tc_terminal(t))
		return true;
	switch (type) {
	case PqMsg_ErrorResponse: {
		struct proto_error_fields e;
		memset(&e, 0, sizeof e);
		char why[300];
		snprintf(why, sizeof why, "the server answered: %s",
			 proto_parse_error(body, len, &e) && e.message ? e.message : "an error");
		tc_fail(t, why);
		return true;
	}
	case PqMsg_DataRow: {
		const char *v;
		size_t vl;
		if (t->state == TC_ASKING && !t->answered && proto_parse_datarow_first(body, len, &v, &vl) && v) {
			t->answered = true;
			t->zero = vl == 1 && v[0] == '0';
		}
		return true;
	}
	case PqMsg_ReadyForQuery:
		if (t->state != TC_ASKING)
			return true;
		if (!t->answered) {
			tc_fail(t, "no answer to SHOW max_prepared_transactions");
			return true;
		}
		if (t->zero) {
			char msg[sizeof t->chk->error];
			snprintf(msg, sizeof msg,
				 "two_phase_commit: pool %s, shard %d (%s:%d, database %s) has max_prepared_transactions = 0, "
				 "so it cannot PREPARE TRANSACTION; %s. Set max_prepared_transactions above 0 on that "
				 "server (and restart it), or set two_phase_commit = false",
				 t->at.pool, t->at.shard, t->at.host, t->at.port, t->at.database, t->chk->refusal);
			log_error("%s", msg);
			if (!t->chk->error[0])
				memcpy(t->chk->error, msg, sizeof msg);
			tc_end(t, TC_DISABLED);
		} else {
			log_debug("two_phase_commit: pool %s, shard %d (%s:%d): max_prepared_transactions is above 0",
				  t->at.pool, t->at.shard, t->at.host, t->at.port);
			tc_end(t, TC_ENABLED);
		}
		return true;
	case PqMsg_RowDescription:
	case PqMsg_CommandComplete:
	case PqMsg_NoticeResponse:
		return true;
	default:
		return false;
	}
}

static void tc_down(void *arg, const char *why)
{
	tc_fail(arg, why);
}

static void tc_connect(struct tc_target *t)
{
	t->state = TC_CONNECTING;
	if (!bconn_set_login(&t->b, t->user, t->password, NULL, NULL)) {
		tc_fail(t, "out of memory");
		return;
	}
	/* false: the down event ran (it is failed already) */
	(void)bconn_open(&t->b, &check_profile, t->at.host, t->at.port, (const struct sockaddr *)&t->addr, t->addrlen,
			 t->at.database);
}

/* A host name: the worker's DNS cache (which starts the lookup). */
static void tc_resolve(struct tc_target *t)
{
	struct worker *w = t->chk->w;
	const struct dns_entry *e = dns_lookup(w->dns, t->at.host, w->cfg->general.dns_max_ttl);
	if (!e) {
		tc_fail(t, "out of memory");
		return;
	}
	if (e->state == DNS_FAILED) {
		char why[200];
		snprintf(why, sizeof why, "cannot resolve %s: %s", t->at.host, e->error);
		tc_fail(t, why);
		return;
	}
	if (e->state != DNS_OK || e->n_addrs == 0)
		return;   /* the timer looks again */
	memcpy(&t->addr, &e->addrs[0], sizeof t->addr);
	t->addrlen = e->addrlens[0];
	if (t->addr.ss_family == AF_INET)
		((struct sockaddr_in *)&t->addr)->sin_port = htons((uint16_t)t->at.port);
	else if (t->addr.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&t->addr)->sin6_port = htons((uint16_t)t->at.port);
	tc_connect(t);
}

/* ---- which servers ---- */

/* Was (pool, shard, server) part of old with two_phase_commit on? Then it
 * was checked when old was taken into use (or warned about then). */
static bool checked_before(const struct config *old, const struct config_pool *cp, const struct config_shard *sh,
			   const struct config_server *sv)
{
	if (!old || !old->general.two_phase_commit)
		return false;
	const struct config_pool *op = config_find_pool(old, cp->name);
	if (!op || op->n_shards < 2)
		return false;
	for (size_t i = 0; i < op->n_shards; i++) {
		const struct config_shard *os = &op->shards[i];
		if (os->index != sh->index || strcmp(os->database, sh->database) != 0)
			continue;
		for (size_t j = 0; j < os->n_servers; j++)
			if (os->servers[j].port == sv->port && strcmp(os->servers[j].host, sv->host) == 0 &&
			    os->servers[j].role != SERVER_ROLE_REPLICA)
				return true;
	}
	return false;
}

/* Calls visit for every server cfg needs asked; false if visit did. */
static bool each_target(const struct config *cfg, const struct config *old,
			bool (*visit)(void *arg, const struct config_pool *cp, const struct config_shard *sh,
				      const struct config_server *sv),
			void *arg)
{
	if (!cfg->general.two_phase_commit)
		return true;
	for (size_t i = 0; i < cfg->n_pools; i++) {
		const struct config_pool *cp = &cfg->pools[i];
		if (cp->n_shards < 2)
			continue;   /* nothing to commit in two phases */
		for (size_t s = 0; s < cp->n_shards; s++) {
			const struct config_shard *sh = &cp->shards[s];
			for (size_t j = 0; j < sh->n_servers; j++) {
				const struct config_server *sv = &sh->servers[j];
				if (sv->role == SERVER_ROLE_REPLICA || checked_before(old, cp, sh, sv))
					continue;
				if (!visit(arg, cp, sh, sv))
					return false;
			}
		}
	}
	return true;
}

static bool visit_any(void *arg, const struct config_pool *cp, const struct config_shard *sh,
		      const struct config_server *sv)
{
	(void)arg;
	(void)cp;
	(void)sh;
	(void)sv;
	return false;   /* one is enough: stop */
}

bool twophase_check_needed(const struct config *cfg, const struct config *old)
{
	return cfg && !each_target(cfg, old, visit_any, NULL);
}

static bool visit_add(void *arg, const struct config_pool *cp, const struct config_shard *sh,
		      const struct config_server *sv)
{
	struct twophase_check *chk = arg;
	if (!grow_for_one(&chk->targets, chk->n_targets, &chk->cap_targets, 8, sizeof *chk->targets))
		return false;
	struct tc_target *t = calloc(1, sizeof *t);
	if (!t)
		return false;
	t->chk = chk;
	bconn_init(&t->b, chk->w, tc_ready, tc_message, tc_down, t);
	chk->targets[chk->n_targets++] = t;   /* (freed with the check from here on) */
	if (!srvref_set(&t->at, cp->name, sh->index, sv->host, sv->port, sh->database))
		return false;
	/* The pool's first user, as its servers are logged in to. */
	if (cp->n_users > 0) {
		const struct config_user *u = &cp->users[0];
		const char *user = config_user_server_name(cp, u);
		const char *pw = config_user_server_password(cp, u);
		if (!(t->user = strdup(user)) || (pw && !(t->password = strdup(pw))))
			return false;
	}
	return true;
}

/* ---- the check ---- */

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct twophase_check *chk = arg;
	struct worker *w = chk->w;
	if (chk->finished)
		return;
	worker_update_clock(w);
	bool late = w->now_us >= chk->deadline_us;
	bool over = true, refused = false;
	for (size_t i = 0; i < chk->n_targets; i++) {
		struct tc_target *t = chk->targets[i];
		if (t->state == TC_RESOLVING && !late)
			tc_resolve(t);
		if (!tc_terminal(t) && late)
			tc_fail(t, t->state == TC_RESOLVING ? "its host name did not resolve in time"
							    : "no answer within connect_timeout");
		over = over && tc_terminal(t);
		refused = refused || t->state == TC_DISABLED;
	}
	if (!over) {
		struct timeval tv = { 0, TICK_MS * 1000 };
		evtimer_add(chk->timer, &tv);
		return;
	}
	chk->finished = true;
	chk->done(chk, refused, chk->arg);   /* last: it may free chk */
}

struct twophase_check *twophase_check_start(struct worker *w, const struct config *cfg, const struct config *old,
					    const char *refusal, twophase_check_done_fn done, void *arg)
{
	struct twophase_check *chk = calloc(1, sizeof *chk);
	if (!chk)
		return NULL;
	chk->w = w;
	chk->refusal = refusal;
	chk->done = done;
	chk->arg = arg;
	worker_update_clock(w);
	chk->deadline_us = w->now_us + (uint64_t)cfg->general.connect_timeout * 1000;
	if (!(chk->timer = evtimer_new(w->base, tick_cb, chk)) || !each_target(cfg, old, visit_add, chk)) {
		twophase_check_free(chk);
		return NULL;
	}
	for (size_t i = 0; i < chk->n_targets; i++) {
		struct tc_target *t = chk->targets[i];
		if (!t->user) {
			tc_fail(t, "the pool has no user in the configuration to ask as");
			continue;
		}
		if (dns_literal(t->at.host, t->at.port, &t->addr, &t->addrlen))
			tc_connect(t);
		else
			tc_resolve(t);
	}
	/* The first look at once: nothing to ask, or everything failed already. */
	struct timeval now = { 0, 0 };
	evtimer_add(chk->timer, &now);
	return chk;
}

const char *twophase_check_error(const struct twophase_check *chk)
{
	return chk ? chk->error : "";
}

void twophase_check_free(struct twophase_check *chk)
{
	if (!chk)
		return;
	for (size_t i = 0; i < chk->n_targets; i++) {
		struct tc_target *t = chk->targets[i];
		if (bconn_state(&t->b) != BCONN_CLOSED)
			bconn_close(&t->b, false);
		bconn_release(&t->b);
		srvref_clear(&t->at);
		free(t->user);
		if (t->password) {
			/* (a secret: not left in freed memory) */
			OPENSSL_cleanse(t->password, strlen(t->password));
			free(t->password);
		}
		free(t);
	}
	free(chk->targets);
	if (chk->timer)
		event_free(chk->timer);
	free(chk);
}
