#include "kintsugi/plan/training_gemm.hpp"

#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/plan/device_timing.hpp"

namespace kintsugi {

TrainingGemm measure_training_gemm(Backend& backend, int size, int repeats, DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    fail("training GEMM rates are measured for f32, bf16 and f16, not {}", name_of(dtype));
  if (size < 1) fail("a training GEMM rate needs a size of at least 1, not {}", size);
  const std::int64_t n = size;
  const std::size_t elements = static_cast<std::size_t>(n * n);
  std::vector<float> values(elements);
  for (std::size_t i = 0; i < elements; ++i) values[i] = static_cast<float>((i % 17) * 0.01);
  const auto output = [&](DType t) {  // zero-filled
    return backend.allocate(MemoryKind::workspace, elements * size_of(t));
  };
  const auto input = [&] {
    Buffer b = output(dtype);
    write_values(values.data(), b.view(dtype, {n, n}));
    return b;
  };
  const Buffer xs = input(), ws = input(), dys = input();
  const Buffer ys = output(dtype), dxs = output(dtype), dws = output(DType::f32);
  const Tensor x = xs.view(dtype, {n, n}), w = ws.view(dtype, {n, n}), dy = dys.view(dtype, {n, n});
  const Tensor y = ys.view(dtype, {n, n}), dx = dxs.view(dtype, {n, n});
  const Tensor dw = dws.view(DType::f32, {n, n});
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const auto rate = [&](const std::function<void()>& enqueue) {
    return flops / best_seconds_per_call(backend, enqueue, repeats) / 1e9;
  };
  TrainingGemm t;
  t.forward_gflops = rate([&] { backend.linear_forward(x, w, nullptr, y); });
  t.backward_input_gflops = rate([&] { backend.linear_backward_input(dy, w, dx, false); });
  t.backward_weight_gflops =
      rate([&] { backend.linear_backward_weight(dy, x, dw, nullptr, false); });
  t.combined_gflops = 3.0 / (1.0 / t.forward_gflops + 1.0 / t.backward_input_gflops +
                             1.0 / t.backward_weight_gflops);
  t.efficiency = t.combined_gflops / t.forward_gflops;
  return t;
}

}  // namespace kintsugi
