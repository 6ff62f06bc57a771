/* SPDX-License-Identifier: MIT */
/*
 * peer: a CancelRequest for another pgcat instance's key, sent on to it
 * (SPEC §3.4). One struct peer_forward per request, on the worker's loop:
 * resolving (a host name not yet in the c-ares cache), connecting (over TCP,
 * or to a Unix socket: a directory, or '@' Linux's abstract namespace),
 * waiting for the answer to an SSLRequest (TCP only), in the TLS handshake,
 * then sent (waiting for the peer to close, as PostgreSQL does after a
 * CancelRequest). One timer bounds it all and polls the cache while a
 * lookup runs.
 */
#include "peer.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cancel.h"
#include "config.h"
#include "context.h"
#include "dns.h"
#include "log.h"
#include "proto.h"
#include "tls.h"

/* How often the c-ares cache is looked at while a host name resolves. */
#define PEER_DNS_POLL_MS 20

enum peer_phase {
	PEER_RESOLVING,
	PEER_CONNECTING,       /* the SSLRequest or the request queued */
	PEER_SSL_ANSWER,       /* SSLRequest sent: 'S' or 'N' awaited */
	PEER_TLS_HANDSHAKE,
	PEER_SENT              /* the CancelRequest written: the peer closes */
};

struct peer_forward {
	struct list_node node;
	struct worker *w;
	enum peer_phase phase;
	bool connected;
	struct bufferevent *bev;   /* the socket's, or the TLS filter over it */
	struct event *timer;       /* the deadline; the DNS polls */
	uint64_t deadline_us;
	int peer_id;
	int port;
	char host[256];
	uint8_t pkt[PROTO_CANCEL_HEAD_LEN + CANCEL_KEY_LONG_LEN];
	size_t pkt_len;
};

void peer_forwards_init(struct peer_forwards *q)
{
	list_init(&q->list);
	q->n = 0;
}

static void forward_free(struct peer_forward *f)
{
	list_del(&f->node);
	f->w->peer_forwards.n--;
	if (f->timer)
		event_free(f->timer);
	if (f->bev)
		bufferevent_free(f->bev);   /* a TLS filter frees its SSL and the socket's too */
	free(f);
}

static void forward_fail(struct peer_forward *f, const char *why)
{
	log_warning("cancel request for peer %d (%s:%d) not forwarded: %s", f->peer_id, f->host, f->port, why);
	forward_free(f);
}

static void arm_timer(struct peer_forward *f, uint64_t ms)
{
	uint64_t now = f->w->now_us, left_ms = f->deadline_us > now ? (f->deadline_us - now) / 1000 : 0;
	if (ms > left_ms)
		ms = left_ms;
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };
	evtimer_add(f->timer, &tv);
}

static void send_request(struct peer_forward *f)
{
	bool tls = f->phase == PEER_TLS_HANDSHAKE;
	bufferevent_write(f->bev, f->pkt, f->pkt_len);
	f->phase = PEER_SENT;
	log_debug("cancel request for peer %d forwarded to %s:%d%s", f->peer_id, f->host, f->port, tls ? " over TLS" : "");
}

