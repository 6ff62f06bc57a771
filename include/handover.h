/* SPDX-License-Identifier: MIT */
/*
 * handover: one worker's sockets passed to the worker of the same number
 * in a new pgcat started with -R (PgBouncer's online restart): its
 * listening sockets at once, then each client as soon as it is between
 * requests, over a local socket of the two processes' own user
 * (SCM_RIGHTS). What cannot move in shutdown_timeout (a transaction that
 * does not end, a TLS connection, the console) drains as in a shutdown.
 */
#ifndef PGCAT_HANDOVER_H
#define PGCAT_HANDOVER_H

#include <stdbool.h>
#include <stddef.h>

#include "handover_link.h"

struct worker;


/* Old side: listen for the next process (an abstract Unix name made of
 * the port and the worker's number). false: the name is taken (another
 * instance shares the port without -R), logged: no handover from this
 * worker. */
bool handover_listen(struct worker *w);
/* New side (-R), before listening: take over from the old worker of this
 * number. Its listening sockets land in fds (up to HANDOVER_MAX_LISTENERS,
 * *n of them), its clients follow on the loop. NONE: no old worker (the
 * caller binds its own listeners); FAILED: one answered but handed
 * nothing over (it is being taken over already, or shutting down): this
 * process must not start beside it. */
enum handover_took { HANDOVER_NONE, HANDOVER_TAKEN, HANDOVER_FAILED };
enum handover_took handover_take(struct worker *w, int *fds, size_t *n);
/* Either side: the link, its timer and its listening socket go. */
void handover_free(struct worker *w);

#endif
