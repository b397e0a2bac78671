#pragma once
// Warp-level tensor-core products for the attention kernels: mma.sync m16n8k16 with 16-bit
// inputs (bf16 or f16) and f32 accumulators, and the fragment loads (ldmatrix) from shared
// memory tiles of 16-bit elements.
//
// Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4 g + t.
//   A (16 x 16, row-major): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
//                           a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8):             b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, f32):     c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1]
// Each 32-bit register holds two elements, the lower index in the low half. The accumulator
// layout of two neighbouring 8-column products is the A layout of one 16-deep product, which is
// how attention feeds its probabilities to the next product without leaving registers.
//
// On the GPU a product and a fragment load are one instruction each. Under the test suite's CPU
// emulator the product is computed from the fragments each lane gathers from its neighbours
// with shuffles, in f32, and ldmatrix reads the rows whose addresses the lanes exchange, so the
// same kernels (and their fragment bookkeeping) run and are checked without a GPU.
#include <cstdint>
#include <cstring>

#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda::tc {

// The two 16-bit input types: their bits from f32 (round to nearest even) and back.
struct Bf16 {
  static constexpr DType dtype = DType::bf16;
  __device__ static std::uint16_t bits(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
  __device__ static float value(std::uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
};
struct F16 {
  static constexpr DType dtype = DType::f16;
  __device__ static std::uint16_t bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
  __device__ static float value(std::uint16_t b) { return __half2float(__ushort_as_half(b)); }
};

// Two values rounded and packed into one fragment register (lo in the low half).
template <class E>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  return static_cast<std::uint32_t>(E::bits(lo)) | static_cast<std::uint32_t>(E::bits(hi)) << 16;
}

// The 32-bit word holding elements (row, col) and (row, col + 1) of a tile with row stride ld
// elements (col even, ld even).
__device__ __forceinline__ std::uint32_t word(const std::uint16_t* tile, int ld, int row, int col) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const std::uint32_t*>(tile + row * ld + col);
#else
  std::uint32_t w;
  std::memcpy(&w, tile + row * ld + col, sizeof w);
  return w;
#endif
}

// Stores that word.
__device__ __forceinline__ void put_word(std::uint16_t* tile, int ld, int row, int col,
                                         std::uint32_t w) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<std::uint32_t*>(tile + row * ld + col) = w;
#else
  std::memcpy(tile + row * ld + col, &w, sizeof w);
#endif
}

// ldmatrix: four 8 x 8 matrices of 16-bit elements from shared memory in one instruction. Lane
// 8m + i gives the address of row i of matrix m (16-byte aligned); r[m] receives, in lane
// 4g + t, elements (g, 2t) and (g, 2t + 1) of matrix m, or with `trans` of its transpose:
// elements (2t, g) and (2t + 1, g).
template <bool trans>
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const std::uint16_t* row) {
#ifdef __CUDA_ARCH__
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#else
  // The emulator: each lane fetches the row addresses it needs from the lanes that hold them.
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const auto address_of = [row](int source) {
    const auto bits = static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(row));
    return reinterpret_cast<const std::uint16_t*>(
        static_cast<std::uintptr_t>(__shfl_sync(0xffffffffu, bits, source)));
  };
  for (int m = 0; m < 4; ++m) {
    if constexpr (trans) {
      const std::uint16_t* lo = address_of(8 * m + 2 * t);
      const std::uint16_t* hi = address_of(8 * m + 2 * t + 1);
      r[m] = static_cast<std::uint32_t>(lo[g]) | static_cast<std::uint32_t>(hi[g]) << 16;
    } else {
      r[m] = word(address_of(8 * m + g), 0, 0, 2 * t);
    }
  }
#endif
}

// The A fragment of rows row0..row0+15, depth col0..col0+15 of a row-major tile [M][K].
__device__ __forceinline__ void ldmatrix_a(std::uint32_t (&a)[4], const std::uint16_t* tile,
                                           int ld, int row0, int col0) {
  const int lane = threadIdx.x % 32, m = lane / 8, i = lane % 8;
  ldmatrix_x4<false>(a, tile + (row0 + i + 8 * (m % 2)) * ld + col0 + 8 * (m / 2));
}

