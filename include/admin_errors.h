/* SPDX-License-Identifier: MIT */
/*
 * admin_errors: the console's SHOW ERRORS (errors by SQLSTATE, errstats.h,
 * summed over every worker: they are in shared memory).
 */
#ifndef PGCAT_ADMIN_ERRORS_H
#define PGCAT_ADMIN_ERRORS_H

#include "types.h"

/* Columns database, user, sqlstate, source (server or pgcat), count; the
 * largest count first; a last row with source "untracked" when some
 * errors found no room in their table. */
void admin_show_errors(struct client *c);

#endif
