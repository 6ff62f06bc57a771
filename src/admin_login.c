/* SPDX-License-Identifier: MIT */
/*
 * admin_login: the console's users and their rights. See admin_login.h.
 */
#include "admin_login.h"

#include <string.h>

#include "auth_file.h"
#include "auth_md5.h"
#include "auth_scram.h"
#include "config.h"
#include "context.h"
#include "log.h"

enum admin_role admin_role_of(const struct config *cfg, const char *user)
{
	const struct config_general *g = &cfg->general;
	if (config_list_has(g->admin_users, user))
		return ADMIN_ROLE_ADMIN;
	/* The same order as admin_login_credentials: admin_username logs in
	 * with admin_password when there is one, else (listed in stats_users)
	 * with its list secret, and then it is a stats user. */
	/* (An empty admin_username names nobody: a pgbouncer.ini's console
	 * has only admin_users and stats_users.) */
	bool is_admin_username = g->admin_username[0] && strcmp(user, g->admin_username) == 0;
	if (is_admin_username && g->admin_password && g->admin_password[0])
		return ADMIN_ROLE_ADMIN;
	if (config_list_has(g->stats_users, user))
		return ADMIN_ROLE_STATS;
	return is_admin_username ? ADMIN_ROLE_ADMIN : ADMIN_ROLE_NONE;
}

/* A SCRAM verifier for a listed user's secret when the login may use
 * SCRAM. From a plaintext password it is derived now (PBKDF2, a few
 * milliseconds): console logins are rare, and a SCRAM secret in auth_file
 * costs nothing. */
static const struct scram_secret *listed_scram(const struct config *cfg, const char *pw, struct scram_secret *out)
{
	if (!pw || !pw[0] || pg_md5_is_stored(pw))
		return NULL;
	if (strncmp(pw, "SCRAM-SHA-256$", 14) == 0)
		return scram_secret_parse(pw, out) ? out : NULL;
	if (cfg->general.auth_type != AUTH_TYPE_SCRAM && cfg->hba == NULL)
		return NULL;
	uint8_t salt[16];
	if (!pg_random_bytes(salt, sizeof salt) ||
	    !scram_secret_from_password(pw, salt, sizeof salt, SCRAM_DEFAULT_ITERATIONS, out))
		return NULL;
	return out;
}

bool auth_file_login_credentials(struct worker *w, const char *user, struct auth_credentials *cred,
				 struct scram_secret *scram)
{
	const struct config *cfg = w->cfg;
	memset(cred, 0, sizeof *cred);
	const struct auth_file_entry *e = cfg->auth_users ? auth_file_find(cfg->auth_users, user) : NULL;
	if (!e)
		return false;
	cred->password = e->secret;
	cred->scram = listed_scram(cfg, cred->password, scram);
	return true;
}

void admin_login_looked_up(struct worker *w, const char *secret, struct auth_credentials *cred,
			   struct scram_secret *scram)
{
	cred->password = secret;
	cred->scram = listed_scram(w->cfg, secret, scram);
}

bool admin_login_credentials(struct worker *w, const char *user, struct auth_credentials *cred,
			     struct scram_secret *scram)
{
	const struct config *cfg = w->cfg;
	const struct config_general *g = &cfg->general;
	memset(cred, 0, sizeof *cred);
	bool is_admin_username = g->admin_username[0] && strcmp(user, g->admin_username) == 0;
	/* admin_username with admin_password: as before the lists existed. */
	if (is_admin_username && g->admin_password && g->admin_password[0]) {
		cred->password = g->admin_password;
		cred->scram = w->have_admin_scram ? &w->admin_scram : NULL;
		return true;
	}
	if (config_list_has(g->admin_users, user) || config_list_has(g->stats_users, user)) {
		cred->password = config_console_secret(cfg, user);
		if (!cred->password && !(g->auth_user && g->auth_user[0]))
			log_warning("admin console: user \"%s\" is in admin_users or stats_users but has no password "
				    "in auth_file or a users section", user);
		cred->scram = listed_scram(cfg, cred->password, scram);
		return true;
	}
	/* admin_username without a password: only auth_type trust lets it in. */
	if (is_admin_username) {
		cred->password = g->admin_password;
		return true;
	}
	return false;
}
