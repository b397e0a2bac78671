// f32 GEMMs that a slowed thread cannot hold up, with the same bits whatever the thread count.
// OpenBLAS splits one GEMM statically between its threads, so when another process shares a
// core with one of them, every GEMM waits for that thread: a 2-thread step beside one busy
// process took 1.9x its quiet time (docs/benchmarks.md). Here the product is cut into blocks of
// C's rows or columns (the longer side); the compute threads take blocks as they finish them,
// each one a single-threaded OpenBLAS call (OpenBLAS runs one thread inside a parallel region),
// so a slowed thread simply takes fewer.
//
// What is guaranteed: the same bits with any number of threads (1 included), on every kernel
// OpenBLAS may pick. The blocks are a function of the shape alone, never of the thread count,
// and each is one single-threaded call with the same arguments whoever runs it; a product too
// small to split is one single-threaded call too. What is not: the bits of one call over the
// whole product. An element's result may depend on where it falls in the kernel's register
// tiles and the driver's panels, which move with the extent of the call: with
// OPENBLAS_CORETYPE=Haswell (or Zen), rows 0-511 of a 1000-row product computed alone differ
// from one call in their last 8 rows, rows 512-999 in nearly all, and columns 0-1151 of 2304
// in columns 888-1151; this machine's own kernels (Cooperlake) gave one call's bits for those
// three, but not for every split. The tests run under several kernel sets
// (tests/CMakeLists.txt).
#include <omp.h>

#include <algorithm>

#include "kintsugi/backend/cpu/math.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi::cpu {

namespace {

// Every block repacks the operand it shares with the others, so narrow blocks cost time even on
// one thread (against one call, on one thread, GPT-2 124M shapes: 3-14% at 128 wide; up to
// 11%, mostly 0-6%, at 256; docs/benchmarks.md), while many blocks balance threads better.
// Blocks are at least kMinBlock wide, at most kMaxBlocks per product, an even number of them
// (2 threads share them exactly), and a multiple of kAlign wide, so that only the last block
// ends in the kernels' narrower edge tiles.
constexpr std::int64_t kMinBlock = 256;
constexpr std::int64_t kMaxBlocks = 32;
constexpr std::int64_t kAlign = 16;

int balanced_blocks_setting() {
  // KINTSUGI_GEMM_BLOCKS=0 hands every GEMM to OpenBLAS's own threads (for comparison; its bits
  // then depend on the thread count); N > 0 asks for N blocks (at most one per kAlign); auto
  // (-1 here) cuts by the shape.
  static const int blocks = [] {
    const auto n = Switches::process().integer(Switch::gemm_blocks);
    return n ? static_cast<int>(*n) : -1;
  }();
  return blocks;
}

// The width of the blocks `side` is cut into: side itself when it is not cut.
std::int64_t block_width(std::int64_t side, int setting) {
  std::int64_t blocks = setting > 0 ? setting : std::min(kMaxBlocks, side / kMinBlock);
  if (blocks < 2) return side;
  if (setting <= 0) blocks -= blocks % 2;
  const std::int64_t width = (side + blocks - 1) / blocks;
  return std::min(side, (width + kAlign - 1) / kAlign * kAlign);
}

// OpenBLAS's thread count for calls from this thread is omp_get_max_threads(); one, for the
// scope of this object.
class OneBlasThread {
 public:
  OneBlasThread() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~OneBlasThread() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int saved_;
};

}  // namespace

void sgemm_balanced(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                    float beta, float* c, std::int64_t ldc) {
  const auto op = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  const auto call = [&](std::int64_t mm, std::int64_t nn, const float* aa, const float* bb,
                        float* cc) {
    cblas_sgemm(CblasRowMajor, op(ta), op(tb), mm, nn, k, alpha, aa, lda, bb, ldb, beta, cc, ldc);
  };
  const int setting = balanced_blocks_setting();
  if (setting == 0 || m == 0 || n == 0) return call(m, n, a, b, c);  // OpenBLAS's own threads
  const bool split_rows = m >= n;
  const std::int64_t side = split_rows ? m : n;
  const std::int64_t width = block_width(side, setting);
  const std::int64_t blocks = (side + width - 1) / width;
  auto block = [&](std::int64_t i) {
    const std::int64_t s0 = i * width, len = std::min(width, side - s0);
    if (split_rows)  // rows s0.. of op(A) and C
      call(len, n, a + (ta ? s0 : s0 * lda), b, c + s0 * ldc);
    else  // columns s0.. of op(B) and C
      call(m, len, a, b + (tb ? s0 * ldb : s0), c + s0);
  };
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads == 1 || blocks == 1) {
    const OneBlasThread one;  // also when called outside a parallel region with many threads
    for (std::int64_t i = 0; i < blocks; ++i) block(i);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = 0; i < blocks; ++i) block(i);
}

}  // namespace kintsugi::cpu
