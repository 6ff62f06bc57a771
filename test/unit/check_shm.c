/* SPDX-License-Identifier: MIT */
/* The shared segment's open lock (SPEC §9): worker processes that decide
 * to open a connection under a limit at the same instant never go over it
 * together, a holder that died leaves the lock usable, and one that is
 * stopped makes the others give up within a bound instead of waiting.
 * Real processes (fork), as the workers are. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_suites.h"
#include "shm.h"

#define WORKERS 4
#define LIMIT 3
#define TARGET 7
#define ROUNDS 20000

/* Besides the segment, a page the test's processes share: how many
 * "connections" are open at this instant, counted apart from the slots
 * the decision reads, and the most ever seen. */
struct tally {
	_Atomic int32_t live;
	_Atomic int32_t most;
};

static struct tally *tally_new(void)
{
	void *p = mmap(NULL, sizeof(struct tally), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	struct tally *t = p;
	atomic_store(&t->live, 0);
	atomic_store(&t->most, 0);
	return t;
}

static void note_most(struct tally *t, int32_t n)
{
	int32_t seen = atomic_load(&t->most);
	while (n > seen && !atomic_compare_exchange_weak(&t->most, &seen, n))
		;
}

/* One worker's life: open under LIMIT as pool.c does (the decision and
 * its own count raised in one step under the lock), hold a moment, close
 * (its count lowered without the lock). Exit status 1: the lock could
 * never be had. */
static void worker_run(struct shm *shm, int worker, struct tally *t)
{
	int32_t own = 0;
	int refused_lock = 0;
	for (int round = 0; round < ROUNDS; round++) {
		if (!shm_open_lock(shm)) {
			refused_lock++;
			continue;
		}
		bool room = shm_conns_total(shm, TARGET) < LIMIT;
		/* Wide open, the moment between deciding and counting that two
		 * deciders would share without the lock. */
		sched_yield();
		if (room)
			shm_conns_set(shm, worker, TARGET, ++own);
		shm_open_unlock(shm);
		if (room) {
			/* The connection exists from here... */
			note_most(t, atomic_fetch_add(&t->live, 1) + 1);
			if (round % 3 == 0)
				sched_yield();
			/* ... to here, before its count is lowered. */
			atomic_fetch_sub(&t->live, 1);
			shm_conns_set(shm, worker, TARGET, --own);
		}
	}
	_exit(refused_lock == ROUNDS ? 1 : 0);
}

static void wait_child(pid_t pid, int want_status)
{
	int status = 0;
	pid_t got;
	do
		got = waitpid(pid, &status, 0);
	while (got < 0 && errno == EINTR);
	ck_assert_int_eq(got, pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), want_status);
}

START_TEST(workers_deciding_together_stay_under_the_limit)
{
	struct shm shm = { 0 };
	ck_assert(shm_create(&shm, WORKERS, 16));
	struct tally *t = tally_new();
	pid_t pids[WORKERS];
	for (int w = 0; w < WORKERS; w++) {
		pids[w] = fork();
		ck_assert_int_ge(pids[w], 0);
		if (pids[w] == 0)
			worker_run(&shm, w, t);
	}
	for (int w = 0; w < WORKERS; w++)
		wait_child(pids[w], 0);
	ck_assert_int_ge(atomic_load(&t->most), 1);
	ck_assert_int_le(atomic_load(&t->most), LIMIT);
	ck_assert_int_eq(atomic_load(&t->live), 0);
	ck_assert_int_eq(shm_conns_total(&shm, TARGET), 0);
	munmap(t, sizeof *t);
	shm_destroy(&shm);
}
END_TEST

START_TEST(a_holder_that_died_leaves_the_lock_usable)
{
	struct shm shm = { 0 };
	ck_assert(shm_create(&shm, 2, 16));
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* Takes it, and dies without giving it back. */
		if (!shm_open_lock(&shm))
			_exit(1);
		shm_conns_set(&shm, 1, TARGET, 1);
		_exit(0);
	}
	wait_child(pid, 0);
	ck_assert(shm_open_lock(&shm));
	shm_open_unlock(&shm);
	ck_assert(shm_open_lock(&shm));
	shm_open_unlock(&shm);
	shm_destroy(&shm);
}
END_TEST

static uint64_t monotonic_ms(void)
{
	struct timespec ts;
	ck_assert_int_eq(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

START_TEST(a_stopped_holder_makes_the_others_give_up_in_time)
{
	struct shm shm = { 0 };
	ck_assert(shm_create(&shm, 2, 16));
	int ready[2];
	ck_assert_int_eq(pipe(ready), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(ready[0]);
		char held = shm_open_lock(&shm) ? 'y' : 'n';
		if (write(ready[1], &held, 1) != 1)
			_exit(1);
		/* Holds it until killed. */
		for (;;)
			pause();
	}
	close(ready[1]);
	char held = 0;
	ck_assert_int_eq(read(ready[0], &held, 1), 1);
	ck_assert_int_eq(held, 'y');
	uint64_t t0 = monotonic_ms();
	ck_assert(!shm_open_lock(&shm));
	uint64_t waited = monotonic_ms() - t0;
	ck_assert_uint_ge(waited, SHM_OPEN_LOCK_WAIT_MS / 2);
	ck_assert_uint_lt(waited, 2000);
	/* Once the holder is gone, the lock is there to be had. */
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int status = 0;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status));
	ck_assert(shm_open_lock(&shm));
	shm_open_unlock(&shm);
	close(ready[0]);
	shm_destroy(&shm);
}
END_TEST

Suite *shm_suite(void)
{
	Suite *s = suite_create("shm");
	TCase *tc = tcase_create("open_lock");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, workers_deciding_together_stay_under_the_limit);
	tcase_add_test(tc, a_holder_that_died_leaves_the_lock_usable);
	tcase_add_test(tc, a_stopped_holder_makes_the_others_give_up_in_time);
	suite_add_tcase(s, tc);
	return s;
}
