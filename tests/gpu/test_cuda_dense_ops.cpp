// The CUDA backend's GEMMs, norms, activations, rotary embeddings and attention against the CPU
// backend in f64, for every precision mix (Types) and several shapes, ragged ones included.
#include <map>
#include <tuple>

#include "device_testing.hpp"
#include "kintsugi/backend/cuda/attention_cudnn.hpp"
#include "kintsugi/backend/cuda/attention_tc.hpp"
#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/backend/cuda/gemm.hpp"
#include "kintsugi/backend/cuda/kernels.hpp"
#include "kintsugi/core/switches.hpp"
#ifdef KINTSUGI_GPU_TESTS_EMULATED
#include "cuda_emulator.hpp"
#endif

namespace kintsugi {
namespace {

using gpu_testing::OpTest;
using gpu_testing::Pair;
using gpu_testing::Mnk;
using gpu_testing::Types;

class CudaDense : public ::testing::TestWithParam<Types>, public OpTest {};

const Mnk kGemmShapes[] = {{1, 1, 1}, {7, 5, 3}, {64, 48, 32}, {33, 129, 70}};

TEST_P(CudaDense, LinearForward) {
  const Types t = GetParam();
  for (const Mnk& s : kGemmShapes)
    for (bool bias : {false, true})
      for (bool acc : {false, true}) {
        Pair x = input(t.act, {s.m, s.k}), w = input(t.act, {s.n, s.k}), b = input(t.act, {s.n});
        Pair y = output(t.act, {s.m, s.n}, acc);
        gpu().linear_forward(x.gpu, w.gpu, bias ? &b.gpu : nullptr, y.gpu, acc);
        cpu().linear_forward(x.cpu, w.cpu, bias ? &b.cpu : nullptr, y.cpu, acc);
        expect_near(y, "y " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                           std::to_string(s.k) + (bias ? " bias" : "") + (acc ? " acc" : ""));
      }
}

// The LM head's mixes: f32 logits from 16-bit activations and weights, and the f32 logits'
// gradient against 16-bit weights (rounded to bf16 first when the weights are bf16).
TEST_P(CudaDense, LinearMixedOperands) {
  const Types t = GetParam();
  const Mnk s{37, 75, 24};
  Pair x = input(t.act, {s.m, s.k}), w = input(t.act, {s.n, s.k});
  Pair logits = output(t.stat, {s.m, s.n});
  gpu().linear_forward(x.gpu, w.gpu, nullptr, logits.gpu);
  cpu().linear_forward(x.cpu, w.cpu, nullptr, logits.cpu);
  expect_near(logits, "logits", t.act);
  Pair dlogits = input(t.stat, {s.m, s.n}), dx = output(t.act, {s.m, s.k});
  Pair dw = output(t.stat, {s.n, s.k});
  gpu().linear_backward_input(dlogits.gpu, w.gpu, dx.gpu, false);
  cpu().linear_backward_input(dlogits.cpu, w.cpu, dx.cpu, false);
  expect_near(dx, "dx", t.act);
  gpu().linear_backward_weight(dlogits.gpu, x.gpu, dw.gpu, nullptr, false);
  cpu().linear_backward_weight(dlogits.cpu, x.cpu, dw.cpu, nullptr, false);
  expect_near(dw, "dw", t.act);
}

TEST_P(CudaDense, LinearBackward) {
  const Types t = GetParam();
  for (const Mnk& s : kGemmShapes)
    for (bool acc : {false, true}) {
      Pair dy = input(t.act, {s.m, s.n}), w = input(t.act, {s.n, s.k}), x = input(t.act, {s.m, s.k});
      Pair dx = output(t.act, {s.m, s.k}, acc);
      Pair dw = output(t.stat, {s.n, s.k}, acc), db = output(t.stat, {s.n}, acc);
      gpu().linear_backward_input(dy.gpu, w.gpu, dx.gpu, acc);
      cpu().linear_backward_input(dy.cpu, w.cpu, dx.cpu, acc);
      gpu().linear_backward_weight(dy.gpu, x.gpu, dw.gpu, &db.gpu, acc);
      cpu().linear_backward_weight(dy.cpu, x.cpu, dw.cpu, &db.cpu, acc);
      const std::string at = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                             std::to_string(s.k) + (acc ? " acc" : "");
      expect_near(dx, "dx " + at);
      expect_near(dw, "dw " + at, t.act);
      expect_near(db, "db " + at, t.act);
    }
}

// gemm_simple, the fallback, computes what cuBLASLt computes.
TEST_P(CudaDense, SimpleGemmFallback) {
  const Types t = GetParam();
  MemoryTracker memory;
  cuda::Gemm gemm(gpu().allocator(), memory);
  gemm.force_simple(true);
  const cudaStream_t stream = cuda::Context::get().stream();
  const auto ref = [](const Tensor& x) { return cuda::Ref{x.data, x.dtype, x.numel()}; };
  for (const Mnk& s : kGemmShapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Pair a = input(t.act, ta ? Shape{s.k, s.m} : Shape{s.m, s.k});
        Pair b = input(t.act, tb ? Shape{s.n, s.k} : Shape{s.k, s.n});
        Pair bias = input(t.act, {s.n}), c = output(t.act, {s.m, s.n}, true);
        gemm.run(s.m, s.n, s.k, ref(a.gpu), ta, ref(b.gpu), tb, ref(c.gpu), true, ref(bias.gpu),
                 stream);
        // The same on the CPU: C += op(A) op(B) + bias.
        double* cc = c.cpu.as<double>();
        const double *aa = a.cpu.as<double>(), *bb = b.cpu.as<double>();
        for (std::int64_t i = 0; i < s.m; ++i)
          for (std::int64_t j = 0; j < s.n; ++j) {
            double sum = 0;
            for (std::int64_t p = 0; p < s.k; ++p)
              sum += (ta ? aa[p * s.m + i] : aa[i * s.k + p]) * (tb ? bb[j * s.k + p] : bb[p * s.n + j]);
            cc[i * s.n + j] += sum + bias.cpu.as<double>()[j];
          }
        expect_near(c, "simple gemm" + std::string(ta ? " ta" : "") + (tb ? " tb" : ""));
      }
}

struct Rc {
  std::int64_t rows, cols;
};
const Rc kRowShapes[] = {{1, 1}, {5, 3}, {64, 64}, {33, 300}, {7, 200}};

TEST_P(CudaDense, LayerNorm) {
  const Types t = GetParam();
  for (const Rc& s : kRowShapes)
    for (bool acc : {false, true}) {
      Pair x = input(t.act, {s.rows, s.cols}, 2.0, 0.5), w = input(t.act, {s.cols}, 0.5, 1.0);
      Pair b = input(t.act, {s.cols});
      Pair y = output(t.act, {s.rows, s.cols}), mean = output(t.stat, {s.rows});
      Pair rstd = output(t.stat, {s.rows});
      gpu().layernorm_forward(x.gpu, w.gpu, b.gpu, y.gpu, mean.gpu, rstd.gpu, 1e-5);
      cpu().layernorm_forward(x.cpu, w.cpu, b.cpu, y.cpu, mean.cpu, rstd.cpu, 1e-5);
      const std::string at = std::to_string(s.rows) + "x" + std::to_string(s.cols);
      expect_near(y, "y " + at);
      expect_near(mean, "mean " + at, t.act);
      expect_near(rstd, "rstd " + at, t.act);
      Pair dy = input(t.act, {s.rows, s.cols}), dx = output(t.act, {s.rows, s.cols}, true);
      Pair dw = output(t.stat, {s.cols}, acc), db = output(t.stat, {s.cols}, acc);
      mirror(mean);
      mirror(rstd);
      gpu().layernorm_backward(dy.gpu, x.gpu, w.gpu, mean.gpu, rstd.gpu, dx.gpu, dw.gpu, db.gpu,
                               acc);
      cpu().layernorm_backward(dy.cpu, x.cpu, w.cpu, mean.cpu, rstd.cpu, dx.cpu, dw.cpu, db.cpu,
                               acc);
      expect_near(dx, "dx " + at);
      expect_near(dw, "dw " + at, t.act);
      expect_near(db, "db " + at, t.act);
    }
}

TEST_P(CudaDense, RmsNorm) {
  const Types t = GetParam();
  for (const Rc& s : kRowShapes)
    for (bool acc : {false, true}) {
      Pair x = input(t.act, {s.rows, s.cols}, 2.0, 0.5), w = input(t.act, {s.cols}, 0.5, 1.0);
      Pair y = output(t.act, {s.rows, s.cols}), rstd = output(t.stat, {s.rows});
      gpu().rmsnorm_forward(x.gpu, w.gpu, y.gpu, rstd.gpu, 1e-6);
      cpu().rmsnorm_forward(x.cpu, w.cpu, y.cpu, rstd.cpu, 1e-6);
      const std::string at = std::to_string(s.rows) + "x" + std::to_string(s.cols);
      expect_near(y, "y " + at);
      expect_near(rstd, "rstd " + at, t.act);
      Pair dy = input(t.act, {s.rows, s.cols}), dx = output(t.act, {s.rows, s.cols}, true);
      Pair dw = output(t.stat, {s.cols}, acc);
      mirror(rstd);
      gpu().rmsnorm_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, dx.gpu, dw.gpu, acc);
      cpu().rmsnorm_backward(dy.cpu, x.cpu, w.cpu, rstd.cpu, dx.cpu, dw.cpu, acc);
      expect_near(dx, "dx " + at);
      expect_near(dw, "dw " + at, t.act);
    }
}

TEST_P(CudaDense, Activations) {
  const Types t = GetParam();
  for (std::int64_t n : {1, 1000, 4097}) {
    Pair g = input(t.act, {n}, 2.0), u = input(t.act, {n}), y = output(t.act, {n});
    gpu().gelu_forward(g.gpu, y.gpu);
    cpu().gelu_forward(g.cpu, y.cpu);
    expect_near(y, "gelu " + std::to_string(n));
    Pair dy = input(t.act, {n}), dx = output(t.act, {n});
    gpu().gelu_backward(g.gpu, dy.gpu, dx.gpu);
    cpu().gelu_backward(g.cpu, dy.cpu, dx.cpu);
    expect_near(dx, "gelu backward " + std::to_string(n));
    gpu().gelu_backward(g.gpu, dy.gpu, dy.gpu);  // dx aliasing dy
    cpu().gelu_backward(g.cpu, dy.cpu, dy.cpu);
    expect_near(dy, "gelu backward in place " + std::to_string(n));

    Pair s = output(t.act, {n});
    gpu().swiglu_forward(g.gpu, u.gpu, s.gpu);
    cpu().swiglu_forward(g.cpu, u.cpu, s.cpu);
    expect_near(s, "swiglu " + std::to_string(n));
    Pair ds = input(t.act, {n}), dg = output(t.act, {n}), du = output(t.act, {n});
    gpu().swiglu_backward(g.gpu, u.gpu, ds.gpu, dg.gpu, du.gpu);
    cpu().swiglu_backward(g.cpu, u.cpu, ds.cpu, dg.cpu, du.cpu);
    expect_near(dg, "swiglu dgate " + std::to_string(n));
    expect_near(du, "swiglu dup " + std::to_string(n));
    gpu().swiglu_backward(g.gpu, u.gpu, ds.gpu, ds.gpu, du.gpu);  // dgate aliasing dy
    cpu().swiglu_backward(g.cpu, u.cpu, ds.cpu, ds.cpu, du.cpu);
    expect_near(ds, "swiglu dgate in place " + std::to_string(n));
  }
}

// (batch, seq, heads, kv heads, head dim, ALiBi heads, first head): one query tile and several,
// ragged sequences, grouped-query heads, every dims-per-lane class (hd <= 32, 64, 128, 256) and
// ALiBi with a head count that is not a power of two, seen from a tensor-parallel rank. In bf16
// and f16, head sizes 16, 32, 64 and 128 take the tensor-core kernels (64-row tiles: one, two
// and three of them, the last ragged).
const AttentionShape kAttentionShapes[] = {
    {1, 1, 1, 1, 4, 0, 0},      {2, 33, 4, 4, 16, 0, 0},  {1, 70, 6, 2, 24, 0, 0},
    {2, 40, 4, 4, 40, 6, 2},    {1, 35, 2, 1, 72, 0, 0},  {1, 20, 2, 2, 130, 0, 0},
    {1, 150, 4, 2, 64, 0, 0},   {2, 70, 4, 4, 32, 6, 2},  {1, 66, 2, 1, 128, 0, 0}};

std::string describe(const AttentionShape& s) {
  return "B" + std::to_string(s.batch) + " T" + std::to_string(s.seq) + " H" +
         std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " hd" +
         std::to_string(s.head_dim) + (s.alibi_heads ? " alibi" : "");
}

TEST_P(CudaDense, Rope) {
  const Types t = GetParam();
  for (const AttentionShape& s : {AttentionShape{1, 1, 1, 1, 2}, AttentionShape{2, 9, 4, 2, 8},
                                  AttentionShape{1, 37, 6, 3, 16}})
    for (bool inverse : {false, true}) {
      Pair qkv = input(t.act, {s.batch * s.seq, (s.heads + 2 * s.kv_heads) * s.head_dim});
      gpu().rope(s, qkv.gpu, 10000.0, inverse);
      cpu().rope(s, qkv.cpu, 10000.0, inverse);
      expect_near(qkv, "rope " + describe(s) + (inverse ? " inverse" : ""));
    }
}

// Qwen3's per-head norm of the queries and keys: forward in place with its rstd, backward's input
// gradient in place and the weights' gradients accumulated.
TEST_P(CudaDense, QkNorm) {
  const Types t = GetParam();
  for (const AttentionShape& s : {AttentionShape{1, 1, 1, 1, 2}, AttentionShape{2, 9, 4, 2, 8},
                                  AttentionShape{1, 37, 6, 3, 6}}) {
    const std::int64_t rows = s.batch * s.seq, width = (s.heads + 2 * s.kv_heads) * s.head_dim;
    Pair qkv = input(t.act, {rows, width}, 2.0), pre = output(t.act, {rows, width});
    Pair wq = input(t.act, {s.head_dim}, 0.5, 1.0), wk = input(t.act, {s.head_dim}, 0.5, 1.0);
    Pair rstd = output(t.stat, {rows, s.heads + s.kv_heads});
    gpu().copy(qkv.gpu, pre.gpu);
    cpu().copy(qkv.cpu, pre.cpu);
    gpu().qk_norm_forward(s, qkv.gpu, wq.gpu, wk.gpu, rstd.gpu, 1e-6);
    cpu().qk_norm_forward(s, qkv.cpu, wq.cpu, wk.cpu, rstd.cpu, 1e-6);
    expect_near(qkv, "qk_norm " + describe(s));
    expect_near(rstd, "qk_norm rstd " + describe(s), t.act);
    mirror(rstd);
    Pair d = input(t.act, {rows, width}), dwq = output(t.stat, {s.head_dim}, true),
         dwk = output(t.stat, {s.head_dim}, true);
    gpu().qk_norm_backward(s, pre.gpu, wq.gpu, wk.gpu, rstd.gpu, d.gpu, dwq.gpu, dwk.gpu);
    cpu().qk_norm_backward(s, pre.cpu, wq.cpu, wk.cpu, rstd.cpu, d.cpu, dwq.cpu, dwk.cpu);
    expect_near(d, "qk_norm backward " + describe(s));
    expect_near(dwq, "qk_norm dq_weight " + describe(s), t.act);
    expect_near(dwk, "qk_norm dk_weight " + describe(s), t.act);
  }
}

// The tensor-core kernels' variants (attention_tc.hpp), each held to the CPU: the first
// kernels (every switch off), tile masks with the two-kernel backward, and the fused backward
// with and without skipping masked blocks and ordering heavy tiles first. Other types take the
// CUDA-core kernels, which have no variants: they run once.
struct AttentionVariant {
  std::string name;
  cuda::attn_tc::Variant v;
};
std::vector<AttentionVariant> attention_variants(DType act) {
  using cuda::attn_tc::Variant;
  if (act != DType::bf16 && act != DType::f16) return {{"", cuda::attn_tc::variant()}};
  Variant first, two_kernels, fused, fused_plain;
  first.tile_masks = first.skip_masked = first.heavy_first = first.fused_backward = false;
  two_kernels.fused_backward = false;
  fused.fused_backward = fused_plain.fused_backward = true;
  fused_plain.skip_masked = fused_plain.heavy_first = false;
  return {{" (first kernels)", first},
          {" (tile masks, two kernels)", two_kernels},
          {" (fused)", fused},
          {" (fused, every block, unit order)", fused_plain}};
}

// The switches give the variants: their defaults are Variant's (attention_tc.hpp), and each
// switch sets its own field.
TEST(CudaDenseSwitches, AttentionVariantFromSwitches) {
  using cuda::attn_tc::Variant;
  using cuda::attn_tc::variant_from;
  using Env = std::map<std::string, std::string>;
  const auto same = [](const Variant& a, const Variant& b) {
    return a.tensor_cores == b.tensor_cores && a.tile_masks == b.tile_masks &&
           a.skip_masked == b.skip_masked && a.heavy_first == b.heavy_first &&
           a.fused_backward == b.fused_backward && a.fused_scratch_cap == b.fused_scratch_cap &&
           a.more_blocks_dkdv == b.more_blocks_dkdv && a.more_blocks_dq == b.more_blocks_dq &&
           a.dkdv_two_passes == b.dkdv_two_passes;
  };
  EXPECT_TRUE(same(variant_from(Switches()), Variant{}));
  Variant off;
  off.tensor_cores = off.tile_masks = off.skip_masked = off.heavy_first = false;
  off.fused_backward = off.dkdv_two_passes = true;
  off.more_blocks_dkdv = false;
  off.more_blocks_dq = true;
  off.fused_scratch_cap = std::size_t{64} << 20;
  EXPECT_TRUE(same(variant_from(Switches(Env{{"KINTSUGI_TENSOR_CORE_ATTENTION", "0"},
                                             {"KINTSUGI_ATTN_TILE_MASKS", "0"},
                                             {"KINTSUGI_ATTN_SKIP_MASKED", "0"},
                                             {"KINTSUGI_ATTN_HEAVY_FIRST", "0"},
                                             {"KINTSUGI_ATTN_BWD_FUSED", "1"},
                                             {"KINTSUGI_ATTN_BWD_DKDV_PASSES", "2"},
                                             {"KINTSUGI_ATTN_BWD_MORE_BLOCKS", "dq"},
                                             {"KINTSUGI_ATTN_BWD_SCRATCH_MIB", "64"}})),
                   off));
  for (const auto& [more, dkdv, dq] : {std::tuple{"0", false, false}, std::tuple{"1", true, true},
                                       std::tuple{"dkdv", true, false}}) {
    const Variant v = variant_from(Switches(Env{{"KINTSUGI_ATTN_BWD_MORE_BLOCKS", more}}));
    EXPECT_EQ(v.more_blocks_dkdv, dkdv) << more;
    EXPECT_EQ(v.more_blocks_dq, dq) << more;
  }
}

// Sets a variant for a scope.
class VariantScope {
 public:
  explicit VariantScope(const cuda::attn_tc::Variant& v) : saved_(cuda::attn_tc::variant()) {
    cuda::attn_tc::set_variant(v);
  }
  ~VariantScope() { cuda::attn_tc::set_variant(saved_); }
  VariantScope(const VariantScope&) = delete;
  VariantScope& operator=(const VariantScope&) = delete;

