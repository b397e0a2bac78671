#pragma once
// Device-side building blocks shared by the kernels: loads and stores through a Ref (a switch
// over the element type at run time) or a Typed<T> (the type fixed at compile time), the host's
// choice between them, launch geometry, and block reductions whose order is fixed by the thread
// layout (deterministic).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "kintsugi/backend/cuda/cuda_check.hpp"
#include "kintsugi/backend/cuda/kernels.hpp"
#include "kintsugi/backend/cuda/typed_kernels.hpp"

// Kernel launches and dynamic shared memory go through these two names so that the same kernels
// also run on the CPU under the test suite's CUDA emulator (tests/cuda_emulator), which defines
// both before this header.
#ifndef KINTSUGI_CUDA_LAUNCH
#define KINTSUGI_CUDA_LAUNCH(kernel, grid, block, shared, stream, ...) \
  kernel<<<grid, block, shared, stream>>>(__VA_ARGS__)
template <class T>
__device__ __forceinline__ T* dynamic_shared() {
  extern __shared__ __align__(16) unsigned char dynamic_shared_bytes[];
  return reinterpret_cast<T*>(dynamic_shared_bytes);
}
#endif

namespace kintsugi::cuda {

// The emulator checks that i indexes inside the Ref; on the GPU this costs nothing.
#ifndef KINTSUGI_CUDA_CHECK_INDEX
#define KINTSUGI_CUDA_CHECK_INDEX(ref, i)
#endif

template <class Acc>
__device__ __forceinline__ Acc load(const Ref& r, std::int64_t i) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  switch (r.dtype) {
    case DType::f32:
      return static_cast<Acc>(static_cast<const float*>(r.data)[i]);
    case DType::f64:
      return static_cast<Acc>(static_cast<const double*>(r.data)[i]);
    case DType::bf16:
      return static_cast<Acc>(__bfloat162float(static_cast<const __nv_bfloat16*>(r.data)[i]));
    case DType::f16:
      return static_cast<Acc>(__half2float(static_cast<const __half*>(r.data)[i]));
    default:
      return Acc(0);
  }
}

// Rounds to nearest even into the Ref's type (f64 values bound for 16 bits go through f32, as
// on the host).
template <class Acc>
__device__ __forceinline__ void store(const Ref& r, std::int64_t i, Acc v) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  switch (r.dtype) {
    case DType::f32:
      static_cast<float*>(r.data)[i] = static_cast<float>(v);
      return;
    case DType::f64:
      static_cast<double*>(r.data)[i] = static_cast<double>(v);
      return;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(r.data)[i] = __float2bfloat16_rn(static_cast<float>(v));
      return;
    case DType::f16:
      static_cast<__half*>(r.data)[i] = __float2half_rn(static_cast<float>(v));
      return;
    default:
      return;
  }
}

// ---- eight elements at a time. Memory-bound kernels move 16 bytes per access where they can:
// with one 16-bit element per thread and access, LayerNorm forward moved about 1 TB/s on an
// H200 (by our count of its bytes), a fifth of the memory's 4.8 TB/s.
__device__ __forceinline__ uint4 load16(const void* p) {
#ifdef __CUDA_ARCH__
  return *static_cast<const uint4*>(p);
#else
  uint4 v;
  std::memcpy(&v, p, sizeof v);  // the emulator: C++ wants its copies spelled out
  return v;
#endif
}
__device__ __forceinline__ void store16(void* p, uint4 v) {
#ifdef __CUDA_ARCH__
  *static_cast<uint4*>(p) = v;
#else
  std::memcpy(p, &v, sizeof v);
#endif
}

// Whether 8-element accesses may be used: every Ref given (null ones aside) starts at a
// 16-byte boundary, so elements i..i+7 with i a multiple of 8 are one aligned run.
inline bool aligned16(std::initializer_list<Ref> refs) {
  for (const Ref& r : refs)
    if (r.data && reinterpret_cast<std::uintptr_t>(r.data) % 16 != 0) return false;
  return true;
}

