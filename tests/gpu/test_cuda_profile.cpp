// `kintsugi bench step --profile` on the CUDA backend: ops are timed with events on its stream
// (backend/profiling_backend.hpp), and a profiled step synchronizes no more than an unprofiled
// one (the emulator's events hold the host time of their record).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <string>

#include "kintsugi/backend/cuda/cuda_backend.hpp"
#include "kintsugi/backend/profiling_backend.hpp"
#include "kintsugi/core/rng.hpp"
#include "kintsugi/train/stage_model.hpp"
#include "kintsugi/train/step_benchmark.hpp"

namespace kintsugi {
namespace {

// The CUDA backend (its timeline too), counting synchronizations.
class CountingBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void synchronize() override {
    ++syncs;
    ForwardingBackend::synchronize();
  }
  int syncs = 0;
};

ModelConfig tiny_gpt() {
  ModelConfig c = model_preset("gpt-tiny");
  c.n_layer = 2;
  c.d_model = 64;
  c.d_ff = 256;
  c.seq_len = 16;
  c.vocab_size = 300;
  return c;
}

TEST(CudaProfile, EventsTimeAStepWithoutSynchronizing) {
  RunConfig c;
  c.model = tiny_gpt();
  c.train.global_batch = 2;
  c.train.micro_batch = 2;
  c.train.precision = Precision::bf16;
  resolve_layout(c, 1);
  MemoryTracker memory;
  auto gpu = make_cuda_backend(memory);
  CountingBackend counted(*gpu);
  ProfilingBackend profiler(counted);
  ASSERT_TRUE(profiler.uses_events());
  static const Place place;
  Tracer tracer;
  StageModel model(profiler, c, place, tracer);
  const std::int64_t n = c.train.micro_batch * c.model.seq_len;
  const auto sample = [&](int mb, std::int32_t* t, std::int32_t* y) {
    for (std::int64_t i = 0; i < n; ++i) {
      t[i] = static_cast<std::int32_t>(uniform_int_at(3, mb, i, 300));
      y[i] = static_cast<std::int32_t>(uniform_int_at(4, mb, i, 300));
    }
  };
  const auto step = [&] { model.train_step(sample, 1, 1.0 / double(n), 1e-3, 1.0); };

  profiler.set_enabled(false);
  step();  // allocates
  const int before_plain = counted.syncs;
  step();
  const int plain = counted.syncs - before_plain;

  profiler.set_enabled(true);
  profiler.begin_step();
  const int before_profiled = counted.syncs;
  step();
  EXPECT_EQ(counted.syncs - before_profiled, plain) << "the profile adds no synchronization";
  profiler.end_step();

  const auto shapes = profiler.by_shape();
  ASSERT_TRUE(shapes.count("linear_forward 32x192x64 bf16"));  // the first qkv projection
  double ops = 0;
  for (const auto& [name, p] : shapes) {
    EXPECT_GE(p.seconds, 0) << name;
    EXPECT_GT(p.bytes, 0) << name;
    ops += p.seconds;
  }
  EXPECT_GT(ops, 0);
  EXPECT_GT(profiler.profile().at("attention_backward").calls, 0);
}

// The bench's profiled steps on the CUDA backend: event mode, every profiled op's time within
// its steps.
TEST(CudaProfile, StepBenchmarkProfilesWithEvents) {
  MemoryTracker memory;
  auto gpu = make_cuda_backend(memory);
  const auto r = run_step_benchmark(*gpu, tiny_gpt(), 2, 16, 2, 1, true, Precision::bf16);
  EXPECT_TRUE(r.profile_events);
  ASSERT_EQ(r.profiled_step_seconds.size(), 2u);
  ASSERT_EQ(r.step_seconds.size(), 2u);
  double ops = 0, steps = 0;
  for (const auto& [name, p] : r.op_shapes) ops += p.seconds;
  for (double s : r.profiled_step_seconds) steps += s;
  EXPECT_GT(ops, 0);
  EXPECT_LE(ops, steps);
  EXPECT_GT(r.profile_marks, 0);
  EXPECT_TRUE(r.ops.count("linear_backward_weight"));

  // Without events (KINTSUGI_PROFILE_EVENTS=0): the host clock, synchronizing after each op,
  // as before events.
  const auto old = run_step_benchmark(*gpu, tiny_gpt(), 2, 16, 1, 0, true, Precision::bf16,
                                      /*events=*/false);
  EXPECT_FALSE(old.profile_events);
  EXPECT_EQ(old.profile_marks, 0);
  EXPECT_EQ(old.ops.at("linear_backward_weight").calls,
            r.ops.at("linear_backward_weight").calls / 2);  // one step against two
}

}  // namespace
}  // namespace kintsugi
