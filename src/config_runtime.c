/* SPDX-License-Identifier: MIT */
/*
 * config_runtime: [general] of a loaded snapshot at run time (SPEC §7):
 * SHOW CONFIG's rows (their values rendered by config_value.c, secrets
 * hidden), and SET of
 * a reloadable key, parsed and checked as the file's loading would
 * (config_value.c, config_check.c) on a trial copy, so that the snapshot
 * changes only if every check passes. Its own room because it works on
 * a config already built, never on the file.
 */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h and comes
 * first in the include path. */
#include "config.h"
#include "config_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* SHOW CONFIG                                                          */

/* ------------------------------------------------------------------ */
/* pgcat -t: the effective values                                       */

/* One field as the ini would hold it, durations with their unit. */
static void format_field(const struct key_spec *k, const void *base, char *buf, size_t buflen)
{
	int iv;
	buf[0] = '\0';
	switch (k->kind) {
	case VALUE_DURATION:
		memcpy(&iv, cfield(base, k->off), sizeof(iv));
		if (iv == CONFIG_INHERIT && (k->flags & KEY_EMPTY_INHERITS))
			return;          /* empty: inherited */
		config_format_duration(iv, (k->flags & KEY_SECONDS) != 0, buf, buflen);
		return;
	case VALUE_BYTES: {
		int64_t v;
		memcpy(&v, cfield(base, k->off), sizeof(v));
		config_format_bytes(v, buf, buflen);
		return;
	}
	case VALUE_INT:
	case VALUE_ENUM:
	case VALUE_SHARD:
		memcpy(&iv, cfield(base, k->off), sizeof(iv));
		if (iv == CONFIG_INHERIT && (k->flags & KEY_EMPTY_INHERITS))
			return;          /* empty: inherited */
		if (k->kind == VALUE_ENUM)
			snprintf(buf, buflen, "%s", enum_name(k->names, iv));
		else if (k->kind == VALUE_SHARD && iv == CONFIG_DEFAULT_SHARD_ALL)
			snprintf(buf, buflen, "all");
		else
			snprintf(buf, buflen, "%d", iv);
		return;
	case VALUE_SERVER_LIST: {
		const struct config_server *list = *(struct config_server *const *)cfield(base, k->off);
		size_t n = *(const size_t *)cfield(base, k->off_n), used = 0;
		for (size_t j = 0; j < n && used < buflen; j++) {
			bool v6 = strchr(list[j].host, ':') != NULL;
			int w = snprintf(buf + used, buflen - used, "%s%s%s%s:%d:%s", j ? ", " : "", v6 ? "[" : "",
					 list[j].host, v6 ? "]" : "", list[j].port, config_server_role_name(list[j].role));
			if (w < 0)
				return;
			used += (size_t)w;
		}
		return;
	}
	case VALUE_STRING:
		if ((k->flags & KEY_SECRET) && *(char *const *)cfield(base, k->off) != NULL &&
		    (*(char *const *)cfield(base, k->off))[0] != '\0') {
			snprintf(buf, buflen, "********");
			return;
		}
		break;
	case VALUE_INT64:
	case VALUE_BOOL:
	case VALUE_ADDR_LIST:
	case VALUE_TABLE_LIST:
	case VALUE_NAME_LIST:
		break;
	}
	/* The rest reads as SHOW CONFIG shows it: a shim over the same code. */
	const char *s = NULL;
	char num[32];
	switch (k->kind) {
	case VALUE_INT64: {
		int64_t v;
		memcpy(&v, cfield(base, k->off), sizeof(v));
		snprintf(num, sizeof(num), "%lld", (long long)v);
		s = num;
		break;
	}
	case VALUE_BOOL:
		s = *(const bool *)cfield(base, k->off) ? "true" : "false";
		break;
	case VALUE_STRING:
		s = *(char *const *)cfield(base, k->off);
		break;
	case VALUE_ADDR_LIST:
	case VALUE_TABLE_LIST:
	case VALUE_NAME_LIST: {
		char *const *list = *(char **const *)cfield(base, k->off);
		size_t n = *(const size_t *)cfield(base, k->off_n), used = 0;
		for (size_t j = 0; j < n; j++)
			if ((j > 0 && !config_buf_put(buf, buflen, &used, ", ")) || !config_buf_put(buf, buflen, &used, list[j]))
				return;
		return;
	}
	case VALUE_INT:
	case VALUE_DURATION:
	case VALUE_BYTES:
	case VALUE_ENUM:
	case VALUE_SHARD:
	case VALUE_SERVER_LIST:
		return;
	}
	snprintf(buf, buflen, "%s", s ? s : "");
}

