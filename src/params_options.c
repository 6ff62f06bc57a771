/* SPDX-License-Identifier: MIT */
/*
 * params_options: a client's startup settings as PostgreSQL takes them at
 * login (SPEC §3, §10) — the "options" string split and read as a backend
 * reads its command line, and the checks PostgreSQL makes on a setting
 * that pgcat can make without a server. Pure: no sockets.
 *
 * What PostgreSQL 15 does, as observed on it:
 *  - the string is split into words at whitespace; a backslash makes the
 *    byte after it part of the word whatever it is, and a backslash at the
 *    very end is dropped;
 *  - the words are a command line read with GNU getopt: switches may be
 *    grouped (-Pe), a switch's argument joined (-cname=value) or the next
 *    word; words that are not switches are set aside and refused at the
 *    end; "--" alone ends the switches;
 *  - the first error stops the login: an unknown switch, a missing
 *    argument or a word left over is "invalid command-line argument for
 *    server process: W" (42601), W being the word getopt's index points
 *    at once stepped back;
 *  - each switch's settings are applied in order, so a bad setting is
 *    refused before anything after it is read.
 */
#include "params.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SQLSTATE_SYNTAX_ERROR "42601"
#define SQLSTATE_UNDEFINED_OBJECT "42704"
#define SQLSTATE_INVALID_NAME "42602"
#define SQLSTATE_CANT_CHANGE_RUNTIME_PARAM "55P02"
#define SQLSTATE_INVALID_PARAMETER_VALUE "22023"
#define SQLSTATE_PROGRAM_LIMIT_EXCEEDED "54000"

__attribute__((format(printf, 3, 4))) static bool refuse(struct params_refusal *why, const char *sqlstate,
							  const char *fmt, ...)
{
	snprintf(why->sqlstate, sizeof why->sqlstate, "%s", sqlstate);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why->message, sizeof why->message, fmt, ap);
	va_end(ap);
	return false;
}

/* ---- the checks of one setting ---- */

/* Settings fixed for the life of a server (PostgreSQL's internal ones). */
static const char *const fixed[] = {
	"block_size", "data_checksums", "data_directory_mode", "debug_assertions", "in_hot_standby",
	"integer_datetimes", "is_superuser", "lc_collate", "lc_ctype", "max_function_args", "max_identifier_length",
	"max_index_keys", "segment_size", "server_encoding", "server_version", "server_version_num",
	"shared_memory_size", "shared_memory_size_in_huge_pages", "ssl_library", "wal_block_size", "wal_segment_size",
};
/* Those a backend's switches stand for that only a server restart
 * changes, and those only a reload does. */
static const char *const at_restart[] = { "listen_addresses", "max_connections", "port", "shared_buffers",
					  "unix_socket_directories" };
static const char *const at_reload[] = { "fsync", "ssl" };
/* Startup packet fields, not settings. */
static const char *const not_settings[] = { "database", "options", "replication", "user" };

static bool listed(const char *name, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(name, list[i]) == 0)
			return true;
	return false;
}
#define LISTED(name, list) listed(name, list, sizeof list / sizeof *list)

/* A custom setting's name: two or more parts separated by dots, each
 * starting with a letter, '_' or a byte above 0x7f and going on with
 * those, digits and '$'. */
static bool custom_name_ok(const char *name)
{
	bool part_start = true;
	for (const char *s = name; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '.') {
			if (part_start)
				return false;
			part_start = true;
		} else if (isalpha(ch) || ch == '_' || ch >= 0x80) {
			part_start = false;
		} else if (!part_start && (isdigit(ch) || ch == '$')) {
			/* not first */
		} else {
			return false;
		}
	}
	return !part_start;
}

/* Whitespace as PostgreSQL's scanner has it (no vertical tab). */
static bool scanner_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f';
}

/* search_path's list syntax: names separated by commas, blanks around
 * them; a name "quoted" (with "" for a quote) or bare up to a comma or a
 * blank, bare ones not empty. All blank is an empty list. */
