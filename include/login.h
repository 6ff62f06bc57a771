/* SPDX-License-Identifier: MIT */
/*
 * login: a connection's startup and authentication, above client.c, which
 * reaches it only through the table the worker installs (w->login).
 */
#ifndef PGCAT_LOGIN_H
#define PGCAT_LOGIN_H

#include "session.h"

extern const struct login_ops client_login;

#endif
