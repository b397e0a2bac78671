// Micro-benchmarks of the CPU backend's ops at GPT-2 124M shapes (Google Benchmark):
//   build/bench/kintsugi_microbench [--benchmark_filter=attention]
// Counters report GFLOP/s (GEMM-based ops, model FLOPs) or GB/s (memory-bound ops) so each op can
// be compared with the machine's GEMM rate (`kintsugi bench gemm`) and memory bandwidth.
// Linear layers and attention run twice: f32, and bf16 as mixed-precision training stores them
// (bf16 activations and weights, f32 parameter gradients, f32 LM-head logits and lse).
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/threads.hpp"

namespace kintsugi {
namespace {

struct Fixture {
  MemoryTracker memory;
  std::unique_ptr<Backend> be = make_cpu_backend(memory);
  std::vector<Buffer> buffers;
  Tensor make(Shape shape, double scale = 0.02, DType dtype = DType::f32) {
    buffers.push_back(be->allocate(MemoryKind::workspace, shape.numel() * sizeof(float)));
    Tensor t = buffers.back().view(DType::f32, shape);
    // A cheap deterministic spread of values (random draws would dominate the set-up time).
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.as<float>()[i] = static_cast<float>(scale * ((i * 7919 % 201) - 100) / 100.0);
    if (dtype == DType::f32) return t;
    buffers.push_back(be->allocate(MemoryKind::workspace, shape.numel() * size_of(dtype)));
    Tensor typed = buffers.back().view(dtype, shape);
    be->convert(t, typed);
    return typed;
  }
};

constexpr std::int64_t kVocab = 50304;

constexpr std::int64_t kRows = 1024;  // B = 4, T = 256
constexpr std::int64_t kD = 768;

// act: the dtype of activations and weights. In bf16 the LM head (out = vocabulary) writes f32
// logits and takes f32 dlogits, and parameter gradients are f32, as in mixed-precision training.
void BM_LinearForward(benchmark::State& state, DType act) {
  Fixture f;
  const std::int64_t in = state.range(0), out = state.range(1);
  const DType y_type = out == kVocab ? DType::f32 : act;
  Tensor x = f.make({kRows, in}, 0.02, act), w = f.make({out, in}, 0.02, act),
         b = f.make({out}, 0.02, act), y = f.make({kRows, out}, 0.02, y_type);
  for (auto _ : state) f.be->linear_forward(x, w, &b, y);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kRows * in * out,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(BM_LinearForward, f32, DType::f32)
    ->Args({kD, 3 * kD})->Args({kD, 4 * kD})->Args({4 * kD, kD})->Args({kD, kVocab})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_LinearForward, bf16, DType::bf16)
    ->Args({kD, 3 * kD})->Args({kD, 4 * kD})->Args({4 * kD, kD})->Args({kD, kVocab})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LinearBackward(benchmark::State& state, DType act) {
  Fixture f;
  const std::int64_t in = state.range(0), out = state.range(1);
  const DType grad = DType::f32;  // parameter gradients are f32 in either case
  const DType dy_type = out == kVocab ? DType::f32 : act;
  Tensor x = f.make({kRows, in}, 0.02, act), w = f.make({out, in}, 0.02, act),
         dy = f.make({kRows, out}, 0.02, dy_type);
  Tensor dx = f.make({kRows, in}, 0.02, act), dw = f.make({out, in}, 0.02, grad),
         db = f.make({out}, 0.02, grad);
  for (auto _ : state) {
    f.be->linear_backward_input(dy, w, dx, false);
    f.be->linear_backward_weight(dy, x, dw, &db, true);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * kRows * in * out,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(BM_LinearBackward, f32, DType::f32)
    ->Args({kD, 3 * kD})->Args({kD, 4 * kD})->Args({4 * kD, kD})->Args({kD, kVocab})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_LinearBackward, bf16, DType::bf16)
    ->Args({kD, 3 * kD})->Args({kD, 4 * kD})->Args({4 * kD, kD})->Args({kD, kVocab})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Attention(benchmark::State& state, DType act) {
  Fixture f;
  const std::int64_t T = state.range(0), B = kRows / T, H = 12, hd = 64;
  const AttentionShape s{B, T, H, H, hd};
  Tensor qkv = f.make({B * T, 3 * kD}, 1.0, act), out = f.make({B * T, kD}, 0.02, act),
         lse = f.make({B, H, T});
  Tensor dout = f.make({B * T, kD}, 0.02, act), dqkv = f.make({B * T, 3 * kD}, 0.02, act);
  const bool backward = state.range(1) != 0;
  for (auto _ : state) {
    f.be->attention_forward(s, qkv, out, lse);
    if (backward) f.be->attention_backward(s, qkv, out, lse, dout, dqkv);
  }
  // Model FLOPs of QK^T and PV, counted in full (plan/flops.hpp): 4 B H T^2 hd forward, 2x back.
  const double flops = 4.0 * B * H * double(T) * T * hd * (backward ? 3 : 1);
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(BM_Attention, f32, DType::f32)
    ->Args({256, 0})->Args({256, 1})->Args({1024, 0})->Args({1024, 1})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, bf16, DType::bf16)
    ->Args({256, 0})->Args({256, 1})->Args({1024, 0})->Args({1024, 1})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LayerNorm(benchmark::State& state) {
  Fixture f;
  Tensor x = f.make({kRows, kD}, 1.0), w = f.make({kD}), b = f.make({kD}), y = f.make({kRows, kD});
  Tensor mean = f.make({kRows}), rstd = f.make({kRows}), dx = f.make({kRows, kD});
  Tensor dw = f.make({kD}), db = f.make({kD});
  for (auto _ : state) {
    f.be->layernorm_forward(x, w, b, y, mean, rstd, 1e-5);
    f.be->layernorm_backward(y, x, w, mean, rstd, dx, dw, db, false);
  }
  state.counters["GB/s"] = benchmark::Counter(7.0 * kRows * kD * 4,
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_LayerNorm)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Gelu(benchmark::State& state) {
  Fixture f;
  Tensor x = f.make({kRows, 4 * kD}, 1.0), y = f.make({kRows, 4 * kD});
  for (auto _ : state) {
    f.be->gelu_forward(x, y);
    f.be->gelu_backward(x, y, y);
  }
  state.counters["GB/s"] = benchmark::Counter(5.0 * kRows * 4 * kD * 4,
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Gelu)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_CrossEntropy(benchmark::State& state) {
  Fixture f;
  const std::int64_t rows = 256, V = kVocab;
  Tensor logits = f.make({rows, V}, 1.0), mx = f.make({rows}), sum = f.make({rows}),
         tl = f.make({rows});
  std::vector<std::int32_t> target_ids(rows, 17);
  const Tensor targets{target_ids.data(), DType::i32, Shape{rows}};
  double loss_sum = 0;
  for (auto _ : state) {
    f.be->softmax_row_max(logits, 50257, mx);
    f.be->softmax_row_sum(logits, 50257, mx, targets, 0, sum, tl, true);
    f.be->cross_entropy_finish(logits, 50257, mx, sum, tl, targets, 0,
                               Tensor{&loss_sum, DType::f64, Shape{1}}, true, 1e-3);
  }
  state.counters["GB/s"] = benchmark::Counter(4.0 * rows * V * 4,
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_CrossEntropy)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AdamW(benchmark::State& state) {
  Fixture f;
  const std::int64_t n = state.range(0);
  Tensor p = f.make({n}), g = f.make({n}), m = f.make({n}), v = f.make({n}, 0.0);
  AdamWHyper h{.lr = 1e-4, .weight_decay = 0.1};
  for (auto _ : state) {
    f.be->adamw_step(p, g, m, v, h);
    ++h.step;
  }
  state.counters["GB/s"] = benchmark::Counter(7.0 * n * 4,
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_AdamW)->Arg(124 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kintsugi
