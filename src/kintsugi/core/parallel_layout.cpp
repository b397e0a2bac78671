#include "kintsugi/core/parallel_layout.hpp"

#include <algorithm>
#include <sstream>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/layout_pins.hpp"
#include "kintsugi/core/parallel_layout_json.hpp"

namespace kintsugi {

ZeroStage zero_stage(std::int64_t number, std::string_view what) {
  if (number < 0 || number > 3) fail("{} = {} must be 0, 1, 2 or 3", what, number);
  return static_cast<ZeroStage>(number);
}

std::array<Dim, kDims> order_dims(const std::string& order) {
  std::vector<Dim> dims;
  std::istringstream in(order);
  std::string part;
  bool seen[kDims] = {false, false, false, false};
  const std::string expected = fmt::format(
      "parallel.order = \"{}\" must name tp, dp and pp once each (and cp at most once), e.g. "
      "\"tp-dp-pp\" or \"tp-cp-dp-pp\"",
      order);
  while (std::getline(in, part, '-')) {
    Dim d;
    if (part == "tp") d = Dim::tp;
    else if (part == "dp") d = Dim::dp;
    else if (part == "pp") d = Dim::pp;
    else if (part == "cp") d = Dim::cp;
    else fail("parallel.order = \"{}\": \"{}\" is not tp, cp, dp or pp", order, part);
    if (seen[static_cast<int>(d)]) fail("{}", expected);
    seen[static_cast<int>(d)] = true;
    dims.push_back(d);
  }
  if (!seen[0] || !seen[1] || !seen[2]) fail("{}", expected);
  if (!seen[static_cast<int>(Dim::cp)])
    dims.insert(std::find(dims.begin(), dims.end(), Dim::tp) + 1, Dim::cp);
  return {dims[0], dims[1], dims[2], dims[3]};
}

namespace {

// 3D tensor parallelism (docs/parallelism.md): the grid's own shape; what it must divide in a
// model is the rule book's (parallel/layout_rules.cpp).
std::string grid_problem(const ParallelLayout& l) {
  const auto& g = l.tensor_grid;
  if (g.empty()) return "";
  const std::string grid = fmt::format("--tensor-grid {},{},{}", g[0], g[1], g[2]);
  if (g[0] * g[1] * g[2] != l.tp)
    return fmt::format("{} has {} ranks but tp = {}", grid, g[0] * g[1] * g[2], l.tp);
  if (l.sequence_parallel)
    return fmt::format("{} with --sequence-parallel: 3D tensor parallelism already splits the "
                       "token rows over z, and sequence parallelism is defined for 1D tensor "
                       "parallelism only; drop one of them",
                       grid);
  return "";
}

// Context parallelism (docs/parallelism.md): what is built of it so far.
std::string context_problem(const ParallelLayout& l) {
  if (l.cp == 1) return "";
  if (l.has_grid())
    return fmt::format("--cp {} with --tensor-grid: the grid's z already splits a micro-batch's "
                       "rows and its layers do not exchange keys and values; use 1D --tp with "
                       "--cp",
                       l.cp);
  return "";
}

// Expert parallelism (docs/moe.md): carved out of the data-parallel ranks.
std::string expert_problem(const ParallelLayout& l) {
  if (l.ep == 1) return "";
  if (l.cp > 1)
    return fmt::format("--ep {} with --cp {}: expert parallelism is carved out of the "
                       "data-parallel ranks and does not run beside context parallelism; use "
                       "--cp 1",
                       l.ep, l.cp);
  if (l.dp % l.ep != 0)
    return fmt::format("--ep {} must divide the data-parallel ranks (dp = {}): the experts are "
                       "split over groups of ep data-parallel ranks; change --ep or --dp",
                       l.ep, l.dp);
  if (l.hsdp > 0)
    return fmt::format("--ep {} with --hsdp {}: hybrid sharding of the experts' state is not "
                       "built; drop --hsdp (ZeRO shards the experts over the dp / ep ranks)",
                       l.ep, l.hsdp);
  return "";
}

std::string sharding_problem(const ParallelLayout& l) {
  if (l.zero >= ZeroStage::gradients && l.pp > 1)
    return fmt::format("--zero {} with --pp {}: sharded gradients are reduce-scattered every "
                       "micro-batch as each layer finishes, which pipelining interleaves across "
                       "micro-batches; use --zero 1 with pipeline parallelism (as Megatron-LM's "
                       "distributed optimizer does)",
                       stage_number(l.zero), l.pp);
  if (l.hsdp > 0 && l.zero == ZeroStage::none)
    return fmt::format("--hsdp {} shards state within groups, which needs --zero 1, 2 or 3",
                       l.hsdp);
  // With context parallelism the state is sharded over dp x cp ranks, so groups are of those.
  if (l.hsdp > 0 && (l.hsdp < 2 || l.data_ranks() % l.hsdp != 0))
    return fmt::format("--hsdp {} must be at least 2 and divide the data-parallel ranks ({})",
                       l.hsdp,
                       l.cp > 1 ? fmt::format("dp x cp = {}", l.data_ranks())
                                : fmt::format("{}", l.dp));
  return "";
}

}  // namespace

ParallelLayout ParallelLayout::resolved(std::int64_t world) const {
  ParallelLayout p = *this;
  if (p.tp < 1 || p.pp < 1 || p.cp < 1)
    fail("tp {}, pp {} and cp {} must be at least 1", p.tp, p.pp, p.cp);
  if (p.tensor_grid.size() == 3) {
    const std::int64_t product = p.tensor_grid[0] * p.tensor_grid[1] * p.tensor_grid[2];
    if (p.tp != 1 && p.tp != product)
      fail("--tensor-grid {},{},{} has {} rank{} but --tp is {}: drop --tp (the grid implies "
           "it) or make them agree",
           p.tensor_grid[0], p.tensor_grid[1], p.tensor_grid[2], product, product == 1 ? "" : "s",
           p.tp);
    p.tp = product;
  }
  // The ranks of one data-parallel replica: tp x pp, times cp when it splits sequences.
  const std::int64_t other = p.tp * p.pp * p.cp;
  const std::string others = p.cp > 1 ? fmt::format("tp {} x pp {} x cp {}", p.tp, p.pp, p.cp)
                                       : fmt::format("tp {} x pp {}", p.tp, p.pp);
  const std::string flags = p.cp > 1 ? "--tp / --pp / --cp" : "--tp / --pp";
  if (p.dp == 0) {
    if (world % other != 0)
      fail("the job has {} rank{}, not a multiple of {}: launch a multiple of {} ranks (mpirun "
           "-np {} kintsugi train ...) or change {}",
           world, world == 1 ? "" : "s", others, other, other, flags);
    p.dp = world / other;
  }
  if (p.world() != world)
    fail("the job has {} ranks but tp {} x dp {} x pp {}{} = {}: change --dp to {} or launch {} "
         "ranks",
         world, p.tp, p.dp, p.pp, p.cp > 1 ? fmt::format(" x cp {}", p.cp) : "", p.world(),
         world / other, p.world());
  return p;
}

std::string ParallelLayout::value_problem() const {
  if (tp < 1) return fmt::format("parallel.tp = {} must be at least 1", tp);
  if (pp < 1) return fmt::format("parallel.pp = {} must be at least 1", pp);
  if (virtual_stages < 1)
    return fmt::format("parallel.virtual_stages = {} must be at least 1", virtual_stages);
  if (dp < 0)
    return fmt::format("parallel.dp = {} must not be negative (0: from the world size)", dp);
  if (hsdp < 0) return fmt::format("parallel.hsdp = {} must not be negative", hsdp);
  if (cp < 1) return fmt::format("parallel.cp = {} must be at least 1", cp);
  if (ep < 1) return fmt::format("parallel.ep = {} must be at least 1", ep);
  const auto& g = tensor_grid;
  if (!g.empty() && (g.size() != 3 || std::any_of(g.begin(), g.end(), [](auto n) { return n < 1; })))
    return fmt::format("parallel.tensor_grid must be three whole numbers of at least 1, [x, y, z], "
                       "not {} entries; --tensor-grid 2,2,1 for example",
                       g.size());
  try {
    order_dims(order);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string ParallelLayout::problem() const {
  if (auto p = value_problem(); !p.empty()) return p;
  if (dp < 1) return fmt::format("parallel.dp = {} must be at least 1 once resolved", dp);
  if (auto p = grid_problem(*this); !p.empty()) return p;
  if (auto p = context_problem(*this); !p.empty()) return p;
  if (auto p = expert_problem(*this); !p.empty()) return p;
  return sharding_problem(*this);
}

std::string ParallelLayout::description(const std::string& stages) const {
  std::string text = fmt::format("tp {} x dp {} x pp {}{}{} (order {})", tp, dp, pp,
                                 cp > 1 ? fmt::format(" x cp {} ({})", cp, cp_comm) : "",
                                 sequence_parallel && tp > 1 ? ", sequence parallel" : "", order);
  if (has_grid())
    text += fmt::format(", tensor grid {} x {} x {}", tensor_grid[0], tensor_grid[1],
                        tensor_grid[2]);
  if (ep > 1)
    text += fmt::format(", experts over ep {} (expert data parallelism over {})", ep,
                        expert_data_ranks());
  if (pp > 1)
    text += fmt::format(", schedule {}{}, blocks per chunk [{}]", schedule,
                        virtual_stages > 1 ? fmt::format(" x {} virtual", virtual_stages) : "",
                        stages);
  if (zero > ZeroStage::none && hsdp > 0)
    text += fmt::format(", ZeRO-{} sharded over {} ranks x {} replicas", zero, shards(),
                        replicas());
  else if (zero > ZeroStage::none && data_ranks() == 1)
    text += fmt::format(", ZeRO-{} over 1 data-parallel rank (nothing to shard: no effect)", zero);
  else if (zero > ZeroStage::none)
    text += fmt::format(", ZeRO-{} over {} ranks", zero, data_ranks());
  return text;
}

ParallelLayout ParallelLayout::planned_over(const ParallelLayout& base) const {
  ParallelLayout p = *this;
  p.order = base.order;
  if (cp == 1) p.cp_comm = base.cp_comm;  // chosen by the planner where cp > 1 (refinements)
  p.layers_per_stage = pp == base.pp ? base.layers_per_stage : std::vector<std::int64_t>{};
  if (!has_grid()) p.tensor_grid_overlap = base.tensor_grid_overlap;
  return p;
}

bool same_split(const ParallelLayout& a, const ParallelLayout& b) {
  ParallelLayout x = a;
  x.zero = b.zero;
  x.hsdp = b.hsdp;
  x.order = b.order;
  x.layers_per_stage = b.layers_per_stage;
  x.tensor_grid_overlap = b.tensor_grid_overlap;
  return x == b;
}

namespace {

// The field's text is made only when it is pinned: the search asks this for every candidate.
bool allowed(const LayoutPins& pins, const ParallelLayout& l, const char* field) {
  return !pins.pinned(field) || pins.allows(field, field_text(l, field));
}

}  // namespace

std::vector<TensorSplit> tensor_splits(std::int64_t tp, const LayoutPins& pins) {
  std::vector<TensorSplit> out;
  const ParallelLayout one_d{.tp = tp};
  if (allowed(pins, one_d, "tensor_grid")) out.push_back({one_d, false});
  if (tp == 1) return out;
  for (std::int64_t x = 1; x <= tp; ++x) {
    if (tp % x != 0) continue;
    for (std::int64_t y = 1; y <= tp / x; ++y) {
      if (tp / x % y != 0) continue;
      const ParallelLayout grid{.tp = tp, .tensor_grid = {x, y, tp / (x * y)}};
      const bool named = pins.lists("tensor_grid", field_text(grid, "tensor_grid"));
      if (!allowed(pins, grid, "tensor_grid") || (!named && x == 1 && tp / (x * y) == 1))
        continue;
      out.push_back({grid, named});
    }
  }
  return out;
}

std::vector<ParallelLayout> refinements(const ParallelLayout& split, const LayoutPins& pins) {
  std::vector<ParallelLayout> out;
  ParallelLayout l = split;
  const std::vector<bool> overlaps =
      l.has_grid() && pins.pinned("tensor_grid_overlap") ? std::vector<bool>{true, false}
                                                          : std::vector<bool>{true};
  for (int stage = 0; stage <= (l.data_ranks() > 1 ? 3 : 0); ++stage) {
    l.zero = static_cast<ZeroStage>(stage);
    if (!allowed(pins, l, "zero")) continue;
    std::vector<std::int64_t> groups = {0};
    if (l.zero > ZeroStage::none)
      for (std::int64_t k = 2; k < l.data_ranks(); ++k)
        if (l.data_ranks() % k == 0) groups.push_back(k);
    for (std::int64_t group : groups) {
      l.hsdp = group;
      if (!allowed(pins, l, "hsdp")) continue;
      for (bool sp : {false, true}) {
        l.sequence_parallel = sp;
        if ((sp && (l.tp == 1 || l.has_grid())) || !allowed(pins, l, "sequence_parallel"))
          continue;
        for (bool overlap : overlaps) {
          l.tensor_grid_overlap = overlap;
          if (l.has_grid() && !allowed(pins, l, "tensor_grid_overlap")) continue;
          // Context parallelism's exchange: both (those --cp-comm pins), each layout
          // checking its own rules later (layout_rules.cpp); cp 1 keeps the split's.
          for (CpComm comm : l.cp > 1 ? std::vector<CpComm>{CpComm::all_to_all, CpComm::ring}
                                      : std::vector<CpComm>{split.cp_comm}) {
            l.cp_comm = comm;
            if (l.cp == 1 || allowed(pins, l, "cp_comm")) out.push_back(l);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace kintsugi
