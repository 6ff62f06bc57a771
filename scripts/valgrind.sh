#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The integration suite's core subset with pgcat under valgrind memcheck:
# zero errors and zero leaks (definite, indirect or possible) in every pgcat
# process, or the test that ran it fails. pgcat is built without sanitizers
# (-O1 -g) in build-vg/; conftest.py runs it through PGCAT_WRAPPER and reads
# each process's valgrind log at the end of the test (ERROR SUMMARY must be
# 0; leaks count as errors here).
#
#   bash scripts/valgrind.sh                 # the core subset
#   bash scripts/valgrind.sh -k cancel       # extra arguments go to pytest
# VALGRIND_TESTS: the test files (default below).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

install_packages valgrind
VENV="$ROOT/.venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-test.txt

build_out_of_tree build-vg --enable-werror CFLAGS="-O1 -g -fno-omit-frame-pointer"
export PGCAT_BIN="$BUILT_BIN"

# Logins, simple and extended protocol, transaction and session pooling,
# session parameters, cancel, COPY, prepared statements, the admin
# console, reloads and malformed input: the paths every deployment runs.
TESTS=${VALGRIND_TESTS:-"test_startup_auth.py test_protocol.py test_pooling.py test_params.py test_cancel.py
test_copy.py test_prepared.py test_bad_input.py test_admin.py"}
args=()
for t in $TESTS; do args+=("test/integration/$t"); done

export PGCAT_WRAPPER="valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect,possible \
--errors-for-leak-kinds=definite,indirect,possible --num-callers=30 --log-file={workdir}/valgrind.%p.log"
# Under valgrind pgcat runs ~20x slower: per-test timeout raised.
log "pytest under valgrind: $TESTS"
"$VENV/bin/python" -m pytest -p no:cacheprovider -q -o timeout=600 "${args[@]}" "$@"
