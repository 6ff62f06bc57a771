/* SPDX-License-Identifier: MIT */
/*
 * shm: the shared segment. One anonymous shared mapping made before fork;
 * pages of slots nobody uses are never touched, so sizing for the maximum
 * costs address space, not memory.
 */
#include "shm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "log.h"

_Static_assert(sizeof(struct shm_cancel_slot) % 8 == 0, "cancel slots stay 8-byte aligned");
_Static_assert(sizeof(struct stats) % 8 == 0, "stats slots stay 8-byte aligned");

_Static_assert(QSTATS_POOLS == SHM_MAX_POOLS, "query statistics count pools by their shm number");

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

bool shm_create(struct shm *shm, uint32_t n_workers, uint32_t max_client_conn)
{
	if (n_workers == 0 || n_workers > SHM_MAX_WORKERS)
		return false;
	uint32_t per = max_client_conn + 16;
	if (per >= (1u << SHM_CANCEL_WORKER_SHIFT) - 1)
		per = (1u << SHM_CANCEL_WORKER_SHIFT) - 2;
	size_t off = align8(sizeof(struct shm_header));
	size_t off_stats = off;
	off += align8((size_t)n_workers * SHM_MAX_POOLS * sizeof(struct stats));
	size_t off_avg = off;
	off += align8((size_t)n_workers * SHM_MAX_POOLS * sizeof(struct stats));
	size_t off_gauges = off;
	off += align8((size_t)n_workers * SHM_MAX_POOLS * sizeof(struct shm_pool_gauges));
	size_t off_conns = off;
	off += align8((size_t)n_workers * SHM_MAX_TARGETS * sizeof(_Atomic int32_t));
	size_t off_waiters = off;
	off += align8((size_t)n_workers * SHM_MAX_TARGETS * sizeof(_Atomic int32_t));
	size_t off_cancel = off;
	off += align8((size_t)n_workers * per * sizeof(struct shm_cancel_slot));
	size_t off_target_counts = off;
	off += align8((size_t)n_workers * SHM_MAX_TARGETS * sizeof(struct shm_target_counts));
	size_t off_backends = off;
	off += align8((size_t)SHM_BACKEND_SLOTS * sizeof(struct shm_backend_slot));
	size_t off_errors = off;
	off += align8((size_t)n_workers * sizeof(struct errstats_table));
	/* (6 MB a worker, its pages touched only as shapes come: query_stats) */
	size_t off_qstats = off;
	off += align8((size_t)n_workers * sizeof(struct qstats_table));
	size_t off_qresets = off;
	off += align8(sizeof(struct qstats_resets));
	/* Room for about 320 bytes of row per possible client (a SHOW CLIENTS
	 * row is ~200), at least 64 kB, at most 16 MB per slot. Pages are
	 * only touched when a worker writes rows. */
	size_t dump_slot = 320 * ((size_t)max_client_conn + 64);
	if (dump_slot < 64 * 1024)
		dump_slot = 64 * 1024;
	if (dump_slot > 16 * 1024 * 1024)
		dump_slot = 16 * 1024 * 1024;
	dump_slot = align8(dump_slot);
	size_t off_dump = off;
	off += (size_t)SHM_DUMP__COUNT * n_workers * dump_slot;
	void *p = mmap(NULL, off, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		log_error("cannot map %zu bytes of shared memory: %s", off, strerror(errno));
		return false;
	}
	struct shm_header *h = p;
	h->magic = SHM_MAGIC;
	h->version = SHM_VERSION;
	h->size = off;
	h->n_workers = n_workers;
	h->cancel_per_worker = per;
	h->off_stats = off_stats;
	h->off_avg = off_avg;
	h->off_gauges = off_gauges;
	h->off_conns = off_conns;
	h->off_waiters = off_waiters;
	h->off_cancel = off_cancel;
	h->off_target_counts = off_target_counts;
	h->off_backends = off_backends;
	h->off_errors = off_errors;
	h->off_qstats = off_qstats;
	h->off_qresets = off_qresets;
	h->off_dump = off_dump;
	h->dump_slot_size = dump_slot;
	pthread_mutexattr_t attr;
	int rc = pthread_mutexattr_init(&attr);
	if (rc == 0)
		rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	/* A worker killed while holding a lock must not wedge the others. */
	if (rc == 0)
		rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	bool have_lock = false;
	if (rc == 0)
		rc = pthread_mutex_init(&h->lock, &attr);
	if (rc == 0) {
		have_lock = true;
		rc = pthread_mutex_init(&h->open_lock, &attr);
	}
	pthread_mutexattr_destroy(&attr);
	if (rc != 0) {
		log_error("cannot make the shared segment's locks: %s", strerror(rc));
		if (have_lock)
			pthread_mutex_destroy(&h->lock);
		munmap(p, off);
		return false;
	}
	shm->h = h;
	shm->size = off;
	return true;
}

void shm_destroy(struct shm *shm)
{
	if (shm->h)
		munmap(shm->h, shm->size);
	shm->h = NULL;
}

