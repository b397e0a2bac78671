#include "kintsugi/checkpoint/model_checkpoint.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "kintsugi/checkpoint/checkpoint_format.hpp"
#include "kintsugi/checkpoint/model_manifest.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/model/config_json.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

using model_manifest::read_model_manifest;

// The data file the manifest names (read_model_manifest checked that it is a file of `dir`).
fs::path data_file(const fs::path& dir, const nlohmann::json& manifest) {
  return dir / manifest.value("data_file", "params.bin");
}

// The stored shape: the global tensor without vocabulary padding rows.
Shape stored_shape(const ParamEntry& e) {
  Shape s = e.spec.global_shape;
  if (e.spec.valid_rows >= 0) s.dims[0] = e.spec.valid_rows;
  return s;
}

std::vector<std::int64_t> to_vector(const Shape& s) {
  return {s.dims.begin(), s.dims.begin() + s.rank};
}

// The whole parameter i (shards gathered across the tensor-parallel group), as float32,
// without padding rows.
std::vector<float> stored_values(const ParamStore& params, int i, const TensorParallel& tp) {
  const ParamEntry& e = params.entry(i);
  // Mixed-precision models store their 16-bit working weights widened to f32.
  std::vector<float> local = read_values(params.param(i));
  std::vector<float> whole = local;
  const Shape& G = e.spec.global_shape;
  const std::int64_t n = stored_shape(e).numel();
  if (e.spec.split_dim < 0) {
    whole.resize(static_cast<std::size_t>(n));  // without padding rows
    return whole;
  }
  // Every rank's piece with where it starts (row, column), gathered as
  // [rank][row begin, column begin, piece...]: pieces are equal-sized boxes, and a piece that
  // several ranks hold (a 3D grid's replicas) is placed once per holder, with the same values.
  const auto piece = static_cast<std::int64_t>(local.size()), stride = piece + 2;
  const std::int64_t row_begin = e.spec.split_dim == 0 ? e.spec.split_begin : 0;
  const std::int64_t col_begin = e.spec.split_dim == 1   ? e.spec.split_begin
                                 : e.spec.cols_extent > 0 ? e.spec.cols_begin
                                                          : 0;
  // Offsets below 2^24 are exact in f32.
  KINTSUGI_ASSERT(row_begin < (1 << 24) && col_begin < (1 << 24));
  std::vector<float> mine(static_cast<std::size_t>(stride));
  mine[0] = static_cast<float>(row_begin);
  mine[1] = static_cast<float>(col_begin);
  std::copy(local.begin(), local.end(), mine.begin() + 2);
  std::vector<float> all = mine;
  if (tp.size() > 1) {
    all.resize(static_cast<std::size_t>(stride * tp.size()));
    tp.group()->all_gather(Tensor{mine.data(), DType::f32, Shape{stride}},
                           Tensor{all.data(), DType::f32, Shape{stride * tp.size()}});
  }
  const std::int64_t cols = G.rank == 2 ? G[1] : 1;
  const std::int64_t local_cols = e.local_shape.rank == 2 ? e.local_shape[1] : 1;
  std::vector<float> out(static_cast<std::size_t>(n));
  for (int r = 0; r < tp.size(); ++r) {
    const float* p = all.data() + r * stride;
    const auto r0 = static_cast<std::int64_t>(p[0]), c0 = static_cast<std::int64_t>(p[1]);
    for (std::int64_t k = 0; k < piece; ++k) {
      const std::int64_t g = (r0 + k / local_cols) * cols + c0 + k % local_cols;
      if (g < n) out[g] = p[2 + k];  // rows past n are vocabulary padding
    }
  }
  return out;
}

void write_file(const fs::path& path, const void* data, std::size_t bytes, std::FILE* f) {
  if (bytes && std::fwrite(data, 1, bytes, f) != bytes)
    fail("cannot write {}: disk full or not writable", path.string());
}

void sync_and_close(const fs::path& path, std::FILE* f) {
  if (std::fflush(f) != 0 || fsync(fileno(f)) != 0 || std::fclose(f) != 0)
    fail("cannot write {}: disk full or not writable", path.string());
}

}  // namespace

