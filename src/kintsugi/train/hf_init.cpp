#include "kintsugi/train/hf_init.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>

#include "kintsugi/checkpoint/hf_layout.hpp"
#include "kintsugi/checkpoint/hf_weights.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/json_file.hpp"
#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

// Our model keys the folder decides, and how to read each as text.
const std::vector<std::pair<std::string, std::function<std::string(const ModelConfig&)>>>&
shape_keys() {
  static const std::vector<std::pair<std::string, std::function<std::string(const ModelConfig&)>>>
      keys = {
          {"model.family", [](const ModelConfig& m) { return std::string(name_of(m.family)); }},
          {"model.n_layer", [](const ModelConfig& m) { return fmt::format("{}", m.n_layer); }},
          {"model.d_model", [](const ModelConfig& m) { return fmt::format("{}", m.d_model); }},
          {"model.n_head", [](const ModelConfig& m) { return fmt::format("{}", m.n_head); }},
          {"model.n_kv_head", [](const ModelConfig& m) { return fmt::format("{}", m.kv_heads()); }},
          {"model.d_ff", [](const ModelConfig& m) { return fmt::format("{}", m.d_ff); }},
          {"model.vocab_size", [](const ModelConfig& m) { return fmt::format("{}", m.vocab_size); }},
          {"model.norm_eps", [](const ModelConfig& m) { return fmt::format("{}", m.norm_eps); }},
          {"model.rope_theta", [](const ModelConfig& m) { return fmt::format("{}", m.rope_theta); }},
          {"model.head_dim", [](const ModelConfig& m) { return fmt::format("{}", m.head_dim()); }},
          {"model.sliding_window",
           [](const ModelConfig& m) { return fmt::format("{}", m.sliding_window); }},
          {"model.moe_experts", [](const ModelConfig& m) { return fmt::format("{}", m.moe.experts); }},
          {"model.moe_top_k",
           [](const ModelConfig& m) { return m.is_moe() ? fmt::format("{}", m.moe.top_k) : ""; }},
          {"model.moe_expert_hidden",
           [](const ModelConfig& m) { return m.is_moe() ? fmt::format("{}", m.expert_hidden()) : ""; }},
          {"model.moe_shared_hidden",
           [](const ModelConfig& m) { return fmt::format("{}", m.shared_hidden()); }},
          {"model.moe_router_norm_topk",
           [](const ModelConfig& m) { return m.is_moe() ? fmt::format("{}", m.moe.renormalize) : ""; }},
          {"model.moe_first_dense_layers",
           [](const ModelConfig& m) { return m.is_moe() ? fmt::format("{}", m.moe.first_dense) : ""; }},
          {"model.moe_layer_freq",
           [](const ModelConfig& m) { return m.is_moe() ? fmt::format("{}", m.moe.layer_freq) : ""; }},
          {"model.moe_dense_layers",
           [](const ModelConfig& m) {
             return m.is_moe() ? fmt::format("[{}]", fmt::join(m.moe.dense_layers, ", ")) : "";
           }},
      };
  return keys;
}

}  // namespace

