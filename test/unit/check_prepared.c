/* SPDX-License-Identifier: MIT */
/* Unit tests: the prepared-statement registry, a client's names (open
 * addressing with backward-shift deletion) and a server's LRU set, checked
 * against a plain model under thousands of random operations. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "prepared.h"

static struct prep_stmt *stmt(struct prep_registry *r, int i)
{
	char q[64];
	int n = snprintf(q, sizeof q, "SELECT %d", i);
	return prep_registry_get(r, false, (const uint8_t *)q, (size_t)n + 1, 0);
}

START_TEST(registry_dedups_and_frees)
{
	struct prep_registry r;
	prep_registry_init(&r);
	struct prep_stmt *a = stmt(&r, 1), *b = stmt(&r, 1), *c = stmt(&r, 2);
	ck_assert_ptr_eq(a, b);
	ck_assert_ptr_ne(a, c);
	ck_assert_uint_eq(a->refs, 2);
	ck_assert_uint_eq(r.count, 2);
	/* the same text from SQL PREPARE is another statement */
	struct prep_stmt *s = prep_registry_get(&r, true, a->key, a->key_len, 0);
	ck_assert_ptr_ne(s, a);
	prep_stmt_unref(&r, s);
	prep_stmt_unref(&r, a);
	prep_stmt_unref(&r, b);
	prep_stmt_unref(&r, c);
	ck_assert_uint_eq(r.count, 0);
	/* many, past several growths */
	struct prep_stmt *all[500];
	for (int i = 0; i < 500; i++)
		all[i] = stmt(&r, i);
	for (int i = 0; i < 500; i++)
		ck_assert_ptr_eq(stmt(&r, i), all[i]);
	for (int i = 0; i < 500; i++) {
		prep_stmt_unref(&r, all[i]);
		prep_stmt_unref(&r, all[i]);
	}
	ck_assert_uint_eq(r.count, 0);
	prep_registry_free(&r);
}
END_TEST

START_TEST(client_names_match_a_model)
{
	struct prep_registry r;
	prep_registry_init(&r);
	struct prep_cmap m = { 0 };
	enum { N = 64 };
	struct prep_stmt *model[N] = { 0 };
	srand(7);
	for (int op = 0; op < 3000; op++) {
		int k = rand() % N;
		char name[16];
		snprintf(name, sizeof name, "s%d", k);
		if (rand() % 3) {
			if (!model[k]) {
				struct prep_stmt *st = stmt(&r, rand() % 10);
				ck_assert(prep_cmap_put(&m, name, st));
				model[k] = st;
			}
		} else {
			ck_assert_int_eq(prep_cmap_del(&m, &r, name), model[k] != NULL);
			model[k] = NULL;
		}
		if (op % 8)
			continue;
		for (int j = 0; j < N; j++) {
			snprintf(name, sizeof name, "s%d", j);
			ck_assert_ptr_eq(prep_cmap_get(&m, name), model[j]);
		}
	}
	prep_cmap_clear(&m, &r);
	ck_assert_uint_eq(r.count, 0);
	prep_registry_free(&r);
}
END_TEST

