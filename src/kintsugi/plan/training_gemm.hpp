#pragma once
// How much of the forward GEMM's rate a training step's GEMMs reach. A linear layer runs three
// GEMMs of equal FLOPs per step: forward y = x w^T, backward input dx = dy w and backward weight
// dw = dy^T x. On a GPU the backward layouts run slower: on an H200 at GPT-2 124M's shapes the
// profile measured 624, 498 and 382 TFLOP/s, and a GEMM curve through forward GEMMs alone
// predicted that step's GEMMs a third too fast (docs/planner.md).
#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/dtype.hpp"

namespace kintsugi {

struct TrainingGemm {
  double forward_gflops = 0, backward_input_gflops = 0, backward_weight_gflops = 0;
  // The three together: their FLOPs over the sum of their times (the harmonic mean).
  double combined_gflops = 0;
  // combined over forward: the share of the forward rate a training step's GEMMs reach.
  double efficiency = 0;
};

// The three GEMMs of a size x size linear layer through the backend's linear ops, operands and
// results in `dtype` (parameter gradients in f32, as training keeps them), each the best of
// `repeats` (device_timing.hpp).
TrainingGemm measure_training_gemm(Backend& backend, int size, int repeats, DType dtype);

}  // namespace kintsugi
