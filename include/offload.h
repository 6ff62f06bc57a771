/* SPDX-License-Identifier: MIT */
/*
 * offload: blocking work done on a few threads of a worker, its result
 * handed back on the worker's loop. For what only a blocking library call
 * can do: an LDAP bind (ldap_auth.c) waits on a server for up to seconds,
 * and run inline it would stop every client of the worker meanwhile.
 * (kdf.c has its own threads: its jobs are shared and cached.)
 *
 * Per worker process (struct worker owns one): OFFLOAD_THREADS threads,
 * made on the first job (after the fork, in the worker), a queue, and an
 * eventfd the loop watches. A job is the caller's struct with an
 * offload_job inside; the threads touch a job only through run, and the
 * queue only under the mutex. A job whose owner goes away is cancelled:
 * dropped at once if it has not started, else its result is thrown away
 * (free is called instead of done) when it ends.
 */
#ifndef PGCAT_OFFLOAD_H
#define PGCAT_OFFLOAD_H

#include <pthread.h>
#include <stdbool.h>

#include <event2/event.h>

#include "list.h"

#define OFFLOAD_THREADS 4   /* blocking calls at once, per worker; more wait in the queue */

struct offload;

enum offload_job_state { OFFLOAD_IDLE, OFFLOAD_QUEUED, OFFLOAD_RUNNING, OFFLOAD_FINISHED };

struct offload_job {
	struct list_node node;          /* in the queue or the finished list */
	enum offload_job_state state;   /* under the mutex */
	bool cancelled;                 /* the loop's: nobody waits for it */
	void (*run)(struct offload_job *j);    /* on a thread: the blocking work */
	void (*done)(struct offload_job *j);   /* on the loop, once, unless cancelled */
	void (*free)(struct offload_job *j);   /* on the loop: a cancelled job goes */
};

/* For this worker's loop; NULL: out of memory or no eventfd. */
struct offload *offload_new(struct event_base *base) __attribute__((warn_unused_result));
/* Queue j (run, done and free set; state idle). false: no thread could be
 * started (j untouched, the caller's still). */
bool offload_submit(struct offload *o, struct offload_job *j) __attribute__((warn_unused_result));
/* Nobody waits for j any more: freed now if it has not started, else when
 * it ends; done is not called. */
void offload_cancel(struct offload *o, struct offload_job *j);
/* A mutex for the calls that must not run at once on o's threads (PAM's:
 * pam_auth.c holds it around them). */
pthread_mutex_t *offload_serial_lock(struct offload *o);
/* At exit: queued and finished jobs freed (free), the threads stopped; a
 * thread inside a blocking call is waited for (the calls have timeouts). */
void offload_free(struct offload *o);

#endif