// ... or of a tile stored transposed, [K][M] row-major (dS^T, whose rows are keys, as the A of
// dS K), read with ldmatrix's transpose: matrix m holds A rows row0 + 8 (m % 2) on, depth
// col0 + 8 (m / 2) on, i.e. stored rows col0 + 8 (m / 2) + i from column row0 + 8 (m % 2).
__device__ __forceinline__ void ldmatrix_a_trans(std::uint32_t (&a)[4], const std::uint16_t* tile,
                                                 int ld, int row0, int col0) {
  const int lane = threadIdx.x % 32, m = lane / 8, i = lane % 8;
  ldmatrix_x4<true>(a, tile + (col0 + i + 8 * (m / 2)) * ld + row0 + 8 * (m % 2));
}

// B fragments of two neighbouring 8-column products: columns n0..n0+15 (b[0..1] for n0,
// b[2..3] for n0 + 8), depth k0..k0+15, of B stored as a row-major tile [N][K] (B transposed:
// K^T for Q K^T) ...
__device__ __forceinline__ void ldmatrix_b_nk(std::uint32_t (&b)[4], const std::uint16_t* tile,
                                              int ld, int n0, int k0) {
  const int lane = threadIdx.x % 32, m = lane / 8, i = lane % 8;
  ldmatrix_x4<false>(b, tile + (n0 + i + 8 * (m / 2)) * ld + k0 + 8 * (m % 2));
}
// ... or stored as a row-major tile [K][N] (V for P V), read transposed.
__device__ __forceinline__ void ldmatrix_b_kn(std::uint32_t (&b)[4], const std::uint16_t* tile,
                                              int ld, int n0, int k0) {
  const int lane = threadIdx.x % 32, m = lane / 8, i = lane % 8;
  ldmatrix_x4<true>(b, tile + (k0 + i + 8 * (m % 2)) * ld + n0 + 8 * (m / 2));
}

#ifndef __CUDA_ARCH__
// The emulator's product: lane (g, t) gathers rows g and g + 8 of A from lanes 4g..4g+3 and
// columns 2t, 2t+1 of B from lanes 8t..8t+7, then sums over the depth in order.
template <class E>
__device__ inline void mma_emulated(float (&d)[4], const std::uint32_t (&a)[4],
                                    const std::uint32_t (&b)[2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const auto lo = [](std::uint32_t w) { return E::value(static_cast<std::uint16_t>(w & 0xffffu)); };
  const auto hi = [](std::uint32_t w) { return E::value(static_cast<std::uint16_t>(w >> 16)); };
  float rows[2][16], cols[2][16];
  for (int s = 0; s < 4; ++s) {
    const std::uint64_t a01 = __shfl_sync(0xffffffffu, a[0] | std::uint64_t{a[1]} << 32, 4 * g + s);
    const std::uint64_t a23 = __shfl_sync(0xffffffffu, a[2] | std::uint64_t{a[3]} << 32, 4 * g + s);
    const std::uint32_t r[4] = {static_cast<std::uint32_t>(a01), static_cast<std::uint32_t>(a01 >> 32),
                                static_cast<std::uint32_t>(a23), static_cast<std::uint32_t>(a23 >> 32)};
    for (int half = 0; half < 2; ++half) {  // row g (registers 0, 2) and row g + 8 (1, 3)
      rows[half][2 * s] = lo(r[half]);
      rows[half][2 * s + 1] = hi(r[half]);
      rows[half][2 * s + 8] = lo(r[half + 2]);
      rows[half][2 * s + 9] = hi(r[half + 2]);
    }
    for (int c = 0; c < 2; ++c) {
      const std::uint64_t bw =
          __shfl_sync(0xffffffffu, b[0] | std::uint64_t{b[1]} << 32, 4 * (2 * t + c) + s);
      cols[c][2 * s] = lo(static_cast<std::uint32_t>(bw));
      cols[c][2 * s + 1] = hi(static_cast<std::uint32_t>(bw));
      cols[c][2 * s + 8] = lo(static_cast<std::uint32_t>(bw >> 32));
      cols[c][2 * s + 9] = hi(static_cast<std::uint32_t>(bw >> 32));
    }
  }
  for (int i = 0; i < 4; ++i) {
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += rows[i / 2][k] * cols[i % 2][k];
    d[i] = acc;
  }
}
#endif

// d += A B on the tensor cores.
template <class E>
__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4],
                                    const std::uint32_t (&b)[2]) {
#ifdef __CUDA_ARCH__
  if constexpr (E::dtype == DType::bf16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  mma_emulated<E>(d, a, b);
#endif
}

}  // namespace kintsugi::cuda::tc
