/* SPDX-License-Identifier: MIT */
/*
 * ldap_auth: LDAP binds for logins (include/ldap_auth.h).
 */
#define _DEFAULT_SOURCE   /* explicit_bzero */
#include "ldap_auth.h"

#include <ldap.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>


__attribute__((format(printf, 4, 5))) static enum pwcheck_verdict say(enum pwcheck_verdict v, char *why,
									  size_t why_len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, why_len, fmt, ap);
	va_end(ap);
	return v;
}

/* "scheme://host:port" for each of o's servers, blank separated (libldap
 * tries them in turn). NULL: out of memory. */
static char *server_uris(const struct ldap_opts *o)
{
	const char *scheme = o->ldaps ? "ldaps" : "ldap";
	int port = o->port ? o->port : o->ldaps ? 636 : 389;
	size_t cap = strlen(o->servers) * 2 + 64, len = 0;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	out[0] = '\0';
	const char *p = o->servers;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		size_t n = strcspn(p, " \t");
		bool v6 = memchr(p, ':', n) != NULL;
		size_t need = len + n + strlen(scheme) + 20;
		if (need > cap) {
			char *grown = realloc(out, need * 2);
			if (!grown) {
				free(out);
				return NULL;
			}
			out = grown;
			cap = need * 2;
		}
		len += (size_t)snprintf(out + len, cap - len, "%s%s://%s%.*s%s:%d", len ? " " : "", scheme, v6 ? "[" : "",
					(int)n, p, v6 ? "]" : "", port);
		p += n;
	}
	return out;
}

/* A user name that can go into a DN or a search filter as it is: none of
 * the characters that would change their meaning (PostgreSQL refuses
 * the filter's; the DN's are refused too, so that a name cannot name
 * another entry). */
static bool user_name_ok(const char *user)
{
	return user[0] && strpbrk(user, "*()\\/,+\"<>;=#") == NULL;
}

/* ldapsearchfilter with each $username replaced, or (attribute=user).
 * NULL: out of memory. */
static char *search_filter(const struct ldap_opts *o, const char *user)
{
	if (!o->search_filter) {
		const char *attr = o->search_attribute ? o->search_attribute : "uid";
		size_t n = strlen(attr) + strlen(user) + 4;
		char *f = malloc(n);
		if (f)
			snprintf(f, n, "(%s=%s)", attr, user);
		return f;
	}
	static const char token[] = "$username";
	size_t count = 0;
	for (const char *p = strstr(o->search_filter, token); p; p = strstr(p + 1, token))
		count++;
	size_t n = strlen(o->search_filter) + count * strlen(user) + 1;
	char *f = malloc(n), *w = f;
	if (!f)
		return NULL;
	for (const char *p = o->search_filter; *p;) {
		if (strncmp(p, token, sizeof token - 1) == 0) {
			memcpy(w, user, strlen(user));
			w += strlen(user);
			p += sizeof token - 1;
		} else {
			*w++ = *p++;
		}
	}
	*w = '\0';
	return f;
}

static int simple_bind(LDAP *ld, const char *dn, const char *password)
{
	struct berval cred = { .bv_len = strlen(password), .bv_val = (char *)password };
	return ldap_sasl_bind_s(ld, dn, LDAP_SASL_SIMPLE, &cred, NULL, NULL, NULL);
}

/* search+bind: the DN of user's one entry into *dn (ldap_memfree). */
static enum pwcheck_verdict find_dn(LDAP *ld, const struct ldap_opts *o, const char *user, char **dn, char *why,
				      size_t why_len)
{
	const char *binddn = o->binddn ? o->binddn : "";
	int rc = simple_bind(ld, binddn, o->bindpasswd ? o->bindpasswd : "");
	if (rc != LDAP_SUCCESS)
		return say(PWCHECK_ERROR, why, why_len, "could not bind for the search as \"%.80s\": %s", binddn,
			   ldap_err2string(rc));
	char *filter = search_filter(o, user);
	if (!filter)
		return say(PWCHECK_ERROR, why, why_len, "out of memory");
	char *attrs[] = { (char *)LDAP_NO_ATTRS, NULL };
	struct timeval tv = { .tv_sec = LDAP_AUTH_TIMEOUT_S };
	LDAPMessage *res = NULL;
	rc = ldap_search_ext_s(ld, o->basedn, (int)o->scope, filter, attrs, 0, NULL, NULL, &tv, 2, &res);
	enum pwcheck_verdict v = PWCHECK_OK;
	int n = res ? ldap_count_entries(ld, res) : 0;
	if (rc != LDAP_SUCCESS && !(rc == LDAP_SIZELIMIT_EXCEEDED && n > 1)) {
		v = say(PWCHECK_ERROR, why, why_len, "could not search for \"%.80s\" under \"%.80s\": %s", filter,
			o->basedn, ldap_err2string(rc));
	} else if (n != 1) {
		v = say(PWCHECK_DENIED, why, why_len, "the search for \"%.80s\" under \"%.80s\" found %s", filter,
			o->basedn, n == 0 ? "no entry" : "more than one entry");
	} else {
		*dn = ldap_get_dn(ld, ldap_first_entry(ld, res));
		if (!*dn)
			v = say(PWCHECK_ERROR, why, why_len, "the entry found for \"%.80s\" has no DN", filter);
	}
	if (res)
		ldap_msgfree(res);
	free(filter);
	return v;
}

