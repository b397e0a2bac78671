// The per-op profile of `kintsugi bench step --profile` (backend/profiling_backend.hpp): with a
// device timeline each op's time is the span between its two marks, read once the step is over,
// with no synchronization between ops; without one (the CPU) each op is timed by the host clock.
// Every call counts its FLOPs and the least bytes it moves once, at its entry point
// (backend/ops_*.cpp), and the roofline floor is the larger of the two at the measured ceilings
// (plan/op_roofline.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kintsugi/backend/profiling_backend.hpp"
#include "kintsugi/optim/multi_tensor.hpp"
#include "kintsugi/plan/op_roofline.hpp"
#include "kintsugi/train/step_benchmark.hpp"

namespace kintsugi {
namespace {

// Mark k is reached at k^2 milliseconds, so every span has a length of its own; counts begin()
// calls and the marks read.
class SquaredMillisecondTimeline final : public DeviceTimeline {
 public:
  void begin() override {
    ++begins;
    marks = 0;
    mark();
  }
  int mark() override { return marks++; }
  double seconds(int mark) override {
    ++reads;
    return 1e-3 * mark * mark;
  }
  int begins = 0, marks = 0, reads = 0;
};

// The CPU backend's ops with a device timeline, counting synchronizations.
class TimelineCpu final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  DeviceTimeline* timeline() override { return &fake; }
  void synchronize() override {
    ++syncs;
    ForwardingBackend::synchronize();
  }
  SquaredMillisecondTimeline fake;
  int syncs = 0;
};

class Profile : public ::testing::Test {
 protected:
  Tensor tensor(DType dtype, Shape shape) {
    buffers_.push_back(cpu_->allocate(MemoryKind::workspace,
                                      static_cast<std::size_t>(shape.numel()) * size_of(dtype)));
    return buffers_.back().view(dtype, shape);
  }
  MemoryTracker memory_;
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(memory_);
  std::vector<Buffer> buffers_;
};

// Span of mark pair (2i + 1, 2i + 2) after the origin mark 0: (2i + 2)^2 - (2i + 1)^2 ms.
double span_of_call(int i) { return 1e-3 * (4 * i + 3); }

TEST_F(Profile, EventsTimeEachOpAndShapeWithoutSynchronizing) {
  TimelineCpu device(*cpu_);
  ProfilingBackend profiler(device);
  ASSERT_TRUE(profiler.uses_events());
  EXPECT_EQ(profiler.timeline(), nullptr);  // the marks are the profile's

  const Tensor x = tensor(DType::bf16, {6, 4}), w = tensor(DType::bf16, {5, 4});
  const Tensor bias = tensor(DType::bf16, {5}), y = tensor(DType::f32, {6, 5});
  const Tensor h = tensor(DType::f32, {6, 8}), lw = tensor(DType::f32, {8}),
               lb = tensor(DType::f32, {8}), hy = tensor(DType::f32, {6, 8}),
               mean = tensor(DType::f32, {6}), rstd = tensor(DType::f32, {6});
  AttentionShape s;
  s.batch = 1, s.seq = 4, s.heads = 2, s.kv_heads = 2, s.head_dim = 4;
  const Tensor qkv = tensor(DType::f32, {4, 24}), out = tensor(DType::f32, {4, 8}),
               lse = tensor(DType::f32, {8}), dout = tensor(DType::f32, {4, 8}),
               dqkv = tensor(DType::f32, {4, 24});

  profiler.begin_step();
  profiler.linear_forward(x, w, &bias, y, false);         // call 0
  profiler.layernorm_forward(h, lw, lb, hy, mean, rstd, 1e-5);  // 1
  profiler.add(h, hy, h);                                 // 2
  profiler.linear_forward(x, w, &bias, y, true);          // 3: accumulates, reads y too
  profiler.attention_forward(s, qkv, out, lse);           // 4
  profiler.attention_backward(s, qkv, out, lse, dout, dqkv);  // 5
  EXPECT_EQ(device.syncs, 0) << "event mode waits for nothing between ops";
  EXPECT_EQ(device.fake.reads, 0);
  EXPECT_EQ(profiler.by_shape().at("add 6x8 f32").seconds, 0) << "times come at end_step()";
  profiler.end_step();
  EXPECT_EQ(device.syncs, 1);
  EXPECT_EQ(device.fake.begins, 1);
  EXPECT_EQ(device.fake.marks, 13);
  EXPECT_EQ(profiler.marks(), 13);

  const auto shapes = profiler.by_shape();
  ASSERT_EQ(shapes.size(), 5u);
  const OpProfile& linear = shapes.at("linear_forward 6x5x4 bf16");  // M x N x K, x's type
  EXPECT_EQ(linear.calls, 2);
  EXPECT_NEAR(linear.seconds, span_of_call(0) + span_of_call(3), 1e-12);
  EXPECT_DOUBLE_EQ(linear.flops, 2 * 2.0 * 6 * 5 * 4);
  // x 48 + w 40 + bias 10 bytes of bf16, y 120 of f32 written; the second call also reads y.
  EXPECT_DOUBLE_EQ(linear.bytes, (48 + 40 + 10 + 120) + (48 + 40 + 10 + 2 * 120));

  const OpProfile& norm = shapes.at("layernorm_forward 6x8 f32");
  EXPECT_EQ(norm.calls, 1);
  EXPECT_NEAR(norm.seconds, span_of_call(1), 1e-12);
  EXPECT_EQ(norm.flops, 0);
  EXPECT_DOUBLE_EQ(norm.bytes, 192 + 32 + 32 + 192 + 24 + 24);  // x w b read; y mean rstd written

  const OpProfile& add = shapes.at("add 6x8 f32");
  EXPECT_NEAR(add.seconds, span_of_call(2), 1e-12);
  EXPECT_DOUBLE_EQ(add.bytes, 3 * 192);

  const OpProfile& fwd = shapes.at("attention_forward 1x4x2x4 f32");  // B x T x H x hd
  EXPECT_NEAR(fwd.seconds, span_of_call(4), 1e-12);
  EXPECT_DOUBLE_EQ(fwd.flops, 4.0 * 2 * 4 * 4 * 4);
  EXPECT_DOUBLE_EQ(fwd.bytes, 384 + 128 + 32);  // qkv read; out, lse written
  const OpProfile& bwd = shapes.at("attention_backward 1x4x2x4 f32");
  EXPECT_NEAR(bwd.seconds, span_of_call(5), 1e-12);
  EXPECT_DOUBLE_EQ(bwd.flops, 8.0 * 2 * 4 * 4 * 4);
  EXPECT_DOUBLE_EQ(bwd.bytes, 384 + 128 + 32 + 128 + 384);  // qkv out lse dout; dqkv

  const auto kinds = profiler.profile();
  EXPECT_EQ(kinds.at("linear_forward").calls, 2);
  EXPECT_NEAR(kinds.at("linear_forward").seconds, linear.seconds, 1e-15);

  // Disabled: ops pass through untimed, unmarked.
  profiler.set_enabled(false);
  profiler.add(h, hy, h);
  EXPECT_EQ(device.fake.marks, 13);
  EXPECT_EQ(profiler.by_shape().at("add 6x8 f32").calls, 1);

  // A step is begun by its first op when begin_step() was not called; times add up over steps.
  profiler.set_enabled(true);
  profiler.add(h, hy, h);
  EXPECT_EQ(device.fake.begins, 2);
  profiler.end_step();
  EXPECT_EQ(profiler.by_shape().at("add 6x8 f32").calls, 2);
  EXPECT_NEAR(profiler.by_shape().at("add 6x8 f32").seconds, span_of_call(2) + span_of_call(0),
              1e-12);  // call 2 of the first step, call 0 of this one

  profiler.reset();
  EXPECT_TRUE(profiler.by_shape().empty());
  EXPECT_EQ(profiler.marks(), 0);
}

TEST_F(Profile, HostClockWithoutATimeline) {
  ProfilingBackend profiler(*cpu_);
  EXPECT_FALSE(profiler.uses_events());
  TimelineCpu device(*cpu_);
  EXPECT_FALSE(ProfilingBackend(device, false).uses_events()) << "the host clock, by choice";
  const Tensor dy = tensor(DType::f32, {64, 32}), x = tensor(DType::f32, {64, 32}),
               w = tensor(DType::f32, {32}), mean = tensor(DType::f32, {64}),
               rstd = tensor(DType::f32, {64}), dx = tensor(DType::f32, {64, 32}),
               dw = tensor(DType::f32, {32}), db = tensor(DType::f32, {32});
  profiler.begin_step();
  profiler.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, false);
  profiler.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, true);
  profiler.end_step();
  const OpProfile p = profiler.by_shape().at("layernorm_backward 64x32 f32");
  EXPECT_EQ(p.calls, 2);
  EXPECT_GT(p.seconds, 0);
  // dy x w mean rstd read, dx read and written (it accumulates), dw db written (and read too
  // when accumulating).
  const double once = 8192 + 8192 + 128 + 256 + 256 + 2 * 8192;
  EXPECT_DOUBLE_EQ(p.bytes, (once + 256) + (once + 2 * 256));
}

