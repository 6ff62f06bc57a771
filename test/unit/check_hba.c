/* SPDX-License-Identifier: MIT */
/* Unit tests for hba: auth_hba_file's lines, their errors (with line
 * numbers) and the first-match rule. */
#define _POSIX_C_SOURCE 200809L
/* By path: the build's autoconf header is also called config.h. */
#include "../../include/config.h"

#include "check_suites.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hba.h"
#include "ident.h"

struct bad_lines {
	int lines[16];
	char why[16][256];
	int n;
};

static void note_bad(void *arg, int line, const char *why)
{
	struct bad_lines *b = arg;
	ck_assert_ptr_nonnull(why);
	if (b->n < 16) {
		b->lines[b->n] = line;
		snprintf(b->why[b->n], sizeof b->why[b->n], "%s", why);
		b->n++;
	}
}

static void parse_ok(const char *text, struct hba *h)
{
	struct bad_lines bad = { 0 };
	enum hba_parse_result r = hba_parse(text, strlen(text), h, note_bad, &bad);
	ck_assert_msg(r == HBA_PARSE_OK, "line %d: %s", bad.lines[0], bad.why[0]);
	ck_assert_int_eq(bad.n, 0);
}

/* The text must be refused; the first bad line is line, its reason holds
 * want. */
static void parse_bad(const char *text, int line, const char *want)
{
	struct hba h;
	struct bad_lines bad = { 0 };
	ck_assert_int_eq(hba_parse(text, strlen(text), &h, note_bad, &bad), HBA_PARSE_BAD);
	ck_assert_uint_eq(h.n, 0);
	ck_assert_ptr_null(h.rules);
	ck_assert_int_ge(bad.n, 1);
	ck_assert_int_eq(bad.lines[0], line);
	ck_assert_msg(strstr(bad.why[0], want) != NULL, "\"%s\" does not say \"%s\"", bad.why[0], want);
}

/* The line (1-based rule number) a login matches; 0 = none. */
static int match_login(const struct hba *h, bool is_unix, bool tls, const char *addr, const char *db, const char *user,
		       bool physical_replication)
{
	uint8_t a[16] = { 0 };
	int family = 0;
	if (addr) {
		family = strchr(addr, ':') ? AF_INET6 : AF_INET;
		ck_assert_int_eq(inet_pton(family, addr, a), 1);
	}
	struct hba_login l = { is_unix, tls, family, a, db, user, physical_replication };
	const struct hba_rule *r = hba_match(h, &l);
	return r ? r->line : 0;
}

static int match(const struct hba *h, bool is_unix, bool tls, const char *addr, const char *db, const char *user)
{
	return match_login(h, is_unix, tls, addr, db, user, false);
}

START_TEST(test_each_line_type)
{
	struct hba h;
	parse_ok("local     all  all                 trust\n"
		 "hostssl   all  all  0.0.0.0/0      cert\n"
		 "hostnossl all  all  0.0.0.0/0      md5\n"
		 "host      all  all  ::/0           scram-sha-256\n",
		 &h);
	ck_assert_uint_eq(h.n, 4);
	ck_assert_int_eq(h.rules[0].type, HBA_LOCAL);
	ck_assert_int_eq(h.rules[0].method, HBA_TRUST);
	ck_assert_int_eq(h.rules[1].type, HBA_HOSTSSL);
	ck_assert_int_eq(h.rules[1].method, HBA_CERT);
	ck_assert_int_eq(h.rules[2].type, HBA_HOSTNOSSL);
	ck_assert_int_eq(h.rules[2].method, HBA_MD5);
	ck_assert_int_eq(h.rules[3].type, HBA_HOST);
	ck_assert_int_eq(h.rules[3].method, HBA_SCRAM);
	/* a unix socket: local only */
	ck_assert_int_eq(match(&h, true, false, NULL, "db", "u"), 1);
	/* TCP with and without TLS */
	ck_assert_int_eq(match(&h, false, true, "10.1.2.3", "db", "u"), 2);
	ck_assert_int_eq(match(&h, false, false, "10.1.2.3", "db", "u"), 3);
	/* IPv6: neither IPv4 line, the host line */
	ck_assert_int_eq(match(&h, false, false, "2001:db8::1", "db", "u"), 4);
	ck_assert_int_eq(match(&h, false, true, "2001:db8::1", "db", "u"), 4);
	hba_free(&h);
}
END_TEST

START_TEST(test_methods_and_reject)
{
	struct hba h;
	parse_ok("host all bad 0.0.0.0/0 reject\n"
		 "host all all 0.0.0.0/0 trust\n", &h);
	ck_assert_int_eq(h.rules[0].method, HBA_REJECT);
	ck_assert_int_eq(match(&h, false, false, "1.2.3.4", "db", "bad"), 1);
	ck_assert_int_eq(match(&h, false, false, "1.2.3.4", "db", "good"), 2);
	/* a unix client: no local line, no match */
	ck_assert_int_eq(match(&h, true, false, NULL, "db", "good"), 0);
	ck_assert_str_eq(hba_method_name(HBA_SCRAM), "scram-sha-256");
	ck_assert_str_eq(hba_method_name(HBA_REJECT), "reject");
	hba_free(&h);
	/* password: PostgreSQL's method of the password in clear, on any
	 * connection type */
	parse_ok("local all all password\n"
		 "host all all 10.0.0.0/8 password\n"
		 "hostnossl all all 0.0.0.0/0 password\n", &h);
	ck_assert_uint_eq(h.n, 3);
	for (size_t i = 0; i < h.n; i++)
		ck_assert_int_eq(h.rules[i].method, HBA_PASSWORD);
	ck_assert_str_eq(hba_method_name(HBA_PASSWORD), "password");
	ck_assert_int_eq(match(&h, false, false, "10.1.2.3", "db", "u"), 2);
	hba_free(&h);
}
END_TEST