// Elements i..i+7 (i a multiple of 8, the Ref aligned16) as Acc.
template <class Acc>
__device__ __forceinline__ void load8(const Ref& r, std::int64_t i, Acc (&v)[8]) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  KINTSUGI_CUDA_CHECK_INDEX(r, i + 7);
  uint4 w[4];
  const int words = static_cast<int>(size_of(r.dtype)) / 2;  // 16-byte words for 8 elements
  const auto* p = static_cast<const unsigned char*>(r.data) + i * static_cast<std::int64_t>(size_of(r.dtype));
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (q < words) w[q] = load16(p + 16 * q);
  switch (r.dtype) {
    case DType::f32: {
      float f[8];
      std::memcpy(f, w, sizeof f);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = static_cast<Acc>(f[e]);
      return;
    }
    case DType::f64: {
      double d[8];
      std::memcpy(d, w, sizeof d);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = static_cast<Acc>(d[e]);
      return;
    }
    case DType::bf16: {
      __nv_bfloat16 h[8];
      std::memcpy(h, w, sizeof h);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = static_cast<Acc>(__bfloat162float(h[e]));
      return;
    }
    case DType::f16: {
      __half h[8];
      std::memcpy(h, w, sizeof h);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = static_cast<Acc>(__half2float(h[e]));
      return;
    }
    default:
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = Acc(0);
  }
}

// Elements i..i+7 rounded to the Ref's type, as store() rounds them.
template <class Acc>
__device__ __forceinline__ void store8(const Ref& r, std::int64_t i, const Acc (&v)[8]) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  KINTSUGI_CUDA_CHECK_INDEX(r, i + 7);
  uint4 w[4];
  switch (r.dtype) {
    case DType::f32: {
      float f[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = static_cast<float>(v[e]);
      std::memcpy(w, f, sizeof f);
      break;
    }
    case DType::f64: {
      double d[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) d[e] = static_cast<double>(v[e]);
      std::memcpy(w, d, sizeof d);
      break;
    }
    case DType::bf16: {
      __nv_bfloat16 h[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) h[e] = __float2bfloat16_rn(static_cast<float>(v[e]));
      std::memcpy(w, h, sizeof h);
      break;
    }
    case DType::f16: {
      __half h[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) h[e] = __float2half_rn(static_cast<float>(v[e]));
      std::memcpy(w, h, sizeof h);
      break;
    }
    default:
      return;
  }
  const int words = static_cast<int>(size_of(r.dtype)) / 2;
  auto* p = static_cast<unsigned char*>(r.data) + i * static_cast<std::int64_t>(size_of(r.dtype));
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (q < words) store16(p + 16 * q, w[q]);
}

// ---- typed access. A Typed<T> is a Ref whose element type T (float, double, __nv_bfloat16,
// __half) is fixed at compile time: each load or store is one instruction, a run of 8 elements
// one to four 16-byte accesses. Through a Ref every access switches over four types at run time:
// with it the memory-bound kernels took 56 to 176 registers and a 32-byte stack frame (ptxas -v,
// sm_90; GELU backward 72, LayerNorm's dx 127, AdamW 155), which capped their occupancy and
// their bandwidth (docs/gpu.md). Kernels are templates over the accessor (Ref or Typed<T>): one
// source serves both, the host picks (run_typed, below).
template <class T>
struct Typed {
  T* data = nullptr;
  std::int64_t count = 0;  // as Ref::count: bounds under the emulator
};
template <class T>
inline Typed<T> typed(const Ref& r) {
  return {static_cast<T*>(r.data), r.count};
}
// Whether accessor R is a Typed<T>: paths that only typed kernels take are compiled out of the
// generic ones, which then keep their old code and registers.
template <class R>
constexpr bool is_typed = !std::is_same_v<R, Ref>;

