// The one place a communicator implementation is chosen. An NCCL communicator (comm/nccl/) would
// be declared here and picked for device memory when the build has it.
#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/mpi_communicator.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi {

std::shared_ptr<Communicator> make_world_communicator(const CommOptions& options) {
  if (!(options.timeout_s > 0))
    fail("comm.timeout_s = {} must be positive", options.timeout_s);
  switch (options.device) {
    case Device::cpu: return make_mpi_world(options);
    case Device::cuda:
      fail("there is no communicator for GPU memory yet (NCCL): use --device cpu");
  }
  KINTSUGI_ASSERT(false);
}

}  // namespace kintsugi
