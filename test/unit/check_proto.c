/* SPDX-License-Identifier: MIT */
/* Unit tests: message framing, startup packets, error parsing, pktbuf, params. */
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "params.h"

#include <stdio.h>
#include "cancel.h"
#include "pktbuf.h"
#include "proto.h"
#include "randpool.h"

static size_t make_header(uint8_t *b, uint8_t type, uint32_t len)
{
	b[0] = type;
	proto_put_u32(b + 1, len);
	return 5;
}

START_TEST(frame_needs_five_bytes)
{
	uint8_t b[5];
	make_header(b, 'Q', 10);
	struct proto_frame f;
	for (size_t n = 0; n < 5; n++)
		ck_assert_int_eq(proto_frame_header(b, n, 1000, &f), PROTO_FRAME_NEED_MORE);
	ck_assert_int_eq(proto_frame_header(b, 5, 1000, &f), PROTO_FRAME_OK);
	ck_assert_int_eq(f.type, 'Q');
	ck_assert_uint_eq(f.len, 10);
}
END_TEST

START_TEST(frame_length_edges)
{
	uint8_t b[5];
	struct proto_frame f;
	uint32_t lens[] = { 0, 1, 2, 3 };
	for (size_t i = 0; i < 4; i++) {
		make_header(b, 'S', lens[i]);
		ck_assert_int_eq(proto_frame_header(b, 5, 1000, &f), PROTO_FRAME_BAD_LENGTH);
	}
	make_header(b, 'S', 4);
	ck_assert_int_eq(proto_frame_header(b, 5, 1000, &f), PROTO_FRAME_OK);
	make_header(b, 'Q', 1000);
	ck_assert_int_eq(proto_frame_header(b, 5, 1000, &f), PROTO_FRAME_OK);
	make_header(b, 'Q', 1001);
	ck_assert_int_eq(proto_frame_header(b, 5, 1000, &f), PROTO_FRAME_TOO_LONG);
	make_header(b, 'Q', 0xffffffffu);
	ck_assert_int_eq(proto_frame_header(b, 5, 0x7fffffffu, &f), PROTO_FRAME_TOO_LONG);
	make_header(b, 'Q', 0x80000000u);
	ck_assert_int_eq(proto_frame_header(b, 5, 0x7fffffffu, &f), PROTO_FRAME_TOO_LONG);
}
END_TEST

static size_t build_startup(uint8_t *buf, size_t cap, uint32_t version, const char *const *kv, size_t n)
{
	struct pktbuf pb;
	pktbuf_init(&pb, buf, cap);
	pktbuf_begin(&pb, 0);
	pktbuf_put_u32(&pb, version);
	for (size_t i = 0; i < n; i++)
		pktbuf_put_cstring(&pb, kv[i]);
	pktbuf_put_u8(&pb, 0);
	pktbuf_end(&pb);
	ck_assert(!pb.failed);
	return pb.len;
}

START_TEST(startup_normal)
{
	uint8_t buf[256];
	const char *kv[] = { "user", "app", "database", "db", "application_name", "x" };
	size_t len = build_startup(buf, sizeof buf, PG_PROTOCOL_3_0, kv, 6);
	struct proto_startup st;
	ck_assert_int_eq(proto_parse_startup(buf, len, &st), PROTO_STARTUP_RESULT_OK);
	ck_assert_int_eq(st.kind, PROTO_STARTUP_NORMAL);
	ck_assert_uint_eq(st.n_params, 3);
	ck_assert_str_eq(st.params[0].name, "user");
	ck_assert_str_eq(st.params[0].value, "app");
	ck_assert_str_eq(st.params[2].value, "x");
	/* every shorter prefix needs more */
	for (size_t n = 0; n < len; n++)
		ck_assert_int_eq(proto_parse_startup(buf, n, &st), PROTO_STARTUP_RESULT_NEED_MORE);
}
END_TEST

START_TEST(startup_bad)
{
	uint8_t buf[256];
	struct proto_startup st;
	const char *kv[] = { "user", "app" };
	/* only major 3: 2.0, 4.0 and 5.0 are refused (1234.567x are the special codes) */
	size_t len = build_startup(buf, sizeof buf, 2u << 16, kv, 2);
	ck_assert_int_eq(proto_parse_startup(buf, len, &st), PROTO_STARTUP_RESULT_BAD_VERSION);
	len = build_startup(buf, sizeof buf, PG_PROTOCOL(4, 0), kv, 2);
	ck_assert_int_eq(proto_parse_startup(buf, len, &st), PROTO_STARTUP_RESULT_BAD_VERSION);
	ck_assert_uint_eq(st.version, PG_PROTOCOL(4, 0));
	len = build_startup(buf, sizeof buf, PG_PROTOCOL(5, 0), kv, 2);
	ck_assert_int_eq(proto_parse_startup(buf, len, &st), PROTO_STARTUP_RESULT_BAD_VERSION);
	/* length field < 8 and > 10000 */
	proto_put_u32(buf, 7);
	ck_assert_int_eq(proto_parse_startup(buf, 8, &st), PROTO_STARTUP_RESULT_BAD_LENGTH);
	proto_put_u32(buf, PROTO_STARTUP_MAX + 1);
	ck_assert_int_eq(proto_parse_startup(buf, 8, &st), PROTO_STARTUP_RESULT_BAD_LENGTH);
	/* value without its terminator */
	len = build_startup(buf, sizeof buf, PG_PROTOCOL_3_0, kv, 2);
	buf[len - 2] = 'x';
	ck_assert_int_eq(proto_parse_startup(buf, len, &st), PROTO_STARTUP_RESULT_MALFORMED);
	/* name without a value */
	const char *odd[] = { "user" };
	len = build_startup(buf, sizeof buf, PG_PROTOCOL_3_0, odd, 1);
	ck_assert_int_eq(proto_parse_startup(buf, len, &st), PROTO_STARTUP_RESULT_MALFORMED);
	/* bytes after the final terminator */
	len = build_startup(buf, sizeof buf, PG_PROTOCOL_3_0, kv, 2);
	buf[len] = 0;
	proto_put_u32(buf, (uint32_t)len + 1);
	ck_assert_int_eq(proto_parse_startup(buf, len + 1, &st), PROTO_STARTUP_RESULT_MALFORMED);
}
END_TEST

