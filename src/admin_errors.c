/* SPDX-License-Identifier: MIT */
/*
 * admin_errors: SHOW ERRORS (admin_errors.h).
 */
#include "admin_errors.h"

#include <stdlib.h>

#include "admin_result.h"
#include "client.h"
#include "context.h"
#include "errstats.h"
#include "shm.h"

void admin_show_errors(struct client *c)
{
	static const struct admin_column cols[] = {
		COL_T("database"), COL_T("user"), COL_T("sqlstate"), COL_T("source"), COL_I("count"),
	};
	struct worker *w = c->w;
	struct errstats_row *rows;
	uint64_t untracked;
	size_t n = shm_errstats_all(w->shm, &rows, &untracked);
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	for (size_t i = 0; i < n; i++) {
		admin_row_begin(&r);
		admin_row_s(&r, rows[i].database);
		admin_row_s(&r, rows[i].user);
		if (rows[i].sqlstate[0])
			admin_row_s(&r, rows[i].sqlstate);
		else
			admin_row_null(&r);   /* (an error without a code, or one too long to read) */
		admin_row_s(&r, errstats_source_name(rows[i].source));
		admin_row_i(&r, (int64_t)rows[i].count);
		admin_row_end(&r);
	}
	if (untracked) {
		admin_row_begin(&r);
		admin_row_null(&r);
		admin_row_null(&r);
		admin_row_null(&r);
		admin_row_s(&r, "untracked");
		admin_row_i(&r, (int64_t)untracked);
		admin_row_end(&r);
	}
	admin_res_end(&r);
	free(rows);
}
