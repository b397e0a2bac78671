#pragma once
// What each rank did during a step, as timed events, written as Chrome trace JSON (the format
// Perfetto and chrome://tracing open): one process per rank, one row for compute and one for
// communication. This is the pipeline timeline: forward and backward of each micro-batch, the
// waits for activations and gradients, reductions and the optimizer.
#include <string>
#include <vector>

#include "kintsugi/core/timer.hpp"

namespace kintsugi {

struct TraceEvent {
  std::string name;
  int lane = 0;  // 0: compute, 1: communication; -1: a counter (value at time `start`)
  double start = 0, end = 0;  // seconds since the step began
  double value = 0;           // counters only
};

class Tracer {
 public:
  bool enabled() const { return enabled_; }
  void start(bool enabled) {
    enabled_ = enabled;
    events_.clear();
    clock_.restart();
  }
  double now() const { return clock_.seconds(); }
  void record(std::string name, int lane, double start, double end) {
    if (enabled_) events_.push_back({std::move(name), lane, start, end, 0});
  }
  void counter(std::string name, double value) {
    if (enabled_) events_.push_back({std::move(name), -1, now(), now(), value});
  }
  const std::vector<TraceEvent>& events() const { return events_; }

 private:
  bool enabled_ = false;
  Stopwatch clock_;
  std::vector<TraceEvent> events_;
};

// Serialized events of one rank (to gather them), and the trace file of all ranks.
std::string serialize(const std::vector<TraceEvent>& events);
std::vector<TraceEvent> deserialize(const std::string& text);
void write_chrome_trace(const std::string& path, const std::vector<std::vector<TraceEvent>>& ranks,
                        const std::vector<std::string>& rank_names);

}  // namespace kintsugi
