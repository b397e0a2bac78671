#include "kintsugi/parallel/gradient_reducer.hpp"

namespace kintsugi {

GradientReducer::GradientReducer(Communicator* dp, const ParamStore& params,
                                 std::size_t bucket_bytes)
    : dp_(dp), params_(params) {
  const std::size_t es = size_of(params.dtype());
  const auto end_of = [&](int i) {
    return i + 1 < params.size() ? params.entry(i + 1).offset : params.numel();
  };
  for (int i = params.size() - 1; i >= 0;) {
    Bucket b{i, i, params.entry(i).offset, end_of(i)};
    while (b.first_param > 0 &&
           static_cast<std::size_t>(b.end - b.begin) * es < bucket_bytes) {
      --b.first_param;
      b.begin = params.entry(b.first_param).offset;
    }
    buckets_.push_back(b);
    i = b.first_param - 1;
  }
  handles_.resize(buckets_.size());
}

void GradientReducer::launch(std::size_t k) {
  const Bucket& b = buckets_[k];
  const Tensor all = params_.grads();
  const std::size_t es = size_of(all.dtype);
  const Tensor slice{static_cast<std::byte*>(all.data) + b.begin * es, all.dtype,
                     Shape{b.end - b.begin}};
  handles_[k] = dp_->all_reduce_async(slice);
}

void GradientReducer::grads_final(int first_param) {
  if (!dp_ || dp_->size() == 1) return;
  while (launched_ < buckets_.size() && buckets_[launched_].first_param >= first_param)
    launch(launched_++);
}

void GradientReducer::finish() {
  if (!dp_ || dp_->size() == 1) return;
  while (launched_ < buckets_.size()) launch(launched_++);
  for (auto& h : handles_) h.wait();
  launched_ = 0;
}

}  // namespace kintsugi
