#pragma once
// The Communicator over MPI. Tensors in host memory go to MPI as they are; tensors on a device
// are staged through host memory (host_staging.hpp). The data plane calls the library's own
// non-blocking collectives (MPI_Iallreduce, MPI_Iallgather, MPI_Ialltoall, MPI_Ibcast;
// reduce-scatter as one
// MPI_Ialltoallv and a rank-order sum, mpi_communicator.cpp) and transfers (MPI_Isend/MPI_Irecv)
// on the group's progress thread, so the MPI library picks its algorithm (shared memory inside
// a node, trees or rings across nodes). The
// control plane runs blocking on the caller's thread over a second MPI communicator of the same
// group, so the two planes never interleave their orders. Transfers on both planes use one tag:
// MPI keeps messages between two ranks in order, which pairs them by posting order as the
// interface promises.
#include <mpi.h>

#include <memory>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/group_status.hpp"
#include "kintsugi/comm/mpi/progress_thread.hpp"
#include "kintsugi/comm/mpi/stall_watch.hpp"

namespace kintsugi {

class MpiCommunicator final : public Communicator {
 public:
  // A group whose control-plane communicator is `control` (owned); collective over its members,
  // which duplicate it for the data plane.
  MpiCommunicator(std::string name, MPI_Comm control, std::shared_ptr<StallWatch> watch);
  ~MpiCommunicator() override;

  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override;

  void host_all_reduce(std::span<double> values, ReduceOp op) override;
  std::vector<std::string> host_gather(const std::string& mine, int root) override;
  void host_send(std::span<const std::byte> bytes, int dst) override;
  void host_recv(std::span<std::byte> bytes, int src) override;
  void barrier() override;

 protected:
  CommHandle start_all_reduce(const Tensor& t, ReduceOp op) override;
  CommHandle start_reduce_scatter(const Tensor& in, const Tensor& out) override;
  CommHandle start_all_gather(const Tensor& in, const Tensor& out) override;
  CommHandle start_all_to_all(const Tensor& in, const Tensor& out) override;
  CommHandle start_all_to_all_v(const Tensor& in, std::vector<std::int64_t> send,
                                const Tensor& out, std::vector<std::int64_t> recv) override;
  CommHandle start_broadcast(const Tensor& t, int root) override;
  CommHandle start_send(const Tensor& t, int dst) override;
  CommHandle start_recv(const Tensor& t, int src) override;

 private:
  // A control-plane operation: numbered, posted by `post`, awaited against the deadline.
  void control(OpLabel label, const std::function<void(std::vector<MPI_Request>&)>& post);
  CommHandle transfer(const Tensor& t, int peer, bool sending);

  std::shared_ptr<StallWatch> watch_;
  MPI_Comm control_ = MPI_COMM_NULL, data_ = MPI_COMM_NULL;
  std::unique_ptr<GroupStatus> status_;
  std::unique_ptr<ProgressThread> progress_;
};

// The world over MPI (make_world_communicator picks it for host memory).
std::shared_ptr<Communicator> make_mpi_world(const CommOptions& options);

}  // namespace kintsugi
