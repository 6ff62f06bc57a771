/* SPDX-License-Identifier: MIT */
/*
 * config_load: reads pgcat.ini (SPEC §2) with inih into one immutable
 * struct config, naming file, line, section and key in each problem: the
 * file's text, its lines and sections, each key handed to config_value.c,
 * the defaults, the checks across keys (config_check.c) once the whole file
 * is read, the users of auth_file, and config_free. It keeps no state
 * between calls, opens no sockets and knows nothing of the running pools:
 * building the live topology from the snapshot and swapping it on reload
 * belong elsewhere. The top of the config room: nothing of the room calls
 * it.
 *
 * How the line numbers are known: inih reads lines through our reader and
 * calls the key handler right after the line it came from, so the reader's
 * line counter is the key's line. The reader also looks at each line
 * before inih does, to track the full section name (inih cuts it at 49
 * characters), to tell an indented continuation line from a new key, and
 * to notice lines inih rejects without telling us which.
 */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h and comes
 * first in the include path. */
#include "config.h"
#include "config_internal.h"

#include "auth_file.h"
#include "hba.h"
#include "ldap_opts.h"
#include "ident.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#define CONFIG_MAX_FILE_SIZE (16 * 1024 * 1024)

/* ------------------------------------------------------------------ */
/* Sections                                                             */

static void unknown_key(struct parser *p, const struct key_spec *specs, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (ci_equal(specs[i].name, name)) {
			problem(p, CONFIG_PROBLEM_UNKNOWN, p->lineno, p->section_name, name,
				"unknown key (did you mean %s?)", specs[i].name);
			return;
		}
	}
	problem(p, CONFIG_PROBLEM_UNKNOWN, p->lineno, p->section_name, name, "unknown key");
}

static bool valid_object_name(struct parser *p, const char *what, size_t n)
{
	if (n == 0) {
		line_error(p, NULL, "empty %s name", what);
		return false;
	}
	if (n > CONFIG_MAX_NAME) {
		line_error(p, NULL, "%s name is longer than %d bytes, PostgreSQL's limit for names", what,
			   CONFIG_MAX_NAME);
		return false;
	}
	return true;
}

static bool find_or_add_pool(struct parser *p, const char *name, size_t n)
{
	struct config *cfg = p->cfg;
	for (size_t i = 0; i < cfg->n_pools; i++) {
		if (strlen(cfg->pools[i].name) == n && strncmp(cfg->pools[i].name, name, n) == 0) {
			p->pool = i;
			return true;
		}
	}
	char *copy = p_strndup(p, name, n);
	if (copy == NULL)
		return false;
	if (!p_grow(p, &p->pools, cfg->n_pools, sizeof(*p->pools)) ||
	    !p_grow(p, &cfg->pools, cfg->n_pools, sizeof(*cfg->pools))) {
		free(copy);
		return false;
	}
	struct config_pool *pool = &cfg->pools[cfg->n_pools];
	pool->name = copy;
	p->pools[cfg->n_pools].line = p->lineno;
	p->pool = cfg->n_pools++;
	apply_defaults(p, pool_specs, POOL_KEY_COUNT, pool);
	return true;
}

/* Shard index of the pool's layout (next: the one a reshard moves it to). */
static bool find_or_add_shard(struct parser *p, int index, bool next)
{
	struct config_pool *pool = &p->cfg->pools[p->pool];
	struct pool_meta *meta = &p->pools[p->pool];
	struct config_shard **shards = next ? &pool->next_shards : &pool->shards;
	struct shard_meta **metas = next ? &meta->next_shards : &meta->shards;
	size_t *n = next ? &pool->n_next_shards : &pool->n_shards;
	for (size_t i = 0; i < *n; i++) {
		if ((*shards)[i].index == index) {
			p->shard = i;
			return true;
		}
	}
	if (!p_grow(p, metas, *n, sizeof(**metas)) || !p_grow(p, shards, *n, sizeof(**shards)))
		return false;
	(*shards)[*n].index = index;
	(*metas)[*n].line = p->lineno;
	p->shard = (*n)++;
	return true;
}

static bool find_or_add_user(struct parser *p, const char *name)
{
	struct config_pool *pool = &p->cfg->pools[p->pool];
	struct pool_meta *meta = &p->pools[p->pool];
	for (size_t i = 0; i < pool->n_users; i++) {
		if (strcmp(pool->users[i].name, name) == 0) {
			p->user = i;
			return true;
		}
	}
	char *copy = p_strdup(p, name);
	if (copy == NULL)
		return false;
	if (!p_grow(p, &meta->users, pool->n_users, sizeof(*meta->users)) ||
	    !p_grow(p, &pool->users, pool->n_users, sizeof(*pool->users))) {
		free(copy);
		return false;
	}
	struct config_user *user = &pool->users[pool->n_users];
	user->name = copy;
	meta->users[pool->n_users].line = p->lineno;
	p->user = pool->n_users++;
	apply_defaults(p, user_specs, USER_KEY_COUNT, user);
	return true;
}

