#pragma once
// A trained model on disk: a directory with manifest.json (format, model configuration, every
// tensor's name, global shape and byte range, and the XXH3-64 checksum of the data) and
// params.bin (the tensors back to back, float32, little-endian, without vocabulary padding).
// Tensors are stored whole, as in a serial run, so any layout can read them.
//
// Writing goes to a temporary directory that replaces the target only when complete; reading
// checks format, sizes and checksum before anything reaches the model.
#include <cstdint>
#include <filesystem>

#include "kintsugi/model/config.hpp"
#include "kintsugi/model/param_store.hpp"
#include "kintsugi/parallel/tensor_parallel.hpp"

namespace kintsugi {

// Every rank of the tensor-parallel group calls this: shards are gathered into whole tensors,
// and the rank with `write` writes them.
void save_model(const std::filesystem::path& dir, const ModelConfig& config,
                const ParamStore& params, std::int64_t step, const TensorParallel& tp = {},
                bool write = true);

struct ModelCheckpointInfo {
  ModelConfig config;
  std::int64_t step = 0;
};
// Reads and checks the manifest only.
ModelCheckpointInfo read_model_info(const std::filesystem::path& dir);
// Verifies the data and loads every tensor into `params` (which must have the same model).
void load_model(const std::filesystem::path& dir, ParamStore& params);

}  // namespace kintsugi
