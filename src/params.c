/* SPDX-License-Identifier: MIT */
/*
 * params: tracked session parameters. Names compare case-insensitively, as
 * PostgreSQL's GUC names do. Sets are copy-on-write and entries shared, so
 * copying a session (to a server, to a client's startup snapshot) costs no
 * allocation; allocation happens only when a value changes, never per
 * message.
 */
#include "params.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* FNV-1a over the lowercased name, the value and the form, then mixed so
 * that XOR-ing entries together gives an order-independent digest. */
static uint64_t entry_hash(const char *name, const char *value, bool raw)
{
	uint64_t h = 1469598103934665603ULL;
	for (const char *s = name; *s; s++) {
		h ^= (uint8_t)tolower((unsigned char)*s);
		h *= 1099511628211ULL;
	}
	h ^= 0xff;
	h *= 1099511628211ULL;
	for (const char *s = value; *s; s++) {
		h ^= (uint8_t)*s;
		h *= 1099511628211ULL;
	}
	h ^= raw ? 0x5bd1e995ULL : 0x27d4eb2fULL;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

void params_init(struct params *p)
{
	p->t = NULL;
	p->digest = 0;
}

static void param_unref(struct param *e)
{
	if (--e->refs == 0)
		free(e);
}

static void table_unref(struct param_table *t)
{
	if (!t || --t->refs > 0)
		return;
	for (unsigned i = 0; i < t->n; i++)
		param_unref(t->items[i]);
	free(t);
}

void params_clear(struct params *p)
{
	table_unref(p->t);
	p->t = NULL;
	p->digest = 0;
}

static int find(const struct params *p, const char *name)
{
	if (!p->t)
		return -1;
	/* The first letter, case folded, rules out most names without a call
	 * (a login compares every default with every setting of its own). */
	unsigned char first = (unsigned char)name[0] | 0x20;
	for (unsigned i = 0; i < p->t->n; i++)
		if (((unsigned char)p->t->items[i]->name[0] | 0x20) == first &&
		    strcasecmp(p->t->items[i]->name, name) == 0)
			return (int)i;
	return -1;
}

const struct param *params_get(const struct params *p, const char *name)
{
	int i = find(p, name);
	return i < 0 ? NULL : p->t->items[i];
}

/* Make p's table private to p, with room for one more entry if grow. */
static bool make_writable(struct params *p, bool grow)
{
	struct param_table *t = p->t;
	if (t && t->refs == 1 && (!grow || t->n < t->cap))
		return true;
	unsigned n = t ? t->n : 0;
	unsigned cap = t ? t->cap : 0;
	if (grow && n >= cap)
		cap = cap ? cap * 2 : 16;
	if (cap > PARAMS_MAX)
		cap = PARAMS_MAX;
	if (grow && n >= cap)
		return false;
	if (t && t->refs == 1) {
		struct param_table *g = realloc(t, sizeof *t + cap * sizeof t->items[0]);
		if (!g)
			return false;
		g->cap = cap;
		p->t = g;
		return true;
	}
	struct param_table *c = malloc(sizeof *c + cap * sizeof c->items[0]);
	if (!c)
		return false;
	c->refs = 1;
	c->n = n;
	c->cap = cap;
	for (unsigned i = 0; i < n; i++) {
		c->items[i] = t->items[i];
		c->items[i]->refs++;
	}
	table_unref(t);
	p->t = c;
	return true;
}

static struct param *param_new(const char *name, const char *value, bool raw)
{
	size_t nl = strlen(name), vl = strlen(value);
	struct param *e = malloc(sizeof *e + nl + 1 + vl + 1);
	if (!e)
		return NULL;
	e->refs = 1;
	e->raw = raw;
	memcpy(e->name, name, nl + 1);
	memcpy(e->name + nl + 1, value, vl + 1);
	e->value = e->name + nl + 1;
	e->hash = entry_hash(name, value, raw);
	return e;
}

bool params_set(struct params *p, const char *name, const char *value, bool raw)
{
	if (strlen(value) > PARAMS_VALUE_MAX || strlen(name) > 63)
		return false;
	int i = find(p, name);
	if (i >= 0) {
		struct param *old = p->t->items[i];
		if (old->raw == raw && strcmp(old->value, value) == 0)
			return true;
		/* Keep the name as first spelled (ParameterStatus casing). */
		struct param *e = param_new(old->name, value, raw);
		if (!e || !make_writable(p, false)) {
			free(e);
			return false;
		}
		old = p->t->items[i];
		p->digest ^= old->hash ^ e->hash;
		p->t->items[i] = e;
		param_unref(old);
		return true;
	}
	if (params_count(p) >= PARAMS_MAX)
		return false;
	struct param *e = param_new(name, value, raw);
	if (!e || !make_writable(p, true)) {
		free(e);
		return false;
	}
	p->t->items[p->t->n++] = e;
	p->digest ^= e->hash;
	return true;
}

bool params_add_missing(struct params *p, const struct params *from)
{
	for (size_t i = 0; i < params_count(from); i++) {
		struct param *e = from->t->items[i];
		if (find(p, e->name) >= 0)
			continue;
		if (params_count(p) >= PARAMS_MAX || !make_writable(p, true))
			return false;
		/* Entries are immutable once made: share it rather than copy. */
		e->refs++;
		p->t->items[p->t->n++] = e;
		p->digest ^= e->hash;
	}
	return true;
}

void params_remove(struct params *p, const char *name)
{
	int i = find(p, name);
	if (i < 0 || !make_writable(p, false))
		return;
	struct param *e = p->t->items[i];
	p->digest ^= e->hash;
	p->t->items[i] = p->t->items[--p->t->n];
	param_unref(e);
}

void params_copy(struct params *dst, const struct params *src)
{
	if (dst->t == src->t) {
		dst->digest = src->digest;
		return;
	}
	if (src->t)
		src->t->refs++;
	table_unref(dst->t);
	dst->t = src->t;
	dst->digest = src->digest;
}

/* Reported by PostgreSQL 15 but fixed for the life of a session (or only
 * changeable by a superuser in ways a pooler must not replay). */
static const char *const unsettable[] = {
	"server_version", "server_encoding", "integer_datetimes", "is_superuser",
	"session_authorization", "in_hot_standby", "scram_iterations",
	/* startup-only or pgcat's own */
	"user", "database", "options", "replication",
};

static const char *const reported[] = {
	"application_name", "client_encoding", "DateStyle", "default_transaction_read_only",
	"in_hot_standby", "integer_datetimes", "IntervalStyle", "is_superuser",
	"server_encoding", "server_version", "session_authorization",
	"standard_conforming_strings", "TimeZone",
};

bool params_settable(const char *name)
{
	for (size_t i = 0; i < sizeof unsettable / sizeof *unsettable; i++)
		if (strcasecmp(name, unsettable[i]) == 0)
			return false;
	return true;
}

bool params_reported(const char *name)
{
	for (size_t i = 0; i < sizeof reported / sizeof *reported; i++)
		if (strcasecmp(name, reported[i]) == 0)
			return true;
	return false;
}

static bool valid_name(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_' || *s == '.'))
			return false;
	return true;
}

/* Append to out at *off; false when it does not fit. */
static bool append(char *out, size_t outsz, size_t *off, const char *s, size_t n)
{
	if (outsz - *off <= n)
		return false;
	memcpy(out + *off, s, n);
	*off += n;
	out[*off] = '\0';
	return true;
}

static bool append_literal(char *out, size_t outsz, size_t *off, const char *v)
{
	if (!append(out, outsz, off, "'", 1))
		return false;
	for (; *v; v++) {
		if (*v == '\'' && !append(out, outsz, off, "'", 1))
			return false;
		if (!append(out, outsz, off, v, 1))
			return false;
	}
	return append(out, outsz, off, "'", 1);
}

int params_build_sync(const struct params *client, const struct params *server, char *out, size_t outsz)
{
	size_t off = 0;
	int count = 0;
	if (outsz == 0)
		return -1;
	out[0] = '\0';
	for (size_t i = 0; i < params_count(client); i++) {
		const struct param *c = params_at(client, i);
		if (!params_settable(c->name) || !valid_name(c->name))
			continue;
		const struct param *s = params_get(server, c->name);
		if (s && s->raw == c->raw && strcmp(s->value, c->value) == 0)
			continue;
		if (!append(out, outsz, &off, "SET ", 4) ||
		    !append(out, outsz, &off, c->name, strlen(c->name)) ||
		    !append(out, outsz, &off, " TO ", 4))
			return -1;
		if (c->raw) {
			if (!append(out, outsz, &off, c->value, strlen(c->value)))
				return -1;
		} else if (!append_literal(out, outsz, &off, c->value)) {
			return -1;
		}
		if (!append(out, outsz, &off, ";", 1))
			return -1;
		count++;
	}
	/* Settings the server carries that the client never made: back to the
	 * server's default. Reported ones are always in the client's table. */
	for (size_t i = 0; i < params_count(server); i++) {
		const struct param *s = params_at(server, i);
		if (!params_settable(s->name) || !valid_name(s->name) || params_get(client, s->name))
			continue;
		if (!append(out, outsz, &off, "RESET ", 6) ||
		    !append(out, outsz, &off, s->name, strlen(s->name)) ||
		    !append(out, outsz, &off, ";", 1))
			return -1;
		count++;
	}
	return count;
}

bool params_apply_options(struct params *p, const char *options)
{
	const char *s = options;
	char word[PARAMS_VALUE_MAX + 64];
	bool pending_c = false;
	for (;;) {
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s)
			break;
		size_t n = 0;
		while (*s && *s != ' ' && *s != '\t') {
			if (*s == '\\' && s[1])
				s++;
			if (n + 1 >= sizeof word)
				return false;
			word[n++] = *s++;
		}
		word[n] = '\0';
		const char *setting = NULL;
		if (pending_c) {
			setting = word;
			pending_c = false;
		} else if (strcmp(word, "-c") == 0) {
			pending_c = true;
			continue;
		} else if (strncmp(word, "-c", 2) == 0) {
			setting = word + 2;
		} else if (strncmp(word, "--", 2) == 0) {
			setting = word + 2;
		} else {
			return false;
		}
		char *eq = strchr(setting, '=');
		if (!eq || eq == setting)
			return false;
		*eq = '\0';
		/* Option names may use '-' for '_' (postgres --work-mem=...). */
		for (char *c = (char *)setting; *c; c++)
			if (*c == '-')
				*c = '_';
		if (!valid_name(setting))
			return false;
		bool raw = strcasecmp(setting, "search_path") == 0;
		if (!params_set(p, setting, eq + 1, raw))
			return false;
	}
	return !pending_c;
}

