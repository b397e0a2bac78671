#include "kintsugi/model/config_json.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi {

nlohmann::json to_json(const ModelConfig& c) {
  nlohmann::json j = {{"name", c.name},         {"family", name_of(c.family)},
                      {"n_layer", c.n_layer},   {"d_model", c.d_model},
                      {"n_head", c.n_head},     {"d_ff", c.d_ff},
                      {"vocab_size", c.vocab_size}, {"seq_len", c.seq_len},
                      {"vocab_pad_multiple", c.vocab_pad_multiple},
                      {"norm_eps", c.norm_eps}, {"init_std", c.init_std},
                      {"n_kv_head", c.n_kv_head}, {"rope_theta", c.rope_theta}};
  // Only with a window: the files of models without one stay as they were.
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  return j;
}

ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& what) {
  ModelConfig c;
  try {
    c.name = j.at("name").get<std::string>();
    c.family = parse_name<Family>(j.at("family").get<std::string>(), what + ": model family");
    c.n_layer = j.at("n_layer").get<std::int64_t>();
    c.d_model = j.at("d_model").get<std::int64_t>();
    c.n_head = j.at("n_head").get<std::int64_t>();
    c.d_ff = j.at("d_ff").get<std::int64_t>();
    c.vocab_size = j.at("vocab_size").get<std::int64_t>();
    c.seq_len = j.at("seq_len").get<std::int64_t>();
    c.vocab_pad_multiple = j.at("vocab_pad_multiple").get<std::int64_t>();
    c.norm_eps = j.at("norm_eps").get<double>();
    c.init_std = j.at("init_std").get<double>();
    // Written since Llama (grouped-query attention, RoPE); absent from older GPT-2 checkpoints.
    c.n_kv_head = j.value("n_kv_head", std::int64_t{0});
    c.rope_theta = j.value("rope_theta", 10000.0);
    c.sliding_window = j.value("sliding_window", std::int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    fail("{}: model configuration is incomplete or mistyped ({})", what, e.what());
  }
  validate(c, {what, {}});  // a value the file holds: named as the file's, not the user's config

  return c;
}

}  // namespace kintsugi
