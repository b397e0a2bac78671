#pragma once
// The completion of one asynchronous communication operation. Any communicator implementation
// hands one out per *_async call and completes it from wherever its operations finish (a
// progress thread over MPI). An operation that runs on a device's own queue (NCCL on a CUDA
// stream) hands out a device handle instead: waiting on it makes the device's compute queue wait
// for the operation (a CUDA event), so every op enqueued after wait() sees the result while the
// host goes on; host reads go through that queue too (core/host_io.hpp). Header-only, so
// implementations in comm/'s subfolders need nothing but headers from comm/.
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

namespace kintsugi {

class CommHandle {
 public:
  // What an implementation keeps to complete the handle later.
  class State {
   public:
    void complete(std::exception_ptr error = nullptr) {
      {
        std::lock_guard lock(mutex_);
        done_ = true;
        error_ = error;
      }
      cv_.notify_all();
    }

   private:
    friend class CommHandle;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    bool done_ = false;
    std::exception_ptr error_;
    std::function<void()> device_wait_;  // device handles only
    std::function<bool()> device_done_;
    // Told when a wait() starts blocking on the operation (true) and when it returns (false),
    // for the deadlock check (comm/mpi/deadlock.hpp); set before the handle is handed out.
    std::function<void(bool waiting)> on_block_;
  };

  CommHandle() = default;  // already complete
  explicit CommHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
  static CommHandle pending(std::function<void(bool waiting)> on_block = {}) {
    auto state = std::make_shared<State>();
    state->on_block_ = std::move(on_block);
    return CommHandle(std::move(state));
  }
  // An operation on a device queue: `wait` orders the device's compute queue after it, `done`
  // tells whether it has finished. Its deadline is the communicator's to enforce.
  static CommHandle on_device(std::function<void()> wait, std::function<bool()> done) {
    auto state = std::make_shared<State>();
    state->device_wait_ = std::move(wait);
    state->device_done_ = std::move(done);
    return CommHandle(std::move(state));
  }
  const std::shared_ptr<State>& state() const { return state_; }

  // Blocks until the operation is done; rethrows its error, if any. The communicator holds every
  // operation to its deadline (comm.timeout_s), so this returns or the job ends.
  void wait() {
    if (!state_) return;
    if (state_->device_wait_) return state_->device_wait_();
    std::unique_lock lock(state_->mutex_);
    if (!state_->done_ && state_->on_block_) {
      // Told outside the lock: the observer takes locks of its own.
      lock.unlock();
      state_->on_block_(true);
      struct Unblock {
        State& s;
        ~Unblock() { s.on_block_(false); }
      } unblock{*state_};
      lock.lock();
      state_->cv_.wait(lock, [&] { return state_->done_; });
      lock.unlock();
    } else {
      state_->cv_.wait(lock, [&] { return state_->done_; });
      lock.unlock();
    }
    if (state_->error_) std::rethrow_exception(state_->error_);
  }
  bool ready() const {
    if (!state_) return true;
    if (state_->device_done_) return state_->device_done_();
    std::lock_guard lock(state_->mutex_);
    return state_->done_;
  }

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kintsugi