static bool identifier_list_ok(const char *s)
{
	while (scanner_space(*s))
		s++;
	if (!*s)
		return true;
	for (;;) {
		if (*s == '"') {
			for (s++;; s++) {
				if (!*s)
					return false;
				if (*s == '"') {
					if (s[1] != '"')
						break;
					s++;
				}
			}
			s++;
		} else {
			const char *start = s;
			while (*s && *s != ',' && !scanner_space(*s))
				s++;
			if (s == start)
				return false;
		}
		while (scanner_space(*s))
			s++;
		if (!*s)
			return true;
		if (*s != ',')
			return false;
		s++;
		while (scanner_space(*s))
			s++;
	}
}

bool params_check_startup(const char *name, const char *value, struct params_refusal *why)
{
	if (strchr(name, '.')) {
		if (!custom_name_ok(name))
			return refuse(why, SQLSTATE_INVALID_NAME, "invalid configuration parameter name \"%s\"", name);
	} else {
		/* No setting is named other than with letters, digits and '_'. */
		bool plain = name[0] != '\0';
		for (const char *s = name; *s; s++)
			if (!isalnum((unsigned char)*s) && *s != '_')
				plain = false;
		if (!plain || LISTED(name, not_settings))
			return refuse(why, SQLSTATE_UNDEFINED_OBJECT, "unrecognized configuration parameter \"%s\"", name);
	}
	if (LISTED(name, fixed))
		return refuse(why, SQLSTATE_CANT_CHANGE_RUNTIME_PARAM, "parameter \"%s\" cannot be changed", name);
	if (LISTED(name, at_restart))
		return refuse(why, SQLSTATE_CANT_CHANGE_RUNTIME_PARAM,
			      "parameter \"%s\" cannot be changed without restarting the server", name);
	if (LISTED(name, at_reload))
		return refuse(why, SQLSTATE_CANT_CHANGE_RUNTIME_PARAM, "parameter \"%s\" cannot be changed now", name);
	if (strcasecmp(name, "search_path") == 0 && !identifier_list_ok(value))
		return refuse(why, SQLSTATE_INVALID_PARAMETER_VALUE, "invalid value for parameter \"%s\": \"%.160s\"",
			      name, value);
	return true;
}

/* ---- the options string ---- */

/* The words of the string, each a NUL-terminated copy in one buffer. */
struct words {
	char *buf;       /* the words one after the other */
	char **w;        /* w[0] is "postgres", as a backend's argv[0] */
	size_t n;
};

static bool split_words(const char *s, struct words *out)
{
	size_t len = strlen(s);
	out->buf = malloc(len + 1);
	/* at most one word per two bytes, plus argv[0] */
	out->w = malloc((len / 2 + 2) * sizeof *out->w);
	if (!out->buf || !out->w)
		return false;
	static char argv0[] = "postgres";
	out->w[0] = argv0;
	out->n = 1;
	char *d = out->buf;
	for (;;) {
		while (*s && isspace((unsigned char)*s))
			s++;
		if (!*s)
			break;
		out->w[out->n++] = d;
		while (*s && !isspace((unsigned char)*s)) {
			if (*s == '\\') {
				s++;
				if (!*s)
					break;   /* a backslash at the very end: dropped */
			}
			*d++ = *s++;
		}
		*d++ = '\0';
	}
	return true;
}

/* The backend's switches: a letter followed by ':' takes an argument. */
static const char switches[] = "B:bc:C:D:d:EeFf:h:ijk:lN:nOPp:r:S:sTt:v:W:-:";

/* Where the settings go, and the names to drop (ignore_startup_parameters). */
struct opt_target {
	struct params *params;
	const char *ignore;
};

static bool set_one(struct opt_target *p, const char *name, const char *value, struct params_refusal *why)
{
	if (params_name_listed(p->ignore, name))
		return true;   /* dropped unread, as PgBouncer drops it */
	if (!params_check_startup(name, value, why))
		return false;
	if (!params_set(p->params, name, value, false))
		return refuse(why, SQLSTATE_PROGRAM_LIMIT_EXCEEDED, "too many or too long settings in %s",
			      "startup options");
	return true;
}

