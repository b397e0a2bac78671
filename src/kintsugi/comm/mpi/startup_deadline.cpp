#include "kintsugi/comm/mpi/startup_deadline.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi {

namespace {

// The launcher's name for this process: MPI may not know it yet.
std::string rank_name() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var); v && *v) return fmt::format("world rank {}", v);
  return fmt::format("process {}", ::getpid());
}

}  // namespace

double startup_timeout_s() { return Switches::process().seconds(Switch::startup_timeout_s); }

StartupDeadline::StartupDeadline(std::string what, double timeout_s) {
  thread_ = std::thread([this, what = std::move(what), timeout_s] {
    std::unique_lock lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    if (done_cv_.wait_until(lock, deadline, [this] { return done_; })) return;
    // MPI cannot be called here (it may be the call that hangs, or not be initialised): say
    // what happened and leave; the launcher ends the job when a rank exits before MPI_Finalize.
    fmt::print(stderr,
               "kintsugi: error: {} waited {:g} s (KINTSUGI_STARTUP_TIMEOUT_S) in {} for the "
               "other ranks of the job: one of them is stopped, hung or was never started; "
               "ending the job\n",
               rank_name(), timeout_s, what);
    std::fflush(stderr);
    std::_Exit(1);
  });
}

StartupDeadline::~StartupDeadline() {
  {
    const std::lock_guard lock(mutex_);
    done_ = true;
  }
  done_cv_.notify_one();
  thread_.join();
}

void stop_at_start(const std::optional<StopAtStart>& hook, const char* where) {
  if (!hook || hook->where != where) return;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!rank || std::to_string(hook->rank) != rank) return;
  std::raise(SIGSTOP);
}

}  // namespace kintsugi
