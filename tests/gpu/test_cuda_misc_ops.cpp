// The CUDA backend's embeddings, cross-entropy, elementwise ops, reductions, AdamW and Lion against the
// CPU backend in f64, copy_columns against the CPU byte for byte, and the determinism of its
// backward reductions.
#include "device_testing.hpp"

namespace kintsugi {
namespace {

using gpu_testing::OpTest;
using gpu_testing::Pair;
using gpu_testing::Types;

class CudaMisc : public ::testing::TestWithParam<Types>, public OpTest {};

std::vector<std::int32_t> random_ids(std::int64_t n, std::int64_t bound, std::uint64_t seed,
                                     std::int32_t offset = 0) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[i] = static_cast<std::int32_t>(uniform_int_at(seed, 1, i, bound)) + offset;
  return v;
}

// A vocabulary shard [5, 25) of a 30-token vocabulary: ids below, inside (repeated) and above it,
// and an ignored position (-1).
TEST_P(CudaMisc, TokenEmbedding) {
  const Types t = GetParam();
  for (std::int64_t dim : {1, 37, 64})
    for (bool acc : {false, true}) {
      std::vector<std::int32_t> tokens = random_ids(50, 30, dim);
      tokens[7] = -1;
      Pair ids = this->ids(tokens), wte = input(t.act, {20, dim}), out = output(t.act, {50, dim});
      gpu().embedding_forward(ids.gpu, wte.gpu, out.gpu, 5);
      cpu().embedding_forward(ids.cpu, wte.cpu, out.cpu, 5);
      expect_near(out, "embedding " + std::to_string(dim));
      Pair dout = input(t.act, {50, dim}), dwte = output(t.stat, {20, dim}, acc);
      gpu().embedding_backward(ids.gpu, dout.gpu, dwte.gpu, acc, 5);
      cpu().embedding_backward(ids.cpu, dout.cpu, dwte.cpu, acc, 5);
      expect_near(dwte, "embedding backward " + std::to_string(dim) + (acc ? " acc" : ""), t.act);
    }
}

TEST_P(CudaMisc, PositionEmbedding) {
  const Types t = GetParam();
  for (std::int64_t first_row : {0, 5})
    for (bool acc : {false, true}) {
      Pair x = input(t.act, {70, 24}), wpe = input(t.act, {20, 24});
      gpu().position_embedding_forward(x.gpu, wpe.gpu, 16, first_row);
      cpu().position_embedding_forward(x.cpu, wpe.cpu, 16, first_row);
      expect_near(x, "positions");
      Pair dx = input(t.act, {70, 24}), dwpe = output(t.stat, {20, 24}, acc);
      gpu().position_embedding_backward(dx.gpu, dwpe.gpu, 16, acc, first_row);
      cpu().position_embedding_backward(dx.cpu, dwpe.cpu, 16, acc, first_row);
      expect_near(dwpe, "positions backward" + std::string(acc ? " acc" : ""), t.act);
    }
}

// The three passes on a vocabulary shard: logits [rows, cols] hold columns [col_begin, ...), the
// last cols - valid are padding; targets below, inside and above the shard, and ignored ones.
TEST_P(CudaMisc, CrossEntropy) {
  const Types t = GetParam();
  struct Case {
    std::int64_t rows, cols, valid, col_begin;
  };
  for (const Case& c : {Case{1, 5, 5, 0}, Case{13, 130, 120, 40}, Case{64, 1000, 997, 0}})
    for (bool backward : {false, true}) {
      std::vector<std::int32_t> targets = random_ids(c.rows, c.valid + 80, c.cols, -40);
      targets[0] = c.rows > 1 ? -1 : static_cast<std::int32_t>(c.col_begin);
      const std::string at = std::to_string(c.rows) + "x" + std::to_string(c.cols) +
                             (backward ? " backward" : "");
      Pair ids = this->ids(targets), logits = input(t.stat, {c.rows, c.cols}, 3.0);
      Pair row_max = output(t.stat, {c.rows}), row_sum = output(t.stat, {c.rows});
      Pair target = output(t.stat, {c.rows});
      gpu().softmax_row_max(logits.gpu, c.valid, row_max.gpu);
      cpu().softmax_row_max(logits.cpu, c.valid, row_max.cpu);
      expect_near(row_max, "row max " + at);
      mirror(row_max);
      gpu().softmax_row_sum(logits.gpu, c.valid, row_max.gpu, ids.gpu, c.col_begin, row_sum.gpu,
                            target.gpu, backward);
      cpu().softmax_row_sum(logits.cpu, c.valid, row_max.cpu, ids.cpu, c.col_begin, row_sum.cpu,
                            target.cpu, backward);
      expect_near(row_sum, "row sum " + at);
      expect_near(target, "target logit " + at);
      if (backward) expect_near(logits, "exponentials " + at);
      mirror(row_sum);
      mirror(target);
      mirror(logits);
      Pair loss = input(DType::f64, {1});  // accumulates onto what it holds
      gpu().cross_entropy_finish(logits.gpu, c.valid, row_max.gpu, row_sum.gpu, target.gpu,
                                 ids.gpu, c.col_begin, loss.gpu, backward, 0.25);
      cpu().cross_entropy_finish(logits.cpu, c.valid, row_max.cpu, row_sum.cpu, target.cpu,
                                 ids.cpu, c.col_begin, loss.cpu, backward, 0.25);
      expect_near(loss, "loss sum " + at, t.stat);
      if (backward) expect_near(logits, "logit gradient " + at);
    }
}

// The bits of -inf in a float type (all bits set is NaN in every one).
std::vector<std::byte> neg_inf_bits(DType t) {
  switch (t) {
    case DType::f64: {
      const std::uint64_t b = 0xfff0000000000000ull;
      std::vector<std::byte> v(8);
      std::memcpy(v.data(), &b, 8);
      return v;
    }
    case DType::f32: {
      const std::uint32_t b = 0xff800000u;
      std::vector<std::byte> v(4);
      std::memcpy(v.data(), &b, 4);
      return v;
    }
    default: {
      const std::uint16_t b = t == DType::bf16 ? 0xff80 : 0xfc00;
      std::vector<std::byte> v(2);
      std::memcpy(v.data(), &b, 2);
      return v;
    }
  }
}

// The fused loss (whole vocabulary) in the logits' own type: rows whose length is whole 16-byte
// runs (the vector path) and ragged ones (element by element), blocks from 32 to 1024 threads,
// runs straddling the last real column. Padding columns and the rows of ignored targets hold
// NaN, so a kernel that reads them spoils the loss and one that does not write them fails the
// gradient; a row starting with -inf logits takes the online maximum from -inf.
TEST_P(CudaMisc, CrossEntropyFused) {
  const Types t = GetParam();
  struct Case {
    std::int64_t rows, cols, valid;
  };
  for (const Case& c : {Case{1, 1, 1}, Case{3, 5, 5}, Case{13, 130, 120}, Case{7, 1000, 997},
                        Case{5, 1024, 1024}, Case{3, 8200, 8193}, Case{3, 8197, 8190}})
    for (bool backward : {false, true}) {
      std::vector<std::int32_t> targets = random_ids(c.rows, c.valid, c.cols);
      if (c.rows > 1) targets[1] = -1;
      if (c.rows > 2) targets[2] = static_cast<std::int32_t>(c.valid - 1);
      if (c.rows > 3) targets[3] = 0;
      if (c.rows > 4) targets[c.rows - 1] = -3;
      const std::string at = std::string(name_of(t.act)) + " " + std::to_string(c.rows) + "x" +
                             std::to_string(c.cols) + " valid " + std::to_string(c.valid) +
                             (backward ? " backward" : "");
      Pair ids = this->ids(targets), logits = input(t.act, {c.rows, c.cols}, 3.0);
      const std::size_t es = size_of(t.act);
      std::vector<std::byte> bytes(logits.gpu.bytes());
      copy_to_host(logits.gpu, bytes.data());
      auto put = [&](std::int64_t r, std::int64_t j, const std::vector<std::byte>& v) {
        std::memcpy(bytes.data() + (r * c.cols + j) * es, v.data(), es);
      };
      const std::vector<std::byte> nan(es, std::byte{0xff}), minus_inf = neg_inf_bits(t.act);
      for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t j = 0; j < c.cols; ++j)
          if (targets[r] < 0 || j >= c.valid) put(r, j, nan);
      if (c.valid >= 64 && targets[0] >= 40)
        for (std::int64_t j = 0; j < 40; ++j) put(0, j, minus_inf);
      copy_from_host(bytes.data(), logits.gpu);
      mirror(logits);
      Pair loss = input(DType::f64, {1});  // accumulates onto what it holds
      gpu().cross_entropy_fused(logits.gpu, c.valid, ids.gpu, loss.gpu, backward, 0.25);
      cpu().cross_entropy_fused(logits.cpu, c.valid, ids.cpu, loss.cpu, backward, 0.25);
      expect_near(loss, "loss sum " + at, t.stat);
      if (backward) {
        expect_near(logits, "logit gradient " + at);
      } else {
        std::vector<std::byte> after(bytes.size());
        copy_to_host(logits.gpu, after.data());
        EXPECT_EQ(after, bytes) << "forward changed the logits: " << at;
      }
    }
}