/* Skip whitespace and SQL comments. */
static const char *skip_space(const char *s, const char *end)
{
	for (;;) {
		while (s < end && isspace((unsigned char)*s))
			s++;
		if (end - s >= 2 && s[0] == '-' && s[1] == '-') {
			while (s < end && *s != '\n')
				s++;
			continue;
		}
		if (end - s >= 2 && s[0] == '/' && s[1] == '*') {
			const char *c = s + 2;
			while (end - c >= 2 && !(c[0] == '*' && c[1] == '/'))
				c++;
			if (end - c < 2)
				return end;
			s = c + 2;
			continue;
		}
		return s;
	}
}

static bool word_is(const char **sp, const char *end, const char *w)
{
	const char *s = *sp;
	size_t n = strlen(w);
	if ((size_t)(end - s) < n || strncasecmp(s, w, n) != 0)
		return false;
	if (s + n < end && (isalnum((unsigned char)s[n]) || s[n] == '_'))
		return false;
	*sp = skip_space(s + n, end);
	return true;
}

/* Settings a RESET or DISCARD ALL takes back to: the reported ones come
 * back through ParameterStatus; the others to what the session started
 * with (defaults), or to nothing. */
static void reset_unreported(struct params *p, const struct params *defaults, const char *only)
{
	for (size_t i = params_count(p); i-- > 0;) {
		const char *name = params_at(p, i)->name;
		if (params_reported(name) || (only && strcasecmp(name, only) != 0))
			continue;
		params_remove(p, name);
	}
	if (!defaults)
		return;
	for (size_t i = 0; i < params_count(defaults); i++) {
		const struct param *d = params_at(defaults, i);
		if (params_reported(d->name) || (only && strcasecmp(d->name, only) != 0))
			continue;
		(void)params_set(p, d->name, d->value, d->raw);
	}
}

