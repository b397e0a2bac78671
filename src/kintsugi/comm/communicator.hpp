#pragma once
// A group of ranks and the collectives among them, over MPI. Collectives are our own ring
// algorithms on top of MPI point-to-point, so the bytes each rank sends and receives are known
// exactly and counted: per operation kind, per group. A ring all-reduce of N bytes over n ranks
// sends 2(n-1)/n * N bytes per rank (a reduce-scatter, then an all-gather), the bandwidth
// optimum.
//
// Every operation runs on the group's own communication thread (comm_worker.hpp) in submission
// order; the *_async variants return a handle, the others wait. All members of a group must
// issue the group's collectives in the same order.
#include <array>
#include <atomic>
#include <memory>
#include <string>

#include "kintsugi/comm/comm_worker.hpp"
#include "kintsugi/core/memory.hpp"
#include "kintsugi/core/tensor.hpp"

namespace kintsugi {

enum class CommOp : int { all_reduce, reduce_scatter, all_gather, broadcast, send, recv, count };
constexpr int kCommOps = static_cast<int>(CommOp::count);
std::string_view name_of(CommOp op);

enum class ReduceOp { sum, max };

struct CommBytes {
  std::uint64_t sent = 0, received = 0, calls = 0;
};

class Communicator {
 public:
  // MPI_COMM_WORLD as a group named "world". The tracker must outlive it.
  static std::shared_ptr<Communicator> world(MemoryTracker& memory);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Collective over this group: ranks passing the same color form a new group, ordered by key.
  // Ranks passing kNoGroup get null.
  static constexpr int kNoGroup = -1;
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // In place over t. With ReduceOp::max every rank ends with the elementwise maximum.
  CommHandle all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum);
  // in holds size() equal chunks; this rank's out receives the sum of everybody's chunk rank().
  // `in` serves as scratch and is left undefined.
  CommHandle reduce_scatter_async(const Tensor& in, const Tensor& out);
  // out (size() chunks) receives every rank's `in` in rank order.
  CommHandle all_gather_async(const Tensor& in, const Tensor& out);
  CommHandle broadcast_async(const Tensor& t, int root);
  CommHandle send_async(const Tensor& t, int dst, int tag);
  CommHandle recv_async(const Tensor& t, int src, int tag);

  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) { all_reduce_async(t, op).wait(); }
  void reduce_scatter(const Tensor& in, const Tensor& out) { reduce_scatter_async(in, out).wait(); }
  void all_gather(const Tensor& in, const Tensor& out) { all_gather_async(in, out).wait(); }
  void broadcast(const Tensor& t, int root) { broadcast_async(t, root).wait(); }
  void barrier();

  CommBytes bytes(CommOp op) const;
  CommBytes total_bytes() const;
  void reset_counters();

 private:
  Communicator(MemoryTracker& memory, MPI_Comm comm, std::string name);
  // Ring phases over `data` cut into size() chunks (chunk i = elements [i*n/size, (i+1)*n/size)).
  void ring_reduce_scatter(std::byte* data, std::int64_t n, DType dtype, ReduceOp op);
  void ring_all_gather(std::byte* data, std::int64_t n, DType dtype, CommOp counted_as);
  void sendrecv(const std::byte* send, std::size_t send_bytes, int dst, std::byte* recv,
                std::size_t recv_bytes, int src, CommOp op);
  std::byte* scratch(std::size_t bytes);  // worker thread only
  void count(CommOp op, std::uint64_t sent, std::uint64_t received);
  void check(int rc, const char* what) const;

  std::unique_ptr<CommWorker> owned_worker_;
  CommWorker& worker_;
  MemoryTracker& memory_;
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  Buffer scratch_;
  struct Counter {
    std::atomic<std::uint64_t> sent{0}, received{0}, calls{0};
  };
  std::array<Counter, kCommOps> counters_;
};

}  // namespace kintsugi
