#pragma once
// What each rank did during a step, as timed events, written as Chrome trace JSON (the format
// Perfetto and chrome://tracing open): one process per rank, one row for compute and one for
// communication as the host saw them, and on a GPU a third row for the GPU's compute stream.
// This is the pipeline timeline: forward and backward of each micro-batch, the waits for
// activations and gradients, reductions and the optimizer. On a GPU the host rows show when the
// work was enqueued and waited for; the stream row shows when the GPU ran it.
#include <string>
#include <vector>

#include "kintsugi/core/timer.hpp"

namespace kintsugi {

// Rows of a rank's trace.
constexpr int kComputeLane = 0, kCommunicationLane = 1, kDeviceComputeLane = 2;

struct TraceEvent {
  std::string name;
  int lane = 0;  // kComputeLane, kCommunicationLane, kDeviceComputeLane; -1: a counter
  double start = 0, end = 0;  // seconds since the step began
  double value = 0;           // counters only
};

// A device's own timeline (a GPU's compute stream): marks are recorded in stream order as work
// is enqueued, and once that work has run, seconds() tells when the device reached each mark,
// counted from begin(). The CPU has none: there the host spans are the timeline.
class DeviceTimeline {
 public:
  virtual ~DeviceTimeline() = default;
  virtual void begin() = 0;               // the origin, marked when a traced step starts
  virtual int mark() = 0;                 // a point after the work enqueued so far
  virtual double seconds(int mark) = 0;   // waits for the mark; seconds since begin()
};

class Tracer {
 public:
  bool enabled() const { return enabled_; }
  // `device`: the timeline of the device the rank computes on, if it has one of its own.
  void start(bool enabled, DeviceTimeline* device = nullptr) {
    enabled_ = enabled;
    events_.clear();
    device_spans_.clear();
    clock_.restart();
    device_ = enabled ? device : nullptr;
    if (device_) device_->begin();
  }
  double now() const { return clock_.seconds(); }
  void record(std::string name, int lane, double start, double end) {
    if (enabled_) events_.push_back({std::move(name), lane, start, end, 0});
  }
  void counter(std::string name, double value) {
    if (enabled_) events_.push_back({std::move(name), -1, now(), now(), value});
  }
  // A span of the device's stream: a mark before its work is enqueued and one after (-1, and
  // nothing recorded, without a device timeline).
  int device_mark() { return device_ ? device_->mark() : -1; }
  void record_device(std::string name, int begin_mark, int end_mark) {
    if (device_ && begin_mark >= 0 && end_mark >= 0)
      device_spans_.push_back({std::move(name), begin_mark, end_mark});
  }
  // Once the step's work is enqueued: waits for the device and adds its spans as events of
  // kDeviceComputeLane. Their times count from the origin mark, which the device reaches at or
  // after the host's step start (a queue still busy delays it), so the row may sit slightly
  // early against the host rows, never late.
  void resolve();
  const std::vector<TraceEvent>& events() const { return events_; }

 private:
  struct DeviceSpan {
    std::string name;
    int begin_mark, end_mark;
  };
  bool enabled_ = false;
  Stopwatch clock_;
  std::vector<TraceEvent> events_;
  DeviceTimeline* device_ = nullptr;
  std::vector<DeviceSpan> device_spans_;
};

// Serialized events of one rank (to gather them), and the trace file of all ranks.
std::string serialize(const std::vector<TraceEvent>& events);
std::vector<TraceEvent> deserialize(const std::string& text);
void write_chrome_trace(const std::string& path, const std::vector<std::vector<TraceEvent>>& ranks,
                        const std::vector<std::string>& rank_names);

}  // namespace kintsugi
