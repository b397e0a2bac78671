#!/usr/bin/env bash
# The second command of the README: install, build, fetch the test data, run every test
# (unit tests and multi-rank tests under mpirun) through CTest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# Everything may run as root (CI does); OpenMPI refuses that unless told it is intended.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
scripts/setup.sh
scripts/build.sh
scripts/fetch_data.sh build/kintsugi
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
