/* SPDX-License-Identifier: MIT */
/*
 * setters: a client's prepared statements that change session settings
 * (include/setters.h). What a text does is params.c's to say; this room
 * keeps the list.
 */
#include "setters.h"

#include <stdlib.h>
#include <string.h>

static void entry_free(struct setter *e)
{
	free(e->name);
	free(e->sql);
	memset(e, 0, sizeof *e);
}

static struct setter *find(struct setters *s, const char *name)
{
	for (unsigned i = 0; s && i < s->n; i++)
		if (strcmp(s->e[i].name, name) == 0)
			return &s->e[i];
	return NULL;
}

static void drop(struct setters *s, const char *name)
{
	struct setter *e = find(s, name);
	if (!e)
		return;
	entry_free(e);
	*e = s->e[--s->n];
	memset(&s->e[s->n], 0, sizeof s->e[s->n]);
}

/* The entry for name, made if need be (its old content freed). NULL: no
 * room (overflow set) or out of memory. */
static struct setter *entry_for(struct setters **sp, const char *name)
{
	if (!*sp && !(*sp = calloc(1, sizeof **sp)))
		return NULL;
	struct setters *s = *sp;
	struct setter *e = find(s, name);
	if (e) {
		char *keep = e->name;
		e->name = NULL;
		entry_free(e);
		e->name = keep;
		return e;
	}
	if (s->n == SETTERS_MAX) {
		s->overflow = true;
		return NULL;
	}
	e = &s->e[s->n];
	if (!(e->name = strdup(name)))
		return NULL;
	s->n++;
	return e;
}

bool setters_note_parse(struct setters **sp, const char *name, const char *sql, size_t len)
{
	uint16_t np = 0, vp = 0;
	enum params_setter kind = params_setter_of(sql, len, &np, &vp);
	if (kind == PARAMS_SETTER_NONE) {
		drop(*sp, name);
		return true;
	}
	if (kind == PARAMS_SETTER_TEXT && len > SETTERS_SQL_MAX)
		kind = PARAMS_SETTER_UNTRACKED;
	struct setter *e = entry_for(sp, name);
	if (!e)
		return *sp && (*sp)->overflow;   /* (overflow: a Bind of it is untracked) */
	e->kind = kind;
	e->name_param = np;
	e->value_param = vp;
	if (kind == PARAMS_SETTER_TEXT) {
		if (!(e->sql = malloc(len + 1))) {
			e->kind = PARAMS_SETTER_UNTRACKED;
			return false;
		}
		memcpy(e->sql, sql, len);
		e->sql[len] = '\0';
		e->len = len;
	}
	return true;
}

bool setters_note_unread(struct setters **sp, const char *name)
{
	struct setter *e = entry_for(sp, name);
	if (!e)
		return *sp && (*sp)->overflow;
	e->kind = PARAMS_SETTER_UNTRACKED;
	return true;
}

const struct setter *setters_find(const struct setters *s, const char *name)
{
	return find((struct setters *)s, name);
}

void setters_free(struct setters **sp)
{
	struct setters *s = *sp;
	if (!s)
		return;
	for (unsigned i = 0; i < s->n; i++)
		entry_free(&s->e[i]);
	free(s);
	*sp = NULL;
}
