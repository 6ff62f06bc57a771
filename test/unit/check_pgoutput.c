/* SPDX-License-Identifier: MIT */
/* pgoutput: the logical replication stream's messages read field by
 * field (every kind of protocol version 1), the walsender's wrapping, the
 * standby status update; and what is refused: every message cut short at
 * every length, bytes left over, unknown types, bad value kinds, more
 * columns than the room given. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "pgoutput.h"

struct msg {
	uint8_t b[512];
	size_t n;
};

static void put(struct msg *m, const void *p, size_t n)
{
	ck_assert_uint_le(m->n + n, sizeof m->b);
	memcpy(m->b + m->n, p, n);
	m->n += n;
}
static void p8(struct msg *m, uint8_t v) { put(m, &v, 1); }
static void p16(struct msg *m, uint16_t v) { p8(m, (uint8_t)(v >> 8)); p8(m, (uint8_t)v); }
static void p32(struct msg *m, uint32_t v) { p16(m, (uint16_t)(v >> 16)); p16(m, (uint16_t)v); }
static void p64(struct msg *m, uint64_t v) { p32(m, (uint32_t)(v >> 32)); p32(m, (uint32_t)v); }
static void pstr(struct msg *m, const char *s) { put(m, s, strlen(s) + 1); }
static void ptext(struct msg *m, const char *s) { p8(m, 't'); p32(m, (uint32_t)strlen(s)); put(m, s, strlen(s)); }

static struct pgoutput_column cols[8];
static struct pgoutput_value newv[8], oldv[8];
static uint32_t relids[4];
static const struct pgoutput_room room = { cols, 8, newv, oldv, 8, relids, 4 };

static struct pgoutput_msg parse_ok(const struct msg *m)
{
	struct pgoutput_msg out;
	enum pgoutput_error e = pgoutput_parse(m->b, m->n, &room, &out);
	ck_assert_msg(e == PGOUTPUT_OK, "%s", pgoutput_error_text(e));
	return out;
}

/* Every cut of a valid message is refused as short, one more byte as trailing. */
static void cuts_refused(const struct msg *m)
{
	struct pgoutput_msg out;
	for (size_t n = 0; n < m->n; n++) {
		uint8_t *copy = malloc(n ? n : 1);   /* (exactly n bytes: ASan sees any read past them) */
		ck_assert_ptr_nonnull(copy);
		memcpy(copy, m->b, n);
		enum pgoutput_error e = pgoutput_parse(copy, n, &room, &out);
		ck_assert_msg(e == PGOUTPUT_SHORT, "cut at %zu of %zu: %s", n, m->n,
			      pgoutput_error_text(e));
		free(copy);
	}
	struct msg longer = *m;
	p8(&longer, 0);
	ck_assert_int_eq(pgoutput_parse(longer.b, longer.n, &room, &out), PGOUTPUT_TRAILING);
}

START_TEST(test_transaction_messages)
{
	struct msg m = { .n = 0 };
	p8(&m, 'B'); p64(&m, 0x16B3748ULL); p64(&m, 123456789); p32(&m, 731);
	struct pgoutput_msg b = parse_ok(&m);
	ck_assert_int_eq(b.kind, PGOUTPUT_BEGIN);
	ck_assert_uint_eq(b.u.begin.final_lsn, 0x16B3748ULL);
	ck_assert_int_eq(b.u.begin.commit_time, 123456789);
	ck_assert_uint_eq(b.u.begin.xid, 731);
	cuts_refused(&m);

	m.n = 0;
	p8(&m, 'C'); p8(&m, 0); p64(&m, 0x16B3748ULL); p64(&m, 0x16B3778ULL); p64(&m, 123456790);
	struct pgoutput_msg c = parse_ok(&m);
	ck_assert_int_eq(c.kind, PGOUTPUT_COMMIT);
	ck_assert_uint_eq(c.u.commit.commit_lsn, 0x16B3748ULL);
	ck_assert_uint_eq(c.u.commit.end_lsn, 0x16B3778ULL);
	cuts_refused(&m);

	m.n = 0;
	p8(&m, 'O'); p64(&m, 42); pstr(&m, "node_a");
	struct pgoutput_msg o = parse_ok(&m);
	ck_assert_str_eq(o.u.origin.name, "node_a");
	cuts_refused(&m);

	m.n = 0;
	p8(&m, 'Y'); p32(&m, 16400); pstr(&m, "public"); pstr(&m, "mood");
	struct pgoutput_msg y = parse_ok(&m);
	ck_assert_uint_eq(y.u.type.oid, 16400);
	ck_assert_str_eq(y.u.type.name, "mood");
	cuts_refused(&m);

	m.n = 0;
	p8(&m, 'M'); p8(&m, 1); p64(&m, 99); pstr(&m, "pgcat"); p32(&m, 3); put(&m, "a\0b", 3);
	struct pgoutput_msg mm = parse_ok(&m);
	ck_assert_str_eq(mm.u.message.prefix, "pgcat");
	ck_assert_uint_eq(mm.u.message.len, 3);
	ck_assert_int_eq(memcmp(mm.u.message.content, "a\0b", 3), 0);
	cuts_refused(&m);
}
END_TEST

