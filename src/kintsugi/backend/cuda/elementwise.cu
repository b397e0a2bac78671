// Elementwise kernels: additions, scaling, type conversion, GELU, SwiGLU, rotary embeddings and
// the fused AdamW update. Each thread handles whole elements (grid-stride loops), so outputs may
// alias inputs element for element (GELU's dx = dy, SwiGLU's dgate = dy, add's out = b). The
// formulas are the CPU kernels' (backend/cpu/*.cpp), in f32 (f64 for f64 tensors).
#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda {

namespace {

template <class Acc>
__global__ void add_kernel(Ref a, Ref b, Ref out, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    store(out, i, load<Acc>(a, i) + load<Acc>(b, i));
}

template <class Acc>
__global__ void add_bias_kernel(Ref x, Ref bias, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    store(x, i, load<Acc>(x, i) + load<Acc>(bias, i % cols));
}

template <class Acc>
__global__ void scale_kernel(Ref x, std::int64_t n, Acc factor) {
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    store(x, i, load<Acc>(x, i) * factor);
}

template <class Acc>
__global__ void convert_kernel(Ref src, Ref dst, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    store(dst, i, load<Acc>(src, i));
}

// GELU, tanh approximation (GPT-2): y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class Acc>
struct Gelu {
  static constexpr Acc kSqrt2OverPi = static_cast<Acc>(0.79788456080286535588);
  static constexpr Acc kCubic = static_cast<Acc>(0.044715);
  __device__ static Acc forward(Acc v) {
    const Acc t = tanh_acc(kSqrt2OverPi * (v + kCubic * v * v * v));
    return Acc(0.5) * v * (Acc(1) + t);
  }
  __device__ static Acc grad(Acc v, Acc dy) {
    const Acc t = tanh_acc(kSqrt2OverPi * (v + kCubic * v * v * v));
    const Acc du = kSqrt2OverPi * (Acc(1) + Acc(3) * kCubic * v * v);
    return dy * (Acc(0.5) * (Acc(1) + t) + Acc(0.5) * v * (Acc(1) - t * t) * du);
  }
};

template <class Acc>
__global__ void gelu_forward_kernel(Ref x, Ref y, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    store(y, i, Gelu<Acc>::forward(load<Acc>(x, i)));
}

template <class Acc>
__global__ void gelu_backward_kernel(Ref x, Ref dy, Ref dx, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    store(dx, i, Gelu<Acc>::grad(load<Acc>(x, i), load<Acc>(dy, i)));
}

template <class Acc>
__device__ __forceinline__ Acc sigmoid(Acc g) {
  return Acc(1) / (Acc(1) + exp_acc(-g));
}

template <class Acc>
__global__ void swiglu_forward_kernel(Ref gate, Ref up, Ref y, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const Acc g = load<Acc>(gate, i);
    store(y, i, g * sigmoid(g) * load<Acc>(up, i));
  }
}

// dup = dy silu(g); dgate = dy up s (1 + g (1 - s)) with s = sigmoid(g). dy is read first.
template <class Acc>
__global__ void swiglu_backward_kernel(Ref gate, Ref up, Ref dy, Ref dgate, Ref dup,
                                       std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const Acc g = load<Acc>(gate, i), u = load<Acc>(up, i), d = load<Acc>(dy, i);
    const Acc s = sigmoid(g);
    store(dup, i, d * g * s);
    store(dgate, i, d * u * s * (Acc(1) + g * (Acc(1) - s)));
  }
}

// One thread per (token row, rotation pair): the angle in f64 as on the host, rounded once,
// then every query and key head of the row rotated by it.
template <class Acc>
__global__ void rope_kernel(AttnShape s, Ref qkv, double theta, double sign) {
  const std::int64_t hd = s.head_dim, half = hd / 2, slots = s.heads / s.kv_heads + 2;
  const std::int64_t width = s.kv_heads * slots * hd, n = s.batch * s.seq * half;
  for (std::int64_t idx = global_index(); idx < n; idx += global_stride()) {
    const std::int64_t r = idx / half, i = idx % half;
    const std::int64_t t = r % s.seq;  // with documents, the position within its document
    const std::int64_t position = s.doc_start ? t - s.doc_start[r] : s.first_position + t;
    const double angle = static_cast<double>(position) *
                         pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
    const Acc c = static_cast<Acc>(cos(angle)), sn = static_cast<Acc>(sign * sin(angle));
    for (std::int64_t kv = 0; kv < s.kv_heads; ++kv)
      for (std::int64_t slot = 0; slot + 1 < slots; ++slot) {  // the queries and the key
        const std::int64_t at = r * width + (kv * slots + slot) * hd + i;
        const Acc x1 = load<Acc>(qkv, at), x2 = load<Acc>(qkv, at + half);
        store(qkv, at, x1 * c - x2 * sn);
        store(qkv, at + half, x2 * c + x1 * sn);
      }
  }
}