// Cross-entropy reads only the valid columns; backward writes every column.
TEST_F(Profile, CrossEntropyCountsTheValidColumns) {
  ProfilingBackend profiler(*cpu_);
  const Tensor logits = tensor(DType::f32, {4, 10}), row_max = tensor(DType::f32, {4}),
               row_sum = tensor(DType::f32, {4}), target = tensor(DType::f32, {4}),
               targets = tensor(DType::i32, {4}), loss = tensor(DType::f64, {1});
  profiler.softmax_row_max(logits, 7, row_max);
  profiler.softmax_row_sum(logits, 7, row_max, targets, 0, row_sum, target, true);
  profiler.cross_entropy_finish(logits, 7, row_max, row_sum, target, targets, 0, loss, true, 1.0);
  const OpProfile p = profiler.by_shape().at("cross_entropy 4x10 f32");
  EXPECT_EQ(p.calls, 3);
  const double valid = 4 * 7 * 4, small = 16;
  EXPECT_DOUBLE_EQ(p.bytes, (valid + small) + (2 * valid + 4 * small) +
                                (4 * small + 2 * 8 + valid + 160));
}

// A profiled step benchmark on the CPU: every op the step runs reports its bytes and shape, and
// the ops' time fits in the profiled steps.
TEST(ProfileStep, EveryOpOfAStepHasBytesAndAShape) {
  ModelConfig config = model_preset("gpt-tiny");
  config.n_layer = 2;
  config.vocab_size = 300;
  config.seq_len = 16;
  const auto r = run_step_benchmark(config, 2, 16, 2, 1, true, Device::cpu, Precision::bf16);
  EXPECT_FALSE(r.profile_events);
  EXPECT_EQ(r.step_seconds.size(), 2u);
  ASSERT_EQ(r.profiled_step_seconds.size(), 2u);
  double ops = 0, steps = 0;
  for (const auto& [name, p] : r.op_shapes) {
    EXPECT_GT(p.bytes, 0) << name;
    EXPECT_EQ(std::count(name.begin(), name.end(), ' '), 2) << name << ": op, shape, type";
    EXPECT_EQ(p.calls % 2, 0) << name << ": as many calls in each of the 2 steps";
    ops += p.seconds;
  }
  for (double s : r.profiled_step_seconds) steps += s;
  EXPECT_LE(ops, steps);
  for (const char* kind : {"linear_forward", "linear_backward_input", "linear_backward_weight",
                           "attention_forward", "attention_backward", "layernorm_forward",
                           "cross_entropy", "adamw_multi", "sum_squares_multi"})
    EXPECT_TRUE(r.ops.count(kind)) << kind;
  // The optimizer's multi-range ops carry the bytes of the single-range ops they replace
  // (KINTSUGI_MULTI_TENSOR=0), so their floors are the same.
  set_multi_tensor_ops(false);
  const auto single = run_step_benchmark(config, 2, 16, 2, 1, true, Device::cpu, Precision::bf16);
  set_multi_tensor_ops(true);
  EXPECT_FALSE(single.ops.count("adamw_multi"));
  ASSERT_TRUE(single.ops.count("adamw") && single.ops.count("sum_squares"));
  EXPECT_EQ(r.ops.at("adamw_multi").calls, 2);  // one per step
  EXPECT_GT(single.ops.at("adamw").calls, 2);
  EXPECT_EQ(r.ops.at("adamw_multi").bytes, single.ops.at("adamw").bytes);
  // The single-range calls count the f64 sum's read and write once each.
  const double sums = single.ops.at("sum_squares").calls - r.ops.at("sum_squares_multi").calls;
  EXPECT_EQ(r.ops.at("sum_squares_multi").bytes + 16 * sums, single.ops.at("sum_squares").bytes);
  // gpt-tiny's first layer's qkv projection: 32 rows, 3 x 128 out, 128 in, in bf16.
  EXPECT_TRUE(r.op_shapes.count("linear_forward 32x384x128 bf16"));
  EXPECT_FALSE(run_step_benchmark(config, 2, 16, 1, 0, false).profiled_step_seconds.size());
}

