#include "kintsugi/comm/comm_worker.hpp"

#include <chrono>
#include <stdexcept>

namespace kintsugi {

void CommHandle::wait() {
  if (!state_) return;
  std::unique_lock lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool CommHandle::ready() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

CommWorker::CommWorker() : thread_([this] { run(); }) {}

CommWorker::~CommWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

CommHandle CommWorker::submit(Task task) {
  CommHandle handle;
  handle.state_ = std::make_shared<CommHandle::State>();
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::move(task), handle.state_);
  }
  cv_.notify_one();
  return handle;
}

void CommWorker::complete(const StatePtr& state, std::exception_ptr error) {
  {
    std::lock_guard lock(state->mutex);
    state->done = true;
    state->error = error;
  }
  state->cv.notify_all();
}

// Completes the pending operations that are done; returns whether any was.
bool CommWorker::poll(std::vector<Pending>& pending) {
  bool progressed = false;
  for (std::size_t i = 0; i < pending.size();) {
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(pending[i].requests.size()),
                               pending[i].requests.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || done) {
      complete(pending[i].state,
               rc == MPI_SUCCESS
                   ? nullptr
                   : std::make_exception_ptr(std::runtime_error("MPI point-to-point transfer failed")));
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      progressed = true;
    } else {
      ++i;
    }
  }
  return progressed;
}

void CommWorker::run() {
  std::vector<Pending> pending;
  for (;;) {
    std::pair<Task, StatePtr> item;
    {
      std::unique_lock lock(mutex_);
      if (pending.empty()) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      } else if (queue_.empty()) {
        // Transfers in flight: look again soon, without spinning on a shared core.
        lock.unlock();
        if (poll(pending)) continue;
        lock.lock();
        cv_.wait_for(lock, std::chrono::microseconds(50), [&] { return !queue_.empty(); });
        continue;
      }
      if (queue_.empty()) return;  // stopping, nothing queued, nothing in flight
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      std::vector<MPI_Request> requests = item.first();
      if (requests.empty()) complete(item.second, nullptr);
      else pending.push_back({std::move(requests), item.second});
    } catch (...) {
      complete(item.second, std::current_exception());
    }
    if (!pending.empty()) poll(pending);
  }
}

}  // namespace kintsugi
