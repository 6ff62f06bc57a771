/* SPDX-License-Identifier: MIT */
/*
 * ident: auth_ident_file's lines (PostgreSQL's pg_ident.conf format) into
 * entries, and whether a map lets a system user log in as a PG user.
 *
 * A line is three fields separated by blanks: a field is a bare word or a
 * "quoted name" ("" for a quote), and # starts a comment. PostgreSQL's
 * reader cuts fields at commas too and then refuses a list there, so a
 * bare comma is refused here with a hint to quote (a regex such as
 * /^a{1,3}$ needs quotes in PostgreSQL as well).
 */
#define _POSIX_C_SOURCE 200809L
#include "ident.h"

#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDENT_MAX_NAME 63      /* NAMEDATALEN - 1, as hba.c: longer PG names never reach pgcat whole */
#define IDENT_MAX_SYSTEM 255   /* OS user names and certificate CNs (64 at most) are shorter */
#define IDENT_MAX_FIELD 1024   /* a regular expression */
#define IDENT_WHY_MAX 256
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

struct field {
	char *s;
	bool quoted;
};

struct line {
	struct field f[IDENT_FIELDS];
	size_t n;
	char why[IDENT_WHY_MAX];
	bool oom;
};

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

__attribute__((format(printf, 2, 3)))
static bool fail(struct line *ln, const char *fmt, ...)
{
	if (ln->why[0] == '\0') {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ln->why, sizeof ln->why, fmt, ap);
		va_end(ap);
	}
	return false;
}

/* One field at *p (p < end, not blank, not '#') into ln->f[ln->n]. */
static bool read_field(struct line *ln, const char **p, const char *end)
{
	const char *s = *p;
	size_t cap = (size_t)(end - s) + 1;
	if (cap > IDENT_MAX_FIELD + 3)   /* (the quotes) */
		cap = IDENT_MAX_FIELD + 3;
	char *out = malloc(cap);
	if (!out) {
		ln->oom = true;
		return false;
	}
	size_t used = 0;
	bool quoted = *s == '"';
	if (quoted) {
		for (s++;; s++) {
			if (s >= end) {
				free(out);
				return fail(ln, "unterminated quoted name");
			}
			if (*s == '"') {
				if (s + 1 < end && s[1] == '"')
					s++;
				else {
					s++;
					break;
				}
			}
			if (used >= IDENT_MAX_FIELD) {
				free(out);
				return fail(ln, "a field longer than %d bytes", IDENT_MAX_FIELD);
			}
			out[used++] = *s;
		}
		if (s < end && !is_blank(*s) && *s != '#') {
			free(out);
			return fail(ln, "unexpected character '%c' after a quoted name", *s);
		}
	} else {
		for (; s < end && !is_blank(*s) && *s != '#'; s++) {
			if (*s == '"') {
				free(out);
				return fail(ln, "a quote inside a name: quote the whole name (\"...\")");
			}
			if (*s == ',') {
				free(out);
				return fail(ln, "a comma outside quotes: a map line takes one name per field "
						"(quote a name or regular expression that holds a comma)");
			}
			if (used >= IDENT_MAX_FIELD) {
				free(out);
				return fail(ln, "a field longer than %d bytes", IDENT_MAX_FIELD);
			}
			out[used++] = *s;
		}
	}
	out[used] = '\0';
	if (used == 0) {
		free(out);
		return fail(ln, "empty name");
	}
	ln->f[ln->n++] = (struct field){ out, quoted };
	*p = s;
	return true;
}

