/* SPDX-License-Identifier: MIT */
/*
 * session_normal: the normal session kind (session.h), that the worker
 * hands in (w->normal_session): above client.c, which calls it only
 * through this table.
 */
#ifndef PGCAT_SESSION_NORMAL_H
#define PGCAT_SESSION_NORMAL_H

#include "session.h"

extern const struct session_ops normal_session;

#endif
