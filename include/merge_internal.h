/* SPDX-License-Identifier: MIT */
/*
 * merge_internal: what the merge's two files share (src/merge.c: rows and
 * values, aggregates combined, groups built; src/merge_stream.c: the
 * streaming merge that reads the shards' rows as they come). Not an
 * interface: no other room includes it (they use include/merge.h).
 */
#ifndef PGCAT_MERGE_INTERNAL_H
#define PGCAT_MERGE_INTERNAL_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "merge.h"

struct buf;

/* An ORDER BY key resolved against the result's columns. */
struct sort_key {
	int col;
	bool desc, nulls_first;
	uint32_t oid;
	int16_t format;
	locale_t coll;
};

/* A DataRow message, whole (type byte and length included). */
struct mrow {
	const uint8_t *p;
	size_t len;
};

/* Room for a merged row the merge makes itself (a combined aggregate or
 * group): n bytes that stay put until the merge ends. NULL: none left. */
typedef void *(*merge_alloc_fn)(void *arg, size_t n);

/* Column i of a DataRow message m (whole): NULL -> *vlen < 0. false: malformed. */
bool merge_row_value(const uint8_t *m, size_t mlen, int i, const uint8_t **v, int32_t *vlen);
/* The DataRow at m (up to avail bytes) is whole and well framed: its length. 0: not. */
size_t merge_row_len(const uint8_t *m, size_t avail);
/* a vs b by the sort keys into *out; false: a value could not be compared. */
bool merge_row_compare(const struct sort_key *keys, int n, const uint8_t *a, size_t alen, const uint8_t *b,
		       size_t blen, int *out);
/* The plan's ORDER BY as keys over cols[0..n_cols). false: why says why. */
bool merge_resolve_sort_keys(const struct merge_plan *p, const struct merge_column *cols, int n_cols, locale_t coll,
			     struct sort_key keys[MERGE_MAX_SORT], char why[MERGE_WHY]);
/* count, sum, min, max, avg without GROUP BY: the one row out of rows[0..n)
 * (one per shard), its client's columns only, into *out (allocated with
 * alloc). false: why says why. */
bool merge_aggregate_row(const struct merge_plan *p, const struct merge_column *cols, int n_cols,
			 const struct mrow *rows, size_t n, locale_t coll, merge_alloc_fn alloc, void *arg,
			 struct mrow *out, char why[MERGE_WHY]);
/*
 * GROUP BY and DISTINCT over every shard's rows (rows[0..n), tmp room for
 * n more; both are reordered): equal keys merged into one row (aggregates
 * combined into rows made with alloc, or the first row kept), then the
 * plan's ORDER BY. The result is (*out)[0..*n_out), which is rows or tmp;
 * OFFSET and LIMIT are the caller's. false: why says why.
 */
bool merge_group_rows(const struct merge_plan *p, const struct merge_column *cols, int n_cols, locale_t coll,
		      struct mrow *rows, struct mrow *tmp, size_t n, merge_alloc_fn alloc, void *arg,
		      struct mrow **out, size_t *n_out, char why[MERGE_WHY]);
/* CommandComplete "SELECT n" onto out. */
void merge_put_command_complete(struct buf *out, uint64_t n);

#endif
