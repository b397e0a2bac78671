// `kintsugi generate`: sample text from a trained model.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/rng.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/model/gpt.hpp"

namespace kintsugi::cli {

namespace {

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

}  // namespace

void add_generate_command(CLI::App& app) {
  struct Args {
    std::string checkpoint, tokenizer, prompt;
    int tokens = 100, top_k = 40, threads = 0;
    double temperature = 0.8;
    std::uint64_t seed = 0;
    std::string device = "cpu";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "Sample text from a trained model");
  cmd->add_option("--checkpoint", args->checkpoint, "Model directory written by train (<out>/model)")
      ->required();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json (or its directory) or GPT-2's directory (default: the one "
                  "saved with the model, else data/gpt2-tokenizer)");
  cmd->add_option("--prompt", args->prompt, "Text to continue (default: start of a document)");
  cmd->add_option("--tokens", args->tokens, "Tokens to generate")->check(CLI::Range(1, 100000));
  cmd->add_option("--temperature", args->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", args->top_k, "Sample among the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", args->seed, "Sampling seed");
  cmd->add_option("--threads", args->threads, "Threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", args->device, "Device: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->callback([args] {
    set_compute_threads(args->threads);
    const auto tokenizer = data::load_tokenizer(
        !args->tokenizer.empty()                            ? args->tokenizer
        : data::has_tokenizer_files(args->checkpoint) ? args->checkpoint
                                                            : "data/gpt2-tokenizer");
    const auto info = read_model_info(args->checkpoint);
    MemoryTracker memory;
    auto backend = make_backend(parse_name<Device>(args->device, "--device"), memory);
    const std::int64_t window = info.config.seq_len;
    GptModel model(*backend, info.config, DType::f32, 1, window);
    load_model(args->checkpoint, model.params());

    // The prompt as a document starts: after the specials the tokenizer puts before a text
    // (Llama: <s>); an empty context starts after an end of document.
    std::vector<std::int32_t> context(tokenizer->text_prefix().begin(),
                                      tokenizer->text_prefix().end());
    tokenizer->encode_into(args->prompt, context);
    if (context.empty()) context.push_back(tokenizer->eos_id());
    fmt::print("{}", args->prompt);
    std::fflush(stdout);
    std::vector<std::int32_t> input(window, 0);
    std::vector<float> logits(info.config.vocab_size);
    for (int i = 0; i < args->tokens; ++i) {
      // The model sees the last `window` tokens; causality makes the padding after them moot.
      const std::int64_t n = std::min<std::int64_t>(window, context.size());
      std::copy(context.end() - n, context.end(), input.begin());
      model.next_token_logits(input.data(), n - 1, logits.data());
      const std::int32_t next =
          sample_token(logits, args->temperature, args->top_k, uniform_at(args->seed, 1, i));
      context.push_back(next);
      const std::int32_t one[] = {next};
      fmt::print("{}", tokenizer->decode(one));
      std::fflush(stdout);
    }
    fmt::print("\n");
  });
}

}  // namespace kintsugi::cli