START_TEST(test_address_forms)
{
	struct hba h;
	parse_ok("host all a 10.0.0.0/8 trust\n"
		 "host all b 192.168.1.0 255.255.255.0 trust\n"
		 "host all c all trust\n"
		 "host all d fe80::/10 trust\n"
		 "host all e 2001:db8::1/128 trust\n"
		 "host all f 10.9.8.7/16 trust\n"           /* host bits beyond the mask: ignored */
		 "host all g 2001:db8:: ffff:ffff:: trust\n" /* IPv6 netmask column */
		 "host all h 0.0.0.0/0 trust\n"
		 "host all i ::ffff:10.1.0.0/112 trust\n",
		 &h);
	ck_assert_uint_eq(h.n, 9);
	ck_assert_int_eq(match(&h, false, false, "10.200.1.1", "db", "a"), 1);
	ck_assert_int_eq(match(&h, false, false, "11.0.0.1", "db", "a"), 0);
	ck_assert_int_eq(match(&h, false, false, "192.168.1.77", "db", "b"), 2);
	ck_assert_int_eq(match(&h, false, false, "192.168.2.77", "db", "b"), 0);
	ck_assert_int_eq(match(&h, false, false, "203.0.113.5", "db", "c"), 3);
	ck_assert_int_eq(match(&h, false, false, "2001:db8::5", "db", "c"), 3);
	ck_assert_int_eq(match(&h, false, false, "fe80::1", "db", "d"), 4);
	ck_assert_int_eq(match(&h, false, false, "fec0::1", "db", "d"), 0);
	ck_assert_int_eq(match(&h, false, false, "2001:db8::1", "db", "e"), 5);
	ck_assert_int_eq(match(&h, false, false, "2001:db8::2", "db", "e"), 0);
	ck_assert_int_eq(match(&h, false, false, "10.9.200.1", "db", "f"), 6);
	ck_assert_int_eq(match(&h, false, false, "10.8.0.1", "db", "f"), 0);
	ck_assert_int_eq(match(&h, false, false, "2001:db8:1::1", "db", "g"), 7);
	ck_assert_int_eq(match(&h, false, false, "2001:db9::1", "db", "g"), 0);
	/* an IPv4 line matches an IPv4-mapped IPv6 client, and back */
	ck_assert_int_eq(match(&h, false, false, "::ffff:10.2.3.4", "db", "a"), 1);
	ck_assert_int_eq(match(&h, false, false, "::ffff:8.8.8.8", "db", "h"), 8);
	ck_assert_int_eq(match(&h, false, false, "2001:db8::9", "db", "h"), 0);
	ck_assert_int_eq(match(&h, false, false, "10.1.7.7", "db", "i"), 9);
	ck_assert_int_eq(match(&h, false, false, "10.2.7.7", "db", "i"), 0);
	hba_free(&h);
}
END_TEST

START_TEST(test_names_keywords_lists_quotes)
{
	struct hba h;
	parse_ok("# comment line\n"
		 "\n"
		 "   \t  \r\n"
		 "host sameuser all 0.0.0.0/0 trust   # trailing comment\r\n"
		 "host db1,db2 , \"My DB\" u1,\"all\" 0.0.0.0/0 md5\n"
		 "host \"we\"\"ird\" all 0.0.0.0/0 scram-sha-256\n"
		 "host replication all 0.0.0.0/0 trust\n"
		 "host all,replication x 0.0.0.0/0 reject\n",
		 &h);
	ck_assert_uint_eq(h.n, 5);
	ck_assert_int_eq(h.rules[0].line, 4);
	/* sameuser: the database named like the user */
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "bob", "bob"), 4);
	/* lists, white space around the comma, a quoted name with a space */
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "db2", "u1"), 5);
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "My DB", "u1"), 5);
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "db1", "u2"), 0);
	/* a quoted keyword is a name */
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "db1", "all"), 5);
	ck_assert_int_eq(h.rules[1].user.all, false);
	/* doubled quote */
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "we\"ird", "zed"), 6);
	/* replication matches physical replication logins only (whatever
	 * database they name), and they match nothing else (PostgreSQL's rule) */
	ck_assert(h.rules[3].db_replication);
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "replication", "zed"), 0);
	ck_assert_int_eq(match_login(&h, false, false, "1.1.1.1", "replication", "zed", true), 7);
	ck_assert_int_eq(match_login(&h, false, false, "1.1.1.1", "bob", "bob", true), 7);
	ck_assert_int_eq(match_login(&h, false, false, "1.1.1.1", "other", "x", true), 7);
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "other", "x"), 8);
	/* names are case-sensitive */
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "DB1", "u1"), 0);
	hba_free(&h);
}
END_TEST

