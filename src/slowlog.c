/* SPDX-License-Identifier: MIT */
/*
 * slowlog: the notes of a request and the slow-query line (slowlog.h).
 */
#include "slowlog.h"

#include <inttypes.h>
#include <pg_query.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sqllex.h"

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
	snprintf(r->stmt, sizeof r->stmt, "%s", name && name[0] ? name : "(unnamed)");
}

void slowlog_note_client(struct slowlog_req *r, uint64_t client_id, const char *addr, int port)
{
	r->client_id = client_id;
	r->client_port = port;
	snprintf(r->client_addr, sizeof r->client_addr, "%s", addr ? addr : "");
}

/* The normalised text in out (cap bytes) with its comments as one space
 * each (a comment may hold anything: an e-mail, a key); false when a
 * constant is left in it (libpg_query's normalisation leaves some: those
 * of utility statements as NOTIFY's payload, EXECUTE's arguments, COPY's
 * file, a type's length): such a text is not written at all. Quoted
 * identifiers stay; $n are the normalisation's (or the client's)
 * parameters. */
static bool constant_free(const char *s, char *out, size_t cap)
{
	size_t len = strlen(s), o = 0;
	for (size_t i = 0; i < len;) {
		unsigned char ch = (unsigned char)s[i];
		size_t next;
		if (sqllex_at_comment(s, len, i)) {
			next = sqllex_comment_end(s, len, i);
			if (next == SQLLEX_OPEN)
				return false;
			if (o + 1 >= cap)
				return false;
			out[o++] = ' ';
			i = next;
			continue;
		}
		if (ch == '"') {
			next = sqllex_quoted_end(s, len, i);   /* a quoted identifier */
			if (next == SQLLEX_OPEN || next == i)
				return false;
		} else if (ch == '\'' || sqllex_is_digit(ch) || (ch == '.' && i + 1 < len && sqllex_is_digit((unsigned char)s[i + 1]))) {
			return false;   /* a string or a number */
		} else if (ch == '$') {
			if (i + 1 >= len || !sqllex_is_digit((unsigned char)s[i + 1]))
				return false;   /* a dollar-quoted string */
			next = i + 1;
			while (next < len && sqllex_is_digit((unsigned char)s[next]))
				next++;
		} else if (sqllex_is_ident_start(ch)) {
			next = sqllex_word_end(s, len, i);   /* (a word: E'x', B'1' and U&'x' end at their quote, above) */
		} else {
			next = i + 1;
		}
		if (o + (next - i) >= cap)
			return false;
		memcpy(out + o, s + i, next - i);
		o += next - i;
		i = next;
	}
	out[o] = '\0';
	return true;
}

static void reset(struct slowlog_req *r)
{
	r->noted = r->cut = false;
	r->len = 0;
	r->stmt[0] = '\0';
	r->wait_us = 0;
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
	/* Constants out (normalise), then the shape's fingerprint: of the
	 * text as it came, which libpg_query reads the same way. A text
	 * libpg_query cannot read is not written at all: it may hold values. */
	const char *text = "", *fingerprint = "";
	PgQueryNormalizeResult norm = { 0 };
	PgQueryFingerprintResult fp = { 0 };
	bool have_text = r->len > 0 && !r->cut, asked = have_text, unsafe = false;
	char *clean = NULL;
	if (have_text) {
		norm = pg_query_normalize(r->sql);
		fp = pg_query_fingerprint(r->sql);
		clean = norm.normalized_query ? malloc(strlen(norm.normalized_query) + 1) : NULL;
		if (!norm.error && clean && !fp.error && fp.fingerprint_str &&
		    constant_free(norm.normalized_query, clean, strlen(norm.normalized_query) + 1)) {
			text = clean;
			fingerprint = fp.fingerprint_str;
		} else {
			have_text = false;
			unsafe = !norm.error && clean;
		}
	}
	const char *what = have_text ? text
		: r->stmt[0] ? r->stmt
		: r->cut ? "(text longer than 8 kB: not written)"
		: unsafe ? "(text not written: constants left after normalising)" : "(text not written: not read as SQL)";
	char wait_ms[32], dur_ms[32];
	snprintf(dur_ms, sizeof dur_ms, "%.3f", (double)duration_us / 1000.0);
	snprintf(wait_ms, sizeof wait_ms, "%.3f", (double)r->wait_us / 1000.0);
	struct log_field f[] = {
		{ "fingerprint", fingerprint, 0 },
		{ "query", have_text ? text : "", 0 },
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
		  r->stmt[0] && !have_text ? ", prepared statement" : "", what);
	if (asked) {
		pg_query_free_normalize_result(norm);
		pg_query_free_fingerprint_result(fp);
	}
	free(clean);
	reset(r);
}

void slowlog_free(struct slowlog_req *r)
{
	free(r->sql);
	r->sql = NULL;
	r->cap = r->len = 0;
}
