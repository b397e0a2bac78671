#include "kintsugi/checkpoint/hf_io.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "kintsugi/checkpoint/hf_layout.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/checkpoint/model_manifest.hpp"
#include "kintsugi/checkpoint/slice_map.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/half.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/core/json_file.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/model/config_json.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

// The manifest's format and model, to tell the two kinds of checkpoint apart.
nlohmann::json read_manifest_json(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  if (!in) fail("{} is not a checkpoint: {} is missing", dir.string(), (dir / "manifest.json").string());
  return parse_json(in, dir.string() + "/manifest.json");
}

std::string index_name(const fs::path& out) { return out.filename().string() + ".index.json"; }

// The shard files an earlier export's index names (none: no index, or not readable).
std::vector<fs::path> indexed_shards(const fs::path& index) {
  std::vector<fs::path> files;
  std::ifstream in(index);
  if (!in) return files;
  try {
    const auto j = nlohmann::json::parse(in);
    std::set<std::string> names;
    for (const auto& [_, file] : j.at("weight_map").items()) names.insert(file.get<std::string>());
    for (const auto& name : names)
      if (name.find('/') == std::string::npos) files.push_back(index.parent_path() / name);
  } catch (const nlohmann::json::exception&) {
  }
  return files;
}

// Shards of an earlier export next to `out` named as save_pretrained names them
// (<stem>-0000K-of-0000N.safetensors), whether or not an index names them.
std::vector<fs::path> shards_named_like(const fs::path& out) {
  static const std::regex numbering(R"(-\d{5}-of-\d{5}\.safetensors)");
  const std::string stem = out.stem().string();
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry :
       fs::directory_iterator(out.parent_path().empty() ? "." : out.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && name.starts_with(stem) &&
        std::regex_match(name.substr(stem.size()), numbering))
      files.push_back(entry.path());
  }
  return files;
}

std::uint64_t byte_count(const std::map<std::string, NamedTensor>& tensors, DType dtype) {
  std::uint64_t total = 0;
  for (const auto& [_, t] : tensors) total += t.values.size() * size_of(dtype);
  return total;
}

// Sharded weights carry transformers' names, the only ones from_pretrained looks for in a
// folder: --out must be model.safetensors (refused before anything is written).
void check_shard_names(const fs::path& out, std::uint64_t total, std::uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0 || total <= max_shard_bytes || out.filename() == "model.safetensors")
    return;
  fail("--out {}: the weights ({} bytes) are larger than --max-shard-size ({} bytes), and "
       "sharded weights are model-0000K-of-0000N.safetensors with model.safetensors.index.json, "
       "the names transformers' from_pretrained looks for: give --out {} (or no "
       "--max-shard-size, for one file named {})",
       out.string(), total, max_shard_bytes, (out.parent_path() / "model.safetensors").string(),
       out.filename().string());
}

}  // namespace

WrittenFiles write_hf_weights(const fs::path& out, const std::map<std::string, NamedTensor>& tensors,
                              const std::vector<std::string>& order, std::uint64_t max_shard_bytes,
                              DType dtype) {
  const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  const fs::path index = dir / index_name(out);
  const std::uint64_t total = byte_count(tensors, dtype);
  check_shard_names(out, total, max_shard_bytes);
  // What an earlier export into the same folder left that a loader would take instead of the
  // new files, or beside them (transformers prefers model.safetensors to an index).
  std::set<fs::path> earlier;
  for (const fs::path& f : indexed_shards(index)) earlier.insert(f);
  for (const fs::path& f : shards_named_like(out)) earlier.insert(f);
  earlier.insert(index);
  earlier.insert(out);
  WrittenFiles files;
  auto remove_the_rest = [&] {
    std::error_code ec;
    for (const fs::path& f : earlier)
      if (std::find(files.written.begin(), files.written.end(), f) == files.written.end() &&
          fs::is_regular_file(f, ec) && fs::remove(f, ec))
        files.removed.push_back(f);
  };
  if (max_shard_bytes == 0 || total <= max_shard_bytes) {
    write_safetensors(out, tensors, {{"format", "pt"}}, dtype);
    files.written.push_back(out);
    remove_the_rest();
    return files;
  }
  // The earlier index goes first: until the new one is in place, no loader sees a set of
  // shards that mixes the two exports.
  std::error_code ec;
  if (fs::remove(index, ec)) files.removed.push_back(index);
  // As transformers' save_pretrained: tensors in order, a new shard when the next would pass
  // the limit (a tensor larger than the limit gets a shard of its own).
  std::vector<std::vector<std::string>> shards(1);
  std::uint64_t bytes = 0;
  for (const std::string& name : order) {
    const std::uint64_t size = tensors.at(name).values.size() * size_of(dtype);
    if (!shards.back().empty() && bytes + size > max_shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(name);
    bytes += size;
  }
  const std::string stem = out.stem().string();
  nlohmann::json weight_map = nlohmann::json::object();
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const std::string file =
        fmt::format("{}-{:05}-of-{:05}.safetensors", stem, k + 1, shards.size());
    std::map<std::string, NamedTensor> part;
    for (const std::string& name : shards[k]) {
      part[name] = tensors.at(name);
      weight_map[name] = file;
    }
    write_safetensors(dir / file, part, {{"format", "pt"}}, dtype);
    files.written.push_back(dir / file);
  }
  // The index last: until it is in place, no loader sees a half-written set of shards.
  data::AtomicFile index_file(index);
  index_file.write(nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}
                       .dump(2) +
                   "\n");
  index_file.commit();
  files.written.push_back(index);
  remove_the_rest();
  return files;
}

