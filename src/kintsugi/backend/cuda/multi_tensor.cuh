#pragma once
// The range tables of the multi-range kernels (kernels.hpp, "many flat ranges"): one entry per
// range, built on the host, uploaded through a TableCache, read on the device. A launch gives
// each range ceil(n / per_block) blocks in the ranges' order; a block finds its range by binary
// search over the entries' first_block. Entries have no padding, so that equal tables are equal
// bytes (the cache compares bytes).
#include <vector>

#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda {

// `count` entries on the device; Table::data[i].first_block counts the blocks of the entries
// before entry i. (A Ref-like pair: the emulator checks indices against count.)
template <class Entry>
struct Table {
  const Entry* data = nullptr;
  std::int64_t count = 0;
};

// The entry of block `block`: the last whose first_block is at most block (every entry has at
// least one block).
template <class Entry>
__device__ __forceinline__ Entry entry_of_block(const Table<Entry>& t, std::int64_t block) {
  std::int64_t lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    KINTSUGI_CUDA_CHECK_INDEX(t, mid);
    if (t.data[mid].first_block <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  KINTSUGI_CUDA_CHECK_INDEX(t, lo);
  return t.data[lo];
}

__host__ __device__ inline std::int64_t blocks_for(std::int64_t n, std::int64_t per_block) {
  return (n + per_block - 1) / per_block;
}

// The device copy of `entries` (the same one while the entries are the same).
template <class Entry>
Table<Entry> upload(const std::vector<Entry>& entries, TableCache& tables) {
  const void* device = tables.device_copy(entries.data(), entries.size() * sizeof(Entry));
  return {static_cast<const Entry*>(device), static_cast<std::int64_t>(entries.size())};
}

}  // namespace kintsugi::cuda
