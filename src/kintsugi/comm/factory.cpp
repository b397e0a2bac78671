// The one place a communicator implementation is chosen (communicator.hpp): MPI for host memory;
// for GPU memory NCCL (comm/nccl/, in builds that have it) or MPI staged through host memory
// (comm/mpi/host_staging.hpp).
#include <fmt/format.h>

#include <cstdio>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/mpi_communicator.hpp"
#include "kintsugi/core/error.hpp"
#ifdef KINTSUGI_WITH_NCCL
#include "kintsugi/comm/nccl/nccl_communicator.hpp"
#endif

namespace kintsugi {

std::shared_ptr<Communicator> make_world_communicator(const CommOptions& options) {
  if (!(options.timeout_s > 0))
    fail("comm.timeout_s = {} must be positive", options.timeout_s);
  if (!(options.deadlock_check_s >= 0))
    fail("comm.deadlock_check_s = {} must not be negative", options.deadlock_check_s);
  if (options.backend == CommBackend::nccl && options.device != Device::cuda)
    fail("comm.backend = \"nccl\" moves GPU memory: it needs train.device = \"cuda\"");
  auto mpi = make_mpi_world(options);
  if (options.device != Device::cuda || options.backend == CommBackend::mpi) return mpi;
#ifdef KINTSUGI_WITH_NCCL
  // A world of one moves nothing: NCCL only when asked for.
  if (options.backend == CommBackend::automatic && mpi->size() == 1) return mpi;
  const std::string why = nccl_unusable_reason(*mpi);
  if (why.empty()) return make_nccl_world(mpi, options);
  if (options.backend == CommBackend::nccl) fail("comm.backend = \"nccl\": {}", why);
  if (mpi->rank() == 0) {
    fmt::print(stderr,
               "kintsugi: note: GPU tensors move through MPI, staged in host memory: {}\n",
               why.substr(0, why.find(':')));
    std::fflush(stderr);
  }
#else
  if (options.backend == CommBackend::nccl)
    fail("comm.backend = \"nccl\": this build of kintsugi has no NCCL (build with "
         "-DKINTSUGI_CUDA=ON where NCCL is installed), so GPU tensors move through MPI: set "
         "comm.backend = \"mpi\" or \"auto\"");
#endif
  return mpi;
}

}  // namespace kintsugi
