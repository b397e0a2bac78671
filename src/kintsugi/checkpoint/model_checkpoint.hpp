#pragma once
// A trained model on disk: a directory with manifest.json (format, model configuration, every
// tensor's name, global shape and byte range, the XXH3-64 checksum of the data, and its own
// checksum) and params.bin (the tensors back to back, float32, little-endian, without
// vocabulary padding). Tensors are stored whole, as in a serial run, so any layout can read them.
// The weights are the model's own: a mixed-precision run's bf16 or f16 working weights (widened
// to f32 exactly; the manifest's weights_dtype says which), not its f32 master weights, which
// training checkpoints hold.
//
// Writing goes to a temporary directory that replaces the target only when complete; reading
// checks the manifest (model_manifest.hpp: shapes and byte ranges against the model and the data
// file, its checksum), then the data's size and checksum, before anything reaches the model.
#include <cstdint>
#include <filesystem>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/data/tokenizer_identity.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/model/param_store.hpp"
#include "kintsugi/comm/tensor_parallel.hpp"

namespace kintsugi {

// One process holding the whole model. `tokenizer`: the identity of the tokenizer its ids came
// from (data::to_json; null: not known), kept in the manifest. `weights_dtype`: the type the f32
// parameters' values were widened from, exactly, when it is not their own (an import of a
// bf16 Hugging Face folder: `kintsugi import`), recorded as the manifest's weights_dtype.
void save_model(const std::filesystem::path& dir, const ModelConfig& config,
                const ParamStore& params, std::int64_t step,
                const nlohmann::json& tokenizer = nullptr,
                std::optional<DType> weights_dtype = std::nullopt);
// A model spread over ranks: every rank of one data-parallel replica calls this with its
// chunks (local chunk c is global chunk c x pp + stage). Tensor-parallel shards are gathered
// into whole tensors, pipeline stages send theirs to the first stage, and tensor-parallel rank
// 0 of the first stage writes the checkpoint.
void save_model(const std::filesystem::path& dir, const ModelConfig& config,
                const std::vector<const ParamStore*>& chunks, std::int64_t step,
                const TensorParallel& tp, Communicator* pp, int virtual_stages,
                const nlohmann::json& tokenizer = nullptr,
                std::optional<DType> weights_dtype = std::nullopt,
                const std::vector<const ParamStore*>& experts = {}, Communicator* ep = nullptr,
                const std::vector<float>& moe_router_bias = {});
// Expert parallelism (docs/moe.md): `experts` holds each local chunk's expert store, and the
// ep ranks of the replica call too: ep ranks other than 0 send their experts' tensors to ep
// rank 0 (which holds the replica's other parameters), which stores them with its chunk's.
// `moe_router_bias`: the balancing bias of a model routed with it (StageModel's table; empty:
// none), kept in the manifest (model_manifest.hpp, router_bias_to_json).

struct ModelCheckpointInfo {
  ModelConfig config;
  std::int64_t step = 0;
  data::TokenizerIdentity tokenizer;  // unknown for models saved before it was recorded
  DType weights_dtype = DType::f32;    // model_manifest.hpp weights_dtype
};
// Reads and checks the manifest only.
ModelCheckpointInfo read_model_info(const std::filesystem::path& dir);
// Verifies the data and loads every tensor into `params` (which must have the same model).
void load_model(const std::filesystem::path& dir, ParamStore& params);
// Verifies the data and returns every tensor whole (name -> stored shape and values): for export.
std::map<std::string, NamedTensor> read_model_tensors(const std::filesystem::path& dir);

}  // namespace kintsugi
