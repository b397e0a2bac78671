#pragma once
// The measured GEMM rate of a device: its practical dense peak, used as the denominator of MFU
// (CPU datasheet peaks are rarely reachable) and by the planner's `local` clusters. One rate per
// arithmetic: f32 (on the CPU OpenBLAS sgemm, also the peak of fp16 runs, whose f16 operands are
// widened into sgemm), bf16 (on the CPU our bf16 GEMM, which on AVX512-BF16 runs about twice
// as fast) and f16 (on a GPU f16 operands multiply as f16: the peak of its fp16 runs).
// Measured through the backend's linear op by `kintsugi bench gemm` and cached per (device
// model, threads, dtype); a GPU's rate does not depend on the CPU's threads and is cached with
// threads 0.
#include <optional>
#include <string>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/cpu_info.hpp"
#include "kintsugi/core/dtype.hpp"
#include "kintsugi/core/precision.hpp"

namespace kintsugi {

struct GemmRate {
  double gflops = 0;
  int threads = 0;     // CPU threads; 0 for a device whose rate does not depend on them
  int size = 0;        // square matrices of this size
  std::string cpu;     // the device's model name (Backend::hardware())
  DType dtype = DType::f32;  // the operands' type (products accumulate in f32 either way)
  std::string source;  // how it was obtained, for logs
};

// Best of `repeats` GEMMs of size x size after a warm-up (device_timing.hpp: small GEMMs on an
// asynchronous device are timed in batches), on the current thread count. Multiplies a
// row-major A by a transposed B, the layout of a linear layer's forward pass.
GemmRate measure_gemm_rate(Backend& backend, int size = 3072, int repeats = 5,
                           DType dtype = DType::f32);
// The thread count a rate of this backend is measured and cached with: the compute threads on
// the CPU, 0 on other devices.
int rate_threads(const Backend& backend);
// The cached rate of `hardware` (default: this machine's CPU).
std::optional<GemmRate> cached_gemm_rate(int threads, DType dtype = DType::f32,
                                         const std::string& hardware = "");
// Caches `rate`, or keeps the cached one if it is higher (the peak is the best ever seen).
void store_gemm_rate(const GemmRate& rate);
// The cached rate of the backend's device for the current thread count, measuring (and
// caching) it at `size` when absent.
GemmRate local_gemm_rate(Backend& backend, DType dtype = DType::f32, int size = 3072);
// The dtype whose GEMM rate is the peak of a run at train.precision `precision`.
DType peak_dtype(Precision precision);

}  // namespace kintsugi
