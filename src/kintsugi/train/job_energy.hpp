#pragma once
// The job's measured energy per training step (docs/energy.md): every rank opens the counter of
// its device (its GPU's NVML counter, or its machine's RAPL packages on the CPU), and a step's
// energy is the sum over the job of each piece of hardware's joules, counted once however many
// ranks share it (ranks on one CPU read the same packages). Either every rank has a counter
// or the job reports none, and says why once. KINTSUGI_ENERGY=0 turns the counters off (no
// reads, no per-step reduction).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/energy_counter.hpp"

namespace kintsugi {

// This process's counter for `backend`'s device (NVML for a GPU, RAPL for the CPU), or why none.
OpenedCounter open_device_counter(const Backend& backend);

class JobEnergy {
 public:
  // Collective over the job (every rank constructs it at the same point).
  JobEnergy(const Backend& backend, const Topology* topology);
  bool measured() const { return measured_; }
  // One line for the log: what is measured, or why nothing is.
  const std::string& description() const { return description_; }
  // Around a step: begin() reads this rank's counter; end() reads it again and returns the
  // job's joules since begin() (collective; none when not measured or a counter failed, after
  // which nothing more is reported).
  void begin();
  std::optional<double> end();

 private:
  const Topology* topology_;
  std::unique_ptr<EnergyCounter> counter_;
  bool measured_ = false;
  double weight_ = 0;  // 1 for the first rank of each piece of hardware, 0 for the others
  double before_ = 0;
  std::string description_;
};

}  // namespace kintsugi