static void print_section(FILE *out, const char *header, const struct key_spec *specs, size_t n, const void *base)
{
	char value[2048];
	fprintf(out, "\n[%s]\n", header);
	for (size_t i = 0; i < n; i++) {
		format_field(&specs[i], base, value, sizeof(value));
		fprintf(out, "%s =%s%s\n", specs[i].name, value[0] ? " " : "", value);
	}
}

bool config_show_row(const struct config *cfg, size_t i, struct config_show_row *row)
{
	memset(row, 0, sizeof(*row));
	if (cfg->format == CONFIG_FORMAT_PGBOUNCER)
		return pgb_show_row(cfg, i, row);
	if (i >= N_GENERAL_KEYS)
		return false;
	row->key = general_info[i].name;
	if (!config_general_value(cfg, row->key, row->value, sizeof(row->value)))
		row->value[0] = '\0';
	row->default_value = general_info[i].default_value;
	row->changeable = general_info[i].reloadable;
	return true;
}

void config_print(const struct config *cfg, FILE *out)
{
	char section[CONFIG_MAX_NAME * 2 + 32];
	if (cfg->format == CONFIG_FORMAT_PGBOUNCER) {
		/* PgBouncer's settings first, as its SHOW CONFIG has them; then
		 * what pgcat runs, in pgcat.ini's terms. */
		struct config_show_row row;
		fprintf(out, "\n[pgbouncer]\n");
		for (size_t i = 0; config_show_row(cfg, i, &row); i++)
			fprintf(out, "%s =%s%s\n", row.key, row.value[0] ? " " : "", row.value);
		fprintf(out, "\n; as pgcat runs it, in pgcat.ini's keys:\n");
	}
	print_section(out, "general", general_specs, N_GENERAL_KEYS, &cfg->general);
	for (size_t i = 0; i < cfg->n_pools; i++) {
		const struct config_pool *pool = &cfg->pools[i];
		snprintf(section, sizeof(section), "pools.%s", pool->name);
		print_section(out, section, pool_specs, POOL_KEY_COUNT, pool);
		for (size_t j = 0; j < pool->n_shards; j++) {
			snprintf(section, sizeof(section), "pools.%s.shards.%d", pool->name, pool->shards[j].index);
			print_section(out, section, shard_specs, SHARD_KEY_COUNT, &pool->shards[j]);
		}
		for (size_t j = 0; j < pool->n_next_shards; j++) {
			snprintf(section, sizeof(section), "pools.%s.next.shards.%d", pool->name, pool->next_shards[j].index);
			print_section(out, section, shard_specs, SHARD_KEY_COUNT, &pool->next_shards[j]);
		}
		for (size_t j = 0; j < pool->n_users; j++) {
			snprintf(section, sizeof(section), "pools.%s.users.%s", pool->name, pool->users[j].name);
			print_section(out, section, user_specs, USER_KEY_COUNT, &pool->users[j]);
		}
	}
	if (cfg->autodb != NULL) {
		/* (its shards' database, when empty: the name a client asks for) */
		const struct config_pool *pool = cfg->autodb;
		print_section(out, "pools.*", pool_specs, POOL_KEY_COUNT, pool);
		for (size_t j = 0; j < pool->n_shards; j++) {
			snprintf(section, sizeof(section), "pools.*.shards.%d", pool->shards[j].index);
			print_section(out, section, shard_specs, SHARD_KEY_COUNT, &pool->shards[j]);
		}
	}
	for (size_t i = 0; i < cfg->n_user_settings; i++) {
		snprintf(section, sizeof(section), "users.%s", cfg->user_settings[i].name);
		print_section(out, section, uset_specs, USET_KEY_COUNT, &cfg->user_settings[i]);
	}
	if (cfg->n_peers > 0)
		fprintf(out, "\n[peers]\n");
	for (size_t i = 0; i < cfg->n_peers; i++) {
		/* a socket directory or abstract name keeps its ':' unbracketed:
		 * the port is after the last one */
		const char *h = cfg->peers[i].host;
		bool v6 = h[0] != '/' && h[0] != '@' && strchr(h, ':') != NULL;
		fprintf(out, "%d = %s%s%s:%d\n", cfg->peers[i].id, v6 ? "[" : "", h, v6 ? "]" : "",
			cfg->peers[i].port);
	}
}

