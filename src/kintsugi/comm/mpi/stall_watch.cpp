#include "kintsugi/comm/mpi/stall_watch.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <list>

#include "kintsugi/comm/mpi/deadlock.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

using Clock = std::chrono::steady_clock;
// Timeout diagnosis: query and answer; deadlock check: probe (its number) and answer (echoing
// it, so that a late answer to an earlier probe is never taken for a current one).
constexpr int kQueryTag = 1, kAnswerTag = 2, kProbeTag = 3, kProbeAnswerTag = 4;
constexpr auto kResponderPoll = std::chrono::milliseconds(10);
constexpr auto kCheckerPoll = std::chrono::milliseconds(50);

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// How long the waiting rank collects answers: live ranks answer within milliseconds; a loaded
// machine gets some slack, a long deadline a little more.
double answer_window_s(double timeout_s) { return std::clamp(timeout_s / 2, 1.0, 10.0); }

std::string mpi_error(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

}  // namespace

StallWatch::StallWatch(double timeout_s, double deadlock_check_s)
    : timeout_s_(timeout_s), deadlock_check_s_(deadlock_check_s), reporter_seen_(INT_MAX) {
  // The first duplicate of the world, right after MPI_Init: the one wait without a deadline.
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  responder_ = std::thread([this] { answer_queries(); });
  if (rank_ == 0 && size_ > 1 && deadlock_check_s_ > 0)
    checker_ = std::thread([this] { watch_for_deadlock(); });
}

StallWatch::~StallWatch() {
  stopping_ = true;
  if (checker_.joinable()) checker_.join();
  responder_.join();
  // Probe queries to ranks that never took them: the job is ending.
  for (auto& q : probe_queries_) MPI_Request_free(&q.second);
  MPI_Comm_free(&comm_);
}

void StallWatch::add(const GroupStatus* group) {
  std::lock_guard lock(mutex_);
  groups_.push_back(group);
}

void StallWatch::remove(const GroupStatus* group) {
  std::lock_guard lock(mutex_);
  groups_.erase(std::remove(groups_.begin(), groups_.end(), group), groups_.end());
}

void StallWatch::blocked(const GroupStatus& group, const OpLabel& label, bool waiting) {
  std::lock_guard lock(mutex_);
  if (!waiting) {
    waits_.erase(std::this_thread::get_id());
    return;
  }
  ++waits_begun_;
  waits_[std::this_thread::get_id()] = {&group, label, Clock::now()};
}

nlohmann::json StallWatch::status() const {
  nlohmann::json groups = nlohmann::json::array();
  nlohmann::json blocked = nullptr;
  std::uint64_t waits = 0;
  {
    std::lock_guard lock(mutex_);
    for (const GroupStatus* g : groups_) groups.push_back(g->to_json());
    // Blocked means the one thread that communicates waits; with several waiting at once we
    // cannot tell whether another one could still post (so, for the deadlock check, not blocked).
    if (waits_.size() == 1) {
      const Wait& w = waits_.begin()->second;  // its group lives while the thread waits
      blocked = to_json(w.label, w.group->name(), w.group->world_ranks(), w.group->rank());
    }
    waits = waits_begun_;
  }
  return {{"reported", reported_.load()}, {"groups", groups}, {"blocked", blocked},
          {"waits", waits}};
}

void StallWatch::answer_queries() {
  int query = 0, probe = 0;
  MPI_Request incoming = MPI_REQUEST_NULL, probed = MPI_REQUEST_NULL;
  MPI_Irecv(&query, 1, MPI_INT, MPI_ANY_SOURCE, kQueryTag, comm_, &incoming);
  MPI_Irecv(&probe, 1, MPI_INT, MPI_ANY_SOURCE, kProbeTag, comm_, &probed);
  std::list<std::pair<std::string, MPI_Request>> answers;  // kept alive until sent
  auto answer = [&](std::string text, int asker, int tag) {
    answers.emplace_back(std::move(text), MPI_REQUEST_NULL);
    auto& [kept, request] = answers.back();
    MPI_Isend(kept.data(), static_cast<int>(kept.size()), MPI_CHAR, asker, tag, comm_, &request);
  };
  while (!stopping_) {
    int done = 0;
    MPI_Status from;
    MPI_Test(&incoming, &done, &from);
    if (done) {
      const int asker = from.MPI_SOURCE;
      int seen = reporter_seen_.load();
      while (asker < seen && !reporter_seen_.compare_exchange_weak(seen, asker)) {
      }
      answer(status().dump(), asker, kAnswerTag);
      MPI_Irecv(&query, 1, MPI_INT, MPI_ANY_SOURCE, kQueryTag, comm_, &incoming);
      continue;
    }
    MPI_Test(&probed, &done, &from);
    if (done) {  // a deadlock check: answer, without deferring any report to the asker
      nlohmann::json s = status();
      s["probe"] = probe;
      answer(s.dump(), from.MPI_SOURCE, kProbeAnswerTag);
      MPI_Irecv(&probe, 1, MPI_INT, MPI_ANY_SOURCE, kProbeTag, comm_, &probed);
      continue;
    }
    for (auto it = answers.begin(); it != answers.end();) {
      int sent = 0;
      MPI_Test(&it->second, &sent, MPI_STATUS_IGNORE);
      it = sent ? answers.erase(it) : std::next(it);
    }
    std::this_thread::sleep_for(kResponderPoll);
  }
  for (MPI_Request* r : {&incoming, &probed}) {
    MPI_Cancel(r);
    MPI_Wait(r, MPI_STATUS_IGNORE);
  }
  // Answers still in flight go to a rank that stopped listening: abandon them.
  for (auto& a : answers) MPI_Request_free(&a.second);
}

