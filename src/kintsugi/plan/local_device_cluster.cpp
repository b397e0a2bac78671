#include "kintsugi/plan/local_device_cluster.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "kintsugi/backend/device_info.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/attention_rate.hpp"
#include "kintsugi/plan/gemm_curve.hpp"
#include "kintsugi/plan/gemm_rate.hpp"
#include "kintsugi/plan/local_cluster.hpp"
#include "kintsugi/plan/measurement_cache.hpp"
#include "kintsugi/plan/memory_bandwidth.hpp"
#include "kintsugi/plan/training_gemm.hpp"

namespace kintsugi {

namespace {

std::string tflops(double gflops) { return fmt::format("{:.2f}", gflops / 1e3); }

}  // namespace

LocalDeviceCluster local_device_cluster(Backend& backend, const LinkSpec& links,
                                        const std::string& links_source,
                                        const LocalDeviceOptions& o) {
  const DeviceInfo info = device_info(backend);
  const Device device = backend.device();
  const std::string kind(name_of(device));
  const std::int64_t ranks = o.ranks > 0 ? o.ranks : info.visible_devices;
  if (ranks > info.visible_devices)
    fail("{} ranks, but {} {} device{} visible: the local {} cluster gives each rank a device of "
         "its own (use --ranks {} or fewer)",
         ranks, info.visible_devices, kind, info.visible_devices == 1 ? " is" : "s are", kind,
         info.visible_devices);
  auto key = [&](std::string quantity) { return MeasurementKey{device, info.name, quantity}; };

  // Peaks: bench gemm's rate per dtype, lifted onto the curve through the run's dtype's rates
  // at two sizes.
  const GemmRate f32 = local_gemm_rate(backend, DType::f32, o.gemm_size);
  const GemmRate bf16 = local_gemm_rate(backend, DType::bf16, o.gemm_size);
  const GemmRate f16 = local_gemm_rate(backend, DType::f16, o.gemm_size);
  const DType dtype = compute_dtype(o.precision);
  const GemmRate& large = dtype == DType::bf16 ? bf16 : dtype == DType::f16 ? f16 : f32;
  GemmRate small = large;
  small.size = std::max(1, large.size / 2);
  small.gflops = cached_or_measured(
      key(fmt::format("GEMM GFLOP/s {} {}^3", name_of(dtype), small.size)),
      [&] { return measure_gemm_rate(backend, small.size, o.repeats, dtype).gflops; });
  const GemmCurve curve = fit_gemm_curve(large, small);
  // The curve is the forward GEMM's; a training step also runs the two backward layouts.
  const double training_share = cached_or_measured(
      key(fmt::format("training GEMM share of forward {} {}^3", name_of(dtype), large.size)),
      [&] { return measure_training_gemm(backend, large.size, o.repeats, dtype).efficiency; });

  const double attention = cached_or_measured(
      key("attention TFLOP/s " + describe(o.attention, dtype)),
      [&] { return measure_attention_rate(backend, o.attention, dtype, o.repeats).tflops; });
  const double bandwidth = cached_or_measured(
      key(fmt::format("GELU backward GB/s {} {} bytes", name_of(dtype), o.bandwidth_bytes)),
      [&] {
        return measure_elementwise_bandwidth_gbs(backend, dtype, o.bandwidth_bytes, o.repeats);
      });

  LocalDeviceCluster out;
  ClusterSpec& c = out.spec;
  c.name = "local-" + kind;
  c.train_device = device;
  c.source = fmt::format("this machine's {}, {} of {} visible, measured ({})", info.name, ranks,
                         info.visible_devices, measurements_file().string());
  c.devices_per_node = ranks;
  c.memory_gb = info.memory_bytes / 1e9;
  c.reserved_gb = 0;
  c.peak_tflops_fp32 = peak_on_curve(f32, curve.half_dim) / 1e3;
  c.peak_tflops_bf16 = peak_on_curve(bf16, curve.half_dim) / 1e3;
  c.peak_tflops_fp16 = peak_on_curve(f16, curve.half_dim) / 1e3;
  c.memory_bandwidth_gbs = bandwidth;
  // A fraction of the peak: backward layouts faster than the forward (a CPU's, at times) do
  // not lift it above 1.
  c.gemm_max_efficiency = std::min(1.0, training_share);
  c.gemm_half_dim = curve.half_dim;
  c.intra_node = links;
  c.inter_node = links;  // one node
  c.attention_tflops = attention;

  auto& n = out.notes;
  n.push_back(fmt::format("memory {:.1f} GB per device, as the device reports it; reserved 0: what "
                          "the runtime and libraries keep of it is not measured",
                          c.memory_gb));
  std::vector<std::string> others;
  for (const GemmRate* r : {&f32, &bf16, &f16})
    if (r->dtype != dtype)
      others.push_back(
          fmt::format("{} ({} at {}^3)", name_of(r->dtype), tflops(r->gflops), r->size));
  n.push_back(fmt::format(
      "GEMM: {} {} TFLOP/s at {}^3 and {} at {}^3 give the curve: half_dim {:.0f}, peak {}; "
      "{} take the same curve (the rates of the large GEMMs are `kintsugi bench gemm --device "
      "{}`'s, cached)",
      name_of(dtype), tflops(large.gflops), large.size, tflops(small.gflops), small.size,
      curve.half_dim, tflops(curve.peak_gflops), fmt::join(others, " and "), kind));
  n.push_back(fmt::format(
      "training GEMMs: forward, backward-input and backward-weight GEMMs of {}^3 in {} together "
      "reach {:.3f} of the forward's rate: gemm.max_efficiency {:.3f}",
      large.size, name_of(dtype), training_share, c.gemm_max_efficiency));
  n.push_back(fmt::format("attention: {:.2f} TFLOP/s, forward and backward on {} (the attention "
                          "core's FLOPs over the full s x s)",
                          attention, describe(o.attention, dtype)));
  n.push_back(fmt::format("memory bandwidth: {:.0f} GB/s, the backend's GELU backward over {} "
                          "MiB of {} per tensor (two reads and a write per element): the rate "
                          "the step's memory-bound kernels reach, not a plain copy's",
                          bandwidth, o.bandwidth_bytes >> 20, name_of(dtype)));
  n.push_back(fmt::format(
      "links: {:.2f} GB/s, {:.1f} us, {}; transfers between {} devices (NCCL, or MPI staging "
      "through host memory) are not measured",
      links.bandwidth_gbs, links.latency_us, links_source, kind));
  n.push_back("host time per step (host.step_overhead_ms) is not measured: 0");
  return out;
}

LocalDeviceCluster measure_local_device_cluster(Device device, const LocalDeviceOptions& options) {
  MemoryTracker memory;
  const auto backend = make_backend(device, memory);  // refuses a device the build lacks
  const auto links = cached_local_links();
  if (!links)
    fail("the local cluster's links were never measured on this machine: run "
         "`mpirun -np 2 kintsugi bench comm` first ({})",
         local_links_file().string());
  return local_device_cluster(
      *backend, {links->bandwidth_gbs, links->latency_us},
      fmt::format("MPI between two host processes (`mpirun -np 2 kintsugi bench comm`, {})",
                  local_links_file().string()),
      options);
}

}  // namespace kintsugi
