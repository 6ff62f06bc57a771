/* SPDX-License-Identifier: MIT */
#include "check_suites.h"

Suite *scram_suite(void)
{
	Suite *s = suite_create("scram");
	return s;
}
