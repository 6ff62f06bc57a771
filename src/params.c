/* SPDX-License-Identifier: MIT */
/*
 * params: tracked session parameters. Names compare case-insensitively, as
 * PostgreSQL's GUC names do. Allocation happens only when a value changes,
 * never per message.
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
	p->items = NULL;
	p->n = 0;
	p->cap = 0;
	p->digest = 0;
}

void params_clear(struct params *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->items[i].name);
		free(p->items[i].value);
	}
	free(p->items);
	p->items = NULL;
	p->n = 0;
	p->cap = 0;
	p->digest = 0;
}

static struct param *find(struct params *p, const char *name)
{
	for (size_t i = 0; i < p->n; i++)
		if (strcasecmp(p->items[i].name, name) == 0)
			return &p->items[i];
	return NULL;
}

const struct param *params_get(const struct params *p, const char *name)
{
	return find((struct params *)p, name);
}

bool params_set(struct params *p, const char *name, const char *value, bool raw)
{
	if (strlen(value) > PARAMS_VALUE_MAX || strlen(name) > 63)
		return false;
	struct param *it = find(p, name);
	if (it) {
		if (it->raw == raw && strcmp(it->value, value) == 0)
			return true;
		char *v = strdup(value);
		if (!v)
			return false;
		p->digest ^= entry_hash(it->name, it->value, it->raw) ^ entry_hash(it->name, v, raw);
		free(it->value);
		it->value = v;
		it->raw = raw;
		return true;
	}
	if (p->n >= PARAMS_MAX)
		return false;
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 16;
		if (cap > PARAMS_MAX)
			cap = PARAMS_MAX;
		struct param *items = realloc(p->items, cap * sizeof *items);
		if (!items)
			return false;
		p->items = items;
		p->cap = cap;
	}
	char *n = strdup(name), *v = strdup(value);
	if (!n || !v) {
		free(n);
		free(v);
		return false;
	}
	p->items[p->n].name = n;
	p->items[p->n].value = v;
	p->items[p->n].raw = raw;
	p->n++;
	p->digest ^= entry_hash(n, v, raw);
	return true;
}

void params_remove(struct params *p, const char *name)
{
	struct param *it = find(p, name);
	if (!it)
		return;
	p->digest ^= entry_hash(it->name, it->value, it->raw);
	free(it->name);
	free(it->value);
	*it = p->items[--p->n];
}

bool params_copy(struct params *dst, const struct params *src)
{
	params_clear(dst);
	for (size_t i = 0; i < src->n; i++)
		if (!params_set(dst, src->items[i].name, src->items[i].value, src->items[i].raw))
			return false;
	return true;
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
	for (size_t i = 0; i < client->n; i++) {
		const struct param *c = &client->items[i];
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
	for (size_t i = 0; i < server->n; i++) {
		const struct param *s = &server->items[i];
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
	for (size_t i = p->n; i-- > 0;) {
		const char *name = p->items[i].name;
		if (params_reported(name) || (only && strcasecmp(name, only) != 0))
			continue;
		params_remove(p, name);
	}
	if (!defaults)
		return;
	for (size_t i = 0; i < defaults->n; i++) {
		const struct param *d = &defaults->items[i];
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
