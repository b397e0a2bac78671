// `kintsugi generate`: sample text from a trained model or a Hugging Face model folder.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "kintsugi/checkpoint/model_manifest.hpp"
#include "kintsugi/checkpoint/kintsugi_weights.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/checkpoint/slice_map.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/core/rng.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/data/text_stream.hpp"
#include "kintsugi/data/token_source.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/data/tokenizer_identity.hpp"
#include "kintsugi/model/config_json.hpp"
#include "kintsugi/model/gpt.hpp"
#include "kintsugi/train/hf_init.hpp"

namespace kintsugi::cli {

namespace {

namespace fs = std::filesystem;

// Samples from softmax(logits / temperature) restricted to the top_k largest (0: all);
// temperature 0 is greedy.
std::int32_t sample_token(std::vector<float>& logits, double temperature, int top_k,
                          double uniform) {
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const std::size_t k =
      top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(top_k), order.size()) : order.size();
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  if (temperature <= 0) return order[0];
  std::vector<double> p(k);
  double sum = 0;
  for (std::size_t i = 0; i < k; ++i)
    sum += p[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
  double target = uniform * sum;
  for (std::size_t i = 0; i < k; ++i) {
    target -= p[i];
    if (target <= 0) return order[i];
  }
  return order[k - 1];
}

// Either kind of checkpoint: a saved model (<out>/model) or a training checkpoint
// (<out>/checkpoints/step-N), whose whole tensors are assembled from its pieces; or a Hugging
// Face model folder (--init-from), opened as train --init-from opens one (train/hf_init.hpp).
struct Checkpoint {
  ModelConfig config;
  bool saved_model = false;
  data::TokenizerIdentity tokenizer;  // as the manifest records it (may be unknown)
  std::string path;                   // --checkpoint's or --init-from's
  std::shared_ptr<const HfWeights> hf;  // a Hugging Face folder's weights
  std::vector<std::string> notes;       // what opening the folder has to say
  std::vector<float> router_bias;       // a DeepSeek-style model's balancing bias (docs/moe.md)
};

Checkpoint read_checkpoint_kind(const fs::path& dir) {
  std::error_code error;
  if (!fs::exists(dir, error))
    fail("--checkpoint {} does not exist: give <out>/model or <out>/checkpoints/step-N",
         dir.string());
  if (!fs::is_directory(dir, error))
    fail("--checkpoint {} is a file, not a checkpoint directory: give the directory that holds "
         "manifest.json (<out>/model or <out>/checkpoints/step-N)",
         dir.string());
  std::ifstream in(dir / "manifest.json");
  if (!in)
    fail("{} is not a kintsugi model checkpoint (no manifest.json): give <out>/model or "
         "<out>/checkpoints/step-N",
         dir.string());
  const auto manifest = nlohmann::json::parse(in, nullptr, false);
  if (manifest.is_discarded() || !manifest.contains("model"))
    fail("{}/manifest.json is corrupt: it names no model", dir.string());
  const std::string where = (dir / "manifest.json").string();
  const ModelConfig config = model_config_from_json(manifest.at("model"), where);
  std::vector<float> bias = model_manifest::router_bias_from_json(manifest, where);
  model_manifest::require_router_bias(manifest, bias, where, "generate");
  return {config, manifest.value("format", "") == "kintsugi-model",
          data::identity_from_json(manifest, where), dir.string(), nullptr, {}, std::move(bias)};
}

void load_weights(const fs::path& dir, const Checkpoint& checkpoint, GptModel& model) {
  if (checkpoint.hf) return checkpoint.hf->set(model.params());
  if (checkpoint.saved_model) return load_model(dir, model.params());
  const CheckpointInfo info = inspect_checkpoint(dir, checkpoint.config);
  ParamStore& params = model.params();
  for (int i = 0; i < params.size(); ++i) {
    const ParamEntry& e = params.entry(i);
    const std::vector<float> stored = read_checkpoint_tensor(info, e.spec.name);
    const SliceMap map(e);  // this model's element -> stored element (-1: vocabulary padding)
    std::vector<float> local(static_cast<std::size_t>(e.local_shape.numel()));
    for (std::size_t k = 0; k < local.size(); ++k) {
      const std::int64_t g = map(static_cast<std::int64_t>(k));
      local[k] = g < 0 ? 0.0f : stored[static_cast<std::size_t>(g)];
    }
    write_values(local.data(), params.param(i));
  }
}

// The model's view of a growing context. Without the cache it runs the whole window for every
// new token (the last `window` tokens; causality makes the padding after them moot). With it,
// the first call runs the context (a prompt) once, and each later one runs only the new token
// against the kept keys and values; when the window is full it starts again from the last half
// of it (a learned or rotary position cannot shift, so a sliding window would mean rerunning
// it all).
class ContextWindow {
 public:
  ContextWindow(GptModel& model, std::int64_t window, bool cached)
      : model_(model), window_(window), cached_(cached), input_(window, 0) {}

