/* SPDX-License-Identifier: MIT */
/*
 * ldap_opts: the LDAP method's options (include/ldap_opts.h).
 */
#define _DEFAULT_SOURCE   /* explicit_bzero */
#include "ldap_opts.h"

#include <ldap.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_tokens.h"

_Static_assert(LDAP_OPTS_SCOPE_BASE == LDAP_SCOPE_BASE && LDAP_OPTS_SCOPE_ONE == LDAP_SCOPE_ONELEVEL &&
		       LDAP_OPTS_SCOPE_SUB == LDAP_SCOPE_SUBTREE,
	       "scope values");

/* The options that are a string as written, and where each goes. */
static const struct {
	const char *name;
	size_t off;
} string_opts[] = {
	{ "ldapserver", offsetof(struct ldap_opts, servers) },
	{ "ldapprefix", offsetof(struct ldap_opts, prefix) },
	{ "ldapsuffix", offsetof(struct ldap_opts, suffix) },
	{ "ldapbasedn", offsetof(struct ldap_opts, basedn) },
	{ "ldapbinddn", offsetof(struct ldap_opts, binddn) },
	{ "ldapbindpasswd", offsetof(struct ldap_opts, bindpasswd) },
	{ "ldapsearchattribute", offsetof(struct ldap_opts, search_attribute) },
	{ "ldapsearchfilter", offsetof(struct ldap_opts, search_filter) },
};
#define N_STRING_OPTS (sizeof string_opts / sizeof string_opts[0])

static char **string_opt(struct ldap_opts *o, size_t i)
{
	return (char **)((char *)o + string_opts[i].off);
}

/* Replaces *slot by a copy of v. false: out of memory. */
static bool set_str(char **slot, const char *v, char *why, size_t why_len)
{
	char *copy = strdup(v);
	if (!copy) {
		snprintf(why, why_len, "out of memory");
		return false;
	}
	free(*slot);
	*slot = copy;
	return true;
}

/* ldapurl: what it says replaces what the options said before it. */
static bool set_url(struct ldap_opts *o, const char *url, char *why, size_t why_len)
{
	LDAPURLDesc *u = NULL;
	int rc = ldap_url_parse(url, &u);
	if (rc != LDAP_URL_SUCCESS || !u) {
		snprintf(why, why_len, "could not parse LDAP URL \"%.80s\" (libldap's error %d)", url, rc);
		return false;
	}
	bool ok = true;
	if (!u->lud_scheme || (strcmp(u->lud_scheme, "ldap") != 0 && strcmp(u->lud_scheme, "ldaps") != 0)) {
		snprintf(why, why_len, "unsupported LDAP URL scheme \"%.20s\" (ldap, ldaps)",
			 u->lud_scheme ? u->lud_scheme : "");
		ok = false;
	}
	if (ok) {
		o->ldaps = strcmp(u->lud_scheme, "ldaps") == 0;
		o->port = u->lud_port;
		o->scope = u->lud_scope == LDAP_SCOPE_ONELEVEL  ? LDAP_OPTS_SCOPE_ONE
			   : u->lud_scope == LDAP_SCOPE_SUBTREE ? LDAP_OPTS_SCOPE_SUB
								: LDAP_OPTS_SCOPE_BASE;
	}
	if (ok && u->lud_host && u->lud_host[0])
		ok = set_str(&o->servers, u->lud_host, why, why_len);
	if (ok && u->lud_dn)
		ok = set_str(&o->basedn, u->lud_dn, why, why_len);
	if (ok && u->lud_attrs && u->lud_attrs[0])
		ok = set_str(&o->search_attribute, u->lud_attrs[0], why, why_len);
	if (ok && u->lud_filter)
		ok = set_str(&o->search_filter, u->lud_filter, why, why_len);
	ldap_free_urldesc(u);
	return ok;
}