static void lock(struct shm *shm)
{
	if (pthread_mutex_lock(&shm->h->lock) == EOWNERDEAD)
		/* The tables are updated so that a half-done change is harmless
		 * (a slot is marked used last). */
		pthread_mutex_consistent(&shm->h->lock);
}

static void unlock(struct shm *shm) { pthread_mutex_unlock(&shm->h->lock); }

int shm_pool_slot(struct shm *shm, const char *name, const char *user)
{
	struct shm_header *h = shm->h;
	int found = -1, free_slot = -1;
	lock(shm);
	for (int i = 0; i < SHM_MAX_POOLS; i++) {
		struct shm_pool_entry *e = &h->pools[i];
		if (!e->used) {
			if (free_slot < 0)
				free_slot = i;
			continue;
		}
		if (strcmp(e->name, name) == 0 && strcmp(e->user, user) == 0) {
			found = i;
			break;
		}
	}
	if (found < 0 && free_slot >= 0 && strlen(name) < sizeof h->pools[0].name &&
	    strlen(user) < sizeof h->pools[0].user) {
		struct shm_pool_entry *e = &h->pools[free_slot];
		snprintf(e->name, sizeof e->name, "%s", name);
		snprintf(e->user, sizeof e->user, "%s", user);
		e->used = 1;
		found = free_slot;
	}
	unlock(shm);
	return found;
}

int shm_target_slot(struct shm *shm, int pool, int shard, const char *host, int port, const char *database)
{
	struct shm_header *h = shm->h;
	int found = -1, free_slot = -1;
	if (pool < 0)
		return -1;
	lock(shm);
	for (int i = 0; i < SHM_MAX_TARGETS; i++) {
		struct shm_target_entry *e = &h->targets[i];
		if (!e->used) {
			if (free_slot < 0)
				free_slot = i;
			continue;
		}
		if (e->pool == (uint32_t)pool && e->shard == shard && e->port == port && strcmp(e->host, host) == 0 &&
		    strcmp(e->database, database) == 0) {
			found = i;
			break;
		}
	}
	if (found < 0 && free_slot >= 0 && strlen(host) < sizeof h->targets[0].host &&
	    strlen(database) < sizeof h->targets[0].database) {
		struct shm_target_entry *e = &h->targets[free_slot];
		e->pool = (uint32_t)pool;
		e->shard = shard;
		e->port = port;
		snprintf(e->host, sizeof e->host, "%s", host);
		snprintf(e->database, sizeof e->database, "%s", database);
		/* Unknown until the lag monitor measured it (lagmon.c). */
		atomic_store(&e->lag_bytes, -1);
		atomic_store(&e->lag_ms, -1);
		atomic_store(&e->wal_at_us, 0);
		atomic_store(&e->wal_lsn, 0);
		e->used = 1;
		found = free_slot;
	}
	unlock(shm);
	return found;
}

static void *at(struct shm *shm, uint64_t off) { return (char *)shm->h + off; }

struct stats *shm_stats(struct shm *shm, int worker, int pool)
{
	return (struct stats *)at(shm, shm->h->off_stats) + (size_t)worker * SHM_MAX_POOLS + (size_t)pool;
}

struct stats *shm_stats_avg(struct shm *shm, int worker, int pool)
{
	return (struct stats *)at(shm, shm->h->off_avg) + (size_t)worker * SHM_MAX_POOLS + (size_t)pool;
}

struct shm_pool_gauges *shm_gauges(struct shm *shm, int worker, int pool)
{
	return (struct shm_pool_gauges *)at(shm, shm->h->off_gauges) + (size_t)worker * SHM_MAX_POOLS + (size_t)pool;
}

void shm_gauges_clear(struct shm *shm, int worker, int pool)
{
	struct shm_pool_gauges *g = shm_gauges(shm, worker, pool);
	atomic_store(&g->cl_active, 0);
	atomic_store(&g->cl_waiting, 0);
	atomic_store(&g->sv_active, 0);
	atomic_store(&g->sv_idle, 0);
	atomic_store(&g->sv_used, 0);
	atomic_store(&g->sv_login, 0);
	atomic_store(&g->maxwait_us, 0);
	atomic_store(&g->writes_drained, 0);
}

bool shm_writes_drained_all(struct shm *shm, int pool)
{
	if (pool < 0)
		return false;
	for (uint32_t w = 0; w < shm->h->n_workers; w++)
		if (!atomic_load_explicit(&shm_gauges(shm, (int)w, pool)->writes_drained, memory_order_acquire))
			return false;
	return true;
}

void shm_stats_total(struct shm *shm, int pool, struct stats *out)
{
	memset(out, 0, sizeof *out);
	if (pool < 0)
		return;
	for (uint32_t w = 0; w < shm->h->n_workers; w++)
		stats_sum(out, shm_stats(shm, (int)w, pool));
}

