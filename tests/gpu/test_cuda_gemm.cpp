// The CUDA GEMM's epilogues (gemm.hpp) against the CPU backend in f64, fused into cuBLASLt and
// not (GemmOptions), for every precision mix (Types), with accumulation on and off, ragged shapes
// and vectors off their 16-byte boundary. Under the emulator the tests also check that the fused
// form is the one that ran, so that a fusion that silently falls back fails here; on a GPU they
// report how often cuBLASLt took it. Then autotuning: the choice stored, reused by a later
// process bit for bit, never written over the outputs, and the store's rules.
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "device_testing.hpp"
#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/backend/cuda/gemm.hpp"
#include "kintsugi/backend/cuda/gemm_algorithms.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi {
namespace {

using gpu_testing::OpTest;
using gpu_testing::Pair;
using gpu_testing::Mnk;
using gpu_testing::Types;

// The GELU epilogues take 16-bit products only (gemm.cpp).
bool sixteen_bit(DType t) { return t == DType::bf16 || t == DType::f16; }

cuda::Ref ref(const Tensor& x) { return cuda::Ref{x.data, x.dtype, x.numel()}; }

class CudaGemm : public ::testing::TestWithParam<Types>, public OpTest {
 protected:
  cudaStream_t stream() const { return cuda::Context::get().stream(); }
  MemoryTracker memory_;
};

const Mnk kShapes[] = {{1, 1, 1}, {7, 5, 3}, {64, 48, 32}, {33, 129, 70}, {150, 24, 40}};

// How often cuBLASLt took an epilogue that the calls asked for: printed, so that a GPU run shows
// which fusions its cuBLASLt offers (where it does not, the separate kernels ran and the results
// were checked all the same).
void report(const char* epilogue, const Types& t, std::int64_t fused, std::int64_t asked) {
  std::printf("%s (%s): fused into the GEMM in %lld of %lld calls\n", epilogue, t.name().c_str(),
              static_cast<long long>(fused), static_cast<long long>(asked));
}

std::string at(const Mnk& s, bool acc) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
         (acc ? " acc" : "");
}

// dw = dy^T x and db = the column sums of dy (linear_backward_weight), the bias gradient fused
// into the GEMM (BGRADB) or summed by column_sums.
TEST_P(CudaGemm, BiasGradientWithTheWeightGradient) {
  const Types t = GetParam();
  std::int64_t fused = 0, asked = 0;
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
#endif
        fused += n.fused;
        asked += fuse;
      }
  report("bias gradient (BGRADB)", t, fused, asked);
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
      cuda::Gemm gemm(gpu().allocator(), memory_, {.bias_gradient = true});
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

// (m, n, k) of the GELU GEMMs: n, C's width and so the aux matrix's leading dimension, a
// multiple of 8 (the epilogue's requirement) or not.
const Mnk kGeluShapes[] = {{1, 8, 1}, {7, 5, 3}, {64, 48, 32}, {33, 129, 70}, {70, 96, 40}};

