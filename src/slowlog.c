/* SPDX-License-Identifier: MIT */
/*
 * slowlog: the notes of a request and the slow-query line (slowlog.h).
 */
#include "slowlog.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "qshape.h"

void slowlog_note_text(struct slowlog_req *r, const char *sql, size_t len)
{
	if (r->noted)
		return;   /* (the request's first text is the one logged) */
	r->noted = true;
	r->cut = len > SLOWLOG_SQL_MAX;
	if (r->cut)
		len = SLOWLOG_SQL_MAX;
	if (len + 1 > r->cap) {
		char *n = realloc(r->sql, len + 1);
		if (!n) {
			r->len = 0;
			r->cut = true;   /* (written without text) */
			return;
		}
		r->sql = n;
		r->cap = (uint32_t)len + 1;
	}
	memcpy(r->sql, sql, len);
	r->sql[len] = '\0';
	r->len = (uint32_t)len;
}

void slowlog_note_statement(struct slowlog_req *r, const char *name)
{
	if (r->noted)
		return;
	r->noted = true;
	r->len = 0;
	if (!name || !name[0])
		name = "(unnamed)";
	size_t n = strnlen(name, sizeof r->stmt - 1);
	memcpy(r->stmt, name, n);
	r->stmt[n] = '\0';
}

void slowlog_note_client(struct slowlog_req *r, uint64_t client_id, const char *addr, int port)
{
	r->client_id = client_id;
	r->client_port = port;
	snprintf(r->client_addr, sizeof r->client_addr, "%s", addr ? addr : "");
}

static void reset(struct slowlog_req *r)
{
	r->noted = r->cut = false;
	r->len = 0;
	r->stmt[0] = '\0';
	r->wait_us = 0;
	r->qkey = r->rows = 0;
	r->errors = 0;
}

void slowlog_note_key(struct slowlog_req *r, uint64_t key)
{
	r->qkey = key;
}

void slowlog_note_complete(struct slowlog_req *r, const char *tag, size_t len)
{
	/* The rows of the commands that say so: "SELECT 5", "INSERT 0 5",
	 * "UPDATE 5", "DELETE 5", "MERGE 5", "FETCH 5", "MOVE 5", "COPY 5"
	 * (the count is the tag's last word; CREATE TABLE AS and SELECT INTO
	 * say SELECT too). */
	while (len > 0 && tag[len - 1] == '\0')
		len--;
	const char *word = NULL;
	switch (len > 5 ? tag[0] : '\0') {
	case 'S': word = "SELECT "; break;
	case 'I': word = "INSERT "; break;
	case 'U': word = "UPDATE "; break;
	case 'D': word = "DELETE "; break;
	case 'M': word = tag[1] == 'E' ? "MERGE " : "MOVE "; break;
	case 'F': word = "FETCH "; break;
	case 'C': word = "COPY "; break;
	default: return;
	}
	size_t wl = strlen(word);
	if (len <= wl || memcmp(tag, word, wl) != 0)
		return;
	size_t d = len;
	while (d > 0 && tag[d - 1] >= '0' && tag[d - 1] <= '9')
		d--;
	if (d == len || d == 0 || tag[d - 1] != ' ' || len - d > 19)
		return;
	uint64_t v = 0;
	for (size_t i = d; i < len; i++)
		v = v * 10 + (uint64_t)(tag[i] - '0');
	r->rows += v;
}

void slowlog_note_error(struct slowlog_req *r)
{
	r->errors++;
}

void slowlog_begin(struct slowlog_req *r, uint64_t wait_us)
{
	reset(r);
	r->wait_us = wait_us;
}

void slowlog_done(struct slowlog_req *r, uint64_t duration_us, uint64_t min_us, const struct slowlog_where *where)
{
	if (!r->noted || !min_us || duration_us < min_us || !log_enabled(LOG_LEVEL_INFO)) {
		reset(r);
		return;
	}
	/* Constants out (normalise), and the shape's fingerprint (qshape.h).
	 * A text libpg_query cannot read, or that keeps a constant, is not
	 * written at all: it may hold values. */
	struct qshape_desc d = { 0 };
	bool have_text = r->len > 0 && !r->cut;
	if (have_text)
		qshape_describe(r->sql, &d);
	const char *text = have_text && d.why == QSHAPE_TEXT_OK ? d.text : NULL;
	const char *fingerprint = text ? d.fingerprint_hex : "";
	const char *what = text ? text
		: r->stmt[0] ? r->stmt
		: r->cut ? "(text longer than 8 kB: not written)"
		: qshape_text_why(have_text ? d.why : QSHAPE_TEXT_NOT_SQL);
	char wait_ms[32], dur_ms[32];
	snprintf(dur_ms, sizeof dur_ms, "%.3f", (double)duration_us / 1000.0);
	snprintf(wait_ms, sizeof wait_ms, "%.3f", (double)r->wait_us / 1000.0);
	struct log_field f[] = {
		{ "fingerprint", fingerprint, 0 },
		{ "query", text ? text : "", 0 },
		{ "statement", r->stmt, 0 },
		{ "duration_ms", dur_ms, 0 },
		{ "wait_ms", wait_ms, 0 },
		{ "pool", where->pool, 0 },
		{ "user", where->user, 0 },
		{ "client_id", NULL, (long long)r->client_id },
		{ "client_addr", r->client_addr, 0 },
		{ "client_port", NULL, r->client_port },
		{ "server_id", NULL, (long long)where->server_id },
		{ "host", where->host, 0 },
		{ "port", NULL, where->port },
		{ "shard", NULL, where->shard },
	};
	log_event(LOG_LEVEL_INFO, "slow_query", f, sizeof f / sizeof *f, NULL,
		  "slow query: %s ms, waited %s ms, pool %s, user %s, client C-%" PRIu64 " %s:%d, server S-%" PRIu64
		  " %s:%d, shard %d, fingerprint %s%s: %s",
		  dur_ms, wait_ms, where->pool, where->user, r->client_id, r->client_addr, r->client_port,
		  where->server_id, where->host, where->port, where->shard, fingerprint[0] ? fingerprint : "-",
		  r->stmt[0] && !text ? ", prepared statement" : "", what);
	qshape_desc_free(&d);
	reset(r);
}

void slowlog_free(struct slowlog_req *r)
{
	free(r->sql);
	r->sql = NULL;
	r->cap = r->len = 0;
}
