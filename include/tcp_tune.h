/* SPDX-License-Identifier: MIT */
/*
 * tcp_tune: dead-peer detection on a TCP socket (SPEC §2 tcp_*), set on a
 * client's socket at accept (client.c) and a server's at connect
 * (server_conn.c). A leaf: socket options only.
 */
#ifndef PGCAT_TCP_TUNE_H
#define PGCAT_TCP_TUNE_H

#include <stdbool.h>
#include <stddef.h>

/* SO_KEEPALIVE on or off and, where not 0 (0 = leave the kernel's
 * default), TCP_KEEPIDLE and TCP_KEEPINTVL in seconds, TCP_KEEPCNT, and
 * TCP_USER_TIMEOUT in ms. */
struct io_tcp_tuning {
	bool keepalive;
	int keepidle_s, keepintvl_s, keepcnt, user_timeout_ms;
};
/* The first option the kernel refuses is named in why; false then. */
bool io_tcp_tune(int fd, const struct io_tcp_tuning *t, char *why, size_t whylen);

#endif