// pre = x w^T (+ b), y = gelu(pre): GELU_AUX(_BIAS), or the GEMM into pre and gelu_forward.
TEST_P(CudaGemm, GeluForwardWithTheGemm) {
  const Types t = GetParam();
  std::int64_t fused = 0, asked = 0;
  for (bool fuse : {true, false})
    for (const Mnk& s : kGeluShapes)
      for (bool bias : {false, true}) {
        cuda::Gemm gemm(gpu().allocator(), memory_, {.gelu = fuse});
        Pair x = input(t.act, {s.m, s.k}), w = input(t.act, {s.n, s.k}, 0.5);
        Pair b = input(t.act, {s.n}), pre = output(t.act, {s.m, s.n});
        Pair y = output(t.act, {s.m, s.n});
        gemm.run(s.m, s.n, s.k, ref(x.gpu), false, ref(w.gpu), true, ref(y.gpu), false,
                 {.bias = bias ? ref(b.gpu) : cuda::Ref{},
                  .gelu = cuda::GemmEpilogue::Gelu::forward,
                  .gelu_input = ref(pre.gpu)},
                 stream());
        cpu().linear_gelu_forward(x.cpu, w.cpu, bias ? &b.cpu : nullptr, pre.cpu, y.cpu);
        const std::string what =
            at(s, false) + (bias ? " bias" : "") + (fuse ? " fused" : " separate");
        expect_near(pre, "pre " + what);
        expect_near(y, "y " + what);
        const cuda::Gemm::Counts& n = gemm.counts().gelu_forward;
        EXPECT_EQ(n.fused + n.separate, 1) << what;
        if (!fuse) {
          EXPECT_EQ(n.fused, 0) << what;
        }
#ifdef KINTSUGI_GPU_TESTS_EMULATED
        if (fuse) {
          EXPECT_EQ(n.fused, sixteen_bit(t.act) && s.n % 8 == 0 ? 1 : 0) << what;
        }
#endif
        fused += n.fused;
        asked += fuse && s.n % 8 == 0;
      }
  report("GELU forward (GELU_AUX, GELU_AUX_BIAS; n a multiple of 8)", t, fused, asked);
}

// dx = gelu'(pre) * (dy . w): DGELU, or the GEMM into dx and gelu_backward in place.
TEST_P(CudaGemm, GeluBackwardWithTheGemm) {
  const Types t = GetParam();
  std::int64_t fused = 0, asked = 0;
  for (bool fuse : {true, false})
    for (const Mnk& s : kGeluShapes) {
      // The layer after the GELU: dy [m, k] . w [k, n] gives dx [m, n] (n, dx's width).
      cuda::Gemm gemm(gpu().allocator(), memory_, {.gelu = fuse});
      Pair dy = input(t.act, {s.m, s.k}), w = input(t.act, {s.k, s.n}, 0.5);
      Pair pre = input(t.act, {s.m, s.n}, 2.0), dx = output(t.act, {s.m, s.n});
      gemm.run(s.m, s.n, s.k, ref(dy.gpu), false, ref(w.gpu), false, ref(dx.gpu), false,
               {.gelu = cuda::GemmEpilogue::Gelu::backward, .gelu_input = ref(pre.gpu)},
               stream());
      cpu().linear_backward_input_gelu(dy.cpu, w.cpu, pre.cpu, dx.cpu);
      const std::string what = at(s, false) + (fuse ? " fused" : " separate");
      expect_near(dx, "dx " + what);
      const cuda::Gemm::Counts& n = gemm.counts().gelu_backward;
      EXPECT_EQ(n.fused + n.separate, 1) << what;
#ifdef KINTSUGI_GPU_TESTS_EMULATED
      EXPECT_EQ(n.fused, fuse && sixteen_bit(t.act) && s.n % 8 == 0 ? 1 : 0) << what;
#endif
      fused += n.fused;
      asked += fuse && s.n % 8 == 0;
    }
  report("GELU backward (DGELU; n a multiple of 8)", t, fused, asked);
}

