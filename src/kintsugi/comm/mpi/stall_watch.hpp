#pragma once
// The deadline behind every wait of the MPI communicator (comm.timeout_s) and what happens when
// it passes. One per process, shared by all its groups.
//
// A rank that stops (SIGSTOP, a stuck driver, a swapping node) leaves its peers waiting in a
// collective forever: MPI itself never times out. So every wait polls against the deadline, and
// when one expires the waiting rank finds out who is missing, bounded in time: over a
// communicator of its own, it asks every rank for the status of its groups (group_status.hpp).
// Each process answers from a thread that does nothing else, so a live rank answers even while
// its own communication is stuck; a stopped or dead one does not. The rank then prints one
// message naming the group, the operation, the peers that did not arrive (and why: no answer,
// or still waiting elsewhere) and the ranks that did not answer at all, and aborts the job
// (MPI_Abort). When several ranks time out together, the lowest one that asks speaks: a rank
// stays silent only when a lower rank asked it (that one diagnoses and, by the same rule, speaks
// or defers further down) or when another rank says it has already spoken.
#include <mpi.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kintsugi/comm/mpi/group_status.hpp"

namespace kintsugi {

class StallWatch {
 public:
  explicit StallWatch(double timeout_s);  // collective over MPI_COMM_WORLD
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  double timeout_s() const { return timeout_s_; }
  void add(const GroupStatus* group);
  void remove(const GroupStatus* group);

  // `label` of `group` has waited past the deadline: diagnose, print, end the job.
  [[noreturn]] void expired(const GroupStatus& group, const OpLabel& label);

 private:
  void answer_queries();  // the responder thread
  std::string status_json() const;
  // Every other rank's status, or null for those that did not answer in time.
  std::vector<nlohmann::json> ask_everyone();
  std::string diagnose(const GroupStatus& group, const OpLabel& label,
                       const std::vector<nlohmann::json>& statuses) const;

  double timeout_s_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  mutable std::mutex mutex_;
  std::vector<const GroupStatus*> groups_;
  std::atomic<bool> stopping_{false}, reporting_{false};
  std::atomic<bool> reported_{false};  // this rank printed the diagnosis
  std::atomic<int> reporter_seen_;     // lowest rank that asked us: it is diagnosing too
  std::thread responder_;
};

// Polls `requests` until all complete; past group's deadline, watch.expired() ends the job. Spins
// (yielding) while `spin`, otherwise sleeps between polls. Throws kintsugi::Error on an MPI error.
void await_requests(std::vector<MPI_Request>& requests, const GroupStatus& group,
                    const OpLabel& label, StallWatch& watch);

}  // namespace kintsugi