START_TEST(server_set_lru_and_model)
{
	struct prep_registry r;
	prep_registry_init(&r);
	struct prep_sset s = { 0 };
	struct prep_stmt *st[40];
	for (int i = 0; i < 40; i++)
		st[i] = stmt(&r, i);
	bool in[40] = { false };
	srand(11);
	for (int op = 0; op < 3000; op++) {
		int k = rand() % 40;
		int what = rand() % 4;
		if (what < 2) {
			if (!in[k]) {
				ck_assert(prep_sset_add(&s, st[k]));
				in[k] = true;
			}
		} else if (what == 2) {
			prep_sset_del(&s, &r, st[k]);
			in[k] = false;
		} else {
			ck_assert_int_eq(prep_sset_has(&s, st[k]), in[k]);
		}
		if (op % 8)
			continue;
		for (int j = 0; j < 40; j++)
			ck_assert_int_eq(prep_sset_has(&s, st[j]), in[j]);
	}
	/* LRU: touch 0..9 in order, the first popped is 0 */
	prep_sset_clear(&s, &r);
	for (int i = 0; i < 10; i++)
		ck_assert(prep_sset_add(&s, st[i]));
	ck_assert(prep_sset_has(&s, st[0]));   /* 0 used last now */
	struct prep_stmt *v = prep_sset_pop_lru(&s);
	ck_assert_ptr_eq(v, st[1]);
	prep_stmt_unref(&r, v);
	uint32_t gen = s.gen;
	prep_sset_clear(&s, &r);
	ck_assert_uint_eq(s.gen, gen + 1);
	for (int i = 0; i < 40; i++)
		prep_stmt_unref(&r, st[i]);
	ck_assert_uint_eq(r.count, 0);
	char g[PREP_GNAME_MAX];
	prep_registry_free(&r);
	struct prep_stmt fake = { .id = 0x2a };
	prep_gname(g, &fake, 3);
	ck_assert_str_eq(g, "pgcat_2a_3");
	struct prep_stmt zero = { .id = 0 }, big = { .id = UINT64_MAX };
	prep_gname(g, &zero, 0);
	ck_assert_str_eq(g, "pgcat_0_0");
	prep_gname(g, &big, UINT32_MAX);
	ck_assert_str_eq(g, "pgcat_ffffffffffffffff_ffffffff");
	/* kept on the statement, made again for another generation */
	size_t gl;
	ck_assert_str_eq(prep_gname_kept(&fake, 3, &gl), "pgcat_2a_3");
	ck_assert_uint_eq(gl, sizeof "pgcat_2a_3");
	ck_assert_str_eq(prep_gname_kept(&fake, 3, &gl), "pgcat_2a_3");
	ck_assert_str_eq(prep_gname_kept(&fake, 4, &gl), "pgcat_2a_4");
	ck_assert_str_eq(prep_gname_kept(&big, UINT32_MAX, &gl), "pgcat_ffffffffffffffff_ffffffff");
	ck_assert_uint_eq(gl, sizeof "pgcat_ffffffffffffffff_ffffffff");
}
END_TEST

/* A statement is an entry per schema generation (SPEC §5). */
START_TEST(registry_entry_per_schema_generation)
{
	struct prep_registry r;
	prep_registry_init(&r);
	static const uint8_t key[] = "SELECT * FROM t\0\0";
	struct prep_stmt *g0 = prep_registry_get(&r, false, key, sizeof key - 1, 0);
	struct prep_stmt *g1 = prep_registry_get(&r, false, key, sizeof key - 1, 1);
	ck_assert_ptr_nonnull(g0);
	ck_assert_ptr_nonnull(g1);
	ck_assert_ptr_ne(g0, g1);
	ck_assert_uint_ne(g0->id, g1->id);   /* so their global names differ */
	ck_assert_ptr_eq(prep_registry_find(&r, false, key, sizeof key - 1, 1), g1);
	ck_assert_ptr_null(prep_registry_find(&r, false, key, sizeof key - 1, 2));
	ck_assert_ptr_null(prep_registry_find(&r, true, key, sizeof key - 1, 0));
	ck_assert_uint_eq(g1->refs, 1);      /* find takes no reference */
	prep_stmt_unref(&r, g0);
	prep_stmt_unref(&r, g1);
	ck_assert_uint_eq(r.count, 0);
	prep_registry_free(&r);
}
END_TEST

/* The seen-once memory of unnamed texts: a text is "again" from its second
 * time on; each set keeps its PREP_SEEN_WAYS most recently used texts; the
 * registry's hashed look-ups agree with the plain ones. */
