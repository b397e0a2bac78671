#pragma once
// ModelConfig <-> JSON, for checkpoint manifests and `--json` outputs.
#include <nlohmann/json.hpp>

#include "kintsugi/model/config.hpp"

namespace kintsugi {

nlohmann::json to_json(const ModelConfig& c);
// Throws kintsugi::Error (naming `what`) on a missing or mistyped field, or a value no model can
// have (validate, naming the file and its field).
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& what);

}  // namespace kintsugi
