#include "kintsugi/comm/launch.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "kintsugi/comm/communicator.hpp"

namespace kintsugi {

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS",
                          "MPI_LOCALNRANKS"}) {
    const char* v = std::getenv(var);
    if (v && *v) return true;
  }
  return false;
}

void agree_on_setup(const MpiRuntime* mpi, const std::string& error) {
  if (!mpi) {
    if (error.empty()) return;
    fmt::print(stderr, "kintsugi: error: {}\n", error);
    throw AlreadyReported{};
  }
  const int rank = mpi->world_rank();
  int mine = error.empty() ? mpi->world_size() : rank, first = 0;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == mpi->world_size()) return;
  if (rank == first) {
    fmt::print(stderr, "kintsugi: error: {}\n", error);
    std::fflush(stderr);
  }
  throw AlreadyReported{};
}

void agree_on_error(Communicator* world, const std::string& error) {
  if (!world || world->size() == 1) return agree_on_setup(nullptr, error);
  // The lowest failing rank r contributes size - r, the largest of all; others contribute 0.
  double first = error.empty() ? 0.0 : static_cast<double>(world->size() - world->rank());
  first = world->host_all_reduce(first, ReduceOp::max);
  if (first == 0) return;
  if (world->rank() == world->size() - static_cast<int>(first)) {
    fmt::print(stderr, "kintsugi: error: {}\n", error);
    std::fflush(stderr);
  }
  throw AlreadyReported{};
}

}  // namespace kintsugi
