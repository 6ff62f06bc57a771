/* SPDX-License-Identifier: MIT */
/*
 * hba: auth_hba_file's lines (PgBouncer's and PostgreSQL's hba format)
 * into rules, and the first rule that matches a login.
 *
 * A line is read in two passes: first cut into fields (white space
 * between fields, commas inside one, "quoted names" with "" for a quote,
 * # to the end of the line; conf_tokens.c), then each field read for
 * what its column holds. A bad line is reported and parsing goes on, so that one run names
 * every bad line; the result is still all or nothing.
 */
#define _POSIX_C_SOURCE 200809L
#include "hba.h"

#include "conf_tokens.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define HBA_MAX_NAME 63     /* NAMEDATALEN - 1: longer names never reach pgcat whole */

/* One column: the names of a comma list, as written (quotes removed). */
struct field {
	struct conf_token *items;
	size_t n;
};

struct line {
	struct field *fields;
	size_t n;
	struct conf_status *st; /* where the first problem goes */
	unsigned flags;         /* HBA_PARSE_* */
};

static void line_free(struct line *ln)
{
	for (size_t i = 0; i < ln->n; i++) {
		for (size_t j = 0; j < ln->fields[i].n; j++)
			free(ln->fields[i].items[j].s);
		free(ln->fields[i].items);
	}
	free(ln->fields);
	ln->fields = NULL;
	ln->n = 0;
}

/* ------------------------------------------------------------------ */
/* Pass 1: fields                                                       */

/* Commas separate the names of a list (the caller reads them); a name
 * has no length limit here, the columns check what they keep. */
static const struct conf_token_rules hba_tokens = { .max_len = SIZE_MAX, .bare_comma = NULL, .pg_words = true };

/* One name at *p (p < end): quoted or bare. Appends it to f. */
static bool read_item(struct line *ln, const char **p, const char *end, struct field *f)
{
	struct conf_token *grown = conf_grow(f->items, f->n, sizeof *f->items, ln->st);
	if (!grown)
		return false;
	f->items = grown;
	if (!conf_read_token(ln->st, p, end, &hba_tokens, &f->items[f->n]))
		return false;
	f->n++;
	return true;
}

/* Cut [text, end) into fields; false on a syntax error or out of memory. */
static bool split_fields(struct line *ln, const char *text, const char *end)
{
	const char *p = conf_skip_blanks(text, end);
	while (p < end && *p != '#') {
		struct field *grown = conf_grow(ln->fields, ln->n, sizeof *ln->fields, ln->st);
		if (!grown)
			return false;
		ln->fields = grown;
		struct field *f = &ln->fields[ln->n++];
		*f = (struct field){ 0 };
		for (;;) {
			if (!read_item(ln, &p, end, f))
				return false;
			p = conf_skip_blanks(p, end);
			if (p >= end || *p != ',')
				break;
			p = conf_skip_blanks(p + 1, end);
			if (p >= end || *p == '#')
				return conf_fail(ln->st, "a list ends with a comma");
			if (*p == ',')
				return conf_fail(ln->st, "empty name in a list");
		}
	}
	return true;
}

/* ------------------------------------------------------------------ */
/* Pass 2: columns                                                      */

static bool is_kw(const struct conf_token *it, const char *kw)
{
	return !it->quoted && strcmp(it->s, kw) == 0;
}

/* A column that must be one bare word (type, address, method). */
static const char *single(struct line *ln, const struct field *f, const char *what)
{
	if (f->n != 1 || f->items[0].quoted) {
		conf_fail(ln->st, "the %s must be a single unquoted word", what);
		return NULL;
	}
	return f->items[0].s;
}

static bool add_name(struct line *ln, struct hba_names *nm, const char *s)
{
	char **grown = realloc(nm->names, (nm->n + 1) * sizeof *nm->names);
	if (grown)
		nm->names = grown;
	char *dup = grown ? strdup(s) : NULL;
	if (!dup) {
		ln->st->oom = true;
		return false;
	}
	nm->names[nm->n++] = dup;
	return true;
}

