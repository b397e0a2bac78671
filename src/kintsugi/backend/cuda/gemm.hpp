#pragma once
// Row-major GEMM on the GPU through cuBLASLt, for operands and result of any of f32, bf16, f16
// (or all f64):
//   C[m, n] (+)= op(A) . op(B) (+ bias[n] on every row),  op(X) = X^T when trans
// with the CPU backend's precision rules (backend.hpp): when A or B is bf16 the product is
// bf16 x bf16 with f32 accumulation (the other operand rounded to bf16 first); two f16 operands
// multiply as f16 with f32 accumulation (exact products, as the CPU's widened f32 sgemm); any
// other mix is an f32 GEMM with TF32 off. A result type cuBLASLt cannot write from that product
// goes through f32 scratch, rounded once at the end. The bias is cuBLASLt's fused epilogue.
//
// The epilogue (GemmEpilogue) also takes what the layers around a GEMM would otherwise do in a
// pass of its own over the GEMM's operands or result (docs/gpu.md, "GEMM epilogues"): the bias
// gradient, the row sums of op(A), as cuBLASLt's BGRADB epilogue; GELU after the product
// (GELU_AUX, GELU_AUX_BIAS, keeping its input) and GELU's derivative times the product (DGELU).
// Where cuBLASLt cannot fuse one (types, alignment, f64, no algorithm) or its environment
// switch is 0 (GemmOptions), the product runs alone and the kernel of its own (column_sums,
// gelu_forward, gelu_backward) follows, as before.
//
// Algorithms are chosen once per shape and reused, so a given shape always runs the same kernel:
// results are reproducible run to run (docs/gpu.md, "GEMM algorithms"). With autotuning (the
// default) up to 8 of cuBLASLt's candidates are timed on scratch outputs and the fastest kept,
// stored per GPU model and cuBLASLt version in the cache directory (gemm_algorithms.hpp), which
// every later process reads instead of timing: they all run the same algorithm. With
// KINTSUGI_GEMM_AUTOTUNE=0, cuBLASLt's heuristic's first choice, as before. When cuBLASLt offers
// no algorithm, gemm_simple (kernels.hpp) computes the same product.
#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "kintsugi/backend/cuda/kernels.hpp"
#include "kintsugi/backend/cuda/scratch.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi::cuda {

class AlgorithmStore;
struct TunedAlgorithm;

// What the epilogue adds to the product P = op(A) op(B) (+ C when accumulating). Refs with null
// data are absent.
struct GemmEpilogue {
  Ref bias;  // P += bias[j] on every row
  // The bias gradient: row_sums[i] (+)= sum over p of op(A)[i, p], accumulating when C does.
  // Only with trans_a (A stored [k, m], whose column sums these are).
  Ref row_sums;
  // GELU, with C overwritten (not accumulated) and gelu_input [m, n] like C:
  //   forward:  gelu_input = P (+ bias), then C = gelu(gelu_input)
  //   backward: C = gelu'(gelu_input) * P
  enum class Gelu { none, forward, backward };
  Gelu gelu = Gelu::none;
  Ref gelu_input;
};

// Which fusions run; each one off restores the separate kernel it replaces. From the switches
// (core/switches.hpp): KINTSUGI_GEMM_BGRAD=1 turns the bias-gradient epilogue on (off by
// default: no faster on an H200, docs/gpu.md), KINTSUGI_GEMM_GELU=0 the GELU ones off (fused for
// bf16/f16 results only), KINTSUGI_GEMM_AUTOTUNE=0 the timing of algorithms.
struct GemmOptions {
  bool bias_gradient = true, gelu = true, autotune = true;
  static GemmOptions from(const Switches& switches);
};

class Gemm {
 public:
  Gemm(Allocator& allocator, MemoryTracker& memory,
       GemmOptions options = GemmOptions::from(Switches::process()));
  ~Gemm();
  void run(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b, bool trans_b,
           Ref c, bool accumulate, const GemmEpilogue& epilogue, cudaStream_t stream);
  void run(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b, bool trans_b,
           Ref c, bool accumulate, Ref bias, cudaStream_t stream) {
    run(m, n, k, a, trans_a, b, trans_b, c, accumulate, GemmEpilogue{.bias = bias}, stream);
  }
  // For tests: route every product through gemm_simple.
  void force_simple(bool on) { force_simple_ = on; }
  const GemmOptions& options() const { return options_; }
  // How often each epilogue part ran inside the GEMM, and how often as a kernel of its own.
  struct Counts {
    std::int64_t fused = 0, separate = 0;
  };
  struct EpilogueCounts {
    Counts bias_gradient, gelu_forward, gelu_backward;
  };
  const EpilogueCounts& counts() const { return counts_; }
  // Autotuning's record: shapes whose candidates this Gemm timed (and the seconds that took),
  // shapes whose choice came from the store (made earlier, by this process or another), and
  // shapes with a single candidate (nothing to choose).
  struct Tuning {
    int tuned = 0, loaded = 0, single = 0;
    double seconds = 0;
  };
  const Tuning& tuning() const { return tuning_; }
  // For tests: candidate i's time (0 = the heuristic's first choice) is fake_ms(i) instead of
  // its measured one, so that a test decides which candidate wins.
  void time_candidates_with(double (*fake_ms)(int candidate)) { fake_ms_ = fake_ms; }

 private:
  struct Plan;
  struct LtCall;
  using PlanKey = std::array<std::int64_t, 14>;
  // Runs one call on cuBLASLt; false (nothing enqueued) if it has no algorithm for it.
  bool lt_matmul(const LtCall& call, cudaStream_t stream);
  struct Candidates;
  std::shared_ptr<Plan> make_plan(const LtCall& call, const PlanKey& key, cudaStream_t stream);
  // Times the candidates for the call on scratch outputs and picks the fastest.
  TunedAlgorithm time_candidates(const Plan& plan, const LtCall& call, const Candidates& c,
                                 cudaStream_t stream);
  // The product with the bias gradient or GELU in one cuBLASLt call; false (nothing written)
  // where cuBLASLt cannot take it. a_converted: A is a rounded copy of the caller's.
  bool fused(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
             bool trans_b, Ref c, bool accumulate, const GemmEpilogue& e, bool a_converted,
             cudaStream_t stream);
  bool fused_row_sums(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
                      bool trans_b, Ref c, bool accumulate, const GemmEpilogue& e,
                      cudaStream_t stream);
  // The product (and bias) alone, through cuBLASLt or gemm_simple.
  void product(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
               bool trans_b, Ref c, bool accumulate, Ref bias, cudaStream_t stream);

  GemmOptions options_;
  Allocator& allocator_;
  MemoryTracker& memory_;
  Buffer workspace_;                         // cuBLASLt's
  DeviceScratch a_, b_, c_, bias_, sums_;    // converted operands, f32 result, bias and row sums
  DeviceScratch partials_;                   // column_sums' partial sums
  std::map<PlanKey, std::shared_ptr<Plan>> plans_;
  EpilogueCounts counts_;
  std::unique_ptr<AlgorithmStore> store_;  // with autotuning
  Tuning tuning_;
  double (*fake_ms_)(int) = nullptr;
  bool force_simple_ = false;
};

}  // namespace kintsugi::cuda
