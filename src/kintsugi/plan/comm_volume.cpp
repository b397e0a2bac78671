#include "kintsugi/plan/comm_volume.hpp"

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

std::map<std::string, double> step_comm_bytes(const ModelConfig& m, const CommLayout& l,
                                              const StepShape& s) {
  std::map<std::string, double> out;
  const double eb = static_cast<double>(s.element_bytes);
  if (l.tp > 1) {
    const double rows = static_cast<double>(s.micro_batch * s.seq);
    const double activation = rows * m.d_model * eb;   // one R x d tensor
    // Forward: the embedding and each block's two halves leave a region (1 + 2L); backward: each
    // half's input gradient and the head's enter one (2L + 1).
    const double boundaries = 2.0 * (1 + 2 * m.n_layer);
    const double loss_stats = 3.0 * rows * eb;          // row max; row sum and target logit
    const double mb = static_cast<double>(s.micro_batches);
    out["tp.all_reduce"] = mb * ring_all_reduce_bytes(loss_stats, l.tp);
    if (l.sequence_parallel) {
      // Each boundary is an all-gather one way and a reduce-scatter the other.
      out["tp.all_gather"] = mb * boundaries * ring_all_gather_bytes(activation, l.tp);
      out["tp.reduce_scatter"] = mb * boundaries * ring_reduce_scatter_bytes(activation, l.tp);
      out["tp.all_reduce"] += ring_all_reduce_bytes(s.sp_grad_elements * eb, l.tp);
    } else {
      out["tp.all_reduce"] += mb * boundaries * ring_all_reduce_bytes(activation, l.tp);
    }
  }
  if (l.dp > 1) out["dp.all_reduce"] = ring_all_reduce_bytes(s.grad_elements * eb, l.dp);
  return out;
}

}  // namespace kintsugi
