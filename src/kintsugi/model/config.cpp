#include "kintsugi/model/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

std::int64_t ModelConfig::padded_vocab(std::int64_t tp) const {
  const std::int64_t multiple = std::max<std::int64_t>(1, vocab_pad_multiple) * tp;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

void validate(const ModelConfig& c) {
  if (c.family != "gpt2")
    fail("model.family = \"{}\" is not supported yet: use \"gpt2\"", c.family);
  auto positive = [](const char* key, std::int64_t v) {
    if (v <= 0) fail("model.{} = {} must be positive", key, v);
  };
  positive("n_layer", c.n_layer);
  positive("d_model", c.d_model);
  positive("n_head", c.n_head);
  positive("d_ff", c.d_ff);
  positive("vocab_size", c.vocab_size);
  positive("seq_len", c.seq_len);
  positive("vocab_pad_multiple", c.vocab_pad_multiple);
  if (c.d_model % c.n_head != 0)
    fail("model.d_model = {} is not divisible by model.n_head = {}: change one so that "
         "d_model / n_head is a whole head size",
         c.d_model, c.n_head);
  if (c.vocab_size > (std::int64_t{1} << 31) - 1)
    fail("model.vocab_size = {} does not fit 32-bit token ids", c.vocab_size);
  if (!(c.norm_eps > 0)) fail("model.norm_eps = {} must be positive", c.norm_eps);
  if (!(c.init_std > 0)) fail("model.init_std = {} must be positive", c.init_std);
}

namespace {

ModelConfig gpt(const char* name, std::int64_t layers, std::int64_t d, std::int64_t heads,
                std::int64_t seq) {
  ModelConfig c;
  c.name = name;
  c.n_layer = layers;
  c.d_model = d;
  c.n_head = heads;
  c.d_ff = 4 * d;
  c.seq_len = seq;
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> table = [] {
    std::map<std::string, ModelConfig> t;
    for (const ModelConfig& c : {
             gpt("gpt-tiny", 4, 128, 4, 128),
             gpt("gpt2", 12, 768, 12, 1024),          // 124M
             gpt("gpt2-medium", 24, 1024, 16, 1024),  // 350M
             gpt("gpt2-large", 36, 1280, 20, 1024),   // 774M
             gpt("gpt2-xl", 48, 1600, 25, 1024),      // 1.5B
             // The Frontier study's sizes. Its 1.4B row lists hidden 2114 with 24 heads, which
             // does not divide; 2112 = 24 x 88 keeps the parameter count (1.4B).
             gpt("gpt-1.4b", 24, 2112, 24, 2048),
             gpt("gpt-22b", 48, 6144, 48, 2048),
             gpt("gpt-175b", 96, 12288, 96, 2048),
             gpt("gpt-1t", 128, 25600, 128, 2048),
         })
      t.emplace(c.name, c);
    return t;
  }();
  return table;
}

}  // namespace

ModelConfig model_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end())
    fail("unknown model preset \"{}\": choose one of {}", name,
         fmt::join(model_preset_names(), ", "));
  return it->second;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : presets()) names.push_back(name);
  return names;
}

}  // namespace kintsugi