START_TEST(test_first_match_wins)
{
	struct hba h;
	parse_ok("host appdb app 127.0.0.1/32 reject\n"
		 "host appdb all 127.0.0.0/8 md5\n"
		 "host all   all 0.0.0.0/0 scram-sha-256\n", &h);
	ck_assert_int_eq(match(&h, false, false, "127.0.0.1", "appdb", "app"), 1);
	ck_assert_int_eq(match(&h, false, false, "127.0.0.2", "appdb", "app"), 2);
	ck_assert_int_eq(match(&h, false, false, "127.0.0.1", "appdb", "other"), 2);
	ck_assert_int_eq(match(&h, false, false, "127.0.0.1", "otherdb", "app"), 3);
	hba_free(&h);
}
END_TEST

START_TEST(test_empty_file)
{
	struct hba h;
	parse_ok("", &h);
	ck_assert_uint_eq(h.n, 0);
	ck_assert_int_eq(match(&h, false, false, "1.1.1.1", "db", "u"), 0);
	hba_free(&h);
	parse_ok("# only comments\n\n", &h);
	ck_assert_uint_eq(h.n, 0);
	hba_free(&h);
}
END_TEST

START_TEST(test_errors_name_the_line)
{
	parse_bad("host all all 0.0.0.0/0 trust\nhots all all 0.0.0.0/0 trust\n", 2, "unknown connection type \"hots\"");
	parse_bad("\n\nhost all all 0.0.0.0/0 md6\n", 3, "unknown method \"md6\"");
	parse_bad("host all all 0.0.0.0/0\n", 1, "too few fields");
	parse_bad("local all all\n", 1, "too few fields");
	parse_bad("host all all 127.0.0.1 md5\n", 1, "needs a mask");
	parse_bad("host all all 127.0.0.1 255.255.255.0\n", 1, "no method");
	parse_bad("host all all 10.0.0.0/33 md5\n", 1, "invalid CIDR mask");
	parse_bad("host all all 10.0.0.0/x md5\n", 1, "invalid CIDR mask");
	parse_bad("host all all ::/129 md5\n", 1, "invalid CIDR mask");
	parse_bad("host all all 10.0.0.300/32 md5\n", 1, "invalid IP address");
	parse_bad("host all all 10.0.0.0 ffff:: md5\n", 1, "needs a mask");
	parse_bad("host all all db.example.com md5\n", 1, "host names are not supported");
	parse_bad("host all all samenet md5\n", 1, "\"samenet\" is not supported");
	parse_bad("host all all samehost md5\n", 1, "\"samehost\" is not supported");
	parse_bad("host all all 0.0.0.0/0 md5 clientcert=verify-full\n", 1, "option \"clientcert=verify-full\"");
	parse_bad("host all all 0.0.0.0/0 md5 extra\n", 1, "unexpected \"extra\"");
	parse_bad("host all all 0.0.0.0/0 radius\n", 1, "\"radius\" is not supported");
	parse_bad("host all all 0.0.0.0/0 pam pam_use_hostname=1\n", 1, "pamservice= only");
	parse_bad("host all all 0.0.0.0/0 pam pamservice=a pamservice=b\n", 1, "pamservice= given twice");
	parse_bad("host all all 0.0.0.0/0 pam pamservice=../x\n", 1, "needs a service name");
	parse_bad("host all all 0.0.0.0/0 peer\n", 1, "method peer is only for local lines");
	parse_bad("hostssl all all 0.0.0.0/0 peer map=m\n", 1, "method peer is only for local lines");
	parse_bad("local all all md5 map=m\n", 1, "map= is only for methods peer and cert");
	parse_bad("local all all peer map=\n", 1, "map= needs a map name");
	parse_bad("local all all peer map=a map=b\n", 1, "map= given twice");
	parse_bad("local all all peer map=a,b\n", 1, "unexpected \"b\"");
	parse_bad("local all all peer mapx\n", 1, "unexpected \"mapx\"");
	parse_bad("host all all 0.0.0.0/0 cert\n", 1, "cert needs a hostssl line");
	parse_bad("host \"unterminated all 0.0.0.0/0 md5\n", 1, "unterminated quoted name");
	parse_bad("host \"a\"b all 0.0.0.0/0 md5\n", 1, "a quote inside a name");
	parse_bad("host a\"b all 0.0.0.0/0 md5\n", 1, "unterminated quoted name");
	parse_bad("host a\"b\" all 0.0.0.0/0 md5\n", 1, "a quote inside a name");
	parse_bad("host \"\" all 0.0.0.0/0 md5\n", 1, "empty name");
	/* "db1, all" is one list: the user is 0.0.0.0/0, the address md5 */
	parse_bad("host db1, all 0.0.0.0/0 md5\n", 1, "too few fields");
	parse_bad("host db1,,db2 all 0.0.0.0/0 md5\n", 1, "empty name in a list");
	parse_bad("host db1, # x\n", 1, "ends with a comma");
	parse_bad("host all +admins 0.0.0.0/0 md5\n", 1, "group names");
	parse_bad("host @dbs.txt all 0.0.0.0/0 md5\n", 1, "file inclusion");
	parse_bad("host all @users all md5\n", 1, "file inclusion");
	parse_bad("host samerole all all md5\n", 1, "\"samerole\" is not supported");
	parse_bad("host all /^app all md5\n", 1, "regular expressions");
	parse_bad("\"host\" all all all md5\n", 1, "connection type must be a single unquoted word");
	parse_bad("host all all all \"md5\"\n", 1, "method must be a single unquoted word");
	parse_bad("host all all all md5,trust\n", 1, "method must be a single unquoted word");
	parse_bad("host all all 10.0.0.0/8,10.1.0.0/16 md5\n", 1, "address must be a single");
	parse_bad("host all "
		  "a234567890123456789012345678901234567890123456789012345678901234 all md5\n",
		  1, "longer than 63 bytes");
}
END_TEST

