#pragma once
// What AdamW and Lion share: the segments they update and their flat state (optimizer.hpp),
// `moments()` buffers of the segments' element type (f32, or f64 for gradient checks), each cut
// into the segments' lengths in order.
#include <cstddef>
#include <vector>

#include "kintsugi/optim/optimizer.hpp"

namespace kintsugi {

class SegmentOptimizer : public Optimizer {
 public:
  std::int64_t numel() const final { return total_; }
  int moments() const final { return static_cast<int>(buffers_.size()); }
  Tensor moment(int which, std::int64_t offset, std::int64_t n) const final;
  void refresh_working_copies() final;

 protected:
  SegmentOptimizer(Backend& backend, const std::vector<OptimizerSegment>& segments, int moments);
  // Moment `which` of segment i: its part of the flat state.
  Tensor segment_moment(int which, std::size_t i) const;

  Backend& backend_;
  std::vector<OptimizerSegment> segments_;

 private:
  DType dtype_ = DType::f32;  // of the weights and moments
  std::int64_t total_ = 0;
  std::vector<std::int64_t> offsets_;  // of each segment in the flat state
  std::vector<Buffer> buffers_;        // one per moment
};

}  // namespace kintsugi
