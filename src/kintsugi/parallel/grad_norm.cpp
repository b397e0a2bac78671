#include "kintsugi/parallel/grad_norm.hpp"

#include <cmath>

namespace kintsugi {

namespace {

// Sum of squares of the gradient elements this rank counts: runs of neighbouring parameters
// that all count (or all do not).
double counted_sum_squares(Backend& backend, const ParamStore& params, const TensorParallel& tp) {
  const Tensor grads = params.grads();
  const std::size_t es = size_of(grads.dtype);
  double sum = 0;
  std::int64_t run_begin = -1, run_end = 0;
  auto flush = [&] {
    if (run_begin >= 0)
      sum += backend.sum_squares(Tensor{static_cast<std::byte*>(grads.data) + run_begin * es,
                                        grads.dtype, Shape{run_end - run_begin}});
    run_begin = -1;
  };
  for (int i = 0; i < params.size(); ++i) {
    const auto& e = params.entry(i);
    const bool counts = !e.spec.tied_copy && (e.spec.split_dim >= 0 || tp.rank() == 0);
    const std::int64_t end = i + 1 < params.size() ? params.entry(i + 1).offset : params.numel();
    if (counts) {
      if (run_begin < 0) run_begin = e.offset;
      run_end = end;
    } else {
      flush();
    }
  }
  flush();
  return sum;
}

}  // namespace

double global_grad_norm(Backend& backend, const std::vector<const ParamStore*>& chunks,
                        const TensorParallel& tp, Communicator* pp) {
  double sum = 0;
  for (const ParamStore* p : chunks) sum += counted_sum_squares(backend, *p, tp);
  for (Communicator* group : {tp.group(), pp})
    if (group) group->all_reduce(Tensor{&sum, DType::f64, Shape{1}});
  return std::sqrt(sum);
}

void reduce_sequence_parallel_grads(const ParamStore& params, const TensorParallel& tp) {
  if (!tp.sequence_parallel()) return;
  std::vector<CommHandle> pending;
  for (int i = 0; i < params.size(); ++i)
    if (params.entry(i).spec.sequence_parallel_grad)
      pending.push_back(tp.group()->all_reduce_async(params.grad(i)));
  for (auto& h : pending) h.wait();
}

}  // namespace kintsugi