static bool find_or_add_user_settings(struct parser *p, const char *name)
{
	struct config *cfg = p->cfg;
	for (size_t i = 0; i < cfg->n_user_settings; i++) {
		if (strcmp(cfg->user_settings[i].name, name) == 0) {
			p->uset = i;
			return true;
		}
	}
	char *copy = p_strdup(p, name);
	if (copy == NULL)
		return false;
	if (!p_grow(p, &p->usets, cfg->n_user_settings, sizeof(*p->usets)) ||
	    !p_grow(p, &cfg->user_settings, cfg->n_user_settings, sizeof(*cfg->user_settings))) {
		free(copy);
		return false;
	}
	struct config_user_settings *us = &cfg->user_settings[cfg->n_user_settings];
	us->name = copy;
	p->usets[cfg->n_user_settings].line = p->lineno;
	p->uset = cfg->n_user_settings++;
	apply_defaults(p, uset_specs, USET_KEY_COUNT, us);
	return true;
}

/* [pools.NAME], [pools.NAME.shards.N], [pools.NAME.users.USER],
 * [pools.NAME.next], [pools.NAME.next.shards.N] */
static enum section_kind enter_pools_section(struct parser *p, const char *rest)
{
	const char *dot = strchr(rest, '.');
	size_t name_len = dot ? (size_t)(dot - rest) : strlen(rest);
	const char *sub = dot ? dot + 1 : NULL;
	enum section_kind kind = SECTION_POOL;
	int64_t index = 0;
	bool next = false;

	if (sub != NULL && strcmp(sub, "next") == 0) {
		kind = SECTION_NEXT;
	} else if (sub != NULL && strncmp(sub, "next.shards.", 12) == 0) {
		next = true;
		sub += 5;   /* (as [pools.NAME.shards.N] from here) */
	}
	if (kind == SECTION_NEXT) {
		/* (no keys of its own yet: it heads its shards) */
	} else if (sub != NULL && strncmp(sub, "shards.", 7) == 0) {
		const char *digits = sub + 7;
		if (!parse_int64(digits, &index) || index < 0 || index > CONFIG_MAX_SHARD || digits[0] == '+' ||
		    digits[0] == '-') {
			line_error(p, NULL, "shard number must be an integer between 0 and %d", CONFIG_MAX_SHARD);
			return SECTION_IGNORED;
		}
		kind = next ? SECTION_NEXT_SHARD : SECTION_SHARD;
	} else if (sub != NULL && strncmp(sub, "users.", 6) == 0) {
		if (!valid_object_name(p, "user", strlen(sub + 6)))
			return SECTION_IGNORED;
		kind = SECTION_USER;
	} else if (sub != NULL) {
		problem(p, CONFIG_PROBLEM_UNKNOWN, p->lineno, p->section_name, NULL,
			"unknown section; pool names cannot contain '.', and the parts of a pool are "
			"[pools.NAME.shards.N], [pools.NAME.users.USER], [pools.NAME.next] and "
			"[pools.NAME.next.shards.N]");
		return SECTION_IGNORED;
	}
	if (!valid_object_name(p, "pool", name_len))
		return SECTION_IGNORED;
	if (!find_or_add_pool(p, rest, name_len))
		return SECTION_IGNORED;
	if ((kind == SECTION_SHARD || kind == SECTION_NEXT_SHARD) && !find_or_add_shard(p, (int)index, next))
		return SECTION_IGNORED;
	if (kind == SECTION_NEXT && p->pools[p->pool].next_line == 0)
		p->pools[p->pool].next_line = p->lineno;
	if (kind == SECTION_USER && !find_or_add_user(p, sub + 6))
		return SECTION_IGNORED;
	return kind;
}

static void enter_section(struct parser *p, const char *name, size_t n)
{
	free(p->section_name);
	p->section_name = p_strndup(p, name, n);
	p->have_prev = false;
	p->last_key[0] = '\0';
	p->last_spec = NULL;
	if (p->section_name == NULL) {
		p->section = SECTION_IGNORED;
		return;
	}
	if (strcmp(p->section_name, "general") == 0) {
		p->section = SECTION_GENERAL;
	} else if (strcmp(p->section_name, "peers") == 0) {
		p->section = SECTION_PEERS;
		if (p->peers_line == 0)
			p->peers_line = p->lineno;
	} else if (strncmp(p->section_name, "pools.", 6) == 0) {
		p->section = enter_pools_section(p, p->section_name + 6);
	} else if (strncmp(p->section_name, "users.", 6) == 0) {
		p->section = valid_object_name(p, "user", strlen(p->section_name + 6)) &&
				     find_or_add_user_settings(p, p->section_name + 6)
			     ? SECTION_USER_SETTINGS
			     : SECTION_IGNORED;
	} else {
		problem(p, CONFIG_PROBLEM_UNKNOWN, p->lineno, p->section_name, NULL,
			"unknown section; expected [general], [pools.NAME], [pools.NAME.shards.N], "
			"[pools.NAME.users.USER], [users.NAME] or [peers]");
		p->section = SECTION_IGNORED;
	}
}

/* ------------------------------------------------------------------ */
/* Keys                                                                 */

