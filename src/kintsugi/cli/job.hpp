#pragma once
// What `train` and `eval` do alike once every rank has agreed on its setup: share the node's
// cores among its ranks and run the command's body on each rank, under MPI over the world
// communicator and the config's layout, where one rank's failure ends the job.
#include <functional>
#include <string>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/mpi_runtime.hpp"
#include "kintsugi/comm/topology.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi::cli {

// `threads` (0: all cores, shared out among the node's ranks when OMP_NUM_THREADS is not set).
void set_rank_threads(int threads, const MpiRuntime* mpi);

// body(nullptr) without MPI; under MPI body(&topology), and a kintsugi::Error past setup is
// printed with the rank and ends the job (the launcher stops the other ranks instead of letting
// them wait forever). `agree`, when given, runs over the world before any group is built from
// the config (the ranks check that they hold the same one).
void run_on_ranks(const RunConfig& config, const MpiRuntime* mpi,
                  const std::function<void(const Topology*)>& body,
                  const std::function<void(Communicator& world)>& agree = nullptr);

}  // namespace kintsugi::cli