// The backend's ops, whatever the environment chose: the same against the CPU, with a bias
// in f32 against 16-bit activations and a GELU input off its 16-byte boundary (both unfused).
TEST_P(CudaGemm, GeluOpsOfTheBackend) {
  const Types t = GetParam();
  const Mnk s{45, 64, 24};
  for (bool odd : {false, true}) {
    Pair x = input(t.act, {s.m, s.k}), w = input(t.act, {s.n, s.k}, 0.5);
    Pair b = input(odd ? t.stat : t.act, {s.n});
    Pair pre_buffer = output(t.act, {s.m * s.n + 1}), y = output(t.act, {s.m, s.n});
    Pair pre;
    pre.gpu = pre_buffer.gpu.rows(odd ? 1 : 0, s.m * s.n).reshaped({s.m, s.n});
    pre.cpu = pre_buffer.cpu.rows(odd ? 1 : 0, s.m * s.n).reshaped({s.m, s.n});
    gpu().linear_gelu_forward(x.gpu, w.gpu, &b.gpu, pre.gpu, y.gpu);
    cpu().linear_gelu_forward(x.cpu, w.cpu, &b.cpu, pre.cpu, y.cpu);
    const std::string what = odd ? " (f32 bias, misaligned pre)" : "";
    expect_near(pre, "pre" + what);
    expect_near(y, "y" + what);
    Pair dy = input(t.act, {s.m, s.k}), w2 = input(t.act, {s.k, s.n}, 0.5);
    Pair dx = output(t.act, {s.m, s.n});
    mirror(pre_buffer);
    gpu().linear_backward_input_gelu(dy.gpu, w2.gpu, pre.gpu, dx.gpu);
    cpu().linear_backward_input_gelu(dy.cpu, w2.cpu, pre.cpu, dx.cpu);
    expect_near(dx, "dx" + what);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaGemm, ::testing::ValuesIn(gpu_testing::all_types()),
                         [](const auto& info) { return info.param.name(); });

// Same inputs, same bits: the fused epilogues repeat exactly.
TEST(CudaGemmDeterminism, FusedEpiloguesRepeatBitForBit) {
  OpTest op;
  MemoryTracker memory;
  const cudaStream_t stream = cuda::Context::get().stream();
  using Gelu = cuda::GemmEpilogue::Gelu;
  Pair dy = op.input(DType::bf16, {300, 96}), x = op.input(DType::bf16, {300, 64});
  Pair w = op.input(DType::bf16, {96, 64}), b = op.input(DType::bf16, {96});
  std::vector<std::vector<double>> first;
  for (int run = 0; run < 2; ++run) {
    cuda::Gemm gemm(op.gpu().allocator(), memory, {.bias_gradient = true});
    Pair dw = op.output(DType::f32, {96, 64}), db = op.output(DType::f32, {96});
    Pair pre = op.output(DType::bf16, {300, 96}), y = op.output(DType::bf16, {300, 96});
    Pair dx = op.output(DType::bf16, {300, 96});
    gemm.run(96, 64, 300, ref(dy.gpu), true, ref(x.gpu), false, ref(dw.gpu), false,
             {.row_sums = ref(db.gpu)}, stream);
    gemm.run(300, 96, 64, ref(x.gpu), false, ref(w.gpu), true, ref(y.gpu), false,
             {.bias = ref(b.gpu), .gelu = Gelu::forward, .gelu_input = ref(pre.gpu)}, stream);
    gemm.run(300, 96, 64, ref(x.gpu), false, ref(w.gpu), true, ref(dx.gpu), false,
             {.gelu = Gelu::backward, .gelu_input = ref(pre.gpu)}, stream);
    const std::vector<std::vector<double>> got = {OpTest::fetch(dw.gpu), OpTest::fetch(db.gpu),
                                                  OpTest::fetch(pre.gpu), OpTest::fetch(y.gpu),
                                                  OpTest::fetch(dx.gpu)};
    if (run == 0) first = got;
    else EXPECT_EQ(got, first);
  }
}

double gelu_tanh(double v) {
  return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}
double gelu_tanh_grad(double v) {
  const double c = std::sqrt(2.0 / M_PI), t = std::tanh(c * (v + 0.044715 * v * v * v));
  return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * v * v);
}
double gelu_erf(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }

