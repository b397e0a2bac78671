// A short training run of the tiny GPT on the Brown corpus: the validation loss must fall well
// below its starting value (ln 50257 = 10.8), and the run must leave its metrics, loss curve
// and a checkpoint that loads back into the same weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <unistd.h>

#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/train/trainer.hpp"
#include "brown_data.hpp"
#include "scratch_dir.hpp"
#include "support/test_paths.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;

// gpt-tiny on the Brown corpus: in the tests' 512 ids, or in GPT-2's (brown_data.hpp).
RunConfig tiny_config(std::vector<std::string> extra, bool gpt2_ids = false) {
  std::vector<std::string> overrides = brown_overrides(gpt2_ids);
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return load_run_config(testing::configs_dir() + "/gpt-tiny.toml", overrides);
}

TEST(Training, TinyGptLearnsBrownCorpus) {
  const ScratchDir out("training");
  // Sequences of 64 tokens (half the preset's) and 20 steps keep the test short and still learn
  // 2.9 nats (10.84 -> 7.92; 40 steps learned 3.2 in twice the time).
  RunConfig config =
      tiny_config({"model.seq_len=64", "train.steps=20", "train.eval_every=10",
                   "train.eval_batches=8", "train.warmup_steps=5", "train.log_every=20"},
                  /*gpt2_ids=*/true);
  std::ostringstream log;
  const TrainSummary s = train(config, {.out_dir = out.path().string()}, log);
  EXPECT_NEAR(s.first_val_loss, std::log(50257.0), 0.3) << log.str();
  EXPECT_LT(s.last_val_loss, s.first_val_loss - 2.5) << log.str();

  // The validation loss before training as step 0, without a training loss; then one JSON
  // object per step with the documented keys.
  std::ifstream metrics(s.metrics_path);
  std::string line;
  ASSERT_TRUE(std::getline(metrics, line));
  const auto initial = nlohmann::json::parse(line);
  EXPECT_EQ(initial.at("step").get<int>(), 0);
  EXPECT_FALSE(initial.contains("loss")) << line;
  EXPECT_DOUBLE_EQ(initial.at("val_loss").get<double>(), s.first_val_loss);
  int lines = 0, with_val = 0;
  while (std::getline(metrics, line)) {
    auto j = nlohmann::json::parse(line);
    ++lines;
    EXPECT_EQ(j.at("step").get<int>(), lines);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "memory_bytes"})
      EXPECT_TRUE(j.contains(key)) << key;
    with_val += j.contains("val_loss");
  }
  EXPECT_EQ(lines, 20);
  EXPECT_EQ(with_val, 2);
  EXPECT_GT(fs::file_size(s.plot_path), 1000u);
  // The schedule's picture beside it: the default cosine, one point per step.
  std::ifstream lr_svg(out.path() / "lr.svg");
  const std::string lr_text((std::istreambuf_iterator<char>(lr_svg)), {});
  EXPECT_NE(lr_text.find("cosine schedule, 20 steps"), std::string::npos) << lr_text;

  // The checkpoint holds the trained weights: evaluating them again gives the final val loss.
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const auto info = read_model_info(s.checkpoint_dir);
  EXPECT_EQ(info.step, 20);
  EXPECT_EQ(info.config.n_layer, config.model.n_layer);
}

// A blend of two datasets with no validation data: evaluation is skipped and said so, and the
// metrics count the training tokens drawn from each dataset, as the sampler assigns them.
TEST(Training, BlendWithoutValidationCountsTokensPerDataset) {
  const fs::path out =
      fs::temp_directory_path() / ("kintsugi-test-blend-" + std::to_string(getpid()));
  fs::remove_all(out);
  const std::string a = brown_data().train, b = brown_data().val;
  RunConfig config = tiny_config(
      {"train.steps=3", "train.warmup_steps=1", "train.log_every=1", "data.val=\"\"",
       "train.save_checkpoint=false",
       "data.train=[{ path = \"" + a + "\", weight = 3 }, { path = \"" + b + "\", weight = 1 }]"});
  std::ostringstream log;
  const TrainSummary s = train(config, {.out_dir = out.string()}, log);
  EXPECT_NE(log.str().find("evaluation skipped"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("no validation data"), std::string::npos) << log.str();
  const TrainInputs inputs = open_inputs(config);
  std::ifstream metrics(s.metrics_path);
  std::string line;
  std::int64_t step = 0, expected_a = 0, expected_b = 0;
  while (std::getline(metrics, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_FALSE(j.contains("val_loss"));
    for (std::int64_t i = 0; i < config.train.global_batch; ++i)
      (inputs.train.source_of(step, i) == 0 ? expected_a : expected_b) += config.model.seq_len;
    ++step;
    EXPECT_EQ(j.at("dataset_tokens").at(a).get<std::int64_t>(), expected_a) << line;
    EXPECT_EQ(j.at("dataset_tokens").at(b).get<std::int64_t>(), expected_b) << line;
  }
  EXPECT_EQ(step, 3);
  EXPECT_GT(expected_a, expected_b);  // 3:1 over 3 steps of 16 sequences, almost surely
  // The loss picture names the blend, not its first dataset.
  std::ifstream svg(s.plot_path);
  const std::string picture((std::istreambuf_iterator<char>(svg)), {});
  EXPECT_NE(picture.find(a + " 75% + " + b + " 25%"), std::string::npos) << picture.substr(0, 600);
  fs::remove_all(out);
}

// The validation set is train.eval_sequences windows whatever the micro-batch: two runs that
// differ only in it (one with a padded last micro-batch) measure the same validation loss.
TEST(Training, ValidationLossDoesNotDependOnTheMicroBatch) {
  std::vector<double> losses;
  for (const char* mb : {"1", "4"}) {
    const ScratchDir out(std::string("eval-micro-batch-") + mb);
    const RunConfig config =
        tiny_config({"train.steps=1", "train.warmup_steps=1", "train.eval_sequences=6",
                     std::string("train.micro_batch=") + mb, "train.save_checkpoint=false"});
    std::ostringstream log;
    const TrainSummary s = train(config, {.out_dir = out.path().string()}, log);
    losses.push_back(s.first_val_loss);
    losses.push_back(s.last_val_loss);
  }
  EXPECT_NEAR(losses[0], losses[2], 1e-6 * losses[0]);  // before training: the same weights
  EXPECT_NEAR(losses[1], losses[3], 1e-5 * losses[1]);  // after one step of the same batch
  EXPECT_NE(losses[0], losses[1]);
}

// A peak below the run's own throughput (a GEMM rate measured on a busy machine, or a
// configured one) gives MFU above 100%: the log says so once and names the peak's source.
TEST(Training, MfuAboveOneHundredPercentIsExplainedOnce) {
  const ScratchDir out("mfu-above-peak");
  const RunConfig config =
      tiny_config({"train.steps=2", "train.warmup_steps=1", "train.log_every=1",
                   "train.eval_every=0", "data.val=\"\"", "train.save_checkpoint=false",
                   "metrics.peak_gflops=1e-6"});
  std::ostringstream log;
  train(config, {.out_dir = out.path().string()}, log);
  const std::string text = log.str();
  const std::string note = "note: MFU above 100%";
  const auto first = text.find(note);
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(note, first + 1), std::string::npos) << text;  // once, not every step
  EXPECT_NE(text.find("metrics.peak_gflops from the config", first), std::string::npos) << text;
  EXPECT_NE(text.find("raise metrics.peak_gflops", first), std::string::npos) << text;
}

}  // namespace
}  // namespace kintsugi