std::vector<nlohmann::json> StallWatch::ask_everyone() {
  std::vector<nlohmann::json> statuses(static_cast<std::size_t>(size_));
  statuses[static_cast<std::size_t>(rank_)] = status();
  std::vector<MPI_Request> queries;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    queries.emplace_back();
    MPI_Isend(&rank_, 1, MPI_INT, r, kQueryTag, comm_, &queries.back());
  }
  collect_answers(kAnswerTag, false, statuses, [](const nlohmann::json&) { return true; });
  // Queries to ranks that never answered stay unsent or unmatched: the job ends anyway.
  for (auto& q : queries) MPI_Request_free(&q);
  return statuses;
}

std::string StallWatch::diagnose(const GroupStatus& group, const OpLabel& label,
                                 const std::vector<nlohmann::json>& statuses) const {
  const auto& members = group.world_ranks();
  std::vector<int> peers;
  if (label.peer >= 0) peers.push_back(label.peer);
  else
    for (int i = 0; i < static_cast<int>(members.size()); ++i)
      if (i != group.rank()) peers.push_back(i);
  std::vector<std::string> absent;
  for (int p : peers) {
    const int world = members[static_cast<std::size_t>(p)];
    const nlohmann::json& status = statuses[static_cast<std::size_t>(world)];
    const std::string who = fmt::format("world rank {} ({} rank {})", world, group.name(), p);
    if (status.is_null() || status.is_discarded()) {
      absent.push_back(who + " did not answer: it is stopped, hung or dead");
      continue;
    }
    const nlohmann::json* mine = nullptr;
    for (const auto& g : status.at("groups"))
      if (g.at("name") == group.name() && g.at("ranks").get<std::vector<int>>() == members)
        mine = &g;
    if (!mine) {
      absent.push_back(who + " has no such group any more");
    } else if (!has_arrived(*mine, label, group.rank())) {
      std::string waits = "busy outside communication";
      for (const auto& g : status.at("groups"))
        if (g.at("waiting").is_string()) {
          waits = "it waits for " + g.at("waiting").get<std::string>();
          break;
        }
      absent.push_back(fmt::format("{} has not reached it ({})", who, waits));
    }
  }
  std::vector<int> silent;
  for (int r = 0; r < size_; ++r)
    if (statuses[static_cast<std::size_t>(r)].is_null()) silent.push_back(r);
  std::string text = fmt::format(
      "communication timed out: world rank {} waited {:g} s (comm.timeout_s) in group {} (world "
      "ranks {}) for {}. ",
      rank_, timeout_s_, group.name(), fmt::join(members, ", "), label.describe());
  if (absent.empty())
    text += "Every peer has posted its side: the transfer itself is stuck.";
  else
    text += fmt::format("Not arrived: {}.", fmt::join(absent, "; "));
  if (!silent.empty())
    text += fmt::format(" Ranks that did not answer at all: {}.", fmt::join(silent, ", "));
  return text + " Ending the job (raise comm.timeout_s if the wait was legitimate).";
}

std::vector<nlohmann::json> StallWatch::probe_everyone(int probe) {
  std::vector<nlohmann::json> statuses(static_cast<std::size_t>(size_));
  statuses[static_cast<std::size_t>(rank_)] = status();
  // Earlier queries that have gone out no longer need their number kept.
  for (auto it = probe_queries_.begin(); it != probe_queries_.end();) {
    int sent = 0;
    MPI_Test(&it->second, &sent, MPI_STATUS_IGNORE);
    it = sent ? probe_queries_.erase(it) : std::next(it);
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto& [number, request] = probe_queries_.emplace_back(std::make_unique<int>(probe),
                                                          MPI_REQUEST_NULL);
    MPI_Isend(number.get(), 1, MPI_INT, r, kProbeTag, comm_, &request);
  }
  collect_answers(kProbeAnswerTag, true, statuses, [probe](const nlohmann::json& s) {
    return s.is_object() && s.value("probe", -1) == probe;
  });
  return statuses;
}