  void next_logits(const std::vector<std::int32_t>& context, float* out) {
    const auto size = static_cast<std::int64_t>(context.size());
    if (!cached_) {
      const std::int64_t n = std::min(window_, size);
      std::copy(context.end() - n, context.end(), input_.begin());
      model_.next_token_logits(input_.data(), n - 1, out);
    } else if (filled_ > 0 && filled_ < window_ && size == seen_ + 1) {
      model_.decode_logits(context.back(), filled_++, out);
    } else {
      const std::int64_t n = std::min(filled_ == window_ ? window_ / 2 : window_, size);
      std::copy(context.end() - n, context.end(), input_.begin());
      model_.prefill_logits(input_.data(), n, out);
      filled_ = n;
    }
    seen_ = size;
  }

 private:
  GptModel& model_;
  std::int64_t window_;
  bool cached_;
  std::vector<std::int32_t> input_;
  std::int64_t filled_ = 0;  // window positions whose keys and values the model holds
  std::int64_t seen_ = 0;    // context length at the last call
};

struct GenerateArgs {
  std::string checkpoint, init_from, tokenizer, prompt;
  int tokens = 100, top_k = 40, threads = 0;
  // --seq-len: the window (default: the model's context), checked against that context in
  // generation_window (one line for < 1 and too large).
  std::optional<std::int64_t> seq_len;
  double temperature = 0.8;
  std::uint64_t seed = 0;
  std::string device = "cpu";
  bool no_kv_cache = false, allow_tokenizer_mismatch = false;
};

// The model's own tokenizer, or the one the user names: never a default one, whose ids would
// mean other text to this model (gibberish without an error).
std::unique_ptr<data::Tokenizer> tokenizer_for(const GenerateArgs& args,
                                               const Checkpoint& checkpoint) {
  if (args.tokenizer.empty() && !data::has_tokenizer_files(checkpoint.path))
    fail("{} carries no tokenizer files{}: give the tokenizer it was trained with "
         "(--tokenizer, e.g. the run's <out>/model or its data.tokenizer)",
         checkpoint.path,
         checkpoint.tokenizer.known()
             ? fmt::format(" (it was trained on ids of a tokenizer of {})",
                           checkpoint.tokenizer.describe())
             : "");
  return !args.tokenizer.empty() ? data::load_tokenizer(args.tokenizer, "--tokenizer")
                                 : data::load_tokenizer(checkpoint.path, args.checkpoint.empty()
                                                                              ? "--init-from"
                                                                              : "--checkpoint");
}

// The prompt as ids, checked against the model before any weights are read.
std::vector<std::int32_t> prompt_ids(const GenerateArgs& args, const data::Tokenizer& tokenizer,
                                     const Checkpoint& checkpoint) {
  // The prompt as a document starts: after the specials the tokenizer puts before a text
  // (Llama: <s>); an empty context starts after an end of document.
  std::vector<std::int32_t> context(tokenizer.text_prefix().begin(),
                                    tokenizer.text_prefix().end());
  tokenizer.encode_into(args.prompt, context);
  if (context.empty()) context.push_back(tokenizer.eos_id());
  // Before any weights are read: a tokenizer with more ids than the model (not the one it was
  // trained with) would feed it ids it has no embedding rows for.
  data::require_ids_below(
      context, checkpoint.config.vocab_size,
      fmt::format("the prompt as {} encodes it", tokenizer.describe()),
      fmt::format("generate with the tokenizer {} was trained with (--tokenizer)",
                  checkpoint.path));
  // The same vocabulary size is no proof: the tokenizer must be the one the model records.
  std::string warning;
  // Named as the user gave it: --tokenizer, or the files found in the checkpoint itself.
  data::check_same_tokenizer(
      checkpoint.path, checkpoint.tokenizer,
      args.tokenizer.empty() ? fmt::format("the tokenizer files in {}", checkpoint.path)
                             : fmt::format("--tokenizer {}", args.tokenizer),
      data::identity_of(tokenizer), args.allow_tokenizer_mismatch, &warning);
  if (!warning.empty()) fmt::print(stderr, "{}\n", warning);
  return context;
}

// The prompt, then each sampled token's text as it comes; the rate on stderr.
void sample_text(const GenerateArgs& args, const ModelConfig& config, std::int64_t window,
                 GptModel& model, const data::Tokenizer& tokenizer,
                 std::vector<std::int32_t> context) {
  fmt::print("{}", args.prompt);
  std::fflush(stdout);
  ContextWindow model_window(model, window, !args.no_kv_cache);
  std::vector<float> logits(config.vocab_size);
  // Each token's text as it follows the prompt and the tokens before it
  // (data/text_stream.hpp); without a prompt, the text of the generated ids alone.
  data::TextStream text(tokenizer, args.prompt.empty() ? std::vector<std::int32_t>{} : context);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < args.tokens; ++i) {
    model_window.next_logits(context, logits.data());
    const std::int32_t next =
        sample_token(logits, args.temperature, args.top_k, uniform_at(args.seed, 1, i));
    context.push_back(next);
    fmt::print("{}", text.push(next));
    std::fflush(stdout);
  }
  fmt::print("{}\n", text.flush());
  // On stderr, so the text on stdout stays just the text.
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr, "generated {} token{} in {:.2f} s: {:.1f} tokens/s ({})\n", args.tokens,
             args.tokens == 1 ? "" : "s", seconds, args.tokens / seconds,
             args.no_kv_cache ? "no key/value cache" : "key/value cache");
}

