#pragma once
// Whether weights saved for one model configuration may be loaded into another: by a resumed
// run (--resume) and by a fine-tuning run (--init-from a kintsugi model/ or training
// checkpoint). Every field must agree except the preset's name, the vocabulary padding (stored
// tensors have none) and model.seq_len where the family allows it (docs/checkpoints.md
// "Changing the sequence length"):
//   llama (RoPE) and bloom (ALiBi): no weight depends on the context length, any seq_len loads;
//   gpt2 (learned positions): a shorter seq_len keeps the first rows of the position table; a
//   longer one has positions no weight was trained for, and is refused.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "kintsugi/model/config.hpp"

namespace kintsugi {

// The stored position table's name.
inline constexpr const char* kPositionTable = "embedding.position.weight";

// kintsugi::Error "<what> was saved from a different model (n_layer 4 (checkpoint) vs 2): <fix>"
// when `saved` (a manifest's "model") differs from `ours` in a field that must agree, or the
// reason when model.seq_len changes in a way the family does not allow.
void check_loadable_model(const nlohmann::json& saved, const ModelConfig& ours,
                          const std::string& what, const std::string& fix);

// Whether a stored tensor of shape `stored` may fill a parameter of shape `expected`: the same
// shape, or the position table with fewer rows (its first rows are kept: a prefix of the stored
// elements, row-major, whatever the layout).
bool loadable_shape(const std::string& name, const std::vector<std::int64_t>& stored,
                    const std::vector<std::int64_t>& expected);

}  // namespace kintsugi
