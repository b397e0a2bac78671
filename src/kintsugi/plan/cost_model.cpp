#include "kintsugi/plan/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/model/block_inventory.hpp"
#include "kintsugi/parallel/stage_partition.hpp"
#include "kintsugi/plan/comm_volume.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/grid_cost.hpp"
#include "kintsugi/plan/memory.hpp"

namespace kintsugi {

std::string describe(const Layout& l) {
  const ParallelLayout& p = l.parallel;
  std::string s = fmt::format("tp {}", p.tp);
  if (p.has_grid())
    s += fmt::format(" grid {}x{}x{}{}", p.tensor_grid[0], p.tensor_grid[1], p.tensor_grid[2],
                     p.tensor_grid_overlap ? "" : " no-overlap");
  s += fmt::format(" pp {} dp {}", p.pp, p.dp);
  if (p.cp > 1) s += fmt::format(" cp {}{}", p.cp, p.cp_comm == CpComm::ring ? " ring" : "");
  if (p.ep > 1) s += fmt::format(" ep {}", p.ep);
  s += fmt::format(" mb {}", l.micro_batch);
  if (p.pp > 1) s += fmt::format(" {}", name_of(p.schedule));
  if (p.virtual_stages > 1) s += fmt::format(" v{}", p.virtual_stages);
  if (p.zero > ZeroStage::none) s += fmt::format(" zero{}", stage_number(p.zero));
  if (p.hsdp > 0) s += fmt::format(" hsdp{}", p.hsdp);
  if (l.recompute == Recompute::selective) s += " selective";
  if (l.recompute == Recompute::full) s += " full";
  if (p.sequence_parallel) s += " sp";
  return s;
}

std::string describe_legend() {
  return "layout: tp/pp/dp ranks (grid XxYxZ: the tp ranks as a 3D tensor grid, no-overlap: its\n"
         "collectives not overlapped), mb micro-batch; pipeline schedule (gpipe, 1f1b, interleaved)\n"
         "with vN model chunks per rank; zeroN ZeRO stage; hsdpN ZeRO sharded over groups of N\n"
         "data-parallel ranks, replicated across groups; selective/full activation recomputation;\n"
         "sp sequence parallelism; cp N each sequence split over N (context parallelism; ring: its\n"
         "ring exchange, else the all-to-all); ep N a mixture of experts' experts split over N of\n"
         "the data-parallel ranks (expert parallelism).";
}

std::vector<std::string> pin_unmeasured_dimensions(LayoutPins& pins, bool measured) {
  if (measured || pins.pinned("tensor_grid")) return {};
  pins.pin("tensor_grid", {"[]"});
  return {"3D tensor grids not searched on a cluster spec unless asked: --tensor-grid none any "
          "searches both (docs/planner.md)"};
}

namespace {

// Caches of pure functions the search calls with the same arguments many times.
const StagePartition& cached_partition(const ModelConfig& m, int p, int v) {
  static std::mutex mutex;
  static std::map<std::tuple<Family, std::int64_t, std::int64_t, std::int64_t, int, int>,
                  StagePartition>
      cache;
  const auto key = std::make_tuple(m.family, m.n_layer, m.d_model, m.seq_len, p, v);
  std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, partition_stages(m, p, v, m.seq_len, {})).first;
  return it->second;
}

}  // namespace

int slots_in_flight(PipelineSchedule s, int p, int v, int m, int rank) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int, int>, int> cache;
  const auto key = std::make_tuple(static_cast<int>(s), p, v, m, rank);
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  // As StageModel allocates them: one pool for the rank's chunks, at least one slot.
  const int slots = activation_slots(s, {p, v, m}, rank);
  std::lock_guard lock(mutex);
  cache[key] = slots;
  return slots;
}

StepShape layout_step_shape(const Workload& w, const Layout& l) {
  StepShape s{.micro_batch = l.micro_batch,
              .seq = w.model.seq_len,
              .micro_batches = l.micro_batches(w.global_batch)};
  s.element_bytes = static_cast<std::int64_t>(size_of(grad_dtype(w.precision, w.grad_precision)));
  s.activation_element_bytes = element_bytes(w.precision);
  s.param_element_bytes = element_bytes(w.precision);
  s.recompute_full = l.recompute == Recompute::full;
  s.recompute_selective = l.recompute == Recompute::selective;
  return s;
}

std::int64_t pipeline_sends(int chunk, int chunks) {
  return (chunk == chunks - 1 ? 0 : 1) + (chunk == 0 ? 0 : 1);
}

LayoutSpec layout_spec(const Layout& l, std::int64_t global_batch) {
  return {.parallel = l.parallel, .global_batch = global_batch, .micro_batch = l.micro_batch};
}

std::string layout_problem(const Workload& w, const Layout& l) {
  return layout_problem(w.model, layout_spec(l, w.global_batch));
}