// The fused loss gives the three passes' loss and gradient on the GPU too (logits in the
// compute type, statistics in f32, as LmHead runs the two paths).
TEST_P(CudaMisc, CrossEntropyFusedMatchesThreePasses) {
  const Types t = GetParam();
  const std::int64_t rows = 6, cols = 2056, valid = 2050;
  std::vector<std::int32_t> targets = random_ids(rows, valid, 5);
  targets[4] = -1;
  Pair ids = this->ids(targets), fused = input(t.act, {rows, cols}, 3.0);
  Pair three = output(t.act, {rows, cols});
  gpu().copy(fused.gpu, three.gpu);
  Pair row_max = output(t.stat, {rows}), row_sum = output(t.stat, {rows});
  Pair target = output(t.stat, {rows}), loss = output(DType::f64, {1}), loss3 = output(DType::f64, {1});
  gpu().zero(loss.gpu);
  gpu().zero(loss3.gpu);
  gpu().cross_entropy_fused(fused.gpu, valid, ids.gpu, loss.gpu, true, 0.5);
  gpu().softmax_row_max(three.gpu, valid, row_max.gpu);
  gpu().softmax_row_sum(three.gpu, valid, row_max.gpu, ids.gpu, 0, row_sum.gpu, target.gpu, true);
  gpu().cross_entropy_finish(three.gpu, valid, row_max.gpu, row_sum.gpu, target.gpu, ids.gpu, 0,
                             loss3.gpu, true, 0.5);
  const std::vector<double> l = OpTest::fetch(loss.gpu), l3 = OpTest::fetch(loss3.gpu);
  EXPECT_NEAR(l[0], l3[0], gpu_testing::tolerance(t.stat) * std::abs(l3[0]));
  const std::vector<double> g = OpTest::fetch(fused.gpu), g3 = OpTest::fetch(three.gpu);
  double scale = 0, err = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    scale = std::max(scale, std::abs(g3[i]));
    err = std::max(err, std::abs(g[i] - g3[i]));
  }
  EXPECT_LE(err, 2 * gpu_testing::tolerance(t.act) * scale) << name_of(t.act);
}

