/* SPDX-License-Identifier: MIT */
/* twophase: pgcat's gids and log file names read back, the decision
 * log's text (a torn last line is no decision), and which configurations
 * need their shards' max_prepared_transactions checked. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "config.h"
#include "twophase.h"
#include "twophase_check.h"

START_TEST(test_gid_round_trip)
{
	struct twophase_gid g = { .peer_id = 3,
				  .gen = { .host = 0xfeedf00d, .pid = 4194304, .start = UINT64_MAX, .nonce = 0x0a0b0c0d },
				  .seq = 18446744073709551615ULL, .shard = 17 };
	char buf[TWOPHASE_GID_MAX];
	twophase_gid_format(buf, sizeof buf, &g);
	ck_assert_str_eq(buf, "pgcat_3_feedf00d_4194304_18446744073709551615_0a0b0c0d_18446744073709551615_17");
	ck_assert_uint_lt(strlen(buf), 200);   /* PostgreSQL's limit on a gid */
	struct twophase_gid r;
	ck_assert(twophase_gid_parse(buf, &r));
	ck_assert_int_eq(r.peer_id, 3);
	ck_assert_uint_eq(r.gen.host, 0xfeedf00d);
	ck_assert_uint_eq(r.gen.pid, 4194304);
	ck_assert_uint_eq(r.gen.start, UINT64_MAX);
	ck_assert_uint_eq(r.gen.nonce, 0x0a0b0c0d);
	ck_assert_uint_eq(r.seq, g.seq);
	ck_assert_int_eq(r.shard, 17);
}
END_TEST

START_TEST(test_gid_not_ours)
{
	struct twophase_gid r;
	ck_assert(!twophase_gid_parse("", &r));
	ck_assert(!twophase_gid_parse("pgcat_", &r));
	ck_assert(!twophase_gid_parse("other_0_1_2_0a0b0c0d_3_0", &r));
	ck_assert(!twophase_gid_parse("pgcat_0_00c0ffee_1_2_0a0b0c0d_3", &r));          /* no shard */
	ck_assert(!twophase_gid_parse("pgcat_0_00c0ffee_1_2_0a0b0c0d_3_0_", &r));       /* more after it */
	ck_assert(!twophase_gid_parse("pgcat_0_00c0ffee_1_2_0A0B0C0D_3_0", &r));        /* pgcat writes lower case */
	ck_assert(!twophase_gid_parse("pgcat_0_00c0ffee_1_2_0a0b0c_3_0", &r));          /* short nonce */
	ck_assert(!twophase_gid_parse("pgcat_0_00c0ffee_4294967296_2_0a0b0c0d_3_0", &r));   /* pid too large */
	ck_assert(!twophase_gid_parse("pgcat_0_00c0ffee_1_2_0a0b0c0d_18446744073709551616_0", &r));   /* seq overflows */
	ck_assert(!twophase_gid_parse("pgcat_-1_00c0ffee_1_2_0a0b0c0d_3_0", &r));
	ck_assert(!twophase_gid_parse("pgcat_0_1_2_0a0b0c0d_3_0", &r));   /* no machine */
	ck_assert(twophase_gid_parse("pgcat_0_00c0ffee_1_2_0a0b0c0d_3_0", &r));
}
END_TEST

START_TEST(test_log_names)
{
	struct twophase_gen g = { .host = 0x1234abcd, .pid = 77, .start = 123456, .nonce = 0xdeadbeef }, r;
	char path[TWOPHASE_PATH_MAX];
	ck_assert(twophase_log_path(path, sizeof path, "/var/lib/pgcat", &g));
	ck_assert_str_eq(path, "/var/lib/pgcat/2pc-1234abcd-77-123456-deadbeef.log");
	ck_assert(twophase_log_name_parse("2pc-1234abcd-77-123456-deadbeef.log", &r));
	ck_assert_uint_eq(r.host, 0x1234abcd);
	ck_assert_uint_eq(r.pid, 77);
	ck_assert_uint_eq(r.start, 123456);
	ck_assert_uint_eq(r.nonce, 0xdeadbeef);
	ck_assert(!twophase_log_name_parse("2pc-1234abcd-77-123456-deadbeef.log.new", &r));   /* a rewrite under way */
	ck_assert(!twophase_log_name_parse("2pc-1234abcd-77-123456.log", &r));
	ck_assert(!twophase_log_name_parse("2pc-77-123456-deadbeef.log", &r));   /* no machine */
	ck_assert(!twophase_log_name_parse("x2pc-1234abcd-77-123456-deadbeef.log", &r));
	char small[16];
	ck_assert(!twophase_log_path(small, sizeof small, "/var/lib/pgcat", &g));
}
END_TEST

