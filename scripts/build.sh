#!/usr/bin/env bash
# Configures and builds kintsugi (Release, CPU) into build/. Extra arguments go to CMake,
# e.g. scripts/build.sh -DKINTSUGI_CUDA=ON. Compiles through ccache where it is installed
# (scripts/compiler_cache.sh; KINTSUGI_CCACHE=0 turns that off).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/compiler_cache.sh"
cmake -S "$repo" -B "$repo/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${compiler_cache_flags[@]}" "$@" \
  >/dev/null
cmake --build "$repo/build" -j "$(nproc)"
