#pragma once
// cub::DeviceRadixSort::SortPairs for the CPU emulator: a stable sort by key (what CUB's radix
// sort is), on host memory.
#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

#include "cuda_runtime.h"

namespace cub {

struct DeviceRadixSort {
  static constexpr std::size_t kTempBytes = 64;
  template <class Key, class Value, class Count>
  static cudaError_t SortPairs(void* temp, std::size_t& temp_bytes, const Key* keys_in,
                               Key* keys_out, const Value* values_in, Value* values_out,
                               Count count, int begin_bit = 0, int end_bit = sizeof(Key) * 8,
                               cudaStream_t stream = 0) {
    if (!temp) {
      temp_bytes = kTempBytes;
      return cudaSuccess;
    }
    if (temp_bytes < kTempBytes || begin_bit != 0 || end_bit != int(sizeof(Key) * 8))
      return cudaErrorInvalidValue;
    std::vector<std::size_t> order(static_cast<std::size_t>(count));
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return keys_in[a] < keys_in[b]; });
    std::vector<Value> values(values_in, values_in + count);
    for (std::size_t i = 0; i < order.size(); ++i) {
      keys_out[i] = keys_in[order[i]];
      values_out[i] = values[order[i]];
    }
    return cudaSuccess;
  }
};

}  // namespace cub
