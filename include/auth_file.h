/* SPDX-License-Identifier: MIT */
/*
 * auth_file: PgBouncer's userlist.txt (SPEC §2 auth_file). One user per
 * line, two double-quoted fields: "user" "secret", the secret being a
 * plaintext password, "md5" + 32 hex digits, or a SCRAM-SHA-256 verifier.
 * A double quote inside a field is written twice. Blank lines and lines
 * starting with ';' or '#' are ignored; anything after the second field is
 * ignored too, as PgBouncer does. Pure: parsing only, no globals.
 */
#ifndef PGCAT_AUTH_FILE_H
#define PGCAT_AUTH_FILE_H

#include <stdbool.h>
#include <stddef.h>

/* A field's longest, with its NUL: PgBouncer's MAX_PASSWORD, so that a
 * userlist PgBouncer takes (passwords up to 2047 bytes) is taken whole. */
#define AUTH_FILE_MAX_FIELD 2048

struct auth_file_entry {
	char *user;
	char *secret;
	int line;
};

struct auth_file {
	struct auth_file_entry *entries;
	size_t n, cap;
};

/* Called for each line that is not understood (the line is skipped). */
typedef void (*auth_file_bad_line_fn)(void *arg, int line, const char *why);

/* Parse text of len bytes. A user listed twice keeps its last secret.
 * Returns false only when out of memory (out is then emptied). */
bool auth_file_parse(const char *text, size_t len, struct auth_file *out, auth_file_bad_line_fn bad, void *arg)
	__attribute__((warn_unused_result));
void auth_file_free(struct auth_file *af);
/* The entry for user, or NULL. */
const struct auth_file_entry *auth_file_find(const struct auth_file *af, const char *user);

#endif
