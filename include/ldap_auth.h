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
#include "pwcheck.h"

#define LDAP_AUTH_TIMEOUT_S 10   /* each connect, bind and search */

/* Blocking: binds as user with password as o says. why: what went wrong,
 * for the log (never the password). An empty password is refused before
 * any server is asked (a simple bind with none is an anonymous login). */
enum pwcheck_verdict ldap_auth_check(const struct ldap_opts *o, const char *user, const char *password, char *why,
				     size_t why_len);

/* Checks user's password off the loop (pwcheck.h): the job takes o's
 * strings (o is zeroed). NULL: out of memory or no thread (o freed);
 * cancelled with offload_cancel. */
struct offload_job *ldap_auth_start(struct offload *off, struct ldap_opts *o, const char *user, const char *password,
				    pwcheck_done_fn done, void *arg) __attribute__((warn_unused_result));

#endif
