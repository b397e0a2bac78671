#include "kintsugi/model/block_inventory.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace kintsugi {

bool SavedTensor::kept(Recompute recompute) const {
  switch (recompute) {
    case Recompute::none: return true;
    case Recompute::selective: return !attention_core;
    case Recompute::full: return false;
  }
  return true;
}

Shape SavedTensor::shape(std::int64_t batch, std::int64_t seq, std::int64_t local,
                         std::int64_t split) const {
  const std::int64_t rows = (local_rows ? local : batch * seq) * row_factor;
  const std::int64_t w = head_split ? width / split : width;
  switch (form) {
    case Form::matrix: return {rows, w};
    case Form::per_row: return {rows};
    case Form::per_head: return {batch, w, seq};
  }
  return {};
}

double SavedTensor::elements(double rows, double local, double split) const {
  const double r = (local_rows ? local : rows) * static_cast<double>(row_factor);
  const double w = static_cast<double>(width) / (head_split ? split : 1.0);
  return form == Form::per_row ? r : r * w;
}

double MoeSpec::matrix_parameters() const {
  const double dd = static_cast<double>(d);
  return dd * static_cast<double>(experts) +
         static_cast<double>(experts) * 3.0 * dd * static_cast<double>(hidden) +
         3.0 * dd * static_cast<double>(shared_hidden) + (shared_hidden > 0 ? dd : 0.0);
}

double MoeSpec::active_matrix_parameters() const {
  const double dd = static_cast<double>(d);
  return dd * static_cast<double>(experts) +
         static_cast<double>(top_k) * 3.0 * dd * static_cast<double>(hidden) +
         3.0 * dd * static_cast<double>(shared_hidden) + (shared_hidden > 0 ? dd : 0.0);
}

double BlockInventory::active_matrix_parameters() const {
  return matrix_parameters() - (moe ? moe->matrix_parameters() - moe->active_matrix_parameters()
                                    : 0.0);
}

double BlockInventory::matrix_parameters() const {
  double n = moe ? moe->matrix_parameters() : 0.0;
  for (const HalfSpec& h : halves) {
    // In doubles: the planner measures absurd shapes too before it refuses them.
    for (const LinearSpec& l : h.entries) n += static_cast<double>(l.in) * static_cast<double>(l.out);
    n += static_cast<double>(h.exit.in) * static_cast<double>(h.exit.out);
  }
  return n;
}

double BlockInventory::entry_bias_parameters() const {
  double n = 0;
  for (const HalfSpec& h : halves)
    if (h.entry_bias)
      for (const LinearSpec& l : h.entries) n += static_cast<double>(l.out);
  return n;
}

double BlockInventory::exit_bias_parameters() const {
  double n = 0;
  for (const HalfSpec& h : halves)
    if (h.exit_bias) n += static_cast<double>(h.exit.out);
  return n;
}

double BlockInventory::norm_parameters() const {
  return 2.0 * static_cast<double>(norm_bias ? 2 * norm_width : norm_width) +
         2.0 * static_cast<double>(qk_norm_width);
}

