/* SPDX-License-Identifier: MIT */
/*
 * admin_upgrade: the console's UPGRADE: the binary pgcat was started from
 * (as it is on disk now: the new one, after a package upgrade) checks the
 * configuration, then is started with -R to take this instance over
 * (handover.c).
 */
#ifndef PGCAT_ADMIN_UPGRADE_H
#define PGCAT_ADMIN_UPGRADE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct worker;

/* `exe -t config` first (its errors in err, false: nothing started), then
 * `exe -R config` in a session of its own (its pid in *pid), with none of
 * this process's sockets. */
bool admin_upgrade_start(struct worker *w, pid_t *pid, char *err, size_t errlen);
/* The new process has exited (its status in *status); false: still runs
 * (or is not this process's child any more). */
bool admin_upgrade_exited(pid_t pid, int *status);

#endif
