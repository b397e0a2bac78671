#include "kintsugi/checkpoint/train_checkpoint.hpp"

#include "kintsugi/checkpoint/model_manifest.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include "kintsugi/checkpoint/checkpoint_dir.hpp"
#include "kintsugi/checkpoint/checkpoint_format.hpp"
#include "kintsugi/checkpoint/model_match.hpp"
#include "kintsugi/checkpoint/slice_map.hpp"
#include "kintsugi/comm/launch.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/model/config_json.hpp"

namespace kintsugi {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_format;

namespace {

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail("cannot open {} to sync it", dir.string());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("cannot sync {}", dir.string());
}

// Every rank's string, on rank 0 (other ranks get an empty list).
std::vector<std::string> gather_to_root(Communicator* world, const std::string& mine) {
  if (!world) return {mine};
  return world->host_gather(mine, 0);
}

// The first value of a piece's weights (q 0) or moments (1, 2) that no run could resume from:
// not finite, or a negative second moment (AdamW's; Lion has only a first). Empty if none.
std::string unsound_value(const std::vector<std::byte>& bytes, int q, const std::string& tensor) {
  const std::size_t n = bytes.size() / sizeof(float);
  for (std::size_t k = 0; k < n; ++k) {
    float x;
    std::memcpy(&x, bytes.data() + k * sizeof(float), sizeof(float));
    if (std::isfinite(x) && (q < 2 || x >= 0)) continue;
    static const char* const kinds[] = {"weight", "first moment", "second moment"};
    return fmt::format("a {} of tensor {} is {}", kinds[q], tensor, x);
  }
  return "";
}

// This rank's shard: its pieces written to `path`; returns their description for the manifest.
// `unsound` gets the first value a resumed run could not continue from (empty: none).
json write_shard(const fs::path& path, const RankState& rank, std::string& unsound) {
  json pieces = json::array(), tensors = json::object();
  std::unique_ptr<data::AtomicFile> file;
  XXH3_state_t* hash = XXH3_createState();
  XXH3_64bits_reset(hash);
  std::uint64_t offset = 0;
  std::vector<std::byte> host;  // a piece's bytes (its device may not be the host)
  for (std::size_t c = 0; c < rank.states.size(); ++c) {
    if (!rank.states[c]->writes_state()) continue;  // a data-parallel replica writes it
    const ParamStore& params = *rank.params[c];
    for (const auto& p : rank.states[c]->state_pieces()) {
      const ParamSpec& spec = params.entry(p.param).spec;
      // The tied copy equals its original; a replicated tensor is the same on every tp rank, and
      // a 3D grid's duplicate the same as the piece its first holder writes.
      if (spec.tied_copy || spec.duplicate || (spec.split_dim < 0 && rank.tp_rank != 0)) continue;
      const int values = 1 + rank.states[c]->optimizer().moments();
      for (int q = 0; q < values; ++q) {
        const Tensor* t = q == 0 ? &p.weights : q == 1 ? &p.m : &p.v;
        if (t->dtype != DType::f32)
          fail("checkpoints hold float32 training state, not {} ({})", name_of(t->dtype), spec.name);
        if (!file) file = std::make_unique<data::AtomicFile>(path);
        host.resize(t->bytes());
        copy_to_host(*t, host.data());
        if (unsound.empty()) unsound = unsound_value(host, q, spec.name);
        file->write(host.data(), host.size());
        XXH3_64bits_update(hash, host.data(), host.size());
      }
      pieces.push_back({{"tensor", spec.name},
                        {"slice_shape", dims_of(params.entry(p.param).local_shape)},
                        {"split_dim", spec.split_dim},
                        {"split_begin", spec.split_dim >= 0 ? spec.split_begin : 0},
                        {"cols_begin", spec.cols_extent > 0 ? spec.cols_begin : 0},
                        {"begin", p.begin},
                        {"count", p.count},
                        {"offset", offset}});
      tensors[spec.name] = {{"shape", stored_shape(spec)}};
      offset += static_cast<std::uint64_t>(p.count) * values * sizeof(float);
    }
  }
  const std::uint64_t checksum = XXH3_64bits_digest(hash);
  XXH3_freeState(hash);
  if (!file) return json::object();
  file->commit();
  return {{"file", path.filename().string()},
          {"bytes", offset},
          {"xxh3", hex(checksum)},
          {"pieces", pieces},
          {"tensors", tensors}};
}

class TensorAssembler {
 public:
  explicit TensorAssembler(const CheckpointInfo& info) : info_(info) {
    const json& pieces = info.manifest.at("pieces");
    for (std::size_t k = 0; k < pieces.size(); ++k)
      by_tensor_[pieces[k].at("tensor").get<std::string>()].push_back(k);
  }

