#include "kintsugi/comm/mpi/deadlock.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace kintsugi {

namespace {

using nlohmann::json;

bool is_status(const json& s) { return s.is_object() && s.contains("groups"); }

bool blocked(const json& s) { return is_status(s) && s.value("blocked", json()).is_object(); }

// A status without what changes by itself (how long operations have waited, whether a report
// was made, which probe asked): equal for two rounds only if the rank did nothing in between.
json state_of(const json& s) {
  json out = s;
  out.erase("reported");
  out.erase("probe");
  for (json& g : out.at("groups")) g.erase("waiting");
  return out;
}

// The status of group (name, ranks) in one rank's status, or null.
const json* find_group(const json& status, const json& name, const json& ranks) {
  for (const json& g : status.at("groups"))
    if (g.at("name") == name && g.at("ranks") == ranks) return &g;
  return nullptr;
}

// The world ranks whose side of `op` (what `me` is blocked on) is missing, or none if `op` can
// complete; sends always can (see the header).
std::vector<int> missing_sides(const json& op, const std::vector<json>& statuses) {
  const json& name = op.at("group");
  const json& ranks = op.at("ranks");
  const int plane = op.at("plane").get<int>(), peer = op.at("peer").get<int>();
  const auto seq = op.at("seq").get<std::uint64_t>();
  std::vector<int> missing;
  auto has = [&](int world, auto&& posted) {
    const json& s = statuses.at(static_cast<std::size_t>(world));
    const json* g = is_status(s) ? find_group(s, name, ranks) : nullptr;
    if (!g || !posted(*g)) missing.push_back(world);
  };
  if (peer < 0) {  // a collective: every member's k-th of this plane
    for (const json& world : ranks)
      has(world.get<int>(), [&](const json& g) {
        return g.at("collectives").at(plane).get<std::uint64_t>() >= seq;
      });
  } else if (!op.at("sending").get<bool>()) {  // a receive: the peer's k-th send to us
    const int me = op.at("rank").get<int>();
    has(ranks.at(static_cast<std::size_t>(peer)).get<int>(), [&](const json& g) {
      return g.at("sent").at(plane).at(me).get<std::uint64_t>() >= seq;
    });
  }
  return missing;
}

}  // namespace

bool every_rank_blocked(const std::vector<json>& statuses) {
  return !statuses.empty() && std::all_of(statuses.begin(), statuses.end(), blocked);
}

std::string certain_deadlock(const std::vector<json>& first, const std::vector<json>& second) {
  if (first.size() != second.size() || !every_rank_blocked(first) ||
      !every_rank_blocked(second))
    return "";
  for (std::size_t r = 0; r < first.size(); ++r)
    if (state_of(first[r]) != state_of(second[r])) return "";  // it moved in between
  // Ranks waiting for the same operation of the same group, with the ranks it misses.
  using Key = std::tuple<std::string, std::string, std::string>;  // group, ranks, operation
  std::map<Key, std::pair<std::vector<int>, std::set<int>>> waits;
  for (std::size_t r = 0; r < second.size(); ++r) {
    const json& op = second[r].at("blocked");
    const std::vector<int> missing = missing_sides(op, second);
    if (missing.empty()) return "";  // this one can complete, and the job may go on
    auto& [waiting, absent] =
        waits[{op.at("group").get<std::string>(), op.at("ranks").dump(),
               op.at("describe").get<std::string>()}];
    waiting.push_back(static_cast<int>(r));
    absent.insert(missing.begin(), missing.end());
  }
  std::vector<std::string> parts;
  for (const auto& [key, who] : waits) {
    const auto& [group, ranks, describe] = key;
    const auto& [waiting, absent] = who;
    parts.push_back(fmt::format(
        "world rank{} {} wait{} for {} in group {} (world ranks {}), which world rank{} {} {} "
        "not reached",
        waiting.size() == 1 ? "" : "s", rank_list(waiting), waiting.size() == 1 ? "s" : "",
        describe, group, rank_list(json::parse(ranks).get<std::vector<int>>()),
        absent.size() == 1 ? "" : "s", rank_list({absent.begin(), absent.end()}),
        absent.size() == 1 ? "has" : "have"));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::string> runs;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    runs.push_back(j == i ? fmt::format("{}", ranks[i])
                          : fmt::format("{}{}{}", ranks[i], j == i + 1 ? ", " : "-", ranks[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(runs, ", "));
}

}  // namespace kintsugi