START_TEST(startup_special_codes)
{
	uint8_t buf[16];
	struct proto_startup st;
	proto_put_u32(buf, 8);
	proto_put_u32(buf + 4, PG_SSL_REQUEST_CODE);
	ck_assert_int_eq(proto_parse_startup(buf, 8, &st), PROTO_STARTUP_RESULT_OK);
	ck_assert_int_eq(st.kind, PROTO_STARTUP_SSL);
	proto_put_u32(buf + 4, PG_GSSENC_REQUEST_CODE);
	ck_assert_int_eq(proto_parse_startup(buf, 8, &st), PROTO_STARTUP_RESULT_OK);
	ck_assert_int_eq(st.kind, PROTO_STARTUP_GSSENC);
	proto_put_u32(buf, 16);
	proto_put_u32(buf + 4, PG_CANCEL_REQUEST_CODE);
	proto_put_u32(buf + 8, 42);
	proto_put_u32(buf + 12, 0xdeadbeef);
	ck_assert_int_eq(proto_parse_startup(buf, 16, &st), PROTO_STARTUP_RESULT_OK);
	ck_assert_int_eq(st.kind, PROTO_STARTUP_CANCEL);
	ck_assert_uint_eq(st.cancel_pid, 42);
	ck_assert_uint_eq(st.cancel_key_len, 4);
	ck_assert_uint_eq(proto_get_u32(st.cancel_key), 0xdeadbeef);
	proto_put_u32(buf, 12);
	ck_assert_int_eq(proto_parse_startup(buf, 16, &st), PROTO_STARTUP_RESULT_MALFORMED);
}
END_TEST

/* Minor versions: every 3.x parses (negotiation is the caller's). */
START_TEST(startup_minor_versions)
{
	uint8_t buf[256];
	struct proto_startup st;
	const char *kv[] = { "user", "app", "_pq_.test_protocol_negotiation", "", "_pq_.x", "1" };
	uint32_t versions[] = { PG_PROTOCOL_3_0, PG_PROTOCOL(3, 1), PG_PROTOCOL_3_2, PG_PROTOCOL(3, 9999),
				PG_PROTOCOL(3, 0xffff) };
	for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
		size_t len = build_startup(buf, sizeof buf, versions[i], kv, 6);
		ck_assert_int_eq(proto_parse_startup(buf, len, &st), PROTO_STARTUP_RESULT_OK);
		ck_assert_int_eq(st.kind, PROTO_STARTUP_NORMAL);
		ck_assert_uint_eq(st.version, versions[i]);
		ck_assert_uint_eq(st.n_params, 3);
		ck_assert(proto_is_protocol_option(st.params[1].name));
		ck_assert(proto_is_protocol_option(st.params[2].name));
		ck_assert(!proto_is_protocol_option(st.params[0].name));
	}
	ck_assert(!proto_is_protocol_option("_pq_"));
	ck_assert(!proto_is_protocol_option("_PQ_.x"));
	ck_assert(proto_is_protocol_option("_pq_."));
}
END_TEST

/* As PostgreSQL 18: a NegotiateProtocolVersion only when something
 * changes, naming the lower of the client's version and 3.2. */
START_TEST(negotiation)
{
	uint32_t v = 0;
	ck_assert(!proto_negotiation_needed(PG_PROTOCOL_3_0, 0, &v));
	ck_assert(!proto_negotiation_needed(PG_PROTOCOL(3, 1), 0, &v));
	ck_assert(!proto_negotiation_needed(PG_PROTOCOL_3_2, 0, &v));
	ck_assert(proto_negotiation_needed(PG_PROTOCOL(3, 3), 0, &v));
	ck_assert_uint_eq(v, PG_PROTOCOL_3_2);
	ck_assert(proto_negotiation_needed(PG_PROTOCOL(3, 9999), 1, &v));   /* libpq 19's grease */
	ck_assert_uint_eq(v, PG_PROTOCOL_3_2);
	ck_assert(proto_negotiation_needed(PG_PROTOCOL_3_0, 1, &v));
	ck_assert_uint_eq(v, PG_PROTOCOL_3_0);   /* never above what was asked */
	ck_assert(proto_negotiation_needed(PG_PROTOCOL(3, 1), 2, &v));
	ck_assert_uint_eq(v, PG_PROTOCOL(3, 1));
	ck_assert(proto_negotiation_needed(PG_PROTOCOL_3_2, 1, &v));
	ck_assert_uint_eq(v, PG_PROTOCOL_3_2);
}
END_TEST

