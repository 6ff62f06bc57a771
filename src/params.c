/* SPDX-License-Identifier: MIT */
/*
 * params: tracked session parameters. Names compare case-insensitively, as
 * PostgreSQL's GUC names do. Sets are copy-on-write and entries shared, so
 * copying a session (to a server, to a client's startup snapshot) costs no
 * allocation; allocation happens only when a value changes, never per
 * message.
 */
#include "params.h"

#include "bytes_in.h"
#include "bytescan.h"
#include "pktbuf.h"

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
	c->bytes = t ? t->bytes : 0;
	for (unsigned i = 0; i < n; i++) {
		c->items[i] = t->items[i];
		c->items[i]->refs++;
	}
	table_unref(t);
	p->t = c;
	return true;
}

static struct param *param_new(const char *name, const char *value, size_t vl, bool raw)
{
	size_t nl = strlen(name);
	struct param *e = malloc(sizeof *e + nl + 1 + vl + 1);
	if (!e)
		return NULL;
	e->refs = 1;
	e->raw = raw;
	e->size = (uint32_t)(nl + vl);   /* (both bounded by PARAMS_BYTES_MAX) */
	memcpy(e->name, name, nl + 1);
	memcpy(e->name + nl + 1, value, vl);
	e->name[nl + 1 + vl] = '\0';
	e->value = e->name + nl + 1;
	e->hash = entry_hash(e->name, e->value, raw);
	return e;
}

static size_t table_bytes(const struct params *p)
{
	return p->t ? p->t->bytes : 0;
}

bool params_set(struct params *p, const char *name, const char *value, bool raw)
{
	return params_set_n(p, name, value, strlen(value), raw);
}

bool params_set_n(struct params *p, const char *name, const char *value, size_t vl, bool raw)
{
	size_t nl = strlen(name);
	if (nl > PARAMS_NAME_MAX || vl > PARAMS_BYTES_MAX)
		return false;
	int i = find(p, name);
	if (i >= 0) {
		struct param *old = p->t->items[i];
		size_t ovl = old->size - strlen(old->name);
		if (old->raw == raw && ovl == vl && memcmp(old->value, value, vl) == 0)
			return true;
		if (table_bytes(p) - ovl + vl > PARAMS_BYTES_MAX)
			return false;
		/* Keep the name as first spelled (ParameterStatus casing). */
		struct param *e = param_new(old->name, value, vl, raw);
		if (!e || !make_writable(p, false)) {
			free(e);
			return false;
		}
		old = p->t->items[i];
		p->digest ^= old->hash ^ e->hash;
		p->t->items[i] = e;
		p->t->bytes = p->t->bytes - old->size + e->size;
		param_unref(old);
		return true;
	}
	if (params_count(p) >= PARAMS_MAX || table_bytes(p) + nl + vl > PARAMS_BYTES_MAX)
		return false;
	struct param *e = param_new(name, value, vl, raw);
	if (!e || !make_writable(p, true)) {
		free(e);
		return false;
	}
	p->t->items[p->t->n++] = e;
	p->t->bytes += e->size;
	p->digest ^= e->hash;
	return true;
}