static void event_cb(struct bufferevent *bev, short what, void *arg);

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct peer_forward *f = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	worker_update_clock(f->w);
	if (f->phase != PEER_SSL_ANSWER) {
		evbuffer_drain(in, evbuffer_get_length(in));   /* a peer says nothing after a CancelRequest */
		return;
	}
	uint8_t b;
	if (evbuffer_remove(in, &b, 1) < 1)
		return;
	if (b == 'N') {
		if (f->w->cfg->general.server_tls_sslmode >= TLS_MODE_REQUIRE) {
			forward_fail(f, "the peer does not support TLS, and server_tls_sslmode requires it");
			return;
		}
		send_request(f);
		return;
	}
	/* Bytes after 'S' would be taken as if encrypted (CVE-2021-23222). */
	if (b != 'S' || evbuffer_get_length(in) > 0) {
		forward_fail(f, "the peer answered the SSL request with something else than S or N");
		return;
	}
	SSL *ssl = SSL_new(f->w->tls.for_servers);
	if (!ssl || !tls_offer_alpn(ssl)) {
		SSL_free(ssl);
		forward_fail(f, "cannot start TLS (out of memory)");
		return;
	}
	struct sockaddr_storage ss;
	socklen_t sl;
	bool literal = dns_literal(f->host, f->port, &ss, &sl);
	if (!literal)
		(void)SSL_set_tlsext_host_name(ssl, f->host);
	if (f->w->cfg->general.server_tls_sslmode == TLS_MODE_VERIFY_FULL &&
	    (literal ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), f->host) : SSL_set1_host(ssl, f->host)) != 1) {
		SSL_free(ssl);
		forward_fail(f, "cannot set the host name to verify");
		return;
	}
	/* The filter takes the socket's bufferevent over (its callbacks too),
	 * and frees it and the SSL with itself. */
	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	struct bufferevent *tls = bufferevent_openssl_filter_new(bufferevent_get_base(bev), bev, ssl,
								 BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
	if (!tls) {
		/* Out of memory. Whether libevent freed the SSL and the socket's
		 * bufferevent depends on where it failed: both are left alone (a
		 * leak at worst; the socket's calls nothing of ours any more). */
		f->bev = NULL;
		forward_fail(f, "cannot start TLS (out of memory)");
		return;
	}
	/* The peer may close without close_notify once it has the request. */
	bufferevent_openssl_set_allow_dirty_shutdown(tls, 1);
	f->bev = tls;
	f->phase = PEER_TLS_HANDSHAKE;
	bufferevent_setcb(tls, read_cb, NULL, event_cb, f);
	bufferevent_enable(tls, EV_READ | EV_WRITE);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct peer_forward *f = arg;
	worker_update_clock(f->w);
	if (what & BEV_EVENT_CONNECTED) {
		f->connected = true;
		if (f->phase == PEER_TLS_HANDSHAKE) {
			if (!tls_alpn_ok(bufferevent_openssl_get_ssl(bev), false)) {
				forward_fail(f, "the peer agreed on an ALPN other than \"postgresql\"");
				return;
			}
			send_request(f);
		}
		return;
	}
	if (f->phase == PEER_SENT && f->connected) {
		forward_free(f);   /* the peer read it and closed */
		return;
	}
	char why[200] = "connection closed";
	if (f->phase == PEER_TLS_HANDSHAKE && (what & BEV_EVENT_ERROR)) {
		snprintf(why, sizeof why, "TLS handshake failed: ");
		size_t n = strlen(why);
		tls_last_error(why + n, sizeof why - n);
	} else if (what & BEV_EVENT_ERROR) {
		snprintf(why, sizeof why, "%s", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
	}
	forward_fail(f, why);
}

static void start_connect(struct peer_forward *f, const struct sockaddr *addr, socklen_t addrlen)
{
	f->bev = bufferevent_socket_new(f->w->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!f->bev) {
		forward_fail(f, "out of memory");
		return;
	}
	bufferevent_setcb(f->bev, read_cb, NULL, event_cb, f);
	bufferevent_enable(f->bev, EV_READ | EV_WRITE);
	f->phase = PEER_CONNECTING;
	if (f->w->tls.for_servers && addr->sa_family != AF_UNIX) {
		/* server_tls_sslmode other than disable: ask first. As libpq
		 * (and as towards servers), never over a Unix socket, whatever
		 * the mode says: the request goes in clear there. */
		uint8_t req[8];
		proto_put_u32(req, 8);
		proto_put_u32(req + 4, PG_SSL_REQUEST_CODE);
		bufferevent_write(f->bev, req, sizeof req);
		f->phase = PEER_SSL_ANSWER;
	} else {
		send_request(f);
	}
	if (bufferevent_socket_connect(f->bev, addr, (int)addrlen) < 0) {
		forward_fail(f, "cannot connect");
		return;
	}
	arm_timer(f, PEER_FORWARD_TIMEOUT_MS);
}

/* Connect when the address is known: an IP or a Unix socket at once, a
 * host name from the worker's c-ares cache (a first lookup is waited for by
 * polling). */
static void resolve(struct peer_forward *f)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	if (dns_literal(f->host, f->port, &ss, &sl)) {
		start_connect(f, (struct sockaddr *)&ss, sl);
		return;
	}
	if (f->host[0] == '/' || f->host[0] == '@') {
		/* The config keeps the path inside sun_path: never a name to look up. */
		forward_fail(f, "the Unix socket path is too long");
		return;
	}
	const struct dns_entry *e = f->w->dns ? dns_lookup(f->w->dns, f->host, f->w->cfg->general.dns_max_ttl) : NULL;
	if (!e) {
		forward_fail(f, "cannot resolve the host name (out of memory)");
		return;
	}
	if (e->state == DNS_RESOLVING) {
		arm_timer(f, PEER_DNS_POLL_MS);
		return;
	}
	if (e->state != DNS_OK || e->n_addrs == 0) {
		forward_fail(f, e->error[0] ? e->error : "the host name does not resolve");
		return;
	}
	memcpy(&ss, &e->addrs[0], sizeof ss);
	sl = e->addrlens[0];
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)f->port);
	else if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)f->port);
	start_connect(f, (struct sockaddr *)&ss, sl);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct peer_forward *f = arg;
	worker_update_clock(f->w);
	if (f->w->now_us >= f->deadline_us) {
		forward_fail(f, "no answer in time");
		return;
	}
	if (f->phase == PEER_RESOLVING)
		resolve(f);
}

