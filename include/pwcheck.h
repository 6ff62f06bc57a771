/* SPDX-License-Identifier: MIT */
/*
 * pwcheck: a password given in clear, checked by an outside authority (an
 * LDAP server: ldap_auth.c; PAM: pam_auth.c) through a blocking call run
 * on the worker's offload threads (offload.h), the verdict back on the
 * loop. The job copies the user name and the password and wipes the
 * password when it ends; the checker's context is its own (freed with the
 * job), since the configuration it came from may be reloaded meanwhile.
 */
#ifndef PGCAT_PWCHECK_H
#define PGCAT_PWCHECK_H

#include <stddef.h>

#define PWCHECK_WHY_MAX 256

enum pwcheck_verdict {
	PWCHECK_OK,       /* the authority took the password */
	PWCHECK_DENIED,   /* it refused it (wrong password, no such user) */
	PWCHECK_ERROR,    /* it could not be asked (down, TLS, misconfigured) */
};

/* Blocking, on a thread: the verdict on user's password; why says what
 * went wrong, for the log (never the password). */
typedef enum pwcheck_verdict (*pwcheck_fn)(void *ctx, const char *user, const char *password, char *why,
					   size_t why_len);
/* The verdict, on the loop. */
typedef void (*pwcheck_done_fn)(void *arg, enum pwcheck_verdict v, const char *why);

struct offload;
struct offload_job;

/* Runs check(ctx, user, password) off the loop; done(arg, ...) comes on
 * the loop unless the job is cancelled (offload_cancel). The job owns ctx
 * (ctx_free(ctx) when it goes, on the loop). NULL: out of memory or no
 * thread (ctx freed). */
struct offload_job *pwcheck_start(struct offload *off, pwcheck_fn check, void *ctx, void (*ctx_free)(void *ctx),
				  const char *user, const char *password, pwcheck_done_fn done, void *arg)
	__attribute__((warn_unused_result));

#endif
