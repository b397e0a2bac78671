#pragma once
// A mixture-of-experts MLP half (docs/moe.md): what a block runs between ln2 and the residual
// add when the model has experts (model.moe_experts > 0), in place of the dense MLP half
// (model/block_half.hpp). Per micro-batch of N token rows x [N, d]:
//   logits = x R^T (R [E, d], no bias); moe_route: softmax, each row's top_k experts and gates,
//   the load-balancing and z losses; moe_dispatch, moe_gather: the N K routed rows grouped by
//   expert; per expert e its rows through SwiGLU (w1 gate, w3 up, w2 down: Mixtral's names),
//   one GEMM per layer on that expert's rows (a grouped GEMM as a loop: the rows are uneven);
//   moe_combine: y[n] = sum_j gate[n, j] x (row of choice j), j in order; with a shared expert
//   y += sigmoid(x w_g) x SwiGLU_shared(x) (Qwen2-MoE).
// Dropless: every choice is computed. The routing is data-dependent, so each forward reads the
// experts' row counts to the host once (core/host_io.hpp) to slice the GEMMs.
//
// Capacity factor (model.moe_capacity_factor > 0): expert e keeps the first capacity(N) of its
// routed rows in dispatch order (lower token rows first); the gates of the choices past it are
// zeroed, so they add nothing to y and get no gradient, and their rows are moved behind every
// expert's kept rows: the experts (and under ep the exchange) do not run them; their outputs
// are zeros. Counted in MoeStats::dropped.
//
// Tensor parallelism with sequence parallelism (docs/moe.md "Tensor parallelism"): the router,
// the experts and the shared expert are replicated over the tp ranks, each running its own
// 1/tp of the micro-batch's rows (their gradients summed over tp: sequence_parallel_grad).
// The router's logits are gathered over tp so that every tp rank routes the whole micro-batch
// as the serial run does: the losses, the loads and the capacity are the micro-batch's; the
// gates' gradient is gathered back for the router's backward, of which each rank keeps its
// rows' part.
//
// Expert parallelism (ctx.ep, docs/moe.md "Expert parallelism"): this rank holds experts
// [r E/P, (r+1) E/P) of the P ep ranks, in ctx.expert_params. The routed rows, grouped by
// expert, are grouped by owner too; the ranks exchange each expert's row count (all_to_all),
// then the rows (all_to_all_v), permute what arrived from by-source to by-expert order, run
// their experts, permute back and return the outputs (all_to_all_v); the combine is the
// serial one on the rank that owns the token. Backward sends the outputs' gradients the same
// way and returns the inputs'.
//
// The load-balancing loss (Switch/GShard) and z-loss of a micro-batch enter the objective as
// train.moe_aux_loss_coeff and train.moe_z_loss_coeff times their mean over the step's
// micro-batches: backward adds their gradient at the router's logits, scaled by
// coefficient x N x grad_scale (grad_scale being 1 / the step's tokens, each micro-batch
// weighs N / tokens). Their values and the experts' loads are summed per step (MoeStats).
#include <cstdint>
#include <vector>

#include "kintsugi/model/block_inventory.hpp"
#include "kintsugi/model/block_workspace.hpp"
#include "kintsugi/model/carver.hpp"
#include "kintsugi/model/layers.hpp"

namespace kintsugi {

// The objective's coefficients (train.moe_aux_loss_coeff, train.moe_z_loss_coeff).
struct MoeLossWeights {
  double aux = 0, z = 0;
};

// What a MoE layer measured since the last reset: its load-balancing and z losses summed over
// micro-batches, the micro-batches, and the routed rows per expert.
struct MoeStats {
  double aux_sum = 0, z_sum = 0;
  std::int64_t micro_batches = 0;
  std::vector<std::int64_t> expert_rows;
  // Routed choices dropped past an expert's capacity (0 when dropless).
  std::int64_t dropped = 0;
  // Expert parallelism, this rank's alone: the routed rows it sent to other ranks' experts and
  // received for its own from other ranks, summed over the recorded forwards.
  std::int64_t rows_sent = 0, rows_received = 0;
};

class MoeLayer {
 public:
  // Registers the router, the experts and the shared expert in spec's order.
  MoeLayer(LayerContext& ctx, const MoeSpec& spec, MoeLossWeights weights);

