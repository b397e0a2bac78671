#include "kintsugi/checkpoint/model_manifest.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kintsugi/checkpoint/checkpoint_dir.hpp"
#include "kintsugi/checkpoint/checkpoint_format.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/json_file.hpp"
#include "kintsugi/core/memory.hpp"
#include "kintsugi/model/config_json.hpp"
#include "kintsugi/model/model_chunk.hpp"

namespace kintsugi::model_manifest {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The stored shape (without vocabulary padding rows) of every tensor a saved model of this
// configuration holds, by name: the parameters of a serial model, tied copies left out (as
// save_model writes them). Registering the parameters allocates none of them.
std::map<std::string, std::vector<std::int64_t>> stored_shapes(const ModelConfig& config) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const ModelChunk chunk(*backend, config, ChunkStorage{.allocate = false}, 1, 1, 1,
                         TensorParallel{}, ChunkSpec{});
  std::map<std::string, std::vector<std::int64_t>> out;
  for (int i = 0; i < chunk.params().size(); ++i) {
    const ParamEntry& e = chunk.params().entry(i);
    if (e.spec.tied_copy) continue;
    Shape s = e.spec.global_shape;
    if (e.spec.valid_rows >= 0) s.dims[0] = e.spec.valid_rows;
    out[e.spec.name] = {s.dims.begin(), s.dims.begin() + s.rank};
  }
  return out;
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return json(shape).dump(); }

void check_tensors(const std::string& what, const json& m) {
  const ModelConfig config = model_config_from_json(m.at("model"), what);
  const auto expected = stored_shapes(config);
  const json& tensors = m.at("tensors");
  if (!tensors.is_array()) fail("{} is damaged: \"tensors\" is not a list", what);
  const auto data_bytes = m.at("data_bytes").get<std::uint64_t>();
  std::set<std::string> seen;
  std::uint64_t offset = 0;
  for (const json& t : tensors) {
    const auto name = t.at("name").get<std::string>();
    const auto it = expected.find(name);
    if (it == expected.end())
      fail("{} is damaged: tensor {} is not a tensor of its model (model.*)", what, name);
    if (!seen.insert(name).second) fail("{} is damaged: tensor {} is listed twice", what, name);
    const auto shape = t.at("shape").get<std::vector<std::int64_t>>();
    if (shape != it->second)
      fail("{} is damaged: tensor {} has shape {}, but its model (model.*) has {}", what, name,
           shape_text(shape), shape_text(it->second));
    if (t.value("dtype", "") != "f32")
      fail("{} is damaged: tensor {} has dtype {}, saved models hold f32", what, name,
           t.value("dtype", json("")).dump());
    std::uint64_t numel = 1;
    for (auto d : shape) numel *= static_cast<std::uint64_t>(d);
    const auto bytes = t.at("bytes").get<std::uint64_t>();
    const auto at = t.at("offset").get<std::uint64_t>();
    if (bytes != numel * sizeof(float))
      fail("{} is damaged: tensor {} has {} bytes, its shape {} takes {}", what, name, bytes,
           shape_text(shape), numel * sizeof(float));
    // save_model writes the tensors back to back in the listed order: anything else would
    // read (part of) another tensor's bytes.
    if (at != offset)
      fail("{} is damaged: tensor {} starts at byte {}, it is stored at byte {} (after the "
           "tensors listed before it)",
           what, name, at, offset);
    offset += bytes;
    if (offset > data_bytes)
      fail("{} is damaged: tensor {} ends at byte {}, past the data file's {} bytes", what, name,
           offset, data_bytes);
  }
  if (seen.size() != expected.size()) {
    for (const auto& [name, shape] : expected)
      if (!seen.count(name))
        fail("{} is damaged: tensor {} of its model (model.*) is missing", what, name);
  }
  if (offset != data_bytes)
    fail("{} is damaged: its tensors take {} bytes, the data file {}", what, offset, data_bytes);
}

// A version 1 manifest (no checksum) is still read, after the structural checks; a run is told
// once per directory that edits of it cannot be detected.
void warn_unsigned(const fs::path& dir, const std::string& what) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  const std::lock_guard lock(mutex);
  if (!warned.insert(fs::absolute(dir).lexically_normal().string()).second) return;
  fmt::print(stderr,
             "warning: {} has no checksum (a model saved by an older kintsugi, format version "
             "1): its shapes and offsets were checked against its model, but an edit within "
             "them cannot be detected (a model saved by this kintsugi carries one)\n",
             what);
}

}  // namespace

