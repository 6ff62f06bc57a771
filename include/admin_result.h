/* SPDX-License-Identifier: MIT */
/*
 * admin_result: the admin console's result sets (a RowDescription from a
 * table of typed columns, then its rows, to the client or into this
 * worker's shared-memory dump slot) and its small replies. For admin*.c.
 */
#ifndef PGCAT_ADMIN_RESULT_H
#define PGCAT_ADMIN_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include "pktbuf.h"
#include "types.h"

#define ADMIN_ROW_MAX 16384

struct shm_dump;

/*
 * A column of a result set: its name and its type are written side by side
 * in one table, so the RowDescription and the rows cannot drift apart.
 * Typed drivers (psycopg, asyncpg) parse every value with the loader of the
 * declared type, so one text value in an int8 column makes the whole SHOW
 * unreadable. The types are PgBouncer's: int8 for counts, sizes, ports,
 * pids and times in µs; text for names, addresses, states and timestamps.
 */
enum admin_col_type { COL_TEXT, COL_INT8 };

struct admin_column {
	const char *name;
	enum admin_col_type type;
};

#define COL_T(name) { (name), COL_TEXT }
#define COL_I(name) { (name), COL_INT8 }

struct admin_columns {
	const struct admin_column *v;
	size_t n;
};

#define COLUMNS_INIT(arr) { (arr), sizeof(arr) / sizeof *(arr) }
#define COLUMNS(arr) ((struct admin_columns)COLUMNS_INIT(arr))

struct admin_result {
	struct client *c;         /* where rows go, or... */
	struct shm_dump *dump;    /* ...into this worker's dump slot (c NULL) */
	size_t dump_cap;
	struct admin_columns cols;
	size_t col;               /* the next column of the row being built */
	int rows;
	uint8_t buf[ADMIN_ROW_MAX];
	struct pktbuf pb;
};

/* Sends pb to the client (nothing if it failed). */
void admin_out(struct client *c, struct pktbuf *pb);
/* A result set for c: its RowDescription, from cols. */
void admin_res_begin(struct admin_result *r, struct client *c, struct admin_columns cols);
/* A row: begin, one value per column in order, end. */
void admin_row_begin(struct admin_result *r);
void admin_row_null(struct admin_result *r);   /* NULL fits a column of any type */
void admin_row_s(struct admin_result *r, const char *s);
void admin_row_i(struct admin_result *r, int64_t v);
/* The row goes to the client, or into the dump slot. */
void admin_row_end(struct admin_result *r);
/* CommandComplete "SHOW". */
void admin_res_end(struct admin_result *r);
void admin_complete(struct client *c, const char *tag);
/* A notice (severity WARNING or NOTICE) ahead of the command's reply. */
void admin_notice(struct client *c, const char *severity, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void admin_error(struct client *c, const char *sqlstate, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* ReadyForQuery, idle. */
void admin_rfq(struct client *c);

#endif
