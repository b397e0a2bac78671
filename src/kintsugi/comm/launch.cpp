#include "kintsugi/comm/launch.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

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

void agree_on_setup(const MpiRuntime* mpi, const std::string& error, double timeout_s) {
  if (!mpi) {
    if (error.empty()) return;
    fmt::print(stderr, "kintsugi: error: {}\n", error);
    throw AlreadyReported{};
  }
  const int rank = mpi->world_rank();
  int mine = error.empty() ? mpi->world_size() : rank, first = 0;
  // Polled against the deadline: a rank stopped during setup must not hang the others.
  MPI_Request request;
  MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &request);
  const auto start = std::chrono::steady_clock::now();
  auto waited = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (int done = 0; MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done;) {
    if (waited() > timeout_s) {
      fmt::print(stderr,
                 "kintsugi: error: world rank {} waited {:g} s (comm.timeout_s) for the other "
                 "ranks to finish setting up (config, data, checkpoint): one is stopped, hung or "
                 "still reading; ending the job\n",
                 rank, timeout_s);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
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
