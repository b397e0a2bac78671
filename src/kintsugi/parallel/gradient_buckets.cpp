#include "kintsugi/parallel/gradient_buckets.hpp"

namespace kintsugi {

GradientBuckets::GradientBuckets(const ParamStore& params, std::size_t bucket_bytes)
    : params_(params), bucket_bytes_(bucket_bytes), deferred_(params.units(), 0) {
  build();
}

void GradientBuckets::defer(int unit) {
  deferred_[unit] = 1;
  build();
}

void GradientBuckets::build() {
  buckets_.clear();
  const std::size_t es = size_of(params_.grad_dtype());
  for (int last = params_.units() - 1; last >= 0;) {
    int first = last;
    std::int64_t elements = params_.unit(first).size();
    while (!deferred_[first] && first > 0 && !deferred_[first - 1] &&
           static_cast<std::size_t>(elements) * es < bucket_bytes_)
      elements += params_.unit(--first).size();
    buckets_.push_back({first, last, deferred_[first] != 0});
    last = first - 1;
  }
}

void GradientBuckets::launch_final(int down_to_unit, const ReduceFn& reduce) {
  while (next_ < buckets_.size() && buckets_[next_].first_unit >= down_to_unit) {
    const Bucket& b = buckets_[next_++];
    if (b.deferred) continue;
    const std::int64_t begin = params_.unit(b.first_unit).begin;
    reduce(begin, params_.unit(b.last_unit).end - begin);
  }
}

}  // namespace kintsugi
