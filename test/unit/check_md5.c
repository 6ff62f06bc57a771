/* SPDX-License-Identifier: MIT */
#include "check_suites.h"

Suite *md5_suite(void)
{
	Suite *s = suite_create("md5");
	return s;
}
