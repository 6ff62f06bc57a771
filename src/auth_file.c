/* SPDX-License-Identifier: MIT */
/*
 * auth_file: reading PgBouncer's userlist.txt format. See auth_file.h.
 */
#include "auth_file.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(AUTH_FILE_MAX_FIELD == 2048, "read_field's message names the longest field");

/* One quoted field at text[*i]: copies its value (quotes undoubled) into
 * buf. Returns false (why set) when the line does not hold one. */
static bool read_field(const char *text, size_t end, size_t *i, char *buf, size_t bufsz, const char **why)
{
	while (*i < end && (text[*i] == ' ' || text[*i] == '\t'))
		(*i)++;
	if (*i >= end || text[*i] != '"') {
		*why = "expected a double-quoted field";
		return false;
	}
	(*i)++;
	size_t n = 0;
	for (;;) {
		if (*i >= end) {
			*why = "unterminated double quote";
			return false;
		}
		char ch = text[*i];
		if (ch == '"') {
			if (*i + 1 < end && text[*i + 1] == '"') {
				ch = '"';
				(*i)++;
			} else {
				(*i)++;
				break;
			}
		} else if (ch == '\0') {
			*why = "NUL byte in a field";
			return false;
		}
		if (n + 1 >= bufsz) {
			*why = "field longer than 2047 bytes";
			return false;
		}
		buf[n++] = ch;
		(*i)++;
	}
	buf[n] = '\0';
	return true;
}

static bool add(struct auth_file *af, const char *user, const char *secret, int line)
{
	for (size_t k = 0; k < af->n; k++) {
		if (strcmp(af->entries[k].user, user) == 0) {
			char *s = strdup(secret);
			if (!s)
				return false;
			free(af->entries[k].secret);
			af->entries[k].secret = s;
			af->entries[k].line = line;
			return true;
		}
	}
	if (af->n == af->cap) {
		size_t cap = af->cap ? af->cap * 2 : 16;
		struct auth_file_entry *e = realloc(af->entries, cap * sizeof *e);
		if (!e)
			return false;
		af->entries = e;
		af->cap = cap;
	}
	char *u = strdup(user), *s = strdup(secret);
	if (!u || !s) {
		free(u);
		free(s);
		return false;
	}
	af->entries[af->n++] = (struct auth_file_entry){ u, s, line };
	return true;
}

bool auth_file_parse(const char *text, size_t len, struct auth_file *out, auth_file_bad_line_fn bad, void *arg)
{
	memset(out, 0, sizeof *out);
	char user[AUTH_FILE_MAX_FIELD], secret[AUTH_FILE_MAX_FIELD];
	size_t pos = 0;
	int line = 0;
	while (pos < len) {
		line++;
		size_t end = pos;
		while (end < len && text[end] != '\n')
			end++;
		size_t i = pos;
		size_t next = end < len ? end + 1 : end;
		/* tolerate CRLF */
		size_t stop = end > pos && text[end - 1] == '\r' ? end - 1 : end;
		while (i < stop && (text[i] == ' ' || text[i] == '\t'))
			i++;
		if (i == stop || text[i] == ';' || text[i] == '#') {
			pos = next;
			continue;
		}
		const char *why = NULL;
		if (!read_field(text, stop, &i, user, sizeof user, &why) ||
		    !read_field(text, stop, &i, secret, sizeof secret, &why)) {
			if (bad)
				bad(arg, line, why);
		} else if (!user[0]) {
			if (bad)
				bad(arg, line, "empty user name");
		} else if (!add(out, user, secret, line)) {
			auth_file_free(out);
			return false;
		}
		pos = next;
	}
	return true;
}

void auth_file_free(struct auth_file *af)
{
	for (size_t k = 0; k < af->n; k++) {
		free(af->entries[k].user);
		free(af->entries[k].secret);
	}
	free(af->entries);
	memset(af, 0, sizeof *af);
}

const struct auth_file_entry *auth_file_find(const struct auth_file *af, const char *user)
{
	for (size_t k = 0; k < af->n; k++)
		if (strcmp(af->entries[k].user, user) == 0)
			return &af->entries[k];
	return NULL;
}