TEST(Roofline, FloorIsTheSlowerOfComputeAndMemory) {
  RooflineCeilings c;
  c.gemm_gflops = 1000;  // 1e12 FLOP/s
  c.copy_gbs = 100;      // 1e11 B/s
  OpProfile gemm{3, 0, 2e12, 1e9};  // 2 s of compute, 0.01 s of memory
  EXPECT_DOUBLE_EQ(floor_seconds(gemm, c), 2.0);
  OpProfile add{5, 0, 0, 5e10};  // memory only: 0.5 s
  EXPECT_DOUBLE_EQ(floor_seconds(add, c), 0.5);
  EXPECT_EQ(floor_seconds(OpProfile{}, c), 0);
  EXPECT_EQ(gemm_dtype(Precision::bf16, Device::cuda), DType::bf16);
  EXPECT_EQ(gemm_dtype(Precision::fp16, Device::cuda), DType::f16);
  EXPECT_EQ(gemm_dtype(Precision::fp16, Device::cpu), DType::f32);
  EXPECT_EQ(gemm_dtype(Precision::fp32, Device::cuda), DType::f32);
}

TEST(Roofline, CopyBandwidthIsMeasured) {
  MemoryTracker memory;
  const auto cpu = make_cpu_backend(memory);
  const double gbs = measure_copy_bandwidth_gbs(*cpu, std::size_t{4} << 20, 2);
  EXPECT_GT(gbs, 0.1);
  EXPECT_LT(gbs, 1e5);
}

}  // namespace
}  // namespace kintsugi