TEST_P(CudaMisc, Elementwise) {
  const Types t = GetParam();
  for (std::int64_t n : {1, 3, 4096, 70001}) {
    const std::string at = std::to_string(n);
    Pair a = input(t.act, {n}), b = input(t.act, {n}), out = output(t.act, {n});
    gpu().add(a.gpu, b.gpu, out.gpu);
    cpu().add(a.cpu, b.cpu, out.cpu);
    expect_near(out, "add " + at);
    gpu().add(a.gpu, b.gpu, b.gpu);  // out aliasing b (the residual stream)
    cpu().add(a.cpu, b.cpu, b.cpu);
    expect_near(b, "add in place " + at);
    gpu().scale(a.gpu, -0.375);
    cpu().scale(a.cpu, -0.375);
    expect_near(a, "scale " + at);
    Pair copy = output(t.act, {n}), zero = input(t.act, {n});
    gpu().copy(a.gpu, copy.gpu);
    cpu().copy(a.cpu, copy.cpu);
    expect_near(copy, "copy " + at);
    gpu().zero(zero.gpu);
    cpu().zero(zero.cpu);
    EXPECT_EQ(fetch(zero.gpu), std::vector<double>(n, 0.0)) << "zero " << at;
    Pair sum = input(DType::f64, {1});
    gpu().sum_squares(a.gpu, sum.gpu);
    cpu().sum_squares(a.cpu, sum.cpu);
    expect_near(sum, "sum of squares " + at, t.act);
  }
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {33, 129}}) {
    Pair x = input(t.act, {rows, cols}), bias = input(t.act, {cols});
    gpu().add_bias(x.gpu, bias.gpu);
    cpu().add_bias(x.cpu, bias.cpu);
    expect_near(x, "add_bias");
  }
}

