// The memory-bound kernels' typed instantiations (device_math.cuh, Typed; typed_kernels.hpp)
// against the CPU backend in f64: every element type mix they are compiled for, and mixes they
// are not, which fall back to the generic kernels, each run with the typed kernels on and off
// (KINTSUGI_TYPED_KERNELS). Lengths leave tails after the runs of 8 elements, and some tensors
// start off a 16-byte boundary, where no runs are taken at all. Under the emulator the typed and
// generic elementwise kernels must also agree bit for bit: the same arithmetic, the same rounding.
#include "device_testing.hpp"
#include "kintsugi/backend/cuda/typed_kernels.hpp"

namespace kintsugi {
namespace {

using gpu_testing::OpTest;
using gpu_testing::Pair;

// Runs body(typed) with the typed kernels on, then off; restores the setting after.
class BothPaths {
 public:
  BothPaths() : before_(cuda::typed_kernels()) {}
  ~BothPaths() { cuda::set_typed_kernels(before_); }
  template <class F>
  void run(F body) {
    for (bool typed : {true, false}) {
      cuda::set_typed_kernels(typed);
      SCOPED_TRACE(typed ? "typed kernels" : "generic kernels (KINTSUGI_TYPED_KERNELS=0)");
      body(typed);
    }
  }

 private:
  bool before_;
};

// The type whose tolerance bounds a result computed from tensors of these types.
DType coarsest(std::initializer_list<DType> types) {
  DType worst = DType::f64;
  for (DType t : types)
    if (gpu_testing::tolerance(t) > gpu_testing::tolerance(worst)) worst = t;
  return worst;
}

std::string name(std::initializer_list<DType> types) {
  std::string s;
  for (DType t : types) s += (s.empty() ? "" : "/") + std::string(name_of(t));
  return s;
}

constexpr DType f64 = DType::f64, f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;

// ---- norms: activations (x, y, dy, dx), weights (w, b), statistics (mean, rstd), parameter
// gradients (dw, db).
struct NormMix {
  DType act, weight, stat, grad;
};
const NormMix kNormMixes[] = {
    // compiled (NormTypes)
    {f32, f32, f32, f32}, {bf16, bf16, f32, f32}, {bf16, bf16, f32, bf16}, {f16, f16, f32, f32},
    {f16, f16, f32, f16}, {bf16, bf16, bf16, bf16}, {f16, f16, f16, f16}, {f64, f64, f64, f64},
    // not compiled: the generic kernels
    {bf16, bf16, f16, f32}, {f32, f32, f32, bf16}, {bf16, f32, f32, f32}, {f16, bf16, bf16, f32}};

struct RowsColsMisalign {
  std::int64_t rows, cols;
  int misalign;
};
// Rows of one element, odd rows (no runs), 264 = 33 runs (a partial group of 32 lanes' runs),
// GPT-2's 768 over two chunks of rows, 1608 and 3300 (fewer warps per block in the one-kernel
// backward, or the two kernels when its accumulators would not fit), and runs refused because
// the tensors start off a 16-byte boundary.
const RowsColsMisalign kNormShapes[] = {{1, 1, 0},    {3, 5, 0},    {7, 300, 0},  {130, 264, 0},
                                        {70, 768, 0}, {9, 1608, 0}, {3, 3300, 0}, {130, 264, 1}};

void check_norm(OpTest& op, const NormMix& m, const RowsColsMisalign& s, bool rms, bool acc) {
  op.misalign(s.misalign);
  const DType tol = coarsest({m.act, m.weight, m.stat, m.grad});
  const std::string at = std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                         (s.misalign ? " misaligned" : "") + (acc ? " acc" : "");
  Pair x = op.input(m.act, {s.rows, s.cols}, 2.0, 0.5), w = op.input(m.weight, {s.cols}, 0.5, 1.0);
  Pair b = op.input(m.weight, {s.cols});
  Pair y = op.output(m.act, {s.rows, s.cols}), mean = op.output(m.stat, {s.rows});
  Pair rstd = op.output(m.stat, {s.rows});
  if (rms) {
    op.gpu().rmsnorm_forward(x.gpu, w.gpu, y.gpu, rstd.gpu, 1e-6);
    op.cpu().rmsnorm_forward(x.cpu, w.cpu, y.cpu, rstd.cpu, 1e-6);
  } else {
    op.gpu().layernorm_forward(x.gpu, w.gpu, b.gpu, y.gpu, mean.gpu, rstd.gpu, 1e-5);
    op.cpu().layernorm_forward(x.cpu, w.cpu, b.cpu, y.cpu, mean.cpu, rstd.cpu, 1e-5);
    OpTest::expect_near(mean, "mean " + at, tol);
  }
  OpTest::expect_near(y, "y " + at, tol);
  OpTest::expect_near(rstd, "rstd " + at, tol);
  OpTest::mirror(mean);
  OpTest::mirror(rstd);
  Pair dy = op.input(m.act, {s.rows, s.cols}), dx = op.output(m.act, {s.rows, s.cols}, true);
  Pair dw = op.output(m.grad, {s.cols}, acc), db = op.output(m.grad, {s.cols}, acc);
  if (rms) {
    op.gpu().rmsnorm_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, dx.gpu, dw.gpu, acc);
    op.cpu().rmsnorm_backward(dy.cpu, x.cpu, w.cpu, rstd.cpu, dx.cpu, dw.cpu, acc);
  } else {
    op.gpu().layernorm_backward(dy.gpu, x.gpu, w.gpu, mean.gpu, rstd.gpu, dx.gpu, dw.gpu, db.gpu,
                                acc);
    op.cpu().layernorm_backward(dy.cpu, x.cpu, w.cpu, mean.cpu, rstd.cpu, dx.cpu, dw.cpu, db.cpu,
                                acc);
    OpTest::expect_near(db, "db " + at, tol);
  }
  OpTest::expect_near(dx, "dx " + at, tol);
  OpTest::expect_near(dw, "dw " + at, tol);
  op.misalign(0);
}

TEST(CudaTyped, Norms) {
  OpTest op;
  BothPaths paths;
  paths.run([&](bool) {
    for (const NormMix& m : kNormMixes) {
      SCOPED_TRACE(name({m.act, m.weight, m.stat, m.grad}));
      int k = 0;
      for (const RowsColsMisalign& s : kNormShapes)
        for (bool rms : {false, true}) check_norm(op, m, s, rms, ++k % 2 == 0);
    }
  });
}

// ---- elementwise maps. Types of (first inputs, second inputs, outputs).
struct MapMix {
  DType a, b, out;
};
const MapMix kMapMixes[] = {{f32, f32, f32},   {bf16, bf16, bf16}, {f16, f16, f16},
                            {f64, f64, f64},   {bf16, f32, bf16},  {f16, bf16, f32},
                            {f32, f32, f16}};
// One element, a tail alone, runs and a tail, runs alone; then the runs-and-tail length again on
// tensors off a 16-byte boundary.
const std::pair<std::int64_t, int> kMapLengths[] = {{1, 0}, {13, 0}, {301, 0}, {4096, 0},
                                                    {301, 1}};

// Each map's outputs on one path, to compare the two paths.
using Outputs = std::vector<std::vector<double>>;

Outputs check_maps(OpTest& op, const MapMix& m, std::int64_t n, int misalign) {
  op.misalign(misalign);
  const DType tol = coarsest({m.a, m.b, m.out});
  const std::string at = std::to_string(n) + (misalign ? " misaligned" : "");
  Outputs got;
  auto expect = [&](const Pair& p, const std::string& what) {
    OpTest::expect_near(p, what + " " + at, tol);
    got.push_back(OpTest::fetch(p.gpu));
  };
  Pair a = op.input(m.a, {n}, 2.0), b = op.input(m.b, {n}), out = op.output(m.out, {n});
  op.gpu().add(a.gpu, b.gpu, out.gpu);
  op.cpu().add(a.cpu, b.cpu, out.cpu);
  expect(out, "add");
  Pair s = op.input(m.out, {n});
  op.gpu().scale(s.gpu, -0.375);
  op.cpu().scale(s.cpu, -0.375);
  expect(s, "scale");
  Pair g = op.output(m.out, {n});
  op.gpu().gelu_forward(a.gpu, g.gpu);
  op.cpu().gelu_forward(a.cpu, g.cpu);
  expect(g, "gelu");
  Pair dx = op.output(m.out, {n});
  op.gpu().gelu_backward(a.gpu, b.gpu, dx.gpu);
  op.cpu().gelu_backward(a.cpu, b.cpu, dx.cpu);
  expect(dx, "gelu backward");
  Pair sw = op.output(m.out, {n});
  op.gpu().swiglu_forward(a.gpu, b.gpu, sw.gpu);
  op.cpu().swiglu_forward(a.cpu, b.cpu, sw.cpu);
  expect(sw, "swiglu");
  Pair d = op.input(m.b, {n}), dg = op.output(m.out, {n}), du = op.output(m.a, {n});
  op.gpu().swiglu_backward(a.gpu, b.gpu, d.gpu, dg.gpu, du.gpu);
  op.cpu().swiglu_backward(a.cpu, b.cpu, d.cpu, dg.cpu, du.cpu);
  expect(dg, "swiglu dgate");
  expect(du, "swiglu dup");
  Pair sum = op.input(f64, {1});
  op.gpu().sum_squares(a.gpu, sum.gpu);
  op.cpu().sum_squares(a.cpu, sum.cpu);
  // Not compared across the paths: the typed kernel sums runs of 8, another order.
  OpTest::expect_near(sum, "sum of squares " + at, tol);
  if (m.a != f64) {  // f64 to f64 is a copy; f64 with other types: ConvertThroughF64
    Pair c = op.output(m.out, {n});
    op.gpu().convert(a.gpu, c.gpu);
    op.cpu().convert(a.cpu, c.cpu);
    expect(c, "convert");
  }
  op.misalign(0);
  return got;
}

TEST(CudaTyped, ElementwiseMaps) {
  BothPaths paths;
  for (const MapMix& m : kMapMixes) {
    SCOPED_TRACE(name({m.a, m.b, m.out}));
    for (const auto& [n, misalign] : kMapLengths) {
      std::vector<Outputs> by_path;
      paths.run([&, n = n, misalign = misalign](bool) {
        OpTest op;  // a fresh one per path: both draw the same inputs
        by_path.push_back(check_maps(op, m, n, misalign));
      });
#ifdef KINTSUGI_GPU_TESTS_EMULATED
      EXPECT_EQ(by_path[0], by_path[1]) << "typed and generic kernels differ at length " << n;
#endif
    }
  }
}

// x [rows, cols] += bias, and RoPE on every head of a packed qkv: rows of runs of 8, rows with
// tails, and tensors off a 16-byte boundary.
TEST(CudaTyped, BiasAndRope) {
  OpTest op;
  BothPaths paths;
  paths.run([&](bool) {
    for (const MapMix& m : kMapMixes)
      for (const auto& [rows, cols, misalign] :
           {RowsColsMisalign{5, 24, 0}, RowsColsMisalign{5, 13, 0}, RowsColsMisalign{33, 64, 1}}) {
        SCOPED_TRACE(name({m.a, m.b}) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                     (misalign ? " misaligned" : ""));
        op.misalign(misalign);
        Pair x = op.input(m.a, {rows, cols}), bias = op.input(m.b, {cols});
        op.gpu().add_bias(x.gpu, bias.gpu);
        op.cpu().add_bias(x.cpu, bias.cpu);
        OpTest::expect_near(x, "add_bias", coarsest({m.a, m.b}));
        if (m.a == m.b) {  // one tensor: the typed kernel whenever its type is compiled
          const AttentionShape shape{1, 7, 4, 2, 8};
          Pair qkv = op.input(m.a, {7, (4 + 2 * 2) * 8});
          op.gpu().rope(shape, qkv.gpu, 10000.0, false);
          op.cpu().rope(shape, qkv.cpu, 10000.0, false);
          OpTest::expect_near(qkv, "rope");
        }
        op.misalign(0);
      }
  });
}

// convert between f64 and the other types: not compiled typed, so the generic kernel in f64.
TEST(CudaTyped, ConvertThroughF64) {
  OpTest op;
  BothPaths paths;
  paths.run([&](bool) {
    for (DType other : {f32, bf16, f16})
      for (bool to_f64 : {false, true}) {
        const DType from = to_f64 ? other : f64, to = to_f64 ? f64 : other;
        Pair src = op.input(from, {301}, 100.0), dst = op.output(to, {301});
        op.gpu().convert(src.gpu, dst.gpu);
        op.cpu().convert(src.cpu, dst.cpu);
        OpTest::expect_near(dst, name({from, to}), coarsest({from, to}));
      }
  });
}

// AdamW: (param, m and v; grad; working copy).
struct AdamMix {
  DType master, grad, copy;
};
TEST(CudaTyped, AdamW) {
  OpTest op;
  BothPaths paths;
  const AdamMix mixes[] = {{f32, f32, f32},  {f32, f32, bf16}, {f32, bf16, bf16}, {f32, f32, f16},
                           {f32, f16, f16},  {f64, f64, f64},  // compiled (AdamWTypes)
                           {f32, bf16, f16}, {f32, f16, f32}};  // not compiled
  paths.run([&](bool) {
    for (const AdamMix& m : mixes)
      for (const auto& [n, misalign] : kMapLengths)
        for (bool working : {false, true}) {
          if (working && m.master == f64) continue;
          const std::string at = name({m.master, m.grad, m.copy}) + " " + std::to_string(n) +
                                 (misalign ? " misaligned" : "") + (working ? " with copy" : "");
          op.misalign(misalign);
          Pair param = op.input(m.master, {n}), grad = op.input(m.grad, {n});
          Pair mom = op.input(m.master, {n}, 0.1), var = op.input(m.master, {n}, 0.1, 0.5);
          Pair copy = op.output(m.copy, {n});
          const AdamWHyper h{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                             .weight_decay = 0.1, .grad_scale = 0.5, .step = 3};
          op.gpu().adamw_step(param.gpu, grad.gpu, mom.gpu, var.gpu, h, working ? &copy.gpu : nullptr);
          op.cpu().adamw_step(param.cpu, grad.cpu, mom.cpu, var.cpu, h, nullptr);
          OpTest::expect_near(param, "param " + at);
          OpTest::expect_near(mom, "m " + at);
          OpTest::expect_near(var, "v " + at);
          if (working) {
            std::copy_n(param.cpu.as<double>(), n, copy.cpu.as<double>());
            OpTest::expect_near(copy, "working copy " + at);
          }
          op.misalign(0);
        }
  });
}

// Bias gradients (column sums of dy) through linear_backward_weight, and the embeddings'
// gradients: values (activations) and gradients of parameters.
struct ValueGradMix {
  DType value, grad;
};
const ValueGradMix kValueGradMixes[] = {
    {f32, f32}, {bf16, f32}, {f16, f32}, {bf16, bf16}, {f16, f16}, {f64, f64},  // compiled
    {f16, bf16}, {f32, bf16}};                                                 // not compiled

TEST(CudaTyped, ColumnSums) {
  OpTest op;
  BothPaths paths;
  paths.run([&](bool) {
    for (const ValueGradMix& m : kValueGradMixes)
      for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {130, 37}}) {
        for (bool acc : {false, true}) {
          const std::string at = name({m.value, m.grad}) + " " + std::to_string(rows) + "x" +
                                 std::to_string(cols) + (acc ? " acc" : "");
          Pair dy = op.input(m.value, {rows, cols}), x = op.input(m.value, {rows, 3});
          Pair dw = op.output(m.grad, {cols, 3}, acc), db = op.output(m.grad, {cols}, acc);
          op.gpu().linear_backward_weight(dy.gpu, x.gpu, dw.gpu, &db.gpu, acc);
          op.cpu().linear_backward_weight(dy.cpu, x.cpu, dw.cpu, &db.cpu, acc);
          OpTest::expect_near(db, "db " + at, coarsest({m.value, m.grad}));
        }
      }
  });
}