namespace {

// A whole tensor as stored: name, shape without padding, float32 values.
struct StoredTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// This rank's tensors of one chunk, gathered across the tensor-parallel group (every rank of
// the group takes part); tied copies are left out: their original is stored.
std::vector<StoredTensor> chunk_tensors(const ParamStore& params, const TensorParallel& tp) {
  std::vector<StoredTensor> out;
  for (int i = 0; i < params.size(); ++i) {
    const ParamEntry& e = params.entry(i);
    if (e.spec.tied_copy) continue;
    out.push_back({e.spec.name, to_vector(stored_shape(e)), stored_values(params, i, tp)});
  }
  return out;
}

// Pipeline stages other than the first send their chunks' tensors to it over the control plane
// (host memory): a header (names and shapes, as JSON) and the values. Each stage sends its
// chunks in ascending order, in which the first stage receives them.
void send_chunk(Communicator& pp, const std::vector<StoredTensor>& tensors) {
  nlohmann::json header = nlohmann::json::array();
  for (const auto& t : tensors) header.push_back({t.name, t.shape});
  std::string text = header.dump();
  const std::uint64_t length = text.size();
  pp.host_send(std::as_bytes(std::span(&length, 1)), 0);
  pp.host_send(std::as_bytes(std::span(text)), 0);
  for (const auto& t : tensors) pp.host_send(std::as_bytes(std::span(t.values)), 0);
}

std::vector<StoredTensor> receive_chunk(Communicator& pp, int from) {
  std::uint64_t length = 0;
  pp.host_recv(std::as_writable_bytes(std::span(&length, 1)), from);
  std::string text(static_cast<std::size_t>(length), '\0');
  pp.host_recv(std::as_writable_bytes(std::span(text)), from);
  std::vector<StoredTensor> out;
  for (const auto& h : nlohmann::json::parse(text)) {
    StoredTensor t{h[0].get<std::string>(), h[1].get<std::vector<std::int64_t>>(), {}};
    std::int64_t n = 1;
    for (auto d : t.shape) n *= d;
    t.values.resize(static_cast<std::size_t>(n));
    pp.host_recv(std::as_writable_bytes(std::span(t.values)), from);
    out.push_back(std::move(t));
  }
  return out;
}

void write_checkpoint(const fs::path& dir, const ModelConfig& config, std::int64_t step,
                      const std::vector<StoredTensor>& all, DType weights,
                      const nlohmann::json& tokenizer, const std::vector<float>& moe_router_bias) {
  const fs::path tmp = dir.string() + fmt::format(".tmp-{}", getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) fail("cannot create {}: {}", tmp.string(), ec.message());

  nlohmann::json tensors = nlohmann::json::array();
  XXH3_state_t* hash = XXH3_createState();
  XXH3_64bits_reset(hash);
  const fs::path data_path = tmp / "params.bin";
  std::FILE* f = std::fopen(data_path.c_str(), "wb");
  if (!f) fail("cannot create {}", data_path.string());
  std::uint64_t offset = 0;
  for (const StoredTensor& t : all) {
    const std::size_t bytes = t.values.size() * sizeof(float);
    write_file(data_path, t.values.data(), bytes, f);
    XXH3_64bits_update(hash, t.values.data(), bytes);
    tensors.push_back({{"name", t.name},
                       {"shape", t.shape},
                       {"dtype", "f32"},
                       {"offset", offset},
                       {"bytes", bytes}});
    offset += bytes;
  }
  sync_and_close(data_path, f);
  const std::uint64_t checksum = XXH3_64bits_digest(hash);
  XXH3_freeState(hash);

  nlohmann::json manifest = {{"format", model_manifest::kFormat},
                             {"version", model_manifest::kVersion},
                             {"step", step},
                             {"model", to_json(config)},
                             {"weights_dtype", std::string(name_of(weights))},
                             {"data_file", "params.bin"},
                             {"data_bytes", offset},
                             {"data_xxh3", fmt::format("{:016x}", checksum)},
                             {"tensors", tensors}};
  if (!tokenizer.is_null()) manifest["tokenizer"] = tokenizer;  // tokenizer_identity.hpp
  if (!moe_router_bias.empty())
    manifest["moe_router_bias"] =
        model_manifest::router_bias_to_json(moe_router_bias, config.moe.experts);
  manifest[checkpoint_format::kManifestChecksum] = checkpoint_format::manifest_checksum(manifest);
  const fs::path manifest_path = tmp / "manifest.json";
  const std::string text = manifest.dump(2) + "\n";
  f = std::fopen(manifest_path.c_str(), "wb");
  if (!f) fail("cannot create {}", manifest_path.string());
  write_file(manifest_path, text.data(), text.size(), f);
  sync_and_close(manifest_path, f);

  // Swap in the complete directory; the previous one is removed only afterwards.
  const fs::path old = dir.string() + fmt::format(".old-{}", getpid());
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(tmp, dir);
  fs::remove_all(old, ec);
}

}  // namespace