START_TEST(test_relation_and_changes)
{
	struct msg m = { .n = 0 };
	p8(&m, 'R'); p32(&m, 16385); pstr(&m, "public"); pstr(&m, "accounts"); p8(&m, 'd'); p16(&m, 3);
	p8(&m, 1); pstr(&m, "id"); p32(&m, 20); p32(&m, 0xffffffffu);
	p8(&m, 0); pstr(&m, "owner"); p32(&m, 2950); p32(&m, 0xffffffffu);
	p8(&m, 0); pstr(&m, "note"); p32(&m, 1043); p32(&m, 104);
	struct pgoutput_msg r = parse_ok(&m);
	ck_assert_uint_eq(r.u.relation.relid, 16385);
	ck_assert_str_eq(r.u.relation.nspname, "public");
	ck_assert_str_eq(r.u.relation.relname, "accounts");
	ck_assert_int_eq(r.u.relation.replica_identity, 'd');
	ck_assert_uint_eq(r.u.relation.n_columns, 3);
	ck_assert(r.u.relation.columns[0].key && !r.u.relation.columns[1].key);
	ck_assert_str_eq(r.u.relation.columns[1].name, "owner");
	ck_assert_uint_eq(r.u.relation.columns[1].type_oid, 2950);
	ck_assert_int_eq(r.u.relation.columns[0].typmod, -1);
	ck_assert_int_eq(r.u.relation.columns[2].typmod, 104);
	cuts_refused(&m);

	m.n = 0;   /* INSERT (42, NULL, 'hi') */
	p8(&m, 'I'); p32(&m, 16385); p8(&m, 'N'); p16(&m, 3); ptext(&m, "42"); p8(&m, 'n'); ptext(&m, "hi");
	struct pgoutput_msg ins = parse_ok(&m);
	ck_assert_uint_eq(ins.u.change.relid, 16385);
	ck_assert_int_eq(ins.u.change.old_kind, 0);
	ck_assert_uint_eq(ins.u.change.new_tuple.n, 3);
	ck_assert_int_eq(ins.u.change.new_tuple.values[0].kind, PGOUTPUT_TEXT);
	ck_assert_uint_eq(ins.u.change.new_tuple.values[0].len, 2);
	ck_assert_int_eq(memcmp(ins.u.change.new_tuple.values[0].data, "42", 2), 0);
	ck_assert_int_eq(ins.u.change.new_tuple.values[1].kind, PGOUTPUT_NULL);
	cuts_refused(&m);

	m.n = 0;   /* UPDATE with the old key, a TOASTed value unchanged */
	p8(&m, 'U'); p32(&m, 16385); p8(&m, 'K'); p16(&m, 3); ptext(&m, "42"); p8(&m, 'n'); p8(&m, 'n');
	p8(&m, 'N'); p16(&m, 3); ptext(&m, "43"); p8(&m, 'u'); ptext(&m, "");
	struct pgoutput_msg up = parse_ok(&m);
	ck_assert_int_eq(up.u.change.old_kind, 'K');
	ck_assert_uint_eq(up.u.change.old_tuple.n, 3);
	ck_assert_int_eq(memcmp(up.u.change.old_tuple.values[0].data, "42", 2), 0);
	ck_assert_int_eq(memcmp(up.u.change.new_tuple.values[0].data, "43", 2), 0);
	ck_assert_int_eq(up.u.change.new_tuple.values[1].kind, PGOUTPUT_UNCHANGED);
	ck_assert_int_eq(up.u.change.new_tuple.values[2].kind, PGOUTPUT_TEXT);
	ck_assert_uint_eq(up.u.change.new_tuple.values[2].len, 0);
	cuts_refused(&m);

	m.n = 0;   /* UPDATE that kept its key: the new tuple only */
	p8(&m, 'U'); p32(&m, 16385); p8(&m, 'N'); p16(&m, 1); ptext(&m, "7");
	struct pgoutput_msg up2 = parse_ok(&m);
	ck_assert_int_eq(up2.u.change.old_kind, 0);
	ck_assert_uint_eq(up2.u.change.new_tuple.n, 1);
	cuts_refused(&m);

	m.n = 0;   /* DELETE with the whole old row (REPLICA IDENTITY FULL) */
	p8(&m, 'D'); p32(&m, 16385); p8(&m, 'O'); p16(&m, 2); ptext(&m, "42"); ptext(&m, "x");
	struct pgoutput_msg del = parse_ok(&m);
	ck_assert_int_eq(del.u.change.old_kind, 'O');
	ck_assert_uint_eq(del.u.change.old_tuple.n, 2);
	ck_assert_uint_eq(del.u.change.new_tuple.n, 0);
	cuts_refused(&m);

	m.n = 0;   /* UPDATE with the whole old row (REPLICA IDENTITY FULL) */
	p8(&m, 'U'); p32(&m, 16385); p8(&m, 'O'); p16(&m, 1); ptext(&m, "6"); p8(&m, 'N'); p16(&m, 1); ptext(&m, "7");
	struct pgoutput_msg up3 = parse_ok(&m);
	ck_assert_int_eq(up3.u.change.old_kind, 'O');
	ck_assert_int_eq(memcmp(up3.u.change.old_tuple.values[0].data, "6", 1), 0);
	cuts_refused(&m);

	m.n = 0;   /* DELETE by key */
	p8(&m, 'D'); p32(&m, 16385); p8(&m, 'K'); p16(&m, 1); ptext(&m, "42");
	struct pgoutput_msg delk = parse_ok(&m);
	ck_assert_int_eq(delk.u.change.old_kind, 'K');
	cuts_refused(&m);

	m.n = 0;   /* TRUNCATE of no relation */
	p8(&m, 'T'); p32(&m, 0); p8(&m, 0);
	ck_assert_uint_eq(parse_ok(&m).u.truncate.n_relids, 0);

	m.n = 0;
	p8(&m, 'T'); p32(&m, 2); p8(&m, 1); p32(&m, 16385); p32(&m, 16390);
	struct pgoutput_msg tr = parse_ok(&m);
	ck_assert_uint_eq(tr.u.truncate.n_relids, 2);
	ck_assert_uint_eq(tr.u.truncate.options, 1);
	ck_assert_uint_eq(tr.u.truncate.relids[1], 16390);
	cuts_refused(&m);
}
END_TEST