void shm_stats_avg_total(struct shm *shm, int pool, struct stats *out)
{
	memset(out, 0, sizeof *out);
	if (pool < 0)
		return;
	uint64_t xt = 0, qt = 0, wt = 0;
	for (uint32_t w = 0; w < shm->h->n_workers; w++) {
		const struct stats *a = shm_stats_avg(shm, (int)w, pool);
		for (int i = 0; i < STAT__COUNT; i++)
			if (i != STAT_XACT_TIME && i != STAT_QUERY_TIME && i != STAT_WAIT_TIME)
				out->v[i] += a->v[i];
		/* mean times, weighted by each worker's event counts */
		xt += a->v[STAT_XACT_TIME] * a->v[STAT_XACT];
		qt += a->v[STAT_QUERY_TIME] * a->v[STAT_QUERY];
		wt += a->v[STAT_WAIT_TIME] * a->v[STAT_SERVER_ASSIGNMENT];
	}
	out->v[STAT_XACT_TIME] = out->v[STAT_XACT] ? xt / out->v[STAT_XACT] : 0;
	out->v[STAT_QUERY_TIME] = out->v[STAT_QUERY] ? qt / out->v[STAT_QUERY] : 0;
	out->v[STAT_WAIT_TIME] = out->v[STAT_SERVER_ASSIGNMENT] ? wt / out->v[STAT_SERVER_ASSIGNMENT] : 0;
}

void shm_gauges_total(struct shm *shm, int pool, int32_t *cl_active, int32_t *cl_waiting, int32_t *sv_active,
		      int32_t *sv_idle, int32_t *sv_used, int32_t *sv_login, int64_t *maxwait_us)
{
	*cl_active = *cl_waiting = *sv_active = *sv_idle = *sv_used = *sv_login = 0;
	*maxwait_us = 0;
	if (pool < 0)
		return;
	for (uint32_t w = 0; w < shm->h->n_workers; w++) {
		struct shm_pool_gauges *g = shm_gauges(shm, (int)w, pool);
		*cl_active += atomic_load_explicit(&g->cl_active, memory_order_relaxed);
		*cl_waiting += atomic_load_explicit(&g->cl_waiting, memory_order_relaxed);
		*sv_active += atomic_load_explicit(&g->sv_active, memory_order_relaxed);
		*sv_idle += atomic_load_explicit(&g->sv_idle, memory_order_relaxed);
		*sv_used += atomic_load_explicit(&g->sv_used, memory_order_relaxed);
		*sv_login += atomic_load_explicit(&g->sv_login, memory_order_relaxed);
		int64_t mw = atomic_load_explicit(&g->maxwait_us, memory_order_relaxed);
		if (mw > *maxwait_us)
			*maxwait_us = mw;
	}
}

static _Atomic int32_t *conns(struct shm *shm, int worker, int target)
{
	return (_Atomic int32_t *)at(shm, shm->h->off_conns) + (size_t)worker * SHM_MAX_TARGETS + (size_t)target;
}

static _Atomic int32_t *waiters(struct shm *shm, int worker, int target)
{
	return (_Atomic int32_t *)at(shm, shm->h->off_waiters) + (size_t)worker * SHM_MAX_TARGETS + (size_t)target;
}

void shm_conns_set(struct shm *shm, int worker, int target, int32_t n)
{
	if (target >= 0)
		atomic_store_explicit(conns(shm, worker, target), n, memory_order_relaxed);
}

int32_t shm_conns_total(struct shm *shm, int target)
{
	int32_t n = 0;
	if (target < 0)
		return 0;
	for (uint32_t w = 0; w < shm->h->n_workers; w++)
		n += atomic_load_explicit(conns(shm, (int)w, target), memory_order_relaxed);
	return n;
}

bool shm_open_lock(struct shm *shm)
{
	/* A deadline rather than a plain lock: a holder that is stopped (a
	 * debugger, SIGSTOP) must not stall every other worker's loop.
	 * timedlock counts on CLOCK_REALTIME: a clock step shortens or
	 * lengthens this one wait, either harmless. */
	struct timespec deadline;
	if (clock_gettime(CLOCK_REALTIME, &deadline) != 0)
		return false;
	deadline.tv_nsec += (long)SHM_OPEN_LOCK_WAIT_MS * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec += deadline.tv_nsec / 1000000000L;
		deadline.tv_nsec %= 1000000000L;
	}
	int rc = pthread_mutex_timedlock(&shm->h->open_lock, &deadline);
	if (rc == EOWNERDEAD) {
		/* Its holder died between reading the sums and storing its own
		 * count: nothing here is half-written that matters (a dead
		 * worker's counts are zeroed when it restarts). */
		if (pthread_mutex_consistent(&shm->h->open_lock) != 0) {
			pthread_mutex_unlock(&shm->h->open_lock);
			return false;
		}
		return true;
	}
	if (rc != 0) {
		log_debug("the shared open lock is not free after %d ms (%s): no connection opened now",
			  SHM_OPEN_LOCK_WAIT_MS, strerror(rc));
		return false;
	}
	return true;
}

void shm_open_unlock(struct shm *shm)
{
	pthread_mutex_unlock(&shm->h->open_lock);
}

void shm_waiters_set(struct shm *shm, int worker, int target, int32_t n)
{
	if (target >= 0)
		atomic_store_explicit(waiters(shm, worker, target), n, memory_order_relaxed);
}

