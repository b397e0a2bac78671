// Elementwise kernels: additions, scaling, type conversion, GELU, SwiGLU, rotary embeddings and
// the fused AdamW update. Each thread handles whole elements (grid-stride loops over runs of 8),
// reading them before writing, so outputs may alias inputs element for element (GELU's dx = dy,
// SwiGLU's dgate = dy, add's out = b). The formulas are the CPU kernels' (backend/cpu/*.cpp), in
// f32 (f64 for f64 tensors).
#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda {

namespace {

// Inputs and outputs of an elementwise map (outputs may be null: not written).
template <int N, int M>
struct Io {
  Ref in[N];
  Ref out[M];
};

// y = op(x) element by element: whole runs of 8 elements through load8/store8 when every
// tensor is aligned16 (`vec`), the rest one by one. A thread reads all of its elements before it
// writes any, so outputs may alias inputs element for element.
template <class Acc, int N, int M, class Op>
__global__ void map_kernel(Io<N, M> io, std::int64_t n, bool vec, Op op) {
  const std::int64_t whole = vec ? n / 8 * 8 : 0;
  for (std::int64_t c = global_index() * 8; c < whole; c += global_stride() * 8) {
    Acc x[N][8], y[M][8];
#pragma unroll
    for (int k = 0; k < N; ++k) load8(io.in[k], c, x[k]);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      Acc xi[N], yi[M];
#pragma unroll
      for (int k = 0; k < N; ++k) xi[k] = x[k][e];
      op(xi, yi);
#pragma unroll
      for (int k = 0; k < M; ++k) y[k][e] = yi[k];
    }
#pragma unroll
    for (int k = 0; k < M; ++k)
      if (io.out[k].data) store8(io.out[k], c, y[k]);
  }
  for (std::int64_t i = whole + global_index(); i < n; i += global_stride()) {
    Acc xi[N], yi[M];
#pragma unroll
    for (int k = 0; k < N; ++k) xi[k] = load<Acc>(io.in[k], i);
    op(xi, yi);
#pragma unroll
    for (int k = 0; k < M; ++k)
      if (io.out[k].data) store(io.out[k], i, yi[k]);
  }
}

template <class Acc>
struct AddOp {
  __device__ void operator()(const Acc (&x)[2], Acc (&y)[1]) const { y[0] = x[0] + x[1]; }
};
template <class Acc>
struct ScaleOp {
  Acc factor;
  __device__ void operator()(const Acc (&x)[1], Acc (&y)[1]) const { y[0] = x[0] * factor; }
};
template <class Acc>
struct ConvertOp {
  __device__ void operator()(const Acc (&x)[1], Acc (&y)[1]) const { y[0] = x[0]; }
};

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
struct GeluForwardOp {  // x -> y
  __device__ void operator()(const Acc (&x)[1], Acc (&y)[1]) const { y[0] = Gelu<Acc>::forward(x[0]); }
};
template <class Acc>
struct GeluBackwardOp {  // (x, dy) -> dx
  __device__ void operator()(const Acc (&x)[2], Acc (&y)[1]) const {
    y[0] = Gelu<Acc>::grad(x[0], x[1]);
  }
};

template <class Acc>
__device__ __forceinline__ Acc sigmoid(Acc g) {
  return Acc(1) / (Acc(1) + exp_acc(-g));
}
template <class Acc>
struct SwigluForwardOp {  // (gate, up) -> y
  __device__ void operator()(const Acc (&x)[2], Acc (&y)[1]) const {
    y[0] = x[0] * sigmoid(x[0]) * x[1];
  }
};
// (gate, up, dy) -> (dgate, dup): dup = dy silu(g); dgate = dy up s (1 + g (1 - s)) with
// s = sigmoid(g).
template <class Acc>
struct SwigluBackwardOp {
  __device__ void operator()(const Acc (&x)[3], Acc (&y)[2]) const {
    const Acc g = x[0], u = x[1], d = x[2], sg = sigmoid(g);
    y[1] = d * g * sg;
    y[0] = d * u * sg * (Acc(1) + g * (Acc(1) - sg));
  }
};

// (param, grad, m, v) -> (m, v, param, working copy).
template <class Acc>
struct AdamWOp {
  AdamWConstants k;
  __device__ void operator()(const Acc (&x)[4], Acc (&y)[4]) const {
    const Acc b1 = static_cast<Acc>(k.b1), b2 = static_cast<Acc>(k.b2);
    const Acc g = x[1] * static_cast<Acc>(k.grad_scale);
    const Acc mi = b1 * x[2] + (Acc(1) - b1) * g;
    const Acc vi = b2 * x[3] + (Acc(1) - b2) * g * g;
    const Acc p = x[0] * static_cast<Acc>(k.decay) -
                  static_cast<Acc>(k.step_size) * mi /
                      (sqrt_acc(vi) * static_cast<Acc>(k.inv_sqrt_bc2) + static_cast<Acc>(k.eps));
    y[0] = mi;
    y[1] = vi;
    y[2] = p;
    y[3] = p;
  }
};

