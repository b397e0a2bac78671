// Backend::copy_columns (backend.hpp) on the CPU against its definition, element by element, in
// every type: offsets on both sides, the whole width, no columns; the other columns of dst keep
// their values; the entry point's checks and the bytes it counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "support/call_log.hpp"

namespace kintsugi {
namespace {

// Element i of a tensor as bytes: distinct for every (tensor, element) whatever the type's size
// (u8 wraps at 256, which the sizes below stay under for src).
std::vector<std::byte> column_bytes(std::int64_t n, std::size_t element, int tensor) {
  std::vector<std::byte> v(static_cast<std::size_t>(n) * element);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::size_t b = 0; b < element; ++b)
      v[static_cast<std::size_t>(i) * element + b] =
          static_cast<std::byte>((b == 0 ? i : i * 7 + tensor * 13 + static_cast<int>(b)) +
                                 tensor * 101);
  return v;
}

struct ColumnCase {
  std::int64_t rows, src_width, src_col, dst_width, dst_col, cols;
};

TEST(CopyColumns, CopiesTheColumnsOfEveryRowInEveryType) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const ColumnCase cases[] = {
      {5, 9, 2, 7, 3, 4},    // offsets on both sides
      {4, 6, 0, 10, 4, 6},   // src's whole width into the middle of dst
      {3, 8, 5, 3, 0, 3},    // the end of src into dst's whole width
      {6, 5, 0, 5, 0, 5},    // whole rows
      {4, 6, 3, 6, 1, 0},    // no columns: dst untouched
      {1, 12, 11, 1, 0, 1},  // one row, one column
  };
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i32, DType::u8})
    for (const ColumnCase& c : cases) {
      const std::size_t es = size_of(dtype);
      std::vector<std::byte> src = column_bytes(c.rows * c.src_width, es, 1);
      std::vector<std::byte> dst = column_bytes(c.rows * c.dst_width, es, 2), before = dst;
      backend->copy_columns(Tensor{src.data(), dtype, Shape{c.rows, c.src_width}}, c.src_col,
                            Tensor{dst.data(), dtype, Shape{c.rows, c.dst_width}}, c.dst_col,
                            c.cols);
      for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t j = 0; j < c.dst_width; ++j) {
          const bool copied = j >= c.dst_col && j < c.dst_col + c.cols;
          const std::byte* want =
              copied ? src.data() + (r * c.src_width + c.src_col + j - c.dst_col) * es
                     : before.data() + (r * c.dst_width + j) * es;
          EXPECT_EQ(std::memcmp(dst.data() + (r * c.dst_width + j) * es, want, es), 0)
              << name_of(dtype) << " rows " << c.rows << " src col " << c.src_col << " dst col "
              << c.dst_col << " cols " << c.cols << ": row " << r << ", column " << j;
        }
    }
}

TEST(CopyColumns, CountsTheCopiedBytesAndChecksItsRanges) {
  MemoryTracker memory;
  auto cpu = make_cpu_backend(memory);
  testing::CallLog backend(*cpu);
  std::vector<float> src(4 * 10), dst(4 * 6);
  const Tensor s{src.data(), DType::f32, Shape{4, 10}}, d{dst.data(), DType::f32, Shape{4, 6}};
  backend.copy_columns(s, 7, d, 1, 3);
  ASSERT_EQ(backend.calls.size(), 1u);
  EXPECT_STREQ(backend.calls[0].name, "copy_columns");
  EXPECT_EQ(backend.calls[0].flops, 0);
  EXPECT_EQ(backend.calls[0].bytes, 2.0 * 4 * 3 * 4);  // 4 rows of 3 floats read and written
  EXPECT_EQ(backend.calls[0].dims, (Shape{4, 3}));

  EXPECT_THROW(backend.copy_columns(s, 8, d, 0, 3), std::logic_error);  // past src's rows
  EXPECT_THROW(backend.copy_columns(s, 0, d, 4, 3), std::logic_error);  // past dst's rows
  EXPECT_THROW(backend.copy_columns(s, -1, d, 0, 1), std::logic_error);
  EXPECT_THROW(backend.copy_columns(s, 0, d, 0, -1), std::logic_error);
  std::vector<float> other(5 * 6);
  EXPECT_THROW(backend.copy_columns(s, 0, Tensor{other.data(), DType::f32, Shape{5, 6}}, 0, 1),
               std::logic_error);  // other rows
  EXPECT_THROW(backend.copy_columns(s, 0, Tensor{dst.data(), DType::i32, Shape{4, 6}}, 0, 1),
               std::logic_error);  // another type
  EXPECT_THROW(backend.copy_columns(Tensor{src.data(), DType::f32, Shape{40}}, 0, d, 0, 1),
               std::logic_error);  // not 2-D
  EXPECT_EQ(backend.calls.size(), 1u);
}

}  // namespace
}  // namespace kintsugi
