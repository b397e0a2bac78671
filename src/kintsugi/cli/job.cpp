#include "kintsugi/cli/job.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/threads.hpp"

namespace kintsugi::cli {

void set_rank_threads(int threads, const MpiRuntime* mpi) {
  if (threads == 0 && mpi && !std::getenv("OMP_NUM_THREADS"))
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                              mpi->local_size());
  set_compute_threads(threads);
}

void run_on_ranks(const RunConfig& config, const MpiRuntime* mpi,
                  const std::function<void(const Topology*)>& body,
                  const std::function<void(Communicator& world)>& agree) {
  if (!mpi) return body(nullptr);
  auto world_comm = make_world_communicator(
      {.device = config.train.device,
       .timeout_s = config.comm.timeout_s,
       .backend = config.comm.backend,
       .deadlock_check_s = config.comm.deadlock_check_s});
  if (agree) agree(*world_comm);
  const Topology topology(world_comm, config.parallel);
  try {
    body(&topology);
  } catch (const Error& e) {
    fmt::print(stderr, "kintsugi: error (rank {}): {}\n", mpi->world_rank(), e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
}

}  // namespace kintsugi::cli