START_TEST(test_every_bad_line_reported)
{
	const char *text = "host all all 0.0.0.0/0 trust\n"
			   "bogus\n"
			   "host all all 0.0.0.0/0 trust\n"
			   "host all all 1.2.3.4 trust\n"
			   "local all all";
	struct hba h;
	struct bad_lines bad = { 0 };
	ck_assert_int_eq(hba_parse(text, strlen(text), &h, note_bad, &bad), HBA_PARSE_BAD);
	ck_assert_int_eq(bad.n, 3);
	ck_assert_int_eq(bad.lines[0], 2);
	ck_assert_int_eq(bad.lines[1], 4);
	ck_assert_int_eq(bad.lines[2], 5);
	/* the good lines are not kept: all or nothing */
	ck_assert_uint_eq(h.n, 0);
	hba_free(&h);
}
END_TEST

START_TEST(test_nul_byte_and_no_final_newline)
{
	static const char text[] = "host all all 0.0.0.0/0 trust\nhost all\0 all 0.0.0.0/0 trust\n";
	struct hba h;
	struct bad_lines bad = { 0 };
	ck_assert_int_eq(hba_parse(text, sizeof text - 1, &h, note_bad, &bad), HBA_PARSE_BAD);
	ck_assert_int_eq(bad.n, 1);
	ck_assert_int_eq(bad.lines[0], 2);
	ck_assert_ptr_nonnull(strstr(bad.why[0], "NUL"));
	parse_ok("host all all 0.0.0.0/0 trust", &h);
	ck_assert_uint_eq(h.n, 1);
	hba_free(&h);
}
END_TEST

/* ---- with the configuration (config_load.c reads the file) ---- */

START_TEST(test_peer_and_map)
{
	struct hba h;
	parse_ok("local all postgres peer\n"
		 "local all all peer map=mymap\n"
		 "hostssl p0x all 0.0.0.0/0 cert map=test\n"
		 "hostssl p0 bouncer 0.0.0.0/0 cert\n", &h);
	ck_assert_uint_eq(h.n, 4);
	ck_assert_int_eq(h.rules[0].method, HBA_PEER);
	ck_assert_ptr_null(h.rules[0].map);
	ck_assert_str_eq(h.rules[1].map, "mymap");
	ck_assert_int_eq(h.rules[2].method, HBA_CERT);
	ck_assert_str_eq(h.rules[2].map, "test");
	ck_assert_ptr_null(h.rules[3].map);
	ck_assert_str_eq(hba_method_name(HBA_PEER), "peer");
	/* peer lines are local ones: never a TCP login */
	ck_assert_int_eq(match(&h, true, false, NULL, "db", "postgres"), 1);
	ck_assert_int_eq(match(&h, false, false, "127.0.0.1", "db", "postgres"), 0);
	hba_free(&h);
}
END_TEST

/* PgBouncer reads cert on host lines; PostgreSQL (and a pgcat.ini) only
 * on hostssl ones. */
/* ldap and its options, as PostgreSQL reads them: quoted parts inside a
 * value, a quoted name, commas between options, an ldapurl. */
START_TEST(test_ldap_options)
{
	struct hba h;
	parse_ok("host all u 0.0.0.0/0 ldap ldapserver=127.0.0.1 ldapport=3890 ldapprefix=\"uid=\" "
		 "ldapsuffix=\",dc=example,dc=net\"\n", &h);
	ck_assert_int_eq(h.rules[0].method, HBA_LDAP);
	ck_assert_str_eq(h.rules[0].ldap.servers, "127.0.0.1");
	ck_assert_int_eq(h.rules[0].ldap.port, 3890);
	ck_assert_str_eq(h.rules[0].ldap.prefix, "uid=");
	ck_assert_str_eq(h.rules[0].ldap.suffix, ",dc=example,dc=net");
	ck_assert_ptr_null(h.rules[0].ldap.basedn);
	hba_free(&h);
	parse_ok("host all u 0.0.0.0/0 ldap ldapserver=h \"ldapport\"=3890 ldapbasedn=\"dc=example,dc=net\" "
		 ",ldapsearchfilter=\"uid=$username\" ldaptls=1\n", &h);
	ck_assert_int_eq(h.rules[0].ldap.port, 3890);
	ck_assert_str_eq(h.rules[0].ldap.basedn, "dc=example,dc=net");
	ck_assert_str_eq(h.rules[0].ldap.search_filter, "uid=$username");
	ck_assert(h.rules[0].ldap.starttls);
	ck_assert_int_eq(h.rules[0].ldap.scope, LDAP_OPTS_SCOPE_SUB);
	hba_free(&h);
	parse_ok("host all u 0.0.0.0/0 ldap ldapurl=\"ldaps://h1:6360/dc=example,dc=net??one?(|(uid=$username)(mail=$username))\"\n",
		 &h);
	ck_assert(h.rules[0].ldap.ldaps);
	ck_assert_str_eq(h.rules[0].ldap.servers, "h1");
	ck_assert_int_eq(h.rules[0].ldap.port, 6360);
	ck_assert_str_eq(h.rules[0].ldap.basedn, "dc=example,dc=net");
	ck_assert_int_eq(h.rules[0].ldap.scope, LDAP_OPTS_SCOPE_ONE);
	ck_assert_str_eq(h.rules[0].ldap.search_filter, "(|(uid=$username)(mail=$username))");
	hba_free(&h);
	parse_ok("host all u 0.0.0.0/0 ldap ldapurl=\"ldap://h:389/dc=x?uid?sub\"\n", &h);
	ck_assert_str_eq(h.rules[0].ldap.search_attribute, "uid");
	ck_assert(!h.rules[0].ldap.ldaps);
	hba_free(&h);
	parse_bad("host all u 0.0.0.0/0 ldap\n", 1, "needs ldapbasedn, ldapprefix or ldapsuffix");
	parse_bad("host all u 0.0.0.0/0 ldap ldapbasedn=dc=x\n", 1, "needs ldapserver");
	parse_bad("host all u 0.0.0.0/0 ldap ldapserver=h ldapprefix=uid= ldapbasedn=dc=x\n", 1, "cannot be mixed");
	parse_bad("host all u 0.0.0.0/0 ldap ldapserver=h ldapbasedn=dc=x ldapsearchattribute=uid "
		  "ldapsearchfilter=x\n", 1, "cannot be used together");
	parse_bad("host all u 0.0.0.0/0 ldap ldapserver=h ldapbasedn=dc=x ldapport=0\n", 1, "invalid LDAP port");
	parse_bad("host all u 0.0.0.0/0 ldap ldapserver=h ldapbasedn=dc=x ldapscheme=http\n", 1, "invalid ldapscheme");
	parse_bad("host all u 0.0.0.0/0 ldap ldapserver=h ldapbasedn=dc=x ldapfoo=1\n", 1, "unknown LDAP option");
	parse_bad("host all u 0.0.0.0/0 ldap ldapurl=\"http://h/dc=x\"\n", 1, "LDAP URL");
	parse_bad("host all u 0.0.0.0/0 ldap ldapserver=h ldapbasedn=\"dc=x\n", 1, "unterminated");
	parse_bad("host all u 0.0.0.0/0 md5 ldapserver=h\n", 1, "map= only");
	parse_ok("host all u 0.0.0.0/0 pam pamservice=pgcat-test\nlocal all all pam\n", &h);
	ck_assert_int_eq(h.rules[0].method, HBA_PAM);
	ck_assert_str_eq(h.rules[0].pam_service, "pgcat-test");
	ck_assert_ptr_null(h.rules[1].pam_service);
	hba_free(&h);
}
END_TEST

