#!/usr/bin/env bash
# Called as the last line of a test script, which only gets there when every check passed:
# removes the directories the test wrote when REMOVE_OUTPUT_ON_PASS=1. CTest sets that for
# every test whose outputs no other test reads (tests/CMakeLists.txt), so that a suite run
# leaves only the outputs of failed tests (kept for inspection) and of the shared references.
set -euo pipefail
if [[ "${REMOVE_OUTPUT_ON_PASS:-0}" == 1 ]]; then
  rm -rf -- "$@"
fi
