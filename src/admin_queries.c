/* SPDX-License-Identifier: MIT */
/*
 * admin_queries: SHOW QUERIES and RESET QUERIES (admin_queries.h).
 */
#include "admin_queries.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "admin_result.h"
#include "client.h"
#include "context.h"
#include "qstats.h"
#include "shm.h"

/* The columns, in order; those of type COL_INT8 sort as numbers. */
enum qcol {
	QC_DATABASE, QC_USER, QC_FINGERPRINT, QC_QUERY, QC_CALLS, QC_ROWS, QC_ERRORS,
	QC_TOTAL_EXEC, QC_MEAN_EXEC, QC_P50_EXEC, QC_P95_EXEC, QC_P99_EXEC,
	QC_TOTAL_WAIT, QC_MEAN_WAIT, QC_P50_WAIT, QC_P95_WAIT, QC_P99_WAIT,
	QC_SHARDS, QC_ROLES, QC__COUNT
};

static const struct admin_column cols[QC__COUNT] = {
	COL_T("database"), COL_T("user"), COL_T("fingerprint"), COL_T("query"),
	COL_I("calls"), COL_I("rows"), COL_I("errors"),
	COL_I("total_exec_time"), COL_I("mean_exec_time"), COL_I("p50_exec_time"), COL_I("p95_exec_time"),
	COL_I("p99_exec_time"),
	COL_I("total_wait_time"), COL_I("mean_wait_time"), COL_I("p50_wait_time"), COL_I("p95_wait_time"),
	COL_I("p99_wait_time"),
	COL_T("shards"), COL_T("roles"),
};

/* A row as shown: its numbers, and where its texts are. */
struct shown {
	const struct qstats_row *r;
	const char *database, *user;
	char fingerprint[17];
	int64_t v[QC__COUNT];
	int sort_col;           /* the order asked for (each row has it: qsort takes no context) */
	bool sort_desc;
};

static const char *text_of(const struct shown *s, int col)
{
	switch (col) {
	case QC_DATABASE: return s->database;
	case QC_USER: return s->user;
	case QC_FINGERPRINT: return s->fingerprint;
	case QC_QUERY: return s->r->text;
	default: return "";
	}
}

static int compare(const void *a, const void *b)
{
	const struct shown *x = a, *y = b;
	int col = x->sort_col, d;
	if (cols[col].type == COL_INT8)
		d = x->v[col] < y->v[col] ? -1 : x->v[col] > y->v[col];
	else
		d = strcmp(text_of(x, col), text_of(y, col));
	if (d == 0)   /* (one order between equals) */
		d = strcmp(x->fingerprint, y->fingerprint);
	if (d == 0)
		d = strcmp(x->database, y->database) ? strcmp(x->database, y->database) : strcmp(x->user, y->user);
	return x->sort_desc ? -d : d;
}

static void set_of(char *out, size_t cap, uint64_t bits, bool roles)
{
	size_t o = 0;
	out[0] = '\0';
	for (unsigned i = 0; i < 64 && o + 12 < cap; i++) {
		if (!(bits & (1ull << i)))
			continue;
		if (roles)
			o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? "," : "", i == 0 ? "primary" : "replica");
		else
			o += (size_t)snprintf(out + o, cap - o, "%s%u", o ? "," : "", i);
	}
}

