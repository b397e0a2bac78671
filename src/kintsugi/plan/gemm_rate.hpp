#pragma once
// The measured GEMM rate of this machine: the CPU's practical dense peak, used as the
// denominator of MFU on CPUs (whose datasheet peaks are rarely reachable) and by the planner's
// `local` cluster. One rate per arithmetic: f32 (OpenBLAS sgemm; also the peak of fp16 runs,
// whose f16 operands are widened into sgemm) and bf16 (our bf16 GEMM, which on AVX512-BF16
// runs about twice as fast). Measured by `kintsugi bench gemm` and cached per (CPU model,
// threads, dtype).
#include <optional>
#include <string>

#include "kintsugi/core/dtype.hpp"

namespace kintsugi {

struct GemmRate {
  double gflops = 0;
  int threads = 0;
  int size = 0;        // square matrices of this size
  std::string cpu;     // CPU model name
  DType dtype = DType::f32;  // the operands' type (products accumulate in f32 either way)
  std::string source;  // how it was obtained, for logs
};

// Best of `repeats` GEMMs of size x size after a warm-up, on the current thread count. bf16
// multiplies a row-major A by a transposed B, the layout of a linear layer's forward pass.
GemmRate measure_gemm_rate(int size = 3072, int repeats = 5, DType dtype = DType::f32);
std::optional<GemmRate> cached_gemm_rate(int threads, DType dtype = DType::f32);
// Caches `rate`, or keeps the cached one if it is higher (the peak is the best ever seen).
void store_gemm_rate(const GemmRate& rate);
// The cached rate for the current thread count, measuring (and caching) it when absent.
GemmRate local_gemm_rate(DType dtype = DType::f32);
// The dtype whose GEMM rate is the peak of a run at train.precision `precision`.
DType peak_dtype(const std::string& precision);
std::string cpu_model_name();

}  // namespace kintsugi