START_TEST(test_cert_on_host_flag)
{
	const char *text = "host all all 19.0.0.0/8 cert\n";
	struct hba h;
	struct bad_lines bad = { 0 };
	ck_assert_int_eq(hba_parse(text, strlen(text), &h, note_bad, &bad), HBA_PARSE_BAD);
	bad.n = 0;
	ck_assert_int_eq(hba_parse_flags(text, strlen(text), &h, note_bad, &bad, HBA_PARSE_CERT_ON_HOST), HBA_PARSE_OK);
	ck_assert_uint_eq(h.n, 1);
	ck_assert_int_eq(h.rules[0].method, HBA_CERT);
	hba_free(&h);
	text = "hostnossl all all 19.0.0.0/8 cert\n";
	ck_assert_int_eq(hba_parse_flags(text, strlen(text), &h, note_bad, &bad, HBA_PARSE_CERT_ON_HOST),
			 HBA_PARSE_BAD);
	/* PgBouncer's address match: same family only, so ::/0 is no IPv4 line */
	text = "hostssl all all ::/0 md5\nhostssl all all 0.0.0.0/0 cert\n";
	parse_ok(text, &h);
	ck_assert_int_eq(match(&h, false, true, "127.0.0.1", "db", "u"), 1);
	hba_free(&h);
	ck_assert_int_eq(hba_parse_flags(text, strlen(text), &h, note_bad, &bad, HBA_PARSE_SAME_FAMILY), HBA_PARSE_OK);
	ck_assert_int_eq(match(&h, false, true, "127.0.0.1", "db", "u"), 2);
	ck_assert_int_eq(match(&h, false, true, "::1", "db", "u"), 1);
	hba_free(&h);
}
END_TEST

/* ---- auth_ident_file ---- */

static void ident_ok(const char *text, struct ident *id)
{
	struct bad_lines bad = { 0 };
	enum ident_parse_result r = ident_parse(text, strlen(text), id, note_bad, &bad);
	ck_assert_msg(r == IDENT_PARSE_OK, "line %d: %s", bad.lines[0], bad.why[0]);
	ck_assert_int_eq(bad.n, 0);
}

static void ident_bad(const char *text, int line, const char *want)
{
	struct ident id;
	struct bad_lines bad = { 0 };
	ck_assert_int_eq(ident_parse(text, strlen(text), &id, note_bad, &bad), IDENT_PARSE_BAD);
	ck_assert_uint_eq(id.n, 0);
	ck_assert_ptr_null(id.entries);
	ck_assert_int_ge(bad.n, 1);
	ck_assert_int_eq(bad.lines[0], line);
	ck_assert_msg(strstr(bad.why[0], want) != NULL, "\"%s\" does not say \"%s\"", bad.why[0], want);
}