enum pwcheck_verdict ldap_auth_check(const struct ldap_opts *o, const char *user, const char *password, char *why,
				       size_t why_len)
{
	if (!password[0])
		return say(PWCHECK_DENIED, why, why_len, "empty password");
	if (!user_name_ok(user))
		return say(PWCHECK_DENIED, why, why_len, "the user name has characters LDAP authentication refuses");
	char *uris = server_uris(o);
	if (!uris)
		return say(PWCHECK_ERROR, why, why_len, "out of memory");
	LDAP *ld = NULL;
	int rc = ldap_initialize(&ld, uris);
	if (rc != LDAP_SUCCESS || !ld) {
		say(PWCHECK_ERROR, why, why_len, "could not initialize LDAP for \"%.80s\": %s", uris, ldap_err2string(rc));
		free(uris);
		return PWCHECK_ERROR;
	}
	int version = LDAP_VERSION3;
	struct timeval tv = { .tv_sec = LDAP_AUTH_TIMEOUT_S };
	enum pwcheck_verdict v = PWCHECK_OK;
	if ((rc = ldap_set_option(ld, LDAP_OPT_PROTOCOL_VERSION, &version)) != LDAP_OPT_SUCCESS ||
	    (rc = ldap_set_option(ld, LDAP_OPT_NETWORK_TIMEOUT, &tv)) != LDAP_OPT_SUCCESS ||
	    (rc = ldap_set_option(ld, LDAP_OPT_TIMEOUT, &tv)) != LDAP_OPT_SUCCESS ||
	    (rc = ldap_set_option(ld, LDAP_OPT_REFERRALS, LDAP_OPT_OFF)) != LDAP_OPT_SUCCESS)
		v = say(PWCHECK_ERROR, why, why_len, "could not set LDAP options: %s", ldap_err2string(rc));
	if (v == PWCHECK_OK && o->starttls && (rc = ldap_start_tls_s(ld, NULL, NULL)) != LDAP_SUCCESS)
		v = say(PWCHECK_ERROR, why, why_len, "could not start TLS with %s: %s", uris, ldap_err2string(rc));
	char *dn = NULL, *built = NULL;
	if (v == PWCHECK_OK) {
		if (o->basedn) {
			v = find_dn(ld, o, user, &dn, why, why_len);
		} else {
			const char *pre = o->prefix ? o->prefix : "", *suf = o->suffix ? o->suffix : "";
			size_t n = strlen(pre) + strlen(user) + strlen(suf) + 1;
			built = malloc(n);
			if (built)
				snprintf(built, n, "%s%s%s", pre, user, suf);
			else
				v = say(PWCHECK_ERROR, why, why_len, "out of memory");
		}
	}
	if (v == PWCHECK_OK) {
		const char *bind_dn = dn ? dn : built;
		rc = simple_bind(ld, bind_dn, password);
		if (rc == LDAP_INVALID_CREDENTIALS)
			v = say(PWCHECK_DENIED, why, why_len, "bind as \"%.80s\" on %s: %s", bind_dn, uris,
				ldap_err2string(rc));
		else if (rc != LDAP_SUCCESS)
			v = say(PWCHECK_ERROR, why, why_len, "bind as \"%.80s\" on %s: %s", bind_dn, uris,
				ldap_err2string(rc));
	}
	if (dn)
		ldap_memfree(dn);
	free(built);
	ldap_unbind_ext_s(ld, NULL, NULL);
	free(uris);
	return v;
}

/* ---- off the loop ---- */

static enum pwcheck_verdict check_job(void *ctx, const char *user, const char *password, char *why, size_t why_len)
{
	return ldap_auth_check(ctx, user, password, why, why_len);
}

static void opts_free(void *ctx)
{
	ldap_opts_free(ctx);
	free(ctx);
}

struct offload_job *ldap_auth_start(struct offload *off, struct ldap_opts *o, const char *user, const char *password,
				    pwcheck_done_fn done, void *arg)
{
	/* libldap sets itself up (ldap.conf, TLS defaults) at its first call,
	 * which must not be made by two threads at once: made here, on the
	 * loop, before any job runs (later calls find it done). */
	int version;
	(void)ldap_get_option(NULL, LDAP_OPT_PROTOCOL_VERSION, &version);
	struct ldap_opts *mine = malloc(sizeof *mine);
	if (!mine) {
		ldap_opts_free(o);
		return NULL;
	}
	*mine = *o;
	*o = (struct ldap_opts){ 0 };
	return pwcheck_start(off, check_job, mine, opts_free, user, password, done, arg);
}
