#!/usr/bin/env bash
# The second command of the README: install, build, fetch the test data, run every test
# (unit tests and multi-rank tests under mpirun) through CTest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# Everything may run as root (CI does); OpenMPI refuses that unless told it is intended.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
scripts/setup.sh --tests
scripts/build.sh
# Where nvcc is installed, also compile the GPU code as nvcc builds it (the CUDA kernels, the
# CUDA backend and the NCCL communicator), so that a change that breaks the CUDA build fails
# here; without a GPU it is tested through the CUDA emulator in the build above.
if [[ -x /usr/local/cuda/bin/nvcc || -n "${CUDACXX:-}" ]]; then
  # Only what the CUDA build compiles differently: the objects of the CUDA backend and the
  # NCCL communicator, and the factories that offer them; the rest is the C++ the build above
  # compiled, and nothing is linked here.
  source "$repo/scripts/compiler_cache.sh"
  cmake -S "$repo" -B "$repo/build-cuda-check" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKINTSUGI_CUDA=ON -DKINTSUGI_TESTS=OFF -DKINTSUGI_BENCH=OFF "${compiler_cache_flags[@]}" \
    >/dev/null
  mapfile -t objects < <(ninja -C "$repo/build-cuda-check" -t targets all |
    sed -n -e 's/^\(CMakeFiles\/kintsugi_\(backend_cuda\|comm_nccl\)\.dir\/[^:]*\.o\): .*/\1/p' \
      -e 's/^\(CMakeFiles\/kintsugi_\(backend\|comm\)\.dir\/.*\/\(factory\|device_info\)\.cpp\.o\): .*/\1/p')
  ((${#objects[@]} > 0)) || { echo "test.sh: no CUDA objects to build in build-cuda-check" >&2; exit 1; }
  ninja -C "$repo/build-cuda-check" -j "$(nproc)" "${objects[@]}"
fi
scripts/fetch_data.sh build/kintsugi
# Measurements the tests make (GEMM rates, GEMM algorithms, link speeds) go to a cache of the
# build's own, not the user's ~/.cache/kintsugi: taken while the suite keeps both cores busy,
# a rate there would be too low, and every later run's MFU too high (docs/metrics.md).
export XDG_CACHE_HOME="$repo/build/test-cache"
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
