/* SPDX-License-Identifier: MIT */
/*
 * dns: c-ares in the worker's libevent loop. c-ares tells which sockets it
 * wants watched (the sock-state callback); each gets a persistent event that
 * hands readiness back to ares_process_fd, and one timer drives c-ares's
 * own timeouts and retries. Nothing here blocks.
 */
#include "dns.h"

#include <arpa/inet.h>
#include <ares.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "list.h"
#include "log.h"
#include "context.h"

#define DNS_MAX_SOCKS 16
/* A name that did not resolve is asked again this long after, at the
 * earliest: often enough to notice a fixed record, not at every use (the
 * janitor looks up every pool's names each tick). */
#define DNS_FAILED_RETRY_US 1000000ULL

struct dns_sock {
	ares_socket_t fd;
	struct event *ev;
	short what;
};

struct dns_node {
	struct list_node node;
	struct dns *d;
	struct dns_entry e;
	int max_ttl_ms;
};

struct dns {
	struct worker *w;
	dns_done_fn done;
	ares_channel ch;
	bool have_channel;
	struct event *timer;
	struct dns_sock socks[DNS_MAX_SOCKS];
	struct list_node entries;
	size_t n_entries;
	bool destroying;
};

static void arm_timer(struct dns *d)
{
	struct timeval max = { 5, 0 }, tv;
	struct timeval *t = ares_timeout(d->ch, &max, &tv);
	if (t)
		evtimer_add(d->timer, t);
}

static void sock_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns *d = arg;
	ares_process_fd(d->ch, (what & EV_READ) ? (ares_socket_t)fd : ARES_SOCKET_BAD,
			(what & EV_WRITE) ? (ares_socket_t)fd : ARES_SOCKET_BAD);
	arm_timer(d);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct dns *d = arg;
	ares_process_fd(d->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
	arm_timer(d);
}

/* c-ares opens, closes, or changes interest in one of its sockets. */
static void sock_state_cb(void *data, ares_socket_t fd, int readable, int writable)
{
	struct dns *d = data;
	struct dns_sock *slot = NULL, *free_slot = NULL;
	for (int i = 0; i < DNS_MAX_SOCKS; i++) {
		if (d->socks[i].ev && d->socks[i].fd == fd)
			slot = &d->socks[i];
		else if (!d->socks[i].ev && !free_slot)
			free_slot = &d->socks[i];
	}
	short what = (short)((readable ? EV_READ : 0) | (writable ? EV_WRITE : 0));
	if (slot && (what == 0 || what != slot->what)) {
		event_free(slot->ev);
		slot->ev = NULL;
	}
	if (what == 0)
		return;
	if (!slot || !slot->ev) {
		slot = slot ? slot : free_slot;
		if (!slot) {
			log_warning("dns: more than %d resolver sockets at once; one is not watched", DNS_MAX_SOCKS);
			return;
		}
		slot->fd = fd;
		slot->what = what;
		slot->ev = event_new(d->w->base, fd, what | EV_PERSIST, sock_cb, d);
		if (!slot->ev || event_add(slot->ev, NULL) != 0)
			log_warning("dns: cannot watch a resolver socket");
	}
}

bool dns_literal(const char *host, int port, struct sockaddr_storage *out, socklen_t *outlen)
{
	struct sockaddr_in v4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct sockaddr_in6 v6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port) };
	memset(out, 0, sizeof *out);
	if (host[0] == '/' || host[0] == '@') {
		/* A Unix socket directory, as libpq's host=/dir: the socket is
		 * <dir>/.s.PGSQL.<port> (the config caps dir's length). '@name'
		 * (a [peers] host), as libpq too: the socket name/.s.PGSQL.<port>
		 * in Linux's abstract namespace, the '@' a NUL in the address,
		 * whose length ends the name (no NUL after it). */
		struct sockaddr_un un = { .sun_family = AF_UNIX };
		int n = snprintf(un.sun_path, sizeof un.sun_path, "%s/.s.PGSQL.%d", host, port);
		if (n < 0 || (size_t)n >= sizeof un.sun_path)
			return false;
		bool abstract = host[0] == '@';
		if (abstract)
			un.sun_path[0] = '\0';
		_Static_assert(sizeof un <= sizeof *out, "sockaddr_un fits sockaddr_storage");
		memcpy(out, &un, sizeof un);
		*outlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + (abstract ? 0 : 1));
		return true;
	}
	if (inet_pton(AF_INET, host, &v4.sin_addr) == 1) {
		memcpy(out, &v4, sizeof v4);
		*outlen = sizeof v4;
		return true;
	}
	if (inet_pton(AF_INET6, host, &v6.sin6_addr) == 1) {
		memcpy(out, &v6, sizeof v6);
		*outlen = sizeof v6;
		return true;
	}
	return false;
}