/* Set a key of a table-driven section, catching duplicates. */
static void table_key(struct parser *p, const struct key_spec *specs, size_t n, int *lines, void *base,
		      const char *name, const char *value)
{
	size_t i;
	const struct key_spec *k = find_spec(specs, n, name, &i);
	if (k == NULL) {
		unknown_key(p, specs, n, name);
		return;
	}
	p->last_spec = k;
	if (lines[i] != 0) {
		line_error(p, name, "duplicate key (first set on line %d)", lines[i]);
		p->last_key[0] = '\0';  /* its continuation lines belong to the ignored duplicate */
		return;
	}
	lines[i] = p->lineno;
	set_value(p, k, base, value, false);
}

static void peer_key(struct parser *p, const char *name, const char *value)
{
	struct config *cfg = p->cfg;
	int64_t id;
	if (!parse_int64(name, &id) || id < 1 || id > CONFIG_MAX_PEER_ID) {
		line_error(p, name, "peer id must be an integer between 1 and %d", CONFIG_MAX_PEER_ID);
		return;
	}
	for (size_t i = 0; i < cfg->n_peers; i++) {
		if (cfg->peers[i].id == id) {
			line_error(p, name, "duplicate peer id (first set on line %d)", p->peer_line[i]);
			return;
		}
	}
	const char *host;
	size_t host_len;
	int port;
	char why[160];
	if (!parse_endpoint(value, strlen(value), false, &host, &host_len, &port, NULL, why, sizeof(why))) {
		char got[CONFIG_QUOTE_MAX + 16];
		quote_value(value, 0, got, sizeof(got));
		line_error(p, name, "%s, got %s", why, got);
		return;
	}
	char *copy = p_strndup(p, host, host_len);
	if (copy == NULL)
		return;
	if (!p_grow(p, &p->peer_line, cfg->n_peers, sizeof(*p->peer_line)) ||
	    !p_grow(p, &cfg->peers, cfg->n_peers, sizeof(*cfg->peers))) {
		free(copy);
		return;
	}
	p->peer_line[cfg->n_peers] = p->lineno;
	cfg->peers[cfg->n_peers++] = (struct config_peer){ .id = (int)id, .host = copy, .port = port };
}

static void *section_base(struct parser *p)
{
	struct config *cfg = p->cfg;
	switch (p->section) {
	case SECTION_GENERAL:
		return &cfg->general;
	case SECTION_POOL:
		return &cfg->pools[p->pool];
	case SECTION_SHARD:
		return &cfg->pools[p->pool].shards[p->shard];
	case SECTION_NEXT_SHARD:
		return &cfg->pools[p->pool].next_shards[p->shard];
	case SECTION_USER:
		return &cfg->pools[p->pool].users[p->user];
	case SECTION_USER_SETTINGS:
		return &cfg->user_settings[p->uset];
	case SECTION_NONE:
	case SECTION_NEXT:
	case SECTION_PEERS:
	case SECTION_IGNORED:
		return NULL;
	}
	return NULL;
}

static void continue_list(struct parser *p, const char *value)
{
	void *base = section_base(p);
	if (p->last_spec != NULL && is_list(p->last_spec->kind) && base != NULL) {
		if (strchr(value, '=') != NULL) {
			line_error(p, p->last_key, "this indented line continues the list %s but looks like a "
				   "new key; remove the indentation", p->last_key);
			return;
		}
		set_value(p, p->last_spec, base, value, true);
		return;
	}
	line_error(p, p->last_key, "this indented line continues the value of %s, but only lists "
		   "(listen_addr, sharded_tables, servers) may span lines; remove the indentation "
		   "if it starts a new key", p->last_key);
	p->last_key[0] = '\0';  /* one report per key */
}

static void continue_value(struct parser *p, const char *raw)
{
	if (p->last_key[0] == '\0')
		return;  /* continues an unknown, duplicate or ignored key: already reported */
	/* Some inih builds leave inline comments on continuation lines: cut them here. */
	size_t n = 0;
	bool was_space = false;
	while (raw[n] != '\0' && !(was_space && raw[n] == ';')) {
		was_space = is_space(raw[n]);
		n++;
	}
	trim(&raw, &n);
	char *value = p_strndup(p, raw, n);
	if (value == NULL)
		return;
	continue_list(p, value);
	free(value);
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
	struct parser *p = user;
	struct config *cfg = p->cfg;
	(void)section;  /* ours is complete; inih's is cut at 49 characters */
	p->handled = true;
	if (p->oom)
		return 1;
	if (p->line_kind == LINE_CONTINUATION) {
		continue_value(p, value);
		return 1;
	}
	p->have_prev = true;
	p->last_spec = NULL;
	snprintf(p->last_key, sizeof(p->last_key), "%s", name);
	if (name[0] == '\0') {
		line_error(p, NULL, "missing key name before '='");
		p->last_key[0] = '\0';
		return 1;
	}
	switch (p->section) {
	case SECTION_NONE:
		problem(p, CONFIG_PROBLEM_UNKNOWN, p->lineno, NULL, name,
			"key outside any section; put it under [general] or another section");
		p->last_key[0] = '\0';
		break;
	case SECTION_GENERAL:
		table_key(p, general_specs, N_GENERAL_KEYS, p->general_line, &cfg->general, name, value);
		break;
	case SECTION_POOL:
		table_key(p, pool_specs, POOL_KEY_COUNT, p->pools[p->pool].key_line, &cfg->pools[p->pool],
			  name, value);
		break;
	case SECTION_SHARD:
		table_key(p, shard_specs, SHARD_KEY_COUNT, p->pools[p->pool].shards[p->shard].key_line,
			  &cfg->pools[p->pool].shards[p->shard], name, value);
		break;
	case SECTION_NEXT_SHARD:
		table_key(p, shard_specs, SHARD_KEY_COUNT, p->pools[p->pool].next_shards[p->shard].key_line,
			  &cfg->pools[p->pool].next_shards[p->shard], name, value);
		break;
	case SECTION_NEXT:
		problem(p, CONFIG_PROBLEM_UNKNOWN, p->lineno, p->section_name, name,
			"unknown key: [pools.NAME.next] has no keys of its own; its shards are "
			"[pools.NAME.next.shards.N] sections");
		p->last_key[0] = '\0';
		break;
	case SECTION_USER:
		table_key(p, user_specs, USER_KEY_COUNT, p->pools[p->pool].users[p->user].key_line,
			  &cfg->pools[p->pool].users[p->user], name, value);
		break;
	case SECTION_USER_SETTINGS:
		table_key(p, uset_specs, USET_KEY_COUNT, p->usets[p->uset].key_line, &cfg->user_settings[p->uset],
			  name, value);
		break;
	case SECTION_PEERS:
		peer_key(p, name, value);
		break;
	case SECTION_IGNORED:
		p->last_key[0] = '\0';
		break;
	}
	if (p->last_spec == NULL && p->section != SECTION_PEERS)
		p->last_key[0] = '\0';
	return 1;
}

