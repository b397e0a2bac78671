#include "kintsugi/plan/search.hpp"

#include <algorithm>

namespace kintsugi {

namespace {

std::vector<std::int64_t> divisors(std::int64_t n, std::int64_t at_most) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= std::min(n, at_most); ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

template <class T>
bool allowed(const std::vector<T>& pins, const T& value) {
  return pins.empty() || std::find(pins.begin(), pins.end(), value) != pins.end();
}

// Whether a tensor split can hold the model: whole heads per rank in 1D, and a grid's shape
// (parallel/layout_rules.hpp's rules, asked with a micro-batch of the rows' split: the
// micro-batch is checked per layout).
bool holds_model(const Workload& w, const ParallelLayout& split) {
  if (!split.has_grid()) return w.model.n_head % split.tp == 0;
  const Layout probe{.parallel = split, .micro_batch = split.row_ranks()};
  Workload one = w;
  one.global_batch = split.row_ranks();
  return layout_problem(one, probe).empty();
}

// The schedules and chunks per rank of `l`'s stages: one-stage jobs run a one-stage 1F1B list.
std::vector<ParallelLayout> schedules(const ParallelLayout& l, std::int64_t layers,
                                      const LayoutPins& pins) {
  std::vector<ParallelLayout> out;
  auto add = [&](PipelineSchedule schedule, std::int64_t v) {
    ParallelLayout s = l;
    s.schedule = schedule;
    s.virtual_stages = v;
    if (pins.allows("schedule", std::string(name_of(schedule))) &&
        pins.allows("virtual_stages", std::to_string(v)))
      out.push_back(s);
  };
  if (l.pp == 1) {
    add(PipelineSchedule::one_f_one_b, 1);
    return out;
  }
  add(PipelineSchedule::gpipe, 1);
  add(PipelineSchedule::one_f_one_b, 1);
  // Up to 8 chunks per rank unasked (more rarely pays for its extra transfers); any number that
  // divides the layers when pinned (Megatron-Bridge's Qwen3-30B-A3B runs 24 on pp 2).
  for (std::int64_t v = 2; l.pp * v <= layers; ++v)
    if (layers % (l.pp * v) == 0 && (v <= 8 || pins.lists("virtual_stages", std::to_string(v))))
      add(PipelineSchedule::interleaved, v);
  return out;
}

}  // namespace

std::vector<Layout> enumerate_layouts(const Workload& w, std::int64_t world,
                                      std::int64_t devices_per_node, const SearchSpace& s) {
  const ModelConfig& m = w.model;
  const LayoutPins& pins = s.pins;
  std::vector<Layout> out;
  const std::int64_t tp_max = s.tp_across_nodes ? world : std::min(world, devices_per_node);
  for (std::int64_t tp : divisors(world, world)) {
    if (!pins.allows("tp", std::to_string(tp))) continue;
    for (const TensorSplit& split : tensor_splits(tp, pins)) {
      if ((tp > tp_max && !split.named) || !holds_model(w, split.layout)) continue;
      // Context parallelism exchanges inside every block, as tensor parallelism does: unless
      // pinned it is searched within a node (tp x cp ranks of one) and at micro-batch 1, where
      // splitting the sequence is the only split of a rank's activations left (a micro-batch
      // of several sequences is cut with no exchange by taking fewer).
      const bool cp_pinned = pins.pinned("cp");
      for (std::int64_t cp :
           divisors(world / tp, cp_pinned ? world : std::max<std::int64_t>(1, tp_max / tp)))
      for (std::int64_t pp : divisors(world / (tp * cp), m.n_layer)) {
        const std::int64_t dp = world / (tp * pp * cp);
        if (!pins.allows("cp", std::to_string(cp)) || !pins.allows("pp", std::to_string(pp)) ||
            !pins.allows("dp", std::to_string(dp)) || w.global_batch % dp != 0)
          continue;
        ParallelLayout ranks = split.layout;
        ranks.pp = pp;
        ranks.dp = dp;
        ranks.cp = cp;
        // Expert parallelism (docs/moe.md): a mixture of experts' experts over each ep that
        // divides both the data-parallel ranks and the experts (1 for a dense model).
        for (std::int64_t ep : divisors(dp, m.is_moe() ? m.moe.experts : 1)) {
        if (m.moe.experts % ep != 0 || !pins.allows("ep", std::to_string(ep))) continue;
        ranks.ep = ep;
        for (std::int64_t mb : divisors(w.global_batch / dp, s.max_micro_batch)) {
          if (!allowed(s.micro_batch, mb) || !allowed(s.grad_accum, w.global_batch / (dp * mb)) ||
              (cp > 1 && mb > 1 && !cp_pinned))
            continue;
          for (const ParallelLayout& scheduled : schedules(ranks, m.n_layer, pins))
            for (const ParallelLayout& refined : refinements(scheduled, pins))
              for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
                if (!allowed(s.recompute, rc)) continue;
                const Layout l{.parallel = refined, .micro_batch = mb, .recompute = rc};
                if (layout_problem(w, l).empty()) out.push_back(l);
              }
        }
        }
      }
    }
  }
  return out;
}

SearchResult search_layouts(const Workload& w, const ClusterSpec& cluster, std::int64_t world,
                            const SearchSpace& space) {
  SearchResult r;
  for (const Layout& l : enumerate_layouts(w, world, cluster.devices_per_node, space)) {
    ++r.enumerated;
    Prediction p = predict(w, cluster, l);
    (p.fits ? r.ranked : r.too_big).push_back(std::move(p));
  }
  r.fitting = static_cast<std::int64_t>(r.ranked.size());
  // Fastest first; among equal times the smaller memory (ties are common: recomputation
  // modes that change nothing but memory).
  std::stable_sort(r.ranked.begin(), r.ranked.end(), [](const Prediction& a, const Prediction& b) {
    if (a.time.total() != b.time.total()) return a.time.total() < b.time.total();
    return a.memory.total() < b.memory.total();
  });
  std::stable_sort(r.too_big.begin(), r.too_big.end(), [](const Prediction& a, const Prediction& b) {
    return a.memory.total() < b.memory.total();
  });
  if (r.too_big.size() > 5) r.too_big.resize(5);
  return r;
}

}  // namespace kintsugi