int32_t shm_waiters_others(struct shm *shm, int worker, int target)
{
	int32_t n = 0;
	if (target < 0)
		return 0;
	for (uint32_t w = 0; w < shm->h->n_workers; w++)
		if ((int)w != worker)
			n += atomic_load_explicit(waiters(shm, (int)w, target), memory_order_relaxed);
	return n;
}

struct shm_target_counts *shm_target_counts(struct shm *shm, int worker, int target)
{
	if (target < 0 || target >= SHM_MAX_TARGETS)
		return NULL;
	return (struct shm_target_counts *)at(shm, shm->h->off_target_counts) + (size_t)worker * SHM_MAX_TARGETS +
	       (size_t)target;
}

struct errstats_table *shm_errstats(struct shm *shm, int worker)
{
	if (!shm || !shm->h || worker < 0 || (uint32_t)worker >= shm->h->n_workers)
		return NULL;
	return (struct errstats_table *)at(shm, shm->h->off_errors) + worker;
}

size_t shm_errstats_rows(struct shm *shm, struct errstats_row *rows, size_t max, uint64_t *untracked)
{
	struct errstats_table *t[SHM_MAX_WORKERS];
	uint32_t n = shm && shm->h ? shm->h->n_workers : 0;
	for (uint32_t i = 0; i < n; i++)
		t[i] = shm_errstats(shm, (int)i);
	return errstats_collect(t, n, rows, max, untracked);
}

size_t shm_errstats_all(struct shm *shm, struct errstats_row **rows, uint64_t *untracked)
{
	size_t max = (size_t)(shm && shm->h ? shm->h->n_workers : 1) * ERRSTATS_SLOTS;
	*untracked = 0;
	*rows = calloc(max, sizeof **rows);
	return *rows ? shm_errstats_rows(shm, *rows, max, untracked) : 0;
}

struct qstats_table *shm_qstats(struct shm *shm, int worker)
{
	if (!shm || !shm->h || worker < 0 || (uint32_t)worker >= shm->h->n_workers)
		return NULL;
	return (struct qstats_table *)at(shm, shm->h->off_qstats) + worker;
}

struct qstats_resets *shm_qstats_resets(struct shm *shm)
{
	return shm && shm->h ? (struct qstats_resets *)at(shm, shm->h->off_qresets) : NULL;
}

/* Every worker's table into t; how many. */
static uint32_t qstats_tables(struct shm *shm, struct qstats_table *t[SHM_MAX_WORKERS])
{
	uint32_t n = shm && shm->h ? shm->h->n_workers : 0;
	for (uint32_t i = 0; i < n; i++)
		t[i] = shm_qstats(shm, (int)i);
	return n;
}

size_t shm_qstats_all(struct shm *shm, int pool, struct qstats_row **rows)
{
	struct qstats_table *t[SHM_MAX_WORKERS];
	uint32_t n = qstats_tables(shm, t);
	*rows = NULL;
	return n ? qstats_collect(t, n, shm_qstats_resets(shm), pool, rows) : 0;
}

uint64_t shm_qstats_dropped(struct shm *shm, int pool)
{
	struct qstats_table *t[SHM_MAX_WORKERS];
	uint32_t n = qstats_tables(shm, t);
	return qstats_dropped(t, n, pool);
}

size_t shm_qstats_top(struct shm *shm, size_t top, struct qstats_row **rows)
{
	struct qstats_table *t[SHM_MAX_WORKERS];
	uint32_t n = qstats_tables(shm, t);
	*rows = NULL;
	return n ? qstats_collect_top(t, n, shm_qstats_resets(shm), top, rows) : 0;
}

void shm_target_counts_total(struct shm *shm, int target, uint64_t *xacts, uint64_t routed[SHM_ROUTE_VIA])
{
	*xacts = 0;
	for (int v = 0; v < SHM_ROUTE_VIA; v++)
		routed[v] = 0;
	if (target < 0 || target >= SHM_MAX_TARGETS)
		return;
	for (uint32_t w = 0; w < shm->h->n_workers; w++) {
		struct shm_target_counts *t = shm_target_counts(shm, (int)w, target);
		*xacts += atomic_load_explicit(&t->xacts, memory_order_relaxed);
		for (int v = 0; v < SHM_ROUTE_VIA; v++)
			routed[v] += atomic_load_explicit(&t->routed[v], memory_order_relaxed);
	}
}

int32_t shm_clients_total(struct shm *shm)
{
	int32_t n = 0;
	for (uint32_t w = 0; w < shm->h->n_workers; w++)
		n += atomic_load_explicit(&shm->h->workers[w].clients, memory_order_relaxed);
	return n;
}

void shm_pool_clients_add(struct shm *shm, int worker, int pool, int32_t delta)
{
	if (pool >= 0)
		atomic_fetch_add_explicit(&shm_gauges(shm, worker, pool)->clients, delta, memory_order_relaxed);
}

