#include "kintsugi/plan/comm_volume.hpp"

#include <iterator>

#include "kintsugi/model/block_inventory.hpp"

namespace kintsugi {

double ring_all_reduce_bytes(double bytes, std::int64_t n) {
  return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * bytes;
}
double ring_reduce_scatter_bytes(double bytes, std::int64_t n) {
  return n <= 1 ? 0.0 : double(n - 1) / n * bytes;
}
double ring_all_gather_bytes(double bytes, std::int64_t n) {
  return n <= 1 ? 0.0 : double(n - 1) / n * bytes;
}

namespace {

// 3D tensor parallelism's terms (comm_volume.hpp).
void add_grid_bytes(const ModelConfig& m, const ParallelLayout& l, const StepShape& s,
                    std::map<std::string, double>& out) {
  const std::int64_t gx = l.width_ranks(), gy = l.head_ranks(), gz = l.row_ranks();
  const std::int64_t plane = l.vocab_ranks();
  const double a = static_cast<double>(s.activation_element_bytes);
  const double pb = static_cast<double>(s.param_element_bytes);
  const double eb = static_cast<double>(s.element_bytes);
  const double rows = static_cast<double>(s.micro_batch / gz * s.seq);
  const double mb = static_cast<double>(s.micro_batches);
  const double blocks = static_cast<double>(s.blocks < 0 ? m.n_layer : s.blocks);
  const double d = static_cast<double>(m.d_model), f = static_cast<double>(m.d_ff);
  const double qkv = static_cast<double>((m.n_head + 2 * m.kv_heads()) * m.head_dim());
  const double fc_layers = m.gated_mlp() ? 2 : 1;  // SwiGLU: gate and up
  const double q = static_cast<double>(m.q_width());  // the attention output, proj's input
  const double block = (qkv + q + (fc_layers + 1) * f) * d / static_cast<double>(plane);
  const double x = static_cast<double>(gx), y = static_cast<double>(gy);
  // Full recomputation reruns each block's forward, and its collectives, in backward.
  const double forwards = s.recompute_full ? 2 : 1;
  out["grid_z.all_gather"] = mb * blocks * (forwards + 1) * ring_all_gather_bytes(block * pb, gz);
  out["grid_z.reduce_scatter"] = mb * blocks * ring_reduce_scatter_bytes(block * eb, gz);
  // Replicated parameters' partial gradients: once per step, or every micro-batch when ZeRO-2/3
  // reduces each micro-batch's gradient.
  out["grid_z.all_reduce"] =
      (l.zero >= ZeroStage::gradients ? mb : 1.0) *
      ring_all_reduce_bytes(static_cast<double>(s.depth_grad_elements) * eb, gz);
  out["grid_x.all_reduce"] =
      mb * blocks *
      ring_all_reduce_bytes(rows * (forwards * (qkv + fc_layers * f) + q + f) / y * a, gx);
  out["grid_x.all_gather"] =
      mb * blocks * (2 * forwards + 2) * ring_all_gather_bytes(rows * d * a, gx);
  out["grid_y.all_reduce"] =
      mb * blocks * (2 * forwards + 2) * ring_all_reduce_bytes(rows * d / x * a, gy);
  // The embedding's lookup (forward) and the head's input gradient (backward), and the loss's
  // three numbers per row, over the plane.
  const double boundaries = (s.embedding ? 1 : 0) + (s.head ? 1 : 0);
  const double loss_stats = s.head ? 3.0 * rows * s.statistic_bytes : 0.0;
  out["grid_xy.all_reduce"] =
      mb * ring_all_reduce_bytes(boundaries * rows * d * a + loss_stats, plane);
}

// Context parallelism's all-to-all exchange around attention (model/context_parallel.hpp), per
// block and micro-batch: forward sends the qkv to the heads' ranks and the attention output
// back (again when full recomputation reruns the forward); backward sends the output to the
// heads' ranks again (or, recomputed there under selective recomputation, back), its gradient
// likewise, and the qkv gradient back. Each call sends (cp - 1)/cp of its buffer: this rank's
// rows of its tensor-parallel rank's heads.
//
// The ring exchange (model/ring_attention.cpp) instead sends, per block and micro-batch, this
// rank's keys and values of its tensor-parallel kv heads (K = rows x 2 kv_heads hd / tp
// elements) to the next rank: cp - 1 times in forward (again when full recomputation reruns
// it, or selective recomputation reruns the attention core), cp - 1 times in backward, in the
// compute type, and the accumulator of their gradient cp times (the last one home) in the
// statistics type (f32 under bf16/fp16: ring_attention.cpp keeps the sums in f32).
void add_context_bytes(const ModelConfig& m, const ParallelLayout& l, const StepShape& s,
                       double rows, std::map<std::string, double>& out) {
  const double a = static_cast<double>(s.activation_element_bytes);
  const double mb = static_cast<double>(s.micro_batches);
  const double blocks = static_cast<double>(s.blocks < 0 ? m.n_layer : s.blocks);
  const double tp = static_cast<double>(l.tp);
  if (l.cp_comm == CpComm::ring) {
    const double kv = rows * static_cast<double>(2 * m.kv_heads() * m.head_dim()) / tp;
    const double passes = (s.recompute_full || s.recompute_selective ? 3.0 : 2.0);
    const double cp = static_cast<double>(l.cp);
    const double sums = static_cast<double>(s.statistic_bytes);
    out["cp.send"] = mb * blocks * kv * (passes * (cp - 1) * a + cp * sums);
    return;
  }
  const double qkv = rows * static_cast<double>((m.n_head + 2 * m.kv_heads()) * m.head_dim()) / tp * a;
  const double attn = rows * static_cast<double>(m.q_width()) / tp * a;
  const double forwards = s.recompute_full ? 2 : 1;
  const double share = static_cast<double>(l.cp - 1) / static_cast<double>(l.cp);
  out["cp.all_to_all"] = mb * blocks * share * (forwards * (qkv + attn) + qkv + 2 * attn);
}

// The data-parallel reduction of `elements` gradient elements over `ranks` ranks as group
// `group` (ZeRO's stage over `shards` of them, `replicas` copies of each shard), with
// `gathered` the ZeRO-3 gathers' elements per micro-batch.
void add_data_bytes(const ParallelLayout& l, const StepShape& s, const std::string& data,
                    double elements, std::int64_t ranks, std::int64_t shards,
                    std::int64_t replicas, double gathered, std::map<std::string, double>& out) {
  const double eb = static_cast<double>(s.element_bytes);
  const double mb = static_cast<double>(s.micro_batches);
  const double grads = elements * eb;
  if (l.zero == ZeroStage::none) {
    if (ranks > 1) out[data + ".all_reduce"] += ring_all_reduce_bytes(grads, ranks);
    return;
  }
  const std::string group = replicas > 1 ? "shard" : data;
  const double pb = static_cast<double>(s.param_element_bytes);
  const double rs = ring_reduce_scatter_bytes(grads, shards);
  out[group + ".reduce_scatter"] += l.zero == ZeroStage::optimizer ? rs : mb * rs;
  out[group + ".all_gather"] += l.zero < ZeroStage::parameters
                                    ? ring_all_gather_bytes(elements * pb, shards)
                                    : mb * ring_all_gather_bytes(gathered * pb, shards);
  if (replicas > 1) out["replica.all_reduce"] += ring_all_reduce_bytes(grads / shards, replicas);
}

// Every rank that holds some of a micro-batch's rows routes all of them (model/moe_layer.hpp):
// per MoE block, the router's logits of `rows` rows gathered over `ranks` in forward (again when
// full recomputation reruns it) and the gates' gradient in backward, over the step's
// micro-batches.
double router_gather_bytes(const ModelConfig& m, const StepShape& s, double rows, std::int64_t ranks) {
  const double forwards = s.recompute_full ? 2 : 1;
  const double logits = rows * static_cast<double>(m.moe.experts) * s.activation_element_bytes;
  const double gates = rows * static_cast<double>(m.moe.top_k) * s.statistic_bytes;
  return static_cast<double>(s.micro_batches) *
         (forwards * ring_all_gather_bytes(logits, ranks) + ring_all_gather_bytes(gates, ranks));
}

}  // namespace

double expert_all_to_all_bytes(const ModelConfig& m, const ParallelLayout& l, double forwards,
                               double rows_sent, double rows_received,
                               std::int64_t element_bytes, bool recompute_full) {
  if (l.ep <= 1) return 0;
  const double r = recompute_full ? 1 : 0;
  const double counts = static_cast<double>((l.ep - 1) * (m.moe.experts / l.ep) * 4);
  return (1 + r) * forwards * counts +
         (2 + r) * (rows_sent + rows_received) * static_cast<double>(m.d_model) *
             static_cast<double>(element_bytes);
}

std::map<std::string, double> step_comm_bytes(const ModelConfig& m, const ParallelLayout& l,
                                              const StepShape& s) {
  std::map<std::string, double> out;
  const double eb = static_cast<double>(s.element_bytes);
  // A rank's token rows of a micro-batch: its 1/cp of each sequence.
  const double rows = static_cast<double>(s.micro_batch * s.seq / l.cp);
  const double activation = rows * m.d_model * s.activation_element_bytes;  // one R x d tensor
  const double mb = static_cast<double>(s.micro_batches);
  const double blocks = static_cast<double>(s.blocks < 0 ? m.n_layer : s.blocks);
  // Of them, the MoE blocks (docs/moe.md, "Dense blocks").
  const double moe_blocks = !m.is_moe()       ? 0.0
                            : s.moe_blocks >= 0 ? static_cast<double>(s.moe_blocks)
                            : s.blocks < 0    ? static_cast<double>(m.moe_blocks())
                                              : blocks;
  if (l.has_grid()) {
    add_grid_bytes(m, l, s, out);
  } else if (l.tp > 1) {
    // Each half of the block's inventory (model/block_inventory.hpp) with layers is one
    // tensor-parallel region: forward leaves it once (again when full recomputation reruns the
    // forward), backward enters it once; the embedding leaves one, the head's gradient enters
    // one. (A mixture of experts' MLP half is none: its experts are replicated over tp; a
    // dense block among MoE blocks has both.)
    const double regions = 2.0 * blocks - moe_blocks;
    const double boundaries = (s.recompute_full ? 3.0 : 2.0) * regions +
                              (s.embedding ? 1 : 0) + (s.head ? 1 : 0);
    const double loss_stats = s.head ? 3.0 * rows * s.statistic_bytes : 0.0;  // row max; row sum, target logit
    out["tp.all_reduce"] = mb * ring_all_reduce_bytes(loss_stats, l.tp);
    if (l.sequence_parallel) {
      // Each boundary is an all-gather one way and a reduce-scatter the other; backward also
      // gathers each half's norm output again (forward keeps only this rank's rows).
      out["tp.all_gather"] =
          mb * (boundaries + regions) * ring_all_gather_bytes(activation, l.tp);
      out["tp.reduce_scatter"] = mb * boundaries * ring_reduce_scatter_bytes(activation, l.tp);
      if (m.is_moe()) out["tp.all_gather"] += router_gather_bytes(m, s, rows, l.tp) * moe_blocks;
    } else {
      out["tp.all_reduce"] += mb * boundaries * ring_all_reduce_bytes(activation, l.tp);
    }
    // Replicated parameters' partial gradients (the norms' with sequence parallelism, Qwen3's
    // q_norm and k_norm with or without): once per step, or every micro-batch when ZeRO-2/3
    // reduces each micro-batch's gradient.
    const double partial =
        static_cast<double>((l.sequence_parallel ? s.sp_grad_elements : 0) + s.head_grad_elements);
    out["tp.all_reduce"] += (l.zero >= ZeroStage::gradients ? mb : 1.0) *
                            ring_all_reduce_bytes(partial * eb, l.tp);
  }
  if (l.cp > 1) add_context_bytes(m, l, s, rows, out);
  if (l.cp > 1 && m.is_moe())  // of all the micro-batch's rows
    out["cp.all_gather"] +=
        router_gather_bytes(m, s, static_cast<double>(s.micro_batch * s.seq), l.cp) * moe_blocks;
  // Gradients are summed (and ZeRO state sharded) over dp, or dp x cp (group "dp_cp").
  const std::string data = l.cp > 1 ? "dp_cp" : "dp";
  add_data_bytes(l, s, data, static_cast<double>(s.grad_elements), l.data_ranks(), l.shards(),
                 l.replicas(),
                 static_cast<double>(s.gathered_once_elements) + 2.0 * s.gathered_twice_elements,
                 out);
  if (l.ep > 1) {
    // Expert parallelism (docs/moe.md): the experts' gradients over the dp / ep ranks that hold
    // the same experts, and the token rows' all-to-all over the ep ranks.
    add_data_bytes(l, s, "edp", static_cast<double>(s.expert_grad_elements),
                   l.expert_data_ranks(), l.expert_shards(), 1,
                   2.0 * static_cast<double>(s.expert_gathered_elements), out);
    const double forwards = mb * moe_blocks;
    // Balanced routing: a rank's own rows (1/tp of them under sequence parallelism) spread
    // evenly over the experts.
    const double own = l.sequence_parallel && l.tp > 1 ? rows / static_cast<double>(l.tp) : rows;
    const double balanced = forwards * own * static_cast<double>(m.moe.top_k) *
                            static_cast<double>(l.ep - 1) / static_cast<double>(l.ep);
    out["ep.all_to_all"] = expert_all_to_all_bytes(
        m, l, forwards, s.expert_rows_sent < 0 ? balanced : s.expert_rows_sent,
        s.expert_rows_received < 0 ? balanced : s.expert_rows_received,
        s.activation_element_bytes, s.recompute_full);
  }
  if (s.pipeline_sends > 0) {
    // A stage sends its rows: a 1/tp slice with sequence parallelism, this z's sequences with
    // a tensor grid.
    const double local = l.sequence_parallel && l.tp > 1
                             ? activation / l.tp
                             : activation / static_cast<double>(l.row_ranks());
    out["pp.send"] = mb * s.pipeline_sends * local;
  }
  if (s.tied_embedding_elements > 0)
    out["embedding.all_reduce"] = ring_all_reduce_bytes(s.tied_embedding_elements * eb, 2);
  for (auto it = out.begin(); it != out.end();) it = it->second > 0 ? std::next(it) : out.erase(it);
  return out;
}

}  // namespace kintsugi
