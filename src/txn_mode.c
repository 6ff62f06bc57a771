/* SPDX-License-Identifier: MIT */
/*
 * txn_mode: a transaction's characteristics, read from SHOW and written as
 * SET TRANSACTION (include/txn_mode.h).
 */
#include "txn_mode.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sqllex.h"

/* PostgreSQL's spellings, in enum txn_isolation's order: SHOW gives the
 * lower-case ones, SET TRANSACTION takes the upper-case ones. */
static const char *const iso_shown[] = { "read uncommitted", "read committed", "repeatable read", "serializable" };
static const char *const iso_sql[] = { "READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE" };

static bool bool_setting(const char *v, bool *out)
{
	if (strcmp(v, "on") == 0)
		*out = true;
	else if (strcmp(v, "off") == 0)
		*out = false;
	else
		return false;
	return true;
}

bool txn_mode_from_settings(const char *isolation, const char *read_only, const char *deferrable,
			    struct txn_mode *out)
{
	if (!isolation || !read_only || !deferrable)
		return false;
	size_t k = 0;
	while (k < sizeof iso_shown / sizeof iso_shown[0] && strcmp(isolation, iso_shown[k]) != 0)
		k++;
	if (k == sizeof iso_shown / sizeof iso_shown[0])
		return false;
	out->isolation = (enum txn_isolation)k;
	return bool_setting(read_only, &out->read_only) && bool_setting(deferrable, &out->deferrable);
}

size_t txn_mode_begin_sql(const struct txn_mode *m, char *out, size_t outsz)
{
	if ((unsigned)m->isolation >= sizeof iso_sql / sizeof iso_sql[0] || outsz == 0)
		return 0;
	int n = snprintf(out, outsz, "BEGIN; SET TRANSACTION ISOLATION LEVEL %s, %s, %s", iso_sql[m->isolation],
			 m->read_only ? "READ ONLY" : "READ WRITE", m->deferrable ? "DEFERRABLE" : "NOT DEFERRABLE");
	if (n < 0 || (size_t)n >= outsz) {
		out[0] = '\0';
		return 0;
	}
	return (size_t)n;
}

/* The settings that are the current transaction's characteristics. */
static bool txn_setting(const char *name)
{
	return strcasecmp(name, "transaction_isolation") == 0 || strcasecmp(name, "transaction_read_only") == 0 ||
	       strcasecmp(name, "transaction_deferrable") == 0;
}

bool txn_mode_statement_sets(const char *sql, size_t len)
{
	const char *nul = memchr(sql, '\0', len);
	if (nul)
		len = (size_t)(nul - sql);
	size_t i = sqllex_skip_blank(sql, len, 0);
	char name[64];
	if (sqllex_keyword(sql, len, &i, "reset"))
		return sqllex_ident(sql, len, &i, name, sizeof name) && txn_setting(name);
	if (!sqllex_keyword(sql, len, &i, "set"))
		return false;
	if (!sqllex_keyword(sql, len, &i, "local"))
		(void)sqllex_keyword(sql, len, &i, "session");
	/* SET TRANSACTION: the current transaction's (SET SESSION
	 * CHARACTERISTICS AS TRANSACTION names later ones: "characteristics"
	 * is read as a setting's name below, and is none of these) */
	size_t at = i;
	if (sqllex_keyword(sql, len, &at, "transaction"))
		return true;
	return sqllex_ident(sql, len, &i, name, sizeof name) && txn_setting(name);
}
