#pragma once
// 3D tensor parallelism's linear layer and column redistribution (comm/grid_groups.hpp,
// docs/parallelism.md "3D tensor parallelism"; the algorithm of Singh et al., arXiv 2305.13525,
// in our own words).
//
// y = x W^T + b with W [out, in], on a Gx x Gy x Gz grid. One of the grid's x and y dimensions
// splits the input dimension ("inner", whose partial products are summed), the other the output
// dimension ("outer"):
//   entry  (qkv, fc):   inner x, outer y    input [rows, in / Gx]  ->  output [rows, out / Gy]
//   exit   (proj, fc2): inner y, outer x    input [rows, in / Gy]  ->  output [rows, out / Gx]
// so an entry layer's output layout (columns over y) is the exit layer's input layout: attention
// and the GELU between them work on whole heads and MLP columns without moving anything. The
// rank's block W[outer slice, inner slice] is further sharded by rows over z; its input rows are
// this z's token rows (the caller's micro-batch is already split over z).
//   forward:  all-gather the block over z; y = x W^T (partial over inner); all-reduce over
//             inner; + b (the bias's outer slice, replicated over inner and z)
//   backward: all-gather the block over z again; dx = dy W (partial over outer); all-reduce
//             over outer; dW = dy^T x, reduce-scattered over z into this rank's shard; db from
//             this z's rows (all-reduced over z once per step: ParamSpec::depth_partial_grad)
//
// Overlap (parallel.tensor_grid_overlap, on by default; docs/parallelism.md "Overlap"), as
// AxoNN does it: a layer's caller names the layer that runs next, whose z all-gather is issued
// before this layer's GEMM (into the second weight buffer); backward's all-reduce of dx runs
// while the dW GEMM computes, and the reduce-scatter of dW runs on while the next layer's
// backward computes (two gradient buffers), completed by that layer or by flush() at the end of
// the block. The collectives, their inputs and their order on each group are those of the
// blocking path, so the results are the same bits and the byte counters the same numbers.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kintsugi/comm/grid_groups.hpp"
#include "kintsugi/model/carver.hpp"
#include "kintsugi/model/layers.hpp"

namespace kintsugi {

class GridLinear;

// What the grid layers have in flight between one layer and the next (overlap only).
struct GridInFlight {
  struct Gather {  // the next layer's block, gathered ahead into weight[1 - in_use]
    const GridLinear* layer = nullptr;
    CommHandle handle;
    double start = 0;
  };
  struct Scatter {  // a weight gradient's reduce-scatter from dweight[k], and what ends it
    CommHandle handle;
    std::function<void()> finish;
    std::string name;
    double start = 0;
    bool pending = false;
  };
  int in_use = 0;  // the weight buffer of the layer computing now
  Gather ahead;
  std::array<Scatter, 2> scatter;
  int next_scatter = 0;
};

// Scratch shared by a chunk's grid layers (one runs at a time), sized for the largest. With
// overlap every buffer but `in`..`interleave_index` has a second copy ([1]); without, [1] is
// empty.
struct GridWorkspace {
  std::array<Tensor, 2> weight;   // a block gathered over z (compute type)
  std::array<Tensor, 2> dweight;  // a block's weight gradient before its reduce-scatter (gradient type)
  std::array<Tensor, 2> dshard;   // a shard's gradient, to accumulate into an earlier micro-batch's
  std::array<Tensor, 2> dbias;    // a bias gradient, to accumulate likewise
  Tensor in, d_in;    // [rows, d / Gx]: an entry layer's input slice, its gradient
  Tensor out, d_out;  // [rows, d / Gx]: an exit layer's output slice, its gradient
  Tensor d_act;       // [rows, d_ff / Gy]: the gradient at the GELU's output
  Tensor gathered;    // [Gx rows, d / Gx]: slices gathered over x, in rank order
  Tensor slice_index, interleave_index;  // i32 row indices (GridColumns)
  std::shared_ptr<GridInFlight> flight = std::make_shared<GridInFlight>();
};

class GridLinear {
 public:
  enum class Role { entry, exit };
  GridLinear(LayerContext& ctx, const std::string& name, std::int64_t in, std::int64_t out,
             Role role, double init_std, bool bias = true);
  // Elements of the gathered block (workspace sizing).
  static std::int64_t block_elements(const TensorGrid& g, std::int64_t in, std::int64_t out,
                                     Role role);
  // y [rows, out / outer] = reduced x W^T + b, x [rows, in / inner]. `next`: the grid layer
  // that runs after this one (its block is gathered meanwhile, with overlap).
  void forward(const Tensor& x, const Tensor& y, const GridWorkspace& ws,
               const GridLinear* next = nullptr) const;
  // Parameter gradients, and with dx the input gradient: overwritten (or with accumulate_dx
  // added to), then all-reduced over the outer dimension unless reduce_dx is false (SwiGLU's
  // gate leaves its partial sum for the up projection to add to and reduce once). dx is final
  // on return; with overlap the parameter gradients may not be until the next layer's
  // backward or flush().
  void backward(const Tensor& dy, const Tensor& x, const Tensor* dx, const GridWorkspace& ws,
                bool accumulate_dx = false, bool reduce_dx = true,
                const GridLinear* next = nullptr) const;
  // Completes whatever the grid layers have in flight (the end of a block's backward, before
  // its gradients are final).
  static void flush(const LayerContext& ctx, const GridWorkspace& ws);

 private:
  Tensor block(const GridWorkspace& ws) const;  // the weight block, gathered over z if sharded
  void prefetch(const GridWorkspace& ws) const;  // starts gathering the block (overlap)
  void weight_gradient(const Tensor& dy, const Tensor& x, const GridWorkspace& ws) const;
  Communicator& inner() const;
  Communicator& outer() const;
  bool overlap() const { return ctx_.grid->overlap(); }
  // A span of the traced step's timeline (nothing without a trace).
  double trace_now() const;
  void trace(const char* what, int lane, double start) const;

  LayerContext& ctx_;
  std::string name_;
  Role role_;
  std::int64_t out_block_ = 0, in_block_ = 0;
  int w_ = -1, b_ = -1;
};

// The residual stream and the norms hold whole rows [rows, d]; entry layers read, and exit
// layers write, the x-rank's slice of the columns [rows, d / Gx]. Slicing is a local row
// gather; the way back all-gathers the slices over x and interleaves them. With Gx = 1 both are
// the identity (the caller passes the same tensor).
class GridColumns {
 public:
  GridColumns(Backend& backend, const TensorGrid& grid) : backend_(backend), grid_(grid) {}
  bool whole() const { return grid_.shape().x == 1; }
  // Fills ws's index tensors for `rows` rows (once, after the workspace is allocated).
  void write_indices(std::int64_t rows, const GridWorkspace& ws) const;
  void slice(const Tensor& full, const Tensor& part, const GridWorkspace& ws) const;
  void gather(const Tensor& part, const Tensor& full, const GridWorkspace& ws) const;

 private:
  Backend& backend_;
  const TensorGrid& grid_;
};

}  // namespace kintsugi
