// Mixed-precision training: bf16 and fp16 follow the fp32 loss curve on the Brown corpus, and
// fp16's dynamic loss scaler skips an overflowed step without touching the weights, then
// recovers at a lower scale.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kintsugi/train/stage_model.hpp"
#include "kintsugi/train/trainer.hpp"
#include "brown_data.hpp"
#include "scratch_dir.hpp"
#include "support/model_weights.hpp"
#include "support/test_paths.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;
using testing::weights_of;

// gpt-tiny, narrower, on the Brown corpus in the tests' 512 ids or GPT-2's (brown_data.hpp).
RunConfig small_config(std::vector<std::string> extra, bool gpt2_ids = false) {
  std::vector<std::string> overrides = brown_overrides(gpt2_ids);
  for (const char* o : {"model.d_model=64", "model.seq_len=64", "train.global_batch=8",
                        "train.micro_batch=2", "train.warmup_steps=3", "train.eval_batches=4",
                        "train.log_every=1000", "train.save_checkpoint=false"})
    overrides.push_back(o);
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return load_run_config(testing::configs_dir() + "/gpt-tiny.toml", overrides);
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

struct Curve {
  std::vector<double> train, val;
};

Curve train_curve(const std::string& precision) {
  const ScratchDir out("mixed-" + precision);
  // GPT-2's 50257 ids: the tolerance below was measured with its large LM head, whose logits
  // are the most rounded values of a mixed-precision step.
  // 15 steps: the rounding shows from the first step (the logits), and the curve falls 1.3
  // nats over them; 30 steps took twice the time for the same verdict.
  RunConfig config = small_config({"train.steps=15", "train.eval_every=5",
                                   "train.precision=\"" + precision + "\""},
                                  /*gpt2_ids=*/true);
  std::ostringstream log;
  const TrainSummary s = train(config, {.out_dir = out.path().string()}, log);
  Curve c;
  for (const auto& m : read_metrics(s.metrics_path)) {
    if (m.contains("loss")) c.train.push_back(m.at("loss"));  // not the step-0 evaluation
    if (m.contains("val_loss")) c.val.push_back(m.at("val_loss"));
    EXPECT_FALSE(m.contains("skipped")) << precision << " skipped a step:\n" << log.str();
  }
  return c;
}

// The tolerance docs/parallelism.md documents: every step's training loss and every
// validation loss within 1% of fp32's (measured over 30 steps with the LM head's logits in the
// compute type: bf16 0.021%, fp16 0.0025%; with KINTSUGI_FUSED_LOSS=0, f32 logits: bf16 0.014%,
// fp16 0.0028%; over the 15 steps here bf16 0.012%, fp16 0.0011%).
TEST(MixedPrecisionTraining, Bf16AndFp16FollowTheFp32LossCurve) {
  const Curve fp32 = train_curve("fp32");
  ASSERT_EQ(fp32.train.size(), 15u);
  ASSERT_LT(fp32.val.back(), fp32.val.front() - 1.0);  // it learned something
  for (const char* precision : {"bf16", "fp16"}) {
    const Curve c = train_curve(precision);
    ASSERT_EQ(c.train.size(), fp32.train.size());
    ASSERT_EQ(c.val.size(), fp32.val.size());
    double worst = 0;
    for (std::size_t i = 0; i < c.train.size(); ++i)
      worst = std::max(worst, std::abs(c.train[i] - fp32.train[i]) / fp32.train[i]);
    for (std::size_t i = 0; i < c.val.size(); ++i)
      worst = std::max(worst, std::abs(c.val[i] - fp32.val[i]) / fp32.val[i]);
    EXPECT_LT(worst, 0.01) << precision;
    std::printf("%s: worst relative loss difference to fp32 %.2e\n", precision, worst);
  }
}

TEST(MixedPrecisionTraining, Fp16OverflowSkipsTheStepAndRecovers) {
  // A loss scale of 2^40 makes the first backward overflow fp16 (largest finite 65504).
  RunConfig config = small_config({"train.precision=\"fp16\"", "train.loss_scale=1099511627776",
                                   "train.loss_scale_window=3"});
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  Tracer tracer;
  const Place serial;
  StageModel model(*backend, config, serial, tracer);
  const std::int64_t T = config.model.seq_len, mb = config.train.micro_batch;
  const int micro_batches = static_cast<int>(config.train.global_batch / mb);
  auto sample = [&](int k, std::int32_t* tokens, std::int32_t* targets) {
    for (std::int64_t i = 0; i < mb * T; ++i) {  // a fixed, learnable sequence
      tokens[i] = static_cast<std::int32_t>((i * 7 + k) % 97);
      targets[i] = static_cast<std::int32_t>((i * 7 + k + 7) % 97);
    }
  };
  const double grad_scale = 1.0 / static_cast<double>(config.train.global_batch * T);

  const auto before = weights_of(model);
  auto r = model.train_step(sample, micro_batches, grad_scale, 1e-3, 1.0);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(r.loss_scale, 1099511627776.0);
  EXPECT_EQ(model.loss_scaler().scale(), 549755813888.0);
  EXPECT_EQ(weights_of(model), before) << "a skipped step changed the weights";

  // The scale halves on every overflow until a step fits, then the weights move.
  int skipped = 1, steps = 1;
  for (; steps < 40 && r.skipped; ++steps) {
    r = model.train_step(sample, micro_batches, grad_scale, 1e-3, 1.0);
    skipped += r.skipped;
  }
  ASSERT_FALSE(r.skipped) << "the loss scale never recovered";
  EXPECT_EQ(model.loss_scaler().skipped(), skipped);
  EXPECT_TRUE(std::isfinite(r.grad_norm));
  EXPECT_GT(r.grad_norm, 0);
  const auto after = weights_of(model);
  EXPECT_NE(after, before);
  const double first_loss = r.loss_sum;

  // After `loss_scale_window` clean steps the scale doubles; training goes on and learns.
  std::vector<double> scales;
  for (int i = 0; i < 12; ++i) {
    r = model.train_step(sample, micro_batches, grad_scale, 1e-3, 1.0);
    scales.push_back(r.loss_scale);
    EXPECT_TRUE(std::isfinite(r.loss_sum));
  }
  bool grew = false;
  for (std::size_t i = 1; i < scales.size(); ++i) grew |= scales[i] == 2 * scales[i - 1];
  EXPECT_TRUE(grew) << "the scale never doubled after a clean window";
  EXPECT_LT(r.loss_sum, first_loss);
}

}  // namespace
}  // namespace kintsugi