// To the accumulator type and back, rounding as load() and store() do.
template <class Acc, class T>
__device__ __forceinline__ Acc widen(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return static_cast<Acc>(__bfloat162float(v));
  else if constexpr (std::is_same_v<T, __half>)
    return static_cast<Acc>(__half2float(v));
  else
    return static_cast<Acc>(v);
}
template <class T, class Acc>
__device__ __forceinline__ T narrow(Acc v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <class Acc, class T>
__device__ __forceinline__ Acc load(const Typed<T>& r, std::int64_t i) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  return widen<Acc>(r.data[i]);
}
template <class Acc, class T>
__device__ __forceinline__ void store(const Typed<T>& r, std::int64_t i, Acc v) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  r.data[i] = narrow<T>(v);
}
template <class Acc, class T>
__device__ __forceinline__ void load8(const Typed<T>& r, std::int64_t i, Acc (&v)[8]) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  KINTSUGI_CUDA_CHECK_INDEX(r, i + 7);
  constexpr int kWords = static_cast<int>(sizeof(T)) / 2;  // 16-byte words of 8 elements
  uint4 w[kWords];
#pragma unroll
  for (int q = 0; q < kWords; ++q) w[q] = load16(r.data + i + q * (8 / kWords));
  T e[8];
  std::memcpy(e, w, sizeof e);
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = widen<Acc>(e[k]);
}
template <class Acc, class T>
__device__ __forceinline__ void store8(const Typed<T>& r, std::int64_t i, const Acc (&v)[8]) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  KINTSUGI_CUDA_CHECK_INDEX(r, i + 7);
  constexpr int kWords = static_cast<int>(sizeof(T)) / 2;
  T e[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) e[k] = narrow<T>(v[k]);
  uint4 w[kWords];
  std::memcpy(w, e, sizeof e);
#pragma unroll
  for (int q = 0; q < kWords; ++q) store16(r.data + i + q * (8 / kWords), w[q]);
}

// A run of K consecutive elements (K = 8: load8/store8; K = 1: load/store), through a Ref or a
// Typed<T>.
template <int K>
struct Run {
  static constexpr int size = K;
};
template <int K, class Acc, class R>
__device__ __forceinline__ void load_run(const R& r, std::int64_t i, Acc (&v)[K]) {
  if constexpr (K == 8)
    load8(r, i, v);
  else
    v[0] = load<Acc>(r, i);
}
template <int K, class Acc, class R>
__device__ __forceinline__ void store_run(const R& r, std::int64_t i, const Acc (&v)[K]) {
  if constexpr (K == 8)
    store8(r, i, v);
  else
    store(r, i, v[0]);
}

// Visits elements 0..n-1 of a row shared by `step` threads, this one being `first`: runs of 8
// (at 8 first, 8 (first + step), ...) up to the last whole run when `vec`, then single elements.
// body(Run<K>{}, c) handles elements c..c+K-1.
template <class Body>
__device__ __forceinline__ void walk(bool vec, std::int64_t n, int first, int step, Body body) {
  const std::int64_t whole = vec ? n / 8 * 8 : 0;
  for (std::int64_t c = 8 * static_cast<std::int64_t>(first); c < whole; c += 8 * step)
    body(Run<8>{}, c);
  for (std::int64_t c = whole + first; c < n; c += step) body(Run<1>{}, c);
}

template <class T>
__host__ __device__ __forceinline__ T smaller(T a, T b) {
  return a < b ? a : b;
}

