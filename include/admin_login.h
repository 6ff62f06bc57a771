/* SPDX-License-Identifier: MIT */
/*
 * admin_login: who may use the admin console (SPEC §7) and with what
 * rights. admin_username (with admin_password) and the users of
 * admin_users may run every command; those of stats_users SHOW only. The
 * users of the two lists log in with their secret from auth_file or a
 * users section, as they would to a pool. Rights are read from the running
 * configuration at every command, so a reload that takes a user off
 * admin_users takes its rights away at once.
 */
#ifndef PGCAT_ADMIN_LOGIN_H
#define PGCAT_ADMIN_LOGIN_H

#include <stdbool.h>

#include "auth.h"
#include "types.h"

struct config;

enum admin_role { ADMIN_ROLE_NONE, ADMIN_ROLE_STATS, ADMIN_ROLE_ADMIN };

enum admin_role admin_role_of(const struct config *cfg, const char *user);

/* The credentials user logs in to the console with, into cred (cred->scram
 * may point to *scram, which must outlive the call to auth_client_begin).
 * false: the user may not use the console at all. */
/* A listed console user's secret found by auth_query: into cred as
 * admin_login_credentials would put it. */
void admin_login_looked_up(struct worker *w, const char *secret, struct auth_credentials *cred,
			   struct scram_secret *scram);
bool admin_login_credentials(struct worker *w, const char *user, struct auth_credentials *cred,
			     struct scram_secret *scram) __attribute__((warn_unused_result));

/* A login no pool serves (an unknown database, refused once the client
 * has authenticated: start_login): the user's auth_file secret, into cred
 * (cred->scram may point to *scram, as above); false: auth_file does not
 * name the user. */
bool auth_file_login_credentials(struct worker *w, const char *user, struct auth_credentials *cred,
				 struct scram_secret *scram) __attribute__((warn_unused_result));

#endif