/* -c name=value and --name=value: '-' in the name is '_'. */
static bool long_option(struct opt_target *p, char flag, const char *arg, struct params_refusal *why)
{
	const char *eq = strchr(arg, '=');
	if (!eq)
		return refuse(why, SQLSTATE_SYNTAX_ERROR, "%s%.200s requires a value", flag == '-' ? "--" : "-c ", arg);
	size_t n = (size_t)(eq - arg);
	char *name = malloc(n + 1);
	if (!name)
		return refuse(why, SQLSTATE_PROGRAM_LIMIT_EXCEEDED, "out of memory reading %s", "startup options");
	for (size_t i = 0; i < n; i++)
		name[i] = arg[i] == '-' ? '_' : arg[i];
	name[n] = '\0';
	bool ok = set_one(p, name, eq + 1, why);
	free(name);
	return ok;
}

/* The outcome of one switch: taken, refused (why set), or an argument it
 * does not take (the command-line error, its word chosen by the caller). */
enum switch_result { SWITCH_OK, SWITCH_REFUSED, SWITCH_BAD_ARG };

/* -d N: the log level N stands for, and what levels 2 to 5 turn on. */
static enum switch_result debug_switch(struct opt_target *p, const char *arg, struct params_refusal *why)
{
	int level = atoi(arg);
	char v[32];
	if (level > 0)
		snprintf(v, sizeof v, "debug%d", level);
	else
		snprintf(v, sizeof v, "notice");
	if (!set_one(p, "log_min_messages", v, why))
		return SWITCH_REFUSED;
	static const char *const on[] = { "log_statement", "debug_print_parse", "debug_print_plan",
					  "debug_print_rewritten" };
	for (int i = 0; i < 4 && level >= i + 2; i++)
		if (!set_one(p, on[i], i == 0 ? "all" : "true", why))
			return SWITCH_REFUSED;
	return SWITCH_OK;
}

static enum switch_result apply_switch(struct opt_target *p, char flag, const char *arg, struct params_refusal *why)
{
	const char *name = NULL, *value = arg;
	switch (flag) {
	case 'c':
	case '-':
		return long_option(p, flag, arg, why) ? SWITCH_OK : SWITCH_REFUSED;
	case 'B': name = "shared_buffers"; break;
	case 'd': return debug_switch(p, arg, why);
	case 'e': name = "datestyle"; value = "euro"; break;
	case 'F': name = "fsync"; value = "false"; break;
	case 'f': {
		/* the plan type to turn off, by its first letter */
		static const char *const plans[][2] = {
			{ "s", "enable_seqscan" }, { "i", "enable_indexscan" }, { "o", "enable_indexonlyscan" },
			{ "b", "enable_bitmapscan" }, { "t", "enable_tidscan" }, { "n", "enable_nestloop" },
			{ "m", "enable_mergejoin" }, { "h", "enable_hashjoin" },
		};
		for (size_t i = 0; i < sizeof plans / sizeof *plans && !name; i++)
			if (arg[0] == plans[i][0][0])
				name = plans[i][1];
		if (!name)
			return SWITCH_BAD_ARG;
		value = "false";
		break;
	}
	case 'h': name = "listen_addresses"; break;
	case 'i': name = "listen_addresses"; value = "*"; break;
	case 'k': name = "unix_socket_directories"; break;
	case 'l': name = "ssl"; value = "true"; break;
	case 'N': name = "max_connections"; break;
	case 'O': name = "allow_system_table_mods"; value = "true"; break;
	case 'P': name = "ignore_system_indexes"; value = "true"; break;
	case 'p': name = "port"; break;
	case 'S': name = "work_mem"; break;
	case 's': name = "log_statement_stats"; value = "true"; break;
	case 't':
		/* the statistics to log: parser, planner or executor */
		if (arg[0] == 'p' && arg[1] == 'a')
			name = "log_parser_stats";
		else if (arg[0] == 'p' && arg[1] == 'l')
			name = "log_planner_stats";
		else if (arg[0] == 'e')
			name = "log_executor_stats";
		else
			return SWITCH_BAD_ARG;
		value = "true";
		break;
	case 'W': name = "post_auth_delay"; break;
	default:
		/* b, C, D, E, j, n, r, T, v: a backend started by a client
		 * ignores them */
		return SWITCH_OK;
	}
	return set_one(p, name, value, why) ? SWITCH_OK : SWITCH_REFUSED;
}

