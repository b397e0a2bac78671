#pragma once
// What the training-checkpoint writer and its checker share: the manifest's format name and
// version, the layout of a piece in a shard file, and the file checksum.
#include <cstdint>
#include <filesystem>
#include <istream>
#include <nlohmann/json.hpp>
#include <string>

namespace kintsugi::checkpoint_format {

constexpr const char* kFormat = "kintsugi-train-checkpoint";
// Version 2 protects the manifest with a checksum of its own ("manifest_xxh3"); version 1
// manifests (no checksum) are still read.
constexpr int kVersion = 2;
constexpr const char* kManifestChecksum = "manifest_xxh3";
// A piece of n elements is n weights, then the optimizer's moments of the same elements
// (float32): AdamW's n first and n second moments, or Lion's n moments. The manifest's
// "optimizer" names which ("adamw" when absent: checkpoints written before Lion).
inline std::string manifest_optimizer(const nlohmann::json& manifest) {
  return manifest.value("optimizer", std::string("adamw"));
}
// Values stored per element: the weight and each moment.
inline int values_per_element(const std::string& optimizer) { return optimizer == "lion" ? 2 : 3; }
inline int values_per_element(const nlohmann::json& manifest) {
  return values_per_element(manifest_optimizer(manifest));
}

std::string hex(std::uint64_t h);  // 16 lowercase hex digits
// XXH3-64 of a whole file (kintsugi::Error when it cannot be read).
std::uint64_t file_checksum(const std::filesystem::path& path);
// XXH3-64 of what is left in `in`, read to its end (a model checkpoint's data file).
std::uint64_t stream_checksum(std::istream& in);
// XXH3-64 of the manifest's compact JSON text without its kManifestChecksum member.
std::string manifest_checksum(nlohmann::json manifest);

}  // namespace kintsugi::checkpoint_format
