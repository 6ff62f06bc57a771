/* SPDX-License-Identifier: MIT */
/*
 * prometheus: GET /metrics in the Prometheus text format (SPEC §8), served
 * by libevent's evhttp on prometheus_port. Reads pools and stats; changes
 * nothing.
 */
#ifndef PGCAT_PROMETHEUS_H
#define PGCAT_PROMETHEUS_H

#include <stdbool.h>

#include "types.h"

/* Start, restart (port changed) or stop the listener per the current config. */
bool prometheus_reconfigure(struct worker *w) __attribute__((warn_unused_result));
void prometheus_stop(struct worker *w);
/* The metrics text for the current state, appended to out (for tests too). */
void prometheus_render(struct worker *w, struct evbuffer *out);

#endif
