// Entry point of the GPU tests: without a CUDA device they are skipped with CTest's skip code
// (77, SKIP_RETURN_CODE in tests/gpu/CMakeLists.txt), so CI machines without a GPU pass them as
// "skipped", never as passed. `--device-present` only reports whether a device is there (exit 0
// or 77), for scripts.
#include <gtest/gtest.h>

//
// The tests keep what they cache (the GEMM algorithms autotuning chooses, backend/cuda/
// gemm_algorithms.hpp) in a cache directory of their own, removed at the end, so that each run
// starts from nothing and leaves the user's cache as it was.
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "kintsugi/backend/cuda/cuda_backend.hpp"

int main(int argc, char** argv) {
  constexpr int kSkipped = 77;
  const int devices = kintsugi::cuda_device_count();
  if (argc > 1 && std::strcmp(argv[1], "--device-present") == 0) return devices > 0 ? 0 : kSkipped;
  if (devices == 0) {
    std::printf("no CUDA device visible: GPU tests skipped\n");
    return kSkipped;
  }
  namespace fs = std::filesystem;
  std::string cache = (fs::temp_directory_path() / "kintsugi-gpu-tests-XXXXXX").string();
  if (!::mkdtemp(cache.data())) {
    std::perror("mkdtemp");
    return 1;
  }
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  std::error_code ec;
  fs::remove_all(cache, ec);
  return result;
}
