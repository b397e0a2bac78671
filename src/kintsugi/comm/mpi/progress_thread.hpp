#pragma once
// One group's data-plane thread, the MPI counterpart of a GPU stream: it posts the group's
// non-blocking MPI operations in submission order, drives them with MPI_Test (MPI makes no
// progress on its own), completes each handle when its operation is done, and holds every
// operation to the deadline (stall_watch.hpp). Operations overlap with computation and with
// each other: a posted receive never holds up a later collective, and each group has its own
// thread, so a tensor-parallel all-reduce never queues behind a data-parallel bucket.
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kintsugi/comm/comm_handle.hpp"
#include "kintsugi/comm/mpi/group_status.hpp"
#include "kintsugi/comm/mpi/stall_watch.hpp"

namespace kintsugi {

class ProgressThread {
 public:
  struct Op {
    OpLabel label;
    std::function<std::vector<MPI_Request>()> post;  // starts it, on the thread
    std::function<void()> finish;                    // after its requests complete (or empty)
  };

  ProgressThread(GroupStatus& status, StallWatch& watch);
  ~ProgressThread();  // completes everything submitted, then joins
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  CommHandle submit(Op op);

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    Op op;
    std::shared_ptr<CommHandle::State> state;
    std::vector<MPI_Request> requests;
    std::uint64_t ticket = 0;
    Clock::time_point start;
  };
  void run();
  void start(Pending& p);
  bool poll();  // completes the operations that are done; true if any was
  void complete(Pending& p, std::exception_ptr error);

  GroupStatus& status_;
  StallWatch& watch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // submitted, not yet posted
  bool stopping_ = false;
  std::vector<Pending> pending_;  // posted (thread only)
  std::thread thread_;
};

}  // namespace kintsugi
