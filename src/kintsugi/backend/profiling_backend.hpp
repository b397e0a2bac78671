#pragma once
// A Backend that times every op of another backend: where a training step spends its time, per
// op kind and per op and shape, with the FLOPs and the least bytes of each (OpCall). Used by
// `kintsugi bench step --profile`.
//
// Two ways to time, chosen by the inner backend:
// - events, where it has a device timeline (a GPU's stream, core/trace.hpp): a mark before and
//   one after each op, nothing waited for; end_step(), once the step's work is enqueued, waits
//   for it and reads each op's span. The step runs as it would unprofiled, queued ahead and
//   overlapping the host, except for two event records per op. A span is the time from the
//   device reaching the op's first mark to reaching its second: were the host too slow to keep
//   the device busy (the step's first ops, ops after a host read), the wait for the op's launch
//   would count in it. CUDA times events to about half a microsecond: an op of a few
//   microseconds is timed coarsely, a sum over many calls well.
// - the host clock, elsewhere (the CPU): each op is timed from its call to its end, waiting for
//   it (synchronize) before stopping the clock.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kintsugi/backend/forwarding_backend.hpp"

namespace kintsugi {

struct OpProfile {
  std::int64_t calls = 0;
  double seconds = 0;
  double flops = 0;  // for GEMM-based ops: 2 * m * n * k summed
  double bytes = 0;  // the least the calls must move, summed (OpCall::bytes)
};

class ProfilingBackend final : public ForwardingBackend {
 public:
  // `use_events` false: the host clock even where the inner backend has a timeline.
  explicit ProfilingBackend(Backend& inner, bool use_events = true);

  // Whether ops are timed with the inner backend's device timeline (else the host clock).
  bool uses_events() const { return events_ != nullptr; }
  // Bracket the ops of a step. Event mode starts the timeline at begin_step() (an op called
  // outside a step begins one) and reads the step's spans at end_step(), which waits for the
  // device; with the host clock they only end the step.
  void begin_step();
  void end_step();
  // While disabled, ops pass straight through untimed (unprofiled steps between profiled ones).
  void set_enabled(bool enabled) { enabled_ = enabled; }
  // Marks recorded since the profile started or was reset (event mode; 0 otherwise).
  std::int64_t marks() const { return marks_; }

  // Per op kind ("linear_forward"), and per op and shape ("linear_forward 8x12x4 bf16": kind,
  // OpCall::dims, element type), over the steps ended since the profile started or was reset.
  std::map<std::string, OpProfile> profile() const;
  std::map<std::string, OpProfile> by_shape() const;
  void reset();

  // The inner timeline's marks belong to the profile: nothing above it may begin() it anew.
  DeviceTimeline* timeline() override { return nullptr; }

 protected:
  void around(const OpCall& call, const std::function<void()>& run) override;

 private:
  struct Key {
    std::string_view name;  // OpCall::name: a string literal
    Shape dims;
    DType dtype;
    bool operator<(const Key& o) const {
      return std::tie(name, dims.rank, dims.dims, dtype) <
             std::tie(o.name, o.dims.rank, o.dims.dims, o.dtype);
    }
  };
  struct Span {
    OpProfile* op;
    int begin_mark, end_mark;
  };
  DeviceTimeline* events_;  // the inner backend's, or null
  bool enabled_ = true, in_step_ = false;
  std::map<Key, OpProfile> ops_;  // nodes stay put: spans point at them
  std::vector<Span> spans_;       // the current step's, read at end_step()
  std::int64_t marks_ = 0;
};

}  // namespace kintsugi
