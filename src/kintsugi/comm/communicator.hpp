#pragma once
// A group of ranks and the communication among them, as an interface: the MPI implementation
// (comm/mpi/) runs the MPI library's own non-blocking collectives; the NCCL one (comm/nccl/)
// runs each group's collectives on its own CUDA stream. make_world_communicator() is the one
// place an implementation is chosen.
//
// Two planes:
// - The data plane moves tensors (which may live on a device): all-reduce, reduce-scatter,
//   all-gather, all-to-all, broadcast, send and receive. Each group's operations start in
//   submission order and overlap with computation; the *_async forms return a handle, the
//   others wait. All members of a group issue the group's collectives in the same order.
//   Transfers carry no tag: the k-th send from rank a to rank b pairs with the k-th receive b
//   posts from a (NCCL has no tags), so callers post them in matching order (the pipeline
//   schedules do, tested).
// - The control plane moves host values: flags, lengths, scalar sums, an agreed error, strings
//   gathered to one rank, host bytes between two ranks, barriers. It is blocking, ordered
//   independently of the data plane, and never holds tensors.
//
// Every wait on either plane has a deadline (comm.timeout_s): a group whose operation does not
// complete in time ends the job with a message naming the group, the operation and the ranks
// that did not arrive, instead of hanging. Over MPI, a certain deadlock (every rank waiting for
// an operation no waiting rank has posted) ends the job within seconds instead
// (comm/mpi/deadlock.hpp).
//
// Byte counters hold the volume each data-plane call must move per rank, the same for every
// implementation (the library may route the bytes differently, e.g. through shared memory):
// over n ranks and a buffer of B bytes, all-reduce sends 2(n-1)/n B (a bandwidth-optimal
// reduce-scatter + all-gather: everything but the rank's own chunk twice), reduce-scatter and
// all-gather (n-1)/n B (B the whole buffer), all-to-all (n-1)/n B sent and as much received
// (B one rank's input: every block but the rank's own), all-to-all-v the blocks it sends to and
// receives from the other ranks (its own block stays), broadcast B on every rank but the last
// of the chain from the root (every rank but the root receives B), send and receive the
// message. The control plane is not counted.
#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kintsugi/comm/comm_handle.hpp"
#include "kintsugi/core/device.hpp"
#include "kintsugi/core/tensor.hpp"