void save_model(const fs::path& dir, const ModelConfig& config,
                const std::vector<const ParamStore*>& chunks, std::int64_t step,
                const TensorParallel& tp, Communicator* pp, int virtual_stages,
                const nlohmann::json& tokenizer, std::optional<DType> weights_dtype,
                const std::vector<const ParamStore*>& experts, Communicator* ep,
                const std::vector<float>& moe_router_bias) {
  const int p = pp ? pp->size() : 1, r = pp ? pp->rank() : 0;
  // The type of the weights saved (docs/checkpoints.md "Which weights an export holds"): a
  // mixed-precision run's 16-bit working weights, widened to f32 exactly in params.bin.
  DType held = DType::f32;
  for (const ParamStore* c : chunks)
    if (c->size() > 0) held = c->param(0).dtype;
  const DType weights = weights_dtype                                 ? *weights_dtype
                        : held == DType::bf16 || held == DType::f16 ? held
                                                                     : DType::f32;
  std::vector<std::vector<StoredTensor>> local;
  for (const ParamStore* c : chunks) local.push_back(chunk_tensors(*c, tp));
  // Expert parallelism: each chunk's experts, from every ep rank in ep-rank order, join the
  // chunk's tensors on ep rank 0.
  if (ep && ep->size() > 1) {
    for (std::size_t i = 0; i < experts.size(); ++i) {
      std::vector<StoredTensor> mine = chunk_tensors(*experts[i], tp);
      if (ep->rank() != 0) {
        send_chunk(*ep, mine);
        continue;
      }
      for (auto& t : mine) local[i].push_back(std::move(t));
      for (int from = 1; from < ep->size(); ++from)
        for (auto& t : receive_chunk(*ep, from)) local[i].push_back(std::move(t));
    }
    if (ep->rank() != 0) return;
  } else {
    for (std::size_t i = 0; i < experts.size(); ++i)
      for (auto& t : chunk_tensors(*experts[i], tp)) local[i].push_back(std::move(t));
  }
  if (tp.rank() != 0) return;  // its shards went into tp rank 0's tensors
  if (r != 0) {
    for (const auto& chunk : local) send_chunk(*pp, chunk);
    return;
  }
  // Global chunk g lives on stage g % p as its local chunk g / p.
  std::vector<StoredTensor> all;
  for (int g = 0; g < p * virtual_stages; ++g) {
    auto part = g % p == 0 ? std::move(local[g / p]) : receive_chunk(*pp, g % p);
    for (auto& t : part) all.push_back(std::move(t));
  }
  write_checkpoint(dir, config, step, all, weights, tokenizer, moe_router_bias);
}

void save_model(const fs::path& dir, const ModelConfig& config, const ParamStore& params,
                std::int64_t step, const nlohmann::json& tokenizer,
                std::optional<DType> weights_dtype) {
  save_model(dir, config, std::vector<const ParamStore*>{&params}, step, TensorParallel{}, nullptr,
             1, tokenizer, weights_dtype);
}

ModelCheckpointInfo read_model_info(const fs::path& dir) {
  const auto j = read_model_manifest(dir);
  return {model_config_from_json(j.at("model"), (dir / "manifest.json").string()),
          j.value("step", std::int64_t{0}),
          data::identity_from_json(j, (dir / "manifest.json").string()),
          model_manifest::weights_dtype(j)};
}

namespace {

// Opens the data file after checking its size and checksum against the manifest.
std::ifstream verified_data(const fs::path& dir, const nlohmann::json& manifest,
                            const fs::path& data_path) {
  const std::uint64_t expected_bytes = manifest.value("data_bytes", std::uint64_t{0});
  std::error_code ec;
  const auto size = fs::file_size(data_path, ec);
  if (ec) fail("{}: {} is missing", dir.string(), data_path.string());
  if (size != expected_bytes)
    fail("{} is truncated or corrupt: {} bytes, manifest says {}", data_path.string(), size,
         expected_bytes);
  std::ifstream in(data_path, std::ios::binary);
  const std::string checksum = checkpoint_format::hex(checkpoint_format::stream_checksum(in));
  if (checksum != manifest.value("data_xxh3", ""))
    fail("{} is corrupt: checksum {} does not match the manifest's {}", data_path.string(),
         checksum, manifest.value("data_xxh3", ""));

  in.clear();
  return in;
}

}  // namespace

