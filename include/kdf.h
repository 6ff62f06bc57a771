/* SPDX-License-Identifier: MIT */
/*
 * kdf: SCRAM's SaltedPassword (PBKDF2, scram_salted_password) derived off
 * the event loop, for a worker's logins to servers. A server chooses the
 * iteration count (up to SCRAM_MAX_ITERATIONS, seconds of work): run
 * inline, that would stop every client of the worker meanwhile.
 *
 * Per worker process (struct worker owns one): KDF_THREADS threads, made
 * on the first derivation (so after the fork, in the worker), and a queue.
 * A thread hands a result back by an eventfd that the worker's loop
 * watches; the loop takes every finished job and tells each request that
 * waits for it through its done event. Only the loop touches requests, the
 * cache and the waiters; the threads see only the queue, under a mutex.
 *
 * Results are cached, per worker, by (password, salt, iterations): a
 * server keeps a role's salt until its password is set again, so every
 * later login of the same role to the same cluster (and its replicas)
 * costs no derivation. At most KDF_CACHE_MAX entries, the least recently
 * used going first; the password itself is not kept (its SHA-256 is the
 * key). Logins asking for the same derivation at once share one job.
 * A request can ask that its result not be kept (a client's guess).
 *
 * A request whose owner goes away (a server connection closed while it
 * waits) is cancelled: its job no longer knows it, nothing reaches the
 * owner. A job nobody waits for any more is dropped if it has not
 * started; a running one finishes into the cache (a login that timed out
 * during a long derivation then succeeds on its next try). At exit,
 * running derivations stop within 65,536 iterations.
 */
#ifndef PGCAT_KDF_H
#define PGCAT_KDF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "auth_scram.h"
#include "list.h"

#define KDF_THREADS 2       /* derivations at once, per worker; more wait in the queue */
#define KDF_CACHE_MAX 256   /* SaltedPasswords kept per worker */

struct kdf;
struct kdf_job;

/* One derivation waited for, embedded in its owner. A zeroed request is
 * idle. */
struct kdf_request {
	struct list_node node;        /* in its job's waiters */
	struct kdf_job *job;          /* NULL: not waiting */
	/* The result (ok false: the derivation failed), on the loop, once;
	 * salted is valid during the call only. */
	void (*done)(struct kdf_request *req, bool ok, const uint8_t *salted);
	/* Set by the owner: its result goes to no cache. A client's password
	 * checked against a verifier (auth.c) may be a wrong guess, or many:
	 * they must not push out the servers' keys. (The cache is still
	 * looked in.) */
	bool uncached;
};

/* For this worker's loop; NULL: out of memory or no eventfd. */
struct kdf *kdf_new(struct event_base *base) __attribute__((warn_unused_result));
/* Stop the threads (a running derivation gives up), free the jobs and the
 * cache. Requests still waiting are detached without a call. */
void kdf_free(struct kdf *k);
/* Forget every cached result (a reload: no key of a password that may no
 * longer be configured stays in memory). */
void kdf_forget(struct kdf *k);

enum kdf_result {
	KDF_DONE,      /* the result is in out now (cached; or k NULL: derived here) */
	KDF_PENDING,   /* req->done will be called from the loop */
	KDF_FAILED,
};
/* Derive Hi(password, salt, iterations) for req (idle; done set by the
 * caller), password SASLprepped already (copied). k NULL: derived here, on
 * this thread (tools and unit tests). */
enum kdf_result kdf_derive(struct kdf *k, struct kdf_request *req, const char *password, const uint8_t *salt,
			   size_t salt_len, int iterations, uint8_t out[SCRAM_KEY_LEN])
	__attribute__((warn_unused_result));
/* No longer waiting (idle requests too): done will not be called. */
void kdf_cancel(struct kdf_request *req);

#endif