/* A server's NegotiateProtocolVersion, as PostgreSQL 13 to 17 send it. */
START_TEST(negotiate_parse)
{
	uint8_t b[64];
	uint32_t v, n;
	proto_put_u32(b, PG_PROTOCOL_3_0);
	proto_put_u32(b + 4, 0);
	ck_assert(proto_parse_negotiate(b, 8, &v, &n));
	ck_assert_uint_eq(v, PG_PROTOCOL_3_0);
	ck_assert_uint_eq(n, 0);
	ck_assert(!proto_parse_negotiate(b, 7, &v, &n));
	ck_assert(!proto_parse_negotiate(b, 9, &v, &n));   /* a byte too many */
	proto_put_u32(b + 4, 2);
	memcpy(b + 8, "_pq_.a\0_pq_.b\0", 14);
	ck_assert(proto_parse_negotiate(b, 22, &v, &n));
	ck_assert_uint_eq(n, 2);
	ck_assert(!proto_parse_negotiate(b, 21, &v, &n));  /* last name unterminated */
	proto_put_u32(b + 4, 0xffffffffu);                 /* a count the body cannot hold */
	ck_assert(!proto_parse_negotiate(b, 22, &v, &n));
}
END_TEST

/* CancelRequests of 12 + N bytes: keys of 4 to 256 bytes (protocol 3.2). */
START_TEST(startup_cancel_key_lengths)
{
	uint8_t buf[PROTO_CANCEL_HEAD_LEN + PROTO_CANCEL_KEY_MAX + 8];
	struct proto_startup st;
	for (uint32_t klen = 0; klen <= PROTO_CANCEL_KEY_MAX + 2; klen++) {
		uint32_t len = PROTO_CANCEL_HEAD_LEN + klen;
		proto_put_u32(buf, len);
		proto_put_u32(buf + 4, PG_CANCEL_REQUEST_CODE);
		proto_put_u32(buf + 8, 7);
		for (uint32_t i = 0; i < klen; i++)
			buf[PROTO_CANCEL_HEAD_LEN + i] = (uint8_t)(i + 1);
		enum proto_startup_result r = proto_parse_startup(buf, len, &st);
		ck_assert_int_eq(st.kind, PROTO_STARTUP_CANCEL);
		if (klen < 4 || klen > 256) {
			ck_assert_int_eq(r, PROTO_STARTUP_RESULT_MALFORMED);
			continue;
		}
		ck_assert_int_eq(r, PROTO_STARTUP_RESULT_OK);
		ck_assert_uint_eq(st.cancel_pid, 7);
		ck_assert_uint_eq(st.cancel_key_len, klen);
		ck_assert_ptr_eq(st.cancel_key, buf + PROTO_CANCEL_HEAD_LEN);
		/* one byte short of the packet: more is needed */
		ck_assert_int_eq(proto_parse_startup(buf, len - 1, &st), PROTO_STARTUP_RESULT_NEED_MORE);
	}
}
END_TEST

/* Keys pgcat issues: 4 bytes for 3.0 clients, 32 for 3.2 ones, each
 * matched in full and only at its own length. */
START_TEST(cancel_keys_short_and_long)
{
	struct randpool rp;
	randpool_init(&rp);
	struct cancel_table t;
	ck_assert(cancel_table_init(&t, 4, 0, NULL, &rp));
	int a_obj, b_obj;
	struct client *a = (struct client *)(void *)&a_obj, *b = (struct client *)(void *)&b_obj;
	uint32_t pid_a, sec_a, pid_b, sec_b;
	uint8_t key_a[CANCEL_KEY_LONG_LEN], key_b[CANCEL_KEY_LONG_LEN];
	size_t len_a, len_b;
	ck_assert(cancel_key_assign(&t, a, CANCEL_KEY_SHORT, &pid_a, &sec_a, key_a, &len_a));
	ck_assert(cancel_key_assign(&t, b, CANCEL_KEY_LONG, &pid_b, &sec_b, key_b, &len_b));
	ck_assert_uint_eq(len_a, 4);
	ck_assert_uint_eq(len_b, 32);
	ck_assert_uint_eq(proto_get_u32(key_a), sec_a);
	/* the long key's layout: version, hops, peer id, route, secret */
	ck_assert_uint_eq(key_b[0], CANCEL_KEY_LAYOUT_V1);
	ck_assert_uint_eq(key_b[1], 0);
	ck_assert_uint_eq(key_b[2] | key_b[3], 0);
	ck_assert_uint_eq(proto_get_u32(key_b + 4), pid_b);
	ck_assert_uint_eq(proto_get_u32(key_b + 8), sec_b);
	ck_assert_ptr_eq(cancel_key_lookup(&t, pid_a, key_a, 4), a);
	ck_assert_ptr_eq(cancel_key_lookup(&t, pid_b, key_b, 32), b);
	/* the short key at another length, the long one cut to its secret */
	uint8_t longer[CANCEL_KEY_LONG_LEN] = { 0 };
	memcpy(longer, key_a, 4);
	ck_assert_ptr_null(cancel_key_lookup(&t, pid_a, longer, 32));
	ck_assert_ptr_null(cancel_key_lookup(&t, pid_b, key_b + 8, 4));
	/* lengths pgcat never issues */
	ck_assert_ptr_null(cancel_key_lookup(&t, pid_b, key_b, 3));
	ck_assert_ptr_null(cancel_key_lookup(&t, pid_b, key_b, 31));
	/* any one byte of the long key changed, but the hop counter (byte 1,
	 * which a forwarding peer counts up): nobody */
	for (size_t i = 0; i < 32; i++) {
		if (i == 1)
			continue;
		uint8_t k[CANCEL_KEY_LONG_LEN];
		memcpy(k, key_b, sizeof k);
		k[i] ^= 0x40;
		ck_assert_ptr_null(cancel_key_lookup(&t, pid_b, k, 32));
	}
	/* the route must be the pid it came with */
	ck_assert_ptr_null(cancel_key_lookup(&t, pid_a, key_b, 32));
	cancel_key_release(&t, pid_b);
	ck_assert_ptr_null(cancel_key_lookup(&t, pid_b, key_b, 32));
	ck_assert_ptr_eq(cancel_key_lookup(&t, pid_a, key_a, 4), a);
	cancel_table_free(&t);
	randpool_wipe(&rp);
}
END_TEST

