/* SPDX-License-Identifier: MIT */
/*
 * ldap_opts: the options of PostgreSQL's LDAP authentication method, as an
 * auth_hba_file line gives them after `ldap` and as auth_ldap_options
 * gives them for auth_type = ldap (PgBouncer's key). Two modes, as in
 * PostgreSQL:
 *   simple bind:  ldapprefix + user name + ldapsuffix is the DN to bind as;
 *   search+bind:  ldapbasedn (with ldapbinddn/ldapbindpasswd to search as,
 *                 ldapsearchattribute or ldapsearchfilter with $username)
 *                 finds the user's one entry, whose DN is bound as.
 * ldapserver (a blank-separated list), ldapport, ldapscheme (ldap, ldaps),
 * ldaptls (StartTLS), or ldapurl (RFC 4516: scheme, host, port, base DN,
 * attribute, scope, filter) say where. Parsing only: ldap_auth.c binds.
 * The URL is read by libldap's own parser.
 */
#ifndef PGCAT_LDAP_OPTS_H
#define PGCAT_LDAP_OPTS_H

#include <stdbool.h>
#include <stddef.h>

#define LDAP_OPTS_WHY_MAX 200

/* ldap.h's LDAP_SCOPE_* values (kept here so that this header needs no
 * libldap). */
enum ldap_opts_scope { LDAP_OPTS_SCOPE_BASE = 0, LDAP_OPTS_SCOPE_ONE = 1, LDAP_OPTS_SCOPE_SUB = 2 };

struct ldap_opts {
	char *servers;          /* host names, blank separated; NULL: none given */
	int port;               /* 0: the scheme's (389, 636) */
	bool ldaps;             /* ldapscheme=ldaps or an ldaps:// URL */
	bool starttls;          /* ldaptls=1 */
	char *prefix, *suffix;  /* simple bind */
	char *basedn, *binddn, *bindpasswd, *search_attribute, *search_filter;   /* search+bind */
	enum ldap_opts_scope scope;   /* of the search: subtree unless a URL says */
};

/* One NAME=VALUE option (quotes already removed) into o. false: why says
 * what is wrong (an unknown name, a bad value, an option given twice). */
bool ldap_opts_set(struct ldap_opts *o, const char *name_value, char *why, size_t why_len)
	__attribute__((warn_unused_result));
/* After the last option: the combination is checked (one mode, not both;
 * a server; ldapsearchattribute and ldapsearchfilter not together).
 * false: why says what is wrong. */
bool ldap_opts_finish(struct ldap_opts *o, char *why, size_t why_len) __attribute__((warn_unused_result));
/* auth_ldap_options: the options of one string, blank separated, each
 * NAME=VALUE with quoted parts allowed (ldapurl="ldap://h/dc=x?uid?sub"),
 * as on an hba line; finished. false: why says what is wrong (o freed). */
bool ldap_opts_parse_string(const char *s, struct ldap_opts *o, char *why, size_t why_len)
	__attribute__((warn_unused_result));
/* A deep copy (a login's check runs on a thread while a reload may free
 * the configuration's). false: out of memory (dst freed). */
bool ldap_opts_copy(struct ldap_opts *dst, const struct ldap_opts *src) __attribute__((warn_unused_result));
/* Frees the strings (the bind password wiped); o zeroed. */
void ldap_opts_free(struct ldap_opts *o);

#endif
