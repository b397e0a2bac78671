// A training checkpoint whose values are not finite (written by a run that had diverged, so its
// checksums are valid) is refused when inspected, before anything loads, naming the tensor and
// what is wrong: a resumed run would otherwise fail later and blame train.lr.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/train/stage_model.hpp"
#include "scratch_dir.hpp"

namespace kintsugi {
namespace {

RunConfig tiny() {
  RunConfig c;
  c.model = model_preset("gpt-tiny");
  c.model.n_layer = 1;
  c.model.seq_len = 16;
  c.model.vocab_size = 300;
  c.train.global_batch = 2;
  c.train.micro_batch = 2;
  resolve_layout(c, 1);
  return c;
}

TEST(CheckpointValues, NonFiniteWeightsAndNegativeMomentsAreRefusedByName) {
  const RunConfig c = tiny();
  MemoryTracker memory;
  auto cpu = make_cpu_backend(memory);
  Tracer tracer;
  const Place place;
  StageModel model(*cpu, c, place, tracer);
  const ScratchDir scratch("checkpoint-values");
  const auto pieces = model.state(0).state_pieces();
  const auto& piece = pieces.at(1);
  const std::string tensor = model.params().front()->entry(piece.param).spec.name;
  RankState rank;
  rank.params = model.params();
  rank.states = {&model.state(0)};

  struct Case {
    const Tensor* values;
    float bad;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {&piece.weights, NAN, "holds nan as a weight of tensor " + tensor},
      {&piece.m, INFINITY, "holds inf as a first moment of tensor " + tensor},
      {&piece.v, -1.0f, "holds -1 as a second moment of tensor " + tensor}};
  int step = 1;
  for (const Case& k : cases) {
    std::vector<float> values = read_values(*k.values);
    const float good = values.at(3);
    values[3] = k.bad;
    write_values(values.data(), *k.values);
    const auto dir = save_train_checkpoint(scratch / "checkpoints", c.model, {{"world", 1}},
                                           {.step = step++}, rank, 0);
    values[3] = good;
    write_values(values.data(), *k.values);
    std::string error;
    try {
      inspect_checkpoint(dir, c.model);
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(k.expected), std::string::npos) << error;
  }
  // The same state without the bad value is accepted.
  inspect_checkpoint(save_train_checkpoint(scratch / "checkpoints", c.model, {{"world", 1}},
                                           {.step = step}, rank, 0),
                     c.model);
}

}  // namespace
}  // namespace kintsugi
