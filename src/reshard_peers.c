/* SPDX-License-Identifier: MIT */
/*
 * reshard_peers: the other pgcat instances in front of the same pool
 * ([peers], SPEC §3.4) during a cutover. The instance running the reshard
 * logs in to each peer's admin console (admin_username and
 * admin_password, which the instances share) and sends it the cutover's
 * commands as they come: RESHARD PAUSE pool (answered once no server of
 * that peer's pool serves a transaction that may write), then RESHARD
 * SWITCH pool and RESHARD RESUME pool, or RESHARD RESUME pool when the
 * cutover is given up. The plan reads whether every peer
 * has answered everything sent (rs_peers_settled) and whether one failed.
 */
#include "reshard_types.h"

#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "dns.h"
#include "proto.h"

#define RS_PEER_PENDING 4

struct rs_peer {
	struct bconn b;
	struct rs_peers *all;
	int id;
	char *host;
	int port;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	bool resolving;
	uint64_t sent, done;
	char *pending[RS_PEER_PENDING];   /* commands waiting for the login */
	size_t n_pending;
	bool failed;
};

struct rs_peers {
	struct reshard *rs;
	struct rs_peer *p;
	size_t n;
	char *user, *password;
	char why[300];
};

static const struct bconn_profile peer_profile = {
	.application_name = "pgcat reshard cutover",
	.refused = "login refused: ",
	.auth_failed = "authentication failed: ",
	.max_message = 65536,
	.read_high = 65536,
};

static void peer_fail(struct rs_peer *p, const char *why)
{
	if (!p->failed)
		snprintf(p->all->why, sizeof p->all->why, "peer %d (%s:%d): %s", p->id, p->host, p->port, why);
	p->failed = true;
}

static void peer_send(struct rs_peer *p, const char *sql)
{
	if (p->failed)
		return;
	if (bconn_state(&p->b) == BCONN_READY) {
		if (!bconn_query(&p->b, sql)) {
			peer_fail(p, "a command could not be sent");
			return;
		}
		p->sent++;
		return;
	}
	if (p->n_pending == RS_PEER_PENDING || !(p->pending[p->n_pending] = strdup(sql))) {
		peer_fail(p, "out of memory");
		return;
	}
	p->n_pending++;
}

static void peer_ready(void *arg)
{
	struct rs_peer *p = arg;
	for (size_t i = 0; i < p->n_pending; i++) {
		char *sql = p->pending[i];
		p->pending[i] = NULL;
		peer_send(p, sql);
		free(sql);
	}
	p->n_pending = 0;
}

static bool peer_message(void *arg, uint8_t type, const uint8_t *body, size_t len)
{
	struct rs_peer *p = arg;
	switch (type) {
	case PqMsg_ErrorResponse: {
		struct proto_error_fields e;
		peer_fail(p, proto_parse_error(body, len, &e) && e.message ? e.message : "error");
		return true;
	}
	case PqMsg_ReadyForQuery:
		p->done++;
		return true;
	case PqMsg_CommandComplete:
	case PqMsg_RowDescription:
	case PqMsg_DataRow:
	case PqMsg_EmptyQueryResponse:
	case PqMsg_ParameterStatus:
		return true;
	default:
		return false;
	}
}

static void peer_down(void *arg, const char *why)
{
	peer_fail(arg, why);
}

static void peer_open(struct rs_peer *p)
{
	struct worker *w = p->all->rs->w;
	if (bconn_state(&p->b) != BCONN_CLOSED || p->failed)
		return;
	if (!p->addrlen && !dns_literal(p->host, p->port, &p->addr, &p->addrlen)) {
		const struct dns_entry *e = dns_lookup(w->dns, p->host, w->cfg->general.dns_max_ttl);
		if (!e || e->state == DNS_FAILED) {
			peer_fail(p, e ? "its host name does not resolve" : "out of memory");
			return;
		}
		if (e->state != DNS_OK || e->n_addrs == 0) {
			p->resolving = true;
			return;
		}
		memcpy(&p->addr, &e->addrs[0], sizeof p->addr);
		p->addrlen = e->addrlens[0];
		if (p->addr.ss_family == AF_INET)
			((struct sockaddr_in *)&p->addr)->sin_port = htons((uint16_t)p->port);
		else if (p->addr.ss_family == AF_INET6)
			((struct sockaddr_in6 *)&p->addr)->sin6_port = htons((uint16_t)p->port);
	}
	p->resolving = false;
	if (!bconn_set_login(&p->b, p->all->user, p->all->password, NULL, NULL)) {
		peer_fail(p, "out of memory");
		return;
	}
	(void)bconn_open(&p->b, &peer_profile, p->host, p->port, (const struct sockaddr *)&p->addr, p->addrlen,
			 "pgcat");
}