/* ------------------------------------------------------------------ */
/* Reading lines                                                        */

/* inih rejected the last line without a word to us: say so. */
static void finish_line(struct parser *p)
{
	if (p->line_kind != LINE_NONE && !p->handled) {
		problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL,
			"expected \"key = value\", a [section] or a comment, got \"%s\"", p->snippet);
		if (p->first_syntax_line == 0)
			p->first_syntax_line = p->lineno;
	}
	p->line_kind = LINE_NONE;
}

/* Look at a line as inih will, before it does. */
static void classify(struct parser *p, const char *line)
{
	const char *s = line;
	while (is_space(*s))
		s++;
	size_t len = strlen(s);
	while (len > 0 && is_space(s[len - 1]))
		len--;
	snprintf(p->snippet, sizeof(p->snippet), "%.*s%s", len > 40 ? 40 : (int)len, s, len > 40 ? "..." : "");
	p->handled = false;

	if (*s == '\0' || *s == ';' || *s == '#') {
		p->line_kind = LINE_NONE;
	} else if (s > line && p->have_prev) {
		p->line_kind = LINE_CONTINUATION;
	} else if (*s == '[') {
		/* Same rule as inih: the name ends at ']' or at an inline comment. */
		const char *e = s + 1;
		bool was_space = false;
		while (*e != '\0' && *e != ']' && !(was_space && *e == ';')) {
			was_space = is_space(*e);
			e++;
		}
		p->line_kind = LINE_NONE;
		if (*e != ']') {
			problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL,
				"section header \"%s\" has no closing ']'", p->snippet);
			if (p->first_syntax_line == 0)
				p->first_syntax_line = p->lineno;
			free(p->section_name);
			p->section_name = NULL;
			p->section = SECTION_IGNORED;
			p->last_key[0] = '\0';
			return;
		}
		const char *name = s + 1;
		size_t n = (size_t)(e - name);
		trim(&name, &n);
		enter_section(p, name, n);
		const char *after = e + 1;
		while (is_space(*after))
			after++;
		if (*after != '\0' && *after != ';' && *after != '#')
			line_error(p, NULL, "unexpected text after ']'");
	} else {
		p->line_kind = LINE_KEY;
	}
}

static char *read_line(char *buf, int size, void *stream)
{
	struct parser *p = stream;
	finish_line(p);
	if (*p->pos == '\0' || size < 4)
		return NULL;
	const char *start = p->pos;
	const char *nl = strchr(start, '\n');
	size_t len = nl ? (size_t)(nl - start) : strlen(start);
	p->pos = nl ? nl + 1 : start + len;
	p->lineno++;
	if (len > 0 && start[len - 1] == '\r')
		len--;
	if (p->lineno == 1 && len >= 3 && memcmp(start, "\xEF\xBB\xBF", 3) == 0) {
		start += 3;
		len -= 3;
	}
	/* inih splits longer lines; refuse them instead. */
	if (len > (size_t)size - 3) {
		problem(p, CONFIG_PROBLEM_ERROR, p->lineno, NULL, NULL,
			"line is longer than %d characters; split long lists over indented continuation lines",
			size - 3);
		if (p->first_syntax_line == 0)
			p->first_syntax_line = p->lineno;
		p->line_kind = LINE_NONE;
		strcpy(buf, "\n");
		return buf;
	}
	memcpy(buf, start, len);
	buf[len] = '\n';
	buf[len + 1] = '\0';
	classify(p, buf);
	return buf;
}

/* ------------------------------------------------------------------ */
/* Loading                                                              */