START_TEST(test_ident_names)
{
	struct ident id;
	/* PgBouncer's test file, as written */
	ident_ok("# PostgreSQL User Name Maps\n"
		 "# MAPNAME       SYSTEM-USERNAME         PG-USERNAME\n"
		 "test\t\tpgbouncer.acme.org\tsomeuser\n"
		 "test\t\tpgbouncer.acme.org\tanotheruser\n"
		 "test2\t\t\"bouncer\"\t\tall\n"
		 "test2\t\tpgbouncer.acme.org\t\"anotheruser\"   # trailing comment\n"
		 "quoted  alice  \"all\"\n"
		 "   \t\n", &id);
	ck_assert_uint_eq(id.n, 5);
	ck_assert(ident_has_map(&id, "test") && ident_has_map(&id, "test2") && !ident_has_map(&id, "test3"));
	ck_assert(ident_match(&id, "test", "pgbouncer.acme.org", "someuser"));
	ck_assert(ident_match(&id, "test", "pgbouncer.acme.org", "anotheruser"));
	ck_assert(!ident_match(&id, "test", "pgbouncer.acme.org", "bouncer"));
	ck_assert(!ident_match(&id, "test", "PGBOUNCER.acme.org", "someuser"));   /* case matters */
	ck_assert(!ident_match(&id, "test2", "pgbouncer.acme.org", "someuser"));
	ck_assert(ident_match(&id, "test2", "bouncer", "someuser"));              /* all */
	ck_assert(ident_match(&id, "test2", "bouncer", "anyone"));
	ck_assert(!ident_match(&id, "test", "bouncer", "someuser"));              /* another map's line */
	ck_assert(!ident_match(&id, "nomap", "bouncer", "bouncer"));
	/* a quoted "all" is a name */
	ck_assert(ident_match(&id, "quoted", "alice", "all"));
	ck_assert(!ident_match(&id, "quoted", "alice", "bob"));
	ident_free(&id);
	ident_free(&id);   /* (twice: harmless) */
	ident_ok("", &id);
	ck_assert_uint_eq(id.n, 0);
	ident_free(&id);
}
END_TEST

START_TEST(test_ident_regex)
{
	struct ident id;
	ident_ok("m /^(.*)@example\\.com$ \\1\n"
		 "m /^admin-([a-z]+)$ app_\\1_ro\n"
		 "m \"/^svc, (x|y)$\" \\1\n"
		 "m /^root$ /^(postgres|someuser)$\n"
		 "m /^opt(a)?z$ pre\\1post\n"
		 "long /^(.*)$ \\1\n", &id);
	ck_assert(ident_match(&id, "m", "alice@example.com", "alice"));
	ck_assert(!ident_match(&id, "m", "alice@example.com", "bob"));
	ck_assert(!ident_match(&id, "m", "alice@exampleXcom", "alice"));
	ck_assert(ident_match(&id, "m", "admin-joe", "app_joe_ro"));
	ck_assert(!ident_match(&id, "m", "admin-joe", "joe"));
	ck_assert(ident_match(&id, "m", "svc, y", "y"));
	ck_assert(ident_match(&id, "m", "root", "postgres"));
	ck_assert(ident_match(&id, "m", "root", "someuser"));
	ck_assert(!ident_match(&id, "m", "root", "postgresx"));
	/* an optional group that took no part: \1 is empty */
	ck_assert(ident_match(&id, "m", "optz", "prepost"));
	ck_assert(ident_match(&id, "m", "optaz", "preapost"));
	/* a substitution longer than a PG name matches nothing */
	char big[200];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	ck_assert(!ident_match(&id, "long", big, big));
	big[63] = '\0';
	ck_assert(ident_match(&id, "long", big, big));
	ident_free(&id);
}
END_TEST

START_TEST(test_ident_errors_name_the_line)
{
	ident_bad("m a b\nm a\n", 2, "missing the PG user name");
	ident_bad("m\n", 1, "missing the system user name");
	ident_bad("m a b c\n", 1, "more than three fields");
	ident_bad("m a,b c\n", 1, "a comma outside quotes");
	ident_bad("m \"a b\n", 1, "unterminated quoted name");
	ident_bad("m \"a\"b c\n", 1, "after a quoted name");
	ident_bad("m a\"b c\n", 1, "a quote inside a name");
	ident_bad("m \"\" c\n", 1, "empty name");
	ident_bad("m /( c\n", 1, "invalid regular expression for the system user name");
	ident_bad("m / c\n", 1, "empty regular expression");
	ident_bad("m a /[\n", 1, "invalid regular expression for the PG user name");
	ident_bad("m /^a$ \\1\n", 1, "has no parenthesized group");
	ident_bad("m /^(a)$ /\\1\n", 1, "\\1 in a regular expression");
	ident_bad("m a +admins\n", 1, "group names");
	ident_bad("m a @users.txt\n", 1, "file inclusion");
	ident_bad("m a "
		  "a234567890123456789012345678901234567890123456789012345678901234\n",
		  1, "longer than 63 bytes");
	ident_bad("a234567890123456789012345678901234567890123456789012345678901234 a b\n", 1,
		  "map name");
	char huge[1200];
	memset(huge, 'x', sizeof huge);
	memcpy(huge, "m a ", 4);
	huge[sizeof huge - 2] = '\n';
	huge[sizeof huge - 1] = '\0';
	ident_bad(huge, 1, "longer than 1024 bytes");
	/* every bad line, none kept */
	const char *text = "m a b\nbad\nm a b\nm a b c\n";
	struct ident id;
	struct bad_lines bad = { 0 };
	ck_assert_int_eq(ident_parse(text, strlen(text), &id, note_bad, &bad), IDENT_PARSE_BAD);
	ck_assert_int_eq(bad.n, 2);
	ck_assert_int_eq(bad.lines[0], 2);
	ck_assert_int_eq(bad.lines[1], 4);
	ck_assert_uint_eq(id.n, 0);
	/* a NUL byte; no final newline; no callback */
	const char nul[] = "m a b\nm a\0b c";
	bad.n = 0;
	ck_assert_int_eq(ident_parse(nul, sizeof nul - 1, &id, note_bad, &bad), IDENT_PARSE_BAD);
	ck_assert_int_eq(bad.lines[0], 2);
	ck_assert_int_eq(ident_parse("m", 1, &id, NULL, NULL), IDENT_PARSE_BAD);
}
END_TEST