namespace kintsugi {

enum class CommOp : int {
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  send,
  recv,
  all_to_all,
  count
};
constexpr int kCommOps = static_cast<int>(CommOp::count);
std::string_view name_of(CommOp op);

enum class ReduceOp { sum, max };

struct CommBytes {
  std::uint64_t sent = 0, received = 0, calls = 0;
};

// Which library moves device tensors (comm.backend): NCCL when the build has it and every rank
// has a GPU of its own (automatic), or MPI staged through host memory, or NCCL required.
enum class CommBackend : std::uint8_t { automatic, mpi, nccl };
template <>
struct EnumNames<CommBackend> {
  static constexpr std::array values = {std::pair{CommBackend::automatic, "auto"},
                                        std::pair{CommBackend::mpi, "mpi"},
                                        std::pair{CommBackend::nccl, "nccl"}};
};

struct CommOptions {
  Device device = Device::cpu;  // where data-plane tensors live
  double timeout_s = 600;       // comm.timeout_s: deadline of every wait
  CommBackend backend = CommBackend::automatic;  // comm.backend
  // comm.deadlock_check_s: world rank 0 looks for a deadlock after waiting this long (0: never)
  double deadlock_check_s = 2;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Collective over this group: ranks passing the same color form a new group, ordered by key.
  // Ranks passing kNoGroup get null.
  static constexpr int kNoGroup = -1;
  virtual std::shared_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // ---- data plane (f32, f64, bf16, f16, i32; u8 only where nothing is summed).
  // In place over t. With ReduceOp::max every rank ends with the elementwise maximum. bf16 and
  // f16 are summed in f32 and rounded after each addition.
  CommHandle all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum);
  // in holds size() equal chunks; this rank's out receives the sum of everybody's chunk rank().
  // `in` serves as scratch and is left undefined; out may be this rank's chunk of in.
  CommHandle reduce_scatter_async(const Tensor& in, const Tensor& out);
  // out (size() chunks) receives every rank's `in` in rank order; in may be out's chunk rank().
  CommHandle all_gather_async(const Tensor& in, const Tensor& out);
  // in and out have the same dtype and numel, a multiple of size(); each holds size() equal
  // blocks in rank order. Block j of this rank's `in` arrives as block rank() of rank j's `out`
  // (block rank() stays: it is copied from in to out). in and out must not overlap. Nothing is
  // summed: any type of the data plane, u8 too.
  CommHandle all_to_all_async(const Tensor& in, const Tensor& out);
  // All-to-all of uneven blocks (MPI_Alltoallv): `in` holds size() blocks of send[j] elements
  // in rank order, block j going to rank j; `out` receives recv[j] elements from rank j, in
  // rank order (block rank() is copied). Each rank's recv[j] must equal rank j's send[rank()]
  // (callers exchange the counts first, e.g. with all_to_all). The counts are copied: they may
  // go out of scope before the handle is waited. in and out must not overlap; nothing is
  // summed. Counted under CommOp::all_to_all: the bytes of the blocks of the other ranks.
  CommHandle all_to_all_v_async(const Tensor& in, std::span<const std::int64_t> send,
                                const Tensor& out, std::span<const std::int64_t> recv);
  CommHandle broadcast_async(const Tensor& t, int root);
  CommHandle send_async(const Tensor& t, int dst);
  CommHandle recv_async(const Tensor& t, int src);

  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) { all_reduce_async(t, op).wait(); }
  void reduce_scatter(const Tensor& in, const Tensor& out) { reduce_scatter_async(in, out).wait(); }
  void all_gather(const Tensor& in, const Tensor& out) { all_gather_async(in, out).wait(); }
  void all_to_all(const Tensor& in, const Tensor& out) { all_to_all_async(in, out).wait(); }
  void all_to_all_v(const Tensor& in, std::span<const std::int64_t> send, const Tensor& out,
                    std::span<const std::int64_t> recv) {
    all_to_all_v_async(in, send, out, recv).wait();
  }
  void broadcast(const Tensor& t, int root) { broadcast_async(t, root).wait(); }

  // ---- control plane: host values, blocking.
  virtual void host_all_reduce(std::span<double> values, ReduceOp op) = 0;
  double host_all_reduce(double value, ReduceOp op = ReduceOp::sum);
  // Every rank's string on `root`, in rank order; other ranks get an empty list.
  virtual std::vector<std::string> host_gather(const std::string& mine, int root) = 0;
  // Host bytes between two ranks, paired in posting order like the data plane's transfers; the
  // receiver knows the size.
  virtual void host_send(std::span<const std::byte> bytes, int dst) = 0;
  virtual void host_recv(std::span<std::byte> bytes, int src) = 0;
  virtual void barrier() = 0;

  // ---- bytes each data-plane operation must move (above), per operation kind.
  CommBytes bytes(CommOp op) const;
  CommBytes total_bytes() const;
  void reset_counters();

 protected:
  Communicator(std::string name, int rank, int size)
      : name_(std::move(name)), rank_(rank), size_(size) {}

  // The implementation's half: start the operation (arguments checked and counted already).
  virtual CommHandle start_all_reduce(const Tensor& t, ReduceOp op) = 0;
  virtual CommHandle start_reduce_scatter(const Tensor& in, const Tensor& out) = 0;
  virtual CommHandle start_all_gather(const Tensor& in, const Tensor& out) = 0;
  virtual CommHandle start_all_to_all(const Tensor& in, const Tensor& out) = 0;
  // Counts and displacements in elements (displacements: the prefix sums of the counts).
  virtual CommHandle start_all_to_all_v(const Tensor& in, std::vector<std::int64_t> send,
                                        const Tensor& out, std::vector<std::int64_t> recv) = 0;
  virtual CommHandle start_broadcast(const Tensor& t, int root) = 0;
  virtual CommHandle start_send(const Tensor& t, int dst) = 0;
  virtual CommHandle start_recv(const Tensor& t, int src) = 0;

 private:
  void count(CommOp op, std::uint64_t sent, std::uint64_t received);
  void check_peer(int peer, const char* what) const;

  std::string name_;
  int rank_, size_;
  struct Counter {
    std::atomic<std::uint64_t> sent{0}, received{0}, calls{0};
  };
  std::array<Counter, kCommOps> counters_;
};

// The world (every rank of the job) as a group named "world", over the implementation for
// options.device and options.backend: MPI for host memory; for GPU memory NCCL where the build
// has it and every rank has its own GPU (NCCL refuses two ranks on one device), else MPI with
// device tensors staged through host memory. Collective over the job. Needs an initialized
// MpiRuntime (comm/mpi/mpi_runtime.hpp): ranks are launched and bootstrapped by MPI.
std::shared_ptr<Communicator> make_world_communicator(const CommOptions& options = {});

}  // namespace kintsugi