  // values[0..]: weights and the optimizer's moments of the stored tensor (moments only when
  // `moments`): AdamW's first and second, or Lion's one.
  void read(const std::string& name, bool moments, std::array<std::vector<float>, 3>& values) {
    const int stored_values = values_per_element(info_.manifest);
    const json& entry = info_.manifest.at("tensors").at(name);
    const auto stored = entry.at("shape").get<std::vector<std::int64_t>>();
    const std::size_t n = static_cast<std::size_t>(numel_of(stored));
    for (int q = 0; q < (moments ? stored_values : 1); ++q) values[q].assign(n, 0.0f);
    std::vector<float> buffer;
    for (std::size_t k : by_tensor_.at(name)) {
      const json& piece = info_.manifest.at("pieces")[k];
      const std::int64_t count = piece.at("count").get<std::int64_t>();
      const std::int64_t begin = piece.at("begin").get<std::int64_t>();
      buffer.resize(static_cast<std::size_t>(count) * values_per_element(info_.manifest));
      std::ifstream& in = stream(piece.at("file").get<std::size_t>());
      in.seekg(piece.at("offset").get<std::streamoff>());
      in.read(reinterpret_cast<char*>(buffer.data()),
              static_cast<std::streamsize>(buffer.size() * sizeof(float)));
      if (!in) fail("cannot read the data of {} from {}", name, info_.dir.string());
      const SliceMap map(piece.at("slice_shape").get<std::vector<std::int64_t>>(),
                         piece.at("split_dim").get<int>(), piece.at("split_begin").get<std::int64_t>(),
                         stored, piece.value("cols_begin", std::int64_t{0}));
      for (std::int64_t j = 0; j < count; ++j) {
        const std::int64_t g = map(begin + j);
        if (g < 0) continue;
        for (int q = 0; q < (moments ? stored_values : 1); ++q)
          values[q][g] = buffer[q * count + j];
      }
    }
  }

 private:
  std::ifstream& stream(std::size_t file) {
    auto& s = streams_[file];
    if (!s) {
      const fs::path path = info_.dir / info_.manifest.at("files")[file].at("name").get<std::string>();
      s = std::make_unique<std::ifstream>(path, std::ios::binary);
      if (!*s) fail("cannot read {}", path.string());
    }
    return *s;
  }

  const CheckpointInfo& info_;
  std::map<std::string, std::vector<std::size_t>> by_tensor_;
  std::map<std::size_t, std::unique_ptr<std::ifstream>> streams_;
};

}  // namespace

fs::path save_train_checkpoint(const fs::path& root, const ModelConfig& model, const json& layout,
                               const TrainProgress& progress, const RankState& rank,
                               std::int64_t keep, const json& tokenizer,
                               const std::optional<RankStep>& die_in_save) {
  const int me = rank.world ? rank.world->rank() : 0;
  const fs::path final_dir = checkpoint_path(root, progress.step);
  const fs::path tmp = partial_path(final_dir);
  if (me == 0) {
    std::error_code ec;
    fs::create_directories(root, ec);
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) fail("cannot create {}: {}", tmp.string(), ec.message());
  }
  if (rank.world) rank.world->barrier();  // the directory exists for everyone

  std::string unsound;
  const json shard = write_shard(tmp / fmt::format("rank-{:05d}.bin", me), rank, unsound);
  if (die_in_save && die_in_save->rank == me && die_in_save->step == progress.step)
    std::raise(SIGKILL);  // the fault tests: a rank dying mid-save
  // A state no run could resume from is not published: `latest` keeps naming the last sound one.
  if (!unsound.empty()) {
    std::optional<fs::path> last;
    try {
      last = newest_checkpoint(root);
    } catch (const Error&) {  // a damaged `latest`: the resume that reads it names it
    }
    unsound = fmt::format("the training state of step {} is not sound ({}): the run diverged and "
                          "step {} was not saved; {}: lower train.lr or raise train.warmup_steps",
                          progress.step, unsound, progress.step,
                          last ? "resume from " + last->string() : "no checkpoint was saved");
  }
  agree_on_error(rank.world, unsound);
  const auto shards = gather_to_root(rank.world, shard.dump());
  if (me == 0) {
    json files = json::array(), pieces = json::array(), tensors = json::object();
    for (const std::string& text : shards) {
      const json s = json::parse(text);
      if (s.empty()) continue;  // a rank that owns no state of its own
      for (json piece : s.at("pieces")) {
        piece["file"] = files.size();
        pieces.push_back(std::move(piece));
      }
      for (const auto& [name, t] : s.at("tensors").items()) tensors[name] = t;
      files.push_back({{"name", s.at("file")}, {"bytes", s.at("bytes")}, {"xxh3", s.at("xxh3")}});
    }
    json manifest = {
        {"format", checkpoint_format::kFormat},
        {"version", checkpoint_format::kVersion},
        {"step", progress.step},
        {"optimizer", std::string(name_of(rank.states.empty()
                                              ? OptimizerKind::adamw
                                              : rank.states.front()->optimizer().kind()))},
        {"optimizer_steps", progress.optimizer_steps},
        {"tokens_seen", progress.tokens_seen},
        {"loss_scaler",
         {{"scale", progress.loss_scaler.scale},
          {"clean_steps", progress.loss_scaler.clean},
          {"skipped_steps", progress.loss_scaler.skipped}}},
        {"data", {{"seed", progress.seed}, {"position", "the batch of step s is drawn from (seed, s)"}}},
        {"model", to_json(model)},
        {"layout", layout},
        {"tensors", tensors},
        {"files", files},
        {"pieces", pieces}};
    if (!tokenizer.is_null()) manifest["tokenizer"] = tokenizer;  // tokenizer_identity.hpp
    if (!progress.moe_router_bias.empty())
      manifest["moe_router_bias"] =
          model_manifest::router_bias_to_json(progress.moe_router_bias, model.moe.experts);
    manifest[kManifestChecksum] = manifest_checksum(manifest);
    data::AtomicFile out(tmp / "manifest.json");
    out.write(manifest.dump(1) + "\n");
    out.commit();
    fsync_dir(tmp);
    // Swap in the complete directory (a re-save of the same step replaces the old one).
    std::error_code ec;
    const fs::path old = final_dir.string() + ".replaced";
    fs::remove_all(old, ec);
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old, ec);
    fsync_dir(root);
    update_latest(root, final_dir);
    prune_checkpoints(root, keep, final_dir);
  }
  if (rank.world) rank.world->barrier();  // complete before anyone goes on
  return final_dir;
}

