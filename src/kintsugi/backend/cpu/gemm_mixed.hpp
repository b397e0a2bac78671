#pragma once
// GEMM with operands and result of any of f32, bf16 and f16 (the linear layers' mixed path):
//   C[m, n] = op(A) . op(B) (+ C when accumulating) (+ bias[n] on every row)
// Precision: when A or B is bf16 the product is bf16 x bf16 with f32 accumulation (the other
// operand is rounded to bf16 while it is packed); otherwise it is an f32 sgemm, f16 operands
// widened (exactly) to f32 first. A result that is not f32 is computed in f32 scratch, then
// rounded once, bias added in the same pass; accumulation widens the existing C first.
#include <cstdint>

#include "kintsugi/backend/cpu/staging.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"

namespace kintsugi::cpu {

// A stored matrix: op(X)[r][c] = trans ? x[c * ld + r] : x[r * ld + c].
struct MatrixRef {
  AnyPtr data;
  std::int64_t ld = 0;
  bool trans = false;
};

// The scratch of gemm_mixed, tracked as workspace and reused from call to call.
class GemmWorkspace {
 public:
  explicit GemmWorkspace(MemoryTracker& memory)
      : pack_(memory), a_(memory), b_(memory), c_(memory), bias_(memory) {}

 private:
  friend void gemm_mixed(std::int64_t, std::int64_t, std::int64_t, const MatrixRef&,
                         const MatrixRef&, AnyPtr, std::int64_t, bool, const AnyPtr*,
                         GemmWorkspace&);
  GrowBuffer pack_;  // bf16 packing
  GrowBuffer a_, b_;  // f16 operands widened to f32
  GrowBuffer c_;      // f32 result rows bound for a bf16/f16 C
  GrowBuffer bias_;   // bias widened to f32
};

// Call outside parallel regions; runs on all compute threads.
void gemm_mixed(std::int64_t m, std::int64_t n, std::int64_t k, const MatrixRef& a,
                const MatrixRef& b, AnyPtr c, std::int64_t ldc, bool accumulate,
                const AnyPtr* bias, GemmWorkspace& ws);

}  // namespace kintsugi::cpu