TEST(CudaTyped, Embeddings) {
  OpTest op;
  BothPaths paths;
  std::vector<std::int32_t> tokens(50);
  for (std::int64_t i = 0; i < 50; ++i)
    tokens[i] = static_cast<std::int32_t>(uniform_int_at(7, 1, i, 30));
  tokens[7] = -1;
  paths.run([&](bool) {
    for (const ValueGradMix& m : kValueGradMixes)
      for (const auto& [dim, misalign] : {std::pair<std::int64_t, int>{37, 0}, {64, 0}, {64, 1}})
        for (bool acc : {false, true}) {
          const std::string at = name({m.value, m.grad}) + " dim " + std::to_string(dim) +
                                 (misalign ? " misaligned" : "") + (acc ? " acc" : "");
          const DType tol = coarsest({m.value, m.grad});
          op.misalign(misalign);
          Pair ids = op.ids(tokens), wte = op.input(m.value, {20, dim});
          Pair out = op.output(m.value, {50, dim});
          op.gpu().embedding_forward(ids.gpu, wte.gpu, out.gpu, 5);
          op.cpu().embedding_forward(ids.cpu, wte.cpu, out.cpu, 5);
          OpTest::expect_near(out, "embedding " + at, tol);
          Pair dout = op.input(m.value, {50, dim}), dwte = op.output(m.grad, {20, dim}, acc);
          op.gpu().embedding_backward(ids.gpu, dout.gpu, dwte.gpu, acc, 5);
          op.cpu().embedding_backward(ids.cpu, dout.cpu, dwte.cpu, acc, 5);
          OpTest::expect_near(dwte, "embedding backward " + at, tol);
          Pair x = op.input(m.value, {50, dim}), wpe = op.input(m.value, {20, dim});
          op.gpu().position_embedding_forward(x.gpu, wpe.gpu, 16, 3);
          op.cpu().position_embedding_forward(x.cpu, wpe.cpu, 16, 3);
          OpTest::expect_near(x, "positions " + at, tol);
          Pair dwpe = op.output(m.grad, {20, dim}, acc);
          op.gpu().position_embedding_backward(dout.gpu, dwpe.gpu, 16, acc, 3);
          op.cpu().position_embedding_backward(dout.cpu, dwpe.cpu, 16, acc, 3);
          OpTest::expect_near(dwpe, "positions backward " + at, tol);
          op.misalign(0);
        }
  });
}

