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

#include "sqllex.h"

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

/* ---- the values PostgreSQL reports ---- */

/* PostgreSQL's encoding names and the spellings it accepts for them: a
 * name is looked up with case folded and everything but letters and digits
 * dropped (utf-8, UTF_8 and Utf8 are all utf8). The left column is that
 * folded form. */
static const struct {
	const char *key, *name;
} encodings[] = {
	{ "abc", "WIN1258" },           { "alt", "WIN866" },
	{ "big5", "BIG5" },             { "euccn", "EUC_CN" },
	{ "eucjis2004", "EUC_JIS_2004" }, { "eucjp", "EUC_JP" },
	{ "euckr", "EUC_KR" },          { "euctw", "EUC_TW" },
	{ "gb18030", "GB18030" },       { "gbk", "GBK" },
	{ "iso88591", "LATIN1" },       { "iso88592", "LATIN2" },
	{ "iso88593", "LATIN3" },       { "iso88594", "LATIN4" },
	{ "iso88595", "ISO_8859_5" },   { "iso88596", "ISO_8859_6" },
	{ "iso88597", "ISO_8859_7" },   { "iso88598", "ISO_8859_8" },
	{ "iso88599", "LATIN5" },       { "iso885910", "LATIN6" },
	{ "iso885913", "LATIN7" },      { "iso885914", "LATIN8" },
	{ "iso885915", "LATIN9" },      { "iso885916", "LATIN10" },
	{ "johab", "JOHAB" },           { "koi8", "KOI8R" },
	{ "koi8r", "KOI8R" },           { "koi8u", "KOI8U" },
	{ "latin1", "LATIN1" },         { "latin2", "LATIN2" },
	{ "latin3", "LATIN3" },         { "latin4", "LATIN4" },
	{ "latin5", "LATIN5" },         { "latin6", "LATIN6" },
	{ "latin7", "LATIN7" },         { "latin8", "LATIN8" },
	{ "latin9", "LATIN9" },         { "latin10", "LATIN10" },
	{ "mskanji", "SJIS" },          { "muleinternal", "MULE_INTERNAL" },
	{ "shiftjis", "SJIS" },         { "shiftjis2004", "SHIFT_JIS_2004" },
	{ "sjis", "SJIS" },             { "sqlascii", "SQL_ASCII" },
	{ "tcvn", "WIN1258" },          { "tcvn5712", "WIN1258" },
	{ "uhc", "UHC" },               { "unicode", "UTF8" },
	{ "utf8", "UTF8" },             { "vscii", "WIN1258" },
	{ "win", "WIN1251" },           { "win866", "WIN866" },
	{ "win874", "WIN874" },         { "win932", "SJIS" },
	{ "win936", "GBK" },            { "win949", "UHC" },
	{ "win950", "BIG5" },           { "win1250", "WIN1250" },
	{ "win1251", "WIN1251" },       { "win1252", "WIN1252" },
	{ "win1253", "WIN1253" },       { "win1254", "WIN1254" },
	{ "win1255", "WIN1255" },       { "win1256", "WIN1256" },
	{ "win1257", "WIN1257" },       { "win1258", "WIN1258" },
	{ "windows866", "WIN866" },     { "windows874", "WIN874" },
	{ "windows932", "SJIS" },       { "windows936", "GBK" },
	{ "windows949", "UHC" },        { "windows950", "BIG5" },
	{ "windows1250", "WIN1250" },   { "windows1251", "WIN1251" },
	{ "windows1252", "WIN1252" },   { "windows1253", "WIN1253" },
	{ "windows1254", "WIN1254" },   { "windows1255", "WIN1255" },
	{ "windows1256", "WIN1256" },   { "windows1257", "WIN1257" },
	{ "windows1258", "WIN1258" },
};

static const char *encoding_name(const char *value)
{
	char key[24];
	size_t n = 0;
	for (const char *s = value; *s; s++) {
		if (!isalnum((unsigned char)*s))
			continue;
		if (n + 1 >= sizeof key)
			return NULL;
		key[n++] = (char)tolower((unsigned char)*s);
	}
	key[n] = '\0';
	for (size_t i = 0; i < sizeof encodings / sizeof *encodings; i++)
		if (strcmp(key, encodings[i].key) == 0)
			return encodings[i].name;
	return NULL;
}

/* DateStyle is two settings in one: the output style and the field order
 * for input. A value may give either or both (with synonyms); what it
 * leaves out stays as it was, except that German brings DMY with it. */
enum date_style { DS_NONE = -1, DS_ISO, DS_SQL, DS_POSTGRES, DS_GERMAN };
enum date_order { DO_NONE = -1, DO_YMD, DO_DMY, DO_MDY };