static void parser_free(struct parser *p)
{
	for (size_t i = 0; p->pools != NULL && i < p->cfg->n_pools; i++) {
		free(p->pools[i].shards);
		free(p->pools[i].next_shards);
		free(p->pools[i].users);
	}
	free(p->pools);
	free(p->peer_line);
	free(p->usets);
	for (size_t i = 0; i < p->n_files; i++)
		free(p->files[i]);
	free(p->files);
	free(p->section_name);
}

/* ---- auth_file (SPEC §2): users for pools without users sections ---- */

#define AUTH_FILE_MAX_SIZE (16 * 1024 * 1024)

struct bad_line_ctx {
	struct parser *p;
	const char *path;
};

static void auth_file_bad_line(void *arg, int line, const char *why)
{
	struct bad_line_ctx *b = arg;
	char *msg = format("%s:%d: line skipped: %s", b->path, line, why);
	if (msg == NULL) {
		b->p->oom = true;
		return;
	}
	add_problem(b->p->problems, CONFIG_PROBLEM_WARNING, line, msg, &b->p->oom);
}

/* The file a [general] key names, read whole into *text (*len bytes) with
 * its path in *path, both the caller's to free. A relative path is taken
 * from pgcat.ini's directory; in a pgbouncer.ini from the working
 * directory, as PgBouncer opens auth_file, auth_hba_file and
 * auth_ident_file (so that its files keep working unchanged). false:
 * nothing read; the problem (naming the key and the file) is recorded, or
 * p->oom set. */
static bool read_key_file(struct parser *p, const char *key, const char *value, char **path, char **text,
			  size_t *len)
{
	*text = NULL;
	*path = config_relative_path(p->cfg->pgbouncer ? NULL : p->cfg->path, value);
	if (*path == NULL) {
		p->oom = true;
		return false;
	}
	char *err = NULL;
	*text = config_read_file(*path, AUTH_FILE_MAX_SIZE, len, &err);
	if (*text != NULL)
		return true;
	char *msg = err ? format("%s: [%s] %s: %s: %s", p->file, p->general_section, key, *path, err) : NULL;
	free(err);
	if (msg == NULL)
		p->oom = true;
	else
		add_problem(p->problems, CONFIG_PROBLEM_ERROR, 0, msg, &p->oom);
	free(*path);
	*path = NULL;
	return false;
}

/* Every user of the file becomes a user of each pool that has no users
 * section, as if written there with `password = <secret>`. auth_user's
 * entry is also kept aside (cfg->auth_user_secret), for auth_query's
 * logins to pools that have users sections. */
static void load_auth_file(struct parser *p)
{
	struct config *cfg = p->cfg;
	/* Pools without users sections take their users from it, the
	 * console's admin_users and stats_users their secrets, and auth_user
	 * its own. */
	bool wanted = (cfg->general.admin_users && cfg->general.admin_users[0]) ||
		      (cfg->general.stats_users && cfg->general.stats_users[0]) ||
		      (cfg->general.auth_user && cfg->general.auth_user[0]);
	for (size_t i = 0; i < cfg->n_pools; i++)
		wanted |= cfg->pools[i].n_users == 0 || cfg->pools[i].auth_user != NULL ||
			  (cfg->pools[i].server_username != NULL && cfg->pools[i].server_password == NULL);
	if (!cfg->general.auth_file || !cfg->general.auth_file[0] || !wanted)
		return;
	char *path, *text;
	size_t len = 0;
	if (!read_key_file(p, "auth_file", cfg->general.auth_file, &path, &text, &len))
		return;
	struct auth_file af;
	struct bad_line_ctx ctx = { p, path };
	if (!auth_file_parse(text, len, &af, auth_file_bad_line, &ctx)) {
		p->oom = true;
		free(text);
		free(path);
		return;
	}
	free(text);
	const struct auth_file_entry *au = cfg->general.auth_user[0] ? auth_file_find(&af, cfg->general.auth_user) : NULL;
	if (au && (!(cfg->auth_user_secret = p_strdup(p, au->secret)) ||
		   !(cfg->auth_user_secret_of = p_strdup(p, au->user))))
		p->oom = true;
	for (size_t i = 0; i < cfg->n_pools && !p->oom; i++) {
		struct config_pool *pool = &cfg->pools[i];
		if (pool->n_users != 0)
			continue;
		for (size_t k = 0; k < af.n && !p->oom; k++) {
			if (!p_grow(p, &pool->users, pool->n_users, sizeof(*pool->users)))
				break;
			struct config_user *u = &pool->users[pool->n_users];
			apply_defaults(p, user_specs, USER_KEY_COUNT, u);
			u->name = p_strdup(p, af.entries[k].user);
			free(u->password);
			u->password = p_strdup(p, af.entries[k].secret);
			u->from_auth_file = true;
			if (u->name == NULL || u->password == NULL) {
				free(u->name);
				free(u->password);
				break;
			}
			pool->n_users++;
		}
	}
	/* A pool's forced server_username without a server_password logs in
	 * with that role's line of the file, as PgBouncer's forced user. */
	for (size_t i = 0; i < cfg->n_pools && !p->oom; i++) {
		struct config_pool *pool = &cfg->pools[i];
		const struct auth_file_entry *e = pool->server_username && !pool->server_password
							  ? auth_file_find(&af, pool->server_username)
							  : NULL;
		if (e != NULL)
			pool->server_password = p_strdup(p, e->secret);
	}
	/* Kept for the admin console (config_console_secret) and for pools'
	 * own auth_user (auth_query.c). */
	cfg->auth_users = p->oom ? NULL : malloc(sizeof *cfg->auth_users);
	if (cfg->auth_users != NULL)
		*cfg->auth_users = af;
	else
		auth_file_free(&af);
	free(path);
}

