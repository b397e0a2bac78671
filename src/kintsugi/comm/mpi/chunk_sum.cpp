#include "kintsugi/comm/mpi/chunk_sum.hpp"

#include <algorithm>
#include <array>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/half.hpp"

namespace kintsugi {

namespace {

// Blocks small enough to stay in L1 while every source is added into them: each source is read
// once, `out` written once, and `out` may alias a source (its block is read before it is written).
constexpr std::int64_t kBlock = 2048;

template <class T>
void sum_plain(std::span<const void* const> sources, void* out, std::int64_t count) {
  if (sources.size() == 2) {  // two ranks: one pass, element for element (alias-safe)
    const T* a = static_cast<const T*>(sources[0]);
    const T* b = static_cast<const T*>(sources[1]);
    T* o = static_cast<T*>(out);
    for (std::int64_t i = 0; i < count; ++i) o[i] = a[i] + b[i];
    return;
  }
  std::array<T, kBlock> acc;
  for (std::int64_t base = 0; base < count; base += kBlock) {
    const std::int64_t n = std::min(kBlock, count - base);
    const T* first = static_cast<const T*>(sources[0]) + base;
    std::copy(first, first + n, acc.begin());
    for (std::size_t s = 1; s < sources.size(); ++s) {
      const T* src = static_cast<const T*>(sources[s]) + base;
      for (std::int64_t i = 0; i < n; ++i) acc[static_cast<std::size_t>(i)] += src[i];
    }
    std::copy(acc.begin(), acc.begin() + n, static_cast<T*>(out) + base);
  }
}

template <float (*to_float)(std::uint16_t), std::uint16_t (*from_float)(float)>
void sum_half(std::span<const void* const> sources, void* out, std::int64_t count) {
  std::array<std::uint16_t, kBlock> acc;
  for (std::int64_t base = 0; base < count; base += kBlock) {
    const std::int64_t n = std::min(kBlock, count - base);
    const auto* first = static_cast<const std::uint16_t*>(sources[0]) + base;
    std::copy(first, first + n, acc.begin());
    for (std::size_t s = 1; s < sources.size(); ++s) {
      const auto* src = static_cast<const std::uint16_t*>(sources[s]) + base;
      for (std::int64_t i = 0; i < n; ++i) {
        auto& a = acc[static_cast<std::size_t>(i)];
        a = from_float(to_float(a) + to_float(src[i]));
      }
    }
    std::copy(acc.begin(), acc.begin() + n, static_cast<std::uint16_t*>(out) + base);
  }
}

}  // namespace

void sum_chunks(DType dtype, std::span<const void* const> sources, void* out,
                std::int64_t count) {
  KINTSUGI_ASSERT(!sources.empty());
  switch (dtype) {
    case DType::f32: return sum_plain<float>(sources, out, count);
    case DType::f64: return sum_plain<double>(sources, out, count);
    case DType::i32: return sum_plain<std::int32_t>(sources, out, count);
    case DType::bf16: return sum_half<bf16_to_float, float_to_bf16>(sources, out, count);
    case DType::f16: return sum_half<f16_to_float, float_to_f16>(sources, out, count);
    case DType::u8: break;
  }
  fail("reductions over {} are not supported", name_of(dtype));
}

}  // namespace kintsugi
