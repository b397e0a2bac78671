#include "kintsugi/parallel/stage_partition.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "kintsugi/core/error.hpp"
#include "kintsugi/model/block_inventory.hpp"

namespace kintsugi {

double block_flops_per_token(const ModelConfig& m, std::int64_t seq) {
  const double d = static_cast<double>(m.d_model);
  return 6.0 * (4 * d * d + 2 * d * m.d_ff) + 12.0 * seq * d;
}

double block_flops_per_token(const ModelConfig& m, std::int64_t seq, int index) {
  return 6.0 * block_inventory(m, index).active_matrix_parameters() +
         12.0 * static_cast<double>(seq) * static_cast<double>(m.q_width());
}

double head_flops_per_token(const ModelConfig& m) {
  return 6.0 * static_cast<double>(m.vocab_size) * m.d_model;
}

std::string partition_problem(const ModelConfig& m, int p, int v,
                              const std::vector<std::int64_t>& explicit_layers) {
  const std::int64_t L = m.n_layer, chunks = static_cast<std::int64_t>(p) * v;
  if (!explicit_layers.empty()) {
    if (v > 1)
      return fmt::format("parallel.layers_per_stage cannot be combined with --virtual-stages {}: "
                         "interleaved chunks split the layers evenly",
                         v);
    if (static_cast<int>(explicit_layers.size()) != p)
      return fmt::format("parallel.layers_per_stage has {} entries but pp = {}: give one per stage",
                         explicit_layers.size(), p);
    if (std::accumulate(explicit_layers.begin(), explicit_layers.end(), std::int64_t{0}) != L ||
        std::any_of(explicit_layers.begin(), explicit_layers.end(),
                    [](std::int64_t n) { return n < 1; }))
      return fmt::format("parallel.layers_per_stage = [{}] must give each stage at least one block "
                         "and add up to model.n_layer = {}",
                         fmt::join(explicit_layers, ", "), L);
    return "";
  }
  if (v > 1 && L % chunks != 0)
    return fmt::format("model.n_layer = {} is not divisible by pp x virtual stages = {} x {}: "
                       "interleaving needs equal chunks; change --pp or --virtual-stages",
                       L, p, v);
  if (L < p)
    return fmt::format("model.n_layer = {} is less than pp = {}: each pipeline stage needs at "
                       "least one block",
                       L, p);
  return "";
}

StagePartition partition_stages(const ModelConfig& m, int p, int v, std::int64_t seq,
                                const std::vector<std::int64_t>& explicit_layers) {
  const int L = static_cast<int>(m.n_layer), chunks = p * v;
  const double block = block_flops_per_token(m, seq), head = head_flops_per_token(m);
  // Blocks [j, i)'s cost: i - j blocks of one kind, or with dense and MoE blocks (docs/moe.md,
  // "Dense blocks") each block's own (prefix sums of block_flops_per_token's index form).
  std::vector<double> prefix;
  if (m.is_moe() && m.moe.has_dense_blocks(m.n_layer)) {
    prefix.assign(L + 1, 0.0);
    for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + block_flops_per_token(m, seq, i);
  }
  auto blocks = [&](int j, int i) {
    return prefix.empty() ? (i - j) * block : prefix[i] - prefix[j];
  };
  StagePartition out;
  auto finish = [&](const std::vector<int>& layers) {
    int first = 0;
    for (int c = 0; c < chunks; ++c) {
      out.first_layer.push_back(first);
      out.num_layers.push_back(layers[c]);
      out.cost.push_back(blocks(first, first + layers[c]) + (c == chunks - 1 ? head : 0.0));
      first += layers[c];
    }
    return out;
  };
  if (const std::string problem = partition_problem(m, p, v, explicit_layers); !problem.empty())
    fail("{}", problem);
  if (!explicit_layers.empty()) return finish({explicit_layers.begin(), explicit_layers.end()});
  if (v > 1) return finish(std::vector<int>(chunks, L / chunks));
  // best[s][i]: the least possible cost of the most expensive of stages 0..s holding blocks
  // 0..i-1; the last stage also pays the head.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(p, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(p, std::vector<int>(L + 1, 0));
  for (int i = 1; i <= L; ++i) best[0][i] = blocks(0, i) + (p == 1 ? head : 0.0);
  for (int s = 1; s < p; ++s)
    for (int i = s + 1; i <= L; ++i)
      for (int j = s; j < i; ++j) {
        const double stage = blocks(j, i) + (s == p - 1 ? head : 0.0);
        const double worst = std::max(best[s - 1][j], stage);
        if (worst < best[s][i]) {
          best[s][i] = worst;
          cut[s][i] = j;
        }
      }
  std::vector<int> layers(p);
  for (int s = p - 1, i = L; s >= 0; --s) {
    const int j = s == 0 ? 0 : cut[s][i];
    layers[s] = i - j;
    i = j;
  }
  return finish(layers);
}

}  // namespace kintsugi