static int64_t clamp(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* The pools named db (their shm numbers): is any? */
static bool db_known(struct shm *shm, const char *db)
{
	for (int i = 0; i < SHM_MAX_POOLS; i++)
		if (shm->h->pools[i].used && strcmp(shm->h->pools[i].name, db) == 0)
			return true;
	return false;
}

void admin_show_queries(struct client *c, char *const *words, int n)
{
	struct shm *shm = c->w->shm;
	const char *db = NULL;
	int i = 0, col = QC_TOTAL_EXEC;
	bool desc = true;
	long long limit = -1;
	if (i < n && strcasecmp(words[i], "order") != 0 && strcasecmp(words[i], "limit") != 0)
		db = words[i++];
	if (i < n && strcasecmp(words[i], "order") == 0) {
		if (i + 2 >= n || strcasecmp(words[i + 1], "by") != 0) {
			admin_error(c, "42601", "SHOW QUERIES: ORDER BY needs a column");
			return;
		}
		for (col = 0; col < QC__COUNT && strcasecmp(cols[col].name, words[i + 2]) != 0; col++)
			;
		if (col == QC__COUNT) {
			admin_error(c, "42703", "SHOW QUERIES has no column \"%s\"", words[i + 2]);
			return;
		}
		desc = false;
		i += 3;
		if (i < n && (strcasecmp(words[i], "asc") == 0 || strcasecmp(words[i], "desc") == 0))
			desc = strcasecmp(words[i++], "desc") == 0;
	}
	if (i < n && strcasecmp(words[i], "limit") == 0) {
		char *end = NULL;
		limit = i + 1 < n ? strtoll(words[i + 1], &end, 10) : -1;
		if (i + 1 >= n || !end || *end || limit < 0) {
			admin_error(c, "42601", "SHOW QUERIES: LIMIT needs a number");
			return;
		}
		i += 2;
	}
	if (i < n) {
		admin_error(c, "42601", "SHOW QUERIES [db] [ORDER BY column [ASC|DESC]] [LIMIT n]: unexpected \"%s\"",
			    words[i]);
		return;
	}
	if (db && !db_known(shm, db)) {
		admin_error(c, "3D000", "no such database: %s", db);
		return;
	}
	struct qstats_row *rows;
	size_t k = shm_qstats_all(shm, -1, &rows);
	struct shown *v = calloc(k ? k : 1, sizeof *v);
	if (!v) {
		free(rows);
		admin_error(c, "53200", "out of memory");
		return;
	}
	size_t m = 0;
	for (size_t j = 0; j < k; j++) {
		const struct qstats_row *r = &rows[j];
		const struct shm_pool_entry *pe = &shm->h->pools[r->pool];
		if (db && strcmp(pe->name, db) != 0)
			continue;
		struct shown *s = &v[m++];
		s->r = r;
		s->sort_col = col;
		s->sort_desc = desc;
		s->database = pe->name;
		s->user = pe->user;
		snprintf(s->fingerprint, sizeof s->fingerprint, "%016" PRIx64, r->fingerprint);
		s->v[QC_CALLS] = clamp(r->calls);
		s->v[QC_ROWS] = clamp(r->rows);
		s->v[QC_ERRORS] = clamp(r->errors);
		s->v[QC_TOTAL_EXEC] = clamp(r->exec_us);
		s->v[QC_MEAN_EXEC] = r->calls ? clamp(r->exec_us / r->calls) : 0;
		s->v[QC_P50_EXEC] = clamp(qstats_quantile(r->exec_hist, 0.50));
		s->v[QC_P95_EXEC] = clamp(qstats_quantile(r->exec_hist, 0.95));
		s->v[QC_P99_EXEC] = clamp(qstats_quantile(r->exec_hist, 0.99));
		s->v[QC_TOTAL_WAIT] = clamp(r->wait_us);
		s->v[QC_MEAN_WAIT] = r->calls ? clamp(r->wait_us / r->calls) : 0;
		s->v[QC_P50_WAIT] = clamp(qstats_quantile(r->wait_hist, 0.50));
		s->v[QC_P95_WAIT] = clamp(qstats_quantile(r->wait_hist, 0.95));
		s->v[QC_P99_WAIT] = clamp(qstats_quantile(r->wait_hist, 0.99));
	}
	qsort(v, m, sizeof *v, compare);
	if (limit >= 0 && (size_t)limit < m)
		m = (size_t)limit;
	struct admin_result res;
	admin_res_begin(&res, c, COLUMNS(cols));
	for (size_t j = 0; j < m; j++) {
		const struct shown *s = &v[j];
		char shards[200], roles[32];
		set_of(shards, sizeof shards, s->r->shards, false);
		set_of(roles, sizeof roles, s->r->roles, true);   /* (bit 0 primary, bit 1 replica) */
		admin_row_begin(&res);
		for (int k2 = 0; k2 < QC__COUNT; k2++) {
			if (k2 == QC_SHARDS)
				admin_row_s(&res, shards);
			else if (k2 == QC_ROLES)
				admin_row_s(&res, roles);
			else if (cols[k2].type == COL_INT8)
				admin_row_i(&res, s->v[k2]);
			else
				admin_row_s(&res, text_of(s, k2));
		}
		admin_row_end(&res);
	}
	admin_res_end(&res);
	free(v);
	free(rows);
}

void admin_reset_queries(struct client *c, const char *db)
{
	struct shm *shm = c->w->shm;
	struct qstats_resets *resets = shm_qstats_resets(shm);
	if (!db) {
		qstats_reset(resets, -1);
		admin_complete(c, "RESET");
		return;
	}
	bool found = false;
	for (int i = 0; i < SHM_MAX_POOLS; i++)
		if (shm->h->pools[i].used && strcmp(shm->h->pools[i].name, db) == 0) {
			qstats_reset(resets, i);
			found = true;
		}
	if (!found) {
		admin_error(c, "3D000", "no such database: %s", db);
		return;
	}
	admin_complete(c, "RESET");
}
