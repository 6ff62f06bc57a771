/* SPDX-License-Identifier: MIT */
/*
 * supervisor: the parent process (SPEC §9). Creates the shared segment and
 * the unix socket, forks the workers, restarts one that dies, forwards
 * signals, talks to systemd. No protocol, no event loop.
 */
#ifndef PGCAT_SUPERVISOR_H
#define PGCAT_SUPERVISOR_H

#include <stdbool.h>

#include "types.h"

/* Runs until the instance shuts down; returns the exit code. Takes cfg. */
int supervisor_run(struct config *cfg, const char *config_path, const char *exe_path, bool take_over);

#endif
