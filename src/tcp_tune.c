/* SPDX-License-Identifier: MIT */
/* tcp_tune: a TCP socket's dead-peer detection (include/tcp_tune.h). */
#include "tcp_tune.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

bool io_tcp_tune(int fd, const struct io_tcp_tuning *t, char *why, size_t whylen)
{
	const struct {
		int level, name, value;
		bool only_if_set;
		const char *what;
	} opts[] = {
		{ SOL_SOCKET, SO_KEEPALIVE, t->keepalive ? 1 : 0, false, "SO_KEEPALIVE" },
		{ IPPROTO_TCP, TCP_KEEPIDLE, t->keepidle_s, true, "TCP_KEEPIDLE" },
		{ IPPROTO_TCP, TCP_KEEPINTVL, t->keepintvl_s, true, "TCP_KEEPINTVL" },
		{ IPPROTO_TCP, TCP_KEEPCNT, t->keepcnt, true, "TCP_KEEPCNT" },
		{ IPPROTO_TCP, TCP_USER_TIMEOUT, t->user_timeout_ms, true, "TCP_USER_TIMEOUT" },
	};
	for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
		if (opts[i].only_if_set && opts[i].value == 0)
			continue;
		/* The keepalive timings mean nothing without keepalive. */
		if (i >= 1 && i <= 3 && !t->keepalive)
			continue;
		if (setsockopt(fd, opts[i].level, opts[i].name, &opts[i].value, sizeof opts[i].value) != 0) {
			snprintf(why, whylen, "cannot set %s to %d: %s", opts[i].what, opts[i].value, strerror(errno));
			return false;
		}
	}
	return true;
}