/* A database (is_db) or user column into nm. */
static bool read_names(struct line *ln, const struct field *f, bool is_db, struct hba_names *nm, bool *replication)
{
	for (size_t i = 0; i < f->n; i++) {
		const struct conf_token *it = &f->items[i];
		if (it->mixed)
			return conf_fail(ln->st, "a quote inside a name: quote the whole name (\"...\")");
		if (is_kw(it, "all")) {
			nm->all = true;
			continue;
		}
		if (is_db && is_kw(it, "sameuser")) {
			nm->sameuser = true;
			continue;
		}
		if (is_db && is_kw(it, "replication")) {
			*replication = true;
			continue;
		}
		if (is_db && (is_kw(it, "samerole") || is_kw(it, "samegroup")))
			return conf_fail(ln->st, "\"%s\" is not supported (pgcat knows no role membership)", it->s);
		if (!it->quoted && it->s[0] == '+')
			return conf_fail(ln->st, "group names (\"%s\") are not supported: pgcat knows no role membership", it->s);
		if (!it->quoted && it->s[0] == '@')
			return conf_fail(ln->st, "file inclusion (\"%s\") is not supported: write the names on the line", it->s);
		if (!it->quoted && it->s[0] == '/')
			return conf_fail(ln->st, "regular expressions (\"%s\") are not supported", it->s);
		if (strlen(it->s) > HBA_MAX_NAME)
			return conf_fail(ln->st, "name \"%.40s...\" is longer than %d bytes and would never match", it->s,
				    HBA_MAX_NAME);
		if (!add_name(ln, nm, it->s))
			return false;
	}
	return true;
}

static void prefix_mask(uint8_t *mask, unsigned bits)
{
	memset(mask, 0, 16);
	for (unsigned i = 0; i < bits / 8; i++)
		mask[i] = 0xff;
	if (bits % 8)
		mask[bits / 8] = (uint8_t)(0xff << (8 - bits % 8));
}

static int parse_ip(const char *s, uint8_t *out)
{
	if (inet_pton(AF_INET, s, out) == 1)
		return AF_INET;
	if (inet_pton(AF_INET6, s, out) == 1)
		return AF_INET6;
	return 0;
}

/* The address column ("all", a/n) or the address and netmask columns, from
 * fields[*i]; *i moves past what was used. */
static bool read_address(struct line *ln, size_t *i, struct hba_rule *r)
{
	const char *a = single(ln, &ln->fields[*i], "address");
	if (!a)
		return false;
	(*i)++;
	if (strcmp(a, "all") == 0) {
		r->any_addr = true;
		return true;
	}
	if (strcmp(a, "samehost") == 0 || strcmp(a, "samenet") == 0)
		return conf_fail(ln->st, "address \"%s\" is not supported: write the addresses as CIDR (e.g. 10.0.0.0/8)", a);
	char buf[64];
	const char *slash = strchr(a, '/');
	size_t alen = slash ? (size_t)(slash - a) : strlen(a);
	if (alen >= sizeof buf)
		return conf_fail(ln->st, "invalid address \"%s\"", a);
	memcpy(buf, a, alen);
	buf[alen] = '\0';
	r->family = parse_ip(buf, r->addr);
	if (r->family == 0) {
		if (strchr(buf, ':') || strspn(buf, "0123456789.") == alen)
			return conf_fail(ln->st, "invalid IP address \"%s\"", buf);
		return conf_fail(ln->st, "host names are not supported (\"%s\"): write an IP address with a CIDR mask", a);
	}
	unsigned maxbits = r->family == AF_INET ? 32 : 128;
	if (slash) {
		const char *d = slash + 1;
		size_t nd = strspn(d, "0123456789");
		unsigned long bits = nd > 0 && nd <= 3 && d[nd] == '\0' ? strtoul(d, NULL, 10) : maxbits + 1;
		if (bits > maxbits)
			return conf_fail(ln->st, "invalid CIDR mask in address \"%s\" (0 to %u bits)", a, maxbits);
		prefix_mask(r->mask, (unsigned)bits);
	} else {
		const char *m = *i < ln->n && ln->fields[*i].n == 1 && !ln->fields[*i].items[0].quoted
					? ln->fields[*i].items[0].s : NULL;
		memset(r->mask, 0, sizeof r->mask);
		if (!m || parse_ip(m, r->mask) != r->family)
			return conf_fail(ln->st, "address \"%s\" needs a mask: write %s/%u, or give a netmask column", a, a, maxbits);
		(*i)++;
	}
	for (size_t k = 0; k < 16; k++)
		r->addr[k] &= r->mask[k];
	return true;
}