// cuBLASLt documents its epilogue only as "GELU"; ours (backend/cpu/gelu.cpp) is GPT-2's tanh
// approximation. With f32 results the epilogue's GELU and derivative are seen unrounded: each
// must agree with the tanh form within bf16's resolution (2^-8, relative to 1 + the value),
// whatever approximation of tanh the GPU uses; the sigmoid form x sigmoid(1.702 x), 0.02 away,
// would fail. The erf form is within 4.7e-4 of the tanh one, below that bar: the distances to
// both are printed to tell them apart. Under the emulator, whose stand-in computes the tanh
// form in f32, the bar is f32's.
TEST(CudaGemmGelu, EpilogueIsTheTanhApproximation) {
  OpTest op;
  MemoryTracker memory;
  const cudaStream_t stream = cuda::Context::get().stream();
  const std::int64_t m = 64, n = 64, k = 32;
  // pre spreads over about [-6, 6]: both tails and the bend of GELU.
  Pair x = op.input(DType::bf16, {m, k}), w = op.input(DType::bf16, {n, k}, 0.35);
  Pair b = op.input(DType::f32, {n}), pre = op.output(DType::f32, {m, n});
  Pair y = op.output(DType::f32, {m, n}), dx = op.output(DType::f32, {m, n});
  cuda::Gemm gemm(op.gpu().allocator(), memory);
  gemm.run(m, n, k, ref(x.gpu), false, ref(w.gpu), true, ref(y.gpu), false,
           {.bias = ref(b.gpu), .gelu = cuda::GemmEpilogue::Gelu::forward,
            .gelu_input = ref(pre.gpu)},
           stream);
  // dx = gelu'(pre) * (x . v), v [k, n]: the product P on the host in f64 from the same values.
  Pair v = op.input(DType::bf16, {k, n}, 0.35);
  gemm.run(m, n, k, ref(x.gpu), false, ref(v.gpu), false, ref(dx.gpu), false,
           {.gelu = cuda::GemmEpilogue::Gelu::backward, .gelu_input = ref(pre.gpu)}, stream);
  const std::vector<double> p = OpTest::fetch(pre.gpu), got = OpTest::fetch(y.gpu);
  const std::vector<double> got_dx = OpTest::fetch(dx.gpu);
  const std::vector<double> xs = OpTest::values(x.cpu), vs = OpTest::values(v.cpu);
  double tanh_err = 0, erf_err = 0, grad_err = 0, lo = 0, hi = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const double u = p[i * n + j];
      lo = std::min(lo, u);
      hi = std::max(hi, u);
      tanh_err = std::max(tanh_err, std::abs(got[i * n + j] - gelu_tanh(u)) / (1 + std::abs(u)));
      erf_err = std::max(erf_err, std::abs(got[i * n + j] - gelu_erf(u)) / (1 + std::abs(u)));
      double product = 0;
      for (std::int64_t q = 0; q < k; ++q) product += xs[i * k + q] * vs[q * n + j];
      const double want = gelu_tanh_grad(u) * product;
      grad_err = std::max(grad_err, std::abs(got_dx[i * n + j] - want) / (1 + std::abs(product)));
    }
  const cuda::Gemm::EpilogueCounts& c = gemm.counts();
  std::printf("GELU epilogue (fused forward %lld, backward %lld) over pre in [%.2f, %.2f]: "
              "|y - tanh form| <= %.3g, |y - erf form| <= %.3g, |dx - tanh form'| <= %.3g "
              "(relative to 1 + |value|)\n",
              static_cast<long long>(c.gelu_forward.fused),
              static_cast<long long>(c.gelu_backward.fused), lo, hi, tanh_err, erf_err, grad_err);
  RecordProperty("gelu_tanh_error", std::to_string(tanh_err));
  RecordProperty("gelu_erf_error", std::to_string(erf_err));
  EXPECT_LT(lo, -4.0);
  EXPECT_GT(hi, 4.0);
#ifdef KINTSUGI_GPU_TESTS_EMULATED
  const double bar = 1e-5;
  EXPECT_EQ(c.gelu_forward.fused, 1);
  EXPECT_EQ(c.gelu_backward.fused, 1);
#else
  const double bar = 1.0 / 256;
#endif
  EXPECT_LE(tanh_err, bar);
  EXPECT_LE(grad_err, bar);
}