// copy_columns is one strided copy (cudaMemcpy2DAsync): the GPU's dst equals the CPU's byte for
// byte in every type, with offsets on both sides, the whole width and no columns, from and into
// tensors that start off any 16-byte boundary; dst's other columns keep their bytes.
TEST(CudaCopyColumns, MatchesTheCpuByteForByte) {
  OpTest op;
  struct Columns {
    std::int64_t rows, src_width, src_col, dst_width, dst_col, cols;
  };
  const Columns cases[] = {{7, 13, 3, 9, 2, 5}, {4, 6, 0, 10, 4, 6}, {3, 8, 5, 3, 0, 3},
                           {5, 5, 0, 5, 0, 5},  {4, 6, 3, 6, 1, 0},  {1, 12, 11, 1, 0, 1}};
  std::vector<Buffer> buffers;
  // The same bytes in a tensor of each backend, the GPU's `skip` elements into its buffer.
  auto both = [&](DType dtype, Shape shape, std::int64_t skip, int seed) {
    const std::size_t es = size_of(dtype), n = static_cast<std::size_t>(shape.numel());
    std::vector<std::byte> bytes(n * es);
    for (std::size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<std::byte>(i * 37 + static_cast<std::size_t>(seed) * 11 + i / 7);
    buffers.push_back(op.gpu().allocate(MemoryKind::workspace, (n + 1) * es));
    const Tensor gpu = buffers.back().view(dtype, shape, static_cast<std::size_t>(skip) * es);
    buffers.push_back(op.cpu().allocate(MemoryKind::workspace, n * es));
    const Tensor cpu = buffers.back().view(dtype, shape);
    copy_from_host(bytes.data(), gpu);
    std::memcpy(cpu.data, bytes.data(), bytes.size());
    return std::pair{gpu, cpu};
  };
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i32, DType::u8})
    for (const Columns& c : cases)
      for (std::int64_t skip : {0, 1}) {
        const auto [src_gpu, src_cpu] = both(dtype, {c.rows, c.src_width}, skip, 1);
        const auto [dst_gpu, dst_cpu] = both(dtype, {c.rows, c.dst_width}, 1 - skip, 2);
        op.gpu().copy_columns(src_gpu, c.src_col, dst_gpu, c.dst_col, c.cols);
        op.cpu().copy_columns(src_cpu, c.src_col, dst_cpu, c.dst_col, c.cols);
        std::vector<std::byte> got(dst_gpu.bytes());
        copy_to_host(dst_gpu, got.data());
        EXPECT_EQ(std::memcmp(got.data(), dst_cpu.data, got.size()), 0)
            << name_of(dtype) << " rows " << c.rows << ", columns [" << c.src_col << ", "
            << c.src_col + c.cols << ") of " << c.src_width << " to " << c.dst_col << " of "
            << c.dst_width << ", skip " << skip;
      }
}

// Every pair of float types (f64 with itself only: backend.hpp).
TEST(CudaConvert, EveryPairOfTypes) {
  OpTest op;
  for (DType from : {DType::f32, DType::bf16, DType::f16})
    for (DType to : {DType::f32, DType::bf16, DType::f16}) {
      Pair src = op.input(from, {1001}, 100.0), dst = op.output(to, {1001});
      op.gpu().convert(src.gpu, dst.gpu);
      // Rounded to nearest even, as the host rounds (core/half.hpp).
      Pair want = op.output(to, {1001});
      std::vector<float> values(1001);
      for (int i = 0; i < 1001; ++i) values[i] = static_cast<float>(src.cpu.as<double>()[i]);
      write_values(values.data(), want.gpu);  // host rounding
      EXPECT_EQ(OpTest::fetch(dst.gpu), OpTest::fetch(want.gpu))
          << name_of(from) << " to " << name_of(to);
    }
}

