/* SPDX-License-Identifier: MIT */
/*
 * session: what a logged-in connection is handed to. The connection
 * machinery (client.c: startup, authentication, the io, the framing of the
 * idle pump, client_close) is shared; what the session does with it
 * depends on its kind, chosen at login: the normal session (client.c:
 * route, pool, server) or the admin console (admin.c), siblings through
 * this table, so that the pump never branches on the kind.
 *
 * A data header with no module of its own: client.c calls a kind only
 * through its table, and the worker, above both, hands the admin kind's
 * table to the login (struct worker).
 */
#ifndef PGCAT_SESSION_H
#define PGCAT_SESSION_H

#include <stdbool.h>

#include "proto.h"
#include "types.h"

struct session_ops {
	const char *name;   /* "normal", "admin": for logs */
	/* Login accepted (authentication done, c->auth freed): greet the
	 * client (AuthenticationOk ... ReadyForQuery, through
	 * client_finish_welcome) and take what it sent meanwhile, or wait
	 * for what the greeting needs. May close the client. */
	void (*welcome)(struct client *c);
	/* The idle client has the message whose header is f at the head of
	 * its input (Terminate, the skipping of an unserved request and the
	 * rest of a discarded message were taken care of before). true: go
	 * on with the next message, if still idle; false: stop until more
	 * bytes or an event. */
	bool (*message)(struct client *c, const struct proto_frame *f);
};

#endif