namespace {

// How many values of `t` rounding to `dtype` changes; a finite value that would not stay finite
// (past f16's 65504) is refused, naming the tensor.
std::int64_t count_rounded(const std::string& name, const NamedTensor& t, DType dtype) {
  if (dtype == DType::f32) return 0;
  std::int64_t changed = 0;
  for (std::size_t k = 0; k < t.values.size(); ++k) {
    const float x = t.values[k];
    const float y = dtype == DType::bf16 ? bf16_to_float(float_to_bf16(x))
                                         : f16_to_float(float_to_f16(x));
    if (std::isfinite(x) && !std::isfinite(y))
      fail("tensor {} holds {} at element {}, which {} cannot hold: export as f32 (--dtype f32)",
           name, x, k, name_of(dtype));
    if (std::bit_cast<std::uint32_t>(x) != std::bit_cast<std::uint32_t>(y)) ++changed;
  }
  return changed;
}

}  // namespace

std::string torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    default: fail("export writes f32, bf16 or f16, not {}", name_of(dtype));
  }
}

HfExport export_hf(const fs::path& checkpoint, const fs::path& out, std::uint64_t max_shard_bytes,
                   std::optional<DType> dtype, const data::Tokenizer* tokenizer) {
  const nlohmann::json manifest = read_manifest_json(checkpoint);
  const std::string what = (checkpoint / "manifest.json").string();
  if (!manifest.contains("model")) fail("{} has no model configuration", what);
  HfExport e;
  e.config = model_config_from_json(manifest.at("model"), what);
  const ModelConfig& config = e.config;
  std::vector<HfTensor> table;  // refused for families without a table: said of the checkpoint
  try {
    table = hf_tensors(config);
  } catch (const Error& e) {
    fail("{} cannot be exported: {}", checkpoint.string(), e.what());
  }

  // Whole tensors, from either kind of checkpoint (both check sizes and checksums first).
  std::map<std::string, NamedTensor> ours;
  e.saved_model = manifest.value("format", "") == model_manifest::kFormat;
  if (e.saved_model) {
    const nlohmann::json checked = model_manifest::read_model_manifest(checkpoint);
    e.source_dtype = model_manifest::weights_dtype(checked);
    e.step = checked.value("step", std::int64_t{0});
    ours = read_model_tensors(checkpoint);
  } else {
    const CheckpointInfo info = inspect_checkpoint(checkpoint, config);
    e.source_dtype = DType::f32;  // the master weights, whatever the run computed in
    e.step = info.progress.step;
    if (info.manifest.contains("layout"))
      e.run_precision = info.manifest.at("layout").value("precision", "");
    for (const HfTensor& t : table) {
      if (ours.count(t.ours)) continue;  // Llama's qkv feeds three of theirs: read it once
      NamedTensor nt;
      nt.values = read_checkpoint_tensor(info, t.ours, &nt.shape);
      ours[t.ours] = std::move(nt);
    }
  }
  e.dtype = dtype.value_or(e.source_dtype);
  std::map<std::string, NamedTensor> theirs;
  std::vector<std::string> order;  // the table's: a model's layers stay together in shards
  for (const HfTensor& t : table) {  // a fused qkv may feed three of theirs
    auto it = ours.find(t.ours);
    if (it == ours.end()) fail("{} has no tensor {}", checkpoint.string(), t.ours);
    theirs[t.theirs] = to_hf(t, config, it->second);
    order.push_back(t.theirs);
  }
  for (const auto& [name, t] : theirs) {
    const std::int64_t rounded = count_rounded(name, t, e.dtype);
    // A saved model's 16-bit weights are written as they are: were one of them not of its
    // recorded type, the export would round it again.
    if (rounded > 0 && e.dtype == e.source_dtype)
      fail("{} is damaged: it records {} weights, but tensor {} holds {} values that are not {}",
           what, name_of(e.source_dtype), name, rounded, name_of(e.dtype));
    e.rounded += rounded;
    e.elements += static_cast<std::int64_t>(t.values.size());
  }
  check_shard_names(out, byte_count(theirs, e.dtype), max_shard_bytes);
  nlohmann::json hf = hf_config(config);
  hf["torch_dtype"] = torch_dtype_name(e.dtype);
  if (tokenizer) {
    if (const auto bos = tokenizer->bos_id()) hf["bos_token_id"] = *bos;
    hf["eos_token_id"] = tokenizer->eos_id();
  }

  // Everything is checked: from here on, files are written.
  const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  const fs::path config_json = dir / "config.json";
  std::set<fs::path> before;  // the names of the folder's files, to say which it writes over
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec)) before.insert(entry.path().filename());
  std::vector<fs::path> written;
  try {
    fs::create_directories(dir);
    // An earlier config.json would make the folder look like a model while it is half written.
    fs::remove(config_json);
    WrittenFiles weights = write_hf_weights(out, theirs, order, max_shard_bytes, e.dtype);
    written = std::move(weights.written);
    e.removed = std::move(weights.removed);
    if (tokenizer) {
      for (fs::path& f : tokenizer->save(dir, config.seq_len)) written.push_back(std::move(f));
      e.tokenizer = true;
      // Another tokenizer's files would be read beside (or instead of) the new ones.
      for (const char* name : {"tokenizer.json", "tokenizer_config.json", "vocab.json",
                               "merges.txt", "special_tokens_map.json", "added_tokens.json",
                               "tokenizer.model"}) {
        const fs::path f = dir / name;
        if (std::find(written.begin(), written.end(), f) == written.end() && fs::remove(f, ec))
          e.removed.push_back(f);
      }
    }
    data::AtomicFile json_file(config_json);
    json_file.write(hf.dump(2) + "\n");
    json_file.commit();
    written.push_back(config_json);
  } catch (const std::exception& error) {
    fail("{} (the export into {} is incomplete and has no config.json: no loader takes it for a "
         "model; export again)",
         error.what(), dir.string());
  }
  for (const fs::path& f : written)
    if (before.count(f.filename())) e.replaced.push_back(f);
  return e;
}