int32_t shm_pool_clients_of(struct shm *shm, const char *name, const char *user)
{
	struct shm_header *h = shm->h;
	int32_t n = 0;
	for (int i = 0; i < SHM_MAX_POOLS; i++) {
		const struct shm_pool_entry *e = &h->pools[i];
		if (!e->used || (name && strcmp(e->name, name) != 0) || (user && strcmp(e->user, user) != 0))
			continue;
		for (uint32_t w = 0; w < h->n_workers; w++)
			n += atomic_load_explicit(&shm_gauges(shm, (int)w, i)->clients, memory_order_relaxed);
	}
	return n;
}

void shm_stats_of_name(struct shm *shm, const char *name, struct stats *out)
{
	struct shm_header *h = shm->h;
	memset(out, 0, sizeof *out);
	for (int i = 0; i < SHM_MAX_POOLS; i++) {
		const struct shm_pool_entry *e = &h->pools[i];
		if (!e->used || strcmp(e->name, name) != 0)
			continue;
		for (uint32_t w = 0; w < h->n_workers; w++)
			stats_sum(out, shm_stats(shm, (int)w, i));
	}
}

void shm_worker_reset(struct shm *shm, int worker)
{
	for (int t = 0; t < SHM_MAX_TARGETS; t++) {
		atomic_store_explicit(conns(shm, worker, t), 0, memory_order_relaxed);
		atomic_store_explicit(waiters(shm, worker, t), 0, memory_order_relaxed);
	}
	for (int p = 0; p < SHM_MAX_POOLS; p++) {
		shm_gauges_clear(shm, worker, p);
		atomic_store(&shm_gauges(shm, worker, p)->clients, 0);
	}
	for (uint32_t s = 0; s < shm->h->cancel_per_worker; s++) {
		struct shm_cancel_slot *c = shm_cancel(shm, worker, s);
		if (atomic_load(&c->secret))
			atomic_store(&c->secret, 0);
	}
	struct shm_worker *wk = &shm->h->workers[worker];
	atomic_store(&wk->clients, 0);
	atomic_store(&wk->servers, 0);
	atomic_store(&wk->ready, 0);
}

struct shm_cancel_slot *shm_cancel(struct shm *shm, int worker, uint32_t slot)
{
	return (struct shm_cancel_slot *)at(shm, shm->h->off_cancel) +
	       (size_t)worker * shm->h->cancel_per_worker + slot;
}

void shm_cancel_publish(struct shm *shm, int worker, uint32_t slot, uint32_t secret, int kind, const uint8_t *ext)
{
	if (slot >= shm->h->cancel_per_worker)
		return;
	struct shm_cancel_slot *c = shm_cancel(shm, worker, slot);
	/* seqlock: readers retry while seq is odd or changed under them */
	uint32_t seq = atomic_load_explicit(&c->seq, memory_order_relaxed);
	atomic_store_explicit(&c->seq, seq + 1, memory_order_release);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&c->secret, secret, memory_order_relaxed);
	c->kind = (uint8_t)kind;
	if (ext)
		memcpy(c->ext, ext, sizeof c->ext);
	else
		memset(c->ext, 0, sizeof c->ext);
	atomic_store_explicit(&c->seq, seq + 2, memory_order_release);
	/* A new state of the slot: an older cancel request no longer applies. */
	atomic_store_explicit(&c->cancel_req, 0, memory_order_relaxed);
}

bool shm_cancel_flag(struct shm *shm, int worker, uint32_t slot, int kind, uint32_t secret, const uint8_t *ext)
{
	if (worker < 0 || (uint32_t)worker >= shm->h->n_workers || slot >= shm->h->cancel_per_worker || secret == 0)
		return false;
	struct shm_cancel_slot *c = shm_cancel(shm, worker, slot);
	uint8_t want[sizeof c->ext] = { 0 };
	if (ext)
		memcpy(want, ext, sizeof want);
	for (int tries = 0; tries < 100; tries++) {
		uint32_t s1 = atomic_load_explicit(&c->seq, memory_order_acquire);
		if (s1 & 1)
			continue;
		uint32_t sec = atomic_load_explicit(&c->secret, memory_order_relaxed);
		uint8_t k = c->kind;
		uint8_t got[sizeof c->ext];
		memcpy(got, c->ext, sizeof got);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&c->seq, memory_order_relaxed) != s1)
			continue;
		/* Every secret byte, compared in a time that does not tell how
		 * many matched. */
		uint8_t diff = 0;
		for (size_t i = 0; i < sizeof got; i++)
			diff |= (uint8_t)(got[i] ^ want[i]);
		if (sec != secret || k != (uint8_t)kind || diff != 0)
			return false;
		atomic_store_explicit(&c->cancel_req, secret, memory_order_release);
		return true;
	}
	return false;
}

void shm_cancel_forget_request(struct shm *shm, int worker, uint32_t slot)
{
	if (slot >= shm->h->cancel_per_worker)
		return;
	struct shm_cancel_slot *c = shm_cancel(shm, worker, slot);
	/* (read first: the usual slot has no request, and its cache line
	 * then stays shared) */
	if (atomic_load_explicit(&c->cancel_req, memory_order_relaxed) != 0)
		atomic_store_explicit(&c->cancel_req, 0, memory_order_relaxed);
}

