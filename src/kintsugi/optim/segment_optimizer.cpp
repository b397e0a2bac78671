#include "kintsugi/optim/segment_optimizer.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi {

SegmentOptimizer::SegmentOptimizer(Backend& backend, const std::vector<OptimizerSegment>& segments,
                                   int moments)
    : backend_(backend), segments_(segments) {
  for (const auto& s : segments) {
    offsets_.push_back(total_);
    total_ += s.param.numel();
  }
  dtype_ = segments.empty() ? DType::f32 : segments.front().param.dtype;
  for (int i = 0; i < moments; ++i)
    buffers_.push_back(backend.allocate(MemoryKind::optimizer_state, total_ * size_of(dtype_)));
}

Tensor SegmentOptimizer::moment(int which, std::int64_t offset, std::int64_t n) const {
  KINTSUGI_ASSERT(which >= 0 && which < moments());
  return buffers_[static_cast<std::size_t>(which)].view(dtype_, Shape{n},
                                                        offset * size_of(dtype_));
}

Tensor SegmentOptimizer::segment_moment(int which, std::size_t i) const {
  return moment(which, offsets_[i], segments_[i].param.numel());
}

void SegmentOptimizer::refresh_working_copies() {
  for (const OptimizerSegment& s : segments_)
    if (!s.working_copy.empty()) backend_.convert(s.param, s.working_copy);
}

}  // namespace kintsugi
