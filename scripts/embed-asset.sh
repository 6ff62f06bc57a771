#!/bin/sh
# SPDX-License-Identifier: MIT
# embed-asset.sh NAME FILE: a C source, on stdout, that defines the bytes of
# FILE as `const unsigned char NAME[]` and their count as `NAME_len`, so
# that an asset (the web page, src/web/) is built into the binary. Plain od
# and sed (xxd is not everywhere); the file is kept as it is in the tree.
set -eu
name=$1
file=$2
test -s "$file" || { echo "embed-asset.sh: $file is missing or empty" >&2; exit 1; }
printf '/* Generated from %s by scripts/embed-asset.sh: do not edit. */\n' "$(basename "$file")"
printf '#include "web.h"\n\n'
printf 'const unsigned char %s[] = {\n' "$name"
od -An -v -tu1 "$file" | sed -e 's/[0-9][0-9]*/&,/g' -e 's/^ */\t/' -e 's/  */ /g'
printf '};\nconst size_t %s_len = sizeof %s;\n' "$name" "$name"
