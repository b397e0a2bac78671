// The one place a communicator implementation is chosen. Device memory goes through MPI staged in
// host memory (comm/mpi/host_staging.hpp); an NCCL communicator (comm/nccl/) would be declared
// here and picked for device memory when the build has it.
#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/mpi_communicator.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi {

std::shared_ptr<Communicator> make_world_communicator(const CommOptions& options) {
  if (!(options.timeout_s > 0))
    fail("comm.timeout_s = {} must be positive", options.timeout_s);
  return make_mpi_world(options);
}

}  // namespace kintsugi