START_TEST(test_refused)
{
	struct pgoutput_msg out;
	struct msg m = { .n = 0 };
	p8(&m, 'S'); p32(&m, 1); p8(&m, 1);   /* Stream Start: protocol version 2 */
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_UNKNOWN);
	m.n = 0;
	p8(&m, 'I'); p32(&m, 1); p8(&m, 'N'); p16(&m, 1); p8(&m, 'b'); p32(&m, 1); p8(&m, 0);   /* binary value */
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_MALFORMED);
	m.n = 0;
	p8(&m, 'I'); p32(&m, 1); p8(&m, 'K'); p16(&m, 0);   /* an insert has no old tuple */
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_MALFORMED);
	m.n = 0;
	p8(&m, 'D'); p32(&m, 1); p8(&m, 'N'); p16(&m, 0);   /* a delete has no new tuple */
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_MALFORMED);
	m.n = 0;
	p8(&m, 'I'); p32(&m, 1); p8(&m, 'N'); p16(&m, 9);   /* more values than the room */
	for (int i = 0; i < 9; i++)
		p8(&m, 'n');
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_TOO_MANY);
	m.n = 0;
	p8(&m, 'U'); p32(&m, 1); p8(&m, 'K'); p16(&m, 0); p8(&m, 'K'); p16(&m, 0);   /* no new tuple after the old */
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_MALFORMED);
	m.n = 0;
	p8(&m, 'R'); p32(&m, 1); pstr(&m, "s"); pstr(&m, "t"); p8(&m, 'd'); p16(&m, 9);   /* more columns than the room */
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_TOO_MANY);
	m.n = 0;
	p8(&m, 'U'); p32(&m, 1); p8(&m, 'O'); p16(&m, 9);   /* an old tuple of more values than the room */
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_TOO_MANY);
	m.n = 0;
	p8(&m, 'T'); p32(&m, 5); p8(&m, 0);
	for (int i = 0; i < 5; i++)
		p32(&m, (uint32_t)i);
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_TOO_MANY);
	m.n = 0;
	p8(&m, 'I'); p32(&m, 1); p8(&m, 'N'); p16(&m, 1); p8(&m, 't'); p32(&m, 0xfffffff0u);   /* a length past the end */
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_SHORT);
	m.n = 0;
	p8(&m, 'R'); p32(&m, 1); put(&m, "public", 6);   /* a string without its NUL */
	ck_assert_int_eq(pgoutput_parse(m.b, m.n, &room, &out), PGOUTPUT_SHORT);
	ck_assert_int_eq(pgoutput_parse(m.b, 0, &room, &out), PGOUTPUT_SHORT);
	ck_assert_str_eq(pgoutput_error_text(PGOUTPUT_TOO_MANY), "more columns or relations than allowed");
}
END_TEST

