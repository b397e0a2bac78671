#pragma once
// The multi-range kernels' tables on the device (kernels.hpp, TableCache): each distinct table
// is uploaded once and found again by its bytes, so a training run's optimizer step, whose
// ranges never change, uploads its tables on the first step only. A handful of tables are kept
// (one AdamW and one norm table per model chunk); the least recently used goes when more come.
// Tracked as workspace.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kintsugi/backend/cuda/kernels.hpp"
#include "kintsugi/core/memory.hpp"

namespace kintsugi::cuda {

class DeviceTables final : public TableCache {
 public:
  DeviceTables(Allocator& allocator, MemoryTracker& memory)
      : allocator_(allocator), memory_(memory) {}
  const void* device_copy(const void* host, std::size_t bytes) override;
  std::size_t uploads() const { return uploads_; }  // tables uploaded so far (tests)

 private:
  static constexpr std::size_t kMaxTables = 32;
  struct Entry {
    std::vector<std::byte> host;
    Buffer device;
    std::uint64_t last_use = 0;
  };
  Allocator& allocator_;
  MemoryTracker& memory_;
  std::vector<Entry> entries_;
  std::uint64_t clock_ = 0;
  std::size_t uploads_ = 0;
};

}  // namespace kintsugi::cuda
