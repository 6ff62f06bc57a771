/* SPDX-License-Identifier: MIT */
/*
 * pam_auth: PAM checks for logins (include/pam_auth.h).
 */
#define _DEFAULT_SOURCE   /* explicit_bzero */
#include "pam_auth.h"

#include <security/pam_appl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conv_data {
	const char *user, *password;
};

/* PAM's questions: the password for a hidden prompt, the user name for
 * a visible one (PAM has it already, from pam_start), nothing for its
 * messages. */
static int conversation(int n, const struct pam_message **msg, struct pam_response **resp, void *appdata)
{
	const struct conv_data *d = appdata;
	if (n <= 0 || n > PAM_MAX_NUM_MSG)
		return PAM_CONV_ERR;
	struct pam_response *r = calloc((size_t)n, sizeof *r);
	if (!r)
		return PAM_BUF_ERR;
	for (int i = 0; i < n; i++) {
		const char *answer = NULL;
		switch (msg[i]->msg_style) {
		case PAM_PROMPT_ECHO_OFF: answer = d->password; break;
		case PAM_PROMPT_ECHO_ON: answer = d->user; break;
		case PAM_ERROR_MSG:
		case PAM_TEXT_INFO:
			break;
		default:
			answer = NULL;
			break;
		}
		if (answer && !(r[i].resp = strdup(answer))) {
			for (int k = 0; k < i; k++) {
				if (r[k].resp) {
					explicit_bzero(r[k].resp, strlen(r[k].resp));
					free(r[k].resp);
				}
			}
			free(r);
			return PAM_BUF_ERR;
		}
	}
	*resp = r;   /* (PAM frees the answers) */
	return PAM_SUCCESS;
}

/* PAM's delay after a failure (pam_unix asks for 2 s): none here. The
 * worker's PAM calls go one at a time; a delay inside them would hold up
 * every other PAM login of the worker, and LDAP's too once the threads
 * are all taken. (pgcat delays no other refused login either.) */
static void no_fail_delay(int retval, unsigned usec_delay, void *appdata)
{
	(void)retval;
	(void)usec_delay;
	(void)appdata;
}

static enum pwcheck_verdict verdict(pam_handle_t *h, int rc, const char *step, char *why, size_t why_len)
{
	snprintf(why, why_len, "%s: %s", step, pam_strerror(h, rc));
	switch (rc) {
	case PAM_AUTH_ERR:
	case PAM_USER_UNKNOWN:
	case PAM_MAXTRIES:
	case PAM_ACCT_EXPIRED:
	case PAM_NEW_AUTHTOK_REQD:
	case PAM_PERM_DENIED:
	case PAM_CRED_INSUFFICIENT:
		return PWCHECK_DENIED;
	default:
		return PWCHECK_ERROR;
	}
}

enum pwcheck_verdict pam_auth_check(const char *service, const char *rhost, const char *user, const char *password,
				    char *why, size_t why_len)
{
	if (!password[0]) {
		snprintf(why, why_len, "empty password");
		return PWCHECK_DENIED;
	}
	struct conv_data d = { user, password };
	struct pam_conv conv = { conversation, &d };
	pam_handle_t *h = NULL;
	int rc = pam_start(service, user, &conv, &h);
	if (rc != PAM_SUCCESS) {
		snprintf(why, why_len, "pam_start for service \"%s\": %s", service, pam_strerror(h, rc));
		if (h)
			pam_end(h, rc);
		return PWCHECK_ERROR;
	}
	enum pwcheck_verdict v = PWCHECK_OK;
	void (*delay_fn)(int, unsigned, void *) = no_fail_delay;
	if ((rc = pam_set_item(h, PAM_FAIL_DELAY, (const void *)delay_fn)) != PAM_SUCCESS)
		v = verdict(h, rc, "pam_set_item", why, why_len);
	if (v == PWCHECK_OK && rhost && rhost[0] && (rc = pam_set_item(h, PAM_RHOST, rhost)) != PAM_SUCCESS)
		v = verdict(h, rc, "pam_set_item", why, why_len);
	if (v == PWCHECK_OK && (rc = pam_authenticate(h, PAM_SILENT | PAM_DISALLOW_NULL_AUTHTOK)) != PAM_SUCCESS)
		v = verdict(h, rc, "pam_authenticate", why, why_len);
	if (v == PWCHECK_OK && (rc = pam_acct_mgmt(h, PAM_SILENT | PAM_DISALLOW_NULL_AUTHTOK)) != PAM_SUCCESS)
		v = verdict(h, rc, "pam_acct_mgmt", why, why_len);
	pam_end(h, rc);
	return v;
}

/* ---- off the loop ---- */

struct pam_ctx {
	pthread_mutex_t *lock;
	char *service, *rhost;
};

static enum pwcheck_verdict check_job(void *ctx, const char *user, const char *password, char *why, size_t why_len)
{
	struct pam_ctx *c = ctx;
	pthread_mutex_lock(c->lock);
	enum pwcheck_verdict v = pam_auth_check(c->service, c->rhost, user, password, why, why_len);
	pthread_mutex_unlock(c->lock);
	return v;
}

static void ctx_free(void *ctx)
{
	struct pam_ctx *c = ctx;
	free(c->service);
	free(c->rhost);
	free(c);
}

struct offload_job *pam_auth_start(struct offload *off, pthread_mutex_t *lock, const char *service, const char *rhost,
				   const char *user, const char *password, pwcheck_done_fn done, void *arg)
{
	struct pam_ctx *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->lock = lock;
	c->service = strdup(service);
	c->rhost = strdup(rhost ? rhost : "");
	if (!c->service || !c->rhost) {
		ctx_free(c);
		return NULL;
	}
	return pwcheck_start(off, check_job, c, ctx_free, user, password, done, arg);
}
