/* SPDX-License-Identifier: MIT */
/*
 * web: the read-only web page on the metrics listener (SPEC §8). GET /
 * is the page (HTML, CSS and JavaScript built into the binary), GET
 * /api/state what it shows, as JSON, polled by the page. Both are behind
 * HTTP basic auth for the users of admin_users and stats_users, and served
 * over TLS when pgcat requires TLS of its clients. prometheus.c owns the
 * listener (evhttp) and hands it over here; /metrics stays its own.
 * Reads pools, stats and the shared segment; changes nothing but the
 * listing requests it posts to the other workers.
 */
#ifndef PGCAT_WEB_H
#define PGCAT_WEB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

struct evhttp;
struct evbuffer;

/* Serve the page on http (GET /, GET /api/state), over TLS per the
 * client-side settings. false: out of memory, or TLS wanted but its
 * context could not be built (logged); http is then left as it was. */
bool web_attach(struct worker *w, struct evhttp *http) __attribute__((warn_unused_result));
/* Before http is freed: checks of passwords still running are dropped
 * (their requests answered 503) and the page's state freed. */
void web_detach(struct worker *w);
/* After a RELOAD on the same port: TLS as the clients' settings now say
 * (on, off, or new files). false: the page stays as it was (logged);
 * /metrics is served either way. */
bool web_reconfigure(struct worker *w);

/* The listings of clients and servers gathered from the other workers
 * (SHM_ADMIN_DUMP): which request was posted when, so that the page's
 * polls ask at most once a second and read the answer of the request
 * before (never waiting for one). */
struct web_lists {
	uint64_t seq_posted[2], seq_answerable[2];
	uint64_t posted_us[2];
};

/* The page's JSON for the current state, appended to out (web_state.c). */
void web_state_render(struct worker *w, struct web_lists *lists, struct evbuffer *out);

/* The page itself: src/web/index.html, turned into C at build time
 * (scripts/embed-asset.sh). */
extern const unsigned char web_index_html[];
extern const size_t web_index_html_len;

#endif
