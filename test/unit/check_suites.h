/* SPDX-License-Identifier: MIT */
/* The Check suites linked into test/unit/check_pgcat, one per module. */
#ifndef PGCAT_CHECK_SUITES_H
#define PGCAT_CHECK_SUITES_H
#include <check.h>
Suite *proto_suite(void);
Suite *md5_suite(void);
Suite *scram_suite(void);
Suite *auth_backend_suite(void);
Suite *kdf_suite(void);
Suite *config_suite(void);
Suite *config_pgbouncer_suite(void);
Suite *router_suite(void);
Suite *sharding_suite(void);
Suite *prepared_suite(void);
Suite *auth_file_suite(void);
Suite *hba_suite(void);
Suite *auth_query_suite(void);
Suite *shardkey_suite(void);
Suite *merge_suite(void);
Suite *pgvalue_suite(void);
Suite *sqlshape_suite(void);
Suite *sqllex_suite(void);
Suite *ryw_suite(void);
Suite *errstats_suite(void);
Suite *qstats_suite(void);
Suite *pgoutput_suite(void);
Suite *logical_apply_suite(void);
Suite *reshard_suite(void);
Suite *twophase_suite(void);
Suite *txn_mode_suite(void);
Suite *txn_suite(void);
Suite *cancel_suite(void);
Suite *shm_suite(void);
Suite *params_suite(void);
Suite *buf_suite(void);
#endif