START_TEST(test_wal_wrapping_and_status)
{
	struct msg m = { .n = 0 };
	p8(&m, 'w'); p64(&m, 0x100); p64(&m, 0x200); p64(&m, 777); p8(&m, 'B'); p64(&m, 1); p64(&m, 2); p32(&m, 3);
	struct pgoutput_wal w;
	ck_assert(pgoutput_wal_parse(m.b, m.n, &w));
	ck_assert_int_eq(w.kind, PGOUTPUT_WAL_DATA);
	ck_assert_uint_eq(w.start_lsn, 0x100);
	ck_assert_uint_eq(w.end_lsn, 0x200);
	ck_assert_int_eq(w.send_time, 777);
	ck_assert_uint_eq(w.len, 21);
	struct pgoutput_msg b;
	ck_assert_int_eq(pgoutput_parse(w.data, w.len, &room, &b), PGOUTPUT_OK);
	ck_assert_uint_eq(b.u.begin.xid, 3);
	ck_assert(!pgoutput_wal_parse(m.b, 24, &w));   /* its header cut */
	m.n = 0;
	p8(&m, 'k'); p64(&m, 0x300); p64(&m, 888); p8(&m, 1);
	ck_assert(pgoutput_wal_parse(m.b, m.n, &w));
	ck_assert_int_eq(w.kind, PGOUTPUT_WAL_KEEPALIVE);
	ck_assert_uint_eq(w.end_lsn, 0x300);
	ck_assert(w.reply_now);
	ck_assert(!pgoutput_wal_parse(m.b, m.n - 1, &w));
	m.b[m.n] = 0;
	ck_assert(!pgoutput_wal_parse(m.b, m.n + 1, &w));   /* a byte too many */
	m.n = 0;
	p8(&m, 'w'); p64(&m, 1); p64(&m, 2); p64(&m, 3);    /* an XLogData with no message */
	ck_assert(pgoutput_wal_parse(m.b, m.n, &w));
	ck_assert_uint_eq(w.len, 0);
	ck_assert_int_eq(pgoutput_parse(w.data, w.len, &room, &b), PGOUTPUT_SHORT);
	m.b[0] = 'x';
	ck_assert(!pgoutput_wal_parse(m.b, m.n, &w));
	ck_assert(!pgoutput_wal_parse(m.b, 0, &w));
	uint8_t st[PGOUTPUT_STATUS_LEN];
	pgoutput_status_update(st, 0x0102030405060708ULL, 0x10, 0x20, -1, true);
	ck_assert_int_eq(st[0], 'r');
	ck_assert_int_eq(st[1], 0x01);
	ck_assert_int_eq(st[8], 0x08);
	ck_assert_int_eq(st[16], 0x10);
	ck_assert_int_eq(st[24], 0x20);
	ck_assert_int_eq(st[25], 0xff);
	ck_assert_int_eq(st[33], 1);
}
END_TEST

Suite *pgoutput_suite(void)
{
	Suite *s = suite_create("pgoutput");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_transaction_messages);
	tcase_add_test(tc, test_relation_and_changes);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_wal_wrapping_and_status);
	suite_add_tcase(s, tc);
	return s;
}
