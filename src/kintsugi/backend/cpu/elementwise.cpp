// Elementwise ops, reductions and the fused AdamW update over flat buffers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"
#include "kintsugi/backend/cpu/thread_rows.hpp"

namespace kintsugi::cpu {

namespace {

constexpr std::int64_t kSumChunk = kSumSquaresChunk;
constexpr std::int64_t kStage = kAdamWChunk;  // mixed precision: elements staged at a time

template <class T>
inline void adamw_element(T& param, T grad, T& m, T& v, const AdamWConstants<T>& k) {
  const T g = grad * k.gs;
  const T mi = k.b1 * m + (T(1) - k.b1) * g;
  const T vi = k.b2 * v + (T(1) - k.b2) * g * g;
  m = mi;
  v = vi;
  param = param * k.decay - k.step_size * mi / (std::sqrt(vi) * k.inv_sqrt_bc2 + k.eps);
}

}  // namespace

template <class T>
void add(const T* a, const T* b, T* out, std::int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void add_bias(T* x, const T* bias, std::int64_t rows, std::int64_t cols) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = x + r * cols;
#pragma omp simd
    for (std::int64_t c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

template <class T>
void scale(T* x, std::int64_t n, double factor) {
  const T f = static_cast<T>(factor);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) x[i] *= f;
}

template <class T>
double sum_squares_chunk(const T* x, std::int64_t n) {
  T acc = 0;
#pragma omp simd reduction(+ : acc)
  for (std::int64_t i = 0; i < n; ++i) acc += x[i] * x[i];
  return acc;
}

template <class T>
double sum_squares(const T* x, std::int64_t n) {
  // Fixed-size chunks summed in chunk order: the result does not depend on the thread count.
  constexpr std::int64_t kChunk = kSumChunk;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c)
    partial[c] = sum_squares_chunk(x + c * kChunk, std::min(kChunk, n - c * kChunk));
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

template <class T>
void adamw_chunk(T* param, const T* grad, T* m, T* v, std::int64_t n,
                 const AdamWConstants<T>& k) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) adamw_element(param[i], grad[i], m[i], v[i], k);
}

template <class T>
void adamw_step(T* param, const T* grad, T* m, T* v, std::int64_t n, const AdamWHyper& h) {
  const AdamWConstants<T> k(h);
#pragma omp parallel for schedule(static)
  for (std::int64_t i0 = 0; i0 < n; i0 += kStage) {
    const std::int64_t len = std::min(kStage, n - i0);
    adamw_chunk(param + i0, grad + i0, m + i0, v + i0, len, k);
  }
}

#define KINTSUGI_INSTANTIATE(T)                                           \
  template void add<T>(const T*, const T*, T*, std::int64_t);             \
  template void add_bias<T>(T*, const T*, std::int64_t, std::int64_t);    \
  template void scale<T>(T*, std::int64_t, double);                       \
  template double sum_squares_chunk<T>(const T*, std::int64_t);           \
  template double sum_squares<T>(const T*, std::int64_t);                 \
  template void adamw_chunk<T>(T*, const T*, T*, T*, std::int64_t,        \
                               const AdamWConstants<T>&);                 \
  template void adamw_step<T>(T*, const T*, T*, T*, std::int64_t, const AdamWHyper&);
KINTSUGI_INSTANTIATE(float)
KINTSUGI_INSTANTIATE(double)
#undef KINTSUGI_INSTANTIATE

