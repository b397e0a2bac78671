#pragma once
// The cluster presets: configs/clusters/*.toml as this build found them, compiled into the
// program (cmake/ClusterPresets.cmake), so a preset name works wherever the binary runs.
#include <span>
#include <string_view>

namespace kintsugi {

struct ClusterPreset {
  std::string_view name;  // the file's name without .toml: dgx-h100
  std::string_view toml;  // its text
};

// Sorted by name.
std::span<const ClusterPreset> cluster_presets();

}  // namespace kintsugi
