#pragma once
// Data parallelism's gradient reduction. The chunk's flat gradient buffer is cut into buckets
// of whole parameters, about bucket_bytes each, starting from the end of the buffer because
// backward produces gradients in reverse order of the parameters. A bucket is summed across the
// data-parallel group (asynchronously, on the communication worker) as soon as the last
// micro-batch's backward has finished every parameter in it, so the reduction of late layers
// overlaps the backward of early ones (PyTorch DDP's buckets, Megatron's grad buffer).
//
// Each rank's gradient is already scaled by 1 / (tokens of the global batch), so the sum is the
// serial gradient of the mean loss; no averaging follows.
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/model/param_store.hpp"

namespace kintsugi {

class GradientReducer {
 public:
  // dp may be null (a single data-parallel rank): then nothing is reduced.
  GradientReducer(Communicator* dp, const ParamStore& params, std::size_t bucket_bytes);

  // The gradients of parameters first_param.. are final for this step.
  void grads_final(int first_param);
  // Launches what is left and waits for every bucket; the gradient buffer is then reduced.
  void finish();

  struct Bucket {
    int first_param, last_param;  // inclusive
    std::int64_t begin, end;      // element range of the flat buffer
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void launch(std::size_t bucket);
  Communicator* dp_;
  const ParamStore& params_;
  std::vector<Bucket> buckets_;  // in launch order: from the end of the buffer
  std::vector<CommHandle> handles_;
  std::size_t launched_ = 0;
};

}  // namespace kintsugi