/* ------------------------------------------------------------------ */
/* SET (SPEC §7)                                                        */

#define SET_FILE "SET"   /* stands for the file name in messages; cut off again */

/* The value as the ini would hold it: outer white space trimmed and, if it
 * is quoted the SQL way ('...', '' inside for '), unquoted. NULL on error,
 * with the reason in err. */
static char *set_unquote(const char *value, char *err, size_t errlen)
{
	const char *s = value;
	size_t n = strlen(value);
	trim(&s, &n);
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\n' || s[i] == '\r') {
			snprintf(err, errlen, "the value must be on one line");
			return NULL;
		}
	}
	char *out = malloc(n + 1);
	if (out == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (n == 0 || s[0] != '\'') {
		memcpy(out, s, n);
		out[n] = '\0';
		return out;
	}
	size_t used = 0;
	size_t i = 1;
	for (;;) {
		if (i >= n) {
			free(out);
			snprintf(err, errlen, "unterminated quoted value");
			return NULL;
		}
		if (s[i] == '\'') {
			if (i + 1 < n && s[i + 1] == '\'') {
				out[used++] = '\'';
				i += 2;
				continue;
			}
			if (i + 1 != n) {
				free(out);
				snprintf(err, errlen, "unexpected text after the closing quote");
				return NULL;
			}
			break;
		}
		out[used++] = s[i++];
	}
	out[used] = '\0';
	return out;
}

bool config_general_set(struct config *cfg, const char *key, const char *value, char *err, size_t errlen)
{
	return config_general_set_if(cfg, key, value, NULL, NULL, err, errlen);
}

static bool general_set(struct config *cfg, const char *key, const char *value, config_set_accept_fn accept,
			void *arg, char *err, size_t errlen);

/* SET of a PgBouncer setting on a configuration read from a pgbouncer.ini:
 * its value in PgBouncer's units, checked as in the file, set through the
 * pgcat keys it maps to. -1: key is not one of PgBouncer's settings. */
static int pgbouncer_set(struct config *cfg, const char *key, const char *value, config_set_accept_fn accept,
			 void *arg, char *err, size_t errlen)
{
	char *v = set_unquote(value, err, errlen);
	if (v == NULL)
		return 0;
	struct pgb_set set;
	int r = pgb_translate_set(cfg, key, v, &set, err, errlen);
	for (size_t i = 0; r == 1 && i < set.n; i++)
		if (!general_set(cfg, set.pairs[i].key, set.pairs[i].value, accept, arg, err, errlen))
			r = 0;
	if (r == 1 && !pgb_note_set(cfg, key, v)) {
		snprintf(err, errlen, "out of memory");
		r = 0;
	}
	free(v);
	return r;
}

