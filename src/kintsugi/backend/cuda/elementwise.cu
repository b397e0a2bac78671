// Elementwise kernels: additions, scaling, type conversion, GELU, SwiGLU, rotary embeddings and
// the fused AdamW update (one range, or many in one launch). Each thread handles whole elements
// (grid-stride loops over runs of 8, or a block's slice of a range), reading them before
// writing, so outputs may alias inputs element for element (GELU's dx = dy, SwiGLU's
// dgate = dy, add's out = b). The formulas are the CPU kernels' (backend/cpu/*.cpp), in
// f32 (f64 for f64 tensors).
//
// Every kernel is a template over its tensors' accessors (device_math.cuh): Typed<T> for the
// element type mixes of UniformTypes, ConvertTypes and AdamWTypes, chosen once per call on the
// host (run_typed), and Ref for any other mix, or for all with KINTSUGI_TYPED_KERNELS=0. Typed,
// GELU backward takes 32 registers and no stack instead of 72 and a 32-byte frame, add 29-32
// instead of 70, AdamW 60-64 instead of 155 (ptxas -v, sm_90).
#include "kintsugi/backend/cuda/device_math.cuh"
#include "kintsugi/backend/cuda/multi_tensor.cuh"

namespace kintsugi::cuda {

namespace {

// The tensors of an elementwise map, each a Ref or a Typed<T> (device_math.cuh), so that one
// kernel takes tensors of different types (AdamW's f32 moments with a bf16 gradient).
template <class... R>
struct Refs;
template <>
struct Refs<> {};
template <class H, class... T>
struct Refs<H, T...> {
  H head;
  Refs<T...> rest;
};
template <class R>
struct RefCount;
template <class... R>
struct RefCount<Refs<R...>> {
  static constexpr int value = sizeof...(R);
};
// Built on the host for map_kernel's arguments, on the device by adamw_multi_kernel.
__host__ __device__ inline Refs<> refs() { return {}; }
template <class H, class... T>
__host__ __device__ Refs<H, T...> refs(H head, T... rest) {
  return {head, refs(rest...)};
}
template <class... R>
bool aligned16(const Refs<R...>& r) {  // null tensors aside, as aligned16({...})
  if constexpr (sizeof...(R) == 0)
    return true;
  else
    return reinterpret_cast<std::uintptr_t>(r.head.data) % 16 == 0 && aligned16(r.rest);
}

// Tensor K of `r` onwards: x[K] = the run of 8 (or the element) at c, or stored from y[K]
// unless the tensor is absent (null).
template <int K, class Acc, int N, class... R>
__device__ __forceinline__ void load8_each(const Refs<R...>& r, std::int64_t c, Acc (&x)[N][8]) {
  if constexpr (sizeof...(R) > 0) {
    load8(r.head, c, x[K]);
    load8_each<K + 1>(r.rest, c, x);
  }
}
template <int K, class Acc, int M, class... R>
__device__ __forceinline__ void store8_each(const Refs<R...>& r, std::int64_t c,
                                            const Acc (&y)[M][8]) {
  if constexpr (sizeof...(R) > 0) {
    if (r.head.data) store8(r.head, c, y[K]);
    store8_each<K + 1>(r.rest, c, y);
  }
}
template <int K, class Acc, int N, class... R>
__device__ __forceinline__ void load_each(const Refs<R...>& r, std::int64_t i, Acc (&x)[N]) {
  if constexpr (sizeof...(R) > 0) {
    x[K] = load<Acc>(r.head, i);
    load_each<K + 1>(r.rest, i, x);
  }
}
template <int K, class Acc, int M, class... R>
__device__ __forceinline__ void store_each(const Refs<R...>& r, std::int64_t i,
                                           const Acc (&y)[M]) {
  if constexpr (sizeof...(R) > 0) {
    if (r.head.data) store(r.head, i, y[K]);
    store_each<K + 1>(r.rest, i, y);
  }
}

// y = op(x) on elements [begin, end) of the tensors, this thread taking the runs and elements
// first, first + step, ...: whole runs of 8 elements through load8/store8 when every tensor is
// aligned16 (`vec`; begin a multiple of 8), the rest one by one. A thread reads all of its
// elements before it writes any, so outputs may alias inputs element for element.
template <class Acc, class In, class Out, class Op>
__device__ __forceinline__ void map_range(const In& in, const Out& out, std::int64_t begin,
                                          std::int64_t end, bool vec, std::int64_t first,
                                          std::int64_t step, const Op& op) {
  constexpr int N = RefCount<In>::value, M = RefCount<Out>::value;
  const std::int64_t whole = vec ? begin + (end - begin) / 8 * 8 : begin;
  for (std::int64_t c = begin + first * 8; c < whole; c += step * 8) {
    Acc x[N][8], y[M][8];
    load8_each<0>(in, c, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      Acc xi[N], yi[M];
#pragma unroll
      for (int k = 0; k < N; ++k) xi[k] = x[k][e];
      op(xi, yi);
#pragma unroll
      for (int k = 0; k < M; ++k) y[k][e] = yi[k];
    }
    store8_each<0>(out, c, y);
  }
  for (std::int64_t i = whole + first; i < end; i += step) {
    Acc xi[N], yi[M];
    load_each<0>(in, i, xi);
    op(xi, yi);
    store_each<0>(out, i, yi);
  }
}

// y = op(x) on n elements, grid-stride.
template <class Acc, class In, class Out, class Op>
__global__ void map_kernel(In in, Out out, std::int64_t n, bool vec, Op op) {
  map_range<Acc>(in, out, 0, n, vec, global_index(), global_stride(), op);
}

template <class Acc>
struct AddOp {
  __device__ void operator()(const Acc (&x)[2], Acc (&y)[1]) const { y[0] = x[0] + x[1]; }
};
template <class Acc>
struct ScaleOp {
  double factor;  // rounded to Acc, as the CPU kernel rounds it
  __device__ void operator()(const Acc (&x)[1], Acc (&y)[1]) const {
    y[0] = x[0] * static_cast<Acc>(factor);
  }
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

// a * b + c rounded once, written out where bits must not depend on how the compiler contracts
// a product and a sum (which differs between kernels that inline the same operator).
__device__ __forceinline__ float fma_acc(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fma_acc(double a, double b, double c) { return fma(a, b, c); }

// (param, grad, m, v) -> (m, v, param, working copy). Every product-and-sum is an explicit fused
// multiply-add, so the single-range and the many-range kernels, which inline this operator in
// different code, give the same bits (the compiler contracted them differently in f64).
template <class Acc>
struct AdamWOp {
  AdamWConstants k;
  __device__ void operator()(const Acc (&x)[4], Acc (&y)[4]) const {
    const Acc b1 = static_cast<Acc>(k.b1), b2 = static_cast<Acc>(k.b2);
    const Acc g = x[1] * static_cast<Acc>(k.grad_scale);
    const Acc mi = fma_acc(b1, x[2], (Acc(1) - b1) * g);
    const Acc vi = fma_acc(b2, x[3], (Acc(1) - b2) * g * g);
    const Acc denominator =
        fma_acc(sqrt_acc(vi), static_cast<Acc>(k.inv_sqrt_bc2), static_cast<Acc>(k.eps));
    const Acc p = fma_acc(x[0], static_cast<Acc>(k.decay),
                          -(static_cast<Acc>(k.step_size) * mi / denominator));
    y[0] = mi;
    y[1] = vi;
    y[2] = p;
    y[3] = p;
  }
};

// (param, grad, m) -> (m, param, working copy): Lion (backend.hpp), in the CPU kernel's order
// of operations (backend/cpu/lion.cpp).
template <class Acc>
struct LionOp {
  LionConstants k;
  __device__ void operator()(const Acc (&x)[3], Acc (&y)[3]) const {
    const Acc b1 = static_cast<Acc>(k.b1), b2 = static_cast<Acc>(k.b2);
    const Acc g = x[1] * static_cast<Acc>(k.grad_scale);
    const Acc c = b1 * x[2] + (Acc(1) - b1) * g;
    const Acc sign = static_cast<Acc>((c > Acc(0)) - (c < Acc(0)));  // sign(0) = 0
    const Acc p = x[0] * static_cast<Acc>(k.decay) - static_cast<Acc>(k.lr) * sign;
    y[0] = b2 * x[2] + (Acc(1) - b2) * g;
    y[1] = p;
    y[2] = p;
  }
};

// ---- AdamW over many ranges (kernels.hpp, "many flat ranges"). Each block updates a slice of
// kAdamWPerBlock elements of one range, as map_kernel would (runs of 8 from the range's start
// when all its tensors are aligned16), with the constants of its range's decay setting.
constexpr std::int64_t kAdamWPerBlock = 8192;  // 4 runs of 8 per thread of 256

struct AdamWEntry {  // 64 bytes, no padding (multi_tensor.cuh)
  void *param, *grad, *m, *v, *working_copy;
  std::int64_t n, first_block;
  std::int32_t decay, vec;
};

template <class P, class G, class W>
__global__ void adamw_multi_kernel(Table<AdamWEntry> table, AdamWConstants decay,
                                   AdamWConstants plain) {
  using Acc = acc_t<P>;
  const std::int64_t block = blockIdx.x;
  const AdamWEntry e = entry_of_block(table, block);
  const std::int64_t begin = (block - e.first_block) * kAdamWPerBlock;
  const std::int64_t end = smaller(begin + kAdamWPerBlock, e.n);
  const Typed<P> param{static_cast<P*>(e.param), e.n}, m{static_cast<P*>(e.m), e.n},
      v{static_cast<P*>(e.v), e.n};
  const Typed<G> grad{static_cast<G*>(e.grad), e.n};
  const Typed<W> copy{static_cast<W*>(e.working_copy), e.working_copy ? e.n : 0};
  map_range<Acc>(refs(param, grad, m, v), refs(m, v, param, copy), begin, end, e.vec != 0,
                 threadIdx.x, blockDim.x, AdamWOp<Acc>{e.decay ? decay : plain});
}

template <class Acc, class In, class Out, class Op>
void launch_map_as(const char* name, const In& in, const Out& out, std::int64_t n, Op op,
                   cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = aligned16(in) && aligned16(out);
  auto* kernel = map_kernel<Acc, In, Out, Op>;
  KINTSUGI_CUDA_LAUNCH(kernel, grid_for((n + 7) / 8), kThreads, 0, stream, in, out, n, vec, op);
  check_launch(name, stream);
}

// The generic kernels (Refs of Refs): Op<double> when `f64`, else Op<float>; args build the op.
template <template <class> class Op, class In, class Out, class... Args>
void launch_map(const char* name, const In& in, const Out& out, std::int64_t n, bool f64,
                cudaStream_t stream, Args... args) {
  if (f64)
    launch_map_as<double>(name, in, out, n, Op<double>{args...}, stream);
  else
    launch_map_as<float>(name, in, out, n, Op<float>{args...}, stream);
}

// x[r, c] += bias[c]: runs of 8 when a row is a whole number of them.
template <class Acc, class R>
__global__ void add_bias_kernel(R x, R bias, std::int64_t rows, std::int64_t cols, bool vec) {
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

// One thread per (token row, rotation pair): the angle in f64 from the host's table
// (backend/rotary.hpp) as on the host, rounded once, then every query and key head of the row
// rotated by it.
template <class Acc, class R>
__global__ void rope_kernel(AttnShape s, R qkv, const double* inv_freq, double scale,
                            double sign) {
  const std::int64_t hd = s.head_dim, half = hd / 2, slots = s.heads / s.kv_heads + 2;
  const std::int64_t width = s.kv_heads * slots * hd, n = s.batch * s.seq * half;
  for (std::int64_t idx = global_index(); idx < n; idx += global_stride()) {
    const std::int64_t r = idx / half, i = idx % half;
    const std::int64_t t = r % s.seq;  // with documents, the position within its document
    const std::int64_t position = s.doc_start ? t - s.doc_start[r] : s.first_position + t;
    const double angle = static_cast<double>(position) * inv_freq[i];
    const Acc c = static_cast<Acc>(scale * cos(angle)), sn = static_cast<Acc>(sign * scale * sin(angle));
    for (std::int64_t kv = 0; kv < s.kv_heads; ++kv)
      for (std::int64_t slot = 0; slot + 1 < slots; ++slot) {  // the queries and the key
        const std::int64_t at = r * width + (kv * slots + slot) * hd + i;
        const Acc x1 = load<Acc>(qkv, at), x2 = load<Acc>(qkv, at + half);
        store(qkv, at, x1 * c - x2 * sn);
        store(qkv, at + half, x2 * c + x1 * sn);
      }
  }
}

// A map's inputs and outputs.
template <class In, class Out>
struct Io {
  In in;
  Out out;
};
template <class In, class Out>
Io<In, Out> io(In in, Out out) {
  return {in, out};
}
// What make(as) of map() turns each Ref into: itself (the generic kernels) or a Typed<T>.
struct AsRef {
  Ref operator()(const Ref& r) const { return r; }
};
template <class T>
struct AsTyped {
  Typed<T> operator()(const Ref& r) const { return typed<T>(r); }
};

// Op over n elements of tensors that all have one type: the typed kernel when they have one of
// UniformTypes, else the generic one. make(as) gives the Io of the tensors as `as` makes them.
template <template <class> class Op, class Make, class... Args>
void map(const char* name, Role tensors, std::int64_t n, cudaStream_t stream, Make make,
         Args... args) {
  if (n <= 0) return;
  if (run_typed(UniformTypes{}, {tensors}, [&](auto combo) {
        using T = type_at<0, decltype(combo)>;
        const auto m = make(AsTyped<T>{});
        launch_map_as<acc_t<T>>(name, m.in, m.out, n, Op<acc_t<T>>{args...}, stream);
      }))
    return;
  const auto m = make(AsRef{});
  launch_map<Op>(name, m.in, m.out, n, all_f64(tensors), stream, args...);
}

template <class Acc, class R>
void launch_add_bias(R x, R bias, std::int64_t rows, std::int64_t cols, bool vec,
                     cudaStream_t stream) {
  const std::int64_t n = rows * cols;
  auto* kernel = add_bias_kernel<Acc, R>;
  KINTSUGI_CUDA_LAUNCH(kernel, grid_for(vec ? n / 8 : n), kThreads, 0, stream, x, bias, rows, cols,
                       vec);
  check_launch("add_bias_kernel", stream);
}

template <class Acc, class R>
void launch_rope(const AttnShape& s, R qkv, const double* inv_freq, double scale, bool inverse,
                 cudaStream_t stream) {
  const std::int64_t n = s.batch * s.seq * (s.head_dim / 2);
  auto* kernel = rope_kernel<Acc, R>;
  KINTSUGI_CUDA_LAUNCH(kernel, grid_for(n), kThreads, 0, stream, s, qkv, inv_freq, scale,
                       inverse ? -1.0 : 1.0);
  check_launch("rope_kernel", stream);
}

// convert's typed pairs: f32 master weights to their 16-bit working copies and back, and
// between the 16-bit types. f64 on either side goes to the generic kernel, in f64.
using ConvertTypes =
    Combos<Combo<float, bf16_t>, Combo<float, f16_t>, Combo<bf16_t, float>, Combo<f16_t, float>,
           Combo<bf16_t, f16_t>, Combo<f16_t, bf16_t>>;
// AdamW's (param, m and v; grad; working copy): f32 master weights and moments with the
// gradient in f32 or in the weights' 16-bit type, and a working copy (or none) in the weights'
// type (optim/adamw.cpp, parallel/sharded_state.cpp); all f64 in gradient checks.
using AdamWTypes =
    Combos<Combo<float, float, float>, Combo<float, float, bf16_t>, Combo<float, bf16_t, bf16_t>,
           Combo<float, float, f16_t>, Combo<float, f16_t, f16_t>, Combo<double, double, double>>;

}  // namespace

void add(Ref a, Ref b, Ref out, std::int64_t n, cudaStream_t stream) {
  map<AddOp>("add", {a, b, out}, n, stream,
             [&](auto as) { return io(refs(as(a), as(b)), refs(as(out))); });
}

void add_bias(Ref x, Ref bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows * cols <= 0) return;
  const bool vec = cols % 8 == 0 && aligned16({x, bias});
  if (run_typed(UniformTypes{}, {{x, bias}}, [&](auto combo) {
        using T = type_at<0, decltype(combo)>;
        launch_add_bias<acc_t<T>>(typed<T>(x), typed<T>(bias), rows, cols, vec, stream);
      }))
    return;
  with_acc({x, bias}, [&](auto acc) {
    launch_add_bias<decltype(acc)>(x, bias, rows, cols, vec, stream);
  });
}

void scale(Ref x, std::int64_t n, double factor, cudaStream_t stream) {
  map<ScaleOp>("scale", {x}, n, stream, [&](auto as) { return io(refs(as(x)), refs(as(x))); },
               factor);
}

void convert(Ref src, Ref dst, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (run_typed(ConvertTypes{}, {{src}, {dst}}, [&](auto combo) {
        using S = type_at<0, decltype(combo)>;
        using D = type_at<1, decltype(combo)>;
        launch_map_as<float>("convert", refs(typed<S>(src)), refs(typed<D>(dst)), n,
                             ConvertOp<float>{}, stream);
      }))
    return;
  // f64 on either side converts in f64 (f64 to 16 bits then rounds through f32, as on the host).
  launch_map<ConvertOp>("convert", refs(src), refs(dst), n,
                        src.dtype == DType::f64 || dst.dtype == DType::f64, stream);
}

void gelu_forward(Ref x, Ref y, std::int64_t n, cudaStream_t stream) {
  map<GeluForwardOp>("gelu_forward", {x, y}, n, stream,
                     [&](auto as) { return io(refs(as(x)), refs(as(y))); });
}

void gelu_backward(Ref x, Ref dy, Ref dx, std::int64_t n, cudaStream_t stream) {
  map<GeluBackwardOp>("gelu_backward", {x, dy, dx}, n, stream,
                      [&](auto as) { return io(refs(as(x), as(dy)), refs(as(dx))); });
}

void swiglu_forward(Ref gate, Ref up, Ref y, std::int64_t n, cudaStream_t stream) {
  map<SwigluForwardOp>("swiglu_forward", {gate, up, y}, n, stream,
                       [&](auto as) { return io(refs(as(gate), as(up)), refs(as(y))); });
}

void swiglu_backward(Ref gate, Ref up, Ref dy, Ref dgate, Ref dup, std::int64_t n,
                     cudaStream_t stream) {
  map<SwigluBackwardOp>("swiglu_backward", {gate, up, dy, dgate, dup}, n, stream, [&](auto as) {
    return io(refs(as(gate), as(up), as(dy)), refs(as(dgate), as(dup)));
  });
}

void rope(const AttnShape& s, Ref qkv, const double* inv_freq, double scale, bool inverse,
          cudaStream_t stream) {
  if (s.batch * s.seq * (s.head_dim / 2) <= 0) return;
  if (run_typed(UniformTypes{}, {{qkv}}, [&](auto combo) {
        using T = type_at<0, decltype(combo)>;
        launch_rope<acc_t<T>>(s, typed<T>(qkv), inv_freq, scale, inverse, stream);
      }))
    return;
  with_acc({qkv}, [&](auto acc) {
    launch_rope<decltype(acc)>(s, qkv, inv_freq, scale, inverse, stream);
  });
}

void adamw_step(Ref param, Ref grad, Ref m, Ref v, Ref working_copy, std::int64_t n,
                const AdamWConstants& k, cudaStream_t stream) {
  if (n <= 0) return;
  if (run_typed(AdamWTypes{}, {{param, m, v}, {grad}, {working_copy}}, [&](auto combo) {
        using P = type_at<0, decltype(combo)>;
        using G = type_at<1, decltype(combo)>;
        using W = type_at<2, decltype(combo)>;
        launch_map_as<acc_t<P>>(
            "adamw", refs(typed<P>(param), typed<G>(grad), typed<P>(m), typed<P>(v)),
            refs(typed<P>(m), typed<P>(v), typed<P>(param), typed<W>(working_copy)), n,
            AdamWOp<acc_t<P>>{k}, stream);
      }))
    return;
  launch_map<AdamWOp>("adamw", refs(param, grad, m, v), refs(m, v, param, working_copy), n,
                      all_f64({param, grad, m, v}), stream, k);
}

void lion_step(Ref param, Ref grad, Ref m, Ref working_copy, std::int64_t n,
               const LionConstants& k, cudaStream_t stream) {
  if (n <= 0) return;
  // AdamW's type combinations: Lion keeps its weights and moment as AdamW does.
  if (run_typed(AdamWTypes{}, {{param, m}, {grad}, {working_copy}}, [&](auto combo) {
        using P = type_at<0, decltype(combo)>;
        using G = type_at<1, decltype(combo)>;
        using W = type_at<2, decltype(combo)>;
        launch_map_as<acc_t<P>>("lion", refs(typed<P>(param), typed<G>(grad), typed<P>(m)),
                                refs(typed<P>(m), typed<P>(param), typed<W>(working_copy)), n,
                                LionOp<acc_t<P>>{k}, stream);
      }))
    return;
  launch_map<LionOp>("lion", refs(param, grad, m), refs(m, param, working_copy), n,
                     all_f64({param, grad, m}), stream, k);
}

bool adamw_step_multi(const AdamWRangeRef* ranges, std::int64_t count,
                      const AdamWConstants& decay, const AdamWConstants& plain,
                      TableCache& tables, cudaStream_t stream) {
  if (count <= 0) return true;
  // One kernel takes one mix of types: every range's (param, m, v), grad and working copy.
  const AdamWRangeRef& a = ranges[0];
  Ref copy;
  for (std::int64_t i = 0; i < count && !copy.data; ++i) copy = ranges[i].working_copy;
  std::vector<AdamWEntry> entries;
  std::int64_t blocks = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const AdamWRangeRef& r = ranges[i];
    const DType p = a.param.dtype;
    if (r.param.dtype != p || r.m.dtype != p || r.v.dtype != p || r.grad.dtype != a.grad.dtype ||
        (r.working_copy.data && r.working_copy.dtype != copy.dtype))
      return false;
    const std::int64_t n = r.param.count;
    if (n <= 0) continue;
    entries.push_back(AdamWEntry{
        r.param.data, r.grad.data, r.m.data, r.v.data, r.working_copy.data, n, blocks,
        r.decay ? 1 : 0, aligned16({r.param, r.grad, r.m, r.v, r.working_copy}) ? 1 : 0});
    blocks += blocks_for(n, kAdamWPerBlock);
  }
  if (entries.empty()) return true;
  return run_typed(AdamWTypes{}, {{a.param, a.m, a.v}, {a.grad}, {copy}}, [&](auto combo) {
    using P = type_at<0, decltype(combo)>;
    using G = type_at<1, decltype(combo)>;
    using W = type_at<2, decltype(combo)>;
    auto* kernel = adamw_multi_kernel<P, G, W>;
    const Table<AdamWEntry> table = upload(entries, tables);
    KINTSUGI_CUDA_LAUNCH(kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, table, decay,
                         plain);
    check_launch("adamw_multi_kernel", stream);
  });
}

}  // namespace kintsugi::cuda
