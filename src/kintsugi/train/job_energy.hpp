#pragma once
// The job's measured energy per training step (docs/energy.md): every rank opens the counter of
// its device (its GPU's NVML counter, or its machine's RAPL packages on the CPU), and a step's
// energy is the sum over the job of each piece of hardware's joules, counted once however many
// ranks share it (ranks on one CPU read the same packages). Either every rank has a counter
// or the job reports none, and says why once. KINTSUGI_ENERGY=0 turns the counters off (no
// reads, no per-step reduction).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/energy_counter.hpp"
#include "kintsugi/core/timer.hpp"

namespace kintsugi {

// This process's counter for `backend`'s device (NVML for a GPU, RAPL for the CPU), or why none.
// `powercap_root`: RAPL's sysfs tree ("": /sys/class/powercap; the tests give a fake one).
OpenedCounter open_device_counter(const Backend& backend, const std::string& powercap_root = "");

// The job's energy since the previous reading that carried any: joules, and the seconds and
// training tokens they were spent on.
struct EnergySpan {
  double joules = 0, seconds = 0;
  std::int64_t tokens = 0;
};

class JobEnergy {
 public:
  // Collective over the job (every rank constructs it at the same point).
  JobEnergy(const Backend& backend, const Topology* topology,
            const std::string& powercap_root = "");
  bool measured() const { return measured_; }
  // One line for the log: what is measured, or why nothing is.
  const std::string& description() const { return description_; }
  // begin() before the first step reads this rank's counter: the first span starts there. After
  // each step, end(its tokens) reads it again (collective) and returns the job's energy since
  // the last span, which covers the time between steps too. None while the counters have not
  // advanced (NVML's updates less often than a short step ends: the next span carries those
  // steps' joules, seconds and tokens), none when not measured, and none from the first failed
  // read on (nothing is reported rather than an under-count).
  void begin();
  std::optional<EnergySpan> end(std::int64_t step_tokens);

 private:
  const Topology* topology_;
  std::unique_ptr<EnergyCounter> counter_;
  bool measured_ = false;
  double weight_ = 0;  // 1 for the first rank of each piece of hardware, 0 for the others
  double last_ = -1;   // this rank's counter at its last read (-1: none yet)
  EnergySpan span_;    // since the last reported span: joules and tokens so far
  Stopwatch span_clock_;
  std::string description_;
};

}  // namespace kintsugi
