#pragma once
// The global L2 norm of the gradient, over every shard of every rank, with each parameter
// counted once: a tensor-parallel shard contributes from every rank of the group, a replicated
// parameter (norms, row-parallel biases, position embedding) only from tp rank 0. Data-parallel
// ranks hold the same (reduced) gradient, so they need no reduction.
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/model/param_store.hpp"
#include "kintsugi/parallel/tensor_parallel.hpp"

namespace kintsugi {

// Over all of this rank's chunks; pp (null without pipeline parallelism) sums the stages. Tied
// copies (the LM head's token table on the last stage) are not counted again.
double global_grad_norm(Backend& backend, const std::vector<const ParamStore*>& chunks,
                        const TensorParallel& tp, Communicator* pp = nullptr);

// Sequence parallelism leaves replicated parameters with partial gradients (each rank saw its
// slice of the rows): sums them across the tensor-parallel group.
void reduce_sequence_parallel_grads(const ParamStore& params, const TensorParallel& tp);

}  // namespace kintsugi
