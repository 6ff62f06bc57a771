/* SPDX-License-Identifier: MIT */
/*
 * kdf: SCRAM key derivation on a few threads of the worker, results back
 * to its loop by an eventfd (see kdf.h).
 *
 * Why an eventfd and not event_active() from the thread: the latter needs
 * libevent's thread support (evthread_use_pthreads before the base is
 * made), which puts a lock around every event operation of the worker,
 * for every client, to serve a handful of logins. The eventfd is one more
 * fd the loop watches; the only lock is the queue's, taken by the loop
 * only when it hands over or collects a job.
 */
#include "kdf.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "log.h"

/* What a result is the result of. The password is known by its digest. */
struct kdf_key {
	uint8_t password[SCRAM_KEY_LEN];
	uint8_t salt[SCRAM_MAX_SALT_LEN];
	size_t salt_len;
	int iterations;
};

enum kdf_job_state { KDF_JOB_QUEUED, KDF_JOB_RUNNING, KDF_JOB_DONE };

struct kdf_job {
	struct kdf *k;
	/* Under k->lock: where it is (k->queue while QUEUED, k->done when
	 * DONE, on no list while RUNNING) and its state. */
	struct list_node node;
	enum kdf_job_state state;
	/* Loop only: every job not yet delivered (k->jobs), and the requests
	 * waiting for it. */
	struct list_node all;
	struct list_node waiters;
	/* Loop only: its result goes to the cache (a waiter that did not ask
	 * for none). */
	bool keep;
	/* Set before it is queued, read by its thread. */
	struct kdf_key key;
	char *password;
	/* Written by its thread before it goes to k->done. */
	bool ok;
	uint8_t salted[SCRAM_KEY_LEN];
	uint64_t queued_us;
};

struct kdf_cached {
	struct list_node node;        /* k->cache, most recently used first */
	struct kdf_key key;
	uint8_t salted[SCRAM_KEY_LEN];
};

struct kdf {
	struct event_base *base;
	int efd;
	struct event *ev;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct list_node queue;       /* under lock */
	struct list_node done;        /* under lock */
	atomic_bool stop;
	pthread_t threads[KDF_THREADS];
	size_t n_threads;
	bool threads_failed;          /* could not start any: derive inline */
	/* Loop only. */
	struct list_node jobs;
	struct list_node cache;
	size_t n_cache;
};

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void job_free(struct kdf_job *j)
{
	if (j->password) {
		OPENSSL_cleanse(j->password, strlen(j->password));
		free(j->password);
	}
	OPENSSL_cleanse(j, sizeof *j);
	free(j);
}

static void cached_free(struct kdf *k, struct kdf_cached *c)
{
	list_del(&c->node);
	k->n_cache--;
	OPENSSL_cleanse(c, sizeof *c);
	free(c);
}

static bool key_equal(const struct kdf_key *a, const struct kdf_key *b)
{
	return a->iterations == b->iterations && a->salt_len == b->salt_len &&
	       memcmp(a->salt, b->salt, a->salt_len) == 0 && memcmp(a->password, b->password, sizeof a->password) == 0;
}

static struct kdf_cached *cache_find(struct kdf *k, const struct kdf_key *key)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &k->cache) {
		struct kdf_cached *c = LIST_OWNER(pos, struct kdf_cached, node);
		if (key_equal(&c->key, key))
			return c;
	}
	return NULL;
}

static void cache_put(struct kdf *k, const struct kdf_key *key, const uint8_t *salted)
{
	struct kdf_cached *c = cache_find(k, key);
	if (!c) {
		if (k->n_cache >= KDF_CACHE_MAX)
			cached_free(k, LIST_OWNER(list_last(&k->cache), struct kdf_cached, node));
		if (!(c = calloc(1, sizeof *c)))
			return;   /* not cached: derived again next time */
		c->key = *key;
		k->n_cache++;
	} else {
		list_del(&c->node);
	}
	memcpy(c->salted, salted, SCRAM_KEY_LEN);
	list_add_head(&k->cache, &c->node);
}

/* ---- the threads ---- */

