// Checking a training checkpoint before anything is loaded (inspect_checkpoint): the manifest,
// the model, the files' sizes and checksums, and that the pieces cover every tensor once.
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <map>

#include "kintsugi/checkpoint/model_manifest.hpp"
#include "kintsugi/checkpoint/checkpoint_dir.hpp"
#include "kintsugi/checkpoint/checkpoint_format.hpp"
#include "kintsugi/checkpoint/model_match.hpp"
#include "kintsugi/checkpoint/slice_map.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/json_file.hpp"
#include "kintsugi/model/config_json.hpp"

namespace kintsugi {

namespace fs = std::filesystem;
using nlohmann::json;

namespace checkpoint_format {

std::string hex(std::uint64_t h) { return fmt::format("{:016x}", h); }

std::uint64_t file_checksum(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path.string());
  return stream_checksum(in);
}

std::uint64_t stream_checksum(std::istream& in) {
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

std::string manifest_checksum(json manifest) {
  manifest.erase(kManifestChecksum);
  const std::string text = manifest.dump();
  return hex(XXH3_64bits(text.data(), text.size()));
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
  const json j = parse_json(in, path.string());
  if (!j.is_object() || j.value("format", "") != checkpoint_format::kFormat)
    fail("{} is not a kintsugi training checkpoint manifest", path.string());
  const int version = j.value("version", 0);
  if (version != 1 && version != checkpoint_format::kVersion)
    fail("{} has format version {}, this kintsugi reads versions 1 to {}", path.string(),
         j.value("version", 0), checkpoint_format::kVersion);
  if (j.contains("optimizer") && (!j.at("optimizer").is_string() ||
                                  (manifest_optimizer(j) != "adamw" && manifest_optimizer(j) != "lion")))
    fail("{} holds the state of optimizer {}, which this kintsugi does not know (\"adamw\" or "
         "\"lion\")",
         path.string(), j.at("optimizer").dump());
  return j;
}

// A manifest scalar that must be an integer of at least `min` (and at most `max`).
std::int64_t counter(const fs::path& dir, const json& parent, const char* key, const char* what,
                     std::int64_t min, std::int64_t max = INT64_MAX) {
  const json& v = parent.at(key);
  if (!v.is_number_integer() || v.get<std::int64_t>() < min || v.get<std::int64_t>() > max ||
      (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
    fail("{}/manifest.json is damaged: {} = {} is not an integer from {} to {}", dir.string(),
         what, v.dump(), min, max);
  return v.get<std::int64_t>();
}

// The progress the manifest records, each field range-checked.
TrainProgress read_progress(const fs::path& dir, const json& m) {
  TrainProgress p;
  p.step = counter(dir, m, "step", "step", 0);
  p.optimizer_steps = counter(dir, m, "optimizer_steps", "optimizer_steps", 0, p.step);
  const json& scaler = m.at("loss_scaler");
  const json& scale = scaler.at("scale");
  if (!scale.is_number() || !std::isfinite(scale.get<double>()) || scale.get<double>() <= 0)
    fail("{}/manifest.json is damaged: loss_scaler.scale = {} is not a positive number",
         dir.string(), scale.dump());
  p.loss_scaler = {scale.get<double>(),
                   counter(dir, scaler, "clean_steps", "loss_scaler.clean_steps", 0),
                   counter(dir, scaler, "skipped_steps", "loss_scaler.skipped_steps", 0, p.step)};
  p.seed = counter(dir, m.at("data"), "seed", "data.seed", INT64_MIN);
  if (m.contains("tokens_seen") && !m.at("tokens_seen").is_null())
    p.tokens_seen = counter(dir, m, "tokens_seen", "tokens_seen", -1);
  p.moe_router_bias =
      model_manifest::router_bias_from_json(m, (dir / "manifest.json").string());
  return p;
}

// Values in this rank's share of the files (the share it checksummed): every weight and first
// moment finite, every second moment finite and not negative. A checksum only says a file is
// as written; a run that diverged could have written these, and a resumed run would blame
// train.lr for them.
void refuse_non_finite(const fs::path& dir, const json& m, int rank, int world) {
  std::map<std::size_t, std::ifstream> streams;
  std::vector<float> values;
  for (const json& piece : m.at("pieces")) {
    const auto file = piece.at("file").get<std::size_t>();
    if (static_cast<int>(file % static_cast<std::size_t>(world)) != rank) continue;
    auto [it, fresh] = streams.try_emplace(file);
    if (fresh)
      it->second.open(dir / m.at("files")[file].at("name").get<std::string>(), std::ios::binary);
    const auto count = piece.at("count").get<std::size_t>();
    values.resize(count * static_cast<std::size_t>(values_per_element(m)));
    it->second.seekg(piece.at("offset").get<std::streamoff>());
    it->second.read(reinterpret_cast<char*>(values.data()),
                    static_cast<std::streamsize>(values.size() * sizeof(float)));
    if (!it->second) fail("cannot read the shard files of {}", dir.string());
    for (std::size_t k = 0; k < values.size(); ++k) {
      const float x = values[k];
      // AdamW's second moment is a mean of squares: never negative. Lion's one moment may be.
      if (std::isfinite(x) && (k < 2 * count || x >= 0)) continue;
      static const char* const kinds[] = {"weight", "first moment", "second moment"};
      const bool lion = values_per_element(m) == 2;
      fail("{} holds {} as a {} of tensor {}: it was saved from a diverged run; resume from an "
           "earlier checkpoint",
           dir.string(), x, lion && k >= count ? "moment" : kinds[k / count],
           piece.at("tensor").get<std::string>());
    }
  }
}
// The shard files: present, of the recorded size, this rank's share checksummed. Returns their
// sizes.
std::vector<std::uint64_t> check_files(const fs::path& dir, const json& m, int rank, int world) {
  const json& files = m.at("files");
  std::vector<std::uint64_t> sizes;
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::string name = files[f].at("name").get<std::string>();
    if (!is_entry_name(name))
      fail("{}/manifest.json is damaged: shard file \"{}\" is not a file in the checkpoint's "
           "directory (a manifest names its own files only)",
           dir.string(), name);
    const fs::path path = dir / name;
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

  return sizes;
}

// The pieces: inside their files, and covering every tensor exactly once.
void check_pieces(const fs::path& dir, const json& m, const std::vector<std::uint64_t>& sizes) {
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
        piece.at("offset").get<std::uint64_t>() + count * values_per_element(m) * sizeof(float) >
            sizes[file])
      fail("{}: a piece of {} lies outside its shard file", dir.string(), name);
    const int split = piece.at("split_dim").get<int>();
    // A 3D tensor grid's weight pieces start at a column too (3D tensor parallelism).
    const auto cols_begin = piece.value("cols_begin", std::int64_t{0});
    if (slice.size() != stored.size() || stored.empty() || stored.size() > 2 || begin < 0 ||
        count < 0 || begin + count > numel_of(slice) || split >= static_cast<int>(stored.size()) ||
        cols_begin < 0 || (cols_begin > 0 && (split != 0 || slice.size() != 2)) ||
        (slice.size() == 2 &&
         (split == 1 ? piece.at("split_begin").get<std::int64_t>() + slice[1] > stored[1]
                     : cols_begin + slice[1] > stored[1] ||
                           (cols_begin == 0 && split != 0 && slice[1] != stored[1]))))
      fail("{}: a piece of {} has an impossible shape", dir.string(), name);
    const SliceMap map(slice, split, piece.at("split_begin").get<std::int64_t>(), stored,
                       cols_begin);
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
}

// The manifest's own checksum (version 2 on), checked last so that the checks before it name
// what is wrong with a damaged manifest.
void check_manifest_checksum(const fs::path& dir, const json& m) {
  if (m.value("version", 0) >= 2) {
    if (!m.contains(kManifestChecksum) || !m.at(kManifestChecksum).is_string())
      fail("{}/manifest.json is damaged: its checksum {} is missing", dir.string(),
           kManifestChecksum);
    const std::string sum = manifest_checksum(m);
    if (sum != m.at(kManifestChecksum).get<std::string>())
      fail("{}/manifest.json is corrupt or was edited: its checksum {} does not match the "
           "recorded {}",
           dir.string(), sum, m.at(kManifestChecksum).get<std::string>());
  }
}

}  // namespace

CheckpointInfo inspect_checkpoint(const fs::path& dir, const ModelConfig& model, int rank,
                                  int world) {
  CheckpointInfo info{dir, read_manifest(dir), {}};
  const json& m = info.manifest;
  try {
    // model.seq_len may change where the family allows it (model_match.hpp).
    check_loadable_model(m.at("model"), model, dir.string(),
                         "resume with the checkpoint's model.* settings");
    info.progress = read_progress(dir, m);

    check_pieces(dir, m, check_files(dir, m, rank, world));
    refuse_non_finite(dir, m, rank, world);
    check_manifest_checksum(dir, m);
  } catch (const json::exception& e) {
    fail("{}/manifest.json is malformed: {}", dir.string(), e.what());
  }
  return info;
}

}  // namespace kintsugi
