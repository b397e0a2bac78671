#pragma once
// The manifest of a saved model (<out>/model/manifest.json) and its checks. Everything that
// reads a saved model (eval, generate, export) reads the manifest through read_model_manifest,
// so no tensor is read from a byte range the checks have not accepted.
#include <filesystem>
#include <nlohmann/json.hpp>

namespace kintsugi::model_manifest {

constexpr const char* kFormat = "kintsugi-model";
// Version 2 protects the manifest with a checksum of its own (checkpoint_format's
// kManifestChecksum, computed the same way as a training checkpoint's); version 1 manifests
// (no checksum) are still read, with a warning.
constexpr int kVersion = 2;

// Reads <dir>/manifest.json and checks it: format and version; the model configuration; the
// data file a name in the directory; the tensors exactly those of a model of that
// configuration (names, stored shapes), float32, stored back to back in the listed order from
// offset 0 to data_bytes; and last its checksum. kintsugi::Error naming the file otherwise.
// The data file's size and checksum are checked where it is read.
nlohmann::json read_model_manifest(const std::filesystem::path& dir);

}  // namespace kintsugi::model_manifest
