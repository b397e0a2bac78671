#pragma once
// The manifest of a saved model (<out>/model/manifest.json) and its checks. Everything that
// reads a saved model (eval, generate, export) reads the manifest through read_model_manifest,
// so no tensor is read from a byte range the checks have not accepted.
#include <filesystem>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "kintsugi/core/dtype.hpp"

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

// The type the saved weights have (the manifest's "weights_dtype"): a mixed-precision run saves
// its bf16 or f16 working weights, which params.bin holds widened to f32, exactly; an f32 run
// its f32 weights. Absent (models saved before it was recorded): f32, which is what params.bin
// holds. Of a manifest read_model_manifest accepted.
DType weights_dtype(const nlohmann::json& manifest);
// "f32", "bf16" or "f16" for the manifest, and back (kintsugi::Error naming `what` otherwise).
DType weights_dtype_from_name(const std::string& name, const std::string& what);

// The auxiliary-loss-free balancing bias (docs/moe.md, "DeepSeek-style routing"), kept in a
// saved model's and a training checkpoint's manifest as "moe_router_bias": per block its
// experts' biases, each float written as a double (read back exactly).
nlohmann::json router_bias_to_json(const std::vector<float>& bias, std::int64_t experts);
// The manifest's table ([n_layer][experts] finite numbers of its "model"), empty when it has
// none; kintsugi::Error naming `where` (the manifest's path) when it is damaged.
std::vector<float> router_bias_from_json(const nlohmann::json& manifest, const std::string& where);
// A model routed with the balancing bias needs its table: kintsugi::Error naming `where` and
// `command` when the manifest of such a model holds none.
void require_router_bias(const nlohmann::json& manifest, const std::vector<float>& bias,
                         const std::string& where, const char* command);

}  // namespace kintsugi::model_manifest
