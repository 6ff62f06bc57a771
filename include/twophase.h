/* SPDX-License-Identifier: MIT */
/*
 * twophase: what makes a write on several shards atomic when
 * two_phase_commit is on (SPEC §6): the names of pgcat's prepared
 * transactions, the decision log in state_dir, and the worker's own
 * transactions under way. The commit itself is the fan-out's
 * (fanout_2pc.c); finishing what a crash or a lost server left prepared is
 * the resolver's (twophase_recover.c).
 *
 * A transaction's global id on a shard is
 *   pgcat_<peer_id>_<host>_<pid>_<start>_<nonce>_<seq>_<shard>
 * where host (the machine: /etc/machine-id, else its host name, hashed to
 * 8 hex digits), pid, start (the process's start time in clock ticks since
 * boot) and nonce (random) name the worker process that prepared it, its
 * "generation"; seq counts its cross-shard commits and shard keeps two
 * shards on one PostgreSQL apart (a gid is unique per cluster). A gid of
 * another machine is never touched, even with the same peer_id: its
 * process cannot be seen from here.
 *
 * The log: one file per generation, <state_dir>/2pc-<host>-<pid>-<start>-<nonce>.log,
 * appended to only by that process, one line "commit <seq>" per decision,
 * fdatasync'd before the first COMMIT PREPARED is sent. A transaction is
 * committed if and only if its line is there: a crash before it leaves
 * every shard to roll back, a crash after it every shard to commit.
 */
#ifndef PGCAT_TWOPHASE_H
#define PGCAT_TWOPHASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct worker;

/* A worker process: who prepared a transaction. */
struct twophase_gen {
	uint32_t host;     /* the machine (machine-id or host name, hashed) */
	uint32_t pid;
	uint64_t start;    /* /proc/<pid>/stat starttime */
	uint32_t nonce;
};

/* A gid of pgcat's, read back. */
struct twophase_gid {
	int peer_id;
	struct twophase_gen gen;
	uint64_t seq;
	int shard;
};

/* The longest gid (PostgreSQL allows 199 bytes) and log file name. */
#define TWOPHASE_GID_MAX 96
#define TWOPHASE_PATH_MAX 4096

/* Test hooks (PGCAT_TEST_2PC_CRASH, PGCAT_TEST_2PC_PAUSE_MS): where a
 * cross-shard commit stops so that tests can kill or stall things there. */
enum twophase_hook {
	TWOPHASE_HOOK_NONE,
	TWOPHASE_HOOK_AFTER_PREPARE,     /* every shard answered PREPARE; nothing logged */
	TWOPHASE_HOOK_AFTER_LOG,         /* the decision is logged; no COMMIT PREPARED sent */
	TWOPHASE_HOOK_BETWEEN_COMMITS    /* one shard committed, the others not yet */
};

/* Formats gid into buf (TWOPHASE_GID_MAX). */
void twophase_gid_format(char *buf, size_t len, const struct twophase_gid *g);
/* Reads a gid. false: not one of pgcat's. */
bool twophase_gid_parse(const char *s, struct twophase_gid *g);
/* The log file of generation g under dir. false: the path is too long. */
bool twophase_log_path(char *buf, size_t len, const char *dir, const struct twophase_gen *g);
/* Reads a log file name (no directory). false: not a log of pgcat's. */
bool twophase_log_name_parse(const char *name, struct twophase_gen *g);
/* The seqs a log's text decides to commit, sorted (malloc'd, *n of them;
 * NULL with *n 0: none). A torn last line (a crash mid-write) is not a
 * decision: its fdatasync never returned. false: out of memory. */
bool twophase_log_read(const char *text, size_t len, uint64_t **seqs, size_t *n);
/* seq in the sorted array. */
bool twophase_seq_in(const uint64_t *seqs, size_t n, uint64_t seq);

/* The worker's part: made at start, freed at exit. NULL: out of memory. */
struct twophase *twophase_new(struct worker *w);
void twophase_free(struct twophase *tp);

/* A cross-shard commit starts: its seq (never 0), counted under way until
 * twophase_end. 0: out of memory. */
uint64_t twophase_begin(struct twophase *tp);
/* Its gid on shard. */
void twophase_gid(const struct twophase *tp, uint64_t seq, int shard, char *buf, size_t len);
/* The decision to commit seq is to be written and synced. The decisions
 * asked for during one loop turn share one write and one fdatasync (the
 * loop waits for the disk once for all of them); then done runs for each:
 * ok, or not (why says why: not durable, so the transaction must roll
 * back). false: out of memory, nothing queued. */
typedef void (*twophase_logged_fn)(void *arg, bool ok, const char *why);
bool twophase_log_commit(struct twophase *tp, uint64_t seq, twophase_logged_fn done, void *arg);
/* seq's decision is no longer wanted (its fan-out went): done will not run
 * and the line is not written, if it was not yet. */
void twophase_log_cancel(struct twophase *tp, uint64_t seq);
/* seq is over for the fan-out: committed (its line is logged) or not.
 * clean: every shard answered its COMMIT/ROLLBACK PREPARED; otherwise the
 * resolver finishes what is left (the caller kicks it: twophase_recover.h). */
void twophase_end(struct twophase *tp, uint64_t seq, bool committed, bool clean);

/* The test hook in force, and what it does there (SIGKILL of the worker,
 * or a stall of the loop). */
enum twophase_hook twophase_hook(const struct twophase *tp);
void twophase_hook_reached(const struct twophase *tp, enum twophase_hook at);

/* What the resolver does with a gid found prepared on a shard. */
enum twophase_verdict {
	TWOPHASE_SKIP,      /* under way, or another live process's */
	TWOPHASE_COMMIT,
	TWOPHASE_ROLLBACK
};
enum twophase_verdict twophase_decide(struct twophase *tp, const struct twophase_gid *g);
/* A pass of the resolver starts / ended; all_reached: every shard of every
 * pool with two_phase_commit answered, so what was not seen is finished
 * everywhere (the worker's unfinished commits are forgotten, and worker
 * 0 removes the logs of dead generations that have nothing left). */
void twophase_pass_begin(struct twophase *tp);
void twophase_pass_end(struct twophase *tp, bool all_reached);
/* A pass is needed even with two_phase_commit off (turned off by a
 * reload with commits in doubt): this worker has commits under way or
 * unfinished, or (worker 0) state_dir holds another process's log. */
bool twophase_has_work(struct twophase *tp);
/* The generation of this process. */
const struct twophase_gen *twophase_self(const struct twophase *tp);

#endif