// --checkpoint, or --init-from: a Hugging Face folder or a kintsugi checkpoint as --checkpoint
// takes it.
Checkpoint read_source(const GenerateArgs& args) {
  if (args.checkpoint.empty() == args.init_from.empty())
    fail("generate needs either --checkpoint DIR (a saved model or a training checkpoint) or "
         "--init-from FOLDER (a Hugging Face model folder)");
  if (!args.checkpoint.empty()) return read_checkpoint_kind(args.checkpoint);
  if (is_kintsugi_checkpoint(args.init_from)) return read_checkpoint_kind(args.init_from);
  HfFolder folder = open_hf_folder(args.init_from, "--init-from", args.tokenizer);
  Checkpoint c{folder.config.model, false, {}, args.init_from, folder.weights, folder.notes};
  // A --tokenizer must be the folder's own, as a saved model's must be the one it records.
  if (!args.tokenizer.empty() && data::has_tokenizer_files(args.init_from))
    c.tokenizer = data::identity_of(*data::load_tokenizer(args.init_from, "--init-from"));
  return c;
}

// The window generation runs: --seq-len, at most the model's context (model.seq_len, a Hugging
// Face folder's max_position_embeddings: 131072 for Llama 3.2, whose activations and key/value
// cache at that length would dwarf the weights), or the whole context.
std::int64_t generation_window(const GenerateArgs& args, const Checkpoint& checkpoint) {
  const std::int64_t context = checkpoint.config.seq_len;
  if (!args.seq_len) return context;
  if (*args.seq_len < 1 || *args.seq_len > context)
    fail("--seq-len {} is out of range: give 1 to {}, the context of {} (its model.seq_len)",
         *args.seq_len, context, checkpoint.path);
  return *args.seq_len;
}