/* An identifier as a GUC name: letters, digits, '_' and '.' (custom
 * settings such as myapp.tenant). */
static size_t guc_name(const char *s, const char *end, char *out, size_t outsz)
{
	size_t n = 0;
	if (s >= end || !(isalpha((unsigned char)*s) || *s == '_'))
		return 0;
	while (s + n < end && (isalnum((unsigned char)s[n]) || s[n] == '_' || s[n] == '.')) {
		if (n + 1 >= outsz)
			return 0;
		out[n] = s[n];
		n++;
	}
	out[n] = '\0';
	return n;
}

enum params_stmt params_track_statement(struct params *p, const char *sql, size_t len,
					const struct params *defaults)
{
	const char *end = sql + len;
	const char *s = skip_space(sql, end);
	char name[64];
	if (word_is(&s, end, "discard")) {
		if (word_is(&s, end, "all")) {
			reset_unreported(p, defaults, NULL);
			return PARAMS_STMT_RESET_ALL;
		}
		return PARAMS_STMT_NONE;
	}
	if (word_is(&s, end, "reset")) {
		if (word_is(&s, end, "all")) {
			reset_unreported(p, defaults, NULL);
			return PARAMS_STMT_RESET_ALL;
		}
		size_t n = guc_name(s, end, name, sizeof name);
		if (n == 0 || strcasecmp(name, "role") == 0 || strcasecmp(name, "session") == 0)
			return PARAMS_STMT_NONE;
		reset_unreported(p, defaults, name);
		return PARAMS_STMT_RESET;
	}
	if (!word_is(&s, end, "set"))
		return PARAMS_STMT_NONE;
	if (word_is(&s, end, "local"))
		return PARAMS_STMT_NONE;   /* lasts until the end of the transaction */
	(void)word_is(&s, end, "session");
	if (word_is(&s, end, "time")) {
		if (!word_is(&s, end, "zone"))
			return PARAMS_STMT_NONE;
		snprintf(name, sizeof name, "TimeZone");
	} else {
		size_t n = guc_name(s, end, name, sizeof name);
		if (n == 0)
			return PARAMS_STMT_NONE;
		/* Not settings: transaction modes, roles, constraints. */
		static const char *const not_gucs[] = { "transaction", "characteristics", "authorization",
							"role", "constraints", "session" };
		for (size_t i = 0; i < sizeof not_gucs / sizeof *not_gucs; i++)
			if (strcasecmp(name, not_gucs[i]) == 0)
				return PARAMS_STMT_NONE;
		s = skip_space(s + n, end);
		if (!word_is(&s, end, "to")) {
			if (s < end && *s == '=')
				s = skip_space(s + 1, end);
			else
				return PARAMS_STMT_NONE;
		}
	}
	/* The value runs to the first ';' outside quotes, or the end. */
	const char *v = s, *e = s;
	char quote = 0;
	for (; e < end && *e; e++) {
		if (quote) {
			if (*e == quote)
				quote = 0;
		} else if (*e == '\'' || *e == '"') {
			quote = *e;
		} else if (*e == ';') {
			break;
		}
	}
	while (e > v && isspace((unsigned char)e[-1]))
		e--;
	if (e == v)
		return PARAMS_STMT_NONE;
	char buf[PARAMS_VALUE_MAX + 1];
	size_t n = (size_t)(e - v);
	if (n > PARAMS_VALUE_MAX)
		return PARAMS_STMT_NONE;
	memcpy(buf, v, n);
	buf[n] = '\0';
	if (strcasecmp(buf, "default") == 0) {
		reset_unreported(p, defaults, name);
		return PARAMS_STMT_RESET;
	}
	/* Reported settings: the server's ParameterStatus brings the canonical
	 * value right after; keeping the SQL text until then is harmless. */
	(void)params_set(p, name, buf, true);
	return PARAMS_STMT_SET;
}