template <class Acc>
__global__ void adamw_kernel(Ref param, Ref grad, Ref m, Ref v, Ref working, std::int64_t n,
                             AdamWConstants k) {
  const Acc b1 = static_cast<Acc>(k.b1), b2 = static_cast<Acc>(k.b2);
  const Acc gs = static_cast<Acc>(k.grad_scale), eps = static_cast<Acc>(k.eps);
  const Acc decay = static_cast<Acc>(k.decay), step_size = static_cast<Acc>(k.step_size);
  const Acc inv_sqrt_bc2 = static_cast<Acc>(k.inv_sqrt_bc2);
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const Acc g = load<Acc>(grad, i) * gs;
    const Acc mi = b1 * load<Acc>(m, i) + (Acc(1) - b1) * g;
    const Acc vi = b2 * load<Acc>(v, i) + (Acc(1) - b2) * g * g;
    const Acc p =
        load<Acc>(param, i) * decay - step_size * mi / (sqrt_acc(vi) * inv_sqrt_bc2 + eps);
    store(m, i, mi);
    store(v, i, vi);
    store(param, i, p);
    if (working.data) store(working, i, p);
  }
}

}  // namespace

void add(Ref a, Ref b, Ref out, std::int64_t n, cudaStream_t stream) {
  KINTSUGI_LAUNCH(add_kernel, n, stream, all_f64({a, b, out}), a, b, out, n);
}

void add_bias(Ref x, Ref bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  KINTSUGI_LAUNCH(add_bias_kernel, rows * cols, stream, all_f64({x, bias}), x, bias, rows, cols);
}

void scale(Ref x, std::int64_t n, double factor, cudaStream_t stream) {
  if (n <= 0) return;
  if (x.dtype == DType::f64)
    KINTSUGI_CUDA_LAUNCH(scale_kernel<double>, grid_for(n), kThreads, 0, stream, x, n, factor);
  else
    KINTSUGI_CUDA_LAUNCH(scale_kernel<float>, grid_for(n), kThreads, 0, stream, x, n,
                         static_cast<float>(factor));
  check_launch("scale_kernel", stream);
}

void convert(Ref src, Ref dst, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  // f64 on either side converts in f64 (f64 to 16 bits then rounds through f32, as on the host).
  if (src.dtype == DType::f64 || dst.dtype == DType::f64)
    KINTSUGI_CUDA_LAUNCH(convert_kernel<double>, grid_for(n), kThreads, 0, stream, src, dst, n);
  else
    KINTSUGI_CUDA_LAUNCH(convert_kernel<float>, grid_for(n), kThreads, 0, stream, src, dst, n);
  check_launch("convert_kernel", stream);
}

void gelu_forward(Ref x, Ref y, std::int64_t n, cudaStream_t stream) {
  KINTSUGI_LAUNCH(gelu_forward_kernel, n, stream, all_f64({x, y}), x, y, n);
}

void gelu_backward(Ref x, Ref dy, Ref dx, std::int64_t n, cudaStream_t stream) {
  KINTSUGI_LAUNCH(gelu_backward_kernel, n, stream, all_f64({x, dy, dx}), x, dy, dx, n);
}

void swiglu_forward(Ref gate, Ref up, Ref y, std::int64_t n, cudaStream_t stream) {
  KINTSUGI_LAUNCH(swiglu_forward_kernel, n, stream, all_f64({gate, up, y}), gate, up, y, n);
}

void swiglu_backward(Ref gate, Ref up, Ref dy, Ref dgate, Ref dup, std::int64_t n,
                     cudaStream_t stream) {
  KINTSUGI_LAUNCH(swiglu_backward_kernel, n, stream, all_f64({gate, up, dy, dgate, dup}), gate, up,
                  dy, dgate, dup, n);
}

void rope(const AttnShape& s, Ref qkv, double theta, bool inverse, cudaStream_t stream) {
  const std::int64_t n = s.batch * s.seq * (s.head_dim / 2);
  KINTSUGI_LAUNCH(rope_kernel, n, stream, all_f64({qkv}), s, qkv, theta, inverse ? -1.0 : 1.0);
}

void adamw_step(Ref param, Ref grad, Ref m, Ref v, Ref working_copy, std::int64_t n,
                const AdamWConstants& k, cudaStream_t stream) {
  KINTSUGI_LAUNCH(adamw_kernel, n, stream, all_f64({param, grad, m, v}), param, grad, m, v,
                  working_copy, n, k);
}

}  // namespace kintsugi::cuda
