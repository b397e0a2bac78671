#pragma once
// The deadline of the job's start. MPI_Init and the blocking calls right after it (the node
// split, the duplications of the world communicator) wait for every rank, and MPI never times
// out: a rank stopped (SIGSTOP, a stuck node) while the job starts would hang the others
// forever, before the communicator's own deadline (comm.timeout_s, stall_watch.hpp) exists. A
// rank that dies there is the launcher's to notice; a stopped one is alive to it.
//
// So each such call runs under a StartupDeadline: a thread that waits until the call is done or
// the deadline passes. When it passes, the rank says what it waited for and exits non-zero;
// the launcher then ends the job (mpirun signals and kills every rank, the stopped one
// included). The deadline comes from KINTSUGI_STARTUP_TIMEOUT_S, 600 s (comm.timeout_s's
// default) unless set: MPI_Init runs before the config is read (docs/parallelism.md).
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "kintsugi/core/fault_hooks.hpp"

namespace kintsugi {

class StartupDeadline {
 public:
  // `what` names the wait in the message, e.g. "MPI initialisation (MPI_Init_thread)".
  StartupDeadline(std::string what, double timeout_s);
  ~StartupDeadline();  // the wait is over: disarms the deadline
  StartupDeadline(const StartupDeadline&) = delete;
  StartupDeadline& operator=(const StartupDeadline&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

// KINTSUGI_STARTUP_TIMEOUT_S (core/switches.hpp): 600 unless set.
double startup_timeout_s();

// The fault hook StopAtStart (core/fault_hooks.hpp): the process of that world rank stops
// itself (SIGSTOP) at `where`: "init" (before MPI_Init) or "split" (after it, before the node
// split), the faults the startup deadline is for. Called at both places; the rank is read from
// the launcher's environment, since MPI does not know it yet at "init".
void stop_at_start(const std::optional<StopAtStart>& hook, const char* where);

}  // namespace kintsugi
