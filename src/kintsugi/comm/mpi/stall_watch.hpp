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
//
// A deadlock does not wait for the deadline: when every rank waits in communication for an
// operation that no rank will ever post (ranks that issued collectives in different orders),
// the job ends within seconds. World rank 0 checks whenever it has itself waited for
// deadlock_check_s (every rank waits in a deadlock, so rank 0 does too), and again, further
// apart, as long as that wait lasts: it asks every rank for its status twice and ends the job
// only if the two rounds prove the deadlock (deadlock.hpp).
// A rank that does not answer, or one that computes, or one whose operation can complete,
// proves nothing: the deadline stays for those.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kintsugi/comm/mpi/group_status.hpp"

namespace kintsugi {

class StallWatch {
 public:
  // Collective over MPI_COMM_WORLD. deadlock_check_s: how long world rank 0 waits before it
  // checks for a deadlock, and the first gap between checks (0: never).
  explicit StallWatch(double timeout_s, double deadlock_check_s = 2);
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  double timeout_s() const { return timeout_s_; }
  void add(const GroupStatus* group);
  void remove(const GroupStatus* group);

  // The calling thread starts (waiting) or stops waiting for `label` of `group`.
  void blocked(const GroupStatus& group, const OpLabel& label, bool waiting);

  // `label` of `group` has waited past the deadline: diagnose, print, end the job.
  [[noreturn]] void expired(const GroupStatus& group, const OpLabel& label);

 private:
  using Clock = std::chrono::steady_clock;
  void answer_queries();  // the responder thread
  // {"reported", "groups": [GroupStatus::to_json()...], "blocked": the operation the process
  //  waits for (deadlock.hpp) or null, "waits": waits begun so far}
  nlohmann::json status() const;
  // Every other rank's status, or null for those that did not answer in time.
  std::vector<nlohmann::json> ask_everyone();
  std::string diagnose(const GroupStatus& group, const OpLabel& label,
                       const std::vector<nlohmann::json>& statuses) const;
  void watch_for_deadlock();  // world rank 0's checker thread
  // Every rank's status for probe number `probe` (this rank's own included), null for those
  // that did not answer it in time.
  std::vector<nlohmann::json> probe_everyone(int probe);
  // Receives the other ranks' JSON answers on `tag` into statuses[rank] until every rank has
  // answered, the answer window has passed, or (stoppable) the watch stops; an answer that
  // `accept` refuses (a stale probe's) does not count.
  void collect_answers(int tag, bool stoppable, std::vector<nlohmann::json>& statuses,
                       const std::function<bool(const nlohmann::json&)>& accept);

  double timeout_s_, deadlock_check_s_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  mutable std::mutex mutex_;
  std::vector<const GroupStatus*> groups_;
  struct Wait {
    const GroupStatus* group;
    OpLabel label;
    Clock::time_point since;
  };
  std::map<std::thread::id, Wait> waits_;  // the threads waiting in communication now
  std::uint64_t waits_begun_ = 0;
  std::atomic<bool> stopping_{false}, reporting_{false};
  std::atomic<bool> reported_{false};  // this rank printed the diagnosis
  std::atomic<int> reporter_seen_;     // lowest rank that asked us: it is diagnosing too
  // Probe queries not yet known to be sent, with the probe number each carries.
  std::list<std::pair<std::unique_ptr<int>, MPI_Request>> probe_queries_;
  std::thread responder_, checker_;
};

// Polls `requests` until all complete; past group's deadline, watch.expired() ends the job. Spins
// (yielding) while `spin`, otherwise sleeps between polls. Throws kintsugi::Error on an MPI error.
void await_requests(std::vector<MPI_Request>& requests, const GroupStatus& group,
                    const OpLabel& label, StallWatch& watch);

}  // namespace kintsugi