bool params_add_missing(struct params *p, const struct params *from)
{
	for (size_t i = 0; i < params_count(from); i++) {
		struct param *e = from->t->items[i];
		if (find(p, e->name) >= 0)
			continue;
		if (params_count(p) >= PARAMS_MAX || table_bytes(p) + e->size > PARAMS_BYTES_MAX ||
		    !make_writable(p, true))
			return false;
		/* Entries are immutable once made: share it rather than copy. */
		e->refs++;
		p->t->items[p->t->n++] = e;
		p->t->bytes += e->size;
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
	p->t->bytes -= e->size;
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
	char buf[256];   /* the forms PostgreSQL reports are short: a longer one is not one */
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

/* ---- the statements that bring a server in line ---- */

/* A name SET takes as it is: one identifier of letters, digits and '_', as
 * every built-in setting's is. A custom one (with a dot) may have parts
 * SQL reads as keywords, or '$' and bytes above 0x7f: those are quoted, or
 * go by name through set_config. */
static bool plain_name(const char *s)
{
	if (!(isalpha((unsigned char)*s) || *s == '_'))
		return false;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_'))
			return false;
	return true;
}

/* Settings PostgreSQL reads as a list whose items it quotes: SET name TO
 * 'a,b' makes one item "a,b" of the string, where a startup option a,b
 * gives two. Their string values go through set_config, which takes a
 * string as a startup option does. */
static bool list_quoted(const char *name)
{
	static const char *const names[] = { "search_path", "temp_tablespaces", "local_preload_libraries",
					     "session_preload_libraries" };
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (strcasecmp(name, names[i]) == 0)
			return true;
	return false;
}

/* A growing string; failed (sticky) when out of memory. */
struct sbuf {
	char *s;
	size_t len, cap;
	bool failed;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *g = realloc(b->s, cap);
		if (!g) {
			b->failed = true;
			return;
		}
		b->s = g;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

/* A string literal that reads the same whatever the server's
 * standard_conforming_strings (a previous client may have turned it off):
 * quotes doubled, and where there is a backslash an E'' literal with
 * backslashes doubled too. */
static void sb_literal(struct sbuf *b, const char *v)
{
	bool backslash = strchr(v, '\\') != NULL;
	sb_str(b, backslash ? "E'" : "'");
	const char *run = v;
	for (const char *q = v;; q++) {
		if (*q && *q != '\'' && !(backslash && *q == '\\'))
			continue;
		sb_add(b, run, (size_t)(q - run));
		if (!*q)
			break;
		sb_add(b, q, 1);   /* doubled: the byte itself starts the next run */
		run = q;
	}
	sb_str(b, "'");
}

/* A name as identifiers: as it is when plain, else each dot-separated part
 * quoted (PostgreSQL looks names up without regard to case). */
static void sb_name(struct sbuf *b, const char *name)
{
	if (plain_name(name)) {
		sb_str(b, name);
		return;
	}
	const char *part = name;
	for (;;) {
		const char *dot = strchr(part, '.');
		size_t n = dot ? (size_t)(dot - part) : strlen(part);
		sb_str(b, "\"");
		for (size_t i = 0; i < n; i++) {
			if (part[i] == '"')
				sb_str(b, "\"");
			sb_add(b, part + i, 1);
		}
		sb_str(b, "\"");
		if (!dot)
			break;
		sb_str(b, ".");
		part = dot + 1;
	}
}

int params_build_sync(const struct params *client, const struct params *server, char **out)
{
	struct sbuf b = { 0 };
	int count = 0;
	*out = NULL;
	for (size_t i = 0; i < params_count(client); i++) {
		const struct param *c = params_at(client, i);
		if (!params_settable(c->name))
			continue;
		const struct param *s = params_get(server, c->name);
		if (s && s->raw == c->raw && strcmp(s->value, c->value) == 0)
			continue;
		if (c->raw) {
			/* the client's own SQL, from its SET (guc_name's name) */
			sb_str(&b, "SET ");
			sb_str(&b, c->name);
			sb_str(&b, " TO ");
			sb_str(&b, c->value);
		} else if (plain_name(c->name) && !list_quoted(c->name)) {
			sb_str(&b, "SET ");
			sb_str(&b, c->name);
			sb_str(&b, " TO ");
			sb_literal(&b, c->value);
		} else {
			/* (a row of no columns: nothing the sync's readers take for
			 * a health check's answer) */
			sb_str(&b, "SELECT FROM set_config(");
			sb_literal(&b, c->name);
			sb_str(&b, ", ");
			sb_literal(&b, c->value);
			sb_str(&b, ", false)");
		}
		sb_str(&b, ";");
		count++;
	}
	/* Settings the server carries that the client never made: back to the
	 * server's default. Reported ones are always in the client's table. */
	for (size_t i = 0; i < params_count(server); i++) {
		const struct param *s = params_at(server, i);
		if (!params_settable(s->name) || params_get(client, s->name))
			continue;
		sb_str(&b, "RESET ");
		sb_name(&b, s->name);
		sb_str(&b, ";");
		count++;
	}
	if (b.failed) {
		free(b.s);
		return -1;
	}
	*out = b.s;
	return count;
}

/* ---- statements a client sends ---- */

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
 * settings such as myapp.tenant), unquoted. 0: none, or longer than
 * PARAMS_NAME_MAX. */
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
static bool sql_plain_value(const char *v, const char *end, char *out, size_t outsz, bool *one_string)
{
	size_t n = 0, items = 0;
	bool strings_only = true;
	const char *s = v;
	out[0] = '\0';
	for (;;) {
		while (s < end && isspace((unsigned char)*s))
			s++;
		if (items++ && !append(out, outsz, &n, ", ", 2))
			return false;
		if (s < end && *s == '\'') {
			for (s++;; s++) {
				if (s >= end || *s == '\\')
					return false;
				if (*s == '\'') {
					if (s + 1 >= end || s[1] != '\'')
						break;
					s++;
				}
				if (!append(out, outsz, &n, s, 1))
					return false;
			}
			s++;
		} else if (s < end && (isalnum((unsigned char)*s) || *s == '_')) {
			strings_only = false;
			bool word = !isdigit((unsigned char)*s);
			for (; s < end && (isalnum((unsigned char)*s) || *s == '_' || (!word && *s == '.')); s++) {
				char ch = (char)tolower((unsigned char)*s);
				if (!append(out, outsz, &n, &ch, 1))
					return false;
			}
		} else {
			return false;
		}
		while (s < end && isspace((unsigned char)*s))
			s++;
		if (s >= end)
			break;
		if (*s++ != ',')
			return false;
	}
	*one_string = strings_only && items == 1;
	return true;
}

/* Not settings, after SET [SESSION]: what lasts only for the transaction
 * (NONE), and session state pgcat does not follow (UNTRACKED: the role,
 * the session user, the transactions' defaults). */
static enum params_stmt not_a_setting(const char *name, bool *is_one)
{
	static const char *const scoped[] = { "transaction", "constraints", "transaction_isolation",
					      "transaction_read_only", "transaction_deferrable" };
	static const char *const untracked[] = { "role", "authorization", "characteristics", "session", "names", "xml",
						 "catalog", "session_authorization" };
	*is_one = true;
	for (size_t i = 0; i < sizeof scoped / sizeof *scoped; i++)
		if (strcasecmp(name, scoped[i]) == 0)
			return PARAMS_STMT_NONE;
	for (size_t i = 0; i < sizeof untracked / sizeof *untracked; i++)
		if (strcasecmp(name, untracked[i]) == 0)
			return PARAMS_STMT_UNTRACKED;
	*is_one = false;
	return PARAMS_STMT_NONE;
}

static enum params_stmt track_reset(struct params *p, const char *s, const char *end, const struct params *defaults)
{
	char name[PARAMS_NAME_MAX + 1];
	if (word_is(&s, end, "all")) {
		reset_unreported(p, defaults, NULL);
		return PARAMS_STMT_RESET_ALL;
	}
	if (word_is(&s, end, "time")) {
		if (!word_is(&s, end, "zone"))
			return PARAMS_STMT_UNTRACKED;
		reset_unreported(p, defaults, "TimeZone");
		return PARAMS_STMT_RESET;
	}
	size_t n = guc_name(s, end, name, sizeof name);
	if (n == 0)
		return PARAMS_STMT_UNTRACKED;   /* a quoted or overlong name */
	if (strcasecmp(name, "transaction") == 0)
		return PARAMS_STMT_NONE;
	if (strcasecmp(name, "role") == 0 || strcasecmp(name, "session") == 0)
		return PARAMS_STMT_UNTRACKED;
	reset_unreported(p, defaults, name);
	return PARAMS_STMT_RESET;
}

/* The other ways SQL changes a setting: set_config, and an UPDATE of the
 * pg_settings view. Named in any case; a mention in a string or a comment
 * counts too, which costs a reset at most. Found by their '_', which most
 * texts have few of. */
/* s[0..n) is the lower-case word w in any case (w: letters only). */
static inline bool letters_are(const char *s, const char *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((s[i] | 0x20) != w[i])
			return false;
	return true;
}

/* The '_' at u of s..end is set_config's, or pg_settings' (view_too). */
static inline bool setter_at(const char *s, const char *end, const char *u, bool view_too)
{
	/* (the byte before the '_' first: most underscores go no further) */
	char before = (char)(u > s ? u[-1] | 0x20 : 0);
	if (before == 't' && u - s >= 3 && end - u >= 7 && letters_are(u - 3, "set", 3) &&
	    letters_are(u + 1, "config", 6))
		return true;
	return view_too && before == 'g' && u - s >= 2 && end - u >= 9 && letters_are(u - 2, "pg", 2) &&
	       letters_are(u + 1, "settings", 8);
}

static bool mentions_setter(const char *s, size_t len, bool view_too)
{
	const char *end = s + len;
	for (const char *u = s; u < end && (u = memchr(u, '_', (size_t)(end - u))) != NULL; u++)
		if (setter_at(s, end, u, view_too))
			return true;
	return false;
}

/* A 'string' literal at *sp into a malloc'd copy (*out), without
 * backslashes (their meaning depends on standard_conforming_strings). */
static bool string_literal(const char **sp, const char *end, char **out)
{
	const char *s = *sp;
	size_t n = (size_t)(end - s), i = 0;
	if (n == 0 || *s != '\'' || memchr(s, '\\', n))
		return false;
	*out = malloc(n);
	if (!*out)
		return false;
	if (!sqllex_unquote(s, n, &i, *out, n)) {
		free(*out);
		return false;
	}
	*sp = skip_space(s + i, end);
	return true;
}

/* SELECT set_config('name', 'value', false), the whole statement, in any
 * case: the setting as a startup option gives it. is_local true lasts for
 * the transaction only (NONE). Any other use of set_config: UNTRACKED. */
static enum params_stmt track_set_config(struct params *p, const char *s, const char *end)
{
	size_t content_end;
	(void)sqllex_statement_end(s, (size_t)(end - s), 0, &content_end);
	end = s + content_end;
	char *name = NULL, *value = NULL;
	enum params_stmt st = PARAMS_STMT_UNTRACKED;
	/* (sqllex_keyword takes letters only) */
	if (end - s < 10 || strncasecmp(s, "set_config", 10) != 0)
		return st;
	s = skip_space(s + 10, end);
	if (s >= end || *s != '(')
		return st;
	s = skip_space(s + 1, end);
	if (!string_literal(&s, end, &name))
		return st;
	if (s < end && *s == ',' && (s = skip_space(s + 1, end)) && string_literal(&s, end, &value) && s < end &&
	    *s == ',') {
		s = skip_space(s + 1, end);
		bool local = word_is(&s, end, "true");
		if ((local || word_is(&s, end, "false")) && s < end && *s == ')' && skip_space(s + 1, end) == end &&
		    strlen(name) <= PARAMS_NAME_MAX && name[0])
			st = local ? PARAMS_STMT_NONE
				   : params_set(p, name, value, false) ? PARAMS_STMT_SET : PARAMS_STMT_UNTRACKED;
	}
	free(name);
	free(value);
	return st;
}

/* What one statement does (params_track_statement); *known: it is one
 * that changes no setting for good, whatever it names. */
static enum params_stmt track_one(struct params *p, const char *sql, const char *end, const struct params *defaults,
				  bool *known)
{
	const char *s = skip_space(sql, end);
	char name[PARAMS_NAME_MAX + 1];
	*known = false;
	if (word_is(&s, end, "select")) {
		*known = true;
		/* (reading pg_settings changes nothing) */
		return mentions_setter(s, (size_t)(end - s), false) ? track_set_config(p, s, end) : PARAMS_STMT_NONE;
	}
	if (word_is(&s, end, "do"))
		return PARAMS_STMT_UNTRACKED;   /* its code may SET anything */
	if (word_is(&s, end, "discard")) {
		if (word_is(&s, end, "all")) {
			reset_unreported(p, defaults, NULL);
			return PARAMS_STMT_RESET_ALL;
		}
		return PARAMS_STMT_NONE;   /* PLANS, SEQUENCES, TEMP: no settings */
	}
	if (word_is(&s, end, "reset"))
		return track_reset(p, s, end, defaults);
	if (!word_is(&s, end, "set"))
		return PARAMS_STMT_NONE;
	if (word_is(&s, end, "local")) {
		*known = true;
		return PARAMS_STMT_NONE;   /* lasts until the end of the transaction */
	}
	(void)word_is(&s, end, "session");
	if (word_is(&s, end, "time")) {
		if (!word_is(&s, end, "zone"))
			return PARAMS_STMT_UNTRACKED;
		snprintf(name, sizeof name, "TimeZone");
		/* Forms only SET TIME ZONE takes, not SET TimeZone TO: LOCAL is
		 * DEFAULT; an INTERVAL is not replayed (the server reports the
		 * zone it makes, which is then the value) */
		if (word_is(&s, end, "local")) {
			reset_unreported(p, defaults, name);
			return PARAMS_STMT_RESET;
		}
		if (word_is(&s, end, "interval"))
			return PARAMS_STMT_UNTRACKED;
	} else if (word_is(&s, end, "schema")) {
		/* SET SCHEMA 'x': search_path's other spelling */
		snprintf(name, sizeof name, "search_path");
	} else {
		size_t n = guc_name(s, end, name, sizeof name);
		if (n == 0)
			return PARAMS_STMT_UNTRACKED;   /* a quoted or overlong name */
		bool is_one;
		enum params_stmt other = not_a_setting(name, &is_one);
		if (is_one)
			return other;
		s = skip_space(s + n, end);
		if (!word_is(&s, end, "to")) {
			if (s < end && *s == '=')
				s = skip_space(s + 1, end);
			else if (word_is(&s, end, "from") && word_is(&s, end, "current"))
				return PARAMS_STMT_NONE;   /* the value it has */
			else
				return PARAMS_STMT_UNTRACKED;
		}
	}
	/* The value runs to the first ';' outside quotes and comments, or the
	 * end, without the blanks and comments before that. */
	const char *v = s;
	size_t content_end;
	(void)sqllex_statement_end(v, (size_t)(end - v), 0, &content_end);
	const char *e = v + content_end;
	if (e == v)
		return PARAMS_STMT_NONE;   /* a syntax error: nothing changes */
	size_t n = (size_t)(e - v);
	if (n == 7 && strncasecmp(v, "default", 7) == 0) {
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
	if (params_reported(name) && n < 256) {
		char plain[256], canon[256];
		bool one_string;
		const struct param *cur = params_get(p, name);
		if (sql_plain_value(v, e, plain, sizeof plain, &one_string)) {
			if (params_canonical(name, plain, cur ? cur->value : NULL, canon, sizeof canon))
				return params_set(p, name, canon, false) ? PARAMS_STMT_SET : PARAMS_STMT_UNTRACKED;
			if (one_string)
				return params_set(p, name, plain, false) ? PARAMS_STMT_SET : PARAMS_STMT_UNTRACKED;
		}
	}
	return params_set_n(p, name, v, n, true) ? PARAMS_STMT_SET : PARAMS_STMT_UNTRACKED;
}

enum params_stmt params_track_statement(struct params *p, const char *sql, size_t len,
					const struct params *defaults)
{
	/* PostgreSQL reads the text up to its first NUL (a Query's own end) */
	const char *nul = memchr(sql, '\0', len);
	const char *end = nul ? nul : sql + len;
	bool known;
	enum params_stmt st = track_one(p, sql, end, defaults, &known);
	/* set_config or pg_settings in a statement not read above (a
	 * function's argument, a CTE, an UPDATE): whatever it set is not
	 * followed */
	if (st == PARAMS_STMT_NONE && !known && mentions_setter(sql, (size_t)(end - sql), true))
		return PARAMS_STMT_UNTRACKED;
	return st;
}

/* A statement starting at s[i], after blanks, may be one that changes a
 * setting: its first byte is that of SET, RESET or DISCARD (or starts a
 * comment, which hides it). */
static bool may_start_change(const char *s, size_t len, size_t i)
{
	while (i < len && sqllex_is_space((unsigned char)s[i]))
		i++;
	if (i >= len)
		return false;
	switch (s[i]) {
	case 's':
	case 'S':
		/* SELECT shares SET's first letter: only "set" goes further */
		return len - i >= 3 && (s[i + 1] | 0x20) == 'e' && (s[i + 2] | 0x20) == 't';
	case 'r':
	case 'R':
	case 'd':
	case 'D':
	case '/':
	case '-':
		return true;
	default:
		return false;
	}
}

/* At sql[at], a ';' or a '_': a statement after it may change a setting,
 * or it is set_config's or pg_settings'. */
static inline __attribute__((always_inline)) bool mark_may_change(const char *sql, size_t len, size_t at)
{
	if (sql[at] == ';')   /* (the usual one ends the text) */
		return at + 1 < len && may_start_change(sql, len, at + 1);
	return setter_at(sql, sql + len, sql + at, true);
}

/* The marks (';' and '_') of the 16 bytes at at. */
static inline __attribute__((always_inline)) struct bytescan_bits block_marks(const char *at)
{
	bytescan_block v = bytescan_load(at);
	return bytescan_bits((bytescan_block)((v == (unsigned char)';') | (v == (unsigned char)'_')));
}

/* The marks of the block at sql[at], from its skip-th byte on. */
static inline __attribute__((always_inline)) bool marks_may_change(const char *sql, size_t len, size_t at,
									  struct bytescan_bits m, size_t skip)
{
	for (size_t h = 0; h < 2; h++)
		for (uint64_t bits = m.lane[h]; bits; bits &= bits - 1) {
			size_t k = h * 8 + (size_t)__builtin_ctzll(bits) / 8;
			if (k >= skip && mark_may_change(sql, len, at + k))
				return true;
		}
	return false;
}

bool params_sql_may_change(const char *sql, size_t len)
{
	/* (bytes after a NUL, which PostgreSQL does not read, can only make
	 * this say yes: params_track_sql stops at the NUL; a Query's own
	 * final NUL is not looked at) */
	if (len > 0 && sql[len - 1] == '\0')
		len--;
	if (may_start_change(sql, len, 0))
		return true;
	/* Each statement after the first starts after a ';', and set_config
	 * and pg_settings have a '_': every one is looked at (one in a string
	 * or a name costs only this look), 16 bytes at a time. */
	size_t i = 0;
	for (; i + 16 <= len; i += 16) {
		struct bytescan_bits m = block_marks(sql + i);
		if (bytescan_any(m) && marks_may_change(sql, len, i, m, 0))
			return true;
	}
	if (i == len)
		return false;
	if (len >= 16) {   /* the last 16 bytes, the ones already seen skipped */
		struct bytescan_bits m = block_marks(sql + len - 16);
		return bytescan_any(m) && marks_may_change(sql, len, len - 16, m, i - (len - 16));
	}
	for (; i < len; i++)
		if ((sql[i] == ';' || sql[i] == '_') && mark_may_change(sql, len, i))
			return true;
	return false;
}

unsigned params_track_sql(struct params *p, const char *sql, size_t len, const struct params *defaults)
{
	const char *nul = memchr(sql, '\0', len);
	if (nul)
		len = (size_t)(nul - sql);
	unsigned r = 0;
	for (size_t i = 0; i < len;) {
		size_t start = sqllex_skip_blank(sql, len, i);
		if (start >= len)
			break;
		size_t stop = sqllex_statement_end(sql, len, start, NULL);
		if (may_start_change(sql, stop, start) || mentions_setter(sql + start, stop - start, true)) {
			switch (params_track_statement(p, sql + start, stop - start, defaults)) {
			case PARAMS_STMT_NONE:
				break;
			case PARAMS_STMT_SET:
			case PARAMS_STMT_RESET:
			case PARAMS_STMT_RESET_ALL:
				r |= PARAMS_CHANGED;
				break;
			case PARAMS_STMT_UNTRACKED:
				r |= PARAMS_UNTRACKED;
				break;
			}
		}
		i = stop + 1;
	}
	return r;
}

/* $n at *sp (n from 1 to 65535). */
static bool param_ref(const char **sp, const char *end, uint16_t *n)
{
	const char *s = *sp;
	if (s >= end || *s != '$')
		return false;
	unsigned v = 0;
	const char *d = s + 1;
	while (d < end && *d >= '0' && *d <= '9' && v <= 65535)
		v = v * 10 + (unsigned)(*d++ - '0');
	if (d == s + 1 || v == 0 || v > 65535)
		return false;
	*n = (uint16_t)v;
	*sp = skip_space(d, end);
	return true;
}

/* The whole text is SELECT [pg_catalog.]set_config($n, $m, local) and
 * nothing else: true, with *local. */
static bool bound_set_config(const char *s, const char *end, uint16_t *np, uint16_t *vp, bool *local)
{
	size_t content_end;
	(void)sqllex_statement_end(s, (size_t)(end - s), 0, &content_end);
	if (!sqllex_rest_is_empty(s, (size_t)(end - s), content_end < (size_t)(end - s) ? content_end + 1 : content_end))
		return false;   /* another statement after it */
	end = s + content_end;
	s = skip_space(s, end);
	if (!word_is(&s, end, "select"))
		return false;
	/* (sqllex_keyword takes letters only) */
	if (end - s > 10 && strncasecmp(s, "pg_catalog", 10) == 0) {
		s = skip_space(s + 10, end);
		if (s >= end || *s != '.')
			return false;
		s = skip_space(s + 1, end);
	}
	if (end - s < 10 || strncasecmp(s, "set_config", 10) != 0)
		return false;
	s = skip_space(s + 10, end);
	if (s >= end || *s != '(')
		return false;
	s = skip_space(s + 1, end);
	if (!param_ref(&s, end, np) || s >= end || *s != ',')
		return false;
	s = skip_space(s + 1, end);
	if (!param_ref(&s, end, vp) || s >= end || *s != ',')
		return false;
	s = skip_space(s + 1, end);
	*local = word_is(&s, end, "true");
	if (!*local && !word_is(&s, end, "false"))
		return false;
	return s < end && *s == ')' && skip_space(s + 1, end) == end;
}

enum params_setter params_setter_of(const char *sql, size_t len, uint16_t *name_param, uint16_t *value_param)
{
	const char *nul = memchr(sql, '\0', len);
	if (nul)
		len = (size_t)(nul - sql);
	if (!params_sql_may_change(sql, len))
		return PARAMS_SETTER_NONE;
	bool local;
	if (bound_set_config(sql, sql + len, name_param, value_param, &local))
		return local ? PARAMS_SETTER_NONE : PARAMS_SETTER_BOUND;
	/* What the text does to an empty session tells what it does to any. */
	struct params scratch = { NULL, 0 };
	unsigned r = params_track_sql(&scratch, sql, len, NULL);
	params_clear(&scratch);
	if (r & PARAMS_UNTRACKED)
		return PARAMS_SETTER_UNTRACKED;
	return r & PARAMS_CHANGED ? PARAMS_SETTER_TEXT : PARAMS_SETTER_NONE;
}

void params_write(struct pktbuf *pb, const struct params *p)
{
	size_t n = params_count(p);
	if (n > UINT16_MAX) {
		pb->failed = true;
		return;
	}
	pktbuf_put_u16(pb, (uint16_t)n);
	for (size_t i = 0; i < n; i++) {
		const struct param *e = params_at(p, i);
		pktbuf_put_u8(pb, e->raw);
		pktbuf_put_cstring(pb, e->name);
		pktbuf_put_cstring(pb, e->value);
	}
}

bool params_read(struct bytes_in *r, struct params *out)
{
	uint16_t n = bytes_u16(r);
	for (uint16_t i = 0; i < n && !r->bad; i++) {
		bool raw = bytes_u8(r) != 0;
		const char *name = bytes_cstring(r), *value = bytes_cstring(r);
		if (r->bad || !params_set(out, name, value, raw))
			return false;
	}
	return !r->bad;
}
