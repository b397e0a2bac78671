#include "kintsugi/plan/grid_cost.hpp"

#include <algorithm>

#include "kintsugi/core/error.hpp"
#include "kintsugi/model/block_inventory.hpp"
#include "kintsugi/plan/comm_volume.hpp"
#include "kintsugi/plan/flops.hpp"

namespace kintsugi {

GridBlockElements grid_block_elements(const ModelConfig& m,
                                      const std::vector<std::int64_t>& grid) {
  KINTSUGI_ASSERT(grid.size() == 3);
  const double x = static_cast<double>(grid[0]), y = static_cast<double>(grid[1]);
  const double z = static_cast<double>(grid[2]);
  const BlockInventory b = block_inventory(m);
  const double blocks = b.matrix_parameters() / (x * y * z);
  // Biases are split by the layer's outer dimension: entry layers' over y, exit layers' over x.
  const double replicated =
      b.norm_parameters() + b.entry_bias_parameters() / y + b.exit_bias_parameters() / x;
  return {blocks + replicated, replicated};
}

std::vector<GridLayer> grid_block_layers(const ModelConfig& m,
                                         const std::vector<std::int64_t>& grid, double rows,
                                         double a, double pb, double gb) {
  KINTSUGI_ASSERT(grid.size() == 3);
  const double x = static_cast<double>(grid[0]), y = static_cast<double>(grid[1]);
  auto layer = [&](bool entry, bool attention, const LinearSpec& spec) {
    const double out = static_cast<double>(spec.out), in = static_cast<double>(spec.in);
    // Entry: input over x, output over y; exit: the converse (model/grid_linear.hpp).
    GridLayer l{.entry = entry, .attention = attention};
    l.gemm_m = rows;
    l.gemm_n = entry ? out / y : out / x;
    l.gemm_k = entry ? in / x : in / y;
    const double elements = out * in / (x * y);  // the rank's block before its z shard
    l.gather = elements * pb;
    l.scatter = elements * gb;
    l.forward_reduce = rows * l.gemm_n * a;
    if (entry) {
      l.backward_reduce = rows * in / x * a;
      l.backward_gather = rows * in * a;
    } else {
      l.forward_gather = rows * out * a;
      l.backward_reduce = rows * in / y * a;
    }
    return l;
  };
  std::vector<GridLayer> out;
  for (const HalfSpec& h : block_inventory(m).halves) {
    const bool attention = h.kind == HalfSpec::Kind::attention;
    for (std::size_t k = 0; k < h.entries.size(); ++k) {
      out.push_back(layer(true, attention, h.entries[k]));
      // Entry layers share one input gradient (SwiGLU's gate and up): one reduction and one
      // gather, held by the last.
      if (k + 1 < h.entries.size()) out.back().backward_reduce = out.back().backward_gather = 0;
    }
    out.push_back(layer(false, attention, h.exit));
  }
  return out;
}

GridLinks grid_links(const ClusterSpec& cluster, const std::vector<std::int64_t>& grid) {
  KINTSUGI_ASSERT(grid.size() == 3);
  GridLinks g{.x = grid[0], .y = grid[1], .z = grid[2]};
  // Rank 0's groups: x varies fastest (docs/parallelism.md, "The grid").
  auto ranks = [](std::int64_t n, std::int64_t stride) {
    std::vector<int> out;
    for (std::int64_t i = 0; i < n; ++i) out.push_back(static_cast<int>(i * stride));
    return out;
  };
  g.x_link = cluster.ring_link(ranks(g.x, 1));
  g.y_link = cluster.ring_link(ranks(g.y, g.x));
  g.z_link = cluster.ring_link(ranks(g.z, g.x * g.y));
  g.plane_link = cluster.ring_link(ranks(g.x * g.y, 1));
  return g;
}

double collective_seconds(double bytes_sent, std::int64_t n, const LinkSpec& link, LinkUse use) {
  if (n <= 1 || bytes_sent <= 0) return 0.0;
  const double steps = static_cast<double>(use == LinkUse::all_reduce ? 2 * (n - 1) : n - 1);
  return bytes_sent / (link.rate_gbs(use) * 1e9) + steps * link.latency_us * 1e-6;
}

GridBlockComm grid_block_comm_seconds(const std::vector<GridLayer>& layers,
                                      const std::vector<double>& gemm,
                                      double attention_seconds, const GridLinks& g,
                                      bool overlap) {
  KINTSUGI_ASSERT(layers.size() == gemm.size());
  auto gather = [&](const GridLayer& l) {
    return collective_seconds(ring_all_gather_bytes(l.gather, g.z), g.z, g.z_link,
                              LinkUse::all_gather);
  };
  auto scatter = [&](const GridLayer& l) {
    return collective_seconds(ring_reduce_scatter_bytes(l.scatter, g.z), g.z, g.z_link,
                              LinkUse::reduce_scatter);
  };
  // Entry layers sum over x and gather over x; exit layers sum forward over y, backward over x.
  auto reduce = [&](double bytes, bool over_x) {
    const std::int64_t n = over_x ? g.x : g.y;
    return collective_seconds(ring_all_reduce_bytes(bytes, n), n, over_x ? g.x_link : g.y_link,
                              LinkUse::all_reduce);
  };
  auto gather_x = [&](double bytes) {
    return collective_seconds(ring_all_gather_bytes(bytes, g.x), g.x, g.x_link,
                              LinkUse::all_gather);
  };
  auto hidden = [&](double comm, double window) {
    return overlap ? std::max(0.0, comm - window) : comm;
  };
  GridBlockComm out;
  // Forward: qkv, proj, fc, (up,) fc2. Layer i's gather was issued before layer i - 1's GEMM
  // (and runs under the attention core before proj).
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const GridLayer& l = layers[i];
    const double window =
        i == 0 ? 0.0 : gemm[i - 1] + (l.attention && !l.entry ? attention_seconds : 0.0);
    out.forward += hidden(gather(l), window) + reduce(l.forward_reduce, l.entry) +
                   gather_x(l.forward_gather);
  }
  // Backward: fc2, fc, (up,) proj, qkv (model/transformer_block.cpp's order); dx and dW are
  // each as long as the forward product, the attention core's backward twice its forward.
  std::vector<std::size_t> order;
  for (bool attention : {false, true}) {
    for (std::size_t i = 0; i < layers.size(); ++i)
      if (layers[i].attention == attention && !layers[i].entry) order.push_back(i);
    for (std::size_t i = 0; i < layers.size(); ++i)
      if (layers[i].attention == attention && layers[i].entry) order.push_back(i);
  }
  auto backward_compute = [&](std::size_t j) {  // the j-th layer's dx and dW, and what follows
    const GridLayer& l = layers[order[j]];
    const bool before_core = l.attention && !l.entry;  // proj: the attention core's backward next
    return 2 * gemm[order[j]] + (before_core ? 2 * attention_seconds : 0.0);
  };
  for (std::size_t j = 0; j < order.size(); ++j) {
    const GridLayer& l = layers[order[j]];
    out.backward += hidden(gather(l), j == 0 ? 0.0 : backward_compute(j - 1));
    out.backward += hidden(reduce(l.backward_reduce, !l.entry), gemm[order[j]]);
    out.backward += gather_x(l.backward_gather);
    out.backward +=
        j + 1 == order.size() ? scatter(l) : hidden(scatter(l), backward_compute(j + 1));
  }
  return out;
}

}  // namespace kintsugi
