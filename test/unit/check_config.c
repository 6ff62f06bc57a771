/* SPDX-License-Identifier: MIT */
#include "check_suites.h"

Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	return s;
}
