// The bf16 GEMM's blocking, on one and two threads, against a plain reference. Operands hold small
// integers, exact in bf16 and summed exactly in f32, so every result must match bit for bit.
// Each operand ends right before a page that may not be touched: a read past the end of A or B
// (a row tile sticking out of the matrix, a pair past an odd k) kills the test with SIGSEGV.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kintsugi/backend/cpu/convert.hpp"
#include "kintsugi/backend/cpu/gemm_bf16.hpp"

namespace kintsugi::cpu {
namespace {

// `count` values of type T placed so that the byte after the last one is a PROT_NONE page.
template <class T>
class Guarded {
 public:
  explicit Guarded(std::size_t count) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t bytes = count * sizeof(T);
    size_ = (bytes + page - 1) / page * page + page;
    base_ = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(static_cast<char*>(base_) + size_ - page, page, PROT_NONE), 0);
    data_ = reinterpret_cast<T*>(static_cast<char*>(base_) + size_ - page - bytes);
  }
  ~Guarded() { munmap(base_, size_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  T* data() { return data_; }

 private:
  void* base_ = nullptr;
  std::size_t size_ = 0;
  T* data_ = nullptr;
};

struct Case {
  std::int64_t m, n, k;
  bool a_trans, b_trans;
  DType a_dtype;
};

class Bf16Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Gemm, MatchesTheReferenceOnEveryThreadCount) {
  const Case c = GetParam();
  std::mt19937 gen(static_cast<std::uint32_t>(c.m * 131 + c.n * 7 + c.k));
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<float> av(c.m * c.k), bv(c.k * c.n);  // op(A) row-major [m, k], op(B) [k, n]
  for (auto& v : av) v = float(small(gen));
  for (auto& v : bv) v = float(small(gen));

  // A stored as a_dtype (bf16 or f32), B as bf16, each tight against its guard page.
  const std::size_t a_elems = static_cast<std::size_t>(c.m * c.k);
  Guarded<std::uint16_t> a16(c.a_dtype == DType::bf16 ? a_elems : 0);
  Guarded<float> a32(c.a_dtype == DType::f32 ? a_elems : 0);
  Guarded<std::uint16_t> b16(static_cast<std::size_t>(c.k * c.n));
  const std::int64_t lda = c.a_trans ? c.m : c.k, ldb = c.b_trans ? c.k : c.n;
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t p = 0; p < c.k; ++p) {
      const std::int64_t at = c.a_trans ? p * lda + i : i * lda + p;
      if (c.a_dtype == DType::bf16) a16.data()[at] = f32_to_bf16(av[i * c.k + p]);
      else a32.data()[at] = av[i * c.k + p];
    }
  for (std::int64_t p = 0; p < c.k; ++p)
    for (std::int64_t j = 0; j < c.n; ++j)
      b16.data()[c.b_trans ? j * ldb + p : p * ldb + j] = f32_to_bf16(bv[p * c.n + j]);
  const void* a_data = c.a_dtype == DType::bf16 ? static_cast<const void*>(a16.data())
                                                : static_cast<const void*>(a32.data());
  const bf16gemm::Operand a{a_data, c.a_dtype, lda, c.a_trans};
  const bf16gemm::Operand b{b16.data(), DType::bf16, ldb, c.b_trans};

  std::vector<float> expected(c.m * c.n);
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = 0; j < c.n; ++j) {
      float s = 0;
      for (std::int64_t p = 0; p < c.k; ++p) s += av[i * c.k + p] * bv[p * c.n + j];
      expected[i * c.n + j] = 2.0f * s - 1.0f;  // alpha 2, beta 1 over a C of -1
    }
  for (int threads : {1, 2}) {
    std::vector<std::byte> scratch(bf16gemm::scratch_bytes(threads));
    std::vector<float> out(c.m * c.n, -1.0f);
    bf16gemm::gemm(c.m, c.n, c.k, 2.0f, a, b, 1.0f, out.data(), c.n, scratch.data(), threads);
    EXPECT_EQ(out, expected) << threads << " threads";
  }
}

// Row counts that leave a partial 12-row tile (in the last thread's share), column counts that
// leave a partial 32-column panel, odd and even k, k past one 384-deep block, every layout.
INSTANTIATE_TEST_SUITE_P(
    Shapes, Bf16Gemm,
    ::testing::Values(Case{1, 1, 2, false, false, DType::bf16}, Case{13, 33, 8, false, true, DType::bf16},
                      Case{256, 70, 128, false, true, DType::bf16},
                      Case{255, 65, 130, false, false, DType::bf16},
                      Case{37, 40, 401, false, true, DType::bf16},
                      Case{29, 45, 77, false, true, DType::bf16},
                      Case{61, 35, 90, true, false, DType::bf16},
                      Case{50, 31, 391, true, true, DType::bf16},
                      Case{43, 66, 21, false, false, DType::f32},
                      Case{27, 34, 500, true, true, DType::f32}));

}  // namespace
}  // namespace kintsugi::cpu