struct tmp {
	char dir[64];
	char ini[128], hba[128];
};

static void tmp_make(struct tmp *t, const char *hba_text)
{
	snprintf(t->dir, sizeof t->dir, "/tmp/check-hba-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(t->dir));
	snprintf(t->ini, sizeof t->ini, "%s/pgcat.ini", t->dir);
	snprintf(t->hba, sizeof t->hba, "%s/hba.conf", t->dir);
	FILE *f = fopen(t->hba, "w");
	ck_assert_ptr_nonnull(f);
	fputs(hba_text, f);
	fclose(f);
}

static struct config *tmp_load(struct tmp *t, const char *general, struct config_problems *pr)
{
	FILE *f = fopen(t->ini, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[general]\n%s\n[pools.db]\n[pools.db.shards.0]\nservers = 127.0.0.1:5432:primary\n", general);
	fclose(f);
	return config_load(t->ini, pr);
}

static void tmp_remove(struct tmp *t)
{
	unlink(t->hba);
	unlink(t->ini);
	rmdir(t->dir);
}

static const char *first_problem(const struct config_problems *pr, enum config_problem_kind kind)
{
	for (size_t i = 0; i < pr->n; i++)
		if (pr->items[i].kind == kind)
			return pr->items[i].message;
	return "";
}

START_TEST(test_config_reads_the_file)
{
	struct tmp t;
	tmp_make(&t, "local all all trust\nhost all all 0.0.0.0/0 md5\n");
	struct config_problems pr;
	/* relative to the directory of pgcat.ini */
	struct config *cfg = tmp_load(&t, "auth_hba_file = hba.conf", &pr);
	ck_assert_msg(cfg != NULL, "%s", first_problem(&pr, CONFIG_PROBLEM_ERROR));
	ck_assert_uint_eq(pr.n, 0);
	ck_assert_ptr_nonnull(cfg->hba);
	ck_assert_uint_eq(cfg->hba->n, 2);
	ck_assert_int_eq(cfg->hba->rules[1].method, HBA_MD5);
	/* SET cannot change it: its rules are read with the file */
	char err[256];
	ck_assert(!config_general_set(cfg, "auth_hba_file", "/elsewhere", err, sizeof err));
	ck_assert_ptr_nonnull(strstr(err, "RELOAD"));
	char v[256];
	ck_assert(config_general_value(cfg, "auth_hba_file", v, sizeof v));
	ck_assert_str_eq(v, "hba.conf");
	config_free(cfg);
	config_problems_free(&pr);
	/* none: no rules, auth_type for everyone */
	cfg = tmp_load(&t, "", &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_ptr_null(cfg->hba);
	config_free(cfg);
	config_problems_free(&pr);
	tmp_remove(&t);
}
END_TEST

START_TEST(test_config_bad_file_refused_whole)
{
	struct tmp t;
	tmp_make(&t, "host all all 0.0.0.0/0 md5\n# fine\nhost all all 0.0.0.0/0 md6\n");
	struct config_problems pr;
	char general[256];
	snprintf(general, sizeof general, "auth_hba_file = %s", t.hba);
	struct config *cfg = tmp_load(&t, general, &pr);
	ck_assert_ptr_null(cfg);
	char want[256];
	snprintf(want, sizeof want, "[general] auth_hba_file: %s:3: unknown method \"md6\"", t.hba);
	const char *msg = first_problem(&pr, CONFIG_PROBLEM_ERROR);
	ck_assert_msg(strstr(msg, want) != NULL, "\"%s\" lacks \"%s\"", msg, want);
	config_problems_free(&pr);
	/* a file that is not there */
	unlink(t.hba);
	cfg = tmp_load(&t, general, &pr);
	ck_assert_ptr_null(cfg);
	ck_assert_ptr_nonnull(strstr(first_problem(&pr, CONFIG_PROBLEM_ERROR), "cannot open"));
	config_problems_free(&pr);
	tmp_remove(&t);
}
END_TEST

START_TEST(test_config_cert_needs_verified_certificates)
{
	struct tmp t;
	tmp_make(&t, "hostssl all all all cert\n");
	struct config_problems pr;
	struct config *cfg = tmp_load(&t, "auth_hba_file = hba.conf\nclient_tls_sslmode = require\n"
				      "client_tls_cert_file = s.crt\nclient_tls_key_file = s.key", &pr);
	ck_assert_ptr_null(cfg);
	const char *msg = first_problem(&pr, CONFIG_PROBLEM_ERROR);
	ck_assert_msg(strstr(msg, "hba.conf:1: method cert needs client_tls_sslmode verify-ca or verify-full"), "%s", msg);
	config_problems_free(&pr);
	cfg = tmp_load(&t, "auth_hba_file = hba.conf\nclient_tls_sslmode = verify-ca\n"
			   "client_tls_cert_file = s.crt\nclient_tls_key_file = s.key\nclient_tls_ca_file = ca.crt", &pr);
	ck_assert_msg(cfg != NULL, "%s", first_problem(&pr, CONFIG_PROBLEM_ERROR));
	config_free(cfg);
	config_problems_free(&pr);
	tmp_remove(&t);
}
END_TEST

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[192];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

/* auth_ident_file next to pgcat.ini; map= must name one of its maps. */
START_TEST(test_config_ident_file)
{
	struct tmp t;
	tmp_make(&t, "local all all peer map=mymap\n");
	write_file(t.dir, "ident.conf", "mymap root postgres\nmymap /^(.*)$ \\1\n");
	struct config_problems pr;
	struct config *cfg = tmp_load(&t, "auth_hba_file = hba.conf\nauth_ident_file = ident.conf", &pr);
	ck_assert_msg(cfg != NULL, "%s", first_problem(&pr, CONFIG_PROBLEM_ERROR));
	ck_assert_ptr_nonnull(cfg->ident);
	ck_assert(ident_match(cfg->ident, "mymap", "root", "postgres"));
	config_free(cfg);
	config_problems_free(&pr);
	/* no auth_ident_file */
	cfg = tmp_load(&t, "auth_hba_file = hba.conf", &pr);
	ck_assert_ptr_null(cfg);
	ck_assert_msg(strstr(first_problem(&pr, CONFIG_PROBLEM_ERROR), "hba.conf:1: map= needs auth_ident_file"), "%s",
		      first_problem(&pr, CONFIG_PROBLEM_ERROR));
	config_problems_free(&pr);
	/* a map the file does not have */
	write_file(t.dir, "ident.conf", "other root postgres\n");
	cfg = tmp_load(&t, "auth_hba_file = hba.conf\nauth_ident_file = ident.conf", &pr);
	ck_assert_ptr_null(cfg);
	ck_assert_msg(strstr(first_problem(&pr, CONFIG_PROBLEM_ERROR),
			     "hba.conf:1: map \"mymap\" is not in auth_ident_file"), "%s",
		      first_problem(&pr, CONFIG_PROBLEM_ERROR));
	config_problems_free(&pr);
	/* a bad line of it: file and line */
	write_file(t.dir, "ident.conf", "mymap root postgres\nmymap /( x\n");
	cfg = tmp_load(&t, "auth_hba_file = hba.conf\nauth_ident_file = ident.conf", &pr);
	ck_assert_ptr_null(cfg);
	char want[256];
	snprintf(want, sizeof want, "[general] auth_ident_file: %s/ident.conf:2: invalid regular expression", t.dir);
	ck_assert_msg(strstr(first_problem(&pr, CONFIG_PROBLEM_ERROR), want), "%s", first_problem(&pr, CONFIG_PROBLEM_ERROR));
	config_problems_free(&pr);
	char path[192];
	snprintf(path, sizeof path, "%s/ident.conf", t.dir);
	unlink(path);
	/* not there */
	cfg = tmp_load(&t, "auth_hba_file = hba.conf\nauth_ident_file = ident.conf", &pr);
	ck_assert_ptr_null(cfg);
	ck_assert_ptr_nonnull(strstr(first_problem(&pr, CONFIG_PROBLEM_ERROR), "cannot open"));
	config_problems_free(&pr);
	tmp_remove(&t);
}
END_TEST

START_TEST(test_config_warnings)
{
	struct tmp t;
	tmp_make(&t, "hostssl all all all md5\n");
	struct config_problems pr;
	struct config *cfg = tmp_load(&t, "auth_hba_file = hba.conf", &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_ptr_nonnull(strstr(first_problem(&pr, CONFIG_PROBLEM_WARNING), "hba.conf:1: hostssl line never matches"));
	config_free(cfg);
	config_problems_free(&pr);
	tmp_remove(&t);
	tmp_make(&t, "# nothing yet\n");
	cfg = tmp_load(&t, "auth_hba_file = hba.conf", &pr);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_ptr_nonnull(strstr(first_problem(&pr, CONFIG_PROBLEM_WARNING), "no rules: every login is refused"));
	config_free(cfg);
	config_problems_free(&pr);
	tmp_remove(&t);
}
END_TEST

Suite *hba_suite(void)
{
	Suite *s = suite_create("hba");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_each_line_type);
	tcase_add_test(tc, test_methods_and_reject);
	tcase_add_test(tc, test_address_forms);
	tcase_add_test(tc, test_names_keywords_lists_quotes);
	tcase_add_test(tc, test_first_match_wins);
	tcase_add_test(tc, test_empty_file);
	tcase_add_test(tc, test_errors_name_the_line);
	tcase_add_test(tc, test_every_bad_line_reported);
	tcase_add_test(tc, test_nul_byte_and_no_final_newline);
	tcase_add_test(tc, test_peer_and_map);
	tcase_add_test(tc, test_cert_on_host_flag);
	tcase_add_test(tc, test_ldap_options);
	tcase_add_test(tc, test_ident_names);
	tcase_add_test(tc, test_ident_regex);
	tcase_add_test(tc, test_ident_errors_name_the_line);
	suite_add_tcase(s, tc);
	TCase *cf = tcase_create("config");
	tcase_add_test(cf, test_config_reads_the_file);
	tcase_add_test(cf, test_config_bad_file_refused_whole);
	tcase_add_test(cf, test_config_cert_needs_verified_certificates);
	tcase_add_test(cf, test_config_warnings);
	tcase_add_test(cf, test_config_ident_file);
	suite_add_tcase(s, cf);
	return s;
}