static void *kdf_thread(void *arg)
{
	struct kdf *k = arg;
	pthread_mutex_lock(&k->lock);
	for (;;) {
		while (list_empty(&k->queue) && !atomic_load(&k->stop))
			pthread_cond_wait(&k->wake, &k->lock);
		if (atomic_load(&k->stop))
			break;
		struct kdf_job *j = LIST_OWNER(list_first(&k->queue), struct kdf_job, node);
		list_del(&j->node);
		j->state = KDF_JOB_RUNNING;
		pthread_mutex_unlock(&k->lock);
		j->ok = scram_salted_password(j->password, j->key.salt, j->key.salt_len, j->key.iterations, &k->stop,
					      j->salted);
		pthread_mutex_lock(&k->lock);
		j->state = KDF_JOB_DONE;
		list_add_tail(&k->done, &j->node);
		/* The counter only grows; a full one (2^64 - 2) cannot happen. */
		uint64_t one = 1;
		ssize_t w = write(k->efd, &one, sizeof one);
		(void)w;
	}
	pthread_mutex_unlock(&k->lock);
	return NULL;
}

/* The first job starts the threads, with every signal blocked in them:
 * the worker's signals are the loop's. false: none could be started. */
static bool start_threads(struct kdf *k)
{
	if (k->n_threads > 0)
		return true;
	if (k->threads_failed)
		return false;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (size_t i = 0; i < KDF_THREADS; i++) {
		int rc = pthread_create(&k->threads[k->n_threads], NULL, kdf_thread, k);
		if (rc != 0) {
			log_warning("SCRAM key derivation: cannot start a thread: %s", strerror(rc));
			break;
		}
		k->n_threads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (k->n_threads == 0) {
		log_warning("SCRAM key derivation runs on the event loop: no thread could be started");
		k->threads_failed = true;
	}
	return k->n_threads > 0;
}

/* ---- the loop's side ---- */

static void deliver(struct kdf *k, struct kdf_job *j)
{
	list_del(&j->all);
	if (j->ok && j->keep)
		cache_put(k, &j->key, j->salted);
	log_debug("SCRAM key derivation of %d iterations: %s after %.1f ms (%s)", j->key.iterations,
		  j->ok ? "done" : "failed", (double)(now_us() - j->queued_us) / 1000.0,
		  list_empty(&j->waiters) ? "no login waits for it any more" : "resuming the logins");
	/* One at a time from the head: a done event may cancel other waiters
	 * of this job (its owner closing others), which takes them off. */
	while (!list_empty(&j->waiters)) {
		struct kdf_request *req = LIST_OWNER(list_first(&j->waiters), struct kdf_request, node);
		list_del(&req->node);
		req->job = NULL;
		req->done(req, j->ok, j->salted);
	}
	job_free(j);
}

static void kdf_ready_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	struct kdf *k = arg;
	uint64_t n;
	while (read(fd, &n, sizeof n) < 0 && errno == EINTR)
		;
	struct list_node done;
	list_init(&done);
	pthread_mutex_lock(&k->lock);
	while (!list_empty(&k->done)) {
		struct list_node *first = list_first(&k->done);
		list_del(first);
		list_add_tail(&done, first);
	}
	pthread_mutex_unlock(&k->lock);
	while (!list_empty(&done)) {
		struct kdf_job *j = LIST_OWNER(list_first(&done), struct kdf_job, node);
		list_del(&j->node);
		deliver(k, j);
	}
}

struct kdf *kdf_new(struct event_base *base)
{
	struct kdf *k = calloc(1, sizeof *k);
	if (!k)
		return NULL;
	k->base = base;
	list_init(&k->queue);
	list_init(&k->done);
	list_init(&k->jobs);
	list_init(&k->cache);
	atomic_init(&k->stop, false);
	k->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (k->efd < 0) {
		free(k);
		return NULL;
	}
	if (pthread_mutex_init(&k->lock, NULL) != 0) {
		close(k->efd);
		free(k);
		return NULL;
	}
	if (pthread_cond_init(&k->wake, NULL) != 0) {
		pthread_mutex_destroy(&k->lock);
		close(k->efd);
		free(k);
		return NULL;
	}
	k->ev = event_new(base, k->efd, EV_READ | EV_PERSIST, kdf_ready_cb, k);
	if (!k->ev || event_add(k->ev, NULL) != 0) {
		if (k->ev)
			event_free(k->ev);
		pthread_cond_destroy(&k->wake);
		pthread_mutex_destroy(&k->lock);
		close(k->efd);
		free(k);
		return NULL;
	}
	return k;
}

void kdf_forget(struct kdf *k)
{
	if (!k)
		return;
	while (!list_empty(&k->cache))
		cached_free(k, LIST_OWNER(list_first(&k->cache), struct kdf_cached, node));
}

