/* SPDX-License-Identifier: MIT */
/*
 * copy_route: reads a COPY ... FROM STDIN into a sharded table (SPEC §6)
 * for the splitter: the table, where its sharding column sits in each row,
 * and the data format (copysplit options). Pure: no sockets, no globals.
 */
#ifndef PGCAT_COPY_ROUTE_H
#define PGCAT_COPY_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#include "copysplit.h"
#include "merge.h"
#include "router.h"

struct copy_route {
	char schema[64];            /* "" when not written */
	char table[64];
	char column[64];            /* the sharding column */
	int key_position;           /* in the column list; -1: no list, the table's column order decides */
	struct copysplit_options opts;
	char null_string[64];       /* opts.null_string points here */
};

enum copy_route_result {
	COPY_ROUTE_SPLIT,           /* a COPY FROM STDIN into a sharded table: split it */
	COPY_ROUTE_NOT_COPY,        /* not a COPY FROM STDIN of a sharded table */
	COPY_ROUTE_REFUSED          /* one pgcat cannot split: why */
};

enum copy_route_result copy_route_read(const char *sql, size_t len, const struct router_rules *rules,
				       struct copy_route *out, char why[MERGE_WHY]);

/* The query that tells the 0-based position of the sharding column among
 * the table's columns (for a COPY without a column list), into buf. */
bool copy_route_position_query(const struct copy_route *r, char *buf, size_t cap);
/* The same question asked inside a client's transaction, where it must not
 * fail: an unknown table or column gives no row instead of an error. */
bool copy_route_placement_query(const struct copy_route *r, char *buf, size_t cap);

#endif
