#!/usr/bin/env bash
# Configures and builds kintsugi (Release, CPU) into build/. Extra arguments go to CMake,
# e.g. scripts/build.sh -DKINTSUGI_CUDA=ON.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cmake -S "$repo" -B "$repo/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$repo/build" -j "$(nproc)"