bool shm_cancel_take_flag(struct shm *shm, int worker, uint32_t slot, uint32_t secret)
{
	if (slot >= shm->h->cancel_per_worker)
		return false;
	struct shm_cancel_slot *c = shm_cancel(shm, worker, slot);
	if (atomic_load_explicit(&c->cancel_req, memory_order_acquire) == 0)
		return false;
	return atomic_exchange_explicit(&c->cancel_req, 0, memory_order_acq_rel) == secret;
}

bool shm_ban_set(struct shm *shm, const char *host, int port, int64_t now, int seconds, enum ban_source source,
		 const char *reason)
{
	lock(shm);
	bool ok = bans_set(&shm->h->bans, host, port, now, seconds, source, reason);
	atomic_fetch_add(&shm->h->bans_gen, 1);
	unlock(shm);
	return ok;
}

bool shm_ban_clear(struct shm *shm, const char *host, int port)
{
	lock(shm);
	bool ok = bans_clear(&shm->h->bans, host, port);
	atomic_fetch_add(&shm->h->bans_gen, 1);
	unlock(shm);
	return ok;
}

bool shm_ban_set_auto(struct shm *shm, const char *host, int port, int64_t now, int seconds, const char *reason,
		      bool *was_banned)
{
	lock(shm);
	const struct ban *b = bans_get(&shm->h->bans, host, port, now);
	*was_banned = b != NULL;
	/* An admin's ban says more than a measurement: it is left as it is. */
	bool ok = true;
	if (!b || b->source == BAN_SOURCE_AUTO) {
		/* A renewal keeps the time the ban began (SHOW BANS banned_at). */
		int64_t since = b ? b->banned_at : now;
		ok = bans_set(&shm->h->bans, host, port, now, seconds, BAN_SOURCE_AUTO, reason);
		if (ok) {
			struct ban *nb = (struct ban *)bans_get(&shm->h->bans, host, port, now);
			if (nb)
				nb->banned_at = since;
		}
		atomic_fetch_add(&shm->h->bans_gen, 1);
	}
	unlock(shm);
	return ok;
}

bool shm_ban_clear_auto(struct shm *shm, const char *host, int port, int64_t now, const char *reason_prefix)
{
	lock(shm);
	const struct ban *b = bans_get(&shm->h->bans, host, port, now);
	bool clear = b && b->source == BAN_SOURCE_AUTO && strncmp(b->reason, reason_prefix, strlen(reason_prefix)) == 0;
	if (clear) {
		(void)bans_clear(&shm->h->bans, host, port);
		atomic_fetch_add(&shm->h->bans_gen, 1);
	}
	unlock(shm);
	return clear;
}

void shm_lag_set(struct shm *shm, int target, int64_t lag_bytes, int64_t lag_ms)
{
	if (target < 0 || target >= SHM_MAX_TARGETS)
		return;
	struct shm_target_entry *e = &shm->h->targets[target];
	atomic_store_explicit(&e->lag_bytes, lag_bytes, memory_order_relaxed);
	atomic_store_explicit(&e->lag_ms, lag_ms, memory_order_relaxed);
}

void shm_lag_get(struct shm *shm, int target, int64_t *lag_bytes, int64_t *lag_ms)
{
	*lag_bytes = *lag_ms = -1;
	if (!shm || target < 0 || target >= SHM_MAX_TARGETS)
		return;
	const struct shm_target_entry *e = &shm->h->targets[target];
	*lag_bytes = atomic_load_explicit(&e->lag_bytes, memory_order_relaxed);
	*lag_ms = atomic_load_explicit(&e->lag_ms, memory_order_relaxed);
}

void shm_wal_set(struct shm *shm, int target, uint64_t lsn, uint64_t at_us)
{
	if (!shm || target < 0 || target >= SHM_MAX_TARGETS)
		return;
	struct shm_target_entry *e = &shm->h->targets[target];
	/* at_us last: a reader that sees the new time sees the new position
	 * (a reader may pair an old time with a new position, which only
	 * makes the figure look older than it is) */
	atomic_store_explicit(&e->wal_at_us, 0, memory_order_release);
	atomic_store_explicit(&e->wal_lsn, lsn, memory_order_release);
	atomic_store_explicit(&e->wal_at_us, at_us, memory_order_release);
}

void shm_wal_get(struct shm *shm, int target, uint64_t *lsn, uint64_t *at_us)
{
	*lsn = 0;
	*at_us = 0;
	if (!shm || target < 0 || target >= SHM_MAX_TARGETS)
		return;
	const struct shm_target_entry *e = &shm->h->targets[target];
	uint64_t at = atomic_load_explicit(&e->wal_at_us, memory_order_acquire);
	uint64_t l = atomic_load_explicit(&e->wal_lsn, memory_order_acquire);
	/* a writer in between: taken as unknown this once */
	if (atomic_load_explicit(&e->wal_at_us, memory_order_acquire) != at)
		return;
	*lsn = l;
	*at_us = at;
}

void shm_bans_copy(struct shm *shm, struct bans *out)
{
	lock(shm);
	memcpy(out, &shm->h->bans, sizeof *out);
	unlock(shm);
}

