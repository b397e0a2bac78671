#include "kintsugi/core/rng.hpp"

#include <xxhash.h>

#include <cmath>
#include <numbers>

namespace kintsugi {

std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_hi,
                                        std::uint64_t counter_lo) {
  constexpr std::uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo), c1 = counter_lo >> 32;
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi), c3 = counter_hi >> 32;
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = key >> 32;
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c0;
    std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c2;
    std::uint32_t hi0 = p0 >> 32, lo0 = static_cast<std::uint32_t>(p0);
    std::uint32_t hi1 = p1 >> 32, lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

namespace {
double to_unit(std::uint32_t hi, std::uint32_t lo) {
  std::uint64_t bits = (static_cast<std::uint64_t>(hi) << 21) ^ (lo >> 11);  // 53 bits
  return static_cast<double>(bits & ((1ULL << 53) - 1)) * 0x1.0p-53;
}
}  // namespace

double uniform_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  auto r = philox4x32(seed, stream, index);
  return to_unit(r[0], r[1]);
}

std::array<double, 2> normal_pair_at(std::uint64_t seed, std::uint64_t stream,
                                     std::uint64_t pair) {
  auto r = philox4x32(seed, stream, pair);
  const double u1 = 1.0 - to_unit(r[0], r[1]);  // (0, 1]: log is finite
  const double angle = 2.0 * std::numbers::pi * to_unit(r[2], r[3]);
  const double radius = std::sqrt(-2.0 * std::log(u1));
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

double normal_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return normal_pair_at(seed, stream, index / 2)[index % 2];
}

std::uint64_t uniform_int_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                             std::uint64_t bound) {
  auto r = philox4x32(seed, stream, index);
  std::uint64_t bits = (static_cast<std::uint64_t>(r[0]) << 32) | r[1];
  // Multiply-shift keeps the bias below 2^-64 * bound: negligible for data positions.
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(bits) * bound) >> 64);
}

std::uint64_t stream_of(std::string_view name) { return XXH3_64bits(name.data(), name.size()); }

}  // namespace kintsugi