/* A pool's forced server_username is a user of the pool, as PgBouncer's
 * forced user has a pool of its own that every client of the database
 * shares: made here (server_only) when no users section or auth_file
 * line names it. */
static void add_forced_users(struct parser *p)
{
	struct config *cfg = p->cfg;
	for (size_t i = 0; i < cfg->n_pools && !p->oom; i++) {
		struct config_pool *pool = &cfg->pools[i];
		if (!pool->server_username || !pool->server_username[0] ||
		    config_find_user(pool, pool->server_username))
			continue;
		if (!p_grow(p, &pool->users, pool->n_users, sizeof(*pool->users)))
			return;
		struct config_user *u = &pool->users[pool->n_users];
		apply_defaults(p, user_specs, USER_KEY_COUNT, u);
		u->name = p_strdup(p, pool->server_username);
		u->server_only = true;
		if (u->name == NULL)
			return;
		pool->n_users++;
	}
}

/* ---- auth_hba_file (SPEC §2, §3): which method per connection ---- */

struct hba_ctx {
	struct parser *p;
	const char *path;
};

/* A bad line rejects the whole file: the configuration fails to load. */
static void hba_bad_line(void *arg, int line, const char *why)
{
	struct hba_ctx *h = arg;
	char *msg = format("%s: [general] auth_hba_file: %s:%d: %s", h->p->file, h->path, line, why);
	if (msg == NULL)
		h->p->oom = true;
	else
		add_problem(h->p->problems, CONFIG_PROBLEM_ERROR, 0, msg, &h->p->oom);
}

static void hba_warning(struct hba_ctx *h, int line, const char *why)
{
	char *msg = format("%s: [general] auth_hba_file: %s:%d: %s", h->p->file, h->path, line, why);
	if (msg == NULL)
		h->p->oom = true;
	else
		add_problem(h->p->problems, CONFIG_PROBLEM_WARNING, 0, msg, &h->p->oom);
}

/* What the rest of the configuration makes of the rules: cert needs a
 * verified client certificate, hostssl needs client TLS, map= a map of
 * auth_ident_file. */
static void check_hba_rules(struct hba_ctx *h, const struct hba *rules)
{
	const struct config_general *g = &h->p->cfg->general;
	const struct ident *ident = h->p->cfg->ident;
	for (size_t i = 0; i < rules->n; i++) {
		const struct hba_rule *r = &rules->rules[i];
		if (r->map && !ident)
			hba_bad_line(h, r->line, "map= needs auth_ident_file (the file of the user name maps)");
		else if (r->map && !ident_has_map(ident, r->map)) {
			char *why = format("map \"%s\" is not in auth_ident_file", r->map);
			if (why == NULL)
				h->p->oom = true;
			else
				hba_bad_line(h, r->line, why);
			free(why);
		}
	}
	if (rules->n == 0) {
		char *msg = format("%s: [general] auth_hba_file: %s: no rules: every login is refused", h->p->file, h->path);
		if (msg == NULL)
			h->p->oom = true;
		else
			add_problem(h->p->problems, CONFIG_PROBLEM_WARNING, 0, msg, &h->p->oom);
	}
	for (size_t i = 0; i < rules->n; i++) {
		const struct hba_rule *r = &rules->rules[i];
		/* A pgbouncer.ini: PgBouncer asks a client for a certificate
		 * whenever client_tls_ca_file is set (verified if sent), so its
		 * cert lines hold with any client_tls_sslmode; without a CA
		 * none can succeed, which PgBouncer loads all the same. */
		if (r->method == HBA_CERT && h->p->cfg->pgbouncer) {
			if (!g->client_tls_ca_file || !g->client_tls_ca_file[0])
				hba_warning(h, r->line, "cert line never lets a login in: no client_tls_ca_file to "
							"check a client certificate against");
		} else if (r->method == HBA_CERT && g->client_tls_sslmode < TLS_MODE_VERIFY_CA)
			hba_bad_line(h, r->line, "method cert needs client_tls_sslmode verify-ca or verify-full "
						 "(a client certificate checked against client_tls_ca_file)");
		else if (r->type == HBA_HOSTSSL && g->client_tls_sslmode == TLS_MODE_DISABLE) {
			char *msg = format("%s: [general] auth_hba_file: %s:%d: hostssl line never matches: "
					   "client_tls_sslmode is disable", h->p->file, h->path, r->line);
			if (msg == NULL)
				h->p->oom = true;
			else
				add_problem(h->p->problems, CONFIG_PROBLEM_WARNING, 0, msg, &h->p->oom);
		}
	}
}

