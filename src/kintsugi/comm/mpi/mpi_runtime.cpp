#include "kintsugi/comm/mpi/mpi_runtime.hpp"

#include <mpi.h>

#include <climits>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "kintsugi/comm/mpi/startup_deadline.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi {

namespace {

// The MPI library allocates a temporary as large as the buffer for many collectives (Open MPI's
// non-blocking all-reduce, reduce-scatter and all-to-all among them) and frees it when the call
// completes. glibc serves blocks over 32 MiB, and every block of a thread's own arena, from
// memory it returns to the system on free, so the next call faults every page in again: on the
// machine in docs/benchmarks.md a fault costs about 13 us a page, and a 64 MiB all-reduce took
// 200 ms instead of 13 ("Collectives: the communicator vs the library called directly"). Like
// the caching allocators of training frameworks, keep freed memory in the process: one arena
// (the progress threads' temporaries come back to the heap that served them), no mmap'd blocks,
// no trimming. A training process's footprint is its peak anyway. KINTSUGI_KEEP_FREED_MEMORY=0,
// or any of glibc's own MALLOC_* settings in the environment, leaves malloc as configured.
void keep_freed_memory() {
#if defined(__GLIBC__)
  if (!Switches::process().on(Switch::keep_freed_memory)) return;
  for (const char* own : {"MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
                          "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"})
    if (std::getenv(own)) return;
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv, const std::optional<StopAtStart>& stop) {
  // Open MPI runs every non-blocking collective through its libnbc component, whose all-reduce
  // takes a binomial tree for in-place calls and for fewer than 4 ranks: one rank receives and
  // adds up everything, then broadcasts it back. Its ring (the bandwidth-optimal schedule,
  // which kintsugi ran itself before) measured up to 2-3x faster on large buffers here
  // (docs/benchmarks.md); ask for it unless the environment chose. Other MPIs ignore this.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
  keep_freed_memory();  // before MPI starts its threads
  // Every call here waits for all ranks and none has a timeout of its own: a rank stopped now
  // would hang the job before comm.timeout_s is known (startup_deadline.hpp).
  const double timeout_s = startup_timeout_s();
  stop_at_start(stop, "init");
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
  stop_at_start(stop, "split");
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
