#include "kintsugi/backend/profiling_backend.hpp"

#include <fmt/format.h>

#include "kintsugi/core/timer.hpp"

namespace kintsugi {

ProfilingBackend::ProfilingBackend(Backend& inner, bool use_events)
    : ForwardingBackend(inner), events_(use_events ? inner.timeline() : nullptr) {}

void ProfilingBackend::begin_step() {
  spans_.clear();
  in_step_ = true;
  if (events_) {
    events_->begin();
    ++marks_;
  }
}

void ProfilingBackend::end_step() {
  if (!in_step_) return;
  in_step_ = false;
  if (!events_) return;
  inner().synchronize();
  for (const Span& s : spans_)
    s.op->seconds += events_->seconds(s.end_mark) - events_->seconds(s.begin_mark);
  spans_.clear();
}

void ProfilingBackend::around(const OpCall& call, const std::function<void()>& run) {
  if (!enabled_) return run();
  OpProfile& p = ops_[Key{call.name, call.dims, call.dtype}];
  ++p.calls;
  p.flops += call.flops;
  p.bytes += call.bytes;
  if (events_) {
    // What the marks cost: the timeline's events are created in the first step that needs them
    // (bench step's warm-up) and reused after (stream_timeline.cpp), so each op adds two event
    // records (host calls and timestamps on the stream) and no synchronization. Their cost per
    // step is measured where it matters, by `bench step --profile`, which times unprofiled steps
    // between the profiled ones and prints the difference.
    if (!in_step_) begin_step();
    const int begin = events_->mark();
    run();
    const int end = events_->mark();
    spans_.push_back({&p, begin, end});
    marks_ += 2;
    return;
  }
  Stopwatch clock;
  run();
  inner().synchronize();
  p.seconds += clock.seconds();
}

std::map<std::string, OpProfile> ProfilingBackend::profile() const {
  std::map<std::string, OpProfile> kinds;
  for (const auto& [key, p] : ops_) {
    OpProfile& k = kinds[std::string(key.name)];
    k.calls += p.calls;
    k.seconds += p.seconds;
    k.flops += p.flops;
    k.bytes += p.bytes;
  }
  return kinds;
}

std::map<std::string, OpProfile> ProfilingBackend::by_shape() const {
  std::map<std::string, OpProfile> shapes;
  for (const auto& [key, p] : ops_) {
    std::string name(key.name);
    if (key.dims.rank > 0) {
      name += ' ';
      for (int i = 0; i < key.dims.rank; ++i)
        name += fmt::format("{}{}", i ? "x" : "", key.dims[i]);
    }
    name += fmt::format(" {}", name_of(key.dtype));
    shapes[name] = p;
  }
  return shapes;
}

void ProfilingBackend::reset() {
  ops_.clear();
  spans_.clear();
  in_step_ = false;
  marks_ = 0;
}

}  // namespace kintsugi
