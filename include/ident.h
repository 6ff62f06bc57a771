/* SPDX-License-Identifier: MIT */
/*
 * ident: auth_ident_file, PostgreSQL's pg_ident.conf format (user name
 * maps). Each line is MAPNAME SYSTEM-USERNAME PG-USERNAME: under the map
 * MAPNAME (an hba line's map=), the system user (the OS user of a peer
 * login, the certificate's CN of a cert login) may log in as the
 * PostgreSQL user. A system name starting with '/' is a regular
 * expression (POSIX extended), whose first parenthesized group replaces
 * \1 in the PG name; the PG name `all` allows every user, and a PG name
 * starting with '/' is a regular expression too (PostgreSQL 16). Parsing
 * is all or nothing and reports every bad line with its number, as
 * hba.c. No I/O here: config_load.c reads the file, login.c asks.
 */
#ifndef PGCAT_IDENT_H
#define PGCAT_IDENT_H

#include <stdbool.h>
#include <stddef.h>

struct ident_entry;

struct ident {
	struct ident_entry *entries;
	size_t n;
};

/* Called for each bad line (why: a sentence without the line number). */
typedef void (*ident_bad_line_fn)(void *arg, int line, const char *why);

enum ident_parse_result { IDENT_PARSE_OK, IDENT_PARSE_BAD, IDENT_PARSE_NOMEM };

/* Parse text (len bytes, NUL bytes refused). IDENT_PARSE_OK: *out holds
 * the entries (maybe none). Otherwise *out is empty; IDENT_PARSE_BAD:
 * bad(arg, line, why) was called for each bad line (bad may be NULL). */
enum ident_parse_result ident_parse(const char *text, size_t len, struct ident *out, ident_bad_line_fn bad,
				    void *arg) __attribute__((warn_unused_result));
void ident_free(struct ident *id);

/* Whether some line names the map (an hba line's map= must). */
bool ident_has_map(const struct ident *id, const char *map);

/* Whether, under map, system_user may log in as pg_user: the first line
 * that allows it, else false. Names are compared exactly (case matters,
 * as PostgreSQL compares them for peer and cert). */
bool ident_match(const struct ident *id, const char *map, const char *system_user, const char *pg_user);

#endif
