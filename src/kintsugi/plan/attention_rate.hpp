#pragma once
// The measured rate of a backend's attention kernel, for ClusterSpec::attention_tflops: an
// attention_forward followed by an attention_backward on one shape, timed on the device
// (device_timing.hpp), over the FLOPs the cost model counts for that core
// (attention_core_flops, flops.hpp: QK^T and PV, forward and backward, over the full s x s,
// whatever the kernel skips for causality or recomputes in backward). The cost model divides
// the same count by this rate, so a step's attention core takes what the kernel measured.
#include <cstdint>
#include <string>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/dtype.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

struct AttentionRate {
  double tflops = 0;
  AttentionShape shape;
  DType dtype = DType::f32;  // of the activations (qkv, out and their gradients)
  std::string hardware;      // Backend::hardware()
};

// The attention of one layer of `model` on one device (no tensor parallelism): its heads, kv
// heads, head size, sequence length and ALiBi, over `sequences` sequences.
AttentionShape attention_shape_of(const ModelConfig& model, std::int64_t sequences);
// Enough sequences of `model` for a representative measurement: at least 8192 tokens, so that
// a GPU has blocks for all its multiprocessors, as it has in training.
std::int64_t representative_sequences(const ModelConfig& model);
// A short name of the shape and dtype, e.g. "bf16 8x1024 h12/12 d64" (keys the cache, labels
// messages).
std::string describe(const AttentionShape& shape, DType dtype);

// Best of `repeats` forward-and-backward calls on `shape` with activations of `dtype` (f32,
// bf16 or f16; the log-sum-exp is f32).
AttentionRate measure_attention_rate(Backend& backend, const AttentionShape& shape, DType dtype,
                                     int repeats = 5);

}  // namespace kintsugi
