#include "kintsugi/comm/mpi/mpi_runtime.hpp"

#include <mpi.h>

#include <cstdlib>

#include "kintsugi/comm/mpi/startup_deadline.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  // Open MPI runs every non-blocking collective through its libnbc component, whose all-reduce
  // takes a binomial tree for in-place calls and for fewer than 4 ranks: one rank receives and
  // adds up everything, then broadcasts it back. Its ring (the bandwidth-optimal schedule,
  // which kintsugi ran itself before) measured up to 2-3x faster on large buffers here
  // (docs/benchmarks.md); ask for it unless the environment chose. Other MPIs ignore this.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
  // Every call here waits for all ranks and none has a timeout of its own: a rank stopped now
  // would hang the job before comm.timeout_s is known (startup_deadline.hpp).
  const double timeout_s = startup_timeout_s();
  test_stop_at_start("init");
  int provided = 0;
  {
    const StartupDeadline deadline("MPI initialisation (MPI_Init_thread)", timeout_s);
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  }
  if (provided < MPI_THREAD_MULTIPLE)
    fail("this MPI library does not support MPI_THREAD_MULTIPLE, which kintsugi needs: use an "
         "MPI built with thread support (Open MPI and MPICH are)");
  // Errors come back as codes, which the communicator turns into messages.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  test_stop_at_start("split");
  MPI_Comm node;
  {
    const StartupDeadline deadline("the split of the job by node (MPI_Comm_split_type)",
                                   timeout_s);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  }
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_free(&node);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool MpiRuntime::initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

}  // namespace kintsugi
