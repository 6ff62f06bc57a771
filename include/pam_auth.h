/* SPDX-License-Identifier: MIT */
/*
 * pam_auth: a password checked by PAM (auth_type = pam, hba `pam` lines):
 * pam_authenticate, then pam_acct_mgmt (an expired or locked account is
 * refused too), for a PAM service (/etc/pam.d/SERVICE), the client's
 * address as PAM_RHOST. Blocking calls, run on the worker's offload
 * threads (pwcheck.h), one at a time (lock): PAM's modules are not all
 * safe to call from several threads at once.
 */
#ifndef PGCAT_PAM_AUTH_H
#define PGCAT_PAM_AUTH_H

#include <pthread.h>
#include <stddef.h>

#include "pwcheck.h"

/* Blocking: the verdict of service's stack on user's password. */
enum pwcheck_verdict pam_auth_check(const char *service, const char *rhost, const char *user, const char *password,
				    char *why, size_t why_len);

struct offload;
struct offload_job;
/* Off the loop (pwcheck_start): service and rhost are copied; lock is
 * held around the PAM calls. NULL: out of memory or no thread;
 * cancelled with offload_cancel. */
struct offload_job *pam_auth_start(struct offload *off, pthread_mutex_t *lock, const char *service, const char *rhost,
				   const char *user, const char *password, pwcheck_done_fn done, void *arg)
	__attribute__((warn_unused_result));

#endif
