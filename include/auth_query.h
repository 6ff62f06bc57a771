/* SPDX-License-Identifier: MIT */
/*
 * auth_query (SPEC §2, §3; doc/authentication.md): a user found neither in
 * a users section nor in auth_file is looked up by running [general]
 * auth_query, with the user name as its parameter $1, as auth_user on the
 * pool's primary. The secret it returns (a SCRAM verifier or an md5 hash)
 * authenticates the client, and logs pgcat in to the servers by SCRAM
 * pass-through or the md5 hash, through a pool made for that user on its
 * first login (pool_add_looked_up). Answers are cached per worker for
 * auth_query_cache_ttl; a user the query does not find gets the same
 * 28P01 as a wrong password.
 *
 * The lookup never blocks the loop: it runs on a connection of its own
 * (one per worker, server, database and auth_user; pipelined; closed after
 * idle_timeout without lookups), while the logins that wait for it are
 * parked in CLIENT_LOGIN_WAIT on its answer (every client of one user
 * waits for the same lookup). A lookup that has no answer within
 * connect_timeout fails its logins (08006); a login is never parked longer
 * than its own connect_timeout.
 *
 * Above client.c and pool.c, beside login.c, which calls it; the pure part
 * (what a secret is, the cache) is at the top for the unit tests.
 */
#ifndef PGCAT_AUTH_QUERY_H
#define PGCAT_AUTH_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"
#include "types.h"

/* What a looked-up secret is. */
enum auth_query_secret {
	AUTH_QUERY_SECRET_NONE,     /* NULL or empty: no password; the login fails */
	AUTH_QUERY_SECRET_MD5,      /* "md5" + 32 hex digits (PostgreSQL's md5) */
	AUTH_QUERY_SECRET_SCRAM,    /* a SCRAM-SHA-256 verifier */
	AUTH_QUERY_SECRET_PLAIN,    /* anything else: a plaintext password (a custom auth_query) */
	AUTH_QUERY_SECRET_INVALID   /* begins like a SCRAM verifier but does not parse: refused */
};
enum auth_query_secret auth_query_classify(const char *secret);

/* ---- the cache: answers per (pool, user), the clock passed in ---- */

struct aq_conn;

struct auth_query_entry {
	struct auth_query_entry *next;   /* hash chain */
	char *pool;                      /* the pool's name (the database clients ask for) */
	char *user;
	/* The answer: the secret, or NULL when the user is not found (or has
	 * no usable secret). Valid once answered. */
	char *secret;
	bool answered;
	/* Its answer is being handed to the logins that waited for it: fresh
	 * for them whatever the TTL. */
	bool serving;
	uint64_t answered_us;
	/* Its lookup, while not answered: the logins waiting (struct
	 * pool_waiter of each client), the connection running it and its
	 * place in that connection's FIFO. */
	struct list_node waiters;
	struct aq_conn *conn;
	struct list_node conn_node;
	bool sent;                       /* the query went out */
	uint64_t deadline_us;            /* no answer by then: the lookup fails */
	uint64_t gen;                    /* the cache generation it was asked in */
};

struct auth_query_cache {
	struct auth_query_entry **buckets;
	size_t n_buckets;
	size_t n;                        /* entries, answered or not */
	size_t max;                      /* answered entries kept at most */
};

bool auth_query_cache_init(struct auth_query_cache *c, size_t n_buckets, size_t max)
	__attribute__((warn_unused_result));
/* Frees every entry (their waiters must be gone). */
void auth_query_cache_free(struct auth_query_cache *c);
struct auth_query_entry *auth_query_cache_find(const struct auth_query_cache *c, const char *pool, const char *user);
/* A new entry, not answered (NULL: out of memory). */
struct auth_query_entry *auth_query_cache_add(struct auth_query_cache *c, const char *pool, const char *user);
/* Unlink and free e. */
void auth_query_cache_remove(struct auth_query_cache *c, struct auth_query_entry *e);
/* Record the answer (secret NULL: not found). false: out of memory. */
bool auth_query_cache_answer(struct auth_query_entry *e, const char *secret, uint64_t now_us)
	__attribute__((warn_unused_result));
/* Answered less than ttl_ms ago (or being served). */
bool auth_query_entry_fresh(const struct auth_query_entry *e, uint64_t now_us, int ttl_ms);
/* Free the answered entries that are no longer fresh; how many went. */
size_t auth_query_cache_sweep(struct auth_query_cache *c, uint64_t now_us, int ttl_ms);
/* Answered entries beyond max: the oldest ones go, fresh or not. */
void auth_query_cache_trim(struct auth_query_cache *c);

/* ---- the lookups ---- */

/* Start of a login to a pool (c's database exists; not the admin console):
 * false: go on at once (auth_query is off, the config lists the user, or a
 * fresh answer is cached: the user's pool was made or updated from it, or
 * retired when the user is gone). true: c is parked in CLIENT_LOGIN_WAIT
 * until the lookup answers, then put back in CLIENT_STARTUP and
 * resume(c) called, which starts the login again (and finds the answer
 * cached); or c was closed (lookup failed, timeout, out of memory). */
bool auth_query_login(struct client *c, void (*resume)(struct client *c));
/* A console user (admin_users, stats_users) whom auth_file does not list,
 * looked up as PgBouncer looks it up: with auth_query, in the database
 * the global auth_dbname names (none: the console's own, which cannot
 * serve: refused, as one that names no database, with "bouncer config
 * error" on a pgbouncer.ini). Only with auth_user set. false: go on, the
 * answer in *secret (NULL: no such user, or auth_query off); true: as for
 * auth_query_login (parked, or closed). */
bool auth_query_console_login(struct client *c, void (*resume)(struct client *c), const char **secret);
/* After a reload: cached answers are forgotten (auth_query or auth_user
 * may be other); idle lookup connections close. Lookups under way finish
 * and serve their logins. */
void auth_query_reload(struct worker *w);
/* Worker exit: parked logins closed, connections closed, all freed. */
void auth_query_free(struct worker *w);

#endif