static void load_hba_file(struct parser *p)
{
	struct config *cfg = p->cfg;
	if (!cfg->general.auth_hba_file || !cfg->general.auth_hba_file[0])
		return;
	char *path, *text;
	size_t len = 0;
	if (!read_key_file(p, "auth_hba_file", cfg->general.auth_hba_file, &path, &text, &len))
		return;
	struct hba_ctx ctx = { p, path };
	struct hba *rules = calloc(1, sizeof *rules);
	if (rules == NULL) {
		p->oom = true;
	} else {
		enum hba_parse_result r = hba_parse_flags(text, len, rules, hba_bad_line, &ctx,
							  cfg->pgbouncer ? HBA_PARSE_CERT_ON_HOST | HBA_PARSE_SAME_FAMILY : 0);
		if (r == HBA_PARSE_NOMEM)
			p->oom = true;
		if (r == HBA_PARSE_OK) {
			check_hba_rules(&ctx, rules);
			cfg->hba = rules;
			rules = NULL;
		}
	}
	free(rules);
	free(text);
	free(path);
}

/* ---- auth_ident_file: user name maps for hba lines' map= ---- */

static void ident_bad_line(void *arg, int line, const char *why)
{
	struct hba_ctx *h = arg;
	char *msg = format("%s: [general] auth_ident_file: %s:%d: %s", h->p->file, h->path, line, why);
	if (msg == NULL)
		h->p->oom = true;
	else
		add_problem(h->p->problems, CONFIG_PROBLEM_ERROR, 0, msg, &h->p->oom);
}

/* Read before auth_hba_file, whose map= names must be among its maps. */
static void load_ident_file(struct parser *p)
{
	struct config *cfg = p->cfg;
	if (!cfg->general.auth_ident_file || !cfg->general.auth_ident_file[0])
		return;
	char *path, *text;
	size_t len = 0;
	if (!read_key_file(p, "auth_ident_file", cfg->general.auth_ident_file, &path, &text, &len))
		return;
	struct hba_ctx ctx = { p, path };
	struct ident *maps = calloc(1, sizeof *maps);
	if (maps == NULL) {
		p->oom = true;
	} else {
		enum ident_parse_result r = ident_parse(text, len, maps, ident_bad_line, &ctx);
		if (r == IDENT_PARSE_NOMEM)
			p->oom = true;
		if (r == IDENT_PARSE_OK) {
			cfg->ident = maps;
			maps = NULL;
		}
	}
	free(maps);
	free(text);
	free(path);
}

/* ---- auth_ldap_options: auth_type = ldap's options ---- */

static void load_ldap_options(struct parser *p)
{
	struct config *cfg = p->cfg;
	const char *s = cfg->general.auth_ldap_options;
	if (!s || !s[0])
		return;   /* (auth_type = ldap without it: check_general's error) */
	struct ldap_opts *o = calloc(1, sizeof *o);
	char why[LDAP_OPTS_WHY_MAX];
	if (o == NULL) {
		p->oom = true;
		return;
	}
	if (!ldap_opts_parse_string(s, o, why, sizeof why)) {
		free(o);
		if (strcmp(why, "out of memory") == 0) {
			p->oom = true;
			return;
		}
		char *msg = format("%s: [general] auth_ldap_options: %s", p->file, why);
		if (msg == NULL)
			p->oom = true;
		else
			add_problem(p->problems, CONFIG_PROBLEM_ERROR, 0, msg, &p->oom);
		return;
	}
	cfg->ldap = o;
}

static void pool_fields_free(struct config_pool *pool)
{
	free(pool->name);
	free_fields(pool_specs, POOL_KEY_COUNT, pool);
	for (size_t j = 0; j < pool->n_shards; j++)
		free_fields(shard_specs, SHARD_KEY_COUNT, &pool->shards[j]);
	free(pool->shards);
	for (size_t j = 0; j < pool->n_next_shards; j++)
		free_fields(shard_specs, SHARD_KEY_COUNT, &pool->next_shards[j]);
	free(pool->next_shards);
	for (size_t j = 0; j < pool->n_users; j++) {
		free(pool->users[j].name);
		free_fields(user_specs, USER_KEY_COUNT, &pool->users[j]);
	}
	free(pool->users);
}

/* The `*` pool, read and checked with the others, leaves them: it is the
 * template of databases made at login, not one itself. */
static bool detach_autodb(struct config *cfg)
{
	for (size_t i = 0; i < cfg->n_pools; i++) {
		if (strcmp(cfg->pools[i].name, "*") != 0)
			continue;
		cfg->autodb = malloc(sizeof(*cfg->autodb));
		if (cfg->autodb == NULL)
			return false;
		*cfg->autodb = cfg->pools[i];
		memmove(&cfg->pools[i], &cfg->pools[i + 1], (cfg->n_pools - i - 1) * sizeof(*cfg->pools));
		cfg->n_pools--;
		return true;
	}
	return true;
}

