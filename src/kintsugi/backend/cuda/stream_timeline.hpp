#pragma once
// The GPU's compute stream as a trace timeline (core/trace.hpp): CUDA events recorded on the
// stream, read back as seconds since the origin event. The events are kept and reused from one
// traced step to the next.
#include <vector>

#include "kintsugi/backend/cuda/cuda_check.hpp"
#include "kintsugi/core/trace.hpp"

namespace kintsugi::cuda {

class StreamTimeline final : public DeviceTimeline {
 public:
  explicit StreamTimeline(cudaStream_t stream) : stream_(stream) {}
  ~StreamTimeline() override;
  StreamTimeline(const StreamTimeline&) = delete;
  StreamTimeline& operator=(const StreamTimeline&) = delete;

  void begin() override;
  int mark() override;
  double seconds(int mark) override;

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;  // [0]: the origin
  int used_ = 0;
};

}  // namespace kintsugi::cuda
