/* SPDX-License-Identifier: MIT */
/*
 * hba: auth_hba_file (SPEC §2, §3), PgBouncer's and PostgreSQL's hba
 * format. Each line names a connection type (local, host, hostssl,
 * hostnossl), databases, users, for TCP an address, and the method; the
 * first line that matches a login decides how it authenticates. Parsing is
 * all or nothing: a file with one bad line gives no rules, and every bad
 * line is reported with its number. No I/O here: the caller reads the file
 * (config_load.c) and asks for a match at login (login.c).
 */
#ifndef PGCAT_HBA_H
#define PGCAT_HBA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ldap_opts.h"

enum hba_conn_type { HBA_LOCAL, HBA_HOST, HBA_HOSTSSL, HBA_HOSTNOSSL };
/* password: the password in clear (PostgreSQL's method of that name).
 * peer: local lines only, the client's OS user (the kernel's peer
 * credentials) is the user name, or maps to it (map=, auth_ident_file). */
/* ldap: the password in clear, checked by binding to an LDAP server
 * (ldap_opts.h: the line's options say where and how). pam: the password
 * in clear, checked by PAM (pamservice=, else auth_pam_service). */
enum hba_method { HBA_TRUST, HBA_REJECT, HBA_MD5, HBA_SCRAM, HBA_CERT, HBA_PASSWORD, HBA_PEER, HBA_LDAP, HBA_PAM };

/* A database or user column: keywords and names (a comma list). */
struct hba_names {
	bool all;
	bool sameuser;       /* database column: the database named like the user */
	char **names;        /* as written, quotes removed; compared exactly */
	size_t n;
};

struct hba_rule {
	int line;                    /* in the file, for messages */
	enum hba_conn_type type;
	struct hba_names db, user;
	bool db_replication;         /* `replication` was among the databases: physical replication logins */
	bool any_addr;               /* address `all` (and always for local) */
	int family;                  /* AF_INET or AF_INET6 when !any_addr */
	uint8_t addr[16], mask[16];  /* addr already masked */
	enum hba_method method;
	char *map;                   /* map=NAME (peer, cert): a map of auth_ident_file; NULL = the name itself */
	struct ldap_opts ldap;       /* method ldap: its options (finished) */
	char *pam_service;           /* method pam: pamservice=NAME; NULL = auth_pam_service */
};

struct hba {
	struct hba_rule *rules;
	size_t n;
	bool same_family;   /* HBA_PARSE_SAME_FAMILY */
};

/* Called for each bad line (why: a sentence without the line number). */
typedef void (*hba_bad_line_fn)(void *arg, int line, const char *why);

enum hba_parse_result { HBA_PARSE_OK, HBA_PARSE_BAD, HBA_PARSE_NOMEM };

/* Parse text (len bytes, NUL bytes refused). HBA_PARSE_OK: *out holds the
 * rules (maybe none). HBA_PARSE_BAD: bad(arg, line, why) was called for
 * each bad line and *out is empty. */
enum hba_parse_result hba_parse(const char *text, size_t len, struct hba *out, hba_bad_line_fn bad, void *arg)
	__attribute__((warn_unused_result));
/* HBA_PARSE_CERT_ON_HOST: method cert on host lines too (PgBouncer reads
 * them; such a line fails a login without TLS), not only hostssl
 * (PostgreSQL's rule, hba_parse's). */
#define HBA_PARSE_CERT_ON_HOST 1u
/* HBA_PARSE_SAME_FAMILY: an IPv6 line matches IPv6 clients only and an
 * IPv4 line IPv4 ones, as PgBouncer matches them (hba_parse's rules also
 * match IPv4-mapped IPv6 addresses across families). */
#define HBA_PARSE_SAME_FAMILY 2u
enum hba_parse_result hba_parse_flags(const char *text, size_t len, struct hba *out, hba_bad_line_fn bad, void *arg,
				      unsigned flags) __attribute__((warn_unused_result));
void hba_free(struct hba *h);

/* A login to match: unix socket or TCP (TLS or not), with the peer's
 * address (family AF_INET or AF_INET6, addr 4 or 16 bytes) for TCP. */
struct hba_login {
	bool is_unix;
	bool tls;
	int family;
	const void *addr;
	const char *database;
	const char *user;
	/* A physical replication connection (replication=true): as in
	 * PostgreSQL, only the `replication` keyword matches its database
	 * column; any other login never matches that keyword. */
	bool physical_replication;
};

/* The first rule that matches, or NULL when none does (refused). */
const struct hba_rule *hba_match(const struct hba *h, const struct hba_login *l);

const char *hba_method_name(enum hba_method m);

#endif