TEST_P(CudaMisc, AdamW) {
  const Types t = GetParam();
  const DType master = t.act == DType::f64 ? DType::f64 : DType::f32;
  for (std::int64_t n : {1, 1000, 70001})
    for (bool working : {false, true}) {
      if (working && master == DType::f64) continue;
      Pair param = input(master, {n}), grad = input(t.stat, {n}), m = input(master, {n}, 0.1);
      Pair v = input(master, {n}, 0.1, 0.5), copy = output(t.act, {n});
      const AdamWHyper h{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                         .weight_decay = 0.1, .grad_scale = 0.5, .step = 3};
      gpu().adamw_step(param.gpu, grad.gpu, m.gpu, v.gpu, h, working ? &copy.gpu : nullptr);
      cpu().adamw_step(param.cpu, grad.cpu, m.cpu, v.cpu, h, nullptr);
      const std::string at = std::to_string(n) + (working ? " with working copy" : "");
      expect_near(param, "param " + at);
      expect_near(m, "m " + at);
      expect_near(v, "v " + at);
      if (working) {
        std::copy_n(param.cpu.as<double>(), n, copy.cpu.as<double>());
        expect_near(copy, "working copy " + at);
      }
    }
}

// Lion in every type mix it takes (f32 master weights and moment with a gradient in f32 or the
// weights' 16-bit type, a working copy or none; all f64), ragged lengths, poisoned outputs.
TEST_P(CudaMisc, Lion) {
  const Types t = GetParam();
  const DType master = t.act == DType::f64 ? DType::f64 : DType::f32;
  for (std::int64_t n : {1, 1000, 70001})
    for (bool working : {false, true}) {
      if (working && master == DType::f64) continue;
      Pair param = input(master, {n}), grad = input(t.stat, {n}), m = input(master, {n}, 0.1);
      Pair copy = output(t.act, {n});
      const LionHyper h{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                        .grad_scale = 0.5};
      gpu().lion_step(param.gpu, grad.gpu, m.gpu, h, working ? &copy.gpu : nullptr);
      cpu().lion_step(param.cpu, grad.cpu, m.cpu, h, nullptr);
      const std::string at = std::to_string(n) + (working ? " with working copy" : "");
      expect_near(param, "lion param " + at);
      expect_near(m, "lion m " + at);
      if (working) {
        std::copy_n(param.cpu.as<double>(), n, copy.cpu.as<double>());
        expect_near(copy, "lion working copy " + at);
      }
    }
}

// Same inputs, same bits: the backward reductions have a fixed order.
TEST(CudaDeterminism, BackwardReductionsRepeatBitForBit) {
  OpTest op;
  const AttentionShape s{2, 45, 4, 2, 16};
  Pair qkv = op.input(DType::bf16, {90, 8 * 16}), out = op.output(DType::bf16, {90, 64});
  Pair lse = op.output(DType::f32, {2, 4, 45}), dout = op.input(DType::bf16, {90, 64});
  std::vector<std::int32_t> tokens = random_ids(300, 7, 1);  // many repeats
  Pair ids = op.ids(tokens), dx = op.input(DType::bf16, {300, 96});
  Pair x = op.input(DType::bf16, {300, 96}), w = op.input(DType::bf16, {96});
  Pair mean = op.input(DType::f32, {300}), rstd = op.input(DType::f32, {300}, 0.1, 1.0);
  std::vector<std::vector<double>> first;
  for (int run = 0; run < 2; ++run) {
    Pair dqkv = op.output(DType::bf16, {90, 8 * 16}), dwte = op.output(DType::f32, {7, 96});
    Pair ddx = op.output(DType::bf16, {300, 96}, false), dw = op.output(DType::f32, {96});
    Pair db = op.output(DType::f32, {96}), sum = op.output(DType::f64, {1});
    op.gpu().zero(ddx.gpu);
    op.gpu().zero(sum.gpu);
    op.gpu().attention_forward(s, qkv.gpu, out.gpu, lse.gpu);
    op.gpu().attention_backward(s, qkv.gpu, out.gpu, lse.gpu, dout.gpu, dqkv.gpu);
    op.gpu().embedding_backward(ids.gpu, dx.gpu, dwte.gpu, false, 0);
    op.gpu().layernorm_backward(dx.gpu, x.gpu, w.gpu, mean.gpu, rstd.gpu, ddx.gpu, dw.gpu, db.gpu,
                                false);
    op.gpu().sum_squares(dx.gpu, sum.gpu);
    std::vector<std::vector<double>> got = {OpTest::fetch(dqkv.gpu), OpTest::fetch(dwte.gpu),
                                            OpTest::fetch(ddx.gpu),  OpTest::fetch(dw.gpu),
                                            OpTest::fetch(db.gpu),   OpTest::fetch(sum.gpu)};
    if (run == 0) first = got;
    else EXPECT_EQ(got, first);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaMisc, ::testing::ValuesIn(gpu_testing::all_types()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace kintsugi