START_TEST(error_roundtrip)
{
	uint8_t buf[256];
	struct pktbuf pb;
	pktbuf_init(&pb, buf, sizeof buf);
	pktbuf_error(&pb, "FATAL", "28P01", "password authentication failed for user \"x\"");
	ck_assert(!pb.failed);
	struct proto_frame f;
	ck_assert_int_eq(proto_frame_header(buf, pb.len, 1000, &f), PROTO_FRAME_OK);
	ck_assert_uint_eq(f.len + 1, pb.len);
	struct proto_error_fields e;
	ck_assert(proto_parse_error(buf + 5, f.len - 4, &e));
	ck_assert_str_eq(e.severity, "FATAL");
	ck_assert_str_eq(e.sqlstate, "28P01");
	ck_assert_str_eq(e.message, "password authentication failed for user \"x\"");
	/* truncated by one byte: no final terminator */
	ck_assert(!proto_parse_error(buf + 5, f.len - 5, &e));
}
END_TEST

START_TEST(pktbuf_overflow_is_sticky)
{
	uint8_t buf[8];
	struct pktbuf pb;
	pktbuf_init(&pb, buf, sizeof buf);
	pktbuf_query(&pb, "SELECT 1");
	ck_assert(pb.failed);
	pktbuf_put_u8(&pb, 1);
	ck_assert(pb.failed);
	pktbuf_init(&pb, buf, sizeof buf);
	pktbuf_ready_for_query(&pb, 'I');
	ck_assert(!pb.failed);
	ck_assert_uint_eq(pb.len, 6);
	ck_assert_int_eq(buf[0], 'Z');
	ck_assert_uint_eq(proto_get_u32(buf + 1), 5);
	ck_assert_int_eq(buf[5], 'I');
}
END_TEST

START_TEST(parameter_status_parse)
{
	const uint8_t ok[] = "TimeZone\0UTC";
	const char *n, *v;
	ck_assert(proto_parse_parameter_status(ok, sizeof ok, &n, &v));
	ck_assert_str_eq(n, "TimeZone");
	ck_assert_str_eq(v, "UTC");
	ck_assert(!proto_parse_parameter_status(ok, sizeof ok - 1, &n, &v));
	ck_assert(!proto_parse_parameter_status(ok, 9, &n, &v));
}
END_TEST

/* The message types each side may send, byte by byte: the reply pump
 * refuses a server's message of any other type (SPEC §10). */
START_TEST(message_types)
{
	const char *backend = "123ACDEGHIKNRSTVWZcdnstv", *frontend = "BCDEFHPQSXcdf";
	for (int b = 0; b < 256; b++) {
		bool be = b != 0 && strchr(backend, b) != NULL, fe = b != 0 && strchr(frontend, b) != NULL;
		ck_assert_msg(proto_backend_type_valid((uint8_t)b) == be, "backend type %d", b);
		ck_assert_msg(proto_frontend_type_valid((uint8_t)b) == fe, "frontend type %d", b);
	}
}
END_TEST

START_TEST(datarow_first_column)
{
	/* 2 columns: "64", NULL */
	const uint8_t two[] = { 0, 2, 0, 0, 0, 2, '6', '4', 0xff, 0xff, 0xff, 0xff };
	const char *v;
	size_t vl;
	ck_assert(proto_parse_datarow_first(two, sizeof two, &v, &vl));
	ck_assert_uint_eq(vl, 2);
	ck_assert(memcmp(v, "64", 2) == 0);
	/* first column NULL */
	const uint8_t null[] = { 0, 1, 0xff, 0xff, 0xff, 0xff };
	ck_assert(proto_parse_datarow_first(null, sizeof null, &v, &vl));
	ck_assert_ptr_null(v);
	ck_assert_uint_eq(vl, 0);
	/* no column; a length past the body; a negative length other than -1 */
	const uint8_t none[] = { 0, 0, 0, 0, 0, 0 };
	ck_assert(!proto_parse_datarow_first(none, sizeof none, &v, &vl));
	ck_assert(!proto_parse_datarow_first(two, 7, &v, &vl));
	const uint8_t neg[] = { 0, 1, 0xff, 0xff, 0xff, 0xfe };
	ck_assert(!proto_parse_datarow_first(neg, sizeof neg, &v, &vl));
	ck_assert(!proto_parse_datarow_first(two, 5, &v, &vl));
}
END_TEST

