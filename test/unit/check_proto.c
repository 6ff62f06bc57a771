/* SPDX-License-Identifier: MIT */
#include "check_suites.h"

Suite *proto_suite(void)
{
	Suite *s = suite_create("proto");
	return s;
}