static bool bad_word(struct params_refusal *why, const char *word)
{
	return refuse(why, SQLSTATE_SYNTAX_ERROR, "invalid command-line argument for server process: %.200s", word);
}

/* The words as GNU getopt reads them (words that are not switches are set
 * aside, "--" ends the switches). The word an error names is the one
 * getopt's index points at, stepped back by one: the switch's own word
 * once it is used up; while letters of a group are left, the word before
 * it as getopt has them arranged, which is the last word set aside if any
 * (getopt moved them there), else the word before in the string. */
static bool read_switches(struct opt_target *p, const struct words *wd, struct params_refusal *why)
{
	size_t first_aside = 0, last_aside = 0;   /* 0: none */
	size_t i = 1;
	while (i < wd->n) {
		const char *w = wd->w[i];
		if (strcmp(w, "--") == 0) {
			if (!first_aside && i + 1 < wd->n)
				first_aside = i + 1;
			break;
		}
		if (w[0] != '-' || w[1] == '\0') {
			if (!first_aside)
				first_aside = i;
			last_aside = i;
			i++;
			continue;
		}
		const char *before = last_aside ? wd->w[last_aside] : wd->w[i - 1];
		for (const char *g = w + 1; *g;) {
			char flag = *g++;
			const char *spec = flag == ':' ? NULL : strchr(switches, flag);
			if (!spec)
				return bad_word(why, *g ? before : w);
			if (spec[1] != ':') {
				if (apply_switch(p, flag, NULL, why) == SWITCH_REFUSED)
					return false;
				continue;
			}
			/* its argument: the rest of the word, or the next word */
			const char *arg = g, *arg_word = w;
			if (!*g) {
				if (i + 1 >= wd->n)
					return bad_word(why, w);
				arg = arg_word = wd->w[++i];
			}
			switch (apply_switch(p, flag, arg, why)) {
			case SWITCH_OK:
				break;
			case SWITCH_REFUSED:
				return false;
			case SWITCH_BAD_ARG:
				return bad_word(why, arg_word);
			}
			break;
		}
		i++;
	}
	if (first_aside)
		return bad_word(why, wd->w[first_aside]);
	return true;
}

bool params_name_listed(const char *list, const char *name)
{
	if (!list)
		return false;
	size_t n = strlen(name);
	for (const char *s = list; *s;) {
		while (*s == ',' || *s == ' ' || *s == '\t')
			s++;
		size_t k = strcspn(s, ", \t");
		if (k == n && k > 0 && strncasecmp(s, name, n) == 0)
			return true;
		s += k;
	}
	return false;
}

bool params_apply_options(struct params *p, const char *options, struct params_refusal *why)
{
	return params_apply_options_ignoring(p, options, NULL, why);
}

bool params_apply_options_ignoring(struct params *params, const char *options, const char *ignore,
				   struct params_refusal *why)
{
	struct opt_target target = { params, ignore }, *p = &target;
	struct words wd = { 0 };
	bool ok = split_words(options, &wd) ||
		  refuse(why, SQLSTATE_PROGRAM_LIMIT_EXCEEDED, "out of memory reading %s", "startup options");
	if (ok)
		ok = read_switches(p, &wd, why);
	free(wd.buf);
	free(wd.w);
	return ok;
}