void load_train_checkpoint(const CheckpointInfo& info, const RankState& rank) {
  const json& tensors = info.manifest.at("tensors");
  // The moments are the optimizer's own: a run resumes with the optimizer that saved them.
  const std::string saved = manifest_optimizer(info.manifest);
  for (const ShardedState* s : rank.states)
    if (name_of(s->optimizer().kind()) != saved)
      fail("{} holds {} optimizer state, but this run uses train.optimizer = \"{}\": resume "
           "with train.optimizer = \"{}\"",
           info.dir.string(), saved, name_of(s->optimizer().kind()), saved);
  // Everything this rank needs must be there, in the right shape, before any value changes.
  std::vector<std::vector<ShardedState::StatePiece>> pieces;
  for (std::size_t c = 0; c < rank.states.size(); ++c) {
    pieces.push_back(rank.states[c]->state_pieces());
    for (const auto& p : pieces.back()) {
      const ParamSpec& spec = rank.params[c]->entry(p.param).spec;
      if (!tensors.contains(spec.name))
        fail("{} has no tensor {}: it is a different model", info.dir.string(), spec.name);
      const auto stored = tensors.at(spec.name).at("shape").get<std::vector<std::int64_t>>();
      // A shorter context keeps the first rows of a learned position table (model_match.hpp).
      if (!loadable_shape(spec.name, stored, stored_shape(spec)))
        fail("{}: tensor {} has shape {} but the model expects {}", info.dir.string(), spec.name,
             json(stored).dump(), json(stored_shape(spec)).dump());
      for (const Tensor* t : {&p.weights, &p.m, &p.v})
        if (!t->empty() && t->dtype != DType::f32)
          fail("checkpoints hold float32 training state, not {} ({})", name_of(t->dtype), spec.name);
    }
  }
  TensorAssembler assembler(info);
  std::array<std::vector<float>, 3> values;
  std::string loaded;
  for (std::size_t c = 0; c < rank.states.size(); ++c) {
    const ParamStore& params = *rank.params[c];
    for (const auto& p : pieces[c]) {
      const ParamEntry& e = params.entry(p.param);
      if (e.spec.name != loaded) {
        assembler.read(e.spec.name, true, values);
        loaded = e.spec.name;
      }
      const SliceMap map(e);
      const Tensor* dst[3] = {&p.weights, &p.m, &p.v};
      std::vector<float> piece(static_cast<std::size_t>(p.count));
      for (int q = 0; q < values_per_element(saved); ++q) {
        for (std::int64_t j = 0; j < p.count; ++j) {
          const std::int64_t g = map(p.begin + j);
          piece[j] = g < 0 ? 0.0f : values[q][g];
        }
        write_values(piece.data(), *dst[q]);
      }
    }
  }
  for (ShardedState* s : rank.states) {
    s->optimizer().set_steps_taken(info.progress.optimizer_steps);
    s->refresh_weights();
  }
}

std::vector<float> read_checkpoint_tensor(const CheckpointInfo& info, const std::string& name,
                                          std::vector<std::int64_t>* shape) {
  if (!info.manifest.at("tensors").contains(name))
    fail("{} has no tensor {}", info.dir.string(), name);
  TensorAssembler assembler(info);
  std::array<std::vector<float>, 3> values;
  assembler.read(name, false, values);
  if (shape) *shape = info.manifest.at("tensors").at(name).at("shape").get<std::vector<std::int64_t>>();
  return std::move(values[0]);
}

}  // namespace kintsugi
