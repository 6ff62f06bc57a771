/* SPDX-License-Identifier: MIT */
/*
 * errstats: errors by SQLSTATE, per database and user (SHOW ERRORS,
 * pgcat_errors_total; doc/monitoring.md): those servers send a client and
 * those pgcat raises itself. Each worker counts in a table of its own in
 * the shared memory segment (it is the only writer: no lock, no
 * compare-and-swap), readers sum every worker's. A table holds
 * ERRSTATS_SLOTS keys; an error whose key finds no room is counted as
 * untracked. Pure data and counting: the caller gives the table (shm.h).
 */
#ifndef PGCAT_ERRSTATS_H
#define PGCAT_ERRSTATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum errstats_source {
	ERRSTATS_SERVER,   /* an ErrorResponse of a server, passed to its client */
	ERRSTATS_PGCAT     /* one pgcat sent of its own */
};

#define ERRSTATS_SLOTS 512
#define ERRSTATS_NAME_MAX 64   /* with the NUL; longer names are cut */

struct errstats_slot {
	_Atomic uint32_t used;         /* 1 once the key below is written */
	uint8_t source;                /* enum errstats_source */
	char sqlstate[6];              /* "" when the error had none */
	char database[ERRSTATS_NAME_MAX];
	char user[ERRSTATS_NAME_MAX];
	_Atomic uint64_t count;
};

struct errstats_table {
	_Atomic uint64_t untracked;    /* errors whose key found no room */
	struct errstats_slot slots[ERRSTATS_SLOTS];
};

/* One error of sqlstate (NULL or "": none), for database and user (NULL:
 * ""), counted in t (the caller's worker's). */
void errstats_count(struct errstats_table *t, const char *database, const char *user, const char *sqlstate,
		    enum errstats_source source);

/* A key's total over several tables. */
struct errstats_row {
	char database[ERRSTATS_NAME_MAX];
	char user[ERRSTATS_NAME_MAX];
	char sqlstate[6];
	uint8_t source;
	uint64_t count;
};

/* The rows of tables t[0..n), the same key's counts added, the largest
 * count first, at most max of them (rows: room for max); how many. The
 * untracked errors of all, in *untracked. */
size_t errstats_collect(struct errstats_table *const *t, size_t n, struct errstats_row *rows, size_t max,
			uint64_t *untracked);

/* "server" or "pgcat". */
const char *errstats_source_name(uint8_t source);

#endif