static bool read_method(struct line *ln, const char *m, struct hba_rule *r)
{
	static const struct { const char *name; enum hba_method m; } methods[] = {
		{ "trust", HBA_TRUST }, { "reject", HBA_REJECT }, { "md5", HBA_MD5 },
		{ "scram-sha-256", HBA_SCRAM }, { "cert", HBA_CERT }, { "password", HBA_PASSWORD },
		{ "peer", HBA_PEER }, { "ldap", HBA_LDAP }, { "pam", HBA_PAM },
	};
	for (size_t k = 0; k < sizeof methods / sizeof methods[0]; k++) {
		if (strcmp(m, methods[k].name) == 0) {
			r->method = methods[k].m;
			if (r->method == HBA_CERT && r->type != HBA_HOSTSSL &&
			    !(r->type == HBA_HOST && (ln->flags & HBA_PARSE_CERT_ON_HOST)))
				return conf_fail(ln->st, "method cert needs a hostssl line (a client certificate comes only over TLS)");
			/* As PostgreSQL: the kernel knows the peer's user only
			 * for a Unix socket. */
			if (r->method == HBA_PEER && r->type != HBA_LOCAL)
				return conf_fail(ln->st, "method peer is only for local lines (the client's OS user is known only "
						"over the Unix socket)");
			return true;
		}
	}
	static const char *const known[] = { "ident", "gss", "sspi", "radius", "bsd", "oauth" };
	for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
		if (strcmp(m, known[k]) == 0)
			return conf_fail(ln->st, "method \"%s\" is not supported by pgcat (trust, reject, md5, scram-sha-256, password, "
				    "cert, peer, ldap, pam)", m);
	return conf_fail(ln->st, "unknown method \"%s\" (trust, reject, md5, scram-sha-256, password, cert, peer, ldap, "
			 "pam)", m);
}

/* NAME=VALUE options after the method: map= for peer and cert (the
 * methods that get a user name from elsewhere), as PostgreSQL allows it;
 * ldap*= for ldap; pamservice= for pam. A value may be quoted in part (ldapprefix="uid="),
 * and options may be separated by commas, as PostgreSQL reads them. */
static bool read_option(struct line *ln, const struct conf_token *it, struct hba_rule *r)
{
	const char *o = it->s;
	const char *eq = strchr(o, '=');
	if (!eq)
		return conf_fail(ln->st, "unexpected \"%s\" after the method (options are NAME=VALUE)", o);
	if (r->method == HBA_LDAP) {
		char why[LDAP_OPTS_WHY_MAX];
		if (!ldap_opts_set(&r->ldap, o, why, sizeof why)) {
			if (strcmp(why, "out of memory") == 0)
				ln->st->oom = true;
			return conf_fail(ln->st, "%s", why);
		}
		return true;
	}
	if (r->method == HBA_PAM) {
		if ((size_t)(eq - o) != 10 || strncmp(o, "pamservice", 10) != 0)
			return conf_fail(ln->st, "option \"%s\" is not supported (pamservice= only)", o);
		if (r->pam_service)
			return conf_fail(ln->st, "pamservice= given twice");
		if (eq[1] == '\0' || strchr(eq + 1, '/'))
			return conf_fail(ln->st, "pamservice= needs a service name (a file of /etc/pam.d)");
		r->pam_service = strdup(eq + 1);
		if (!r->pam_service) {
			ln->st->oom = true;
			return false;
		}
		return true;
	}
	if ((size_t)(eq - o) != 3 || strncmp(o, "map", 3) != 0)
		return conf_fail(ln->st, "option \"%s\" is not supported (map= only)", o);
	if (r->method != HBA_PEER && r->method != HBA_CERT)
		return conf_fail(ln->st, "option map= is only for methods peer and cert");
	if (r->map)
		return conf_fail(ln->st, "map= given twice");
	const char *name = eq + 1;
	if (name[0] == '\0')
		return conf_fail(ln->st, "map= needs a map name");
	if (strlen(name) > HBA_MAX_NAME)
		return conf_fail(ln->st, "map name \"%.40s...\" is longer than %d bytes", name, HBA_MAX_NAME);
	r->map = strdup(name);
	if (!r->map) {
		ln->st->oom = true;
		return false;
	}
	return true;
}

