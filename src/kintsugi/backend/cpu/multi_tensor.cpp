#include "kintsugi/backend/cpu/multi_tensor.hpp"

#include <algorithm>
#include <vector>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"

namespace kintsugi::cpu {

namespace {

// first[r] = the chunks of the ranges before r; first.back() = all of them.
template <class Length>
std::vector<std::int64_t> first_chunks(std::size_t ranges, std::int64_t chunk, Length length) {
  std::vector<std::int64_t> first(ranges + 1, 0);
  for (std::size_t r = 0; r < ranges; ++r)
    first[r + 1] = first[r] + (length(r) + chunk - 1) / chunk;
  return first;
}

// The range holding global chunk g.
std::size_t range_of(const std::vector<std::int64_t>& first, std::int64_t g) {
  return static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), g) - first.begin() -
                                  1);
}

}  // namespace

void sum_squares_multi(std::span<const Tensor> xs, double* sum, GrowBuffer& partial_buffer) {
  const std::int64_t chunk = kSumSquaresChunk;
  const auto first = first_chunks(xs.size(), chunk, [&](std::size_t r) { return xs[r].numel(); });
  double* partial = partial_buffer.get_as<double>(static_cast<std::size_t>(first.back()));
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < first.back(); ++g) {
    const std::size_t r = range_of(first, g);
    const Tensor& x = xs[r];
    const std::int64_t begin = (g - first[r]) * chunk;
    const std::int64_t len = std::min(chunk, x.numel() - begin);
    if (x.dtype == DType::f32)
      partial[g] = sum_squares_chunk(x.as<float>() + begin, len);
    else if (x.dtype == DType::f64)
      partial[g] = sum_squares_chunk(x.as<double>() + begin, len);
    else
      partial[g] = mixed::sum_squares_chunk(AnyPtr(x), begin, begin + len);
  }
  // Each range's chunk sums in order, then the ranges in order: sum_squares' additions.
  for (std::size_t r = 0; r < xs.size(); ++r) {
    double total = 0;
    for (std::int64_t g = first[r]; g < first[r + 1]; ++g) total += partial[g];
    *sum += total;
  }
}

void adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h) {
  AdamWHyper plain = h;
  plain.weight_decay = 0;
  const AdamWConstants<float> f32_decay(h), f32_plain(plain);
  const AdamWConstants<double> f64_decay(h), f64_plain(plain);
  const std::int64_t chunk = kAdamWChunk;
  const auto first =
      first_chunks(ranges.size(), chunk, [&](std::size_t r) { return ranges[r].param.numel(); });
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < first.back(); ++g) {
    const std::size_t r = range_of(first, g);
    const AdamWRange& s = ranges[r];
    const std::int64_t i0 = (g - first[r]) * chunk;
    const std::int64_t len = std::min(chunk, s.param.numel() - i0);
    const bool working = !s.working_copy.empty();
    const DType t = s.param.dtype;
    if (!working && t == DType::f64) {
      adamw_chunk(s.param.as<double>() + i0, s.grad.as<double>() + i0, s.m.as<double>() + i0,
                  s.v.as<double>() + i0, len, s.decay ? f64_decay : f64_plain);
    } else if (!working && s.grad.dtype == DType::f32) {
      adamw_chunk(s.param.as<float>() + i0, s.grad.as<float>() + i0, s.m.as<float>() + i0,
                  s.v.as<float>() + i0, len, s.decay ? f32_decay : f32_plain);
    } else {
      const AnyPtr wc = working ? AnyPtr(s.working_copy) : AnyPtr();
      mixed::adamw_chunk(s.param.as<float>(), AnyPtr(s.grad), s.m.as<float>(), s.v.as<float>(),
                         working ? &wc : nullptr, i0, len, s.decay ? f32_decay : f32_plain);
    }
  }
}

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum) {
  for (const Tensor& x : xs) kind_of({&x});
  cpu::sum_squares_multi(xs, sum.as<double>(), partials_);
}

void CpuBackend::do_adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h) {
  for (const AdamWRange& r : ranges)
    check_adamw(r.param, r.grad, r.m, r.v, r.working_copy.empty() ? nullptr : &r.working_copy);
  cpu::adamw_step_multi(ranges, h);
}

}  // namespace kintsugi::cpu
