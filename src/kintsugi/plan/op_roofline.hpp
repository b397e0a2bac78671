#pragma once
// The roofline floor of a profiled op (`kintsugi bench step --profile`): the least time its
// FLOPs and bytes (OpCall, backend/op_call.hpp) can take on this device, against two
// ceilings measured on the run's backend:
//   GEMM rate          the forward GEMM's rate in the run's GEMM type (plan/gemm_rate.hpp: the
//                      rate `bench gemm` cached, or measured at 3072^3), the fastest the
//                      backend multiplies;
//   memory bandwidth   a device-to-device copy through the backend's copy op, bytes read plus
//                      written, over buffers larger than the device's caches: the most a
//                      memory-bound kernel can hope to move. The planner's bandwidth is the rate
//                      the step's own elementwise kernels reach instead (memory_bandwidth.hpp),
//                      about half a copy's on an H200: a floor wants the copy.
// floor = max(FLOPs / GEMM rate, bytes / bandwidth); time / floor is how far an op is from it.
// The bytes are counted as if every tensor came from memory: an op whose tensors stay in a cache
// (small shapes, or a CPU's) can run below its floor.
#include <cstddef>
#include <string>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/profiling_backend.hpp"
#include "kintsugi/core/precision.hpp"

namespace kintsugi {

struct RooflineCeilings {
  double gemm_gflops = 0;
  DType gemm_dtype = DType::f32;
  std::string gemm_source;
  double copy_gbs = 0;          // GB/s (1e9 bytes), read + written
  std::size_t copy_bytes = 0;   // per buffer of the copy
};

// GB/s of the best of `repeats` copies of `bytes` through backend.copy(), counting the bytes
// read and the bytes written (plan/device_timing.hpp batches them).
double measure_copy_bandwidth_gbs(Backend& backend, std::size_t bytes, int repeats = 5);

// The type a run's GEMMs multiply in: bf16 runs in bf16; fp16 runs in f16 on a GPU (in f32 on
// the CPU, which widens f16 into sgemm); fp32 runs in f32.
DType gemm_dtype(Precision precision, Device device);

// Both ceilings on `backend`: its GEMM rate of `dtype` and a copy of `copy_bytes` per buffer.
RooflineCeilings measure_roofline_ceilings(Backend& backend, DType dtype,
                                           std::size_t copy_bytes = std::size_t{256} << 20);

// Seconds the op's FLOPs and bytes take at least, summed over its calls (0 when it reports
// neither).
double floor_seconds(const OpProfile& op, const RooflineCeilings& ceilings);

}  // namespace kintsugi
