#include "kintsugi/checkpoint/kintsugi_weights.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/checkpoint/model_manifest.hpp"
#include "kintsugi/checkpoint/model_match.hpp"
#include "kintsugi/checkpoint/checkpoint_format.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

// The manifest's format, or "" when there is no readable manifest.json.
std::string manifest_format(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  if (!in) return "";
  const auto j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() ? j.value("format", "") : "";
}

}  // namespace

bool is_kintsugi_checkpoint(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  const std::string format = manifest_format(path);
  return format == model_manifest::kFormat || format == checkpoint_format::kFormat;
}

KintsugiWeights read_kintsugi_weights(const fs::path& dir, const ModelConfig& config) {
  const std::string fix = "set model.* to the saved model's (only model.seq_len may change)";
  KintsugiWeights w;
  if (manifest_format(dir) == model_manifest::kFormat) {
    const nlohmann::json manifest = model_manifest::read_model_manifest(dir);
    check_loadable_model(manifest.at("model"), config, dir.string(), fix);
    w.tokenizer = data::identity_from_json(manifest, (dir / "manifest.json").string());
    w.step = manifest.value("step", std::int64_t{0});
    w.tensors = read_model_tensors(dir);
  } else {
    // The same checks as a resume (every file's checksum: this process reads every tensor).
    {
      std::ifstream in(dir / "manifest.json");
      const auto j = nlohmann::json::parse(in, nullptr, false);
      if (j.is_object() && j.contains("model")) check_loadable_model(j.at("model"), config, dir.string(), fix);
    }
    const CheckpointInfo info = inspect_checkpoint(dir, config);
    w.tokenizer = data::identity_from_json(info.manifest, (dir / "manifest.json").string());
    w.step = info.progress.step;
    for (const auto& [name, entry] : info.manifest.at("tensors").items()) {
      NamedTensor t;
      t.values = read_checkpoint_tensor(info, name, &t.shape);
      w.tensors[name] = std::move(t);
    }
  }
  // A shorter context keeps the first rows of a learned position table.
  if (auto it = w.tensors.find(kPositionTable);
      it != w.tensors.end() && it->second.shape.size() == 2 && it->second.shape[0] > config.seq_len) {
    it->second.values.resize(static_cast<std::size_t>(config.seq_len * it->second.shape[1]));
    it->second.shape[0] = config.seq_len;
  }
  return w;
}

}  // namespace kintsugi
