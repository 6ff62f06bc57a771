/* SPDX-License-Identifier: MIT */
/*
 * setters: a client's prepared statements (by name; "" is the unnamed one)
 * whose executions change session settings, and what each does, as its
 * Parse said (params_setter_of). A statement changes the settings where
 * and when it runs: the client's pump reads this at each Bind, so that a
 * statement parsed in one transaction and run in a later one, on another
 * server, is tracked there too (SPEC §10). Pure data, allocated at the
 * first such Parse: most clients have none.
 */
#ifndef PGCAT_SETTERS_H
#define PGCAT_SETTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "params.h"

/* Statements remembered per client; past that, a Bind of a statement not
 * listed is taken as one pgcat cannot follow (the server is reset). */
#define SETTERS_MAX 16
/* The longest text kept to be tracked at each run; a longer setter is one
 * pgcat cannot follow. */
#define SETTERS_SQL_MAX (8u * 1024)

struct setter {
	char *name;                  /* the statement's name, "" for the unnamed one */
	enum params_setter kind;     /* never PARAMS_SETTER_NONE here */
	char *sql;                   /* PARAMS_SETTER_TEXT: its text */
	size_t len;
	uint16_t name_param, value_param;   /* PARAMS_SETTER_BOUND */
};

struct setters {
	unsigned n;
	bool overflow;               /* some setter could not be listed */
	struct setter e[SETTERS_MAX];
};

/* The client parsed statement name with text sql: listed if it changes
 * settings (kind as params_setter_of says; UNTRACKED when too long to
 * keep), dropped from the list otherwise (a name parsed again, the
 * unnamed statement replaced). *sp is made at the first one. false: out of
 * memory (the caller takes the statement as one it cannot follow). */
bool setters_note_parse(struct setters **sp, const char *name, const char *sql, size_t len)
	__attribute__((warn_unused_result));
/* The same for a statement whose text is not read (too long): untracked. */
bool setters_note_unread(struct setters **sp, const char *name) __attribute__((warn_unused_result));
/* The entry of statement name, or NULL. */
const struct setter *setters_find(const struct setters *s, const char *name);
void setters_free(struct setters **sp);

#endif
