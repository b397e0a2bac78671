#include "kintsugi/plan/local_cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/core/cache_dir.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/tensor.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/plan/gemm_rate.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best (smallest) half round trip of `repeats` ping-pongs of `bytes` between ranks 0 and 1.
double half_round_trip(Communicator& world, std::vector<float>& buffer, int repeats) {
  const Tensor t{buffer.data(), DType::f32, {static_cast<std::int64_t>(buffer.size())}};
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    world.barrier();
    const double start = now();
    if (world.rank() == 0) {
      world.send_async(t, 1).wait();
      world.recv_async(t, 1).wait();
    } else if (world.rank() == 1) {
      world.recv_async(t, 0).wait();
      world.send_async(t, 0).wait();
    }
    best = std::min(best, (now() - start) / 2);
  }
  return best;
}

}  // namespace

fs::path local_links_file() { return cache_file("local-links.json"); }

double measure_memory_bandwidth_gbs() {
  // 64 MiB each way: far beyond the caches. Bytes moved per copy: read + write.
  const std::size_t n = std::size_t{16} << 20;
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const double start = now();
    std::copy(a.begin(), a.end(), b.begin());
    best = std::min(best, now() - start);
    a[i] = b[n - 1 - i];  // keep the copies observable
  }
  return 2.0 * n * sizeof(float) / best / 1e9;
}

LocalLinks measure_local_links(Communicator& world) {
  if (world.size() < 2)
    fail("bench comm measures links between ranks: launch it with at least 2 ranks "
         "(mpirun -np 2 kintsugi bench comm)");
  LocalLinks links;
  std::vector<float> small(1), large(std::size_t{4} << 20);  // 4 bytes, 16 MiB
  half_round_trip(world, small, 5);                           // warm-up
  links.latency_us = half_round_trip(world, small, 50) * 1e6;
  const double t = half_round_trip(world, large, 5);
  // Bandwidth of the transfer itself: the half round trip less the per-message latency.
  links.bandwidth_gbs =
      large.size() * sizeof(float) / std::max(t - links.latency_us * 1e-6, 1e-9) / 1e9;
  world.barrier();
  if (world.rank() == 0) links.memory_bandwidth_gbs = measure_memory_bandwidth_gbs();
  links.cpu = cpu_model_name();
  return links;
}

std::optional<LocalLinks> cached_local_links() {
  std::ifstream in(local_links_file());
  if (!in) return std::nullopt;
  try {
    const auto j = nlohmann::json::parse(in);
    if (j.at("cpu").get<std::string>() != cpu_model_name()) return std::nullopt;
    LocalLinks l{j.at("latency_us").get<double>(), j.at("bandwidth_gbs").get<double>(),
                 j.at("memory_bandwidth_gbs").get<double>(), j.at("cpu").get<std::string>()};
    // Caches written before the collectives were timed have no rates: the link's bandwidth
    // stands in for them.
    l.all_reduce_gbs = j.value("all_reduce_gbs", 0.0);
    l.reduce_scatter_gbs = j.value("reduce_scatter_gbs", 0.0);
    l.all_gather_gbs = j.value("all_gather_gbs", 0.0);
    return l;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged cache is only a cache
  }
}

void store_local_links(const LocalLinks& measured) {
  // Keep the best ever seen, as the GEMM rate does: a busy machine only under-reports its links
  // (and `kintsugi tune` refits what a real run gets).
  LocalLinks l = measured;
  if (const auto old = cached_local_links()) {
    l.latency_us = std::min(l.latency_us, old->latency_us);
    l.bandwidth_gbs = std::max(l.bandwidth_gbs, old->bandwidth_gbs);
    l.memory_bandwidth_gbs = std::max(l.memory_bandwidth_gbs, old->memory_bandwidth_gbs);
    l.all_reduce_gbs = std::max(l.all_reduce_gbs, old->all_reduce_gbs);
    l.reduce_scatter_gbs = std::max(l.reduce_scatter_gbs, old->reduce_scatter_gbs);
    l.all_gather_gbs = std::max(l.all_gather_gbs, old->all_gather_gbs);
  }
  std::error_code ec;
  fs::create_directories(local_links_file().parent_path(), ec);
  const fs::path tmp = local_links_file().string() + ".tmp";
  std::ofstream(tmp) << nlohmann::json{{"latency_us", l.latency_us},
                                       {"bandwidth_gbs", l.bandwidth_gbs},
                                       {"memory_bandwidth_gbs", l.memory_bandwidth_gbs},
                                       {"all_reduce_gbs", l.all_reduce_gbs},
                                       {"reduce_scatter_gbs", l.reduce_scatter_gbs},
                                       {"all_gather_gbs", l.all_gather_gbs},
                                       {"cpu", l.cpu}}
                            .dump(2)
                     << "\n";
  fs::rename(tmp, local_links_file(), ec);  // best effort: a read-only home only costs re-measuring
}

ClusterSpec local_cluster(std::int64_t ranks) {
  const auto links = cached_local_links();
  if (!links)
    fail("the local cluster's links were never measured on this machine: run "
         "`mpirun -np 2 kintsugi bench comm` first ({})",
         local_links_file().string());
  const std::int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  if (ranks <= 0) ranks = cores;
  // One rank computes on one thread (OMP_NUM_THREADS=1 in multi-rank jobs); more ranks than
  // cores share them.
  const int threads = compute_threads();
  set_compute_threads(1);
  MemoryTracker memory;
  const double f32 = local_gemm_rate(*make_cpu_backend(memory), DType::f32).gflops;
  const auto bf16 = cached_gemm_rate(1, DType::bf16);
  set_compute_threads(threads);
  const double share = std::min(1.0, static_cast<double>(cores) / static_cast<double>(ranks));
  const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES));
  const double page = static_cast<double>(sysconf(_SC_PAGE_SIZE));
  ClusterSpec c;
  c.name = "local";
  c.source = fmt::format("this machine ({} cores shared by {} ranks; {})", cores, ranks,
                         local_links_file().string());
  c.devices_per_node = ranks;
  c.memory_gb = pages * page / 1e9 / static_cast<double>(ranks);
  c.reserved_gb = 0;
  c.peak_tflops_fp32 = f32 * share / 1e3;
  c.peak_tflops_fp16 = c.peak_tflops_fp32;  // fp16 operands are widened into sgemm
  c.peak_tflops_bf16 = (bf16 ? bf16->gflops : f32) * share / 1e3;
  c.memory_bandwidth_gbs = links->memory_bandwidth_gbs * share;
  c.gemm_max_efficiency = 1.0;
  c.gemm_half_dim = 32;
  c.intra_node = {links->bandwidth_gbs, links->latency_us};
  c.intra_node.all_reduce_gbs = links->all_reduce_gbs;
  c.intra_node.reduce_scatter_gbs = links->reduce_scatter_gbs;
  c.intra_node.all_gather_gbs = links->all_gather_gbs;
  c.inter_node = c.intra_node;  // one node
  c.train_device = Device::cpu;
  return c;
}

}  // namespace kintsugi
