// The cache of measured GEMM rates (the MFU peak): one best rate per (CPU, threads, dtype).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "kintsugi/core/error.hpp"
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
  EXPECT_THROW(measure_gemm_rate(*cpu, 96, 1, DType::f16), Error);
  // The operands (two 96 x 96 bf16, one f32 result) lived in the backend's tracked memory and
  // were released; what stays is the backend's own GEMM scratch.
  EXPECT_GE(memory.peak(MemoryKind::workspace) - memory.current(MemoryKind::workspace),
            96u * 96u * (2 + 2 + 4));
}

}  // namespace
}  // namespace kintsugi
