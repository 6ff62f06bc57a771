/* SPDX-License-Identifier: MIT */
/*
 * sdnotify: systemd's readiness protocol without libsystemd — one datagram
 * to $NOTIFY_SOCKET. Used by the supervisor only.
 */
#ifndef PGCAT_SDNOTIFY_H
#define PGCAT_SDNOTIFY_H

/* Send "READY=1", "RELOADING=1", "STOPPING=1"...; a no-op without NOTIFY_SOCKET. */
void sd_notify_send(const char *state);

#endif
