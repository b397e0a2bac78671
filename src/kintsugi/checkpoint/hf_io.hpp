#pragma once
// Export to and import from Hugging Face's safetensors + config.json (hf_layout.hpp has the
// per-family name and layout tables).
#include <filesystem>
#include <map>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/core/dtype.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

namespace data {
class Tokenizer;
}

// What an export wrote and from what (docs/checkpoints.md "Which weights an export holds").
struct HfExport {
  ModelConfig config;
  DType dtype = DType::f32;         // of the tensors written (config.json's torch_dtype)
  bool saved_model = false;         // read from a saved model (model/), else a training checkpoint
  DType source_dtype = DType::f32;  // of the weights read: model/'s weights_dtype; f32 masters
  std::string run_precision;        // the precision of the run that wrote a training checkpoint
  std::int64_t step = 0;
  std::int64_t elements = 0, rounded = 0;  // values written, and those rounding changed
  bool tokenizer = false;  // the tokenizer's files were written too
  // Files an earlier export left in the folder: written over, and removed because a loader
  // would read them instead of the new ones or beside them (stale shards, an index, the single
  // file, another tokenizer's files).
  std::vector<std::filesystem::path> replaced, removed;
};

// Writes the weights of a checkpoint (a training checkpoint step-N, or the model/ directory
// a run saves) to `out` (.safetensors) with Hugging Face names and layout, and config.json
// next to it, as `dtype` (default: the type of the weights read, so nothing is rounded: a
// saved model's weights_dtype, the f32 master weights of a training checkpoint). A narrower
// type rounds to nearest even, as a mixed-precision run rounds its working weights from its
// master weights; a value that would not stay finite is refused. With `max_shard_bytes` > 0
// and more bytes than that, the sharded layout instead (write_hf_weights). With a `tokenizer`,
// its files go next to them (tokenizer_config.json's model_max_length: the model's seq_len)
// and config.json gets its bos_token_id (where it has one) and eos_token_id.
//
// As transformers' save_pretrained, an earlier export in the same folder is written over and
// what of it a loader would still read is removed (HfExport::replaced and removed say which).
// Everything is checked before the first file is touched; config.json goes last, after the
// earlier one was removed first, so that an export cut short (a full disk) leaves a folder that
// no loader takes for a model.
HfExport export_hf(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
                   std::uint64_t max_shard_bytes = 0, std::optional<DType> dtype = std::nullopt,
                   const data::Tokenizer* tokenizer = nullptr);

// One line for the log: what the files hold and where it came from, e.g. "bf16 tensors
// (torch_dtype bfloat16): the bf16 working weights of the saved model runs/x/model (step 40),
// exactly".
std::string describe_export(const HfExport& e, const std::filesystem::path& checkpoint);

// config.json's torch_dtype for the tensors' type ("float32", "bfloat16", "float16").
std::string torch_dtype_name(DType dtype);

// Writes `tensors` as `out` (one file), or, when `max_shard_bytes` > 0 and they hold more bytes
// than that, as transformers' save_pretrained shards them: model-0000K-of-0000N.safetensors of
// at most that many bytes each (a larger tensor alone), tensors kept in `order`, and
// model.safetensors.index.json naming each tensor's shard, written last (an earlier index is
// removed first). Those are the only names from_pretrained looks for, so sharded weights need
// `out` to be model.safetensors: another name is refused before anything is written. Files of
// an earlier export to the same place that a loader would read instead (the single file, an
// index, shards of the same stem) are removed. `dtype`: as write_safetensors. Returns the files
// written and those removed.
struct WrittenFiles {
  std::vector<std::filesystem::path> written, removed;
};
WrittenFiles write_hf_weights(const std::filesystem::path& out,
                              const std::map<std::string, NamedTensor>& tensors,
                              const std::vector<std::string>& order, std::uint64_t max_shard_bytes,
                              DType dtype = DType::f32);

// Sets this rank's weights (any layout) from whole tensors, after checking every shape; the
// optimizer state stays zero. `source` names the tensors' file in messages.
void set_weights(const std::map<std::string, NamedTensor>& tensors, const RankState& rank,
                 const std::string& source);

}  // namespace kintsugi
