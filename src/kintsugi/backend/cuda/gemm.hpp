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
// Algorithms come from cuBLASLt's heuristic once per shape and are reused, so a given shape
// always runs the same kernel: results are reproducible run to run. When cuBLASLt offers no
// algorithm, gemm_simple (kernels.hpp) computes the same product.
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "kintsugi/backend/cuda/kernels.hpp"
#include "kintsugi/backend/cuda/scratch.hpp"

namespace kintsugi::cuda {

class Gemm {
 public:
  Gemm(Allocator& allocator, MemoryTracker& memory);
  ~Gemm();
  void run(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b, bool trans_b,
           Ref c, bool accumulate, Ref bias, cudaStream_t stream);
  // For tests: route every product through gemm_simple.
  void force_simple(bool on) { force_simple_ = on; }

 private:
  struct Plan;
  // Runs D = op(A) op(B) + beta C (+ bias) with cuBLASLt; false if it has no algorithm.
  bool lt_matmul(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
                 bool trans_b, Ref d, bool accumulate, Ref bias, cudaStream_t stream);

  Buffer workspace_;                // cuBLASLt's
  DeviceScratch a_, b_, c_, bias_;  // converted operands, f32 result, f32 bias
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int, int, int, int, int, int, int,
                      int, int, int>,
           std::shared_ptr<Plan>>
      plans_;
  bool force_simple_ = false;
};

}  // namespace kintsugi::cuda