void kdf_free(struct kdf *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&k->lock);
	atomic_store(&k->stop, true);
	pthread_cond_broadcast(&k->wake);
	pthread_mutex_unlock(&k->lock);
	for (size_t i = 0; i < k->n_threads; i++)
		pthread_join(k->threads[i], NULL);
	/* No thread left: every job, queued, stopped or done, is on k->jobs. */
	while (!list_empty(&k->jobs)) {
		struct kdf_job *j = LIST_OWNER(list_first(&k->jobs), struct kdf_job, all);
		list_del(&j->all);
		while (!list_empty(&j->waiters)) {
			struct kdf_request *req = LIST_OWNER(list_first(&j->waiters), struct kdf_request, node);
			list_del(&req->node);
			req->job = NULL;
		}
		job_free(j);
	}
	kdf_forget(k);
	event_free(k->ev);
	close(k->efd);
	pthread_cond_destroy(&k->wake);
	pthread_mutex_destroy(&k->lock);
	free(k);
}

static bool make_key(const char *password, const uint8_t *salt, size_t salt_len, int iterations,
		     struct kdf_key *key)
{
	unsigned int n = 0;
	memset(key, 0, sizeof *key);
	if (salt_len == 0 || salt_len > sizeof key->salt)
		return false;
	memcpy(key->salt, salt, salt_len);
	key->salt_len = salt_len;
	key->iterations = iterations;
	return EVP_Digest(password, strlen(password), key->password, &n, EVP_sha256(), NULL) == 1 &&
	       n == SCRAM_KEY_LEN;
}

enum kdf_result kdf_derive(struct kdf *k, struct kdf_request *req, const char *password, const uint8_t *salt,
			   size_t salt_len, int iterations, uint8_t out[SCRAM_KEY_LEN])
{
	kdf_cancel(req);
	if (!k || (k->threads_failed && k->n_threads == 0))
		return scram_salted_password(password, salt, salt_len, iterations, NULL, out) ? KDF_DONE : KDF_FAILED;
	struct kdf_key key;
	if (!make_key(password, salt, salt_len, iterations, &key))
		return KDF_FAILED;
	enum kdf_result r = KDF_PENDING;
	struct kdf_cached *c = cache_find(k, &key);
	if (c) {
		memcpy(out, c->salted, SCRAM_KEY_LEN);
		list_del(&c->node);
		list_add_head(&k->cache, &c->node);
		r = KDF_DONE;
		goto out;
	}
	/* The same derivation under way for another login: wait for it too. */
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &k->jobs) {
		struct kdf_job *j = LIST_OWNER(pos, struct kdf_job, all);
		if (key_equal(&j->key, &key)) {
			j->keep = j->keep || !req->uncached;
			list_add_tail(&j->waiters, &req->node);
			req->job = j;
			goto out;
		}
	}
	if (!start_threads(k)) {
		r = scram_salted_password(password, salt, salt_len, iterations, NULL, out) ? KDF_DONE : KDF_FAILED;
		goto out;
	}
	struct kdf_job *j = calloc(1, sizeof *j);
	if (!j || !(j->password = strdup(password))) {
		free(j);
		r = KDF_FAILED;
		goto out;
	}
	j->k = k;
	j->keep = !req->uncached;
	j->key = key;
	j->queued_us = now_us();
	j->state = KDF_JOB_QUEUED;
	list_init(&j->waiters);
	list_add_tail(&j->waiters, &req->node);
	req->job = j;
	list_add_tail(&k->jobs, &j->all);
	pthread_mutex_lock(&k->lock);
	list_add_tail(&k->queue, &j->node);
	pthread_cond_signal(&k->wake);
	pthread_mutex_unlock(&k->lock);
out:
	OPENSSL_cleanse(&key, sizeof key);
	return r;
}

void kdf_cancel(struct kdf_request *req)
{
	struct kdf_job *j = req->job;
	if (!j)
		return;
	list_del(&req->node);
	req->job = NULL;
	if (!list_empty(&j->waiters))
		return;
	/* Nobody waits for it: not started, it is dropped; running or done,
	 * it ends in the cache. */
	struct kdf *k = j->k;
	bool drop = false;
	pthread_mutex_lock(&k->lock);
	if (j->state == KDF_JOB_QUEUED) {
		list_del(&j->node);
		drop = true;
	}
	pthread_mutex_unlock(&k->lock);
	if (drop) {
		list_del(&j->all);
		job_free(j);
	}
}
