/* SPDX-License-Identifier: MIT */
/*
 * version: the version this binary reports (pgcat -V, SHOW VERSION, the
 * admin console's server_version, the log's first line). A symbol, not
 * the macro, so that a second build can differ by one object linked in
 * front of the library: test/upgrade/version_next.c, the "newer build" the
 * upgrade tests hand over to (doc/operations.md).
 */
#ifndef PGCAT_VERSION_H
#define PGCAT_VERSION_H

extern const char pgcat_version[];

#endif
