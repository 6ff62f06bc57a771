/* SPDX-License-Identifier: MIT */
/*
 * ident: auth_ident_file's lines (PostgreSQL's pg_ident.conf format) into
 * entries, and whether a map lets a system user log in as a PG user.
 *
 * A line is three fields separated by blanks: a field is a bare word or a
 * "quoted name" ("" for a quote), and # starts a comment. PostgreSQL's
 * reader cuts fields at commas too and then refuses a list there, so a
 * bare comma is refused here with a hint to quote (a regex such as
 * /^a{1,3}$ needs quotes in PostgreSQL as well). The cutting is
 * conf_tokens.c's, shared with hba.c.
 */
#define _POSIX_C_SOURCE 200809L
#include "ident.h"

#include "conf_tokens.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDENT_MAX_NAME 63      /* NAMEDATALEN - 1, as hba.c: longer PG names never reach pgcat whole */
#define IDENT_MAX_SYSTEM 255   /* OS user names and certificate CNs (64 at most) are shorter */
#define IDENT_MAX_FIELD 1024   /* a regular expression */
#define IDENT_FIELDS 3

enum pg_kind { PG_NAME, PG_ALL, PG_REGEX };

struct ident_entry {
	int line;
	char *map;
	char *system;          /* as written; for a regex without its '/' */
	regex_t *system_re;    /* NULL: a name compared exactly */
	enum pg_kind pg_kind;
	char *pg;              /* PG_NAME: the name (maybe with \1); PG_REGEX: the pattern */
	regex_t *pg_re;
	const char *backref;   /* PG_NAME with a regex system name: where \1 is in pg, else NULL */
};

struct line {
	struct conf_token f[IDENT_FIELDS];
	size_t n;
	struct conf_status *st;
};

/* PostgreSQL cuts a map line's fields at commas too and then refuses a
 * list, so a bare comma is refused (with a hint to quote) rather than
 * taken as part of a name; a field is at most IDENT_MAX_FIELD bytes. */
static const struct conf_token_rules ident_tokens = {
	.max_len = IDENT_MAX_FIELD,
	.bare_comma = "a comma outside quotes: a map line takes one name per field "
		      "(quote a name or regular expression that holds a comma)",
};

static bool split_fields(struct line *ln, const char *p, const char *end)
{
	for (;;) {
		p = conf_skip_blanks(p, end);
		if (p >= end || *p == '#')
			return true;
		if (ln->n == IDENT_FIELDS)
			return conf_fail(ln->st, "more than three fields (map name, system user name, PG user name)");
		if (!conf_read_token(ln->st, &p, end, &ident_tokens, &ln->f[ln->n]))
			return false;
		ln->n++;
	}
}

static void entry_free(struct ident_entry *e)
{
	free(e->map);
	free(e->system);
	free(e->pg);
	if (e->system_re) {
		regfree(e->system_re);
		free(e->system_re);
	}
	if (e->pg_re) {
		regfree(e->pg_re);
		free(e->pg_re);
	}
}

/* pattern compiled into *out (POSIX extended); false: reported. */
static bool compile(struct line *ln, const char *pattern, const char *what, regex_t **out)
{
	if (pattern[0] == '\0')
		return conf_fail(ln->st, "empty regular expression for the %s", what);
	regex_t *re = malloc(sizeof *re);
	if (!re) {
		ln->st->oom = true;
		return false;
	}
	int rc = regcomp(re, pattern, REG_EXTENDED);
	if (rc != 0) {
		char msg[128];
		regerror(rc, re, msg, sizeof msg);
		free(re);
		if (rc == REG_ESPACE) {
			ln->st->oom = true;
			return false;
		}
		return conf_fail(ln->st, "invalid regular expression for the %s: %s", what, msg);
	}
	*out = re;
	return true;
}