// ---- autotuning

namespace fs = std::filesystem;

// Points the cache directory (XDG_CACHE_HOME) at a fresh one of the test's own.
class CudaGemmTuning : public ::testing::Test, public OpTest {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("XDG_CACHE_HOME")) saved_ = old;
    use_new_cache();
  }
  void TearDown() override {
    ::setenv("XDG_CACHE_HOME", saved_.c_str(), 1);
    std::error_code ec;
    for (const fs::path& d : dirs_) fs::remove_all(d, ec);
  }
  // Another, empty cache directory (as another machine's), or one holding a copy of the current
  // store (as a later process on this machine: the choices this process remembers are keyed by
  // the store's file, so a copy is new to it).
  void use_new_cache(bool copy_store = false) {
    const fs::path store = cuda::AlgorithmStore::file();
    std::string dir = (fs::temp_directory_path() / "kintsugi-tuning-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    dirs_.push_back(dir);
    ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
    if (copy_store) {
      fs::create_directories(cuda::AlgorithmStore::file().parent_path());
      fs::copy_file(store, cuda::AlgorithmStore::file());
    }
  }
  static nlohmann::json stored() {
    std::ifstream in(cuda::AlgorithmStore::file());
    return in ? nlohmann::json::parse(in) : nlohmann::json{};
  }

  MemoryTracker memory_;

 private:
  std::string saved_;
  std::vector<fs::path> dirs_;
};

// The last candidate the heuristic offers times fastest (so the choice is not its first).
double last_is_fastest(int candidate) { return 10.0 - candidate; }

// Four kinds of call, their outputs fetched: a forward with bias, a weight gradient accumulating
// into given values with its bias gradient (checked against the CPU: tuning never writes the
// call's outputs), and the two GELU epilogues.
struct TuningCalls {
  CudaGemmTuning& t;
  Pair x, w, b, dy, dw0, db0;
  explicit TuningCalls(CudaGemmTuning& test)
      : t(test),
        x(t.input(DType::bf16, {96, 64})),
        w(t.input(DType::bf16, {48, 64})),
        b(t.input(DType::bf16, {48})),
        dy(t.input(DType::bf16, {96, 48})),
        dw0(t.input(DType::f32, {48, 64})),
        db0(t.input(DType::f32, {48})) {}
  std::vector<std::vector<double>> run(cuda::Gemm& gemm) {
    using Gelu = cuda::GemmEpilogue::Gelu;
    const cudaStream_t stream = cuda::Context::get().stream();
    Pair y = t.output(DType::bf16, {96, 48}), pre = t.output(DType::bf16, {96, 48});
    Pair act = t.output(DType::bf16, {96, 48}), dx = t.output(DType::bf16, {96, 48});
    Pair dw = t.output(DType::f32, {48, 64}), db = t.output(DType::f32, {48});
    for (auto [from, to] : {std::pair{&dw0, &dw}, std::pair{&db0, &db}}) {
      t.gpu().copy(from->gpu, to->gpu);
      std::copy(from->cpu.as<double>(), from->cpu.as<double>() + from->cpu.numel(),
                to->cpu.as<double>());
    }
    gemm.run(96, 48, 64, ref(x.gpu), false, ref(w.gpu), true, ref(y.gpu), false, ref(b.gpu),
             stream);
    gemm.run(48, 64, 96, ref(dy.gpu), true, ref(x.gpu), false, ref(dw.gpu), true,
             {.row_sums = ref(db.gpu)}, stream);
    gemm.run(96, 48, 64, ref(x.gpu), false, ref(w.gpu), true, ref(act.gpu), false,
             {.bias = ref(b.gpu), .gelu = Gelu::forward, .gelu_input = ref(pre.gpu)}, stream);
    gemm.run(96, 48, 64, ref(x.gpu), false, ref(w.gpu), true, ref(dx.gpu), false,
             {.gelu = Gelu::backward, .gelu_input = ref(pre.gpu)}, stream);
    t.cpu().linear_backward_weight(dy.cpu, x.cpu, dw.cpu, &db.cpu, true);
    OpTest::expect_near(dw, "accumulated dw", DType::bf16);
    OpTest::expect_near(db, "accumulated db", DType::bf16);
    return {OpTest::fetch(y.gpu),   OpTest::fetch(dw.gpu), OpTest::fetch(db.gpu),
            OpTest::fetch(pre.gpu), OpTest::fetch(act.gpu), OpTest::fetch(dx.gpu)};
  }
};