namespace {

// Elements of one block's parameters on a tensor-parallel rank (flops.hpp's block_parameters:
// the split part divided by tp, the replicated part whole), and those whose gradients are
// partial sums: under sequence parallelism the two norms, which see only this rank's rows (the
// row-parallel biases see the gathered gradient, whole: model/layers.cpp); with a tensor grid
// everything replicated over its z, which sees only z's sequences (grid_cost.hpp); and with 1D
// tensor parallelism, sequence parallel or not, Qwen3's q_norm and k_norm, which each rank
// applies to its own heads (model/block_inventory.hpp's qk_norm_width; refused on a grid). A
// mixture of experts' matrices are replicated over tp and see only this rank's rows (tp
// requires sequence parallelism for them: model/moe_layer.hpp).
struct BlockElements {
  double local = 0, partial = 0, head_partial = 0;
};
BlockElements block_elements(const ModelConfig& m, double tp, int index = 0) {
  const BlockParameters p = block_parameters(m, index);
  const BlockInventory b = block_inventory(m, index);
  const double experts = b.moe ? b.moe->matrix_parameters() : 0.0;
  return {p.split / tp + p.replicated, 2.0 * static_cast<double>(norm_parameters(m)) + experts,
          m.qk_norm() ? 2.0 * static_cast<double>(m.head_dim()) : 0.0};
}
// Block `index`'s (a MoE block's or a dense one's; a grid has no MoE blocks).
BlockElements block_elements(const ModelConfig& m, const Layout& l, int index = 0) {
  const ParallelLayout& p = l.parallel;
  if (!p.has_grid()) return block_elements(m, static_cast<double>(p.tp), index);
  const GridBlockElements g = grid_block_elements(m, p.tensor_grid);
  return {g.local, g.depth_replicated, 0.0};
}

// What one pipeline rank holds and does.
struct RankShare {
  std::int64_t blocks = 0;
  // Of those, the dense blocks and the MoE blocks (block_kinds' order: docs/moe.md, "Dense
  // blocks").
  std::array<std::int64_t, 2> kind_blocks{};
  bool embedding = false, head = false;
  int chunks = 0;
  double elements = 0;        // parameter elements (tp-local)
  double partial = 0;         // with partial gradients (BlockElements): sequence parallelism's
                              // norms and positions, a grid's everything replicated over z
  double head_partial = 0;    // with partial gradients under any tp: Qwen3's q_norm and k_norm
  double tied_copy = 0;       // elements of the tied token table held at both pipeline ends
                              // (on either end: both sum it once per step)
  double expert_elements = 0;  // expert parallelism: this rank's experts (E / ep per block),
                               // not in `elements` (reduced and sharded over dp / ep ranks)
  double activation_bytes = 0;  // per slot: the largest chunk, with the rank's extras (the
                                // chunks share their slots: model/activation_pool.hpp)
};

RankShare rank_share(const Workload& w, const Layout& l, int rank, const ActivationShape& act) {
  const ModelConfig& m = w.model;
  const int p = static_cast<int>(l.parallel.pp), v = static_cast<int>(l.parallel.virtual_stages);
  const StagePartition& part = cached_partition(m, p, v);
  const double d = m.d_model;
  const std::int64_t vocab_ranks = l.parallel.vocab_ranks();
  const double table =
      static_cast<double>(m.padded_vocab(vocab_ranks)) * d / static_cast<double>(vocab_ranks);
  const double norm = static_cast<double>(norm_parameters(m));
  const bool grid = !l.parallel.tensor_grid.empty();
  const BlockElements block = block_elements(m, l);
  RankShare r;
  r.chunks = v;
  std::vector<BlockRange> ranges;
  for (int c = 0; c < v; ++c) {
    const int g = c * p + rank;
    const std::int64_t n = part.num_layers[g];
    const bool first = g == 0, last = g == p * v - 1;
    r.blocks += n;
    const std::array<BlockKind, 2> kinds = block_kinds(m, part.first_layer[g], n);
    for (std::size_t k = 0; k < kinds.size(); ++k) r.kind_blocks[k] += kinds[k].count;
    r.embedding |= first;
    r.head |= last;
    r.elements += sum_over_blocks(m, [&](int i) { return block_elements(m, l, i).local; },
                                  part.first_layer[g], n);
    r.partial += sum_over_blocks(m, [&](int i) { return block_elements(m, l, i).partial; },
                                 part.first_layer[g], n);
    if (l.parallel.ep > 1 && m.is_moe()) {
      // Expert parallelism (docs/moe.md): every expert's three matrices leave the MoE block's
      // elements; this rank's E / ep of them are its expert store.
      const double expert = 3.0 * static_cast<double>(m.d_model) *
                            static_cast<double>(m.expert_hidden());
      const double moe = static_cast<double>(kinds[1].count);
      r.elements -= moe * expert * static_cast<double>(m.moe.experts);
      r.expert_elements += moe * expert * static_cast<double>(m.moe.experts / l.parallel.ep);
      r.partial -= moe * expert * static_cast<double>(m.moe.experts - m.moe.experts / l.parallel.ep);
    }
    r.head_partial += n * block.head_partial;
    // With a grid every parameter but the blocks' weight blocks is replicated over z, the
    // token table (and head) included.
    if (first) {
      r.elements += table + (m.learned_positions() ? m.seq_len * d : 0.0) +
                    (m.embedding_norm() ? norm : 0.0);
      r.partial += (m.learned_positions() ? m.seq_len * d : 0.0) +
                   (m.embedding_norm() ? norm : 0.0) + (grid ? table : 0.0);
      if (m.tied_embeddings() && p * v > 1) r.tied_copy = table;
    }
    if (last) {
      r.elements += norm;
      r.partial += norm;
      // Untied: the LM head's own matrix. Tied across several chunks: the last chunk keeps a
      // copy of the token table, summed with the first chunk's once per step.
      if (!m.tied_embeddings()) {
        r.elements += table;
        if (grid) r.partial += table;
      } else if (p * v > 1) {
        r.elements += r.tied_copy = table;
        if (grid) r.partial += table;
      }
    }
    ranges.push_back({part.first_layer[g], n});
  }
  r.activation_bytes = chunk_activation_bytes(m, act, ranges, r.head, r.embedding);
  return r;
}

double precision_bytes(Precision precision) { return static_cast<double>(element_bytes(precision)); }

// Seconds for a ring collective sending `bytes` per rank over `steps` latency-bound hops, at
// the rate the link runs that collective (LinkSpec::rate_gbs).
double link_seconds(double bytes, double steps, const LinkSpec& link,
                    LinkUse use = LinkUse::transfer) {
  return bytes / (link.rate_gbs(use) * 1e9) + steps * link.latency_us * 1e-6;
}

// Seconds to send the bytes of several collectives, without their latency.
double bytes_seconds(const LinkSpec& link, std::initializer_list<std::pair<double, LinkUse>> parts) {
  double seconds = 0;
  for (const auto& [bytes, use] : parts)
    if (bytes > 0) seconds += bytes / (link.rate_gbs(use) * 1e9);
  return seconds;
}

bool group_crosses_nodes(const LayoutMap& map, Dim d, std::int64_t per_node) {
  const auto group = map.group(0, d);
  for (int r : group)
    if (r / per_node != group.front() / per_node) return true;
  return false;
}

// GEMM efficiency of a block and of the LM head, FLOP-weighted harmonic means over their
// matrix products for `rows` token rows. The formula is symmetric in (m, n, k), so a
// backward GEMM (the same three dimensions permuted) has its forward's efficiency.
struct Efficiency {
  double block = 1, head = 1;
};
// `attention`: the attention core's efficiency when a measured rate replaces the GEMM curve
// for it (ClusterSpec::attention_tflops over the peak), else 0.
// `rows` are the rank's token rows; a grid (x, y; 1D: 1, tp) splits the entry layers' input
// over x and output over y, the exit layers' the converse, and the heads over y.
Efficiency gemm_efficiency(const ModelConfig& m, const ClusterSpec& c, double rows, double x,
                           double y, double vocab_ranks, double attention) {
  const double d = m.d_model;
  const double s = static_cast<double>(m.seq_len), hd = static_cast<double>(m.head_dim());
  // The shapes of the block's products (their FLOPs, 2 m n k each, add up to flops.hpp's block
  // forward: the matrices and the attention products), which the curve needs one by one: the
  // block's layers (model/block_inventory.hpp), a half's entry layers of one shape counted
  // together (SwiGLU's gate and up), then the attention core.
  struct Gemm {
    double m, n, k, count;
  };
  std::vector<Gemm> gemms;
  // With dense and MoE blocks (docs/moe.md, "Dense blocks") each kind's products weigh its
  // blocks, the attention core all of them; with one kind, one block's.
  const std::array<BlockKind, 2> kinds = block_kinds(m);
  const bool mixed = kinds[0].count > 0 && kinds[1].count > 0;
  for (const BlockKind& kind : kinds) {
    if (kind.count == 0) continue;
    const double weight = mixed ? static_cast<double>(kind.count) : 1.0;
    const std::size_t first = gemms.size();
    const BlockInventory inventory = block_inventory(m, kind.index);
    for (const HalfSpec& h : inventory.halves) {
      if (h.entries.empty()) continue;  // a mixture of experts' MLP half: below
      for (std::size_t k = 0; k < h.entries.size(); ++k) {  // input over x, output over y
        const LinearSpec& l = h.entries[k];
        const Gemm g{rows, static_cast<double>(l.out) / y, static_cast<double>(l.in) / x, 1};
        const bool same = k > 0 && h.entries[k - 1].in == l.in && h.entries[k - 1].out == l.out;
        if (same) gemms.back().count += 1;
        else gemms.push_back(g);
      }
      const LinearSpec& e = h.exit;  // input over y, output over x
      gemms.push_back({rows, static_cast<double>(e.out) / x, static_cast<double>(e.in) / y, 1});
    }
    // A mixture of experts' products (model/moe_layer.hpp): the router, each expert's three on
    // its share of the routed rows (rows x top_k / experts when balanced), the shared expert's
    // three and its gate. Under 1D tensor parallelism each rank runs its 1/tp of the rows
    // (sequence parallelism).
    if (const auto& e = inventory.moe) {
      const double d_model = static_cast<double>(e->d), h = static_cast<double>(e->hidden);
      const double n = static_cast<double>(e->experts), k = static_cast<double>(e->top_k);
      const double own = rows / y;
      const double expert_rows = own * k / n, hs = static_cast<double>(e->shared_hidden);
      gemms.push_back({own, n, d_model, 1});
      gemms.push_back({expert_rows, h, d_model, 2 * n});
      gemms.push_back({expert_rows, d_model, h, n});
      if (hs > 0) {
        gemms.push_back({own, hs, d_model, 2});
        gemms.push_back({own, d_model, hs, 1});
        gemms.push_back({own, 1, d_model, 1});
      }
    }
    for (std::size_t i = first; i < gemms.size(); ++i) gemms[i].count *= weight;
  }
  const std::size_t attention_core = gemms.size();
  // QK^T and PV per sequence and head.
  const double cores = 2 * rows / s * m.n_head / y;
  gemms.push_back({s, s, hd, mixed ? cores * static_cast<double>(m.n_layer) : cores});
  double flops = 0, seconds = 0;
  for (std::size_t i = 0; i < gemms.size(); ++i) {
    const Gemm& g = gemms[i];
    const double work = 2 * g.m * g.n * g.k * g.count;
    flops += work;
    seconds += work / (i == attention_core && attention > 0 ? attention
                                                             : c.gemm_efficiency(g.m, g.n, g.k));
  }
  const double vocab =
      static_cast<double>(m.padded_vocab(static_cast<std::int64_t>(vocab_ranks))) / vocab_ranks;
  return {flops / seconds, c.gemm_efficiency(rows, vocab, d)};
}

}  // namespace