void run_generate(const GenerateArgs& args) {
  // NaN passes a range check (every comparison is false) and inf would divide every logit to
  // zero: both sampled without a word.
  if (!std::isfinite(args.temperature) || args.temperature < 0)
    fail("--temperature {} must be a finite number >= 0 (0: greedy)", args.temperature);
  set_compute_threads(args.threads);
  if (!args.tokenizer.empty() && !fs::exists(args.tokenizer))  // the user's path: no advice
    fail("--tokenizer {}: no such file or directory", args.tokenizer);
  // The checkpoint first: when it is not one, the default tokenizer is not what is wrong.
  const Checkpoint checkpoint = read_source(args);
  const std::int64_t window = generation_window(args, checkpoint);
  const std::unique_ptr<data::Tokenizer> tokenizer = tokenizer_for(args, checkpoint);
  std::vector<std::int32_t> context = prompt_ids(args, *tokenizer, checkpoint);
  // Once every check has passed; on stderr, where the rate goes, so stdout stays the text.
  for (const std::string& note : checkpoint.notes) fmt::print(stderr, "{}\n", note);
  MemoryTracker memory;
  auto backend = make_backend(parse_name<Device>(args.device, "--device"), memory);
  GptModel model(*backend, checkpoint.config, DType::f32, 1, window);
  load_weights(checkpoint.path, checkpoint, model);
  if (!checkpoint.router_bias.empty()) model.set_moe_router_bias(checkpoint.router_bias);
  sample_text(args, checkpoint.config, window, model, *tokenizer, std::move(context));
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand(
      "generate", "Sample text from a trained model or a Hugging Face model folder");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "A saved model (<out>/model) or a training checkpoint "
                  "(<out>/checkpoints/step-N)");
  cmd->add_option("--init-from", args->init_from,
                  "Or a Hugging Face model folder (config.json, model.safetensors or its sharded "
                  "index, tokenizer.json), opened as train --init-from opens it; its context is "
                  "config.json's (--seq-len runs less)");
  cmd->add_option("--seq-len", args->seq_len,
                  "The window generation runs, 1 to the model's context (default: all of it, "
                  "model.seq_len or config.json's max_position_embeddings)");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json (or its directory) or GPT-2's directory (default: the one "
                  "saved with the model or in the folder; a training checkpoint carries none)");
  cmd->add_flag("--allow-tokenizer-mismatch", args->allow_tokenizer_mismatch,
                "Generate although --tokenizer is not the tokenizer the model records (a "
                "warning instead of an error)");
  cmd->add_option("--prompt", args->prompt, "Text to continue (default: start of a document)");
  cmd->add_option("--tokens", args->tokens, "Tokens to generate")->check(CLI::Range(1, 100000));
  // Checked in the callback: one message for NaN (which passes a range check), inf and < 0.
  cmd->add_option("--temperature", args->temperature, "Sampling temperature (0: greedy)");
  cmd->add_option("--top-k", args->top_k, "Sample among the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", args->seed, "Sampling seed");
  cmd->add_option("--threads", args->threads, "Threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", args->device, "Device: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--no-kv-cache", args->no_kv_cache,
                "Run the whole window for every new token instead of one row against the "
                "key/value cache (slower; the same tokens while the context fits the window)");
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace kintsugi::cli
