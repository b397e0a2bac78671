#include "kintsugi/plan/measurement_cache.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "kintsugi/core/cache_dir.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

nlohmann::json load() {
  std::ifstream in(measurements_file());
  if (in) try {
      auto j = nlohmann::json::parse(in);
      if (j.contains("measurements") && j["measurements"].is_array()) return j;
    } catch (const std::exception&) {
      // A damaged cache is only a cache: measure again.
    }
  return {{"measurements", nlohmann::json::array()}};
}

bool matches(const nlohmann::json& e, const MeasurementKey& key) {
  return e.value("device", "") == std::string(name_of(key.device)) &&
         e.value("hardware", "") == key.hardware && e.value("quantity", "") == key.quantity;
}

}  // namespace

fs::path measurements_file() { return cache_file("device-measurements.json"); }

std::optional<double> cached_measurement(const MeasurementKey& key) {
  const nlohmann::json j = load();
  for (const auto& e : j["measurements"])
    if (matches(e, key) && e.contains("value") && e["value"].is_number())
      return e["value"].get<double>();
  return std::nullopt;
}

double store_measurement(const MeasurementKey& key, double value) {
  nlohmann::json j = load();
  auto& all = j["measurements"];
  double best = value;
  for (auto it = all.begin(); it != all.end();)
    if (matches(*it, key)) {
      best = std::max(best, (*it).value("value", 0.0));
      it = all.erase(it);
    } else {
      ++it;
    }
  all.push_back({{"device", std::string(name_of(key.device))},
                 {"hardware", key.hardware},
                 {"quantity", key.quantity},
                 {"value", best}});
  std::error_code ec;
  fs::create_directories(measurements_file().parent_path(), ec);
  const fs::path tmp = measurements_file().string() + ".tmp";
  std::ofstream(tmp) << j.dump(2) << "\n";
  // Best effort: a read-only home only costs measuring again.
  fs::rename(tmp, measurements_file(), ec);
  return best;
}

double cached_or_measured(const MeasurementKey& key, const std::function<double()>& measure) {
  if (const auto cached = cached_measurement(key)) return *cached;
  return store_measurement(key, measure());
}

}  // namespace kintsugi
