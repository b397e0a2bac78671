// Entry point of the GPU tests: without a CUDA device they are skipped with CTest's skip code
// (77, SKIP_RETURN_CODE in tests/gpu/CMakeLists.txt), so CI machines without a GPU pass them as
// "skipped", never as passed. `--device-present` only reports whether a device is there (exit 0
// or 77), for scripts.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "kintsugi/backend/cuda/cuda_backend.hpp"

int main(int argc, char** argv) {
  constexpr int kSkipped = 77;
  const int devices = kintsugi::cuda_device_count();
  if (argc > 1 && std::strcmp(argv[1], "--device-present") == 0) return devices > 0 ? 0 : kSkipped;
  if (devices == 0) {
    std::printf("no CUDA device visible: GPU tests skipped\n");
    return kSkipped;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