  // The workspace every MoE block of a chunk shares, for micro-batches of `rows` token rows.
  static void layout_workspace(Carver& c, const LayerContext& ctx, const MoeSpec& spec,
                               std::int64_t rows, BlockWorkspace& ws);

  // y [N, d] = the MLP half's output for the norm output x; s holds what backward needs.
  // `record`: add the micro-batch's losses and loads to the stats (not when full recomputation
  // reruns a forward).
  void forward(int slot, const BlockActivations& s, const Tensor& x, const Tensor& y,
               const BlockWorkspace& ws, bool record);
  // Key/value-cache generation (TransformerBlock::extend): the forward of x's `count` rows,
  // rows [first, first + count) of the sequence, into the matching views of s and ws; records
  // nothing. kintsugi::Error with a capacity factor (capacity is a micro-batch's) or under ep.
  void forward_rows(int slot, const BlockActivations& s, const Tensor& x, const Tensor& y,
                    const BlockWorkspace& ws, std::int64_t first, std::int64_t count);
  // From dy = dL/dy: the parameter gradients, and the gradient at x (returned: ws.d_norm).
  Tensor backward(int slot, const BlockActivations& s, const Tensor& x, const Tensor& dy,
                  const BlockWorkspace& ws);
  // The gradient's scale of the step's micro-batches (the chunk's grad_scale).
  void set_grad_scale(double scale) { grad_scale_ = scale; }

  MoeStats stats() const;
  void reset_stats();

  // Auxiliary-loss-free balancing (model.moe_router_bias_update_rate > 0, docs/moe.md
  // "DeepSeek-style routing"): the per-expert bias (f32 [E]) added to the scores for selection;
  // not a parameter. Its updates are the caller's (StageModel, from the step's loads summed over
  // every rank), so every rank holds the same values.
  bool has_router_bias() const { return spec_.bias_update_rate > 0; }
  void set_router_bias(const std::vector<float>& bias);