template <class Acc, int N, int M, class Op>
void launch_map_as(const Io<N, M>& io, std::int64_t n, Op op, const char* name,
                   cudaStream_t stream) {
  bool vec = true;
  for (const Ref& r : io.in) vec = vec && aligned16({r});
  for (const Ref& r : io.out) vec = vec && aligned16({r});
  auto* kernel = map_kernel<Acc, N, M, Op>;
  KINTSUGI_CUDA_LAUNCH(kernel, grid_for((n + 7) / 8), kThreads, 0, stream, io, n, vec, op);
  check_launch(name, stream);
}

// Runs Op<double> when `f64`, else Op<float>; args build the op.
template <template <class> class Op, int N, int M, class... Args>
void launch_map(const char* name, const Io<N, M>& io, std::int64_t n, bool f64,
                cudaStream_t stream, Args... args) {
  if (n <= 0) return;
  if (f64)
    launch_map_as<double>(io, n, Op<double>{args...}, name, stream);
  else
    launch_map_as<float>(io, n, Op<float>{args...}, name, stream);
}

// x[r, c] += bias[c]: runs of 8 when a row is a whole number of them.
template <class Acc>
__global__ void add_bias_kernel(Ref x, Ref bias, std::int64_t rows, std::int64_t cols, bool vec) {
  const std::int64_t n = rows * cols;
  if (vec) {
    for (std::int64_t c = global_index() * 8; c < n; c += global_stride() * 8) {
      Acc v[8], b[8];
      load8(x, c, v);
      load8(bias, c % cols, b);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] += b[e];
      store8(x, c, v);
    }
    return;
  }
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    store(x, i, load<Acc>(x, i) + load<Acc>(bias, i % cols));
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

}  // namespace

void add(Ref a, Ref b, Ref out, std::int64_t n, cudaStream_t stream) {
  launch_map<AddOp>("add", Io<2, 1>{{a, b}, {out}}, n, all_f64({a, b, out}), stream);
}

void add_bias(Ref x, Ref bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  const std::int64_t n = rows * cols;
  if (n <= 0) return;
  const bool vec = cols % 8 == 0 && aligned16({x, bias});
  const unsigned grid = grid_for(vec ? n / 8 : n);
  if (all_f64({x, bias}))
    KINTSUGI_CUDA_LAUNCH(add_bias_kernel<double>, grid, kThreads, 0, stream, x, bias, rows, cols,
                         vec);
  else
    KINTSUGI_CUDA_LAUNCH(add_bias_kernel<float>, grid, kThreads, 0, stream, x, bias, rows, cols,
                         vec);
  check_launch("add_bias_kernel", stream);
}

void scale(Ref x, std::int64_t n, double factor, cudaStream_t stream) {
  if (n <= 0) return;
  if (x.dtype == DType::f64)
    launch_map_as<double>(Io<1, 1>{{x}, {x}}, n, ScaleOp<double>{factor}, "scale", stream);
  else
    launch_map_as<float>(Io<1, 1>{{x}, {x}}, n, ScaleOp<float>{static_cast<float>(factor)},
                         "scale", stream);
}

void convert(Ref src, Ref dst, std::int64_t n, cudaStream_t stream) {
  // f64 on either side converts in f64 (f64 to 16 bits then rounds through f32, as on the host).
  launch_map<ConvertOp>("convert", Io<1, 1>{{src}, {dst}}, n,
                        src.dtype == DType::f64 || dst.dtype == DType::f64, stream);
}

void gelu_forward(Ref x, Ref y, std::int64_t n, cudaStream_t stream) {
  launch_map<GeluForwardOp>("gelu_forward", Io<1, 1>{{x}, {y}}, n, all_f64({x, y}), stream);
}

void gelu_backward(Ref x, Ref dy, Ref dx, std::int64_t n, cudaStream_t stream) {
  launch_map<GeluBackwardOp>("gelu_backward", Io<2, 1>{{x, dy}, {dx}}, n, all_f64({x, dy, dx}),
                             stream);
}

void swiglu_forward(Ref gate, Ref up, Ref y, std::int64_t n, cudaStream_t stream) {
  launch_map<SwigluForwardOp>("swiglu_forward", Io<2, 1>{{gate, up}, {y}}, n,
                              all_f64({gate, up, y}), stream);
}

void swiglu_backward(Ref gate, Ref up, Ref dy, Ref dgate, Ref dup, std::int64_t n,
                     cudaStream_t stream) {
  launch_map<SwigluBackwardOp>("swiglu_backward", Io<3, 2>{{gate, up, dy}, {dgate, dup}}, n,
                               all_f64({gate, up, dy, dgate, dup}), stream);
}

void rope(const AttnShape& s, Ref qkv, double theta, bool inverse, cudaStream_t stream) {
  const std::int64_t n = s.batch * s.seq * (s.head_dim / 2);
  KINTSUGI_LAUNCH(rope_kernel, n, stream, all_f64({qkv}), s, qkv, theta, inverse ? -1.0 : 1.0);
}

void adamw_step(Ref param, Ref grad, Ref m, Ref v, Ref working_copy, std::int64_t n,
                const AdamWConstants& k, cudaStream_t stream) {
  launch_map<AdamWOp>("adamw", Io<4, 4>{{param, grad, m, v}, {m, v, param, working_copy}}, n,
                      all_f64({param, grad, m, v}), stream, k);
}

}  // namespace kintsugi::cuda