// The first Gemm times each shape's candidates and stores its choices; a later process loads
// them all, times none, and computes the same bits.
TEST_F(CudaGemmTuning, ChoiceIsStoredAndReusedBitForBit) {
  TuningCalls calls(*this);
  cuda::Gemm first(gpu().allocator(), memory_, {});
  first.time_candidates_with(last_is_fastest);
  const auto tuned = calls.run(first);
  const cuda::Gemm::Tuning& t = first.tuning();
  EXPECT_GT(t.tuned + t.single, 0);  // on a GPU, the epilogues cuBLASLt refuses fall back
  EXPECT_EQ(t.loaded, 0);
  std::printf("tuned %d shapes in %.3f s (%d with a single candidate)\n", t.tuned, t.seconds,
              t.single);
  const nlohmann::json j = stored();
  ASSERT_TRUE(j.contains("algorithms"));
  ASSERT_EQ(static_cast<int>(j["algorithms"].size()), t.tuned);
  for (const auto& e : j["algorithms"]) {
    EXPECT_EQ(e["gpu"], cuda::Context::get().device_name());
    EXPECT_EQ(e["chosen"].get<int>(), e["candidates"].get<int>() - 1) << e["shape"];
    EXPECT_GT(e["tuning_ms"].get<double>(), 0.0) << e["shape"];
  }

  // A second Gemm of this process reuses the choices it made.
  cuda::Gemm again(gpu().allocator(), memory_, {});
  EXPECT_EQ(calls.run(again), tuned);
  EXPECT_EQ(again.tuning().tuned, 0);
  EXPECT_EQ(again.tuning().loaded, t.tuned);

  use_new_cache(true);  // a later process
  cuda::Gemm later(gpu().allocator(), memory_, {});
  EXPECT_EQ(calls.run(later), tuned);
  EXPECT_EQ(later.tuning().tuned, 0);
  EXPECT_EQ(later.tuning().loaded, t.tuned);

  cuda::Gemm heuristic(gpu().allocator(), memory_, {.autotune = false});
  const auto first_choice = calls.run(heuristic);
  EXPECT_EQ(heuristic.tuning().tuned + heuristic.tuning().loaded + heuristic.tuning().single, 0);
#ifdef KINTSUGI_GPU_TESTS_EMULATED
  // The stand-in offers 4 candidates, the last summing k in 4 pieces: other bits than the
  // first choice's, so the runs above did use the stored choice.
  EXPECT_EQ(t.tuned, 4);
  EXPECT_NE(first_choice, tuned);
#endif
}

// A stored algorithm that cuBLASLt refuses for its call (another library's, a damaged entry) is
// tuned again and replaced.
TEST_F(CudaGemmTuning, RefusedChoiceIsTunedAgain) {
  TuningCalls calls(*this);
  cuda::Gemm first(gpu().allocator(), memory_, {});
  calls.run(first);
  nlohmann::json j = stored();
  for (auto& e : j["algorithms"]) e["algo"] = std::string(128, '0');
  use_new_cache();
  fs::create_directories(cuda::AlgorithmStore::file().parent_path());
  std::ofstream(cuda::AlgorithmStore::file()) << j.dump();
  cuda::Gemm later(gpu().allocator(), memory_, {});
  calls.run(later);
#ifdef KINTSUGI_GPU_TESTS_EMULATED
  EXPECT_EQ(later.tuning().loaded, 0);
  EXPECT_EQ(later.tuning().tuned, first.tuning().tuned);
  // Kept in a variable: a range-for over stored()["algorithms"] reads a temporary that is gone.
  const nlohmann::json after = stored();
  for (const auto& e : after["algorithms"]) EXPECT_NE(e["algo"], std::string(128, '0'));
#endif
}