 private:
  // Expert parallelism: one micro-batch's exchange, from the routed rows per expert.
  struct Exchange {
    std::vector<std::int64_t> send_rows, recv_rows;  // [P]: rows to / from each ep rank
    std::vector<std::int64_t> expert_rows;           // [E/P]: rows of each local expert
    std::vector<std::int32_t> perm, inverse;         // by-expert row -> received row, back
    std::int64_t received = 0;
  };
  // Exchanges the counts (collective over ctx.ep) and plans the permutation.
  Exchange plan_exchange(const std::vector<std::int64_t>& counts, const BlockWorkspace& ws);
  // The permutation and its inverse to the workspace (the shared workspace: again per use).
  void upload_permutation(const Exchange& x, const BlockWorkspace& ws) const;
  // The element counts of an exchange's blocks (rows x d).
  std::vector<std::int64_t> elements(const std::vector<std::int64_t>& rows) const;
  // Capacity factor: zeroes the gates of the choices past their expert's capacity; returns a
  // flag per choice of the micro-batch (1: dropped), none when nothing is.
  // `position_all`: the whole micro-batch's dispatch positions (s.moe_position without sequence
  // parallelism).
  std::vector<char> drop_past_capacity(const BlockActivations& s, const Tensor& position_all,
                                       const std::vector<std::int64_t>& counts);
  // Capacity factor: rewrites this rank's dispatch (s.moe_order, s.moe_position) so that each
  // expert's group holds its kept choices alone and the dropped ones (`dropped`: a flag per
  // choice of this rank's rows) follow all groups; `counts` and ws.moe_counts become the kept
  // rows per expert. Returns the kept rows.
  std::int64_t skip_dropped(const BlockActivations& s, const BlockWorkspace& ws,
                            const char* dropped, std::vector<std::int64_t>& counts) const;
  // Whether other ranks hold some of a micro-batch's rows: sequence parallelism's tp ranks
  // (1/tp of a context-parallel rank's rows each) and context parallelism's cp ranks. The
  // whole micro-batch's rows are then every cp rank's in turn, each its tp ranks' in turn.
  static bool rows_split(const LayerContext& ctx);
  // Where this rank's rows (x's) start among them (0 without a split).
  std::int64_t own_first(const Tensor& x) const;
  // This rank's rows of a tensor of the whole micro-batch's rows (all of it without a split).
  Tensor own_rows(const Tensor& all, const Tensor& x) const;
  // `own` rows of every rank into `all` in that order (over tp into `cp_rows`, this cp rank's
  // rows, first when both split).
  void gather_rows(const Tensor& own, const Tensor& all, const Tensor& cp_rows) const;
  // The experts' row counts of the last dispatch (ws.moe_counts), on the host.
  std::vector<std::int64_t> read_counts(const BlockWorkspace& ws) const;
  // This rank's experts' SwiGLU on `in` (rows grouped by local expert, `rows` each) into `out`.
  void experts_forward(const BlockActivations& s, const Tensor& in, const Tensor& out,
                       const std::vector<std::int64_t>& rows);
  // Their backward from d_out; leaves the inputs' gradient in d_in.
  void experts_backward(const BlockActivations& s, const Tensor& in, const Tensor& d_out,
                        const Tensor& d_in, const BlockWorkspace& ws,
                        const std::vector<std::int64_t>& rows);

  int weight(ParamStore& store, const std::string& name, std::int64_t out, std::int64_t in,
             double std);
  // out [rows, o] (+)= in [rows, i] W^T, and the weight's gradient (first write overwrites);
  // `store` holds w (the experts' store for w1_, w3_, w2_).
  void linear(int w, const Tensor& in, const Tensor& out) const;
  void linear_backward(int w, const Tensor& dy, const Tensor& in, const Tensor* dx,
                       bool accumulate_dx) const;
  void expert_linear(int w, const Tensor& in, const Tensor& out) const;
  void expert_linear_backward(int w, const Tensor& dy, const Tensor& in, const Tensor* dx,
                              bool accumulate_dx) const;
  void linear_backward_in(ParamStore& store, int w, const Tensor& dy, const Tensor& in,
                          const Tensor* dx, bool accumulate_dx) const;

  LayerContext& ctx_;
  MoeSpec spec_;
  MoeLossWeights weights_;
  // Where the experts' parameters live: ctx.params, or ctx.expert_params under expert
  // parallelism (then w1_[l] is local expert l's, global expert first_expert_ + l).
  ParamStore& expert_store() const { return ctx_.expert_params ? *ctx_.expert_params : ctx_.params; }
  int router_ = -1;
  std::int64_t first_expert_ = 0;
  std::vector<int> w1_, w3_, w2_;  // per expert (this rank's): gate, up, down
  int shared_gate_ = -1, shared_up_ = -1, shared_down_ = -1, shared_router_ = -1;
  std::vector<std::vector<std::int64_t>> counts_;  // [slot][expert]: routed rows
  std::vector<Exchange> exchanges_;                // [slot], expert parallelism
  Buffer losses_;  // f64 [2] on the device: aux and z summed over micro-batches
  Buffer router_bias_;  // f32 [E] on the device (auxiliary-loss-free balancing), else empty
  MoeRouting routing() const;
  std::int64_t micro_batches_ = 0;
  std::vector<std::int64_t> expert_rows_;
  std::int64_t dropped_ = 0, rows_sent_ = 0, rows_received_ = 0;
  double grad_scale_ = 0;
};

}  // namespace kintsugi
