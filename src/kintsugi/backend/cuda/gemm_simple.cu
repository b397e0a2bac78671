// A plain tiled GEMM (16 x 16 tiles through shared memory) for any element types: the fallback
// when cuBLASLt offers no algorithm for a shape or alignment, and an independent check of the
// cuBLASLt path in tests. Slow, simple, and deterministic (each output summed in k order).
#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda {

namespace {

constexpr int kTile = 16;

template <class Acc>
__global__ void gemm_simple_kernel(std::int64_t m, std::int64_t n, std::int64_t k, Ref a,
                                   bool trans_a, Ref b, bool trans_b, Ref c, bool accumulate,
                                   Ref bias) {
  __shared__ Acc a_tile[kTile][kTile + 1], b_tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * kTile + ty;
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kTile + tx;
  Acc sum = 0;
  for (std::int64_t k0 = 0; k0 < k; k0 += kTile) {
    // op(A)[row][k0 + tx] and op(B)[k0 + ty][col]
    const std::int64_t ka = k0 + tx, kb = k0 + ty;
    a_tile[ty][tx] =
        row < m && ka < k ? load<Acc>(a, trans_a ? ka * m + row : row * k + ka) : Acc(0);
    b_tile[ty][tx] =
        kb < k && col < n ? load<Acc>(b, trans_b ? col * k + kb : kb * n + col) : Acc(0);
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) sum += a_tile[ty][kk] * b_tile[kk][tx];
    __syncthreads();
  }
  if (row >= m || col >= n) return;
  Acc v = sum;
  if (accumulate) v += load<Acc>(c, row * n + col);
  if (bias.data) v += load<Acc>(bias, col);
  store(c, row * n + col, v);
}

}  // namespace

void gemm_simple(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
                 bool trans_b, Ref c, bool accumulate, Ref bias, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  const dim3 block(kTile, kTile);
  const dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile),
                  static_cast<unsigned>((m + kTile - 1) / kTile));
  with_acc({a, b, c, bias}, [&](auto acc) {
    KINTSUGI_CUDA_LAUNCH(gemm_simple_kernel<decltype(acc)>, grid, block, 0, stream, m, n, k, a,
                         trans_a, b, trans_b, c, accumulate, bias);
  });
  check_launch("gemm_simple_kernel", stream);
}

}  // namespace kintsugi::cuda