namespace mixed {

void add(AnyPtr a, AnyPtr b, AnyPtr out, std::int64_t n) {
  // out may alias a or b (the residual stream): chunks are read before they are written.
  binary_in_chunks<kStage>(a, b, out, n,
                           [](const float* ac, const float* bc, float* oc, std::int64_t len) {
#pragma omp simd
                             for (std::int64_t i = 0; i < len; ++i) oc[i] = ac[i] + bc[i];
                           });
}

void add_bias(AnyPtr x, AnyPtr bias, std::int64_t rows, std::int64_t cols, ThreadWorkspace& ws) {
  rows_with_thread_area(ws, 2 * cols, rows, [&](float* area) {
    const float* b32 = read_f32(bias, cols, area);
    return [&, area, b32](std::int64_t r) {
      float* row = out_f32(x.at(r * cols), cols, area + cols, true);
#pragma omp simd
      for (std::int64_t c = 0; c < cols; ++c) row[c] += b32[c];
      write_back(x.at(r * cols), cols, row);
    };
  });
}

void scale(AnyPtr x, std::int64_t n, double factor) {
  const float f = static_cast<float>(factor);
#pragma omp parallel for schedule(static)
  for (std::int64_t i0 = 0; i0 < n; i0 += kStage) {
    const std::int64_t len = std::min(kStage, n - i0);
    float xs[kStage];
    float* xc = out_f32(x.at(i0), len, xs, true);
#pragma omp simd
    for (std::int64_t i = 0; i < len; ++i) xc[i] *= f;
    write_back(x.at(i0), len, xc);
  }
}

double sum_squares_chunk(AnyPtr x, std::int64_t begin, std::int64_t end) {
  float acc = 0, xs[kStage];
  for (std::int64_t i0 = begin; i0 < end; i0 += kStage) {
    const std::int64_t len = std::min(kStage, end - i0);
    const float* p = read_f32(x.at(i0), len, xs);
#pragma omp simd reduction(+ : acc)
    for (std::int64_t i = 0; i < len; ++i) acc += p[i] * p[i];
  }
  return acc;
}

// `partial_buffer` holds one double per 64Ki-element chunk.
double sum_squares(AnyPtr x, std::int64_t n, GrowBuffer& partial_buffer) {
  // The f32 kernel's chunks, each summed in f32 over its staged pieces in order.
  const std::int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  double* partial = partial_buffer.get_as<double>(chunks);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c)
    partial[c] = sum_squares_chunk(x, c * kSumChunk, std::min(n, (c + 1) * kSumChunk));
  double total = 0;
  for (std::int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

void adamw_chunk(float* param, AnyPtr grad, float* m, float* v, const AnyPtr* working_copy,
                 std::int64_t i0, std::int64_t len, const AdamWConstants<float>& k) {
  float gs[kStage];
  const float* g = read_f32(grad.at(i0), len, gs);
  float* p = param + i0;
  float* mc = m + i0;
  float* vc = v + i0;
#pragma omp simd
  for (std::int64_t i = 0; i < len; ++i) adamw_element(p[i], g[i], mc[i], vc[i], k);
  copy_to_working(working_copy, i0, p, len);
}

// param, m and v are f32; grad any; working_copy (optional, any) receives param rounded.
void adamw_step(float* param, AnyPtr grad, float* m, float* v, const AnyPtr* working_copy,
                std::int64_t n, const AdamWHyper& h) {
  const AdamWConstants<float> k(h);
#pragma omp parallel for schedule(static)
  for (std::int64_t i0 = 0; i0 < n; i0 += kStage)
    adamw_chunk(param, grad, m, v, working_copy, i0, std::min(kStage, n - i0), k);
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const Kind kind = kind_of({&a, &b, &out});
  if (kind == Kind::mixed) return cpu::mixed::add(AnyPtr(a), AnyPtr(b), AnyPtr(out), a.numel());
  typed(kind, [&]<class T>() { cpu::add(a.as<T>(), b.as<T>(), out.as<T>(), a.numel()); });
}

void CpuBackend::do_add_bias(const Tensor& x, const Tensor& bias) {
  const Kind kind = kind_of({&x, &bias});
  if (kind == Kind::mixed)
    return cpu::mixed::add_bias(AnyPtr(x), AnyPtr(bias), rows_of(x), cols_of(x), workspace_);
  typed(kind, [&]<class T>() { cpu::add_bias(x.as<T>(), bias.as<T>(), rows_of(x), cols_of(x)); });
}

void CpuBackend::do_scale(const Tensor& x, double factor) {
  const Kind kind = kind_of({&x});
  if (kind == Kind::mixed) return cpu::mixed::scale(AnyPtr(x), x.numel(), factor);
  typed(kind, [&]<class T>() { cpu::scale(x.as<T>(), x.numel(), factor); });
}

void CpuBackend::do_copy(const Tensor& src, const Tensor& dst) {
  std::memcpy(dst.data, src.data, src.bytes());
}

// Nothing is computed: each row's columns are one block of bytes, whatever the type.
void CpuBackend::do_copy_columns(const Tensor& src, std::int64_t src_col, const Tensor& dst,
                                 std::int64_t dst_col, std::int64_t cols) {
  const std::int64_t rows = src.shape[0];
  const std::size_t es = size_of(src.dtype), width = static_cast<std::size_t>(cols) * es;
  const std::size_t src_pitch = static_cast<std::size_t>(src.shape[1]) * es;
  const std::size_t dst_pitch = static_cast<std::size_t>(dst.shape[1]) * es;
  if (width == 0) return;
  const std::byte* from =
      static_cast<const std::byte*>(src.data) + static_cast<std::size_t>(src_col) * es;
  std::byte* to = static_cast<std::byte*>(dst.data) + static_cast<std::size_t>(dst_col) * es;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r)
    std::memcpy(to + static_cast<std::size_t>(r) * dst_pitch,
                from + static_cast<std::size_t>(r) * src_pitch, width);
}

void CpuBackend::do_zero(const Tensor& x) { std::memset(x.data, 0, x.bytes()); }

void CpuBackend::do_sum_squares(const Tensor& x, const Tensor& sum) {
  const Kind kind = kind_of({&x});
  double result = 0;
  if (kind == Kind::mixed)
    result = cpu::mixed::sum_squares(AnyPtr(x), x.numel(), partials_);
  else
    typed(kind, [&]<class T>() { result = cpu::sum_squares(x.as<T>(), x.numel()); });
  add_to_scalar(sum, result);
}

void CpuBackend::do_adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                               const Tensor& v, const AdamWHyper& h, const Tensor* working_copy) {
  const std::int64_t n = param.numel();
  const Kind kind = check_adamw(param, grad, m, v, working_copy);
  if (kind == Kind::mixed || working_copy) {
    const OptionalAny wc(working_copy);
    return cpu::mixed::adamw_step(param.as<float>(), AnyPtr(grad), m.as<float>(), v.as<float>(),
                                  wc.ptr, n, h);
  }
  typed(kind, [&]<class T>() {
    cpu::adamw_step(param.as<T>(), grad.as<T>(), m.as<T>(), v.as<T>(), n, h);
  });
}

}  // namespace kintsugi::cpu
