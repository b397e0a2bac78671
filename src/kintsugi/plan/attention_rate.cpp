#include "kintsugi/plan/attention_rate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/plan/device_timing.hpp"
#include "kintsugi/plan/flops.hpp"

namespace kintsugi {

AttentionShape attention_shape_of(const ModelConfig& m, std::int64_t sequences) {
  AttentionShape s{.batch = sequences, .seq = m.seq_len, .heads = m.n_head,
                   .kv_heads = m.kv_heads(), .head_dim = m.head_dim()};
  if (m.uses_alibi()) s.alibi_heads = m.n_head;  // the slopes' extra work, as BLOOM runs it
  s.window = m.sliding_window;
  return s;
}

std::int64_t representative_sequences(const ModelConfig& m) {
  return std::max<std::int64_t>(1, (8192 + m.seq_len - 1) / m.seq_len);
}

std::string describe(const AttentionShape& s, DType dtype) {
  return fmt::format("{} {}x{} h{}/{} d{}{}{}", name_of(dtype), s.batch, s.seq, s.heads,
                     s.kv_heads, s.head_dim, s.alibi_heads > 0 ? " alibi" : "",
                     s.window > 0 ? fmt::format(" w{}", s.window) : "");
}

namespace {

// A tensor of `dtype` on the backend's device holding smooth values in [-scale, scale] (no
// zeros, denormals or infinities that could take a kernel off its ordinary path).
Tensor filled(Backend& backend, std::vector<Buffer>& keep, DType dtype, Shape shape,
              float scale) {
  const std::int64_t n = shape.numel();
  keep.push_back(
      backend.allocate(MemoryKind::workspace, static_cast<std::size_t>(n) * size_of(dtype)));
  const Tensor t = keep.back().view(dtype, shape);
  if (scale == 0) return t;  // allocations are zero-filled
  std::vector<float> values(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = scale * static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 0.1));
  write_values(values.data(), t);
  return t;
}

}  // namespace

AttentionRate measure_attention_rate(Backend& backend, const AttentionShape& shape, DType dtype,
                                     int repeats) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    fail("attention rates are measured for f32, bf16 and f16 activations, not {}",
         name_of(dtype));
  if (shape.batch < 1 || shape.seq < 1 || shape.heads < 1 || shape.kv_heads < 1 ||
      shape.head_dim < 1 || shape.heads % shape.kv_heads != 0)
    fail("attention shape {} is not one a model has", describe(shape, dtype));
  const std::int64_t rows = shape.batch * shape.seq;
  const std::int64_t qkv_width = (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  const std::int64_t out_width = shape.heads * shape.head_dim;
  std::vector<Buffer> buffers;
  // Queries and keys of about unit size give scores of order sqrt(head_dim) before scaling:
  // softmaxes neither flat nor one-hot, like a trained model's.
  const Tensor qkv = filled(backend, buffers, dtype, {rows, qkv_width}, 1.0f);
  const Tensor dout = filled(backend, buffers, dtype, {rows, out_width}, 0.01f);
  const Tensor out = filled(backend, buffers, dtype, {rows, out_width}, 0.0f);
  const Tensor dqkv = filled(backend, buffers, dtype, {rows, qkv_width}, 0.0f);
  const Tensor lse =
      filled(backend, buffers, DType::f32, {shape.batch, shape.heads, shape.seq}, 0.0f);
  const double seconds = best_seconds_per_call(
      backend,
      [&] {
        backend.attention_forward(shape, qkv, out, lse);
        backend.attention_backward(shape, qkv, out, lse, dout, dqkv);
      },
      repeats);
  AttentionRate rate;
  rate.tflops =
      attention_core_flops(shape.batch, shape.seq, shape.heads, shape.head_dim, shape.window) /
      seconds / 1e12;
  rate.shape = shape;
  rate.dtype = dtype;
  rate.hardware = backend.hardware();
  return rate;
}

}  // namespace kintsugi
