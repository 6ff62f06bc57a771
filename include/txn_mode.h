/* SPDX-License-Identifier: MIT */
/*
 * txn_mode: the characteristics a client chooses for its transaction
 * (isolation level, read-only, deferrable), as a server reports them, and
 * the statement that gives another shard's transaction the same ones
 * (two_phase_commit: a transaction that goes on to other shards,
 * fanout_txn.c). Pure: no state, no allocation, every index checked.
 */
#ifndef PGCAT_TXN_MODE_H
#define PGCAT_TXN_MODE_H

#include <stdbool.h>
#include <stddef.h>

enum txn_isolation {
	TXN_ISO_READ_UNCOMMITTED,
	TXN_ISO_READ_COMMITTED,
	TXN_ISO_REPEATABLE_READ,
	TXN_ISO_SERIALIZABLE
};

struct txn_mode {
	enum txn_isolation isolation;
	bool read_only;
	bool deferrable;
};

/* The one Query that asks a server for its transaction's characteristics:
 * three SHOWs, whose first columns come back in this order (SHOW takes no
 * snapshot, unlike a SELECT: asking changes nothing of the transaction). */
#define TXN_MODE_PROBE "SHOW transaction_isolation; SHOW transaction_read_only; SHOW transaction_deferrable"

/* The values of transaction_isolation, transaction_read_only and
 * transaction_deferrable as SHOW gives them ("repeatable read", "on").
 * false: one PostgreSQL does not give (nothing is spliced into SQL
 * unchecked). */
bool txn_mode_from_settings(const char *isolation, const char *read_only, const char *deferrable,
			    struct txn_mode *out);

/* The text of a Query that opens a transaction with m's characteristics:
 * "BEGIN; SET TRANSACTION ISOLATION LEVEL ..., READ ONLY|READ WRITE,
 * [NOT ]DEFERRABLE". A plain BEGIN comes first so that the statement is
 * routed as a plain BEGIN is (a read-only one would be sent to a replica,
 * where PREPARE TRANSACTION cannot run). Its length; 0 if out (outsz
 * bytes) is too small. */
size_t txn_mode_begin_sql(const struct txn_mode *m, char *out, size_t outsz);

/* One statement's text (len bytes, up to its first NUL) sets the current
 * transaction's characteristics: SET TRANSACTION ... (SNAPSHOT too), or
 * SET / SET LOCAL / SET SESSION / RESET of transaction_isolation,
 * transaction_read_only or transaction_deferrable. SET SESSION
 * CHARACTERISTICS (the defaults of later transactions) is not. */
bool txn_mode_statement_sets(const char *sql, size_t len);

#endif