static bool split_fields(struct line *ln, const char *p, const char *end)
{
	for (;;) {
		while (p < end && is_blank(*p))
			p++;
		if (p >= end || *p == '#')
			return true;
		if (ln->n == IDENT_FIELDS)
			return fail(ln, "more than three fields (map name, system user name, PG user name)");
		if (!read_field(ln, &p, end))
			return false;
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
		return fail(ln, "empty regular expression for the %s", what);
	regex_t *re = malloc(sizeof *re);
	if (!re) {
		ln->oom = true;
		return false;
	}
	int rc = regcomp(re, pattern, REG_EXTENDED);
	if (rc != 0) {
		char msg[128];
		regerror(rc, re, msg, sizeof msg);
		free(re);
		if (rc == REG_ESPACE) {
			ln->oom = true;
			return false;
		}
		return fail(ln, "invalid regular expression for the %s: %s", what, msg);
	}
	*out = re;
	return true;
}

/* Fields taken over by e (ln's pointers cleared). */
static bool read_entry(struct line *ln, struct ident_entry *e)
{
	if (ln->n < IDENT_FIELDS)
		return fail(ln, "%s", ln->n == 1 ? "missing the system user name and the PG user name"
						 : "missing the PG user name");
	struct field *map = &ln->f[0], *sys = &ln->f[1], *pg = &ln->f[2];
	if (strlen(map->s) > IDENT_MAX_NAME)
		return fail(ln, "map name \"%.40s...\" is longer than %d bytes", map->s, IDENT_MAX_NAME);
	/* A '/' starts a regular expression, quoted or not, as PostgreSQL
	 * reads this file (quotes let it hold blanks and commas). */
	if (sys->s[0] == '/') {
		if (!compile(ln, sys->s + 1, "system user name", &e->system_re))
			return false;
	} else if (strlen(sys->s) > IDENT_MAX_SYSTEM) {
		return fail(ln, "system user name \"%.40s...\" is longer than %d bytes", sys->s, IDENT_MAX_SYSTEM);
	}
	if (!pg->quoted && strcmp(pg->s, "all") == 0) {
		e->pg_kind = PG_ALL;
	} else if (!pg->quoted && pg->s[0] == '+') {
		return fail(ln, "group names (\"%s\") are not supported: pgcat knows no role membership", pg->s);
	} else if (!pg->quoted && pg->s[0] == '@') {
		return fail(ln, "file inclusion (\"%s\") is not supported: write the names on the line", pg->s);
	} else if (pg->s[0] == '/') {
		if (strstr(pg->s, "\\1"))
			return fail(ln, "\\1 in a regular expression for the PG user name is not supported");
		e->pg_kind = PG_REGEX;
		if (!compile(ln, pg->s + 1, "PG user name", &e->pg_re))
			return false;
	} else {
		e->pg_kind = PG_NAME;
		const char *br = strstr(pg->s, "\\1");
		if (br && e->system_re) {
			if (e->system_re->re_nsub < 1)
				return fail(ln, "the PG user name has \\1 but the regular expression \"%s\" has no "
						"parenthesized group", sys->s);
			e->backref = br;
		} else if (strlen(pg->s) > IDENT_MAX_NAME) {
			return fail(ln, "PG user name \"%.40s...\" is longer than %d bytes and would never match", pg->s,
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

static enum ident_parse_result parse_line(struct ident *id, const char *s, const char *end, int lineno,
					  ident_bad_line_fn bad, void *arg)
{
	struct line ln = { 0 };
	struct ident_entry e = { .line = lineno };
	if (split_fields(&ln, s, end) && ln.n > 0 && read_entry(&ln, &e)) {
		struct ident_entry *grown = realloc(id->entries, (id->n + 1) * sizeof *id->entries);
		if (grown) {
			id->entries = grown;
			id->entries[id->n++] = e;
			e = (struct ident_entry){ 0 };
		} else {
			ln.oom = true;
		}
	}
	entry_free(&e);
	for (size_t i = 0; i < ln.n; i++)
		free(ln.f[i].s);
	if (ln.oom)
		return IDENT_PARSE_NOMEM;
	if (ln.why[0]) {
		if (bad)
			bad(arg, lineno, ln.why);
		return IDENT_PARSE_BAD;
	}
	return IDENT_PARSE_OK;
}

enum ident_parse_result ident_parse(const char *text, size_t len, struct ident *out, ident_bad_line_fn bad,
				    void *arg)
{
	*out = (struct ident){ 0 };
	enum ident_parse_result res = IDENT_PARSE_OK;
	const char *p = text, *end = text + len;
	for (int lineno = 1; p < end && res != IDENT_PARSE_NOMEM; lineno++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;
		enum ident_parse_result r;
		if (memchr(p, '\0', (size_t)(eol - p))) {
			if (bad)
				bad(arg, lineno, "the line contains a NUL byte");
			r = IDENT_PARSE_BAD;
		} else {
			r = parse_line(out, p, eol, lineno, bad, arg);
		}
		if (r != IDENT_PARSE_OK)
			res = r;
		p = nl ? nl + 1 : end;
	}
	if (res != IDENT_PARSE_OK)
		ident_free(out);
	return res;
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
