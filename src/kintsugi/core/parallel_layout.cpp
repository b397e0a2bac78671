#include "kintsugi/core/parallel_layout.hpp"

#include <algorithm>
#include <sstream>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

ZeroStage zero_stage(std::int64_t number, std::string_view what) {
  if (number < 0 || number > 3) fail("{} = {} must be 0, 1, 2 or 3", what, number);
  return static_cast<ZeroStage>(number);
}

std::array<Dim, 3> order_dims(const std::string& order) {
  std::array<Dim, 3> dims{};
  std::istringstream in(order);
  std::string part;
  int n = 0;
  bool seen[3] = {false, false, false};
  while (std::getline(in, part, '-')) {
    Dim d;
    if (part == "tp") d = Dim::tp;
    else if (part == "dp") d = Dim::dp;
    else if (part == "pp") d = Dim::pp;
    else fail("parallel.order = \"{}\": \"{}\" is not tp, dp or pp", order, part);
    if (n == 3 || seen[static_cast<int>(d)])
      fail("parallel.order = \"{}\" must name tp, dp and pp once each, e.g. \"tp-dp-pp\"", order);
    seen[static_cast<int>(d)] = true;
    dims[n++] = d;
  }
  if (n != 3)
    fail("parallel.order = \"{}\" must name tp, dp and pp once each, e.g. \"tp-dp-pp\"", order);
  return dims;
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
  if (l.hsdp > 0 && (l.hsdp < 2 || l.dp % l.hsdp != 0))
    return fmt::format("--hsdp {} must be at least 2 and divide the data-parallel ranks ({})",
                       l.hsdp, l.dp);
  return "";
}

}  // namespace

ParallelLayout ParallelLayout::resolved(std::int64_t world) const {
  ParallelLayout p = *this;
  if (p.tp < 1 || p.pp < 1) fail("tp {} and pp {} must be at least 1", p.tp, p.pp);
  if (p.tensor_grid.size() == 3) {
    const std::int64_t product = p.tensor_grid[0] * p.tensor_grid[1] * p.tensor_grid[2];
    if (p.tp != 1 && p.tp != product)
      fail("--tensor-grid {},{},{} has {} rank{} but --tp is {}: drop --tp (the grid implies "
           "it) or make them agree",
           p.tensor_grid[0], p.tensor_grid[1], p.tensor_grid[2], product, product == 1 ? "" : "s",
           p.tp);
    p.tp = product;
  }
  if (p.dp == 0) {
    if (world % (p.tp * p.pp) != 0)
      fail("the job has {} rank{}, not a multiple of tp {} x pp {}: launch a multiple of {} "
           "ranks (mpirun -np {} kintsugi train ...) or change --tp / --pp",
           world, world == 1 ? "" : "s", p.tp, p.pp, p.tp * p.pp, p.tp * p.pp);
    p.dp = world / (p.tp * p.pp);
  }
  if (p.world() != world)
    fail("the job has {} ranks but tp {} x dp {} x pp {} = {}: change --dp to {} or launch {} "
         "ranks",
         world, p.tp, p.dp, p.pp, p.world(), world / (p.tp * p.pp), p.world());
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
  return sharding_problem(*this);
}

}  // namespace kintsugi
