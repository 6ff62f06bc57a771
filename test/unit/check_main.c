/* SPDX-License-Identifier: MIT */
/* Runs every unit suite; exit status is the number of failures (0 = pass). */
#include <stdlib.h>
#include "check_suites.h"

int main(void)
{
	SRunner *sr = srunner_create(proto_suite());
	srunner_add_suite(sr, md5_suite());
	srunner_add_suite(sr, scram_suite());
	srunner_add_suite(sr, auth_backend_suite());
	srunner_add_suite(sr, kdf_suite());
	srunner_add_suite(sr, config_suite());
	srunner_add_suite(sr, config_pgbouncer_suite());
	srunner_add_suite(sr, router_suite());
	srunner_add_suite(sr, sharding_suite());
	srunner_add_suite(sr, prepared_suite());
	srunner_add_suite(sr, auth_file_suite());
	srunner_add_suite(sr, hba_suite());
	srunner_add_suite(sr, auth_query_suite());
	srunner_add_suite(sr, shardkey_suite());
	srunner_add_suite(sr, merge_suite());
	srunner_add_suite(sr, pgvalue_suite());
	srunner_add_suite(sr, sqlshape_suite());
	srunner_add_suite(sr, sqllex_suite());
	srunner_add_suite(sr, ryw_suite());
	srunner_add_suite(sr, errstats_suite());
	srunner_add_suite(sr, qstats_suite());
	srunner_add_suite(sr, pgoutput_suite());
	srunner_add_suite(sr, logical_apply_suite());
	srunner_add_suite(sr, reshard_suite());
	srunner_add_suite(sr, twophase_suite());
	srunner_add_suite(sr, txn_mode_suite());
	srunner_add_suite(sr, txn_suite());
	srunner_add_suite(sr, cancel_suite());
	srunner_add_suite(sr, shm_suite());
	srunner_add_suite(sr, params_suite());
	srunner_add_suite(sr, buf_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
