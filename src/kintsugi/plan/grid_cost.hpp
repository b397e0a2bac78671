#pragma once
// 3D tensor parallelism in the cost model (docs/parallelism.md, "3D tensor parallelism";
// docs/planner.md, "3D tensor parallelism in the planner"): what one rank of an X x Y x Z grid
// holds of a block, the collectives of each of the block's linear layers, and how long the part
// of them that computation does not hide takes on the links the grid's groups sit on.
//
// The bytes are comm_volume.hpp's, layer by layer (its grid terms are their sums: a unit test
// holds them equal), so the time model prices exactly the bytes the communicator's counters
// measure. The overlap follows model/grid_linear.hpp: with parallel.tensor_grid_overlap each
// layer's z all-gather is issued before the previous layer's GEMM (the first layer of a block
// waits for its own: no prefetch across blocks), backward's all-reduce of dx runs under the dW
// GEMM, and a weight gradient's reduce-scatter under the next layer's backward (the block's last
// one is waited for at its end). The forward all-reduces and the x all-gathers are never
// hidden. Without overlap every collective is waited for.
#include <cstdint>
#include <vector>

#include "kintsugi/model/config.hpp"
#include "kintsugi/plan/cluster.hpp"

namespace kintsugi {

// One block's parameter elements on one rank of the grid: the weight blocks' 1 / (X Y Z) share,
// the biases' outer slices (entry layers' over y, exit layers' over x), the norms whole; and the
// part that is replicated over z (everything but the weight blocks: its gradient is a partial
// sum over z's sequences).
struct GridBlockElements {
  double local = 0, depth_replicated = 0;
};
GridBlockElements grid_block_elements(const ModelConfig& m, const std::vector<std::int64_t>& grid);

// One linear layer of a block on one rank, per micro-batch of `rows` token rows on the rank
// (micro_batch / Z sequences): its GEMM and the buffers of its collectives in bytes (the
// gathered or reduced size; ring_*_bytes turn them into bytes sent).
struct GridLayer {
  bool entry = true;   // qkv, fc (and up): input over x, output over y; else proj, fc2
  bool attention = true;  // in the attention half (else the MLP half)
  double gemm_m = 0, gemm_n = 0, gemm_k = 0;  // its forward product on the rank
  double gather = 0;           // the block all-gathered over z (before forward and backward)
  double scatter = 0;          // its weight gradient, reduce-scattered over z
  double forward_reduce = 0;   // its output, all-reduced over the inner dimension (x / y)
  double forward_gather = 0;   // exit: its output slices all-gathered over x to whole rows
  double backward_reduce = 0;  // its input gradient, all-reduced over the outer dimension
                               // (y / x; SwiGLU's gate and up share one, held by up)
  double backward_gather = 0;  // entry: the input gradient's slices all-gathered over x
  double flops() const { return 2 * gemm_m * gemm_n * gemm_k; }
};
// Forward order: qkv, proj, fc, (up,) fc2.
std::vector<GridLayer> grid_block_layers(const ModelConfig& m, const std::vector<std::int64_t>& grid,
                                         double rows, double activation_bytes, double param_bytes,
                                         double grad_bytes);

// The links the grid's x, y and z groups run on (ClusterSpec::ring_link of where their ranks
// sit: tensor-parallel rank t = x + X (y + Y z), the tp group's ranks adjacent in the world).
struct GridLinks {
  std::int64_t x = 1, y = 1, z = 1;
  LinkSpec x_link, y_link, z_link, plane_link;
};
GridLinks grid_links(const ClusterSpec& cluster, const std::vector<std::int64_t>& grid);

// Seconds of one collective over n ranks of `link`: the bytes sent at the rate the link runs
// it, plus the ring's latency-bound steps (2 (n - 1) for an all-reduce, n - 1 otherwise).
double collective_seconds(double bytes_sent, std::int64_t n, const LinkSpec& link, LinkUse use);

// Exposed communication of one block and micro-batch (seconds), forward and backward (full
// recomputation adds the forward's again). `gemm_seconds[i]`: layer i's forward product (dx
// and dW take as long each); `attention_seconds`: the attention core's forward (backward twice
// that), which also hides the proj layer's gathers.
struct GridBlockComm {
  double forward = 0, backward = 0;
};
GridBlockComm grid_block_comm_seconds(const std::vector<GridLayer>& layers,
                                      const std::vector<double>& gemm_seconds,
                                      double attention_seconds, const GridLinks& links,
                                      bool overlap);

}  // namespace kintsugi
