#pragma once
// The `local` cluster when every rank drives a device of its own (`kintsugi plan --cluster
// local --device cuda`, `kintsugi tune --device cuda`): this machine's GPUs, measured through
// the backend the ranks train with. Nothing in it is CUDA-specific: the same code measures any
// Backend (the tests run it on the CPU backend). Per device:
//   peaks              the GEMM rate of each dtype at 3072^3 (gemm_rate.hpp: the measurement
//                      and cache of `kintsugi bench gemm --device D`), lifted onto
//   the GEMM curve     the half dimension through the run's dtype's rate at 3072^3 and at
//                      1536^3 (gemm_curve.hpp); max_efficiency the share of the forward's rate
//                      the forward and both backward GEMMs reach together (training_gemm.hpp)
//   attention          the rate of the backend's attention forward and backward on the planned
//                      model's shape (attention_rate.hpp): attention_tflops
//   memory             the device's total memory (backend/device_info.hpp); reserved 0
//   memory bandwidth   the backend's GELU backward over 256 MiB per tensor in the run's dtype
//                      (memory_bandwidth.hpp)
//   links              what `mpirun -np 2 kintsugi bench comm` measured between two ranks
//                      (local_cluster.hpp): MPI between host processes, not between GPUs
// Measurements are cached (gemm_rate.hpp, measurement_cache.hpp). Every figure that is not
// measured, or measured on another path than training takes, is said in the notes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/precision.hpp"
#include "kintsugi/plan/cluster.hpp"

namespace kintsugi {

struct LocalDeviceOptions {
  std::int64_t ranks = 0;  // one device each; 0: every visible device
  Precision precision = Precision::bf16;  // the run's: the curve's and the attention's dtype
  AttentionShape attention;               // the shape the attention rate is measured on
  // The large GEMM, when no rate is cached. The small one is half of it: much smaller, a GPU's
  // GEMM can take less time than the host takes to enqueue it (a few microseconds), and its
  // rate would be the host's (an estimate: not yet measured on a GPU).
  int gemm_size = 3072;
  std::size_t bandwidth_bytes = std::size_t{256} << 20;  // per tensor of the bandwidth kernel
  int repeats = 5;
};

struct LocalDeviceCluster {
  ClusterSpec spec;
  std::vector<std::string> notes;  // what each figure is, and what is not measured
};

// `links`: between two ranks, and where they come from (for the notes).
LocalDeviceCluster local_device_cluster(Backend& backend, const LinkSpec& links,
                                        const std::string& links_source,
                                        const LocalDeviceOptions& options);

// The local cluster of `device`'s devices, with the links `bench comm` cached. A
// kintsugi::Error when the build has no backend for `device` (make_backend's message) or when
// the links were never measured.
LocalDeviceCluster measure_local_device_cluster(Device device, const LocalDeviceOptions& options);

}  // namespace kintsugi