// The one-kernel norm backward sums each chunk's rows per warp and then the warps in order: the
// same inputs give the same bits, on the typed kernels and on the generic ones it falls back to.
TEST(CudaTyped, NormBackwardRepeatsBitForBit) {
  BothPaths paths;
  paths.run([&](bool) {
    for (const NormMix& m : {NormMix{bf16, bf16, f32, f32}, NormMix{bf16, f32, f32, f32}}) {
      OpTest op;
      Pair dy = op.input(m.act, {300, 264}), x = op.input(m.act, {300, 264});
      Pair w = op.input(m.weight, {264}), mean = op.input(m.stat, {300});
      Pair rstd = op.input(m.stat, {300}, 0.1, 1.0), start = op.input(m.act, {300, 264});
      std::vector<std::vector<double>> first;
      for (int run = 0; run < 2; ++run) {
        Pair dx = op.output(m.act, {300, 264}), dw = op.output(m.grad, {264});
        Pair db = op.output(m.grad, {264});
        op.gpu().copy(start.gpu, dx.gpu);
        op.gpu().layernorm_backward(dy.gpu, x.gpu, w.gpu, mean.gpu, rstd.gpu, dx.gpu, dw.gpu,
                                    db.gpu, false);
        std::vector<std::vector<double>> got = {OpTest::fetch(dx.gpu), OpTest::fetch(dw.gpu),
                                                OpTest::fetch(db.gpu)};
        if (run == 0)
          first = got;
        else
          EXPECT_EQ(got, first) << name({m.act, m.weight});
      }
    }
  });
}

}  // namespace
}  // namespace kintsugi