static const struct config_peer *find_peer(const struct config *cfg, int id)
{
	for (size_t i = 0; i < cfg->n_peers; i++)
		if (cfg->peers[i].id == id)
			return &cfg->peers[i];
	return NULL;
}

void peer_forward_cancel(struct worker *w, const struct cancel_forward *fwd)
{
	if (fwd->peer_id <= 0)
		return;
	if (fwd->exhausted) {
		log_warning("cancel request for peer %d dropped: forwarded %u times already (do the [peers] "
			    "sections of the instances agree?)", fwd->peer_id, CANCEL_MAX_HOPS);
		return;
	}
	const struct config_peer *p = find_peer(w->cfg, fwd->peer_id);
	if (!p) {
		/* Unknown: ignored silently, as an unknown key is. */
		log_debug("cancel request for peer %d ignored: not in [peers]", fwd->peer_id);
		return;
	}
	if (w->peer_forwards.n >= PEER_FORWARDS_MAX) {
		log_warning("cancel request for peer %d dropped: %d forwards in flight already", fwd->peer_id,
			    PEER_FORWARDS_MAX);
		return;
	}
	struct peer_forward *f = calloc(1, sizeof *f);
	if (!f) {
		log_warning("cancel request for peer %d dropped: out of memory", fwd->peer_id);
		return;
	}
	f->w = w;
	f->peer_id = fwd->peer_id;
	f->port = p->port;
	snprintf(f->host, sizeof f->host, "%s", p->host);
	f->pkt_len = PROTO_CANCEL_HEAD_LEN + fwd->key_len;
	proto_put_u32(f->pkt, (uint32_t)f->pkt_len);
	proto_put_u32(f->pkt + 4, PG_CANCEL_REQUEST_CODE);
	proto_put_u32(f->pkt + 8, fwd->pid);
	memcpy(f->pkt + PROTO_CANCEL_HEAD_LEN, fwd->key, fwd->key_len);
	f->phase = PEER_RESOLVING;
	f->deadline_us = w->now_us + (uint64_t)PEER_FORWARD_TIMEOUT_MS * 1000;
	list_init(&f->node);
	list_add_tail(&w->peer_forwards.list, &f->node);
	w->peer_forwards.n++;
	if (!(f->timer = evtimer_new(w->base, timer_cb, f))) {
		forward_fail(f, "out of memory");
		return;
	}
	resolve(f);
}

void peer_forwards_free_all(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->peer_forwards.list)
		forward_free(LIST_OWNER(pos, struct peer_forward, node));
}