START_TEST(test_log_text)
{
	static const char text[] = "commit 5\ncommit 2\ngarbage\ncommit x\ncommit 9\ncommit 7";
	uint64_t *seqs;
	size_t n;
	ck_assert(twophase_log_read(text, strlen(text), &seqs, &n));
	/* sorted; the torn "commit 7" (no newline: its sync never returned) is not there */
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(seqs[0], 2);
	ck_assert_uint_eq(seqs[1], 5);
	ck_assert_uint_eq(seqs[2], 9);
	ck_assert(twophase_seq_in(seqs, n, 5));
	ck_assert(twophase_seq_in(seqs, n, 9));
	ck_assert(!twophase_seq_in(seqs, n, 7));
	ck_assert(!twophase_seq_in(seqs, n, 1));
	free(seqs);
	ck_assert(twophase_log_read("", 0, &seqs, &n));
	ck_assert_uint_eq(n, 0);
	ck_assert(!twophase_seq_in(seqs, n, 1));
	free(seqs);
}
END_TEST


/* Two pools: "s" with two shards (shard 1's server given), "one" with one. */
static struct config *tpc_config(bool on, const char *shard1_server)
{
	char text[1024];
	snprintf(text, sizeof text,
		 "[general]\ntwo_phase_commit = %s\n"
		 "[pools.s]\nsharding_function = pg_bigint_hash\nsharded_tables = t.id\n"
		 "[pools.s.shards.0]\ndatabase = d0\nservers = 10.0.0.1:5432:primary, 10.0.0.9:5432:replica\n"
		 "[pools.s.shards.1]\ndatabase = d1\nservers = %s\n"
		 "[pools.s.users.u]\npassword = p\n"
		 "[pools.one]\n[pools.one.shards.0]\nservers = 10.0.0.5:5432:primary\n",
		 on ? "true" : "false", shard1_server);
	struct config_problems pr = { 0 };
	struct config *cfg = config_load_string(text, "t.ini", &pr);
	config_problems_free(&pr);
	ck_assert_ptr_nonnull(cfg);
	return cfg;
}

START_TEST(test_check_needed)
{
	struct config *off = tpc_config(false, "10.0.0.2:5432:primary");
	struct config *on = tpc_config(true, "10.0.0.2:5432:primary");
	struct config *moved = tpc_config(true, "10.0.0.3:5432:auto");
	struct config *replica_only = tpc_config(true, "10.0.0.2:5432:replica");
	ck_assert(!twophase_check_needed(off, NULL));           /* the switch off: nothing */
	ck_assert(twophase_check_needed(on, NULL));             /* startup */
	ck_assert(twophase_check_needed(on, off));              /* turned on by a reload */
	ck_assert(!twophase_check_needed(on, on));              /* checked with it on already */
	ck_assert(twophase_check_needed(moved, on));            /* another server for shard 1 */
	ck_assert(twophase_check_needed(on, moved));           /* and back */
	ck_assert(!twophase_check_needed(off, on));             /* turned off */
	/* a replica is not asked (shard 0's primary was, with on) */
	ck_assert(!twophase_check_needed(replica_only, on));
	config_free(off);
	config_free(on);
	config_free(moved);
	config_free(replica_only);
}
END_TEST

Suite *twophase_suite(void)
{
	Suite *s = suite_create("twophase");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_gid_round_trip);
	tcase_add_test(tc, test_gid_not_ours);
	tcase_add_test(tc, test_log_names);
	tcase_add_test(tc, test_log_text);
	tcase_add_test(tc, test_check_needed);
	suite_add_tcase(s, tc);
	return s;
}
