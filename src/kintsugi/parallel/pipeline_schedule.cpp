#include "kintsugi/parallel/pipeline_schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

std::string_view name_of(PipeOp op) {
  switch (op) {
    case PipeOp::recv_forward: return "recv_forward";
    case PipeOp::forward: return "forward";
    case PipeOp::send_forward: return "send_forward";
    case PipeOp::recv_backward: return "recv_backward";
    case PipeOp::backward: return "backward";
    case PipeOp::send_backward: return "send_backward";
    case PipeOp::reduce_grads: return "reduce_grads";
    case PipeOp::optimizer_step: return "optimizer_step";
  }
  return "?";
}

void validate(PipelineSchedule schedule, const PipelineShape& s) {
  if (s.stages < 1 || s.virtual_stages < 1 || s.micro_batches < 1)
    fail("pipeline stages ({}), virtual stages ({}) and micro-batches per step ({}) must be at "
         "least 1",
         s.stages, s.virtual_stages, s.micro_batches);
  if (s.virtual_stages > 1 && schedule != PipelineSchedule::interleaved)
    fail("--virtual-stages {} needs --schedule interleaved", s.virtual_stages);
  if (s.virtual_stages > 1 && s.stages == 1)
    fail("--virtual-stages {} needs pipeline parallelism (--pp 2 or more)", s.virtual_stages);
  if (schedule == PipelineSchedule::interleaved && s.stages > 1) {
    if (s.micro_batches < s.stages)
      fail("the interleaved schedule needs at least pp = {} micro-batches per step, got {}: raise "
           "train.global_batch or lower train.micro_batch",
           s.stages, s.micro_batches);
    if (s.micro_batches % s.stages != 0)
      fail("the interleaved schedule needs micro-batches per step ({}) to be a multiple of pp = "
           "{}: change train.global_batch or train.micro_batch",
           s.micro_batches, s.stages);
  }
}

namespace {

// Appends the transfers and compute of one forward or backward unit of (chunk, micro-batch).
struct Builder {
  const PipelineShape& s;
  int rank;
  std::vector<PipeInstruction> out;

  bool first(int chunk) const { return global_chunk(s, rank, chunk) == 0; }
  bool last(int chunk) const {
    return global_chunk(s, rank, chunk) == s.stages * s.virtual_stages - 1;
  }
  void forward(int chunk, int mb) {
    if (!first(chunk)) out.push_back({PipeOp::recv_forward, chunk, mb});
    out.push_back({PipeOp::forward, chunk, mb});
    if (!last(chunk)) out.push_back({PipeOp::send_forward, chunk, mb});
  }
  void backward(int chunk, int mb) {
    if (!last(chunk)) out.push_back({PipeOp::recv_backward, chunk, mb});
    out.push_back({PipeOp::backward, chunk, mb});
    if (!first(chunk)) out.push_back({PipeOp::send_backward, chunk, mb});
  }
};

// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM): the k-th forward unit of a rank runs
// local chunk (k / p) % v on micro-batch (k / pv) p + k % p; backward units visit chunks in
// reverse. Warm-up: 2 (p - r - 1) + (v - 1) p forward units.
int unit_chunk(const PipelineShape& s, int k, bool forward) {
  const int c = (k % (s.stages * s.virtual_stages)) / s.stages;
  return forward ? c : s.virtual_stages - 1 - c;
}
int unit_micro_batch(const PipelineShape& s, int k) {
  return (k / (s.stages * s.virtual_stages)) * s.stages + k % s.stages;
}

}  // namespace

std::vector<PipeInstruction> make_schedule(PipelineSchedule schedule, const PipelineShape& s,
                                           int rank) {
  validate(schedule, s);
  Builder b{s, rank, {}};
  const int m = s.micro_batches, p = s.stages;
  switch (schedule) {
    case PipelineSchedule::gpipe:
      // All forwards, then all backwards: every micro-batch's activations are held at once.
      for (int mb = 0; mb < m; ++mb) b.forward(0, mb);
      for (int mb = 0; mb < m; ++mb) b.backward(0, mb);
      break;
    case PipelineSchedule::one_f_one_b: {
      // PipeDream-Flush: p - r - 1 warm-up forwards, then one forward and one backward
      // alternately, then the remaining backwards.
      const int warmup = std::min(p - rank - 1, m);
      for (int mb = 0; mb < warmup; ++mb) b.forward(0, mb);
      for (int i = 0; i < m - warmup; ++i) {
        b.forward(0, warmup + i);
        b.backward(0, i);
      }
      for (int mb = m - warmup; mb < m; ++mb) b.backward(0, mb);
      break;
    }
    case PipelineSchedule::interleaved: {
      const int total = m * s.virtual_stages;
      const int warmup = p == 1 ? 0 : std::min(total, 2 * (p - rank - 1) + (s.virtual_stages - 1) * p);
      for (int k = 0; k < warmup; ++k) b.forward(unit_chunk(s, k, true), unit_micro_batch(s, k));
      for (int i = 0; i < total - warmup; ++i) {
        const int f = warmup + i;
        b.forward(unit_chunk(s, f, true), unit_micro_batch(s, f));
        b.backward(unit_chunk(s, i, false), unit_micro_batch(s, i));
      }
      for (int k = total - warmup; k < total; ++k)
        b.backward(unit_chunk(s, k, false), unit_micro_batch(s, k));
      break;
    }
  }
  b.out.push_back({PipeOp::reduce_grads, 0, 0});
  b.out.push_back({PipeOp::optimizer_step, 0, 0});
  return b.out;
}