BlockInventory block_inventory(const ModelConfig& c, int index, std::int64_t expert_ranks,
                               std::int64_t context_ranks) {
  const std::string p = "blocks." + std::to_string(index);
  // Residual projections start smaller, scaled by 1/sqrt(2 * layers) (GPT-2).
  const double residual_std = c.init_std / std::sqrt(2.0 * c.n_layer);
  const std::int64_t d = c.d_model, f = c.d_ff;
  // The packed qkv: the queries (q_width: d_model unless the head size is set apart) plus a key
  // and a value per kv head.
  const std::int64_t q = c.q_width(), qkv = q + 2 * c.kv_heads() * c.head_dim();
  const bool gated = c.gated_mlp();
  BlockInventory inv;
  inv.halves[0] = {.kind = HalfSpec::Kind::attention,
                   .entries = {{p + ".attn.qkv", d, qkv, c.init_std}},
                   .exit = {p + ".attn.proj", q, d, residual_std},
                   .entry_bias = c.qkv_bias(),
                   .exit_bias = c.has_biases()};
  inv.halves[1] = {.kind = HalfSpec::Kind::mlp,
                   .entries = {{p + (gated ? ".mlp.gate" : ".mlp.fc"), d, f, c.init_std}},
                   .exit = {p + (gated ? ".mlp.down" : ".mlp.fc2"), f, d, residual_std},
                   .entry_bias = c.has_biases(),
                   .exit_bias = c.has_biases()};
  if (gated) inv.halves[1].entries.push_back({p + ".mlp.up", d, f, c.init_std});
  if (c.is_moe_block(index)) {
    inv.halves[1] = {.kind = HalfSpec::Kind::mlp, .entry_bias = false, .exit_bias = false};
    inv.moe = MoeSpec{.prefix = p + ".moe", .d = d, .experts = c.moe.experts,
                      .top_k = c.moe.top_k, .hidden = c.expert_hidden(),
                      .shared_hidden = c.shared_hidden(), .init_std = c.init_std,
                      .residual_std = residual_std, .renormalize = c.moe.renormalize,
                      .capacity_factor = c.moe.capacity_factor,
                      .sigmoid = c.moe.score == RouterScore::sigmoid,
                      .routed_scaling = c.moe.routed_scaling, .groups = c.moe.groups,
                      .topk_groups = c.moe.topk_groups,
                      .bias_update_rate = c.moe.bias_update_rate, .expert_ranks = expert_ranks};
  }
  inv.norm_width = d;
  inv.norm_bias = !c.rms_norm();
  if (c.qk_norm()) inv.qk_norm_width = c.head_dim();

  using A = BlockActivations;
  using Form = SavedTensor::Form;
  auto& s = inv.saved;
  auto norm = [&](Tensor A::*out, Tensor A::*mean, Tensor A::*rstd) {
    s.push_back({.field = out, .width = d});
    if (inv.norm_bias) s.push_back({.field = mean, .form = Form::per_row, .statistic = true});
    s.push_back({.field = rstd, .form = Form::per_row, .statistic = true});
  };
  auto columns = [&](Tensor A::*field, std::int64_t width) {
    s.push_back({.field = field, .local_rows = false, .width = width, .head_split = true});
  };
  norm(&A::ln1, &A::ln1_mean, &A::ln1_rstd);
  columns(&A::qkv, qkv);  // RoPE's rotated queries and keys
  if (c.qk_norm()) {
    // q_norm and k_norm's input (its values unused) and rstd per query and key head.
    columns(&A::qkv_pre, qkv);
    s.push_back({.field = &A::qk_rstd, .local_rows = false, .width = c.n_head + c.kv_heads(),
                 .head_split = true, .statistic = true});
  }
  s.push_back({.field = &A::attn, .local_rows = false, .width = q, .head_split = true,
               .attention_core = true});
  s.push_back({.field = &A::lse, .form = Form::per_head, .local_rows = false,
               .width = c.n_head, .head_split = true, .statistic = true,
               .attention_core = true});
  s.push_back({.field = &A::mid, .width = d});
  norm(&A::ln2, &A::ln2_mean, &A::ln2_rstd);
  if (inv.moe) {
    const MoeSpec& e = *inv.moe;
    const std::int64_t k = e.top_k;
    // The routing of every row of the micro-batch: under sequence and context parallelism
    // each rank routes them all (model/moe_layer.hpp); the rest is its own rows'.
    const std::int64_t cp = context_ranks;
    s.push_back({.field = &A::moe_probs, .local_rows = false, .width = e.experts,
                 .statistic = true, .row_factor = cp});
    s.push_back({.field = &A::moe_lse, .form = Form::per_row, .local_rows = false,
                 .statistic = true, .row_factor = cp});
    s.push_back({.field = &A::moe_experts, .local_rows = false, .width = k, .index = true,
                 .row_factor = cp});
    s.push_back({.field = &A::moe_gates, .local_rows = false, .width = k, .statistic = true,
                 .row_factor = cp});
    s.push_back({.field = &A::moe_order, .width = k, .index = true});
    s.push_back({.field = &A::moe_position, .width = k, .index = true});
    for (Tensor A::*t : {&A::moe_xp, &A::moe_yp})
      s.push_back({.field = t, .width = d, .row_factor = k});
    // Expert parallelism: the rows this rank's experts receive, at most received_row_factor()
    // per token row (the buffers are sized for the worst case: docs/moe.md).
    const std::int64_t received = e.received_row_factor();
    if (e.expert_ranks > 1) s.push_back({.field = &A::moe_xr, .width = d, .row_factor = received});
    for (Tensor A::*t : {&A::moe_gate, &A::moe_up, &A::moe_act})
      s.push_back({.field = t, .width = e.hidden, .row_factor = received});
    if (e.shared_hidden > 0) {
      for (Tensor A::*t : {&A::shared_gate, &A::shared_up, &A::shared_act})
        s.push_back({.field = t, .width = e.shared_hidden});
      s.push_back({.field = &A::shared_out, .width = d});
      s.push_back({.field = &A::shared_logit, .width = 1});
    }
    return inv;
  }
  columns(&A::fc, f);  // GELU's input, SwiGLU's gate
  if (gated) columns(&A::up, f);
  columns(&A::act, f);
  return inv;
}

std::array<BlockKind, 2> block_kinds(const ModelConfig& c, std::int64_t first,
                                     std::int64_t count) {
  if (count < 0) count = c.n_layer - first;
  std::array<BlockKind, 2> kinds;
  const MoeConfig& e = c.moe;
  if (!c.is_moe() || (e.first_dense == 0 && e.layer_freq == 1 && e.dense_layers.empty())) {
    // One kind (no walk over the blocks: the planner measures absurd shapes before refusing).
    kinds[c.is_moe() ? 1 : 0] = {.index = 0, .count = count};
    return kinds;
  }
  for (int i = 0; i < c.n_layer; ++i) {
    BlockKind& k = kinds[c.is_moe_block(i) ? 1 : 0];
    if (k.index < 0) k.index = i;
    if (i >= first && i < first + count) ++k.count;
  }
  return kinds;
}

BlockInventory first_moe_block_inventory(const ModelConfig& c, std::int64_t expert_ranks,
                                         std::int64_t context_ranks) {
  int first = 0;
  while (first + 1 < c.n_layer && !c.is_moe_block(first)) ++first;
  return block_inventory(c, first, expert_ranks, context_ranks);
}

std::vector<SavedTensor> saved_by_any_block(const ModelConfig& c, std::int64_t expert_ranks) {
  std::vector<SavedTensor> out = block_inventory(c, 0, expert_ranks).saved;
  // The other kind: the first block whose kind differs from block 0's.
  for (int i = 1; i < c.n_layer; ++i) {
    if (c.is_moe_block(i) == c.is_moe_block(0)) continue;
    for (const SavedTensor& t : block_inventory(c, i, expert_ranks).saved)
      if (std::none_of(out.begin(), out.end(),
                       [&](const SavedTensor& o) { return o.field == t.field; }))
        out.push_back(t);
    break;
  }
  return out;
}

}  // namespace kintsugi