HfModel adopt_hf_folder(RunConfig& config, const fs::path& folder,
                        const std::set<std::string>& given, std::vector<std::string>& notes,
                        const std::string& seq_len_flag) {
  const fs::path json_path = folder / "config.json";
  const nlohmann::json j = read_json_file(
      json_path,
      "--init-from {} is a folder without config.json: a Hugging Face model folder has one (or "
      "pass the .safetensors file itself, with the model's shape in the run's config)",
      folder.string());
  HfModel hf = model_from_hf_config(j, json_path.string());
  ModelConfig& m = hf.model;
  // config.json's blocks against the weights' own, before anything is built per block.
  if (const HfTensorList weights = hf_tensor_list(folder); !weights.names.empty()) {
    const std::int64_t blocks = hf_block_count(weights.names);
    if (blocks != m.n_layer)
      fail("{} gives {} = {} but {} holds the tensors of {} block{}: the folder's config and "
           "weights disagree",
           json_path.string(), hf.field_of("model.n_layer"), m.n_layer, weights.file.string(),
           blocks, blocks == 1 ? "" : "s");
  }

  const ModelConfig& user = config.model;
  for (const auto& [key, text] : shape_keys()) {
    if (!given.count(key) || text(user) == text(m)) continue;
    // Keys a family does not use (rope_theta of GPT-2) do not contradict anything.
    if (key == "model.rope_theta" && !m.uses_rope()) continue;
    fail("{} = {} contradicts {} ({} gives {}): remove {} from the run's config (the folder "
         "gives the model's shape)",
         key, text(user), json_path.string(), hf.field_of(key), text(m), key);
  }
  if (given.count("model.seq_len")) {
    if (m.learned_positions() && user.seq_len > hf.max_positions)
      fail("model.seq_len = {} is longer than {}'s position table ({} = {})", user.seq_len,
           json_path.string(), hf.field_of("model.seq_len"), hf.max_positions);
    m.seq_len = user.seq_len;
  } else {
    // Said for train and eval alike: the windows either runs on, and the flag that changes them.
    const std::string from =
        hf.max_positions > 0
            ? fmt::format("from {} ({})", json_path.string(), hf.field_of("model.seq_len"))
            : fmt::format("by default ({} has no {}: ALiBi has no position limit)",
                          json_path.string(), hf.field_of("model.seq_len"));
    notes.push_back(fmt::format(
        "model.seq_len = {} {}: windows of {} tokens{}", m.seq_len, from, m.seq_len,
        seq_len_flag.empty()
            ? ""
            : fmt::format("; {} for windows of N{}", seq_len_flag,
                          m.learned_positions()
                              ? fmt::format(" (at most {}, the position table's rows)", m.seq_len)
                              : "")));
  }
  // RoPE scaling is the user's to change (a longer context than the folder's): the keys given
  // replace the folder's.
  {
    std::vector<std::string> changed;
    for (const char* key : {"model.rope_scaling", "model.rope_factor", "model.rope_low_freq_factor",
                            "model.rope_high_freq_factor", "model.rope_original_context",
                            "model.rope_beta_fast", "model.rope_beta_slow",
                            "model.rope_attention_factor"})
      if (given.count(key)) changed.push_back(key);
    if (!changed.empty()) {
      m.rope_scaling = user.rope_scaling;
      m.rope_factor = user.rope_factor;
      m.rope_low_freq_factor = user.rope_low_freq_factor;
      m.rope_high_freq_factor = user.rope_high_freq_factor;
      m.rope_original_context = user.rope_original_context;
      m.rope_beta_fast = user.rope_beta_fast;
      m.rope_beta_slow = user.rope_beta_slow;
      m.rope_attention_factor = user.rope_attention_factor;
      notes.push_back(fmt::format("{} given: RoPE scaling is the run's, not {}'s",
                                  fmt::join(changed, ", "), json_path.string()));
    }
  }
  // A tied folder may train an untied head, which starts as the embedding's copy; the converse
  // would drop the folder's head.
  if (given.count("model.tie_embeddings") && user.tied_embeddings() != m.tied_embeddings()) {
    if (user.tied_embeddings())
      fail("model.tie_embeddings = \"tied\" contradicts {} (tie_word_embeddings = false: it has "
           "its own lm_head): remove model.tie_embeddings from the run's config",
           json_path.string());
    m.tie_embeddings = TiedHead::untied;
    hf.head_from_embedding = true;
    notes.push_back(fmt::format(
        "note: {} ties the LM head to the token embedding; model.tie_embeddings = \"untied\" "
        "gives the run its own head, which starts as a copy of the embedding",
        json_path.string()));
  }
  m.vocab_pad_multiple = user.vocab_pad_multiple;
  if (given.count("model.init_std")) m.init_std = user.init_std;
  m.name = folder.filename().empty() ? folder.parent_path().filename().string()
                                     : folder.filename().string();
  config.model = m;

  // The folder's tokenizer, unless the user names one.
  if (!given.count("data.tokenizer")) {
    if (data::has_tokenizer_files(folder)) {
      config.data.tokenizer = folder.string();
    } else {
      data::refuse_sentencepiece_only(folder, ", or set data.tokenizer");
      fail("{} holds no tokenizer (tokenizer.json): set data.tokenizer to the model's tokenizer",
           folder.string());
    }
  } else if (std::error_code ec; data::has_tokenizer_files(folder) &&
                                  !fs::equivalent(config.data.tokenizer, folder, ec)) {
    // (A resume's saved configuration names the folder's own tokenizer: nothing to say.)
    notes.push_back(fmt::format("data.tokenizer = {} is given: the tokenizer of {} is not used",
                                config.data.tokenizer, folder.string()));
  }
  validate(config);
  for (std::string& note : hf.notes) notes.push_back(std::move(note));
  return hf;
}

HfFolder open_hf_folder(const fs::path& folder, const std::string& flag,
                        const std::string& tokenizer) {
  std::error_code ec;
  if (!fs::exists(folder, ec))
    fail("{} {} does not exist: give a Hugging Face model folder (config.json, model.safetensors "
         "or its index, tokenizer.json)",
         flag, folder.string());
  if (!fs::is_directory(folder, ec))
    fail("{} {} is a file: give the Hugging Face model folder that holds it (its config.json "
         "gives the model's shape)",
         flag, folder.string());
  if (tokenizer.empty() && !data::has_tokenizer_files(folder))
    fail("{} holds no tokenizer.json{}: give the model's tokenizer with --tokenizer",
         folder.string(),
         fs::exists(folder / "tokenizer.model")
             ? " (only tokenizer.model, SentencePiece, which kintsugi does not read)"
             : "");
  std::vector<std::string> overrides;
  if (!tokenizer.empty()) overrides.push_back(fmt::format("data.tokenizer={}", nlohmann::json(tokenizer).dump()));
  HfFolder f;
  f.config = load_run_config("", overrides);
  f.hf = adopt_hf_folder(f.config, folder, given_keys("", overrides), f.notes, "");
  f.weights = std::make_shared<const HfWeights>(folder, f.config.model, f.hf.head_from_embedding);
  return f;
}

}  // namespace kintsugi