 private:
  cuda::attn_tc::Variant saved_;
};

// Forward and backward of one shape (documents when doc_start is set on both sides) against the
// CPU; qkv as given.
void check_attention(OpTest& op, const Types& t, const AttentionShape& on_gpu,
                     const AttentionShape& on_cpu, Pair& qkv, const std::string& what) {
  const AttentionShape& s = on_gpu;
  const std::int64_t rows = s.batch * s.seq;
  Pair out = op.output(t.act, {rows, s.heads * s.head_dim});
  Pair lse = op.output(t.stat, {s.batch, s.heads, s.seq});
  op.gpu().attention_forward(on_gpu, qkv.gpu, out.gpu, lse.gpu);
  op.cpu().attention_forward(on_cpu, qkv.cpu, out.cpu, lse.cpu);
  OpTest::expect_near(out, "out " + what);
  OpTest::expect_near(lse, "lse " + what, t.act);
  OpTest::mirror(out);
  OpTest::mirror(lse);
  Pair dout = op.input(t.act, {rows, s.heads * s.head_dim});
  Pair dqkv = op.output(t.act, {rows, (s.heads + 2 * s.kv_heads) * s.head_dim});
  op.gpu().attention_backward(on_gpu, qkv.gpu, out.gpu, lse.gpu, dout.gpu, dqkv.gpu);
  op.cpu().attention_backward(on_cpu, qkv.cpu, out.cpu, lse.cpu, dout.cpu, dqkv.cpu);
  OpTest::expect_near(dqkv, "dqkv " + what);
}

TEST_P(CudaDense, Attention) {
  const Types t = GetParam();
  for (const AttentionVariant& variant : attention_variants(t.act)) {
    const VariantScope scope(variant.v);
    for (const AttentionShape& s : kAttentionShapes) {
      Pair qkv = input(t.act, {s.batch * s.seq, (s.heads + 2 * s.kv_heads) * s.head_dim});
      check_attention(*this, t, s, s, qkv, describe(s) + variant.name);
    }
  }
}

// Shapes whose tiles fall in every class the tensor-core kernels tell apart: full tiles (every
// key before every query of a warp: no mask), diagonal tiles (masked, blocks skipped), ragged
// ends, ALiBi on full tiles, grouped-query heads over four tiles, head sizes 80 and 96 (dQ
// shares in two column chunks, as 128), and 36 (sequence, head) units: a partial group of the
// heavy-first order.
TEST_P(CudaDense, AttentionTileClasses) {
  const Types t = GetParam();
  if (t.act != DType::bf16 && t.act != DType::f16) GTEST_SKIP() << "tensor-core kernels only";
  const AttentionShape shapes[] = {{1, 256, 2, 1, 64, 0, 0}, {1, 200, 3, 3, 32, 3, 0},
                                   {3, 70, 12, 12, 16, 0, 0}, {1, 192, 1, 1, 128, 0, 0},
                                   {1, 130, 2, 1, 80, 0, 0},  {1, 140, 2, 2, 96, 6, 3}};
  for (const AttentionVariant& variant : attention_variants(t.act)) {
    const VariantScope scope(variant.v);
    for (const AttentionShape& s : shapes) {
      Pair qkv = input(t.act, {s.batch * s.seq, (s.heads + 2 * s.kv_heads) * s.head_dim});
      check_attention(*this, t, s, s, qkv, describe(s) + variant.name);
    }
  }
}

// The fused backward through a scratch cap that holds 3 of 8 (sequence, kv head) units: three
// slices (3, 3, 2), each a fused launch and a dQ sum (counted under the emulator).
TEST_P(CudaDense, AttentionFusedSlices) {
  const Types t = GetParam();
  if (t.act != DType::bf16 && t.act != DType::f16) GTEST_SKIP() << "tensor-core kernels only";
  const AttentionShape s{4, 100, 4, 2, 32, 0, 0};
  cuda::attn_tc::Variant v;
  v.fused_backward = true;
  const std::size_t per_unit = sizeof(float) * 2 * 3 * 64 * 32;  // 2 heads, 3 tile pairs
  v.fused_scratch_cap = 3 * per_unit + 100;
  const VariantScope scope(v);
  const cuda::AttnShape a{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim};
  const std::size_t delta = (sizeof(double) * 4 * 4 * 100 + 255) / 256 * 256;
  EXPECT_EQ(cuda::attention_backward_scratch_bytes(a, t.stat), delta + 3 * per_unit);
  const std::int64_t rows = s.batch * s.seq, width = (s.heads + 2 * s.kv_heads) * s.head_dim;
  Pair qkv = input(t.act, {rows, width});
  Pair out = output(t.act, {rows, s.heads * s.head_dim});
  Pair lse = output(t.stat, {s.batch, s.heads, s.seq});
  gpu().attention_forward(s, qkv.gpu, out.gpu, lse.gpu);
  cpu().attention_forward(s, qkv.cpu, out.cpu, lse.cpu);
  mirror(out);
  mirror(lse);
  Pair dout = input(t.act, {rows, s.heads * s.head_dim}), dqkv = output(t.act, {rows, width});
#ifdef KINTSUGI_GPU_TESTS_EMULATED
  const std::uint64_t before = cuda_emu::launches();
#endif
  gpu().attention_backward(s, qkv.gpu, out.gpu, lse.gpu, dout.gpu, dqkv.gpu);
#ifdef KINTSUGI_GPU_TESTS_EMULATED
  EXPECT_EQ(cuda_emu::launches() - before, 1u + 2u * 3u);  // delta, then 3 x (fused, sum)
#endif
  cpu().attention_backward(s, qkv.cpu, out.cpu, lse.cpu, dout.cpu, dqkv.cpu);
  expect_near(dqkv, "dqkv in slices " + describe(s));
}

// Same inputs, same bits, with the scratch filled by another call in between (a partial read
// before it is written would show), for both backward schemes with the tile masks.
TEST_P(CudaDense, AttentionBackwardRepeatsBitForBit) {
  const Types t = GetParam();
  if (t.act != DType::bf16 && t.act != DType::f16) GTEST_SKIP() << "tensor-core kernels only";
  const AttentionShape s{1, 150, 2, 1, 64, 0, 0};
  const std::int64_t rows = s.batch * s.seq, width = (s.heads + 2 * s.kv_heads) * s.head_dim;
  const std::vector<AttentionVariant> variants = attention_variants(t.act);
  for (const AttentionVariant& variant : {variants[1], variants[2]}) {
    const VariantScope scope(variant.v);
    Pair qkv = input(t.act, {rows, width}), other = input(t.act, {rows, width});
    Pair dout = input(t.act, {rows, s.heads * s.head_dim});
    Pair out = output(t.act, {rows, s.heads * s.head_dim});
    Pair lse = output(t.stat, {s.batch, s.heads, s.seq});
    std::vector<std::vector<double>> runs;
    for (Pair* x : {&qkv, &other, &qkv}) {
      Pair dqkv = output(t.act, {rows, width});
      gpu().attention_forward(s, x->gpu, out.gpu, lse.gpu);
      gpu().attention_backward(s, x->gpu, out.gpu, lse.gpu, dout.gpu, dqkv.gpu);
      runs.push_back(OpTest::fetch(dqkv.gpu));
    }
    EXPECT_EQ(runs[0], runs[2]) << variant.name;
    EXPECT_NE(runs[0], runs[1]) << variant.name;
  }
}

// The more_blocks variants (kernels compiled for more resident blocks per SM) and the dK/dV
// kernel in two query passes compute what the two-kernel backward computes, in the same order:
// the same bits, at head sizes 64 and 32 (they apply up to 64), with grouped-query heads and
// ALiBi.
TEST_P(CudaDense, AttentionBackwardMoreBlocksSameBits) {
  const Types t = GetParam();
  if (t.act != DType::bf16 && t.act != DType::f16) GTEST_SKIP() << "tensor-core kernels only";
  cuda::attn_tc::Variant two_kernels, more_blocks, two_passes;
  two_kernels.more_blocks_dkdv = two_kernels.more_blocks_dq = false;
  more_blocks.more_blocks_dkdv = more_blocks.more_blocks_dq = true;
  two_passes.dkdv_two_passes = true;
  for (const AttentionShape& s : {AttentionShape{2, 150, 4, 2, 64, 0, 0},
                                  AttentionShape{1, 130, 2, 2, 32, 2, 0}}) {
    const std::int64_t rows = s.batch * s.seq, width = (s.heads + 2 * s.kv_heads) * s.head_dim;
    Pair qkv = input(t.act, {rows, width}), dout = input(t.act, {rows, s.heads * s.head_dim});
    Pair out = output(t.act, {rows, s.heads * s.head_dim});
    Pair lse = output(t.stat, {s.batch, s.heads, s.seq});
    gpu().attention_forward(s, qkv.gpu, out.gpu, lse.gpu);
    std::vector<std::vector<double>> runs;
    for (const cuda::attn_tc::Variant& v : {two_kernels, more_blocks, two_passes}) {
      const VariantScope scope(v);
      Pair dqkv = output(t.act, {rows, width});
      gpu().attention_backward(s, qkv.gpu, out.gpu, lse.gpu, dout.gpu, dqkv.gpu);
      runs.push_back(OpTest::fetch(dqkv.gpu));
    }
    for (std::size_t r = 1; r < runs.size(); ++r)
      EXPECT_EQ(runs[0], runs[r]) << describe(s) << ", variant " << r;
  }
}

// Attention on cuDNN's fused graphs (KINTSUGI_ATTN_CUDNN=1, attention_cudnn.hpp): every shape
// it is offered is taken (a refusal fails here; cuDNN's reason is on stderr), its forward and
// backward agree with the CPU in f64 within the type's tolerance, and a second run, with the
// deterministic engines it is restricted to, gives the same bits.
TEST_P(CudaDense, AttentionOnCudnn) {
  const Types t = GetParam();
  if ((t.act != DType::bf16 && t.act != DType::f16) || t.stat != DType::f32)
    GTEST_SKIP() << "16-bit qkv with f32 statistics only";
  std::string why;
  if (!cuda::attn_cudnn::usable(&why)) GTEST_SKIP() << "cuDNN: " << why;
  const cuda::attn_cudnn::Mode saved = cuda::attn_cudnn::mode();
  cuda::attn_cudnn::set_mode(cuda::attn_cudnn::Mode::deterministic);
  for (const AttentionShape& s : {AttentionShape{2, 256, 4, 4, 64, 0, 0},
                                  AttentionShape{1, 192, 2, 2, 128, 0, 0},
                                  AttentionShape{3, 70, 12, 12, 64, 0, 0}}) {
    const std::int64_t rows = s.batch * s.seq, width = 3 * s.heads * s.head_dim;
    cuda::AttnShape shape;
    shape.batch = s.batch, shape.seq = s.seq, shape.heads = s.heads, shape.kv_heads = s.kv_heads;
    shape.head_dim = s.head_dim;
    const cuda::Ref qkv_type{nullptr, t.act, 0}, lse_type{nullptr, DType::f32, 0};
    EXPECT_TRUE(cuda::attn_cudnn::takes_forward(shape, qkv_type, lse_type)) << describe(s);
    EXPECT_TRUE(cuda::attn_cudnn::takes_backward(shape, qkv_type, lse_type)) << describe(s);
    Pair qkv = input(t.act, {rows, width});
    check_attention(*this, t, s, s, qkv, describe(s) + " (cuDNN)");
    Pair dout = input(t.act, {rows, s.heads * s.head_dim});
    std::vector<std::vector<double>> runs;
    for (int run = 0; run < 2; ++run) {
      Pair out = output(t.act, {rows, s.heads * s.head_dim});
      Pair lse = output(t.stat, {s.batch, s.heads, s.seq}), dqkv = output(t.act, {rows, width});
      gpu().attention_forward(s, qkv.gpu, out.gpu, lse.gpu);
      gpu().attention_backward(s, qkv.gpu, out.gpu, lse.gpu, dout.gpu, dqkv.gpu);
      runs.push_back(OpTest::fetch(out.gpu));
      runs.push_back(OpTest::fetch(dqkv.gpu));
    }
    EXPECT_EQ(runs[0], runs[2]) << "forward, twice: " << describe(s);
    EXPECT_EQ(runs[1], runs[3]) << "backward, twice: " << describe(s);
  }
  cuda::attn_cudnn::set_mode(saved);
}

// Document starts of two sequences of `seq` rows whose documents end inside a 32-query tile,
// across tiles, at the first and the last row.
std::vector<std::int32_t> document_starts(std::int64_t seq) {
  std::vector<std::int32_t> starts;
  for (const std::vector<int>& ends : {std::vector<int>{0, 5, 33, 40, 69}, std::vector<int>{31, 32, 64}}) {
    std::int32_t start = 0;
    for (std::int64_t r = 0; r < seq; ++r) {
      starts.push_back(start);
      if (std::find(ends.begin(), ends.end(), r) != ends.end()) start = static_cast<std::int32_t>(r + 1);
    }
  }
  return starts;
}

// Document attention: each row sees only its own document's keys (ends inside a 32-query
// tile, across tiles, at the first and the last row) and RoPE restarts at each document.
TEST_P(CudaDense, AttentionWithDocuments) {
  const Types t = GetParam();
  const bool tensor_cores = t.act == DType::bf16 || t.act == DType::f16;
  // The four-tile shapes give full tiles next to document tiles (the last documents span
  // several tiles), for the tensor-core kernels; the CUDA-core ones are covered by the others.
  const AttentionShape shapes[] = {{2, 70, 4, 2, 16, 0, 0},   {2, 70, 4, 4, 8, 4, 0},
                                   {2, 140, 2, 1, 64, 0, 0},  {2, 256, 2, 1, 64, 0, 0},
                                   {2, 200, 2, 2, 32, 2, 0}};
  for (const AttentionVariant& variant : attention_variants(t.act)) {
    const VariantScope scope(variant.v);
    for (const AttentionShape& s : shapes) {
      if (s.seq > 140 && !tensor_cores) continue;
      Pair doc = ids(document_starts(s.seq));
      AttentionShape on_gpu = s, on_cpu = s;
      on_gpu.doc_start = static_cast<const std::int32_t*>(doc.gpu.data);
      on_cpu.doc_start = static_cast<const std::int32_t*>(doc.cpu.data);
      const std::int64_t rows = s.batch * s.seq, width = (s.heads + 2 * s.kv_heads) * s.head_dim;
      Pair qkv = input(t.act, {rows, width});
      gpu().rope(on_gpu, qkv.gpu, 10000.0, false);
      cpu().rope(on_cpu, qkv.cpu, 10000.0, false);
      expect_near(qkv, "rope with documents " + describe(s));
      mirror(qkv);
      check_attention(*this, t, on_gpu, on_cpu, qkv, "with documents " + describe(s) + variant.name);
    }
  }
}

// Sliding-window attention (AttentionShape::window): windows inside a 32-query tile, across
// tiles and not a multiple of the tile sizes (32 on CUDA cores, 64 on tensor cores), alone and
// with documents (a window ending inside a document, a document inside a window); then decode
// with a window, inside the first window and past it.
TEST_P(CudaDense, AttentionWithWindow) {
  const Types t = GetParam();
  const bool tensor_cores = t.act == DType::bf16 || t.act == DType::f16;
  struct Case {
    AttentionShape shape;
    std::int64_t window;
  };
  const Case cases[] = {{{2, 70, 4, 2, 16, 0, 0}, 5},
                        {{2, 70, 4, 2, 16, 4, 0}, 37},
                        {{2, 200, 2, 1, 64, 0, 0}, 37},
                        {{2, 200, 2, 2, 32, 2, 0}, 100}};
  for (const AttentionVariant& variant : attention_variants(t.act)) {
    const VariantScope scope(variant.v);
    for (const Case& c : cases) {
      if (c.shape.seq > 140 && !tensor_cores) continue;
      const Pair doc = ids(document_starts(c.shape.seq));
      for (bool documents : {false, true}) {
        AttentionShape on_gpu = c.shape, on_cpu = c.shape;
        on_gpu.window = on_cpu.window = c.window;
        if (documents) {
          on_gpu.doc_start = static_cast<const std::int32_t*>(doc.gpu.data);
          on_cpu.doc_start = static_cast<const std::int32_t*>(doc.cpu.data);
        }
        const std::int64_t width = (c.shape.heads + 2 * c.shape.kv_heads) * c.shape.head_dim;
        Pair qkv = input(t.act, {c.shape.batch * c.shape.seq, width});
        check_attention(*this, t, on_gpu, on_cpu, qkv,
                        "window " + std::to_string(c.window) + (documents ? " with documents " : " ") +
                            describe(c.shape) + variant.name);
      }
    }
  }
  AttentionShape s{2, 70, 4, 2, 16, 4, 0};
  s.window = 37;
  for (std::int64_t position : {0, 36, 37, 69}) {
    Pair cache = input(t.act, {s.batch * s.seq, (s.heads + 2 * s.kv_heads) * s.head_dim});
    Pair out = output(t.act, {s.batch, s.heads * s.head_dim});
    gpu().attention_decode(s, cache.gpu, position, out.gpu);
    cpu().attention_decode(s, cache.cpu, position, out.cpu);
    expect_near(out, "decode with window 37 at " + std::to_string(position));
  }
}

// Generation: one query row per sequence against the key/value cache, at the first, a middle
// and the last position (rows after it poisoned on the GPU: the kernel must not read them), and
// RoPE of the one new row at its offset.
TEST_P(CudaDense, AttentionDecode) {
  const Types t = GetParam();
  for (const AttentionShape& s : kAttentionShapes)
    for (std::int64_t position : {std::int64_t{0}, s.seq / 2, s.seq - 1}) {
      const std::int64_t rows = s.batch * s.seq, width = (s.heads + 2 * s.kv_heads) * s.head_dim;
      Pair cache = input(t.act, {rows, width});
      for (std::int64_t b = 0; b < s.batch; ++b) {
        const Tensor after = cache.gpu.rows(b * s.seq + position + 1, s.seq - position - 1);
        const std::vector<std::byte> poison(after.bytes(), std::byte{0xff});
        if (after.numel() > 0) copy_from_host(poison.data(), after);
      }
      Pair out = output(t.act, {s.batch, s.heads * s.head_dim});
      gpu().attention_decode(s, cache.gpu, position, out.gpu);
      cpu().attention_decode(s, cache.cpu, position, out.cpu);
      expect_near(out, "decode " + describe(s) + " at " + std::to_string(position));
    }
  for (std::int64_t p : {0, 5, 36}) {
    AttentionShape one{1, 1, 6, 3, 16};
    one.first_position = p;
    Pair qkv = input(t.act, {1, (one.heads + 2 * one.kv_heads) * one.head_dim});
    gpu().rope(one, qkv.gpu, 10000.0, false);
    cpu().rope(one, qkv.cpu, 10000.0, false);
    expect_near(qkv, "rope of one row at " + std::to_string(p));
  }
}

// Ring attention's blocks (Backend::attention_block_forward / _backward): the queries of a
// whole sequence in two runs against the keys in three, the later runs first (a query run's
// first block may see none of its keys), with documents, a window, ALiBi and GQA; the merged
// output and log-sum-exp, then dQ and dK/dV added into random gradients, against the CPU. As
// the ring runs them (model/ring_attention.cpp): queries, keys, values and the output gradient
// in the activations' type, the running state (output, log-sum-exp, dQ and dK/dV sums) in the
// statistics type (f32 under bf16/fp16), backward reading the output rounded to the
// activations' type.
TEST_P(CudaDense, AttentionBlocks) {
  const Types t = GetParam();
  const AttentionShape shapes[] = {{2, 70, 4, 2, 16, 0, 0}, {2, 40, 4, 4, 40, 6, 2},
                                   {1, 35, 2, 1, 72, 0, 0}};
  for (const AttentionShape& base : shapes)
    for (int variant = 0; variant < 3; ++variant) {  // plain, documents, window
      AttentionShape on_gpu = base, on_cpu = base;
      Pair doc = ids(document_starts(base.seq));
      if (variant == 1) {
        on_gpu.doc_start = static_cast<const std::int32_t*>(doc.gpu.data);
        on_cpu.doc_start = static_cast<const std::int32_t*>(doc.cpu.data);
      }
      if (variant == 2) on_gpu.window = on_cpu.window = 9;
      const AttentionShape& s = on_gpu;
      const std::int64_t T = s.seq, rows = s.batch * T, hd = s.head_dim;
      const std::int64_t width = (s.heads + 2 * s.kv_heads) * hd, kv_width = 2 * s.kv_heads * hd;
      const std::string what = describe(s) + (variant == 1 ? " documents" : variant == 2 ? " window" : "");
      Pair qkv = input(t.act, {rows, width});
      Pair kv = output(t.act, {rows, kv_width});
      for (std::int64_t k = 0; k < s.kv_heads; ++k) {
        const std::int64_t col = (k * (s.heads / s.kv_heads + 2) + s.heads / s.kv_heads) * hd;
        gpu().copy_columns(qkv.gpu, col, kv.gpu, k * 2 * hd, 2 * hd);
        cpu().copy_columns(qkv.cpu, col, kv.cpu, k * 2 * hd, 2 * hd);
      }
      Pair out = output(t.stat, {rows, s.heads * hd});
      Pair lse = output(t.stat, {s.batch, s.heads, T});
      const std::int64_t q_split = T / 3, k1 = T / 4, k2 = T / 2;
      const std::int64_t q_runs[][2] = {{0, q_split}, {q_split, T - q_split}};
      const std::int64_t k_runs[][2] = {{k2, T - k2}, {k1, k2 - k1}, {0, k1}};
      auto block = [&](const std::int64_t* q, const std::int64_t* k) {
        return AttentionBlock{.rows = T, .q_begin = q[0], .q_count = q[1], .q_position = q[0],
                              .k_begin = k[0], .k_count = k[1], .k_position = k[0]};
      };
      for (const auto& q : q_runs)
        for (int i = 0; i < 3; ++i) {
          gpu().attention_block_forward(on_gpu, block(q, k_runs[i]), qkv.gpu, kv.gpu, out.gpu, lse.gpu, i > 0);
          cpu().attention_block_forward(on_cpu, block(q, k_runs[i]), qkv.cpu, kv.cpu, out.cpu, lse.cpu, i > 0);
        }
      expect_near(out, "block out " + what);
      expect_near(lse, "block lse " + what);
      Pair kept = output(t.act, {rows, s.heads * hd});  // the output as the model keeps it
      gpu().convert(out.gpu, kept.gpu);
      mirror(kept);
      mirror(lse);
      Pair dout = input(t.act, {rows, s.heads * hd});
      Pair dqkv = output(t.stat, {rows, width}, true);
      Pair dkv = output(t.stat, {rows, kv_width}, true);
      for (const auto& q : q_runs)
        for (const auto& k : k_runs) {
          gpu().attention_block_backward(on_gpu, block(q, k), qkv.gpu, kv.gpu, kept.gpu, lse.gpu,
                                         dout.gpu, dqkv.gpu, dkv.gpu);
          cpu().attention_block_backward(on_cpu, block(q, k), qkv.cpu, kv.cpu, kept.cpu, lse.cpu,
                                         dout.cpu, dqkv.cpu, dkv.cpu);
        }
      expect_near(dqkv, "block dqkv " + what);
      expect_near(dkv, "block dkv " + what);
    }
}

// An i32 tensor the GPU computed holds the CPU's values exactly.
void expect_same_ids(const Pair& p, const std::string& what) {
  std::vector<std::int32_t> got(p.gpu.numel());
  copy_to_host(p.gpu, got.data());
  EXPECT_EQ(got, std::vector<std::int32_t>(p.cpu.as<std::int32_t>(),
                                            p.cpu.as<std::int32_t>() + p.cpu.numel()))
      << what;
}

// The mixture-of-experts ops (moe.cu; docs/moe.md) against the CPU: the router (softmax, top-k,
// gates renormalized or not, the load-balancing and z losses; DeepSeek-style sigmoid scores,
// groups, bias and scale) and its backward, the dispatch
// order, gather, the gate-weighted combine (accumulating) and its backward, and the shared
// expert's gate, with the logits and routed rows in the run's type beside f32 statistics. The
// routing itself is compared exactly: logits far apart enough that no rounding changes a choice.
TEST_P(CudaDense, MixtureOfExperts) {
  const Types t = GetParam();
  const std::int64_t n = 37, e = 6, k = 2, d = 24, m = n * k;
  // Softmax top-k renormalized and not, then DeepSeek-style routing (docs/moe.md): sigmoid
  // scores, 3 groups of 2 of which 2 are kept, a selection bias and a scale of 2.5.
  // The bias is f32 on both sides (the CPU side's other tensors are f64).
  const Pair bias = input(DType::f32, {e}, 0.5);
  std::vector<float> cpu_bias;
  for (double v : fetch(bias.gpu)) cpu_bias.push_back(static_cast<float>(v));
  const Tensor cpu_bias_t{cpu_bias.data(), DType::f32, Shape{e}};
  const std::vector<std::pair<MoeRouting, std::string>> routings = {
      {{.top_k = k, .renormalize = true}, " renormalized"},
      {{.top_k = k, .renormalize = false}, " softmax gates"},
      {{.top_k = k, .renormalize = true, .sigmoid = true, .scale = 2.5, .groups = 3,
        .topk_groups = 2},
       " sigmoid groups bias"}};
  for (const auto& [routing, what] : routings) {
    const bool renormalize = routing.renormalize, plain = routing.groups == 1;
    // Logits spread (scale 4) so that the top 2 differ by more than a 16-bit type's rounding.
    Pair logits = input(t.act, {n, e}, 4.0);
    Pair probs = output(t.stat, {n, e}), lse = output(t.stat, {n}), gates = output(t.stat, {n, k});
    Pair experts = ids(std::vector<std::int32_t>(m, -1));
    experts.gpu = experts.gpu.reshaped({n, k});
    experts.cpu = experts.cpu.reshaped({n, k});
    Pair losses = input(DType::f64, {2}, 0.0);
    if (plain) {
      gpu().moe_route(logits.gpu, k, renormalize, probs.gpu, lse.gpu, experts.gpu, gates.gpu, losses.gpu);
      cpu().moe_route(logits.cpu, k, renormalize, probs.cpu, lse.cpu, experts.cpu, gates.cpu, losses.cpu);
    } else {
      gpu().moe_route(logits.gpu, routing, &bias.gpu, probs.gpu, lse.gpu, experts.gpu, gates.gpu,
                      losses.gpu);
      cpu().moe_route(logits.cpu, routing, &cpu_bias_t, probs.cpu, lse.cpu, experts.cpu, gates.cpu,
                      losses.cpu);
    }
    expect_same_ids(experts, "experts" + what);
    expect_near(probs, "probs" + what);
    expect_near(lse, "lse" + what);
    expect_near(gates, "gates" + what);
    expect_near(losses, "losses" + what, t.stat);
    mirror(probs);
    mirror(lse);
    mirror(gates);
    Pair d_gates = input(t.stat, {n, k}), d_logits = output(t.act, {n, e});
    gpu().moe_route_backward(probs.gpu, lse.gpu, experts.gpu, gates.gpu, d_gates.gpu, routing,
                             0.7, 0.3, d_logits.gpu);
    cpu().moe_route_backward(probs.cpu, lse.cpu, experts.cpu, gates.cpu, d_gates.cpu, routing,
                             0.7, 0.3, d_logits.cpu);
    expect_near(d_logits, "d_logits" + what);
    // The order: grouped by expert, then by choice; its inverse; the counts.
    Pair order = ids(std::vector<std::int32_t>(m, -1)), position = ids(std::vector<std::int32_t>(m, -1));
    Pair counts = ids(std::vector<std::int32_t>(e, -1));
    gpu().moe_dispatch(experts.gpu, order.gpu, position.gpu, counts.gpu);
    cpu().moe_dispatch(experts.cpu, order.cpu, position.cpu, counts.cpu);
    for (Pair* p : {&order, &position, &counts}) expect_same_ids(*p, "dispatch" + what);
    Pair x = input(t.act, {n, d}), xp = output(t.act, {m, d});
    gpu().moe_gather(x.gpu, order.gpu, xp.gpu);
    cpu().moe_gather(x.cpu, order.cpu, xp.cpu);
    expect_near(xp, "gathered rows" + what);
    Pair yp = input(t.act, {m, d}), y = output(t.act, {n, d}, true);
    gpu().moe_combine(yp.gpu, position.gpu, &gates.gpu, y.gpu, true);
    cpu().moe_combine(yp.cpu, position.cpu, &gates.cpu, y.cpu, true);
    expect_near(y, "combined" + what);
    Pair summed = output(t.act, {n, d});  // no weights: the choices' sum (the input's gradient)
    gpu().moe_combine(yp.gpu, position.gpu, nullptr, summed.gpu, false);
    cpu().moe_combine(yp.cpu, position.cpu, nullptr, summed.cpu, false);
    expect_near(summed, "summed" + what);
    Pair dy = input(t.act, {n, d}), d_src = output(t.act, {m, d}), d_w = output(t.stat, {n, k});
    gpu().moe_combine_backward(dy.gpu, yp.gpu, order.gpu, position.gpu, gates.gpu, d_src.gpu, d_w.gpu);
    cpu().moe_combine_backward(dy.cpu, yp.cpu, order.cpu, position.cpu, gates.cpu, d_src.cpu, d_w.cpu);
    expect_near(d_src, "d_src" + what);
    expect_near(d_w, "d_weights" + what, t.act);
  }
  // The counting sort over several tiles of choices (moe.cu sorts 1024 a block): 2,500 choices
  // of 7 experts, one of which no choice names.
  {
    std::vector<std::int32_t> many(2500);
    for (std::size_t c = 0; c < many.size(); ++c) many[c] = static_cast<std::int32_t>((c * 7919 + c / 3) % 6);
    Pair chosen = ids(many), order = ids(std::vector<std::int32_t>(many.size(), -1));
    Pair position = ids(std::vector<std::int32_t>(many.size(), -1));
    Pair counts = ids(std::vector<std::int32_t>(7, -1));
    gpu().moe_dispatch(chosen.gpu, order.gpu, position.gpu, counts.gpu);
    cpu().moe_dispatch(chosen.cpu, order.cpu, position.cpu, counts.cpu);
    for (Pair* p : {&order, &position, &counts}) expect_same_ids(*p, "dispatch over tiles");
  }
  // The shared expert's sigmoid gate, forward (adding into the output) and backward.
  Pair logit = input(t.act, {n, 1}), shared = input(t.act, {n, d}), out = output(t.act, {n, d}, true);
  gpu().moe_shared_gate(logit.gpu, shared.gpu, out.gpu);
  cpu().moe_shared_gate(logit.cpu, shared.cpu, out.cpu);
  expect_near(out, "shared gate");
  Pair dy = input(t.act, {n, d}), d_shared = output(t.act, {n, d}), d_logit = output(t.act, {n, 1});
  gpu().moe_shared_gate_backward(logit.gpu, shared.gpu, dy.gpu, d_shared.gpu, d_logit.gpu);
  cpu().moe_shared_gate_backward(logit.cpu, shared.cpu, dy.cpu, d_shared.cpu, d_logit.cpu);
  expect_near(d_shared, "shared d_out");
  expect_near(d_logit, "shared d_logit");
}

INSTANTIATE_TEST_SUITE_P(Types, CudaDense, ::testing::ValuesIn(gpu_testing::all_types()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace kintsugi
