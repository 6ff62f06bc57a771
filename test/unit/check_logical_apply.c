/* SPDX-License-Identifier: MIT */
/* logical_apply: replicated changes as idempotent statements: inserts and
 * whole-row updates as upserts on the key, updates with unchanged TOASTed
 * values as UPDATE ... WHERE key, deletes by key; quoting of names and
 * values; what is refused (no key, a changed key, tuples that do not
 * match, too long). */
#include <check.h>
#include <string.h>

#include "check_suites.h"
#include "logical_apply.h"

static const struct pgoutput_column cols[] = {
	{ true, "id", 20, -1 }, { false, "owner", 25, -1 }, { false, "no\"te", 25, -1 },
};
static const struct logical_rel rel = { "public", "acc\"ounts", 'd', cols, 3 };

static struct pgoutput_value text(const char *s)
{
	return (struct pgoutput_value){ PGOUTPUT_TEXT, (const uint8_t *)s, (uint32_t)strlen(s) };
}
static const struct pgoutput_value null_v = { PGOUTPUT_NULL, NULL, 0 };
static const struct pgoutput_value unchanged_v = { PGOUTPUT_UNCHANGED, NULL, 0 };

static enum logical_apply_result apply(enum pgoutput_kind kind, char old_kind, struct pgoutput_value *oldv,
				       uint16_t n_old, struct pgoutput_value *newv, uint16_t n_new, char *out, size_t cap)
{
	struct pgoutput_msg m = { .kind = kind };
	m.u.change.relid = 1;
	m.u.change.old_kind = old_kind;
	m.u.change.old_tuple = (struct pgoutput_tuple){ n_old, oldv };
	m.u.change.new_tuple = (struct pgoutput_tuple){ n_new, newv };
	size_t len;
	enum logical_apply_result r = logical_apply_sql(&m, &rel, out, cap, &len);
	if (r == LOGICAL_APPLY_OK)
		ck_assert_uint_eq(len, strlen(out));
	return r;
}

START_TEST(test_statements)
{
	char out[512];
	struct pgoutput_value row[3] = { text("42"), text("it's \\ fine"), null_v };
	ck_assert_int_eq(apply(PGOUTPUT_INSERT, 0, NULL, 0, row, 3, out, sizeof out), LOGICAL_APPLY_OK);
	ck_assert_str_eq(out, "INSERT INTO \"public\".\"acc\"\"ounts\" (\"id\", \"owner\", \"no\"\"te\") VALUES "
			      "(E'42', E'it''s \\\\ fine', NULL) ON CONFLICT (\"id\") DO UPDATE SET \"owner\" = "
			      "EXCLUDED.\"owner\", \"no\"\"te\" = EXCLUDED.\"no\"\"te\"");
	/* an update of the whole row: the same upsert */
	ck_assert_int_eq(apply(PGOUTPUT_UPDATE, 0, NULL, 0, row, 3, out, sizeof out), LOGICAL_APPLY_OK);
	ck_assert(strncmp(out, "INSERT INTO", 11) == 0);
	/* an old key sent, the same key (its key column was TOASTed, say) */
	struct pgoutput_value old[3] = { text("42"), null_v, null_v };
	ck_assert_int_eq(apply(PGOUTPUT_UPDATE, 'K', old, 3, row, 3, out, sizeof out), LOGICAL_APPLY_OK);
	/* SET doc = doc of a TOASTed doc: nothing to apply, no statement */
	struct pgoutput_value same[3] = { text("42"), unchanged_v, unchanged_v };
	ck_assert_int_eq(apply(PGOUTPUT_UPDATE, 0, NULL, 0, same, 3, out, sizeof out), LOGICAL_APPLY_NOTHING);
	/* a TOASTed value left out: UPDATE of the rest, by key */
	struct pgoutput_value partial[3] = { text("42"), unchanged_v, text("n") };
	ck_assert_int_eq(apply(PGOUTPUT_UPDATE, 0, NULL, 0, partial, 3, out, sizeof out), LOGICAL_APPLY_OK);
	ck_assert_str_eq(out, "UPDATE \"public\".\"acc\"\"ounts\" SET \"no\"\"te\" = E'n' WHERE \"id\" = E'42'");
	/* a delete by its old key */
	struct pgoutput_value key[3] = { text("42"), null_v, null_v };
	ck_assert_int_eq(apply(PGOUTPUT_DELETE, 'K', key, 3, NULL, 0, out, sizeof out), LOGICAL_APPLY_OK);
	ck_assert_str_eq(out, "DELETE FROM \"public\".\"acc\"\"ounts\" WHERE \"id\" = E'42'");
	/* a NULL key value (a unique index allows it): IS NULL */
	struct pgoutput_value nullkey[3] = { null_v, null_v, null_v };
	ck_assert_int_eq(apply(PGOUTPUT_DELETE, 'K', nullkey, 3, NULL, 0, out, sizeof out), LOGICAL_APPLY_OK);
	ck_assert_str_eq(out, "DELETE FROM \"public\".\"acc\"\"ounts\" WHERE \"id\" IS NULL");
	/* a value that would end an ordinary string early, whatever standard_conforming_strings says */
	struct pgoutput_value evil[3] = { text("\\' ; DROP TABLE x; --"), null_v, null_v };
	ck_assert_int_eq(apply(PGOUTPUT_DELETE, 'K', evil, 3, NULL, 0, out, sizeof out), LOGICAL_APPLY_OK);
	ck_assert_str_eq(out, "DELETE FROM \"public\".\"acc\"\"ounts\" WHERE \"id\" = E'\\\\'' ; DROP TABLE x; --'");
	/* every column a key column: DO NOTHING */
	static const struct pgoutput_column keys[] = { { true, "a", 23, -1 }, { true, "b", 23, -1 } };
	static const struct logical_rel link = { "s", "link", 'i', keys, 2 };
	struct pgoutput_value two[2] = { text("1"), text("2") };
	struct pgoutput_msg m = { .kind = PGOUTPUT_INSERT };
	m.u.change.new_tuple = (struct pgoutput_tuple){ 2, two };
	size_t len;
	ck_assert_int_eq(logical_apply_sql(&m, &link, out, sizeof out, &len), LOGICAL_APPLY_OK);
	ck_assert_str_eq(out, "INSERT INTO \"s\".\"link\" (\"a\", \"b\") VALUES (E'1', E'2') ON CONFLICT (\"a\", \"b\") DO NOTHING");
	/* REPLICA IDENTITY FULL: every column flagged as key, and refused */
	static const struct logical_rel full = { "s", "link", 'f', keys, 2 };
	ck_assert_int_eq(logical_apply_sql(&m, &full, out, sizeof out, &len), LOGICAL_APPLY_NO_KEY);
}
END_TEST