// The store: the first choice kept for a shape wins, per GPU, multiprocessor count and library
// version; a stale one is replaced; a damaged file is ignored.
TEST_F(CudaGemmTuning, StoreKeepsTheFirstChoice) {
  const cuda::AlgorithmStore store("GPU A", 132, 130100);
  cuda::TunedAlgorithm mine, theirs;
  mine.algo = {1, 2, 3, 4, 5, 6, 7, 8};
  theirs.algo = {9, 9, 9, 9, 9, 9, 9, 0xffffffffffffffffull};
  EXPECT_FALSE(store.find("shape").has_value());
  EXPECT_EQ(store.store("shape", theirs), theirs.algo);
  EXPECT_EQ(store.store("shape", mine), theirs.algo);  // this process stored first
  use_new_cache(true);  // another process, the file holding theirs
  EXPECT_EQ(store.store("shape", mine), theirs.algo);
  EXPECT_EQ(store.find("shape"), theirs.algo);
  EXPECT_EQ(store.store("shape", mine, theirs.algo), mine.algo);  // theirs refused: replaced
  use_new_cache(true);
  EXPECT_EQ(store.find("shape"), mine.algo);
  for (const cuda::AlgorithmStore& other :
       {cuda::AlgorithmStore("GPU B", 132, 130100), cuda::AlgorithmStore("GPU A", 114, 130100),
        cuda::AlgorithmStore("GPU A", 132, 130200)})
    EXPECT_FALSE(other.find("shape").has_value());
  use_new_cache();
  fs::create_directories(cuda::AlgorithmStore::file().parent_path());
  std::ofstream(cuda::AlgorithmStore::file()) << "{ not json";
  EXPECT_FALSE(store.find("shape").has_value());
  EXPECT_EQ(store.store("shape", mine), mine.algo);
  EXPECT_EQ(stored()["algorithms"].size(), 1u);
}

// The switches turn GELU and tuning off with 0, and the bias gradient's epilogue (opt-in:
// docs/gpu.md) on with 1; unset or empty, each takes its default.
TEST(CudaGemmOptions, SwitchesTurnPartsOff) {
  using Env = std::map<std::string, std::string>;
  cuda::GemmOptions o = cuda::GemmOptions::from(Switches());
  EXPECT_TRUE(!o.bias_gradient && o.gelu && o.autotune);
  o = cuda::GemmOptions::from(Switches(Env{{"KINTSUGI_GEMM_BGRAD", ""}}));
  EXPECT_TRUE(!o.bias_gradient && o.gelu && o.autotune);
  Env env{{"KINTSUGI_GEMM_BGRAD", "1"}, {"KINTSUGI_GEMM_GELU", "1"},
          {"KINTSUGI_GEMM_AUTOTUNE", "1"}};
  o = cuda::GemmOptions::from(Switches(env));
  EXPECT_TRUE(o.bias_gradient && o.gelu && o.autotune);
  env["KINTSUGI_GEMM_GELU"] = "0";
  o = cuda::GemmOptions::from(Switches(env));
  EXPECT_TRUE(o.bias_gradient && !o.gelu && o.autotune);
  env["KINTSUGI_GEMM_BGRAD"] = env["KINTSUGI_GEMM_AUTOTUNE"] = "0";
  o = cuda::GemmOptions::from(Switches(env));
  EXPECT_TRUE(!o.bias_gradient && !o.gelu && !o.autotune);
}

}  // namespace
}  // namespace kintsugi
