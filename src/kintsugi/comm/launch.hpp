#pragma once
// How this process was started, and how the job's ranks agree on errors found before any work.
#include <memory>
#include <optional>
#include <string>

#include "kintsugi/comm/mpi/mpi_runtime.hpp"

namespace kintsugi {

// True when a parallel launcher (mpirun, srun, mpiexec) started this process; then the job runs
// over MPI, otherwise as one process without it.
bool launched_by_mpi();

// Thrown after the one message about a failed job has been printed (by one rank): the caller
// exits non-zero without printing again.
struct AlreadyReported {
  int exit_code = 1;
};

// Every rank calls this with its verdict on the job's setup (empty: fine). If any rank failed,
// the lowest failing rank prints its message, and every rank throws AlreadyReported: one clear
// message, a clean exit, no rank left waiting in a collective. Without MPI it prints and throws
// when `error` is set. A rank still missing after timeout_s ends the job (MPI_Abort).
void agree_on_setup(const MpiRuntime* mpi, const std::string& error, double timeout_s = 600);

// The same agreement later in a run, over the world communicator (null: one process).
class Communicator;
void agree_on_error(Communicator* world, const std::string& error);

}  // namespace kintsugi