json read_model_manifest(const fs::path& dir) {
  const fs::path path = dir / "manifest.json";
  const std::string what = path.string();
  const json m = read_json_file(path, "{} is not a kintsugi model checkpoint: {} is missing",
                                dir.string(), what);
  if (!m.is_object() || m.value("format", json("")) != kFormat)
    fail("{} is not a kintsugi model checkpoint manifest", what);
  const json version = m.value("version", json(0));
  if (version != 1 && version != kVersion)
    fail("{} has format version {}, this kintsugi reads versions 1 and {}", what, version.dump(),
         kVersion);
  try {
    const auto data_file = m.value("data_file", std::string("params.bin"));
    if (!is_entry_name(data_file))
      fail("{} is damaged: data file \"{}\" is not a file in the model's directory (a manifest "
           "names its own files only)",
           what, data_file);
    check_tensors(what, m);
    if (m.contains("weights_dtype")) {
      if (!m.at("weights_dtype").is_string())
        fail("{} is damaged: weights_dtype {} is not f32, bf16 or f16", what,
             m.at("weights_dtype").dump());
      weights_dtype_from_name(m.at("weights_dtype").get<std::string>(), what);
    }
    if (version == 1) {
      warn_unsigned(dir, what);
      return m;
    }
    using checkpoint_format::kManifestChecksum;
    if (!m.contains(kManifestChecksum) || !m.at(kManifestChecksum).is_string())
      fail("{} is damaged: its checksum {} is missing", what, kManifestChecksum);
    const std::string sum = checkpoint_format::manifest_checksum(m);
    if (sum != m.at(kManifestChecksum).get<std::string>())
      fail("{} is corrupt or was edited: its checksum {} does not match the recorded {}", what,
           sum, m.at(kManifestChecksum).get<std::string>());
  } catch (const json::exception& e) {
    fail("{} is malformed: {}", what, e.what());
  }
  return m;
}

DType weights_dtype_from_name(const std::string& name, const std::string& what) {
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    if (name == name_of(t)) return t;
  fail("{} is damaged: weights_dtype \"{}\" is not f32, bf16 or f16", what, name);
}

DType weights_dtype(const json& manifest) {
  return manifest.contains("weights_dtype")
             ? weights_dtype_from_name(manifest.at("weights_dtype").get<std::string>(),
                                       "the model manifest")
             : DType::f32;
}


json router_bias_to_json(const std::vector<float>& bias, std::int64_t experts) {
  json layers = json::array();
  const auto e = static_cast<std::size_t>(experts);
  for (std::size_t at = 0; at + e <= bias.size(); at += e) {
    json row = json::array();
    for (std::size_t k = 0; k < e; ++k) row.push_back(static_cast<double>(bias[at + k]));
    layers.push_back(row);
  }
  return layers;
}

std::vector<float> router_bias_from_json(const json& manifest, const std::string& where) {
  std::vector<float> bias;
  if (!manifest.contains("moe_router_bias")) return bias;
  const json& layers = manifest.at("moe_router_bias");
  const json& model = manifest.at("model");
  const std::int64_t n_layer = model.at("n_layer").get<std::int64_t>();
  const std::int64_t experts =
      model.contains("moe") ? model.at("moe").at("experts").get<std::int64_t>() : 0;
  bool ok = layers.is_array() && static_cast<std::int64_t>(layers.size()) == n_layer;
  for (std::size_t l = 0; ok && l < layers.size(); ++l) {
    const json& row = layers[l];
    ok = row.is_array() && static_cast<std::int64_t>(row.size()) == experts;
    for (std::size_t e = 0; ok && e < row.size(); ++e) {
      ok = row[e].is_number() && std::isfinite(row[e].get<double>());
      if (ok) bias.push_back(static_cast<float>(row[e].get<double>()));
    }
  }
  if (!ok)
    fail("{} is damaged: moe_router_bias is not {} arrays of {} finite numbers", where, n_layer,
         experts);
  return bias;
}

void require_router_bias(const json& manifest, const std::vector<float>& bias,
                         const std::string& where, const char* command) {
  const json& model = manifest.at("model");
  const bool balanced = model.contains("moe") &&
                        model.at("moe").value("router_bias_update_rate", 0.0) > 0;
  if (balanced && bias.empty())
    fail("kintsugi {}: {} is a model routed with the auxiliary-loss-free balancing bias "
         "(model.moe_router_bias_update_rate) but holds no moe_router_bias table (saved before "
         "it was kept: docs/moe.md, \"DeepSeek-style routing\"); evaluate a training "
         "checkpoint of the run, or save the model again",
         command, where);
}

}  // namespace kintsugi::model_manifest
