/* SPDX-License-Identifier: MIT */
/*
 * dns: server host names resolved asynchronously with c-ares inside the
 * worker's event loop (SPEC §2 dns_max_ttl). One resolver and one cache per
 * worker; answers are kept for the record's TTL, at most dns_max_ttl, and a
 * stale answer keeps being used while a fresh one is asked for. IP literals
 * never come here.
 */
#ifndef PGCAT_DNS_H
#define PGCAT_DNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct worker;
struct dns;

enum dns_state {
	DNS_RESOLVING,      /* first answer not in yet */
	DNS_OK,             /* an address (maybe stale, see expires_us) */
	DNS_FAILED          /* the last lookup failed (NXDOMAIN, timeout...) */
};

#define DNS_MAX_ADDRS 4

struct dns_entry {
	char *host;
	enum dns_state state;
	bool refreshing;                 /* a lookup is in flight */
	struct sockaddr_storage addrs[DNS_MAX_ADDRS];
	socklen_t addrlens[DNS_MAX_ADDRS];
	int n_addrs;
	uint64_t expires_us;             /* monotonic; past it the answer is stale */
	char error[128];                 /* of the last failure */
};

/* Called when a lookup ends (ok or not): the pool layer re-reads the entry. */
typedef void (*dns_done_fn)(struct worker *w, const struct dns_entry *e);

struct dns *dns_new(struct worker *w, dns_done_fn done);
void dns_free(struct dns *d);

/* The entry for host, starting a lookup when there is none or it is stale
 * (the stale answer stays usable meanwhile). max_ttl_ms: dns_max_ttl.
 * NULL only when out of memory. */
const struct dns_entry *dns_lookup(struct dns *d, const char *host, int max_ttl_ms);

/* Is host an IPv4 or IPv6 literal, a Unix socket directory (starting
 * with '/') or '@' and a name in Linux's abstract namespace? Then out/outlen
 * hold it with port (for a directory, the socket <host>/.s.PGSQL.<port>;
 * for '@name', name/.s.PGSQL.<port> in the abstract namespace, as libpq).
 * A socket path too long for sun_path is false (the config keeps to it). */
bool dns_literal(const char *host, int port, struct sockaddr_storage *out, socklen_t *outlen);

/* For SHOW DNS_HOSTS: the i-th cached entry, NULL past the end. */
const struct dns_entry *dns_entry_at(const struct dns *d, size_t i);
/* Lookups in flight (SHOW LISTS dns_pending). */
size_t dns_pending(const struct dns *d);

#endif
