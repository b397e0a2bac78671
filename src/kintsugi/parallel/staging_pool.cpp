#include "kintsugi/parallel/staging_pool.hpp"

namespace kintsugi {

std::unique_ptr<Staging> StagingPool::take(std::size_t bytes) {
  auto it = pool_.lower_bound(bytes);
  if (it != pool_.end()) {
    auto s = std::move(it->second);
    pool_.erase(it);
    return s;
  }
  auto s = std::make_unique<Staging>();
  s->buffer = backend_.allocate(MemoryKind::communication, bytes);
  return s;
}

void StagingPool::give_back(std::unique_ptr<Staging> staging) {
  const std::size_t size = staging->buffer.size();
  pool_.emplace(size, std::move(staging));
}

}  // namespace kintsugi