std::vector<PipeInstruction> make_forward_schedule(const PipelineShape& s, int rank) {
  Builder b{s, rank, {}};
  for (int mb = 0; mb < s.micro_batches; ++mb)
    for (int c = 0; c < s.virtual_stages; ++c) b.forward(c, mb);
  return b.out;
}

int max_in_flight(PipelineSchedule schedule, const PipelineShape& s, int rank) {
  std::vector<int> live(s.virtual_stages, 0);
  int most = 0;
  for (const auto& i : make_schedule(schedule, s, rank)) {
    if (i.op == PipeOp::forward) most = std::max(most, ++live[i.chunk]);
    if (i.op == PipeOp::backward) --live[i.chunk];
  }
  return most;
}

int slots_needed(const std::vector<PipeInstruction>& program) {
  std::map<std::pair<int, int>, std::size_t> last;  // (chunk, micro-batch) -> last instruction
  for (std::size_t i = 0; i < program.size(); ++i)
    if (program[i].op != PipeOp::reduce_grads && program[i].op != PipeOp::optimizer_step)
      last[{program[i].chunk, program[i].micro_batch}] = i;
  std::set<std::pair<int, int>> live;
  std::size_t most = 0;
  for (std::size_t i = 0; i < program.size(); ++i) {
    const auto it = last.find({program[i].chunk, program[i].micro_batch});
    if (it == last.end() || program[i].op == PipeOp::reduce_grads ||
        program[i].op == PipeOp::optimizer_step)
      continue;
    live.insert(it->first);
    most = std::max(most, live.size());
    if (it->second == i) live.erase(it->first);
  }
  return static_cast<int>(most);
}

int activation_slots(PipelineSchedule schedule, const PipelineShape& s, int rank) {
  return std::max({1, slots_needed(make_schedule(schedule, s, rank)),
                   slots_needed(make_forward_schedule(s, rank))});
}

double bubble_fraction(const PipelineShape& s) {
  const double p = s.stages, v = s.virtual_stages, m = s.micro_batches;
  return (p - 1) / (v * m + p - 1);
}

PipelineSimulation simulate(PipelineSchedule schedule, const PipelineShape& s,
                            double forward_time, double backward_time) {
  const int p = s.stages, v = s.virtual_stages;
  std::vector<std::vector<PipeInstruction>> programs(p);
  for (int r = 0; r < p; ++r) programs[r] = make_schedule(schedule, s, r);

  // Time at which a (direction, global chunk, micro-batch) message was sent.
  using Key = std::tuple<int, int, int>;
  std::map<Key, double> sent;
  std::map<Key, int> receives;
  std::vector<std::size_t> pc(p, 0);
  std::vector<double> clock(p, 0), busy(p, 0);
  // Receives posted and the arrival time each compute waits for.
  std::vector<std::map<Key, bool>> posted(p);
  PipelineSimulation sim;
  sim.idle.assign(p, 0);
  sim.max_in_flight.assign(p, 0);
  std::vector<int> in_flight(p, 0);

  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (pc[r] < programs[r].size()) {
        const PipeInstruction& in = programs[r][pc[r]];
        const int g = global_chunk(s, r, in.chunk);
        if (in.op == PipeOp::recv_forward || in.op == PipeOp::recv_backward) {
          const Key key{in.op == PipeOp::recv_forward ? 0 : 1, g, in.micro_batch};
          posted[r][key] = true;
          ++receives[key];
        } else if (in.op == PipeOp::forward || in.op == PipeOp::backward) {
          const bool fwd = in.op == PipeOp::forward;
          const bool needs_input = fwd ? g > 0 : g < p * v - 1;
          double start = clock[r];
          if (needs_input) {
            const Key key{fwd ? 0 : 1, g, in.micro_batch};
            auto it = sent.find(key);
            if (it == sent.end()) break;  // blocked until the producer sends
            if (!posted[r].count(key)) {
              sim.problem = fmt::format("rank {} computes {} of chunk {} mb {} before receiving",
                                        r, name_of(in.op), g, in.micro_batch);
            }
            start = std::max(start, it->second);
          }
          const double t = (fwd ? forward_time : backward_time) / v;
          clock[r] = start + t;
          busy[r] += t;
          in_flight[r] += fwd ? 1 : -1;
          sim.max_in_flight[r] = std::max(sim.max_in_flight[r], in_flight[r]);
        } else if (in.op == PipeOp::send_forward) {
          sent[Key{0, g + 1, in.micro_batch}] = clock[r];
        } else if (in.op == PipeOp::send_backward) {
          sent[Key{1, g - 1, in.micro_batch}] = clock[r];
        }
        ++pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (pc[r] < programs[r].size()) {
      sim.deadlock = true;
      sim.problem = fmt::format("rank {} blocked at instruction {} ({})", r, pc[r],
                                name_of(programs[r][pc[r]].op));
    }
  for (const auto& [key, t] : sent)
    if (receives[key] != 1)
      sim.problem = fmt::format("message dir {} chunk {} mb {} received {} times",
                                std::get<0>(key), std::get<1>(key), std::get<2>(key),
                                receives[key]);
  for (const auto& [key, n] : receives)
    if (!sent.count(key))
      sim.problem = fmt::format("receive dir {} chunk {} mb {} has no matching send",
                                std::get<0>(key), std::get<1>(key), std::get<2>(key));
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < p; ++r) sim.idle[r] = sim.makespan - busy[r];
  return sim;
}

}  // namespace kintsugi
