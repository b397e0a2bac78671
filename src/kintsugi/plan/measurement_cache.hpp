#pragma once
// What the `local` cluster of a device measured (device_measurements.json in the cache
// directory, core/cache_dir.hpp), kept between runs as the GEMM rates (gemm_rate.hpp) and the
// local links (local_cluster.hpp) are: the best value ever measured per (device, hardware,
// quantity), since a busy device only under-reports. Keyed by the device kind and its model
// name, so a CPU's and a GPU's figures never mix. Remove the file to measure again.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "kintsugi/core/device.hpp"

namespace kintsugi {

struct MeasurementKey {
  Device device = Device::cpu;
  std::string hardware;  // Backend::hardware()
  std::string quantity;  // what and on which shape, e.g. "attention TFLOP/s bf16 8x1024 h12/12 d64"
};

std::filesystem::path measurements_file();
std::optional<double> cached_measurement(const MeasurementKey& key);
// Caches `value`, or keeps the cached one if it is higher; returns the one kept.
double store_measurement(const MeasurementKey& key, double value);
// The cached value, else `measure()` stored.
double cached_or_measured(const MeasurementKey& key, const std::function<double()>& measure);

}  // namespace kintsugi