void load_model(const fs::path& dir, ParamStore& params) {
  const auto manifest = read_model_manifest(dir);
  const fs::path data_path = data_file(dir, manifest);
  const std::uint64_t expected_bytes = manifest.value("data_bytes", std::uint64_t{0});
  // First pass: verify the checksum, so a corrupt file never reaches the parameters.
  std::ifstream in = verified_data(dir, manifest, data_path);
  // Check that the tensors are exactly the model's before touching any parameter.
  const auto& tensors = manifest.at("tensors");
  if (static_cast<int>(tensors.size()) != params.size())
    fail("{} holds {} tensors but the model has {}: it is a different model", dir.string(),
         tensors.size(), params.size());
  std::vector<int> index;
  for (const auto& t : tensors) {
    const std::string name = t.at("name").get<std::string>();
    const int i = params.find(name);
    if (i < 0) fail("{}: tensor {} does not exist in this model", dir.string(), name);
    if (t.at("shape").get<std::vector<std::int64_t>>() != to_vector(stored_shape(params.entry(i))))
      fail("{}: tensor {} has shape {} but the model expects {}", dir.string(), name,
           t.at("shape").dump(), nlohmann::json(to_vector(stored_shape(params.entry(i)))).dump());
    if (t.at("offset").get<std::uint64_t>() + t.at("bytes").get<std::uint64_t>() > expected_bytes)
      fail("{}: tensor {} lies outside the data file", dir.string(), name);
    index.push_back(i);
  }

  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const int i = index[k];
    const Tensor t = params.param(i);
    const std::int64_t n = stored_shape(params.entry(i)).numel();  // elements stored
    std::vector<float> values(static_cast<std::size_t>(n));
    in.seekg(static_cast<std::streamoff>(tensors[k].at("offset").get<std::uint64_t>()));
    in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(n * sizeof(float)));
    if (!in) fail("cannot read {}", data_path.string());
    // Copy this rank's part: a shard of the rows or columns; padding rows are zero.
    const ParamEntry& entry = params.entry(i);
    const Shape& L = entry.local_shape;
    const std::int64_t cols = L.rank == 2 ? L[1] : 1, global_cols = entry.spec.global_shape.rank == 2
                                                                     ? entry.spec.global_shape[1]
                                                                     : 1;
    std::vector<float> local(static_cast<std::size_t>(t.numel()));
    for (std::int64_t e = 0; e < t.numel(); ++e) {
      std::int64_t r = e / cols, c = e % cols;
      if (entry.spec.split_dim == 0) r += entry.spec.split_begin;
      if (entry.spec.split_dim == 1) c += entry.spec.split_begin;
      if (entry.spec.cols_extent > 0) c += entry.spec.cols_begin;  // a 3D grid's weight block
      const std::int64_t g = r * global_cols + c;
      local[e] = g < n ? values[g] : 0.0f;
    }
    write_values(local.data(), t);
  }
}

std::map<std::string, NamedTensor> read_model_tensors(const fs::path& dir) {
  const auto manifest = read_model_manifest(dir);
  const fs::path data_path = data_file(dir, manifest);
  const std::uint64_t data_bytes = manifest.value("data_bytes", std::uint64_t{0});
  std::ifstream in = verified_data(dir, manifest, data_path);
  std::map<std::string, NamedTensor> out;
  for (const auto& t : manifest.at("tensors")) {
    NamedTensor nt{t.at("shape").get<std::vector<std::int64_t>>(), {}};
    std::int64_t n = 1;
    for (auto d : nt.shape) n *= d;
    const auto offset = t.at("offset").get<std::uint64_t>();
    if (offset + n * sizeof(float) > data_bytes)
      fail("{}: tensor {} lies outside the data file", dir.string(), t.at("name").get<std::string>());
    nt.values.resize(static_cast<std::size_t>(n));
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(reinterpret_cast<char*>(nt.values.data()), static_cast<std::streamsize>(n * sizeof(float)));
    if (!in) fail("cannot read {}", data_path.string());
    out[t.at("name").get<std::string>()] = std::move(nt);
  }
  return out;
}

}  // namespace kintsugi
