#pragma once
// A communication thread runs one group's collectives and transfers in submission order, like a
// NCCL stream. Compute threads submit work and get a handle; a blocking collective is a
// submission followed by wait(). Collectives thus overlap with computation (data-parallel
// buckets during backward, pipeline transfers during compute) without MPI having to make
// asynchronous progress on its own, and each group has its own thread, so a tensor-parallel
// all-reduce never queues behind a data-parallel bucket.
#include <mpi.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kintsugi {

class CommHandle {
 public:
  CommHandle() = default;  // already complete
  // Blocks until the operation is done; rethrows its error, if any.
  void wait();
  bool ready() const;

 private:
  friend class CommWorker;
  struct State {
    mutable std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  std::shared_ptr<State> state_;
};

class CommWorker {
 public:
  CommWorker();
  ~CommWorker();  // finishes queued work, then joins
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  // A task runs on the worker thread. It either finishes its work before returning (collectives)
  // or starts non-blocking MPI operations and returns their requests (point-to-point
  // transfers); the handle completes when they do, and meanwhile later tasks run, so a
  // posted receive never blocks the queue.
  using Task = std::function<std::vector<MPI_Request>()>;
  CommHandle submit(Task task);

 private:
  using StatePtr = std::shared_ptr<CommHandle::State>;
  struct Pending {
    std::vector<MPI_Request> requests;
    StatePtr state;
  };
  void run();
  bool poll(std::vector<Pending>& pending);
  static void complete(const StatePtr& state, std::exception_ptr error);

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<Task, StatePtr>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kintsugi
