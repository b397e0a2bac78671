#!/usr/bin/env bash
# Configures and builds kintsugi (Release, CPU) into build/: everything (the program, the tests,
# the benchmarks), or with `--target NAME` (repeatable) only those targets. Other arguments go
# to CMake, e.g. scripts/build.sh -DKINTSUGI_CUDA=ON; the quick start builds only the program:
#   scripts/build.sh --target kintsugi -DKINTSUGI_TESTS=OFF -DKINTSUGI_BENCH=OFF
# Compiles through ccache where it is installed (scripts/compiler_cache.sh; KINTSUGI_CCACHE=0
# turns that off).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/compiler_cache.sh"
targets=() cmake_args=()
while (($#)); do
  case "$1" in
    --target) [[ $# -ge 2 ]] || { echo "build.sh: --target needs a name" >&2; exit 2; }
              targets+=(--target "$2"); shift 2 ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done
# Tests and benchmarks are on unless an argument turns them off (a build folder configured
# without them by the quick start gets them back here).
cmake -S "$repo" -B "$repo/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKINTSUGI_TESTS=ON \
  -DKINTSUGI_BENCH=ON "${compiler_cache_flags[@]}" "${cmake_args[@]}" >/dev/null
cmake --build "$repo/build" -j "$(nproc)" "${targets[@]}"
