/* SPDX-License-Identifier: MIT */
/*
 * pwcheck: outside password checks as offload jobs (include/pwcheck.h).
 */
#define _DEFAULT_SOURCE   /* explicit_bzero */
#include "pwcheck.h"

#include <stdlib.h>
#include <string.h>

#include "offload.h"

struct pwcheck_job {
	struct offload_job job;   /* first */
	pwcheck_fn check;
	void *ctx;
	void (*ctx_free)(void *ctx);
	char *user, *password;
	pwcheck_done_fn done;
	void *arg;
	enum pwcheck_verdict verdict;
	char why[PWCHECK_WHY_MAX];
};

static void job_free(struct offload_job *oj)
{
	struct pwcheck_job *j = (struct pwcheck_job *)oj;
	if (j->ctx)
		j->ctx_free(j->ctx);
	if (j->password) {
		explicit_bzero(j->password, strlen(j->password));
		free(j->password);
	}
	free(j->user);
	free(j);
}

static void job_run(struct offload_job *oj)
{
	struct pwcheck_job *j = (struct pwcheck_job *)oj;
	j->verdict = j->check(j->ctx, j->user, j->password, j->why, sizeof j->why);
}

static void job_done(struct offload_job *oj)
{
	struct pwcheck_job *j = (struct pwcheck_job *)oj;
	j->done(j->arg, j->verdict, j->why);
	job_free(oj);
}

struct offload_job *pwcheck_start(struct offload *off, pwcheck_fn check, void *ctx, void (*ctx_free)(void *ctx),
				  const char *user, const char *password, pwcheck_done_fn done, void *arg)
{
	struct pwcheck_job *j = calloc(1, sizeof *j);
	if (!j) {
		ctx_free(ctx);
		return NULL;
	}
	*j = (struct pwcheck_job){ .check = check, .ctx = ctx, .ctx_free = ctx_free, .done = done, .arg = arg,
				   .verdict = PWCHECK_ERROR };
	j->user = strdup(user);
	j->password = strdup(password);
	j->job.run = job_run;
	j->job.done = job_done;
	j->job.free = job_free;
	if (!j->user || !j->password || !off || !offload_submit(off, &j->job)) {
		job_free(&j->job);
		return NULL;
	}
	return &j->job;
}
