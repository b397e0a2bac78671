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
  // Written when set, so that the models saved before them compare equal (model_match.cpp).
  if (c.head_size > 0) j["head_dim"] = c.head_size;
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (c.tie_embeddings != TiedHead::family) j["tie_embeddings"] = name_of(c.tie_embeddings);
  if (c.is_moe())
    j["moe"] = {{"experts", c.moe.experts},
                {"top_k", c.moe.top_k},
                {"expert_hidden", c.moe.expert_hidden},
                {"shared_experts", c.moe.shared_experts},
                {"shared_hidden", c.moe.shared_hidden},
                {"router_norm_topk", c.moe.renormalize}};
  // Written only when set: a dropless model's record is as before the key existed.
  if (c.is_moe() && c.moe.capacity_factor != 0) j["moe"]["capacity_factor"] = c.moe.capacity_factor;
  // DeepSeek-style routing (docs/moe.md): written when not the default softmax top-k.
  if (c.is_moe()) {
    nlohmann::json& e = j["moe"];
    if (c.moe.score != RouterScore::softmax) e["router_score"] = name_of(c.moe.score);
    if (c.moe.routed_scaling != 1.0) e["routed_scaling_factor"] = c.moe.routed_scaling;
    if (c.moe.groups != 1) {
      e["router_groups"] = c.moe.groups;
      e["router_topk_groups"] = c.moe.topk_groups;
    }
    if (c.moe.bias_update_rate != 0) e["router_bias_update_rate"] = c.moe.bias_update_rate;
  }
  // Which blocks are MoE blocks: written when some are dense (an all-MoE record is as before).
  if (c.is_moe() && c.moe.first_dense != 0) j["moe"]["first_dense_layers"] = c.moe.first_dense;
  if (c.is_moe() && c.moe.layer_freq != 1) j["moe"]["layer_freq"] = c.moe.layer_freq;
  if (c.is_moe() && !c.moe.dense_layers.empty()) j["moe"]["dense_layers"] = c.moe.dense_layers;
  if (c.rope_scaling != RopeScaling::none)
    j["rope_scaling"] = {{"type", name_of(c.rope_scaling)},
                         {"factor", c.rope_factor},
                         {"low_freq_factor", c.rope_low_freq_factor},
                         {"high_freq_factor", c.rope_high_freq_factor},
                         {"original_context", c.rope_original_context},
                         {"beta_fast", c.rope_beta_fast},
                         {"beta_slow", c.rope_beta_slow},
                         {"attention_factor", c.rope_attention_factor}};
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
    c.head_size = j.value("head_dim", std::int64_t{0});
    c.sliding_window = j.value("sliding_window", std::int64_t{0});
    if (j.contains("tie_embeddings"))
      c.tie_embeddings = parse_name<TiedHead>(j.at("tie_embeddings").get<std::string>(),
                                              what + ": tie_embeddings");
    if (j.contains("moe")) {
      const nlohmann::json& e = j.at("moe");
      c.moe.experts = e.at("experts").get<std::int64_t>();
      c.moe.top_k = e.at("top_k").get<std::int64_t>();
      c.moe.expert_hidden = e.at("expert_hidden").get<std::int64_t>();
      c.moe.shared_experts = e.at("shared_experts").get<std::int64_t>();
      c.moe.shared_hidden = e.at("shared_hidden").get<std::int64_t>();
      c.moe.renormalize = e.at("router_norm_topk").get<bool>();
      c.moe.capacity_factor = e.value("capacity_factor", 0.0);
      if (e.contains("router_score"))
        c.moe.score = parse_name<RouterScore>(e.at("router_score").get<std::string>(),
                                              what + ": moe.router_score");
      c.moe.routed_scaling = e.value("routed_scaling_factor", 1.0);
      c.moe.groups = e.value("router_groups", std::int64_t{1});
      c.moe.topk_groups = e.value("router_topk_groups", std::int64_t{1});
      c.moe.bias_update_rate = e.value("router_bias_update_rate", 0.0);
      c.moe.first_dense = e.value("first_dense_layers", std::int64_t{0});
      c.moe.layer_freq = e.value("layer_freq", std::int64_t{1});
      c.moe.dense_layers = e.value("dense_layers", std::vector<std::int64_t>{});
    }
    if (j.contains("rope_scaling")) {
      const nlohmann::json& r = j.at("rope_scaling");
      c.rope_scaling = parse_name<RopeScaling>(r.at("type").get<std::string>(),
                                               what + ": rope_scaling");
      c.rope_factor = r.at("factor").get<double>();
      c.rope_low_freq_factor = r.at("low_freq_factor").get<double>();
      c.rope_high_freq_factor = r.at("high_freq_factor").get<double>();
      c.rope_original_context = r.at("original_context").get<std::int64_t>();
      c.rope_beta_fast = r.at("beta_fast").get<double>();
      c.rope_beta_slow = r.at("beta_slow").get<double>();
      c.rope_attention_factor = r.at("attention_factor").get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: model configuration is incomplete or mistyped ({})", what, e.what());
  }
  validate(c, {what, {}});  // a value the file holds: named as the file's, not the user's config

  return c;
}

}  // namespace kintsugi