bool shm_is_banned(struct shm *shm, const char *host, int port, int64_t now)
{
	lock(shm);
	bool b = bans_is_banned(&shm->h->bans, host, port, now);
	unlock(shm);
	return b;
}

uint64_t shm_bans_generation(struct shm *shm)
{
	return atomic_load_explicit(&shm->h->bans_gen, memory_order_acquire);
}

uint64_t shm_schema_generation(struct shm *shm)
{
	return atomic_load_explicit(&shm->h->schema_gen, memory_order_acquire);
}

uint64_t shm_schema_generation_bump(struct shm *shm)
{
	return atomic_fetch_add_explicit(&shm->h->schema_gen, 1, memory_order_acq_rel) + 1;
}

int64_t shm_ban_until(struct shm *shm, const char *host, int port, uint64_t *gen)
{
	lock(shm);
	/* now = INT64_MIN: any entry in the table, expired or not; the caller
	 * compares the expiry with its own clock. */
	const struct ban *b = bans_get(&shm->h->bans, host, port, INT64_MIN);
	int64_t until = b ? b->until : 0;
	*gen = atomic_load_explicit(&shm->h->bans_gen, memory_order_relaxed);
	unlock(shm);
	return until;
}

bool shm_admin_applied_by_all(struct shm *shm, int me, uint64_t seq)
{
	for (uint32_t i = 0; i < shm->h->n_workers; i++) {
		struct shm_worker *w = &shm->h->workers[i];
		if ((int)i == me || atomic_load(&w->pid) <= 0 || !atomic_load(&w->ready))
			continue;
		if (atomic_load(&w->admin_applied) < seq)
			return false;
	}
	return true;
}

uint64_t shm_admin_post(struct shm *shm, int from_worker, enum shm_admin_command cmd, const char *arg,
			const char *value)
{
	lock(shm);
	uint64_t seq = atomic_load(&shm->h->admin_seq) + 1;
	struct shm_admin_entry *e = &shm->h->admin[seq % SHM_ADMIN_RING];
	e->seq = seq;
	e->from_worker = from_worker;
	e->cmd = cmd;
	snprintf(e->arg, sizeof e->arg, "%s", arg ? arg : "");
	snprintf(e->value, sizeof e->value, "%s", value ? value : "");
	atomic_store(&shm->h->admin_seq, seq);
	unlock(shm);
	return seq;
}

bool shm_admin_next(struct shm *shm, uint64_t *seen, struct shm_admin_entry *out)
{
	uint64_t last = atomic_load(&shm->h->admin_seq);
	if (*seen >= last)
		return false;
	/* Fell behind by more than the ring: skip to what is still there. */
	if (last - *seen > SHM_ADMIN_RING)
		*seen = last - SHM_ADMIN_RING;
	lock(shm);
	*out = shm->h->admin[(*seen + 1) % SHM_ADMIN_RING];
	unlock(shm);
	*seen += 1;
	return out->seq == *seen;
}

struct shm_dump *shm_dump_slot(struct shm *shm, enum shm_dump_kind kind, int worker)
{
	size_t i = (size_t)kind * shm->h->n_workers + (size_t)worker;
	return (struct shm_dump *)((uint8_t *)shm->h + shm->h->off_dump + i * shm->h->dump_slot_size);
}

size_t shm_dump_capacity(const struct shm *shm)
{
	return shm->h->dump_slot_size - sizeof(struct shm_dump);
}

void shm_dump_begin(struct shm_dump *d)
{
	atomic_store_explicit(&d->seq, 0, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	d->len = d->rows = d->truncated = 0;
}

void shm_dump_commit(struct shm_dump *d, uint64_t seq)
{
	atomic_store_explicit(&d->seq, seq, memory_order_release);
}

bool shm_dump_read(struct shm *shm, enum shm_dump_kind kind, int worker, uint64_t seq, uint8_t **data,
		   uint32_t *len, uint32_t *rows, uint32_t *truncated)
{
	struct shm_dump *d = shm_dump_slot(shm, kind, worker);
	uint64_t s1 = atomic_load_explicit(&d->seq, memory_order_acquire);
	if (s1 == 0 || s1 < seq)
		return false;
	uint32_t n = d->len;
	if (n > shm_dump_capacity(shm))
		return false;
	uint8_t *copy = malloc(n ? n : 1);
	if (!copy)
		return false;
	memcpy(copy, d->data, n);
	uint32_t r = d->rows, t = d->truncated;
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&d->seq, memory_order_relaxed) != s1) {
		free(copy);
		return false;
	}
	*data = copy;
	*len = n;
	*rows = r;
	*truncated = t;
	return true;
}

/* ---- the backend pid map (SPEC §11) ---- */

static uint32_t backend_hash(uint32_t pid)
{
	return (pid * 2654435761u) % SHM_BACKEND_SLOTS;
}