std::string describe_export(const HfExport& e, const fs::path& checkpoint) {
  const std::string weights =
      e.saved_model
          ? fmt::format("the {} {}weights of the saved model {} (step {})", name_of(e.source_dtype),
                        e.source_dtype == DType::f32 ? "" : "working ", checkpoint.string(), e.step)
          : fmt::format("the f32 master weights of the training checkpoint {} (step {}{})",
                        checkpoint.string(), e.step,
                        e.run_precision.empty() ? "" : ", a " + e.run_precision + " run");
  std::string how;
  if (e.dtype == e.source_dtype)
    how = ", exactly";
  else if (size_of(e.dtype) > size_of(e.source_dtype))
    how = fmt::format(", widened to {} exactly", name_of(e.dtype));
  else
    how = fmt::format(", rounded to {} (nearest even, as a mixed-precision run rounds its working "
                      "weights; {} of {} values changed)",
                      name_of(e.dtype), e.rounded, e.elements);
  return fmt::format("{} tensors (torch_dtype {}): {}{}", name_of(e.dtype), torch_dtype_name(e.dtype),
                     weights, how);
}

void set_weights(const std::map<std::string, NamedTensor>& tensors, const RankState& rank,
                 const std::string& source) {
  for (std::size_t c = 0; c < rank.states.size(); ++c) {
    const ParamStore& params = *rank.params[c];
    const auto pieces = rank.states[c]->state_pieces();
    for (const auto& p : pieces) {  // checked before anything is written
      const ParamEntry& e = params.entry(p.param);
      auto it = tensors.find(e.spec.name);
      if (it == tensors.end()) fail("{} has no tensor {}", source, e.spec.name);
      if (it->second.shape != stored_shape(e.spec))
        fail("{}: {} has shape [{}] (in our layout) but the model expects [{}]: set model.* to "
             "the saved model's",
             source, e.spec.name, fmt::join(it->second.shape, ", "),
             fmt::join(stored_shape(e.spec), ", "));
      if (p.weights.dtype != DType::f32) fail("initial weights need float32 parameters");
    }
    for (const auto& p : pieces) {
      const ParamEntry& e = params.entry(p.param);
      const std::vector<float>& values = tensors.at(e.spec.name).values;
      const SliceMap map(e);
      std::vector<float> w(static_cast<std::size_t>(p.count));
      for (std::int64_t j = 0; j < p.count; ++j) {
        const std::int64_t g = map(p.begin + j);
        w[j] = g < 0 ? 0.0f : values[g];
      }
      write_values(w.data(), p.weights);
    }
  }
  for (ShardedState* s : rank.states) s->refresh_weights();
}

}  // namespace kintsugi
