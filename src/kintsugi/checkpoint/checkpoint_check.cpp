// Checking a training checkpoint before anything is loaded (inspect_checkpoint): the manifest,
// the model, the files' sizes and checksums, and that the pieces cover every tensor once.
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "kintsugi/checkpoint/checkpoint_format.hpp"
#include "kintsugi/checkpoint/slice_map.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/model/config_json.hpp"

namespace kintsugi {

namespace fs = std::filesystem;
using nlohmann::json;

namespace checkpoint_format {

std::string hex(std::uint64_t h) { return fmt::format("{:016x}", h); }

std::uint64_t file_checksum(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path.string());
  std::vector<char> chunk(1 << 22);
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    XXH3_64bits_update(state, chunk.data(), static_cast<std::size_t>(in.gcount()));
  }
  const std::uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

}  // namespace checkpoint_format

using namespace checkpoint_format;

namespace {

json read_manifest(const fs::path& dir) {
  const fs::path path = dir / "manifest.json";
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) fail("checkpoint {} does not exist", dir.string());
    fail("{} is not a complete checkpoint: manifest.json is missing (an interrupted save leaves "
         "it out; resume from an earlier checkpoint)",
         dir.string());
  }
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("{} is corrupt (not valid JSON: {})", path.string(), e.what());
  }
  if (!j.is_object() || j.value("format", "") != kFormat)
    fail("{} is not a kintsugi training checkpoint manifest", path.string());
  if (j.value("version", 0) != kVersion)
    fail("{} has format version {}, this kintsugi reads version {}", path.string(),
         j.value("version", 0), kVersion);
  return j;
}

// The model fields on which two configurations differ, e.g. "n_layer 2 (checkpoint) vs 4".
// The preset's name and the vocabulary padding (stored tensors have none) may differ.
std::string model_differences(const json& saved, const json& ours) {
  std::string out;
  for (const auto& [key, value] : ours.items()) {
    if (key == "name" || key == "vocab_pad_multiple") continue;
    const json theirs = saved.contains(key) ? saved.at(key) : json();
    if (theirs != value)
      out += fmt::format("{}{} {} (checkpoint) vs {}", out.empty() ? "" : ", ", key,
                         theirs.dump(), value.dump());
  }
  return out;
}

// Reads pieces of a checked checkpoint and assembles whole tensors from them.
}  // namespace

CheckpointInfo inspect_checkpoint(const fs::path& dir, const ModelConfig& model, int rank,
                                  int world) {
  CheckpointInfo info{dir, read_manifest(dir), {}};
  const json& m = info.manifest;
  try {
    const std::string diff = model_differences(m.at("model"), to_json(model));
    if (!diff.empty())
      fail("{} was saved from a different model ({}): resume with the checkpoint's model.* "
           "settings",
           dir.string(), diff);
    info.progress.step = m.at("step").get<std::int64_t>();
    info.progress.optimizer_steps = m.at("optimizer_steps").get<std::int64_t>();
    info.progress.loss_scaler = {m.at("loss_scaler").at("scale").get<double>(),
                                 m.at("loss_scaler").at("clean_steps").get<std::int64_t>(),
                                 m.at("loss_scaler").at("skipped_steps").get<std::int64_t>()};
    info.progress.seed = m.at("data").at("seed").get<std::int64_t>();

    // Files: present, of the recorded size; this rank's share checksummed.
    const json& files = m.at("files");
    std::vector<std::uint64_t> sizes;
    for (std::size_t f = 0; f < files.size(); ++f) {
      const fs::path path = dir / files[f].at("name").get<std::string>();
      const auto expected = files[f].at("bytes").get<std::uint64_t>();
      std::error_code ec;
      const auto size = fs::file_size(path, ec);
      if (ec) fail("{}: shard file {} is missing", dir.string(), path.filename().string());
      if (size != expected)
        fail("{} is truncated or corrupt: {} bytes, the manifest says {}", path.string(), size,
             expected);
      if (static_cast<int>(f % static_cast<std::size_t>(world)) == rank) {
        const std::string sum = hex(file_checksum(path));
        if (sum != files[f].at("xxh3").get<std::string>())
          fail("{} is corrupt: its checksum {} does not match the manifest's {}", path.string(),
               sum, files[f].at("xxh3").get<std::string>());
      }
      sizes.push_back(size);
    }

    // Pieces: inside their files, and covering every tensor exactly once.
    const json& tensors = m.at("tensors");
    std::map<std::string, std::vector<bool>> covered;  // a bit per element
    for (const auto& [name, t] : tensors.items())
      covered[name].assign(static_cast<std::size_t>(numel_of(t.at("shape").get<std::vector<std::int64_t>>())), false);
    for (const json& piece : m.at("pieces")) {
      const std::string name = piece.at("tensor").get<std::string>();
      if (!tensors.contains(name)) fail("{}: piece of unknown tensor {}", dir.string(), name);
      const auto file = piece.at("file").get<std::size_t>();
      const auto count = piece.at("count").get<std::int64_t>();
      const auto begin = piece.at("begin").get<std::int64_t>();
      const auto slice = piece.at("slice_shape").get<std::vector<std::int64_t>>();
      const auto stored = tensors.at(name).at("shape").get<std::vector<std::int64_t>>();
      if (file >= sizes.size() ||
          piece.at("offset").get<std::uint64_t>() + count * kValuesPerElement * sizeof(float) > sizes[file])
        fail("{}: a piece of {} lies outside its shard file", dir.string(), name);
      const int split = piece.at("split_dim").get<int>();
      if (slice.size() != stored.size() || stored.empty() || stored.size() > 2 || begin < 0 ||
          count < 0 || begin + count > numel_of(slice) || split >= static_cast<int>(stored.size()) ||
          (slice.size() == 2 &&
           (split == 1 ? piece.at("split_begin").get<std::int64_t>() + slice[1] > stored[1]
                       : slice[1] != stored[1])))
        fail("{}: a piece of {} has an impossible shape", dir.string(), name);
      const SliceMap map(slice, split, piece.at("split_begin").get<std::int64_t>(), stored);
      auto& cov = covered[name];
      for (std::int64_t j = 0; j < count; ++j) {
        const std::int64_t g = map(begin + j);
        if (g < 0) continue;
        if (g >= static_cast<std::int64_t>(cov.size()) || cov[g])
          fail("{}: the pieces of {} overlap or exceed its shape", dir.string(), name);
        cov[g] = true;
      }
    }
    for (const auto& [name, cov] : covered) {
      const auto missing = std::count(cov.begin(), cov.end(), false);
      if (missing > 0)
        fail("{} is incomplete: {} of the {} elements of {} are in no shard (a shard or "
             "manifest entry is missing)",
             dir.string(), missing, cov.size(), name);
    }
  } catch (const json::exception& e) {
    fail("{}/manifest.json is malformed: {}", dir.string(), e.what());
  }
  return info;
}

}  // namespace kintsugi
