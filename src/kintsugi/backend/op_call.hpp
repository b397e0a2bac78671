#pragma once
// One call of a Backend op as its entry point describes it (backend/ops_*.cpp): what it must at
// least compute and move (a roofline's two floors), and the dimensions that tell its calls of
// different shapes apart. Decorators see it at their one hook (Backend::around); the profiler
// sums it per op and shape.
#include "kintsugi/core/tensor.hpp"

namespace kintsugi {

struct OpCall {
  const char* name = "";  // the op's kind, e.g. "linear_forward"; ops sharing one add up under it
  double flops = 0;       // GEMM-like ops: 2 x multiply-adds (attention: its model FLOPs)
  // The least traffic to memory: each tensor it reads read once, each it writes written once,
  // at the tensors' own element types (an output it accumulates into is read too; a gather
  // counts the rows it reads). 0: not counted.
  double bytes = 0;
  // Linear ops: the layer's M x N x K (rows x out x in, the forward's, so a layer's three GEMMs
  // share it); attention and RoPE: batch x seq x heads x head_dim; other ops: their main tensor
  // as rows x columns (its only dimension when it has one). Rank 0: not given.
  Shape dims;
  DType dtype = DType::f32;  // the main operand's element type
};

}  // namespace kintsugi