/* The fields of one non-empty line into r. */
static bool read_rule(struct line *ln, struct hba_rule *r)
{
	static const struct { const char *name; enum hba_conn_type t; } types[] = {
		{ "local", HBA_LOCAL }, { "host", HBA_HOST }, { "hostssl", HBA_HOSTSSL }, { "hostnossl", HBA_HOSTNOSSL },
	};
	const char *t = single(ln, &ln->fields[0], "connection type");
	if (!t)
		return false;
	size_t k = 0;
	while (k < sizeof types / sizeof types[0] && strcmp(t, types[k].name) != 0)
		k++;
	if (k == sizeof types / sizeof types[0])
		return conf_fail(ln->st, "unknown connection type \"%s\" (local, host, hostssl, hostnossl)", t);
	r->type = types[k].t;
	size_t need = r->type == HBA_LOCAL ? 4 : 5;
	if (ln->n < need)
		return conf_fail(ln->st, "too few fields: %s needs %s", t,
			    r->type == HBA_LOCAL ? "database, user and method" : "database, user, address and method");
	if (!read_names(ln, &ln->fields[1], true, &r->db, &r->db_replication) ||
	    !read_names(ln, &ln->fields[2], false, &r->user, &r->db_replication))
		return false;
	size_t i = 3;
	if (r->type == HBA_LOCAL)
		r->any_addr = true;
	else if (!read_address(ln, &i, r))
		return false;
	if (i >= ln->n)
		return conf_fail(ln->st, "no method after the address");
	const char *m = single(ln, &ln->fields[i], "method");
	if (!m || !read_method(ln, m, r))
		return false;
	if (r->method == HBA_LDAP)
		r->ldap.scope = LDAP_OPTS_SCOPE_SUB;
	for (i++; i < ln->n; i++)
		for (size_t j = 0; j < ln->fields[i].n; j++)
			if (!read_option(ln, &ln->fields[i].items[j], r))
				return false;
	if (r->method == HBA_LDAP) {
		char why[LDAP_OPTS_WHY_MAX];
		if (!ldap_opts_finish(&r->ldap, why, sizeof why))
			return conf_fail(ln->st, "%s", why);
	}
	return true;
}

/* ------------------------------------------------------------------ */
/* The file                                                             */

static void names_free(struct hba_names *nm)
{
	for (size_t i = 0; i < nm->n; i++)
		free(nm->names[i]);
	free(nm->names);
}

void hba_free(struct hba *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n; i++) {
		names_free(&h->rules[i].db);
		names_free(&h->rules[i].user);
		free(h->rules[i].map);
		ldap_opts_free(&h->rules[i].ldap);
		free(h->rules[i].pam_service);
	}
	free(h->rules);
	h->rules = NULL;
	h->n = 0;
}

/* A rule read but not (yet) h's. */
static void rule_free(struct hba_rule *r)
{
	names_free(&r->db);
	names_free(&r->user);
	free(r->map);
	ldap_opts_free(&r->ldap);
	free(r->pam_service);
}

static bool add_rule(struct hba *h, const struct hba_rule *r, struct conf_status *st)
{
	struct hba_rule *grown = conf_grow(h->rules, h->n, sizeof *h->rules, st);
	if (!grown)
		return false;
	h->rules = grown;
	h->rules[h->n++] = *r;
	return true;
}

struct parse_ctx {
	struct hba *h;
	unsigned flags;         /* HBA_PARSE_* */
};