namespace {

// What predict() works out once per layout: shapes, byte sizes, links, FLOPs and efficiencies.
struct Context {
  const Workload& w;
  const ClusterSpec& cluster;
  const Layout& l;
  const ModelConfig& m;
  int p = 1, v = 1;
  std::int64_t mbs = 1;          // micro-batches per step
  double pb = 0, gb = 0;         // bytes of a parameter/activation element and of a gradient
  bool mixed = false, full = false;
  // A rank's token rows of a micro-batch (its 1/cp of each sequence); tensor- and
  // context-parallel ranks.
  double rows = 0, tp = 1, cp = 1;
  // Tensor grid (1D: grid false, x 1, y tp, z 1): its shape, the rank's token rows (rows / z),
  // the ranks sharing the vocabulary (1D: tp; a grid: x y) and the links of its groups.
  bool grid = false;
  double gx = 1, gy = 1, gz = 1, local_rows = 0, vocab_ranks = 1;
  GridLinks grid_links;
  LinkSpec tp_link, dp_link, pp_link, shard_link, cp_link;  // dp_link: the dp (x cp) ranks
  LinkSpec ep_link;  // expert parallelism: the ep consecutive data-parallel ranks of rank 0
  double hw = 0, model_flops = 0, head_flops = 0, block_hw = 0;  // per token
  // A dense block's and a MoE block's hardware FLOPs per token (block_kinds' order; block_hw:
  // their sum over the model's blocks).
  std::array<double, 2> kind_hw{};
  double block_attention = 0;    // of block_hw: the attention core (split over heads only)
  double peak = 0;               // FLOP/s of one device at the workload's precision
  Efficiency eff;
  double backward_share = 0;     // backward's share of a micro-batch's compute
  ActivationShape act;
};

Context make_context(const Workload& w, const ClusterSpec& cluster, const Layout& l,
                     Prediction& out) {
  const ModelConfig& m = w.model;
  Context c{.w = w, .cluster = cluster, .l = l, .m = m};
  c.p = static_cast<int>(l.parallel.pp);
  c.v = static_cast<int>(l.parallel.virtual_stages);
  c.mbs = l.micro_batches(w.global_batch);
  c.pb = precision_bytes(w.precision);
  c.gb = static_cast<double>(size_of(grad_dtype(w.precision, w.grad_precision)));
  c.mixed = is_mixed(w.precision);
  c.full = l.recompute == Recompute::full;
  c.cp = static_cast<double>(l.parallel.cp);
  c.rows = static_cast<double>(l.micro_batch * m.seq_len) / c.cp;
  c.tp = static_cast<double>(l.parallel.tp);
  c.grid = !l.parallel.tensor_grid.empty();
  if (c.grid) {
    c.gx = static_cast<double>(l.parallel.tensor_grid[0]);
    c.gy = static_cast<double>(l.parallel.tensor_grid[1]);
    c.gz = static_cast<double>(l.parallel.tensor_grid[2]);
    c.grid_links = grid_links(cluster, l.parallel.tensor_grid);
  } else {
    c.gy = c.tp;
  }
  c.local_rows = c.rows / c.gz;
  c.vocab_ranks = static_cast<double>(l.parallel.vocab_ranks());
  const LayoutMap map(static_cast<int>(l.parallel.world()), l.parallel);
  out.tp_crosses_nodes = group_crosses_nodes(map, Dim::tp, cluster.devices_per_node);
  out.dp_crosses_nodes = group_crosses_nodes(map, Dim::dp, cluster.devices_per_node);
  out.pp_crosses_nodes = group_crosses_nodes(map, Dim::pp, cluster.devices_per_node);
  // A ring runs at its slowest link: inside a package, the node (an all-to-all node's share of
  // it), or between nodes (with multi-rail NICs, at the rate its place in the nodes allows):
  // ring_link.
  c.tp_link = cluster.ring_link(map.group(0, Dim::tp));
  c.cp_link = cluster.ring_link(map.group(0, Dim::cp));
  // Gradients are reduced over the dp x cp ranks of rank 0's (tp, pp) position.
  std::vector<int> data_group;
  for (int r : map.group(0, Dim::dp))
    for (int q : map.group(r, Dim::cp)) data_group.push_back(q);
  c.dp_link = cluster.ring_link(data_group);
  // Expert parallelism: rank 0's ep group, the first ep of its data-parallel ranks (inside a
  // node when they fit one; else across, at the slowest link they span).
  if (l.parallel.ep > 1)
    c.ep_link = cluster.ring_link(std::vector<int>(
        data_group.begin(), data_group.begin() + static_cast<std::ptrdiff_t>(l.parallel.ep)));
  // A pipeline transfer goes between two devices (one link of an all-to-all node).
  c.pp_link = cluster.node_link(out.pp_crosses_nodes, 2);
  // Hybrid sharding: a shard group is tp x hsdp consecutive ranks (order tp-dp-pp), inside a
  // node when whole groups fit one; the replicas of a shard span the data-parallel group.
  const std::int64_t group_ranks = l.parallel.tp * l.parallel.shards();
  const bool shard_crosses = l.parallel.replicas() > 1
                                 ? group_ranks > cluster.devices_per_node ||
                                       cluster.devices_per_node % group_ranks != 0
                                 : out.dp_crosses_nodes;
  c.shard_link = cluster.node_link(shard_crosses, group_ranks);
  // FLOPs per token (flops.hpp): hardware FLOPs are n_layer blocks and the head's 6 V h; a
  // rank computes its blocks (stage_partition's counts) and, on the last chunk, the head.
  const bool selective = l.recompute == Recompute::selective;
  c.hw = hardware_flops_per_token(m, m.seq_len, selective, c.full);
  c.model_flops = model_flops_per_token(m, m.seq_len);
  c.head_flops = lm_head_flops_per_token(m);
  const std::array<BlockKind, 2> kinds = block_kinds(m);
  for (std::size_t k = 0; k < kinds.size(); ++k)
    if (kinds[k].index >= 0)
      c.kind_hw[k] =
          block_hardware_flops_per_token(m, m.seq_len, selective, c.full, kinds[k].index);
  c.block_hw = sum_over_blocks(m, [&](int i) { return c.kind_hw[m.is_moe_block(i) ? 1 : 0]; });
  // QK^T and PV (12 s d per token, flops.hpp), and their forward again when recomputed.
  c.block_attention = (12.0 + (selective || c.full ? 4.0 : 0.0)) *
                      attended_keys(m.seq_len, m.sliding_window) * static_cast<double>(m.d_model);
  c.peak = cluster.peak_tflops(w.precision) * 1e12;
  c.eff = gemm_efficiency(m, cluster, c.local_rows, c.gx, c.gy, c.vocab_ranks,
                          cluster.attention_tflops > 0
                              ? cluster.attention_tflops / cluster.peak_tflops(w.precision)
                              : 0.0);
  c.backward_share = 1.0 - (c.model_flops / 3.0) / c.hw;
  // A grid's rank holds its z's sequences with its y's heads and MLP columns: the 1D shape
  // with tp = y on micro_batch / z sequences (docs/parallelism.md).
  c.act = {.micro_batch = l.micro_batch / l.parallel.row_ranks(), .seq = m.seq_len / l.parallel.cp,
           .tp = static_cast<std::int64_t>(c.gy),
           .sequence_parallel = l.parallel.sequence_parallel, .recompute = l.recompute,
           .element_bytes = static_cast<std::int64_t>(c.pb), .statistic_bytes = 4,
           .expert_ranks = l.parallel.ep, .cp = l.parallel.cp};
  return c;
}

// The ranks that can be the slowest or the fullest: the first (embedding, most micro-batches
// in flight), the last (LM head) and the middle rank holding the most blocks.
std::vector<int> candidate_ranks(const Context& c) {
  std::vector<int> ranks = {0};
  if (c.p > 2) {
    const StagePartition& part = cached_partition(c.m, c.p, c.v);
    int fullest = 1;
    std::int64_t most = -1;
    for (int r = 1; r < c.p - 1; ++r) {
      std::int64_t blocks = 0;
      for (int k = 0; k < c.v; ++k) blocks += part.num_layers[k * c.p + r];
      if (blocks > most) most = blocks, fullest = r;
    }
    ranks.push_back(fullest);
  }
  if (c.p > 1) ranks.push_back(c.p - 1);
  return ranks;
}

// Seconds of one micro-batch's forward and backward on this rank, without communication.
double compute_seconds(const Context& c, const RankShare& share) {
  // The matrices are split over all tp ranks (a grid's x y z: its rows over z, the rest over
  // x y), the attention core over the heads only (a grid's x ranks compute the same heads).
  double blocks_flops = 0;  // dense blocks', then MoE blocks'
  for (std::size_t k = 0; k < c.kind_hw.size(); ++k)
    if (share.kind_blocks[k] > 0)
      blocks_flops += static_cast<double>(share.kind_blocks[k]) *
                      ((c.kind_hw[k] - c.block_attention) * c.rows / c.tp +
                       c.block_attention * c.local_rows / c.gy);
  const double block_seconds = blocks_flops / (c.peak * c.eff.block);
  const double head_seconds =
      share.head ? c.head_flops * c.local_rows / c.vocab_ranks / (c.peak * c.eff.head) : 0.0;
  // Memory-bound kernels (norms, activations, residuals, attention softmax, the loss): each
  // activation byte a block saves is written in forward and read in backward, and its
  // gradient written and read (4 passes; 5 when full recomputation writes it again); the
  // f32 logits take 5 passes (GEMM output, max, exp-sum, gradient in place, read by the
  // gradient GEMMs). Small on accelerators, a large share of a small model's step on CPUs.
  const ActivationShape saved{.micro_batch = c.act.micro_batch, .seq = c.act.seq,
                              .tp = c.act.tp, .sequence_parallel = c.l.parallel.sequence_parallel,
                              .element_bytes = static_cast<std::int64_t>(c.pb),
                              .cp = c.act.cp};
  double blocks_traffic = 0;  // dense blocks', then MoE blocks'
  const std::array<BlockKind, 2> kinds = block_kinds(c.m);
  for (std::size_t k = 0; k < kinds.size(); ++k)
    if (share.kind_blocks[k] > 0)
      blocks_traffic += static_cast<double>(share.kind_blocks[k]) * (c.full ? 5.0 : 4.0) *
                        block_activation_bytes(c.m, saved, kinds[k].index);
  double attention_traffic = 0;  // per block
  if (c.w.attention == AttentionKernel::materialized) {
    // Scores, softmax and dropout of every head: written and read like a saved activation,
    // once more when recomputation reruns the attention core (with context parallelism a
    // rank's 1/cp of the heads over whole sequences).
    const double matrices = 5.0 * c.m.n_head / c.gy / c.cp * c.act.micro_batch *
                            static_cast<double>(c.m.seq_len) * c.m.seq_len;
    attention_traffic += (c.l.recompute == Recompute::none ? 4.0 : 5.0) * matrices;
  }
  const double logits_traffic =
      share.head ? 5.0 * c.local_rows *
                       static_cast<double>(
                           c.m.padded_vocab(static_cast<std::int64_t>(c.vocab_ranks))) /
                       c.vocab_ranks * 4.0
                 : 0.0;
  const double memory_bound = (blocks_traffic + share.blocks * attention_traffic + logits_traffic) /
                              (c.cluster.memory_bandwidth_gbs * 1e9);
  return block_seconds + head_seconds + memory_bound;
}

// Bytes on the wire per step (comm_volume.hpp, as the trainer's comm_bytes_per_step_theory).
std::map<std::string, double> comm_bytes(const Context& c, const RankShare& share, int rank,
                                         StepShape& shape) {
  shape = layout_step_shape(c.w, c.l);
  shape.grad_elements = static_cast<std::int64_t>(share.elements);
  (c.grid ? shape.depth_grad_elements : shape.sp_grad_elements) =
      static_cast<std::int64_t>(share.partial);
  shape.head_grad_elements = static_cast<std::int64_t>(share.head_partial);
  shape.blocks = share.blocks;
  shape.moe_blocks = share.kind_blocks[1];
  shape.embedding = share.embedding;
  shape.head = share.head;
  shape.pipeline_sends = 0;
  for (int k = 0; k < c.v; ++k) shape.pipeline_sends += pipeline_sends(k * c.p + rank, c.p * c.v);
  shape.tied_embedding_elements = static_cast<std::int64_t>(share.tied_copy);
  shape.expert_grad_elements = shape.expert_gathered_elements =
      static_cast<std::int64_t>(share.expert_elements);
  // ZeRO-3 gathers blocks before forward and backward, the embeddings and head once (the
  // experts: in their own store).
  const double all_experts =
      c.l.parallel.ep > 1 && c.m.is_moe()
          ? 3.0 * c.m.d_model * static_cast<double>(c.m.expert_hidden() * c.m.moe.experts)
          : 0.0;
  const std::array<BlockKind, 2> kinds = block_kinds(c.m);
  double block_local = 0;  // dense blocks', then MoE blocks' (less their experts)
  for (std::size_t k = 0; k < kinds.size(); ++k)
    if (share.kind_blocks[k] > 0)
      block_local += static_cast<double>(share.kind_blocks[k]) *
                     (block_elements(c.m, c.l, kinds[k].index).local - (k == 1 ? all_experts : 0.0));
  shape.gathered_once_elements = static_cast<std::int64_t>(share.elements - block_local);
  shape.gathered_twice_elements = static_cast<std::int64_t>(block_local);
  return step_comm_bytes(c.m, c.l.parallel, shape);
}

// Data parallelism / ZeRO. Reductions go bucket by bucket while backward runs; what the last
// micro-batch's backward cannot hide is exposed (at least the last bucket).
double dp_seconds(const Context& c, const RankShare& share, double compute_mb,
                  const std::map<std::string, double>& bytes) {
  const Layout& l = c.l;
  if (l.parallel.data_ranks() == 1) return 0.0;
  auto get = [&](const std::string& key) {
    auto it = bytes.find(key);
    return it == bytes.end() ? 0.0 : it->second;
  };
  const double grad_bytes = share.elements * c.gb;
  const double buckets = std::max(1.0, std::ceil(grad_bytes / (c.w.bucket_mib * 1048576.0)));
  const double window = compute_mb * c.backward_share;
  // With hybrid sharding the reductions and gathers run in the shard group ("shard.*"), then
  // each shard's gradient is all-reduced across the replicas, after backward.
  const std::int64_t n = l.parallel.shards() > 1 ? l.parallel.shards() : l.parallel.data_ranks();
  const std::string group = l.parallel.replicas() > 1 ? "shard" : l.parallel.cp > 1 ? "dp_cp" : "dp";
  const LinkSpec& link = l.parallel.replicas() > 1 ? c.shard_link : c.dp_link;
  const double hops = 2.0 * static_cast<double>(n - 1);
  const double reductions =
      l.parallel.zero >= ZeroStage::gradients ? static_cast<double>(c.mbs) : 1.0;
  const double each = bytes_seconds(link, {{get(group + ".all_reduce") / reductions,
                                            LinkUse::all_reduce},
                                           {get(group + ".reduce_scatter") / reductions,
                                            LinkUse::reduce_scatter}}) +
                      link_seconds(0, buckets * hops, link);
  double seconds = reductions * std::max(each - window, each / buckets);
  const double gathers =
      l.parallel.zero >= ZeroStage::parameters ? c.mbs * (2.0 * share.blocks + 1) : buckets;
  seconds += link_seconds(get(group + ".all_gather"), gathers * static_cast<double>(n - 1), link,
                          LinkUse::all_gather);
  if (l.parallel.replicas() > 1)
    seconds += link_seconds(get("replica.all_reduce"), 2.0 * (l.parallel.replicas() - 1), c.dp_link,
                            LinkUse::all_reduce);
  return seconds;
}

// 3D tensor parallelism: the grid's communication per step that computation does not hide
// (grid_cost.hpp): every block of every micro-batch, the embedding's and head's all-reduces and
// the loss statistics over the xy plane, and the all-reduce over z of the gradients replicated
// over z (once per step; every micro-batch under ZeRO-2/3).
double grid_seconds(const Context& c, const RankShare& share, const StepShape& shape) {
  const std::vector<GridLayer> layers =
      grid_block_layers(c.m, c.l.parallel.tensor_grid, c.local_rows, c.pb, c.pb, c.gb);
  std::vector<double> gemm;
  for (const GridLayer& g : layers)
    gemm.push_back(g.flops() /
                   (c.peak * c.cluster.gemm_efficiency(g.gemm_m, g.gemm_n, g.gemm_k)));
  // The attention core's forward on this rank: its z's sequences, its y's heads.
  const double attention = 4.0 * attended_keys(c.m.seq_len, c.m.sliding_window) * c.m.q_width() *
                           c.local_rows / c.gy / (c.peak * c.eff.block);
  const GridBlockComm block = grid_block_comm_seconds(layers, gemm, attention, c.grid_links,
                                                      c.l.parallel.tensor_grid_overlap);
  const double per_block = block.forward * (c.full ? 2.0 : 1.0) + block.backward;
  const GridLinks& g = c.grid_links;
  const double boundaries = (share.embedding ? 1 : 0) + (share.head ? 1 : 0);
  const double plane_bytes = boundaries * c.local_rows * c.m.d_model * c.pb +
                             (share.head ? 3.0 * c.local_rows * 4.0 : 0.0);
  const std::int64_t plane = g.x * g.y;
  const double per_micro_batch =
      share.blocks * per_block +
      (boundaries > 0 ? collective_seconds(ring_all_reduce_bytes(plane_bytes, plane), plane,
                                           g.plane_link, LinkUse::all_reduce)
                      : 0.0);
  const double depth_reductions =
      c.l.parallel.zero >= ZeroStage::gradients ? static_cast<double>(c.mbs) : 1.0;
  const double depth =
      depth_reductions *
      collective_seconds(ring_all_reduce_bytes(shape.depth_grad_elements * c.gb, g.z), g.z,
                         g.z_link, LinkUse::all_reduce);
  return c.mbs * per_micro_batch + depth;
}

// Seconds per optimizer step of this rank, by part.
TimePrediction step_time(const Context& c, const RankShare& share, int rank,
                         std::map<std::string, double>& bytes) {
  const Layout& l = c.l;
  const double compute_mb = compute_seconds(c, share);
  StepShape shape;
  bytes = comm_bytes(c, share, rank, shape);
  auto get = [&](const char* key) {
    auto it = bytes.find(key);
    return it == bytes.end() ? 0.0 : it->second;
  };
  // Tensor parallelism: every region boundary is a ring collective of 2(t - 1) hops.
  // With sequence parallelism backward also gathers each block's two norm outputs again.
  const double boundaries = (c.full ? 6.0 : 4.0) * share.blocks + (share.embedding ? 1 : 0) +
                            (share.head ? 1 : 0) +
                            (c.l.parallel.sequence_parallel ? 2.0 * share.blocks : 0);
  const double tp_step =
      c.grid     ? grid_seconds(c, share, shape)
      : l.parallel.tp > 1 ? bytes_seconds(c.tp_link, {{get("tp.all_reduce"), LinkUse::all_reduce},
                                             {get("tp.all_gather"), LinkUse::all_gather},
                                             {get("tp.reduce_scatter"), LinkUse::reduce_scatter}}) +
                       link_seconds(0, c.mbs * boundaries * 2.0 * (l.parallel.tp - 1), c.tp_link)
                 : 0.0;
  // Pipeline: activations and gradients to neighbouring stages, the tied-embedding sum. A
  // stage receives what its neighbours send it, as many tensors of the same size as it sends;
  // blocking p2p puts those receives on its timeline as well.
  const double transfers =
      (c.w.p2p == PipelineP2p::blocking ? 2.0 : 1.0) *
      link_seconds(get("pp.send"), c.mbs * shape.pipeline_sends, c.pp_link);
  const double pp_step =
      transfers + link_seconds(get("embedding.all_reduce"), get("embedding.all_reduce") > 0 ? 2 : 0,
                               c.pp_link, LinkUse::all_reduce);
  // AdamW over this rank's optimizer shard: master/parameter, gradient and moments traffic,
  // and the gradient norm's read of the gradient.
  const double shard = share.elements / static_cast<double>(l.parallel.shards());
  const double touched = 16.0 + 2.0 * c.gb + (c.mixed ? 8.0 + c.pb : 2.0 * c.pb);
  const double bubble_share =
      c.p > 1 ? bubble_fraction({c.p, c.v, static_cast<int>(c.mbs)}) : 0.0;
  TimePrediction t;
  t.compute = c.mbs * compute_mb;
  t.tp = tp_step;
  // Each slot of the fill and drain is one micro-batch's compute and collectives, and, when
  // transfers block, its transfers.
  const double blocked = c.w.p2p == PipelineP2p::blocking ? transfers : 0.0;
  t.bubble =
      bubble_share / (1.0 - bubble_share) * c.mbs * (compute_mb + (tp_step + blocked) / c.mbs);
  t.pp = pp_step;
  t.dp = dp_seconds(c, share, compute_mb, bytes);
  // Context parallelism: the all-to-alls around attention (comm_volume.cpp: five per block and
  // micro-batch, seven with full recomputation) wait for the attention they feed.
  if (l.parallel.cp > 1 && l.parallel.cp_comm == CpComm::ring) {
    // The ring (comm_volume.cpp): each step's key/value chunk travels while the step's blocks
    // attend (a 1/cp share of the rank's attention core), exposed only when slower; backward's
    // gradient accumulator goes on after its step's blocks, exposed in full.
    const bool rerun = c.full || l.recompute == Recompute::selective;
    const double sends = c.mbs * share.blocks * ((rerun ? 3.0 : 2.0) * (c.cp - 1) + c.cp);
    const double chunk = sends > 0 ? link_seconds(get("cp.send") / sends, 1, c.cp_link) : 0.0;
    const double forward_step = 4.0 * attended_keys(c.m.seq_len, c.m.sliding_window) *
                                static_cast<double>(c.m.d_model) * c.local_rows / c.gy /
                                (c.peak * c.eff.block) / c.cp;
    t.cp = c.mbs * share.blocks *
           ((c.cp - 1) * ((rerun ? 2.0 : 1.0) * std::max(0.0, chunk - forward_step) +
                          std::max(0.0, chunk - 2.0 * forward_step)) +
            c.cp * chunk);
  } else if (l.parallel.cp > 1) {
    t.cp = link_seconds(get("cp.all_to_all"),
                        c.mbs * share.blocks * (c.full ? 7.0 : 5.0) * (c.cp - 1), c.cp_link,
                        LinkUse::all_gather);
  }
  // Expert parallelism: per MoE layer and micro-batch a counts exchange and two exchanges of
  // rows each way (forward, backward; full recomputation reruns the forward's), each
  // (ep - 1) messages; blocking, so all of it is exposed.
  if (l.parallel.ep > 1) {
    const double exchanges = c.full ? 8.0 : 5.0;
    t.ep = link_seconds(get("ep.all_to_all"),
                        c.mbs * share.kind_blocks[1] * exchanges *
                            static_cast<double>(l.parallel.ep - 1),
                        c.ep_link, LinkUse::all_gather);
  }
  // The experts' optimizer shard (over dp / ep ranks) besides the rest.
  const double expert_shard =
      share.expert_elements / static_cast<double>(l.parallel.expert_shards());
  t.optimizer = (shard + expert_shard) * touched / (c.cluster.memory_bandwidth_gbs * 1e9);
  t.host = c.cluster.step_overhead_ms * 1e-3;
  return t;
}

// A grid's scratch (model/grid_linear.hpp's GridWorkspace): its largest weight block gathered
// over z (compute type) and that block's gradient before the reduce-scatter (gradient type),
// twice each with overlap when z > 1.
double grid_workspace_bytes(const Context& c) {
  if (!c.grid || c.gz == 1) return 0.0;
  double largest = 0;
  for (const GridLayer& g :
       grid_block_layers(c.m, c.l.parallel.tensor_grid, c.local_rows, c.pb, c.pb, c.gb))
    largest = std::max(largest, g.gather + g.scatter);
  return (c.l.parallel.tensor_grid_overlap ? 2.0 : 1.0) * largest;
}

// Context parallelism's exchange (model/block_workspace.hpp's cp_* buffers): the all-to-all's
// two buffers of the wider of qkv and the attention output, the output and its gradient with
// every row, and the qkv gradient, each this rank's rows of its tensor-parallel heads.
double context_workspace_bytes(const Context& c) {
  if (c.cp == 1) return 0.0;
  const double qkv = static_cast<double>((c.m.n_head + 2 * c.m.kv_heads()) * c.m.head_dim()) / c.tp;
  const double q = static_cast<double>(c.m.q_width()) / c.tp;
  // The ring's two key/value chunks (compute type) and two accumulators of their gradient (f32),
  // and in mixed precision the f32 running output / dQ (model/ring_attention.cpp).
  if (c.l.parallel.cp_comm == CpComm::ring) {
    const double kv = c.rows * static_cast<double>(2 * c.m.kv_heads() * c.m.head_dim()) / c.tp;
    return 2.0 * kv * c.pb + 2.0 * kv * 4.0 + (c.mixed ? c.rows * std::max(qkv, q) * 4.0 : 0.0);
  }
  return c.rows * (2.0 * std::max(qkv, q) + 2.0 * q + qkv) * c.pb;
}

// The elements of the model's largest block on a rank (a dense or a MoE block's).
double largest_block_local(const Context& c) {
  double most = 0;
  for (const BlockKind& k : block_kinds(c.m))
    if (k.index >= 0) most = std::max(most, block_elements(c.m, c.l, k.index).local);
  return most;
}

// Bytes per device of this rank (memory.hpp: the trainer's memory_bytes_theory), plus the
// buffers it leaves out.
MemoryPrediction rank_memory(const Context& c, const RankShare& share, int rank) {
  const Layout& l = c.l;
  const StateBytes state =
      model_state_bytes(share.elements, stage_number(l.parallel.zero), l.parallel.shards(),
                        static_cast<std::int64_t>(c.pb), static_cast<std::int64_t>(c.gb), c.mixed);
  // Expert parallelism: this rank's experts, their ZeRO state over the dp / ep ranks.
  const StateBytes experts = model_state_bytes(
      share.expert_elements, stage_number(l.parallel.zero), l.parallel.expert_shards(),
      static_cast<std::int64_t>(c.pb), static_cast<std::int64_t>(c.gb), c.mixed);
  MemoryPrediction mem;
  mem.parameters = state.parameters + experts.parameters;
  mem.gradients = state.gradients + experts.gradients;
  mem.optimizer_state = state.optimizer_state + experts.optimizer_state;
  mem.activations = slots_in_flight(l.parallel.schedule, c.p, c.v, static_cast<int>(c.mbs), rank) *
                    share.activation_bytes;
  const double activation =
      c.local_rows * c.m.d_model * c.pb / (l.parallel.sequence_parallel ? c.tp : 1.0);
  // Pipeline send/receive buffers both ways, ZeRO-3's two staged layers, the logits chunk (at
  // most 256 MiB of f32) and the activation gradient the backward carries.
  mem.communication =
      (c.p > 1 ? 4.0 * activation : 0.0) +
      (l.parallel.zero >= ZeroStage::parameters ? 2.0 * largest_block_local(c) * c.pb : 0.0) +
      (share.head ? std::min(c.local_rows *
                                 static_cast<double>(c.m.padded_vocab(l.parallel.vocab_ranks())) /
                                 c.vocab_ranks * 4.0,
                             268435456.0)
                  : 0.0) +
      2.0 * c.local_rows * c.m.d_model * 4.0 + grid_workspace_bytes(c) + context_workspace_bytes(c);
  mem.reserved = c.cluster.reserved_gb * 1e9;
  return mem;
}

}  // namespace