static bool datestyle_parse(const char *value, enum date_style *style, enum date_order *order)
{
	enum date_style st = DS_NONE;
	enum date_order ord = DO_NONE;
	bool german_order = false;
	const char *s = value;
	for (;;) {
		while (isspace((unsigned char)*s))
			s++;
		const char *b = s;
		while (*s && *s != ',')
			s++;
		const char *e = s;
		while (e > b && isspace((unsigned char)e[-1]))
			e--;
		size_t n = (size_t)(e - b);
		if (n == 0 || n > 32)
			return false;
		char tok[33];
		for (size_t i = 0; i < n; i++)
			tok[i] = (char)tolower((unsigned char)b[i]);
		tok[n] = '\0';
		enum date_style ts = DS_NONE;
		enum date_order to = DO_NONE;
		if (strcmp(tok, "iso") == 0)
			ts = DS_ISO;
		else if (strcmp(tok, "sql") == 0)
			ts = DS_SQL;
		else if (strncmp(tok, "postgres", 8) == 0)
			ts = DS_POSTGRES;
		else if (strcmp(tok, "german") == 0)
			ts = DS_GERMAN;
		else if (strcmp(tok, "ymd") == 0)
			to = DO_YMD;
		else if (strcmp(tok, "dmy") == 0 || strncmp(tok, "euro", 4) == 0)
			to = DO_DMY;
		else if (strcmp(tok, "mdy") == 0 || strcmp(tok, "us") == 0 || strncmp(tok, "noneuro", 7) == 0)
			to = DO_MDY;
		else
			return false;   /* DEFAULT, a typo: the server decides */
		if (ts != DS_NONE) {
			if (st != DS_NONE && st != ts)
				return false;   /* PostgreSQL refuses conflicting styles */
			st = ts;
			if (ts == DS_GERMAN && ord == DO_NONE) {
				ord = DO_DMY;
				german_order = true;
			}
		} else {
			if (ord != DO_NONE && ord != to && !german_order)
				return false;
			ord = to;
			german_order = false;
		}
		if (!*s)
			break;
		s++;
	}
	*style = st;
	*order = ord;
	return true;
}

static bool datestyle_canonical(const char *value, const char *current, char *out, size_t outsz)
{
	static const char *const styles[] = { "ISO", "SQL", "Postgres", "German" };
	static const char *const orders[] = { "YMD", "DMY", "MDY" };
	/* PostgreSQL's built-in default, when the session's is not known. */
	enum date_style st = DS_ISO, cst;
	enum date_order ord = DO_MDY, cord;
	if (current && datestyle_parse(current, &cst, &cord)) {
		if (cst != DS_NONE)
			st = cst;
		if (cord != DO_NONE)
			ord = cord;
	}
	enum date_style nst;
	enum date_order nord;
	if (!datestyle_parse(value, &nst, &nord))
		return false;
	if (nst != DS_NONE)
		st = nst;
	if (nord != DO_NONE)
		ord = nord;
	return (size_t)snprintf(out, outsz, "%s, %s", styles[st], orders[ord]) < outsz;
}

/* PostgreSQL's booleans: on, off, true, false, yes, no, 1, 0, any case,
 * and any unambiguous prefix of true, false, yes, no (of, off for off). */
static bool bool_canonical(const char *value, char *out, size_t outsz)
{
	size_t n = strlen(value);
	int v = -1;
	if (n == 0)
		return false;
	if (strcmp(value, "1") == 0)
		v = 1;
	else if (strcmp(value, "0") == 0)
		v = 0;
	else if (strncasecmp(value, "true", n) == 0 || strncasecmp(value, "yes", n) == 0)
		v = 1;
	else if (strncasecmp(value, "false", n) == 0 || strncasecmp(value, "no", n) == 0)
		v = 0;
	else if (strcasecmp(value, "on") == 0)
		v = 1;
	else if (n >= 2 && strncasecmp(value, "off", n) == 0)
		v = 0;
	if (v < 0 || outsz < 4)
		return false;
	strcpy(out, v ? "on" : "off");
	return true;
}

bool params_canonical(const char *name, const char *value, const char *current, char *out, size_t outsz)
{
	if (strcasecmp(name, "client_encoding") == 0) {
		/* PostgreSQL reports UNICODE, spelled exactly so, as given: old
		 * JDBC drivers ask for it and expect it back. */
		const char *enc = strcmp(value, "UNICODE") == 0 ? "UNICODE" : encoding_name(value);
		return enc && (size_t)snprintf(out, outsz, "%s", enc) < outsz;
	}
	if (strcasecmp(name, "DateStyle") == 0)
		return datestyle_canonical(value, current, out, outsz);
	if (strcasecmp(name, "IntervalStyle") == 0) {
		static const char *const styles[] = { "postgres", "postgres_verbose", "sql_standard", "iso_8601" };
		for (size_t i = 0; i < sizeof styles / sizeof *styles; i++)
			if (strcasecmp(value, styles[i]) == 0)
				return (size_t)snprintf(out, outsz, "%s", styles[i]) < outsz;
		return false;
	}
	if (strcasecmp(name, "standard_conforming_strings") == 0 ||
	    strcasecmp(name, "default_transaction_read_only") == 0)
		return bool_canonical(value, out, outsz);
	return false;
}

