#pragma once
// The `local` cluster: this machine, measured rather than looked up. Ranks of a local job are
// processes sharing the CPU's cores, so one "device" is one rank:
//   peak per device    the 1-thread GEMM rate (`kintsugi bench gemm`) x min(1, cores / ranks)
//   memory per device  the machine's memory / ranks
//   links              latency and bandwidth between two ranks through kintsugi's communicator
//                      (`mpirun -np 2 kintsugi bench comm`), the same path training takes,
//                      and the bus bandwidth its all-reduce, reduce-scatter and all-gather
//                      reach on 64 MiB there (LinkSpec's per-collective rates)
//   memory bandwidth   a copy loop over buffers larger than the caches
// All ranks are on one node. The GEMM efficiency curve starts at max_efficiency 1 (the measured
// rate already is the practical peak) and half dimension 32; `kintsugi tune` refits it.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "kintsugi/plan/cluster.hpp"

namespace kintsugi {

class Communicator;

struct LocalLinks {
  double latency_us = 0;
  double bandwidth_gbs = 0;
  double memory_bandwidth_gbs = 0;
  std::string cpu;
  // Bus GB/s of the communicator's collectives on 64 MiB (0: not measured).
  double all_reduce_gbs = 0, reduce_scatter_gbs = 0, all_gather_gbs = 0;
};

// Ping-pong between ranks 0 and 1 of `world` (every rank calls it; ranks > 1 only wait), and
// a copy loop for the memory bandwidth. The result is valid on rank 0.
LocalLinks measure_local_links(Communicator& world);
double measure_memory_bandwidth_gbs();
std::optional<LocalLinks> cached_local_links();
// Where they are cached.
std::filesystem::path local_links_file();
// Caches the best of `links` and what was cached: lowest latency, highest bandwidths.
void store_local_links(const LocalLinks& links);

// Throws kintsugi::Error naming the command to run when the links were never measured.
ClusterSpec local_cluster(std::int64_t ranks = 0);

}  // namespace kintsugi
