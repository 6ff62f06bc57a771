/* SPDX-License-Identifier: MIT */
/*
 * ldap_auth: a password checked by binding to an LDAP server, PostgreSQL's
 * ldap method (ldap_opts.h has the options and the two modes). The calls
 * are libldap's synchronous ones, run on the worker's offload threads
 * (offload.h): a login waits, the loop does not. Each call has a timeout
 * (LDAP_AUTH_TIMEOUT_S), so that a server that does not answer refuses
 * the login in seconds.
 *
 * TLS (ldaps://, ldapscheme=ldaps, ldaptls=1) takes libldap's settings:
 * ldap.conf, or the file the environment's LDAPCONF names (TLS_CACERT,
 * TLS_REQCERT), as for OpenLDAP's own tools.
 */
#ifndef PGCAT_LDAP_AUTH_H
#define PGCAT_LDAP_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "ldap_opts.h"

#define LDAP_AUTH_TIMEOUT_S 10   /* each connect, bind and search */
#define LDAP_AUTH_WHY_MAX 256

enum ldap_auth_verdict {
	LDAP_AUTH_OK,       /* the server took the password */
	LDAP_AUTH_DENIED,   /* wrong password, no such entry, or an entry not unique */
	LDAP_AUTH_ERROR,    /* the server could not be asked (down, TLS, a bad search) */
};

/* Blocking: binds as user with password as o says. why: what went wrong,
 * for the log (never the password). An empty password is refused before
 * any server is asked (a simple bind with none is an anonymous login). */
enum ldap_auth_verdict ldap_auth_check(const struct ldap_opts *o, const char *user, const char *password, char *why,
				       size_t why_len);

struct offload;
struct ldap_auth_job;
/* The verdict, on the loop (why as for ldap_auth_check). */
typedef void (*ldap_auth_done_fn)(void *arg, enum ldap_auth_verdict v, const char *why);

/* Checks user's password off the loop: done(arg, ...) comes later, on the
 * loop, unless cancelled. The job takes o's strings (o is zeroed) and
 * copies user and password (wiped when it ends). NULL: out of memory or
 * no thread (o freed). */
struct ldap_auth_job *ldap_auth_start(struct offload *off, struct ldap_opts *o, const char *user, const char *password,
				      ldap_auth_done_fn done, void *arg) __attribute__((warn_unused_result));
/* The login is gone: done will not be called. */
void ldap_auth_cancel(struct offload *off, struct ldap_auth_job *j);

#endif
