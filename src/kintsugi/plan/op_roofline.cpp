#include "kintsugi/plan/op_roofline.hpp"

#include <algorithm>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/device_timing.hpp"
#include "kintsugi/plan/gemm_rate.hpp"

namespace kintsugi {

double measure_copy_bandwidth_gbs(Backend& backend, std::size_t bytes, int repeats) {
  const auto n = static_cast<std::int64_t>(bytes / 4);
  if (n < 1) fail("a copy bandwidth needs at least 4 bytes, not {}", bytes);
  const Buffer src = backend.allocate(MemoryKind::workspace, static_cast<std::size_t>(n) * 4);
  const Buffer dst = backend.allocate(MemoryKind::workspace, static_cast<std::size_t>(n) * 4);
  const Tensor s = src.view(DType::f32, {n}), d = dst.view(DType::f32, {n});
  const double seconds =
      best_seconds_per_call(backend, [&] { backend.copy(s, d); }, repeats);
  return 2.0 * static_cast<double>(s.bytes()) / seconds / 1e9;
}

DType gemm_dtype(Precision precision, Device device) {
  switch (precision) {
    case Precision::bf16: return DType::bf16;
    case Precision::fp16: return device == Device::cpu ? DType::f32 : DType::f16;
    default: return DType::f32;
  }
}

RooflineCeilings measure_roofline_ceilings(Backend& backend, DType dtype,
                                           std::size_t copy_bytes) {
  RooflineCeilings c;
  const GemmRate gemm = local_gemm_rate(backend, dtype);
  c.gemm_gflops = gemm.gflops;
  c.gemm_dtype = dtype;
  c.gemm_source = gemm.source;
  c.copy_bytes = copy_bytes;
  c.copy_gbs = measure_copy_bandwidth_gbs(backend, copy_bytes);
  return c;
}

double floor_seconds(const OpProfile& op, const RooflineCeilings& ceilings) {
  // Over the sums of the op's calls: equal to the sum of each call's floor when the calls are
  // all compute-bound or all memory-bound, as the calls of one op and shape are.
  const double compute = ceilings.gemm_gflops > 0 ? op.flops / (ceilings.gemm_gflops * 1e9) : 0;
  const double memory = ceilings.copy_gbs > 0 ? op.bytes / (ceilings.copy_gbs * 1e9) : 0;
  return std::max(compute, memory);
}

}  // namespace kintsugi