struct dns *dns_new(struct worker *w, dns_done_fn done)
{
	struct dns *d = calloc(1, sizeof *d);
	if (!d)
		return NULL;
	d->w = w;
	d->done = done;
	list_init(&d->entries);
	if (ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS) {
		free(d);
		return NULL;
	}
	struct ares_options opts;
	memset(&opts, 0, sizeof opts);
	opts.sock_state_cb = sock_state_cb;
	opts.sock_state_cb_data = d;
	opts.timeout = 2000;      /* ms per try */
	opts.tries = 2;
	int rc = ares_init_options(&d->ch, &opts, ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
	d->timer = evtimer_new(w->base, timer_cb, d);
	if (rc != ARES_SUCCESS || !d->timer) {
		log_error("dns: cannot start the resolver: %s", ares_strerror(rc));
		if (rc == ARES_SUCCESS)
			ares_destroy(d->ch);
		if (d->timer)
			event_free(d->timer);
		ares_library_cleanup();
		free(d);
		return NULL;
	}
	d->have_channel = true;
	return d;
}

void dns_free(struct dns *d)
{
	if (!d)
		return;
	d->destroying = true;
	if (d->have_channel)
		ares_destroy(d->ch);   /* pending callbacks run now with ARES_EDESTRUCTION */
	for (int i = 0; i < DNS_MAX_SOCKS; i++)
		if (d->socks[i].ev)
			event_free(d->socks[i].ev);
	if (d->timer)
		event_free(d->timer);
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &d->entries) {
		struct dns_node *n = LIST_OWNER(pos, struct dns_node, node);
		list_del(&n->node);
		free(n->e.host);
		free(n);
	}
	ares_library_cleanup();
	free(d);
}

/* IPv4 answers first: a server listening on 127.0.0.1 only is common, and
 * "localhost" resolves to ::1 as well. */
static void take_addrs(struct dns_entry *e, const struct ares_addrinfo *res, int *ttl)
{
	e->n_addrs = 0;
	*ttl = -1;
	for (int family_pass = 0; family_pass < 2; family_pass++) {
		int want = family_pass == 0 ? AF_INET : AF_INET6;
		for (const struct ares_addrinfo_node *n = res ? res->nodes : NULL; n; n = n->ai_next) {
			if (n->ai_family != want || e->n_addrs == DNS_MAX_ADDRS || !n->ai_addr ||
			    (size_t)n->ai_addrlen > sizeof e->addrs[0])
				continue;
			memset(&e->addrs[e->n_addrs], 0, sizeof e->addrs[0]);
			memcpy(&e->addrs[e->n_addrs], n->ai_addr, (size_t)n->ai_addrlen);
			e->addrlens[e->n_addrs] = (socklen_t)n->ai_addrlen;
			e->n_addrs++;
			if (*ttl < 0 || n->ai_ttl < *ttl)
				*ttl = n->ai_ttl;
		}
	}
}

static void lookup_done(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
	(void)timeouts;
	struct dns_node *n = arg;
	struct dns *d = n->d;
	if (status == ARES_EDESTRUCTION || d->destroying) {
		if (res)
			ares_freeaddrinfo(res);
		return;
	}
	struct dns_entry *e = &n->e;
	e->refreshing = false;
	int ttl = -1;
	if (status == ARES_SUCCESS)
		take_addrs(e, res, &ttl);
	if (res)
		ares_freeaddrinfo(res);
	uint64_t now = d->w->now_us;
	if (status == ARES_SUCCESS && e->n_addrs > 0) {
		/* Hosts-file answers carry no TTL: they get dns_max_ttl. */
		uint64_t keep_ms = (uint64_t)n->max_ttl_ms;
		if (ttl > 0 && (uint64_t)ttl * 1000 < keep_ms)
			keep_ms = (uint64_t)ttl * 1000;
		e->expires_us = now + keep_ms * 1000;
		if (e->state != DNS_OK)
			log_info("dns: %s resolves again", e->host);
		e->state = DNS_OK;
		e->error[0] = '\0';
	} else {
		snprintf(e->error, sizeof e->error, "cannot resolve %s: %s", e->host,
			 status == ARES_SUCCESS ? "no IPv4 or IPv6 address" : ares_strerror(status));
		/* Logged when it starts failing; "resolves again" ends it. */
		if (e->state != DNS_FAILED)
			log_warning("dns: %s", e->error);
		else
			log_debug("dns: %s", e->error);
		e->state = DNS_FAILED;
		e->n_addrs = 0;
		e->expires_us = now + DNS_FAILED_RETRY_US;
	}
	d->done(d->w, e);
}

static void start(struct dns_node *n)
{
	struct ares_addrinfo_hints hints;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	n->e.refreshing = true;
	ares_getaddrinfo(n->d->ch, n->e.host, NULL, &hints, lookup_done, n);
	arm_timer(n->d);
}

const struct dns_entry *dns_lookup(struct dns *d, const char *host, int max_ttl_ms)
{
	struct dns_node *n = NULL;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &d->entries) {
		struct dns_node *x = LIST_OWNER(pos, struct dns_node, node);
		if (strcmp(x->e.host, host) == 0) {
			n = x;
			break;
		}
	}
	if (!n) {
		n = calloc(1, sizeof *n);
		if (!n || !(n->e.host = strdup(host))) {
			free(n);
			return NULL;
		}
		n->d = d;
		n->e.state = DNS_RESOLVING;
		list_add_tail(&d->entries, &n->node);
		d->n_entries++;
	}
	n->max_ttl_ms = max_ttl_ms;
	if (!n->e.refreshing && (n->e.state == DNS_RESOLVING || d->w->now_us >= n->e.expires_us))
		start(n);   /* may complete at once (hosts file): the entry is then fresh */
	return &n->e;
}

const struct dns_entry *dns_entry_at(const struct dns *d, size_t i)
{
	const struct list_node *pos;
	size_t k = 0;
	for (pos = d->entries.next; pos != &d->entries; pos = pos->next, k++)
		if (k == i)
			return &LIST_OWNER(pos, const struct dns_node, node)->e;
	return NULL;
}

size_t dns_pending(const struct dns *d)
{
	size_t n = 0;
	const struct list_node *pos;
	for (pos = d->entries.next; pos != &d->entries; pos = pos->next)
		n += LIST_OWNER(pos, const struct dns_node, node)->e.refreshing;
	return n;
}