__device__ __forceinline__ float exp_acc(float x) { return expf(x); }
__device__ __forceinline__ double exp_acc(double x) { return exp(x); }
__device__ __forceinline__ float log_acc(float x) { return logf(x); }
__device__ __forceinline__ double log_acc(double x) { return log(x); }
__device__ __forceinline__ float sqrt_acc(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_acc(double x) { return sqrt(x); }
__device__ __forceinline__ float tanh_acc(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_acc(double x) { return tanh(x); }

template <class Acc>
__device__ __forceinline__ Acc neg_infinity() {
  return -static_cast<Acc>(INFINITY);
}

// Grid-stride loops: blocks of 256 threads, at most kMaxBlocks blocks (each thread then takes
// several elements).
constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;
inline unsigned grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}
__device__ __forceinline__ std::int64_t global_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t global_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

// ---- the host's choice of kernel. A Combo lists one element type per role of an op's tensors
// (activations and weights, statistics, parameter gradients...); an op names the Combos it is
// compiled for, and run_typed calls f(Combo{}) with the first whose types the tensors have.
template <class... T>
struct Combo {};
template <class... C>
struct Combos {};

template <int K, class C>
struct TypeAt;
template <class H, class... T>
struct TypeAt<0, Combo<H, T...>> {
  using type = H;
};
template <int K, class H, class... T>
struct TypeAt<K, Combo<H, T...>> : TypeAt<K - 1, Combo<T...>> {};
// The type of role K of a Combo.
template <int K, class C>
using type_at = typename TypeAt<K, C>::type;

// Arithmetic in double for f64 tensors (the backend never mixes f64 with other types), else in
// float.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return DType::bf16;
  else
    return DType::f16;
}

// The tensors of one role (null Refs, absent tensors, match any type).
using Role = std::initializer_list<Ref>;
template <class... T>
bool has_types(Combo<T...>, std::initializer_list<Role> roles) {
  const DType want[] = {dtype_of<T>()...};
  if (roles.size() != sizeof...(T)) return false;
  int k = 0;
  for (const Role& role : roles) {
    for (const Ref& r : role)
      if (r.data && r.dtype != want[k]) return false;
    ++k;
  }
  return true;
}

// Runs f(Combo{}) for the first of `combos` whose types the roles' tensors have, and returns
// true; false when none has them or typed kernels are off (typed_kernels.hpp): the caller then
// launches its generic kernels, which take every mix the Backend contract allows.
template <class... C, class F>
bool run_typed(Combos<C...>, std::initializer_list<Role> roles, F&& f) {
  if (!typed_kernels()) return false;
  return ((has_types(C{}, roles) ? (f(C{}), true) : false) || ...);
}

using bf16_t = __nv_bfloat16;
using f16_t = __half;
// Every tensor of the op of one type: what the model's activations pass (add, GELU, SwiGLU,
// RoPE, bias, embeddings), all f32, bf16, f16 or f64.
using UniformTypes = Combos<Combo<float>, Combo<bf16_t>, Combo<f16_t>, Combo<double>>;
// (16-bit or f32 values, their gradients' sums): f32 gradients of bf16 or f16 activations
// (train.grad_precision "fp32", the default), gradients in the weights' type ("param"), and the
// uniform mixes (docs/config.md; core/precision.hpp).
using ValueGradTypes =
    Combos<Combo<float, float>, Combo<bf16_t, float>, Combo<f16_t, float>, Combo<bf16_t, bf16_t>,
           Combo<f16_t, f16_t>, Combo<double, double>>;

// True when every Ref given is f64: those ops compute in double.
inline bool all_f64(std::initializer_list<Ref> refs) {
  for (const Ref& r : refs)
    if (r.data && r.dtype != DType::f64) return false;
  return true;
}

// The untyped path's accumulator type: f(double{}) when every Ref given is f64, else f(float{}),
// so the one call in f, with decltype(acc) as Acc, is written once.
template <class F>
void with_acc(std::initializer_list<Ref> refs, F&& f) {
  if (all_f64(refs))
    f(double{});
  else
    f(float{});
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 values. The order is fixed: lanes within warps, then warps in order.
template <class T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : T(0);
  return warp_sum(v);
}
template <class T>
__device__ T block_max(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -static_cast<T>(INFINITY);
  return warp_max(v);
}

// Threads for a block that walks one row of `cols` elements: a power of two from 32 to 512.
inline int row_threads(std::int64_t cols) {
  int t = 32;
  while (t < 512 && t < cols) t *= 2;
  return t;
}

}  // namespace kintsugi::cuda