START_TEST(seen_once_memory)
{
	struct prep_registry r;
	prep_registry_init(&r);
	/* texts whose hashes fall in one set (the set is bits 40.. of the hash) */
	uint64_t same_set[PREP_SEEN_WAYS + 1];
	for (uint32_t i = 0; i <= PREP_SEEN_WAYS; i++)
		same_set[i] = ((uint64_t)7 << 40) | (uint64_t)(i + 1);
	for (uint32_t i = 0; i < PREP_SEEN_WAYS; i++)
		ck_assert(!prep_seen_again(&r, same_set[i]));
	for (uint32_t i = 0; i < PREP_SEEN_WAYS; i++)
		ck_assert(prep_seen_again(&r, same_set[i]));
	/* touch all but the first: the next new text pushes the first out */
	for (uint32_t i = 1; i < PREP_SEEN_WAYS; i++)
		ck_assert(prep_seen_again(&r, same_set[i]));
	ck_assert(!prep_seen_again(&r, same_set[PREP_SEEN_WAYS]));
	ck_assert(!prep_seen_again(&r, same_set[0]));   /* forgotten: first time again */
	ck_assert(prep_seen_again(&r, same_set[PREP_SEEN_WAYS]));
	/* many distinct texts: bounded, and a recent one is still known */
	for (int i = 0; i < 100000; i++) {
		char q[32];
		int n = snprintf(q, sizeof q, "SELECT %d", i);
		uint64_t h = prep_key_hash((const uint8_t *)q, (size_t)n + 1);
		(void)prep_seen_again(&r, h);
	}
	static const uint8_t last[] = "SELECT 99999";
	ck_assert(prep_seen_again(&r, prep_key_hash(last, sizeof last)));
	/* hashed and plain look-ups are the same entry */
	static const uint8_t key[] = "SELECT $1\0\0\1\0\0\0\x17";
	uint64_t th = prep_key_hash(key, sizeof key - 1);
	struct prep_stmt *a = prep_registry_get_hashed(&r, th, key, sizeof key - 1, 3);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_eq(prep_registry_find(&r, false, key, sizeof key - 1, 3), a);
	ck_assert_ptr_eq(prep_registry_find_hashed(&r, th, key, sizeof key - 1, 3), a);
	ck_assert_ptr_null(prep_registry_find_hashed(&r, th, key, sizeof key - 1, 4));
	struct prep_stmt *b = prep_registry_get(&r, false, key, sizeof key - 1, 3);
	ck_assert_ptr_eq(a, b);
	prep_stmt_unref(&r, a);
	prep_stmt_unref(&r, b);
	ck_assert_uint_eq(r.count, 0);
	prep_registry_free(&r);
}
END_TEST

START_TEST(schema_changing_tags)
{
	static const char *yes[] = { "CREATE TABLE", "ALTER TABLE", "DROP TYPE", "COMMENT", "GRANT", "REVOKE",
				     "TRUNCATE TABLE", "DISCARD ALL", "DEALLOCATE ALL", "CREATE TYPE" };
	static const char *no[] = { "SELECT 1", "INSERT 0 1", "UPDATE 3", "BEGIN", "COMMIT", "ROLLBACK", "SET",
				    "DEALLOCATE", "DISCARD TEMP", "COPY 5", "DROPX", "" };
	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
		ck_assert_msg(prep_tag_changes_schema(yes[i], strlen(yes[i]) + 1), "%s", yes[i]);
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
		ck_assert_msg(!prep_tag_changes_schema(no[i], strlen(no[i]) + 1), "%s", no[i]);
}
END_TEST

Suite *prepared_suite(void)
{
	Suite *s = suite_create("prepared");
	TCase *tc = tcase_create("structures");
	tcase_set_timeout(tc, 60);   /* thousands of operations under sanitizers on a busy machine */
	tcase_add_test(tc, registry_dedups_and_frees);
	tcase_add_test(tc, client_names_match_a_model);
	tcase_add_test(tc, server_set_lru_and_model);
	tcase_add_test(tc, registry_entry_per_schema_generation);
	tcase_add_test(tc, schema_changing_tags);
	tcase_add_test(tc, seen_once_memory);
	suite_add_tcase(s, tc);
	return s;
}
