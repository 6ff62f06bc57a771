/* SPDX-License-Identifier: MIT */
/*
 * ryw: read-your-writes by WAL position (SPEC §4, read_your_writes = lsn),
 * the pure part. What a client owes its reads, per shard: the primary's
 * WAL position after its last transaction that wrote (or the moment that
 * position could not be learnt), and the verdict on one server's figure
 * (from the lag monitor) against it. No sockets, no shared memory, no
 * clock of its own: route_pick.c brings the figures, the client keeps the
 * marks.
 */
#ifndef PGCAT_RYW_H
#define PGCAT_RYW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What one shard's reads of a client wait for. */
enum ryw_mark_state {
	RYW_NONE,      /* nothing: normal routing */
	RYW_KNOWN,     /* replicas must have replayed lsn */
	/* A write ended at since_us but its position could not be learnt
	 * (the query failed, the server was lost): the primary's own
	 * position measured after since_us stands for it; until then, reads
	 * go to the primary. */
	RYW_UNKNOWN
};

struct ryw_mark {
	uint64_t lsn;
	uint64_t since_us;
	enum ryw_mark_state state;
};

/* A client's marks, one per shard, made on its first write (NULL: none). */
struct ryw {
	size_t n;
	struct ryw_mark m[];
};

/* The text PostgreSQL gives an LSN ("16/B374D848": two hex numbers of up
 * to 8 digits), len bytes (no NUL needed). */
bool ryw_parse_lsn(const char *s, size_t len, uint64_t *out) __attribute__((warn_unused_result));

/* What a primary is asked, right after a transaction that wrote ended on
 * it, for the position its reads then wait for: the insert position (see
 * server.c for why not the write position). */
#define RYW_POSITION_QUERY "SELECT pg_current_wal_insert_lsn()"
/* Its one DataRow (body: the message without type and length; one text
 * column "X/Y"). false: anything else. */
bool ryw_position_row(const uint8_t *body, size_t len, uint64_t *lsn) __attribute__((warn_unused_result));

/* A transaction that wrote on shard ended at now_us: its position lsn
 * (known), or unknown. *r grown as needed. false: out of memory (*r as
 * it was). */
bool ryw_note(struct ryw **r, size_t shard, bool known, uint64_t lsn, uint64_t now_us)
	__attribute__((warn_unused_result));
/* The mark of shard; NULL when none (RYW_NONE). */
const struct ryw_mark *ryw_mark(const struct ryw *r, size_t shard);
/* Every server of shard has it (or the unknown one was resolved to lsn):
 * cleared, or set to lsn (resolved). */
void ryw_clear(struct ryw *r, size_t shard);
void ryw_resolve(struct ryw *r, size_t shard, uint64_t lsn);
void ryw_free(struct ryw **r);

/* One server's figure (its WAL position fig_lsn, measured at fig_at_us;
 * 0: never) against the position a read waits for. A figure older than
 * max_age_us is not trusted either way: a replica rebuilt or restarted
 * since may be behind what it reported. */
enum ryw_verdict {
	RYW_REACHED,   /* it has replayed target */
	RYW_BEHIND,    /* it has not, as far as a fresh figure says */
	RYW_STALE      /* no fresh figure */
};
enum ryw_verdict ryw_judge(uint64_t target, uint64_t fig_lsn, uint64_t fig_at_us, uint64_t now_us,
			   uint64_t max_age_us);

/* An unknown position (RYW_UNKNOWN) is stood for by the primary's write
 * position measured this long after the write ended (route_pick.c). */
#define RYW_UNKNOWN_MARGIN_US 1000000u

/* How old a lag monitor figure may be and still count: three of its
 * intervals (one measurement may be late or lost), at least a second. */
uint64_t ryw_max_age_us(int replica_lag_check_interval_ms);

#endif