START_TEST(params_sync_statements)
{
	struct params c, s;
	params_init(&c);
	params_init(&s);
	ck_assert(params_set(&c, "TimeZone", "Europe/Paris", false));
	ck_assert(params_set(&s, "timezone", "UTC", false));
	ck_assert(params_set(&c, "application_name", "it's", false));
	ck_assert(params_set(&s, "application_name", "it's", false));
	ck_assert(params_set(&s, "search_path", "a, b", true));
	char *out;
	int n = params_build_sync(&c, &s, &out);
	ck_assert_int_eq(n, 2);
	ck_assert_str_eq(out, "SET TimeZone TO 'Europe/Paris';RESET search_path;");
	free(out);
	ck_assert(params_set(&c, "search_path", "\"My Schema\", public", true));
	ck_assert(params_set(&c, "application_name", "o'k", false));
	n = params_build_sync(&c, &s, &out);
	ck_assert_int_eq(n, 3);
	ck_assert_ptr_nonnull(strstr(out, "SET application_name TO 'o''k';"));
	ck_assert_ptr_nonnull(strstr(out, "SET search_path TO \"My Schema\", public;"));
	free(out);
	/* nothing to do: no string */
	n = params_build_sync(&c, &c, &out);
	ck_assert_int_eq(n, 0);
	ck_assert_ptr_null(out);
	params_clear(&c);
	params_clear(&s);
}
END_TEST

START_TEST(params_options_and_statements)
{
	struct params p;
	struct params_refusal why;
	params_init(&p);
	ck_assert(params_apply_options(&p, "-c search_path=app,public --statement-timeout=5s -cDateStyle=ISO\\ ,\\ MDY", &why));
	ck_assert_str_eq(params_get(&p, "search_path")->value, "app,public");
	ck_assert(!params_get(&p, "search_path")->raw);   /* a string, as PostgreSQL takes it */
	ck_assert_str_eq(params_get(&p, "statement_timeout")->value, "5s");
	ck_assert_str_eq(params_get(&p, "DateStyle")->value, "ISO , MDY");
	ck_assert(!params_apply_options(&p, "-c", &why));
	ck_assert(!params_apply_options(&p, "garbage", &why));

	const char *q1 = "  /* hi */ set Session search_path = \"x\", public ; select 1";
	ck_assert_int_eq(params_track_statement(&p, q1, strlen(q1), NULL), PARAMS_STMT_SET);
	ck_assert_str_eq(params_get(&p, "search_path")->value, "\"x\", public");
	const char *q2 = "SET LOCAL search_path TO y";
	ck_assert_int_eq(params_track_statement(&p, q2, strlen(q2), NULL), PARAMS_STMT_NONE);
	const char *q3 = "reset search_path";
	ck_assert_int_eq(params_track_statement(&p, q3, strlen(q3), NULL), PARAMS_STMT_RESET);
	ck_assert_ptr_null(params_get(&p, "search_path"));
	const char *q4 = "SELECT 'set search_path to x'";
	ck_assert_int_eq(params_track_statement(&p, q4, strlen(q4), NULL), PARAMS_STMT_NONE);
	const char *q5 = "SET myapp.tenant TO 'y'";
	ck_assert_int_eq(params_track_statement(&p, q5, strlen(q5), NULL), PARAMS_STMT_SET);
	ck_assert_str_eq(params_get(&p, "myapp.tenant")->value, "'y'");
	const char *q6 = "SET ROLE admin";   /* session state pgcat does not follow */
	ck_assert_int_eq(params_track_statement(&p, q6, strlen(q6), NULL), PARAMS_STMT_UNTRACKED);
	const char *q7 = "set time zone 'UTC'";
	ck_assert_int_eq(params_track_statement(&p, q7, strlen(q7), NULL), PARAMS_STMT_SET);
	/* a reported setting given as a plain string: kept as the value */
	ck_assert_str_eq(params_get(&p, "TimeZone")->value, "UTC");
	ck_assert(!params_get(&p, "TimeZone")->raw);
	const char *q8 = "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE";
	ck_assert_int_eq(params_track_statement(&p, q8, strlen(q8), NULL), PARAMS_STMT_NONE);
	/* RESET goes back to the startup value; RESET ALL to all of them */
	struct params startup;
	params_init(&startup);
	ck_assert(params_set(&startup, "search_path", "app", true));
	const char *q9 = "SET search_path = other";
	ck_assert_int_eq(params_track_statement(&p, q9, strlen(q9), &startup), PARAMS_STMT_SET);
	const char *q10 = "RESET search_path";
	ck_assert_int_eq(params_track_statement(&p, q10, strlen(q10), &startup), PARAMS_STMT_RESET);
	ck_assert_str_eq(params_get(&p, "search_path")->value, "app");
	const char *q11 = "DISCARD ALL";
	ck_assert_int_eq(params_track_statement(&p, q11, strlen(q11), NULL), PARAMS_STMT_RESET_ALL);
	ck_assert_ptr_null(params_get(&p, "search_path"));
	ck_assert_ptr_null(params_get(&p, "myapp.tenant"));
	ck_assert_ptr_nonnull(params_get(&p, "TimeZone"));   /* reported: the server tells */
	params_clear(&startup);
	params_clear(&p);
}
END_TEST