/* One line (conf_line_fn): a rule appended to pc->h, or a problem in st. */
static void parse_line(void *ctx, const char *s, const char *end, int lineno, struct conf_status *st)
{
	struct parse_ctx *pc = ctx;
	struct hba *h = pc->h;
	struct line ln = { .st = st, .flags = pc->flags };
	struct hba_rule r = { .line = lineno };
	/* Once appended, r is h's; until then (a bad line, no memory) ours. */
	if (!split_fields(&ln, s, end) || !read_rule(&ln, &r) || !add_rule(h, &r, st))
		rule_free(&r);
	line_free(&ln);
}

enum hba_parse_result hba_parse(const char *text, size_t len, struct hba *out, hba_bad_line_fn bad, void *arg)
{
	return hba_parse_flags(text, len, out, bad, arg, 0);
}

enum hba_parse_result hba_parse_flags(const char *text, size_t len, struct hba *out, hba_bad_line_fn bad, void *arg,
				      unsigned flags)
{
	*out = (struct hba){ 0 };
	struct parse_ctx pc = { .h = out, .flags = flags };
	switch (conf_each_line(text, len, parse_line, &pc, bad, arg)) {
	case CONF_OK:
		out->same_family = (flags & HBA_PARSE_SAME_FAMILY) != 0;
		return HBA_PARSE_OK;
	case CONF_BAD:
		hba_free(out);
		return HBA_PARSE_BAD;
	case CONF_NOMEM:
		break;
	}
	hba_free(out);
	return HBA_PARSE_NOMEM;
}

/* ------------------------------------------------------------------ */
/* Matching                                                             */

static bool names_match(const struct hba_names *nm, const char *name, const char *user)
{
	if (nm->all || (nm->sameuser && user && strcmp(name, user) == 0))
		return true;
	for (size_t i = 0; i < nm->n; i++)
		if (strcmp(nm->names[i], name) == 0)
			return true;
	return false;
}

static bool masked_equal(const uint8_t *a, const uint8_t *mask, const uint8_t *want, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((a[i] & mask[i]) != want[i])
			return false;
	return true;
}

static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

/* An IPv4 rule matches a client seen as ::ffff:a.b.c.d, and an IPv6 rule
 * for ::ffff:a.b.c.d/n an IPv4 client, as PostgreSQL does. */
static bool addr_match(const struct hba_rule *r, int family, const uint8_t *a, bool same_family)
{
	if (r->family == family)
		return masked_equal(a, r->mask, r->addr, family == AF_INET ? 4 : 16);
	if (same_family)
		return false;
	if (r->family == AF_INET && family == AF_INET6 && memcmp(a, v4mapped, 12) == 0)
		return masked_equal(a + 12, r->mask, r->addr, 4);
	if (r->family == AF_INET6 && family == AF_INET) {
		uint8_t m[16];
		memcpy(m, v4mapped, 12);
		memcpy(m + 12, a, 4);
		return masked_equal(m, r->mask, r->addr, 16);
	}
	return false;
}

const struct hba_rule *hba_match(const struct hba *h, const struct hba_login *l)
{
	for (size_t i = 0; i < h->n; i++) {
		const struct hba_rule *r = &h->rules[i];
		if (l->is_unix != (r->type == HBA_LOCAL))
			continue;
		if ((r->type == HBA_HOSTSSL && !l->tls) || (r->type == HBA_HOSTNOSSL && l->tls))
			continue;
		if (!r->any_addr && !addr_match(r, l->family, l->addr, h->same_family))
			continue;
		if (l->physical_replication ? !r->db_replication : !names_match(&r->db, l->database, l->user))
			continue;
		if (!names_match(&r->user, l->user, NULL))
			continue;
		return r;
	}
	return NULL;
}

const char *hba_method_name(enum hba_method m)
{
	switch (m) {
	case HBA_TRUST: return "trust";
	case HBA_REJECT: return "reject";
	case HBA_MD5: return "md5";
	case HBA_SCRAM: return "scram-sha-256";
	case HBA_CERT: return "cert";
	case HBA_PASSWORD: return "password";
	case HBA_PEER: return "peer";
	case HBA_LDAP: return "ldap";
	case HBA_PAM: return "pam";
	}
	return "?";
}
