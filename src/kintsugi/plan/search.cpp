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

// The tensor-parallel options of a search: each allowed tp as 1D (an empty grid) and as every
// grid X x Y x Z = tp whose shape the model allows (parallel/layout_rules.hpp's grid rules,
// asked with a micro-batch of Z sequences: the micro-batch is checked per layout).
// Grids listed by name may span nodes (the user asked for them); the others keep to tp_max.
std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> tensor_options(
    const Workload& w, std::int64_t world, std::int64_t tp_max, const SearchSpace& s) {
  std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> out;
  for (std::int64_t tp : divisors(world, world)) {
    if (!allowed(s.tp, tp)) continue;
    if (s.one_d && tp <= tp_max && w.model.n_head % tp == 0) out.push_back({tp, {}});
    if (!s.grids || tp == 1 || (s.tensor_grid.empty() && tp > tp_max)) continue;
    for (std::int64_t x = 1; x <= tp; ++x) {
      if (tp % x != 0) continue;
      for (std::int64_t y = 1; y <= tp / x; ++y) {
        if (tp / x % y != 0) continue;
        const std::vector<std::int64_t> grid = {x, y, tp / (x * y)};
        if (!allowed(s.tensor_grid, grid)) continue;
        // 1 x N x 1 is Megatron's 1D layout over y, the same splits, collectives and bytes
        // computed by the grid code (docs/parallelism.md, "Degenerate grids"): the 1D option
        // is that layout, so the grid is searched only where it is named. N x 1 x 1 and
        // 1 x 1 x N are layouts of their own (other collectives) and stay.
        if (s.tensor_grid.empty() && x == 1 && tp / (x * y) == 1) continue;
        const Layout probe{.parallel = {.tp = tp, .tensor_grid = grid}, .micro_batch = grid[2]};
        Workload one = w;
        one.global_batch = grid[2];
        if (layout_problem(one, probe).empty()) out.push_back({tp, grid});
      }
    }
  }
  return out;
}

}  // namespace

std::vector<Layout> enumerate_layouts(const Workload& w, std::int64_t world,
                                      std::int64_t devices_per_node, const SearchSpace& s) {
  const ModelConfig& m = w.model;
  std::vector<Layout> out;
  const std::vector<bool> overlaps = s.tensor_grid_overlap.empty() ? std::vector<bool>{true}
                                                             : s.tensor_grid_overlap;
  const std::int64_t tp_max = s.tp_across_nodes ? world : std::min(world, devices_per_node);
  for (const auto& [tp, grid] : tensor_options(w, world, tp_max, s)) {
    for (std::int64_t pp : divisors(world / tp, m.n_layer)) {
      const std::int64_t dp = world / (tp * pp);
      if (!allowed(s.pp, pp) || !allowed(s.dp, dp) || w.global_batch % dp != 0) continue;
      for (std::int64_t mb : divisors(w.global_batch / dp, s.max_micro_batch)) {
        if (!allowed(s.micro_batch, mb) || !allowed(s.grad_accum, w.global_batch / (dp * mb)))
          continue;
        // Schedules and chunks per rank: one-stage jobs run a one-stage 1F1B list.
        std::vector<std::pair<PipelineSchedule, std::int64_t>> schedules;
        if (pp == 1) {
          schedules.push_back({PipelineSchedule::one_f_one_b, 1});
        } else {
          schedules.push_back({PipelineSchedule::gpipe, 1});
          schedules.push_back({PipelineSchedule::one_f_one_b, 1});
          for (std::int64_t v = 2; v <= 8; ++v)
            if (m.n_layer % (pp * v) == 0) schedules.push_back({PipelineSchedule::interleaved, v});
        }
        for (auto [schedule, v] : schedules) {
          if (!allowed(s.schedule, schedule) || !allowed(s.virtual_stages, v)) continue;
          // ZeRO shards over data-parallel ranks: with one there is nothing to shard.
          for (int stage = 0; stage <= (dp > 1 ? 3 : 0); ++stage) {
            const auto zero = static_cast<ZeroStage>(stage);
            if (!allowed(s.zero, zero)) continue;
            // Hybrid sharding: shard groups of any proper divisor of dp (0: all of dp).
            std::vector<std::int64_t> groups = {0};
            if (zero > ZeroStage::none)
              for (std::int64_t k = 2; k < dp; ++k)
                if (dp % k == 0) groups.push_back(k);
            for (std::int64_t hsdp : groups) {
              if (!allowed(s.hsdp, hsdp)) continue;
              for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
                if (!allowed(s.recompute, rc)) continue;
                // Sequence parallelism is 1D's; a grid's z already splits the token rows.
                for (bool sp : {false, true}) {
                  if ((sp && (tp == 1 || !grid.empty())) || !allowed(s.sequence_parallel, sp))
                    continue;
                  for (bool overlap : grid.empty() ? std::vector<bool>{true} : overlaps) {
                    const Layout l{.parallel = {.tp = tp,
                                                .pp = pp,
                                                .dp = dp,
                                                .schedule = schedule,
                                                .virtual_stages = v,
                                                .zero = zero,
                                                .hsdp = hsdp,
                                                .sequence_parallel = sp,
                                                .tensor_grid = grid,
                                                .tensor_grid_overlap = overlap},
                                   .micro_batch = mb,
                                   .recompute = rc};
                    if (layout_problem(w, l).empty()) out.push_back(l);
                  }
                }
              }
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
