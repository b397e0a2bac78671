// The CUDA GEMM's epilogues (gemm.hpp) against the CPU backend in f64, fused into cuBLASLt and
// not (GemmOptions), for every precision mix (Types), with accumulation on and off, ragged shapes
// and vectors off their 16-byte boundary. Under the emulator the tests also check that the fused
// form is the one that ran, so that a fusion that silently falls back fails here; on a GPU they
// report how often cuBLASLt took it.
#include "device_testing.hpp"
#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/backend/cuda/gemm.hpp"

namespace kintsugi {
namespace {

using gpu_testing::OpTest;
using gpu_testing::Pair;
using gpu_testing::Types;

cuda::Ref ref(const Tensor& x) { return cuda::Ref{x.data, x.dtype, x.numel()}; }

class CudaGemm : public ::testing::TestWithParam<Types>, public OpTest {
 protected:
  cudaStream_t stream() const { return cuda::Context::get().stream(); }
  MemoryTracker memory_;
};

struct Mnk {
  std::int64_t m, n, k;
};
const Mnk kShapes[] = {{1, 1, 1}, {7, 5, 3}, {64, 48, 32}, {33, 129, 70}, {150, 24, 40}};

std::string at(const Mnk& s, bool acc) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
         (acc ? " acc" : "");
}

// dw = dy^T x and db = the column sums of dy (linear_backward_weight), the bias gradient fused
// into the GEMM (BGRADB) or summed by column_sums.
TEST_P(CudaGemm, BiasGradientWithTheWeightGradient) {
  const Types t = GetParam();
  for (bool fuse : {true, false})
    for (const Mnk& s : kShapes)
      for (bool acc : {false, true}) {
        cuda::Gemm gemm(gpu().allocator(), memory_, {.bias_gradient = fuse});
        Pair dy = input(t.act, {s.m, s.n}), x = input(t.act, {s.m, s.k});
        Pair dw = output(t.stat, {s.n, s.k}, acc), db = output(t.stat, {s.n}, acc);
        gemm.run(s.n, s.k, s.m, ref(dy.gpu), true, ref(x.gpu), false, ref(dw.gpu), acc,
                 {.row_sums = ref(db.gpu)}, stream());
        cpu().linear_backward_weight(dy.cpu, x.cpu, dw.cpu, &db.cpu, acc);
        const std::string what = at(s, acc) + (fuse ? " fused" : " separate");
        expect_near(dw, "dw " + what, t.act);
        expect_near(db, "db " + what, t.act);
        const cuda::Gemm::Counts& n = gemm.counts().bias_gradient;
        EXPECT_EQ(n.fused + n.separate, 1) << what;
        if (!fuse) {
          EXPECT_EQ(n.fused, 0) << what;
        }
#ifdef KINTSUGI_GPU_TESTS_EMULATED
        // cuBLASLt's stand-in takes BGRADB for every mix with an f32 result (not f64).
        if (fuse) {
          EXPECT_EQ(n.fused, t.act == DType::f64 ? 0 : 1) << what;
        }
#else
        if (fuse && s.m == 150) RecordProperty("bias_gradient_fused_" + t.name(), int(n.fused));
#endif
      }
}

// The bias gradient in another type than f32 or off its 16-byte boundary goes through f32
// scratch; dy in f32 against bf16 x (the product rounds dy) and a 16-bit dw (cuBLASLt would
// write the sums in 16 bits) are summed by column_sums.
TEST_P(CudaGemm, BiasGradientOddTargets) {
  const Types t = GetParam();
  if (t.act == DType::f64) GTEST_SKIP() << "f64 never fuses";
  const Mnk s{45, 40, 24};
  struct Case {
    DType dy, dw, db;
    bool misaligned, fusable;
  };
  const Case cases[] = {{t.act, t.stat, t.act, false, true},
                        {t.act, t.stat, t.stat, true, true},
                        {DType::f32, t.stat, t.stat, false, t.act != DType::bf16},
                        {t.act, t.act, t.stat, false, t.act == DType::f32}};
  for (const Case& k : cases)
    for (bool acc : {false, true}) {
      cuda::Gemm gemm(gpu().allocator(), memory_);
      Pair dy = input(k.dy, {s.m, s.n}), x = input(t.act, {s.m, s.k});
      Pair dw = output(k.dw, {s.n, s.k}, acc), db = output(k.db, {s.n + 1}, acc);
      // One element in: 2 or 4 bytes off the allocation's 256-byte boundary.
      Pair sums;
      sums.gpu = db.gpu.rows(k.misaligned ? 1 : 0, s.n);
      sums.cpu = db.cpu.rows(k.misaligned ? 1 : 0, s.n);
      gemm.run(s.n, s.k, s.m, ref(dy.gpu), true, ref(x.gpu), false, ref(dw.gpu), acc,
               {.row_sums = ref(sums.gpu)}, stream());
      cpu().linear_backward_weight(dy.cpu, x.cpu, dw.cpu, &sums.cpu, acc);
      const std::string what = std::string(name_of(k.dy)) + " dy, " +
                               std::string(name_of(k.dw)) + " dw, " +
                               std::string(name_of(k.db)) + " db" +
                               (k.misaligned ? " misaligned" : "") + (acc ? " acc" : "");
      expect_near(dw, "dw " + what, t.act);
      expect_near(sums, "db " + what, t.act);
#ifdef KINTSUGI_GPU_TESTS_EMULATED
      EXPECT_EQ(gemm.counts().bias_gradient.fused, k.fusable ? 1 : 0) << what;
#endif
    }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaGemm, ::testing::ValuesIn(gpu_testing::all_types()),
                         [](const auto& info) { return info.param.name(); });

// Same inputs, same bits: the fused bias gradient repeats exactly.
TEST(CudaGemmDeterminism, FusedBiasGradientRepeatsBitForBit) {
  OpTest op;
  MemoryTracker memory;
  const cudaStream_t stream = cuda::Context::get().stream();
  Pair dy = op.input(DType::bf16, {300, 96}), x = op.input(DType::bf16, {300, 64});
  std::vector<std::vector<double>> first;
  for (int run = 0; run < 2; ++run) {
    cuda::Gemm gemm(op.gpu().allocator(), memory);
    Pair dw = op.output(DType::f32, {96, 64}), db = op.output(DType::f32, {96});
    gemm.run(96, 64, 300, ref(dy.gpu), true, ref(x.gpu), false, ref(dw.gpu), false,
             {.row_sums = ref(db.gpu)}, stream);
    const std::vector<std::vector<double>> got = {OpTest::fetch(dw.gpu), OpTest::fetch(db.gpu)};
    if (run == 0) first = got;
    else EXPECT_EQ(got, first);
  }
}

}  // namespace
}  // namespace kintsugi