bool ldap_opts_set(struct ldap_opts *o, const char *name_value, char *why, size_t why_len)
{
	const char *eq = strchr(name_value, '=');
	if (!eq) {
		snprintf(why, why_len, "unexpected \"%.60s\": LDAP options are NAME=VALUE", name_value);
		return false;
	}
	size_t n = (size_t)(eq - name_value);
	const char *v = eq + 1;
	for (size_t i = 0; i < N_STRING_OPTS; i++)
		if (strlen(string_opts[i].name) == n && strncmp(name_value, string_opts[i].name, n) == 0)
			return set_str(string_opt(o, i), v, why, why_len);
#define IS(word) (n == sizeof(word) - 1 && strncmp(name_value, word, n) == 0)
	if (IS("ldapport")) {
		char *end;
		long port = strtol(v, &end, 10);
		if (!v[0] || *end || port < 1 || port > 65535) {
			snprintf(why, why_len, "invalid LDAP port number \"%.20s\"", v);
			return false;
		}
		o->port = (int)port;
		return true;
	}
	if (IS("ldapscheme")) {
		if (strcmp(v, "ldap") != 0 && strcmp(v, "ldaps") != 0) {
			snprintf(why, why_len, "invalid ldapscheme value \"%.20s\" (ldap, ldaps)", v);
			return false;
		}
		o->ldaps = strcmp(v, "ldaps") == 0;
		return true;
	}
	if (IS("ldaptls")) {
		o->starttls = strcmp(v, "1") == 0;   /* (PostgreSQL's reading: 1 or not) */
		return true;
	}
	if (IS("ldapurl"))
		return set_url(o, v, why, why_len);
#undef IS
	snprintf(why, why_len, "unknown LDAP option \"%.*s\"", (int)(n > 40 ? 40 : n), name_value);
	return false;
}

bool ldap_opts_finish(struct ldap_opts *o, char *why, size_t why_len)
{
	bool search = o->basedn || o->binddn || o->bindpasswd || o->search_attribute || o->search_filter;
	if ((o->prefix || o->suffix) && search) {
		snprintf(why, why_len, "ldapprefix and ldapsuffix (simple bind) cannot be mixed with ldapbasedn, "
				       "ldapbinddn, ldapbindpasswd, ldapsearchattribute, ldapsearchfilter or ldapurl "
				       "(search+bind)");
		return false;
	}
	if (!o->prefix && !o->suffix && !o->basedn) {
		snprintf(why, why_len, "method ldap needs ldapbasedn, ldapprefix or ldapsuffix");
		return false;
	}
	if (o->search_attribute && o->search_filter) {
		snprintf(why, why_len, "ldapsearchattribute and ldapsearchfilter cannot be used together");
		return false;
	}
	if (!o->servers || !o->servers[0]) {
		snprintf(why, why_len, "method ldap needs ldapserver (or an ldapurl with a host)");
		return false;
	}
	return true;
}

bool ldap_opts_parse_string(const char *s, struct ldap_opts *o, char *why, size_t why_len)
{
	static const struct conf_token_rules words = { .max_len = SIZE_MAX, .bare_comma = NULL, .pg_words = true };
	*o = (struct ldap_opts){ .scope = LDAP_OPTS_SCOPE_SUB };
	struct conf_status st = { .why = "" };
	const char *end = s + strlen(s);
	const char *p = conf_skip_blanks(s, end);
	bool ok = true;
	while (ok && p < end) {
		if (*p == ',') {   /* (commas between options, as PostgreSQL's lists allow) */
			p = conf_skip_blanks(p + 1, end);
			continue;
		}
		struct conf_token t;
		if (!conf_read_token(&st, &p, end, &words, &t)) {
			snprintf(why, why_len, "%s", st.oom ? "out of memory" : st.why);
			ok = false;
			break;
		}
		ok = ldap_opts_set(o, t.s, why, why_len);
		free(t.s);
		p = conf_skip_blanks(p, end);
	}
	if (ok)
		ok = ldap_opts_finish(o, why, why_len);
	if (!ok)
		ldap_opts_free(o);
	return ok;
}

bool ldap_opts_copy(struct ldap_opts *dst, const struct ldap_opts *src)
{
	*dst = *src;
	for (size_t i = 0; i < N_STRING_OPTS; i++)
		*string_opt(dst, i) = NULL;
	for (size_t i = 0; i < N_STRING_OPTS; i++) {
		const char *from = *string_opt((struct ldap_opts *)src, i);
		if (from && !(*string_opt(dst, i) = strdup(from))) {
			ldap_opts_free(dst);
			return false;
		}
	}
	return true;
}

void ldap_opts_free(struct ldap_opts *o)
{
	if (o->bindpasswd)
		explicit_bzero(o->bindpasswd, strlen(o->bindpasswd));
	for (size_t i = 0; i < N_STRING_OPTS; i++)
		free(*string_opt(o, i));
	*o = (struct ldap_opts){ 0 };
}