bool rs_peers_init(struct reshard *rs)
{
	const struct config *cfg = rs->w->cfg;
	struct rs_peers *ps = calloc(1, sizeof *ps);
	if (!ps)
		return false;
	rs->peers = ps;
	ps->rs = rs;
	if (cfg->n_peers == 0)
		return true;
	const char *user = cfg->general.admin_username, *pw = cfg->general.admin_password;
	if (!user || !user[0] || !pw || !pw[0]) {
		/* No console login of the instance's own: the pool's user. */
		user = rs->user;
		pw = rs->password;
	}
	if (!(ps->user = strdup(user ? user : "")) || (pw && !(ps->password = strdup(pw))) ||
	    !(ps->p = calloc(cfg->n_peers, sizeof *ps->p)))
		return false;
	for (size_t i = 0; i < cfg->n_peers; i++) {
		const struct config_peer *cp = &cfg->peers[i];
		if (cp->id == cfg->general.peer_id)
			continue;   /* itself */
		struct rs_peer *p = &ps->p[ps->n];
		p->all = ps;
		p->id = cp->id;
		p->port = cp->port;
		if (!(p->host = strdup(cp->host)))
			return false;
		bconn_init(&p->b, rs->w, peer_ready, peer_message, peer_down, p);
		ps->n++;
	}
	return true;
}

void rs_peers_send(struct reshard *rs, const char *sql)
{
	struct rs_peers *ps = rs->peers;
	for (size_t i = 0; ps && i < ps->n; i++) {
		peer_send(&ps->p[i], sql);
		peer_open(&ps->p[i]);
	}
}

/* A peer's connection dropped and made again: what it still owed (a
 * RESHARD PAUSE waiting for that peer's writes to drain) is not waited for. */
static void peer_restart(struct rs_peer *p)
{
	bconn_close(&p->b, false);
	for (size_t k = 0; k < p->n_pending; k++)
		free(p->pending[k]);
	p->n_pending = 0;
	p->failed = false;
	p->sent = p->done = 0;
}

void rs_peers_resume(struct reshard *rs)
{
	struct rs_peers *ps = rs->peers;
	char sql[100];
	snprintf(sql, sizeof sql, "RESHARD RESUME %s", rs->pool);
	for (size_t i = 0; ps && i < ps->n; i++) {
		struct rs_peer *p = &ps->p[i];
		/* Behind a PAUSE that has not answered, a RESUME on the same
		 * connection would wait for it: a fresh one (the pause is the
		 * peer's state, not the connection's). */
		if (p->failed || p->n_pending > 0 || p->done < p->sent)
			peer_restart(p);
		peer_send(p, sql);
		peer_open(p);
	}
}

void rs_peers_tick(struct reshard *rs)
{
	struct rs_peers *ps = rs->peers;
	for (size_t i = 0; ps && i < ps->n; i++)
		if (ps->p[i].resolving)
			peer_open(&ps->p[i]);
}

bool rs_peers_settled(const struct reshard *rs)
{
	const struct rs_peers *ps = rs->peers;
	for (size_t i = 0; ps && i < ps->n; i++) {
		const struct rs_peer *p = &ps->p[i];
		if (!p->failed && (p->n_pending > 0 || p->done < p->sent))
			return false;
	}
	return true;
}

const char *rs_peers_failed(const struct reshard *rs)
{
	const struct rs_peers *ps = rs->peers;
	for (size_t i = 0; ps && i < ps->n; i++)
		if (ps->p[i].failed)
			return ps->why;
	return NULL;
}

void rs_peers_forget_failures(struct reshard *rs)
{
	struct rs_peers *ps = rs->peers;
	for (size_t i = 0; ps && i < ps->n; i++)
		if (ps->p[i].failed)
			peer_restart(&ps->p[i]);
}

void rs_peers_free(struct reshard *rs)
{
	struct rs_peers *ps = rs->peers;
	if (!ps)
		return;
	for (size_t i = 0; i < ps->n; i++) {
		struct rs_peer *p = &ps->p[i];
		bconn_release(&p->b);
		free(p->host);
		for (size_t k = 0; k < p->n_pending; k++)
			free(p->pending[k]);
	}
	free(ps->p);
	free(ps->user);
	if (ps->password)
		explicit_bzero(ps->password, strlen(ps->password));
	free(ps->password);
	free(ps);
	rs->peers = NULL;
}