START_TEST(params_digest_is_order_independent)
{
	struct params a, b;
	params_init(&a);
	params_init(&b);
	ck_assert(params_set(&a, "TimeZone", "UTC", false));
	ck_assert(params_set(&a, "application_name", "x", false));
	ck_assert(params_set(&b, "application_name", "x", false));
	ck_assert(!params_same(&a, &b));
	ck_assert(params_set(&b, "timezone", "UTC", false));
	ck_assert(params_same(&a, &b));
	ck_assert(params_set(&b, "application_name", "y", false));
	ck_assert(!params_same(&a, &b));
	params_remove(&b, "application_name");
	params_remove(&a, "application_name");
	ck_assert(params_same(&a, &b));
	params_copy(&b, &a);
	ck_assert(params_same(&a, &b));
	params_clear(&a);
	params_clear(&b);
	ck_assert(params_same(&a, &b));
}
END_TEST

/* A login's session: the client's own values win, the defaults fill the
 * rest, and the result is the set that params_set would have built. */
START_TEST(params_add_missing_shares_defaults)
{
	struct params defaults, client, expect;
	params_init(&defaults);
	params_init(&client);
	params_init(&expect);
	ck_assert(params_set(&defaults, "TimeZone", "UTC", false));
	ck_assert(params_set(&defaults, "DateStyle", "ISO, MDY", false));
	ck_assert(params_set(&defaults, "application_name", "", false));
	ck_assert(params_set(&client, "application_name", "app1", false));
	ck_assert(params_set(&client, "search_path", "a, b", true));
	struct params before;
	params_init(&before);
	params_copy(&before, &client);

	ck_assert(params_add_missing(&client, &defaults));
	ck_assert_uint_eq(params_count(&client), 4);
	ck_assert_str_eq(params_get(&client, "application_name")->value, "app1");
	ck_assert_str_eq(params_get(&client, "timezone")->value, "UTC");
	ck_assert_str_eq(params_get(&client, "datestyle")->value, "ISO, MDY");
	/* Shared, not copied: the very entry of the defaults. */
	ck_assert_ptr_eq(params_get(&client, "TimeZone"), params_get(&defaults, "TimeZone"));
	/* The digest is that of the same set built one value at a time. */
	ck_assert(params_set(&expect, "DateStyle", "ISO, MDY", false));
	ck_assert(params_set(&expect, "search_path", "a, b", true));
	ck_assert(params_set(&expect, "TimeZone", "UTC", false));
	ck_assert(params_set(&expect, "application_name", "app1", false));
	ck_assert(params_same(&client, &expect));
	/* The copy taken before is untouched (copy-on-write). */
	ck_assert_uint_eq(params_count(&before), 2);
	ck_assert_ptr_null(params_get(&before, "TimeZone"));
	/* Adding again adds nothing; the defaults outlive the client's table. */
	ck_assert(params_add_missing(&client, &defaults));
	ck_assert_uint_eq(params_count(&client), 4);
	params_clear(&defaults);
	ck_assert_str_eq(params_get(&client, "timezone")->value, "UTC");
	/* From an empty set: the defaults' table is not shared, its entries are. */
	struct params empty;
	params_init(&empty);
	ck_assert(params_add_missing(&empty, &client));
	ck_assert(params_same(&empty, &client));
	params_clear(&empty);
	params_clear(&client);
	params_clear(&expect);
	params_clear(&before);
}
END_TEST

/* Copies share one table; a change to one copy leaves the others as they were. */
START_TEST(params_copy_on_write)
{
	struct params a, b, c;
	params_init(&a);
	params_init(&b);
	params_init(&c);
	ck_assert(params_set(&a, "TimeZone", "UTC", false));
	ck_assert(params_set(&a, "application_name", "x", false));
	params_copy(&b, &a);
	params_copy(&c, &a);
	ck_assert_ptr_eq(a.t, b.t);
	ck_assert(params_set(&b, "timezone", "Europe/Paris", false));
	ck_assert_ptr_ne(a.t, b.t);
	ck_assert_str_eq(params_get(&a, "timezone")->value, "UTC");
	ck_assert_str_eq(params_get(&c, "timezone")->value, "UTC");
	ck_assert_str_eq(params_get(&b, "TIMEZONE")->value, "Europe/Paris");
	/* The name keeps its first spelling. */
	ck_assert_str_eq(params_get(&b, "timezone")->name, "TimeZone");
	ck_assert(!params_same(&a, &b));
	ck_assert(params_same(&a, &c));
	params_remove(&c, "application_name");
	ck_assert_ptr_nonnull(params_get(&a, "application_name"));
	ck_assert_ptr_null(params_get(&c, "application_name"));
	ck_assert_uint_eq(params_count(&a), 2);
	ck_assert_uint_eq(params_count(&c), 1);
	/* Setting the value it already has changes nothing and shares on. */
	params_copy(&c, &a);
	ck_assert(params_set(&c, "TimeZone", "UTC", false));
	ck_assert_ptr_eq(a.t, c.t);
	/* Full tables: replacing a value still works, adding does not. */
	struct params f;
	params_init(&f);
	char name[32];
	for (int i = 0; i < PARAMS_MAX; i++) {
		snprintf(name, sizeof name, "my.p%d", i);
		ck_assert(params_set(&f, name, "1", false));
	}
	ck_assert(!params_set(&f, "my.extra", "1", false));
	ck_assert(params_set(&f, "my.p0", "2", false));
	params_copy(&b, &f);
	ck_assert(params_set(&f, "my.p1", "3", false));
	ck_assert_str_eq(params_get(&b, "my.p1")->value, "1");
	params_clear(&f);
	params_clear(&a);
	params_clear(&b);
	params_clear(&c);
}
END_TEST