int shm_backend_claim(struct shm *shm, uint32_t backend_pid, int target)
{
	if (!shm || backend_pid == 0 || backend_pid > INT32_MAX)
		return -1;
	uint32_t at = backend_hash(backend_pid);
	for (uint32_t n = 0; n < SHM_BACKEND_SLOTS; n++, at = (at + 1) % SHM_BACKEND_SLOTS) {
		struct shm_backend_slot *b = shm_backend(shm, (int)at);
		int32_t seen = atomic_load_explicit(&b->backend_pid, memory_order_relaxed);
		if (seen != SHM_BACKEND_FREE && seen != SHM_BACKEND_GONE)
			continue;
		if (!atomic_compare_exchange_strong(&b->backend_pid, &seen, SHM_BACKEND_CLAIMING))
			continue;
		atomic_store_explicit(&b->target, target, memory_order_relaxed);
		atomic_store_explicit(&b->client_pid, 0, memory_order_relaxed);
		atomic_store_explicit(&b->noted_ms, 0, memory_order_relaxed);
		atomic_store_explicit(&b->backend_pid, (int32_t)backend_pid, memory_order_release);
		return (int)at;
	}
	return -1;
}

void shm_backend_release(struct shm *shm, int slot)
{
	if (shm && slot >= 0 && slot < SHM_BACKEND_SLOTS)
		atomic_store_explicit(&shm_backend(shm, slot)->backend_pid, SHM_BACKEND_GONE, memory_order_release);
}

/* How long a client that named NOTIFY keeps its server's pid slot: far
 * longer than a notification takes to reach the listening connections
 * (they are idle and the server signals them at commit). */
#define SHM_NOTIFIER_HOLD_MS 1000u

void shm_backend_serves(struct shm *shm, int slot, uint32_t client_pid, uint32_t now_ms)
{
	if (slot < 0)
		return;
	struct shm_backend_slot *b = shm_backend(shm, slot);
	uint32_t noted = atomic_load_explicit(&b->noted_ms, memory_order_relaxed);
	if (noted == 0 || (uint32_t)(now_ms - noted) > SHM_NOTIFIER_HOLD_MS)
		atomic_store_explicit(&b->client_pid, client_pid, memory_order_relaxed);
}

void shm_backend_note_notifier(struct shm *shm, int slot, uint32_t client_pid, uint32_t now_ms)
{
	if (slot < 0)
		return;
	struct shm_backend_slot *b = shm_backend(shm, slot);
	atomic_store_explicit(&b->client_pid, client_pid, memory_order_relaxed);
	atomic_store_explicit(&b->noted_ms, now_ms ? now_ms : 1, memory_order_relaxed);
}

bool shm_backend_watch_notify(const struct shm *shm, int slot)
{
	return slot >= 0 && atomic_load_explicit(&shm->h->notify_pools, memory_order_relaxed) > 0;
}

uint32_t shm_backend_client_pid(struct shm *shm, uint32_t backend_pid, const char *host, int port,
				const char *database)
{
	if (!shm || backend_pid == 0 || backend_pid > INT32_MAX)
		return 0;
	uint32_t at = backend_hash(backend_pid);
	for (uint32_t n = 0; n < SHM_BACKEND_SLOTS; n++, at = (at + 1) % SHM_BACKEND_SLOTS) {
		struct shm_backend_slot *b = shm_backend(shm, (int)at);
		int32_t seen = atomic_load_explicit(&b->backend_pid, memory_order_acquire);
		if (seen == SHM_BACKEND_FREE)
			return 0;
		if (seen != (int32_t)backend_pid)
			continue;
		int32_t t = atomic_load_explicit(&b->target, memory_order_relaxed);
		if (t < 0 || t >= SHM_MAX_TARGETS)
			continue;
		/* The same pid on another server is another backend. The
		 * directory's entries are written once, under the lock, before
		 * any slot names them. */
		const struct shm_target_entry *e = &shm->h->targets[t];
		if (e->port == port && strcmp(e->host, host) == 0 && strcmp(e->database, database) == 0)
			return atomic_load_explicit(&b->client_pid, memory_order_relaxed);
	}
	return 0;
}

bool shm_reshard_read(struct shm *shm, int i, struct shm_reshard *out)
{
	if (i < 0 || i >= SHM_RESHARD_MAX)
		return false;
	struct shm_reshard *e = &shm->h->reshard[i];
	for (int tries = 0; tries < 100; tries++) {
		uint64_t s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
		if (s1 & 1)
			continue;
		memcpy((char *)out + sizeof out->seq, (const char *)e + sizeof e->seq, sizeof *e - sizeof e->seq);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&e->seq, memory_order_relaxed) == s1)
			return out->pool[0] != '\0';
	}
	return false;
}

struct shm_reshard *shm_reshard_entry(struct shm *shm, const char *pool)
{
	struct shm_reshard *free_one = NULL;
	for (int i = 0; i < SHM_RESHARD_MAX; i++) {
		struct shm_reshard *e = &shm->h->reshard[i];
		if (strcmp(e->pool, pool) == 0)
			return e;
		if (!free_one && !e->pool[0])
			free_one = e;
	}
	if (free_one) {
		atomic_fetch_add_explicit(&free_one->seq, 1, memory_order_acq_rel);
		snprintf(free_one->pool, sizeof free_one->pool, "%s", pool);
		atomic_fetch_add_explicit(&free_one->seq, 1, memory_order_release);
	}
	return free_one;
}
