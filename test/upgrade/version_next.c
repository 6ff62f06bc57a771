/* SPDX-License-Identifier: MIT */
/*
 * pgcat-next (make pgcat-next): pgcat with another version string, for the
 * upgrade tests (test_reboot.py): linked before src/libpgcat.a, this
 * definition stands and the library's src/version.c is not taken.
 */
#include "version.h"

const char pgcat_version[] = PACKAGE_VERSION "+next";
