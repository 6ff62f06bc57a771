/* SPDX-License-Identifier: MIT */
/*
 * offload: blocking calls on a worker's threads (include/offload.h).
 *
 * As in kdf.c, a thread tells the loop by an eventfd rather than by
 * event_active(), which would need libevent's locking on every event of
 * the worker to serve a handful of logins.
 */
#include "offload.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

struct offload {
	struct event_base *base;
	struct event *ready;     /* the eventfd's */
	int efd;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_mutex_t serial;   /* offload_serial_lock's */
	struct list_node queue;      /* OFFLOAD_QUEUED jobs, oldest first */
	struct list_node finished;   /* OFFLOAD_FINISHED jobs the loop has not taken */
	pthread_t threads[OFFLOAD_THREADS];
	size_t n_threads;
	bool stop;
	bool threads_failed;
};

static void *offload_thread(void *arg)
{
	struct offload *o = arg;
	pthread_mutex_lock(&o->lock);
	for (;;) {
		while (list_empty(&o->queue) && !o->stop)
			pthread_cond_wait(&o->wake, &o->lock);
		if (o->stop)
			break;
		struct offload_job *j = LIST_OWNER(list_first(&o->queue), struct offload_job, node);
		list_del(&j->node);
		j->state = OFFLOAD_RUNNING;
		pthread_mutex_unlock(&o->lock);
		j->run(j);
		pthread_mutex_lock(&o->lock);
		j->state = OFFLOAD_FINISHED;
		list_add_tail(&o->finished, &j->node);
		/* The counter only grows; a full one (2^64 - 2) cannot happen. */
		uint64_t one = 1;
		ssize_t n = write(o->efd, &one, sizeof one);
		(void)n;
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

/* The first job starts the threads, with every signal blocked in them:
 * the worker's signals are the loop's. */
static bool start_threads(struct offload *o)
{
	if (o->n_threads > 0)
		return true;
	if (o->threads_failed)
		return false;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (size_t i = 0; i < OFFLOAD_THREADS; i++) {
		int rc = pthread_create(&o->threads[o->n_threads], NULL, offload_thread, o);
		if (rc != 0) {
			log_warning("offload: cannot start a thread: %s", strerror(rc));
			break;
		}
		o->n_threads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (o->n_threads == 0)
		o->threads_failed = true;
	return o->n_threads > 0;
}

/* Moves every node of from to the tail of to (under the mutex). */
static void take_all(struct list_node *from, struct list_node *to)
{
	while (!list_empty(from)) {
		struct list_node *first = list_first(from);
		list_del(first);
		list_add_tail(to, first);
	}
}

static void ready_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	struct offload *o = arg;
	uint64_t n;
	while (read(fd, &n, sizeof n) < 0 && errno == EINTR)
		;
	struct list_node done;
	list_init(&done);
	pthread_mutex_lock(&o->lock);
	take_all(&o->finished, &done);
	pthread_mutex_unlock(&o->lock);
	/* One at a time from the head: a done call may cancel other jobs,
	 * which are still on this private list then (cancel sees them
	 * finished and marks them). */
	while (!list_empty(&done)) {
		struct offload_job *j = LIST_OWNER(list_first(&done), struct offload_job, node);
		list_del(&j->node);
		j->state = OFFLOAD_IDLE;
		if (j->cancelled)
			j->free(j);
		else
			j->done(j);
	}
}

struct offload *offload_new(struct event_base *base)
{
	struct offload *o = calloc(1, sizeof *o);
	if (!o)
		return NULL;
	o->base = base;
	list_init(&o->queue);
	list_init(&o->finished);
	o->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (o->efd < 0) {
		free(o);
		return NULL;
	}
	if (pthread_mutex_init(&o->lock, NULL) != 0) {
		close(o->efd);
		free(o);
		return NULL;
	}
	if (pthread_cond_init(&o->wake, NULL) != 0) {
		pthread_mutex_destroy(&o->lock);
		close(o->efd);
		free(o);
		return NULL;
	}
	if (pthread_mutex_init(&o->serial, NULL) != 0) {
		pthread_cond_destroy(&o->wake);
		pthread_mutex_destroy(&o->lock);
		close(o->efd);
		free(o);
		return NULL;
	}
	o->ready = event_new(base, o->efd, EV_READ | EV_PERSIST, ready_cb, o);
	if (!o->ready || event_add(o->ready, NULL) != 0) {
		if (o->ready)
			event_free(o->ready);
		pthread_mutex_destroy(&o->serial);
		pthread_cond_destroy(&o->wake);
		pthread_mutex_destroy(&o->lock);
		close(o->efd);
		free(o);
		return NULL;
	}
	return o;
}

bool offload_submit(struct offload *o, struct offload_job *j)
{
	if (!start_threads(o))
		return false;
	j->cancelled = false;
	pthread_mutex_lock(&o->lock);
	j->state = OFFLOAD_QUEUED;
	list_add_tail(&o->queue, &j->node);
	pthread_cond_signal(&o->wake);
	pthread_mutex_unlock(&o->lock);
	return true;
}

void offload_cancel(struct offload *o, struct offload_job *j)
{
	pthread_mutex_lock(&o->lock);
	enum offload_job_state state = j->state;
	if (state == OFFLOAD_QUEUED) {
		list_del(&j->node);
		j->state = OFFLOAD_IDLE;
	}
	pthread_mutex_unlock(&o->lock);
	/* Queued (taken off now) or idle: the job goes now. Running, or
	 * finished and not yet taken: ready_cb (or offload_free) frees it. */
	if (state == OFFLOAD_QUEUED || state == OFFLOAD_IDLE)
		j->free(j);
	else
		j->cancelled = true;
}

/* Frees the jobs of a list of the loop's own. */
static void free_jobs(struct list_node *jobs)
{
	while (!list_empty(jobs)) {
		struct offload_job *j = LIST_OWNER(list_first(jobs), struct offload_job, node);
		list_del(&j->node);
		j->state = OFFLOAD_IDLE;
		j->free(j);
	}
}

void offload_free(struct offload *o)
{
	if (!o)
		return;
	event_free(o->ready);
	o->ready = NULL;
	pthread_mutex_lock(&o->lock);
	o->stop = true;
	pthread_cond_broadcast(&o->wake);
	struct list_node gone;
	list_init(&gone);
	take_all(&o->queue, &gone);
	take_all(&o->finished, &gone);
	pthread_mutex_unlock(&o->lock);
	free_jobs(&gone);
	/* A thread inside a call ends it first: the calls have timeouts
	 * (ldap_auth.c's, seconds). */
	for (size_t i = 0; i < o->n_threads; i++)
		pthread_join(o->threads[i], NULL);
	/* What they finished meanwhile (cancelled: their owners are gone). */
	free_jobs(&o->finished);
	pthread_mutex_destroy(&o->serial);
	pthread_cond_destroy(&o->wake);
	pthread_mutex_destroy(&o->lock);
	close(o->efd);
	free(o);
}

pthread_mutex_t *offload_serial_lock(struct offload *o)
{
	return &o->serial;
}
