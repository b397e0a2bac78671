// f32 GEMMs that a slowed thread cannot hold up. OpenBLAS splits one GEMM statically between
// its threads, so when another process shares a core with one of them, every GEMM waits for
// that thread: a 2-thread step beside one busy process took 1.9x its quiet time
// (docs/benchmarks.md). Here the product is cut into blocks of C's rows or columns (the longer
// side), at least kMinBlock wide, about kBlocksPerThread per thread; the compute threads take
// blocks as they finish them, each one a single-threaded OpenBLAS call (OpenBLAS runs one
// thread inside a parallel region), so a slowed thread simply takes fewer. Every element of C
// is summed over k in the same order as by one call: results do not depend on the split.
#include <omp.h>

#include <algorithm>
#include <cstdlib>

#include "kintsugi/backend/cpu/math.hpp"

namespace kintsugi::cpu {

namespace {

constexpr std::int64_t kMinBlock = 128;
constexpr std::int64_t kBlocksPerThread = 4;

int balanced_blocks_setting() {
  // KINTSUGI_GEMM_BLOCKS=0 hands every GEMM to OpenBLAS's own threads (for comparison).
  static const int blocks = [] {
    const char* v = std::getenv("KINTSUGI_GEMM_BLOCKS");
    return v ? std::atoi(v) : -1;
  }();
  return blocks;
}

}  // namespace

void sgemm_balanced(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                    float beta, float* c, std::int64_t ldc) {
  const auto op = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  const auto call = [&](std::int64_t mm, std::int64_t nn, const float* aa, const float* bb,
                        float* cc) {
    cblas_sgemm(CblasRowMajor, op(ta), op(tb), mm, nn, k, alpha, aa, lda, bb, ldb, beta, cc, ldc);
  };
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int setting = balanced_blocks_setting();
  const bool split_rows = m >= n;
  const std::int64_t side = split_rows ? m : n;
  std::int64_t blocks = setting >= 0 ? setting : kBlocksPerThread * threads;
  blocks = std::min(blocks, side / kMinBlock);
  if (threads == 1 || blocks < 2 || k == 0) return call(m, n, a, b, c);
  const std::int64_t step = (side + blocks - 1) / blocks;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = 0; i < blocks; ++i) {
    const std::int64_t s0 = i * step, len = std::min(step, side - s0);
    if (len <= 0) continue;
    if (split_rows)  // rows s0.. of op(A) and C
      call(len, n, a + (ta ? s0 : s0 * lda), b, c + s0 * ldc);
    else  // columns s0.. of op(B) and C
      call(m, len, a, b + (tb ? s0 * ldb : s0), c + s0);
  }
}

}  // namespace kintsugi::cpu
