#include "kintsugi/backend/cuda/stream_timeline.hpp"

namespace kintsugi::cuda {

StreamTimeline::~StreamTimeline() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);  // errors at exit are not worth a throw
}

void StreamTimeline::begin() {
  used_ = 0;
  mark();
}

int StreamTimeline::mark() {
  if (used_ == static_cast<int>(events_.size())) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate (trace)");
    events_.push_back(e);
  }
  check(cudaEventRecord(events_[used_], stream_), "cudaEventRecord (trace)");
  return used_++;
}

double StreamTimeline::seconds(int mark) {
  check(cudaEventSynchronize(events_[mark]), "cudaEventSynchronize (trace)");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, events_[0], events_[mark]), "cudaEventElapsedTime (trace)");
  return ms / 1e3;
}

}  // namespace kintsugi::cuda