/* Fields taken over by e (ln's pointers cleared). */
static bool read_entry(struct line *ln, struct ident_entry *e)
{
	if (ln->n < IDENT_FIELDS)
		return conf_fail(ln->st, "%s", ln->n == 1 ? "missing the system user name and the PG user name"
						 : "missing the PG user name");
	struct conf_token *map = &ln->f[0], *sys = &ln->f[1], *pg = &ln->f[2];
	if (strlen(map->s) > IDENT_MAX_NAME)
		return conf_fail(ln->st, "map name \"%.40s...\" is longer than %d bytes", map->s, IDENT_MAX_NAME);
	/* A '/' starts a regular expression, quoted or not, as PostgreSQL
	 * reads this file (quotes let it hold blanks and commas). */
	if (sys->s[0] == '/') {
		if (!compile(ln, sys->s + 1, "system user name", &e->system_re))
			return false;
	} else if (strlen(sys->s) > IDENT_MAX_SYSTEM) {
		return conf_fail(ln->st, "system user name \"%.40s...\" is longer than %d bytes", sys->s, IDENT_MAX_SYSTEM);
	}
	if (!pg->quoted && strcmp(pg->s, "all") == 0) {
		e->pg_kind = PG_ALL;
	} else if (!pg->quoted && pg->s[0] == '+') {
		return conf_fail(ln->st, "group names (\"%s\") are not supported: pgcat knows no role membership", pg->s);
	} else if (!pg->quoted && pg->s[0] == '@') {
		return conf_fail(ln->st, "file inclusion (\"%s\") is not supported: write the names on the line", pg->s);
	} else if (pg->s[0] == '/') {
		if (strstr(pg->s, "\\1"))
			return conf_fail(ln->st, "\\1 in a regular expression for the PG user name is not supported");
		e->pg_kind = PG_REGEX;
		if (!compile(ln, pg->s + 1, "PG user name", &e->pg_re))
			return false;
	} else {
		e->pg_kind = PG_NAME;
		const char *br = strstr(pg->s, "\\1");
		if (br && e->system_re) {
			if (e->system_re->re_nsub < 1)
				return conf_fail(ln->st, "the PG user name has \\1 but the regular expression \"%s\" has no "
						"parenthesized group", sys->s);
			e->backref = br;
		} else if (strlen(pg->s) > IDENT_MAX_NAME) {
			return conf_fail(ln->st, "PG user name \"%.40s...\" is longer than %d bytes and would never match", pg->s,
				    IDENT_MAX_NAME);
		}
	}
	e->map = map->s;
	e->system = sys->s;
	e->pg = pg->s;
	if (e->backref)
		e->backref = e->pg + (e->backref - pg->s);
	map->s = sys->s = pg->s = NULL;
	return true;
}

void ident_free(struct ident *id)
{
	if (!id)
		return;
	for (size_t i = 0; i < id->n; i++)
		entry_free(&id->entries[i]);
	free(id->entries);
	id->entries = NULL;
	id->n = 0;
}

/* One line (conf_line_fn): an entry appended to the struct ident at ctx,
 * or a problem in st. */
static void parse_line(void *ctx, const char *s, const char *end, int lineno, struct conf_status *st)
{
	struct ident *id = ctx;
	struct line ln = { .st = st };
	struct ident_entry e = { .line = lineno };
	if (split_fields(&ln, s, end) && read_entry(&ln, &e)) {
		struct ident_entry *grown = conf_grow(id->entries, id->n, sizeof *id->entries, st);
		if (grown) {
			id->entries = grown;
			id->entries[id->n++] = e;
			e = (struct ident_entry){ 0 };
		}
	}
	entry_free(&e);
	for (size_t i = 0; i < ln.n; i++)
		free(ln.f[i].s);
}

enum ident_parse_result ident_parse(const char *text, size_t len, struct ident *out, ident_bad_line_fn bad,
				    void *arg)
{
	*out = (struct ident){ 0 };
	switch (conf_each_line(text, len, parse_line, out, bad, arg)) {
	case CONF_OK:
		return IDENT_PARSE_OK;
	case CONF_BAD:
		ident_free(out);
		return IDENT_PARSE_BAD;
	case CONF_NOMEM:
		break;
	}
	ident_free(out);
	return IDENT_PARSE_NOMEM;
}

bool ident_has_map(const struct ident *id, const char *map)
{
	for (size_t i = 0; id && i < id->n; i++)
		if (strcmp(id->entries[i].map, map) == 0)
			return true;
	return false;
}

/* e's PG name with \1 replaced by the group m (of subject), compared with
 * pg_user; a result longer than a PG name matches nothing. */
static bool backref_equal(const struct ident_entry *e, const char *subject, const regmatch_t *m, const char *pg_user)
{
	char buf[IDENT_MAX_NAME + 1];
	size_t before = (size_t)(e->backref - e->pg);
	const char *after = e->backref + 2;
	size_t glen = m->rm_so >= 0 && m->rm_eo >= m->rm_so ? (size_t)(m->rm_eo - m->rm_so) : 0;
	size_t alen = strlen(after);
	if (before > IDENT_MAX_NAME || glen > IDENT_MAX_NAME - before || alen > IDENT_MAX_NAME - before - glen)
		return false;
	memcpy(buf, e->pg, before);
	if (glen)
		memcpy(buf + before, subject + m->rm_so, glen);
	memcpy(buf + before + glen, after, alen);
	buf[before + glen + alen] = '\0';
	return strcmp(buf, pg_user) == 0;
}

bool ident_match(const struct ident *id, const char *map, const char *system_user, const char *pg_user)
{
	for (size_t i = 0; id && i < id->n; i++) {
		const struct ident_entry *e = &id->entries[i];
		if (strcmp(e->map, map) != 0)
			continue;
		regmatch_t m[2];
		if (e->system_re) {
			if (regexec(e->system_re, system_user, 2, m, 0) != 0)
				continue;
		} else if (strcmp(e->system, system_user) != 0) {
			continue;
		}
		switch (e->pg_kind) {
		case PG_ALL:
			return true;
		case PG_REGEX:
			if (regexec(e->pg_re, pg_user, 0, NULL, 0) == 0)
				return true;
			break;
		case PG_NAME:
			if (e->backref ? backref_equal(e, system_user, &m[1], pg_user) : strcmp(e->pg, pg_user) == 0)
				return true;
			break;
		}
	}
	return false;
}
