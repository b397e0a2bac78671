#pragma once
// Initial weights from Hugging Face safetensors, read rank by rank: a single .safetensors file,
// or a model folder as transformers' save_pretrained writes it (model.safetensors, or
// model.safetensors.index.json and the shards it names, model-0000K-of-0000N.safetensors).
//
// Opening reads and checks every header and the index (shards present, every tensor the index
// names in the shard it names, no tensor the index does not name, every tensor the model needs
// present with the shape the model expects), and reads no weights. `set` then maps the shards
// and reads only the elements of the pieces this rank holds (tensor- and pipeline-parallel
// slices, ZeRO-3 shards), so that no rank holds the whole model; the pages of a shard that no
// piece of the rank touches are never read (docs/checkpoints.md).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kintsugi/checkpoint/hf_layout.hpp"
#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

namespace data {
class MappedFile;
}

// The tensor names a model folder's weights hold and the file that lists them (its index, or
// model.safetensors' header), read without any weight; an empty list when the folder holds
// neither (HfWeights then says what it lacks). kintsugi::Error as HfWeights for a damaged index
// or header.
struct HfTensorList {
  std::filesystem::path file;
  std::vector<std::string> names;
};
HfTensorList hf_tensor_list(const std::filesystem::path& folder);

class HfWeights {
 public:
  // `path`: a .safetensors file or a model folder. `head_from_embedding`: a Llama folder with
  // tied embeddings (hf_config.hpp), whose head is read from the token embedding.
  // kintsugi::Error naming the file and the problem.
  HfWeights(const std::filesystem::path& path, const ModelConfig& config,
            bool head_from_embedding = false);

  // Sets this rank's weights (any layout); the optimizer state stays zero. Every element is read
  // and checked (finite) before any weight is written.
  void set(const RankState& rank) const;
  // The same for a whole model in one process (generate, import: every parameter's whole
  // tensor, vocabulary padding rows zero).
  void set(const ParamStore& params) const;
  // The type every tensor the model reads has (F32, BF16 or F16); f32 where they differ.
  DType dtype() const;

  const std::string& source() const { return source_; }
  // The shard files, in the order the index names them (one: a single file).
  const std::vector<std::filesystem::path>& files() const { return files_; }

 private:
  struct Located {
    int file = 0;
    SafetensorsEntry entry;
    std::string name;  // theirs, as in the file
  };
  // Our tensor -> the table's entries for it and where their data lies.
  struct Source {
    HfConversion conversion = HfConversion::none;
    std::vector<Located> parts;  // one, or q, k, v for a qkv part
  };

  // Elements begin..begin+count of parameter `e`'s local tensor, converted and checked finite;
  // `mapped`: the files, each mapped when a piece first needs it.
  std::vector<float> read_piece(const ParamEntry& e, std::int64_t begin, std::int64_t count,
                                std::vector<data::MappedFile>& mapped) const;

  ModelConfig config_;
  std::string source_;
  std::vector<std::filesystem::path> files_;
  std::map<std::string, Source> sources_;
};

}  // namespace kintsugi