START_TEST(params_canonical_values)
{
	char out[64];
	/* client_encoding: PostgreSQL's names, whatever the case, punctuation or alias */
	static const char *const enc[][2] = {
		{ "utf8", "UTF8" }, { "UTF-8", "UTF8" }, { "utf_8", "UTF8" }, { "Unicode", "UTF8" }, { "UNICODE", "UNICODE" },
		{ "euc-jp", "EUC_JP" }, { "eucjp", "EUC_JP" }, { "EUC_JP", "EUC_JP" },
		{ "latin1", "LATIN1" }, { "ISO-8859-1", "LATIN1" }, { "iso8859_15", "LATIN9" },
		{ "iso-8859-5", "ISO_8859_5" }, { "win", "WIN1251" }, { "Windows-1252", "WIN1252" },
		{ "koi8", "KOI8R" }, { "ShiftJIS", "SJIS" }, { "win932", "SJIS" }, { "sql_ascii", "SQL_ASCII" },
		{ "euc_jis_2004", "EUC_JIS_2004" }, { "TCVN5712", "WIN1258" }, { "mule-internal", "MULE_INTERNAL" },
	};
	for (size_t i = 0; i < sizeof enc / sizeof *enc; i++) {
		ck_assert_msg(params_canonical("client_encoding", enc[i][0], NULL, out, sizeof out), "%s", enc[i][0]);
		ck_assert_str_eq(out, enc[i][1]);
	}
	ck_assert(!params_canonical("client_encoding", "wat", NULL, out, sizeof out));
	ck_assert(!params_canonical("client_encoding", "utf", NULL, out, sizeof out));
	ck_assert(!params_canonical("client_encoding", "", NULL, out, sizeof out));
	ck_assert(!params_canonical("client_encoding", "utf8", NULL, out, 4));   /* does not fit */

	/* DateStyle: style and order; what is not given stays as it was */
	static const char *const ds[][3] = {
		{ "iso", "ISO, MDY", "ISO, MDY" }, { "iso, mdy", NULL, "ISO, MDY" },
		{ "sql", "ISO, DMY", "SQL, DMY" }, { "dmy", "SQL, MDY", "SQL, DMY" },
		{ "German", "ISO, MDY", "German, DMY" }, { "german, ymd", NULL, "German, YMD" },
		{ "ymd, german", NULL, "German, YMD" }, { "Postgres, European", NULL, "Postgres, DMY" },
		{ " postgresql , us ", NULL, "Postgres, MDY" }, { "NonEuropean", "SQL, DMY", "SQL, MDY" },
		{ "iso,iso", NULL, "ISO, MDY" },
	};
	for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) {
		ck_assert_msg(params_canonical("DateStyle", ds[i][0], ds[i][1], out, sizeof out), "%s", ds[i][0]);
		ck_assert_str_eq(out, ds[i][2]);
	}
	ck_assert(!params_canonical("datestyle", "iso, sql", NULL, out, sizeof out));   /* conflict */
	ck_assert(!params_canonical("datestyle", "dmy, mdy", NULL, out, sizeof out));
	ck_assert(!params_canonical("datestyle", "default", NULL, out, sizeof out));
	ck_assert(!params_canonical("datestyle", "iso,", NULL, out, sizeof out));

	ck_assert(params_canonical("IntervalStyle", "SQL_Standard", NULL, out, sizeof out));
	ck_assert_str_eq(out, "sql_standard");
	ck_assert(!params_canonical("IntervalStyle", "sql", NULL, out, sizeof out));
	static const char *const on[] = { "on", "ON", "true", "t", "Tru", "yes", "y", "1" };
	static const char *const off[] = { "off", "of", "OFF", "false", "f", "no", "N", "0" };
	for (size_t i = 0; i < 8; i++) {
		ck_assert(params_canonical("standard_conforming_strings", on[i], NULL, out, sizeof out));
		ck_assert_str_eq(out, "on");
		ck_assert(params_canonical("default_transaction_read_only", off[i], NULL, out, sizeof out));
		ck_assert_str_eq(out, "off");
	}
	ck_assert(!params_canonical("standard_conforming_strings", "o", NULL, out, sizeof out));
	ck_assert(!params_canonical("standard_conforming_strings", "onn", NULL, out, sizeof out));
	ck_assert(!params_canonical("standard_conforming_strings", "2", NULL, out, sizeof out));
	/* others are left as given */
	ck_assert(!params_canonical("TimeZone", "utc", NULL, out, sizeof out));
	ck_assert(!params_canonical("application_name", "x", NULL, out, sizeof out));

	/* a login: the client's values in PostgreSQL's spelling, its DateStyle
	 * completed from the server's */
	struct params c, d;
	params_init(&c);
	params_init(&d);
	ck_assert(params_set(&d, "DateStyle", "SQL, DMY", false));
	ck_assert(params_set(&c, "client_encoding", "utf-8", false));
	ck_assert(params_set(&c, "DateStyle", "iso", false));
	ck_assert(params_set(&c, "TimeZone", "utc", false));
	ck_assert(params_set(&c, "work_mem", "on", false));
	struct params same;
	params_init(&same);
	ck_assert(params_set(&same, "client_encoding", "UTF8", false));
	ck_assert(params_set(&same, "DateStyle", "ISO, DMY", false));
	ck_assert(params_set(&same, "TimeZone", "utc", false));
	ck_assert(params_set(&same, "work_mem", "on", false));
	params_canonicalize(&c, &d);
	ck_assert_str_eq(params_get(&c, "client_encoding")->value, "UTF8");
	ck_assert_str_eq(params_get(&c, "DateStyle")->value, "ISO, DMY");
	ck_assert_str_eq(params_get(&c, "TimeZone")->value, "utc");
	ck_assert_str_eq(params_get(&c, "work_mem")->value, "on");
	ck_assert(params_same(&c, &same));   /* the digest follows */

	/* a SET that PostgreSQL would not report (the value does not change)
	 * leaves the set, and so its digest, as it was */
	static const char *const sets[] = {
		"SET client_encoding TO 'utf8'", "set client_encoding = Unicode", "SET client_encoding TO \"utf-8\"",
		"SET DateStyle TO iso", "SET datestyle = 'ISO, dmy'", "SET DateStyle TO iso, dmy", "SET TimeZone TO 'utc'",
	};
	for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
		uint64_t before = c.digest;
		ck_assert_int_eq(params_track_statement(&c, sets[i], strlen(sets[i]), NULL), PARAMS_STMT_SET);
		if (strstr(sets[i], "\"") == NULL)
			ck_assert_msg(c.digest == before, "%s", sets[i]);
	}
	/* a quoted identifier: left as SQL until the server reports */
	ck_assert(params_get(&c, "client_encoding")->raw);
	const char *q = "SET client_encoding = 'euc-jp'";
	ck_assert_int_eq(params_track_statement(&c, q, strlen(q), NULL), PARAMS_STMT_SET);
	ck_assert_str_eq(params_get(&c, "client_encoding")->value, "EUC_JP");
	ck_assert(!params_get(&c, "client_encoding")->raw);
	q = "SET DateStyle = German";
	ck_assert_int_eq(params_track_statement(&c, q, strlen(q), NULL), PARAMS_STMT_SET);
	ck_assert_str_eq(params_get(&c, "DateStyle")->value, "German, DMY");
	q = "SET TimeZone = E'UTC'";   /* not a plain literal: kept as SQL */
	ck_assert_int_eq(params_track_statement(&c, q, strlen(q), NULL), PARAMS_STMT_SET);
	ck_assert(params_get(&c, "TimeZone")->raw);
	q = "SET application_name = 'it''s'";
	ck_assert_int_eq(params_track_statement(&c, q, strlen(q), NULL), PARAMS_STMT_SET);
	ck_assert_str_eq(params_get(&c, "application_name")->value, "it's");
	q = "SET standard_conforming_strings = true";
	ck_assert_int_eq(params_track_statement(&c, q, strlen(q), NULL), PARAMS_STMT_SET);
	ck_assert_str_eq(params_get(&c, "standard_conforming_strings")->value, "on");
	params_clear(&c);
	params_clear(&d);
	params_clear(&same);
}
END_TEST

