/* SPDX-License-Identifier: MIT */
#include "version.h"

const char pgcat_version[] = PACKAGE_VERSION;
