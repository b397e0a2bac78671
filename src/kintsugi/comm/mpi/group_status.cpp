#include "kintsugi/comm/mpi/group_status.hpp"

#include <fmt/format.h>

namespace kintsugi {

std::string OpLabel::describe() const {
  std::string text =
      fmt::format("{}{} #{}", plane == Plane::control ? "control-plane " : "", op, seq);
  if (peer >= 0) text += fmt::format(" {} group rank {}", sending ? "to" : "from", peer);
  if (bytes > 0) text += fmt::format(" ({} bytes)", bytes);
  return text;
}

GroupStatus::GroupStatus(std::string name, std::vector<int> world_ranks, int rank)
    : name_(std::move(name)), world_ranks_(std::move(world_ranks)), rank_(rank) {
  for (int p = 0; p < 2; ++p) {
    sent_[p].assign(world_ranks_.size(), 0);
    received_[p].assign(world_ranks_.size(), 0);
  }
}

std::uint64_t GroupStatus::posted(OpLabel& label) {
  std::lock_guard lock(mutex_);
  const int p = static_cast<int>(label.plane);
  if (label.peer < 0) label.seq = ++collectives_[p];
  else label.seq = ++(label.sending ? sent_ : received_)[p][static_cast<std::size_t>(label.peer)];
  open_.emplace(next_ticket_, std::make_pair(label, Clock::now()));
  return next_ticket_++;
}

void GroupStatus::finished(std::uint64_t ticket) {
  std::lock_guard lock(mutex_);
  open_.erase(ticket);
  ++finished_;
}

nlohmann::json GroupStatus::to_json() const {
  std::lock_guard lock(mutex_);
  nlohmann::json waiting = nullptr;
  if (!open_.empty()) {
    const auto& [label, since] = open_.begin()->second;
    waiting = fmt::format("{} in group {} for {:.1f} s", label.describe(), name_,
                          std::chrono::duration<double>(Clock::now() - since).count());
  }
  return {{"name", name_},         {"ranks", world_ranks_},  {"collectives", collectives_},
          {"sent", sent_},         {"received", received_}, {"finished", finished_},
          {"waiting", waiting}};
}

nlohmann::json to_json(const OpLabel& label, const std::string& group,
                       const std::vector<int>& ranks, int rank) {
  return {{"group", group},
          {"ranks", ranks},
          {"rank", rank},
          {"plane", static_cast<int>(label.plane)},
          {"seq", label.seq},
          {"peer", label.peer},
          {"sending", label.sending},
          {"describe", label.describe()}};
}

bool has_arrived(const nlohmann::json& peer, const OpLabel& label, int me) {
  const int p = static_cast<int>(label.plane);
  if (label.peer < 0) return peer.at("collectives").at(p).get<std::uint64_t>() >= label.seq;
  // A send waits for the peer's matching receive, a receive for its matching send.
  const char* side = label.sending ? "received" : "sent";
  return peer.at(side).at(p).at(me).get<std::uint64_t>() >= label.seq;
}

}  // namespace kintsugi
