#include "kintsugi/comm/mpi/progress_thread.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

std::exception_ptr mpi_failure(int rc, const OpLabel& label, const GroupStatus& group) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::make_exception_ptr(Error(fmt::format(
      "{} failed in group {} (rank {} of {}): {}: another rank may have died", label.describe(),
      group.name(), group.rank(), group.world_ranks().size(),
      std::string(text, static_cast<std::size_t>(len)))));
}

}  // namespace

ProgressThread::ProgressThread(GroupStatus& status, StallWatch& watch)
    : status_(status), watch_(watch), thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

CommHandle ProgressThread::submit(Op op) {
  // Numbered (posted, as the group's status counts) here, in submission order, which is the
  // order the thread posts in; a wait on the handle tells the stall watch what this rank is
  // blocked on (deadlock.hpp).
  const std::uint64_t ticket = status_.posted(op.label);
  CommHandle handle = CommHandle::pending(
      [&status = status_, &watch = watch_, label = op.label](bool waiting) {
        watch.blocked(status, label, waiting);
      });
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(op), handle.state(), {}, ticket, {}});
  }
  cv_.notify_one();
  return handle;
}

void ProgressThread::complete(Pending& p, std::exception_ptr error) {
  if (!error && p.op.finish) {
    try {
      p.op.finish();
    } catch (...) {
      error = std::current_exception();
    }
  }
  status_.finished(p.ticket);
  p.state->complete(error);
}

void ProgressThread::start(Pending& p) {
  p.start = Clock::now();
  try {
    p.requests = p.op.post();
  } catch (...) {
    complete(p, std::current_exception());
    return;
  }
  pending_.push_back(std::move(p));
}

bool ProgressThread::poll() {
  bool progressed = false;
  for (std::size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(p.requests.size()), p.requests.data(), &done,
                               MPI_STATUSES_IGNORE);
    if (rc == MPI_SUCCESS && !done) {
      ++i;
      continue;
    }
    complete(p, rc == MPI_SUCCESS ? nullptr : mpi_failure(rc, p.op.label, status_));
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    progressed = true;
  }
  return progressed;
}

void ProgressThread::run() {
  auto last_event = Clock::now();  // the last post or completion
  for (;;) {
    std::deque<Pending> fresh;
    {
      std::unique_lock lock(mutex_);
      if (pending_.empty()) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing queued, nothing in flight
      }
      fresh.swap(queue_);
    }
    for (Pending& p : fresh) start(p);
    if (!fresh.empty()) last_event = Clock::now();
    if (pending_.empty()) continue;
    if (poll()) {
      last_event = Clock::now();
      continue;
    }
    // The oldest operation is the first posted; it holds the deadline.
    const auto oldest = std::min_element(pending_.begin(), pending_.end(), [](auto& a, auto& b) {
      return a.start < b.start;
    });
    if (std::chrono::duration<double>(Clock::now() - oldest->start).count() > watch_.timeout_s())
      watch_.expired(status_, oldest->op.label);
    // A collective keeps the thread polling, as a blocking MPI call would, and so do transfers
    // for 100 us after the last event (a reply is often that close); after that, transfers
    // alone (a pipeline receive waiting for the previous stage's compute) look every 50 us.
    const bool collective = std::any_of(pending_.begin(), pending_.end(),
                                        [](const Pending& p) { return p.op.label.peer < 0; });
    if (collective || Clock::now() - last_event < std::chrono::microseconds(100)) {
      std::this_thread::yield();
    } else {
      std::unique_lock lock(mutex_);
      cv_.wait_for(lock, std::chrono::microseconds(50), [&] { return !queue_.empty(); });
    }
  }
}

}  // namespace kintsugi
