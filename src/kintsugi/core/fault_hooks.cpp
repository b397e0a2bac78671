#include "kintsugi/core/fault_hooks.hpp"

#include <cstdio>

namespace kintsugi {

namespace {

std::optional<RankStep> rank_step(const std::string& text) {
  if (text.empty()) return std::nullopt;
  RankStep r;
  long long step = 0;
  std::sscanf(text.c_str(), "%d:%lld", &r.rank, &step);
  r.step = step;
  return r;
}

}  // namespace

FaultHooks fault_hooks_from(const Switches& switches) {
  FaultHooks hooks;
  hooks.kill_rank = rank_step(switches.text(Switch::test_kill_rank));
  hooks.die_in_save = rank_step(switches.text(Switch::test_die_in_save));
  if (const std::string& slow = switches.text(Switch::test_slow_micro_batches); !slow.empty()) {
    char phase[8] = {};
    SlowMicroBatches s;
    long long from = 0;
    std::sscanf(slow.c_str(), "%7[a-z]:%d:%lld", phase, &s.ms, &from);
    s.evaluation = std::string(phase) == "eval";
    s.from_step = from;
    hooks.slow_micro_batches = s;
  }
  if (const std::string& stop = switches.text(Switch::test_stop_at_start); !stop.empty()) {
    const std::size_t colon = stop.find(':');
    hooks.stop_at_start = StopAtStart{std::stoi(stop.substr(0, colon)), stop.substr(colon + 1)};
  }
  hooks.powercap_root = switches.text(Switch::test_powercap_root);
  return hooks;
}

}  // namespace kintsugi