void params_canonicalize(struct params *p, const struct params *base)
{
	char buf[PARAMS_VALUE_MAX + 1];
	for (size_t i = 0; i < params_count(p); i++) {
		const struct param *e = params_at(p, i);
		if (e->raw || !params_reported(e->name))
			continue;
		const struct param *b = base ? params_get(base, e->name) : NULL;
		if (params_canonical(e->name, e->value, b ? b->value : NULL, buf, sizeof buf) &&
		    strcmp(buf, e->value) != 0)
			(void)params_set(p, e->name, buf, false);   /* replaces entry i in place */
	}
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

/* The keyword w at *sp (and the blanks after it): sqllex on pointers. */
static bool word_is(const char **sp, const char *end, const char *w)
{
	size_t i = 0;
	if (!sqllex_keyword(*sp, (size_t)(end - *sp), &i, w))
		return false;
	*sp += i;
	return true;
}

static const char *skip_space(const char *s, const char *end)
{
	return s + sqllex_skip_blank(s, (size_t)(end - s), 0);
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

/* The SQL text of a SET's value as the setting's input: a comma-separated
 * list of 'string' literals (without backslashes, whose meaning depends on
 * standard_conforming_strings), bare words (folded to lower case, as the
 * grammar folds identifiers) and unsigned numbers, joined with ", " as
 * PostgreSQL joins list values. *one_string: it was a single literal.
 * false: some other form (E'', INTERVAL, an expression): kept as SQL. */
static bool sql_plain_value(const char *v, char *out, size_t outsz, bool *one_string)
{
	size_t n = 0, items = 0;
	bool strings_only = true;
	const char *s = v;
	for (;;) {
		while (isspace((unsigned char)*s))
			s++;
		if (items++ && !append(out, outsz, &n, ", ", 2))
			return false;
		if (*s == '\'') {
			for (s++;; s++) {
				if (!*s || *s == '\\')
					return false;
				if (*s == '\'') {
					if (s[1] != '\'')
						break;
					s++;
				}
				if (!append(out, outsz, &n, s, 1))
					return false;
			}
			s++;
		} else if (isalnum((unsigned char)*s) || *s == '_') {
			strings_only = false;
			bool word = !isdigit((unsigned char)*s);
			for (; isalnum((unsigned char)*s) || *s == '_' || (!word && *s == '.'); s++) {
				char ch = (char)tolower((unsigned char)*s);
				if (!append(out, outsz, &n, &ch, 1))
					return false;
			}
		} else {
			return false;
		}
		while (isspace((unsigned char)*s))
			s++;
		if (!*s)
			break;
		if (*s++ != ',')
			return false;
	}
	if (n == 0)
		out[0] = '\0';
	*one_string = strings_only && items == 1;
	return true;
}

enum params_stmt params_track_statement(struct params *p, const char *sql, size_t len,
					const struct params *defaults)
{
	/* PostgreSQL reads the text up to its first NUL (a Query's own end) */
	const char *nul = memchr(sql, '\0', len);
	const char *end = nul ? nul : sql + len;
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
	/* The value runs to the first ';' outside quotes and comments, or the
	 * end, without the blanks and comments before that. */
	const char *v = s;
	size_t content_end;
	(void)sqllex_statement_end(v, (size_t)(end - v), 0, &content_end);
	const char *e = v + content_end;
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
	/* Reported settings: the server's ParameterStatus brings the value as
	 * PostgreSQL spells it when the value changes, but sends nothing when
	 * it does not (SET client_encoding TO 'utf8' on a UTF8 session). So
	 * they are kept as PostgreSQL would report them, where pgcat knows
	 * how: the SQL text would differ from the server's UTF8 and cost a
	 * useless SET at every hand-over. A plain string of another reported
	 * setting (TimeZone, application_name) is kept as given; anything else
	 * as SQL text, until the ParameterStatus. */
	if (params_reported(name)) {
		char plain[PARAMS_VALUE_MAX + 1], canon[PARAMS_VALUE_MAX + 1];
		bool one_string;
		const struct param *cur = params_get(p, name);
		if (sql_plain_value(buf, plain, sizeof plain, &one_string)) {
			if (params_canonical(name, plain, cur ? cur->value : NULL, canon, sizeof canon)) {
				(void)params_set(p, name, canon, false);
				return PARAMS_STMT_SET;
			}
			if (one_string) {
				(void)params_set(p, name, plain, false);
				return PARAMS_STMT_SET;
			}
		}
	}
	(void)params_set(p, name, buf, true);
	return PARAMS_STMT_SET;
}
