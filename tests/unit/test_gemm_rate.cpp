// The cache of measured GEMM rates (the MFU peak): one best rate per (CPU, threads, dtype); and
// the timing on a device behind them.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/device_timing.hpp"
#include "kintsugi/plan/gemm_rate.hpp"

namespace kintsugi {
namespace {

class GemmRateCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kintsugi-gemm-rate-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    const char* old = std::getenv("XDG_CACHE_HOME");
    saved_ = old ? old : "";
    had_ = old != nullptr;
    ::setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (had_) ::setenv("XDG_CACHE_HOME", saved_.c_str(), 1);
    else ::unsetenv("XDG_CACHE_HOME");
    std::filesystem::remove_all(dir_);
  }
  static GemmRate rate(double gflops, int threads, DType dtype) {
    return GemmRate{gflops, threads, 512, cpu_model_name(), dtype, ""};
  }
  std::filesystem::path dir_;
  std::string saved_;
  bool had_ = false;
};

TEST_F(GemmRateCache, KeepsTheBestRatePerThreadCountAndDtype) {
  EXPECT_FALSE(cached_gemm_rate(2, DType::f32));
  store_gemm_rate(rate(100, 2, DType::f32));
  store_gemm_rate(rate(160, 2, DType::bf16));
  store_gemm_rate(rate(90, 2, DType::f32));  // a busy machine's lower measurement
  store_gemm_rate(rate(55, 1, DType::f32));
  EXPECT_EQ(cached_gemm_rate(2, DType::f32)->gflops, 100);
  EXPECT_EQ(cached_gemm_rate(2, DType::bf16)->gflops, 160);
  EXPECT_EQ(cached_gemm_rate(1, DType::f32)->gflops, 55);
  EXPECT_FALSE(cached_gemm_rate(1, DType::bf16));
  EXPECT_EQ(cached_gemm_rate(2, DType::bf16)->dtype, DType::bf16);
}

TEST_F(GemmRateCache, EntriesWithoutADtypeAreF32AndADamagedCacheIsIgnored) {
  std::filesystem::create_directories(dir_ / "kintsugi");
  std::ofstream(dir_ / "kintsugi" / "gemm-rate.json")
      << R"({"rates": [{"gflops": 42, "threads": 3, "size": 64, "cpu": ")" << cpu_model_name()
      << R"("}]})";
  EXPECT_EQ(cached_gemm_rate(3, DType::f32)->gflops, 42);
  EXPECT_FALSE(cached_gemm_rate(3, DType::bf16));
  std::ofstream(dir_ / "kintsugi" / "gemm-rate.json") << "{not json";
  EXPECT_FALSE(cached_gemm_rate(3, DType::f32));
}

TEST(GemmRate, PeakFollowsTheRunsArithmetic) {
  EXPECT_EQ(peak_dtype(Precision::bf16), DType::bf16);
  EXPECT_EQ(peak_dtype(Precision::fp16), DType::f32);  // f16 operands are widened into sgemm
  EXPECT_EQ(peak_dtype(Precision::fp32), DType::f32);
  MemoryTracker memory;
  const auto cpu = make_cpu_backend(memory);
  const GemmRate measured = measure_gemm_rate(*cpu, 96, 1, DType::bf16);
  EXPECT_GT(measured.gflops, 0);
  EXPECT_EQ(measured.dtype, DType::bf16);
  EXPECT_EQ(measured.cpu, cpu_model_name());
  EXPECT_THROW(measure_gemm_rate(*cpu, 96, 1, DType::f64), Error);
  // f16 operands: the peak of fp16 runs on a GPU (on the CPU they are widened into sgemm).
  EXPECT_EQ(measure_gemm_rate(*cpu, 96, 1, DType::f16).dtype, DType::f16);
  // The operands (two 96 x 96 bf16, one f32 result) lived in the backend's tracked memory and
  // were released; what stays is the backend's own GEMM scratch.
  EXPECT_GE(memory.peak(MemoryKind::workspace) - memory.current(MemoryKind::workspace),
            96u * 96u * (2 + 2 + 4));
}

TEST(DeviceTiming, BatchesQuickCallsAndTimesLongOnesAlone) {
  MemoryTracker memory;
  const auto cpu = make_cpu_backend(memory);
  int calls = 0;
  // A call longer than a batch: the warm-up, then one call per repeat.
  const double slow = best_seconds_per_call(
      *cpu, [&] { ++calls, std::this_thread::sleep_for(std::chrono::milliseconds(25)); }, 3, 0.02);
  EXPECT_EQ(calls, 1 + 3);
  EXPECT_GE(slow, 0.025);
  // A quick call: batches of many.
  calls = 0;
  const double quick = best_seconds_per_call(*cpu, [&] { ++calls; }, 3, 1e-3);
  EXPECT_GT(calls, 2 + 3 * 2);
  EXPECT_TRUE(std::isfinite(quick) && quick > 0);
}

}  // namespace
}  // namespace kintsugi
