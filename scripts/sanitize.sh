#!/usr/bin/env bash
# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer (docs/architecture.md,
# "Sanitizers"): builds everything with -DKINTSUGI_SANITIZE=ON into build-san/ (every report is
# fatal) and runs CTest there: the unit tests, the multi-rank tests under mpirun (every rank is
# sanitized), the checkpoint, CLI and CUDA-emulator tests. A report fails its test with the
# report in the test's output.
#
# Its tests took 96 minutes on 2 cores in the first full run (scripts/test.sh's about 16; that
# run unwound every process's allocations the slow way and waited 25 minutes on one test, see
# below), too long for every CI run (.ci/run): run it on a schedule (nightly) and before a
# release. Extra arguments go to CTest,
# e.g. scripts/sanitize.sh -R '^[A-Z]' for the unit tests only.
#
# Usage: scripts/sanitize.sh [CTEST_ARGS...]
#   KINTSUGI_SANITIZE_BUILD  the build directory (default: <repo>/build-san)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KINTSUGI_SANITIZE_BUILD:-$repo/build-san}"
cd "$repo"
# Everything may run as root (CI does); OpenMPI refuses that unless told it is intended.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
scripts/setup.sh --tests
# Debug information for the reports' stack traces, optimized so the suite finishes.
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKINTSUGI_SANITIZE=ON \
  -DKINTSUGI_BENCH=OFF >/dev/null
cmake --build "$build" -j "$(nproc)"
# The test data (kept where present; otherwise tokenized by the sanitized binary).
scripts/fetch_data.sh "$build/kintsugi"
# UBSan: a stack trace with each report (the build already makes every report fatal).
# LeakSanitizer stays on, with Open MPI's own allocations that it never frees at exit left out
# (scripts/lsan_suppressions.txt): a leak in kintsugi's code still fails the test, MPI or not.
# A suppression matches a library named in the allocation's stack, so under mpirun the stack
# must reach one: the default (frame-pointer) unwinder stops at the first frame of Open MPI's
# plugins, which are built without frame pointers and unloaded (dlclose) before exit, leaving
# one "<unknown module>" frame that nothing matches. Ranks started by mpirun therefore record
# every allocation's stack with the DWARF unwinder (fast_unwind_on_malloc=0, handed to them
# through Open MPI's mca_base_env_list), which walks on into libopen-pal and libmpi; processes
# outside mpirun keep the fast one (the slow one made the planner's large searches run past
# their tests' time limits).
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$repo/scripts/lsan_suppressions.txt:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export OMPI_MCA_mca_base_env_list="ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0${OMPI_MCA_mca_base_env_list:+;$OMPI_MCA_mca_base_env_list}"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