START_TEST(test_refused)
{
	char out[512];
	struct pgoutput_value row[3] = { text("42"), text("o"), null_v };
	struct pgoutput_value moved[3] = { text("41"), text("o"), null_v };
	ck_assert_int_eq(apply(PGOUTPUT_UPDATE, 'K', moved, 3, row, 3, out, sizeof out), LOGICAL_APPLY_KEY_CHANGED);
	ck_assert_int_eq(apply(PGOUTPUT_INSERT, 0, NULL, 0, row, 2, out, sizeof out), LOGICAL_APPLY_MISMATCH);
	struct pgoutput_value key_unchanged[3] = { unchanged_v, text("o"), null_v };
	ck_assert_int_eq(apply(PGOUTPUT_UPDATE, 0, NULL, 0, key_unchanged, 3, out, sizeof out), LOGICAL_APPLY_MISMATCH);
	struct pgoutput_value insert_unchanged[3] = { text("1"), unchanged_v, null_v };
	ck_assert_int_eq(apply(PGOUTPUT_INSERT, 0, NULL, 0, insert_unchanged, 3, out, sizeof out), LOGICAL_APPLY_MISMATCH);
	struct pgoutput_value nul[3] = { text("1"), { PGOUTPUT_TEXT, (const uint8_t *)"a\0b", 3 }, null_v };
	ck_assert_int_eq(apply(PGOUTPUT_INSERT, 0, NULL, 0, nul, 3, out, sizeof out), LOGICAL_APPLY_MISMATCH);
	ck_assert_int_eq(apply(PGOUTPUT_INSERT, 0, NULL, 0, row, 3, out, 40), LOGICAL_APPLY_TOO_LONG);
	ck_assert_str_eq(out, "");   /* (nothing half written) */
	ck_assert_int_eq(apply(PGOUTPUT_DELETE, 'K', row, 2, NULL, 0, out, sizeof out), LOGICAL_APPLY_MISMATCH);
	ck_assert_int_eq(apply(PGOUTPUT_INSERT, 0, NULL, 0, row, 3, out, 0), LOGICAL_APPLY_TOO_LONG);
	static const struct pgoutput_column nokey[] = { { false, "a", 23, -1 } };
	static const struct logical_rel bare = { "s", "bare", 'n', nokey, 1 };
	struct pgoutput_msg m = { .kind = PGOUTPUT_INSERT };
	m.u.change.new_tuple = (struct pgoutput_tuple){ 1, row };
	size_t len;
	ck_assert_int_eq(logical_apply_sql(&m, &bare, out, sizeof out, &len), LOGICAL_APPLY_NO_KEY);
	m.kind = PGOUTPUT_BEGIN;
	ck_assert_int_eq(logical_apply_sql(&m, &rel, out, sizeof out, &len), LOGICAL_APPLY_NOT_A_CHANGE);
	ck_assert_str_eq(logical_apply_text(LOGICAL_APPLY_KEY_CHANGED), "an update changed the key");
}
END_TEST

Suite *logical_apply_suite(void)
{
	Suite *s = suite_create("logical_apply");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_statements);
	tcase_add_test(tc, test_refused);
	suite_add_tcase(s, tc);
	return s;
}
