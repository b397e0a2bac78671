#include "kintsugi/train/job_energy.hpp"

#include <fmt/format.h>

#include <map>

#include "kintsugi/backend/device_info.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi {

OpenedCounter open_device_counter(const Backend& backend, const std::string& powercap_root) {
  if (!Switches::process().on(Switch::energy))
    return {nullptr, "KINTSUGI_ENERGY=0 turns the energy counters off"};
  if (backend.device() == Device::cpu)
    return powercap_root.empty() ? open_rapl() : open_rapl(powercap_root);
  const std::string pci = pci_bus_id(backend);
  if (pci.empty())
    return {nullptr, fmt::format("no energy counter: {} has no PCI bus id for NVML",
                                 backend.hardware())};
  return open_nvml(pci);
}

JobEnergy::JobEnergy(const Backend& backend, const Topology* topology,
                     const std::string& powercap_root)
    : topology_(topology) {
  OpenedCounter opened = open_device_counter(backend, powercap_root);
  counter_ = std::move(opened.counter);
  Communicator* world = topology ? &topology->world() : nullptr;
  const int ranks = world ? world->size() : 1;
  const double have = world ? world->host_all_reduce(counter_ ? 1.0 : 0.0) : (counter_ ? 1.0 : 0.0);
  if (have < ranks) {
    description_ = counter_ ? fmt::format("energy not measured: {} of {} ranks have no energy "
                                          "counter (every rank needs one)",
                                          ranks - static_cast<int>(have), ranks)
                            : "energy not measured: " + opened.why_not;
    counter_.reset();
    return;
  }
  // Rank 0 learns which ranks read the same hardware and gives each piece one reader.
  std::vector<double> weights(static_cast<std::size_t>(ranks), 0.0);
  const std::vector<std::string> identities =
      world ? world->host_gather(counter_->identity(), 0)
            : std::vector<std::string>{counter_->identity()};
  int distinct = 0;
  if (!world || world->rank() == 0) {
    std::map<std::string, int> first;
    for (int r = 0; r < ranks; ++r)
      if (first.emplace(identities[static_cast<std::size_t>(r)], r).second) {
        weights[static_cast<std::size_t>(r)] = 1;
        ++distinct;
      }
  }
  if (world) world->host_all_reduce(weights, ReduceOp::sum);
  weight_ = weights[static_cast<std::size_t>(world ? world->rank() : 0)];
  measured_ = true;
  description_ = fmt::format("energy: {} (rank 0's){}", counter_->describe(),
                             ranks > 1 ? fmt::format(", {} counter{} over {} ranks summed",
                                                     distinct, distinct == 1 ? "" : "s", ranks)
                                       : "");
}

void JobEnergy::begin() {
  if (!measured_ || last_ >= 0) return;
  last_ = counter_->joules().value_or(-1);
  span_clock_.restart();
}

std::optional<EnergySpan> JobEnergy::end(std::int64_t step_tokens) {
  if (!measured_) return std::nullopt;
  const std::optional<double> now = counter_->joules();
  const bool ok = now && last_ >= 0;
  std::vector<double> v = {ok ? weight_ * (*now - last_) : 0.0, ok ? 0.0 : 1.0};
  if (ok) last_ = *now;
  if (topology_) topology_->world().host_all_reduce(v, ReduceOp::sum);
  if (v[1] > 0) {  // a counter failed somewhere: stop reporting rather than under-count
    measured_ = false;
    return std::nullopt;
  }
  span_.joules += v[0];
  span_.tokens += step_tokens;
  if (!(span_.joules > 0)) return std::nullopt;  // no counter has advanced since the last span
  EnergySpan done = span_;
  done.seconds = span_clock_.seconds();
  span_ = EnergySpan{};
  span_clock_.restart();
  return done;
}

}  // namespace kintsugi
