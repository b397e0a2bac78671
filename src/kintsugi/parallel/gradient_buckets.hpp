#pragma once
// Data-parallel gradient buckets (PyTorch DDP, Megatron): whole units grouped from the end of
// the flat gradient buffer into buckets of at least bucket_bytes. Backward finishes units in
// descending order, so a bucket is all-reduced as soon as its lowest unit is final, while the
// layers below it are still computing. A deferred unit (the tied embedding, summed across
// pipeline stages first) is a bucket of its own, reduced when its owner says so.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kintsugi/model/param_store.hpp"

namespace kintsugi {

class GradientBuckets {
 public:
  GradientBuckets(const ParamStore& params, std::size_t bucket_bytes);
  void defer(int unit);
  bool deferred(int unit) const { return deferred_[unit] != 0; }
  void begin_step() { next_ = 0; }
  // Calls reduce(begin, count) (elements of the flat buffer) for every bucket not yet launched
  // this step whose units are all final, i.e. whose lowest unit is at least down_to_unit;
  // deferred buckets are skipped.
  using ReduceFn = std::function<void(std::int64_t begin, std::int64_t count)>;
  void launch_final(int down_to_unit, const ReduceFn& reduce);

 private:
  void build();
  struct Bucket {
    int first_unit, last_unit;
    bool deferred = false;
  };
  const ParamStore& params_;
  std::size_t bucket_bytes_;
  std::vector<char> deferred_;
  std::vector<Bucket> buckets_;  // from the end of the buffer
  std::size_t next_ = 0;
};

}  // namespace kintsugi
