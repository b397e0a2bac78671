#include "kintsugi/checkpoint/hf_weights.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "kintsugi/checkpoint/slice_map.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/half.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/core/json_file.hpp"
#include "kintsugi/data/mapped_file.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";

// The shard files an index names, and which file holds each tensor. Names must be plain file
// names in the folder: an index must not reach outside it.
std::vector<fs::path> read_index(const fs::path& dir, std::map<std::string, int>& file_of) {
  const fs::path path = dir / kIndex;
  const nlohmann::json index = read_json_file(path, "cannot read {}", path.string());
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object() ||
      index.at("weight_map").empty())
    fail("{} has no weight_map naming the tensors' shard files", path.string());
  std::vector<fs::path> files;
  std::map<std::string, int> number;
  for (const auto& [tensor, file] : index.at("weight_map").items()) {
    if (!file.is_string()) fail("{}: the shard of {} is not a file name", path.string(), tensor);
    const std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
        !name.ends_with(".safetensors"))
      fail("{}: the shard of {} is \"{}\", not a .safetensors file in the folder", path.string(),
           tensor, name);
    auto [it, fresh] = number.try_emplace(name, static_cast<int>(files.size()));
    if (fresh) {
      files.push_back(dir / name);
      if (!fs::is_regular_file(files.back()))
        fail("{} is missing: {} names it as the shard of {}", files.back().string(), path.string(),
             tensor);
    }
    file_of[tensor] = it->second;
  }
  return files;
}

// A header entry's type (the header reader admits F32, BF16 and F16 only).
DType dtype_of(const SafetensorsEntry& entry) {
  return entry.dtype == "F32" ? DType::f32 : entry.dtype == "BF16" ? DType::bf16 : DType::f16;
}

}  // namespace

HfTensorList hf_tensor_list(const fs::path& folder) {
  HfTensorList list;
  if (fs::exists(folder / kIndex)) {
    std::map<std::string, int> file_of;
    read_index(folder, file_of);
    list.file = folder / kIndex;
    for (const auto& [name, _] : file_of) list.names.push_back(name);
  } else if (fs::exists(folder / kSingle)) {
    list.file = folder / kSingle;
    for (const auto& [name, _] : read_safetensors_header(list.file)) list.names.push_back(name);
  }
  return list;
}

HfWeights::HfWeights(const fs::path& path, const ModelConfig& config, bool head_from_embedding)
    : config_(config), source_(path.string()) {
  // Where every tensor lies: by name in the file, with its header entry.
  std::map<std::string, Located> by_base;
  std::map<std::string, int> file_of;
  const bool folder = fs::is_directory(path);
  if (!folder) {
    if (!fs::exists(path)) fail("--init-from {} does not exist", path.string());
    files_ = {path};
  } else if (fs::exists(path / kIndex)) {
    files_ = read_index(path, file_of);
  } else if (fs::exists(path / kSingle)) {
    files_ = {path / kSingle};
  } else {
    fail("{} holds neither {} nor {}{}", path.string(), kSingle, kIndex,
         fs::exists(path / "pytorch_model.bin") || fs::exists(path / "pytorch_model.bin.index.json")
             ? " (PyTorch .bin weights are not supported: save the model with "
               "safe_serialization=True)"
             : "");
  }
  // Every header first (each checked on its own: ranges inside the file, no overlaps).
  for (std::size_t k = 0; k < files_.size(); ++k) {
    for (auto& [name, entry] : read_safetensors_header(files_[k])) {
      if (!file_of.empty()) {
        auto it = file_of.find(name);
        if (it == file_of.end())
          fail("{} holds tensor {}, which {} does not name", files_[k].string(), name, kIndex);
        if (it->second != static_cast<int>(k))
          fail("{} holds tensor {}, which {} places in {}", files_[k].string(), name, kIndex,
               files_[it->second].filename().string());
      }
      const std::string base = hf_base_name(name);
      if (by_base.count(base))
        fail("{} holds tensor {} twice (with and without its model prefix)", source_, base);
      by_base[base] = Located{static_cast<int>(k), std::move(entry), name};
    }
  }
  for (const auto& [tensor, k] : file_of)
    if (!by_base.count(hf_base_name(tensor)))
      fail("{} names tensor {} in {}, which does not hold it", (path / kIndex).string(), tensor,
           files_[k].filename().string());

  // Every tensor the model needs, with the shape it needs. The model's shape came from the
  // folder's config.json, or, for one file, from the run's model.* keys: a mismatch names that.
  const std::string shape_from =
      folder ? fmt::format("{} does not match the weights", (path / "config.json").string())
             : "set model.* to the file's model";
  std::set<std::string> used;
  for (const HfTensor& t : hf_tensors(config)) {
    std::string base = hf_base_name(t.theirs);
    if (head_from_embedding && t.ours == "head.weight") base = "embed_tokens.weight";
    auto it = by_base.find(base);
    if (it == by_base.end())
      fail("{} has no tensor {}: it is not a {} model of this shape ({})", source_, t.theirs,
           name_of(config.family), shape_from);
    used.insert(base);
    const std::vector<std::int64_t> ours = our_shape(t.ours, config);
    std::vector<std::int64_t> expected = hf_shape(t.conversion, config, ours);
    const std::vector<std::int64_t>& shape = it->second.entry.shape;
    // A pretrained position table may be longer than this run's context: its first rows.
    if (t.ours == "embedding.position.weight" && shape.size() == 2 && shape[0] >= expected[0])
      expected[0] = shape[0];
    if (shape != expected)
      fail("{}: {} has shape [{}] but the model expects [{}] (our {}): {}",
           files_[it->second.file].string(), it->second.name, fmt::join(shape, ", "),
           fmt::join(expected, ", "), t.ours, shape_from);
    Source& s = sources_[t.ours];
    s.conversion = t.conversion;
    s.parts.push_back(it->second);
  }
  // Buffers and tied copies that carry no weights of their own may be present; anything else
  // means the folder holds a different model.
  for (const auto& [base, t] : by_base) {
    if (used.count(base) || base == "lm_head.weight" || base.ends_with("attn.bias") ||
        base.ends_with("attn.masked_bias") || base.ends_with("rotary_emb.inv_freq"))
      continue;
    fail("{} holds {}, which a {} model of this config does not have", source_, t.name,
         name_of(config.family));
  }
  // Llama's q, k, v in that order (the table's order).
  for (auto& [ours, s] : sources_)
    if (is_qkv_part(s.conversion) && s.parts.size() != 3)
      fail("{}: {} needs q_proj, k_proj and v_proj", source_, ours);
}