static struct config *load_text(const char *text, const char *file, struct config_problems *problems)
{
	struct config_problems local = { 0 };
	if (problems == NULL)
		problems = &local;
	struct parser p = { .problems = problems, .file = file, .pos = text, .general_section = "general" };
	p.cfg = calloc(1, sizeof(*p.cfg));
	if (p.cfg == NULL) {
		p.oom = true;
	} else {
		p.cfg->path = p_strdup(&p, file);
		apply_defaults(&p, general_specs, N_GENERAL_KEYS, &p.cfg->general);
		if (pgb_detect(text)) {
			/* A pgbouncer.ini: its own reader, the same checks after. */
			pgb_load(&p, text);
		} else {
			int rc = ini_parse_stream(read_line, &p, on_key, &p);
			finish_line(&p);
			if (rc == -2)
				p.oom = true;
			else if (rc > 0 && p.first_syntax_line == 0)
				problem(&p, CONFIG_PROBLEM_ERROR, rc, NULL, NULL, "syntax error");
		}
		if (!p.oom)
			check_all(&p);
		if (!p.oom && !config_problems_has(problems, CONFIG_PROBLEM_ERROR))
			load_auth_file(&p);
		if (!p.oom && !config_problems_has(problems, CONFIG_PROBLEM_ERROR))
			add_forced_users(&p);
		if (!p.oom && !config_problems_has(problems, CONFIG_PROBLEM_ERROR))
			load_ident_file(&p);
		if (!p.oom && !config_problems_has(problems, CONFIG_PROBLEM_ERROR))
			load_hba_file(&p);
		if (!p.oom && !config_problems_has(problems, CONFIG_PROBLEM_ERROR))
			load_ldap_options(&p);
		if (!p.oom && !config_problems_has(problems, CONFIG_PROBLEM_ERROR))
			check_auth_user(&p);
		parser_free(&p);
		if (!p.oom && !config_problems_has(problems, CONFIG_PROBLEM_ERROR) && !detach_autodb(p.cfg))
			p.oom = true;
	}
	if (p.oom) {
		bool ignored = false;
		add_problem(problems, CONFIG_PROBLEM_ERROR, 0, format("%s: out of memory", file), &ignored);
	}
	struct config *cfg = p.cfg;
	if (p.oom || config_problems_has(problems, CONFIG_PROBLEM_ERROR)) {
		config_free(cfg);
		cfg = NULL;
	}
	config_problems_free(&local);
	return cfg;
}

static void file_problem(struct config_problems *pr, char *message)
{
	bool ignored = false;
	add_problem(pr, CONFIG_PROBLEM_ERROR, 0, message, &ignored);
}

struct config *config_load(const char *path, struct config_problems *problems)
{
	struct config_problems local = { 0 };
	if (problems == NULL)
		problems = &local;
	*problems = (struct config_problems){ 0 };

	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		file_problem(problems, format("%s: cannot open: %s", path, strerror(errno)));
		config_problems_free(&local);
		return NULL;
	}
	char *text = NULL;
	size_t len = 0, cap = 0;
	bool failed = false;
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 16384;
			char *nt = realloc(text, cap + 1);
			if (nt == NULL) {
				file_problem(problems, format("%s: out of memory", path));
				failed = true;
				break;
			}
			text = nt;
		}
		size_t got = fread(text + len, 1, cap - len, f);
		len += got;
		if (len > CONFIG_MAX_FILE_SIZE) {
			file_problem(problems, format("%s: file is larger than %d bytes", path, CONFIG_MAX_FILE_SIZE));
			failed = true;
			break;
		}
		if (got == 0) {
			if (ferror(f)) {
				file_problem(problems, format("%s: cannot read: %s", path, strerror(errno)));
				failed = true;
			}
			break;
		}
	}
	fclose(f);
	struct config *cfg = NULL;
	if (!failed) {
		text[len] = '\0';
		const char *nul = memchr(text, '\0', len);
		if (nul != NULL) {
			int line = 1;
			for (const char *c = text; c < nul; c++)
				line += *c == '\n';
			file_problem(problems, format("%s:%d: the file contains a NUL byte", path, line));
			if (problems->n > 0)
				problems->items[problems->n - 1].line = line;
		} else {
			cfg = load_text(text, path, problems);
		}
	}
	free(text);
	config_problems_free(&local);
	return cfg;
}

struct config *config_load_string(const char *text, const char *name, struct config_problems *problems)
{
	if (problems != NULL)
		*problems = (struct config_problems){ 0 };
	return load_text(text, name, problems);
}

void config_free(struct config *cfg)
{
	if (cfg == NULL)
		return;
	free(cfg->path);
	free_fields(general_specs, N_GENERAL_KEYS, &cfg->general);
	config_autodb_free_all(cfg);
	for (size_t i = 0; i < cfg->n_pools; i++)
		pool_fields_free(&cfg->pools[i]);
	free(cfg->pools);
	if (cfg->autodb != NULL)
		pool_fields_free(cfg->autodb);
	free(cfg->autodb);
	for (size_t i = 0; i < cfg->n_peers; i++)
		free(cfg->peers[i].host);
	free(cfg->peers);
	for (size_t i = 0; i < cfg->n_user_settings; i++) {
		free(cfg->user_settings[i].name);
		free_fields(uset_specs, USET_KEY_COUNT, &cfg->user_settings[i]);
	}
	free(cfg->user_settings);
	config_pgbouncer_free(cfg->pgbouncer);
	hba_free(cfg->hba);
	free(cfg->hba);
	ident_free(cfg->ident);
	free(cfg->ident);
	if (cfg->ldap)
		ldap_opts_free(cfg->ldap);
	free(cfg->ldap);
	free(cfg->auth_user_secret);
	free(cfg->auth_user_secret_of);
	if (cfg->auth_users != NULL)
		auth_file_free(cfg->auth_users);
	free(cfg->auth_users);
	free(cfg);
}