Prediction predict(const Workload& w, const ClusterSpec& cluster, const Layout& l) {
  KINTSUGI_ASSERT(layout_problem(w, l).empty());
  Prediction out;
  out.layout = l;
  const Context c = make_context(w, cluster, l, out);
  double slowest = -1;
  for (int rank : candidate_ranks(c)) {
    const RankShare share = rank_share(w, l, rank, c.act);
    std::map<std::string, double> bytes;
    const TimePrediction t = step_time(c, share, rank, bytes);
    const MemoryPrediction mem = rank_memory(c, share, rank);
    if (t.total() > slowest) {
      slowest = t.total();
      out.time = t;
    }
    if (mem.total() > out.memory.total()) out.memory = mem;
    if (rank == 0) {
      out.first_stage_memory = mem;
      out.first_stage_comm_bytes = std::move(bytes);
    }
  }
  const ModelConfig& m = w.model;
  out.gemm_efficiency = (c.block_hw + c.head_flops) /
                        (c.block_hw / c.eff.block + c.head_flops / c.eff.head);
  out.fits = out.memory.total() <= cluster.memory_gb * 1e9;
  out.samples_per_s = static_cast<double>(w.global_batch) / out.time.total();
  out.tokens_per_s = out.samples_per_s * static_cast<double>(m.seq_len);
  const double devices = static_cast<double>(l.parallel.world());
  out.mfu = c.model_flops * out.tokens_per_s / (devices * c.peak);
  out.hfu = c.hw * out.tokens_per_s / (devices * c.peak);
  return out;
}

}  // namespace kintsugi