std::vector<float> HfWeights::read_piece(const ParamEntry& e, std::int64_t begin,
                                         std::int64_t count,
                                         std::vector<data::MappedFile>& mapped) const {
  auto data_of = [&](const Located& l) {
    if (!mapped[l.file].data())  // mapped when a piece first needs it
      mapped[l.file] = data::MappedFile(files_[l.file], "safetensors file",
                                        "check that the folder is readable");
    return mapped[l.file].data() + l.entry.begin;
  };
  auto it = sources_.find(e.spec.name);
  if (it == sources_.end()) fail("{} has no tensor for our {}", source_, e.spec.name);
  const Source& s = it->second;
  const std::vector<std::int64_t> stored = stored_shape(e.spec);
  if (stored != our_shape(e.spec.name, config_))
    fail("{}: the model's {} has shape [{}], not the [{}] the weights were checked for", source_,
         e.spec.name, fmt::join(stored, ", "), fmt::join(our_shape(e.spec.name, config_), ", "));
  const std::int64_t rows = stored[0], cols = stored.size() == 2 ? stored[1] : 1;
  const SliceMap map(e);
  // The parts' data and element decoding, looked up once per piece, not per element.
  struct Part {
    const unsigned char* data;
    DType dtype;
  };
  std::vector<Part> parts;
  for (const Located& l : s.parts) parts.push_back({data_of(l), dtype_of(l.entry)});
  std::vector<float> w(static_cast<std::size_t>(count));
  for (std::int64_t j = 0; j < count; ++j) {
    const std::int64_t g = map(begin + j);
    if (g < 0) continue;  // a vocabulary padding row
    const HfElement at = hf_element(s.conversion, config_, rows, cols, g);
    const Part& part = parts[at.part];
    if (part.dtype == DType::f32) {
      std::memcpy(&w[j], part.data + 4 * at.index, 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, part.data + 2 * at.index, 2);
      w[j] = part.dtype == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
    }
    const Located& l = s.parts[at.part];
    // Non-finite weights would make the first step non-finite, and the run would blame
    // train.lr.
    if (!std::isfinite(w[j]))
      fail("{}: tensor {} holds {} at element {}: the file is damaged or was saved from a "
           "diverged run",
           files_[l.file].string(), l.name, w[j], at.index);
  }
  return w;
}

void HfWeights::set(const RankState& rank) const {
  std::vector<data::MappedFile> mapped(files_.size());
  // Every piece read and checked first, then written: a damaged file leaves no weight changed.
  std::vector<std::vector<std::vector<float>>> values(rank.states.size());
  for (std::size_t c = 0; c < rank.states.size(); ++c) {
    const ParamStore& params = *rank.params[c];
    for (const auto& p : rank.states[c]->state_pieces()) {
      if (p.weights.dtype != DType::f32) fail("initial weights need float32 parameters");
      values[c].push_back(read_piece(params.entry(p.param), p.begin, p.count, mapped));
    }
  }
  for (std::size_t c = 0; c < rank.states.size(); ++c) {
    const auto pieces = rank.states[c]->state_pieces();
    for (std::size_t k = 0; k < pieces.size(); ++k) write_values(values[c][k].data(), pieces[k].weights);
  }
  for (ShardedState* s : rank.states) s->refresh_weights();
}

void HfWeights::set(const ParamStore& params) const {
  std::vector<data::MappedFile> mapped(files_.size());
  std::vector<std::vector<float>> values;
  for (int i = 0; i < params.size(); ++i) {
    if (params.param(i).dtype != DType::f32) fail("initial weights need float32 parameters");
    values.push_back(read_piece(params.entry(i), 0, params.param(i).numel(), mapped));
  }
  for (int i = 0; i < params.size(); ++i) write_values(values[i].data(), params.param(i));
}

DType HfWeights::dtype() const {
  std::set<DType> types;
  for (const auto& [ours, s] : sources_)
    for (const Located& l : s.parts) types.insert(dtype_of(l.entry));
  return types.size() == 1 ? *types.begin() : DType::f32;
}

}  // namespace kintsugi
