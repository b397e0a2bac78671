#pragma once
// The Communicator over NCCL, for tensors on the GPU (built with -DKINTSUGI_CUDA=ON where NCCL is
// installed). Each group has its own NCCL communicator and its own high-priority CUDA stream:
// an operation first makes that stream wait for everything enqueued on the compute stream
// before it (an event), runs there, and hands back a device handle (comm/comm_handle.hpp) whose
// wait() makes the compute stream wait for it, so the host never blocks and compute overlaps
// communication.
//
// The same group over MPI (`host`) carries the rest: the control plane, the NCCL unique id at
// creation (rank 0 makes it, the others receive it over the control plane), tensors in host
// memory, and pipeline transfers. Pipeline sends and receives stay on MPI, staged through host
// memory: NCCL serializes a communicator's operations on one stream, so a rank that posts a
// send before the matching receive of the reverse direction (which the pipeline schedules do,
// safely over MPI's non-blocking transfers) could deadlock; running them as NCCL needs each
// exchange grouped (ncclGroupStart/End), which waits for a multi-GPU machine to be tested on.
//
// Deadlines: a process-wide watchdog thread polls every operation in flight; one that is not
// done within comm.timeout_s, or an error NCCL reports asynchronously (a peer died), prints the
// group, its size, the operation and its bytes, aborts that NCCL communicator and ends the job
// (MPI_Abort).
#include <memory>
#include <string>

#include "kintsugi/comm/communicator.hpp"

namespace kintsugi {

// Why NCCL cannot serve this job's GPU ranks, or "" when it can: every rank needs a GPU of its
// own (NCCL refuses two ranks on one device). Collective over `world` (its control plane).
std::string nccl_unusable_reason(Communicator& world);

// The world over NCCL; `host` is the same world over MPI. Collective.
std::shared_ptr<Communicator> make_nccl_world(std::shared_ptr<Communicator> host,
                                              const CommOptions& options);

}  // namespace kintsugi
