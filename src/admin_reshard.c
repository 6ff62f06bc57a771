/* SPDX-License-Identifier: MIT */
/*
 * admin_reshard: SHOW RESHARD from the shared segment (worker 0 writes
 * it), and the RESHARD commands, checked by reshard_request and carried
 * out by worker 0 (the reply comes once the request is accepted: the
 * phases are followed with SHOW RESHARD).
 */
#include "admin_reshard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "admin_result.h"
#include "client.h"
#include "context.h"
#include "log.h"
#include "reshard.h"
#include "shm.h"

static const struct admin_column reshard_cols[] = {
	COL_T("pool"),          COL_T("phase"),        COL_I("source_shards"),   COL_I("target_shards"),
	COL_I("tables"),        COL_I("tables_copied"), COL_I("rows_copied"),    COL_I("bytes_copied"),
	COL_I("changes_applied"), COL_I("lag_bytes"),  COL_I("pause_ms"),        COL_I("errors"),
	COL_T("last_error"),
};

void admin_show_reshard(struct client *c)
{
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(reshard_cols));
	struct shm_reshard *ep = malloc(sizeof *ep);
	for (int i = 0; ep && i < SHM_RESHARD_MAX; i++) {
		if (!shm_reshard_read(c->w->shm, i, ep))
			continue;
		const struct shm_reshard *e = ep;
		admin_row_begin(&r);
		admin_row_s(&r, e->pool);
		admin_row_s(&r, reshard_phase_name((enum reshard_phase)e->phase));
		admin_row_i(&r, e->source_shards);
		admin_row_i(&r, e->target_shards);
		admin_row_i(&r, e->tables);
		admin_row_i(&r, e->tables_copied);
		admin_row_i(&r, (int64_t)e->rows_copied);
		admin_row_i(&r, (int64_t)e->bytes_copied);
		admin_row_i(&r, (int64_t)e->changes_applied);
		admin_row_i(&r, (int64_t)e->lag_bytes);
		admin_row_i(&r, (int64_t)e->pause_ms);
		admin_row_i(&r, (int64_t)e->errors);
		admin_row_s(&r, e->last_error);
		admin_row_end(&r);
	}
	free(ep);
	admin_res_end(&r);
}

/* RESHARD CUTOVER|CANCEL|CLEANUP without a pool: the one pool whose
 * reshard is in a phase the command applies to (running; done for
 * CLEANUP). NULL: none or several (err says so). */
static const char *only_pool(struct client *c, enum reshard_request req, char *out, size_t cap, char *err,
			     size_t errlen)
{
	struct shm_reshard *e = malloc(sizeof *e);
	int found = 0;
	for (int i = 0; e && i < SHM_RESHARD_MAX; i++) {
		if (!shm_reshard_read(c->w->shm, i, e))
			continue;
		bool running = e->phase == RESHARD_COPY || e->phase == RESHARD_REPLICATE || e->phase == RESHARD_CUTOVER;
		bool fits = req == RESHARD_REQ_CLEANUP ? e->phase == RESHARD_DONE :
			    req == RESHARD_REQ_CANCEL  ? running || e->phase == RESHARD_FAILED : running;
		if (fits && found++ == 0)
			snprintf(out, cap, "%s", e->pool);
	}
	free(e);
	if (found == 1)
		return out;
	snprintf(err, errlen, found ? "several pools have a reshard: name the pool" : "no pool has a reshard to act on");
	return NULL;
}

static const struct admin_column part_cols[] = {
	COL_T("pool"),        COL_T("table"),           COL_I("source_shard"), COL_I("rows_copied"),
	COL_I("bytes_copied"), COL_I("changes_applied"), COL_I("lag_bytes"),    COL_I("errors"),
};

void admin_show_reshard_tables(struct client *c)
{
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(part_cols));
	/* (A whole entry is some 30 kB: read into the heap.) */
	struct shm_reshard *e = malloc(sizeof *e);
	for (int i = 0; e && i < SHM_RESHARD_MAX; i++) {
		if (!shm_reshard_read(c->w->shm, i, e))
			continue;
		for (int32_t k = 0; k < e->n_parts && k < SHM_RESHARD_PARTS; k++) {
			const struct shm_reshard_part *pt = &e->parts[k];
			admin_row_begin(&r);
			admin_row_s(&r, e->pool);
			admin_row_s(&r, pt->table);
			admin_row_i(&r, pt->source_shard);
			admin_row_i(&r, (int64_t)pt->rows_copied);
			admin_row_i(&r, (int64_t)pt->bytes_copied);
			admin_row_i(&r, (int64_t)pt->changes_applied);
			admin_row_i(&r, (int64_t)pt->lag_bytes);
			admin_row_i(&r, (int64_t)pt->errors);
			admin_row_end(&r);
		}
	}
	free(e);
	admin_res_end(&r);
}

void admin_reshard(struct client *c, char *const *words, int n)
{
	char name[64];
	enum reshard_request req = RESHARD_REQ_START;
	const char *pool = NULL;
	bool hold = false;
	if (n == 2 && strcasecmp(words[0], "cutover") == 0) {
		req = RESHARD_REQ_CUTOVER;
		pool = words[1];
	} else if (n == 2 && strcasecmp(words[0], "cancel") == 0) {
		req = RESHARD_REQ_CANCEL;
		pool = words[1];
	} else if (n == 2 && strcasecmp(words[0], "cleanup") == 0) {
		req = RESHARD_REQ_CLEANUP;
		pool = words[1];
	} else if (n == 2 && strcasecmp(words[0], "switch") == 0) {
		req = RESHARD_REQ_SWITCH;
		pool = words[1];
	} else if (n == 1 && (strcasecmp(words[0], "cutover") == 0 || strcasecmp(words[0], "cancel") == 0 ||
			      strcasecmp(words[0], "cleanup") == 0)) {
		req = strcasecmp(words[0], "cutover") == 0 ? RESHARD_REQ_CUTOVER :
		      strcasecmp(words[0], "cancel") == 0  ? RESHARD_REQ_CANCEL : RESHARD_REQ_CLEANUP;
		char why[128];
		if (!(pool = only_pool(c, req, name, sizeof name, why, sizeof why))) {
			admin_error(c, "55000", "RESHARD %s: %s", words[0], why);
			return;
		}
	} else if (n == 1 || (n == 2 && strcasecmp(words[1], "hold") == 0)) {
		pool = words[0];
		hold = n == 2;
	} else {
		admin_error(c, "42601",
			    "RESHARD takes: RESHARD pool [HOLD], RESHARD CUTOVER [pool], RESHARD CANCEL [pool], RESHARD CLEANUP "
			    "[pool]");
		return;
	}
	const char *code;
	char err[400];
	if (!reshard_request(c->w, req, pool, hold, &code, err, sizeof err)) {
		admin_error(c, code, "%s", err);
		return;
	}
	static const char *const names[] = { "", " CUTOVER", " CANCEL", " CLEANUP", " SWITCH" };
	log_info("admin: RESHARD%s %s%s", names[req], pool, hold ? " HOLD" : "");
	admin_complete(c, "RESHARD");
}