void StallWatch::collect_answers(int tag, bool stoppable, std::vector<nlohmann::json>& statuses,
                                 const std::function<bool(const nlohmann::json&)>& accept) {
  std::vector<bool> answered(static_cast<std::size_t>(size_), false);
  answered[static_cast<std::size_t>(rank_)] = true;
  int missing = size_ - 1;
  const auto start = Clock::now();
  while (missing > 0 && !(stoppable && stopping_) &&
         seconds_since(start) < answer_window_s(timeout_s_)) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, tag, comm_, &flag, &status);
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    std::string text(static_cast<std::size_t>(length), '\0');
    MPI_Recv(text.data(), length, MPI_CHAR, status.MPI_SOURCE, tag, comm_, MPI_STATUS_IGNORE);
    nlohmann::json answer = nlohmann::json::parse(text, nullptr, false);
    const auto r = static_cast<std::size_t>(status.MPI_SOURCE);
    if (answered[r] || !accept(answer)) continue;
    answered[r] = true;
    --missing;
    statuses[r] = std::move(answer);
  }
}

void StallWatch::watch_for_deadlock() {
  // Within one wait, checks back off (after deadlock_check_s, then 2x, 4x, ... that much more,
  // at most kMaxCheckGap apart): a long legitimate wait of a large job (every rank answers
  // each check) costs little, and a deadlock is still found within seconds of the last rank
  // blocking when rank 0 had not waited long before.
  constexpr double kMaxCheckGap = 60;
  Clock::time_point checked_wait{};  // when the wait last checked began
  double next_check = 0, gap = 0;     // seconds into that wait
  int probe = 0;
  while (!stopping_) {
    std::this_thread::sleep_for(kCheckerPoll);
    Clock::time_point since;
    {
      std::lock_guard lock(mutex_);
      if (waits_.size() != 1) continue;
      since = waits_.begin()->second.since;
    }
    if (since != checked_wait) {
      checked_wait = since;
      next_check = gap = deadlock_check_s_;
    }
    const double waited = seconds_since(since);
    if (waited < next_check) continue;
    gap = std::min(2 * gap, std::max(kMaxCheckGap, deadlock_check_s_));
    next_check = waited + gap;
    const auto first = probe_everyone(++probe);
    if (!every_rank_blocked(first)) continue;
    const auto second = probe_everyone(++probe);
    const std::string found = certain_deadlock(first, second);
    if (found.empty()) continue;
    for (const auto& s : second)
      if (s.is_object() && s.value("reported", false)) return;  // another rank ends the job
    if (reporting_.exchange(true)) return;  // this rank's deadline passed: it ends the job
    reported_ = true;
    fmt::print(stderr,
               "kintsugi: error: deadlock: every rank waits for a communication that another "
               "waiting rank has not posted, so none can go on: {}. The ranks issued their "
               "collectives in different orders (a bug, not a slow rank). Ending the job (world "
               "rank 0 checks after waiting comm.deadlock_check_s = {:g} s; comm.timeout_s = "
               "{:g} s is for ranks that stop answering)\n",
               found, deadlock_check_s_, timeout_s_);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void StallWatch::expired(const GroupStatus& group, const OpLabel& label) {
  // One report per process and, as far as the ranks can tell, per job: a rank defers to a lower
  // rank that asked it (that one is diagnosing, and speaks unless it defers further down) and to
  // a rank that has already spoken. Deferring only downwards means two ranks can never wait for
  // each other; a rank that defers and then sees nobody end the job speaks briefly below.
  const bool first = !reporting_.exchange(true);
  const double window = answer_window_s(timeout_s_);
  if (first && reporter_seen_.load() > rank_) {
    const auto statuses = ask_everyone();
    bool someone_else = reporter_seen_.load() < rank_;
    for (const auto& s : statuses)
      if (s.is_object() && s.value("reported", false)) someone_else = true;
    if (!someone_else) {
      reported_ = true;
      fmt::print(stderr, "kintsugi: error: {}\n", diagnose(group, label, statuses));
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(3 * window + 5));
  fmt::print(stderr, "kintsugi: error: communication timed out: world rank {} waited {:g} s "
                     "(comm.timeout_s) in group {} for {}; ending the job\n",
             rank_, timeout_s_, group.name(), label.describe());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void await_requests(std::vector<MPI_Request>& requests, const GroupStatus& group,
                    const OpLabel& label, StallWatch& watch) {
  struct Waiting {  // for the deadlock check, while this thread waits here
    StallWatch& watch;
    const GroupStatus& group;
    const OpLabel& label;
    Waiting(StallWatch& w, const GroupStatus& g, const OpLabel& l) : watch(w), group(g), label(l) {
      watch.blocked(group, label, true);
    }
    ~Waiting() { watch.blocked(group, label, false); }
  } waiting(watch, group, label);
  const auto start = Clock::now();
  for (long polls = 0;; ++polls) {
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
      fail("{} failed in group {}: {}: another rank may have died", label.describe(), group.name(),
           mpi_error(rc));
    if (done) return;
    if (seconds_since(start) > watch.timeout_s()) watch.expired(group, label);
    // Short waits spin (a control-plane round trip takes microseconds), long ones sleep.
    if (polls < 2000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace kintsugi
