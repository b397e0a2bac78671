#pragma once
// What this rank has posted in one group, kept for the stall diagnosis (stall_watch.hpp): when
// an operation times out, the waiting rank asks every other rank for its groups' status and
// compares counts. Collectives of a plane are numbered in posting order (every member posts the
// same ones in the same order), transfers per peer and direction (the k-th send from a to b
// pairs with b's k-th receive from a), so "rank x has posted the k-th" means "x has arrived".
// A data-plane operation counts as posted once it is submitted to the group's progress thread,
// which posts it to MPI without waiting for anything (deadlock.hpp relies on this).
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kintsugi {

// The data plane moves tensors on the group's progress thread; the control plane host values
// on the caller's thread. Each has its own MPI communicator and its own order.
enum class Plane : int { data = 0, control = 1 };

// One posted operation, as a message names it.
struct OpLabel {
  Plane plane = Plane::data;
  std::string op;         // "all_reduce", "send", "barrier", ...
  std::uint64_t seq = 0;  // set when posted: the seq-th collective of its plane, or transfer
  int peer = -1;          // transfers: the group rank at the other end; collectives: -1
  bool sending = false;   // transfers: this rank sends
  std::size_t bytes = 0;
  std::string describe() const;  // e.g. "all_reduce #12 (4096 bytes)"
};

// `label`, an operation of `group` (group rank `rank`, world ranks `ranks`), as deadlock.hpp
// reads it.
nlohmann::json to_json(const OpLabel& label, const std::string& group,
                       const std::vector<int>& ranks, int rank);

class GroupStatus {
 public:
  GroupStatus(std::string name, std::vector<int> world_ranks, int rank);
  const std::string& name() const { return name_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  int rank() const { return rank_; }

  // Numbers `label` as the next of its kind and records it as open; returns a ticket for
  // finished(). Called in posting order.
  std::uint64_t posted(OpLabel& label);
  void finished(std::uint64_t ticket);

  // {"name", "ranks", "collectives": [data, control], "sent"/"received": [[per peer] x 2],
  //  "finished": operations completed, "waiting": the oldest open operation and for how long,
  //  or null}
  nlohmann::json to_json() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::string name_;
  std::vector<int> world_ranks_;
  int rank_;
  mutable std::mutex mutex_;
  std::array<std::uint64_t, 2> collectives_{};
  std::array<std::vector<std::uint64_t>, 2> sent_, received_;  // [plane][peer]
  std::map<std::uint64_t, std::pair<OpLabel, Clock::time_point>> open_;
  std::uint64_t next_ticket_ = 0, finished_ = 0;
};

// Whether the rank whose group status is `peer` has posted its side of `label`, an operation of
// the group member `me`.
bool has_arrived(const nlohmann::json& peer, const OpLabel& label, int me);

}  // namespace kintsugi
