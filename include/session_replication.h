/* SPDX-License-Identifier: MIT */
/*
 * session_replication: the session kind of a replication connection
 * (session_replication.c), that the worker hands in
 * (w->replication_session): above client.c, which calls it only through
 * this table.
 */
#ifndef PGCAT_SESSION_REPLICATION_H
#define PGCAT_SESSION_REPLICATION_H

#include "session.h"

extern const struct session_ops replication_session;

#endif
