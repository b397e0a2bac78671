#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). The value for element i of
// stream s depends only on (seed, s, i), never on what was drawn before. That is what makes runs
// layout-independent: a tensor-parallel shard draws exactly the elements it owns of the serial
// tensor, and a data-parallel rank draws exactly its samples of the serial global batch.
#include <array>
#include <cstdint>
#include <string_view>

namespace kintsugi {

std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_hi,
                                        std::uint64_t counter_lo);

// Uniform in [0, 1) with 53 random bits.
double uniform_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);
// Standard normals: element i is component i % 2 of the Box-Muller pair drawn from Philox
// block i / 2, so a run of consecutive elements costs one block per two numbers.
std::array<double, 2> normal_pair_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t pair);
double normal_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);
// Uniform integer in [0, bound), bound > 0.
std::uint64_t uniform_int_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                             std::uint64_t bound);

// A stable 64-bit stream id for a name ("blocks.3.mlp.fc.weight").
std::uint64_t stream_of(std::string_view name);

}  // namespace kintsugi