Suite *proto_suite(void)
{
	Suite *s = suite_create("proto");
	TCase *tc = tcase_create("framing");
	tcase_add_test(tc, frame_needs_five_bytes);
	tcase_add_test(tc, frame_length_edges);
	tcase_add_test(tc, startup_normal);
	tcase_add_test(tc, startup_bad);
	tcase_add_test(tc, startup_special_codes);
	tcase_add_test(tc, startup_minor_versions);
	tcase_add_test(tc, negotiation);
	tcase_add_test(tc, negotiate_parse);
	tcase_add_test(tc, startup_cancel_key_lengths);
	tcase_add_test(tc, cancel_keys_short_and_long);
	tcase_add_test(tc, error_roundtrip);
	tcase_add_test(tc, pktbuf_overflow_is_sticky);
	tcase_add_test(tc, parameter_status_parse);
	tcase_add_test(tc, datarow_first_column);
	tcase_add_test(tc, message_types);
	suite_add_tcase(s, tc);
	TCase *tp = tcase_create("params");
	tcase_add_test(tp, params_sync_statements);
	tcase_add_test(tp, params_options_and_statements);
	tcase_add_test(tp, params_digest_is_order_independent);
	tcase_add_test(tp, params_copy_on_write);
	tcase_add_test(tp, params_add_missing_shares_defaults);
	tcase_add_test(tp, params_canonical_values);
	suite_add_tcase(s, tp);
	return s;
}