bool config_general_set_if(struct config *cfg, const char *key, const char *value, config_set_accept_fn accept,
			   void *arg, char *err, size_t errlen)
{
	char scratch[1];
	if (err == NULL || errlen == 0) {
		err = scratch;
		errlen = sizeof(scratch);
	}
	err[0] = '\0';
	if (cfg == NULL || key == NULL || value == NULL) {
		snprintf(err, errlen, "missing key or value");
		return false;
	}
	/* A pgbouncer.ini's settings are SET under PgBouncer's names and
	 * units; pgcat's other keys as in pgcat.ini. */
	if (cfg->format == CONFIG_FORMAT_PGBOUNCER) {
		int r = pgbouncer_set(cfg, key, value, accept, arg, err, errlen);
		if (r >= 0)
			return r == 1;
	}
	return general_set(cfg, key, value, accept, arg, err, errlen);
}

static bool general_set(struct config *cfg, const char *key, const char *value, config_set_accept_fn accept,
			void *arg, char *err, size_t errlen)
{
	size_t idx = N_GENERAL_KEYS;
	for (size_t i = 0; i < N_GENERAL_KEYS; i++) {
		if (ci_equal(general_specs[i].name, key)) {
			idx = i;
			break;
		}
	}
	if (idx == N_GENERAL_KEYS) {
		snprintf(err, errlen, "unknown key \"%.*s%s\"", CONFIG_QUOTE_MAX, key,
			 strlen(key) > CONFIG_QUOTE_MAX ? "..." : "");
		return false;
	}
	const struct key_spec *k = &general_specs[idx];
	if (!general_info[idx].reloadable) {
		snprintf(err, errlen, "%s cannot be changed at run time; edit the file and restart", k->name);
		return false;
	}
	/* Its rules are read with the file: a new path alone would change
	 * nothing (RELOAD reads both). */
	if (strcmp(k->name, "auth_hba_file") == 0) {
		snprintf(err, errlen, "auth_hba_file cannot be SET: edit pgcat.ini or the hba file, then RELOAD");
		return false;
	}
	if (strcmp(k->name, "auth_ldap_options") == 0) {
		snprintf(err, errlen, "auth_ldap_options cannot be SET: edit the configuration file, then RELOAD");
		return false;
	}
	if (strcmp(k->name, "auth_ident_file") == 0) {
		snprintf(err, errlen, "auth_ident_file cannot be SET: edit pgcat.ini or the ident file, then RELOAD");
		return false;
	}
	char *v = set_unquote(value, err, errlen);
	if (v == NULL)
		return false;

	/* Parse into a shallow copy whose field k owns nothing yet, then run the
	 * load's whole-[general] checks on it; cfg changes only if all pass. */
	struct config trial = *cfg;
	detach_field(k, &trial.general);
	struct config_problems problems = { 0 };
	struct parser p = { .cfg = &trial, .problems = &problems, .file = SET_FILE, .one_set = true,
			    .general_section = "general" };
	set_value(&p, k, &trial.general, v, false);
	free(v);
	if (!p.oom && !config_problems_has(&problems, CONFIG_PROBLEM_ERROR))
		check_general(&p);
	if (!p.oom && !config_problems_has(&problems, CONFIG_PROBLEM_ERROR))
		check_auth_user(&p);
	bool ok = !p.oom && !config_problems_has(&problems, CONFIG_PROBLEM_ERROR);
	bool refused = ok && accept && !accept(&trial, arg, err, errlen);
	if (refused) {
		free_field(k, &trial.general);
		ok = false;
	} else if (ok) {
		free_field(k, &cfg->general);
		cfg->general = trial.general;
	} else {
		free_field(k, &trial.general);
		const char *msg = "out of memory";
		for (size_t i = 0; !p.oom && i < problems.n; i++) {
			if (problems.items[i].kind == CONFIG_PROBLEM_ERROR) {
				msg = problems.items[i].message;
				break;
			}
		}
		/* "SET: [general] key: why" -> "key: why" */
		static const char *const prefixes[] = { SET_FILE ": ", "[general] " };
		for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
			if (strncmp(msg, prefixes[i], strlen(prefixes[i])) == 0)
				msg += strlen(prefixes[i]);
		snprintf(err, errlen, "%s", msg);
	}
	config_problems_free(&problems);
	return ok;
}
